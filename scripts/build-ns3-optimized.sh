#!/usr/bin/env bash
# ns-3 3.37 for the packet engine, rebuilt from Debian's own source package with ns-3's
# `optimized` build profile: logging and asserts compiled out, -O3 -march=native, and only the
# modules the driver links (core, network, internet, point-to-point, traffic-control, and what
# they need: bridge, stats). Opt-in (`DTNET_NS3=optimized scripts/bootstrap.sh`); the driver
# links it whenever it is installed (packetsim/ns3.py) and gives the same results as with
# Debian's library, event for event (docs/packet-engine.md, "Speed").
#
#   build-ns3-optimized.sh            build and install into the cache, once
#   build-ns3-optimized.sh --prefix   print where it installs
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

PREFIX="${XDG_CACHE_HOME:-$HOME/.cache}/dtnet/ns3-3.37-optimized"
if [[ "${1:-}" == --prefix ]]; then
    echo "$PREFIX"
    exit 0
fi
# a new version of this script or of the patch rebuilds it
STAMP="$(cat "$HERE/build-ns3-optimized.sh" "$HERE"/../packetsim/ns3-*.patch | sha256sum | cut -d' ' -f1)"
if [[ "$(cat "$PREFIX/.complete" 2>/dev/null)" == "$STAMP" ]]; then
    echo "[ns3] already built: $PREFIX"
    exit 0
fi
log() { echo "[ns3] $*"; }

apt-get install -y -q cmake ninja-build dpkg-dev patch g++ >/dev/null
WORK="$(mktemp -d "${TMPDIR:-/tmp}/dtnet-ns3-src.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
# The source of the very package the default build links (libns3-dev 3.37): Debian's archive
# serves it once a deb-src line for the release is known to apt.
if ! apt-get source -q --download-only ns3=3.37-2 >/dev/null 2>&1; then
    . /etc/os-release
    log "adding Debian's source archive for $VERSION_CODENAME to apt"
    cat > /etc/apt/sources.list.d/dtnet-ns3-src.sources <<EOF
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $VERSION_CODENAME
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    apt-get update -q >/dev/null
    apt-get source -q --download-only ns3=3.37-2 >/dev/null
fi
dpkg-source -x ns3_3.37-2.dsc src >/dev/null  # with Debian's patches, as its library was built
# and two of dtnet's, each giving the same answers: TcpTxBuffer::NextSeg skips its walk of the
# unacknowledged segments where it can find nothing (no loss, no recovery), a fifth of a 400 Gb/s
# ring's time; TCP schedules its data-sent notice only when a callback listens (one event a segment).
for p in "$HERE"/../packetsim/ns3-*.patch; do patch -s -d src/ns-3.37 -p1 < "$p"; done
log "configuring (optimized profile, five modules)"
cmake -S src/ns-3.37 -B build -G Ninja -DCMAKE_BUILD_TYPE=release -DNS3_NATIVE_OPTIMIZATIONS=ON \
    -DNS3_LOG=OFF -DNS3_ASSERT=OFF -DNS3_EXAMPLES=OFF -DNS3_TESTS=OFF -DNS3_PYTHON_BINDINGS=OFF \
    -DNS3_SQLITE=OFF -DNS3_GSL=OFF -DNS3_GTK3=OFF -DNS3_VISUALIZER=OFF -DNS3_EMU=OFF -DNS3_TAP=OFF \
    -DNS3_MPI=OFF -DNS3_WARNINGS=OFF -DNS3_PRECOMPILE_HEADERS=OFF \
    "-DNS3_ENABLED_MODULES=core;network;internet;point-to-point;traffic-control" \
    -DCMAKE_INSTALL_PREFIX="$PREFIX" >/dev/null
log "building (about 330 files)"
ninja -C build -j"$(nproc)" libcore libnetwork libinternet libpoint-to-point libtraffic-control >/dev/null
rm -rf "$PREFIX"
cmake --install build --prefix "$PREFIX" >/dev/null
echo "$STAMP" > "$PREFIX/.complete"
log "installed: $PREFIX"
