"""Importers of other tools' workload traces. Each module has `load(paths, algorithm="ring") -> Trace`:
the source formats do not say which algorithm ran, so every collective gets `algorithm`."""
from traffic.importers import aicb, chakra, kineto, pytorch_et

__all__ = ["aicb", "chakra", "kineto", "pytorch_et"]
