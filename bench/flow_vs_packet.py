"""The flow engine against the packet engine (ns-3) in real units: `bench_engines.py --reference packet`.

Each point is an experiment file of experiments/ with overrides, run on the flow engine (in this
process) and on the packet engine (in real units: 400 Gb/s, the file's MTU, 4 MiB buffers, Cubic
unless the point says otherwise), sized so that the packet run takes seconds to a minute of CPU.
Per point: both figures, flow / packet, both wall times and the packet engine's CPU seconds
(its planning here plus the ns-3 driver). Points fall in two classes, with the issue's goals on
|flow / packet - 1|: bandwidth-bound (median <= 3%, p90 <= 8%) and the others, where many flows
leave one NIC, enter one port or wait on latency (all-to-all, incast, latency: 10% and 20%).
A point is latency-bound when it sets a per-hop latency above 0 or when some step of its collective moves
under 64 KiB (a few 9 KB segments, under 2 us at 400 Gb/s): the small messages at 256 and 1,024
GPUs.
Contended groups (policies on one traffic) must rank the policies alike on both engines.

Packet results complete in DIR/packet-real/<point> for the same experiment are reused, so a
second run with other flow options (--flow-set) costs only the flow engine's seconds. --packet-set
gives the packet engine's runs settings of their own (a transport option the flow engine has no
counterpart for, e.g. transport.tcp.tail_loss_probe=true): the flow runs stay as they are.

--packet-replicates K runs each point K more times on the packet engine, each rank starting up to
--packet-jitter-ns late (default 180: one 9,000-byte frame at 400 Gb/s) drawn from packet.start_seed 1 to
K (DIR/packet-jitter/<point>/seed<S>), and takes their median as the reference: a deterministic
simulation whose ranks all start at the same nanosecond keeps its packets in phase, which no
cluster does (Floyd and Jacobson, "On traffic phase effects in packet-switched gateways", 1992).
The run without jitter is printed beside it, with the replicates' spread; the packet wall and CPU
columns then add up all K + 1 runs, and retx and drops are the run without jitter's. On co-scheduled points
the flow engine runs the same K replicates (flow.start_jitter_ns and flow.start_seed: the same
draws, DIR/flow-jitter/<point>/seed<S>) and its median is compared: the controller's schedule
follows the order in which the jobs' announcements reach it, which the offsets decide. Elsewhere
offsets under a frame time move a fluid model's answer by no more than their own length.
"""
from __future__ import annotations

import io
import json
import os
import statistics
import time
from contextlib import redirect_stdout

from bench_engines import FIGURES, X, _fmt, _rankings, pct, slug, write_rows

MIB = 1 << 20
BANDWIDTH, A2A, INCAST, LATENCY = "bandwidth", "all-to-all", "incast", "latency"
GOALS = {BANDWIDTH: (0.03, 0.08), "others": (0.10, 0.20)}  # median, p90 of |flow / packet - 1|
JITTER_NS = 180.0  # one 9,000-byte frame at 400 Gb/s: offsets that break phase lock and move no step
ORDERED = ("coschedule",)  # policies whose answer follows the order of the jobs' announcements


def _ar(alg: str, size: int, *sets: str, iterations: int = 1) -> list[str]:
    return [f"jobs.0.workload.algorithm={alg}", f"jobs.0.workload.size_bytes={size}",
            f"jobs.0.workload.iterations={iterations}", *sets]


def _pt(label, cls, file, sets, figure="cct", name="collective time", **kw) -> dict:
    return {"label": label, "cls": cls, "file": file, "sets": ["sweep={}", *sets], "figure": figure,
            "name": name, **kw}


def points() -> list[dict]:
    """At least 24 points from 16 to 1,024 GPUs, each small enough for ns-3 on this machine."""
    ss, ft, rail = X("ring-single-switch"), X("collectives-fat-tree"), X("collectives-rail")
    sp = "controller.routing=shortest"  # both engines take the controller's tables: no hashing luck
    n16 = "topology.hosts=16"

    def lat(us):
        return f"transport.latency_us={{host: {us}, fabric: {us}, nvlink: 0}}"

    pts = [
        _pt("ring 16 32MiB single-switch mtu9000", BANDWIDTH, ss, _ar("ring", 32 * MIB, n16, sp,
                                                                       "transport.mtu_bytes=9000")),
        _pt("ring 16 32MiB single-switch mtu4096", BANDWIDTH, ss, _ar("ring", 32 * MIB, n16, sp,
                                                                       "transport.mtu_bytes=4096")),
        _pt("ring 16 32MiB fat-tree", BANDWIDTH, ft, _ar("ring", 32 * MIB, sp)),
        _pt("tree 16 32MiB fat-tree", BANDWIDTH, ft, _ar("tree", 32 * MIB, sp)),
        _pt("halving-doubling 16 32MiB fat-tree", BANDWIDTH, ft, _ar("halving-doubling", 32 * MIB, sp)),
        _pt("direct 16 32MiB single-switch", A2A, ss, _ar("direct", 32 * MIB, n16, sp)),
        _pt("ring 16 32MiB rail", BANDWIDTH, rail, _ar("ring", 32 * MIB, sp, "jobs.0.order=rail-aligned")),
        _pt("hierarchical 16 32MiB rail", BANDWIDTH, rail, _ar("hierarchical", 32 * MIB, sp)),
        _pt("all_gather ring 16 32MiB fat-tree", BANDWIDTH, ft, _ar("ring", 32 * MIB, sp,
                                                                     "jobs.0.workload.collective=all_gather")),
        _pt("reduce_scatter ring 16 32MiB fat-tree", BANDWIDTH, ft,
            _ar("ring", 32 * MIB, sp, "jobs.0.workload.collective=reduce_scatter")),
        _pt("all_to_all direct 16 16MiB fat-tree", A2A, ft, _ar("direct", 16 * MIB, sp,
                                                                 "jobs.0.workload.collective=all_to_all")),
        _pt("all_to_all hierarchical 16 16MiB rail", A2A, rail,
            _ar("hierarchical", 16 * MIB, sp, "jobs.0.workload.collective=all_to_all")),
        _pt("all_to_all direct 16 16MiB single-switch cubic", A2A, ss,
            _ar("direct", 16 * MIB, n16, sp, "jobs.0.workload.collective=all_to_all", "transport.tcp.cc=cubic")),
        _pt("all_to_all direct 16 16MiB single-switch dctcp", A2A, ss,
            _ar("direct", 16 * MIB, n16, sp, "jobs.0.workload.collective=all_to_all", "transport.tcp.cc=dctcp",
                "transport.ecn={min_bytes: 131072, max_bytes: 131072, max_prob: 1.0}")),
    ]
    for buf in (32768, 1048576):  # 16 senders, 10 Gb/s: collapse on a shallow buffer, not on a deep one
        pts.append(_pt(f"incast 16 to 1 256KiB buffer {buf // 1024}KiB", INCAST, X("incast"),
                       ["jobs.0.hosts.count=17", f"transport.switch_buffer_bytes={buf}",
                        "jobs.0.workload.iterations=5"], figure="iteration", name="iteration time"))
    for us in (0, 2, 10):  # a small ring: 30 steps of 256 KiB, each 5.2 us at the line rate
        pts.append(_pt(f"ring 16 4MiB single-switch latency {us}us", LATENCY if us else BANDWIDTH, ss,
                       _ar("ring", 4 * MIB, n16, sp, lat(us))))
    small = ["jobs.0.workload.size_bytes=16777216", "jobs.0.workload.iterations=3", "jobs.0.workload.compute_ms=1"]
    for name, what, n in (("demo", "two jobs rail", 2), ("three-jobs-contending", "three jobs leaf-spine", 3)):
        for routing in ("ecmp", "congestion-aware", "coschedule"):
            sets = [f"controller.routing={routing}"] + [s.replace("jobs.0", f"jobs.{j}") for j in range(n)
                                                        for s in small]
            pts.append(_pt(f"{what} {routing}", BANDWIDTH, X(name), sets, figure="iteration",
                           name="iteration time", contend=what, policy=routing))
    for routing in ("ecmp", "spray"):
        pts.append(_pt(f"stride 16 32MiB fat-tree {routing}", BANDWIDTH, X("stride-fat-tree"),
                       [f"controller.routing={routing}", f"jobs.0.workload.size_bytes={32 * MIB}"],
                       figure="throughput", name="normalized throughput", contend="stride fat-tree",
                       policy=routing))
    pts.append(_pt("gpt-small 3d tp4 pp2 dp2", BANDWIDTH, X("gpt-3d-breakdown"),
                   ["jobs.0.workload.iterations=1"], figure="iteration", name="iteration time", breakdown=True))
    pts += [
        _pt("ring 64 16MiB single-switch", BANDWIDTH, ss, _ar("ring", 16 * MIB, "topology.hosts=64", sp)),
        _pt("hierarchical 256 4MiB rail", LATENCY, rail,
            _ar("hierarchical", 4 * MIB, sp, "topology={kind: rail-optimized, servers: 32, gpus_per_server: 8, "
                "spines: 8, link_gbps: 400, nvlink_gbps: 3600}")),
        _pt("ring 256 1MiB leaf-spine", LATENCY, ss,
            _ar("ring", MIB, sp, "topology={kind: leaf-spine, leaves: 16, spines: 8, hosts_per_leaf: 16, "
                "link_gbps: 400}")),
        _pt("halving-doubling 1024 1MiB fat-tree", LATENCY, ss,
            _ar("halving-doubling", MIB, sp, "topology={kind: fat-tree, k: 16, link_gbps: 400}")),
    ]
    return pts + near_results()


def near_results() -> list[dict]:
    """The three studies of docs/flow-results.md at 64 to 128 GPUs, so that each table's error bar
    comes from a point near its size: four jobs on a 4:1 leaf-spine, MoE all-to-all on 4-GPU servers,
    a 3D-parallel iteration (gpt-small has 12 heads: tp 4) over 16 servers."""
    pts = []
    # jobs-1024-policies shrunk 8x: 16 leaves of 8 GPUs, 2 spines (4:1 up, as there); each job has 2
    # GPUs under every leaf, its ring crossing leaves at every hop; rank i of job j is
    # h[(i mod 16) x 8 + (i div 16) x 4 + j]. Compute and all-reduce in the 1,024 file's ratio.
    sets = ["topology={kind: leaf-spine, leaves: 16, spines: 2, hosts_per_leaf: 8, link_gbps: 400}"]
    for j in range(4):
        hosts = ", ".join(f"h{(i % 16) * 8 + (i // 16) * 4 + j}" for i in range(32))
        sets += [f"jobs.{j}.hosts=[{hosts}]", f"jobs.{j}.workload.size_bytes={16 * MIB}",
                 f"jobs.{j}.workload.iterations=5", f"jobs.{j}.workload.compute_ms=2.5"]
    for routing in ("ecmp", "congestion-aware", "coschedule"):
        pts.append(_pt(f"four jobs 128 leaf-spine {routing}", BANDWIDTH, X("jobs-1024-policies"),
                       [f"controller.routing={routing}", *sets], figure="iteration", name="iteration time",
                       contend="four jobs leaf-spine 128", policy=routing))
    ft = "topology={kind: fat-tree, k: 8, gpus_per_server: 4, link_gbps: 400, nvlink_gbps: 3600}"
    for alg in ("direct", "hierarchical"):  # moe-a2a-1024's fat-tree rows, 128 GPUs
        pts.append(_pt(f"all_to_all {alg} 128 16MiB fat-tree 4-GPU servers", A2A, X("moe-a2a-1024"),
                       [ft, f"jobs.0.workload.algorithm={alg}", f"jobs.0.workload.size_bytes={16 * MIB}",
                        "jobs.0.workload.iterations=1", "controller.routing=ecmp"]))
    pts.append(_pt("gpt-small 3d tp4 pp2 dp8 64 rail", BANDWIDTH, X("gpt-3d-breakdown"),
                   ["topology={kind: rail-optimized, servers: 16, gpus_per_server: 4, spines: 4, link_gbps: 400, "
                    "nvlink_gbps: 3600}", "jobs.0.workload.dp=8",
                    "jobs.0.workload.iterations=1"], figure="iteration", name="iteration time", breakdown=True))
    return pts


def _same(folder: str, exp) -> dict | None:
    """The packet engine's complete real-unit summary of this very experiment in folder, else None."""
    from experiment import model
    try:
        with open(os.path.join(folder, "summary.json")) as f:
            s = json.load(f)
        ran = model.load(os.path.join(folder, "config.yaml"))
    except Exception:  # noqa: BLE001: anything unreadable is simply not done
        return None
    same = model.to_dict(ran) == model.to_dict(exp)
    return s if same and s.get("status") == "complete" and not (s.get("model") or {}).get("units") else None


def _load(pt: dict, engine: str, extra=()):
    from experiment import model
    return model.load(pt["file"], [*pt["sets"], f"engine={engine}", *extra])


def estimate(pt: dict, packet_sets=()) -> float:
    """The packet engine's own estimate of the point's seconds (packetsim.runner.estimate_wall_s)."""
    from packetsim.runner import estimate_wall_s, plan
    _, _, net, sc, t, _ = plan(_load(pt, "packet", packet_sets), log=lambda m: None)
    return estimate_wall_s(sc, net, t)


def run_packet(pt: dict, folder: str, packet_sets=()) -> tuple[dict | None, float | None, float | None]:
    """(summary, wall s, CPU s) of the point on the packet engine in real units; CPU s is this
    process's (planning, outputs) plus the ns-3 driver's (a child process)."""
    from packetsim.runner import run_experiment
    exp = _load(pt, "packet", packet_sets)
    cached = _same(folder, exp)
    if cached is not None:
        return cached, cached.get("bench_wall_s"), cached.get("bench_cpu_s")
    t0, c0 = time.perf_counter(), os.times()
    with redirect_stdout(io.StringIO()):
        s = run_experiment(exp, folder, log=lambda m: None, force=True)
    c1 = os.times()
    s["bench_wall_s"] = time.perf_counter() - t0
    s["bench_cpu_s"] = sum(getattr(c1, k) - getattr(c0, k) for k in ("user", "system", "children_user",
                                                                       "children_system"))
    with open(os.path.join(folder, "summary.json"), "w") as f:
        json.dump(s, f, indent=1)
    return (s if s.get("status") == "complete" else None), s["bench_wall_s"], s["bench_cpu_s"]


def run_flow(pt: dict, folder: str, flow_sets: list[str]) -> tuple[dict, float]:
    from flowsim.runner import run_experiment
    exp = _load(pt, "flow", flow_sets)
    t0 = time.perf_counter()
    with redirect_stdout(io.StringIO()):
        s = run_experiment(exp, folder, log=lambda m: None, force=True)
    return s, time.perf_counter() - t0


def main(args) -> int:
    pts = [p for p in points() if not args.only or any(o in p["label"] for o in args.only)]
    if args.list:
        for p in pts:
            print(f"{p['cls']:<11} {p['label']:<52} packet estimate {estimate(p, args.packet_set):7.1f} s",
                  flush=True)
        print(f"{len(pts)} points")
        return 0
    rows = []
    reps = args.packet_replicates
    jitter = JITTER_NS if args.packet_jitter_ns is None else args.packet_jitter_ns
    if reps:
        print(f"packet reference: the median of {reps} replicates, each rank starting up to {jitter:g} ns late "
              f"(packet.start_seed 1 to {reps}); 'no jitter': every rank at t = 0")
    print(f"{'point':<52}{'class':<11}{'figure':<22}{'flow':>11}{'packet':>11}{'ratio':>8}{'flow wall':>10}"
          f"{'pkt wall':>9}{'pkt CPU':>8}{'retx':>7}{'drops':>7}" + (f"{'no jitter':>11}{'spread':>8}" if reps else ""))
    for p in pts:
        pkt, pwall, pcpu = run_packet(p, os.path.join(args.out, "packet-real", slug(p["label"])), args.packet_set)
        s, fwall = run_flow(p, os.path.join(args.out, "flow-real", slug(p["label"])), args.flow_set)
        f = FIGURES[p["figure"]]
        single = f(pkt) if pkt else None
        replicas = []
        for seed in range(1, reps + 1):
            rep, rwall, rcpu = run_packet(p, os.path.join(args.out, "packet-jitter", slug(p["label"]), f"seed{seed}"),
                                          (*args.packet_set, f"packet.start_jitter_ns={jitter:g}", f"packet.start_seed={seed}"))
            if rep is None:
                replicas = None  # an incomplete replicate: no median to trust
                break
            replicas.append(f(rep))
            pwall, pcpu = (pwall or 0.0) + (rwall or 0.0), (pcpu or 0.0) + (rcpu or 0.0)
        flow = f(s) if s["status"] == "complete" else None
        flow_replicas = None
        if replicas and p.get("policy") in ORDERED:  # the same draws on the flow engine
            flow_replicas = []
            for seed in range(1, reps + 1):
                fr, _ = run_flow(p, os.path.join(args.out, "flow-jitter", slug(p["label"]), f"seed{seed}"),
                                 [*args.flow_set, f"flow.start_jitter_ns={jitter:g}", f"flow.start_seed={seed}"])
                flow_replicas.append(f(fr) if fr["status"] == "complete" else None)
            flow = statistics.median(flow_replicas) if None not in flow_replicas else None
        row = {k: p.get(k) for k in ("label", "cls", "figure", "name", "contend", "policy")}
        row.update(flow=flow, flow_single=f(s) if s["status"] == "complete" else None, flow_replicates=flow_replicas,
                   packet=(statistics.median(replicas) if replicas else None) if reps else single,
                   packet_single=single, packet_replicates=replicas if reps else None,
                   flow_wall_s=fwall, packet_wall_s=pwall, packet_cpu_s=pcpu, flow_model=s["model"]["collective_model"],
                   packet_retx=sum(x["retransmissions"] for x in pkt["flows"]) if pkt else None,
                   packet_drops=sum(q["drops"] for q in pkt["queues"]) if pkt else None,
                   packet_probes=sum(x.get("loss_probes", 0) for x in pkt["flows"]) if pkt else None,
                   packet_events=pkt["model"]["events"] if pkt else None)
        row["ratio"] = row["flow"] / row["packet"] if row["flow"] and row["packet"] else None
        if p.get("breakdown") and pkt:
            row["breakdown"] = {"flow": s["jobs"][0]["breakdown_s"], "packet": pkt["jobs"][0]["breakdown_s"]}
        rows.append(row)
        val = (lambda v: _fmt(v, p["name"]) if v is not None else "-")
        ratio = f"{row['ratio']:.3f}" if row["ratio"] else "-"
        pw = f"{pwall:.1f}s" if pwall else "-"
        pc = f"{pcpu:.1f}" if pcpu else "-"
        spread = (f"{(max(replicas) - min(replicas)) / statistics.median(replicas) * 100:.1f}%"
                  if replicas else "-")
        print(f"{p['label']:<52}{p['cls']:<11}{p['name']:<22}{val(row['flow']):>11}{val(row['packet']):>11}"
              f"{ratio:>8}{fwall:>9.2f}s{pw:>9}{pc:>8}{str(row['packet_retx']):>7}{str(row['packet_drops']):>7}"
              + (f"{val(single):>11}{spread:>8}" if reps else ""), flush=True)
        if row.get("breakdown"):
            for part in ("compute", "exposed_comm", "idle"):
                a, b = row["breakdown"]["packet"][part], row["breakdown"]["flow"][part]
                print(f"  {'breakdown ' + part:<83}{b * 1e3:>8.2f} ms{a * 1e3:>8.2f} ms"
                      f"{(b / a if a else float('nan')):>8.3f}")
    verdict(rows)
    return write_rows(args.out, "flow_vs_packet.json", rows)


def verdict(rows: list[dict]) -> bool:
    """Per class, median and p90 of |flow / packet - 1| against the goals, the worst points, and
    whether the policy rankings agree; True when every goal holds."""
    ok = True
    print()
    for cls, (g50, g90) in GOALS.items():
        rs = [r for r in rows if r["ratio"] and ((r["cls"] == BANDWIDTH) == (cls == BANDWIDTH))]
        err = [abs(r["ratio"] - 1) for r in rs]
        m, p90 = pct(err, 0.5), pct(err, 0.9)
        ok = ok and m <= g50 and p90 <= g90
        print(f"{cls} points: {len(rs)}; |flow/packet - 1| median {m * 100:.1f}% (goal <= {g50 * 100:.0f}%), "
              f"p90 {p90 * 100:.1f}% (goal <= {g90 * 100:.0f}%)" + ("" if m <= g50 and p90 <= g90 else ": MISSED"))
        for r in sorted(rs, key=lambda r: -abs(r["ratio"] - 1)):
            if abs(r["ratio"] - 1) > g50:
                print(f"  miss: {r['label']}: flow/packet {r['ratio']:.3f} (packet retx {r['packet_retx']}, "
                      f"drops {r['packet_drops']})")
    failed = [r["label"] for r in rows if not r["ratio"]]
    if failed:
        print("  no ratio (a run incomplete): " + ", ".join(failed))
    agree = _rankings(rows, "flow", "ratio", ref="packet")
    print("policy rankings: " + ("the same on every contended group" if agree else "DIFFER"))
    return ok and agree and not failed
