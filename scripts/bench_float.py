"""Benchmark the IEEE float MAC baseline against the BFP column: resources, Fmax, MAC/s, ratios.

Usage::

    python scripts/bench_float.py                                   # 4 devices, f16+f32, 3 seeds
    python scripts/bench_float.py --devices up5k ecp5-25f --seeds 1 2 3
    python scripts/bench_float.py --quick                           # up5k, f16, seed 1
    python scripts/bench_float.py --devices ecp5-25f --with-bfp     # build the BFP column too

Each configuration builds :class:`lowbit.hw.floatmac.FloatMAC` out of context with
:func:`lowbit.boards.toolchain.implement` (median Fmax over the placement seeds), with the
multiplier style the BFP column uses on that device (the profiles of ``scripts/bench_bfp.py``,
``benchcommon.BFP_PROFILES``): SB_MAC16 on UP5K, LUTs on HX8K, MULT18X18D on ECP5. Lane
counts: 16 and the BFP column's lane count on the device. A configuration that does not fit
the device is reported as such (that is a result); its other seeds are skipped, since placement
seeds do not change the resource count.

The BFP/float ratios compare each float row with the BFP column of the same lane count on the
same device, taken from this run (``--with-bfp``: the builds of ``scripts/bench_bfp.py``,
without its simulated MACs per cycle) or from ``docs/bench/bfp.json``. Results go to
``docs/bench/float.json``. The building blocks are in ``scripts/benchcommon.py``, which
``scripts/bench.py`` uses for its float section.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchcommon import (  # noqa: E402
    FLOAT_PROFILES,
    bfp_column_row,
    bfp_summary,
    float_run,
    load_bfp,
    misfit_text,
    ratio_markdown,
    ratios,
)


def table(rows):
    head = (f"{'device':9} {'fmt':4} {'N':>3} {'mult':10} {'LCs':>6} {'block':>6} {'LC/lane':>7} "
            f"{'DSP':>4} {'Fmax':>6} {'GMAC/s':>7}")
    lines = [head, "-" * len(head)]
    for r in rows:
        p = r["params"]
        if "error" in r:
            lines.append(f"{r['device']:9} {p['fmt']:4} {p['lanes']:>3} {p['mult']:10} "
                         f"{misfit_text(r)}")
            continue
        lines.append(f"{r['device']:9} {p['fmt']:4} {p['lanes']:>3} {p['mult']:10} "
                     f"{r['lcs']:>6} {r['lcs_block']:>6} {r['lcs_per_lane']:>7} {r['dsps']:>4} "
                     f"{r['fmax_mhz']:>6.1f} {r['peak_mac_per_s'] / 1e9:>7.3f}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", nargs="+", choices=list(FLOAT_PROFILES),
                    default=list(FLOAT_PROFILES))
    ap.add_argument("--fmts", nargs="*", choices=["f16", "f32"], default=["f16", "f32"],
                    help="formats (none: only the BFP column, with --with-bfp)")
    ap.add_argument("--lanes", nargs="+", type=int, default=None,
                    help="lane counts (default: 16 and the BFP column's lanes per device)")
    ap.add_argument("--mult", default=None, help="multiplier style (default: per device)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--quick", action="store_true", help="up5k, f16, 16 lanes, seed 1")
    ap.add_argument("--with-bfp", action="store_true",
                    help="also build the BFP column (scripts/bench_bfp.py) in this run")
    ap.add_argument("--bfp-json", default="docs/bench/bfp.json")
    ap.add_argument("--out", default="docs/bench/float.json")
    ap.add_argument("--build-dir", default=None, help="keep build files here")
    ap.add_argument("--resume", action="store_true",
                    help="reuse the nextpnr reports already in --build-dir")
    args = ap.parse_args(argv)
    if args.quick:
        args.devices, args.fmts, args.seeds, args.lanes = ["up5k"], ["f16"], [1], [16]
    t0 = time.monotonic()
    out = Path(args.out)
    command = "python scripts/bench_float.py " + " ".join(argv if argv is not None
                                                          else sys.argv[1:])
    bfp = {d: bfp_summary(r) for d, r in load_bfp(args.bfp_json).items()}
    if out.exists():
        # BFP columns built by earlier --with-bfp runs are newer than bfp.json.
        for b in json.loads(out.read_text()).get("bfp", []):
            if b.get("source") == "bench_float --with-bfp":
                bfp[b["device"]] = b

    def save(rows):
        # Re-read before writing: runs for other devices may have finished meanwhile.
        old = json.loads(out.read_text()) if out.exists() else {}
        key = lambda r: (r["device"], r["params"]["fmt"], r["params"]["lanes"])  # noqa: E731
        merged = {key(r): r for r in old.get("results", [])}
        merged.update({key(r): r for r in rows})
        for b in old.get("bfp", []):
            if b.get("source") == "bench_float --with-bfp":
                bfp.setdefault(b["device"], b)
        results = sorted(merged.values(), key=key)
        commands = [c for c in old.get("commands", []) if c != command.strip()]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({
            "block": "floatmac",
            "commands": commands + [command.strip()],
            "seconds": round(time.monotonic() - t0, 1),
            "results": results,
            "bfp": list(bfp.values()),
            "ratios": ratios(results, bfp),
        }, indent=2) + "\n")

    if args.with_bfp:
        for device in args.devices:
            r = bfp_column_row(device, args.seeds, build_dir=args.build_dir)
            bfp[device] = {**bfp_summary(r), "source": "bench_float --with-bfp"}
        save([])
    if args.resume and args.build_dir is None:
        ap.error("--resume needs --build-dir")
    rows = float_run(args.devices, args.fmts, args.seeds, lanes=args.lanes, mult=args.mult,
                     build_dir=args.build_dir, resume=args.resume, on_row=save)
    print(table(rows))
    print()
    print(ratio_markdown(ratios(rows, bfp)))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
