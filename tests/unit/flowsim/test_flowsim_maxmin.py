"""The sharing model: max-min fair rates by progressive filling, against hand-computed cases,
the max-min conditions (hypothesis) and SimGrid as an independent oracle."""
import json
import os
import subprocess
import sys

import numpy as np
import scipy.sparse as sp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowsim.maxmin import check_max_min, fluid_completion_times, incidence_matrix, max_min_rates


def rates(paths, capacity, **kw):
    indptr = np.concatenate([[0], np.cumsum([len(p) for p in paths])])
    links = np.array([l for p in paths for l in p], dtype=np.int64)
    a = incidence_matrix(indptr, links, len(capacity))
    return max_min_rates(a, np.asarray(capacity, float), **kw), a


def test_two_flows_on_one_link_split_it():
    r, _ = rates([[0], [0]], [10.0])
    assert r.tolist() == pytest.approx([5.0, 5.0])


def test_bottleneck_shared_by_three_jobs_then_the_rest_goes_to_the_unconstrained_one():
    # Three flows share link 0 (cap 9); flow 2 also crosses link 1 (cap 1): it gets 1,
    # the other two split the remaining 8.
    r, _ = rates([[0], [0], [0, 1]], [9.0, 1.0])
    assert r.tolist() == pytest.approx([4.0, 4.0, 1.0])


def test_caps_and_multiplicity():
    # Column 0 stands for three identical flows; flow 1 is capped at 1.
    r, a = rates([[0], [0]], [10.0], mult=np.array([3.0, 1.0]), cap=np.array([np.inf, 1.0]))
    assert r.tolist() == pytest.approx([3.0, 1.0])


def test_weights_count_a_bundle_several_times_on_a_link():
    # A bundle with two connections on link 0 and one flow there: three equal shares.
    a = incidence_matrix(np.array([0, 2, 3]), np.array([0, 0, 0]), 1)
    assert max_min_rates(a, np.array([9.0])).tolist() == pytest.approx([3.0, 3.0])


def test_down_link_gives_zero_and_no_link_gives_cap_or_inf():
    r, _ = rates([[0], [], []], [0.0], cap=np.array([np.inf, 2.0, np.inf]))
    assert r[0] == 0 and r[1] == 2.0 and np.isinf(r[2])


@st.composite
def flow_sets(draw):
    n_links = draw(st.integers(1, 8))
    cap = draw(st.lists(st.floats(0.5, 100.0), min_size=n_links, max_size=n_links))
    n_flows = draw(st.integers(1, 12))
    paths = [draw(st.lists(st.integers(0, n_links - 1), min_size=1, max_size=4, unique=True)) for _ in range(n_flows)]
    caps = draw(st.lists(st.one_of(st.just(np.inf), st.floats(0.1, 50.0)), min_size=n_flows, max_size=n_flows))
    mult = draw(st.lists(st.integers(1, 3), min_size=n_flows, max_size=n_flows))
    return cap, paths, caps, mult


@settings(max_examples=200, deadline=None)
@given(flow_sets())
def test_max_min_conditions_hold(case):
    cap, paths, caps, mult = case
    r, a = rates(paths, cap, cap=np.array(caps), mult=np.array(mult, float))
    assert check_max_min(a, np.array(cap), r, mult=np.array(mult, float), cap=np.array(caps)) == []


def test_fluid_completion_two_flows_one_link():
    # 1 GB and 2 GB on a 1 GB/s link: both at 0.5 GB/s until 2 s, then the second alone: 3 s.
    end = fluid_completion_times(np.array([0, 1, 2]), np.array([0, 0]), np.array([1e9]), np.array([1e9, 2e9]))
    assert end.tolist() == pytest.approx([2.0, 3.0])


def test_weighted_fluid_completion():
    # weights 1 and 3 on a 1 GB/s link, 1 GB each: 0.25 and 0.75 GB/s; the second ends at 4/3 s, the
    # first then has 2/3 GB left alone: 2 s. A cap of 0.5 GB/s on the second: both at 0.5, both at 2 s.
    one = (np.array([0, 1, 2]), np.array([0, 0]), np.array([1e9]), np.array([1e9, 1e9]))
    assert fluid_completion_times(*one, weights=np.array([1.0, 3.0])).tolist() == pytest.approx([2.0, 4 / 3])
    capped = fluid_completion_times(*one, cap=np.array([np.inf, 0.5e9]), weights=np.array([1.0, 3.0]))
    assert capped.tolist() == pytest.approx([2.0, 2.0])
    assert fluid_completion_times(*one, weights=np.array([2.0, 2.0])).tolist() == pytest.approx([2.0, 2.0])


def _random_case(rng, n_links, n_flows):
    capacity = rng.uniform(1e8, 1e10, n_links)
    flows = []
    for _ in range(n_flows):
        k = int(rng.integers(1, min(5, n_links) + 1))
        flows.append({"links": rng.choice(n_links, k, replace=False).tolist(),
                      "size": int(rng.integers(10**6, 10**9)), "start": float(rng.choice([0.0, rng.uniform(0, 0.2)]))})
    return {"capacity": capacity.tolist(), "flows": flows}


def _simgrid(case):
    proc = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "simgrid_oracle.py")],
                          input=json.dumps(case), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return np.array(json.loads(proc.stdout))


def _have_simgrid():
    try:
        import simgrid  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _have_simgrid() and not os.environ.get("CI"),
                    reason="SimGrid's Python module is absent (apt-get install python3-simgrid; make setup does)")
@pytest.mark.parametrize("seed", range(6))
def test_completion_times_agree_with_simgrid(seed):
    rng = np.random.default_rng(seed)
    case = _random_case(rng, n_links=int(rng.integers(2, 12)), n_flows=int(rng.integers(2, 40)))
    indptr = np.concatenate([[0], np.cumsum([len(f["links"]) for f in case["flows"]])])
    links = np.array([l for f in case["flows"] for l in f["links"]])
    ours = fluid_completion_times(indptr, links, np.array(case["capacity"]),
                                  np.array([f["size"] for f in case["flows"]], float),
                                  np.array([f["start"] for f in case["flows"]]))
    theirs = _simgrid(case)
    assert np.max(np.abs(ours / theirs - 1)) < 0.01, (ours, theirs)


@settings(max_examples=300, deadline=None)
@given(flow_sets(), st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0]), min_size=48, max_size=48),
       st.lists(st.sampled_from([0.0, 1.0, 2.0]), min_size=8, max_size=8))
def test_fill_rates_by_local_bottlenecks_equals_one_level_a_round(case, weights, down):
    """flowsim.rates.fill_rates freezes every local bottleneck in a round; max_min_rates freezes one
    level a round. Same rates (float rounding), zero weights and links of capacity 0 included."""
    from flowsim.rates import fill_rates
    cap, paths, caps, _ = case
    cap = np.array(cap) * np.array(down[:len(cap)]).clip(0, 1)  # some links down
    ent = np.repeat(np.arange(len(paths)), [len(p) for p in paths])
    link = np.array([l for p in paths for l in p], np.int64)
    w = np.array(weights[:len(link)])
    ref = max_min_rates(sp.csr_matrix((w, (link, ent)), shape=(len(cap), len(paths))), cap, cap=np.array(caps))
    got, rounds = fill_rates(ent, link, w, cap, np.array(caps))
    assert np.isinf(got).tolist() == np.isinf(ref).tolist()
    fin = np.isfinite(ref)
    assert got[fin] == pytest.approx(ref[fin], rel=1e-12, abs=1e-12)
    assert rounds <= max(1, len(paths))
