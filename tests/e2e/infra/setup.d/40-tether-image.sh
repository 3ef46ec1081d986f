#!/usr/bin/env bash
# The tether image's Debian base for the end-to-end tests that run the tether image
# (tests/e2e/test_tether_image.py, the local_docker contract harness and the portability
# matrix's local_docker column): `images/build.sh --base` makes it with debootstrap from
# Debian's packages (no image is pulled) and caches the tarball in
# ${TETHER_CACHE:-~/.cache/tether}/image/, keyed by the suite, the package list and the mirror;
# each test session imports it into its private podman and builds tether on top (about a
# minute). Installs debootstrap with apt when it is missing.
#
# Idempotent: does nothing when the base for this key is cached.
set -euo pipefail

log() { printf '[40-tether-image] %s\n' "$*" >&2; }
here=$(cd "$(dirname "$0")/../../../.." && pwd)

if ! command -v debootstrap >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        log "debootstrap missing (needs root and apt-get): the tether-image tests will be skipped"
        exit 0
    fi
    log "installing debootstrap"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends -o Dpkg::Progress-Fancy=0 debootstrap >&2 || {
        apt-get update -q >&2 || log "apt-get update failed; trying the install anyway"
        apt-get install -y --no-install-recommends -o Dpkg::Progress-Fancy=0 debootstrap >&2
    }
fi
if [ "$(id -u)" -ne 0 ]; then
    log "not root (debootstrap needs it): the tether-image tests will be skipped"
    exit 0
fi
log "making the Debian base (debootstrap; a few minutes once, then cached)"
tar=$(bash "$here/images/build.sh" --base)
log "base: $tar ($(du -h "$tar" | cut -f1))"
