"""Bundles of the flow engine's Simulation: a collective instance as one entity, its connections
tied to one rate, and the incremental solve of the bundles that share links with one that changed.

A room of flowsim.engine.Simulation (a mixin over the simulation's arrays).
"""
from __future__ import annotations

import math

import numpy as np

from flowsim.routing import path_weights
from flowsim.rates import BYTE_TOL, fill_rates


class Bundles:
    """Collective instances as single entities (``collective_model="bundle"``; part of Simulation)."""

    def _start_bundles(self, inst: _Inst):
        """A collective's bundles that start with it (the others start when their `after` ends)."""
        if not inst.tmpl:
            return self._start_bundle(inst)
        inst.bundles_left = len(inst.tmpl)
        inst.waiting = [len(shape.after) for shape in inst.tmpl]
        for k in [k for k, w in enumerate(inst.waiting) if not w]:
            self._start_bundle(inst, k)

    def _start_bundle(self, inst: _Inst, part: int = 0):
        b = len(self.B_inst)
        inst.bundle = b
        steps, chunk = 1, float(inst.op.size_bytes)
        key = None  # bundles of one key have the same connections and weights, hence one column
        if inst.pairs is not None:  # a class's sends: every pair one connection, all of one size
            ck = (inst.job, "p2p", inst.members[0], inst.members[1], len(inst.pairs[0]), int(inst.pairs[0][0]))
            key = ck
            conns = self._conn_cache.get(ck)
            if conns is None:
                conns = self._conn_cache[ck] = self._conns(inst.job, *inst.pairs)
            nbytes = np.full(len(conns), float(inst.op.size_bytes))
        elif inst.groups is not None:  # a class collective: the shape in every group it covers
            shape, rows = (inst.tmpl[part] if inst.tmpl else None), inst.groups
            if shape is None:
                conns, nbytes = np.zeros(0, np.int64), np.zeros(0)
            else:
                ck = (inst.job, id(rows), id(shape))  # groups and shapes are cached objects
                key = ck
                hit = self._conn_cache.get(ck)
                if hit is None:
                    hit = self._conn_cache[ck] = (self._conns(inst.job, rows[:, shape.src].ravel(),
                                                              rows[:, shape.dst].ravel()), np.tile(shape.bytes, len(rows)))
                conns, nbytes = hit
                steps, chunk = shape.num_steps, shape.chunk_bytes
        else:
            shape = inst.tmpl[part]
            g = np.asarray(inst.group, np.int64)
            conns = self._conns(inst.job, g[shape.src], g[shape.dst])
            nbytes = shape.bytes
            steps, chunk = shape.num_steps, shape.chunk_bytes
        work = float(nbytes.max()) if len(nbytes) else 0.0
        self.B_inst.append(inst)
        self.B_key.append(key)
        self.B_conns.append(conns)
        self.B_w.append(nbytes / work if work else nbytes)
        if b >= len(self.B_work):  # grow by doubling: a run may start 10^5 bundles
            grow = max(1024, len(self.B_work))
            self.B_work = np.concatenate([self.B_work, np.zeros(grow)])
            self.B_done = np.concatenate([self.B_done, np.zeros(grow)])
            self.B_rate = np.concatenate([self.B_rate, np.zeros(grow)])
            self.B_cap = np.concatenate([self.B_cap, np.full(grow, np.inf)])
        self.B_work[b], self.B_done[b], self.B_rate[b], self.B_cap[b] = work, 0.0, 0.0, np.inf
        self.B_steps.append(steps)
        self.B_chunk.append(chunk)
        self.B_part.append(part)
        self.counters["bundles"] += 1
        self.dirty = True
        if work <= 0 or not len(conns):
            self._bundle_done(b)
        else:
            self.B_live.add(b)
            self._blive_v += 1
            self._changed.add(b)
            self._latency_cap(b)

    def _latency_cap(self, b: int):
        """A step cannot take less than the latency plus one slice (or chunk) at the bundle's
        uncontended rate: cap the tied rate so that the schedule's steps fit."""
        if (self.p.latency_s <= 0 and not self.p.has_link_latency) or not self.B_steps[b]:
            return
        self._route_missing(self.B_conns[b])
        cols = self._bundle_column(b)
        cap = self.net.capacity_Bps
        load = np.bincount(cols[0], weights=cols[1], minlength=self.net.n_links)
        used = load > 0
        x_alone = float((cap[used] / load[used]).min()) if used.any() else math.inf
        steps, chunk = self.B_steps[b], self.B_chunk[b]
        per_step = self._bundle_lat(b) + min(self.p.slice_bytes, chunk) / x_alone
        self.B_cap[b] = self.B_work[b] / (steps * per_step)
        wcap = self._window_caps(self.B_conns[b])
        if wcap is not None:  # the tied rate moves w bytes a unit on each connection
            w = np.maximum(self.B_w[b], 1e-300)
            self.B_cap[b] = min(self.B_cap[b], float((wcap / w).min()))

    def _bundle_lat(self, b: int) -> float:
        """A bundle's step latency: its slowest connection's (every step waits for all of them)."""
        if self.p.latency_s <= 0 and not self.p.has_link_latency:
            return 0.0
        self._route_missing(self.B_conns[b])
        conns = self.B_conns[b]
        lat = np.array([self.C_lat[c] for c in conns.tolist()])
        if self.p.store_forward is not None:  # a step's last packet, at most a chunk
            lat = lat + self._store_forward_s(conns, np.full(len(conns), float(self.B_chunk[b])))
        return float(lat.max()) if len(lat) else self.p.latency_s

    def _bundle_column(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        """(distinct links, bytes per unit of the bundle's rate on each), kept until a route changes."""
        col = self._cols.get(b)
        if col is not None and col[2] == self._path_version:
            return col[0], col[1]
        shared = self._cols.get(("key", self.B_key[b])) if self.B_key[b] is not None else None
        if shared is not None and shared[2] == self._path_version:
            self._cols[b] = shared
            return shared[0], shared[1]
        conns, w = self.B_conns[b], self.B_w[b]
        paths = [self.C_path[c] for c in conns]
        lens = np.array([len(p) for p in paths], np.int64)
        links = np.concatenate(paths) if paths else np.zeros(0, np.int64)
        u, inv = np.unique(links, return_inverse=True)
        per_entry = np.repeat(w, lens)
        if self.router.splits and len(links):  # a sprayed connection puts 1/k of its rate on each of k paths
            per_entry = per_entry * np.concatenate([path_weights(p) for p in paths])
        uw = np.bincount(inv, weights=per_entry, minlength=len(u))
        self._cols[b] = (u, uw, self._path_version)
        if self.B_key[b] is not None:
            self._cols[("key", self.B_key[b])] = self._cols[b]
        return u, uw

    def _bundle_done(self, b: int):
        if b in self.B_live:
            self.B_live.discard(b)
            self._blive_v += 1
            self._changed.add(b)
        self._done_cols.append(b)
        self.dirty = True
        self._flush()
        if len(self.C_bytes) < len(self.C_src):
            self.C_bytes = np.concatenate([self.C_bytes, np.zeros(len(self.C_src) - len(self.C_bytes))])
        np.add.at(self.C_bytes, self.B_conns[b], self.B_work[b] * self.B_w[b])
        self.B_rate[b] = 0
        lat = self._bundle_lat(b)
        if lat > 0 and self.B_work[b] > 0:
            self._push(self.now + lat, "bundle_end", b)  # the last bytes' delivery
        else:
            self._bundle_members_done(b)

    def _bundle_members_done(self, b: int):
        inst = self.B_inst[b]
        if inst.tmpl and inst.pairs is None:
            # A collective of several bundles: those this one's end starts, then the end of the last.
            inst.bundles_left -= 1
            part = self.B_part[b]
            for k, shape in enumerate(inst.tmpl):
                if part in shape.after:
                    inst.waiting[k] -= 1
                    if not inst.waiting[k]:
                        self._start_bundle(inst, k)
            if inst.bundles_left:
                return
        if inst.pairs is not None:
            fifo = self.p2p_fifo[inst.members[0] * self.n_ranks + inst.members[1]]
            fifo.pop(0)
            if fifo:
                self._start_bundle(fifo[0])
        inst.sends_left[:] = 0
        inst.recvs_left[:] = 0
        for local in range(len(inst.members)):
            self._maybe_member_done(inst, local)

    def _finish_bundles(self):
        if not self.B_live:
            return
        live = self._blive_arr()
        fin = live[self.B_work[live] - self.B_done[live] <= BYTE_TOL + 1e-12 * self.B_work[live]]
        for b in fin.tolist():
            self.B_done[b] = self.B_work[b]
            self._bundle_done(b)

    def _sync_slots(self, full: bool = False):
        """Columns of the live bundles in _on (link x live bundle: it crosses it), for the changed ones."""
        if full:
            todo = set(self._slot_of) | self.B_live
        else:
            todo = self._changed
        for b in todo:
            live = b in self.B_live
            slot = self._slot_of.get(b)
            cleared = slot is not None and (not live or full)
            if cleared:
                self._mark(b, slot, False)
                if not live:
                    del self._slot_of[b]
                    self._free_slots.append(slot)
                    continue
            if not live:
                continue
            if slot is None:
                if not self._free_slots:
                    n_slots = self._on.shape[1]
                    grow = max(16, n_slots)
                    self._free_slots = list(range(n_slots + grow - 1, n_slots - 1, -1))
                    self._on = np.concatenate([self._on, np.zeros((self.net.n_links, grow), bool)], axis=1)
                    self._slot_b = np.concatenate([self._slot_b, np.full(grow, -1, np.int64)])
                    self._slot_cols += [np.zeros(0, np.int64)] * grow
                slot = self._slot_of[b] = self._free_slots.pop()
            elif not cleared:
                self._mark(b, slot, False)
            self._slot_b[slot] = b
            self._route_missing(self.B_conns[b])
            self._slot_cols[slot] = self._bundle_column(b)[0]
            self._mark(b, slot, True)

    def _mark(self, b: int, slot: int, on: bool):
        """Bundle b's slot set (or cleared) on its links in _on, and in the per-link count of live
        bundles and sum of their ids (which name the one bundle of a link that has one)."""
        cols, step = self._slot_cols[slot], 1 if on else -1
        self._on[cols, slot] = on
        self._link_n[cols] += step  # cols are distinct links
        self._link_b[cols] += step * b

    def _alone(self, links: np.ndarray) -> np.ndarray | None:
        """The component of live bundles on links when no link has two: none, or one bundle that has
        every link of its own to itself; None when it takes the search over _on."""
        n = self._link_n[links]
        if not n.any():
            return np.zeros(0, np.int64)
        if n.max() > 1:
            return None
        owner = self._link_b[links][n > 0]
        b = int(owner[0])
        if (owner != b).any() or self._link_n[self._slot_cols[self._slot_of[b]]].max() > 1:
            return None
        return owner[:1]

    def _solve_bundles(self):
        """Only the bundles that share links, directly or through others, with one that changed are
        solved again: max-min fairness decomposes over such components, and the rest keep their
        rates (a tensor-parallel all-reduce on one server's NVLink is a component of its own)."""
        self.counters["solves"] += 1
        self.dirty = False
        changed = self._changed
        self._changed = set()
        if not changed:
            return
        self._drop_done_cols()
        for b in changed:
            if b in self.B_live:
                self._route_missing(self.B_conns[b])
        # The links of what changed: live bundles' columns, and ended ones' as their slots held them.
        seed = [self._bundle_column(b)[0] if b in self.B_live else self._slot_cols[self._slot_of[b]]
                for b in changed if b in self.B_live or b in self._slot_of]
        self._changed = changed
        self._sync_slots()
        self._changed = set()
        links = np.concatenate(seed) if seed else np.zeros(0, np.int64)
        if not self._on.shape[1]:
            self.link_load[links] = 0
            return
        comp = self._alone(links)  # most solves: a bundle alone on its links, or none left there
        if comp is None:
            seen = np.zeros(self._on.shape[1], bool)
            frontier = links
            while len(frontier):
                hit = self._on[frontier].any(axis=0) & ~seen  # rows of the links: contiguous, unlike columns
                if not hit.any():
                    break
                seen |= hit
                frontier = np.concatenate([self._bundle_column(int(b))[0] for b in self._slot_b[hit]])
            comp = self._slot_b[seen]
        self.counters["component_bundles"] += len(comp)
        self.link_load[links] = 0
        if not len(comp):
            return
        if len(comp) == 1:  # alone on its links: the tightest one sets its rate
            ul, w = self._bundle_column(int(comp[0]))
            r = min(float((self.net.capacity_Bps[ul] / np.maximum(w, 1e-300)).min()), float(self.B_cap[comp[0]]))
            self.counters["maxmin_rounds"] += 1
            self.B_rate[comp] = r
            self.link_load[ul] = w * (r if math.isfinite(r) else 0.0)
            return
        cols = [self._bundle_column(int(b)) for b in comp]
        lens = np.array([len(c[0]) for c in cols], np.int64)
        lk = np.concatenate([c[0] for c in cols])
        w = np.concatenate([c[1] for c in cols])
        ent = np.repeat(np.arange(len(comp)), lens)
        ul, inv = np.unique(lk, return_inverse=True)
        rate, rounds = fill_rates(ent, inv, w, self.net.capacity_Bps[ul], self.B_cap[comp])
        self.counters["maxmin_rounds"] += rounds
        self.B_rate[comp] = rate
        self.link_load[ul] = np.bincount(inv, weights=w * np.where(np.isfinite(rate), rate, 0.0)[ent],
                                         minlength=len(ul))

    def _drop_done_cols(self):
        """Columns of bundles that ended before the last solve are not needed any more."""
        keep = []
        for b in self._done_cols:
            if b in self._slot_of:
                keep.append(b)
            else:
                self._cols.pop(b, None)
        self._done_cols = keep

    def _blive_arr(self) -> np.ndarray:
        """The live bundles as an array, kept until the set changes."""
        if self._blive_n != self._blive_v:
            self._blive_a = np.fromiter(self.B_live, np.int64, len(self.B_live))
            self._blive_n = self._blive_v
        return self._blive_a
