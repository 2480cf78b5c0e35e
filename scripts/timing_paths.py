"""List the deep register-to-register paths of an iCE40 netlist, grouped by signal name.

Usage::

    python scripts/timing_paths.py --json build/bfp.json           # a build's Yosys netlist
    python scripts/timing_paths.py --bfp '{"lanes": 16}'            # synthesise a BFPColumn
    python scripts/timing_paths.py --json build/bfp.json --limit 14 --paths 5

nextpnr reports one critical path per clock and build; this estimates all of them at once from
the synthesised netlist (``synth_ice40``, flattened), so that a batch of slow paths can be
fixed before the next place-and-route. The delay model is a rough one for a full UP5K:
``--route`` ns per routed connection, ``--lut`` ns per LUT4, a carry chain's ``CI -> CO`` at
``--carry`` ns per bit (its ``CO -> CI`` and ``CI ->`` sum-LUT connections are not routed), a
carry chain leaving to the fabric through one more (feed-through) LUT, and a LUT that only
feeds a flip-flop's D input packed with it (no routing). Calibrated on nextpnr's UP5K paths
of the BFP column at 95 % use (clock-to-out 1.4 ns, 0.9 ns per LUT, 1.8-3.6 ns per hop):
16.7 ns (60 MHz) leaves room for about four LUT levels. Start points are
flip-flops, block-RAM and DSP outputs; end points every flip-flop, block-RAM and DSP input.

For every end point whose estimated arrival exceeds ``--limit`` ns, the report groups the end
points by signal name (the name of the flip-flop's output net without its bit index) and
prints the worst path of each group as the chain of named nets it goes through (``Nl`` = the
number of LUT levels, ``+c`` = the carry bits).
"""

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

#: Start-point clock-to-output delays (ns) by cell type, before routing.
_CLK_TO_OUT = {"SB_RAM40_4K": 2.2, "SB_MAC16": 2.0}
_CLK_TO_Q = 1.4
_SETUP = 0.1


def synthesise(kwargs, workdir):
    """Elaborate ``BFPColumn(**kwargs)`` in the out-of-context wrapper and run synth_ice40."""
    from amaranth.back import rtlil

    from lowbit.boards.toolchain import OOCWrapper, setup_toolchain_env
    from lowbit.hw.bfp import BFPColumn

    setup_toolchain_env()
    kwargs = {"mult": "sb_mac16", "sim_model": False, **kwargs}
    wd = Path(workdir)
    (wd / "top.il").write_text(rtlil.convert(OOCWrapper(BFPColumn(**kwargs)), name="top"))
    subprocess.run([os.environ["YOSYS"], "-q", "-p",
                    "read_rtlil top.il; synth_ice40 -dsp -top top -json top.json"],
                   check=True, cwd=wd)
    return wd / "top.json"


class Netlist:
    """Arrival-time estimate of every net of a flattened iCE40 Yosys JSON netlist."""

    def __init__(self, path, *, route=2.9, lut=0.9, carry=0.28):
        mod = json.loads(Path(path).read_text())["modules"]["top"]
        self.cells = mod["cells"]
        self.route, self.lut, self.carry = route, lut, carry
        self.names = {}
        for name, net in mod["netnames"].items():
            hidden = name.startswith("$") or net.get("hide_name")
            for b in net["bits"]:
                if not isinstance(b, int):
                    continue
                old = self.names.get(b)
                if old is None or (old[1] and not hidden) or (
                        old[1] == hidden and len(name) < len(old[0])):
                    self.names[b] = (f"{name}[{net['bits'].index(b)}]" if len(net["bits"]) > 1
                                     else name, hidden)
        self.driver = {}
        for cn, c in self.cells.items():
            for pn, bits in c["connections"].items():
                if c["port_directions"].get(pn) == "output":
                    for b in bits:
                        if isinstance(b, int):
                            self.driver[b] = (cn, pn)
        # The carry-in net of each SB_CARRY, so that a LUT reading it through I3 is known as
        # the chain's sum LUT (same logic cell, no routing).
        self.carry_in = {c["connections"]["CI"][0] for c in self.cells.values()
                         if c["type"] == "SB_CARRY"}
        self.fanout = collections.Counter()
        for c in self.cells.values():
            for pn, bits in c["connections"].items():
                if c["port_directions"].get(pn) == "input":
                    self.fanout.update(b for b in bits if isinstance(b, int))
        self.carry_users = collections.defaultdict(int)
        for c in self.cells.values():
            for pn, bits in c["connections"].items():
                if c["port_directions"].get(pn) == "input":
                    for b in bits:
                        if isinstance(b, int):
                            d = self.driver.get(b)
                            if d and self.cells[d[0]]["type"] == "SB_CARRY" and not (
                                    c["type"] == "SB_CARRY" and pn == "CI") and not (
                                    c["type"] == "SB_LUT4" and pn == "I3"):
                                self.carry_users[b] += 1
        self._arr = {}
        sys.setrecursionlimit(100000)

    def name(self, bit):
        return self.names.get(bit, (f"${bit}", True))[0]

    def _pin_arrival(self, cell, pin, bit):
        """Arrival of ``bit`` at ``cell``'s input ``pin``: (ns, levels, carry bits, prev)."""
        if not isinstance(bit, int):
            return (0.0, 0, 0, None)
        t, lv, cb, _ = self.arrival(bit)
        d = self.driver.get(bit)
        dtype = self.cells[d[0]]["type"] if d else None
        if dtype == "SB_CARRY" and ((cell["type"] == "SB_CARRY" and pin == "CI") or (
                cell["type"] == "SB_LUT4" and pin == "I3" and bit in self.carry_in)):
            return (t, lv, cb, bit)
        if dtype == "SB_LUT4" and cell["type"].startswith("SB_DFF") and pin == "D" and (
                self.fanout[bit] == 1):
            return (t, lv, cb, bit)     # the LUT is packed with its flip-flop
        if dtype == "SB_CARRY":
            # Leaving the chain: a feed-through LUT, then routing.
            return (t + self.lut + self.route, lv + 1, cb, bit)
        return (t + self.route, lv, cb, bit)

    def arrival(self, bit):
        """(ns, LUT levels, carry bits, previous net) at the driver's output of ``bit``."""
        if bit in self._arr:
            return self._arr[bit]
        self._arr[bit] = (0.0, 0, 0, None)      # breaks combinational loops, if any
        d = self.driver.get(bit)
        if d is None:
            res = (0.0, 0, 0, None)
        else:
            cell = self.cells[d[0]]
            ty = cell["type"]
            if ty == "SB_LUT4":
                ins = [self._pin_arrival(cell, p, cell["connections"][p][0])
                       for p in ("I0", "I1", "I2", "I3")]
                t, lv, cb, prev = max(ins, key=lambda x: x[0])
                res = (t + self.lut, lv + 1, cb, prev)
            elif ty == "SB_CARRY":
                ci = self._pin_arrival(cell, "CI", cell["connections"]["CI"][0])
                ins = [self._pin_arrival(cell, p, cell["connections"][p][0]) for p in ("I0", "I1")]
                ci = (ci[0] + self.carry, ci[1], ci[2] + 1, ci[3])
                ins = [(x[0] + 0.4, x[1], x[2] + 1, x[3]) for x in ins]
                res = max([ci, *ins], key=lambda x: x[0])
            elif ty.startswith("SB_DFF"):
                res = (_CLK_TO_Q, 0, 0, None)
            elif ty in _CLK_TO_OUT:
                res = (_CLK_TO_OUT[ty], 0, 0, None)
            else:
                res = (0.0, 0, 0, None)
        self._arr[bit] = res
        return res

    def endpoints(self):
        """Yield (cell type, signal name, pin, ns, levels, carry bits, last net) per input."""
        for cn, c in self.cells.items():
            ty = c["type"]
            if not (ty.startswith("SB_DFF") or ty in _CLK_TO_OUT):
                continue
            if ty.startswith("SB_DFF"):
                q = c["connections"]["Q"][0]
                sig = self.name(q)
            else:
                sig = f"{ty}:{cn[-40:]}"
            for pn, bits in c["connections"].items():
                if c["port_directions"].get(pn) != "input" or pn.endswith("CLK"):
                    continue
                for b in bits:
                    t, lv, cb, prev = self._pin_arrival(c, pn, b)
                    yield ty, sig, pn, t + _SETUP, lv, cb, b

    def trace(self, bit):
        """The named nets of the worst path ending at net ``bit``, start point first."""
        out = []
        while bit is not None:
            out.append(bit)
            bit = self.arrival(bit)[3]
        shown = []
        for b in reversed(out):
            # Yosys names a mapped cell's net after the register it feeds ("x_SB_DFF_Q_D_..."):
            # keep the signal part, one entry per run of the same name.
            n = re.sub(r"(_SB_[A-Z0-9]+_[A-Z]\w*|\$\d+)$", "", self.name(b))
            n = re.sub(r"_SB_(LUT4|CARRY|DFF\w*)_.*", "", n)
            if n.startswith("$"):
                continue
            if shown and shown[-1][0] == n:
                shown[-1][1] += 1
            else:
                shown.append([n, 1])
        return [n if k == 1 else f"{n}(x{k})" for n, k in shown]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--json", help="Yosys JSON netlist after synth_ice40 (e.g. DIR/bfp.json)")
    src.add_argument("--bfp", help="synthesise BFPColumn with these JSON keyword arguments")
    ap.add_argument("--limit", type=float, default=15.0, help="report end points above (ns)")
    ap.add_argument("--paths", type=int, default=1, help="paths shown per signal")
    ap.add_argument("--route", type=float, default=2.9)
    ap.add_argument("--lut", type=float, default=0.9)
    ap.add_argument("--carry", type=float, default=0.28)
    args = ap.parse_args()
    if args.bfp is not None:
        tmp = tempfile.mkdtemp(prefix="timing-paths-")
        path = synthesise(json.loads(args.bfp), tmp)
    else:
        path = args.json
    nl = Netlist(path, route=args.route, lut=args.lut, carry=args.carry)
    groups = collections.defaultdict(list)
    for _ty, sig, pin, t, lv, cb, b in nl.endpoints():
        if t > args.limit:
            key = re.sub(r"\[\d+\]$", "", sig)
            groups[key].append((t, lv, cb, pin, b))
    worst = sorted(groups.items(), key=lambda kv: -max(x[0] for x in kv[1]))
    print(f"{len(worst)} signals, {sum(len(v) for v in groups.values())} end-point pins "
          f"above {args.limit} ns (route {args.route}, LUT {args.lut}, carry {args.carry}/bit)")
    for key, eps in worst:
        eps.sort(key=lambda x: -x[0])
        t, lv, cb, pin, b = eps[0]
        print(f"{t:6.1f} ns {lv}l+{cb}c  {key}  ({len(eps)} pins)")
        for *_, pin, b in eps[:args.paths]:
            print(f"         {pin}: " + " -> ".join(nl.trace(b)))


if __name__ == "__main__":
    main()
