#!/usr/bin/env bash
# Idempotent setup shared by `make setup`, CI and the Vagrant provisioner.
# Installs the apt packages, makes .venv (system site packages, so the
# Debian mininet module is visible), installs dtnet with the Ryu pins, and
# starts Open vSwitch when it is not running.
#
#   bootstrap.sh                      set up (as root)
#   DTNET_WHEELHOUSE=DIR bootstrap.sh  pip installs only from DIR (--no-index):
#                                      the lab VM has no internet
#   bootstrap.sh --wheelhouse DIR      fill DIR with wheels of every Python
#                                      package below (run after a normal setup)
#   bootstrap.sh --print-apt-packages  the apt packages, one a line
#   bootstrap.sh --print-pip-commands  the pip installs it would run, one a line
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${DTNET_VENV:-$ROOT/.venv}"
# libtcmalloc-minimal4: the switch daemons' allocator (half their CPU against glibc's malloc, docs/datapaths.md)
APT_PKGS=(mininet python3-networkx python3-yaml openvswitch-switch iperf3 ethtool iputils-ping tcpdump iproute2 python3-venv python3-dev gcc make python3-simgrid libtcmalloc-minimal4)
# ns-3 for `engine: packet`, with DTNET_NS3=1 (`make packet`, `make test`): Debian's C++ library
# a compiler for the engine's driver (docs/packet-engine.md says why not the PyPI bindings); the
# driver also links tcmalloc (above) when present (a quarter faster).
# DTNET_NS3=optimized also rebuilds ns-3 3.37 from Debian's source with the optimized profile
# (scripts/build-ns3-optimized.sh, about 10 CPU minutes), which the driver then links.
NS3_APT_PKGS=(libns3-dev g++)
if [[ "${DTNET_NS3:-0}" == 1 || "${DTNET_NS3:-0}" == optimized ]]; then
    APT_PKGS+=("${NS3_APT_PKGS[@]}")
fi

# pip requirements, installed in this order (each line one pip call).
PIP_BASE=("pip<25" "setuptools<68" wheel)
# Ryu 4.34 is unmaintained: it builds only with old setuptools and no
# build isolation, and needs an eventlet that still has ALREADY_HANDLED.
PIP_RYU_DEPS=("eventlet==0.33.3" "dnspython>=2")
PIP_RYU=("ryu==4.34")

log() { echo "[bootstrap] $*"; }
die2() { echo "bootstrap.sh: $*" >&2; exit 2; }

case "${DTNET_NS3:-0}" in
    0|1|optimized) ;;
    *) die2 "DTNET_NS3: expected 0, 1 or optimized, found '$DTNET_NS3'" ;;
esac
# Bad DTNET_WHEELHOUSE fails before anything is installed.
WHEELHOUSE="${DTNET_WHEELHOUSE:-}"
if [[ -n "$WHEELHOUSE" && ! -d "$WHEELHOUSE" ]]; then
    die2 "DTNET_WHEELHOUSE: expected a folder of wheels, found '$WHEELHOUSE' (no such folder)"
fi
# pip_args: the flags that keep pip to the wheelhouse when one is given.
pip_args() {
    if [[ -n "$WHEELHOUSE" ]]; then
        printf '%s\n' --no-index --find-links "$WHEELHOUSE"
    fi
}

# The venv's pip installs, in order. DRY=1 prints them instead.
DRY=0
pip_installs() {
    local from=()
    mapfile -t from < <(pip_args)
    run_pip install -q "${from[@]}" --upgrade "${PIP_BASE[@]}"
    run_pip install -q "${from[@]}" "${PIP_RYU_DEPS[@]}"
    run_pip install -q "${from[@]}" --no-build-isolation "${PIP_RYU[@]}"
    # legacy-editable: a .pth to the checkout, so new subpackages need no reinstall.
    # [cluster]: Dask's distributed scheduler, for the cluster-sweep tests (optional for users).
    SETUPTOOLS_ENABLE_FEATURES=legacy-editable run_pip install -q "${from[@]}" --no-build-isolation -e "$ROOT[test,cluster]"
}
run_pip() {
    if ((DRY)); then printf '%q ' pip "$@"; echo; else "$PY" -m pip "$@"; fi
}

case "${1:-}" in
    --print-pip-commands)
        DRY=1; pip_installs; exit 0 ;;
    --print-apt-packages)
        printf '%s\n' "${APT_PKGS[@]}"; exit 0 ;;
    --wheelhouse)
        [[ -n "${2:-}" ]] || die2 "--wheelhouse: expected a folder, found nothing"
        PY="$VENV/bin/python"
        [[ -x "$PY" ]] || die2 "--wheelhouse: expected a set-up $VENV (run make setup first), found none"
        mkdir -p "$2"
        log "building wheels into $2"
        "$PY" -m pip wheel -q --wheel-dir "$2" "${PIP_BASE[@]}" "${PIP_RYU_DEPS[@]}"
        "$PY" -m pip wheel -q --wheel-dir "$2" --no-build-isolation "${PIP_RYU[@]}"
        # dtnet's own dependencies (setup.cfg), without building dtnet itself.
        mapfile -t deps < <("$PY" -c 'import configparser, sys
c = configparser.ConfigParser(); c.read(sys.argv[1])
print("\n".join((c["options"]["install_requires"] + " " + c["options.extras_require"]["test"] + " " + c["options.extras_require"]["cluster"]).split()))' \
            "$ROOT/setup.cfg")
        "$PY" -m pip wheel -q --wheel-dir "$2" "${deps[@]}"
        log "wheelhouse ready: $(ls "$2" | wc -l) wheels"
        exit 0 ;;
    "") ;;
    *) die2 "expected no argument, --wheelhouse DIR, --print-apt-packages or --print-pip-commands, found '$1'" ;;
esac

if [[ $EUID -ne 0 ]]; then
    echo "bootstrap.sh: must run as root (it installs apt packages and starts OVS)" >&2
    exit 2
fi

# shellcheck source=apt-ensure.sh
source "$ROOT/scripts/apt-ensure.sh"
apt_ensure "${APT_PKGS[@]}"

# The userspace switch sends every port's packets through ONE AF_PACKET
# socket, made once with the default send buffer (net.core.wmem_default,
# 208 KiB): about a dozen jumbo frames queued in all link queues together,
# beyond which OVS drops packets without counting them. 4 MiB moves drops
# into the link queues, where they are counted. OVS must start after this.
WMEM_BYTES=4194304
restart_ovs=0
if (( $(sysctl -n net.core.wmem_default) < WMEM_BYTES )); then
    log "net.core.wmem_default = $WMEM_BYTES (the switch's send buffer)"
    echo "net.core.wmem_default = $WMEM_BYTES" > /etc/sysctl.d/60-dtnet.conf
    sysctl -q -w net.core.wmem_default=$WMEM_BYTES
    restart_ovs=1
fi
if (( restart_ovs )) && ovs-vsctl --timeout=5 show >/dev/null 2>&1; then
    if [[ -z "$(ovs-vsctl --timeout=5 list-br)" ]]; then
        log "restarting Open vSwitch so that it takes the new send buffer"
        /usr/share/openvswitch/scripts/ovs-ctl restart --system-id=random >/dev/null 2>&1 || true
    else
        log "warning: Open vSwitch has bridges, so it was not restarted; it keeps its small send buffer"
    fi
fi

# Open vSwitch: start it when ovsdb/vswitchd are not answering.
if ! ovs-vsctl --timeout=5 show >/dev/null 2>&1; then
    log "starting Open vSwitch"
    if [[ -x /usr/share/openvswitch/scripts/ovs-ctl ]]; then
        # No systemd in containers; ovs-ctl works either way. Without the
        # kernel module, ovs-ctl still starts vswitchd for userspace bridges.
        /usr/share/openvswitch/scripts/ovs-ctl start --system-id=random >/dev/null 2>&1 || \
            /usr/share/openvswitch/scripts/ovs-ctl start --system-id=random --no-ovs-vswitchd >/dev/null 2>&1 || true
    fi
    ovs-vsctl --timeout=10 show >/dev/null || { echo "bootstrap.sh: Open vSwitch did not start" >&2; exit 1; }
fi
# vswitchd may refuse to start when the module is missing; start it alone then.
if ! pgrep -x ovs-vswitchd >/dev/null; then
    /usr/share/openvswitch/scripts/ovs-ctl start --no-ovsdb-server --system-id=random >/dev/null 2>&1 || true
fi

if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating $VENV"
    /usr/bin/python3 -m venv --system-site-packages "$VENV"
fi
PY="$VENV/bin/python"
stamp="$VENV/.dtnet-installed"
# Reinstall only when the package metadata changed.
want="$(cat "$ROOT/setup.cfg" "$ROOT/scripts/bootstrap.sh" | sha256sum | cut -d' ' -f1)"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    log "installing python packages into $VENV${WHEELHOUSE:+ from $WHEELHOUSE only}"
    pip_installs
    echo "$want" > "$stamp"
fi
# PyTorch, for real programs on the hosts (workload: {command: ...}), with DTNET_TORCH=1
# (`make torch`, `make test`). Exactly 2.13.0: its CPU wheel lies on this machine's disk;
# any other version, or an unpinned torch, downloads a CUDA build of several GB.
# --no-deps: torch asks for setuptools>=77, which would replace the setuptools<68 Ryu's
# build needs; import torch works without it (only torch.utils.cpp_extension uses it).
TORCH_VERSION=2.13.0
if [[ "${DTNET_TORCH:-0}" == 1 ]] && ! "$PY" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
    log "installing torch==$TORCH_VERSION (CPU build, from local disk)"
    "$PY" -m pip install -q --no-deps "torch==$TORCH_VERSION"
    "$PY" -m pip install -q filelock "typing-extensions>=4.10.0" "sympy>=1.13.3" jinja2 "fsspec>=0.8.5"
fi
if [[ "${DTNET_NS3:-0}" == optimized ]]; then
    log "building ns-3 3.37 with the optimized profile"
    bash "$ROOT/scripts/build-ns3-optimized.sh"
fi
if [[ "${DTNET_NS3:-0}" == 1 || "${DTNET_NS3:-0}" == optimized ]]; then
    log "building the packet engine's ns-3 driver"
    (cd "$ROOT" && "$PY" -m packetsim.ns3)
fi
log "ready: $VENV"
