"""Experiment files: YAML in, a validated read-only Experiment out.

Real-cluster units are stated in the file (``link_gbps``, ``size_bytes``,
``compute_ms``); the ``scale`` section says how they shrink to fit the
machine. Unknown keys, wrong types and out-of-range values raise
InputError, whose message is one line naming the file and key.
"""
from __future__ import annotations

import copy
import itertools
import json
import math
import os
from dataclasses import asdict, dataclass, field, fields

import yaml

from badinput import InputError, limits
from badinput.files import read_text
from badinput.paths import check_name
from badinput.yamlread import BoundedLoader, DuplicateKey
from controller import registry
from controller.registry import BUILTINS, DEFAULT_POLICY
from experiment import placement, program
from experiment import transport as _transport
from experiment.engine import DEFAULT_ENGINE
from experiment.engine import ENGINES as ENGINE_TABLE
from experiment.settings import setting  # noqa: F401  (part of this module's API)
from topologies import build as build_fabric
from topologies import load_fabric_file

ROUTINGS = tuple(BUILTINS)  # the built-in policies; any package.module:Class is one too
ENGINES = tuple(ENGINE_TABLE)  # the names experiment.engine maps to code
COLLECTIVE_MODELS = ("auto", "detailed", "bundle")
PACKET_UNITS = ("real", "emulated")
WINDOW_CHOICES = ("nccl",)  # flow.window_bytes by name (flowsim.engine.WINDOW_CHOICES gives the bytes)
# flow.headers: what a link carries besides payload (flowsim.network.FRAMING_BYTES gives the bytes)
HEADER_CHOICES = ("none", "ppp", "ethernet")
WINDOW_GROWTHS = ("none", "cubic", "slow-start")  # flow.window_growth (flowsim.window.GROWTHS)
LOSS_MODELS = ("none", "timeouts")  # flow.losses (flowsim.losses.LOSS_MODELS)
DATAPATHS = ("auto", "kernel", "userspace", "afxdp")
# testbed.switch_daemons: the machine's shared ovs-vswitchd, or this many of the run's own
MAX_SWITCH_DAEMONS = 64
# testbed.switch_malloc: the allocator of the run's own switch daemons (auto: tcmalloc where installed)
SWITCH_MALLOCS = ("auto", "tcmalloc", "libc")
ORDERS = ("as-listed", "rail-aligned")
# A link into or out of an OVS switch: at most what Mininet's TCLink takes, 1000 Mb/s (beyond it
# the switch daemon, not the link, would set the rate). NVLink links are kernel bridges shaped by
# HTB, with no OVS port: held to their rate past it (tests/integration/test_shaping.py). Below
# 0.1 Mb/s HTB is coarse.
MAX_EMULATED_MBPS = 1000.0
MIN_EMULATED_MBPS = 0.1
MAX_NVLINK_EMULATED_MBPS = 10000.0
MAX_INT = (1 << 63) - 1
# topology.latency_us: one-way delay of each link in real-cluster microseconds
# (netem, dilated like everything else). 1 s is far beyond any fabric.
MAX_LATENCY_US = 1e6
NUM = (int, float)
SCALE_EXPECTED = f"a factor in (0, 1], at least {limits.SCALE.lo:g}"
MAX_SWEEP_POINTS = 10_000  # each point is a run of its own; a grid beyond it is a typo
MAX_FILE_BYTES = 64 << 20  # an experiment file is written by hand or by a script: a few KiB
MAX_JITTER_NS = 1e9  # start_jitter_ns: a second is far beyond any start skew
JITTER_EXPECTED = "nanoseconds in 0..1000000000"




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
    start_ms: float = setting(0.0, NUM, limits.AT_MS.ok, limits.AT_MS.expected)
    order: str = setting("as-listed", str, lambda v: v in ORDERS, "one of " + ", ".join(ORDERS))


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
    max_packets: int = setting(2000, int, lambda v: 1 <= v <= 10_000_000, "an integer in 1..10000000")
    snaplen: int = setting(128, int, lambda v: 68 <= v <= 262144, "bytes in 68..262144")


@dataclass(frozen=True)
class Testbed:
    """How the emulator runs the experiment (README: Writing experiments)."""
    datapath: str = setting("auto", str, lambda v: v in DATAPATHS, "one of " + ", ".join(DATAPATHS))
    # shared: the machine's ovs-vswitchd; N: the run starts N of its own (userspace datapath),
    # the switches split between them so that N cores forward (docs/datapaths.md).
    # auto: one of the run's own where the datapath is userspace (twice the shared daemon's
    # faithful capacity: docs/datapaths.md), the shared one on the kernel or AF_XDP datapath.
    switch_daemons: str | int = setting(
        "auto", (str, int),
        lambda v: v in ("auto", "shared") or (isinstance(v, int) and not isinstance(v, bool)
                                              and 1 <= v <= MAX_SWITCH_DAEMONS),
        f"auto, shared or an integer in 1..{MAX_SWITCH_DAEMONS}")
    # OVS userspace TSO with the hosts' TCP offloads on: switches carry up to 64 KB super-packets.
    # Needs the run's own daemons (the option takes effect only when ovs-vswitchd starts); auto:
    # on wherever they run.
    userspace_tso: str | bool = setting("auto", (str, bool), lambda v: v in ("auto", True, False),
                                        "auto, true or false")
    # The run's own daemons' allocator: glibc's malloc costs them a page fault storm on every
    # receive batch, tcmalloc half their CPU (docs/datapaths.md, "The switch daemons' allocator").
    switch_malloc: str = setting("auto", str, lambda v: v in SWITCH_MALLOCS, "one of " + ", ".join(SWITCH_MALLOCS))
    slice_bytes: int = setting(16384, int, lambda v: 512 <= v <= 1 << 24, "an integer in 512..16777216")
    queue_packets: int = setting(1000, int, lambda v: 2 <= v <= 100000, "an integer in 2..100000")
    timeout_s: float = setting(600.0, NUM, limits.WAIT_S.ok, limits.WAIT_S.expected)
    ready_timeout_s: float = setting(60.0, NUM, limits.WAIT_S.ok, limits.WAIT_S.expected)
    # Wall seconds a job may go without progress (no byte moved, no op
    # finished, nothing computing) before the run fails naming who waits.
    stall_timeout_s: float = setting(30.0, NUM, lambda v: limits.WAIT_S.ok(v) and v >= 2,
                                     f"seconds in 2..{limits.WAIT_S.hi:g}")


@dataclass(frozen=True)
class Prediction:
    """The alpha-beta model each collective is compared with (summary.json predicted_cct_s)."""
    # Real-cluster seconds each step costs besides its bytes. 0: the emulated links carry
    # no propagation or switching delay, so the emulator should match a model without one.
    latency_us: float = setting(0.0, NUM, lambda v: 0 <= v <= 1e6, "microseconds in 0..1000000")


@dataclass(frozen=True)
class Flow:
    """How the flow-level engine runs the experiment (docs/flow-engine.md). None: derived
    from the rest of the file, so that a file written for the emulator runs the same traffic."""
    # detailed: every transfer, slice-gated as the agents send; bundle: a collective instance is
    # one entity (exact for rings, approximate otherwise); auto: detailed while it stays small.
    collective_model: str = "auto"
    ecmp_seed: int = 0            # ECMP's hash seed: the hashing luck of one run (sweep it for the spread)
    latency_us: float | None = None  # per-transfer delivery latency; None: prediction.latency_us
    slice_bytes: int | None = None   # pipelining slice, real bytes; None: testbed.slice_bytes / scale.bytes
    link_bin_ms: float | None = None  # links.csv interval; None: the emulator's (0.25 s wall / dilation), or 1 ms
    # bytes a connection keeps in flight (rate <= window / RTT), or "nccl" (its 4 MiB buffers); None: no window
    window_bytes: int | str | None = None
    # none: links carry payload at their line rate; ppp / ethernet: every segment also carries
    # TCP/IP headers and that link framing, so goodput is a fraction of the rate (MSS / frame)
    headers: str = "none"
    # each switch holds a transfer's last packet before sending it on (its serialization again at
    # every link after the first); false: bytes cross a path at once
    store_and_forward: bool = False
    # how TCP's window grows (flowsim.window): none (window_bytes fixed, or no window); cubic, as
    # the packet engine's Cubic at datacenter round trips; slow-start, doubling each round trip
    window_growth: str = "none"
    # timeouts: connections starting at once whose first windows overflow a port's buffer
    # (transport.switch_buffer_bytes) with too small a share each wait a 200 ms RTO
    # (flowsim.losses); none: no buffers, no losses
    losses: str = "none"
    # each rank starts up to this many ns late, drawn from start_seed: the packet engine's draws for
    # the same keys (experiment.plan.start_offsets_s), so that both engines start alike
    start_jitter_ns: float = 0.0
    start_seed: int = 0


@dataclass(frozen=True)
class Packet:
    """How the packet engine runs the experiment (docs/packet-engine.md)."""
    # real: real-cluster rates, sizes and transport; emulated: the emulator's own units (links x
    # scale.link, sizes x scale.bytes, compute x dilation, its MTU and queues, its switches' hop
    # delay), results divided back by the dilation: ns-3's TCP checked against the emulator's.
    units: str = setting("real", str, lambda v: v in PACKET_UNITS, "one of " + ", ".join(PACKET_UNITS))
    # units: emulated: one-way delay an OpenFlow switch hop adds, emulated microseconds
    # (None: the one measured on this machine kind, packetsim.emulated.HOP_LATENCY_US)
    hop_latency_us: float | None = setting(None, NUM, lambda v: 0 <= v <= 1e6, "microseconds in 0..1000000")
    # Each rank starts up to this many real nanoseconds late, drawn uniformly from start_seed
    # (experiment.plan.start_offsets_s): replicates of a deterministic simulation, to see TCP's spread
    # from run to run (0: every rank at once)
    start_jitter_ns: float = setting(0.0, NUM, lambda v: 0 <= v <= MAX_JITTER_NS, JITTER_EXPECTED)
    start_seed: int = setting(0, int, lambda v: 0 <= v <= MAX_INT, "an integer >= 0")


@dataclass(frozen=True)
class Outputs:
    """What a run writes besides its data files (docs/outputs.md)."""
    # plots/ of every run and a sweep's sweep.png. Off, a small flow run or a sweep of them
    # spends its time simulating, not drawing (matplotlib takes most of a small run's seconds).
    plots: bool = setting(True, bool, None, "true or false")


@dataclass(frozen=True)
class Experiment:
    name: str
    topology: dict
    scale: Scale
    routing: str  # the controller's policy: a built-in name or package.module:Class
    jobs: tuple
    testbed: Testbed
    description: str = ""
    faults: tuple = ()
    capture: Capture = Capture()
    prediction: Prediction = Prediction()
    sweep: tuple = ()  # points, each a tuple of (key.path, value) overrides
    engine: str = DEFAULT_ENGINE  # which engine runs it (experiment.engine.ENGINES)
    point: str = field(default="", compare=False)  # the sweep point it is (its folder under points/), or ""
    source: str | None = None
    raw: dict = field(default_factory=dict, compare=False)
    policy_params: dict = field(default_factory=dict)  # every param of the policy, resolved
    flow: Flow = Flow()
    # False: the file has no scale: section (allowed with engine: flow, which works in real units).
    scale_given: bool = True
    transport: _transport.Transport = _transport.Transport()  # docs/transport.md
    packet: Packet = Packet()
    outputs: Outputs = Outputs()

    @property
    def policy(self) -> str:
        return self.routing

    @property
    def coschedules(self) -> bool:
        """The policy answers announcements: the jobs announce their phases."""
        return registry.coschedules(self.routing)

    def fabric(self):
        topo = dict(self.topology)
        topo.pop("latency_us", None)  # the links' delay, not the graph's
        if "file" in topo:  # a fabric file, its path made absolute by parse
            return load_fabric_file(topo["file"])
        kind = topo.pop("kind")
        return _fabric(kind, topo, self.source)

    @property
    def latency_us(self) -> float:
        """Real-cluster one-way delay of every link (each hop), microseconds."""
        return float(self.topology.get("latency_us", 0.0))

    @property
    def link_delay_us(self) -> float:
        """The emulated links' delay: the real latency stretched by the time dilation."""
        return self.latency_us * self.scale.dilation

    def emulated_mbps(self, link_gbps: float) -> float:
        return link_gbps * 1000.0 * self.scale.link


_FABRICS: dict = {}  # the last fabrics built, by kind and parameters (a run reads its own several times)


def _fabric(kind: str, params: dict, file):
    """build_fabric, remembered for the last two specs: a 16,384-GPU fabric takes seconds to build,
    and parsing, planning and the outputs each ask for it. Fabrics are not changed once built."""
    key = _key(kind, params)
    if key is None:
        return build_fabric(kind, params, file=file)
    if key not in _FABRICS:
        _remember(key, build_fabric(kind, params, file=file))
    return _FABRICS[key]


def _key(kind: str, params: dict):
    """The cache key of a fabric spec, or None when a value cannot be hashed."""
    key = (kind, tuple(sorted(params.items())))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _remember(key, fab) -> None:
    while len(_FABRICS) >= 2 and not any(f is fab for f in _FABRICS.values()):
        _FABRICS.pop(next(iter(_FABRICS)))
    _FABRICS[key] = fab


# -- loading ----------------------------------------------------------------

def load(path: str, overrides: list[str] | None = None) -> Experiment:
    text = read_text(path, "file", max_bytes=MAX_FILE_BYTES)
    try:
        data = yaml.load(text, Loader=BoundedLoader)
    except InputError as e:
        raise InputError(e.key, e.expected, e.found, path) from None
    except DuplicateKey as e:
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
            parsed = yaml.load(value, Loader=BoundedLoader)
        except InputError as e:
            raise InputError(f"--set {keypath}", e.expected, e.found, file) from None
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
            node = node[_index(node, part, f"{label} " + ".".join(parts[:i + 1]), file)]
            continue
        if not isinstance(node, dict):
            raise InputError(f"{label} " + ".".join(parts[:i + 1]), "a mapping", node, file)
        node = node.setdefault(part, {})
    last = parts[-1]
    if isinstance(node, list):
        node[_index(node, last, f"{label} {keypath}", file)] = value
    elif isinstance(node, dict):
        node[last] = value
        if keypath in ("controller.policy", "controller.routing"):
            # One name replaces the other: --set controller.policy=X on a file that says routing:.
            node.pop("routing" if last == "policy" else "policy", None)
    else:
        raise InputError(f"{label} {keypath}", "a mapping", node, file)


def _index(items: list, part: str, key: str, file) -> int:
    """part as an index of items, or an error that says how long the list is."""
    have = f"0..{len(items) - 1} (the list has {len(items)} item{'s' * (len(items) != 1)})" if items \
        else "none (the list is empty)"
    try:
        i = int(part)
    except ValueError:
        i = None
    if i is None or not 0 <= i < len(items):
        raise InputError(key, f"a list index in {have}", part, file)
    return i


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


def read_settings(cls, sec: _Section) -> dict:
    """The setting() fields of cls as sec gives them, each checked, and their defaults for the rest."""
    out = {}
    for f in fields(cls):
        m = f.metadata
        if "types" in m:
            value = sec.get(f.name, m["types"], f.default, check=m["check"], expected=m["expected"])
            out[f.name] = float(value) if f.type == "float" else value
    return out


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
    name = check_name(top.get("name", str), "name", file)  # results/<name>/ by default
    description = top.get("description", str, "")

    topo = dict(top.get("topology", dict))
    latency_us = topo.pop("latency_us", 0.0)
    if isinstance(latency_us, bool) or not isinstance(latency_us, (int, float)) \
            or not 0 <= latency_us <= MAX_LATENCY_US:
        raise InputError("topology.latency_us", f"real-cluster microseconds per hop in 0..{MAX_LATENCY_US:.0f}",
                         latency_us, file)
    if "file" in topo:  # your own fabric: docs/fabrics.md
        extra = sorted(set(topo) - {"file"}, key=str)
        if extra:
            raise InputError(f"topology.{extra[0]}", "nothing beside topology.file but latency_us (the file "
                             "states the fabric)", "a key", file)
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
        fabric = _fabric(topo["kind"], {k: v for k, v in topo.items() if k != "kind"}, file)
        # Every builder default spelled out, so config.yaml states the fabric in full.
        topo = {"kind": topo["kind"], **fabric.params, "link_gbps": topo["link_gbps"]}
        # Experiment.fabric() asks by the spelled-out spec: the same fabric, not a second build.
        key = _key(topo["kind"], {k: v for k, v in topo.items() if k != "kind"})
        if key is not None:
            _remember(key, fabric)
    if latency_us:
        topo["latency_us"] = latency_us

    engine = top.get("engine", str, DEFAULT_ENGINE, check=lambda v: v in ENGINES,
                     expected="one of " + ", ".join(ENGINES))
    # The flow engine works in real-cluster units: it needs no scale, and ignores the
    # emulator's rate limits when one is given (a sweep over both engines shares one file).
    scale_given = engine == "emulate" or "scale" in data
    scale = Scale(1.0, 1.0)
    if scale_given:
        sc = _Section(top.get("scale", dict), "scale", file)
        scale = Scale(
            link=float(sc.get("link", NUM, check=limits.SCALE.ok, expected=SCALE_EXPECTED)),
            bytes=float(sc.get("bytes", NUM, check=limits.SCALE.ok, expected=SCALE_EXPECTED)),
        )
        sc.done()
    for a, b, d in fabric.links() if engine == "emulate" else ():
        mbps = d["link_gbps"] * 1000 * scale.link
        top_mbps = MAX_NVLINK_EMULATED_MBPS if d.get("kind") == "nvlink" else MAX_EMULATED_MBPS
        if not MIN_EMULATED_MBPS <= mbps <= top_mbps:
            raise InputError("scale.link", f"emulated link rates within {MIN_EMULATED_MBPS}.."
                              f"{MAX_EMULATED_MBPS:.0f} Mb/s, NVLink {MAX_NVLINK_EMULATED_MBPS:.0f} "
                              f"(link {a}-{b} would be {mbps:.3g} Mb/s)",
                              scale.link, file)

    routing, policy_params = _controller(top.get("controller", dict, {}), fabric, file)

    tb = _Section(top.get("testbed", dict, {}), "testbed", file)
    testbed = Testbed(**read_settings(Testbed, tb))
    tb.done()

    jobs_raw = top.get("jobs", list, check=lambda v: len(v) > 0, expected="a non-empty list of jobs")
    jobs = []
    names = set()
    for i, jr in enumerate(jobs_raw):
        js = _Section(jr, f"jobs[{i}]", file)
        # A job's name becomes folder names in the run folder (plans/<job>/, programs/<job>/).
        jname = check_name(js.get("name", str, f"j{i}"), f"jobs[{i}].name", file)  # plans/<job>/ in the run folder
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
        job = Job(jname, hosts, workload, **read_settings(Job, js))
        if job.order == "rail-aligned" and fabric.kind != "rail-optimized":
            raise InputError(f"jobs[{i}].order", "as-listed on a fabric that is not rail-optimized",
                             job.order, file)
        js.done()
        jobs.append(job)
        w = job.workload
        iters, comp = w.get("iterations", 1), w.get("compute_ms", 0)
        if type(iters) is int and limits.COMPUTE_MS.ok(comp):  # else the workload's reader names the field
            limits.check_run_s((job.start_ms + iters * comp) / 1e3, f"jobs[{i}].workload.iterations", file)
    try:
        placed = placement.place([(j.name, j.hosts) for j in jobs], fabric)
    except InputError as e:
        raise InputError(e.key, e.expected, e.found, file) from None
    ranked = {h for hosts in placed for h in hosts}
    faults = _faults(top.get("faults", list, []), fabric, ranked, file)
    capture = _capture(top.get("capture", dict, {}), fabric, file)
    ps = _Section(top.get("prediction", dict, {}), "prediction", file)
    prediction = Prediction(**read_settings(Prediction, ps))
    ps.done()
    flow = _flow(top.get("flow", dict, {}), file)
    pk = _Section(top.get("packet", dict, {}), "packet", file)
    packet = Packet(**read_settings(Packet, pk))
    pk.done()
    os_ = _Section(top.get("outputs", dict, {}), "outputs", file)
    outputs = Outputs(**read_settings(Outputs, os_))
    os_.done()
    sweep = _sweep(top.get("sweep", dict, {}), file)
    transport = _transport.parse(top.get("transport", dict, {}), file, _Section, read_settings)
    if transport.latency_us is not None and latency_us:
        raise InputError("transport.latency_us", "either transport.latency_us or topology.latency_us, not both",
                         transport.to_dict()["latency_us"], file)
    top.done()
    return Experiment(name=name, topology=topo, scale=scale, routing=routing, jobs=tuple(jobs),
                      testbed=testbed, description=description, faults=faults, capture=capture,
                      prediction=prediction, sweep=sweep, engine=engine, flow=flow, scale_given=scale_given,
                      source=file, raw=data, policy_params=policy_params, transport=transport,
                      packet=packet, outputs=outputs)


def _controller(data, fabric, file) -> tuple[str, dict]:
    """controller: {policy: NAME, params: {...}} (``routing`` is policy's old name): the
    policy, loaded and built on the fabric, and its params resolved."""
    ctl = _Section(data, "controller", file)
    if "routing" in data and "policy" in data:
        raise InputError("controller.routing", "either policy or routing (its old name), not both",
                         data["routing"], file)
    key = "routing" if "routing" in data else "policy"
    name = ctl.get(key, str, DEFAULT_POLICY)
    params = ctl.get("params", dict, {})
    ctl.used.update(("policy", "routing"))
    ctl.done()
    return name, registry.checked_params(name, fabric, params, f"controller.{key}", "controller.params", file)


def _flow(data, file) -> Flow:
    fs = _Section(data, "flow", file)
    latency = fs.get("latency_us", NUM, None, check=lambda v: 0 <= v <= 1e6, expected="microseconds in 0..1000000")
    bin_ms = fs.get("link_bin_ms", NUM, None, check=lambda v: 1e-3 <= v <= 1e6,
                    expected="milliseconds in 0.001..1000000")
    flow = Flow(
        collective_model=fs.get("collective_model", str, "auto", check=lambda v: v in COLLECTIVE_MODELS,
                                expected="one of " + ", ".join(COLLECTIVE_MODELS)),
        ecmp_seed=fs.get("ecmp_seed", int, 0, check=lambda v: 0 <= v < 1 << 63, expected="an integer in 0..2^63-1"),
        latency_us=None if latency is None else float(latency),
        slice_bytes=fs.get("slice_bytes", int, None, check=lambda v: 1 <= v <= 1 << 40,
                           expected="bytes in 1..1099511627776"),
        link_bin_ms=None if bin_ms is None else float(bin_ms),
        window_bytes=fs.get("window_bytes", (int, str), None,
                            check=lambda v: v in WINDOW_CHOICES if isinstance(v, str) else 1 <= v <= 1 << 40,
                            expected="bytes in 1..1099511627776 or one of " + ", ".join(WINDOW_CHOICES)),
        headers=fs.get("headers", str, "none", check=lambda v: v in HEADER_CHOICES,
                       expected="one of " + ", ".join(HEADER_CHOICES)),
        store_and_forward=fs.get("store_and_forward", bool, False),
        window_growth=fs.get("window_growth", str, "none", check=lambda v: v in WINDOW_GROWTHS,
                             expected="one of " + ", ".join(WINDOW_GROWTHS)),
        losses=fs.get("losses", str, "none", check=lambda v: v in LOSS_MODELS, expected="one of " + ", ".join(LOSS_MODELS)),
        start_jitter_ns=float(fs.get("start_jitter_ns", NUM, 0.0, check=lambda v: 0 <= v <= MAX_JITTER_NS,
                                     expected=JITTER_EXPECTED)),
        start_seed=fs.get("start_seed", int, 0, check=lambda v: 0 <= v <= MAX_INT, expected="an integer >= 0"),
    )
    fs.done()
    return flow


def _faults(items, fabric, ranked_hosts, file) -> tuple:
    out = []
    stragglers = set()
    for i, fr in enumerate(items):
        key = f"faults[{i}]"
        fs = _Section(fr, key, file)
        kinds = [k for k in FAULT_KINDS if k in fr]
        if len(kinds) != 1:
            raise InputError(key, "exactly one of " + ", ".join(FAULT_KINDS), sorted(fr), file)
        at_ms = float(fs.get("at_ms", NUM, check=limits.AT_MS.ok, expected=limits.AT_MS.expected))
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
            down_ms = float(fs.get("down_ms", NUM, 0.0, check=limits.AT_MS.ok, expected=limits.AT_MS.expected))
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
    cap = Capture(links=tuple(tuple(ln) for ln in links), **read_settings(Capture, cs))
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
            raise InputError(where, "a dotted key path outside sweep, e.g. controller.policy", key, file)

    if grid is not None:
        if not grid:
            raise InputError("sweep.grid", "at least one key.path: [values]", grid, file)
        for k, values in grid.items():
            key_ok(k, f"sweep.grid.{k}")
            if not isinstance(values, list) or not values:
                raise InputError(f"sweep.grid.{k}", "a non-empty list of values", values, file)
        count = math.prod(len(v) for v in grid.values())
        if count > MAX_SWEEP_POINTS:  # counted before one point is built
            raise InputError("sweep.grid", f"at most {MAX_SWEEP_POINTS} points (each is a whole run)",
                             f"{count} points", file)
        points = [tuple(zip(grid, combo)) for combo in itertools.product(*grid.values())]
    else:
        if not items:
            raise InputError("sweep.list", "at least one point", items, file)
        if len(items) > MAX_SWEEP_POINTS:
            raise InputError("sweep.list", f"at most {MAX_SWEEP_POINTS} points (each is a whole run)",
                             f"{len(items)} points", file)
        points = []
        for i, item in enumerate(items):
            if not isinstance(item, dict) or not item:
                raise InputError(f"sweep.list[{i}]", "a mapping of key.path: value", item, file)
            for k in item:
                key_ok(k, f"sweep.list[{i}].{k}")
            points.append(tuple(item.items()))
    seen = set()
    for p in points:  # values may be lists or mappings: compared by their JSON form
        key = json.dumps(p, sort_keys=True, default=repr)
        if key in seen:
            raise InputError("sweep", "distinct points", dict(p), file)
        seen.add(key)
    return tuple(points)


def to_dict(exp: Experiment) -> dict:
    """The experiment with every default filled in; parse(to_dict(exp)) == exp.

    Workload mappings stay as written (trace paths made absolute): their
    defaults belong to the traffic layer, which applies them the same way.
    """
    return {
        "name": exp.name,
        "description": exp.description,
        "engine": exp.engine,
        "topology": dict(exp.topology),
        **({"scale": {"link": exp.scale.link, "bytes": exp.scale.bytes}} if exp.scale_given else {}),
        "controller": {"policy": exp.routing, "params": dict(exp.policy_params)},
        "testbed": asdict(exp.testbed),
        "jobs": [{"name": j.name, "hosts": copy.deepcopy(j.hosts), "order": j.order, "start_ms": j.start_ms,
                  "workload": copy.deepcopy(j.workload)} for j in exp.jobs],
        "faults": [f.to_dict() for f in exp.faults],
        **({"capture": {"links": [list(ln) for ln in exp.capture.links], "max_packets": exp.capture.max_packets,
                        "snaplen": exp.capture.snaplen}} if exp.capture.links else {}),
        "prediction": asdict(exp.prediction),
        **({"flow": {k: v for k, v in asdict(exp.flow).items() if v is not None}} if exp.flow != Flow() else {}),
        **({"packet": {k: v for k, v in asdict(exp.packet).items() if v is not None}}
           if exp.packet != Packet() else {}),
        **({"sweep": {"list": [dict(copy.deepcopy(p)) for p in exp.sweep]}} if exp.sweep else {}),
        **({"transport": exp.transport.to_dict()} if exp.transport.given() else {}),
        **({"outputs": asdict(exp.outputs)} if exp.outputs != Outputs() else {}),
    }


def write_resolved(exp: Experiment, path, notes=()) -> None:
    """config.yaml of a run: `dtnet run DIR/config.yaml` repeats it. notes: more comment lines.
    path: a file name, or a file already open for writing (a run folder's, opened safely)."""
    if not isinstance(path, str):
        return _write_resolved(exp, path, notes)
    with open(path, "w") as f:
        _write_resolved(exp, f, notes)


def _write_resolved(exp: Experiment, f, notes) -> None:
    source = repr(exp.source)[1:-1] if exp.source else "a mapping"  # a line break would end the comment
    f.write(f"# {exp.name}: the experiment as run, from {source}, with --set overrides\n"
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


def resolve_path(exp: Experiment, path: str) -> str:
    """Paths inside an experiment are relative to the experiment file."""
    return _beside(exp.source, path)


def _beside(file: str | None, path: str) -> str:
    if os.path.isabs(path) or not file:
        return path
    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(file)), path))
