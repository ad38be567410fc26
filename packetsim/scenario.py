"""The experiment as the ns-3 driver's scenario: nodes, links, TCP connections and a task graph.

Every rank's ops become tasks the driver runs: compute (a delay), transfers (bytes on the
connection of one ordered peer pair of a job, in stream order) and joins (an op's start and
end). A collective expands into its schedule's transfers with their chunk dependencies:
`earlier` must be complete first, `gate` is followed slice by slice, as the agents pipeline
(traffic.collectives.templates, the arrays the flow engine reads too).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from experiment.plan import BASE_PORT, gpus_per_server, start_offsets_s
from flowsim.network import LINK_KINDS
from flowsim.routing import five_tuple_hash
from packetsim.transport import SEND_BUFFER_BYTES
from traffic.collectives.templates import template

COMPUTE, TRANSFER, JOIN, HOLD = "C", "X", "J", "H"


@dataclass
class OpTasks:
    """One op of one rank: the join tasks that mark when it was ready and when it ended."""
    job: int
    rank: int
    op: object
    start: int
    end: int
    first: int | None = None  # a send's transfer: its first byte is the op's start
    hold: int | None = None   # its co-scheduling gate (hold): its end is when the op may start


@dataclass
class Scenario:
    kinds: list = field(default_factory=list)
    conn_of_task: list = field(default_factory=list)
    sizes: list = field(default_factory=list)
    durations: list = field(default_factory=list)
    earlier: list = field(default_factory=list)
    gates: list = field(default_factory=list)
    conns: list = field(default_factory=list)  # (job, src rank, dst rank, src host, dst host)
    conn_index: dict = field(default_factory=dict)
    paths: list = field(default_factory=list)  # per connection: net link ids
    ops: list = field(default_factory=list)    # OpTasks
    reroutes: list = field(default_factory=list)  # (at_s, conn, net link ids)
    linkstates: list = field(default_factory=list)  # (at_s, directed net link ids, up)
    sprays: list = field(default_factory=list)      # (conn, node, next nodes): drawn per packet
    straggles: list = field(default_factory=list)   # (compute task, from_s, factor)
    sport: list | None = None   # per connection, its source port; None: from its id (route)
    poll_s: float = 0.0         # the controller's poll period (0: no controller in the loop)
    wakes: list = field(default_factory=list)       # times the controller is told of (faults, restarts)
    holds: dict = field(default_factory=dict)       # hold task -> (job, rank, iteration): phase gates
    paces: list = field(default_factory=list)       # (sender node, payload B/s, from_s, until_s): rate caps
    slice_bytes: int = 1
    bin_s: float | None = None  # links.csv interval; None: runner.bin_s

    def add(self, kind: str, size: int = 0, dur: float = 0.0, conn: int = -1, earlier=(), gate=()) -> int:
        self.kinds.append(kind)
        self.sizes.append(int(size))
        self.durations.append(float(dur))
        self.conn_of_task.append(conn)
        self.earlier.append(list(earlier))
        self.gates.append(list(gate))
        return len(self.kinds) - 1

    def conn(self, job: int, src: int, dst: int, hosts) -> int:
        """The TCP connection of one ordered peer pair of a job (made on first use)."""
        key = (job, src, dst)
        c = self.conn_index.get(key)
        if c is None:
            c = self.conn_index[key] = len(self.conns)
            self.conns.append((job, src, dst, hosts[src], hosts[dst]))
        return c

    @property
    def transfers(self) -> int:
        return sum(1 for k in self.kinds if k == TRANSFER)

    @property
    def payload_bytes(self) -> int:
        return sum(s for k, s in zip(self.kinds, self.sizes) if k == TRANSFER)


def build(exp, fabric, jobs, slice_bytes: float) -> Scenario:
    """The task graph of every job's trace (real-cluster bytes and seconds)."""
    sc = Scenario()
    jitter_ns = exp.packet.start_jitter_ns
    for j, jp in enumerate(jobs):
        tr, hosts = jp.trace, jp.hosts
        start_s = exp.jobs[jp.index].start_ms / 1000.0
        if jitter_ns > 0:  # each rank's own start: replicates from packet.start_seed
            offsets = start_offsets_s(jitter_ns, exp.packet.start_seed, jp.name, tr.nranks)
            roots = {r: [sc.add(COMPUTE, dur=start_s + offsets[r])] for r in range(tr.nranks)}
        else:
            root = [sc.add(COMPUTE, dur=start_s)] if start_s > 0 else []
            roots = {r: root for r in range(tr.nranks)}
        streams: dict[int, list] = {}
        for r in range(tr.nranks):
            try:
                streams[r] = tr.ops_of(r)
            except KeyError:  # a rank without ops
                streams[r] = []
        at: dict[tuple[int, str], OpTasks] = {}
        for r, ops in streams.items():
            for op in ops:
                ot = OpTasks(j, r, op, sc.add(JOIN), -1)
                ot.end = sc.add(COMPUTE if op.kind == "compute" else JOIN, dur=op.duration_s
                                if op.kind == "compute" else 0.0, earlier=[ot.start])
                at[r, op.id] = ot
                sc.ops.append(ot)
        for r, ops in streams.items():
            for op in ops:
                sc.earlier[at[r, op.id].start].extend([at[r, d].end for d in op.deps] or roots[r])
        sends: dict[tuple[int, int, str], int] = {}
        done_groups: set = set()
        for r, ops in streams.items():
            for op in ops:
                ot = at[r, op.id]
                if op.kind == "send":
                    x = sc.add(TRANSFER, op.size_bytes, conn=sc.conn(j, r, int(op.peer), hosts), earlier=[ot.start])
                    sends[r, int(op.peer), op.id] = ot.first = x
                    sc.earlier[ot.end].append(x)
                elif op.kind == "collective" and (op.group, op.id) not in done_groups:
                    done_groups.add((op.group, op.id))
                    _collective(sc, fabric, j, hosts, tr.members(op.group), op, at)
        for r, ops in streams.items():
            for op in ops:
                if op.kind == "recv":
                    sc.earlier[at[r, op.id].end].append(sends[int(op.peer), r, op.id])
    sc.slice_bytes = max(1, int(round(slice_bytes)))
    return sc


def _collective(sc: Scenario, fabric, j: int, hosts, group: list[int], op, at) -> None:
    n = len(group)
    if n < 2:
        return
    gps = gpus_per_server(fabric, [hosts[g] for g in group])  # the rail-aware schedules, as the plan
    t = template(op.op, op.algorithm or "ring", n, int(op.size_bytes), op.root or 0, gps)
    base = len(sc.kinds)
    for k in range(t.n):
        s, d = group[int(t.src[k])], group[int(t.dst[k])]
        sc.add(TRANSFER, int(t.size[k]), conn=sc.conn(j, s, d, hosts),
               earlier=[base + int(e) for e in t.earlier[t.earlier_ptr[k]:t.earlier_ptr[k + 1]]]
               + [at[s, op.id].start],
               gate=[base + int(g) for g in t.gate[t.gate_ptr[k]:t.gate_ptr[k + 1]]])
    for local, m in enumerate(group):
        mine = np.flatnonzero((t.src == local) | (t.dst == local))
        sc.earlier[at[m, op.id].end].extend((base + mine).tolist())


def five_tuples(sc: Scenario, net):
    """Per connection: source and destination host positions, source and destination ports, and
    the hash key of the five-tuple the flow engine hashes (the agents' connection: an ephemeral
    source port, the job's listening port)."""
    hs = np.array([net.host_index(c[3]) for c in sc.conns], np.int64)
    hd = np.array([net.host_index(c[4]) for c in sc.conns], np.int64)
    sport = (np.asarray(sc.sport, np.int64) if sc.sport is not None
             else 32768 + np.arange(len(sc.conns)) % 28232)
    dport = BASE_PORT + np.array([c[0] for c in sc.conns], np.int64)
    return hs, hd, sport, dport, five_tuple_hash(net.host_ip[hs], net.host_ip[hd], sport, dport)


def connect_order(sc: Scenario) -> None:
    """Source ports as the flow engine gives them when the agents connect to every peer before the
    replay (its connect_all: in (job, source rank, destination rank) order), so that a controller
    sees the same five-tuples in both engines."""
    order = sorted(range(len(sc.conns)), key=lambda c: sc.conns[c][:3])
    sc.sport = [0] * len(sc.conns)
    for k, c in enumerate(order):
        sc.sport[c] = 32768 + k % 28232


def route(sc: Scenario, net, router, strict: bool = True) -> None:
    """Each connection's path from the router, by its five-tuple (five_tuples)."""
    if not sc.conns:
        return
    hs, hd, _, _, keys = five_tuples(sc, net)
    indptr, links = router.route(net, hs, hd, keys)
    sc.paths = [links[indptr[i]:indptr[i + 1]] for i in range(len(sc.conns))]
    bad = [i for i, p in enumerate(sc.paths) if len(p) == 0]
    if bad and strict:
        c = sc.conns[bad[0]]
        raise ValueError(f"no path from {c[3]} to {c[4]}")


def spray(sc: Scenario, net, router) -> None:
    """Per-packet spraying: at every node of a connection's equal-cost paths, the next nodes its
    packets draw from (its ACKs keep the one path of sc.paths back; a node off that path gets its
    entry here too)."""
    hs, hd, _, _, _ = five_tuples(sc, net)
    for c in range(len(sc.conns)):
        nxt: dict[int, set] = {}
        for p in router.equal_cost_paths(net, int(hs[c]), int(hd[c])):
            for lid in p.tolist():
                nxt.setdefault(int(net.link_src[lid]), set()).add(int(net.link_dst[lid]))
        for node, ns in sorted(nxt.items()):  # every node of every path holds an entry
            sc.sprays.append((c, node, sorted(ns)))


def hold(sc: Scenario, announced: dict) -> None:
    """Co-scheduling's phase gates: each communication op of an announced iteration (announced: job
    index -> iterations, experiment.plan.announcements) waits on a hold task that takes over the
    op's dependencies; the driver reports it ready and the controller's answer releases it."""
    for ot in sc.ops:
        it = getattr(ot.op, "iteration", None)
        if ot.op.kind == "compute" or it is None or it not in announced.get(ot.job, ()):
            continue
        h = ot.hold = sc.add(HOLD, earlier=sc.earlier[ot.start])
        sc.earlier[ot.start] = [h]
        sc.holds[h] = (ot.job, ot.rank, int(it))


def straggle(sc: Scenario, jobs, stragglers) -> None:
    """A straggler's compute: each compute task of its rank ready at or after from_s lasts factor x
    (flowsim's Straggler: job by name, rank in the job)."""
    index = {jp.name: j for j, jp in enumerate(jobs)}
    for s in stragglers:
        for ot in sc.ops:
            if ot.op.kind == "compute" and ot.rank == s.rank and ot.job == index[s.job]:
                sc.straggles.append((ot.end, s.from_s, s.factor))


def cable_ids(net, faults) -> list[tuple[float, list, bool]]:
    """(at_s, directed link ids, up) of each link or switch fault, with the net left as it was."""
    saved, version = net.link_up.copy(), net.version
    out = []
    for f in sorted(faults, key=lambda f: f.at_ms):
        up = f.state == "up"
        ids = net.set_cable(f.link[0], f.link[1], up) if f.link is not None else net.set_switch(f.switch, up)
        out.append((f.at_ms / 1000.0, ids, up))
    net.link_up[:] = saved
    net.version = version + 1
    return out


def apply_faults(sc: Scenario, net, router, faults) -> list[dict]:
    """Link and switch faults at their times: the links go down (or up) and every connection
    the router now sends another way gets its new path then, as the controller reinstalls its
    routes (the flow engine's links_changed). One record per fault: its links and flows moved."""
    out = []
    initial, current = list(sc.paths), list(sc.paths)
    for f in sorted(faults, key=lambda f: f.at_ms):
        at = f.at_ms / 1000.0
        up = f.state == "up"
        ids = net.set_cable(f.link[0], f.link[1], up) if f.link is not None else net.set_switch(f.switch, up)
        sc.linkstates.append((at, ids, up))
        route(sc, net, router, strict=False)
        moved = 0
        for c, p in enumerate(sc.paths):
            if len(p) and not np.array_equal(p, current[c]):
                sc.reroutes.append((at, c, p))
                current[c] = p
                moved += 1
        out.append({"fault": f, "at_s": at, "links": [f"{net.names[int(net.link_src[i])]}-"
                                                      f"{net.names[int(net.link_dst[i])]}" for i in ids],
                    "moved": moved})
    sc.paths = initial  # the scenario starts on these; the reroutes carry the rest
    return out


def write(sc: Scenario, net, transport, path: str, *, seed: int, bin_s: float, end_s: float,
          rto_min_s: float) -> dict:
    """The scenario file; returns the undirected links as (name, a, b, kind, gbps) by link id."""
    pairs: dict[tuple[int, int], int] = {}
    links = []
    for l in range(len(net.link_src)):
        a, b = int(net.link_src[l]), int(net.link_dst[l])
        if (b, a) not in pairs:
            pairs[a, b] = len(links)
            links.append((a, b, LINK_KINDS[int(net.link_kind[l])], float(net.link_gbps[l])))
    ecn = transport.ecn
    with open(path, "w") as f:
        f.write(f"cfg {transport.cc} {transport.mtu_bytes} {transport.switch_buffer_bytes} "
                f"{ecn.min_bytes if ecn else 0} {ecn.max_bytes if ecn else 0} {ecn.max_prob if ecn else 0} "
                f"{seed} {bin_s!r} {end_s!r} {rto_min_s!r}\n")
        f.write(f"nodes {len(net.names)}\n")
        for i, (a, b, kind, gbps) in enumerate(links):
            f.write(f"link {i} {a} {b} {gbps!r} {transport.latency_us.get(kind, 0.0) * 1e-6!r}\n")
        for c, p in enumerate(sc.paths):
            nodes = node_path(net, p)
            f.write(f"conn {c} {nodes[0]} {nodes[-1]} {len(nodes)} {' '.join(map(str, nodes))}\n")
        for t, kind in enumerate(sc.kinds):
            e, g = sc.earlier[t], sc.gates[t]
            f.write(f"task {t} {kind} {sc.conn_of_task[t]} {sc.sizes[t]} {sc.durations[t]!r} "
                    f"{sc.slice_bytes if g else 0} {len(e)} {' '.join(map(str, e))} {len(g)} "
                    f"{' '.join(map(str, g))}\n")
        for at_s, c, p in sc.reroutes:
            nodes = node_path(net, p)
            f.write(f"reroute {at_s!r} {c} {len(nodes)} {' '.join(map(str, nodes))}\n")
        for at_s, ids, up in sc.linkstates:
            for lk in sorted({pairs.get((int(net.link_src[i]), int(net.link_dst[i])),
                                        pairs.get((int(net.link_dst[i]), int(net.link_src[i])))) for i in ids}):
                f.write(f"linkstate {at_s!r} {lk} {int(up)}\n")
        for c, node, nxt in sc.sprays:
            f.write(f"spray {c} {node} {len(nxt)} {' '.join(map(str, nxt))}\n")
        for t, from_s, factor in sc.straggles:
            f.write(f"straggle {t} {from_s!r} {factor!r}\n")
        if sc.poll_s > 0:
            f.write(f"poll {sc.poll_s!r}\n")
        if transport.ack_priority:
            f.write("ackprio 1\n")
        f.write(f"delack {transport.delack_s!r}\n")
        if transport.ack_every_segments != 2:  # ns-3's own default otherwise
            f.write(f"ackevery {transport.ack_every_segments}\n")
        if transport.htb_burst_s:
            f.write(f"htb {transport.htb_burst_s!r}\n")
        if transport.tail_loss_probe:  # the probe's floor, its allowance with one segment out, RACK's rule
            f.write(f"tlp {transport.tlp_floor_s!r} {rto_min_s!r} {int(transport.tlp_rack)}\n")
            if transport.loss_detection == "rack":  # RACK for every segment, ns-3's DupThresh rule off
                f.write("rack\n")
        if not transport.port_queue:
            f.write("queuedisc 1\n")
        tsq = [transport.tsq_bytes(float(net.link_gbps[int(p[0])])) for p in sc.paths]  # by its first link
        for c, limit in enumerate(tsq):
            if 0 < limit < SEND_BUFFER_BYTES:  # at the send buffer it cannot bind: the driver skips its cost
                f.write(f"tsq {c} {limit}\n")
        for node, Bps, from_s, until_s in sc.paces:
            f.write(f"pace {node} {Bps!r} {from_s!r} {until_s!r}\n")
        for at_s in sorted(set(sc.wakes)):
            f.write(f"wake {at_s!r}\n")
    # The driver's port of each directed net link: link i's end at a is port 2i, at b 2i+1.
    port = np.array([2 * pairs[a, b] if (a, b) in pairs else 2 * pairs[b, a] + 1
                     for a, b in zip(net.link_src.tolist(), net.link_dst.tolist())], np.int64)
    return {"links": links, "port_of_link": port, "tsq_bytes": tsq}


def node_path(net, links) -> list[int]:
    links = [int(x) for x in links]
    return [int(net.link_src[links[0]])] + [int(net.link_dst[l]) for l in links]
