#!/usr/bin/env bash
# helm upgrade --install the chart with the loaded image, then wait for every rollout.
# Extra arguments go to helm (e.g. -f charts/kraftlog/ci/values-5-controllers.yaml).
set -euo pipefail
# shellcheck source=e2e/kind/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need kubectl
helm="$(helm_bin)"

repo="${IMAGE%:*}"
tag="${IMAGE##*:}"
log "installing release ${RELEASE} into namespace ${NAMESPACE}"
"${helm}" upgrade --install "${RELEASE}" "${CHART_DIR}" \
  --kube-context "${KUBE_CONTEXT}" --namespace "${NAMESPACE}" --create-namespace \
  --set "image.repository=${repo}" --set "image.tag=${tag}" --set image.pullPolicy=Never \
  --wait --timeout "${ROLLOUT_TIMEOUT}" "$@"

# With the release named like the chart, the fullname is the release name.
fullname="${RELEASE}"
[[ "${RELEASE}" == *kraftlog* ]] || fullname="${RELEASE}-kraftlog"
for workload in "statefulset/${fullname}-controller" "statefulset/${fullname}-broker" \
                "deployment/${fullname}-admin"; do
  log "waiting for ${workload}"
  kc rollout status "${workload}" --timeout "${ROLLOUT_TIMEOUT}"
done
kc get pods -o wide
