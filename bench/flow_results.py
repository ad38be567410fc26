"""The tables of docs/flow-results.md, from the sweeps that make them.

    .venv/bin/dtnet run experiments/gpt3-175b-1024.yaml      # and the other three files below
    .venv/bin/python bench/flow_results.py [--results DIR]

Reads DIR/<experiment>/points/*/summary.json and config.yaml (DIR defaults to results/, where
`dtnet run` writes) and prints one markdown table per experiment: GPT-3 175B on a SuperPOD
and a fat-tree at 1,024 and 16,384 GPUs, four jobs under three policies, MoE all-to-all.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def points(results: str, name: str) -> list[tuple[dict, dict]]:
    out = []
    for d in sorted(glob.glob(os.path.join(results, name, "points", "*"))):
        try:
            with open(os.path.join(d, "summary.json")) as f:
                s = json.load(f)
            with open(os.path.join(d, "config.yaml")) as f:
                c = yaml.safe_load(f)
        except (OSError, ValueError):
            continue
        out.append((c, s))
    return out


def table(results: str, name: str, what: str, columns: list[str]) -> list:
    """The sweep's points, after the table's title and header (none: a line saying so)."""
    rows = points(results, name)
    if not rows:
        print(f"({name}: no results in {results})\n")
        return []
    print(f"`{name}`: {what}\n")
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    return rows


def fabric(c: dict) -> str:
    t = c["topology"]
    if t["kind"] == "superpod":
        return f"SuperPOD, {t['sus']} SUs"
    if t["kind"] == "fat-tree":
        return f"fat-tree k={t['k']}" + (f", {t['gpus_per_server']}-GPU servers" if t.get("gpus_per_server") else "")
    if t["kind"] == "leaf-spine":
        return f"leaf-spine {t['leaves']} x {t['hosts_per_leaf']}, {t['spines']} spines"
    return t["kind"]


def gpt(results: str, name: str) -> None:
    rows = table(results, name, "one iteration, flow engine", ["fabric", "routing", "ECMP seed", "iteration", "compute",
                                                               "exposed comm", "idle (bubble)", "DP all-reduce / alpha-beta"])
    for c, s in sorted(rows, key=lambda r: (fabric(r[0]), r[1]["routing"],
                                            r[0].get("flow", {}).get("ecmp_seed", 0))):
        j = s["jobs"][0]
        b = j["breakdown_s"]
        dp = [x for x in j["collectives"] if x["op"] == "all_reduce" and x["ranks"] > 8 and x.get("cct_vs_predicted")]
        ratio = (f"{min(x['cct_vs_predicted'] for x in dp):.2f} to {max(x['cct_vs_predicted'] for x in dp):.2f}"
                 if dp else "-")
        print(f"| {fabric(c)} | {s['routing']} | {c.get('flow', {}).get('ecmp_seed', 0)} | "
              f"{j['iteration_time_s']['mean']:.3f} s | {b['compute']:.3f} s | {b['exposed_comm']:.3f} s | "
              f"{b['idle']:.3f} s | {ratio} |")
    print()


def jobs(results: str, name: str) -> None:
    rows = table(results, name, "flow engine", ["routing", "ECMP seed", "iteration, mean of jobs", "steady state (p50)",
                                                "all-reduce", "/ alpha-beta", "jobs shifted, largest offset"])
    for c, s in rows:
        js = s["jobs"]
        ccts = [x["collectives"][0]["cct_s"] for x in js]
        ratios = [x["collectives"][0].get("cct_vs_predicted") or 0 for x in js]
        ann = s.get("announcements") or []
        shifted = sum(1 for a in ann if a["shifted"])
        seed = c.get("flow", {}).get("ecmp_seed", 0) if s["routing"] == "ecmp" else "-"
        print(f"| {s['routing']} | {seed} | {s['aggregate']['iteration_time_s_mean'] * 1e3:.2f} ms | "
              f"{max(x['iteration_time_s']['p50'] for x in js) * 1e3:.2f} ms | "
              f"{min(ccts) * 1e3:.2f} to {max(ccts) * 1e3:.2f} ms | {min(ratios):.2f} to {max(ratios):.2f} | "
              + (f"{shifted}, {max(a['offset_s_max'] for a in ann) * 1e3:.2f} ms |" if ann else "- |"))
    print()


def moe(results: str, name: str) -> None:
    rows = table(results, name, "flow engine", ["fabric", "algorithm", "all-to-all", "alpha-beta", "/ alpha-beta", "busbw"])
    for c, s in sorted(rows, key=lambda r: (fabric(r[0]), r[0]["jobs"][0]["workload"]["algorithm"])):
        x = s["jobs"][0]["collectives"][0]
        print(f"| {fabric(c)} | {x['algorithm']} | {x['cct_s'] * 1e3:.3f} ms | {x['predicted_cct_s'] * 1e3:.3f} ms | "
              f"{x['cct_vs_predicted']:.2f} | {x['busbw_gbps']:.1f} Gb/s |")
    print()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=os.path.join(ROOT, "results"))
    args = ap.parse_args(argv)
    gpt(args.results, "gpt3-175b-1024")
    gpt(args.results, "gpt3-175b-16384")
    jobs(args.results, "jobs-1024-policies")
    moe(args.results, "moe-a2a-1024")
    return 0


if __name__ == "__main__":
    sys.exit(main())
