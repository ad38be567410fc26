"""Every direction of every kind of link holds its configured rate, on each
datapath this machine offers: two senders are pushed into one direction at a
time (incast into a host, outcast from a host, and both directions of a
switch-to-switch link), and what arrives must lie within 85%..105% of the
link rate. AF_XDP ports bypass the egress qdisc, so this is what proves the
IFB and link-namespace shaping."""
import pytest

from emulator.testbed.datapath import AFXDP_PORT, kernel_datapath_available, ovs_iface_types
from emulator.testbed.iperf import iperf3_flows
from emulator.testbed.lifecycle import Testbed
from tests.integration.helpers import assert_nothing_left
from experiment.model import MAX_EMULATED_MBPS
from topologies import leaf_spine, rail_optimized

pytestmark = pytest.mark.mininet

SCALE_LINK = 2.5e-5  # 400 Gb/s -> 10 Mb/s


def datapaths():
    # userspace: the run's own daemon with userspace TSO (switch_daemons: auto); userspace-shared:
    # the machine's daemon, as on the kernel datapath.
    out = ["userspace", "userspace-shared"]
    try:
        if AFXDP_PORT in ovs_iface_types():
            out.append("afxdp")
    except FileNotFoundError:
        pass
    if kernel_datapath_available():
        out.append("kernel")
    return out


# leaf-spine, 2 leaves x 2 hosts, 1 spine: h0 h1 on leaf0, h2 h3 on leaf1.
CASES = {
    "switch->host (incast into h0)": [("h2", "h0"), ("h3", "h0")],
    "host->switch (outcast from h0)": [("h0", "h2"), ("h0", "h3")],
    "leaf1->spine": [("h2", "h0"), ("h3", "h1")],
    "leaf0->spine": [("h0", "h2"), ("h1", "h3")],
}


@pytest.mark.parametrize("datapath", datapaths())
def test_each_link_direction_holds_its_rate(tmp_path, datapath):
    fabric = leaf_spine(2, 1, 2)
    rate_mbps = 400e3 * SCALE_LINK
    got = {}
    dp, shared = datapath.removesuffix("-shared"), datapath.endswith("-shared")
    with Testbed(fabric, str(tmp_path), routing="shortest", scale_link=SCALE_LINK, datapath=dp,
                 log=lambda *_: None, **({"switch_daemons": "shared"} if shared else {})) as tb:
        assert tb.datapath == dp and (tb.switch_daemons == "shared") == (shared or dp != "userspace")
        for name, flows in CASES.items():
            got[name] = sum(iperf3_flows(tb, flows, duration_s=4)) / rate_mbps
    assert_nothing_left(tmp_path)
    for name, share in got.items():
        assert 0.85 <= share <= 1.05, f"{datapath}: {name} delivered {share:.3f} of the link rate ({got})"


def test_an_nvlink_link_past_the_switch_links_top_holds_its_rate(tmp_path):
    """NVLink links are kernel bridges shaped by HTB, with no OVS port: they may run past the
    1,000 Mb/s an OVS link is held to (experiment.model), and still deliver their rate."""
    fabric = rail_optimized(2, 2, 1, nvlink_gbps=3600)
    scale_link = 250 / 400e3
    nvlink_mbps = 3600e3 * scale_link  # 2,250 Mb/s
    assert nvlink_mbps > MAX_EMULATED_MBPS
    a, b = fabric.hosts[:2]
    assert fabric.nvlink_switch(a) == fabric.nvlink_switch(b)
    with Testbed(fabric, str(tmp_path), routing="shortest", scale_link=scale_link, log=lambda *_: None) as tb:
        (got,) = iperf3_flows(tb, [(a, b)], duration_s=4, via="nvlink_ip")
    assert_nothing_left(tmp_path)
    assert 0.85 <= got / nvlink_mbps <= 1.05, f"{a}->{b} over NVLink delivered {got:.0f} of {nvlink_mbps:.0f} Mb/s"
