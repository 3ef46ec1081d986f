#!/usr/bin/env bash
# Slurm accounting for the end-to-end tests of the `slurm` scheduler's sacct path: Debian's
# slurmdbd and MariaDB. tests/e2e/infra/slurm.py (SlurmCluster(accounting=True)) starts a
# private mariadbd and slurmdbd in the cluster's temp dir on free ports; nothing is started
# here (apt is kept from starting the packages' services).
#
# Idempotent: installs nothing when slurmdbd and mariadbd are already there.
set -euo pipefail

log() { printf '[31-slurmdbd] %s\n' "$*" >&2; }

missing=()
command -v slurmdbd >/dev/null 2>&1 || [ -x /usr/sbin/slurmdbd ] || missing+=(slurmdbd)
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || missing+=(mariadb-server)

if [ "${#missing[@]}" -eq 0 ]; then
    log "slurmdbd and mariadb-server already installed"
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    log "missing ${missing[*]} (needs root and apt-get): the Slurm accounting tests will be skipped"
    exit 0
fi

log "installing ${missing[*]} (about 30 s)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >&2 || log "apt-get update failed; trying the install anyway"
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    created_policy=1
fi
trap '[ "$created_policy" = 1 ] && rm -f "$policy"' EXIT
apt-get install -y --no-install-recommends -o Dpkg::Progress-Fancy=0 "${missing[@]}" >&2
log "installed: slurmdbd $(dpkg-query -W -f '${Version}' slurmdbd), mariadb-server $(dpkg-query -W -f '${Version}' mariadb-server)"
