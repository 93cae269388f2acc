#!/usr/bin/env bash
# test.sh - set up, build and run every default test (what CI runs).
#   1. a sanitizer build (AddressSanitizer + UBSan) runs the tests labelled
#      `asan` (parsers of untrusted input: configs, CLI, corrupt files);
#   2. the release build (-Werror) runs everything but the `slow` and `gpu`
#      labels: unit, mpi (mpirun -np 2), build (CUDA compile, aarch64 cross
#      with the tokenizer's tests under qemu).
# Slow tests: ctest --test-dir build -L slow. GPU tests: see ../shared/gpu/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
jobs=$(nproc)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1

cmake -S . -B build-asan -G Ninja -DK3_WERROR=ON -DK3_SANITIZE=address,undefined \
      -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-asan -j "$jobs"
# Open MPI's own allocations are reported as leaks at exit; leaks are not what
# this run is for (out-of-bounds, use-after-free, UB are).
ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ctest --test-dir build-asan -L asan -LE 'slow|gpu' --output-on-failure -j "$jobs"

cmake -S . -B build -G Ninja -DK3_WERROR=ON >/dev/null
cmake --build build -j "$jobs"
ctest --test-dir build -LE 'slow|gpu' --output-on-failure -j "$jobs"
