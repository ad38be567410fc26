"""PNG plots of a run (and of several runs side by side), with matplotlib.

matplotlib is imported only when a plot is drawn, so the rest of dtnet works
without it. Figures are drawn through the Agg canvas, never pyplot: no
display, no global state.
"""
from __future__ import annotations

import os

from experiment.outputs import links as links_mod
from experiment.outputs.summary import _fmt_b

FILES = {"iteration_time": "iteration_time.png", "cct": "cct_by_collective.png", "links": "link_heatmap.png"}


def _figure(width: float = 7.0, height: float = 4.0):
    from matplotlib.figure import Figure  # lazy: see the module docstring

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def iteration_times(summary: dict, path: str) -> bool:
    """Iteration time (real-cluster ms) against iteration index, one line per job."""
    jobs = [j for j in summary["jobs"] if j["iteration_time_s"]["all"]]
    if not jobs:
        return False
    from matplotlib.ticker import MaxNLocator

    fig = _figure()
    ax = fig.add_subplot()
    top = 0.0
    for j in jobs:
        values = [t * 1e3 for t in j["iteration_time_s"]["all"]]
        top = max(top, *values)
        ax.plot(range(len(values)), values, marker="o",
                label=f"job {j['name']} (mean {j['iteration_time_s']['mean'] * 1e3:.2f} ms)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("iteration")
    ax.set_ylabel("iteration time (ms, real cluster)")
    ax.set_ylim(0, top * 1.15 or 1.0)
    ax.set_title(f"{summary.get('name', '')}: iteration time per job")
    ax.legend(fontsize="small")
    fig.savefig(path)
    return True


def cct_distribution(summary: dict, path: str) -> bool:
    """Box plot of collective completion times per collective type (per job
    when there are several)."""
    multi = len(summary["jobs"]) > 1
    groups: dict[str, list[float]] = {}
    for j in summary["jobs"]:
        for c in j["collectives"]:
            label = (f"{j['name']}: " if multi else "") + c["op"]
            groups.setdefault(label, []).extend(t * 1e3 for t in c["cct_s_all"])
    if not groups:
        return False
    fig = _figure(max(5.0, 1.2 * len(groups) + 2))
    ax = fig.add_subplot()
    labels = sorted(groups)
    ax.boxplot([groups[k] for k in labels], showmeans=True)
    for i, k in enumerate(labels, start=1):  # every sample too: runs are often a few iterations
        ax.scatter([i + 0.25] * len(groups[k]), groups[k], s=9, alpha=0.6, color="tab:gray")
    ax.set_xticks(range(1, len(labels) + 1), [f"{k}\n(n={len(groups[k])})" for k in labels], fontsize="small")
    ax.set_ylabel("completion time (ms, real cluster)")
    ax.set_ylim(0, max(max(v) for v in groups.values()) * 1.15 or 1.0)
    ax.set_title(f"{summary.get('name', '')}: collective completion time by type")
    fig.savefig(path)
    return True


MAX_HEATMAP_LINKS = 96


def link_heatmap(rows: list[dict], path: str, title: str = "") -> bool:
    """Utilization of every directed link that carried traffic (rows) over time
    (columns), from links.csv rows."""
    times = sorted({r["t_s"] for r in rows})
    util: dict[tuple, dict[float, float]] = {}
    for r in rows:
        util.setdefault((r["src"], r["dst"]), {})[r["t_s"]] = r["util"]
    busy = sorted(k for k, v in util.items() if max(v.values()) > 0)
    if not times or not busy:
        return False
    import numpy as np

    shown = len(busy)
    if len(busy) > MAX_HEATMAP_LINKS:  # a large fabric: its busiest links, in name order
        mean = {k: sum(util[k].values()) / len(times) for k in busy}
        busy = sorted(sorted(busy, key=lambda k: -mean[k])[:MAX_HEATMAP_LINKS])
    grid = np.array([[util[k].get(t, np.nan) for t in times] for k in busy])
    step = float(np.median(np.diff(times))) if len(times) > 1 else times[0]
    edges = [(times[0] - step) * 1e3] + [t * 1e3 for t in times]
    fig = _figure(8.0, min(2.0 + 0.18 * len(busy), 24.0))
    ax = fig.add_subplot()
    mesh = ax.pcolormesh(edges, np.arange(len(busy) + 1), grid, vmin=0.0, vmax=max(1.0, float(np.nanmax(grid))),
                         cmap="viridis", shading="flat")
    ax.set_yticks(np.arange(len(busy)) + 0.5, [f"{a} \u2192 {b}" for a, b in busy],
                  fontsize="x-small" if len(busy) > 30 else "small")
    ax.invert_yaxis()
    ax.set_xlabel("time (ms, real cluster)")
    idle = len(util) - shown
    more = shown - len(busy)
    ax.set_title(f"{title}: link utilization" + (f" ({idle} idle links not shown)" if idle and not more else "")
                 + (f" (the {len(busy)} busiest of {shown} busy links)" if more else ""))
    fig.colorbar(mesh, ax=ax, label="utilization (of link rate)")
    fig.savefig(path)
    return True


def comparison_chart(summaries: list[dict], labels: list[str], path: str) -> bool:
    """Runs side by side: mean iteration time per job and busbw per collective."""
    import numpy as np

    jobs = sorted({j["name"] for s in summaries for j in s["jobs"]})
    colls = sorted({(j["name"], c["op"], c["size_bytes"], c["ranks"]) for s in summaries for j in s["jobs"]
                    for c in j["collectives"]})
    if not jobs:
        return False
    fig = _figure(max(7.0, 0.9 * len(colls) * len(summaries) + 3), 7.0)
    top, bottom = fig.subplots(2, 1)
    width = 0.8 / len(summaries)
    for i, (s, label) in enumerate(zip(summaries, labels)):
        by_job = {j["name"]: j for j in s["jobs"]}
        it = [by_job[n]["iteration_time_s"]["mean"] * 1e3 if n in by_job else np.nan for n in jobs]
        top.bar(np.arange(len(jobs)) + i * width, it, width, label=label)
        bw = []
        for name, op, size, n in colls:
            match = [c for c in by_job.get(name, {"collectives": []})["collectives"]
                     if (c["op"], c["size_bytes"], c["ranks"]) == (op, size, n)]
            bw.append(match[0]["busbw_gbps"] if match else np.nan)
        bottom.bar(np.arange(len(colls)) + i * width, bw, width, label=label)
    center = 0.4 - width / 2
    top.set_xticks(np.arange(len(jobs)) + center, [f"job {n}" for n in jobs])
    top.set_ylabel("mean iteration time (ms)")
    # Above the bars, not on them: one row per three runs.
    top.legend(fontsize="small", loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=min(3, len(summaries)),
               frameon=False)
    bottom.set_xticks(np.arange(len(colls)) + center, [f"{n}: {op}\n{_fmt_b(size)} x{k}" for n, op, size, k in colls],
                      fontsize="small")
    bottom.set_ylabel("busbw (Gb/s)")
    fig.suptitle("runs compared (real-cluster units)", y=1.03)
    fig.savefig(path, bbox_inches="tight")
    return True


def sweep_chart(series: dict[str, list[tuple]], x_name: str, path: str) -> bool:
    """A sweep along one numeric key: busbw and cct over the alpha-beta prediction against it,
    one line per combination of the other keys. series: label -> [(x, busbw_gbps, ratio or None)]."""
    if not series:
        return False
    fig = _figure(9.0, 7.5)
    top, bottom = fig.subplots(2, 1, sharex=True)
    xs = sorted({x for pts in series.values() for x, _, _ in pts})
    spread = xs[-1] / xs[0] if xs[0] > 0 else 0
    markers = "osD^vP*X"
    for i, (label, pts) in enumerate(series.items()):
        pts = sorted(pts)
        style = dict(marker=markers[i % len(markers)], linestyle="-" if i < 10 else "--", label=label)
        top.plot([p[0] for p in pts], [p[1] for p in pts], **style)
        ratio = [p for p in pts if p[2] is not None]
        bottom.plot([p[0] for p in ratio], [p[2] for p in ratio], **style)
    if spread > 10:
        top.set_xscale("log", base=2)
    if x_name.endswith("_bytes"):
        bottom.set_xticks(xs, [_fmt_b(x) for x in xs])
    top.set_ylabel("busbw (Gb/s, real cluster)")
    top.legend(fontsize="small")
    from matplotlib.ticker import FuncFormatter, LogFormatter

    bottom.axhline(1.0, color="grey", linewidth=0.8)
    bottom.set_yscale("log")
    # Plain numbers (2, not 2x10^0); in-between ticks labelled only on a short axis.
    bottom.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    bottom.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.5)))
    bottom.set_ylabel("cct / alpha-beta prediction")
    bottom.set_xlabel(x_name)
    fig.suptitle("sweep (real-cluster units)")
    fig.savefig(path)
    return True


def write_all(out_dir: str, summary: dict, log=print) -> list[str]:
    """The run's plots into out_dir/plots/; each failure is a warning. Returns the files written."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        log("[run] warning: no plots: matplotlib is not installed (pip install matplotlib)")
        return []
    folder = os.path.join(out_dir, "plots")
    os.makedirs(folder, exist_ok=True)
    jobs = [("iteration_time", lambda p: iteration_times(summary, p)),
            ("cct", lambda p: cct_distribution(summary, p))]
    csv_path = os.path.join(out_dir, "links.csv")
    if os.path.exists(csv_path):
        jobs.append(("links", lambda p: link_heatmap(links_mod.read_csv(csv_path), p, summary.get("name", ""))))
    written = []
    for key, draw in jobs:
        path = os.path.join(folder, FILES[key])
        try:
            if draw(path):
                written.append(path)
        except Exception as e:  # noqa: BLE001: a plot must never fail the run
            log(f"[run] warning: plot {FILES[key]} not written: {type(e).__name__}: {e}")
    return written
