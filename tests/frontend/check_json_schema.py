"""check_json_schema.py - k3's JSON Schema check (src/frontend/json_schema.c) against
Python jsonschema's Draft202012Validator, on the walle-valid MFJS schemas from the Kimi
Vendor Verifier plus a few schemas for the keywords walle does not use, with instances
generated from each schema (mostly near-valid, some mutated) so both verdicts occur.

    check_json_schema.py --batch BUILD/tests/frontend/json_schema_batch --data ../shared/data
"""
import argparse
import copy
import glob
import json
import os
import random
import subprocess
import sys

import jsonschema

EXTRA = [  # keywords the walle cases do not exercise
    {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False},
    {"type": "array", "contains": {"type": "string"}, "uniqueItems": True},
    {"type": "object", "propertyNames": {"maxLength": 3}, "minProperties": 1, "maxProperties": 2},
    {"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 2}]},
    {"not": {"type": "string"}},
    {"allOf": [{"type": "number"}, {"exclusiveMinimum": 0}, {"exclusiveMaximum": 10}]},
    {"type": "number", "multipleOf": 0.5},
    {"type": "integer", "multipleOf": 3},
    {"if": {"type": "string"}, "then": {"minLength": 2}, "else": {"type": "integer"}},
    {"const": {"a": [1, 2.0, True]}},
    {"enum": [1, "1", True, None, [1], {"a": 1}]},
    {"type": ["integer", "null"], "maximum": 5},
]


def strip(obj, key):
    if isinstance(obj, dict):
        return {k: strip(v, key) for k, v in obj.items() if k != key}
    if isinstance(obj, list):
        return [strip(v, key) for v in obj]
    return obj


def resolve(root, ref):
    if not ref.startswith("#"):
        return None
    cur = root
    for tok in ref[1:].split("/")[1:]:
        tok = tok.replace("~1", "/").replace("~0", "~")
        if isinstance(cur, dict) and tok in cur:
            cur = cur[tok]
        elif isinstance(cur, list) and tok.isdigit() and int(tok) < len(cur):
            cur = cur[int(tok)]
        else:
            return None
    return cur


def rand_any(r, depth=0):
    k = r.randrange(7 if depth < 2 else 5)
    if k == 0:
        return None
    if k == 1:
        return r.random() < 0.5
    if k == 2:
        return r.randrange(-50, 50)
    if k == 3:
        return r.uniform(-50, 50)
    if k == 4:
        return "".join(r.choice("abé中 ") for _ in range(r.randrange(0, 6)))
    if k == 5:
        return [rand_any(r, depth + 1) for _ in range(r.randrange(0, 3))]
    return {r.choice("abcxyz"): rand_any(r, depth + 1) for _ in range(r.randrange(0, 3))}


def gen(r, root, s, depth=0):
    if depth > 6 or not isinstance(s, dict) or r.random() < 0.08:
        return rand_any(r)
    if "$ref" in s:
        t = resolve(root, s["$ref"])
        if t is not None and r.random() < 0.9:
            return gen(r, root, t, depth + 1)
    if "const" in s and r.random() < 0.7:
        return copy.deepcopy(s["const"])
    if "enum" in s and isinstance(s["enum"], list) and s["enum"] and r.random() < 0.8:
        return copy.deepcopy(r.choice(s["enum"]))
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(s.get(key), list) and s[key] and r.random() < 0.8:
            return gen(r, root, r.choice(s[key]), depth + 1)
    t = s.get("type")
    if isinstance(t, list):
        t = r.choice(t) if t else None
    if t is None:
        t = "object" if "properties" in s else "array" if "items" in s else None
    if t == "object":
        out = {}
        props = s.get("properties") if isinstance(s.get("properties"), dict) else {}
        req = s.get("required") if isinstance(s.get("required"), list) else []
        for k, ps in props.items():
            if k in req and r.random() < 0.95 or r.random() < 0.5:
                out[k] = gen(r, root, ps, depth + 1)
        if r.random() < 0.2:
            ap = s.get("additionalProperties")
            out[r.choice(["extra", "zz"])] = gen(r, root, ap, depth + 1) if isinstance(ap, dict) else rand_any(r)
        return out
    if t == "array":
        items = s.get("items")
        lo = s.get("minItems", 0) if isinstance(s.get("minItems"), int) else 0
        n = max(0, lo + r.randrange(-1, 4))
        return [gen(r, root, items, depth + 1) if isinstance(items, dict) else rand_any(r)
                for _ in range(min(n, 6))]
    if t == "string":
        lo = s.get("minLength", 0) if isinstance(s.get("minLength"), int) else 0
        hi = s.get("maxLength", lo + 8) if isinstance(s.get("maxLength"), int) else lo + 8
        n = max(0, min(r.randrange(max(lo - 1, 0), max(lo, min(hi, lo + 20)) + 2), 40))
        return "".join(r.choice("abé中 ") for _ in range(n))
    if t in ("number", "integer"):
        lo = s.get("minimum", -100)
        hi = s.get("maximum", 100)
        lo = lo if isinstance(lo, (int, float)) and abs(lo) < 1e15 else -100
        hi = hi if isinstance(hi, (int, float)) and abs(hi) < 1e15 else 100
        x = r.uniform(lo - 2, hi + 2)
        return int(x) if t == "integer" or r.random() < 0.5 else x
    if t == "boolean":
        return r.random() < 0.5
    if t == "null":
        return None
    return rand_any(r)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--per-schema", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    r = random.Random(a.seed)
    schemas = list(EXTRA)
    for f in sorted(glob.glob(os.path.join(a.data, "kvv/walle_validator_cases/validator_cases/*/valid.jsonl"))):
        for line in open(f, encoding="utf-8"):
            if line.strip():
                schemas.append(strip(json.loads(line), "pattern"))  # pattern is not checked in C
    rows, labels = [], []
    for s in schemas:
        v = jsonschema.Draft202012Validator(s)
        for _ in range(a.per_schema):
            inst = gen(r, s, s)
            try:
                ok = v.is_valid(inst)
            except Exception:  # unresolvable refs, recursion: no ground truth
                continue
            rows.append(json.dumps({"schema": s, "instance": inst}, ensure_ascii=False))
            labels.append(1 if ok else 0)
    out = subprocess.run([a.batch], input=("\n".join(rows) + "\n").encode(), capture_output=True,
                         check=True).stdout.decode().split("\n")[:-1]
    bad = unknown = 0
    for row, want, got in zip(rows, labels, out):
        if got == "-1":
            unknown += 1
        if got != str(want):
            bad += 1
            if bad <= 5:
                print(f"python {want}, k3 {got}: {row[:300]}")
    n_valid = sum(labels)
    print(f"json_schema vs jsonschema {jsonschema.Draft202012Validator.__name__}: "
          f"{len(rows) - bad} of {len(rows)} verdicts agree ({n_valid} valid, "
          f"{len(rows) - n_valid} invalid; {unknown} unknown) over {len(schemas)} schemas")
    return 1 if bad or len(out) != len(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
