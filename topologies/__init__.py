"""The network layer: fabrics as graphs, with no Mininet and no root. Bad input raises badinput.InputError."""
from topologies.builders import (MAX_HOSTS, MAX_LINKS, MAX_SWITCHES, build, fat_tree, from_spec, hpn, leaf_spine,
                                 parse_spec, rail_optimized, single_switch, superpod)
from topologies.fabric import Fabric
from topologies.files import load_fabric_file
from topologies.show import resolve

__all__ = ["Fabric", "MAX_HOSTS", "MAX_LINKS", "MAX_SWITCHES", "build", "fat_tree", "from_spec",
           "hpn", "leaf_spine", "load_fabric_file", "parse_spec", "rail_optimized", "resolve", "single_switch",
           "superpod"]
