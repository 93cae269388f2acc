#!/usr/bin/env bash
# Runs the Anthropic fuzz targets (not part of the default test run) through run_fuzz.sh:
#   tests/frontend/fuzz/run_fuzz_anthropic.sh BUILD_DIR [RUNS] [JOBS]
#   fuzz_anthropic_req  the Messages request path (parse, validate, translate, render, encode)
#   fuzz_anthropic_sse  the Message / SSE writer over the output parser (stream == whole)
#   fuzz_http           the HTTP request path: src/server's dispatch, every route (fuzz_http.c)
# BUILD_DIR is configured as run_fuzz.sh says (clang, -DK3_FUZZ=ON, fuzzer-no-link,address,
# undefined) and has the three targets built. The request corpus is seeded with the bodies in
# anthropic_seeds/ and the KVV prompt_tokens conversations rewritten as Messages bodies
# (system messages -> system, the rest as user/assistant turns); the SSE corpus with the
# sse_* seeds. RUNS (default 10,000,000) per target.
# Last runs (2026-11-29, this shared 2-core VM, nice 19, one process each, corpus kept
# between runs; no crash, leak, timeout or stream/whole difference): fuzz_http 12.2 M
# executions (0.18 + 4.90 + 7.07 M at 877f036..e8f8e3d), fuzz_anthropic_req 6.9 M
# (1.52 + 5.41 M), fuzz_anthropic_sse 0.41 M with the final writer at 4f6385d (+0.50 M on
# earlier writers; ~400 exec/s: three parses and a JSON read-back per input). The first
# short run found a refusal whose message quoted invalid UTF-8, fixed in 16b8ad8.
# Then fuzz_anthropic_req at e9adb52, two concurrent processes on one corpus: 8.09 M
# (stopped by hand) + 6.00 M (to -runs) = 14.1 M executions, no finding.
set -euo pipefail
build=$(cd "$1" && pwd)
runs=${2:-10000000}
jobs=${3:-1}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
work=$build/fuzz-work
mkdir -p "$work/anthropic_req" "$work/anthropic_sse" "$work/http"
cp "$here"/anthropic_seeds/req_*.json "$work/anthropic_req/"
cp "$here"/anthropic_seeds/sse_* "$work/anthropic_sse/"
cases=$root/../shared/data/kvv/prompt_token_cases/cases.jsonl
if [[ -f $cases ]]; then
    python3 - "$cases" "$work/anthropic_req" <<'PY'
import json, sys
for i, line in enumerate(open(sys.argv[1])):
    req = json.loads(line)["request"]
    system, msgs = [], []
    for m in req.get("messages", []):
        c = m.get("content")
        text = c if isinstance(c, str) else "".join(p.get("text", "") for p in c or [] if isinstance(p, dict))
        if m.get("role") in ("system", "developer"):
            system.append(text)
        elif m.get("role") in ("user", "assistant"):
            msgs.append({"role": m["role"], "content": text or "."})
    if not msgs:
        continue
    body = {"model": "k3", "max_tokens": 64, "messages": msgs}
    if system:
        body["system"] = "\n".join(system)
    open(f"{sys.argv[2]}/kvv_{i}.json", "w").write(json.dumps(body))
PY
fi
# http seeds: byte 0 route, byte 1 flags (fuzz_http.c), then a body for that route
python3 - "$work/http" <<'PY'
import json, sys
bodies = [
    (0, {"model": "k3-test", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}),
    (0, {"model": "k3-test", "max_tokens": 16, "stream": True, "thinking": {"type": "adaptive"},
         "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}], "stop_sequences": ["un"],
         "messages": [{"role": "user", "content": "w?"}]}),
    (1, {"model": "k3-test", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True,
         "stream_options": {"include_usage": True}, "logprobs": True, "top_logprobs": 2}),
    (1, {"model": "k3-test", "messages": [{"role": "user", "content": "hi"}], "tool_choice": "required",
         "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]}),
    (2, {"model": "k3-test", "prompt": "Once", "max_tokens": 4}),
    (3, {"prompt": "hello"}),
    (4, {"tokens": [1, 2, 3]}),
]
for i, (route, b) in enumerate(bodies):
    for flags in (1, 2 | 4, 1 | 16, 2 | 32 | 8, 3, 0):
        open(f"{sys.argv[1]}/s{i}_{flags}", "wb").write(bytes([route, flags]) + json.dumps(b).encode())
for route in range(5, 11):
    open(f"{sys.argv[1]}/r{route}", "wb").write(bytes([route, 1]))
PY
"$here/run_fuzz.sh" "$build" "$runs" "$jobs" "anthropic_req anthropic_sse http"
