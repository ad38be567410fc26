"""Announcements, offsets and pacing without root: the agent's gates and token
bucket, the plan's phases, the runner's relay against a fake controller, and
two real agents on loopback driven by a fake runner."""
import io
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from dataclasses import replace

import pytest

from badinput import InputError
from badinput.schema import to_json
from controller.cosched import Answer
from emulator.agent import protocol
from emulator.agent.gates import PhaseGates, TokenBucket
from emulator.agent.protocol import Go, PhaseAnswer
from emulator.run import relay
from experiment import model
from experiment.plan import build_plans
from experiment.rankplan import Peer, PhaseBody, Phases

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXP = os.path.join(ROOT, "experiments")


def _exp(topology=None, routing="coschedule", iterations=2, compute_ms=1, hosts="all", size_bytes=1 << 24,
         **extra):
    raw = {"name": "t", "topology": topology or {"kind": "single-switch", "hosts": 2},
           "scale": {"link": 2.5e-5, "bytes": 1.0e-3}, "controller": {"routing": routing},
           "jobs": [{"name": "j", "hosts": hosts,
                     "workload": {"collective": "all_reduce", "algorithm": "ring", "size_bytes": size_bytes,
                                  "iterations": iterations, "compute_ms": compute_ms}}], **extra}
    return model.parse(raw, "t.yaml")


# -- token bucket ---------------------------------------------------------------
def test_token_bucket_lets_a_burst_pass_then_holds_the_rate():
    b = TokenBucket(1000.0, 100, now=0.0)
    assert b.reserve(100, 0.0) == 0.0
    assert b.reserve(100, 0.0) == pytest.approx(0.1)
    assert b.reserve(50, 0.0) == pytest.approx(0.15)  # queued behind the first wait


def test_token_bucket_long_run_rate_is_the_rate():
    b = TokenBucket(1e6, 16384, now=0.0)
    t = 0.0
    for _ in range(200):
        t += b.reserve(16384, t)  # a sender that sleeps what it is told
    assert (200 - 1) * 16384 / t == pytest.approx(1e6, rel=0.01)


def test_token_bucket_does_not_bank_idle_time_beyond_its_burst():
    b = TokenBucket(1000.0, 100, now=0.0)
    assert b.reserve(100, 10.0) == 0.0
    assert b.reserve(100, 10.0) == pytest.approx(0.1)


# -- the runner's answer line, the agent's reader ------------------------------------
def test_the_answer_line_round_trips_and_carries_the_pace():
    d = relay.Decision("answered", Answer("j", 0.25, 1, True, 0.2, 0.1, 0.5))
    ans = protocol.read(protocol.line(relay.phase_answer(3, 1000.5, d, link_mbps=10.0)))
    assert (ans.iteration, ans.start_at, ans.delay_s, ans.status) == (3, 1000.5, 0.25, "answered")
    assert ans.pace_mbps == pytest.approx(2.0)
    assert (ans.pace_from, ans.pace_until) == pytest.approx((1000.6, 1001.0))
    ans = protocol.read(protocol.line(relay.phase_answer(0, 7.0, relay.fallback("timeout"), 10.0)))
    assert ans.status == "fallback" and ans.delay_s == 0 and ans.pace_mbps is None


ANSWER = {"ctl": "answer", "version": 1, "iteration": 1, "start_at": 2.0, "delay_s": 0.5, "status": "answered"}


@pytest.mark.parametrize("line, key", [
    ("go 1.0", "line"),                                                  # the old positional text
    (json.dumps({"ctl": "launch"}), "ctl"),
    (json.dumps({**ANSWER, "iteration": "x"}), "answer.iteration"),
    (json.dumps({**ANSWER, "version": 2}), "answer.version"),
    (json.dumps({k: v for k, v in ANSWER.items() if k != "start_at"}), "answer.start_at"),
    (json.dumps({**ANSWER, "status": "maybe"}), "answer.status"),
    (json.dumps({**ANSWER, "pace_mbps": 5.0}), "answer.pace_mbps"),        # a pace needs its window
    (json.dumps({**ANSWER, "extra": 1}), "answer.extra"),
])
def test_a_line_that_breaks_the_protocol_is_refused_naming_the_key(line, key):
    with pytest.raises(InputError) as e:
        protocol.read(line)
    assert e.value.key == key


def test_every_message_round_trips():
    from emulator.agent.protocol import Beat, Done, Error, Ready
    msgs = [Go(1.5), PhaseAnswer(2, 3.0, 0.1, "fallback"), Ready(4), Beat(1, 10, 20, 3, True, "in op x"),
            protocol.Announce(0, 9.5, {"job": "j"}), Done(1, 5, 5, 0), Error(None, "bad plan")]
    for m in msgs:
        assert protocol.read(protocol.line(m)) == m


# -- gates ----------------------------------------------------------------------
def _gates(announces=True):
    body = {"version": 1, "job": "j", "flows": [], "period_s": 0.7}
    return PhaseGates(Phases((0, 1, 2), 5.0, tuple(PhaseBody(i, body) for i in (0, 1, 2)) if announces else ()))


def test_first_ready_op_announces_once_with_the_planned_period():
    g = _gates()
    open_at, req = g.check(0, now=10.0)
    assert req == protocol.Announce(0, 10.0, {"version": 1, "job": "j", "flows": [], "period_s": 0.7})
    assert open_at == 15.0  # no answer yet: only the wait running out opens it
    assert g.check(0, now=10.1) == (15.0, None)


def test_gate_opens_at_the_answers_start_and_not_before_it_arrived():
    g = _gates()
    g.check(0, now=10.0)
    g.answer(PhaseAnswer(0, 10.3, 0.3, "answered"), now=10.01)
    assert g.open_at(0) == 10.3
    g.answer(PhaseAnswer(0, 99.0, 0.0, "answered"), now=10.02)  # a late duplicate changes nothing
    assert g.open_at(0) == 10.3
    g2 = _gates(announces=False)
    g2.check(1, now=20.0)
    g2.answer(PhaseAnswer(1, 19.0, 0.0, "fallback"), now=20.5)
    assert g2.open_at(1) == 20.5


def test_next_period_is_measured_without_the_wait():
    g = _gates()
    g.check(0, now=10.0)
    g.answer(PhaseAnswer(0, 10.3, 0.3, "answered"), now=10.01)
    ev = g.begin(0, now=10.3)
    assert ev["start"] == 10.0 and ev["end"] == 10.3 and ev["delay_emulated_s"] == 0.3
    assert g.begin(0, now=10.4) is None
    _, req = g.check(1, now=11.0)  # phase 0 began at 10.3: the period is 0.7, not 1.0
    assert req.body["period_s"] == pytest.approx(0.7)


def test_non_announcing_rank_waits_for_the_shared_answer():
    g = _gates(announces=False)
    assert g.check(0, now=10.0) == (15.0, None)
    g.answer(PhaseAnswer(0, 10.2, 0.2, "answered"), now=10.05)
    assert g.open_at(0) == 10.2
    assert g.begin(0, 10.2)["status"] == "answered"


# -- plans ----------------------------------------------------------------------
def test_coschedule_plans_announce_each_iterations_fabric_flows():
    exp = _exp({"kind": "single-switch", "hosts": 4}, iterations=3, compute_ms=10)
    (job,) = build_plans(exp, exp.fabric())
    for plan in job.ranks:
        assert plan.cosched.iterations == (0, 1, 2)
        assert len(plan.cosched.announce) == (3 if plan.rank == 0 else 0)
    first = job.ranks[0].cosched.announce[0]
    it, body = first.iteration, first.body
    sent = {}
    for plan in job.ranks:
        (op,) = [o for o in plan.ops if o.kind == "collective" and o.iteration == it]
        for x in op.sends:
            key = (job.hosts[plan.rank], job.hosts[x.dst])
            sent[key] = sent.get(key, 0) + x.size_bytes
    # The plan scales the real bytes once; the agents' sends are scaled (rounded) one by one.
    announced = {(f["src"], f["dst"]): f["size_bytes"] for f in body["flows"]}
    assert announced.keys() == sent.keys()
    assert all(announced[k] == pytest.approx(sent[k], rel=1e-3) for k in sent)
    assert body["collective"] == "all_reduce" and body["gpus"] == 4
    assert body["compute_s"] == pytest.approx(0.010 * exp.scale.dilation)
    assert body["overlap_s"] == 0
    # Period estimate: compute + the busiest NIC's bytes at its emulated rate.
    nic_bytes = max(sent.values())
    assert body["period_s"] == pytest.approx(body["compute_s"] + nic_bytes * 8 / 10e6, rel=1e-3)


def test_other_routings_plan_no_announcements():
    exp = _exp(routing="congestion-aware")
    (job,) = build_plans(exp, exp.fabric())
    assert all(p.cosched is None for p in job.ranks)


def test_nvlink_pairs_are_not_announced():
    exp = model.load(os.path.join(EXP, "ring-rail-16.yaml"), ["controller.routing=coschedule"])
    fab = exp.fabric()
    (job,) = build_plans(exp, fab)
    body = job.ranks[0].cosched.announce[0].body
    assert body["flows"] and all(not fab.same_server(f["src"], f["dst"]) for f in body["flows"])


def test_model_workload_phases_are_announced_and_the_bodies_parse():
    from controller.cosched import parse_announcement
    exp = model.load(os.path.join(EXP, "gpt-small-3d.yaml"), ["controller.routing=coschedule"])
    fab = exp.fabric()
    (job,) = build_plans(exp, fab)
    bodies = [a.body for p in job.ranks for a in p.cosched.announce]
    assert len(bodies) == len(job.ranks[0].cosched.iterations) >= 1
    for b in bodies:
        ann = parse_announcement(json.dumps(b), fab)
        assert ann.compute_s > 0 and ann.overlap_s <= ann.compute_s and ann.collective == "other"


# -- the relay against a fake controller -------------------------------------------
class FakeController(BaseHTTPRequestHandler):
    reply = (200, {"version": 1, "job": "j", "start_offset_s": 0.25, "priority": 1, "pace_share": None,
                   "pace_from_s": None, "pace_until_s": None})
    delay_s = 0.0
    bodies: list = []

    def do_POST(self):
        n = int(self.headers["Content-Length"])
        type(self).bodies.append((self.path, json.loads(self.rfile.read(n))))
        time.sleep(self.delay_s)
        code, body = self.reply
        data = json.dumps(body).encode() if not isinstance(body, bytes) else body
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_):
        pass


@pytest.fixture
def controller():
    handler = type("H", (FakeController,), {"bodies": []})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    srv.handle_error = lambda *_: None  # a client that timed out leaves a broken pipe behind
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", handler
    srv.shutdown()
    srv.server_close()


BODY = {"version": 1, "job": "j", "flows": [{"src": "h0", "dst": "h1", "size_bytes": 10}], "period_s": 1.0}


def test_post_reads_the_controllers_answer(controller):
    url, h = controller
    d = relay.post(url, BODY, 1.0)
    assert d == relay.Decision("answered", Answer("j", 0.25, 1))
    assert h.bodies == [("/dtnet/v1/announce", BODY)]


def test_a_4xx_is_a_fallback_that_names_the_error(controller):
    url, h = controller
    h.reply = (400, {"error": "flows[0].dst: expected a host of the fabric"})
    d = relay.post(url, BODY, 1.0)
    assert d.status == "fallback" and d.delay_s == 0
    assert d.reason == "HTTP 400: flows[0].dst: expected a host of the fabric"


def test_a_slow_controller_is_a_timeout_fallback(controller):
    url, h = controller
    h.delay_s = 0.5
    t = time.monotonic()
    d = relay.post(url, BODY, 0.1)
    assert d.status == "fallback" and d.reason == "timeout" and time.monotonic() - t < 0.45


def test_an_unreachable_controller_is_a_fallback():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connection refused
        d = relay.post(f"http://127.0.0.1:{port}", BODY, 0.5)
    assert d.status == "fallback" and d.reason.startswith("unreachable")


OK = {"version": 1, "job": "j"}


@pytest.mark.parametrize("answer,word", [
    (b"not json", "JSON"),
    ({**OK, "start_offset_s": -1}, "start_offset_s"),
    ({**OK, "start_offset_s": "soon"}, "start_offset_s"),
    ({**OK, "start_offset_s": 0, "pace_share": 2, "pace_from_s": 0, "pace_until_s": 1}, "pace_share"),
    ({**OK, "start_offset_s": 0, "pace_share": 0.2, "pace_from_s": 1, "pace_until_s": 0.5}, "pace_from_s"),
    ({"job": "j", "start_offset_s": 0}, "version"),
    ({**OK, "version": 2}, "version"),
    ({**OK, "start_at": 3}, "start_at"),
    ([1, 2], "object"),
])
def test_a_malformed_answer_is_a_fallback(controller, answer, word):
    url, h = controller
    h.reply = (200, answer)
    d = relay.post(url, BODY, 1.0)
    assert d.status == "fallback" and word in d.reason and d.delay_s == 0


def test_relay_tells_every_rank_of_the_job_and_only_them(controller):
    url, h = controller
    h.reply = (200, {**OK, "start_offset_s": 0.4, "priority": 1, "pace_share": 0.2, "pace_from_s": 0.2,
                     "pace_until_s": 0.8})
    clock = iter([100.0, 100.0])
    launcher = relay.Relay(url, dilation=40.0, clock=lambda: next(clock))
    pipes = {(j, r): io.StringIO() for j in ("a", "b") for r in range(2)}
    for (j, r), pipe in pipes.items():
        launcher.add(j, r, pipe, link_mbps=10.0)
    ev = launcher.handle("a", 0, protocol.Announce(2, 99.99, BODY))
    for r in range(2):
        ans = protocol.read(pipes["a", r].getvalue())
        assert ans.iteration == 2 and ans.start_at == pytest.approx(100.4)
        assert ans.pace_mbps == pytest.approx(2.0)
        assert (ans.pace_from, ans.pace_until) == pytest.approx((100.6, 101.2))
        assert pipes["b", r].getvalue() == ""
    # Events carry the offset both ways: the controller's (emulated) seconds and real-cluster ones.
    assert ev["offset_emulated_s"] == 0.4 and ev["offset_s"] == pytest.approx(0.4 / 40)
    assert (ev["pace_from_s"], ev["pace_until_s"]) == pytest.approx((0.2 / 40, 0.8 / 40))
    assert (ev["kind"], ev["status"], ev["start"], ev["end"], ev["flows"]) == ("announce", "answered", 99.99, 100.0, 1)


def test_relay_without_a_controller_falls_back_at_once():
    launcher = relay.Relay(None, dilation=40.0)
    pipe = io.StringIO()
    launcher.add("a", 0, pipe, 10.0)
    ev = launcher.handle("a", 0, protocol.Announce(0, time.time(), BODY))
    assert ev["status"] == "fallback" and ev["reason"] == "no controller"
    ans = protocol.read(pipe.getvalue())
    assert ans.delay_s == 0 and ans.status == "fallback" and ans.start_at <= time.time()


def test_summary_counts_answers_fallbacks_and_offsets_in_real_seconds():
    ev = [{"kind": "announce", "job": "a", "status": "answered", "offset_s": 0.01, "start": 0.0, "end": 0.04,
           "pace_share": None, "reason": None},
          {"kind": "announce", "job": "a", "status": "fallback", "offset_s": 0.0, "start": 1.0, "end": 1.04,
           "pace_share": None, "reason": "timeout"},
          {"kind": "offset", "job": "a", "start": 0.0, "end": 0.4},
          {"kind": "collective", "job": "a", "start": 0.0, "end": 1.0}]
    (s,) = relay.summarize(ev, dilation=40.0)
    assert (s["announced"], s["answered"], s["fallbacks"], s["shifted"]) == (2, 1, 1, 1)
    assert s["fallback_reasons"] == {"timeout": 1}
    assert s["offset_s_mean"] == pytest.approx(0.01) and s["round_trip_s_mean"] == pytest.approx(0.001)
    assert s["held_s_mean"] == pytest.approx(0.01)


# -- two real agents on loopback, a fake runner ----------------------------------------
def _loopback_plans(tmp_path, exp):
    (job,) = build_plans(exp, exp.fabric())
    ports = {p.rank: 0 for p in job.ranks}
    import socket
    for r in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports[r] = s.getsockname()[1]
    paths = []
    for p in job.ranks:
        p = replace(p, port=ports[p.rank], peers={k: Peer("127.0.0.1", ports[k]) for k in p.peers})
        path = tmp_path / f"rank{p.rank}.json"
        path.write_text(to_json(p))
        paths.append(str(path))
    return paths


def _run_agents(tmp_path, exp, answer):
    """Start the agents, answer every announcement with answer(iteration) ->
    (delay, status[, pace_mbps, pace_from_s, pace_until_s])."""
    procs = [subprocess.Popen([sys.executable, "-m", "emulator.agent", p], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, bufsize=1, cwd=ROOT)
             for p in _loopback_plans(tmp_path, exp)]
    try:
        for p in procs:
            assert json.loads(p.stdout.readline())["ctl"] == "ready"
        t0 = time.time() + 0.1
        for p in procs:
            p.stdin.write(protocol.line(Go(t0)))
            p.stdin.flush()
        events, answers, done = [], {}, set()
        lines: list = []
        readers = [threading.Thread(target=lambda i=i, p=p: [lines.append((i, ln)) for ln in p.stdout], daemon=True)
                   for i, p in enumerate(procs)]
        for th in readers:
            th.start()
        deadline = time.time() + 20
        seen = 0
        while len(done) < len(procs):
            assert time.time() < deadline, "agents did not finish"
            while seen < len(lines):
                i, ln = lines[seen]
                seen += 1
                msg = json.loads(ln)
                if msg.get("ctl") == "announce":
                    delay, status, *pace = answer(msg["iteration"])
                    start_at = time.time() + delay
                    answers[msg["iteration"]] = (start_at, msg)
                    pace = (pace[0], start_at + pace[1], start_at + pace[2]) if pace else ()
                    for p in procs:
                        p.stdin.write(protocol.line(PhaseAnswer(msg["iteration"], start_at, delay, status, *pace)))
                        p.stdin.flush()
                elif msg.get("ctl") == "done":
                    done.add(i)
                elif msg.get("ctl") == "error":
                    raise AssertionError(msg)
                elif "kind" in msg:
                    events.append(msg)
            time.sleep(0.01)
        # A finished agent stays until the runner lets it go (stdin closed): its exit would cost CPU
        # while other ranks still send.
        lingering = [p.poll() is None for p in procs]
        for p in procs:
            p.stdin.close()
        codes = [p.wait(5) for p in procs]
        assert lingering == [True] * len(procs) and codes == [0] * len(procs), (lingering, codes)
        return events, answers
    finally:
        for p in procs:
            if p.poll() is None:
                p.stdin.close()
                p.wait(5)


def test_agents_announce_each_phase_and_shift_together(tmp_path):
    exp = _exp(iterations=2, compute_ms=1)
    events, answers = _run_agents(tmp_path, exp, lambda it: (0.3 if it == 0 else 0.0, "answered"))
    assert sorted(answers) == [0, 1]
    assert all(msg["body"]["job"] == "j" for _, msg in answers.values())
    colls = [e for e in events if e["kind"] == "collective"]
    offsets = [e for e in events if e["kind"] == "offset"]
    assert len(colls) == 4 and len(offsets) == 4  # 2 ranks x 2 iterations
    for e in colls:
        assert e["start"] >= answers[e["iteration"]][0] - 1e-3  # no rank starts before start_at
        assert e["start"] - e["ready"] < 0.2  # waiting out the offset is not lateness
    shifted = [e for e in offsets if e["iteration"] == 0]
    assert all(e["delay_emulated_s"] == 0.3 and e["end"] - e["start"] >= 0.2 for e in shifted)
    # The announced period leaves the 0.3 s shift out: compute (40 ms) + a loopback all-reduce.
    assert answers[1][1]["body"]["period_s"] < 0.25


def test_agents_fall_back_to_sending_at_once(tmp_path):
    exp = _exp(iterations=1, compute_ms=1)
    t = time.time()
    events, answers = _run_agents(tmp_path, exp, lambda it: (0.0, "fallback"))
    offsets = [e for e in events if e["kind"] == "offset"]
    assert offsets and all(e["status"] == "fallback" and e["end"] - e["start"] < 0.1 for e in offsets)
    assert time.time() - t < 5


def test_a_paced_phase_sends_at_the_pace_then_the_next_runs_free(tmp_path):
    exp = _exp(iterations=2, compute_ms=1, size_bytes=1 << 28)  # each rank sends 268 kB per all-reduce
    # Iteration 0 is paced for 10 s, unless the next answer lifts the pace.
    events, _ = _run_agents(tmp_path, exp, lambda it: (0.0, "answered", 8.0, 0.0, 10.0) if it == 0
                            else (0.0, "answered"))
    dur = {it: max(e["end"] - e["start"] for e in events if e["kind"] == "collective" and e["iteration"] == it)
           for it in (0, 1)}
    paced_s = (268435 - 16384) * 8 / 8e6  # one slice of burst, then 8 Mb/s
    assert dur[0] >= 0.9 * paced_s
    assert dur[1] < 0.5 * dur[0]  # no pace for iteration 1; loopback is fast
    offsets = {e["iteration"]: e for e in events if e["kind"] == "offset" and e["rank"] == 0}
    assert offsets[0]["pace_mbps"] == 8.0 and offsets[1]["pace_mbps"] is None


def test_runner_reads_every_line_that_arrived_not_just_one():
    # Regression: readline() buffered an announcement behind an event, unseen
    # by select(), until the agent's gate gave up waiting for the answer.
    from emulator.run.runner import LineReader
    r, w = os.pipe()
    with os.fdopen(r, "r") as f:
        reader = LineReader()
        os.write(w, b'{"kind":"compute"}\n{"ctl":"announce"}\n{"par')
        assert reader.read(f) == ['{"kind":"compute"}\n', '{"ctl":"announce"}\n']
        os.write(w, b'tial":1}\n')
        assert reader.read(f) == ['{"partial":1}\n']
        os.close(w)
        assert reader.read(f) is None
