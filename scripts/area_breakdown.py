"""Where a board's top spends its logic: Yosys cell counts per submodule, before placement.

Usage::

    python scripts/area_breakdown.py                                   # the iCEBreaker's top
    python scripts/area_breakdown.py --set matrix_lanes=16 --set weight_depth=256
    python scripts/area_breakdown.py --board ulx3s --depth 2

Each row synthesises one submodule of the top with its own children (``hierarchy -top M;
synth_ice40 -dsp`` or ``synth_ecp5``, flattened below it), so a row includes its children
and the rows do not add up to the top's (synthesis optimises across the boundaries it is given).
The top's own row is the whole design as ``lowbit build`` synthesises it. Placement packs a LUT
and a flip-flop into one logic cell where it can: the placed LC count of a UP5K top has been
1.23-1.28 x its LUT4 count here (``lowbit build`` reports the placed figure).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from amaranth.back import rtlil
from benchcommon import parse_set  # noqa: F401 (also this script's API)

from lowbit.boards.build import top_parameters
from lowbit.boards.profiles import BOARDS, DEFAULT_BOARD, get_board
from lowbit.boards.toolchain import DEVICES, setup_toolchain_env
from lowbit.hw.top import Accelerator

_CELLS = {"ice40": {"LUT4": ("SB_LUT4",), "FF": ("SB_DFF",), "CARRY": ("SB_CARRY",),
                    "RAM": ("SB_RAM40_4K",), "DSP": ("SB_MAC16",)},
          "ecp5": {"LUT4": ("LUT4",), "FF": ("TRELLIS_FF",), "CARRY": ("CCU2C",),
                   "RAM": ("DP16KD", "TRELLIS_DPR16X4"), "DSP": ("MULT18X18D",)}}


def count_cells(stat_text, family):
    """Cell counts of a Yosys ``stat`` report, grouped as :data:`_CELLS` says."""
    cells = {name: int(n) for n, name in re.findall(r"^\s+(\d+)\s+(\S+)\s*$", stat_text, re.M)}
    return {col: sum(v for k, v in cells.items() if k.startswith(prefixes))
            for col, prefixes in _CELLS[family].items()}


def breakdown(board=DEFAULT_BOARD, overrides=None, depth=3, workdir=None):
    """Rows ``(module, counts)`` for the top of ``board`` with ``overrides`` of its parameters."""
    setup_toolchain_env()
    profile = get_board(board)
    params, _ = top_parameters(profile)
    params.update(overrides or {})
    family = DEVICES[profile.device]["family"]
    synth = "synth_ice40 -dsp" if family == "ice40" else "synth_ecp5"
    top = Accelerator(**params)
    with tempfile.TemporaryDirectory() as tmp:
        wd = Path(workdir or tmp)
        wd.mkdir(parents=True, exist_ok=True)
        (wd / "top.il").write_text(rtlil.convert(top, name="top"))
        modules = re.findall(r"^module \\(\S+)$", (wd / "top.il").read_text(), re.M)
        modules = [mod for mod in modules if mod.count(".") <= depth]
        rows = []
        for mod in modules:
            stat = wd / f"{mod}.stat"
            subprocess.run([os.environ["YOSYS"], "-q", "-p",
                            f"read_rtlil top.il; hierarchy -top \\{mod}; "
                            f"{synth} -top \\{mod}; tee -q -o {stat.name} stat"],
                           cwd=wd, check=True)
            rows.append((mod, count_cells(stat.read_text(), family)))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--board", default=DEFAULT_BOARD, choices=sorted(BOARDS))
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="override a top parameter of the profile (repeatable)")
    ap.add_argument("--depth", type=int, default=3, help="submodule levels to list")
    args = ap.parse_args(argv)
    rows = breakdown(args.board, parse_set(args.set), args.depth)
    cols = list(rows[0][1])
    print("| module | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for mod, counts in rows:
        print(f"| {mod} | " + " | ".join(str(counts[c]) for c in cols) + " |")


if __name__ == "__main__":
    sys.exit(main())
