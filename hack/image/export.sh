#!/usr/bin/env bash
# hack/image/export.sh [--no-build] [product|pause|busybox|all ...]: archives of the images that
# `ctr -n k8s.io images import FILE` loads under the names a kubelet's CRI looks up, for a node on
# a machine without a registry. Default: all three.
#   product  localhost/policy-scheduler:<version> as docker.io/library/policy-scheduler:<version>
#            (what the chart's default image.repository `policy-scheduler` and its appVersion
#            normalize to; manifests/ say policy-scheduler:<version>, the same name)
#   pause    localhost/policy-scheduler-pause:1   as docker.io/library/policy-scheduler-pause:1
#   busybox  localhost/policy-scheduler-busybox:1 as docker.io/library/policy-scheduler-busybox:1
# First builds each one (build.sh with BASE=auto unless BASE is set, pause.sh, busybox.sh; all
# cached, so a warm machine only checks), unless --no-build. Writes docker-archive tars to
# $POLICY_SCHEDULER_CACHE/image/archives/ (an archive whose image has not changed is kept) and
# prints one line per image on stdout: the name, a space, the archive's path.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

build=1 which=()
for a in "$@"; do
    case "$a" in
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        --no-build) build= ;;
        product|pause|busybox) which+=("$a") ;;
        all) which+=(product pause busybox) ;;
        *) die "unknown argument '$a' (try --help)" ;;
    esac
done
[ ${#which[@]} -gt 0 ] || which=(product pause busybox)
need_root
need buildah buildah
out=$CACHE_ROOT/archives
mkdir -p "$out"

for w in "${which[@]}"; do
    case "$w" in
        product) src=$PRODUCT_IMAGE ref=$PRODUCT_REF builder=(env IMAGE="$PRODUCT_IMAGE" bash "$IMAGE_DIR/build.sh") ;;
        pause)   src=$PAUSE_IMAGE   ref=$PAUSE_REF   builder=(bash "$IMAGE_DIR/pause.sh") ;;
        busybox) src=$BUSYBOX_IMAGE ref=$BUSYBOX_REF builder=(bash "$IMAGE_DIR/busybox.sh") ;;
    esac
    if [ -n "$build" ]; then
        # into containers-storage (buildah, or podman, which shares it), where the export reads;
        # the builder's output goes to stderr: stdout is the list of archives
        [ "${BUILDER:-}" = podman ] || BUILDER=buildah
        BUILDER=$BUILDER "${builder[@]}" >&2
    fi
    id=$(buildah images --noheading --no-trunc --format '{{.ID}}' "$src" 2>/dev/null) \
        || die "no image $src (run without --no-build, or make images)"
    file=$out/${ref##*/}.tar
    file=${file//:/_}
    if [ -f "$file" ] && [ "$(cat "$file.id" 2>/dev/null)" = "$id:$ref" ]; then
        say "$file is up to date ($src)"
    else
        rm -f "$file" "$file.id"
        # by its id: pushed by name, the archive would carry the localhost/ name as well
        buildah push --quiet "$id" "docker-archive:$file.tmp:$ref" >/dev/null
        mv "$file.tmp" "$file"
        echo "$id:$ref" > "$file.id"
        say "wrote $file ($ref, $(du -h "$file" | cut -f1))"
    fi
    echo "$ref $file"
done
