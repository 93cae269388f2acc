"""k3dump - read `k3 dump` files (HDF5) for drafter training (EAGLE-3, DFlash, DSpark).

File layout (src/io/h5_dump.h): token-major, samples concatenated.
  /tokens int32 [N], /loss_mask uint8 [N], /sample_offsets int64 [S+1], /sample_ids [S],
  /hidden/layer_{L} [N, H] and /hidden/final [N, H]: uint16 holding bfloat16 bits
  (attribute dtype="bfloat16") or float32.

Sample i is rows sample_offsets[i]:sample_offsets[i+1] of every dataset: one contiguous
read. The file is opened lazily in whichever process reads, so DataLoader workers
(fork) each get their own handle (HDF5 handles must not cross a fork; HDF5 also holds a
global lock, so parallel reading wants processes, not threads).

numpy-only API: DumpFile(path).sample(i) -> dict of numpy arrays (bf16 as uint16).
PyTorch API:    HiddenStateDataset(path, layout="eagle3"|"dspark"|"raw").
"""
import os

import h5py
import numpy as np

__all__ = ["DumpFile", "HiddenStateDataset", "bf16_to_float32", "collate_pad"]


def bf16_to_float32(u16):
    """uint16 bfloat16 bits -> float32 (exact)."""
    return (np.asarray(u16, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _str(v):
    return v.decode() if isinstance(v, bytes) else str(v)


class DumpFile:
    """A dump file, opened on first use in the current process."""

    def __init__(self, path, rdcc_nbytes=64 << 20):
        self.path = path
        self.rdcc_nbytes = rdcc_nbytes
        self._f = None
        self._pid = None
        f = self._file()
        if int(f.attrs.get("complete", 0)) != 1:
            raise ValueError(f"{path} is not complete (k3 dump was interrupted: re-run it to finish)")
        self.offsets = f["sample_offsets"][:]
        self.attrs = {k: (_str(v) if isinstance(v, (bytes, str)) else v) for k, v in f.attrs.items()}
        self.dtype = _str(f.attrs["dtype"])
        names = list(f["hidden"].keys())
        self.layers = sorted(int(n[6:]) for n in names if n.startswith("layer_"))
        self.has_final = "final" in names
        self.hidden_size = int(f.attrs["hidden_size"])
        self.close()   # do not carry an open handle into forked workers

    def _file(self):
        if self._f is None or self._pid != os.getpid():
            self._f = h5py.File(self.path, "r", rdcc_nbytes=self.rdcc_nbytes)
            self._pid = os.getpid()
        return self._f

    def close(self):
        if self._f is not None and self._pid == os.getpid():
            self._f.close()
        self._f = None

    def __len__(self):
        return len(self.offsets) - 1

    def sample_ids(self):
        f = self._file()
        return [_str(x) for x in f["sample_ids"][:]] if "sample_ids" in f else None

    def sample(self, i, layers=None, final=True):
        """{"input_ids", "loss_mask", "layer_L"..., "final"} for sample i; hidden states
        as stored ([seq, H] uint16 bf16 bits, or float32)."""
        if not 0 <= i < len(self):
            raise IndexError(i)
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        f = self._file()
        out = {"input_ids": f["tokens"][a:b], "loss_mask": f["loss_mask"][a:b]}
        for L in self.layers if layers is None else layers:
            out[f"layer_{L}"] = f[f"hidden/layer_{L}"][a:b]
        if final and self.has_final:
            out["final"] = f["hidden/final"][a:b]
        return out


try:
    import torch
    from torch.utils.data import Dataset
except ImportError:   # the numpy API above works without PyTorch
    torch = None
    Dataset = object


class HiddenStateDataset(Dataset):
    """Per-sample tensors in the layout the trainers expect (research/serving.md §6.2):

    layout="eagle3": input_ids [seq] int64, loss_mask [seq], aux_hidden_state [1, seq, L*H]
                     (the chosen layers concatenated in `layers` order), hidden_state [1, seq, H]
                     (the final state);
    layout="dspark" (and DFlash): input_ids, loss_mask, hidden_states [1, seq, L*H],
                     target_last_hidden_states [1, seq, H];
    layout="raw":    input_ids, loss_mask, and one [seq, H] tensor per dataset.
    Hidden states come as torch.bfloat16 (a bf16 file, viewed, no copy of the bits) or
    torch.float32.
    """

    def __init__(self, path, layout="eagle3", layers=None, rdcc_nbytes=64 << 20):
        if torch is None:
            raise ImportError("HiddenStateDataset needs PyTorch (DumpFile works without it)")
        self.file = DumpFile(path, rdcc_nbytes=rdcc_nbytes)
        self.layout = layout
        self.layers = list(self.file.layers if layers is None else layers)
        missing = [L for L in self.layers if L not in self.file.layers]
        if missing:
            raise ValueError(f"{path} has no layers {missing} (it has {self.file.layers})")
        if layout in ("eagle3", "dspark") and not self.file.has_final:
            raise ValueError(f"layout {layout!r} needs the final state: dump with --final")
        if layout not in ("eagle3", "dspark", "raw"):
            raise ValueError(f"unknown layout {layout!r}")

    def __len__(self):
        return len(self.file)

    def _t(self, a):
        a = np.ascontiguousarray(a)
        if self.file.dtype == "bfloat16":   # via int16: older torch has no uint16 tensors
            return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(a)

    def __getitem__(self, i):
        s = self.file.sample(i, self.layers, final=True)
        out = {"input_ids": torch.from_numpy(s["input_ids"].astype(np.int64)),
               "loss_mask": torch.from_numpy(s["loss_mask"].astype(np.int64))}
        if self.layout == "raw":
            for k, v in s.items():
                if k not in out:
                    out[k] = self._t(v)
            return out
        aux = torch.cat([self._t(s[f"layer_{L}"]) for L in self.layers], dim=-1).unsqueeze(0)
        last = self._t(s["final"]).unsqueeze(0)
        if self.layout == "eagle3":
            out["aux_hidden_state"] = aux
            out["hidden_state"] = last
        else:
            out["hidden_states"] = aux
            out["target_last_hidden_states"] = last
        return out


def collate_pad(batch, pad_id=0):
    """Pads a list of samples to the longest one (right padding); adds attention_mask."""
    n = max(len(b["input_ids"]) for b in batch)
    out = {}
    for k in batch[0]:
        xs = [b[k] for b in batch]
        seq_dim = 0 if xs[0].dim() == 1 else (1 if xs[0].dim() == 3 else 0)
        padded = []
        for x in xs:
            pad = n - x.shape[seq_dim]
            if pad:
                shape = list(x.shape)
                shape[seq_dim] = pad
                fill = pad_id if k == "input_ids" else 0
                x = torch.cat([x, torch.full(shape, fill, dtype=x.dtype)], dim=seq_dim)
            padded.append(x)
        out[k] = torch.stack(padded) if seq_dim == 0 else torch.cat(padded, dim=0)
    out["attention_mask"] = torch.stack(
        [torch.arange(n) < len(b["input_ids"]) for b in batch]).long()
    return out
