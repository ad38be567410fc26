"""The loop that proves the replay: a real gloo job, its profiler trace imported, replayed by dtnet's agents.

Per fabric, in one run:
1. `dtnet run` a real torch.distributed job (examples/gloo_allreduce.py: all-reduces of each size,
   every result checked) with `workload: {command: ..., profile: true}`; each rank writes its
   Kineto trace (and its execution trace) into its run folder.
2. `dtnet trace import kineto` those traces (or `pytorch-et`, the execution traces with --kineto
   for their durations).
3. `dtnet run` the imported trace with dtnet's agents, on the same fabric, hosts and scale.
Then it prints, per collective size: the real program's all-reduce time and the replay's (each
from the first rank's start to the last rank's end, real-cluster units, mean over the timed
iterations), their ratio, the same from the last rank's start (the collective without the
ranks' arrival skew), and per run the TCP retransmissions and DSACKs (a DSACK is a
retransmission the receiver did not need: a spurious one). Rows that are not bandwidth-bound
here (a few shaper bursts per rank) say so.

The recorded trace is in the program's own units: the bytes it sent (already emulated) and the
machine's seconds. The replay divides sizes by scale.bytes and durations by the time dilation
first, so that its agents send the same bytes and compute as long as the program did.

Needs root, Open vSwitch and torch==2.13.0 (`make torch`); hold the lock:
    sudo flock /tmp/dtnet-mininet.lock .venv/bin/python bench/bench_real_vs_replay.py [--repeat 2] [--switchd tso2]
Figures and what they mean: docs/real-programs.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from traffic.trace import dump, load  # noqa: E402

# name -> (topology, hosts): 4 ranks each, crossing 1, 3 and 5 switches.
FABRICS = {
    "single-switch": ("{kind: single-switch, hosts: 4, link_gbps: 400}", "all"),
    "leaf-spine": ("{kind: leaf-spine, leaves: 2, spines: 2, hosts_per_leaf: 2, link_gbps: 400}", "all"),
    "fat-tree": ("{kind: fat-tree, k: 4, link_gbps: 400}", "{count: 4, placement: spread}"),
}
SCALE = {"link": 2.44140625e-5, "bytes": 9.765625e-4}  # 2^-10 / 40, 2^-10: ~9.8 Mb/s for 400 Gb/s, 40x
SIZES = [16384, 65536, 262144, 1048576, 2097152]  # the program's bytes (emulated): 16 MiB .. 2 GiB real
LINK_GBPS = 400
# The link shaper passes a burst of two frames (MTU 9000) at the veth's speed
# (emulator/testbed/shaping.py). A collective that sends few bursts per link is
# not bandwidth-bound here, on either side: its row is marked.
BURST_BYTES = 2 * 9000
BURST_BOUND = 4  # a rank sending fewer than this many bursts per collective


def note(size_bytes: int, ranks: int, replay_busbw_gbps: float | None) -> str:
    """Why a row is not a bandwidth-bound comparison, or ''."""
    sent = size_bytes * SCALE["bytes"] * 2 * (ranks - 1) / ranks  # a ring all-reduce's bytes per rank
    out = []
    if sent < BURST_BOUND * BURST_BYTES:
        out.append(f"small: {sent / 1024:.0f} KiB emulated per rank, {sent / BURST_BYTES:.1f} shaper bursts")
    if replay_busbw_gbps and replay_busbw_gbps > 1.05 * LINK_GBPS:
        out.append("replay above line rate (bursts passed unshaped)")
    return "; ".join(out)


def experiment(name: str, fabric: str, workload: str, timeout_s: float) -> str:
    topo, hosts = FABRICS[fabric]
    return (f"name: {name}\ntopology: {topo}\nscale: {{link: {SCALE['link']}, bytes: {SCALE['bytes']}}}\n"
            f"controller: {{routing: ecmp}}\ntestbed: {{timeout_s: {timeout_s}{TESTBED_EXTRA}}}\n"
            f"jobs:\n  - name: j\n    hosts: {hosts}\n    workload: {workload}\n")


TESTBED_EXTRA = ""  # --switchd: the switch daemons' testbed keys, as YAML flow entries


def dtnet(*args, timeout=1800):
    r = subprocess.run([sys.executable, "-m", "dtnet", *args], capture_output=True, text=True, cwd=ROOT,
                       timeout=timeout)
    if r.returncode != 0:
        raise SystemExit(f"dtnet {' '.join(args)} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r


def rescale(src: str, dst: str, scale_bytes: float, dilation: float) -> None:
    """Recorded units (program bytes, machine seconds) -> the trace's real-cluster units."""
    t = load(src)
    for cls in t.classes:  # each class's op stream, once (a per-rank import has a class per rank)
        cls.ops = [dataclasses.replace(o, size_bytes=round(o.size_bytes / scale_bytes) if o.size_bytes else 0,
                                       duration_s=o.duration_s / dilation) for o in cls.ops]
    t.meta["rescaled"] = f"sizes / scale.bytes ({scale_bytes:g}), durations / dilation ({dilation:g})"
    dump(t, dst)


def by_size(summary: dict) -> dict:
    return {c["size_bytes"]: c for c in summary["jobs"][0]["collectives"] if c["op"] == "all_reduce"}


def run(work: str, name: str, fabric: str, workload: str) -> tuple[dict, float]:
    """`dtnet run` one experiment into work/name; its summary and wall seconds."""
    path = os.path.join(work, f"{name}.yaml")
    with open(path, "w") as f:
        f.write(experiment(f"{name}-{fabric}", fabric, workload, 900))
    t = time.monotonic()
    dtnet("run", path, "--out", os.path.join(work, name))
    with open(os.path.join(work, name, "summary.json")) as f:
        return json.load(f), time.monotonic() - t


def one(fabric: str, sizes: list[int], iterations: int, source: str, work: str) -> dict:
    """Real run, import, replay on one fabric; returns both summaries and the import line."""
    os.makedirs(work, exist_ok=True)
    script = os.path.join(ROOT, "examples", "gloo_allreduce.py")
    words = ", ".join(["python", script, "--sizes-bytes", *map(str, sizes), "--iterations", str(iterations)])
    real, real_s = run(work, "real", fabric, f"{{command: [{words}], profile: true}}")
    prof = os.path.join(work, "real", "programs", "j", "rank{}", "profile")
    n = real["jobs"][0]["ranks"]
    kineto = [os.path.join(prof.format(r), f"kineto-rank{r}.json") for r in range(n)]
    imported = os.path.join(work, "imported.json")
    if source == "kineto":
        r = dtnet("trace", "import", "kineto", *kineto, "--out", imported)
    else:
        et = [os.path.join(prof.format(r), f"et-rank{r}.json") for r in range(n)]
        r = dtnet("trace", "import", "pytorch-et", *et, "--kineto", *kineto, "--out", imported)
    trace = os.path.join(work, "replay-trace.json")
    rescale(imported, trace, SCALE["bytes"], SCALE["bytes"] / SCALE["link"])
    replay, replay_s = run(work, "replay", fabric, f"{{trace: {trace}}}")
    joined = {k: joined_s(work, k, n) for k in ("real", "replay")}
    return {"real": real, "replay": replay, "import": r.stdout.strip().splitlines()[0], "wall_s": (real_s, replay_s),
            "joined": joined}


def joined_s(work: str, name: str, ranks: int) -> dict:
    """Real-cluster seconds of each size's all-reduces from the last rank's start to the last
    rank's end, mean over them: the collective itself, without the ranks' arrival skew (which
    cct_s, from the first start, includes; the real program's checks of the previous size
    stagger its ranks by up to hundreds of ms of machine time)."""
    dilation = SCALE["bytes"] / SCALE["link"]
    spans: dict = {}  # (size_bytes real, collective id) -> [(start, end)] per rank
    if name == "real":
        for r in range(ranks):
            with open(os.path.join(work, "real", "programs", "j", f"rank{r}.out")) as f:
                for line in f:
                    if line.startswith('{"dtnet":"collective"'):
                        m = json.loads(line)
                        spans.setdefault((round(m["size_bytes"] / SCALE["bytes"]), m["id"]), []).append(
                            (m["start"], m["end"]))
    else:
        with open(os.path.join(work, name, "events.jsonl")) as f:
            for line in f:
                e = json.loads(line)
                if e.get("kind") == "collective" and e.get("op") == "all_reduce":
                    spans.setdefault((e["size_bytes"], e["op_id"]), []).append((e["start"], e["end"]))
    per: dict = {}
    for (size, _), v in spans.items():
        if len(v) == ranks:
            per.setdefault(size, []).append((max(e for _, e in v) - max(a for a, _ in v)) / dilation)
    return {size: sum(v) / len(v) for size, v in per.items()}


def tcp(summary: dict) -> str:
    t = summary.get("tcp", {})
    return f"retrans {t.get('retrans_segs', 0)}, dsacks {t.get('dsacks_received', 0)}, timeouts {t.get('timeouts', 0)}"


def fidelity(summary: dict) -> str:
    f = summary["fidelity"]
    return "ok" if f["ok"] else "NOT ok (" + ", ".join(c["name"] for c in f["checks"] if not c["ok"]) + ")"


def fmt_size(n: int) -> str:
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f:
            return f"{n / f:g} {unit}"
    return f"{n} B"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fabrics", nargs="+", default=list(FABRICS), choices=list(FABRICS))
    ap.add_argument("--sizes-bytes", type=int, nargs="+", default=SIZES,
                    help="the program's all-reduce sizes (emulated bytes; real = x 1024)")
    ap.add_argument("--iterations", type=int, default=3, help="timed iterations of the program (and the replay)")
    ap.add_argument("--repeat", type=int, default=1, help="loops per fabric; ratios are listed per loop")
    ap.add_argument("--import", dest="source", choices=("kineto", "pytorch-et"), default="kineto",
                    help="what to replay: the Kineto traces, or the execution traces timed by them")
    ap.add_argument("--out", help="keep the run folders here (default: a temporary folder)")
    ap.add_argument("--switchd", default="auto", help="the switch daemons of both runs (bench_capacity.py --switchd)")
    ap.add_argument("--json", help="also write every figure to this JSON file")
    ap.add_argument("--faster", type=int, default=1, choices=(1, 2, 4, 8),
                    help="multiply both scale factors (the dilation stays 40x): 4 runs the links at ~39 Mb/s, "
                         "where the emulator sizes its frames to 35,156 bytes")
    args = ap.parse_args()
    SCALE.update({k: v * args.faster for k, v in SCALE.items()})
    from bench.bench_capacity import switchd_settings
    try:
        settings = switchd_settings(args.switchd)
    except ValueError as e:
        ap.error(f"--switchd: {e}")
    global TESTBED_EXTRA
    TESTBED_EXTRA = "".join(f", {k}: {str(v).lower()}" for k, v in settings.items())
    if os.geteuid() != 0:
        print("bench_real_vs_replay: needs root (it runs the testbed)", file=sys.stderr)
        return 2
    base = args.out or tempfile.mkdtemp(prefix="dtnet-real-vs-replay-")
    rows, record = [], []
    for fabric in args.fabrics:
        for k in range(args.repeat):
            res = one(fabric, args.sizes_bytes, args.iterations, args.source, os.path.join(base, f"{fabric}-{k}"))
            real, replay = by_size(res["real"]), by_size(res["replay"])
            print(f"\n{fabric} (loop {k + 1}): {res['import']}", flush=True)
            print(f"  real program: {tcp(res['real'])}, fidelity {fidelity(res['real'])}, {res['wall_s'][0]:.0f} s")
            print(f"  replay:       {tcp(res['replay'])}, fidelity {fidelity(res['replay'])}, {res['wall_s'][1]:.0f} s")
            for size in sorted(real):
                a, b = real[size], replay.get(size)
                ratio = b["cct_s"] / a["cct_s"] if b else None
                why = note(size, res["real"]["jobs"][0]["ranks"], b["busbw_gbps"] if b else None)
                rows.append((fabric, size, ratio))
                record.append({"fabric": fabric, "loop": k, "size_bytes": size, "real_cct_s": a["cct_s"],
                               "replay_cct_s": b["cct_s"] if b else None, "ratio": ratio,
                               "real_busbw_gbps": a["busbw_gbps"], "replay_busbw_gbps": b["busbw_gbps"] if b else None,
                               "real_count": a["count"], "replay_count": b["count"] if b else 0,
                               "real_tcp": res["real"].get("tcp"), "replay_tcp": res["replay"].get("tcp"),
                               "real_fidelity_ok": res["real"]["fidelity"]["ok"],
                               "replay_fidelity_ok": res["replay"]["fidelity"]["ok"], "note": why,
                               "real_joined_s": res["joined"]["real"].get(size),
                               "replay_joined_s": res["joined"]["replay"].get(size)})
                print(f"  all_reduce {fmt_size(size):>8} x{a['count']}: real {a['cct_s'] * 1e3:8.3f} ms "
                      f"({a['busbw_gbps']:6.1f} Gb/s)   replay "
                      + (f"{b['cct_s'] * 1e3:8.3f} ms ({b['busbw_gbps']:6.1f} Gb/s) x{b['count']}   ratio {ratio:.3f}"
                         if b else "missing") + (f"   ({why})" if why else ""), flush=True)
                ja, jb = res["joined"]["real"].get(size), res["joined"]["replay"].get(size)
                if ja and jb:
                    print(f"  {'':>19}from the last rank's start: real {ja * 1e3:8.3f} ms, replay {jb * 1e3:8.3f} ms,"
                          f" ratio {jb / ja:.3f}", flush=True)
    print(f"\nreplay / real, all-reduce time (scale link {SCALE['link']:g}, bytes {SCALE['bytes']:g}: 40x):")
    sizes = sorted({s for _, s, _ in rows})
    print(f"  {'fabric':<15}" + "".join(f"{fmt_size(s):>12}" for s in sizes))
    for fabric in args.fabrics:
        cells = []
        for s in sizes:
            rs = [r for f, z, r in rows if f == fabric and z == s and r is not None]
            cells.append(("/".join(f"{r:.3f}" for r in rs)) if rs else "-")
        print(f"  {fabric:<15}" + "".join(f"{c:>12}" for c in cells))
    print(f"\nrun folders: {base}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
