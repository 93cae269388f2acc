#!/usr/bin/env python3
"""bench_serve.py - requests/s and time to first token of `k3 serve` for short chat prompts at
1, 16 and 64 concurrent clients (streamed requests over raw HTTP, one thread per client).

    validation/bench/bench_serve.py --k3 build/k3 --model DIR [--config configs/deploy/tiny-2rank.cfg]
        [--np 2] [--set KEY=VALUE ...] [--clients 1,16,64] [--requests-per-client 4] [--max-tokens 16]
        [--out FILE.md]
    validation/bench/bench_serve.py --url http://127.0.0.1:8000 ...   (a server already running)

Every request is checked in the same run: HTTP 200, an SSE stream ending in [DONE], exactly
max_tokens completion tokens in the usage chunk (the benchmark sets a stop-free request, so a
short answer is a bug) and the concatenated deltas non-empty; failures are counted in #wrong.
TTFT = from sending the request to the first chunk that carries generated text (not the
role chunk). The 1-minute load average is recorded before and after each row: on a shared
machine the numbers are what it gave at that moment. Prints a #-headed table and, with --out,
writes it as Markdown with the machine description."""
import argparse
import http.client
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import threading
import time


def one_request(port, body, model):
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    ttft, text, usage, buf, done = None, "", None, b"", False
    ok = r.status == 200
    while ok:
        b = r.read1(65536)
        if not b:
            break
        buf += b
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if not ev.startswith(b"data: "):
                continue
            if ev == b"data: [DONE]":
                done = True
                continue
            j = json.loads(ev[6:])
            if j.get("usage"):
                usage = j["usage"]
            for ch in j.get("choices", []):
                d = ch.get("delta", {})
                piece = (d.get("content") or "") + (d.get("reasoning_content") or "")
                if piece and ttft is None:
                    ttft = time.perf_counter() - t0
                text += piece
    c.close()
    return {"ok": ok and done and usage is not None, "ttft": ttft, "latency": time.perf_counter() - t0,
            "completion": usage["completion_tokens"] if usage else 0, "prompt": usage["prompt_tokens"] if usage else 0,
            "text": text}


def run_level(port, model, clients, per_client, max_tokens):
    results, lock = [], threading.Lock()

    def client(i):
        for k in range(per_client):
            body = json.dumps({"model": model, "messages": [{"role": "user", "content": f"Hello {i}-{k}, how are you?"}],
                               "max_tokens": max_tokens, "temperature": 1.0, "seed": i * 1000 + k, "stream": True,
                               "stream_options": {"include_usage": True}})
            r = one_request(port, body, model)
            with lock:
                results.append(r)

    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    load1 = os.getloadavg()[0]
    good = [r for r in results if r["ok"] and r["completion"] == max_tokens and r["text"] and r["ttft"] is not None]
    ttfts = sorted(r["ttft"] for r in good) or [float("nan")]
    lat = [r["latency"] for r in good] or [float("nan")]
    return {"clients": clients, "requests": len(results), "wall_s": wall, "req_s": len(good) / wall,
            "tok_s": sum(r["completion"] for r in good) / wall, "ttft_p50_ms": 1e3 * statistics.median(ttfts),
            "ttft_p90_ms": 1e3 * ttfts[min(len(ttfts) - 1, int(0.9 * len(ttfts)))],
            "latency_p50_ms": 1e3 * statistics.median(lat), "wrong": len(results) - len(good),
            "load": f"{load0:.2f}->{load1:.2f}", "prompt": max((r["prompt"] for r in good), default=0)}


def machine():
    cpu = "?"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = int(re.search(r"MemTotal:\s+(\d+)", open("/proc/meminfo").read()).group(1)) / 2**20
    return f"{platform.node()}: {os.cpu_count()} CPUs ({cpu}), {mem:.0f} GiB, {platform.platform()}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k3")
    ap.add_argument("--model")
    ap.add_argument("--config", default="configs/deploy/tiny-2rank.cfg")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--url")
    ap.add_argument("--clients", default="1,16,64")
    ap.add_argument("--requests-per-client", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--set", action="append", default=[], help="a deployment key for k3 serve, e.g. backend.threads=4")
    ap.add_argument("--out")
    a = ap.parse_args()
    proc = None
    if a.url:
        port = int(a.url.rsplit(":", 1)[1].strip("/"))
        model = json.loads(urlopen_models(port))["data"][0]["id"]
    else:
        log = open("/tmp/bench_serve.log", "w")
        mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(a.np)]
        sets = [x for kv in a.set for x in ("--set", kv)]
        proc = subprocess.Popen(mpirun + [a.k3, "serve", "--model", a.model, "--config", a.config, "--port", "0",
                                          "--log-level", "info", *sets], stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        port = None
        for _ in range(1200):
            m = re.search(r"serving \"([^\"]+)\" on http://[^:]+:(\d+)", open("/tmp/bench_serve.log").read())
            if m:
                model, port = m.group(1), int(m.group(2))
                break
            if proc.poll() is not None:
                sys.exit(open("/tmp/bench_serve.log").read())
            time.sleep(0.1)
    rows = []
    try:
        run_level(port, model, 1, 1, 2)  # warm-up
        print(f"# k3 serve, {a.np} ranks, streamed chat requests of short prompts, max_tokens {a.max_tokens}, "
              f"{a.requests_per_client} requests per client; ms are wall clock")
        print(f"# {'clients':>7} {'requests':>8} {'wall_s':>8} {'req/s':>8} {'tok/s':>8} {'ttft_p50_ms':>11} "
              f"{'ttft_p90_ms':>11} {'lat_p50_ms':>10} {'#wrong':>6} {'load(1min)':>12}")
        for c in (int(x) for x in a.clients.split(",")):
            r = run_level(port, model, c, a.requests_per_client, a.max_tokens)
            rows.append(r)
            print(f"  {r['clients']:>7} {r['requests']:>8} {r['wall_s']:>8.2f} {r['req_s']:>8.2f} {r['tok_s']:>8.1f} "
                  f"{r['ttft_p50_ms']:>11.0f} {r['ttft_p90_ms']:>11.0f} {r['latency_p50_ms']:>10.0f} "
                  f"{r['wrong']:>6} {r['load']:>12}", flush=True)
    finally:
        if proc:
            for p in subprocess.run(["ps", "-o", "pid=", "--ppid", str(proc.pid)], capture_output=True,
                                    text=True).stdout.split():
                os.kill(int(p), signal.SIGTERM)
            proc.wait(timeout=120)
    if a.out:
        with open(a.out, "w") as f:
            f.write(f"# `k3 serve` requests/s and time to first token\n\nMachine: {machine()}.\n"
                    f"Server: `mpirun -np {a.np} k3 serve --model {os.path.basename(a.model or '?')} --config "
                    f"{a.config}{''.join(' --set ' + kv for kv in a.set)}`; clients: `validation/bench/bench_serve.py` on the same machine.\n"
                    f"Requests: streamed chat, a one-line user message ({rows[0]['prompt'] if rows else '?'} prompt tokens "
                    f"as K3 counts them, with the template's notes), {a.max_tokens} completion tokens, "
                    f"{a.requests_per_client} per client in sequence.\n\n"
                    "| clients | requests | wall s | req/s | tok/s | TTFT p50 ms | TTFT p90 ms | latency p50 ms | #wrong | load (1 min, before->after) |\n"
                    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
            for r in rows:
                f.write(f"| {r['clients']} | {r['requests']} | {r['wall_s']:.2f} | {r['req_s']:.2f} | {r['tok_s']:.1f} | "
                        f"{r['ttft_p50_ms']:.0f} | {r['ttft_p90_ms']:.0f} | {r['latency_p50_ms']:.0f} | {r['wrong']} | "
                        f"{r['load']} |\n")
    return 1 if any(r["wrong"] for r in rows) else 0


def urlopen_models(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/v1/models")
    return c.getresponse().read()


if __name__ == "__main__":
    sys.exit(main())
