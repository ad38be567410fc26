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


def _distinct(values):
    """np.unique(values, return_inverse=True), in one pass when the values are already in order
    (an engine's sample times are)."""
    import numpy as np

    if len(values) > 1 and bool((values[1:] >= values[:-1]).all()):
        new = np.empty(len(values), bool)
        new[0] = True
        np.not_equal(values[1:], values[:-1], out=new[1:])
        return values[new], np.cumsum(new) - 1
    return np.unique(values, return_inverse=True)


def _rounded(values, ndigits: int, uniq=None, inv=None):
    """round(v, ndigits) of each value, in bulk: (the rounded floats, the distinct ones' repr, the
    index of each value's among them). Python's round and repr run once per distinct value, since
    numpy's round can differ in the last bit and links.csv holds Python's text. uniq and inv: the
    distinct values and each value's index among them, when the caller has them."""
    import numpy as np

    if uniq is None:
        uniq, inv = np.unique(values, return_inverse=True)
    r = [round(float(v), ndigits) for v in uniq.tolist()]
    return np.array(r, dtype=float)[inv], np.array([repr(v) for v in r], dtype=object), inv


def _ratios(gbps, gbps_at, link, link_gbps):
    """The distinct values of gbps / link_gbps[link] and each row's index among them, from gbps's
    own distinct values (uniq[gbps_at] == gbps) and the few distinct link rates: no second sort."""
    import numpy as np

    caps, cap_at = np.unique(np.asarray(link_gbps, dtype=float), return_inverse=True)
    key = gbps_at * len(caps) + cap_at.ravel()[link]
    seen = np.zeros(len(gbps) * len(caps), bool)
    seen[key] = True
    keys = np.flatnonzero(seen)
    index = np.cumsum(seen) - 1
    return gbps[keys // len(caps)] / caps[keys % len(caps)], index[key]


class LinkSeries:
    """links.csv held as arrays, for an engine that has every interval at the end: one row per
    (interval, directed link) in file order. write_csv formats it in bulk and grid() hands the
    heatmap the same numbers without parsing the file back.

    names: (link name, src, dst) per directed link; t_s, link (index into names), and the row's
    unrounded gbps and util, as the engine computed them; or, in place of util, link_gbps (the
    rate of each directed link): util is then gbps / link_gbps[link]."""

    def __init__(self, names: list[tuple[str, str, str]], t_s, link, util, gbps, link_gbps=None):
        import numpy as np

        self.names = names
        self.t_s, self.link = np.asarray(t_s, dtype=float), np.asarray(link, dtype=np.int64)
        self._times = None  # (distinct times, each row's index among them), made once
        uniq, inv = np.unique(np.asarray(gbps, dtype=float), return_inverse=True)
        self.gbps, self._gbps_text, self._gbps_at = _rounded(None, 6, uniq, inv)
        if link_gbps is None:
            self.util, self._util_text, self._util_at = _rounded(np.asarray(util, dtype=float), 6)
        else:
            self.util, self._util_text, self._util_at = _rounded(None, 6, *_ratios(uniq, inv, self.link, link_gbps))

    def times(self):
        if self._times is None:
            self._times = _distinct(self.t_s)
        return self._times

    def __len__(self) -> int:
        return len(self.t_s)

    def head(self, n: int) -> "LinkSeries":
        """The first n rows (links.csv cut at a row limit)."""
        out = object.__new__(LinkSeries)
        out.names, out.t_s, out.link, out._times = self.names, self.t_s[:n], self.link[:n], None
        out.util, out._util_text, out._util_at = self.util[:n], self._util_text, self._util_at[:n]
        out.gbps, out._gbps_text, out._gbps_at = self.gbps[:n], self._gbps_text, self._gbps_at[:n]
        return out

    def write_csv(self, f) -> None:
        """The rows as LinkSampler and read_csv spell them (floats in repr), header first."""
        import numpy as np

        f.write(",".join(COLUMNS) + "\n")
        if not len(self):
            return
        times, t_at = self.times()
        # Four pieces a row, each spelled once per distinct value and joined once: no string per row.
        pieces = np.empty((len(self), 4), dtype=object)
        pieces[:, 0] = np.array([repr(float(t)) + "," for t in times.tolist()], dtype=object)[t_at]
        pieces[:, 1] = np.array([f"{n},{a},{b}," for n, a, b in self.names], dtype=object)[self.link]
        pieces[:, 2] = (self._util_text + ",")[self._util_at]
        pieces[:, 3] = (self._gbps_text + "\n")[self._gbps_at]
        f.write("".join(pieces.ravel().tolist()))

    def grid(self) -> "LinkGrid":
        import numpy as np

        keys_idx, first = np.unique(self.link, return_index=True)
        order = np.argsort(first, kind="stable")  # links in the order of their first row, as from_rows
        keys_idx = keys_idx[order]
        times, col = self.times()
        row_of = np.empty(len(self.names), dtype=np.int64)
        row_of[keys_idx] = np.arange(len(keys_idx))
        util = np.full((len(keys_idx), len(times)), np.nan)
        util[row_of[self.link], col] = self.util  # a repeated (link, time) keeps its last row, as from_rows
        return LinkGrid(times.tolist(), [self.names[i][1:] for i in keys_idx.tolist()], util)


class LinkGrid:
    """links.csv's utilization as the heatmap reads it: times (sorted), keys ((src, dst), in the
    order of their first row) and util[key, time] (NaN where a link has no row)."""

    def __init__(self, times: list[float], keys: list[tuple[str, str]], util):
        self.times, self.keys, self.util = times, keys, util

    @classmethod
    def from_rows(cls, rows: list[dict]) -> "LinkGrid":
        import numpy as np

        per: dict[tuple, dict[float, float]] = {}
        for r in rows:
            per.setdefault((r["src"], r["dst"]), {})[r["t_s"]] = r["util"]
        times = sorted({t for v in per.values() for t in v})
        at = {t: i for i, t in enumerate(times)}
        util = np.full((len(per), len(times)), np.nan)
        for i, v in enumerate(per.values()):
            util[i, [at[t] for t in v]] = list(v.values())
        return cls(times, list(per), util)
