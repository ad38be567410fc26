"""`dtnet trace ...`: generate, show and import traces. Handlers return an exit code and raise
InputError for bad input; the top-level `dtnet` prints it as one line and exits 2."""
from __future__ import annotations

import argparse
import sys

from badinput import InputError, one_line
from traffic.collectives import ALGORITHMS
from traffic.limits import MAX_DISTINCT_OPS, MAX_ITERATIONS, MAX_RANKS
from traffic.models import DTYPE_BYTES, GPUS, PRESETS
from traffic.parallel import SCHEDULES

IMPORTERS = ("chakra", "aicb", "kineto", "pytorch-et")


def register(subparsers) -> None:
    """Adds `trace` with its subcommands to the top-level parser's subparsers."""
    trace = subparsers.add_parser("trace", help="generate, show and import workload traces (no root needed)",
                                  description="Generate, show and import per-GPU workload traces.")
    sub = trace.add_subparsers(dest="trace_command", metavar="{generate,show,import}")
    sub.required = True

    gen = sub.add_parser("generate", help="write the trace of a model training job",
                         description="Op streams of a training job (Megatron rank order: tp fastest), one rank "
                         "class per pipeline stage with groups and peers by rule: the file and the time do not "
                         f"grow with the GPU count. At most {MAX_RANKS} GPUs, {MAX_ITERATIONS} iterations and "
                         f"{MAX_DISTINCT_OPS} distinct ops (docs/trace-format.md).")
    gen.add_argument("--model", required=True, help="preset: " + ", ".join(PRESETS))
    gen.add_argument("--gpus", type=int, required=True, help=f"GPU count (= tp x pp x dp), at most {MAX_RANKS}")
    for dim in ("tp", "pp", "ep"):
        gen.add_argument(f"--{dim}", type=int, default=1, help=f"{dim} size (default 1)")
    gen.add_argument("--dp", type=int, help="data-parallel size (default: gpus / (tp x pp))")
    gen.add_argument("--microbatches", type=int, help="micro-batches per iteration (default: from the "
                     "published global batch)")
    gen.add_argument("--global-batch", type=int, help="sequences per iteration")
    gen.add_argument("--micro-batch-size", type=int, default=1)
    gen.add_argument("--zero-stage", type=int, default=0, choices=range(4))
    gen.add_argument("--schedule", default="1f1b", choices=SCHEDULES)
    gen.add_argument("--iterations", type=int, default=1, help=f"training iterations (at most {MAX_ITERATIONS})")
    gen.add_argument("--gpu", default="a100", choices=sorted(GPUS))
    gen.add_argument("--efficiency", type=float, default=0.45, help="fraction of peak FLOP/s achieved")
    gen.add_argument("--dtype", default="bf16", choices=sorted(DTYPE_BYTES))
    gen.add_argument("--algorithm", default="ring", choices=ALGORITHMS, help="for every group")
    gen.add_argument("--gpus-per-server", type=int, help="needed by --algorithm hierarchical")
    gen.add_argument("--sequence-parallel", action="store_true")
    gen.add_argument("--recompute", action="store_true", help="activation recomputation in backward")
    gen.add_argument("--validate", action="store_true",
                     help="also run the whole check before writing (generated traces are correct by construction "
                     "and tested; load and show always check)")
    gen.add_argument("--out", required=True, help="trace file to write (JSON)")
    gen.set_defaults(func=cmd_generate)

    show = sub.add_parser("show", help="bytes per collective and parallel dimension, op counts, critical path",
                          description="Summarize a trace file (version 1 or 2): rank classes and layout, ops, "
                          "collectives per parallel dimension (tp, dp, pp, ep, edp) with sizes in KiB/MiB/GiB, "
                          "and the alpha-beta critical path with identical repeated steps folded (x96).")
    show.add_argument("path")
    show.add_argument("--link-gbps", type=float, default=400.0, help="NIC rate for the critical path")
    show.add_argument("--intra-gbps", type=float, help="rate inside a server (NVLink), with meta gpus_per_server")
    show.add_argument("--latency-us", type=float, default=5.0, help="per-step latency (alpha)")
    show.add_argument("--top", type=int, default=10, help="how many of the heaviest path steps to list "
                      "(identical steps folded into one line)")
    show.set_defaults(func=cmd_show)

    imp = sub.add_parser("import", help="convert Chakra, SimAI/AICB, Kineto or PyTorch execution traces",
                         description="Convert traces of other tools into a dtnet trace. Whatever the source did "
                                     "not record and the import had to assume is printed as one 'assumed:' line "
                                     "and kept in the trace's meta.assumed. See docs/importers.md.")
    imp.add_argument("format", choices=IMPORTERS)
    imp.add_argument("paths", nargs="+", help="Chakra: one file per rank (rank order; PyTorch execution traces "
                     "are read as pytorch-et); AICB: one workload file; Kineto: one torch.profiler JSON per rank "
                     "(.json or .json.gz); pytorch-et: one ExecutionTraceObserver JSON per rank")
    imp.add_argument("--gpu-tflops", type=float, help="chakra: peak rate that times compute nodes which give "
                     "num_ops but no duration (e.g. 989 for an H100's dense BF16)")
    imp.add_argument("--kineto", nargs="+", metavar="FILE", help="pytorch-et: the same run's torch.profiler "
                     "traces, one per rank, for compute durations (matched by record function id)")
    imp.add_argument("--out", required=True)
    imp.add_argument("--gpus-per-server", type=int, help="recorded in the trace's meta")
    imp.add_argument("--algorithm", default="ring", choices=ALGORITHMS,
                     help="for every collective (the source formats do not record one)")
    imp.add_argument("--comm-groups", help="chakra: JSON file of process group name -> ranks "
                     "(ASTRA-sim's comm group file); default: inferred from which files use each pg_name")
    imp.set_defaults(func=cmd_import)


def _positive(name, value):
    if value is not None and value < 1:
        raise InputError(name, "an integer >= 1", value)


def cmd_generate(args) -> int:
    from traffic.workload import build_workload
    _positive("--gpus", args.gpus)
    _positive("--gpus-per-server", args.gpus_per_server)
    if args.gpus > MAX_RANKS:
        raise InputError("--gpus", f"at most {MAX_RANKS} GPUs (the workload layer's limit)", args.gpus)
    spec = {"model": args.model, "tp": args.tp, "pp": args.pp, "ep": args.ep, "zero_stage": args.zero_stage,
            "schedule": args.schedule, "iterations": args.iterations, "gpu": args.gpu,
            "efficiency": args.efficiency, "dtype": args.dtype, "algorithm": args.algorithm,
            "micro_batch_size": args.micro_batch_size, "sequence_parallel": args.sequence_parallel,
            "recompute": args.recompute}
    for key in ("dp", "microbatches", "global_batch"):
        if getattr(args, key) is not None:
            spec[key] = getattr(args, key)
    try:
        trace = build_workload(spec, args.gpus, gpus_per_server=args.gpus_per_server, validate=args.validate)
    except InputError as e:  # name the flag, not the experiment-file key
        raise InputError("--" + e.key.removeprefix("workload.").replace("_", "-"), e.expected, e.found) from None
    _save(trace, args.out)
    print(f"wrote {args.out}: {trace.nranks} ranks, {trace.op_count()} ops, {len(trace.groups)} groups; "
          f"{len(trace.classes)} rank classes hold {trace.distinct_ops()} distinct ops")
    return 0


def cmd_show(args) -> int:
    from traffic.analysis import summary_lines
    from traffic.trace import load
    trace = load(args.path)
    for line in summary_lines(trace, args.link_gbps, args.latency_us * 1e-6, args.top, args.intra_gbps):
        print(line)
    return 0


def cmd_import(args) -> int:
    from traffic import importers
    _positive("--gpus-per-server", args.gpus_per_server)
    for flag, value, fmt in (("--comm-groups", args.comm_groups, "chakra"), ("--gpu-tflops", args.gpu_tflops, "chakra"),
                             ("--kineto", args.kineto, "pytorch-et")):
        if value is not None and args.format != fmt:
            raise InputError(flag, f"only with {fmt}", args.format)
    if args.format == "chakra":
        groups = _comm_groups(args.comm_groups, len(args.paths)) if args.comm_groups else None
        trace = importers.chakra.load(args.paths, comm_groups=groups, algorithm=args.algorithm,
                                      gpu_tflops=args.gpu_tflops)
    elif args.format == "pytorch-et":
        trace = importers.pytorch_et.load(args.paths, kineto=args.kineto, algorithm=args.algorithm)
    else:
        trace = getattr(importers, args.format).load(args.paths, algorithm=args.algorithm)
    if args.gpus_per_server:
        trace.meta["gpus_per_server"] = args.gpus_per_server
    trace.validate(file=", ".join(map(str, args.paths)))  # a deadlock across the files names them
    _save(trace, args.out)
    n = sum(len(v) for v in trace.ops.values())
    print(f"wrote {args.out}: {trace.nranks} ranks, {n} ops from {len(args.paths)} {args.format} file(s)")
    if trace.meta.get("assumed"):  # what the source did not say and the import supplied
        print(f"assumed: {one_line(str(trace.meta['assumed']))}")
    return 0


def _save(trace, out):
    """The trace goes to --out whole or not at all (see dump); an unwritable path is bad input."""
    from traffic.trace import dump
    try:
        dump(trace, out)
    except OSError as e:
        raise InputError("--out", "a trace file path that can be written", e.strerror, file=out) from None


def _comm_groups(path, nranks):
    """Group name -> ranks; each rank has its own file, so ranks lie in 0..nranks-1."""
    from traffic.files import read_json
    d = read_json(path, "--comm-groups")
    if not isinstance(d, dict):
        raise InputError("--comm-groups", "an object of group name -> list of ranks", str(d)[:60], file=path)
    for name, ranks in d.items():
        if not isinstance(ranks, list) or not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < nranks
                                                  for x in ranks):
            raise InputError(name, f"a list of ranks in 0..{nranks - 1} (one trace file per rank)", ranks, file=path)
    return d


def main(argv=None) -> int:
    """Stand-alone entry until `dtnet` wires `register`: same handlers, same exit codes."""
    parser = argparse.ArgumentParser(prog="dtnet")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except InputError as e:
        print(f"dtnet: {one_line(str(e))}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
