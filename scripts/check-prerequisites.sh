#!/usr/bin/env bash
# What `make test` needs beyond Python, checked before anything runs: each
# missing piece is named on one line with what to install, then exit 1.
# Chromium is not checked here: scripts/ensure-browser.sh installs it when
# run as root and names it otherwise.
set -uo pipefail

# Where Debian and Ubuntu put the server binaries (pg_config may be a client-only wrapper).
PG_LIBDIR=${SYNCD_PG_LIBDIR:-/usr/lib/postgresql}

missing=0
need() {  # need <what> <install hint>
    echo "make test: $1 is missing; install it: $2" >&2
    missing=1
}

pg_bindir=""
if command -v pg_config >/dev/null 2>&1; then
    dir=$(pg_config --bindir 2>/dev/null || true)
    [ -n "$dir" ] && [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && pg_bindir=$dir
fi
if [ -z "$pg_bindir" ]; then
    for dir in $(ls -d "$PG_LIBDIR"/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then pg_bindir=$dir; break; fi
    done
fi
[ -n "$pg_bindir" ] || need "PostgreSQL's server binaries (initdb, pg_ctl)" "apt-get install postgresql"

command -v node >/dev/null 2>&1 || need "Node.js" "apt-get install nodejs npm"
command -v npm >/dev/null 2>&1 || need "npm" "apt-get install npm"
# The README's curl tour runs as a test.
command -v curl >/dev/null 2>&1 || need "curl" "apt-get install curl"
command -v jq >/dev/null 2>&1 || need "jq" "apt-get install jq"

exit $missing
