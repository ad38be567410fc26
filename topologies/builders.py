"""Fabric builders and the spec strings the CLI accepts.

Spec strings: ``single-switch:hosts=8``, ``fat-tree:k=4``,
``rail-optimized:servers=4,gpus_per_server=8,spines=4``,
``leaf-spine:leaves=4,spines=2,hosts_per_leaf=4``.
"""
from __future__ import annotations

from badinput import InputError
from topologies.fabric import Fabric

DEFAULT_LINK_GBPS = 400.0
# NVLink 4 gives 900 GB/s per H100; 3600 Gb/s is its per-GPU figure halved
# (one direction). It only has to be well above the NIC rate.
DEFAULT_NVLINK_GBPS = 3600.0


def single_switch(hosts: int, link_gbps: float = DEFAULT_LINK_GBPS) -> Fabric:
    _need_int("hosts", hosts, low=1)
    fab = Fabric("single-switch", {"hosts": hosts}, link_gbps)
    fab.add_switch("s0", "tor")
    for i in range(hosts):
        fab.add_host(f"h{i}")
        fab.add_link(f"h{i}", "s0", link_gbps, "host")
    return fab


def fat_tree(k: int, link_gbps: float = DEFAULT_LINK_GBPS, oversubscription: float = 1.0) -> Fabric:
    """Al-Fares k-ary fat-tree. Oversubscription divides the rate of the
    edge-agg and agg-core links, so the host count stays k^3/4."""
    _need_int("k", k, low=2)
    if k % 2:
        raise InputError("topology.k", "an even integer >= 2", k)
    if oversubscription < 1:
        raise InputError("topology.oversubscription", "a number >= 1", oversubscription)
    half = k // 2
    up_gbps = link_gbps / oversubscription
    fab = Fabric("fat-tree", {"k": k, "oversubscription": oversubscription}, link_gbps)
    cores = [f"core{i}" for i in range(half * half)]
    for c in cores:
        fab.add_switch(c, "core")
    h = 0
    for p in range(k):
        aggs = [f"agg{p}_{i}" for i in range(half)]
        edges = [f"edge{p}_{i}" for i in range(half)]
        for a in aggs:
            fab.add_switch(a, "agg", pod=p)
        for e in edges:
            fab.add_switch(e, "edge", pod=p)
        for i, e in enumerate(edges):
            for _ in range(half):
                fab.add_host(f"h{h}", pod=p, edge=i)
                fab.add_link(f"h{h}", e, link_gbps, "host")
                h += 1
            for a in aggs:
                fab.add_link(e, a, up_gbps, "fabric")
        # Aggregation switch i of each pod connects to core group i.
        for i, a in enumerate(aggs):
            for j in range(half):
                fab.add_link(a, cores[i * half + j], up_gbps, "fabric")
    return fab


def rail_optimized(servers: int, gpus_per_server: int, spines: int,
                   link_gbps: float = DEFAULT_LINK_GBPS,
                   nvlink_gbps: float = DEFAULT_NVLINK_GBPS) -> Fabric:
    """GPU g of every server plugs into rail leaf g; rail leaves connect to
    every spine. Each server's GPUs also share an NVLink switch (no OpenFlow)."""
    _need_int("servers", servers, low=1)
    _need_int("gpus_per_server", gpus_per_server, low=1)
    _need_int("spines", spines, low=0)
    if servers > 1 and gpus_per_server > 1 and spines == 0:
        # Rails are disjoint without spines: cross-rail, cross-server pairs
        # would have no path.
        raise InputError("topology.spines", "at least 1 when servers and rails are both > 1", spines)
    if nvlink_gbps <= 0:
        raise InputError("topology.nvlink_gbps", "a positive number", nvlink_gbps)
    fab = Fabric("rail-optimized", {"servers": servers, "gpus_per_server": gpus_per_server,
                                    "spines": spines, "nvlink_gbps": nvlink_gbps}, link_gbps)
    for sp in range(spines):
        fab.add_switch(f"spine{sp}", "spine")
    for g in range(gpus_per_server):
        fab.add_switch(f"rail{g}", "rail", rail=g)
    for s in range(servers):
        fab.add_switch(f"nvl{s}", "nvlink", openflow=False, server=s)
    for s in range(servers):
        for g in range(gpus_per_server):
            name = f"h{s * gpus_per_server + g}"
            fab.add_host(name, server=s, gpu=g)
            fab.add_link(name, f"rail{g}", link_gbps, "host")
            fab.add_link(name, f"nvl{s}", nvlink_gbps, "nvlink")
    for g in range(gpus_per_server):
        for sp in range(spines):
            fab.add_link(f"rail{g}", f"spine{sp}", link_gbps, "fabric")
    return fab


def leaf_spine(leaves: int, spines: int, hosts_per_leaf: int,
               link_gbps: float = DEFAULT_LINK_GBPS) -> Fabric:
    _need_int("leaves", leaves, low=1)
    _need_int("spines", spines, low=0)
    _need_int("hosts_per_leaf", hosts_per_leaf, low=1)
    if leaves > 1 and spines == 0:
        raise InputError("topology.spines", "at least 1 when leaves > 1", spines)
    fab = Fabric("leaf-spine", {"leaves": leaves, "spines": spines,
                                "hosts_per_leaf": hosts_per_leaf}, link_gbps)
    for sp in range(spines):
        fab.add_switch(f"spine{sp}", "spine")
    h = 0
    for lf in range(leaves):
        fab.add_switch(f"leaf{lf}", "leaf")
        for _ in range(hosts_per_leaf):
            fab.add_host(f"h{h}", leaf=lf)
            fab.add_link(f"h{h}", f"leaf{lf}", link_gbps, "host")
            h += 1
        for sp in range(spines):
            fab.add_link(f"leaf{lf}", f"spine{sp}", link_gbps, "fabric")
    return fab


def add_servers(fab: Fabric, gpus_per_server: int, nvlink_gbps: float = DEFAULT_NVLINK_GBPS,
                key: str = "topology") -> Fabric:
    """Servers of gpus_per_server GPUs on a fabric whose hosts are GPUs: hosts in rank order, every
    server's GPUs under one first switch (a ToR per server, as a fat-tree of DGX-like servers is
    cabled), sharing an NVLink switch (no OpenFlow) as rail-optimized servers do."""
    _need_int("gpus_per_server", gpus_per_server, low=1)
    if nvlink_gbps <= 0:
        raise InputError(f"{key}.nvlink_gbps", "a positive number", nvlink_gbps)
    hosts = fab.hosts
    if len(hosts) % gpus_per_server:
        raise InputError(f"{key}.gpus_per_server", f"a divisor of the {len(hosts)} hosts", gpus_per_server)
    for s in range(len(hosts) // gpus_per_server):
        members = hosts[s * gpus_per_server:(s + 1) * gpus_per_server]
        if len({fab.attachment(h)[0] for h in members}) != 1:
            raise InputError(f"{key}.gpus_per_server", "a divisor of the hosts under each first-tier switch "
                             "(a server's GPUs share their switch)", gpus_per_server)
        fab.add_switch(f"nvl{s}", "nvlink", openflow=False, server=s)
        for g, h in enumerate(members):
            fab.node(h).update(server=s, gpu=g)
            fab.add_link(h, f"nvl{s}", nvlink_gbps, "nvlink")
    fab.params.update(gpus_per_server=gpus_per_server, nvlink_gbps=float(nvlink_gbps))
    return fab


BUILDERS = {
    "single-switch": (single_switch, {"hosts"}, {"link_gbps"}),
    "fat-tree": (fat_tree, {"k"}, {"link_gbps", "oversubscription"}),
    "rail-optimized": (rail_optimized, {"servers", "gpus_per_server", "spines"},
                       {"link_gbps", "nvlink_gbps"}),
    "leaf-spine": (leaf_spine, {"leaves", "spines", "hosts_per_leaf"}, {"link_gbps"}),
}
# Kinds whose hosts may be grouped into NVLink servers after building (add_servers).
SERVER_PARAMS = {"gpus_per_server", "nvlink_gbps"}
WITH_SERVERS = ("single-switch", "fat-tree", "leaf-spine")


def build(kind: str, params: dict, *, file: str | None = None, key: str = "topology") -> Fabric:
    """Build a fabric from a kind and its parameters, rejecting unknown or missing keys."""
    if kind not in BUILDERS:
        raise InputError(f"{key}.kind", "one of " + ", ".join(BUILDERS), kind, file)
    fn, required, optional = BUILDERS[kind]
    servers = {}
    if kind in WITH_SERVERS:
        optional = optional | SERVER_PARAMS
        servers = {p: params[p] for p in SERVER_PARAMS if p in params}
        if servers and "gpus_per_server" not in servers:
            raise InputError(f"{key}.gpus_per_server", "a value (nvlink_gbps needs servers)", None, file)
    for p in params:
        if p not in required | optional:
            raise InputError(f"{key}.{p}", f"a {kind} parameter ({', '.join(sorted(required | optional))})",
                             p, file)
    for r in sorted(required):
        if r not in params:
            raise InputError(f"{key}.{r}", f"a value (required for {kind})", None, file)
    for p, v in params.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise InputError(f"{key}.{p}", "a number", v, file)
        if p.endswith("_gbps") and v <= 0:
            raise InputError(f"{key}.{p}", "a positive rate in Gb/s", v, file)
    try:
        fab = fn(**{p: v for p, v in params.items() if p not in servers})
        return add_servers(fab, **servers, key=key) if servers else fab
    except InputError as e:
        if file and not e.file:
            raise InputError(e.key, e.expected, e.found, file) from None
        raise


def parse_spec(spec: str) -> tuple[str, dict]:
    """'fat-tree:k=4,link_gbps=400' -> ('fat-tree', {'k': 4, 'link_gbps': 400})."""
    kind, _, rest = spec.partition(":")
    params: dict = {}
    for item in filter(None, rest.split(",")):
        name, eq, value = item.partition("=")
        if not eq:
            raise InputError(f"spec {spec!r}", "name=value pairs after ':'", item)
        try:
            params[name.strip()] = int(value)
        except ValueError:
            try:
                params[name.strip()] = float(value)
            except ValueError:
                raise InputError(f"spec {spec!r}: {name}", "a number", value) from None
    return kind.strip(), params


def from_spec(spec: str) -> Fabric:
    kind, params = parse_spec(spec)
    return build(kind, params, key="spec")


def _need_int(name: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InputError(f"topology.{name}", f"an integer >= {low}", value)
