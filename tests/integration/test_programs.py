"""Real programs on the real testbed (workload: {command: [...]}): a gloo job runs to the end and
checks its own results; a failing rank fails the run by name; a hung program is ended at the
timeout; SIGINT, or SIGKILL plus `dtnet clean`, leaves no process of any rank behind."""
import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from tests.integration.helpers import ROOT, assert_nothing_left, dtnet

pytestmark = pytest.mark.mininet

FABRIC = "{kind: leaf-spine, leaves: 2, spines: 1, hosts_per_leaf: 2, link_gbps: 400}"

# Every rank says who it is, then rank FAIL exits with status 3, the others hang (until dtnet ends them).
# A hung rank also starts a child, which must end with it.
WHO = textwrap.dedent("""
    import json, os, socket, subprocess, sys, time
    env = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                                          "MASTER_PORT", "GLOO_SOCKET_IFNAME", "DTNET_RUN_DIR")}
    env["ifindex"] = socket.if_nametoindex(env["GLOO_SOCKET_IFNAME"])  # the NIC is in this host
    env["cwd"] = os.getcwd()
    kid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    env["child"] = kid.pid
    print(json.dumps(env), flush=True)
    if os.environ["RANK"] == sys.argv[1]:
        print("rank", sys.argv[1], "gives up: no such dataset", file=sys.stderr)
        kid.kill()
        sys.exit(3)
    time.sleep(3600)
""")


def _experiment(tmp_path, workload: str, extra: str = "") -> str:
    path = tmp_path / "e.yaml"
    path.write_text(f"name: prog\ntopology: {FABRIC}\nscale: {{link: 2.5e-5, bytes: 1.0e-3}}\n{extra}"
                    f"jobs:\n  - name: j\n    hosts: all\n    workload: {workload}\n")
    return str(path)


def _who(out, n=4) -> list[dict]:
    rows = []
    for r in range(n):
        with open(out / "programs" / "j" / f"rank{r}.out") as f:
            rows.append(json.loads(f.readline()))
    return rows


def _dead(pids) -> bool:
    return not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def _needs_torch():
    if importlib.util.find_spec("torch") is None:
        if os.environ.get("CI"):
            pytest.fail("torch is not installed (make test installs torch==2.13.0)")
        pytest.skip("torch is not installed: .venv/bin/pip install torch==2.13.0, or make torch")


def test_a_gloo_all_reduce_job_runs_and_checks_its_results(tmp_path):
    _needs_torch()
    script = os.path.join(ROOT, "examples", "gloo_allreduce.py")
    exp = _experiment(tmp_path, f"{{command: [python, {script}, --sizes-bytes, 65536, 262144, "
                                "--iterations, 3]}")
    out = tmp_path / "r"
    r = dtnet("run", exp, "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.load(open(out / "summary.json"))
    assert summary["status"] == "complete" and summary["programs"]["ok"]
    (job,) = summary["jobs"]
    ranks = job["program"]["ranks"]
    assert [x["exit_status"] for x in ranks] == [0, 0, 0, 0] and {x["ended_by"] for x in ranks} == {"itself"}
    for x in ranks:  # the program compared every result with the exact sum
        assert "every result checked" in open(out / x["stdout"]).read()
    # What it reported, in real-cluster units: 65536 and 262144 bytes at scale.bytes 1e-3.
    sizes = {c["size_bytes"]: c for c in job["collectives"]}
    assert set(sizes) == {65536000, 262144000}
    for c in sizes.values():
        assert c["count"] == 3 and c["ranks"] == 4 and c["busbw_gbps"] > 0
    assert job["iterations"] == 3 and job["iteration_time_s"]["mean"] > 0
    # The network dtnet measured: its links carried the ring, TCP counters were read.
    rows = open(out / "links.csv").read().splitlines()
    assert rows[0].startswith("t_s,link") and len(rows) > 1
    assert summary["tcp"]["out_segs"] > 0 and summary["traffic"]["bytes_received"] > 0
    assert_nothing_left(out)


def test_a_rank_that_exits_non_zero_fails_the_run_naming_it(tmp_path):
    (tmp_path / "who.py").write_text(WHO)
    out = tmp_path / "r"
    r = dtnet("run", _experiment(tmp_path, "{command: [python, who.py, 2]}"), "--out", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "program j/rank 2 on h2 exited with status 3; last line of programs/j/rank2.err: " \
           "rank 2 gives up: no such dataset" in r.stderr
    summary = json.load(open(out / "summary.json"))
    assert summary["status"] == "incomplete" and "rank 2" in summary["error"]
    ranks = summary["jobs"][0]["program"]["ranks"]
    assert ranks[2]["exit_status"] == 3 and ranks[2]["ended_by"] == "itself"
    assert all(ranks[i]["ended_by"] == "dtnet" for i in (0, 1, 3))
    who = _who(out)
    ips = json.load(open(out / "fabric.json"))
    for i, w in enumerate(who):  # torchrun's environment, the host's own NIC, a folder in the run
        assert (w["RANK"], w["WORLD_SIZE"], w["LOCAL_RANK"], w["LOCAL_WORLD_SIZE"]) == (str(i), "4", "0", "1")
        assert w["MASTER_PORT"] == "29500" and w["ifindex"] > 0
        assert w["GLOO_SOCKET_IFNAME"].endswith(f"h{i}-eth0")
        assert w["cwd"] == str(out / "programs" / "j" / f"rank{i}") == w["DTNET_RUN_DIR"]
    assert len({w["MASTER_ADDR"] for w in who}) == 1 and who[0]["MASTER_ADDR"] in json.dumps(ips)
    assert _dead([w["child"] for w in who] + [x["pid"] for x in ranks])
    assert_nothing_left(out)


def test_a_program_that_hangs_is_ended_at_the_timeout(tmp_path):
    (tmp_path / "who.py").write_text(WHO)
    out = tmp_path / "r"
    t = time.monotonic()
    r = dtnet("run", _experiment(tmp_path, "{command: [python, who.py, none]}", "testbed: {timeout_s: 12}\n"),
              "--out", str(out))
    took = time.monotonic() - t
    assert r.returncode == 1, r.stdout + r.stderr
    assert "run timed out after testbed.timeout_s=12s; programs still running (ended now): j/rank 0, " \
           "j/rank 1, j/rank 2, j/rank 3" in r.stderr
    assert took < 120, f"the run took {took:.0f} s"
    ranks = json.load(open(out / "summary.json"))["jobs"][0]["program"]["ranks"]
    assert {x["ended_by"] for x in ranks} == {"dtnet"}
    assert _dead([w["child"] for w in _who(out)] + [x["pid"] for x in ranks])
    assert_nothing_left(out)


def _start(tmp_path, out):
    (tmp_path / "who.py").write_text(WHO)
    args = [sys.executable, "-m", "dtnet", "run", _experiment(tmp_path, "{command: [python, who.py, none]}"),
            "--out", str(out)]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    deadline = time.monotonic() + 120
    while True:  # until every rank has said who it is: all four run, each with its child
        try:
            return p, _who(out)
        except (OSError, ValueError):
            assert p.poll() is None, p.stdout.read()
            assert time.monotonic() < deadline, "the ranks did not start"
            time.sleep(0.2)


def test_sigint_mid_run_leaves_no_process_behind(tmp_path):
    out = tmp_path / "r"
    p, who = _start(tmp_path, out)
    p.send_signal(signal.SIGINT)
    rest = p.communicate(timeout=60)[0]
    assert p.returncode == 130, rest
    ranks = json.load(open(out / "summary.json"))["jobs"][0]["program"]["ranks"]
    assert _dead([w["child"] for w in who] + [x["pid"] for x in ranks])
    assert_nothing_left(out)


def test_sigkill_then_dtnet_clean_ends_the_programs(tmp_path):
    out = tmp_path / "r"
    p, who = _start(tmp_path, out)
    pids = [w["child"] for w in who] + [int(v) for k, v in json.load(open(out / "state.json"))["pids"].items()
                                        if k.startswith("program/")]
    p.kill()
    p.wait(10)
    assert len(pids) == 8 and not _dead(pids), "nothing to clean: the test proves nothing"
    r = dtnet("clean", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert _dead(pids), r.stdout
    assert_nothing_left(out)
