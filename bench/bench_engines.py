"""The flow and packet engines checked against the emulator: the same experiments on each, back to back.

    sudo .venv/bin/python bench/bench_engines.py [--only SUBSTRING ...] [--out DIR] [--list]
                                                 [--engines emulate,flow,packet,packet-real] [--flow-only] [--seeds N]
                                                 [--emulate-replicates K]
    .venv/bin/python bench/bench_engines.py --engines flow --out DIR [--flow-set flow.KEY=VALUE ...]
    .venv/bin/python bench/bench_engines.py --reference packet [--only SUBSTRING ...] [--out DIR] [--list]
                                            [--flow-set flow.KEY=VALUE ...] [--packet-set KEY=VALUE ...]
                                            [--packet-replicates K [--packet-jitter-ns NS]]

With --reference packet the flow engine is held to the packet engine instead, in real units, on
points of its own from 16 to 1,024 GPUs (bench/flow_vs_packet.py); no emulator run is started.

Each point is an experiment file of experiments/ with overrides, with `transport.tcp.cc: cubic`
on every engine (this kernel's default is bbr; ns-3 runs Cubic). It runs on the emulator
(`dtnet run`, holding /tmp/dtnet-mininet.lock, as every emulator run must), then on the flow
engine (in this process) and on the packet engine in the emulator's units
(`packet: {units: emulated}`, holding the same lock when estimated over 20 s), and the bench prints per point the figure
each engine gives, their ratios (flow / emulator, packet / emulator) and whether the emulator
marked its run faithful. With packet-real in --engines the packet engine runs each point in real
units too (seed 0; --packet-set settings apply to these runs), and the bench prints packet
emulated / packet real, what the emulator's own units (bytes scaled, 9 KB frames, HTB's two-frame
burst after an idle gap, its queues) do to the point with the transport model held fixed, and flow
/ packet real, the flow engine against the real cluster's packets on the emulator's points. The
groups:

- all-reduce with each algorithm at 256 MiB and 1 GiB on a single switch (8 GPUs), a k=4
  fat-tree and a rail-optimized fabric (16 GPUs): collective time. `shortest` routing, which
  both engines route identically (the controller's tables), so that the comparison is of the
  model and not of hashing luck;
- all-gather, reduce-scatter, all-to-all on the fat-tree: collective time;
- Hedera's stride and staggered (random) patterns under ECMP and congestion-aware:
  normalized throughput;
- two and three jobs contending under ecmp, congestion-aware and coschedule: mean iteration
  time, and whether the engines rank the policies alike (coschedule included, on every engine);
- the GPT 3D breakdown (tp 4, pp 2, dp 2): iteration time, compute, exposed communication, idle;
- a link-down fault in the middle of a stride: completion time.

Under ECMP the emulator's hash (OVS, the kernel's ephemeral ports) cannot be reproduced, so
the flow engine runs N seeds (--seeds, default 8) and the bench gives the median, the spread
and whether the emulator's figure lies inside it; the packet engine runs seed 0 only, or the
median of --packet-seeds N (its runs of seed k > 0 in DIR/packet/<point>/seedK). Emulator
and packet results already complete in DIR/emulate/<point> and DIR/packet/<point> for the same
experiment are reused when the code at hand made them (summary.json `source`: the fingerprint of
that engine's packages and the shared ones, so a change to the flow model keeps the emulator's
runs); runs from other code are set aside (DIR/emulate/<point>.oldN) and measured again, and
named. Without emulate in --engines the emulator is never started. DIR/bench_engines.json keeps
every figure.

An emulator run is one draw: of the kernel's scheduling, of the sockets' hashes that OVS's select
groups spread (so of ECMP's paths), of TCP's losses. With --emulate-replicates K each point runs K
times (replicate r > 0 in DIR/emulate-repR/<point>), the reference is the median of the faithful
runs, the point is faithful when at least half of them are, and the bench prints every run beside
the median and the verdict against each point's first run alone as well.
Goals (issue 15): median |ratio - 1| <= 5% and p90 <= 10% over the faithful points, the same
policy ranking on every contended point, and the flow engine >= 10^4 x faster; the packet engine
against the emulator: the same median and p90 and the same rankings.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import time
import sys
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

LOCK = "/tmp/dtnet-mininet.lock"
LOCK_ABOVE_S = 20.0  # packet runs estimated longer (packetsim.runner.estimate_wall_s) hold the lock
UNITS_NEAR = 0.10  # packet-real: points the emulator's units move less than its own p90 goal
TIMED = ("cct", "iteration", "makespan")  # figures that are times (the goals are on those)
DTNET = os.path.join(ROOT, ".venv", "bin", "dtnet")
MIB, GIB = 1 << 20, 1 << 30


def X(name):
    return os.path.join(ROOT, "experiments", f"{name}.yaml")


def cct(s):
    return s["jobs"][0]["collectives"][0]["cct_s"]


def iteration(s):
    return s["aggregate"]["iteration_time_s_mean"]


def first_iteration(s):
    """The jobs' mean first iteration, before identical jobs can drift out of phase; None
    without per-iteration times."""
    firsts = [j["iteration_time_s"]["all"][0] for j in s.get("jobs", [])
              if isinstance(j.get("iteration_time_s"), dict) and j["iteration_time_s"].get("all")]
    return statistics.fmean(firsts) if firsts else None


def first_figure(figure: str, s: dict):
    """A run's first collective (cct) or first iteration: every rank and job still starts in
    phase there, before a run's ranks and jobs drift apart; None where there is no such figure."""
    if figure == "cct":
        try:
            return s["jobs"][0]["collectives"][0]["cct_s_all"][0]
        except (KeyError, IndexError, TypeError):
            return None
    return first_iteration(s) if figure == "iteration" else None


def throughput(s):
    return s["traffic"]["normalized_throughput"]


def makespan(s):
    return s["aggregate"]["makespan_s"]


def _points() -> list[dict]:
    pts = []
    fabrics = {
        "single-switch": (X("ring-single-switch"), ("ring", "tree", "halving-doubling", "direct"), []),
        "fat-tree": (X("collectives-fat-tree"), ("ring", "tree", "halving-doubling", "direct"), []),
        "rail": (X("collectives-rail"), ("ring", "tree", "halving-doubling", "hierarchical"), []),
    }
    for fab, (path, algs, extra) in fabrics.items():
        for alg in algs:
            for size, sname in ((256 * MIB, "256MiB"), (GIB, "1GiB")):
                sets = [f"jobs.0.workload.algorithm={alg}", f"jobs.0.workload.size_bytes={size}",
                        "jobs.0.workload.iterations=3", "controller.routing=shortest", *extra]
                if fab == "rail" and alg == "ring":
                    sets.append("jobs.0.order=rail-aligned")
                pts.append({"group": "all-reduce", "label": f"all_reduce {alg} {sname} {fab}", "file": path,
                            "sets": sets, "figure": "cct", "name": "collective time"})
    for op, alg, size in (("all_gather", "ring", 256 * MIB), ("reduce_scatter", "ring", 256 * MIB),
                          ("all_to_all", "direct", 64 * MIB)):
        pts.append({"group": "collectives", "label": f"{op} {alg} {size // MIB}MiB fat-tree",
                    "file": X("collectives-fat-tree"), "figure": "cct", "name": "collective time",
                    "sets": [f"jobs.0.workload.collective={op}", f"jobs.0.workload.algorithm={alg}",
                             f"jobs.0.workload.size_bytes={size}", "jobs.0.workload.iterations=3",
                             "controller.routing=shortest"]})
    for pattern in ("stride", "staggered"):
        for routing in ("ecmp", "congestion-aware"):
            pts.append({"group": "hedera", "label": f"{pattern} {routing} fat-tree", "file": X(f"{pattern}-fat-tree"),
                        "sets": [f"controller.routing={routing}"], "figure": "throughput",
                        "name": "normalized throughput", "contend": f"hedera {pattern}", "policy": routing})
    for name, what in (("demo", "two jobs rail"), ("three-jobs-contending", "three jobs leaf-spine")):
        for routing in ("ecmp", "congestion-aware", "coschedule"):
            pts.append({"group": "contending", "label": f"{what} {routing}", "file": X(name),
                        "sets": [f"controller.routing={routing}"], "figure": "iteration",
                        "name": "iteration time", "contend": what, "policy": routing})
    pts.append({"group": "gpt", "label": "gpt-small 3d tp4 pp2 dp2", "file": X("gpt-3d-breakdown"), "sets": [],
                "figure": "iteration", "name": "iteration time", "breakdown": True})
    pts.append({"group": "fault", "label": "stride + 2 core links down", "file": X("link-down-fat-tree"),
                "sets": [], "figure": "makespan", "name": "completion time"})
    for p in pts:  # the kernel's default is bbr here (docs/transport.md); ns-3 runs Cubic: the same on both
        p["sets"].append("transport.tcp.cc=cubic")
    return pts


FIGURES = {"cct": cct, "iteration": iteration, "throughput": throughput, "makespan": makespan}


def slug(label: str) -> str:
    return "".join(c if c.isalnum() or c in ".-" else "_" for c in label)


# Finished runs passed over because other code made them, and runs reused that say nothing of
# their code (made before summary.json had `source`): both are reported at the end.
STALE: list[str] = []
UNKNOWN_SOURCE: list[str] = []
SET_ASIDE: list[str] = []  # finished emulator runs moved aside before a new run of their point


def _complete(folder: str, sets: list[str], path: str, engine: str = "emulate") -> dict | None:
    """The summary of this point, when a complete run of this very experiment, made by the code
    at hand (summary.json `source`: experiment.provenance), is there."""
    from experiment import model, provenance
    try:
        with open(os.path.join(folder, "summary.json")) as f:
            s = json.load(f)
        ran = model.load(os.path.join(folder, "config.yaml"))
        want = model.load(path, ["sweep={}", *sets])
    except (OSError, ValueError, Exception):  # noqa: BLE001: anything unreadable is simply not done
        return None
    if s.get("status") != "complete" or model.to_dict(ran)["jobs"] != model.to_dict(want)["jobs"] or \
            ran.routing != want.routing or ran.topology != want.topology or ran.transport != want.transport:
        return None
    if provenance.made_elsewhere(s, engine):
        STALE.append(folder)
        return None
    if provenance.fingerprint_of(s) is None:
        UNKNOWN_SOURCE.append(folder)
    return s


def _set_aside(folder: str) -> None:
    """A finished run that will not be reused (other code, or another experiment) moves to
    folder.oldN rather than be overwritten: nothing measured is lost."""
    from experiment import provenance
    if os.path.exists(os.path.join(folder, "summary.json")):
        SET_ASIDE.append(provenance.set_aside(folder))


def run_emulator(pt: dict, folder: str) -> tuple[dict | None, float | None]:
    cached = _complete(folder, pt["sets"], pt["file"])
    if cached is not None:
        return cached, cached.get("bench_wall_s")
    _set_aside(folder)
    os.makedirs(folder, exist_ok=True)
    timing = os.path.join(folder, "bench.wall")
    # The run's own wall time, measured once the lock is ours (waiting for it is not the emulator's).
    cmd = ["flock", LOCK, "/usr/bin/time", "-o", timing, "-f", "%e", DTNET, "run", pt["file"], "--out", folder,
           "--set", "sweep={}"]
    for s in pt["sets"]:
        cmd += ["--set", s]
    with open(os.path.join(folder, "bench.log"), "w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
    try:
        with open(timing) as f:
            wall = float(f.read().split()[-1])
    except (OSError, ValueError, IndexError):
        wall = None
    try:
        with open(os.path.join(folder, "summary.json")) as f:
            s = json.load(f)
    except (OSError, ValueError):
        return None, wall
    s["bench_wall_s"] = wall
    with open(os.path.join(folder, "summary.json"), "w") as f:
        json.dump(s, f, indent=1)
    return (s if rc in (0, 1) and s.get("status") == "complete" else None), wall


def run_flow(pt: dict, folder: str, seed: int, extra: tuple = ()) -> tuple[dict, float]:
    from experiment import model
    from flowsim.runner import run_experiment
    exp = model.load(pt["file"], ["sweep={}", *pt["sets"], "engine=flow", f"flow.ecmp_seed={seed}", *extra])
    t0 = time.perf_counter()
    with redirect_stdout(io.StringIO()):
        s = run_experiment(exp, folder, log=lambda m: None, force=True)  # a rerun measures afresh
    return s, time.perf_counter() - t0


def pct(values, q):
    s = sorted(values)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _fmt(v: float, name: str) -> str:
    if name.endswith("throughput"):
        return f"{v:.3f}"
    return f"{v * 1e3:.2f} ms"


def run_packet(pt: dict, folder: str, seed: int = 0, units: str = "emulated",
               extra: tuple = ()) -> tuple[dict | None, float | None, str | None]:
    """The point on the packet engine in the emulator's units (packet.units emulated) or in real
    units (units "real": the real cluster's rates, sizes and transport, as the flow engine models
    it), holding the Mininet lock when it is estimated to take long, so that no emulator run shares
    the CPU with a long ns-3 run: (summary, wall s, refusal). Seed 0 runs in folder, others in
    folder/seedN. extra: settings for this run only (--packet-set)."""
    import fcntl
    from badinput import InputError
    from experiment import model
    from packetsim.runner import run_experiment
    seed_sets = [f"flow.ecmp_seed={seed}"] if seed else []
    folder = os.path.join(folder, f"seed{seed}") if seed else folder
    sets = ["sweep={}", *pt["sets"], *seed_sets, *extra, "engine=packet", f"packet.units={units}"]
    cached = _complete(folder, [*pt["sets"], *seed_sets, *extra], pt["file"], engine="packet")
    if cached is not None and bool((cached.get("model") or {}).get("units")) == (units == "emulated"):
        return cached, cached.get("bench_wall_s"), None
    try:
        exp = model.load(pt["file"], sets)
        from packetsim.runner import check
        check(exp)
    except InputError as e:  # co-scheduling, for one: not in the packet engine yet
        return None, None, str(e)
    from packetsim.runner import estimate_wall_s, plan
    _, _, net, sc, t, _ = plan(exp)
    with open(LOCK, "a") as lock:
        if estimate_wall_s(sc, net, t) > LOCK_ABOVE_S:  # a short run takes seconds of CPU: no lock
            fcntl.flock(lock, fcntl.LOCK_EX)
        t0 = time.perf_counter()
        with redirect_stdout(io.StringIO()):
            s = run_experiment(exp, folder, log=lambda m: None, force=True)
        wall = time.perf_counter() - t0
    s["bench_wall_s"] = wall
    with open(os.path.join(folder, "summary.json"), "w") as f:
        json.dump(s, f, indent=1)
    return (s if s.get("status") == "complete" else None), wall, None


ENGINE_NAMES = ("emulate", "flow", "packet", "packet-real")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", default=[], help="run the points whose label contains this")
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "bench-engines"))
    ap.add_argument("--list", action="store_true", help="list the points and exit")
    ap.add_argument("--engines", default="emulate,flow",
                    help="comma-separated, of emulate, flow, packet (in the emulator's units), packet-real (the "
                         "packet engine in real units: how far the emulator's own units move each point); without "
                         "emulate the emulator's completed runs are reused and none is started")
    ap.add_argument("--flow-only", action="store_true", help="the same as --engines flow")
    ap.add_argument("--seeds", type=int, default=8, help="ECMP seeds the flow engine runs per ECMP point")
    ap.add_argument("--packet-seeds", type=int, default=1,
                    help="ECMP seeds the packet engine runs per ECMP point (the median is compared; default 1: "
                         "seed 0 only)")
    ap.add_argument("--reference", choices=("emulate", "packet"), default="emulate",
                    help="emulate (default): the points above against the emulator (--engines); packet: the flow "
                         "engine against the packet engine in real units, its own points (bench/flow_vs_packet.py)")
    ap.add_argument("--flow-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting for the flow engine's runs only, e.g. flow.headers=ppp (with --engines flow "
                         "and the emulator's runs reused, a model change costs only the flow engine's seconds)")
    ap.add_argument("--emulate-replicates", type=int, default=1, metavar="K",
                    help="emulator runs per point (default 1); the reference is the median of the faithful ones, "
                         "replicate r > 0 in DIR/emulate-repR/<point>: each run is one draw of the kernel's "
                         "scheduling and, under ECMP, of its hash")
    ap.add_argument("--packet-replicates", type=int, default=0, metavar="K",
                    help="with --reference packet: K more packet runs per point, each rank starting up to "
                         "--packet-jitter-ns late (packet.start_seed 1..K), and their median as the reference "
                         "(bench/flow_vs_packet.py says why)")
    ap.add_argument("--packet-jitter-ns", type=float, default=None, metavar="NS",
                    help="with --packet-replicates: the start jitter's bound (default 180: one 9,000-byte frame "
                         "at 400 Gb/s)")
    ap.add_argument("--packet-set", action="append", default=[], metavar="KEY=VALUE",
                    help="with --reference packet or --engines packet-real: a setting for the packet engine's "
                         "real-unit runs only, e.g. transport.tcp.tail_loss_probe=true (give another --out: the runs "
                         "differ from the plain ones)")
    args = ap.parse_args(argv)
    if args.emulate_replicates < 1:
        ap.error(f"--emulate-replicates: expected an integer >= 1, found {args.emulate_replicates}")
    if args.packet_replicates < 0:
        ap.error(f"--packet-replicates: expected an integer >= 0, found {args.packet_replicates}")
    for notes in (STALE, UNKNOWN_SOURCE, SET_ASIDE):  # each bench run reports its own
        notes.clear()
    from experiment.model import MAX_JITTER_NS
    if args.packet_jitter_ns is not None and not 0 < args.packet_jitter_ns <= MAX_JITTER_NS:
        ap.error(f"--packet-jitter-ns: expected nanoseconds in (0, {MAX_JITTER_NS:.0f}], found {args.packet_jitter_ns:g}")
    if args.reference == "packet":
        import flow_vs_packet
        return flow_vs_packet.main(args)
    engines = {"flow"} if args.flow_only else set(args.engines.split(","))
    if not engines <= set(ENGINE_NAMES) or not engines:
        ap.error(f"--engines: expected a comma-separated list of {', '.join(ENGINE_NAMES)}, found {args.engines}")
    pts = [p for p in _points() if not args.only or any(o in p["label"] for o in args.only)]
    if args.list:
        for p in pts:
            print(f"{p['group']:<12} {p['label']}")
        print(f"{len(pts)} points")
        return 0
    rows = []
    print(f"{'point':<46}{'figure':<22}{'emulator':>11}{'flow':>11}{'ratio':>8}{'packet':>11}{'pkt/emu':>8}  "
          f"{'faithful':<9}{'emu wall':>9}{'flow wall':>10}{'speedup':>9}{'pkt wall':>9}  flow over seeds")
    for p in pts:
        f = FIGURES[p["figure"]]
        emus = []
        for rep in range(args.emulate_replicates):
            emu_dir = os.path.join(args.out, "emulate" if rep == 0 else f"emulate-rep{rep}", slug(p["label"]))
            if "emulate" in engines:
                emus.append(run_emulator(p, emu_dir))
            else:
                done = _complete(emu_dir, p["sets"], p["file"])
                emus.append((done, done.get("bench_wall_s") if done else None))
        emu = next((s for s, _ in emus if s), None)  # breakdowns and retransmissions: the first complete run
        walls = [w for _, w in emus if w]
        emu_wall = statistics.median(walls) if walls else None
        ref, faithful, runs = emulator_reference([(f(s), bool(s["fidelity"]["ok"])) for s, _ in emus if s])
        row = {**{k: p[k] for k in ("group", "label", "figure", "name")}, "contend": p.get("contend"),
               "policy": p.get("policy"), "flow": None, "flow_seeds": [], "flow_wall_s": None, "flow_sim_s": None,
               "flow_model": None, "bundle": None, "bundle_sim_s": None,
               "emulator": ref, "faithful": faithful, "emulator_runs": runs,
               "emulator_run0": f(emus[0][0]) if emus[0][0] else None,
               "emulator_wall_s": emu_wall, "emulator_replay_s": emu.get("duration_s_wall") if emu else None,
               "packet": None, "packet_wall_s": None, "packet_ratio": None, "packet_refused": None}
        fig, seed0 = [], None
        routing = next((s.split("=", 1)[1] for s in p["sets"] if s.startswith("controller.routing=")), None)
        from experiment import model
        routing = routing or model.load(p["file"]).routing
        hashed = routing in ("ecmp", "congestion-aware", "coschedule")  # ECMP's luck decides some paths
        if "flow" in engines:
            seeds = range(args.seeds) if hashed else range(1)
            flows = []
            for seed in seeds:
                s, wall = run_flow(p, os.path.join(args.out, "flow", slug(p["label"]), f"seed{seed}"), seed,
                                   tuple(args.flow_set))
                flows.append((s, wall))
            fig = [f(s) for s, _ in flows if s["status"] == "complete"]
            seed0 = f(flows[0][0]) if flows[0][0]["status"] == "complete" else None  # the packet engine's hash
            bundle, _ = run_flow(p, os.path.join(args.out, "flow", slug(p["label"]), "bundle"), 0,
                                 ("flow.collective_model=bundle", *args.flow_set))
            row.update(flow=fig[0] if len(fig) == 1 else statistics.median(fig) if fig else float("nan"),
                       flow_seeds=fig, flow_wall_s=statistics.median(w for _, w in flows),
                       flow_sim_s=statistics.median(s["model"]["run_s"] for s, _ in flows),
                       flow_model=flows[0][0]["model"]["collective_model"],
                       bundle=f(bundle) if bundle["status"] == "complete" else None,
                       bundle_sim_s=bundle["model"]["run_s"])
            ff = [x for x in (first_figure(p["figure"], s) for s, _ in flows if s["status"] == "complete") if x]
            row["flow_first_iter"] = statistics.median(ff) if ff else None
            if p.get("breakdown"):
                row["breakdown"] = {"flow": flows[0][0]["jobs"][0]["breakdown_s"],
                                    "emulator": emu["jobs"][0]["breakdown_s"] if emu else None}
        if "packet" in engines:
            pkts = [run_packet(p, os.path.join(args.out, "packet", slug(p["label"])), seed)
                    for seed in (range(args.packet_seeds) if hashed else range(1))]
            pkt, pkt_wall, refused = pkts[0]
            pfig = [f(s) for s, _, _ in pkts if s]
            row.update(packet=statistics.median(pfig) if pfig else None, packet_wall_s=pkt_wall,
                       packet_refused=refused, packet_seeds=pfig)
            if pkt and row["emulator"]:
                row["packet_ratio"] = row["packet"] / row["emulator"]
                row["packet_retx"] = sum(fl["retransmissions"] for fl in pkt["flows"])
                row["packet_drops"] = sum(q["drops"] for q in pkt["queues"])
            if emu:
                row["emulator_retx"] = (emu.get("tcp") or {}).get("retrans_segs")
        if "packet-real" in engines:
            real, real_wall, refused = run_packet(p, os.path.join(args.out, "packet-real", slug(p["label"])),
                                                  units="real", extra=tuple(args.packet_set))
            row.update(packet_real=f(real) if real else None, packet_real_wall_s=real_wall,
                       packet_real_refused=refused)
            if real and row["packet"]:
                row["units_effect"] = row["packet"] / row["packet_real"]
            if real and seed0 is not None:
                row["flow_real_ratio"] = seed0 / row["packet_real"]
        row["ratio"] = row["flow"] / row["emulator"] if row["emulator"] and row["flow"] is not None else None
        row["ratio_run0"] = row["flow"] / row["emulator_run0"] if row["emulator_run0"] and \
            row["flow"] is not None else None
        row["inside_spread"] = (min(fig) * 0.98 <= row["emulator"] <= max(fig) * 1.02) if row["emulator"] and \
            len(fig) > 1 else None
        rows.append(row)
        spread = f"{_fmt(min(fig), p['name'])} .. {_fmt(max(fig), p['name'])}" + (
            " (emulator inside)" if row["inside_spread"] else " (emulator outside)" if row["inside_spread"] is False
            else "") if len(fig) > 1 else ""
        emu_s = _fmt(row["emulator"], p["name"]) if row["emulator"] is not None else "-"
        flow_s = _fmt(row["flow"], p["name"]) if row["flow"] is not None else "-"
        ratio = f"{row['ratio']:.3f}" if row["ratio"] else "-"
        pkt_s = _fmt(row["packet"], p["name"]) if row["packet"] is not None else (
            "refused" if row["packet_refused"] else "-")
        pratio = f"{row['packet_ratio']:.3f}" if row["packet_ratio"] else "-"
        speed = f"{emu_wall / row['flow_wall_s']:.0f}x" if emu_wall and row["flow_wall_s"] else "-"
        fwall = f"{row['flow_wall_s']:.3f}s" if row["flow_wall_s"] is not None else "-"
        pwall = f"{row['packet_wall_s']:.1f}s" if row["packet_wall_s"] else "-"
        print(f"{p['label']:<46}{p['name']:<22}{emu_s:>11}{flow_s:>11}{ratio:>8}{pkt_s:>11}{pratio:>8}  "
              f"{('yes' if row['faithful'] else 'NO' if emu else '-'):<9}"
              f"{(f'{emu_wall:.1f}s' if emu_wall else '-'):>9}{fwall:>10}{speed:>9}{pwall:>9}  {spread}", flush=True)
        ef = [x for x in (first_figure(p["figure"], s) for s, _ in emus if s and s["fidelity"]["ok"]) if x]
        row["emulator_first_iter"] = statistics.median(ef) if ef else None
        if row["emulator_first_iter"] and row.get("flow_first_iter"):
            fe, ff = row["emulator_first_iter"], row["flow_first_iter"]
            row["first_iter_ratio"] = ff / fe
            if p.get("contend"):
                print(f"  {'first iteration (jobs still in phase)':<58}{_fmt(fe, p['name']):>11}"
                      f"{_fmt(ff, p['name']):>11}{ff / fe:>8.3f}", flush=True)
        if len(runs) > 1:
            print(f"  {'emulator runs (median above)':<58}" + ", ".join(
                _fmt(x, p["name"]) + ("" if ok else " (unfaithful)") for x, ok in runs), flush=True)
        if row.get("packet_real") is not None:
            print(f"  {'real units: packet':<66}{_fmt(row['packet_real'], p['name']):>11}"
                  + (f"  packet emulated / real {row['units_effect']:.3f}" if row.get("units_effect") else "")
                  + (f"  flow / packet real {row['flow_real_ratio']:.3f}" if row.get("flow_real_ratio") else ""),
                  flush=True)
        if p.get("breakdown") and emu and row.get("breakdown"):
            for part in ("compute", "exposed_comm", "idle"):
                a, b = row["breakdown"]["emulator"][part], row["breakdown"]["flow"][part]
                print(f"  {'breakdown ' + part:<58}{a * 1e3:>9.2f} ms{b * 1e3:>8.2f} ms"
                      f"{(b / a if a else float('nan')):>8.3f}")
    if "flow" in engines:
        _verdict(rows)
        if args.emulate_replicates > 1:
            _first_run_verdict(rows)
    if "packet" in engines:
        _packet_verdict(rows)
    if "packet-real" in engines:
        _units_verdict(rows)
    _source_notes()
    return write_rows(args.out, "bench_engines.json", rows)


def _source_notes() -> None:
    """Say which finished runs other code made, and which reused runs do not say what code made them."""
    if STALE:
        print(f"  {len(STALE)} finished run(s) came from other code (summary.json source), so were measured "
              "again where their engine is in --engines and left out where not: " + ", ".join(sorted(STALE)))
    if SET_ASIDE:
        print(f"  {len(SET_ASIDE)} finished emulator run(s) not reused were kept beside the new ones: "
              + ", ".join(sorted(SET_ASIDE)))
    if UNKNOWN_SOURCE:
        print(f"  {len(UNKNOWN_SOURCE)} reused run(s) do not say what code made them (made before summary.json "
              "had source); delete them to measure afresh")


def emulator_reference(runs: list[tuple[float, bool]]) -> tuple[float | None, bool, list]:
    """The emulator's figure for a point from its runs ((figure, faithful) each): the median of the
    faithful runs, the point faithful when at least half of its runs are; with none faithful, the
    median of them all (shown, not judged)."""
    if not runs:
        return None, False, []
    good = [x for x, ok in runs if ok]
    return statistics.median(good or [x for x, _ in runs]), 2 * len(good) >= len(runs), [list(r) for r in runs]


def _first_run_verdict(rows: list[dict]) -> None:
    """The same goal against each point's first emulator run alone, as before replicates."""
    timed = [r for r in rows if r["ratio_run0"] and r["faithful"] and r["figure"] in TIMED]
    err = [abs(r["ratio_run0"] - 1) for r in timed]
    if err:
        print(f"  against each point's first emulator run alone: {len(timed)} points; median "
              f"{pct(err, 0.5) * 100:.1f}%, p90 {pct(err, 0.9) * 100:.1f}%")


def write_rows(out: str, name: str, rows: list[dict]) -> int:
    """Keep every figure in out/name, say where, and return the bench's exit status (0)."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, name), "w") as f:
        json.dump(rows, f, indent=1)
    print(f"\nfigures: {os.path.join(out, name)}")
    return 0


TIE = 0.02


def _sign(x: float, y: float) -> int:
    if abs(x - y) <= TIE * max(abs(x), abs(y)):
        return 0
    return 1 if x > y else -1


def _ranked(rs: list[dict], key: str, higher_better: bool) -> str:
    """Policies best first, '=' between two within TIE."""
    order = sorted(rs, key=lambda r: r[key], reverse=higher_better)
    out = order[0]["policy"]
    for a, b in zip(order, order[1:]):
        out += (" = " if _sign(a[key], b[key]) == 0 else " > ") + b["policy"]
    return out


def _verdict(rows: list[dict]) -> None:
    timed = [r for r in rows if r["ratio"] and r["faithful"] and r["figure"] in TIMED]
    err = [abs(r["ratio"] - 1) for r in timed]
    print(f"\nfaithful points with a time: {len(timed)} of {len(rows)}; |ratio - 1| median "
          f"{pct(err, 0.5) * 100:.1f}% (goal <= 5%), p90 {pct(err, 0.9) * 100:.1f}% (goal <= 10%)")
    for r in rows:
        if r["ratio"] and (abs(r["ratio"] - 1) > 0.10 or not r["faithful"]):
            print(f"  miss or unfaithful: {r['label']}: ratio {r['ratio']:.3f}"
                  + ("" if r["faithful"] else " (emulator NOT faithful)"))
    first = [r for r in timed if r.get("first_iter_ratio")]
    ferr = [abs(r["first_iter_ratio"] - 1) for r in first]
    if ferr:  # both engines start every rank and job in phase; the emulator's drift apart after that
        print(f"  the first collective or iteration alone (every rank and job starting in phase): {len(first)} points; "
              f"median {pct(ferr, 0.5) * 100:.1f}%, p90 {pct(ferr, 0.9) * 100:.1f}%; above 10%: "
              + (", ".join(f"{r['label']} {r['first_iter_ratio']:.3f}" for r in first
                           if abs(r["first_iter_ratio"] - 1) > 0.10) or "none"))
    _rankings(rows, "flow", "ratio")
    speed = [r["emulator_wall_s"] / r["flow_wall_s"] for r in rows if r["emulator_wall_s"]]
    sim = [r["emulator_wall_s"] / r["flow_sim_s"] for r in rows if r["emulator_wall_s"] and r["flow_sim_s"]]
    bsim = [r["emulator_wall_s"] / r["bundle_sim_s"] for r in rows if r["emulator_wall_s"] and r["bundle_sim_s"]]
    if speed:
        print(f"  flow engine vs emulator wall time, each whole run with its outputs: median "
              f"{statistics.median(speed):.0f}x faster (min {min(speed):.0f}x, max {max(speed):.0f}x); the simulation "
              f"alone: median {statistics.median(sim):.0f}x (min {min(sim):.0f}x, max {max(sim):.0f}x); with bundles: median "
              f"{statistics.median(bsim):.0f}x (min {min(bsim):.0f}x, max {max(bsim):.0f}x); goal >= 10000x")
    bund = [r for r in rows if r["bundle"] and r["flow_model"] == "detailed" and r["figure"] != "throughput"]
    if bund:
        print("  bundle / detailed figure: " + ", ".join(f"{r['label']} {r['bundle'] / r['flow']:.3f}" for r in bund
                                                       if abs(r["bundle"] / r["flow"] - 1) > 0.01)
              + f" (every other point within 1%)")


def _rankings(rows: list[dict], engine: str, ratio_key: str, ref: str = "emulator") -> bool:
    """Per contended group, the reference's (ref) ranking of the policies against engine's; True
    when they agree on every group."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if r["contend"] and r[ratio_key]:
            groups.setdefault(r["contend"], []).append(r)
    agree = True
    for g, rs in groups.items():
        higher_better = rs[0]["figure"] == "throughput"
        # Two policies within TIE of each other are a tie, in either engine; the rankings agree when
        # no pair is ordered one way by one engine and the other way by the other.
        flips = [(a["policy"], b["policy"]) for i, a in enumerate(rs) for b in rs[i + 1:]
                 if _sign(a[ref], b[ref]) * _sign(a[engine], b[engine]) < 0]
        agree = agree and not flips
        print(f"  ranking {g}: {ref} {_ranked(rs, ref, higher_better)}; {engine} "
              f"{_ranked(rs, engine, higher_better)}: "
              + ("same (ties within 2% aside)" if not flips else "DIFFERENT: " + ", ".join(f"{a} vs {b}" for a, b in flips)))
    return agree


def _packet_verdict(rows: list[dict]) -> None:
    """The packet engine (in the emulator's units) against the emulator: |packet / emulator - 1| over
    the faithful points, every figure (times and throughputs), and the policy rankings."""
    ok = [r for r in rows if r["packet_ratio"] and r["faithful"]]
    err = [abs(r["packet_ratio"] - 1) for r in ok]
    print(f"\npacket engine (emulated units) vs emulator, faithful points: {len(ok)} of {len(rows)}; "
          f"|packet/emu - 1| median {pct(err, 0.5) * 100:.1f}% (goal <= 5%), p90 {pct(err, 0.9) * 100:.1f}% "
          "(goal <= 10%)")
    for r in rows:
        if r["packet_ratio"] and (abs(r["packet_ratio"] - 1) > 0.10 or not r["faithful"]):
            print(f"  miss or unfaithful: {r['label']}: packet/emu {r['packet_ratio']:.3f}"
                  + ("" if r["faithful"] else " (emulator NOT faithful)"))
        if r["packet_refused"]:
            print(f"  not run at packet level: {r['label']}: {r['packet_refused']}")
        seeds = r.get("packet_seeds") or []
        if len(seeds) > 1 and r["emulator"]:
            inside = min(seeds) * 0.98 <= r["emulator"] <= max(seeds) * 1.02
            print(f"  over {len(seeds)} ECMP seeds: {r['label']}: packet {_fmt(min(seeds), r['name'])} .. "
                  f"{_fmt(max(seeds), r['name'])}, median {_fmt(r['packet'], r['name'])}; emulator "
                  f"{_fmt(r['emulator'], r['name'])} ({'inside' if inside else 'outside'})")
    _rankings(rows, "packet", "packet_ratio")


def _units_verdict(rows: list[dict]) -> None:
    """What the emulator's own units do to each point (the packet engine in the emulator's units
    against the same engine in real units), and the flow engine against the real units' packet
    engine on the emulator's points; beside each flow / emulator miss, the units' share of it."""
    both = [r for r in rows if r.get("units_effect") and r["faithful"]]
    err = [abs(r["units_effect"] - 1) for r in both]
    if err:
        print(f"\nthe emulator's units (packet emulated / packet real), faithful points: {len(both)}; median "
              f"{pct(err, 0.5) * 100:.1f}%, p90 {pct(err, 0.9) * 100:.1f}%")
    timed = [r for r in rows if r.get("flow_real_ratio") and r["faithful"] and r["figure"] in TIMED]
    ferr = [abs(r["flow_real_ratio"] - 1) for r in timed]
    if ferr:
        print(f"flow / packet real on the same faithful points with a time: {len(timed)}; median "
              f"{pct(ferr, 0.5) * 100:.1f}%, p90 {pct(ferr, 0.9) * 100:.1f}%")
    near = [r for r in rows if r["ratio"] and r["faithful"] and r["figure"] in TIMED
            and r.get("units_effect") and abs(r["units_effect"] - 1) <= UNITS_NEAR]
    nerr = [abs(r["ratio"] - 1) for r in near]
    if nerr:  # where the emulator's units keep it within UNITS_NEAR of real units, it can judge the flow engine
        print(f"flow / emulator where the emulator's units move the point {UNITS_NEAR:.0%} or less: {len(near)} points; "
              f"median {pct(nerr, 0.5) * 100:.1f}%, p90 {pct(nerr, 0.9) * 100:.1f}%")
    for r in rows:
        if r["ratio"] and r["faithful"] and abs(r["ratio"] - 1) > 0.10:
            ue, fr = r.get("units_effect"), r.get("flow_real_ratio")
            print(f"  flow / emulator {r['ratio']:.3f}: {r['label']}: packet emulated / real "
                  + (f"{ue:.3f}" if ue else "-") + ", flow / packet real " + (f"{fr:.3f}" if fr else "-"))
        if r.get("packet_real_refused"):
            print(f"  not run at packet level in real units: {r['label']}: {r['packet_real_refused']}")


if __name__ == "__main__":
    sys.exit(main())
