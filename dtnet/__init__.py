"""dtnet: packet-level emulation of distributed-training traffic, from Python.

    import dtnet
    exp = dtnet.load("experiments/demo.yaml")               # or dtnet.build({...}), a mapping
    exp = exp.set("controller.routing", "coschedule")       # the dotted paths of `--set`
    exp.check()                                              # plans every job (and sweep point), no root
    run = exp.run("results/demo-cs")                         # on its engine: the emulator needs root
    run.iteration_times().df                                 # a pandas DataFrame, where pandas is installed
    dtnet.read("results/demo")                               # a run (or sweep) folder, read back

Bad input raises dtnet.InputError (file, key, expected, found: the line the CLI prints);
a run that cannot finish raises dtnet.RunFailure. docs/python-api.md has the whole API;
the `dtnet` command (dtnet.cli) is a thin layer over it.
"""
from badinput import InputError
from experiment.engine import FolderBusy, Interrupted, RunFailure

_API = ("Check", "Experiment", "Point", "Run", "SweepRun", "Table", "build", "load", "read")


def __getattr__(name):
    # The API (and the experiment model, policies and fabrics under it) is imported when first
    # used, so that `dtnet --version` or a rank's `from dtnet import program` starts in a
    # fraction of the time.
    if name in _API:
        from dtnet import api
        return getattr(api, name)
    raise AttributeError(f"module 'dtnet' has no attribute {name!r}")


__all__ = ["Check", "Experiment", "FolderBusy", "InputError", "Interrupted", "Point", "Run", "RunFailure",
           "SweepRun", "Table", "build", "load", "read"]
