#!/usr/bin/env bash
# test_extra_build.sh KIND SRC DIR - a whole second build of the tree:
#   cuda     -DK3_CUDA=ON with the default architectures (sm_90, sm_100, sm_103):
#            configures and compiles (tests included) on a machine without a
#            GPU, and the `gpu` tests skip there with "skipped: no GPU";
#   aarch64  the dependency-free parts cross-compiled for Grace hosts, checked
#            to be aarch64 objects; the tokenizer's tests and its ids against
#            tiktoken's run under qemu-aarch64 (the NEON build of its byte scans).
set -u
KIND=$1; SRC=$2; DIR=$3
. "$SRC/tests/cli/harness.sh"
rm -rf "$DIR"
case "$KIND" in
cuda)
    cmake -S "$SRC" -B "$DIR" -G Ninja -DK3_CUDA=ON -DK3_WERROR=ON >"$DIR.log" 2>&1
    check "CUDA build configures (log: $DIR.log)" "$?" 0
    check_contains "summary shows CUDA" "$(cat "$DIR.log")" "✓ CUDA"
    check_contains "summary shows NCCL" "$(cat "$DIR.log")" "✓ NCCL"
    cmake --build "$DIR" -j2 >>"$DIR.log" 2>&1
    check "CUDA build compiles and links (log: $DIR.log)" "$?" 0
    # (no cuobjdump on the CPU machines: check what nvcc was asked to generate)
    out=$(ninja -C "$DIR" -t commands 2>&1 | grep -- '-x cu ')
    for sm in 90 100 103; do
        check_contains "device code for sm_$sm" "$out" "arch=compute_$sm,code=[compute_$sm,sm_$sm]"
    done
    # The GPU tests (label gpu) are built too; on a machine without a GPU they
    # must skip, visibly, and not fail.
    if ! nvidia-smi >/dev/null 2>&1; then
        out=$(ctest --test-dir "$DIR" -L gpu 2>&1)
        check "gpu-labelled tests skip without a GPU (ctest -L gpu)" "$?" 0
        check_contains "ctest lists them as skipped" "$out" "(Skipped)"
        out=$("$DIR/tests/kernels/test_cuda_ops" 2>&1)
        check "test_cuda_ops exits 77 without a GPU" "$?" 77
        check_contains "test_cuda_ops says so" "$out" "skipped: no GPU"
    fi
    ;;
aarch64)
    cmake -S "$SRC" -B "$DIR" -G Ninja -DK3_PORTABLE_ONLY=ON -DK3_WERROR=ON \
        -DCMAKE_TOOLCHAIN_FILE="$SRC/cmake/aarch64-linux-gnu.cmake" >"$DIR.log" 2>&1
    check "aarch64 cross build configures (log: $DIR.log)" "$?" 0
    cmake --build "$DIR" -j2 >>"$DIR.log" 2>&1
    check "aarch64 cross build compiles (log: $DIR.log)" "$?" 0
    n=0
    for lib in $(find "$DIR" -name '*.a'); do
        obj=$(cd "$(mktemp -d)" && ar x "$lib" && ls | head -1 && file "$(ls | head -1)")
        check_contains "$(basename "$lib") is aarch64" "$obj" "ARM aarch64"
        n=$((n + 1))
    done
    check "libraries built" "$([ $n -ge 2 ] && echo yes)" yes
    # The tokenizer as Grace runs it (NEON), under qemu: its unit tests (both builds of the
    # byte scans, 64-byte and 16-byte), then the tiktoken checks of the x86 build's CTest (ids
    # on 1 MB of each kind of text in both modes and on random strings, every code point's
    # class) through the aarch64 tok_batch, and random strings through the 16-byte build.
    command -v qemu-aarch64 >/dev/null
    check "qemu-aarch64 is installed (Debian: qemu-user)" "$?" 0
    qemu="qemu-aarch64 -L /usr/aarch64-linux-gnu"
    bin=$DIR
    $qemu "$bin/test_tokenizer" >"$DIR.test_tokenizer.log" 2>&1
    check "test_tokenizer passes on aarch64 (log: $DIR.test_tokenizer.log)" "$?" 0
    printf '#!/bin/sh\nexec %s "%s" "$@"\n' "$qemu" "$bin/tok_batch" >"$DIR.tok_batch"
    chmod +x "$DIR.tok_batch"
    py=$SRC/.venv/bin/python3
    val=$SRC/validation/tokenizer
    data=$SRC/../shared/data
    for t in "check_ids.py --mb 1.0" "fuzz_diff.py --cases 10000 --seed 5" "check_codepoints.py" \
             "base fuzz_diff.py --cases 10000 --seed 6"; do
        simd=
        [ "${t%% *}" = base ] && simd=base t=${t#base }
        # shellcheck disable=SC2086 # the script and its arguments
        out=$(K3_TOK_SIMD=$simd "$py" $val/$t --tok-batch "$DIR.tok_batch" --data "$data" 2>&1)
        check "$t against tiktoken on aarch64 ${simd:+(K3_TOK_SIMD=$simd)}" "$?" 0
        check_contains "$t says PASS" "$out" "PASS"
    done
    ;;
*) echo "unknown kind $KIND"; exit 2 ;;
esac
summary
