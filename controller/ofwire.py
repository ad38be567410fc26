"""Rule operations to OpenFlow 1.3 messages and back, with Ryu's own OFP classes.

``to_ofp`` is what the Ryu adapter sends for a ``FlowRule``, ``FlowDelete``,
``GroupRule`` or ``GroupDelete``. ``from_ofp`` reads a flow-mod or group-mod
the way a switch would (command, table, priority, match, instructions,
buckets and their watch ports) back into those operations, and
``flow_rule_from_stats`` / ``group_rule_from_desc`` read what a switch reports
holding. ``through_the_wire`` runs operations through encode, serialize to
bytes, parse and decode, so that the fake network applies exactly what the
switches would get (faucet's fakeoftable applies real OFPFlowMod objects).
This module and ``controller.ryu_app`` are the only ones that import Ryu.
"""
from __future__ import annotations

import random
import struct
import zlib

from ryu.ofproto import ofproto_parser, ofproto_protocol, ofproto_v1_3, ofproto_v1_3_parser

from controller.rules import GROUP_ALL, FlowDelete, FlowRule, GroupDelete, GroupRule, RuleError

PACKET_IN_BYTES = 128  # headers are all the controller reads
GROUP_TYPES = {"select": ofproto_v1_3.OFPGT_SELECT, "all": ofproto_v1_3.OFPGT_ALL,
               "indirect": ofproto_v1_3.OFPGT_INDIRECT, "fast_failover": ofproto_v1_3.OFPGT_FF}
_GROUP_NAMES = {v: k for k, v in GROUP_TYPES.items()}


def datapath() -> ofproto_protocol.ProtocolDesc:
    """A datapath stand-in that builds and parses OpenFlow 1.3 messages (no connection)."""
    return ofproto_protocol.ProtocolDesc(ofproto_v1_3.OFP_VERSION)


# -- encode ------------------------------------------------------------------
def to_ofp(dp, op, installed_groups: set | None = None):
    """The OFP message for one operation. ``installed_groups``: group ids the switch holds
    (a GroupRule for one of them is a modify, else an add); updated in place."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    installed = installed_groups if installed_groups is not None else set()
    if isinstance(op, FlowRule):
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions_to_ofp(dp, op.actions))]
        if op.goto_table is not None:
            inst.append(parser.OFPInstructionGotoTable(op.goto_table))
        return parser.OFPFlowMod(dp, cookie=op.cookie, table_id=op.table, command=ofp.OFPFC_ADD,
                                 idle_timeout=op.idle_timeout_s, hard_timeout=op.hard_timeout_s,
                                 priority=op.priority, buffer_id=ofp.OFP_NO_BUFFER,
                                 flags=ofp.OFPFF_SEND_FLOW_REM if op.notify_removed else 0,
                                 match=parser.OFPMatch(**op.match), instructions=inst)
    if isinstance(op, FlowDelete):
        return parser.OFPFlowMod(dp, cookie=op.cookie, cookie_mask=op.cookie_mask, table_id=op.table,
                                 command=ofp.OFPFC_DELETE_STRICT if op.strict else ofp.OFPFC_DELETE,
                                 priority=op.priority, out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
                                 match=parser.OFPMatch(**op.match))
    if isinstance(op, GroupRule):
        cmd = ofp.OFPGC_MODIFY if op.group_id in installed else ofp.OFPGC_ADD
        installed.add(op.group_id)
        # watch_port = the bucket's output port: a bucket dies with its link,
        # so a select group stops hashing onto a dead uplink.
        buckets = [parser.OFPBucket(weight=w, watch_port=_out_port(acts, ofp.OFPP_ANY),
                                    watch_group=ofp.OFPG_ANY, actions=actions_to_ofp(dp, acts))
                   for w, acts in spread_select(op)]
        return parser.OFPGroupMod(dp, command=cmd, type_=GROUP_TYPES[op.type], group_id=op.group_id,
                                  buckets=buckets)
    if isinstance(op, GroupDelete):
        if op.group_id == GROUP_ALL:
            installed.clear()
        else:
            installed.discard(op.group_id)
        return parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, type_=ofp.OFPGT_ALL, group_id=op.group_id)
    raise TypeError(f"unknown operation {op!r}")


HASH_SLOTS = 64  # the most hash values OVS's dp_hash selection maps onto a select group's buckets


def slot_labels(switch: str, group_id: int, n: int) -> list[int]:
    """Which of n equal buckets each of the HASH_SLOTS slots holds on this switch: each bucket
    HASH_SLOTS // n slots or one more, in an order drawn from the switch and group, relabelled so
    that the buckets first appear in their own order (the read-back keeps first appearances)."""
    labels = [i % n for i in range(HASH_SLOTS)]
    random.Random(zlib.crc32(f"{switch}/{group_id}".encode())).shuffle(labels)
    first: dict[int, int] = {}
    for x in labels:
        first.setdefault(x, len(first))
    return [first[x] for x in labels]


def spread_select(op: GroupRule) -> tuple:
    """The buckets a switch is sent for a group. OVS picks a select group's bucket from the
    datapath's hash of the five-tuple (its default dp_hash method), the same hash at every
    switch, and maps hash values to buckets the same way in every group of as many equal
    buckets: a flow that takes bucket b at an edge switch takes bucket b at the aggregation
    switch too, and half of a k=4 fat-tree's core links carry nothing under ECMP. Real
    fabrics seed each switch's hash apart. So a select group of 2 to HASH_SLOTS equal buckets
    goes out as HASH_SLOTS copies laid out per switch and group (slot_labels): each switch then
    maps the same hash to its own bucket. Other groups go out as they are."""
    n = len(op.buckets)
    if op.type != "select" or not 2 <= n <= HASH_SLOTS or len({w for w, _ in op.buckets}) != 1:
        return op.buckets
    return tuple(op.buckets[i] for i in slot_labels(op.switch, op.group_id, n))


def _collapse(type_name: str, buckets: tuple) -> tuple:
    """A select group's buckets as the controller made them: copies (spread_select) dropped,
    first appearances kept in order."""
    if type_name != "select":
        return buckets
    return tuple(dict.fromkeys(buckets))


def _out_port(actions, default):
    ports = [a[1] for a in actions if a[0] == "output"]
    return ports[0] if len(ports) == 1 else default


def actions_to_ofp(dp, actions) -> list:
    ofp, parser = dp.ofproto, dp.ofproto_parser
    out = []
    for a in actions:
        if a[0] == "output":
            out.append(parser.OFPActionOutput(a[1], 0))
        elif a[0] == "controller":
            out.append(parser.OFPActionOutput(ofp.OFPP_CONTROLLER, PACKET_IN_BYTES))
        elif a[0] == "group":
            out.append(parser.OFPActionGroup(a[1]))
        elif a[0] == "set_queue":
            out.append(parser.OFPActionSetQueue(a[1]))
        else:
            raise TypeError(f"unknown action {a!r}")
    return out


# -- decode ------------------------------------------------------------------
def actions_from_ofp(dp, actions) -> tuple:
    """OFP actions back into the rules' vocabulary (the inverse of actions_to_ofp)."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    out = []
    for a in actions:
        if isinstance(a, parser.OFPActionOutput):
            out.append(("controller",) if a.port == ofp.OFPP_CONTROLLER else ("output", a.port))
        elif isinstance(a, parser.OFPActionGroup):
            out.append(("group", a.group_id))
        elif isinstance(a, parser.OFPActionSetQueue):
            out.append(("set_queue", a.queue_id))
        else:
            raise TypeError(f"action {a}")
    return tuple(out)


def _instructions(dp, instructions) -> tuple[tuple, int | None]:
    ofp, parser = dp.ofproto, dp.ofproto_parser
    actions, goto = (), None
    for inst in instructions:
        if isinstance(inst, parser.OFPInstructionActions) and inst.type == ofp.OFPIT_APPLY_ACTIONS:
            actions = actions_from_ofp(dp, inst.actions)
        elif isinstance(inst, parser.OFPInstructionGotoTable):
            goto = inst.table_id
        else:
            raise TypeError(f"instruction {inst}")
    return actions, goto


def flow_rule_from_stats(switch: str, dp, st) -> FlowRule:
    """A flow-stats entry (or an add flow-mod) as the FlowRule that would have made it."""
    ofp = dp.ofproto
    actions, goto = _instructions(dp, st.instructions)
    return FlowRule(switch, st.priority, dict(st.match.items()), actions, cookie=st.cookie, table=st.table_id,
                    idle_timeout_s=st.idle_timeout, hard_timeout_s=st.hard_timeout, goto_table=goto,
                    notify_removed=bool(st.flags & ofp.OFPFF_SEND_FLOW_REM))


def group_rule_from_desc(switch: str, dp, g) -> GroupRule:
    return _group_rule(switch, dp, g.group_id, g.type, g.buckets)


def _group_rule(switch: str, dp, group_id: int, type_: int, buckets) -> GroupRule:
    name = _GROUP_NAMES[type_]
    return GroupRule(switch, group_id, name,
                     _collapse(name, tuple((b.weight, actions_from_ofp(dp, b.actions)) for b in buckets)))


def port_up(ofp, desc) -> bool:
    return not (desc.state & ofp.OFPPS_LINK_DOWN or desc.config & ofp.OFPPC_PORT_DOWN)


def from_ofp(switch: str, dp, msg):
    """The operation a switch carries out for a flow-mod or group-mod it receives."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    if isinstance(msg, parser.OFPFlowMod):
        if msg.command == ofp.OFPFC_ADD:
            if msg.buffer_id != ofp.OFP_NO_BUFFER:
                raise RuleError(f"{switch}: flow-mod names buffer {msg.buffer_id}: no packet is buffered")
            return flow_rule_from_stats(switch, dp, msg)
        if msg.command in (ofp.OFPFC_DELETE, ofp.OFPFC_DELETE_STRICT):
            if msg.out_port != ofp.OFPP_ANY or msg.out_group != ofp.OFPG_ANY:
                raise RuleError(f"{switch}: delete filtered by out_port/out_group: dtnet does not use it")
            return FlowDelete(switch, dict(msg.match.items()), msg.priority,
                              strict=msg.command == ofp.OFPFC_DELETE_STRICT, cookie=msg.cookie,
                              cookie_mask=msg.cookie_mask, table=msg.table_id)
        raise RuleError(f"{switch}: flow-mod command {msg.command}: dtnet sends add and delete only")
    if isinstance(msg, _GroupMod):
        if msg.command == ofp.OFPGC_DELETE:
            return GroupDelete(switch, msg.group_id)
        for b in msg.buckets:
            outs = [a.port for a in b.actions if isinstance(a, parser.OFPActionOutput)]
            if len(outs) == 1 and b.watch_port != outs[0]:
                # The fake network lets a bucket die with its link; a switch does so only
                # when the bucket watches its port.
                raise RuleError(f"{switch}: group {msg.group_id}: bucket to port {outs[0]} watches "
                                f"port {b.watch_port}")
        return _group_rule(switch, dp, msg.group_id, msg.type, msg.buckets)
    raise TypeError(f"{switch}: message {type(msg).__name__}: not a flow-mod or group-mod")


class _GroupMod:
    """A group-mod read back from bytes (Ryu parses none: switches never send one)."""

    def __init__(self, command, type_, group_id, buckets):
        self.command, self.type, self.group_id, self.buckets = command, type_, group_id, buckets


def parse_bytes(dp, buf: bytes):
    """The message in ``buf``, as a switch would read it."""
    version, msg_type, msg_len, xid = ofproto_parser.header(buf)
    if msg_type == dp.ofproto.OFPT_GROUP_MOD:
        command, type_, group_id = struct.unpack_from("!HBxI", buf, dp.ofproto.OFP_HEADER_SIZE)
        offset, buckets = dp.ofproto.OFP_GROUP_MOD_SIZE, []
        while offset < msg_len:
            b = ofproto_v1_3_parser.OFPBucket.parser(buf, offset)
            buckets.append(b)
            offset += b.len
        return _GroupMod(command, type_, group_id, buckets)
    return ofproto_parser.msg(dp, version, msg_type, msg_len, xid, buf)


def through_the_wire(ops, net=None) -> list:
    """Operations after an encode, serialize, parse and decode: what a switch applies.
    ``net`` (a FakeNetwork): the groups its switches hold decide add or modify."""
    dp = datapath()
    installed: dict[str, set] = {}
    out = []
    for op in ops:
        if op.switch not in installed:
            installed[op.switch] = set(net.switches[op.switch].groups) if net is not None and \
                op.switch in net.switches else set()
        msg = to_ofp(dp, op, installed[op.switch])
        msg.serialize()
        out.append(from_ofp(op.switch, dp, parse_bytes(dp, bytes(msg.buf))))
    return out
