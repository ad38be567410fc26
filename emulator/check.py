"""`dtnet check` for the emulator: what it refuses before a testbed exists (no Mininet imported)."""
from __future__ import annotations

from emulator.run import faults
from emulator.testbed import transport


def check(exp) -> str:
    """Faults the run could never reach and transport: it cannot model (InputError); one line on
    what it will run."""
    faults.check(exp)
    return transport.check(exp)
