#!/usr/bin/env bash
# hack/ensure-deb.sh COMMAND PACKAGE: make sure COMMAND is on PATH, installing the Debian package
# PACKAGE when it is missing (root, or sudo -n). For tools the tests run (e.g. zsh for the
# completion test); nothing is started.
set -euo pipefail
cmd=$1 pkg=$2
command -v "$cmd" >/dev/null 2>&1 && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-deb: '$cmd' is not on PATH and there is no apt-get to install $pkg" >&2
    exit 1
fi
SUDO=()
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "ensure-deb: installing '$pkg' needs root (or sudo)" >&2; exit 1; }
    SUDO=(sudo -n)
fi
echo "ensure-deb: installing the Debian package '$pkg'" >&2
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null
command -v "$cmd" >/dev/null 2>&1 || { echo "ensure-deb: '$pkg' installed but '$cmd' is not on PATH" >&2; exit 1; }
