"""The lab VM's scripts, where they are pure: argument checks, the offline
(wheelhouse) pip plan, and the Vagrantfile and lab-check agreeing on what is
synced. Booting the VM is scripts/lab-check.sh's job, not a unit test's."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from badinput import InputError
from emulator.testbed.datapath import netem_available

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = ROOT / "scripts"


def run(script: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPTS / script), *args], capture_output=True, text=True,
                          timeout=60, env=env)


def test_apt_packages_are_bootstraps_list():
    r = run("bootstrap.sh", "--print-apt-packages")
    assert r.returncode == 0
    pkgs = r.stdout.split()
    assert {"openvswitch-switch", "mininet", "iperf3"} <= set(pkgs)
    assert len(pkgs) == len(set(pkgs))


def test_pip_plan_uses_the_network_without_a_wheelhouse():
    r = run("bootstrap.sh", "--print-pip-commands", env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 4
    assert not any("--no-index" in ln for ln in lines)


def test_pip_plan_stays_in_the_wheelhouse(tmp_path):
    r = run("bootstrap.sh", "--print-pip-commands", env={"PATH": "/usr/bin:/bin", "DTNET_WHEELHOUSE": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines and all(f"--no-index --find-links {tmp_path}" in ln for ln in lines)
    # Ryu 4.34's pins: old setuptools first, then Ryu without build isolation.
    ryu = next(i for i, ln in enumerate(lines) if "ryu==4.34" in ln)
    assert "--no-build-isolation" in lines[ryu]
    assert any("setuptools\\<68" in ln for ln in lines[:ryu])
    assert any("eventlet==0.33.3" in ln for ln in lines[:ryu])


@pytest.mark.parametrize("script,args,env,words", [
    ("bootstrap.sh", ["--bogus"], {}, "'--bogus'"),
    ("bootstrap.sh", ["--print-pip-commands"], {"DTNET_WHEELHOUSE": "/nonexistent/wh"}, "DTNET_WHEELHOUSE"),
    ("bootstrap.sh", ["--wheelhouse"], {}, "--wheelhouse"),
    ("lab-box.sh", ["--bogus"], {}, "'--bogus'"),
    ("lab-check.sh", ["--engine", "xen"], {}, "'xen'"),
    ("lab-check.sh", ["--stages", "unit rm"], {}, "'rm'"),
    ("lab-check.sh", ["--stages"], {}, "--stages"),
    ("lab-check.sh", ["--nope"], {}, "'--nope'"),
])
def test_bad_arguments_are_one_line_exit_2(script, args, env, words):
    r = run(script, *args, env={"PATH": "/usr/bin:/bin", **env})
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and words in r.stderr
    assert "Traceback" not in r.stderr


def test_lab_inside_refuses_an_unknown_stage(tmp_path):
    r = run("lab-inside.sh", str(tmp_path / "out"), "facts", "bogus")
    assert r.returncode == 2 and "'bogus'" in r.stderr
    assert not (tmp_path / "out" / "facts.log").exists()  # nothing ran


def test_vagrantfile_and_lab_check_sync_the_same_tree():
    vf = (ROOT / "Vagrantfile").read_text()
    m = re.search(r'type: "rsync",\s*rsync__exclude: \[([^\]]*)\]', vf)
    assert m, "the Vagrantfile's synced folder is not rsync"
    vagrant = re.findall(r'"([^"]+)"', m.group(1))
    m = re.search(r"^RSYNC_EXCLUDE=\(([^)]*)\)", (SCRIPTS / "lab-check.sh").read_text(), re.M)
    assert m
    assert vagrant == m.group(1).split()
    # The box, the venv and results never travel into the VM.
    assert {".lab/", ".venv/", "results/"} <= set(vagrant)


def test_vagrantfile_sizes_memory_for_the_readme():
    vf = (ROOT / "Vagrantfile").read_text()
    default_mb = int(re.search(r'env_count\("DTNET_LAB_MEMORY_MB", (\d+)\)', vf).group(1))
    # `dtnet trace show` of the README's GPT-3 175B / 1024-GPU trace peaked at 4.3 GB.
    assert default_mb >= 6144
    assert vf.count("memory = memory_mb") == 2  # both providers
    assert 'path: "scripts/lab-provision.sh"' in vf


@pytest.mark.skipif(shutil.which("vagrant") is None, reason="vagrant is not installed")
@pytest.mark.parametrize("name,value", [("DTNET_LAB_MEMORY_MB", "8G"), ("DTNET_LAB_CPUS", "0")])
def test_vagrantfile_refuses_a_bad_setting_in_one_line(name, value):
    env = {**os.environ, name: value}
    r = subprocess.run(["vagrant", "validate", "--ignore-provider"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr == f"Vagrantfile: {name}: expected a positive whole number, found '{value}'\n"


def _collect(files: list[str], marks: str) -> set[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}  # collection only: nothing runs
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                        "-m", marks, *files], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert r.returncode in (0, 5), r.stdout + r.stderr
    return {ln for ln in r.stdout.splitlines() if "::" in ln}


def test_the_vm_integration_stage_gates_on_behaviour_and_reports_thresholds_apart():
    text = (SCRIPTS / "lab-inside.sh").read_text()
    files = re.search(r"^INTEGRATION_FILES=\(([^)]*)\)", text, re.M).group(1).split()
    assert all((ROOT / f).is_file() for f in files)
    gate = _collect(files, "mininet and not fidelity")
    report = _collect(files, "mininet and fidelity")
    assert gate and report and not gate & report
    assert gate | report == _collect(files, "mininet")
    names = {ln.split("::", 1)[1].split("[")[0] for ln in gate}
    # The three: shaping, teardown, routing (and ordering, latency, faults beside them).
    assert {"test_each_link_direction_holds_its_rate", "test_signal_mid_run_tears_down_and_keeps_events",
            "test_sigkill_then_dtnet_clean_removes_exactly_that_run",
            "test_link_down_mid_run_is_rerouted_and_every_transfer_completes",
            "test_a_switch_failing_mid_run_is_routed_around",
            "test_small_data_segments_keep_their_place_in_the_flow",
            "test_delay_adds_to_every_hop_and_the_rate_holds"} <= names
    # busbw, throughput and timing thresholds: a report under software emulation.
    assert {ln.split("::", 1)[1] for ln in report} >= {"test_ring_fat_tree_with_ecmp", "test_ring_single_switch",
                                                         "test_congestion_aware_beats_ecmp_on_stride_and_nears_non_blocking"}


def _bench_latency():
    spec = importlib.util.spec_from_file_location("bench_latency", ROOT / "bench" / "bench_latency.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


LATENCY_EXP = """\
name: lat
topology: {kind: leaf-spine, leaves: 1, spines: 0, hosts_per_leaf: 4, link_gbps: 400}
scale: {link: 2.5e-5, bytes: 1.0e-3}
jobs:
  - name: j0
    hosts: all
    workload: {collective: all_reduce, algorithm: ring, size_bytes: 1048576}
"""


def test_bench_latency_takes_alpha_as_the_hops_a_step_crosses():
    b = _bench_latency()
    pts = b.points(str(ROOT / "experiments" / "lab-latency.yaml"))
    assert pts[0].exp.latency_us == 0 and len(pts) >= 3
    assert all(p.exp.prediction.latency_us == 2 * p.exp.latency_us for p in pts)  # host -> leaf -> host


@pytest.mark.parametrize("tail,words", [
    ("", "sweep: expected a list of topology.latency_us points"),
    ("sweep: {list: [{topology.latency_us: 5, prediction.latency_us: 10}]}\n", "a first point with topology.latency_us: 0"),
    ("sweep: {list: [{topology.latency_us: 0}, {topology.latency_us: 5, prediction.latency_us: 5}]}\n",
     "prediction.latency_us: expected 2 hops x topology.latency_us = 10"),
])
def test_bench_latency_refuses_a_sweep_it_cannot_compare(tmp_path, tail, words):
    path = tmp_path / "lat.yaml"
    path.write_text(LATENCY_EXP + tail)
    with pytest.raises(InputError) as e:
        _bench_latency().points(str(path))
    assert words in str(e.value) and str(path) in str(e.value)


def test_bench_latency_refuses_a_fabric_whose_steps_differ_in_hops(tmp_path):
    path = tmp_path / "lat.yaml"
    path.write_text(LATENCY_EXP.replace("leaves: 1, spines: 0, hosts_per_leaf: 4", "leaves: 2, spines: 1, hosts_per_leaf: 2")
                    + "sweep: {list: [{topology.latency_us: 0}]}\n")
    with pytest.raises(InputError, match="same number of links apart"):
        _bench_latency().points(str(path))


@pytest.mark.skipif(netem_available(), reason="this kernel has netem: the bench would run")
def test_bench_latency_without_netem_is_one_line_exit_2():
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_latency.py")], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "netem" in r.stderr and "Traceback" not in r.stderr
