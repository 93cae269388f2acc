#!/usr/bin/env bash
# run_multi_gpu.sh OUTDIR - issue 13 in one command: the communication layer
# over NCCL on every GPU count this machine allows (2, 4, 8: CUDA_VISIBLE_DEVICES
# subsets of one machine, one rank per GPU), with every TP x ADP shape of each.
#
#   . .gpudeps/install.sh && validation/bench/run_multi_gpu.sh OUT
#
# Per GPU count n (n <= the GPUs present):
#   test_comm_gpu nccl T   every collective exact, dispatch/combine round trip,
#                          the dense layer tensor-parallel in groups of T
#                          against one CPU rank (for every T dividing n)
#   bench_comm --comm nccl MoE dispatch/combine over all n ranks (T = n), TP
#                          all-reduce/reduce-scatter in groups of every T
# On any machine: the CPU MPI tests (comm_np*, bench_comm at tiny sizes) and
# NCCL with 1 rank. With one GPU (or STAGED=1): the host-staged MPI path with 2
# and 4 ranks sharing GPU 0 (NCCL refuses two ranks on one GPU); it takes ~4
# minutes at full sizes, so a multi-GPU run skips it. On 8 GPUs the whole
# script should fit one 10-minute call (a cold build is ~1 minute).
# OUTDIR gets one log per step, gpu.txt, topo.txt, steps.txt and results.md
# (date, GPUs, driver, every table); the exit status is the number of failed
# steps. Environment: BENCH_REPS (default 20), BUILD_DIR (default build-multi),
# BENCH_TOKENS / BENCH_TP_TOKENS (comma lists; default the full K3 sizes).
set -u
OUT=${1:?usage: run_multi_gpu.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
B=${BUILD_DIR:-build-multi}
REPS=${BENCH_REPS:-20}
TOK=${BENCH_TOKENS:-1,8,64,512,4096}
TPTOK=${BENCH_TP_TOKENS:-1,8,64,512,4096,8192}
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none"
fail=0
: >"$OUT/steps.txt"
step() { local name=$1; shift; local t0=$SECONDS; "$@" >"$OUT/$name.log" 2>&1; local rc=$?
         echo "step $name: rc=$rc ($((SECONDS - t0)) s)" | tee -a "$OUT/steps.txt"; [ $rc -eq 0 ] || fail=$((fail + 1)); }

nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv >"$OUT/gpu.txt" 2>&1
nvidia-smi topo -m >"$OUT/topo.txt" 2>&1
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
G=""; command -v ninja >/dev/null && G="-G Ninja"
step configure cmake -S . -B "$B" $G -DK3_CUDA=ON -DK3_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90
step build cmake --build "$B" -j"$(nproc)" --target test_comm test_comm_gpu bench_comm
TCG=$B/tests/mpi/test_comm_gpu
BC=$B/validation/bench/bench_comm
BARGS="--reps $REPS --tokens $TOK --tp-tokens $TPTOK"

step cpu_mpi ctest --test-dir "$B" -R '^(comm_np|bench_comm_np)' --output-on-failure
# one GPU: NCCL with one rank, the staged path with 2 and 4 ranks on GPU 0
step test_gpu_nccl_np1 env CUDA_VISIBLE_DEVICES=0 $MPIRUN -np 1 "$TCG" nccl
step bench_nccl_np1 env CUDA_VISIBLE_DEVICES=0 $MPIRUN -np 1 "$BC" --comm nccl $BARGS
for np in 2 4; do
  [ "$NGPU" -lt 2 ] || [ "${STAGED:-0}" = 1 ] || continue
  step test_gpu_staged_np$np env CUDA_VISIBLE_DEVICES=0 $MPIRUN -np $np "$TCG" staged
  step bench_staged_np$np env CUDA_VISIBLE_DEVICES=0 $MPIRUN -np $np "$BC" --comm staged $BARGS
done
# several GPUs: one rank per GPU over NCCL, every TP x ADP shape
for n in 2 4 8; do
  [ "$n" -le "$NGPU" ] || continue
  devs=$(seq -s, 0 $((n - 1)))
  for tp in 1 2 4 8; do
    [ "$tp" -le "$n" ] && [ $((n % tp)) -eq 0 ] || continue
    step test_gpu_nccl_np${n}_tp$tp env CUDA_VISIBLE_DEVICES=$devs $MPIRUN -np $n "$TCG" nccl $tp
    moe="--skip-moe"; [ "$tp" -eq "$n" ] && moe=""
    step bench_nccl_np${n}_tp$tp env CUDA_VISIBLE_DEVICES=$devs $MPIRUN -np $n "$BC" --comm nccl --tp $tp $moe $BARGS
  done
done
echo "$fail failed step(s)" | tee -a "$OUT/steps.txt"

# results.md: what ran, where, and every table
{
  echo "# k3 communication layer: run_multi_gpu.sh results"
  echo
  echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC'); source: $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD 2>/dev/null || echo ' + local changes'); $NGPU GPU(s)."
  echo
  echo '```'; cat "$OUT/gpu.txt"; echo '```'
  echo
  echo "Topology (\`nvidia-smi topo -m\`):"
  echo
  echo '```'; cat "$OUT/topo.txt"; echo '```'
  echo
  echo "NCCL $(ls /usr/lib/x86_64-linux-gnu/libnccl.so.* 2>/dev/null | sed 's/.*libnccl.so.//' | sort | tail -1), $(mpirun --version 2>/dev/null | head -1)"
  echo
  echo "## Steps"
  echo
  echo '```'; cat "$OUT/steps.txt"; echo '```'
  for f in "$OUT"/test_gpu_*.log; do
    [ -e "$f" ] || continue
    echo; echo "## $(basename "$f" .log)"; echo
    echo '```'; grep -E 'passed|failed|FAIL|dense TP|^#' "$f" | head -40; echo '```'
  done
  for f in "$OUT"/bench_*.log; do
    [ -e "$f" ] || continue
    echo; echo "## $(basename "$f" .log)"; echo
    echo '```'; grep -vE '^\s*$' "$f" | grep -vE '^(--|Primary job|mpirun|  Process|  Exit code|Per user)' | head -80; echo '```'
  done
} >"$OUT/results.md"
echo "results: $OUT/results.md"
exit $fail
