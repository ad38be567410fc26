"""Published transport results on the packet engine (ns-3): incast, DCTCP against TCP, latency.

    .venv/bin/python bench/bench_transport.py [--only incast|dctcp|latency|latency-large ...] [--out DIR] [--quick] [--no-lock]
                                              [--set KEY=VALUE ...]

Each sweep runs points of an experiment file of experiments/ through the public API
(`dtnet.load(FILE, overrides).run(engine=...)`, the same as `dtnet run FILE --set ...`) and
prints one table, read from each run's summary.json:

- incast (experiments/incast.yaml; Phanishayee et al., FAST 2008; Vasudevan et al., SIGCOMM
  2009): goodput of N senders of a 256 KiB block each into one receiver as N and the switch
  buffer vary, with the receiver port's drops, the retransmissions and the rounds slower than
  the 200 ms minimum RTO; beside it the flow engine's goodput and rounds with `flow.losses=timeouts`
  (docs/flow-engine.md, "Losses"), and in how many cells both engines collapse or neither does;
- dctcp (experiments/dctcp-vs-tcp.yaml; Alizadeh et al., SIGCOMM 2010): two long flows into one
  port, Cubic against DCTCP at two marking thresholds K: throughput and the port's queue;
- latency (experiments/latency-ring.yaml; nccl-tests issue 241): a 32-GPU ring all-reduce's
  busbw as the per-hop fabric latency grows, on the packet engine, beside the alpha-beta line
  and the flow engine's answer without and with `flow.window_bytes=nccl`;
- latency-large: the same at 1 GiB over 8 GPUs (a large message, the bandwidth term dominant),
  with the bound a 4 MiB send buffer puts on a cross-leaf connection (buffer / RTT).

Each sweep holds /tmp/dtnet-mininet.lock while it runs (as `flock -o` would), so that it
neither slows nor is slowed by emulator runs and other benchmarks. Sizes are cut from the
files' own (fewer rounds, shorter flows, a smaller all-reduce) so that the whole script ends
in about 15 minutes on a loaded 2-core machine; the overrides are printed with each table.
DIR (default results/bench_transport) keeps every run folder and bench_transport.json. --set adds
an override to every run (e.g. transport.tcp.tail_loss_probe=true), after each point's own.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import resource
import shutil
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import dtnet  # noqa: E402

LOCK = "/tmp/dtnet-mininet.lock"
MIB = 1 << 20
SEND_BUFFER_BYTES = 4 << 20  # the packet engine's TCP send buffer (packetsim/driver.cc SndBufSize); receive: 6 MiB
LINE_LESS_HEADERS_GBPS = 400 * 8948 / 9002  # 400 Gb/s, MTU 9000: segments of 8,948 B on 9,002 B frames
SETS: list[str] = []  # --set: overrides of every run


def X(name: str) -> str:
    return os.path.join(ROOT, "experiments", f"{name}.yaml")


@contextlib.contextmanager
def machine_lock(take: bool = True):
    """The lock every emulator run and benchmark takes, held for one sweep (or not: --no-lock)."""
    if not take:
        yield
        return
    with open(LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def cpu_s() -> float:
    """User + system CPU seconds of this process and its finished children (the ns-3 driver)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def run_point(path: str, overrides: list[str], engine: str, out: str) -> dict:
    """One run of FILE with --set overrides (its sweep: dropped) on ENGINE; its summary.json."""
    shutil.rmtree(out, ignore_errors=True)  # a finished folder is refused: measure afresh
    exp = dtnet.load(path, ["sweep={}"] + overrides + SETS)
    with contextlib.redirect_stdout(open(os.devnull, "w")):
        exp.run(out, engine=engine, log=lambda *a, **k: None)
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)


def port_into(summary: dict, host: str) -> dict:
    """The queue of the switch port that feeds HOST (the incast and dctcp bottleneck)."""
    ports = [q for q in summary["queues"] if q["dst"] == host]
    return max(ports, key=lambda q: q["tx_bytes"])


def retransmissions(summary: dict) -> int:
    return sum(f["retransmissions"] for f in summary["flows"])


def probes(summary: dict) -> int | None:
    """Tail-loss probes sent by all senders; None with the probe off."""
    got = [f["loss_probes"] for f in summary["flows"] if "loss_probes" in f]
    return sum(got) if got else None


def incast(out: str, quick: bool) -> list[dict]:
    size, rounds, rto_s = 262144, (3 if quick else 8), 0.2
    senders = (4, 16) if quick else (4, 8, 16, 32)
    buffers = (32768, 1048576) if quick else (32768, 131072, 1048576)
    rows = []
    print(f"\n## incast: {size} B a sender a round, {rounds} rounds, 10 Gb/s, MTU 1500, Cubic, min RTO 200 ms")
    print(f"{'N':>3} {'buffer B':>9} {'goodput Gb/s':>13} {'of line':>8} {'drops':>6} {'retx':>6} "
          f"{'rounds > RTO':>13} {'round ms mean':>14} {'max':>8} {'probes':>7} {'flow Gb/s':>10} {'flow > RTO':>11}")
    for n in senders:
        for buf in buffers:
            over = [f"jobs.0.hosts.count={n + 1}", f"transport.switch_buffer_bytes={buf}",
                    f"jobs.0.workload.iterations={rounds}"]
            s = run_point(X("incast"), over, "packet", os.path.join(out, "incast", f"n{n}-b{buf}"))
            its = s["jobs"][0]["iteration_time_s"]
            q = port_into(s, "h0")
            goodput = n * size * 8 / its["mean"] / 1e9
            row = {"senders": n, "buffer_bytes": buf, "goodput_gbps": goodput, "of_line": goodput / 10,
                   "drops": q["drops"], "retransmissions": retransmissions(s),
                   "rounds_over_rto": sum(t > rto_s for t in its["all"]), "round_mean_s": its["mean"],
                   "round_max_s": max(its["all"]), "queue_max_bytes": q["max_bytes"], "loss_probes": probes(s)}
            f = run_point(X("incast"), over + ["flow.losses=timeouts"], "flow",
                          os.path.join(out, "incast-flow", f"n{n}-b{buf}"))["jobs"][0]["iteration_time_s"]
            row.update(flow_goodput_gbps=n * size * 8 / f["mean"] / 1e9,
                       flow_rounds_over_rto=sum(t > rto_s for t in f["all"]))
            rows.append(row)
            print(f"{n:>3} {buf:>9} {goodput:>13.2f} {goodput / 10:>8.2f} {q['drops']:>6} {row['retransmissions']:>6} "
                  f"{row['rounds_over_rto']:>9} / {rounds:<2} {its['mean'] * 1e3:>14.2f} {max(its['all']) * 1e3:>8.2f} "
                  f"{'-' if row['loss_probes'] is None else row['loss_probes']:>7} {row['flow_goodput_gbps']:>10.2f} "
                  f"{row['flow_rounds_over_rto']:>6} / {rounds:<2}", flush=True)
    alike = sum((r["rounds_over_rto"] > 0) == (r["flow_rounds_over_rto"] > 0) for r in rows)
    print(f"collapse (a round over the RTO) on both engines or on neither: {alike} of {len(rows)} cells")
    return rows


def dctcp(out: str, quick: bool) -> list[dict]:
    size = 25_000_000 if quick else 125_000_000  # 0.1 s of the port each, not the file's 1 s
    points = [("cubic", None, ["transport.tcp.cc=cubic"])]
    for k in (97500, 30000):
        points.append(("dctcp", k, ["transport.tcp.cc=dctcp", f"transport.ecn.min_bytes={k}",
                                    f"transport.ecn.max_bytes={k}", "transport.ecn.max_prob=1.0"]))
    rows = []
    print(f"\n## dctcp: 2 flows of {size} B into one 10 Gb/s port, 1 MiB of buffer, MTU 1500")
    print(f"{'cc':>6} {'K B':>7} {'Gb/s':>6} {'of line':>8} {'queue mean B':>13} {'p99 B':>8} {'max B':>8} "
          f"{'drops':>6} {'marks':>7} {'retx':>6}")
    for cc, k, over in points:
        s = run_point(X("dctcp-vs-tcp"), over + [f"jobs.0.workload.size_bytes={size}"], "packet",
                      os.path.join(out, "dctcp", f"{cc}-{k or 0}"))
        q = port_into(s, "h0")
        end_s = s["jobs"][0]["iteration_time_s"]["mean"]
        gbps = 2 * size * 8 / end_s / 1e9
        row = {"cc": cc, "k_bytes": k, "gbps": gbps, "of_line": gbps / 10, "queue_mean_bytes": q["mean_bytes"],
               "queue_p99_bytes": q["p99_bytes"], "queue_max_bytes": q["max_bytes"], "drops": q["drops"],
               "ecn_marks": q["ecn_marks"], "retransmissions": retransmissions(s)}
        rows.append(row)
        print(f"{cc:>6} {k or '-':>7} {gbps:>6.2f} {gbps / 10:>8.3f} {q['mean_bytes']:>13.0f} {q['p99_bytes']:>8.0f} "
              f"{q['max_bytes']:>8.0f} {q['drops']:>6} {q['ecn_marks']:>7} {row['retransmissions']:>6}", flush=True)
    return rows


def latency_sweep(out: str, sub: str, size: int, hops_us, topo: list[str], gpus: int) -> list[dict]:
    """The ring of experiments/latency-ring.yaml at SIZE bytes, one packet and two flow runs per
    per-hop latency; topo: --set items that shrink the fabric (GPUS ranks then)."""
    rows = []
    print(f"\n## {sub}: {gpus}-GPU ring all-reduce of {size} B, leaf-spine of 4 leaves at 400 Gb/s, MTU 9000, "
          f"Cubic; alpha = 2 x per-hop latency a step; window bound = {SEND_BUFFER_BYTES} B / RTT")
    print(f"{'hop us':>7} {'packet busbw':>13} {'alpha-beta':>11} {'window bound':>13} {'flow':>7} {'flow nccl':>10} "
          f"{'packet retx':>12} {'host q max B':>13} {'packet CCT ms':>14}")
    for hop in hops_us:
        over = topo + [f"transport.latency_us.fabric={hop}", f"prediction.latency_us={2 * hop}",
                       f"jobs.0.workload.size_bytes={size}", "jobs.0.workload.iterations=1"]
        tag = f"hop{hop}"
        pkt = run_point(X("latency-ring"), over, "packet", os.path.join(out, sub, tag + "-packet"))
        flow = run_point(X("latency-ring"), over, "flow", os.path.join(out, sub, tag + "-flow"))
        win = run_point(X("latency-ring"), over + ["flow.window_bytes=nccl"], "flow",
                        os.path.join(out, sub, tag + "-flow-nccl"))
        c = pkt["jobs"][0]["collectives"][0]
        pred_busbw = c["busbw_gbps"] * c["cct_s"] / c["predicted_cct_s"]  # the same size over the model's time
        # A cross-leaf connection's RTT is four fabric hops (two each way); its sender may have at
        # most its send buffer unacknowledged, so its rate is at most buffer / RTT, and a ring's
        # busbw is the rate of its slowest link.
        rtt_s = 4 * hop * 1e-6
        window_gbps = min(LINE_LESS_HEADERS_GBPS, SEND_BUFFER_BYTES * 8 / rtt_s / 1e9 if rtt_s else float("inf"))
        row = {"hop_us": hop, "packet_busbw_gbps": c["busbw_gbps"], "alpha_beta_busbw_gbps": pred_busbw,
               "window_bound_busbw_gbps": window_gbps,
               "flow_busbw_gbps": flow["jobs"][0]["collectives"][0]["busbw_gbps"],
               "flow_nccl_busbw_gbps": win["jobs"][0]["collectives"][0]["busbw_gbps"],
               "packet_retransmissions": retransmissions(pkt),
               "host_queue_max_bytes": max(q["max_bytes"] for q in pkt["queues"]),
               "packet_cct_s": c["cct_s"], "packet_events": pkt["model"].get("events")}
        rows.append(row)
        print(f"{hop:>7} {row['packet_busbw_gbps']:>13.1f} {pred_busbw:>11.1f} {window_gbps:>13.1f} "
              f"{row['flow_busbw_gbps']:>7.1f} {row['flow_nccl_busbw_gbps']:>10.1f} {row['packet_retransmissions']:>12} "
              f"{row['host_queue_max_bytes']:>13.0f} {c['cct_s'] * 1e3:>14.3f}", flush=True)
    return rows


def latency(out: str, quick: bool) -> list[dict]:
    """32 GPUs at 32 MiB: latency-bound steps (1 MiB a step)."""
    size = 8 * MIB if quick else 32 * MIB  # the file's 256 MiB x 3 is ~25 M packets a point
    return latency_sweep(out, "latency", size, (0, 100) if quick else (0, 10, 50, 100, 200), [], 32)


def latency_large(out: str, quick: bool) -> list[dict]:
    """A large message, where the bandwidth term dominates (nccl-tests measured up to GiBs): 1 GiB
    over 8 GPUs, two a leaf (the ring still crosses leaves 4 times), so that a point costs what the
    32 MiB x 32 GPU points cost x 8 (events grow as GPUs x bytes), a few CPU minutes."""
    size = 64 * MIB if quick else 1 << 30
    hops = (0, 200) if quick else (0, 10, 20, 100, 200, 400)
    return latency_sweep(out, "latency-large", size, hops, ["topology.hosts_per_leaf=2"], 8)


SWEEPS = {"incast": incast, "dctcp": dctcp, "latency": latency, "latency-large": latency_large}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", choices=sorted(SWEEPS), help="run only this sweep (repeatable)")
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "bench_transport"))
    ap.add_argument("--quick", action="store_true", help="two points a sweep and smaller sizes (a smoke run)")
    ap.add_argument("--no-lock", action="store_true",
                    help="do not take the machine lock (every figure is simulated time; the load is printed)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="sets",
                    help="an override of every run, after the point's own (e.g. transport.tcp.tail_loss_probe=true)")
    args = ap.parse_args(argv)
    SETS[:] = args.sets
    results = {}
    for name in args.only or list(SWEEPS):
        with machine_lock(not args.no_lock):
            t0, cpu0 = time.time(), cpu_s()
            load0 = os.getloadavg()[0]
            results[name] = SWEEPS[name](args.out, args.quick)
            print(f"({name}: {time.time() - t0:.0f} s wall, {cpu_s() - cpu0:.0f} CPU s, "
                  f"load {load0:.1f} to {os.getloadavg()[0]:.1f})", flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench_transport.json"), "w") as f:
        json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
