#!/usr/bin/env bash
# test_engine_job.sh K3 TEST_BIN CONFIGS OUT MPIRUN... - the serving loop
# idle, submit, cancel and stop, on one rank, tp 1 x adp 2 and tp 2 x adp 2.
set -u
K3=$1; BIN=$2; CONFIGS=$3; OUT=$4; shift 4
MPIRUN_LINE="$*"
. "$(dirname "$0")/../cli/harness.sh"
mkdir -p "$OUT"
ck="$OUT/k3-tiny"
[ -f "$ck/model.safetensors.index.json" ] ||
    "$K3" gen-weights --model-config "$CONFIGS/k3-tiny/config.json" --out "$ck" --seed 3 >/dev/null 2>&1
for layout in "1 1" "1 2" "2 2"; do
    set -- $layout
    out=$(timeout 300 $MPIRUN_LINE -np $(( $1 * $2 )) "$BIN" "$ck" $1 $2 2>&1); rc=$?
    check "tp $1 x adp $2" "$rc" 0
    echo "$out" | grep '^#'
    [ $rc -eq 0 ] || echo "$out" | tail -20 >&2
done
summary
