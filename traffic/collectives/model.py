"""Analytical alpha-beta time of a schedule, for comparing the emulator against theory."""
from __future__ import annotations

from traffic.collectives.schedule import Schedule
from traffic.errors import InputError


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
                   gpus_per_server: int | None = None) -> float:
    """Seconds the schedule takes when every rank has one full-duplex NIC of `link_gbps`.

    Lock-step (default): each step costs latency_s plus the busiest NIC's bytes in that step
    (its sends and its receives are limited separately) over the bandwidth. This is the
    textbook alpha-beta cost: ring all-reduce gives 2(N-1)(alpha + S/(N B)).
    With `pipeline_slice_bytes`, steps overlap slice by slice as the agents do: one slice per step
    fills the pipeline, then the busiest NIC's total bytes stream at the link rate.
    With `intra_gbps` and `gpus_per_server`, transfers inside a server use the intra-server rate.
    """
    if not link_gbps or link_gbps <= 0:
        raise InputError("link_gbps", "a rate > 0", link_gbps)
    if latency_s < 0:
        raise InputError("latency_s", "a time >= 0", latency_s)
    if (intra_gbps is None) != (gpus_per_server is None):
        raise InputError("intra_gbps", "to be given together with gpus_per_server", intra_gbps)
    rates = (link_gbps * 1e9 / 8, (intra_gbps or link_gbps) * 1e9 / 8)

    def link_class(t):  # 0 = through the fabric, 1 = inside a server
        return int(gpus_per_server is not None and t.src // gpus_per_server == t.dst // gpus_per_server)

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
