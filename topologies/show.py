"""`dtnet topo show`: what a fabric spec or fabric file builds, in counts (no pairs, no paths)."""
from __future__ import annotations

import json

from topologies.builders import from_spec
from topologies.fabric import Fabric
from topologies.files import is_fabric_file, load_fabric_file


def resolve(arg: str) -> Fabric:
    """A fabric from a spec string (fat-tree:k=4) or a fabric file path (.yaml, .graphml)."""
    return load_fabric_file(arg) if is_fabric_file(arg) else from_spec(arg)


def summary(fab: Fabric) -> dict:
    return {"kind": fab.kind, "params": fab.params, "link_gbps": fab.link_gbps, **fab.counts(),
            "layers": {layer: len(names) for layer, names in fab.layers().items()},
            "link_rates": [{"kind": k, "link_gbps": g} for k, g in fab.link_rates()]}


def show(arg: str, as_json: bool = False, full: bool = False) -> str:
    fab = resolve(arg)
    if as_json:
        data = summary(fab)
        if full:
            data["fabric"] = fab.to_dict()
        return json.dumps(data, indent=1)
    c = fab.counts()
    bundled = f", {c['cables']} cables" if c["cables"] != c["links"] else ""
    lines = [f"{fab.kind} {fab.params}: {c['hosts']} hosts, {c['switches']} switches, {c['links']} links "
             f"({c['host_links']} host, {c['nvlink_links']} NVLink, {c['fabric_links']} switch-to-switch{bundled})"]
    for layer, names in fab.layers().items():
        shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
        lines.append(f"  {layer:<8} {len(names):>6}  {shown}")
    lines.append("  link rates: " + ", ".join(f"{k} {g:g} Gb/s" for k, g in fab.link_rates()))
    if c["host_links"] > c["hosts"]:
        lines.append(f"  dual-homed: {c['host_links'] - c['hosts']} hosts with a second fabric port "
                     "(routing uses the first, eth0)")
    return "\n".join(lines)
