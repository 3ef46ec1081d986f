#!/usr/bin/env bash
# Builds (once, cached in ~/.cache/tether) kube-apiserver, kube-controller-manager and etcd.
set -euo pipefail
root="$(cd "$(dirname "$0")/../../../.." && pwd)"
export TETHER_PYTHON="${TETHER_PYTHON:-$root/.venv/bin/python}"
bash "$root/tests/e2e/infra/build_kube.sh"
