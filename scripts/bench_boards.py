"""Each board's whole accelerator as ``lowbit build`` makes it (pins, PLL, link), over seeds.

Builds every board's top with :func:`lowbit.boards.build.build_board` for each placement seed,
records logic cells, DSPs, block RAMs, SPRAMs and Fmax per seed and their medians in
``docs/bench/boards.json``, and writes the "whole accelerator" table (with the digits MLP's
cycles per image from ``docs/bench/demo.json`` and the open peer beside it) between the
``accelerator`` markers of ``docs/PERFORMANCE.md``.

A board build is recorded with the digest of its top's logic (``benchcommon.board_digest``, of
the :class:`lowbit.hw.top.Accelerator` with the board's parameters) and of its build plan
(``plan``: :func:`lowbit.boards.buildcache.board_digest`, the design with its pins, constraints,
Yosys script and nextpnr options); ``--resume`` keeps the seeds already recorded for the same
two digests and builds only the rest, so that a build of another router or floorplan of the same
logic is built again.

    python scripts/bench_boards.py --boards icebreaker            # seeds 1-3, ~3-7 min each
    python scripts/bench_boards.py --boards icebreaker --resume   # only what is missing
    python scripts/bench_boards.py --render-only                  # the table from the JSONs
    python scripts/bench_boards.py --boards icebreaker --reports b1 b2 b3   # finished builds
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from benchcommon import ROOT, accelerator_section, board_digest, replace_section

from lowbit.boards.build import build_board
from lowbit.boards.demo import board_top
from lowbit.boards.profiles import BOARDS

BOARDS_JSON = ROOT / "docs" / "bench" / "boards.json"
PERFORMANCE = ROOT / "docs" / "PERFORMANCE.md"


def _load(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}


def seed_row(report):
    """The figures of one :func:`build_board` report."""
    res = report["resources"]
    return {"seed": report["seed"], "lcs": res["lcs"]["used"], "dsps": res["dsps"]["used"],
            "rams": res["rams"]["used"], "spram": res["spram"]["used"],
            "fmax_mhz": min(v["achieved"] for v in report["fmax"].values()),
            "timing_met": report["timing_met"], "seconds": report.get("seconds")}


def plan_digest(board):
    """The digest of ``board``'s build plan, seed aside (what ``--resume`` also compares)."""
    from lowbit.boards.buildcache import board_digest as digest_of_plan
    return digest_of_plan(board)


def board_entry(board, digest, seeds, plan=None):
    """The ``boards.json`` entry of ``board`` from its per-seed rows (``plan``: its
    :func:`plan_digest`, computed here if not given)."""
    fmax = [s["fmax_mhz"] for s in seeds]
    last = seeds[-1]
    return {"params": board_top(board), "digest": digest,
            "plan": plan if plan is not None else plan_digest(board),
            "seeds": seeds,
            "lcs": last["lcs"], "dsps": last["dsps"], "rams": last["rams"],
            "spram": last["spram"], "fmax_mhz_all": fmax,
            "fmax_mhz_median": round(statistics.median(fmax), 2),
            "timing_met_every_seed": all(s["timing_met"] for s in seeds)}


def bench_board(board, seeds, *, known=None, build_dir, say):
    """Build ``board`` for every seed not in ``known`` (an entry with the same digest)."""
    digest, plan = board_digest(board), plan_digest(board)
    done = {s["seed"]: s for s in (known or {}).get("seeds", [])} \
        if known and known.get("digest") == digest and known.get("plan") == plan else {}
    rows = []
    for seed in seeds:
        if seed in done:
            say(f"{board} seed {seed}: recorded ({done[seed]['fmax_mhz']} MHz)")
            rows.append(done[seed])
            continue
        t0 = time.monotonic()
        report = build_board(board, seed=seed, build_dir=str(Path(build_dir) / board / f"s{seed}"),
                             progress=None)
        rows.append(seed_row(report))
        say(f"{board} seed {seed}: {rows[-1]['lcs']} LC, Fmax {rows[-1]['fmax_mhz']} MHz "
            f"({time.monotonic() - t0:.0f} s)")
    return board_entry(board, digest, rows, plan)


def recorded_board(board, build_dirs, *, say):
    """The ``boards.json`` entry of ``board`` from finished ``lowbit build`` directories (their
    ``report.json``), each checked to be a build of the current plan (the same design, pins,
    constraints and tool options: :func:`lowbit.boards.buildcache.build_dir_digest`; a build
    that wrote the routed netlist or not, as ``lowbit build`` does on the iCE40 boards and not
    on the ECP5 ones, makes the same bitstream and counts either way)."""
    from lowbit.boards.buildcache import board_digest as plan_digest
    from lowbit.boards.buildcache import build_dir_digest
    want = {plan_digest(board, routed_netlist=r) for r in (False, True)}
    rows = []
    for d in build_dirs:
        report = _load(Path(d) / "report.json")
        if report.get("board") != board:
            raise SystemExit(f"bench_boards: {d} holds no build of {board}")
        if build_dir_digest(board, d) not in want:
            raise SystemExit(f"bench_boards: {d} was built from another plan of {board} "
                             f"(another design, constraint or option): build it again")
        rows.append(seed_row(report))
        say(f"{board} seed {rows[-1]['seed']}: {rows[-1]['lcs']} LC, Fmax "
            f"{rows[-1]['fmax_mhz']} MHz (recorded from {d})")
    if len({r["seed"] for r in rows}) != len(rows):
        raise SystemExit("bench_boards: two of the directories are builds of the same seed")
    return board_entry(board, board_digest(board), sorted(rows, key=lambda r: r["seed"]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--boards", nargs="+", choices=list(BOARDS), default=list(BOARDS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--resume", action="store_true",
                    help="keep the seeds recorded for the same top logic")
    ap.add_argument("--render-only", action="store_true",
                    help="only write the table from the recorded JSON files")
    ap.add_argument("--build-dir", default=str(ROOT / "build" / "bench_boards"))
    ap.add_argument("--json", default=str(BOARDS_JSON))
    ap.add_argument("--markdown", default=str(PERFORMANCE))
    ap.add_argument("--reports", nargs="+", metavar="DIR",
                    help="record these finished `lowbit build` directories of the one board of "
                         "--boards (one per seed, each checked against the current plan) "
                         "instead of building")
    args = ap.parse_args(argv)

    def say(msg):
        print(f"bench_boards: {msg}", file=sys.stderr, flush=True)

    data = _load(args.json) or {"boards": {}}
    if args.reports:
        if len(args.boards) != 1:
            ap.error("--reports records the builds of one board: give it with --boards")
        data["boards"][args.boards[0]] = recorded_board(args.boards[0], args.reports, say=say)
        Path(args.json).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    elif not args.render_only:
        for board in args.boards:
            known = data["boards"].get(board) if args.resume else None
            data["boards"][board] = bench_board(board, args.seeds, known=known,
                                                build_dir=args.build_dir, say=say)
            data["command"] = "python scripts/bench_boards.py " + " ".join(
                argv if argv is not None else sys.argv[1:])
            Path(args.json).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    table = accelerator_section()
    path = Path(args.markdown)
    path.write_text(replace_section(path.read_text(), table))
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
