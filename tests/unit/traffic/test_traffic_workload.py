"""build_workload: the experiment file's `workload:` forms."""
import pytest

from badinput import InputError
from traffic.trace import dump
from traffic.workload import build_workload


def test_single_collective_chains_iterations():
    t = build_workload({"collective": "all_reduce", "algorithm": "ring", "size_bytes": 1 << 30,
                        "iterations": 3, "compute_ms": 2}, 4)
    assert t.groups == {"world": [0, 1, 2, 3]}
    ops = t.ops[2]
    assert [o.kind for o in ops] == ["compute", "collective"] * 3
    assert ops[0].duration_s == pytest.approx(0.002)
    assert all(ops[i].deps == (ops[i - 1].id,) for i in range(1, 6)) and ops[0].deps == ()
    assert [o.iteration for o in ops] == [0, 0, 1, 1, 2, 2]
    assert ops[1].size_bytes == 1 << 30 and ops[1].group == "world"
    assert all(t.ops[r][1].id == ops[1].id for r in range(4))  # same id on every member


def test_single_collective_defaults():
    t = build_workload({"collective": "all_gather", "size_bytes": 100}, 2, gpus_per_server=2)
    assert [o.kind for o in t.ops[0]] == ["collective"]
    assert t.ops[0][0].algorithm == "ring" and t.meta["gpus_per_server"] == 2


def test_hierarchical_needs_servers():
    spec = {"collective": "all_reduce", "algorithm": "hierarchical", "size_bytes": 8}
    assert build_workload(spec, 8, gpus_per_server=4).ops[0][0].algorithm == "hierarchical"
    with pytest.raises(InputError, match="workload.algorithm: expected gpus_per_server dividing the 8 GPUs"):
        build_workload(spec, 8)
    with pytest.raises(InputError, match="found gpus_per_server=3"):
        build_workload(spec, 8, gpus_per_server=3)


def test_broadcast_root_travels_with_the_op():
    t = build_workload({"collective": "broadcast", "size_bytes": 100, "root": 2}, 4)
    assert t.ops[0][0].root == 2


@pytest.mark.parametrize("spec,msg", [
    ({"collective": "all_reduce", "size_bytes": 1, "colour": "red"}, "x.yaml: workload.colour: expected a known key"),
    ({"collective": "allreduce", "size_bytes": 1}, "x.yaml: workload.collective: expected one of all_reduce"),
    ({"collective": "all_reduce"}, "x.yaml: workload.size_bytes: expected a value, found nothing"),
    ({"collective": "all_reduce", "size_bytes": -5}, "x.yaml: workload.size_bytes: expected an integer >= 0, found -5"),
    ({"collective": "all_reduce", "size_bytes": 1, "iterations": 0}, "workload.iterations: expected an integer >= 1"),
    ({"collective": "all_reduce", "size_bytes": 1, "compute_ms": "5"}, "workload.compute_ms: expected a number"),
    ({"collective": "all_reduce", "size_bytes": 1, "algorithm": "butterfly"}, "workload.algorithm: expected one of"),
    ({"size_bytes": 1}, "x.yaml: workload: expected exactly one of collective, model, trace, pattern, or command (a real program), found none"),
    ({"collective": "all_reduce", "pattern": "stride"}, "workload: expected exactly one of"),
    ({"collective": "sendrecv", "size_bytes": 1, "iterations": True}, "workload.iterations"),
])
def test_bad_specs(spec, msg):
    with pytest.raises(InputError) as e:
        build_workload(spec, 4, file="x.yaml")
    assert msg in str(e.value)


def test_trace_form_loads_and_checks_rank_count(tmp_path):
    t = build_workload({"collective": "all_reduce", "size_bytes": 10}, 4)
    dump(t, tmp_path / "t.json")
    assert build_workload({"trace": str(tmp_path / "t.json")}, 4) == t
    with pytest.raises(InputError, match="expected a trace for 8 ranks"):
        build_workload({"trace": str(tmp_path / "t.json")}, 8, file="x.yaml")


@pytest.mark.parametrize("spec,n,key,expected", [
    ({"collective": "all_reduce", "size_bytes": 8, "iterations": 10 ** 9}, 4, "workload.iterations", "<= 100000"),
    ({"pattern": "all-to-all", "size_bytes": 8, "iterations": 90000}, 64, "workload.iterations",
     "a trace of at most 5000000 ops"),
    ({"model": "gpt-small", "microbatches": 10 ** 9}, 4, "workload.microbatches", "at most 5000000 distinct ops"),
    ({"model": "gpt-small", "microbatches": 1}, 1 << 21, "nranks", "at most 1048576 GPUs"),
])
def test_absurd_numbers_answer_at_once_with_the_limit(spec, n, key, expected):
    with pytest.raises(InputError) as e:
        build_workload(spec, n)
    assert e.value.key == key and expected in e.value.expected, str(e.value)


def test_check_names_the_limit_for_a_mistyped_iteration_count(tmp_path, capsys):
    from dtnet import cli
    exp = tmp_path / "e.yaml"
    exp.write_text("name: typo\ntopology: {kind: single-switch, hosts: 4, link_gbps: 400}\n"
                   "scale: {link: 2.5e-5, bytes: 1.0e-3}\n"
                   "jobs:\n  - {name: j, hosts: all, workload: {collective: all_reduce, size_bytes: 1024, "
                   "iterations: 1000000000}}\n")
    assert cli.main(["check", str(exp)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "jobs[0].workload.iterations: expected an integer >= 1 and <= 100000" in err


@pytest.mark.parametrize("spec,key", [
    ({"model": "gpt-small", "tp": 2, "microbatches": 1, "micro_batch_size": 10 ** 13}, "workload.micro_batch_size"),
    ({"model": "gpt-small", "global_batch": 4 * 10 ** 9}, "workload.global_batch"),
])
def test_generated_sizes_and_counts_name_the_key_the_user_wrote(spec, key):
    with pytest.raises(InputError) as e:
        build_workload(spec, 4, validate=False)
    assert e.value.key == key, str(e.value)
