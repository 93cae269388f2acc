#!/bin/bash
# bench_host.sh CARRY OUT TOK_BENCH... - the tokenizer benchmark on a quiet machine (the GPU
# machine's host), from what CARRY holds (see README "Benchmark": wheels/, data/kimi-tokenizer,
# data/kimi-k3, inputs/ from bench.py --save-inputs):
#   1. A/B: per input, each tok_bench binary given, then tiktoken, all pinned to one core,
#      over ROUNDS rounds (default 3; OUT/ab_r<round>_<binary>.jsonl, OUT/ab_r<round>_tiktoken.jsonl);
#   2. bench.py with every competitor, the last binary as k3, all cores (OUT/bench.log, .json);
#      skipped when AB_ONLY=1.
# Ids are checked against the reference in step 2; step 1 compares every binary's ids with the
# first one's (OUT/ab_ids.txt).
set -euo pipefail
C=$(realpath "$1")
O=$(realpath "$2")
shift 2
HERE=$(dirname "$(realpath "$0")")
CORE=${CORE:-3}
PY=${PYTHON:-python3}
mkdir -p "$O" /tmp/pk
"$PY" -m pip install -q --no-deps --no-index --target /tmp/pk "$C"/wheels/*.whl 2>&1 | tail -2 || true
export PYTHONPATH=/tmp/pk
M=$C/data/kimi-tokenizer/tiktoken.model
K=$C/data/kimi-k3/tokenizer_config.json
# INPUTS: the inputs to time, by name without .txt (default: all)
mapfile -t FILES < <(if [ -n "${INPUTS:-}" ]; then for i in $INPUTS; do echo "$C/inputs/$i.txt"; done
                     else ls "$C"/inputs/*.txt; fi)
# Input by input, each binary and then tiktoken back to back: the host's load changes by the
# minute, and the ratio to tiktoken is what the floor is about.
for r in $(seq 1 "${ROUNDS:-3}"); do
    for b in "$@"; do : >"$O/ab_r${r}_$(basename "$b").jsonl"; done
    : >"$O/ab_r${r}_tiktoken.jsonl"
    for i in "${!FILES[@]}"; do
        f=${FILES[$i]}
        for b in "$@"; do
            name=$(basename "$b")
            mkdir -p "/tmp/ab_ids/$name/$i"
            taskset -c "$CORE" "$b" "$M" "$K" 1 1 "/tmp/ab_ids/$name/$i" "$f" 2>/dev/null >>"$O/ab_r${r}_$name.jsonl"
        done
        taskset -c "$CORE" "$PY" "$HERE/bench.py" --worker tiktoken --threads 1 --inputs "$C/inputs" \
            --input "$(basename "$f")" --out /tmp/ab_ids --data "$C/data" --min-seconds 1 |
            tail -1 >>"$O/ab_r${r}_tiktoken.jsonl"
    done
done
first=$(basename "$1")
[ "${ROUNDS:-3}" = 0 ] || for b in "$@"; do
    name=$(basename "$b")
    for i in "${!FILES[@]}"; do
        if cmp -s "/tmp/ab_ids/$first/$i/0.ids" "/tmp/ab_ids/$name/$i/0.ids"; then s=same; else s=DIFFERENT; fi
        echo "$name $(basename "${FILES[$i]}") ids vs $first: $s"
    done
done >"$O/ab_ids.txt"
[ "${AB_ONLY:-0}" = 1 ] && exit 0
last=${!#}
"$PY" "$HERE/bench.py" --tok-bench "$last" --data "$C/data" --prebuilt "$C/inputs" \
    --threads "$(nproc)" --json "$O/bench.json" >"$O/bench.log" 2>&1
