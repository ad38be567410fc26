"""`engine: packet` (ns-3) on hand-computable cases: the driver on tiny fabrics written by hand,
and whole runs through `dtnet run`. Tests that need ns-3 skip only when it is absent."""
from __future__ import annotations

import csv
import json
import os
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from badinput import InputError
from dtnet.cli import main
from experiment import model, sweep
from packetsim import ns3, runner, scenario
from packetsim.transport import Ecn, Transport

needs_ns3 = pytest.mark.skipif(not ns3.available(), reason="ns-3 (libns3-dev) is not installed")
MTU = 9000
GOODPUT = (MTU - 52) / (MTU + 2)  # TCP payload of each frame on the wire (PPP adds 2 bytes)


def fake_net(names, links):
    """The Net fields scenario.write reads: nodes by name, directed links (host kind)."""
    src = [a for a, b, _ in links] + [b for a, b, _ in links]
    dst = [b for a, b, _ in links] + [a for a, b, _ in links]
    gbps = [g for _, _, g in links] * 2
    return SimpleNamespace(names=names, link_src=np.array(src), link_dst=np.array(dst),
                           link_kind=np.zeros(len(src), int), link_gbps=np.array(gbps, float))


def path(net, nodes):
    """Directed link ids along a node path."""
    ids = {(int(a), int(b)): i for i, (a, b) in enumerate(zip(net.link_src, net.link_dst))}
    return np.array([ids[a, b] for a, b in zip(nodes, nodes[1:])])


def incast(n, size):
    """n senders of size bytes each into one 10 Gb/s port (link n, direction 0): (net, flows)."""
    net = fake_net([f"h{i}" for i in range(n + 1)] + ["s"], [(i, n + 1, 10.0) for i in range(n)] + [(n + 1, n, 10.0)])
    return net, [([i, n + 1, n], size) for i in range(n)]


def simulate(net, flows, tmp_path, reroutes=(), buffer=1 << 20, cuts=(), paces=(), **transport):
    """Run transfers [(node path, bytes)] all ready at t=0; the driver's results. cuts: [(at_s,
    node a, node b)], the cable a-b down from then; paces: [(node, payload B/s, from_s, until_s)]."""
    sc = scenario.Scenario()
    for k, (nodes, size) in enumerate(flows):
        c = sc.conn(0, k, k + 1000, list(range(2000)))
        sc.add(scenario.TRANSFER, size, conn=c)
        sc.paths.append(path(net, nodes))
    sc.slice_bytes, sc.bin_s = 1, 1e-3
    sc.reroutes = [(at, c, path(net, nodes)) for at, c, nodes in reroutes]
    sc.linkstates = [(at, path(net, [a, b]).tolist() + path(net, [b, a]).tolist(), False) for at, a, b in cuts]
    sc.paces = list(paces)
    t = Transport(switch_buffer_bytes=buffer, latency_us={"host": transport.pop("latency_us", 1.0)}, **transport)
    os.makedirs(tmp_path, exist_ok=True)
    return runner.execute(sc, net, t, str(tmp_path))[0]


@needs_ns3
def test_one_flow_on_one_link_reaches_the_line_rate_less_headers(tmp_path):
    net = fake_net(["h0", "h1"], [(0, 1, 10.0)])
    size = 50_000_000
    res = simulate(net, [([0, 1], size)], tmp_path)
    end = res["tasks"][0]["end"]
    ideal = size / (10e9 / 8 * GOODPUT)
    assert ideal <= end <= ideal * 1.01, (end, ideal)
    assert res["conns"][0]["bytes"] == size


@needs_ns3
def test_acking_every_eighth_segment_sends_a_quarter_of_the_acks_and_ends_at_the_same_time(tmp_path):
    net = fake_net(["h0", "h1"], [(0, 1, 10.0)])
    size = 20_000_000
    # a buffer above the flow's TSQ limit: no loss, so no duplicate ACKs come on top
    runs = {n: simulate(net, [([0, 1], size)], tmp_path / str(n), buffer=4 << 20, ack_every_segments=n)
            for n in (2, 8)}
    ack_bytes = {n: sum(next(q for q in r["queues"] if q["dir"] == 1)["bins"]) for n, r in runs.items()}
    assert 3.9 <= ack_bytes[2] / ack_bytes[8] <= 4.1, ack_bytes  # h1's port back to h0 carries only ACKs
    assert runs[8]["meta"]["events"] < 0.9 * runs[2]["meta"]["events"]
    ends = {n: r["tasks"][0]["end"] for n, r in runs.items()}
    assert abs(ends[8] / ends[2] - 1) < 0.001, ends


@needs_ns3
def test_two_flows_into_one_port_share_it_fairly(tmp_path):
    net = fake_net(["h0", "h1", "h2", "s"], [(0, 3, 10.0), (1, 3, 10.0), (3, 2, 10.0)])
    size = 20_000_000
    res = simulate(net, [([0, 3, 2], size), ([1, 3, 2], size)], tmp_path)
    ends = [t["end"] for t in res["tasks"]]
    ideal = 2 * size / (10e9 / 8 * GOODPUT)
    assert max(ends) <= ideal * 1.03, (ends, ideal)
    assert min(ends) >= 0.85 * max(ends), ends  # neither finished far ahead: they shared the port
    port = next(q for q in res["queues"] if q["link"] == 2 and q["dir"] == 0)
    assert port["max"] > 0  # the shared port is where the queue was


@needs_ns3
def test_dctcp_holds_the_queue_near_its_marking_threshold_where_cubic_fills_the_buffer(tmp_path):
    # Alizadeh et al. (SIGCOMM 2010) in miniature: two long flows into one 10 Gb/s port, 1 MiB of buffer.
    net = fake_net(["h0", "h1", "h2", "s"], [(0, 3, 10.0), (1, 3, 10.0), (3, 2, 10.0)])
    size, k = 20_000_000, 90_000
    ideal = 2 * size / (10e9 / 8 * GOODPUT)
    port = {}
    for cc, ecn in (("cubic", None), ("dctcp", Ecn(k, k, 1.0))):
        res = simulate(net, [([0, 3, 2], size), ([1, 3, 2], size)], tmp_path, cc=cc, ecn=ecn, latency_us=5.0)
        assert max(t["end"] for t in res["tasks"]) <= ideal * 1.03, cc  # full throughput either way
        port[cc] = next(q for q in res["queues"] if q["link"] == 2 and q["dir"] == 0)
    assert port["cubic"]["mean"] > 0.5 * (1 << 20) and port["cubic"]["drops"] > 0
    assert port["dctcp"]["marks"] > 0 and port["dctcp"]["drops"] == 0
    assert 0.5 * k < port["dctcp"]["mean"] < 1.5 * k and port["dctcp"]["p99"] < 2 * k


@needs_ns3
def test_ecn_marks_only_at_switch_ports_not_at_a_host_nic(tmp_path):
    # One host sends to two others: its own NIC is the bottleneck. Switches mark (DCTCP's K), a
    # host's queue does not, so DCTCP runs at the line rate with no mark on the sender's NIC.
    net = fake_net(["h0", "h1", "h2", "s"], [(0, 3, 10.0), (3, 1, 10.0), (3, 2, 10.0)])
    size, k = 10_000_000, 30_000
    res = simulate(net, [([0, 3, 1], size), ([0, 3, 2], size)], tmp_path, cc="dctcp", ecn=Ecn(k, k, 1.0),
                   latency_us=5.0)
    ideal = 2 * size / (10e9 / 8 * GOODPUT)
    assert max(t["end"] for t in res["tasks"]) <= ideal * 1.03
    nic = next(q for q in res["queues"] if q["link"] == 0 and q["dir"] == 0)
    assert nic["max"] > 2 * k and nic["marks"] == 0  # a queue above K, and still no mark


@needs_ns3
def test_incast_collapses_on_a_shallow_buffer_and_runs_at_the_line_rate_on_a_deep_one(tmp_path):
    # Phanishayee et al. (FAST 2008) in miniature: 16 senders of 256 KiB each into one 10 Gb/s port.
    n, size, mtu = 16, 256 << 10, 1500
    net, flows = incast(n, size)
    ideal = n * size / (10e9 / 8 * (mtu - 52) / (mtu + 2))  # the port busy throughout, less headers
    last, port = {}, {}
    for buf in (32 << 10, 8 << 20):  # about 20 frames: whole windows lost; all 4 MiB fit
        res = simulate(net, flows, tmp_path, buffer=buf, mtu_bytes=mtu)
        last[buf] = max(t["end"] for t in res["tasks"])
        port[buf] = next(q for q in res["queues"] if q["link"] == n and q["dir"] == 0)
    assert port[32 << 10]["drops"] > 0
    # a sender waited out a timeout, but recovered after it: a few RTOs, not one segment per RTO
    assert ideal + runner.RTO_MIN_S <= last[32 << 10] <= ideal + 4 * runner.RTO_MIN_S, (last, ideal)
    assert port[8 << 20]["drops"] == 0
    assert ideal <= last[8 << 20] <= 1.05 * ideal, (last, ideal)


@needs_ns3
@pytest.mark.parametrize("buffer", [1 << 20, 32 << 10])  # a shared queue; and drops, timeouts, recoveries
def test_a_port_queue_gives_the_queue_discs_results_to_the_byte_with_fewer_events(tmp_path, buffer):
    net, flows = incast(4, 2 << 20)
    runs = {pq: simulate(net, flows, tmp_path / str(pq), buffer=buffer, mtu_bytes=1500, port_queue=pq)
            for pq in (False, True)}
    for key in ("tasks", "conns", "queues"):
        assert runs[True][key] == runs[False][key], key
    # the wake-ups gone: one a frame that left a full device queue (fewer where windows are small)
    assert runs[True]["meta"]["events"] < (0.95 if buffer < 1 << 20 else 0.9) * runs[False]["meta"]["events"]
    if buffer < 1 << 20:
        assert sum(q["drops"] for q in runs[True]["queues"]) > 0


@needs_ns3
def test_a_flow_table_moved_mid_run_carries_the_flow_on_its_new_path(tmp_path):
    # h0 - A, then A - B - D or A - C - D, then D - h1
    names = ["h0", "h1", "A", "B", "C", "D"]
    net = fake_net(names, [(0, 2, 10.0), (2, 3, 10.0), (2, 4, 10.0), (3, 5, 10.0), (4, 5, 10.0), (5, 1, 10.0)])
    size = 20_000_000
    half = size / (10e9 / 8 * GOODPUT) / 2
    res = simulate(net, [([0, 2, 3, 5, 1], size)], tmp_path, reroutes=[(half, 0, [0, 2, 4, 5, 1])])
    sent = {q["link"]: sum(q["bins"]) for q in res["queues"] if q["dir"] == 0}
    assert res["tasks"][0]["end"] > 0
    via_b, via_c = sent[1], sent[2]  # A->B and A->C
    frames = size / (MTU - 52) * (MTU + 2)
    assert 0.3 * frames < via_b < 0.7 * frames and 0.3 * frames < via_c < 0.7 * frames, (via_b, via_c)
    assert via_b + via_c >= frames


@needs_ns3
def test_a_flow_moved_off_a_cut_cable_onto_a_busy_path_finishes_within_twice_the_time_without_the_cut(tmp_path):
    # The controller's reroute under load at 400 Gb/s, in miniature: h0 -> h1 over A-B-D and
    # h2 -> h3 over A-C-D; halfway, A-B dies and h0's flow moves to A-C-D, where the two share
    # 400 Gb/s. Hand-computed: half alone (T/2), then half each at half rate (T): 1.5 T, with
    # T the time without the cut. A trickle (a segment per 200 ms RTO) would take seconds.
    names = ["h0", "h1", "A", "B", "C", "D", "h2", "h3"]
    net = fake_net(names, [(0, 2, 400.0), (2, 3, 400.0), (2, 4, 400.0), (3, 5, 400.0), (4, 5, 400.0),
                           (5, 1, 400.0), (6, 2, 400.0), (5, 7, 400.0)])
    size = 50_000_000
    flows = [([0, 2, 3, 5, 1], size), ([6, 2, 4, 5, 7], size)]
    alone = max(t["end"] for t in simulate(net, flows, tmp_path / "alone", buffer=4 << 20)["tasks"])
    half = size / (400e9 / 8 * GOODPUT) / 2
    res = simulate(net, flows, tmp_path / "cut", buffer=4 << 20, cuts=[(half, 2, 3)],
                   reroutes=[(half, 0, [0, 2, 4, 5, 1])])
    ends = [t["end"] for t in res["tasks"]]
    assert [c["bytes"] for c in res["conns"]] == [size, size]
    assert 1.3 * alone <= max(ends) <= 2 * alone, (ends, alone)  # they shared A-C, and no RTO
    assert res["conns"][0]["retx"] > 0  # what was on the cut cable was lost and sent again


def write(tmp_path, data: dict, name="exp.yaml") -> str:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return str(p)


def ring(n=4, size=64 << 20, **extra):
    return {"name": "ring", "engine": "packet", "topology": {"kind": "single-switch", "hosts": n, "link_gbps": 100},
            "controller": {"routing": "ecmp"},
            "jobs": [{"name": "j0", "hosts": "all", "workload": {"collective": "all_reduce", "algorithm": "ring",
                                                                  "size_bytes": size, "iterations": 1}}], **extra}


@needs_ns3
def test_a_ring_runs_at_the_line_rate_and_writes_the_shared_outputs(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", write(tmp_path, ring()), "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["engine"] == "packet" and s["status"] == "complete"
    assert "ns-3 3.37" in s["model"]["simulator"] and s["model"]["transport"]["cc"] == "cubic"
    assert s["model"]["transport"]["tsq_bytes"] == Transport().tsq_bytes(100)  # Linux's 4 MiB cap at 100 Gb/s
    assert any(x.startswith("TCP Small Queues") for x in s["model"]["statements"])
    busbw = s["jobs"][0]["collectives"][0]["busbw_gbps"]
    assert 0.95 * 100 * GOODPUT <= busbw <= 100 * GOODPUT, busbw  # slices pipeline the steps
    assert len(s["queues"]) == 8 and {"mean_bytes", "p99_bytes", "max_bytes", "drops", "ecn_marks"} <= set(s["queues"][0])
    assert len(s["flows"]) == 4 and all("retransmissions" in f for f in s["flows"])
    with open(out / "links.csv") as f:
        header = next(csv.reader(f))
    assert header[-1] == "queue_mean_bytes"
    kinds = {json.loads(line)["kind"] for line in (out / "events.jsonl").read_text().splitlines()}
    assert kinds == {"collective"}
    assert "events/s" in capsys.readouterr().out


def test_check_refuses_what_it_cannot_model_in_one_line(tmp_path):
    for extra, key in (({"capture": {"links": [["h1", "s0"]]}}, "capture.links"),):
        exp = model.load(write(tmp_path, ring(**extra)))
        with pytest.raises(InputError) as e:
            runner.check(exp)
        assert e.value.key == key and "\n" not in str(e.value)


def test_check_refuses_more_gpus_than_a_packet_run_takes_unless_forced(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "MAX_RANKS", 3)  # `dtnet check` says what `dtnet run` would refuse
    exp = model.load(write(tmp_path, ring(n=4)))
    with pytest.raises(InputError) as e:
        runner.check(exp)
    assert e.value.key == "engine" and "4 hosts" in str(e.value) and "\n" not in str(e.value)
    assert runner.check(exp, force=True).startswith("engine packet")


def test_a_sweep_over_an_hour_in_all_is_refused_before_its_first_point_unless_forced(tmp_path, monkeypatch,
                                                                                      capsys):
    data = ring(n=4)
    data["sweep"] = {"grid": {"jobs.0.workload.size_bytes": [1 << 20, 2 << 20, 4 << 20]}}
    path = write(tmp_path, data)
    exps = [p.exp for p in sweep.expand(model.load(path))]
    each = [runner.refuse_long_sweep([e]) for e in exps]
    assert each[0] < each[1] < each[2]  # the estimate grows with the bytes
    # every point alone under the limit, the three together over it
    monkeypatch.setattr(runner, "MAX_WALL_S", max(each) * 1.01)
    out = tmp_path / "out"
    assert main(["run", path, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sweep of at most an hour in all" in err[0] and "engine: flow" in err[0], err
    assert not [f for f in os.listdir(out) if not f.startswith(".")]  # no point started
    assert runner.refuse_long_sweep(exps[:1]) == each[0]  # one point alone passes


def test_a_sweep_refusal_stops_planning_once_past_the_hour(tmp_path, monkeypatch):
    data = ring(n=4)
    data["sweep"] = {"grid": {"jobs.0.workload.size_bytes": [4 << 20, 1 << 20, 2 << 20]}}
    exps = [p.exp for p in sweep.expand(model.load(write(tmp_path, data)))]
    first = runner.refuse_long_sweep(exps[:1])
    monkeypatch.setattr(runner, "MAX_WALL_S", first * 0.99)  # the first point alone is past it
    planned = []
    real_plan = runner.plan
    monkeypatch.setattr(runner, "plan", lambda exp, **kw: planned.append(exp) or real_plan(exp, **kw))
    with pytest.raises(InputError) as e:
        runner.refuse_long_sweep(exps)
    assert planned == exps[:1], len(planned)  # the other two points were never planned
    assert "in its first 1 of 3 points" in str(e.value) and "\n" not in str(e.value), e.value
    total, counted = runner.estimate_sweep_s(exps)  # without a limit: every point, as the bench wants
    assert counted == 3 and total > first


@pytest.mark.parametrize("sets", [{}, {"jobs.0.workload.collective": "all_to_all", "jobs.0.workload.algorithm": "direct"},
                                  {"jobs.0.workload.algorithm": "tree"}, {"topology.hosts": 8}])
def test_the_traces_bound_is_below_the_plans_estimate(tmp_path, sets):
    data = ring(n=4)
    for k, v in sets.items():
        model.set_path(data, k, v, None)
    exp = model.parse(data, None)
    _, _, net, sc, t, _ = runner.plan(exp, log=lambda *a, **k: None)
    least, est = runner.least_wall_s(exp), runner.estimate_wall_s(sc, net, t)
    assert 0.3 * est < least <= est, (least, est)


def test_a_run_past_the_hour_by_its_traces_is_refused_without_planning(tmp_path, monkeypatch):
    exp = model.load(write(tmp_path, ring(n=4)))
    least = runner.least_wall_s(exp)
    monkeypatch.setattr(runner, "MAX_WALL_S", least * 0.99)
    monkeypatch.setattr(runner, "plan", lambda *a, **k: pytest.fail("planned"))
    with pytest.raises(InputError) as e:
        runner.check(exp)
    assert "from its traces' bytes alone" in str(e.value) and "engine: flow" in str(e.value), e.value
    assert runner.check(exp, force=True).startswith("engine packet")


def test_a_run_without_ns3_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ns3, "HEADER", str(tmp_path / "absent.h"))
    monkeypatch.setenv("DTNET_NS3_LIBRARY", "debian")  # nor an optimized build in the cache
    monkeypatch.setattr(ns3, "binary_path", lambda: str(tmp_path / "absent-binary"))
    assert main(["run", write(tmp_path, ring()), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "apt-get install -y libns3-dev" in err[0], err


@needs_ns3
def test_a_link_that_fails_mid_run_loses_its_flows_to_the_other_paths(tmp_path):
    data = {"name": "down", "engine": "packet", "topology": {"kind": "fat-tree", "k": 4, "link_gbps": 100},
            "controller": {"routing": "ecmp"},
            "jobs": [{"name": "s", "hosts": "all", "workload": {"pattern": "stride", "stride": 8,
                                                                "size_bytes": 20_000_000, "iterations": 1}}],
            # ECMP seed 0 puts two of the 16 flows on agg0_1 -> core3
            "faults": [{"at_ms": 1, "link": ["agg0_1", "core3"], "state": "down"}]}
    out = tmp_path / "out"
    assert main(["run", write(tmp_path, data), "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "complete"
    (fault,) = s["faults"]
    assert fault["ok"] and fault["fault"] == "link down" and fault["flows_moved"] >= 2
    assert s["controller"]["counters"]["reroutes"] == fault["flows_moved"]
    (cut,) = [q for q in s["queues"] if q["link"] == "agg0_1-core3"]
    frames = 2 * 20_000_000 / (MTU - 52) * (MTU + 2)
    assert 0 < cut["tx_bytes"] < 0.9 * frames  # it carried the two flows only until it failed
    assert sum(f["retransmissions"] for f in s["flows"]) > 0  # what was in flight through it was lost


def _stride(routing, size=20_000_000):
    return {"name": f"stride-{routing}", "engine": "packet",
            "topology": {"kind": "fat-tree", "k": 4, "link_gbps": 100}, "controller": {"routing": routing},
            "jobs": [{"name": "s", "hosts": "all", "workload": {"pattern": "stride", "stride": 8,
                                                                "size_bytes": size, "iterations": 1}}]}


def _run_stride(tmp_path, routing):
    """The stride run's folder and summary, complete."""
    out = tmp_path / routing
    assert main(["run", write(tmp_path, _stride(routing)), "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "complete"
    return out, s


@needs_ns3
def test_the_controller_in_the_loop_places_every_flow_on_its_own_path(tmp_path):
    # ECMP seed 0 puts two of the 16 stride flows on one uplink; congestion-aware placement does not.
    out, s = _run_stride(tmp_path, "congestion-aware")
    assert s["controller"]["counters"]["flows_placed"] == 16
    assert (out / "controller-state.json").exists()
    ideal = 20_000_000 / (100e9 / 8 * GOODPUT)
    assert s["jobs"][0]["iteration_time_s"]["mean"] <= 1.1 * ideal
    busy = [q for q in s["queues"] if q["link"].startswith("agg") and "core" in q["link"] and q["tx_bytes"] > 0]
    assert max(q["tx_bytes"] for q in busy) < 1.5 * 20_000_000  # no core uplink carried two flows


@needs_ns3
def test_spraying_spreads_every_flow_over_its_equal_cost_paths(tmp_path):
    _, s = _run_stride(tmp_path, "spray")
    up = [q["tx_bytes"] for q in s["queues"] if q["link"].startswith("agg0_") and "core" in q["link"]]
    assert len(up) == 4 and min(up) > 0.7 * max(up), up  # the pod's four uplinks share its eight flows


def _first_starts(exp) -> dict:
    """rank -> the seconds its first op waits for (its start task), from the scenario the driver gets."""
    from experiment.plan import job_traces

    fabric = exp.fabric()
    sc = scenario.build(exp, fabric, job_traces(exp, fabric), 1 << 14)
    out = {}
    for ot in sc.ops:
        if not ot.op.deps:
            roots = sc.earlier[ot.start]
            out[ot.rank] = sum(sc.durations[t] for t in roots if sc.kinds[t] == scenario.COMPUTE)
    return out


def test_start_jitter_starts_each_rank_apart_within_the_bound_and_the_seed_repeats_it():
    base = ring(8)
    assert set(_first_starts(model.parse(base, "r.yaml")).values()) == {0.0}  # the default: all at once
    starts = {}
    for seed in (1, 1, 2):
        exp = model.parse({**base, "packet": {"start_jitter_ns": 180, "start_seed": seed}}, "r.yaml")
        got = _first_starts(exp)
        assert sorted(got) == list(range(8)) and all(0 <= s <= 180e-9 for s in got.values())
        assert len(set(got.values())) == 8  # each rank its own
        starts.setdefault(seed, []).append(got)
    assert starts[1][0] == starts[1][1] and starts[1][0] != starts[2][0]
    with pytest.raises(InputError) as e:
        model.parse({**base, "packet": {"start_jitter_ns": -1}}, "r.yaml")
    assert "packet.start_jitter_ns" in str(e.value)


@needs_ns3
def test_jittered_replicates_of_a_lossy_incast_differ_and_a_clean_ring_barely_moves(tmp_path):
    def cct(data, name):
        out = tmp_path / name
        assert main(["run", write(tmp_path, data, f"{name}.yaml"), "--out", str(out), "--no-plots"]) == 0
        s = json.loads((out / "summary.json").read_text())
        return s["jobs"][0]["collectives"][0]["cct_s"], s

    clean, _ = cct(ring(4, 16 << 20), "ring0")
    jittered, s = cct({**ring(4, 16 << 20), "packet": {"start_jitter_ns": 180, "start_seed": 3}}, "ring3")
    assert s["model"]["transport"]["start_jitter_ns"] == 180 and s["model"]["transport"]["start_seed"] == 3
    assert any("packet.start_jitter_ns" in x for x in s["model"]["statements"])
    assert abs(jittered / clean - 1) < 0.03  # no loss: offsets under a frame time move it by a few ‰ to 1.3%
    many = {"name": "a2a", "engine": "packet", "topology": {"kind": "single-switch", "hosts": 8, "link_gbps": 100},
            "controller": {"routing": "ecmp"}, "transport": {"switch_buffer_bytes": 65536},
            "jobs": [{"name": "j0", "hosts": "all", "workload": {"collective": "all_to_all", "size_bytes": 8 << 20,
                                                                  "iterations": 1}}]}
    runs = [cct({**many, "packet": {"start_jitter_ns": 720, "start_seed": seed}}, f"a2a{i}")[0]
            for i, seed in enumerate((1, 1, 2, 3))]
    assert runs[0] == runs[1] and len(set(runs[1:])) > 1  # a replicate repeats; the draws differ
