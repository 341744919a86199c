#!/usr/bin/env bash
# hack/image/base.sh [--force]: build the local base image, for machines where the Dockerfile's
# official base (python:3.11-slim, pinned by digest) cannot be pulled: Debian 12 (bookworm,
# minbase) with its own Python 3.11, made to look to the Dockerfile like the official image:
#   - `python` and `pip` on PATH (python-is-python3; pip in /usr/local, from requirements/pip.txt),
#   - setuptools and wheel for the build backend (the pins of requirements/test.txt, hash-checked,
#     with wheel's dependency packaging),
#   - `python -m venv` (python3-venv), and no PEP 668 refusal (EXTERNALLY-MANAGED removed),
#   - no apt lists, caches, man pages, translations or docs (the copyright files stay), and a dpkg
#     config that keeps it so for packages installed later.
# It lands in buildah's local storage as $BASE_IMAGE (localhost/policy-scheduler-base:
# bookworm-python3.11) with a label holding the hash of its inputs (this script, lib.sh, the
# pins); when an image with that label is there already, nothing is done (--force rebuilds).
# Needs root, debootstrap and buildah (installed from Debian when missing), and the Debian mirror
# DEBIAN_MIRROR (default http://deb.debian.org/debian) and PyPI (PIP_INDEX_URL; the download trusts
# this machine's CA bundle, see host_ca in lib.sh); the downloaded .debs are kept in
# $POLICY_SCHEDULER_CACHE/image/debs for the next build.
# File times newer than SOURCE_DATE_EPOCH (default: the date of the suite's Release file) are
# clamped to it, so the same packages give the same layer content.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

parse_force_arg "$@"

SUITE=bookworm
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PACKAGES=python3,python3-venv,python-is-python3,python3-pip,ca-certificates
# Debian's pip only installs the locked pip, setuptools and wheel into /usr/local; then it goes.
BOOTSTRAP_ONLY="python3-pip python3-setuptools python3-wheel python3-pkg-resources"

need_root
need buildah buildah
need debootstrap debootstrap

# The locked pip, setuptools and wheel (name==version line and its --hash lines).
pins() {
    awk -v want="$1" '
        /^[^ #]/ { on = ($0 ~ "^" want "==") }
        on && !/^ *#/ { print }' "$2"
}
mkdir -p "$CACHE_ROOT/debs" "$CACHE_ROOT/work"
work=$(mktemp -d "$CACHE_ROOT/work/base.XXXXXX")
root=$work/rootfs
ctr=
cleanup() {
    # whatever is still mounted under the work directory (ours, or debootstrap's on a failure)
    awk -v d="$work/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r | xargs -r -n1 umount -l
    [ -n "$ctr" ] && buildah rm "$ctr" >/dev/null 2>&1
    rm -rf --one-file-system "$work"
}
trap cleanup EXIT
pinfile=$work/pins.txt
{
    pins pip "$REPO_ROOT/requirements/pip.txt"
    pins setuptools "$REPO_ROOT/requirements/test.txt"
    pins wheel "$REPO_ROOT/requirements/test.txt"
    pins packaging "$REPO_ROOT/requirements/test.txt"  # wheel's one dependency
} > "$pinfile"
[ "$(grep -c '==' "$pinfile")" = 4 ] || die "pip, setuptools, wheel and packaging pins not found in requirements/pip.txt and test.txt"

hash=$( { inputs_hash "$0" "$IMAGE_DIR/lib.sh"; cat "$pinfile"; echo "$SUITE $PACKAGES"; } | sha256sum | cut -d" " -f1)
if [ -z "$force" ] && up_to_date "$BASE_IMAGE" "$hash"; then
    say "$BASE_IMAGE is up to date (inputs ${hash:0:12})"
    exit 0
fi

say "debootstrap $SUITE (minbase + $PACKAGES) from $DEBIAN_MIRROR"
debootstrap --variant=minbase --cache-dir="$CACHE_ROOT/debs" --include="$PACKAGES" \
    "$SUITE" "$root" "$DEBIAN_MIRROR" > "$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log" >&2; die "debootstrap failed (log above)"; }

if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
    date=
    for release in "$root"/var/lib/apt/lists/*Release; do
        date=$(sed -n 's/^Date: //p' "$release" 2>/dev/null) && [ -n "$date" ] && break
    done
    [ -n "$date" ] || die "no Release file with a Date in the new root's apt lists (set SOURCE_DATE_EPOCH)"
    SOURCE_DATE_EPOCH=$(date -d "$date" +%s)
fi
export SOURCE_DATE_EPOCH

mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
cp /etc/resolv.conf "$root/etc/resolv.conf"
in_root() { chroot "$root" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 HOME=/root SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" DEBIAN_FRONTEND=noninteractive "$@"; }

say "pip, setuptools and wheel from the locks"
cp "$pinfile" "$root/tmp/pins.txt"
# This machine's trust store for the download (a TLS-inspecting proxy's CA, say); not kept.
cp "$(host_ca)" "$root/tmp/host-ca.pem"
rm -f "$root"/usr/lib/python3*/EXTERNALLY-MANAGED
in_root env PIP_CERT=/tmp/host-ca.pem ${PIP_INDEX_URL:+PIP_INDEX_URL=$PIP_INDEX_URL} \
    pip install -q --no-cache-dir --disable-pip-version-check --root-user-action=ignore \
    --require-hashes --only-binary=:all: -r /tmp/pins.txt
in_root apt-get purge -y -qq $BOOTSTRAP_ONLY > /dev/null
in_root apt-get autoremove -y -qq --purge > /dev/null
in_root python -c 'import setuptools, wheel, venv'
in_root pip --version

say "clean up"
in_root apt-get clean
umount "$root/dev/pts" "$root/dev" "$root/proc"
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/debconf/*-old \
    "$root"/var/cache/ldconfig/aux-cache "$root"/var/log/* "$root"/tmp/* "$root"/root/.cache \
    "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/lintian \
    "$root"/usr/share/locale/*/ \
    "$root"/etc/machine-id "$root"/etc/hostname
find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
# and what a later apt-get install in an image built on this one would add of the same
cat > "$root/etc/dpkg/dpkg.cfg.d/excludes" <<'CFG'
# policy-scheduler-base: no manuals, documentation (but the copyright files) or translations
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
CFG
: > "$root/etc/resolv.conf"
# The same packages give the same files: nothing newer than the suite's date.
find "$root" -xdev -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

say "commit $BASE_IMAGE"
ctr=$(buildah from scratch)
mnt=$(buildah mount "$ctr")
tar --numeric-owner --xattrs -C "$root" -cf - . | tar --numeric-owner --xattrs -C "$mnt" -xpf -
buildah umount "$ctr" >/dev/null
pyver=$(chroot "$root" python3 -c 'import platform; print(platform.python_version())')
buildah config \
    --env LANG=C.UTF-8 \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env PYTHON_VERSION="$pyver" \
    --cmd python3 \
    --label "$INPUTS_LABEL=$hash" \
    --label org.opencontainers.image.description="Debian $SUITE (minbase) with Python $pyver, pip, setuptools and wheel: the local stand-in for python:3.11-slim" \
    --label org.opencontainers.image.created="$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)" \
    "$ctr"
old=$(buildah images --noheading --no-trunc --format '{{.ID}}' "$BASE_IMAGE" 2>/dev/null || true)
buildah commit --quiet --rm "$ctr" "$BASE_IMAGE" >/dev/null
ctr=
[ -n "$old" ] && buildah rmi "$old" >/dev/null 2>&1 || true  # the previous build, now untagged
say "built $BASE_IMAGE (Python $pyver, inputs ${hash:0:12}, $(buildah images --format '{{.Size}}' "$BASE_IMAGE"))"
