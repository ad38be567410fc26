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
from dtnet.api import Check, Experiment, Point, Run, SweepRun, Table, build, load, read
from experiment.engine import FolderBusy, Interrupted, RunFailure

__all__ = ["Check", "Experiment", "FolderBusy", "InputError", "Interrupted", "Point", "Run", "RunFailure",
           "SweepRun", "Table", "build", "load", "read"]
