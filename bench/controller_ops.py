"""One round of the controller's work on one fat-tree, through FabricController only.

  python bench/controller_ops.py TREE K [--repeat N]

TREE is the root of a dtnet checkout: the modules are imported from there, so the
same driver times the code of two commits (bench_controller.py --baseline runs it
for both, in turn). It uses only what the adapter calls (the constructor,
switch_connected, packet_in_flow, flow_stats, poll_done, port_status), which both
sides share. Prints one JSON line of seconds per operation (the best of N), each
timed with the garbage collector off, as timeit does.
"""
from __future__ import annotations

import gc
import json
import sys
import time


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    tree, k = argv[0], int(argv[1])
    repeat = int(argv[argv.index("--repeat") + 1]) if "--repeat" in argv else 3
    sys.path.insert(0, tree)
    from controller.core import FabricController
    from controller.flows import FlowKey
    from topologies import fat_tree

    fabric = fat_tree(k)
    hosts = fabric.hosts
    n = len(hosts)
    best: dict[str, float] = {}

    def timed(name, fn):
        # As timeit does: the garbage of the operation before is not this one's cost.
        gc.collect()
        gc.disable()
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
        gc.enable()
        best[name] = min(best.get(name, dt), dt)
        return out

    for _ in range(repeat):
        for policy in ("ecmp", "congestion-aware"):
            ctl = timed(f"{policy}: new controller", lambda: FabricController(fabric, policy))
            timed(f"{policy}: connect every switch", lambda: [
                ctl.switch_connected(st.dpid, 0.0) for st in ctl.switches.values()])
        # Stride(n/2): one flow per host, every one across the core.
        keys = [(h, FlowKey(fabric.node(h)["ip"], fabric.node(hosts[(i + n // 2) % n])["ip"], 6, 40000 + i, 5000))
                for i, h in enumerate(hosts)]
        attach = {h: fabric.attachment(h) for h in hosts}

        def place_all():
            for h, key in keys:
                sw, port = attach[h]
                ctl.packet_in_flow(fabric.node(sw)["dpid"], port, key, 0.0)
        timed("congestion-aware: place one flow per host", place_all)

        def stats(now, nbytes):
            by_switch: dict[str, list] = {}
            for f in ctl.sched.flows.values():
                by_switch.setdefault(f.path[0], []).append((f.cookie, nbytes))
            for sw, entries in by_switch.items():
                ctl.flow_stats(fabric.node(sw)["dpid"], entries, now)
        stats(0.5, 0)
        stats(1.0, int(400e9 / 8 * 0.5))  # every flow at line rate: all elephants
        timed("congestion-aware: GFF rebalance", lambda: ctl.poll_done(1.0))
        a, b = "agg0_0", "core0"
        timed("congestion-aware: link down and up", lambda: (
            ctl.port_status(fabric.node(a)["dpid"], fabric.port(a, b), False, 2.0),
            ctl.port_status(fabric.node(a)["dpid"], fabric.port(a, b), True, 3.0)))
    print(json.dumps(best))
    return 0


if __name__ == "__main__":
    sys.exit(main())
