#!/usr/bin/env python3
"""Fallback for tools/make_random_model.py when numpy is missing but torch is there.

Same shapes, names, config, tokenizer copy and padding (sp_vocab, stdlib only);
random values from torch instead of numpy (speed benchmarks only care about shapes).
    python3 make_model_torch.py REPO_ROOT OUT_DIR TOKENIZER_FROM
"""
import ctypes
import importlib.util
import json
import os
import shutil
import struct
import sys
import types

import torch

repo, out, tok_from = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.join(repo, "bench", "serving"))
import sp_vocab  # noqa: E402

# Load CONFIG / tensor_specs / TOKENIZER_FILES from the tracked script without numpy:
# give it a stub numpy module just for the import.
sys.modules.setdefault("numpy", types.ModuleType("numpy"))
spec = importlib.util.spec_from_file_location("mrm", os.path.join(repo, "tools", "make_random_model.py"))
mrm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mrm)

config = dict(mrm.CONFIG)
config["tie_word_embeddings"] = True
os.makedirs(out, exist_ok=True)
specs = mrm.tensor_specs(config)
numel = lambda s: (s[0] * s[1]) if len(s) == 2 else s[0]  # noqa: E731
header, offset = {"__metadata__": {"format": "pt"}}, 0
for name, shape in specs:
    size = numel(shape) * 2
    header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
    offset += size
hb = json.dumps(header, separators=(",", ":")).encode()
hb += b" " * (-len(hb) % 8)
torch.manual_seed(0)
tmp = os.path.join(out, "model.safetensors.tmp")
with open(tmp, "wb") as f:
    f.write(struct.pack("<Q", len(hb)))
    f.write(hb)
    for name, shape in specs:
        if name.endswith("norm.weight"):
            t = 1.0 + 0.05 * torch.randn(shape, dtype=torch.float32)
        else:
            t = 0.02 * torch.randn(shape, dtype=torch.float32)
        t = t.to(torch.bfloat16).contiguous()
        f.write(ctypes.string_at(t.data_ptr(), t.numel() * 2))
os.replace(tmp, os.path.join(out, "model.safetensors"))
with open(os.path.join(out, "config.json"), "w") as f:
    json.dump(config, f, indent=2)
for name in mrm.TOKENIZER_FILES:
    src = os.path.join(tok_from, name)
    if os.path.exists(src):
        shutil.copyfile(src, os.path.join(out, name))
if os.path.exists(os.path.join(out, "tokenizer.model")):
    before, after = sp_vocab.pad_model_dir(out)
    print(f"tokenizer.model: {before} pieces padded to {after}")
print(f"wrote {out} (torch fallback): {sum(numel(s) for _, s in specs):,} parameters")
