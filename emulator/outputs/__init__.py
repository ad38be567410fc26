"""What a run leaves besides summary.json, events.jsonl and config.yaml:
trace.json, links.csv and plots/, plus `dtnet report` and `dtnet compare`.
The formats are documented in docs/outputs.md."""
from __future__ import annotations

import os

from emulator import results
from emulator.outputs import chrometrace, plots


def write_after_run(out_dir: str, exp, jobs, summary: dict, t0: float | None, log=print) -> None:
    """trace.json and plots/ from what the run wrote; a failure is a warning, never a failed run."""
    try:
        events = results.read_events(os.path.join(out_dir, "events.jsonl"))
        chrometrace.write(os.path.join(out_dir, "trace.json"), events, [(j.name, j.hosts) for j in jobs],
                          exp.scale.dilation, exp.scale.bytes, t0=t0, name=exp.name)
    except Exception as e:  # noqa: BLE001
        log(f"[run] warning: trace.json not written: {type(e).__name__}: {e}")
    plots.write_all(out_dir, summary, log)
