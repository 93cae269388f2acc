#!/bin/bash
# test_gen_weights_cli.sh - `k3 gen-weights` and `k3 inspect` as a user runs them:
# outputs, files, exit codes (0 ok, 1 failure, 2 bad usage or input).
# usage: test_gen_weights_cli.sh K3 OUT_DIR PYTHON
source "$(dirname "$0")/../cli/harness.sh"
K3=$1
OUT=$2
PY=$3
SHARED=$ROOT/../shared
CFG=$ROOT/configs/models/k3-tiny/config.json
rm -rf "$OUT" && mkdir -p "$OUT"
json() { "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {'d': d}))" "$@"; }

# A k3-tiny checkpoint with the tokenizer files, in 4 shards.
out=$("$K3" gen-weights --model-config "$CFG" --out "$OUT/t" --seed 5 --shard-bytes 3000000 \
      --tokenizer "$SHARED/data/kimi-tokenizer,$SHARED/data/kimi-k3" 2>&1)
check "gen-weights exit" "$?" 0
check_contains "gen-weights summary" "$out" "4 shards, 1002 tensors, 6932448 parameters"
cmp -s "$CFG" "$OUT/t/config.json"; check "config.json copied byte for byte" "$?" 0
cmp -s "$SHARED/data/kimi-tokenizer/tiktoken.model" "$OUT/t/tiktoken.model"; check "tiktoken.model copied" "$?" 0
cmp -s "$SHARED/data/kimi-k3/tokenizer_config.json" "$OUT/t/tokenizer_config.json"; check "tokenizer_config.json copied" "$?" 0
check "shard files" "$(ls "$OUT/t" | grep -c '^model-0000[1-4]-of-00004.safetensors$')" 4

# Regenerating into the same directory with another shard count leaves no stale shards.
"$K3" gen-weights --model-config "$CFG" --out "$OUT/t2" --shard-bytes 3000000 > /dev/null
"$K3" gen-weights --model-config "$CFG" --out "$OUT/t2" > /dev/null
check "stale shards removed" "$(ls "$OUT/t2" | grep -c 'safetensors$')" 1
"$K3" gen-weights --model-config "$OUT/t2/config.json" --out "$OUT/t2" > /dev/null
cmp -s "$CFG" "$OUT/t2/config.json"; check "regenerating in place keeps config.json" "$?" 0
"$K3" inspect --model "$OUT/t2" > /dev/null; check "regenerated checkpoint valid" "$?" 0

# inspect --model validates and counts what is stored; --model-config counts the config.
"$K3" inspect --model "$OUT/t" --json > "$OUT/inspect.json"
check "inspect --model exit" "$?" 0
check "stored bytes = expected bytes" "$(json "$OUT/inspect.json" "d['stored_bytes'] == d['bytes'] == 9265600")" True
check "stored per kind" "$(json "$OUT/inspect.json" "all(v['stored_bytes'] == v['bytes'] for v in d['kinds'].values())")" True
check "no extra tensors" "$(json "$OUT/inspect.json" "d['extra_tensors']")" 0
check "layer pattern" "$(json "$OUT/inspect.json" "d['layer_pattern']")" KKKMKKKMM
"$K3" inspect --model-config "$CFG" --json > "$OUT/inspect_cfg.json"
check "config counts = checkpoint counts" \
      "$(json "$OUT/inspect_cfg.json" "(d['params'], d['bytes'], d['tensors'])")" "(6932448, 9265600, 1002)"
text=$("$K3" inspect --model "$OUT/t")
check_contains "inspect text: table" "$text" "routed_experts"
check_contains "inspect text: checkpoint line" "$text" "every tensor the config implies is present"

# The published K3 config: the published totals.
text=$("$K3" inspect --model-config "$SHARED/data/kimi-k3/config.json")
check_contains "K3 params" "$text" "2.7795 T total (2779484478208)"
check_contains "K3 active" "$text" "104.19 B without the embedding table"
check_contains "K3 experts on disk" "$text" "routed experts  1.4465 TB"
check_contains "K3 pattern" "$text" "Ke Ke Ke Me|Ke"

# A layer slice: inspect finds the range from the tensor names.
"$K3" gen-weights --model-config "$CFG" --out "$OUT/slice" --layers 1-2 --seed 5 > /dev/null
check "slice exit" "$?" 0
"$K3" inspect --model "$OUT/slice" --json > "$OUT/slice.json"
check "slice inspect" "$(json "$OUT/slice.json" "(d['layer_lo'], d['layer_hi'], d['stored_bytes'] == d['bytes'])")" "(1, 2, True)"
check "slice has no dense MLP" "$(json "$OUT/slice.json" "'dense_mlp' in d['kinds']")" False
# Same seed, same tensor bytes whatever the slice: layer 1's router in both.
check "slice bytes = full bytes" "$("$PY" - "$OUT/t" "$OUT/slice" <<'PYEOF'
import json, sys
def tensor(d, name):
    idx = json.load(open(f"{d}/model.safetensors.index.json"))["weight_map"]
    raw = open(f"{d}/{idx[name]}", "rb").read()
    n = int.from_bytes(raw[:8], "little"); h = json.loads(raw[8:8 + n]); b, e = h[name]["data_offsets"]
    return raw[8 + n + b: 8 + n + e]
name = "language_model.model.layers.1.block_sparse_moe.gate.weight"
print(tensor(sys.argv[1], name) == tensor(sys.argv[2], name))
PYEOF
)" True

# Bad usage and bad input: exit 2 with a message.
err=$("$K3" gen-weights --model-config "$CFG" 2>&1); check "no --out" "$?" 2
check_contains "no --out message" "$err" "--out DIR are required"
err=$("$K3" gen-weights --model-config "$CFG" --out "$OUT/x" --layers 3-1 2>&1); check "bad range" "$?" 2
check_contains "bad range message" "$err" "range A-B"
err=$("$K3" gen-weights --model-config "$CFG" --out "$OUT/x" --layers 0-9 2>&1); check "range past the end" "$?" 2
check_contains "range message" "$err" "outside 0-8"
err=$("$K3" gen-weights --model-config "$OUT/nonexistent.json" --out "$OUT/x" 2>&1); check "missing config" "$?" 2
check_contains "missing config message" "$err" "cannot open"
err=$("$K3" gen-weights --model-config "$CFG" --out "$OUT/x" --tokenizer "$OUT" 2>&1); check "bad tokenizer dir" "$?" 2
check_contains "tokenizer message" "$err" "no tiktoken.model there"
check "nothing written on bad input" "$(test -e "$OUT/x" && echo yes || echo no)" no
err=$("$K3" gen-weights --model-config "$CFG" --out "$OUT/x" --seed -1 2>&1); check "bad seed" "$?" 2
err=$("$K3" inspect 2>&1); check "inspect without input" "$?" 2
check_contains "inspect usage" "$err" "--model DIR or --model-config"
err=$("$K3" inspect --model "$OUT" 2>&1); check "inspect non-checkpoint" "$?" 2
check_contains "inspect non-checkpoint message" "$err" "config.json: cannot open"
truncate -s -100 "$OUT/t/model-00003-of-00004.safetensors"
err=$("$K3" inspect --model "$OUT/t" 2>&1); check "inspect truncated" "$?" 2
check_contains "inspect truncated message" "$err" "model-00003-of-00004.safetensors: truncated shard: tensor language_model."
# Unwritable output: a runtime failure (1), not a usage error.
touch "$OUT/file"
err=$("$K3" gen-weights --model-config "$CFG" --out "$OUT/file/sub" 2>&1); check "unwritable out" "$?" 1

summary && rm -rf "$OUT"
