#!/usr/bin/env bash
# setup.sh - everything a fresh Debian machine needs to build and test k3:
# the Debian packages in .ci/apt-packages.txt (installed with apt-get when
# running as root, otherwise listed for you) and a Python venv in .venv with
# .ci/requirements.txt (for the independent reference checks). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

mapfile -t pkgs < <(sed -e 's/#.*//' -e '/^\s*$/d' .ci/apt-packages.txt)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "setup: installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        echo "setup: please install: sudo apt-get install ${missing[*]}" >&2
        exit 1
    fi
fi

if [ ! -x .venv/bin/python3 ]; then
    python3 -m venv .venv
fi
# Reinstall only when the requirement list changed.
stamp=.venv/.k3-requirements
if ! cmp -s .ci/requirements.txt "$stamp"; then
    .venv/bin/pip install -q --disable-pip-version-check -r .ci/requirements.txt
    cp .ci/requirements.txt "$stamp"
fi
echo "setup: ok"
