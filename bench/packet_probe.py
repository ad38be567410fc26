"""Look inside one packet-engine run: a connection's congestion window, or how unequally the
connections of each sender finish (the mechanisms behind docs/flow-engine.md, "Against the
packet engine").

    .venv/bin/python bench/packet_probe.py FILE [--set KEY=VALUE ...] --cwnd CONN
    .venv/bin/python bench/packet_probe.py FILE [--set KEY=VALUE ...] --first-transfers [--ranks N]

--cwnd runs ns-3's driver with DTNET_NS3_TRACE=CONN and prints that connection's congestion
window as it changes (simulated seconds, bytes). --first-transfers runs the scenario and prints,
per source rank, when the first transfer of each of its connections ends (for a direct
collective: the first phase's sends, which a fluid model ends together).

A scenario with a controller in the loop (congestion-aware routing, for one) runs only under
`dtnet run` (here the driver stops with exit 3): set DTNET_NS3_TRACE=CONN in its environment, and
the run folder keeps the driver's trace as packet-scenario.txt.err.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("--set", action="append", default=[], help="as dtnet run --set")
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--cwnd", type=int, metavar="CONN", help="trace this connection's congestion window")
    what.add_argument("--first-transfers", action="store_true")
    ap.add_argument("--ranks", type=int, default=3, help="source ranks to print with --first-transfers")
    ap.add_argument("--steps", type=int, metavar="BYTES", help="with --cwnd: per step of BYTES on that connection, "
                    "when its first byte left, when its last arrived, and the window at its start")
    ap.add_argument("--ssthresh", action="store_true", help="with --cwnd: print the slow-start threshold and "
                    "the congestion state as they change too")
    args = ap.parse_args(argv)
    from experiment import model
    from packetsim import ns3, runner, scenario
    exp = model.load(args.file, ["sweep={}", *args.set, "engine=packet"])
    _, _, net, sc, t, _ = runner.plan(exp, log=lambda m: None)
    with tempfile.TemporaryDirectory() as tmp:
        if args.cwnd is not None:
            path = os.path.join(tmp, "scenario.txt")
            scenario.write(sc, net, t, path, seed=exp.flow.ecmp_seed + 1, bin_s=runner.bin_s(sc, net),
                           end_s=runner.END_S, rto_min_s=runner.RTO_MIN_S)
            env = dict(os.environ, DTNET_NS3_TRACE=str(args.cwnd))
            err = subprocess.run([ns3.build(print), path], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 text=True, check=True).stderr
            if args.steps:
                print_steps(err, args.steps)
                return 0
            shown = ("cwnd", "ssthresh", "state") if args.ssthresh else ("cwnd",)
            for line in err.splitlines():
                parts = line.split()
                if len(parts) == 3 and parts[1] in shown:
                    value = f"{int(parts[2]):>9} B" if parts[2].isdigit() else parts[2]
                    print(f"{float(parts[0]) * 1e6:10.2f} us  {parts[1]:<8} {value}")
            return 0
        res, _ = runner.execute(sc, net, t, tmp, seed=exp.flow.ecmp_seed + 1, log=lambda m: None)
    tasks, first = res["tasks"], {}
    for i, (kind, conn) in enumerate(zip(sc.kinds, sc.conn_of_task)):
        if kind == scenario.TRANSFER and conn >= 0 and conn not in first:
            first[conn] = i
    by_src: dict[int, list] = {}
    for conn, i in first.items():
        by_src.setdefault(sc.conns[conn][1], []).append((tasks[i]["end"], sc.sizes[i]))
    for src in sorted(by_src)[:args.ranks]:
        ends = sorted(e for e, _ in by_src[src])
        print(f"rank {src}: {len(ends)} first transfers of {by_src[src][0][1]:,} B end at {ends[0] * 1e6:.1f} to "
              f"{ends[-1] * 1e6:.1f} us (median {statistics.median(ends) * 1e6:.1f})")
    return 0


def print_steps(trace: str, step_bytes: int):
    """Per step of step_bytes of the traced connection (its sequence space from 1): first byte
    sent, last byte received, and cwnd when the step began, from the driver's trace lines
    (`T tx SEQ len N ...`, `T rx SEQ len N ...`, `T cwnd W`)."""
    first_tx, last_rx, cwnd, start_cwnd = {}, {}, 0, {}
    for line in trace.splitlines():
        p = line.split()
        if len(p) == 3 and p[1] == "cwnd":
            cwnd = int(p[2])
        elif len(p) >= 5 and p[1] in ("tx", "rx") and p[3] == "len" and int(p[4]) > 0:
            seq, n, t = int(p[2]) - 1, int(p[4]), float(p[0])
            if p[1] == "tx" and seq // step_bytes not in first_tx:
                first_tx[seq // step_bytes] = t
                start_cwnd[seq // step_bytes] = cwnd
            if p[1] == "rx":
                last_rx[(seq + n - 1) // step_bytes] = t
    for k in sorted(first_tx):
        end = last_rx.get(k)
        took = f"{(end - first_tx[k]) * 1e6:8.2f} us" if end is not None else "       -"
        print(f"step {k:3d}  first sent {first_tx[k] * 1e6:10.2f} us  last received "
              f"{(end or float('nan')) * 1e6:10.2f} us  took {took}  cwnd at start {start_cwnd[k]:>9} B")


if __name__ == "__main__":
    sys.exit(main())
