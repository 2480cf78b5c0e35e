"""Benchmark the grand unit (and the bare PRNG): logic cells, Fmax and samples per second.

Out-of-context synthesis and place-and-route with YoWASP (:func:`lowbit.boards.toolchain.implement`)
for each device and lane count, over several placement seeds; Fmax is the median over seeds.
Samples per second assume the one-word modes (normal, uniform, raw): ``L`` results per cycle.

    python scripts/bench_grand.py                       # UP5K, HX8K, ECP5-25F; L = 2, 4, 8; 3 seeds
    python scripts/bench_grand.py --quick               # UP5K, L = 4, one seed
    python scripts/bench_grand.py --devices up5k --lanes 2 4 --seeds 1 2 3
    python scripts/bench_grand.py --modes normal        # the normal-only (area-critical) build
    python scripts/bench_grand.py --model               # golden models' speed (no build)

``--append`` adds the new rows to those already in ``--out``; without it ``--out`` is
overwritten. The file is rewritten after every row (re-read each time, so runs in parallel may
append to the same file, and a stopped run keeps its finished rows).
``--build-dir DIR`` keeps every build in ``DIR/<block><L>-<device>-s<seed>[-<modes>]``, records
each seed's critical path in the JSON (start and end cell; logic_levels counts the LUT and
carry steps; routing and total ns). With ``--reuse`` a seed whose report is already in the
build directory is read back instead of built again (Fmax and the wrapper estimate as in
``lowbit.boards.toolchain.implement``; ``seconds`` from the files' times).

``--model`` instead times the golden models in NumPy (:func:`model_speed`): 64-bit words per
second of ``lowbit.sim.prng.Xoroshiro128aox.take`` and results per second of
``lowbit.sim.grand.GrandModel.generate`` per mode, median over ``--runs`` runs: here about
0.05 s for 10^6 PRNG words (22 M words/s) and 9 M normal results/s (formerly the wall-clock
assertion ``test_take_is_fast``; a speed belongs in a benchmark, not in a test).
"""

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

from lowbit.boards.toolchain import (  # noqa: E402
    DEVICES,
    OOCWrapper,
    ToolchainError,
    implement,
    parse_nextpnr_report,
)
from lowbit.hw.grand import GrandUnit  # noqa: E402
from lowbit.hw.prng import Xoroshiro128aox  # noqa: E402

BLOCKS = {"grand": GrandUnit, "prng": Xoroshiro128aox}


def model_speed(words=10 ** 6, runs=3, modes=("normal", "normal144", "uniform")):
    """Speed of the golden models (NumPy): ``{name: {"count", "seconds", "per_s"}}``.

    ``prng``: ``words`` 64-bit words of one lane of
    :class:`lowbit.sim.prng.Xoroshiro128aox`; ``grand-<mode>``: ``words // 12`` results of two
    lanes of :class:`lowbit.sim.grand.GrandModel`. ``seconds`` is the median over ``runs``.
    """
    from lowbit.sim.grand import GrandModel
    from lowbit.sim.prng import Xoroshiro128aox as PrngModel

    def timed(fn):
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    out = {}
    gen = PrngModel(1, 1)
    seconds = timed(lambda: gen.take(words))
    out["prng"] = {"count": words, "seconds": seconds, "per_s": words / seconds}
    for mode in modes:
        model = GrandModel(1, 2)
        n = max(words // 12, 1)
        seconds = timed(lambda mode=mode, model=model, n=n: model.generate(mode, n))
        out[f"grand-{mode}"] = {"count": 2 * n, "seconds": seconds, "per_s": 2 * n / seconds}
    return out


def critical_path(report):
    """The first critical path of a nextpnr ``--report`` file: end cells, logic steps, ns."""
    paths = json.loads(Path(report).read_text()).get("critical_paths", [])
    if not paths:
        return None
    steps = paths[0]["path"]

    def cell(name):
        return re.sub(r"^dut\.", "", name.split("_SB_")[0].split("_TRELLIS")[0])

    return {"from": cell(steps[0]["from"]["cell"]), "to": cell(steps[-1]["to"]["cell"]),
            "logic_levels": sum(st["type"] == "logic" for st in steps),
            "routing_ns": round(sum(st["delay"] for st in steps if st["type"] == "routing"), 2),
            "ns": round(sum(st["delay"] for st in steps), 2)}


def reuse_build(component, device, build_dir, name):
    """The :func:`lowbit.boards.toolchain.implement` result of a finished build in ``build_dir``."""
    family = DEVICES[device]["family"]
    report = Path(build_dir) / f"{name}.report.json"
    res = parse_nextpnr_report(report, family)
    wrapper = OOCWrapper(component)
    component._MustUse__silence = True          # only its ports are counted, not elaborated
    clocks = [v["achieved"] for k, v in res["fmax"].items() if re.search(r"clk", k)]
    wrapper_lcs = wrapper.n_out + (wrapper.n_in if family == "ice40" else 0)
    started = (Path(build_dir) / f"{name}.il").stat().st_mtime
    res.update(device=device, fmax_mhz=min(clocks) if clocks else None,
               wrapper_bits=wrapper.n_in + wrapper.n_out, wrapper_lcs=wrapper_lcs,
               lcs_block=max(res["lcs"] - wrapper_lcs, 0),
               seconds=round(report.stat().st_mtime - started, 1))
    return res


def save(out, rows, append, run):
    """Write ``rows`` to ``out`` (after the rows of other runs already there if ``append``)."""
    old = []
    if append and out.exists():
        old = [r for r in json.loads(out.read_text())["results"] if r.get("run") != run]
    out.write_text(json.dumps({"results": old + rows}, indent=2) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", nargs="+", default=["up5k", "hx8k", "ecp5-25f"],
                        choices=list(DEVICES))
    parser.add_argument("--lanes", nargs="+", type=int, default=[2, 4, 8])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--blocks", nargs="+", default=["grand"], choices=list(BLOCKS))
    parser.add_argument("--modes", nargs="+", default=None,
                        help="build the grand unit with only these modes (default: all)")
    parser.add_argument("--append", action="store_true",
                        help="add the results to those already in --out")
    parser.add_argument("--quick", action="store_true",
                        help="UP5K only, L = 4, one seed (overrides --devices/--lanes/--seeds)")
    parser.add_argument("--build-dir", default=None,
                        help="keep the builds here and record each seed's critical path")
    parser.add_argument("--reuse", action="store_true",
                        help="read finished builds in --build-dir back instead of rebuilding")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent.parent
                                              / "docs" / "bench" / "grand.json"))
    parser.add_argument("--model", action="store_true",
                        help="time the golden models in NumPy instead (prints; builds nothing)")
    parser.add_argument("--words", type=int, default=10 ** 6,
                        help="PRNG words per --model run (grand: words / 12 results per lane)")
    parser.add_argument("--runs", type=int, default=3, help="--model runs (median reported)")
    args = parser.parse_args(argv)
    if args.model:
        for name, r in model_speed(args.words, args.runs).items():
            print(f"{name:16} {r['count']:>9} in {r['seconds']:7.3f} s: "
                  f"{r['per_s'] / 1e6:7.2f} M/s")
        return
    if args.quick:
        args.devices, args.lanes, args.seeds = ["up5k"], [4], [1]
    if args.reuse and not args.build_dir:
        parser.error("--reuse needs --build-dir")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = "python scripts/bench_grand.py " + " ".join(argv if argv is not None else sys.argv[1:])
    run = f"{os.getpid()}-{os.times().elapsed:.0f}"

    rows = []
    header = (f"{'block':6} {'device':9} {'L':>2} {'LCs':>6} {'LCs blk':>7} {'LC/smp':>6} "
              f"{'DSP':>3} {'Fmax med':>8} {'Fmax all':>20} {'Msmp/s':>7}")
    print(header)
    print("-" * len(header))
    for block in args.blocks:
        for device in args.devices:
            for lanes in args.lanes:
                runs = []
                try:
                    for seed in args.seeds:
                        kwargs = {"lanes": lanes}
                        if block == "grand" and args.modes:
                            kwargs["modes"] = args.modes
                        bd = None
                        if args.build_dir:
                            tag = "-".join(kwargs.get("modes", []))
                            bd = (Path(args.build_dir)
                                  / f"{block}{lanes}-{device}-s{seed}{'-' * bool(tag)}{tag}")
                        name = f"{block}{lanes}"
                        if args.reuse and (bd / f"{name}.report.json").exists():
                            res = reuse_build(BLOCKS[block](**kwargs), device, bd, name)
                        else:
                            res = implement(BLOCKS[block](**kwargs), device, seed=seed,
                                            name=name, build_dir=bd)
                        if bd is not None:
                            res["critical_path"] = critical_path(
                                bd / f"{block}{lanes}.report.json")
                        runs.append(res)
                except ToolchainError as e:
                    print(f"{block:6} {device:9} {lanes:>2} failed: {e}", flush=True)
                    rows.append({"block": block, "device": device, "lanes": lanes,
                                 "error": str(e)[-300:], "command": cmd.strip(), "run": run})
                    save(out, rows, args.append, run)
                    continue
                fmaxes = [r["fmax_mhz"] for r in runs]
                fmax = statistics.median(fmaxes)
                lcs_block = statistics.median(r["lcs_block"] for r in runs)
                row = {
                    "block": block, "device": device, "lanes": lanes, "seeds": args.seeds,
                    "modes": (args.modes or "all") if block == "grand" else None,
                    "lcs": statistics.median(r["lcs"] for r in runs), "lcs_block": lcs_block,
                    "wrapper_lcs": runs[0]["wrapper_lcs"], "dsps": runs[0]["dsps"],
                    "rams": runs[0]["rams"], "fmax_mhz_median": fmax, "fmax_mhz_all": fmaxes,
                    "samples_per_cycle": lanes,
                    "msamples_per_s": round(lanes * fmax, 1),
                    "lcs_per_sample": round(lcs_block / lanes, 1),
                    "device_lcs": DEVICES[device]["lcs"],
                    "seconds": round(sum(r["seconds"] for r in runs), 1),
                    "command": cmd.strip(), "run": run,
                }
                if args.build_dir:
                    row["critical_paths"] = [r["critical_path"] for r in runs]
                rows.append(row)
                save(out, rows, args.append, run)
                print(f"{block:6} {device:9} {lanes:>2} {row['lcs']:>6} {lcs_block:>7} "
                      f"{row['lcs_per_sample']:>6} {row['dsps']:>3} {fmax:>8.1f} "
                      f"{','.join(f'{f:.1f}' for f in fmaxes):>20} "
                      f"{row['msamples_per_s']:>7}", flush=True)
    save(out, rows, args.append, run)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
