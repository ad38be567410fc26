"""The worker's side of a cluster sweep: one point, run in a runner process, shipped back as bytes.

run_point() is what the client submits. It runs inside a Dask worker thread and does no
simulation itself: it hands the point to its slot's runner (``python -m dtnet.cluster.task
--serve``, a long-lived child process per worker slot, so flow points use a core each instead
of sharing one interpreter's lock, and a point can be stopped), waits for it while watching for
a cancel, then packs the point's run folder. A runner ends when its worker dies (parent-death
signal, and it watches its parent), so a killed worker leaves no point running behind it.

On one worker, an emulator point runs alone: the ``emulator`` resource (1 per worker) keeps
the scheduler from giving a worker two, and a per-worker lock keeps flow points from running
beside one (the emulator needs most of the machine to stay faithful).
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import pickle
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from dtnet.cluster import ship

POLL_S = 0.25
STOP_GRACE_S = 60.0  # an emulator point tears its fabric down after SIGTERM; then SIGKILL
TAIL_CHARS = 300
PR_SET_PDEATHSIG = 1

_cancelled: set[str] = set()  # sweep ids the client cancelled (set by cancel_sweep through Client.run)


def cancel_sweep(sweep_id: str) -> int:
    """Runs on each worker when the client is interrupted: its points stop. Returns how many of
    this sweep's points the worker is running now."""
    _cancelled.add(sweep_id)
    return sum(1 for s in _running.values() if s == sweep_id)


_running: dict[int, str] = {}  # thread id -> sweep id, for cancel_sweep's count


class _MachineLock:
    """Many flow points, or one emulator point, on this worker at a time (a writer-preferring
    readers-writer lock: a waiting emulator point is not starved by a stream of flow points)."""

    def __init__(self):
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    def acquire(self, exclusive: bool, stop) -> bool:
        with self._cond:
            if exclusive:
                self._writers_waiting += 1
            try:
                while (self._writer or self._readers) if exclusive else (self._writer or self._writers_waiting):
                    if stop():
                        return False
                    self._cond.wait(POLL_S)
                if exclusive:
                    self._writer = True
                else:
                    self._readers += 1
                return True
            finally:
                if exclusive:
                    self._writers_waiting -= 1

    def release(self, exclusive: bool) -> None:
        with self._cond:
            if exclusive:
                self._writer = False
            else:
                self._readers -= 1
            self._cond.notify_all()


_machine = _MachineLock()


def file_digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def check_inputs(inputs) -> list[str]:
    """The input files (path, sha256) this machine lacks or holds with other content."""
    bad = []
    for path, digest in inputs:
        try:
            if file_digest(path) != digest:
                bad.append(f"{path} (other content here)")
        except OSError as e:
            bad.append(f"{path} ({e.strerror})")
    return bad


PACKAGES = ("badinput", "controller", "dtnet", "emulator", "experiment", "flowsim", "topologies", "traffic")


def code_fingerprint() -> str:
    """sha256 over dtnet's Python sources (relative path and content), to tell whether a worker
    runs the same code as the submitting side, wherever each has it installed."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout
    h = hashlib.sha256()
    for pkg in PACKAGES:
        for d, dirs, files in os.walk(os.path.join(root, pkg)):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__")
            for name in sorted(f for f in files if f.endswith(".py")):
                path = os.path.join(d, name)
                h.update(os.path.relpath(path, root).encode() + b"\0")
                h.update(file_digest(path).encode())
    return h.hexdigest()[:12]


def describe(dask_worker) -> dict:
    """This worker as the client shows it (Client.run): its name, host, slots and whether it
    offers the emulator."""
    w = dask_worker
    return {"name": str(w.name), "host": socket.gethostname(), "slots": w.state.nthreads, "code": code_fingerprint(),
            "emulator": w.state.total_resources.get("emulator", 0) >= 1}


def _stop_wanted(worker, key, sweep_id) -> bool:
    if sweep_id in _cancelled:
        return True
    try:  # the client went away or cancelled the future: the scheduler released the key
        ts = worker.state.tasks.get(key)
        return ts is None or ts.state in ("cancelled", "released", "forgotten")
    except Exception:  # noqa: BLE001: internal state; the cancel set above is the contract
        return False


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: the child's parent watch still ends it


def run_point(job: dict) -> dict:
    """Run one sweep point here. job: sweep (id), topic, key, slug, exp (the point's Experiment),
    engine, inputs [(path, sha256)]. Returns outcome (complete | incomplete | failed |
    interrupted | cancelled), summary, error, tar (the run folder packed), worker, host."""
    from distributed import get_worker

    worker = get_worker()
    key = worker.get_current_task()
    sweep_id, exclusive = job["sweep"], job["engine"] == "emulate"
    where = {"name": str(worker.name), "address": worker.address, "host": socket.gethostname()}

    def stop():
        return _stop_wanted(worker, key, sweep_id)

    if stop() or not _machine.acquire(exclusive, stop):
        return {"outcome": "cancelled", **where}
    _running[threading.get_ident()] = sweep_id
    try:
        worker.log_event(job["topic"], {"event": "start", "key": key, "slug": job["slug"], **where})
        missing = check_inputs(job["inputs"])
        if missing:
            return {"outcome": "failed", **where,
                    "error": f"input files missing on {where['host']}: {', '.join(missing)} (copy them to the "
                             f"same path on every worker)"}
        return _run_child(job, worker, stop, where)
    finally:
        _running.pop(threading.get_ident(), None)
        _machine.release(exclusive)


class _Runner:
    """A long-lived child process that runs this slot's points one after another, so that each
    point does not pay for starting Python and importing the engines (a local sweep, too, runs
    its points in one process). It is replaced when it dies or a point in it was stopped."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None

    def start(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            # Own session: a Ctrl-C in the worker's terminal does not reach it; we stop it.
            self.proc = subprocess.Popen([sys.executable, "-m", "dtnet.cluster.task", "--serve"],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, start_new_session=True)
        return self.proc


_runners: dict[int, _Runner] = {}  # worker thread -> its slot's runner


def _run_child(job, worker, stop, where) -> dict:
    tmp = tempfile.mkdtemp(prefix="dtnet-point-", dir=worker.local_directory)
    try:
        with open(os.path.join(tmp, "point.pickle"), "wb") as f:
            pickle.dump(job["exp"], f)
        runner = _runners.setdefault(threading.get_ident(), _Runner())
        child = runner.start()
        child.stdin.write(tmp.encode() + b"\n")
        child.stdin.flush()
        stopped = False
        while True:
            ready, _, _ = select.select([child.stdout], [], [], POLL_S)
            if ready:
                child.stdout.readline()  # "done", or b"" when the runner died
                break
            if stop():
                stopped = True
                _stop(child)
                break
        outcome = _read_outcome(tmp, child)
        if stopped:
            outcome = {"outcome": "interrupted", "error": None}
        folder = os.path.join(tmp, "run")
        tar = ship.pack(folder) if os.path.isdir(folder) else None
        return {**outcome, **where, "tar": tar}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _stop(child: subprocess.Popen) -> None:
    """SIGTERM (the engines unwind and keep what they wrote), SIGKILL to its group after the grace."""
    child.terminate()
    try:
        child.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        child.wait()


def _read_outcome(tmp: str, child: subprocess.Popen) -> dict:
    try:
        with open(os.path.join(tmp, "outcome.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        try:
            returncode = child.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            child.kill()
            returncode = child.wait()
        how = f"signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
        try:
            with open(os.path.join(tmp, "point.log"), errors="replace") as f:
                tail = " ".join(f.read()[-TAIL_CHARS:].split())
        except OSError:
            tail = ""
        return {"outcome": "failed", "error": f"the point's process ended ({how}) without a result"
                                              + (f"; its last output: {tail}" if tail else "")}


# -- the runner: python -m dtnet.cluster.task --serve ------------------------------------------

def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGTERM)  # the worker died: stop as on SIGTERM


def serve() -> int:
    """Read a point's scratch folder per line on stdin, run it, answer "done" on stdout. The
    points' own output goes to DIR/point.log (fd 1 and 2 pointed there while each runs)."""
    from experiment.engine import Interrupted

    def on_signal(signum, _frame):
        raise Interrupted(signal.Signals(signum).name)

    answer = os.fdopen(os.dup(1), "w")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    _die_with_parent()
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    try:
        for line in sys.stdin:
            tmp = line.strip()
            stopped = run_one(tmp)
            answer.write("done\n")
            answer.flush()
            if stopped:
                return 0  # a stopped point may leave state behind: a fresh runner for the next
    except Interrupted:
        return 0
    return 0


def run_one(tmp: str) -> bool:
    """Run the point pickled in tmp into tmp/run; write tmp/outcome.json. True when interrupted."""
    from experiment.engine import Interrupted, RunFailure
    from experiment.pipeline import run_any

    with open(os.path.join(tmp, "point.log"), "ab") as log:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    outcome: dict = {"outcome": "failed", "error": None}
    try:
        with open(os.path.join(tmp, "point.pickle"), "rb") as f:
            exp = pickle.load(f)
        summary = run_any(exp, os.path.join(tmp, "run"))
        outcome = {"outcome": summary["status"], "summary": summary, "error": summary.get("error")}
    except RunFailure as e:
        outcome["error"] = str(e)
    except Interrupted as e:
        outcome = {"outcome": "interrupted", "error": f"interrupted by {e}"}
    except Exception as e:  # noqa: BLE001: any failure of a point is that point's, reported back
        import traceback
        traceback.print_exc()
        outcome["error"] = f"{type(e).__name__}: {e}"
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    with open(os.path.join(tmp, "outcome.json.tmp"), "w") as f:
        json.dump(outcome, f)
    os.replace(os.path.join(tmp, "outcome.json.tmp"), os.path.join(tmp, "outcome.json"))
    return outcome["outcome"] == "interrupted"


if __name__ == "__main__":
    sys.exit(serve() if sys.argv[1:] == ["--serve"] else 2)
