"""The experiment file's `workload:` mapping -> a Trace (rank classes; see traffic.trace).

Four forms, told apart by their leading key: `collective`, `model`, `trace`, `pattern`.
"""
from __future__ import annotations

from badinput import InputError
from badinput.limits import COMPUTE_MS
from traffic.collectives import ALGORITHMS, OPS
from traffic.limits import MAX_ITERATIONS, MAX_RANKS
from traffic.spec import SpecReader
from traffic.trace import Op, RankClass, Trace

FORMS = ("collective", "model", "trace", "pattern")
ROOTED = ("broadcast", "reduce")


def build_workload(spec: dict, nranks: int, *, gpus_per_server: int | None = None,
                   file: str | None = None, validate: bool = True) -> Trace:
    """Builds and validates the trace for `nranks` emulated GPUs.

    validate=False skips only the whole-trace cross-rank check of generated model traces (they are
    correct by construction and tested); the spec itself is always checked."""
    if not isinstance(nranks, int) or isinstance(nranks, bool) or nranks < 1:
        raise InputError("nranks", "an integer >= 1", nranks, file=file)
    if nranks > MAX_RANKS:
        raise InputError("nranks", f"at most {MAX_RANKS} GPUs (the workload layer's limit)", nranks, file=file)
    if not isinstance(spec, dict):
        raise InputError("workload", "a mapping", type(spec).__name__, file=file)
    forms = [f for f in FORMS if f in spec]
    if len(forms) != 1:
        raise InputError("workload", "exactly one of " + ", ".join(FORMS) + ", or command (a real program)",
                         ", ".join(forms) if forms else "none of them", file=file)
    form = forms[0]
    if form == "collective":
        trace = single_collective(spec, nranks, file=file, gpus_per_server=gpus_per_server)
    elif form == "model":
        from traffic.parallel import model_workload
        trace = model_workload(spec, nranks, gpus_per_server=gpus_per_server, file=file, validate=validate)
    elif form == "trace":
        trace = _from_file(spec, nranks, file)
    else:
        from traffic.patterns import pattern_workload
        trace = pattern_workload(spec, nranks, file=file)
    if gpus_per_server is not None:
        trace.meta.setdefault("gpus_per_server", gpus_per_server)
    return trace


def single_collective(spec: dict, nranks: int, file=None, gpus_per_server: int | None = None) -> Trace:
    """Every rank: [compute(compute_ms)] then one collective over "world", per iteration: one class."""
    r = SpecReader(spec, file=file)
    op = r.choice("collective", OPS)
    algorithm = r.choice("algorithm", ALGORITHMS, "ring")
    size_bytes = r.int("size_bytes", minimum=0)
    iterations = r.int("iterations", 1, minimum=1, maximum=MAX_ITERATIONS)
    compute_s = r.number("compute_ms", 0.0, maximum=COMPUTE_MS.hi) / 1e3
    root = r.int("root", 0, minimum=0, maximum=nranks - 1)
    r.done()
    if op == "sendrecv" and nranks == 1:
        raise r.error("collective", "a collective for >= 2 ranks (sendrecv needs a peer)", op)
    # Refuse what would be ignored: sendrecv has one pattern (rank i sends to i + 1), and only
    # broadcast and reduce have a root.
    if op == "sendrecv" and r.has("algorithm"):
        raise r.error("algorithm", "no algorithm with sendrecv (every rank sends to the next one)", algorithm)
    if op not in ROOTED and r.has("root"):
        raise r.error("root", f"no root with {op} (only {' and '.join(ROOTED)} have one)", root)
    if algorithm == "hierarchical" and op != "sendrecv" and (not gpus_per_server or nranks % gpus_per_server):
        raise r.error("algorithm", f"gpus_per_server dividing the {nranks} GPUs for hierarchical",
                      f"gpus_per_server={gpus_per_server}")
    ops = []
    prev: tuple[str, ...] = ()
    for it in range(iterations):
        if compute_s > 0:
            cid = f"it{it}/compute"
            ops.append(Op(cid, "compute", prev, duration_s=compute_s, iteration=it, label="compute"))
            prev = (cid,)
        oid = f"it{it}/{op}"
        ops.append(Op(oid, "collective", prev, op=op, algorithm=algorithm, group="world",
                      size_bytes=size_bytes, iteration=it, label=f"{op} {algorithm}",
                      root=root if op in ROOTED else None))
        prev = (oid,)
    meta = {"workload": "collective", "op": op, "algorithm": algorithm, "size_bytes": size_bytes,
            "iterations": iterations}
    trace = Trace(nranks, {"world": list(range(nranks))}, meta=meta,
                  classes=[RankClass(range(nranks), ops, "all ranks")])
    trace.validate(file=file)
    return trace


def _from_file(spec, nranks, file):
    from traffic.trace import load
    r = SpecReader(spec, file=file)
    path = r.str("trace")
    r.done()
    trace = load(path)
    if trace.nranks != nranks:
        raise InputError("workload.trace", f"a trace for {nranks} ranks (the fabric's GPU count)",
                         f"{trace.nranks} ranks in {path}", file=file)
    return trace
