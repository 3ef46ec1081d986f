#!/usr/bin/env bash
# Installs and builds what the end-to-end tests start (idempotent, cached outside the repo).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
for step in "$here"/setup.d/*.sh; do
  [ -e "$step" ] || continue
  echo "[e2e-infra] $(basename "$step")"
  bash "$step"
done
