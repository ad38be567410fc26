"""PyTorch execution traces (torch.profiler.ExecutionTraceObserver JSON, the input of Chakra's
converter), one per rank -> Trace. `dtnet trace import pytorch-et ET... [--kineto K...]`;
`trace import chakra` hands such files here too.

An execution trace records every operator a thread ran, nested by caller (ctrl_deps), with
its tensors ([id, storage, offset, elements, element bytes, device]) but no time. Read here:
- the collectives: `c10d::<op>` operators (allreduce_, allgather_, _allgather_base_,
  reduce_scatter_, alltoall_, broadcast_, reduce_, barrier, send, recv_), sized from their
  tensor arguments by name in `op_schema` (nccl-tests: all_gather counts its output);
- the program: the operators at the top of each thread (or of a ProfilerStep#N, which also
  gives the iteration), in the order they started; compute is what lies between collectives;
- dependencies: a thread's operators run in order; an async collective (async_op=True) holds
  up only what touches its tensors (by tensor id: DDP copying a bucket back to the gradients)
  and, at the latest, the next ProfilerStep; a blocking one holds up everything after it;
- durations: the trace has none. With --kineto (the same run's torch.profiler traces) each
  operator takes the duration of the profiler event with its record function id; without,
  compute is 0 s and the import says so;
- process groups: `## process_group:init ##` lists them. The trace does not say which group
  a collective used: a rank in one group uses it; otherwise the group is inferred as for gloo
  Kineto traces (assemble.infer_groups; the worker thread of each collective comes from
  --kineto), and an import that cannot tell is an error.
"""
from __future__ import annotations

import bisect
import json

from badinput import InputError
from traffic.importers.assemble import Assembler, infer_groups, read_json_gz
from traffic.importers.kineto import GLOO_THREADS, collective_op

ROOTS = ("[pytorch|profiler|execution_trace|thread]", "[pytorch|profiler|execution_graph|thread]")
PG_INIT = "## process_group:init ##"
COMM_INTERNAL = ("gloo:", "nccl:", "c10d::", "record_param_comms")  # a collective's own work
# Which named tensor arguments carry a collective's size S (nccl-tests convention).
SIZE_ARGS = {"all_gather": ("output_tensors", "output_tensor", "output"),
             "reduce_scatter": ("input_tensors", "input_tensor", "input"),
             "all_to_all": ("input_tensors", "input_tensor", "input"),
             "all_reduce": ("tensors", "tensor"), "broadcast": ("tensors", "tensor"), "reduce": ("tensors", "tensor"),
             "send": ("tensors", "tensor"), "recv": ("tensors", "tensor")}


def _read(path):
    d = read_json_gz(path, "pytorch execution trace")
    if not isinstance(d, dict) or not isinstance(d.get("nodes"), list) or not isinstance(d.get("schema"), str):
        raise InputError("nodes", "a PyTorch execution trace: an object with schema and a list of nodes",
                         type(d.get("nodes") if isinstance(d, dict) else d).__name__, file=path)
    nodes = {}
    for i, n in enumerate(d["nodes"]):
        if not isinstance(n, dict) or not isinstance(n.get("id"), int) or not isinstance(n.get("name"), str):
            raise InputError(f"nodes[{i}]", "a node with an integer id and a name", str(n)[:60], file=path)
        if n["id"] in nodes:
            raise InputError(f"nodes[{i}].id", "an id used once", n["id"], file=path)
        attrs = {a.get("name"): a.get("value") for a in n.get("attrs", ()) if isinstance(a, dict)}
        ins, outs = n.get("inputs") or {}, n.get("outputs") or {}
        if not isinstance(ins, dict) or not isinstance(outs, dict):
            raise InputError(f"nodes[{i}].inputs", "an object of values, shapes and types", type(ins).__name__,
                             file=path)
        nodes[n["id"]] = {"id": n["id"], "name": n["name"], "parent": n.get("ctrl_deps"), "attrs": attrs,
                          "in": ins.get("values") or [], "out": outs.get("values") or [], "i": i}
    return nodes


def _tensors(v):
    """Tensor descriptors inside a value: [id, storage, offset, numel, elem_bytes, device]."""
    if isinstance(v, list):
        if len(v) == 6 and all(isinstance(x, int) and not isinstance(x, bool) for x in v[:5]) \
                and isinstance(v[5], str):
            yield v
        else:
            for x in v:
                yield from _tensors(x)


def _schema_args(schema):
    """Argument names of an op_schema string, 'ns::op(Type a, Type b=1) -> ...'."""
    if not isinstance(schema, str) or "(" not in schema:
        return []
    body, depth, args, cur = schema[schema.index("(") + 1:], 0, [], ""
    for ch in body:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            if depth == 0:
                break
            depth -= 1
        if ch == "," and depth == 0:
            args.append(cur)
            cur = ""
        else:
            cur += ch
    args.append(cur)
    return [a.split("=")[0].split()[-1] for a in args if a.strip()]


def _pg_config(nodes, path, nranks):
    out = {}
    for n in nodes.values():
        if n["name"] != PG_INIT or not n["in"]:
            continue
        try:
            cfg = json.loads(n["in"][0]) if isinstance(n["in"][0], str) else n["in"][0]
        except (ValueError, RecursionError):  # nested thousands deep, or an integer of 5000 digits
            raise InputError(f"node {n['id']}.inputs", "the process group list as JSON", str(n["in"][0])[:40],
                             file=path) from None
        for g in cfg if isinstance(cfg, list) else ():
            if not isinstance(g, dict):
                continue
            ranks = g.get("ranks") or list(range(g.get("group_size", nranks)))
            if not all(isinstance(x, int) and 0 <= x < nranks for x in ranks):
                raise InputError(f"node {n['id']}.inputs", f"process groups of ranks in 0..{nranks - 1} "
                                 "(one file per rank)", ranks, file=path)
            out[str(g.get("pg_name"))] = sorted(ranks)
    return out


def _kineto_times(path, rank):
    """record function id -> (ts, end, tid) from a torch.profiler trace."""
    d = read_json_gz(path, "kineto trace")
    events = d.get("traceEvents") if isinstance(d, dict) else None
    if not isinstance(events, list):
        raise InputError("traceEvents", "a list of trace events", type(events).__name__, file=path)
    info = d.get("distributedInfo") or {}
    if isinstance(info, dict) and isinstance(info.get("rank"), int) and info["rank"] != rank:
        raise InputError("distributedInfo.rank", f"{rank}: --kineto files in the order of the execution traces",
                         info["rank"], file=path)
    out = {}
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "X" and isinstance(e.get("args"), dict):
            rf = e["args"].get("Record function id")
            ts, dur = e.get("ts"), e.get("dur", 0)
            if isinstance(rf, int) and isinstance(ts, (int, float)) and isinstance(dur, (int, float)):
                out[rf] = (float(ts), float(ts) + float(dur), e.get("tid"))
    return out


def load(paths: list[str], kineto: list[str] | None = None, algorithm: str = "ring") -> "Trace":  # noqa: F821
    """File i is rank i (execution traces do not record the rank); --kineto files likewise."""
    paths = [str(p) for p in paths]
    n = len(paths)
    if kineto is not None and len(kineto) != n:
        raise InputError("--kineto", f"one profiler trace per execution trace ({n})", len(kineto))
    per_rank, notes = {}, []
    for rank, path in enumerate(paths):
        nodes = _read(path)
        times = _kineto_times(kineto[rank], rank) if kineto else None
        per_rank[rank] = (_program(nodes, path, times), _pg_config(nodes, path, n), path)
    if not any(item["kind"] != "compute" for prog, _, _ in per_rank.values() for item in prog):
        raise InputError("nodes", "at least one collective (c10d:: operators) in some rank's trace",
                         "compute only", file=", ".join(paths))
    _groups(per_rank, n, kineto is not None, notes)
    if not kineto:
        notes.append("no durations: execution traces record none, compute is 0 s (pass --kineto with the same "
                     "run's profiler traces)")
    asm = Assembler(n, paths, algorithm)
    for rank, (prog, pgs, path) in per_rank.items():
        _emit(asm, rank, prog)
    meta = {"workload": "import", "format": "pytorch-et", "files": paths}
    if kineto:
        meta["kineto"] = [str(k) for k in kineto]
    if notes:
        meta["assumed"] = "; ".join(notes)
    return asm.trace(meta)


def _program(nodes, path, times):
    """The rank's items in start order: compute pieces and collectives, with tensors and times."""
    children: dict = {}
    by_rf = {}
    for nd in nodes.values():
        children.setdefault(nd["parent"], []).append(nd["id"])
        if isinstance(nd["attrs"].get("rf_id"), int):
            by_rf[nd["attrs"]["rf_id"]] = nd["id"]
    steps = {nid: k for k, nid in enumerate(sorted(i for i, nd in nodes.items()
                                                   if nd["name"].startswith("ProfilerStep#")))}
    tops = []
    for nid, nd in nodes.items():
        par = nodes.get(nd["parent"])
        if par is None or nid == nd["parent"]:
            continue
        if par["name"] in ROOTS or par["id"] in steps:
            name = nd["name"]
            if name.startswith(("gloo:", "nccl:")) or name == "record_param_comms":
                # A collective's own work, filed at the top: what the observer filed under it is not.
                tops += [(c, steps.get(par["id"])) for c in children.get(nid, ())
                         if not nodes[c]["name"].startswith(COMM_INTERNAL)]
                continue
            if name in ROOTS or name.startswith(("##", "ProfilerStep#")):
                continue
            tops.append((nid, steps.get(par["id"])))
            if name.startswith("c10d::"):
                # The observer sometimes files the next operators under an async c10d call that
                # has long returned: anything but its own gloo/nccl work belongs to the thread.
                tops += [(c, steps.get(par["id"])) for c in children.get(nid, ())
                         if not nodes[c]["name"].startswith(COMM_INTERNAL)]
    tops.sort()

    def subtree(nid):
        out, todo = [], [nid]
        while todo:
            x = todo.pop()
            out.append(x)
            todo.extend(children.get(x, ()))
        return out

    def tensor_ids(ids):
        return {t[0] for x in ids for v in (nodes[x]["in"], nodes[x]["out"]) for t in _tensors(v)}

    def span(nid):
        rf = nodes[nid]["attrs"].get("rf_id")
        return times.get(rf) if times is not None and isinstance(rf, int) else None

    nodes = dict(nodes)
    nodes["_by_rf"] = by_rf  # read by _collective; not a node
    items, stray = [], []
    for nid, it in tops:
        sub = subtree(nid)
        colls = sorted(x for x in sub if nodes[x]["name"].startswith("c10d::")
                       and not _has_c10d_ancestor(nodes, x, nid))
        top_span = span(nid)
        if nodes[nid]["name"].startswith("c10d::"):
            items.append(_collective(nodes, nid, path, it, span, children))
            continue
        # Compute, cut at the collectives it issued (DDP's reducer calls them from autograd).
        bounds = [top_span[0] if top_span else None]
        for c in colls:
            s = span(c)
            bounds.append(s[0] if s else None)
        bounds.append(top_span[1] if top_span else None)
        inside = {x for c in colls for x in subtree(c)}
        cuts = [float("-inf"), *colls, float("inf")]
        for k in range(len(colls) + 1):
            lo, hi = bounds[k], bounds[k + 1]
            dur = (hi - lo) / 1e6 if lo is not None and hi is not None and hi >= lo else 0.0
            # The tensors this piece touches: its operators' (node ids grow in start order),
            # not those of the collectives it issued.
            # With profiler times, only operators that ran inside the piece's time: the observer
            # sometimes files later operators (DDP's final callback) under one still open.
            own = tensor_ids([x for x in sub if cuts[k] < x < cuts[k + 1] and x not in inside
                              and not nodes[x]["name"].startswith(COMM_INTERNAL) and _within(span(x), lo, hi)])
            items.append({"kind": "compute", "duration_s": dur, "iteration": it, "tensors": own,
                          "label": nodes[nid]["name"][:60], "timed": top_span is not None, "span": (lo, hi)})
            stray += [x for x in sub if cuts[k] < x < cuts[k + 1] and not nodes[x]["name"].startswith(COMM_INTERNAL)
                      and (x in inside or not _within(span(x), lo, hi))]
            if k < len(colls):
                items.append(_collective(nodes, colls[k], path, it, span, children))
    # Operators filed under the wrong caller go to the piece that was running when they started.
    timed = sorted((it["span"][0], k) for k, it in enumerate(items) if it["kind"] == "compute"
                   and it["span"][0] is not None)
    starts = [t for t, _ in timed]
    for x in stray:
        if span(x) is None:
            continue
        i = bisect.bisect_right(starts, span(x)[0]) - 1
        if i >= 0:
            items[timed[i][1]]["tensors"] = items[timed[i][1]]["tensors"] | tensor_ids([x])
    return items


def _within(s, lo, hi):
    if s is None or lo is None or hi is None:
        return True
    return lo - 1.0 <= s[0] <= hi + 1.0


def _has_c10d_ancestor(nodes, x, top):
    """Whether a c10d operator lies between x and the top-level operator (a nested call)."""
    p, seen = nodes[x]["parent"], set()
    while p in nodes and p != top and p not in seen:
        seen.add(p)
        if nodes[p]["name"].startswith("c10d::"):
            return True
        p = nodes[p]["parent"]
    return False


def _collective(nodes, nid, path, iteration, span, children):
    nd = nodes[nid]
    where = f"node {nid}"
    name = nd["name"]
    op = collective_op(name.split("::", 1)[1])
    if op is None:
        raise InputError(f"{where}.name", "a collective dtnet models (allreduce_, allgather_, reduce_scatter_, "
                         "alltoall_, broadcast_, reduce_, barrier, send, recv_)", name, file=path)
    args = _schema_args(nd["attrs"].get("op_schema"))
    values = dict(zip(args, nd["in"]))
    size = 0
    if "barrier" not in name:
        keys = [k for k in SIZE_ARGS[op] if k in values]
        if not keys:
            raise InputError(f"{where}.attrs.op_schema", f"the arguments of {name} by name "
                             f"({' or '.join(SIZE_ARGS[op])})", nd["attrs"].get("op_schema", "none")[:60],
                             file=path)
        size = sum(t[3] * t[4] for t in _tensors(values[keys[0]]))
    item = {"kind": "collective", "op": op, "size": size, "iteration": iteration, "label": name, "where": where,
            "async": values.get("async_op") is True, "tensors": {t[0] for v in (nd["in"], nd["out"])
                                                                 for t in _tensors(v)},
            "unit": nid}
    if op in ("send", "recv"):
        peer = values.get("dstRank" if op == "send" else "srcRank")
        if not isinstance(peer, int) or isinstance(peer, bool):
            raise InputError(f"{where}.inputs", f"the peer rank of {name}", peer, file=path)
        item.update(kind=op, peer=peer, **{"async": False})
    # gloo runs it on a worker thread: the profiler event of its gloo record function says which.
    rf = nd["attrs"].get("rf_id")
    by_rf = [x for x in children.get(nid, [])] + ([nodes["_by_rf"].get(rf + 1)] if isinstance(rf, int) else [])
    for c in by_rf:
        if c is not None and nodes[c]["name"].startswith("gloo:"):
            s = span(c)
            if s:
                item["unit"], item["ts"], item["end"] = ("thread", s[2]), s[0], s[1]
            break
    return item


def _groups(per_rank, nranks, have_threads, notes):
    seqs, rank_pgs, pg_ranks, files = {}, {}, {}, {}
    for rank, (prog, pgs, path) in per_rank.items():
        pg_ranks.update(pgs)
        mine = [g for g, rs in pgs.items() if rank in rs]
        colls = [it for it in prog if it["kind"] != "compute"]
        if not mine:
            mine = ["0"]
            pg_ranks.setdefault("0", list(range(nranks)))
            notes.append("no process group list (## process_group:init ##): collectives on all ranks")
        for it in colls:
            if it["kind"] in ("send", "recv"):
                if len(mine) > 1:
                    raise InputError(it["where"], "send/recv on a rank with one process group (the trace gives "
                                     "the peer's rank within a group it does not name)", f"{len(mine)} groups",
                                     file=path)
                continue
        group_colls = [it for it in colls if it["kind"] == "collective"]
        if len(mine) == 1:
            for it in group_colls:
                it["group"] = mine[0]
            continue
        seqs[rank] = [(it["op"], it["size"], it["unit"], it.get("ts", 0.0), it.get("end", 0.0)) for it in group_colls]
        rank_pgs[rank] = mine
        files[rank] = path
    if seqs:
        _infer(per_rank, seqs, rank_pgs, pg_ranks, files, have_threads, notes)
    for rank, (prog, pgs, path) in per_rank.items():
        for it in prog:
            if it["kind"] == "collective":
                it["ranks"] = pg_ranks[it["group"]]


def _infer(per_rank, seqs, rank_pgs, pg_ranks, files, have_threads, notes):
    choice, note, count = infer_groups(seqs, rank_pgs, pg_ranks, files, units_per_group=GLOO_THREADS,
                                       with_count=True)
    if count > 1 and not have_threads:
        raise InputError("process groups", "collectives whose process group the trace tells (execution traces "
                         "do not name it: pass --kineto with the same run's profiler traces)",
                         "several assignments fit", file=", ".join(files[r] for r in sorted(files)))
    notes.append(note)
    for rank, lst in choice.items():
        group_colls = [it for it in per_rank[rank][0] if it["kind"] == "collective"]
        for it, g in zip(group_colls, lst):
            it["group"] = g


def _emit(asm, rank, prog):
    last = None            # the last blocking item: everything after waits for it
    pending = []           # async collectives not yet waited for: (key, tensors, iteration)
    for k, it in enumerate(prog):
        deps = [last] if last is not None else []
        if it["kind"] == "compute":
            for key, tens, issued in list(pending):
                if tens & it["tensors"] or (it["iteration"] is not None and issued is not None
                                            and it["iteration"] > issued):
                    deps.append(key)
                    pending.remove((key, tens, issued))
            asm.compute(rank, k, it["duration_s"], deps, label=it["label"], iteration=it["iteration"])
            last = k
            continue
        if it["kind"] in ("send", "recv"):
            asm.p2p(rank, k, it["kind"], it["peer"], it["size"], deps, it["label"], it["where"],
                    iteration=it["iteration"])
            last = k
            continue
        if "ranks" not in it:
            it["ranks"] = asm.groups.get(it["group"]) or []
        group = asm.group(it["ranks"], f"pg{it['group']}")
        size = it["size"]
        asm.collective(rank, k, it["op"], group, size, deps, it["label"], it["where"], iteration=it["iteration"])
        if it["async"]:
            pending.append((k, frozenset(it["tensors"]), it["iteration"]))
        else:
            last = k
