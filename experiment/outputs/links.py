"""links.csv: per-link utilization over time.

An engine samples each directed link's byte counter and appends one row per
directed link and interval:

    t_s,link,src,dst,util,gbps

t_s is real-cluster seconds since the replay start at the end of the
interval; gbps is the interval's rate in real-cluster Gb/s (the emulated
rate divided by scale.link); util is gbps over the link's configured rate.
LinkSampler turns counters into rows; read_csv and summarize read them
back. The emulator's counters come from the switch ports
(emulator.run.linksampler).
"""
from __future__ import annotations

import csv

COLUMNS = ("t_s", "link", "src", "dst", "util", "gbps")
QUEUE_COLUMNS = ("queue_mean_bytes",)  # the packet engine's: mean backlog of the link's output queue


class LinkSampler:
    """Turns cumulative per-direction byte counters into links.csv rows.

    read_counters() -> {(src, dst): emulated bytes sent so far}; links maps
    (src, dst) -> (link name, configured real-cluster Gb/s). The clock and
    the output file are passed in, so tests drive both.
    """

    def __init__(self, out, read_counters, links: dict, *, scale_link: float, dilation: float, t0: float):
        self.out = out
        self.read = read_counters
        self.links = links
        self.scale_link, self.dilation, self.t0 = scale_link, dilation, t0
        self.writer = csv.writer(out, lineterminator="\n")
        self.writer.writerow(COLUMNS)
        self.prev: dict = {}
        self.prev_t: float | None = None

    def sample(self, now: float) -> list[tuple]:
        """Read the counters at `now`; rows for the interval since the last sample."""
        cur = self.read()
        rows = []
        if self.prev_t is not None and now > self.prev_t:
            dt = now - self.prev_t
            t_s = round((now - self.t0) / self.dilation, 6)
            for key, (name, cap_gbps) in self.links.items():
                a, b = self.prev.get(key), cur.get(key)
                if a is None or b is None or b < a:
                    continue  # no reading, or a counter reset: skip this interval
                gbps = (b - a) * 8 / dt / 1e9 / self.scale_link
                rows.append((t_s, name, key[0], key[1], round(gbps / cap_gbps, 6), round(gbps, 6)))
        self.writer.writerows(rows)
        self.out.flush()
        self.prev, self.prev_t = cur, now
        return rows

    def close(self) -> None:
        self.out.close()


def directed_links(fabric) -> dict:
    """(src, dst) -> (link name, link_gbps) for both directions of every link."""
    out = {}
    for a, b, d in fabric.links():
        out[a, b] = out[b, a] = (f"{a}-{b}", d["link_gbps"])
    return out


def read_csv(path: str) -> list[dict]:
    """links.csv rows with numbers as floats; raises ValueError on a bad header."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) not in (COLUMNS, COLUMNS + QUEUE_COLUMNS):
            raise ValueError(f"expected the columns {','.join(COLUMNS)}, found {reader.fieldnames}")
        return [{**r, "t_s": float(r["t_s"]), "util": float(r["util"]), "gbps": float(r["gbps"])} for r in reader]


def summarize(rows: list[dict], top: int = 10) -> list[dict]:
    """The busiest directed links that carried traffic: mean and peak utilization over the samples."""
    per: dict = {}
    for r in rows:
        per.setdefault((r["link"], r["src"], r["dst"]), []).append(r["util"])
    stats = [{"link": k[0], "src": k[1], "dst": k[2], "mean_util": sum(v) / len(v), "peak_util": max(v),
              "samples": len(v)} for k, v in per.items() if max(v) > 0]
    stats.sort(key=lambda s: (-s["mean_util"], s["src"], s["dst"]))
    return stats[:top]
