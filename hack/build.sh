#!/usr/bin/env bash
# Builds the local control plane from pinned upstream Go modules:
#   kube-apiserver, kube-scheduler, kube-controller-manager, kubectl, and for hack/realnode.py's
#   real node kubelet and kube-proxy (k8s.io/kubernetes),
#   etcd (go.etcd.io/etcd/server/v3) and kwok (sigs.k8s.io/kwok).
# The binaries go to a cache directory keyed on the pinned versions, outside the work tree,
# so a fresh clone on the same machine reuses them. A build is skipped when all binaries exist.
#
#   hack/build.sh            build if needed, print the bin directory on the last line
#   hack/build.sh --bindir   only print the bin directory (no build)
#   hack/build.sh --force    rebuild even if the binaries exist
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

cache_root=${POLICY_SCHEDULER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/policy-scheduler}
bindir="$cache_root/bin/k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}"
bins=(kube-apiserver kube-scheduler kube-controller-manager kubectl kubelet kube-proxy etcd kwok)

if [[ "${1:-}" == "--bindir" ]]; then echo "$bindir"; exit 0; fi
force=0; [[ "${1:-}" == "--force" ]] && force=1

missing=()
for b in "${bins[@]}"; do [[ -x "$bindir/$b" ]] || missing+=("$b"); done
if [[ $force == 0 && ${#missing[@]} == 0 ]]; then
  echo "control plane binaries up to date in $bindir" >&2
  echo "$bindir"; exit 0
fi
[[ $force == 1 ]] && missing=("${bins[@]}")

command -v go >/dev/null || { echo "hack/build.sh: Go is not installed (need go >= 1.26)" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
mkdir -p "$bindir"
minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${K8S_VERSION} \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor} \
 -X k8s.io/component-base/version.gitTreeState=clean"
start=$(date +%s)
step() { echo "[hack/build $(( $(date +%s) - start ))s] $*" >&2; }

step "building ${missing[*]} (k8s ${K8S_VERSION}, etcd ${ETCD_VERSION}, kwok ${KWOK_VERSION}); a cold build (empty Go caches) takes about 6 minutes on 2 cores"
cd "$here/k8s"
for b in "${missing[@]}"; do
  case $b in
    etcd) pkg=go.etcd.io/etcd/server/v3 ;;
    kwok) continue ;;
    *) pkg=k8s.io/kubernetes/cmd/$b ;;
  esac
  step "go build $pkg"
  go build -trimpath -tags selinux,notest -ldflags "$ldflags" -o "$bindir/$b.tmp" "$pkg"
  mv "$bindir/$b.tmp" "$bindir/$b"
done
if [[ " ${missing[*]} " == *" kwok "* ]]; then
  step "go install sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
  tmp=$(mktemp -d)
  GOBIN="$tmp" GOFLAGS= go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
  # kwok >= 0.8 ships no built-in stages: keep the stage YAMLs from its module next to the binary.
  moddir=$(GOFLAGS= go list -m -f '{{.Dir}}' "sigs.k8s.io/kwok@${KWOK_VERSION}" 2>/dev/null || true)
  [[ -n "$moddir" ]] || moddir="$(go env GOMODCACHE)/sigs.k8s.io/kwok@${KWOK_VERSION}"
  st="$moddir/kustomize/stage"
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
           pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    [[ -f "$st/$f" ]] || { echo "hack/build.sh: kwok stage $st/$f not found" >&2; exit 1; }
    cat "$st/$f"; echo "---"
  done > "$bindir/kwok-stages.yaml"
  mv "$tmp/kwok" "$bindir/kwok"; rm -rf "$tmp"
fi
step "done: $bindir"
echo "$bindir"
