"""setting(): how a dataclass field of the experiment file declares its default, types and range
(experiment.model reads such fields with read_settings; experiment.transport declares its own)."""
from __future__ import annotations

from dataclasses import field


def setting(default, types, check=None, expected=None):
    """A dataclass field read from the experiment file: its default, types and range, said once.
    parse() reads it with read_settings(); a float field takes an integer too."""
    return field(default=default, metadata={"types": types, "check": check, "expected": expected})
