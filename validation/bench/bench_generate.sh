#!/usr/bin/env bash
# bench_generate.sh K3 MODEL_CONFIG WORKDIR "LAYOUTS" N_REQ PROMPT MAX_TOKENS MPIRUN...
#
# Tokens/s of `k3 generate` on synthetic weights (k3 gen-weights, seed 1) with
# CPU ranks: N_REQ greedy requests of PROMPT tokens each asking for
# MAX_TOKENS, once per layout ("TP,ADP TP,ADP ..."). Each rank gets
# cores / ranks CPU threads (backend.threads). Prints one #-headed table row
# per layout, from the line `k3 generate` logs at the end (tokens generated /
# the step loop's wall time; the load and the checkpoint's start are not in
# it), and the 1-minute load average before and after each run, since the
# machine may be shared. Correctness in the same run: every layout must give
# the greedy output ids of the first (#wrong = requests that differ).
# With K3_BENCH_BW=1 it first measures the memory bandwidth (see below).
#
#   validation/bench/bench_generate.sh build/k3 configs/models/k3-small/config.json /tmp/bench-gen \
#       "1,1 1,2 2,1" 8 64 32 mpirun --oversubscribe
set -u
K3=$1; CONFIG=$2; WORK=$3; LAYOUTS=$4; N_REQ=$5; PROMPT=$6; MAX_TOKENS=$7; shift 7
MPIRUN_LINE="$*"
mkdir -p "$WORK"
ck="$WORK/model"
if [ ! -f "$ck/model.safetensors.index.json" ]; then
    "$K3" gen-weights --model-config "$CONFIG" --out "$ck" --seed 1 >/dev/null || exit 1
fi
vocab=$(grep -o '"vocab_size": *[0-9]*' "$CONFIG" | head -1 | grep -o '[0-9]*$')
awk -v n="$N_REQ" -v p="$PROMPT" -v m="$MAX_TOKENS" -v v="$vocab" 'BEGIN { s = 11
    for (i = 0; i < n; i++) {
        ids = ""
        for (t = 0; t < p; t++) { s = (s * 1103515245 + 12345) % 2147483648; ids = ids (t ? "," : "") int(s / 65536) % v }
        printf "{\"id\": %d, \"prompt_ids\": [%s], \"max_tokens\": %d, \"stop_token_ids\": []}\n", i, ids, m
    } }' > "$WORK/requests.jsonl"
cores=$(nproc)
load() { cut -d' ' -f1 /proc/loadavg; }
# K3_BENCH_BW=1: first this machine's memory bandwidth, a STREAM-like triad
# a = b + s·c over 3 x 256 MiB of doubles on every core (best of 5; bytes
# counted as 3 x 8 per element, no write-allocate), for the roofline of a
# decode step, which is bound by reading the weights.
if [ "${K3_BENCH_BW:-0}" = 1 ]; then
    cat > "$WORK/triad.c" <<'TRIAD'
#include <stdio.h>
#include <stdlib.h>
#include <omp.h>
int main(void)
{
    long n = 32L << 20;
    double *a = malloc(8 * n), *b = malloc(8 * n), *c = malloc(8 * n), best = 1e30;
#pragma omp parallel for
    for (long i = 0; i < n; i++) a[i] = 0, b[i] = 1, c[i] = 2;
    for (int r = 0; r < 5; r++) {
        double t = omp_get_wtime();
#pragma omp parallel for
        for (long i = 0; i < n; i++) a[i] = b[i] + 3.0 * c[i];
        t = omp_get_wtime() - t;
        if (t < best) best = t;
    }
    printf("# memory bandwidth (triad, %d threads): %.1f GB/s (check %.0f)\n", omp_get_max_threads(),
           24.0 * n / best / 1e9, a[n / 2]);
    return 0;
}
TRIAD
    cc -O2 -fopenmp -o "$WORK/triad" "$WORK/triad.c" && OMP_NUM_THREADS=$cores "$WORK/triad"
fi
printf '# k3 generate, %s, %d requests x (%d prompt + %d generated tokens), greedy, %d cores\n' \
    "$(basename "$(dirname "$CONFIG")")" "$N_REQ" "$PROMPT" "$MAX_TOKENS" "$cores"
printf '# %4s %4s %6s %8s %8s %10s %12s %10s %10s %7s\n' tp adp ranks threads steps run_s gen_tok/s all_tok/s load1 '#wrong'
bad=0
ref=""
for layout in $LAYOUTS; do
    tp=${layout%,*}; adp=${layout#*,}; np=$((tp * adp))
    threads=$((cores / np)); [ "$threads" -ge 1 ] || threads=1
    l0=$(load)
    log=$($MPIRUN_LINE -np "$np" "$K3" generate --model "$ck" --input "$WORK/requests.jsonl" \
          --out "$WORK/out_${tp}x${adp}.jsonl" --tp "$tp" --adp "$adp" --set backend.threads=$threads 2>&1)
    rc=$?
    l1=$(load)
    line=$(grep -a 'tokens generated in' <<<"$log" | tail -1)
    if [ $rc -ne 0 ] || [ -z "$line" ]; then
        echo "$log" | tail -20 >&2
        printf '  %4s %4s %6s  failed (exit %d)\n' "$tp" "$adp" "$np" "$rc"
        bad=1
        continue
    fi
    steps=$(grep -o '[0-9]* steps' <<<"$line" | grep -o '^[0-9]*')
    run_s=$(grep -o 'in [0-9.]* s' <<<"$line" | grep -o '[0-9.]*')
    gen=$(grep -o '[0-9.]* tokens/s,' <<<"$line" | grep -o '^[0-9.]*')
    all=$(grep -o '[0-9.]* tokens/s with' <<<"$line" | grep -o '^[0-9.]*')
    ids=$(grep -o '"output_ids":\[[^]]*\]' "$WORK/out_${tp}x${adp}.jsonl")
    [ -n "$ref" ] || ref=$ids
    wrong=$(diff <(echo "$ref") <(echo "$ids") | grep -c '^>')
    [ "$wrong" -eq 0 ] || bad=1
    printf '  %4s %4s %6s %8s %8s %10s %12s %10s %10s %7s\n' "$tp" "$adp" "$np" "$threads" "$steps" "$run_s" \
        "$gen" "$all" "$l0->$l1" "$wrong"
done
exit $bad
