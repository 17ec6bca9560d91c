#!/usr/bin/env bash
# Run the e2e driver (e2e/kind/driver.py) as a Job in the cluster and print its log.
# Extra arguments go to the driver (e.g. --partitions 12 --step-timeout 300).
# Needs the image built by build-and-load.sh (DRIVER_IMAGE, target `e2e`) in the nodes.
# RENDER_ONLY=1 prints the manifest it would apply and stops (the unit tests use this).
set -euo pipefail
# shellcheck source=e2e/kind/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need python3

# With the release named like the chart, the fullname is the release name.
fullname="${RELEASE}"
[[ "${RELEASE}" == *kraftlog* ]] || fullname="${RELEASE}-kraftlog"
job=kraftlog-e2e-driver
# The driver's arguments as a JSON list (quoting every one for YAML).
driver_args="$(python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' \
  --in-cluster --release "${RELEASE}" "$@")"

manifest="$(sed -e "s|__NAMESPACE__|${NAMESPACE}|g" -e "s|__RELEASE__|${RELEASE}|g" \
  -e "s|__FULLNAME__|${fullname}|g" -e "s|__IMAGE__|${DRIVER_IMAGE}|g" \
  -e "s|__DRIVER_ARGS__|${driver_args//|/\\|}|g" "${REPO_ROOT}/e2e/kind/driver-job.yaml")"

if [[ "${RENDER_ONLY:-0}" == 1 ]]; then
  printf '%s\n' "${manifest}"
  exit 0
fi
need kubectl
log "starting job/${job} (${DRIVER_IMAGE}) in ${NAMESPACE}"
kc delete job "${job}" --ignore-not-found --wait=true
printf '%s\n' "${manifest}" | kc apply -f -

# Complete or Failed, whichever comes first (backoffLimit 0: one attempt).
deadline=$(( $(date +%s) + ${DRIVER_TIMEOUT_S} ))
status=""
while [[ -z "${status}" ]]; do
  if (( $(date +%s) > deadline )); then
    status=timeout
    break
  fi
  for condition in Complete Failed; do
    if [[ "$(kc get job "${job}" -o "jsonpath={.status.conditions[?(@.type=='${condition}')].status}")" == True ]]; then
      status="${condition}"
    fi
  done
  [[ -n "${status}" ]] || sleep 5
done

kc logs "job/${job}" --all-containers --tail=-1 || true
case "${status}" in
  Complete) log "e2e driver passed" ;;
  Failed) die "e2e driver failed (log above)" ;;
  *) die "e2e driver did not finish within ${DRIVER_TIMEOUT_S}s" ;;
esac
