"""Importers of other tools' workload traces. Each module has `load(paths) -> Trace`."""
from traffic.importers import aicb, chakra, kineto

__all__ = ["aicb", "chakra", "kineto"]
