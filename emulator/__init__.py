"""The packet-level engine: what needs a testbed (root, Mininet, Open vSwitch, Ryu).

- testbed: the fabric brought up and torn down (OVS, Mininet, shaping, datapaths,
  run tags, clean-up, packet capture, iperf3);
- agent: the per-GPU process inside each Mininet host that replays its rank's plan;
- run: `dtnet run` on this engine: orchestration, watchdog, faults, fidelity,
  auto-scale, the co-scheduling relay and the link counter sampler.
"""
