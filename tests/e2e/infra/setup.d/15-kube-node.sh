#!/usr/bin/env bash
# A real Kubernetes node for the e2e tests (tests/e2e/infra/kube_node.py): containerd + runc
# + the CNI plugins from Debian, and kubelet + kube-scheduler built once from the same Debian
# source as the apiserver (cached beside it, ~9 minutes cold on 2 cores). Idempotent.
set -euo pipefail
root="$(cd "$(dirname "$0")/../../../.." && pwd)"
log() { printf '[15-kube-node] %s\n' "$*" >&2; }

SUDO=()
[[ "$(id -u)" == "0" ]] || SUDO=(sudo)
missing=()
for pkg in containerd runc containernetworking-plugins busybox-static iptables iproute2; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    log "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if ! "${SUDO[@]}" apt-get install -y --no-install-recommends "${missing[@]}"; then
        "${SUDO[@]}" apt-get update
        "${SUDO[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
    fi
    # Debian starts the containerd service where systemd runs; the tests start their own.
else
    log "containerd, runc, CNI plugins: installed"
fi
log "kubelet + kube-scheduler (built once, cached; progress below)"
export TETHER_PYTHON="${TETHER_PYTHON:-$root/.venv/bin/python}"
bash "$root/tests/e2e/infra/build_kube.sh" --node >/dev/null
log "done"
