"""The house rules that the imports can break, checked over the code's own import graph.

- no import cycle between the project's modules (lazy imports inside functions count too);
- no private name (``_x``) of one module used by another, whether imported or reached as
  ``module._x`` (tests may reach into what they test; the project, bench/ and examples/ may not);
- layers: each package imports only the packages below it, and the engine-neutral ones
  (traffic/, topologies/, experiment/, the controller's policy modules), like the flow-level
  engine (flowsim/) and the ns-3 engine (packetsim/), import no Mininet, Ryu or psutil.
"""
from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PACKAGES = ("badinput", "topologies", "traffic", "controller", "experiment", "emulator", "flowsim", "packetsim",
            "dtnet")
# Each package and the project packages it may import: arrows point one way, down this list.
MAY_IMPORT = {
    "badinput": set(),
    "topologies": {"badinput"},
    "traffic": {"badinput"},
    "controller": {"badinput", "topologies"},
    "experiment": {"badinput", "topologies", "traffic", "controller"},
    "emulator": {"badinput", "topologies", "traffic", "controller", "experiment"},
    "flowsim": {"badinput", "topologies", "traffic", "controller", "experiment"},
    "packetsim": {"badinput", "topologies", "traffic", "controller", "experiment", "flowsim"},  # its routers, Net
    "dtnet": set(PACKAGES) - {"dtnet"},
}
HEAVY = ("mininet", "ryu", "os_ken", "eventlet", "psutil")
# The only modules of an engine-neutral package that may import a HEAVY package.
ADAPTERS = {"controller.ryu_app", "controller.run", "controller.ofwire"}  # ofwire: rules to OpenFlow messages
# What must run without root: the engine-neutral layers, and the flow-level engine.
NEUTRAL = ("badinput", "topologies", "traffic", "controller", "experiment", "flowsim", "packetsim")


def _modules(folders) -> dict[str, str]:
    """Dotted module name -> path, for every .py file under the folders."""
    out = {}
    for top in folders:
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if f.endswith(".py"):
                    rel = os.path.relpath(os.path.join(dirpath, f), ROOT)[:-3].replace(os.sep, ".")
                    out[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = os.path.join(dirpath, f)
    return out


PROJECT = _modules(PACKAGES)
CHECKED = {**PROJECT, **_modules(("bench", "examples"))}
TREES = {m: ast.parse(open(p).read(), p) for m, p in CHECKED.items()}


def _imports(tree) -> list[tuple[str, str | None, str | None, int]]:
    """(module, name or None, bound name or None, line) for every import, lazy ones too."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            out += [(a.name, None, a.asname, n.lineno) for a in n.names]
        elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            out += [(n.module, a.name, a.asname or a.name, n.lineno) for a in n.names]
    return out


def _target(module: str, name: str | None) -> str | None:
    """The project module an import reaches: `from p import m` reaches module p.m when it is one."""
    if name is not None and f"{module}.{name}" in PROJECT:
        return f"{module}.{name}"
    while module and module not in PROJECT:
        module = module.rpartition(".")[0]
    return module or None


def _graph() -> dict[str, dict[str, int]]:
    """module -> {imported project module: line}, for the project's own modules."""
    graph = {}
    for m in PROJECT:
        edges = {}
        for module, name, _, line in _imports(TREES[m]):
            t = _target(module, name)
            if t and t != m:
                edges.setdefault(t, line)
        graph[m] = edges
    return graph


def find_cycles(graph: dict[str, dict]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        x = stack.pop()
                        on.discard(x)
                        comp.append(x)
                        if x == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
            elif w not in graph:
                continue
            elif w not in index:
                index[w] = low[w] = counter[0]
                counter[0] += 1
                stack.append(w)
                on.add(w)
                work.append((w, iter(graph[w])))
            elif w in on:
                low[v] = min(low[v], index[w])
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(module: str, tree) -> list[str]:
    """`from m import _x` and `m._x` on an imported project module m other than this one."""
    found, bound = [], {}
    for mod, name, alias, line in _imports(tree):
        if name is None:  # import a.b.c [as x]
            if alias:
                bound[alias] = mod
            else:
                bound[mod.split(".")[0]] = mod.split(".")[0]
            continue
        t = _target(mod, name)
        if t is None or t == module:
            continue
        if t == f"{mod}.{name}":  # a module, reached by its name
            bound[alias] = t
        elif _private(name):
            found.append(f"{module}:{line}: from {mod} import {name}")
    for n in ast.walk(tree):
        if not isinstance(n, ast.Attribute) or not _private(n.attr):
            continue
        chain, base = [], n.value
        while isinstance(base, ast.Attribute):
            chain.insert(0, base.attr)
            base = base.value
        if not isinstance(base, ast.Name) or base.id not in bound:
            continue
        target = ".".join([bound[base.id], *chain])
        if target in PROJECT and target != module:
            found.append(f"{module}:{n.lineno}: {target}.{n.attr}")
    return found


def layer_breaks(module: str, tree) -> list[str]:
    pkg = module.split(".")[0]
    out = []
    for mod, name, _, line in _imports(tree):
        top = mod.split(".")[0]
        if top in PACKAGES and top != pkg and top not in MAY_IMPORT[pkg]:
            out.append(f"{module}:{line}: {pkg}/ imports {mod}")
        if top in HEAVY and pkg in NEUTRAL and module not in ADAPTERS:
            out.append(f"{module}:{line}: {pkg}/ imports {top}")
    return out


def test_no_import_cycle():
    assert find_cycles(_graph()) == []


def test_no_private_name_used_across_modules():
    found = [f for m in sorted(CHECKED) for f in private_uses(m, TREES[m])]
    assert found == []


def test_each_package_imports_only_what_is_below_it():
    assert [b for m in sorted(PROJECT) for b in layer_breaks(m, TREES[m])] == []


# The checks themselves, on made-up code: each must be able to fail.

def test_the_cycle_check_finds_a_lazy_cycle():
    assert find_cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b": 1}, "b": {}}) == []


@pytest.mark.parametrize("code, hits", [
    ("from experiment.outputs.summary import _fmt_b", 1),
    ("from experiment.outputs import summary\nsummary._fmt_b(1)", 1),
    ("import experiment.outputs.summary\nexperiment.outputs.summary._fmt_s(1)", 1),
    ("from experiment.outputs.summary import read_events\nread_events('x')", 0),
    ("class A:\n    def f(self):\n        return self._x", 0),
])
def test_the_private_check_sees_both_ways_in(code, hits):
    assert len(private_uses("dtnet.x", ast.parse(code))) == hits


@pytest.mark.parametrize("module, code, hits", [
    ("experiment.x", "import psutil", 1),
    ("experiment.x", "def f():\n    from emulator.run import runner", 1),
    ("traffic.x", "from topologies import Fabric", 1),
    ("controller.routing", "from ryu.lib import hub", 1),
    ("controller.ryu_app", "from ryu.lib import hub", 0),
    ("emulator.x", "import mininet.net\nfrom experiment import model", 0),
])
def test_the_layer_check_knows_the_arrows(module, code, hits):
    assert len(layer_breaks(module, ast.parse(code))) == hits


# The agent starts 32 times per run on 2 cores: it reads its contracts and nothing else of the project.
AGENT_MAY_REACH = {"badinput", "badinput.schema", "experiment", "experiment.rankplan"}


def test_the_agent_reaches_only_the_stdlib_and_its_contracts():
    import sys

    graph = _graph()
    seen, todo = set(), ["emulator.agent.__main__"]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += graph.get(m, {})
    outside = {m for m in seen if not m.startswith("emulator.agent")} - AGENT_MAY_REACH - {"emulator"}
    assert outside == set()
    third = {mod.split(".")[0] for m in seen for mod, _, _, _ in _imports(TREES[m])
             if mod.split(".")[0] not in PACKAGES and mod.split(".")[0] not in sys.stdlib_module_names}
    assert third == set()
