"""Where a board top's cycles go over a digits RUN: the sequencer's and the column's phases, cycle
by cycle, from a waveform of Amaranth's simulator.

The digits MLP (``lowbit demo digits``' network, every output checked against the model) runs
on the board's own top with a VCD of the session; the script reads the last RUN back and
sorts each of its cycles into one phase, in this order of precedence:

- ``beat``: the column accepts a beat (an input element with its ``N`` weights);
- ``fetch``: FETCH, FETCH_WORDS, DECODE, MUL, RANGE, NEXT (fetching and checking);
- ``control``: CONFIG and the other control instructions' own states;
- ``bias``: the column takes a bias word; ``bias wait``: a bias word waits for the
  column (its combiner still drains the tile's last block);
- ``write``: the write register writes a result while no beat goes in; ``output``: the
  output unit scans or emits, nothing else moves;
- ``lut``: a LUT instruction's cycles; ``other``: anything else in an engine instruction
  (the reader's latency, the combiner's pipeline).

It prints the phases' cycles per image and, with ``--timeline``, the RUN's cycles compressed into
runs of equal state. The input data move through the scratchpad's simulator backdoor
(``tests/backdoor.py``), so the waveform holds little besides the RUNs.

    python scripts/run_timeline.py                        # the iCEBreaker, 4 images
    python scripts/run_timeline.py --board orangecrab --images 2 --timeline
    python scripts/run_timeline.py --set matvec_x_buffer=True
"""

import argparse
import collections
import sys
import tempfile
from pathlib import Path

from benchcommon import ROOT, parse_set

from lowbit.boards.demo import board_top, run_digits
from lowbit.boards.driver import Accelerator
from lowbit.boards.profiles import BOARDS, DEFAULT_BOARD
from lowbit.sim.rtl.transport import SimulatedSerial

sys.path.insert(0, str(ROOT / "tests"))
from backdoor import FastMemoryPort  # noqa: E402

#: Signals of the sequencer (``top.sequencer``) and its column's output unit the phases need.
SEQ_SIGNALS = ("running", "fsm_state", "beat", "mv_b", "take", "rd_valid", "wr_valid",
               "st_lut")
FETCH_STATES = ("FETCH", "FETCH_WORDS", "DECODE", "MUL", "RANGE", "NEXT")
ENGINE_STATES = ("MATVEC", "LUT", "QUANT", "DM_", "LOADW", "MOVE", "GRAND")
PHASES = ("beat", "fetch", "control", "bias", "bias wait", "write", "output", "lut", "other")


def read_vcd(path):
    """Per clock cycle (the values after each rising edge), a dict of the signals of
    :data:`SEQ_SIGNALS` and ``out_busy`` (the output unit's ``busy``)."""
    ids, scope = {}, []
    cycles, vals = [], {}
    with open(path) as f:
        for line in f:
            t = line.split()
            if not t:
                continue
            if t[0] == "$scope":
                scope.append(t[2])
            elif t[0] == "$upscope":
                scope.pop()
            elif t[0] == "$var":
                where = "/".join(scope[1:])
                if where == "top/sequencer" and t[4] in SEQ_SIGNALS + ("clk",):
                    ids[t[3]] = t[4]
                elif where == "top/sequencer/column/out" and t[4] == "busy":
                    ids[t[3]] = "out_busy"
            elif t[0] == "$enddefinitions":
                break
        for line in f:
            c = line[0]
            if c == "#":
                if vals.get("clk") == 1 and not vals.get("_seen"):
                    cycles.append(dict(vals))
                    vals["_seen"] = True
                continue
            if c in "01" and line[1:].strip() in ids:
                name = ids[line[1:].strip()]
                vals[name] = int(c)
                if name == "clk":
                    vals["_seen"] = False
            elif c in "bs":
                v, i = line[1:].split()
                if i in ids:
                    vals[ids[i]] = v if c == "s" else int(v, 2) if set(v) <= {"0", "1"} else -1
    return cycles


def last_run(cycles):
    """The cycles of the last stretch with ``running`` set."""
    end = max(i for i, v in enumerate(cycles) if v.get("running"))
    start = end
    while start > 0 and cycles[start - 1].get("running"):
        start -= 1
    return cycles[start:end + 1]


def phase(v):
    state = str(v.get("fsm_state", "?")).split("/")[0]
    if v.get("beat"):
        return "beat"
    if state in FETCH_STATES:
        return "fetch"
    if not state.startswith(ENGINE_STATES):
        return "control"
    if state == "LUT":
        return "lut"
    if v.get("mv_b") and v.get("rd_valid"):
        return "bias" if v.get("take") else "bias wait"
    if v.get("wr_valid"):
        return "write"
    if v.get("out_busy"):
        return "output"
    return "other"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--board", default=DEFAULT_BOARD, choices=list(BOARDS))
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a top parameter in place of the profile's (repeatable)")
    ap.add_argument("--images", type=int, default=4)
    ap.add_argument("--timeline", action="store_true", help="print the RUN's cycles too")
    args = ap.parse_args(argv)
    top = {**board_top(args.board), **parse_set(args.set)}
    with tempfile.TemporaryDirectory() as tmp:
        vcd = str(Path(tmp) / "run.vcd")
        port = SimulatedSerial(vcd=vcd, **top)
        acc = Accelerator(FastMemoryPort(port), params=top)
        res = run_digits("bfp", images=args.images, board=args.board, accelerator=acc)
        acc.close()
        run = last_run(read_vcd(vcd))
    print(f"{args.board} top, digits MLP, {args.images} images in one RUN: "
          f"{res.cycles_per_image:.1f} cycles/image ({len(run)} cycles in the RUN's trace)")
    counts = collections.Counter(phase(v) for v in run)
    print("| phase | cycles/image | share |\n|---|---:|---:|")
    for p in PHASES:
        print(f"| {p} | {counts[p] / args.images:.1f} | {100 * counts[p] / len(run):.1f} % |")
    if args.timeline:
        prev, start = None, 0
        for i, v in enumerate(run + [None]):
            key = None if v is None else (str(v.get("fsm_state")).split("/")[0], phase(v))
            if key != prev:
                if prev is not None:
                    print(f"{start:5d}-{i - 1:5d} ({i - start:4d}) {prev[0]:12s} {prev[1]}")
                prev, start = key, i
    return 0


if __name__ == "__main__":
    sys.exit(main())
