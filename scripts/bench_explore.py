"""Parallel builds of ``lowbit explore``: the wall time of the same builds on 1 and on 2 workers.

Builds one configuration with several placement seeds (default: the 4-lane transfer LUT on the
UP5K, seeds 1-4: four builds of equal size) on an embedded Dask ``LocalCluster`` of each worker
count, through :func:`lowbit.boards.explore.run_sweep` without a run cache (every build runs),
and reports the wall time of the builds, the cluster's start-up apart, and the speed-up
(1 worker / N workers). The machine's CPU count and its load average before and after each
run are recorded too: on a machine shared with other work the speed-up is below the worker
count.

    python scripts/bench_explore.py                                  # lut lanes=4, seeds 1-4
    python scripts/bench_explore.py --block prng --param lanes=2 --workers 1 2 4

Writes ``docs/bench/explore.json`` (``--json``).
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

from lowbit.boards.explore import configs, dask_client, parse_values, run_sweep
from lowbit.boards.toolchain import DEVICES

ROOT = Path(__file__).resolve().parent.parent


def measure(config_list, seeds, workers, say):
    """Wall time of building every configuration with every seed on ``workers`` workers."""
    load0 = os.getloadavg()
    t0 = time.monotonic()
    with dask_client(workers=workers) as client:
        up = time.monotonic()
        rows = run_sweep(config_list, seeds, client=client)
        done = time.monotonic()
    failed = [r["error"] for r in rows if "error" in r]
    if failed:
        raise SystemExit(f"bench_explore: a build failed: {failed[0]}")
    builds = [s for r in rows for s in r["seeds"]]
    result = {"workers": workers, "builds": len(builds),
              "startup_s": round(up - t0, 2), "builds_wall_s": round(done - up, 2),
              "build_s": [s["seconds"] for s in builds],
              "loadavg_before": [round(x, 2) for x in load0],
              "loadavg_after": [round(x, 2) for x in os.getloadavg()]}
    say(f"{workers} worker{'s' * (workers != 1)}: {len(builds)} builds in "
        f"{result['builds_wall_s']} s (+ {result['startup_s']} s cluster start-up), "
        f"load average {result['loadavg_before'][0]} -> {result['loadavg_after'][0]}")
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--block", default="lut")
    ap.add_argument("--device", default="up5k", choices=list(DEVICES))
    ap.add_argument("--param", action="append", default=[],
                    help="k=v1,v2 as for lowbit explore (default: lanes=4)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3, 4])
    ap.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--json", default=str(ROOT / "docs" / "bench" / "explore.json"))
    args = ap.parse_args(argv)

    def say(msg):
        print(f"bench_explore: {msg}", file=sys.stderr, flush=True)

    sweep = []
    for pair in args.param or (["lanes=4"] if args.block == "lut" else []):
        key, _, values = pair.partition("=")
        sweep.append((key, parse_values(values)))
    config_list = configs(args.block, sweep, device=args.device)
    runs = [measure(config_list, args.seeds, n, say) for n in args.workers]
    base = runs[0]["builds_wall_s"]
    for r in runs:
        r["speedup"] = round(base / r["builds_wall_s"], 2)
    result = {"command": ("python scripts/bench_explore.py " + " ".join(
                  argv if argv is not None else sys.argv[1:])).strip(),
              "block": args.block, "device": args.device, "params": dict(sweep),
              "seeds": args.seeds, "cpus": os.cpu_count(),
              "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
              else os.cpu_count(), "runs": runs}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    print("| workers | builds | wall time of the builds | cluster start-up | speed-up | "
          "load average (1 min) before → after |")
    print("|---:|---:|---:|---:|---:|---|")
    for r in runs:
        print(f"| {r['workers']} | {r['builds']} | {r['builds_wall_s']:.1f} s | "
              f"{r['startup_s']:.1f} s | {r['speedup']:.2f} | {r['loadavg_before'][0]} → "
              f"{r['loadavg_after'][0]} |")
    say(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
