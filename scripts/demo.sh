#!/usr/bin/env bash
# demo.sh - set up, build, and run the main job on the tiny built-in model:
#   1. `k3 --help` and the effective tiny deployment configuration (2 ranks);
#   2. a synthetic k3-tiny checkpoint in the published format (`k3 gen-weights`)
#      and its summary (`k3 inspect`);
#   3. the model sharded over 4 MPI ranks (2 attention groups x TP 2, experts
#      over all 4) computing logits, checked against one rank;
#   4. the Kimi tokenizer on a sentence, when ../shared/data has the vocabulary.
# The server demo replaces step 3 once `k3 serve` exists.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cmake -S . -B build -G Ninja >/dev/null
cmake --build build -j "$(nproc)" --target k3
k3=./build/k3
out=build/demo
mkdir -p "$out"

$k3 --help
mpirun --oversubscribe -np 2 $k3 config --config configs/deploy/tiny-2rank.cfg

[ -f "$out/k3-tiny/model.safetensors.index.json" ] ||
    $k3 gen-weights --model-config configs/models/k3-tiny/config.json --out "$out/k3-tiny" --seed 1
$k3 inspect --model "$out/k3-tiny"

ids=1,17,42,300,5,8,13,21,34,55
$k3 logits --model "$out/k3-tiny" --ids $ids --decode-from 6 --out "$out/one.npy" --log-level warn
mpirun --oversubscribe -np 4 $k3 logits --model "$out/k3-tiny" --ids $ids --decode-from 6 \
    --tp 2 --adp 2 --out "$out/four.npy"
.venv/bin/python3 - "$out/one.npy" "$out/four.npy" <<'PY'
import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
print(f"logits {a.shape}: 4 ranks (tp 2 x adp 2) vs 1 rank, max|diff|/max|ref| = "
      f"{np.abs(a - b).max() / np.abs(a).max():.2e}; greedy next tokens {a.argmax(-1).tolist()}")
PY

tok=../shared/data/kimi-tokenizer
if [ -f "$tok/tiktoken.model" ]; then
    mkdir -p "$out/tokenizer"
    # install -m 644: shared/ is read-only, and a second run must overwrite the copies
    install -m 644 "$tok/tiktoken.model" ../shared/data/kimi-k3/tokenizer_config.json "$out/tokenizer/"
    $k3 tokenize --tokenizer "$out/tokenizer" --text "Kimi K3 runs on GB300 NVL72 racks."
fi
