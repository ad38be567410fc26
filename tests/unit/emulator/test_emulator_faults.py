"""Faults and failures without root: the `faults:` kinds and their checks, the
straggler in the plan and the agent, the injector's commands, and the
runner's watchdog that names the rank and step of a dead or hung agent."""
import json

import pytest

from emulator.agent.protocol import Beat
from emulator.agent.replay import Agent
from emulator.run.faults import FaultInjector
from emulator.run.watchdog import Watchdog
from badinput import InputError
from experiment import model
from experiment.model import Fault
from experiment.plan import build_plans
from topologies import fat_tree

BASE = ("name: f\ntopology: {kind: fat-tree, k: 4}\nscale: {link: 2.5e-5, bytes: 1.0e-3}\n"
        "jobs: [{hosts: {count: 8}, workload: {collective: all_reduce, size_bytes: 1000000}}]\n")


def load(tmp_path, faults: str):
    p = tmp_path / "e.yaml"
    p.write_text(BASE + f"faults: [{faults}]\n")
    return model.load(str(p))


def test_every_fault_kind_parses_and_round_trips(tmp_path):
    exp = load(tmp_path, "{at_ms: 30, controller: restart, down_ms: 20}, {at_ms: 5, switch: agg0_0, state: down},"
                         "{at_ms: 0, straggler: h3, factor: 2}, {at_ms: 9, switch: agg0_0, state: up},"
                         "{at_ms: 7, link: [core0, agg2_0], state: down}")
    assert [f.kind for f in exp.faults] == ["straggler", "switch", "link", "switch", "controller"]
    assert [f.describe() for f in exp.faults] == ["straggler h3 x2", "switch agg0_0 down", "link core0-agg2_0 down",
                                                  "switch agg0_0 up", "controller restart (down 20 ms)"]
    assert model.parse(model.to_dict(exp), file=exp.source) == exp


@pytest.mark.parametrize("fault, key, words", [
    ("{at_ms: 5, switch: h0, state: down}", "faults[0].switch", "an OpenFlow switch"),
    ("{at_ms: 5, switch: agg0_0}", "faults[0].state", "down or up"),
    ("{at_ms: 5, straggler: h12, factor: 2}", "faults[0].straggler", "a host that runs a rank"),
    ("{at_ms: 5, straggler: h1, factor: 0.5}", "faults[0].factor", "1..1000"),
    ("{at_ms: 5, straggler: h1}", "faults[0].factor", "a value"),
    ("{at_ms: 5, controller: reboot}", "faults[0].controller", "restart"),
    ("{at_ms: 5, controller: restart, down_ms: -1}", "faults[0].down_ms", "milliseconds in 0..8.64e+07"),
    ("{at_ms: 1.0e+15, controller: restart}", "faults[0].at_ms", "milliseconds in 0..8.64e+07"),
    ("{at_ms: 5, controller: restart, state: down}", "faults[0].state", "no such key"),
    ("{at_ms: 5, switch: agg0_0, link: [agg0_0, core0], state: down}", "faults[0]", "exactly one of"),
    ("{at_ms: 5}", "faults[0]", "exactly one of link, switch, straggler, controller"),
    ("{at_ms: 1, straggler: h1, factor: 2}, {at_ms: 2, straggler: h1, factor: 3}", "faults[1].straggler",
     "one straggler"),
])
def test_bad_faults_are_one_line_errors_naming_the_key(tmp_path, fault, key, words):
    with pytest.raises(model.InputError) as e:
        load(tmp_path, fault)
    msg = str(e.value)
    assert "\n" not in msg and f": {key}: " in msg and words in msg, msg


def test_stall_timeout_is_a_testbed_key(tmp_path):
    p = tmp_path / "e.yaml"
    p.write_text(BASE)
    assert model.load(str(p), ["testbed.stall_timeout_s=12"]).testbed.stall_timeout_s == 12.0
    with pytest.raises(model.InputError, match="testbed.stall_timeout_s"):
        model.load(str(p), ["testbed.stall_timeout_s=0.5"])


def _ring(tmp_path, faults=""):
    exp = load(tmp_path, faults) if faults else None
    if exp is None:
        p = tmp_path / "e.yaml"
        p.write_text(BASE.replace("size_bytes: 1000000}", "size_bytes: 1000000, iterations: 2, compute_ms: 10}"))
        exp = model.load(str(p))
    return exp, build_plans(exp, exp.fabric())[0]


def test_straggler_is_in_its_ranks_plan_only_in_emulated_seconds(tmp_path):
    exp, job = _ring(tmp_path, "{at_ms: 25, straggler: h3, factor: 2.5}")
    plans = {p.host: p for p in job.ranks}
    assert plans["h3"].straggler.from_s == pytest.approx(25e-3 * 40) and plans["h3"].straggler.factor == 2.5
    assert all(p.straggler is None for h, p in plans.items() if h != "h3")
    agent = Agent(plans["h3"])
    agent.t_go = 100.0
    assert agent.slowdown(100.5) == 1.0 and agent.slowdown(101.0) == 2.5
    assert Agent(plans["h2"]).slowdown(1e12) == 1.0


def test_agent_says_which_op_step_and_peer_it_waits_for(tmp_path):
    _, job = _ring(tmp_path)
    agent = Agent(job.ranks[1])
    assert agent.where() == "before op it0/compute (iteration 0) (its dependencies are not done)"
    agent.ops[0].started = True
    assert agent.where() == "computing op it0/compute (iteration 0)"
    agent.ops[0].done = agent.ops[1].started = True
    r = agent.ops[1].spec.recvs[0]
    tid, src, step, size = r.tid, r.src, r.step, r.size_bytes
    agent.recv_got[tid] = 10
    assert agent.where() == (f"in op it0/all_reduce (iteration 0), step {step}: waiting for rank {src} "
                             f"(10 of {size} bytes arrived)")
    # A peer that closes its connection early is a failure naming it; one that owed nothing is not.
    agent._closed_by(src)
    assert agent.failed.startswith(f"rank 1: connection from rank {src} closed with ")
    quiet = Agent(job.ranks[1])
    quiet._closed_by(5)
    assert quiet.failed is None


RANKS = [("j", r) for r in range(4)]


def test_watchdog_names_the_dead_rank_before_its_peers_complaints():
    w = Watchdog(RANKS, stall_s=10)
    w.start(0.0)
    w.beat(("j", 3), Beat(3, 5, 5, 1, False, "in op it4/all_reduce (iteration 4), step 5: waiting for rank 2"),
           1.0)
    w.error(("j", 0), "rank 0: connection from rank 3 closed with 100 bytes still to come; ...", 2.0)
    assert w.verdict(2.5) is None  # the grace period: the death may still come in
    w.ended(("j", 3), -9, 2.6)
    msg = w.verdict(3.1)
    assert msg.startswith("agent j/rank 3 died (killed by SIGKILL); its last report (1.6 s before): "
                          "in op it4/all_reduce (iteration 4), step 5")
    assert "also: agent j/rank 0: rank 0: connection from rank 3 closed" in msg


def test_watchdog_finds_a_silent_agent_and_a_stalled_job():
    w = Watchdog(RANKS, stall_s=10)
    w.start(0.0)
    for t in range(1, 12):
        for r in range(3):  # rank 3 never beats again; the others beat but move nothing
            w.beat(("j", r), Beat(0, 1, 1, 0, False, f"in op x, step 0: waiting for rank {(r - 1) % 4}"), float(t))
        w.check(float(t))
    assert w.verdict(11.0) is None
    w.check(12.0)
    msg = w.verdict(13.5)
    assert msg.startswith("agent j/rank 3 stopped responding: no heartbeat for 11 s; it had not reported yet")
    assert "job j made no progress for 11 s (testbed.stall_timeout_s=10): rank 0 in op x, step 0" in msg


def test_watchdog_leaves_busy_and_finished_ranks_alone():
    w = Watchdog(RANKS[:2], stall_s=10)
    w.start(0.0)
    w.finished(("j", 0))
    w.ended(("j", 0), 0, 1.0)
    for t in range(1, 60):  # a long compute: counters still, but busy
        w.beat(("j", 1), Beat(0, 0, 0, 0, True, "computing"), float(t))
        w.check(float(t))
    assert w.verdict(60.0) is None


class FakeTB:
    fabric = fat_tree(4)

    def __init__(self):
        self.restarts = []

    def mn_name(self, node):
        return "xa" + node

    def intf(self, node, peer):
        return f"xa{node}-eth{self.fabric.port(node, peer)}"

    ready_timeout_s = 1.0

    def vsctl(self, switch=None):
        return ["ovs-vsctl"]

    def ofctl_target(self, switch):
        return self.mn_name(switch)

    def ip_argv(self, node):
        return ["ip"]

    def in_netns_argv(self, node, argv):
        return argv

    def controller_status(self):
        return {"switches_ready": ["agg0_0"]}

    def restart_controller(self, down_s, interrupted=None):
        self.restarts.append(down_s)
        return {"stopped_at": 1.0, "started_at": 2.0, "ready_at": 3.5}


def _injector(tmp_path, faults, outputs=None):
    calls = []

    def run(cmd, **kw):
        calls.append((cmd, kw.get("input")))
        out = (outputs or {}).get(cmd[1], "")
        return type("R", (), {"returncode": 0, "stderr": "", "stdout": out})()
    tb = FakeTB()
    inj = FaultInjector(tb, faults, t0=100.0, dilation=40.0, events_path=str(tmp_path / "ev.jsonl"),
                        log=lambda *_: None, run=run)
    return inj, tb, calls


def test_a_switch_crash_cuts_its_session_links_and_tables_then_comes_back(tmp_path):
    down, up = Fault(5, switch="agg0_0", state="down"), Fault(9, switch="agg0_0", state="up")
    inj, _, calls = _injector(tmp_path, [down, up], {"get-controller": "tcp:127.0.0.1:6653\n"})
    ev = inj.apply(down)
    fab = FakeTB.fabric
    nbrs = sorted(fab.graph.neighbors("agg0_0"))
    # Its own ports, and its neighbours' ports toward it (all switches here).
    devs = [f"xaagg0_0-eth{fab.port('agg0_0', n)}" for n in nbrs] + [f"xa{n}-eth{fab.port(n, 'agg0_0')}" for n in nbrs]
    calls[:] = [c for c in calls if c[0][0] != "cat"]  # drop the carrier read back
    assert [c[0][:2] for c in calls] == [["ovs-vsctl", "get-controller"], ["ovs-vsctl", "del-controller"],
                                         ["ip", "-batch"], ["ovs-ofctl", "-O"], ["ovs-ofctl", "-O"]]
    assert calls[2][1] == "".join(f"link set dev {d} down\n" for d in devs)
    assert {c[0][3] for c in calls[3:]} == {"del-flows", "del-groups"}
    assert ev["ok"] and ev["fault"] == "switch down" and ev["links"] == 4
    calls.clear()
    inj.apply(up)  # reconnected and installed first, then its links
    calls[:] = [c for c in calls if c[0][0] != "cat"]
    assert calls[0][0] == ["ovs-vsctl", "set-controller", "xaagg0_0", "tcp:127.0.0.1:6653"]
    assert calls[1] == (["ip", "-batch", "-"], "".join(f"link set dev {d} up\n" for d in devs))


def test_controller_restart_and_straggler_are_recorded_as_events(tmp_path):
    faults = [Fault(0, straggler="h3", factor=2.0), Fault(30, controller="restart", down_ms=25)]
    inj, tb, calls = _injector(tmp_path, faults)
    for f in faults:
        inj.apply(f)
    assert tb.restarts == [pytest.approx(1.0)]  # 25 ms real x 40
    assert calls == []
    evs = [json.loads(line) for line in open(tmp_path / "ev.jsonl")]
    assert [e["fault"] for e in evs] == ["straggler", "controller restart"]
    assert evs[0]["host"] == "h3" and evs[0]["factor"] == 2.0
    assert evs[1]["outage_s_wall"] == pytest.approx(2.5) and all(e["ok"] for e in evs)


def test_a_fault_that_fails_is_recorded_not_raised(tmp_path):
    inj, tb, _ = _injector(tmp_path, [])

    def broken(**_):
        raise RuntimeError("controller did not come back")
    tb.restart_controller = broken
    ev = inj.apply(Fault(1, controller="restart"))
    assert not ev["ok"] and "did not come back" in ev["error"]


@pytest.mark.parametrize("faults, key", [
    # (Times beyond a day are refused when the file is read: badinput.limits.)
    ("{at_ms: 8.0e+7, link: [core0, agg0_0], state: down}", "faults[0].at_ms"),
    ("{at_ms: 16000, switch: agg0_0, state: down}", "faults[0].at_ms"),
    # Listed out of time order: the error names the file's own index, not the sorted one.
    ("{at_ms: 1.0e+6, controller: restart}, {at_ms: 5, switch: agg0_0, state: down}", "faults[0].at_ms"),
])
def test_a_fault_past_the_runs_time_limit_is_refused_at_check(tmp_path, faults, key):
    from emulator.run import faults as fault_mod
    exp = load(tmp_path, faults)
    with pytest.raises(InputError) as ei:
        fault_mod.check(exp)
    assert ei.value.key == key and "testbed.timeout_s" in str(ei.value) and "\n" not in str(ei.value)
    assert str(tmp_path / "e.yaml") in str(ei.value)


def test_a_fault_within_the_limit_passes_and_down_ms_counts(tmp_path):
    from emulator.run import faults as fault_mod
    # testbed.timeout_s 600 s of wall clock at dilation 40: 15000 ms of real-cluster time.
    assert fault_mod.check(load(tmp_path, "{at_ms: 14000, controller: restart}")) is None
    with pytest.raises(InputError, match="down_ms"):
        fault_mod.check(load(tmp_path, "{at_ms: 14000, controller: restart, down_ms: 2000}"))


def test_the_fault_thread_reports_a_failure_and_every_fault_it_dropped(tmp_path):
    logs = []
    faults = [Fault(0, straggler="h3", factor=2.0), Fault(1, link=("core0", "agg0_0"), state="down"),
              Fault(2, link=("core0", "agg0_0"), state="up")]
    inj, _, _ = _injector(tmp_path, faults)
    inj.log = logs.append
    inj.t0 = -1e9  # every fault is due at once
    real = inj.apply

    def apply(f):
        if f is faults[1]:
            raise OverflowError("timestamp too large")
        return real(f)
    inj.apply = apply
    inj.start()
    inj._thread.join(10)
    assert not inj._thread.is_alive()
    assert [(e["fault"], e["ok"]) for e in inj.applied] == [("straggler", True), ("link down", False),
                                                            ("link up", False)]
    assert "OverflowError" in inj.applied[2]["error"]
    assert any("fault thread failed" in m and "2 fault(s) not applied" in m for m in logs)
