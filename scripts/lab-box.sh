#!/usr/bin/env bash
# Builds the lab VM's Vagrant box (libvirt provider) from Debian's packages,
# with no network needed by the guest: Debian 12 by debootstrap, Debian's
# kernel, sshd, the vagrant user with Vagrant's insecure key (Vagrant swaps
# it for a fresh key on first `vagrant up`), every apt package dtnet needs
# (scripts/bootstrap.sh --print-apt-packages) and a wheelhouse of the Python
# packages bootstrap installs (/opt/dtnet-wheelhouse), so that provisioning
# runs offline.
#
#   scripts/lab-box.sh            build .lab/dtnet-bookworm.box (root; ~10 min)
#   scripts/lab-box.sh --force    rebuild even when the box is up to date
#
# Everything goes under $DTNET_LAB_DIR (default .lab/ in the checkout,
# gitignored). The disk boots by GRUB from its MBR (no loop device or
# mount needed: mke2fs -d writes the root file system into the image).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LAB="${DTNET_LAB_DIR:-$ROOT/.lab}"
BOX="$LAB/dtnet-bookworm.box"
WORK="$LAB/box-build"
SUITE=bookworm
DISK_GB=20
MIRROR="${DTNET_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# Guest packages beyond what bootstrap.sh lists: a bootable, reachable system.
BASE_PKGS=(systemd-sysv udev kmod dbus procps netbase iproute2 openssh-server
    sudo rsync linux-image-amd64 initramfs-tools less ca-certificates)

log() { echo "[lab-box] $*"; }
die2() { echo "lab-box.sh: $*" >&2; exit 2; }

force=0
case "${1:-}" in
    --force) force=1 ;;
    "") ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) die2 "expected no argument or --force, found '$1'" ;;
esac
[[ $EUID -eq 0 ]] || die2 "must run as root (debootstrap and chroot)"
[[ "$LAB" == /* && "$LAB" != *[[:space:]]* ]] || die2 "DTNET_LAB_DIR: expected an absolute path without spaces, found '$LAB'"

# The box depends on this script, the package lists and the pins: rebuild
# when they change.
stamp_want="$( { cat "$ROOT/scripts/lab-box.sh" "$ROOT/setup.cfg"
    bash "$ROOT/scripts/bootstrap.sh" --print-apt-packages
    bash "$ROOT/scripts/bootstrap.sh" --print-pip-commands; } | sha256sum | cut -d' ' -f1)"
if [[ $force -eq 0 && -f "$BOX" && "$(cat "$BOX.stamp" 2>/dev/null)" == "$stamp_want" ]]; then
    log "up to date: $BOX"
    exit 0
fi

# shellcheck source=apt-ensure.sh
source "$ROOT/scripts/apt-ensure.sh"
apt_ensure debootstrap qemu-utils grub-pc-bin e2fsprogs fdisk vagrant
INSECURE_PUB="$(ls /usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub 2>/dev/null | head -1)"
[[ -f "$INSECURE_PUB" ]] || { echo "lab-box.sh: Vagrant's insecure public key not found (package vagrant)" >&2; exit 1; }

# The wheelhouse is made with the host's venv (same Debian 12, same Python).
bash "$ROOT/scripts/bootstrap.sh" >/dev/null
WHEELS="$LAB/wheelhouse"
rm -rf "$WHEELS"
bash "$ROOT/scripts/bootstrap.sh" --wheelhouse "$WHEELS"

t0=$SECONDS
rm -rf --one-file-system "$WORK"
mkdir -p "$WORK"
RFS="$WORK/rootfs"
mapfile -t dtnet_pkgs < <(bash "$ROOT/scripts/bootstrap.sh" --print-apt-packages)
include="$(IFS=,; echo "${BASE_PKGS[*]},${dtnet_pkgs[*]}")"
log "debootstrap $SUITE (${#BASE_PKGS[@]} base + ${#dtnet_pkgs[@]} dtnet packages)"
# iperf3's postinst asks about a daemon; preseeding is not possible before
# debootstrap, and its default (no) is what we want.
DEBIAN_FRONTEND=noninteractive debootstrap --variant=minbase --include="$include" \
    "$SUITE" "$RFS" "$MIRROR" > "$WORK/debootstrap.log" 2>&1 \
    || { tail -20 "$WORK/debootstrap.log" >&2; exit 1; }
log "debootstrap took $((SECONDS - t0)) s"

# --- guest configuration -------------------------------------------------
echo dtnet-lab > "$RFS/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 dtnet-lab\n::1 localhost ip6-localhost\n' > "$RFS/etc/hosts"
echo 'LABEL=dtnetroot / ext4 errors=remount-ro 0 1' > "$RFS/etc/fstab"
: > "$RFS/etc/machine-id"   # a fresh id on first boot
# DHCP on the first NIC (Vagrant's management network, or qemu's user net).
cat > "$RFS/etc/systemd/network/50-dhcp.network" <<'EOF'
[Match]
Name=eth*

[Network]
DHCP=yes
EOF
chroot "$RFS" systemctl enable systemd-networkd >/dev/null 2>&1
# Each VM gets its own SSH host keys on first boot.
rm -f "$RFS"/etc/ssh/ssh_host_*
cat > "$RFS/etc/systemd/system/dtnet-ssh-keygen.service" <<'EOF'
[Unit]
Description=SSH host keys for this VM
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=multi-user.target
EOF
chroot "$RFS" systemctl enable dtnet-ssh-keygen >/dev/null 2>&1
echo 'UseDNS no' > "$RFS/etc/ssh/sshd_config.d/dtnet.conf"
chroot "$RFS" useradd -m -s /bin/bash vagrant
echo 'vagrant:vagrant' | chroot "$RFS" chpasswd
echo 'vagrant ALL=(ALL) NOPASSWD: ALL' > "$RFS/etc/sudoers.d/vagrant"
chmod 440 "$RFS/etc/sudoers.d/vagrant"
install -d -m 700 "$RFS/home/vagrant/.ssh"
install -m 600 "$INSECURE_PUB" "$RFS/home/vagrant/.ssh/authorized_keys"
chroot "$RFS" chown -R vagrant:vagrant /home/vagrant/.ssh
# The wheelhouse for offline provisioning (the Vagrantfile passes it on).
mkdir -p "$RFS/opt/dtnet-wheelhouse"
cp "$WHEELS"/*.whl "$RFS/opt/dtnet-wheelhouse/"
# iperf3: no daemon (as bootstrap.sh answers).
chroot "$RFS" systemctl disable iperf3 >/dev/null 2>&1 || true
chroot "$RFS" apt-get clean
# GRUB reads its modules and grub.cfg from /boot/grub; no grub package in
# the guest, so nothing there rewrites the MBR.
mkdir -p "$RFS/boot/grub/i386-pc"
cp /usr/lib/grub/i386-pc/*.mod /usr/lib/grub/i386-pc/*.lst "$RFS/boot/grub/i386-pc/"
cat > "$RFS/boot/grub/grub.cfg" <<'EOF'
set timeout=1
serial --unit=0 --speed=115200
terminal_input console serial
terminal_output console serial
menuentry "Debian (dtnet lab)" {
    linux /vmlinuz root=LABEL=dtnetroot ro console=tty0 console=ttyS0,115200 net.ifnames=0 biosdevname=0
    initrd /initrd.img
}
EOF
[[ -e "$RFS/vmlinuz" && -e "$RFS/initrd.img" ]] || { echo "lab-box.sh: no /vmlinuz or /initrd.img in the root file system" >&2; exit 1; }

# --- disk: MBR, one ext4 partition from 1 MiB, GRUB in the MBR gap ---------
log "writing the disk image"
RAW="$WORK/disk.raw"
truncate -s "${DISK_GB}G" "$RAW"
echo 'start=2048, type=83, bootable' | sfdisk -q "$RAW"
part_blocks=$(( (DISK_GB * 1024 * 1024 * 1024 - 1048576) / 4096 ))
mkfs.ext4 -q -F -L dtnetroot -E offset=1048576 -d "$RFS" "$RAW" "$part_blocks"
# core.img at sector 1: boot.img loads it from there and diskboot's default
# blocklist (sector 2 on, length filled in by grub-mkimage) reads the rest.
grub-mkimage -O i386-pc -o "$WORK/core.img" -p '(hd0,msdos1)/boot/grub' \
    biosdisk part_msdos ext2 normal linux serial terminal configfile echo test
core_sectors=$(( ($(stat -c %s "$WORK/core.img") + 511) / 512 ))
(( core_sectors < 2047 )) || { echo "lab-box.sh: core.img does not fit before the partition" >&2; exit 1; }
dd if=/usr/lib/grub/i386-pc/boot.img of="$RAW" bs=440 count=1 conv=notrunc status=none
dd if="$WORK/core.img" of="$RAW" bs=512 seek=1 conv=notrunc status=none

log "converting to qcow2 and packing the box"
qemu-img convert -O qcow2 "$RAW" "$WORK/box.img"
rm -f "$RAW"
cat > "$WORK/metadata.json" <<EOF
{"provider": "libvirt", "format": "qcow2", "virtual_size": $DISK_GB}
EOF
cat > "$WORK/Vagrantfile" <<'EOF'
# dtnet lab box (scripts/lab-box.sh): Debian 12, BIOS boot, virtio disk.
Vagrant.configure("2") do |config|
  config.vm.provider :libvirt do |lv|
    lv.disk_bus = "virtio"
  end
end
EOF
tar -C "$WORK" -cf "$BOX.part" metadata.json Vagrantfile box.img
mv "$BOX.part" "$BOX"
echo "$stamp_want" > "$BOX.stamp"
rm -rf --one-file-system "$RFS"
log "box ready: $BOX ($(du -h "$BOX" | cut -f1)), built in $((SECONDS - t0)) s"
