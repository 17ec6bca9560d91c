#!/usr/bin/env bash
# Full kind e2e: create cluster, build + load images, helm install (with
# e2e/kind/values-e2e.yaml), wait, helm test, then the fault drill (driver.py as a Job).
# Needs docker, kind and kubectl; helm comes from PATH or scripts/install-helm.sh.
#
#   e2e/kind/run.sh                          default values + values-e2e.yaml
#   e2e/kind/run.sh -f charts/kraftlog/ci/values-5-controllers.yaml   (extra helm args)
#   DRIVER_ARGS="--partitions 12" e2e/kind/run.sh                     (extra driver args)
#   KEEP_CLUSTER=0 e2e/kind/run.sh           delete the cluster afterwards
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/kind/lib.sh
source "${here}/lib.sh"

cleanup() {
  local rc=$?
  if [[ "${rc}" != 0 ]]; then
    log "failed (exit ${rc}); pods and recent events:"
    kc get pods -o wide || true
    kc get events --sort-by=.lastTimestamp | tail -n 40 || true
  fi
  if [[ "${KEEP_CLUSTER:-1}" == 0 ]]; then
    kind delete cluster --name "${KIND_CLUSTER}" || true
  fi
  exit "${rc}"
}
trap cleanup EXIT

"${here}/create-cluster.sh"
"${here}/build-and-load.sh"
"${here}/install.sh" -f "${here}/values-e2e.yaml" "$@"
"${here}/helm-test.sh"
# shellcheck disable=SC2086  # DRIVER_ARGS is a list of words
# --min-racks 3: kind-config.yaml zones its three workers and values-e2e.yaml turns on
# broker.rackAwareness, so four brokers must report the three zones as racks.
"${here}/run-driver.sh" --min-racks 3 ${DRIVER_ARGS:-}
log "kind e2e passed"
