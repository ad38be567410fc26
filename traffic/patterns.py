"""Hedera's synthetic traffic patterns (Al-Fares et al., NSDI'10) as send/recv workloads."""
from __future__ import annotations

import random

from traffic.limits import MAX_DISTINCT_OPS, MAX_ITERATIONS
from traffic.spec import SpecReader
from traffic.trace import Op, Trace

PATTERNS = ("stride", "random", "staggered", "all-to-all", "incast")


def pattern_flows(pattern: str, nranks: int, *, stride: int = 1, rng: random.Random | None = None,
                  p_edge: float = 0.0, p_pod: float = 0.0, hosts_per_edge: int = 2, hosts_per_pod: int = 4,
                  dst: int = 0) -> list[tuple[int, int]]:
    """(src, dst) pairs of one round of the pattern; never src == dst."""
    rng = rng or random.Random(0)
    if pattern == "stride":
        return [(x, (x + stride) % nranks) for x in range(nranks)]
    if pattern == "random":
        return [(x, rng.choice([y for y in range(nranks) if y != x])) for x in range(nranks)]
    if pattern == "all-to-all":
        return [(x, y) for x in range(nranks) for y in range(nranks) if x != y]
    if pattern == "incast":
        return [(x, dst) for x in range(nranks) if x != dst]
    flows = []
    for x in range(nranks):  # staggered
        edge, pod = x // hosts_per_edge, x // hosts_per_pod
        same_edge = [y for y in range(nranks) if y != x and y // hosts_per_edge == edge]
        same_pod = [y for y in range(nranks) if y // hosts_per_pod == pod and y // hosts_per_edge != edge]
        elsewhere = [y for y in range(nranks) if y // hosts_per_pod != pod]
        u = rng.random()
        pool = same_edge if u < p_edge else same_pod if u < p_edge + p_pod else elsewhere
        flows.append((x, rng.choice(pool)))
    return flows


def pattern_workload(spec: dict, nranks: int, file=None) -> Trace:
    """Rounds of flows: every flow of a round is concurrent; a rank starts round k+1 when its own
    flows of round k are done (a zero-length compute op marks that). incast with request_bytes:
    each block waits for the receiver's request, sent when the receiver's previous round is done,
    so every round starts together (synchronized reads)."""
    r = SpecReader(spec, file=file)
    pattern = r.choice("pattern", PATTERNS)
    size_bytes = r.int("size_bytes", minimum=0)
    iterations = r.int("iterations", 1, minimum=1, maximum=MAX_ITERATIONS)
    kw: dict = {}
    if nranks < 2:
        raise r.error("pattern", "a fabric with >= 2 hosts", f"{nranks} host")
    if pattern == "stride":
        kw["stride"] = r.int("stride", 1, minimum=1)
        if kw["stride"] % nranks == 0:
            raise r.error("stride", f"a stride that is not a multiple of the host count {nranks}", kw["stride"])
    if pattern in ("random", "staggered"):
        kw["rng"] = random.Random(r.int("seed", 0))
    request_bytes = 0
    if pattern == "incast":
        kw["dst"] = r.int("dst", 0, minimum=0, maximum=nranks - 1)
        # Synchronized reads (Phanishayee et al., FAST 2008): the receiver asks every sender for its
        # block at once, and asks again only when every block of the round has arrived.
        request_bytes = r.int("request_bytes", 0, minimum=0, maximum=1 << 20)
    if pattern == "staggered":
        _staggered_args(r, nranks, kw)
    r.done()
    # Every rank's flows are its own ops (no two ranks share a stream); random picks among all hosts.
    per_round = nranks * nranks if pattern in ("all-to-all", "random") else 3 * nranks
    if iterations * per_round > MAX_DISTINCT_OPS:
        raise r.error("iterations", f"a trace of at most {MAX_DISTINCT_OPS} ops ({pattern} over {nranks} hosts "
                      f"costs about {per_round} per iteration)", iterations)
    ops: dict[int, list[Op]] = {x: [] for x in range(nranks)}
    prev: dict[int, tuple] = {x: () for x in range(nranks)}
    for it in range(iterations):
        round_ops: dict[int, list[str]] = {x: [] for x in range(nranks)}
        for n, (src, dst) in enumerate(pattern_flows(pattern, nranks, **kw)):
            oid = f"it{it}/flow{n}"
            label = f"{pattern} {src}->{dst}"
            deps = prev[src]
            if request_bytes:  # the block goes once its request has arrived
                rid = f"it{it}/request{n}"
                ops[dst].append(Op(rid, "send", prev[dst], size_bytes=request_bytes, peer=src, iteration=it,
                                   label=f"request {dst}->{src}"))
                ops[src].append(Op(rid, "recv", prev[src], size_bytes=request_bytes, peer=dst, iteration=it,
                                   label=f"request {dst}->{src}"))
                deps = (rid,)
            ops[src].append(Op(oid, "send", deps, size_bytes=size_bytes, peer=dst, iteration=it, label=label))
            ops[dst].append(Op(oid, "recv", prev[dst], size_bytes=size_bytes, peer=src, iteration=it, label=label))
            round_ops[src].append(oid)
            round_ops[dst].append(oid)
        for x in range(nranks):
            done = f"it{it}/done"
            ops[x].append(Op(done, "compute", tuple(round_ops[x]), iteration=it, label="round done"))
            prev[x] = (done,)
    meta = {"workload": "pattern", "pattern": pattern, "size_bytes": size_bytes, "iterations": iterations}
    if request_bytes:
        meta["request_bytes"] = request_bytes
    meta.update({k: v for k, v in kw.items() if k != "rng"})
    trace = Trace(nranks=nranks, groups={}, ops=ops, meta=meta)
    trace.validate(file=file)
    return trace


def _staggered_args(r: SpecReader, nranks: int, kw: dict):
    kw["p_edge"] = r.number("p_edge", 0.0)
    kw["p_pod"] = r.number("p_pod", 0.0)
    if kw["p_edge"] + kw["p_pod"] > 1:
        raise r.error("p_pod", "p_edge + p_pod <= 1", kw["p_edge"] + kw["p_pod"])
    # Defaults: a k=4 fat-tree has 2 hosts per edge switch and 4 per pod.
    kw["hosts_per_edge"] = r.int("hosts_per_edge", 2, minimum=1)
    kw["hosts_per_pod"] = r.int("hosts_per_pod", 4, minimum=1)
    he, hp = kw["hosts_per_edge"], kw["hosts_per_pod"]
    if hp % he or nranks % hp:
        raise r.error("hosts_per_pod", f"a multiple of hosts_per_edge={he} that divides the host count {nranks}", hp)
    if kw["p_edge"] > 0 and he < 2:
        raise r.error("hosts_per_edge", ">= 2 when p_edge > 0 (a host needs an edge neighbour)", he)
    if kw["p_pod"] > 0 and hp == he:
        raise r.error("hosts_per_pod", "more than hosts_per_edge when p_pod > 0", hp)
    if kw["p_edge"] + kw["p_pod"] < 1 and nranks == hp:
        raise r.error("hosts_per_pod", f"fewer than the {nranks} hosts when p_edge + p_pod < 1", hp)
