#!/bin/bash
# ab_libs.sh CARRY OUT PROCS ROUNDS INPUT LIB0.so LIB.so... - tok_ab (CARRY/bin/tok_ab or
# $TOK_AB) PROCS times in fresh processes, pinned to CORE (default 3), on CARRY/inputs/INPUT.txt;
# every process's JSON lines go to OUT/ab_libs.jsonl; ab_libs.py summarises them (each
# library's time over LIB0's: the median over processes of each process's median ratio).
# Process p loads library p mod L first (TOK_AB_LOAD_FIRST): the one loaded first runs 1-2%
# quicker (run 121), so each comes first equally often when PROCS is a multiple of L; a copy of
# LIB0 under another name among the libraries shows what is left of the noise.
set -euo pipefail
C=$(realpath "$1")
O=$2
P=$3
R=$4
f=$5
shift 5
mkdir -p "$O"
AB=${TOK_AB:-$C/bin/tok_ab}
for p in $(seq "$P"); do
    TOK_AB_LOAD_FIRST=$((p - 1)) taskset -c "${CORE:-3}" "$AB" "$C/data/kimi-tokenizer/tiktoken.model" "$C/data/kimi-k3/tokenizer_config.json" \
        "$C/inputs/$f.txt" "$R" "$@" | sed "s/^{/{\"process\": $p, /" >>"$O/ab_libs.jsonl"
done
