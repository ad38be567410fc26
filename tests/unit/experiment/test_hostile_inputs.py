"""Issue 25's classes of hostile input, one test each: numbers out of any real range, structures
that explode, files that are no files, names that end in a newline, loops of plain bridges."""
import gzip
import os

import pytest
import yaml

from badinput import InputError, files, limits, short_repr
from badinput.yamlread import BoundedLoader
from experiment import model
from experiment.program import ENV_NAME
from topologies.files import NAME_RE, from_data
from traffic.layout import PEER_RE

BASE = {"name": "x", "engine": "flow", "topology": {"kind": "single-switch", "hosts": 4, "link_gbps": 400},
        "jobs": [{"name": "a", "hosts": "all", "workload": {"collective": "all_reduce", "size_bytes": 1 << 20}}]}


def _parse_with(*overrides):
    return model.parse(model.apply_overrides(BASE, list(overrides), "e.yaml"), "e.yaml")


# -- numbers -------------------------------------------------------------------------------

@pytest.mark.parametrize("override, key", [
    ("jobs.0.start_ms=1e12", "jobs[0].start_ms"),
    ("jobs.0.start_ms=5e-324x", "jobs[0].start_ms"),   # not a number at all
    ("topology.link_gbps=1e308", "topology.link_gbps"),
    ("topology.link_gbps=5e-324", "topology.link_gbps"),
    ("scale.link=5e-324", "scale.link"),
    ("testbed.timeout_s=1e300", "testbed.timeout_s"),
    ("controller.policy=congestion-aware", None),       # in range: accepted
])
def test_numbers_outside_a_real_range_are_refused(override, key):
    sets = [override] + (["scale.bytes=1e-3"] if override.startswith("scale") else [])
    if key is None:
        _parse_with(*sets)
        return
    with pytest.raises(InputError) as e:
        _parse_with(*sets)
    assert e.value.key == key and e.value.file == "e.yaml"


def test_a_poll_period_near_zero_is_refused():
    with pytest.raises(InputError) as e:
        _parse_with("controller.policy=congestion-aware", "controller.params.poll_s=1e-300")
    assert e.value.key == "controller.params.poll_s"


def test_range_refuses_what_a_type_check_lets_through():
    r = limits.AT_MS
    assert r.ok(0) and r.ok(1.5) and r.ok(r.hi)
    for bad in (float("nan"), float("inf"), -1, r.hi * 2, True, 10 ** 400, "5"):
        assert not r.ok(bad), bad
    assert not limits.LINK_GBPS.ok(5e-324)


def test_iterations_times_compute_beyond_the_run_bound_is_refused():
    with pytest.raises(InputError) as e:
        _parse_with("jobs.0.workload.iterations=100000", "jobs.0.workload.compute_ms=3600000")
    assert e.value.key == "jobs[0].workload.iterations" and "days of simulated time" in str(e.value)
    _parse_with("jobs.0.workload.iterations=1000", "jobs.0.workload.compute_ms=100")


def test_an_integer_of_thousands_of_digits_is_an_input_error_not_a_value_error():
    with pytest.raises(InputError) as e:
        model.apply_overrides(BASE, ["jobs.0.workload.size_bytes=" + "9" * 5000], "e.yaml")
    assert "5000 digits" in str(e.value)
    with pytest.raises(InputError):
        yaml.load("n: " + "9" * 5000, Loader=BoundedLoader)


# -- structures ----------------------------------------------------------------------------

def _bomb(levels=9):
    v = ["x"] * 9
    for _ in range(levels):
        v = [v] * 9
    return v


def test_an_error_about_an_alias_bomb_is_cut_before_it_is_built():
    text = str(InputError("description", "a string", _bomb()))
    assert len(text) < 200 and text.endswith("...")
    assert short_repr([1, "a", (2,), {"k": None}], 100) == repr([1, "a", (2,), {"k": None}])


def test_yaml_that_expands_beyond_the_bound_is_refused_before_construction():
    doc = "a: &a [x, x, x, x, x, x, x, x, x]\n"
    prev = "a"
    for n in "bcdefgh":
        doc += f"{n}: &{n} [" + ", ".join(["*" + prev] * 9) + "]\n"
        prev = n
    with pytest.raises(InputError) as e:
        yaml.load(doc, Loader=BoundedLoader)
    assert "once aliases are expanded" in e.value.expected
    merged = yaml.load("base: &b {x: 1}\nthis: {<<: *b, y: 2}\n", Loader=BoundedLoader)
    assert merged["this"] == {"x": 1, "y": 2}


def test_a_huge_sweep_grid_is_counted_not_built():
    grid = {"flow.ecmp_seed": list(range(1000)), "jobs.0.workload.size_bytes": list(range(1, 1001)),
            "jobs.0.workload.compute_ms": list(range(1000))}
    with pytest.raises(InputError) as e:
        model.parse({**BASE, "sweep": {"grid": grid}}, "e.yaml")
    assert e.value.key == "sweep.grid" and e.value.found == "1000000000 points"


def test_duplicate_sweep_points_are_found_even_with_list_values():
    points = [{"topology.kind": "fat-tree", "jobs.0.hosts": ["h0", "h1"]}] * 2
    with pytest.raises(InputError) as e:
        model.parse({**BASE, "sweep": {"list": points}}, "e.yaml")
    assert e.value.expected == "distinct points"


# -- files ---------------------------------------------------------------------------------

def test_a_device_or_fifo_is_no_input_file(tmp_path):
    with pytest.raises(InputError) as e:
        files.read_bytes("/dev/zero", "trace")
    assert e.value.found == "a character device" and e.value.file == "/dev/zero"
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(InputError) as e:  # and the open does not wait for a writer
        files.read_bytes(fifo, "trace")
    assert e.value.found == "a FIFO"


def test_reads_and_decompression_stop_at_the_bound(tmp_path):
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 2000)
    with pytest.raises(InputError, match="at most"):
        files.read_bytes(big, "trace", max_bytes=1000)
    bomb = tmp_path / "bomb.gz"
    bomb.write_bytes(gzip.compress(b"\0" * 100_000))
    with pytest.raises(InputError, match="once decompressed"):
        files.read_bytes(bomb, "trace", max_bytes=1000, gunzip=True)
    assert files.read_bytes(bomb, "trace", gunzip=True) == b"\0" * 100_000
    corrupt = tmp_path / "corrupt.gz"
    data = gzip.compress(b"{}" * 100)
    corrupt.write_bytes(data[:10] + b"\xff" * 20 + data[30:])
    with pytest.raises(InputError, match="complete gzip stream"):
        files.read_bytes(corrupt, "trace", gunzip=True)


def test_json_nested_too_deep_is_an_input_error():
    with pytest.raises(InputError, match="nested too deep"):
        files.parse_json("[" * 100_000 + "]" * 100_000, "args", "k.json")


# -- names ---------------------------------------------------------------------------------

@pytest.mark.parametrize("rule, good", [(NAME_RE.fullmatch, "h0"), (ENV_NAME.match, "NCCL_DEBUG"),
                                        (PEER_RE.match, "pp+1")])
def test_a_trailing_newline_does_not_pass_a_name_rule(rule, good):
    assert rule(good) and not rule(good + "\n")


# -- fabrics -------------------------------------------------------------------------------

def _fabric(bridge_links):
    nodes = {"h0": {"role": "host"}, "h1": {"role": "host"}, "tor0": {"role": "switch"},
             **{f"nvl{i}": {"role": "switch", "layer": "nvlink", "openflow": False} for i in range(3)}}
    links = [{"a": "h0", "b": "tor0"}, {"a": "h1", "b": "tor0"}, {"a": "h0", "b": "nvl0"}, {"a": "h1", "b": "nvl1"}]
    return {"link_gbps": 400, "nodes": nodes, "links": links + [{"a": a, "b": b} for a, b in bridge_links]}


def test_a_loop_of_plain_bridges_is_refused_and_a_tree_is_not():
    from_data(_fabric([("nvl0", "nvl2"), ("nvl1", "nvl2")]), file="f.yaml")
    with pytest.raises(InputError) as e:
        from_data(_fabric([("nvl0", "nvl2"), ("nvl1", "nvl2"), ("nvl0", "nvl1")]), file="f.yaml")
    assert e.value.key == "links" and "loop" in e.value.found


def test_an_unhashable_link_end_is_an_input_error():
    data = _fabric([])
    data["links"][0] = {"a": ["h0"], "b": "tor0"}
    with pytest.raises(InputError) as e:
        from_data(data, file="f.yaml")
    assert e.value.key == "links[0].a"


# -- versions and headers -------------------------------------------------------------------

def test_version_true_is_not_version_one():
    from traffic.trace import from_dict
    with pytest.raises(InputError) as e:
        from_dict({"format": "dtnet-trace", "version": True, "nranks": 1, "ops": {"0": []}}, file="t.json")
    assert e.value.key == "version"


def test_an_aicb_header_field_given_twice_is_refused(tmp_path):
    from traffic.importers import aicb
    p = tmp_path / "w.txt"
    p.write_text("HYBRID_TRANSFORMER ga: 1 all_gpus: 4 all_gpus: 8\n1\n"
                 "attention -1 1000 ALLREDUCE 4096 1000 NONE 0 1000 ALLREDUCE 8192 10\n")
    with pytest.raises(InputError) as e:
        aicb.load([str(p)])
    assert "each field once" in e.value.expected
