"""The event-driven fluid simulation of what the agents replay.

Each rank runs its op stream as the agent does: an op starts when its dependencies are done;
compute ops run one at a time on the rank's compute engine, in stream order; communication
ops start at once and queue their sends on the connection to each peer (one per ordered
pair of ranks in a job, as the agents connect). A connection serves its queue in order, at
slice granularity: the first send that may go takes the connection, a send held by its gate
lets the next one through. A send whose chunks come from earlier receives waits for those
(``earlier``) or streams behind them (``gate``): it may be at most one slice behind the
share of each followed receive that has arrived (``slice_bytes``), so a chain pipelines.

Connections are the flows of the sharing model (max-min over directed links); a connection
whose queued sends are all held by their gates asks only for the rate at which those gates
open, and that coupling is solved by fixed-point iteration. Rates are recomputed at every
event: a transfer ending, a send catching up with its gate, a compute ending, a job
starting, a fault, a policy poll.

With ``collective_model="bundle"`` a collective instance is instead one entity: its
connections tied to one rate (a ring runs at the pace of its slowest connection), starting
when its last member starts. That is what makes 10^5-rank collectives cheap; docs say where
it is an approximation.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from flowsim.maxmin import max_min_rates
from flowsim.network import Net
from flowsim.routing import Observation, Router, five_tuple_hash
from flowsim.templates import bundle_shape, template
from traffic.collectives.algorithms import effective_gpus_per_server

QUEUED, DONE, INFLIGHT = 1, 2, 3
BYTE_TOL = 1e-3          # bytes: a transfer this close to its end is done
COLLECTIVE_MODELS = ("detailed", "bundle")


@dataclass(frozen=True)
class Params:
    """slice_bytes: the agents' slice in the experiment's (real) bytes: to mirror an emulator
    run, testbed.slice_bytes / scale.bytes. latency_s: per-transfer delivery latency (0 to
    compare with the emulator). series_bin_s: width of the per-link byte time series bins
    (None: totals only). base_port: the agents' listening port of job 0 (dport of job j is
    base_port + j, as the emulator's plan)."""

    slice_bytes: float = 16384
    latency_s: float = 0.0
    collective_model: str = "detailed"
    series_bin_s: float | None = None
    max_fixed_point_iters: int = 60
    base_port: int = 20000
    max_events: int = 50_000_000

    def __post_init__(self):
        if not self.slice_bytes > 0:
            raise ValueError(f"slice_bytes: expected > 0, found {self.slice_bytes!r}")
        if not self.latency_s >= 0:
            raise ValueError(f"latency_s: expected >= 0, found {self.latency_s!r}")
        if self.collective_model not in COLLECTIVE_MODELS:
            raise ValueError(f"collective_model: expected one of {', '.join(COLLECTIVE_MODELS)}, "
                             f"found {self.collective_model!r}")
        if self.series_bin_s is not None and not self.series_bin_s > 0:
            raise ValueError(f"series_bin_s: expected > 0 or None, found {self.series_bin_s!r}")


@dataclass
class JobSpec:
    """A job: its trace (traffic.trace.Trace, real-cluster units), rank -> host name, start."""

    name: str
    hosts: list[str]
    trace: object
    start_s: float = 0.0


@dataclass(frozen=True)
class Fault:
    """A cable (a, b) or a switch (a, b=None) going down (up=False) or up at at_s."""

    at_s: float
    a: str
    b: str | None = None
    up: bool = False


@dataclass(frozen=True)
class Straggler:
    """Compute of (job, rank) starting at or after from_s takes factor x longer."""

    job: str
    rank: int
    from_s: float
    factor: float


@dataclass
class _Inst:
    """One collective instance (or a point-to-point pair) of one job."""

    key: tuple
    job: int
    op: object
    group: list[int]              # group-local rank -> job rank
    tmpl: object = None           # Template (detailed) or BundleShape (bundle)
    base: int = -1                # first global transfer id (detailed)
    sends_left: np.ndarray = None
    recvs_left: np.ndarray = None
    started: np.ndarray = None    # member's op started
    op_index: np.ndarray = None   # member's op index in its stream
    start_s: float = math.inf
    end_s: float = -math.inf
    bundle: int = -1              # bundle entity id
    n_started: int = 0
    members_done: int = 0


class Simulation:
    """Run jobs over a Net with a router; ``run()`` returns a ``Result``."""

    def __init__(self, net: Net, jobs: list[JobSpec], router: Router, params: Params = Params(),
                 faults: list[Fault] = (), stragglers: list[Straggler] = ()):
        self.net, self.jobs, self.router, self.p = net, list(jobs), router, params
        self.faults, self.stragglers = list(faults), list(stragglers)
        self.now = 0.0
        self._seq = 0
        self.heap: list = []
        self.counters = {"events": 0, "solves": 0, "maxmin_rounds": 0, "fixed_point_iters": 0,
                         "fixed_point_unconverged": 0, "transfers": 0, "connections": 0, "bundles": 0,
                         "routed": 0, "reroutes": 0, "polls": 0, "faults": 0, "catch_ups": 0}
        self._setup_ranks()
        self._setup_arrays()
        self.link_bytes = np.zeros(net.n_links)
        self.link_load = np.zeros(net.n_links)
        self.series: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._bin_cur, self._bin_acc = None, None
        self.records: list[tuple] = []   # (job, rank, op index, start, end, ready)

    # ---- setup ---------------------------------------------------------------------------
    def _setup_ranks(self):
        net = self.net
        self.rank_base = []
        self.rank_host = []
        self.streams = []    # per global rank: list of Op
        self.job_of = []
        total = 0
        for j, job in enumerate(self.jobs):
            tr = job.trace
            if len(job.hosts) != tr.nranks:
                raise ValueError(f"job {job.name}: {tr.nranks} ranks in the trace, {len(job.hosts)} hosts given")
            self.rank_base.append(total)
            for r in range(tr.nranks):
                self.rank_host.append(net.host_index(job.hosts[r]))
                self.streams.append(tr.ops.get(r, []))
                self.job_of.append(j)
            total += tr.nranks
        self.n_ranks = total
        self.rank_host = np.array(self.rank_host, np.int64)
        # Per rank: op id -> index, dependants, waiting counts.
        self.deps_left, self.dependants, self.op_pos = [], [], []
        for ops in self.streams:
            pos = {o.id: i for i, o in enumerate(ops)}
            left = np.zeros(len(ops), np.int64)
            dep: list[list[int]] = [[] for _ in ops]
            for i, o in enumerate(ops):
                ds = set(o.deps)
                left[i] = len(ds)
                for d in ds:
                    dep[pos[d]].append(i)
            self.deps_left.append(left)
            self.dependants.append(dep)
            self.op_pos.append(pos)
        self.op_start = [np.full(len(o), np.nan) for o in self.streams]
        self.op_ready = [np.full(len(o), np.nan) for o in self.streams]
        self.ops_left = sum(len(o) for o in self.streams)
        self.compute_busy = np.zeros(self.n_ranks, bool)
        self.compute_wait: list[list[int]] = [[] for _ in range(self.n_ranks)]
        self.slow: dict[int, list[tuple[float, float]]] = {}
        for s in self.stragglers:
            j = next((i for i, jb in enumerate(self.jobs) if jb.name == s.job), None)
            if j is None or not 0 <= s.rank < self.jobs[j].trace.nranks:
                raise ValueError(f"straggler: no rank {s.rank} in job {s.job!r}")
            self.slow.setdefault(self.rank_base[j] + s.rank, []).append((s.from_s, s.factor))
        self.insts: dict[tuple, _Inst] = {}
        self.inst_list: list[_Inst] = []
        self.gps = self.net.params.get("gpus_per_server")
        self._gpos: dict[tuple, dict] = {}

    def _setup_arrays(self):
        cap = 1024
        z = lambda dt=float: np.zeros(cap, dt)  # noqa: E731
        self.T_size, self.T_sent, self.T_rate, self.T_last = z(), z(), z(), z()
        self.T_conn, self.T_seq, self.T_inst = z(np.int64), z(np.int64), z(np.int64)
        self.T_state, self.T_earlier = z(np.int8), z(np.int64)
        self.T_gs, self.T_ge, self.T_ws, self.T_we = z(np.int64), z(np.int64), z(np.int64), z(np.int64)
        self.T_local = z(np.int64)
        self.n_T = 0
        self.G = np.zeros(1024, np.int64)
        self.n_G = 0
        self.W = np.zeros(1024, np.int64)
        self.n_W = 0
        # Connections: (job, src rank, dst rank) -> id.
        self.conn_of: dict[tuple, int] = {}
        self.C_src, self.C_dst, self.C_key, self.C_job = [], [], [], []
        self.C_path: list[np.ndarray | None] = []
        self.C_bytes = np.zeros(0)
        self.C_rate = np.zeros(0)
        self.queued: set[int] = set()   # transfer ids queued and not yet sent
        # Bundles: entity id -> (instance, conn ids, weights, work bytes, done bytes, rate)
        self.B_inst: list[_Inst] = []
        self.B_conns: list[np.ndarray] = []
        self.B_w: list[np.ndarray] = []
        self.B_work = np.zeros(0)
        self.B_done = np.zeros(0)
        self.B_rate = np.zeros(0)
        self.B_cap = np.zeros(0)
        self.B_live: set[int] = set()
        self.B_steps: list[int] = []
        self.B_chunk: list[float] = []

    def _grow(self, need: int):
        cap = len(self.T_size)
        if need <= cap:
            return
        new = max(need, 2 * cap)
        for name in ("T_size", "T_sent", "T_rate", "T_last", "T_conn", "T_seq", "T_inst", "T_state", "T_earlier",
                     "T_gs", "T_ge", "T_ws", "T_we", "T_local"):
            old = getattr(self, name)
            arr = np.zeros(new, old.dtype)
            arr[:cap] = old
            setattr(self, name, arr)

    def _append(self, name: str, count: str, values: np.ndarray) -> int:
        arr, n = getattr(self, name), getattr(self, count)
        if n + len(values) > len(arr):
            big = np.zeros(max(2 * len(arr), n + len(values)), arr.dtype)
            big[:n] = arr[:n]
            arr = big
            setattr(self, name, arr)
        arr[n:n + len(values)] = values
        setattr(self, count, n + len(values))
        return n

    # ---- events ------------------------------------------------------------------------
    def _push(self, t: float, kind: str, payload=None):
        self._seq += 1
        heapq.heappush(self.heap, (t, self._seq, kind, payload))

    def run(self) -> "Result":
        for j, job in enumerate(self.jobs):
            self._push(float(job.start_s), "job", j)
        for f in self.faults:
            self._push(float(f.at_s), "fault", f)
        if self.router.poll_s:
            self._push(float(self.router.poll_s), "poll", None)
        self.dirty = True
        stalled = None
        while self.ops_left > 0:
            if self.dirty:
                self._solve()
            t_cont = self._next_continuous()
            t_heap = self.heap[0][0] if self.heap else math.inf
            # Only polls left and nothing moves: the run is stuck.
            if not math.isfinite(t_cont) and all(k == "poll" for _, _, k, _ in self.heap):
                stalled = self._stall_reason()
                break
            t_next = min(t_cont, t_heap)
            self._advance(t_next - self.now)
            self.now = t_next
            self.counters["events"] += 1
            if self.counters["events"] > self.p.max_events:
                stalled = f"more than {self.p.max_events} events"
                break
            self._finish_transfers()
            self._finish_bundles()
            while self.heap and self.heap[0][0] <= self.now * (1 + 1e-12) + 1e-15:
                _, _, kind, payload = heapq.heappop(self.heap)
                self._handle(kind, payload)
            self.dirty = True
        self._close_bins()
        from flowsim.results import Result
        return Result(self, stalled)

    def _handle(self, kind, payload):
        if kind == "job":
            base = self.rank_base[payload]
            for r in range(self.jobs[payload].trace.nranks):
                g = base + r
                for i in np.flatnonzero(self.deps_left[g] == 0):
                    self._ready(g, int(i))
        elif kind == "compute":
            g, i = payload
            self.compute_busy[g] = False
            self._op_done(g, i)
            self._next_compute(g)
        elif kind == "deliver":
            self._transfers_done(np.array([payload], np.int64))
        elif kind == "bundle_end":
            self._bundle_members_done(payload)
        elif kind == "fault":
            self._fault(payload)
        elif kind == "poll":
            self._poll()
            if self.ops_left > 0:
                self._push(self.now + self.router.poll_s, "poll", None)

    # ---- ops ---------------------------------------------------------------------------
    def _ready(self, g: int, i: int):
        """Op i of global rank g has its dependencies done (the agent's ready heap)."""
        self.op_ready[g][i] = self.now
        op = self.streams[g][i]
        if op.kind == "compute":
            self.compute_wait[g].append(i)
            if not self.compute_busy[g]:
                self._next_compute(g)
            return
        self.op_start[g][i] = self.now
        if op.kind == "collective":
            self._start_collective(g, i, op)
        else:
            self._start_p2p(g, i, op)

    def _next_compute(self, g: int):
        if self.compute_busy[g] or not self.compute_wait[g]:
            return
        w = self.compute_wait[g]
        k = min(range(len(w)), key=w.__getitem__)  # stream order, as the agent's heap
        i = w.pop(k)
        op = self.streams[g][i]
        factor = 1.0
        for from_s, f in self.slow.get(g, ()):
            if self.now >= from_s:
                factor = f
        self.op_start[g][i] = self.now
        self.compute_busy[g] = True
        self._push(self.now + op.duration_s * factor, "compute", (g, i))

    def _op_done(self, g: int, i: int):
        j = self.job_of[g]
        self.records.append((j, g - self.rank_base[j], i, self.op_start[g][i], self.now, self.op_ready[g][i]))
        self.ops_left -= 1
        now_ready = []
        for d in self.dependants[g][i]:
            self.deps_left[g][d] -= 1
            if self.deps_left[g][d] == 0:
                now_ready.append(d)
        for d in sorted(now_ready):  # the agent pops its ready heap in stream order
            self._ready(g, d)

    def _group_gps(self, j: int, group: list[int]):
        if not self.gps:
            return None
        hosts = [int(self.rank_host[self.rank_base[j] + r]) for r in group]
        return effective_gpus_per_server(hosts, self.gps)

    def _instance(self, key, j, op, group, make):
        inst = self.insts.get(key)
        if inst is None:
            inst = _Inst(key, j, op, group)
            n = len(group)
            inst.sends_left, inst.recvs_left = np.zeros(n, np.int64), np.zeros(n, np.int64)
            inst.started, inst.op_index = np.zeros(n, bool), np.full(n, -1, np.int64)
            make(inst)
            self.insts[key] = inst
            self.inst_list.append(inst)
        return inst

    def _start_collective(self, g, i, op):
        j = self.job_of[g]
        r = g - self.rank_base[j]
        group = self.jobs[j].trace.groups[op.group]
        key = ("coll", j, op.group, op.id)
        root = op.root or 0
        gps = self._group_gps(j, group) if op.algorithm == "hierarchical" else None

        def make(inst):
            if self.p.collective_model == "bundle" and len(group) > 1:
                inst.tmpl = bundle_shape(op.op, op.algorithm or "ring", len(group), op.size_bytes, root, gps)
                inst.sends_left[:] = 1  # a token each, returned when the bundle ends
            else:
                t = template(op.op, op.algorithm or "ring", len(group), op.size_bytes, root, gps)
                inst.tmpl = t
                inst.sends_left[:] = np.bincount(t.src, minlength=len(group))
                inst.recvs_left[:] = np.bincount(t.dst, minlength=len(group))
                self._create_transfers(inst, t)

        inst = self._instance(key, j, op, group, make)
        pos = self._gpos.get((j, op.group))
        if pos is None:
            pos = self._gpos[j, op.group] = {m: k for k, m in enumerate(group)}
        self._member_starts(inst, pos[r], i)

    def _start_p2p(self, g, i, op):
        j = self.job_of[g]
        r = g - self.rank_base[j]
        src, dst = (r, op.peer) if op.kind == "send" else (op.peer, r)
        key = ("p2p", j, src, dst, op.id)

        def make(inst):
            inst.sends_left[:] = [1, 0]
            inst.recvs_left[:] = [0, 1]
            self._create_p2p(inst, float(op.size_bytes))

        inst = self._instance(key, j, op, [src, dst], make)
        self._member_starts(inst, 0 if op.kind == "send" else 1, i)

    def _member_starts(self, inst: _Inst, local: int, i: int):
        inst.started[local] = True
        inst.op_index[local] = i
        inst.n_started += 1
        inst.start_s = min(inst.start_s, self.now)
        if inst.base >= 0:
            if inst.key[0] == "p2p":
                if local == 0:
                    self._enqueue(np.array([inst.base], np.int64))
            else:
                sends = inst.tmpl.sends_of(local)
                if len(sends):
                    self._enqueue(inst.base + sends)
        elif inst.n_started == len(inst.group) and inst.bundle < 0:
            self._start_bundle(inst)
        self._maybe_member_done(inst, local)

    def _maybe_member_done(self, inst: _Inst, local: int):
        if inst.started[local] and inst.sends_left[local] == 0 and inst.recvs_left[local] == 0 \
                and inst.op_index[local] >= 0:
            i = int(inst.op_index[local])
            inst.op_index[local] = -2  # finished
            inst.end_s = max(inst.end_s, self.now)
            inst.members_done += 1
            g = self.rank_base[inst.job] + inst.group[local]
            self._op_done(g, i)

    # ---- transfers ---------------------------------------------------------------------
    def _conns(self, j: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Connection ids of many (src, dst) rank pairs of job j; new ones hashed in one go."""
        src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
        out = np.empty(len(src), np.int64)
        new = []
        for k, (s, d) in enumerate(zip(src.tolist(), dst.tolist())):
            c = self.conn_of.get((j, s, d))
            if c is None:
                c = self.conn_of[j, s, d] = len(self.C_src) + len(new)
                new.append((s, d))
            out[k] = c
        if new:
            ns = np.array([s for s, _ in new], np.int64)
            nd = np.array([d for _, d in new], np.int64)
            hs = self.rank_host[self.rank_base[j] + ns]
            hd = self.rank_host[self.rank_base[j] + nd]
            ids = len(self.C_src) + np.arange(len(new))
            # The agent's connection: a kernel-chosen source port; one per ordered pair and job.
            keys = five_tuple_hash(self.net.host_ip[hs], self.net.host_ip[hd], 32768 + ids % 28232,
                                   self.p.base_port + j)
            self.C_src.extend(hs.tolist())
            self.C_dst.extend(hd.tolist())
            self.C_job.extend([j] * len(new))
            self.C_key.extend(keys.tolist())
            self.C_path.extend([None] * len(new))
            self.counters["connections"] += len(new)
        return out

    def _create_transfers(self, inst: _Inst, t):
        n = t.n
        base = self.n_T
        self._grow(base + n)
        inst.base = base
        sl = slice(base, base + n)
        self.T_size[sl] = t.size
        self.T_sent[sl] = 0
        self.T_rate[sl] = 0
        self.T_last[sl] = 0
        self.T_state[sl] = 0
        self.T_inst[sl] = len(self.inst_list)
        self.T_local[sl] = np.arange(n)
        self.T_earlier[sl] = np.diff(t.earlier_ptr)
        g0 = self._append("G", "n_G", base + t.gate)
        self.T_gs[sl], self.T_ge[sl] = g0 + t.gate_ptr[:-1], g0 + t.gate_ptr[1:]
        w0 = self._append("W", "n_W", base + t.waiter)
        self.T_ws[sl], self.T_we[sl] = w0 + t.waiter_ptr[:-1], w0 + t.waiter_ptr[1:]
        j, grp = inst.job, inst.group
        g = np.asarray(grp, np.int64)
        self.T_conn[sl] = self._conns(j, g[t.src], g[t.dst])
        self.n_T = base + n
        self.counters["transfers"] += n
        # Receives of zero bytes are complete from the start (their earlier-waiters owe nothing).
        zero = np.flatnonzero(t.size == 0)
        if len(zero):
            self.T_state[base + zero] = DONE
            for z in zero:
                self._count_done(inst, int(z))
            self._release_waiters(base + zero)

    def _create_p2p(self, inst: _Inst, size: float):
        base = self.n_T
        self._grow(base + 1)
        inst.base = base
        self.T_size[base], self.T_sent[base], self.T_rate[base], self.T_last[base] = size, 0, 0, 0
        self.T_state[base], self.T_inst[base], self.T_local[base], self.T_earlier[base] = 0, len(self.inst_list), 0, 0
        self.T_gs[base] = self.T_ge[base] = self.n_G
        self.T_ws[base] = self.T_we[base] = self.n_W
        self.T_conn[base] = self._conns(inst.job, [inst.group[0]], [inst.group[1]])[0]
        self.n_T = base + 1
        self.counters["transfers"] += 1
        if size == 0:
            self.T_state[base] = DONE
            self._count_done(inst, 0)

    def _enqueue(self, tids: np.ndarray):
        """A rank's op started: its sends join their connections' queues, in order."""
        tids = tids[self.T_state[tids] == 0]
        if not len(tids):
            return
        self.T_seq[tids] = self._seq + np.arange(1, len(tids) + 1)
        self._seq += len(tids)
        self.T_state[tids] = QUEUED
        self.queued.update(tids.tolist())

    def _count_done(self, inst: _Inst, local_t: int):
        if inst.key[0] == "p2p":
            s, d = 0, 1
        else:
            s, d = int(inst.tmpl.src[local_t]), int(inst.tmpl.dst[local_t])
        inst.sends_left[s] -= 1
        inst.recvs_left[d] -= 1
        self._maybe_member_done(inst, s)
        self._maybe_member_done(inst, d)

    def _release_waiters(self, tids: np.ndarray):
        for t in tids.tolist():
            w = self.W[self.T_ws[t]:self.T_we[t]]
            if len(w):
                np.subtract.at(self.T_earlier, w, 1)

    def _transfers_done(self, tids: np.ndarray):
        """Delivered: the receiver has every byte."""
        self.T_state[tids] = DONE
        self.T_rate[tids] = 0
        self._release_waiters(tids)
        for t in tids.tolist():
            self._count_done(self.inst_list[self.T_inst[t]], int(self.T_local[t]))

    def _finish_transfers(self):
        if not self.queued:
            return
        q = np.fromiter(self.queued, np.int64, len(self.queued))
        fin = q[self.T_size[q] - self.T_sent[q] <= BYTE_TOL + 1e-12 * self.T_size[q]]
        if not len(fin):
            return
        self.T_sent[fin] = self.T_size[fin]
        self.queued.difference_update(fin.tolist())
        if self.p.latency_s > 0:
            self.T_last[fin] = self.T_rate[fin]
            self.T_state[fin] = INFLIGHT
            self.T_rate[fin] = 0
            for t in fin.tolist():
                self._push(self.now + self.p.latency_s, "deliver", t)
        else:
            self._transfers_done(fin)

    # ---- bundles -----------------------------------------------------------------------
    def _start_bundle(self, inst: _Inst):
        shape = inst.tmpl
        b = len(self.B_inst)
        inst.bundle = b
        g = np.asarray(inst.group, np.int64)
        conns = self._conns(inst.job, g[shape.src], g[shape.dst])
        work = float(shape.bytes.max()) if len(shape.bytes) else 0.0
        self.B_inst.append(inst)
        self.B_conns.append(conns)
        self.B_w.append(shape.bytes / work if work else shape.bytes)
        self.B_work = np.append(self.B_work, work)
        self.B_done = np.append(self.B_done, 0.0)
        self.B_rate = np.append(self.B_rate, 0.0)
        self.B_cap = np.append(self.B_cap, np.inf)
        self.B_steps.append(shape.num_steps)
        self.B_chunk.append(shape.chunk_bytes)
        self.counters["bundles"] += 1
        if work <= 0 or not len(conns):
            self._bundle_done(b)
        else:
            self.B_live.add(b)
            self._latency_cap(b)

    def _latency_cap(self, b: int):
        """A step cannot take less than the latency plus one slice (or chunk) at the bundle's
        uncontended rate: cap the tied rate so that the schedule's steps fit."""
        if self.p.latency_s <= 0 or not self.B_steps[b]:
            return
        self._route_missing(self.B_conns[b])
        cols = self._bundle_column(b)
        cap = self.net.capacity_Bps
        load = np.bincount(cols[0], weights=cols[1], minlength=self.net.n_links)
        used = load > 0
        x_alone = float((cap[used] / load[used]).min()) if used.any() else math.inf
        steps, chunk = self.B_steps[b], self.B_chunk[b]
        per_step = self.p.latency_s + min(self.p.slice_bytes, chunk) / x_alone
        self.B_cap[b] = self.B_work[b] / (steps * per_step)

    def _bundle_column(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        conns, w = self.B_conns[b], self.B_w[b]
        paths = [self.C_path[c] for c in conns]
        lens = np.array([len(p) for p in paths], np.int64)
        links = np.concatenate(paths) if paths else np.zeros(0, np.int64)
        return links, np.repeat(w, lens)

    def _bundle_done(self, b: int):
        self.B_live.discard(b)
        self.B_rate[b] = 0
        if self.p.latency_s > 0 and self.B_work[b] > 0:
            self._push(self.now + self.p.latency_s, "bundle_end", b)  # the last bytes' delivery
        else:
            self._bundle_members_done(b)

    def _bundle_members_done(self, b: int):
        inst = self.B_inst[b]
        inst.sends_left[:] = 0
        inst.recvs_left[:] = 0
        for local in range(len(inst.group)):
            self._maybe_member_done(inst, local)

    def _finish_bundles(self):
        if not self.B_live:
            return
        live = np.fromiter(self.B_live, np.int64, len(self.B_live))
        fin = live[self.B_work[live] - self.B_done[live] <= BYTE_TOL + 1e-12 * self.B_work[live]]
        for b in fin.tolist():
            self.B_done[b] = self.B_work[b]
            self._bundle_done(b)

    # ---- routing, faults and polls -------------------------------------------------------
    def _route_missing(self, conns):
        miss = [c for c in np.asarray(conns).tolist() if self.C_path[c] is None]
        if not miss:
            return
        miss = sorted(set(miss))
        src = np.array([self.C_src[c] for c in miss])
        dst = np.array([self.C_dst[c] for c in miss])
        key = np.array([self.C_key[c] for c in miss], np.uint64)
        indptr, links = self.router.route(self.net, src, dst, key)
        for k, c in enumerate(miss):
            self.C_path[c] = links[indptr[k]:indptr[k + 1]].astype(np.int64)
        self.counters["routed"] += len(miss)

    def _live_conns(self) -> np.ndarray:
        live = set(self.T_conn[np.fromiter(self.queued, np.int64, len(self.queued))].tolist()) if self.queued else set()
        for b in self.B_live:
            live.update(self.B_conns[b].tolist())
        return np.array(sorted(c for c in live if self.C_path[c] is not None), np.int64)

    def observation(self) -> Observation:
        c = self._live_conns()
        nc = len(self.C_src)
        if len(self.C_bytes) < nc:
            self.C_bytes = np.concatenate([self.C_bytes, np.zeros(nc - len(self.C_bytes))])
        rate = self.C_rate if len(self.C_rate) == nc else np.concatenate([self.C_rate, np.zeros(nc - len(self.C_rate))])
        return Observation(self.now, self.net, self.link_bytes.copy(), self.link_load.copy(), c,
                           np.array([self.C_src[i] for i in c], np.int64), np.array([self.C_dst[i] for i in c], np.int64),
                           np.array([self.C_key[i] for i in c], np.uint64), self.C_bytes[c].copy(), rate[c].copy(),
                           [self.C_path[i] for i in c])

    def _apply_paths(self, changes: dict):
        for c, path in changes.items():
            path = np.asarray(path, np.int64)
            old = self.C_path[c]
            if old is None or len(old) != len(path) or (old != path).any():
                self.C_path[c] = path
                self.counters["reroutes"] += 1
        for b in self.B_live:
            self._latency_cap(b)

    def _fault(self, f: Fault):
        self.counters["faults"] += 1
        if f.b is None:
            self.net.set_switch(f.a, f.up)
        else:
            self.net.set_cable(f.a, f.b, f.up)
        self._apply_paths(self.router.links_changed(self.now, self.observation()))

    def _poll(self):
        self.counters["polls"] += 1
        self._apply_paths(self.router.poll(self.now, self.observation()))

    # ---- the rates -----------------------------------------------------------------------
    def _solve(self):
        """Rates of every queued transfer and live bundle for the current state."""
        self.counters["solves"] += 1
        self.dirty = False
        q = np.fromiter(self.queued, np.int64, len(self.queued)) if self.queued else np.zeros(0, np.int64)
        q = q[self.T_earlier[q] == 0]
        if len(q):
            q = q[np.lexsort((self.T_seq[q], self.T_conn[q]))]
        self._route_missing(self.T_conn[q])
        for b in self.B_live:
            self._route_missing(self.B_conns[b])
        warm = self.T_rate[q].copy()  # last solve's rates: the fixed point starts there
        self.T_rate[:self.n_T][self.T_state[:self.n_T] == QUEUED] = 0
        self._q = q
        nc = len(self.C_src)
        if len(self.C_rate) < nc:
            self.C_rate = np.concatenate([self.C_rate, np.zeros(nc - len(self.C_rate))])
            self.C_bytes = np.concatenate([self.C_bytes, np.zeros(nc - len(self.C_bytes))])
        self.C_rate[:] = 0
        blive = np.array(sorted(self.B_live), np.int64)
        if not len(q) and not len(blive):
            self.link_load[:] = 0
            self._gate_info = None
            return
        conns, seg = np.unique(self.T_conn[q], return_inverse=True) if len(q) else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        # Gate structure of the queued sends (fixed during this solve: positions do not move).
        gi = self._gates(q)
        self._gate_info = gi
        free, track_of = gi["free"], gi["track"]
        # Incidence: connections, then bundles.
        paths = [self.C_path[c] for c in conns]
        lens = [len(p) for p in paths]
        cols_links = list(paths)
        cols_w = [np.ones(len(p)) for p in paths]
        for b in blive:
            lk, w = self._bundle_column(int(b))
            cols_links.append(lk)
            cols_w.append(w)
            lens.append(len(lk))
        indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        links = np.concatenate(cols_links) if cols_links else np.zeros(0, np.int64)
        wts = np.concatenate(cols_w) if cols_w else np.zeros(0)
        n_ent = len(conns) + len(blive)
        at = sp.csr_matrix((wts, links, indptr), shape=(n_ent, self.net.n_links))
        a_csc = at.T.tocsc()
        capacity = self.net.capacity_Bps
        unrouted = np.array(lens, np.int64) == 0
        has_free = np.zeros(len(conns), bool)
        if len(q):
            np.logical_or.at(has_free, seg, free)
        ent_cap = np.concatenate([np.full(len(conns), np.inf), self.B_cap[blive]])
        rates_q = warm
        prev = None
        for it in range(self.p.max_fixed_point_iters):
            self.counters["fixed_point_iters"] += 1
            track = track_of(rates_q)
            demand = np.full(len(conns), np.inf)
            if len(q):
                sums = np.bincount(seg, weights=np.where(free, 0.0, track), minlength=len(conns))
                demand = np.where(has_free, np.inf, sums)
            ent_cap[:len(conns)] = demand
            want = ent_cap > 0
            want[:len(conns)] &= ~unrouted
            r = np.zeros(n_ent)
            if want.any():
                sub = a_csc[:, np.flatnonzero(want)]
                rr, rounds = max_min_rates(sub, capacity, cap=ent_cap[want], return_rounds=True)
                self.counters["maxmin_rounds"] += rounds
                r[want] = rr
            rc = r[:len(conns)]
            rates_q = self._distribute(q, seg, rc, free, track) if len(q) else rates_q
            if prev is not None and np.allclose(rates_q, prev, rtol=1e-9, atol=1e-6):
                break
            prev = rates_q
        else:
            self.counters["fixed_point_unconverged"] += 1
        self.T_rate[q] = rates_q
        self.C_rate[conns] = rc if len(conns) else 0
        self.B_rate[blive] = r[len(conns):]
        self.link_load = sp.csr_matrix(a_csc) @ np.where(np.isfinite(r), r, 0.0)

    def _gates(self, q: np.ndarray) -> dict:
        """For each queued send: free (may send at any rate now) or held at its gate, the
        rate at which its gate opens, and data for the catch-up and gate-switch events."""
        n = len(q)
        lens = self.T_ge[q] - self.T_gs[q]
        owner = np.repeat(np.arange(n), lens)
        starts = np.repeat(self.T_gs[q], lens)
        idx = starts + (np.arange(len(owner)) - np.repeat(np.cumsum(lens) - lens, lens))
        g = self.G[idx] if len(idx) else np.zeros(0, np.int64)
        live = self.T_state[g] != DONE
        owner, g = owner[live], g[live]
        size_x = self.T_size[q]
        lag = np.minimum(self.p.slice_bytes, size_x)
        a = self.p.latency_s
        size_g = np.maximum(self.T_size[g], 1e-300)

        def gate_rate(rates_q):
            """Delivered-progress rate of each live gate entry."""
            r = np.where(self.T_state[g] == INFLIGHT, self.T_last[g], 0.0)
            pos = self._pos_of(g)
            inq = pos >= 0
            r[inq] = rates_q[pos[inq]]
            return r

        delivered0 = lambda r_g: np.maximum(self.T_sent[g] - a * r_g, 0.0)  # noqa: E731
        r_g0 = gate_rate(np.maximum(self.T_rate[q], 0))
        frac = delivered0(r_g0) / size_g
        minfrac = np.ones(n)
        if len(owner):
            np.minimum.at(minfrac, owner, frac)
        F = size_x * np.minimum(minfrac, 1.0)
        gated = np.zeros(n, bool)
        gated[owner] = True
        sent = self.T_sent[q]
        allowance = F - lag - sent
        tol = BYTE_TOL + 1e-9 * size_x
        # free: ahead of its gates by more than a slice; held: exactly one slice behind them,
        # so it sends at the rate they open; blocked: not a slice of room yet.
        blocked = gated & (allowance < -tol)
        held = gated & ~blocked & (allowance <= tol)
        free = ~(held | blocked)
        binding = held[owner] & (frac <= minfrac[owner] + 1e-12)

        def track(rates_q):
            if not held.any():
                return np.zeros(n)
            rg = gate_rate(rates_q)
            d = np.full(n, np.inf)
            np.minimum.at(d, owner[binding], rg[binding] / size_g[binding])
            out = np.where(held, size_x * np.where(np.isfinite(d), d, 0.0), 0.0)
            return out

        return {"free": free, "track": track, "owner": owner, "g": g, "frac": frac, "minfrac": minfrac,
                "held": held, "blocked": blocked, "binding": binding, "size_x": size_x, "lag": lag,
                "size_g": size_g, "gate_rate": gate_rate}

    def _pos_of(self, tids: np.ndarray) -> np.ndarray:
        """Position of each transfer in the current solve's queue, or -1."""
        q = self._q
        if not len(q):
            return np.full(len(tids), -1, np.int64)
        order = np.argsort(q)
        p = np.searchsorted(q[order], tids)
        p = np.minimum(p, len(q) - 1)
        hit = q[order][p] == tids
        return np.where(hit, order[p], -1)

    @staticmethod
    def _distribute(q, seg, rc, free, track) -> np.ndarray:
        """A connection's rate over its queue: held sends take what their gates allow, in
        order, and the first free send takes the rest; sends behind it get nothing."""
        first = np.concatenate([[True], seg[1:] != seg[:-1]])
        starts = np.flatnonzero(first)
        seg_start = np.repeat(starts, np.diff(np.concatenate([starts, [len(q)]])))
        fc = np.cumsum(free)
        free_before = fc - free - (fc[seg_start] - free[seg_start])
        reach = free_before == 0
        trk = np.where(free, 0.0, track) * reach
        tc = np.cumsum(trk)
        before = tc - trk - (tc[seg_start] - trk[seg_start])
        left = np.maximum(rc[seg] - before, 0.0)
        out = np.where(free, left, np.minimum(left, track))
        return np.where(reach, out, 0.0)

    def _next_continuous(self) -> float:
        """Time until the next transfer or bundle end, or a held/free send changing state."""
        t = math.inf
        q = getattr(self, "_q", np.zeros(0, np.int64))
        if len(q):
            r = self.T_rate[q]
            pos = r > 0
            if pos.any():
                t = min(t, float(((self.T_size[q][pos] - self.T_sent[q][pos]) / r[pos]).min()))
            gi = self._gate_info
            if gi is not None and len(gi["owner"]):
                t = min(t, self._gate_events(q, gi))
        if self.B_live:
            b = np.fromiter(self.B_live, np.int64, len(self.B_live))
            r = self.B_rate[b]
            pos = r > 0
            if pos.any():
                t = min(t, float(((self.B_work[b][pos] - self.B_done[b][pos]) / r[pos]).min()))
        return self.now + max(t, 0.0)

    def _gate_events(self, q, gi) -> float:
        owner, frac, size_x, lag = gi["owner"], gi["frac"], gi["size_x"], gi["lag"]
        rq = self.T_rate[q]
        rg = gi["gate_rate"](rq)
        dfrac = rg / gi["size_g"]
        sent = self.T_sent[q]
        t = math.inf
        free = gi["free"]
        # A free send catching up with one of its gates: sent + r t = size_x (frac + dfrac t) - lag.
        fo = free[owner]
        if fo.any():
            o = owner[fo]
            gap = size_x[o] * frac[fo] - lag[o] - sent[o]
            speed = rq[o] - size_x[o] * dfrac[fo]
            ok = (speed > 0) & (gap > 0)
            if ok.any():
                t = min(t, float((gap[ok] / speed[ok]).min()))
        # A held send whose binding gate is overtaken by a slower one.
        ho = gi["held"][owner] & ~gi["binding"]
        if ho.any():
            o = owner[ho]
            dmin = np.full(len(q), np.inf)
            b = gi["binding"]
            np.minimum.at(dmin, owner[b], dfrac[b])
            closing = dmin[o] - dfrac[ho]
            gap = frac[ho] - gi["minfrac"][o]
            ok = (closing > 0) & (gap > 0) & np.isfinite(closing)
            if ok.any():
                t = min(t, float((gap[ok] / closing[ok]).min()))
        # A blocked send gets a slice of room once every gate has streamed in its share.
        bo = gi["blocked"][owner]
        if bo.any():
            o = owner[bo]
            need = (sent[o] + lag[o]) / size_x[o] - frac[bo]
            with np.errstate(divide="ignore", invalid="ignore"):
                te = np.where(need <= 0, 0.0, np.where(dfrac[bo] > 0, need / dfrac[bo], np.inf))
            opens = np.zeros(len(q))
            np.maximum.at(opens, o, te)
            blocked_ids = np.flatnonzero(gi["blocked"])
            if len(blocked_ids):
                t = min(t, float(opens[blocked_ids].min()))
        return t

    def _advance(self, dt: float):
        if dt <= 0:
            return
        q = getattr(self, "_q", np.zeros(0, np.int64))
        if len(q):
            self.T_sent[q] = np.minimum(self.T_sent[q] + self.T_rate[q] * dt, self.T_size[q])
        if self.B_live:
            b = np.fromiter(self.B_live, np.int64, len(self.B_live))
            self.B_done[b] = np.minimum(self.B_done[b] + self.B_rate[b] * dt, self.B_work[b])
            for bb in b.tolist():
                self.C_bytes[self.B_conns[bb]] += self.B_rate[bb] * self.B_w[bb] * dt
        if len(self.C_rate):
            self.C_bytes[:len(self.C_rate)] += self.C_rate * dt
        self.link_bytes += self.link_load * dt
        if self.p.series_bin_s:
            self._bin(self.now, self.now + dt)

    # ---- link time series ------------------------------------------------------------------
    def _bin(self, t0: float, t1: float):
        w = self.p.series_bin_s
        nz = np.flatnonzero(self.link_load)
        k0, k1 = int(t0 // w), int(t1 // w)
        for k in range(k0, k1 + 1):
            lo, hi = max(t0, k * w), min(t1, (k + 1) * w)
            if hi <= lo:
                continue
            if self._bin_cur != k:
                self._close_bins()
                self._bin_cur, self._bin_acc = k, {}
            if len(nz):
                acc = self._bin_acc
                for l, v in zip(nz.tolist(), (self.link_load[nz] * (hi - lo)).tolist()):
                    acc[l] = acc.get(l, 0.0) + v

    def _close_bins(self):
        if self._bin_cur is not None and self._bin_acc:
            ids = np.fromiter(self._bin_acc.keys(), np.int64)
            self.series[self._bin_cur] = (ids, np.fromiter(self._bin_acc.values(), float))
        self._bin_cur, self._bin_acc = None, None

    def _stall_reason(self) -> str:
        unrouted = sum(1 for c, p in enumerate(self.C_path) if p is not None and len(p) == 0
                       and self.C_src[c] != self.C_dst[c])
        waiting = len(self.queued)
        msg = f"no progress possible at t={self.now:.6g} s with {self.ops_left} ops left, {waiting} sends queued"
        if unrouted:
            msg += f", {unrouted} connections without a route (a partitioned fabric?)"
        return msg

