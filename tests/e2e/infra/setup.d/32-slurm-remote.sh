#!/usr/bin/env bash
# Remote access to the test Slurm cluster, for the `slurm` scheduler's `ssh` and `rest`
# transports: Debian's openssh-server (an sshd on a loopback port, with a dedicated user and
# key) and slurmrestd (Slurm's REST daemon, with auth/jwt). tests/e2e/infra/slurm_remote.py
# starts both, in a temporary directory, on free ports; nothing is started here (apt is kept
# from starting the packages' services). The user, the keys and the JWT key are made by the
# fixtures, per test session.
#
# Idempotent: installs nothing when sshd and slurmrestd are already there.
set -euo pipefail

log() { printf '[32-slurm-remote] %s\n' "$*" >&2; }

missing=()
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
[ -x /usr/sbin/slurmrestd ] || command -v slurmrestd >/dev/null 2>&1 || missing+=(slurmrestd)
ls /usr/lib/*/slurm-wlm/auth_jwt.so >/dev/null 2>&1 || missing+=(slurm-wlm-jwt-plugin)
command -v rsync >/dev/null 2>&1 || missing+=(rsync)

if [ "${#missing[@]}" -eq 0 ]; then
    log "openssh-server, slurmrestd, the JWT plugin and rsync already installed"
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    log "missing ${missing[*]} (needs root and apt-get): the Slurm ssh/rest tests will be skipped"
    exit 0
fi

log "installing ${missing[*]} (about 15 s)"
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
apt-get install -y --no-install-recommends -o Dpkg::Progress-Fancy=0 \
    -o DPkg::Lock::Timeout=300 "${missing[@]}" >&2
log "installed: openssh-server $(dpkg-query -W -f '${Version}' openssh-server)," \
    "slurmrestd $(dpkg-query -W -f '${Version}' slurmrestd)"
