"""Benchmark the grand unit (and the bare PRNG): logic cells, Fmax and samples per second.

Out-of-context synthesis and place-and-route with YoWASP (:func:`boards.toolchain.implement`)
for each device and lane count, over several placement seeds; Fmax is the median over seeds.
Samples per second assume the one-word modes (normal, uniform, raw): ``L`` results per cycle.

    python scripts/bench_grand.py                       # UP5K, HX8K, ECP5-25F; L = 2, 4, 8; 3 seeds
    python scripts/bench_grand.py --quick               # UP5K, L = 4, one seed
    python scripts/bench_grand.py --devices up5k --lanes 2 4 --seeds 1 2 3
    python scripts/bench_grand.py --modes normal        # the normal-only (area-critical) build
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from boards.toolchain import DEVICES, ToolchainError, implement  # noqa: E402
from hw.grand import GrandUnit  # noqa: E402
from hw.prng import Xoroshiro128aox  # noqa: E402

BLOCKS = {"grand": GrandUnit, "prng": Xoroshiro128aox}


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
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent.parent
                                              / "docs" / "bench" / "grand.json"))
    args = parser.parse_args(argv)
    if args.quick:
        args.devices, args.lanes, args.seeds = ["up5k"], [4], [1]

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
                        res = implement(BLOCKS[block](**kwargs), device,
                                        seed=seed, name=f"{block}{lanes}")
                        runs.append(res)
                except ToolchainError as e:
                    print(f"{block:6} {device:9} {lanes:>2} failed: {e}", flush=True)
                    rows.append({"block": block, "device": device, "lanes": lanes,
                                 "error": str(e)[-300:]})
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
                    "seconds": sum(r["seconds"] for r in runs),
                }
                rows.append(row)
                print(f"{block:6} {device:9} {lanes:>2} {row['lcs']:>6} {lcs_block:>7} "
                      f"{row['lcs_per_sample']:>6} {row['dsps']:>3} {fmax:>8.1f} "
                      f"{','.join(f'{f:.1f}' for f in fmaxes):>20} "
                      f"{row['msamples_per_s']:>7}", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = "python scripts/bench_grand.py " + " ".join(argv if argv is not None else sys.argv[1:])
    for row in rows:
        row["command"] = cmd.strip()
    if args.append and out.exists():
        rows = json.loads(out.read_text())["results"] + rows
    out.write_text(json.dumps({"results": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
