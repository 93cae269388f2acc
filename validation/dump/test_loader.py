"""test_loader - the PyTorch side of validation/dump/k3dump.py on a real `k3 dump` file.

  python3 test_loader.py K3 WORKDIR     (a Python with torch and h5py, e.g. Debian's
                                         python3-torch and python3-h5py)

Dumps a synthetic k3-tiny model's layers 1, 4, 7 and the final state (bf16 and float32),
then reads them through HiddenStateDataset in the EAGLE-3, DSpark and raw layouts with a
2-worker DataLoader (the file is opened after the fork) and checks shapes, dtypes and
values against the numpy reader. Prints 'N passed, N failed'.
"""
import json
import os
import random
import subprocess
import sys

import numpy as np
import torch
from torch.utils.data import DataLoader

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import k3dump  # noqa: E402

passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {what}", flush=True)


def main():
    k3, work = os.path.abspath(sys.argv[1]), sys.argv[2]
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "k3-tiny")
    if not os.path.exists(os.path.join(model, "config.json")):
        subprocess.run([k3, "gen-weights", "--model-config", os.path.join(ROOT, "configs/models/k3-tiny/config.json"),
                        "--out", model], check=True, capture_output=True)
    inp = os.path.join(work, "loader.jsonl")
    r = random.Random(5)
    with open(inp, "w") as f:
        for i in range(9):
            f.write(json.dumps({"id": f"q{i}", "prompt_ids": [r.randrange(1024) for _ in range(r.randint(3, 40))]}) + "\n")
    files = {}
    for dtype in ["bfloat16", "float32"]:
        out = os.path.join(work, f"loader-{dtype}.h5")
        for p in [out, out + ".journal"]:
            if os.path.exists(p):
                os.remove(p)
        subprocess.run([k3, "dump", "--model", model, "--input", inp, "--out", out, "--layers", "1,4,7", "--final",
                        "--dtype", dtype, "--log-level", "warn", "--threads", "1"], check=True, capture_output=True)
        files[dtype] = out

    for dtype, path in files.items():
        ref = k3dump.DumpFile(path)
        tdt = torch.bfloat16 if dtype == "bfloat16" else torch.float32
        for layout in ["eagle3", "dspark", "raw"]:
            ds = k3dump.HiddenStateDataset(path, layout=layout)
            check(len(ds) == 9, f"{dtype} {layout}: length")
            loader = DataLoader(ds, batch_size=None, shuffle=False, num_workers=2)
            for i, s in enumerate(loader):
                n = ref.offsets[i + 1] - ref.offsets[i]
                want = ref.sample(i)
                check(s["input_ids"].dtype == torch.int64 and s["input_ids"].shape == (n,), f"{layout} ids {i}")
                check(torch.equal(s["input_ids"], torch.from_numpy(want["input_ids"].astype(np.int64))), f"ids {i}")
                if layout == "raw":
                    x = s["layer_4"]
                    check(x.dtype == tdt and x.shape == (n, 256), f"raw layer_4 {i}: {x.dtype} {tuple(x.shape)}")
                    got = x.float().numpy()
                else:
                    aux = s["aux_hidden_state" if layout == "eagle3" else "hidden_states"]
                    last = s["hidden_state" if layout == "eagle3" else "target_last_hidden_states"]
                    check(aux.shape == (1, n, 3 * 256) and aux.dtype == tdt, f"{layout} aux {i}: {tuple(aux.shape)}")
                    check(last.shape == (1, n, 256) and last.dtype == tdt, f"{layout} last {i}")
                    got = aux[0, :, 256:512].float().numpy()     # the second layer (4)
                    fin = last[0].float().numpy()
                    wf = want["final"]
                    wf = k3dump.bf16_to_float32(wf) if dtype == "bfloat16" else wf
                    check(np.array_equal(fin, wf), f"{layout} final {i}")
                w4 = want["layer_4"]
                w4 = k3dump.bf16_to_float32(w4) if dtype == "bfloat16" else w4
                check(np.array_equal(got, w4), f"{dtype} {layout} layer_4 values {i}")
        # padded batches for a trainer
        ds = k3dump.HiddenStateDataset(path, layout="eagle3")
        b = next(iter(DataLoader(ds, batch_size=4, collate_fn=k3dump.collate_pad, num_workers=2)))
        longest = max(int(ref.offsets[i + 1] - ref.offsets[i]) for i in range(4))
        check(b["input_ids"].shape == (4, longest) and b["aux_hidden_state"].shape == (4, longest, 768)
              and b["attention_mask"].sum() == int(ref.offsets[4]), f"{dtype} collate_pad")
    try:
        k3dump.HiddenStateDataset(files["float32"], layers=[2])
        check(False, "a layer that is not in the file is refused")
    except ValueError as e:
        check("no layers [2]" in str(e), "a layer that is not in the file is refused")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
