"""Processes and conditions of the testbed: wait for a condition, stop a process by PID."""
from __future__ import annotations

import os
import socket
import subprocess
import time

from experiment.engine import RunFailure


class TestbedError(RunFailure):
    """The testbed could not start (missing root, OVS, controller timeout...)."""


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
