"""Hop distances of the routers (flowsim.routing.hop_distances) against scipy's breadth-first search."""
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse import csgraph

from flowsim.routing import hop_distances


def reference(n, src, dst, sources):
    g = sp.csr_matrix((np.ones(len(src)), (src, dst)), shape=(n, n))
    d = csgraph.shortest_path(g, unweighted=True, directed=True, indices=sources)
    return np.where(np.isfinite(d), d, -1).astype(np.int32)


@pytest.mark.parametrize("seed", range(6))
def test_hop_distances_match_scipy_on_random_graphs_with_unreachable_nodes(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 300))
    m = int(rng.integers(0, 3 * n))
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)  # directed, with repeats and loops
    sources = rng.choice(n, size=int(rng.integers(1, min(n, 200) + 1)), replace=False)
    got = hop_distances(n, src, dst, sources, block=int(rng.choice([64, 100, 512])))
    assert (got == reference(n, src, dst, sources)).all()


def test_a_fat_tree_with_a_cable_down():
    from flowsim import Net
    from flowsim.routing import SwitchPaths
    net = Net.fat_tree(8, 400)
    paths = SwitchPaths(net)
    down = int(paths.fab_links[0])
    net.set_cable(net.names[net.link_src[down]], net.names[net.link_dst[down]], False)
    up = paths.fab_links[net.link_up[paths.fab_links]]
    assert len(up) == len(paths.fab_links) - 2  # both directions of the cable
    u, v = paths.local[net.link_src[up]], paths.local[net.link_dst[up]]
    sources = np.arange(0, len(paths.sw), 3)
    assert (hop_distances(len(paths.sw), u, v, sources) == reference(len(paths.sw), u, v, sources)).all()
