"""Every output of a run, by its schema: summary.json (the DESIGN contract),
events.jsonl lines as agents write them, trace.json (Chrome trace format),
links.csv and plots."""
import csv
import io
import json
import os
import socket
import struct
import sys
import threading
import zlib

import pytest

from emulator.agent import replay as agent_mod
from emulator.run import linksampler
from experiment.outputs import chrometrace, links, plots
from experiment.rankplan import Op, RankPlan, Recv, Send
from tests.unit.experiment import fakerun

@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return fakerun.two_runs(tmp_path_factory.mktemp("runs"))


# -- summary.json ---------------------------------------------------------------

def _is_num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def test_summary_json_has_the_design_contract(runs):
    run_dir, _ = runs["fast"]
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["status"] == "complete" and [j["name"] for j in s["jobs"]] == ["a", "b"]
    job = s["jobs"][0]
    it = job["iteration_time_s"]
    assert all(_is_num(it[k]) for k in ("mean", "p50", "p99")) and len(it["all"]) == 2
    (c,) = job["collectives"]
    for key, kind in (("op", str), ("algorithm", str), ("size_bytes", int), ("ranks", int)):
        assert isinstance(c[key], kind)
    assert all(_is_num(c[k]) for k in ("cct_s", "algbw_gbps", "busbw_gbps"))
    # Real-cluster units: 2.03 s emulated / dilation 40; nccl-tests busbw for all-reduce.
    assert c["cct_s"] == pytest.approx(2.03 / 40)
    assert c["algbw_gbps"] == pytest.approx(c["size_bytes"] * 8 / c["cct_s"] / 1e9)
    assert c["busbw_gbps"] == pytest.approx(c["algbw_gbps"] * 2 * 3 / 4)
    assert _is_num(s["traffic"]["aggregate_gbps"]) and 0 <= s["traffic"]["normalized_throughput"] <= 1
    assert isinstance(s["fidelity"]["ok"], bool) and s["fidelity"]["checks"]
    assert isinstance(s["controller"], dict)


# -- events.jsonl, as the agent writes it ------------------------------------------

def _plan(rank=0, slice_bytes=1024, ops=(), transfer_events=True, inbound=0) -> RankPlan:
    return RankPlan(job="j", rank=rank, host="h0", port=0, dilation=1.0, slice_bytes=slice_bytes, start_offset_s=0.0,
                    ops=tuple(ops), peers={}, inbound=inbound, transfer_events=transfer_events)


def _agent(transfer_events=True):
    op = Op("it0/all_reduce", "collective", iteration=0, label="ar", op="all_reduce", algorithm="ring",
            group="world", size_bytes=4096, ranks=2, recvs=(Recv(7, 0, 0, 2048),))
    return agent_mod.Agent(_plan(rank=1, ops=[op], transfer_events=transfer_events, inbound=1))


def test_agent_event_lines_carry_kind_rank_job_start_end(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    a = _agent()
    ours, theirs = socket.socketpair()
    reader = threading.Thread(target=a.reader, args=(ours,), daemon=True)
    reader.start()
    data = bytes(1024)
    frames = agent_mod.HELLO.pack(0) + b"".join(
        agent_mod.HEADER.pack(7, off, 1024, zlib.crc32(data)) + data for off in (0, 1024))
    theirs.sendall(frames)
    theirs.close()
    reader.join(5)
    op = a.ops[0]
    op.start_t, op.ready_t = 100.0, 99.5
    a._finish(0, 101.0)
    lines = out.getvalue().splitlines()
    events = [json.loads(line) for line in lines]
    assert [e["kind"] for e in events] == ["transfer", "collective"]
    for e in events:
        assert {"kind", "rank", "job", "start", "end"} <= set(e) and e["job"] == "j" and e["rank"] == 1
        assert e["start"] <= e["end"]
    xfer, coll = events
    assert (xfer["src"], xfer["dst"], xfer["step"], xfer["size_bytes"]) == (0, 1, 0, 2048)
    assert coll["op_id"] == xfer["op_id"] == "it0/all_reduce"
    assert (coll["op"], coll["algorithm"], coll["size_bytes"], coll["ranks"], coll["ready"]) == \
        ("all_reduce", "ring", 4096, 2, 99.5)


def test_fixture_events_have_the_fields_the_outputs_read(runs):
    for line in (runs["fast"][0] / "events.jsonl").read_text().splitlines():
        e = json.loads(line)
        assert {"kind", "rank", "job", "start", "end"} <= set(e)


# -- trace.json ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def trace(runs):
    with open(runs["fast"][0] / "trace.json") as f:
        return json.load(f)  # valid JSON, or this fails


def _by_ph(trace, ph):
    return [e for e in trace["traceEvents"] if e["ph"] == ph]


def test_trace_has_a_process_per_job_and_a_named_track_per_rank(trace):
    assert "real-cluster microseconds" in trace["otherData"]["time"]
    assert trace["otherData"]["dilation"] == 40
    meta = _by_ph(trace, "M")
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert procs == {1: "job a", 2: "job b"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    for pid, hosts in ((1, ["h0", "h1", "h2", "h3"]), (2, ["h4", "h5"])):
        for rank, host in enumerate(hosts):
            assert threads[pid, rank + 1] == f"rank {rank} ({host})"
    for e in _by_ph(trace, "X") + _by_ph(trace, "s") + _by_ph(trace, "f"):
        assert (e["pid"], e["tid"]) in threads, e
    # Overlapping receives and the compute op overlapping a collective get lanes of their own.
    assert threads[1, 5] == "rank 0 (h0) recv" and "rank 0 (h0) recv 2" in threads.values()
    assert "rank 3 (h3) ops 2" in threads.values()


def test_trace_slices_cover_compute_collectives_and_transfers_in_real_time(trace):
    xs = _by_ph(trace, "X")
    assert {e["cat"] for e in xs} == {"compute", "collective", "transfer", "send", "recv"}
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in xs)
    first = min((e for e in xs if e["cat"] == "collective"), key=lambda e: e["ts"])
    assert first["ts"] == pytest.approx(1.0 / 40 * 1e6) and first["dur"] == pytest.approx(2.0 / 40 * 1e6)
    assert first["args"]["op"] == "all_reduce" and first["args"]["size_bytes"] == fakerun.GIB
    xfer = next(e for e in xs if e["cat"] == "transfer")
    assert xfer["args"]["size_bytes"] == round(268435 / 1e-3)  # real bytes, not emulated


def test_trace_slices_nest_properly_on_every_track(trace):
    per_track = {}
    for e in _by_ph(trace, "X"):
        per_track.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in per_track.values():
        stack = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1], "partial overlap on one track"
            stack.append(end)


def test_every_flow_starts_in_the_sending_op_and_ends_in_its_receive(trace):
    starts = {e["id"]: e for e in _by_ph(trace, "s")}
    ends = {e["id"]: e for e in _by_ph(trace, "f")}
    assert len(starts) == len(_by_ph(trace, "s")) and starts.keys() == ends.keys()
    xfers = [e for e in _by_ph(trace, "X") if e["cat"] == "transfer"]
    assert len(starts) == len(xfers) == 2 * 4 * 6 + 1
    slices = _by_ph(trace, "X")

    def enclosing(ev):
        found = [x for x in slices if (x["pid"], x["tid"]) == (ev["pid"], ev["tid"])
                 and x["ts"] < ev["ts"] < x["ts"] + x["dur"]]
        assert len(found) == 1, ev
        return found[0]

    for fid, s in starts.items():
        f = ends[fid]
        assert s["bp"] == f["bp"] == "e" and s["name"] == f["name"] and s["cat"] == f["cat"]
        sent, got = enclosing(s), enclosing(f)
        assert got["cat"] == "transfer" and sent["cat"] in ("collective", "send")
        assert sent["args"]["op_id"] == got["args"]["op_id"]
        assert sent["tid"] == got["args"]["src"] + 1 or sent["cat"] == "send"


def test_trace_flow_start_is_clamped_into_a_send_that_ended_first(trace):
    (s,) = [e for e in _by_ph(trace, "s") if e["pid"] == 2]
    send = next(e for e in _by_ph(trace, "X") if e["cat"] == "send")
    assert send["ts"] < s["ts"] < send["ts"] + send["dur"]


def test_trace_of_a_run_that_died_has_no_dangling_flows():
    evs = [e for e in fakerun.events() if not (e["kind"] == "collective" and e["rank"] == 0)]
    t = chrometrace.build(evs, [("a", ["h0", "h1", "h2", "h3"]), ("b", ["h4", "h5"])], 40.0, 1e-3)
    assert len(_by_ph(t, "s")) == len(_by_ph(t, "f")) == 2 * 3 * 6 + 1  # rank 0 sent nothing that shows


# -- links.csv ----------------------------------------------------------------------

PROC_NET_DEV = """\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:  123456     100    0    0    0     0          0         0   123456     100    0    0    0     0       0          0
ab-s1-eth3: 13500000    1500    0    0    0     0          0         0     5683      49    0    0    0     0       0          0
ab-s10-eth12:98765432101 7    0    0    0     0          0         0 12345678901234 9    0    0    0     0       0          0
"""


def test_parse_proc_net_dev():
    from emulator.run.fidelity import parse_proc_net_dev
    assert parse_proc_net_dev(PROC_NET_DEV) == {"lo": (123456, 123456), "ab-s1-eth3": (5683, 13500000),
                                                "ab-s10-eth12": (12345678901234, 98765432101)}
    assert parse_proc_net_dev("") == {}
    assert parse_proc_net_dev("garbage: x y\n") == {}


def test_read_counters_reads_only_the_devices_asked(monkeypatch):
    import builtins

    from emulator.run import fidelity
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda path, *a, **k: io.StringIO(PROC_NET_DEV)
                        if path == "/proc/net/dev" else real_open(path, *a, **k))
    assert fidelity.read_counters(["ab-s1-eth3", "gone0"]) == {"ab-s1-eth3": (5683, 13500000)}


def test_links_csv_columns_and_units(runs):
    with open(runs["fast"][0] / "links.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert tuple(rows[0]) == links.COLUMNS == ("t_s", "link", "src", "dst", "util", "gbps")
    parsed = links.read_csv(str(runs["fast"][0] / "links.csv"))
    assert len(parsed) == 9 * 2 * 6  # 9 intervals, both directions of 6 host links
    full = [r for r in parsed if (r["src"], r["dst"]) == ("h0", "s0")]
    assert [r["t_s"] for r in full][:2] == [pytest.approx(1 / 40), pytest.approx(2 / 40)]  # real-cluster s
    assert all(r["util"] == pytest.approx(1.0) and r["gbps"] == pytest.approx(400.0) for r in full)
    assert {r["link"] for r in full} == {"h0-s0"}


def test_sampler_skips_counter_resets_and_missing_readings():
    readings = iter([{("a", "b"): 0, ("b", "a"): 0}, {("a", "b"): 10**6}, {("a", "b"): 10, ("b", "a"): 5}])
    out = io.StringIO()
    out.close = lambda: None
    s = links.LinkSampler(out, lambda: next(readings), {("a", "b"): ("a-b", 100.0), ("b", "a"): ("a-b", 100.0)},
                          scale_link=1e-3, dilation=10.0, t0=0.0)
    assert s.sample(0.0) == []
    (row,) = s.sample(1.0)  # b -> a had no reading
    # 8 Mb/s emulated is 8 Gb/s at scale.link 1e-3: 0.08 of a 100 Gb/s link; 1 s is 0.1 s real.
    assert row == (0.1, "a-b", "a", "b", pytest.approx(0.08), pytest.approx(8.0))
    assert s.sample(2.0) == []  # a -> b went backwards (reset); b -> a had no baseline


def test_counter_reader_maps_switch_ports_to_directed_links():
    """Every switch port (OVS or kernel bridge) is a root-namespace device:
    its tx is switch -> peer, and on a host port its rx is host -> switch."""
    from topologies import rail_optimized
    fab = rail_optimized(2, 2, 1)
    asked = []

    def read_devs(devs):
        asked.append(sorted(devs))
        return {d: (len(d) * 100, len(d)) for d in devs if d != "rail1-h3"}  # one device gone

    read = linksampler.counter_reader(fab, intf=lambda n, p: f"{n}-{p}", read_devs=read_devs)
    got = read()
    assert len(asked) == 1  # one read for every switch
    assert got[("rail0", "spine0")] == len("rail0-spine0") * 100  # switch tx
    assert got[("spine0", "rail0")] == len("spine0-rail0") * 100  # the other end's tx
    assert got[("h0", "rail0")] == len("rail0-h0")                 # host -> switch: switch rx
    assert got[("nvl0", "h0")] == len("nvl0-h0") * 100 and got[("h0", "nvl0")] == len("nvl0-h0")
    assert ("rail1", "h3") not in got and ("h3", "rail1") not in got
    assert set(got) | {("rail1", "h3"), ("h3", "rail1")} == set(links.directed_links(fab))


def test_sampler_thread_warns_and_never_raises(tmp_path):
    warnings = []

    def broken():
        raise RuntimeError("/proc/net/dev: unreadable")

    sampler = links.LinkSampler(open(tmp_path / "links.csv", "w"), broken, {}, scale_link=1, dilation=1, t0=0)
    th = linksampler.SamplerThread(sampler, interval_s=0.01, log=warnings.append).start()
    th.stop()
    assert len(warnings) == 1 and "links.csv sampling stopped" in warnings[0]
    assert (tmp_path / "links.csv").read_text() == "t_s,link,src,dst,util,gbps\n"


def test_sampler_thread_samples_until_stopped(tmp_path):
    reads, enough = [], threading.Event()

    def read():
        reads.append(1)
        if len(reads) >= 3:
            enough.set()
        return {("a", "b"): 1000 * len(reads)}

    out = open(tmp_path / "links.csv", "w")
    sampler = links.LinkSampler(out, read, {("a", "b"): ("a-b", 1.0)}, scale_link=1, dilation=1, t0=0)
    th = linksampler.SamplerThread(sampler, interval_s=0.001, log=pytest.fail).start()
    assert enough.wait(10)
    th.stop()
    assert out.closed
    rows = links.read_csv(str(tmp_path / "links.csv"))
    assert len(rows) == len(reads) - 1 and all(r["src"] == "a" for r in rows)


# -- plots ---------------------------------------------------------------------------



def test_run_plots_are_non_empty_pngs(runs):
    folder = runs["fast"][0] / "plots"
    assert sorted(os.listdir(folder)) == sorted(plots.FILES.values())
    assert all(fakerun.is_png(folder / f) for f in plots.FILES.values())


def test_the_heatmap_drawn_from_links_in_memory_needs_no_links_csv_yet(runs, tmp_path):
    """The parent may still be writing links.csv while a child draws from the grid it was handed."""
    from experiment.outputs import links as links_mod

    run_dir, _ = runs["fast"]
    grid = links_mod.LinkGrid.from_rows(links_mod.read_csv(str(run_dir / "links.csv")))
    summary = json.loads((run_dir / "summary.json").read_text())
    written = plots.write_all(str(tmp_path), summary, lambda m: None, links=grid)
    assert not (tmp_path / "links.csv").exists()
    assert str(tmp_path / "plots" / plots.FILES["links"]) in written
    assert fakerun.is_png(tmp_path / "plots" / plots.FILES["links"])


def test_a_plot_failure_is_a_warning(tmp_path):
    warnings = []
    written = plots.write_all(str(tmp_path), {"name": "x", "jobs": [{"name": "j"}]}, warnings.append)
    assert written == [] and len(warnings) == 2 and all("warning" in w for w in warnings)


def test_no_matplotlib_no_plots_and_one_warning(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    warnings = []
    assert plots.write_all(str(tmp_path), {"jobs": []}, warnings.append) == []
    assert len(warnings) == 1 and "matplotlib" in warnings[0]


def test_struct_sizes_match_the_agent_wire_format():
    # The test above builds frames by hand; keep it honest if the format moves.
    assert agent_mod.HEADER.size == struct.calcsize("!IQII") and agent_mod.HELLO.size == 4


def test_agent_frames_cross_a_socket_whole_with_their_crc():
    """Frames go out as header + payload view in one call and come back whole;
    the cached CRC of a transfer's full slices is the payload's CRC."""
    import socket
    import zlib
    ag = agent_mod.Agent(_plan(rank=3, slice_bytes=4096))
    a, b = socket.socketpair()
    with a, b:
        frames = [(7, 0, 4096), (7, 4096, 4096), (7, 8192, 100), (9, 0, 4096)]
        for tid, sent, n in frames:
            data, crc = ag._slice(tid, sent, n)
            assert crc == zlib.crc32(bytes(data)) and len(data) == n
            agent_mod._send_frame(a, agent_mod.HEADER.pack(tid, sent, n, crc), data)
        a.shutdown(socket.SHUT_WR)
        hdr, body = bytearray(agent_mod.HEADER.size), bytearray(4096)
        for tid, sent, n in frames:
            assert agent_mod._recv_exact(b, memoryview(hdr), len(hdr))
            got_tid, got_sent, got_n, crc = agent_mod.HEADER.unpack(hdr)
            assert (got_tid, got_sent, got_n) == (tid, sent, n)
            assert agent_mod._recv_exact(b, memoryview(body), n) and zlib.crc32(memoryview(body)[:n]) == crc
        assert not agent_mod._recv_exact(b, memoryview(hdr), len(hdr))  # closed between frames
    assert set(ag.crcs) == {((7 * 7919) % 4096, 4096), ((9 * 7919) % 4096, 4096)}  # full slices only


def test_agent_send_gate_waits_for_earlier_receives_then_the_matching_share():
    """A send of step 3 may go up to byte b once its earlier receives are
    complete and b/size of its gate receive has arrived; zero-byte receives
    count as done."""
    ag = agent_mod.Agent(_plan(slice_bytes=100, ops=[Op(
        "0", "collective", recvs=(Recv(1, 1, 0, 200), Recv(2, 1, 1, 0), Recv(3, 1, 2, 200)),
        sends=(Send(4, 1, 3, 400, after=(1, 2), follow=(3,)),))]))
    (x,) = ag.ops[0].sends
    ag._received(3, 100)  # half the gate step's share is there, but step 0 is not
    assert not ag._gate_ok(x, 100)
    ag._received(1, 100)
    assert not ag._gate_ok(x, 100)
    assert ag._received(1, 100)  # step 0 complete; step 1 is empty
    assert ag._gate_ok(x, 200) and not ag._gate_ok(x, 201)
    assert ag._received(3, 100) and ag._gate_ok(x, 400)


def test_agent_send_gate_follows_the_plans_dependencies_not_step_order():
    """A double binary tree: the send of chunk 1 depends on chunk 1's receives
    only, so the other tree's slower receive at an earlier step does not hold it."""
    ag = agent_mod.Agent(_plan(slice_bytes=100, ops=[Op(
        "0", "collective", recvs=(Recv(1, 1, 0, 200), Recv(2, 2, 1, 200)),
        sends=(Send(3, 1, 2, 200, follow=(2,)),))]))
    (x,) = ag.ops[0].sends
    assert not ag._gate_ok(x, 100)
    ag._received(2, 100)  # tid 1 (the other tree, step 0) has nothing yet
    assert ag._gate_ok(x, 100) and not ag._gate_ok(x, 101)
