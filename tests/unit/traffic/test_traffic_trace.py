"""The trace file: exact round trips, and every malformed input is one InputError line."""
import json
import pathlib

import pytest

from badinput import InputError
from traffic.trace import Op, Trace, dump, find_cycle, load, to_dict
from traffic.workload import build_workload

V1 = pathlib.Path(__file__).parents[2] / "data" / "v1"


def _pair_trace():
    return Trace(
        nranks=3,
        groups={"world": [0, 1, 2], "pair": [0, 1]},
        ops={
            0: [Op("c", "compute", duration_s=0.25, iteration=0, label="fwd"),
                Op("ar", "collective", ("c",), op="all_reduce", algorithm="ring", group="world", size_bytes=10),
                Op("x", "send", ("ar",), size_bytes=7, peer=1),
                Op("b", "collective", ("x",), op="broadcast", group="pair", size_bytes=3, root=1)],
            1: [Op("ar", "collective", op="all_reduce", algorithm="ring", group="world", size_bytes=10),
                Op("x", "recv", ("ar",), size_bytes=7, peer=0),
                Op("b", "collective", ("x",), op="broadcast", group="pair", size_bytes=3, root=1)],
            2: [Op("ar", "collective", op="all_reduce", algorithm="ring", group="world", size_bytes=10)],
        },
        meta={"model": "toy", "nested": {"a": [1, 2.5]}},
    )


def test_round_trip_is_exact(tmp_path):
    t = _pair_trace()
    t.validate()
    p = tmp_path / "t.json"
    dump(t, p)
    back = load(p)
    assert back == t
    dump(back, tmp_path / "u.json")
    assert (tmp_path / "u.json").read_bytes() == p.read_bytes()


def test_file_is_versioned_and_omits_defaults():
    d = to_dict(_pair_trace())
    assert d["format"] == "dtnet-trace" and d["version"] == 2
    assert d["classes"][2] == {"ranks": [2], "ops": [{"id": "ar", "kind": "collective", "op": "all_reduce",
                                                      "algorithm": "ring", "group": "world", "size_bytes": 10}]}
    assert d["groups"] == {"world": [[0, 3]], "pair": [[0, 2]]}  # ranks as runs


def _edit(t, rank, i, **kw):
    o = t.ops[rank][i]
    for k, v in kw.items():
        setattr(o, k, v)
    return t


@pytest.mark.parametrize("mutate,key", [
    (lambda t: _edit(t, 0, 0, deps=("b",)), "deps"),                        # cycle through a collective
    (lambda t: _edit(t, 0, 1, group="nope"), "ops.0[1].group"),
    (lambda t: _edit(t, 0, 2, size_bytes=-1), "ops.0[2].size_bytes"),
    (lambda t: _edit(t, 0, 2, peer=5), "ops.0[2].peer"),
    (lambda t: _edit(t, 0, 1, deps=("ghost",)), "ops.0[1].deps"),
    (lambda t: _edit(t, 1, 1, size_bytes=8), "ops.1"),                      # recv size differs from send
    (lambda t: _edit(t, 0, 0, kind="sleep"), "ops.0[0].kind"),
    (lambda t: _edit(t, 0, 0, duration_s=-1.0), "ops.0[0].duration_s"),
    (lambda t: _edit(t, 1, 0, op="all_gather"), "ops.1[0]"),                # ranks disagree on the op
    (lambda t: _edit(t, 0, 3, root=2), "ops.0[3].root"),
    (lambda t: t.ops[2].pop(), "ops.2"),                                     # member never joins
    (lambda t: t.groups.__setitem__("world", [0, 1, 3]), "groups.world"),
    (lambda t: t.ops.__setitem__(4, []), "ops"),
    (lambda t: t.ops[1].append(Op("c", "compute")) or t.ops[1].append(Op("c", "compute")), "ops.1[4].id"),
])
def test_validate_rejects(mutate, key, tmp_path):
    t = _pair_trace()
    mutate(t)
    with pytest.raises(InputError) as e:
        t.validate(file="t.json")
    assert str(e.value).startswith(f"t.json: {key}: expected"), str(e.value)
    assert "\n" not in str(e.value)


def test_cross_rank_deadlock_is_a_cycle():
    # rank 0 waits for the recv before the collective; rank 1 sends only after the collective.
    t = Trace(2, {"w": [0, 1]}, {
        0: [Op("m", "recv", size_bytes=1, peer=1), Op("ar", "collective", ("m",), op="all_reduce", group="w")],
        1: [Op("ar", "collective", op="all_reduce", group="w"), Op("m", "send", ("ar",), size_bytes=1, peer=0)],
    })
    assert find_cycle(t)
    with pytest.raises(InputError, match="deps: expected no dependency cycle"):
        t.validate()


@pytest.mark.parametrize("content,key", [
    ("{not json", "trace: expected JSON"),
    ("[]", "trace: expected a JSON object"),
    ('{"format": "other"}', "format: expected"),
    ('{"format": "dtnet-trace", "version": 3}', "version: expected 1 or 2"),
    ('{"format": "dtnet-trace", "version": 2, "nranks": 1, "ops": {}}', "version: expected 1 for a file of per-rank"),
    ('{"format": "dtnet-trace", "version": 2, "nranks": 1}', "classes: expected a list of rank classes"),
    ('{"format": "dtnet-trace", "version": 2, "nranks": 2, "classes": [{"ranks": [[0, 9]], "ops": []}]}',
     "classes[0].ranks: expected at most 2 ranks"),
    ('{"format": "dtnet-trace", "version": 2, "nranks": 2, "classes": [{"ranks": {"pp": 0}, "ops": []}]}',
     "classes[0].ranks: expected a list of ranks (a rule"),
    ('{"format": "dtnet-trace", "version": 2, "nranks": 4, "layout": {"tp": 2, "dp": 3}, "classes": []}',
     "layout: expected tp x dp x pp = nranks = 4"),
    ('{"format": "dtnet-trace", "version": 2, "nranks": 4, "layout": {"tp": 4, "groups": ["xp"]}, "classes": []}',
     "layout.groups: expected distinct group families"),
    ('{"format": "dtnet-trace", "version": 2, "nranks": 4, "layout": {"tp": 4}, "classes": '
     '[{"ranks": {"pp": 1}, "ops": []}]}', "classes[0].ranks.pp: expected coordinates in 0..0"),
    ('{"format": "dtnet-trace", "version": 2, "nranks": 2, "classes": [{"ranks": [0, 1], "ops": [], "colour": 1}]}',
     "classes[0].colour: expected one of name, ranks, ops"),
    ('{"format": "dtnet-trace", "version": 1, "nranks": 1, "ops": {"0": [{"id": "a"}]}}', "ops.0[0].kind"),
    ('{"format": "dtnet-trace", "version": 1, "nranks": 1, "ops": {"0": [{"id": "a", "kind": "compute", '
     '"colour": 1}]}}', "ops.0[0].colour"),
    ('{"format": "dtnet-trace", "version": 1, "nranks": 1, "ops": {"x": []}}', "ops: expected rank numbers"),
    ('{"format": "dtnet-trace", "version": 1, "nranks": 0, "ops": {}}', "nranks"),
    ('{"format": "dtnet-trace", "version": 1, "nranks": 1, "ops": {}, "extra": 1}', "extra"),
])
def test_load_rejects_corrupt_files(tmp_path, content, key):
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(InputError) as e:
        load(p)
    assert str(e.value).startswith(f"{p}: {key}"), str(e.value)


def test_load_missing_file(tmp_path):
    with pytest.raises(InputError, match="expected a readable file"):
        load(tmp_path / "none.json")


def test_dump_is_plain_json(tmp_path):
    dump(_pair_trace(), tmp_path / "t.json")
    assert json.loads((tmp_path / "t.json").read_text())["nranks"] == 3


def test_a_generated_trace_is_one_class_per_stage_with_rules(tmp_path):
    t = build_workload({"model": "gpt-small", "tp": 2, "pp": 2, "dp": 2, "microbatches": 2}, 8)
    d = to_dict(t)
    assert d["layout"] == {"tp": 2, "dp": 2, "pp": 2, "ep": 1, "order": "tp-dp-pp", "groups": ["tp", "dp"]}
    assert [c["ranks"] for c in d["classes"]] == [{"pp": 0}, {"pp": 1}] and d["groups"] == {}
    sends = [o for o in d["classes"][0]["ops"] if o["kind"] == "send"]
    assert sends and {o["peer"] for o in sends} == {"pp+1"}
    dump(t, tmp_path / "t.json")
    back = load(tmp_path / "t.json")
    assert back == t and len(back.classes) == 2
    dump(back, tmp_path / "u.json")
    assert (tmp_path / "u.json").read_bytes() == (tmp_path / "t.json").read_bytes()


def test_ops_shared_by_classes_are_written_once_and_come_back_shared(tmp_path):
    from traffic.trace import RankClass
    common = [Op("c", "compute", duration_s=0.5), Op("ar", "collective", ("c",), op="all_reduce", group="w")]
    t = Trace(4, {"w": [0, 1, 2, 3]}, meta={}, classes=[
        RankClass([0, 1], common + [Op("x", "compute", ("ar",))]), RankClass([2, 3], list(common))])
    t.validate()
    d = to_dict(t)
    assert len(d["op_table"]) == 2 and d["classes"][1]["ops"] == [[0, 2]]
    dump(t, tmp_path / "t.json")
    back = load(tmp_path / "t.json")
    assert back == t and back.classes[0].ops[0] is back.classes[1].ops[0]


@pytest.mark.parametrize("name", sorted(p.name for p in V1.glob("*.json")))
def test_version_1_files_written_by_the_old_code_still_load(name, tmp_path):
    t = load(V1 / name)
    assert t.nranks >= 4 and len(t.classes) == t.nranks  # one class per rank, as the file lists them
    dump(t, tmp_path / "v2.json")
    assert json.loads((tmp_path / "v2.json").read_text())["version"] == 2 and load(tmp_path / "v2.json") == t


@pytest.mark.parametrize("name,spec,n", [
    ("gpt-small-tp2-pp2-dp2.json", {"model": "gpt-small", "tp": 2, "pp": 2, "dp": 2, "microbatches": 2}, 8),
    ("mixtral-pp2-ep2.json", {"model": "mixtral-8x7b", "tp": 1, "pp": 2, "ep": 2, "microbatches": 1}, 4),
    ("stride-4.json", {"pattern": "stride", "stride": 1, "size_bytes": 4096, "iterations": 2}, 4),
    ("all-reduce-4.json", {"collective": "all_reduce", "size_bytes": 1048576, "compute_ms": 2, "iterations": 2}, 4),
])
def test_version_1_files_hold_what_the_generators_make_now(name, spec, n):
    """The old generator's per-rank files equal the compact traces generated today, rank by rank."""
    assert load(V1 / name) == build_workload(spec, n)


@pytest.mark.parametrize("entry", [5, [0, 9], [1, 1], "x", [0]])
def test_bad_op_table_references(tmp_path, entry):
    d = {"format": "dtnet-trace", "version": 1, "nranks": 1, "op_table": [{"id": "a", "kind": "compute"}],
         "ops": {"0": [entry]}}
    p = tmp_path / "t.json"
    p.write_text(json.dumps(d))
    with pytest.raises(InputError, match=r"ops\.0\[0\]: expected an op, an op_table index or a \[start, stop\]"):
        load(p)


def _doc_example(title):
    import re
    doc = (pathlib.Path(__file__).parents[3] / "docs" / "trace-format.md").read_text()
    return re.search(rf"## {title}.*?```json\n(.*?)```", doc, re.S).group(1)


def test_the_documented_examples_load(tmp_path):
    example = _doc_example("Example")
    p = tmp_path / "example.json"
    p.write_text(example)
    t = load(p)
    assert t.ops[0] == t.ops[1] and [o.kind for o in t.ops[0]] == ["compute", "collective"]
    assert t.nranks == 4 and t.members("tp-p0-d0") == [0, 1] and t.ops_of(3)[1].group == "tp-p0-d1"
    dump(t, tmp_path / "again.json")
    assert json.loads((tmp_path / "again.json").read_text()) == json.loads(example)
    v1 = tmp_path / "v1.json"
    v1.write_text(_doc_example("Version 1"))
    old = load(v1)
    assert old.nranks == 2 and old.ops[0] == old.ops[1] and old.ops[1][1].group == "world"
