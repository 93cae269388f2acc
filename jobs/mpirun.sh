#!/usr/bin/env bash
# mpirun.sh CONFIG [COMMAND [ARGS...]] - run a k3 job on this machine with
# as many ranks as the deployment file's layout needs (tp * adp).
#   jobs/mpirun.sh configs/deploy/tiny-2rank.cfg serve --model /ckpt/k3-tiny
# COMMAND defaults to `serve`. Set K3_BIN to use another binary, MPIRUN_ARGS
# for extra mpirun options. Only the config path decides the layout.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 CONFIG [COMMAND [ARGS...]]" >&2; exit 2; }
config=$1; shift
cmd=${1:-serve}; [ $# -gt 0 ] && shift
here=$(cd "$(dirname "$0")/.." && pwd)
k3=${K3_BIN:-$here/build/k3}
# The layout, read by k3 itself (the same parser, defaults and checks as the job).
layout=$("$k3" config --config "$config" 2>/dev/null | awk '
    /^parallel = \{/ { p = 1 } p && /^};/ { p = 0 }
    p && $1 == "tp" { gsub(";", "", $3); tp = $3 } p && $1 == "adp" { gsub(";", "", $3); adp = $3 }
    END { if (tp && adp) print tp * adp }' || true)
[ -n "$layout" ] || { "$k3" config --config "$config" >/dev/null; exit 2; }
echo "mpirun.sh: $config needs $layout ranks" >&2
# shellcheck disable=SC2086
exec mpirun --oversubscribe -np "$layout" ${MPIRUN_ARGS:-} "$k3" "$cmd" --config "$config" "$@"
