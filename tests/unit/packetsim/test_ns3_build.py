"""Which ns-3 the driver links: Debian's library, or the optimized rebuild once it is installed
(scripts/build-ns3-optimized.sh), each its own cached driver binary."""
from __future__ import annotations

import os
import subprocess

from packetsim import ns3

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_the_driver_links_the_optimized_ns3_only_once_its_build_completed(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("DTNET_NS3_LIBRARY", raising=False)
    debian_flags, debian_binary = ns3.link_flags(), ns3.binary_path()
    assert "-lns3-core" in debian_flags and ns3.library() == "Debian libns3-dev"
    prefix = tmp_path / "dtnet" / f"ns3-{ns3.NS3_VERSION}-optimized"
    (prefix / "lib").mkdir(parents=True)
    assert ns3.optimized_prefix() is None  # a build that stopped half-way is not used
    (prefix / ".complete").write_text("stamp\n")
    assert ns3.optimized_prefix() == str(prefix)
    flags = ns3.link_flags()
    assert "-lns3-core-optimized" in flags and f"-I{prefix / 'include'}" in flags
    assert any(f.endswith(f"-rpath,{prefix / 'lib'}") for f in flags)
    assert ns3.binary_path() != debian_binary and "optimized" in ns3.library()
    monkeypatch.setenv("DTNET_NS3_LIBRARY", "debian")  # to compare the two
    assert ns3.link_flags() == debian_flags and ns3.binary_path() == debian_binary


def test_bootstrap_refuses_an_unknown_ns3_choice_in_one_line():
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "bootstrap.sh"), "--print-apt-packages"],
                       env={**os.environ, "DTNET_NS3": "fast"}, capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip() == (
        "bootstrap.sh: DTNET_NS3: expected 0, 1 or optimized, found 'fast'")
