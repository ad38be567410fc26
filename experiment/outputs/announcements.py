"""summary.json "announcements": what co-scheduled jobs announced and were told, from the
``announce`` and ``offset`` events any engine writes (docs/outputs.md)."""
from __future__ import annotations

import statistics


def summarize(events: list[dict], dilation: float) -> list[dict]:
    """Per job: announcements, answers, fallbacks, offsets (real-cluster seconds)."""
    out = []
    for job in sorted({e["job"] for e in events if e.get("kind") == "announce"}):
        ann = [e for e in events if e.get("kind") == "announce" and e["job"] == job]
        answered = [e for e in ann if e["status"] == "answered"]
        applied = [e for e in events if e.get("kind") == "offset" and e["job"] == job]
        offsets = [e["offset_s"] for e in answered]
        reasons: dict[str, int] = {}
        for e in ann:
            if e["status"] == "fallback":
                reasons[e["reason"]] = reasons.get(e["reason"], 0) + 1
        out.append({
            "job": job, "announced": len(ann), "answered": len(answered), "fallbacks": len(ann) - len(answered),
            "fallback_reasons": reasons, "shifted": sum(1 for s in offsets if s > 0),
            "offset_s_mean": statistics.fmean(offsets) if offsets else 0.0, "offset_s_max": max(offsets, default=0.0),
            "paced": sum(1 for e in answered if e.get("pace_share")),
            "round_trip_s_mean": statistics.fmean([(e["end"] - e["start"]) / dilation for e in ann]) if ann else 0.0,
            # How long ranks held a phase back, offset and round trip together.
            "held_s_mean": statistics.fmean([(e["end"] - e["start"]) / dilation for e in applied]) if applied else 0.0,
        })
    return out
