"""Engines by name: an experiment's ``engine:`` (or ``Experiment.run(engine=...)``) picks one.

The table is experiment.engine.ENGINES (``emulate``, ``flow``, ``packet``); each engine's code is
imported only when asked for, so ``import dtnet`` imports no engine: the emulator's Mininet
and psutil load only when an emulator run starts.
"""
from __future__ import annotations

from typing import Callable

from badinput import InputError
from experiment import engine as _engine
from experiment import pipeline


def get(name: str) -> Callable:
    """The run callable ``run(exp, out_dir, log=print) -> summary`` of an engine; InputError
    for a name the table does not hold."""
    if name not in _engine.ENGINES:
        raise InputError("engine", "one of " + ", ".join(names()), name)
    return pipeline.runner(name)


def names() -> list[str]:
    return sorted(_engine.ENGINES)
