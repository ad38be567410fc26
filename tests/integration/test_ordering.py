"""A link qdisc must never reorder a flow: small data segments (a real program's
control messages inside its data connection) stay behind the data sent before
them. Only pure ACKs may take the fast class.

A sender in h0 interleaves bulk writes with 48-byte messages (TCP_NODELAY, so
each is its own segment) to h2 across leaf0 -> spine -> leaf1. The receiver's
own reordering counters (TcpExt, per namespace) must stay at zero, and the
sender must see no DSACK (a duplicate it sent for nothing)."""
import sys
import textwrap

import pytest

from emulator.run.runner import parse_snmp_tcp
from emulator.testbed.lifecycle import Testbed
from emulator.testbed.process import wait_for
from tests.integration.helpers import assert_nothing_left
from topologies import leaf_spine

pytestmark = pytest.mark.mininet

PORT = 5301
ROUNDS = 60

RECEIVER = textwrap.dedent(f"""
    import socket
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", {PORT})); s.listen(1)
    c, _ = s.accept(); n = 0
    while True:
        b = c.recv(1 << 20)
        if not b:
            break
        n += len(b)
    print(n, flush=True)
""")

SENDER = textwrap.dedent(f"""
    import socket, sys
    s = socket.create_connection((sys.argv[1], {PORT}))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for _ in range({ROUNDS}):
        s.sendall(b"d" * 65536)
        s.sendall(b"c" * 48)
    s.close()
""")


def tcp_ext(host) -> dict:
    return parse_snmp_tcp(host.cmd("cat /proc/net/netstat"), prefix="TcpExt:")


# The machine's switch daemon, the default (one of the run's own with userspace TSO: super-packets)
# and two of the run's own.
SWITCHD = {"shared": {"switch_daemons": "shared"}, "auto": {},
           "two-own-tso": {"switch_daemons": 2, "userspace_tso": True}}


@pytest.mark.parametrize("switchd", list(SWITCHD))
def test_small_data_segments_keep_their_place_in_the_flow(tmp_path, switchd):
    with Testbed(leaf_spine(2, 1, 2), str(tmp_path), routing="shortest", scale_link=2.5e-5,
                 log=lambda *_: None, **SWITCHD[switchd]) as tb:
        h0, h2 = tb.host("h0"), tb.host("h2")
        before_rx, before_tx = tcp_ext(h2), tcp_ext(h0)
        rx = h2.popen([sys.executable, "-c", RECEIVER])
        tb.state.add_pid("test/receiver", rx.pid)
        wait_for(lambda: f":{PORT} " in h2.cmd("ss -ltnH"), 10, "receiver listening")
        tx = h0.popen([sys.executable, "-c", SENDER, tb.fabric.node("h2")["ip"]])
        tb.state.add_pid("test/sender", tx.pid)
        try:
            assert tx.wait(120) == 0
            out, _ = rx.communicate(timeout=60)
        finally:
            for p in (tx, rx):
                if p.poll() is None:
                    p.kill()
                    p.wait(5)
        after_rx, after_tx = tcp_ext(h2), tcp_ext(h0)
    assert_nothing_left(tmp_path)
    assert int(out.split()[0]) == ROUNDS * (65536 + 48)
    delta = {k: after_rx.get(k, 0) - before_rx.get(k, 0) for k in ("TCPOFOQueue", "TCPSACKReorder")}
    dsacks = after_tx.get("TCPDSACKRecv", 0) - before_tx.get("TCPDSACKRecv", 0)
    assert delta["TCPOFOQueue"] == 0, f"receiver saw out-of-order segments: {delta}"
    assert dsacks == 0, f"sender got {dsacks} DSACKs (spurious retransmits)"
