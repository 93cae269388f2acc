#!/usr/bin/env python3
"""test_anthropic_sdk.py - POST /v1/messages of `mpirun -np 2 k3 serve` on a synthetic
k3-tiny-chat, driven by the official anthropic Python SDK (pinned in .ci/requirements.txt)
and by raw HTTP where the SDK would hide what is checked.

A random tiny model writes gibberish, so answers are checked for shape and consistency:
  - messages: the Message object, usage, ids, stop reasons (end_turn / max_tokens /
    stop_sequence with the matched string, the text cut before it);
  - one path for both APIs: the same conversation (system, tools, tool_use / tool_result
    history, thinking on and off) sent as OpenAI chat and as Anthropic messages gives the
    same prompt tokens and, seeded, the same output tokens, text and reasoning;
  - streaming: the SDK's accumulated stream equals the non-streamed Message of the same
    seeded request; raw events in order with contiguous indices; thinking streams as
    thinking_delta in block 0; a client that leaves mid-stream is cancelled (/metrics);
  - tools: tool_choice auto / any / tool / none and tool histories accepted;
  - errors: SDK exception classes and Anthropic error bodies for 400 (also for a streamed
    request: JSON before any SSE byte), 401, 404, 405, 413, and 529 overloaded_error
    from a server whose queue is full.
usage: test_anthropic_sdk.py K3 CONFIG MODEL_CONFIG TOKENIZER_DIRS WORKDIR MPIRUN..."""
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import anthropic

K3, CONFIG, MODEL_CONFIG, TOK_DIRS, WORK = sys.argv[1:6]
MPIRUN = sys.argv[6:] or ["mpirun"]
KEY = "anthropic-test-key"
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
    """mpirun -np 2 k3 serve on a free port; the port is read from its log."""

    def __init__(self, name, extra=()):
        self.log_path = os.path.join(WORK, f"serve-{name}.log")
        self.log = open(self.log_path, "w")
        cmd = MPIRUN + ["-np", "2", K3, "serve", "--model", os.path.join(WORK, MODEL), "--config", CONFIG,
                                "--port", "0", "--api-key", KEY, "--set", "server.max_body_bytes=64KiB",
                                "--set", "server.shutdown_grace_s=2", *extra]
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
        self.client = anthropic.Anthropic(api_key=KEY, base_url=f"http://127.0.0.1:{self.port}", max_retries=0,
                                          timeout=300)

    def stop(self):
        """SIGTERM to the ranks (the drain path; mpirun itself would report the signal);
        SIGKILL to everything if they do not exit."""
        if self.proc.poll() is None:
            ps = subprocess.run(["ps", "-o", "pid=", "--ppid", str(self.proc.pid)], capture_output=True, text=True)
            for pid in ps.stdout.split():
                os.kill(int(pid), signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode


def call(srv, method, path, body=None, key=KEY, raw=None, headers=None):
    """One raw request with Anthropic's headers; returns (status, headers, body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=300)
    h = {"Content-Type": "application/json", "anthropic-version": "2023-06-01"}
    if key:
        h["x-api-key"] = key
    h.update(headers or {})
    data = raw if raw is not None else (json.dumps(body) if body is not None else None)
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    out = (r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    c.close()
    return out


def anthropic_error(status, body, want_status, want_type, what):
    try:
        j = json.loads(body)
    except ValueError:
        j = None
    ok = status == want_status and isinstance(j, dict) and j.get("type") == "error" and \
        j.get("error", {}).get("type") == want_type and isinstance(j["error"].get("message"), str)
    return check(ok, f"{what}: {status} {body[:300]!r} (want {want_status} {want_type})")


def metric(srv, name):
    _, _, body = call(srv, "GET", "/metrics", key=None)
    m = re.search(rf"^{re.escape(name)} (\S+)$", body.decode(), re.M)
    return float(m.group(1)) if m else None


USER = [{"role": "user", "content": "Hello there!"}]
TOOL = {"name": "get_weather", "description": "Weather of a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def test_message(srv):
    c = srv.client
    m = c.messages.create(model=MODEL, max_tokens=6, messages=USER, extra_body={"seed": 1})
    check(isinstance(m, anthropic.types.Message), f"a Message: {type(m)}")
    check(m.id.startswith("msg_") and len(m.id) == 28 and m.type == "message" and m.role == "assistant"
          and m.model == MODEL, f"message fields {m}")
    check(m.stop_reason in ("end_turn", "max_tokens") and m.stop_sequence is None, f"stop {m.stop_reason}")
    check(all(b.type == "text" for b in m.content), f"no thinking by default: {m.content}")
    u = m.usage
    check(0 < u.output_tokens <= 6 and u.input_tokens > 0 and u.cache_read_input_tokens == 0
          and u.cache_creation_input_tokens == 0, f"usage {u}")
    check((m.stop_reason == "max_tokens") == (u.output_tokens == 6), f"max_tokens <-> 6 tokens: {m}")
    m2 = c.messages.create(model=MODEL, max_tokens=6, messages=USER, extra_body={"seed": 1})
    check(m2.content == m.content and m2.id != m.id, "seeded: the same answer, a new id")


def openai_chat(srv, body):
    st, _, b = call(srv, "POST", "/v1/chat/completions", body, headers={"Authorization": f"Bearer {KEY}"})
    check(st == 200, f"chat completions {st} {b[:300]!r}")
    return json.loads(b) if st == 200 else None


def test_same_as_openai(srv):
    """One conversation, both APIs: same prompt tokens, and seeded, the same output."""
    history_anth = [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Oslo?"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "I should call the tool.", "signature": ""},
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "Rain, 4 C"},
                                     {"type": "text", "text": "And tomorrow?"}]},
    ]
    history_openai = [
        {"role": "system", "content": "You are a weather bot."},
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "Let me check.", "reasoning_content": "I should call the tool.",
         "tool_calls": [{"id": "toolu_01", "type": "function",
                         "function": {"name": "get_weather", "arguments": json.dumps({"city": "Oslo"})}}]},
        {"role": "tool", "tool_call_id": "toolu_01", "content": "Rain, 4 C"},
        {"role": "user", "content": "And tomorrow?"},
    ]
    tool_openai = {"type": "function", "function": {"name": TOOL["name"], "description": TOOL["description"],
                                                    "parameters": TOOL["input_schema"]}}
    for thinking in (False, True):
        for seed in (3, 11):
            o = openai_chat(srv, {"model": MODEL, "messages": history_openai, "tools": [tool_openai],
                                  "max_tokens": 7, "seed": seed, "temperature": 0.9,
                                  "thinking": {"type": "enabled" if thinking else "disabled"}})
            a = srv.client.messages.create(
                model=MODEL, max_tokens=7, system="You are a weather bot.", messages=history_anth, tools=[TOOL],
                thinking={"type": "adaptive"} if thinking else {"type": "disabled"},
                extra_body={"seed": seed, "temperature": 0.9})  # anthropic 2.x has no temperature argument
            if not o:
                continue
            ou, msg = o["usage"], o["choices"][0]["message"]
            what = f"thinking={thinking} seed={seed}"
            check(ou["prompt_tokens"] == a.usage.input_tokens,
                  f"{what}: prompt tokens openai {ou['prompt_tokens']} anthropic {a.usage.input_tokens}")
            check(ou["completion_tokens"] == a.usage.output_tokens, f"{what}: completion tokens")
            text = "".join(b.text for b in a.content if b.type == "text")
            reasoning = "".join(b.thinking for b in a.content if b.type == "thinking")
            check(text == (msg.get("content") or ""), f"{what}: text {text!r} vs content {msg.get('content')!r}")
            check(reasoning == (msg.get("reasoning_content") or ""), f"{what}: reasoning")
            want = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}[o["choices"][0]["finish_reason"]]
            check(a.stop_reason == want, f"{what}: stop_reason {a.stop_reason} for {o['choices'][0]['finish_reason']}")
            if thinking:
                check(bool(a.content) and a.content[0].type == "thinking" and a.content[0].signature == "",
                      f"{what}: a thinking block first: {a.content}")


def same_message(a, b):
    """Equal but for the id (the stream's blocks are the SDK's Parsed* subclasses, whose
    extra parsed_output is None)."""
    def norm(m):
        d = json.loads(m.model_dump_json(exclude_none=True))
        d.pop("id")
        return d
    return norm(a) == norm(b)


def test_stream(srv):
    c = srv.client
    req = dict(model=MODEL, max_tokens=8, messages=USER, extra_body={"seed": 5})
    whole = c.messages.create(**req)
    with c.messages.stream(**req) as st:
        text = "".join(st.text_stream)
        final = st.get_final_message()
    check(same_message(final, whole), f"stream == whole:\n  {final}\n  {whole}")
    check(text == "".join(b.text for b in whole.content if b.type == "text"), "text_stream")
    events = list(c.messages.create(**req, stream=True))
    kinds = [e.type for e in events]
    check(kinds[0] == "message_start" and kinds[-1] == "message_stop" and kinds[-2] == "message_delta",
          f"event order {kinds}")
    check(events[0].message.usage.input_tokens == whole.usage.input_tokens, "message_start usage")
    check(events[-2].usage.output_tokens == whole.usage.output_tokens, "message_delta usage")
    idx, open_ = -1, None
    ok = True
    for e in events:
        if e.type == "content_block_start":
            ok &= open_ is None and e.index == idx + 1
            idx, open_ = e.index, e.index
        elif e.type == "content_block_delta":
            ok &= e.index == open_
        elif e.type == "content_block_stop":
            ok &= e.index == open_
            open_ = None
    check(ok and open_ is None, f"block indices contiguous, one open at a time: {kinds}")


def test_thinking(srv):
    c = srv.client
    m = c.messages.create(model=MODEL, max_tokens=5, messages=USER, thinking={"type": "adaptive"},
                          extra_body={"seed": 2})
    check(m.content and m.content[0].type == "thinking" and m.content[0].signature == "", f"thinking block {m.content}")
    check(m.stop_reason in ("max_tokens", "end_turn") and m.usage.output_tokens <= 5, f"thinking stop {m}")
    # enabled + budget: read the first events, then leave (max_tokens must exceed the budget)
    active0 = metric(srv, "k3_requests_active")
    cancelled0 = metric(srv, 'k3_requests_finished_total{reason="cancelled"}')
    seen = []
    with c.messages.stream(model=MODEL, max_tokens=2048, messages=USER,
                           thinking={"type": "enabled", "budget_tokens": 1024}) as st:
        for e in st:
            seen.append((e.type, getattr(getattr(e, "delta", None), "type", None),
                         getattr(getattr(e, "content_block", None), "type", None)))
            if len(seen) >= 6:
                break
    check(seen[0][0] == "message_start" and ("content_block_start", None, "thinking") in seen
          and ("content_block_delta", "thinking_delta", None) in seen, f"thinking stream {seen}")
    t0 = time.time()
    while time.time() - t0 < 60 and metric(srv, "k3_requests_active") != active0:
        time.sleep(0.2)
    check(metric(srv, "k3_requests_active") == active0, "a client that left is no longer active")
    check(metric(srv, 'k3_requests_finished_total{reason="cancelled"}') == cancelled0 + 1, "and was cancelled")


def test_stop_sequence(srv):
    c = srv.client
    base = dict(model=MODEL, max_tokens=16, messages=USER, extra_body={"seed": 9})
    m = c.messages.create(**base)
    text = "".join(b.text for b in m.content if b.type == "text")
    k = len(text) // 2
    stop = text[k:k + 3]
    if not check(len(stop) == 3 and stop.strip(), f"a stop string from {text!r}"):
        return
    m2 = c.messages.create(**base, stop_sequences=["never-there-xyz", stop])
    t2 = "".join(b.text for b in m2.content if b.type == "text")
    check(m2.stop_reason == "stop_sequence" and m2.stop_sequence == stop, f"stop_sequence: {m2}")
    check(t2 == text[:text.find(stop)], f"text cut before the stop: {t2!r} vs {text!r}")
    with c.messages.stream(**base, stop_sequences=[stop]) as st:
        f = st.get_final_message()
    check(f.stop_reason == "stop_sequence" and f.stop_sequence == stop and same_message(f, m2),
          f"streamed stop_sequence: {f}")


def test_tools(srv):
    c = srv.client
    hist = [{"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_x", "name": "get_weather",
                                               "input": {"city": "Oslo"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "is_error": True,
                                          "content": [{"type": "text", "text": "timeout"}]}]}]
    for tc in ({"type": "auto"}, {"type": "any"}, {"type": "tool", "name": "get_weather"}, {"type": "none"},
               {"type": "auto", "disable_parallel_tool_use": True}):
        m = c.messages.create(model=MODEL, max_tokens=3, messages=hist, tools=[TOOL], tool_choice=tc,
                              extra_body={"seed": 4})
        check(m.stop_reason in ("end_turn", "max_tokens", "tool_use"), f"tool_choice {tc}: {m.stop_reason}")
        for b in m.content:
            if b.type == "tool_use":
                check(b.id.startswith("toolu_") and isinstance(b.input, dict), f"tool_use block {b}")
    try:
        c.messages.create(model=MODEL, max_tokens=3, messages=USER, tools=[TOOL],
                          tool_choice={"type": "tool", "name": "nope"})
        check(False, "undeclared tool_choice name accepted")
    except anthropic.BadRequestError as e:
        check(e.status_code == 400 and "nope" in str(e), f"undeclared tool: {e}")


def test_errors(srv):
    c = srv.client
    bad = [
        (dict(extra_body={"temperature": 1.5}), "temperature"),
        (dict(messages=[{"role": "user", "content": [{"type": "image", "source": {
            "type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}]), "image"),
        (dict(tools=[{"name": "9bad", "input_schema": {"type": "object"}}]), "tools[0].name"),
        (dict(thinking={"type": "enabled", "budget_tokens": 10}), "budget_tokens"),
        (dict(messages=[{"role": "system", "content": "x"}]), "messages[0].role"),
    ]
    for kw, want in bad:
        req = dict(model=MODEL, max_tokens=4, messages=USER)
        req.update(kw)
        for stream in (False, True):
            try:
                if stream:
                    with c.messages.stream(**req) as st:
                        st.get_final_message()
                else:
                    c.messages.create(**req)
                check(False, f"{want}: accepted (stream={stream})")
            except anthropic.BadRequestError as e:
                check(e.status_code == 400 and want in e.message and e.body["error"]["type"] == "invalid_request_error"
                      and e.body["type"] == "error", f"{want} (stream={stream}): {e.status_code} {e.body}")
    try:
        c.messages.create(model="no-such-model", max_tokens=4, messages=USER)
        check(False, "unknown model accepted")
    except anthropic.NotFoundError as e:
        check(e.status_code == 404 and e.body["error"]["type"] == "not_found_error", f"404: {e.body}")
    wrong = anthropic.Anthropic(api_key="wrong", base_url=f"http://127.0.0.1:{srv.port}", max_retries=0)
    try:
        wrong.messages.create(model=MODEL, max_tokens=4, messages=USER)
        check(False, "wrong key accepted")
    except anthropic.AuthenticationError as e:
        check(e.status_code == 401 and e.body["error"]["type"] == "authentication_error", f"401: {e.body}")
    # what the SDK would not send
    st, h, b = call(srv, "POST", "/v1/messages", {"model": MODEL, "messages": USER, "stream": True})
    anthropic_error(st, b, 400, "invalid_request_error", "no max_tokens, streamed")
    check(h.get("content-type", "").startswith("application/json"), f"a streamed 400 is JSON: {h}")
    st, _, b = call(srv, "POST", "/v1/messages", raw=b'{"model": "k3-tiny-chat", "max_tokens": 4, "messages": [')
    anthropic_error(st, b, 400, "invalid_request_error", "truncated body")
    st, _, b = call(srv, "POST", "/v1/messages", raw=b'{"model": "\xff\xfe", "max_tokens": 4}')
    anthropic_error(st, b, 400, "invalid_request_error", "invalid UTF-8")
    deep = b'{"model": "k3-tiny-chat", "max_tokens": 4, "messages": ' + b"[" * 100000 + b"]" * 100000 + b"}"
    st, _, b = call(srv, "POST", "/v1/messages", raw=deep)
    check(st in (400, 413), f"deeply nested: {st}")
    big = json.dumps({"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "x" * 70000}]})
    st, _, b = call(srv, "POST", "/v1/messages", raw=big.encode())
    anthropic_error(st, b, 413, "request_too_large", "body over server.max_body_bytes")
    st, h, b = call(srv, "GET", "/v1/messages")
    check(st == 405 and "POST" in h.get("allow", ""), f"GET /v1/messages: {st} {h}")
    m = c.messages.create(model=MODEL, max_tokens=2, messages=USER)
    check(m.usage.output_tokens <= 2, "the server still answers after the bad requests")


def test_overloaded():
    """A server with room for 3 requests (max_queue 1 + max_seqs 1 x 2 groups): the rest get
    529 overloaded_error, before any SSE byte."""
    srv = Server("overload", ["--set", "scheduler.max_seqs=1", "--set", "scheduler.max_queue=1"])
    try:
        results = []

        def one():
            st, h, b = call(srv, "POST", "/v1/messages", {"model": MODEL, "max_tokens": 40, "messages": USER,
                                                          "stream": True})
            results.append((st, h, b))

        threads = [threading.Thread(target=one) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        codes = sorted(r[0] for r in results)
        check(len(results) == 8 and codes.count(200) >= 1 and codes.count(529) >= 1 and set(codes) <= {200, 529},
              f"overload statuses {codes}")
        for st, h, b in results:
            if st == 529:
                anthropic_error(st, b, 529, "overloaded_error", "queue full")
            else:
                check(b.rstrip().endswith(b'data: {"type":"message_stop"}'), "a full stream ends with message_stop")
        try:
            srv.client.messages.create(model=MODEL, max_tokens=1, messages=USER)
            check(True, "")
        except anthropic.APIStatusError as e:
            check(False, f"after the burst: {e}")
    finally:
        check(srv.stop() == 0, "overload server exits 0 on SIGTERM")


def main():
    os.makedirs(WORK, exist_ok=True)
    ck = os.path.join(WORK, MODEL)
    if not os.path.exists(os.path.join(ck, "tiktoken.model")):
        subprocess.run([K3, "gen-weights", "--model-config", MODEL_CONFIG, "--out", ck, "--seed", "3",
                        "--tokenizer", TOK_DIRS], check=True, stdout=subprocess.DEVNULL)
    srv = Server("main")
    try:
        for t in (test_message, test_same_as_openai, test_stream, test_thinking, test_stop_sequence, test_tools,
                  test_errors):
            t0 = time.time()
            t(srv)
            print(f"{t.__name__}: {time.time() - t0:.1f} s", flush=True)
    finally:
        check(srv.stop() == 0, "k3 serve exits 0 on SIGTERM")
    t0 = time.time()
    test_overloaded()
    print(f"test_overloaded: {time.time() - t0:.1f} s")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
