"""Run `dtnet` for real and check that nothing is left behind."""
import json
import os
import subprocess
import sys
import time

import psutil

from emulator.testbed import runstate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def dtnet(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "dtnet", *args], capture_output=True, text=True,
                          timeout=wall_s(timeout), cwd=ROOT)


# Extra --set overrides for every run the helpers start, e.g. a lower scale on
# a slow machine: the lab VM under software emulation (scripts/lab-inside.sh)
# sets "scale.link=6.25e-6 scale.bytes=2.5e-4". Results are in real-cluster
# units, so the tests' assertions hold at any scale.
EXTRA_SETS = tuple(os.environ.get("DTNET_TEST_SET", "").split())


# Wall-clock bounds (how soon a run starts, tears down, notices a dead agent)
# are this machine's. A guest under software emulation runs every process
# several times slower, so the lab VM stretches them by an explicit factor
# (scripts/lab-inside.sh, measured in docs/lab-vm.md); 1 everywhere else.
TIME_FACTOR = float(os.environ.get("DTNET_TEST_TIME_FACTOR", "1"))  # checked in tests/conftest.py


def wall_s(seconds: float) -> float:
    """A wall-clock bound of this machine, stretched by DTNET_TEST_TIME_FACTOR."""
    return seconds * TIME_FACTOR


def extra_set_args() -> list[str]:
    return [a for s in EXTRA_SETS for a in ("--set", s)]


def run_experiment(name, out, *sets):
    args = ["run", os.path.join(ROOT, "experiments", name), "--out", str(out)]
    for s in sets:
        args += ["--set", s]
    r = dtnet(*args, *extra_set_args())
    assert r.returncode == 0, r.stdout + r.stderr
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f), r


def assert_nothing_left(out):
    """No bridge, link or process of this run survives it."""
    with open(os.path.join(out, "state.json")) as f:
        st = json.load(f)
    left = runstate.leftovers(st["tag"])
    assert not any(left.values()), left
    pids = list(st["pids"].values()) + list(st.get("host_pids", {}).values())
    alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"processes still running: {alive}"
    assert not os.path.exists(os.path.join(runstate.LEASE_DIR, f"tag-{st['tag']}")), "tag lease not released"


def start_run(out, experiment="ring-fat-tree.yaml", *sets, iterations=50):
    """Start `dtnet run` in the background and return (process, output lines so
    far) once the replay has begun: a condition, not a sleep."""
    args = [sys.executable, "-m", "dtnet", "run", os.path.join(ROOT, "experiments", experiment),
            "--out", str(out), "--set", f"jobs.0.workload.iterations={iterations}"]
    for s in sets:
        args += ["--set", s]
    args += extra_set_args()
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    lines = []
    deadline = time.monotonic() + wall_s(120)
    for line in p.stdout:
        lines.append(line)
        if "replaying" in line:
            return p, lines
        assert time.monotonic() < deadline, "".join(lines)
    raise AssertionError("run ended before replaying: " + "".join(lines))


def wait_for_event(out, kind, timeout_s=60):
    """Wait until events.jsonl holds an event of this kind."""
    deadline = time.monotonic() + wall_s(timeout_s)
    while not any(f'"{kind}"' in line for line in open(os.path.join(out, "events.jsonl"))):
        assert time.monotonic() < deadline, f"no {kind} event after {timeout_s} s"
        time.sleep(0.2)
