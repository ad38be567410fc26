"""Experiment files: YAML in, a validated read-only Experiment out.

Real-cluster units are stated in the file (``link_gbps``, ``size_bytes``,
``compute_ms``); the ``scale`` section says how they shrink to fit the
machine. Unknown keys, wrong types and out-of-range values raise
InputError, whose message is one line naming the file and key.
"""
from __future__ import annotations

import copy
import itertools
import math
import os
import re
from dataclasses import asdict, dataclass, field

import yaml

from badinput import InputError
from experiment import placement, program
from topologies import build as build_fabric
from topologies import load_fabric_file

ROUTINGS = ("shortest", "ecmp", "congestion-aware", "coschedule")
DATAPATHS = ("auto", "kernel", "userspace", "afxdp")
# Mininet's TCLink refuses bw above 1000 Mb/s; below 0.1 Mb/s HTB is coarse.
MAX_EMULATED_MBPS = 1000.0
MIN_EMULATED_MBPS = 0.1
MAX_INT = (1 << 63) - 1
JOB_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class Scale:
    link: float
    bytes: float

    @property
    def dilation(self) -> float:
        """Emulated seconds per real second."""
        return self.bytes / self.link


@dataclass(frozen=True)
class Job:
    name: str
    hosts: object  # "all", host names, {"count", "placement"[, "seed"]} or {"servers": N or [ids]}
    workload: dict
    start_ms: float = 0.0
    order: str = "as-listed"


ORDERS = ("as-listed", "rail-aligned")
LINK_STATES = ("down", "up")
FAULT_KINDS = ("link", "switch", "straggler", "controller")


@dataclass(frozen=True)
class Fault:
    """One fault, at_ms after the replay starts (real-cluster ms). Exactly one
    of link, switch, straggler and controller is set: it says what fails."""
    at_ms: float
    link: tuple | None = None        # the two nodes of a fabric link
    state: str | None = None         # link and switch: down or up
    switch: str | None = None        # an OpenFlow switch: all its links and its controller session
    straggler: str | None = None     # a host running a rank: from at_ms its compute takes factor x as long
    factor: float | None = None
    controller: str | None = None    # "restart": stop it, wait down_ms, start it again
    down_ms: float = 0.0

    @property
    def kind(self) -> str:
        return next(k for k in FAULT_KINDS if getattr(self, k) is not None)

    def describe(self) -> str:
        if self.link is not None:
            return f"link {self.link[0]}-{self.link[1]} {self.state}"
        if self.switch is not None:
            return f"switch {self.switch} {self.state}"
        if self.straggler is not None:
            return f"straggler {self.straggler} x{self.factor:g}"
        return f"controller restart (down {self.down_ms:g} ms)"

    def to_dict(self) -> dict:
        keys = {"link": ("link", "state"), "switch": ("switch", "state"), "straggler": ("straggler", "factor"),
                "controller": ("controller", "down_ms")}[self.kind]
        d = {"at_ms": self.at_ms, **{k: getattr(self, k) for k in keys}}
        if self.link is not None:
            d["link"] = list(self.link)
        return d


@dataclass(frozen=True)
class Capture:
    """tcpdump on the switch side of these fabric links during the replay."""
    links: tuple = ()  # ((a, b), ...)
    max_packets: int = 2000
    snaplen: int = 128


@dataclass(frozen=True)
class Testbed:
    datapath: str = "auto"
    slice_bytes: int = 16384
    queue_packets: int = 1000
    timeout_s: float = 600.0
    ready_timeout_s: float = 60.0
    stall_timeout_s: float = 30.0


@dataclass(frozen=True)
class Prediction:
    """The alpha-beta model each collective is compared with (summary.json predicted_cct_s)."""
    # Real-cluster seconds each step costs besides its bytes. 0: the emulated links carry
    # no propagation or switching delay, so the emulator should match a model without one.
    latency_us: float = 0.0


@dataclass(frozen=True)
class Experiment:
    name: str
    topology: dict
    scale: Scale
    routing: str
    jobs: tuple
    testbed: Testbed
    description: str = ""
    faults: tuple = ()
    capture: Capture = Capture()
    prediction: Prediction = Prediction()
    sweep: tuple = ()  # points, each a tuple of (key.path, value) overrides
    source: str | None = None
    raw: dict = field(default_factory=dict, compare=False)

    def fabric(self):
        topo = dict(self.topology)
        if "file" in topo:  # a fabric file, its path made absolute by parse
            return load_fabric_file(topo["file"])
        kind = topo.pop("kind")
        return build_fabric(kind, topo, file=self.source)

    def emulated_mbps(self, link_gbps: float) -> float:
        return link_gbps * 1000.0 * self.scale.link


# -- loading ----------------------------------------------------------------

class _DuplicateKey(yaml.constructor.ConstructorError):
    pass


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses a key written twice in one mapping (plain YAML keeps the last one
    silently, so a second `scale:` would quietly replace the first)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` may be overridden on purpose
            key = self.construct_object(key_node, deep=deep)
            try:
                if key in seen:
                    raise _DuplicateKey(None, None, key, key_node.start_mark)
                seen.add(key)
            except TypeError:
                pass  # an unhashable key: SafeLoader says so itself
        return super().construct_mapping(node, deep)


def load(path: str, overrides: list[str] | None = None) -> Experiment:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise InputError("file", "a readable experiment file", e.strerror, path) from None
    except UnicodeDecodeError as e:
        raise InputError("file", "a UTF-8 text file", f"byte {e.object[e.start]:#04x} at offset {e.start}",
                          path) from None
    try:
        data = yaml.load(text, Loader=_Loader)
    except _DuplicateKey as e:
        raise InputError(f"line {e.problem_mark.line + 1}", "each key once in a mapping",
                          e.problem, path) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "yaml"
        raise InputError(where, "valid YAML", getattr(e, "problem", None) or str(e), path) from None
    except RecursionError:
        raise InputError("yaml", "a document nested a few levels deep", "nesting too deep to read",
                          path) from None
    if data is None:
        raise InputError("top level", "a mapping of experiment keys (name, topology, scale, jobs)",
                          "an empty document", path)
    data = apply_overrides(data, overrides or [], path)
    return parse(data, path)


def apply_overrides(data, overrides: list[str], file: str | None = None):
    """Apply ``a.b.c=value`` overrides; value is read as a YAML scalar."""
    data = copy.deepcopy(data) if data is not None else {}
    for item in overrides:
        keypath, eq, value = item.partition("=")
        if not eq or not keypath:
            raise InputError("--set", "key.path=value", item, file)
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            parsed = value
        set_path(data, keypath, parsed, file)
    return data


def set_path(data, keypath: str, value, file: str | None = None, label: str = "--set") -> None:
    """Set data[a][b][c] = value for keypath 'a.b.c' in place; list items by index.

    A string that reads as a number becomes one: YAML 1.1 reads '5e-4' (no
    dot) as a string, and users mean a number.
    """
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    node = data
    parts = keypath.split(".")
    for i, part in enumerate(parts[:-1]):
        if isinstance(node, list):
            try:
                node = node[int(part)]
            except (ValueError, IndexError):
                raise InputError(f"{label} " + ".".join(parts[:i + 1]), "a list index", part, file) from None
            continue
        if not isinstance(node, dict):
            raise InputError(f"{label} " + ".".join(parts[:i + 1]), "a mapping", node, file)
        node = node.setdefault(part, {})
    last = parts[-1]
    if isinstance(node, list):
        try:
            node[int(last)] = value
        except (ValueError, IndexError):
            raise InputError(f"{label} {keypath}", "a list index", last, file) from None
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise InputError(f"{label} {keypath}", "a mapping", node, file)


class _Section:
    """Reads one mapping, tracking which keys were used so leftovers are errors."""

    def __init__(self, data, key: str, file):
        if not isinstance(data, dict):
            raise InputError(key or "top level", "a mapping", data, file)
        self.data, self.key, self.file, self.used = data, key, file, set()

    def path(self, name):
        return f"{self.key}.{name}" if self.key else name

    def get(self, name, types, default=..., check=None, expected=None):
        self.used.add(name)
        if name not in self.data:
            if default is ...:
                raise InputError(self.path(name), f"a value ({expected or _tname(types)})", None, self.file)
            return default
        value = self.data[name]
        if isinstance(value, bool) and bool not in _as_tuple(types):
            raise InputError(self.path(name), expected or _tname(types), value, self.file)
        if not isinstance(value, types):
            raise InputError(self.path(name), expected or _tname(types), value, self.file)
        if check is not None and not check(value):
            raise InputError(self.path(name), expected or "a valid value", value, self.file)
        return value

    def done(self):
        for k in self.data:
            if k not in self.used:
                raise InputError(self.path(k), "no such key here (allowed: " +
                                  ", ".join(sorted(self.used)) + ")", k, self.file)


def _as_tuple(t):
    return t if isinstance(t, tuple) else (t,)


def _tname(types) -> str:
    names = {int: "an integer", float: "a number", str: "a string", dict: "a mapping",
             list: "a list", bool: "true or false"}
    return " or ".join(names.get(t, t.__name__) for t in _as_tuple(types))


NUM = (int, float)


def _check_numbers(data, file) -> None:
    """Every number is finite and fits 64 bits: sizes, rates and times all meet float arithmetic
    later, where 1e400 or .inf would overflow or never end."""
    stack, seen = [("", data)], set()
    while stack:
        path, node = stack.pop()
        if isinstance(node, (dict, list)):
            if id(node) in seen:  # YAML aliases may share or nest a node
                continue
            seen.add(id(node))
            if isinstance(node, dict):
                children = [(f"{path}.{k}" if path else str(k), v) for k, v in node.items()]
            else:
                children = [(f"{path}[{i}]", v) for i, v in enumerate(node)]
            stack += reversed(children)  # popped in file order
        elif isinstance(node, float) and not math.isfinite(node) or \
                isinstance(node, int) and not isinstance(node, bool) and abs(node) > MAX_INT:
            raise InputError(path or "top level", "a finite number within 64 bits", node, file)


def parse(data, file: str | None = None) -> Experiment:
    _check_numbers(data, file)
    top = _Section(data, "", file)
    name = top.get("name", str, check=lambda s: s and "/" not in s, expected="a name without '/'")
    description = top.get("description", str, "")

    topo = dict(top.get("topology", dict))
    if "file" in topo:  # your own fabric: docs/fabrics.md
        extra = sorted(set(topo) - {"file"}, key=str)
        if extra:
            raise InputError(f"topology.{extra[0]}", "nothing beside topology.file (the file states the fabric)",
                             "a key", file)
        if not isinstance(topo["file"], str) or not topo["file"]:
            raise InputError("topology.file", "the path of a fabric file (.yaml or .graphml)", topo["file"], file)
        path = _beside(file, topo["file"])
        if not os.path.isfile(path):
            raise InputError("topology.file", "a fabric file (.yaml or .graphml; a relative path is relative to "
                             "the experiment file)", f"{path} (no such file)", file)
        fabric = load_fabric_file(path)  # its own errors name the fabric file
        topo = {"file": path}
    else:
        if not isinstance(topo.get("kind"), str):
            raise InputError("topology.kind", "a fabric kind, or topology.file", topo.get("kind"), file)
        topo.setdefault("link_gbps", 400)
        fabric = build_fabric(topo["kind"], {k: v for k, v in topo.items() if k != "kind"}, file=file)
        # Every builder default spelled out, so config.yaml states the fabric in full.
        topo = {"kind": topo["kind"], **fabric.params, "link_gbps": topo["link_gbps"]}

    sc = _Section(top.get("scale", dict), "scale", file)
    scale = Scale(
        link=float(sc.get("link", NUM, check=lambda v: 0 < v <= 1, expected="a factor in (0, 1]")),
        bytes=float(sc.get("bytes", NUM, check=lambda v: 0 < v <= 1, expected="a factor in (0, 1]")),
    )
    sc.done()
    for a, b, d in fabric.links():
        mbps = d["link_gbps"] * 1000 * scale.link
        if not MIN_EMULATED_MBPS <= mbps <= MAX_EMULATED_MBPS:
            raise InputError("scale.link", f"emulated link rates within {MIN_EMULATED_MBPS}.."
                              f"{MAX_EMULATED_MBPS:.0f} Mb/s (link {a}-{b} would be {mbps:.3g} Mb/s)",
                              scale.link, file)

    ctl = _Section(top.get("controller", dict, {}), "controller", file)
    routing = ctl.get("routing", str, "ecmp", check=lambda v: v in ROUTINGS,
                      expected="one of " + ", ".join(ROUTINGS))
    ctl.done()

    tb = _Section(top.get("testbed", dict, {}), "testbed", file)
    testbed = Testbed(
        datapath=tb.get("datapath", str, "auto", check=lambda v: v in DATAPATHS,
                        expected="one of " + ", ".join(DATAPATHS)),
        slice_bytes=tb.get("slice_bytes", int, 16384, check=lambda v: 512 <= v <= 1 << 24,
                           expected="an integer in 512..16777216"),
        queue_packets=tb.get("queue_packets", int, 1000, check=lambda v: 2 <= v <= 100000,
                             expected="an integer in 2..100000"),
        timeout_s=float(tb.get("timeout_s", NUM, 600.0, check=lambda v: v > 0, expected="seconds > 0")),
        ready_timeout_s=float(tb.get("ready_timeout_s", NUM, 60.0, check=lambda v: v > 0,
                                     expected="seconds > 0")),
        # Wall seconds a job may go without progress (no byte moved, no op
        # finished, nothing computing) before the run fails naming who waits.
        stall_timeout_s=float(tb.get("stall_timeout_s", NUM, 30.0, check=lambda v: v >= 2,
                                     expected="seconds >= 2")),
    )
    tb.done()

    jobs_raw = top.get("jobs", list, check=lambda v: len(v) > 0, expected="a non-empty list of jobs")
    jobs = []
    names = set()
    for i, jr in enumerate(jobs_raw):
        js = _Section(jr, f"jobs[{i}]", file)
        # A job's name becomes folder names in the run folder (plans/<job>/, programs/<job>/).
        jname = js.get("name", str, f"j{i}", check=lambda v: bool(JOB_NAME.match(v)),
                       expected="a name of letters, digits, '.', '_' or '-' (at most 64, not starting with '.')")
        if jname in names:
            raise InputError(f"jobs[{i}].name", "a unique job name", jname, file)
        names.add(jname)
        hosts = _hosts(js.get("hosts", (str, list, dict), "all"), fabric, f"jobs[{i}].hosts", file)
        workload = js.get("workload", dict)
        if isinstance(workload.get("trace"), str):
            # Absolute, so that config.yaml in the run folder still finds the file.
            workload = {**workload, "trace": _beside(file, workload["trace"])}
        if program.is_program(workload):
            workload, _ = program.parse_program(workload, f"jobs[{i}].workload", file)
        start_ms = float(js.get("start_ms", NUM, 0.0, check=lambda v: v >= 0, expected="milliseconds >= 0"))
        order = js.get("order", str, "as-listed", check=lambda v: v in ORDERS,
                       expected="one of " + ", ".join(ORDERS))
        if order == "rail-aligned" and fabric.kind != "rail-optimized":
            raise InputError(f"jobs[{i}].order", "as-listed on a fabric that is not rail-optimized",
                              order, file)
        js.done()
        jobs.append(Job(jname, hosts, workload, start_ms, order))
    try:
        placed = placement.place([(j.name, j.hosts) for j in jobs], fabric)
    except InputError as e:
        raise InputError(e.key, e.expected, e.found, file) from None
    ranked = {h for hosts in placed for h in hosts}
    faults = _faults(top.get("faults", list, []), fabric, ranked, file)
    capture = _capture(top.get("capture", dict, {}), fabric, file)
    ps = _Section(top.get("prediction", dict, {}), "prediction", file)
    prediction = Prediction(latency_us=float(ps.get("latency_us", NUM, 0.0, check=lambda v: 0 <= v <= 1e6,
                                                    expected="microseconds in 0..1000000")))
    ps.done()
    sweep = _sweep(top.get("sweep", dict, {}), file)
    top.done()
    return Experiment(name=name, topology=topo, scale=scale, routing=routing, jobs=tuple(jobs),
                      testbed=testbed, description=description, faults=faults, capture=capture,
                      prediction=prediction, sweep=sweep,
                      source=file, raw=data)


def _faults(items, fabric, ranked_hosts, file) -> tuple:
    out = []
    stragglers = set()
    for i, fr in enumerate(items):
        key = f"faults[{i}]"
        fs = _Section(fr, key, file)
        kinds = [k for k in FAULT_KINDS if k in fr]
        if len(kinds) != 1:
            raise InputError(key, "exactly one of " + ", ".join(FAULT_KINDS), sorted(fr), file)
        at_ms = float(fs.get("at_ms", NUM, check=lambda v: v >= 0, expected="milliseconds >= 0"))
        kind = kinds[0]
        if kind == "link":
            link = fs.get("link", list, check=lambda v: len(v) == 2 and all(isinstance(n, str) for n in v),
                          expected="two node names, [a, b]")
            if not fabric.graph.has_edge(*link):
                raise InputError(f"{key}.link", "two nodes joined by a link of this fabric", link, file)
            fault = Fault(at_ms, link=tuple(link), state=_state(fs))
        elif kind == "switch":
            sw = fs.get("switch", str, check=lambda v: v in fabric.openflow_switches,
                        expected="an OpenFlow switch of this fabric")
            fault = Fault(at_ms, switch=sw, state=_state(fs))
        elif kind == "straggler":
            host = fs.get("straggler", str, check=lambda v: v in ranked_hosts, expected="a host that runs a rank")
            if host in stragglers:
                raise InputError(f"{key}.straggler", "one straggler fault per host", host, file)
            stragglers.add(host)
            factor = float(fs.get("factor", NUM, check=lambda v: 1 <= v <= 1000,
                                  expected="a slowdown factor in 1..1000"))
            fault = Fault(at_ms, straggler=host, factor=factor)
        else:
            what = fs.get("controller", str, check=lambda v: v == "restart", expected="restart")
            down_ms = float(fs.get("down_ms", NUM, 0.0, check=lambda v: v >= 0, expected="milliseconds >= 0"))
            fault = Fault(at_ms, controller=what, down_ms=down_ms)
        fs.done()
        out.append(fault)
    return tuple(sorted(out, key=lambda f: f.at_ms))


def _state(fs: _Section) -> str:
    return fs.get("state", str, check=lambda v: v in LINK_STATES, expected="down or up")


def _capture(data, fabric, file) -> Capture:
    cs = _Section(data, "capture", file)
    links = cs.get("links", list, [])
    for j, link in enumerate(links):
        if not (isinstance(link, list) and len(link) == 2 and all(isinstance(n, str) for n in link)):
            raise InputError(f"capture.links[{j}]", "two node names, [a, b]", link, file)
        if not fabric.graph.has_edge(*link):
            raise InputError(f"capture.links[{j}]", "two nodes joined by a link of this fabric", link, file)
    if len({frozenset(ln) for ln in links}) != len(links):
        raise InputError("capture.links", "each link once", links, file)
    cap = Capture(
        links=tuple(tuple(ln) for ln in links),
        max_packets=cs.get("max_packets", int, 2000, check=lambda v: 1 <= v <= 10_000_000,
                           expected="an integer in 1..10000000"),
        snaplen=cs.get("snaplen", int, 128, check=lambda v: 68 <= v <= 262144, expected="bytes in 68..262144"),
    )
    cs.done()
    return cap


def _sweep(data, file) -> tuple:
    """The points of a sweep: grid (every combination) or list, as tuples of (key.path, value)."""
    if not data:
        return ()
    ss = _Section(data, "sweep", file)
    grid = ss.get("grid", dict, None)
    items = ss.get("list", list, None)
    ss.done()
    if (grid is None) == (items is None):
        raise InputError("sweep", "either grid: {key.path: [values]} or list: [{key.path: value}, ...]",
                          data, file)

    def key_ok(key, where):
        if not isinstance(key, str) or not key or key.split(".")[0] == "sweep" or "" in key.split("."):
            raise InputError(where, "a dotted key path outside sweep, e.g. controller.routing", key, file)

    if grid is not None:
        if not grid:
            raise InputError("sweep.grid", "at least one key.path: [values]", grid, file)
        for k, values in grid.items():
            key_ok(k, f"sweep.grid.{k}")
            if not isinstance(values, list) or not values:
                raise InputError(f"sweep.grid.{k}", "a non-empty list of values", values, file)
        points = [tuple(zip(grid, combo)) for combo in itertools.product(*grid.values())]
    else:
        if not items:
            raise InputError("sweep.list", "at least one point", items, file)
        points = []
        for i, item in enumerate(items):
            if not isinstance(item, dict) or not item:
                raise InputError(f"sweep.list[{i}]", "a mapping of key.path: value", item, file)
            for k in item:
                key_ok(k, f"sweep.list[{i}].{k}")
            points.append(tuple(item.items()))
    for i, p in enumerate(points):
        if p in points[:i]:
            raise InputError("sweep", "distinct points", dict(p), file)
    return tuple(points)


def to_dict(exp: Experiment) -> dict:
    """The experiment with every default filled in; parse(to_dict(exp)) == exp.

    Workload mappings stay as written (trace paths made absolute): their
    defaults belong to the traffic layer, which applies them the same way.
    """
    return {
        "name": exp.name,
        "description": exp.description,
        "topology": dict(exp.topology),
        "scale": {"link": exp.scale.link, "bytes": exp.scale.bytes},
        "controller": {"routing": exp.routing},
        "testbed": asdict(exp.testbed),
        "jobs": [{"name": j.name, "hosts": copy.deepcopy(j.hosts), "order": j.order, "start_ms": j.start_ms,
                  "workload": copy.deepcopy(j.workload)} for j in exp.jobs],
        "faults": [f.to_dict() for f in exp.faults],
        **({"capture": {"links": [list(ln) for ln in exp.capture.links], "max_packets": exp.capture.max_packets,
                        "snaplen": exp.capture.snaplen}} if exp.capture.links else {}),
        "prediction": asdict(exp.prediction),
        **({"sweep": {"list": [dict(copy.deepcopy(p)) for p in exp.sweep]}} if exp.sweep else {}),
    }


def write_resolved(exp: Experiment, path: str, notes=()) -> None:
    """config.yaml of a run: `dtnet run DIR/config.yaml` repeats it. notes: more comment lines."""
    with open(path, "w") as f:
        f.write(f"# {exp.name}: the experiment as run, from {exp.source or 'a mapping'}, with --set overrides\n"
                "# applied and every default filled in. `dtnet run` this file to repeat the run.\n")
        for line in notes:
            f.write("# " + " ".join(str(line).splitlines()) + "\n")
        yaml.safe_dump(to_dict(exp), f, sort_keys=False)


def _hosts(hosts, fabric, key, file):
    """A job's hosts, checked and with placement defaults filled in (see experiment.placement)."""
    all_hosts = fabric.hosts
    if isinstance(hosts, str):
        if hosts != "all":
            raise InputError(key, "'all', a list of host names, {count: N} or {servers: ...}", hosts, file)
        return hosts
    if isinstance(hosts, list):
        if not hosts:
            raise InputError(key, "at least one host", hosts, file)
        for h in hosts:
            if h not in all_hosts:
                raise InputError(key, f"host names of this fabric (h0..h{len(all_hosts) - 1})", h, file)
        if len(set(hosts)) != len(hosts):
            raise InputError(key, "distinct host names", hosts, file)
        return hosts
    sec = _Section(hosts, key, file)
    if "servers" in hosts:
        if fabric.kind != "rail-optimized":
            raise InputError(f"{key}.servers", "a rail-optimized fabric (servers exist only there)",
                              fabric.kind, file)
        n = fabric.params["servers"]
        servers = sec.get("servers", (int, list), expected=f"a count in 1..{n} or a list of server ids")
        if isinstance(servers, int) and not 1 <= servers <= n:
            raise InputError(f"{key}.servers", f"a count in 1..{n}", servers, file)
        if isinstance(servers, list) and (not servers or len(set(servers)) != len(servers) or not all(
                isinstance(s, int) and not isinstance(s, bool) and 0 <= s < n for s in servers)):
            raise InputError(f"{key}.servers", f"distinct server ids in 0..{n - 1}", servers, file)
        sec.done()
        return {"servers": servers}
    count = sec.get("count", int, check=lambda v: 1 <= v <= len(all_hosts),
                    expected=f"an integer in 1..{len(all_hosts)}")
    how = sec.get("placement", str, "packed", check=lambda v: v in placement.PLACEMENTS,
                  expected="one of " + ", ".join(placement.PLACEMENTS))
    out = {"count": count, "placement": how}
    if how == "random":
        out["seed"] = sec.get("seed", int, 0)
    elif "seed" in hosts:
        raise InputError(f"{key}.seed", "no seed unless placement is random", hosts["seed"], file)
    sec.done()
    return out


def job_hosts(job: Job, fabric) -> list[str]:
    """The hosts of one job placed alone, in rank order; see jobs_hosts for several jobs."""
    return jobs_hosts((job,), fabric)[0]


def jobs_hosts(jobs, fabric) -> list[list[str]]:
    """The fabric hosts of each job, in rank order; no two jobs share a host."""
    placed = placement.place([(j.name, j.hosts) for j in jobs], fabric)
    return [rail_aligned(h, fabric) if j.order == "rail-aligned" else h for j, h in zip(jobs, placed)]


def rail_aligned(hosts: list[str], fabric) -> list[str]:
    """Order hosts server by server, alternating GPU direction ("snake"), so
    that each step from one server to the next joins GPUs on the same rail."""
    by_server: dict[int, list[str]] = {}
    for h in hosts:
        by_server.setdefault(fabric.node(h)["server"], []).append(h)
    out = []
    for i, s in enumerate(sorted(by_server)):
        gpus = sorted(by_server[s], key=lambda h: fabric.node(h)["gpu"])
        out += gpus if i % 2 == 0 else gpus[::-1]
    return out


def resolve_path(exp: Experiment, path: str) -> str:
    """Paths inside an experiment are relative to the experiment file."""
    return _beside(exp.source, path)


def _beside(file: str | None, path: str) -> str:
    if os.path.isabs(path) or not file:
        return path
    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(file)), path))
