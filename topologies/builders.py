"""Fabric builders and the spec strings the CLI accepts.

Spec strings: ``single-switch:hosts=8``, ``fat-tree:k=4``,
``rail-optimized:servers=4,gpus_per_server=8,spines=4``,
``leaf-spine:leaves=4,spines=2,hosts_per_leaf=4``, ``superpod:sus=4``, ``hpn:segments=15``.
Every builder checks its size against MAX_HOSTS, MAX_SWITCHES and MAX_LINKS before it
builds anything (docs/fabrics.md).
"""
from __future__ import annotations

import functools
import gc
import math

from badinput import InputError
from badinput.limits import LINK_GBPS
from topologies.fabric import Fabric

DEFAULT_LINK_GBPS = 400.0
# NVLink 4 gives 900 GB/s per H100; 3600 Gb/s is its per-GPU figure halved
# (one direction). It only has to be well above the NIC rate.
DEFAULT_NVLINK_GBPS = 3600.0

# The largest fabric a builder makes. A host with its link costs about 1.4 KB, a further
# link about 0.5 KB (bench/bench_fabric.py: 131,072 hosts on one switch 183 MB, fat-tree
# k=80 291 MB), so the largest stays near 1 GB and builds in seconds. Sizes are checked from closed-form counts before anything is built, so a
# mistyped `hosts: 100000000` or `k: 2000` is refused at once (docs/fabrics.md, "Limits").
MAX_HOSTS = 262_144
MAX_SWITCHES = 65_536
MAX_LINKS = 1_048_576


def _no_gc(fn):
    """Builders make hundreds of thousands of small acyclic dicts: the cyclic collector would
    rescan them over and over (a quarter of the build time at 131k hosts)."""
    @functools.wraps(fn)
    def wrapper(*a, **k):
        was = gc.isenabled()
        gc.disable()
        try:
            return fn(*a, **k)
        finally:
            if was:
                gc.enable()
    return wrapper


def check_size(hosts: int, switches: int, links: int, key: str, found) -> None:
    """Refuses a fabric beyond the limits above, naming the parameter that made it so."""
    for what, n, limit in (("hosts", hosts, MAX_HOSTS), ("switches", switches, MAX_SWITCHES),
                           ("links", links, MAX_LINKS)):
        if n > limit:
            raise InputError(key, f"a fabric of at most {limit} {what} (topologies.builders.MAX_"
                             f"{what.upper()}, docs/fabrics.md)", found if found == n else f"{found} ({n} {what})")


def tier_rates(down_links: int, up_links: int, link_gbps: float, host_link_gbps, spine_link_gbps,
               oversubscription) -> tuple[float, float, float]:
    """(host, spine, oversubscription) of a first-tier switch with `down_links` host links and
    `up_links` uplinks. Oversubscription is its host capacity over its uplink capacity; give
    it or spine_link_gbps (or both, if they agree). Neither: every tier runs at link_gbps."""
    host = float(link_gbps if host_link_gbps is None else host_link_gbps)
    for name, v in (("host_link_gbps", host), ("spine_link_gbps", spine_link_gbps)):
        if v is not None and (not _is_number(v) or v <= 0):
            raise InputError(f"topology.{name}", "a positive rate in Gb/s", v)
    if oversubscription is not None and (not _is_number(oversubscription) or oversubscription <= 0):
        raise InputError("topology.oversubscription", "a number > 0 (host capacity / uplink capacity)",
                         oversubscription)
    if up_links == 0:
        return host, float(spine_link_gbps or link_gbps), float(oversubscription or 1.0)
    if oversubscription is not None:
        spine = down_links * host / (up_links * oversubscription)
        if spine_link_gbps is not None and not math.isclose(spine, spine_link_gbps, rel_tol=1e-9):
            raise InputError("topology.spine_link_gbps", f"{spine:g} Gb/s to match oversubscription "
                             f"{oversubscription:g} (or give only one of the two)", spine_link_gbps)
    else:
        spine = float(link_gbps if spine_link_gbps is None else spine_link_gbps)
    if not LINK_GBPS.ok(spine):  # an oversubscription of 1e-300 makes uplinks of 1e300 Gb/s
        raise InputError("topology.oversubscription", f"one that gives uplinks of {LINK_GBPS.expected}",
                         oversubscription, None)
    return host, float(spine), down_links * host / (up_links * spine)


@_no_gc
def single_switch(hosts: int, link_gbps: float = DEFAULT_LINK_GBPS) -> Fabric:
    _need_int("hosts", hosts, low=1)
    check_size(hosts, 1, hosts, "topology.hosts", hosts)
    fab = Fabric("single-switch", {"hosts": hosts}, link_gbps)
    fab.add_switch("s0", "tor")
    for i in range(hosts):
        fab.add_host(f"h{i}")
        fab.add_link(f"h{i}", "s0", link_gbps, "host")
    return fab


@_no_gc
def fat_tree(k: int, link_gbps: float = DEFAULT_LINK_GBPS, oversubscription: float | None = None,
             host_link_gbps: float | None = None, spine_link_gbps: float | None = None) -> Fabric:
    """Al-Fares k-ary fat-tree (SIGCOMM'08): k pods of k/2 edge and k/2 aggregation switches,
    (k/2)^2 cores, k^3/4 hosts. Oversubscription divides the rate of the edge-agg and
    agg-core links (spine_link_gbps), so the host count stays k^3/4."""
    _need_int("k", k, low=2)
    if k % 2:
        raise InputError("topology.k", "an even integer >= 2", k)
    check_size(k ** 3 // 4, 5 * k * k // 4, 3 * k ** 3 // 4, "topology.k", k)
    half = k // 2
    host_gbps, up_gbps, over = tier_rates(half, half, link_gbps, host_link_gbps, spine_link_gbps,
                                          oversubscription)
    fab = Fabric("fat-tree", {"k": k, "oversubscription": over, "host_link_gbps": host_gbps,
                              "spine_link_gbps": up_gbps}, link_gbps)
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
                fab.add_link(f"h{h}", e, host_gbps, "host")
                h += 1
            for a in aggs:
                fab.add_link(e, a, up_gbps, "fabric")
        # Aggregation switch i of each pod connects to core group i.
        for i, a in enumerate(aggs):
            for j in range(half):
                fab.add_link(a, cores[i * half + j], up_gbps, "fabric")
    return fab


@_no_gc
def rail_optimized(servers: int, gpus_per_server: int, spines: int,
                   link_gbps: float = DEFAULT_LINK_GBPS,
                   nvlink_gbps: float = DEFAULT_NVLINK_GBPS, oversubscription: float | None = None,
                   host_link_gbps: float | None = None, spine_link_gbps: float | None = None) -> Fabric:
    """GPU g of every server plugs into rail leaf g; rail leaves connect to
    every spine. Each server's GPUs also share an NVLink switch (no OpenFlow).
    Oversubscription is a rail leaf's host capacity over its spine capacity."""
    _need_int("servers", servers, low=1)
    _need_int("gpus_per_server", gpus_per_server, low=1)
    _need_int("spines", spines, low=0)
    if servers > 1 and gpus_per_server > 1 and spines == 0:
        # Rails are disjoint without spines: cross-rail, cross-server pairs
        # would have no path.
        raise InputError("topology.spines", "at least 1 when servers and rails are both > 1", spines)
    if nvlink_gbps <= 0:
        raise InputError("topology.nvlink_gbps", "a positive number", nvlink_gbps)
    gpus = servers * gpus_per_server
    check_size(gpus, spines + gpus_per_server + servers, 2 * gpus + gpus_per_server * spines,
               "topology.servers" if gpus > MAX_HOSTS else "topology.spines", servers if gpus > MAX_HOSTS else spines)
    host_gbps, up_gbps, over = tier_rates(servers, spines, link_gbps, host_link_gbps, spine_link_gbps,
                                          oversubscription)
    fab = Fabric("rail-optimized", {"servers": servers, "gpus_per_server": gpus_per_server,
                                    "spines": spines, "nvlink_gbps": nvlink_gbps, "oversubscription": over,
                                    "host_link_gbps": host_gbps, "spine_link_gbps": up_gbps}, link_gbps)
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
            fab.add_link(name, f"rail{g}", host_gbps, "host")
            fab.add_link(name, f"nvl{s}", nvlink_gbps, "nvlink")
    for g in range(gpus_per_server):
        for sp in range(spines):
            fab.add_link(f"rail{g}", f"spine{sp}", up_gbps, "fabric")
    return fab


@_no_gc
def leaf_spine(leaves: int, spines: int, hosts_per_leaf: int,
               link_gbps: float = DEFAULT_LINK_GBPS, oversubscription: float | None = None,
               host_link_gbps: float | None = None, spine_link_gbps: float | None = None) -> Fabric:
    """Every leaf connects to every spine. Oversubscription is a leaf's host capacity over
    its spine capacity (hosts_per_leaf x host_link_gbps / (spines x spine_link_gbps))."""
    _need_int("leaves", leaves, low=1)
    _need_int("spines", spines, low=0)
    _need_int("hosts_per_leaf", hosts_per_leaf, low=1)
    if leaves > 1 and spines == 0:
        raise InputError("topology.spines", "at least 1 when leaves > 1", spines)
    hosts = leaves * hosts_per_leaf
    check_size(hosts, leaves + spines, hosts + leaves * spines,
               "topology.hosts_per_leaf" if hosts > MAX_HOSTS else "topology.spines",
               hosts_per_leaf if hosts > MAX_HOSTS else spines)
    host_gbps, up_gbps, over = tier_rates(hosts_per_leaf, spines, link_gbps, host_link_gbps, spine_link_gbps,
                                          oversubscription)
    fab = Fabric("leaf-spine", {"leaves": leaves, "spines": spines, "hosts_per_leaf": hosts_per_leaf,
                                "oversubscription": over, "host_link_gbps": host_gbps,
                                "spine_link_gbps": up_gbps}, link_gbps)
    for sp in range(spines):
        fab.add_switch(f"spine{sp}", "spine")
    h = 0
    for lf in range(leaves):
        fab.add_switch(f"leaf{lf}", "leaf")
        for _ in range(hosts_per_leaf):
            fab.add_host(f"h{h}", leaf=lf)
            fab.add_link(f"h{h}", f"leaf{lf}", host_gbps, "host")
            h += 1
        for sp in range(spines):
            fab.add_link(f"leaf{lf}", f"spine{sp}", up_gbps, "fabric")
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


# NVIDIA DGX SuperPOD scalable unit (SU): 32 DGX nodes of 8 GPUs, one 400 Gb/s NIC per GPU,
# GPU g of every node on the SU's rail leaf g; leaves have 64 ports, 32 down and 32 up.
# Spine and core counts per SU count are the reference architecture's "Larger DGX SuperPOD
# component counts" table (DGX SuperPOD RA, H100: RA-11333-001 Table 3; B200 edition, same
# 32-node SU: docs.nvidia.com/dgx-superpod/reference-architecture-scalable-infrastructure-b200/
# latest/dgx-superpod-architecture.html): up to 8 SUs two tiers, 4 spines per SU; from 16 SUs
# three tiers, 8 spines and 4 cores per SU. The RA publishes counts, not the spine-core
# wiring: here each SU's 8 spines take its 8 leaves (4 cables per leaf-spine pair), and spine j
# of every SU connects to core group j (sus/2 cores).
SUPERPOD_NODES_PER_SU = 32
SUPERPOD_GPUS_PER_NODE = 8
SUPERPOD_LEAF_UPLINKS = 32
SUPERPOD_SUS = (1, 2, 4, 8, 16, 32, 64)


@_no_gc
def superpod(sus: int, link_gbps: float = DEFAULT_LINK_GBPS, nvlink_gbps: float = DEFAULT_NVLINK_GBPS) -> Fabric:
    """A DGX SuperPOD compute fabric of `sus` scalable units (rail-optimized, 8 rails)."""
    _need_int("sus", sus, low=1)
    if sus not in SUPERPOD_SUS:
        raise InputError("topology.sus", "a scalable-unit count the reference architecture wires: "
                         + ", ".join(map(str, SUPERPOD_SUS)), sus)
    if nvlink_gbps <= 0:
        raise InputError("topology.nvlink_gbps", "a positive number", nvlink_gbps)
    rails, npsu, up = SUPERPOD_GPUS_PER_NODE, SUPERPOD_NODES_PER_SU, SUPERPOD_LEAF_UPLINKS
    three_tier = sus >= 16
    spines_per_su = 8 if three_tier else 4
    spines = spines_per_su * sus
    fab = Fabric("superpod", {"sus": sus, "nvlink_gbps": nvlink_gbps}, link_gbps)
    cores = []
    if three_tier:
        cores = [f"core{j}_{c}" for j in range(spines_per_su) for c in range(sus // 2)]
        for c in cores:
            fab.add_switch(c, "core")
    if three_tier:
        spine_names = [[f"spine{s}_{j}" for j in range(spines_per_su)] for s in range(sus)]
    else:
        spine_names = [[f"spine{j}" for j in range(spines)]] * sus
    for j, name in enumerate(dict.fromkeys(n for row in spine_names for n in row)):
        fab.add_switch(name, "spine")
    for s in range(sus):
        for r in range(rails):
            fab.add_switch(f"leaf{s}_{r}", "leaf", su=s, rail=r)
    nodes = sus * npsu
    for n in range(nodes):
        fab.add_switch(f"nvl{n}", "nvlink", openflow=False, server=n)
    for n in range(nodes):
        s = n // npsu
        for r in range(rails):
            h = f"h{n * rails + r}"
            fab.add_host(h, server=n, gpu=r, su=s)
            fab.add_link(h, f"leaf{s}_{r}", link_gbps, "host")
            fab.add_link(h, f"nvl{n}", nvlink_gbps, "nvlink")
    for s in range(sus):
        row = spine_names[s]
        cables = up // len(row)
        for r in range(rails):
            for sp in row:
                fab.add_link(f"leaf{s}_{r}", sp, cables * link_gbps, "fabric", cables=cables)
    if three_tier:
        group = sus // 2
        cables = up // group
        for s in range(sus):
            for j, sp in enumerate(spine_names[s]):
                for c in range(group):
                    fab.add_link(sp, f"core{j}_{c}", cables * link_gbps, "fabric", cables=cables)
    return fab


# Alibaba HPN (Qian et al., "Alibaba HPN: A Data Center Network for Large Language Model
# Training", SIGCOMM'24): 8 GPUs and 8 NICs of 2 x 200 Gb/s per host; port 0 of every NIC on
# one ToR of its rail's ToR pair, port 1 on the other (dual-ToR); a segment is 128 hosts
# (1,024 GPUs) on 16 ToRs; the two ToRs of a pair sit in two planes, and each ToR connects to
# every aggregation switch of its plane (dual-plane); a pod is 15 segments (15,360 GPUs, "15K").
# The counts (240 ToRs, 60 aggregation switches per plane, 400 Gb/s ToR uplinks, 120 ToRs per
# aggregation switch) are the AlibabaHPN dual-plane defaults of Alibaba's own SimAI topology
# generator (aliyun/SimAI, astra-sim-alibabacloud/inputs/topo/gen_Topo_Template.py).
HPN_MAX_SEGMENTS = 15  # an aggregation switch's 120 ToR ports per plane / 8 rails


@_no_gc
def hpn(segments: int = HPN_MAX_SEGMENTS, hosts_per_segment: int = 128, gpus_per_host: int = 8,
        aggs_per_plane: int = 60, link_gbps: float = DEFAULT_LINK_GBPS, host_link_gbps: float | None = None,
        spine_link_gbps: float | None = None, nvlink_gbps: float = DEFAULT_NVLINK_GBPS) -> Fabric:
    """One HPN pod: dual-ToR, dual-plane, rail-optimized. Every GPU is a dual-homed host:
    eth0 to its plane-0 ToR, eth1 to its plane-1 ToR, eth2 to its host's NVLink switch.
    link_gbps is a NIC's rate over both ports: each port runs at half of it unless
    host_link_gbps says otherwise, and ToR uplinks at link_gbps unless spine_link_gbps does."""
    host_link_gbps = link_gbps / 2 if host_link_gbps is None else host_link_gbps
    spine_link_gbps = link_gbps if spine_link_gbps is None else spine_link_gbps
    for name, v in (("segments", segments), ("hosts_per_segment", hosts_per_segment),
                    ("gpus_per_host", gpus_per_host), ("aggs_per_plane", aggs_per_plane)):
        _need_int(name, v, low=1)
    if segments > HPN_MAX_SEGMENTS:
        raise InputError("topology.segments", f"at most {HPN_MAX_SEGMENTS} (one HPN pod: an aggregation "
                         "switch has 120 ToR ports per plane)", segments)
    for name, v in (("host_link_gbps", host_link_gbps), ("spine_link_gbps", spine_link_gbps),
                    ("nvlink_gbps", nvlink_gbps)):
        if not _is_number(v) or v <= 0:
            raise InputError(f"topology.{name}", "a positive rate in Gb/s", v)
    hosts_n = segments * hosts_per_segment
    gpus = hosts_n * gpus_per_host
    tors = segments * gpus_per_host * 2
    check_size(gpus, tors + 2 * aggs_per_plane + hosts_n, 3 * gpus + tors * aggs_per_plane,
               "topology.hosts_per_segment" if gpus > MAX_HOSTS else "topology.aggs_per_plane",
               hosts_per_segment if gpus > MAX_HOSTS else aggs_per_plane)
    fab = Fabric("hpn", {"segments": segments, "hosts_per_segment": hosts_per_segment,
                         "gpus_per_host": gpus_per_host, "aggs_per_plane": aggs_per_plane,
                         "host_link_gbps": host_link_gbps, "spine_link_gbps": spine_link_gbps,
                         "nvlink_gbps": nvlink_gbps}, link_gbps)
    for p in range(2):
        for a in range(aggs_per_plane):
            fab.add_switch(f"agg{p}_{a}", "agg", plane=p)
    for s in range(segments):
        for r in range(gpus_per_host):
            for p in range(2):
                fab.add_switch(f"tor{s}_{r}_{p}", "tor", segment=s, rail=r, plane=p)
    for n in range(hosts_n):
        fab.add_switch(f"nvl{n}", "nvlink", openflow=False, server=n)
    for n in range(hosts_n):
        s = n // hosts_per_segment
        for r in range(gpus_per_host):
            h = f"h{n * gpus_per_host + r}"
            fab.add_host(h, server=n, gpu=r, segment=s)
            for p in range(2):
                fab.add_link(h, f"tor{s}_{r}_{p}", host_link_gbps, "host")
            fab.add_link(h, f"nvl{n}", nvlink_gbps, "nvlink")
    for s in range(segments):
        for r in range(gpus_per_host):
            for p in range(2):
                for a in range(aggs_per_plane):
                    fab.add_link(f"tor{s}_{r}_{p}", f"agg{p}_{a}", spine_link_gbps, "fabric")
    return fab


TIERS = {"link_gbps", "oversubscription", "host_link_gbps", "spine_link_gbps"}
BUILDERS = {
    "single-switch": (single_switch, {"hosts"}, {"link_gbps"}),
    "fat-tree": (fat_tree, {"k"}, TIERS),
    "rail-optimized": (rail_optimized, {"servers", "gpus_per_server", "spines"}, TIERS | {"nvlink_gbps"}),
    "leaf-spine": (leaf_spine, {"leaves", "spines", "hosts_per_leaf"}, TIERS),
    "superpod": (superpod, {"sus"}, {"link_gbps", "nvlink_gbps"}),
    "hpn": (hpn, set(), {"segments", "hosts_per_segment", "gpus_per_host", "aggs_per_plane", "host_link_gbps",
                         "spine_link_gbps", "nvlink_gbps", "link_gbps"}),
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
        if p.endswith("_gbps") and not LINK_GBPS.ok(v):
            raise InputError(f"{key}.{p}", f"a rate ({LINK_GBPS.expected})", v, file)
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


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _need_int(name: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InputError(f"topology.{name}", f"an integer >= {low}", value)
