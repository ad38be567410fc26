"""Turn an experiment's jobs into per-rank plans (experiment.rankplan; pure, no root).

Collectives become transfers through traffic.collectives; sizes and
durations are scaled here, once, so agents see only emulated units.

With ``controller.routing: coschedule`` each iteration's communication is
one phase that the job announces to the controller (``announcement_plan``):
every rank's plan lists the gated iterations, and one rank per iteration
carries the announcement body it sends.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

import numpy as np

from badinput import InputError
from controller.cosched import VERSION as ANNOUNCEMENT_VERSION
from experiment import program
from experiment.model import Experiment, resolve_path
from experiment.placement import jobs_hosts
from experiment.rankplan import Op, Peer, PhaseBody, Phases, RankPlan, Recv, Send, Straggler
from topologies import Fabric
from traffic.collectives import build_schedule, predict_time_s
from traffic.collectives.algorithms import effective_gpus_per_server
from traffic.collectives.schedule import send_dependencies
from traffic.collectives.model import collective_predict_time_s, has_closed_form
from traffic.collectives.templates import bundle_shape, template
from traffic.layout import parse_peer
from traffic.workload import build_workload

BASE_PORT = 20000
COMM_KINDS = ("collective", "send", "recv")
# Announced collective names (controller.cosched.COLLECTIVES) for traffic's op names.
ANNOUNCED_OP = {"sendrecv": "send_recv", "send": "send_recv", "recv": "send_recv"}
# A rank that never gets an answer for a gated phase starts it anyway after
# this long (wall seconds) plus two expected periods: timing is all the gate
# decides, so this cannot corrupt a run, only desynchronize a shift.
ANSWER_WAIT_S = 5.0


@dataclass
class JobPlan:
    name: str
    index: int
    hosts: list[str]             # rank -> fabric host
    trace: object                # traffic.trace.Trace
    ranks: list[RankPlan] = field(default_factory=list)  # per-rank agent plans
    start_offset_s: float = 0.0  # emulated
    # (op, algorithm, size_bytes, ranks) -> the alpha-beta time of each instance, real seconds
    predicted_s: dict = field(default_factory=dict)
    # A real program's job (workload: {command: ...}): per rank what to start
    # (experiment.program.rank_plans); trace is None and ranks empty then.
    program: list[dict] | None = None


def emulated_bytes(size_bytes: int, scale_bytes: float) -> int:
    return 0 if size_bytes == 0 else max(1, round(size_bytes * scale_bytes))


def build_plans(exp: Experiment, fabric: Fabric) -> list[JobPlan]:
    dilation = exp.scale.dilation
    jobs = []
    for jp in job_traces(exp, fabric):
        if jp.program is not None:  # a real program: its ranks start a command, they replay nothing
            jobs.append(jp)
            continue
        hosts = jp.hosts
        jp.ranks = _rank_plans(exp, fabric, jp, dilation)
        for f in exp.faults:
            if f.straggler in hosts:
                # Emulated seconds after the shared start ("go"), not after the job's own start.
                i = hosts.index(f.straggler)
                jp.ranks[i] = replace(jp.ranks[i], straggler=Straggler(f.at_ms / 1000.0 * dilation, f.factor))
        if exp.coschedules:
            announcement_plan(exp, fabric, jp)
        jobs.append(jp)
    return jobs


def job_traces(exp: Experiment, fabric: Fabric) -> list[JobPlan]:
    """Each job placed, with its workload's trace (real-cluster units) and no rank plans yet:
    what every engine starts from. A bad workload is an InputError naming its key."""
    dilation = exp.scale.dilation
    try:
        placed = jobs_hosts(exp.jobs, fabric)
    except InputError as e:
        raise InputError(e.key, e.expected, e.found, exp.source) from None
    jobs = []
    for ji, (job, hosts) in enumerate(zip(exp.jobs, placed)):
        workload = dict(job.workload)
        if program.is_program(workload):
            jobs.append(_program_job(exp, fabric, ji, job, hosts, dilation))
            continue
        if "trace" in workload and isinstance(workload["trace"], str):
            workload["trace"] = resolve_path(exp, workload["trace"])
        gps = gpus_per_server(fabric, hosts)
        try:
            trace = build_workload(workload, len(hosts), gpus_per_server=gps, file=exp.source)
        except InputError as e:
            if e.file is not None and e.file != exp.source:
                raise  # a trace file the workload names: the fault and its key are in that file
            key = str(e.key)
            if not key.startswith("jobs"):
                key = f"jobs[{ji}].{key}" if key.startswith("workload") else f"jobs[{ji}].workload.{key}"
            expected, found = e.expected, e.found
            if gps is None and key.endswith(".algorithm") and "hierarchical" in str(e.expected):
                expected, found = servers_problem(fabric, hosts, job.order)  # not "gpus_per_server=None"
            raise InputError(key, expected, found, exp.source) from None
        if trace.nranks != len(hosts):
            raise InputError(f"jobs[{ji}].hosts", f"{trace.nranks} hosts (the workload's rank count)",
                              len(hosts), exp.source)
        jobs.append(JobPlan(job.name, ji, hosts, trace, start_offset_s=job.start_ms / 1000.0 * dilation))
    return jobs


def _program_job(exp: Experiment, fabric: Fabric, ji: int, job, hosts: list[str], dilation: float) -> JobPlan:
    _, spec = program.parse_program(job.workload, f"jobs[{ji}].workload", exp.source)
    for i, f in enumerate(exp.faults):
        if f.straggler in hosts:  # a program computes at the machine's speed: dtnet cannot slow it
            raise InputError(f"faults[{i}].straggler", "a host that replays a trace (a real program's compute "
                                                       "is not dtnet's to slow down)", f.straggler, exp.source)
    offset = job.start_ms / 1000.0 * dilation
    return JobPlan(job.name, ji, hosts, None, start_offset_s=offset,
                   program=program.rank_plans(spec, job.name, hosts, fabric, offset))


def gpus_per_server(fabric: Fabric, hosts: list[str]):
    """GPUs per server as these hosts see it, for rail-aware algorithms
    (None when they do not line up with servers). A host's fabric rank is
    server x gpus_per_server + gpu, the numbering the function expects."""
    return effective_gpus_per_server([fabric.node(h)["rank"] for h in hosts], server_size(fabric))


def server_size(fabric: Fabric) -> int | None:
    """GPUs per server: the builder's parameter, or (a SuperPOD, a fabric file) the size every
    NVLink domain has when all have the same; None without servers."""
    if fabric.params.get("gpus_per_server"):
        return fabric.params["gpus_per_server"]
    sizes: dict = {}
    for h in fabric.hosts:
        nv = fabric.nvlink_switch(h)
        if nv is None:
            return None
        sizes[nv] = sizes.get(nv, 0) + 1
    return next(iter(sizes.values())) if sizes and len(set(sizes.values())) == 1 else None


def servers_problem(fabric: Fabric, hosts: list[str], order: str) -> tuple[str, str]:
    """(expected, found): why hosts, in rank order, are not one block of the same GPUs per server,
    the layout hierarchical needs (its inter-server step joins rank i of every server: one rail)."""
    if not server_size(fabric):
        return "a rail-optimized fabric for hierarchical (it has servers)", f"{fabric.kind}, which has none"
    expected = "for hierarchical, ranks in one block per server, the same GPUs in the same order in each"
    blocks: list[tuple[int, list[int]]] = []  # (server, its GPUs in rank order), one per run of ranks
    for h in hosts:
        nd = fabric.node(h)
        if blocks and blocks[-1][0] == nd["server"]:
            blocks[-1][1].append(nd["gpu"])
        else:
            blocks.append((nd["server"], [nd["gpu"]]))
    servers = [s for s, _ in blocks]
    again = next((s for s in servers if servers.count(s) > 1), None)
    if again is not None:
        return expected, f"ranks that leave server {again} and come back (servers in rank order {servers[:12]})"
    (s0, g0), (s1, g1) = blocks[0], next(b for b in blocks if b[1] != blocks[0][1])
    if order == "rail-aligned":
        expected += " (order: as-listed; rail-aligned reverses every other server's GPUs)"
    return expected, f"server {s0} GPUs {g0}, server {s1} GPUs {g1}"


def _rank_plans(exp: Experiment, fabric: Fabric, jp: JobPlan, dilation: float) -> list[RankPlan]:
    trace = jp.trace
    n = trace.nranks
    port = BASE_PORT + jp.index
    sb = exp.scale.bytes
    ops: list[list[Op]] = [[] for _ in range(n)]
    tid = 0
    instance_tids: dict[tuple, list] = {}   # (collective id, group) -> [(src, dst, step, bytes, tid, deps)]
    pair_tid: dict[str, int] = {}
    sched_cache: dict[tuple, object] = {}
    deps_cache: dict[tuple, list] = {}
    predict_cache: dict[tuple, float] = {}
    op_index: list[dict[str, int]] = [dict() for _ in range(n)]
    for r in range(n):
        for op in trace.ops[r]:
            op_index[r][op.id] = len(op_index[r])
    for r in range(n):
        for op in trace.ops[r]:
            spec = {"id": op.id, "kind": op.kind, "deps": tuple(op_index[r][d] for d in op.deps),
                    "label": op.label or None, "iteration": op.iteration}
            if op.kind == "compute":
                spec["duration_s"] = op.duration_s * dilation
            elif op.kind == "collective":
                group = trace.groups[op.group]
                inst = (op.id, op.group)  # one id may name an instance in each group
                if inst not in instance_tids:
                    size = emulated_bytes(op.size_bytes, sb)
                    root = getattr(op, "root", None) or 0
                    # Servers as this group sees them (strided DP groups differ from the job's).
                    gps = gpus_per_server(fabric, [jp.hosts[g] for g in group])
                    key = (op.op, op.algorithm, len(group), size, root, gps)
                    if key not in sched_cache:
                        sched_cache[key] = build_schedule(op.op, op.algorithm, len(group), size, root=root,
                                                          gpus_per_server=gps)
                    if key not in deps_cache:
                        deps_cache[key] = send_dependencies(sched_cache[key])
                    lst = []
                    for t in sched_cache[key].transfers:
                        lst.append((group[t.src], group[t.dst], t.step, t.size_bytes, tid))
                        tid += 1
                    # Per transfer: the receive tids its sender waits for (earlier: whole; gate: streaming).
                    deps = [(tuple(lst[j][4] for j in e), tuple(lst[j][4] for j in g)) for e, g in deps_cache[key]]
                    instance_tids[inst] = [(*x, d) for x, d in zip(lst, deps)]
                    hosts = [jp.hosts[g] for g in group]
                    pkey = (key, tuple(hosts))
                    if pkey not in predict_cache:
                        predict_cache[pkey] = predict_cct_s(exp, fabric, sched_cache[key], hosts)
                    jp.predicted_s.setdefault((op.op, op.algorithm, op.size_bytes, len(group)), []).append(
                        predict_cache[pkey])
                spec.update(op=op.op, algorithm=op.algorithm, group=op.group, size_bytes=op.size_bytes,
                            ranks=len(group))
                spec["sends"] = tuple(Send(t, d, st, b, e, g) for s, d, st, b, t, (e, g) in instance_tids[inst]
                                      if s == r)
                spec["recvs"] = tuple(Recv(t, s, st, b) for s, d, st, b, t, _ in instance_tids[inst] if d == r)
            elif op.kind in ("send", "recv"):
                src, dst = (r, op.peer) if op.kind == "send" else (op.peer, r)
                key = f"{op.id}:{src}->{dst}"
                if key not in pair_tid:
                    pair_tid[key] = tid
                    tid += 1
                size = emulated_bytes(op.size_bytes, sb)
                spec.update(size_bytes=op.size_bytes, peer=op.peer)
                if op.kind == "send":
                    spec["sends"] = (Send(pair_tid[key], dst, 0, size),)
                else:
                    spec["recvs"] = (Recv(pair_tid[key], src, 0, size),)
            ops[r].append(Op(**spec))
    # Who connects to whom: a connection per ordered (src, dst) pair that carries data.
    links = {(r, x.dst) for r in range(n) for o in ops[r] for x in o.sends if x.dst != r}
    peers: list[dict[int, Peer]] = [{} for _ in range(n)]
    inbound = [0] * n
    for s, d in sorted(links):
        peers[s][d] = Peer(_peer_ip(fabric, jp.hosts[s], jp.hosts[d]), port)
        inbound[d] += 1
    transfers = sum(len(o.sends) for rank_ops in ops for o in rank_ops)
    return [RankPlan(job=jp.name, rank=r, host=jp.hosts[r], port=port, dilation=dilation,
                     slice_bytes=exp.testbed.slice_bytes, start_offset_s=jp.start_offset_s, ops=tuple(ops[r]),
                     peers=peers[r], inbound=inbound[r],
                     transfer_events=transfers <= 20000)  # keep events.jsonl readable at scale
            for r in range(n)]


def predict_cct_s(exp: Experiment, fabric: Fabric, schedule, hosts: list[str]) -> float:
    """Real seconds the alpha-beta model gives this schedule (emulated bytes) on these hosts: their
    NIC rate, NVLink inside a server, pipelined by the agents' slices, no contention."""
    return _alpha_beta(exp, fabric, hosts, lambda *a, **kw: predict_time_s(schedule, *a, **kw))


def _alpha_beta(exp: Experiment, fabric: Fabric, hosts: list[str], model) -> float:
    """model(link_gbps, latency_s, pipeline_slice_bytes=, intra_gbps=, server_of=) in emulated units,
    on these hosts, as real seconds."""
    dilation, link = exp.scale.dilation, exp.scale.link
    nvl = [fabric.nvlink_switch(h) for h in hosts]
    intra = server_of = None
    if any(s is not None for s in nvl):
        ids = {s: i for i, s in enumerate(dict.fromkeys(nvl))}
        server_of = [ids[s] if s is not None else len(ids) + r for r, s in enumerate(nvl)]
        intra = min(fabric.graph.edges[h, s]["link_gbps"] for h, s in zip(hosts, nvl) if s is not None) * link
    # In emulated units, as the agents ran it: latency_us is real time, so it is stretched too.
    emulated_s = model(min(fabric.host_link_gbps(h) for h in hosts) * link, exp.prediction.latency_us * 1e-6 * dilation,
                       pipeline_slice_bytes=exp.testbed.slice_bytes, intra_gbps=intra, server_of=server_of)
    return emulated_s / dilation


# predicted_cct_s comes from the schedule the agents would run (built whole, but where it has a
# closed form: has_closed_form): above this many transfers (a tree of more than ~1,000 ranks) it is left out.
PREDICT_MAX_TRANSFERS = 2_000_000


def collective_transfers(op, n: int) -> int:
    """Transfers one instance of a collective schedules (an upper bound past 64 ranks, where
    building the schedule to count them would cost more than the choice is worth)."""
    if n > 64:
        return n * n
    if op.algorithm == "hierarchical":
        return 2 * n * n
    return template(op.op, op.algorithm or "ring", n, op.size_bytes, op.root or 0, None).n


def job_predictions(exp: Experiment, fabric: Fabric, jp: JobPlan, cache: dict | None = None) -> dict:
    """(op, algorithm, size_bytes, ranks) -> alpha-beta time of each instance, real seconds, for the
    engines that replay traces (rank classes included): the emulator's prediction (predict_cct_s on
    the schedule the agents would run; from its closed form where it has one, the same number)."""
    pexp = exp
    if exp.flow.slice_bytes:
        pexp = replace(exp, testbed=replace(exp.testbed, slice_bytes=max(1, round(exp.flow.slice_bytes
                                                                                   * exp.scale.bytes))))
    tr, out = jp.trace, {}
    cache = {} if cache is None else cache
    # (rank, group ref) -> (group name, members, hosts, servers, signature): one GPT iteration meets the
    # same few groups in tens of thousands of instances, and reading the fabric for each cost seconds.
    groups: dict = {}
    for cls in tr.classes:  # one rank per class: its instances stand for the class's (by symmetry)
        if not len(cls):
            continue
        rep = int(cls.ranks[0])
        seen = set()
        for op in cls.ops:
            if op.kind != "collective":
                continue
            if (rep, op.group) not in groups:
                name = tr.group_of(rep, op.group)
                members = tr.members(name)
                hosts = tuple(jp.hosts[g] for g in members)
                groups[rep, op.group] = (name, members, hosts, gpus_per_server(fabric, list(hosts)),
                                         _signature(fabric, hosts))
            name, group, hosts, gps, signature = groups[rep, op.group]
            if (name, op.id) in seen:
                continue
            seen.add((name, op.id))
            closed = has_closed_form(op.op, op.algorithm or "ring")
            if not closed and collective_transfers(op, len(group)) > PREDICT_MAX_TRANSFERS:
                continue  # its schedule alone would not fit in memory: no prediction (model statements say)
            key = (op.op, op.algorithm, len(group), emulated_bytes(op.size_bytes, exp.scale.bytes),
                   op.root or 0, gps, signature)
            if key not in cache:
                cache[key] = _alpha_beta(pexp, fabric, list(hosts), lambda *a, **kw: collective_predict_time_s(
                    op.op, op.algorithm or "ring", len(group), key[3], *a, root=op.root or 0,
                    schedule_gpus_per_server=gps, **kw))
            out.setdefault((op.op, op.algorithm, op.size_bytes, len(group)), []).append(cache[key])
    return out


def _signature(fabric: Fabric, hosts: tuple) -> tuple:
    """What the prediction reads of a group's hosts: each NIC's rate and NVLink's, and which hosts
    share a server (numbered in order of appearance), not which hosts they are."""
    servers: dict = {}
    out = []
    for h in hosts:
        nv = fabric.nvlink_switch(h)
        sid = servers.setdefault(nv, len(servers)) if nv is not None else None
        out.append((fabric.host_link_gbps(h), sid,
                    fabric.graph.edges[h, nv]["link_gbps"] if nv is not None else None))
    return tuple(out)


def _peer_ip(fabric: Fabric, a: str, b: str) -> str:
    """Same-server peers talk over NVLink; everyone else over the fabric."""
    if fabric.same_server(a, b):
        return fabric.node(b)["nvlink_ip"]
    return fabric.node(b)["ip"]


def announcements(fabric, jobs) -> dict:
    """job index -> {iteration: (announcing rank, body)}: what each job announces, made once from
    the traces (rank classes included), in real units, for every engine: an iteration's fabric
    flows summed per host pair (NVLink pairs never meet the controller), the announcer's compute in
    it and the part listed after its first communication op, and a first period of compute plus
    the busiest NIC's bytes at its rate. The emulator scales them down (announcement_plan)."""
    out = {}
    for jp in jobs:
        tr, hosts = jp.trace, jp.hosts
        layout = getattr(tr, "layout", None)
        flows: dict[int, dict] = {}
        nic: dict[int, dict] = {}
        names: dict[int, set] = {}
        announcer: dict[int, int] = {}
        seen: set = set()

        def add(it, src, dst, nbytes):
            for s_, d_, b in zip(src.tolist(), dst.tolist(), nbytes.tolist()):
                a, z = hosts[s_], hosts[d_]
                if s_ == d_ or fabric.same_server(a, z):
                    continue
                pairs = flows.setdefault(it, {})
                pairs[a, z] = pairs.get((a, z), 0) + int(round(b))
                ends = nic.setdefault(it, {})
                for end in (("tx", a), ("rx", z)):
                    ends[end] = ends.get(end, 0) + int(round(b))

        for cls in tr.classes:
            ranks = cls.ranks
            if not len(ranks):
                continue
            for op in cls.ops:
                it = op.iteration
                if it is None or op.kind not in COMM_KINDS:
                    continue
                announcer[it] = min(announcer.get(it, int(ranks[0])), int(ranks[0]))
                name = op.op or op.kind
                names.setdefault(it, set()).add(ANNOUNCED_OP.get(name, name))
                if op.kind == "send":
                    rule = parse_peer(op.peer)
                    peers = layout.shift(ranks, *rule) if rule else np.full(len(ranks), int(op.peer))
                    add(it, ranks, peers, np.full(len(ranks), float(op.size_bytes)))
                elif op.kind == "collective":
                    if layout is not None and op.group in layout.families:
                        gidx = np.unique(layout.group_index(op.group, ranks))
                        rows = [(layout.group_name(op.group, int(g)), layout.group_members(op.group, int(g)))
                                for g in gidx]
                    else:
                        rows = [(op.group, tr.groups[op.group])]
                    for gname, members in rows:
                        if (gname, op.id) in seen or len(members) < 2:
                            continue
                        seen.add((gname, op.id))
                        members = np.asarray(members, np.int64)
                        gps = None
                        if op.algorithm == "hierarchical":
                            gps = gpus_per_server(fabric, [hosts[m] for m in members.tolist()])
                        shape = bundle_shape(op.op, op.algorithm or "ring", len(members), op.size_bytes,
                                             op.root or 0, gps)
                        add(it, members[shape.src], members[shape.dst], shape.bytes)
        per = {}
        for it in sorted(i for i in flows if flows[i]):
            r = announcer[it]
            compute_s, overlap_s = compute_around_comm(tr.ops_of(r) if hasattr(tr, "ops_of") else tr.ops[r], it)
            comm_s = max(b * 8 / (fabric.host_link_gbps(h) * 1e9) for (_, h), b in nic[it].items())
            (coll, *more) = sorted(names[it])
            per[it] = (r, {"version": ANNOUNCEMENT_VERSION, "job": jp.name, "collective": "other" if more else coll,
                           "flows": [{"src": a, "dst": z, "size_bytes": b} for (a, z), b in sorted(flows[it].items())],
                           "period_s": compute_s + comm_s, "compute_s": compute_s, "overlap_s": overlap_s,
                           "gpus": len(hosts)})
        out[jp.index] = per
    return out


def announcement_plan(exp: Experiment, fabric: Fabric, jp: JobPlan) -> None:
    """Add each iteration's announced phase to the rank plans of one job: announcements() in
    emulated units (bytes x scale.bytes, seconds x the dilation), carried by the announcer's plan;
    every rank's plan lists the gated iterations. Agents announce the period they measure after
    the first."""
    per = announcements(fabric, [jp])[jp.index]
    if not per:
        return
    dilation = exp.scale.dilation
    by_rank: dict[int, list] = {}
    for it in sorted(per):
        r, body = per[it]
        body = {**body, "flows": [{**f, "size_bytes": emulated_bytes(f["size_bytes"], exp.scale.bytes)}
                                  for f in body["flows"]],
                **{k: body[k] * dilation for k in ("period_s", "compute_s", "overlap_s")}}
        by_rank.setdefault(r, []).append(PhaseBody(it, body))
    longest = max(a.body["period_s"] for lst in by_rank.values() for a in lst)
    jp.ranks = [replace(plan, cosched=Phases(tuple(sorted(per)), ANSWER_WAIT_S + 2 * longest,
                                             tuple(by_rank.get(plan.rank, []))))
                for plan in jp.ranks]


def compute_around_comm(ops, iteration: int) -> tuple[float, float]:
    """(compute of one rank in one iteration, the part listed after its first communication op)."""
    total = after = 0.0
    seen_comm = False
    for spec in ops:
        if spec.iteration != iteration:
            continue
        if spec.kind in COMM_KINDS:
            seen_comm = True
        elif spec.kind == "compute":
            total += spec.duration_s
            after += spec.duration_s if seen_comm else 0.0
    return total, after


def start_offsets_s(jitter_ns: float, seed: int, job: str, nranks: int) -> list[float]:
    """Each rank's start after its job's, seconds: uniform in [0, jitter_ns] drawn from (seed, job),
    rank by rank; every engine draws the same (packet.start_jitter_ns, flow.start_jitter_ns)."""
    if jitter_ns <= 0:
        return [0.0] * nranks
    draw = random.Random(f"{seed}/{job}").uniform
    return [draw(0.0, jitter_ns * 1e-9) for _ in range(nranks)]
