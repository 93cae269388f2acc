#!/bin/bash
# tok_so.sh REV OUT.so [CFLAGS...] - the tokenizer of git revision REV (or of the working tree
# when REV is "."), as a shared library for tok_ab: the sources of k3_tokenizer, read from that
# revision's src/frontend/CMakeLists.txt, with the core and pool files it needs, -O2 -g like the
# RelWithDebInfo build (asserts on, as there). Run it in the repository.
set -euo pipefail
rev=$1
out=$(realpath -m "$2")
shift 2
if [ "$rev" = . ]; then
    root=$PWD
else
    root=$(mktemp -d)
    trap 'rm -rf "$root"' EXIT
    git archive "$rev" src kernels | tar -x -C "$root"
fi
f=$root/src/frontend
srcs=$("$(dirname "$0")/tok_sources.sh" "$f" | sed "s|^|$f/|")
# shellcheck disable=SC2086 # one word per source file
gcc -O2 -g -std=gnu11 -D_GNU_SOURCE -fPIC -shared -I"$root/src" -I"$root" "$@" -o "$out" \
    $srcs "$root"/src/core/log.c "$root"/src/core/err.c "$root"/kernels/cpu/pool.c -lpthread -lm
