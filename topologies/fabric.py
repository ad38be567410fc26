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

import networkx as nx

from badinput import InputError

HOST = "host"
SWITCH = "switch"

# Host interface 0 faces the fabric, interface 1 the server's NVLink domain.
def _ip(net: int, index: int) -> str:
    n = index + 1  # .0 is the network address
    if n >= 1 << 16:
        raise InputError("topology", "at most 65534 hosts", index + 1)
    return f"10.{net}.{n >> 8}.{n & 0xFF}"


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

    # -- construction -------------------------------------------------------
    def add_host(self, name: str, **attrs) -> None:
        index = sum(1 for _, d in self.graph.nodes(data=True) if d["role"] == HOST)
        self.graph.add_node(name, role=HOST, layer="host", rank=index,
                            ip=_ip(0, index), mac=_mac(0, index), **attrs)
        self._next_port[name] = 0  # hosts count interfaces from eth0

    def add_switch(self, name: str, layer: str, *, openflow: bool = True, **attrs) -> None:
        dpid = self._next_dpid
        self._next_dpid += 1
        self.graph.add_node(name, role=SWITCH, layer=layer, dpid=dpid,
                            openflow=openflow, **attrs)
        self._next_port[name] = 1  # OpenFlow ports start at 1

    def add_link(self, a: str, b: str, link_gbps: float, kind: str) -> None:
        if self.graph.has_edge(a, b):
            raise ValueError(f"duplicate link {a}-{b}")
        pa, pb = self._next_port[a], self._next_port[b]
        self._next_port[a] += 1
        self._next_port[b] += 1
        self.graph.add_edge(a, b, link_gbps=float(link_gbps), kind=kind, ports={a: pa, b: pb})
        if kind == "nvlink":
            for h, s in ((a, b), (b, a)):
                if self.graph.nodes[h]["role"] == HOST:
                    idx = self.graph.nodes[h]["rank"]
                    self.graph.nodes[h]["nvlink_ip"] = _ip(1, idx)
                    self.graph.nodes[h]["nvlink_mac"] = _mac(2, idx)

    # -- queries ------------------------------------------------------------
    @property
    def hosts(self) -> list[str]:
        """Host names in rank order."""
        hs = [n for n, d in self.graph.nodes(data=True) if d["role"] == HOST]
        return sorted(hs, key=lambda n: self.graph.nodes[n]["rank"])

    @property
    def switches(self) -> list[str]:
        sw = [n for n, d in self.graph.nodes(data=True) if d["role"] == SWITCH]
        return sorted(sw, key=lambda n: self.graph.nodes[n]["dpid"])

    @property
    def openflow_switches(self) -> list[str]:
        return [s for s in self.switches if self.graph.nodes[s]["openflow"]]

    def links(self, kind: str | None = None) -> list[tuple[str, str, dict]]:
        # Endpoints in a canonical order, so serialization is stable.
        out = [(min(a, b), max(a, b), d) for a, b, d in self.graph.edges(data=True)
               if kind is None or d["kind"] == kind]
        return sorted(out, key=lambda e: (e[0], e[1]))

    def node(self, name: str) -> dict:
        return self.graph.nodes[name]

    def port(self, node: str, peer: str) -> int:
        return self.graph.edges[node, peer]["ports"][node]

    def attachment(self, host: str) -> tuple[str, int]:
        """The (switch, port) where a host's fabric interface plugs in."""
        for nbr in self.graph.neighbors(host):
            e = self.graph.edges[host, nbr]
            if e["kind"] == "host":
                return nbr, e["ports"][nbr]
        raise KeyError(f"{host} has no fabric link")

    def nvlink_switch(self, host: str) -> str | None:
        for nbr in self.graph.neighbors(host):
            if self.graph.edges[host, nbr]["kind"] == "nvlink":
                return nbr
        return None

    def same_server(self, a: str, b: str) -> bool:
        sa, sb = self.nvlink_switch(a), self.nvlink_switch(b)
        return sa is not None and sa == sb

    def switch_graph(self) -> nx.Graph:
        """The OpenFlow-steered part: switches and fabric links only."""
        return self.graph.subgraph(self.openflow_switches).copy()

    def counts(self) -> dict:
        return {
            "hosts": len(self.hosts),
            "switches": len(self.switches),
            "links": self.graph.number_of_edges(),
            "host_links": len(self.links("host")),
            "nvlink_links": len(self.links("nvlink")),
            "fabric_links": len(self.links("fabric")),
        }

    def host_link_gbps(self, host: str) -> float:
        sw, _ = self.attachment(host)
        return self.graph.edges[host, sw]["link_gbps"]

    # -- serialization (the controller reads this) ---------------------------
    def to_dict(self) -> dict:
        return {
            "version": 1,
            "kind": self.kind,
            "params": self.params,
            "link_gbps": self.link_gbps,
            "nodes": [{"name": n, **self.graph.nodes[n]} for n in self.hosts + self.switches],
            "links": [{"a": a, "b": b, "link_gbps": d["link_gbps"], "kind": d["kind"],
                       "port_a": d["ports"][a], "port_b": d["ports"][b]}
                      for a, b, d in self.links()],
        }

    @classmethod
    def from_dict(cls, data: dict) -> "Fabric":
        fab = cls(data["kind"], data["params"], data["link_gbps"])
        for nd in data["nodes"]:
            attrs = {k: v for k, v in nd.items() if k != "name"}
            fab.graph.add_node(nd["name"], **attrs)
        for ln in data["links"]:
            fab.graph.add_edge(ln["a"], ln["b"], link_gbps=ln["link_gbps"], kind=ln["kind"],
                               ports={ln["a"]: ln["port_a"], ln["b"]: ln["port_b"]})
        return fab

    def dump(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=1)

    @classmethod
    def load(cls, path: str) -> "Fabric":
        with open(path) as f:
            return cls.from_dict(json.load(f))
