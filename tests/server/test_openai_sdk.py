#!/usr/bin/env python3
"""test_openai_sdk.py - `mpirun -np 2 k3 serve` on a synthetic k3-tiny-chat, driven by the
official openai Python SDK and by raw HTTP where the SDK would hide what is checked.

A random tiny model writes gibberish, so answers are checked for shape and consistency, not
content: chat, streaming with include_usage, tools, usage, logprobs, errors (SDK exception
classes and status codes), streamed == non-streamed for the same seeded request, every KVV
rule of kvv_rules.json with and without stream (status and error body before any SSE byte),
401/404/405/413, a client that disconnects mid-stream frees its KDA slot and MLA blocks
(/metrics), /metrics parses as Prometheus text (prometheus_client's parser, and promtool
when installed), /v1/completions, and SIGTERM to the ranks ends in-flight requests and
exits 0 on both ranks.

usage: test_openai_sdk.py K3 MPIRUN CONFIG MODEL_CONFIG TOKENIZER_DIRS WORKDIR"""
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import openai
from prometheus_client.parser import text_string_to_metric_families

K3, MPIRUN, CONFIG, MODEL_CONFIG, TOK_DIRS, WORK = sys.argv[1:7]
HERE = os.path.dirname(os.path.abspath(__file__))
KEY = "test-key-123"
MODEL = "k3-tiny-chat"
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"CHECK failed: {what}", file=sys.stderr)
    return cond


class Server:
    def __init__(self, extra=()):
        self.log_path = os.path.join(WORK, "serve.log")
        self.log = open(self.log_path, "w")
        cmd = MPIRUN.split() + ["-np", "2", K3, "serve", "--model", os.path.join(WORK, MODEL), "--config", CONFIG,
                                "--port", "0", "--api-key", KEY, "--set", "server.max_body_bytes=64KiB",
                                "--set", "server.shutdown_grace_s=3", *extra]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.port = None
        t0 = time.time()
        while time.time() - t0 < 120 and self.port is None:
            if self.proc.poll() is not None:
                raise SystemExit(f"k3 serve exited {self.proc.returncode}:\n" + open(self.log_path).read())
            m = re.search(r"on http://127\.0\.0\.1:(\d+)", open(self.log_path).read())
            if m:
                self.port = int(m.group(1))
            time.sleep(0.1)
        if self.port is None:
            raise SystemExit("k3 serve did not start:\n" + open(self.log_path).read())

    def ranks(self):
        out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(self.proc.pid)], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def call(srv, method, path, body=None, headers=None, key=KEY, raw=None):
    """One request; returns (status, headers, body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = f"Bearer {key}"
    h.update(headers or {})
    data = raw if raw is not None else (json.dumps(body) if body is not None else None)
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    out = (r.status, dict(r.getheaders()), r.read())
    c.close()
    return out


def metrics(srv):
    status, _, body = call(srv, "GET", "/metrics", key=None)
    vals = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            vals[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return body.decode(), vals


def metric(vals, name, **labels):
    return vals.get((name, tuple(sorted(labels.items()))))


def test_chat(client):
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hello!"}], max_tokens=6,
                                       seed=1)
    c = r.choices[0]
    u = r.usage
    check(r.object == "chat.completion" and r.model == MODEL and r.id.startswith("chatcmpl-"), f"chat object {r}")
    check(c.finish_reason in ("stop", "length") and c.message.role == "assistant", f"choice {c}")
    check(u.completion_tokens <= 6 and u.total_tokens == u.prompt_tokens + u.completion_tokens, f"usage {u}")
    check(u.prompt_tokens_details.cached_tokens == 0, "cached_tokens 0")
    check(0 <= u.completion_tokens_details.reasoning_tokens <= u.completion_tokens, "reasoning tokens")
    # K3 semantics: the rendered prompt's ids minus the 3-id generation stub
    st, _, body = call(srv, "POST", "/tokenize", {"messages": [{"role": "user", "content": "Hello!"}]})
    tk = json.loads(body)
    check(st == 200 and tk["count"] - 3 == u.prompt_tokens == tk["prompt_tokens"], f"prompt_tokens {u.prompt_tokens} vs {tk}")
    # thinking on by default: the answer so far is reasoning
    extra = c.message.model_extra or {}
    check(isinstance(extra.get("reasoning_content", ""), str), "reasoning_content is a string")
    r = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=4)
    check(r.object == "text_completion" and isinstance(r.choices[0].text, str) and r.usage.completion_tokens <= 4,
          f"completions {r}")
    models = client.models.list()
    check([m.id for m in models.data] == [MODEL], f"models {models}")


def collect(stream):
    """Rebuilds a streamed answer the way an OpenAI client does."""
    out = {"reasoning": "", "content": "", "calls": {}, "finish": None, "usage": None, "logprobs": [], "roles": []}
    for ch in stream:
        if ch.usage is not None:
            out["usage"] = ch.usage
            check(ch.choices == [], "the usage chunk has no choices")
        for c in ch.choices:
            d = c.delta
            if d.role:
                out["roles"].append(d.role)
            extra = d.model_extra or {}
            out["reasoning"] += extra.get("reasoning_content") or ""
            out["content"] += d.content or ""
            for t in d.tool_calls or []:
                call = out["calls"].setdefault(t.index, {"id": None, "name": None, "arguments": ""})
                call["id"] = t.id or call["id"]
                if t.function:
                    call["name"] = t.function.name or call["name"]
                    call["arguments"] += t.function.arguments or ""
            if c.logprobs and c.logprobs.content:
                out["logprobs"] += [(lp.token, round(lp.logprob, 5)) for lp in c.logprobs.content]
            if c.finish_reason:
                out["finish"] = c.finish_reason
    return out


TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]


def test_stream_equals_whole(client):
    for thinking in (True, False):
        req = dict(model=MODEL, messages=[{"role": "user", "content": "What is the weather in Paris?"}], tools=TOOLS,
                   temperature=1.0, seed=1234, max_tokens=12, logprobs=True, top_logprobs=2,
                   extra_body={"thinking": {"type": "enabled" if thinking else "disabled"}})
        w = client.chat.completions.create(**req)
        s = collect(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **req))
        m = w.choices[0].message
        check(s["roles"] == ["assistant"], f"one role delta {s['roles']}")
        check(s["reasoning"] == ((m.model_extra or {}).get("reasoning_content") or ""), "reasoning streamed == whole")
        check(s["content"] == (m.content or ""), f"content streamed {s['content']!r} == whole {m.content!r}")
        calls = [{"id": t.id, "name": t.function.name, "arguments": t.function.arguments} for t in m.tool_calls or []]
        check([s["calls"][i] for i in sorted(s["calls"])] == calls, "tool calls streamed == whole")
        check(s["finish"] == w.choices[0].finish_reason, f"finish {s['finish']} == {w.choices[0].finish_reason}")
        check(s["usage"] is not None and s["usage"].model_dump() == w.usage.model_dump(), "usage streamed == whole")
        whole_lp = [(lp.token, round(lp.logprob, 5)) for lp in w.choices[0].logprobs.content]
        check(s["logprobs"] == whole_lp and len(whole_lp) == w.usage.completion_tokens, "logprobs streamed == whole")
        check(all(len(lp.top_logprobs) == 2 and lp.logprob <= 0 for lp in w.choices[0].logprobs.content), "top_logprobs")
        if not thinking:
            check(w.usage.completion_tokens_details.reasoning_tokens == 0, "no reasoning tokens without thinking")
        for c in calls:  # a random model rarely calls; when it does, the call is well-formed
            check(c["name"] == "get_weather" and c["id"].startswith("call_"), f"call {c}")
    # a different seed changes a sampled answer (the seed reaches the sampler)
    a = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], temperature=1.0, seed=1,
                                       max_tokens=8, logprobs=True)
    b = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], temperature=1.0, seed=2,
                                       max_tokens=8, logprobs=True)
    check([t.token for t in a.choices[0].logprobs.content] != [t.token for t in b.choices[0].logprobs.content],
          "seeds 1 and 2 give different samples")


def test_tools(client):
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Weather in Paris?"}],
                                       tools=TOOLS, tool_choice="required", max_tokens=4)
    check(r.choices[0].finish_reason in ("stop", "length", "tool_calls"), f"tools finish {r.choices[0].finish_reason}")
    # a conversation with a call and its result renders and runs
    msgs = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
                "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
    r = client.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS, max_tokens=3,
                                       response_format={"type": "json_object"})
    check(r.usage.prompt_tokens > 20, f"tool result conversation {r.usage}")


def test_sdk_errors(client):
    def status_of(fn):
        try:
            fn()
        except openai.APIStatusError as e:
            return e.status_code, e.body
        return 200, None
    st, body = status_of(lambda: client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}],
                                                               temperature=1.5))
    check(st == 400 and body.get("param") == "temperature", f"temperature 1.5: {st} {body}")
    st, body = status_of(lambda: client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}],
                                                               n=2, stream=True))
    check(st == 400 and body.get("param") == "n", f"n=2 stream: {st} {body}")
    st, body = status_of(lambda: client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}]))
    check(st == 404 and body.get("code") == "model_not_found", f"unknown model: {st} {body}")
    bad = openai.OpenAI(base_url=client.base_url, api_key="wrong", max_retries=0)
    st, body = status_of(lambda: bad.models.list())
    check(st == 401, f"wrong key: {st}")
    try:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], top_p=0.5)
        check(False, "top_p 0.5 accepted")
    except openai.BadRequestError as e:
        check(e.status_code == 400, "BadRequestError")


def test_http_errors(srv):
    st, h, body = call(srv, "GET", "/v1/nope")
    check(st == 404 and "error" in json.loads(body), f"unknown route {st}")
    st, h, body = call(srv, "GET", "/v1/chat/completions")
    check(st == 405 and h.get("Allow") == "POST" and "error" in json.loads(body), f"GET chat {st} {h}")
    st, h, body = call(srv, "GET", "/v1/models", key=None)
    check(st == 401 and json.loads(body)["error"]["type"] == "authentication_error", f"no key {st}")
    st, h, body = call(srv, "GET", "/v1/models", key=None, headers={"x-api-key": KEY})
    check(st == 200, f"x-api-key {st}")
    st, h, body = call(srv, "GET", "/health", key=None)
    check(st == 200, f"health {st}")
    big = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x" * (70 * 1024)}]})
    st, h, body = call(srv, "POST", "/v1/chat/completions", raw=big)
    check(st == 413 and "error" in json.loads(body), f"70 KiB body {st}")
    st, h, body = call(srv, "POST", "/v1/chat/completions", raw="{\"messages\": [")
    check(st == 400 and json.loads(body)["error"]["type"] == "invalid_request_error", f"bad JSON {st}")


def kvv_cases():
    rules = json.load(open(os.path.join(HERE, "kvv_rules.json")))
    for mode in rules["modes"]:
        for kv, param in rules["params"]:
            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **mode, **kv}
            yield f"params {mode} {kv}", body, param
    for r in rules["requests"]:
        yield r["name"], dict(r["body"], model=MODEL), r["param"]


def test_kvv_rules(srv):
    n = 0
    for name, body, param in kvv_cases():
        for stream in (False, True):
            b = dict(body, max_tokens=1, stream=stream)
            if stream:
                b["stream_options"] = {"include_usage": True}
            st, h, raw = call(srv, "POST", "/v1/chat/completions", b)
            n += 1
            if param is None:
                ok = st == 200
                if stream:
                    ok = ok and h.get("Content-Type", "").startswith("text/event-stream") and raw.endswith(b"data: [DONE]\n\n")
                    usage = [json.loads(l[6:]) for l in raw.decode().split("\n") if l.startswith("data: {")][-1]
                    ok = ok and usage["choices"] == [] and usage["usage"]["completion_tokens"] == 1
                check(ok, f"{name} stream={stream}: {st} {raw[:300]!r}")
            else:
                err = json.loads(raw).get("error", {}) if h.get("Content-Type", "").startswith("application/json") else {}
                check(st == 400 and param in (err.get("param") or "") and err.get("type") == "invalid_request_error"
                      and not raw.startswith(b"data:"), f"{name} stream={stream}: {st} {raw[:300]!r}, want 400 on {param}")
    print(f"KVV rules: {n} requests through HTTP")


def test_disconnect(srv):
    _, before = metrics(srv)
    total_slots, total_blocks = metric(before, "k3_kda_slots_capacity"), metric(before, "k3_mla_blocks_capacity")
    cancelled0 = metric(before, "k3_requests_finished_total", reason="cancelled")
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    c.request("POST", "/v1/chat/completions", body=json.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": "tell me a long story"}], "max_tokens": 4000,
         "stream": True}), headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    r = c.getresponse()
    got = b""
    while got.count(b"data:") < 4:
        got += r.read1(4096)
    _, during = metrics(srv)
    check(metric(during, "k3_kda_slots_free") < total_slots, "a slot is held while streaming")
    c.sock.shutdown(2)
    c.close()
    t0 = time.time()
    while time.time() - t0 < 30:
        _, after = metrics(srv)
        if (metric(after, "k3_kda_slots_free") == total_slots and metric(after, "k3_mla_blocks_free") == total_blocks
                and metric(after, "k3_requests_active") == 0):
            break
        time.sleep(0.2)
    check(metric(after, "k3_kda_slots_free") == total_slots and metric(after, "k3_mla_blocks_free") == total_blocks,
          f"slots/blocks back after the client left: {metric(after, 'k3_kda_slots_free')}/{total_slots}, "
          f"{metric(after, 'k3_mla_blocks_free')}/{total_blocks}")
    check(metric(after, "k3_requests_finished_total", reason="cancelled") == cancelled0 + 1, "one request cancelled")
    print(f"disconnect: resources back {time.time() - t0:.2f} s after the streaming client left")
    # a non-streamed request whose client leaves while the server waits for the whole answer
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    c.request("POST", "/v1/chat/completions", body=json.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": "tell me a long story"}], "max_tokens": 4000}),
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    t0 = time.time()
    while time.time() - t0 < 30 and metric(metrics(srv)[1], "k3_requests_running") != 1:
        time.sleep(0.1)
    c.sock.shutdown(2)
    c.close()
    t0 = time.time()
    while time.time() - t0 < 30:
        _, after = metrics(srv)
        if metric(after, "k3_requests_active") == 0 and metric(after, "k3_kda_slots_free") == total_slots:
            break
        time.sleep(0.2)
    check(metric(after, "k3_kda_slots_free") == total_slots and metric(after, "k3_mla_blocks_free") == total_blocks
          and metric(after, "k3_requests_finished_total", reason="cancelled") == cancelled0 + 2,
          "a non-streamed request is cancelled when its client leaves")
    print(f"disconnect: resources back {time.time() - t0:.2f} s after the non-streaming client left")


def test_metrics(srv):
    # a long prompt sent three times: its chunks are kept on the second, found on the third
    long_prompt = " ".join(f"word{i} line{i % 7}\n" for i in range(3000))
    _, before = metrics(srv)
    counts = []
    for _ in range(3):
        st, _, body = call(srv, "POST", "/tokenize", {"prompt": long_prompt})
        check(st == 200, f"/tokenize {st}")
        counts.append(json.loads(body)["count"])
    check(counts[0] == counts[1] == counts[2], f"the same ids each time: {counts}")
    text, vals = metrics(srv)
    found = metric(vals, "k3_tokenizer_chunks_found_total") - metric(before, "k3_tokenizer_chunks_found_total")
    check(found >= 2 and metric(vals, "k3_tokenizer_chunk_bytes") > len(long_prompt),
          f"kept chunks found {found}, {metric(vals, 'k3_tokenizer_chunk_bytes')} bytes kept")
    check(metric(vals, "k3_http_requests_total", route="/v1/chat/completions", status="200") > 0, "requests counted")
    check(metric(vals, "k3_step_seconds_count") > 0 and metric(vals, "k3_generation_tokens_total") > 0, "steps, tokens")
    check(metric(vals, "k3_requests_waiting") == 0 and metric(vals, "k3_requests_running") == 0, "idle gauges")
    promtool = shutil.which("promtool")
    if promtool:
        p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
        check(p.returncode == 0, f"promtool check metrics: {p.stdout}{p.stderr}")
        print("promtool check metrics: " + ("ok" if p.returncode == 0 else "FAILED"))
    else:
        print("promtool not installed: the prometheus_client parser only")


def test_sigterm(srv):
    """SIGTERM to every rank (what srun/scancel do; mpirun itself aborts the job on SIGTERM):
    an in-flight stream still ends with [DONE], both ranks exit 0."""
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    c.request("POST", "/v1/chat/completions", body=json.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": "a long story"}], "max_tokens": 100000,
         "stream": True}), headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    r = c.getresponse()
    got = r.read1(4096)
    ranks = srv.ranks()
    check(len(ranks) == 2, f"two ranks {ranks}")
    t0 = time.time()
    for p in ranks:
        os.kill(p, signal.SIGTERM)
    while True:  # the stream ends (cancelled after the 3 s grace) instead of hanging
        b = r.read1(65536)
        if not b:
            break
        got += b
    check(got.rstrip().endswith(b"data: [DONE]"), f"stream ended with [DONE]: {got[-200:]!r}")
    rc = srv.proc.wait(timeout=60)
    check(rc == 0, f"mpirun exit {rc} (0 only when every rank exits 0)")
    log = open(srv.log_path).read()
    check("k3 serve: stopped" in log, "rank 0 logged the stop")
    print(f"SIGTERM: stopped in {time.time() - t0:.2f} s, mpirun exit {rc}")


if __name__ == "__main__":
    os.makedirs(WORK, exist_ok=True)
    model_dir = os.path.join(WORK, MODEL)
    if not os.path.exists(os.path.join(model_dir, "tokenizer_config.json")):
        subprocess.run([K3, "gen-weights", "--model-config", MODEL_CONFIG, "--out", model_dir, "--seed", "1",
                        "--tokenizer", TOK_DIRS], check=True, stdout=subprocess.DEVNULL)
    srv = Server()
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key=KEY, max_retries=0, timeout=120)
        t0 = time.time()
        for t in (test_chat, test_stream_equals_whole, test_tools, test_sdk_errors):
            t(client)
        test_http_errors(srv)
        test_kvv_rules(srv)
        test_disconnect(srv)
        test_metrics(srv)
        test_sigterm(srv)
        print(f"{time.time() - t0:.1f} s")
    finally:
        srv.kill()
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
