"""PNG plots of a run (and of several runs side by side), with matplotlib.

matplotlib is imported only when a plot is drawn, so the rest of dtnet works
without it. Figures are drawn through the Agg canvas, never pyplot: no
display, no global state.
"""
from __future__ import annotations

import io
import os
import re

from badinput.paths import inside, write_atomic
from experiment.outputs import links as links_mod
from experiment.outputs.summary import fmt_bytes

FILES = {"iteration_time": "iteration_time.png", "cct": "cct_by_collective.png", "links": "link_heatmap.png"}


def _figure(width: float = 7.0, height: float = 4.0):
    from matplotlib.figure import Figure  # lazy: see the module docstring

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def run_title(summary: dict, what: str, point: str = "", engine: str = "") -> str:
    """Two lines: the experiment and the plot; then what tells this run from its siblings
    (the sweep point, the engine, the routing policy), so that a sweep's plots differ."""
    routing = summary.get("routing")
    second = [f"point {point}"] if point else []
    second += [engine] if engine else []
    second += [f"routing {routing}"] if routing and f"routing={routing}" not in point.split(",") else []
    return f"{summary.get('name', '')}: {what}" + ("\n" + " \u00b7 ".join(second) if second else "")


def iteration_figure(summary: dict, title: str = ""):
    """Iteration time (real-cluster ms) against iteration index, one line per job; None: nothing to draw."""
    jobs = [j for j in summary["jobs"] if j["iteration_time_s"]["all"]]
    if not jobs:
        return None
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
    ax.set_title(title or run_title(summary, "iteration time per job"))
    ax.legend(fontsize="small")
    return fig


def iteration_times(summary: dict, path: str, title: str = "") -> bool:
    return _save(iteration_figure(summary, title), path)


def cct_groups(summary: dict) -> list[tuple[str, list[float], float | None]]:
    """One box per collective of summary.json (job, op, algorithm, size, ranks): its label, its
    completion times (real ms) and its alpha-beta prediction (real ms, None when there is none)."""
    multi = len(summary["jobs"]) > 1
    out = []
    for j in summary["jobs"]:
        for c in j["collectives"]:
            label = (f"{j['name']}: " if multi else "") + f"{c['op']} {c.get('algorithm', '')}\n" \
                f"{fmt_bytes(c['size_bytes'])} x{c['ranks']}"
            pred = c.get("predicted_cct_s")
            out.append((label, [t * 1e3 for t in c["cct_s_all"]], None if pred is None else pred * 1e3))
    return [g for g in out if g[1]]


def cct_figure(summary: dict, title: str = ""):
    """Box plot of completion times per collective, the alpha-beta prediction beside each box."""
    groups = cct_groups(summary)
    if not groups:
        return None
    fig = _figure(max(6.5, 1.4 * len(groups) + 2))
    ax = fig.add_subplot()
    ax.boxplot([g[1] for g in groups], showmeans=True)
    top = max(max(g[1]) for g in groups)
    predicted = False
    for i, (_, samples, pred) in enumerate(groups, start=1):  # every sample too: runs are often a few iterations
        ax.scatter([i + 0.25] * len(samples), samples, s=9, alpha=0.6, color="tab:gray")
        if pred is not None:
            ax.hlines(pred, i - 0.38, i + 0.38, colors="tab:red", linestyles="--", linewidth=1.5,
                      label=None if predicted else "alpha-beta prediction (no contention)")
            mean = sum(samples) / len(samples)
            ax.annotate(f"{mean / pred:.2f}x", (i, max(max(samples), pred)), textcoords="offset points",
                        xytext=(0, 4), ha="center", fontsize="x-small", color="tab:red")
            predicted, top = True, max(top, pred)
    ax.set_xticks(range(1, len(groups) + 1), [f"{g[0]}\n(n={len(g[1])})" for g in groups], fontsize="small")
    ax.set_ylabel("completion time (ms, real cluster)")
    ax.set_ylim(0, top * 1.2 or 1.0)
    if predicted:
        ax.legend(fontsize="small", loc="lower right", title="mean / prediction above each box",
                  title_fontsize="x-small")
    ax.set_title(title or run_title(summary, "collective completion time"))
    return fig


def cct_distribution(summary: dict, path: str, title: str = "") -> bool:
    return _save(cct_figure(summary, title), path)


def _natural(name: str) -> tuple:
    """h2 before h10: digit runs compare as numbers."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def heatmap_rows(links: list[tuple[str, str]], fabric=None) -> tuple[list[tuple[str, list]], list]:
    """Directed links in reading order: ([(tier label, links)], NVLink links).

    Tiers follow a packet up and down the fabric (host -> leaf, leaf -> spine, ..., spine -> leaf,
    leaf -> host); inside a tier, links go by rail (or pod, or leaf), then by name. Without the
    fabric, one tier in name order."""
    if fabric is None:
        return [("", sorted(links, key=lambda k: (_natural(k[0]), _natural(k[1]))))], []
    level = _levels(fabric)
    tiers: dict[tuple, list] = {}
    nvlink = []
    for a, b in links:
        if fabric.graph.edges[a, b]["kind"] == "nvlink":
            nvlink.append((a, b))
            continue
        la, lb = level[a], level[b]
        key = (0, la) if la < lb else (2, -la) if la > lb else (1, la)
        tiers.setdefault(key + (fabric.node(a)["layer"], fabric.node(b)["layer"]), []).append((a, b))

    def by_rail(k):
        group = next((g for g in (_group(fabric.node(n)) for n in k) if g is not None), -1)
        return group, _natural(k[0]), _natural(k[1])

    def by_server(k):  # a GPU's two NVLink directions side by side, server by server
        host = k[0] if fabric.node(k[0])["role"] == "host" else k[1]
        return fabric.node(host).get("server", -1), _natural(host), k[0] != host

    out = [(f"{key[2]} \u2192 {key[3]}", sorted(ks, key=by_rail)) for key, ks in sorted(tiers.items())]
    return out, sorted(nvlink, key=by_server)


def _levels(fabric) -> dict:
    """Hops from the nearest host over fabric links: hosts 0, leaves 1, spines 2, ..."""
    level = {h: 0 for h in fabric.hosts}
    frontier = list(level)
    while frontier:
        ahead = []
        for n in frontier:
            for m in fabric.graph.neighbors(n):
                if m not in level and fabric.graph.edges[n, m]["kind"] != "nvlink":
                    level[m] = level[n] + 1
                    ahead.append(m)
        frontier = ahead
    return {n: level.get(n, 0) for n in fabric.graph}


def _group(node: dict):
    for key in ("rail", "gpu", "pod", "leaf"):  # a host's gpu is its rail
        if node.get(key) is not None:
            return node[key]
    return None


MAX_HEATMAP_LINKS = 160


def _row_labels_artist():
    """The class of RowLabels, made on first use (matplotlib is imported lazily)."""
    global _RowLabels
    if _RowLabels is not None:
        return _RowLabels
    from matplotlib.artist import Artist
    from matplotlib.font_manager import FontProperties
    from matplotlib.transforms import Bbox

    class RowLabels(Artist):
        """A label a row, right-aligned left of an axes, and the axes' name left of them, drawn by the
        renderer itself. As tick labels, each row is a Text laid out several times a draw (for the
        layout, the axis label's place, the drawing): 1 ms a row, most of a 160-row heatmap's time."""

        PAD_PX = 4.0

        def __init__(self, ax, labels: list[str], fontsize, name: str):
            super().__init__()
            self.ax, self.labels, self.name = ax, labels, name
            self.prop, self.name_prop = FontProperties(size=fontsize), FontProperties(size="small")
            self._sizes = None  # (dpi, [(width, height, descent) px] of the labels, the name's)

        def _measure(self, renderer):
            dpi = self.figure.dpi
            if self._sizes is None or self._sizes[0] != dpi:
                size = renderer.get_text_width_height_descent
                self._sizes = (dpi, [size(s, self.prop, ismath=False) for s in self.labels],
                               size(self.name, self.name_prop, ismath=False))
            return self._sizes[1], self._sizes[2]

        def _left_of_labels(self, sizes) -> float:
            return self.ax.bbox.x0 - 2 * self.PAD_PX - max((w for w, _, _ in sizes), default=0.0)

        def get_window_extent(self, renderer=None):
            renderer = renderer or self.figure.canvas.get_renderer()
            sizes, (_, name_h, _) = self._measure(renderer)
            box = self.ax.bbox
            return Bbox([[self._left_of_labels(sizes) - name_h, box.y0], [box.x0 - self.PAD_PX, box.y1]])

        def draw(self, renderer):
            if not self.get_visible():
                return
            sizes, (name_w, _, _) = self._measure(renderer)
            gc = renderer.new_gc()
            gc.set_foreground("black")
            flip = renderer.flipy()
            height = self.figure.bbox.height
            x_right = self.ax.bbox.x0 - self.PAD_PX
            to_px = self.ax.transData.transform
            for i, (s, (w, h, d)) in enumerate(zip(self.labels, sizes)):
                _, y = to_px((0, i + 0.5))
                baseline = y - (h - d) / 2  # the ink's middle on the row's middle, as va=center_baseline
                renderer.draw_text(gc, x_right - w, height - baseline if flip else baseline, s, self.prop, 0)
            if self.name:
                x, w = self._left_of_labels(sizes), name_w
                y = self.ax.bbox.y0 + (self.ax.bbox.height - w) / 2  # rotated 90: the text runs upwards
                renderer.draw_text(gc, x, height - y if flip else y, self.name, self.name_prop, 90)
            gc.restore()
            self.stale = False

    _RowLabels = RowLabels
    return RowLabels


_RowLabels = None


def row_labels(ax) -> list[str]:
    """The row labels a heatmap panel was given (tests, and anyone reading the figure back)."""
    return next((a.labels for a in ax.get_children() if type(a).__name__ == "RowLabels"), [])


def heatmap_figure(rows, title: str = "", fabric=None, phases: dict | None = None):
    """Utilization of every directed link that carried traffic (rows: links.csv's rows, or its
    links.LinkGrid) over time (columns, one per sample of links.csv), grouped by tier and rail,
    NVLink apart; above them, when each job's collectives ran (phases: job -> [(start_ms, end_ms)],
    real-cluster time). None: nothing to draw."""
    import numpy as np

    grid = rows if isinstance(rows, links_mod.LinkGrid) else links_mod.LinkGrid.from_rows(rows)
    times, util = grid.times, grid.util
    peak = (np.nanmax(util, axis=1) if util.size else np.zeros(len(grid.keys))).tolist()
    row = {k: i for i, k in enumerate(grid.keys)}
    busy = [k for k, p in zip(grid.keys, peak) if p > 0]
    if fabric is not None:
        busy = [k for k in busy if fabric.graph.has_edge(*k)]
    if not times or not busy:
        return None

    shown = len(busy)
    if shown > MAX_HEATMAP_LINKS:  # a large fabric: its busiest links (a row each would be unreadable and slow)
        # column by column, left to right, as sum() over the samples did: the same ties, the same links
        total = np.zeros(len(util))
        for column in np.nan_to_num(util, nan=0.0).T:
            total += column
        total = total.tolist()
        busy = sorted(busy, key=lambda k: -total[row[k]])[:MAX_HEATMAP_LINKS]

    tiers, nvlink = heatmap_rows(busy, fabric)
    panels = [("fabric links", tiers)] + ([("NVLink, inside servers", [("", nvlink)])] if nvlink else [])
    phases = {j: p for j, p in (phases or {}).items() if p}
    heights = [max(1, sum(len(ks) for _, ks in tiers_)) for _, tiers_ in panels]
    strip = 0.3 * len(phases)
    fig = _figure(9.0, min(2.4 + strip + 0.17 * sum(heights), 30.0))
    ratios = ([strip / 0.17] if phases else []) + heights
    axes = list(fig.subplots(len(ratios), 1, sharex=True, squeeze=False, height_ratios=ratios)[:, 0])
    step = float(np.median(np.diff(times))) if len(times) > 1 else times[0]
    edges = np.array([(times[0] - step) * 1e3] + [t * 1e3 for t in times])
    top = max(1.0, *(peak[row[k]] for k in busy))
    if phases:
        _phase_strip(axes.pop(0), phases)
    mesh = None
    for ax, (name, panel) in zip(axes, panels):
        keys = [k for _, ks in panel for k in ks]
        cells = util[[row[k] for k in keys]]
        mesh = ax.pcolormesh(edges, np.arange(len(keys) + 1), cells, vmin=0.0, vmax=top, cmap="viridis",
                             shading="flat")
        ax.set_yticks([])
        ax.invert_yaxis()
        labels = _row_labels_artist()(ax, [f"{a} \u2192 {b}" for a, b in keys],
                                      "xx-small" if len(keys) > 40 else "x-small", name)
        ax.add_artist(labels)
        labels.set_clip_on(False)  # outside the axes, and in the layout's margins
        at, centers, labels = 0, [], []
        for label, ks in panel:
            if at:
                ax.axhline(at, color="white", linewidth=1.5)
            centers.append(at + len(ks) / 2)
            labels.append(label)
            at += len(ks)
        if any(labels):
            right = ax.secondary_yaxis("right")
            right.set_yticks(centers, labels, fontsize="x-small")
            right.tick_params(length=0)
    axes[-1].set_xlabel(f"time (ms, real cluster; one column per {step * 1e3:.3g} ms sample)")
    idle = len(grid.keys) - shown
    first, _, rest = title.partition("\n")
    note = f" (the {len(busy)} busiest of {shown} busy links)" if shown > len(busy) else \
        f" ({idle} idle links not shown)" if idle else ""
    fig.suptitle(first + note + (f"\n{rest}" if rest else ""), fontsize="medium")
    fig.colorbar(mesh, ax=axes, label="utilization (of link rate)", shrink=0.6)
    return fig


def _phase_strip(ax, phases: dict) -> None:
    """One row per job: a bar where each of its collectives ran."""
    import numpy as np
    from matplotlib.collections import PolyCollection

    colors = ("tab:orange", "tab:cyan", "tab:pink", "tab:olive", "tab:purple", "tab:brown")
    for i, (job, spans) in enumerate(phases.items()):
        # broken_barh's rectangles, built as arrays (it converts units span by span): x1 as
        # start + width, the same float it computes
        x0 = np.array([s for s, _ in spans], float)
        x1 = x0 + (np.array([e for _, e in spans], float) - x0)
        y0 = i + 0.15
        y1 = y0 + 0.7
        verts = np.empty((len(spans), 4, 2))
        verts[:, :, 0] = np.stack([x0, x0, x1, x1], axis=1)
        verts[:, :, 1] = (y0, y1, y1, y0)
        ax.add_collection(PolyCollection(verts, color=colors[i % len(colors)]))
    ax.set_yticks([i + 0.5 for i in range(len(phases))], [f"job {j}" for j in phases], fontsize="x-small")
    ax.set_ylim(len(phases), 0)
    ax.set_ylabel("collectives", fontsize="small")


def link_heatmap(rows: list[dict], path: str, title: str = "", fabric=None, phases: dict | None = None) -> bool:
    return _save(heatmap_figure(rows, title, fabric, phases), path)


def collective_phases(events: list[dict], t0: float, dilation: float) -> dict:
    """job -> [(start_ms, end_ms)] of its collectives in real-cluster time since t0, each from its
    first rank's start to its last rank's end."""
    spans: dict[tuple, list[float]] = {}
    for e in events:
        if e.get("kind") == "collective" and "start" in e and "end" in e:
            s = spans.setdefault((e["job"], e.get("op_id")), [e["start"], e["end"]])
            s[0], s[1] = min(s[0], e["start"]), max(s[1], e["end"])
    out: dict[str, list] = {}
    for (job, _), (start, end) in sorted(spans.items(), key=lambda kv: kv[1][0]):
        out.setdefault(job, []).append(((start - t0) / dilation * 1e3, (end - t0) / dilation * 1e3))
    return out


def _save(fig, path: str, **kw) -> bool:
    """The figure into path, whole, never through a link (badinput.paths.write_atomic)."""
    if fig is None:
        return False
    buf = io.BytesIO()
    fig.savefig(buf, format=os.path.splitext(path)[1][1:] or "png", **kw)
    write_atomic(os.path.dirname(path) or ".", os.path.basename(path), text=buf.getvalue())
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
    bottom.set_xticks(np.arange(len(colls)) + center,
                      [f"{n}: {op}\n{fmt_bytes(size)} x{k}" for n, op, size, k in colls],
                      fontsize="small")
    bottom.set_ylabel("busbw (Gb/s)")
    fig.suptitle("runs compared (real-cluster units)", y=1.03)
    return _save(fig, path, bbox_inches="tight")


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
        bottom.set_xticks(xs, [fmt_bytes(x) for x in xs])
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
    return _save(fig, path)


def write_all(out_dir: str, summary: dict, log=print, *, point: str = "", engine: str = "", fabric=None,
              phases: dict | None = None, links=None, fork: bool | None = False) -> list[str]:
    """The run's plots into out_dir/plots/; each failure is a warning. Returns the files written.
    point, engine and the summary's routing go in every title; fabric orders the heatmap's links,
    phases (collective_phases) marks when each job's collectives ran above it; links, a
    links.LinkGrid of links.csv, spares reading the file back. fork: the heatmap drawn by a forked
    child meanwhile (outputs.parallel.beside: None where can_fork; False: here, after the others)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        log("[run] warning: no plots: matplotlib is not installed (pip install matplotlib)")
        return []
    os.makedirs(inside(out_dir, "plots"), exist_ok=True)

    def title(what):
        return run_title(summary, what, point, engine)

    jobs = [("iteration_time", lambda p: iteration_times(summary, p, title("iteration time per job"))),
            ("cct", lambda p: cct_distribution(summary, p, title("collective completion time")))]
    csv_path = inside(out_dir, "links.csv")
    if links is not None or os.path.exists(csv_path):  # in memory, the file may still be being written
        jobs.append(("links", lambda p: link_heatmap(links_mod.read_csv(csv_path) if links is None else links, p,
                                                     title("link utilization"), fabric, phases)))
    def draw_each(some, log) -> list[str]:
        written = []
        for key, draw in some:
            path = inside(out_dir, "plots", FILES[key])
            try:
                if draw(path):
                    written.append(path)
            except Exception as e:  # noqa: BLE001: a plot must never fail the run
                log(f"[run] warning: plot {FILES[key]} not written: {type(e).__name__}: {e}")
        return written

    if fork is False or jobs[-1][0] != "links":
        return draw_each(jobs, log)
    from experiment.outputs.parallel import beside

    heatmap = [jobs.pop()]  # the slowest (its labelled rows) beside the other two
    with beside(lambda lg: draw_each(heatmap, lg), f"plots/{FILES['links']}", log, fork=fork):
        written = draw_each(jobs, log)
    heatmap_path = inside(out_dir, "plots", FILES["links"])
    return written + ([heatmap_path] if os.path.exists(heatmap_path) else [])
