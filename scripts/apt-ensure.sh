# Sourced by bootstrap.sh, lab-box.sh and lab-check.sh:
#   apt_ensure PKG...   apt-get installs those not installed yet (as root).
apt_ensure() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    ((${#missing[@]})) || return 0
    echo "[apt] apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # iperf3 asks whether to start a daemon; answer no.
    echo "iperf3 iperf3/start_daemon boolean false" | debconf-set-selections
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
