"""Analytical alpha-beta time of a schedule, for comparing the emulator against theory."""
from __future__ import annotations

from collections.abc import Sequence

from badinput import InputError
from traffic.collectives.schedule import Schedule


def busbw_factor(op: str, nranks: int) -> float:
    """nccl-tests: busbw = algbw x this factor, so that it compares with the link rate."""
    if nranks < 2:
        return 0.0
    if op == "all_reduce":
        return 2 * (nranks - 1) / nranks
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (nranks - 1) / nranks
    return 1.0


def predict_time_s(schedule: Schedule, link_gbps: float, latency_s: float, *,
                   pipeline_slice_bytes: int | None = None, intra_gbps: float | None = None,
                   gpus_per_server: int | None = None, server_of: Sequence[int] | None = None) -> float:
    """Seconds the schedule takes when every rank has one full-duplex NIC of `link_gbps`.

    Lock-step (default): each step costs latency_s plus the busiest NIC's bytes in that step
    (its sends and its receives are limited separately) over the bandwidth. This is the
    textbook alpha-beta cost: ring all-reduce gives 2(N-1)(alpha + S/(N B)).
    With `pipeline_slice_bytes`, steps overlap slice by slice as the agents do: one slice per step
    fills the pipeline, then the busiest NIC's total bytes stream at the link rate.
    With `intra_gbps` and `gpus_per_server`, transfers inside a server use the intra-server rate;
    `server_of` (group rank -> server id) says where the ranks are when they are not in blocks of
    `gpus_per_server` (a rail-aligned "snake" order, say).
    """
    if not link_gbps or link_gbps <= 0:
        raise InputError("link_gbps", "a rate > 0", link_gbps)
    if latency_s < 0:
        raise InputError("latency_s", "a time >= 0", latency_s)
    if gpus_per_server is not None and server_of is not None:
        raise InputError("server_of", "no server_of when gpus_per_server is given", server_of)
    located = gpus_per_server is not None or server_of is not None
    if (intra_gbps is None) == located:
        raise InputError("intra_gbps", "to be given together with gpus_per_server or server_of", intra_gbps)
    if intra_gbps is not None and intra_gbps <= 0:
        raise InputError("intra_gbps", "a rate > 0", intra_gbps)
    if server_of is not None and len(server_of) != schedule.nranks:
        raise InputError("server_of", f"a server id for each of the {schedule.nranks} ranks", len(server_of))
    rates = (link_gbps * 1e9 / 8, (intra_gbps or link_gbps) * 1e9 / 8)
    server = server_of if server_of is not None else (
        [r // gpus_per_server for r in range(schedule.nranks)] if gpus_per_server else None)

    def link_class(t):  # 0 = through the fabric, 1 = inside a server
        return int(server is not None and server[t.src] == server[t.dst])

    total = 0.0
    busiest_total = {}
    fill = 0.0
    for step in schedule.steps():
        if not step:
            continue
        load: dict = {}
        for t in step:
            cls = link_class(t)
            for key in ((t.src, "tx", cls), (t.dst, "rx", cls)):
                load[key] = load.get(key, 0) + t.size_bytes
                busiest_total[key] = busiest_total.get(key, 0) + t.size_bytes
        step_s = max(b / rates[k[2]] for k, b in load.items())
        total += latency_s + step_s
        if pipeline_slice_bytes:
            per_slice = max(min(b, pipeline_slice_bytes) / rates[k[2]] for k, b in load.items())
            fill += latency_s + per_slice
    if pipeline_slice_bytes:
        stream = max((b / rates[k[2]] for k, b in busiest_total.items()), default=0.0)
        return min(total, fill + stream)
    return total
