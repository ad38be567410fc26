"""The rate solver of the flow engine's Simulation: max-min rates of the queued sends and live
bundles, with the slice gates' fixed point, and the continuous time between events.

A room of flowsim.engine.Simulation (a mixin: it reads and writes the simulation's arrays), kept
apart so that the event loop and the solver read on their own.
"""
from __future__ import annotations

import math

import numpy as np

from flowsim.losses import peak_queue_bytes
from flowsim.network import LINK_KINDS
from flowsim.routing import path_weights

QUEUED, DONE, INFLIGHT = 1, 2, 3
NVLINK = LINK_KINDS.index("nvlink")
BYTE_TOL = 1e-3          # bytes: a transfer this close to its end is done


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    """np.allclose(a, b, rtol=1e-9, atol=1e-6), the same test without its per-call overhead
    (it ran once a fixed-point round, hundreds of thousands of times a run)."""
    with np.errstate(invalid="ignore"):
        return bool((((np.abs(a - b) <= 1e-6 + 1e-9 * np.abs(b)) & np.isfinite(b)) | (a == b)).all())


def fill_rates(ent: np.ndarray, link: np.ndarray, w: np.ndarray, cap_link: np.ndarray,
               cap_ent: np.ndarray) -> tuple[np.ndarray, int]:
    """Max-min rates by progressive filling over a problem given as triples (entity, local link,
    weight). Returns (rate per entity, rounds).

    As entities freeze, every link's fair share (what is left over the weight still rising) only
    grows, since each freezes at no more than the shares of its links. So a link whose share is no
    more than the share of any other link and the cap of any entity crossing it saturates at that
    share whatever the rest does, and an entity whose cap is below every share on its path ends at
    its cap: each round freezes all such local bottlenecks at once. The rates are
    flowsim.maxmin.max_min_rates' (one level a round; within 1e-9, since it rounds levels within
    1e-9 of the lowest down to it), in as many rounds as the longest chain of bottlenecks that wait
    on each other instead of one per distinct level."""
    k, n_l = len(cap_ent), len(cap_link)
    cap_ent = np.asarray(cap_ent, float)
    rate = np.zeros(k)
    live = np.ones(k, bool)
    rem = np.asarray(cap_link, float).copy()
    load = w > 0  # a zero weight puts nothing on its link
    ent, link, w = ent[load], link[load], w[load]
    tol = 1 + 1e-9
    rounds = 0
    while live.any():
        rounds += 1
        n = np.bincount(link, weights=w, minlength=n_l)
        used = n > 0
        share = np.full(n_l, np.inf)
        share[used] = np.maximum(rem[used], 0.0) / n[used]
        se = share[link]
        path_min = np.full(k, np.inf)  # lowest share on each entity's path
        np.minimum.at(path_min, ent, se)
        bound = np.minimum(path_min, cap_ent)
        link_min = np.full(n_l, np.inf)  # lowest bound of the entities crossing each link
        np.minimum.at(link_min, link, bound[ent])
        sat = used & (share <= link_min * tol)
        on_sat = sat[link]
        sat_min = np.full(k, np.inf)
        np.minimum.at(sat_min, ent[on_sat], se[on_sat])
        capped = live & (cap_ent <= path_min * tol)
        newly = live & (capped | np.isfinite(sat_min))
        r = np.minimum(np.minimum(sat_min, path_min), cap_ent)
        rate[newly] = r[newly]
        done = newly[ent]
        rem -= np.bincount(link[done], weights=w[done] * r[ent[done]], minlength=n_l)
        live &= ~newly
        ent, link, w = ent[~done], link[~done], w[~done]
    return rate, rounds


class RateSolver:
    """Rates of every queued transfer and live bundle (part of Simulation)."""

    skip_asleep = True  # False: every eligible queued send is awake (the reference tests compare with)

    def _solve(self):
        """Rates of every queued transfer and live bundle for the current state."""
        self._flush()
        if not self.queued and not self.pace and not self._had_queued:
            self._solve_bundles()
        else:
            self._solve_rates()
            self._had_queued = bool(self.queued)
            self._sync_slots(full=True)
        if self._cwnd is not None:  # every solve, so that the next window event is current
            self._cwnd.record(self.now, self.C_rate)
        if self._had_queued or self.queued:
            self._crate_nz = np.flatnonzero(self.C_rate)

    def _solve_rates(self):
        self.counters["solves"] += 1
        self.dirty = False
        if self._to_route:
            self._route_missing(np.concatenate(self._to_route))
            self._to_route = []
        self._wake()
        q = np.fromiter(self.awake, np.int64, len(self.awake)) if self.awake else np.zeros(0, np.int64)
        if len(q):
            q = q[np.lexsort((self.T_seq[q], self.T_conn[q]))]
        for b in self.B_live:
            self._route_missing(self.B_conns[b])
        warm = self.T_rate[q].copy()  # last solve's rates: the fixed point starts there
        old = self._q
        if len(old):  # only the last solve's queue can hold rates
            self.T_rate[old[self.T_state[old] == QUEUED]] = 0
            self.T_qpos[old] = -1
        self.T_qpos[q] = np.arange(len(q))
        self._q = q
        nc = len(self.C_src)
        if len(self.C_rate) < nc:
            self.C_rate = np.concatenate([self.C_rate, np.zeros(nc - len(self.C_rate))])
            self.C_bytes = np.concatenate([self.C_bytes, np.zeros(nc - len(self.C_bytes))])
        idle_before = self.C_rate == 0 if self.p.losses is not None else None  # bursts start on idle connections
        self.C_rate[:] = 0
        blive = np.array(sorted(self.B_live), np.int64)
        if not len(q) and not len(blive):
            self.link_load[:] = 0
            self._gate_info = None
            return
        conns, seg = np.unique(self.T_conn[q], return_inverse=True) if len(q) else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        # Gate structure of the queued sends (fixed during this solve: positions do not move).
        gi = self._gates(q)
        self._gate_info = gi
        free, track_of = gi["free"], gi["track"]
        # Incidence: connections, then bundles.
        lens_c, links_c = self._conn_paths(conns)
        if self.router.splits:
            wts_c = np.concatenate([path_weights(self.C_path[c]) for c in conns.tolist()] or [np.zeros(0)])
        else:
            wts_c = np.ones(len(links_c))
        bcols = [self._bundle_column(int(b)) for b in blive]
        lens = np.concatenate([lens_c, np.array([len(c[0]) for c in bcols], np.int64)])
        path_lens = lens.copy()
        capacity = self.net.capacity_Bps
        pace_rows, pace_cap = self._pacers(conns, blive)
        if pace_rows is None:
            links = np.concatenate([links_c] + [c[0] for c in bcols])
            wts = np.concatenate([wts_c] + [c[1] for c in bcols])
        else:  # each paced entity also crosses its sender's virtual link
            at = np.concatenate([[0], np.cumsum(lens_c)])
            cols_links = [links_c[at[k]:at[k + 1]] for k in range(len(conns))] + [c[0] for c in bcols]
            cols_w = [wts_c[at[k]:at[k + 1]] for k in range(len(conns))] + [c[1] for c in bcols]
            for k in range(len(cols_links)):
                extra = pace_rows[k]
                if len(extra[0]):
                    cols_links[k] = np.concatenate([cols_links[k], extra[0]])
                    cols_w[k] = np.concatenate([cols_w[k], extra[1]])
                    lens[k] += len(extra[0])
            capacity = np.concatenate([capacity, pace_cap])
            links = np.concatenate(cols_links) if cols_links else np.zeros(0, np.int64)
            wts = np.concatenate(cols_w) if cols_w else np.zeros(0)
        indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        n_ent = len(conns) + len(blive)
        ent_of = np.repeat(np.arange(n_ent), np.diff(indptr))  # the same incidence as triples
        # The links in use, numbered from 0: a round then costs what they are, not the fabric.
        used_links, links_local = np.unique(links, return_inverse=True)
        cap_local = capacity[used_links]
        unrouted = path_lens[:len(conns)] == 0
        has_free = np.zeros(len(conns), bool)
        if len(q):
            np.logical_or.at(has_free, seg, free)
        ent_cap = np.concatenate([np.full(len(conns), np.inf), self.B_cap[blive]])
        wcap = self._window_caps(conns) if self._cwnd is None else self._cwnd.caps(
            self.now, conns, self.C_bytes[conns], self._path_info)
        rates_q = warm
        prev = None
        for it in range(self.p.max_fixed_point_iters):
            self.counters["fixed_point_iters"] += 1
            track = track_of(rates_q)
            demand = np.full(len(conns), np.inf)
            if len(q):
                sums = np.bincount(seg, weights=np.where(free, 0.0, track), minlength=len(conns))
                demand = np.where(has_free, np.inf, sums)
            ent_cap[:len(conns)] = demand if wcap is None else np.minimum(demand, wcap)
            want = ent_cap > 0
            want[:len(conns)] &= ~unrouted
            r = np.zeros(n_ent)
            if want.any():
                keep = want[ent_of]
                local = np.cumsum(want) - 1
                rr, rounds = fill_rates(local[ent_of[keep]], links_local[keep], wts[keep], cap_local, ent_cap[want])
                self.counters["maxmin_rounds"] += rounds
                r[want] = rr
            rc = r[:len(conns)]
            rates_q = self._distribute(q, seg, rc, free, track) if len(q) else rates_q
            if not gi["held"].any():  # no demand follows a rate: the next round would repeat this one
                break
            if prev is not None and _close(rates_q, prev):
                break
            prev = rates_q
        else:
            self.counters["fixed_point_unconverged"] += 1
        self.T_rate[q] = rates_q
        self.C_rate[conns] = rc if len(conns) else 0
        self.B_rate[blive] = r[len(conns):]
        rf = np.where(np.isfinite(r), r, 0.0)
        self.link_load = np.bincount(links, weights=wts * rf[ent_of], minlength=len(capacity))[:self.net.n_links]
        if idle_before is not None and len(q):
            self._burst_losses(q, free, idle_before)

    def _burst_losses(self, q: np.ndarray, free: np.ndarray, idle_before: np.ndarray):
        """flow.losses (flowsim.losses): the transfers that start sending now on an idle connection,
        free of any gate, form bursts at the links they share; a burst that overflows a port with too
        small a share each is delivered rto_s late. Each transfer is looked at once."""
        lm = self.p.losses
        new = (self.T_sent[q] <= 0) & (self.T_rate[q] > 0) & ~self.T_lchk[q]
        self.T_lchk[q[new]] = True
        new &= free & idle_before[self.T_conn[q]]
        if not new.any():
            return
        conns, first = np.unique(self.T_conn[q[new]], return_index=True)  # a connection's first send only
        tids = q[new][first]
        cap = self.net.capacity_Bps
        lens, links = self._conn_paths(conns)
        if not lens.any():
            return
        owner = np.repeat(np.arange(len(conns)), lens)
        nic = self._first_links(conns)
        # Each sender's share of its NIC among the connections it has sending now, never above its path.
        a_nic = self._first_links(np.flatnonzero(self.C_rate > 0))
        on_nic = np.bincount(a_nic[a_nic >= 0], minlength=len(cap))
        slowest = np.full(len(conns), np.inf)
        np.minimum.at(slowest, owner, cap[links])
        send = np.where(nic >= 0, np.minimum(cap[nic] / np.maximum(on_nic[nic], 1), slowest), 0.0)
        window = lm.first_window_wire_bytes(self.T_size[tids])
        rtt = 2.0 * np.array([self.C_lat[c] for c in conns.tolist()])
        # (connection, link) pairs past the sender's NIC, NVLink left out (it does not drop); a
        # spraying router's share of each path link (its weight) carries that share of the burst.
        wt = (np.concatenate([path_weights(self.C_path[c]) for c, n in zip(conns.tolist(), lens.tolist()) if n])
              if self.router.splits else np.ones(len(links)))
        later = (links != nic[owner]) & (self.net.link_kind[links] != NVLINK)
        key, share = np.unique(owner[later] * len(cap) + links[later], return_inverse=True)
        share = np.bincount(share, weights=wt[later], minlength=len(key))
        if not len(key):
            return
        pk, pl = key // len(cap), key % len(cap)   # sorted by connection, then link
        order = np.argsort(pl, kind="stable")
        pk, pl, share = pk[order], pl[order], share[order]
        bounds = np.flatnonzero(np.r_[True, pl[1:] != pl[:-1], True])
        at = pl[bounds[:-1]]
        arriving = np.add.reduceat(send[pk] * share, bounds[:-1])
        mine = np.add.reduceat(self.C_rate[conns][pk] * share, bounds[:-1])
        drains = np.maximum(0.0, cap[at] - (self.link_load[at] - mine))  # less what other flows use
        for g in np.flatnonzero(arriving > drains).tolist():
            ks, w = pk[bounds[g]:bounds[g + 1]], share[bounds[g]:bounds[g + 1]]
            link = int(at[g])
            if peak_queue_bytes(window[ks] * w, send[ks] * w, drains[g]) <= lm.buffer_bytes:
                continue
            self.counters["overflows"] += 1
            if lm.times_out(len(ks), cap[link] * float(rtt[ks].min())):
                fresh = ks[self.T_penalty[tids[ks]] < lm.rto_s]
                self.T_penalty[tids[fresh]] = lm.rto_s
                self.counters["timeouts"] += len(fresh)

    def _flat(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(start, end, links): connection c's path is links[start[c]:end[c]], empty where it has
        none. Routes added are appended (_flat_add); made again only when a route moves."""
        n = len(self.C_path)
        if self.__dict__.get("_fp_version") != self._path_version:
            lens = np.fromiter((0 if p is None else len(p) for p in self.C_path), np.int64, n)
            links = np.concatenate([p for p in self.C_path if p is not None] or [np.zeros(0, np.int64)])
            self._fp_end = np.cumsum(lens)
            self._fp_start = self._fp_end - lens
            self._FP, self.n_FP = links.astype(np.int64), len(links)
            self._fp_version = self._path_version
        elif len(self._fp_start) < n:  # connections opened since, not routed yet
            pad = np.zeros(n - len(self._fp_start), np.int64)
            self._fp_start, self._fp_end = np.concatenate([self._fp_start, pad]), np.concatenate([self._fp_end, pad])
        return self._fp_start, self._fp_end, self._FP[:self.n_FP]

    def _flat_add(self, conns: np.ndarray, indptr: np.ndarray, links: np.ndarray):
        """Connections routed just now (conns[k] on links[indptr[k]:indptr[k + 1]]): appended to
        the flat copy, so that opening connections one step at a time costs what they add."""
        if self.__dict__.get("_fp_version") != self._path_version:
            return  # the next _flat makes it afresh
        self._flat()  # room for connections opened since
        u = self._append("_FP", "n_FP", links)
        self._fp_start[conns], self._fp_end[conns] = u + indptr[:-1], u + indptr[1:]

    def _conn_paths(self, conns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(path length of each connection, their links one after another)."""
        start, end, links = self._flat()
        return end[conns] - start[conns], self._ranges(start, end, links, conns)[1]

    def _first_links(self, conns: np.ndarray) -> np.ndarray:
        """Each connection's first link (its sender's NIC), -1 where it has no path."""
        start, end, links = self._flat()
        first, nic = start[conns], np.full(len(conns), -1)
        has = end[conns] > first
        nic[has] = links[first[has]]
        return nic

    def _store_forward_s(self, conns: np.ndarray, size_bytes: np.ndarray) -> np.ndarray:
        """Store-and-forward delay of each transfer (Params.store_forward): its last packet,
        min(size, mss) + headers, serialized again at every link of its path after the first."""
        mss, header = self.p.store_forward
        conns = np.asarray(conns, np.int64)
        per, version = self.__dict__.get("_sf_per_byte", (np.zeros(0), None))  # per connection, NaN: not yet
        if version != self._path_version:  # paths moved (reroutes, faults): compute afresh
            per = np.zeros(0)
        if len(per) < len(self.C_src):
            per = np.concatenate([per, np.full(len(self.C_src) - len(per), np.nan)])
        for c in conns[np.isnan(per[conns])].tolist():
            if self.C_path[c] is not None:
                per[c] = self.net.store_forward_s_per_byte(self.C_path[c])
        self._sf_per_byte = (per, self._path_version)
        return np.nan_to_num(per[conns]) * (np.minimum(np.asarray(size_bytes, float), mss) + header)

    def _window_caps(self, conns: np.ndarray) -> np.ndarray | None:
        """Each connection's window limit, window_bytes / RTT (RTT: twice its delivery latency;
        none at zero latency), or None when no window is modelled."""
        if self.p.window_bytes is None or not len(conns):
            return None
        rtt = 2.0 * np.array([self.C_lat[c] for c in conns.tolist()])
        with np.errstate(divide="ignore"):
            return np.where(rtt > 0, self.p.window_bytes / rtt, np.inf)

    def _path_info(self, c: int) -> tuple[float, float]:
        """(RTT s, bottleneck B/s) of connection c for its window: twice its delivery latency plus
        a full segment's store and forward, and the rate its path allows alone."""
        path = self.C_path[c]
        rtt = 2.0 * self.C_lat[c]
        if self.p.store_forward is not None and rtt > 0:
            rtt += float(self._store_forward_s(np.array([c]), np.array([self.p.store_forward[0]]))[0])
        if path is None or not len(path):
            return rtt, math.inf
        w = path_weights(path) if self.router.splits else np.ones(len(path))
        return rtt, float((self.net.capacity_Bps[path] / w).min())

    def _pacers(self, conns: np.ndarray, blive: np.ndarray):
        """Rows of the paced senders (one virtual link per paced rank, at share x its NIC rate) that
        each entity crosses, as (row ids, weights) per entity, and their capacities; (None, None)
        when no pace is on now."""
        on = {j: share for j, (share, t0, t1) in self.pace.items() if t0 <= self.now < t1}
        if not on:
            return None, None
        row_of: dict[int, int] = {}
        caps = []
        for j, share in on.items():
            for h in self.job_host[j].tolist():
                if h not in row_of:
                    row_of[h] = self.net.n_links + len(caps)
                    caps.append(share * self.net.host_nic_Bps(h))
        rows = []
        for c in conns.tolist():
            row = row_of.get(self.C_src[c]) if self.C_job[c] in on else None
            rows.append((np.array([row] if row is not None else [], np.int64), np.ones(1 if row is not None else 0)))
        for b in blive.tolist():
            members = self.B_conns[b]
            src = [row_of.get(self.C_src[c]) if self.C_job[c] in on else None for c in members.tolist()]
            keep = np.array([x is not None for x in src], bool)
            if not keep.any():
                rows.append((np.zeros(0, np.int64), np.zeros(0)))
                continue
            ids = np.array([x for x in src if x is not None], np.int64)
            uniq, inv = np.unique(ids, return_inverse=True)
            rows.append((uniq, np.bincount(inv, weights=self.B_w[b][keep], minlength=len(uniq))))
        return rows, np.array(caps)

    def _gates(self, q: np.ndarray) -> dict:
        """For each queued send: free (may send at any rate now) or held at its gate, the
        rate at which its gate opens, and data for the catch-up and gate-switch events."""
        n = len(q)
        owner, g = self._ranges(self.T_gs, self.T_ge, self.G, q)
        live = self.T_state[g] != DONE
        owner, g = owner[live], g[live]
        size_x = self.T_size[q]
        lag = np.minimum(self.p.slice_bytes, size_x)
        a = self._lat_of(g)
        size_g = np.maximum(self.T_size[g], 1e-300)

        def gate_rate(rates_q):
            """Delivered-progress rate of each live gate entry."""
            r = np.where(self.T_state[g] == INFLIGHT, self.T_last[g], 0.0)
            pos = self._pos_of(g)
            inq = pos >= 0
            r[inq] = rates_q[pos[inq]]
            return r

        # Bytes of each gate delivered by now, linear in time until the next event: a queued
        # gate's sent less what its rate keeps in flight; an in-flight one's last bytes land at
        # its rate until its deliver event (T_end), so its progress moves as gate_rate says.
        # Below 0: nothing has landed yet.
        inflight = self.T_state[g] == INFLIGHT
        r_g0 = gate_rate(np.maximum(self.T_rate[q], 0))
        lin = self.T_sent[g] - a * r_g0
        lin[inflight] = self.T_size[g][inflight] - r_g0[inflight] * (self.T_end[g][inflight] - self.now)
        frac_lin = lin / size_g
        frac = np.maximum(frac_lin, 0.0)
        minfrac = np.ones(n)
        if len(owner):
            np.minimum.at(minfrac, owner, frac)
        F = size_x * np.minimum(minfrac, 1.0)
        gated = np.zeros(n, bool)
        gated[owner] = True
        sent = self.T_sent[q]
        allowance = F - lag - sent
        tol = BYTE_TOL + 1e-9 * size_x
        # free: ahead of its gates by more than a slice; held: exactly one slice behind them,
        # so it sends at the rate they open; blocked: not a slice of room yet.
        blocked = gated & (allowance < -tol)
        held = gated & ~blocked & (allowance <= tol)
        free = ~(held | blocked)
        binding = held[owner] & (frac <= minfrac[owner] + 1e-12)

        def track(rates_q):
            if not held.any():
                return np.zeros(n)
            rg = gate_rate(rates_q)
            d = np.full(n, np.inf)
            np.minimum.at(d, owner[binding], rg[binding] / size_g[binding])
            out = np.where(held, size_x * np.where(np.isfinite(d), d, 0.0), 0.0)
            return out

        return {"free": free, "track": track, "owner": owner, "g": g, "frac": frac, "frac_lin": frac_lin,
                "minfrac": minfrac,
                "held": held, "blocked": blocked, "binding": binding, "size_x": size_x, "lag": lag,
                "size_g": size_g, "gate_rate": gate_rate}

    def _pos_of(self, tids: np.ndarray) -> np.ndarray:
        """Position of each transfer in the current solve's queue, or -1."""
        return self.T_qpos[tids]

    # ---- awake sends ---------------------------------------------------------------------
    # A solve looks only at the awake sends. A queued, eligible send that has sent nothing and
    # follows a gate that has sent nothing and cannot send now (not eligible, or itself behind a
    # gate that has sent nothing) is blocked with no slice of room, gets rate zero, gives its
    # connection no demand and has no event of its own: leaving it out changes no rate and no
    # event time. Awakeness only grows while a send is queued (bytes sent never go back), so it
    # is checked again only when what it depends on changes: the send or a gate turning
    # eligible, a gate or a gate's gate starting to send.
    def _ranges(self, ptr_s: np.ndarray, ptr_e: np.ndarray, arr: np.ndarray, ids: np.ndarray):
        """(owner position, entry) of the CSR slices [ptr_s[id], ptr_e[id]) of arr, for many ids."""
        lens = ptr_e[ids] - ptr_s[ids]
        total = int(lens.sum())
        if not total:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        owner = np.repeat(np.arange(len(ids)), lens)
        idx = np.repeat(ptr_s[ids] - (np.cumsum(lens) - lens), lens) + np.arange(total)
        return owner, arr[idx]

    def _eligible(self, tids: np.ndarray):
        """Queued sends with nothing earlier to wait for: they, and what follows them, may wake."""
        self._to_route.append(self.T_conn[tids])
        self._wake_pending.append(tids)
        self._wake_pending.append(self._ranges(self.T_fs, self.T_fe, self.F, tids)[1])
        self.dirty = True

    def _started(self, tids: np.ndarray):
        """Transfers that started sending (or finished): their followers, and those followers',
        may wake."""
        fol = self._ranges(self.T_fs, self.T_fe, self.F, tids)[1]
        if len(fol):
            self._wake_pending.append(fol)
            self._wake_pending.append(self._ranges(self.T_fs, self.T_fe, self.F, fol)[1])

    def _wake(self):
        """Add the pending sends that are awake now to self.awake."""
        if not self._wake_pending:
            return
        xs = np.unique(np.concatenate(self._wake_pending))
        self._wake_pending = []
        xs = xs[(self.T_state[xs] == QUEUED) & (self.T_earlier[xs] == 0) & ~self.T_awake[xs]]
        if not len(xs):
            return
        st, sent = self.T_state, self.T_sent
        tiny_all = self.p.slice_bytes < 1.0
        owner, g = self._ranges(self.T_gs, self.T_ge, self.G, xs)
        # A gate that has sent something (or finished) lets its follower wake.
        cold = (st[g] != DONE) & (sent[g] <= 0) & (st[g] != INFLIGHT)
        gc = g[cold]
        # A cold gate that may send now: eligible, and each of its own live gates has sent something.
        o2, h = self._ranges(self.T_gs, self.T_ge, self.G, gc)
        h_cold = (st[h] != DONE) & (sent[h] <= 0) & (st[h] != INFLIGHT)
        behind = np.zeros(len(gc), bool)
        behind[o2[h_cold]] = True
        can = (st[gc] == QUEUED) & (self.T_earlier[gc] == 0) & (~behind | (self.T_size[gc] < 1.0) | tiny_all)
        asleep = np.zeros(len(xs), bool)
        asleep[owner[cold][~can]] = True
        wake = xs[~asleep | (sent[xs] > 0) | (self.T_size[xs] < 1.0) | tiny_all | (not self.skip_asleep)]
        self.T_awake[wake] = True
        self.awake.update(wake.tolist())

    @staticmethod
    def _distribute(q, seg, rc, free, track) -> np.ndarray:
        """A connection's rate over its queue: held sends take what their gates allow, in
        order, and the first free send takes the rest; sends behind it get nothing."""
        first = np.concatenate([[True], seg[1:] != seg[:-1]])
        starts = np.flatnonzero(first)
        seg_start = np.repeat(starts, np.diff(np.concatenate([starts, [len(q)]])))
        fc = np.cumsum(free)
        free_before = fc - free - (fc[seg_start] - free[seg_start])
        reach = free_before == 0
        trk = np.where(free, 0.0, track) * reach
        tc = np.cumsum(trk)
        before = tc - trk - (tc[seg_start] - trk[seg_start])
        left = np.maximum(rc[seg] - before, 0.0)
        out = np.where(free, left, np.minimum(left, track))
        return np.where(reach, out, 0.0)

    def _next_continuous(self) -> float:
        """Time until the next transfer or bundle end, or a held/free send changing state."""
        t = math.inf
        q = self._q
        if len(q):
            r = self.T_rate[q]
            pos = r > 0
            if pos.any():
                t = min(t, float(((self.T_size[q][pos] - self.T_sent[q][pos]) / r[pos]).min()))
            gi = self._gate_info
            if gi is not None and len(gi["owner"]):
                t = min(t, self._gate_events(q, gi))
        if self.B_live:
            b = self._blive_arr()
            r = self.B_rate[b]
            pos = r > 0
            if pos.any():
                t = min(t, float(((self.B_work[b][pos] - self.B_done[b][pos]) / r[pos]).min()))
        if self._cwnd is not None:
            t = min(t, self._cwnd.next_s - self.now)
        return self.now + max(t, 0.0)

    def _gate_events(self, q, gi) -> float:
        owner, frac, size_x, lag = gi["owner"], gi["frac"], gi["size_x"], gi["lag"]
        rq = self.T_rate[q]
        rg = gi["gate_rate"](rq)
        dfrac = rg / gi["size_g"]
        sent = self.T_sent[q]
        t = math.inf
        free = gi["free"]
        # A free send catching up with one of its gates: sent + r t = size_x (frac + dfrac t) - lag.
        fo = free[owner]
        if fo.any():
            o = owner[fo]
            gap = size_x[o] * frac[fo] - lag[o] - sent[o]
            speed = rq[o] - size_x[o] * dfrac[fo]
            ok = (speed > 0) & (gap > 0)
            if ok.any():
                t = min(t, float((gap[ok] / speed[ok]).min()))
        # A held send whose binding gate is overtaken by a slower one.
        ho = gi["held"][owner] & ~gi["binding"]
        if ho.any():
            o = owner[ho]
            dmin = np.full(len(q), np.inf)
            b = gi["binding"]
            np.minimum.at(dmin, owner[b], dfrac[b])
            closing = dmin[o] - dfrac[ho]
            gap = frac[ho] - gi["minfrac"][o]
            ok = (closing > 0) & (gap > 0) & np.isfinite(closing)
            if ok.any():
                t = min(t, float((gap[ok] / closing[ok]).min()))
        # A blocked send gets a slice of room once every gate has streamed in its share.
        bo = gi["blocked"][owner]
        if bo.any():
            o = owner[bo]
            # from the linear progress: a gate that has delivered nothing yet opens it no sooner
            need = (sent[o] + lag[o]) / size_x[o] - gi["frac_lin"][bo]
            with np.errstate(divide="ignore", invalid="ignore"):
                te = np.where(need <= 0, 0.0, np.where(dfrac[bo] > 0, need / dfrac[bo], np.inf))
            opens = np.zeros(len(q))
            np.maximum.at(opens, o, te)
            blocked_ids = np.flatnonzero(gi["blocked"])
            if len(blocked_ids):
                t = min(t, float(opens[blocked_ids].min()))
        return t

    def _advance(self, dt: float):
        if dt <= 0:
            return
        q = self._q
        if len(q):
            first = q[(self.T_sent[q] <= 0) & (self.T_rate[q] > 0)]
            if self.p.record_transfers:
                self.T_first[first] = self.now
            self.T_sent[q] = np.minimum(self.T_sent[q] + self.T_rate[q] * dt, self.T_size[q])
            if len(first):
                self._started(first)
        if self.B_live:
            b = self._blive_arr()
            self.B_done[b] = np.minimum(self.B_done[b] + self.B_rate[b] * dt, self.B_work[b])
