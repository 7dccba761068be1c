"""Runs the ten-line PyTorch dump of docs/compare.md on a small model and reads the file back with
`shardalg-verify compare` (one rank against itself: every tensor must be found and agree).

    python3 doc_snippet.py --doc docs/compare.md --exe build/tools/shardalg-verify --dir /tmp/x
"""
import argparse
import json
import os
import re
import subprocess
import sys

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--doc", required=True)
ap.add_argument("--exe", required=True)
ap.add_argument("--dir", required=True)
a = ap.parse_args()

text = open(a.doc, encoding="utf-8").read()
blocks = re.findall(r"```python\n(.*?)```", text, re.S)
if not blocks:
    sys.exit("no ```python block in " + a.doc)
code = blocks[0]
marker = "# … forward"
if marker not in code:
    sys.exit("the snippet has no line starting with '" + marker + "'")
before, after = code.split(marker, 1)
after = after.split("\n", 1)[1]

os.makedirs(os.path.join(a.dir, "dump"), exist_ok=True)
os.chdir(a.dir)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
env = {"model": model, "rank": 0}
exec(before, env)
loss = model(torch.randn(5, 8)).square().mean()
loss.backward()
exec(after, env)

with open("map.json", "w") as f:
    json.dump({"mesh": {"tp": 1}, "rules": [{"match": "*", "layout": {"tp": "R"}}]}, f)
r = subprocess.run([a.exe, "compare", "--ranks", "dump/rank0.safetensors", "--reference", "dump/rank0.safetensors",
                    "--map", "map.json"], capture_output=True, text=True)
print(r.stdout, r.stderr)
# 2 weights + 2 biases, 3 module outputs, 4 gradients
if r.returncode != 0 or "all 11 tensors agree with the reference" not in r.stdout:
    sys.exit("compare did not read the snippet's dump as expected (exit %d)" % r.returncode)
