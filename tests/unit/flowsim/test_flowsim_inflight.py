"""A send gated on a transfer whose last bytes are still in flight (a delivery latency: flow.latency_us,
flow.store_and_forward): the gate's delivered bytes keep growing at its last rate until its deliver
event, so a follower keeps streaming behind it, whatever else happens meanwhile."""
import pytest

from flowsim import EcmpRouter, JobSpec, Net, Params, Simulation
from topologies import single_switch
from traffic.trace import Op, Trace
from traffic.workload import build_workload

C = 1e9                        # bytes/s: every link of single_switch(..., link_gbps=8)
N, SIZE = 4, 4 * 2**20         # a ring all-reduce of 4 MiB over 4 GPUs: 1 MiB chunks
CHUNK = SIZE // N
LAT_S, SLICE = 9e-4, 2**16     # 900 us of delivery latency (900 kB in flight at C), 64 KiB slices


def _run(extra_bytes):
    """The ring on h0..h3 and, when extra_bytes, one send h4 -> h5 on links of its own."""
    fab = single_switch(6, link_gbps=8)
    jobs = [JobSpec("ring", fab.hosts[:N], build_workload(
        {"collective": "all_reduce", "algorithm": "ring", "size_bytes": SIZE}, N))]
    if extra_bytes:
        ops = {0: [Op("x", "send", (), size_bytes=extra_bytes, peer=1)],
               1: [Op("x", "recv", (), size_bytes=extra_bytes, peer=0)]}
        jobs.append(JobSpec("p2p", fab.hosts[4:6], Trace(nranks=2, groups={}, ops=ops)))
    res = Simulation(Net.from_fabric(fab), jobs, EcmpRouter(0), Params(latency_s=LAT_S, slice_bytes=SLICE)).run()
    assert res.complete, res.stalled
    return res.collectives()[0]["cct_s"], res.counters["events"]


def test_a_ring_streams_behind_gates_in_flight():
    # Each step's chunk leaves at the line rate; the next step's send starts when its own last
    # one has left, with CHUNK - LAT_S C - SLICE > 0 bytes of room behind what its gate has
    # delivered, and both move at C, so no step waits: 2 (N - 1) chunks back to back, and the
    # last one's latency.
    assert CHUNK - LAT_S * C - SLICE > 0
    alone, ev_alone = _run(0)
    assert alone == pytest.approx(2 * (N - 1) * CHUNK / C + LAT_S, rel=1e-9)
    # A send elsewhere that ends while step 1's last bytes are in flight (at 1.5 ms; step 1 left
    # by 1.049 ms and lands by 1.949) adds a solve there: it changes nothing of the ring's, and
    # costs a handful of events, not one per byte-sized step until the gate's delivery.
    assert CHUNK / C < 1.5e-3 < CHUNK / C + LAT_S
    busy, ev_busy = _run(1_500_000)
    assert busy == pytest.approx(alone, rel=1e-9)
    assert ev_busy <= ev_alone + 10
