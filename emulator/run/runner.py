"""`dtnet run`: plan, bring up the testbed, replay, collect, summarize.

events.jsonl is appended line by line as agents report, so a run that dies
keeps what it did; summary.json is written at the end, also for a failed
or interrupted run (with "status": "incomplete").
"""
from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time

from badinput import InputError
from badinput.paths import inside
from badinput.schema import to_json
from emulator.agent import protocol
from emulator.run import autoscale, fidelity, linksampler, relay
from emulator.run.faults import FaultInjector
from emulator.run.programs import Programs
from emulator.run.watchdog import Watchdog
from emulator.testbed import capture, runstate, transport
from emulator.testbed.datapath import OVS_SEND_BUFFER_BYTES, netem_available, ovs_send_buffer
from emulator.testbed.lifecycle import Testbed
from emulator.testbed.process import stop_process
from experiment.engine import RunFailure
from experiment.model import Experiment, write_resolved
from experiment.outputs.summary import build as build_summary
from experiment.outputs.summary import read_events
from experiment.outputs.write import write_after_run, write_json
from experiment.plan import build_plans


PROGRAM_POLL_S = 0.2  # how often a real program's output and exit are looked at


def run_experiment(exp: Experiment, out_dir: str, log=print, prepare=None) -> dict:
    """Raises FolderBusy at once when out_dir is another live run's folder.

    prepare(exp) -> (exp, calibration record) runs first, while the folder is held: `--auto-scale`
    (emulator.run.autoscale) probes there and picks the scale; the record goes into summary.json."""
    os.makedirs(out_dir, exist_ok=True)
    lock = runstate.lock_run_dir(out_dir)
    try:
        calibration = None
        if prepare is not None:
            exp, calibration = prepare(exp)
        return _run(exp, out_dir, log, calibration)
    finally:
        os.close(lock)


def _run(exp: Experiment, out_dir: str, log, calibration: dict | None = None) -> dict:
    log(f"[run] {transport.check(exp)}")  # transport: and policy refusals, before anything is written
    if exp.latency_us and not netem_available():
        # Before anything is written: the run would otherwise be silently latency-free.
        raise InputError("topology.latency_us", "0 on this machine: its kernel has no netem (sch_netem), "
                         "so links cannot be delayed (the lab VM has it: docs/lab-vm.md)",
                         exp.topology["latency_us"], exp.source)
    fabric = exp.fabric()
    jobs = build_plans(exp, fabric)  # bad workloads fail here, before anything starts
    write_resolved(exp, inside(out_dir, "config.yaml"),
                          notes=autoscale.config_notes(calibration) if calibration else ())
    events_path = inside(out_dir, "events.jsonl")
    open(events_path, "w").close()
    ctx = {"status": "incomplete", "error": None, "datapath": None, "controller": None,
           "totals": {}, "t_start": None, "t_end": None, "monitor": None, "calibration": calibration}
    try:
        with Testbed(fabric, out_dir, policy=exp.routing, params=exp.policy_params, scale_link=exp.scale.link,
                     link_delay_us=exp.link_delay_us, **transport.testbed_settings(exp),
                     datapath=exp.testbed.datapath, queue_packets=exp.testbed.queue_packets,
                     ready_timeout_s=exp.testbed.ready_timeout_s, log=log) as tb:
            ctx["datapath"] = tb.datapath
            _replay(exp, tb, jobs, out_dir, events_path, ctx, log)
            ctx["controller"] = tb.controller_status()
            if tb.datapath == "userspace":
                ctx["ovs_send_buffer"] = ovs_send_buffer()
            # Link loads, flows and every placement decision, for `dtnet report` and people.
            state = tb.controller_get("state")
            if state is not None:
                write_json(inside(out_dir, "controller-state.json"), state)
        ctx["status"] = "complete"
    except runstate.LeaseError as e:  # no free tag: nothing of this run started
        ctx["error"] = str(e)
        raise RunFailure(str(e)) from None
    except RunFailure as e:
        ctx["error"] = str(e)
        raise
    finally:
        summary = summarize(exp, fabric, jobs, events_path, ctx)
        write_json(inside(out_dir, "summary.json"), summary)
        write_after_run(out_dir, exp, jobs, summary, ctx["t_start"], log)  # trace.json, plots/
    return summary


def _replay(exp, tb, jobs, out_dir, events_path, ctx, log):
    agents = []  # (job, rank, Popen)
    sel = selectors.DefaultSelector()
    cosched = relay.Relay(tb.rest_url if tb.rest_port else None, exp.scale.dilation) \
        if exp.coschedules else None
    agent_jobs = [jp for jp in jobs if jp.program is None]
    program_jobs = [jp for jp in jobs if jp.program is not None]
    try:
        for jp in agent_jobs:
            for plan in jp.ranks:
                path, err_path = write_plan(out_dir, jp.name, plan)
                err = open(err_path, "w")
                p = tb.host(plan.host).popen([sys.executable, "-m", "emulator.agent", path],
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                             text=True, bufsize=1)
                err.close()
                agents.append((jp.name, plan.rank, p))
                if cosched is not None:
                    nic_mbps = exp.emulated_mbps(tb.fabric.host_link_gbps(plan.host))
                    cosched.add(jp.name, plan.rank, p.stdin, nic_mbps)
                tb.state.add_pid(f"agent/{jp.name}/{plan.rank}", p.pid)
                sel.register(p.stdout, selectors.EVENT_READ, (jp.name, plan.rank, p))
        n = len(agents)
        reader = LineReader()
        if n:
            log(f"[run] {n} agents started; waiting for their connections")
        ready, done = set(), {}
        watch = Watchdog([(j, r) for j, r, _ in agents], exp.testbed.stall_timeout_s,
                         errors_in=inside(out_dir, "plans"))
        programs = None
        with open(events_path, "a") as events:
            def pump(timeout):
                if sel.get_map():
                    ready_keys = sel.select(timeout)
                else:
                    time.sleep(timeout)  # only programs: their output is read from files
                    ready_keys = []
                for key, _ in ready_keys:
                    job, rank, p = key.data
                    lines = reader.read(key.fileobj)
                    if lines is None:
                        sel.unregister(key.fileobj)
                        if (job, rank) not in done:
                            try:
                                rc = p.wait(5)
                            except subprocess.TimeoutExpired:
                                rc = None
                            watch.ended((job, rank), rc, time.time())
                        continue
                    for line in lines:
                        handle(job, rank, line)
                now = time.time()
                if programs is not None:
                    for ev in programs.poll(now):
                        events.write(json.dumps(ev) + "\n")
                    events.flush()
                    failure = programs.verdict(now)
                    if failure:
                        raise RunFailure(failure)
                watch.check(now)
                failure = watch.verdict(now)
                if failure:
                    raise RunFailure(failure)

            def handle(job, rank, line):
                try:
                    data = json.loads(line)
                except ValueError:
                    return
                now = time.time()
                if not isinstance(data, dict) or "ctl" not in data:  # an event
                    events.write(line)
                    events.flush()
                    watch.progress((job, rank), now)
                    return
                try:
                    msg = protocol.read(data)
                except InputError as e:
                    watch.error((job, rank), f"a line the runner cannot read: {e}", now)
                    return
                if isinstance(msg, protocol.Beat):
                    watch.beat((job, rank), msg, now)
                elif isinstance(msg, protocol.Ready):
                    ready.add((job, rank))
                elif isinstance(msg, protocol.Done):
                    done[(job, rank)] = msg
                    watch.finished((job, rank))
                elif isinstance(msg, protocol.Error):
                    watch.error((job, rank), msg.msg, now)
                elif isinstance(msg, protocol.Announce) and cosched is not None:
                    events.write(json.dumps(cosched.handle(job, rank, msg)) + "\n")
                    events.flush()

            deadline = time.monotonic() + exp.testbed.ready_timeout_s
            while len(ready) < n:
                if time.monotonic() > deadline:
                    missing = sorted(set((j, r) for j, r, _ in agents) - ready)[:5]
                    raise RunFailure(f"agents not ready after {exp.testbed.ready_timeout_s:.0f}s: {missing}")
                pump(0.5)
            ctx["capture"] = capture.start(exp, tb, out_dir, log)  # pcap/, listening before the go
            t0 = time.time() + 0.5
            mon = fidelity.Monitor(_monitored_links(tb)).start()
            ctx["monitor"] = mon
            ctx["links"] = linksampler.start(tb, out_dir, exp.scale.link, exp.scale.dilation, t0, log)  # links.csv
            ctx["t_start"] = t0
            if agent_jobs:
                log(f"[run] replaying {sum(len(j.trace.ops[0]) for j in agent_jobs)} ops per rank "
                    f"(dilation {exp.scale.dilation:g}x)")
            if program_jobs:
                programs = ctx["programs"] = Programs(tb, program_jobs, out_dir, exp.scale.bytes, t0, log)
                fabric_nics = {frozenset((h, tb.fabric.attachment(h)[0])) for h in programs.hosts()}
                ctx["program_links"] = {f"{a}-{b}": d["link_gbps"] * 1000 * tb.scale_link
                                        for a, b, d in tb.fabric.links() if frozenset((a, b)) in fabric_nics}
                log(f"[run] starting {len(programs.ranks)} program ranks: "
                    + "; ".join(f"{jp.name}: {' '.join(jp.program[0]['argv'])}" for jp in program_jobs)
                    + f" (output in {inside(out_dir, 'programs')}/)")
            go = protocol.line(protocol.Go(t0))
            for _, _, p in agents:
                p.stdin.write(go)
                p.stdin.flush()
            watch.start(time.time())
            ctx["faults"] = FaultInjector(tb, exp.faults, t0, exp.scale.dilation, events_path, log).start()
            deadline = time.monotonic() + exp.testbed.timeout_s
            while len(done) < n or (programs is not None and programs.running()):
                if time.monotonic() > deadline:
                    left = [f"{n - len(done)} agents unfinished"] if len(done) < n else []
                    if programs is not None and programs.running():
                        left.append("programs still running (ended now): " + ", ".join(programs.unfinished()))
                    raise RunFailure(f"run timed out after testbed.timeout_s={exp.testbed.timeout_s:g}s; "
                                     + "; ".join(left))
                pump(1.0 if programs is None else PROGRAM_POLL_S)
            ctx["t_end"] = time.time()
            mon.stop()
            ctx["tcp"] = _tcp_counters(tb, jobs)
            if agents:  # a real program's bytes are not counted by dtnet: integrity stays null
                ctx["totals"] = {"bytes_sent": sum(m.bytes_sent for m in done.values()),
                                 "bytes_received": sum(m.bytes_received for m in done.values()),
                                 "checksum_errors": sum(m.checksum_errors for m in done.values())}
    finally:
        if ctx.get("programs"):
            # First: ranks still running get no chance to see the fabric go.
            ended = ctx["programs"].stop()
            with open(events_path, "a") as events:
                events.writelines(json.dumps(ev) + "\n" for ev in ended)
        if ctx.get("capture"):
            ctx["capture"].stop()
        if ctx.get("faults"):
            ctx["faults"].stop()
        if ctx.get("monitor"):
            ctx["monitor"].stop()
        if ctx.get("links"):
            ctx["links"].stop()
        for _, _, p in agents:
            try:
                p.stdin.close()  # agents exit when their stdin closes
            except OSError:
                pass
        for _, _, p in agents:
            stop_process(p, timeout_s=2.0)
        sel.close()


def write_plan(out_dir: str, job: str, plan) -> tuple[str, str]:
    """plans/<job>/rankN.json (an experiment.rankplan.RankPlan) for the agent; returns it and the
    path for the agent's stderr."""
    folder = inside(out_dir, "plans", job)
    os.makedirs(folder, exist_ok=True)
    path = inside(folder, f"rank{plan.rank}.json")
    with open(path, "w") as f:
        f.write(to_json(plan, skip_defaults=True))
    return path, inside(folder, f"rank{plan.rank}.err")


class LineReader:
    """Every whole line that has arrived on a pipe, without blocking.

    A buffered readline() may pull several lines out of the pipe and return
    one: the rest then wait unseen by select() until the agent writes again,
    and an agent that announced a phase writes nothing until it is answered.
    """

    def __init__(self):
        self.partial: dict[int, bytes] = {}

    def read(self, f) -> list[str] | None:
        """The lines now complete (maybe none); None at end of file."""
        fd = f.fileno()
        data = os.read(fd, 1 << 16)
        if not data:
            return None
        *lines, self.partial[fd] = (self.partial.get(fd, b"") + data).split(b"\n")
        return [ln.decode(errors="replace") + "\n" for ln in lines]


def parse_snmp_tcp(text: str, prefix: str = "Tcp:") -> dict:
    """A header/value line pair of /proc/net/snmp (or netstat's TcpExt:) as a dict."""
    rows = [ln.split() for ln in text.splitlines() if ln.startswith(prefix)]
    if len(rows) < 2:
        return {}
    return {k: int(v) for k, v in zip(rows[0][1:], rows[1][1:]) if v.lstrip("-").isdigit()}


# TcpExt counters that tell a real drop (fast retransmit) from a timer firing
# on a merely late packet (timeouts, spurious RTOs).
TCPEXT_KEYS = {"TCPTimeouts": "timeouts", "TCPSpuriousRTOs": "spurious_rtos", "TCPFastRetrans": "fast_retrans",
               "TCPLossProbes": "loss_probes", "TCPSackRecovery": "sack_recoveries",
               # Reordering, not loss: out-of-order arrivals and duplicates the receiver reported.
               "TCPOFOQueue": "out_of_order", "TCPDSACKRecv": "dsacks_received"}


def _tcp_counters(tb: Testbed, jobs) -> dict:
    """Retransmitted segments over all agent hosts: loss the real fabric would not have."""
    total = {"out_segs": 0, "retrans_segs": 0, **{k: 0 for k in TCPEXT_KEYS.values()}}
    for jp in jobs:
        for h in jp.hosts:
            c = parse_snmp_tcp(tb.host(h).cmd("cat /proc/net/snmp"))
            total["out_segs"] += c.get("OutSegs", 0)
            total["retrans_segs"] += c.get("RetransSegs", 0)
            ext = parse_snmp_tcp(tb.host(h).cmd("cat /proc/net/netstat"), prefix="TcpExt:")
            for k, name in TCPEXT_KEYS.items():
                total[name] += ext.get(k, 0)
    return total


def _judged_window(jobs, events, t_start: float, t_end: float) -> tuple[float, float]:
    """The seconds the fidelity checks judge. A real program spends its first seconds starting
    Python, importing torch and meeting its peers: not the experiment. With program jobs the
    window runs from the first measured event (a marker, or an agent's op) to the last."""
    if not any(jp.program is not None for jp in jobs):
        return t_start, t_end
    spans = [(e["start"], e["end"]) for e in events if "start" in e and "end" in e
             and e.get("kind") in ("compute", "collective", "send", "recv", "iteration")]
    if not spans:
        return t_start, t_end
    return max(t_start, min(a for a, _ in spans)), min(t_end, max(b for _, b in spans))


def _monitored_links(tb: Testbed) -> dict:
    """One root-namespace device per link: both directions read from it."""
    out = {}
    for a, b, d in tb.fabric.links():
        # The switch side of a host link lives in the root namespace.
        node, peer = (b, a) if tb.fabric.node(a)["role"] == "host" else (a, b)
        out[tb.intf(node, peer)] = (f"{a}-{b}", d["link_gbps"] * 1000 * tb.scale_link)
    return out


def summarize(exp: Experiment, fabric, jobs, events_path, ctx) -> dict:
    """summary.json of an emulator run: the shared figures plus the testbed's own sections."""
    events = read_events(events_path)
    totals = ctx["totals"]
    t_start, t_end = ctx["t_start"] or 0, ctx["t_end"] or time.time()
    window = _judged_window(jobs, events, t_start, t_end)
    programs = ctx["programs"].results() if ctx.get("programs") else {}
    received = totals.get("bytes_received") or sum(e.get("size_bytes", 0) for e in events if e["kind"] == "transfer")
    if programs:
        # A real program's bytes: what its hosts' links delivered (frames, headers included) while
        # it reported (the window traffic_results divides by), not its start-up or warm-up.
        received += fidelity.delivered_bytes(ctx["monitor"], ctx["program_links"], *window)
    fid = fidelity.evaluate(ctx["monitor"], events, *window)
    if ctx.get("ovs_send_buffer") is not None:
        fidelity.add_check(fid, fidelity.send_buffer_check(ctx["ovs_send_buffer"], OVS_SEND_BUFFER_BYTES))
    if not fid["ok"]:
        fid["suggested_scale"] = {"link": exp.scale.link / 2, "bytes": exp.scale.bytes / 2}
    if totals and totals["bytes_sent"] != totals["bytes_received"]:
        ctx["status"] = "incomplete"
        ctx["error"] = (f"bytes sent {totals['bytes_sent']} != bytes received {totals['bytes_received']}")
    summary = build_summary(exp, fabric, jobs, events, status=ctx["status"], error=ctx["error"],
                            bytes_received=received, engine={
        "datapath": ctx["datapath"],
        "tcp": ctx.get("tcp", {}),
        **({"programs": {"ok": all(p["ok"] for p in programs.values()),
                         "time": "compute at this machine's speed, network at the emulated rate; figures "
                                 "divided by the dilation like every other (docs/real-programs.md)"}}
           if programs else {}),
        "integrity": {"bytes_sent_emulated": totals.get("bytes_sent"),
                      "bytes_received_emulated": totals.get("bytes_received"),
                      "checksum_errors": totals.get("checksum_errors")},
        "fidelity": fid,
        "controller": ctx["controller"] or {},
        "faults": ctx["faults"].applied if ctx.get("faults") else [],
        "capture": ctx["capture"].results if ctx.get("capture") else [],
        "announcements": relay.summarize(events, exp.scale.dilation),
        "duration_s_wall": (t_end - t_start) if ctx["t_start"] else None,
        **({"calibration": ctx["calibration"]} if ctx.get("calibration") else {}),
    })
    for j in summary["jobs"]:
        if j["name"] in programs:
            j["program"] = programs[j["name"]]
    return summary
