"""`dtnet report DIR` and `dtnet compare DIR1 DIR2 ...`: a run's tables, and
runs side by side with ratios against the first. Both read only the run
folders; a folder without a valid summary.json is an input error (exit 2).
"""
from __future__ import annotations

import json
import os

from badinput import InputError
from badinput.paths import inside
from experiment import provenance
from experiment.outputs import links as links_mod
from experiment.outputs.summary import fmt_bytes, fmt_seconds, print_table

NUM = (int, float)
# The summary.json contract of DESIGN.md, as "key: type" (a dict is a nested
# mapping, a one-item list a list of such items). Extra keys are allowed.
SUMMARY_CONTRACT = {
    "version": int, "name": str, "status": str,
    "scale": {"link": NUM, "bytes": NUM, "dilation": NUM},
    "jobs": [{
        "name": str, "ranks": int, "iterations": int,
        "iteration_time_s": {"mean": NUM, "p50": NUM, "p99": NUM, "all": [NUM]},
        "collectives": [{"op": str, "algorithm": str, "size_bytes": int, "ranks": int, "count": int,
                         "cct_s": NUM, "cct_s_all": [NUM], "algbw_gbps": NUM, "busbw_gbps": NUM}],
    }],
    "traffic": {"aggregate_gbps": NUM, "normalized_throughput": NUM},
    "fidelity": {"ok": bool, "checks": [{"name": str, "ok": bool, "detail": str}]},
    "controller": dict,
}


def check_contract(data, spec=SUMMARY_CONTRACT, key: str = "") -> None:
    """Raise InputError(key, expected, found) at the first place data breaks spec."""
    if isinstance(spec, dict):
        if not isinstance(data, dict):
            raise InputError(key or "top level", "a mapping", type(data).__name__)
        for k, sub in spec.items():
            if k not in data:
                raise InputError(f"{key}.{k}" if key else k, "a value", "nothing")
            check_contract(data[k], sub, f"{key}.{k}" if key else k)
    elif isinstance(spec, list):
        if not isinstance(data, list):
            raise InputError(key, "a list", type(data).__name__)
        for i, item in enumerate(data):
            check_contract(item, spec[0], f"{key}[{i}]")
    else:
        types = spec if isinstance(spec, tuple) else (spec,)
        if not isinstance(data, types) or (isinstance(data, bool) and bool not in types):
            raise InputError(key, " or ".join(t.__name__ for t in types), data)


def load_summary(run_dir: str) -> dict:
    """summary.json of a run folder, checked against the contract."""
    path = inside(run_dir, "summary.json")
    if not os.path.isdir(run_dir):
        raise InputError("folder", "a run folder written by `dtnet run`", "no such folder", run_dir)
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise InputError("file", "summary.json written by `dtnet run`", "no such file", path) from None
    except OSError as e:
        raise InputError("file", "a readable summary.json", e.strerror, path) from None
    except ValueError as e:
        raise InputError("json", "valid JSON", str(e), path) from None
    try:
        check_contract(data)
    except InputError as e:
        raise InputError(e.key, e.expected, e.found, path) from None
    return data


def _load_links(run_dir: str) -> list[dict] | None:
    path = inside(run_dir, "links.csv")
    if not os.path.exists(path):
        return None
    try:
        return links_mod.read_csv(path)
    except (OSError, ValueError, KeyError) as e:
        raise InputError("links.csv", "t_s,link,src,dst,util,gbps rows", str(e), path) from None


# -- dtnet report -------------------------------------------------------------

def report(run_dir: str, out) -> int:
    if os.path.isdir(run_dir) and not os.path.exists(inside(run_dir, "summary.json")) \
            and os.path.exists(inside(run_dir, "sweep.csv")):
        return report_sweep(run_dir, out)
    s = load_summary(run_dir)
    rows = _load_links(run_dir)
    topo, sc = s.get("topology", {}), s["scale"]
    out.write(f"run {s['name']} ({run_dir}): {s['status']}" + (f": {s['error']}" if s.get("error") else "") + "\n")
    where = (f"engine {s['engine']} (real-cluster units)" if _is_model(s) else
             f"datapath {s.get('datapath', '?')}; scale link {sc['link']:g}, bytes {sc['bytes']:g} "
             f"(time dilation {sc['dilation']:g}x)")
    out.write(f"  {topo.get('kind', '?')}, {topo.get('hosts', '?')} hosts, {topo.get('switches', '?')} switches; "
              f"routing {s.get('routing', '?')}; {where}\n")
    out.write(f"  code {_code(s)}" + (" (summary.json source: the engine's packages and the shared ones)"
                                     if _code(s) != "unknown" else " (made before summary.json had source)") + "\n")
    print_table(s, out)
    if rows is not None:
        print_links(rows, out)
    present = [f for f in ("trace.json", "links.csv", "config.yaml", "events.jsonl")
               if os.path.exists(inside(run_dir, f))]
    plots_dir = inside(run_dir, "plots")
    if os.path.isdir(plots_dir):
        present += [f"plots/{f}" for f in sorted(os.listdir(plots_dir)) if f.endswith(".png")]
    out.write("\nfiles: " + ", ".join(present) + "\n")
    return 0


def report_sweep(sweep_dir: str, out) -> int:
    """A sweep folder: the table `dtnet run` printed at the sweep's end, from its sweep.csv."""
    from experiment import sweep

    path = inside(sweep_dir, sweep.CSV_NAME)
    try:
        rows = sweep.read_csv(path)
    except (OSError, ValueError) as e:
        raise InputError("sweep.csv", "the table `dtnet run` writes for a sweep", str(e), path) from None
    done = sum(r["status"] == "complete" for r in rows)
    out.write(f"sweep {sweep_dir}: {len(rows)} points, {done} complete\n")
    sweep.print_table(rows, out)
    present = [f for f in (sweep.CSV_NAME, sweep.PLOT_NAME, "config.yaml") if os.path.exists(inside(sweep_dir, f))]
    out.write("\nfiles: " + ", ".join(present) + f"; one point's tables: dtnet report "
              f"{inside(sweep_dir, sweep.POINTS_DIR, '<point>')}\n")
    return 0


def print_links(rows: list[dict], out, top: int = 10) -> None:
    samples = len({r["t_s"] for r in rows})
    busiest = links_mod.summarize(rows, top)
    if not busiest:
        out.write(f"\nlinks: {samples} samples (links.csv); no link carried traffic\n")
        return
    out.write(f"\nlinks: {samples} samples (links.csv); busiest directed links by mean utilization\n")
    width = max(len(f"{b['src']} -> {b['dst']}") for b in busiest) + 2
    out.write(f"  {'link':<{width}}{'mean':>8}{'peak':>8}\n")
    for b in busiest:
        out.write(f"  {b['src'] + ' -> ' + b['dst']:<{width}}{b['mean_util']:>8.2f}{b['peak_util']:>8.2f}\n")


# -- dtnet compare ------------------------------------------------------------

def compare(run_dirs: list[str], out, plot: str | None = None) -> int:
    runs = [load_summary(d) for d in run_dirs]
    labels = [f"[{i + 1}]" for i in range(len(runs))]
    out.write("runs (ratios are against [1]):\n")
    for label, d, s in zip(labels, run_dirs, runs):
        topo = s.get("topology", {})
        where = (f"engine {s['engine']}" if _is_model(s) else
                 f"engine emulate, scale link {s['scale']['link']:g} bytes {s['scale']['bytes']:g}")
        out.write(f"  {label} {d}: {s['name']}, {topo.get('kind', '?')} {topo.get('hosts', '?')} hosts, "
                  f"routing {s.get('routing', '?')}, {where}, {s['status']}\n")
    table: list[tuple[str, list]] = [("traffic", []),
                                     ("  normalized throughput", [s["traffic"]["normalized_throughput"] for s in runs]),
                                     ("  aggregate Gb/s", [s["traffic"]["aggregate_gbps"] for s in runs]),
                                     ("  fidelity", [_verdict(s) for s in runs]),
                                     ("  code", [_code(s) for s in runs])]
    for job in _ordered(j["name"] for s in runs for j in s["jobs"]):
        per = [next((j for j in s["jobs"] if j["name"] == job), None) for s in runs]
        table.append((f"job {job}", []))
        for stat in ("mean", "p50", "p99"):
            table.append((f"  iteration time {stat}",
                          [_Secs(j["iteration_time_s"][stat]) if j and j["iterations"] else None for j in per]))
        keyed = [_keyed_collectives(j) for j in per]
        for key in _ordered(k for kc in keyed for k in kc):
            cs = [kc.get(key) for kc in keyed]
            algs = _ordered(c["algorithm"] for c in cs if c)
            op, size, n, _ = key
            table.append((f"  {op} {fmt_bytes(size)} x{n}" + (f" ({algs[0]})" if len(algs) == 1 else ""), []))
            if len(algs) > 1:
                table.append(("    algorithm", [c["algorithm"] if c else None for c in cs]))
            table.append(("    cct mean", [_Secs(c["cct_s"]) if c else None for c in cs]))
            table.append(("    busbw Gb/s", [c["busbw_gbps"] if c else None for c in cs]))
            table.append(("    algbw Gb/s", [c["algbw_gbps"] if c else None for c in cs]))
            if any(c and c.get("cct_vs_predicted") is not None for c in cs):
                table.append(("    cct / alpha-beta", [c.get("cct_vs_predicted") if c else None for c in cs]))
    _print_table(table, labels, out)
    for engine in _ordered(s.get("engine", "emulate") for s in runs):
        same = [(label, _code(s)) for label, s in zip(labels, runs)
                if s.get("engine", "emulate") == engine and _code(s) != "unknown"]
        if len({code for _, code in same}) > 1:
            out.write(f"\nnote: {', '.join(label for label, _ in same)} ran the {engine} engine on different code "
                      "(the code row, summary.json source): part of a difference may be the code's\n")
    if plot:
        from experiment.outputs import plots

        try:
            plots.comparison_chart(runs, [f"{label} {s['name']}" for label, s in zip(labels, runs)], plot)
        except OSError as e:
            raise InputError("--plot", "a writable PNG path", e.strerror, plot) from None
        out.write(f"\nchart: {plot}\n")
    return 0


def _code(s: dict) -> str:
    """The first 12 hex digits of the run's source fingerprint, or "unknown" before it was kept."""
    fp = provenance.fingerprint_of(s)
    return fp[:12] if fp else "unknown"


def _is_model(s: dict) -> bool:
    """Made by a model engine (flow, packet): real-cluster units, no emulator fidelity."""
    return s.get("engine") not in (None, "emulate")


def _verdict(s: dict) -> str:
    """The fidelity row: the emulator's verdict, or that a model made the run."""
    if _is_model(s):
        return f"model ({s['engine']})"
    return "OK" if s["fidelity"]["ok"] else "NOT FAITHFUL"


class _Secs(float):
    """A duration, printed in s, ms or us."""


def _keyed_collectives(job: dict | None) -> dict:
    """Collectives keyed by (op, size, ranks, n-th of those): the algorithm may
    differ between runs (that is often what is compared)."""
    out: dict = {}
    for c in (job or {}).get("collectives", []):
        base = (c["op"], c["size_bytes"], c["ranks"])
        nth = sum(1 for k in out if k[:3] == base)
        out[base + (nth,)] = c
    return out


def _ordered(items) -> list:
    seen: dict = {}
    for x in items:
        seen.setdefault(x, None)
    return list(seen)


def _cell(value, first=None) -> str:
    """A value, with its ratio to `first` (the same row's value in run [1]) when given."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    text = fmt_seconds(value) if isinstance(value, _Secs) else f"{value:.3f}" if value < 10 else f"{value:.1f}"
    if first is None or isinstance(first, str):
        return text
    return text + (f" ({value / first:.2f}x)" if first else " (-)")


def _print_table(table, labels, out) -> None:
    cells = [(name, [_cell(v, vals[0] if i else None) for i, v in enumerate(vals)]) for name, vals in table]
    lw = max(len(name) for name, _ in cells) + 2
    cw = max([len(c) for _, cs in cells for c in cs] + [len(x) for x in labels]) + 2
    out.write("\n" + " " * lw + "".join(f"{x:>{cw}}" for x in labels) + "\n")
    for name, cs in cells:
        out.write((f"{name:<{lw}}" + "".join(f"{c:>{cw}}" for c in cs)).rstrip() + "\n")
