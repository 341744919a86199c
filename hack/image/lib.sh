# hack/image/lib.sh: sourced by the scripts in hack/image/ (not run on its own). The image names,
# the cache directory, and the check that skips an image whose inputs have not changed.
# shellcheck shell=bash

IMAGE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$IMAGE_DIR/../.." && pwd)
CACHE_ROOT=${POLICY_SCHEDULER_CACHE:-$HOME/.cache/policy-scheduler}/image

# The images built on this machine (buildah's local storage) ...
BASE_IMAGE=${BASE_IMAGE:-localhost/policy-scheduler-base:bookworm-python3.11}
PAUSE_IMAGE=${PAUSE_IMAGE:-localhost/policy-scheduler-pause:1}
BUSYBOX_IMAGE=${BUSYBOX_IMAGE:-localhost/policy-scheduler-busybox:1}
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO_ROOT/pyproject.toml")
PRODUCT_IMAGE=${PRODUCT_IMAGE:-localhost/policy-scheduler:$VERSION}
# ... and the names their archives carry for containerd (what the kubelet's CRI looks up: the
# chart's default `policy-scheduler` + appVersion normalizes to docker.io/library/...).
PRODUCT_REF=docker.io/library/policy-scheduler:$VERSION
PAUSE_REF=docker.io/library/policy-scheduler-pause:1
BUSYBOX_REF=docker.io/library/policy-scheduler-busybox:1

# The label that records the hash of what an image was built from.
INPUTS_LABEL=io.policy-scheduler.inputs

die() { echo "$(basename "$0"): $*" >&2; exit 1; }
say() { echo "$(basename "$0"): $*" >&2; }

need_root() {
    [ "$(id -u)" = 0 ] || die "needs root (buildah with its system storage, chroot, mounts)"
}

# need CMD PACKAGE: CMD on PATH, installed from Debian when missing.
need() { bash "$REPO_ROOT/hack/ensure-deb.sh" "$1" "$2" || die "'$1' (Debian package $2) is required"; }

# inputs_hash FILE...: one hash over the files' contents and base names (not their paths, which
# depend on how a script was called).
inputs_hash() {
    local f
    for f in "$@"; do basename "$f"; cat "$f"; done | sha256sum | cut -d' ' -f1
}

image_exists() { buildah inspect --type image "$1" >/dev/null 2>&1; }

# image_label IMAGE: the inputs label of IMAGE, empty when it is absent or has none.
image_label() {
    buildah inspect --type image --format "{{index .OCIv1.Config.Labels \"$INPUTS_LABEL\"}}" "$1" 2>/dev/null || true
}

# up_to_date IMAGE HASH: true when IMAGE exists and was built from inputs with this hash.
up_to_date() { [ "$(image_label "$1")" = "$2" ]; }

# host_ca: this machine's CA bundle (PIP_CERT, SSL_CERT_FILE, or Debian's), for downloads made
# while building (pip in the base's chroot; the Dockerfile's RUN steps under buildah), so that a
# TLS-inspecting proxy this machine trusts is trusted there too. Never copied into an image.
host_ca() {
    local f
    for f in "${PIP_CERT:-}" "${SSL_CERT_FILE:-}" /etc/ssl/certs/ca-certificates.crt; do
        [ -n "$f" ] && [ -f "$f" ] && { echo "$f"; return; }
    done
    die "no CA bundle on this machine (PIP_CERT, SSL_CERT_FILE, /etc/ssl/certs/ca-certificates.crt)"
}

# need_pkg PACKAGE: the Debian package installed (for files that are not commands: libc.a, ...).
need_pkg() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'ok installed' && return 0
    command -v apt-get >/dev/null || die "the Debian package '$1' is required (and there is no apt-get)"
    say "installing the Debian package '$1'"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$1" >/dev/null 2>&1 \
        || { DEBIAN_FRONTEND=noninteractive apt-get update -qq \
             && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$1" >/dev/null; } \
        || die "could not install the Debian package '$1'"
}

# parse_force_arg "$@": a script's one optional argument: --help prints its header comment (up to
# `set -e`) and exits; --force sets force=1 (rebuild even when cached); nothing else is accepted.
parse_force_arg() {
    case "${1:-}" in
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        --force) force=1 ;;
        "") force= ;;
        *) die "unknown argument '$1' (try --help)" ;;
    esac
}
