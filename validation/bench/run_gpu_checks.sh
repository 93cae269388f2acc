#!/usr/bin/env bash
# run_gpu_checks.sh OUTDIR - everything the CUDA backend needs checked on the
# GPU machine, in one go (the machine is lent by the minute): build with CUDA,
# the `gpu` CTest label (op tests, fatal paths, NCCL and staged communicators),
# compute-sanitizer memcheck over the op cases, and the op benchmark.
# Logs land in OUTDIR; the exit status is the number of failed steps.
# Run from the source root after `. .gpudeps/install.sh` (../shared/gpu/README.md).
set -u
OUT=${1:?usage: run_gpu_checks.sh OUTDIR}
mkdir -p "$OUT"
fail=0
step() { local name=$1; shift; local t0=$SECONDS; "$@" >"$OUT/$name.log" 2>&1; local rc=$?
         echo "step $name: rc=$rc ($((SECONDS - t0)) s)" | tee -a "$OUT/steps.txt"; [ $rc -eq 0 ] || fail=$((fail + 1)); }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv >"$OUT/gpu.txt" 2>&1
G=""; command -v ninja >/dev/null && G="-G Ninja"
step configure cmake -S . -B build-gpu $G -DK3_CUDA=ON -DK3_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90
step build cmake --build build-gpu -j"$(nproc)" --target test_cuda_ops test_comm_gpu k3_bench_cuda_ops test_comm
step ctest_gpu ctest --test-dir build-gpu -V -L gpu -E '^cuda_ops$'
step ctest_comm ctest --test-dir build-gpu -R '^comm_np' --output-on-failure
step cuda_ops build-gpu/tests/kernels/test_cuda_ops
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
step bench build-gpu/kernels/cuda/k3_bench_cuda_ops
step memcheck timeout "${MEMCHECK_TIMEOUT_S:-300}" "$SAN" --tool memcheck --leak-check full --error-exitcode 9 build-gpu/tests/kernels/test_cuda_ops ops
echo "$fail failed step(s)" | tee -a "$OUT/steps.txt"
exit $fail
