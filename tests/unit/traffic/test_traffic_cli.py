"""`dtnet trace` subcommands through traffic.cli.register, the way the top-level CLI mounts them."""
import argparse
import json

import pytest

import traffic.cli as cli
from badinput import InputError
from traffic.analysis import bytes_by_collective, critical_path
from traffic.trace import Op, Trace, load
from traffic.workload import build_workload


def _run(argv):
    parser = argparse.ArgumentParser(prog="dtnet")
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_generate_then_show(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert _run(["trace", "generate", "--model", "gpt-small", "--gpus", "8", "--tp", "2", "--pp", "2",
                 "--microbatches", "4", "--out", str(out), "--validate"]) == 0
    t = load(out)
    assert t.nranks == 8 and t.meta["dp"] == 2
    capsys.readouterr()
    assert _run(["trace", "show", str(out), "--top", "2"]) == 0
    text = capsys.readouterr().out
    assert "tp       all_reduce" in text and "p2p      send/recv" in text and "critical path:" in text


def test_generate_errors_name_the_flag(tmp_path):
    with pytest.raises(InputError) as e:
        _run(["trace", "generate", "--model", "gpt-small", "--gpus", "8", "--tp", "2", "--dp", "3",
              "--microbatches", "1", "--out", str(tmp_path / "x.json")])
    assert str(e.value).startswith("--dp: expected tp x pp x dp = 8 GPUs")


def test_show_rejects_a_corrupt_file(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps({"format": "dtnet-trace", "version": 1, "nranks": 2, "groups": {},
                             "ops": {"0": [{"id": "a", "kind": "send", "peer": 1, "size_bytes": 3}]}}))
    with pytest.raises(InputError, match="bad.json: ops.1: expected a recv on rank 1"):
        _run(["trace", "show", str(p)])


def test_main_shim_exits_2_with_one_line(tmp_path, capsys):
    assert cli.main(["trace", "show", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "expected a readable file" in err


def test_bytes_table_counts_instances_once():
    t = build_workload({"collective": "all_gather", "size_bytes": 100, "iterations": 3}, 4)
    assert bytes_by_collective(t) == {("world", "all_gather"): (3, 300)}


def test_critical_path_takes_the_longest_chain():
    # rank 1 computes longer before the shared all-reduce: the path runs through it.
    t = Trace(2, {"w": [0, 1]}, {
        0: [Op("c", "compute", duration_s=1.0), Op("ar", "collective", ("c",), op="all_reduce", group="w",
                                                   size_bytes=0)],
        1: [Op("c", "compute", duration_s=3.0), Op("ar", "collective", ("c",), op="all_reduce", group="w",
                                                   size_bytes=0),
            Op("d", "compute", ("ar",), duration_s=0.5)],
    })
    cp = critical_path(t, link_gbps=100, latency_s=0.0)
    assert cp.total_s == pytest.approx(3.5) and cp.compute_s == pytest.approx(3.5)
    assert [d for d, _ in cp.steps][0].endswith("[rank 1]")


def test_import_aicb_then_show(tmp_path, capsys):
    w = tmp_path / "w.txt"
    w.write_text("HYBRID_TRANSFORMER model_parallel_NPU_group: 2 ep: 1 pp: 1 vpp: 1 ga: 1 all_gpus: 4\n1\n"
                 "layer -1 1000 ALLREDUCE 4096 1000 NONE 0 1000 ALLREDUCE 8192 10\n")
    out = tmp_path / "t.json"
    assert _run(["trace", "import", "aicb", str(w), "--out", str(out), "--gpus-per-server", "2"]) == 0
    t = load(out)
    assert t.nranks == 4 and t.meta["gpus_per_server"] == 2 and t.meta["format"] == "aicb"
    with pytest.raises(InputError, match="--comm-groups: expected only with chakra"):
        _run(["trace", "import", "aicb", str(w), "--out", str(out), "--comm-groups", str(w)])


def test_show_names_dimensions_with_units_and_folds_repeats(tmp_path, capsys):
    out = tmp_path / "moe.json"
    assert _run(["trace", "generate", "--model", "mixtral-8x7b", "--gpus", "8", "--tp", "2", "--pp", "2",
                 "--ep", "2", "--microbatches", "4", "--out", str(out)]) == 0
    assert "rank classes hold" in capsys.readouterr().out
    assert _run(["trace", "show", str(out), "--top", "3"]) == 0
    text = capsys.readouterr().out
    assert "held as 2 rank classes" in text and "layout: tp 2 x dp 2 (ep 2) x pp 2" in text
    rows = {line.split()[0] + " " + line.split()[1]: line for line in text.splitlines()
            if line.split()[:1] and line.split()[0] in ("tp", "dp", "ep", "edp", "p2p")}
    assert "ep all_to_all" in rows and "dp all_to_all" not in rows  # expert parallelism is not dp
    assert rows["ep all_to_all"].rstrip().endswith("MiB") or rows["ep all_to_all"].rstrip().endswith("GiB")
    steps = text.split("critical path:")[1].splitlines()[1:]
    assert len(steps) == 3 and any(s.split()[2].startswith("x") for s in steps)  # "x4": one line, 4 steps


@pytest.mark.parametrize("flags,expected", [
    (["--iterations", str(10 ** 9)], "--iterations: expected an integer >= 1 and <= 100000, found 1000000000"),
    (["--gpus", str(1 << 40)], "--gpus: expected at most 1048576 GPUs"),
    (["--microbatches", str(10 ** 8)], "--microbatches: expected a trace of at most 5000000 distinct ops"),
    (["--iterations", "1000"], "--iterations: expected a trace of at most 5000000 distinct ops"),
])
def test_generate_answers_at_once_beyond_the_limits(flags, expected, tmp_path):
    argv = ["trace", "generate", "--model", "gpt3-175b", "--gpus", "1024", "--tp", "8", "--pp", "8"]
    if "--gpus" in flags:
        argv = argv[:5] + argv[7:]
    with pytest.raises(InputError) as e:
        _run(argv + flags + ["--out", str(tmp_path / "t.json")])
    assert str(e.value).startswith(expected), str(e.value)
    assert not (tmp_path / "t.json").exists()


def test_show_reads_a_version_1_file_and_names_its_groups_by_dimension(capsys):
    import pathlib
    old = pathlib.Path(__file__).parents[2] / "data" / "v1" / "mixtral-pp2-ep2.json"
    assert _run(["trace", "show", str(old)]) == 0
    text = capsys.readouterr().out
    assert "held as 4 rank classes" in text  # one per rank, as version 1 lists them
    assert "ep       all_to_all" in text and "dp       all_reduce" in text  # by the rule the names follow
