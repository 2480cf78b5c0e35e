"""The one benchmark suite: every block and the top on every device, median over placement seeds.

Builds each registered block out of context (``lowbit.boards.toolchain.implement``) with its default
parameters — plus the device profile's multiplier style where the block takes one — and the
accelerator top with the profile of the board that carries the device. Writes
``docs/bench/all.json`` and ``docs/PERFORMANCE.md``. Per-block figures of merit (MAC/s,
samples/s, lookups/s) come from the block scripts ``scripts/bench_<block>.py``; this suite
gives the common resource / Fmax table.

It also builds the IEEE float MAC baseline (issue #10, ``scripts/bench_float.py``): f16 and
f32 with 16 lanes and the BFP column's multiplier style per device, and writes the BFP/float
ratios (LC per MAC, Fmax, MAC/s) against the BFP column of the same run (or, when ``bfp`` is
not among the blocks, ``docs/bench/bfp.json``). That code, and the run cache below, is in
``scripts/benchcommon.py``, which the block scripts share.

    python scripts/bench.py                      # all blocks + float baseline, 4 devices, 3 seeds
    python scripts/bench.py --quick              # UP5K only, seed 1
    python scripts/bench.py --blocks grand lut --devices up5k hx8k --seeds 1 2 3 4 5
    python scripts/bench.py --no-float           # blocks only
    python scripts/bench.py --resume             # reuse the cached builds of unchanged netlists

Every finished build (one block, device and placement seed) is stored at once in the run
cache (``--cache``, default ``docs/bench/runs.json``) under the SHA-256 of the wrapped block's
RTLIL (``src`` attributes stripped), the device, the seed, the DSP mapping and the clock target
(when it is not ``implement``'s default).
With ``--resume`` a build whose key is cached is not repeated, so an interrupted run continues
where it stopped and a change to one block rebuilds only that block.

Throughput is results per cycle (from the block's parameters: MACs for ``bfp`` and
``floatmac``, samples for ``grand``, 64-bit words for ``prng``, lookups for ``lut``, elements
for ``quantiser``, lane operations for ``discrete``) times the median Fmax. Where DESIGN §7
gives the device a ceiling for that kind of result, the table gives the ratio to it.
"""

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from benchcommon import (  # noqa: E402
    RunCache,
    accelerator_section,
    bfp_summary,
    float_markdown,
    float_run,
    load_bfp,
    netlist_digest,
    netlist_key,
    ratio_markdown,
    ratios,
    replace_section,
)

from lowbit.boards.explore import (  # noqa: E402
    CEILINGS,
    RATES,
    Config,
    ExploreError,
    SweepInterrupted,
    boards_on,
    dask_client,
    run_sweep,
    throughput,
)
from lowbit.boards.explore import device_params as block_params  # noqa: E402
from lowbit.boards.toolchain import DEVICES, ToolchainError, implement  # noqa: E402
from lowbit.hw.registry import BLOCKS, available_blocks  # noqa: E402

# Shared with the tests and the other scripts (bench.RATES, bench.ToolchainError, ...).
__all__ = ["CEILINGS", "RATES", "ToolchainError", "boards_on", "block_params", "throughput",
           "netlist_key", "netlist_digest", "RunCache", "bench_config", "bench_rows",
           "bench_row", "bench_one", "render_markdown", "render_float", "main"]


def bench_config(name, device, board=None):
    """The out-of-context build of ``name`` on ``device`` with its benchmark parameters
    (:func:`block_params`; for the top, ``board``'s profile): a :class:`Config` of the engine
    that ``lowbit explore`` runs, so both reach the same run cache entries."""
    params = block_params(name, device, board)
    # LUT multipliers mean LUT logic: keep synthesis from mapping them to DSPs.
    return Config(name, params, device, dsp=params.get("mult", params.get("multiplier")) != "lut")


def bench_rows(targets, seeds, say, cache=None, cached_only=False, client=None):
    """Table rows of ``targets`` (``(block, device, board)`` each), built with each placement
    seed through ``cache`` by :func:`lowbit.boards.explore.run_sweep`: one after another in
    this process, or on the Dask ``client`` (a client, or a callable making one when the first
    build the cache lacks comes up)."""
    configs, rows = [], [None] * len(targets)
    for k, (name, device, board) in enumerate(targets):
        config = bench_config(name, device, board)
        try:
            config.component()._MustUse__silence = True
        except (TypeError, ValueError) as e:
            say(f"  {name} on {device}: not buildable with this profile: {e}")
            rows[k] = {"block": name, "device": device, "board": board, "error": str(e)}
            continue
        configs.append((k, config))

    def on_build(config, r):
        head = f"  {config.block:<10} {config.device:<9} seed {r['seed']}:"
        if "error" in r:
            say(f"{head} {r['error']}{' (cached)' if r['cached'] else ''}")
        else:
            say(f"{head} {r['lcs']} LC, {r['fmax_mhz']} MHz "
                f"({'cached' if r['cached'] else str(r['seconds']) + ' s'})")

    # `implement` is looked up here, so that a test can replace this module's.
    done = run_sweep([c for _, c in configs], seeds, cache=cache, client=client,
                     cached_only=cached_only, implement=implement, on_build=on_build)
    for (k, config), row in zip(configs, done, strict=True):
        rows[k] = bench_row(config, row, targets[k][2])
    return rows


def bench_row(config, row, board=None):
    """The table row of :func:`lowbit.boards.explore.make_row`'s ``row`` of ``config``."""
    name, device, params = config.block, config.device, config.params
    base = {"block": name, "device": device, "board": board, "params": params}
    if row.get("pending"):
        return {**base, "pending": True}
    if "error" in row:
        return {**base, "error": row["error"]}
    fmax = row["fmax_mhz"]
    return {
        **base, "seeds": [s["seed"] for s in row["seeds"]],
        **{k: row[k] for k in ("lcs", "lcs_block", "wrapper_lcs", "ffs", "dsps", "rams", "spram")},
        "fmax_mhz_median": fmax,
        "fmax_mhz_all": row["fmax_mhz_all"],
        # Seeds whose ECP5 synthesis fell back to the classic ABC mapping (abc9 failed).
        "classic_abc_seeds": row["classic_abc_seeds"],
        "throughput": throughput(name, device, params, fmax),
        "lcs_pct": row["lcs_pct"], "dsps_pct": row["dsps_pct"],
    }


def bench_one(name, device, seeds, say, cache=None, cached_only=False, board=None):
    """One table row: ``name`` on ``device`` (with ``board``'s profile, for the top) built with
    each placement seed, through ``cache``, in this process (:func:`bench_rows`)."""
    return bench_rows([(name, device, board)], seeds, say, cache, cached_only)[0]


def render_float(float_rows, ratio_rows, commands):
    """Markdown section of the float baseline and the BFP/float ratios."""
    lines = ["", "## IEEE float MAC baseline and BFP/float ratios (issue #10)", "",
             "Float rows: " + "; ".join(f"`{c}`" for c in commands), "",
             "`lowbit.hw.floatmac.FloatMAC` (docs/float_baseline.md): N lanes of "
             "`acc = round(acc + round(w·x))` in binary16 / binary32, one beat per cycle, the "
             "shape of the BFP column's PE array, with the BFP column's multiplier style on the "
             "device. Ratios are BFP column / float MAC of the same lane count on the same "
             "device, or, where that float MAC does not fit, the largest float MAC that does "
             "(> 1: BFP larger or faster). MAC/s = lanes × median Fmax. The BFP figures are "
             "the `bfp` rows above, i.e. the current netlist.", "",
             float_markdown(float_rows)]
    lines += ["", ratio_markdown(ratio_rows)]
    return "\n".join(lines)


def render_markdown(rows, command):
    lines = ["# Performance", "",
             "Out-of-context builds of every block with the YoWASP toolchain, median Fmax over "
             "placement seeds. `LC` is iCE40 logic cells or ECP5 LUT4s of the block alone (the "
             "measurement wrapper's estimated cells subtracted; see `boards/toolchain.py`).", "",
             f"Reproduce: `{command}`. Every build is kept in `docs/bench/runs.json` (keyed by "
             "the netlist, the device and the seed): `python scripts/bench.py --resume` builds "
             "only what changed or is missing, `--cached-only` rewrites these tables without "
             "building (rows with no build of the current netlist are \"not measured yet\").",
             "",
             "| block | device | LC | % of device | DSP | RAM | SPRAM | Fmax MHz (median) "
             "| seeds | throughput | of ceiling |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    classic = False
    for r in rows:
        block = f"{r['block']} ({r['board']})" if r.get("board") else r["block"]
        if r.get("pending"):
            lines.append(f"| {block} | {r['device']} | — | — | — | — | — | not measured "
                         f"yet | | | |")
            continue
        if "error" in r:
            msg = r["error"]
            if "ERROR:" in msg:
                msg = msg[msg.index("ERROR:") + 6:].split(" | ")[0].strip().replace("|", "\\|")
            lines.append(f"| {block} | {r['device']} | — | — | — | — | — | failed: "
                         f"{msg[:80]} | | | |")
            continue
        tp = r.get("throughput")
        rate = ratio = "—"
        if tp:
            rate = f"{tp['per_second'] / 1e6:.0f} M {tp['unit']}/s"
            if "ceiling_ratio" in tp:
                ratio = f"{tp['ceiling_ratio']:.2f}"
        fmax = r["fmax_mhz_median"]
        if r.get("classic_abc_seeds"):
            fmax = f"{fmax} (classic ABC)"
            classic = True
        lines.append(f"| {block} | {r['device']} | {r['lcs_block']} | {r['lcs_pct']} | "
                     f"{r['dsps']} | {r['rams']} | {r['spram']} | {fmax} | "
                     f"{', '.join(map(str, r['seeds']))} | {rate} | {ratio} |")
    if classic:
        lines += ["", "\"(classic ABC)\": Yosys's abc9 LUT mapping failed on that netlist, so "
                  "`lowbit.boards.toolchain.implement` mapped its LUTs with the classic ABC "
                  "instead (docs/bfp.md §5, \"Yosys 0.70 and the 16-lane ECP5 column\"); its "
                  "LUT count and Fmax are not comparable with an abc9 build's."]
    lines += ["", "Device ceilings (DESIGN §7): UP5K has 8 SB_MAC16 (16 int8 MACs/cycle in dual "
              "8×8 mode); a bare 16-lane DSP array closes at ~86 MHz (≈1.4 GMAC/s); 16 LUT lanes "
              "on HX8K at ~82 MHz; a 4-lane Irwin–Hall generator at ~59 MHz on UP5K (236 M "
              "samples/s). ECP5 has no anchor: its MAC ceiling is every MULT18X18D (28 on the "
              "25F, 156 on the 85F) at the block's own Fmax. Throughput is results per cycle × "
              "median Fmax: an upper bound for blocks that stall (the BFP column's sustained "
              "MAC/cycle and the other per-block figures: `scripts/bench_<block>.py`, "
              "`docs/bench/<block>.json`).", ""]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", nargs="+", default=None, choices=list(BLOCKS),
                    help="blocks to build (default: every implemented block)")
    ap.add_argument("--devices", nargs="+", default=list(DEVICES), choices=list(DEVICES))
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--quick", action="store_true", help="UP5K only, seed 1")
    ap.add_argument("--no-float", action="store_true",
                    help="skip the IEEE float MAC baseline and the BFP/float ratios")
    ap.add_argument("--float-fmts", nargs="+", choices=["f16", "f32"], default=["f16", "f32"])
    ap.add_argument("--float-json", default=None,
                    help="take the float rows and the BFP columns built with them "
                         "from this scripts/bench_float.py output instead of building them")
    ap.add_argument("--keep-blocks", action="store_true",
                    help="do not build the blocks: keep the block rows of the existing --json "
                         "(to refresh only the float section)")
    ap.add_argument("--resume", action="store_true",
                    help="reuse cached builds of unchanged netlists (see --cache)")
    ap.add_argument("--cache", default=str(ROOT / "docs" / "bench" / "runs.json"),
                    help="run cache: every finished build is stored here")
    ap.add_argument("--cached-only", action="store_true",
                    help="build nothing: write the tables from the cached builds of the "
                         "current netlists (implies --resume; rows without one are pending)")
    ap.add_argument("--workers", type=int, default=1,
                    help="builds at a time: 1 (default) one after another in this process, N > 1 "
                         "on an embedded Dask cluster of N workers (lowbit explore's engine)")
    ap.add_argument("--scheduler", metavar="ADDRESS",
                    help="run the builds on the Dask cluster of this scheduler, tcp://HOST:PORT "
                         "(docs/explore.md)")
    ap.add_argument("--json", default=str(ROOT / "docs" / "bench" / "all.json"))
    ap.add_argument("--markdown", default=str(ROOT / "docs" / "PERFORMANCE.md"))
    args = ap.parse_args(argv)
    if args.quick:
        args.devices, args.seeds = ["up5k"], [1]
    # The float baseline is built by its own section below, in both formats.
    blocks = args.blocks or [b for b in available_blocks() if b not in ("uart", "floatmac")]

    def say(msg):
        print(msg, file=sys.stderr, flush=True)

    t0 = time.monotonic()
    command = "python scripts/bench.py " + " ".join(argv if argv is not None else sys.argv[1:])
    command = command.strip()
    rows = []
    block_command = command
    if args.keep_blocks:
        if Path(args.json).exists():
            kept = json.loads(Path(args.json).read_text())
            rows, block_command = kept.get("rows", []), kept.get("command", command)
    else:
        cache = RunCache(args.cache, args.resume or args.cached_only)
        # The top once per board profile on the device (they differ in engines).
        targets = [(name, device, board) for device in args.devices for name in blocks
                   for board in (boards_on(device) if name == "top" else [None])]
        with contextlib.ExitStack() as stack:
            client = None
            if args.scheduler or args.workers > 1:
                def client():
                    return stack.enter_context(dask_client(args.workers, args.scheduler,
                                                           say=say))
            try:
                rows = bench_rows(targets, args.seeds, say, cache, args.cached_only, client)
            except SweepInterrupted as e:
                say(f"bench: {e}; the finished builds are in {args.cache} (--resume goes on)")
                return 130
            except ExploreError as e:
                say(f"bench: {e}")
                return 1
    float_rows, ratio_rows, float_commands = [], [], [command]
    if not args.no_float:
        # The BFP side of the ratios, newest netlist last: docs/bench/bfp.json, the columns a
        # saved float run built beside its float MACs, then this run's (or the cache's) rows.
        bfp = {d: bfp_summary(r)
               for d, r in load_bfp(ROOT / "docs" / "bench" / "bfp.json").items()}
        if args.float_json:
            saved = json.loads(Path(args.float_json).read_text())
            float_commands = saved.get("commands", [saved.get("command", "?")])
            float_rows = [r for r in saved.get("results", [])
                          if r["device"] in args.devices and r["params"]["fmt"] in args.float_fmts]
            for b in saved.get("bfp", []):
                if b.get("source") == "bench_float --with-bfp":
                    bfp[b["device"]] = b
        if not args.keep_blocks:
            for r in rows:
                if r["block"] == "bfp" and "error" not in r and not r.get("pending"):
                    bfp[r["device"]] = {**bfp_summary(r), "source": "this run"}
        if not args.float_json:
            float_rows = float_run(args.devices, args.float_fmts, args.seeds, lanes=[16],
                                   progress=say)
        ratio_rows = ratios(float_rows, bfp)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"command": block_command, "rows": rows,
                                           "float_commands": float_commands,
                                           "float": float_rows, "ratios": ratio_rows},
                                          indent=2) + "\n")
    markdown = render_markdown(rows, block_command)
    if float_rows:
        markdown += render_float(float_rows, ratio_rows, float_commands) + "\n"
    # The whole-accelerator section is scripts/bench_boards.py's; keep it.
    markdown = replace_section(markdown, accelerator_section())
    Path(args.markdown).write_text(markdown + "\n")
    print(markdown)
    say(f"done in {time.monotonic() - t0:.0f} s; wrote {args.json} and {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
