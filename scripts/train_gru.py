"""Per-gate precision of a GRU on the digits read row by row (seed 004 Examples 6, 15-20).

Trains :mod:`lowbit.sim.gru`'s GRU (hidden 32, 8 steps of 8 pixels, golden backend: every
matrix product on the BFP MAC column's golden model at the widths the schedule gives its gate)
under each named schedule for ``--epochs`` epochs and ``--seeds`` seeds, prints a Markdown
table of the median final test accuracy (540 test images) and writes ``docs/bench/gru.json``.

Usage::

    python scripts/train_gru.py                     # every schedule, 8 epochs, seeds 1-3
    python scripts/train_gru.py --quick             # 2 epochs, seed 1 (a smoke run)
    python scripts/train_gru.py --runs gates-n6-zr3 --merge docs/bench/gru.json  # add a row
    python scripts/train_gru.py --from-json docs/bench/gru.json   # re-print the table
"""

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

#: (name, schedule, step controller?, label) of every row.
RUNS = [
    ("float32", "float32", False, "float32 reference (every product float32)"),
    ("bfp8", "bfp8", False, "all gates and readout a8w8"),
    ("gates-n6-zr5", "gates-n6-zr5", False, "n a6w6, z r a5w5 (Example 16, ¶[0076])"),
    ("gates-n5-zr6", "gates-n5-zr6", False, "n a5w5, z r a6w6 (the reverse)"),
    ("gates-n6-zr4", "gates-n6-zr4", False, "n a6w6, z r a4w4"),
    ("gates-n4-zr6", "gates-n4-zr6", False, "n a4w4, z r a6w6"),
    ("gates-n6-zr3", "gates-n6-zr3", False, "n a6w6, z r a3w3"),
    ("gates-n3-zr6", "gates-n3-zr6", False, "n a3w3, z r a6w6"),
    ("gates-nf32-zr4", "gates-nf32-zr4", False, "n float32, z r a4w4 (data type per gate)"),
    ("gates-n6-zr4+step", "gates-n6-zr4", True,
     "n a6w6, z r a4w4 + step controller (±1 bit)"),
]


def controller():
    """The step controller of the ``+step`` row: defaults of
    :class:`lowbit.sim.schedule.StepController` (smoothing 0.9, accuracy drop 0.15, speed drop
    0.5 nats/step, warm-up 5, cool-down 5) with the offset allowed one bit either way and a
    patience of 10 calm steps."""
    from lowbit.sim.schedule import StepController
    return StepController(patience=10, min_offset=-1, max_offset=1)


def one_run(job):
    name, schedule, step, seed, epochs, hidden, lr = job
    from lowbit.sim.gru import GRUConfig, train_gru
    t0 = time.perf_counter()
    ctl = controller() if step else None
    tr = train_gru(GRUConfig(schedule=schedule, hidden=hidden, epochs=epochs, lr=lr, seed=seed,
                             step_controller=ctl))
    events = {}
    for h in (ctl.history if ctl else []):
        events[h[5]] = events.get(h[5], 0) + 1
    return {"name": name, "seed": seed, "history": tr.history, "calls": tr.calls,
            "controller_events": events, "seconds": time.perf_counter() - t0}


def table(results, runs):
    lines = ["| schedule | widths z / r / n / readout (last step) | final test acc. (median) | "
             "seeds | vs float32 | `bfp_matvec` calls per run |",
             "|---|---|---|---|---|---|"]
    ref = None
    for name, _, _, label in runs:
        rs = sorted((r for r in results if r["name"] == name), key=lambda r: r["seed"])
        if not rs:
            continue
        accs = [100 * r["history"][-1]["test_acc"] for r in rs]
        med = float(np.median(accs))
        if name == "float32":
            ref = med
        w = rs[0]["history"][-1]["widths"]
        widths = " / ".join(w[g] for g in ("z", "r", "n", "o"))
        diff = "—" if ref is None or name == "float32" else f"{med - ref:+.1f}"
        lines.append(f"| {label} | {widths} | {med:.1f} % | "
                     f"{' / '.join(f'{a:.1f}' for a in accs)} | {diff} | "
                     f"{rs[0]['calls']['bfp']} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.2)
    ap.add_argument("--runs", nargs="+", choices=[r[0] for r in RUNS],
                    default=[r[0] for r in RUNS])
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    ap.add_argument("--quick", action="store_true", help="2 epochs, seed 1")
    ap.add_argument("--json", default="docs/bench/gru.json")
    ap.add_argument("--from-json", metavar="FILE", help="print the table of a previous run")
    ap.add_argument("--merge", metavar="FILE",
                    help="keep the results of FILE for the runs not given to --runs")
    args = ap.parse_args(argv)
    runs = [r for r in RUNS if r[0] in args.runs]
    if args.from_json:
        with open(args.from_json) as f:
            print(table(json.load(f)["results"], runs))
        return 0
    if args.quick:
        args.epochs, args.seeds = 2, [1]
    jobs = [(name, sched, step, seed, args.epochs, args.hidden, args.lr)
            for name, sched, step, _ in runs for seed in args.seeds]
    t0 = time.perf_counter()
    results = []
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            for r in pool.map(one_run, jobs):
                results.append(r)
                print(f"{r['name']} seed {r['seed']}: {100 * r['history'][-1]['test_acc']:.1f} %"
                      f" ({r['seconds']:.0f} s)", file=sys.stderr, flush=True)
    else:
        for job in jobs:
            r = one_run(job)
            results.append(r)
            print(f"{r['name']} seed {r['seed']}: {100 * r['history'][-1]['test_acc']:.1f} % "
                  f"({r['seconds']:.0f} s)", file=sys.stderr, flush=True)
    wall = time.perf_counter() - t0
    command = "python scripts/train_gru.py " + " ".join(argv or sys.argv[1:])
    if args.merge:
        with open(args.merge) as f:
            old = json.load(f)
        done = {r[0] for r in runs}
        results = [r for r in old["results"] if r["name"] not in done] + results
        command = old["command"] + "; " + command
        runs = [r for r in RUNS if any(x["name"] == r[0] for x in results)]
    out = {"command": command,
           "epochs": args.epochs, "seeds": args.seeds, "hidden": args.hidden, "lr": args.lr,
           "wall_seconds": wall, "results": results}
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    print(table(results, runs))
    print(f"\n{len(jobs)} runs in {wall:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
