"""Co-scheduling in the flow model: the agents' phase gates and the launcher's relay.

What the emulator does across three processes happens here in one object, at the same
moments: a job's announcing rank, when its first communication op of an announced
iteration is ready, sends the announcement the plan made for it (the iteration's fabric
flows summed per host pair, compute and overlap, and the period it measured since its last
phase began) to the controller, whose answer reaches every rank of the job at once. Each
rank's communication of that iteration starts no earlier than the answer's start (its
offset after the answer); a rank that got there first waits. When the answer carries a pace,
every rank of the job sends at most ``pace_share`` of its NIC rate inside the window (the
agent's token bucket, over all its connections). A controller that is away gets no
announcement and the launcher answers "go now" (status fallback), as the relay does.

The round trip takes no time here (in the emulator it is a few wall-clock ms, divided by the
dilation). Bodies are in the model's units: real bytes and seconds, link_scale 1.
"""
from __future__ import annotations

import math




class PhaseGates:
    def __init__(self, announcements: dict, controller, on_event=None):
        """announcements: job index -> {iteration: (announcing rank, plan body)} (experiment.plan's
        announcement bodies); controller: an object with announce(body, now) -> (status, answer) or
        None when it is away; on_event(dict): the announce and offset events, as the agents write them."""
        self.plan = announcements
        self.controller = controller
        self.on_event = on_event or (lambda e: None)
        self.start: dict[tuple[int, int], float] = {}    # (job, iteration) -> the answer's start
        self.ready_at: dict[tuple[int, int, int], float] = {}
        self.opened: dict[tuple[int, int], dict[int, float]] = {}  # (job, rank) -> iteration -> phase began
        self.answers: dict[tuple[int, int], dict] = {}

    def gated(self, j: int, it: int) -> bool:
        return it in self.plan.get(j, {})

    def ready(self, sim, j: int, r: int, it: int) -> float | None:
        """When rank r's communication of iteration it may start: None (not gated), the answer's
        start, or inf (no answer yet: it waits for the announcer)."""
        if not self.gated(j, it):
            return None
        self.ready_at.setdefault((j, r, it), sim.now)
        if (j, it) not in self.start and self.plan[j][it][0] == r:
            self._announce(sim, j, it)
        return self.start.get((j, it), math.inf)

    def begun(self, sim, j: int, r: int, it: int) -> None:
        """Rank r's phase of iteration it began (its first communication op of it started)."""
        if not self.gated(j, it):
            return
        seen = self.opened.setdefault((j, r), {})
        if it in seen:
            return
        seen[it] = sim.now
        ans = self.answers.get((j, it), {})
        self.on_event({"kind": "offset", "job": sim.jobs[j].name, "rank": r, "iteration": it,
                       "start": self.ready_at.get((j, r, it), sim.now), "end": sim.now,
                       "delay_emulated_s": ans.get("delay_s", 0.0), "status": ans.get("status", "no answer"),
                       "pace_mbps": ans.get("pace_mbps")})

    def period_s(self, sim, j: int, r: int, it: int, planned: float) -> float:
        """The period the announcer measures: since the last phase it began, per iteration."""
        seen = self.opened.get((j, r), {})
        before = [k for k in seen if k < it]
        if not before:
            return planned
        k = max(before)
        return max(1e-9, (sim.now - seen[k]) / (it - k))

    def _announce(self, sim, j: int, it: int) -> None:
        r, body = self.plan[j][it]
        now = sim.now
        body = dict(body, period_s=self.period_s(sim, j, r, it, body["period_s"]))
        got = self.controller.announce(body, now) if self.controller is not None else None
        status, reason, delay, share, window, prio = "fallback", None, 0.0, None, (0.0, 0.0), None
        if got is None:
            reason = "unreachable: the controller is away"
        elif got[0] != 200:
            reason = f"HTTP {got[0]}: {got[1].get('error', '')}"
        else:
            ans = got[1]
            status, delay, prio = "answered", float(ans.get("start_offset_s") or 0.0), ans.get("priority")
            if ans.get("pace_share") and (ans.get("pace_until_s") or 0) > (ans.get("pace_from_s") or 0):
                share, window = float(ans["pace_share"]), (float(ans["pace_from_s"]), float(ans["pace_until_s"]))
        start = now + delay
        self.start[j, it] = start
        nic = [sim.net.host_nic_Bps(h) for h in sim.job_host[j].tolist()]
        self.answers[j, it] = {"delay_s": delay, "status": status,
                               "pace_mbps": share * min(nic) * 8 / 1e6 if share else None}
        # Each answer sets the job's pace, or lifts the last one.
        sim.set_pace(j, share, start + window[0], start + window[1])
        flows = body.get("flows")
        self.on_event({"kind": "announce", "job": sim.jobs[j].name, "rank": r, "iteration": it, "start": now,
                       "end": now, "status": status, "reason": reason, "offset_emulated_s": delay,
                       "offset_s": delay, "priority": prio, "pace_share": share, "pace_from_s": window[0],
                       "pace_until_s": window[1], "flows": len(flows) if isinstance(flows, list) else 0})
        sim.release(j, it, start)
