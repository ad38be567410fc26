"""Is the emulation faithful? Sampled once a second while the agents run.

Checks, each with its threshold in the summary:
- cpu: idle CPU >= 25% in every sampled second (a replay too short to hold a
  whole second: over the whole replay). Mininet-HiFi asked 35%; on
  this 2-core machine kind we measured (bench/bench_fidelity_scale.py, ring
  all-reduce on fat-tree k=4, time dilation fixed, link rate swept) that
  results match the slowest, most faithful rate within 1% down to 32% idle,
  within 3% at 25%, and fall 12% behind at 17-22%. 25% keeps what is within
  a few percent and rejects what is not; the per-second CPU pressure (PSI)
  is recorded beside it.
- link_cap: no link carried more than 105% of its configured rate in any
  second (shaping held).
- link_saturation: in quarter seconds where the fabric was busy (its busiest
  link >= 50% of its rate), the busiest link reached a median of >= 85% of
  its rate (the switches kept up). The busiest link, not every link: under
  contention the bottleneck is saturated while links feeding it legitimately
  run at a share of theirs.
- lateness: agents started ops no later than 20 ms (emulated) after their
  dependencies were met, at the 99th percentile.
"""
from __future__ import annotations

import os
import threading
import time

import psutil

CPU_IDLE_MIN_PCT = 25.0
LINK_CAP_MAX = 1.05
BUSY_UTIL = 0.5
SATURATION_MIN = 0.85
LATENESS_P99_MAX_S = 0.020
# Link counters are read this often (here and for links.csv): periodic jobs switch their links
# on and off within a second, and the heatmap must show each collective.
LINK_SAMPLE_S = 0.25


def parse_proc_net_dev(text: str) -> dict[str, tuple[int, int]]:
    """/proc/net/dev text -> {device: (tx_bytes, rx_bytes)}.

    Each device line is `name: rx_bytes rx_packets ... (8 receive fields)
    tx_bytes ...`; the colon may touch the first number."""
    out = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        fields = rest.split()
        if not sep or len(fields) < 9:
            continue  # the two header lines
        try:
            out[name.strip()] = (int(fields[8]), int(fields[0]))
        except ValueError:
            continue
    return out


def read_counters(devs: list[str], paths: tuple = ("/proc/net/dev",)) -> dict[str, tuple[int, int]]:
    """(tx_bytes, rx_bytes) of these devices; a missing one is left out. paths: /proc/net/dev
    of each namespace holding them (/proc/PID/net/dev is that of PID's namespace).

    One read of /proc/net/dev gives every device: sysfs takes two opens per
    device, and on a fat-tree that is a hundred files four times a second."""
    every = {}
    for path in paths:
        try:
            with open(path) as f:
                every.update(parse_proc_net_dev(f.read()))
        except OSError:
            continue
    return {d: every[d] for d in devs if d in every}


def read_cpu_pressure_us() -> int | None:
    """Total microseconds some runnable task waited for a CPU (PSI), or None."""
    try:
        with open("/proc/pressure/cpu") as f:
            for line in f:
                if line.startswith("some"):
                    return int(line.rsplit("total=", 1)[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


class Monitor:
    """Samples link byte counters every `interval_s` and CPU once a second, in a thread.

    `links` maps a switch-side device to (link name, rate_mbps); both
    directions of the link are read from that one device's tx and rx. Links
    are sampled finely because periodic jobs switch theirs on and off: a
    one-second sample of a link busy half the second reads 0.5 of its rate
    though it ran at full rate while it ran.
    """

    def __init__(self, links: dict[str, tuple[str, float]], interval_s: float = LINK_SAMPLE_S,
                 paths: tuple = ("/proc/net/dev",)):
        self.links = links
        self.paths = tuple(paths)  # /proc/net/dev of each namespace holding the devices
        self.interval_s = interval_s
        self.per_cpu_sample = max(1, round(1.0 / interval_s))
        self.cpu_idle: list[tuple[float, float]] = []
        self.cpu_pressure: list[tuple[float, float]] = []  # (t, % of the second some task waited for CPU)
        # (t, idle s, all s) at every link sample: a run shorter than two seconds has no whole second
        # inside its replay, and is judged on its idle share over the whole replay instead.
        self.cpu_totals: list[tuple[float, float, float]] = []
        self.link_samples: list[tuple[float, dict]] = []  # (t, {link: (util_tx, util_rx)}), each interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self):
        psutil.cpu_times_percent(interval=None)  # prime: the next call measures from here
        self._total()
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join(5)

    def _total(self):
        c = psutil.cpu_times()
        self.cpu_totals.append((time.time(), c.idle, sum(c)))

    def _loop(self):
        prev = read_counters(list(self.links), self.paths)
        prev_t = cpu_t = time.monotonic()
        prev_psi = read_cpu_pressure_us()
        tick = 0
        while not self._stop.wait(self.interval_s):
            now = time.monotonic()
            cur = read_counters(list(self.links), self.paths)
            dt = now - prev_t
            utils = {}
            for dev, (name, mbps) in self.links.items():
                if dev in cur and dev in prev and dt > 0:
                    cap = mbps * 1e6 / 8 * dt
                    utils[name] = ((cur[dev][0] - prev[dev][0]) / cap, (cur[dev][1] - prev[dev][1]) / cap)
            self.link_samples.append((time.time(), utils))
            self._total()
            prev, prev_t = cur, now
            tick += 1
            if tick % self.per_cpu_sample == 0:
                self.cpu_idle.append((time.time(), psutil.cpu_times_percent(interval=None).idle))
                psi = read_cpu_pressure_us()
                if psi is not None and prev_psi is not None and now > cpu_t:
                    self.cpu_pressure.append((time.time(), 100.0 * (psi - prev_psi) / 1e6 / (now - cpu_t)))
                prev_psi, cpu_t = psi, now


def per_second(samples: list[tuple[float, dict]], n: int) -> list[tuple[float, dict]]:
    """Consecutive groups of n link samples averaged into one (a second at n = 1 / interval)."""
    out = []
    for i in range(0, len(samples) - n + 1, n):
        group = samples[i:i + n]
        names = set().union(*(u for _, u in group))
        out.append((group[-1][0], {k: tuple(sum(u.get(k, (0.0, 0.0))[d] for _, u in group) / n for d in (0, 1))
                                   for k in names}))
    return out


def replay_idle_pct(totals: list[tuple[float, float, float]], t_start: float, t_end: float) -> float | None:
    """The machine's idle share (%) between the first and last CPU reading inside the replay; None
    without two readings there."""
    inside = [x for x in totals if t_start <= x[0] <= t_end]
    if len(inside) < 2 or inside[-1][2] <= inside[0][2]:
        return None
    return 100.0 * (inside[-1][1] - inside[0][1]) / (inside[-1][2] - inside[0][2])


def _p99(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * 0.99))] if xs else 0.0


def start_lateness(ops: list[dict]) -> tuple[list[float], list[float]]:
    """(lateness of the ops ready at their job's start, of the others). Every rank's first ops are
    ready at the same instant, the job's go, so on few cores the ranks' wake-ups queue there."""
    go: dict = {}
    for e in ops:
        go[e.get("job")] = min(go.get(e.get("job"), e["ready"]), e["ready"])
    start, later = [], []
    for e in ops:
        (start if e["ready"] - go[e.get("job")] <= 1e-6 else later).append(max(0.0, e["start"] - e["ready"]))
    return start, later


def link_cap_max(rate_mbps: float | None, frame_bytes: int | None) -> float:
    """The most a link may carry in a whole second, as a share of its rate: 5% over, or the two
    frames HTB may pass ahead of the rate where they are more (below 2.9 Mb/s at 9000 bytes)."""
    if not rate_mbps or not frame_bytes:
        return LINK_CAP_MAX
    return max(LINK_CAP_MAX, 1.0 + 2 * frame_bytes * 8 / (rate_mbps * 1e6))


def evaluate(mon: Monitor | None, events: list[dict], t_start: float, t_end: float,
             frame_bytes: int | None = None) -> dict:
    """The fidelity checks of a replay between t_start and t_end; frame_bytes: the links' largest
    frame (the MTU), which sets the link cap of slow links."""
    checks = []
    # Only the seconds fully inside the replay count: set-up and teardown are not the experiment.
    cpu = [v for t, v in (mon.cpu_idle if mon else []) if t_start + 1.0 <= t <= t_end]
    below = [v for v in cpu if v < CPU_IDLE_MIN_PCT]
    detail = f"{len(below)} of {len(cpu)} seconds below {CPU_IDLE_MIN_PCT:.0f}% idle (min {min(cpu, default=100):.0f}%)"
    whole = None if cpu else replay_idle_pct(getattr(mon, "cpu_totals", []) if mon else [], t_start, t_end)
    if whole is not None:  # a short run: no whole second inside it, so its replay as one sample
        cpu, below = [whole], ([whole] if whole < CPU_IDLE_MIN_PCT else [])
        detail = f"{whole:.0f}% idle over the whole replay (shorter than 2 s; needs {CPU_IDLE_MIN_PCT:.0f}%)"
    checks.append({"name": "cpu", "ok": not below, "detail": detail,
                   "threshold_idle_pct": CPU_IDLE_MIN_PCT, "seconds": len(cpu) if whole is None else 0,
                   "seconds_below": len(below) if whole is None else 0,
                   "idle_min_pct": min(cpu, default=None), "idle_mean_pct": (sum(cpu) / len(cpu)) if cpu else None})
    psi = [v for t, v in (getattr(mon, "cpu_pressure", []) if mon else []) if t_start + 1.0 <= t <= t_end]
    checks[-1]["pressure_mean_pct"] = (sum(psi) / len(psi)) if psi else None
    checks[-1]["pressure_max_pct"] = max(psi, default=None)
    fine = mon.link_samples if mon else []
    # The cap over whole seconds: HTB may pass a burst (2 frames) ahead within a second, which on a
    # link slow enough is more than the 5% margin (link_cap_max).
    rate_of = {name: mbps for name, mbps in getattr(mon, "links", {}).values()} if mon else {}
    peak, cap = 0.0, LINK_CAP_MAX
    for t, u in per_second(fine, getattr(mon, "per_cpu_sample", 1)):
        if t_start + 1.0 <= t <= t_end:
            for name, (tx, rx) in u.items():
                c = link_cap_max(rate_of.get(name), frame_bytes)
                if max(tx, rx) - c > peak - cap:  # the link furthest over (or nearest under) its cap
                    peak, cap = max(tx, rx), c
    checks.append({"name": "link_cap", "ok": peak <= cap,
                   "detail": f"peak link utilization {peak:.3f} (max {cap:.3f})",
                   "threshold": cap, "peak_utilization": peak})
    peaks = [max((max(tx, rx) for tx, rx in u.values()), default=0.0)
             for t, u in fine if t_start + 1.0 <= t <= t_end]
    busy = sorted(u for u in peaks if u >= BUSY_UTIL)
    med = busy[len(busy) // 2] if busy else None
    checks.append({"name": "link_saturation", "ok": med is None or med >= SATURATION_MIN,
                   "detail": (f"the busiest link ran at a median {med:.2f} of its rate while busy "
                              f"(min {SATURATION_MIN})" if med is not None else "no link was busy"),
                   "threshold": SATURATION_MIN, "busy_windows": len(busy), "busy_utilization_p50": med})
    ops = [e for e in events
           if e.get("ready") is not None and e.get("kind") in ("compute", "collective", "send", "recv")]
    start, later = start_lateness(ops)
    late = sorted(start + later)
    p99 = _p99(late)
    detail = f"p99 agent lateness {p99 * 1e3:.1f} ms emulated (max {LATENESS_P99_MAX_S * 1e3:.0f})"
    if p99 > LATENESS_P99_MAX_S and start:
        # Say whether it is the ranks waking together at the go (docs/fidelity.md) or the replay.
        detail += (f"; ops ready at their job's start up to {max(start) * 1e3:.1f} ms, "
                   f"the others p99 {_p99(later) * 1e3:.1f} ms")
    checks.append({"name": "lateness", "ok": p99 <= LATENESS_P99_MAX_S, "detail": detail,
                   "threshold_s": LATENESS_P99_MAX_S, "p99_s": p99, "max_s": late[-1] if late else 0.0,
                   "start_max_s": max(start, default=None), "after_start_p99_s": _p99(later) if later else None})
    return {"ok": all(c["ok"] for c in checks), "checks": checks,
            "cpus": os.cpu_count(), "note": "latency terms (propagation, switching) do not scale with "
                                            "the scale factors; figures are bandwidth-dominated"}


def delivered_bytes(mon: Monitor | None, links: dict[str, float], t0: float, t1: float) -> int:
    """Bytes the links carried in their tx direction between t0 and t1, from the monitor's
    samples: links maps a monitored link's name to its rate (Mb/s). For a host link read at the
    switch port, tx is what the host was delivered (frames, headers included)."""
    if mon is None:
        return 0
    total = 0.0
    for t, utils in mon.link_samples:
        if t0 < t < t1 + mon.interval_s:  # a sample at t covers (t - interval, t]
            for name, mbps in links.items():
                if name in utils:
                    total += utils[name][0] * mbps * 1e6 / 8 * mon.interval_s
    return round(total)


def min_judged_mbps(mtu_bytes: int) -> float:
    """The slowest link rate whose frames these checks can judge: one frame must serialize within
    the lateness bound (3.6 Mb/s at 9000-byte frames; the link cap allows for slow links' frames,
    link_cap_max)."""
    return mtu_bytes * 8 / LATENESS_P99_MAX_S / 1e6


def send_buffer_check(buf_bytes: int, need_bytes: int) -> dict:
    """The userspace switch sends through one socket; with a small buffer it
    drops packets silently once a dozen frames queue anywhere (bootstrap.sh)."""
    return {"name": "switch_send_buffer", "ok": buf_bytes >= need_bytes,
            "detail": f"the userspace switch's send buffer is {buf_bytes} bytes (needs {need_bytes}; "
                      "run `make setup` while no bridges exist, which restarts Open vSwitch)",
            "threshold_bytes": need_bytes, "bytes": buf_bytes}


def add_check(fid: dict, check: dict) -> None:
    fid["checks"].append(check)
    fid["ok"] = fid["ok"] and check["ok"]
