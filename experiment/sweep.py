"""Sweeps: one experiment file, a run per point of a grid or list of overrides.

    sweep: {grid: {controller.routing: [ecmp, congestion-aware], jobs.0.workload.size_bytes: [268435456, 1073741824]}}
    sweep: {list: [{controller.routing: ecmp}, {controller.routing: shortest, scale.link: 1.25e-5}]}

Each point is the experiment with its overrides applied like ``--set`` and
runs into DIR/points/<slug>/ (slug: ``routing=ecmp,size_bytes=1e8``).
DIR/sweep.csv has one row per point (its overrides, status and key
figures) and is rewritten after every point, so an interrupted sweep
keeps what it did; DIR/sweep.png compares the complete points. Running
the sweep again into the same DIR resumes: a point whose folder holds a
complete summary.json of the same resolved experiment is skipped, unless
other code made it (its summary.json `source`): then it is kept as
points/<point>.oldN and measured again.
"""
from __future__ import annotations

import copy
import csv
import dataclasses
import hashlib
import io
import json
import os
import re
import time
from dataclasses import dataclass

from badinput import InputError
from badinput.paths import check_name, inside, write_atomic
from experiment import engine, model, provenance
from experiment.engine import Interrupted, RunFailure
from experiment.model import Experiment
from experiment.pipeline import previous_run, same_experiment
from experiment.plan import build_plans, job_traces

POINTS_DIR = "points"
CSV_NAME = "sweep.csv"
PLOT_NAME = "sweep.png"
MAX_SLUG = 100
SLUG_EXTRA = "=,+~"  # key=value pairs, comma-joined; ~ before a hash or an index


@dataclass(frozen=True)
class Point:
    index: int
    overrides: tuple  # ((key.path, value), ...)
    slug: str
    exp: Experiment


def _short_keys(keys: list[str]) -> dict[str, str]:
    """Each key's shortest dotted suffix that no other key ends with."""
    out = {}
    for k in keys:
        parts = k.split(".")
        for n in range(1, len(parts) + 1):
            tail = ".".join(parts[-n:])
            if not any(o != k and (o == tail or o.endswith("." + tail)) for o in keys):
                break
        out[k] = tail
    return out


def _text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def slugs(points: list[tuple], file: str | None = None) -> list[str]:
    """Folder names for points: short key=value pairs, made safe and unique."""
    keys = list(dict.fromkeys(k for p in points for k, _ in p))
    short = _short_keys(keys)
    out, taken = [], set()  # a set: a list lookup made 10^4 points quadratic
    for i, p in enumerate(points):
        pairs = [f"{short[k]}={re.sub(r'[^A-Za-z0-9.+-]+', '_', _text(v)).strip('_') or '_'}" for k, v in p]
        slug = ",".join(pairs)
        if len(slug) > MAX_SLUG:
            slug = slug[:MAX_SLUG - 9] + "~" + hashlib.sha1(slug.encode()).hexdigest()[:8]
        if slug in taken:
            slug = f"{slug}~{i}"
        taken.add(slug)
        out.append(check_name(slug, f"sweep point {i}", file, extra=SLUG_EXTRA))
    return out


def expand(exp: Experiment) -> list[Point]:
    """The sweep's points as experiments; a point that makes the experiment invalid is a
    InputError naming the point."""
    base = {k: v for k, v in exp.raw.items() if k != "sweep"}
    out = []
    for i, (overrides, slug) in enumerate(zip(exp.sweep, slugs(list(exp.sweep), exp.source))):
        where = f"sweep point {i} ({slug})"
        data = copy.deepcopy(base)
        for key, value in overrides:
            model.set_path(data, key, copy.deepcopy(value), exp.source, label=f"{where}:")
        try:
            pexp = dataclasses.replace(model.parse(data, exp.source), point=slug)
        except InputError as e:
            raise InputError(f"{where}: {e.key}", e.expected, e.found, exp.source) from None
        out.append(Point(i, overrides, slug, pexp))
    return out


def check(points: list[Point]) -> None:
    """Plan every point, as `dtnet run` would before starting it, and ask its engine whether it can
    model it: bad workloads and what an engine refuses fail here."""
    for p in points:
        try:
            engine.check(p.exp)
            fabric = p.exp.fabric()
            build_plans(p.exp, fabric) if p.exp.engine == "emulate" else job_traces(p.exp, fabric)
        except InputError as e:
            raise InputError(f"sweep point {p.index} ({p.slug}): {e.key}", e.expected, e.found,
                              p.exp.source) from None


def point_dir(out_dir: str, point: Point) -> str:
    return inside(out_dir, POINTS_DIR, point.slug)


def is_done(folder: str, exp: Experiment) -> bool:
    """A complete summary.json, from a run of this very experiment (its config.yaml)."""
    status, config = previous_run(folder)
    return status == "complete" and same_experiment(exp, config)


def metrics(summary: dict) -> dict:
    """A summary's key figures as flat columns: per job mean iteration time, busbw per
    collective (by op; by op and size when a job has several sizes) with its alpha-beta
    prediction and ratio, throughput, fidelity."""
    row = {"engine": summary.get("engine", "emulate"), "fidelity_ok": summary["fidelity"]["ok"],
           "normalized_throughput": summary["traffic"]["normalized_throughput"],
           "aggregate_gbps": summary["traffic"]["aggregate_gbps"]}
    if "aggregate" in summary:
        row["iteration_time_s_mean"] = summary["aggregate"]["iteration_time_s_mean"]
        row["busbw_gbps_mean"] = summary["aggregate"]["busbw_gbps_mean"]
        row["cct_vs_predicted_mean"] = summary["aggregate"].get("cct_vs_predicted_mean")
    row["tcp_retrans_segs"] = summary.get("tcp", {}).get("retrans_segs")
    for j in summary["jobs"]:
        row[f"{j['name']}.iteration_time_s_mean"] = j["iteration_time_s"]["mean"]
        b = j.get("breakdown_s")
        if b and b["compute"] > 0:
            for part in ("compute", "exposed_comm", "idle"):
                row[f"{j['name']}.{part}_s"] = b[part]
        ops = [c["op"] for c in j["collectives"]]
        for c in j["collectives"]:
            name = c["op"] if ops.count(c["op"]) == 1 else f"{c['op']}.{c['size_bytes']}B"
            row[f"{j['name']}.{name}.busbw_gbps"] = c["busbw_gbps"]
            for k in ("predicted_cct_s", "cct_vs_predicted"):
                if k in c:
                    row[f"{j['name']}.{name}.{k}"] = c[k]
    return row


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return v if isinstance(v, str) else json.dumps(v)


def write_csv(path: str, points: list[Point], status: dict, summaries: dict) -> list[dict]:
    """sweep.csv, whole, through a temporary file: one row per point, pending ones included."""
    keys = list(dict.fromkeys(k for p in points for k, _ in p.overrides))
    rows = []
    for p in points:
        st = status.get(p.slug, {"status": "pending"})
        row = {"point": p.slug, **{k: v for k, v in p.overrides}, "status": st["status"],
               "error": st.get("error") or ""}
        if p.slug in summaries:
            row.update(metrics(summaries[p.slug]))
        rows.append(row)
    columns = ["point", *keys, "status", "error"]
    columns += list(dict.fromkeys(c for r in rows for c in r if c not in columns))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow([_cell(r.get(c)) for c in columns])
    write_atomic(os.path.dirname(path) or ".", os.path.basename(path), text=buf.getvalue())
    return rows


def read_csv(path: str) -> list[dict]:
    """sweep.csv's rows back, each cell as write_csv had it: None, true/false, a number or text."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if not {"point", "status"} <= set(reader.fieldnames or ()):
            raise ValueError(f"expected the columns point, status, ..., found {reader.fieldnames}")
        return [{k: _uncell(v) for k, v in r.items()} for r in reader]


def _uncell(text):
    if text in ("", None):
        return None
    if text in ("true", "false"):
        return text == "true"
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, (int, float)) else text


def bar(done: int, total: int, width: int = 20) -> str:
    filled = round(width * done / total) if total else width
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total}"


class Book:
    """A sweep's bookkeeping, whoever runs its points: each point's status and summary,
    sweep.csv rewritten after every point, and the progress lines. An executor reports to it
    with started / finished / note, in any order over points (a cluster runs several at once)."""

    def __init__(self, points: list[Point], out_dir: str, log=print):
        self.points, self.out_dir, self.log = points, out_dir, log
        self.csv_path = inside(out_dir, CSV_NAME)
        self.status: dict[str, dict] = {}
        self.summaries: dict[str, dict] = {}
        self.skipped: list[str] = []
        self._t0: dict[str, float] = {}
        self._done = 0

    def folder(self, point: Point) -> str:
        return point_dir(self.out_dir, point)

    def _line(self, point: Point, text: str) -> None:
        self.log(f"[sweep] {bar(self._done, len(self.points))} {point.slug}: {text}")

    def skip_if_done(self, point: Point) -> bool:
        """True (and the point counted complete) when an earlier run completed it."""
        folder = self.folder(point)
        if not is_done(folder, point.exp):
            return False
        with open(inside(folder, "summary.json")) as f:
            summary = json.load(f)
        if provenance.made_elsewhere(summary, point.exp.engine):
            kept = provenance.set_aside(folder)
            self._line(point, f"complete in an earlier run of other code (summary.json source): kept as "
                              f"{os.path.basename(kept)}, measuring it again")
            return False
        self.summaries[point.slug] = summary
        self.status[point.slug] = {"status": "complete"}
        self.skipped.append(point.slug)
        self._done += 1
        self._line(point, "skipped, complete in an earlier run")
        return True

    def started(self, point: Point, where: str | None = None) -> None:
        self._t0[point.slug] = time.monotonic()
        self.status[point.slug] = {"status": "running"}
        self._line(point, f"running (point {point.index + 1} of {len(self.points)})"
                   + (f" on {where}" if where else ""))

    def note(self, point: Point, text: str) -> None:
        self._line(point, text)

    def finished(self, point: Point, summary: dict | None = None, error: str | None = None,
                 where: str | None = None) -> None:
        """The point ended: its summary (complete or not), or a failure's reason."""
        self._done += 1
        on = f" on {where}" if where else ""
        if summary is None:
            self.status[point.slug] = {"status": "failed", "error": error}
            self._line(point, f"failed{on}: {error}")
        else:
            self.summaries[point.slug] = summary
            self.status[point.slug] = {"status": summary["status"], "error": summary.get("error")}
            took = time.monotonic() - self._t0.get(point.slug, time.monotonic())
            self._line(point, f"{summary['status']} in {took:.1f} s{on}{_headline(summary)}")
        self.write()

    def interrupted(self, point: Point, where: str | None = None) -> None:
        """The point was stopped by SIGINT/SIGTERM (what it wrote kept)."""
        self.status[point.slug] = {"status": "interrupted"}
        self._line(point, "interrupted" + (f" on {where}" if where else ""))

    def write(self, final: bool = False) -> list[dict]:
        if final:  # a point still running now was interrupted
            for st in self.status.values():
                if st["status"] == "running":
                    st["status"] = "interrupted"
        return write_csv(self.csv_path, self.points, self.status, self.summaries)


def run(exp: Experiment, out_dir: str, run_point, points: list[Point] | None = None, log=print,
        execute=None) -> dict:
    """Run every point not done yet with run_point(point_exp, folder) -> summary, one after another.

    run_point raising RunFailure (the engine's failures, the testbed's among them) fails that point and the sweep goes on;
    Interrupted (SIGINT/SIGTERM) stops it, after sweep.csv is written. execute(pending, book),
    when given, runs the pending points instead (dtnet.cluster: on a cluster's workers),
    reporting each to the Book. Returns {"points", "complete", "skipped", "failed", "rows"}.
    """
    points = expand(exp) if points is None else points
    os.makedirs(inside(out_dir, POINTS_DIR), exist_ok=True)
    model.write_resolved(exp, inside(out_dir, "config.yaml"))
    book = Book(points, out_dir, log)
    try:
        if execute is not None:
            execute([p for p in points if not book.skip_if_done(p)], book)
        else:
            for p in points:
                if book.skip_if_done(p):
                    continue
                book.started(p)
                try:
                    summary = run_point(p.exp, book.folder(p))
                except RunFailure as e:
                    book.finished(p, error=str(e))
                else:
                    book.finished(p, summary)
    except Interrupted:
        log(f"[sweep] interrupted; {CSV_NAME} has the points done")
        raise
    finally:
        rows = book.write(final=True)
    status = book.status
    complete = [p for p in points if status.get(p.slug, {}).get("status") == "complete"]
    if exp.outputs.plots:
        _plot(complete, [book.summaries[p.slug] for p in complete], inside(out_dir, PLOT_NAME), log)
    return {"points": len(points), "complete": len(complete), "skipped": book.skipped,
            "failed": [p.slug for p in points if status.get(p.slug, {}).get("status") != "complete"], "rows": rows}


def _headline(summary: dict) -> str:
    agg = summary.get("aggregate") or {}
    if not agg.get("iteration_time_s_mean"):
        return ""
    ratio = agg.get("cct_vs_predicted_mean")
    return (f": iteration {agg['iteration_time_s_mean'] * 1e3:.2f} ms, busbw {agg['busbw_gbps_mean']:.1f} Gb/s, "
            + (f"{ratio:.2f}x alpha-beta, " if ratio is not None else "")
            + ("flow model" if summary.get("engine") == "flow" else
               f"fidelity {'ok' if summary['fidelity']['ok'] else 'NOT ok'}"))


def numeric_key(points: list[Point]) -> str | None:
    """The last override key whose values are all numbers, at least two distinct ones
    (a size or a rate to draw along), or None."""
    keys = list(dict.fromkeys(k for p in points for k, _ in p.overrides))
    for k in reversed(keys):
        values = [dict(p.overrides).get(k) for p in points]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values) and len(set(values)) >= 2:
            return k
    return None


def series(points: list[Point], summaries: list[dict], x_key: str) -> dict[str, list[tuple]]:
    """Points as lines along x_key: label (the other overrides) -> [(x, busbw, cct over alpha-beta)]."""
    short = _short_keys(list(dict.fromkeys(k for p in points for k, _ in p.overrides)))
    out: dict[str, list[tuple]] = {}
    for p, s in zip(points, summaries):
        label = ",".join(f"{short[k]}={_text(v)}" for k, v in p.overrides if k != x_key) or "all"
        agg = s.get("aggregate") or {}
        out.setdefault(label, []).append((dict(p.overrides)[x_key], agg.get("busbw_gbps_mean", 0.0),
                                          agg.get("cct_vs_predicted_mean")))
    return out


def _plot(points: list[Point], summaries: list[dict], path: str, log) -> None:
    """sweep.png: lines along a numeric key when the sweep has one (sizes), else the runs side
    by side as `dtnet compare` draws them; a chart that cannot be drawn is a warning."""
    if not summaries:
        return
    try:
        from experiment.outputs import plots

        x_key = numeric_key(points)
        if x_key:
            plots.sweep_chart(series(points, summaries, x_key), x_key.rsplit(".", 1)[-1], path)
        else:
            plots.comparison_chart(summaries, [p.slug for p in points], path)
    except Exception as e:  # noqa: BLE001: a plot must never fail the sweep
        log(f"[sweep] warning: {PLOT_NAME} not written: {type(e).__name__}: {e}")


def print_table(rows: list[dict], out) -> None:
    """The sweep at a glance: per point, status and headline figures, and the
    speedup of its mean iteration time over the first complete point's."""
    width = max(len("point"), *(len(r["point"]) for r in rows)) + 2
    base = next((r["iteration_time_s_mean"] for r in rows if r.get("iteration_time_s_mean")), None)
    out.write(f"\n{'point':<{width}}{'status':<13}{'iteration':>12}{'speedup':>9}{'busbw Gb/s':>12}"
              f"{'vs alpha-beta':>15}{'throughput':>12}{'fidelity':>10}\n")
    for r in rows:
        it = r.get("iteration_time_s_mean")
        out.write(f"{r['point']:<{width}}{r['status']:<13}"
                  f"{(f'{it * 1e3:.2f} ms' if it else '-'):>12}{(f'{base / it:.2f}x' if it else '-'):>9}"
                  f"{_num(r.get('busbw_gbps_mean')):>12}{_num(r.get('cct_vs_predicted_mean'), '.2f'):>15}"
                  f"{_num(r.get('normalized_throughput'), '.3f'):>12}"
                  f"{_fidelity_cell(r):>10}\n")


def _fidelity_cell(r: dict) -> str:
    if r.get("engine") == "flow":
        return "model" if r.get("fidelity_ok") else "model !"
    return {True: "ok", False: "NOT ok"}.get(r.get("fidelity_ok"), "-")


def _num(v, fmt: str = ".1f") -> str:
    return "-" if v is None else format(v, fmt)
