"""`dtnet check` runs no user policy code in its own process: the module is imported, checked
and built on the fabric in a child process with a deadline (controller.registry)."""
import os
import sys
import textwrap

import pytest

from badinput import InputError
from controller import registry
from dtnet import cli
from topologies import fat_tree

EXPERIMENT = """\
name: pol
topology: {kind: fat-tree, k: 4, link_gbps: 400}
scale: {link: 2.5e-5, bytes: 1.0e-3}
controller: {policy: "%s", params: {poll_s: 0.25}}
jobs:
  - name: j0
    workload: {collective: all_reduce, size_bytes: 1048576}
"""


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """Policy modules with side effects, on sys.path (which the child inherits)."""
    mark = tmp_path / "imported-by"
    (tmp_path / "sidefx_pol.py").write_text(textwrap.dedent(f"""
        import os
        with open({str(mark)!r}, "a") as f:  # the side effect: who imported the module
            f.write(str(os.getpid()) + "\\n")
        from controller.policies.static import Ecmp
        class Mine(Ecmp):
            coschedules = True
        """))
    (tmp_path / "hangs_pol.py").write_text("import time\ntime.sleep(3600)\n")
    (tmp_path / "exits_pol.py").write_text("import os\nos._exit(7)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_probed", {})
    yield tmp_path, mark
    for m in ("sidefx_pol", "hangs_pol", "exits_pol"):
        sys.modules.pop(m, None)


def test_check_imports_the_module_in_a_child_only(plugins, capsys):
    tmp_path, mark = plugins
    exp = tmp_path / "exp.yaml"
    exp.write_text(EXPERIMENT % "sidefx_pol:Mine")
    assert cli.main(["check", str(exp)]) == 0, capsys.readouterr().err
    assert "poll_s=0.25" in capsys.readouterr().out  # params resolved by the child come back
    pids = mark.read_text().split()
    assert len(pids) == 1 and int(pids[0]) != os.getpid()
    assert "sidefx_pol" not in sys.modules


def test_the_child_s_answer_is_what_an_in_process_check_gives(plugins):
    fabric = fat_tree(4)
    with registry.imports_in_child():
        params = registry.checked_params("sidefx_pol:Mine", fabric, {"poll_s": 0.25})
        assert registry.coschedules("sidefx_pol:Mine") is True
        with pytest.raises(InputError) as e:
            registry.checked_params("sidefx_pol:Mine", fabric, {"poll_s": 1e-300})
    assert "sidefx_pol" not in sys.modules
    assert params == registry.checked_params("sidefx_pol:Mine", fabric, {"poll_s": 0.25})  # now in-process
    assert str(e.value).startswith("controller.params.poll_s: expected")


@pytest.mark.parametrize("name,words", [
    ("hangs_pol:X", ["controller.policy: expected a module that imports within 5 s", "still importing"]),
    ("exits_pol:X", ["controller.policy: expected a module that imports", "ended the process, exit status 7"]),
])
def test_a_module_that_hangs_or_exits_at_import_is_one_input_error(plugins, name, words):
    with registry.imports_in_child(), pytest.raises(InputError) as e:
        registry.checked_params(name, fat_tree(4), {})
    assert all(w in str(e.value) for w in words), str(e.value)
