"""The five collective algorithms, each turning one collective into a step schedule.

Every algorithm is built from a few primitives over a list of member ranks and
"chunk groups" (tuples of chunk ids), so that hierarchical and non-power-of-two
variants are compositions rather than copies. Steps carry data dependencies:
whatever a rank sends in step k it holds after its steps < k.
"""
from __future__ import annotations

from badinput import InputError
from traffic.collectives.schedule import Schedule, Transfer

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "sendrecv")
ALGORITHMS = ("ring", "tree", "halving-doubling", "direct", "hierarchical")


def split_even(total: int, parts: int) -> list[int]:
    """`total` bytes in `parts` pieces that differ by at most one byte; none dropped."""
    base, extra = divmod(total, parts)
    return [base + 1 if i < extra else base for i in range(parts)]


def _pow2_rounds(n: int) -> dict[int, int]:
    """NCCL's peer deltas, by round: 0, 1, 3, 6, 10, ... modulo the next power of two (a quadratic
    sequence that visits every residue once), those under n kept in order (init.cc, p2pSchedule)."""
    p = 1
    while p < n:
        p <<= 1
    out, delta = {}, 0
    for r in range(p):
        if delta < n:
            out[delta] = len(out)
        delta = (delta + r + 1) & (p - 1)
    return out


def p2p_round(n: int, g: int | None = None):
    """(src, dst) -> the round in which NCCL's point-to-point schedule has src send to dst: servers
    of g ranks (ranks m*g .. m*g+g-1) by their delta first, ranks within a server by theirs. In
    every round each rank sends to one peer and receives from one, so no receiver gets the first
    bytes of every sender at once, as when every rank lists its peers from rank 0 up."""
    if not (isinstance(g, int) and not isinstance(g, bool) and 1 <= g <= n and n % g == 0):
        g = 1  # no server structure to follow: every rank its own node
    nodes, local = _pow2_rounds(n // g), _pow2_rounds(g)

    def key(s: int, d: int) -> tuple[int, int]:
        (ms, ls), (md, ld) = divmod(s, g), divmod(d, g)
        return nodes[(md - ms) % (n // g)], local[(ld - ls) % g]
    return key


class _Plan:
    """Collects (step, src, dst, chunks) moves, merges them per link and step, then renumbers steps.
    A rank's transfers of one step come out in peer order: by `order(src, dst)` when set (NCCL's
    point-to-point rounds, for the algorithms that send to many peers at once), then by dst."""

    def __init__(self, chunk_bytes, order=None):
        self.chunk_bytes = tuple(chunk_bytes)
        self.moves: dict[tuple, list] = {}
        self.order = order

    def move(self, step, src, dst, chunks, reduce=False):
        if src == dst or not chunks:
            return
        self.moves.setdefault((step, src, dst, reduce), []).extend(chunks)

    def transfers(self) -> list[Transfer]:
        used = sorted({k[0] for k in self.moves})
        renumber = {s: i for i, s in enumerate(used)}  # phases that were empty leave no gap
        cb = self.chunk_bytes
        out = []
        keyed = sorted(self.moves.items()) if self.order is None else sorted(
            self.moves.items(), key=lambda kv: (kv[0][0], kv[0][1], self.order(kv[0][1], kv[0][2]), kv[0][2:]))
        for (step, src, dst, reduce), chunks in keyed:
            chunks = tuple(chunks)
            out.append(Transfer(renumber[step], src, dst, sum(cb[c] for c in chunks), chunks, reduce))
        return out


# ---- ring primitives ------------------------------------------------------------------------

def _ring_reduce_scatter(plan, members, groups, step0):
    """groups[i] ends fully reduced at members[i]. n-1 steps."""
    n = len(members)
    for k in range(n - 1):
        for i in range(n):
            plan.move(step0 + k, members[i], members[(i + 1) % n], groups[(i - k - 1) % n], reduce=True)
    return max(n - 1, 0)


def _ring_all_gather(plan, members, groups, step0):
    """groups[i] starts at members[i] and ends everywhere. n-1 steps."""
    n = len(members)
    for k in range(n - 1):
        for i in range(n):
            plan.move(step0 + k, members[i], members[(i + 1) % n], groups[(i - k) % n])
    return max(n - 1, 0)


def _ring_all_reduce(plan, members, groups, step0):
    s = _ring_reduce_scatter(plan, members, groups, step0)
    return s + _ring_all_gather(plan, members, groups, step0 + s)


def _chain_broadcast(plan, members, chunks, step0):
    """members[0] holds the data; it flows down the chain (the agent pipelines it by slices)."""
    for k in range(len(members) - 1):
        plan.move(step0 + k, members[k], members[k + 1], chunks)
    return max(len(members) - 1, 0)


def _chain_reduce(plan, members, chunks, step0):
    """Reduces along members[1] -> members[2] -> ... -> members[0] (ring direction)."""
    n = len(members)
    for k in range(n - 1):
        plan.move(step0 + k, members[k + 1], members[(k + 2) % n], chunks, reduce=True)
    return max(n - 1, 0)


# ---- binary tree primitives -----------------------------------------------------------------

def btree_parents(n: int) -> list[int]:
    """Parent of each position in NCCL's in-order binary tree (ncclGetBtree); root 0 has -1."""
    parents = [-1] * n
    for r in range(1, n):
        bit = r & -r
        up = (r ^ bit) | (bit << 1)
        parents[r] = up if up < n else r ^ bit
    return parents


def _tree_shape(n):
    parents = btree_parents(n)
    children = [[] for _ in range(n)]
    for v, p in enumerate(parents):
        if p >= 0:
            children[p].append(v)
    depth = [0] * n
    order = [0]
    for v in order:  # BFS from the root
        for c in children[v]:
            depth[c] = depth[v] + 1
            order.append(c)
    height = [0] * n
    for v in reversed(order):
        for c in children[v]:
            height[v] = max(height[v], height[c] + 1)
    return parents, children, depth, height


def _tree_reduce(plan, members, chunks, step0, shape=None):
    """Reduce to members[0]: a node sends to its parent once its subtree is in (step = its height)."""
    parents, _, _, height = shape or _tree_shape(len(members))
    for v in range(1, len(members)):
        plan.move(step0 + height[v], members[v], members[parents[v]], chunks, reduce=True)
    return height[0]


def _tree_broadcast(plan, members, chunks, step0, shape=None):
    """Broadcast from members[0]: a node forwards to its children the step after it got the data."""
    _, children, depth, height = shape or _tree_shape(len(members))
    for v in range(len(members)):
        for c in children[v]:
            plan.move(step0 + depth[v], members[v], members[c], chunks)
    return height[0]


def _tree_path(shape, s, d):
    parents, _, depth, _ = shape
    up, down = [s], [d]
    while up[-1] != down[-1]:
        if depth[up[-1]] >= depth[down[-1]]:
            up.append(parents[up[-1]])
        else:
            down.append(parents[down[-1]])
    return up + down[-2::-1]


# ---- halving-doubling primitives ------------------------------------------------------------

def _fold(n, extras_odd):
    """Fold n positions onto the largest power of two p <= n.

    Returns (participants, partner): participants[v] is the position acting as virtual rank v;
    partner maps each of the n-p extra positions to the participant it pairs with.
    """
    p = 1 << (n.bit_length() - 1)
    rem = n - p
    participants, partner = [], {}
    for i in range(n):
        if i < 2 * rem:
            if (i % 2 == 1) == extras_odd:
                partner[i] = i - 1 if extras_odd else i + 1
            else:
                participants.append(i)
        else:
            participants.append(i)
    return participants, partner


def _merge(groups, lo, hi):
    return tuple(c for g in groups[lo:hi] for c in g)


def _masks(p, halving):
    """Partner distances of a power-of-two exchange: p/2 .. 1 (halving) or 1 .. p/2 (doubling)."""
    masks = [1 << i for i in range(p.bit_length() - 1)]
    return masks[::-1] if halving else masks


def _hd_reduce_scatter(plan, members, groups, step0):
    """Recursive halving over a power-of-two member list: groups[v] ends reduced at members[v]."""
    p = len(members)
    ranges = [(0, p) for _ in range(p)]
    masks = _masks(p, halving=True)
    for j, mask in enumerate(masks):
        for v in range(p):
            lo, hi = ranges[v]
            mid = (lo + hi) // 2
            keep, give = ((mid, hi), (lo, mid)) if v & mask else ((lo, mid), (mid, hi))
            plan.move(step0 + j, members[v], members[v ^ mask], _merge(groups, *give), reduce=True)
            ranges[v] = keep
    return len(masks)


def _hd_all_gather(plan, members, groups, step0):
    """Recursive doubling over a power-of-two member list: groups[v] starts at members[v]."""
    masks = _masks(len(members), halving=False)
    for j, mask in enumerate(masks):
        for v in range(len(members)):
            lo = v & ~(mask - 1)
            plan.move(step0 + j, members[v], members[v ^ mask], _merge(groups, lo, lo + mask))
    return len(masks)


def _binomial(plan, members, groups, step0, scatter):
    """Binomial tree over a power-of-two list: members[0] scatters groups[v] to members[v],
    or (gather) collects them all."""
    masks = _masks(len(members), halving=scatter)
    for j, mask in enumerate(masks):
        for v in range(0, len(members), 2 * mask):
            src, dst = (v, v + mask) if scatter else (v + mask, v)
            plan.move(step0 + j, members[src], members[dst], _merge(groups, v + mask, v + 2 * mask))
    return len(masks)


# ---- the algorithms -------------------------------------------------------------------------

def _rotated(n, root):
    return [(root + i) % n for i in range(n)]


def _singletons(ids):
    return [(c,) for c in ids]


def _ring(plan, op, n, root):
    ranks = list(range(n))
    if op == "all_reduce":
        _ring_all_reduce(plan, ranks, _singletons(range(n)), 0)
    elif op == "reduce_scatter":
        _ring_reduce_scatter(plan, ranks, _singletons(range(n)), 0)
    elif op == "all_gather":
        _ring_all_gather(plan, ranks, _singletons(range(n)), 0)
    elif op == "broadcast":
        _chain_broadcast(plan, _rotated(n, root), (0,), 0)
    elif op == "reduce":
        _chain_reduce(plan, _rotated(n, root), (0,), 0)
    elif op == "all_to_all":
        # Store-and-forward around the ring: block s->d makes (d-s) mod n hops, one per step.
        _route(plan, n, lambda s, d: [(k, (s + k) % n, (s + k + 1) % n) for k in range((d - s) % n)])


def _tree(plan, op, n, root):
    shape = _tree_shape(n)
    if op == "all_reduce":
        # Double binary tree: half the data per tree; tree B is tree A mirrored (even n) or
        # shifted (odd n), so a leaf in one tree is interior in the other (NCCL's ncclGetDtree).
        tree_b = [n - 1 - v for v in range(n)] if n % 2 == 0 else [(v + 1) % n for v in range(n)]
        up = 0
        for members, chunk in ((list(range(n)), 0), (tree_b, 1)):
            up = max(up, _tree_reduce(plan, members, (chunk,), 0, shape))
        for members, chunk in ((list(range(n)), 0), (tree_b, 1)):
            _tree_broadcast(plan, members, (chunk,), up, shape)
    elif op == "reduce_scatter":
        for c in range(n):  # one reduction tree rooted at each output's owner
            _tree_reduce(plan, _rotated(n, c), (c,), 0, shape)
    elif op == "all_gather":
        for c in range(n):
            _tree_broadcast(plan, _rotated(n, c), (c,), 0, shape)
    elif op == "broadcast":
        _tree_broadcast(plan, _rotated(n, root), (0,), 0, shape)
    elif op == "reduce":
        _tree_reduce(plan, _rotated(n, root), (0,), 0, shape)
    elif op == "all_to_all":
        def hops(s, d):
            path = _tree_path(shape, s, d)
            return [(i, path[i], path[i + 1]) for i in range(len(path) - 1)]
        _route(plan, n, hops)


def _halving_doubling(plan, op, n, root):
    if op == "all_to_all":
        # Bruck: block s->d moves +2^k at step k for every bit k of (d - s) mod n.
        def hops(s, d):
            out, cur, off, k = [], s, (d - s) % n, 0
            while off:
                if off & 1:
                    out.append((k, cur, (cur + (1 << k)) % n))
                    cur = (cur + (1 << k)) % n
                off, k = off >> 1, k + 1
            return out
        _route(plan, n, hops)
        return
    rooted = op in ("broadcast", "reduce")
    pos = _rotated(n, root) if rooted else list(range(n))  # position -> rank
    part, partner = _fold(n, extras_odd=rooted)
    p = len(part)
    members = [pos[i] for i in part]
    extras = [(pos[e], pos[partner[e]]) for e in partner]  # (extra rank, its participant)
    if op in ("all_reduce", "broadcast", "reduce"):
        groups = _singletons(range(p))
    else:
        # reduce_scatter / all_gather: virtual rank v stands for its own output and its extra's.
        owner_of = {pos[i]: v for v, i in enumerate(part)}
        owner_of.update({x: owner_of[y] for x, y in extras})
        groups = [tuple(sorted(r for r in range(n) if owner_of[r] == v)) for v in range(p)]
    everything = tuple(range(len(plan.chunk_bytes)))
    step = 0
    if op in ("all_reduce", "reduce_scatter", "reduce") and extras:
        for x, y in extras:
            plan.move(step, x, y, everything, reduce=True)
        step += 1
    elif op == "all_gather" and extras:
        for x, y in extras:
            plan.move(step, x, y, (x,))
        step += 1
    if op == "all_reduce":
        step += _hd_reduce_scatter(plan, members, groups, step)
        step += _hd_all_gather(plan, members, groups, step)
    elif op == "reduce_scatter":
        step += _hd_reduce_scatter(plan, members, groups, step)
    elif op == "all_gather":
        step += _hd_all_gather(plan, members, groups, step)
    elif op == "broadcast":
        step += _binomial(plan, members, groups, step, scatter=True)
        step += _hd_all_gather(plan, members, groups, step)
    elif op == "reduce":
        step += _hd_reduce_scatter(plan, members, groups, step)
        step += _binomial(plan, members, groups, step, scatter=False)
    for x, y in extras:  # hand the result back to the extra ranks
        if op in ("all_reduce", "broadcast"):
            plan.move(step, y, x, everything)
        elif op == "reduce_scatter":
            plan.move(step, y, x, (x,))
        elif op == "all_gather":
            plan.move(step, y, x, tuple(c for c in everything if c != x))


def _direct(plan, op, n, root):
    for s in range(n):
        for d in range(n):
            if op in ("all_reduce", "reduce_scatter"):
                plan.move(0, s, d, (d,), reduce=True)
                if op == "all_reduce":
                    plan.move(1, s, d, (s,))
            elif op == "all_gather":
                plan.move(0, s, d, (s,))
            elif op == "all_to_all":
                plan.move(0, s, d, (s * n + d,))
        if op == "broadcast":
            plan.move(0, root, s, (0,))
        elif op == "reduce":
            plan.move(0, s, root, (0,), reduce=True)


def _hierarchical(plan, op, n, root, g):
    """Intra-server phases over the NVLink domain, inter-server phases over same-rail peers only."""
    m_count = n // g
    servers = [[m * g + lr for lr in range(g)] for m in range(m_count)]
    rails = [[m * g + lr for m in range(m_count)] for lr in range(g)]
    intra_steps, inter_steps = g - 1, m_count - 1
    if op == "all_reduce":
        # Reduce-scatter inside each server, all-reduce piece lr along rail lr, all-gather inside.
        pieces = [tuple(lr * m_count + m for m in range(m_count)) for lr in range(g)]
        for srv in servers:
            _ring_reduce_scatter(plan, srv, pieces, 0)
        for lr, rail in enumerate(rails):
            _ring_all_reduce(plan, rail, _singletons(pieces[lr]), intra_steps)
        for srv in servers:
            _ring_all_gather(plan, srv, pieces, intra_steps + 2 * inter_steps)
    elif op == "reduce_scatter":
        # Output chunk r belongs to rank r; local rank lr first collects its whole rail's outputs.
        by_rail = [tuple(rail) for rail in rails]
        for srv in servers:
            _ring_reduce_scatter(plan, srv, by_rail, 0)
        for rail in rails:
            _ring_reduce_scatter(plan, rail, _singletons(rail), intra_steps)
    elif op == "all_gather":
        by_rail = [tuple(rail) for rail in rails]
        for rail in rails:
            _ring_all_gather(plan, rail, _singletons(rail), 0)
        for srv in servers:
            _ring_all_gather(plan, srv, by_rail, inter_steps)
    elif op in ("broadcast", "reduce"):
        m0 = root // g
        rail_from_root = [[((m0 + i) % m_count) * g + lr for i in range(m_count)] for lr in range(g)]
        if op == "broadcast":
            for lr in range(g):  # scatter the pieces inside the root's server
                plan.move(0, root, m0 * g + lr, (lr,))
            for lr in range(g):
                _chain_broadcast(plan, rail_from_root[lr], (lr,), 1)
            for srv in servers:
                _ring_all_gather(plan, srv, _singletons(range(g)), 1 + inter_steps)
        else:
            for srv in servers:
                _ring_reduce_scatter(plan, srv, _singletons(range(g)), 0)
            for lr in range(g):
                _chain_reduce(plan, rail_from_root[lr], (lr,), intra_steps)
            for lr in range(g):  # gather the pieces to the root inside its server
                plan.move(intra_steps + inter_steps, m0 * g + lr, root, (lr,))
    elif op == "all_to_all":
        # Rail-aligned: first hop inside the source server to the GPU on the destination's
        # rail, then one inter-server hop along that rail (as PXN does).
        def hops(s, d):
            (ms, ls), (md, ld) = divmod(s, g), divmod(d, g)
            if ms == md:
                return [(0, s, d)]
            out = [] if ls == ld else [(0, s, ms * g + ld)]
            return out + [(1, ms * g + ld, d)]
        _route(plan, n, hops)


def _route(plan, n, hops):
    """Moves every all-to-all block s->d along `hops(s, d)`: a list of (step, from, to)."""
    for s in range(n):
        for d in range(n):
            for step, a, b in hops(s, d):
                plan.move(step, a, b, (s * n + d,))


def _chunk_bytes(op, algorithm, n, size_bytes, g):
    if op == "all_to_all":
        block = split_even(size_bytes, n)
        return [block[d] for s in range(n) for d in range(n)]
    if op == "sendrecv":
        return [size_bytes] * n
    if op in ("reduce_scatter", "all_gather"):
        count = n
    elif algorithm in ("ring", "direct"):
        count = n if op == "all_reduce" else 1
    elif algorithm == "tree":
        count = 2 if op == "all_reduce" else 1
    elif algorithm == "halving-doubling":
        count = 1 << (n.bit_length() - 1)
    else:  # hierarchical
        count = n if op == "all_reduce" else g
    return split_even(size_bytes, count)


def effective_gpus_per_server(ranks: list[int], gpus_per_server: int | None) -> int | None:
    """GPUs per server as a group sees it, when the group is regular enough for `hierarchical`.

    Regular: the group is consecutive blocks of equal size, one block per server, and every
    block holds the same local GPU indices (so inter-server peers share a rail). Else None.
    """
    if not gpus_per_server or not ranks:
        return None
    runs: list[tuple[int, list[int]]] = []
    for r in ranks:
        server, local = divmod(r, gpus_per_server)
        if runs and runs[-1][0] == server:
            runs[-1][1].append(local)
        else:
            runs.append((server, [local]))
    if len({s for s, _ in runs}) != len(runs) or any(loc != runs[0][1] for _, loc in runs):
        return None
    return len(runs[0][1])


def build_schedule(op: str, algorithm: str, nranks: int, size_bytes: int, *, root: int = 0,
                   gpus_per_server: int | None = None) -> Schedule:
    """One collective over group-local ranks 0..nranks-1 as a step schedule of transfers."""
    if op not in OPS:
        raise InputError("op", "one of " + ", ".join(OPS), op)
    if algorithm not in ALGORITHMS:
        raise InputError("algorithm", "one of " + ", ".join(ALGORITHMS), algorithm)
    if not isinstance(nranks, int) or isinstance(nranks, bool) or nranks < 1:
        raise InputError("nranks", "an integer >= 1", nranks)
    if not isinstance(size_bytes, int) or isinstance(size_bytes, bool) or size_bytes < 0:
        raise InputError("size_bytes", "an integer >= 0", size_bytes)
    if not isinstance(root, int) or not 0 <= root < nranks:
        raise InputError("root", f"a rank in 0..{nranks - 1}", root)
    g = None
    if algorithm == "hierarchical" and nranks > 1 and op != "sendrecv":
        if not isinstance(gpus_per_server, int) or gpus_per_server < 1 or nranks % gpus_per_server:
            raise InputError("gpus_per_server", f"an integer dividing nranks={nranks} for hierarchical",
                             gpus_per_server)
        g = gpus_per_server
    # Direct and hierarchical send to many peers in one step: in NCCL's order (p2p_round).
    order = p2p_round(nranks, g or gpus_per_server) if algorithm in ("direct", "hierarchical") and nranks > 1 else None
    plan = _Plan(_chunk_bytes(op, algorithm, nranks, size_bytes, g) if nranks > 1 else (), order)
    if nranks > 1:
        if op == "sendrecv":  # nccl-tests sendrecv: every rank sends to the next one
            for r in range(nranks):
                plan.move(0, r, (r + 1) % nranks, (r,))
        elif algorithm == "ring":
            _ring(plan, op, nranks, root)
        elif algorithm == "tree":
            _tree(plan, op, nranks, root)
        elif algorithm == "halving-doubling":
            _halving_doubling(plan, op, nranks, root)
        elif algorithm == "direct":
            _direct(plan, op, nranks, root)
        else:
            _hierarchical(plan, op, nranks, root, g)
    return Schedule(op=op, algorithm=algorithm, nranks=nranks, size_bytes=size_bytes,
                    transfers=plan.transfers(), chunk_bytes=plan.chunk_bytes, root=root)
