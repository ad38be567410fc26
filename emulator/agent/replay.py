"""The per-GPU agent: runs inside one Mininet host and replays its rank's ops.

Stdlib only (and the two contracts it reads), so 32 of them start fast. The
runner hands it a plan file (``python -m emulator.agent PLAN.json``, an
experiment.rankplan.RankPlan) and talks to it over stdin/stdout in the
messages of emulator.agent.protocol, one JSON object a line:

    agent -> Ready                       listening, peers connected, warmed up
    runner -> Go                         wall-clock start, shared by all agents
    agent -> {"kind": ..., ...}          one event per line as ops finish
    agent -> Beat                        about once a second: progress counters, whether
                                         it is busy (computing, waiting to start or on a
                                         gate) and where it is (op, step, peer awaited)
    agent -> Done                        totals; then exit 0
    agent -> Error                       names the op and step; exit 1

The runner ends a run whose agent dies or stops beating, or whose job makes
no progress for ``testbed.stall_timeout_s``, naming the rank and the step
from the last beat.

With co-scheduling (the plan has "cosched"), each iteration's communication
is a phase that the job announces, and every rank waits for the answer:

    agent -> Announce                    one rank per phase, when it is ready
    runner -> PhaseAnswer                to every rank of the job
    agent -> {"kind": "offset", ...}     when a rank's phase begins

No rank starts a communication op of iteration i before start_at (wall
clock), so the whole job shifts together; ``pace_mbps`` caps the rank's
sending rate from ``pace_from`` until ``pace_until``. The runner answers
offset 0 (status "fallback") when the controller cannot.

Transfers are pipelined the way NCCL does it: a slice of a step-k send may
leave once the matching share of the rank's step k-1 receives has arrived,
so a ring all-reduce keeps every link busy. Every slice carries a CRC32
that the receiver checks.
"""
from __future__ import annotations

import heapq
import json
import math
import os
import random
import socket
import struct
import sys
import threading
import time
import zlib

from badinput import InputError
from badinput.schema import from_json
from emulator.agent import protocol
from emulator.agent.gates import PhaseGates, TokenBucket
from experiment.rankplan import RankPlan

HEADER = struct.Struct("!IQII")  # transfer id, offset, length, crc32
WARMUP_TID = 0xFFFFFFFF
HELLO = struct.Struct("!I")  # sender rank, first thing on a connection
WARMUP_BYTES = 64 * 1024
BEAT_S = 1.0  # heartbeat period (wall seconds)


class AgentError(RuntimeError):
    pass


class SendXfer:
    __slots__ = ("tid", "op", "step", "dst", "size", "sent", "earlier_left", "gate")

    def __init__(self, tid, op, step, dst, size):
        self.tid, self.op, self.step, self.dst, self.size = tid, op, step, dst, size
        self.sent = 0
        self.earlier_left = 0   # receives it depends on, not yet complete
        self.gate: list[int] = []  # receives it follows slice by slice as they stream in


class OpState:
    def __init__(self, spec):
        self.spec = spec
        self.kind = spec.kind
        self.deps = spec.deps
        self.started = False
        self.done = False
        self.start_t = None
        self.end_t = None
        self.ready_t = None  # when its deps were done: start - ready is lateness
        self.slowdown = 1.0  # a straggler's compute: duration x this
        self.sends: list[SendXfer] = []
        self.recv_tids: list[int] = []
        # Receive progress per step, for gating sends.


class Agent:
    def __init__(self, plan: dict):
        self.plan = plan
        self.rank = plan.rank
        self.job = plan.job
        self.slice_bytes = plan.slice_bytes
        self.dilation = plan.dilation
        self.transfer_events = plan.transfer_events
        # One lock, two wake-ups: the op loop (`cond`) needs waking only when a
        # transfer completes or an answer arrives, the senders (`send_cond`)
        # on every slice received (their pipelining gates). Waking the op
        # loop per slice cost a thread switch per 16 KB for nothing.
        lock = threading.RLock()
        self.cond = threading.Condition(lock)
        self.send_cond = threading.Condition(lock)
        self.out_lock = threading.Lock()
        self.failed: str | None = None
        self.stop = False
        self.released = threading.Event()  # set when the runner lets a finished agent go
        self.ops = [OpState(o) for o in plan.ops]
        self.gates = PhaseGates(plan.cosched) if plan.cosched else None
        self.pacer: tuple[TokenBucket, float, float] | None = None  # (bucket, from, until)
        self.recv_got: dict[int, int] = {}
        self.recv_size: dict[int, int] = {}
        self.recv_first: dict[int, float] = {}
        self.recv_meta: dict[int, tuple] = {}   # tid -> (op index, step, src)
        self.waiters: dict[int, list[SendXfer]] = {}  # receive tid -> sends that need it complete
        self.send_queues: dict[int, list[SendXfer]] = {}
        self.conns_out: dict[int, socket.socket] = {}
        self.bytes_sent = 0
        self.bytes_received = 0
        self.checksum_errors = 0
        self.t_go = None  # the runner's shared start; straggler times count from it
        self.ops_done = 0
        self.last_beat = 0.0
        self._index_ops()
        self.payload = random.Random(self.rank).randbytes(2 * self.slice_bytes)
        self.payload_view = memoryview(self.payload)
        self.crcs: dict[tuple[int, int], int] = {}  # (payload offset, length) -> CRC32

    # -- plan indexing ------------------------------------------------------
    def _index_ops(self):
        for i, op in enumerate(self.ops):
            spec = op.spec
            for r in spec.recvs:
                op.recv_tids.append(r.tid)
                self.recv_size[r.tid] = r.size_bytes
                self.recv_meta[r.tid] = (i, r.step, r.src)
                self.recv_got.setdefault(r.tid, 0)
            # Each send lists the receives it waits for (send_dependencies); p2p sends have none.
            for s in spec.sends:
                x = SendXfer(s.tid, i, s.step, s.dst, s.size_bytes)
                x.gate = list(s.follow)
                for t in s.after:
                    if self.recv_size[t] > 0:
                        x.earlier_left += 1
                        self.waiters.setdefault(t, []).append(x)
                op.sends.append(x)
                self.send_queues.setdefault(s.dst, [])
        # Whether any send waits on receives: only then does a slice received wake the senders.
        self.gated_sends = any(x.gate or x.earlier_left for op in self.ops for x in op.sends)

    # -- output -------------------------------------------------------------
    def emit(self, obj: dict):
        """An event (a dict with "kind") as one line."""
        self.say(json.dumps(obj, separators=(",", ":")) + "\n")

    def send(self, msg) -> None:
        """A message of emulator.agent.protocol to the runner."""
        self.say(protocol.line(msg))

    def say(self, text: str) -> None:
        with self.out_lock:
            sys.stdout.write(text)
            sys.stdout.flush()

    def control(self, line: str):
        """A line from the runner after Go: the answer to an announced phase."""
        try:
            ans = protocol.read(line)
        except InputError as e:
            self.fail(f"rank {self.rank}: the runner sent a bad line: {e}")
            return
        if not isinstance(ans, protocol.PhaseAnswer) or self.gates is None:
            return
        now = time.time()
        with self.cond:
            self.gates.answer(ans, now)
            # Each phase's answer sets its pace, or lifts the last one.
            self.pacer = None
            if ans.pace_mbps and ans.pace_until and ans.pace_until > now:
                self.pacer = (TokenBucket(ans.pace_mbps * 1e6 / 8, self.slice_bytes, now), ans.pace_from or now,
                              ans.pace_until)
            self.cond.notify_all()
            self.send_cond.notify_all()

    def _pace(self, nbytes: int, now: float) -> float:
        """Seconds to wait before sending nbytes (call with the lock held)."""
        if self.pacer is None:
            return 0.0
        bucket, start, until = self.pacer
        if now >= until:
            self.pacer = None
            return 0.0
        return bucket.reserve(nbytes, now) if now >= start else 0.0

    def fail(self, msg: str):
        with self.cond:
            if self.failed is None:
                self.failed = msg
            self.cond.notify_all()
            self.send_cond.notify_all()

    # -- connections --------------------------------------------------------
    def listen(self):
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("0.0.0.0", self.plan.port))
        self.lsock.listen(256)

    def accept_loop(self, expected: int):
        for _ in range(expected):
            conn, _ = self.lsock.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self.reader, args=(conn,), daemon=True).start()

    def connect_peers(self, deadline: float):
        for peer, addr in sorted(self.plan.peers.items()):
            # Bound what one connection keeps in flight, so link queues
            # rarely overflow: real training fabrics are lossless.
            s = connect_retrying(addr.ip, addr.port, deadline, max(65536, 4 * self.slice_bytes))
            if s is None:
                raise AgentError(f"rank {self.rank}: cannot connect to rank {peer} at {addr.ip}:{addr.port}")
            s.sendall(HELLO.pack(self.rank))
            # Warm the connection so the first real step does not pay slow start.
            s.sendall(HEADER.pack(WARMUP_TID, 0, WARMUP_BYTES, 0) + bytes(WARMUP_BYTES))
            self.conns_out[peer] = s
            self.send_queues.setdefault(peer, [])

    def reader(self, conn: socket.socket):
        buf = bytearray(max(self.slice_bytes, WARMUP_BYTES))
        view = memoryview(buf)
        hdr = bytearray(HEADER.size)
        src = None
        try:
            hello = bytearray(HELLO.size)
            if not _recv_exact(conn, memoryview(hello), HELLO.size):
                return
            (src,) = HELLO.unpack(hello)
            while True:
                if not _recv_exact(conn, memoryview(hdr), HEADER.size):
                    self._closed_by(src)
                    return
                t_header = time.time()  # the transfer's start: before its first slice streams in
                tid, offset, length, crc = HEADER.unpack(hdr)
                if length > len(buf):
                    raise AgentError(f"frame of {length} bytes exceeds the slice size")
                if length and not _recv_exact(conn, view, length):
                    raise AgentError(f"connection closed inside a frame of transfer {tid}")
                if tid == WARMUP_TID:
                    continue
                now = time.time()
                ok = zlib.crc32(view[:length]) == crc
                with self.cond:
                    if tid not in self.recv_meta:
                        raise AgentError(f"unexpected transfer id {tid}")
                    if not ok:
                        self.checksum_errors += 1
                        op_i, step, src = self.recv_meta[tid]
                        raise AgentError(f"checksum mismatch in op {self.ops[op_i].spec.id} step {step} "
                                         f"from rank {src} at offset {offset}")
                    self.recv_first.setdefault(tid, t_header)
                    op_i, step, src = self.recv_meta[tid]
                    if self._received(tid, length):
                        if self.transfer_events:
                            spec = self.ops[op_i].spec
                            self.emit({"kind": "transfer", "job": self.job, "rank": self.rank, "src": src,
                                       "dst": self.rank, "op_id": spec.id, "step": step,
                                       "size_bytes": self.recv_size[tid], "start": self.recv_first[tid],
                                       "end": now})
                        self.cond.notify_all()  # the op may be complete
                    if self.gated_sends:
                        self.send_cond.notify_all()  # a pipelining gate may open
        except AgentError as e:
            self.fail(str(e))
        except OSError as e:
            if not self.stop:
                self.fail(f"rank {self.rank}: receive from rank {src} failed: {e}; {self.where()}")

    def _closed_by(self, src: int) -> None:
        """A peer closed its connection: fine once everything it owed us arrived."""
        with self.cond:
            missing = sum(self.recv_size[t] - self.recv_got[t] for t, (_, _, s) in self.recv_meta.items()
                          if s == src)
        if missing and not self.stop:
            self.fail(f"rank {self.rank}: connection from rank {src} closed with {missing} bytes still to come; "
                      f"{self.where()}")

    # -- sending ------------------------------------------------------------
    def _received(self, tid: int, length: int) -> bool:
        """Count `length` bytes of receive `tid` (lock held); True when it is complete."""
        self.recv_got[tid] += length
        self.bytes_received += length
        if self.recv_got[tid] > self.recv_size[tid]:
            raise AgentError(f"transfer {tid} from rank {self.recv_meta[tid][2]} overran its "
                             f"{self.recv_size[tid]} bytes")
        if self.recv_got[tid] < self.recv_size[tid]:
            return False
        for x in self.waiters.get(tid, ()):
            x.earlier_left -= 1
        return True

    def _gate_ok(self, x: SendXfer, upto: int) -> bool:
        """May the send x go up to byte `upto`? The receives it depends on are
        complete and its gate receives have streamed in the matching share.
        Cheap: a sender checks its queued sends on every slice received."""
        if x.earlier_left:
            return False
        if not x.gate:
            return True
        # Each followed receive must have streamed in its share: a tree node's
        # output slice needs that slice from every child.
        return all(self.recv_got[t] >= (math.ceil(self.recv_size[t] * upto / x.size) if x.size
                                        else self.recv_size[t]) for t in x.gate)

    def _slice(self, tid: int, sent: int, n: int) -> tuple[memoryview, int]:
        """The payload of a slice and its CRC32. A transfer's full slices all
        start at one offset of the payload, so their CRC is computed once."""
        off = (tid * 7919 + sent) % self.slice_bytes
        data = self.payload_view[off:off + n]
        crc = self.crcs.get((off, n))
        if crc is None:
            crc = zlib.crc32(data)
            if n == self.slice_bytes:
                self.crcs[off, n] = crc
        return data, crc

    def sender(self, peer: int):
        sock = self.conns_out[peer]
        queue = self.send_queues[peer]
        try:
            while True:
                with self.send_cond:
                    pick = None
                    while pick is None:
                        if self.stop or self.failed:
                            return
                        for x in queue:
                            n = min(self.slice_bytes, x.size - x.sent)
                            if self._gate_ok(x, x.sent + n):
                                pick = (x, n)
                                break
                        else:
                            self.send_cond.wait()
                    wait = self._pace(pick[1], time.time())
                if wait > 0:
                    time.sleep(wait)
                x, n = pick
                data, crc = self._slice(x.tid, x.sent, n)
                _send_frame(sock, HEADER.pack(x.tid, x.sent, n, crc), data)
                with self.cond:
                    x.sent += n
                    self.bytes_sent += n
                    if x.sent >= x.size:
                        queue.remove(x)
                        self.cond.notify_all()  # the op may be complete
        except OSError as e:
            self.fail(f"rank {self.rank}: send to rank {peer} failed: {e}; {self.where()}")

    # -- op execution --------------------------------------------------------
    def _comm_done(self, op: OpState) -> bool:
        return all(x.sent >= x.size for x in op.sends) and \
            all(self.recv_got[t] >= self.recv_size[t] for t in op.recv_tids)

    def _finish(self, i: int, now: float):
        op = self.ops[i]
        op.done, op.end_t = True, now
        self.ops_done += 1
        spec = op.spec
        ev = {"kind": spec.kind, "job": self.job, "rank": self.rank, "op_id": spec.id,
              "start": op.start_t, "end": now, "ready": op.ready_t}
        if op.slowdown != 1.0:
            ev["slowdown"] = op.slowdown
        for k in ("op", "algorithm", "size_bytes", "iteration", "label", "group", "peer", "ranks"):
            if getattr(spec, k) is not None:
                ev[k] = getattr(spec, k)
        self.emit(ev)

    def _gate(self, op: OpState) -> float | None:
        """None: the op may start now. Else the time its phase's gate opens
        (an answer arriving also wakes the loop)."""
        it = op.spec.iteration
        if self.gates is None or op.kind == "compute" or it not in self.gates.gated:
            return None
        now = time.time()
        open_at, request = self.gates.check(it, now)
        if request is not None:
            self.send(request)
        if now < open_at:
            return open_at
        ev = self.gates.begin(it, now)
        if ev is not None:
            self.emit({**ev, "job": self.job, "rank": self.rank})
        return None

    def run(self, t0: float):
        """Run the op DAG. Only ops whose dependencies are done are looked at
        (a heap, in plan order) and only started transfers are checked for
        completion: every completed transfer wakes this loop, so a pass over
        all ops would make a long trace's CPU cost quadratic."""
        compute_busy_until = None
        compute_op = None
        waiting = [len(set(op.deps)) for op in self.ops]
        dependants: list[list[int]] = [[] for _ in self.ops]
        for i, op in enumerate(self.ops):
            for d in set(op.deps):
                dependants[d].append(i)
        ready = [i for i, n in enumerate(waiting) if n == 0]  # sorted, so already a heap
        active: list[int] = []  # started collectives and point-to-point ops
        left = len(self.ops)

        def finish(i: int, now: float):
            nonlocal left
            self._finish(i, now)
            left -= 1
            for j in dependants[i]:
                waiting[j] -= 1
                if waiting[j] == 0:
                    heapq.heappush(ready, j)

        with self.cond:
            while True:
                if self.failed:
                    raise AgentError(self.failed)
                now = time.time()
                if now < t0:
                    self.beat(now, busy=True)
                    self.cond.wait(min(t0 - now, BEAT_S))
                    continue
                if compute_op is not None and now >= compute_busy_until:
                    finish(compute_op, compute_busy_until)
                    compute_op = None
                wake = None  # the earliest gate that may open by itself
                progressed = True
                while progressed:  # ops finishing now let dependants start in this same pass
                    progressed = False
                    for i in [i for i in active if self._comm_done(self.ops[i])]:
                        active.remove(i)
                        finish(i, time.time())
                        progressed = True
                    held = []  # ready but not startable yet: a closed gate, or the compute engine busy
                    while ready:
                        i = heapq.heappop(ready)
                        op = self.ops[i]
                        gate = self._gate(op)
                        if gate is not None:
                            wake = gate if wake is None else min(wake, gate)
                            held.append(i)
                            continue
                        if op.ready_t is None:
                            # A gated op is ready when its gate opens: waiting
                            # out the offset is not lateness.
                            opened = [self.gates.open_at(op.spec.iteration)] \
                                if self.gates and op.spec.iteration in self.gates.opened else []
                            op.ready_t = max([t0] + [self.ops[d].end_t for d in op.deps] + opened)
                        if op.kind == "compute":
                            if compute_op is not None:
                                held.append(i)
                                continue
                            op.started, op.start_t = True, time.time()
                            op.slowdown = self.slowdown(op.start_t)
                            compute_op = i
                            compute_busy_until = op.start_t + op.spec.duration_s * op.slowdown
                        else:
                            op.started, op.start_t = True, time.time()
                            for x in op.sends:
                                if x.dst == self.rank:  # a self-copy costs no network
                                    x.sent = x.size
                                else:
                                    self.send_queues[x.dst].append(x)
                            active.append(i)
                            self.send_cond.notify_all()
                            progressed = True
                    for i in held:
                        heapq.heappush(ready, i)
                if not left and compute_op is None:
                    return
                now = time.time()
                self.beat(now, busy=compute_op is not None or wake is not None)
                timeout = BEAT_S
                if compute_op is not None:
                    timeout = min(timeout, max(0.0, compute_busy_until - now))
                if wake is not None:
                    timeout = min(timeout, max(0.0, wake - now))
                self.cond.wait(timeout)

    def slowdown(self, now: float) -> float:
        """A straggler's compute factor for an op starting now (1 before its fault's time)."""
        st = self.plan.straggler
        if st is None or self.t_go is None or now < self.t_go + st.from_s:
            return 1.0
        return st.factor

    def beat(self, now: float, busy: bool) -> None:
        """Tell the runner, about once a second, that this rank lives and how far it got."""
        if now - self.last_beat < BEAT_S:
            return
        self.last_beat = now
        self.send(protocol.Beat(self.rank, self.bytes_sent, self.bytes_received, self.ops_done, busy, self.where()))

    def where(self) -> str:
        """The rank's first unfinished op and, in a transfer, the lowest step it
        still waits on and for whom: what a failure message names."""
        with self.cond:
            op_i = next((i for i, o in enumerate(self.ops) if o.started and not o.done), None)
            if op_i is None:
                op_i = next((i for i, o in enumerate(self.ops) if not o.done), None)
                if op_i is None:
                    return "all ops done"
                return f"before {_op_name(self.ops[op_i].spec)} (its dependencies are not done)"
            op = self.ops[op_i]
            name = _op_name(op.spec)
            if op.kind == "compute":
                return f"computing {name}"
            waits = []  # (step, 0 receive / 1 send, text)
            for tid in op.recv_tids:
                got, size = self.recv_got[tid], self.recv_size[tid]
                if got < size:
                    _, step, src = self.recv_meta[tid]
                    waits.append((step, 0, f"step {step}: waiting for rank {src} ({got} of {size} bytes arrived)"))
            for x in op.sends:
                if x.sent < x.size:
                    waits.append((x.step, 1, f"step {x.step}: sending to rank {x.dst} "
                                              f"({x.sent} of {x.size} bytes sent)"))
            if not waits:
                return f"in {name}"
            return f"in {name}, {min(waits)[2]}"


def _op_name(spec: dict) -> str:
    return f"op {spec.id}" + (f" (iteration {spec.iteration})" if spec.iteration is not None else "")


def _send_frame(sock, header: bytes, data) -> None:
    """header + data in one system call, without joining them first."""
    left = len(header) + len(data)
    sent = sock.sendmsg([header, data])
    if sent < left:  # a signal cut it short: send the rest
        sock.sendall((header + bytes(data))[sent:])


def _recv_exact(conn, view, n) -> bool:
    """Fill view[:n]; False if the peer closed before sending anything.
    MSG_WAITALL waits in the kernel for the whole frame: one wake-up of
    this thread per frame, not one per packet."""
    got = 0
    while got < n:
        k = conn.recv_into(view[got:n], n - got, socket.MSG_WAITALL)
        if k == 0:
            if got == 0:
                return False
            raise AgentError("connection closed mid-frame")
        got += k
    return True


def connect_retrying(ip: str, port: int, deadline: float, sndbuf_bytes: int,
                     ports: list | None = None) -> socket.socket | None:
    """A connected socket to ip:port, retried until the deadline (None then): the peer may
    not listen yet. Every attempt uses the same source port, so that the fabric sees one
    flow: a flow-watching policy places each new five-tuple, and a refused attempt's SYN
    would otherwise leave a placed flow behind that counts as load until it idles out.
    ``ports``, if given, gets each attempt's source port."""
    sport = 0
    while True:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf_bytes)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", sport))
        except OSError:  # taken meanwhile by another connection: a new port, then
            s.close()
            if sport == 0 or time.time() > deadline:  # no port at all: as unreachable
                return None
            sport = 0
            continue
        sport = s.getsockname()[1]
        if ports is not None:
            ports.append(sport)
        try:
            s.settimeout(2.0)
            s.connect((ip, port))
            s.settimeout(None)
            return s
        except OSError:
            s.close()
            if time.time() > deadline:
                return None
            time.sleep(0.05)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        with open(argv[0]) as f:
            plan = from_json(RankPlan, f.read(), file=argv[0])
    except (OSError, InputError) as e:
        sys.stdout.write(protocol.line(protocol.Error(None, f"bad plan: {e}")))
        return 2
    agent = Agent(plan)
    try:
        agent.listen()
        deadline = time.time() + plan.connect_timeout_s
        acceptor = threading.Thread(target=agent.accept_loop, args=(plan.inbound,), daemon=True)
        acceptor.start()
        agent.connect_peers(deadline)
        acceptor.join(max(0.0, deadline - time.time()))
        if acceptor.is_alive():
            raise AgentError(f"rank {agent.rank}: only some of {plan.inbound} peers connected")
        agent.send(protocol.Ready(agent.rank))
        line = sys.stdin.readline()
        if not line:
            return 3  # the runner went away
        try:
            go = protocol.read(line)
        except InputError as e:
            raise AgentError(f"rank {agent.rank}: expected the runner's go, found a bad line: {e}") from None
        if not isinstance(go, protocol.Go):
            raise AgentError(f"rank {agent.rank}: expected the runner's go, found {type(go).__name__}")
        agent.t_go = go.t0
        t0 = agent.t_go + plan.start_offset_s
        # The runner closing our stdin means it died or gave up: stop too.
        threading.Thread(target=_watch_stdin, args=(agent,), daemon=True).start()
        for peer in agent.conns_out:
            threading.Thread(target=agent.sender, args=(peer,), daemon=True).start()
        agent.run(t0)
        agent.stop = True
        agent.send(protocol.Done(agent.rank, agent.bytes_sent, agent.bytes_received, agent.checksum_errors))
        # Stay until the runner closes stdin, which it does once every rank is done: an agent that
        # exited at once spent CPU on its teardown while the other ranks' last steps still crossed
        # the switches, and stretched every run's last iteration (docs/fidelity.md).
        agent.released.wait()
        return 0
    except AgentError as e:
        agent.send(protocol.Error(agent.rank, str(e)))
        return 1
    except KeyboardInterrupt:
        return 130


def _watch_stdin(agent: Agent):
    try:
        while True:
            line = sys.stdin.readline()
            if not line:
                break
            agent.control(line)
    finally:
        if agent.stop and not agent.failed:
            agent.released.set()  # done, and the runner has read it: main returns 0
        else:
            os._exit(4)
