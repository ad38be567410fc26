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


def test_a_small_flow_simulation_needs_no_sparse_solver():
    # scipy.sparse costs about a tenth of a 16-GPU `dtnet run`; the rate solver fills with numpy alone.
    code = ("from flowsim import EcmpRouter, JobSpec, Net, Params, Simulation\n"
            "from topologies import build\nfrom traffic.workload import build_workload\n"
            "fab = build('single-switch', {'hosts': 4, 'link_gbps': 400})\n"
            "tr = build_workload({'collective': 'all_reduce', 'algorithm': 'ring', 'size_bytes': 1 << 20}, 4)\n"
            "res = Simulation(Net.from_fabric(fab), [JobSpec('r', fab.hosts, tr)], EcmpRouter(0), Params()).run()\n"
            "assert res.complete")
    assert "scipy" not in _imported(code)
