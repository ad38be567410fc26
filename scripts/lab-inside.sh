#!/usr/bin/env bash
# Runs inside the lab VM (as root, in /dtnet), called by scripts/lab-check.sh:
# each stage writes OUT/<stage>.log and a line "stage seconds status" to
# OUT/stages.tsv, and the script exits non-zero when any stage failed.
#
#   lab-inside.sh OUT STAGE...
#
# Stages: facts (kernel, modules, qdiscs), unit (tests/unit), integration
# (shaping, spine, controller and faults tests on this kernel's datapath),
# ring (experiments/ring-fat-tree.yaml --auto-scale), latency (tests/integration/test_latency.py
# and experiments/lab-latency.yaml, a 1 MiB ring with and without netem latency).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:?usage: lab-inside.sh OUT STAGE...}"
shift
[[ "$OUT" == /* ]] || { echo "lab-inside.sh: OUT: expected an absolute folder, found '$OUT'" >&2; exit 2; }
mkdir -p "$OUT"
: > "$OUT/stages.tsv"
PY=.venv/bin/python
DTNET=.venv/bin/dtnet
failed=0

# The run must have used the kernel datapath that `auto` is meant to pick here.
datapath_is_kernel() {
    "$PY" -c 'import json, sys
dp = json.load(open(sys.argv[1]))["datapath"]
print("summary.json datapath:", dp)
sys.exit(dp != "kernel")' "$1"
}

stage_facts() {
    uname -a
    echo "cpus: $(nproc)  memory: $(awk '/MemTotal/{print $2" kB"}' /proc/meminfo)"
    grep -m1 'model name' /proc/cpuinfo
    echo "hypervisor: $(systemd-detect-virt 2>/dev/null || echo unknown)"
    modprobe openvswitch && echo "openvswitch module: loaded"
    "$PY" -c 'from emulator.testbed.datapath import detect_datapath as d; print("datapath auto ->", d("auto"))'
    ip link add dtnetprobe0 type dummy
    if tc qdisc add dev dtnetprobe0 root netem delay 1ms; then echo "netem: yes"; else echo "netem: no"; fi
    ip link del dtnetprobe0
    ovs-vsctl --version | head -1
}
stage_unit() {
    "$PY" -m pytest tests/unit -q -p no:cacheprovider
}
# Under software emulation (systemd-detect-virt: qemu) the VM's CPU cannot
# carry 10 Mb/s links faithfully: the tests' runs go at 2.5 Mb/s, the same
# time dilation (DTNET_TEST_SET, tests/integration/helpers.py).
TCG_SETS="scale.link=6.25e-6 scale.bytes=2.5e-4"
stage_integration() {
    if [[ "$(systemd-detect-virt 2>/dev/null)" == qemu ]]; then
        export DTNET_TEST_SET="$TCG_SETS"
        echo "software emulation: DTNET_TEST_SET=$DTNET_TEST_SET"
    fi
    "$PY" -m pytest -v -m mininet -p no:cacheprovider \
        tests/integration/test_shaping.py tests/integration/test_spine.py \
        tests/integration/test_controller.py tests/integration/test_faults.py
}
# At the largest scale this VM emulates faithfully: --auto-scale probes the
# file's scale first and halves it while the CPU cannot keep up.
stage_ring() {
    rm -rf "$OUT/ring-fat-tree"
    "$DTNET" run experiments/ring-fat-tree.yaml --auto-scale --out "$OUT/ring-fat-tree" &&
        datapath_is_kernel "$OUT/ring-fat-tree/summary.json"
}
stage_latency() {
    rm -rf "$OUT/lab-latency"
    "$PY" -m pytest -v -m mininet -p no:cacheprovider tests/integration/test_latency.py &&
    "$DTNET" run experiments/lab-latency.yaml --out "$OUT/lab-latency" &&
        cat "$OUT/lab-latency/sweep.csv"
}

for st in "$@"; do
    declare -F "stage_$st" >/dev/null || { echo "lab-inside.sh: unknown stage '$st'" >&2; exit 2; }
done
for st in "$@"; do
    echo "[lab-inside] stage $st"
    t0=$(date +%s)
    "stage_$st" > "$OUT/$st.log" 2>&1
    rc=$?
    t1=$(date +%s)
    status=ok
    ((rc == 0)) || { status="FAILED(rc=$rc)"; failed=1; }
    printf '%s\t%s\t%s\n' "$st" "$((t1 - t0))" "$status" >> "$OUT/stages.tsv"
    echo "[lab-inside] stage $st: $status in $((t1 - t0)) s"
    tail -3 "$OUT/$st.log"
done
exit $failed
