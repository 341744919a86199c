#!/usr/bin/env bash
# hack/image/pause.sh [--force]: build $PAUSE_IMAGE (localhost/policy-scheduler-pause:1), the
# pod sandbox image for a kubelet on a machine without a registry: one static binary, /pause, from
# hack/image/pause.c (gcc -static -Os), running as 65535:65535 like upstream's. Cached: nothing is
# done when the image is there with the hash of pause.c and this script in its label.
# Needs root, buildah and gcc with a static libc (installed from Debian when missing).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
parse_force_arg "$@"
need_root
need buildah buildah
need gcc gcc
need_pkg libc6-dev  # libc.a, for -static

hash=$(inputs_hash "$0" "$IMAGE_DIR/lib.sh" "$IMAGE_DIR/pause.c")
if [ -z "$force" ] && up_to_date "$PAUSE_IMAGE" "$hash"; then
    say "$PAUSE_IMAGE is up to date (inputs ${hash:0:12})"
    exit 0
fi

work=$(mktemp -d)
ctr=
trap '[ -n "$ctr" ] && buildah rm "$ctr" >/dev/null 2>&1; rm -rf "$work"' EXIT
gcc -static -Os -Wall -Wextra -Werror -o "$work/pause" "$IMAGE_DIR/pause.c"
strip "$work/pause"
"$work/pause" -v >/dev/null || die "the built pause does not run"

old=$(buildah images --noheading --no-trunc --format '{{.ID}}' "$PAUSE_IMAGE" 2>/dev/null || true)
ctr=$(buildah from scratch)
buildah copy --quiet --chmod 0755 "$ctr" "$work/pause" /pause >/dev/null
buildah config --entrypoint '["/pause"]' --cmd '' --user 65535:65535 \
    --label "$INPUTS_LABEL=$hash" \
    --label org.opencontainers.image.description="pod sandbox (pause) from hack/image/pause.c" "$ctr"
buildah commit --quiet --rm "$ctr" "$PAUSE_IMAGE" >/dev/null
ctr=
[ -n "$old" ] && buildah rmi "$old" >/dev/null 2>&1 || true
say "built $PAUSE_IMAGE (inputs ${hash:0:12})"
