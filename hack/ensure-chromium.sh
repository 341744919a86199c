#!/usr/bin/env bash
# Make sure a headless-capable `chromium` is on PATH for the what-if report test (Debian package
# `chromium`). The test runs `chromium --headless` on a generated HTML file; nothing here starts
# a browser.
set -euo pipefail

for b in chromium chromium-browser; do
    if command -v "$b" >/dev/null 2>&1; then
        exit 0
    fi
done

if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-chromium: 'chromium' is not on PATH and there is no apt-get to install it;" \
         "install Chromium so that 'chromium' is on PATH" >&2
    exit 1
fi

SUDO=()
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo -n)
    else
        echo "ensure-chromium: installing the Debian package 'chromium' needs root (or sudo)" >&2
        exit 1
    fi
fi

echo "ensure-chromium: installing the Debian package 'chromium'" >&2
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends chromium >/dev/null

if ! command -v chromium >/dev/null 2>&1; then
    echo "ensure-chromium: the package installed but 'chromium' is still not on PATH" >&2
    exit 1
fi
chromium --version 2>&1 | head -n 1 >&2
