#!/usr/bin/env bash
# Runs inside the lab VM (as root, in /dtnet), called by scripts/lab-check.sh:
# each stage writes OUT/<stage>.log and a line "stage seconds status" to
# OUT/stages.tsv, and the script exits non-zero when any stage failed.
#
#   lab-inside.sh OUT STAGE...
#   lab-inside.sh --print-ring-links      the ring stage's scale.link values
#   lab-inside.sh --probe-startup         seconds to start dtnet's Python (best of 3)
#
# Stages:
#   facts        kernel, modules, what `datapath: auto` picks, netem, CPU speed
#   unit         tests/unit
#   integration  the integration tests that assert shaping, ordering, latency,
#                teardown and routing (INTEGRATION_FILES, not marked fidelity),
#                on this kernel's datapath: pass/fail
#   fidelity     the same files' tests marked fidelity (busbw, throughput and
#                timing thresholds): a report ("report" in stages.tsv), not
#                pass/fail, since under software emulation the CPU cannot keep up
#   ring         experiments/ring-fat-tree.yaml at RING_LINKS on the kernel
#                datapath (bench/bench_fidelity_scale.py): every run completes
#   latency      bench/bench_latency.py: a 1 MiB ring's added time at each
#                topology.latency_us against the alpha-beta model's
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
# 10, 5 and 2.5 Mb/s host links at the file's 40x dilation; lab-check runs the
# same on the host, side by side.
RING_LINKS="2.5e-5,1.25e-5,6.25e-6"
probe_startup() {
    "$PY" - <<'PYEOF'
import subprocess, sys, time
def once():
    t = time.monotonic()
    subprocess.run([sys.executable, "-c", "import dtnet.cli, emulator.testbed.lifecycle, emulator.run.runner"],
                   check=True)
    return time.monotonic() - t
print(f"{min(once() for _ in range(3)):.2f}")
PYEOF
}
case "${1:-}" in
    --print-ring-links) echo "$RING_LINKS"; exit 0 ;;
    --probe-startup) probe_startup; exit $? ;;
esac
OUT="${1:?usage: lab-inside.sh OUT STAGE...}"
shift
[[ "$OUT" == /* ]] || { echo "lab-inside.sh: OUT: expected an absolute folder, found '$OUT'" >&2; exit 2; }
failed=0
# Pass/fail for the integration stage, "report" for the fidelity stage.
declare -A REPORT_ONLY=([fidelity]=1)

INTEGRATION_FILES=(tests/integration/test_shaping.py tests/integration/test_ordering.py
    tests/integration/test_latency.py tests/integration/test_spine.py tests/integration/test_controller.py
    tests/integration/test_faults.py tests/integration/test_rest.py)
# Under software emulation (systemd-detect-virt: qemu) the guest runs every
# process many times slower than this machine kind (docs/lab-vm.md: the
# facts stage's startup probe, 0.5 s here and 6 s in the VM):
# - the experiment runs go at 2.5 Mb/s, the same 40x time dilation
#   (DTNET_TEST_SET, tests/integration/helpers.py); results are in
#   real-cluster units, so the assertions are unchanged;
# - the tests' wall-clock bounds (a run starting within 120 s, tearing down
#   within 10 s, noticing a dead agent within 15 s) are stretched by
#   TCG_TIME_FACTOR (DTNET_TEST_TIME_FACTOR); they still catch a hang.
TCG_SETS="scale.link=6.25e-6 scale.bytes=2.5e-4"
TCG_TIME_FACTOR=10
software_emulation() { [[ "$(systemd-detect-virt 2>/dev/null)" == qemu ]]; }
tcg_settings() {
    if software_emulation; then
        export DTNET_TEST_SET="$TCG_SETS" DTNET_TEST_TIME_FACTOR="$TCG_TIME_FACTOR"
        echo "software emulation: DTNET_TEST_SET=$DTNET_TEST_SET DTNET_TEST_TIME_FACTOR=$DTNET_TEST_TIME_FACTOR"
    fi
}
integration_pytest() {  # integration_pytest NAME MARKS
    "$PY" -m pytest -v -rA --durations=0 -m "$2" -p no:cacheprovider --junitxml="$OUT/$1.xml" \
        "${INTEGRATION_FILES[@]}"
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
    echo "python startup (dtnet's imports, best of 3): $(probe_startup) s"
}
stage_unit() {
    "$PY" -m pytest tests/unit -q -p no:cacheprovider
}
stage_integration() {
    tcg_settings
    integration_pytest integration "mininet and not fidelity"
}
# A report: pytest's 1 (some tests failed) is what is being reported; any
# other status (collection errors, no tests) fails the stage.
stage_fidelity() {
    tcg_settings
    local rc=0
    integration_pytest fidelity "mininet and fidelity" || rc=$?
    ((rc == 0 || rc == 1))
}
# The run must have used the kernel datapath that `auto` is meant to pick here
# (bench.tsv's datapath column) and completed.
stage_ring() {
    rm -rf "$OUT/ring"
    "$PY" bench/bench_fidelity_scale.py experiments/ring-fat-tree.yaml --links "$RING_LINKS" --out "$OUT/ring" &&
        awk -F'\t' 'NR > 1 && $3 != "kernel" { bad = 1; print "not on the kernel datapath: " $0 } END { exit bad }' \
            "$OUT/ring/bench.tsv"
}
stage_latency() {
    rm -rf "$OUT/latency"
    "$PY" bench/bench_latency.py experiments/lab-latency.yaml --out "$OUT/latency"
}

for st in "$@"; do
    declare -F "stage_$st" >/dev/null || { echo "lab-inside.sh: unknown stage '$st'" >&2; exit 2; }
done
mkdir -p "$OUT"
: > "$OUT/stages.tsv"
for st in "$@"; do
    echo "[lab-inside] stage $st"
    t0=$(date +%s)
    "stage_$st" > "$OUT/$st.log" 2>&1
    rc=$?
    t1=$(date +%s)
    status=ok
    [[ -n "${REPORT_ONLY[$st]:-}" ]] && status=report
    ((rc == 0)) || { status="FAILED(rc=$rc)"; failed=1; }
    printf '%s\t%s\t%s\n' "$st" "$((t1 - t0))" "$status" >> "$OUT/stages.tsv"
    echo "[lab-inside] stage $st: $status in $((t1 - t0)) s"
    tail -3 "$OUT/$st.log"
done
exit $failed
