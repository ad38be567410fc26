"""`dtnet check` for the emulator: what it refuses before a testbed exists (no Mininet imported)."""
from __future__ import annotations

from badinput import InputError
from emulator.run import faults
from emulator.testbed import switchd, transport


def check(exp) -> str:
    """Faults the run could never reach, testbed options that do not go together and transport:
    it cannot model (InputError); one line on what it will run."""
    faults.check(exp)
    check_switch_daemons(exp.testbed, exp.source)
    return transport.check(exp)


def check_switch_daemons(tb, source=None) -> None:
    """A run's own switch daemons are userspace ones (the kernel datapath is one per machine), and
    userspace TSO needs them: the shared daemon reads that option only when it starts."""
    # The run's own daemons: a count, or auto where the file asks for what only they have.
    own = isinstance(tb.switch_daemons, int) or (
        tb.switch_daemons == "auto" and switchd.own_asked(tb.userspace_tso, tb.switch_malloc))
    if own and tb.datapath == "kernel":
        raise InputError("testbed.switch_daemons", "shared with datapath kernel (the kernel datapath is the "
                         "machine's one; the run's own daemons run userspace bridges)", tb.switch_daemons, source)
    if tb.userspace_tso is True and tb.switch_daemons == "shared":
        raise InputError("testbed.userspace_tso", "false with switch_daemons: shared (ovs-vswitchd reads it only "
                         "when it starts; set switch_daemons to a count)", tb.userspace_tso, source)
    if tb.switch_malloc != "auto" and tb.switch_daemons == "shared":
        raise InputError("testbed.switch_malloc", "auto with switch_daemons: shared (the machine's daemon keeps "
                         "the allocator it was started with; set switch_daemons to a count)", tb.switch_malloc, source)
    if tb.switch_malloc == "tcmalloc" and switchd.tcmalloc_path() is None:
        raise InputError("testbed.switch_malloc", "auto or libc on this machine (tcmalloc is not installed: "
                         "apt-get install libtcmalloc-minimal4)", tb.switch_malloc, source)
    if own and tb.datapath == "afxdp":
        raise InputError("testbed.switch_daemons", "shared with datapath afxdp (its link namespace is not wired "
                         "for the run's own daemons)", tb.switch_daemons, source)
