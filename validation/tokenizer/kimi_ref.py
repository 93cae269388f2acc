"""kimi_ref.py - the reference Kimi tokenizer: tiktoken (PyPI) over the Kimi vocabulary,
pattern and special tokens, behind the two cuts of Moonshot's tokenization_kimi.py
(research/frontend.md §1.2-§1.5). Written from that description, not copied.

    enc = load(model_path, config_path)
    ids = encode(enc, text, allow_special=True)
"""
import json
import os

import tiktoken
from tiktoken.load import load_tiktoken_bpe

PAT_STR = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
MAX_SLICE_CHARS = 400_000  # TIKTOKEN_MAX_ENCODE_CHARS
MAX_RUN_CHARS = 25_000     # MAX_NO_WHITESPACES_CHARS
N_RESERVED = 256


def load(model_path, config_path):
    ranks = load_tiktoken_bpe(model_path)
    with open(config_path) as f:
        added = {int(k): v["content"] for k, v in json.load(f)["added_tokens_decoder"].items()}
    n = len(ranks)
    specials = {added.get(i, f"<|reserved_token_{i}|>"): i for i in range(n, n + N_RESERVED)}
    return tiktoken.Encoding("kimi_k3", pat_str=PAT_STR, mergeable_ranks=ranks,
                             special_tokens=specials)


def load_data(args):
    """The reference from the shared data directory args.data (kimi-tokenizer/, kimi-k3/); sets
    args.model and args.config to its two files, which tok_batch takes too."""
    args.model = os.path.join(args.data, "kimi-tokenizer/tiktoken.model")
    args.config = os.path.join(args.data, "kimi-k3/tokenizer_config.json")
    return load(args.model, args.config)


def cut_runs(s, limit=MAX_RUN_CHARS):
    """Substrings of s such that no run of isspace / non-isspace characters in one of them
    is longer than limit (the run is cut every `limit` characters)."""
    out, start, run, run_space = [], 0, 0, None
    for i, ch in enumerate(s):
        sp = ch.isspace()
        if sp != run_space:
            run, run_space = 1, sp
        else:
            run += 1
            if run > limit:
                out.append(s[start:i])
                start, run = i, 1
    out.append(s[start:])
    return out


def substrings(text):
    for i in range(0, len(text), MAX_SLICE_CHARS):
        yield from cut_runs(text[i:i + MAX_SLICE_CHARS])


def encode(enc, text, allow_special=True):
    ids = []
    for sub in substrings(text):
        if allow_special:
            ids.extend(enc.encode(sub, allowed_special="all"))
        else:
            ids.extend(enc.encode(sub, disallowed_special=()))
    return ids
