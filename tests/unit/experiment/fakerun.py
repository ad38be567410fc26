"""A run folder made without root: hand-made agent events (in the agents'
format) go through the same summary, trace, links and plot code as `dtnet run`.

Job "a": 4 ranks, 2 iterations of compute then a ring all-reduce whose
receives overlap step to step (two receive lanes), plus one compute op that
overlaps the collective on rank 3. Job "b": a send/recv pair whose transfer
arrives after the send op finished.
"""
from __future__ import annotations

import dataclasses
import json
import os

from emulator.run.runner import Emulation, summarize
from experiment import model
from experiment.outputs.links import LinkSampler, directed_links
from experiment.outputs.write import write_after_run
from experiment.outputs.write import write_json
from experiment.plan import build_plans

T0 = 1_700_000_000.0
GIB = 1 << 30
EXPERIMENT = {
    "name": "fake",
    "topology": {"kind": "single-switch", "hosts": 6},
    "scale": {"link": 2.5e-5, "bytes": 1e-3},  # dilation 40
    "jobs": [
        {"name": "a", "hosts": ["h0", "h1", "h2", "h3"],
         "workload": {"collective": "all_reduce", "size_bytes": GIB, "iterations": 2, "compute_ms": 25}},
        {"name": "b", "hosts": ["h4", "h5"], "workload": {"collective": "sendrecv", "size_bytes": GIB // 4}},
    ],
}


def events(slow: float = 1.0) -> list[dict]:
    """Emulated-time events; slow stretches every duration (2.0: a run half as fast)."""
    def t(x):
        return T0 + x * slow

    out = []
    for it in range(2):
        base = it * 4.0
        for r in range(4):
            out.append({"kind": "compute", "job": "a", "rank": r, "op_id": f"it{it}/compute", "start": t(base),
                        "end": t(base + 1.0), "ready": t(base), "label": "compute", "iteration": it})
            out.append({"kind": "collective", "job": "a", "rank": r, "op_id": f"it{it}/all_reduce",
                        "start": t(base + 1.0 + 0.01 * r), "end": t(base + 3.0 + 0.01 * r),
                        "ready": t(base + 1.0), "op": "all_reduce", "algorithm": "ring", "size_bytes": GIB,
                        "iteration": it, "label": "all_reduce ring", "group": "world", "ranks": 4})
            for k in range(6):
                out.append({"kind": "transfer", "job": "a", "rank": r, "src": (r - 1) % 4, "dst": r,
                            "op_id": f"it{it}/all_reduce", "step": k, "size_bytes": 268435,
                            "start": t(base + 1.04 + 0.3 * k), "end": t(base + 1.04 + 0.3 * k + 0.35)})
    out.append({"kind": "compute", "job": "a", "rank": 3, "op_id": "it1/optimizer", "start": t(6.0),
                "end": t(6.5), "ready": t(6.0), "label": "optimizer", "iteration": 1})
    out.append({"kind": "send", "job": "b", "rank": 0, "op_id": "it0/p2p", "start": t(0.5), "end": t(1.0),
                "ready": t(0.5), "size_bytes": GIB // 4, "peer": 1, "iteration": 0})
    out.append({"kind": "recv", "job": "b", "rank": 1, "op_id": "it0/p2p", "start": t(0.5), "end": t(1.6),
                "ready": t(0.5), "size_bytes": GIB // 4, "peer": 0, "iteration": 0})
    out.append({"kind": "transfer", "job": "b", "rank": 1, "src": 0, "dst": 1, "op_id": "it0/p2p", "step": 0,
                "size_bytes": 268435, "start": t(1.2), "end": t(1.6)})
    return sorted(out, key=lambda e: e["end"])


def fake_counters(fabric, exp, slow: float = 1.0):
    """read() for the link sampler: h0 -> s0 at the full emulated rate, s0 -> h1 at half."""
    bps = {("h0", "s0"): 1.0, ("s0", "h1"): 0.5}
    clock = {"t": 0.0}

    def read():
        return {(a, b): int(bps.get((a, b), 0.0) / slow * d["link_gbps"] * 1e9 * exp.scale.link / 8 * clock["t"])
                for a, b, d in _both_ways(fabric)}

    return read, clock


def _both_ways(fabric):
    for a, b, d in fabric.links():
        yield a, b, d
        yield b, a, d


def make_run(run_dir, slow: float = 1.0, log=None, point: str = "") -> dict:
    """Write a complete run folder (as the sweep point `point`, if given); returns its summary."""
    run_dir = str(run_dir)
    os.makedirs(run_dir, exist_ok=True)
    exp = dataclasses.replace(model.parse(json.loads(json.dumps(EXPERIMENT))), point=point)
    fabric = exp.fabric()
    jobs = build_plans(exp, fabric)
    model.write_resolved(exp, os.path.join(run_dir, "config.yaml"))
    events_path = os.path.join(run_dir, "events.jsonl")
    evs = events(slow)
    with open(events_path, "w") as f:
        for e in evs:
            f.write(json.dumps(e, separators=(",", ":")) + "\n")
    read, clock = fake_counters(fabric, exp, slow)
    sampler = LinkSampler(open(os.path.join(run_dir, "links.csv"), "w"), read, directed_links(fabric),
                          scale_link=exp.scale.link, dilation=exp.scale.dilation, t0=T0)
    for k in range(10):
        clock["t"] = float(k)
        sampler.sample(T0 + k)
    sampler.close()
    em = Emulation(datapath="userspace", controller={"counters": {}}, t_start=T0, t_end=max(e["end"] for e in evs))
    summary = summarize(exp, fabric, jobs, events_path, em, "complete", None)
    write_json(os.path.join(run_dir, "summary.json"), summary)
    write_after_run(run_dir, exp, jobs, summary, T0, log or (lambda msg: None))
    return summary


def two_runs(base) -> dict:
    """The same experiment twice, the second twice as slow: {"fast"|"slow": (folder, summary)}."""
    warnings = []
    fast = make_run(base / "fast", log=warnings.append)
    slow = make_run(base / "slow", slow=2.0, log=warnings.append)
    assert warnings == []
    return {"fast": (base / "fast", fast), "slow": (base / "slow", slow)}


def is_png(path) -> bool:
    with open(path, "rb") as f:
        data = f.read()
    return data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000


def alpha_beta_engine(exp, out_dir, log=print, force=False) -> dict:
    """A stand-in engine for tests of what runs an engine (the API, sweeps, the examples): every
    collective takes its alpha-beta time (JobPlan.predicted_s), compute as planned, the ranks of
    a job in lock step. It writes what an engine writes: config.yaml, events.jsonl,
    summary.json, trace.json and plots/."""
    from experiment.outputs.summary import build

    os.makedirs(out_dir, exist_ok=True)
    fabric = exp.fabric()
    jobs = build_plans(exp, fabric)
    model.write_resolved(exp, os.path.join(out_dir, "config.yaml"))
    dil, evs = exp.scale.dilation, []
    for jp in jobs:
        t = T0 + jp.start_offset_s
        for i, op in enumerate(jp.ranks[0].ops):  # the ranks' op lists line up in a collective workload
            if op.kind == "compute":
                dur = op.duration_s
            else:
                times = jp.predicted_s[(op.op, op.algorithm, op.size_bytes, op.ranks)]
                dur = sum(times) / len(times) * dil
            for plan in jp.ranks:
                o = plan.ops[i]
                evs.append({"kind": o.kind, "job": jp.name, "rank": plan.rank, "op_id": o.id, "start": t,
                            "end": t + dur, "ready": t, "iteration": o.iteration, "label": o.label,
                            **{k: getattr(o, k) for k in ("op", "algorithm", "group", "size_bytes", "ranks")
                               if getattr(o, k) is not None}})
            t += dur
    with open(os.path.join(out_dir, "events.jsonl"), "w") as f:
        for e in evs:
            f.write(json.dumps(e) + "\n")
    summary = build(exp, fabric, jobs, evs, status="complete", bytes_received=1,
                    engine={"fidelity": {"ok": True, "checks": []}, "controller": {}})
    write_json(os.path.join(out_dir, "summary.json"), summary)
    write_after_run(out_dir, exp, jobs, summary, T0, log)
    return summary
