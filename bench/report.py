#!/usr/bin/python3
"""bench/report.py — turn bench/run's Google Benchmark JSON into docs/performance.md and a plot.

Every figure is a median over repetitions; every ratio compares two benchmarks of the same run.
"""
import argparse
import json
import os
import platform
import re
import subprocess
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def medians(path):
    """{run_name without the time suffix: median real time in ms}, plus counters."""
    data = json.loads(Path(path).read_text())
    out, ctx = {}, data.get("context", {})
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue  # keep the medians (or the single run of a --quick run)
        name = re.sub(r"/(iterations:\d+/)?(manual_time|real_time)$", "", b.get("run_name", b["name"]))
        scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b.get("time_unit", "ns")]
        out[name] = {"ms": b["real_time"] * scale, **{k: v for k, v in b.items() if k in ("GFLOP/s", "overlap_chosen", "vs_base")}}
    return out, ctx


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:  # noqa: BLE001
        return ""


def machine():
    model = sh("lscpu | sed -n 's/^Model name:[ ]*//p'")
    return {
        "cpu": f"{model}, {os.cpu_count()} cores",
        "memory": sh("free -h | awk '/Mem:/{print $2}'"),
        "os": sh(". /etc/os-release && echo $PRETTY_NAME") or platform.platform(),
        "compiler": sh("c++ --version | head -1"),
        "mpi": sh("mpirun --version | head -1"),
        "blas": sh("dpkg-query -W -f='${Package} ${Version}' libopenblas0-pthread 2>/dev/null"),
    }


def verdict(ok):
    return "yes" if ok else "**no**"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", required=True)
    ap.add_argument("--doc", required=True)
    ap.add_argument("--plot", required=True)
    a = ap.parse_args()
    res = Path(a.results)
    gemm, _ = medians(res / "gemm.json")
    coll, _ = medians(res / "collectives.json")
    mlp, _ = medians(res / "mlp.json")
    sanity = (res / "sanity.txt").read_text().split()
    t_alone, t_both = float(sanity[1]), float(sanity[6])
    contention = t_both / t_alone
    noisy = contention > 1.15
    m = machine()
    L = []
    L.append("# Performance\n")
    L.append("Written by `bench/run` from one run of the benchmark suite (`bench/`, Google Benchmark). Every "
             "figure is a median over repetitions; every ratio divides two benchmarks of the same run, so "
             "machine speed cancels. Do not edit by hand: run `bench/run`.\n")
    L.append("## Machine\n")
    for k, v in m.items():
        L.append(f"- {k}: {v}")
    L.append(f"- two-core sanity check: sgemm n=1024 takes {t_alone:.1f} ms on one core alone and "
             f"{t_both:.1f} ms with both cores busy ({contention:.2f}×)"
             + (" — **noisy: the cores contend (a shared physical core, another tenant or thermal limits); "
                "ratios that need both cores at once are pessimistic**" if noisy else " — quiet"))
    L.append("")

    rows = []  # (figure, measured, goal, met)

    L.append("## 1. Local GEMM, fp32, one thread: shardalg `matmul` vs raw `cblas_sgemm`\n")
    L.append("| n | raw cblas_sgemm (ms) | matmul(X[R], W[R]) (ms) | ratio raw/shardalg | matmul(transpose(X), W) (ms) | ratio | goal |")
    L.append("|---|---|---|---|---|---|---|")
    for n in (1024, 2048):
        raw = gemm[f"BM_raw_cblas_sgemm/{n}"]["ms"]
        sh_ = gemm[f"BM_shardalg_matmul/{n}"]["ms"]
        tn = gemm[f"BM_shardalg_matmul_tn/{n}"]["ms"]
        r1, r2 = raw / sh_, raw / tn
        L.append(f"| {n} | {raw:.1f} | {sh_:.1f} | {r1:.3f} | {tn:.1f} | {r2:.3f} | ≥ 0.97 |")
        rows.append((f"GEMM n={n}: raw/shardalg", f"{r1:.3f}", "≥ 0.97", r1 >= 0.97))
    L.append("")

    sizes = sorted({int(k.split("/")[1]) for k in coll if k.startswith("BM_raw_MPI_Allreduce/")})
    L.append("## 2–4. Collectives, 2 ranks (`mpirun -np 2`, one per core)\n")
    L.append("The two ratios against MPI_Allreduce are *paired*: every iteration of shardalg's benchmark also "
             "runs a raw in-place MPI_Allreduce of the same size (alternating which goes first) and the ratio is "
             "Σ ours / Σ raw over those iterations, so a drift of the machine's speed cancels. The µs columns are "
             "medians of the unpaired runs and the paired runs' own times. The A/A column pairs MPI_Allreduce on "
             "one buffer with MPI_Allreduce on another: how far from 1 a paired ratio strays when nothing differs.\n")
    L.append("| bytes | MPI_Allreduce (µs) | shardalg all_reduce (µs) | ratio (≤ 1.02) | A/A | MPI_Reduce_scatter_block (µs) "
             "| shardalg reduce_scatter (µs) | RS / MPI all-reduce (≤ 0.6) | ThreadComm all-reduce (µs) | Thread / MPI (≤ 0.5) |")
    L.append("|---|---|---|---|---|---|---|---|---|---|")
    for s in sizes:
        ar = coll[f"BM_raw_MPI_Allreduce/{s}"]["ms"] * 1e3
        sar = coll[f"BM_shardalg_all_reduce/{s}"]["ms"] * 1e3
        rsb = coll[f"BM_raw_MPI_Reduce_scatter_block/{s}"]["ms"] * 1e3
        srs = coll[f"BM_shardalg_reduce_scatter/{s}"]["ms"] * 1e3
        th = coll[f"BM_thread_all_reduce/{s}"]["ms"] * 1e3
        r_ar = coll[f"BM_shardalg_all_reduce/{s}"]["vs_base"]
        r_rs = coll[f"BM_shardalg_reduce_scatter/{s}"]["vs_base"]
        aa = coll[f"BM_raw_vs_raw/{s}"]["vs_base"]
        L.append(f"| {s:,} | {ar:.1f} | {sar:.1f} | {r_ar:.3f} | {aa:.3f} | {rsb:.1f} | {srs:.1f} | {r_rs:.3f} | {th:.1f} | {th/ar:.3f} |")
        rows.append((f"all_reduce {s >> 10} KiB: shardalg/raw (paired; A/A {aa:.3f})", f"{r_ar:.3f}", "≤ 1.02",
                     r_ar <= 1.02))
        if s >= 1 << 20:
            rows.append((f"reduce_scatter {s >> 20} MiB / MPI all-reduce (paired)", f"{r_rs:.3f}", "≤ 0.6", r_rs <= 0.6))
            rows.append((f"ThreadComm / MPI all-reduce {s >> 20} MiB", f"{th/ar:.3f}", "≤ 0.5", th / ar <= 0.5))
    L.append("")
    L.append("Why the reduce-scatter sits near 0.6 of the all-reduce here, and not at 0.5: on one node the "
             "transfer is a CPU copy (Open MPI's shared-memory transport, a single copy through CMA) and the "
             "reduction an add, done by the same core, and the add costs about as much as the copy (columns c and "
             "a, each over the V/2 a rank exchanges). A ring all-reduce is a reduce-scatter followed by an "
             "all-gather, i.e. one more exchange of V/2: if MPI_Allreduce is such a ring with a reduce-scatter half "
             "as fast as ours, RS / all-reduce = RS / (RS + c). The last two columns compare that prediction with "
             "the measurement. Where they agree, a ratio of 0.5 needs a free add (as over a network), and 0.6 needs "
             "RS ≤ 1.5·c: the add at less than half the cost of the copy.\n")
    L.append("| bytes | exchange of V/2, c (µs) | add of V/2, a (µs) | shardalg RS (µs) | predicted RS / (RS + c) "
             "| measured RS / all-reduce (paired) |")
    L.append("|---|---|---|---|---|---|")
    for s in sizes:
        if s < 1 << 20:
            continue
        c = coll[f"BM_raw_MPI_Sendrecv/{s}"]["ms"] * 1e3
        a_ = coll[f"BM_local_add/{s}"]["ms"] * 1e3
        rs = coll[f"BM_shardalg_reduce_scatter/{s}"]["ms"] * 1e3
        L.append(f"| {s:,} | {c:.1f} | {a_:.1f} | {rs:.1f} | {rs / (rs + c):.3f} | "
                 f"{coll[f'BM_shardalg_reduce_scatter/{s}']['vs_base']:.3f} |")
    L.append("")

    def ms(k):
        return mlp[k]["ms"]
    native = medians(res / "mlp_native.json")[0] if (res / "mlp_native.json").exists() else {}
    dmalloc = medians(res / "mlp_default_malloc.json")[0] if (res / "mlp_default_malloc.json").exists() else {}
    torch = json.loads((res / "torch.json").read_text()) if (res / "torch.json").exists() else None
    torch_skip = (res / "torch_skipped.txt").read_text().strip() if (res / "torch_skipped.txt").exists() else ""
    load = {w: (res / f"load_{w}.txt").read_text().split() if (res / f"load_{w}.txt").exists() else ["?"] * 3
            for w in ("before", "after")}
    rate = mlp["BM_gemm_rate"]["GFLOP/s"] / 1e9  # per core, both cores busy (measured on both ranks)
    mlp_flops = 12.0 * 2048 * 1024 * 4096
    blk_flops = 3.0 * (24.0 * 2048 * 1024 ** 2 + 2.0 * 2048 * (512 + 1) * 1024)  # attention: the causal triangle
    mlp_floor = mlp_flops / 2 / (rate * 1e9) * 1e3
    blk_floor = blk_flops / 2 / (rate * 1e9) * 1e3
    t_torch = {k: sorted(v)[len(v) // 2] for k, v in torch.items() if k in ("mlp", "block")} if torch else {}
    L.append("## 5–6. Tensor-parallel MLP and transformer block, forward + backward, fp32 (issue 18)\n")
    L.append("m = 2048 tokens, h = 1024, ffn = 4h, GeLU-tanh, biases; block: pre-LN, 16 heads, sequences of 512. "
             "TP=2 runs one rank per process (MPI) or per thread (ThreadComm), one core each; TP=1 runs one rank "
             "alone. The floor is the per-rank GEMM FLOPs at the measured single-core sgemm rate with both cores "
             f"busy ({rate:.1f} GFLOP/s); the block's attention GEMMs are counted over the causal triangle (the "
             "s(s + 1)/2 query–key pairs a head needs), since shardalg and the strong baseline both skip the masked "
             f"query tiles. Load average (1, 5, 15 min) before the run: {' '.join(load['before'])}; "
             f"after: {' '.join(load['after'])}.\n")
    L.append("Baselines, all in the same binary as shardalg (bench/mlp/baseline.hpp) except PyTorch: **strong** is "
             "what a performance engineer writes by hand (buffers allocated once, cblas, in-place MPI_Allreduce, "
             "bias + GeLU in one pass, dGeLU × dA with the bias gradient's column sum in one pass, per-row LayerNorm "
             "and softmax, Eigen array expressions, attention in query tiles of 64 that skip the masked ones); **naive** is the hand-written MLP this table used before "
             "(scalar GeLU through a function pointer, separate passes), kept to show what those choices cost; "
             "**PyTorch** is Debian's python3-torch running the same MLP and block as Megatron writes them (f/g "
             "autograd functions, gloo, one process and one thread per rank; bench/torch_tp.py). Every row of "
             "bench_mlp runs with `retain_freed_memory()` (backend/cpu/allocator.hpp; PyTorch gets the same setting "
             "through glibc's environment) except the two *default allocator* rows. *vs strong (paired)* "
             "alternates shardalg's step with the strong baseline's in one benchmark and divides the sums.\n")
    L.append("| case | time (ms) | vs strong (paired) | vs PyTorch | TP=1 / TP=2 | floor (ms) | floor / time |")
    L.append("|---|---|---|---|---|---|---|")

    def row(name, t, floor, paired=None, vs_torch=None, speed=None):
        f = lambda v, d=3: "—" if v is None else f"{v:.{d}f}"  # noqa: E731
        L.append(f"| {name} | {t:.0f} | {f(paired)} | {f(vs_torch)} | {f(speed, 2)} | {floor:.0f} | {floor / t:.2f} |")

    for what, floor, flops_key in (("mlp", mlp_floor, "MLP"), ("block", blk_floor, "block")):
        strong, sh = ms(f"BM_strong_{what}_tp2"), ms(f"BM_shardalg_{what}_tp2")
        tp1 = ms(f"BM_shardalg_{what}_tp1")
        tt = t_torch.get(what)
        if what == "mlp":
            row("naive hand-written MLP (Release)", ms("BM_naive_mlp_tp2"), floor)
        row(f"strong hand-written {flops_key} (Release)", strong, floor)
        if f"BM_strong_{what}_tp2" in native:
            row(f"strong hand-written {flops_key} (-march=native)", native[f"BM_strong_{what}_tp2"]["ms"], floor)
        if tt:
            row(f"PyTorch {torch['torch']} {flops_key}", tt, floor)
        row(f"shardalg {flops_key}, TP=2, MPI (Release)", sh, floor, mlp[f"BM_shardalg_{what}_tp2_vs_strong"]["vs_base"],
            sh / tt if tt else None, tp1 / sh)
        if f"BM_shardalg_{what}_tp2" in native:
            tn = native[f"BM_shardalg_{what}_tp2"]["ms"]
            row(f"shardalg {flops_key}, TP=2, MPI (-march=native)", tn, floor, None, tn / tt if tt else None)
        th = ms(f"BM_shardalg_{what}_threads_tp2")
        row(f"shardalg {flops_key}, TP=2, threads (Release)", th, floor, None, th / tt if tt else None, tp1 / th)
        if what == "block" and "BM_shardalg_block_sp_tp2" in mlp:
            sp = ms("BM_shardalg_block_sp_tp2")
            row("shardalg block, TP=2 + sequence parallelism, MPI (Release)", sp, floor, None, sp / tt if tt else None,
                tp1 / sp)
        for key, label in ((f"BM_shardalg_{what}_tp2", "MPI"), (f"BM_shardalg_{what}_threads_tp2", "threads")):
            if key in dmalloc:
                row(f"shardalg {flops_key}, TP=2, {label}, default allocator", dmalloc[key]["ms"], floor)
        row(f"shardalg {flops_key}, TP=1", tp1, floor * 2)
        if f"BM_shardalg_{what}_tp1_both_busy" in mlp:
            row(f"shardalg {flops_key}, TP=1 on each core at once (both busy)", ms(f"BM_shardalg_{what}_tp1_both_busy"),
                floor * 2)
    if not torch:
        L.append(f"\nPyTorch: not measured ({torch_skip or 'no result'}).")
    L.append("")
    t2 = ms("BM_shardalg_mlp_tp2")
    hw = ms("BM_strong_mlp_tp2")
    blk2 = ms("BM_shardalg_block_tp2")
    goals = []  # issue 18
    # interleaved rounds (bench/run): per-round ratios of adjacent measurements, their median
    rounds = []
    for rel in sorted(res.glob("round_*_release.json")):
        nat = rel.with_name(rel.name.replace("_release", "_native"))
        if nat.exists():
            rounds.append((medians(rel)[0], medians(nat)[0]))

    def per_round(f):
        """(median, min, max) of f(release, native) over the rounds, or None without rounds."""
        v = sorted(f(a, b) for a, b in rounds)
        return (v[len(v) // 2], v[0], v[-1]) if v else None

    def fmt(r, d=3):
        return f"{r[0]:.{d}f} (rounds {r[1]:.{d}f}–{r[2]:.{d}f})"

    for what, floor in (("mlp", mlp_floor), ("block", blk_floor)):
        name = "MLP" if what == "mlp" else "block"
        sh = ms(f"BM_shardalg_{what}_tp2")
        r = mlp[f"BM_shardalg_{what}_tp2_vs_strong"]["vs_base"]
        goals.append((f"{name} TP=2 MPI / strong hand-written (paired)", f"{r:.3f}", "≤ 1.00", r <= 1.0))
        k2, ks, kt, k1 = (f"BM_shardalg_{what}_tp2", f"BM_strong_{what}_tp2", f"BM_shardalg_{what}_threads_tp2",
                          f"BM_shardalg_{what}_tp1")
        rr = per_round(lambda a, b: a[k2]["ms"] / min(a[ks]["ms"], b[ks]["ms"]))
        if rr:
            goals.append((f"{name} TP=2 MPI / the faster strong build (Release or native), interleaved", fmt(rr), "≤ 1.00",
                          rr[0] <= 1.0))
        else:
            best = min([ms(ks)] + ([native[ks]["ms"]] if ks in native else []))
            goals.append((f"{name} TP=2 MPI / the faster strong build (Release or native)", f"{sh / best:.3f}", "≤ 1.00",
                          sh / best <= 1.0))
        if t_torch.get(what):
            v = sh / t_torch[what]
            goals.append((f"{name} TP=2 MPI / PyTorch", f"{v:.3f}", "≤ 0.95", v <= 0.95))
        goals.append((f"{name} TP=2 MPI: GEMM floor / time", f"{floor / sh:.2f}", "≥ 0.95", floor / sh >= 0.95))
        rr = per_round(lambda a, b: a[kt]["ms"] / a[k2]["ms"])
        th = ms(kt)
        if rr:
            goals.append((f"{name} ThreadComm TP=2 / MpiComm TP=2, interleaved", fmt(rr), "≤ 1.03", rr[0] <= 1.03))
        else:
            goals.append((f"{name} ThreadComm TP=2 / MpiComm TP=2", f"{th / sh:.3f}", "≤ 1.03", th / sh <= 1.03))
        rr = per_round(lambda a, b: a[k1]["ms"] / a[k2]["ms"])
        if rr:
            goals.append((f"{name} speedup TP=1 / TP=2 (MPI), interleaved", fmt(rr, 2), "≥ 1.95", rr[0] >= 1.95))
        else:
            sp = ms(k1) / sh
            goals.append((f"{name} speedup TP=1 / TP=2 (MPI)", f"{sp:.2f}", "≥ 1.95", sp >= 1.95))
        kb, ksp = f"BM_shardalg_{what}_tp1_both_busy", "BM_shardalg_block_sp_tp2"
        if what == "block":
            rr = per_round(lambda a, b: a[k1]["ms"] / a[ksp]["ms"] if ksp in a else float("nan"))
            if rr and rr[0] == rr[0]:
                goals.append(("block speedup TP=1 / TP=2 with sequence parallelism (MPI), interleaved", fmt(rr, 2),
                              "≥ 1.95", rr[0] >= 1.95))
        rr = per_round(lambda a, b: 2 * a[k1]["ms"] / a[kb]["ms"] if kb in a else float("nan"))
        if rr and rr[0] == rr[0]:
            goals.append((f"{name}: the machine's cap on TP=1 / TP=2 (2 × TP=1 alone / TP=1 with both cores busy), "
                          "interleaved", fmt(rr, 2), "(context)", True))
    rr = per_round(lambda a, b: a["BM_shardalg_mlp_tp2"]["ms"] / b["BM_shardalg_mlp_tp2"]["ms"])
    if rr:
        goals.append(("MLP TP=2 MPI: Release build / -march=native build, interleaved", fmt(rr), "≤ 1.02", rr[0] <= 1.02))
    elif "BM_shardalg_mlp_tp2" in native:
        v = t2 / native["BM_shardalg_mlp_tp2"]["ms"]
        goals.append(("MLP TP=2 MPI: Release build / -march=native build", f"{v:.3f}", "≤ 1.02", v <= 1.02))
    rows.append(("MLP TP=2 shardalg / strong hand-written", f"{t2 / hw:.3f}", "≤ 1.00", t2 / hw <= 1.0))
    rows.append(("MLP speedup TP=1 / TP=2 (MPI)", f"{ms('BM_shardalg_mlp_tp1') / t2:.2f}", "≥ 1.9",
                 ms("BM_shardalg_mlp_tp1") / t2 >= 1.9))
    rows.append(("MLP TP=2 step / GEMM floor", f"{mlp_floor / t2:.2f}", "≥ 0.90", mlp_floor / t2 >= 0.9))

    L.append("### Overlap: f's backward all-reduce against the weight-gradient GEMM (async dgrad)\n")
    L.append("`Overlap::on`: dX first, its all-reduce started (`MPI_Iallreduce`), dW in 4 token chunks with "
             "`MPI_Test` between them, then wait. `Overlap::automatic` times both schedules on its first calls "
             "and keeps the faster (its calibration calls run before the timed loop). Ratios below 1 mean the "
             "overlap paid.\n")
    L.append("| case | sequential (ms) | overlapped (ms) | overlapped / sequential |")
    L.append("|---|---|---|---|")
    col_off, col_on = ms("BM_column_backward_tp2/0"), ms("BM_column_backward_tp2/1")
    mlp_on, blk_on = ms("BM_shardalg_mlp_tp2_overlap"), ms("BM_shardalg_block_tp2_overlap")
    blk2 = ms("BM_shardalg_block_tp2")
    L.append(f"| one ColumnParallelLinear backward, m=2048, in=1024, out=128 | {col_off:.2f} | {col_on:.2f} | {col_on / col_off:.3f} |")
    L.append(f"| MLP fwd+bwd, TP=2 | {t2:.0f} | {mlp_on:.0f} | {mlp_on / t2:.3f} |")
    L.append(f"| block fwd+bwd, TP=2 | {blk2:.0f} | {blk_on:.0f} | {blk_on / blk2:.3f} |")
    auto = mlp["BM_shardalg_mlp_tp2_auto"]
    chose = "overlapped" if auto.get("overlap_chosen", 0) >= 0.5 else "sequential"
    L.append(f"| MLP fwd+bwd, TP=2, `Overlap::automatic` (chose {chose}) | {t2:.0f} | {auto['ms']:.0f} | {auto['ms'] / t2:.3f} |")
    L.append("")
    rows.append(("MLP TP=2 Overlap::automatic / sequential", f"{auto['ms'] / t2:.3f}", "≤ 1.00 (±2% noise)",
                 auto["ms"] / t2 <= 1.02))

    L.append("## Summary against the goals of issue 18 (CPU speed against strong baselines)\n")
    try:
        loaded = float(load["before"][0]) > 0.5 or noisy  # the load after includes the run's own two ranks
    except ValueError:
        loaded = noisy
    if loaded:
        L.append(f"**Taken on a loaded machine** (load average {load['before'][0]} before the run, {load['after'][0]} "
                 f"after; the two-core sanity check {contention:.2f}×): other work shared the two cores, so every "
                 "figure here is pessimistic and noisy, the paired ratios least so.\n")
    if rounds:
        L.append(f"Ratios marked *interleaved* are the median over {len(rounds)} rounds of bench/run's last step "
                 "(each round runs every side once, adjacent in time: the Release binary's MPI, threads and TP=1 "
                 "steps, then the -march=native binary's), with the rounds' range; one long run per side drifts with "
                 "a shared host's speed by more than these goals' margins. The other ratios are from the main run.\n")
    L.append("Where the time goes for the goals missed: docs/design.md §14 (per-rank CPU-time profile).\n")
    L.append("| figure | measured | goal | met |")
    L.append("|---|---|---|---|")
    for f, v, g, ok in goals:
        L.append(f"| {f} | {v} | {g} | {'—' if g == '(context)' else verdict(ok)} |")
    L.append("")
    L.append("## Summary against the goals of issue 6\n")
    L.append("| figure | measured | goal | met |")
    L.append("|---|---|---|---|")
    for f, v, g, ok in rows:
        L.append(f"| {f} | {v} | {g} | {verdict(ok)} |")
    L.append("")
    Path(a.doc).write_text("\n".join(L) + "\n")

    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    xs = [s / 2 ** 20 for s in sizes]
    for key, label in [("BM_raw_MPI_Allreduce", "MPI_Allreduce"), ("BM_shardalg_all_reduce", "shardalg all_reduce"),
                       ("BM_raw_MPI_Reduce_scatter_block", "MPI_Reduce_scatter_block"),
                       ("BM_shardalg_reduce_scatter", "shardalg reduce_scatter"),
                       ("BM_thread_all_reduce", "ThreadComm all_reduce")]:
        ax[0].loglog(xs, [coll[f"{key}/{s}"]["ms"] * 1e3 for s in sizes], marker="o", label=label)
    ax[0].set_xlabel("MiB")
    ax[0].set_ylabel("µs (median, max over ranks)")
    ax[0].set_title("Collectives, 2 ranks")
    ax[0].legend(fontsize=7)
    names = ["naive hand-written MLP TP=2", "strong hand-written MLP TP=2", "MLP TP=2 MPI", "MLP TP=2 threads", "MLP TP=1"]
    keys = ["BM_naive_mlp_tp2", "BM_strong_mlp_tp2", "BM_shardalg_mlp_tp2", "BM_shardalg_mlp_threads_tp2", "BM_shardalg_mlp_tp1"]
    ax[1].barh(names, [ms(k) for k in keys])
    ax[1].axvline(mlp_floor, color="k", ls="--", label="GEMM floor, TP=2")
    ax[1].set_xlabel("ms per forward + backward")
    ax[1].set_title("MLP, m=2048, h=1024, ffn=4096")
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    Path(a.plot).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(a.plot)


if __name__ == "__main__":
    main()
