"""``coschedule``: congestion-aware placement plus Host-Net co-scheduling of announced phases.

Jobs announce their next communication phase; the answer places the job's
flows on the paths that share the fewest links with other jobs, shifts its
start CASSINI-style so periodic phases interleave, and ranks jobs by GPU
intensity (Crux), realized as pacing (see ``controller.cosched``). The job's open
flows move onto the announced paths (the engine does it, ``FabricController.announce``)
and the flows it opens later get them.
"""
from __future__ import annotations

from controller.cosched import CoScheduler
from controller.params import Param
from controller.policies.congestion import FLOW_PARAMS, CongestionAware
from controller.policy import Announcement, Answer, Observation


class CoSchedule(CongestionAware):
    """Congestion-aware placement, plus answers to announced phases: paths shared with the
    fewest other jobs, a start offset that interleaves periodic phases, a priority by GPU
    intensity realized as pacing."""
    PARAMS = {
        **FLOW_PARAMS,
        "offset_steps": Param(50, ge=1, le=10000, doc="start offsets tried per announcement, over one period"),
        "low_share": Param(0.2, gt=0, le=1, doc="NIC share a lower-priority job paces to while it overlaps"),
    }
    coschedules = True

    def __init__(self, fabric, params=None):
        super().__init__(fabric, params)
        self.cosched = CoScheduler(fabric, offset_steps=self.params.offset_steps, low_share=self.params.low_share,
                                   max_paths=self.params.max_paths)

    def announce(self, now: float, ann: Announcement, obs: Observation) -> Answer:
        answer = self.cosched.announce(ann, now, obs)
        self.pinned = self.cosched.pins()
        return answer

    def state(self, now: float, obs: Observation) -> dict:
        return {"jobs": self.cosched.snapshot()}
