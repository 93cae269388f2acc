#!/usr/bin/env bash
# k3 render: text and --json output, stdin, and a validation error (exit 1, OpenAI error
# object). Usage: test_cli_render.sh K3 TIKTOKEN_MODEL TOKENIZER_CONFIG
set -u
K3=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
ln -s "$2" "$dir/tiktoken.model"
ln -s "$3" "$dir/tokenizer_config.json"
fails=0
check() {  # name got want
    if [[ "$2" == "$3" ]]; then echo "ok   $1"; else echo "FAIL $1: got '$2', want '$3'"; fails=$((fails + 1)); fi
}
req='{"messages": [{"role": "system", "content": "你是一个简洁、准确的助手。"}, {"role": "user", "content": "你好"}], "reasoning_effort": "none"}'
printf '%s' "$req" > "$dir/req.json"
out=$("$K3" render --tokenizer "$dir" --request "$dir/req.json" --json); rc=$?
check "render --json exit" "$rc" 0
check "render --json prompt_tokens (KVV k3_single_turn_think_off)" \
    "$(grep -o '"prompt_tokens":[0-9]*' <<<"$out")" '"prompt_tokens":36'
check "render --json prompt ends with the response stub" \
    "$(grep -c 'role=\\"assistant\\"<|sep|><|open|>response<|sep|>"' <<<"$out")" 1
out=$(printf '%s' "$req" | "$K3" render --model "$dir" --input -); rc=$?
check "render text exit" "$rc" 0
check "render text prompt_tokens" "$(grep -o '^prompt_tokens: [0-9]*' <<<"$out")" "prompt_tokens: 36"
out=$(printf '%s' '{"messages": [], "stream": true}' | "$K3" render --tokenizer "$dir" --request - 2>/dev/null); rc=$?
check "invalid request exit" "$rc" 1
check "invalid request error object" "$out" \
    '{"error":{"message":"'"'"'messages'"'"' must be a non-empty array","type":"invalid_request_error","param":"messages","code":null}}'
"$K3" render --tokenizer "$dir" >/dev/null 2>&1; rc=$?
check "missing --request is a usage error" "$rc" 2
echo "$fails failed"
[[ $fails == 0 ]]
