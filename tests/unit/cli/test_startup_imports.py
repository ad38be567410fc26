"""Commands that need no simulator, plot or sparse solver do not import one: start-up is most of
a small command's time (docs/flow-engine.md, "What a small run costs")."""
import subprocess
import sys

HEAVY = ("scipy", "matplotlib", "networkx", "asyncio", "flowsim")


def _imported(code: str) -> set:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True).stdout.split()
    return {m for m in HEAVY if m in out}


def test_the_command_and_the_package_start_light():
    assert _imported("import dtnet.cli; dtnet.cli.build_parser()") == set()
    assert _imported("import dtnet; from dtnet import program") == set()


def test_reading_an_experiment_needs_no_scipy_and_the_api_still_loads_on_use():
    assert "scipy" not in _imported("import dtnet; dtnet.load  # the API, the model, policies and fabrics")
    assert "scipy" not in _imported("import controller.paths")
