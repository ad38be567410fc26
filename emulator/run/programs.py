"""Real programs on the testbed's hosts: start, watch, end (`workload: {command: [...]}`).

One process per rank, inside its host's namespace, without a shell. Its stdout and stderr
go straight to files in the run folder (nothing is lost if dtnet is slow); dtnet reads
the stdout file as it grows for marker lines (experiment.program.parse_marker) and turns
them into events. Every process is ended by PID: its own, and every descendant it made.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

import psutil

from badinput import one_line
from badinput.paths import inside, open_out
from emulator.testbed.process import RUN_DIR_ENV, started_for_run
from experiment.program import PYTHON_NAMES, marker_event, parse_marker

STOP_WAIT_S = 3.0
LAST_LINE_CHARS = 200


@dataclass
class RankProcess:
    plan: dict
    world_size: int
    out_path: str
    err_path: str
    start_at: float              # wall clock
    popen: subprocess.Popen | None = None
    pid: int | None = None
    started: float | None = None
    ended: float | None = None
    exit_status: int | None = None
    stopped: bool = False        # dtnet ended it (failure elsewhere, timeout, interrupt)
    offset: int = 0              # how much of stdout has been read
    partial: bytes = b""
    seq: dict = field(default_factory=dict)  # group -> collectives seen, for ids
    markers: int = 0
    bad_markers: int = 0
    first_bad: str | None = None

    @property
    def key(self) -> str:
        return f"{self.plan['job']}/rank {self.plan['rank']}"


class Programs:
    """Every rank of every program job in one run. poll() from the run loop; stop() at the end."""

    def __init__(self, tb, jobs, out_dir: str, scale_bytes: float, t0: float, log=print):
        self.tb, self.out_dir, self.scale_bytes, self.log = tb, os.path.abspath(out_dir), scale_bytes, log
        self.ranks: list[RankProcess] = []
        self.failures: list[tuple[float, str]] = []
        self.first_failure: float | None = None
        for jp in jobs:
            for plan in jp.program:
                self.ranks.append(RankProcess(plan, len(jp.program), inside(self.out_dir, plan["stdout"]),
                                              inside(self.out_dir, plan["stderr"]), t0 + plan["start_offset_s"]))

    # -- starting ------------------------------------------------------------
    def _start(self, rp: RankProcess) -> None:
        plan, tb = rp.plan, self.tb
        host = plan["host"]
        cwd = inside(self.out_dir, plan["cwd"])
        os.makedirs(cwd, exist_ok=True)
        ifname = tb.intf(host, tb.fabric.attachment(host)[0])
        env = {**os.environ, **plan["env"],
               # gloo (and NCCL's socket transport) must use the host's fabric NIC.
               "GLOO_SOCKET_IFNAME": ifname, "NCCL_SOCKET_IFNAME": ifname, RUN_DIR_ENV: cwd}
        if plan.get("profile_dir"):
            env["DTNET_PROFILE_DIR"] = inside(self.out_dir, plan["profile_dir"])
            os.makedirs(env["DTNET_PROFILE_DIR"], exist_ok=True)
        argv = list(plan["argv"])
        if argv[0] in PYTHON_NAMES:
            argv[0] = sys.executable
        with open_out(self.out_dir, os.path.relpath(rp.out_path, self.out_dir), binary=True) as out, \
                open_out(self.out_dir, os.path.relpath(rp.err_path, self.out_dir), binary=True) as err:
            # mnexec -d makes the program a session (and process group) leader of its own.
            rp.popen = tb.host(host).popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=cwd, env=env)
        rp.pid, rp.started = rp.popen.pid, time.time()
        tb.state.add_pid(f"program/{plan['job']}/{plan['rank']}", rp.pid)

    # -- watching ------------------------------------------------------------
    def poll(self, now: float) -> list[dict]:
        """Start what is due, read new output, notice exits. Returns the new events."""
        events = []
        for rp in self.ranks:
            if rp.popen is None:
                if now >= rp.start_at and self.first_failure is None:
                    self._start(rp)
                continue
            if rp.ended is not None:
                continue
            rc = rp.popen.poll()
            events += self._read(rp, now)  # after poll(): an exited program's last lines are in the file
            if rc is not None:
                rp.ended, rp.exit_status = now, rc
                events.append(self._exit_event(rp))
                if rc != 0 and not rp.stopped:
                    self._fail(now, f"program {rp.key} on {rp.plan['host']} {_how(rc)}{self._last_err(rp)}")
        return events

    @staticmethod
    def _exit_event(rp: RankProcess) -> dict:
        return {"kind": "exit", "job": rp.plan["job"], "rank": rp.plan["rank"], "start": rp.started,
                "end": rp.ended, "exit_status": rp.exit_status, "ended_by": "dtnet" if rp.stopped else "itself"}

    def _read(self, rp: RankProcess, now: float) -> list[dict]:
        try:
            with open(rp.out_path, "rb") as f:
                f.seek(rp.offset)
                data = f.read()
        except OSError:
            return []
        if not data:
            return []
        rp.offset += len(data)
        *lines, rp.partial = (rp.partial + data).split(b"\n")
        out = []
        for raw in lines:
            line = raw.decode(errors="replace")
            try:
                m = parse_marker(line)
            except ValueError as e:
                rp.bad_markers += 1
                rp.first_bad = rp.first_bad or one_line(f"{e}: {line[:LAST_LINE_CHARS]}")
                continue
            if m is None:
                continue
            rp.markers += 1
            seq = 0
            if m["kind"] == "collective":
                g = m.get("group") or "world"
                seq = rp.seq.get(g, 0)
                rp.seq[g] = seq + 1
            out.append(marker_event(m, rp.plan["job"], rp.plan["rank"], rp.world_size, self.scale_bytes, now, seq))
        return out

    def _last_err(self, rp: RankProcess) -> str:
        try:
            with open(rp.err_path, "rb") as f:
                f.seek(max(0, os.path.getsize(rp.err_path) - 4096))
                lines = [ln for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
        except OSError:
            lines = []
        rel = os.path.relpath(rp.err_path, self.out_dir)
        if not lines:
            return f" (its stderr, {rel}, is empty)"
        return f"; last line of {rel}: {one_line(lines[-1].strip()[:LAST_LINE_CHARS])}"

    def _fail(self, now: float, msg: str) -> None:
        self.failures.append((now, msg))
        if self.first_failure is None:
            self.first_failure = now

    def verdict(self, now: float, grace_s: float = 1.0) -> str | None:
        """The failure to end the run with, once others had grace_s to show (the first one named first)."""
        if self.first_failure is None:
            return None
        if now - self.first_failure < grace_s and self.running():
            return None
        first, *rest = [m for _, m in sorted(self.failures)]
        still = [rp.key for rp in self.ranks if rp.ended is None]
        extra = f" (also: {rest[0]}" + (f"; and {len(rest) - 1} more" if len(rest) > 1 else "") + ")" if rest else ""
        return first + extra + (f"; ending {len(still)} ranks still running" if still else "")

    def running(self) -> bool:
        return any(rp.ended is None for rp in self.ranks)

    def unfinished(self) -> list[str]:
        return [rp.key for rp in self.ranks if rp.ended is None]

    # -- ending --------------------------------------------------------------
    def stop(self) -> list[dict]:
        """End every process still running, and anything it started, by PID: SIGTERM, a wait,
        then SIGKILL. Also what an exited rank left behind (a child it did not wait for).
        Returns the events of what it ended (their last markers, their exits)."""
        procs = []
        for rp in self.ranks:
            if rp.popen is None:
                continue
            try:
                leader = psutil.Process(rp.pid)
                kids = leader.children(recursive=True)
            except psutil.Error:
                continue
            if rp.ended is None:  # not reaped yet, so its PID is still its own
                rp.stopped = True
                procs.append(leader)
            procs += kids
        procs += self._orphans()
        # Only what carries this run's folder in its environment: a PID of a rank that exited may
        # already belong to someone else's process.
        procs = [p for p in {p.pid: p for p in procs}.values()
                 if p.pid in self._unreaped() or started_for_run(p.pid, self.out_dir)]
        for p in procs:
            try:
                p.send_signal(signal.SIGTERM)
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(procs, timeout=STOP_WAIT_S)
        for p in alive:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=STOP_WAIT_S)
        now = time.time()
        events = []
        for rp in self.ranks:
            if rp.popen is not None and rp.ended is None:
                try:
                    rp.exit_status = rp.popen.wait(STOP_WAIT_S)
                except subprocess.TimeoutExpired:
                    rp.exit_status = None
                events += self._read(rp, now)
                rp.ended = now
                events.append(self._exit_event(rp))
        return events

    def _unreaped(self) -> set[int]:
        return {rp.pid for rp in self.ranks if rp.popen is not None and rp.ended is None}

    def _orphans(self) -> list:
        """Processes in a program's session whose parent exited (reparented to init): the
        session id is the leader's PID, which mnexec -d made a session leader."""
        sids = {rp.pid for rp in self.ranks if rp.pid}
        out = []
        for p in psutil.process_iter(["pid"]):
            try:
                if p.pid not in sids and os.getsid(p.pid) in sids:
                    out.append(p)
            except (OSError, psutil.Error):
                continue
        return out

    # -- results -------------------------------------------------------------
    def hosts(self) -> set[str]:
        return {rp.plan["host"] for rp in self.ranks}

    def results(self) -> dict:
        """job -> the summary's `program` section (paths relative to the run folder)."""
        out: dict = {}
        for rp in self.ranks:
            job = out.setdefault(rp.plan["job"], {"command": rp.plan["argv"], "ranks": []})
            job["ranks"].append({
                "rank": rp.plan["rank"], "host": rp.plan["host"], "pid": rp.pid,
                "exit_status": rp.exit_status, "ended_by": None if rp.popen is None else
                ("dtnet" if rp.stopped else "itself"), "started": rp.started, "wall_s":
                    (rp.ended - rp.started) if rp.started and rp.ended else None,
                "stdout": os.path.relpath(rp.out_path, self.out_dir),
                "stderr": os.path.relpath(rp.err_path, self.out_dir),
                "markers": rp.markers, "bad_markers": rp.bad_markers, "first_bad_marker": rp.first_bad})
        for job in out.values():
            st = [r["exit_status"] for r in job["ranks"]]
            job["ok"] = all(s == 0 for s in st)
        return out


def _how(rc: int) -> str:
    if rc < 0:
        try:
            return f"was killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"was killed by signal {-rc}"
    return f"exited with status {rc}"
