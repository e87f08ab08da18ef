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
# policy-rc.d 101: the package must not start a system nginx service.
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
trap 'rm -f /usr/sbin/policy-rc.d' EXIT
apt-get install -y -qq --no-install-recommends nginx-light >/dev/null
