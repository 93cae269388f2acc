#!/bin/bash
# tok_sources.sh FRONTEND_DIR - the .c files of the k3_tokenizer library, one a line, as
# FRONTEND_DIR/CMakeLists.txt's add_library(k3_tokenizer ...) lists them (it may span lines):
# the build of tok_so.sh and aarch64_count.sh, taken from the revision they build.
set -euo pipefail
srcs=$(awk '/add_library\(k3_tokenizer / {on = 1} on {print} on && /\)/ {exit}' "$1/CMakeLists.txt" |
    tr ' ()' '\n' | grep '\.c$' || true)
[ -n "$srcs" ] || { echo "tok_sources.sh: no k3_tokenizer sources in $1/CMakeLists.txt" >&2; exit 1; }
echo "$srcs"
