"""Hedera (Al-Fares et al., NSDI'10): natural-demand estimation and Global First Fit.

Demands are fractions of a host's NIC rate (1.0 = line rate), as in the
paper: a flow's natural demand is the rate it would get if only the hosts'
NICs limited it (max-min fair between senders and receivers).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Callable, Hashable, Sequence

from controller.paths import path_links  # noqa: F401  (callers found it here first)

EPS = 1e-9


def estimate_demands(flows: Sequence[tuple[Hashable, Hashable]], max_rounds: int = 1000) -> list[float]:
    """Natural demand of each (src, dst) flow, by Hedera's alternating sender/receiver passes."""
    demand = [0.0] * len(flows)
    converged = [False] * len(flows)
    out_of, into = defaultdict(list), defaultdict(list)
    for i, (s, d) in enumerate(flows):
        out_of[s].append(i)
        into[d].append(i)
    for _ in range(max_rounds):
        changed = False
        # Senders split what converged flows leave of their NIC equally.
        for idx in out_of.values():
            done = sum(demand[i] for i in idx if converged[i])
            open_ = [i for i in idx if not converged[i]]
            if open_:
                share = max(0.0, 1.0 - done) / len(open_)
                for i in open_:
                    if abs(demand[i] - share) > EPS:
                        demand[i], changed = share, True
        # Oversubscribed receivers cap their larger flows at a fair share.
        for idx in into.values():
            if sum(demand[i] for i in idx) <= 1.0 + EPS:
                continue
            limited = set(idx)
            small_total = 0.0
            share = 1.0 / len(limited)
            while True:
                small = {i for i in limited if demand[i] < share - EPS}
                if not small or small == limited:
                    break
                small_total += sum(demand[i] for i in small)
                limited -= small
                share = (1.0 - small_total) / len(limited)
            for i in limited:
                if abs(demand[i] - share) > EPS or not converged[i]:
                    demand[i], converged[i], changed = share, True, True
        if not changed:
            return demand
    return demand


Link = tuple  # (from node, to node)


def global_first_fit(demands_gbps: Sequence[float], candidates: Sequence[Sequence[list[Link]]],
                     capacity_gbps: Callable[[Link], float], reserved_gbps: dict | None = None,
                     ) -> tuple[list[int | None], dict]:
    """Place each flow, in order, on the first candidate path whose every link has room.

    ``candidates[i]`` lists flow i's paths as link lists, in preference order
    (put a flow's current path first to keep it where it fits: no needless
    moves). Returns the chosen index per flow (None: nothing fits; leave the
    flow where it is) and the reservations made.
    """
    reserved = defaultdict(float, reserved_gbps or {})
    chosen: list[int | None] = []
    for demand, paths in zip(demands_gbps, candidates):
        pick = None
        for j, links in enumerate(paths):
            if all(reserved[ln] + demand <= capacity_gbps(ln) * (1 + EPS) for ln in links):
                pick = j
                break
        if pick is not None:
            for ln in paths[pick]:
                reserved[ln] += demand
        chosen.append(pick)
    return chosen, dict(reserved)
