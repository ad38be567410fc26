"""Host-network co-scheduling: jobs announce their next communication phase,
the controller answers with paths, a start offset and a priority.

- Placement: a job's flows go on the equal-cost paths that share the fewest
  links with other jobs' announced flows (then the least measured load).
- Start offset, CASSINI-style (NSDI'24): when periodic jobs must share a link,
  delay the announcing job so that its communication phase interleaves with
  the phases predicted for the others (each repeats every period from its
  last announced start).
- Priority, Crux-style (SIGCOMM'24): GPU intensity I = compute work /
  communication time on the job's bottleneck link; higher I, higher priority
  (0 is the highest).
- Pacing realizes the priority. The userspace OVS datapath ignores
  set_queue, and meters enforce by dropping (bench/bench_priority.py), so a
  job whose phase is predicted to overlap the phase of a job of higher
  intensity on a shared link is told to pace each sending host to
  ``low_share`` of its NIC rate while the two overlap (``pace_share``, ``pace_from_s`` and
  ``pace_until_s`` from its phase start, in the answer).

Announcement, version 1 (JSON; units in names; unknown keys are an error)::

  {"version": 1, "job": "j0", "collective": "all_reduce",
   "flows": [{"src": "h0", "dst": "h1", "size_bytes": 1048576}, ...],
   "period_s": 0.8, "compute_s": 0.5, "overlap_s": 0.0, "gpus": 8}

``period_s`` is the expected iteration time and ``compute_s`` the compute per
iteration; ``overlap_s`` is compute the phase can hide. Bytes and seconds are
those of the network the controller sees and of its clock: in dtnet, the
emulated ones (emulated bytes, wall-clock seconds; link rates x link_scale).
The answer (``Answer``, version 1, the same for every policy) gives
``start_offset_s`` and the pace window in the same seconds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from badinput import InputError, one_line, short_repr
from badinput.limits import COMPUTE_S, PERIOD_S
from badinput.paths import check_name
from badinput.schema import to_dict
from controller.paths import path_links
from topologies.fabric import Fabric

VERSION = 1
MAX_BODY_BYTES = 1 << 20
MAX_FLOWS = 20000
MAX_INT64 = (1 << 63) - 1  # sizes and seconds beyond it overflow the float rate arithmetic
MAX_GPUS = 1 << 20
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
               "send_recv", "other")
_KEYS = {"version": int, "job": str, "collective": str, "flows": list, "period_s": (int, float),
         "compute_s": (int, float), "overlap_s": (int, float), "gpus": int}
_REQUIRED = ("version", "job", "flows", "period_s")
_FLOW_KEYS = {"src": str, "dst": str, "size_bytes": int}


def _shown(v) -> str:
    """v for an answer: cut before it is built (a number of 5000 digits cannot even be printed)."""
    return one_line(short_repr(v, 120))[:120]


class AnnounceError(ValueError):
    """A bad announcement; str() is one line naming the key."""


@dataclass(frozen=True)
class Announcement:
    job: str
    collective: str
    flows: tuple[tuple[str, str, int], ...]  # (src host, dst host, size_bytes)
    period_s: float
    compute_s: float = 0.0
    overlap_s: float = 0.0
    gpus: int = 1


def parse_announcement(body: bytes | str | dict, fabric: Fabric) -> Announcement:
    """Check an announcement against the schema and the fabric; AnnounceError on any fault."""
    import json
    if isinstance(body, (bytes, str)):
        if len(body) > MAX_BODY_BYTES:
            raise AnnounceError(f"body: expected at most {MAX_BODY_BYTES} bytes, found {len(body)}")
        try:
            body = json.loads(body)
        except ValueError as e:
            raise AnnounceError(f"body: expected JSON, found a parse error ({e})") from None
        except RecursionError:
            raise AnnounceError("body: expected JSON, found arrays or objects nested too deep to read") from None
    if not isinstance(body, dict):
        raise AnnounceError(f"body: expected a JSON object, found {type(body).__name__}")
    for k, v in body.items():
        if k not in _KEYS:
            shown = k[:60] if k[:60].isprintable() else repr(k[:60])  # the answer stays one line
            raise AnnounceError(f"{shown}: unknown key (expected {', '.join(_KEYS)})")
        if isinstance(v, bool) or not isinstance(v, _KEYS[k]):
            raise AnnounceError(f"{k}: expected {_typename(_KEYS[k])}, found {_shown(v)}")
    for k in _REQUIRED:
        if k not in body:
            raise AnnounceError(f"{k}: required")
    if body["version"] != VERSION:
        raise AnnounceError(f"version: expected {VERSION}, found {_shown(body['version'])}")
    coll = body.get("collective", "other")
    if coll not in COLLECTIVES:
        raise AnnounceError(f"collective: expected one of {', '.join(COLLECTIVES)}, found {_shown(coll)}")
    for k in ("period_s", "compute_s", "overlap_s"):
        v = body.get(k, 0.0)
        # A period near 0 would have the policy try offsets without end (badinput.limits).
        rng = PERIOD_S if k == "period_s" else COMPUTE_S
        if not rng.ok(v):
            raise AnnounceError(f"{k}: expected {rng.expected}, found {_shown(v)}")
    if not 1 <= body.get("gpus", 1) <= MAX_GPUS:
        raise AnnounceError(f"gpus: expected an integer in 1..{MAX_GPUS}, found {_shown(body['gpus'])}")
    try:  # the name may reach logs and file names: the experiment's rule for job names
        check_name(body["job"], "job")
    except InputError as e:
        raise AnnounceError(str(e)) from None
    flows = body["flows"]
    if not 1 <= len(flows) <= MAX_FLOWS:
        raise AnnounceError(f"flows: expected 1..{MAX_FLOWS} flows, found {len(flows)}")
    hosts = set(fabric.hosts)
    out = []
    for i, f in enumerate(flows):
        if not isinstance(f, dict) or set(f) != set(_FLOW_KEYS):
            raise AnnounceError(f"flows[{i}]: expected an object with keys src, dst, size_bytes")
        for k, t in _FLOW_KEYS.items():
            if isinstance(f[k], bool) or not isinstance(f[k], t):
                raise AnnounceError(f"flows[{i}].{k}: expected {_typename(t)}, found {_shown(f[k])}")
        for k in ("src", "dst"):
            if f[k] not in hosts:
                raise AnnounceError(f"flows[{i}].{k}: expected a host of the fabric, found {_shown(f[k])}")
        if not 0 <= f["size_bytes"] <= MAX_INT64:
            raise AnnounceError(f"flows[{i}].size_bytes: expected 0..{MAX_INT64}, found {_shown(f['size_bytes'])}")
        out.append((f["src"], f["dst"], f["size_bytes"]))
    return Announcement(body["job"], coll, tuple(out), float(body["period_s"]), float(body.get("compute_s", 0.0)),
                        float(body.get("overlap_s", 0.0)), int(body.get("gpus", 1)))


@dataclass(frozen=True)
class AnsweredPath:
    """The switch path the controller put one announced (src, dst) flow on."""
    src: str
    dst: str
    path: tuple[str, ...]


@dataclass(frozen=True)
class Answer:
    """What POST /dtnet/v1/announce answers (200), whatever the policy.

    start_offset_s: wait this long before the phase; priority: 0 is the highest; with
    pace_share, each sending host of the job sends at most that share of its NIC rate from
    pace_from_s until pace_until_s after its phase start. coschedule is false when the
    policy does not co-schedule (the answer is then 'go now'). Read with
    badinput.schema.from_dict, which applies check()."""
    job: str
    start_offset_s: float = 0.0
    priority: int = 0
    coschedule: bool = False
    pace_share: float | None = None
    pace_from_s: float | None = None
    pace_until_s: float | None = None
    intensity: float | None = None   # Crux's GPU intensity: compute work over communication time
    comm_s: float | None = None      # the phase at line rate on its busiest link
    placements: tuple[AnsweredPath, ...] = ()
    version: int = VERSION

    def check(self) -> None:
        if self.start_offset_s < 0:
            raise InputError("start_offset_s", "seconds >= 0", self.start_offset_s)
        if self.priority < 0:
            raise InputError("priority", "an integer >= 0", self.priority)
        if self.pace_share is not None:
            if not 0 < self.pace_share <= 1:
                raise InputError("pace_share", "a fraction in (0, 1]", self.pace_share)
            window = (self.pace_from_s, self.pace_until_s)
            if None in window or not 0 <= window[0] <= window[1]:
                raise InputError("pace_from_s, pace_until_s", "0 <= from <= until seconds", window)

    def to_dict(self) -> dict:
        return to_dict(self)


def _typename(t) -> str:
    return {int: "an integer", str: "a string", list: "a list"}.get(t, "a number")


@dataclass
class JobState:
    ann: Announcement
    links: dict  # directed link -> bytes of this job's phase on it
    paths: dict  # (src, dst) -> switch path
    comm_s: float  # phase length at line rate on the bottleneck
    phase_start_s: float  # predicted start of the announced phase
    intensity: float = 0.0
    priority: int = 0


def interval_overlap_s(start_a: float, len_a: float, period_a: float, start_b: float, len_b: float,
                       period_b: float, horizon_s: float, step_s: float) -> float:
    """Time, over [start_a, start_a + horizon), when both periodic phases are on (sampled)."""
    n = max(1, int(horizon_s / step_s))
    both = 0
    for i in range(n):
        t = start_a + (i + 0.5) * step_s
        if (t - start_a) % period_a < len_a and (t - start_b) % period_b < len_b:
            both += 1
    return both * step_s


def periodic_starts(phase_s: float, period_s: float, after_s: float, before_s: float) -> list[float]:
    """Starts phase_s + k x period_s (any integer k) inside (after_s, before_s)."""
    k = math.floor((after_s - phase_s) / period_s) + 1
    out = []
    while phase_s + k * period_s < before_s:
        if phase_s + k * period_s > after_s:
            out.append(phase_s + k * period_s)
        k += 1
    return out


@dataclass
class CoScheduler:
    """The co-scheduling state of every job that announced: its links, paths and phase.
    ``announce`` reads the fabric's shortest paths and loads from an Observation."""
    fabric: Fabric
    offset_steps: int = 50
    low_share: float = 0.2  # of a sender's NIC rate, while a higher-priority phase overlaps
    max_paths: int = 256
    jobs: dict = field(default_factory=dict)

    def announce(self, ann: Announcement, now: float, obs) -> Answer:
        """Place the job's flows, pick its start offset, rank all jobs; returns the answer."""
        others = {j: st for j, st in self.jobs.items() if j != ann.job}
        taken: dict = {}
        for st in others.values():
            for ln, b in st.links.items():
                taken[ln] = taken.get(ln, 0) + b
        links: dict = {}
        paths: dict = {}
        for src, dst, size in sorted(ann.flows, key=lambda f: (-f[2], f[0], f[1])):
            if src == dst or (src, dst) in paths:
                continue
            cands = obs.paths.equal_cost_paths(src, dst, limit=self.max_paths)
            if not cands:
                continue
            best = min(cands, key=lambda p: (
                sum(taken.get(ln, 0) + links.get(ln, 0) for ln in path_links(src, p, dst)),
                max(obs.utilization(*ln) for ln in path_links(src, p, dst)), p))
            paths[src, dst] = best
            for ln in path_links(src, best, dst):
                links[ln] = links.get(ln, 0) + size
        # Phase length at line rate on the busiest link. Agents announce
        # emulated bytes and seconds; emulated rate = link_gbps x link_scale.
        comm_s = max((b * 8 / (obs.capacity_gbps(*ln) * 1e9 * obs.link_scale) for ln, b in links.items()),
                     default=0.0)
        comm_s = min(comm_s, ann.period_s)
        delay = self._offset(ann, links, comm_s, others, now)
        st = JobState(ann, links, paths, comm_s, now + delay)
        st.intensity = (ann.compute_s * ann.gpus) / comm_s if comm_s > 0 else math.inf
        self.jobs[ann.job] = st
        self._rank()
        pace = self._pace_window(st)
        return Answer(ann.job, start_offset_s=round(delay, 6), priority=st.priority, coschedule=True,
                      pace_share=self.low_share if pace else None,
                      pace_from_s=round(pace[0], 6) if pace else None,
                      pace_until_s=round(pace[1], 6) if pace else None,
                      intensity=None if math.isinf(st.intensity) else st.intensity, comm_s=comm_s,
                      placements=tuple(AnsweredPath(s, d, tuple(p)) for (s, d), p in sorted(paths.items())))

    def _offset(self, ann, links, comm_s, others, now) -> float:
        """The delay in [0, period) that minimizes itself plus the predicted
        overlap on shared links over the horizon (the smallest on a tie).

        A shift is paid once, a collision every period; counting the delay
        keeps a small overlap predicted periods ahead (the job announces
        again before then) from buying a shift of most of a period."""
        sharing = [st for st in others.values() if set(st.links) & set(links)]
        if not sharing or comm_s <= 0:
            return 0.0
        horizon = 4 * max([ann.period_s] + [st.ann.period_s for st in sharing])
        step = max(min([comm_s] + [st.comm_s for st in sharing if st.comm_s > 0]) / 20, horizon / 4000)
        best, best_cost = 0.0, None
        for i in range(self.offset_steps):
            delay = ann.period_s * i / self.offset_steps
            cost = delay + sum(interval_overlap_s(now + delay, comm_s, ann.period_s, st.phase_start_s, st.comm_s,
                                                  st.ann.period_s, horizon, step) for st in sharing)
            if best_cost is None or cost < best_cost - 1e-12:
                best, best_cost = delay, cost
        return best

    def _pace_window(self, st: JobState) -> tuple[float, float] | None:
        """When, from its phase start, this job yields to phases predicted for
        jobs of higher GPU intensity on links it shares; None: never. Jobs of
        equal intensity share the link (their priority order is only a tie-break)."""
        start, end = st.phase_start_s, st.phase_start_s + st.comm_s
        window = None
        for o in self.jobs.values():
            if o is st or o.intensity <= st.intensity or o.comm_s <= 0 or not set(o.links) & set(st.links):
                continue
            for s in periodic_starts(o.phase_start_s, o.ann.period_s, start - o.comm_s, end):
                lo, hi = max(s, start) - start, min(s + o.comm_s, end) - start
                window = (lo, hi) if window is None else (min(window[0], lo), max(window[1], hi))
        return window

    def _rank(self) -> None:
        order = sorted(self.jobs.values(), key=lambda st: (-st.intensity, st.ann.job))
        for i, st in enumerate(order):
            st.priority = i

    def pins(self) -> dict:
        """(src, dst) -> (job, path, queue) for the flow scheduler."""
        return {pair: (st.ann.job, path, None) for st in self.jobs.values() for pair, path in st.paths.items()}

    def snapshot(self) -> list[dict]:
        return [{"job": j, "collective": st.ann.collective, "period_s": st.ann.period_s, "comm_s": st.comm_s,
                 "phase_start_s": st.phase_start_s, "priority": st.priority, "pace_window_s": self._pace_window(st),
                 "intensity": None if math.isinf(st.intensity) else st.intensity, "flows": len(st.paths)}
                for j, st in sorted(self.jobs.items())]
