#!/usr/bin/env bash
# test_forward_batch.sh K3 TEST_BIN CONFIGS OUT MPIRUN... - batched forward
# == one sequence at a time, on both tiny models, 1 rank and tp 2 x adp 2.
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
    for layout in "1 1" "2 2"; do
        set -- $layout
        out=$(timeout 300 $MPIRUN_LINE -np $(( $1 * $2 )) "$BIN" "$ck" $1 $2 2>&1); rc=$?
        check "$model tp $1 x adp $2" "$rc" 0
        [ $rc -eq 0 ] || echo "$out" | tail -20 >&2
        grep '^#' <<<"$out"
    done
done
summary
