"""The run's own Open vSwitch daemons: an ovsdb-server and an ovs-vswitchd per shard.

Why: `other_config:userspace-tso-enable` takes effect only when ovs-vswitchd
starts, so it cannot be a per-run setting on the machine's shared daemon; and
one userspace ovs-vswitchd forwards every `system` port from one thread, one
core. A run that starts its own daemons configures them before they start, and
with two of them its switches forward on two cores (docs/datapaths.md). Each
daemon has its own database file, created from the installed schema, and its
own sockets in a short directory under /run/dtnet (a unix socket path holds at
most 107 bytes; run folders can be longer); its log goes to the run folder. It
is stopped by PID at teardown, and `dtnet clean` finds it in state.json.

Each ovs-vswitchd runs in a network namespace of its own, with its switches'
ports: a userspace datapath opens a tap device of a fixed name, so two of them
(the shared one included) cannot have bridges in one namespace. Its switches
reach the controller, which listens on the root namespace's loopback, through
a unix socket relayed there (ControllerRelay).
"""
from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import threading

from badinput.paths import inside
from emulator.testbed.process import TestbedError, stop_process, wait_for

VSWITCH_SCHEMA = "/usr/share/openvswitch/vswitch.ovsschema"
SOCKET_ROOT = "/run/dtnet"  # runstate.LEASE_DIR: the tag in the name is leased to this run
# The priority ovs-ctl gives the shared daemons (OVS_VSWITCHD_PRIORITY): the run's own must not
# forward at a lower one than the daemon they are measured against.
NICE = -10
VSCTL_TIMEOUT_S = 60  # a dead daemon must not hang a teardown; 60 s is far above a batch start
ROLES = ("ovsdb-server", "ovs-vswitchd")
# Every userspace datapath opens a tap device of this fixed name (OVS 3.1: "ovs-" + datapath_type),
# and a second ovs-vswitchd in the same network namespace then fails to open its datapath
# ("creating tap device failed: Device or resource busy"): one userspace daemon with bridges
# per namespace, the shared one included.
NETDEV_DATAPATH_DEV = "ovs-netdev"


def daemon_dir(tag: str, index: int) -> str:
    return os.path.join(SOCKET_ROOT, f"ovs-{tag}{index}")


# Receiving a batch, a userspace daemon allocates and frees buffers large enough that glibc's
# malloc returns them to the kernel and maps them again: in a profile of a 64-host run, page faults
# and malloc took a third of each daemon's samples. tcmalloc (Debian's libtcmalloc-minimal4) keeps
# the memory and halves the daemon's CPU (docs/datapaths.md, "The switch daemons' allocator").
TCMALLOC_GLOB = "/usr/lib/*-linux-gnu/libtcmalloc_minimal.so.4"
SHARED_PIDFILE = "/run/openvswitch/ovs-vswitchd.pid"


def tcmalloc_path() -> str | None:
    """The installed tcmalloc library, or None."""
    found = sorted(glob.glob(TCMALLOC_GLOB))
    return found[0] if found else None


def malloc_env(choice: str) -> dict:
    """What the daemons' environment needs for testbed.switch_malloc (auto: tcmalloc where installed)."""
    path = tcmalloc_path()
    if choice == "tcmalloc" and path is None:
        raise TestbedError("testbed.switch_malloc: tcmalloc is not installed (apt-get install "
                           "libtcmalloc-minimal4), or set it to auto or libc")
    return {"LD_PRELOAD": path} if choice in ("auto", "tcmalloc") and path else {}


def loaded_malloc(pid: int | None) -> str | None:
    """tcmalloc or libc: the allocator the process has mapped (None: not readable)."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/maps") as f:
            return "tcmalloc" if "libtcmalloc" in f.read() else "libc"
    except OSError:
        return None


def shared_vswitchd_pid(pidfile: str = SHARED_PIDFILE) -> int | None:
    """The machine's ovs-vswitchd (ovs-ctl's pidfile), or None."""
    try:
        with open(pidfile) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def own_asked(tso, malloc: str) -> bool:
    """The file asks for what only the run's own daemons have: userspace TSO, an allocator."""
    return tso is True or malloc != "auto"


def resolve(daemons, tso, malloc: str, datapath: str, kernel_available) -> tuple:
    """What testbed.switch_daemons and userspace_tso run as: (daemons, tso), auto resolved.

    auto picks one daemon of the run's own with userspace TSO wherever the datapath is userspace:
    measured on a quiet 2-core machine it forwards twice what the shared daemon does faithfully
    (docs/datapaths.md, "What auto picks"). The kernel datapath is one per machine and AF_XDP's
    link namespace is wired for the shared daemon, so those keep it, unless the file asks for
    something only the run's own daemons have (userspace TSO, an allocator): then the testbed
    says why it cannot. kernel_available: called only when the datapath is auto."""
    if daemons == "auto":
        shared = datapath in ("kernel", "afxdp") or (datapath == "auto" and kernel_available())
        daemons = "shared" if shared and not own_asked(tso, malloc) else 1
    if tso == "auto":
        tso = daemons != "shared"
    return daemons, bool(tso)


def other_config(userspace_tso: bool) -> dict:
    """Open_vSwitch other_config set before ovs-vswitchd starts."""
    return {"userspace-tso-enable": "true"} if userspace_tso else {}


def shard(fabric, n: int) -> dict:
    """Which of n daemons forwards each OpenFlow switch. A packet costs the daemon
    whose port received it, whichever daemon the next switch belongs to, so
    locality does not matter: the switches of each layer (edge, aggregation,
    core; leaf, spine) are dealt out in turn, and each daemon gets its share of
    every layer's traffic."""
    by_layer: dict = {}
    for s in fabric.openflow_switches:
        by_layer.setdefault(fabric.node(s).get("layer", ""), []).append(s)
    out, i = {}, 0
    for layer in sorted(by_layer):
        for s in by_layer[layer]:
            out[s] = i % n
            i += 1
    return out


class SwitchDaemon:
    """One ovsdb-server + ovs-vswitchd pair of this run."""

    def __init__(self, tag: str, index: int, run_dir: str, config: dict, env: dict | None = None):
        self.index = index
        self.env = dict(env or {})  # added to ovs-vswitchd's environment (the allocator)
        self.netns = f"{tag}d{index}"  # starts with the tag: runstate.remove_leftovers deletes it
        self.dir = daemon_dir(tag, index)
        self.relay: ControllerRelay | None = None
        self.run_dir = run_dir
        self.config = dict(config)
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs = []

    @property
    def db(self) -> str:
        return f"unix:{self.dir}/db.sock"

    @property
    def ctl(self) -> str:
        return f"{self.dir}/ovs-vswitchd.ctl"

    def vsctl(self, timeout_s: int = VSCTL_TIMEOUT_S) -> list[str]:
        return ["ovs-vsctl", f"--timeout={timeout_s}", f"--db={self.db}"]

    @property
    def controller_socket(self) -> str:
        return f"{self.dir}/controller.sock"

    def in_netns(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv]

    def net_dev_path(self) -> str:
        """/proc/net/dev as the daemon's namespace sees it (its switches' ports)."""
        return f"/proc/{self.pid('ovs-vswitchd')}/net/dev"

    def start_relay(self, ofp_port: int) -> None:
        self.relay = ControllerRelay(self.controller_socket, ofp_port)

    def mgmt(self, bridge: str) -> str:
        """The bridge's OpenFlow management socket, for ovs-ofctl."""
        return f"unix:{self.dir}/{bridge}.mgmt"

    def pid(self, role: str) -> int | None:
        p = self.procs.get(role)
        return p.pid if p is not None else None

    def start(self, state) -> None:
        """Database, server, configuration, then the switch daemon; each PID goes into
        state.json the moment it exists."""
        shutil.rmtree(self.dir, ignore_errors=True)  # a dead run's, under our leased tag
        os.makedirs(self.dir, mode=0o700)
        r = subprocess.run(["ovsdb-tool", "create", f"{self.dir}/conf.db", VSWITCH_SCHEMA],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise TestbedError(f"ovsdb-tool create failed: {r.stderr.strip()[:300]}")
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)  # a dead run's, same tag
        for cmd in (["ip", "netns", "add", self.netns], ["ip", "-n", self.netns, "link", "set", "lo", "up"]):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise TestbedError(f"{' '.join(cmd)} failed: {r.stderr.strip()[:300]}")
        # OVS_RUNDIR: where ovs-vswitchd puts each bridge's .mgmt socket.
        env = dict(os.environ, OVS_RUNDIR=self.dir, OVS_DBDIR=self.dir)
        common = ["--no-chdir", "-vconsole:off", "-vfile:info"]
        self._spawn(state, "ovsdb-server", [
            "ovsdb-server", f"{self.dir}/conf.db", f"--remote=punix:{self.dir}/db.sock",
            f"--unixctl={self.dir}/ovsdb-server.ctl", f"--pidfile={self.dir}/ovsdb-server.pid",
            f"--log-file={self._log('ovsdb-server')}", *common], env)
        wait_for(lambda: self._alive("ovsdb-server") and os.path.exists(f"{self.dir}/db.sock"), 20,
                 f"ovsdb-server {self.index} to listen on {self.dir}/db.sock")
        cmd = [*self.vsctl(), "--no-wait", "init"]
        for k, v in self.config.items():
            cmd += ["--", "set", "Open_vSwitch", ".", f"other_config:{k}={v}"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise TestbedError(f"configuring ovsdb-server {self.index} failed: {r.stderr.strip()[:300]}")
        self._spawn(state, "ovs-vswitchd", self.in_netns([
            "ovs-vswitchd", self.db, f"--unixctl={self.ctl}", f"--pidfile={self.dir}/ovs-vswitchd.pid",
            f"--log-file={self._log('ovs-vswitchd')}", *common]), {**env, **self.env})
        wait_for(self._vswitchd_ready, 30, f"ovs-vswitchd {self.index} to take its configuration "
                 f"(log: {self._log('ovs-vswitchd')})")

    def _log(self, role: str) -> str:
        return inside(self.run_dir, f"{role}-{self.index}.log")

    def _spawn(self, state, role: str, argv: list[str], env: dict) -> None:
        # Its own session: a Ctrl-C at the terminal reaches us, and we stop it by PID.
        self.procs[role] = subprocess.Popen(argv, env=env, preexec_fn=lambda: os.nice(NICE), stdin=subprocess.DEVNULL,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                            start_new_session=True, close_fds=True)
        state.add_pid(f"{role}/{self.index}", self.procs[role].pid)

    def _alive(self, role: str) -> bool:
        p = self.procs[role]
        if p.poll() is not None:
            raise TestbedError(f"{role} {self.index} exited with status {p.returncode} (log: {self._log(role)})")
        return True

    def _vswitchd_ready(self) -> bool:
        """It has read the database: next_cfg == cur_cfg (what `ovs-vsctl` waits on)."""
        if not self._alive("ovs-vswitchd") or not os.path.exists(self.ctl):
            return False
        r = subprocess.run([*self.vsctl(2), "get", "Open_vSwitch", ".", "cur_cfg", "next_cfg"],
                           capture_output=True, text=True)
        vals = r.stdout.split()
        return r.returncode == 0 and len(vals) == 2 and vals[0] == vals[1]

    def other_config_now(self) -> str:
        r = subprocess.run([*self.vsctl(), "get", "Open_vSwitch", ".", "other_config"], capture_output=True, text=True)
        return r.stdout.strip()

    def stop(self) -> None:
        """The switch daemon first (its bridges' tap devices go with it), then the database,
        the relay and the namespace (the ports left in it go with it)."""
        for role in reversed(ROLES):
            p = self.procs.pop(role, None)
            if p is not None:
                stop_process(p)
        if self.relay is not None:
            self.relay.close()
            self.relay = None
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


def is_daemon_cmdline(cmd: str, tag: str) -> bool:
    """A process is one of run `tag`'s switch daemons (for `dtnet clean`): an OVS daemon
    whose command line names the run's daemon directory."""
    return cmd.split(" ", 1)[0] in ROLES and f"{SOCKET_ROOT}/ovs-{tag}" in cmd


class ControllerRelay:
    """Relays each OpenFlow connection a daemon's switches open on a unix socket to the
    controller on the root namespace's loopback: the daemon's namespace has a loopback of its
    own, and the controller listens on 127.0.0.1 only. A connection the controller refuses
    (it is restarting) is closed, and the switch retries, as it would against the controller."""

    def __init__(self, path: str, port: int):
        self.port = port
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        self.closed = False
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(64)
        self.threads = [threading.Thread(target=self._accept, daemon=True, name="of-relay")]
        self.threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            try:
                up = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            except OSError:
                conn.close()
                continue
            up.settimeout(None)
            up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pumps = [threading.Thread(target=self._pump, args=(a, b), daemon=True, name="of-relay")
                     for a, b in ((conn, up), (up, conn))]
            with self.lock:
                if self.closed:  # accepted while closing: nobody would end its pumps
                    conn.close()
                    up.close()
                    return
                self.conns += [conn, up]
                self.threads += pumps
            for t in pumps:
                t.start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(1 << 16):
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):  # either side gone: both ends learn it
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop relaying and end every thread: closing a socket does not wake a thread blocked in
        accept() or recv() on it, shutting it down does (each run left its accept thread behind)."""
        with self.lock:
            self.closed = True
            threads, self.threads = self.threads, []
        for c in (self.sock, *self.conns):
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in threads:
            if t.ident is not None:  # a pump not yet started (its accept thread ends first) has none
                t.join(timeout_s)
        with self.lock:
            for c in (self.sock, *self.conns):
                c.close()
            self.conns = []
