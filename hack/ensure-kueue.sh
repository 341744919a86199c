#!/usr/bin/env bash
# Builds Kueue's controller manager from its Go module at the pinned KUEUE_VERSION (hack/versions.env)
# and copies the module's CRDs and webhook manifest next to it:
#   ~/.cache/policy-scheduler/bin/kueue-<version>/kueue
#   ~/.cache/policy-scheduler/bin/kueue-<version>/crds/*.yaml          (config/components/crd/bases)
#   ~/.cache/policy-scheduler/bin/kueue-<version>/webhook-manifests.yaml (config/components/webhook)
# Kueue is built in its own module context (`go install pkg@version`), not inside hack/k8s: that
# tools module replaces the k8s staging modules with v0.37.x, and Kueue v0.17 pins k8s.io/* v0.35.3.
# The build runs under `nice -n 19`. Measured on 2026-11-27 (2 cores, go1.26.8, a CI run of the
# test suite going on at the same time): the cold build of v0.17.0 (none of Kueue's modules in the
# module cache; the build cache held only the k8s v1.37.1 control plane's packages) took 4 min 03 s
# wall, 251 s user + 63 s sys CPU, 1.7 GB peak RSS; the binary (-s -w) is 87 MB. With the binary
# and the copied files present the script exits at once (4 ms).
#
#   hack/ensure-kueue.sh            build if needed, print the directory on the last line
#   hack/ensure-kueue.sh --dir      only print the directory (no build)
#   hack/ensure-kueue.sh --force    rebuild even if the binary exists
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

cache_root=${POLICY_SCHEDULER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/policy-scheduler}
dir="$cache_root/bin/kueue-${KUEUE_VERSION}"

if [[ "${1:-}" == "--dir" ]]; then echo "$dir"; exit 0; fi
force=0; [[ "${1:-}" == "--force" ]] && force=1

if [[ $force == 0 && -x "$dir/kueue" && -f "$dir/webhook-manifests.yaml" ]] \
   && compgen -G "$dir/crds/*.yaml" >/dev/null; then
  echo "kueue ${KUEUE_VERSION} up to date in $dir" >&2
  echo "$dir"; exit 0
fi

command -v go >/dev/null || { echo "hack/ensure-kueue.sh: Go is not installed (need go >= 1.25)" >&2; exit 1; }
# Own module context: run from an empty directory so no go.mod/go.work of this repo applies.
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cd "$work"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS= GO111MODULE=on GOWORK=off
start=$(date +%s)
step() { echo "[hack/ensure-kueue $(( $(date +%s) - start ))s] $*" >&2; }

mkdir -p "$dir"
if [[ $force == 1 || ! -x "$dir/kueue" ]]; then
  step "go install sigs.k8s.io/kueue/cmd/kueue@${KUEUE_VERSION} (cold: about 4 minutes on 2 cores)"
  mkdir -p "$work/bin"
  GOBIN="$work/bin" nice -n 19 go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kueue/cmd/kueue@${KUEUE_VERSION}"
  mv "$work/bin/kueue" "$dir/kueue"
fi

moddir=$(go mod download -json "sigs.k8s.io/kueue@${KUEUE_VERSION}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
[[ -d "$moddir/config/components/crd/bases" ]] || { echo "hack/ensure-kueue.sh: no CRDs in $moddir" >&2; exit 1; }
rm -rf "$dir/crds"; mkdir -p "$dir/crds"
cp "$moddir"/config/components/crd/bases/*.yaml "$dir/crds/"
cp "$moddir/config/components/webhook/manifests.yaml" "$dir/webhook-manifests.yaml"
chmod -R u+w "$dir/crds" "$dir/webhook-manifests.yaml"
step "done: $dir ($(ls "$dir/crds" | wc -l) CRDs)"
echo "$dir"
