#!/usr/bin/env bash
# demo.sh - the main job on a fresh machine: set up, build, write the synthetic k3-tiny-chat
# checkpoint with the Kimi tokenizer, serve it with `mpirun -np 2 k3 serve` on two CPU ranks,
# send one chat request with a tool through the OpenAI-compatible API (the official openai
# Python SDK), print the parsed answer, and stop the server with SIGTERM.
# The model is random: its text is gibberish. The point is the plumbing: tokenizer, K3 chat
# template, scheduler, sharded forward over MPI ranks, sampler, output parser, HTTP API.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cmake -S . -B build -G Ninja >/dev/null
cmake --build build -j "$(nproc)" --target k3
k3=./build/k3
out=build/demo
mkdir -p "$out"

tok=../shared/data/kimi-tokenizer cfg=../shared/data/kimi-k3/tokenizer_config.json
if [ ! -f "$tok/tiktoken.model" ] || [ ! -f "$cfg" ]; then
    echo "demo: the Kimi tokenizer is not in ../shared/data (tiktoken.model, tokenizer_config.json)" >&2
    exit 1
fi
# gen-weights copies the tokenizer files next to the weights, where `k3 serve` finds them
[ -f "$out/k3-tiny-chat/tokenizer_config.json" ] ||
    $k3 gen-weights --model-config configs/models/k3-tiny-chat/config.json --out "$out/k3-tiny-chat" \
        --seed 1 --tokenizer "$tok,$(dirname "$cfg")"

log=$out/serve.log
mpirun --oversubscribe -np 2 $k3 serve --model "$out/k3-tiny-chat" --config configs/deploy/tiny-2rank.cfg \
    --port 0 >"$log" 2>&1 &
mpirun_pid=$!
stop() {  # SIGTERM to every rank, as srun/scancel deliver it (mpirun itself aborts on SIGTERM)
    local ranks
    ranks=$(ps -o pid= --ppid "$mpirun_pid" || true)
    [ -n "$ranks" ] && kill -TERM $ranks 2>/dev/null || true
}
trap stop EXIT
port=
for _ in $(seq 600); do
    port=$(sed -n 's/.*serving .* on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")
    [ -n "$port" ] && break
    kill -0 "$mpirun_pid" 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.2
done
grep -E "engine:|serving" "$log"

.venv/bin/python3 - "$port" <<'PY'
import json, sys
import openai

client = openai.OpenAI(base_url=f"http://127.0.0.1:{sys.argv[1]}/v1", api_key="none")
tools = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
print("\nPOST /v1/chat/completions: 'What is the weather in Paris?' with the tool get_weather")
r = client.chat.completions.create(model="k3-tiny-chat", tools=tools, max_tokens=24, seed=1,
                                   messages=[{"role": "user", "content": "What is the weather in Paris?"}])
m = r.choices[0].message
print("(a random tiny model: the text is gibberish; the structure is what the server parsed)")
print(f"  reasoning_content: {(m.model_extra or {}).get('reasoning_content')!r}")
print(f"  content:           {m.content!r}")
print(f"  tool_calls:        {[(t.function.name, t.function.arguments) for t in m.tool_calls or []]}")
print(f"  finish_reason:     {r.choices[0].finish_reason}")
print(f"  usage:             {json.dumps(r.usage.model_dump(exclude_none=True))}")
PY

trap - EXIT
stop
wait "$mpirun_pid" && echo "server stopped on SIGTERM; every rank exited 0"
