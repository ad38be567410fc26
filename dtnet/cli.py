"""The `dtnet` command, a thin layer over the Python API (dtnet.api).

Exit status: 0 ok, 1 run failure, 2 bad input (one line: file, key, expected, found).
"""
from __future__ import annotations

import argparse
import gc
import os
import signal
import sys

from badinput import InputError, one_line
from experiment.engine import FolderBusy, Interrupted, RunFailure

EXIT_OK, EXIT_FAIL, EXIT_INPUT = 0, 1, 2
EXIT_PIPE = 128 + signal.SIGPIPE  # what a shell reports for a command whose reader went away


def _overrides(args) -> list[str]:
    """--set items, plus --engine and --no-plots as the overrides they are (so config.yaml and sweeps
    record them)."""
    return list(args.set) + ([f"engine={args.engine}"] if getattr(args, "engine", None) else []) \
        + (["outputs.plots=false"] if getattr(args, "no_plots", False) else [])


def cmd_run(args) -> int:
    from experiment.outputs import parallel

    if not args.no_plots and not args.cluster and args.workers is None:
        parallel.warm_plots()  # matplotlib imported beside the run's start (the run ends it if unused)
    try:
        return _run(args)
    finally:
        parallel.drop_warm()


def _run(args) -> int:
    from dtnet import api
    from experiment.outputs.summary import print_table
    from experiment.sweep import print_table as print_sweep

    exp = api.load(args.experiment, _overrides(args))
    out = args.out or os.path.join("results", exp.name)

    def on_signal(signum, _frame):
        raise Interrupted(signal.Signals(signum).name)

    if (args.cluster or args.workers is not None) and not exp.model.sweep:
        raise InputError("--cluster" if args.cluster else "--workers", "an experiment with a sweep: section (one "
                         "run runs here, without the flag)", "no sweep", args.experiment)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        result = exp.run(out, auto_scale=args.auto_scale, log=_flushed, cluster=args.cluster, workers=args.workers,
                         slots=args.slots, connect_timeout_s=args.connect_timeout_s, force=args.force,
                         tls=args.tls)
    except FolderBusy as e:  # another live run writes this folder: refuse at once
        print(f"dtnet: {e}", file=sys.stderr)
        return EXIT_INPUT
    except Interrupted as e:
        if exp.model.sweep:
            print(f"dtnet: sweep interrupted by {e}; {out}/sweep.csv has the points done; "
                  f"run the same command again to resume", file=sys.stderr)
        else:
            print(f"dtnet: interrupted by {e}; partial results in {out}", file=sys.stderr)
        return 130
    except RunFailure as e:
        print(f"dtnet: run failed: {e}", file=sys.stderr)
        return EXIT_FAIL
    if isinstance(result, api.SweepRun):
        print_sweep(result.done["rows"], sys.stdout)
        chart = f"{out}/sweep.png, " if exp.model.outputs.plots else ""
        print(f"\nresults: {out}/sweep.csv, {chart}{out}/points/")
        if result.failed:
            print(f"dtnet: {len(result.failed)} of {result.done['points']} points did not complete: "
                  + ", ".join(result.failed), file=sys.stderr)
            return EXIT_FAIL
        return EXIT_OK
    print_table(result.summary, sys.stdout)
    print(f"\nresults: {out}/summary.json")
    if result.status != "complete":
        print(f"dtnet: run incomplete: {result.summary['error']}", file=sys.stderr)
        return EXIT_FAIL
    return EXIT_OK


def _flushed(msg: str) -> None:
    print(msg, flush=True)  # a calibration or a sweep takes a while: show each step as it goes


def cmd_check(args) -> int:
    from controller.registry import imports_in_child
    from dtnet import api

    with imports_in_child():  # a user's policy module is imported in a child process, not here
        check = api.load(args.experiment, _overrides(args)).check()
    for i, slug in enumerate(check.points or ()):
        print(f"  point {i}: {slug}")
    print(f"{args.experiment}: ok: {check}")
    return EXIT_OK


def cmd_policy_show(args) -> int:
    from controller.registry import BUILTINS, policy_class

    names = [args.name] if args.name else list(BUILTINS)
    for name in names:
        cls = policy_class(name, "policy")
        doc = " ".join((cls.__doc__ or cls.__qualname__).strip().split("\n\n")[0].split())
        flags = [f for f, on in (("sees flows", cls.sees_flows), ("co-schedules", cls.coschedules)) if on]
        print(f"{name}: {doc}" + (f" [{', '.join(flags)}]" if flags else ""))
        for pname, prm in cls.PARAMS.items():
            print(f"  {pname:<18} default {prm.default!r:<8} {prm.expected}" + (f"; {prm.doc}" if prm.doc else ""))
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

    if args.full and not args.json:
        raise InputError("--full", "--json beside it (--full adds every node and link to the JSON)", "--full alone")
    print(show(args.spec, as_json=args.json, full=args.full))
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dtnet", description="Packet-level emulation of distributed-training "
                                "traffic on Mininet, Open vSwitch and a Ryu controller.")
    p.add_argument("--version", action="version", version=f"dtnet {version()}")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run an experiment file, or every point of a sweep (emulate: needs root)",
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
    r.add_argument("--engine", choices=("emulate", "flow", "packet"),
                   help="run on this engine, whatever the file's engine: says (emulate: Mininet, OVS and Ryu, "
                        "needs root; flow: the flow-level model, no root, real-cluster units; "
                        "docs/flow-engine.md; packet: ns-3 at packet level, real-cluster units, docs/packet-engine.md). "
                        "Same as --set engine=NAME")
    r.add_argument("--no-plots", action="store_true",
                   help="write no plots/ (nor a sweep's sweep.png): the data files alone, for scripted runs "
                        "and sweeps, where drawing takes most of a small flow run's time. Same as --set "
                        "outputs.plots=false")
    r.add_argument("--force", action="store_true",
                   help="overwrite the run folder even when it holds a finished run (without it a finished run "
                        "is refused with exit 2, and an unfinished run of the same experiment is run again in "
                        "place); a sweep still skips its points already complete")
    r.add_argument("--auto-scale", action="store_true",
                   help="first calibrate: up to 4 short runs of this experiment (its first iterations, ~3 s "
                        "of replay each) on a x2 ladder of scale.link from the configured one, the time dilation "
                        "(scale.bytes / scale.link) kept; then run at the largest scale whose probe was faithful "
                        "with headroom (if none was, at the lowest tried, flagged). Probes go to "
                        "DIR/calibration/<probe>/; summary.json 'calibration' records them. The verdict is this "
                        "machine's now: other load counts. Not with a sweep (exit 2). "
                        "docs/fidelity.md: 'Choosing the scale'")
    r.add_argument("--cluster", metavar="ADDRESS",
                   help="run a sweep's points on the workers of the Dask scheduler at ADDRESS (tcp://HOST:PORT; "
                        "`dtnet scheduler`, `dtnet worker`); each point's folder comes back into DIR/points/ as a "
                        "local sweep writes it. pip install 'dtnet[cluster]'. docs/cluster-sweeps.md")
    r.add_argument("--tls", metavar="DIR",
                   help="with --cluster tls://HOST:PORT: the cluster's certificates (ca.pem, cert.pem, key.pem, "
                        "from `dtnet scheduler --tls DIR`)")
    r.add_argument("--workers", type=int, metavar="N",
                   help="run a sweep's points on a local cluster of N worker processes (127.0.0.1; each gets "
                        "cores/N point slots; emulator points one at a time per worker)")
    r.add_argument("--slots", type=int, metavar="K",
                   help="with --workers: points each local worker runs at once (default: cores / N, at least 1)")
    r.add_argument("--connect-timeout-s", type=float, default=5.0, metavar="S",
                   help="with --cluster: how long the scheduler may take to answer, and then a first worker to "
                        "join (then exit 2)")
    r.set_defaults(func=cmd_run)

    c = sub.add_parser("check", help="validate an experiment file (every point of a sweep) without running it",
                       description="Reads the experiment as `dtnet run` would (with the same --set overrides), "
                                   "builds its fabric and plans every job, asks its engine whether it can model "
                                   "everything in it (such as the transport: keys, docs/transport.md), then prints what it would run. Needs no root and starts "
                                   "nothing. Exit 0 when valid; 2 with a one-line error naming the file, the key, "
                                   "what was expected and what was found.")
    c.add_argument("experiment", help="experiment YAML file")
    c.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a value as `dtnet run --set` does, e.g. --set controller.routing=ecmp")
    c.add_argument("--engine", choices=("emulate", "flow", "packet"),
                   help="check for this engine, whatever the file's engine: says (same as --set engine=NAME)")
    c.set_defaults(func=cmd_check)

    cl = sub.add_parser("clean", help="remove the leftovers of runs that died (their bridges, links, processes)",
                        description="Finds runs whose owner process is gone, from their state files, and removes "
                                    "exactly their resources: a process only when its PID and start time match the "
                                    "recorded ones, a tag's bridges and links only under the dead run's own lease "
                                    "(a live run's tag is left alone). Never touches anything without a dtnet run "
                                    "tag.")
    cl.add_argument("out", nargs="*", help="run folders to clean (default: every dead run this machine knows)")
    cl.set_defaults(func=cmd_clean)

    rp = sub.add_parser("report", help="print a finished run's (or sweep's) tables from its folder",
                        description="The tables `dtnet run` prints at its end, read from DIR/summary.json, plus "
                                    "the busiest links from DIR/links.csv when it exists. For a sweep's folder, "
                                    "the sweep table, from DIR/sweep.csv.")
    rp.add_argument("dir", metavar="DIR", help="a run or sweep folder written by `dtnet run`")
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
    tsub = t.add_subparsers(dest="topo_command", metavar="{show}", required=True)
    ts = tsub.add_parser("show", help="counts and layers of a fabric spec or fabric file",
                         description="SPEC examples: single-switch:hosts=8, fat-tree:k=4, "
                                     "rail-optimized:servers=4,gpus_per_server=8,spines=4, "
                                     "leaf-spine:leaves=4,spines=2,hosts_per_leaf=4,oversubscription=2, "
                                     "superpod:sus=4 (DGX SuperPOD scalable units), hpn:segments=15 (Alibaba HPN "
                                     "pod). Per-tier rates: host_link_gbps, spine_link_gbps, oversubscription. "
                                     "Or a fabric file (FILE.yaml, FILE.graphml). Sizes beyond the documented "
                                     "limits (262,144 hosts) are refused at once. See docs/fabrics.md.")
    ts.add_argument("spec", metavar="SPEC|FILE", help="a fabric spec, as in the examples above, or a fabric file")
    ts.add_argument("--json", action="store_true", help="print JSON with hosts, switches and links counts")
    ts.add_argument("--full", action="store_true", help="with --json (and only with it): include every node and link")
    ts.set_defaults(func=cmd_topo_show)

    pol = sub.add_parser("policy", help="controller policies and their params (no root needed)")
    polsub = pol.add_subparsers(dest="policy_command", required=True)
    pshow = polsub.add_parser("show", help="a policy's params: default, range, meaning",
                              description="Without NAME: every built-in policy. NAME is a built-in or "
                                          "package.module:Class (its folder on PYTHONPATH). Set params in the "
                                          "experiment: controller: {policy: NAME, params: {...}}. "
                                          "docs/writing-a-policy.md says how to write one.")
    pshow.add_argument("name", nargs="?")
    pshow.set_defaults(func=cmd_policy_show)

    from dtnet.cluster import commands as cluster_commands
    cluster_commands.register(sub)
    try:
        from traffic import cli as traffic_cli
        traffic_cli.register(sub)
    except ImportError:
        pass
    _show_defaults(p)
    return p


def _show_defaults(parser: argparse.ArgumentParser) -> None:
    """Every option's --help line states its default (unless it says it already, or there is
    none), in every subcommand however it was registered."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _show_defaults(sub)
        elif action.option_strings and not any(action.default is d for d in (None, False, argparse.SUPPRESS)) \
                and action.default != [] and "default" not in (action.help or ""):
            action.help = f"{action.help} (default %(default)s)" if action.help else "default %(default)s"


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("dtnet")
    except PackageNotFoundError:
        return "(not installed: run from a source tree)"


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        return args.func(args)
    except InputError as e:
        print(f"dtnet: {one_line(str(e))}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader left (`dtnet topo show ... | head`): stop quietly. Python would also
        # fail flushing stdout at exit, so point it at /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PIPE


def entry() -> int:
    """The `dtnet` command: main(), then every object left out of the interpreter's last garbage
    collection, which would otherwise walk all that a run left (0.4 s after a GPT-3 run): the
    process ends, and its memory goes with it. main() itself stays usable in-process."""
    code = main()
    gc.freeze()
    return code


if __name__ == "__main__":
    sys.exit(entry())
