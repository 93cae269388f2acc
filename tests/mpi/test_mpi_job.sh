#!/usr/bin/env bash
# test_mpi_job.sh K3 PROBE MPIRUN... - `mpirun -np 2` smoke tests: the binary's
# topology and config checks on two ranks, and the fatal path: a failure on
# rank 1 ends the whole job (no hang), non-zero, with a message naming rank 1.
set -u
K3=$1; PROBE=$2; shift 2
MPIRUN=("$@")
. "$(dirname "$0")/../cli/harness.sh"

run2() { timeout 120 "${MPIRUN[@]}" -np 2 "$@" 2>&1; }

out=$(run2 "$K3" config --config "$ROOT/configs/deploy/tiny-2rank.cfg"); rc=$?
check "2-rank config exits 0" "$rc" 0
check_contains "topology line" "$out" "job: 2 ranks on 1 node; tp 1 x adp 2"
check_contains "rank 1 reports" "$out" "rank 1: node 0, local rank 1 of 2"
check_contains "rank-tagged log lines" "$out" "k3 r0/2 "
check "the config is printed once (rank 0)" "$(grep -c '^parallel = {' <<<"$out")" 1

out=$(run2 "$K3" config --config "$ROOT/configs/deploy/tiny.cfg"); rc=$?
check "layout/world mismatch exits 2" "$rc" 2
check_contains "mismatch message" "$out" "parallel.tp (1) * parallel.adp (1) = 1 ranks, but the job has 2"

out=$(run2 "$K3" config --config "$ROOT/tests/configs/bad/unknown-key.cfg"); rc=$?
check "bad config on 2 ranks exits 2" "$rc" 2
check "bad config reported once" "$(grep -c "unknown key 'server.prot'" <<<"$out")" 1

out=$(run2 "$K3" config --config "$ROOT/configs/deploy/tiny.cfg" --adp 2 --log-level debug); rc=$?
check "--adp 2 fixes the layout" "$rc" 0

out=$(K3_BIN="$K3" MPIRUN_ARGS="--allow-run-as-root" timeout 120 "$ROOT/jobs/mpirun.sh" "$ROOT/configs/deploy/tiny-2rank.cfg" config 2>&1); rc=$?
check "jobs/mpirun.sh starts tp*adp ranks" "$rc" 0
check_contains "jobs/mpirun.sh layout" "$out" "job: 2 ranks on 1 node; tp 1 x adp 2"
out=$(K3_BIN="$K3" "$ROOT/jobs/mpirun.sh" "$ROOT/tests/configs/bad/zero-tp.cfg" config 2>&1); rc=$?
check "jobs/mpirun.sh refuses a bad config" "$rc" 2
check_contains "jobs/mpirun.sh says why" "$out" "parallel.tp = 0 is out of range"

out=$(run2 "$PROBE" ok); rc=$?
check "probe without failure exits 0" "$rc" 0
check_contains "probe finished" "$out" "probe finished cleanly"

for mode in fatal mpi h5; do
    start=$(date +%s)
    out=$(run2 "$PROBE" "$mode"); rc=$?
    took=$(( $(date +%s) - start ))
    check "$mode on rank 1: job fails" "$([ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && echo failed)" failed
    check_contains "$mode: names rank 1" "$out" "FATAL rank 1 on"
    check_contains "$mode: says where" "$out" "fatal_probe.c:"
    check "$mode: no hang (took ${took}s)" "$([ "$took" -lt 60 ] && echo fast)" fast
done
out=$(timeout 120 "${MPIRUN[@]}" -np 4 "$PROBE" mismatch 2>&1); rc=$?
check "config mismatch on 4 ranks fails the job" "$([ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && echo failed)" failed
check_contains "config mismatch names the rank" "$out" "1 rank disagrees with rank 0 about the deployment configuration: rank 3 on"
check_contains "mpi mode names the MPI error" "$(run2 "$PROBE" mpi)" "MPI error"
check_contains "h5 mode prints the HDF5 failure" "$(run2 "$PROBE" h5)" "HDF5 call failed"
check_contains "fatal mode carries the message" "$(run2 "$PROBE" fatal)" "injected failure in fatal mode"

summary
