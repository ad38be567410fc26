"""The submitting side of a cluster sweep: connect (or start a local cluster), send the points,
follow them, bring each folder back, retry a point whose worker died, stop them on SIGINT.

Everything that counts stays with experiment.sweep's Book on this machine: which points are
complete (resume), sweep.csv after every point, the plot and the table. The workers only run
points and return their folders as bytes (dtnet.cluster.ship), so no file system is shared.
"""
from __future__ import annotations

import contextlib
import logging
import os
import queue
import re
import uuid

from badinput import InputError
from dtnet.cluster import ship, task
from experiment.engine import Interrupted

DEFAULT_PORT = 8786
CONNECT_TIMEOUT_S = 5.0
RETRIES = 1              # a point whose worker died is run once more, then failed
FREE_RESUBMITS = 3       # a point lost before it started (queued on a dying worker) is resent this often
NO_WORKER_S = 120.0      # points nobody can run for this long fail (the cluster lost its workers)
POLL_S = 0.5
ADDRESS_RE = re.compile(r"(?:(tcp|tls)://)?(\[[0-9A-Fa-f:]+\]|[A-Za-z0-9][A-Za-z0-9.-]*)(?::(\d{1,5}))?")


def need_dask(flag: str):
    """The distributed module, or the one-line error that says how to install it."""
    try:
        import distributed
    except ImportError as e:
        raise InputError(flag, "Dask's distributed scheduler installed (pip install 'dtnet[cluster]', "
                               "or pip install dask distributed)", f"no module {e.name or 'distributed'}") from None
    return distributed


def parse_address(address: str, flag: str = "--cluster") -> str:
    """tcp://HOST:PORT (or HOST:PORT, HOST: port 8786), checked: a scheduler's address, not a shell word."""
    m = ADDRESS_RE.fullmatch(address or "")
    port = int(m.group(3)) if m and m.group(3) else DEFAULT_PORT
    if not m or not 0 < port < 65536:
        raise InputError(flag, "a scheduler address tcp://HOST:PORT (HOST:PORT, or HOST for port 8786)", address)
    return f"{m.group(1) or 'tcp'}://{m.group(2)}:{port}"


HOST_RE = re.compile(r"\[[0-9A-Fa-f:]+\]|[A-Za-z0-9][A-Za-z0-9.-]*")


def check_host(host: str, flag: str = "--host") -> str:
    """An address to listen on: a host name or IP address alone (a shell word or a port is refused)."""
    if not isinstance(host, str) or not HOST_RE.fullmatch(host):
        raise InputError(flag, "a host name or IP address to listen on (no scheme, no port)", host)
    return host


def address_and_tls(address: str, tls_dir: str | None, flag: str) -> tuple[str, object]:
    """The scheduler's address (tls:// with --tls) and the Security to reach it (None: plain TCP)."""
    from dtnet.cluster import tls
    if tls_dir and address.startswith("tcp://"):
        raise InputError(flag, "a tls:// address (or HOST:PORT) beside --tls", address)
    scheme = "tls://" if tls_dir and "://" not in address else ""
    address = parse_address(scheme + address, flag)
    if address.startswith("tls://") and not tls_dir:
        raise InputError("--tls", f"the folder of the cluster's certificates for {address} "
                                  "(`dtnet scheduler --tls DIR` made it)", "none")
    return address, (tls.security(tls_dir) if tls_dir else None)


def local_slots(workers: int) -> int:
    """Each local worker's share of this machine's cores (at least one point at a time)."""
    return max(1, (os.cpu_count() or 1) // workers)


def can_emulate() -> bool:
    """Whether this machine can run emulator points: root and Open vSwitch's tools (the run
    itself checks the rest and fails the point with the reason)."""
    import shutil
    return os.geteuid() == 0 and shutil.which("ovs-vsctl") is not None


@contextlib.contextmanager
def session(address: str | None = None, workers: int | None = None, *, slots: int | None = None,
            connect_timeout_s: float = CONNECT_TIMEOUT_S, log=print, tls_dir: str | None = None):
    """A connected Executor: to the scheduler at address (over TLS with the certificates in
    tls_dir), or to a local cluster of `workers` worker processes bound to 127.0.0.1 (closed,
    and its processes ended, on leaving)."""
    flag = "--cluster" if address else "--workers"
    distributed = need_dask(flag)
    import dask

    with contextlib.ExitStack() as stack:
        if address:
            address, security = address_and_tls(address, tls_dir, "--cluster")
            try:
                client = distributed.Client(address, timeout=connect_timeout_s, set_as_default=False,
                                            security=security)
            except (OSError, TimeoutError) as e:
                raise InputError("--cluster", f"a Dask scheduler answering at {address} (start one with "
                                              "`dtnet scheduler`)", f"no answer within {connect_timeout_s:g} s "
                                              f"({type(e).__name__})") from None
            stack.callback(client.close)
        else:
            if tls_dir:
                raise InputError("--tls", "--cluster tls://HOST:PORT beside it (a local cluster stays on 127.0.0.1)",
                                 "--workers")
            if not isinstance(workers, int) or workers < 1:
                raise InputError("--workers", "a number of worker processes >= 1", workers)
            per = slots or local_slots(workers)
            # A point whose worker died comes back to us at once (we retry it, once).
            stack.enter_context(dask.config.set({"distributed.scheduler.allowed-failures": 0}))
            cluster = stack.enter_context(distributed.LocalCluster(
                n_workers=workers, threads_per_worker=per, processes=True, host="127.0.0.1",
                dashboard_address=None, silence_logs=logging.CRITICAL, preload=["dtnet.cluster.localworker"],
                resources={"emulator": 1} if can_emulate() else None))
            client = stack.enter_context(distributed.Client(cluster, set_as_default=False))
            log(f"dtnet: local cluster of {workers} worker process(es) on 127.0.0.1, "
                f"{per} point slot(s) each")
        yield Executor(client, log=log, worker_wait_s=connect_timeout_s)


class Executor:
    """execute(pending, book) for experiment.sweep.run, on a Dask cluster."""

    def __init__(self, client, log=print, retries: int = RETRIES, no_worker_s: float = NO_WORKER_S,
                 worker_wait_s: float = CONNECT_TIMEOUT_S):
        self.client, self.log, self.no_worker_s, self.worker_wait_s = client, log, no_worker_s, worker_wait_s
        self.retries = retries
        self.workers: dict = {}

    # -- before anything is sent ------------------------------------------------------------
    def _check_cluster(self, pending) -> None:
        c = self.client
        try:
            c.wait_for_workers(1, timeout=self.worker_wait_s)
        except (TimeoutError, OSError):
            raise InputError("--cluster", f"a scheduler with workers (start one with `dtnet worker "
                                          f"{c.scheduler.address}`)", f"no worker within {self.worker_wait_s:g} s "
                                          "(--connect-timeout-s)") from None
        self.workers = c.run(task.describe)
        for addr, w in sorted(self.workers.items()):
            self.log(f"dtnet: worker {w['name']} ({addr}, {w['host']}): {w['slots']} point slot(s), "
                     + ("emulator points one at a time" if w["emulator"] else "no emulator points"))
        here = task.code_fingerprint()
        for addr, w in sorted(self.workers.items()):
            if w["code"] != here:
                raise InputError("--cluster", f"workers running the same dtnet code as here (sources {here})",
                                 f"worker {w['name']} on {w['host']} with sources {w['code']}")
        if any(p.exp.engine == "emulate" for p in pending) and not any(w["emulator"] for w in self.workers.values()):
            raise InputError("--cluster", "a worker offering the emulator (`dtnet worker` as root, with Open "
                                          "vSwitch; it offers the resource emulator=1)",
                             f"{len(self.workers)} worker(s), none with it")
        inputs = _inputs(pending)
        if inputs:
            for addr, bad in c.run(task.check_inputs, inputs).items():
                if bad:
                    raise InputError("input files (traces, fabric files)", "each at the same path and with "
                                     "the same content on every worker (no file system is shared)",
                                     f"{self.workers[addr]['host']} lacks {bad[0]}")
        try:
            allowed = c.run_on_scheduler(_allowed_failures)
        except Exception:  # noqa: BLE001: a scheduler that refuses run_on_scheduler: retry ourselves
            allowed = 0
        if allowed:
            self.log(f"dtnet: note: the scheduler re-runs a point whose worker died {allowed} time(s) itself "
                     "(distributed.scheduler.allowed-failures); `dtnet scheduler` leaves that to dtnet: once")
            self.retries = 0

    # -- the sweep ------------------------------------------------------------------------------
    def __call__(self, pending, book) -> None:
        if not pending:
            return
        self._check_cluster(pending)
        self.sweep_id = uuid.uuid4().hex[:12]
        topic = f"dtnet-sweep-{self.sweep_id}"
        self.events: queue.Queue = queue.Queue()
        self.client.subscribe_topic(topic, lambda ev: self.events.put(("start", ev[1])))
        self.inputs = _inputs(pending)
        self.topic, self.book = topic, book
        self.futures: dict = {}      # key -> (point, future)
        self.attempts: dict = {}     # slug -> [worker it died on, ...]
        self.free: dict = {}         # slug -> times sent again, lost before it started
        self.started: dict = {}      # key -> worker label
        self.idle_since = None
        try:
            for p in pending:
                self._submit(p)
            while self.futures:
                self._step()
        except Interrupted:
            self._cancel()
            raise
        finally:
            self.client.unsubscribe_topic(topic)

    def _submit(self, point) -> None:
        n = len(self.attempts.get(point.slug, ())) + self.free.get(point.slug, 0)
        key = f"dtnet-point-{self.sweep_id}-{point.index}-{n}"
        job = {"sweep": self.sweep_id, "topic": self.topic, "slug": point.slug, "exp": point.exp,
               "engine": point.exp.engine, "inputs": self.inputs}
        fut = self.client.submit(task.run_point, job, key=key, pure=False, retries=0,
                                 resources={"emulator": 1} if point.exp.engine == "emulate" else None)
        fut.add_done_callback(lambda f: self.events.put(("done", f.key)))
        self.futures[key] = (point, fut)

    def _step(self) -> None:
        try:
            kind, item = self.events.get(timeout=POLL_S)
        except queue.Empty:
            self._watch_workers()
            return
        if kind == "start":
            key = item["key"]
            if key in self.futures and key not in self.started:
                self.started[key] = _label(item)
                self.book.started(self.futures[key][0], self.started[key])
        elif item in self.futures:
            self._done(item)

    def _done(self, key: str) -> None:
        import distributed

        point, fut = self.futures.pop(key)
        if fut.status == "finished":
            self._result(point, key, fut.result())
            return
        exc = fut.exception() if fut.status == "error" else None
        if isinstance(exc, distributed.KilledWorker):
            lw = exc.last_worker
            where = self.started.get(key) or f"worker {getattr(lw, 'name', None) or getattr(lw, 'address', '?')}"
            if key in self.started:
                self._lost(point, key, where, "it died mid-point")
            elif self.free.get(point.slug, 0) < FREE_RESUBMITS:
                self.free[point.slug] = self.free.get(point.slug, 0) + 1
                self._submit(point)  # queued there, never started: not a try
            else:
                self.book.finished(point, error=f"its workers kept dying before it started (last: {where})")
            return
        reason = f"{type(exc).__name__}: {exc}" if exc is not None else f"the scheduler {fut.status} it"
        self.book.finished(point, error=reason, where=self.started.get(key))

    def _result(self, point, key, res: dict, cancelling: bool = False) -> None:
        where = _label(res)
        if res["outcome"] == "cancelled":
            return
        if key not in self.started:
            self.started[key] = where
            self.book.started(point, where)
        if res["outcome"] == "interrupted":
            self._unpack(point, res) if cancelling else None
            if cancelling:
                self.book.interrupted(point, where)
            else:  # stopped there, not by us (its worker shutting down): as if the worker died
                self._lost(point, key, where, "its point process was stopped there")
            return
        error = self._unpack(point, res)
        if error or res["outcome"] == "failed":
            self.book.finished(point, error=error or res["error"], where=where)
        else:
            self.book.finished(point, res["summary"], where=where)

    def _lost(self, point, key, where: str, why: str) -> None:
        tries = self.attempts.setdefault(point.slug, [])
        tries.append(where)
        if len(tries) <= self.retries:
            self.book.note(point, f"lost with worker {where} ({why}); running it again on another worker")
            self._submit(point)
        else:
            self.book.finished(point, error=f"lost with its worker {len(tries)} time(s): "
                                            f"{', '.join(tries)} ({why})")

    def _unpack(self, point, res) -> str | None:
        if res.get("tar") is None:
            return None
        try:
            ship.unpack(res["tar"], self.book.folder(point))
        except InputError as e:
            return f"its folder from {_label(res)} was refused: {e}"
        return None

    def _watch_workers(self) -> None:
        """Points nobody can run (no worker at all, or none with the emulator, for NO_WORKER_S)
        fail instead of waiting for ever."""
        import time

        info = self.client.scheduler_info(n_workers=-1)["workers"] if self.futures else {}
        emu = any(w.get("resources", {}).get("emulator", 0) >= 1 for w in info.values())
        stuck = [k for k, (p, _) in self.futures.items()
                 if k not in self.started and (not info or (p.exp.engine == "emulate" and not emu))]
        if not stuck:
            self.idle_since = None
            return
        now = time.monotonic()
        self.idle_since = self.idle_since or now
        if now - self.idle_since < self.no_worker_s:
            return
        for k in stuck:
            point, fut = self.futures.pop(k)
            fut.cancel()
            self.book.finished(point, error=f"no worker could run it for {self.no_worker_s:g} s "
                                            + ("(none offers the emulator)" if info else "(the cluster has none)"))

    # -- SIGINT ----------------------------------------------------------------------------------
    def _cancel(self) -> None:
        """Stop every point: the queued ones never start, the running ones are stopped on their
        workers (their folders, as far as they got, come back); wait until no worker runs one."""
        running = [k for k in self.futures if k in self.started]
        self.client.cancel([f for k, (_, f) in self.futures.items() if k not in self.started])
        busy = sum(self.client.run(task.cancel_sweep, self.sweep_id).values())
        self.log(f"[sweep] interrupted: stopping {busy} running point(s) on their workers "
                 f"(Ctrl-C again to leave them to stop by themselves)")
        for k in [k for k in self.futures if k not in running]:
            self.futures.pop(k)
        import time

        deadline = time.monotonic() + task.STOP_GRACE_S + 30
        while running and time.monotonic() < deadline:
            try:
                kind, item = self.events.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if kind == "done" and item in running:
                running.remove(item)
                point, fut = self.futures.pop(item)
                if fut.status == "finished":
                    self._result(point, item, fut.result(), cancelling=True)
        left = sum(self.client.run(task.cancel_sweep, self.sweep_id).values())
        if left:
            self.log(f"[sweep] warning: {left} point(s) still stopping on their workers")


def _allowed_failures(dask_scheduler) -> int:
    return dask_scheduler.allowed_failures


def _label(where: dict) -> str:
    name, host = where.get("name"), where.get("host")
    return f"worker {name} ({host})" if name and host else where.get("address") or "a worker"


def _inputs(points) -> list:
    """(path, sha256) of every file the points read (trace files, a fabric file: topology.file),
    which every worker needs too. Both are absolute once parsed."""
    paths = {j.workload["trace"] for p in points for j in p.exp.jobs
             if isinstance(j.workload, dict) and isinstance(j.workload.get("trace"), str)}
    paths |= {p.exp.topology["file"] for p in points if isinstance(p.exp.topology.get("file"), str)}
    paths = sorted(paths)
    return [(p, task.file_digest(p)) for p in paths if os.path.isfile(p)]
