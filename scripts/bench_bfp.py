"""Benchmark the BFP MAC column: resources, Fmax (median over seeds) and MAC/s per device.

Usage::

    python scripts/bench_bfp.py                      # all profiles, 3 seeds
    python scripts/bench_bfp.py --devices up5k --seeds 1
    python scripts/bench_bfp.py --quick              # up5k only, one seed

Each profile builds :class:`lowbit.hw.bfp.BFPColumn` out of context with
:func:`lowbit.boards.toolchain.implement`, and simulates a run of products with full valid/ready to
measure the sustained MACs per cycle (the column stalls while the output unit drains short
products). Results go to ``docs/bench/bfp.json``.

Builds go through ``scripts/bench.py``'s run cache (``docs/bench/runs.json``): with
``--resume`` a build of an unchanged netlist is taken from it. The 16-lane profiles use
``implement``'s default clock target, as ``scripts/bench.py`` does, so they share its builds of
the column; the 64-lane ECP5-85F profile asks nextpnr for 100 MHz.
"""

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench  # noqa: E402

from lowbit.boards.toolchain import default_freq_mhz, implement  # noqa: E402
from lowbit.hw.bfp import BFPColumn  # noqa: E402

#: device -> column parameters, clock target (MHz) and the device's ceiling (DESIGN §7):
#: (description, MACs per cycle, MHz or None for the column's own Fmax).
PROFILES = {
    "up5k": {"params": {"lanes": 16, "block": 16, "mult": "sb_mac16"}, "freq": None,
             "ceiling": ("8 SB_MAC16 dual 8x8 = 16 MAC/cycle at 86 MHz", 16, 86)},
    "hx8k": {"params": {"lanes": 16, "block": 16, "mult": "lut"}, "freq": None,
             "ceiling": ("16 LUT lanes at 82 MHz", 16, 82)},
    "ecp5-85f": {"params": {"lanes": 64, "block": 64, "mult": "mult18x18d"}, "freq": 100,
                 "ceiling": ("156 MULT18X18D at the column's Fmax", 156, None)},
    "ecp5-25f": {"params": {"lanes": 16, "block": 16, "mult": "mult18x18d"}, "freq": None,
                 "ceiling": ("28 MULT18X18D at the column's Fmax", 28, None)},
}


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
    """Build and simulate each device's profile; ``cache`` is a ``bench.RunCache`` or None,
    ``pnr_args`` extra nextpnr options."""
    results = []
    for device in devices:
        prof = PROFILES[device]
        params = dict(prof["params"])
        dsp = params["mult"] != "lut"
        digest = None
        runs = []
        for seed in seeds:
            col = BFPColumn(**params, sim_model=False)
            key = res = None
            if cache is not None:
                digest = digest or bench.netlist_digest(col)
                key = bench.netlist_key(col, device, seed, dsp, prof["freq"], pnr_args,
                                        digest=digest)
                res = cache.get(key)
            if res is None or "error" in res:
                res = implement(
                    col, device, seed=seed, freq_mhz=prof["freq"], name="bfp", dsp=dsp,
                    pnr_args=pnr_args,
                    build_dir=None if build_dir is None else f"{build_dir}/{device}-{seed}",
                    progress=progress)
                if cache is not None:
                    cache.put(key, res)
            runs.append(res)
            progress(f"  {device} seed {seed}: {res['lcs']} LCs ({res['lcs_block']} block), "
                     f"{res['dsps']} DSPs, {res['rams']} RAMs, {res['fmax_mhz']} MHz, "
                     f"{res['seconds']} s")
        fmax = statistics.median(r["fmax_mhz"] for r in runs)
        lanes = params["lanes"]
        peak = lanes * fmax * 1e6
        name, macs, mhz = prof["ceiling"]
        ceiling = macs * (mhz or fmax) * 1e6
        sustained = {k: sustained_macs_per_cycle(params, k) for k in (1, 4, 16)}
        results.append({
            "device": device, "params": params, "seeds": list(seeds),
            "lcs": runs[0]["lcs"], "lcs_block": runs[0]["lcs_block"], "ffs": runs[0].get("ffs"),
            "dsps": runs[0]["dsps"], "rams": runs[0]["rams"],
            "fmax_mhz_runs": [r["fmax_mhz"] for r in runs], "fmax_mhz": fmax,
            "target_mhz": prof["freq"] or default_freq_mhz(device), "peak_mac_per_s": peak,
            **({"pnr_args": list(pnr_args)} if pnr_args else {}),
            "ceiling": name, "ceiling_mac_per_s": ceiling, "ratio_to_ceiling": peak / ceiling,
            "sustained_mac_per_cycle": {f"{k} blocks": round(v, 2)
                                        for k, v in sustained.items()},
        })
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
    ap.add_argument("--devices", nargs="+", choices=list(PROFILES),
                    default=["up5k", "hx8k", "ecp5-85f"])
    ap.add_argument("--seeds", type=int, default=3, help="placement seeds per device")
    ap.add_argument("--quick", action="store_true", help="up5k only, one seed")
    ap.add_argument("--out", default="docs/bench/bfp.json")
    ap.add_argument("--build-dir", default=None, help="keep build files here")
    ap.add_argument("--resume", action="store_true",
                    help="reuse cached builds of unchanged netlists (see --cache)")
    ap.add_argument("--cache", default=str(bench.ROOT / "docs" / "bench" / "runs.json"),
                    help="run cache shared with scripts/bench.py")
    ap.add_argument("--router", choices=["router1", "router2"], default=None,
                    help="nextpnr router (default: nextpnr's, router1)")
    args = ap.parse_args(argv)
    devices, seeds = args.devices, list(range(1, args.seeds + 1))
    if args.quick:
        devices, seeds = ["up5k"], [1]
    t0 = time.monotonic()
    pnr_args = ("--router", args.router) if args.router else ()
    results = run(devices, seeds, args.build_dir, cache=bench.RunCache(args.cache, args.resume),
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
