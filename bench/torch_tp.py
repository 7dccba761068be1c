#!/usr/bin/python3
"""bench/torch_tp.py — PyTorch as a peer of bench/mlp: the same tensor-parallel MLP and
transformer block (fp32, TP = 2, m = 2048 tokens, h = 1024, ffn = 4h, GeLU-tanh, biases; block:
16 heads, sequences of 512, pre-LN), forward + backward with dY = Y, written as Megatron-LM
writes them: column- and row-parallel weights with the f / g autograd functions (identity /
all-reduce and back), the gloo backend, one process per rank pinned to its core, one thread each.

    bench/torch_tp.py --out FILE.json [--reps 5] [--iters 3]

Each repetition times `iters` steps between barriers (the slowest rank's time, as bench/common.hpp)
and keeps their median; FILE gets the repetitions' medians in ms per case. bench/run runs it when
Debian's python3-torch is installed, with the same allocator setting as the shardalg rows.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

M, H, FFN, SEQ, HEADS = 2048, 1024, 4096, 512, 16


class CopyToRegion(torch.autograd.Function):  # Megatron's f: identity forward, all-reduce backward
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous()
        dist.all_reduce(g)
        return g


class ReduceFromRegion(torch.autograd.Function):  # Megatron's g: all-reduce forward, identity backward
    @staticmethod
    def forward(ctx, x):
        x = x.contiguous()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g


def param(*shape, scale=0.02):
    return (torch.randn(*shape) * scale).requires_grad_()


class Mlp:
    def __init__(self, p):
        self.w1, self.b1 = param(H, FFN // p), param(FFN // p)
        self.w2, self.b2 = param(FFN // p, H), param(H)

    def __call__(self, x):
        h = torch.addmm(self.b1, CopyToRegion.apply(x), self.w1)
        a = F.gelu(h, approximate="tanh")
        return ReduceFromRegion.apply(a @ self.w2) + self.b2


class Block:
    def __init__(self, p):
        self.hl, self.d = HEADS // p, H // HEADS
        self.ln1 = (torch.ones(H, requires_grad=True), torch.zeros(H, requires_grad=True))
        self.ln2 = (torch.ones(H, requires_grad=True), torch.zeros(H, requires_grad=True))
        self.wqkv, self.bqkv = param(H, 3 * self.hl * self.d), param(3 * self.hl * self.d)
        self.wo, self.bo = param(self.hl * self.d, H), param(H)
        self.mlp = Mlp(p)
        self.mask = torch.triu(torch.ones(SEQ, SEQ, dtype=torch.bool), diagonal=1)

    def attention(self, x):
        qkv = torch.addmm(self.bqkv, CopyToRegion.apply(x), self.wqkv)
        b, hl, d = M // SEQ, self.hl, self.d
        q, k, v = (qkv[:, i * hl * d:(i + 1) * hl * d].reshape(b, SEQ, hl, d).transpose(1, 2) for i in range(3))
        s = (q @ k.transpose(-1, -2)) * (1.0 / d ** 0.5)
        p = torch.softmax(s.masked_fill(self.mask, float("-inf")), dim=-1)
        o = (p @ v).transpose(1, 2).reshape(M, hl * d)
        return ReduceFromRegion.apply(o @ self.wo) + self.bo

    def __call__(self, x):
        y1 = x + self.attention(F.layer_norm(x, (H,), *self.ln1))
        return y1 + self.mlp(F.layer_norm(y1, (H,), *self.ln2))


def step(layer, x):
    y = layer(x)
    y.backward(y.detach())  # dY = Y, as bench/mlp
    x.grad = None


def worker(rank, world, port, reps, iters, out):
    os.sched_setaffinity(0, {rank % os.cpu_count()})
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(1 + rank)
    results = {}
    for name, make in (("mlp", Mlp), ("block", Block)):
        layer = make(world)
        x = torch.randn(M, H, requires_grad=True)
        step(layer, x)  # warm-up
        medians = []
        for _ in range(reps):
            times = []
            for _ in range(iters):
                dist.barrier()
                t0 = time.perf_counter()
                step(layer, x)
                t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                times.append(t.item() * 1e3)
            medians.append(statistics.median(times))
        results[name] = medians
    if rank == 0:
        results["torch"] = torch.__version__
        with open(out, "w") as f:
            json.dump(results, f)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--world", type=int, default=2)
    a = ap.parse_args()
    port = 29500 + os.getpid() % 1000
    mp.spawn(worker, args=(a.world, port, a.reps, a.iters, a.out), nprocs=a.world, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
