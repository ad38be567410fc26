"""Engines by name: an experiment's ``engine:`` (or ``Experiment.run(engine=...)``) picks one.

An engine is a callable ``run(exp, out_dir, log=print) -> summary`` that writes the run
folder (experiment.engine says what it owes). Each is registered as a loader, so that
``import dtnet`` imports no engine: the emulator's Mininet and psutil load only when a run
starts. Only the emulator exists today; a flow-level engine adds its name to
experiment.engine.ENGINES and one ``register`` line here.
"""
from __future__ import annotations

from typing import Callable

from badinput import InputError
from experiment.engine import ENGINES as NAMES

_LOADERS: dict[str, Callable[[], Callable]] = {}


def register(name: str, load: Callable[[], Callable]) -> None:
    """load() -> the engine's run callable, imported when first asked for."""
    if name not in NAMES:
        raise ValueError(f"engine {name!r} is not in experiment.engine.ENGINES {NAMES}")
    _LOADERS[name] = load


def get(name: str) -> Callable:
    """The run callable of an engine; InputError for a name nobody registered."""
    if name not in _LOADERS:
        raise InputError("engine", "one of " + ", ".join(sorted(_LOADERS)), name)
    return _LOADERS[name]()


def names() -> list[str]:
    return sorted(_LOADERS)


def _emulator() -> Callable:
    from emulator.run.runner import run_experiment
    return run_experiment


register("emulator", _emulator)
