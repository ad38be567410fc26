"""dtnet from Python: build or load an experiment, change it, check it, run it, read its results.

The CLI is a thin layer over these; both validate the same way and raise the same
InputError (file, key, expected, found). docs/python-api.md walks through them.
"""
from __future__ import annotations

import copy
import csv
import os
from dataclasses import dataclass

from badinput import InputError
from badinput.paths import inside
from dtnet import engines
from experiment import engine as experiment_engine
from experiment import model, sweep
from experiment.outputs import links, report
from experiment.outputs.summary import read_events
from experiment.plan import build_plans, job_traces

NO_VALUE = object()


class Experiment:
    """A checked, read-only experiment. Every change returns a new one, checked again.

    ``model`` is the validated experiment.model.Experiment; ``data`` the mapping it was
    read from (a copy: change it with set())."""

    def __init__(self, exp: model.Experiment):
        self.model = exp

    # -- making one -----------------------------------------------------------
    @classmethod
    def load(cls, path: str, overrides=()) -> Experiment:
        """An experiment file, with ``key.path=value`` overrides applied as `--set` applies them."""
        return cls(model.load(path, list(overrides)))

    @classmethod
    def build(cls, data: dict, file: str | None = None) -> Experiment:
        """An experiment from a mapping with the keys of an experiment file; file (if given) is
        where relative paths (traces) are resolved and what errors name."""
        return cls(model.parse(copy.deepcopy(data), file))

    # -- what it is -----------------------------------------------------------
    @property
    def name(self) -> str:
        return self.model.name

    @property
    def engine(self) -> str:
        return self.model.engine

    @property
    def source(self) -> str | None:
        return self.model.source

    @property
    def data(self) -> dict:
        return copy.deepcopy(self.model.raw)

    def __repr__(self) -> str:
        return f"<dtnet.Experiment {self.name!r} from {self.source or 'a mapping'}>"

    # -- changing it ----------------------------------------------------------
    def set(self, path_or_changes, value=NO_VALUE) -> Experiment:
        """A copy with changes at dotted key paths (list items by index), as `--set` makes them:
        ``set("scale.link", 1e-5)``, ``set({"controller.routing": "ecmp", "jobs.0.start_ms": 5})``
        or ``set("scale.link=1e-5")`` (the value read as YAML)."""
        data = self.data
        if isinstance(path_or_changes, dict):
            changes = path_or_changes.items()
        elif value is NO_VALUE:
            data = model.apply_overrides(data, [path_or_changes], self.source)
            changes = ()
        else:
            changes = [(path_or_changes, value)]
        for path, v in changes:
            model.set_path(data, path, copy.deepcopy(v), self.source, label="set")
        return Experiment(model.parse(data, self.source))

    # -- checking it ----------------------------------------------------------
    def points(self) -> list[Point]:
        """The points of its sweep, each an Experiment (none without a sweep)."""
        return [Point(p.index, p.slug, dict(p.overrides), Experiment(p.exp)) for p in sweep.expand(self.model)]

    def _refuse_long_packet_sweep(self, points) -> None:
        packet = [p.exp for p in points if p.exp.engine == "packet"]
        if packet:
            from packetsim.runner import refuse_long_sweep

            refuse_long_sweep(packet, self.source)

    def check(self) -> Check:
        """Plan every job (of every point of a sweep), as a run would before it starts: every
        bad workload, placement or trace raises InputError here, without root."""
        if self.model.sweep:
            points = sweep.expand(self.model)
            sweep.check(points)
            self._refuse_long_packet_sweep(points)  # as `run` would without --force
            return Check(self.name, self.engine, points=[p.slug for p in points])
        verdict = experiment_engine.check(self.model)  # what the engine cannot model, before anything is built
        fabric = self.model.fabric()
        jobs = build_plans(self.model, fabric) if self.engine == "emulate" else job_traces(self.model, fabric)
        c = fabric.counts()
        return Check(self.name, self.engine, fabric.kind, c["hosts"], c["switches"], len(jobs),
                     self.model.emulated_mbps(fabric.link_gbps), self.model.scale.dilation,
                     policy=self.model.policy, policy_params=dict(self.model.policy_params), verdict=verdict)

    # -- running it -----------------------------------------------------------
    def run(self, out: str | None = None, *, engine: str | None = None, auto_scale: bool = False,
            log=print, cluster: str | None = None, workers: int | None = None, slots: int | None = None,
            connect_timeout_s: float = 5.0, force: bool = False,
            tls: str | None = None) -> Run | SweepRun:
        """Run it into out (default results/<name>/) on its engine (or `engine`), and read the
        results back: a Run, or a SweepRun when it has a sweep (every point checked first; a
        sweep resumes into a folder that holds some of its points complete).

        auto_scale (the emulator only, not with a sweep): find the largest link scale this
        machine emulates faithfully by short probe runs, then run at it (docs/fidelity.md:
        Choosing the scale). Raises InputError (bad input; nothing started), FolderBusy (another live
        run writes out), RunFailure (a run, or every probe, could not finish); Interrupted
        passes through (the CLI turns SIGINT and SIGTERM into it).

        A sweep's points may run on a Dask cluster (docs/cluster-sweeps.md): ``cluster`` the
        scheduler's address (tcp://HOST:PORT; tls://HOST:PORT with ``tls`` the folder of the
        cluster's certificates), or ``workers`` N for a local one of N processes
        with ``slots`` points each; ``connect_timeout_s`` bounds the wait for the scheduler
        and a first worker. ``force``: overwrite a folder that holds a finished run (refused
        otherwise: InputError); a sweep still skips its points already complete."""
        if engine and engine != self.engine:  # as the file would say it, so config.yaml records it
            return self.set("engine", engine).run(out, auto_scale=auto_scale, log=log, cluster=cluster,
                                                  workers=workers, slots=slots, connect_timeout_s=connect_timeout_s,
                                                  force=force, tls=tls)
        name = self.engine
        run = engines.get(name)
        if auto_scale and self.model.sweep:
            raise InputError("--auto-scale", "an experiment without a sweep: section (calibrate one point alone: "
                             "--auto-scale --set 'sweep={}' plus its overrides; then put the chosen scale in the "
                             "file)", f"sweep: with {len(self.model.sweep)} points", self.source)
        if auto_scale:
            from experiment.program import is_program
            progs = [j.name for j in self.model.jobs if is_program(j.workload)]
            if progs:
                raise InputError("--auto-scale", "jobs whose traffic dtnet replays (a real program's bytes are its "
                                 "own: give scale by hand)", f"program job {progs[0]}", self.source)
        if auto_scale and name != "emulate":
            raise InputError("--auto-scale", "the emulator engine (it calibrates the emulator)", name, self.source)
        out = out or os.path.join("results", self.name)
        try:
            os.makedirs(out, exist_ok=True)
        except OSError as e:
            raise InputError("--out", "a folder that can be created and written", f"{out} ({e.strerror})") from None
        if cluster and workers is not None:
            raise InputError("--workers", "either --cluster ADDRESS (a running cluster) or --workers N (a local one)",
                             "both")
        if tls and not cluster:
            raise InputError("--tls", "--cluster tls://HOST:PORT beside it (the certificates of that cluster)",
                             "--workers" if workers is not None else "no --cluster")
        if slots is not None and (workers is None or slots < 1):
            raise InputError("--slots", "a number >= 1 beside --workers N (a running cluster's workers set their "
                             "own)", slots if workers is not None else "no --workers")
        if self.model.sweep:
            points = sweep.expand(self.model)
            sweep.check(points)  # every point valid before the first one starts
            if not force:
                self._refuse_long_packet_sweep(points)
            log(f"dtnet: sweep {self.name}: {len(points)} points -> {out}")
            runs = {}

            def run_point(pexp, folder):
                # a sweep's points may name different engines
                return engines.get(pexp.engine)(pexp, folder, force=force)
            if cluster or workers is not None:
                from dtnet.cluster.client import session

                with session(cluster, workers, slots=slots, connect_timeout_s=connect_timeout_s, log=log,
                             tls_dir=tls) as execute:
                    done = sweep.run(self.model, out, None, points, log=log, execute=execute)
            else:
                done = sweep.run(self.model, out, run_point, points, log=log)
            for p in points:
                if p.slug not in done["failed"]:
                    runs[p.slug] = Run(sweep.point_dir(out, p))
            return SweepRun(out, done, runs)
        log(f"dtnet: running {self.name} -> {out}" + (f" (engine {name})" if name != "emulate" else ""))
        if not auto_scale:
            return Run(out, run(self.model, out, log=log, force=force))
        from emulator.run import autoscale

        def prepare(e):
            chosen, record = autoscale.calibrate(e, out, run, log=log)
            verdict = "" if record["faithful"] else " (NO probe was faithful: running at the lowest scale that ran)"
            log(f"dtnet: running {self.name} at scale.link={chosen.scale.link:g} "
                f"scale.bytes={chosen.scale.bytes:g}{verdict}")
            return chosen, record
        return Run(out, run(self.model, out, log=log, prepare=prepare, force=force))

    def write(self, path: str) -> None:
        """The experiment fully resolved (every default written), as `dtnet run` leaves config.yaml."""
        model.write_resolved(self.model, path)


@dataclass(frozen=True)
class Point:
    """One point of a sweep: its index, folder name, overrides and experiment."""
    index: int
    slug: str
    overrides: dict
    experiment: Experiment


@dataclass(frozen=True)
class Check:
    """What `dtnet check` says of a valid experiment."""
    name: str
    engine: str
    fabric: str | None = None
    hosts: int | None = None
    switches: int | None = None
    jobs: int | None = None
    host_link_mbps: float | None = None   # emulated
    dilation: float | None = None
    points: list | None = None            # a sweep's point folders
    policy: str | None = None
    policy_params: dict | None = None
    verdict: str | None = None            # the engine's own line on what it will run (the flow engine's)

    def __str__(self) -> str:
        if self.points is not None:
            return f"{self.name}: a sweep of {len(self.points)} points, each valid"
        if self.engine != "emulate":
            return (f"{self.name}: {self.fabric} with {self.hosts} hosts, {self.switches} switches; {self.jobs} job(s); "
                    f"{self.verdict}")
        return (f"{self.name}: {self.fabric} with {self.hosts} hosts, {self.switches} switches; {self.jobs} job(s); "
                f"emulated host link {self.host_link_mbps:g} Mb/s, time dilation {self.dilation:g}x; policy {self.policy}"
                + (" (" + ", ".join(f"{k}={v}" for k, v in self.policy_params.items()) + ")"
                   if self.policy_params else "")
                + (f"; {self.verdict}" if self.verdict else ""))


class Table(list):
    """Rows (dicts) with the same columns. ``.df`` is them as a pandas DataFrame, where pandas is
    installed (it is not a dependency of dtnet: pip install pandas)."""

    def __init__(self, rows, columns):
        super().__init__(rows)
        self.columns = list(columns)

    @property
    def df(self):
        try:
            import pandas
        except ImportError:
            raise ImportError("Table.df needs pandas (pip install pandas); the rows are this list") from None
        return pandas.DataFrame(list(self), columns=self.columns)

    def column(self, name: str) -> list:
        return [r.get(name) for r in self]


ITERATION_COLUMNS = ("job", "iteration", "iteration_time_s")
COLLECTIVE_COLUMNS = ("job", "op", "algorithm", "size_bytes", "ranks", "count", "cct_s", "cct_s_p50", "cct_s_p99",
                      "algbw_gbps", "busbw_gbps", "predicted_cct_s", "cct_vs_predicted")
EVENT_COLUMNS = ("kind", "job", "rank", "start", "end")


class Run:
    """A run's folder, read back: `dtnet.read(DIR)`, or what Experiment.run returns.

    Figures are in real-cluster units, as in summary.json (docs/outputs.md)."""

    def __init__(self, folder: str, summary: dict | None = None):
        self.folder = folder
        self.summary = summary if summary is not None else report.load_summary(folder)

    def __repr__(self) -> str:
        return f"<dtnet.Run {self.name!r} {self.status} in {self.folder}>"

    @property
    def name(self) -> str:
        return self.summary["name"]

    @property
    def status(self) -> str:
        return self.summary["status"]

    @property
    def faithful(self) -> bool:
        """The run's own fidelity verdict (summary.json fidelity.ok)."""
        return bool(self.summary["fidelity"]["ok"])

    @property
    def jobs(self) -> list[str]:
        return [j["name"] for j in self.summary["jobs"]]

    def iteration_times(self) -> Table:
        """One row per job and iteration: job, iteration, iteration_time_s."""
        return Table([{"job": j["name"], "iteration": i, "iteration_time_s": t}
                      for j in self.summary["jobs"] for i, t in enumerate(j["iteration_time_s"]["all"])],
                     ITERATION_COLUMNS)

    def collectives(self) -> Table:
        """One row per job and kind of collective (op, algorithm, size, ranks): its completion
        time, algbw and busbw (nccl-tests definitions) and the alpha-beta prediction."""
        return Table([{"job": j["name"], **{k: c.get(k) for k in COLLECTIVE_COLUMNS[1:]}}
                      for j in self.summary["jobs"] for c in j["collectives"]], COLLECTIVE_COLUMNS)

    def links(self) -> Table:
        """links.csv: per directed link and second, utilization and real-cluster Gb/s (empty
        when the run wrote none)."""
        path = inside(self.folder, "links.csv")
        if not os.path.exists(path):
            return Table([], links.COLUMNS)
        try:
            return Table(links.read_csv(path), links.COLUMNS)
        except (OSError, ValueError, KeyError) as e:
            raise InputError("links.csv", ",".join(links.COLUMNS) + " rows", str(e), path) from None

    def events(self) -> Table:
        """events.jsonl, one row per event (its kind, job, rank, start, end and the rest)."""
        evs = read_events(inside(self.folder, "events.jsonl"))
        extra = sorted({k for e in evs for k in e} - set(EVENT_COLUMNS))
        return Table(evs, [*EVENT_COLUMNS, *extra])

    def report(self, out=None) -> None:
        """The tables `dtnet report` prints."""
        import sys
        report.report(self.folder, out or sys.stdout)


class SweepRun:
    """A sweep's folder after a run: its points' rows (sweep.csv) and a Run per complete point."""

    def __init__(self, folder: str, done: dict, runs: dict[str, Run]):
        self.folder, self.done, self.runs = folder, done, runs

    def __repr__(self) -> str:
        return f"<dtnet.SweepRun {self.done['complete']} of {self.done['points']} points complete in {self.folder}>"

    @property
    def failed(self) -> list[str]:
        return list(self.done["failed"])

    def table(self) -> Table:
        """sweep.csv: one row per point, its overrides, status and key figures."""
        rows = self.done["rows"]
        return Table(rows, list(dict.fromkeys(k for r in rows for k in r)))


def load(path: str, overrides=()) -> Experiment:
    """An experiment file; overrides are ``key.path=value`` strings, as `--set` takes them."""
    return Experiment.load(path, overrides)


def build(data: dict, file: str | None = None) -> Experiment:
    """An experiment from a mapping with the keys of an experiment file."""
    return Experiment.build(data, file)


def read(folder: str) -> Run | SweepRun:
    """A finished run's folder (or a sweep's), read back; InputError when it is not one."""
    csv_path = inside(folder, sweep.CSV_NAME)
    if os.path.exists(csv_path) and not os.path.exists(inside(folder, "summary.json")):
        with open(csv_path, newline="") as f:
            rows = list(csv.DictReader(f))
        done = {"points": len(rows), "complete": sum(r["status"] == "complete" for r in rows), "skipped": [],
                "failed": [r["point"] for r in rows if r["status"] != "complete"], "rows": rows}
        runs = {r["point"]: Run(inside(folder, sweep.POINTS_DIR, r["point"])) for r in rows
                if r["status"] == "complete"}
        return SweepRun(folder, done, runs)
    return Run(folder)


