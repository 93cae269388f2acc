#!/usr/bin/env bash
# test_generate.sh K3 CONFIGS OUT MPIRUN... - `k3 generate` through the
# scheduler on k3-tiny: 64 greedy requests of mixed lengths together equal
# each alone (scheduler.max_seqs = 1), under -np 1 and -np 4 (tp 2 x adp 2);
# a memory-starved configuration (6 MLA blocks of 16 tokens) completes them
# through preemption with the same outputs; seeded sampling (temperature,
# top-p, top-k, penalties) gives the same draws together, alone, and on
# tp 2 x adp 2; stop_token_ids end a request with finish_reason "stop".
# With K3_TOK_DIRS (the Kimi tokenizer files, "DIR,DIR"): chat requests on
# k3-tiny-chat carry the parsed reasoning_content / content / tool_calls
# (thinking on: the text is reasoning; off: content), prompt_ids ones do not.
set -u
K3=$1; CONFIGS=$2; OUT=$3; shift 3
MPIRUN_LINE="$*"
. "$(dirname "$0")/../cli/harness.sh"
mkdir -p "$OUT"
ck="$OUT/k3-tiny"
[ -f "$ck/model.safetensors.index.json" ] ||
    "$K3" gen-weights --model-config "$CONFIGS/k3-tiny/config.json" --out "$ck" --seed 3 >/dev/null 2>&1

# 64 requests, prompts of 1..60 tokens, 1..12 new tokens (a fixed LCG)
awk -v hot="$OUT/hot.jsonl" 'BEGIN { s = 7
    for (i = 0; i < 64; i++) {
        s = (s * 1103515245 + 12345) % 2147483648; n = 1 + int(s / 65536) % 60
        s = (s * 1103515245 + 12345) % 2147483648; m = 1 + int(s / 65536) % 12
        ids = ""
        for (t = 0; t < n; t++) { s = (s * 1103515245 + 12345) % 2147483648; ids = ids (t ? "," : "") int(s / 65536) % 500 }
        printf "{\"id\": \"r%d\", \"prompt_ids\": [%s], \"max_tokens\": %d}\n", i, ids, m
        printf "{\"id\": \"h%d\", \"prompt_ids\": [%s], \"max_tokens\": %d, \"temperature\": 0.8, \"top_p\": 0.9, \"top_k\": 50, \"presence_penalty\": 0.5, \"repetition_penalty\": 1.1, \"seed\": %d, \"logprobs\": true, \"top_logprobs\": 2}\n", i, ids, m, 1000 + i > hot
    } }' > "$OUT/greedy.jsonl"

ids_of() { grep -o '"output_ids":\[[^]]*\]' "$1"; }
run() { # name np out input [flags...]
    local name=$1 np=$2 out=$3 in=$4; shift 4
    log=$(timeout 600 $MPIRUN_LINE -np "$np" "$K3" generate --model "$ck" --input "$in" --out "$out" "$@" 2>&1); rc=$?
    check "$name: exit" "$rc" 0
    [ $rc -eq 0 ] || echo "$log" | tail -20 >&2
}

run "greedy together np1" 1 "$OUT/g_all.jsonl" "$OUT/greedy.jsonl"
check "64 results" "$(wc -l < "$OUT/g_all.jsonl")" 64
run "greedy alone np1" 1 "$OUT/g_one.jsonl" "$OUT/greedy.jsonl" --set scheduler.max_seqs=1
check "greedy: together == alone" "$(ids_of "$OUT/g_all.jsonl" | md5sum)" "$(ids_of "$OUT/g_one.jsonl" | md5sum)"
run "greedy together tp2 x adp2" 4 "$OUT/g_tp.jsonl" "$OUT/greedy.jsonl" --tp 2 --adp 2
check "greedy: tp2 x adp2 == np1" "$(ids_of "$OUT/g_tp.jsonl" | md5sum)" "$(ids_of "$OUT/g_all.jsonl" | md5sum)"
run "greedy starved" 1 "$OUT/g_starved.jsonl" "$OUT/greedy.jsonl" --set cache.block_tokens=16 --set cache.kv_bytes=100000
check_contains "starved: preempted" "$log" "preemptions"
check "starved: preemptions > 0" "$(grep -ao '[0-9]* preemptions$' <<<"$log" | tail -1 | grep -c '^0 ')" 0
check "greedy: starved == plenty" "$(ids_of "$OUT/g_starved.jsonl" | md5sum)" "$(ids_of "$OUT/g_all.jsonl" | md5sum)"
run "greedy starved tp2 x adp2" 4 "$OUT/g_starved_tp.jsonl" "$OUT/greedy.jsonl" --tp 2 --adp 2 --set cache.block_tokens=16 --set cache.kv_bytes=100000
check "greedy: starved tp2 x adp2 == plenty" "$(ids_of "$OUT/g_starved_tp.jsonl" | md5sum)" "$(ids_of "$OUT/g_all.jsonl" | md5sum)"

run "sampled together np1" 1 "$OUT/h_all.jsonl" "$OUT/hot.jsonl"
run "sampled alone np1" 1 "$OUT/h_one.jsonl" "$OUT/hot.jsonl" --set scheduler.max_seqs=1
run "sampled tp2 x adp2" 4 "$OUT/h_tp.jsonl" "$OUT/hot.jsonl" --tp 2 --adp 2
check "seeded: together == alone" "$(ids_of "$OUT/h_all.jsonl" | md5sum)" "$(ids_of "$OUT/h_one.jsonl" | md5sum)"
check "seeded: tp2 x adp2 == np1" "$(ids_of "$OUT/h_tp.jsonl" | md5sum)" "$(ids_of "$OUT/h_all.jsonl" | md5sum)"
check "seeded draws differ from greedy" "$(ids_of "$OUT/h_all.jsonl" | md5sum | cut -c1-8)" \
      "$( [ "$(ids_of "$OUT/h_all.jsonl" | md5sum)" == "$(ids_of "$OUT/g_all.jsonl" | md5sum)" ] && echo same || ids_of "$OUT/h_all.jsonl" | md5sum | cut -c1-8)"
check "logprobs reported" "$(grep -c '"top_logprobs":\[{' "$OUT/h_all.jsonl")" 64

# a stop id: the first greedy token of r0 as a stop id ends it after one token
first=$(head -1 "$OUT/g_all.jsonl" | grep -o '"output_ids":\[[0-9]*' | grep -o '[0-9]*$')
echo "{\"id\": 1, \"prompt_ids\": $(head -1 "$OUT/greedy.jsonl" | grep -o '\[[^]]*\]'), \"max_tokens\": 12, \"stop_token_ids\": [$first]}" > "$OUT/stop.jsonl"
run "stop id" 1 "$OUT/stop.jsonl.out" "$OUT/stop.jsonl"
check_contains "stop id: finish_reason stop" "$(cat "$OUT/stop.jsonl.out")" "\"output_ids\":[$first],\"finish_reason\":\"stop\""
if [ -n "${K3_TOK_DIRS:-}" ]; then
    chat="$OUT/k3-tiny-chat"
    [ -f "$chat/tiktoken.model" ] ||
        "$K3" gen-weights --model-config "$CONFIGS/k3-tiny-chat/config.json" --out "$chat" --seed 3 \
            --tokenizer "$K3_TOK_DIRS" >/dev/null 2>&1
    cat > "$OUT/chat.jsonl" <<'EOF2'
{"id": "think", "messages": [{"role": "user", "content": "What is two plus two?"}], "max_tokens": 12}
{"id": "plain", "messages": [{"role": "user", "content": "Weather in Paris?"}], "thinking": false, "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}], "max_tokens": 12}
{"id": "ids", "prompt_ids": [1, 2, 3], "max_tokens": 4}
EOF2
    log=$(timeout 300 $MPIRUN_LINE -np 1 "$K3" generate --model "$chat" --input "$OUT/chat.jsonl" --out "$OUT/chat.out.jsonl" 2>&1); rc=$?
    check "chat: exit" "$rc" 0
    [ $rc -eq 0 ] || echo "$log" | tail -20 >&2
    # random weights rarely emit markup: then the whole text is one channel
    got=$(python3 - "$OUT/chat.out.jsonl" <<'EOF2'
import json, sys
r = {o["id"]: o for o in map(json.loads, open(sys.argv[1]))}
t, p, i = r["think"], r["plain"], r["ids"]
ok = [all(k in t and k in p for k in ("reasoning_content", "content", "tool_calls")),
      "reasoning_content" not in i and "content" not in i,
      "<|" in t["text"] or (t["reasoning_content"] == t["text"] and t["content"] == ""),
      "<|" in p["text"] or (p["content"] == p["text"] and p["reasoning_content"] is None),
      isinstance(t["tool_calls"], list) and isinstance(p["tool_calls"], list)]
print(" ".join(str(int(x)) for x in ok))
EOF2
)
    check "chat: parsed reasoning/content/tool_calls" "$got" "1 1 1 1 1"
fi
summary
