"""`dtnet clean`: remove exactly the leftovers of runs whose owner died.

A run's lease (/run/dtnet/tag-XX) names its folder; its state.json names
its tag and PIDs with their start times. A run whose owner is alive is left
alone; a process is killed only when its PID and start time both match, and
a tag whose lease a live run (or another folder) holds is left alone.
"""
from __future__ import annotations

import glob
import json
import os
import signal

from badinput.paths import inside
from emulator.testbed import runstate, switchd
from emulator.testbed.process import TestbedError, same_process, started_for_run, wait_for


def _load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    try:
        import psutil
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except Exception:  # noqa: BLE001: gone, or psutil missing: nothing to add
        return []


def _kill(pid: int, role: str, log) -> bool:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    log(f"dtnet clean: killed {role} (pid {pid})")
    return True


def _wait_gone(killed: list[tuple[int, str, float | None]], log, timeout_s: float = 10.0) -> None:
    """Wait until every killed process has ended: SIGKILL is delivered asynchronously, and a
    process in the kernel (a daemon tearing down its ports) ends only when it leaves it."""
    def alive():
        return [(pid, role) for pid, role, start in killed if same_process(pid, start) and not _zombie(pid)]
    try:
        wait_for(lambda: not alive(), timeout_s, "killed processes to end")
    except TestbedError:
        log("dtnet clean: still ending after SIGKILL: " + ", ".join(f"{r} (pid {p})" for p, r in alive()))


def _zombie(pid: int) -> bool:
    try:
        import psutil
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except Exception:  # noqa: BLE001: gone (or psutil missing: count it as alive until it is gone)
        return False


def clean_run(run_dir: str, log=print) -> int:
    """Remove one dead run's resources; returns how many were removed. state.json is only a
    claim: a process is killed only when its PID and start time are the ones recorded, and
    the tag's bridges and links go only while this run's dead lease is held for cleaning."""
    st = _load(inside(run_dir, runstate.STATE_NAME))
    if not isinstance(st, dict):
        return 0
    if not runstate.is_tag(st.get("tag")):
        log(f"dtnet clean: {run_dir}: {runstate.STATE_NAME}: expected a dtnet run tag, found {st.get('tag')!r}; "
            "left alone")
        return 0
    owner = st.get("owner_pid")
    # Runs start from `dtnet`, `python -m dtnet`, pytest or a bench: a live owner of any kind
    # means the run is live (its start time, where recorded, tells a reused PID apart).
    owner_live = (isinstance(owner, int) and owner != os.getpid() and runstate.alive(owner)
                  and ("owner_start" not in st or same_process(owner, st["owner_start"])))
    if owner_live and st.get("status") != "stopped":
        log(f"dtnet clean: {run_dir} is still running (pid {owner}); left alone")
        return 0
    tag = st["tag"]
    why = runstate.take_dead_lease(tag, run_dir)
    if why:
        log(f"dtnet clean: {run_dir}: {why}; left alone")
        return 0
    removed = 0
    killed = []
    try:
        pids = dict(st.get("pids") or {})
        starts = dict(st.get("starts") or {})
        pids.update({f"host/{h}": p for h, p in (st.get("host_pids") or {}).items()})
        starts.update({f"host/{h}": t for h, t in (st.get("host_starts") or {}).items()})
        for role, pid in pids.items():
            if not same_process(pid, starts.get(role)):
                continue  # ended, or its PID now belongs to another process
            cmd = _cmdline(pid)
            ours = ("emulator.agent" in cmd or "controller.run" in cmd or
                    (role.startswith("host/") and "mininet:" in cmd) or
                    (role.startswith("capture/") and cmd.startswith("tcpdump")) or
                    (role.split("/")[0] in switchd.ROLES and switchd.is_daemon_cmdline(cmd, tag)))
            if role.startswith("program/"):
                # A real program may be any binary: it is ours when it runs in this run's folder.
                ours = started_for_run(pid, run_dir)
                for child in _children(pid):
                    if started_for_run(child, run_dir):
                        _kill(child, f"{role} child", log)
            if cmd and ours and _kill(pid, role, log):
                removed += 1
                killed.append((pid, role, starts.get(role)))
        _wait_gone(killed, log)
        left = runstate.remove_leftovers(tag)
        n = sum(len(v) for v in left.values())
        removed += n
        if n:
            log(f"dtnet clean: removed {len(left['bridges'])} bridges, {len(left['netns'])} namespaces and "
                f"{len(left['links'])} links of run {tag}")
        st["status"] = "cleaned"
        with open(inside(run_dir, runstate.STATE_NAME), "w") as f:
            json.dump(st, f, indent=1)
    finally:
        runstate.release_tag(tag)  # the lease taken for cleaning (ours: released)
    return removed


def clean(run_dirs: list[str], log=print) -> int:
    if os.geteuid() != 0:
        log("dtnet clean: needs root")
        return 2
    if not run_dirs:
        run_dirs = []
        for lease in glob.glob(os.path.join(runstate.LEASE_DIR, "tag-*")):
            data = _load(lease)
            if isinstance(data, dict) and isinstance(data.get("run_dir"), str) and not runstate.lease_live(data):
                run_dirs.append(data["run_dir"])
    total = sum(clean_run(d, log) for d in run_dirs)
    log(f"dtnet clean: {total} leftover resources removed from {len(run_dirs)} dead run(s)")
    return 0
