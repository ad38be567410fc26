"""PyTorch profiler (Kineto) JSON traces, one per rank -> Trace.

What a real torch.distributed job writes, read as it is:
- GPU traces: NCCL kernels (cat "kernel", name nccl*) are the collectives. Their details come
  from the kernel's args ("Collective name", "In msg nelems", "Out msg nelems", "dtype", "Group
  size", "Process Group Ranks"/"Name", "Src Rank"/"Dst Rank") or, when the kernel lacks them,
  from the `record_param_comms` CPU op that launched it (matched through the launch's
  correlation id). Every other GPU kernel is compute.
- CPU traces (gloo): `gloo:<op>` annotations on gloo's worker threads are the collectives, as
  they ran; `c10d::<op>_` on the calling thread is where each was issued (paired by record
  function id). Top-level CPU ops of the other threads are compute. Without gloo events, the
  `record_param_comms` (or `c10d::`) ops themselves are the collectives.

Dependencies follow lanes: a CUDA stream, or a CPU thread. Ops of one lane run in order;
ops of different lanes are concurrent, except where the trace records an order:
- issue: a gloo collective depends on its thread's work before its c10d call; an NCCL kernel
  on the last compute kernel that was launched before it and had ended when it started
  (the event NCCL's stream waits on is recorded after that launch);
- recorded stream waits (cuda_sync "Stream Wait Event", cudaStreamWaitEvent): the waiting
  stream's next kernel depends on the recorded stream's last kernel before the event;
- waits: an op that starts after its lane sat idle (>= MIN_GAP_US) depends on every
  collective of another lane that ended during that idle time (a DDP optimizer step waiting
  for its gradient buckets); not when a GPU kernel merely waited for its launch. With
  ProfilerStep#N annotations, a lane's first compute of step N+1 also depends on the
  collectives of step N (issued by that CPU thread; for GPU streams, all of them): a wait on
  a collective that had already ended leaves no trace. GPU kernels count in the step that
  launched them.
Consecutive compute of a lane merges into one op (its busy time, the union of its intervals),
cut wherever a dependency enters or leaves. Sizes follow nccl-tests: all_gather counts its
output, every other collective its input. Process groups: from the events' args, else from
distributedInfo.pg_config (one group per rank, or inferred from gloo's worker threads: see
assemble.infer_groups). A trace in which no collective can be identified is an error.
"""
from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field

from badinput import InputError
from traffic.importers.assemble import Assembler, infer_groups, read_json_gz
from traffic.limits import is_finite_number

DTYPE_BYTES = {"float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2,
               "int": 4, "int32": 4, "long": 8, "int64": 8, "short": 2, "int16": 2, "char": 1, "int8": 1,
               "byte": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
               # names the profiler's "Input type" uses for CPU tensors
               "long int": 8, "unsigned char": 1, "signed char": 1, "c10::half": 2, "c10::bfloat16": 2,
               "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1}
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
CPU_CATS = ("cpu_op", "user_annotation")
MIN_GAP_US = {"gpu": 50.0, "cpu": 100.0}  # idle time on a lane that counts as waiting
LAUNCH_SLACK_US = 20.0  # a kernel starting this soon after its launch waited for the CPU
COMM_PREFIXES = ("c10d::", "gloo:")
GLOO_THREADS = 2  # worker threads of a ProcessGroupGloo (its Options.threads default)


def collective_op(name: str):
    """dtnet's op for a profiler's collective name (any spelling: allreduce, all_reduce, c10d::send,
    ...), or None when the name is no collective; the PyTorch ET importer reads names the same way."""
    n = name.lower().replace("_", "").replace("-", "")
    for key, op in (("reducescatter", "reduce_scatter"), ("allreduce", "all_reduce"), ("allgather", "all_gather"),
                    ("alltoall", "all_to_all"), ("broadcast", "broadcast"), ("barrier", "all_reduce")):
        if key in n:
            return op
    for tail in ("send", "recv", "reduce"):
        if n == tail or n.endswith(":" + tail) or n.endswith("::" + tail):
            return tail
    return None


def _events(path):
    d = read_json_gz(path, "kineto trace")
    if isinstance(d, list):
        d = {"traceEvents": d}
    if not isinstance(d, dict) or not isinstance(d.get("traceEvents"), list):
        raise InputError("traceEvents", "a list of trace events", type(d.get("traceEvents") if isinstance(d, dict)
                                                                          else d).__name__, file=path)
    info = d.get("distributedInfo") or {}
    if not isinstance(info, dict):
        raise InputError("distributedInfo", "an object", type(info).__name__, file=path)
    rank = info.get("rank")
    if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool)):
        raise InputError("distributedInfo.rank", "an integer rank", rank, file=path)
    return rank, d["traceEvents"], info


def _int(args, key, where, path, default=None):
    v = args.get(key, default)
    if isinstance(v, str) and v.lstrip("-").isdigit():
        v = int(v)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise InputError(f"{where}.args.{key}", "an integer >= 0", v, file=path)
    return v


def _ranks(args, where, path, nranks):
    """The group's global ranks: each must have its own file, so they lie in 0..nranks-1."""
    v = args.get("Process Group Ranks")
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except (ValueError, RecursionError):  # nested thousands deep, or an integer of 5000 digits
            raise InputError(f"{where}.args.Process Group Ranks", "a list of ranks", v[:40], file=path) from None
    if v is None:
        start = _int(args, "Global rank start", where, path, 0)
        stride = _int(args, "Global rank stride", where, path, 1)
        size = _int(args, "Group size", where, path)
        v = [start + i * stride for i in range(min(size, nranks + 1))]
        if not v or v[-1] >= nranks or size > nranks:
            raise InputError(f"{where}.args", f"Global rank start, stride and Group size within ranks 0..{nranks - 1} "
                             "(one file per rank)", f"start {start}, stride {stride}, size {size}", file=path)
        return v
    if not isinstance(v, list) or not v or \
            not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < nranks for x in v):
        raise InputError(f"{where}.args.Process Group Ranks", f"a list of ranks in 0..{nranks - 1} (one file per rank)",
                         v, file=path)
    if "Group size" in args and _int(args, "Group size", where, path) != len(v):
        raise InputError(f"{where}.args.Group size", f"the {len(v)} ranks listed", args["Group size"], file=path)
    return v


@dataclass
class Atom:
    """A piece of work on one lane: compute, or one collective / send / recv."""
    lane: tuple
    ts: float
    end: float
    idx: int                       # event index: where, and the tie-break
    comm: dict | None = None       # op, size or elem info, group, peer, label, issue
    deps: set = field(default_factory=set)   # indexes (into the rank's atom list) it waits for
    launch: float | None = None
    corr: int | None = None
    iteration: int | None = None   # from the ProfilerStep#N it falls in
    after: list = field(default_factory=list)  # atoms it waits for by a recorded stream wait


def load(paths: list[str], algorithm: str = "ring") -> "Trace":  # noqa: F821
    """File i is rank i unless its distributedInfo.rank says otherwise."""
    paths = [str(p) for p in paths]
    loaded = [_events(p) for p in paths]
    ranks = [r if isinstance(r, int) else i for i, (r, _, _) in enumerate(loaded)]
    if sorted(ranks) != list(range(len(paths))):
        raise InputError("distributedInfo.rank", f"each of ranks 0..{len(paths) - 1} once across the files",
                         ranks, file=", ".join(paths))
    files = [paths[ranks.index(r)] for r in range(len(paths))]
    n = len(paths)
    per_rank = {}
    for (_, events, info), rank, path in zip(loaded, ranks, paths):
        per_rank[rank] = (_atoms(rank, events, path, n), info, path)
    if not any(a.comm for atoms, _, _ in per_rank.values() for a in atoms):
        raise InputError("traceEvents", "at least one collective (NCCL kernels, record_param_comms, c10d:: or "
                         "gloo: events) in some rank's trace", "compute only", file=", ".join(files))
    notes = _resolve_groups(per_rank, n)
    asm = Assembler(n, files, algorithm)
    modes = set()
    for rank in range(n):
        atoms, _, path = per_rank[rank]
        modes.update(a.lane[0] for a in atoms)
        _emit(asm, rank, atoms, path)
    meta = {"workload": "import", "format": "kineto", "files": files,
            "lanes": "cuda streams" if "gpu" in modes else "cpu threads"}
    if notes:
        meta["assumed"] = "; ".join(sorted(set(notes)))
    return asm.trace(meta)


# ---- reading one rank ----------------------------------------------------------------------

def _num(ev, i, path, what):
    ts, dur = ev.get("ts"), ev.get("dur", 0)
    if not (is_finite_number(ts) and is_finite_number(dur)) or dur < 0:
        raise InputError(f"traceEvents[{i}]", f"a {what} with numeric ts and dur >= 0, both finite",
                         f"ts={ts!r} dur={dur!r}", file=path)
    return float(ts), float(ts) + float(dur)


def _args(ev, i, path):
    args = ev.get("args") or {}
    if not isinstance(args, dict):
        raise InputError(f"traceEvents[{i}].args", "an object", type(args).__name__, file=path)
    return args


def _atoms(rank, events, path, nranks) -> list[Atom]:
    gpu, cpu, runtime, comm_cpu, steps, waits = [], [], {}, [], [], []
    for i, ev in enumerate(events):
        if not isinstance(ev, dict) or ev.get("ph", "X") != "X":
            continue
        cat, name = ev.get("cat"), str(ev.get("name", ""))
        if cat in GPU_CATS:
            ts, end = _num(ev, i, path, "kernel")
            gpu.append((ts, end, i, ev, _args(ev, i, path)))
        elif cat == "cuda_sync" and ev.get("name") == "Stream Wait Event":
            a = _args(ev, i, path)
            if all(isinstance(a.get(k), int) for k in ("stream", "wait_on_stream", "correlation",
                                                        "wait_on_cuda_event_record_corr_id")):
                waits.append((ev.get("pid"), a["stream"], a["correlation"], a["wait_on_stream"],
                              a["wait_on_cuda_event_record_corr_id"]))
        elif cat in CPU_CATS or cat in ("cuda_runtime", "cuda_driver"):
            ts, end = _num(ev, i, path, "CPU event")
            args = _args(ev, i, path)
            if cat in ("cuda_runtime", "cuda_driver"):
                if isinstance(args.get("correlation"), int):
                    runtime[args["correlation"]] = (ts, ev.get("tid"))
                continue
            if name.startswith("ProfilerStep#"):
                steps.append((ts, end, name))
                continue
            if name.startswith("##") or name.startswith("PyTorch Profiler"):
                continue
            cpu.append((ts, end, i, ev, args))
            if name == "record_param_comms" or name.startswith(COMM_PREFIXES) or name.startswith("nccl:"):
                comm_cpu.append((ts, end, i, ev, args))
    if gpu:
        atoms = _gpu_atoms(gpu, runtime, comm_cpu, path, nranks)
        _stream_waits(atoms, waits)
    else:
        atoms = _cpu_atoms(cpu, path, nranks)
    steps.sort()
    starts = [s for s, _, _ in steps]
    for a in atoms:  # a GPU kernel belongs to the step that launched it: it runs later
        t = a.launch if a.launch is not None else a.ts
        k = bisect.bisect_right(starts, t) - 1
        a.iteration = k if k >= 0 and t < steps[k][1] else None
    atoms.sort(key=lambda a: (a.ts, a.idx))
    _dependencies(atoms)
    return atoms


def _collective_from_args(args, where, path, nranks, name):
    """op, size and group from NCCL kernel args or a record_param_comms op's args."""
    op = collective_op(str(args["Collective name"]))
    if op is None:
        raise InputError(f"{where}.args.Collective name", "a collective dtnet models (all_reduce, all_gather, "
                         "reduce_scatter, all_to_all, broadcast, reduce, send, recv, barrier)",
                         args["Collective name"], file=path)
    dtype = str(args.get("dtype", "")).lower()
    if dtype not in DTYPE_BYTES:
        raise InputError(f"{where}.args.dtype", "a tensor dtype (Float, BFloat16, Half, ...)", args.get("dtype"),
                         file=path)
    nelems = _int(args, "Out msg nelems" if op in ("all_gather", "recv") else "In msg nelems", where, path)
    c = {"op": op, "size": nelems * DTYPE_BYTES[dtype], "label": name, "where": where}
    if op in ("send", "recv"):
        c["peer"] = _int(args, "Dst Rank" if op == "send" else "Src Rank", where, path)
    else:
        c["ranks"] = sorted(_ranks(args, where, path, nranks))
        pg = args.get("Process Group Name")
        c["pg"] = None if pg in (None, "") else str(pg)
    return c


def _gpu_atoms(gpu, runtime, comm_cpu, path, nranks):
    rpcs = sorted((ts, end, i, args, ev.get("tid")) for ts, end, i, ev, args in comm_cpu
                  if ev.get("name") == "record_param_comms")
    atoms = []
    for ts, end, i, ev, args in gpu:
        name = str(ev.get("name", ""))
        lane = ("gpu", ev.get("pid"), args.get("stream", ev.get("tid")))
        corr = args.get("correlation") if isinstance(args.get("correlation"), int) else None
        launch = runtime.get(corr) if corr is not None else None
        a = Atom(lane, ts, end, i, launch=launch[0] if launch else None, corr=corr)
        if name.startswith("nccl"):
            where = f"traceEvents[{i}]"
            if "Collective name" in args:
                a.comm = _collective_from_args(args, where, path, nranks, name)
            else:
                rpc = _enclosing(rpcs, launch) if launch else None
                if rpc is None:
                    raise InputError(where, "an NCCL kernel with its collective in args (Collective name, In msg "
                                     "nelems, dtype, ...) or launched inside a record_param_comms op",
                                     f"{name[:40]} without either", file=path)
                if "Collective name" not in rpc[3]:
                    raise InputError(f"traceEvents[{rpc[2]}].args", "record_param_comms with Collective name, "
                                     "dtype, msg nelems and the group (PyTorch 2.1 and later record them)",
                                     "only Input Dims", file=path)
                a.comm = _collective_from_args(rpc[3], f"traceEvents[{rpc[2]}]", path, nranks, name)
        atoms.append(a)
    return atoms


def _stream_waits(atoms, waits):
    """cudaStreamWaitEvent, as the profiler records it (cuda_sync "Stream Wait Event"): the
    first kernel launched on the waiting stream after the wait depends on the last kernel
    launched on the recorded stream before the event was recorded."""
    by_lane: dict[tuple, list[Atom]] = {}
    for a in atoms:
        if a.corr is not None:
            by_lane.setdefault(a.lane, []).append(a)
    for lst in by_lane.values():
        lst.sort(key=lambda a: a.corr)
    for pid, stream, corr, on_stream, rec_corr in waits:
        waiting, recorded = by_lane.get(("gpu", pid, stream), []), by_lane.get(("gpu", pid, on_stream), [])
        target = next((a for a in waiting if a.corr > corr), None)
        source = next((a for a in reversed(recorded) if a.corr < rec_corr), None)
        if target is not None and source is not None and source is not target:
            target.after.append(source)


def _enclosing(rpcs, launch):
    """The innermost record_param_comms on the launching thread whose span holds the launch."""
    ts, tid = launch
    best = None
    for r in rpcs:
        if r[0] > ts:
            break
        if r[4] == tid and r[0] <= ts <= r[1]:
            best = r
    return best


def _top_level(events):
    """Per thread, the events not nested in another of the same thread."""
    out, by_tid = [], {}
    for e in sorted(events, key=lambda e: (e[0], -e[1], e[2])):
        by_tid.setdefault(e[3].get("tid"), []).append(e)
    for tid, evs in by_tid.items():
        end = float("-inf")
        for e in evs:
            if e[0] >= end:
                out.append(e)
                end = e[1]
            elif e[1] > end:  # overlapping siblings (clock skew): extend, do not nest
                end = e[1]
    return out


def _cpu_atoms(cpu, path, nranks):
    gloo = [e for e in cpu if str(e[3].get("name", "")).startswith("gloo:")]
    issue = [e for e in cpu if str(e[3].get("name", "")).startswith("c10d::")
             or e[3].get("name") == "record_param_comms"]
    issue_idx = {e[2] for e in issue}
    gloo_tids = {e[3].get("tid") for e in gloo}
    atoms = []
    for ts, end, i, ev, args in _top_level([e for e in cpu if e[3].get("tid") not in gloo_tids]):
        if i in issue_idx and not gloo:
            continue  # the collectives themselves, below
        atoms.append(Atom(("cpu", ev.get("pid"), ev.get("tid")), ts, end, i))
    if gloo:
        comms = _gloo_comms(gloo, issue, path)
    else:
        comms = []
        for ts, end, i, ev, args in issue:
            if "Collective name" in args:  # record_param_comms (NCCL): the collective's own record
                c = _collective_from_args(args, f"traceEvents[{i}]", path, nranks, str(ev.get("name")))
                comms.append((("cpu", ev.get("pid"), ev.get("tid")), ts, end, i, c))
        if not comms and issue:
            ts, end, i, ev, args = issue[0]
            raise InputError(f"traceEvents[{i}]", "a collective with its sizes: gloo:<op> events on gloo's threads, "
                             "or record_param_comms with Collective name, dtype and msg nelems",
                             f"{ev.get('name')} alone", file=path)
    for lane, ts, end, i, c in comms:
        atoms.append(Atom(lane, ts, end, i, comm=c))
    return atoms


def _gloo_comms(gloo, issue, path):
    """gloo:<op> events as collectives, each paired with the c10d call that issued it: the
    gloo record function is opened inside that call, so it has the next record function id."""
    def rf(e):
        v = e[4].get("Record function id")
        return v if isinstance(v, int) else None
    calls = sorted((e for e in issue if rf(e) is not None and e[3].get("name") != "record_param_comms"), key=rf)
    used, out = set(), []
    for ts, end, i, ev, args in sorted(gloo, key=lambda e: (rf(e) if rf(e) is not None else 1 << 62, e[0])):
        name = str(ev.get("name"))
        where = f"traceEvents[{i}]"
        op = collective_op(name.split(":", 1)[1])
        if op is None:
            raise InputError(f"{where}.name", "a gloo collective dtnet models (all_reduce, all_gather, "
                             "reduce_scatter, all_to_all, broadcast, reduce, barrier)", name, file=path)
        if op in ("send", "recv"):
            raise InputError(f"{where}.name", "a gloo collective (send/recv in CPU traces carry no peer rank; "
                             "import the job's execution trace instead)", name, file=path)
        dims, types = args.get("Input Dims") or [], args.get("Input type") or []
        elems, dtype_bytes = 0, None
        for d, t in zip(dims, types):
            if isinstance(d, list) and all(isinstance(x, int) and x >= 0 for x in d):
                t = str(t).lower()
                if t not in DTYPE_BYTES:
                    raise InputError(f"{where}.args.Input type", "a tensor dtype (float, double, int, ...)", t,
                                     file=path)
                k = 1
                for x in d:
                    k *= x
                elems += k
                dtype_bytes = DTYPE_BYTES[t]
        c = {"op": op, "in_bytes": elems * (dtype_bytes or 0), "label": name, "where": where,
             "thread": ev.get("tid")}
        me = rf((ts, end, i, ev, args))
        call = None
        if me is not None:
            for e in reversed(calls):
                if rf(e) < me and e[2] not in used and collective_op(str(e[3].get("name"))) == op:
                    call = e
                    break
        if call is not None:
            used.add(call[2])
            c["issue"] = (("cpu", call[3].get("pid"), call[3].get("tid")), call[0])
        out.append((("cpu", ev.get("pid"), ev.get("tid")), ts, end, i, c))
    return out


# ---- dependencies --------------------------------------------------------------------------

def _dependencies(atoms: list[Atom]) -> None:
    """Fills Atom.deps (see the module doc). Atoms are sorted by start."""
    # Split compute at issue points, so that a collective waits only for what came before its call.
    cuts: dict[tuple, list[float]] = {}
    for a in atoms:
        if a.comm and "issue" in a.comm:
            lane, t = a.comm["issue"]
            cuts.setdefault(lane, []).append(t)
    if cuts:
        split = []
        for a in atoms:
            for t in (sorted(t for t in cuts.get(a.lane, ()) if a.ts < t < a.end) if not a.comm else ()):
                split.append(Atom(a.lane, a.ts, t, a.idx, launch=a.launch, corr=a.corr, iteration=a.iteration))
                a.ts = t
            split.append(a)
        atoms[:] = sorted(split, key=lambda a: (a.ts, a.idx))
    lanes: dict[tuple, list[int]] = {}
    index = {id(a): k for k, a in enumerate(atoms)}
    for k, a in enumerate(atoms):
        lanes.setdefault(a.lane, []).append(k)
        a.deps.update(index[id(b)] for b in a.after if id(b) in index)
    comm_ends = sorted((a.end, k) for k, a in enumerate(atoms) if a.comm)
    ends = [e for e, _ in comm_ends]
    compute_by_end = sorted((a.end, k) for k, a in enumerate(atoms) if not a.comm)
    c_ends = [e for e, _ in compute_by_end]
    for lane, ks in lanes.items():
        prev_end = float("-inf")
        for j, k in enumerate(ks):
            a = atoms[k]
            if j:
                a.deps.add(ks[j - 1])
            if a.comm and "issue" in a.comm:
                il, t = a.comm["issue"]
                q = _last_before(lanes.get(il, ()), atoms, t)
                if q is not None:
                    a.deps.add(q)
            elif a.comm and lane[0] == "gpu":
                q = _gpu_issue_dep(atoms, k, compute_by_end, c_ends)
                if q is not None:
                    a.deps.add(q)
            elif not a.comm and a.ts - prev_end >= MIN_GAP_US[lane[0]] and not _launch_bound(a):
                # Idle, then started: it waited for the collectives that ended meanwhile.
                lo, hi = bisect.bisect_left(ends, prev_end), bisect.bisect_right(ends, a.ts + 1e-9)
                a.deps.update(q for _, q in comm_ends[lo:hi] if atoms[q].lane != lane)
            prev_end = max(prev_end, a.end)
    _iteration_waits(atoms, lanes)


def _iteration_waits(atoms, lanes):
    """A training step waits for the collectives it issued before the next step begins (DDP's
    reducer, an optimizer after wait()): the trace shows no wait when the collective ended
    first, so the first work of step i+1 on the issuing lane depends on step i's collectives."""
    issued: dict[tuple, list[int]] = {}
    for k, a in enumerate(atoms):
        if a.comm and a.iteration is not None:
            # CPU: the thread that issued it; GPU: any compute stream (the optimizer's waits
            # are stream waits on NCCL's events)
            lane = a.comm["issue"][0] if "issue" in a.comm else "gpu"
            issued.setdefault((lane, a.iteration), []).append(k)
    for lane, ks in lanes.items():
        if not ks:
            continue
        key = lane if lane[0] == "cpu" else "gpu"
        seen = set()
        for k in ks:
            it = atoms[k].iteration
            if it is None or it in seen or atoms[k].comm:
                continue
            seen.add(it)
            atoms[k].deps.update(issued.get((key, it - 1), ()))


def _last_before(ks, atoms, t):
    """The last atom of a lane (indexes in start order) that ended by t."""
    best = None
    for q in ks:
        if atoms[q].ts > t:
            break
        if atoms[q].end <= t + 1e-9:
            best = q
    return best


def _gpu_issue_dep(atoms, k, compute_by_end, c_ends):
    """The compute kernel an NCCL kernel waited for: the last one to end before it started,
    on another stream, among those launched before it (by correlation id) when ids exist."""
    a = atoms[k]
    for i in range(bisect.bisect_right(c_ends, a.ts + 1e-9) - 1, -1, -1):
        b = atoms[compute_by_end[i][1]]
        if b.lane == a.lane or (a.corr is not None and b.corr is not None and b.corr > a.corr):
            continue
        return compute_by_end[i][1]
    return None


def _launch_bound(a: Atom) -> bool:
    return a.lane[0] == "gpu" and a.launch is not None and a.ts - a.launch <= LAUNCH_SLACK_US


# ---- groups and output ---------------------------------------------------------------------

def _resolve_groups(per_rank, nranks) -> list[str]:
    """Sets comm["ranks"] (and "pg") wherever the events did not; returns what was assumed."""
    notes, units = [], {}
    pg_ranks, rank_pgs = {}, {}
    for rank, (atoms, info, path) in per_rank.items():
        cfg = info.get("pg_config")
        pgs = []
        if isinstance(cfg, list):
            for g in cfg:
                if isinstance(g, dict) and isinstance(g.get("ranks"), list):
                    members = sorted(x for x in g["ranks"] if isinstance(x, int) and not isinstance(x, bool))
                    if not members or members[-1] >= nranks or members[0] < 0:
                        raise InputError("distributedInfo.pg_config", f"groups of ranks in 0..{nranks - 1} "
                                         "(one file per rank)", g.get("ranks"), file=path)
                    name = str(g.get("pg_name"))
                    pg_ranks.setdefault(name, members)
                    pgs.append(name)
        rank_pgs[rank] = [p for p in pgs if rank in pg_ranks[p]]
        for k, a in enumerate(atoms):
            if a.comm and "ranks" not in a.comm and "peer" not in a.comm:
                units.setdefault(rank, []).append((k, a.comm.get("thread")))
    if not units:
        return notes
    for rank, lst in units.items():
        if not rank_pgs.get(rank):
            notes.append("no process groups recorded (distributedInfo.pg_config): collectives on all ranks")
            for k, _ in lst:
                per_rank[rank][0][k].comm.update(ranks=list(range(nranks)), pg="0")
    todo = {r: lst for r, lst in units.items() if rank_pgs.get(r)}
    if not todo:
        return notes
    seqs = {r: [(per_rank[r][0][k].comm["op"], per_rank[r][0][k].comm["in_bytes"], th,
                 per_rank[r][0][k].ts, per_rank[r][0][k].end) for k, th in lst] for r, lst in todo.items()}
    files = {r: per_rank[r][2] for r in todo}
    choice, note = infer_groups(seqs, {r: rank_pgs[r] for r in todo}, pg_ranks, files,
                                units_per_group=GLOO_THREADS)
    if note:
        notes.append(note)
    for r, lst in todo.items():
        for (k, _), pg in zip(lst, choice[r]):
            per_rank[r][0][k].comm.update(ranks=pg_ranks[pg], pg=pg)
    return notes


def _emit(asm, rank, atoms: list[Atom], path):
    """Merges compute runs and hands every op to the assembler in issue order."""
    cross_in = {k for k, a in enumerate(atoms) if any(atoms[d].lane != a.lane for d in a.deps)}
    cross_out = {d for a in atoms for d in a.deps if atoms[d].lane != a.lane}
    key_of: dict[int, tuple] = {}
    runs: dict[tuple, list] = {}   # lane -> the open compute run: [key, member atoms]
    ops = []

    def close(lane):
        run = runs.pop(lane, None)
        if run:
            ops.append(run)

    for k, a in enumerate(atoms):
        if a.comm:
            close(a.lane)
            key_of[k] = ("x", k)
            ops.append([("x", k), [k]])
            continue
        run = runs.get(a.lane)
        if run is None or k in cross_in or atoms[run[1][-1]].iteration != a.iteration:
            close(a.lane)
            runs[a.lane] = [("c", k), []]
        runs[a.lane][1].append(k)
        key_of[k] = runs[a.lane][0]
        if k in cross_out:
            close(a.lane)
    for lane in list(runs):
        close(lane)

    def order(run):
        first = atoms[run[1][0]]
        t = first.comm["issue"][1] if first.comm and "issue" in first.comm else first.ts
        return (t, first.idx)

    ops.sort(key=order)
    for key, members in ops:
        deps = sorted({key_of[d] for m in members for d in atoms[m].deps} - {key})
        first = atoms[members[0]]
        oid = f"{key[0]}{key[1]}"
        deps = [f"{d[0]}{d[1]}" for d in deps]
        if key[0] == "c":
            busy, end = 0.0, float("-inf")
            for m in members:  # union of intervals
                s, e = atoms[m].ts, atoms[m].end
                if s > end:
                    busy += e - s
                    end = e
                elif e > end:
                    busy += e - end
                    end = e
            asm.compute(rank, oid, busy / 1e6, deps, label=f"{len(members)} ops", iteration=first.iteration)
            continue
        c = first.comm
        if c["op"] in ("send", "recv"):
            asm.p2p(rank, oid, c["op"], c["peer"], c["size"], deps, c["label"], c["where"], iteration=first.iteration)
            continue
        if "size" not in c:  # gloo: bytes of its input; all_gather counts its output
            c["size"] = c["in_bytes"] * (len(c["ranks"]) if c["op"] == "all_gather" else 1)
        group = asm.group(c["ranks"], f"pg{c['pg']}" if c.get("pg") is not None else None)
        asm.collective(rank, oid, c["op"], group, c["size"], deps, c["label"], c["where"], iteration=first.iteration)
