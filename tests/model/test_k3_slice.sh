#!/bin/bash
# test_k3_slice.sh - a full-width slice of the published Kimi K3 (embeddings,
# layer 0, final norm, lm_head; about 6.3 GB) written by `k3 gen-weights
# --layers 0-0`, read back and validated by `k3 inspect --model`, its byte
# counts checked against `k3 inspect` of the config and against the files on
# disk. Label `slow` (not in the default run).
# usage: test_k3_slice.sh K3 OUT_DIR PYTHON
source "$(dirname "$0")/../cli/harness.sh"
K3=$1
OUT=$2
PY=$3
CFG=$ROOT/../shared/data/kimi-k3/config.json
rm -rf "$OUT" && mkdir -p "$OUT"
json() { "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {'d': d}))" "$@"; }

t0=$(date +%s.%N)
gen=$("$K3" gen-weights --model-config "$CFG" --out "$OUT/k3" --layers 0-0 --seed 1)
check "gen-weights exit" "$?" 0
t1=$(date +%s.%N)
"$K3" inspect --model "$OUT/k3" --json > "$OUT/slice.json"
check "inspect --model exit (validates every tensor)" "$?" 0
t2=$(date +%s.%N)
"$K3" inspect --model-config "$CFG" --json > "$OUT/full.json"
echo "$gen"

check "slice range" "$(json "$OUT/slice.json" "(d['layer_lo'], d['layer_hi'])")" "(0, 0)"
check "stored = expected bytes" "$(json "$OUT/slice.json" "d['stored_bytes'] == d['bytes']")" True
check "stored = expected per kind" \
      "$(json "$OUT/slice.json" "all(v['stored_bytes'] == v['bytes'] for v in d['kinds'].values())")" True
check "no extra tensors" "$(json "$OUT/slice.json" "d['extra_tensors']")" 0
# The slice's embedding, head and dense MLP are the full model's, byte for byte in count.
check "embedding, lm_head, dense MLP as in the full model" "$("$PY" - "$OUT/slice.json" "$OUT/full.json" <<'PYEOF'
import json, sys
s, f = (json.load(open(p)) for p in sys.argv[1:3])
print(all(s["kinds"][k]["bytes"] == f["kinds"][k]["bytes"] for k in ("embedding", "lm_head", "dense_mlp")))
PYEOF
)" True
# Files on disk: tensor bytes plus headers, as gen-weights reported.
files=$(cat "$OUT"/k3/model-*.safetensors | wc -c)
check_contains "file bytes as reported" "$gen" "($files in files)"
stored=$(json "$OUT/slice.json" "d['stored_bytes']")
check_contains "tensor bytes as reported" "$gen" "$stored bytes of tensor data"

"$PY" - "$OUT/slice.json" "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)" "$files" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"# {'kind':<15} {'tensors':>8} {'params':>14} {'bytes':>14} {'stored bytes':>14}")
for k, v in d["kinds"].items():
    print(f"  {k:<15} {v['tensors']:>8} {v['params']:>14} {v['bytes']:>14} {v['stored_bytes']:>14}")
print(f"  {'total':<15} {d['tensors']:>8} {d['params']:>14} {d['bytes']:>14} {d['stored_bytes']:>14}")
print(f"# files {int(sys.argv[4])} bytes in {d['shards']} shards; gen-weights {float(sys.argv[2]):.1f} s "
      f"({int(sys.argv[4]) / float(sys.argv[2]) / 1e6:.0f} MB/s); inspect --model (open + validate) "
      f"{float(sys.argv[3]):.2f} s")
PYEOF
summary && rm -rf "$OUT"
