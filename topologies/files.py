"""Fabric files: your own fabric as YAML (or GraphML), checked like every other input.

YAML::

    name: two-tors            # optional
    link_gbps: 400            # optional: the rate of links that state none
    nodes:
      h0: {role: host, server: 0, gpu: 0}
      tor0: {role: switch, layer: tor}
      nvl0: {role: switch, layer: nvlink, openflow: false}
    links:
      - {a: h0, b: tor0, link_gbps: 400}
      - {a: h0, b: nvl0, link_gbps: 3600}
      - {a: tor0, b: spine0, link_gbps: 800, cables: 2}

GraphML (as networkx.write_graphml writes it): node attributes ``role``, ``layer``,
``openflow`` and the optional ones below, edge attributes ``link_gbps``, ``kind``, ``cables``,
graph attributes ``name`` and ``link_gbps``.

Hosts take ranks, and switches DPIDs, in the order the file lists them; ports are numbered
in the order of the links. A link's kind follows from its ends (host-switch: ``host``,
host to a switch with ``openflow: false``: ``nvlink``, switch-switch: ``fabric``); a stated
``kind`` must agree. See docs/fabrics.md.
"""
from __future__ import annotations

import math
import os
import re

import networkx as nx

from topologies.builders import MAX_HOSTS, MAX_LINKS, MAX_SWITCHES
from badinput import InputError
from badinput.files import read_bytes, read_text
from badinput.limits import LINK_GBPS
from badinput.yamlread import BoundedLoader, DuplicateKey
from topologies.fabric import HOST, SWITCH, Fabric

TOP_KEYS = ("name", "description", "link_gbps", "nodes", "links")
NODE_KEYS = ("role", "layer", "openflow")
# Optional integer attributes a node may carry: where it sits (placement and people read them).
NODE_INTS = ("server", "gpu", "rail", "plane", "pod", "segment", "su", "leaf", "edge")
LINK_KEYS = ("a", "b", "link_gbps", "kind", "cables")
# Names become Mininet node names, interface names and ovs-vsctl arguments.
NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}")  # fullmatch: "$" lets a trailing newline in
MAX_FILE_BYTES = 256 << 20


def is_fabric_file(arg: str) -> bool:
    """A `topo show` / `topology.file` argument that names a file rather than a spec."""
    return arg.lower().endswith((".yaml", ".yml", ".graphml", ".xml")) or os.path.sep in arg


def load_fabric_file(path: str) -> Fabric:
    """Reads, checks and builds a fabric file; every problem is an InputError naming the file."""
    path = os.fspath(path)
    if path.lower().endswith((".graphml", ".xml")):
        data = _read_graphml(path)
    else:
        data = _read_yaml(path)
    try:
        return from_data(data, name=os.path.splitext(os.path.basename(path))[0], file=path)
    except InputError as e:
        if e.file:
            raise
        raise InputError(e.key, e.expected, e.found, path) from None


class _Loader(BoundedLoader):
    max_nodes = 8 * MAX_LINKS + 4 * MAX_HOSTS  # a link is a mapping of up to five keys


def _read_yaml(path):
    import yaml

    text = read_text(path, "fabric file", max_bytes=MAX_FILE_BYTES)
    try:
        data = yaml.load(text, Loader=_Loader)
    except InputError as e:
        raise InputError(e.key, e.expected, e.found, path) from None
    except DuplicateKey as e:
        raise InputError(f"line {e.problem_mark.line + 1}", "each key once in a mapping", e.problem, path) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "fabric file"
        raise InputError(where, "valid YAML", str(getattr(e, "problem", e)), path) from None
    except RecursionError:
        raise InputError("fabric file", "YAML", "nesting too deep to read", path) from None
    if not isinstance(data, dict):
        raise InputError("fabric file", "a mapping with nodes and links", type(data).__name__, path)
    return data


def _refuse_bridge_loops(fab: Fabric, file) -> None:
    """Switches with openflow: false are plain bridges without STP, and no controller steers
    them: a loop of them would flood every broadcast around it forever."""
    bridges = [s for s in fab.switches if not fab.graph.nodes[s]["openflow"]]
    sub = fab.graph.subgraph(bridges)
    if sub.number_of_edges() and not nx.is_forest(sub):
        cycle = [a for a, _ in nx.find_cycle(sub)]
        raise InputError("links", "no loop of switches with openflow: false (plain bridges without STP: a loop "
                         "floods broadcasts forever; make one of them an OpenFlow switch)",
                         "the loop " + "-".join(cycle + cycle[:1]), file)


_GRAPHML_NS = "{http://graphml.graphdrawing.org/xmlns}"
_GRAPHML_TYPES = {"boolean": lambda v: v.strip().lower() in ("true", "1"), "int": int, "long": int,
                  "float": float, "double": float, "string": str}


def _read_graphml(path):
    """GraphML's keys, nodes and edges with their typed data. Read with the standard XML
    parser, not networkx.read_graphml: networkx 2.8 (Debian 12's) fails on NumPy 2."""
    import xml.etree.ElementTree as ET
    try:
        root = ET.fromstring(read_bytes(path, "fabric file", max_bytes=MAX_FILE_BYTES))
    except ET.ParseError as e:
        raise InputError("fabric file", "well-formed GraphML", str(e)[:80], path) from None
    ns = _GRAPHML_NS if root.tag.startswith(_GRAPHML_NS) else ""
    if root.tag != ns + "graphml":
        raise InputError("fabric file", "a <graphml> document", root.tag[:40], path)
    keys = {}
    for k in root.iter(ns + "key"):
        kind = k.get("attr.type", "string")
        if kind not in _GRAPHML_TYPES:
            raise InputError(f"key {k.get('id')}", "a GraphML type (" + ", ".join(_GRAPHML_TYPES) + ")", kind, path)
        default = k.find(ns + "default")
        keys[k.get("id")] = (k.get("attr.name", k.get("id")), _GRAPHML_TYPES[kind], k.get("for", "all"),
                             default.text if default is not None else None)
    graphs = root.findall(ns + "graph")
    if len(graphs) != 1:
        raise InputError("fabric file", "one <graph>", f"{len(graphs)}", path)
    graph = graphs[0]

    def attrs(elem, what):
        out = {name: conv(d) for kid, (name, conv, for_, d) in keys.items()
               if d is not None and for_ in (what, "all")}
        for data in elem.findall(ns + "data"):
            kid = data.get("key")
            if kid not in keys:
                raise InputError(f"{what} {elem.get('id', '')} data", "a key declared in <key>", kid, path)
            name, conv, _, _ = keys[kid]
            try:
                out[name] = conv(data.text or "")
            except ValueError:
                raise InputError(f"{what} {elem.get('id', '')}.{name}", "a value of its declared type",
                                 data.text, path) from None
        return out

    nodes = {}
    for nd in graph.findall(ns + "node"):
        if nd.get("id") in nodes:
            raise InputError(f"node {nd.get('id')}", "a node id used once", nd.get("id"), path)
        nodes[nd.get("id")] = attrs(nd, "node")
    links = [{"a": e.get("source"), "b": e.get("target"), **attrs(e, "edge")} for e in graph.findall(ns + "edge")]
    data = {"nodes": nodes, "links": links}
    data.update({k: v for k, v in attrs(graph, "graph").items() if k in ("name", "link_gbps")})
    return data


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _rate(v, key):
    if not _number(v) or not LINK_GBPS.ok(v):
        raise InputError(key, f"a positive rate in Gb/s (a number, no unit; {LINK_GBPS.expected})", v)
    return float(v)


def from_data(data: dict, name: str = "fabric", file: str | None = None) -> Fabric:
    """A Fabric from the file's mapping (see the module doc), after checking all of it."""
    unknown = sorted(set(data) - set(TOP_KEYS), key=str)
    if unknown:
        raise InputError(str(unknown[0]), "a fabric file key (" + ", ".join(TOP_KEYS) + ")", "an unknown key", file)
    name = data.get("name", name)
    if not isinstance(name, str) or not name:
        raise InputError("name", "a non-empty string", name, file)
    default_gbps = None if data.get("link_gbps") is None else _rate(data["link_gbps"], "link_gbps")
    nodes = data.get("nodes")
    if isinstance(nodes, list):  # a list of {name: ..., role: ...} is accepted too
        as_map = {}
        for i, nd in enumerate(nodes):
            if not isinstance(nd, dict) or "name" not in nd:
                raise InputError(f"nodes[{i}]", "a mapping with a name", nd, file)
            nm = nd["name"]
            if not isinstance(nm, str):  # a list or mapping: unhashable, and no name anyway
                raise InputError(f"nodes[{i}].name", "a name of a letter then up to 31 letters, digits or _", nm, file)
            if nm in as_map:
                raise InputError(f"nodes[{i}].name", "a name used once", nm, file)
            as_map[nm] = {k: v for k, v in nd.items() if k != "name"}
        nodes = as_map
    if not isinstance(nodes, dict) or not nodes:
        raise InputError("nodes", "a mapping of node name -> {role: host|switch, ...}", nodes, file)
    links = data.get("links")
    if not isinstance(links, list) or not links:
        raise InputError("links", "a list of {a, b, link_gbps}", links, file)

    roles, checked = {}, {}
    for nm, nd in nodes.items():
        key = f"nodes.{nm}"
        if not isinstance(nm, str) or not NAME_RE.fullmatch(nm):
            raise InputError(key, "a name of a letter then up to 31 letters, digits or _", nm, file)
        if nd is None:
            nd = {}
        if not isinstance(nd, dict):
            raise InputError(key, "a mapping with role (host or switch)", nd, file)
        for k in nd:
            if k not in NODE_KEYS and k not in NODE_INTS:
                raise InputError(f"{key}.{k}", "a node key (" + ", ".join(NODE_KEYS + NODE_INTS) + ")",
                                 "an unknown key", file)
        role = nd.get("role")
        if role not in (HOST, SWITCH):
            raise InputError(f"{key}.role", "host or switch", role, file)
        layer = nd.get("layer", "host" if role == HOST else "switch")
        if not isinstance(layer, str) or not NAME_RE.fullmatch(layer):
            raise InputError(f"{key}.layer", "a layer name (tor, leaf, spine, ...)", layer, file)
        openflow = nd.get("openflow", True)
        if not isinstance(openflow, bool):
            raise InputError(f"{key}.openflow", "true or false", openflow, file)
        if role == HOST and ("openflow" in nd or "layer" in nd):
            raise InputError(f"{key}.{'openflow' if 'openflow' in nd else 'layer'}", "no such key on a host",
                             "one", file)
        extra = {}
        for k in NODE_INTS:
            if k in nd:
                v = nd[k]
                if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    raise InputError(f"{key}.{k}", "an integer >= 0", v, file)
                extra[k] = v
        roles[nm] = role
        checked[nm] = (role, layer, openflow, extra)
    hosts = [n for n, r in roles.items() if r == HOST]
    switches = [n for n, r in roles.items() if r == SWITCH]
    if not switches:
        raise InputError("nodes", "at least one switch", "hosts only", file)
    if not hosts:
        raise InputError("nodes", "at least one host", "switches only", file)
    for what, n, limit in (("hosts", len(hosts), MAX_HOSTS), ("switches", len(switches), MAX_SWITCHES),
                           ("links", len(links), MAX_LINKS)):
        if n > limit:
            raise InputError("nodes" if what != "links" else "links",
                             f"at most {limit} {what} (topologies.builders.MAX_{what.upper()}, docs/fabrics.md)",
                             n, file)

    fab = Fabric("file", {"file": file or name, "name": name}, default_gbps or 0.0)
    for nm in switches:
        _, layer, openflow, extra = checked[nm]
        fab.add_switch(nm, layer, openflow=openflow, **extra)
    for nm in hosts:
        fab.add_host(nm, **checked[nm][3])
    seen = set()
    rates = []
    for i, ln in enumerate(links):
        key = f"links[{i}]"
        if not isinstance(ln, dict):
            raise InputError(key, "a mapping {a, b, link_gbps}", ln, file)
        for k in ln:
            if k not in LINK_KEYS:
                raise InputError(f"{key}.{k}", "a link key (" + ", ".join(LINK_KEYS) + ")", "an unknown key", file)
        ends = []
        for end in ("a", "b"):
            v = ln.get(end)
            if not isinstance(v, str) or v not in roles:
                raise InputError(f"{key}.{end}", "a node named in nodes", v, file)
            ends.append(v)
        a, b = ends
        if a == b:
            raise InputError(key, "a link between two different nodes", f"{a}-{b}", file)
        pair = frozenset(ends)
        if pair in seen:
            raise InputError(key, "one link per node pair (give parallel cables as `cables`)", f"{a}-{b}", file)
        seen.add(pair)
        if "link_gbps" in ln:
            gbps = _rate(ln["link_gbps"], f"{key}.link_gbps")
        elif default_gbps is not None:
            gbps = default_gbps
        else:
            raise InputError(f"{key}.link_gbps", "a rate in Gb/s (or a top-level link_gbps)", "none", file)
        cables = ln.get("cables", 1)
        if isinstance(cables, bool) or not isinstance(cables, int) or cables < 1:
            raise InputError(f"{key}.cables", "an integer >= 1", cables, file)
        if roles[a] == HOST and roles[b] == HOST:
            raise InputError(key, "a link with a switch at one end at least", f"host {a} to host {b}", file)
        if HOST in (roles[a], roles[b]):
            sw = b if roles[a] == HOST else a
            kind = "host" if checked[sw][2] else "nvlink"
        else:
            kind = "fabric"
        if "kind" in ln and ln["kind"] != kind:
            raise InputError(f"{key}.kind", f"{kind} (what its ends make it)", ln["kind"], file)
        fab.add_link(a, b, gbps, kind, cables=cables)
        rates.append((kind, gbps / cables))
    for h in hosts:
        if not fab.attachments(h):
            has_nv = fab.graph.degree(h) > 0
            raise InputError(f"nodes.{h}", "a host with a link to an OpenFlow switch (its fabric port)",
                             "only an NVLink link" if has_nv else "no link", file)
    _refuse_bridge_loops(fab, file)
    if not nx.is_connected(fab.graph):
        parts = sorted(nx.connected_components(fab.graph), key=len, reverse=True)
        stray = sorted(parts[1])[0]
        raise InputError("links", "a connected fabric", f"{len(parts)} parts ({stray} cannot reach "
                         f"{sorted(parts[0])[0]})", file)
    if not fab.link_gbps:
        host_rates = [g for k, g in rates if k == "host"]
        fab.link_gbps = max(set(host_rates), key=host_rates.count)  # the most common host link rate
    return fab
