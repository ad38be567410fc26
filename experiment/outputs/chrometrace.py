"""trace.json in the Chrome trace event format (Perfetto, chrome://tracing).

One process per job, one track per rank, slices for compute, collectives,
send/recv ops and received transfers, and a flow arrow from the op that sent
each transfer to the slice that received it. Times are real-cluster
microseconds since the replay started: emulated wall-clock time divided by
the time dilation, as in summary.json. The structure is in docs/outputs.md.
"""
from __future__ import annotations

import json
import os

from badinput.paths import write_atomic

TRACE_VERSION = 1
OP_KINDS = ("compute", "collective", "send", "recv")
# Flow ends sit this far (us) inside their slice, and slices on one track
# this far apart, so that nesting never hangs on a viewer's rounding to ns.
EDGE_US = 0.01


def build(events: list[dict], jobs: list[tuple[str, list[str]]], dilation: float, scale_bytes: float,
          t0: float | None = None, name: str = "") -> dict:
    """The trace as a dict. jobs: (job name, host of each rank) in job order;
    t0: the replay start (emulated wall clock), else the first event's start."""
    if t0 is None:
        t0 = min((e["start"] for e in events if "start" in e), default=0.0)

    def us(t: float) -> float:
        return round((t - t0) / dilation * 1e6, 3)

    out: list[dict] = []
    sender: dict[tuple, tuple[int, int, float, float]] = {}  # (job, rank, op_id) -> pid, tid, ts, end
    receives: list[tuple[int, int, dict, float, float]] = []
    by_rank: dict[tuple, list] = {}  # (job, rank) -> its op events and the transfers it received
    for e in events:
        if "start" not in e or "end" not in e or e.get("rank") is None:
            continue
        if e["kind"] in OP_KINDS:
            by_rank.setdefault((e.get("job"), e["rank"]), []).append(e)
        elif e["kind"] == "transfer":
            by_rank.setdefault((e.get("job"), e.get("dst", e["rank"])), []).append(e)
    for pi, (job, hosts) in enumerate(jobs):
        pid = pi + 1
        out += [_meta("process_name", pid, 0, name=f"job {job}"), _meta("process_sort_index", pid, 0, sort_index=pid)]
        next_tid, sort_index = len(hosts) + 1, 0
        for rank, host in enumerate(hosts):
            mine = by_rank.get((job, rank), [])
            if not mine and len(hosts) > 64:
                continue  # a large job whose engine reports some ranks only (one per rank class)
            ops = [(us(e["start"]), us(e["end"]), e) for e in mine if e["kind"] in OP_KINDS]
            xfers = [(us(e["start"]), us(e["end"]), e) for e in mine if e["kind"] == "transfer"]
            tracks = []  # (tid, track name, [(ts, end, event)])
            for i, lane in enumerate(_lanes(ops) or [[]]):
                tid = rank + 1 if i == 0 else None
                tracks.append((tid, f"rank {rank} ({host})" + (f" ops {i + 1}" if i else ""), lane))
            for i, lane in enumerate(_lanes(xfers)):
                tracks.append((None, f"rank {rank} ({host}) recv" + (f" {i + 1}" if i else ""), lane))
            for tid, track, lane in tracks:
                if tid is None:
                    tid, next_tid = next_tid, next_tid + 1
                sort_index += 1
                out += [_meta("thread_name", pid, tid, name=track),
                        _meta("thread_sort_index", pid, tid, sort_index=sort_index)]
                for ts, end, e in lane:
                    out.append({"ph": "X", "name": _name(e), "cat": e["kind"], "pid": pid, "tid": tid, "ts": ts,
                                "dur": round(end - ts, 3), "args": _args(e, dilation, scale_bytes)})
                    if e["kind"] == "transfer":
                        receives.append((pid, tid, e, ts, end))
                    else:
                        sender[job, rank, e["op_id"]] = (pid, tid, ts, end)
    flow_id = 0
    for pid, tid, e, ts, end in receives:
        src = sender.get((e["job"], e["src"], e["op_id"]))
        if src is None:
            continue  # the sending op never finished (a run that died): no slice to start from
        flow_id += 1
        s_pid, s_tid, s_ts, s_end = src
        common = {"name": "transfer", "cat": "transfer", "id": flow_id, "bp": "e"}
        out.append({"ph": "s", "pid": s_pid, "tid": s_tid, "ts": _inside(ts, s_ts, s_end), **common})
        out.append({"ph": "f", "pid": pid, "tid": tid, "ts": _inside(ts, ts, end), **common})
    return {
        "traceEvents": out,
        "displayTimeUnit": "ms",
        "otherData": {
            "dtnet_trace_version": TRACE_VERSION, "experiment": name,
            "time": "real-cluster microseconds since the replay start: emulated wall-clock time divided by "
                    "the time dilation (scale.bytes / scale.link), as in summary.json",
            "dilation": dilation, "scale_bytes": scale_bytes, "t0_unix_s": t0,
            "note": "transfer slices are measured at the receiver, from the first header to the last byte; "
                    "latency terms do not scale",
        },
    }


def write(path: str, events: list[dict], jobs: list[tuple[str, list[str]]], dilation: float,
          scale_bytes: float, t0: float | None = None, name: str = "") -> None:
    write_atomic(os.path.dirname(path) or ".", os.path.basename(path),
                 text=json.dumps(build(events, jobs, dilation, scale_bytes, t0, name), separators=(",", ":")))


def _lanes(spans: list[tuple]) -> list[list[tuple]]:
    """Fewest lanes in which no two (ts, end, event) spans overlap, greedy by
    start: viewers draw only properly nested slices on one track. A span that
    ends right where the next one starts is cut EDGE_US short."""
    lanes: list[list[tuple]] = []
    for span in sorted(spans, key=lambda s: (s[0], -s[1])):
        for lane in lanes:
            ts, end, e = lane[-1]
            if end <= span[0]:
                if span[0] - end < EDGE_US:
                    lane[-1] = (ts, max(ts, round(span[0] - EDGE_US, 3)), e)
                lane.append(span)
                break
        else:
            lanes.append([span])
    return lanes


def _inside(t: float, start: float, end: float) -> float:
    """t moved into [start, end], EDGE_US away from the edges when the slice allows."""
    if end - start <= 4 * EDGE_US:
        return round((start + end) / 2, 3)
    return round(min(max(t, start + EDGE_US), end - EDGE_US), 3)


def _name(e: dict) -> str:
    if e["kind"] == "transfer":
        return f"recv from rank {e['src']}"
    if e["kind"] in ("send", "recv") and e.get("peer") is not None:
        return f"{e['kind']} {'to' if e['kind'] == 'send' else 'from'} rank {e['peer']}"
    return e.get("label") or e.get("op") or e["kind"]


def _args(e: dict, dilation: float, scale_bytes: float) -> dict:
    skip = {"kind", "job", "rank", "start", "end", "ready", "size_bytes"}
    args = {k: v for k, v in e.items() if k not in skip and v is not None}
    if e["kind"] == "transfer":  # agents count emulated bytes on the wire
        args["size_bytes"] = round(e["size_bytes"] / scale_bytes)
        args["size_bytes_emulated"] = e["size_bytes"]
    elif e.get("size_bytes") is not None:
        args["size_bytes"] = e["size_bytes"]
    if e.get("ready") is not None:
        args["lateness_us"] = round(max(0.0, e["start"] - e["ready"]) / dilation * 1e6, 3)
    return args


def _meta(kind: str, pid: int, tid: int, **args) -> dict:
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": args}
