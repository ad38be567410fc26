"""The network layer: fabrics as graphs, with no Mininet and no root."""
from topologies.builders import build, fat_tree, from_spec, leaf_spine, parse_spec, rail_optimized, single_switch
from topologies.errors import InputError
from topologies.fabric import Fabric

__all__ = ["Fabric", "InputError", "build", "fat_tree", "from_spec", "leaf_spine", "parse_spec",
           "rail_optimized", "single_switch"]
