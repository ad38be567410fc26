"""Chakra importer. Fixtures are written with the real protobuf library from a schema built here
with the field numbers of chakra's et_def.proto, then read by our own wire decoder."""
import gzip
import io
import json

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.json_format import MessageToJson

from badinput import InputError
from traffic.importers import chakra

F = descriptor_pb2.FieldDescriptorProto


def _schema():
    fd = descriptor_pb2.FileDescriptorProto(name="dtnet_test_et_def.proto", package="ChakraProtoMsg", syntax="proto3")

    def msg(name, *flds):
        m = fd.message_type.add(name=name)
        for fname, number, ftype, label, type_name, oneof in flds:
            f = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                f.type_name = type_name
            if oneof is not None:
                f.oneof_index = oneof
        return m

    opt, rep = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    msg("Int64List", ("values", 1, F.TYPE_INT64, rep, None, None))
    msg("StringList", ("values", 1, F.TYPE_STRING, rep, None, None))
    attr = msg("AttributeProto",
               ("name", 1, F.TYPE_STRING, opt, None, None), ("doc_string", 2, F.TYPE_STRING, opt, None, None),
               ("double_val", 3, F.TYPE_DOUBLE, opt, None, 0), ("int32_val", 7, F.TYPE_INT32, opt, None, 0),
               ("int64_val", 9, F.TYPE_INT64, opt, None, 0),
               ("int64_list", 10, F.TYPE_MESSAGE, opt, ".ChakraProtoMsg.Int64List", 0),
               ("uint32_val", 11, F.TYPE_UINT32, opt, None, 0), ("uint64_val", 13, F.TYPE_UINT64, opt, None, 0),
               ("sint64_val", 17, F.TYPE_SINT64, opt, None, 0), ("fixed64_val", 21, F.TYPE_FIXED64, opt, None, 0),
               ("bool_val", 27, F.TYPE_BOOL, opt, None, 0), ("string_val", 29, F.TYPE_STRING, opt, None, 0),
               ("string_list", 30, F.TYPE_MESSAGE, opt, ".ChakraProtoMsg.StringList", 0))
    attr.oneof_decl.add(name="value")
    msg("GlobalMetadata", ("version", 1, F.TYPE_STRING, opt, None, None),
        ("attr", 2, F.TYPE_MESSAGE, rep, ".ChakraProtoMsg.AttributeProto", None))
    msg("IOInfo", ("values", 1, F.TYPE_STRING, opt, None, None), ("shapes", 2, F.TYPE_STRING, opt, None, None))
    node_type = fd.enum_type.add(name="NodeType")
    for i, n in enumerate(["INVALID_NODE", "METADATA_NODE", "MEM_LOAD_NODE", "MEM_STORE_NODE", "COMP_NODE",
                           "COMM_SEND_NODE", "COMM_RECV_NODE", "COMM_COLL_NODE"]):
        node_type.value.add(name=n, number=i)
    msg("Node", ("id", 1, F.TYPE_UINT64, opt, None, None), ("name", 2, F.TYPE_STRING, opt, None, None),
        ("type", 3, F.TYPE_ENUM, opt, ".ChakraProtoMsg.NodeType", None),
        ("ctrl_deps", 4, F.TYPE_UINT64, rep, None, None), ("data_deps", 5, F.TYPE_UINT64, rep, None, None),
        ("start_time_micros", 6, F.TYPE_UINT64, opt, None, None), ("duration_micros", 7, F.TYPE_UINT64, opt, None, None),
        ("inputs", 8, F.TYPE_MESSAGE, opt, ".ChakraProtoMsg.IOInfo", None),
        ("attr", 10, F.TYPE_MESSAGE, rep, ".ChakraProtoMsg.AttributeProto", None))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    get = lambda n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"ChakraProtoMsg.{n}"))  # noqa: E731
    return get("GlobalMetadata"), get("Node"), get("AttributeProto")


Meta, Node, Attr = _schema()
COMP, SEND, RECV, COLL = 4, 5, 6, 7


def _varint(n):
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _stream(nodes, meta=None):
    buf = io.BytesIO()
    for m in [meta or Meta(version="0.0.4", attr=[Attr(name="schema", string_val="1.0.2-chakra.0.0.4")])] + nodes:
        data = m.SerializeToString()
        buf.write(_varint(len(data)) + data)
    return buf.getvalue()


def _coll(nid, comm_type, size, deps=(), pg=None, name="coll"):
    attrs = [Attr(name="is_cpu_op", bool_val=False), Attr(name="comm_type", int64_val=comm_type),
             Attr(name="comm_size", int64_val=size)]
    if pg is not None:
        attrs.append(Attr(name="pg_name", string_val=pg))
    return Node(id=nid, name=name, type=COLL, data_deps=list(deps), attr=attrs)


def _rank_nodes(rank, nranks):
    """compute -> all-reduce on world -> all-gather on pg "1" (ranks 0,1) -> ring send/recv."""
    nodes = [Node(id=10, name="fwd", type=COMP, duration_micros=1500, attr=[Attr(name="is_cpu_op", bool_val=False)]),
             _coll(11, 0, 4096, deps=[10], name="ar")]
    last = 11
    if rank < 2:
        nodes.append(_coll(12, 2, 2048, deps=[11], pg="1", name="ag"))
        last = 12
    nodes.append(Node(id=13, name="send", type=SEND, data_deps=[last],
                      attr=[Attr(name="comm_dst", int64_val=(rank + 1) % nranks), Attr(name="comm_size", uint64_val=777),
                            Attr(name="comm_tag", int64_val=5)]))
    nodes.append(Node(id=14, name="recv", type=RECV, ctrl_deps=[last],
                      attr=[Attr(name="comm_src", int64_val=(rank - 1) % nranks), Attr(name="comm_size", uint64_val=777),
                            Attr(name="comm_tag", int64_val=5)]))
    nodes.append(Node(id=15, name="bwd", type=COMP, duration_micros=3000, data_deps=[14]))
    return nodes


def _write_ranks(tmp_path, nranks=3, fmt="pb"):
    paths = []
    for r in range(nranks):
        p = tmp_path / f"et.{r}.{'json' if fmt == 'json' else 'et'}"
        nodes = _rank_nodes(r, nranks)
        if fmt == "json":  # chakra_jsonizer: MessageToJson objects one after another
            meta = Meta(version="0.0.4")
            p.write_text(MessageToJson(meta) + "".join(MessageToJson(n) for n in nodes))
        elif fmt == "gz":
            p.write_bytes(gzip.compress(_stream(nodes)))
        else:
            p.write_bytes(_stream(nodes))
        paths.append(str(p))
    return paths


@pytest.mark.parametrize("fmt", ["pb", "gz", "json"])
def test_chakra_round_trip(tmp_path, fmt):
    t = chakra.load(_write_ranks(tmp_path, fmt=fmt))
    assert t.nranks == 3 and t.groups == {"pg1": [0, 1], "world": [0, 1, 2]}
    ops = t.ops[0]
    assert [o.kind for o in ops] == ["compute", "collective", "collective", "send", "recv", "compute"]
    assert ops[0].duration_s == pytest.approx(0.0015)
    assert (ops[1].op, ops[1].group, ops[1].size_bytes) == ("all_reduce", "world", 4096)
    assert (ops[2].op, ops[2].group, ops[2].size_bytes) == ("all_gather", "pg1", 2048)
    assert ops[3].peer == 1 and ops[4].peer == 2 and ops[3].size_bytes == 777
    assert ops[5].deps == (ops[4].id,) and ops[1].deps == (ops[0].id,)
    assert [o.kind for o in t.ops[2]] == ["compute", "collective", "send", "recv", "compute"]


def test_decoder_reads_every_scalar_kind():
    n = Node(id=2**40, type=COMP, attr=[Attr(name="a", int64_val=-5), Attr(name="b", sint64_val=-7),
                                         Attr(name="c", fixed64_val=2**63 + 1), Attr(name="d", double_val=2.5),
                                         Attr(name="e", string_list={"values": ["x", "y"]}),
                                         Attr(name="f", int64_list={"values": [1, -2, 3]})])
    d = chakra.decode_node(n.SerializeToString())
    assert d["id"] == 2**40
    assert d["attr"] == {"a": -5, "b": -7, "c": 2**63 + 1, "d": 2.5, "e": ["x", "y"], "f": [1, -2, 3]}


def test_comm_groups_file_overrides_inference(tmp_path):
    t = chakra.load(_write_ranks(tmp_path), comm_groups={"1": [0, 1]})
    assert t.groups["pg1"] == [0, 1]


@pytest.mark.parametrize("corrupt,msg", [
    (lambda b: b[:-3], "truncated file"),
    (lambda b: b"", "an empty stream"),
    (lambda b: b"\x05\x08\x01", "left"),
    (lambda b: b"\xff" * 12, "varint"),
    (lambda b: gzip.compress(b)[:-8], "gzip"),
    (lambda b: b"{\"type\": \"COMP_NODE\"}", "no GlobalMetadata"),
    (lambda b: b"[1, 2", "chakra JSON"),
])
def test_corrupt_chakra_files(tmp_path, corrupt, msg):
    paths = _write_ranks(tmp_path, nranks=2)
    with open(paths[1], "rb") as f:
        data = f.read()
    with open(paths[1], "wb") as f:
        f.write(corrupt(data))
    with pytest.raises(InputError) as e:
        chakra.load(paths)
    assert str(e.value).startswith(f"{paths[1]}: chakra trace: expected") and msg in str(e.value), str(e.value)


def _one_file(tmp_path, nodes, name="x.et"):
    p = tmp_path / name
    p.write_bytes(_stream(nodes))
    return str(p)


def test_semantic_errors_name_the_node(tmp_path):
    bad_type = _one_file(tmp_path, [_coll(1, 3, 10)])  # GATHER has no dtnet equivalent
    with pytest.raises(InputError, match=r"x.et: node 1.comm_type: expected one of ALL_REDUCE.*found GATHER"):
        chakra.load([bad_type, bad_type])
    dangling = _one_file(tmp_path, [Node(id=1, type=COMP, data_deps=[99])], "d.et")
    with pytest.raises(InputError, match=r"d.et: node 1.deps: expected ids of nodes in the same file, found 99"):
        chakra.load([dangling])
    no_size = _one_file(tmp_path, [Node(id=1, type=COLL, attr=[Attr(name="comm_type", int64_val=0)])], "s.et")
    with pytest.raises(InputError, match="node 1.comm_size: expected a byte count"):
        chakra.load([no_size])


def test_ranks_that_disagree_are_named(tmp_path):
    a = _one_file(tmp_path, [_coll(1, 0, 100)], "a.et")
    b = _one_file(tmp_path, [_coll(1, 0, 200)], "b.et")
    with pytest.raises(InputError) as e:
        chakra.load([a, b])
    assert str(e.value).startswith(f"{b}: node 1: expected collective 0 of group world to be all_reduce of 100 bytes")
    lonely = _one_file(tmp_path, [Node(id=1, type=SEND, attr=[Attr(name="comm_dst", int64_val=1),
                                                              Attr(name="comm_size", int64_val=1)])], "l.et")
    empty = _one_file(tmp_path, [], "e.et")
    with pytest.raises(InputError, match="e.et: send p2p0>1#0#0: expected a matching recv on rank 1"):
        chakra.load([lonely, empty])


def test_cyclic_dependencies_are_rejected(tmp_path):
    p = _one_file(tmp_path, [Node(id=1, type=COMP, data_deps=[2]), Node(id=2, type=COMP, data_deps=[1])])
    with pytest.raises(InputError, match="deps: expected no dependency cycle"):
        chakra.load([p])


def test_json_snake_case_array_form(tmp_path):
    p = tmp_path / "a.json"
    p.write_text(json.dumps([{"version": "0.0.4"},
                             {"id": "1", "type": "COMP_NODE", "duration_micros": "20"},
                             {"id": "2", "type": "COMM_COLL_NODE", "data_deps": ["1"],
                              "attr": [{"name": "comm_type", "int64_val": "7"},
                                       {"name": "comm_size", "uint64_val": "64"}]}]))
    t = chakra.load([str(p), str(p)])
    assert t.ops[1][1].op == "reduce_scatter" and t.ops[1][1].size_bytes == 64


def _flops_rank():
    """A CPU op (a launch, 40 us of host time) -> a GEMM given only as num_ops -> all-reduce."""
    return [Node(id=1, name="aten::mm", type=COMP, duration_micros=40, attr=[Attr(name="is_cpu_op", bool_val=True)]),
            Node(id=2, name="sm90_gemm", type=COMP, data_deps=[1],
                 attr=[Attr(name="is_cpu_op", bool_val=False), Attr(name="num_ops", int64_val=2 * 10 ** 12)]),
            _coll(3, 0, 4096, deps=[2], name="ar"),
            Node(id=4, name="cpu_tail", type=COMP, duration_micros=90, data_deps=[3],
                 attr=[Attr(name="is_cpu_op", bool_val=True)]),
            Node(id=5, name="opt", type=COMP, duration_micros=70, data_deps=[4])]


def _write_nodes(tmp_path, per_rank):
    paths = []
    for r, nodes in enumerate(per_rank):
        p = tmp_path / f"f{r}.et"
        p.write_bytes(_stream(nodes))
        paths.append(str(p))
    return paths


def test_num_ops_are_timed_at_the_declared_peak_and_cpu_ops_stay_off_the_gpu(tmp_path):
    paths = _write_nodes(tmp_path, [_flops_rank(), _flops_rank()])
    t = chakra.load(paths, gpu_tflops=1000.0)
    ops = t.ops[0]
    assert [(o.kind, o.label) for o in ops] == [("compute", "sm90_gemm"), ("collective", "ar"), ("compute", "opt")]
    assert ops[0].duration_s == pytest.approx(2e12 / 1000e12)  # 2 TFLOP at 1000 TFLOP/s = 2 ms
    assert ops[0].deps == () and ops[2].deps == (ops[1].id,)  # the CPU ops passed their deps on
    assert t.meta["gpu_tflops"] == 1000.0
    assert "2 compute nodes (all ranks) had num_ops and no duration: timed at 1000 TFLOP/s" in t.meta["assumed"]
    assert "4 CPU ops (is_cpu_op, all ranks) kept off the GPU's critical path" in t.meta["assumed"]
    assert "0.26 ms of host time" in t.meta["assumed"]


def test_num_ops_without_a_peak_rate_is_an_error(tmp_path):
    paths = _write_nodes(tmp_path, [_flops_rank(), _flops_rank()])
    with pytest.raises(InputError, match=r"node 2.duration_micros: expected a duration, or --gpu-tflops"):
        chakra.load(paths)


def test_the_cli_says_what_it_assumed(tmp_path, capsys):
    from dtnet import cli
    paths = _write_nodes(tmp_path, [_flops_rank(), _flops_rank()])
    out = tmp_path / "t.json"
    assert cli.main(["trace", "import", "chakra", *paths, "--gpu-tflops", "989", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[1].startswith("assumed: 2 compute nodes (all ranks) had num_ops") and "989 TFLOP/s" in lines[1]
    assert cli.main(["trace", "import", "kineto", *paths, "--gpu-tflops", "989", "--out", str(out)]) == 2
    assert "--gpu-tflops: expected only with chakra" in capsys.readouterr().err
