"""The testbed: OVS + Mininet fabric + Ryu controller, as one context manager.

    with Testbed(fabric, run_dir, policy="ecmp", params={}, scale_link=2.5e-5) as tb:
        tb.host("h0").cmd("ping -c1 10.0.0.2")

Entering starts OVS if needed, detects the datapath, builds the fabric,
shapes every link, starts the controller and waits until every switch is
connected and every route installed. Leaving tears everything down, also
on an exception or SIGINT/SIGTERM (the CLI turns those into exceptions).
"""
from __future__ import annotations

import http.client
import json
import os
import shlex
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass

import psutil

from badinput.paths import inside, open_out
from controller import config as controller_config
from controller.registry import DEFAULT_POLICY
from emulator.testbed import runstate, shaping, switchd
from emulator.testbed import transport as testbed_transport
from emulator.testbed.datapath import (AFXDP_MTU, AFXDP_PORT, MTU, detect_datapath, ensure_ovs,
                                       kernel_datapath_available, ovs_iface_types, ovs_send_buffer,
                                       raise_send_buffer_default)
from emulator.testbed.process import TestbedError, close_inherited, free_port, free_ports, stop_process, wait_for
from experiment import model
from topologies import Fabric


@dataclass
class LinkShape:
    dev: str
    rate_mbps: float
    host: str | None  # run inside this host's namespace, or the root one
    netns: str | None = None  # or inside this named namespace (AF_XDP link namespace)
    ingress: bool = False  # shape what dev receives (through an IFB), not what it sends
    delay_us: float = 0.0  # emulated one-way delay (netem), 0: none
    limit_bytes: int | None = None  # its queue's bound in bytes (None: queue_packets x 1500 B)


def daemon_switch_class(base, daemon: switchd.SwitchDaemon, ofp_port: int):
    """A Mininet OVS switch class whose ovs-vsctl and ovs-ofctl talk to one of the run's own
    daemons, whose shell (so its ports) lives in the daemon's namespace, and whose controller
    is the daemon's relay socket. Mininet starts and stops each switch class in one batch, so
    each daemon's switches are a class of their own."""
    import re

    from mininet.node import Switch
    from mininet.util import errRun

    vsctl = " ".join(daemon.vsctl())
    tcp_target, unix_target = f"tcp:127.0.0.1:{ofp_port}", f"unix:{daemon.controller_socket}"

    def to_daemon(run):
        return lambda cmd, **kw: run(cmd.replace("ovs-vsctl", vsctl, 1) if cmd.startswith("ovs-vsctl") else cmd, **kw)

    class DaemonSwitch(base):
        @classmethod
        def setup(cls):
            """Mininet's own setup asks the shared database; this one only needs the version."""
            out = subprocess.run(["ovs-vsctl", "--version"], capture_output=True, text=True).stdout
            cls.OVSVersion = re.findall(r"\d+\.\d+", out)[0]

        def _popen(self, cmd, **params):
            # The shell in the daemon's namespace: Mininet then makes this switch's veth ends there.
            return super()._popen(daemon.in_netns(cmd), **params)

        def vsctl(self, *args, **kwargs):
            args = tuple(str(a).replace(tcp_target, unix_target) for a in args)
            if self.batch:
                return super().vsctl(*args, **kwargs)
            return self.cmd(vsctl, *args, **kwargs)

        def controllerUUIDs(self, update=False):
            if not self._uuids or update:
                out = self.cmd(vsctl, "-- get Bridge", self, "Controller").strip()
                self._uuids = [c.strip() for c in out.strip("[]").split(",") if c.strip()]
            return self._uuids

        def dpctl(self, *args):
            return self.cmd("ovs-ofctl", args[0], daemon.mgmt(self.name), *args[1:])

        def stop(self, deleteIntfs=True):
            self.cmd(vsctl, "del-br", self)
            self.cmd("ip link del", self)
            Switch.stop(self, deleteIntfs)  # OVSSwitch.stop would ask the shared database

        @classmethod
        def batchStartup(cls, switches, run=errRun):
            return super().batchStartup(switches, run=to_daemon(run))

        @classmethod
        def batchShutdown(cls, switches, run=errRun):
            return super().batchShutdown(switches, run=to_daemon(run))

    DaemonSwitch.__name__ = DaemonSwitch.__qualname__ = f"Daemon{daemon.index}Switch"
    return DaemonSwitch


class Testbed:
    """Settings left out take the experiment file's defaults (experiment.model.Testbed)."""
    __test__ = False  # a name pytest would otherwise try to collect where tests import it

    def __init__(self, fabric: Fabric, run_dir: str, *, scale_link: float, policy: str = DEFAULT_POLICY,
                 params: dict | None = None, datapath: str = model.Testbed.datapath,
                 queue_packets: int = model.Testbed.queue_packets,
                 ready_timeout_s: float = model.Testbed.ready_timeout_s, controller: bool = True, mtu: int = MTU,
                 link_delay_us: float = 0.0, log=print, routing: str | None = None, tcp_cc: str | None = None,
                 switch_queue_bytes: int | None = None, kind_delay_us: dict | None = None,
                 switch_daemons: str | int = model.Testbed.switch_daemons,
                 userspace_tso: bool = model.Testbed.userspace_tso,
                 switch_malloc: str = model.Testbed.switch_malloc):
        self.fabric = fabric
        self.run_dir = os.path.abspath(run_dir)
        self.policy = routing or policy  # routing: the old name
        self.params = dict(params or {})
        self.scale_link = scale_link
        self.requested_datapath = datapath
        self.queue_packets = queue_packets
        self.ready_timeout_s = ready_timeout_s
        self.use_controller = controller
        self.mtu = mtu
        # Emulated one-way delay of every fabric link (netem); NVLink hops have none.
        self.link_delay_us = link_delay_us
        # transport: (emulator.testbed.transport): the kernel's congestion control in every host
        # (None: leave the kernel's default), each switch output port's queue in emulated bytes,
        # and the emulated delay per link kind (in place of link_delay_us).
        self.tcp_cc = tcp_cc
        self.switch_queue_bytes = switch_queue_bytes
        self.kind_delay_us = kind_delay_us
        # "shared": the machine's ovs-vswitchd; N: this run's own (emulator.testbed.switchd);
        # "auto" is resolved when the testbed starts (switchd.resolve), the request kept for the summary.
        self.requested_switchd = {"daemons": switch_daemons, "userspace_tso": userspace_tso}
        self.switch_daemons = switch_daemons
        self.userspace_tso = userspace_tso
        self.switch_malloc = switch_malloc
        self.daemons: list[switchd.SwitchDaemon] = []
        self.daemon_of: dict[str, switchd.SwitchDaemon] = {}  # OpenFlow switch -> its daemon
        self.log = log
        self.net = None
        self.ctl_proc = None
        self.tag = None
        self.state = None
        self.datapath = None
        self.rest_port = None
        self.shapes: list[LinkShape] = []
        self.link_ns = None  # AF_XDP: the namespace holding switch-to-switch links
        self.ns_ends: dict[tuple[str, str], str] = {}  # (node, peer) -> its end inside link_ns

    # -- names ---------------------------------------------------------------
    def mn_name(self, node: str) -> str:
        return self.tag + node

    def host(self, name: str):
        return self.net.get(self.mn_name(name))

    def intf(self, node: str, peer: str) -> str:
        return f"{self.mn_name(node)}-eth{self.fabric.port(node, peer)}"

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    # -- lifecycle -----------------------------------------------------------
    def __enter__(self):
        if os.geteuid() != 0:
            raise TestbedError("the testbed needs root (Mininet and OVS); run with sudo")
        os.makedirs(self.run_dir, exist_ok=True)
        self.tag = runstate.lease_tag(self.run_dir)
        self.state = runstate.RunState(self.run_dir, self.tag)
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self):
        from mininet.log import setLogLevel
        from mininet.net import Mininet
        from mininet.node import OVSSwitch, RemoteController

        from emulator.testbed.mntopo import FabricTopo

        setLogLevel("error")
        close_inherited()  # before OVS, Mininet's shells, the controller and agents start
        self.switch_daemons, self.userspace_tso = switchd.resolve(
            self.switch_daemons, self.userspace_tso, self.switch_malloc, self.requested_datapath,
            kernel_datapath_available)
        if self.switch_daemons == "shared":
            ensure_ovs()
            self.datapath = detect_datapath(self.requested_datapath)
        else:
            self._start_switch_daemons()
        self.state.set(datapath=self.datapath,
                       bridges=[self.mn_name(s) for s in self.fabric.switches])
        fabric_path = inside(self.run_dir, "fabric.json")
        self.fabric.dump(fabric_path)

        ofp_port = self._launch_controller(fabric_path) if self.use_controller else free_port()

        dp = "kernel" if self.datapath == "kernel" else "user"
        fail_mode = "secure" if self.use_controller else "standalone"
        afxdp = self.datapath == "afxdp"
        if afxdp:
            self.mtu = min(self.mtu, AFXDP_MTU)

        class FabricSwitch(OVSSwitch):
            def __init__(self, name, **kw):
                kw.setdefault("datapath", dp)
                kw.setdefault("protocols", "OpenFlow13")
                kw.setdefault("failMode", fail_mode)
                super().__init__(name, **kw)

            def intfOpts(self, intf):
                opts = super().intfOpts(intf)
                return opts + f" type={AFXDP_PORT} options:xdp-mode=generic" if afxdp else opts

        class Ryu(RemoteController):
            def checkListening(self):
                """Mininet telnets to the port to check; the controller's binary
                OFPT_HELLO in telnet's output then crashes Mininet's UTF-8 decoder.
                _launch_controller has already seen this very process listen."""

        switch_cls = FabricSwitch
        if self.daemons:
            for d in self.daemons:
                d.start_relay(ofp_port)
            classes = [daemon_switch_class(FabricSwitch, d, ofp_port) for d in self.daemons]
            switch_cls = {s: classes[d.index] for s, d in self.daemon_of.items()}
        topo = FabricTopo(fabric=self.fabric, prefix=self.tag, switch_cls=switch_cls, switch_links=not afxdp)
        ctl = (lambda name: Ryu(name, ip="127.0.0.1", port=ofp_port)) if self.use_controller else None
        self.log(f"[testbed] building {self.fabric.kind}: {self.fabric.counts()['hosts']} hosts, "
                 f"{len(self.fabric.switches)} switches, datapath {self.datapath}")
        self.net = Mininet(topo=topo, switch=FabricSwitch, controller=ctl, autoSetMacs=False,
                           autoStaticArp=False, build=False, waitConnected=False)
        self.net.build()
        if afxdp:
            self._wire_link_namespace()
        self.state.set(host_pids={h: self.host(h).pid for h in self.fabric.hosts})
        self.net.start()
        if self.tcp_cc is not None and testbed_transport.allow_in_namespaces(self.tcp_cc):
            self.log(f"[testbed] {self.tcp_cc} added to net.ipv4.tcp_allowed_congestion_control, so that "
                     "host namespaces may make it their default")
        self._configure_hosts()
        if not self.daemons:
            self._shape_links()
        if self.use_controller:
            wait_for(self._controller_ready, self.ready_timeout_s,
                     "every switch to connect and every route to be installed "
                     f"(controller log: {inside(self.run_dir, 'controller.log')})")
        if self.daemons:
            # A fresh ovs-vswitchd resets the qdisc of its ports once, some time after they join
            # (measured: the HTB put on before the switches connected was gone after). Shape once
            # they are connected, and check that it stayed.
            self._shape_links()
            missing = self._unshaped_root_devs()
            if missing:
                raise TestbedError(f"link shaping did not hold on {len(missing)} switch ports ({', '.join(missing[:4])})")
        self.state.set(status="running")

    def _start_switch_daemons(self):
        """This run's own ovsdb-server and ovs-vswitchd pairs, configured before they start; the
        OpenFlow switches dealt out between them (switchd.shard)."""
        if self.requested_datapath == "kernel" or (self.requested_datapath == "auto" and
                                                    detect_datapath("auto") == "kernel"):
            raise TestbedError("testbed.switch_daemons needs the userspace datapath, and this machine has the "
                               "OVS kernel module: set testbed.datapath: userspace, or switch_daemons: shared")
        raise_send_buffer_default()  # each daemon's send socket takes its buffer at start
        config = switchd.other_config(self.userspace_tso)
        env = switchd.malloc_env(self.switch_malloc)
        for i in range(int(self.switch_daemons)):
            d = switchd.SwitchDaemon(self.tag, i, self.run_dir, config, env)
            self.daemons.append(d)
            d.start(self.state)
        if self.userspace_tso and 'userspace-tso-enable="true"' not in self.daemons[0].other_config_now():
            raise TestbedError("ovs-vswitchd did not keep other_config:userspace-tso-enable")
        types = ovs_iface_types(self.daemons[0].vsctl()) if self.requested_datapath == "afxdp" else None
        self.datapath = detect_datapath(self.requested_datapath, iface_types=types)
        shards = switchd.shard(self.fabric, len(self.daemons))
        self.daemon_of = {s: self.daemons[i] for s, i in shards.items()}
        self.log(f"[testbed] {len(self.daemons)} switch daemon(s) of this run"
                 + (", userspace TSO" if self.userspace_tso else "") + (", tcmalloc" if env else "")
                 + (" (testbed.switch_daemons: auto)" if self.requested_switchd["daemons"] == "auto" else ""))

    def vsctl(self, switch: str | None = None) -> list[str]:
        """ovs-vsctl talking to the database that holds this switch (the shared one by default)."""
        d = self.daemon_of.get(switch) if switch is not None else (self.daemons[0] if self.daemons else None)
        return d.vsctl() if d is not None else ["ovs-vsctl"]

    def netns_of(self, node: str) -> str | None:
        """The named namespace of a switch's ports (its daemon's), or None: the root one."""
        d = self.daemon_of.get(node)
        return d.netns if d is not None else None

    def ip_argv(self, node: str) -> list[str]:
        """`ip` acting on the namespace of this switch's ports."""
        ns = self.netns_of(node)
        return ["ip"] if ns is None else ["ip", "-n", ns]

    def in_netns_argv(self, node: str, argv: list[str]) -> list[str]:
        """argv run in the namespace of this switch's ports (e.g. to read its devices' sysfs)."""
        ns = self.netns_of(node)
        return argv if ns is None else ["ip", "netns", "exec", ns, *argv]

    def net_dev_paths(self) -> list[str]:
        """/proc/net/dev of every namespace holding switch ports (the root one, and each daemon's)."""
        return ["/proc/net/dev", *(d.net_dev_path() for d in self.daemons)]

    def ofctl_target(self, switch: str) -> str:
        """What ovs-ofctl names this switch's bridge by: its name, or its daemon's mgmt socket."""
        d = self.daemon_of.get(switch)
        return d.mgmt(self.mn_name(switch)) if d is not None else self.mn_name(switch)

    def send_buffer_bytes(self) -> int | None:
        """The smallest send buffer among the switch daemons' transmit sockets (userspace only)."""
        if self.datapath != "userspace":
            return None
        if not self.daemons:
            return ovs_send_buffer()
        got = [ovs_send_buffer(d.pid("ovs-vswitchd"), d.netns) for d in self.daemons]
        return None if None in got else min(got)

    def switch_daemons_summary(self) -> dict:
        """summary.json switch_daemons: which switch daemons forwarded, with what options."""
        out = {"daemons": self.switch_daemons, "userspace_tso": bool(self.userspace_tso),
               "requested": dict(self.requested_switchd)}
        # What each forwarding daemon has mapped, read back rather than assumed (the shared one's
        # is however the machine started it).
        pids = [d.pid("ovs-vswitchd") for d in self.daemons] if self.daemons else [switchd.shared_vswitchd_pid()]
        out["malloc"] = [switchd.loaded_malloc(p) for p in pids]
        if self.daemons:
            out["switches"] = [sorted(s for s, d in self.daemon_of.items() if d is dm) for dm in self.daemons]
        return out

    def _launch_controller(self, fabric_path: str, attempts: int = 3) -> int:
        """Start the controller on free ports and wait until it, not some other
        run's controller, listens on both. A free port is only free when asked:
        a run starting at the same moment can take it first, and then our
        switches would talk to its controller. So a lost race means new ports."""
        for attempt in range(attempts):
            ofp_port, self.rest_port = free_ports(2)  # distinct: OpenFlow must not answer REST
            self._start_controller(fabric_path, ofp_port, restart=attempt > 0)  # controller.log keeps each try
            ports = {ofp_port, self.rest_port}
            state = wait_for(lambda: self._listening(ports), self.ready_timeout_s,
                             f"the controller to listen on ports {sorted(ports)}")
            if state == "listening":
                return ofp_port
            self.log(f"[testbed] controller could not listen on {sorted(ports)}; trying other ports")
        raise TestbedError(f"controller exited with status {self.ctl_proc.returncode} "
                           f"(see {inside(self.run_dir, 'controller.log')})")

    def _listening(self, ports: set[int]) -> str | None:
        if self.ctl_proc.poll() is not None:
            return "exited"
        try:
            conns = psutil.Process(self.ctl_proc.pid).net_connections(kind="tcp")
        except psutil.Error:
            return None
        mine = {c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN}
        return "listening" if ports <= mine else None

    def _start_controller(self, fabric_path: str, ofp_port: int, restart: bool = False):
        self._ctl_args = (fabric_path, ofp_port)
        # One configuration file, in the run folder: `python -m controller.run` it to start the same controller.
        cfg_path = inside(self.run_dir, "controller.json")
        controller_config.make(fabric_path, self.policy, self.params, ofp_port=ofp_port, rest_port=self.rest_port,
                               check_fabric=False,  # dumped from the Fabric a moment ago
                               # The controller reports and decides in real-cluster Gb/s.
                               link_scale=self.scale_link).write(cfg_path)
        cmd = [sys.executable, "-m", "controller.run", cfg_path]
        # One log: Ryu logs to stderr, and a crash's traceback lands there too (a --log-file
        # would only repeat the log lines).
        self._ctl_log = open_out(self.run_dir, "controller.log", append=restart)
        # Its own session, so a Ctrl-C at the terminal reaches us, not it:
        # we stop it ourselves during teardown.
        self.ctl_proc = subprocess.Popen(cmd, stdout=self._ctl_log, stderr=subprocess.STDOUT,
                                         start_new_session=True, close_fds=True)
        self.state.add_pid("controller", self.ctl_proc.pid)

    def _of_switch(self, node: str) -> bool:
        nd = self.fabric.node(node)
        return nd["role"] == "switch" and nd["openflow"]

    def _wire_link_namespace(self):
        """AF_XDP transmit skips the egress qdisc, so a link between two OVS
        switches runs through a small namespace: each switch port is a veth
        whose peer sits there, the two peers joined by a Linux bridge, and HTB
        on each peer shapes one direction."""
        from mininet.link import Intf

        self.link_ns = self.tag + "links"
        subprocess.run(["ip", "netns", "add", self.link_ns], check=True, capture_output=True)
        root, inside, ports = [], [], []
        for i, (a, b, d) in enumerate(self.fabric.links()):
            if not (self._of_switch(a) and self._of_switch(b)):
                continue
            inside.append(f"link add br{i} mtu {self.mtu} type bridge stp_state 0")
            for node, peer, end in ((a, b, f"l{i}a"), (b, a, f"l{i}b")):
                dev = self.intf(node, peer)
                root += [f"link add {dev} mtu {self.mtu} type veth peer name {end} mtu {self.mtu}",
                         f"link set {end} netns {self.link_ns}", f"link set {dev} up"]
                inside += [f"link set {end} master br{i}", f"link set {end} up"]
                self.ns_ends[node, peer] = end
                ports.append((dev, node, d["ports"][node]))
            inside.append(f"link set br{i} up")
        for ns, lines in ((None, root), (self.link_ns, inside)):
            cmd = ["ip", "-batch", "-"] if ns is None else ["ip", "-n", ns, "-batch", "-"]
            r = subprocess.run(cmd, input="\n".join(lines) + "\n", capture_output=True, text=True)
            if r.returncode != 0:
                raise TestbedError(f"wiring the AF_XDP link namespace failed: {r.stderr.strip()[:300]}")
        subprocess.run(["ip", "netns", "exec", self.link_ns, "sh", "-c",
                        shaping.offload_cmd(sorted(self.ns_ends.values()))], capture_output=True)
        for dev, node, port in ports:  # once the device exists: Intf() sets it up
            Intf(dev, node=self.net.get(self.mn_name(node)), port=port)

    def restart_controller(self, down_s: float = 0.0, interrupted=None) -> dict | None:
        """Stop the controller, leave it away down_s, start it again on the same
        ports and wait until it has resynchronized every switch. The switches
        are fail-secure: they forward on the flows they hold meanwhile. Returns
        the wall times, or None when `interrupted` (an Event) is set first."""
        # OVS retries a lost controller after 1, 2, 4, then 8 s; retry every second instead.
        cmds: dict[tuple, list[str]] = {}
        for s in self.fabric.openflow_switches:
            cmds.setdefault(tuple(self.vsctl(s)), []).extend(["--", "set", "controller", self.mn_name(s),
                                                               "max_backoff=1000"])
        for vsctl, args in cmds.items():
            subprocess.run([*vsctl, *args], capture_output=True)
        stopped_at = time.time()
        stop_process(self.ctl_proc)
        self._ctl_log.close()
        self.log(f"[testbed] controller stopped; restarting in {down_s:.2f} s")
        if interrupted is not None and interrupted.wait(down_s):
            return None
        if interrupted is None:
            time.sleep(down_s)
        started_at = time.time()
        self._start_controller(*self._ctl_args, restart=True)
        wait_for(lambda: (interrupted is not None and interrupted.is_set()) or self._controller_ready(),
                 self.ready_timeout_s, "the restarted controller to resynchronize every switch "
                 f"(controller log: {inside(self.run_dir, 'controller.log')})")
        if interrupted is not None and interrupted.is_set():
            return None
        ready_at = time.time()
        self.log(f"[testbed] controller back: every switch resynchronized {ready_at - started_at:.2f} s after start")
        return {"stopped_at": stopped_at, "started_at": started_at, "ready_at": ready_at}

    def controller_status(self) -> dict | None:
        return self.controller_get("status")

    def controller_get(self, what: str) -> dict | None:
        """GET /dtnet/v1/<what> (status, state); None when the controller does not answer."""
        if self.rest_port is None:
            return None
        try:
            with urllib.request.urlopen(f"{self.rest_url}/dtnet/v1/{what}", timeout=2) as r:
                return json.load(r)
        except (OSError, ValueError, http.client.HTTPException):  # not (yet) an HTTP answer
            return None

    def _controller_ready(self) -> bool:
        if self.ctl_proc.poll() is not None:
            raise TestbedError(f"controller exited with status {self.ctl_proc.returncode} "
                               f"(see {inside(self.run_dir, 'controller.log')})")
        st = self.controller_status()
        return bool(st and st.get("ready"))

    def _configure_hosts(self):
        """Addresses on the NVLink side, offloads off, IPv6 off (its chatter
        would reach the controller for nothing)."""
        for h in self.fabric.hosts:
            node = self.host(h)
            nd = self.fabric.node(h)
            devs = [self.intf(h, nbr) for nbr in self.fabric.graph.neighbors(h)]
            cmds = ["sysctl -qw net.ipv6.conf.all.disable_ipv6=1",
                    # An idle connection must not fall back to slow start between steps.
                    "sysctl -qw net.ipv4.tcp_slow_start_after_idle=0"]
            if self.tcp_cc is not None:  # per namespace: each host's own TCP stack
                cmds.append(f"sysctl -qw net.ipv4.tcp_congestion_control={shlex.quote(self.tcp_cc)}")
            cmds += [f"ip link set {dev} mtu {self.mtu}" for dev in devs]
            # A 200 ms minimum RTO is 5 ms after the time dilation: far from a
            # lossless RDMA fabric. Keep recovery short.
            fab_dev = self.intf(h, self.fabric.attachment(h)[0])
            cmds.append(f"ip route replace 10.0.0.0/16 dev {fab_dev} proto kernel scope link src {nd['ip']}")
            nv = self.fabric.nvlink_switch(h)
            if nv is not None:
                dev = self.intf(h, nv)
                cmds.append(f"ip link set {dev} address {nd['nvlink_mac']}")
                cmds.append(f"ip addr add {nd['nvlink_ip']}/16 dev {dev}")
                cmds.append(f"ip link set {dev} up")
                cmds.append(f"ip route replace 10.1.0.0/16 dev {dev} proto kernel scope link src {nd['nvlink_ip']}")
            if self.datapath != "kernel":
                cmds.append(shaping.offload_cmd(devs, tso=self.userspace_tso))
            if self.userspace_tso:
                for sw, _ in self.fabric.attachments(h):  # every fabric NIC (two when dual-homed)
                    mbps = self.fabric.graph.edges[h, sw]["link_gbps"] * 1000.0 * self.scale_link
                    cmds.append(f"ip link set {self.intf(h, sw)} gso_max_size {shaping.gso_max_bytes(mbps, self.mtu)}")
            node.cmd("; ".join(cmds))
            if self.tcp_cc is not None:
                have = node.cmd("cat /proc/sys/net/ipv4/tcp_congestion_control").strip()
                if have != self.tcp_cc:  # never run with another one than the file asks for
                    raise TestbedError(f"host {h}: net.ipv4.tcp_congestion_control is {have!r} after setting "
                                       f"{self.tcp_cc!r}")
        if self.tcp_cc is None:  # say what the hosts inherited: engines compared with this run must know
            cc = self.host(self.fabric.hosts[0]).cmd("cat /proc/sys/net/ipv4/tcp_congestion_control").strip()
            self.log(f"[testbed] TCP congestion control in the hosts: {cc} (the kernel's default; "
                     "transport.tcp.cc sets it)")
        by_ns: dict = {}
        for s in self.fabric.switches:
            by_ns.setdefault(self.netns_of(s), []).extend(self.intf(s, nbr) for nbr in self.fabric.graph.neighbors(s))
        for ns, sw_devs in by_ns.items():
            cmds = [f"ip link set {d} mtu {self.mtu}" for d in sw_devs]
            if self.datapath != "kernel":
                cmds.append(shaping.offload_cmd(sw_devs, tso=self.userspace_tso))
            sh = ["sh", "-c", "; ".join(cmds)]
            subprocess.run(sh if ns is None else ["ip", "netns", "exec", ns, *sh], capture_output=True)
        for s in self.fabric.switches:
            if self.fabric.node(s)["openflow"]:
                subprocess.run([*self.vsctl(s), "set", "bridge", self.mn_name(s), f"other-config:mtu_request={self.mtu}",
                                "--", "set", "interface", self.mn_name(s), f"mtu_request={self.mtu}"],
                               capture_output=True)

    def plan_shaping(self) -> list[LinkShape]:
        """Both directions of every link at the scaled rate, each where a qdisc
        sees it: normally each interface's egress. On AF_XDP an OVS port's
        transmit bypasses its qdisc, so the switch-to-host direction is shaped
        at the host's ingress (IFB) and switch-to-switch links in the link
        namespace."""
        shapes = []
        for a, b, d in self.fabric.links():
            mbps = d["link_gbps"] * 1000.0 * self.scale_link
            if self.kind_delay_us is not None:
                delay = self.kind_delay_us.get(d.get("kind"), 0.0)
            else:
                delay = 0.0 if d.get("kind") == "nvlink" else self.link_delay_us
            for node, peer in ((a, b), (b, a)):
                is_host = self.fabric.node(node)["role"] == "host"
                # A switch's output port holds switch_buffer_bytes; a host's NIC keeps queue_packets.
                limit = None if is_host else self.switch_queue_bytes
                if (node, peer) in self.ns_ends:
                    # The peer's end carries what `node` sends (it egresses towards peer).
                    shapes.append(LinkShape(self.ns_ends[peer, node], mbps, None, netns=self.link_ns, delay_us=delay,
                                            limit_bytes=limit))
                elif self.datapath == "afxdp" and self._of_switch(node):
                    shapes.append(LinkShape(self.intf(peer, node), mbps, peer, ingress=True, delay_us=delay,
                                            limit_bytes=limit))
                else:
                    shapes.append(LinkShape(self.intf(node, peer), mbps, node if is_host else None,
                                            netns=None if is_host else self.netns_of(node), delay_us=delay,
                                            limit_bytes=limit))
        return shapes

    def _shape_links(self):
        self.shapes = self.plan_shaping()
        batches: dict[tuple, list[str]] = {}
        for s in self.shapes:
            where = ("host", s.host) if s.host else ("netns", s.netns) if s.netns else ("root", None)
            lines = batches.setdefault(where, [])
            dev = s.dev
            if s.ingress:
                dev = shaping.IFB_NAME
                self.host(s.host).cmd(f"ip link add {dev} type ifb; ip link set {dev} mtu {self.mtu} up")
                lines += shaping.ingress_redirect_cmds(s.dev, dev)
            lines += shaping.htb_cmds(dev, s.rate_mbps, self.queue_packets, self.mtu, delay_us=s.delay_us,
                                      limit_bytes=s.limit_bytes)
        for (kind, name), lines in batches.items():
            self._tc_batch(kind, name, lines)

    def _unshaped_root_devs(self) -> list[str]:
        """Switch-side devices (root or daemon namespaces) planned to be shaped that have no root
        qdisc of ours now."""
        missing = []
        for ns in {None, *(d.netns for d in self.daemons)}:
            cmd = ["tc", "qdisc", "show"] if ns is None else ["tc", "-n", ns, "qdisc", "show"]
            out = subprocess.run(cmd, capture_output=True, text=True).stdout
            have = {ln.split()[4] for ln in out.splitlines()
                    if len(ln.split()) > 5 and ln.split()[1] in ("htb", "netem") and ln.split()[5] == "root"}
            missing += [s.dev for s in self.shapes if s.host is None and s.netns == ns and s.dev not in have]
        return sorted(missing)

    def _tc_batch(self, kind: str, name: str | None, lines: list[str]):
        path = inside(self.run_dir, f"tc-{name or kind}.batch")
        with open_out(self.run_dir, f"tc-{name or kind}.batch") as f:
            f.write("\n".join(lines) + "\n")
        if kind == "host":
            # The path holds the user's --out: quoted, it stays one word of the host's shell.
            out = self.host(name).cmd(f"tc -batch {shlex.quote(path)}; echo rc=$?")
            rc = 0 if out.strip().endswith("rc=0") else 1
        else:
            cmd = ["tc", "-batch", path] if kind == "root" else ["ip", "netns", "exec", name, "tc", "-batch", path]
            r = subprocess.run(cmd, capture_output=True, text=True)
            out, rc = r.stderr, r.returncode
        if rc != 0:
            raise TestbedError(f"tc shaping failed ({path}): {out.strip()[:300]}")
        os.unlink(path)

    def __exit__(self, *exc):
        errors = []
        if self.net is not None:
            try:
                self.net.stop()
                # Mininet's RemoteController.stop() does nothing: its shell (and
                # pty) would outlive the run in a long-lived process.
                for c in self.net.controllers:
                    c.terminate()
            except Exception as e:  # keep tearing down the rest
                errors.append(f"mininet stop: {e}")
            self.net = None
        if self.ctl_proc is not None:
            stop_process(self.ctl_proc)
            self.ctl_proc = None
            self._ctl_log.close()
        for d in self.daemons:  # after Mininet removed its bridges from them
            try:
                d.stop()
            except Exception as e:  # keep tearing down the rest
                errors.append(f"switch daemon {d.index}: {e}")
        if self.tag:
            self._remove_leftovers()
            if self.state:
                self.state.set(status="stopped")
            runstate.release_tag(self.tag)
        if errors:
            self.log("[testbed] teardown: " + "; ".join(errors))
        return False

    def _remove_leftovers(self):
        """Mininet's stop misses things when a start failed halfway, and
        never knew the AF_XDP link namespace."""
        runstate.remove_leftovers(self.tag)


