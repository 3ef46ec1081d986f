#!/usr/bin/env bash
# Builds the tether image from this checkout without pulling any image.
#
#   images/build.sh [IMAGE]        (IMAGE default: tether's default image, $TETHER_IMAGE)
#   images/build.sh --base         only make (and cache) the Debian base tarball; print its path
#                                  (tests/e2e/infra/setup.d/40-tether-image.sh runs this)
#
# 1. The base: a Debian rootfs made by debootstrap from Debian's packages (python3, pip,
#    PyYAML), imported as localhost/tether-base:<suite>-<key>. Its tarball is cached outside
#    the repository, in ${TETHER_CACHE:-~/.cache/tether}/image/, keyed by the suite, the package
#    list and the mirror, so it is made once (debootstrap needs root).
# 2. The context: tether's wheel built from the checkout plus the pinned wheels of the
#    dependencies Debian does not ship new enough (constraints/test.txt).
# 3. `$ENGINE build -f images/tether/Dockerfile`.
#
# Environment: ENGINE (default podman; any command line, e.g. "podman --root /x" or docker),
# PYTHON (default python3, with pip), DEBIAN_SUITE (bookworm), DEBIAN_MIRROR.
set -euo pipefail

log() { printf '[tether-image] %s\n' "$*" >&2; }

here=$(cd "$(dirname "$0")/.." && pwd)
base_only=0
if [ "${1:-}" = "--base" ]; then base_only=1; shift; fi
PYTHON=${PYTHON:-python3}
read -r -a engine <<< "${ENGINE:-podman}"
suite=${DEBIAN_SUITE:-bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages=python3,python3-pip,python3-yaml,ca-certificates
image=${1:-$([ "$base_only" = 1 ] && echo none || PYTHONPATH="$here/core" "$PYTHON" -c \
    'from tether.components import DEFAULT_IMAGE; print(DEFAULT_IMAGE)')}
cache=${TETHER_CACHE:-$HOME/.cache/tether}/image
key=$(printf '%s %s %s v1' "$suite" "$packages" "$mirror" | sha256sum | cut -c1-12)
base_tar=$cache/base-$suite-$key.tar
base=localhost/tether-base:$suite-$key

mkdir -p "$cache"
if [ ! -s "$base_tar" ]; then
    command -v debootstrap >/dev/null || {
        log "debootstrap is missing: apt-get install -y --no-install-recommends debootstrap"
        exit 2
    }
    [ "$(id -u)" -eq 0 ] || { log "debootstrap needs root to make the base"; exit 2; }
    root=$(mktemp -d "${TMPDIR:-/tmp}/tether-rootfs.XXXXXX")
    trap 'rm -rf "$root"' EXIT
    log "debootstrap $suite ($packages) from $mirror"
    started=$SECONDS
    # progress: debootstrap prints one line per step (I: Retrieving/Validating/Unpacking...)
    debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" >&2
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
    tar -C "$root" --numeric-owner -cf "$base_tar.tmp" .
    mv "$base_tar.tmp" "$base_tar"
    rm -rf "$root"
    trap - EXIT
    log "cached the base in $base_tar ($((SECONDS - started)) s)"
fi
if [ "$base_only" = 1 ]; then
    echo "$base_tar"
    exit 0
fi
if ! "${engine[@]}" image inspect "$base" >/dev/null 2>&1; then
    log "importing $base"
    "${engine[@]}" import "$base_tar" "$base" >/dev/null
fi

ctx=$(mktemp -d "${TMPDIR:-/tmp}/tether-image-ctx.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
mkdir "$ctx/wheels"
log "building tether's wheel"
"$PYTHON" -m pip wheel -q --no-deps --no-build-isolation -w "$ctx/wheels" "$here" >&2
"$PYTHON" -m pip download -q --no-deps -d "$ctx/wheels" -c "$here/constraints/test.txt" \
    docstring-parser fsspec typing_extensions >&2
cp "$here/images/tether/Dockerfile" "$ctx/Dockerfile"
log "building $image on $base"
"${engine[@]}" build --build-arg "BASE=$base" -t "$image" "$ctx" >&2
log "built $image"
echo "$image"
