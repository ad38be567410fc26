"""One part of a run's outputs written by a forked child while the parent writes the rest.

After the run, everything the outputs are made from is in memory; a child forked then sees it as
it is (copy on write, the objects left out of the collector's passes by pipeline.settled) and
writes its files itself, through the same writers as ever (badinput.paths: inside the run folder,
never through a link), so the files are byte for byte the ones one process writes.

- The child's log lines come back to the parent's log, in order, when the child ends.
- Its failure is the parent's: an exception that escapes its part, or its death by a signal,
  raises WriterFailed (a RunFailure) in the parent with one line saying what happened.
- The parent waits for it by its PID. An exception in the parent meanwhile (Interrupted on
  SIGINT/SIGTERM included) ends the child (SIGTERM, then SIGKILL after GRACE_S) and reaps it
  before passing on; the child also dies with the parent (Linux: PR_SET_PDEATHSIG), so no
  process is left behind. In the child, the first SIGINT/SIGTERM unwinds its part (a file half
  written is removed by write_atomic), a second one ends it at once.
- Where fork is missing, only one CPU is allowed (os.sched_getaffinity), or the process runs other
  threads (forking those is unsafe), the part runs in the parent after the rest, as one process.

A child may also be forked before the run (Warm, started by `dtnet run` as it starts): it imports
what the part needs (matplotlib: 0.3 s) while the parent imports dtnet and runs, then is sent the
part, pickled, when the run is done. A warm child no run claims ends at once (drop_warm).
"""
from __future__ import annotations

import contextlib
import importlib
import json
import os
import pickle
import signal
import sys
import threading
import time

from badinput import one_line
from experiment.engine import Interrupted, RunFailure

GRACE_S = 5.0  # what a child ended by the parent has to unwind before SIGKILL
PR_SET_PDEATHSIG = 1
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class WriterFailed(RunFailure):
    """The child writing part of the outputs failed: the run failed (exit status 1)."""


def can_fork() -> bool:
    """Two processes can write at once here: fork exists, two CPUs are allowed, no other thread runs."""
    if not hasattr(os, "fork") or threading.active_count() > 1:
        return False
    try:
        return len(os.sched_getaffinity(0)) > 1
    except AttributeError:  # no affinity call (macOS): count the machine's CPUs
        return (os.cpu_count() or 1) > 1


@contextlib.contextmanager
def beside(part, what: str, log=print, fork: bool | None = None, warm: Warm | None = None):
    """Run part(log) in a forked child while the with-block runs here; on leaving the block, wait
    for the child (WriterFailed when it failed). what names the part in errors ("the plots").
    fork: None decides by can_fork(); False runs part(log) here after the block. part None: nothing.
    warm: a Warm child to send part to (picklable) instead of forking one; ended when it cannot take it."""
    if part is None:
        yield
        return
    if warm is not None and warm.send(part):
        try:
            yield
        except BaseException:
            warm.close()
            raise
        warm.wait(log)
        return
    child = None  # a warm child that could not take the part has ended (Warm.send)
    if can_fork() if fork is None else fork:
        with contextlib.suppress(OSError):  # no process to be had (EAGAIN, ENOMEM): as one process
            child = _Child(part, what)
    if child is None:
        yield
        part(log)
        return
    try:
        yield
    except BaseException:
        child.stop()
        raise
    child.wait(log)


class Warm:
    """A child forked now that imports `modules`, then runs the one part it is sent (send), or ends
    unused (close). The part goes pickled through a pipe made large enough to hold it, so that
    sending never waits for the child's imports; a part too large for the pipe is not sent."""

    PIPE_BYTES = 1 << 20  # Linux's default pipe-max-size for an unprivileged process

    def __init__(self, modules: tuple, what: str):
        r, w = os.pipe()
        self.capacity = _grow_pipe(w, self.PIPE_BYTES)

        def part(log):
            os.close(w)  # the parent's end: EOF once the parent closes its own
            for name in modules:
                with contextlib.suppress(ImportError):  # the part says what is missing, as it would here
                    importlib.import_module(name)
            with os.fdopen(r, "rb") as f:
                data = f.read()
            if data:  # nothing: no run claimed this child
                pickle.loads(data)(log)

        try:
            self.child = _Child(part, what)
        except BaseException:
            os.close(r)
            os.close(w)
            raise
        os.close(r)
        self.w, self.ended = w, False

    def send(self, part) -> bool:
        """part to the child, to run now (False, and the child ended: it cannot go, or is gone)."""
        try:
            data = pickle.dumps(part)
        except Exception:  # noqa: BLE001: not picklable (a test's closure): forked as before
            data = None
        if data is None or len(data) > self.capacity:
            self.close()
            return False
        try:
            os.write(self.w, data)  # within the pipe's capacity: never blocks, never short
        except OSError:  # the child died (EPIPE): the caller forks as before
            self.close()
            return False
        os.close(self.w)
        self.w = None
        return True

    def close(self) -> None:
        """End the child unused (SIGTERM, reaped), whatever it is doing; once."""
        if self.w is not None:
            os.close(self.w)
            self.w = None
        if not self.ended:
            self.ended = True
            self.child.stop()

    def wait(self, log) -> None:
        """The part's end (outputs of _Child.wait: its log lines, WriterFailed)."""
        self.ended = True  # reaped by wait, or by stop on its way out: never signalled again
        self.child.wait(log)


def _grow_pipe(fd: int, size: int) -> int:
    """The pipe's capacity after asking for size (Linux's F_SETPIPE_SZ); 64 KiB where it cannot."""
    import fcntl

    with contextlib.suppress(OSError, AttributeError):
        return fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size)
    with contextlib.suppress(OSError, AttributeError):
        return fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
    return 1 << 16


_warm: Warm | None = None  # started by warm_plots, taken by the run that draws them (take_warm)
# What the plots import, and what unpickling their fabric does
PLOT_MODULES = ("matplotlib.figure", "matplotlib.backends.backend_agg", "matplotlib.ticker",
                "matplotlib.collections", "experiment.outputs.plots", "networkx", "topologies")


def warm_plots() -> None:
    """Start a child that imports matplotlib now, for the next run's plots (take_warm); a command
    that runs one experiment calls this first and drop_warm when it ends. Nothing where two
    processes cannot run at once (can_fork)."""
    global _warm
    if _warm is None and can_fork() and "matplotlib" not in sys.modules:
        with contextlib.suppress(OSError):  # no process to be had: the plots are drawn as before
            _warm = Warm(PLOT_MODULES, "plots/")


def take_warm() -> Warm | None:
    """The warm child for this run's plots, if one was started; the caller sends or closes it."""
    global _warm
    warm, _warm = _warm, None
    return warm


def drop_warm() -> None:
    """End a warm child no run took."""
    warm = take_warm()
    if warm is not None:
        warm.close()


class _Child:
    def __init__(self, part, what: str):
        self.what = what
        for stream in (sys.stdout, sys.stderr):  # else the child's copy of a buffer could be written twice
            with contextlib.suppress(Exception):
                stream.flush()
        parent = os.getpid()
        r, w = os.pipe()
        old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # none lands between fork and the handlers
        try:
            pid = os.fork()
        except BaseException:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
            os.close(r)
            os.close(w)
            raise
        if pid == 0:  # the child: never returns
            code = 1
            try:
                os.close(r)
                code = _child_main(part, w, parent, old)
            finally:
                os._exit(code)
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        os.close(w)
        self.pid, self.reader = pid, os.fdopen(r, "r", encoding="utf-8")

    def wait(self, log) -> None:
        """Its log lines (to EOF: it never blocks on a full pipe), then its end; WriterFailed."""
        error = None
        try:
            for line in self.reader:
                msg = json.loads(line)
                if "log" in msg:
                    log(msg["log"])
                else:
                    error = msg["error"]
            status = _reap(self.pid)
        except BaseException:
            self.stop()
            raise
        finally:
            self.reader.close()
        if os.WIFSIGNALED(status):
            raise WriterFailed(f"the child writing {self.what} (pid {self.pid}) was killed by "
                               f"{_signal_name(os.WTERMSIG(status))}; {self.what} may be missing")
        code = os.WEXITSTATUS(status)
        if code:
            raise WriterFailed(f"the child writing {self.what} (pid {self.pid}) failed"
                               + (f": {error}" if error else f" with exit status {code}"))

    def stop(self) -> None:
        """SIGTERM, SIGKILL after GRACE_S, and reap it (the parent is leaving on an exception)."""
        with contextlib.suppress(OSError):
            self.reader.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline:
            done, _ = os.waitpid(self.pid, os.WNOHANG)
            if done:
                return
            time.sleep(0.01)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        _reap(self.pid)


def _signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def _reap(pid: int) -> int:
    return os.waitpid(pid, 0)[1]  # retried on EINTR (PEP 475); a handler's Interrupted passes


def _child_main(part, w: int, parent: int, mask) -> int:
    """The child's life: die with the parent, stop on the first signal, run part, report. Its exit code."""
    with contextlib.suppress(OSError, AttributeError, ImportError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the call above
        return 1

    def on_signal(signum, _frame):
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_DFL)  # a second signal ends the child at once
        raise Interrupted(signal.Signals(signum).name)

    for s in STOP_SIGNALS:
        signal.signal(s, on_signal)
    out = os.fdopen(w, "w", encoding="utf-8")
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    def log(msg) -> None:
        out.write(json.dumps({"log": str(msg)}) + "\n")

    try:
        part(log)
        code = 0
    except Interrupted as e:
        out.write(json.dumps({"error": f"interrupted by {e}"}) + "\n")
        code = 128 + signal.SIGTERM
    except BaseException as e:  # noqa: BLE001: any failure is reported, in one line
        out.write(json.dumps({"error": one_line(f"{type(e).__name__}: {e}")}) + "\n")
        code = 1
    with contextlib.suppress(OSError):
        out.close()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    return code
