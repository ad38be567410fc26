"""The emulator engine: bring up the testbed, replay the plans on it, and its part of summary.json.

experiment.pipeline owns the run folder (lock, config.yaml, events.jsonl, summary.json written
also for a failed or interrupted run); agents' event lines go into events.jsonl as they arrive,
so a run that dies keeps what it did.
"""
from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from dataclasses import dataclass, field

from badinput import InputError
from badinput.paths import inside, open_out
from badinput.schema import to_json
from emulator.agent import protocol
from emulator.run import autoscale, fidelity, linksampler, relay
from emulator.run.faults import FaultInjector
from emulator.check import check
from emulator.run.programs import Programs
from emulator.run.watchdog import Watchdog
from emulator.testbed import capture, runstate, transport
from emulator.testbed.datapath import AFXDP_MTU, OVS_SEND_BUFFER_BYTES, netem_available
from emulator.testbed.lifecycle import Testbed
from emulator.testbed.process import stop_process
from experiment.engine import RunFailure
from experiment.model import Experiment
from experiment.outputs.summary import build as build_summary
from experiment.outputs.summary import read_events
from experiment.outputs.write import write_json
from experiment.pipeline import Engine, Run
from experiment.plan import build_plans


PROGRAM_POLL_S = 0.2  # how often a real program's output and exit are looked at


@dataclass
class Emulation:
    """What one emulator run gathers for its summary: the testbed's facts and the replay's parts
    (each None until it started, so teardown and summary need no guessing)."""
    calibration: dict | None = None
    datapath: str | None = None
    mtu_bytes: int | None = None
    controller: dict | None = None
    ovs_send_buffer: int | None = None
    switch_daemons: dict | None = None
    totals: dict = field(default_factory=dict)
    tcp: dict = field(default_factory=dict)
    t_start: float | None = None
    t_end: float | None = None
    monitor: object = None
    capture: object = None
    links: object = None
    faults: object = None
    programs: Programs | None = None
    program_links: dict = field(default_factory=dict)


class EmulatorEngine(Engine):
    """The emulator's part of a run: a testbed up, the replay on it, the testbed's summary sections."""
    name, label, calibrates = "emulate", "emulator", True

    def check(self, exp: Experiment) -> str:
        verdict = check(exp)  # faults and transport:, as `dtnet check` says (experiment.engine.ENGINES)
        if exp.latency_us and not netem_available():
            # Before anything is written: the run would otherwise be silently latency-free.
            raise InputError("topology.latency_us", "0 on this machine: its kernel has no netem (sch_netem), "
                             "so links cannot be delayed (the lab VM has it: docs/lab-vm.md)",
                             exp.topology["latency_us"], exp.source)
        self.verdict = verdict
        return verdict

    def plan(self, exp: Experiment, fabric) -> list:
        return build_plans(exp, fabric)

    def notes(self, exp: Experiment, run: Run) -> list[str]:
        return autoscale.config_notes(run.calibration) if run.calibration else []

    def execute(self, run: Run) -> None:
        exp = run.exp
        run.log(f"[run] {self.verdict}")
        self.em = em = Emulation(calibration=run.calibration)
        try:
            with Testbed(run.fabric, run.out_dir, policy=exp.routing, params=exp.policy_params,
                         scale_link=exp.scale.link, link_delay_us=exp.link_delay_us,
                         **transport.testbed_settings(exp),
                         datapath=exp.testbed.datapath, queue_packets=exp.testbed.queue_packets,
                         switch_daemons=exp.testbed.switch_daemons, userspace_tso=exp.testbed.userspace_tso,
                         switch_malloc=exp.testbed.switch_malloc,
                         ready_timeout_s=exp.testbed.ready_timeout_s, log=run.log) as tb:
                em.datapath, em.mtu_bytes = tb.datapath, tb.mtu
                em.switch_daemons = tb.switch_daemons_summary()
                Replay(exp, tb, run, em).replay()
                em.controller = tb.controller_status()
                em.ovs_send_buffer = tb.send_buffer_bytes()
                # Link loads, flows and every placement decision, for `dtnet report` and people.
                state = tb.controller_get("state")
                if state is not None:
                    write_json(run.path("controller-state.json"), state)
            run.status = "complete"
        except runstate.LeaseError as e:  # no free tag: nothing of this run started
            raise RunFailure(str(e)) from None
        finally:
            run.t_start = em.t_start

    def summary(self, run: Run) -> dict:
        return summarize(run.exp, run.fabric, run.jobs, run.events.path, self.em, run.status, run.error)


def run_experiment(exp: Experiment, out_dir: str, log=print, prepare=None, force: bool = False) -> dict:
    """The emulator's run through the pipeline (benches call it by this name)."""
    from experiment.pipeline import run

    return run(EmulatorEngine(), exp, out_dir, log=log, prepare=prepare, force=force)


class Replay:
    """One replay on a running testbed: agents (and programs) started, connected, the go, the
    wait for every rank, and a teardown that stops whatever of it started."""

    def __init__(self, exp: Experiment, tb: Testbed, run: Run, em: Emulation):
        self.exp, self.tb, self.run, self.em, self.log = exp, tb, run, em, run.log
        self.agent_jobs = [jp for jp in run.jobs if jp.program is None]
        self.program_jobs = [jp for jp in run.jobs if jp.program is not None]
        self.agents: list[tuple[str, int, subprocess.Popen]] = []
        self.sel = selectors.DefaultSelector()
        self.reader = LineReader()
        self.ready: set = set()
        self.done: dict = {}
        self.watch: Watchdog | None = None
        self.cosched = relay.Relay(tb.rest_url if tb.rest_port else None, exp.scale.dilation) \
            if exp.coschedules else None

    def replay(self) -> None:
        try:
            self._start_agents()
            self._wait_ready()
            self._go()
            self._wait_done()
        finally:
            self._teardown()

    def _start_agents(self) -> None:
        exp, tb, out_dir = self.exp, self.tb, self.run.out_dir
        for jp in self.agent_jobs:
            for plan in jp.ranks:
                path, err_path = write_plan(out_dir, jp.name, plan)
                with open_out(out_dir, os.path.relpath(err_path, out_dir)) as err:
                    p = tb.host(plan.host).popen([sys.executable, "-m", "emulator.agent", path],
                                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                                 text=True, bufsize=1)
                self.agents.append((jp.name, plan.rank, p))
                if self.cosched is not None:
                    self.cosched.add(jp.name, plan.rank, p.stdin, exp.emulated_mbps(tb.fabric.host_link_gbps(plan.host)))
                tb.state.add_pid(f"agent/{jp.name}/{plan.rank}", p.pid)
                self.sel.register(p.stdout, selectors.EVENT_READ, (jp.name, plan.rank, p))
        if self.agents:
            self.log(f"[run] {len(self.agents)} agents started; waiting for their connections")
        self.watch = Watchdog([(j, r) for j, r, _ in self.agents], exp.testbed.stall_timeout_s,
                              errors_in=inside(out_dir, "plans"))

    def _wait_ready(self) -> None:
        n, timeout_s = len(self.agents), self.exp.testbed.ready_timeout_s
        deadline = time.monotonic() + timeout_s
        while len(self.ready) < n:
            if time.monotonic() > deadline:
                missing = sorted(set((j, r) for j, r, _ in self.agents) - self.ready)[:5]
                raise RunFailure(f"agents not ready after {timeout_s:.0f}s: {missing}")
            self._pump(0.5)

    def _go(self) -> None:
        exp, tb, em, out_dir = self.exp, self.tb, self.em, self.run.out_dir
        em.capture = capture.start(exp, tb, out_dir, self.log)  # pcap/, listening before the go
        t0 = time.time() + 0.5
        em.monitor = fidelity.Monitor(_monitored_links(tb), paths=tb.net_dev_paths()).start()
        em.links = linksampler.start(tb, out_dir, exp.scale.link, exp.scale.dilation, t0, self.log)  # links.csv
        em.t_start = t0
        if self.agent_jobs:
            self.log(f"[run] replaying {sum(len(j.trace.ops[0]) for j in self.agent_jobs)} ops per rank "
                     f"(dilation {exp.scale.dilation:g}x)")
        if self.program_jobs:
            em.programs = Programs(tb, self.program_jobs, out_dir, exp.scale.bytes, t0, self.log)
            fabric_nics = {frozenset((h, tb.fabric.attachment(h)[0])) for h in em.programs.hosts()}
            em.program_links = {f"{a}-{b}": d["link_gbps"] * 1000 * tb.scale_link
                                for a, b, d in tb.fabric.links() if frozenset((a, b)) in fabric_nics}
            self.log(f"[run] starting {len(em.programs.ranks)} program ranks: "
                     + "; ".join(f"{jp.name}: {' '.join(jp.program[0]['argv'])}" for jp in self.program_jobs)
                     + f" (output in {inside(out_dir, 'programs')}/)")
        go = protocol.line(protocol.Go(t0))
        for _, _, p in self.agents:
            p.stdin.write(go)
            p.stdin.flush()
        self.watch.start(time.time())
        em.faults = FaultInjector(tb, exp.faults, t0, exp.scale.dilation, self.run.events.path, self.log).start()

    def _wait_done(self) -> None:
        exp, em, n = self.exp, self.em, len(self.agents)
        deadline = time.monotonic() + exp.testbed.timeout_s
        while len(self.done) < n or (em.programs is not None and em.programs.running()):
            if time.monotonic() > deadline:
                left = [f"{n - len(self.done)} agents unfinished"] if len(self.done) < n else []
                if em.programs is not None and em.programs.running():
                    left.append("programs still running (ended now): " + ", ".join(em.programs.unfinished()))
                raise RunFailure(f"run timed out after testbed.timeout_s={exp.testbed.timeout_s:g}s; "
                                 + "; ".join(left))
            self._pump(1.0 if em.programs is None else PROGRAM_POLL_S)
        em.t_end = time.time()
        em.monitor.stop()
        em.tcp = _tcp_counters(self.tb, self.run.jobs)
        if self.agents:  # a real program's bytes are not counted by dtnet: integrity stays null
            done = self.done.values()
            em.totals = {"bytes_sent": sum(m.bytes_sent for m in done),
                         "bytes_received": sum(m.bytes_received for m in done),
                         "checksum_errors": sum(m.checksum_errors for m in done)}

    def _pump(self, timeout: float) -> None:
        """Read what agents wrote (at most timeout seconds), then judge programs and the watchdog."""
        events, em = self.run.events, self.em
        if self.sel.get_map():
            ready_keys = self.sel.select(timeout)
        else:
            time.sleep(timeout)  # only programs: their output is read from files
            ready_keys = []
        for key, _ in ready_keys:
            job, rank, p = key.data
            lines = self.reader.read(key.fileobj)
            if lines is None:
                self.sel.unregister(key.fileobj)
                if (job, rank) not in self.done:
                    try:
                        rc = p.wait(5)
                    except subprocess.TimeoutExpired:
                        rc = None
                    self.watch.ended((job, rank), rc, time.time())
                continue
            for line in lines:
                self._handle(job, rank, line)
        now = time.time()
        if em.programs is not None:
            for ev in em.programs.poll(now):
                events.add(ev)
            events.flush()
            failure = em.programs.verdict(now)
            if failure:
                raise RunFailure(failure)
        self.watch.check(now)
        failure = self.watch.verdict(now)
        if failure:
            raise RunFailure(failure)

    def _handle(self, job: str, rank: int, line: str) -> None:
        events, watch = self.run.events, self.watch
        try:
            data = json.loads(line)
        except ValueError:
            return
        now = time.time()
        if not isinstance(data, dict) or "ctl" not in data:  # an event
            events.line(line)
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
            self.ready.add((job, rank))
        elif isinstance(msg, protocol.Done):
            self.done[(job, rank)] = msg
            watch.finished((job, rank))
        elif isinstance(msg, protocol.Error):
            watch.error((job, rank), msg.msg, now)
        elif isinstance(msg, protocol.Announce) and self.cosched is not None:
            events.add(self.cosched.handle(job, rank, msg))
            events.flush()

    def _teardown(self) -> None:
        em = self.em
        if em.programs is not None:
            # First: ranks still running get no chance to see the fabric go.
            for ev in em.programs.stop():
                self.run.events.add(ev)
            self.run.events.flush()
        for part in (em.capture, em.faults, em.monitor, em.links):
            if part is not None:
                part.stop()
        for _, _, p in self.agents:
            try:
                p.stdin.close()  # agents exit when their stdin closes
            except OSError:
                pass
        deadline = time.monotonic() + 1.0  # finished agents exit by themselves once let go
        for _, _, p in self.agents:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            stop_process(p, timeout_s=2.0)
        self.sel.close()


def write_plan(out_dir: str, job: str, plan) -> tuple[str, str]:
    """plans/<job>/rankN.json (an experiment.rankplan.RankPlan) for the agent; returns it and the
    path for the agent's stderr."""
    folder = inside(out_dir, "plans", job)
    os.makedirs(folder, exist_ok=True)
    with open_out(out_dir, "plans", job, f"rank{plan.rank}.json") as f:
        f.write(to_json(plan, skip_defaults=True))
    return inside(folder, f"rank{plan.rank}.json"), inside(folder, f"rank{plan.rank}.err")


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


def frame_bytes(exp: Experiment, datapath: str | None) -> int:
    """The links' frame (their MTU, as the testbed sets it), which sets a slow link's cap."""
    mtu = transport.mtu_of(exp)
    return min(mtu, AFXDP_MTU) if datapath == "afxdp" else mtu


def summarize(exp: Experiment, fabric, jobs, events_path, em: Emulation, status: str, error: str | None) -> dict:
    """summary.json of an emulator run: the shared figures plus the testbed's own sections."""
    events = read_events(events_path)
    totals = em.totals
    t_start, t_end = em.t_start or 0, em.t_end or time.time()
    window = _judged_window(jobs, events, t_start, t_end)
    programs = em.programs.results() if em.programs is not None else {}
    received = totals.get("bytes_received") or sum(e.get("size_bytes", 0) for e in events if e["kind"] == "transfer")
    if programs:
        # A real program's bytes: what its hosts' links delivered (frames, headers included) while
        # it reported (the window traffic_results divides by), not its start-up or warm-up.
        received += fidelity.delivered_bytes(em.monitor, em.program_links, *window)
    fid = fidelity.evaluate(em.monitor, events, *window, frame_bytes=frame_bytes(exp, em.datapath))
    if em.ovs_send_buffer is not None:
        fidelity.add_check(fid, fidelity.send_buffer_check(em.ovs_send_buffer, OVS_SEND_BUFFER_BYTES))
    if not fid["ok"]:
        fid["suggested_scale"] = {"link": exp.scale.link / 2, "bytes": exp.scale.bytes / 2}
    if totals and totals["bytes_sent"] != totals["bytes_received"]:
        status = "incomplete"
        error = f"bytes sent {totals['bytes_sent']} != bytes received {totals['bytes_received']}"
    summary = build_summary(exp, fabric, jobs, events, status=status, error=error,
                            bytes_received=received, engine={
        "datapath": em.datapath,
        "switch_daemons": em.switch_daemons,
        "frames": {"mtu_bytes": em.mtu_bytes,
                   "from": "transport.mtu_bytes" if exp.transport.mtu_bytes is not None else "sized to the switch links"},
        "tcp": em.tcp,
        **({"programs": {"ok": all(p["ok"] for p in programs.values()),
                         "time": "compute at this machine's speed, network at the emulated rate; figures "
                                 "divided by the dilation like every other (docs/real-programs.md)"}}
           if programs else {}),
        "integrity": {"bytes_sent_emulated": totals.get("bytes_sent"),
                      "bytes_received_emulated": totals.get("bytes_received"),
                      "checksum_errors": totals.get("checksum_errors")},
        "fidelity": fid,
        "controller": em.controller or {},
        "faults": em.faults.applied if em.faults is not None else [],
        "capture": em.capture.results if em.capture is not None else [],
        "announcements": relay.summarize(events, exp.scale.dilation),
        "duration_s_wall": (t_end - t_start) if em.t_start else None,
        **({"calibration": em.calibration} if em.calibration else {}),
    })
    for j in summary["jobs"]:
        if j["name"] in programs:
            j["program"] = programs[j["name"]]
    return summary
