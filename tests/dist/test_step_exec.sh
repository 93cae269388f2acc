#!/usr/bin/env bash
# test_step_exec.sh K3 TEST_BIN CONFIGS OUT MPIRUN... - plan-driven greedy
# generation on several layouts of both tiny models.
set -u
K3=$1; BIN=$2; CONFIGS=$3; OUT=$4; shift 4
MPIRUN_LINE="$*"
. "$(dirname "$0")/../cli/harness.sh"
mkdir -p "$OUT"
for model in k3-tiny kimi-linear-tiny; do
    ck="$OUT/$model"
    [ -f "$ck/model.safetensors.index.json" ] ||
        "$K3" gen-weights --model-config "$CONFIGS/$model/config.json" --out "$ck" --seed 3 >/dev/null 2>&1
    for layout in "1 1" "1 2" "2 2" "4 1" "1 4"; do
        set -- $layout
        out=$(timeout 600 $MPIRUN_LINE -np $(( $1 * $2 )) "$BIN" "$ck" $1 $2 2>&1); rc=$?
        check "$model tp $1 x adp $2" "$rc" 0
        [ $rc -eq 0 ] || echo "$out" | tail -20 >&2
    done
done
summary
