"""Daemons started by a run hold none of the caller's descriptors: after `flock LOCK dtnet run`,
OVS's daemons (started through closed_fds_argv) and whatever a testbed starts after
close_inherited() leave the lock free once the run ends."""
from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}

# The caller: takes the lock as flock(1) does (an inheritable descriptor), starts a child that
# lives on, prints the child's PID and whether the child holds the lock file, and exits.
CALLER = r"""
import fcntl, os, subprocess, sys, time
from emulator.testbed import process
lock, how = sys.argv[1], sys.argv[2]
fd = os.open(lock, os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
os.set_inheritable(fd, True)
child = [sys.executable, "-c", "import time; time.sleep(60)"]
if how == "wrapper":
    child = process.closed_fds_argv(child)
elif how == "marked":
    process.close_inherited()
p = subprocess.Popen(child, close_fds=False, start_new_session=True,  # as Mininet's shells are started
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
deadline = time.monotonic() + 20
while time.monotonic() < deadline:  # until the child has exec'd its final program
    try:
        if "time.sleep" in open(f"/proc/{p.pid}/cmdline").read() and "closerange" not in open(f"/proc/{p.pid}/cmdline").read():
            break
    except OSError:
        pass
    time.sleep(0.02)
held = any(os.path.realpath(f"/proc/{p.pid}/fd/{n}") == os.path.realpath(lock) for n in os.listdir(f"/proc/{p.pid}/fd"))
print(p.pid, held, flush=True)
"""


def run_caller(tmp_path, how):
    lock = tmp_path / "lock"
    lock.write_text("")
    r = subprocess.run([sys.executable, "-c", CALLER, str(lock), how], capture_output=True, text=True, env=ENV,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    pid, held = r.stdout.split()
    return int(pid), held == "True", lock


def lock_free(lock) -> bool:
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_a_child_started_through_the_wrapper_or_after_close_inherited_leaves_the_lock(tmp_path):
    for how in ("wrapper", "marked"):
        pid, held, lock = run_caller(tmp_path, how)
        try:
            assert not held, how
            assert lock_free(lock), how  # the caller is gone and its daemon does not keep the lock
        finally:
            os.kill(pid, signal.SIGKILL)


def test_without_them_the_child_keeps_the_callers_lock(tmp_path):
    # What the test above guards against: a plain start with inherited descriptors.
    pid, held, lock = run_caller(tmp_path, "plain")
    try:
        assert held and not lock_free(lock)
    finally:
        os.kill(pid, signal.SIGKILL)
