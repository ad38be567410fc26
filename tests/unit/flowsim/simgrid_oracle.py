"""SimGrid as an independent oracle for the flow engine's sharing model (run as a script).

Reads JSON on stdin: {"capacity": [bytes/s per link], "flows": [{"links": [...], "size": bytes,
"start": s}]}; prints each flow's completion time. One SimGrid host pair per flow, routed over
exactly its links, so any path set can be expressed. SimGrid's engine can start once per
process, hence a script. Config (SimGrid 3.32): CM02 with bandwidth-factor 1, latency-factor 1
and crosstraffic 0; the defaults add 5% for ACKs and reverse traffic.
"""
import json
import sys

import simgrid as sg


def main():
    case = json.load(sys.stdin)
    e = sg.Engine(["oracle", "--cfg=network/model:CM02", "--cfg=network/bandwidth-factor:1",
                   "--cfg=network/latency-factor:1", "--cfg=network/crosstraffic:0",
                   "--log=root.thres:critical"])
    zone = sg.NetZone.create_full_zone("zone")
    links = [zone.create_link(f"l{i}", float(c)).seal() for i, c in enumerate(case["capacity"])]
    done = {}

    def sender(mb, size, start):
        if start > 0:
            sg.this_actor.sleep_for(start)
        sg.Mailbox.by_name(mb).put(mb, size)

    def receiver(mb):
        sg.Mailbox.by_name(mb).get()
        done[mb] = sg.Engine.clock

    pairs = []
    for i, f in enumerate(case["flows"]):
        s, d = zone.create_host(f"s{i}", 1e9), zone.create_host(f"d{i}", 1e9)
        zone.add_route(s.netpoint, d.netpoint, None, None, [sg.LinkInRoute(links[l]) for l in f["links"]], False)
        pairs.append((s, d))
    zone.seal()
    for i, (f, (s, d)) in enumerate(zip(case["flows"], pairs)):
        sg.Actor.create(f"snd{i}", s, sender, f"m{i}", int(f["size"]), float(f.get("start", 0.0)))
        sg.Actor.create(f"rcv{i}", d, receiver, f"m{i}")
    e.run()
    json.dump([done[f"m{i}"] for i in range(len(case["flows"]))], sys.stdout)


if __name__ == "__main__":
    main()
