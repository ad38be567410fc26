"""Emulation capacity: how fast the links can run on this machine while every
link still holds its configured rate, per datapath.

For each datapath, fabric and emulated link rate, side by side in one run:
- `ring`: dtnet's agents replay a ring all-reduce (ecmp);
- `stride`: dtnet's agents replay Hedera stride flows (congestion-aware):
  stride(1) on the fat-tree, stride(4) on rail-optimized (along the rails);
- `iperf3`: plain iperf3 streams of the same pairs on the same testbed (the
  plain-Mininet reference).
The figure is the aggregate received rate over the sum of the host links
(normalized throughput). A point counts as faithful when it is >= 0.90 and,
for dtnet's runs, fidelity.ok holds. The time dilation stays fixed, so each
point emulates the same real-cluster traffic with more packets per second.

    sudo .venv/bin/python bench/bench_capacity.py [--rates 5,10,20,40] \
        [--datapaths userspace,afxdp] [--fabrics fat-tree,rail-optimized] [--switchd auto,shared] \
        [--cc default,cubic] [--mtu default,65000]

--switchd picks the switch daemons (testbed.switch_daemons and userspace_tso):
auto (the default: what a run without those keys gets, one of the run's own
with TSO on the userspace datapath), shared (the machine's ovs-vswitchd, the
plain Mininet setup), own (one of the run's own), tso (the run's
own, with userspace TSO and the hosts' TCP offloads on), own2 and tso2 (two of
the run's own, the switches split between them); a suffix -libc or -tcmalloc
on the run's own picks their allocator (testbed.switch_malloc; without one,
tcmalloc where installed). Under `taskset -c 0`
the run's own daemons stay on that core with everything else; the shared one
does not (it was started outside).

--cc sets the hosts' congestion control (transport.tcp.cc) for dtnet's runs and iperf3 alike;
`default` is what a file without the key gets (the kernel's default, bbr on this machine kind).
--mtu sets every interface's MTU (transport.mtu_bytes) the same way; `default` is what a file
without the key gets: dtnet's runs size their frames to the links (9000 bytes at 10 Mb/s, up to
65000 from 72 Mb/s), while plain iperf3 keeps 9000-byte frames, as a plain Mininet testbed would.
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from badinput import InputError  # noqa: E402
from emulator.check import check as emulator_check  # noqa: E402
from emulator.run.runner import run_experiment  # noqa: E402
from emulator.testbed.iperf import iperf3_flows  # noqa: E402
from emulator.testbed import transport as testbed_transport  # noqa: E402
from emulator.testbed.lifecycle import Testbed  # noqa: E402
from experiment import model  # noqa: E402
from experiment.transport import CCS, EMULATOR_MTU_BYTES  # noqa: E402

FABRICS = {
    "fat-tree": {"kind": "fat-tree", "k": 4},
    "rail-optimized": {"kind": "rail-optimized", "servers": 4, "gpus_per_server": 4, "spines": 2},
}
# Stride that keeps rail-optimized traffic on its rails (GPU g of server s to
# GPU g of server s+1), as a rail-aware job would; stride(1) on the fat-tree.
STRIDE = {"fat-tree": 1, "rail-optimized": 4}
DILATION = 40.0
SWITCHD = {"auto": {},  # the testbed's defaults: what a run gets without testbed keys
           "shared": {"switch_daemons": "shared", "userspace_tso": False},
           "own": {"switch_daemons": 1, "userspace_tso": False},
           "tso": {"switch_daemons": 1, "userspace_tso": True},
           "own2": {"switch_daemons": 2, "userspace_tso": False},
           "tso2": {"switch_daemons": 2, "userspace_tso": True}}
MALLOCS = ("tcmalloc", "libc")  # a variant's suffix, e.g. tso2-libc: testbed.switch_malloc (default auto)


def switchd_settings(variant: str) -> dict:
    """testbed settings of a --switchd variant: a SWITCHD name, for the run's own daemons optionally
    with -tcmalloc or -libc (testbed.switch_malloc)."""
    base, _, malloc = variant.partition("-")
    if base not in SWITCHD or (malloc and (malloc not in MALLOCS or base == "shared")):
        raise ValueError(f"expected one of {', '.join(SWITCHD)} (all but shared optionally -tcmalloc or -libc), "
                         f"found {variant}")
    return {**SWITCHD[base], **({"switch_malloc": malloc} if malloc else {})}
WORKLOADS = {
    "ring": ("ecmp", {"collective": "all_reduce", "algorithm": "ring", "size_bytes": 1 << 30, "iterations": 3}),
    "stride": ("congestion-aware", {"pattern": "stride", "size_bytes": 5_000_000_000}),
}


def experiment(fabric: str, workload: str, rate_mbps: float, datapath: str, switchd: str = "shared",
               cc: str | None = None, mtu_bytes: int | None = None):
    link = rate_mbps / 400e3
    routing, wl = WORKLOADS[workload]
    if workload == "stride":
        wl = {**wl, "stride": STRIDE[fabric]}
    order = "rail-aligned" if fabric == "rail-optimized" and workload == "ring" else "as-listed"
    return model.parse({
        "name": f"capacity-{fabric}-{workload}",
        "topology": {**FABRICS[fabric], "link_gbps": 400},
        "scale": {"link": link, "bytes": link * DILATION},
        "controller": {"routing": routing}, "testbed": {"datapath": datapath, **switchd_settings(switchd)},
        "transport": {**({"tcp": {"cc": cc}} if cc else {}), **({"mtu_bytes": mtu_bytes} if mtu_bytes else {})},
        "jobs": [{"name": workload, "hosts": "all", "order": order, "workload": wl}]})


def dtnet_point(exp, out_dir) -> tuple[float, bool, str]:
    s = run_experiment(exp, out_dir, log=lambda *_: None)
    bad = [c["name"] for c in s["fidelity"]["checks"] if not c["ok"]]
    return s["traffic"]["normalized_throughput"], s["fidelity"]["ok"], ",".join(bad)


def stride_pairs(exp) -> list[tuple[str, str]]:
    """(sender, receiver) of the stride workload's hosts: what plain iperf3 runs on instead."""
    hosts = exp.fabric().hosts
    step = exp.jobs[0].workload["stride"]
    return [(h, hosts[(i + step) % len(hosts)]) for i, h in enumerate(hosts)]


def plain_settings(exp) -> dict:
    """The testbed's transport for plain iperf3: the file's, but 9000-byte frames where it sets no
    MTU (a plain Mininet testbed does not size its frames to its links as dtnet's runs do)."""
    out = testbed_transport.testbed_settings(exp)
    if exp.transport.mtu_bytes is None:
        out["mtu"] = EMULATOR_MTU_BYTES
    return out


def iperf3_point(exp, out_dir, duration_s=6.0) -> float:
    fabric = exp.fabric()
    hosts = fabric.hosts
    pairs = stride_pairs(exp)
    with Testbed(fabric, out_dir, routing="congestion-aware", scale_link=exp.scale.link,
                 datapath=exp.testbed.datapath, switch_daemons=exp.testbed.switch_daemons,
                 userspace_tso=exp.testbed.userspace_tso, switch_malloc=exp.testbed.switch_malloc,
                 **plain_settings(exp), log=lambda *_: None) as tb:
        got = sum(iperf3_flows(tb, pairs, duration_s))
    return got / (len(hosts) * exp.emulated_mbps(400))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="5,10,20,40", help="emulated link rates in Mb/s")
    ap.add_argument("--datapaths", default="userspace,afxdp")
    ap.add_argument("--fabrics", default="fat-tree,rail-optimized")
    ap.add_argument("--switchd", default="auto", help="comma-separated: " + ", ".join(SWITCHD)
                    + "; the run's own with -libc or -tcmalloc: that allocator (default: tcmalloc where installed)")
    ap.add_argument("--cc", default="default",
                    help="comma-separated congestion controls of the hosts (transport.tcp.cc): newreno, cubic, "
                         "bbr, or default (what a file without the key gets; dtnet's runs and iperf3 alike)")
    ap.add_argument("--mtu", default="default",
                    help="comma-separated MTUs of every interface (transport.mtu_bytes), or default (what a file "
                         "without the key gets: frames sized to the links; plain iperf3 keeps 9000)")
    args = ap.parse_args(argv)
    try:
        mtus = [None if m == "default" else int(m) for m in args.mtu.split(",")]
    except ValueError:
        ap.error(f"--mtu: expected default or whole bytes, found {args.mtu}")
    ccs = args.cc.split(",")
    for c in ccs:
        if c != "default" and c not in CCS:
            ap.error(f"--cc: expected default or one of {', '.join(CCS)}, found {c}")
    variants = args.switchd.split(",")
    for v in variants:
        try:
            switchd_settings(v)
        except ValueError as e:
            ap.error(f"--switchd: {e}")
    try:
        rates = [float(r) for r in args.rates.split(",")]
    except ValueError:
        ap.error(f"--rates: expected comma-separated Mb/s, found {args.rates}")
    try:  # every point's file as the engine checks it, before anything runs: bad input is one line, exit 2
        for dp, sd, cc, mtu, fab, rate, wl in itertools.product(args.datapaths.split(","), variants, ccs, mtus,
                                                               args.fabrics.split(","), rates, WORKLOADS):
            emulator_check(experiment(fab, wl, rate, dp, sd, None if cc == "default" else cc, mtu))
    except (InputError, KeyError) as e:
        print(f"bench_capacity.py: {e if isinstance(e, InputError) else f'no such fabric {e}'}", file=sys.stderr)
        return 2
    print(f"cpus allowed: {sorted(os.sched_getaffinity(0))}; load average {os.getloadavg()[0]:.2f}")
    print(f"{'datapath':<24} {'fabric':<15} {'Mb/s':>5} {'ring':>14} {'stride':>14} {'iperf3':>7}   "
          "(normalized throughput; * = fidelity.ok false, with the failed checks)")
    best: dict = {}
    with tempfile.TemporaryDirectory(prefix="dtnet-capacity-") as tmp:
        for dp, sd, cc, mtu in [(d, v, c, m) for d in args.datapaths.split(",") for v in variants for c in ccs
                                for m in mtus]:
            label = ((dp if sd == "shared" else f"{dp}/{sd}") + ("" if cc == "default" else f"/{cc}")
                     + ("" if mtu is None else f"/mtu{mtu}"))
            cc = None if cc == "default" else cc
            for fab in args.fabrics.split(","):
                for rate in rates:
                    cells = []
                    for wl in WORKLOADS:
                        exp = experiment(fab, wl, rate, dp, sd, cc, mtu)
                        norm, ok, bad = dtnet_point(exp, os.path.join(tmp, f"{dp}-{sd}-{cc}-{mtu}-{fab}-{wl}-{rate:g}"))
                        cells.append(f"{norm:.3f}{'' if ok else '*'}{'(' + bad + ')' if bad else ''}")
                        hosts = len(exp.fabric().hosts)
                        if norm >= 0.9 and ok:
                            key = (label, fab, wl)
                            best[key] = max(best.get(key, 0.0), norm * hosts * rate)
                    ip = iperf3_point(experiment(fab, "stride", rate, dp, sd, cc, mtu),
                                      os.path.join(tmp, f"ip-{dp}-{sd}-{cc}-{mtu}-{fab}-{rate:g}"))
                    if ip >= 0.9:
                        best[label, fab, "iperf3"] = max(best.get((label, fab, "iperf3"), 0.0), ip * hosts * rate)
                    print(f"{label:<24} {fab:<15} {rate:>5g} {cells[0]:>14} {cells[1]:>14} {ip:>7.3f}", flush=True)
    print("\nhighest faithful aggregate (Mb/s emulated):")
    for (dp, fab, wl), mbps in sorted(best.items()):
        print(f"  {dp:<24} {fab:<15} {wl:<7} {mbps:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
