"""Benchmark the BFP MAC column: resources, Fmax (median over seeds) and MAC/s per device.

Usage::

    python scripts/bench_bfp.py                      # all profiles, 3 seeds
    python scripts/bench_bfp.py --devices up5k --seeds 1
    python scripts/bench_bfp.py --quick              # up5k only, one seed

Each profile builds :class:`lowbit.hw.bfp.BFPColumn` out of context with
:func:`lowbit.boards.toolchain.implement`, and simulates a run of products with full valid/ready to
measure the sustained MACs per cycle (the column stalls while the output unit drains short
products). Results go to ``docs/bench/bfp.json``.

Builds go through the run cache of ``scripts/bench.py`` (``docs/bench/runs.json``,
:class:`benchcommon.RunCache`): with
``--resume`` a build of an unchanged netlist is taken from it. The 16-lane profiles use
``implement``'s default clock target, as ``scripts/bench.py`` does, so they share its builds of
the column; the 64-lane ECP5-85F profile asks nextpnr for 100 MHz.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchcommon import BFP_PROFILES, ROOT, RunCache, bfp_column_row  # noqa: E402

from lowbit.boards.toolchain import implement  # noqa: E402
from lowbit.hw.bfp import BFPColumn  # noqa: E402


def sustained_macs_per_cycle(params, blocks, products=3):
    """Simulated MACs per cycle over ``products`` back-to-back products of ``blocks`` blocks."""
    from amaranth.sim import Simulator

    col = BFPColumn(**{**params, "mult": "lut", "max_blocks": max(blocks, 1)})
    n, b = col.lanes, col.block
    beats = products * blocks * b
    state = {"first": None, "last": None, "outs": 0}

    async def feed(ctx):
        ctx.set(col.cfg_blocks, blocks)
        ctx.set(col.i_w.valid, 1)
        ctx.set(col.i_x.valid, 1)
        ctx.set(col.o.ready, 1)
        ctx.set(col.i_w.payload, {"m": [1] * n, "e": [0] * n})
        ctx.set(col.i_x.payload, {"m": 1, "e": 0})
        sent = cycle = 0
        while state["outs"] < products * n:
            _, _, w_ready, o_valid = await ctx.tick().sample(col.i_w.ready, col.o.valid)
            cycle += 1
            if sent < beats and w_ready:
                sent += 1
                if state["first"] is None:
                    state["first"] = cycle
                if sent == beats:
                    ctx.set(col.i_w.valid, 0)
                    ctx.set(col.i_x.valid, 0)
            if o_valid:
                state["outs"] += 1
        state["last"] = cycle

    sim = Simulator(col)
    sim.add_clock(1e-6)
    sim.add_testbench(feed)
    sim.run()
    return products * blocks * b * n / (state["last"] - state["first"] + 1)


def run(devices, seeds, build_dir=None, progress=print, cache=None, pnr_args=()):
    """Build and simulate each device's profile; ``cache`` is a ``benchcommon.RunCache`` or
    None, ``pnr_args`` extra nextpnr options."""
    results = []
    for device in devices:
        row = bfp_column_row(device, seeds, build_dir=build_dir, progress=progress, cache=cache,
                             pnr_args=pnr_args, implement=implement)
        sustained = {k: sustained_macs_per_cycle(row["params"], k) for k in (1, 4, 16)}
        row["sustained_mac_per_cycle"] = {f"{k} blocks": round(v, 2)
                                          for k, v in sustained.items()}
        results.append(row)
    return results


def table(results):
    head = (f"{'device':9} {'N':>3} {'B':>3} {'mult':10} {'LCs':>6} {'block':>6} {'DSP':>4} "
            f"{'RAM':>4} {'Fmax':>6} {'GMAC/s':>7} {'ceiling':>8} {'MAC/cyc@1,4,16 blk':>20}")
    lines = [head, "-" * len(head)]
    for r in results:
        p = r["params"]
        sus = ",".join(f"{v:.1f}" for v in r["sustained_mac_per_cycle"].values())
        lines.append(f"{r['device']:9} {p['lanes']:>3} {p['block']:>3} {p['mult']:10} "
                     f"{r['lcs']:>6} {r['lcs_block']:>6} {r['dsps']:>4} {r['rams']:>4} "
                     f"{r['fmax_mhz']:>6.1f} {r['peak_mac_per_s'] / 1e9:>7.3f} "
                     f"{r['ratio_to_ceiling']:>8.2f} {sus:>20}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", nargs="+", choices=list(BFP_PROFILES),
                    default=["up5k", "hx8k", "ecp5-85f"])
    ap.add_argument("--seeds", type=int, default=3, help="placement seeds per device")
    ap.add_argument("--quick", action="store_true", help="up5k only, one seed")
    ap.add_argument("--out", default="docs/bench/bfp.json")
    ap.add_argument("--build-dir", default=None, help="keep build files here")
    ap.add_argument("--resume", action="store_true",
                    help="reuse cached builds of unchanged netlists (see --cache)")
    ap.add_argument("--cache", default=str(ROOT / "docs" / "bench" / "runs.json"),
                    help="run cache shared with scripts/bench.py")
    ap.add_argument("--router", choices=["router1", "router2"], default=None,
                    help="nextpnr router (default: nextpnr's, router1)")
    args = ap.parse_args(argv)
    devices, seeds = args.devices, list(range(1, args.seeds + 1))
    if args.quick:
        devices, seeds = ["up5k"], [1]
    t0 = time.monotonic()
    pnr_args = ("--router", args.router) if args.router else ()
    results = run(devices, seeds, args.build_dir, cache=RunCache(args.cache, args.resume),
                  pnr_args=pnr_args)
    print(table(results))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    old = json.loads(out.read_text()) if out.exists() else {}
    merged = {r["device"]: r for r in old.get("results", [])}
    merged.update({r["device"]: r for r in results})
    out.write_text(json.dumps({
        "block": "bfp",
        "command": "python scripts/bench_bfp.py " + " ".join(argv or sys.argv[1:]),
        "seconds": round(time.monotonic() - t0, 1),
        "results": list(merged.values()),
    }, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
