#!/usr/bin/env bash
# hack/image/build.sh: what `make image` runs. Builds the Dockerfile, unchanged, as IMAGE
# (default policy-scheduler:<version>) with BUILDER (docker, podman or buildah; `make image`
# picks the first one that works), on one of two bases:
#   BASE=official  the Dockerfile's default, python:3.11-slim pinned by digest (what users get);
#   BASE=local     $BASE_IMAGE, Debian 12's Python 3.11 built on this machine by base.sh (cached),
#                  for machines that cannot reach a container registry (buildah or podman only);
#   BASE=auto      (default) official when that image is in local storage or can be pulled within
#                  PULL_TIMEOUT seconds (default 20), else local, said in one line.
# With buildah or podman the build keeps its layers (--layers): a change of the source rebuilds
# only the package's layers, the dependencies' venv is reused. The RUN steps see this machine's CA
# bundle (a read-only mount over the base's, not part of any layer), so pip works behind a
# TLS-inspecting proxy this machine trusts. IMAGE_FLAGS: more options for the builder.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[ "${1:-}" = -h ] || [ "${1:-}" = --help ] && { sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; }

BASE=${BASE:-auto}
IMAGE=${IMAGE:-policy-scheduler:$VERSION}
PULL_TIMEOUT=${PULL_TIMEOUT:-20}
read -r -a flags <<< "${IMAGE_FLAGS:-}"
official=$(sed -n 's/^ARG PYTHON_IMAGE=//p' "$REPO_ROOT/Dockerfile")
[ -n "$official" ] || die "no 'ARG PYTHON_IMAGE=' default in the Dockerfile"

if [ -z "${BUILDER:-}" ]; then
    if command -v docker >/dev/null && docker info >/dev/null 2>&1; then BUILDER=docker
    elif command -v podman >/dev/null; then BUILDER=podman
    elif command -v buildah >/dev/null; then BUILDER=buildah
    else
        echo "make image: no image builder here: none of docker (with a running daemon), podman or buildah." >&2
        command -v docker >/dev/null && echo "  (docker is installed, but its daemon does not answer: docker info)" >&2
        echo "  Install one (e.g. apt-get install buildah), or run: docker build -t $IMAGE ." >&2
        exit 1
    fi
fi

case "$BASE" in
    official|local|auto) ;;
    *) die "BASE=$BASE: one of official, local, auto" ;;
esac

if [ "$BUILDER" = docker ]; then
    # docker has its own image store and pulls the pinned base itself.
    [ "$BASE" = local ] && die "BASE=local needs buildah or podman (the local base lives in containers-storage): BUILDER=buildah"
    cd "$REPO_ROOT"
    exec docker build "${flags[@]}" -t "$IMAGE" .
fi

# buildah and podman run the Dockerfile's RUN steps through an OCI runtime, which Debian's buildah
# only recommends: without one every RUN fails ("did not get container create message from
# subprocess: EOF"). runc, installed when neither it nor crun is here.
if ! command -v runc >/dev/null && ! command -v crun >/dev/null; then
    bash "$REPO_ROOT/hack/ensure-deb.sh" runc runc \
        || die "$BUILDER needs an OCI runtime to run the Dockerfile's RUN steps: install runc or crun"
fi

# buildah and podman share containers-storage: an image one of them has, the other sees.
have() { "$BUILDER" image exists "$1" 2>/dev/null || buildah inspect --type image "$1" >/dev/null 2>&1; }
if [ "$BASE" = auto ]; then
    rc=0
    have "$official" || timeout "$PULL_TIMEOUT" "$BUILDER" pull -q "$official" >/dev/null 2>&1 || rc=$?
    if [ $rc = 0 ]; then
        BASE=official
    else
        why="cannot be pulled"
        [ $rc = 124 ] && why="did not pull within ${PULL_TIMEOUT}s (PULL_TIMEOUT)"
        echo "make image: the official base ${official%@*} (pinned by digest) is not in local storage and $why: building on the local Debian base $BASE_IMAGE (BASE=official insists)." >&2
        BASE=local
    fi
fi

args=()
if [ "$BASE" = local ]; then
    bash "$IMAGE_DIR/base.sh"
    args+=(--build-arg "PYTHON_IMAGE=$BASE_IMAGE")
fi
args+=(-v "$(host_ca):/etc/ssl/certs/ca-certificates.crt:ro")

cd "$REPO_ROOT"
set -x
"$BUILDER" build --layers "${args[@]}" "${flags[@]}" -t "$IMAGE" .
