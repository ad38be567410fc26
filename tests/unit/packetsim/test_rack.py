"""RACK loss detection (transport.tcp.loss_detection: rack) on hand-computable cases: one flow
h0 -> h1 sprayed per packet over two paths whose one-way delays differ by 60 us.

Every link runs at 10 Gb/s (a 9000-byte frame takes 7.2 us). The fast path h0-s0-a-s1-h1 has four
links of 50 us; the slow one h0-s0-b-s1-h1 has s0-b at 110 us: a segment sprayed onto it arrives
60 us late, and the segments sprayed onto the fast path in those 60 us (about eight sent, half of
them fast) overtake it. ns-3's rule takes three SACKed segments above a hole for a loss: it resends
segments that were only late and halves its window. RACK's reordering window is a quarter of the
minimum RTT: 2 x 200 us of propagation plus the frames' serialization, about 430 us, so about
107 us, more than 60 us: once it has seen reordering, a late segment is delivered before RACK
would call it lost. The ACKs come back on the fast path.
"""
from __future__ import annotations

import os

import pytest

from packetsim import ns3, runner, scenario
from packetsim.transport import TLP_FLOOR_S, Transport
from tests.unit.packetsim.test_packetsim_engine import fake_net, path
from tests.unit.packetsim.test_tail_loss_probe import _cut_tail, scenario_lines

needs_ns3 = pytest.mark.skipif(not ns3.available(), reason="ns-3 (libns3-dev) is not installed")
SEGMENT = 8948  # MTU 9000 less headers
H0, S0, A, B, S1, H1 = range(6)
FAST, SLOW = [H0, S0, A, S1, H1], [H0, S0, B, S1, H1]
HOST_US, SLOW_US = 50.0, 110.0  # s0-b is the one "fabric" link: 60 us later than the others
SIZE = 20_000_000


def _sprayed(tmp_path, loss_detection=None, tlp=False, cut=None, size=SIZE, spray=True, cable=(S0, A),
             slow_us=SLOW_US, tlp_rack=True):
    """The driver's results for one flow of `size` bytes ready at t0, sprayed at s0 over a and b
    (spray False: on the fast path only).
    cut: (from_s, until_s) since t0, the cable (s0-a unless said) down then (both ends drop what
    arrives, ACKs too). tlp_rack: with the probe, RACK's rule for the oldest segment."""
    net = fake_net(["h0", "s0", "a", "b", "s1", "h1"],
                   [(H0, S0, 10.0), (S0, A, 10.0), (A, S1, 10.0), (S0, B, 10.0), (B, S1, 10.0), (S1, H1, 10.0)])
    net.link_kind[[3, 9]] = 1  # s0-b, both ways: the slow link
    sc = scenario.Scenario()
    c = sc.conn(0, 0, 1, ["h0", "h1"])
    sc.add(scenario.TRANSFER, size, conn=c)
    sc.paths.append(path(net, FAST))
    sc.sprays = [(c, S0, [A, B]), (c, B, [S1])] if spray else []
    if cut is not None:
        both = path(net, list(cable)).tolist() + path(net, list(cable[::-1])).tolist()
        sc.linkstates = [(cut[0], both, False), (cut[1], both, True)]
    sc.slice_bytes, sc.bin_s = 1, 1e-3
    os.makedirs(tmp_path, exist_ok=True)
    kw = {"loss_detection": loss_detection} if loss_detection else {}
    t = Transport(switch_buffer_bytes=4 << 20, latency_us={"host": HOST_US, "fabric": slow_us, "nvlink": 0.0},
                  spray=spray, tail_loss_probe=tlp or loss_detection == "rack", tlp_rack=tlp_rack, **kw)
    res = runner.execute(sc, net, t, str(tmp_path))[0]
    assert res["meta"]["tasks_done"] == 1 and res["conns"][0]["bytes"] == size, res["meta"]
    return res


def _line_rate_s(size):
    return size / (10e9 / 8 * SEGMENT / 9000)


@needs_ns3
def test_reordering_within_a_quarter_of_the_min_rtt_is_not_taken_for_loss(tmp_path):
    # RACK: no retransmission, and the flow ends as on the fast path alone (22.1 ms: slow start and
    # Cubic at this round trip, above the 16.1 ms of the line rate). ns-3's rule: retransmissions,
    # windows halved, and one 200 ms RTO besides.
    runs = {how: _sprayed(tmp_path / how, how) for how in ("dupack", "rack")}
    alone = _sprayed(tmp_path / "alone", "rack", spray=False)
    retx = {how: r["conns"][0]["retx"] for how, r in runs.items()}
    ends = {how: r["tasks"][0]["end"] for how, r in runs.items()}
    assert retx["rack"] == 0 and retx["dupack"] >= 10 and alone["conns"][0]["retx"] == 0, retx
    assert ends["rack"] <= 1.05 * alone["tasks"][0]["end"], (ends, alone["tasks"][0]["end"])
    assert ends["dupack"] > 1.5 * ends["rack"], ends


@needs_ns3
def test_a_real_loss_is_repaired_within_a_round_trip_and_the_reordering_window_not_by_the_rto(tmp_path, monkeypatch):
    # The fast path's cable is down for 10 us at 8 ms, mid-flow: a segment is lost. RACK marks it
    # once a segment sent more than reo_wnd (about 107 us) after it is SACKed, a round trip (about
    # 430 us) after that one left: the segment is sent again about 540 us after it first left
    # (the driver's trace of the connection), and the flow ends long before the 200 ms RTO (the
    # rest of the delay is Cubic regrowing its window after recovery, as after ns-3's own rule
    # without spraying).
    # The retransmission draws no DSACK (the receiver never had the segment): the recovery is not
    # undone and its cut ssthresh stays.
    monkeypatch.setenv("DTNET_NS3_TRACE", "0")
    clean = _sprayed(tmp_path / "clean", "rack")
    cut = _sprayed(tmp_path / "cut", "rack", cut=(7.98e-3, 7.99e-3))
    assert cut["conns"][0]["retx"] == 1 and cut["conns"][0]["probes"] == 0, cut["conns"]
    again = [t for t in _times(cut, "tx").values() if len(t) > 1]
    assert len(again) == 1, again
    assert 430e-6 < again[0][1] - again[0][0] < 430e-6 + 107e-6 + 100e-6, again
    assert cut["tasks"][0]["end"] - clean["tasks"][0]["end"] < 0.05, (cut["tasks"][0]["end"], clean["tasks"][0]["end"])
    assert cut["conns"][0]["undos"] == 0, cut["conns"]
    trace = _trace(cut)
    entered = [i for i, (_, what, v) in enumerate(trace) if what == "state" and v == "CA_RECOVERY"]
    assert len(entered) == 1, entered
    cwnd0 = _last(trace[:entered[0]], "cwnd")
    cut_to = [int(v) for _, what, v in trace[entered[0]:] if what == "ssthresh"]
    assert cut_to[0] < cwnd0 and cut_to == cut_to[:1], (cwnd0, cut_to)  # cut once, never put back


@needs_ns3
def test_a_lost_tail_is_still_probed_with_rack(tmp_path):
    # The flow's last segments and their ACKs are lost (the fast cable down from just before the end
    # until 1 ms after): no later segment, so RACK needs the probe, which leaves 2 x SRTT + 2 ms after
    # the last ACK; its SACK marks the rest lost (RACK's rule) and recovery resends them: the flow
    # ends a few ms late, not after the 200 ms RTO.
    size = 2_000_000
    clean = _sprayed(tmp_path / "clean", "rack", size=size)["tasks"][0]["end"]
    res = _sprayed(tmp_path / "cut", "rack", size=size, cut=(clean - 150e-6, clean + 1e-3))
    assert res["conns"][0]["probes"] >= 1, res["conns"]
    assert res["tasks"][0]["end"] < clean + 10e-3, (res["tasks"][0]["end"], clean)


@needs_ns3
def test_a_dsack_widens_the_reordering_window(tmp_path):
    # The slow link 110 us later than the fast one (SLOW_US 160): a late segment overtaken by
    # segments sent more than reo_wnd (107 us) after it is taken for lost and sent again; the copy
    # reaches a receiver that has the segment, whose next ACK carries a DSACK, and RACK doubles its
    # window (214 us, RFC 8985's reo_wnd_mult): a few needless retransmissions, then none. ns-3's
    # rule resends on every overtaking by three.
    retx = {how: _sprayed(tmp_path / how, how, slow_us=160.0)["conns"][0]["retx"] for how in ("dupack", "rack")}
    assert 1 <= retx["rack"] <= 4 and retx["dupack"] >= 15, retx


@needs_ns3
def test_a_recovery_whose_retransmissions_are_all_dsacked_is_undone(tmp_path, monkeypatch):
    # The late link at 160 us (as above): RACK's one recovery, at 1.4 ms, resends segments that were
    # only late; each copy draws a DSACK. Once every retransmission of the episode is DSACKed, the
    # cut is undone as Linux's tcp_try_undo_dsack: cwnd back to the window before the recovery
    # (max(cwnd, prior cwnd)) and ssthresh to max(ssthresh, 3/4 of that window, or the ssthresh
    # before: Linux's tcp_current_ssthresh).
    monkeypatch.setenv("DTNET_NS3_TRACE", "0")
    res = _sprayed(tmp_path / "late", "rack", slow_us=160.0)
    trace = _trace(res)
    entered = [i for i, (_, what, v) in enumerate(trace) if what == "state" and v == "CA_RECOVERY"]
    assert len(entered) == 1 and res["conns"][0]["undos"] == 1 and res["conns"][0]["retx"] >= 1, (entered, res["conns"])
    cwnd0, ss0 = _last(trace[:entered[0]], "cwnd"), _last(trace[:entered[0]], "ssthresh")
    after = trace[entered[0]:]
    cut = min(int(v) for _, what, v in after if what == "ssthresh")
    assert cut < ss0, (cut, ss0)
    restored = max(ss0, cwnd0 // 2 + cwnd0 // 4)
    back = [t for t, what, v in after if what == "ssthresh" and int(v) == restored]
    assert back, (restored, after[:20])
    assert _last([x for x in after if x[0] <= back[0]], "cwnd") >= cwnd0, after[:20]
    assert _last(trace, "ssthresh") == restored  # nothing cut it again


def _trace(res) -> list[tuple[float, str, str]]:
    """The driver's trace of connection 0's cwnd, ssthresh and TCP state, in order."""
    return [(float(f[0]), f[1], f[2]) for f in (line.split() for line in res["stderr"])
            if len(f) == 3 and f[1] in ("cwnd", "ssthresh", "state")]


def _last(trace, what: str) -> int:
    return [int(v) for _, w, v in trace if w == what][-1]


def _times(res, kind: str) -> dict[int, list[float]]:
    """From the driver's trace of connection 0 (DTNET_NS3_TRACE): each data segment's times of
    kind "tx" (left TCP) or "rx" (reached the receiver's TCP), by sequence number."""
    out: dict[int, list[float]] = {}
    for line in res["stderr"]:
        f = line.split()  # TIME tx|rx SEQ len LEN ...
        if len(f) > 4 and f[1] == kind and f[4] != "0":
            out.setdefault(int(f[2]), []).append(float(f[0]))
    return out


@needs_ns3
def test_a_loss_with_too_few_segments_after_it_is_found_by_racks_timer(tmp_path, monkeypatch):
    # One flow of 2 MB on the fast path alone (no reordering); the third-last segment is lost (the
    # cable a-s1 down for 6 us around its arrival at s1, taken from a run without the cut: 57.2 us
    # before it reaches h1). Two segments follow it, sent 7.2 and 14.4 us later, less than reo_wnd:
    # two SACKs, no third, so ns-3's rule never fires, nor does the probe (not armed once SACKs
    # came: Linux's Disorder state), and with the probe alone the 200 ms RTO resends it. RACK arms
    # its timer for the rest of the window + 2 ms (Linux's TCP_TIMEOUT_MIN): the segment is sent
    # again about RTT (430 us) + reo_wnd (107 us) + 2 ms after it first left. So does RACK's rule
    # for the oldest segment, with ns-3's loss detection ("dupack"): its own timer, for the head.
    monkeypatch.setenv("DTNET_NS3_TRACE", "0")
    size = 2_000_000
    clean = _sprayed(tmp_path / "clean", "rack", size=size, spray=False)
    tx, rx = _times(clean, "tx"), _times(clean, "rx")
    t0 = min(t[0] for t in tx.values())  # the flow starts at t0: its first segment
    lost = sorted(rx)[-3]
    at = rx[lost][0] - t0 - (HOST_US * 1e-6 + 7.2e-6)
    runs = {how: _sprayed(tmp_path / how, how.replace("alone", "dupack"), tlp=True, size=size, spray=False,
                          cut=(at - 3e-6, at + 3e-6), cable=(A, S1), tlp_rack=how != "alone")
            for how in ("dupack", "rack", "alone")}  # with the probe all three
    for how in ("dupack", "rack"):
        res = runs[how]
        again = {seq: t for seq, t in _times(res, "tx").items() if len(t) > 1}
        assert list(again) == [lost] and res["conns"][0]["probes"] == 0, (how, again, res["conns"])
        first, resent = _times(res, "tx")[lost]
        assert 430e-6 + 2e-3 < resent - first < 430e-6 + 107e-6 + 2e-3 + 100e-6, (how, resent - first)
        assert res["tasks"][0]["end"] < clean["tasks"][0]["end"] + 3e-3, (how, res["tasks"][0]["end"])
    assert runs["alone"]["tasks"][0]["end"] > runner.RTO_MIN_S, runs["alone"]["tasks"][0]["end"]


@needs_ns3
def test_a_probe_back_sooner_than_the_min_rtt_is_not_taken_and_the_rto_resends_the_tail(tmp_path):
    # RFC 8985 section 6.2 step 2 and Linux's tcp_rack_advance ignore the delivery of a segment sent
    # again that comes back sooner than the minimum RTT (it may be the first copy's); the probe is
    # one (Linux's __tcp_retransmit_skb sets TCPCB_EVER_RETRANS). With no link latency a round trip
    # is serialization: 7.2 us for a full frame at 10 Gb/s (the minimum RTT reads 7 us), 0.84 us
    # for a last segment of 1,000 bytes. The tail is lost (the cable down from 0.15 to 1 ms) and the
    # probe resends the last segment. Full, its SACK comes 7.25 us after and is taken: RACK marks
    # the rest lost, on its timer 2 ms later (the same ACK acknowledges a segment sent at 40 us,
    # whose round trip Linux's tcp_clean_rtx_queue gives tcp_rack_advance last). Short, back after
    # 0.9 us, it is not, nothing else marks them, and the 200 ms RTO resends them, as Linux's rule
    # would (its microsecond clock reads 0 or 1 us, under 7). The older mode's rule marks every
    # segment below the probe's SACK lost whatever its round trip.
    down, up = 150e-6, 1e-3
    ends = {}
    for tail in (0, 1000):
        for how in ("rack", "dupack"):
            res = _cut_tail(tmp_path / f"{how}{tail}", 30 if tail == 0 else 29, down, up, True, tail_bytes=tail,
                            latency_us=0.0, loss_detection=how)
            assert res["conns"][0]["probes"] == 1 and res["conns"][0]["retx"] > 1, (how, tail, res["conns"])
            ends[how, tail] = res["tasks"][0]["end"]
    assert ends["rack", 1000] > down + runner.RTO_MIN_S, ends
    assert ends["rack", 0] < down + 2 * TLP_FLOOR_S + 1e-3, ends
    assert max(ends["dupack", 0], ends["dupack", 1000]) < down + TLP_FLOOR_S + 1e-3, ends


@needs_ns3
def test_the_drivers_trace_is_kept_in_the_run_folder_when_asked_for(tmp_path, monkeypatch):
    # how a run with a controller in the loop (which only `dtnet run` drives) is traced
    kept = tmp_path / "on" / "packet-scenario.txt.err"
    _cut_tail(tmp_path / "off", 3, 1.0, 2.0, True)
    monkeypatch.setenv("DTNET_NS3_TRACE", "0")
    _cut_tail(tmp_path / "on", 3, 1.0, 2.0, True)
    assert not (tmp_path / "off" / kept.name).exists()
    sent = [ln.split() for ln in kept.read_text().splitlines() if ln.split()[1:2] == ["tx"]]
    assert sum(int(f[4]) for f in sent) == 3 * SEGMENT, sent


def test_the_scenario_asks_for_rack_only_when_the_transport_does(tmp_path):
    texts = {name: scenario_lines(tmp_path, name, t) for name, t in {
        "default": Transport(), "dupack": Transport(loss_detection="dupack"), "tlp": Transport(tail_loss_probe=True),
        "rack": Transport(tail_loss_probe=True, loss_detection="rack")}.items()}
    assert texts["dupack"] == texts["default"] and "rack" not in texts["default"]
    assert [ln for ln in texts["rack"] if ln not in texts["tlp"]] == ["rack"]
    with pytest.raises(ValueError):
        Transport(loss_detection="rack")  # RACK runs in the probe's socket


@needs_ns3
def test_summary_says_how_losses_are_detected(tmp_path):
    import json

    from dtnet.cli import main
    from tests.unit.packetsim.test_packetsim_engine import ring, write
    for how in ("dupack", "rack"):
        out = tmp_path / f"out{how}"
        data = ring(size=1 << 20, transport={"tcp": {"loss_detection": how}})
        assert main(["run", write(tmp_path, data, f"ring{how}.yaml"), "--out", str(out)]) == 0
        s = json.loads((out / "summary.json").read_text())
        assert s["model"]["transport"]["loss_detection"] == how
        assert s["model"]["transport"]["tail_loss_probe"] is (how == "rack")  # rack brings the probe
        said = [x for x in s["model"]["statements"] if x.startswith("losses detected by")]
        assert len(said) == 1 and ("RACK" if how == "rack" else "DupThresh") in said[0], said
