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
from dataclasses import dataclass

import numpy as np

from flowsim.bundles import Bundles
from flowsim.losses import BurstLosses
from flowsim.network import LINK_KINDS, Net
from flowsim.rates import BYTE_TOL, DONE, INFLIGHT, QUEUED, RateSolver
from flowsim.window import GROWTHS, CwndLaw, SlidingWindows
from flowsim.routing import Observation, Router, five_tuple_hash, path_weights
from traffic.collectives.templates import bundle_stages, template
from traffic.layout import parse_peer
from traffic.collectives.algorithms import effective_gpus_per_server

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
    hop_latency_s: float = 0.0  # more delivery latency per fabric or host link of a transfer's path (not NVLink)
    # Per link kind (host, fabric, nvlink: LINK_KINDS) in place of hop_latency_s (transport.latency_us).
    link_latency_s: tuple | None = None
    collective_model: str = "detailed"
    series_bin_s: float | None = None
    max_fixed_point_iters: int = 60
    base_port: int = 20000
    max_events: int = 50_000_000
    record_transfers: bool = False  # keep each transfer's first-byte and delivery times (Result.transfers)
    # Bytes a connection keeps in flight (TCP's window, NCCL's buffers): its rate is at most
    # window_bytes / RTT, RTT twice its delivery latency. None: no limit (latency costs no bandwidth).
    window_bytes: float | None = None
    # How TCP's window grows (flowsim.window): none, a fixed window_bytes or no window; cubic or
    # slow-start, a sliding window from 10 segments of mss_bytes (window_bytes, if set, bounds it).
    window_growth: str = "none"
    mss_bytes: float = 8948.0
    # (mss_bytes, header_bytes): store and forward. Each link after the first of a path holds a
    # transfer's last packet, min(size, mss) + header_bytes, for its serialization: delivery is
    # that much later. None: bytes cross every link at once.
    store_forward: tuple | None = None
    # Timeouts where first windows overflow a port (flowsim.losses.BurstLosses); None: no buffers, no losses.
    losses: BurstLosses | None = None

    def __post_init__(self):
        if not self.slice_bytes > 0:
            raise ValueError(f"slice_bytes: expected > 0, found {self.slice_bytes!r}")
        if not self.latency_s >= 0:
            raise ValueError(f"latency_s: expected >= 0, found {self.latency_s!r}")
        if not self.hop_latency_s >= 0:
            raise ValueError(f"hop_latency_s: expected >= 0, found {self.hop_latency_s!r}")
        if self.link_latency_s is not None and not (len(self.link_latency_s) == len(LINK_KINDS)
                                                    and all(v >= 0 for v in self.link_latency_s)):
            raise ValueError(f"link_latency_s: expected {len(LINK_KINDS)} values >= 0 ({', '.join(LINK_KINDS)}), "
                             f"found {self.link_latency_s!r}")
        if self.collective_model not in COLLECTIVE_MODELS:
            raise ValueError(f"collective_model: expected one of {', '.join(COLLECTIVE_MODELS)}, "
                             f"found {self.collective_model!r}")
        if self.window_bytes is not None and not self.window_bytes > 0:
            raise ValueError(f"window_bytes: expected > 0 or None, found {self.window_bytes!r}")
        if self.window_growth not in GROWTHS:
            raise ValueError(f"window_growth: expected one of {', '.join(GROWTHS)}, found {self.window_growth!r}")
        if not self.mss_bytes > 0:
            raise ValueError(f"mss_bytes: expected > 0, found {self.mss_bytes!r}")
        if self.store_forward is not None and not (len(self.store_forward) == 2 and self.store_forward[0] > 0
                                                   and self.store_forward[1] >= 0):
            raise ValueError(f"store_forward: expected (mss_bytes > 0, header_bytes >= 0) or None, "
                             f"found {self.store_forward!r}")
        if self.losses is not None and not isinstance(self.losses, BurstLosses):
            raise ValueError(f"losses: expected a BurstLosses or None, found {self.losses!r}")
        if self.series_bin_s is not None and not self.series_bin_s > 0:
            raise ValueError(f"series_bin_s: expected > 0 or None, found {self.series_bin_s!r}")
        # Computed once: the engine asks at every bundle and transfer.
        if self.link_latency_s is not None:
            kinds = np.asarray(self.link_latency_s, float)
        else:
            kinds = np.array([0.0 if k == "nvlink" else self.hop_latency_s for k in LINK_KINDS])
        kinds.flags.writeable = False
        object.__setattr__(self, "_kind_latency_s", kinds)
        object.__setattr__(self, "_has_link_latency", bool((kinds > 0).any()))

    @property
    def kind_latency_s(self) -> np.ndarray:
        """Delivery latency each link of a kind adds (indexed by LINK_KINDS)."""
        return self._kind_latency_s

    @property
    def has_link_latency(self) -> bool:
        return self._has_link_latency or self.store_forward is not None


# NCCL's default buffer of one connection (NCCL_BUFFSIZE, Simple protocol): the data it may
# have sent and not yet had acknowledged by the receiver.
NCCL_WINDOW_BYTES = 4 << 20
WINDOW_CHOICES = {"nccl": NCCL_WINDOW_BYTES}


def window_bytes_of(value) -> float | None:
    """flow.window_bytes as bytes: a number, a named choice (nccl), or None (no window)."""
    if value is None:
        return None
    return float(WINDOW_CHOICES[value] if isinstance(value, str) else value)


@dataclass
class JobSpec:
    """A job: its trace (traffic.trace.Trace, real-cluster units), rank -> host name, start."""

    name: str
    hosts: list[str]
    trace: object
    start_s: float = 0.0
    rank_offsets_s: tuple = ()  # each rank's start after start_s (a replicate's jitter); (): all at once


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
    group: list[int]              # group-local rank -> job rank (detailed; a class instance: its actors)
    members: list[int] = None     # member -> actor (global): the ranks, or rank classes, taking part
    groups: np.ndarray = None     # class instances: the concrete groups (rows of job ranks) it covers
    pairs: tuple = None           # class send/recv: (src ranks, dst ranks)
    tmpl: object = None           # Template (detailed) or its BundleShapes (bundle; bundle_stages)
    bundles_left: int = 0         # of its BundleShapes, those not yet ended
    waiting: list = None          # per BundleShape: the bundles it still waits for
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


class Simulation(Bundles, RateSolver):
    """Run jobs over a Net with a router; ``run()`` returns a ``Result``. The rate solver
    (flowsim.rates) and the bundles (flowsim.bundles) are its two other rooms."""

    def __init__(self, net: Net, jobs: list[JobSpec], router: Router, params: Params = Params(),
                 faults: list[Fault] = (), stragglers: list[Straggler] = (), phases=None):
        """phases: co-scheduling gates (flowsim.cosched.PhaseGates or None): they hold each
        job's communication of an announced iteration until its answer's start, and pace it."""
        self.net, self.jobs, self.router, self.p = net, list(jobs), router, params
        self.faults, self.stragglers = list(faults), list(stragglers)
        self.phases = phases
        self._any_latency = params.latency_s > 0 or params.has_link_latency
        # TCP's growing window (flow.window_growth): None costs the solver nothing
        self._cwnd = None if params.window_growth == "none" else SlidingWindows(
            CwndLaw(params.window_growth, params.mss_bytes, params.window_bytes))
        self.pace: dict[int, tuple[float, float, float]] = {}  # job -> (share of each NIC, from_s, until_s)
        self.parked: dict[tuple, list[tuple[int, int]]] = {}   # (job, iteration) -> ops waiting for an answer
        self.fault_log: list[dict] = []
        self.slowed: dict[tuple[int, int], float] = {}  # (global rank, op index) -> straggler factor
        self.now = 0.0
        self._seq = 0
        self.heap: list = []
        self.counters = {"events": 0, "solves": 0, "component_bundles": 0, "maxmin_rounds": 0, "fixed_point_iters": 0,
                         "fixed_point_unconverged": 0, "transfers": 0, "connections": 0, "bundles": 0,
                         "routed": 0, "reroutes": 0, "polls": 0, "faults": 0, "catch_ups": 0,
                         "overflows": 0, "timeouts": 0}
        self._setup_ranks()
        self._setup_arrays()
        self.link_bytes = np.zeros(net.n_links)
        self.link_load = np.zeros(net.n_links)
        self.series: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._bin_cur, self._bin_acc = None, None
        self.bin_s = params.series_bin_s  # doubled whenever the series would exceed max_bins
        self.max_bins = int(min(20000, max(20, 2e6 / max(net.n_links, 1))))  # links.csv <~ 2M rows
        # Loads are constant between solves: counters and the series are brought up to date
        # (flushed) at each solve and whenever someone reads them, not at every event.
        self._acct_t = 0.0
        self._had_queued = False
        self._blive_v, self._blive_n, self._blive_a = 0, -1, np.zeros(0, np.int64)
        self._crate_nz = np.zeros(0, np.int64)
        self.records: list[tuple] = []   # (job, rank, op index, start, end, ready)
        router.attach(self)

    # ---- setup ---------------------------------------------------------------------------
    def _setup_ranks(self):
        """Actors: what runs one op stream. Per rank (the detailed model, and any per-rank trace), or
        per rank class (collective_model bundle on a compact trace): then one actor stands for every
        rank of its class, which by symmetry run in lock-step, and its collectives and sends cover
        the flows of all of them. A straggler's rank leaves its class (it is no longer symmetric)."""
        net = self.net
        self.rank_base, self.streams, self.job_of = [], [], []
        self.actor_ranks: list[np.ndarray] = []
        self.job_host: list[np.ndarray] = []
        self.job_actor: list[np.ndarray] = []
        self.class_mode: list[bool] = []
        slow_ranks: dict[int, set] = {}
        for s in self.stragglers:
            j = next((i for i, jb in enumerate(self.jobs) if jb.name == s.job), None)
            if j is None or not 0 <= s.rank < self.jobs[j].trace.nranks:
                raise ValueError(f"straggler: no rank {s.rank} in job {s.job!r}")
            slow_ranks.setdefault(j, set()).add(s.rank)
        for j, job in enumerate(self.jobs):
            tr = job.trace
            if job.rank_offsets_s:  # ranks that start apart are not in lock-step: each its own actor
                slow_ranks.setdefault(j, set()).update(range(tr.nranks))
            if len(job.hosts) != tr.nranks:
                raise ValueError(f"job {job.name}: {tr.nranks} ranks in the trace, {len(job.hosts)} hosts given")
            self.rank_base.append(len(self.streams))
            self.job_host.append(np.array([net.host_index(h) for h in job.hosts], np.int64))
            actors = self._actors(tr, slow_ranks.get(j, set()))
            self.class_mode.append(any(len(r) > 1 for r, _ in actors))
            owner = np.full(tr.nranks, -1, np.int64)
            for ranks, ops in actors:
                owner[ranks] = len(self.streams)
                self.actor_ranks.append(ranks)
                self.streams.append(ops)
                self.job_of.append(j)
            self.job_actor.append(owner)
        self.n_ranks = len(self.streams)  # actors
        self.actor_rep = np.array([int(r[0]) for r in self.actor_ranks], np.int64)
        # Per actor: op id -> index, dependants, waiting counts.
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
        self.parts_left: dict[tuple[int, int], int] = {}  # (actor, op) -> instances it still waits for
        self.compute_busy = np.zeros(self.n_ranks, bool)
        self.compute_wait: list[list[int]] = [[] for _ in range(self.n_ranks)]
        self.slow: dict[int, list[tuple[float, float]]] = {}
        for s in self.stragglers:
            j = next(i for i, jb in enumerate(self.jobs) if jb.name == s.job)
            self.slow.setdefault(int(self.job_actor[j][s.rank]), []).append((s.from_s, s.factor))
        self.insts: dict[tuple, _Inst] = {}
        self.inst_list: list[_Inst] = []
        self.gps = self.net.params.get("gpus_per_server") or self._nvlink_domain_size()
        self._gpos: dict[tuple, dict] = {}
        self._coll_index: dict[int, dict] = {}
        self.p2p_fifo: dict[int, list] = {}  # (sender, receiver) actors -> their sends in order
        self._conn_cache: dict[tuple, np.ndarray] = {}
        self._cols: dict[int, tuple] = {}    # bundle -> (links, weights, path version)
        self._path_version = 0
        self._done_cols: list[int] = []
        self._changed: set[int] = set()      # bundles started, ended or moved since the last solve
        self._slot_of: dict[int, int] = {}   # live bundle -> its column in _on (links it crosses)
        self._free_slots: list[int] = []
        self._on = np.zeros((net.n_links, 0), bool)  # link x slot, C order: a link's bundles are one row
        self._link_n = np.zeros(net.n_links, np.int64)  # live bundles crossing each link (flowsim.bundles._mark)
        self._link_b = np.zeros(net.n_links, np.int64)  # and the sum of their ids
        self._slot_b = np.zeros(0, np.int64)
        self._slot_cols: list[np.ndarray] = []  # the links each slot's row marks
        self._group_cache: dict[tuple, np.ndarray] = {}

    def _nvlink_domain_size(self) -> int | None:
        """GPUs per server when every host has an NVLink domain of one size (a SuperPOD), else None."""
        nvl = self.net.host_nvl
        if not len(nvl) or (nvl < 0).any():
            return None
        sizes = np.unique(np.unique(nvl, return_counts=True)[1])
        return int(sizes[0]) if len(sizes) == 1 else None

    def _actors(self, tr, slow: set) -> list[tuple[np.ndarray, list]]:
        """(job ranks, op stream) of each actor of one job."""
        classes = getattr(tr, "classes", None)
        if self.p.collective_model != "bundle" or classes is None:
            return [(np.array([r], np.int64), tr.ops.get(r, [])) for r in range(tr.nranks)]
        out = []
        for cls in classes:
            ranks = cls.ranks[(cls.ranks >= 0) & (cls.ranks < tr.nranks)]
            alone = [r for r in ranks.tolist() if r in slow]
            rest = ranks[~np.isin(ranks, alone)] if alone else ranks
            if len(rest):
                out.append((rest, cls.ops))
            out += [(np.array([r], np.int64), cls.ops) for r in alone]
        seen = np.zeros(tr.nranks, bool)
        for r, _ in out:
            seen[r] = True
        out += [(np.array([r], np.int64), []) for r in np.flatnonzero(~seen).tolist()]  # ranks with no ops
        return out

    def _setup_arrays(self):
        cap = 1024
        z = lambda dt=float: np.zeros(cap, dt)  # noqa: E731
        self.T_size, self.T_sent, self.T_rate, self.T_last = z(), z(), z(), z()
        self.T_conn, self.T_seq, self.T_inst = z(np.int64), z(np.int64), z(np.int64)
        self.T_state, self.T_earlier = z(np.int8), z(np.int64)
        self.T_gs, self.T_ge, self.T_ws, self.T_we = z(np.int64), z(np.int64), z(np.int64), z(np.int64)
        self.T_local = z(np.int64)
        self.T_first, self.T_end = z(), z()
        self.T_fs, self.T_fe = z(np.int64), z(np.int64)   # followers: the sends gated on this transfer
        self.T_qpos = np.full(cap, -1, np.int64)           # position in the current solve's queue, or -1
        self.T_awake = z(bool)
        self.T_penalty = z()       # flow.losses: seconds a transfer's delivery waits for its timeout
        self.T_lchk = z(bool)      # flow.losses: looked at for a burst
        self.n_T = 0
        self.G = np.zeros(1024, np.int64)
        self.n_G = 0
        self.W = np.zeros(1024, np.int64)
        self.n_W = 0
        self.F = np.zeros(1024, np.int64)
        self.n_F = 0
        self._followers: dict[int, tuple] = {}  # id(template) -> (template, followers CSR)
        # Connections: (job, src rank, dst rank) -> id.
        self.conn_of: dict[tuple, int] = {}
        self.C_src, self.C_dst, self.C_key, self.C_job, self.C_sport = [], [], [], [], []
        self.C_lat: list[float] = []  # each connection's delivery latency: latency_s + hops x hop_latency_s
        self.C_path: list[np.ndarray | None] = []
        self._n_unrouted = 0  # connections whose C_path is None
        self.C_bytes = np.zeros(0)
        self.C_rate = np.zeros(0)
        self.queued: set[int] = set()   # transfer ids queued and not yet sent
        self._q = np.zeros(0, np.int64)  # the last solve's queue (flowsim.rates)
        self._gate_info = None
        # The queued sends a solve looks at (flowsim.rates, "Awake sends"): eligible, and not held
        # at rate zero by a gate chain that has not started; they stay awake until sent.
        self.awake: set[int] = set()
        self._wake_pending: list[np.ndarray] = []   # transfers whose awakeness may have changed
        self._to_route: list[np.ndarray] = []       # connections of sends that became eligible
        self._tiny_q: set[int] = set()   # queued sends of under a byte: always looked at
        # Bundles: entity id -> (instance, conn ids, weights, work bytes, done bytes, rate)
        self.B_inst: list[_Inst] = []
        self.B_key: list = []
        self.B_conns: list[np.ndarray] = []
        self.B_w: list[np.ndarray] = []
        self.B_work = np.zeros(0)
        self.B_done = np.zeros(0)
        self.B_rate = np.zeros(0)
        self.B_cap = np.zeros(0)
        self.B_live: set[int] = set()
        self.B_steps: list[int] = []
        self.B_chunk: list[float] = []
        self.B_part: list[int] = []   # which of its instance's BundleShapes

    def _grow(self, need: int):
        cap = len(self.T_size)
        if need <= cap:
            return
        new = max(need, 2 * cap)
        for name in ("T_size", "T_sent", "T_rate", "T_last", "T_conn", "T_seq", "T_inst", "T_state", "T_earlier",
                     "T_gs", "T_ge", "T_ws", "T_we", "T_local", "T_first", "T_end", "T_fs", "T_fe", "T_qpos",
                     "T_awake", "T_penalty", "T_lchk"):
            old = getattr(self, name)
            arr = np.full(new, -1, old.dtype) if name == "T_qpos" else np.zeros(new, old.dtype)
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

    def five_tuple(self, c: int) -> tuple[int, int, int, int]:
        """(src ip, dst ip, sport, dport) of connection c, as integers (TCP)."""
        return (int(self.net.host_ip[self.C_src[c]]), int(self.net.host_ip[self.C_dst[c]]), self.C_sport[c],
                self.p.base_port + self.C_job[c])

    def connect_all(self):
        """Open every connection the jobs will use, in (job, source rank, destination rank) order, and
        route them now: the agents connect to all their peers before the replay starts, so a
        controller places every flow on idle links (at t=0)."""
        for j in range(len(self.jobs)):
            pairs = sorted(self._pairs(j))
            if pairs:
                self._conns(j, np.array([a for a, _ in pairs]), np.array([b for _, b in pairs]))
        self._route_missing(np.arange(len(self.C_src)))

    def _pairs(self, j: int) -> set[tuple[int, int]]:
        """Every (src, dst) rank pair of job j that carries data."""
        tr, out, seen = self.jobs[j].trace, set(), set()
        for r in range(tr.nranks):
            for op in tr.ops.get(r, []):
                if op.kind == "send":
                    out.add((r, op.peer))
                elif op.kind == "collective" and (op.group, op.id) not in seen:
                    seen.add((op.group, op.id))
                    group = tr.groups[op.group]
                    if len(group) < 2:
                        continue
                    gps = self._group_gps(j, group) if op.algorithm == "hierarchical" else None
                    t = template(op.op, op.algorithm or "ring", len(group), op.size_bytes, op.root or 0, gps)
                    g = np.asarray(group)
                    out.update(zip(g[t.src].tolist(), g[t.dst].tolist()))
        return {(a, b) for a, b in out if a != b}

    def run(self, progress=None, progress_every: int = 2000) -> "Result":
        """progress(sim), when given, is called every progress_every events (to write results as
        they come) and once at the end."""
        for j, job in enumerate(self.jobs):
            if job.rank_offsets_s:
                for g in self.actors_of(j):
                    self._push(float(job.start_s) + float(job.rank_offsets_s[self.actor_rep[g]]), "actor", g)
            else:
                self._push(float(job.start_s), "job", j)
        for f in self.faults:
            self._push(float(f.at_s), "fault", f)
        if self.router.poll_s:
            self._push(float(self.router.poll_s), "poll", None)
        for t in self.router.timers():
            self._push(float(t), "wake", None)
        self.dirty = True
        stalled = None
        while self.ops_left > 0:
            if self.dirty:
                self._solve()
            t_cont = self._next_continuous()
            t_heap = self.heap[0][0] if self.heap else math.inf
            # Only polls left and nothing moves: the run is stuck.
            if not math.isfinite(t_cont) and all(k in ("poll", "pace") for _, _, k, _ in self.heap):
                stalled = self._stall_reason()
                break
            t_next = min(t_cont, t_heap)
            self._advance(t_next - self.now)
            self.now = t_next
            self.counters["events"] += 1
            if self.counters["events"] > self.p.max_events:
                stalled = f"more than {self.p.max_events} events"
                break
            if t_cont <= t_heap:
                self.dirty = True  # a transfer or bundle ends, or a gated send changes state
            self._finish_transfers()
            self._finish_bundles()
            while self.heap and self.heap[0][0] <= self.now * (1 + 1e-12) + 1e-15:
                _, _, kind, payload = heapq.heappop(self.heap)
                self._handle(kind, payload)
            if progress is not None and self.counters["events"] % progress_every == 0:
                progress(self)
        self._flush()
        self._close_bins()
        if progress is not None:
            progress(self)
        from flowsim.results import Result
        return Result(self, stalled)

    def _handle(self, kind, payload):
        if kind in ("job", "actor"):
            for g in self.actors_of(payload) if kind == "job" else (payload,):
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
        elif kind == "wake":
            self._apply_paths(self.router.wake(self.now, self.observation()))
        elif kind == "gate":
            self._begin(*payload)
        elif kind == "pace":
            self.dirty = True  # a pace window opens or closes

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
        if self.phases is not None and op.iteration is not None:
            j = self.job_of[g]
            opens = self.phases.ready(self, j, int(self.actor_rep[g]), op.iteration)
            if opens is not None and not math.isfinite(opens):
                self.parked.setdefault((j, op.iteration), []).append((g, i))  # until its phase is answered
                return
            if opens is not None and opens > self.now:
                self._push(opens, "gate", (g, i))
                return
        self._begin(g, i)

    def _begin(self, g: int, i: int):
        """A communication op starts (its dependencies are done and its phase's gate is open)."""
        op = self.streams[g][i]
        if self.phases is not None and op.iteration is not None:
            j = self.job_of[g]
            self.phases.begun(self, j, int(self.actor_rep[g]), op.iteration)
        self.op_start[g][i] = self.now
        if op.kind == "collective":
            self._start_collective(g, i, op)
        else:
            self._start_p2p(g, i, op)

    def release(self, j: int, iteration: int, start_s: float):
        """The phase (job j, iteration) is answered: the ops parked on it start at start_s."""
        for g, i in self.parked.pop((j, iteration), []):
            if start_s > self.now:
                self._push(start_s, "gate", (g, i))
            else:
                self._begin(g, i)

    def set_pace(self, j: int, share: float | None, from_s: float = 0.0, until_s: float = 0.0):
        """From from_s until until_s every rank of job j sends at most share x its NIC rate, over all its
        connections (the agent's pacer); share None lifts the last pace."""
        if share is None or until_s <= max(from_s, self.now):
            if self.pace.pop(j, None) is not None:
                self.dirty = True
            return
        self.pace[j] = (float(share), float(from_s), float(until_s))
        self.dirty = True
        for t in (from_s, until_s):
            if t > self.now:
                self._push(t, "pace", j)

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
        if factor != 1.0:
            self.slowed[g, i] = factor
        self.op_start[g][i] = self.now
        self.compute_busy[g] = True
        self._push(self.now + op.duration_s * factor, "compute", (g, i))

    def actors_of(self, j: int) -> range:
        end = self.rank_base[j + 1] if j + 1 < len(self.rank_base) else self.n_ranks
        return range(self.rank_base[j], end)

    def _part_done(self, g: int, i: int):
        """One instance of actor g's op i is done (a class's send may reach several classes)."""
        left = self.parts_left.pop((g, i), 1) - 1
        if left > 0:
            self.parts_left[g, i] = left
        else:
            self._op_done(g, i)

    def _op_done(self, g: int, i: int):
        j = self.job_of[g]
        self.records.append((j, int(self.actor_rep[g]), i, self.op_start[g][i], self.now, self.op_ready[g][i], g))
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
        hosts = self.net.host_rank[self.job_host[j][np.asarray(group, np.int64)]].tolist()
        return effective_gpus_per_server(hosts, self.gps)

    def _instance(self, key, j, op, group, make, members=None):
        inst = self.insts.get(key)
        if inst is None:
            inst = _Inst(key, j, op, group)
            inst.members = list(members) if members is not None else self.job_actor[j][np.asarray(group)].tolist()
            n = len(inst.members)
            inst.sends_left, inst.recvs_left = np.zeros(n, np.int64), np.zeros(n, np.int64)
            inst.started, inst.op_index = np.zeros(n, bool), np.full(n, -1, np.int64)
            make(inst)
            self.insts[key] = inst
            self.inst_list.append(inst)
        return inst

    def _start_collective(self, g, i, op):
        j = self.job_of[g]
        if self.class_mode[j]:
            return self._start_class_collective(g, i, op)
        r = int(self.actor_rep[g])
        group = self.jobs[j].trace.groups[op.group]
        key = ("coll", j, op.group, op.id)
        root = op.root or 0
        gps = self._group_gps(j, group) if op.algorithm == "hierarchical" else None

        def make(inst):
            if self.p.collective_model == "bundle" and len(group) > 1:
                inst.tmpl = bundle_stages(op.op, op.algorithm or "ring", len(group), op.size_bytes, root, gps)
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
        if self.class_mode[j]:
            return self._start_class_p2p(g, i, op)
        r = int(self.actor_rep[g])
        src, dst = (r, op.peer) if op.kind == "send" else (op.peer, r)
        key = ("p2p", j, src, dst, op.id)

        def make(inst):
            inst.sends_left[:] = [1, 0]
            inst.recvs_left[:] = [0, 1]
            self._create_p2p(inst, float(op.size_bytes))

        inst = self._instance(key, j, op, [src, dst], make)
        self._member_starts(inst, 0 if op.kind == "send" else 1, i)

    # ---- rank classes ------------------------------------------------------------------
    def _class_groups(self, j: int, op, g: int) -> tuple[list[int], np.ndarray]:
        """(member actors, concrete groups as rows of job ranks) of the class collective that actor
        runs as op: a collective instance is a concrete group and an op id, so the actors that run
        this id in groups of op's family and share a group (directly or through others) meet in one
        instance over all their groups; an explicit group is one instance of its own."""
        tr = self.jobs[j].trace
        layout = getattr(tr, "layout", None)
        if layout is not None and op.group in layout.families:
            index = self._coll_index.get(j)
            if index is None:
                index = self._coll_index[j] = {}
                for a in self.actors_of(j):
                    for o in self.streams[a]:
                        if o.kind == "collective" and o.group in layout.families:
                            index.setdefault((o.group, o.id), []).append(a)
            actors = tuple(index[op.group, op.id])
            key = (j, op.group, actors)
            parts = self._group_cache.get(key)
            if parts is None:
                parts = self._group_cache[key] = self._components(layout, op.group, actors)
            return parts[g]
        key = (j, op.group)
        groups = self._group_cache.get(key)
        if groups is None:
            groups = self._group_cache[key] = np.array([tr.groups[op.group]], np.int64)
        return sorted(set(self.job_actor[j][groups.ravel()].tolist())), groups

    def _components(self, layout, family: str, actors: tuple) -> dict:
        """actor -> (actors that share a group with it, transitively; their groups as rows)."""
        sets = {a: np.unique(layout.group_index(family, self.actor_ranks[a])) for a in actors}
        parent = {a: a for a in actors}

        def root(a):
            while parent[a] != a:
                parent[a] = parent[parent[a]]
                a = parent[a]
            return a

        owner: dict[int, int] = {}
        for a in actors:
            for gi in sets[a].tolist():
                if gi in owner:
                    parent[root(a)] = root(owner[gi])
                else:
                    owner[gi] = a
        comps: dict[int, list[int]] = {}
        for a in actors:
            comps.setdefault(root(a), []).append(a)
        out = {}
        for members in comps.values():
            gidx = np.unique(np.concatenate([sets[a] for a in members]))
            rows = np.array([layout.group_members(family, int(x)) for x in gidx], np.int64)
            for a in members:
                out[a] = (sorted(members), rows)
        return out

    def _start_class_collective(self, g: int, i: int, op):
        j = self.job_of[g]
        actors, groups = self._class_groups(j, op, g)
        key = ("class-coll", j, op.group, op.id, tuple(actors))

        def make(inst):
            inst.groups = groups
            gps = self._group_gps(j, groups[0].tolist()) if op.algorithm == "hierarchical" else None
            n = groups.shape[1]
            inst.tmpl = bundle_stages(op.op, op.algorithm or "ring", n, op.size_bytes, op.root or 0, gps) if n > 1 \
                else None
            inst.sends_left[:] = 1 if n > 1 else 0  # a token each, returned when the bundle ends

        inst = self._instance(key, j, op, actors, make, members=actors)
        self._member_starts(inst, actors.index(g), i)

    def _start_class_p2p(self, g: int, i: int, op):
        """A class's send (or recv) by rule: its ranks to their peers, one tied bundle per peer class."""
        j = self.job_of[g]
        tr = self.jobs[j].trace
        ranks = self.actor_ranks[g]
        if isinstance(op.peer, str):
            dim, k = parse_peer(op.peer)
            other = tr.layout.shift(ranks, dim, k)
        else:
            other = np.full(len(ranks), int(op.peer), np.int64)
        send = op.kind == "send"
        peers = self.job_actor[j][other]
        parts = np.unique(peers).tolist()
        self.parts_left[g, i] = len(parts)
        for pa in parts:
            sel = peers == pa
            sender, receiver = (g, pa) if send else (pa, g)
            pairs = (ranks[sel], other[sel]) if send else (other[sel], ranks[sel])
            key = ("class-p2p", j, op.id, sender, receiver)

            def make(inst, pairs=pairs):
                inst.pairs = pairs
                inst.sends_left[:] = [1, 0]
                inst.recvs_left[:] = [0, 1]

            inst = self._instance(key, j, op, [sender, receiver], make, members=[sender, receiver])
            self._member_starts(inst, 0 if send else 1, i)

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
        elif inst.pairs is not None and local == 0:
            # A class's send when its sender starts it, behind the sends it queued earlier to the same
            # peers: the agents send in order on one connection per peer.
            fifo = self.p2p_fifo.setdefault(inst.members[0] * self.n_ranks + inst.members[1], [])
            fifo.append(inst)
            if len(fifo) == 1:
                self._start_bundle(inst)
        elif inst.bundle < 0 and inst.pairs is None and inst.n_started == len(inst.members):
            self._start_bundles(inst)  # a collective when its last member starts
        self._maybe_member_done(inst, local)

    def _maybe_member_done(self, inst: _Inst, local: int):
        if inst.started[local] and inst.sends_left[local] == 0 and inst.recvs_left[local] == 0 \
                and inst.op_index[local] >= 0:
            i = int(inst.op_index[local])
            inst.op_index[local] = -2  # finished
            inst.end_s = max(inst.end_s, self.now)
            inst.members_done += 1
            self._part_done(inst.members[local], i)

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
            hs = self.job_host[j][ns]
            hd = self.job_host[j][nd]
            ids = len(self.C_src) + np.arange(len(new))
            # The agent's connection: a kernel-chosen source port; one per ordered pair and job.
            sport = 32768 + ids % 28232
            keys = five_tuple_hash(self.net.host_ip[hs], self.net.host_ip[hd], sport, self.p.base_port + j)
            self.C_sport.extend(sport.tolist())
            self.C_src.extend(hs.tolist())
            self.C_dst.extend(hd.tolist())
            self.C_job.extend([j] * len(new))
            self.C_key.extend(keys.tolist())
            self.C_path.extend([None] * len(new))
            self._n_unrouted += len(new)
            self.C_lat.extend([self.p.latency_s] * len(new))
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
        fptr, fol = self._followers_of(t)
        f0 = self._append("F", "n_F", base + fol)
        self.T_fs[sl], self.T_fe[sl] = f0 + fptr[:-1], f0 + fptr[1:]
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
        self.T_fs[base] = self.T_fe[base] = self.n_F
        self.T_conn[base] = self._conns(inst.job, [inst.group[0]], [inst.group[1]])[0]
        self.n_T = base + 1
        self.counters["transfers"] += 1
        if size == 0:
            self.T_state[base] = DONE
            self._count_done(inst, 0)

    def _followers_of(self, t) -> tuple[np.ndarray, np.ndarray]:
        """The reverse of a template's gates (CSR: transfer -> the transfers gated on it), cached per template."""
        hit = self._followers.get(id(t))
        if hit is None:
            owner = np.repeat(np.arange(t.n), np.diff(t.gate_ptr))
            order = np.argsort(t.gate, kind="stable")
            ptr = np.concatenate([[0], np.cumsum(np.bincount(t.gate, minlength=t.n))]).astype(np.int64)
            hit = self._followers[id(t)] = (t, ptr, owner[order])  # the template kept, so its id stays its own
        return hit[1], hit[2]

    def _enqueue(self, tids: np.ndarray):
        """A rank's op started: its sends join their connections' queues, in order."""
        tids = tids[self.T_state[tids] == 0]
        if not len(tids):
            return
        self.T_seq[tids] = self._seq + np.arange(1, len(tids) + 1)
        self._seq += len(tids)
        self.T_state[tids] = QUEUED
        self.queued.update(tids.tolist())
        tiny = tids[self.T_size[tids] < 1.0]
        if len(tiny):
            self._tiny_q.update(tiny.tolist())
        self._eligible(tids[self.T_earlier[tids] == 0])
        self.dirty = True

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
                w = w[(self.T_earlier[w] == 0) & (self.T_state[w] == QUEUED)]
                if len(w):
                    self._eligible(w)

    def _transfers_done(self, tids: np.ndarray):
        """Delivered: the receiver has every byte."""
        self.dirty = True
        self.T_state[tids] = DONE
        self.T_end[tids] = self.now
        self.T_rate[tids] = 0
        self._release_waiters(tids)
        for t in tids.tolist():
            self._count_done(self.inst_list[self.T_inst[t]], int(self.T_local[t]))

    def _finish_transfers(self):
        if not self.queued:
            return
        # Only awake sends move, and a queued send of a byte or more that has not moved is not done:
        # the rest cannot finish now.
        q = np.fromiter(self.awake, np.int64, len(self.awake))
        if self._tiny_q:
            q = np.union1d(q, np.fromiter(self._tiny_q, np.int64, len(self._tiny_q)))
        fin = np.sort(q[self.T_size[q] - self.T_sent[q] <= BYTE_TOL + 1e-12 * self.T_size[q]])
        if not len(fin):
            return
        self.T_sent[fin] = self.T_size[fin]
        done = fin.tolist()
        self.queued.difference_update(done)
        self.awake.difference_update(done)
        self._tiny_q.difference_update(done)
        self._started(fin)
        self.dirty = True
        lat = self._lat_of(fin)
        late = lat > 0
        if late.any():
            slow = fin[late]
            self.T_last[slow] = self.T_rate[slow]
            self.T_state[slow] = INFLIGHT
            self.T_end[slow] = self.now + lat[late]  # when its last byte lands (the deliver event)
            self.T_rate[slow] = 0
            for t, d in zip(slow.tolist(), lat[late].tolist()):
                self._push(self.now + d, "deliver", t)
        if (~late).any():
            self._transfers_done(fin[~late])

    def _path_lat(self, path: np.ndarray) -> float:
        """latency_s plus each link's delay by its kind (by default hop_latency_s on every fabric
        and host link and none on NVLink, as the emulator delays them)."""
        if not self.p.has_link_latency:
            return self.p.latency_s
        delay = float(self.p.kind_latency_s[self.net.link_kind[path]].sum())
        if self.router.splits and len(path):  # k equal-cost paths of one length, one after another
            delay *= path_weights(path)[0]
        return self.p.latency_s + delay

    def _lat_of(self, tids: np.ndarray) -> np.ndarray:
        """Delivery latency of each transfer: its connection's, and its timeout under flow.losses."""
        lat = np.zeros(len(tids))
        if self._any_latency:
            lat += np.array([self.C_lat[c] for c in self.T_conn[tids].tolist()])
            if self.p.store_forward is not None:
                lat += self._store_forward_s(self.T_conn[tids], self.T_size[tids])
        if self.p.losses is not None:
            lat += self.T_penalty[tids]
        return lat


    # ---- routing, faults and polls -------------------------------------------------------
    def _route_missing(self, conns):
        if self._n_unrouted == 0:  # the common case, asked at every bundle start and solve
            return
        miss = [c for c in np.asarray(conns).tolist() if self.C_path[c] is None]
        if not miss:
            return
        miss = sorted(set(miss))
        src = np.array([self.C_src[c] for c in miss])
        dst = np.array([self.C_dst[c] for c in miss])
        key = np.array([self.C_key[c] for c in miss], np.uint64)
        indptr, links = self.router.route(self.net, src, dst, key, conns=np.array(miss, np.int64))
        links = links.astype(np.int64)  # one copy; each path is a view of it (never written in place)
        bounds = indptr.tolist()
        for k, c in enumerate(miss):
            self.C_path[c] = links[bounds[k]:bounds[k + 1]]
            self.C_lat[c] = self._path_lat(self.C_path[c])
        self._flat_add(np.array(miss, np.int64), np.asarray(indptr, np.int64), links)
        self._n_unrouted -= len(miss)
        self.counters["routed"] += len(miss)

    def _live_conns(self) -> np.ndarray:
        live = set(self.T_conn[np.fromiter(self.queued, np.int64, len(self.queued))].tolist()) if self.queued else set()
        for b in self.B_live:
            live.update(self.B_conns[b].tolist())
        return np.array(sorted(c for c in live if self.C_path[c] is not None), np.int64)

    def observation(self) -> Observation:
        c = self._live_conns()
        nc = len(self.C_src)
        nbytes = self.conn_bytes()
        rate = self.C_rate if len(self.C_rate) == nc else np.concatenate([self.C_rate, np.zeros(nc - len(self.C_rate))])
        rate = rate.copy()
        for b in self.B_live:
            np.add.at(rate, self.B_conns[b], self.B_rate[b] * self.B_w[b])
        return Observation(self.now, self.net, self.link_bytes.copy(), self.link_load.copy(), c,
                           np.array([self.C_src[i] for i in c], np.int64), np.array([self.C_dst[i] for i in c], np.int64),
                           np.array([self.C_key[i] for i in c], np.uint64), nbytes[c], rate[c],
                           [self.C_path[i] for i in c])

    def _apply_paths(self, changes: dict):
        for c, path in changes.items():
            path = np.asarray(path, np.int64)
            old = self.C_path[c]
            if old is None:
                self._n_unrouted -= 1
            if old is None or len(old) != len(path) or (old != path).any():
                self.C_path[c] = path
                self.C_lat[c] = self._path_lat(path)
                if self._cwnd is not None:
                    self._cwnd.reset(c)
                self.counters["reroutes"] += 1
                self.dirty = True
                self._path_version += 1
                self._changed.update(self.B_live)
        for b in self.B_live:
            self._latency_cap(b)

    def _fault(self, f: Fault):
        self.counters["faults"] += 1
        self.dirty = True
        self._changed.update(self.B_live)
        if f.b is None:
            links = self.net.set_switch(f.a, f.up)
        else:
            links = self.net.set_cable(f.a, f.b, f.up)
        before = self.counters["reroutes"]
        self._apply_paths(self.router.links_changed(self.now, self.observation()))
        self.fault_log.append({"at_s": self.now, "fault": f, "links": len(links),
                               "moved": self.counters["reroutes"] - before})

    def _poll(self):
        self.counters["polls"] += 1
        self._apply_paths(self.router.poll(self.now, self.observation()))


    # ---- counters and the link time series ---------------------------------------------------
    def _flush(self):
        """Bytes moved since the last flush at the rates of the last solve, which held since."""
        dt = self.now - self._acct_t
        if dt > 0:
            # Whole vectors: finding the links that carry traffic costs as much as adding to all.
            moved = self.link_load * dt
            self.link_bytes += moved
            if self.bin_s:
                self._bin(self._acct_t, self.now, moved)
            cz = self._crate_nz
            if len(cz):
                self.C_bytes[cz] += self.C_rate[cz] * dt
        self._acct_t = self.now

    def conn_bytes(self) -> np.ndarray:
        """Bytes each connection has carried so far (what a per-flow counter counts)."""
        self._flush()
        out = self.C_bytes.copy()
        if len(out) < len(self.C_src):
            out = np.concatenate([out, np.zeros(len(self.C_src) - len(out))])
        for b in self.B_live:
            np.add.at(out, self.B_conns[b], self.B_done[b] * self.B_w[b])
        return out

    def _bin(self, t0: float, t1: float, moved: np.ndarray):
        """moved: link_load * (t1 - t0), what a bin that holds all of [t0, t1] adds."""
        k0, k1 = int(t0 // self.bin_s), int(t1 // self.bin_s)
        if k1 >= self.max_bins:
            self._coarsen()
            return self._bin(t0, t1, moved)
        load = self.link_load
        for k in range(k0, k1 + 1):
            lo, hi = max(t0, k * self.bin_s), min(t1, (k + 1) * self.bin_s)
            if hi <= lo:
                continue
            if self._bin_cur != k:
                self._close_bins()
                self._bin_cur, self._bin_acc = k, np.zeros(self.net.n_links)
            self._bin_acc += moved if (lo, hi) == (t0, t1) else load * (hi - lo)

    def _close_bins(self):
        if self._bin_cur is not None:
            ids = np.flatnonzero(self._bin_acc)
            if len(ids):
                self.series[self._bin_cur] = (ids, self._bin_acc[ids])
        self._bin_cur, self._bin_acc = None, None

    def _coarsen(self):
        """Twice as wide bins, so that the series stays within max_bins (memory, links.csv rows)."""
        self._close_bins()
        merged: dict[int, list] = {}
        for k, (ids, v) in self.series.items():
            merged.setdefault(k // 2, []).append((ids, v))
        self.series = {}
        for k, parts in merged.items():
            ids = np.concatenate([p[0] for p in parts])
            v = np.concatenate([p[1] for p in parts])
            u, inv = np.unique(ids, return_inverse=True)
            self.series[k] = (u, np.bincount(inv, weights=v))
        self.bin_s *= 2

    def _stall_reason(self) -> str:
        unrouted = sum(1 for c, p in enumerate(self.C_path) if p is not None and len(p) == 0
                       and self.C_src[c] != self.C_dst[c])
        waiting = len(self.queued)
        msg = f"no progress possible at t={self.now:.6g} s with {self.ops_left} ops left, {waiting} sends queued"
        if unrouted:
            msg += f", {unrouted} connections without a route (a partitioned fabric?)"
        return msg

