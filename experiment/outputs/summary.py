"""summary.json from events.jsonl: figures in real-cluster units.

Emulated time is divided by the dilation (scale.bytes / scale.link) and
emulated bytes by scale.bytes. busbw follows nccl-tests: algbw = S/t;
busbw = algbw x 2(n-1)/n for all-reduce, x (n-1)/n for all-gather,
reduce-scatter and all-to-all, x 1 otherwise.
"""
from __future__ import annotations

import json
import statistics

from experiment import provenance
from traffic.collectives.model import busbw_factor as bus_factor

SUMMARY_VERSION = 1




def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return 0.0
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _stats(values: list[float]) -> dict:
    return {"mean": statistics.fmean(values) if values else 0.0, "p50": _pct(values, 0.5),
            "p99": _pct(values, 0.99), "min": min(values, default=0.0), "max": max(values, default=0.0),
            "all": values}


def read_events(path: str) -> list[dict]:
    """Events written so far; a torn last line (a run that died) is skipped."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
    except FileNotFoundError:
        pass
    return out


def job_results(job: str, events: list[dict], dilation: float, predicted_s: dict | None = None) -> dict:
    """A job's iterations and collectives. predicted_s maps (op, algorithm, size_bytes, ranks) to the
    alpha-beta times of its instances (experiment.plan): each collective then gets predicted_cct_s and
    cct_vs_predicted, its mean cct over the mean prediction."""
    ev = [e for e in events if e.get("job") == job]
    colls: dict[str, list[dict]] = {}
    iters: dict[int, list[float]] = {}
    for e in ev:
        # "iteration": what a real program reported of its own iterations (experiment.program).
        if e["kind"] in ("collective", "send", "recv", "compute", "iteration") and e.get("iteration") is not None:
            span = iters.setdefault(e["iteration"], [e["start"], e["end"]])
            span[0], span[1] = min(span[0], e["start"]), max(span[1], e["end"])
        if e["kind"] == "collective":
            colls.setdefault((e["op_id"], e.get("group")), []).append(e)
    groups: dict[tuple, list[float]] = {}
    for op_id, parts in colls.items():
        p = parts[0]
        cct_s = (max(x["end"] for x in parts) - min(x["start"] for x in parts)) / dilation
        key = (p["op"], p["algorithm"], p["size_bytes"], p.get("ranks", len(parts)))
        groups.setdefault(key, []).append(cct_s)
    collectives = []
    for (op, alg, size, n), ccts in sorted(groups.items()):
        mean = statistics.fmean(ccts)
        algbw = size * 8 / mean / 1e9 if mean > 0 else 0.0
        row = {
            "op": op, "algorithm": alg, "size_bytes": size, "ranks": n, "count": len(ccts),
            "cct_s": mean, "cct_s_p50": _pct(ccts, 0.5), "cct_s_p99": _pct(ccts, 0.99), "cct_s_all": ccts,
            "algbw_gbps": algbw, "busbw_gbps": algbw * bus_factor(op, n),
        }
        preds = (predicted_s or {}).get((op, alg, size, n))
        if preds:
            pred = statistics.fmean(preds)
            row["predicted_cct_s"] = pred
            row["cct_vs_predicted"] = mean / pred if pred > 0 else None
        collectives.append(row)
    # A training step's time is the interval between consecutive iteration
    # completions (the first one counts from the job's first op).
    iteration_times = []
    prev_end = min((iters[i][0] for i in iters), default=0.0)
    for i in sorted(iters):
        iteration_times.append((iters[i][1] - prev_end) / dilation)
        prev_end = iters[i][1]
    ranks = sorted({e["rank"] for e in ev})
    return {"name": job, "ranks": len(ranks), "iterations": len(iteration_times),
            "iteration_time_s": _stats(iteration_times), "collectives": collectives,
            "breakdown_s": time_breakdown(ev, len(iteration_times), dilation)}


COMM_KINDS = ("collective", "send", "recv")


def _union(start, end):
    """The union of spans (start[i], end[i]) as sorted, disjoint (starts, ends) arrays; empty spans dropped."""
    import numpy as np

    keep = end > start
    start, end = start[keep], end[keep]
    order = np.lexsort((end, start))  # by start, then end, as sorted() orders the pairs
    start, end = start[order], end[order]
    if not len(start):
        return start, end
    reach = np.maximum.accumulate(end)  # the end of the union so far
    new = np.ones(len(start), bool)
    new[1:] = start[1:] > reach[:-1]  # a span that starts after every earlier one ended
    last = np.append(np.flatnonzero(new)[1:] - 1, len(start) - 1)
    return start[new], reach[last]


def _sum(values) -> float:
    """Left to right, as Python's sum() adds (numpy's sum adds pairwise, which rounds differently)."""
    import numpy as np

    return float(np.cumsum(values)[-1]) if len(values) else 0.0


def _overlap(x, y) -> float:
    """Length of the intersection of two unions (_union), their pieces summed in time order."""
    import numpy as np

    (xs, xe), (ys, ye) = x, y
    lo = np.searchsorted(ye, xs, side="right")  # the first piece of y that ends after x's starts
    hi = np.searchsorted(ys, xe, side="left")   # and the first that starts at or after its end
    count = np.maximum(hi - lo, 0)
    i = np.repeat(np.arange(len(xs)), count)
    j = np.repeat(lo - (np.cumsum(count) - count), count) + np.arange(int(count.sum()))
    return _sum(np.minimum(xe[i], ye[j]) - np.maximum(xs[i], ys[j]))


def time_breakdown(ev: list[dict], iterations: int, dilation: float) -> dict:
    """Where a rank's iteration goes, mean over ranks and iterations (real seconds).

    compute: time in compute ops. exposed_comm: communicating while not computing.
    idle: the rest of the job's span. A recv only counts as communication from the
    moment its peer started the matching send (same op_id); before that the rank
    waits on another pipeline stage, so with pipeline parallelism idle is the bubble.
    """
    import numpy as np

    empty = {"compute": 0.0, "exposed_comm": 0.0, "overlapped_comm": 0.0, "idle": 0.0}
    ops = [e for e in ev if e.get("kind") in ("compute",) + COMM_KINDS and "start" in e]
    if not ops or not iterations:
        return empty
    t0, t1 = min(e["start"] for e in ops), max(e["end"] for e in ops)
    send_start = {(e["rank"], e["op_id"]): e["start"] for e in ops if e["kind"] == "send"}
    start = [e["start"] for e in ops]
    for k, e in enumerate(ops):
        if e["kind"] == "recv" and e.get("peer") is not None:
            start[k] = max(start[k], send_start.get((e["peer"], e["op_id"]), start[k]))
    start, end = np.array(start, float), np.array([e["end"] for e in ops], float)
    compute = np.array([e["kind"] == "compute" for e in ops], bool)
    ranks, first, rank_at = np.unique(np.array([e["rank"] for e in ops]), return_index=True, return_inverse=True)
    sums = dict(empty)
    for r in np.argsort(first, kind="stable").tolist():  # ranks in the order of their first op
        mine = rank_at.ravel() == r
        comp, comm = _union(start[mine & compute], end[mine & compute]), _union(start[mine & ~compute],
                                                                               end[mine & ~compute])
        both = _overlap(comp, comm)
        comp_s, comm_s = _sum(comp[1] - comp[0]), _sum(comm[1] - comm[0])
        sums["compute"] += comp_s
        sums["exposed_comm"] += comm_s - both
        sums["overlapped_comm"] += both
        sums["idle"] += (t1 - t0) - comp_s - (comm_s - both)
    n = len(ranks) * iterations * dilation
    return {k: v / n for k, v in sums.items()}


def aggregate(jobs: list[dict], events: list[dict], dilation: float) -> dict:
    """Figures across all jobs: means of the jobs' mean iteration times (and the slowest job's),
    the p99 over every iteration of every job, count-weighted busbw over every collective, and the
    makespan from the first op of any job to the last; cct over the alpha-beta prediction, weighted
    by count over every collective that has one (None when none has)."""
    means = [j["iteration_time_s"]["mean"] for j in jobs if j["iterations"]]
    pooled = [t for j in jobs for t in j["iteration_time_s"]["all"]]
    weighted = [(c["busbw_gbps"], c["count"]) for j in jobs for c in j["collectives"]]
    count = sum(n for _, n in weighted)
    ops = [e for e in events if e.get("kind") in ("compute", "collective", "send", "recv") and "start" in e]
    ratios = [(c["cct_vs_predicted"], c["count"]) for j in jobs for c in j["collectives"]
              if c.get("cct_vs_predicted") is not None]
    ratio_count = sum(n for _, n in ratios)
    return {
        "jobs": len(jobs), "ranks": sum(j["ranks"] for j in jobs),
        "iteration_time_s_mean": statistics.fmean(means) if means else 0.0,
        "iteration_time_s_max": max(means, default=0.0),
        "iteration_time_s_p99": _pct(pooled, 0.99),
        "busbw_gbps_mean": sum(b * n for b, n in weighted) / count if count else 0.0,
        "makespan_s": (max(e["end"] for e in ops) - min(e["start"] for e in ops)) / dilation if ops else 0.0,
        "cct_vs_predicted_mean": sum(r * n for r, n in ratios) / ratio_count if ratio_count else None,
    }


def traffic_results(events: list[dict], bytes_received_emu: int, scale_link: float, scale_bytes: float,
                    host_link_gbps_total: float) -> dict:
    ops = [e for e in events if "start" in e and e.get("kind") in ("collective", "send", "recv", "iteration")]
    if not ops:
        return {"aggregate_gbps": 0.0, "normalized_throughput": 0.0, "bytes_received": 0}
    t0 = min(e["start"] for e in ops)
    t1 = max(e["end"] for e in ops)
    emu_gbps = bytes_received_emu * 8 / max(t1 - t0, 1e-9) / 1e9
    # Emulated rate / scale.link = real rate (bytes and time both rescaled).
    agg = emu_gbps / scale_link
    return {"aggregate_gbps": agg,
            "normalized_throughput": agg / host_link_gbps_total if host_link_gbps_total else 0.0,
            "bytes_received": round(bytes_received_emu / scale_bytes),
            "active_s": (t1 - t0) * scale_link / scale_bytes}


def build(exp, fabric, jobs, events: list[dict], *, status: str, error: str | None = None,
          bytes_received: int | None = None, engine: dict | None = None, per_job: list | None = None,
          real_units: bool = False, slice_bytes: float | None = None) -> dict:
    """summary.json: what every engine reports, in real-cluster units (docs/outputs.md).

    jobs are the run's JobPlans; events its events.jsonl; bytes_received the emulated bytes
    that arrived (from the transfer events when None). engine holds the engine's own sections
    (datapath, fidelity, controller, ...), written after the shared ones. An engine that works
    in real units (the flow engine) says so with real_units (scale 1, no dilation) and gives
    its own per_job rows and pipelining slice_bytes (real bytes)."""
    link, nbytes, dil = (1.0, 1.0, 1.0) if real_units else (exp.scale.link, exp.scale.bytes, exp.scale.dilation)
    if per_job is None:
        per_job = [job_results(j.name, events, dil, j.predicted_s) for j in jobs]
    host_total = sum(fabric.host_link_gbps(h) for j in jobs for h in j.hosts)
    if not bytes_received:
        bytes_received = sum(e.get("size_bytes", 0) for e in events if e["kind"] == "transfer")
    if slice_bytes is None:
        slice_bytes = exp.testbed.slice_bytes / exp.scale.bytes
    return {
        "version": SUMMARY_VERSION,
        "name": exp.name,
        "engine": exp.engine,
        "source": provenance.source(exp.engine),
        "status": status,
        "error": error,
        "topology": {**exp.topology, **fabric.counts()},
        "scale": {"link": link, "bytes": nbytes, "dilation": dil},
        "routing": exp.routing,
        "policy": {"name": exp.routing, "params": dict(exp.policy_params)},
        "jobs": per_job,
        "aggregate": aggregate(per_job, events, dil),
        "prediction": {"model": "alpha-beta (traffic.collectives.model.predict_time_s): each rank's NIC at its "
                                "host link rate, NVLink inside a server, pipelined by the agents' slices, "
                                "no contention",
                       "latency_s": exp.prediction.latency_us * 1e-6,
                       "pipeline_slice_bytes": slice_bytes},
        "traffic": traffic_results(events, bytes_received, link, nbytes, host_total),
        **(engine or {}),
    }


def print_table(summary: dict, out) -> None:
    for job in summary["jobs"]:
        it = job["iteration_time_s"]
        out.write(f"\njob {job['name']}: {job['ranks']} ranks, {job['iterations']} iterations, "
                  f"iteration time mean {fmt_seconds(it['mean'])} (p50 {fmt_seconds(it['p50'])}, "
                  f"p99 {fmt_seconds(it['p99'])})\n")
        if job.get("program"):
            _print_program(job["program"], out)
        b = job.get("breakdown_s")
        if b and b["compute"] > 0:  # only jobs that compute have a split worth printing
            out.write(f"  per iteration (mean over ranks): compute {fmt_seconds(b['compute'])}, exposed comm "
                      f"{fmt_seconds(b['exposed_comm'])}, idle/bubble {fmt_seconds(b['idle'])}"
                      f" (comm overlapped with compute {fmt_seconds(b['overlapped_comm'])})\n")
        # Summaries written before the alpha-beta prediction existed print without its columns.
        predicted = any("predicted_cct_s" in c for c in job["collectives"])
        if job["collectives"]:
            out.write(f"  {'op':<15}{'algorithm':<18}{'ranks':>6}{'size':>11}{'count':>7}"
                      f"{'time':>11}{'algbw Gb/s':>12}{'busbw Gb/s':>12}"
                      + (f"{'alpha-beta':>12}{'ratio':>7}" if predicted else "") + "\n")
        for c in job["collectives"]:
            out.write(f"  {c['op']:<15}{c['algorithm']:<18}{c['ranks']:>6}{fmt_bytes(c['size_bytes']):>11}"
                      f"{c['count']:>7}{fmt_seconds(c['cct_s']):>11}{c['algbw_gbps']:>12.1f}{c['busbw_gbps']:>12.1f}"
                      + (f"{_fmt_opt(c.get('predicted_cct_s'), fmt_seconds):>12}"
                         f"{_fmt_opt(c.get('cct_vs_predicted'), '{:.2f}'.format):>7}" if predicted else "") + "\n")
    agg = summary.get("aggregate")
    if agg and agg["jobs"] > 1:
        out.write(f"\nacross {agg['jobs']} jobs: iteration time mean {fmt_seconds(agg['iteration_time_s_mean'])} "
                  f"(slowest job {fmt_seconds(agg['iteration_time_s_max'])}, "
                  f"p99 {fmt_seconds(agg['iteration_time_s_p99'])}), "
                  f"busbw mean {agg['busbw_gbps_mean']:.1f} Gb/s, makespan {fmt_seconds(agg['makespan_s'])}\n")
    if summary.get("calibration"):
        print_calibration(summary["calibration"], out)
    t = summary["traffic"]
    out.write(f"\ntraffic: aggregate {t['aggregate_gbps']:.1f} Gb/s, normalized throughput "
              f"{t['normalized_throughput']:.3f} of the host links\n")
    if summary.get("engine") == "flow":
        print_model(summary, out)
        return
    f = summary["fidelity"]
    verdict = "OK" if f["ok"] else "NOT FAITHFUL"
    out.write(f"fidelity: {verdict}")
    reasons = [c["name"] + ": " + c["detail"] for c in f.get("checks", []) if not c["ok"]]
    out.write(("  (" + "; ".join(reasons) + ")") if reasons else "")
    out.write("\n")
    if not f["ok"] and f.get("suggested_scale"):
        out.write(f"  suggestion: --set scale.link={f['suggested_scale']['link']:.3g} "
                  f"--set scale.bytes={f['suggested_scale']['bytes']:.3g}, or --auto-scale\n")


def print_model(summary: dict, out) -> None:
    """What a flow-engine run assumed, where an emulator run states its fidelity."""
    m = summary.get("model") or {}
    routing = m.get("routing") or {}
    seed = f" seed {routing['seed']}" if "seed" in routing else ""
    out.write(f"model: flow engine, {m.get('model', 'fluid max-min')}, {m.get('collective_model', '?')} collectives, "
              f"routing {routing.get('name', summary.get('routing', '?'))}{seed}, slice "
              f"{fmt_bytes(m.get('slice_bytes', 0))}, latency {m.get('latency_s', 0) * 1e6:g} us "
              f"(assumptions: summary.json model.statements)\n")
    bad = [c["name"] + ": " + c["detail"] for c in summary["fidelity"].get("checks", []) if not c["ok"]]
    if bad:
        out.write("  model checks failed: " + "; ".join(bad) + "\n")


def _print_program(prog: dict, out) -> None:
    """One line on a real program's ranks: how they ended, and what they reported."""
    ranks = prog["ranks"]
    codes = sorted({r["exit_status"] for r in ranks}, key=lambda c: (c is None, c or 0))
    how = ", ".join(f"{sum(r['exit_status'] == c for r in ranks)} {'exit status ' + str(c) if c is not None else 'status unknown'}"
                    for c in codes)
    stopped = sum(r["ended_by"] == "dtnet" for r in ranks)
    markers = sum(r["markers"] for r in ranks)
    bad = sum(r["bad_markers"] for r in ranks)
    out.write(f"  program: {' '.join(prog['command'])[:100]}\n  ranks: {how}"
              + (f" ({stopped} ended by dtnet)" if stopped else "")
              + f"; {markers} marker lines" + (f", {bad} malformed (first: {next(r['first_bad_marker'] for r in ranks if r['first_bad_marker'])})" if bad else "")
              + "; compute at this machine's speed, network at the emulated rate\n")


def print_calibration(cal: dict, out) -> None:
    """The probes of `--auto-scale`, by link scale, and the one chosen."""
    its = ", ".join(f"{j}: {v['probe']} of {v['run']}" for j, v in cal["iterations"].items())
    n = len(cal["probes"])
    out.write(f"\ncalibration (--auto-scale): {n} probe{'' if n == 1 else 's'} in {cal['wall_s']:.1f} s, time dilation "
              f"{cal['dilation']:g}x, iterations per probe {its}\n")
    out.write(f"  {'scale.link':<12}{'scale.bytes':<13}{'host link':>10}{'throughput':>12}  {'fidelity':<10}"
              f"{'wall':>7}  failed checks\n")
    chosen = (cal.get("chosen") or {}).get("dir")
    for p in sorted(cal["probes"], key=lambda p: p["link"]):
        nt = p.get("normalized_throughput")
        verdict = {True: "ok" if p.get("margin_ok", True) else "no margin", False: "NOT ok"}.get(
            p.get("fidelity_ok"), p["status"])
        why = ", ".join(c["name"] + (" (margin)" if c.get("margin") else "") for c in p.get("failed_checks", []))
        if p["status"] not in ("complete",):
            why = (f"{p['status']}: {p.get('error') or ''}; " + why).rstrip("; ")
        out.write(f"  {p['link']:<12.4g}{p['bytes']:<13.4g}{p['host_link_mbps']:>6.4g} Mb/s"
                  f"{('-' if nt is None else f'{nt:.3f}'):>12}  {verdict:<10}{p['wall_s'] or 0:>6.1f}s  {why}"
                  f"{'  <- chosen' if p['dir'] == chosen else ''}\n")
    if cal.get("chosen"):
        out.write(f"  chosen: scale.link={cal['chosen']['link']:g} scale.bytes={cal['chosen']['bytes']:g}: "
                  f"{cal['reason']}\n")


def fmt_seconds(s: float) -> str:
    """A duration as people read it: in s, ms or us."""
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"


def _fmt_opt(v, fmt) -> str:
    return "-" if v is None else fmt(v)


def fmt_bytes(n: float) -> str:
    """A size in binary units: 1 GiB, 1.5 MiB, 512 B."""
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f:
            return f"{n / f:g} {unit}" if (n / f) == int(n / f) else f"{n / f:.1f} {unit}"
    return f"{int(n)} B"
