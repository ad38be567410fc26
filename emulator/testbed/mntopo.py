"""Mininet adapter: a Topo built from a Fabric, and node classes the testbed uses.

Also usable as ``mn --custom emulator/testbed/mntopo.py --topo fattree,4`` (and
``railopt,4,8,4``, ``leafspine,4,2,4``, ``single,8``, ``hpn,1,2,2,2``, ``superpod,1``,
``fabricfile,PATH``). Importing this file starts nothing.
"""
from __future__ import annotations

import os
import sys

try:
    import topologies  # noqa: F401  (is the package importable as installed?)
except ImportError:  # run by `mn --custom` from a checkout: find the repo root
    # mn execs this file without __file__; the code object knows its path.
    _here = sys._getframe().f_code.co_filename
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(_here)))))

from mininet.node import Switch
from mininet.topo import Topo

from topologies import Fabric, fat_tree, hpn, leaf_spine, load_fabric_file, rail_optimized, single_switch, superpod


class KernelBridge(Switch):
    """A Linux bridge made with iproute2 (no brctl needed), for the NVLink
    domain: it needs no OpenFlow control and costs far less CPU than OVS."""

    def __init__(self, name, **kwargs):
        kwargs.pop("dpid", None)
        Switch.__init__(self, name, **kwargs)

    def connected(self):
        return True

    def start(self, _controllers):
        self.cmd("ip link del", self.name, "2>/dev/null")
        self.cmd("ip link add name", self.name, "type bridge stp_state 0 forward_delay 0")
        for intf in self.intfList():
            if intf.name != "lo":
                self.cmd("ip link set", intf.name, "master", self.name)
                self.cmd("ip link set", intf.name, "up")
        self.cmd("ip link set", self.name, "up")

    def stop(self, deleteIntfs=True):
        self.cmd("ip link del", self.name, "2>/dev/null")
        super().stop(deleteIntfs)


class FabricTopo(Topo):
    """Nodes and links of a Fabric, with its port numbers and addresses.

    ``prefix`` is prepended to every node name so two runs on one machine
    never share an interface or bridge name. Link shaping is not set here:
    the testbed applies it after the switches start.
    """

    def build(self, fabric: Fabric = None, prefix: str = "", switch_cls=None, bridge_cls=KernelBridge,
              switch_links: bool = True):
        """switch_links=False leaves out links between OpenFlow switches: the
        AF_XDP testbed wires those through a link namespace itself. switch_cls
        is one class for every OpenFlow switch, or a dict naming each one's."""
        self.fabric, self.prefix = fabric, prefix
        for h in fabric.hosts:
            nd = fabric.node(h)
            self.addHost(prefix + h, ip=nd["ip"] + "/16", mac=nd["mac"])
        for s in fabric.switches:
            nd = fabric.node(s)
            opts = {"dpid": f"{nd['dpid']:016x}"}
            if not nd["openflow"]:
                opts["cls"] = bridge_cls
            elif isinstance(switch_cls, dict):
                opts["cls"] = switch_cls[s]
            elif switch_cls is not None:
                opts["cls"] = switch_cls
            self.addSwitch(prefix + s, **opts)
        for a, b, d in fabric.links():
            if not switch_links and all(fabric.node(n)["role"] == "switch" and fabric.node(n)["openflow"]
                                        for n in (a, b)):
                continue
            self.addLink(prefix + a, prefix + b, port1=d["ports"][a], port2=d["ports"][b])


def _topo(fabric: Fabric) -> FabricTopo:
    return FabricTopo(fabric=fabric)


# Entry points for `mn --custom`.
topos = {
    "fattree": lambda k=4: _topo(fat_tree(int(k))),
    "railopt": lambda servers=2, gpus=4, spines=2: _topo(rail_optimized(int(servers), int(gpus), int(spines))),
    "leafspine": lambda leaves=4, spines=2, hosts=4: _topo(leaf_spine(int(leaves), int(spines), int(hosts))),
    "single": lambda hosts=8: _topo(single_switch(int(hosts))),
    "hpn": lambda segments=1, hosts=2, gpus=2, aggs=2: _topo(hpn(int(segments), int(hosts), int(gpus), int(aggs))),
    "superpod": lambda sus=1: _topo(superpod(int(sus))),
    "fabricfile": lambda path: _topo(load_fabric_file(path)),
}
