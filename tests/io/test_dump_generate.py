"""test_dump_generate - `k3 dump --generate` end to end (cli/dump_regen.h).

  python3 test_dump_generate.py K3 WORKDIR MPIRUN... [--tok-dir DIR,DIR]

1. prompt_ids input on k3-tiny, seeded sampling, 1 rank and 4 ranks (tp 2 x adp 2):
   every dumped hidden state, the generated tokens included, equals the float64
   reference's intermediate (validation/reference/k3ref.py, as in test_dump_cli);
   each sample is its prompt (mask 0) followed by the reply in OUT.gen (mask 1); each
   reply equals `k3 generate` on the same prompt, seed, temperature, top_p, max_tokens
   and stop ids under the same layout, submitted in reverse order (so in other batch
   slots and attention groups).
2. Resume: the same command again leaves the file as it is; with the HDF5 file removed,
   the replies come from OUT.gen (no generation) and the datasets are the same.
3. With --tok-dir (the Kimi tokenizer, k3-tiny-chat): a two-turn conversation, greedy,
   the first reply ended by a stop id so that a second turn runs. Turn 1's reply equals
   `k3 generate` on the prompt `k3 render` gives for the conversation up to it; the
   sample is turn 2's prompt followed by turn 2's exact ids, and that reply equals
   `k3 generate` on that prompt; the loss mask has exactly the two replies; the trailing
   user message is dropped; the hidden states equal the reference's. A prompt_ids line
   runs beside it, so turn 2 is submitted while another request is mid-decode.
4. Bad input stops with exit 2 and a message: a conversation without an assistant turn,
   loss_mask with --generate, sampling flags without --generate, a bad temperature, a
   journal written by another command.
Prints 'N passed, N failed'.
"""
import json
import os
import random
import sys

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_dump_cli as t  # noqa: E402  (check, run, compare_with_ref, same_datasets)

ROOT = t.ROOT
Q = ["--log-level", "warn", "--threads", "1"]


def fresh(*paths):
    for p in paths:
        for q in [p, p + ".journal", p + ".gen"]:
            if os.path.exists(q):
                os.remove(q)


def journal(path):
    """OUT.gen -> {(sample, turn): (seed, finish, ids)}, complete flag."""
    replies, complete = {}, False
    with open(path) as f:
        lines = f.read().split("\n")
    for line in lines[2:]:
        w = line.split()
        if w and w[0] == "reply":
            replies[(int(w[1]), int(w[2]))] = (int(w[3]), w[4], [int(x) for x in w[6:6 + int(w[5])]])
        elif w and w[0] == "complete":
            complete = True
    return replies, complete


def generate(k3, launch, model, reqs, out, par=()):
    """k3 generate on the requests (launch + par: the layout); -> [(output_ids, finish_reason)]."""
    inp = out + ".in.jsonl"
    with open(inp, "w") as f:
        for r in reqs:
            f.write(json.dumps(r) + "\n")
    rc, log = t.run(launch + [k3, "generate", "--model", model, "--input", inp, "--out", out] + list(par) + Q)
    t.check(rc == 0, f"k3 generate: {log}")
    if rc:
        return [None] * len(reqs)
    return [(o["output_ids"], o["finish_reason"]) for o in map(json.loads, open(out))]


def prompt_ids_case(k3, work, mpirun):
    model = os.path.join(work, "k3-tiny")
    if not os.path.exists(os.path.join(model, "config.json")):
        rc, out = t.run([k3, "gen-weights", "--model-config", os.path.join(ROOT, "configs/models/k3-tiny/config.json"),
                         "--out", model])
        t.check(rc == 0, f"gen-weights k3-tiny: {out}")
    r = random.Random(3)
    lines = []
    for i in range(6):
        line = {"id": f"g{i}", "prompt_ids": [r.randrange(1024) for _ in range(r.randint(2, 40))]}
        if i == 4:
            line["stop_token_ids"] = [r.randrange(1024) for _ in range(6)]   # may or may not end it early
        lines.append(line)
    inp = os.path.join(work, "gen.jsonl")
    with open(inp, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    layers = [0, 3, 8]
    samp = ["--generate", "--temperature", "0.9", "--max-tokens", "12", "--seed", "11"]
    layouts = [("np1", [], [])]
    if mpirun:
        layouts.append(("np4-tp2-adp2", mpirun + ["-np", "4"], ["--tp", "2", "--adp", "2"]))
    for tag, launch, par in layouts:
        out = os.path.join(work, f"gen-{tag}.h5")
        fresh(out)
        cmd = launch + [k3, "dump", "--model", model, "--input", inp, "--out", out, "--layers", "0,3,8", "--final",
                        "--dtype", "float32", "--set", "dump.chunk_tokens=32"] + samp + par + Q
        rc, log = t.run(cmd)
        t.check(rc == 0, f"dump --generate {tag}: {log}")
        if rc:
            continue
        worst = t.compare_with_ref(out, model, layers)
        print(f"# prompt_ids --generate {tag}: worst relative error vs the float64 reference {worst:.2e} "
              f"({worst / 1e-4:.1%} of the 1e-4 tolerance)")
        replies, complete = journal(out + ".gen")
        t.check(complete and sorted(replies) == [(i, 0) for i in range(len(lines))], f"{tag}: OUT.gen has every reply")
        f = h5py.File(out, "r")
        off, tok, mask = f["sample_offsets"][:], f["tokens"][:], f["loss_mask"][:]
        reqs = []
        for i, line in enumerate(lines):
            seed, finish, ids = replies[(i, 0)]
            p = line["prompt_ids"]
            t.check(list(tok[off[i]:off[i + 1]]) == p + ids, f"{tag} sample {i}: tokens = prompt + reply")
            t.check(list(mask[off[i]:off[i + 1]]) == [0] * len(p) + [1] * len(ids), f"{tag} sample {i}: loss mask")
            t.check(len(ids) == 12 or finish == "stop", f"{tag} sample {i}: {len(ids)} tokens, finish {finish}")
            reqs.append({"id": i, "prompt_ids": p, "temperature": 0.9, "top_p": 0.95, "seed": seed, "max_tokens": 12,
                         "stop_token_ids": line.get("stop_token_ids", [])})
        t.check("regenerated" in f.attrs["generate"] and "generated continuation" in f.attrs["loss_mask_semantics"],
                f"{tag}: attributes say how the tokens came about")
        f.close()
        # in reverse order: other batch slots and attention groups, the same draws
        got = generate(k3, launch, model, reqs[::-1], out + ".generate.jsonl", par)[::-1]
        for i, g in enumerate(got):
            seed, finish, ids = replies[(i, 0)]
            t.check(g is not None and g[0] == ids and g[1] == finish,
                    f"{tag} sample {i}: reply {ids} ({finish}) != k3 generate's {g}")
        # resume: the finished command again changes nothing; without the HDF5 file the
        # replies come from OUT.gen
        gen_before = open(out + ".gen").read()
        keep = out + ".first.h5"
        os.replace(out, keep)
        rc, log = t.run(cmd)
        t.check(rc == 0 and t.same_datasets(keep, out), f"{tag}: dump again from OUT.gen: {log}")
        rc, log = t.run(cmd)
        t.check(rc == 0 and t.same_datasets(keep, out), f"{tag}: the finished command again: {log}")
        t.check(open(out + ".gen").read() == gen_before, f"{tag}: OUT.gen untouched by the re-runs")
    return model, inp


def render(k3, model, messages, path):
    with open(path, "w") as f:
        json.dump({"messages": messages}, f)
    rc, out = t.run([k3, "render", "--model", model, "--request", path, "--json"])
    t.check(rc == 0, f"k3 render: {out}")
    return json.loads(out)["ids"] if rc == 0 else []


def chat_case(k3, work, tok_dir):
    model = os.path.join(work, "k3-tiny-chat")
    if not os.path.exists(os.path.join(model, "config.json")):
        rc, out = t.run([k3, "gen-weights", "--model-config", os.path.join(ROOT, "configs/models/k3-tiny-chat/config.json"),
                         "--out", model, "--tokenizer", tok_dir])
        t.check(rc == 0, f"gen-weights k3-tiny-chat: {out}")
    msgs = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is two plus two?"},
            {"role": "assistant", "content": "Four, of course."},
            {"role": "user", "content": "And three plus three?"},
            {"role": "assistant", "content": "Six."},
            {"role": "user", "content": "A trailing question nobody answered."}]
    inp, out = os.path.join(work, "chat-gen.jsonl"), os.path.join(work, "chat-gen.h5")
    samp = ["--generate", "--temperature", "0", "--max-tokens", "6"]
    # A random model never emits <|end_of_msg|>: find the third token of its first
    # reply and make it a stop id, so the first turn ends with "stop" and a second
    # turn runs on it.
    p1 = {"id": "p1", "prompt_ids": [1, 2, 3]}   # still running when c0's second turn is submitted
    with open(inp, "w") as f:
        f.write(json.dumps({"id": "c0", "messages": msgs}) + "\n" + json.dumps(p1) + "\n")
    fresh(out)
    rc, log = t.run([k3, "dump", "--model", model, "--input", inp, "--out", out, "--layers", "2"] + samp + Q)
    t.check(rc == 0, f"chat probe: {log}")
    if rc:
        return
    first = journal(out + ".gen")[0][(0, 0)][2]
    stop = next(x for i, x in enumerate(first) if i >= 1 and x not in first[:i])
    with open(inp, "w") as f:
        f.write(json.dumps({"id": "c0", "stop_token_ids": [stop], "messages": msgs}) + "\n" + json.dumps(p1) + "\n")
    fresh(out)
    rc, log = t.run([k3, "dump", "--model", model, "--input", inp, "--out", out, "--layers", "2,8", "--final",
                     "--dtype", "float32"] + samp + Q)
    t.check(rc == 0, f"chat dump --generate: {log}")
    if rc:
        return
    replies, complete = journal(out + ".gen")
    t.check(complete and sorted(replies) == [(0, 0), (0, 1), (1, 0)], f"two turns and p1: {sorted(replies)}")
    (s0, fin0, r0), (s1, fin1, r1) = replies[(0, 0)], replies[(0, 1)]
    t.check(fin0 == "stop" and r0[-1] == stop, f"turn 1 ends at the stop id (kept): {r0} {fin0}")
    f = h5py.File(out, "r")
    off = f["sample_offsets"][:]
    ids = [int(x) for x in f["tokens"][off[0]:off[1]]]
    mask = [int(x) for x in f["loss_mask"][off[0]:off[1]]]
    f.close()
    t.check(ids[-len(r1):] == r1 and mask[-len(r1):] == [1] * len(r1), "the sample ends with turn 2's exact ids")
    runs = "".join(map(str, mask)).replace("0", " ").split()
    t.check(len(runs) == 2, f"the loss mask has the two replies: {len(runs)} runs")
    p0 = render(k3, model, msgs[:2], os.path.join(work, "req0.json"))
    p1 = ids[:-len(r1)]
    t.check(p1[:len(p0)] == p0, "turn 2's prompt starts with turn 1's (K3's format appends)")
    # not a property of the policy (re-tokenized text may differ from the ids), only a note
    print(f"# turn 1's reply re-rendered in turn 2's prompt is its generated ids: {p1[len(p0):len(p0) + len(r0)] == r0}")
    eos = 163586
    got = generate(k3, [], model, [
        {"id": 0, "prompt_ids": p0, "temperature": 0, "max_tokens": 6, "stop_token_ids": [eos, stop]},
        {"id": 1, "prompt_ids": p1, "temperature": 0, "max_tokens": 6, "stop_token_ids": [eos, stop]}],
        os.path.join(work, "chat-generate.jsonl"))
    t.check(got[0] is not None and got[0][0] == r0, f"turn 1 == k3 generate on k3 render's prompt: {r0} vs {got[0]}")
    t.check(got[1] is not None and got[1][0] == r1, f"turn 2 == k3 generate on its prompt: {r1} vs {got[1]}")
    text = t.run([k3, "tokenize", "--model", model, "--decode", "--text", json.dumps(ids)])[1]
    t.check("trailing question" not in text, "the trailing user message is dropped")
    worst = t.compare_with_ref(out, model, [2, 8])
    print(f"# chat --generate: {len(ids)} tokens, {sum(mask)} in the loss mask; worst relative error vs the "
          f"reference {worst:.2e}")


def bad_input(k3, work, model, good):
    noasst = os.path.join(work, "noasst.jsonl")
    with open(noasst, "w") as f:
        f.write(json.dumps({"id": 1, "messages": [{"role": "user", "content": "hi"}]}) + "\n")
    masked = os.path.join(work, "masked.jsonl")
    with open(masked, "w") as f:
        f.write(json.dumps({"id": 1, "prompt_ids": [1, 2, 3], "loss_mask": [0, 1, 1]}) + "\n")
    x = os.path.join(work, "bad-gen.h5")
    fresh(x)
    cases = [
        (["--input", masked, "--out", x, "--layers", "1", "--generate"], "cannot be given with --generate"),
        (["--input", good, "--out", x, "--layers", "1", "--temperature", "0.5"], "without --generate"),
        (["--input", good, "--out", x, "--layers", "1", "--generate", "--temperature", "3"], "--temperature must be"),
    ]
    chat_model = os.path.join(work, "k3-tiny-chat")
    if os.path.exists(os.path.join(chat_model, "tiktoken.model")):
        cases.append((["--input", noasst, "--out", x, "--layers", "1", "--generate"], "no assistant turn"))
    for args, msg in cases:
        m = chat_model if "noasst" in args[1] else model
        rc, log = t.run([k3, "dump", "--model", m] + args + Q)
        t.check(rc == 2 and msg in log, f"bad input {msg!r}: rc {rc}, {log.strip()}")
    # OUT.gen of another command (another seed) is refused, and left alone
    out = os.path.join(work, "gen-np1.h5")
    before = open(out + ".gen").read()
    rc, log = t.run([k3, "dump", "--model", model, "--input", good, "--out", out, "--layers", "0,3,8", "--final",
                     "--generate", "--seed", "12"] + Q)
    t.check(rc == 2 and "another command" in log, f"a journal of another command: rc {rc}, {log.strip()}")
    t.check(open(out + ".gen").read() == before, "that journal is left alone")


def main():
    k3, work = sys.argv[1], sys.argv[2]
    rest = sys.argv[3:]
    tok_dir = None
    if "--tok-dir" in rest:
        i = rest.index("--tok-dir")
        tok_dir = rest[i + 1]
        rest = rest[:i] + rest[i + 2:]
    os.makedirs(work, exist_ok=True)
    model, inp = prompt_ids_case(k3, work, rest)
    if tok_dir:
        chat_case(k3, work, tok_dir)
    bad_input(k3, work, model, inp)
    print(f"{t.passed} passed, {t.failed} failed")
    return 1 if t.failed else 0


if __name__ == "__main__":
    sys.exit(main())
