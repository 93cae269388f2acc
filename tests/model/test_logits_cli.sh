#!/bin/bash
# test_logits_cli.sh - `k3 logits` as a user runs it: the .npy files, dumps next
# to --out, prefill + decode, and exit codes (0 ok, 1 failure, 2 bad usage).
# usage: test_logits_cli.sh K3 OUT_DIR PYTHON
source "$(dirname "$0")/../cli/harness.sh"
K3=$1
OUT=$2
PY=$3
rm -rf "$OUT" && mkdir -p "$OUT"
"$K3" gen-weights --model-config "$ROOT/configs/models/k3-tiny/config.json" --out "$OUT/ck" --seed 3 >/dev/null
check "gen-weights" "$?" 0
npy() { "$PY" -c "import numpy as np,sys; a=np.load(sys.argv[1]); print(eval(sys.argv[2], {'a': a, 'np': np}))" "$@"; }

"$K3" logits --model "$OUT/ck" --ids 1,2,3,4,5 --out "$OUT/a.npy" --dump L3.mla.latent,L0.kda.beta,logits,nope 2>"$OUT/err"
check "logits exit" "$?" 0
check "logits shape" "$(npy "$OUT/a.npy" 'a.shape')" "(5, 1024)"
check "logits dtype" "$(npy "$OUT/a.npy" 'a.dtype')" "float32"
check "dump: MLA latent rows (kv_lora 64 + rope 16)" "$(npy "$OUT/a.L3.mla.latent.npy" 'a.shape')" "(5, 80)"
check "dump: KDA beta" "$(npy "$OUT/a.L0.kda.beta.npy" 'a.shape')" "(5, 4)"
check "dump: logits equal the logits file" "$(npy "$OUT/a.logits.npy" "bool((a == np.load('$OUT/a.npy')).all())")" "True"
check_contains "unknown dump name warned about" "$(cat "$OUT/err")" "1 of 4 requested intermediates do not exist"

"$K3" logits --model "$OUT/ck" --ids 1,2,3,4,5 --out "$OUT/b.npy" --decode-from 2 --dump L0.kda.beta --log-level warn
check "decode-from exit" "$?" 0
check "prefill 2 + decode 3 == prefill 5" \
      "$(npy "$OUT/b.npy" "bool(abs(a - np.load('$OUT/a.npy')).max() <= 1e-5 * abs(a).max())")" "True"
check "dumps keep token order across decode steps" "$(npy "$OUT/b.L0.kda.beta.npy" 'a.shape')" "(5, 4)"
"$K3" logits --model "$OUT/ck" --ids 7,8 --out "$OUT/c.npy" --decode-from 0 --log-level warn
check "decode-from 0 (every token a decode step)" "$?" 0

"$K3" logits --model "$OUT/ck" --out "$OUT/x.npy" 2>/dev/null
check "missing --ids is bad usage" "$?" 2
"$K3" logits --model "$OUT/ck" --ids 1,x,3 --out "$OUT/x.npy" 2>/dev/null
check "bad --ids is bad usage" "$?" 2
"$K3" logits --model "$OUT/ck" --ids 1,2 --decode-from 3 --out "$OUT/x.npy" 2>/dev/null
check "--decode-from past the end is bad usage" "$?" 2
err=$("$K3" logits --model "$OUT/ck" --ids 1,5000 --out "$OUT/x.npy" 2>&1)
check "token id outside the vocabulary fails" "$?" 1
check_contains "and says which" "$err" "token id 5000 at index 1 is outside the vocabulary"
err=$("$K3" logits --model "$OUT/nope" --ids 1 --out "$OUT/x.npy" 2>&1)
check "missing checkpoint fails" "$?" 1
summary
