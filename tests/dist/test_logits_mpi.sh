#!/usr/bin/env bash
# test_logits_mpi.sh K3 PYTHON CONFIGS OUT MPIRUN... - `k3 logits` as a user
# runs it under mpirun: every layout gives the single-rank logits (numpy
# compares, 1e-5 of max|ref|) and the same greedy tokens; a rank given a
# broken shard, or started with other flags, ends the whole job naming it.
set -u
K3=$1; PY=$2; CONFIGS=$3; OUT=$4; shift 4
MPIRUN=("$@")
. "$(dirname "$0")/../cli/harness.sh"
mkdir -p "$OUT"
ck="$OUT/k3-tiny"
[ -f "$ck/model.safetensors.index.json" ] ||
    "$K3" gen-weights --model-config "$CONFIGS/k3-tiny/config.json" --out "$ck" --seed 5 --shard-bytes 2000000 >/dev/null 2>&1
ids=3,17,200,5,999,64,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,500,600,700
"$K3" logits --model "$ck" --ids $ids --decode-from 20 --out "$OUT/ref.npy" 2>/dev/null
check "single-rank logits" "$?" 0

for layout in "2 1" "1 2" "2 2" "1 4" "4 1"; do
    set -- $layout
    np=$(( $1 * $2 ))
    rm -f "$OUT/dist.npy"
    out=$(timeout 300 "${MPIRUN[@]}" -np $np "$K3" logits --model "$ck" --ids $ids --decode-from 20 \
          --tp $1 --adp $2 --comm mpi --out "$OUT/dist.npy" 2>&1); rc=$?
    check "k3 logits --tp $1 --adp $2 on $np ranks" "$rc" 0
    [ $rc -eq 0 ] || echo "$out" | tail -5 >&2
    check_contains "tp $1 adp $2: per-rank weight bytes logged" "$out" "rank $((np - 1)) (group"
    cmp=$("$PY" - "$OUT/ref.npy" "$OUT/dist.npy" <<'PYEOF'
import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
rel = np.abs(a - b).max() / np.abs(a).max()
same = (a.argmax(-1) == b.argmax(-1)).all()
print("ok" if a.shape == b.shape and rel <= 1e-5 and same else f"bad rel={rel} same_argmax={same}")
PYEOF
)
    check "tp $1 adp $2: logits equal one rank's" "$cmp" ok
done

out=$(timeout 120 "${MPIRUN[@]}" -np 4 "$K3" logits --model "$ck" --ids 1,2 --out "$OUT/x.npy" --tp 3 2>&1); rc=$?
check "tp 3 on 4 ranks -> exit 2" "$rc" 2
check_contains "layout message" "$out" "parallel.tp (3) * parallel.adp (1) = 3 ranks, but the job has 4"

# A rank with a broken shard: all ranks end, non-zero, within the timeout, the rank named.
bad="$OUT/k3-tiny-broken"
rm -rf "$bad"; cp -r "$ck" "$bad"
shard=$(ls "$bad"/model-*.safetensors | tail -1)
truncate -s $(( $(stat -c %s "$shard") / 2 )) "$shard"
start=$(date +%s)
out=$(timeout 120 "${MPIRUN[@]}" -np 3 "$K3" logits --model "$ck" --ids 1,2 --out "$OUT/x.npy" --adp 4 : \
      -np 1 "$K3" logits --model "$bad" --ids 1,2 --out "$OUT/x.npy" --adp 4 2>&1); rc=$?
took=$(( $(date +%s) - start ))
check "broken shard on rank 3: the job fails" "$([ $rc -ne 0 ] && [ $rc -ne 124 ] && echo failed)" failed
check_contains "broken shard: names the rank" "$out" "FATAL rank 3 on"
check_contains "broken shard: says what" "$out" "could not load its shard"
check "broken shard: no hang (${took}s)" "$([ $took -lt 60 ] && echo fast)" fast

# A rank started with other flags: rank 0 names it before anything runs.
out=$(timeout 120 "${MPIRUN[@]}" -np 3 "$K3" logits --model "$ck" --ids 1,2 --out "$OUT/x.npy" --tp 2 --adp 2 : \
      -np 1 "$K3" logits --model "$ck" --ids 1,2 --out "$OUT/x.npy" --tp 4 --adp 1 2>&1); rc=$?
check "mismatched flags: the job fails" "$([ $rc -ne 0 ] && [ $rc -ne 124 ] && echo failed)" failed
check_contains "mismatched flags: names rank 3" "$out" "disagrees with rank 0 about the deployment configuration (flags or config file): rank 3 on"
summary
