#!/usr/bin/env bash
# run_layouts.sh K3 TEST_BIN CONFIGS OUT "MODELS" "LAYOUTS" MPIRUN... - writes each tiny
# checkpoint of MODELS (CONFIGS/MODEL/config.json, seed 3) once under OUT, then runs
# `TEST_BIN CKPT TP ADP` under MPIRUN with TP x ADP ranks for every TPxADP of LAYOUTS
# (e.g. "1x1 2x2"). A run passes on exit status 0; its '#' lines are its report. Shared
# by the sharded-forward, batched-forward and serving-loop tests. K3_RUN_TIMEOUT: seconds
# one run may take (default 300).
set -u
K3=$1; BIN=$2; CONFIGS=$3; OUT=$4; MODELS=$5; LAYOUTS=$6; shift 6
MPIRUN_LINE="$*"
. "$(dirname "$0")/../cli/harness.sh"
mkdir -p "$OUT"
for model in $MODELS; do
    ck="$OUT/$model"
    if [ ! -f "$ck/model.safetensors.index.json" ]; then
        "$K3" gen-weights --model-config "$CONFIGS/$model/config.json" --out "$ck" --seed 3 >/dev/null 2>&1
        check "gen-weights $model" "$?" 0
    fi
    for layout in $LAYOUTS; do
        tp=${layout%x*}; adp=${layout#*x}; np=$(( tp * adp ))
        out=$(timeout "${K3_RUN_TIMEOUT:-300}" $MPIRUN_LINE -np $np "$BIN" "$ck" $tp $adp 2>&1); rc=$?
        check "$model tp $tp x adp $adp (np $np)" "$rc" 0
        [ $rc -eq 0 ] || echo "$out" | tail -20 >&2
        grep '^#' <<<"$out"
    done
done
summary
