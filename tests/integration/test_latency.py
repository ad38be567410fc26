"""Link latency (netem at each link's root, HTB below it) where the kernel has
netem, as in the lab VM: a ping between two hosts under one switch crosses
four delayed link directions, and a TCP flow still gets the link rate, no
more. Skipped where netem does not exist (the run refuses latency there)."""
import re

import pytest

from emulator.testbed.datapath import netem_available
from emulator.testbed.iperf import iperf3_flows
from emulator.testbed.lifecycle import Testbed
from tests.integration.helpers import assert_nothing_left
from topologies import leaf_spine

pytestmark = [pytest.mark.mininet,
              pytest.mark.skipif(not netem_available(), reason="this kernel has no netem (sch_netem)")]

SCALE_LINK = 2.5e-5  # 400 Gb/s -> 10 Mb/s
DELAY_US = 2000.0    # emulated, per link direction


def min_rtt_ms(tb, src, dst):
    out = tb.host(src).cmd(f"ping -c 10 -i 0.2 -q {tb.fabric.node(dst)['ip']}")
    m = re.search(r"= ([\d.]+)/", out)
    assert m, out
    return float(m.group(1))


def test_delay_adds_to_every_hop_and_the_rate_holds(tmp_path):
    fabric = leaf_spine(1, 0, 2)  # h0 - leaf0 - h1
    rtt, share = {}, {}
    for delay in (0.0, DELAY_US):
        out = tmp_path / f"d{int(delay)}"
        with Testbed(fabric, str(out), routing="shortest", scale_link=SCALE_LINK, link_delay_us=delay,
                     log=lambda *_: None) as tb:
            rtt[delay] = min_rtt_ms(tb, "h0", "h1")
            share[delay] = iperf3_flows(tb, [("h0", "h1")], duration_s=4)[0] / (400e3 * SCALE_LINK)
        assert_nothing_left(out)
    added_ms = rtt[DELAY_US] - rtt[0.0]
    expected_ms = 4 * DELAY_US / 1000  # h0->leaf->h1 and back
    assert 0.95 * expected_ms <= added_ms <= 1.15 * expected_ms, (rtt, expected_ms)
    for delay, s in share.items():
        assert 0.85 <= s <= 1.05, f"delay {delay} us: the flow got {s:.3f} of the link rate"
