#!/usr/bin/env bash
# Makes the reverse-proxy tests runnable: Debian's nginx (tests/deploy runs its
# own nginx process; the machine's nginx service is never started or touched).
set -euo pipefail

if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "make test: nginx is missing; install it: apt-get install nginx-light" >&2
    exit 1
fi
echo "ensure-nginx: installing nginx-light from Debian"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# policy-rc.d 101: the package must not start a system nginx service. A
# policy-rc.d the machine has already (a container image's, an admin's) is
# put back afterwards, not deleted.
policy=/usr/sbin/policy-rc.d
if [ -e "$policy" ]; then
    saved=$(mktemp)
    cp -p "$policy" "$saved"
    trap 'cp -p "$saved" "$policy"; rm -f "$saved"' EXIT
else
    trap 'rm -f "$policy"' EXIT
fi
printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy"
apt-get install -y -qq --no-install-recommends nginx-light >/dev/null
