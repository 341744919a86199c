#!/usr/bin/env bash
# Make sure a `prometheus` server binary is on PATH for the tests (Debian package `prometheus`).
#
# The tests start their own server on a free loopback port with a temporary config; nothing
# here starts one. The package's maintainer scripts would start the system service (listening
# on :9090), so the install runs under a policy-rc.d that forbids starting services, and a
# service the install started anyway is stopped again.
set -euo pipefail

if command -v prometheus >/dev/null 2>&1; then
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-prometheus: 'prometheus' is not on PATH and there is no apt-get to install it;" \
         "install Prometheus (>= 2.x) so that 'prometheus' is on PATH" >&2
    exit 1
fi

SUDO=()
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo -n)
    else
        echo "ensure-prometheus: installing the Debian package 'prometheus' needs root (or sudo)" >&2
        exit 1
    fi
fi

POLICY_RC=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$POLICY_RC" ]; then
    # exit code 101: "action forbidden"; invoke-rc.d and deb-systemd-invoke then start nothing
    printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$POLICY_RC" >/dev/null
    "${SUDO[@]}" chmod 755 "$POLICY_RC"
    made_policy=1
fi
cleanup() {
    if [ "$made_policy" = 1 ]; then
        "${SUDO[@]}" rm -f "$POLICY_RC"
    fi
}
trap cleanup EXIT

echo "ensure-prometheus: installing the Debian package 'prometheus'" >&2
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends prometheus >/dev/null

# if a service manager started the system server anyway, stop it: it would hold :9090
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
    "${SUDO[@]}" systemctl stop prometheus || true
    "${SUDO[@]}" systemctl disable prometheus >/dev/null 2>&1 || true
elif [ -x /etc/init.d/prometheus ] && /etc/init.d/prometheus status >/dev/null 2>&1; then
    "${SUDO[@]}" /etc/init.d/prometheus stop >/dev/null 2>&1 || true
fi

if ! command -v prometheus >/dev/null 2>&1; then
    echo "ensure-prometheus: the package installed but 'prometheus' is still not on PATH" >&2
    exit 1
fi
prometheus --version 2>&1 | head -n 1 >&2
