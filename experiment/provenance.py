"""Which code made a run: a fingerprint of the source an engine's figures rest on.

A figure is stale once the code under it changes. summary.json `source` names the packages an
engine's results depend on and one SHA-256 over their files, so that a reader, or
bench/bench_engines.py about to reuse a finished run, can tell whether the run was made by the
code at hand. Each engine counts only its own packages and the shared ones: a change to the flow
model leaves the emulator's fingerprint alone.
"""
from __future__ import annotations

import functools
import hashlib
import os
import re

from badinput import InputError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = ("badinput", "controller", "experiment", "topologies", "traffic")
ENGINE_PACKAGES = {
    "emulate": SHARED + ("emulator",),
    "flow": SHARED + ("flowsim",),
    "packet": SHARED + ("flowsim", "packetsim"),  # the packet engine routes with the flow engine's routers
}
SKIP_DIRS = frozenset({"__pycache__"})


def fingerprint(packages, root: str = ROOT) -> str:
    """SHA-256 over every file of the packages (path, length, bytes; compiled caches left out),
    in a fixed order. A package missing under root counts as empty."""
    h = hashlib.sha256()
    for pkg in sorted(set(packages)):
        for dirpath, dirnames, files in os.walk(os.path.join(root, pkg)):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
            for name in sorted(files):
                if name.endswith((".pyc", ".pyo")):
                    continue
                path = os.path.join(dirpath, name)
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                with open(path, "rb") as f:
                    data = f.read()
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                h.update(rel.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def source(engine: str) -> dict:
    """summary.json `source` of a run of this engine (computed once per process)."""
    packages = ENGINE_PACKAGES.get(engine, SHARED)
    return {"fingerprint": fingerprint(packages), "packages": list(packages)}


def fingerprint_of(summary: dict) -> str | None:
    """The fingerprint a run's summary names, or None: made before summaries had `source`, or
    not one (64 hex digits)."""
    src = summary.get("source")
    fp = src.get("fingerprint") if isinstance(src, dict) else None
    return fp if isinstance(fp, str) and re.fullmatch(r"[0-9a-f]{64}", fp) else None


def made_elsewhere(summary: dict, engine: str) -> bool:
    """True when a run's summary names a fingerprint other than this code's for its engine (a run
    that names none cannot tell: False)."""
    have = fingerprint_of(summary)
    return have is not None and have != source(engine)["fingerprint"]


def set_aside(folder: str) -> str:
    """Move a finished run folder to folder.oldN (the first N free), so that a new run of its
    point starts empty and nothing measured is lost. Returns the new path. A folder that is a
    symbolic link is refused (one-line InputError): runs write as root."""
    if os.path.islink(folder):
        raise InputError("--out", "a run folder that is not a symbolic link (a run writes as root)",
                         f"{folder} is a symbolic link")
    n = 1
    while os.path.lexists(f"{folder}.old{n}"):
        n += 1
    os.replace(folder, f"{folder}.old{n}")
    return f"{folder}.old{n}"
