#!/usr/bin/env bash
# Build the kraftlog image and the e2e driver's image (docker/Dockerfile, target e2e)
# and load both into the kind nodes.
set -euo pipefail
# shellcheck source=e2e/kind/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need docker kind

revision="$(git -C "${REPO_ROOT}" rev-parse --short HEAD 2>/dev/null || echo unknown)"
log "building ${IMAGE} (revision ${revision})"
docker build -f "${REPO_ROOT}/docker/Dockerfile" -t "${IMAGE}" \
  --build-arg "REVISION=${revision}" \
  --build-arg "CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  "${REPO_ROOT}"
docker run --rm "${IMAGE}" --version
# The e2e driver's image: same base, plus the kubernetes client and e2e/kind/driver.py.
log "building ${DRIVER_IMAGE} (target e2e)"
docker build -f "${REPO_ROOT}/docker/Dockerfile" --target e2e -t "${DRIVER_IMAGE}" \
  --build-arg "REVISION=${revision}" \
  --build-arg "CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  "${REPO_ROOT}"
docker run --rm "${DRIVER_IMAGE}" --help >/dev/null
log "loading ${IMAGE} and ${DRIVER_IMAGE} into kind cluster ${KIND_CLUSTER}"
kind load docker-image "${IMAGE}" "${DRIVER_IMAGE}" --name "${KIND_CLUSTER}"
