#!/usr/bin/env python3
"""check_anthropic_sdk.py - the Anthropic wire format of frontend/anthropic.h, read by the
official SDK (the `anthropic` package, pinned in .ci/requirements.txt), without a server.

test_anthropic --emit DIR writes, for every output case of its stream tests (tool calls,
thinking, cut arguments, a raw json block, UTF-8 split by chunking, ...), the SSE text of
two chunkings and the non-streamed Message. Each is served to the SDK through an httpx
mock transport:
  - the non-streamed body must validate as anthropic.types.Message with no field the SDK's
    types do not declare (top level, usage and every content block);
  - the stream, read by the SDK's own accumulator (client.messages.stream ...
    get_final_message()), must equal that Message field for field; its raw events must
    all be types the SDK knows, with the SDK's text accumulator (stream.text_stream)
    giving the text blocks' text.
Usage: check_anthropic_sdk.py --emitter build/tests/frontend/test_anthropic
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import anthropic
import httpx2 as httpx  # the HTTP client anthropic 2.x is built on
from anthropic.types import Message, TextBlock, ThinkingBlock, ToolUseBlock, Usage

BLOCK_TYPES = {"text": TextBlock, "thinking": ThinkingBlock, "tool_use": ToolUseBlock}


def client_for(body: bytes, content_type: str) -> anthropic.Anthropic:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/messages", request.url
        return httpx.Response(200, headers={"content-type": content_type}, content=body)

    return anthropic.Anthropic(api_key="k", base_url="http://k3.test", max_retries=0,
                               http_client=httpx.Client(transport=httpx.MockTransport(handler)))


def unknown_fields(raw: dict) -> list:
    bad = [f"message.{k}" for k in raw if k not in Message.model_fields]
    bad += [f"usage.{k}" for k in raw.get("usage", {}) if k not in Usage.model_fields]
    for i, b in enumerate(raw.get("content", [])):
        model = BLOCK_TYPES.get(b.get("type"))
        if model is None:
            bad.append(f"content[{i}].type={b.get('type')}")
            continue
        bad += [f"content[{i}].{k}" for k in b if k not in model.model_fields]
    return bad


def check_case(sse_path: str, json_path: str) -> list:
    errors = []
    whole_bytes = open(json_path, "rb").read()
    raw = json.loads(whole_bytes)
    errors += [f"unknown field {f}" for f in unknown_fields(raw)]
    req = dict(model="k3-tiny-chat", max_tokens=64, messages=[{"role": "user", "content": "hi"}])
    msg = client_for(whole_bytes, "application/json").messages.create(**req)
    if not isinstance(msg, Message):
        errors.append(f"create() gave {type(msg)}")
    sse = open(sse_path, "rb").read()
    with client_for(sse, "text/event-stream").messages.stream(**req) as st:
        text = "".join(st.text_stream)
        final = st.get_final_message()
    if final.model_dump() != msg.model_dump():
        errors.append(f"stream != whole:\n  stream {final.model_dump_json()}\n  whole  {msg.model_dump_json()}")
    want_text = "".join(b.text for b in msg.content if b.type == "text")
    if text != want_text:
        errors.append(f"text_stream {text!r} != text blocks {want_text!r}")
    raw_events = list(client_for(sse, "text/event-stream").messages.create(**req, stream=True))
    kinds = [e.type for e in raw_events]
    known = {"message_start", "content_block_start", "content_block_delta", "content_block_stop",
             "message_delta", "message_stop", "ping"}
    if set(kinds) - known or kinds[0] != "message_start" or kinds[-1] != "message_stop":
        errors.append(f"event sequence {kinds}")
    return errors


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--emitter", required=True, help="test_anthropic, run with --emit DIR")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run([args.emitter, "--emit", d], capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stdout[-2000:], r.stderr[-2000:])
            print("emitter failed")
            return 1
        cases = sorted(glob.glob(os.path.join(d, "*.sse")))
        failed = 0
        for sse in cases:
            name = os.path.basename(sse)[:-4]
            errs = check_case(sse, sse[:-4] + ".json")
            for e in errs:
                print(f"{name}: {e}")
            failed += bool(errs)
        print(f"anthropic {anthropic.__version__}: {len(cases) - failed} of {len(cases)} cases "
              f"read back by the SDK equal the non-streamed Message")
        return 1 if failed or not cases else 0


if __name__ == "__main__":
    sys.exit(main())
