#!/usr/bin/env python3
"""The tables of docs/course/25_memory_widget.md: memory per GPU of a training setting, the
Ultra-Scale Playbook's memory widget as tables.

  formulas   Megatron-LM's 1.2B and 8.3B at a few TP × DP × ZeRO × recomputation settings: the
             bytes per GPU of weights, gradients, optimizer state and activations, from the closed
             forms written out below (mixed precision with Adam, Korthikanti et al.'s Table 2).
             With --calculator each figure is also compared with the library's cost model
             (examples/24_calculator, cost/training_per_rank.hpp): a second implementation.
  measured   a small GPT on a dp 2 × tp 2 thread mesh, run by shardalg-verify --json: the bytes the
             ranks hold, measured from the allocated tensors, beside the same formulas at the
             library's element size (double, no master copy).

  memory_widget.py --verify BIN [--calculator BIN] [--root DIR] --print   the tables on stdout
  memory_widget.py ... --write     replace the page's generated blocks
  memory_widget.py ... --check     exit 1 when the page differs from what this prints, when a
                                   formula differs from the library's, or a run fails

A generated block sits between `<!-- begin generated: NAME -->` and `<!-- end generated: NAME -->`.
"""
import argparse
import json
import os
import re
import subprocess
import sys

GIB = 1024 ** 3
PAGE = os.path.join('docs', 'course', '25_memory_widget.md')

# The seeds' models (Megatron-LM, arXiv:1909.08053, Table 1; the vocabulary padded to 51,200,
# sequence 1,024): hidden h, layers L, heads a, vocabulary v, sequence s.
MODELS = [
    ('1.2B', 'megatron-1.2b', dict(h=1536, L=40, a=16, v=51200, s=1024)),
    ('8.3B', 'megatron-8.3b', dict(h=3072, L=72, a=32, v=51200, s=1024)),
]
MICRO_BATCH = 1  # sequences per GPU (--micro-batch changes it for --print)
# (tp, dp, ZeRO stage, recomputation); no pipeline, no sequence parallelism.
SETTINGS = [
    (1, 1, 0, 'none'),
    (1, 8, 1, 'none'),
    (1, 8, 2, 'none'),
    (1, 8, 3, 'none'),
    (1, 8, 3, 'selective'),
    (1, 8, 3, 'full'),
    (8, 1, 0, 'none'),
    (8, 1, 0, 'selective'),
    (8, 8, 1, 'selective'),
    (8, 64, 3, 'full'),
]
GPU_BYTES = 80e9  # an 80 GB card


def parameters(m):
    """The Playbook's count: N = h·v + L(12h² + 13h) + 2h."""
    h, L, v = m['h'], m['L'], m['v']
    return h * v + L * (12 * h * h + 13 * h) + 2 * h


def states(psi, dp, zero, weight=2.0, grad=2.0, optimizer=12.0):
    """Model-state bytes per GPU for Ψ parameters: Ψ(2 + 2 + 12) at ZeRO-0; ZeRO-1 divides the
    optimizer's 12Ψ by N_d, ZeRO-2 the gradients' too, ZeRO-3 the weights' too."""
    return (weight * psi / (dp if zero >= 3 else 1), grad * psi / (dp if zero >= 2 else 1),
            optimizer * psi / (dp if zero >= 1 else 1))


def activations_per_layer(m, b, tp, recompute, e=2.0):
    """Korthikanti et al. 2022, Table 2, 16-bit values and 1-byte masks (e = 2), no sequence
    parallelism: none sbh(10 + 24/t + 5as/(ht)) (34 + 5as/h at t = 1), selective sbh(10 + 24/t),
    full 2sbh (the layer's input only)."""
    s, h, a = m['s'], m['h'], m['a']
    sbh = s * b * h
    if recompute == 'none':
        return sbh * (10 + 24 / tp + 5 * a * s / (h * tp)) * e / 2
    if recompute == 'selective':
        return sbh * (10 + 24 / tp) * e / 2
    return 2 * sbh * e / 2


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f'memory_widget.py: {" ".join(cmd)} exited {p.returncode}\n{p.stdout[-2000:]}{p.stderr[-2000:]}')
    return p.stdout


def calculator_bytes(calc, model, tp, dp, zero, recompute):
    """The library's figures (cost::training_per_rank), from 24_calculator's Part 1."""
    out = run([calc, '--model', model, '--dp', str(dp), '--tp', str(tp), '--pp', '1', '--zero', str(zero),
               '--recompute', recompute, '--sp', '0', '--micro-batch', str(MICRO_BATCH), '--micro-batches', '1'])
    got = {}
    for key, label in [('weights', 'weights'), ('gradients', 'gradients'), ('optimizer', 'optimizer (master, m, v)'),
                       ('activations', 'activations (first stage)')]:
        mm = re.search(r'^\s*' + re.escape(label) + r'\s+(\d+)\s', out, re.M)
        if not mm:
            sys.exit(f'memory_widget.py: no "{label}" line in {calc}\'s output')
        got[key] = int(mm.group(1))
    return got


def gib(x):
    return f'{x / GIB:.3f}'


def formula_tables(calc, problems):
    lines = []
    for name, calc_name, m in MODELS:
        n = parameters(m)
        lines.append(f'**{name}** (h {m["h"]:,}, {m["L"]} layers, {m["a"]} heads, vocabulary {m["v"]:,}, '
                     f'sequence {m["s"]:,}, micro-batch {MICRO_BATCH}): N = {n:,} parameters')
        lines.append('')
        lines.append('| TP | DP | ZeRO | recompute | weights | gradients | optimizer | activations | total GiB | fits 80 GB |')
        lines.append('|---:|---:|---:|---|---:|---:|---:|---:|---:|---|')
        for tp, dp, zero, rc in SETTINGS:
            psi = n / tp
            w, g, o = states(psi, dp, zero)
            act = m['L'] * activations_per_layer(m, MICRO_BATCH, tp, rc)
            total = w + g + o + act
            if calc:
                lib = calculator_bytes(calc, calc_name, tp, dp, zero, rc)
                for key, ours in [('weights', w), ('gradients', g), ('optimizer', o), ('activations', act)]:
                    # 24_calculator prints whole bytes (%.0f): equal to within half a byte
                    if abs(lib[key] - ours) > 0.5 + 1e-12 * ours:
                        problems.append(f'{name} tp {tp} dp {dp} ZeRO-{zero} {rc}: {key} {ours:.1f} here, '
                                        f'{lib[key]} in the cost model')
            lines.append(f'| {tp} | {dp} | {zero} | {rc} | {gib(w)} | {gib(g)} | {gib(o)} | {gib(act)} | '
                         f'**{gib(total)}** | {"yes" if total <= GPU_BYTES else "no"} |')
        lines.append('')
    return '\n'.join(lines).rstrip('\n')


# The small model: shardalg-verify's defaults (vocabulary 1000 padded to 1024, h 64, 8 heads,
# 2 layers, sequence 32), double, on a dp 2 × tp 2 thread mesh, global batch 2 (one sequence per
# replica), gradient buckets of 65,536 values (the default).
SMALL = dict(v=1000, h=64, a=8, L=2, s=32)
SMALL_DP, SMALL_TP, SMALL_BATCH, BUCKET, E = 2, 2, 2, 65536, 8


def small_psi(tp):
    """Ψ: one tp rank's parameter values (docs/course/16_memory_formulas.md): the embedding's rows
    padded to a multiple of 128·t and split, each layer's 12h² + 7h split and 6h (norms, the row-
    parallel biases) whole, the final norm's 2h whole."""
    h, L = SMALL['h'], SMALL['L']
    unit = 128 * tp
    v_pad = (SMALL['v'] + unit - 1) // unit * unit
    return v_pad * h // tp + L * ((12 * h * h + 7 * h) // tp + 6 * h) + 2 * h


def verify_json(verify, *args):
    out = run([verify, '--json', '--progress', 'never', *args])
    return json.loads(out)


def kib(x):
    return f'{x / 1024:,.1f}'


def ratio(a, b):
    return f'{a / b:.3f}'


def measured_tables(verify, problems):
    psi = small_psi(SMALL_TP)
    D = SMALL_DP
    lines = []
    lines.append(f'Ψ = {psi:,} values per tp rank; e = {E} B (double); per GPU of dp {D} × tp {SMALL_TP}, KiB')
    lines.append('')
    lines.append('| ZeRO | weights measured | formula | gradients measured | formula | Adam m, v measured | formula '
                 '| weights, most during the step | gradients, most during the backward |')
    lines.append('|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
    state_measured = {}
    for zero in range(4):
        j = verify_json(verify, '--dp', str(D), '--tp', str(SMALL_TP), '--batch', str(SMALL_BATCH), '--zero', str(zero),
                        '--bucket', str(BUCKET))
        if not j['summary']['pass']:
            problems.append(f'shardalg-verify --zero {zero} failed')
        held = j['summary']['memory_per_rank']
        z = j.get('zero', {})
        w = z['parameters']['held_bytes_measured'] if zero >= 3 else held['parameters_bytes']
        g = z['gradients']['slice_bytes_measured'] if zero >= 2 else held['gradients_bytes']
        # ZeRO-0: Adam's moments after one step on the reduced gradients (the --dp memory table)
        o = z['moments_bytes_measured'] if zero >= 1 else next(
            (r['measured_bytes'] for r in j.get('dp_memory', {}).get('rows', []) if r['category'].startswith('optimizer')), None)
        fw, fg, fo = states(psi, D, zero, E, E, 2 * E)
        w_peak = z['parameters']['peak_bytes_during_forward_backward'] if zero >= 3 else None
        g_peak = z['gradients']['peak_bytes_during_backward'] if zero >= 2 else None
        state_measured[zero] = (w, g, o)
        lines.append(f'| {zero} | {kib(w)} | {kib(fw)} | {kib(g)} | {kib(fg)} | {kib(o) if o is not None else "—"} | '
                     f'{kib(fo)} | {kib(w_peak) if w_peak else "—"} | {kib(g_peak) if g_peak else "—"} |')
    lines.append('')
    acts = {}
    lines.append(f'Activations of the {SMALL["L"]} layers, one replica (tp {SMALL_TP}, its one sequence of '
                 f'{SMALL["s"]} tokens), KiB')
    lines.append('')
    lines.append('| recompute | measured (8 B values) | Table 2 (2 B values, 1 B masks) | ratio '
                 '| measured, everything held (with the embedding, logits, loss) |')
    lines.append('|---|---:|---:|---:|---:|')
    for rc in ['none', 'selective', 'full']:
        j = verify_json(verify, '--dp', '1', '--tp', str(SMALL_TP), '--batch', str(SMALL_BATCH // D), '--recompute', rc)
        if not j['summary']['pass']:
            problems.append(f'shardalg-verify --recompute {rc} failed')
        mem = j['summary']['memory_per_rank']
        held = mem['playbook']['layer_activation_bytes_held']
        formula = SMALL['L'] * activations_per_layer(SMALL, SMALL_BATCH // D, SMALL_TP, rc)
        if abs(mem['playbook']['layer_activation_bytes'] - formula) > 1e-9 * formula:
            problems.append(f'recompute {rc}: Table 2 gives {formula} here, {mem["playbook"]["layer_activation_bytes"]} '
                            'in the verifier')
        acts[rc] = (held, formula)
        lines.append(f'| {rc} | {kib(held)} | {kib(formula)} | {ratio(held, formula)} | {kib(mem["activations_bytes"])} |')
    lines.append('')
    lines.append('Per GPU, measured: weights + gradients + Adam m, v + the layers\' activations, KiB')
    lines.append('')
    lines.append('| ZeRO | none | selective | full |')
    lines.append('|---:|---:|---:|---:|')
    for zero in range(1, 4):
        w, g, o = state_measured[zero]
        lines.append(f'| {zero} | ' + ' | '.join(kib(w + g + o + acts[rc][0]) for rc in ['none', 'selective', 'full']) + ' |')
    return '\n'.join(lines)


def generated(text, name):
    mm = re.search(r'<!-- begin generated: ' + re.escape(name) + r' -->\n(.*?)<!-- end generated: ' + re.escape(name)
                   + r' -->', text, re.S)
    return mm


def main():
    global MICRO_BATCH
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--root', default=os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
    ap.add_argument('--verify', required=True, help='the shardalg-verify executable')
    ap.add_argument('--calculator', help='examples/24_calculator: compare every formula with the cost model')
    ap.add_argument('--micro-batch', type=int, default=MICRO_BATCH, help='sequences per GPU in the formulas (--print only)')
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument('--print', action='store_true')
    mode.add_argument('--write', action='store_true')
    mode.add_argument('--check', action='store_true')
    a = ap.parse_args()
    if a.micro_batch != MICRO_BATCH and not a.print:
        ap.error('--micro-batch changes the page\'s figures: --print only')
    MICRO_BATCH = a.micro_batch

    problems = []
    blocks = {'formulas': formula_tables(a.calculator, problems), 'measured': measured_tables(a.verify, problems)}
    if a.print:
        for name, body in blocks.items():
            print(f'<!-- begin generated: {name} -->\n{body}\n<!-- end generated: {name} -->\n')
    else:
        path = os.path.join(a.root, PAGE)
        text = open(path, encoding='utf-8').read()
        for name, body in blocks.items():
            body += '\n'  # the block's lines, each ended by a newline
            mm = generated(text, name)
            if not mm:
                problems.append(f'{PAGE}: no generated block "{name}"')
                continue
            if a.write:
                text = text[:mm.start(1)] + body + text[mm.end(1):]
            elif mm.group(1) != body:
                old, new = mm.group(1).split('\n'), body.split('\n')
                first = next((i for i in range(max(len(old), len(new)))
                              if i >= len(old) or i >= len(new) or old[i] != new[i]), 0)
                problems.append(f'{PAGE}: block "{name}" differs from the generator at its line {first + 1}:\n'
                                f'  page:      {old[first] if first < len(old) else "(none)"}\n'
                                f'  generator: {new[first] if first < len(new) else "(none)"}\n'
                                f'  (scripts/memory_widget.py --write rewrites it)')
        if a.write:
            open(path, 'w', encoding='utf-8').write(text)
    if not a.calculator and not a.print:
        problems.append('--calculator not given: the formulas were not compared with the cost model')
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
