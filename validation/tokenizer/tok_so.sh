#!/bin/bash
# tok_so.sh REV OUT.so [CFLAGS...] - the tokenizer of git revision REV (or of the working tree
# when REV is "."), as a shared library for tok_ab: the sources of k3_tokenizer
# (src/frontend/CMakeLists.txt) with the core and pool files it needs, -O2 -g -DNDEBUG like the
# RelWithDebInfo build. Run it in the repository.
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
gcc -O2 -g -DNDEBUG -std=gnu11 -D_GNU_SOURCE -fPIC -shared -I"$root/src" -I"$root" "$@" -o "$out" \
    "$f"/vocab.c "$f"/pretok.c "$f"/bpe.c "$f"/bpe_chars.c "$f"/tokenizer.c "$f"/unicode_tables.c \
    "$f"/tok_avx512.c "$root"/src/core/log.c "$root"/src/core/err.c "$root"/kernels/cpu/pool.c -lpthread -lm
