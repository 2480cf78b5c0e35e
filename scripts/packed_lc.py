"""A board top's packed logic cells in under a minute: the build plan, Yosys, and nextpnr's packer
alone (``--pack-only``), no placement or routing.

On iCE40 the packed ``ICESTORM_LC`` count is the count the placed design reports (session 22:
5022 both ways), so a change can be checked against the 95 % line before a 15-minute build.
``synth_ice40``'s LUT4 count is no substitute: LUTs, flip-flops and carries pack into cells
differently as the netlist changes (4251 LUT4 gave 5022 LC, 4254 gave 5016).

    python scripts/packed_lc.py                                  # the iCEBreaker's profile
    python scripts/packed_lc.py --set lut_tables=4 --set busy_count=False
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

from benchcommon import parse_set

from lowbit.boards.build import BITSTREAM_NAME, board_plan
from lowbit.boards.profiles import BOARDS, DEFAULT_BOARD
from lowbit.boards.toolchain import DEVICES, setup_toolchain_env


def packed_lc(board=DEFAULT_BOARD, top=None, build_dir=None):
    """``(packed LC, device LC)`` of ``board``'s top (its profile's ``top`` updated with
    ``top``), from nextpnr-ice40's packer."""
    profile = BOARDS[board]
    dev = DEVICES[profile.device]
    if dev["family"] != "ice40":
        raise ValueError(f"Packed LC counts are for iCE40 boards, not {board!r} "
                         f"({profile.device})")
    setup_toolchain_env()
    with tempfile.TemporaryDirectory() as tmp:
        d = build_dir or tmp
        board_plan(board, seed=1, top=top).extract(d)
        name = BITSTREAM_NAME
        subprocess.run([os.environ["YOSYS"], "-q", "-l", f"{name}.rpt", f"{name}.ys"], cwd=d,
                       check=True)
        subprocess.run([os.environ["NEXTPNR_ICE40"], "--quiet", "--pack-only", "--log",
                        "pack.log", *dev["args"], "--json", f"{name}.json", "--pcf",
                        f"{name}.pcf"], cwd=d, check=True)
        with open(os.path.join(d, "pack.log")) as f:
            used, total = re.findall(r"ICESTORM_LC:\s+(\d+)/\s*(\d+)", f.read())[-1]
    return int(used), int(total)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--board", default=DEFAULT_BOARD, choices=list(BOARDS))
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a top parameter over the profile's (repeatable)")
    parser.add_argument("--build-dir", help="keep the files here (default: a temporary folder)")
    args = parser.parse_args(argv)
    try:
        used, total = packed_lc(args.board, parse_set(args.set) or None, args.build_dir)
    except ValueError as exc:
        parser.error(str(exc))
    print(f"{args.board}: {used} / {total} LC ({100 * used / total:.1f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
