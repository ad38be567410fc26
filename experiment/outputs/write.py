"""The files a run writes at its end, whatever the engine: summary.json and the
outputs made from events.jsonl (trace.json, plots/). Formats: docs/outputs.md."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

from badinput.paths import inside, write_atomic
from experiment.outputs import chrometrace, plots
from experiment.outputs.summary import read_events


def write_json(path: str, data) -> None:
    """Whole or not at all, and never through a link: a fresh temporary file beside path
    (created exclusively), renamed over it. path is one the caller proved inside its folder."""
    write_atomic(os.path.dirname(path) or ".", os.path.basename(path), text=json.dumps(data, indent=1))


def run_events(out_dir: str, events: list[dict] | None, log=print) -> list[dict]:
    """events.jsonl's events: those the run kept in memory (events), else the file read back; a file
    that cannot be read is a warning (no trace.json), never a failed run, and gives none."""
    if events is not None:
        return events
    try:
        return read_events(inside(out_dir, "events.jsonl"))
    except Exception as e:  # noqa: BLE001
        log(f"[run] warning: trace.json not written: {type(e).__name__}: {e}")
        return []


def write_after_run(out_dir: str, exp, jobs, summary: dict, t0: float | None, log=print,
                    engine: str = "emulator", links=None, events: list[dict] | None = None) -> None:
    """trace.json and plots/ from what the run wrote, one after the other, in this process."""
    events = run_events(out_dir, events, log)
    write_trace(out_dir, exp, jobs, t0, log, events)
    plots_of(out_dir, exp, summary, t0, engine, links, events)(log)


def write_trace(out_dir: str, exp, jobs, t0: float | None, log, events: list[dict]) -> None:
    """trace.json from the run's events; a failure is a warning, never a failed run."""
    try:
        chrometrace.write(inside(out_dir, "trace.json"), events, [(j.name, j.hosts) for j in jobs],
                          exp.scale.dilation, exp.scale.bytes, t0=t0, name=exp.name)
    except Exception as e:  # noqa: BLE001
        log(f"[run] warning: trace.json not written: {type(e).__name__}: {e}")


@dataclass
class PlotJob:
    """plots/ of one run as a call of log alone, picklable (a warm child is sent it): each plot's
    failure a warning; engine names the engine in the titles; links is links.csv as a LinkGrid,
    else the heatmap reads the file. split: the heatmap, the slowest plot, drawn by a forked child
    of its own while this process draws the others (where can_fork)."""
    out_dir: str
    summary: dict
    point: str
    engine: str
    fabric: object
    phases: dict | None
    links: object
    split: bool = False

    def __call__(self, log) -> list[str]:
        return plots.write_all(self.out_dir, self.summary, log, point=self.point, engine=self.engine,
                               fabric=self.fabric, phases=self.phases, links=self.links,
                               fork=None if self.split else False)


def plots_of(out_dir: str, exp, summary: dict, t0: float | None, engine: str, links, events: list[dict]) -> PlotJob:
    """plots/ with what they read from the events and the fabric made now: called in a forked
    child, it reads none of the run's objects but summary and links."""
    phases = plots.collective_phases(events, t0, exp.scale.dilation) if t0 is not None else None
    return PlotJob(out_dir, summary, exp.point, engine, exp.fabric(), phases, links)
