"""Ryu adapter: a shim between OpenFlow 1.3 switches and ``controller.core``.

Every handler turns a Ryu event into a call on ``FabricController`` with the
time, and turns what comes back (rule operations, ARP answers) into OFP
messages. No decision is made here.

Configuration comes from the environment, so that ``python -m controller.run``
(which the testbed uses) and a by-hand ``ryu-manager`` read it the same way:

  DTNET_FABRIC      path of the fabric JSON (``Fabric.dump``); required
  DTNET_ROUTING     shortest | ecmp | congestion-aware | coschedule (default ecmp)
  DTNET_POLL_S      statistics poll period, seconds (default 0.5)
  DTNET_LINK_SCALE  emulated link rate / real link rate (default 1), so loads
                    come out in the fabric's real-cluster Gb/s
  DTNET_HOLD_S      minimum time between two moves of one flow (default 2)
  DTNET_TAU_S       EWMA time constant of link loads (default 1)

By hand (Ryu 4.34 with eventlet 0.33 needs the shim that ``controller.run``
applies, hence ``controller.run ryu-manager`` rather than bare ``ryu-manager``):

  DTNET_FABRIC=fabric.json python -m controller.run ryu-manager \\
      --ofp-tcp-listen-port 16653 --wsapi-port 18080 controller/ryu_app.py
"""
from __future__ import annotations

import json
import os
import time
from collections import OrderedDict

from ryu.app.wsgi import ControllerBase, Response, WSGIApplication, route
from ryu.base import app_manager
from ryu.controller import ofp_event
from ryu.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from ryu.lib import hub
from ryu.lib.packet import arp, ethernet, ipv4, packet, tcp
from ryu.lib.packet import ether_types
from ryu.ofproto import ofproto_v1_3

from controller.core import FabricController
from controller.cosched import MAX_BODY_BYTES
from controller.flows import CongestionConfig, FlowKey
from controller.routing import DEFAULT_POLICY
from controller.rules import (COOKIE_FLOW_BASE, COOKIE_FLOW_MASK, GROUP_ALL, FlowDelete, FlowRule, GroupDelete,
                              GroupRule, RuleError)
from topologies.fabric import Fabric

BARRIER_TIMEOUT_S = 10.0
READ_BACK_TIMEOUT_S = 5.0  # a switch's answer to the tables read back on connect
PACKET_IN_BYTES = 128  # headers are all the controller reads
ENV_CONFIG = {"DTNET_POLL_S": "poll_s", "DTNET_LINK_SCALE": "link_scale", "DTNET_HOLD_S": "hold_s",
              "DTNET_TAU_S": "tau_s"}
API = "/dtnet/v1"
APP_KEY = "dtnet_app"


def load_from_env() -> FabricController:
    path = os.environ.get("DTNET_FABRIC")
    if not path:
        raise SystemExit("dtnet controller: DTNET_FABRIC: expected the path of a fabric JSON, found nothing")
    try:
        fabric = Fabric.load(path)
    except (OSError, ValueError, KeyError) as e:
        raise SystemExit(f"dtnet controller: {path}: expected a fabric JSON, found an error: {e}")
    cfg = {}
    for var, name in ENV_CONFIG.items():
        if os.environ.get(var):
            try:
                cfg[name] = float(os.environ[var])
            except ValueError:
                raise SystemExit(f"dtnet controller: {var}: expected a number, found {os.environ[var]!r}")
    try:
        return FabricController(fabric, os.environ.get("DTNET_ROUTING", DEFAULT_POLICY), CongestionConfig(**cfg))
    except ValueError as e:
        raise SystemExit(f"dtnet controller: {e}")


class DtnetApp(app_manager.RyuApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]
    _CONTEXTS = {"wsgi": WSGIApplication}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ctl = load_from_env()
        self.datapaths = {}
        self.groups: dict[int, set[int]] = {}  # dpid -> installed group ids (add vs modify)
        self.waiters: dict[tuple[int, int], hub.Event] = {}
        self.replies: dict[tuple[int, int], tuple[list, hub.Event]] = {}  # multipart replies being collected
        kwargs["wsgi"].register(RestApi, {APP_KEY: self})
        self.logger.info("dtnet: %d switches expected, routing %s",
                         len(self.ctl.switches), self.ctl.routing)
        # One worker runs plans in the order they were made: two plans racing
        # (a link down, then up) could otherwise delete a group the later one re-added.
        self.plans = hub.Queue()
        self.worker = hub.spawn(self._plan_worker)
        self.poller = hub.spawn(self._poll_loop)

    def _submit(self, plan, done=None) -> None:
        if plan:
            self.plans.put((plan, done))

    def _plan_worker(self):
        while True:
            plan, done = self.plans.get()
            try:
                self._run_plan(plan, done)
            except Exception:  # a bad plan must not stop the ones after it
                self.logger.exception("dtnet: plan failed")

    # -- statistics ---------------------------------------------------------
    def _poll_loop(self):
        """Ask every switch for port (and per-flow) counters each period; after
        the replies had half a period to come in, let the policy react."""
        period = self.ctl.cfg.poll_s
        while True:
            for dp in list(self.datapaths.values()):
                ofp, parser = dp.ofproto, dp.ofproto_parser
                dp.send_msg(parser.OFPPortStatsRequest(dp, 0, ofp.OFPP_ANY))
                if self.ctl.sched is not None:
                    dp.send_msg(parser.OFPFlowStatsRequest(dp, 0, 0, ofp.OFPP_ANY, ofp.OFPG_ANY,
                                                           COOKIE_FLOW_BASE, COOKIE_FLOW_MASK, parser.OFPMatch()))
            hub.sleep(period / 2)
            plan = self.ctl.poll_done(time.time())
            if plan:
                self.logger.info("dtnet: rebalance: %d operations", sum(len(st) for st in plan))
                rec = self.ctl.reroute_record(plan, time.time())
                self._submit(plan, done=lambda rec=rec: self.ctl.reroute_installed(rec, time.time()))
            hub.sleep(period / 2)

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def _port_stats(self, ev):
        self.ctl.port_stats(ev.msg.datapath.id, [(s.port_no, s.tx_bytes, s.rx_bytes) for s in ev.msg.body],
                            ev.timestamp)

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _flow_stats(self, ev):
        if self._collect(ev.msg):
            return
        self.ctl.flow_stats(ev.msg.datapath.id, [(s.cookie, s.byte_count) for s in ev.msg.body], ev.timestamp)

    @set_ev_cls([ofp_event.EventOFPGroupDescStatsReply, ofp_event.EventOFPPortDescStatsReply],
                [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _desc_reply(self, ev):
        self._collect(ev.msg)

    def _collect(self, msg) -> bool:
        """A part of a reply that _request waits for (True), or someone else's."""
        entry = self.replies.get((msg.datapath.id, msg.xid))
        if entry is None:
            return False
        entry[0].extend(msg.body)
        if not msg.flags & msg.datapath.ofproto.OFPMPF_REPLY_MORE:
            entry[1].set()
        return True

    @set_ev_cls(ofp_event.EventOFPFlowRemoved, MAIN_DISPATCHER)
    def _flow_removed(self, ev):
        plan = self.ctl.flow_removed(ev.msg.datapath.id, ev.msg.cookie, ev.timestamp, dict(ev.msg.match.items()))
        if plan:
            self._submit(plan)

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def _port_status(self, ev):
        msg = ev.msg
        ofp = msg.datapath.ofproto
        up = _port_up(ofp, msg.desc) and msg.reason != ofp.OFPPR_DELETE
        self._port_changed(msg.datapath.id, msg.desc.port_no, up, ev.timestamp)

    def _port_changed(self, dpid: int, port: int, up: bool, now: float) -> None:
        plan = self.ctl.port_status(dpid, port, up, now)
        if plan:
            self.logger.info("dtnet: port %d of %s %s: %d operations", port, self.ctl.switch_name(dpid),
                             "up" if up else "down", sum(len(st) for st in plan))
            self._submit(plan)

    # -- switch lifecycle ---------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _features(self, ev):
        dp = ev.msg.datapath
        name = self.ctl.switch_name(dp.id)
        if name is None:
            self.logger.warning("dtnet: ignoring unknown datapath %016x", dp.id)
            return
        self.datapaths[dp.id] = dp
        self.groups[dp.id] = set()
        # Reading the tables back waits for replies, which this handler's own
        # event loop delivers: do it in a thread of its own.
        hub.spawn(self._connect, dp)

    def _connect(self, dp) -> None:
        """Read back what the switch holds (port states, flows, groups), then bring
        it in line make-before-break. A switch that kept its flows while no
        controller was there (fail-secure) keeps forwarding throughout."""
        name = self.ctl.switch_name(dp.id)
        held = self._read_back(dp)
        now = time.time()
        if held is None:
            self.logger.warning("dtnet: %s connected (dpid %d): its tables could not be read back; "
                                "wiping and installing", name, dp.id)
            plan = self.ctl.switch_connected(dp.id, now)
        else:
            ports, flows, groups = held
            for port, up in ports:  # links that changed while no controller watched
                self._port_changed(dp.id, port, up, now)
            self.groups[dp.id] = {g.group_id for g in groups}
            plan = self.ctl.switch_connected(dp.id, now, (flows, groups))
            r = self.ctl.resyncs[-1]
            self.logger.info("dtnet: %s connected (dpid %d): resync: it holds %d flows and %d groups; "
                             "%d entries kept, %d to send, %d to delete", name, dp.id, r["held_flows"],
                             r["held_groups"], r["kept"], r["sent"], r["deleted"])
        # Through the worker even when empty: it marks the switch ready after
        # the plans queued before this one.
        self.plans.put((plan, lambda: self._installed(dp.id)))

    def _read_back(self, dp):
        """(port states, flow rules, group rules) the switch holds; None if it does not answer in time
        or holds entries this controller cannot express."""
        ofp, parser = dp.ofproto, dp.ofproto_parser
        name = self.ctl.switch_name(dp.id)
        try:
            ports = self._request(dp, parser.OFPPortDescStatsRequest(dp, 0))
            flows = self._request(dp, parser.OFPFlowStatsRequest(dp, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY,
                                                                 0, 0, parser.OFPMatch()))
            groups = self._request(dp, parser.OFPGroupDescStatsRequest(dp, 0))
        except TimeoutError as e:
            self.logger.warning("dtnet: %s: %s", name, e)
            return None
        try:
            return ([(p.port_no, _port_up(ofp, p)) for p in ports if p.port_no <= ofp.OFPP_MAX],
                    [_flow_rule(name, dp, st) for st in flows], [_group_rule(name, dp, g) for g in groups])
        except (RuleError, TypeError, KeyError, ValueError) as e:
            self.logger.warning("dtnet: %s holds an entry dtnet does not make: %s", name, e)
            return None

    def _request(self, dp, req) -> list:
        """Send a multipart request and wait for every part of its reply."""
        dp.set_xid(req)
        key = (dp.id, req.xid)
        self.replies[key] = ([], hub.Event())
        try:
            dp.send_msg(req)
            if not self.replies[key][1].wait(timeout=READ_BACK_TIMEOUT_S):
                raise TimeoutError(f"no reply to {type(req).__name__} in {READ_BACK_TIMEOUT_S:.0f} s")
            return self.replies[key][0]
        finally:
            self.replies.pop(key, None)

    def _installed(self, dpid: int) -> None:
        self.ctl.install_done(dpid, time.time())
        self.logger.info("dtnet: %s ready", self.ctl.switch_name(dpid))

    @set_ev_cls(ofp_event.EventOFPStateChange, DEAD_DISPATCHER)
    def _state_change(self, ev):
        dp = ev.datapath
        if dp.id is not None and self.datapaths.get(dp.id) is dp:
            del self.datapaths[dp.id]
            self.ctl.switch_disconnected(dp.id, time.time())
            self.logger.info("dtnet: %s disconnected", self.ctl.switch_name(dp.id))

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _error(self, ev):
        msg = ev.msg
        self.logger.error("dtnet: switch %s refused a message: type %d code %d",
                          self.ctl.switch_name(msg.datapath.id), msg.type, msg.code)
        self.ctl.switch_error(msg.datapath.id, time.time())

    @set_ev_cls(ofp_event.EventOFPBarrierReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _barrier_reply(self, ev):
        waiter = self.waiters.pop((ev.msg.datapath.id, ev.msg.xid), None)
        if waiter is not None:
            waiter.set()

    # -- plans --------------------------------------------------------------
    def _run_plan(self, plan, done=None) -> bool:
        """Send stage by stage; each waits for every touched switch's barrier reply
        (a switch that is not connected is skipped)."""
        for stage in plan:
            per_switch = OrderedDict()
            for op in stage:
                per_switch.setdefault(op.switch, []).append(op)
            waits = []
            for name, ops in per_switch.items():
                dp = self.datapaths.get(self.ctl.switches[name].dpid)
                if dp is None:
                    # A switch that went away loses nothing by it: it is read back
                    # and resynchronized when it reconnects. The others go on.
                    self.logger.warning("dtnet: %s is gone; its %d operations skipped", name, len(ops))
                    continue
                for op in ops:
                    dp.send_msg(self._to_ofp(dp, op))
                barrier = dp.ofproto_parser.OFPBarrierRequest(dp)
                dp.set_xid(barrier)
                ev = hub.Event()
                self.waiters[dp.id, barrier.xid] = ev
                dp.send_msg(barrier)
                waits.append((name, ev))
            for name, ev in waits:
                if not ev.wait(timeout=BARRIER_TIMEOUT_S):
                    self.logger.error("dtnet: no barrier reply from %s in %.0f s", name, BARRIER_TIMEOUT_S)
                    return False
        if done is not None:
            done()
        return True

    def _to_ofp(self, dp, op):
        ofp, parser = dp.ofproto, dp.ofproto_parser
        if isinstance(op, FlowRule):
            inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, self._actions(dp, op.actions))]
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
            installed = self.groups.setdefault(dp.id, set())
            cmd = ofp.OFPGC_MODIFY if op.group_id in installed else ofp.OFPGC_ADD
            installed.add(op.group_id)
            gtype = {"select": ofp.OFPGT_SELECT, "all": ofp.OFPGT_ALL, "indirect": ofp.OFPGT_INDIRECT,
                     "fast_failover": ofp.OFPGT_FF}[op.type]
            # watch_port = the bucket's output port: a bucket dies with its link,
            # so a select group stops hashing onto a dead uplink.
            buckets = [parser.OFPBucket(weight=w, watch_port=self._out_port(acts, ofp.OFPP_ANY),
                                        watch_group=ofp.OFPG_ANY, actions=self._actions(dp, acts))
                       for w, acts in op.buckets]
            return parser.OFPGroupMod(dp, command=cmd, type_=gtype, group_id=op.group_id, buckets=buckets)
        if isinstance(op, GroupDelete):
            installed = self.groups.setdefault(dp.id, set())
            if op.group_id == GROUP_ALL:
                installed.clear()
            else:
                installed.discard(op.group_id)
            return parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, type_=ofp.OFPGT_ALL, group_id=op.group_id)
        raise TypeError(f"unknown operation {op!r}")

    @staticmethod
    def _out_port(actions, default):
        ports = [a[1] for a in actions if a[0] == "output"]
        return ports[0] if len(ports) == 1 else default

    @staticmethod
    def _actions(dp, actions):
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

    # -- packet-in ----------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def _packet_in(self, ev):
        msg = ev.msg
        dp = msg.datapath
        pkt = packet.Packet(msg.data)
        ip, seg = pkt.get_protocol(ipv4.ipv4), pkt.get_protocol(tcp.tcp)
        if ip is not None and seg is not None:
            key = FlowKey(ip.src, ip.dst, ip.proto, seg.src_port, seg.dst_port)
            plan = self.ctl.packet_in_flow(dp.id, msg.match["in_port"], key, ev.timestamp)
            if plan:
                self._submit(plan)
            return
        req = pkt.get_protocol(arp.arp)
        if req is None or req.opcode != arp.ARP_REQUEST:
            return
        ans = self.ctl.arp_request(dp.id, msg.match["in_port"], req.src_ip, req.src_mac, req.dst_ip)
        if ans is None:
            return
        reply = packet.Packet()
        reply.add_protocol(ethernet.ethernet(dst=ans.requester_mac, src=ans.target_mac,
                                             ethertype=ether_types.ETH_TYPE_ARP))
        reply.add_protocol(arp.arp(opcode=arp.ARP_REPLY, src_mac=ans.target_mac, src_ip=ans.target_ip,
                                   dst_mac=ans.requester_mac, dst_ip=ans.requester_ip))
        reply.serialize()
        ofp, parser = dp.ofproto, dp.ofproto_parser
        dp.send_msg(parser.OFPPacketOut(dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=ofp.OFPP_CONTROLLER,
                                        actions=[parser.OFPActionOutput(ans.port, 0)], data=reply.data))


def _port_up(ofp, desc) -> bool:
    return not (desc.state & ofp.OFPPS_LINK_DOWN or desc.config & ofp.OFPPC_PORT_DOWN)


def _from_ofp_actions(dp, actions) -> tuple:
    """OFP actions back into the rules' vocabulary (the inverse of DtnetApp._actions)."""
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


def _flow_rule(switch: str, dp, st) -> FlowRule:
    """A flow-stats entry as the FlowRule that would have made it."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    actions, goto = (), None
    for inst in st.instructions:
        if isinstance(inst, parser.OFPInstructionActions) and inst.type == ofp.OFPIT_APPLY_ACTIONS:
            actions = _from_ofp_actions(dp, inst.actions)
        elif isinstance(inst, parser.OFPInstructionGotoTable):
            goto = inst.table_id
        else:
            raise TypeError(f"instruction {inst}")
    return FlowRule(switch, st.priority, dict(st.match.items()), actions, cookie=st.cookie, table=st.table_id,
                    idle_timeout_s=st.idle_timeout, hard_timeout_s=st.hard_timeout, goto_table=goto,
                    notify_removed=bool(st.flags & ofp.OFPFF_SEND_FLOW_REM))


def _group_rule(switch: str, dp, g) -> GroupRule:
    ofp = dp.ofproto
    types = {ofp.OFPGT_SELECT: "select", ofp.OFPGT_ALL: "all", ofp.OFPGT_INDIRECT: "indirect",
             ofp.OFPGT_FF: "fast_failover"}
    return GroupRule(switch, g.group_id, types[g.type],
                     tuple((b.weight, _from_ofp_actions(dp, b.actions)) for b in g.buckets))


def _json(body, status=200):
    return Response(status=status, content_type="application/json", charset="utf-8",
                    body=json.dumps(body).encode())


class RestApi(ControllerBase):
    def __init__(self, req, link, data, **config):
        super().__init__(req, link, data, **config)
        self.app: DtnetApp = data[APP_KEY]

    @route("dtnet", API + "/status", methods=["GET"])
    def status(self, req, **_):
        return _json(self.app.ctl.status())

    @route("dtnet", API + "/state", methods=["GET"])
    def state(self, req, **_):
        return _json(self.app.ctl.state(time.time()))

    @route("dtnet", API + "/announce", methods=["POST"])
    def announce(self, req, **_):
        if req.content_length is None or req.content_length > MAX_BODY_BYTES:
            return _json({"error": f"body: expected a Content-Length of at most {MAX_BODY_BYTES} bytes"}, 413)
        code, answer = self.app.ctl.announce(req.body, time.time())
        return _json(answer, code)
