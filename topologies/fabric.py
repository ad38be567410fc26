"""The fabric as a graph: one object feeds Mininet, the controller and tests.

Nodes carry a role (``host`` or ``switch``) and a layer; edges carry a
capacity in Gb/s, a kind (``host``, ``fabric`` or ``nvlink``) and the port
number at each end. Port numbers, names, DPIDs and addresses are assigned
deterministically at build time, so the testbed and the controller agree on
them without talking to each other.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from operator import itemgetter

import networkx as nx

from badinput import InputError

HOST = "host"
SWITCH = "switch"

# Hosts are numbered in blocks of one /16 each (.0.0 and .255.255 skipped), the fabric
# address in 10.(2b).x.y and the NVLink address in 10.(2b+1).x.y for block b. Fabrics
# of up to 65,534 hosts therefore keep 10.0.0.0/16 and 10.1.0.0/16, the subnets the
# emulator configures; larger ones exist only for the pure layers and the flow engine.
HOSTS_PER_BLOCK = (1 << 16) - 2
MAX_ADDRESSABLE_HOSTS = 128 * HOSTS_PER_BLOCK


def _ip(net: int, index: int) -> str:
    block, n = divmod(index, HOSTS_PER_BLOCK)
    n += 1  # .0.0 is the network address
    if block >= 128:
        raise InputError("topology", f"at most {MAX_ADDRESSABLE_HOSTS} hosts", index + 1)
    return f"10.{2 * block + net}.{n >> 8}.{n & 0xFF}"


def _mac(prefix: int, index: int) -> str:
    n = index + 1
    return f"{prefix:02x}:00:00:{(n >> 16) & 0xFF:02x}:{(n >> 8) & 0xFF:02x}:{n & 0xFF:02x}"


@dataclass(frozen=True)
class Port:
    node: str
    port: int


class Fabric:
    """A networkx graph plus the stable numbering the testbed and controller share."""

    def __init__(self, kind: str, params: dict, link_gbps: float):
        self.kind = kind
        self.params = dict(params)
        self.link_gbps = float(link_gbps)
        self.graph = nx.Graph()
        self._next_port: dict[str, int] = {}
        self._next_dpid = 1
        # Kept as nodes and links are added, so building is linear in the fabric's size.
        self._hosts: list[str] = []
        self._switches: list[str] = []
        self._links_by_kind: dict[str, int] = {}
        self._cables = 0
        # Per-host answers (attachments, NIC rate, NVLink switch), kept until a link of the host is
        # added: placement, planning, predictions and the summary each ask for every host's.
        self._attached: dict[str, tuple] = {}
        self._nic_gbps: dict[str, float] = {}
        self._nvl: dict[str, str | None] = {}

    # -- construction -------------------------------------------------------
    def add_host(self, name: str, **attrs) -> None:
        if name in self.graph:
            raise ValueError(f"duplicate node {name}")
        index = len(self._hosts)
        self.graph.add_node(name, role=HOST, layer="host", rank=index,
                            ip=_ip(0, index), mac=_mac(0, index), **attrs)
        self._hosts.append(name)
        self._next_port[name] = 0  # hosts count interfaces from eth0

    def add_switch(self, name: str, layer: str, *, openflow: bool = True, **attrs) -> None:
        if name in self.graph:
            raise ValueError(f"duplicate node {name}")
        dpid = self._next_dpid
        self._next_dpid += 1
        self.graph.add_node(name, role=SWITCH, layer=layer, dpid=dpid,
                            openflow=openflow, **attrs)
        self._switches.append(name)
        self._next_port[name] = 1  # OpenFlow ports start at 1

    def add_link(self, a: str, b: str, link_gbps: float, kind: str, cables: int = 1) -> None:
        """``cables`` parallel cables between a and b are one link of their summed rate:
        the graph has one edge per node pair, and the published designs count cables."""
        if self.graph.has_edge(a, b):
            raise ValueError(f"duplicate link {a}-{b}")
        pa, pb = self._next_port[a], self._next_port[b]
        self._next_port[a] += 1
        self._next_port[b] += 1
        attrs = {"link_gbps": float(link_gbps), "kind": kind, "ports": {a: pa, b: pb}}
        if cables != 1:
            attrs["cables"] = cables
        self.graph.add_edge(a, b, **attrs)
        if self._attached or self._nic_gbps or self._nvl:  # asked while wiring: forget a's and b's
            for cache in (self._attached, self._nic_gbps, self._nvl):
                cache.pop(a, None)
                cache.pop(b, None)
        self._count_link(kind, cables)
        if kind == "nvlink":
            for h, s in ((a, b), (b, a)):
                if self.graph.nodes[h]["role"] == HOST:
                    idx = self.graph.nodes[h]["rank"]
                    self.graph.nodes[h]["nvlink_ip"] = _ip(1, idx)
                    self.graph.nodes[h]["nvlink_mac"] = _mac(2, idx)

    def _count_link(self, kind: str, cables: int) -> None:
        self._links_by_kind[kind] = self._links_by_kind.get(kind, 0) + 1
        self._cables += cables

    # -- queries ------------------------------------------------------------
    @property
    def hosts(self) -> list[str]:
        """Host names in rank order (a copy)."""
        return list(self._hosts)

    @property
    def switches(self) -> list[str]:
        """Switch names in DPID order (a copy)."""
        return list(self._switches)

    @property
    def host_count(self) -> int:
        return len(self._hosts)

    @property
    def openflow_switches(self) -> list[str]:
        return [s for s in self.switches if self.graph.nodes[s]["openflow"]]

    def links(self, kind: str | None = None) -> list[tuple[str, str, dict]]:
        # Endpoints in a canonical order, so serialization is stable.
        out = [(min(a, b), max(a, b), d) for a, b, d in self.graph.edges(data=True)
               if kind is None or d["kind"] == kind]
        return sorted(out, key=itemgetter(0, 1))

    def node(self, name: str) -> dict:
        return self.graph.nodes[name]

    def port(self, node: str, peer: str) -> int:
        return self.graph.edges[node, peer]["ports"][node]

    def attachment(self, host: str) -> tuple[str, int]:
        """The (switch, port) where a host's first fabric interface (eth0) plugs in."""
        att = self.attachments(host)
        if not att:
            raise KeyError(f"{host} has no fabric link")
        return att[0]

    def attachments(self, host: str) -> list[tuple[str, int]]:
        """Every (switch, port) of a host's fabric links, by the host's interface number:
        two for a dual-homed (dual-ToR) host."""
        got = self._attached.get(host)
        if got is None:
            out = []
            for nbr in self.graph.neighbors(host):
                e = self.graph.edges[host, nbr]
                if e["kind"] == "host":
                    out.append((e["ports"][host], nbr, e["ports"][nbr]))
            got = self._attached[host] = tuple((sw, port) for _, sw, port in sorted(out))
        return list(got)

    def nvlink_switch(self, host: str) -> str | None:
        if host not in self._nvl:
            self._nvl[host] = next((nbr for nbr in self.graph.neighbors(host)
                                    if self.graph.edges[host, nbr]["kind"] == "nvlink"), None)
        return self._nvl[host]

    def same_server(self, a: str, b: str) -> bool:
        sa, sb = self.nvlink_switch(a), self.nvlink_switch(b)
        return sa is not None and sa == sb

    def switch_graph(self) -> nx.Graph:
        """The OpenFlow-steered part: switches and fabric links only."""
        return self.graph.subgraph(self.openflow_switches).copy()

    def counts(self) -> dict:
        """Kept while building: constant time, whatever the size. ``cables`` counts each of
        a link's parallel cables (see add_link); it equals ``links`` unless some are bundled."""
        return {
            "hosts": len(self._hosts),
            "switches": len(self._switches),
            "links": self.graph.number_of_edges(),
            "host_links": self._links_by_kind.get("host", 0),
            "nvlink_links": self._links_by_kind.get("nvlink", 0),
            "fabric_links": self._links_by_kind.get("fabric", 0),
            "cables": self._cables,
        }

    def layers(self) -> dict[str, list[str]]:
        """Switch layer -> switch names, in DPID order."""
        out: dict[str, list[str]] = {}
        for s in self._switches:
            out.setdefault(self.graph.nodes[s]["layer"], []).append(s)
        return out

    def link_rates(self) -> list[tuple[str, float]]:
        """The distinct (kind, Gb/s) pairs of the fabric's links."""
        return sorted({(d["kind"], d["link_gbps"]) for _, _, d in self.graph.edges(data=True)})

    def host_link_gbps(self, host: str) -> float:
        got = self._nic_gbps.get(host)
        if got is None:
            sw, _ = self.attachment(host)
            got = self._nic_gbps[host] = self.graph.edges[host, sw]["link_gbps"]
        return got

    # -- serialization (the controller reads this) ---------------------------
    def to_dict(self) -> dict:
        return {
            "version": 1,
            "kind": self.kind,
            "params": self.params,
            "link_gbps": self.link_gbps,
            "nodes": [{"name": n, **self.graph.nodes[n]} for n in self.hosts + self.switches],
            "links": [{"a": a, "b": b, "link_gbps": d["link_gbps"], "kind": d["kind"],
                       "port_a": d["ports"][a], "port_b": d["ports"][b],
                       **({"cables": d["cables"]} if "cables" in d else {})}
                      for a, b, d in self.links()],
        }

    @classmethod
    def from_dict(cls, data: dict) -> "Fabric":
        fab = cls(data["kind"], data["params"], data["link_gbps"])
        for nd in data["nodes"]:
            attrs = {k: v for k, v in nd.items() if k != "name"}
            fab.graph.add_node(nd["name"], **attrs)
            (fab._hosts if attrs["role"] == HOST else fab._switches).append(nd["name"])
        fab._hosts.sort(key=lambda n: fab.graph.nodes[n]["rank"])
        fab._switches.sort(key=lambda n: fab.graph.nodes[n]["dpid"])
        for ln in data["links"]:
            extra = {"cables": ln["cables"]} if "cables" in ln else {}
            fab.graph.add_edge(ln["a"], ln["b"], link_gbps=ln["link_gbps"], kind=ln["kind"],
                               ports={ln["a"]: ln["port_a"], ln["b"]: ln["port_b"]}, **extra)
            fab._count_link(ln["kind"], ln.get("cables", 1))
        return fab

    def dump(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=1)

    @classmethod
    def load(cls, path: str) -> "Fabric":
        from badinput.files import read_json  # a regular file, read to a bound

        return cls.from_dict(read_json(path, "fabric"))
