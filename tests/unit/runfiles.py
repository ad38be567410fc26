"""A run folder's files, to compare two runs that must write the same ones."""
from __future__ import annotations

import json
import os

TIMING = {"run_s", "wall_s", "duration_s_wall"}  # wall-clock seconds of the run itself: never equal twice


def untimed(d):
    """summary.json's data without its wall-clock times."""
    if isinstance(d, dict):
        return {k: untimed(v) for k, v in d.items() if k not in TIMING}
    if isinstance(d, list):
        return [untimed(v) for v in d]
    return d


def contents(out) -> dict:
    """Every file of the folder by path: bytes, summary.json without its wall-clock times."""
    files = {}
    for d, _, names in os.walk(out):
        for n in names:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, out)
            with open(p, "rb") as f:
                files[rel] = untimed(json.load(f)) if n == "summary.json" else f.read()
    return files
