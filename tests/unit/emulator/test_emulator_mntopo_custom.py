"""`sudo mn --custom emulator/testbed/mntopo.py --topo fattree,4` (the README's line): mn execs the
file in a bare namespace with the system Python, where dtnet is not installed. Done here the way
mn does it, without root (building a Topo starts nothing)."""
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SYSTEM_PYTHON = "/usr/bin/python3"
MN_EXEC = """
import sys
path = sys.argv[1]
customs = {}
exec(compile(open(path).read(), path, 'exec'), customs, customs)
for spec, args in (("fattree", (4,)), ("railopt", (2, 4, 2)), ("leafspine", (4, 2, 4)), ("single", (8,))):
    topo = customs["topos"][spec](*args)
    print(spec, len(topo.hosts()), len(topo.switches()), len(topo.links()))
"""


def test_mn_custom_builds_every_fabric_from_the_file():
    if subprocess.run([SYSTEM_PYTHON, "-c", "import mininet.topo"], capture_output=True).returncode != 0:
        pytest.skip("no Mininet in the system Python: run `make setup`")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([SYSTEM_PYTHON, "-c", MN_EXEC, os.path.join(ROOT, "emulator", "testbed", "mntopo.py")],
                       capture_output=True, text=True, cwd="/", env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: tuple(map(int, line.split()[1:])) for line in r.stdout.splitlines()}
    assert rows["fattree"][:2] == (16, 20) and rows["single"][:2] == (8, 1)
    assert set(rows) == {"fattree", "railopt", "leafspine", "single"}
