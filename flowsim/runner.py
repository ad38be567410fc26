"""`dtnet run` with `engine: flow`: the experiment as fluid flows, into the same run folder.

The experiment model, placement, traces, schedules, alpha-beta predictions, controller
policies and outputs are the ones the emulator uses; only how bytes and time move differs
(flowsim.engine). Everything is in real-cluster units: times are seconds since the replay
start, so summary.json says dilation 1. A file written for the emulator runs unchanged: when
it has a `scale:` section the flow engine mirrors what the emulator would do with it (the
agents' slice is testbed.slice_bytes / scale.bytes real bytes, the controller's periods are
its wall-clock periods over the dilation), and ignores it otherwise.

What the model assumes is written into summary.json ("model"), in place of the emulator's
fidelity checks; docs/flow-engine.md says where it differs from TCP on shaped links.
"""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from badinput.paths import open_out
from experiment.engine import Interrupted, RunFailure, refuse_non_replay
from experiment.model import Experiment, Scale
from experiment.transport import DEFAULT_SWITCH_BUFFER_BYTES, EMULATOR_MTU_BYTES, check_transport, ignored_note
from experiment.outputs.announcements import summarize as announcement_summary
from experiment.outputs.summary import build as build_summary, job_results
from experiment.outputs.write import write_json
from experiment.pipeline import Engine, Run
from experiment.plan import (PREDICT_MAX_TRANSFERS, announcements, collective_transfers, job_predictions, job_traces,
                             start_offsets_s)
from flowsim.control import ControllerRouter, needs_controller, table_router
from flowsim.cosched import PhaseGates
from flowsim.engine import Fault, JobSpec, Params, Simulation, Straggler, window_bytes_of
from flowsim.losses import BurstLosses
from flowsim.network import FRAMING_BYTES, LINK_KINDS, TCPIP_HEADER_BYTES, Net, goodput_fraction
from flowsim.routing import ShortestRouter

ENGINE = "flow"
# collective_model auto: every transfer of every collective while there are at most this many
# (the detailed model costs about one solve per transfer boundary); bundles beyond.
AUTO_DETAILED_TRANSFERS = 200_000
AUTO_DETAILED_OPS = 200_000  # per-rank ops: the detailed model runs every rank
# Bundles agree with the detailed model within BUNDLE_AGREEMENT for rings, direct and hierarchical
# (bench/bench_bundles.py); for tree and halving-doubling they do not (a tied rate fills a
# bottleneck the detailed model's gated steps leave idle), so auto keeps those detailed, counting
# their transfers (not the n^2 bound), up to a few minutes of detailed run (a 1,024-GPU
# halving-doubling all-reduce, 20,480 transfers: 6.6 CPU s, about 4x a doubling).
BUNDLE_AGREEMENT = 0.05
BUNDLE_DISAGREES = ("tree", "halving-doubling")
AUTO_DETAILED_CHAINED_TRANSFERS = 250_000
TRANSFER_EVENTS_MAX = 20_000
# Rings' bundles are their steady state (within RING_BUNDLE_AGREEMENT of the detailed model, ECMP
# collisions included: bench/bench_bundles.py), so a run of ring collectives alone takes bundles
# from where the detailed model stops recording transfers (a 256-GPU ring: 65,536 transfers,
# 0.98 s of detailed simulation against 0.002 s), unless a mechanism bundles ignore is on.
RING_BUNDLE_AGREEMENT = 0.01
AUTO_RING_DETAILED_TRANSFERS = TRANSFER_EVENTS_MAX
LINKS_CSV_MAX_ROWS = 2_000_000
EMULATOR_SAMPLE_S = 0.25  # the emulator reads its link counters every quarter wall second


def check(exp: Experiment) -> str:
    """Refuse what the flow engine cannot model (InputError, exit 2); one line on what it runs."""
    refuse_non_replay(exp, "flow", "it moves no packets")
    ignored = transport_ignored(exp)
    return (f"engine flow: {exp.flow.collective_model} collectives, routing {exp.routing}"
            + (f" (ECMP seed {exp.flow.ecmp_seed})" if not isinstance(table_router(exp.routing, 0), ShortestRouter)
               else "")
            + f", slice {_fmt_bytes(slice_bytes(exp))}, latency {latency_s(exp) * 1e6:g} us"
            + (f" + {exp.latency_us:g} us a link" if exp.latency_us else "")
            + (f" + transport.latency_us {_fmt_kinds(exp.transport.latency_us)}" if exp.transport.latency_us else "")
            + ("; scale: mirrored (slices and controller periods as the emulator's)" if exp.scale_given else "")
            + (f"; ignores transport.{', transport.'.join(ignored)} (a fluid model has no TCP, packets or queues)"
               if ignored else ""))


def transport_ignored(exp: Experiment) -> list[str]:
    """The transport: keys the file set that the flow model does not model (the MTU counts
    when flow.headers takes headers from the rates, the MTU and buffers under flow.losses)."""
    return [k for k in check_transport(exp, ENGINE) if k not in _modelled(exp)]


def _modelled(exp: Experiment) -> set[str]:
    """Transport keys the flow: options make the flow model use."""
    out = set()
    if exp.flow.headers != "none":
        out.add("mtu_bytes")
    if exp.flow.losses != "none":
        out.update(("mtu_bytes", "switch_buffer_bytes"))
    return out


def burst_losses(exp: Experiment) -> BurstLosses | None:
    """Params.losses for flow.losses: the ports' buffer (transport.switch_buffer_bytes, else the
    packet engine's default) and the MTU's segments."""
    if exp.flow.losses == "none":
        return None
    mtu = mtu_bytes(exp)
    return BurstLosses(buffer_bytes=float(exp.transport.switch_buffer_bytes or DEFAULT_SWITCH_BUFFER_BYTES),
                       frame_bytes=float(mtu), mss_bytes=float(mtu - TCPIP_HEADER_BYTES))


def mtu_bytes(exp: Experiment) -> int:
    """transport.mtu_bytes, or the 9000-byte frames the emulator and the packet engine use by default."""
    return exp.transport.mtu_bytes or EMULATOR_MTU_BYTES


def goodput(exp: Experiment) -> float:
    """The payload share of every link's rate under flow.headers (1 with none)."""
    return goodput_fraction(exp.flow.headers, mtu_bytes(exp))


def store_forward(exp: Experiment) -> tuple | None:
    """Params.store_forward for flow.store_and_forward: (MSS, TCP/IP headers + the framing of
    flow.headers, none with headers none), or None."""
    if not exp.flow.store_and_forward:
        return None
    return (mtu_bytes(exp) - TCPIP_HEADER_BYTES, TCPIP_HEADER_BYTES + FRAMING_BYTES.get(exp.flow.headers, 0))


def _fmt_kinds(lat) -> str:
    return ", ".join(f"{k} {lat.of(k):g} us" for k in LINK_KINDS)


def slice_bytes(exp: Experiment) -> float:
    """The pipelining slice in real bytes: flow.slice_bytes, else what the agents send."""
    return float(exp.flow.slice_bytes or exp.testbed.slice_bytes / exp.scale.bytes)


def latency_s(exp: Experiment) -> float:
    """Delivery latency of every transfer: flow.latency_us; by default prediction.latency_us (the
    alpha-beta model's per-step alpha), or 0 when topology.latency_us delays each link instead."""
    if exp.flow.latency_us is not None:
        return exp.flow.latency_us * 1e-6
    return 0.0 if exp.latency_us > 0 or exp.transport.latency_us else exp.prediction.latency_us * 1e-6


def link_latency_s(exp: Experiment) -> tuple | None:
    """transport.latency_us: one-way delay of each link by kind (host, fabric, nvlink), or None."""
    lat = exp.transport.latency_us
    return None if lat is None else tuple(lat.of(k) * 1e-6 for k in LINK_KINDS)


def hop_latency_s(exp: Experiment) -> float:
    """topology.latency_us: one-way delay of every fabric and host link (NVLink has none), as the
    emulator's netem adds it."""
    return exp.latency_us * 1e-6


def time_scale(exp: Experiment) -> float:
    """Real seconds per second of the controller's clock: the emulator's is the wall clock."""
    return 1.0 / exp.scale.dilation if exp.scale_given else 1.0


def _fmt_bytes(n: float) -> str:
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f:
            return f"{n / f:.4g} {unit}"
    return f"{n:.4g} B"


# -- building the simulation ----------------------------------------------------------

def _detailed_transfers(op, n: int) -> int:
    """Transfers of one instance in the detailed model: counted for tree and halving-doubling,
    whose schedules are small, else plan.collective_transfers."""
    if op.algorithm == "tree" and op.op in ("all_reduce", "broadcast", "reduce"):
        return 4 * (n - 1)
    if op.algorithm == "halving-doubling" and op.op != "all_to_all":
        return 2 * n * (n.bit_length() + 1)
    return collective_transfers(op, n)


def collective_model(exp: Experiment, jobs) -> tuple[str, int]:
    """(detailed or bundle, the transfers the detailed model would simulate): detailed expands every
    rank and every transfer, so auto takes it only while that stays small, or, for the algorithms
    whose bundles are outside the stated agreement (BUNDLE_DISAGREES), while it stays feasible;
    a run of rings alone, only while it records its transfers (AUTO_RING_DETAILED_TRANSFERS)."""
    total, ops, disagree, rings = 0, 0, False, True
    for jp in jobs:
        tr = jp.trace
        ops += tr.op_count()
        layout = getattr(tr, "layout", None)
        for cls in tr.classes:
            seen = {}
            for op in cls.ops:
                if op.kind != "collective":
                    rings &= op.kind == "compute"
                    continue
                rings &= op.algorithm == "ring"
                if layout is not None and op.group in layout.families:
                    if op.group not in seen:
                        seen[op.group] = len(np.unique(layout.group_index(op.group, cls.ranks)))
                    count, n = seen[op.group], layout.family_size(op.group)
                else:
                    count, n = 1, len(tr.groups[op.group])
                if n > 1:
                    total += count * _detailed_transfers(op, n)
                    disagree |= op.algorithm in BUNDLE_DISAGREES
            if len(cls) > 1 and total > AUTO_DETAILED_CHAINED_TRANSFERS:
                break
    if exp.flow.collective_model != "auto":
        return exp.flow.collective_model, total
    limit = AUTO_DETAILED_CHAINED_TRANSFERS if disagree else AUTO_DETAILED_TRANSFERS
    f = exp.flow
    if rings and f.window_growth == "none" and f.losses == "none" and f.window_bytes is None:
        limit = AUTO_RING_DETAILED_TRANSFERS
    small = total <= limit and ops <= AUTO_DETAILED_OPS
    return ("detailed" if small else "bundle"), total


def _router(exp: Experiment, fabric, outages):
    """A static table's vectorized router (by the policy's forwarding type), else the policy's object."""
    table = table_router(exp.routing, exp.flow.ecmp_seed)
    if table is not None:
        return table
    return ControllerRouter(fabric, exp.routing, exp.policy_params, exp.flow.ecmp_seed, time_scale(exp), outages)


def split_faults(exp: Experiment, jobs):
    faults, stragglers, outages = [], [], []
    for f in exp.faults:
        at = f.at_ms / 1000.0
        if f.link is not None:
            faults.append(Fault(at, f.link[0], f.link[1], up=f.state == "up"))
        elif f.switch is not None:
            faults.append(Fault(at, f.switch, None, up=f.state == "up"))
        elif f.straggler is not None:
            for jp in jobs:
                if f.straggler in jp.hosts:
                    stragglers.append(Straggler(jp.name, jp.hosts.index(f.straggler), at, f.factor))
        else:
            outages.append((at, at + f.down_ms / 1000.0))
    return faults, stragglers, outages


# -- running ----------------------------------------------------------------------------

def run_experiment(exp: Experiment, out_dir: str, log=print, prepare=None, force: bool = False) -> dict:
    """The flow engine's run through the pipeline (benches and tests call it by this name)."""
    from experiment.pipeline import run

    return run(FlowEngine(), exp, out_dir, log=log, prepare=prepare, force=force)


class FlowEngine(Engine):
    """The flow engine's part of a run (experiment.pipeline owns the folder)."""
    name, label, keep_events, fork_outputs = ENGINE, "flow engine", True, True

    def check(self, exp: Experiment) -> str:
        return check(exp)

    def plan(self, exp: Experiment, fabric) -> list:
        jobs = job_traces(exp, fabric)
        self.model, self.transfers = collective_model(exp, jobs)
        return jobs

    def outputs_exp(self, exp: Experiment) -> Experiment:
        return exp_for_outputs(exp)

    def execute(self, run: Run) -> None:
        exp, fabric, jobs, events = run.exp, run.fabric, run.jobs, run.events
        self.sim = self.res = self.series = None
        self.run_events = events
        run.t_start = 0.0
        faults, stragglers, outages = split_faults(exp, jobs)
        self.router = router = _router(exp, fabric, outages)
        bin_s = (exp.flow.link_bin_ms / 1000.0 if exp.flow.link_bin_ms
                 else (EMULATOR_SAMPLE_S / exp.scale.dilation if exp.scale_given else 1e-3))
        self.params = params = Params(
            slice_bytes=slice_bytes(exp), latency_s=latency_s(exp), hop_latency_s=hop_latency_s(exp),
            link_latency_s=link_latency_s(exp), collective_model=self.model,
            window_bytes=window_bytes_of(exp.flow.window_bytes), store_forward=store_forward(exp), series_bin_s=bin_s,
            window_growth=exp.flow.window_growth, mss_bytes=mtu_bytes(exp) - TCPIP_HEADER_BYTES, losses=burst_losses(exp),
            record_transfers=self.model == "detailed" and self.transfers <= TRANSFER_EVENTS_MAX)
        phases = PhaseGates(announcements(fabric, jobs), router, on_event=events.add) if exp.coschedules else None
        net = Net.from_fabric(fabric)
        net.set_goodput(goodput(exp))
        specs = [JobSpec(jp.name, jp.hosts, jp.trace, start_s=exp.jobs[jp.index].start_ms / 1000.0,
                         rank_offsets_s=tuple(start_offsets_s(exp.flow.start_jitter_ns, exp.flow.start_seed, jp.name,
                                                              len(jp.hosts))) if exp.flow.start_jitter_ns > 0 else ())
                 for jp in jobs]
        run.log(f"[flow] {exp.name}: {sum(len(jp.hosts) for jp in jobs)} ranks, {self.model} collectives"
                + (f" ({self.transfers} transfers)" if self.model == "detailed" else "")
                + f", routing {router.describe()['name']}")
        self.done = 0  # sim.records already written as events
        self._groups = {}  # _op_events' cache of each rank's concrete groups
        try:
            self.sim = sim = Simulation(net, specs, router, params, faults=faults, stragglers=stragglers,
                                        phases=phases)
            if isinstance(router, ControllerRouter) and not any(sim.class_mode):
                sim.connect_all()  # the agents connect to every peer before the replay starts
            t_sim = time.monotonic()
            self.res = sim.run(progress=self._flush)
            sim.run_s = time.monotonic() - t_sim
            run.status = "complete" if self.res.complete else "incomplete"
            run.error = self.res.stalled
        except ValueError as e:  # a trace the model refuses (flowsim checks its own inputs)
            run.error = f"the flow model refused the run: {e}"
            raise RunFailure(run.error) from None
        except Interrupted as e:
            run.error = (f"interrupted by {e} at t={self.sim.now:.6g} s of the model" if self.sim is not None
                         else f"interrupted by {e}")
            raise
        finally:
            if self.sim is not None:
                self._flush(self.sim)
                if self.res is not None and params.record_transfers:
                    for ev in _transfer_events(self.sim):
                        events.add(ev)
                for ev in _fault_events(exp, self.sim, router):
                    events.add(ev)

    def _flush(self, sim) -> None:
        events = self.run_events
        events.extend(list(_op_events(sim, self.done, self._groups)))
        self.done = len(sim.records)
        events.flush()

    def summary(self, run: Run) -> dict:
        if getattr(self, "sim", None) is None:
            return None  # the model refused the run before it began: nothing to summarize
        return _summarize(run.exp, run.fabric, run.jobs, run.events.events, self.sim, self.res, self.router,
                          run.status, run.error, self.model, time.monotonic() - run.wall_t0)

    def write_files(self, run: Run) -> None:
        if getattr(self, "sim", None) is None:
            return
        if self.res is not None:
            with open_out(run.out_dir, "links.csv") as f:
                self._series(run).write_csv(f)
        if isinstance(self.router, ControllerRouter):
            write_json(run.path("controller-state.json"), self.router.state(self.sim.now))

    def link_grid(self, run: Run):
        if getattr(self, "sim", None) is None or self.res is None:
            return None
        return self._series(run).grid()  # the heatmap draws from these numbers, not from the file read back

    def _series(self, run: Run):
        """links.csv's rows (outputs.links.LinkSeries), cut at LINKS_CSV_MAX_ROWS; made once."""
        if getattr(self, "series", None) is None:
            series = self.res.link_series()
            if len(series) >= LINKS_CSV_MAX_ROWS:
                series = series.head(LINKS_CSV_MAX_ROWS)
                run.log(f"[flow] links.csv stopped at {len(series)} rows (set flow.link_bin_ms coarser for all of "
                        "them)")
            self.series = series
        return self.series


def _op_events(sim, start: int, groups: dict | None = None):
    """The agents' op events for sim.records[start:], real seconds since the replay start. groups
    caches (job, rank, family) -> (its concrete group, that group's size) across calls."""
    groups = {} if groups is None else groups
    for j, r, i, s, e, rd, g in sim.records[start:]:
        op = sim.streams[g][i]
        tr = sim.jobs[j].trace
        ev = {"kind": op.kind, "job": sim.jobs[j].name, "rank": int(r), "op_id": op.id, "start": float(s),
              "end": float(e), "ready": float(rd)}
        factor = sim.slowed.get((g, i))
        if factor is not None:
            ev["slowdown"] = factor
        for k in ("op", "algorithm", "size_bytes", "iteration", "label"):
            v = getattr(op, k, None)
            if v is not None and v != "":
                ev[k] = v
        if op.group is not None:  # a rank class names its group by family: this rank's own
            key = (j, r, op.group)
            hit = groups.get(key)
            if hit is None:
                name = tr.group_of(int(r), op.group) if sim.class_mode[j] else op.group
                hit = groups[key] = (name, len(tr.members(name)))
            ev["group"] = hit[0]
        if op.peer is not None:
            ev["peer"] = tr.peer_of(int(r), op.peer) if sim.class_mode[j] else op.peer
        if op.kind == "collective":
            ev["ranks"] = groups[j, r, op.group][1]
            ev.setdefault("algorithm", "ring")
        if len(sim.actor_ranks[g]) > 1:
            ev["class_ranks"] = len(sim.actor_ranks[g])  # the ranks this one stands for
        yield ev


def _transfer_events(sim):
    """One event per transfer the detailed model moved: first byte to delivery (at the receiver)."""
    for inst in sim.inst_list:
        if inst.base < 0:
            continue
        n = 1 if inst.key[0] == "p2p" else inst.tmpl.n
        for k in range(n):
            t = inst.base + k
            if sim.T_state[t] != 2 or sim.T_size[t] <= 0:
                continue
            if inst.key[0] == "p2p":
                src, dst, step = inst.group[0], inst.group[1], 0
            else:
                src, dst, step = (inst.group[int(inst.tmpl.src[k])], inst.group[int(inst.tmpl.dst[k])],
                                  int(inst.tmpl.step[k]))
            yield {"kind": "transfer", "job": sim.jobs[inst.job].name, "rank": int(dst), "src": int(src),
                   "dst": int(dst), "op_id": inst.op.id, "step": step, "size_bytes": int(round(sim.T_size[t])),
                   "start": float(sim.T_first[t]), "end": float(sim.T_end[t])}


def _fault_events(exp: Experiment, sim, router) -> list[dict]:
    """The fault events of the experiment's faults: as applied, at their times."""
    out, log = [], list(sim.fault_log)
    for f in exp.faults:
        at = f.at_ms / 1000.0
        ev = {"kind": "fault", "job": None, "rank": None, "fault": f.describe().split(" ", 1)[0] + (
            f" {f.state}" if f.state else ""), "at_ms": f.at_ms, "start": at, "end": at, "ok": True, "error": None}
        if f.link is not None or f.switch is not None:
            hit = next((x for x in log if abs(x["at_s"] - at) <= 1e-12 * max(1.0, at)
                        and (x["fault"].a, x["fault"].b) == ((f.link[0], f.link[1]) if f.link else (f.switch, None))),
                       None)
            if hit is None:
                ev.update(ok=False, error="the run ended before its time")
            else:
                log.remove(hit)
                ev.update(links=hit["links"], flows_moved=hit["moved"])
            if f.link is not None:
                ev["link"] = f"{f.link[0]}-{f.link[1]}"
                ev["fault"] = f"link {f.state}"
            else:
                ev["switch"] = f.switch
                ev["fault"] = f"switch {f.state}"
        else:
            ev.update(host_fault_fields(exp, f))
        if ev["start"] > sim.now and not (f.link or f.switch):
            ev.update(ok=False, error="the run ended before its time")
        out.append(ev)
    return out


def host_fault_fields(exp: Experiment, f) -> dict:
    """A straggler's or a controller restart's fields in its fault event (every model engine's)."""
    if f.straggler is not None:
        return {"fault": "straggler", "host": f.straggler, "factor": f.factor}
    ev = {"fault": "controller restart", "down_ms": f.down_ms,
          "outage_s": f.down_ms / 1000.0 if needs_controller(exp.routing) else 0.0}
    if not needs_controller(exp.routing):
        ev["note"] = f"routing {exp.routing}: the switches keep forwarding on their tables; nothing changes"
    return ev


def exp_for_outputs(exp: Experiment) -> Experiment:
    """The experiment as the outputs code should read it: real units, no dilation."""
    return replace(exp, scale=Scale(1.0, 1.0))


def _summarize(exp, fabric, jobs, events, sim, res, router, status, error, model, wall_s) -> dict:
    cache: dict = {}  # jobs of one shape on alike hosts share their prediction
    per_job = [job_results(jp.name, events, 1.0, job_predictions(exp, fabric, jp, cache)) for jp in jobs]
    for jp, row in zip(jobs, per_job):
        row["ranks_simulated"] = row["ranks"]  # one per rank class in class mode
        row["ranks"] = jp.trace.nranks
    received = float(np.sum(sim.T_size[:sim.n_T][sim.T_state[:sim.n_T] == 2])) + float(
        sum(float(np.sum(sim.B_w[b] * sim.B_done[b])) for b in range(len(sim.B_inst))))
    counters = dict(sim.counters)
    converged = counters["fixed_point_unconverged"] == 0
    assumptions = res.assumptions() if res is not None else {}
    big = sorted({c["ranks"] for j in per_job for c in j["collectives"] if "predicted_cct_s" not in c})
    if big:
        assumptions["statements"] = assumptions["statements"] + [
            f"no alpha-beta prediction for the collectives of {', '.join(map(str, big))} ranks: their schedules "
            f"have more than {PREDICT_MAX_TRANSFERS} transfers to build"]
    if exp.flow.headers != "none":
        assumptions["statements"] = assumptions["statements"] + [
            f"headers {exp.flow.headers}: every link carries payload at (MTU - {TCPIP_HEADER_BYTES}) / (MTU + "
            f"{FRAMING_BYTES[exp.flow.headers]}) = {goodput(exp):.5f} of its rate (MTU {mtu_bytes(exp)}: TCP/IP "
            "headers and framing on every full segment; ACKs not counted)"]
    if exp.flow.store_and_forward:
        mss, header = store_forward(exp)
        assumptions["statements"] = assumptions["statements"] + [
            f"store and forward: every link of a path after the first delays a transfer's delivery by its last "
            f"packet's serialization, min(size, {mss:g}) + {header:g} bytes at that link's rate"]
    if exp.flow.window_growth != "none":
        assumptions["statements"] = assumptions["statements"] + [
            f"window growth {exp.flow.window_growth}: a connection of the detailed model keeps at most cwnd bytes in "
            f"flight (those it sent in the last RTT, twice its delivery latency); cwnd starts at 10 segments of "
            f"{mtu_bytes(exp) - TCPIP_HEADER_BYTES} bytes and grows by the bytes acked"
            + (", one segment per 20 acked from 16 segments on (HyStart's exit, Cubic before any loss)"
               if exp.flow.window_growth == "cubic" else "") + "; never restarted after idle; bundles ignore it"]
    if exp.flow.losses != "none":
        lm = burst_losses(exp)
        assumptions["statements"] = assumptions["statements"] + [
            f"losses {exp.flow.losses}: connections that start sending together (the detailed model's transfers on "
            f"idle connections) send a first window of {lm.initial_segments} segments at their NIC share; where that "
            f"overflows a port's {lm.buffer_bytes:g}-byte buffer and each holds under {lm.dupthresh + 1} frames of "
            f"{lm.frame_bytes:g} bytes of it, each waits a {lm.rto_s * 1e3:g} ms RTO; losses repaired by fast "
            f"retransmit cost nothing; bundles ignore it ({counters['overflows']} overflows, {counters['timeouts']} "
            "timeouts)"]
    if exp.flow.start_jitter_ns > 0:
        assumptions["statements"] = assumptions["statements"] + [
            f"each rank starts up to {exp.flow.start_jitter_ns:g} ns late, drawn from flow.start_seed "
            f"{exp.flow.start_seed} (the packet engine's draws for the same keys): one replicate; it moves the "
            "order of events that would otherwise tie (a co-scheduling controller's announcements)"]
    if res is not None and any(sim.class_mode):
        assumptions["statements"] = assumptions["statements"] + [
            f"rank classes: {sim.n_ranks} simulated ranks stand for {sum(jp.trace.nranks for jp in jobs)}; every rank of "
            "a class runs in lock-step with it; a class's collective covers all the groups of its family that hold "
            "its ranks as one entity tied to one rate (the slowest group sets the pace), a class's send covers all "
            "its ranks' sends; events, breakdowns and trace.json show one rank per class"]
    checks = [{"name": "complete", "ok": status == "complete",
               "detail": "every op of every rank finished" if status == "complete" else (error or "interrupted")},
              {"name": "fixed_point", "ok": converged,
               "detail": f"{counters['fixed_point_unconverged']} of {counters['solves']} solves left the gated "
                         f"rates unconverged after {sim.p.max_fixed_point_iters} iterations"}]
    ctl = router.status() if isinstance(router, ControllerRouter) else {"routing": exp.routing,
                                                                         "counters": {"reroutes": counters["reroutes"]}}
    return build_summary(exp, fabric, jobs, events, status=status, error=error, bytes_received=received,
                         per_job=per_job, real_units=True, slice_bytes=slice_bytes(exp), engine={
        "engine": ENGINE,  # whatever engine the experiment names (a bench runs emulator files here too)
        "model": {**assumptions, "collective_model": model,
                  "headers": {"headers": exp.flow.headers, "mtu_bytes": mtu_bytes(exp), "goodput_fraction": goodput(exp)},
                  "store_and_forward": exp.flow.store_and_forward,
                  "window_growth": exp.flow.window_growth,
                  "start_jitter": {"start_jitter_ns": exp.flow.start_jitter_ns, "start_seed": exp.flow.start_seed},
                  "losses": {"losses": exp.flow.losses, "overflows": counters["overflows"],
                             "timeouts": counters["timeouts"]},
                  "mirrors_scale": {"link": exp.scale.link, "bytes": exp.scale.bytes,
                                    "dilation": exp.scale.dilation} if exp.scale_given else None,
                  "ignored": ["testbed (but slice_bytes)", "scale (but what it mirrors)"]
                  + [f"transport.{k}" for k in transport_ignored(exp)],
                  "transport": {"models": {k: v for k, v in exp.transport.given().items()
                                           if k not in transport_ignored(exp)},
                                "ignores": {k: v for k, v in ignored_note(exp, ENGINE).items()
                                            if k not in _modelled(exp)}},
                  "counters": counters, "run_s": getattr(sim, "run_s", None), "wall_s": wall_s},
        "fidelity": {"ok": status == "complete" and converged, "engine": ENGINE, "checks": checks,
                     "note": "a model, not an emulation: what it assumed is under model"},
        "controller": ctl,
        "faults": [e for e in events if e.get("kind") == "fault"],
        "capture": [],
        "announcements": announcement_summary(events, 1.0),
        "duration_s_wall": wall_s,
    })
