"""Max-min fair rates by progressive filling, vectorized over a sparse incidence matrix.

Every unfrozen entity rises at one common level; a link saturates when the level reaches
its remaining capacity over the weight of the unfrozen entities crossing it. Each round
freezes every entity on the links that saturate at the lowest level (and every entity whose
own cap is reached), so the number of rounds is the number of distinct bottleneck levels,
not the number of flows. A round costs three sparse matrix-vector products.

Entities generalize flows: column e of ``incidence`` holds, per link, how many bytes the
entity puts on that link per unit of its rate (1 on each link of a plain flow's path; the
number of its connections there for a bundle of connections tied to one rate), and
``mult`` counts identical entities merged into one column (same links, same cap).
"""
from __future__ import annotations

import numpy as np

REL_TOL = 1e-9


def incidence_matrix(indptr: np.ndarray, links: np.ndarray, n_links: int,
                     weights: np.ndarray | None = None) -> sp.csr_matrix:
    """links x entities matrix from each entity's link list (CSR by entity: indptr, links).
    A link listed twice for one entity counts twice (a bundle crossing it twice)."""
    n_ent = len(indptr) - 1
    data = np.ones(len(links)) if weights is None else np.asarray(weights, dtype=float)
    import scipy.sparse as sp  # here, not at import: a small run never needs it (start-up time)

    at = sp.csr_matrix((data, np.asarray(links, dtype=np.int64), np.asarray(indptr, dtype=np.int64)),
                       shape=(n_ent, n_links))
    at.sum_duplicates()
    return at.T.tocsr()


def max_min_rates(a: sp.spmatrix, capacity: np.ndarray, mult: np.ndarray | None = None,
                  cap: np.ndarray | None = None, return_rounds: bool = False):
    """Max-min fair rate of each entity (per unit of multiplicity).

    a: links x entities (nonnegative weights); capacity: per link, bytes/s (0 for a link
    that is down: entities on it get 0); mult: identical entities per column (default 1);
    cap: per-entity upper bound (inf: none). An entity with no link and no cap gets inf.
    """
    import scipy.sparse as sp

    a = sp.csc_matrix(a)
    n_links, n_ent = a.shape
    mult = np.ones(n_ent) if mult is None else np.asarray(mult, dtype=float)
    cap = np.full(n_ent, np.inf) if cap is None else np.asarray(cap, dtype=float)
    rem = np.asarray(capacity, dtype=float).copy()
    rate = np.zeros(n_ent)
    # The matrix holds some columns (cols); live marks those still rising. It is cut down to
    # the live columns whenever they drop below 70% of it, so late rounds cost what is left.
    cols = np.flatnonzero(mult > 0)
    w = a[:, cols].tocsr()
    wt = w.T.tocsr()
    live = np.ones(len(cols), bool)
    rounds = 0
    while live.any():
        rounds += 1
        m = mult[cols] * live
        n = w @ m
        used = n > 0
        share = np.full(n_links, np.inf)
        share[used] = np.maximum(rem[used], 0.0) / n[used]
        c = np.where(live, cap[cols], np.inf)
        lvl = min(share.min() if n_links else np.inf, c.min())
        if not np.isfinite(lvl):  # what is left crosses no link and has no cap
            rate[cols[live]] = np.inf
            break
        limit = lvl * (1 + REL_TOL) + 1e-300
        sat = used & (share <= limit)
        capped = live & (c <= limit)
        newly = capped | (live & ((wt @ sat.astype(float)) > 0))
        r = np.where(capped, np.minimum(c, lvl), lvl) * newly
        rate[cols[newly]] = r[newly]
        rem -= w @ (m * r)
        live &= ~newly
        if 0 < live.sum() < 0.7 * len(cols):
            keep = np.flatnonzero(live)
            cols = cols[keep]
            w = w.tocsc()[:, keep].tocsr()
            wt = w.T.tocsr()
            live = np.ones(len(cols), bool)
    if return_rounds:
        return rate, rounds
    return rate


def check_max_min(a: sp.spmatrix, capacity: np.ndarray, rate: np.ndarray, mult: np.ndarray | None = None,
                  cap: np.ndarray | None = None, tol: float = 1e-6) -> list[str]:
    """The max-min conditions, for tests: feasibility, and every entity is either at its cap or
    crosses a saturated link on which no entity has a higher rate. Returns what fails."""
    import scipy.sparse as sp

    a = sp.csc_matrix(a)
    n_ent = a.shape[1]
    mult = np.ones(n_ent) if mult is None else np.asarray(mult, dtype=float)
    cap = np.full(n_ent, np.inf) if cap is None else np.asarray(cap, dtype=float)
    load = a @ (mult * rate)
    bad = []
    over = load > capacity * (1 + tol) + tol
    if over.any():
        bad.append(f"links over capacity: {np.flatnonzero(over)[:5].tolist()}")
    if (rate > cap * (1 + tol) + tol).any():
        bad.append("entities above their cap")
    sat = load >= capacity * (1 - tol) - tol
    # Highest rate on each link among the entities crossing it.
    coo = a.tocoo()
    top = np.zeros(a.shape[0])
    np.maximum.at(top, coo.row, rate[coo.col])
    for e in range(n_ent):
        if rate[e] >= cap[e] * (1 - tol):
            continue
        rows = a.indices[a.indptr[e]:a.indptr[e + 1]]
        if not any(sat[r] and rate[e] >= top[r] * (1 - tol) - tol for r in rows):
            bad.append(f"entity {e} (rate {rate[e]:.6g}) has no bottleneck")
    return bad


def fluid_completion_times(indptr: np.ndarray, links: np.ndarray, capacity: np.ndarray, sizes: np.ndarray,
                           starts: np.ndarray | None = None, cap: np.ndarray | None = None,
                           weights: np.ndarray | None = None) -> np.ndarray:
    """Fixed-path flows of `sizes` bytes starting at `starts`, max-min shared and recomputed at
    every start and end: when each one ends. The sharing model alone, for the SimGrid oracle.
    weights: weighted max-min (a flow of weight w gets w times the fair level of its bottleneck;
    its cap bounds that product)."""
    sizes = np.asarray(sizes, dtype=float)
    n = len(sizes)
    starts = np.zeros(n) if starts is None else np.asarray(starts, dtype=float)
    cap = np.full(n, np.inf) if cap is None else np.asarray(cap, dtype=float)
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    a = incidence_matrix(indptr, links, len(capacity))
    left = sizes.copy()
    end = np.full(n, np.nan)
    end[left <= 0] = starts[left <= 0]
    t = 0.0
    while np.isnan(end).any():
        live = np.isnan(end) & (starts <= t)
        rate = np.zeros(n)
        if live.any():
            rate[live] = w[live] * max_min_rates(a[:, live], capacity, mult=w[live], cap=cap[live] / w[live])
        with np.errstate(divide="ignore", invalid="ignore"):
            fin = np.where(live & (rate > 0), left / rate, np.inf)
        pending = np.isnan(end) & (starts > t)
        nxt = min(fin.min(), (starts[pending].min() - t) if pending.any() else np.inf)
        if not np.isfinite(nxt):
            raise RuntimeError("flows that can never finish (a path through a link of capacity 0)")
        left -= rate * nxt
        t += nxt
        done = live & (left <= sizes * 1e-12 + 1e-9)
        end[done] = t
    return end
