"""Preloaded into the worker processes of a local cluster (`dtnet run --workers N`).

They share the terminal's process group with `dtnet run`, so a Ctrl-C reaches them too. They
ignore it: the submitting side stops their points itself (and they end with its cluster), as a
worker on another machine would never see that Ctrl-C.
"""
import signal


def dask_setup(worker) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
