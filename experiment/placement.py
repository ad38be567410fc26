"""Which fabric hosts each job gets (pure; no root, no Mininet).

A job's ``hosts`` is one of:

- ``"all"``, or an explicit list of host names (ranks in list order);
- ``{"count": N, "placement": "packed" | "spread" | "random", "seed": S}``;
- on rail-optimized fabrics, ``{"servers": [0, 2]}`` or ``{"servers": N}``
  (every GPU of whole servers).

Placement works on groups of hosts: the servers of a rail-optimized fabric,
and elsewhere the hosts under one edge/leaf switch. ``packed`` fills groups
in order, ``spread`` takes one host from each group in turn (on a fat-tree
the pods take turns first), ``random`` draws a seeded sample. Explicit
choices (lists, server lists, ``all``) are taken first; counted jobs then
get what is left, in job order, so jobs never share a host. Ranks of placed
jobs follow the fabric's host order, or for ``order: rail-aligned`` go server
by server (``rail_aligned``); ``jobs_hosts`` gives both.
"""
from __future__ import annotations

import random

from badinput import InputError

PLACEMENTS = ("packed", "spread", "random")


def host_groups(fabric) -> list[list[str]]:
    """Hosts grouped by server (rail-optimized) or by the switch they attach to, in host order."""
    groups: dict[object, list[str]] = {}
    for h in fabric.hosts:
        nd = fabric.node(h)
        key = nd["server"] if fabric.kind == "rail-optimized" else fabric.attachment(h)[0]
        groups.setdefault(key, []).append(h)
    return list(groups.values())


def _spread_order(groups: list[list[str]], fabric) -> list[list[str]]:
    """Groups in the order spread visits them: the first group of every pod, then the second, ..."""
    seen: dict[object, int] = {}
    keyed = []
    for g in groups:
        pod = fabric.node(g[0]).get("pod")
        idx = seen.get(pod, 0)
        seen[pod] = idx + 1
        keyed.append(((idx, -1 if pod is None else pod), g))
    return [g for _, g in sorted(keyed, key=lambda kg: kg[0])]


def pick(fabric, count: int, placement: str, free: set[str], seed: int = 0) -> list[str]:
    """count hosts out of free, by placement; None when fewer than count are free."""
    order = {h: i for i, h in enumerate(fabric.hosts)}
    if len(free) < count:
        return None
    if placement == "random":
        chosen = random.Random(seed).sample(sorted(free, key=order.get), count)
    else:
        groups = [[h for h in g if h in free] for g in host_groups(fabric)]
        groups = [g for g in groups if g]
        if placement == "packed":
            chosen = [h for g in groups for h in g][:count]
        elif placement == "spread":
            chosen, groups = [], _spread_order(groups, fabric)
            while len(chosen) < count:
                for g in groups:
                    if g and len(chosen) < count:
                        chosen.append(g.pop(0))
        else:
            raise ValueError(f"unknown placement {placement!r}")
    return sorted(chosen, key=order.get)


def server_hosts(fabric, server: int) -> list[str]:
    return [h for h in fabric.hosts if fabric.node(h).get("server") == server]


_LAST: list = [None, None, None]  # fabric, jobs' repr, placement: a run places its jobs when it
# parses the file and again when it plans, and at 131,072 GPUs each costs about half a second.


def place(jobs: list[tuple[str, object]], fabric) -> list[list[str]]:
    """Host lists for (job name, hosts spec) pairs; InputError(key 'jobs[i].hosts...') when
    two jobs would share a host or a counted job does not fit in what is left."""
    key = repr(jobs)
    if _LAST[0] is fabric and _LAST[1] == key:  # fabrics are not changed once built
        return [list(h) for h in _LAST[2]]
    out = _place(jobs, fabric)
    _LAST[:] = [fabric, key, [list(h) for h in out]]
    return out


def _place(jobs: list[tuple[str, object]], fabric) -> list[list[str]]:
    owner: dict[str, str] = {}
    out: list[list[str] | None] = [None] * len(jobs)

    def claim(i, hosts):
        for h in hosts:
            if h in owner:
                raise InputError(f"jobs[{i}].hosts", f"hosts no other job uses (jobs {owner[h]} and "
                                 f"{jobs[i][0]} both have {h})", h)
        for h in hosts:
            owner[h] = jobs[i][0]
        out[i] = hosts

    for i, (_, spec) in enumerate(jobs):  # explicit choices first
        if spec == "all":
            claim(i, list(fabric.hosts))
        elif isinstance(spec, list):
            claim(i, list(spec))
        elif isinstance(spec.get("servers"), list):
            claim(i, [h for s in spec["servers"] for h in server_hosts(fabric, s)])
    for i, (_, spec) in enumerate(jobs):
        if out[i] is not None:
            continue
        free = set(fabric.hosts) - set(owner)
        taken = ", ".join(sorted(set(owner.values()))) or "none"
        if "servers" in spec:
            whole = [s for s in sorted({fabric.node(h)["server"] for h in fabric.hosts})
                     if all(h in free for h in server_hosts(fabric, s))]
            if len(whole) < spec["servers"]:
                raise InputError(f"jobs[{i}].hosts.servers", f"at most {len(whole)} (whole servers left "
                                 f"by jobs {taken})", spec["servers"])
            claim(i, [h for s in whole[:spec["servers"]] for h in server_hosts(fabric, s)])
        else:
            hosts = pick(fabric, spec["count"], spec.get("placement", "packed"), free, spec.get("seed", 0))
            if hosts is None:
                raise InputError(f"jobs[{i}].hosts.count", f"at most {len(free)} (hosts left by jobs {taken})",
                                 spec["count"])
            claim(i, hosts)
    return out


def job_hosts(job, fabric) -> list[str]:
    """The hosts of one job placed alone, in rank order; see jobs_hosts for several jobs."""
    return jobs_hosts((job,), fabric)[0]


def jobs_hosts(jobs, fabric) -> list[list[str]]:
    """The fabric hosts of each job (experiment.model.Job), in rank order (``order``); no two
    jobs share a host."""
    placed = place([(j.name, j.hosts) for j in jobs], fabric)
    return [rail_aligned(h, fabric) if j.order == "rail-aligned" else h for j, h in zip(jobs, placed)]


def rail_aligned(hosts: list[str], fabric) -> list[str]:
    """Order hosts server by server, alternating GPU direction ("snake"), so
    that each step from one server to the next joins GPUs on the same rail."""
    by_server: dict[int, list[str]] = {}
    for h in hosts:
        by_server.setdefault(fabric.node(h)["server"], []).append(h)
    out = []
    for i, s in enumerate(sorted(by_server)):
        gpus = sorted(by_server[s], key=lambda h: fabric.node(h)["gpu"])
        out += gpus if i % 2 == 0 else gpus[::-1]
    return out
