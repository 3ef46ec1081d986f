#!/usr/bin/env bash
# Slurm (Debian's slurm-wlm: slurmctld, slurmd and the client commands) and munge for the
# end-to-end tests of the `slurm` scheduler. tests/e2e/infra/slurm.py starts munged, slurmctld
# and two slurmd "nodes" in a temporary directory on free ports; nothing is started here.
#
# Idempotent: installs nothing when every binary is already there.
set -euo pipefail

log() { printf '[30-slurm] %s\n' "$*" >&2; }

missing=()
for bin in slurmctld slurmd sbatch squeue scontrol scancel; do
    command -v "$bin" >/dev/null 2>&1 || { missing+=(slurm-wlm); break; }
done
[ -x /usr/sbin/munged ] || command -v munged >/dev/null 2>&1 || missing+=(munge)

if [ "${#missing[@]}" -eq 0 ]; then
    log "slurm-wlm and munge already installed ($(dpkg-query -W -f '${Version}' slurm-wlm))"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    log "missing ${missing[*]} and not root: install them with" \
        "'apt-get install -y --no-install-recommends slurm-wlm munge'"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    log "missing ${missing[*]} and no apt-get here: the slurm tests will be skipped"
    exit 0
fi

log "installing ${missing[*]} (about 10 s)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >&2 || log "apt-get update failed; trying the install anyway"
# Debian's packages start their services on install where an init system runs; the tests
# start their own daemons, so keep apt from starting any.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    created_policy=1
fi
trap '[ "$created_policy" = 1 ] && rm -f "$policy"' EXIT
apt-get install -y --no-install-recommends -o Dpkg::Progress-Fancy=0 "${missing[@]}" >&2
log "installed: slurm-wlm $(dpkg-query -W -f '${Version}' slurm-wlm), munge $(munged --version 2>&1 | head -n1)"
