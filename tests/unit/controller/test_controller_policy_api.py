"""The policy plug-in API: declared params, the registry, decisions checked, and the
question an engine asks at scale (which path does this flow take)."""
import os
import itertools
import sys
import textwrap

import pytest

from badinput import InputError
from controller.core import FabricController
from controller.params import Param, Params, resolve
from controller.paths import ShortestPaths
from controller.policy import (EcmpForwarding, FlowKey, Forwarding, Placement, Policy, PolicyError,
                               ShortestForwarding, TableForwarding, path_of)
from controller.registry import BUILTINS, make_policy, policy_class, resolve_params
from controller.testing import Sim, connect_all, delivered_pairs
from controller.fakeof import FakeNetwork
from topologies import fat_tree, leaf_spine, rail_optimized


# -- params ------------------------------------------------------------------------
def test_params_take_defaults_check_ranges_and_are_read_only():
    decl = {"poll_s": Param(0.5, gt=0), "steps": Param(50, ge=1, le=100), "mode": Param("a", choices=("a", "b"))}
    p = resolve(decl, {"steps": 7})
    assert (p.poll_s, p.steps, p.mode) == (0.5, 7, "a")
    assert resolve(decl, {"poll_s": 2}).poll_s == 2.0 and isinstance(resolve(decl, {"poll_s": 2}).poll_s, float)
    with pytest.raises(AttributeError):
        p.poll_s = 1.0
    with pytest.raises(AttributeError):
        p.nothing
    for given, key, expected in [({"poll_s": 0}, "poll_s", "a number > 0"), ({"steps": 2.5}, "steps", "an integer"),
                                 ({"steps": 101}, "steps", "an integer in 1..100"), ({"steps": True}, "steps", ""),
                                 ({"mode": "c"}, "mode", "one of a, b"), ({"colour": 1}, "colour", "a param of")]:
        with pytest.raises(InputError) as e:
            resolve(decl, given, "controller.params", "x.yaml")
        msg = str(e.value)
        assert msg.startswith(f"x.yaml: controller.params.{key}: expected {expected}") and "\n" not in msg


def test_a_param_default_must_fit_its_own_range():
    with pytest.raises(ValueError):
        Param(0.0, gt=0)


# -- registry ----------------------------------------------------------------------
def test_builtins_resolve_and_declare_their_tunables():
    declared = {name: set(policy_class(name).PARAMS) for name in BUILTINS}
    assert declared["ecmp"] == declared["shortest"] == {"poll_s", "tau_s"}
    assert {"hold_s", "elephant_fraction", "idle_timeout_s", "max_paths"} <= declared["congestion-aware"]
    assert {"offset_steps", "low_share"} <= declared["coschedule"]
    assert policy_class("coschedule").coschedules and policy_class("congestion-aware").sees_flows
    assert resolve_params("coschedule", {"low_share": 0.5}).low_share == 0.5


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """A folder on the path with a good policy, a broken module and a class that is not a policy."""
    (tmp_path / "goodpol.py").write_text(textwrap.dedent("""
        from controller.params import Param
        from controller.policy import Policy
        class Mine(Policy):
            PARAMS = {"spread_gbps": Param(10.0, gt=0)}
        class NotAPolicy:
            pass
        """))
    (tmp_path / "brokenpol.py").write_text("import no_such_module_anywhere\n")
    (tmp_path / "raisespol.py").write_text("raise RuntimeError('half-written')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for m in ("goodpol", "brokenpol", "raisespol"):
        sys.modules.pop(m, None)


def test_a_class_anywhere_on_the_path_is_a_policy(plugins):
    pol = make_policy("goodpol:Mine", fat_tree(2), {"spread_gbps": 5})
    assert pol.params.spread_gbps == 5.0 and pol.name == "goodpol:Mine"


@pytest.mark.parametrize("name,words", [
    ("magic", ["controller.policy: expected one of shortest", "magic"]),
    ("goodpol:NotAPolicy", ["a subclass of controller.policy.Policy", "NotAPolicy"]),
    ("goodpol:Missing", ["a class Missing in module goodpol"]),
    ("nowhere_at_all:X", ["an importable module nowhere_at_all", "PYTHONPATH"]),
    ("brokenpol:X", ["a module brokenpol that imports", "ModuleNotFoundError"]),
    ("raisespol:X", ["a module raisespol that imports", "RuntimeError: half-written"]),
    ("a b:c", ["expected one of"]),
])
def test_bad_policy_names_are_one_line_input_errors(plugins, name, words):
    with pytest.raises(InputError) as e:
        policy_class(name)
    assert all(w in str(e.value) for w in words) and "\n" not in str(e.value)


def test_a_constructor_that_fails_on_the_fabric_is_an_input_error(tmp_path, monkeypatch):
    (tmp_path / "fussy.py").write_text(textwrap.dedent("""
        from controller.policy import Policy
        class OnlyFatTrees(Policy):
            def __init__(self, fabric, params=None):
                super().__init__(fabric, params)
                if fabric.kind != "fat-tree":
                    raise ValueError("needs a fat-tree")
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(InputError) as e:
        make_policy("fussy:OnlyFatTrees", leaf_spine(2, 2, 2))
    assert "builds on this fabric (leaf-spine)" in str(e.value) and "needs a fat-tree" in str(e.value)
    sys.modules.pop("fussy", None)


# -- forwarding and paths -----------------------------------------------------------
@pytest.mark.parametrize("fabric", [fat_tree(4), leaf_spine(3, 2, 2), rail_optimized(2, 4, 2)],
                         ids=["fat-tree", "leaf-spine", "rail"])
def test_path_of_agrees_with_the_fake_switches(fabric):
    """An engine's cheap question, answered by walking base forwarding with the select
    groups' hash, gives the path the fake OpenFlow network forwards the packet on."""
    for policy in ("ecmp", "shortest"):
        ctl = FabricController(fabric, policy)
        net = FakeNetwork(fabric)
        connect_all(ctl, net)
        for (src, dst), sport in zip(itertools.permutations(fabric.hosts, 2), itertools.cycle(range(40000, 40013))):
            key = FlowKey(fabric.node(src)["ip"], fabric.node(dst)["ip"], 6, sport, 5000)
            t = net.trace(src, dst, sport=sport)
            assert path_of(key, src, dst, {}, ctl.fwd, ctl.paths) == (t.switches if t.delivered else None)


def test_path_of_prefers_a_placement_and_stops_at_a_black_hole():
    fabric = fat_tree(4)
    paths = ShortestPaths(fabric)
    key = FlowKey(fabric.node("h0")["ip"], fabric.node("h4")["ip"], 6, 1, 2)
    placed = paths.equal_cost_paths("h0", "h4")[-1]
    assert path_of(key, "h0", "h4", {key: placed}, EcmpForwarding(paths), paths) == placed
    assert path_of(key, "h0", "h4", {}, TableForwarding({}), paths) is None


def test_shortest_paths_on_demand_match_every_pair_and_count_without_listing():
    fabric = fat_tree(6)
    paths = ShortestPaths(fabric)
    assert paths.count_paths("h0", "h53") == len(paths.equal_cost_paths("h0", "h53")) == 9
    assert paths.equal_cost_paths("h0", "h53", limit=4) == sorted(paths.equal_cost_paths("h0", "h53"))[:4]
    down = ShortestPaths(fabric, frozenset({frozenset(("edge0_0", "agg0_0"))}))
    assert down.count_paths("h0", "h53") == 6 and all("agg0_0" not in p for p in down.equal_cost_paths("h0", "h53"))


# -- decisions are checked -----------------------------------------------------------
class Teleport(Policy):
    """Places every flow on a path that skips a switch: a policy bug."""
    sees_flows = True

    def flow_started(self, now, flow, obs):
        path = obs.paths.equal_cost_paths(flow.src, flow.dst)[0]
        return Placement(flow.key, (path[0], path[-1]))


class Stranger(Policy):
    sees_flows = True

    def flow_started(self, now, flow, obs):
        return Placement(flow.key, None)

    def poll(self, now, obs):
        return [Placement(FlowKey("10.0.0.1", "10.0.0.2", 6, 9, 9), None)]


def test_a_decision_the_fabric_cannot_carry_is_a_policy_error():
    sim = Sim(fat_tree(4), Teleport(fat_tree(4)))
    with pytest.raises(PolicyError, match="no live link"):
        sim.start("h0", "h4", 10)
    sim = Sim(fat_tree(4), Stranger(fat_tree(4)))
    k = sim.start("h0", "h4", 10)  # watched on base forwarding: delivered by ECMP
    assert sim.path(k).delivered and sim.flow(k).path is None
    with pytest.raises(PolicyError, match="not a watched flow"):
        sim.step()


def test_a_static_table_policy_forwards_as_its_table_says():
    fabric = leaf_spine(2, 2, 1)  # h0 on leaf0, h1 on leaf1, spines 0 and 1

    class ViaSpine1(Policy):
        def forwarding(self, now, obs):
            ecmp = EcmpForwarding(obs.paths)
            up = {(f"leaf{i}", h): (fabric.port(f"leaf{i}", "spine1"),) for i in (0, 1) for h in ("h0", "h1")
                  if fabric.attachment(h)[0] != f"leaf{i}"}
            return TableForwarding(up, ecmp)

    ctl = FabricController(fabric, ViaSpine1(fabric))
    net = FakeNetwork(fabric)
    connect_all(ctl, net)
    assert [t.switches for t in net.all_traces("h0", "h1")] == [("leaf0", "spine1", "leaf1")]
    assert all(delivered_pairs(net).values())
    assert isinstance(ShortestForwarding(ShortestPaths(fabric)), Forwarding)


def test_default_hooks_answer_go_now_and_return_broken_placements_to_base_forwarding():
    class Pinner(Policy):
        sees_flows = True

        def flow_started(self, now, flow, obs):
            return Placement(flow.key, obs.paths.equal_cost_paths(flow.src, flow.dst)[0], reason="first path")

    fabric = fat_tree(4)
    sim = Sim(fabric, Pinner(fabric))
    k = sim.start("h0", "h4", 10)
    path = sim.flow(k).path
    sim.set_link(path[1], path[2], up=False)
    assert sim.flow(k).path is None and sim.path(k).delivered
    assert sim.state()["decisions"][-1]["reason"] == "link down: back to base forwarding"
    assert sim.announce("j", [("h0", "h1", 1000)])["start_offset_s"] == 0.0


def test_state_names_the_policy_and_its_params():
    sim = Sim(fat_tree(4), "congestion-aware", hold_s=1.5)
    st = sim.state()
    assert st["policy"]["policy"] == "congestion-aware" and st["policy"]["params"]["hold_s"] == 1.5
    assert st["routing"] == "congestion-aware" and isinstance(sim.policy.params, Params)


def test_a_forwarding_that_narrows_ecmp_by_overriding_ports_is_what_the_switches_get():
    fabric = fat_tree(4)

    class FirstPort(EcmpForwarding):
        def ports(self, switch, dst):
            return super().ports(switch, dst)[:1]

    class FirstPortPolicy(Policy):
        def forwarding(self, now, obs):
            return FirstPort(obs.paths)

    net = FakeNetwork(fabric)
    connect_all(FabricController(fabric, FirstPortPolicy(fabric)), net)
    assert all(len(net.all_traces(s, d)) == 1 for s, d in itertools.permutations(fabric.hosts, 2))
    assert all(delivered_pairs(net).values())


def test_a_failing_links_changed_still_lets_the_routes_go_out():
    class Breaks(Policy):
        sees_flows = True

        def flow_started(self, now, flow, obs):
            return Placement(flow.key, obs.paths.equal_cost_paths(flow.src, flow.dst)[0])

        def links_changed(self, now, obs):
            raise RuntimeError("oops")

        def state(self, now, obs):
            raise ValueError("no report")

    fabric = fat_tree(4)
    sim = Sim(fabric, Breaks(fabric))
    sim.start("h0", "h4", 10)
    with pytest.raises(PolicyError, match="RuntimeError: oops"):
        sim.set_link("edge0_0", "agg0_0", up=False)
    # Base forwarding was rerouted all the same: every pair (from h0's edge) is delivered.
    assert all(t.delivered for d in fabric.hosts[2:] for t in sim.net.all_traces("h0", d, sport=7)
               if t.outcome != "controller")
    st = sim.state()
    assert st["counters"]["policy_errors"] == 2 and [f["hook"] for f in st["policy_failures"]] == [
        "links_changed", "state"]


def test_a_dual_homed_host_is_routed_to_by_its_first_interface():
    """Hosts send by eth0 (Fabric.attachment); the destination routes must end there too."""
    from topologies import load_fabric_file

    fab = load_fabric_file(os.path.join(os.path.dirname(__file__), "..", "..", "..", "experiments", "fabrics",
                                        "dual-tor-4gpu.yaml"))
    paths = ShortestPaths(fab)
    assert all(len(fab.attachments(h)) == 2 for h in fab.hosts)
    assert {h: paths.attach[h] for h in fab.hosts} == {h: fab.attachment(h) for h in fab.hosts}
