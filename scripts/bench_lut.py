"""Benchmark the transfer-LUT engine: logic cells, RAM blocks, DSPs and Fmax per device.

Each configuration (lanes, byte tables, interpolated int16 tables) is implemented out of context
with :func:`lowbit.boards.toolchain.implement` (YoWASP synthesis + nextpnr) for every device and
seed.
The table reports ``lcs_block`` (nextpnr LCs / LUT4s minus the wrapper estimate), RAM blocks
(iCE40 EBR / ECP5 DP16KD), DSPs, the MEDIAN Fmax over seeds, and lookups per second
(``lanes x Fmax``; both paths accept one beat per cycle).

Usage::

    python scripts/bench_lut.py                          # up5k, hx8k, ecp5-25f; seeds 1 2 3
    python scripts/bench_lut.py --quick                  # up5k only, seed 1
    python scripts/bench_lut.py --devices hx8k --seeds 1 2 3 --configs 4,2,1 8,4,0
"""

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

from lowbit.boards import toolchain  # noqa: E402
from lowbit.hw.lut import TransferLUT  # noqa: E402


def parse_config(text):
    lanes, tables, wide = (int(v) for v in text.split(","))
    return {"lanes": lanes, "tables": tables, "wide_tables": wide}


def run_one(device, seed, config, build_root):
    dut = TransferLUT(**config)
    tag = f"L{config['lanes']}-T{config['tables']}-W{config['wide_tables']}"
    build_dir = os.path.join(build_root, f"lut-{device}-{tag}-s{seed}") if build_root else None
    res = toolchain.implement(dut, device, seed=seed, build_dir=build_dir, name="lut",
                              progress=lambda msg: print("  ..", msg, file=sys.stderr))
    return {**config, "device": device, "seed": seed, "lcs": res["lcs"],
            "lcs_block": res["lcs_block"], "dsps": res["dsps"], "rams": res["rams"],
            "fmax_mhz": res["fmax_mhz"], "seconds": res["seconds"]}


def summarise(runs):
    groups = {}
    for r in runs:
        key = (r["device"], r["lanes"], r["tables"], r["wide_tables"])
        groups.setdefault(key, []).append(r)
    rows = []
    for (device, lanes, tables, wide), rs in groups.items():
        fmax = round(statistics.median(r["fmax_mhz"] for r in rs), 2)
        dev = toolchain.DEVICES[device]
        rows.append({
            "device": device, "lanes": lanes, "tables": tables, "wide_tables": wide,
            "seeds": [r["seed"] for r in rs],
            "lcs_block": statistics.median(r["lcs_block"] for r in rs),
            "lcs_pct": round(100 * statistics.median(r["lcs"] for r in rs) / dev["lcs"], 1),
            "rams": max(r["rams"] for r in rs), "rams_avail": dev["rams"],
            "dsps": max(r["dsps"] for r in rs),
            "fmax_mhz_median": fmax, "fmax_mhz_all": [r["fmax_mhz"] for r in rs],
            "mlookups_s": round(lanes * fmax, 1),
        })
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", nargs="+", default=["up5k", "hx8k", "ecp5-25f"],
                    choices=list(toolchain.DEVICES))
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--configs", nargs="+", type=parse_config,
                    default=[parse_config("4,2,1"), parse_config("4,2,0")],
                    help="lanes,tables,wide_tables triples (default: 4,2,1 and 4,2,0)")
    ap.add_argument("--quick", action="store_true", help="up5k only, seed 1")
    ap.add_argument("--build-dir", help="keep build files under this directory")
    ap.add_argument("--json", default=str(Path(__file__).resolve().parent.parent
                                          / "docs" / "bench" / "lut.json"))
    args = ap.parse_args(argv)
    if args.quick:
        args.devices, args.seeds = ["up5k"], [1]

    runs = []
    for device in args.devices:
        for config in args.configs:
            for seed in args.seeds:
                print(f"lut {device} {config} seed={seed}", file=sys.stderr)
                runs.append(run_one(device, seed, config, args.build_dir))
    rows = summarise(runs)

    head = (f"{'device':9} {'L':>2} {'T':>2} {'W':>2} {'LCs':>6} {'%dev':>5} {'RAM':>7} "
            f"{'DSP':>3} {'Fmax MHz':>9} {'Mlookup/s':>10}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['device']:9} {r['lanes']:>2} {r['tables']:>2} {r['wide_tables']:>2} "
              f"{r['lcs_block']:>6} {r['lcs_pct']:>5} {r['rams']:>3}/{r['rams_avail']:<3} "
              f"{r['dsps']:>3} {r['fmax_mhz_median']:>9} {r['mlookups_s']:>10}")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "block": "lut",
        "command": "python scripts/bench_lut.py " + " ".join(argv if argv is not None
                                                             else sys.argv[1:]),
        "note": "lcs_block = nextpnr LCs/LUT4s minus the OOC wrapper estimate; Fmax = median "
                "over seeds; mlookups_s = lanes x Fmax.",
        "rows": rows, "runs": runs}, indent=2) + "\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
