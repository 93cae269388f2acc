#!/usr/bin/env bash
# test_dump_diskfull.sh - `k3 dump` onto a file system that fills up (a 1 MiB tmpfs):
# it must stop with exit 1 and a message that names the cause, leave a file that
# opens and a journal, and after the file system grows, the same command must
# finish the dump with the same datasets as a dump that never failed.
#
#   test_dump_diskfull.sh K3 PYTHON WORKDIR
#
# Needs root (mount -t tmpfs); prints a line saying so and passes otherwise.
# Prints 'N passed, N failed'.
set -u
K3=$(realpath "$1") PY=$2 WORK=$3
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
pass=0 fail=0
check() { if [ "$2" = "$3" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $1 (got '$2', want '$3')"; fi; }
mkdir -p "$WORK/full"
cd "$WORK" || exit 1
if ! mount -t tmpfs -o size=1m tmpfs "$WORK/full" 2>/dev/null; then
    echo "# cannot mount a tmpfs here (not root?): disk-full test not run"
    echo "0 passed, 0 failed"
    exit 0
fi
trap 'umount "$WORK/full" 2>/dev/null' EXIT
[ -f k3-tiny/config.json ] || "$K3" gen-weights --model-config "$ROOT/configs/models/k3-tiny/config.json" --out k3-tiny >/dev/null
"$PY" - <<'PYEOF'
import json, random
r = random.Random(11)
with open("full.jsonl", "w") as f:
    for i in range(40):
        f.write(json.dumps({"id": i, "prompt_ids": [r.randrange(1024) for _ in range(r.randint(20, 100))]}) + "\n")
PYEOF
ARGS=(dump --model k3-tiny --input full.jsonl --layers 3 --final --dtype float32 --log-level warn --threads 1
      --set dump.chunk_tokens=64 --set scheduler.max_batch_tokens=256 --set scheduler.prefill_chunk_tokens=256)
rm -f ref.h5 ref.h5.journal
"$K3" "${ARGS[@]}" --out ref.h5
check "reference dump" $? 0

out=$("$K3" "${ARGS[@]}" --out full/x.h5 2>&1); rc=$?
echo "$out" | sed 's/^/# /'
check "a full disk stops the dump with exit 1" "$rc" 1
check "the message names the cause" "$(grep -c 'No space left on device' <<<"$out")" 1
check "the message says how to go on" "$(grep -c 're-run the same command' <<<"$out")" 1
h5dump -H full/x.h5 >/dev/null 2>&1
check "the partial file opens" $? 0
check "the journal is there" "$(ls full/x.h5.journal 2>/dev/null)" "full/x.h5.journal"
echo "# journal: $(tail -n 1 full/x.h5.journal)"

mount -o remount,size=64m "$WORK/full"
"$K3" "${ARGS[@]}" --out full/x.h5
check "after the disk grows the same command finishes" $? 0
"$PY" - <<'PYEOF'
import h5py, numpy as np, sys
a, b = h5py.File("ref.h5", "r"), h5py.File("full/x.h5", "r")
keys = ["tokens", "loss_mask", "sample_offsets", "sample_ids"] + ["hidden/" + k for k in a["hidden"]]
sys.exit(0 if all(np.array_equal(a[k][:], b[k][:]) for k in keys) and int(b.attrs["complete"]) == 1 else 1)
PYEOF
check "the finished file equals a dump that never failed" $? 0
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
