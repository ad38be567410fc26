"""Where the CPU goes: dtnet's agents against plain iperf3 on the same fabric.

Runs one workload point of bench_capacity (dtnet ring or stride, or iperf3 on
the stride pairs) while a thread samples every process's CPU times and
/proc/stat, then prints the CPU each part took during the steady replay, in
% of one core (this machine has os.cpu_count() cores):

- ovs-vswitchd, ryu (the controller), agents, iperf3, mininet shells (the
  hosts' bash), dtnet (this process: runner, fidelity monitor, links.csv),
  spawned (short-lived children of these reaped meanwhile, from the
  parents' children times: ovs-ofctl, tc, ...), kernel threads (ksoftirqd,
  kworker), other (anything else on the machine: other people's work shows
  here, so read a column only when it is small);
- the machine's user / system / softirq / idle from /proc/stat. This kernel
  has no IRQ time accounting, so softirq ticks are also charged to the task
  they interrupted: the per-process figures include the packet work done on
  their behalf.

    sudo flock /tmp/dtnet-mininet.lock .venv/bin/python bench/bench_cpu.py \
        --fabric fat-tree --rate 20 [--workloads ring,stride,iperf3] [--length 4]

--length multiplies bench_capacity's workloads (ring iterations, stride
bytes) and iperf3's 4 s, so that the steady replay spans enough samples.

--experiment FILE [--set KEY=VALUE ...] runs an experiment file instead (its
own fabric, scale and testbed; --fabric, --rate, --switchd and --workloads
are then not used):

    sudo flock -o /tmp/dtnet-mininet.lock .venv/bin/python bench/bench_cpu.py \
        --experiment experiments/ring-leaf-spine-64.yaml --set testbed.switch_malloc=libc
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from functools import partial

import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.bench_capacity import SWITCHD, WORKLOADS, experiment, stride_pairs, switchd_settings  # noqa: E402
from emulator.run.runner import run_experiment  # noqa: E402
from emulator.testbed.iperf import iperf3_flows  # noqa: E402
from emulator.testbed.lifecycle import Testbed  # noqa: E402
from experiment import model  # noqa: E402

CATEGORIES = ("ovs-vswitchd", "ryu", "agents", "iperf3", "mininet shells", "dtnet", "spawned",
              "kernel threads", "other")
STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def category(pid: int, name: str, cmdline: list[str]) -> str:
    """Which part of the emulation a process is."""
    cmd = " ".join(cmdline)
    if pid == os.getpid():
        return "dtnet"
    if name == "ovs-vswitchd":
        return "ovs-vswitchd"
    if "emulator.agent" in cmd:
        return "agents"
    if "controller.run" in cmd or "ryu" in cmd:
        return "ryu"
    if name == "iperf3":
        return "iperf3"
    if name in ("bash", "mnexec") and ("mininet:" in cmd or "--norc" in cmd):
        return "mininet shells"
    if not cmdline:  # kernel threads have no command line
        return "kernel threads"
    return "other"


def read_stat() -> dict[str, float]:
    """The machine's CPU seconds by kind, from /proc/stat's first line."""
    with open("/proc/stat") as f:
        parts = f.readline().split()[1:1 + len(STAT_FIELDS)]
    hz = os.sysconf("SC_CLK_TCK")
    return {k: int(v) / hz for k, v in zip(STAT_FIELDS, parts)}


class Sampler:
    """Every interval_s: per process (pid, create time) -> (category, own CPU
    seconds, reaped children's CPU seconds), and /proc/stat."""

    def __init__(self, interval_s: float = 0.5):
        self.interval_s = interval_s
        self.samples: list[tuple[float, dict, dict]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._cat: dict = {}

    def snapshot(self) -> tuple[float, dict, dict]:
        procs = {}
        for p in psutil.process_iter(["pid", "name", "create_time"]):
            try:
                key = (p.info["pid"], p.info["create_time"])
                if key not in self._cat:
                    self._cat[key] = category(p.pid, p.info["name"] or "", p.cmdline())
                t = p.cpu_times()
                procs[key] = (self._cat[key], t.user + t.system, t.children_user + t.children_system)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return time.time(), procs, read_stat()

    def _loop(self):
        while not self._stop.is_set():
            self.samples.append(self.snapshot())
            self._stop.wait(self.interval_s)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join(10)

    def breakdown(self, t0: float, t1: float) -> dict:
        """% of one core per category, and /proc/stat kinds, between the first
        and last samples inside [t0, t1]."""
        inside = [s for s in self.samples if t0 <= s[0] <= t1]
        if len(inside) < 2:
            raise ValueError("fewer than two samples inside the window")
        (ta, a, sa), (tb, b, sb) = inside[0], inside[-1]
        dt = tb - ta
        out = {c: 0.0 for c in CATEGORIES}
        for key, (cat, own, children) in b.items():
            own0, ch0 = (a[key][1], a[key][2]) if key in a else (0.0, 0.0)
            out[cat] += own - own0
            # Children reaped meanwhile (agents are reaped only after the
            # window); other work's children stay other work.
            out["other" if cat == "other" else "spawned"] += children - ch0
        stat = {k: sb[k] - sa[k] for k in STAT_FIELDS}
        return {"seconds": dt, "pct_of_core": {c: 100 * v / dt for c, v in out.items()},
                "stat_pct_of_core": {k: 100 * v / dt for k, v in stat.items()}}


def replay_window(out_dir: str) -> tuple[float, float]:
    """Wall start and end of the agents' replay, from events.jsonl."""
    starts, ends = [], []
    with open(os.path.join(out_dir, "events.jsonl")) as f:
        for line in f:
            e = json.loads(line)
            if e.get("start") is not None and e.get("end") is not None:
                starts.append(e["start"])
                ends.append(e["end"])
    return min(starts), max(ends)


def run_point(exp, out: str) -> tuple[float, bool, tuple[float, float]]:
    """(normalized throughput, fidelity ok, steady window) of one dtnet run of exp."""
    s = run_experiment(exp, out, log=lambda *_: None)
    t0, t1 = replay_window(out)
    return s["traffic"]["normalized_throughput"], s["fidelity"]["ok"], (t0 + 1.0, t1 - 0.5)


def measure(name: str, point) -> dict:
    """The CPU split while point() runs; point returns (normalized, fidelity ok, window)."""
    sampler = Sampler().start()
    try:
        norm, ok, window = point()
    finally:
        sampler.stop()
    return {"workload": name, "normalized": norm, "fidelity_ok": ok, **sampler.breakdown(*window)}


def iperf3_point(fabric: str, rate: float, datapath: str, tmp: str, iperf_s: float, switchd: str):
    """Plain iperf3 on the stride pairs of bench_capacity's stride workload."""
    exp = experiment(fabric, "stride", rate, datapath, switchd)
    hosts = exp.fabric().hosts
    pairs = stride_pairs(exp)
    with Testbed(exp.fabric(), os.path.join(tmp, "iperf3"), routing="congestion-aware",
                 scale_link=exp.scale.link, datapath=datapath, log=lambda *_: None,
                 **switchd_settings(switchd)) as tb:
        t0 = time.time()
        got = sum(iperf3_flows(tb, pairs, iperf_s))
        t1 = time.time()
    return got / (len(hosts) * exp.emulated_mbps(400)), None, (t0 + 1.5, t1 - 1.0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fabric", default="fat-tree", choices=("fat-tree", "rail-optimized"))
    ap.add_argument("--rate", type=float, default=20.0, help="emulated link rate in Mb/s")
    ap.add_argument("--datapath", default="userspace")
    ap.add_argument("--switchd", default="auto",
                    help="the switch daemons: " + ", ".join(SWITCHD) + ", the run's own with -libc or -tcmalloc "
                         "(bench_capacity.py --switchd)")
    ap.add_argument("--workloads", default="ring,stride,iperf3")
    ap.add_argument("--length", type=int, default=4, help="workload length factor (see above)")
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--experiment", metavar="FILE", help="run this experiment file instead of a capacity workload")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="overrides of --experiment's file")
    args = ap.parse_args(argv)
    try:
        switchd_settings(args.switchd)
    except ValueError as e:
        ap.error(f"--switchd: {e}")
    WORKLOADS["ring"][1]["iterations"] *= args.length
    WORKLOADS["stride"][1]["size_bytes"] *= args.length
    results = []
    with tempfile.TemporaryDirectory(prefix="dtnet-cpu-") as tmp:
        if args.experiment:
            from badinput import InputError
            try:
                exp = model.load(args.experiment, args.set)
            except InputError as e:
                print(f"bench_cpu.py: {e}", file=sys.stderr)
                return 2
            results.append(measure(exp.name, partial(run_point, exp, os.path.join(tmp, "run"))))
            what = f"{args.experiment} {' '.join(args.set)}"
        else:
            for wl in args.workloads.split(","):
                if wl == "iperf3":
                    point = partial(iperf3_point, args.fabric, args.rate, args.datapath, tmp, 4.0 * args.length,
                                    args.switchd)
                else:
                    point = partial(run_point, experiment(args.fabric, wl, args.rate, args.datapath, args.switchd),
                                    os.path.join(tmp, wl))
                results.append(measure(wl, point))
            what = f"{args.fabric}, {args.rate:g} Mb/s links, {args.datapath}/{args.switchd}, length x{args.length}"
    print(f"{what}; load average {os.getloadavg()[0]:.2f}; "
          f"% of one core ({os.cpu_count()} cores = {100 * os.cpu_count()}%)")
    names = [r["workload"] for r in results]
    print(f"{'':<16}" + "".join(f"{n:>10}" for n in names))
    print(f"{'normalized':<16}" + "".join(f"{r['normalized']:>10.3f}" for r in results))
    print(f"{'fidelity ok':<16}" + "".join(f"{str(r['fidelity_ok']):>10}" for r in results))
    print(f"{'window s':<16}" + "".join(f"{r['seconds']:>10.1f}" for r in results))
    for c in CATEGORIES:
        print(f"{c:<16}" + "".join(f"{r['pct_of_core'][c]:>10.1f}" for r in results))
    for k in ("user", "system", "softirq", "idle"):
        print(f"{'/proc/stat ' + k:<16}" + "".join(f"{r['stat_pct_of_core'][k]:>10.1f}" for r in results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
