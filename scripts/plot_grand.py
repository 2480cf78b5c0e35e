"""Plot the grand unit's distributions (golden model) against N(0,1) and the exact IH-12.

    python scripts/plot_grand.py                 # writes docs/grand_normal.png, grand_modes.png
    python scripts/plot_grand.py --samples 200000 --seed 7

The model is bit-exact with the gateware (tests/test_grand_rtl.py), so these are the
distributions the hardware produces.
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

from lowbit.sim.grand import GrandModel, ih12_pmf  # noqa: E402

DOCS = Path(__file__).resolve().parent.parent / "docs"


def plot_normal(samples, seed, out):
    v = GrandModel(seed, 2).values("normal", samples // 2).ravel()
    k = np.arange(373) - 186
    x = k / 32
    counts = np.bincount(np.round(v * 32).astype(int) + 186, minlength=373)
    measured = counts / len(v)
    exact = ih12_pmf()
    gauss = stats.norm.cdf(x + 1 / 64) - stats.norm.cdf(x - 1 / 64)   # N(0,1) in the same bins
    cdf_dev = np.abs(np.cumsum(exact) - stats.norm.cdf(x + 1 / 64)).max()

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, log in zip(axes, (False, True), strict=True):
        ax.plot(x, gauss, "k-", lw=1, label="N(0,1), binned to 1/32")
        ax.plot(x, exact, "b--", lw=1, label="IH-12 exact (quantised)")
        nz = measured > 0
        ax.plot(x[nz], measured[nz], "r.", ms=2.5, label=f"grand normal, {len(v):,} samples")
        ax.set_xlabel("x")
        ax.set_ylabel("probability per 1/32 bin")
        if log:
            ax.set_yscale("log")
            ax.set_ylim(1e-12, 0.03)
            ax.set_title("log scale: IH-12 tails fall faster than N(0,1) beyond ~3.5σ")
        else:
            ax.set_title(f"linear: max |CDF − Φ| = {cdf_dev:.5f} (exact)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("grand normal = (S − 186)/32, S = sum of twelve 5-bit fields of a "
                 "xoroshiro128aox word")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_modes(samples, seed, out):
    g = GrandModel(seed, 2)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    xs = np.linspace(-6, 6, 1201)
    for ax, log in zip(axes, (False, True), strict=True):
        for mode, style in (("normal", "r-"), ("normal144", "g-"), ("trunc2", "m-"),
                            ("trunc3", "c-"), ("uniform", "y-")):
            n = samples // 2 if mode != "normal144" else samples // 8
            v = g.values(mode, n).ravel()
            hist, edges = np.histogram(v, bins=np.arange(-6, 6.001, 0.125), density=True)
            mid = (edges[1:] + edges[:-1]) / 2
            keep = hist > 0
            ax.plot(mid[keep], hist[keep], style, lw=1, drawstyle="steps-mid",
                    label=f"{mode} ({len(v):,})")
        ax.plot(xs, stats.norm.pdf(xs), "k--", lw=1, label="N(0,1) pdf")
        ax.set_xlabel("x")
        ax.set_ylabel("density (bins of 1/8)")
        if log:
            ax.set_yscale("log")
            ax.set_ylim(1e-6, 1)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("grand unit modes (golden model = gateware)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2_000_000)
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--out-dir", default=str(DOCS))
    args = parser.parse_args(argv)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plot_normal(args.samples, args.seed, out / "grand_normal.png")
    plot_modes(args.samples, args.seed, out / "grand_modes.png")
    print(f"wrote {out / 'grand_normal.png'} and {out / 'grand_modes.png'}")


if __name__ == "__main__":
    main()
