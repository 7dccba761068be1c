#!/usr/bin/env python3
"""Plot the GPT training curves written by examples/train_gpt (CSV: dtype,tp,sp,step,loss).

    /usr/bin/python3 scripts/plot_training.py [docs/data/train_gpt.csv] [docs/img/training.svg]

Left: the loss of every configuration (TP 1/2/4, with and without sequence parallelism) for each
dtype; the curves lie on top of each other. Right: the relative difference of every curve to the
TP=1 curve of its dtype, on a log scale, with the bounds the tests assert (1e-9 double, 1e-4 float).
Uses Debian's python3-matplotlib.
"""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "docs/data/train_gpt.csv"
    dst = sys.argv[2] if len(sys.argv) > 2 else "docs/img/training.svg"
    curves = defaultdict(dict)  # (dtype, tp, sp) -> {step: loss}
    with open(src, newline="") as f:
        for row in csv.DictReader(f):
            curves[(row["dtype"], int(row["tp"]), int(row["sp"]))][int(row["step"])] = float(row["loss"])
    if not curves:
        sys.exit(f"{src}: no rows")

    fig, (ax, ad) = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {"double": "-", "float": "--"}
    bounds = {"double": 1e-9, "float": 1e-4}
    for (dt, tp, sp), c in sorted(curves.items()):
        steps = sorted(c)
        ax.plot(steps, [c[s] for s in steps], styles.get(dt, "-"), lw=1.2,
                label=f"{dt} TP={tp}{' SP' if sp else ''}")
        base = curves.get((dt, 1, 0))
        if base and (tp, sp) != (1, 0):
            # exact agreement (0) has no logarithm: left as a gap
            diff = [abs(c[s] - base[s]) / abs(base[s]) or float("nan") for s in steps if s in base]
            ad.semilogy(steps[: len(diff)], diff, styles.get(dt, "-"), lw=1, marker=".", ms=2,
                        label=f"{dt} TP={tp}{' SP' if sp else ''}")
    for dt, b in bounds.items():
        if any(k[0] == dt for k in curves):
            ad.axhline(b, color="gray", lw=0.8, ls=styles[dt])
            ad.text(55, b * 1.6, f"bound ({dt}) {b:g}", fontsize=8, color="gray")
    ax.set_xlabel("step")
    ax.set_ylabel("mean cross-entropy (nats)")
    ax.set_title("byte-level GPT on examples/data/corpus.txt")
    ax.legend(fontsize=7, ncol=2)
    ad.set_xlabel("step")
    ad.set_ylabel("relative difference to TP=1 (no SP)")
    ad.set_title("the curves agree to rounding (gaps: exactly equal)")
    ad.set_ylim(1e-17, 1e-2)
    ad.legend(fontsize=7, ncol=2, loc="lower left", bbox_to_anchor=(0.0, 0.3))
    fig.tight_layout()
    fig.savefig(dst)
    print(f"wrote {dst}")


if __name__ == "__main__":
    main()
