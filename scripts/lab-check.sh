#!/usr/bin/env bash
# Proves the lab VM from nothing: builds the box if missing (scripts/lab-box.sh),
# `vagrant up --provider libvirt` (qemu driver, isolated management network),
# runs scripts/lab-inside.sh in the VM (unit tests, the integration tests that
# assert shaping, teardown and routing, and a ring all-reduce on the kernel
# datapath by default), copies the results out, destroys the VM, runs the same
# ring on this machine's datapath for comparison, and reports, with the time
# each stage took. Not part of `make test`.
#
#   scripts/lab-check.sh                  stages: facts unit integration ring
#   scripts/lab-check.sh --full           + fidelity latency (reports)
#   scripts/lab-check.sh --stages "facts integration"
#   scripts/lab-check.sh --engine qemu    skip libvirt: boot the same box image
#                                         with qemu alone, same provisioning
#   scripts/lab-check.sh --no-host-ring   skip the ring on this machine
#
# When libvirt cannot run here, the check shows libvirt's error and falls
# back to --engine qemu. Results: .lab/check/<time>/ (results/, stages.tsv,
# timings.tsv, logs). The VM session and the host's ring hold
# /tmp/dtnet-mininet.lock. Acceleration: software emulation (TCG) unless
# DTNET_LAB_ACCEL=kvm (this machine's /dev/kvm does not boot Debian's kernel:
# docs/lab-vm.md).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LAB="${DTNET_LAB_DIR:-$ROOT/.lab}"
BOX="$LAB/dtnet-bookworm.box"
MEM_MB="${DTNET_LAB_MEMORY_MB:-8192}"
CPUS="${DTNET_LAB_CPUS:-2}"
ACCEL="${DTNET_LAB_ACCEL:-tcg}"
LOCK=/tmp/dtnet-mininet.lock
# Same exclusions as the Vagrantfile's rsync synced folder (a unit test checks).
RSYNC_EXCLUDE=(.git/ .venv/ .vagrant/ .lab/ results/ tmp/)
GUEST_OUT=/var/tmp/dtnet-lab

die2() { echo "lab-check.sh: $*" >&2; exit 2; }
stages="facts unit integration ring"
engine=auto
host_ring=1
while (($#)); do
    case "$1" in
        --full) stages="facts unit integration fidelity ring latency" ;;
        --no-host-ring) host_ring=0 ;;
        --stages) [[ -n "${2:-}" ]] || die2 "--stages: expected a quoted list, found nothing"; stages="$2"; shift ;;
        --engine) case "${2:-}" in libvirt|qemu|auto) engine="$2" ;; *) die2 "--engine: expected libvirt, qemu or auto, found '${2:-}'" ;; esac; shift ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) die2 "expected --full, --stages LIST, --engine NAME or --no-host-ring, found '$1'" ;;
    esac
    shift
done
for st in $stages; do
    [[ "$st" =~ ^(facts|unit|integration|fidelity|ring|latency)$ ]] \
        || die2 "--stages: expected facts, unit, integration, fidelity, ring or latency, found '$st'"
done
[[ $EUID -eq 0 ]] || die2 "must run as root (libvirt, qemu, apt)"
[[ "$ACCEL" == tcg || "$ACCEL" == kvm ]] || die2 "DTNET_LAB_ACCEL: expected tcg or kvm, found '$ACCEL'"
[[ "$MEM_MB" =~ ^[0-9]+$ && "$CPUS" =~ ^[0-9]+$ ]] || die2 "DTNET_LAB_MEMORY_MB / DTNET_LAB_CPUS: expected integers, found '$MEM_MB' / '$CPUS'"

RUN="$LAB/check/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$RUN/results"
TIMINGS="$RUN/timings.tsv"
: > "$TIMINGS"
log() { echo "[lab-check] $*" | tee -a "$RUN/check.log"; }
timed() {  # timed NAME CMD...: run, record seconds and status
    local name="$1" t0=$SECONDS rc=0
    shift
    log "stage $name"
    "$@" || rc=$?
    printf '%s\t%s\t%s\n' "$name" "$((SECONDS - t0))" "$([[ $rc == 0 ]] && echo ok || echo "FAILED(rc=$rc)")" >> "$TIMINGS"
    log "stage $name: rc=$rc in $((SECONDS - t0)) s"
    return $rc
}

# --- host packages and the box (no lock: no VM runs yet) -------------------
# shellcheck source=apt-ensure.sh
source "$ROOT/scripts/apt-ensure.sh"
host_packages() {
    apt_ensure vagrant vagrant-libvirt libvirt-daemon-system libvirt-clients qemu-system-x86 \
        qemu-utils debootstrap grub-pc-bin rsync openssh-client dnsmasq-base
}
timed host-packages host_packages
timed box bash "$ROOT/scripts/lab-box.sh"
# Vagrant's insecure key (the box's first login); ssh wants it private.
KEY="$RUN/insecure_key"
install -m 600 "$(ls /usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant | head -1)" "$KEY"

# --- cleanup: only what this script started, by PID or by name it chose ----
started_pids=()      # daemons this script started (libvirtd, virtlogd)
vagrant_up=0
qemu_pidfile=""
export VAGRANT_HOME="$LAB/vagrant.d" VAGRANT_DOTFILE_PATH="$LAB/vagrant"
export DTNET_BOX="$BOX" DTNET_LIBVIRT_DRIVER="$([[ $ACCEL == kvm ]] && echo kvm || echo qemu)" DTNET_LAB_ISOLATED=1 DTNET_LIBVIRT_POOL=dtnet-lab
export DTNET_LAB_MEMORY_MB="$MEM_MB" DTNET_LAB_CPUS="$CPUS"
cleanup() {
    set +e
    if ((vagrant_up)); then
        (cd "$ROOT" && timeout 300 vagrant destroy -f >> "$RUN/vagrant-destroy.log" 2>&1)
        vagrant_up=0
    fi
    if [[ -n "$qemu_pidfile" && -f "$qemu_pidfile" ]]; then
        local pid; pid="$(cat "$qemu_pidfile")"
        kill "$pid" 2>/dev/null
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        kill -9 "$pid" 2>/dev/null
        rm -f "$qemu_pidfile"
    fi
    if virsh -c qemu:///system net-info dtnet-lab >/dev/null 2>&1; then
        virsh -c qemu:///system net-destroy dtnet-lab >/dev/null 2>&1
        virsh -c qemu:///system net-undefine dtnet-lab >/dev/null 2>&1
    fi
    for pid in "${started_pids[@]}"; do kill "$pid" 2>/dev/null; done
    started_pids=()
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the guest, reached by ssh (libvirt: vagrant ssh-config; qemu: hostfwd) --
SSH_OPTS=(-o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ConnectTimeout=10)
gssh() { ssh "${SSH_OPTS[@]}" "${GSSH[@]}" "$@"; }
guest_tests() {
    # $stages is validated above: one word per stage.
    timeout 14400 ssh "${SSH_OPTS[@]}" "${GSSH[@]}" "cd /dtnet && sudo bash scripts/lab-inside.sh $GUEST_OUT $stages" \
        2>&1 | tee "$RUN/guest.log"
    return "${PIPESTATUS[0]}"
}
copy_out() {
    gssh "sudo tar -C $GUEST_OUT -cf - ." | tar -C "$RUN/results" -xf -
}

# --- engine 1: Vagrant + libvirt -------------------------------------------
start_libvirt() {
    local d
    for d in virtlogd libvirtd; do
        if ! pgrep -x "$d" >/dev/null; then
            "/usr/sbin/$d" -d || return 1
            started_pids+=("$(pgrep -nx "$d")")
        fi
    done
    for _ in $(seq 1 50); do virsh -c qemu:///system version >/dev/null 2>&1 && break; sleep 0.2; done
    virsh -c qemu:///system version >/dev/null || return 1
    # The box's volumes live in .lab/pool, not in a shared images folder.
    if ! virsh -c qemu:///system pool-info dtnet-lab >/dev/null 2>&1; then
        mkdir -p "$LAB/pool"
        virsh -c qemu:///system pool-define-as dtnet-lab dir --target "$LAB/pool" >/dev/null || return 1
    fi
    virsh -c qemu:///system pool-start dtnet-lab >/dev/null 2>&1 || true
    local info; info="$(virsh -c qemu:///system pool-info dtnet-lab)"
    [[ "$info" == *running* ]]
}
libvirt_up() {
    vagrant_up=1
    # The log keeps everything; the screen skips the upload's progress lines.
    (cd "$ROOT" && timeout 3600 vagrant up --provider libvirt --no-color) 2>&1 | tee "$RUN/vagrant-up.log" \
        | stdbuf -oL tr '\r' '\n' | grep --line-buffered -v 'Progress: '
    return "${PIPESTATUS[0]}"
}
run_libvirt() {
    timed libvirt-start start_libvirt || { log "libvirt did not start"; return 1; }
    timed "vagrant-up(boot+rsync+provision)" libvirt_up || return 1
    (cd "$ROOT" && vagrant ssh-config) > "$RUN/ssh-config"
    GSSH=(-F "$RUN/ssh-config" default)
    local rc=0
    timed guest-tests guest_tests || rc=$?
    timed copy-out copy_out || true
    timed vagrant-destroy bash -c "cd '$ROOT' && vagrant destroy -f > '$RUN/vagrant-destroy.log' 2>&1" && vagrant_up=0
    return $rc
}

# --- engine 2: qemu alone on the same box image, same provisioning ----------
qemu_boot() {
    local q="$RUN/qemu" port
    mkdir -p "$q"
    tar -C "$q" -xf "$BOX" box.img
    qemu-img create -q -f qcow2 -b "$q/box.img" -F qcow2 "$q/disk.qcow2"
    port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    qemu_pidfile="$q/qemu.pid"
    # restrict=on: the guest reaches nothing but the forwarded ssh port.
    qemu-system-x86_64 -accel "$([[ $ACCEL == kvm ]] && echo kvm || echo tcg,thread=multi)" -cpu max -smp "$CPUS" -m "$MEM_MB" \
        -drive "file=$q/disk.qcow2,if=virtio,format=qcow2" \
        -netdev "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:$port-:22" -device virtio-net-pci,netdev=n0 \
        -serial "file:$q/serial.log" -display none -monitor none -pidfile "$qemu_pidfile" -daemonize
    GSSH=(-i "$KEY" -p "$port" vagrant@127.0.0.1)
    for _ in $(seq 1 200); do
        kill -0 "$(cat "$qemu_pidfile")" 2>/dev/null || { log "qemu exited; serial log: $q/serial.log"; return 1; }
        gssh true 2>/dev/null && return 0
        sleep 3
    done
    log "no ssh after 600 s; serial log: $q/serial.log"
    return 1
}
qemu_sync() {
    local ex=() e
    for e in "${RSYNC_EXCLUDE[@]}"; do ex+=(--exclude "$e"); done
    gssh "sudo mkdir -p /dtnet && sudo chown vagrant /dtnet"
    rsync -a --delete "${ex[@]}" -e "ssh ${SSH_OPTS[*]} ${GSSH[*]:0:4}" "$ROOT/" "vagrant@127.0.0.1:/dtnet/"
}
qemu_provision() { gssh "sudo bash /dtnet/scripts/lab-provision.sh" 2>&1 | tee "$RUN/provision.log"; return "${PIPESTATUS[0]}"; }
qemu_down() {
    local pid; pid="$(cat "$qemu_pidfile")"
    gssh "sudo systemctl poweroff" || true
    for _ in $(seq 1 120); do kill -0 "$pid" 2>/dev/null || { rm -f "$qemu_pidfile"; return 0; }; sleep 0.5; done
    return 1   # cleanup kills it by PID
}
run_qemu() {
    timed qemu-boot qemu_boot || return 1
    timed rsync qemu_sync || return 1
    timed provision qemu_provision || return 1
    local rc=0
    timed guest-tests guest_tests || rc=$?
    timed copy-out copy_out || true
    timed qemu-poweroff qemu_down || true
    return $rc
}

# --- the VM session, under the shared lock ----------------------------------
log "results in $RUN; waiting for $LOCK"
exec 9>"$LOCK"
t_lock=$SECONDS
flock 9
printf '%s\t%s\t%s\n' "lock-wait" "$((SECONDS - t_lock))" ok >> "$TIMINGS"
# How much slower the guest runs a process than this machine: the same probe
# runs in the VM's facts stage.
if [[ -x "$ROOT/.venv/bin/python" ]]; then
    log "python startup on this machine (dtnet's imports, best of 3): $(bash "$ROOT/scripts/lab-inside.sh" --probe-startup) s"
fi
rc=0
used=""
if [[ "$engine" != qemu ]]; then
    used=libvirt
    run_libvirt || rc=$?
    if ((rc)) && [[ "$engine" == auto ]] && ! grep -q '^guest-tests' "$TIMINGS"; then
        log "libvirt could not run the VM (above; logs in $RUN): falling back to qemu alone"
        cleanup
        used=qemu; rc=0
        run_qemu || rc=$?
    fi
else
    used=qemu
    run_qemu || rc=$?
fi
cleanup
# The same ring on this machine's own datapath, right after the VM's, under the
# same lock: bench/bench_fidelity_scale.py at the links the VM's ring stage used.
HOST_PY="$ROOT/.venv/bin/python"
host_ring_run() {
    "$HOST_PY" "$ROOT/bench/bench_fidelity_scale.py" "$ROOT/experiments/ring-fat-tree.yaml" \
        --links "$(bash "$ROOT/scripts/lab-inside.sh" --print-ring-links)" --out "$RUN/host-ring" \
        2>&1 | tee "$RUN/host-ring.log"
    return "${PIPESTATUS[0]}"
}
if ((host_ring)) && [[ " $stages " == *" ring "* && -f "$RUN/results/ring/bench.tsv" ]]; then
    if [[ -x "$HOST_PY" ]]; then
        timed host-ring host_ring_run || rc=1
    else
        log "no $HOST_PY: run \`make setup\` for the ring on this machine; skipped"
    fi
fi
flock -u 9

# --- report -----------------------------------------------------------------
accel_name="$([[ $ACCEL == kvm ]] && echo "KVM" || echo "software emulation (TCG)")"
log "engine: $used; acceleration: $accel_name"
log "stage timings (s):"
column -t -s $'\t' "$TIMINGS" | tee -a "$RUN/check.log"
if [[ -f "$RUN/results/stages.tsv" ]]; then
    log "in the VM (s):"
    column -t -s $'\t' "$RUN/results/stages.tsv" | tee -a "$RUN/check.log"
fi
for st in integration fidelity; do
    [[ -f "$RUN/results/$st.log" ]] && log "$st: $(grep -E '^=+ .*(passed|failed|error).* in ' "$RUN/results/$st.log" | tail -1)"
done
[[ -f "$RUN/results/fidelity.log" ]] && log "fidelity is a report (software emulation), not pass/fail"
if [[ -f "$RUN/results/ring/bench.tsv" ]]; then
    log "ring all-reduce on fat-tree:k=4, in the VM ($accel_name):"
    column -t -s $'\t' "$RUN/results/ring/bench.tsv" | tee -a "$RUN/check.log"
fi
if [[ -f "$RUN/host-ring/bench.tsv" ]]; then
    log "the same on this machine:"
    column -t -s $'\t' "$RUN/host-ring/bench.tsv" | tee -a "$RUN/check.log"
fi
if [[ -f "$RUN/results/latency/bench.tsv" ]]; then
    log "link latency in the VM: a 1 MiB ring's added time against the alpha-beta model's:"
    column -t -s $'\t' "$RUN/results/latency/bench.tsv" | tee -a "$RUN/check.log"
fi
log "$([[ $rc == 0 ]] && echo PASSED || echo FAILED): $RUN"
exit $rc
