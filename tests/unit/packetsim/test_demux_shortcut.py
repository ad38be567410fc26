"""The driver hands an established connection's packets straight to its socket's endpoint instead
of ns-3's scan of every endpoint and interface address (packetsim/driver.cc, ExactEndPoint): the
same runs, event for event, as with the scan (DTNET_NS3_SCAN), through handshakes, losses and
retransmissions, on hosts with many connections."""
from __future__ import annotations

import pytest

from experiment import model
from packetsim import ns3, runner

needs_ns3 = pytest.mark.skipif(not ns3.available(), reason="ns-3 (libns3-dev) is not installed")
COMMON_SETS = ["sweep={}", "engine=packet", "jobs.0.workload.iterations=1"]


def _run(tmp_path, name, file, sets, monkeypatch, scan):
    if scan:
        monkeypatch.setenv("DTNET_NS3_SCAN", "1")
    else:
        monkeypatch.delenv("DTNET_NS3_SCAN", raising=False)
    exp = model.load(file, [*COMMON_SETS, *sets])
    _, _, net, sc, t, loop = runner.plan(exp, log=lambda m: None)
    assert loop is None
    d = tmp_path / f"{name}-{'scan' if scan else 'shortcut'}"
    d.mkdir()
    return runner.execute(sc, net, t, str(d), seed=exp.flow.ecmp_seed + 1, log=lambda m: None)[0]


CASES = {
    # 8 hosts, each with 7 connections out and 7 in: every connection's handshake and data
    "all-to-all": ("experiments/ring-single-switch.yaml",
                   ["topology.hosts=8", "controller.routing=shortest", "jobs.0.workload.collective=all_to_all",
                    "jobs.0.workload.algorithm=direct", "jobs.0.workload.size_bytes=4194304"]),
    # 16 senders into a 32 KiB buffer: drops, timeouts and probes
    "incast": ("experiments/incast.yaml", ["jobs.0.hosts.count=17", "transport.switch_buffer_bytes=32768",
                                           "transport.tcp.tail_loss_probe=true"]),
}


@needs_ns3
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_shortcut_runs_exactly_as_the_scan(tmp_path, monkeypatch, case):
    file, sets = CASES[case]
    a = _run(tmp_path, case, file, sets, monkeypatch, scan=True)
    b = _run(tmp_path, case, file, sets, monkeypatch, scan=False)
    assert a["meta"]["tasks_done"] == a["meta"]["tasks"] > 0
    assert b["meta"]["events"] == a["meta"]["events"]
    assert b["tasks"] == a["tasks"] and b["conns"] == a["conns"]
    if case == "incast":
        assert sum(c["retx"] for c in a["conns"]) > 0  # the lossy path was exercised
