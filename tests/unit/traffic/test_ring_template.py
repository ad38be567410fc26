"""The ring's closed-form template against the template built from its schedule and send_dependencies:
every array equal, for every op it covers, small and odd rank counts, sizes that do not divide."""
import numpy as np
import pytest

from traffic.collectives import templates
from traffic.collectives.templates import RING_CLOSED_OPS, template

FIELDS = ("src", "dst", "size", "step", "earlier_ptr", "earlier", "gate_ptr", "gate", "waiter_ptr", "waiter")


@pytest.mark.parametrize("op", RING_CLOSED_OPS)
@pytest.mark.parametrize("n", [2, 3, 4, 5, 7, 8, 16, 33])
@pytest.mark.parametrize("size_bytes", [0, 1, 5, 1000003, 1 << 26])
def test_closed_form_ring_template_is_the_schedules(op, n, size_bytes, monkeypatch):
    got = template.__wrapped__(op, "ring", n, size_bytes)
    monkeypatch.setattr(templates, "RING_CLOSED_OPS", ())  # the schedule's way
    ref = template.__wrapped__(op, "ring", n, size_bytes)
    assert got.num_steps == ref.num_steps
    assert (got.op, got.algorithm, got.nranks, got.size_bytes) == (ref.op, ref.algorithm, ref.nranks, ref.size_bytes)
    for f in FIELDS:
        a, b = getattr(got, f), getattr(ref, f)
        assert a.dtype.kind == b.dtype.kind and np.array_equal(a, b), f


def test_the_closed_form_builds_no_schedule(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("built a schedule")
    monkeypatch.setattr(templates, "build_schedule", refuse)
    assert template.__wrapped__("all_reduce", "ring", 256, 1 << 28).n == 2 * 255 * 256
    with pytest.raises(AssertionError):
        template.__wrapped__("all_reduce", "tree", 8, 1 << 20)
