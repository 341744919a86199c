#!/usr/bin/env bash
# hack/image/verify.sh [ARCHIVE...]: check the archives export.sh writes the way a kubelet's
# containerd sees them: a throwaway containerd (its own root, state and socket under a temporary
# directory, the CRI plugin off) imports them into the k8s.io namespace, then
#   - policy-scheduler --version and `policy-scheduler run --help` run as uid 10001 (the image's
#     USER; ctr 1.6 has no --user) on a read-only root filesystem (nothing may be written to the
#     image: no bytecode, no caches), and every module they import has a valid .pyc,
#   - the pause image's /pause -v runs, and /pause exits 0 on SIGTERM,
#   - the busybox image has sh, sleep and wget.
# No argument: export.sh --no-build's archives. Stops that containerd and removes its mounts and
# files at the end. Needs root, containerd and runc (installed from Debian when missing).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[ "${1:-}" = -h ] || [ "${1:-}" = --help ] && { sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; }
need_root
need containerd containerd
need runc runc

all=
if [ $# -eq 0 ]; then
    all=1
    mapfile -t lines < <(bash "$IMAGE_DIR/export.sh" --no-build)
    set -- $(printf '%s\n' "${lines[@]}" | cut -d' ' -f2)
fi

dir=$(mktemp -d /tmp/ps-image-verify.XXXXXX)
sock=$dir/containerd.sock
cat > "$dir/config.toml" <<TOML
version = 2
root = "$dir/root"
state = "$dir/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$sock"
TOML
pid=
stop() {
    set +e
    if [ -n "$pid" ]; then
        for t in $(ctr --address "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
            ctr --address "$sock" -n k8s.io tasks kill -s KILL "$t" >/dev/null 2>&1
        done
        kill "$pid"; wait "$pid" 2>/dev/null
    fi
    # whatever containerd left mounted under its directory, deepest first
    awk -v d="$dir" '$2 ~ "^"d {print $2}' /proc/self/mounts | sort -r | xargs -r -n1 umount -l
    rm -rf "$dir"
}
trap stop EXIT
containerd --config "$dir/config.toml" > "$dir/containerd.log" 2>&1 &
pid=$!
for _ in $(seq 50); do [ -S "$sock" ] && ctr --address "$sock" version >/dev/null 2>&1 && break; sleep 0.2; done
ctr --address "$sock" version >/dev/null || { tail "$dir/containerd.log" >&2; die "containerd did not start"; }

C=(ctr --address "$sock" -n k8s.io)
for f in "$@"; do "${C[@]}" images import "$f" >&2; done
refs=$("${C[@]}" images ls -q)
echo "$refs" >&2

fail=0
check() {  # check DESCRIPTION COMMAND...: run, show the output, count a failure
    local what=$1; shift
    local out rc=0
    out=$("$@" 2>&1) || rc=$?
    if [ $rc = 0 ]; then echo "ok    $what: $(echo "$out" | head -1)"
    else echo "FAIL  $what (exit $rc):"; echo "$out" | tail -15 | sed 's/^/      /'; fail=1; fi
}
n=0
# has REF: the image was imported (with no arguments, all three must have been)
has() {
    grep -qx "$1" <<< "$refs" && return 0
    [ -n "$all" ] && { echo "FAIL  $1 is not among the imported images"; fail=1; }
    return 1
}
run() { n=$((n + 1)); "${C[@]}" run --rm --read-only "$@"; }  # run IMAGE-ARGS...: a container named t<n>

if has "$PRODUCT_REF"; then
    # ctr 1.6 has no --user: the containers run as the image's USER, checked first to be 10001.
    check "runs as uid/gid 10001 (the image's USER)" \
        run "$PRODUCT_REF" t$((n + 1)) python -c 'import os, sys; print(os.getuid(), os.getgid()); sys.exit(os.getuid() != 10001 or os.getgid() != 10001)'
    check "policy-scheduler --version (read-only root)" \
        run "$PRODUCT_REF" t$((n + 1)) policy-scheduler --version
    check "policy-scheduler run --help (read-only root)" \
        run "$PRODUCT_REF" t$((n + 1)) policy-scheduler run --help
    check "no bytecode to write: every module the CLI imports has a valid .pyc" \
        run "$PRODUCT_REF" t$((n + 1)) python -c '
import importlib.util, os, struct, sys, policy_scheduler.cli, kopf, kubernetes
def stale(src):
    pyc = importlib.util.cache_from_source(src)
    try:
        with open(pyc, "rb") as f:
            magic, flags, a, b = struct.unpack("<4sIII", f.read(16))
    except OSError:
        return "missing"
    if magic != importlib.util.MAGIC_NUMBER:
        return "other magic"
    st = os.stat(src)
    if flags == 0 and (a, b) != (int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF):
        return "older than its source"
    return None
bad = [(m.__file__, why) for m in list(sys.modules.values())
       if getattr(m, "__file__", None) and m.__file__.endswith(".py") and (why := stale(m.__file__))]
print(len(sys.modules), "modules,", len(bad), "without a valid .pyc", *bad[:5])
sys.exit(1 if bad else 0)'
fi
if has "$PAUSE_REF"; then
    check "pause -v" run "$PAUSE_REF" t$((n + 1)) /pause -v
    check "pause exits 0 on SIGTERM" bash -c "
        ${C[*]} run --rm --read-only $PAUSE_REF t-pause & sleep 1
        ${C[*]} tasks kill -s SIGTERM t-pause && wait \$! && echo exit 0"
fi
if has "$BUSYBOX_REF"; then
    check "busybox sh, sleep, wget" run "$BUSYBOX_REF" t$((n + 1)) sh -c 'sleep 0.1 && wget --help 2>&1 | head -1 && echo sh ok'
fi
[ $fail = 0 ] || die "some checks failed"
say "all checks passed"
