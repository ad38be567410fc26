"""topology.latency_us: validated in the model, dilated, planned as netem over
HTB on every fabric link (not NVLink), refused where netem does not exist."""
import os
import subprocess
import sys

import pytest
import yaml

from badinput import InputError
from emulator.testbed import datapath
from emulator.testbed import lifecycle
from emulator.testbed.shaping import htb_cmds, netem_limit_packets
from experiment import model
from topologies import rail_optimized

BASE = {"name": "lat", "topology": {"kind": "leaf-spine", "leaves": 1, "spines": 0, "hosts_per_leaf": 4},
        "scale": {"link": 2.5e-5, "bytes": 1e-3},
        "jobs": [{"name": "j0", "hosts": "all",
                  "workload": {"collective": "all_reduce", "algorithm": "ring", "size_bytes": 1048576}}]}


def _exp(latency=None, **topo):
    data = yaml.safe_load(yaml.safe_dump(BASE))
    data["topology"].update(topo)
    if latency is not None:
        data["topology"]["latency_us"] = latency
    return model.parse(data, "lat.yaml")


def test_latency_is_real_microseconds_stretched_by_the_dilation():
    exp = _exp(5)
    assert exp.latency_us == 5
    assert exp.scale.dilation == pytest.approx(40)
    assert exp.link_delay_us == pytest.approx(200)  # 5 us x (1e-3 / 2.5e-5)
    assert exp.fabric().hosts == _exp().fabric().hosts  # not a fabric parameter
    assert _exp().latency_us == 0 and _exp().link_delay_us == 0


def test_a_fabric_file_takes_a_latency_too():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    exp = model.load(os.path.join(root, "experiments", "fabric-file-dual-tor.yaml"), ["topology.latency_us=5"])
    assert exp.latency_us == 5 and exp.topology["file"].endswith("dual-tor-4gpu.yaml")
    assert len(exp.fabric().hosts) == 4


def test_config_yaml_keeps_the_latency_and_omits_a_zero(tmp_path):
    for latency, written in ((7.5, 7.5), (None, None)):
        path = tmp_path / "config.yaml"
        model.write_resolved(_exp(latency), str(path))
        topo = yaml.safe_load(path.read_text())["topology"]
        assert topo.get("latency_us") == written
        assert model.load(str(path)).latency_us == (latency or 0)


@pytest.mark.parametrize("bad", [-1, 2e6, "5us", True, [5]])
def test_bad_latency_is_a_one_line_error_naming_the_key(bad):
    with pytest.raises(InputError) as e:
        _exp(bad)
    msg = str(e.value)
    assert msg.startswith("lat.yaml: topology.latency_us: expected real-cluster microseconds per hop")
    assert "\n" not in msg


def test_no_delay_plans_the_htb_tree_alone():
    lines = htb_cmds("h0-eth0", 10.0, 1000, mtu=9000)
    assert lines[0].startswith("qdisc replace dev h0-eth0 root handle 5: htb")
    assert not [ln for ln in lines if "netem" in ln]


def test_delay_puts_netem_at_the_root_and_htb_below_it():
    plain = htb_cmds("h0-eth0", 10.0, 1000, mtu=9000)
    lines = htb_cmds("h0-eth0", 10.0, 1000, mtu=9000, delay_us=200)
    # netem first (the packet waits out its delay), then the same HTB tree as its child.
    assert lines[0] == f"qdisc replace dev h0-eth0 root handle 4: netem delay 200.000us limit " \
                       f"{netem_limit_packets(10.0, 200, 1000)}"
    assert lines[1] == "qdisc replace dev h0-eth0 parent 4:1 handle 5: htb default 20"
    assert lines[2:] == plain[1:]
    with pytest.raises(ValueError):
        htb_cmds("h0-eth0", 10.0, 1000, delay_us=-1)


def test_netem_holds_what_arrives_during_the_delay():
    assert netem_limit_packets(10.0, 0.0, 1000) == 2000
    # 1000 Mb/s, 40 ms: eight links of 64-byte packets in flight, beyond the floor.
    big = netem_limit_packets(1000.0, 40000.0, 1000)
    assert big == 1000 + 8 * 1000e6 / 8 * 0.04 / 64


def test_every_fabric_link_is_delayed_and_nvlink_is_not(tmp_path):
    fabric = rail_optimized(2, 4, 2)
    tb = lifecycle.Testbed(fabric, str(tmp_path), scale_link=2.5e-5, datapath="userspace", link_delay_us=80.0)
    tb.tag, tb.datapath = "xq", "userspace"
    shapes = tb.plan_shaping()
    nvl = {tb.intf(a, b) for a, b, d in fabric.links() if d["kind"] == "nvlink"} | \
          {tb.intf(b, a) for a, b, d in fabric.links() if d["kind"] == "nvlink"}
    assert nvl and all(s.delay_us == 0 for s in shapes if s.dev in nvl)
    others = [s for s in shapes if s.dev not in nvl]
    assert len(others) == 2 * len(fabric.links("host") + fabric.links("fabric"))
    assert all(s.delay_us == 80.0 for s in others)


def test_netem_probe_reports_what_tc_says(monkeypatch):
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 2 if "netem" in cmd else 0)
    monkeypatch.setattr(datapath.subprocess, "run", fake_run)
    assert datapath.netem_available() is False
    assert calls[0][:3] == ["unshare", "-n", "tc"]  # a throwaway namespace, never a real device
    monkeypatch.setattr(datapath.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0))
    assert datapath.netem_available() is True


def test_run_refuses_latency_without_netem_before_writing(tmp_path):
    path = tmp_path / "lat.yaml"
    data = yaml.safe_load(yaml.safe_dump(BASE))
    data["topology"]["latency_us"] = 5
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    code = ("import sys; from emulator.testbed import datapath; datapath.netem_available = lambda: False;"
            "import emulator.run.runner as r; r.netem_available = datapath.netem_available;"
            "from dtnet.cli import main; sys.exit(main(sys.argv[1:]))")
    r = subprocess.run([sys.executable, "-c", code, "run", str(path), "--out", str(out)],
                       capture_output=True, text=True, timeout=60, cwd=os.path.dirname(os.path.dirname(
                           os.path.dirname(os.path.abspath(__file__)))))
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "topology.latency_us" in r.stderr and "netem" in r.stderr
    assert "Traceback" not in r.stderr
    assert not os.path.exists(out / "config.yaml") and not os.path.exists(out / "summary.json")
