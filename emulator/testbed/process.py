"""Processes and conditions of the testbed: wait for a condition, stop a process by PID."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from experiment.engine import RunFailure


class TestbedError(RunFailure):
    """The testbed could not start (missing root, OVS, controller timeout...)."""
    __test__ = False  # a name pytest would otherwise try to collect where tests import it


def wait_for(cond, timeout_s: float, what: str, interval_s: float = 0.05):
    """Poll cond() until truthy; raise TestbedError naming `what` on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TestbedError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(interval_s)


def start_time(pid: int) -> float | None:
    """When the process with this PID started (psutil's create_time), or None when there is none.
    A PID and its start time name one process: a PID alone may have been reused since."""
    try:
        import psutil
        return psutil.Process(pid).create_time()
    except Exception:  # noqa: BLE001: gone, not ours to read, or psutil missing
        return None


def same_process(pid, recorded_start) -> bool:
    """The process with this PID is the one recorded (its start time matches to the ms)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or not isinstance(recorded_start, (int, float)):
        return False
    now = start_time(pid)
    return now is not None and abs(now - recorded_start) < 1e-3


def close_inherited() -> None:
    """Mark every descriptor above stderr close-on-exec: whatever this process starts (OVS's
    daemons, Mininet's shells, which pass close_fds=False) then holds no lock or file of our
    caller's, such as the one of `flock LOCKFILE dtnet run ...`."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2:
            try:
                os.set_inheritable(fd, False)
            except OSError:
                pass  # the listing's own descriptor, closed meanwhile


def closed_fds_argv(argv: list[str]) -> list[str]:
    """argv run through a wrapper that closes every descriptor above stderr before it execs
    (for scripts such as ovs-ctl whose daemons live on after us)."""
    return [sys.executable, "-c", "import os, sys; os.closerange(3, os.sysconf('SC_OPEN_MAX')); "
            "os.execvp(sys.argv[1], sys.argv[1:])", *argv]


def free_ports(n: int) -> list[int]:
    """n distinct loopback ports free now: all held open together while the kernel picks them
    (one at a time, two calls can get the same port back)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    return free_ports(1)[0]


def stop_process(proc: subprocess.Popen, timeout_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after timeout_s; only this process, by PID."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


RUN_DIR_ENV = "DTNET_RUN_DIR"  # every real program's process, and what it starts, carries it


def started_for_run(pid: int, run_dir: str) -> bool:
    """The process runs a real program of the run in run_dir: its environment says so. A PID alone
    may have been reused by anyone's process since it was recorded."""
    want = f"{RUN_DIR_ENV}={os.path.abspath(run_dir)}/".encode()
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return any(v.startswith(want) for v in f.read().split(b"\0"))
    except OSError:
        return False
