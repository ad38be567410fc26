"""Property-based fuzzing of every parser of user input: experiment files, trace files, the Chakra,
AICB and Kineto importers, and the controller's announcement schema.

Each test starts from valid inputs and breaks them (a value swapped for an odd one, a key dropped or
added, bytes cut, flipped or inserted). The property is the bad-input contract: the command answers
0, or 2 with one line on stderr; a parser returns its object or raises its input error. Anything
else (a traceback) fails. Runs are derandomized so CI sees the same examples every time.
"""
import contextlib
import copy
import io
import json
import math
import os

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.core import FabricController
from controller.cosched import AnnounceError, Announcement, parse_announcement
from dtnet import cli
from tests.unit.traffic.test_traffic_aicb import HEADER as AICB_HEADER
from tests.unit.traffic.test_traffic_aicb import ROWS as AICB_ROWS
from tests.unit.traffic.test_traffic_chakra import Attr, Node, _rank_nodes, _stream
from tests.unit.traffic.test_traffic_kineto import _rank_events
from topologies import single_switch
from traffic.trace import to_dict
from traffic.workload import build_workload

EXPERIMENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, os.pardir, "experiments")
# CI runs the same 60 examples a test every time; DTNET_FUZZ_EXAMPLES=5000 fuzzes longer, at random.
_LONG = int(os.environ.get("DTNET_FUZZ_EXAMPLES", 0))
FUZZ = settings(max_examples=_LONG or 60, derandomize=not _LONG, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Odd values, small enough that a value taken as valid never builds a huge fabric or workload.
SCALARS = st.one_of(
    st.sampled_from([None, True, False, 0, 1, 2, 3, -1, 8, 0.5, 1e-9, 2.5e-5, math.nan, math.inf, -math.inf,
                     2 ** 63, 10 ** 30, "", "x", "all", "ring", "hierarchical", "h0", "h9", "1GiB", "a\nb",
                     "all_reduce", "gpt-small", "fat-tree", "world", "0", "-1"]),
    st.integers(-2, 9), st.floats(-10, 10), st.text(max_size=6))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=5)
# Keys the parsers know, so that added keys sometimes land where they change the meaning.
KEYS = st.sampled_from(["name", "kind", "hosts", "k", "link_gbps", "scale", "link", "bytes", "jobs", "workload",
                        "collective", "model", "trace", "pattern", "tp", "pp", "dp", "ep", "size_bytes", "order",
                        "id", "deps", "op", "group", "groups", "peer", "root", "nranks", "ops", "op_table", "meta",
                        "gpus_per_server", "args", "ts", "dur", "Process Group Ranks", "Group size", "flows",
                        "src", "dst", "period_s", "gpus", "version"]) | st.text(max_size=5)


def _slots(doc):
    """(container, key) of every value inside a JSON-like document."""
    out, stack = [], [doc]
    while stack:
        node = stack.pop()
        pairs = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in pairs:
            out.append((node, k))
            stack.append(v)
    return out


@st.composite
def mutated(draw, doc):
    """`doc` with one to three edits: a value replaced, a key or item removed, a key added."""
    doc = copy.deepcopy(doc)
    pick = draw(st.randoms(use_true_random=False)).choice  # uniform over slots; sampled_from favours the first
    for _ in range(draw(st.integers(1, 3))):
        slots = _slots(doc)
        containers = [doc] + [c[k] for c, k in slots if isinstance(c[k], (dict, list))]
        edit = draw(st.sampled_from(["replace", "replace", "remove", "add"]))
        if edit == "add" or not slots:
            target = pick(containers)
            if isinstance(target, dict):
                target[draw(KEYS)] = draw(VALUES)
            else:
                target.insert(draw(st.integers(0, len(target))), draw(VALUES))
            continue
        container, key = pick(slots)
        if edit == "replace":
            container[key] = draw(VALUES)
        else:
            del container[key]
    return doc


@st.composite
def corrupted(draw, data: bytes):
    """`data` cut short, with bytes flipped, or with junk spliced in."""
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        edit = draw(st.sampled_from(["truncate", "flip", "insert", "delete"]))
        at = draw(st.integers(0, len(data)))
        if edit == "truncate":
            del data[at:]
        elif edit == "flip" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif edit == "insert":
            data[at:at] = draw(st.binary(max_size=4) | st.sampled_from([b"{", b"]", b"\n", b"\t", b":", b"- ",
                                                                          b"&a ", b"*a", b'"', b"\x00", b"\xff"]))
        else:
            del data[at:at + draw(st.integers(1, 8))]
    return bytes(data)


def _dtnet(argv):
    """Runs dtnet in-process: 0, or 2 with one line on stderr and no traceback."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    text = err.getvalue()
    assert code in (0, 2), (code, text)
    if code == 2:
        assert text.startswith("dtnet: ") and text.endswith("\n") and len(text.splitlines()) == 1, repr(text)
        assert "expected" in text and "Traceback" not in text, text
        assert " object at 0x" not in text, text  # an internal object's repr is no help to the user
    return code


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


def _write(path, data):
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
    return str(path)


# ---- experiment files ---------------------------------------------------------------------------

def _seed(name):
    with open(os.path.join(EXPERIMENTS, name)) as f:
        return f.read()


EXPERIMENT_TEXTS = [_seed(n) for n in ("ring-single-switch.yaml", "gpt-small-3d.yaml", "ring-fat-tree.yaml",
                                       "ring-rail-16.yaml")] + [
    "name: p\ntopology: {kind: leaf-spine, leaves: 2, spines: 1, hosts_per_leaf: 2}\nscale: {link: 2.5e-5, bytes: "
    "1.0e-3}\ntestbed: {datapath: userspace, slice_bytes: 16384}\njobs:\n  - hosts: {count: 4}\n    start_ms: 5\n"
    "    workload: {pattern: staggered, size_bytes: 65536, seed: 1, p_edge: 0.5, p_pod: 0.25}\n",
    "name: m\ntopology: {kind: rail-optimized, servers: 2, gpus_per_server: 2, spines: 1}\nscale: {link: 2.5e-5, "
    "bytes: 1.0e-3}\njobs:\n  - order: rail-aligned\n    workload:\n      model: {layers: 2, hidden: 64, "
    "ffn_hidden: 256, heads: 4, seq_len: 32, vocab: 128, experts: 2, top_k: 1}\n      tp: 2\n      ep: 2\n"
    "      global_batch: 4\n      algorithm: {tp: ring, dp: tree, ep: direct}\n"]
EXPERIMENT_DOCS = [yaml.safe_load(t) for t in EXPERIMENT_TEXTS]


@FUZZ
@given(st.sampled_from(EXPERIMENT_DOCS).flatmap(mutated))
def test_check_on_mutated_experiments(work, doc):
    _dtnet(["check", _write(work / "exp.yaml", yaml.safe_dump(doc))])


@FUZZ
@given(st.sampled_from(EXPERIMENT_TEXTS).flatmap(lambda t: corrupted(t.encode())))
def test_check_on_corrupted_experiment_text(work, data):
    _dtnet(["check", _write(work / "exp.yaml", data)])


@FUZZ
@given(st.sampled_from(EXPERIMENT_TEXTS), st.lists(st.tuples(st.sampled_from(
    ["name", "topology.k", "topology.hosts", "scale.link", "jobs.0.hosts", "jobs.0.workload.size_bytes",
     "jobs.0.workload.tp", "jobs.0.order", "jobs.1.name", "jobs.x", "controller.routing", "testbed"]),
    st.sampled_from(["", "3", "-1", "1e400", "[h0, h0]", "{count: 2}", "ring", "a=b", ".nan", "{"])), max_size=2))
def test_check_with_bad_overrides(work, text, sets):
    path = _write(work / "exp.yaml", text)
    _dtnet(["check", path] + [a for key, value in sets for a in ("--set", f"{key}={value}")])


# ---- trace files --------------------------------------------------------------------------------

def _trace_docs():
    model = build_workload({"model": "gpt-small", "tp": 2, "pp": 2, "microbatches": 2}, 4)
    pattern = build_workload({"pattern": "stride", "stride": 1, "size_bytes": 4096, "iterations": 2}, 3)
    bcast = build_workload({"collective": "broadcast", "algorithm": "tree", "size_bytes": 1 << 20, "root": 1,
                            "compute_ms": 2, "iterations": 2}, 4, gpus_per_server=2)
    return [to_dict(t) for t in (model, pattern, bcast)]


TRACE_DOCS = _trace_docs()


@FUZZ
@given(st.sampled_from(TRACE_DOCS).flatmap(mutated))
def test_trace_show_on_mutated_traces(work, doc):
    _dtnet(["trace", "show", _write(work / "t.json", json.dumps(doc))])


@FUZZ
@given(st.sampled_from(TRACE_DOCS[1:]).flatmap(lambda d: corrupted(json.dumps(d).encode())))
def test_trace_show_on_corrupted_trace_bytes(work, data):
    _dtnet(["trace", "show", _write(work / "t.json", data)])


# ---- importers ----------------------------------------------------------------------------------

def _import(work, fmt, files):
    paths = [_write(work / f"in{i}.{fmt}", data) for i, data in enumerate(files)]
    return _dtnet(["trace", "import", fmt, *paths, "--out", str(work / "out.json")])


CHAKRA = [_stream(_rank_nodes(r, 2)) for r in range(2)]


@FUZZ
@given(st.integers(0, 1).flatmap(lambda r: st.tuples(st.just(r), corrupted(CHAKRA[r]))))
def test_chakra_import_on_corrupted_streams(work, case):
    rank, data = case
    files = list(CHAKRA)
    files[rank] = data
    _import(work, "chakra", files)


ATTR_NAMES = st.sampled_from(["comm_type", "comm_size", "comm_src", "comm_dst", "comm_tag", "pg_name", "root"])
ATTRS = st.one_of(
    st.builds(lambda n, v: Attr(name=n, int64_val=v), ATTR_NAMES, st.integers(-2, 12) | st.just(2 ** 62)),
    st.builds(lambda n, v: Attr(name=n, uint64_val=v), ATTR_NAMES, st.sampled_from([0, 3, 2 ** 64 - 1])),
    st.builds(lambda n, v: Attr(name=n, string_val=v), ATTR_NAMES, st.sampled_from(["0", "1", "world", ""])),
    st.builds(lambda n, v: Attr(name=n, double_val=v), ATTR_NAMES, st.sampled_from([0.5, math.nan])))
NODES = st.lists(st.builds(
    lambda i, t, deps, dur, attrs: Node(id=i, name="n", type=t, data_deps=deps, duration_micros=dur, attr=attrs),
    st.integers(0, 6), st.integers(0, 7), st.lists(st.integers(0, 7), max_size=2),
    st.sampled_from([0, 5, 2 ** 64 - 1]), st.lists(ATTRS, max_size=4)), max_size=5)


@FUZZ
@given(st.lists(NODES, min_size=1, max_size=2))
def test_chakra_import_on_random_nodes(work, ranks):
    _import(work, "chakra", [_stream(nodes) for nodes in ranks])


def _aicb_text(lines):
    return "\n".join(" ".join(tokens) for tokens in lines) + "\n"


AICB_LINES = [AICB_HEADER.split(), [str(len(AICB_ROWS))]] + [r.split() for r in AICB_ROWS]
TOKENS = st.sampled_from(["-1", "0", "1", "2", "4", "8", "-2", "x", "NONE", "ALLREDUCE", "ALLTOALL_EP",
                          "ALLGATHER_DP_EP", "BROADCAST", "SEND", "pp:", "ga:", "all_gpus:", "checkpoints:",
                          "pp_comm:", str(2 ** 63), "1" + "0" * 30, "\x00"])


@FUZZ
@given(st.data())
def test_aicb_import_on_mutated_workloads(work, data):
    lines = copy.deepcopy(AICB_LINES)
    for _ in range(data.draw(st.integers(1, 3))):
        row = data.draw(st.integers(0, len(lines) - 1))
        edit = data.draw(st.sampled_from(["replace", "replace", "remove", "insert", "drop line"]))
        at = data.draw(st.integers(0, max(0, len(lines[row]) - 1)))
        if edit == "replace" and lines[row]:
            lines[row][at] = data.draw(TOKENS)
        elif edit == "remove" and lines[row]:
            del lines[row][at]
        elif edit == "insert":
            lines[row].insert(at, data.draw(TOKENS))
        elif edit == "drop line" and len(lines) > 1:
            del lines[row]
    _import(work, "aicb", [_aicb_text(lines)])


KINETO = [{"traceEvents": _rank_events(r), "distributedInfo": {"backend": "nccl", "rank": r, "world_size": 2}}
          for r in range(2)]


@FUZZ
@given(st.integers(0, 1).flatmap(lambda r: st.tuples(st.just(r), mutated(KINETO[r]))))
def test_kineto_import_on_mutated_traces(work, case):
    rank, doc = case
    files = [json.dumps(d) for d in KINETO]
    files[rank] = json.dumps(doc)
    _import(work, "kineto", files)


@FUZZ
@given(corrupted(json.dumps(KINETO[0]).encode()))
def test_kineto_import_on_corrupted_bytes(work, data):
    _import(work, "kineto", [data])


# ---- the controller's announcement schema -------------------------------------------------------

FABRIC = single_switch(4)
GOOD = {"version": 1, "job": "j0", "collective": "all_reduce", "period_s": 0.5, "compute_s": 0.2, "gpus": 4,
        "overlap_s": 0.0, "flows": [{"src": "h0", "dst": "h1", "size_bytes": 1 << 20},
                                    {"src": "h1", "dst": "h2", "size_bytes": 1 << 20}]}
ANNOUNCEMENTS = st.one_of(
    mutated(GOOD).map(lambda d: json.dumps(d).encode()),
    corrupted(json.dumps(GOOD).encode()),
    VALUES.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=40))


@pytest.fixture(scope="module")
def controllers():
    return [FabricController(FABRIC, routing) for routing in ("ecmp", "coschedule")]


@FUZZ
@given(ANNOUNCEMENTS)
def test_announcement_schema(controllers, body):
    try:
        assert isinstance(parse_announcement(body, FABRIC), Announcement)
        ok = True
    except AnnounceError as e:
        assert "\n" not in str(e)
        ok = False
    for ctl in controllers:
        code, answer = ctl.announce(body, 1.0)
        assert code == (200 if ok else 400), answer
    for ctl in controllers:  # still up, and still right
        assert ctl.announce(json.dumps(GOOD).encode(), 2.0)[0] == 200
