#!/usr/bin/env bash
# hack/image/busybox.sh [--force]: build $BUSYBOX_IMAGE (localhost/policy-scheduler-busybox:1), a
# small image for test workloads on a machine without a registry: Debian's busybox-static as
# /bin/busybox with a link for every applet (sh, sleep, wget, ...) in /bin, /etc/passwd and
# /etc/group with root and nobody, /tmp; command `sh`. Cached: nothing is done when the image is
# there with the hash of this script and the package's version in its label.
# Needs root, buildah and busybox-static (installed from Debian when missing).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
parse_force_arg "$@"
need_root
need buildah buildah
need_pkg busybox-static
bin=$(dpkg -L busybox-static | grep -m1 -E '/bin/busybox$' || true)
[ -x "$bin" ] || die "busybox-static is installed but has no bin/busybox"
version=$(dpkg-query -W -f='${Version}' busybox-static)

hash=$( { inputs_hash "$0" "$IMAGE_DIR/lib.sh"; echo "busybox-static $version"; } | sha256sum | cut -d' ' -f1)
if [ -z "$force" ] && up_to_date "$BUSYBOX_IMAGE" "$hash"; then
    say "$BUSYBOX_IMAGE is up to date (inputs ${hash:0:12})"
    exit 0
fi

work=$(mktemp -d)
ctr=
trap '[ -n "$ctr" ] && buildah rm "$ctr" >/dev/null 2>&1; rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root/bin" "$root/etc" "$root/tmp" "$root/root"
chmod 1777 "$root/tmp"
chmod 0700 "$root/root"
cp "$bin" "$root/bin/busybox"
for applet in $("$bin" --list); do [ "$applet" = busybox ] || ln -s busybox "$root/bin/$applet"; done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
for a in sh sleep wget; do [ -L "$root/bin/$a" ] || die "busybox $version has no '$a' applet"; done

old=$(buildah images --noheading --no-trunc --format '{{.ID}}' "$BUSYBOX_IMAGE" 2>/dev/null || true)
ctr=$(buildah from scratch)
mnt=$(buildah mount "$ctr")
tar --numeric-owner -C "$root" -cf - . | tar --numeric-owner -C "$mnt" -xpf -
buildah umount "$ctr" >/dev/null
buildah config --env PATH=/bin --cmd sh \
    --label "$INPUTS_LABEL=$hash" \
    --label org.opencontainers.image.description="Debian's busybox-static $version" "$ctr"
buildah commit --quiet --rm "$ctr" "$BUSYBOX_IMAGE" >/dev/null
ctr=
[ -n "$old" ] && buildah rmi "$old" >/dev/null 2>&1 || true
say "built $BUSYBOX_IMAGE (busybox-static $version, inputs ${hash:0:12})"
