#!/usr/bin/env python3
"""bench/cuda/torch_block.py — the PyTorch peer of bench_cuda_block: the same pre-LN block, the same
shapes and FLOP count, timed the same way.

  X → LayerNorm → Linear(h, 3h) → causal attention (a heads of h/a) → Linear(h, h) → dropout 0.1 → + X
    → LayerNorm → Linear(h, 4h) → GeLU (tanh) → Linear(4h, h) → dropout 0.1 → + · → Y

bf16 parameters and activations, forward + backward with a fixed dY, TP = 1, one GPU. Median of
`--iters` timed steps (CUDA events on the current stream) after 2 warm-up steps. FLOP per step:
72·T·h² + 12·T·s·h (bench_cuda_block's count; the attention GEMMs in full).

  torch_block.py [--hidden 4096] [--heads 32] [--seq 2048] [--batch 2] [--iters 10]
                 [--attention sdpa|flash|cudnn|math|unfused] [--compile]

Prints one line per run: "torch block: h 4096 … attention sdpa: median 8.86 ms, 522.3 TFLOP/s".
Without a GPU it says so and exits 0 (as bench_cuda_block does).
"""
import argparse
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--hidden', type=int, default=4096)
    ap.add_argument('--heads', type=int, default=32)
    ap.add_argument('--seq', type=int, default=2048)
    ap.add_argument('--batch', type=int, default=2)
    ap.add_argument('--iters', type=int, default=10)
    ap.add_argument('--attention', default='sdpa', choices=['sdpa', 'flash', 'cudnn', 'math', 'unfused'])
    ap.add_argument('--compile', action='store_true', help='torch.compile the block')
    a = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print('torch block: PyTorch is not installed here; skipped')
        return 0
    if not torch.cuda.is_available():
        print('torch block: no CUDA device; skipped')
        return 0
    h, nh, s, b = a.hidden, a.heads, a.seq, a.batch
    if h % nh:
        print(f'torch block: hidden {h} is not divisible by {nh} heads', file=sys.stderr)
        return 2
    d = h // nh
    dev, dt = 'cuda', torch.bfloat16
    torch.manual_seed(1)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = torch.nn.LayerNorm(h)
            self.qkv = torch.nn.Linear(h, 3 * h)
            self.proj = torch.nn.Linear(h, h)
            self.ln2 = torch.nn.LayerNorm(h)
            self.fc1 = torch.nn.Linear(h, 4 * h)
            self.fc2 = torch.nn.Linear(4 * h, h)

        def attend(self, q, k, v):
            if a.attention == 'unfused':  # the s × s probabilities in memory, as the unfused CUDA path
                sc = (q @ k.transpose(-2, -1)) / d ** 0.5
                mask = torch.ones(s, s, dtype=torch.bool, device=dev).triu(1)
                return torch.softmax(sc.masked_fill(mask, float('-inf')), dim=-1) @ v
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def forward(self, x):  # x: [b, s, h]
            q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
            q, k, v = (t.view(b, s, nh, d).transpose(1, 2) for t in (q, k, v))
            o = self.attend(q, k, v).transpose(1, 2).reshape(b, s, h)
            y1 = x + F.dropout(self.proj(o), 0.1, True)
            return y1 + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(y1)), approximate='tanh')), 0.1, True)

    blk = Block().to(dev, dt)
    step_fn = torch.compile(blk) if a.compile else blk
    x = torch.randn(b, s, h, device=dev, dtype=dt, requires_grad=True)
    dy = torch.randn(b, s, h, device=dev, dtype=dt)
    backends = {'flash': 'FLASH_ATTENTION', 'cudnn': 'CUDNN_ATTENTION', 'math': 'MATH'}

    def step():
        y = step_fn(x)
        y.backward(dy)

    def run():
        for _ in range(2):
            step()
        torch.cuda.synchronize()
        ms = []
        for _ in range(max(1, a.iters)):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            step()
            e1.record()
            e1.synchronize()
            ms.append(e0.elapsed_time(e1))
        return sorted(ms)

    if a.attention in backends:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(getattr(SDPBackend, backends[a.attention])):
            ms = run()
    else:
        ms = run()
    med = ms[len(ms) // 2]
    flop = 72.0 * b * s * h * h + 12.0 * b * s * s * h
    print(f'torch block: h {h}, heads {nh}, seq {s}, batch {b}, bf16, attention {a.attention}'
          f'{", torch.compile" if a.compile else ""}: median {med:.3f} ms over {len(ms)} '
          f'(min {ms[0]:.3f}, max {ms[-1]:.3f}), {flop / (med * 1e-3) / 1e12:.1f} TFLOP/s '
          f'on {torch.cuda.get_device_name()} (torch {torch.__version__})')
    return 0


if __name__ == '__main__':
    sys.exit(main())
