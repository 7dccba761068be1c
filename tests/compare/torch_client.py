"""Real-framework client for `shardalg-verify compare`: Megatron-style tensor-parallel
runs in PyTorch (gloo, CPU) that dump per-rank safetensors, a one-process reference
and a layout map, once correct and once per injected bug.

Run (Debian's torch, not the pyenv python):
    /usr/bin/python3 tests/compare/torch_client.py --out OUTROOT [--tp 2 4] [--seed 1] [--check]

For each TP size N and scenario it writes OUTROOT/<scenario>-tp<N>/ with
rank0..rank{N-1}.safetensors, reference.safetensors and map.json. All scenarios of
one N run inside one torch.multiprocessing spawn of N processes (one gloo group);
the dense reference runs in the parent meanwhile. `--check` then reads everything
back, reassembles each tensor by its map layout and compares with the reference
(correct runs must agree to 1e-5 normwise; bug runs print where they first differ).
Only torch and numpy are used; the safetensors format is written/read by hand.
"""
import argparse, json, math, os, re, socket, sys, time
from collections import OrderedDict
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

S, B, H, HEADS = 8, 2, 16, 4      # sequence, batch, hidden, attention heads
FFN, HD, EPS = 4 * H, H // HEADS, 1e-5
P = "decoder.layers.0."
SA, MLP = P + "self_attention.", P + "mlp."
SCENARIOS = [  # (directory name, model, bug)
    ("mlp-correct", "mlp", None), ("mlp-bias-before-reduce", "mlp", "bias-before-reduce"),
    ("mlp-loss-twice", "mlp", "loss-twice"), ("block-correct", "block", None),
    ("block-sp-norm-grad", "block", "sp-norm-grad"),
    ("block-forgotten-split", "block", "forgotten-split")]

# ----------------------------------------------------------------- safetensors I/O
def write_safetensors(path, tensors):
    """tensors: ordered {name: tensor}; data laid out back to back in that order."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        a = np.asarray(t.detach().cpu().numpy(), dtype="<f4", order="C")  # keeps 0-d shape []
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes()); off += a.nbytes
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((-(8 + len(hj))) % 8)            # 8 + N is a multiple of 8
    atomic_write(path, [len(hj).to_bytes(8, "little"), hj] + blobs)

def read_safetensors(path):
    """-> OrderedDict {name: np.ndarray} in data-offset order."""
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n].decode())
    header.pop("__metadata__", None)
    data, out = raw[8 + n:], OrderedDict()
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        assert e["dtype"] == "F32", (path, name, e["dtype"])
        b, en = e["data_offsets"]
        out[name] = np.frombuffer(data[b:en], dtype="<f4").reshape(e["shape"])
    return out

def atomic_write(path, chunks):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        for c in chunks:
            f.write(c)
        f.flush(); os.fsync(f.fileno())
    os.replace(tmp, path)

def write_json(path, obj):
    atomic_write(path, [(json.dumps(obj, indent=1) + "\n").encode()])

# ----------------------------------------------------------------- weights and data
def build_full(model, seed):
    """The FULL weights, input X and loss weights C, identical in every process.
    linear_qkv.weight rows are per head [q_h, k_h, v_h] (Megatron interleaving), so a
    contiguous dim-0 chunk holds whole heads."""
    g = torch.Generator().manual_seed(seed * 1000 + (1 if model == "mlp" else 2))
    rn = lambda *shape, sc=1.0: torch.randn(*shape, generator=g) * sc
    w = OrderedDict()
    if model == "block":
        w[P + "input_layernorm.weight"], w[P + "input_layernorm.bias"] = 1 + rn(H, sc=.1), rn(H, sc=.1)
        w[SA + "linear_qkv.weight"], w[SA + "linear_qkv.bias"] = rn(3 * H, H, sc=H ** -.5), rn(3 * H, sc=.1)
        w[SA + "linear_proj.weight"], w[SA + "linear_proj.bias"] = rn(H, H, sc=H ** -.5), rn(H, sc=.1)
        w[P + "pre_mlp_layernorm.weight"], w[P + "pre_mlp_layernorm.bias"] = 1 + rn(H, sc=.1), rn(H, sc=.1)
    w[MLP + "linear_fc1.weight"], w[MLP + "linear_fc1.bias"] = rn(FFN, H, sc=H ** -.5), rn(FFN, sc=.1)
    w[MLP + "linear_fc2.weight"], w[MLP + "linear_fc2.bias"] = rn(H, FFN, sc=FFN ** -.5), rn(H, sc=.1)
    return w, rn(S, B, H), rn(S, B, H)

def shard_dim(name):
    """Which dim of the stored parameter tensor parallelism splits (None: replicated)."""
    if re.search(r"linear_(qkv|fc1)\.(weight|bias)$", name): return 0
    if re.search(r"linear_(proj|fc2)\.weight$", name): return 1
    return None

# ----------------------------------------------------------------- dump recorder
class Dump:
    """Records tensors in execution order; leaf gradients in the order backward
    produces them (a hook on each leaf notes when its gradient arrives)."""
    def __init__(self):
        self.t, self.leaves, self.grad_order = OrderedDict(), OrderedDict(), []
    def leaf(self, name, x):
        """A leaf (parameter or input) that requires grad: dump its value at first use."""
        x = x.detach().clone().requires_grad_(True)
        self.t[name], self.leaves[name] = x.detach().clone(), x
        x.register_hook(lambda g, n=name: self.grad_order.append(n) if n not in self.grad_order else None)
        return x
    def act(self, name, x):
        self.t[name] = x.detach().clone()
    def grads(self):
        for n in self.grad_order + [n for n in self.leaves if n not in self.grad_order]:
            self.t[n + ".grad"] = self.leaves[n].grad.detach().clone()
        return self.t

# ----------------------------------------------------------------- communication
# All collectives use the default (tp) group. gloo in torch 1.13 has no
# reduce_scatter, so it is all_reduce followed by taking this rank's dim-0 chunk.
def _all_reduce(x):
    x = x.detach().clone().contiguous(); dist.all_reduce(x); return x

def _all_gather0(x):
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.detach().contiguous()); return torch.cat(parts, 0)

def _reduce_scatter0(x):
    return _all_reduce(x).chunk(dist.get_world_size(), 0)[dist.get_rank()].contiguous()

class CopyToTP(torch.autograd.Function):          # Megatron's f
    @staticmethod
    def forward(ctx, x): return x.view_as(x)
    @staticmethod
    def backward(ctx, g): return _all_reduce(g)

class ReduceFromTP(torch.autograd.Function):      # Megatron's g
    @staticmethod
    def forward(ctx, x): return _all_reduce(x)
    @staticmethod
    def backward(ctx, g): return g

class GatherSeq(torch.autograd.Function):         # SP: all_gather dim 0 / reduce_scatter
    @staticmethod
    def forward(ctx, x): return _all_gather0(x)
    @staticmethod
    def backward(ctx, g): return _reduce_scatter0(g)

class ScatterSeq(torch.autograd.Function):        # SP: reduce_scatter dim 0 / all_gather
    @staticmethod
    def forward(ctx, x): return _reduce_scatter0(x)
    @staticmethod
    def backward(ctx, g): return _all_gather0(g)

# ----------------------------------------------------------------- shared math
gelu = lambda x: F.gelu(x, approximate="tanh")

def causal_attention(qkv, nh):
    """qkv [s, b, nh*3*HD], rows per head [q, k, v] -> context [s, b, nh*HD]."""
    s, b = qkv.shape[:2]
    q, k, v = qkv.view(s, b, nh, 3, HD).permute(3, 1, 2, 0, 4).unbind(0)   # each [b, nh, s, HD]
    scores = q @ k.transpose(-1, -2) / math.sqrt(HD)
    mask = torch.ones(s, s, dtype=torch.bool).triu(1)
    p = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
    return (p @ v).permute(2, 0, 1, 3).reshape(s, b, nh * HD)

# ----------------------------------------------------------------- tensor-parallel runs
def tp_mlp(w, X, C, bug, r, n):
    d = Dump()
    x = d.leaf(P + "input", X)                                     # R: every rank, whole
    W1 = d.leaf(MLP + "linear_fc1.weight", w[MLP + "linear_fc1.weight"].chunk(n, 0)[r])
    b1 = d.leaf(MLP + "linear_fc1.bias", w[MLP + "linear_fc1.bias"].chunk(n, 0)[r])
    h1 = F.linear(CopyToTP.apply(x), W1, b1); d.act(MLP + "linear_fc1.output", h1)
    a = gelu(h1); d.act(MLP + "activation_func.output", a)
    W2 = d.leaf(MLP + "linear_fc2.weight", w[MLP + "linear_fc2.weight"].chunk(n, 1)[r])
    b2 = d.leaf(MLP + "linear_fc2.bias", w[MLP + "linear_fc2.bias"])
    z = F.linear(a, W2)
    if bug == "bias-before-reduce":
        y = ReduceFromTP.apply(z + b2)                             # BUG: n copies of the bias
    else:
        y = ReduceFromTP.apply(z) + b2                             # bias once, after the reduce
    d.act(MLP + "linear_fc2.output", y); d.act(P + "output", y)
    loss = (y * C).sum() / y.numel()
    if bug == "loss-twice":
        loss = loss / n                                            # BUG: averaged over tp again
    d.act("loss", loss)
    loss.backward()
    return d.grads()

def tp_block(w, X, C, bug, r, n):
    d = Dump()
    if bug == "forgotten-split":   # BUG: the batch's sequence is not split (input and
        xs, cs = X, C              # its loss weights come unsplit from the same loader)
    else:
        xs, cs = X.chunk(n, 0)[r], C.chunk(n, 0)[r]
    x = d.leaf(P + "input", xs)
    sh = lambda name: w[name].chunk(n, shard_dim(name))[r] if shard_dim(name) is not None else w[name]
    p = lambda name: d.leaf(name, sh(name))

    def column_row(inp, col, row, act_fn, mid_name):
        """all_gather(seq) -> column-parallel -> act -> row-parallel -> reduce_scatter -> +bias"""
        hcol = F.linear(GatherSeq.apply(inp), p(col + ".weight"), p(col + ".bias"))
        d.act(col + ".output", hcol)
        a = act_fn(hcol); d.act(mid_name, a)
        Wr, br = p(row + ".weight"), p(row + ".bias")
        out = ScatterSeq.apply(F.linear(a, Wr)) + br                  # bias after the reduce_scatter
        d.act(row + ".output", out)
        return out

    ln1 = F.layer_norm(x, (H,), p(P + "input_layernorm.weight"), p(P + "input_layernorm.bias"), EPS)
    d.act(P + "input_layernorm.output", ln1)
    h1 = x + column_row(ln1, SA + "linear_qkv", SA + "linear_proj",
                        lambda qkv: causal_attention(qkv, HEADS // n), SA + "core_attention.output")
    ln2 = F.layer_norm(h1, (H,), p(P + "pre_mlp_layernorm.weight"), p(P + "pre_mlp_layernorm.bias"), EPS)
    d.act(P + "pre_mlp_layernorm.output", ln2)
    y = h1 + column_row(ln2, MLP + "linear_fc1", MLP + "linear_fc2", gelu, MLP + "activation_func.output")
    d.act(P + "output", y)
    loss_local = (y * cs).sum() / (S * B * H)                      # / the GLOBAL numel
    d.act("loss", _all_reduce(loss_local))                         # value: sum over tp
    loss_local.backward()                                          # grads from the local part
    if bug != "sp-norm-grad":      # Megatron's SP grad all-reduce (skipped: Megatron-LM #1446)
        for name in d.leaves:
            if name != P + "input" and shard_dim(name) is None:
                dist.all_reduce(d.leaves[name].grad)
    return d.grads()

def worker(rank, n, port, seed, out, scenarios):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=n, timeout=timedelta(seconds=60))
    torch.manual_seed(seed)
    full = {m: build_full(m, seed) for m in ("mlp", "block")}
    for scen, model, bug in scenarios:
        w, X, C = full[model]
        t = (tp_mlp if model == "mlp" else tp_block)(w, X, C, bug, rank, n)
        write_safetensors(os.path.join(out, f"{scen}-tp{n}", f"rank{rank}.safetensors"), t)
    dist.barrier()
    dist.destroy_process_group()

# ----------------------------------------------------------------- dense reference
def reference(model, seed):
    """The same model on one process: whole tensors, plain functional ops, autograd."""
    w, X, C = build_full(model, seed)
    d = Dump()
    x = d.leaf(P + "input", X)
    def lin(inp, mod):
        out = F.linear(inp, d.leaf(mod + ".weight", w[mod + ".weight"]), d.leaf(mod + ".bias", w[mod + ".bias"]))
        d.act(mod + ".output", out); return out
    def ln(inp, mod):
        out = F.layer_norm(inp, (H,), d.leaf(mod + ".weight", w[mod + ".weight"]),
                           d.leaf(mod + ".bias", w[mod + ".bias"]), EPS)
        d.act(mod + ".output", out); return out
    def mlp(inp):
        a = gelu(lin(inp, MLP + "linear_fc1")); d.act(MLP + "activation_func.output", a)
        return lin(a, MLP + "linear_fc2")
    if model == "mlp":
        y = mlp(x)
    else:
        ctx = causal_attention(lin(ln(x, P + "input_layernorm"), SA + "linear_qkv"), HEADS)
        d.act(SA + "core_attention.output", ctx)
        h1 = x + lin(ctx, SA + "linear_proj")
        y = h1 + mlp(ln(h1, P + "pre_mlp_layernorm"))
    d.act(P + "output", y)
    loss = (y * C).sum() / y.numel(); d.act("loss", loss)
    loss.backward()
    return d.grads()

# ----------------------------------------------------------------- layout maps
def mlp_map(n):
    fc1, fc2 = MLP + "linear_fc1", MLP + "linear_fc2"
    rules = [(P + "input", "R"), (P + "input.grad", "R"),
             (fc1 + ".weight", "Shard(0)"), (fc1 + ".bias", "Shard(0)"),
             (fc1 + ".weight.grad", "Shard(0)"), (fc1 + ".bias.grad", "Shard(0)"),
             (fc1 + ".output", "Shard(-1)"), (MLP + "activation_func.output", "Shard(-1)"),
             (fc2 + ".weight", "Shard(-1)"), (fc2 + ".weight.grad", "Shard(-1)"),
             (fc2 + ".bias", "R"), (fc2 + ".bias.grad", "R"), (fc2 + ".output", "R"),
             (P + "output", "R"), ("loss", "R")]
    return {"mesh": {"tp": n}, "rules": [{"match": m, "layout": {"tp": l}} for m, l in rules]}

def megatron_sp_rules():
    """Python mirror of the C++ `megatron-sp` preset (used only by --check)."""
    ln = ["*.input_layernorm", "*.pre_mlp_layernorm"]
    rb = ["*.linear_proj.bias", "*.linear_fc2.bias"]
    rules = [(m + ".output", "Shard(0)") for m in ln]
    rules += [(m + ".*.grad", "Partial->R") for m in ln] + [(m + ".*", "R") for m in ln]
    rules += [(m + ".grad", "Partial->R") for m in rb] + [(m, "R") for m in rb]
    rules += [(f"*.{m}.{p}*", "Shard(0)") for m in ("linear_qkv", "linear_fc1") for p in ("weight", "bias")]
    rules += [(f"*.{m}.weight*", "Shard(-1)") for m in ("linear_proj", "linear_fc2")]
    rules += [(m, "Shard(-1)") for m in ("*.linear_qkv.output", "*.core_attention.output",
                                         "*.linear_fc1.output", "*.activation_func.output")]
    rules += [(m, "Shard(0)") for m in ("*.input", "*.input.grad", "*.linear_proj.output",
                                        "*.linear_fc2.output", "decoder.layers.*.output")]
    return rules + [("loss", "R")]

def layout_of(name, m):
    rules = megatron_sp_rules() if m.get("preset") == "megatron-sp" else \
        [(r["match"], r["layout"]["tp"]) for r in m["rules"]]
    for glob, lay in rules:   # '*' matches any run of characters, dots included
        if re.fullmatch(".*".join(re.escape(s) for s in glob.split("*")), name):
            return lay
    raise KeyError(f"no layout rule matches {name!r}")

# ----------------------------------------------------------------- self-check
def rel(a, b):
    return float(np.linalg.norm((a - b).astype(np.float64)) / max(np.linalg.norm(b.astype(np.float64)), 1e-30))

def assemble(parts, lay):
    """-> (whole tensor or None, note). R/Partial->R: rank 0 if all ranks agree."""
    if lay in ("R", "Partial->R"):
        worst = max(rel(p, parts[0]) if p.shape == parts[0].shape else np.inf for p in parts)
        return (parts[0], "") if worst <= 1e-6 else (None, f"ranks disagree (max rel {worst:.2e})")
    if lay == "Partial":
        return np.sum(parts, axis=0), ""
    return np.concatenate(parts, axis=int(lay[6:-1])), ""

def check(out, tps):
    worst, failures = 0.0, []
    for n in tps:
        for scen, model, bug in SCENARIOS:
            dd = os.path.join(out, f"{scen}-tp{n}")
            m = json.load(open(os.path.join(dd, "map.json")))
            ranks = [read_safetensors(os.path.join(dd, f"rank{r}.safetensors")) for r in range(n)]
            ref = read_safetensors(os.path.join(dd, "reference.safetensors"))
            names = [k for k in ranks[0] if not k.endswith(".grad")] + [k for k in ranks[0] if k.endswith(".grad")]
            assert set(names) == set(ref), (scen, set(names) ^ set(ref))
            rows = []
            for k in names:
                lay = layout_of(k, m)
                whole, note = assemble([rk[k] for rk in ranks], lay)
                if whole is not None and whole.shape != ref[k].shape:
                    whole, note = None, f"shape {list(whole.shape)} vs reference {list(ref[k].shape)}"
                e = rel(whole, ref[k]) if whole is not None else np.inf
                rows.append((k, lay, e, note))
            print(f"\n== {scen}-tp{n}")
            if bug is None:
                for k, lay, e, note in rows:
                    print(f"  {k:55s} {lay:11s} {e:9.2e} {note}")
                    worst = max(worst, e)
                    if not e <= 1e-5:
                        failures.append(f"{scen}-tp{n}: {k} rel {e:.2e} {note}")
                continue
            bad = [row for row in rows if not row[2] <= 1e-5]
            if not bad:
                failures.append(f"{scen}-tp{n}: the bug left no trace"); continue
            k, lay, e, note = bad[0]
            print(f"  first difference: {k} [{lay}] rel {e:.3g} {note}")
            print(f"  all differing ({len(bad)}/{len(rows)}): " + ", ".join(b[0] for b in bad))
            diagnose(bug, n, ranks, ref, bad)
    print(f"\nworst correct-run relative error: {worst:.2e}")
    if failures:
        raise RuntimeError("self-check failed:\n  " + "\n  ".join(failures))

def diagnose(bug, n, ranks, ref, bad):
    if bug == "loss-twice":
        print(f"  loss / reference loss = {float(ranks[0]['loss'] / ref['loss']):.6f} (1/N = {1 / n:.6f})")
        g = MLP + "linear_fc1.weight.grad"
        whole = np.concatenate([r[g] for r in ranks], 0)
        print(f"  |{g}| / reference = {np.linalg.norm(whole) / np.linalg.norm(ref[g]):.6f}")
    elif bug == "bias-before-reduce":
        k, bias = MLP + "linear_fc2.output", ref[MLP + "linear_fc2.bias"]
        print(f"  rel err of (output - reference) vs (N-1)*bias in every row: "
              f"{rel(ranks[0][k] - ref[k], np.broadcast_to((n - 1) * bias, ref[k].shape)):.2e}")
    elif bug == "sp-norm-grad":
        for k in (P + "input_layernorm.weight.grad", P + "pre_mlp_layernorm.bias.grad",
                  SA + "linear_proj.bias.grad", MLP + "linear_fc2.bias.grad"):
            print(f"  {k}: rank0 vs rank1 rel {rel(ranks[0][k], ranks[1][k]):.2e}; "
                  f"sum over ranks vs reference rel {rel(np.sum([r[k] for r in ranks], 0), ref[k]):.2e}")
    elif bug == "forgotten-split":
        print(f"  per-rank {P}input shape {list(ranks[0][P + 'input'].shape)} "
              f"(expected chunk [{S // n}, {B}, {H}]; whole is [{S}, {B}, {H}])")

# ----------------------------------------------------------------- driver
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tp", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--check", action="store_true", help="self-check after writing")
    a = ap.parse_args()
    for n in a.tp:
        if n < 1 or n > 4 or HEADS % n or S % n or FFN % n:
            sys.exit(f"torch_client: tp {n} unsupported (needs 1..4 dividing heads={HEADS}, s={S})")
    torch.set_num_threads(1); torch.manual_seed(a.seed)
    t0 = time.time()
    refs = None
    for n in a.tp:
        for scen, _, _ in SCENARIOS:
            os.makedirs(os.path.join(a.out, f"{scen}-tp{n}"), exist_ok=True)
        ctx = mp.spawn(worker, args=(n, free_port(), a.seed, a.out, SCENARIOS), nprocs=n, join=False)
        if refs is None:   # the dense reference, computed while the ranks run
            refs = {m: reference(m, a.seed) for m in ("mlp", "block")}
        for scen, model, _ in SCENARIOS:
            dd = os.path.join(a.out, f"{scen}-tp{n}")
            write_safetensors(os.path.join(dd, "reference.safetensors"), refs[model])
            write_json(os.path.join(dd, "map.json"), mlp_map(n) if model == "mlp"
                       else {"preset": "megatron-sp", "mesh": {"tp": n}})
        while not ctx.join():
            pass
    print(f"wrote {len(a.tp) * len(SCENARIOS)} scenario directories under {a.out} in {time.time() - t0:.1f} s")
    if a.check:
        check(a.out, a.tp)

if __name__ == "__main__":
    try:
        main()
    except Exception as e:   # includes a rank's failure re-raised by torch.multiprocessing
        print(f"torch_client: FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
