"""`dtnet run` with `engine: packet`: the experiment at packet level on ns-3, into the same run folder.

Placement, traces, schedules, routes and outputs are the ones the other engines use; ns-3 moves
every packet over TCP at the links' real rates, MTU, buffers and latency (packetsim.transport),
in simulated time and real-cluster units (summary.json says dilation 1). What the model assumes
is written into summary.json ("model"); docs/packet-engine.md says how it was built and how fast.
"""
from __future__ import annotations

import math
import os
import time

from badinput import InputError
from badinput.paths import open_out
from experiment.engine import RunFailure, refuse_non_replay
from experiment.pipeline import Engine, Run
from experiment.transport import check_transport
from experiment.outputs.announcements import summarize as announcement_summary
from experiment.outputs.links import COLUMNS as LINK_COLUMNS, QUEUE_COLUMNS
from experiment.outputs.summary import build as build_summary, job_results
from experiment.plan import announcements, job_traces
from experiment.outputs.write import write_json
from flowsim.network import Net
from flowsim.control import ControllerRouter, table_router
from flowsim.routing import EcmpRouter
from experiment.plan import job_predictions
from flowsim.runner import exp_for_outputs, host_fault_fields, split_faults, time_scale
from packetsim import emulated, ns3, scenario
from packetsim.control import ControllerLoop
from packetsim.transport import settings

ENGINE = "packet"
LINK_BINS = 200         # links.csv intervals over the run's bandwidth-bound duration, about
RTO_MIN_S = 0.2         # Linux's minimum retransmission timeout
END_S = 24 * 3600.0     # simulated seconds after which the driver gives up
EVENTS_PER_S = 150_000  # ns-3 events a CPU second here: 120k to 217k in docs/packet-engine.md "Speed", less on big runs
MAX_WALL_S = 3600.0     # estimated longer: refused without force
MAX_RANKS = 4096        # more: refused without force before planning (the plan alone takes long)
PROGRESS_EVERY_S = 5.0


def check(exp, force: bool = False) -> str:
    """Refuse what the packet engine cannot model (InputError, exit 2); one line on what it runs.
    `dtnet check` refuses what `dtnet run` would without --force: too many GPUs (the run's hour
    estimate needs the plan, so only the run says that one)."""
    refuse_non_replay(exp, "packet", "it writes queue statistics instead")
    ranks = exp.fabric().host_count  # the fabric's GPUs: a bound on the ranks, known before planning
    if ranks > MAX_RANKS and not force:
        raise InputError("engine", f"at most {MAX_RANKS:,} GPUs at packet level (more would take hours; run "
                         "it with engine: flow, or --force it)", f"engine: packet on {ranks:,} hosts", exp.source)
    check_transport(exp, ENGINE)
    u = emulated.units(exp)
    if u is not None:
        emulated.check(exp)
    t = settings(exp) if u is None else emulated.transport(exp)
    if t.spray and exp.faults:
        raise InputError("faults", "no faults with spraying on engine: packet (the sprayed next hops do not "
                         "change when links fail; run it with engine: flow)", f"{len(exp.faults)} faults",
                         exp.source)
    least = 0.0 if force else least_wall_s(exp)
    if least > MAX_WALL_S:  # known from the traces alone, before a plan that can take minutes
        raise InputError("engine", f"a run of at most an hour (this one: at least {least / 3600:,.1f} h at "
                         f"{EVENTS_PER_S:,} events/s, from its traces' bytes alone; run it with engine: flow, or "
                         "--force it)", "engine: packet", exp.source)
    table = table_router(exp.routing, 0)
    how = ("per-packet spraying over the equal-cost paths" if t.spray
           else f"ECMP seed {exp.flow.ecmp_seed}" if isinstance(table, EcmpRouter)
           else "the policy's object in the loop" if table is None else "")
    return (f"engine packet: ns-3 {ns3.NS3_VERSION}, "
            + (f"in the emulator's units (links x {u.link:g}, bytes x {u.bytes:g}, time x {u.dilation:g}, "
               f"{t.latency_us['fabric']:g} us a hop), " if u else "") + f"TCP {t.cc}, MTU {t.mtu_bytes} B, buffer "
            f"{t.switch_buffer_bytes} B a port, " + (f"ECN {t.ecn.min_bytes}-{t.ecn.max_bytes} B, " if t.ecn else "")
            + ("tail-loss probes, " if t.tail_loss_probe else "")
            + ("RACK loss detection, " if t.loss_detection == "rack" else "")
            + f"routing {exp.routing}" + (f" ({how})" if how else ""))


def slice_bytes(exp) -> float:
    """The agents' pipelining slice in real bytes."""
    return exp.testbed.slice_bytes / exp.scale.bytes


def estimate_wall_s(sc, net, t) -> float:
    """Wall seconds the run will take, from its data packets and their hops (events per packet hop
    measured on one link, docs/packet-engine.md)."""
    seg = t.mtu_bytes - 52
    hops = sum(len(p) for p in sc.paths) / max(1, len(sc.paths))
    packets = sc.payload_bytes / seg
    return packets * (2 + 4 * hops) / EVENTS_PER_S  # about 10 events a packet over 2 hops, measured


def least_payload_bytes(jobs) -> float:
    """The fewest payload bytes the jobs' traces can put on the wire, from their ops alone and
    without planning: a send its size, a collective over n ranks at least its bandwidth-optimal
    share per rank ((n-1)/n of its size, twice for all-reduce). One rank of each class is read."""
    total = 0.0
    for jp in jobs:
        t = jp.trace
        for cls in (t.classes if t is not None else ()):
            rank, per = cls.ranks[0], 0.0
            for o in t.ops_of(rank):
                if o.kind == "send":
                    per += o.size_bytes
                elif o.kind == "collective":
                    n = len(t.members(t.group_of(rank, o.group)))
                    per += o.size_bytes * (2 if o.op == "all_reduce" else 1) * (n - 1) / n if n > 1 else 0
            total += per * len(cls)
    return total


def least_wall_s(exp) -> float:
    """A lower bound of estimate_wall_s from the traces (every packet over one hop), in a second
    where the plan of a 1,024-GPU model can take minutes and tens of GB; 0 in emulated units."""
    if emulated.units(exp) is not None:
        return 0.0
    seg = settings(exp).mtu_bytes - 52
    return least_payload_bytes(job_traces(exp, exp.fabric())) / seg * (2 + 4 * 1) / EVENTS_PER_S


def estimate_sweep_s(exps: list, stop_over_s: float | None = None) -> tuple[float, int]:
    """(estimated seconds, points counted): every point together (points refused on their own
    count nothing), or, with stop_over_s, as far as the first point that takes the sum past it. A
    large point plans for minutes in gigabytes, so a refusal need not plan the rest."""
    total = 0.0
    for i, exp in enumerate(exps):
        if stop_over_s is not None and total > stop_over_s:
            return total, i
        if exp.fabric().host_count > MAX_RANKS:
            continue  # refused on its own, before planning
        least = least_wall_s(exp) if stop_over_s is not None else 0.0
        if stop_over_s is not None and total + least > stop_over_s:
            return total + least, i + 1  # past it whatever the plan says: not planned
        try:
            _, _, net, sc, t, _ = plan(exp, log=lambda *a, **k: None)
        except ValueError:
            continue  # no path: the point's own run says so
        total += estimate_wall_s(sc, net, t)
        del net, sc, t  # one point's plan at a time
    return total, len(exps)


def refuse_long_sweep(exps: list, source=None) -> float:
    """A packet sweep estimated at more than an hour in all is refused before its first point, as
    one run is (each point alone may be under the hour). Returns the estimate in seconds."""
    total, counted = estimate_sweep_s(exps, stop_over_s=MAX_WALL_S)
    if total > MAX_WALL_S:
        how = (f"about {total / 3600:.1f} h over {len(exps)} points" if counted == len(exps) else
               f"over {total / 3600:.1f} h in its first {counted} of {len(exps)} points")
        raise InputError("engine", f"a packet sweep of at most an hour in all (this one: {how} at "
                         f"{EVENTS_PER_S:,} events/s; run it with engine: flow, or --force it)",
                         f"engine: packet on {len(exps)} sweep points", source)
    return total


def run_experiment(exp, out_dir: str, log=print, prepare=None, force: bool = False) -> dict:
    """The packet engine's run through the pipeline (benches and tests call it by this name)."""
    from experiment.pipeline import run

    return run(PacketEngine(), exp, out_dir, log=log, prepare=prepare, force=force)


def plan(exp, log=print):
    """(fabric, jobs, net, scenario, transport, loop): everything the driver needs, before anything
    is written; loop is the controller in the loop (ControllerLoop), or None for a static table."""
    fabric = exp.fabric()
    jobs = job_traces(exp, fabric)
    net = Net.from_fabric(fabric)
    sc = scenario.build(exp, fabric, jobs, slice_bytes(exp))
    t = settings(exp)
    cables, stragglers, outages = split_faults(exp, jobs)
    scenario.straggle(sc, jobs, stragglers)
    cable_faults = [f for f in exp.faults if f.link is not None or f.switch is not None]
    router = table_router(exp.routing, exp.flow.ecmp_seed)
    loop = None
    if t.spray:  # a static spray: the first equal-cost path carries the ACKs, every packet draws
        router = EcmpRouter(exp.flow.ecmp_seed)
        scenario.route(sc, net, router)
        scenario.spray(sc, net, router)
        sc.fault_log = []
    elif router is not None:
        scenario.route(sc, net, router)
        sc.fault_log = scenario.apply_faults(sc, net, router, cable_faults)
    else:
        ctl = ControllerRouter(fabric, exp.routing, exp.policy_params, exp.flow.ecmp_seed, time_scale(exp), outages)
        loop = ControllerLoop(sc, net, ctl, cable_faults, outages)
        loop.place()
        sc.fault_log = loop.fault_log
        if exp.coschedules:
            announced = announcements(fabric, jobs)
            scenario.hold(sc, announced)
            loop.coschedule(jobs, announced)
    u = emulated.units(exp)
    if u is not None:  # planned in real units, run in the emulator's (packetsim.emulated)
        t = emulated.transport(exp)
        emulated.to_emulated(sc, net, u)
        if loop is not None:
            loop.units = u
    return fabric, jobs, net, sc, t, loop


def bin_s(sc, net) -> float:
    """links.csv's interval: a 1-2-5 value near the run's bandwidth-bound time over LINK_BINS (every
    byte leaving its sender's NIC at the line rate), so short runs get samples and long ones no flood."""
    senders = {c[3] for c in sc.conns}
    nic = sum(net.host_nic_Bps(net.host_index(h)) for h in senders) or 1.0
    want = max(1e-6, min(1e-1, sc.payload_bytes / nic / LINK_BINS))
    exp10 = 10.0 ** math.floor(math.log10(want))
    return next(m * exp10 for m in (1, 2, 5, 10) if m * exp10 >= want)


def execute(sc, net, t, work_dir: str, *, seed: int = 1, log=print, loop=None, units=None) -> tuple[dict, dict]:
    """Run the scenario on ns-3: (the driver's results, the links it built). Progress in simulated time.
    units: the emulator's factors when the scenario is in emulated units; the results come back real."""
    path = os.path.join(work_dir, "packet-scenario.txt")
    if units is not None:
        net = emulated.scaled_net(net, units)
    w = sc.bin_s or bin_s(sc, net)
    built = scenario.write(sc, net, t, path, seed=seed, bin_s=w, end_s=END_S, rto_min_s=RTO_MIN_S)
    built["bin_s"] = w
    if loop is not None:
        loop.port_of_link = built["port_of_link"]
    last = [0.0]

    def progress(sim_s, done, total, wall_s, events):
        if wall_s - last[0] >= PROGRESS_EVERY_S:
            last[0] = wall_s
            log(f"[packet] {sim_s * 1e3:.4g} ms simulated, {done}/{total} tasks, "
                f"{events / max(wall_s, 1e-9):,.0f} events/s")

    try:
        res = ns3.execute(path, progress, log, on_poll=loop.on_poll if loop is not None else None)
    finally:
        if os.path.exists(path):
            os.unlink(path)
    if units is not None:
        emulated.to_real(res, built, units)
        w /= units.dilation
    res["tsq_bytes"] = built["tsq_bytes"]  # per connection, in the driver's units (emulated ones too)
    res["bin_s"] = built["bin_s"] = res["meta"].get("bin_s", w)  # doubled by the driver when a run outlasts its plan
    return res, built


class PacketEngine(Engine):
    """The packet engine's part of a run (experiment.pipeline owns the folder)."""
    name, label, keep_events = ENGINE, "packet engine", True

    def check(self, exp) -> str:
        verdict = check(exp, self.force)
        ns3.build(print)  # no ns-3: the one-line error saying how to install it, before anything is written
        return verdict

    def plan(self, exp, fabric) -> list:
        try:
            _, jobs, self.net, self.sc, self.t, self.loop = plan(exp)
        except ValueError as e:  # no path for a connection
            raise InputError("topology", "a path between every pair of a job's hosts", str(e), exp.source) from None
        self.est = estimate_wall_s(self.sc, self.net, self.t)
        if self.est > MAX_WALL_S and not self.force:
            raise InputError("engine", f"a run of at most an hour (this one: about {self.est / 3600:.1f} h at "
                             f"{EVENTS_PER_S:,} events/s; run it with engine: flow, or --force it)",
                             "engine: packet", exp.source)
        return jobs

    def outputs_exp(self, exp):
        return exp_for_outputs(exp)

    def execute(self, run: Run) -> None:
        exp, sc = run.exp, self.sc
        run.t_start = 0.0
        self.res = None
        run.log(f"[packet] {exp.name}: {sum(len(jp.hosts) for jp in run.jobs)} ranks, {len(sc.conns)} connections, "
                f"{sc.transfers} transfers, {sc.payload_bytes / 2**20:.4g} MiB; estimated {self.est:.3g} s")
        try:
            self.res, self.built = execute(sc, self.net, self.t, run.out_dir, seed=exp.flow.ecmp_seed + 1, log=run.log,
                                           loop=self.loop, units=emulated.units(exp))
        except RuntimeError as e:
            raise RunFailure(str(e)) from None
        meta = self.res["meta"]
        gated = self.loop.gate_events if self.loop is not None else []
        for ev in _events(sc, run.jobs, self.res) + _fault_events(exp, sc, self.res) + gated:
            run.events.add(ev)
        if meta["tasks_done"] == meta["tasks"]:
            run.status = "complete"
        else:
            run.error = (f"{meta['tasks'] - meta['tasks_done']} of {meta['tasks']} tasks unfinished at "
                         f"{meta['sim_end']:.6g} s" + (f" (stopped: {meta['stall']})" if meta.get("stall") else ""))
        run.log(f"[packet] {meta['events']:,} events in {meta['wall_s']:.3g} s: "
                f"{meta['events'] / max(meta['wall_s'], 1e-9):,.0f} events/s")

    def summary(self, run: Run) -> dict | None:
        if self.res is None:
            return None  # ns-3 never ran to its end: nothing to summarize
        self.queues = _queues(self.net, self.built, self.res)
        return _summarize(run.exp, run.fabric, run.jobs, run.events.events, self.sc, self.res, self.t, self.queues,
                          run.status, run.error, time.monotonic() - run.wall_t0, self.loop)

    def write_files(self, run: Run) -> None:
        _write_links(run, self.net, self.built, self.res)
        if self.loop is not None:
            write_json(run.path("controller-state.json"), self.loop.router.state(self.loop.now))


def _events(sc, jobs, res) -> list[dict]:
    """The agents' op events (the kinds and fields of the other engines' events.jsonl)."""
    tasks = res["tasks"]
    out = []
    for ot in sc.ops:
        end = tasks[ot.end]["end"]
        if end < 0:
            continue
        op, jp = ot.op, jobs[ot.job]
        opened = tasks[ot.start]["end"]  # its dependencies done and its phase's gate open
        ready = tasks[ot.hold]["ready"] if ot.hold is not None else opened  # a gated op is ready before its gate
        start = tasks[ot.first]["start"] if ot.first is not None and tasks[ot.first]["start"] >= 0 else opened
        ev = {"kind": op.kind, "job": jp.name, "rank": ot.rank, "op_id": op.id, "start": start, "end": end,
              "ready": ready}
        for k in ("op", "algorithm", "size_bytes", "iteration", "label", "group", "peer"):
            v = getattr(op, k, None)
            if v is not None and v != "":
                ev[k] = v
        if op.kind == "collective":
            ev["ranks"] = len(jp.trace.members(op.group))
            ev.setdefault("algorithm", "ring")
        out.append(ev)
    out.sort(key=lambda e: (e["end"], e["rank"]))
    return out


def _fault_events(exp, sc, res) -> list[dict]:
    """The fault events (the flow engine's fields): when each fault was applied."""
    end = res["meta"]["sim_end"] - max(res["meta"]["t0"], 0.0)
    out = []
    for f in exp.faults:
        if f.link is not None or f.switch is not None:
            continue
        at = f.at_ms / 1000.0
        ev = {"kind": "fault", "job": None, "rank": None, "at_ms": f.at_ms, "start": at, "end": at,
              "ok": at <= end, "error": None if at <= end else "the run ended before its time"}
        ev.update(host_fault_fields(exp, f))
        out.append(ev)
    for rec in sc.fault_log:
        f = rec["fault"]
        ev = {"kind": "fault", "job": None, "rank": None, "at_ms": f.at_ms, "start": rec["at_s"],
              "end": rec["at_s"], "ok": rec["at_s"] <= end, "error": None if rec["at_s"] <= end else
              "the run ended before its time", "links": rec["links"], "flows_moved": rec["moved"]}
        if f.link is not None:
            ev.update(fault=f"link {f.state}", link=f"{f.link[0]}-{f.link[1]}")
        else:
            ev.update(fault=f"switch {f.state}", switch=f.switch)
        out.append(ev)
    return out


def _port_names(net, built):
    for q in built["links"]:
        a, b = q[0], q[1]
        yield (net.names[a], net.names[b]), (net.names[b], net.names[a])


def _queues(net, built, res) -> list[dict]:
    """One entry per directed link: its output queue over the run (bytes), drops and ECN marks."""
    names = list(_port_names(net, built))
    out = []
    for q in res["queues"]:
        src, dst = names[q["link"]][q["dir"]]
        out.append({"link": f"{src}-{dst}", "src": src, "dst": dst, "mean_bytes": q["mean"],
                    "p99_bytes": q["p99"], "max_bytes": q["max"], "drops": q["drops"], "ecn_marks": q["marks"],
                    "tx_bytes": sum(q["bins"])})
    return out


def _write_links(run: Run, net, built, res) -> None:
    """links.csv: each directed link that carried traffic, per interval, with its mean queue."""
    names = list(_port_names(net, built))
    w = built["bin_s"]
    with open_out(run.out_dir, "links.csv") as f:
        f.write(",".join(LINK_COLUMNS + QUEUE_COLUMNS) + "\n")
        for q in res["queues"]:
            if not any(q["bins"]):
                continue
            src, dst = names[q["link"]][q["dir"]]
            gbps_cap = built["links"][q["link"]][3]
            qb = q["qbins"]
            for k, b in enumerate(q["bins"]):
                gbps = b * 8 / w / 1e9
                f.write(f"{round((k + 1) * w, 9)!r},{src}-{dst},{src},{dst},{round(gbps / gbps_cap, 6)!r},"
                        f"{round(gbps, 6)!r},{round(qb[k] if k < len(qb) else 0.0, 1)!r}\n")


def _tsq_summary(limits: list) -> int | list | None:
    """The TSQ limit of every connection: one value, [min, max] when they differ, None when off."""
    on = sorted({int(x) for x in limits if x})
    return None if not on else on[0] if len(on) == 1 else [on[0], on[-1]]


def _tlp_statement(t) -> str:
    if not t.tail_loss_probe:
        return ("no tail-loss probe (ns-3 3.37 has none; Linux sends one by default: transport.tcp.tail_loss_probe): "
                f"a loss at the end of a flight waits for the {RTO_MIN_S * 1e3:g} ms minimum RTO")
    return (f"tail-loss probes (transport.tcp.tail_loss_probe; RFC 8985 section 7 with Linux's timer): after "
            f"2 x SRTT + {t.tlp_floor_s * 1e3:g} ms (+ {RTO_MIN_S * 1e3:g} ms with one segment out, never past the RTO) "
            "without an ACK, one segment of new data or the last one again; the probe's SACK marks every segment "
            "below it lost and fast recovery resends them, as Linux's RACK would")


def _loss_statement(t) -> str:
    if t.loss_detection != "rack":
        return ("losses detected by ns-3's DupThresh rule (transport.tcp.loss_detection dupack): a segment with three "
                "SACKed segments above it, or three duplicate ACKs, is lost; reordering of three segments is taken "
                "for loss (Linux uses RACK: transport.tcp.loss_detection rack)")
    return ("losses detected by RACK (transport.tcp.loss_detection rack; RFC 8985 section 6 as Linux's "
            "tcp_rack_detect_loss): a segment is lost once a segment sent after it is delivered and it stays "
            "unacknowledged a reordering window (min RTT / 4 in whole microseconds, as Linux, times 1 plus one a "
            "round trip with a DSACK, at most SRTT; 0 before reordering is seen, in recovery or with 3 SACKed "
            "segments) past that segment's round trip, or when RACK's timer (that wait + "
            f"{t.tlp_floor_s * 1e3:g} ms) finds so; ns-3's three-SACKed-segment and duplicate-ACK rules are off; "
            "receivers' DSACKs are the driver's (ns-3 sends none); a recovery whose every retransmission is "
            "DSACKed is undone (cwnd and ssthresh back, as Linux's tcp_try_undo_dsack; flows[].undone_recoveries); "
            "the window grows on ACKs of data in Disorder too, as Linux's")


def _summarize(exp, fabric, jobs, events, sc, res, t, queues, status, error, wall_s, loop=None) -> dict:
    cache: dict = {}
    per_job = [job_results(jp.name, events, 1.0, job_predictions(exp, fabric, jp, cache)) for jp in jobs]
    for jp, row in zip(jobs, per_job):
        row["ranks_simulated"] = row["ranks"]
    meta = res["meta"]
    flows = [{"job": jobs[c[0]].name, "src_rank": c[1], "dst_rank": c[2], "src": c[3], "dst": c[4],
              "bytes": r["bytes"], "retransmissions": r["retx"], "retransmitted_bytes": r["retx_bytes"],
              **({"loss_probes": r["probes"]} if "probes" in r else {}),
              **({"undone_recoveries": r["undos"]} if "undos" in r else {})}
             for c, r in zip(sc.conns, res["conns"])]
    received = sum(r["bytes"] for r in res["conns"])
    checks = [{"name": "complete", "ok": status == "complete",
               "detail": "every op of every rank finished" if status == "complete" else error}]
    model = {
        "simulator": f"ns-3 {ns3.NS3_VERSION} ({ns3.library()}) through dtnet's C++ driver",
        "transport": {"cc": t.cc, "mtu_bytes": t.mtu_bytes, "segment_bytes": t.mtu_bytes - 52,
                      "switch_buffer_bytes": t.switch_buffer_bytes,
                      "ecn": vars(t.ecn) if t.ecn else None, "latency_us": t.latency_us,
                      "rto_min_s": RTO_MIN_S, "delayed_ack_s": t.delack_s,
                      "ack_every_segments": 1 if t.ecn else t.ack_every_segments, "routing": exp.routing,
                      "tsq_bytes": _tsq_summary(res.get("tsq_bytes") or []),
                      "tail_loss_probe": t.tail_loss_probe, "loss_detection": t.loss_detection,
                      **({"tlp_floor_s": t.tlp_floor_s} if t.tail_loss_probe else {}),
                      "start_jitter_ns": exp.packet.start_jitter_ns, "start_seed": exp.packet.start_seed},
        "statements": [
            "every packet over point-to-point links at their configured rates; each switch output port a "
            "FIFO of switch_buffer_bytes; a host's ports queue without a byte limit and drop nothing "
            "(Linux keeps in the socket what its qdisc has no room for; TSQ bounds each connection there); "
            "with ECN set, RED marking at switch ports only, and receivers ACK every segment (Linux's quick "
            "ACK after a CE mark)",
            "one TCP connection per ordered peer pair of a job, opened before the replay starts (t=0)",
            "per-flow routes: each switch holds a host route per connection (its own addresses), filled "
            "from the routing policy's paths; ECMP hashes the flow engine's five-tuple",
            "segments of MTU - 52 bytes (IP, TCP and timestamp headers); timestamps and SACK on",
            "TCP Small Queues, as Linux: a connection sends a segment only while its payload bytes below TCP (in "
            "its host's queue or on its wire) are under tsq_bytes: about 1 ms at its first link's rate (the "
            "stand-in for Linux's pacing rate), at least two segments, at most 4 MiB (tcp_limit_output_bytes)"
            if t.tsq else "no TCP Small Queues: a sender's window may wait whole in its NIC queue",
            _tlp_statement(t), _loss_statement(t)]
        + ([f"receivers ACK once per {t.ack_every_segments} full segments (transport.tcp.ack_every_segments; "
            "RFC 1122's 2 unless set), as Linux with GRO ACKs a coalesced burst: fewer ACKs simulated"]
           if t.ack_every_segments != 2 and not t.ecn else [])
        + (["in the emulator's units (packet.units emulated): link rates x scale.link, bytes x scale.bytes, "
            "times x the dilation, the emulator's MTU and queues and its switches' hop delay; every figure "
            "divided back to real units; pure ACKs share the data FIFO (the emulator gives them a class "
            "of their own)"] if emulated.units(exp) else [])
        + ([f"each rank starts up to {exp.packet.start_jitter_ns:g} ns late, drawn uniformly from "
            f"packet.start_seed {exp.packet.start_seed} (packet.start_jitter_ns): one replicate of a "
            "deterministic simulation"]
           if exp.packet.start_jitter_ns > 0 else [])
        + (["per-packet spraying: at each node of a flow's equal-cost paths every data packet draws its "
            "next hop at random (ACKs keep one path back); TCP sees the reordering"] if t.spray else [])
        + ([f"the policy's own object in the loop (flowsim.control.ControllerRouter): it places every "
            f"connection at t=0 and is fed port and per-flow byte counters every {sc.poll_s:.6g} s of "
            "simulated time; the simulation waits for its moves, which change the flow entries at once"]
           if loop is not None else [])
        + ([f"co-scheduling's phase gates (flowsim.cosched.PhaseGates, the flow engine's object): each "
            "communication op of an announced iteration waits in the driver until the controller's answer "
            "releases it at the answer's start"] if loop is not None and loop.gates is not None else [])
        + ([f"pace answers applied: {loop.paces} answers capped every host of their job at pace_share x its "
            "NIC rate inside the answer's window (payload bytes, a token bucket over all the host's connections "
            "that admits a segment while it holds tokens and refills at that rate, bursting two segments)"]
           if loop is not None and loop.paces else []),
        **({"units": {"units": "emulated", "link": u.link, "bytes": u.bytes, "dilation": u.dilation}}
           if (u := emulated.units(exp)) else {}),
        "link_bin_s": res["bin_s"],
        "events": meta["events"], "events_per_s": meta["events"] / max(meta["wall_s"], 1e-9),
        "run_s": meta["wall_s"], "wall_s": wall_s, "simulated_s": meta["sim_end"] - max(meta["t0"], 0.0),
    }
    return build_summary(exp, fabric, jobs, events, status=status, error=error, bytes_received=received,
                         per_job=per_job, real_units=True, slice_bytes=slice_bytes(exp), engine={
        "engine": ENGINE,
        "model": model,
        "fidelity": {"ok": status == "complete", "engine": ENGINE, "checks": checks,
                     "note": "a packet-level simulation: what it assumed is under model"},
        "controller": ({**loop.router.status(), "polls": res.get("polls", 0),
                        "counters": {**loop.router.status()["counters"], "reroutes": loop.reroutes,
                                     **({"paces": loop.paces} if loop.gates is not None else {})}}
                       if loop is not None else {"routing": exp.routing, "counters": {"reroutes": len(sc.reroutes)}}),
        "queues": queues,
        "flows": flows,
        "faults": [e for e in events if e.get("kind") == "fault"],
        "capture": [],
        "announcements": announcement_summary(events, 1.0),
        "duration_s_wall": wall_s,
    })
