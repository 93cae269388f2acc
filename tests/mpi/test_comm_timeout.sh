#!/usr/bin/env bash
# test_comm_timeout.sh TEST_COMM MPIRUN... - a rank that never joins a
# collective: the job must end within the 2 s timeout (plus start-up), non-zero,
# with the waiting ranks named and the collective's name in the message.
set -u
BIN=$1; shift
. "$(dirname "$0")/../cli/harness.sh"
for np in 2 4; do
    start=$(date +%s)
    out=$(timeout 120 "$@" -np $np "$BIN" timeout 2>&1); rc=$?
    took=$(( $(date +%s) - start ))
    check "np $np: job fails" "$([ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && echo failed)" failed
    check_contains "np $np: names the waiting rank" "$out" "FATAL rank 0 on"
    check_contains "np $np: names the collective" "$out" "waited 2 s in all_reduce for \"test.stuck\""
    check "np $np: ends well before rank 1 wakes (took ${took}s)" "$([ "$took" -lt 25 ] && echo yes)" yes
done
# a peer killed outright: mpirun or the timeout ends the job, never a hang
start=$(date +%s)
out=$(timeout 120 "$@" -np 3 "$BIN" die 2>&1); rc=$?
took=$(( $(date +%s) - start ))
check "dead peer: job fails" "$([ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && echo failed)" failed
check "dead peer: ends within the 10 s timeout (took ${took}s)" "$([ "$took" -lt 40 ] && echo yes)" yes
summary
