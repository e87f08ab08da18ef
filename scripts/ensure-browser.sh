#!/usr/bin/env bash
# Makes the browser tests runnable: Debian's Chromium (no browser downloads:
# playwright-core only drives the system binary) and the JS client's node
# modules (npm ci, from the committed package-lock.json).
set -euo pipefail
cd "$(dirname "$0")/.."

CHROMIUM=/usr/bin/chromium

if [ ! -x "$CHROMIUM" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "ensure-browser: $CHROMIUM is missing and installing it needs root (apt-get install chromium)" >&2
        exit 1
    fi
    echo "ensure-browser: installing chromium from Debian"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
fi

if ! command -v npm >/dev/null; then
    echo "ensure-browser: npm is missing (node and npm are needed for clients/js)" >&2
    exit 1
fi

# npm ci wipes and reinstalls node_modules; skip it while the lock is unchanged.
stamp=clients/js/node_modules/.lock-stamp
if [ ! -f "$stamp" ] || ! cmp -s clients/js/package-lock.json "$stamp"; then
    echo "ensure-browser: npm ci in clients/js"
    npm ci --prefix clients/js --no-audit --no-fund --loglevel=error
    cp clients/js/package-lock.json "$stamp"
fi
