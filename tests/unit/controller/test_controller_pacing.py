"""Priority realized as host pacing: a lower-priority job that cannot be
shifted clear of a higher-priority job's phase is told to pace, for as long
as the overlap lasts; everyone else runs unpaced."""
import json

import pytest

from controller.core import FabricController
from controller.cosched import periodic_starts
from topologies import fat_tree, single_switch

GBPS = 1e9 / 8


def announce(ctl, job, src, seconds, now=0.0, period_s=1.0, compute_s=0.1):
    body = {"version": 1, "job": job, "collective": "all_reduce", "period_s": period_s, "compute_s": compute_s,
            "flows": [{"src": src, "dst": "h3", "size_bytes": int(seconds * 400 * GBPS)}]}
    code, ans = ctl.announce(json.dumps(body).encode(), now)
    assert code == 200, ans
    return ans


def test_periodic_starts_lists_every_phase_in_the_window():
    assert periodic_starts(0.25, 1.0, -1.0, 2.5) == pytest.approx([-0.75, 0.25, 1.25, 2.25])
    assert periodic_starts(10.0, 1.0, 0.0, 0.5) == pytest.approx([])
    assert periodic_starts(0.0, 1.0, 0.0, 1.0) == []  # both ends open


def test_lower_priority_job_that_must_overlap_is_paced_for_the_overlap():
    ctl = FabricController(single_switch(4), "coschedule")  # one link into h3
    heavy = announce(ctl, "heavy", "h0", 0.7, compute_s=0.8)  # I = 0.8 / 0.7
    light = announce(ctl, "light", "h1", 0.7, compute_s=0.1)  # I = 0.1 / 0.7
    assert heavy["pace_share"] is None and heavy["priority"] == 0
    assert light["priority"] == 1 and light["pace_share"] == pytest.approx(0.2)
    # 0.7 + 0.7 > the 1.0 s period: some overlap is left whatever the offset
    # (the cheapest is a 0.3 s shift), and the pace covers just the overlap
    # with heavy's phases at 0 and 1.0 s.
    start = light["start_offset_s"]
    assert start == pytest.approx(0.3, abs=0.03)
    overlaps = [(max(s, start), min(s + 0.7, start + 0.7)) for s in (0.0, 1.0)]
    lo = min(a for a, b in overlaps if b > a) - start
    hi = max(b for a, b in overlaps if b > a) - start
    assert (light["pace_from_s"], light["pace_until_s"]) == pytest.approx((lo, hi), abs=1e-6)


@pytest.mark.parametrize("first,second", [
    (("a", "h0", 0.7, 0.3), ("b", "h1", 0.7, 0.3)),  # equal intensity: they share the link
    (("a", "h0", 0.4, 0.8), ("b", "h1", 0.4, 0.1)),  # lower intensity, but shifted clear of a
    (("light", "h1", 0.7, 0.1), ("heavy", "h0", 0.7, 0.8)),  # the higher-intensity job
])
def test_no_pace_without_a_more_intense_overlapping_phase(first, second):
    ctl = FabricController(single_switch(4), "coschedule")
    announce(ctl, *first[:3], compute_s=first[3])
    ans = announce(ctl, *second[:3], compute_s=second[3])
    assert ans["pace_share"] is None and ans["pace_from_s"] is None and ans["pace_until_s"] is None


def test_jobs_on_disjoint_links_are_not_paced():
    ctl = FabricController(fat_tree(4), "coschedule")
    body = {"version": 1, "job": "a", "period_s": 1.0, "compute_s": 0.8,
            "flows": [{"src": "h0", "dst": "h4", "size_bytes": int(0.9 * 400 * GBPS)}]}
    ctl.announce(json.dumps(body), 0.0)
    body.update(job="b", compute_s=0.1, flows=[{"src": "h1", "dst": "h5", "size_bytes": int(0.9 * 400 * GBPS)}])
    _, b = ctl.announce(json.dumps(body), 0.0)
    assert b["pace_share"] is None and b["start_offset_s"] == 0
