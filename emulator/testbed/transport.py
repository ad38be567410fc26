"""The emulator's side of `transport:` (experiment.transport): what this machine can do, and
how each key becomes testbed settings.

- tcp.cc: set in every host's network namespace (net.ipv4.tcp_congestion_control), if this
  kernel has it (newreno is Linux's reno);
- tcp.tail_loss_probe: true is what the hosts' Linux does anyway (net.ipv4.tcp_early_retrans
  is 3, tail-loss probes on, in every new namespace); false is refused;
- tcp.loss_detection: rack is what the hosts' Linux does anyway (net.ipv4.tcp_recovery is 1, RACK
  on, in every new namespace); dupack is refused;
- mtu_bytes: every host and switch interface (default: sized to the switch links, 9000 up to
  65000; AF_XDP ports carry 3000 at most);
- switch_buffer_bytes: the bfifo under each switch output port's HTB class, scaled as the
  emulator scales bytes (real bytes x scale.bytes), refused below two frames;
- latency_us: netem per link kind, dilated, where this kernel has netem;
- ecn: refused (the queues never mark);
- the `spray` policy: refused (an OVS select group hashes per flow; it cannot spray packets).
"""
from __future__ import annotations

from badinput import InputError
from experiment.transport import check_transport, emulator_mtu, emulator_queue_bytes, switch_link_mbps

# transport.tcp.cc -> the kernel's name for it.
KERNEL_CC = {"newreno": "reno", "cubic": "cubic", "dctcp": "dctcp", "bbr": "bbr"}
AVAILABLE_CC_PATH = "/proc/sys/net/ipv4/tcp_available_congestion_control"
# A namespace other than the root one may make only these its default (the kernel answers EPERM
# for the rest), and only the root namespace may widen the list.
ALLOWED_CC_PATH = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"
# Linux's switch for tail-loss probes, per network namespace: 3 (its default) or 4 probe.
TLP_SYSCTL = "net.ipv4.tcp_early_retrans"
# Linux's switch for RACK loss detection, per network namespace: 1 (its default, since 4.18) is RACK.
RACK_SYSCTL = "net.ipv4.tcp_recovery"
# The largest MTU measured to cross OVS's userspace datapath between two Mininet hosts
# (bench/probe_mtu.py: 65520 passes, 65528 does not; docs/transport.md).
MAX_MTU_MEASURED = 65520
# A bfifo must hold the frame in service and one behind it, or every burst of two drops.
MIN_QUEUE_FRAMES = 2


def available_cc(path: str = AVAILABLE_CC_PATH) -> set[str]:
    """The congestion controls this kernel offers (modules cannot be loaded here)."""
    try:
        with open(path) as f:
            return set(f.read().split())
    except OSError:
        return set()


def allow_in_namespaces(cc: str, path: str = ALLOWED_CC_PATH) -> bool:
    """Add the kernel's congestion control cc to what host namespaces may choose (the root
    namespace's list; it only widens it). True when it was added."""
    with open(path) as f:
        allowed = f.read().split()
    if cc in allowed:
        return False
    with open(path, "w") as f:
        f.write(" ".join(allowed + [cc]))
    return True


def cc_refusal(cc: str, available: set[str]) -> str | None:
    """Why the emulator cannot run cc here, or None."""
    name = KERNEL_CC[cc]
    if name in available:
        return None
    return (f"a congestion control this kernel has ({', '.join(sorted(available)) or 'none listed'} in "
            f"{AVAILABLE_CC_PATH}; {cc} is {name}, which it lacks: use engine: packet)")


# The MTU of every interface: transport.mtu_bytes, else sized to the switch links.
mtu_of = emulator_mtu


def mtu_note(exp) -> str:
    """What the MTU is and where it comes from, for the run's one-line verdict."""
    mtu = mtu_of(exp)
    if exp.transport.mtu_bytes is not None:
        return f"MTU {mtu}"
    return f"MTU {mtu} (sized to the {switch_link_mbps(exp):.3g} Mb/s switch links; transport.mtu_bytes sets it)"


# Each switch output port's queue limit in emulated bytes (None: testbed.queue_packets of 1500 B).
switch_queue_bytes = emulator_queue_bytes


def kind_delay_us(exp) -> dict | None:
    """transport.latency_us as the emulated delay of each link kind (real x dilation), or None."""
    lat = exp.transport.latency_us
    if lat is None:
        return None
    return {k: lat.of(k) * exp.scale.dilation for k in ("host", "fabric", "nvlink")}


def testbed_settings(exp) -> dict:
    """Testbed(...) keywords for exp.transport (what the runner passes on)."""
    out = {"mtu": mtu_of(exp), "switch_queue_bytes": switch_queue_bytes(exp)}
    if exp.transport.tcp.cc is not None:
        out["tcp_cc"] = KERNEL_CC[exp.transport.tcp.cc]
    delays = kind_delay_us(exp)
    if delays is not None:
        out["kind_delay_us"] = delays
    return out


def check(exp, available: set[str] | None = None, netem=None) -> str:
    """engine: emulate's refusals (InputError, exit 2) before anything starts, and one line on
    what it runs. available: the kernel's congestion controls; netem() -> bool: whether sch_netem
    works (both detected when not given)."""
    from emulator.testbed.datapath import AFXDP_MTU, netem_available
    from controller.registry import trait

    if trait(exp.routing, "sprays"):
        raise InputError("controller.policy", "a policy that forwards per flow with engine: emulate (OVS select "
                         "groups hash each flow onto one path, so packets cannot be sprayed; use engine: flow "
                         "or packet)", exp.routing, exp.source)
    cc_here = available_cc() if available is None else available
    netem = netem_available if netem is None else netem

    def machine(key, value):
        if key == "tcp.cc":
            return cc_refusal(value, cc_here)
        if key == "tcp.tail_loss_probe" and not value:
            return (f"true with engine: emulate (the hosts' Linux sends tail-loss probes: {TLP_SYSCTL} is 3 in every "
                    "namespace; use engine: packet to run without them)")
        if key == "tcp.loss_detection" and value != "rack":
            return (f"rack with engine: emulate (the hosts' Linux detects losses with RACK: {RACK_SYSCTL} is 1 in every "
                    "namespace; use engine: packet for the three-duplicate-ACK rule)")
        if key == "mtu_bytes" and exp.testbed.datapath == "afxdp" and value > AFXDP_MTU:
            return f"at most {AFXDP_MTU} bytes with testbed.datapath afxdp (OVS's AF_XDP frames are 4 KiB)"
        if key == "mtu_bytes" and value > MAX_MTU_MEASURED:
            return (f"at most {MAX_MTU_MEASURED} bytes with engine: emulate (the largest frame measured to cross "
                    "the switches: bench/probe_mtu.py)")
        if key == "switch_buffer_bytes":
            mtu = mtu_of(exp)
            least = MIN_QUEUE_FRAMES * mtu / exp.scale.bytes
            if value * exp.scale.bytes < MIN_QUEUE_FRAMES * mtu:
                return (f"at least {least:.0f} bytes at scale.bytes {exp.scale.bytes:g}: scaled, the buffer must "
                        f"hold {MIN_QUEUE_FRAMES} frames of {mtu} bytes (a deeper buffer, a larger scale.bytes, "
                        "a smaller mtu_bytes, or engine: packet)")
        if key == "latency_us" and any(value.values()) and not netem():
            return ("0 on this machine: its kernel has no netem (sch_netem), so links cannot be delayed "
                    "(use engine: flow or packet, or the lab VM: docs/lab-vm.md)")
        return None

    check_transport(exp, "emulate", machine)
    t = exp.transport
    parts = [f"TCP {t.tcp.cc or 'the kernel default'}", mtu_note(exp)]
    q = switch_queue_bytes(exp)
    parts.append(f"switch queues {q} emulated bytes" if q is not None
                 else f"queues {exp.testbed.queue_packets} x 1500 B")
    return "engine emulate: " + ", ".join(parts)
