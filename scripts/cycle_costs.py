"""What each instruction costs on a board's top, in cycles, and the digits MLP's cycles per image.

Usage::

    python scripts/cycle_costs.py                                        # the iCEBreaker's top
    python scripts/cycle_costs.py --set matrix_lanes=16 --set weight_depth=256
    python scripts/cycle_costs.py --digits 8                             # plus 8 digits images

Every figure comes from the RUN replies of the board's top in Amaranth's simulator (the replies'
``cycles``, less the 13 cycles of the HALT that ends each program), with every result checked
against the protocol model by the simulated driver. The table is the cycle budget of
``docs/up5k_budget.md`` (issue #20, "Throughput").
"""

import argparse
import sys

import numpy as np
from benchcommon import parse_set

from lowbit.boards.driver import Accelerator
from lowbit.boards.profiles import BOARDS, DEFAULT_BOARD, get_board
from lowbit.sim.program import F_BIAS, Instruction, config


def programs(lanes, block):
    """``(label, program)`` pairs; every program ends with HALT."""
    x, dst, bias = 1024, 3000, 4000
    tiles = max(32 // lanes, 1)        # the digits MLP's hidden layer: 32 rows of 64 inputs
    rows = [("NOP", [Instruction.nop()]),
            ("CONFIG", [config("MANT_WIDTH", 8)])]
    for k, t, b in [(64, 1, True), (64, tiles, True), (64, tiles, False), (16, 1, False)]:
        rows.append((f"MATVEC K={k}, {t} tile{'s' * (t > 1)}, {'bias' if b else 'no bias'}",
                     [Instruction.matvec(x, dst, 0, k // block, t, bias if b else None,
                                         flags=F_BIAS if b else 0)]))
    for n in (32, 64):
        rows.append((f"LUT over {n} elements", [Instruction.lut(x, dst, n)]))
    return [(label, prog + [Instruction.halt()]) for label, prog in rows]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--board", default=DEFAULT_BOARD, choices=list(BOARDS))
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a top parameter in place of the profile's (repeatable)")
    ap.add_argument("--digits", type=int, default=0, metavar="IMAGES",
                    help="also run this many digits images in one RUN")
    args = ap.parse_args(argv)
    top = {**get_board(args.board).top, **parse_set(args.set)}
    acc = Accelerator.simulated(simulator="amaranth", **top)
    lanes, block, depth = top["matrix_lanes"], top.get("block", 16), top["weight_depth"]
    rng = np.random.default_rng(0)
    acc.load_weights(0, (rng.integers(0, 1 << 16, (depth, lanes)) & 0x03FF).astype(np.uint16))
    halt = acc_run(acc, [Instruction.halt()]).cycles
    print(f"{args.board} top, N={lanes}, B={block}, weight depth {depth}; HALT alone "
          f"{halt} cycles")
    print("| instruction | cycles | beats |\n|---|---:|---:|")
    for label, prog in programs(lanes, block):
        r = acc_run(acc, prog)
        print(f"| {label} | {r.cycles - halt} | {r.busy} |")
    if args.digits:
        from lowbit.boards.demo import run_digits
        res = run_digits("bfp", images=args.digits, board=args.board, accelerator=acc)
        print(f"digits MLP, {args.digits} images in one RUN: {res.cycles_per_image:.1f} "
              f"cycles/image, {res.mac_per_cycle:.2f} MAC/cycle")
    return 0


def acc_run(acc, program):
    acc.load_program(program, addr=0)
    return acc.run(0, len(program))


if __name__ == "__main__":
    sys.exit(main())
