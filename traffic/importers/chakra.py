"""MLCommons Chakra execution traces (one file per rank) -> Trace.

The protobuf form is a stream of varint-length-prefixed messages: GlobalMetadata, then Nodes
(chakra's protolib encodeMessage; gzip allowed). It is decoded here from the wire format by
the field numbers of chakra's schema/protobuf/et_def.proto, so no generated code is needed.
The JSON form is what chakra_jsonizer writes (MessageToJson objects one after another), or
the same objects in a JSON array.
"""
from __future__ import annotations

import gzip
import json
import struct
import zlib

from badinput import InputError, files
from traffic.importers.assemble import Assembler

# et_def.proto field numbers
NODE_ID, NODE_NAME, NODE_TYPE, NODE_CTRL_DEPS, NODE_DATA_DEPS = 1, 2, 3, 4, 5
NODE_START_MICROS, NODE_DURATION_MICROS, NODE_ATTR = 6, 7, 10
META_VERSION, META_ATTR = 1, 2
ATTR_NAME = 1
NODE_TYPES = {0: "INVALID_NODE", 1: "METADATA_NODE", 2: "MEM_LOAD_NODE", 3: "MEM_STORE_NODE", 4: "COMP_NODE",
              5: "COMM_SEND_NODE", 6: "COMM_RECV_NODE", 7: "COMM_COLL_NODE", 8: "STORAGE_NODE", 9: "BATCH_NODE",
              10: "CHECKPOINT_NODE"}
COMM_TYPES = {0: "ALL_REDUCE", 1: "REDUCE", 2: "ALL_GATHER", 3: "GATHER", 4: "SCATTER", 5: "BROADCAST",
              6: "ALL_TO_ALL", 7: "REDUCE_SCATTER", 8: "REDUCE_SCATTER_BLOCK", 9: "BARRIER"}
OUR_OP = {"ALL_REDUCE": "all_reduce", "REDUCE": "reduce", "ALL_GATHER": "all_gather", "BROADCAST": "broadcast",
          "ALL_TO_ALL": "all_to_all", "REDUCE_SCATTER": "reduce_scatter", "REDUCE_SCATTER_BLOCK": "reduce_scatter",
          "BARRIER": "all_reduce"}  # a barrier is a tiny all-reduce in NCCL

# AttributeProto's oneof: field number -> (name, decoder kind)
_SCALARS = {3: "double", 5: "float", 7: "int32", 9: "int64", 11: "uint32", 13: "uint64", 15: "sint32", 17: "sint64",
            19: "fixed32", 21: "fixed64", 23: "sfixed32", 25: "sfixed64", 27: "bool", 29: "string", 31: "bytes"}
_LISTS = {n + 1: kind for n, kind in _SCALARS.items()}  # each *_list is a message of `repeated values = 1`


class WireError(Exception):
    pass


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise WireError("a varint runs past the end")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise WireError("a varint is longer than 10 bytes")


def fields(buf: bytes):
    """Yields (field number, wire type, value) of one message; value is int or bytes."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            if pos + 8 > len(buf):
                raise WireError("a 64-bit field runs past the end")
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = _varint(buf, pos)
            if pos + n > len(buf):
                raise WireError(f"field {number} says {n} bytes, {len(buf) - pos} left")
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            if pos + 4 > len(buf):
                raise WireError("a 32-bit field runs past the end")
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise WireError(f"wire type {wire} (groups are not used by Chakra)")
        yield number, wire, value


def _signed64(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def _scalar(kind, wire, value):
    if kind in ("string", "bytes"):
        if wire != 2:
            raise WireError(f"{kind} with wire type {wire}")
        return value.decode("utf-8", "replace") if kind == "string" else value
    if kind in ("double", "fixed64", "sfixed64"):
        if wire != 1:
            raise WireError(f"{kind} with wire type {wire}")
        return struct.unpack("<" + {"double": "d", "fixed64": "Q", "sfixed64": "q"}[kind], value)[0]
    if kind in ("float", "fixed32", "sfixed32"):
        if wire != 5:
            raise WireError(f"{kind} with wire type {wire}")
        return struct.unpack("<" + {"float": "f", "fixed32": "I", "sfixed32": "i"}[kind], value)[0]
    if wire != 0:
        raise WireError(f"{kind} with wire type {wire}")
    if kind in ("sint32", "sint64"):
        return (value >> 1) ^ -(value & 1)
    if kind == "bool":
        return bool(value)
    if kind in ("int32", "int64"):
        return _signed64(value)
    return value


def _list(kind, buf):
    out = []
    for number, wire, value in fields(buf):
        if number != 1:
            continue
        if wire == 2 and kind not in ("string", "bytes"):  # packed
            pos = 0
            while pos < len(value):
                if kind in ("double", "fixed64", "sfixed64", "float", "fixed32", "sfixed32"):
                    width = 8 if kind in ("double", "fixed64", "sfixed64") else 4
                    if pos + width > len(value):
                        raise WireError(f"a packed {kind} list of {len(value)} bytes")
                    out.append(_scalar(kind, 1 if width == 8 else 5, value[pos:pos + width]))
                    pos += width
                else:
                    v, pos = _varint(value, pos)
                    out.append(_scalar(kind, 0, v))
        else:
            out.append(_scalar(kind, wire, value))
    return out


def _embedded(what, wire, value) -> bytes:
    """A sub-message or packed list: only wire type 2 carries one."""
    if wire != 2:
        raise WireError(f"{what} with wire type {wire}")
    return value


def decode_attr(buf) -> tuple[str, object]:
    name, val = "", None
    for number, wire, value in fields(buf):
        if number == ATTR_NAME:
            name = _scalar("string", wire, value)
        elif number in _SCALARS:
            val = _scalar(_SCALARS[number], wire, value)
        elif number in _LISTS:
            val = _list(_LISTS[number], _embedded(f"a {_LISTS[number]} list", wire, value))
    return name, val


def _uints(wire, value):
    if wire == 0:
        return [value]
    _embedded("a packed list of ids", wire, value)
    out, pos = [], 0
    while pos < len(value):
        v, pos = _varint(value, pos)
        out.append(v)
    return out


def decode_node(buf) -> dict:
    node = {"id": 0, "name": "", "type": 0, "ctrl_deps": [], "data_deps": [], "duration_micros": 0, "attr": {}}
    for number, wire, value in fields(buf):
        if number == NODE_ID:
            node["id"] = _scalar("uint64", wire, value)
        elif number == NODE_NAME:
            node["name"] = _scalar("string", wire, value)
        elif number == NODE_TYPE:
            node["type"] = _scalar("int32", wire, value)
        elif number in (NODE_CTRL_DEPS, NODE_DATA_DEPS):
            key = "ctrl_deps" if number == NODE_CTRL_DEPS else "data_deps"
            node[key].extend(_uints(wire, value))
        elif number == NODE_DURATION_MICROS:
            node["duration_micros"] = _scalar("uint64", wire, value)
        elif number == NODE_ATTR:
            name, val = decode_attr(_embedded("an attribute", wire, value))
            node["attr"][name] = val
    return node


def read_stream(data: bytes):
    """Messages of a length-prefixed stream, as byte strings."""
    pos = 0
    while pos < len(data):
        n, pos = _varint(data, pos)
        if n == 0:  # protolib reads a zero length as the end
            return
        if pos + n > len(data):
            raise WireError(f"a message says {n} bytes, {len(data) - pos} left (truncated file?)")
        yield data[pos:pos + n]
        pos += n


# ---- JSON form -------------------------------------------------------------------------------

_JSON_SCALAR_KEYS = {f"{kind}_val": kind for kind in _SCALARS.values()}


def _camel_to_snake(s):
    return "".join("_" + c.lower() if c.isupper() else c for c in s)


def _json_objects(text):
    dec = json.JSONDecoder()
    pos, out = 0, []
    text = text.strip()
    if text.startswith("["):
        arr = json.loads(text)
        return arr if isinstance(arr, list) else [arr]
    while pos < len(text):
        obj, pos = dec.raw_decode(text, pos)
        out.append(obj)
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


def _json_node(obj) -> dict:
    o = {_camel_to_snake(k): v for k, v in obj.items()}
    t = o.get("type", 0)
    if isinstance(t, str):
        rev = {v: k for k, v in NODE_TYPES.items()}
        if t not in rev:
            raise WireError(f"node type {t!r}")
        t = rev[t]
    attrs = {}
    for a in o.get("attr", []):
        a = {_camel_to_snake(k): v for k, v in a.items()}
        name = a.get("name", "")
        for k, v in a.items():
            if k in _JSON_SCALAR_KEYS:
                kind = _JSON_SCALAR_KEYS[k]
                attrs[name] = int(v) if kind not in ("double", "float", "bool", "string", "bytes") else v
            elif k.endswith("_list") and isinstance(v, dict):
                attrs[name] = list(v.get("values", []))
    return {"id": int(o.get("id", 0)), "name": o.get("name", ""), "type": int(t),
            "ctrl_deps": [int(x) for x in o.get("ctrl_deps", [])], "data_deps": [int(x) for x in o.get("data_deps", [])],
            "duration_micros": int(o.get("duration_micros", 0)), "attr": attrs}


# ---- loading ---------------------------------------------------------------------------------

def read_nodes(path: str) -> list[dict]:
    """The Node messages of one file, as dicts; the GlobalMetadata is checked and dropped."""
    data = files.read_bytes(path, "chakra trace", gunzip=True)
    if data.lstrip()[:1] in (b"{", b"["):
        try:
            objs = _json_objects(data.decode("utf-8"))
            if not objs:
                raise WireError("no objects")
            first = objs[0]
            if isinstance(first, dict) and ("type" in first or "dataDeps" in first or "data_deps" in first):
                raise WireError("no GlobalMetadata object first")
            return [_json_node(o) for o in objs[1:]]
        except (ValueError, WireError, AttributeError, TypeError, OverflowError) as e:
            raise InputError("chakra trace", "chakra JSON (GlobalMetadata, then Node objects)", str(e)[:80],
                             file=path) from None
        except RecursionError:
            raise InputError("chakra trace", "chakra JSON (GlobalMetadata, then Node objects)",
                             "arrays or objects nested too deep to read", file=path) from None
    try:
        messages = list(read_stream(data))
        if not messages:
            raise WireError("an empty stream")
        meta = list(fields(messages[0]))
        if any(n not in (META_VERSION, META_ATTR) for n, _, _ in meta):
            raise WireError("the first message is not a GlobalMetadata")
        return [decode_node(m) for m in messages[1:]]
    except WireError as e:
        raise InputError("chakra trace", "a protobuf stream of length-prefixed GlobalMetadata and Node messages",
                         str(e), file=path) from None


def is_pytorch_et(path: str) -> bool:
    """PyTorch's own execution trace JSON (ExecutionTraceObserver), which Chakra's converter
    takes as input: an object with "schema" and "nodes" (plain or gzipped)."""
    try:  # a FIFO or a device is no trace of either kind: load refuses it, naming the file
        with files.open_regular(path, "chakra trace") as f:
            head = f.read(1 << 16)
            if head[:2] == b"\x1f\x8b":
                f.seek(0)
                head = gzip.GzipFile(fileobj=f).read(1 << 16)
    except (InputError, OSError, EOFError, zlib.error):
        return False
    head = head.lstrip()
    return head[:1] == b"{" and b'"schema"' in head and b'"nodes"' in head


def load(paths: list[str], comm_groups: dict | None = None, algorithm: str = "ring",
         gpu_tflops: float | None = None) -> "Trace":  # noqa: F821
    """File i is rank i. Groups come from `comm_groups` ({pg_name: [ranks]}, ASTRA-sim's comm group
    file) or else from which files use each pg_name; a node without pg_name uses every rank.
    A compute node with num_ops and no duration is timed at `gpu_tflops` (an error without it);
    nodes with is_cpu_op are host work: they pass their dependencies on and take no GPU time.
    PyTorch execution traces (the converter's input) are read by traffic.importers.pytorch_et."""
    paths = [str(p) for p in paths]
    if paths and all(is_pytorch_et(p) for p in paths):
        from traffic.importers import pytorch_et
        return pytorch_et.load(paths, algorithm=algorithm)
    if gpu_tflops is not None and (not isinstance(gpu_tflops, (int, float)) or not 0 < gpu_tflops < 1e6):
        raise InputError("--gpu-tflops", "a peak rate in TFLOP/s, > 0", gpu_tflops)
    per_rank = [read_nodes(p) for p in paths]
    n = len(paths)
    pg_members: dict[str, set] = {}
    for rank, nodes in enumerate(per_rank):
        for node in nodes:
            if NODE_TYPES.get(node["type"]) == "COMM_COLL_NODE":
                pg = node["attr"].get("pg_name")
                if pg is not None:
                    pg_members.setdefault(str(pg), set()).add(rank)
    asm = Assembler(n, paths, algorithm)
    names = {}
    for pg, ranks in (comm_groups or {}).items():
        names[str(pg)] = asm.group(sorted(ranks), f"pg{pg}")
    for pg, ranks in sorted(pg_members.items()):
        if pg not in names:
            names[pg] = asm.group(sorted(ranks), f"pg{pg}")
    stats = {"timed": 0, "cpu": 0, "cpu_us": 0}
    for rank, nodes in enumerate(per_rank):
        _convert(asm, rank, nodes, names, gpu_tflops, stats)
    meta = {"workload": "import", "format": "chakra", "files": paths}
    assumed = []
    if stats["timed"]:
        meta["gpu_tflops"] = gpu_tflops
        assumed.append(f"{stats['timed']} compute nodes (all ranks) had num_ops and no duration: timed at {gpu_tflops:g} "
                       "TFLOP/s (--gpu-tflops), as if at peak")
    if stats["cpu"]:
        assumed.append(f"{stats['cpu']} CPU ops (is_cpu_op, all ranks) kept off the GPU's critical path: 0 s each, "
                       f"{stats['cpu_us'] / 1e3:g} ms of host time not replayed")
    if assumed:
        meta["assumed"] = "; ".join(assumed)
    return asm.trace(meta)


def _through_cpu_ops(deps, cpu_deps, where, path):
    """Dependencies with every CPU op replaced by what it depended on (recursively)."""
    out, todo, seen = [], list(deps), set()
    while todo:
        d = todo.pop()
        if d in seen:
            continue
        seen.add(d)
        if d in cpu_deps:
            todo.extend(cpu_deps[d])
        else:
            out.append(d)
    return sorted(out)


def _convert(asm, rank, nodes, names, gpu_tflops=None, stats=None):
    path = asm.files[rank]
    stats = stats if stats is not None else {"timed": 0, "cpu": 0, "cpu_us": 0}
    cpu_deps = {nd["id"]: nd["data_deps"] + nd["ctrl_deps"] for nd in nodes
                if NODE_TYPES.get(nd["type"]) == "COMP_NODE" and nd["attr"].get("is_cpu_op") is True}
    for i, node in enumerate(sorted(nodes, key=lambda nd: nd["id"])):
        where = f"node {node['id']}"
        kind = NODE_TYPES.get(node["type"])
        deps = _through_cpu_ops(node["data_deps"] + node["ctrl_deps"], cpu_deps, where, path)
        attr = node["attr"]
        label = node["name"]
        if node["id"] in cpu_deps:
            stats["cpu"] += 1
            stats["cpu_us"] += node["duration_micros"]
            continue
        if kind == "COMM_COLL_NODE":
            ctype = attr.get("comm_type")
            name = COMM_TYPES.get(ctype) if isinstance(ctype, int) else None
            if name not in OUR_OP:
                raise InputError(f"{where}.comm_type", "one of " + ", ".join(OUR_OP), name or ctype, file=path)
            size = _size(attr, where, path)
            pg = attr.get("pg_name")
            group = names[str(pg)] if pg is not None else asm.group(list(range(asm.nranks)))
            root = attr.get("root") if OUR_OP[name] in ("broadcast", "reduce") else None
            asm.collective(rank, node["id"], OUR_OP[name], group, size, deps, label, where,
                           root=root if isinstance(root, int) else None)
        elif kind in ("COMM_SEND_NODE", "COMM_RECV_NODE"):
            send = kind == "COMM_SEND_NODE"
            peer = attr.get("comm_dst" if send else "comm_src")
            if peer is None:
                raise InputError(f"{where}.{'comm_dst' if send else 'comm_src'}", "the peer rank", "nothing", file=path)
            tag = attr.get("comm_tag", 0)
            asm.p2p(rank, node["id"], "send" if send else "recv", peer, _size(attr, where, path), deps, label, where,
                    tag=tag if isinstance(tag, int) else 0)
        elif kind is None:
            raise InputError(f"{where}.type", "a Chakra NodeType (0..10)", node["type"], file=path)
        else:  # compute, memory and metadata nodes all take time on the rank
            duration_s = node["duration_micros"] / 1e6
            num_ops = attr.get("num_ops")
            if kind == "COMP_NODE" and not node["duration_micros"] and num_ops:
                if not isinstance(num_ops, int) or isinstance(num_ops, bool) or num_ops < 0:
                    raise InputError(f"{where}.num_ops", "an operation count >= 0", num_ops, file=path)
                if gpu_tflops is None:
                    raise InputError(f"{where}.duration_micros", "a duration, or --gpu-tflops to time its "
                                     f"num_ops at a declared peak rate", f"none, num_ops={num_ops}", file=path)
                duration_s = num_ops / (gpu_tflops * 1e12)
                stats["timed"] += 1
            asm.compute(rank, node["id"], duration_s, deps, label, where)


def _size(attr, where, path):
    size = attr.get("comm_size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise InputError(f"{where}.comm_size", "a byte count >= 0", size, file=path)
    return size
