"""Workload layer: models, parallel configs, per-GPU op traces, and collective schedules.

Pure Python with numpy only (protobuf for the Chakra importer); no root, no Mininet.
"""
from traffic.trace import Op, Trace, dump, load
from traffic.workload import build_workload

__all__ = ["Op", "Trace", "build_workload", "dump", "load"]
