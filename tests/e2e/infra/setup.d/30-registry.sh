#!/usr/bin/env bash
# The CNCF distribution registry (Debian's docker-registry package) for the image-workspace
# tests: tests/e2e/infra/registry.py starts it on 127.0.0.1 on a free port with storage in a
# temporary directory (the packaged service is not used).
#
# Idempotent: installs nothing when docker-registry is already there.
set -euo pipefail

log() { printf '[30-registry] %s\n' "$*" >&2; }

if command -v docker-registry >/dev/null 2>&1; then
    log "docker-registry already installed"
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    log "docker-registry missing (install with 'apt-get install -y --no-install-recommends" \
        "docker-registry'); the registry tests will be skipped"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update >&2 || log "apt-get update failed; trying the install anyway"
apt-get install -y --no-install-recommends docker-registry >&2
# the package enables a system service on :5000; the tests start their own
if command -v systemctl >/dev/null 2>&1; then
    systemctl disable --now docker-registry >/dev/null 2>&1 || true
fi
log "installed: $(docker-registry --version 2>&1 | head -1)"
