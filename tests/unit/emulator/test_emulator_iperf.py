"""The receiver-side byte counts that iperf3_flows reads from `ss -tinH`."""
from emulator.testbed.iperf import received_bytes

SS = """0      0      10.0.0.1:5201 10.0.0.3:40100
\t cubic wscale:9,9 rto:204 rtt:0.1/0.05 mss:1448 bytes_acked:1 bytes_received:37 segs_in:4
0      0      10.0.0.1:5201 10.0.0.3:40102
\t cubic wscale:9,9 rto:204 mss:1448 bytes_received:1048576 segs_in:800
0      0      10.0.0.1:5202 10.0.0.4:40200
\t cubic rto:204 mss:1448 bytes_received:2000000
0      0      [::1]:5203 [::1]:40300
\t cubic rto:204 bytes_sent:10
"""


def test_connections_on_one_port_are_summed_and_ports_kept_apart():
    # 5201: the control connection (37 bytes) and the data connection; 5203 received nothing.
    assert received_bytes(SS) == {5201: 1048613, 5202: 2000000}


def test_empty_output_is_no_bytes():
    assert received_bytes("") == {}
