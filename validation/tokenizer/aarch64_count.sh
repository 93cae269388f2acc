#!/bin/bash
# aarch64_count.sh REV FILE... - how many instructions the aarch64 build of the tokenizer of git
# revision REV (or of the working tree when REV is ".") executes to encode each FILE once on
# one thread, on new text, counted under qemu-aarch64 where no aarch64 machine is at hand.
# qemu logs every translated block (its instructions) and every block it runs, restricted to
# the encoder's objects (not vocab.c, which loads the tables, nor the driver); the count is
# that of a run with one call (tok_reps) less that of a run with none. Prints, per file,
# instructions and blocks run (a block ends at a branch: about the branches taken).
# K3_TOK_SIMD in the environment passes through (base: the 16-byte build). Needs
# gcc-aarch64-linux-gnu and qemu-user (.ci/apt-packages.txt). Run it in the repository.
set -euo pipefail
rev=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ "$rev" = . ]; then
    root=$PWD
else
    root=$work/tree
    mkdir -p "$root"
    git archive "$rev" src kernels | tar -x -C "$root"
fi
f=$root/src/frontend
srcs=$("$here/tok_sources.sh" "$f")
enc="pretok bpe bpe_chars tokenizer tok_chunks tok_neon" # linked last, in one range
mkdir -p "$work/o"
cc() { aarch64-linux-gnu-gcc -O2 -std=gnu11 -D_GNU_SOURCE -I"$root/src" -I"$root" -I"$here" -c "$1" -o "$2"; }
for s in $srcs; do cc "$f/$s" "$work/o/${s%.c}.o"; done
cc "$here/tok_reps.c" "$work/o/tok_reps.o"
cc "$root/src/core/log.c" "$work/o/log.o"
cc "$root/src/core/err.c" "$work/o/err.o"
cc "$root/kernels/cpu/pool.c" "$work/o/pool.o"
first=() last=()
for o in "$work"/o/*.o; do
    b=$(basename "$o" .o)
    if [[ " $enc " == *" $b "* ]]; then last+=("$o"); else first+=("$o"); fi
done
bin=$work/tok_reps
aarch64-linux-gnu-gcc -static -no-pie -Wl,-Map="$bin.map" -o "$bin" "${first[@]}" "${last[@]}" -lpthread -lm
# the encoder's address range: from the first of its objects' code to the end of the last
range=$(grep -E "^ \.text +0x[0-9a-f]+ +0x[0-9a-f]+ .*/o/($(tr ' ' '|' <<<"$enc"))\.o$" "$bin.map" |
    while read -r _ a s _; do echo $((a)) $((a + s)); done | sort -n |
    awk 'NR == 1 {lo = $1} {hi = $2} END {printf "0x%x..0x%x", lo, hi}')
data=$root/../shared/data
[ -d "$data" ] || data=$PWD/../shared/data
count() { # FILE REPS: "instructions blocks"
    local fifo=$work/log
    rm -f "$fifo"
    mkfifo "$fifo"
    awk '/^IN:/ {inb = 1; first = ""; next}
         inb && /^0x/ {pc = $1; sub(":", "", pc); if (first == "") first = pc; n[first]++; next}
         inb && /^$/ {inb = 0; next}
         /^Trace/ {split($0, a, "/"); total += n["0x" substr(a[2], 9)]; runs++}
         END {print total + 0, runs + 0}' <"$fifo" >"$work/count" &
    qemu-aarch64 -d in_asm,exec,nochain -dfilter "$range" -D "$fifo" "$bin" \
        "$data/kimi-tokenizer/tiktoken.model" "$data/kimi-k3/tokenizer_config.json" "$1" "$2" >/dev/null
    wait
    cat "$work/count"
}
read -r i0 b0 < <(count "$1" 0)
echo "# aarch64, rev $rev${K3_TOK_SIMD:+, K3_TOK_SIMD=$K3_TOK_SIMD}: instructions and blocks of one encode call"
for file in "$@"; do
    read -r i1 b1 < <(count "$file" 1)
    printf '%-40s %12d instructions %10d blocks %10d bytes\n' "$(basename "$file")" $((i1 - i0)) $((b1 - b0)) \
        "$(stat -c %s "$file")"
done
