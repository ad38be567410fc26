"""Every resource a run makes carries its tag, and the run writes down what it
made, so `dtnet clean` can remove exactly that run's leftovers after a crash.

The tag is two characters, prefixed to every Mininet node name (so every
veth and OVS bridge name). Tags are leased through lock files holding the
owner's PID; a lease whose owner is dead is free again.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import string
import subprocess
import time

from badinput.paths import inside, write_atomic
from emulator.testbed.process import same_process, start_time

LEASE_DIR = "/run/dtnet"
STATE_NAME = "state.json"
_ALPHABET = string.ascii_lowercase
_TAGS = [f"{a}{b}" for a in "xyzw" for b in _ALPHABET + string.digits]


class LeaseError(RuntimeError):
    """No free run tag: this run cannot have its names to itself; refuse at once."""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lease_tag(run_dir: str) -> str:
    """Take the first free tag; O_EXCL makes two racing runs pick different ones."""
    os.makedirs(LEASE_DIR, exist_ok=True)
    for tag in _TAGS:
        path = os.path.join(LEASE_DIR, f"tag-{tag}")
        for _ in range(2):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                try:
                    with open(path) as f:
                        owner = json.load(f)
                except (OSError, ValueError):
                    owner = {"pid": -1}
                if lease_live(owner):
                    break  # in use
                if owner.get("pid", -1) == -1 and time.time() - _mtime(path) < 5:
                    break  # being written right now
                # Stale lease: its run died. Its leftovers are `dtnet clean`'s job.
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
                continue
            with os.fdopen(fd, "w") as f:
                json.dump(_lease_record(run_dir), f)
            return tag
    raise LeaseError(f"no free run tag: {len(_TAGS)} dtnet runs hold one in {LEASE_DIR}; wait for one to end, "
                     "or `dtnet clean` the dead ones")


def _lease_record(run_dir: str) -> dict:
    return {"pid": os.getpid(), "start": start_time(os.getpid()), "run_dir": os.path.abspath(run_dir)}


def lease_live(lease: dict | None) -> bool:
    """The lease's owner runs: its PID is alive and, where the lease recorded it, started when
    it did (a dead run's PID reused by another process does not hold the tag)."""
    pid = (lease or {}).get("pid", -1)
    if not isinstance(pid, int) or pid <= 0 or not alive(pid):
        return False
    start = lease.get("start")
    return start is None or same_process(pid, start)


def take_dead_lease(tag: str, run_dir: str) -> str | None:
    """Hold tag's lease for cleaning the dead run in run_dir: None when it is ours now, else why
    not (a live run holds it, or it names another run's folder). No lease at all: the tag is
    free, and taking it keeps a new run off it while its leftovers go."""
    path = os.path.join(LEASE_DIR, f"tag-{tag}")
    try:
        with open(path) as f:
            lease = json.load(f)
    except FileNotFoundError:
        lease = None
    except (OSError, ValueError):
        return f"its lease {path} cannot be read"
    if lease is not None:
        if not isinstance(lease, dict):
            return f"its lease {path} is not a dtnet lease"
        if lease_live(lease):
            return f"tag {tag} is leased by a live run (pid {lease.get('pid')}, {lease.get('run_dir')})"
        if not isinstance(lease.get("run_dir"), str) or os.path.realpath(lease["run_dir"]) != os.path.realpath(run_dir):
            return f"tag {tag} is leased to another run's folder ({lease.get('run_dir')})"
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    os.makedirs(LEASE_DIR, exist_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return f"tag {tag} was leased by a new run meanwhile"
    with os.fdopen(fd, "w") as f:
        json.dump(_lease_record(run_dir), f)
    return None


def _mtime(path: str) -> float:
    try:
        return os.path.getmtime(path)
    except OSError:
        return 0.0


def release_tag(tag: str) -> None:
    path = os.path.join(LEASE_DIR, f"tag-{tag}")
    try:
        with open(path) as f:
            if json.load(f).get("pid") != os.getpid():
                return
        os.unlink(path)
    except (OSError, ValueError):
        pass


class RunState:
    """state.json in the run folder: the tag, PIDs and names this run owns."""

    def __init__(self, run_dir: str, tag: str):
        self.path = inside(run_dir, STATE_NAME)
        self.data = {"tag": tag, "owner_pid": os.getpid(), "owner_start": start_time(os.getpid()),
                     "pids": {}, "starts": {}, "bridges": [], "status": "starting"}
        self.save()

    def add_pid(self, role: str, pid: int) -> None:
        """A process this run started, with its start time: `dtnet clean` kills only that process."""
        self.data["pids"][role] = pid
        self.data["starts"][role] = start_time(pid)
        self.save()

    def set(self, **kv) -> None:
        if "host_pids" in kv:  # the hosts' shells: their start times too, for `dtnet clean`
            kv["host_starts"] = {h: start_time(p) for h, p in kv["host_pids"].items()}
        self.data.update(kv)
        self.save()

    def save(self) -> None:
        write_atomic(os.path.dirname(self.path) or ".", os.path.basename(self.path),
                     text=json.dumps(self.data, indent=1))


def is_tag(tag) -> bool:
    """One of the run tags lease_tag hands out. A tag comes back from state.json files, and
    everything named with it gets deleted: '' or 'x' would match other runs' bridges and links."""
    return tag in _TAGS


def leftovers(tag: str) -> dict:
    """What still exists on this machine under a run tag."""
    if not is_tag(tag):
        raise ValueError(f"not a dtnet run tag: {tag!r}")
    bridges = []
    try:
        out = subprocess.run(["ovs-vsctl", "--timeout=5", "list-br"], capture_output=True, text=True).stdout
        bridges = [b for b in out.split() if b.startswith(tag)]
    except FileNotFoundError:
        pass
    links = []
    try:
        out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            name = line.split(":", 2)[1].strip().split("@")[0]
            if name.startswith(tag):
                links.append(name)
    except FileNotFoundError:
        pass
    netns = []
    try:
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        netns = [ln.split()[0] for ln in out.splitlines() if ln.strip() and ln.split()[0].startswith(tag)]
    except FileNotFoundError:
        pass
    # The run's own switch daemons' sockets and database (emulator.testbed.switchd).
    daemon_dirs = sorted(glob.glob(os.path.join(LEASE_DIR, f"ovs-{tag}[0-9]")))
    return {"bridges": bridges, "links": links, "netns": netns, "daemon_dirs": daemon_dirs}


def remove_leftovers(tag: str) -> dict:
    """Delete what leftovers(tag) lists: bridges, then link namespaces (their
    veths go with them), then root-namespace links. Returns what was there."""
    left = leftovers(tag)
    # The daemons' processes are gone by now (stopped, or killed by PID by `dtnet clean`).
    for d in left["daemon_dirs"]:
        shutil.rmtree(d, ignore_errors=True)
    for br in left["bridges"]:
        subprocess.run(["ovs-vsctl", "--if-exists", "del-br", br], capture_output=True)
    for ns in left["netns"]:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    for link in leftovers(tag)["links"]:
        subprocess.run(["ip", "link", "del", link], capture_output=True)
    return left
