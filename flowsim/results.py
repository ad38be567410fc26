"""What a flow-level run produces, in the engine-neutral shapes the outputs layer writes.

Per op and rank: start, end and ready times (the events the agents emit); per collective
instance: its CCT (last member's end minus first member's start, as the emulator's results
compute it); per directed link: bytes carried and, with ``series_bin_s``, bytes per time bin
(what links.csv and the heatmaps are made of); counters; and the model's assumptions, so a
reader of the outputs learns that a model made them and which one.
"""
from __future__ import annotations

import numpy as np

from experiment.outputs.links import LinkSeries
from flowsim.network import LINK_KINDS

ASSUMPTIONS = (
    "fluid flows: bytes move at the rates of a max-min fair share of every directed link (progressive "
    "filling), recomputed at every event; no packets, queues, slow start, retransmits or shaper bursts",
    "one connection per ordered pair of ranks in a job (as the agents connect); a connection serves its "
    "queued sends in order, the first one that may send takes it",
    "a send streams behind the receives of its own chunks (schedule.send_dependencies), at most one slice "
    "behind the matching share; receives it does not follow must be complete first",
    "compute ops of a rank run one at a time in stream order; communication ops start when ready",
)


class Result:
    def __init__(self, sim, stalled: str | None):
        self.engine = "flow"
        self.stalled = stalled
        self.end_s = sim.now
        self.params = sim.p
        self.router = sim.router.describe()
        self.counters = dict(sim.counters)
        self.jobs = [j.name for j in sim.jobs]
        rec = np.array(sim.records, dtype=float).reshape(-1, 7)
        self.op_job, self.op_rank, self.op_index = rec[:, 0].astype(int), rec[:, 1].astype(int), rec[:, 2].astype(int)
        self.op_start, self.op_end, self.op_ready = rec[:, 3], rec[:, 4], rec[:, 5]
        self.op_actor = rec[:, 6].astype(int)  # the actor (rank, or rank class) that ran it
        self._sim = sim
        self.link_bytes = sim.link_bytes.copy()
        self.link_names = [sim.net.link_name(i) for i in range(sim.net.n_links)]
        self.link_gbps = sim.net.link_gbps.copy()
        self.series = dict(sim.series)
        self.series_bin_s = sim.bin_s

    @property
    def complete(self) -> bool:
        return self.stalled is None

    def assumptions(self) -> dict:
        p = self.params
        out = {"engine": "flow", "model": "fluid max-min", "statements": list(ASSUMPTIONS),
               "slice_bytes": p.slice_bytes, "latency_s": p.latency_s, "collective_model": p.collective_model,
               "routing": self.router}
        if p.collective_model == "bundle":
            out["statements"] = out["statements"] + [
                "bundle: each collective instance is a few entities, each with its connections tied to one rate, "
                "started when its last member starts and in stages where a send waits for a whole receive (a "
                "ring's steady state; hierarchical within 5% of the detailed model, tree and halving-doubling "
                "not: docs/flow-engine.md, Bundles in stages)"]
        if p.latency_s > 0 or p.has_link_latency:
            out["statements"] = out["statements"] + [
                "latency delays each transfer's delivery (latency_s, plus hop_latency_s per fabric or host link of "
                "its path); a following send sees its gate's progress minus that latency at the gate's current rate"]
        if p.window_bytes is not None:
            out["statements"] = out["statements"] + [
                "window: a connection keeps at most window_bytes in flight, so its rate is at most window_bytes / "
                "RTT, RTT twice its delivery latency (none at zero latency)"]
        out["hop_latency_s"] = p.hop_latency_s
        if p.link_latency_s is not None:
            out["link_latency_s"] = dict(zip(LINK_KINDS, map(float, p.link_latency_s)))
        out["window_bytes"] = p.window_bytes
        return out

    def op_events(self):
        """One dict per finished op and rank, shaped like the agents' events."""
        sim = self._sim
        for j, r, i, s, e, rd, a in zip(self.op_job, self.op_rank, self.op_index, self.op_start, self.op_end,
                                        self.op_ready, self.op_actor):
            op = sim.streams[a][i]
            ev = {"kind": op.kind, "job": self.jobs[j], "rank": int(r), "op_id": op.id, "start": float(s),
                  "end": float(e), "ready": float(rd)}
            for k in ("op", "algorithm", "size_bytes", "iteration", "label", "group", "peer"):
                v = getattr(op, k, None)
                if v is not None and v != "":
                    ev[k] = v
            yield ev

    def collectives(self) -> list[dict]:
        """Every collective instance with its CCT (real seconds)."""
        out = []
        sim = self._sim
        for inst in sim.inst_list:
            if inst.key[0] not in ("coll", "class-coll") or inst.members_done < len(inst.members):
                continue
            op = inst.op
            n = inst.groups.shape[1] if inst.groups is not None else len(inst.group)
            out.append({"job": self.jobs[inst.job], "group": op.group, "op_id": op.id, "op": op.op,
                        "algorithm": op.algorithm or "ring", "size_bytes": op.size_bytes, "ranks": n,
                        "instances": len(inst.groups) if inst.groups is not None else 1,
                        "iteration": op.iteration, "start_s": inst.start_s, "end_s": inst.end_s,
                        "cct_s": inst.end_s - inst.start_s})
        return out

    def iteration_times_s(self, job: str) -> list[float]:
        """Per iteration: from its first op's start to its last op's end, over all ranks."""
        j = self.jobs.index(job)
        sim = self._sim
        spans: dict[int, list[float]] = {}
        for jj, i, s, e, a in zip(self.op_job, self.op_index, self.op_start, self.op_end, self.op_actor):
            if jj != j:
                continue
            it = sim.streams[a][i].iteration
            if it is None:
                continue
            sp_ = spans.setdefault(it, [np.inf, -np.inf])
            sp_[0], sp_[1] = min(sp_[0], s), max(sp_[1], e)
        return [spans[k][1] - spans[k][0] for k in sorted(spans)]

    def link_series(self) -> LinkSeries:
        """links.csv's rows (t_s at the end of each bin, link, util, gbps) from the series, as arrays."""
        w = self.series_bin_s
        bins = sorted(self.series) if w else []
        ids = [self.series[k][0] for k in bins]
        t_s = np.repeat([round((k + 1) * w, 9) for k in bins], [len(i) for i in ids])
        link = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
        nbytes = np.concatenate([self.series[k][1] for k in bins]) if bins else np.zeros(0)
        gbps = nbytes * 8 / w / 1e9 if w else nbytes
        names = [(f"{a}-{b}", a, b) for a, b in self.link_names]
        return LinkSeries(names, t_s, link, None, gbps, link_gbps=self.link_gbps)

    def summary(self) -> dict:
        return {"engine": "flow", "complete": self.complete, "stalled": self.stalled, "end_s": self.end_s,
                "assumptions": self.assumptions(), "counters": self.counters}
