"""The network layer: fabrics as graphs, with no Mininet and no root. Bad input raises badinput.InputError."""
from topologies.builders import build, fat_tree, from_spec, leaf_spine, parse_spec, rail_optimized, single_switch
from topologies.fabric import Fabric

__all__ = ["Fabric", "build", "fat_tree", "from_spec", "leaf_spine", "parse_spec",
           "rail_optimized", "single_switch"]
