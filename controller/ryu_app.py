"""Ryu adapter: a shim between OpenFlow 1.3 switches and ``controller.core``.

Every handler turns a Ryu event into a call on ``FabricController`` with the
time, and turns what comes back (rule operations, ARP answers) into OFP
messages (``controller.ofwire``). No decision is made here.

The configuration (fabric, policy, params, listen addresses) comes from one
file, read by ``python -m controller.run CONFIG.json``, which hands it over
through ``configure`` before Ryu loads this app. By hand::

  python -m controller.run --fabric fat-tree:k=4 --policy congestion-aware \\
      --ofp-port 16653 --rest-port 18080

(bare ``ryu-manager`` crashes with Ryu 4.34 and eventlet 0.33; controller.run applies the shim.)
"""
from __future__ import annotations

import json
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
from controller.flows import FlowKey
from controller.ofwire import flow_rule_from_stats, group_rule_from_desc, port_up, to_ofp
from controller.rules import COOKIE_FLOW_BASE, COOKIE_FLOW_MASK, RuleError

BARRIER_TIMEOUT_S = 10.0
READ_BACK_TIMEOUT_S = 5.0  # a switch's answer to the tables read back on connect
API = "/dtnet/v1"
APP_KEY = "dtnet_app"
_SETUP: dict = {}  # what configure() handed over: the config and its fabric


def configure(cfg, fabric) -> None:
    """Hand the app its configuration (controller.config.ControllerConfig) and fabric."""
    _SETUP.update(cfg=cfg, fabric=fabric)


def build_controller() -> FabricController:
    if not _SETUP:
        raise SystemExit("dtnet controller: no configuration; start it with python -m controller.run CONFIG.json")
    cfg = _SETUP["cfg"]
    return FabricController(_SETUP["fabric"], cfg.policy, cfg.params, link_scale=cfg.link_scale)


class DtnetApp(app_manager.RyuApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]
    _CONTEXTS = {"wsgi": WSGIApplication}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ctl = build_controller()
        self.datapaths = {}
        self.groups: dict[int, set[int]] = {}  # dpid -> installed group ids (add vs modify)
        self.waiters: dict[tuple[int, int], hub.Event] = {}
        self.replies: dict[tuple[int, int], tuple[list, hub.Event]] = {}  # multipart replies being collected
        kwargs["wsgi"].register(RestApi, {APP_KEY: self})
        self.logger.info("dtnet: %d switches expected, policy %s, params %s",
                         len(self.ctl.switches), self.ctl.routing, json.dumps(self.ctl.policy.params.to_dict()))
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

    def _decide(self, what: str, fn, *args):
        """Call the controller (and so the policy); a policy that fails is logged and
        counted, and the controller goes on serving."""
        try:
            return fn(*args)
        except Exception as e:
            self.ctl.policy_failed(time.time(), what, e)
            self.logger.exception("dtnet: %s failed", what)
            return []

    # -- statistics ---------------------------------------------------------
    def _poll_loop(self):
        """Ask every switch for port (and per-flow) counters each period; after
        the replies had half a period to come in, let the policy react."""
        period = self.ctl.poll_s
        while True:
            for dp in list(self.datapaths.values()):
                ofp, parser = dp.ofproto, dp.ofproto_parser
                dp.send_msg(parser.OFPPortStatsRequest(dp, 0, ofp.OFPP_ANY))
                if self.ctl.sched is not None:
                    dp.send_msg(parser.OFPFlowStatsRequest(dp, 0, 0, ofp.OFPP_ANY, ofp.OFPG_ANY,
                                                           COOKIE_FLOW_BASE, COOKIE_FLOW_MASK, parser.OFPMatch()))
            hub.sleep(period / 2)
            plan = self._decide("poll", self.ctl.poll_done, time.time())
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
        plan = self._decide("flow removed", self.ctl.flow_removed, ev.msg.datapath.id, ev.msg.cookie,
                            ev.timestamp, dict(ev.msg.match.items()))
        if plan:
            self._submit(plan)

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def _port_status(self, ev):
        msg = ev.msg
        ofp = msg.datapath.ofproto
        up = port_up(ofp, msg.desc) and msg.reason != ofp.OFPPR_DELETE
        self._port_changed(msg.datapath.id, msg.desc.port_no, up, ev.timestamp)

    def _port_changed(self, dpid: int, port: int, up: bool, now: float) -> None:
        plan = self._decide("port status", self.ctl.port_status, dpid, port, up, now)
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
            return ([(p.port_no, port_up(ofp, p)) for p in ports if p.port_no <= ofp.OFPP_MAX],
                    [flow_rule_from_stats(name, dp, st) for st in flows],
                    [group_rule_from_desc(name, dp, g) for g in groups])
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
                installed = self.groups.setdefault(dp.id, set())
                for op in ops:
                    dp.send_msg(to_ofp(dp, op, installed))
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

    # -- packet-in ----------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def _packet_in(self, ev):
        msg = ev.msg
        dp = msg.datapath
        pkt = packet.Packet(msg.data)
        ip, seg = pkt.get_protocol(ipv4.ipv4), pkt.get_protocol(tcp.tcp)
        if ip is not None and seg is not None:
            key = FlowKey(ip.src, ip.dst, ip.proto, seg.src_port, seg.dst_port)
            plan = self._decide("new flow", self.ctl.packet_in_flow, dp.id, msg.match["in_port"], key, ev.timestamp)
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
        try:
            code, answer = self.app.ctl.announce(req.body, time.time())
            self.app._submit(self.app.ctl.take_announce_plan())  # the job's open flows onto its paths
        except Exception as e:  # the policy failed: say so, keep serving
            self.app.logger.exception("dtnet: announce failed")
            return _json({"error": f"policy {self.app.ctl.routing} failed: {type(e).__name__}: {e}"[:300]}, 500)
        return _json(answer, code)
