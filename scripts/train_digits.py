"""Full training runs of the digits MLP with the accelerator's arithmetic (issue #11).

Trains every variant of :mod:`lowbit.sim.train` on the golden backend for ``--epochs`` epochs and
``--seeds`` seeds, prints a table of the median test accuracy, writes
``docs/bench/train.json`` and plots the median test accuracy against the epoch to
``docs/training_accuracy.png``.

The two BFP-4 runs of the issue store the weights themselves in 4-bit BFP (no high-precision
copy; ``master_bits=4``): every update is rounded back into BFP-4 with the run's rounding, so
nearest rounding loses updates below half an ulp and stochastic rounding keeps them in
expectation. Their learning rate is tuned for each on a validation split carved from the
training set (``--tune-lr``; the test set is never looked at). For reference the BFP-4 pair
also runs with a float64 master copy (``*-f64master``) and with the weights stored as 8-bit
BFP (``*-m8``).

Usage::

    python scripts/train_digits.py --tune-lr        # tune, then every run: 20 epochs, seeds 1-3
    python scripts/train_digits.py --quick          # 3 epochs, one seed (a smoke run)
    python scripts/train_digits.py --tune-lr --runs bfp4-nearest bfp4-stochastic \
        --merge docs/bench/train.json               # re-run some, keep the others' results
    python scripts/train_digits.py --from-json docs/bench/train.json   # re-summarise, re-plot
"""

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

#: (name, variant, overrides, label) of every curve.
RUNS = [
    ("float64", "float64", {}, "float64"),
    ("bfp8", "bfp8", {}, "BFP-8 nearest"),
    ("bfp4-nearest", "bfp4-nearest", {}, "BFP-4 nearest (weights stored in BFP-4)"),
    ("bfp4-stochastic", "bfp4-stochastic", {}, "BFP-4 stochastic (weights stored in BFP-4)"),
    ("mixed", "mixed", {}, "mixed (seed 004 schedule + controller)"),
    ("discrete", "discrete", {}, "discrete 3-bit weights (seed 001)"),
    ("bfp4-nearest-f64master", "bfp4-nearest-f64master", {},
     "BFP-4 nearest, float64 master"),
    ("bfp4-stochastic-f64master", "bfp4-stochastic-f64master", {},
     "BFP-4 stochastic, float64 master"),
    ("bfp4-nearest-m8", "bfp4-nearest", {"master_bits": 8}, "BFP-4 nearest, stored in BFP-8"),
    ("bfp4-stochastic-m8", "bfp4-stochastic", {"master_bits": 8},
     "BFP-4 stochastic, stored in BFP-8"),
]

#: Runs whose learning rate ``--tune-lr`` chooses, and the grid it tries.
TUNED = ("bfp4-nearest", "bfp4-stochastic")
LR_GRID = (0.025, 0.05, 0.1, 0.2, 0.4, 0.8)


def one_run(job):
    name, variant, overrides, seed, epochs = job[:5]
    validation = len(job) > 5 and job[5]
    import lowbit.sim.train as st
    cfg = st.variant_config(variant, epochs=epochs, seed=seed, **overrides)
    backend = None if variant == "float64" else st.GoldenBackend()
    data = st.validation_split(st.load_digits_split()) if validation else None
    t0 = time.perf_counter()
    trainer = st.train(cfg, backend, data=data)
    if validation:
        acc = trainer.history[-1]["test_acc"]
        print(f"  tune {name:<18} lr {cfg.lr:<6} seed {seed}: validation {100 * acc:.1f} %",
              flush=True)
        return {"name": name, "lr": cfg.lr, "seed": seed, "val_acc": acc,
                "val_curve": [r["test_acc"] for r in trainer.history]}
    out = {"name": name, "seed": seed, "lr": cfg.lr, "seconds": time.perf_counter() - t0,
           "test_acc": [r["test_acc"] for r in trainer.history],
           "train_loss": [r["train_loss"] for r in trainer.history],
           "widths": [r["widths"] for r in trainer.history]}
    if backend is not None:
        out["column_products"] = backend.calls["matvec"]
        out["column_beats"] = backend.calls["beats"]
        out["discrete_products"] = backend.calls["dmatvec"]
    print(f"  {name:<20} seed {seed}: final {100 * out['test_acc'][-1]:.1f} % "
          f"({out['seconds']:.0f} s)", flush=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--runs", nargs="+", choices=[r[0] for r in RUNS],
                    default=[r[0] for r in RUNS])
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--quick", action="store_true", help="3 epochs, seed 1")
    ap.add_argument("--json", default="docs/bench/train.json")
    ap.add_argument("--plot", default="docs/training_accuracy.png")
    ap.add_argument("--from-json", metavar="FILE",
                    help="do not train: summarise, check and plot the runs stored in FILE")
    ap.add_argument("--merge", metavar="FILE",
                    help="keep the results (and learning-rate tuning) stored in FILE for the "
                         "runs not trained now")
    ap.add_argument("--tune-lr", action="store_true",
                    help=f"choose the learning rate of {', '.join(TUNED)} on a validation "
                         f"split of the training set (grid {LR_GRID}, seeds 1-3 median)")
    ap.add_argument("--tune-seeds", type=int, nargs="+", default=[1, 2, 3])
    args = ap.parse_args(argv)
    if args.from_json:
        with open(args.from_json) as f:
            old = json.load(f)
        args.epochs, args.seeds = old["epochs"], old["seeds"]
        summary = old["summary"]
        for s in summary.values():
            s["median_train_loss"] = np.median([r["train_loss"] for r in s["runs"]],
                                               axis=0).tolist()
        report(summary, args, old["seconds"], old["command"], old.get("lr_tuning"))
        return
    if args.quick:
        args.epochs, args.seeds, args.tune_seeds = 3, [1], [1]
    old = {}
    if args.merge:
        with open(args.merge) as f:
            old = json.load(f)
        if (old["epochs"], old["seeds"]) != (args.epochs, args.seeds):
            ap.error(f"{args.merge} holds {old['epochs']} epochs, seeds {old['seeds']}")
    runs = [r for r in RUNS if r[0] in args.runs]
    t0 = time.perf_counter()
    pool = ProcessPoolExecutor(args.jobs) if args.jobs > 1 else None
    mapper = pool.map if pool else map
    tuning = old.get("lr_tuning")
    if args.tune_lr:
        tuning = tune_lr([r for r in runs if r[0] in TUNED], args, mapper)
    if tuning:
        runs = [(name, variant, {**overrides, "lr": tuning[name]["lr"]}, label)
                if name in tuning else (name, variant, overrides, label)
                for name, variant, overrides, label in runs]
    jobs = [(name, variant, overrides, seed, args.epochs)
            for name, variant, overrides, _ in runs for seed in args.seeds]
    # Longest first, so the workers finish together.
    order = {"bfp4-stochastic-f64master": 0, "bfp4-stochastic-m8": 1, "bfp4-stochastic": 2,
             "mixed": 3, "discrete": 4}
    jobs.sort(key=lambda j: order.get(j[0], 9))
    print(f"training {len(runs)} variants x {len(args.seeds)} seeds x {args.epochs} epochs",
          flush=True)
    results = list(mapper(one_run, jobs))
    if pool:
        pool.shutdown()
    summary = {}
    trained = {r[0] for r in runs}
    for name, variant, overrides, label in RUNS:
        if name not in trained:
            if name in old.get("summary", {}):
                summary[name] = old["summary"][name]
            continue
        overrides = next(r[2] for r in runs if r[0] == name)
        rs = sorted((r for r in results if r["name"] == name), key=lambda r: r["seed"])
        acc = np.array([r["test_acc"] for r in rs])
        med = np.median(acc, axis=0)
        summary[name] = {
            "variant": variant, "overrides": overrides, "label": label,
            "seeds": [r["seed"] for r in rs], "median_test_acc": med.tolist(),
            "final_median": float(med[-1]), "final_per_seed": acc[:, -1].tolist(),
            "median_train_loss": np.median([r["train_loss"] for r in rs], axis=0).tolist(),
            "runs": rs}
    seconds = time.perf_counter() - t0 + (old.get("seconds", 0) if old else 0)
    command = "python scripts/train_digits.py " + " ".join(sys.argv[1:] if argv is None
                                                          else argv)
    if old:
        command = f"{old['command']}; then {command}"
    report(summary, args, seconds, command, tuning)


def tune_lr(runs, args, mapper):
    """Learning rate of each run in ``runs``: the grid value with the best median (over
    ``args.tune_seeds``) final accuracy on the validation split, training on the rest of the
    training set for ``args.epochs`` epochs. Returns ``{name: {"lr", "grid", "val_acc"}}``."""
    jobs = [(name, variant, {**overrides, "lr": lr}, seed, args.epochs, True)
            for name, variant, overrides, _ in runs for lr in LR_GRID
            for seed in args.tune_seeds]
    jobs.sort(key=lambda j: "stochastic" not in j[0])
    print(f"tuning the learning rate of {len(runs)} runs: {len(jobs)} validation runs",
          flush=True)
    results = list(mapper(one_run, jobs))
    out = {}
    for name, *_ in runs:
        med = {lr: float(np.median([r["val_acc"] for r in results
                                    if r["name"] == name and r["lr"] == lr]))
               for lr in LR_GRID}
        best = max(LR_GRID, key=lambda lr: (med[lr], -lr))
        out[name] = {"lr": best, "grid": list(LR_GRID), "seeds": list(args.tune_seeds),
                     "median_val_acc": [med[lr] for lr in LR_GRID]}
        print(f"  {name}: lr {best} (validation accuracy by lr: "
              + ", ".join(f"{lr}: {100 * med[lr]:.1f} %" for lr in LR_GRID) + ")", flush=True)
    return out


def compare(summary, n, s):
    """Paired comparison of the final test accuracy of runs ``s`` and ``n`` over the seeds.

    "Measurably better": ``s`` ahead on every seed AND the median paired difference larger
    than the seed-to-seed spread (max − min over the seeds, the larger of the two runs')."""
    a, b = np.array(summary[s]["final_per_seed"]), np.array(summary[n]["final_per_seed"])
    d = a - b
    spread = max(np.ptp(a), np.ptp(b))
    # Supplementary (not the criterion): one-sided paired t-test of the mean difference.
    sd = float(np.std(d, ddof=1)) if len(d) > 1 else 0.0
    t = float(np.mean(d) / (sd / np.sqrt(len(d)))) if sd > 0 else float("nan")
    from scipy.stats import t as student
    p = float(student.sf(t, len(d) - 1)) if sd > 0 else float("nan")
    return {"differences": d.tolist(), "median_difference": float(np.median(d)),
            "spread": float(spread), "paired_t": t, "paired_t_p_one_sided": p,
            "measurably_better": bool(np.all(d > 0) and np.median(d) > spread)}


def check_targets(summary):
    """The issue's targets (see :func:`compare` for "measurably better")."""
    targets = {}
    ref = summary.get("float64", {}).get("final_median")
    if ref is not None:
        for name in ("bfp8", "mixed"):
            if name in summary:
                targets[f"{name} within 2 points of float64"] = \
                    summary[name]["final_median"] >= ref - 0.02
    for suffix in ("", "-f64master", "-m8"):
        n, s = f"bfp4-nearest{suffix}", f"bfp4-stochastic{suffix}"
        if n in summary and s in summary:
            c = compare(summary, n, s)
            targets[f"{s} measurably better than {n}"] = c["measurably_better"]
            print(f"{s} - {n}: per seed "
                  + " ".join(f"{100 * x:+.1f}" for x in c["differences"])
                  + f", median {100 * c['median_difference']:+.1f}, spread "
                  f"{100 * c['spread']:.1f} points; paired t = {c['paired_t']:.2f}, "
                  f"one-sided p = {c['paired_t_p_one_sided']:.3f}")
    return targets


def report(summary, args, seconds, command, tuning=None):
    ref = summary.get("float64", {}).get("final_median")
    print(f"\n{'run':<20}{'final acc':>10}{'per seed':>20}{'vs f64':>8}{'final loss':>12}")
    for name, s in summary.items():
        delta = "" if ref is None else f"{100 * (s['final_median'] - ref):+.1f}"
        seeds = " ".join(f"{100 * a:.1f}" for a in s["final_per_seed"])
        loss = s["median_train_loss"][-1]
        print(f"{name:<20}{100 * s['final_median']:>9.1f}%{seeds:>20}{delta:>8}{loss:>12.4f}")
    targets = check_targets(summary)
    for k, v in targets.items():
        print(f"target: {k}: {'met' if v else 'NOT met'}")
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"command": command, "epochs": args.epochs, "seeds": args.seeds,
                   "targets": targets, "seconds": seconds, "lr_tuning": tuning,
                   "summary": summary}, f, indent=1)
    print(f"wrote {args.json}")
    plot(summary, args.plot, args.epochs, len(args.seeds))
    print(f"wrote {args.plot}")


def plot(summary, path, epochs, seeds):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax, lx) = plt.subplots(1, 2, figsize=(13, 5))
    styles = {"float64": ("k", "-"), "bfp8": ("tab:blue", "-"),
              "bfp4-nearest": ("tab:orange", "--"), "bfp4-stochastic": ("tab:orange", "-"),
              "mixed": ("tab:green", "-"), "discrete": ("tab:purple", "-"),
              "bfp4-nearest-f64master": ("tab:brown", "--"),
              "bfp4-stochastic-f64master": ("tab:brown", "-"),
              "bfp4-nearest-m8": ("tab:red", "--"), "bfp4-stochastic-m8": ("tab:red", "-")}
    x = np.arange(1, epochs + 1)
    for name, s in summary.items():
        color, ls = styles.get(name, ("gray", "-"))
        ax.plot(x, 100 * np.array(s["median_test_acc"]), color=color, ls=ls, marker=".",
                label=s["label"])
        lx.semilogy(x, s["median_train_loss"], color=color, ls=ls, marker=".",
                    label=s["label"])
    median = f"median of {seeds} seed{'s' * (seeds > 1)}"
    ax.set_xlabel("epoch")
    ax.set_ylabel(f"test accuracy, % ({median})")
    ax.set_ylim(50, 100)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    lx.set_xlabel("epoch")
    lx.set_ylabel(f"training loss ({median})")
    lx.grid(alpha=0.3, which="both")
    fig.suptitle("digits MLP 64-32-32-10 trained with the accelerator's arithmetic "
                 "(golden backend)")
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
