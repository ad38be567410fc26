"""Workload layer: models, parallel configs, per-GPU op traces, and collective schedules.

Pure Python with numpy only (protobuf for the Chakra importer); no root, no Mininet.
"""
from traffic.errors import InputError

__all__ = ["InputError"]
