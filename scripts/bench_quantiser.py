"""Benchmark the stochastic quantiser: logic cells, RAMs, DSPs and Fmax per device and per lane.

Each configuration (input format, lanes, int8 multiplier width) is implemented out of context
with :func:`lowbit.boards.toolchain.implement` (YoWASP synthesis + nextpnr) for every device and
seed.
The table reports ``lcs_block`` (nextpnr LCs / LUT4s minus the wrapper estimate), the same per
lane, RAM blocks, DSPs, the MEDIAN Fmax over seeds and elements per second (``lanes x Fmax``;
the quantiser takes one beat of ``lanes`` elements per cycle).

Usage::

    python scripts/bench_quantiser.py                     # up5k, hx8k, ecp5-25f; seeds 1 2 3
    python scripts/bench_quantiser.py --quick             # up5k only, seed 1
    python scripts/bench_quantiser.py --devices hx8k --seeds 1 2 3 --configs f16,2,12 fixed,2,0
    python scripts/bench_quantiser.py --seeds 1 --configs f16,2,12,3 f16,2,12,0   # discrete cost
"""

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

from lowbit.boards import toolchain  # noqa: E402
from lowbit.hw.quantiser import Quantiser  # noqa: E402


def parse_config(text):
    """``fmt,lanes,mult_bits[,code_bits]`` (fixed point is 32 bits with 16 fraction bits;
    ``code_bits`` defaults to 3, the full discrete path; 0 leaves it out)."""
    fields = text.split(",")
    if len(fields) not in (3, 4):
        raise argparse.ArgumentTypeError(f"expected fmt,lanes,mult_bits[,code_bits], not {text}")
    fmt, lanes, mult_bits = fields[:3]
    code_bits = int(fields[3]) if len(fields) == 4 else 3
    return {"fmt": fmt, "lanes": int(lanes), "mult_bits": int(mult_bits), "code_bits": code_bits}


def run_one(device, seed, config, build_root, attempts=2):
    tag = f"{config['fmt']}-L{config['lanes']}-M{config['mult_bits']}-C{config['code_bits']}"
    build_dir = (os.path.join(build_root, f"quantiser-{device}-{tag}-s{seed}") if build_root
                 else None)
    for attempt in range(attempts):
        try:
            res = toolchain.implement(Quantiser(**config), device, seed=seed,
                                      build_dir=build_dir, name="quantiser",
                                      progress=lambda msg: print("  ..", msg, file=sys.stderr))
            break
        except toolchain.ToolchainError as e:
            # The YoWASP tools occasionally fail transiently on a loaded machine; retry once.
            print(f"  .. attempt {attempt + 1} failed: {e}", file=sys.stderr)
            if attempt + 1 == attempts:
                raise
    return {**config, "device": device, "seed": seed, "lcs": res["lcs"],
            "lcs_block": res["lcs_block"], "dsps": res["dsps"], "rams": res["rams"],
            "fmax_mhz": res["fmax_mhz"], "seconds": res["seconds"]}


def summarise(runs):
    groups = {}
    for r in runs:
        key = (r["device"], r["fmt"], r["lanes"], r["mult_bits"], r["code_bits"])
        groups.setdefault(key, []).append(r)
    rows = []
    for (device, fmt, lanes, mult_bits, code_bits), rs in groups.items():
        fmax = round(statistics.median(r["fmax_mhz"] for r in rs), 2)
        lcs = statistics.median(r["lcs_block"] for r in rs)
        dev = toolchain.DEVICES[device]
        rows.append({
            "device": device, "fmt": fmt, "lanes": lanes, "mult_bits": mult_bits,
            "code_bits": code_bits, "seeds": [r["seed"] for r in rs],
            "lcs_block": lcs, "lcs_per_lane": round(lcs / lanes, 1),
            "lcs_pct": round(100 * statistics.median(r["lcs"] for r in rs) / dev["lcs"], 1),
            "rams": max(r["rams"] for r in rs), "dsps": max(r["dsps"] for r in rs),
            "fmax_mhz_median": fmax, "fmax_mhz_all": [r["fmax_mhz"] for r in rs],
            "melem_s": round(lanes * fmax, 1),
        })
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", nargs="+", default=["up5k", "hx8k", "ecp5-25f"],
                    choices=list(toolchain.DEVICES))
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--configs", nargs="+", type=parse_config,
                    default=[parse_config("f16,2,12"), parse_config("f16,2,0"),
                             parse_config("fixed,2,0")],
                    help="fmt,lanes,mult_bits[,code_bits] (default: f16,2,12 f16,2,0 "
                         "fixed,2,0, all with code_bits 3)")
    ap.add_argument("--quick", action="store_true", help="up5k only, seed 1")
    ap.add_argument("--build-dir", help="keep build files under this directory")
    ap.add_argument("--json", default=str(Path(__file__).resolve().parent.parent
                                          / "docs" / "bench" / "quantiser.json"))
    args = ap.parse_args(argv)
    if args.quick:
        args.devices, args.seeds = ["up5k"], [1]

    runs = []
    for device in args.devices:
        for config in args.configs:
            for seed in args.seeds:
                print(f"quantiser {device} {config} seed={seed}", file=sys.stderr)
                runs.append(run_one(device, seed, config, args.build_dir))
    rows = summarise(runs)

    head = (f"{'device':9} {'fmt':5} {'L':>2} {'M':>2} {'n':>1} {'LCs':>6} {'LC/lane':>7} "
            f"{'%dev':>5} {'RAM':>3} {'DSP':>3} {'Fmax MHz':>9} {'Melem/s':>8}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['device']:9} {r['fmt']:5} {r['lanes']:>2} {r['mult_bits']:>2} "
              f"{r['code_bits']:>1} "
              f"{r['lcs_block']:>6} {r['lcs_per_lane']:>7} {r['lcs_pct']:>5} {r['rams']:>3} "
              f"{r['dsps']:>3} {r['fmax_mhz_median']:>9} {r['melem_s']:>8}")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "block": "quantiser",
        "command": "python scripts/bench_quantiser.py " + " ".join(
            argv if argv is not None else sys.argv[1:]),
        "note": "lcs_block = nextpnr LCs/LUT4s minus the OOC wrapper estimate; Fmax = median "
                "over seeds; melem_s = lanes x Fmax (elements per second, millions). Defaults: "
                "block 16, w_max 8, exp_bits 8, rand_bits 8; n = code_bits (0 = no discrete "
                "path); fixed = 32 bits, 16 fraction bits.",
        "rows": rows, "runs": runs}, indent=2) + "\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
