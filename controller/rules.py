"""Framework-free OpenFlow decisions: what the policy returns, what the adapter sends.

A ``FlowRule`` is one flow entry (OpenFlow 1.3 semantics: the highest
priority match wins; an entry with the same table, priority and match
replaces the old one). A ``GroupRule`` is one group. ``FlowDelete`` removes
entries. The Ryu adapter translates these to OFP messages and the fake
network (``controller.fakeof``) applies them, so both read one vocabulary.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

ETH_IPV4 = 0x0800
ETH_ARP = 0x0806
IPPROTO_TCP = 6
IPPROTO_UDP = 17

# Priorities: per-flow placements beat destination routes; ARP and the
# table-miss entry never overlap IP routes.
PRIORITY_MISS = 0
PRIORITY_ROUTE = 100
PRIORITY_DETECT = 150  # congestion-aware: a host's TCP packet with no placement yet
PRIORITY_ARP = 200
PRIORITY_FLOW = 300

# Cookies tag who installed an entry, so one kind can be deleted alone.
COOKIE_MISS = 0xD7_0000
COOKIE_ROUTE = 0xD7_0001
COOKIE_ARP = 0xD7_0002
COOKIE_DETECT = 0xD7_0003
COOKIE_FLOW_BASE = 0xD7_1000_0000  # + flow id for per-flow placements
COOKIE_FLOW_MASK = 0xFFFF_F000_0000

GROUP_ALL = 0xFFFFFFFC  # OFPG_ALL: a GroupDelete of every group

# OpenFlow 1.3 match prerequisites (OVS rejects a flow-mod that lacks them).
_PREREQ = {
    "ipv4_src": ("eth_type", ETH_IPV4),
    "ipv4_dst": ("eth_type", ETH_IPV4),
    "ip_proto": ("eth_type", ETH_IPV4),
    "tcp_src": ("ip_proto", IPPROTO_TCP),
    "tcp_dst": ("ip_proto", IPPROTO_TCP),
    "udp_src": ("ip_proto", IPPROTO_UDP),
    "udp_dst": ("ip_proto", IPPROTO_UDP),
    "arp_op": ("eth_type", ETH_ARP),
    "arp_spa": ("eth_type", ETH_ARP),
    "arp_tpa": ("eth_type", ETH_ARP),
}
MATCH_FIELDS = frozenset(_PREREQ) | {"in_port", "eth_type", "eth_src", "eth_dst"}
# Fields that may be (value, mask) pairs.
MASKABLE = frozenset({"ipv4_src", "ipv4_dst", "arp_spa", "arp_tpa", "eth_src", "eth_dst"})

# action name -> number of arguments
ACTIONS = {"output": 1, "group": 1, "controller": 0, "set_queue": 1}


class RuleError(ValueError):
    """A malformed rule: a policy bug, never user input."""


def _check_match(match: Mapping) -> None:
    for k, v in match.items():
        if k not in MATCH_FIELDS:
            raise RuleError(f"match field {k!r}: expected one of {', '.join(sorted(MATCH_FIELDS))}")
        if isinstance(v, tuple) and k not in MASKABLE:
            raise RuleError(f"match field {k!r} cannot be masked")
        if k in _PREREQ:
            need_k, need_v = _PREREQ[k]
            if match.get(need_k) != need_v:
                raise RuleError(f"match field {k!r} needs {need_k}={need_v:#x}, found {match.get(need_k)!r}")


def _check_actions(actions: tuple) -> None:
    for a in actions:
        if not isinstance(a, tuple) or not a or a[0] not in ACTIONS or len(a) - 1 != ACTIONS[a[0]]:
            raise RuleError(f"action {a!r}: expected one of {sorted(ACTIONS)} with its arguments")
        if len(a) == 2 and (not isinstance(a[1], int) or a[1] < 0):
            raise RuleError(f"action {a!r}: argument must be an integer >= 0")


@dataclass(frozen=True)
class FlowRule:
    """One flow entry: apply ``actions``, then continue in ``goto_table`` if set.
    Empty actions and no goto means drop. ``notify_removed`` asks the switch
    to tell the controller when the entry expires."""
    switch: str
    priority: int
    match: Mapping = field(hash=False)
    actions: tuple = ()
    cookie: int = 0
    table: int = 0
    idle_timeout_s: int = 0
    hard_timeout_s: int = 0
    goto_table: int | None = None
    notify_removed: bool = False

    def __post_init__(self):
        object.__setattr__(self, "match", dict(self.match))
        object.__setattr__(self, "actions", tuple(tuple(a) for a in self.actions))
        _check_match(self.match)
        _check_actions(self.actions)
        if not 0 <= self.priority <= 0xFFFF:
            raise RuleError(f"priority {self.priority}: expected 0..65535")
        if self.goto_table is not None and self.goto_table <= self.table:
            raise RuleError(f"goto_table {self.goto_table}: OpenFlow only goes forward from table {self.table}")

    @property
    def key(self) -> tuple:
        """Identity of the entry in its table: a new rule with the same key replaces it."""
        return (self.switch, self.table, self.priority, match_key(self.match))

    def __hash__(self):
        return hash((self.key, self.actions, self.cookie, self.goto_table))


@dataclass(frozen=True)
class GroupRule:
    """A group; ``buckets`` is ((weight, actions), ...). Select groups hash per flow."""
    switch: str
    group_id: int
    type: str = "select"
    buckets: tuple = ()

    def __post_init__(self):
        if self.type not in ("select", "all", "indirect", "fast_failover"):
            raise RuleError(f"group type {self.type!r}: expected select, all, indirect or fast_failover")
        if not 0 <= self.group_id <= 0xFFFFFF00:
            raise RuleError(f"group id {self.group_id}: expected 0..0xffffff00")
        buckets = tuple((int(w), tuple(tuple(a) for a in acts)) for w, acts in self.buckets)
        for w, acts in buckets:
            if w < 0 or w > 0xFFFF:
                raise RuleError(f"bucket weight {w}: expected 0..65535")
            _check_actions(acts)
        object.__setattr__(self, "buckets", buckets)


@dataclass(frozen=True)
class FlowDelete:
    """Delete entries on a switch. ``strict`` deletes the one entry with this
    priority and match; otherwise every entry whose cookie matches under
    ``cookie_mask`` (and, if given, whose match contains ``match``)."""
    switch: str
    match: Mapping = field(default_factory=dict, hash=False)
    priority: int = 0
    strict: bool = False
    cookie: int = 0
    cookie_mask: int = 0
    table: int = 0

    def __post_init__(self):
        object.__setattr__(self, "match", dict(self.match))
        _check_match(self.match)


@dataclass(frozen=True)
class GroupDelete:
    switch: str
    group_id: int


def match_key(match: Mapping) -> tuple:
    return tuple(sorted(match.items()))


def ip_to_int(ip: str) -> int:
    parts = ip.split(".")
    if len(parts) != 4:
        raise ValueError(f"not an IPv4 address: {ip!r}")
    n = 0
    for p in parts:
        b = int(p)
        if not 0 <= b <= 255:
            raise ValueError(f"not an IPv4 address: {ip!r}")
        n = (n << 8) | b
    return n
