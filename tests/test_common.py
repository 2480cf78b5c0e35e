"""``lowbit.hw.common``'s shared helpers: register_copy."""

import json
import os
import random
import subprocess

from amaranth.back import rtlil
from amaranth.hdl import Module, ResetInserter, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from lowbit.boards.toolchain import setup_toolchain_env
from lowbit.hw.common import register_copy


class _Copies(wiring.Component):
    """A 3-bit register of ``d`` and ``copies`` register_copy copies of it."""

    def __init__(self, copies, plain=False):
        self._copies, self._plain = copies, plain
        super().__init__({"d": In(3), "ref": Out(3), "copy": Out(3).array(copies)})

    def elaborate(self, platform):
        m = Module()
        ref = Signal(3)
        m.d.sync += ref.eq(self.d)
        m.d.comb += self.ref.eq(ref)
        for k in range(self._copies):
            if self._plain:
                copy = Signal(3, name=f"plain{k}")
                m.d.sync += copy.eq(self.d)
            else:
                copy = register_copy(m, ref, self.d, f"copy{k}")
            m.d.comb += self.copy[k].eq(copy)
        return m


def test_register_copy_follows_its_register_through_reset():
    """The copies equal their register in every cycle, across resets in random cycles."""
    dut = _Copies(2)
    rst = Signal()
    top = Module()
    top.submodules.dut = ResetInserter({"sync": rst})(dut)
    sim = Simulator(top)
    sim.add_clock(1e-6)
    seen = []

    async def bench(ctx):
        rng = random.Random(5)
        for _ in range(300):
            ctx.set(dut.d, rng.randrange(8))
            ctx.set(rst, rng.random() < 0.05)
            await ctx.tick()
            seen.append((ctx.get(dut.ref), [ctx.get(c) for c in dut.copy], ctx.get(rst)))

    sim.add_testbench(bench)
    sim.run()
    assert all(copies == [ref, ref] for ref, copies, _ in seen)
    assert len({ref for ref, _, _ in seen}) == 8 and sum(r for _, _, r in seen) > 5


def _ff_bits(component, tmp_path):
    """Flip-flop bits left after Yosys's coarse synthesis (its merge of equal cells)."""
    setup_toolchain_env(os.environ)
    (tmp_path / "top.il").write_text(rtlil.convert(component, name="top"))
    subprocess.run([os.environ["YOSYS"], "-q", "-p",
                    "read_rtlil top.il; synth -top top -run :fine; write_json top.json"],
                   cwd=tmp_path, check=True)
    cells = json.loads((tmp_path / "top.json").read_text())["modules"]["top"]["cells"]
    return sum(int(c["parameters"].get("WIDTH", "1"), 2) for c in cells.values()
               if "dff" in c["type"])


def test_register_copy_is_kept_apart_by_synthesis(tmp_path):
    """Two copies are three registers after Yosys's merge of equal cells; plain copies (the
    same next value) would be merged into one."""
    assert _ff_bits(_Copies(2), tmp_path) == 9
    assert _ff_bits(_Copies(2, plain=True), tmp_path) == 3
