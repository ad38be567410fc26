"""A flow-level engine: the experiment's traffic as fluid flows over the fabric graph.

Flows share directed links max-min fairly (progressive filling, vectorized over a sparse
link x flow incidence matrix) and the rates are recomputed whenever a flow starts, ends or
changes state. Collectives come from the same schedules the emulator's agents replay
(``traffic.collectives``), with the agents' semantics: one connection per peer, sends queued
in order, each send gated slice by slice on the receives of its own chunks. See
docs/flow-engine.md for what is exact and what is approximated.

No Mininet, no Ryu, no root: numpy and scipy only.
"""
from flowsim.maxmin import max_min_rates
from flowsim.network import Net
from flowsim.routing import EcmpRouter, Router, ShortestRouter
from flowsim.engine import Fault, JobSpec, Params, Simulation, Straggler

__all__ = ["EcmpRouter", "Fault", "JobSpec", "Net", "Params", "Router", "ShortestRouter", "Simulation",
           "Straggler", "max_min_rates"]
