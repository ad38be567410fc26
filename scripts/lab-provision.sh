#!/usr/bin/env bash
# The lab VM's provisioning (the Vagrantfile's, and scripts/lab-check.sh's
# when it boots the box with qemu alone): scripts/bootstrap.sh on the synced
# checkout at /dtnet, with the .venv inside the VM, not in the checkout. A box
# built by scripts/lab-box.sh carries a wheelhouse, so pip needs no network.
set -euo pipefail
if [[ -d /opt/dtnet-wheelhouse ]]; then
    export DTNET_WHEELHOUSE=/opt/dtnet-wheelhouse
fi
DTNET_VENV=/opt/dtnet-venv bash /dtnet/scripts/bootstrap.sh
ln -sfn /opt/dtnet-venv /dtnet/.venv
