#!/usr/bin/env python3
"""load_streams.py - `k3 serve` (2 ranks, k3-tiny-chat) under load and faults, meant for a
build with AddressSanitizer (ctest -L slow in a -DK3_SANITIZE=address,undefined build).

Each round starts CLIENTS streaming clients at once, alternating OpenAI chat and Anthropic
messages, with a seeded mix of behaviours: readers that leave after a few events (random
disconnects), stalled readers (they stop reading after the headers until every other
client is done, then read slowly), and readers that read to the end; at the same time,
garbage bodies (truncated, invalid UTF-8, deeply nested, over the body limit) on both
routes. Checks:
  - every client got 200 and, unless it left, a complete stream ([DONE], or message_stop
    with contiguous block indices); every garbage body got 400 or 413;
  - nothing hangs: every reader and leaver finishes while the stalled readers are still
    stalled (a stalled reader blocks only itself), and the stalled ones then finish too;
  - nothing leaks: after each round no request is active or waiting, every KDA slot and
    MLA block is free again (/metrics), the ranks' resident memory does not keep growing
    from round to round; at SIGTERM both ranks exit 0 and the sanitizer logs hold no
    AddressSanitizer or UBSan report and no leak allocated by k3's own code (a
    LeakSanitizer record whose allocating frame is in src/): Open MPI keeps allocations
    until exit, in modules it has unloaded by then, so those records are counted apart
    (and load_lsan.supp drops the ones it can name).
Prints the figures: requests, completed, disconnects, garbage, peak and current RSS per
rank before and after. Tunables (environment): K3_LOAD_CLIENTS (256), K3_LOAD_ROUNDS (2),
K3_LOAD_STALL_S (600: no event to any client and no client done for this long is a hang;
under ASan the CPU forward is slow, so progress, not a total time, is what is checked).
usage: load_streams.py K3 CONFIG MODEL_CONFIG TOKENIZER_DIRS WORKDIR MPIRUN..."""
import glob
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time

K3, CONFIG, MODEL_CONFIG, TOK_DIRS, WORK = sys.argv[1:6]
MPIRUN = sys.argv[6:] or ["mpirun"]
CLIENTS = int(os.environ.get("K3_LOAD_CLIENTS", "256"))
ROUNDS = int(os.environ.get("K3_LOAD_ROUNDS", "2"))
STALL_S = float(os.environ.get("K3_LOAD_STALL_S", "600"))
progress = {"events": 0}  # SSE events any client received (a hang is no progress for STALL_S)
progress_mu = threading.Lock()
HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = "k3-tiny-chat"
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"CHECK failed: {what}", file=sys.stderr, flush=True)
    return cond


def start_server():
    log_path = os.path.join(WORK, "serve-load.log")
    for f in glob.glob(os.path.join(WORK, "san.*")):
        os.remove(f)
    san = os.path.join(WORK, "san")
    # the slow unwinder gives whole allocation stacks, so a leak's direct caller is known
    env = dict(os.environ,
               ASAN_OPTIONS=f"detect_leaks=1:fast_unwind_on_malloc=0:malloc_context_size=20:log_path={san}:"
                            "abort_on_error=0",
               LSAN_OPTIONS=f"suppressions={os.path.join(HERE, 'load_lsan.supp')}:print_suppressions=0",
               UBSAN_OPTIONS=f"print_stacktrace=1:log_path={san}")
    cmd = MPIRUN + ["-x", "ASAN_OPTIONS", "-x", "LSAN_OPTIONS", "-x", "UBSAN_OPTIONS", "-np", "2", K3, "serve",
                    "--model", os.path.join(WORK, MODEL), "--config", CONFIG, "--port", "0",
                    "--set", "server.max_body_bytes=256KiB", "--set", "server.shutdown_grace_s=5",
                    "--set", "scheduler.max_queue=1024", "--set", "scheduler.max_seqs=16"]
    proc = subprocess.Popen(cmd, stdout=open(log_path, "w"), stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    t0 = time.time()
    while time.time() - t0 < 300:
        if proc.poll() is not None:
            raise SystemExit(f"k3 serve exited {proc.returncode}:\n" + open(log_path).read()[-3000:])
        m = re.search(r"on http://127\.0\.0\.1:(\d+)", open(log_path).read())
        if m:
            return proc, int(m.group(1)), log_path
        time.sleep(0.2)
    raise SystemExit("k3 serve did not start:\n" + open(log_path).read()[-3000:])


def ranks(proc):
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(proc.pid)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def rss_mib(pid):
    """(VmRSS, VmHWM) in MiB."""
    st = open(f"/proc/{pid}/status").read()
    get = lambda k: int(re.search(rf"^{k}:\s+(\d+) kB", st, re.M).group(1)) / 1024
    return get("VmRSS"), get("VmHWM")


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/metrics")
    body = c.getresponse().read().decode()
    c.close()
    vals = {}
    for line in body.splitlines():
        m = re.match(r"^(k3_[a-z_]+(?:\{[^}]*\})?) (\S+)$", line)
        if m:
            vals[m.group(1)] = float(m.group(2))
    return vals


def body_for(api, rng):
    """Short prompts and answers: under AddressSanitizer the CPU forward is the slow part,
    and the load is on the server's connections and sequences, not on the model."""
    msgs = [{"role": "user", "content": rng.choice(["Hi!", "Colours?", "你好", "Why?", "Sea poem."])}]
    b = {"model": MODEL, "messages": msgs, "max_tokens": rng.randint(2, 8), "stream": True,
         "seed": rng.randint(0, 1 << 30)}
    think = rng.random() < 0.1
    if api == "openai":
        b["thinking"] = {"type": "enabled" if think else "disabled"}
        return "/v1/chat/completions", b
    if think:
        b["thinking"] = {"type": "adaptive"}
    return "/v1/messages", b


def sse_events(data):
    """[(event or None, data str)] from an SSE byte string."""
    out = []
    for rec in data.decode("utf-8", "replace").split("\n\n"):
        ev, dat = None, None
        for line in rec.split("\n"):
            if line.startswith("event: "):
                ev = line[7:]
            elif line.startswith("data: "):
                dat = line[6:]
        if dat is not None:
            out.append((ev, dat))
    return out


def stream_complete(api, data):
    evs = sse_events(data)
    if api == "openai":
        return bool(evs) and evs[-1][1] == "[DONE]" and all(d == "[DONE]" or "error" not in json.loads(d)
                                                            for _, d in evs)
    kinds, idx, open_ = [], -1, None
    for ev, d in evs:
        j = json.loads(d)
        if j.get("type") != ev:
            return False
        kinds.append(ev)
        if ev == "content_block_start":
            if open_ is not None or j["index"] != idx + 1:
                return False
            idx = open_ = j["index"]
        elif ev in ("content_block_delta", "content_block_stop"):
            if j["index"] != open_:
                return False
            if ev == "content_block_stop":
                open_ = None
    return bool(kinds) and kinds[0] == "message_start" and kinds[-1] == "message_stop" and open_ is None


class Client(threading.Thread):
    def __init__(self, port, i, rng, release):
        super().__init__(daemon=True)
        self.port, self.i, self.release = port, i, release
        self.api = "openai" if i % 2 == 0 else "anthropic"
        self.path, self.body = body_for(self.api, rng)
        r = rng.random()
        self.mode = "leave" if r < 0.25 else "stall" if r < 0.35 else "read"
        self.leave_after = rng.randint(1, 4)
        self.status = None
        self.complete = False
        self.error = None
        self.t_end = None

    def run(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
            h = {"Content-Type": "application/json"}
            if self.api == "anthropic":
                h["anthropic-version"] = "2023-06-01"
            c.request("POST", self.path, body=json.dumps(self.body), headers=h)
            r = c.getresponse()
            self.status = r.status
            if r.status != 200:
                self.error = r.read()[:300]
                return
            if self.mode == "leave":
                n = 0
                while n < self.leave_after:
                    line = r.fp.readline()
                    if not line:
                        break
                    n += line.startswith(b"data: ")
                c.sock.shutdown(socket.SHUT_RDWR)  # vanish mid-stream
                c.close()
                return
            if self.mode == "stall":
                self.release.wait(900)
            data = b""
            while True:
                chunk = r.read1(4096) if self.mode == "read" else r.read1(256)
                if not chunk:
                    break
                data += chunk
                with progress_mu:  # events, not bytes: keep-alive comments are no progress
                    progress["events"] += chunk.count(b"data: ")
                if self.mode == "stall":
                    time.sleep(0.02)
            self.complete = stream_complete(self.api, data)
            if not self.complete:
                self.error = data[-300:]
            c.close()
        except Exception as e:  # noqa: BLE001 - any failure is reported
            self.error = repr(e)
        finally:
            self.t_end = time.time()


GARBAGE = [
    b'{"model": "k3-tiny-chat", "max_tokens": 8, "messages": [{"role": "user", "content": "he',
    b'{"model": "\xff\xfe\xfd", "max_tokens": 8, "messages": []}',
    b'{"model": "k3-tiny-chat", "max_tokens": 8, "messages": ' + b"[" * 50000 + b"]" * 50000 + b"}",
    b'{"model": "k3-tiny-chat", "max_tokens": 8, "messages": [{"role": "user", "content": "' + b"x" * 300000 + b'"}]}',
    b"",
    b"\x00\x01\x02 not json at all",
]


def garbage(port, path, raw, out):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        c.request("POST", path, body=raw, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        out.append(r.status)
        c.close()
    except Exception as e:  # noqa: BLE001
        out.append(repr(e))


def wait_progress(threads):
    """Joins threads while something moves (events received or a thread done); returns the
    ones still alive when nothing moved for STALL_S."""
    last, t_last = None, time.time()
    while True:
        alive = [t for t in threads if t.is_alive()]
        if not alive:
            return []
        with progress_mu:
            now = (progress["events"], len(alive))
        if now != last:
            last, t_last = now, time.time()
        elif time.time() - t_last > STALL_S:
            return alive
        alive[0].join(1.0)


def one_round(port, rnd, rng):
    release = threading.Event()
    clients = [Client(port, i, rng, release) for i in range(CLIENTS)]
    gstatus = []
    gthreads = [threading.Thread(target=garbage, args=(port, p, raw, gstatus), daemon=True)
                for p in ("/v1/messages", "/v1/chat/completions") for raw in GARBAGE]
    t0 = time.time()
    for c in clients:
        c.start()
    for g in gthreads:
        g.start()
    others = [c for c in clients if c.mode != "stall"] + gthreads
    hung = wait_progress(others)
    check(not hung, f"round {rnd}: with readers stalled, no progress for {STALL_S:.0f} s (hang): "
                    f"{len(hung)} clients left")
    t_others = time.time() - t0
    release.set()
    hung = wait_progress(clients)
    check(not hung, f"round {rnd}: stalled readers, released, made no progress for {STALL_S:.0f} s (hang): "
                    f"{len(hung)} left")
    bad = [(c.i, c.api, c.status, c.error) for c in clients if c.status != 200 or (c.mode != "leave" and not c.complete)]
    check(not bad, f"round {rnd}: {len(bad)} clients failed, e.g. {bad[:3]}")
    check(all(s in (400, 413) for s in gstatus) and len(gstatus) == len(gthreads),
          f"round {rnd}: garbage statuses {gstatus}")
    left = sum(c.mode == "leave" for c in clients)
    return {"requests": len(clients), "completed": sum(c.complete for c in clients), "disconnects": left,
            "stalled": sum(c.mode == "stall" for c in clients), "garbage": len(gthreads),
            "others_s": t_others, "seconds": time.time() - t0}


def wait_idle(port, base):
    t0 = time.time()
    while time.time() - t0 < 120:
        m = metrics(port)
        if m.get("k3_requests_active") == 0 and m.get("k3_requests_waiting") == 0 and \
                m.get("k3_kda_slots_free") == base.get("k3_kda_slots_free") and \
                m.get("k3_mla_blocks_free") == base.get("k3_mla_blocks_free"):
            return m
        time.sleep(0.5)
    return metrics(port)


MPI_FRAME = re.compile(r"<unknown module>|lib(mpi|open-pal|open-rte|pmix|prrte|hwloc|event|ucp|ucs|uct|fabric|psm)|mca_")


def leak_is_ours(rec, src):
    """Walking out from the allocation: k3's code (src/) before any MPI frame makes the leak
    k3's, also through a library that allocates for it (jansson, libc, libmicrohttpd)."""
    for line in rec.splitlines():
        m = re.match(r"\s+#(\d+) (.*)$", line)
        if not m or m.group(1) == "0":
            continue
        if src in m.group(2):
            return True
        if MPI_FRAME.search(m.group(2)):
            return False
    return False


def main():
    os.makedirs(WORK, exist_ok=True)
    ck = os.path.join(WORK, MODEL)
    if not os.path.exists(os.path.join(ck, "tiktoken.model")):
        subprocess.run([K3, "gen-weights", "--model-config", MODEL_CONFIG, "--out", ck, "--seed", "3",
                        "--tokenizer", TOK_DIRS], check=True, stdout=subprocess.DEVNULL)
    proc, port, log_path = start_server()
    rng = random.Random(20261129)
    try:
        base = metrics(port)
        pids = ranks(proc)
        # one request first, so "before" includes what every request touches once
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        c.request("POST", "/v1/messages", body=json.dumps({"model": MODEL, "max_tokens": 4, "messages": [
            {"role": "user", "content": "warm up"}]}))
        check(c.getresponse().status == 200, "warm-up request")
        c.close()
        before = {p: rss_mib(p) for p in pids}
        print(f"# ranks {pids}; RSS before: " + ", ".join(f"{p}: {r:.0f} MiB (peak {h:.0f})" for p, (r, h) in before.items()),
              flush=True)
        after = []
        for rnd in range(ROUNDS):
            fig = one_round(port, rnd, rng)
            m = wait_idle(port, base)
            check(m.get("k3_requests_active") == 0 and m.get("k3_requests_waiting") == 0,
                  f"round {rnd}: requests left active {m.get('k3_requests_active')} waiting {m.get('k3_requests_waiting')}")
            check(m.get("k3_kda_slots_free") == base.get("k3_kda_slots_free") and
                  m.get("k3_mla_blocks_free") == base.get("k3_mla_blocks_free"),
                  f"round {rnd}: KDA slots free {m.get('k3_kda_slots_free')}/{base.get('k3_kda_slots_free')}, "
                  f"MLA blocks free {m.get('k3_mla_blocks_free')}/{base.get('k3_mla_blocks_free')}")
            rss = {p: rss_mib(p) for p in pids}
            after.append(rss)
            cancelled = m.get('k3_requests_finished_total{reason="cancelled"}', 0)
            print(f"# round {rnd}: {fig['requests']} streaming requests ({fig['completed']} read to the end, "
                  f"{fig['disconnects']} disconnects, {fig['stalled']} stalled readers), {fig['garbage']} garbage "
                  f"bodies; others done in {fig['others_s']:.1f} s with the stalled ones stalled, all in "
                  f"{fig['seconds']:.1f} s; cancelled so far {cancelled:.0f}; RSS " +
                  ", ".join(f"{p}: {r:.0f} MiB (peak {h:.0f})" for p, (r, h) in rss.items()), flush=True)
        if len(after) >= 2:
            for p in pids:
                grow = after[-1][p][0] - after[0][p][0]
                check(grow < 64, f"rank pid {p}: RSS grew {grow:.0f} MiB from round 1 to round {len(after)}")
    finally:
        for p in ranks(proc):
            os.kill(p, signal.SIGTERM)
        try:
            rc = proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
    check(rc == 0, f"k3 serve exit status {rc} (log {log_path})")
    reports, ours, foreign = [], 0, 0
    src = os.path.join(os.path.dirname(os.path.dirname(HERE)), "src") + "/"
    for f in glob.glob(os.path.join(WORK, "san.*")):
        text = open(f, errors="replace").read()
        if re.search(r"ERROR: AddressSanitizer|runtime error:", text):
            reports.append(f)
            print(text[:4000], file=sys.stderr)
        for rec in re.split(r"\n(?=(?:Direct|Indirect) leak of )", text):
            if not re.match(r"(Direct|Indirect) leak of ", rec):
                continue
            if leak_is_ours(rec, src):
                ours += 1
                print(rec[:3000], file=sys.stderr)
            else:
                foreign += 1
    check(not reports, f"sanitizer reports: {reports}")
    check(ours == 0, f"{ours} leaks allocated by k3's code")
    print(f"# LeakSanitizer at exit: {ours} records allocated in src/, {foreign} elsewhere (Open MPI and "
          f"the libraries it loads)")
    print(f"{'FAILED' if failures else 'OK'}: {len(failures)} failed checks")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
