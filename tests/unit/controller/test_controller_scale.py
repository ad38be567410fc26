"""The congestion-aware policy's arrays and caches (controller.policies.scale) decide exactly
what the plain per-path loops decide: the same least-loaded path, the same pending demands,
the same first fit. Random cases, with ties and loads that need rounding."""
import random
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.hedera import global_first_fit
from controller.load import LinkLoad
from controller.paths import ShortestPaths, path_links
from controller.policies.congestion import CongestionAware
from controller.policies.scale import Candidates, CandidateSet, LinkIndex, first_fit, least_loaded
from controller.policy import Flow, FlowKey, Observation
from topologies import fat_tree, leaf_spine, rail_optimized

FABRICS = [fat_tree(4), fat_tree(6), leaf_spine(3, 3, 2), rail_optimized(3, 2, 2)]


def _flow(fabric, i, src, dst, **kw):
    key = FlowKey(fabric.node(src)["ip"], fabric.node(dst)["ip"], 6, 1000 + i, 5000)
    return Flow(i + 1, key, src, dst, None, 0.0, **kw)


class Loads(LinkLoad):
    """Loads set by hand, on the fabric's own capacities."""

    def set(self, rng, share_zero=0.5):
        for ln in self.capacity_gbps:
            if rng.random() > share_zero:
                # Thirds and sevenths of a capacity round at the ninth decimal; loads apart by
                # less than that tie, loads apart by more do not.
                self.load_gbps[ln] = self.capacity_gbps[ln] * rng.choice(
                    [1 / 3, 2 / 7, 0.5, 0.5 + 2e-10, 0.5 + 3e-8, 0.5 + 4e-7, 1.0, rng.random()])
        self.version += 1


@settings(max_examples=40, deadline=None)
@given(fi=st.integers(0, len(FABRICS) - 1), seed=st.integers(0, 10 ** 6), n=st.integers(1, 40), large=st.booleans())
def test_placements_match_the_plain_loop(fi, seed, n, large):
    """flow_started with the caches places every flow where min over (path_cost, hash)
    with the from-scratch pending demands would, flow after flow, measured or not; with
    the candidate paths listed in Python or on arrays (what large fabrics get)."""
    fabric = FABRICS[fi]
    rng = random.Random(seed)
    pol = CongestionAware(fabric, {"elephant_fraction": 0.1})
    paths, loads, flows = ShortestPaths(fabric), Loads(fabric), {}
    paths.large = large
    obs = Observation(0.0, fabric, paths, loads, flows, flows_version=0)
    loads.set(rng)
    hosts = fabric.hosts
    for i in range(n):
        src, dst = rng.sample(hosts, 2)
        f = _flow(fabric, i, src, dst, reply=rng.random() < 0.2)
        if f.key in flows:
            continue
        cands = paths.equal_cost_paths(src, dst, 256)
        if not cands:
            assert pol.flow_started(0.0, f, obs) is None
            continue
        pend = pol.pending(obs)
        salt = zlib.crc32(str(f.key).encode())
        want = min(cands, key=lambda p: (pol.path_cost(src, p, dst, pend, obs), zlib.crc32(repr(p).encode()) ^ salt))
        got = pol.flow_started(0.0, f, obs)
        assert got.path == want, (i, got.path, want)
        f.path = got.path
        flows[f.key] = f
        if rng.random() < 0.15:  # the engine measures some flows: what they carry changes
            for g in rng.sample(list(flows.values()), max(1, len(flows) // 3)):
                g.measured, g.rate_gbps = True, rng.choice([1.0, 40.0, 400.0])
            obs.flows_version += 1
        if rng.random() < 0.1:
            loads.set(rng)


@settings(max_examples=40, deadline=None)
@given(fi=st.integers(0, len(FABRICS) - 1), seed=st.integers(0, 10 ** 6), n=st.integers(1, 60))
def test_first_fit_on_arrays_matches_global_first_fit(fi, seed, n):
    fabric = FABRICS[fi]
    rng = random.Random(seed)
    paths, links = ShortestPaths(fabric), LinkIndex(fabric)
    paths.large = seed % 2 == 0  # candidate sets from arrays, or from name tuples
    cand = Candidates(links)
    hosts = fabric.hosts
    order, demands, current, cs_list, plain = [], [], [], [], []
    background = {}
    for ln in list(links.id)[:: 7]:
        background[ln] = rng.choice([0.0, 50.0, 399.0])
    for i in range(n):
        src, dst = rng.sample(hosts, 2)
        ecp = paths.equal_cost_paths(src, dst)
        if not ecp:
            continue
        cur = rng.choice(ecp)
        held = rng.random() < 0.2
        order.append(i)
        demands.append(rng.choice([50.0, 133.33333333333334, 200.0, 400.0]))
        current.append(links.ids(src, cur, dst))
        cs = None if held else cand.get(paths, src, dst, 256)
        cs_list.append((cs, cur) if cs is not None else None)
        others = [] if held else [p for p in ecp if p != cur]
        plain.append([path_links(src, p, dst) for p in [cur] + others])
    reserved = np.zeros(len(links.cap))
    for ln, v in background.items():
        reserved[links.id[ln]] = v
    got = first_fit(order, demands, current, cs_list, links, reserved)
    cap = {ln: links.cap[i] for ln, i in links.id.items()}
    want, _ = global_first_fit(demands, plain, cap.__getitem__, dict(background))
    for g, w, cs, pl in zip(got, want, cs_list, plain):
        if w is None or w == 0:
            assert g == (None if w is None else -1)
        else:
            assert cs[0].paths[g] == tuple(n for n, _ in pl[w][1:]), (g, w)


@settings(max_examples=30, deadline=None)
@given(fi=st.integers(0, len(FABRICS) - 1), seed=st.integers(0, 10 ** 6), limit=st.sampled_from([None, 1, 3, 256]))
def test_paths_listed_on_arrays_are_the_ones_listed_in_python(fi, seed, limit):
    fabric = FABRICS[fi]
    rng = random.Random(seed)
    down = frozenset(frozenset(ln[:2]) for ln in rng.sample(fabric.links("fabric"), 2))
    paths = ShortestPaths(fabric, down)
    links = LinkIndex(fabric)
    for _ in range(20):
        a, b = rng.sample(fabric.hosts, 2)
        plain = paths._equal_cost_paths(a, b, limit)
        rows = paths.path_matrix(a, b, limit)
        assert ([] if rows is None else [tuple(paths.switches[i] for i in r) for r in rows.tolist()]) == plain
        if plain:
            fast, slow = CandidateSet.from_matrix(paths, rows, links), CandidateSet(plain, links)
            assert fast.paths == slow.paths and (fast.inner == slow.inner).all() and (fast.crc == slow.crc).all()


@pytest.mark.parametrize("fabric", FABRICS, ids=lambda f: f"{f.kind}-{len(f.hosts)}")
def test_routes_and_walks_on_arrays_are_the_small_fabrics_ones(fabric):
    """ShortestPaths.large (scipy's search, arrays) changes how, not what."""
    small, large = ShortestPaths(fabric), ShortestPaths(fabric)
    large.large = True
    for d in small.switches:
        for s in small.switches:
            assert small.ports(s, d) == large.ports(s, d)
    for a, b in zip(fabric.hosts, reversed(fabric.hosts)):
        assert small.equal_cost_paths(a, b) == large.equal_cost_paths(a, b)


@pytest.mark.parametrize("fabric", FABRICS + [fat_tree(8)], ids=lambda f: f"{f.kind}-{len(f.hosts)}")
def test_scipy_and_python_searches_give_the_same_hop_counts(fabric):
    paths = ShortestPaths(fabric, frozenset({frozenset(fabric.links("fabric")[0][:2])}))
    for dst in paths.switches:
        j = paths.index[dst]
        assert paths._bfs_python(j) == paths._bfs_scipy(j).tolist()


def test_least_loaded_breaks_ties_by_the_flow_salted_path_hash():
    fabric = fat_tree(4)
    links = LinkIndex(fabric)
    cs = CandidateSet(ShortestPaths(fabric).equal_cost_paths("h0", "h15"), links)
    salts = [zlib.crc32(f"flow {i}".encode()) for i in range(64)]
    idle = [least_loaded(cs, links, salt) for salt in salts]
    assert set(idle) == set(range(4))  # idle: the hash spreads flows over every path
    links.set_pend(cs.inner[2].tolist(), [1e-12] * cs.inner.shape[1])  # below the ninth decimal: still ties
    assert [least_loaded(cs, links, salt) for salt in salts] == idle
    ids = sorted(set(cs.inner[[0, 1, 3]].ravel().tolist()) - set(cs.inner[2].tolist()))
    links.set_pend(ids, [1.0] * len(ids))
    assert {least_loaded(cs, links, salt) for salt in salts} == {2}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.floats(0, 1e4, allow_nan=False), st.sampled_from([0.5e-9, 1.5e-9, 2.5e-9, 1 / 3, 0.0])),
                min_size=1, max_size=50))
def test_round9_is_pythons_round(values):
    from controller.policies.scale import round9
    arr = np.array(values, dtype=float)
    halfway = (np.floor(arr * 1e9) + 0.5) / 1e9  # as close to a halfway point as floats get
    for a in (arr, halfway):
        assert round9(a).tolist() == [round(float(x), 9) for x in a]
