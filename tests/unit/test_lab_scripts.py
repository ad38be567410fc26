"""The lab VM's scripts, where they are pure: argument checks, the offline
(wheelhouse) pip plan, and the Vagrantfile and lab-check agreeing on what is
synced. Booting the VM is scripts/lab-check.sh's job, not a unit test's."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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
