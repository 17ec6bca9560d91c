#!/usr/bin/env bash
# Run the chart's `helm test` pod (AdminService.DescribeCluster) and print its log.
set -euo pipefail
# shellcheck source=e2e/kind/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
helm="$(helm_bin)"

log "helm test ${RELEASE}"
"${helm}" test "${RELEASE}" --kube-context "${KUBE_CONTEXT}" --namespace "${NAMESPACE}" \
  --logs --timeout "${ROLLOUT_TIMEOUT}"
