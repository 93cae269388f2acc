#!/usr/bin/env bash
# test_dump_kill.sh - `k3 dump` killed with SIGKILL at random points, several times,
# then re-run to the end: the datasets must equal an uninterrupted run's, and every
# partial file left by a kill must still open (h5dump -H).
#
#   test_dump_kill.sh K3 PYTHON WORKDIR NP N_KILLS MPIRUN...
#
# NP = 1 runs k3 directly; NP > 1 under MPIRUN -np NP (tp = 1, adp = NP). Each kill
# takes the whole job at once (the process group: a node going down), or, every
# third time, one rank only (the MPI launcher then ends the others). Prints
# 'N passed, N failed'. Label `slow`: about a minute on 2 cores.
#
# DUMP_KILL_GENERATE=1: the same with --generate (seeded sampling): kills land while
# replies are generated (the journal OUT.gen keeps the finished ones) and while
# states are dumped; the resumed file and the replies must equal the uninterrupted
# run's.
set -u
K3=$(realpath "$1") PY=$2 WORK=$3 NP=$4 KILLS=$5
shift 5
MPIRUN=("$@")
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
pass=0 fail=0
check() { if [ "$2" = "$3" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $1 (got '$2', want '$3')"; fi; }

mkdir -p "$WORK"
cd "$WORK" || exit 1
MODEL=$WORK/k3-tiny
[ -f "$MODEL/config.json" ] || "$K3" gen-weights --model-config "$ROOT/configs/models/k3-tiny/config.json" --out "$MODEL" >/dev/null
GEN=${DUMP_KILL_GENERATE:-0}
N_SAMPLES=160 MAX_LEN=120
[ "$GEN" = 1 ] && N_SAMPLES=48 MAX_LEN=40
GEN=$GEN N_SAMPLES=$N_SAMPLES MAX_LEN=$MAX_LEN "$PY" - <<'EOF'
import json, os, random
r = random.Random(7)
with open("kill.jsonl", "w") as f:
    for i in range(int(os.environ["N_SAMPLES"])):
        n = r.randint(5, int(os.environ["MAX_LEN"]))
        line = {"id": i, "prompt_ids": [r.randrange(1024) for _ in range(n)]}
        if os.environ["GEN"] == "1":   # replies that end at different steps
            line["stop_token_ids"] = [r.randrange(1024) for _ in range(6)]
        f.write(json.dumps(line) + "\n")
EOF
ARGS=(dump --model "$MODEL" --input kill.jsonl --layers 0,4,8 --final --log-level warn --threads 1
      --set dump.chunk_tokens=48 --set scheduler.max_batch_tokens=160 --set scheduler.prefill_chunk_tokens=160)
[ "$GEN" = 1 ] && ARGS+=(--generate --temperature 1 --max-tokens 16 --seed 5)
launch() {   # launch OUT: runs the dump in its own process group, prints nothing
    if [ "$NP" = 1 ]; then setsid "$K3" "${ARGS[@]}" --out "$1" >/dev/null 2>>log.txt &
    else setsid "${MPIRUN[@]}" -np "$NP" "$K3" "${ARGS[@]}" --adp "$NP" --out "$1" >/dev/null 2>>log.txt &
    fi
    echo $!
}

rm -f ref.h5 ref.h5.* kill.h5 kill.h5.* log.txt
t0=$(date +%s.%N)
# The uninterrupted run uses the same layout: with several ranks the sharded forward
# adds partial sums in its own (fixed) order, so only the same layout is bit-identical.
if [ "$NP" = 1 ]; then "$K3" "${ARGS[@]}" --out ref.h5 2>>log.txt
else "${MPIRUN[@]}" -np "$NP" "$K3" "${ARGS[@]}" --adp "$NP" --out ref.h5 2>>log.txt
fi
check "uninterrupted run" $? 0
t1=$(date +%s.%N)
full=$("$PY" -c "print(max(0.5, $t1 - $t0))")
echo "# uninterrupted run: ${full}s"

landed=0
for i in $(seq 1 "$KILLS"); do
    pid=$(launch kill.h5)
    # with --generate, up to 0.6 of the run: kills land in generation and in the dump
    delay=$("$PY" -c "import random; print(round(random.uniform(0.2, $full * ($GEN == 1 and 0.6 or 0.25)), 2))")
    sleep "$delay"
    if kill -0 "$pid" 2>/dev/null; then
        landed=$((landed + 1))
        if [ $((i % 3)) = 0 ] && [ "$NP" != 1 ]; then
            victim=$(pgrep -g "$pid" -x k3 | shuf -n 1)
            [ -n "$victim" ] && kill -KILL "$victim"
            sleep 1
        fi
        kill -KILL -- "-$pid" 2>/dev/null
    fi
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    committed=$(tail -n 1 kill.h5.journal 2>/dev/null | tr -d '\n')
    replies=$(grep -c '^reply ' kill.h5.gen 2>/dev/null)
    echo "# kill $i after ${delay}s: journal says '${committed:-nothing}'${replies:+, $replies replies in OUT.gen}"
    if [ -f kill.h5 ]; then
        h5dump -H kill.h5 >/dev/null 2>&1
        check "partial file after kill $i opens" $? 0
    fi
done
if [ "$NP" = 1 ]; then "$K3" "${ARGS[@]}" --out kill.h5 2>>log.txt
else "${MPIRUN[@]}" -np "$NP" "$K3" "${ARGS[@]}" --adp "$NP" --out kill.h5 2>>log.txt
fi
check "final resumed run" $? 0
check "journal removed" "$(ls kill.h5.journal 2>/dev/null)" ""
"$PY" - <<'EOF'
import h5py, numpy as np, sys
a, b = h5py.File("ref.h5", "r"), h5py.File("kill.h5", "r")
keys = ["tokens", "loss_mask", "sample_offsets", "sample_ids"] + ["hidden/" + k for k in a["hidden"]]
bad = [k for k in keys if not np.array_equal(a[k][:], b[k][:])]
print("# datasets compared:", ", ".join(keys))
gen_same = True
try:
    ga = sorted(l for l in open("ref.h5.gen") if l.startswith("reply "))
    gb = sorted(l for l in open("kill.h5.gen") if l.startswith("reply "))
    gen_same = ga == gb
    print(f"# OUT.gen: {len(ga)} replies, the same in both runs: {gen_same}")
except FileNotFoundError:
    pass
sys.exit(1 if bad or not gen_same or int(b.attrs["complete"]) != 1 else 0)
EOF
check "resumed datasets equal the uninterrupted run's" $? 0
h5dump kill.h5 >/dev/null 2>&1
check "h5dump reads the whole file" $? 0
echo "# $landed of $KILLS kills landed while the dump was running"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
