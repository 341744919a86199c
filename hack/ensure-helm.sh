#!/usr/bin/env bash
# Builds `helm` from the pinned Go module helm.sh/helm/v3 (HELM_VERSION in hack/versions.env; the
# module graph and its checksums are pinned by hack/helm/go.mod and go.sum), as hack/build.sh
# builds the control plane: no prebuilt binary is downloaded. The binary goes to a cache
# directory keyed on the version, outside the work tree, so a fresh clone on the same machine
# reuses it. Nothing is built when the binary is already there.
#
#   hack/ensure-helm.sh           build if needed, print the binary's path on the last line
#   hack/ensure-helm.sh --path    only print the binary's path (no build; it may not exist yet)
#   hack/ensure-helm.sh --force   rebuild even if the binary exists
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
: "${HELM_VERSION:?hack/ensure-helm.sh: HELM_VERSION is not set in hack/versions.env}"

cache_root=${POLICY_SCHEDULER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/policy-scheduler}
bindir="$cache_root/bin/helm-${HELM_VERSION}"
bin="$bindir/helm"

case "${1:-}" in
  --path) echo "$bin"; exit 0 ;;
  --force) force=1 ;;
  "") force=0 ;;
  *) echo "usage: hack/ensure-helm.sh [--path|--force]" >&2; exit 2 ;;
esac

if [[ $force == 0 && -x "$bin" ]]; then
  echo "helm ${HELM_VERSION} up to date: $bin" >&2
  echo "$bin"; exit 0
fi

# hack/helm/go.mod must require the version that names the cache directory
if ! grep -Eq "^[[:space:]]*(require[[:space:]]+)?helm\.sh/helm/v3[[:space:]]+${HELM_VERSION//./\\.}([[:space:]]|$)" \
    "$here/helm/go.mod"; then
  echo "hack/ensure-helm.sh: hack/helm/go.mod does not require helm.sh/helm/v3 ${HELM_VERSION} (HELM_VERSION in" \
       "hack/versions.env); update both together: cd hack/helm && go get helm.sh/helm/v3@${HELM_VERSION} && go mod tidy" >&2
  exit 1
fi
command -v go >/dev/null || { echo "hack/ensure-helm.sh: Go is not installed (need go >= 1.26)" >&2; exit 1; }

# readonly: the checked-in go.sum is the only source of checksums; the work tree is not touched
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
start=$(date +%s)
step() { echo "[hack/ensure-helm $(( $(date +%s) - start ))s] $*" >&2; }
cd "$here/helm"

# helm's own Makefile stamps its version and the Kubernetes version that `helm template` and
# `helm lint` assume without a cluster (.Capabilities.KubeVersion): the minor of its client-go.
client_go=$(go list -m -f '{{.Version}}' k8s.io/client-go)   # v0.<minor>.<patch>
k8s_minor=${client_go#v0.}; k8s_minor=${k8s_minor%%.*}
pkg=helm.sh/helm/v3
ldflags="-s -w -X $pkg/internal/version.version=${HELM_VERSION} -X $pkg/internal/version.metadata= \
 -X $pkg/internal/version.gitTreeState=clean \
 -X $pkg/pkg/lint/rules.k8sVersionMajor=1 -X $pkg/pkg/lint/rules.k8sVersionMinor=${k8s_minor} \
 -X $pkg/pkg/chartutil.k8sVersionMajor=1 -X $pkg/pkg/chartutil.k8sVersionMinor=${k8s_minor}"

step "building helm ${HELM_VERSION} (Kubernetes 1.${k8s_minor} libraries); a cold build (empty Go caches) takes about 4 minutes on 2 cores"
mkdir -p "$bindir"
tmp="$bindir/helm.tmp.$$"
trap 'rm -f "$tmp"' EXIT
go build -trimpath -ldflags "$ldflags" -o "$tmp" "$pkg/cmd/helm"
mv "$tmp" "$bin"
version=$("$bin" version --template '{{.Version}}')
[[ "$version" == "$HELM_VERSION" ]] || {
  echo "hack/ensure-helm.sh: built $bin reports version '$version', expected ${HELM_VERSION}" >&2; exit 1; }
step "done: $bin"
echo "$bin"
