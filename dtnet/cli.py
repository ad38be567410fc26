"""The `dtnet` command. Exit status: 0 ok, 1 run failure, 2 bad input."""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys

from badinput import InputError, one_line

EXIT_OK, EXIT_FAIL, EXIT_INPUT = 0, 1, 2


def cmd_run(args) -> int:
    from emulator.run.runner import run_experiment
    from emulator.testbed import runstate
    from experiment import model
    from experiment.engine import Interrupted, RunFailure
    from experiment.outputs.summary import print_table

    exp = model.load(args.experiment, args.set)
    if args.auto_scale and exp.sweep:
        raise InputError("--auto-scale", "an experiment without a sweep: section (calibrate one point alone: "
                          "--auto-scale --set 'sweep={}' plus its overrides; then put the chosen scale in the file)",
                          f"sweep: with {len(exp.sweep)} points", args.experiment)
    if args.auto_scale:
        from experiment.program import is_program
        progs = [j.name for j in exp.jobs if is_program(j.workload)]
        if progs:
            raise InputError("--auto-scale", "jobs whose traffic dtnet replays (a real program's bytes are its "
                                             "own: give scale by hand)", f"program job {progs[0]}", args.experiment)
    out = args.out or os.path.join("results", exp.name)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise InputError("--out", "a folder that can be created and written", f"{out} ({e.strerror})") from None

    def on_signal(signum, _frame):
        raise Interrupted(signal.Signals(signum).name)

    if exp.sweep:
        return _run_sweep(args, exp, out, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(f"dtnet: running {exp.name} -> {out}")
    prepare = None
    if args.auto_scale:
        from emulator.run import autoscale

        def prepare(e):
            chosen, record = autoscale.calibrate(e, out, run_experiment, log=_flushed)
            verdict = "" if record["faithful"] else " (NO probe was faithful: running at the lowest scale that ran)"
            print(f"dtnet: running {exp.name} at scale.link={chosen.scale.link:g} "
                  f"scale.bytes={chosen.scale.bytes:g}{verdict}", flush=True)
            return chosen, record
    try:
        summary = run_experiment(exp, out, prepare=prepare)
    except runstate.LeaseError as e:  # another live run writes this folder: refuse at once
        print(f"dtnet: {e}", file=sys.stderr)
        return EXIT_INPUT
    except Interrupted as e:
        print(f"dtnet: interrupted by {e}; partial results in {out}", file=sys.stderr)
        return 130
    except RunFailure as e:
        print(f"dtnet: run failed: {e}", file=sys.stderr)
        return EXIT_FAIL
    print_table(summary, sys.stdout)
    print(f"\nresults: {out}/summary.json")
    if summary["status"] != "complete":
        print(f"dtnet: run incomplete: {summary['error']}", file=sys.stderr)
        return EXIT_FAIL
    return EXIT_OK


def _flushed(msg: str) -> None:
    print(msg, flush=True)  # calibration takes a while: show each probe as it goes


def _run_sweep(args, exp, out, on_signal) -> int:
    from emulator.run.runner import run_experiment
    from experiment import sweep
    from experiment.engine import Interrupted

    points = sweep.expand(exp)
    sweep.check(points)  # every point valid before the first one starts
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(f"dtnet: sweep {exp.name}: {len(points)} points -> {out}")
    try:
        done = sweep.run(exp, out, run_experiment, points)
    except Interrupted as e:
        print(f"dtnet: sweep interrupted by {e}; {out}/{sweep.CSV_NAME} has the points done; "
              f"run the same command again to resume", file=sys.stderr)
        return 130
    sweep.print_table(done["rows"], sys.stdout)
    print(f"\nresults: {out}/{sweep.CSV_NAME}, {out}/{sweep.PLOT_NAME}, {out}/{sweep.POINTS_DIR}/")
    if done["failed"]:
        print(f"dtnet: {len(done['failed'])} of {done['points']} points did not complete: "
              + ", ".join(done["failed"]), file=sys.stderr)
        return EXIT_FAIL
    return EXIT_OK


def cmd_check(args) -> int:
    from experiment import model
    from experiment.plan import build_plans

    exp = model.load(args.experiment, args.set)
    if exp.sweep:
        from experiment import sweep

        points = sweep.expand(exp)
        sweep.check(points)
        for p in points:
            print(f"  point {p.index}: {p.slug}")
        print(f"{args.experiment}: ok: {exp.name}: a sweep of {len(points)} points, each valid")
        return EXIT_OK
    fabric = exp.fabric()
    jobs = build_plans(exp, fabric)
    c = fabric.counts()
    print(f"{args.experiment}: ok: {exp.name}: {fabric.kind} with {c['hosts']} hosts, {c['switches']} switches; "
          f"{len(jobs)} job(s); emulated host link {exp.emulated_mbps(fabric.link_gbps):g} Mb/s, "
          f"time dilation {exp.scale.dilation:g}x")
    return EXIT_OK


def cmd_clean(args) -> int:
    from emulator.testbed.clean import clean

    return clean(args.out, log=print)


def cmd_report(args) -> int:
    from experiment.outputs import report

    return report.report(args.dir, sys.stdout)


def cmd_compare(args) -> int:
    from experiment.outputs import report

    if len(args.dirs) < 2:
        raise InputError("DIR", "at least two run folders to compare", len(args.dirs))
    return report.compare(args.dirs, sys.stdout, plot=args.plot)


def cmd_pcap_stats(args) -> int:
    from experiment.outputs import pcapstats

    return pcapstats.main(args.file, args.json, sys.stdout)


def cmd_topo_show(args) -> int:
    from topologies.show import show

    print(show(args.spec, as_json=args.json, full=args.full))
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dtnet", description="Packet-level emulation of distributed-training "
                                "traffic on Mininet, Open vSwitch and a Ryu controller.")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run an experiment file, or every point of a sweep (needs root)",
                       description="Run an experiment and write DIR: summary.json, events.jsonl, config.yaml "
                                   "(the resolved experiment), trace.json (Perfetto), links.csv, plots/, and "
                                   "pcap/ when the file asks for a capture, programs/<job>/ (each rank's stdout, stderr and working "
                                   "folder) when a job runs a real program (workload: {command: [ARGV...]}, "
                                   "docs/real-programs.md). A file with a sweep: section runs "
                                   "each point into DIR/points/<point>/ and writes DIR/sweep.csv and "
                                   "DIR/sweep.png; running it again into the same DIR skips the points "
                                   "already complete. With --auto-scale, short probe runs in "
                                   "DIR/calibration/ pick the scale first.")
    r.add_argument("experiment", help="experiment YAML file")
    r.add_argument("--out", help="output folder (default results/<name>/)")
    r.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a value, e.g. --set scale.link=1e-5 --set jobs.0.workload.size_bytes=1e9")
    r.add_argument("--auto-scale", action="store_true",
                   help="first calibrate: up to 4 short runs of this experiment (its first iterations, ~3 s "
                        "of replay each) on a x2 ladder of scale.link from the configured one, the time dilation "
                        "(scale.bytes / scale.link) kept; then run at the largest scale whose probe was faithful "
                        "with headroom (if none was, at the lowest tried, flagged). Probes go to "
                        "DIR/calibration/<probe>/; summary.json 'calibration' records them. The verdict is this "
                        "machine's now: other load counts. Not with a sweep (exit 2). README: 'Choosing the scale'")
    r.set_defaults(func=cmd_run)

    c = sub.add_parser("check", help="validate an experiment file (every point of a sweep) without running it")
    c.add_argument("experiment")
    c.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE")
    c.set_defaults(func=cmd_check)

    cl = sub.add_parser("clean", help="remove the leftovers of runs that died (their bridges, links, processes)",
                        description="Finds runs whose owner process is gone, from their state files, and removes "
                                    "exactly their resources. Never touches anything without a dtnet run tag.")
    cl.add_argument("out", nargs="*", help="run folders to clean (default: every dead run this machine knows)")
    cl.set_defaults(func=cmd_clean)

    rp = sub.add_parser("report", help="print a finished run's tables from its folder",
                        description="The tables `dtnet run` prints at its end, read from DIR/summary.json, plus "
                                    "the busiest links from DIR/links.csv when it exists.")
    rp.add_argument("dir", metavar="DIR", help="a run folder written by `dtnet run`")
    rp.set_defaults(func=cmd_report)

    cp = sub.add_parser("compare", help="put runs side by side, with ratios against the first",
                        description="Per job and collective: iteration time, completion time, busbw and algbw; "
                                    "per run: normalized throughput and fidelity. Ratios are against DIR1.")
    cp.add_argument("dirs", nargs="+", metavar="DIR", help="run folders written by `dtnet run` (two or more)")
    cp.add_argument("--plot", metavar="PNG", help="also draw the comparison chart into this PNG file")
    cp.set_defaults(func=cmd_compare)

    ps = sub.add_parser("pcap-stats", help="the flows in a capture: per five-tuple packets, bytes and rate",
                        description="Reads a pcap (for example DIR/pcap/<a>-<b>.pcap of a run with capture:) with "
                                    "scapy and prints, per flow (protocol, source and destination address and "
                                    "port): packets, bytes on the wire, TCP/UDP payload bytes, first and last "
                                    "time and rate, plus the total. Times and rates are the emulation's own.")
    ps.add_argument("file", metavar="FILE", help="a pcap or pcapng file")
    ps.add_argument("--json", action="store_true", help="print JSON (times as Unix seconds)")
    ps.set_defaults(func=cmd_pcap_stats)

    t = sub.add_parser("topo", help="describe fabrics (no root needed)")
    tsub = t.add_subparsers(dest="topo_command", required=True)
    ts = tsub.add_parser("show", help="counts and layers of a fabric spec or fabric file",
                         description="SPEC examples: single-switch:hosts=8, fat-tree:k=4, "
                                     "rail-optimized:servers=4,gpus_per_server=8,spines=4, "
                                     "leaf-spine:leaves=4,spines=2,hosts_per_leaf=4,oversubscription=2, "
                                     "superpod:sus=4 (DGX SuperPOD scalable units), hpn:segments=15 (Alibaba HPN "
                                     "pod). Per-tier rates: host_link_gbps, spine_link_gbps, oversubscription. "
                                     "Or a fabric file (FILE.yaml, FILE.graphml). Sizes beyond the documented "
                                     "limits (262,144 hosts) are refused at once. See docs/fabrics.md.")
    ts.add_argument("spec", metavar="SPEC|FILE")
    ts.add_argument("--json", action="store_true", help="print JSON with hosts, switches and links counts")
    ts.add_argument("--full", action="store_true", help="with --json: include every node and link")
    ts.set_defaults(func=cmd_topo_show)

    try:
        from traffic import cli as traffic_cli
        traffic_cli.register(sub)
    except ImportError:
        pass
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except InputError as e:
        print(f"dtnet: {one_line(str(e))}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
