#!/usr/bin/env bash
# Runs the frontend fuzz targets (not part of the default test run).
#   tests/frontend/fuzz/run_fuzz.sh BUILD_DIR [RUNS] [JOBS] [TARGETS]
# TARGETS: "out_parse request json_schema" (default) or some of them, to run side by side.
# K3_FUZZ_MAX_LEN caps the input size (default 4096 bytes).
# BUILD_DIR is configured with clang and the fuzzer instrumentation, e.g.
#   CC=clang cmake -S . -B build-fuzz -G Ninja -DK3_FUZZ=ON \
#       -DK3_SANITIZE=fuzzer-no-link,address,undefined
#   cmake --build build-fuzz --target fuzz_request fuzz_out_parse fuzz_json_schema
# The request corpus is seeded with the KVV prompt_tokens requests from ../shared/data
# (read, never copied into the repository). Each target runs RUNS executions (default
# 10,000,000) in JOBS processes; the libFuzzer logs are left in BUILD_DIR/fuzz-logs.
set -euo pipefail
build=$(cd "$1" && pwd)
runs=${2:-10000000}
jobs=${3:-1}
targets=${4:-out_parse request json_schema}
max_len=${K3_FUZZ_MAX_LEN:-4096}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
work=$build/fuzz-work
logs=$build/fuzz-logs
mkdir -p "$work/request" "$work/out_parse" "$work/json_schema" "$logs"
cases=$root/../shared/data/kvv/prompt_token_cases/cases.jsonl
if [[ -f $cases ]]; then
    i=0
    while IFS= read -r line; do
        python3 -c 'import json,sys; print(json.dumps(json.loads(sys.argv[1])["request"]))' \
            "$line" > "$work/request/kvv_$i.json"
        i=$((i + 1))
    done < "$cases"
fi
printf '\x09\x05The user wants weather.<|close|>think<|sep|><|open|>response<|sep|>ok<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="f" index="1"<|sep|><|open|>argument key="a" type="number"<|sep|>3<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>' \
    > "$work/out_parse/seed1"
# json_schema seeds: each walle schema paired with an empty object
for f in "$root"/../shared/data/kvv/walle_validator_cases/validator_cases/*/valid.jsonl; do
    [[ -f $f ]] || continue
    i=0
    while IFS= read -r line; do
        printf '%s\0{}' "$line" > "$work/json_schema/$(basename "$(dirname "$f")")_$i"
        i=$((i + 1))
    done < "$f"
done
status=0
for t in $targets; do
    per=$(( (runs + jobs - 1) / jobs ))
    mkdir -p "$logs/$t"
    rm -f "$logs/$t"/*.log
    # -runs counts per process: with JOBS > 1 each job runs its share, logging to fuzz-N.log.
    args=(-dict="$here/k3.dict" -runs="$per" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048
          -print_final_stats=1)
    if [[ $jobs -gt 1 ]]; then args+=(-jobs="$jobs" -workers="$jobs"); fi
    rc=0
    (cd "$logs/$t" && "$build/tests/frontend/fuzz_$t" "${args[@]}" "$work/$t" > main.log 2>&1) || rc=$?
    [[ $rc == 0 ]] || status=1
    n=$(cat "$logs/$t"/*.log | grep -h 'stat::number_of_executed_units' | awk '{s += $2} END {print s + 0}')
    echo "fuzz_$t: $n executions, exit status $rc (logs in $logs/$t)"
done
exit $status
