"""The packet engine (`engine: packet`): the experiment at packet level on ns-3, in real units.

packetsim.scenario turns the experiment's traces, schedules and routes into a task graph over
TCP connections; packetsim.ns3 builds and runs the C++ driver (driver.cc) that moves every
packet; packetsim.runner writes the run folder. docs/packet-engine.md says why ns-3 this way.
"""
