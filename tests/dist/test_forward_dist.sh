#!/usr/bin/env bash
# test_forward_dist.sh K3 TEST_BIN CONFIGS OUT MPIRUN... - writes the tiny
# checkpoints, then runs test_forward_dist for every layout of issue 5 on both.
set -u
K3=$1; BIN=$2; CONFIGS=$3; OUT=$4; shift 4
MPIRUN_LINE="$*"
. "$(dirname "$0")/../cli/harness.sh"
mkdir -p "$OUT"
for model in k3-tiny kimi-linear-tiny; do
    ck="$OUT/$model"
    if [ ! -f "$ck/model.safetensors.index.json" ]; then
        "$K3" gen-weights --model-config "$CONFIGS/$model/config.json" --out "$ck" --seed 3 >/dev/null 2>&1
        check "gen-weights $model" "$?" 0
    fi
    for layout in "1 1" "2 1" "1 2" "2 2" "4 1" "1 4" "2 4" "8 1"; do
        set -- $layout
        np=$(( $1 * $2 ))
        out=$(timeout 600 $MPIRUN_LINE -np $np "$BIN" "$ck" $1 $2 2>&1); rc=$?
        check "$model tp $1 x adp $2 (np $np)" "$rc" 0
        [ $rc -eq 0 ] || echo "$out" | tail -20 >&2
        grep '^#' <<<"$out" | head -2
    done
done
summary
