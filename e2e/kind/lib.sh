#!/usr/bin/env bash
# Shared settings for the kind e2e scripts; sourced, not run.
# shellcheck disable=SC2034  # variables are used by the scripts that source this file

KIND_CLUSTER="${KIND_CLUSTER:-kraftlog}"
KUBE_CONTEXT="kind-${KIND_CLUSTER}"
NAMESPACE="${NAMESPACE:-kraftlog}"
RELEASE="${RELEASE:-kraftlog}"
IMAGE="${IMAGE:-kraftlog:e2e}"
DRIVER_IMAGE="${DRIVER_IMAGE:-kraftlog-e2e:e2e}"
DRIVER_TIMEOUT_S="${DRIVER_TIMEOUT_S:-1200}"
ROLLOUT_TIMEOUT="${ROLLOUT_TIMEOUT:-300s}"

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CHART_DIR="${REPO_ROOT}/charts/kraftlog"

log() { printf '%s e2e-kind: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

need() {
  local tool
  for tool in "$@"; do
    command -v "${tool}" >/dev/null 2>&1 || die "${tool} is required (not on PATH)"
  done
}

# helm from PATH, else the pinned one scripts/install-helm.sh provides.
helm_bin() {
  if command -v helm >/dev/null 2>&1; then
    command -v helm
  else
    "${REPO_ROOT}/scripts/install-helm.sh"
  fi
}

kc() { kubectl --context "${KUBE_CONTEXT}" --namespace "${NAMESPACE}" "$@"; }
