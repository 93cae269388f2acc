#!/usr/bin/env bash
# test_extra_build.sh KIND SRC DIR - a whole second build of the tree:
#   cuda     -DK3_CUDA=ON with the default architectures (sm_90, sm_100, sm_103):
#            configures and compiles (tests included) on a machine without a
#            GPU, and the `gpu` tests skip there with "skipped: no GPU";
#   aarch64  the dependency-free parts cross-compiled for Grace hosts, checked
#            to be aarch64 objects.
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
    ;;
*) echo "unknown kind $KIND"; exit 2 ;;
esac
summary
