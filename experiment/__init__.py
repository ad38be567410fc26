"""The experiment, engine-neutral: what a run is, before any engine runs it.

- model: experiment files in, a validated read-only Experiment out;
- placement: which fabric hosts each job gets;
- plan: the jobs as per-rank plans in emulated units;
- sweep: one file, a run per point of a grid or list of overrides;
- outputs: what a run leaves (summary.json, trace.json, links.csv, plots) and
  how to read it back (report, compare).

Nothing here imports Mininet, Ryu or psutil, or needs root: an engine
(emulator/, or a flow-level one) takes an Experiment and writes these outputs.
"""
