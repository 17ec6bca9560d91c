#!/usr/bin/env bash
# Create the kind cluster (idempotent) described by kind-config.yaml.
set -euo pipefail
# shellcheck source=e2e/kind/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need kind kubectl docker

if kind get clusters 2>/dev/null | grep -qx "${KIND_CLUSTER}"; then
  log "kind cluster ${KIND_CLUSTER} already exists"
else
  log "creating kind cluster ${KIND_CLUSTER}"
  kind create cluster --name "${KIND_CLUSTER}" \
    --config "${REPO_ROOT}/e2e/kind/kind-config.yaml" --wait 120s
fi
kubectl --context "${KUBE_CONTEXT}" get nodes -o wide
