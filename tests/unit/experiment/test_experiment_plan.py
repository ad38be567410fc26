"""Planning and config without root: every rank of every collective instance
gets its transfers, sizes scale, and bad input names file and key."""
import os

import pytest

from badinput import InputError
from emulator.testbed.shaping import htb_cmds
from experiment import model, placement
from experiment.outputs.summary import bus_factor, job_results
from experiment.plan import build_plans

EXP = os.path.join(os.path.dirname(__file__), "..", "..", "..", "experiments")


def _plans(name, *sets):
    exp = model.load(os.path.join(EXP, name), list(sets))
    return exp, build_plans(exp, exp.fabric())


def test_every_rank_of_every_group_instance_moves_bytes():
    # Regression: one op id names an instance in each TP/DP group.
    exp, (job,) = _plans("gpt-small-3d.yaml")
    sent = {}
    for plan in job.ranks:
        for op in plan.ops:
            if op.kind == "collective":
                sent.setdefault((op.id, op.group), {})[plan.rank] = \
                    (sum(s.size_bytes for s in op.sends), sum(r.size_bytes for r in op.recvs))
    assert sent
    for key, per_rank in sent.items():
        assert len(per_rank) == op_group_size(job, key[1])
        assert all(s > 0 and r > 0 for s, r in per_rank.values()), key


def op_group_size(job, group):
    return len(job.trace.groups[group])


def test_ring_plan_bytes_follow_the_formula_and_scale():
    exp, (job,) = _plans("ring-single-switch.yaml", "jobs.0.workload.iterations=1")
    n, size = 8, round(1073741824 * exp.scale.bytes)
    for plan in job.ranks:
        (op,) = [o for o in plan.ops if o.kind == "collective"]
        assert sum(s.size_bytes for s in op.sends) == pytest.approx(2 * (n - 1) * size / n, abs=2 * n)
        assert len(plan.peers) == 1 and plan.inbound == 1


def test_same_server_peers_use_nvlink_addresses():
    exp, (job,) = _plans("ring-rail-16.yaml")
    fab = exp.fabric()
    for plan in job.ranks:
        for peer, addr in plan.peers.items():
            a, b = plan.host, job.hosts[peer]
            assert addr.ip == fab.node(b)["nvlink_ip" if fab.same_server(a, b) else "ip"]


def test_rail_aligned_order_crosses_servers_on_one_rail():
    exp = model.load(os.path.join(EXP, "ring-rail-32.yaml"))
    fab = exp.fabric()
    hosts = placement.job_hosts(exp.jobs[0], fab)
    for a, b in zip(hosts, hosts[1:] + hosts[:1]):
        if not fab.same_server(a, b):
            assert fab.node(a)["gpu"] == fab.node(b)["gpu"]


@pytest.mark.parametrize("sets,key", [
    (["topology.k=3"], "topology.k"),
    (["scale.link=2"], "scale.link"),
    (["scale.link=1e-9"], "scale.link"),
    (["controller.routing=magic"], "controller.routing"),
    (["jobs.0.hosts=[h0, h99]"], "jobs[0].hosts"),
    (["bogus=1"], "bogus"),
    (["jobs.0.workload.size_bytes=-5"], "size_bytes"),
    (["jobs.0.order=rail-aligned"], "jobs[0].order"),
    (["prediction.latency_us=-1"], "prediction.latency_us"),
    (["prediction.alpha_s=1e-6"], "prediction.alpha_s"),
])
def test_bad_input_names_file_and_key(sets, key):
    with pytest.raises((InputError,)) as ei:
        exp = model.load(os.path.join(EXP, "ring-fat-tree.yaml"), sets)
        build_plans(exp, exp.fabric())
    msg = str(ei.value)
    assert msg.startswith(os.path.join(EXP, "ring-fat-tree.yaml")) and key in msg and "\n" not in msg


def test_set_reads_exponents_without_a_dot_as_numbers():
    exp = model.load(os.path.join(EXP, "ring-rail-16.yaml"), ["scale.bytes=5e-4"])
    assert exp.scale.bytes == 5e-4


def test_busbw_factors_and_iteration_intervals():
    assert bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert bus_factor("all_gather", 4) == pytest.approx(0.75)
    ev = [{"kind": "collective", "job": "j", "rank": r, "op_id": f"it{i}/ar", "group": "world", "op": "all_reduce",
           "algorithm": "ring", "size_bytes": 1000, "ranks": 2, "iteration": i,
           "start": 10.0 * i, "end": 10.0 * i + 4 + r} for i in range(3) for r in range(2)]
    res = job_results("j", ev, dilation=2.0)
    assert res["iteration_time_s"]["all"] == [2.5, 5.0, 5.0]
    (c,) = res["collectives"]
    assert c["cct_s"] == pytest.approx(2.5) and c["count"] == 3


def test_htb_burst_stays_small_so_messages_are_shaped():
    cmds = htb_cmds("x-eth0", 90.0, 1000, mtu=9000)
    burst = int(cmds[1].split("burst ")[1].split()[0])
    assert burst <= 2 * 9000


def test_unwritable_out_is_a_one_line_input_error():
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "dtnet", "run", os.path.join(EXP, "ring-rail-16.yaml"),
                        "--out", "/proc/dtnet-nope"], capture_output=True, text=True)
    assert r.returncode == 2 and "--out" in r.stderr and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1


def test_clean_leaves_a_run_with_a_live_owner_alone(tmp_path):
    # The owner here is our parent (a shell or pytest's runner, not `dtnet`):
    # still a live run, so nothing may be touched.
    import json

    from emulator.testbed.clean import clean_run
    state = {"tag": "zz", "owner_pid": os.getppid(), "pids": {}, "status": "running"}
    (tmp_path / "state.json").write_text(json.dumps(state))
    assert clean_run(str(tmp_path), log=lambda *_: None) == 0
    assert json.loads((tmp_path / "state.json").read_text())["status"] == "running"


def test_control_packets_get_their_own_leaf_within_the_link_rate():
    cmds = htb_cmds("x-eth0", 10.0, 1000, mtu=9000)
    rates = {}
    for c in cmds:
        if c.startswith("class"):
            f = c.split()
            rates[f[f.index("classid") + 1]] = (float(f[f.index("rate") + 1].rstrip("mbit")),
                                                float(f[f.index("ceil") + 1].rstrip("mbit")) if "ceil" in f else None)
    assert rates["5:1"][0] == pytest.approx(10.0)
    # The leaves share the link: guaranteed rates add up to it, none may exceed it.
    assert rates["5:10"][0] + rates["5:20"][0] == pytest.approx(10.0)
    assert rates["5:10"][1] == rates["5:20"][1] == pytest.approx(10.0)
    assert all("flowid 5:10" in c for c in cmds if c.startswith("filter"))
    assert "default 20" in cmds[0]


def _u32_class(cmds: list[str], ip_packet: bytes) -> str:
    """The HTB leaf the planned u32 filters send this IPv4 packet to (all clauses of a filter must match)."""
    for c in cmds:
        if not c.startswith("filter"):
            continue
        f = c.split()
        ok = True
        for i, w in enumerate(f):
            if w == "match":
                width = {"u8": 1, "u16": 2, "u32": 4}[f[i + 1]]
                value, mask, off = int(f[i + 2], 16), int(f[i + 3], 16), int(f[i + 5])
                ok &= int.from_bytes(ip_packet[off:off + width], "big") & mask == value
        if ok:
            return f[f.index("flowid") + 1]
    return "5:20"  # htb default


def test_only_pure_acks_skip_the_data_queue():
    from scapy.layers.inet import IP, TCP
    cmds = htb_cmds("x-eth0", 10.0, 1000, mtu=9000)
    ts = [("NOP", None), ("NOP", None), ("Timestamp", (1, 2))]
    sack = ts + [("SAck", (1, 2, 3, 4))]

    def pkt(flags, payload=b"", opts=()):
        return bytes(IP(src="10.0.0.1", dst="10.0.0.2") / TCP(flags=flags, options=list(opts)) / payload)
    # Pure ACKs of every header length take the fast leaf.
    assert _u32_class(cmds, pkt("A")) == "5:10"
    assert _u32_class(cmds, pkt("A", opts=ts)) == "5:10"
    assert _u32_class(cmds, pkt("A", opts=sack)) == "5:10"
    # Anything carrying sequence space keeps its place: a 48-byte control message
    # (gloo's), a 1-byte segment, SYN, FIN.
    assert _u32_class(cmds, pkt("PA", b"x" * 48, ts)) == "5:20"
    assert _u32_class(cmds, pkt("A", b"x")) == "5:20"
    assert _u32_class(cmds, pkt("S")) == "5:20"
    assert _u32_class(cmds, pkt("FA", opts=ts)) == "5:20"


def test_tcp_counters_parse_snmp_and_netstat_pairs():
    from emulator.run.runner import parse_snmp_tcp
    text = ("TcpExt: SyncookiesSent TCPTimeouts TCPFastRetrans\nTcpExt: 0 3 7\n"
            "Tcp: RtoAlgorithm OutSegs RetransSegs\nTcp: 1 900 10\n")
    assert parse_snmp_tcp(text) == {"RtoAlgorithm": 1, "OutSegs": 900, "RetransSegs": 10}
    assert parse_snmp_tcp(text, prefix="TcpExt:")["TCPFastRetrans"] == 7


def test_faults_parse_and_check_the_link(tmp_path):
    from experiment import model
    base = ("name: f\ntopology: {kind: fat-tree, k: 4}\nscale: {link: 2.5e-5, bytes: 1.0e-3}\n"
            "jobs: [{workload: {collective: all_reduce, size_bytes: 1000000}}]\n")
    p = tmp_path / "e.yaml"
    p.write_text(base + "faults: [{at_ms: 5, link: [agg0_0, core0], state: down}, "
                        "{at_ms: 1, link: [core0, agg0_0], state: up}]\n")
    exp = model.load(str(p))
    assert [(f.at_ms, f.state) for f in exp.faults] == [(1.0, "up"), (5.0, "down")]  # in time order
    assert model.parse(model.to_dict(exp), file=exp.source) == exp
    for bad, key in (("{at_ms: 5, link: [h0, core0], state: down}", "faults[0].link"),
                     ("{at_ms: 5, link: [agg0_0, core0], state: flaky}", "faults[0].state"),
                     ("{at_ms: -1, link: [agg0_0, core0], state: down}", "faults[0].at_ms"),
                     ("{at_ms: 5, link: [agg0_0, core0], state: down, when: 3}", "faults[0].when")):
        p.write_text(base + f"faults: [{bad}]\n")
        with pytest.raises(model.InputError, match=key.replace("[", r"\[").replace("]", r"\]")):
            model.load(str(p))


@pytest.mark.parametrize("netns", [None, "dtnet-sw0"])
def test_fault_injector_cuts_the_switch_side_and_logs_an_event(tmp_path, netns):
    from emulator.run.faults import FaultInjector
    from experiment.model import Fault
    from topologies import fat_tree

    class TB:
        fabric = fat_tree(4)

        def intf(self, node, peer):
            return f"{node}-eth{self.fabric.port(node, peer)}"

        def ip_argv(self, node):
            # None: the machine's shared switch daemon; a name: the namespace of the run's own daemon.
            return ["ip"] if netns is None else ["ip", "-n", netns]

    calls = []

    def run(cmd, **_):
        calls.append(cmd)
        return type("R", (), {"returncode": 0, "stderr": ""})()
    ev_path = tmp_path / "events.jsonl"
    inj = FaultInjector(TB(), [Fault(10.0, ("h0", "edge0_0"), "down")], t0=100.0, dilation=40.0,
                        events_path=str(ev_path), log=lambda *_: None, run=run)
    assert inj.due_s(inj.faults[0]) == pytest.approx(100.4)  # 10 ms real x 40
    ev = inj.apply(inj.faults[0])
    ip = ["ip"] if netns is None else ["ip", "-n", netns]
    assert calls == [[*ip, "link", "set", "dev", f"edge0_0-eth{TB.fabric.port('edge0_0', 'h0')}", "down"]]
    import json
    assert ev["ok"] and json.loads(ev_path.read_text())["link"] == "h0-edge0_0"


def test_fidelity_reads_on_off_links_finely_and_caps_per_second():
    from emulator.run import fidelity

    class Mon:
        per_cpu_sample = 4
        cpu_idle = [(10.0 + i, 60.0) for i in range(8)]
        cpu_pressure = []
        # A periodic job's link: on (at rate, one quarter a touch above) for half of every second.
        link_samples = [(10.0 + i * 0.25, {"h0-s0": ((1.08, 1.0) if i % 4 == 0 else (0.92, 1.0)) if i % 4 < 2
                                           else (0.0, 0.0)}) for i in range(32)]
    fid = fidelity.evaluate(Mon(), [], 10.0, 18.0)
    checks = {c["name"]: c for c in fid["checks"]}
    assert checks["link_saturation"]["ok"] and checks["link_saturation"]["busy_utilization_p50"] >= 0.92
    assert checks["link_cap"]["ok"] and checks["link_cap"]["peak_utilization"] == pytest.approx(0.5)
    # A link over its rate for whole seconds fails, however it is sampled.
    Mon.link_samples = [(10.0 + i * 0.25, {"h0-s0": (1.2, 1.0)}) for i in range(32)]
    assert not {c["name"]: c for c in fidelity.evaluate(Mon(), [], 10.0, 18.0)["checks"]}["link_cap"]["ok"]


def test_a_replay_too_short_for_a_whole_second_is_judged_on_its_idle_share():
    from emulator.run import fidelity

    class Mon:
        per_cpu_sample = 4
        cpu_idle = [(10.5, 90.0)]  # the one reading falls in the first second, which is not counted
        cpu_pressure = []
        link_samples = []
        # Two cores: 0.25 s readings, 0.1 idle-seconds in each 0.5 s of CPU time: 20% idle.
        cpu_totals = [(10.0 + i * 0.25, 0.1 * i, 0.5 * i) for i in range(7)]

    def cpu():
        return {c["name"]: c for c in fidelity.evaluate(Mon(), [], 10.0, 11.5)["checks"]}["cpu"]
    assert not cpu()["ok"] and cpu()["idle_min_pct"] == pytest.approx(20.0)
    Mon.cpu_totals = [(10.0 + i * 0.25, 0.3 * i, 0.5 * i) for i in range(7)]
    assert cpu()["ok"] and cpu()["idle_min_pct"] == pytest.approx(60.0)
    # Readings outside the replay do not count; without two inside it nothing is judged (as before).
    Mon.cpu_totals = [(9.0, 0.0, 0.5), (12.0, 0.0, 10.0)]
    assert cpu()["ok"] and cpu()["idle_min_pct"] is None


def test_saturation_judges_the_bottleneck_not_the_links_feeding_it():
    from emulator.run import fidelity

    class Mon:
        per_cpu_sample = 4
        cpu_idle = [(10.0 + i, 60.0) for i in range(8)]
        cpu_pressure = []
        # Two hosts share an uplink: their own links carry half their rate each, the uplink all of its.
        link_samples = [(10.0 + i * 0.25, {"h0-leaf0": (0.5, 0.02), "h1-leaf0": (0.5, 0.02),
                                           "leaf0-spine0": (0.97, 0.03)}) for i in range(32)]

    def saturation():
        return {c["name"]: c for c in fidelity.evaluate(Mon(), [], 10.0, 18.0)["checks"]}["link_saturation"]
    assert saturation()["ok"] and saturation()["busy_utilization_p50"] == pytest.approx(0.97)
    # Switches that cannot keep up leave even the bottleneck short of its rate.
    Mon.link_samples = [(t, {k: (min(tx, 0.7), rx) for k, (tx, rx) in u.items()}) for t, u in Mon.link_samples]
    assert not saturation()["ok"] and saturation()["busy_utilization_p50"] == pytest.approx(0.7)
def _prediction(name, *sets):
    _, (job,) = _plans(name, *sets)
    ((key, times),) = job.predicted_s.items()
    return key, times


def test_each_collective_instance_gets_its_alpha_beta_time_in_real_units():
    # 1 GiB ring over 16 ranks at 400 Gb/s: 2(n-1)/n S/B, plus the pipeline's fill (one slice a step).
    key, times = _prediction("ring-fat-tree.yaml")
    assert key == ("all_reduce", "ring", 1 << 30, 16) and len(times) == 3
    stream_s = 2 * 15 / 16 * round((1 << 30) * 1e-3) * 8 / 10e6 / 40
    assert times[0] == pytest.approx(stream_s, rel=0.01) and times[0] > stream_s


def test_prediction_latency_is_real_time_per_step():
    _, (base, *_) = _prediction("ring-fat-tree.yaml")
    _, (slow, *_) = _prediction("ring-fat-tree.yaml", "prediction.latency_us=5")
    assert slow - base == pytest.approx(2 * 15 * 5e-6)  # 30 steps, each 5 us longer


def test_prediction_sends_in_server_hops_over_nvlink():
    # ring-rail-16.yaml runs the ring rail-aligned: its ranks are not in blocks per server, yet the model
    # must see which hops stay inside one (hierarchical: most of its bytes go over NVLink).
    _, (ring, *_) = _prediction("ring-rail-16.yaml")
    _, (flat, *_) = _prediction("ring-fat-tree.yaml")
    assert ring == pytest.approx(flat, rel=1e-3)
    _, (hier, *_) = _prediction("ring-rail-16.yaml", "jobs.0.workload.algorithm=hierarchical", "jobs.0.order=as-listed")
    _, (hier_400, *_) = _prediction("ring-rail-16.yaml", "jobs.0.workload.algorithm=hierarchical", "jobs.0.order=as-listed",
                                    "topology.nvlink_gbps=400")
    assert hier < ring / 2 and hier_400 > 2 * hier


def test_collectives_carry_prediction_and_ratio_when_planned():
    ev = [{"kind": "collective", "job": "j", "rank": r, "op_id": f"it{i}/ar", "group": "world", "op": "all_reduce",
           "algorithm": "ring", "size_bytes": 1000, "ranks": 2, "iteration": i,
           "start": 10.0 * i, "end": 10.0 * i + 4 + r} for i in range(2) for r in range(2)]
    (c,) = job_results("j", ev, dilation=2.0, predicted_s={("all_reduce", "ring", 1000, 2): [0.5, 2.0]})["collectives"]
    assert c["predicted_cct_s"] == pytest.approx(1.25) and c["cct_vs_predicted"] == pytest.approx(2.5 / 1.25)
    (c,) = job_results("j", ev, dilation=2.0)["collectives"]
    assert "predicted_cct_s" not in c and "cct_vs_predicted" not in c


def test_lateness_says_whether_it_is_the_start_or_the_replay():
    from emulator.run import fidelity
    go = 100.0
    # 64 ranks: first ops ready at the go, waking one after another (0.5 ms apart); then 2 more ops
    # each, ready when the one before ended, started 1 ms late.
    ev = [{"kind": "collective", "job": "j", "rank": r, "ready": go, "start": go + 0.0005 * r} for r in range(64)]
    ev += [{"kind": "collective", "job": "j", "rank": r, "ready": go + 5 + k, "start": go + 5.001 + k}
           for r in range(64) for k in range(2)]
    late = {c["name"]: c for c in fidelity.evaluate(None, ev, go, go + 8)["checks"]}["lateness"]
    assert not late["ok"] and late["p99_s"] == pytest.approx(0.031)  # 192 ops: the second latest
    assert late["start_max_s"] == pytest.approx(0.0315) and late["after_start_p99_s"] == pytest.approx(0.001)
    assert "ops ready at their job's start up to 31.5 ms, the others p99 1.0 ms" in late["detail"]
    # A second job starting later has its own go: its first ops are start ops too.
    ev2 = ev + [{"kind": "compute", "job": "k", "rank": 0, "ready": go + 2, "start": go + 2.0001}]
    start, later = fidelity.start_lateness(ev2)
    assert len(start) == 65 and len(later) == 128
    # Late in the replay: said as such.
    ev3 = [dict(e, start=e["start"] + (0.05 if e["ready"] > go else 0)) for e in ev]
    late = {c["name"]: c for c in fidelity.evaluate(None, ev3, go, go + 8)["checks"]}["lateness"]
    assert not late["ok"] and late["after_start_p99_s"] == pytest.approx(0.051)


def test_the_link_cap_allows_two_frames_ahead_on_slow_links():
    from emulator.run import fidelity
    # 2 x 9000-byte frames are 5.76% of a second at 2.5 Mb/s: HTB's burst, not a shaping failure.
    assert fidelity.link_cap_max(2.5, 9000) == pytest.approx(1.0576)
    assert fidelity.link_cap_max(40, 9000) == fidelity.link_cap_max(None, 9000) == fidelity.LINK_CAP_MAX

    class Mon:
        per_cpu_sample = 4
        cpu_idle = [(10.0 + i, 60.0) for i in range(8)]
        cpu_pressure = []
        links = {"s0-eth1": ("h0-s0", 2.5), "s0-eth2": ("h1-s0", 40.0)}
        link_samples = [(10.0 + i * 0.25, {"h0-s0": (1.055, 1.0), "h1-s0": (1.0, 1.0)}) for i in range(32)]

    def cap():
        return {c["name"]: c for c in fidelity.evaluate(Mon(), [], 10.0, 18.0, frame_bytes=9000)["checks"]}["link_cap"]
    assert cap()["ok"] and cap()["threshold"] == pytest.approx(1.0576)
    # The same excess on the 40 Mb/s link is a shaping failure, named with its own cap.
    Mon.link_samples = [(10.0 + i * 0.25, {"h0-s0": (1.0, 1.0), "h1-s0": (1.055, 1.0)}) for i in range(32)]
    assert not cap()["ok"] and cap()["threshold"] == fidelity.LINK_CAP_MAX and cap()["peak_utilization"] == pytest.approx(1.055)
    # Without the frame size (an older caller), every link has the 5% margin.
    assert not {c["name"]: c for c in fidelity.evaluate(Mon(), [], 10.0, 18.0)["checks"]}["link_cap"]["ok"]
