#!/usr/bin/env bash
# Build the kraftlog image from docker/Dockerfile and load it into the kind nodes.
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
log "loading ${IMAGE} into kind cluster ${KIND_CLUSTER}"
kind load docker-image "${IMAGE}" --name "${KIND_CLUSTER}"
