#!/usr/bin/env bash
# podman (a real container runtime without a Docker engine) for the end-to-end tests that run
# containers: kfp.local.DockerRunner talks to podman's Docker-compatible socket
# (tests/e2e/infra/podman.py starts it). Images are never pulled: the fixture builds a busybox
# rootfs from busybox-static and `podman import`s it.
#
# Idempotent: installs nothing when podman, runc and busybox-static are already there.
set -euo pipefail

log() { printf '[20-podman] %s\n' "$*" >&2; }

missing=()
command -v podman >/dev/null 2>&1 || missing+=(podman)
[ -x /usr/sbin/runc ] || command -v runc >/dev/null 2>&1 || missing+=(runc)
[ -x /bin/busybox ] || command -v busybox >/dev/null 2>&1 || missing+=(busybox-static)

if [ "${#missing[@]}" -eq 0 ]; then
    log "podman, runc and busybox already installed"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    log "missing ${missing[*]} and not root: install them with" \
        "'apt-get install -y --no-install-recommends podman runc busybox-static'"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    log "missing ${missing[*]} and no apt-get here: the podman tests will be skipped"
    exit 0
fi

log "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update >&2 || log "apt-get update failed; trying the install anyway"
apt-get install -y --no-install-recommends podman runc busybox-static >&2
log "installed: $(podman --version)"
