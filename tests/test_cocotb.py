# amaranth: UnusedElaboratable=no
"""The generated Verilog in an independent simulator (DESIGN §6 level 3): cocotb + Icarus.

Each test generates a block's Verilog the way ``lowbit verilog BLOCK`` does, compiles it with
Icarus Verilog and drives it from a cocotb bench in ``tests/cocotb/`` with the golden vectors of
:mod:`lowbit.sim.vectors`, comparing bit for bit under random valid gaps and back-pressure. The same
vectors also run through Amaranth's simulator here (``test_vectors_in_amaranth_*``), so a
disagreement between the two simulators cannot hide behind different stimuli.
"""

import os
import re
import subprocess
import sys

import pytest
from amaranth.back import verilog
from amaranth.hdl import Module
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "cocotb"))

import cocotb_runner as cr  # noqa: E402

from lowbit.hw.registry import block_names  # noqa: E402
from lowbit.sim import vectors  # noqa: E402
from lowbit.sim.rtl.harness import run_stream  # noqa: E402

MISSING = cr.missing_tools()
# Skips without the tools, fails under CI=true (tests/conftest.py: missing_tool).
needs_sim = pytest.mark.needs_tools(MISSING and f"cocotb tests cannot run: {MISSING}")

LUT_PARAMS = {"lanes": 2, "tables": 2, "wide_tables": 1}
LINK_PARAMS = {"frame_bytes": 16, "timeout_cycles": 60}
# The fastest UART (divisor 4, uart.MIN_DIVISOR; test_uart_verilog has divisor 12): Icarus time
# goes into the frames. A small EBR scratchpad and a short inter-byte timeout.
TOP_PARAMS = {"clk_freq": 8_000_000, "baud": 2_000_000, "scratch_bytes": 256, "frame_bytes": 64,
              "timeout_bits": 20, "simulation": True}
TOP_SPRAM_PARAMS = dict(TOP_PARAMS, use_spram=True, scratch_bytes=32768)


def lut_phases(vec):
    wide = ("i_wide", "o_wide") if vec["i_wide"] else ()
    return [
        {"inputs": {"i_write": vec["writes"]}, "ticks": 2},
        {"inputs": {p: vec[p] for p in ("i", *wide[:1])},
         "outputs": {p: vec[p] for p in ("o", *wide[1:])}},
    ]


def prng_phases(vec):
    return [
        {"outputs": {"o": vec["o_reset"]}},
        {"set": {"seed": vec["seed"], "seed_load": 1}, "ticks": 1},
        {"set": {"seed_load": 0}, "outputs": {"o": vec["o_load"]}},
    ]


# --- Verilog in Icarus ---------------------------------------------------------------------------

@needs_sim
@pytest.mark.parametrize("seed", [0])
def test_lut_verilog(tmp_path, seed):
    vec = vectors.lut_vectors(seed=seed, n_wide=128, **LUT_PARAMS)
    component, _ = cr.generate_verilog("lut", LUT_PARAMS)
    job = cr.stream_spec(component, lut_phases(vec), seed=seed)
    cr.run_bench("lut", LUT_PARAMS, "tb_stream", job, tmp_path)


@needs_sim
def test_prng_verilog(tmp_path):
    params = {"lanes": 2, "reset_seed": 5}
    vec = vectors.prng_vectors(lanes=2, reset_seed=5, load_seed=77, n=40)
    component, _ = cr.generate_verilog("prng", params)
    job = cr.stream_spec(component, prng_phases(vec), ready_prob=0.5)
    cr.run_bench("prng", params, "tb_stream", job, tmp_path)


@needs_sim
@pytest.mark.parametrize("seed", [0])
def test_link_verilog(tmp_path, seed):
    vec = vectors.link_vectors(frame_bytes=LINK_PARAMS["frame_bytes"], n=24, seed=seed)
    job = dict(vec, timeout_cycles=LINK_PARAMS["timeout_cycles"], valid_prob=0.8,
               ready_prob=0.6, seed=seed)
    cr.run_bench("link", LINK_PARAMS, "tb_link", job, tmp_path)


def top_job(params, seed, n, baud_error=0.0):
    component, _ = cr.generate_verilog("top", params)
    vec = vectors.top_vectors(lanes=component.lanes, scratch_bytes=component.scratch_bytes,
                              frame_bytes=component.frame_bytes, use_spram=component.use_spram,
                              n=n, seed=seed, clk_freq=component.clk_freq, baud=component.baud,
                              block=component.block, matrix_lanes=component.matrix_lanes)
    return dict(vec, divisor=component.divisor, period=float(component.bit_period),
                timeout_bits=component.timeout_bits, seed=seed, baud_error=baud_error)


# Slow: the quick suite runs the same vectors through the top's Verilog at a fractional period
# (test_top_uart_verilog_fast_rates[9/2-2%]) and a whole period through the top with the
# sequencer (test_top_sequencer_uart_verilog).
@needs_sim
@pytest.mark.slow
def test_top_uart_verilog(tmp_path):
    cr.run_bench("top", TOP_PARAMS, "tb_top", top_job(TOP_PARAMS, 0, 12), tmp_path)


@needs_sim
@pytest.mark.parametrize("clk_freq, baud, baud_error", [
    pytest.param(12_000_000, 1_000_000, 0.0, marks=pytest.mark.slow),
    (25_000_000, 3_000_000, 0.02),           # the ULX3S: 25/3 cycles per bit (fractional)
    pytest.param(18_000_000, 4_000_000, -0.02, marks=pytest.mark.slow),      # 9/2
])
def test_uart_verilog(tmp_path, clk_freq, baud, baud_error):
    params = {"clk_freq": clk_freq, "baud": baud}
    cr.run_bench("uart", params, "tb_uart", uart_job(params, baud_error), tmp_path)


def uart_job(params, baud_error):
    component, _ = cr.generate_verilog("uart", params)
    return dict(vectors.uart_vectors(n=40, seed=3), divisor=component.divisor,
                period=float(component.period), baud_error=baud_error, valid_prob=0.3,
                ready_prob=0.5, seed=3, ddr=component.ddr)


@needs_sim
@pytest.mark.parametrize("clk_freq, baud, baud_error", [
    pytest.param(24_000_000, 12_000_000, -0.02, id="2-2%"),     # 2 cycles per bit
    pytest.param(24_000_000, 12_000_000, 0.02, id="2+2%", marks=pytest.mark.slow),
    pytest.param(25_000_000, 3_000_000, 0.02, id="25/3+2%", marks=pytest.mark.slow),
])
def test_uart_ddr_verilog(tmp_path, clk_freq, baud, baud_error):
    """``UART(ddr=True)``: the bench's DDR pin register (tb_uart.ddr_pin) feeds ``rx`` the line
    at both clock edges; 12 Mbaud at 24 MHz with the host 2 % slow and fast, and a fractional
    period. Not vacuous: with the pin's two samples swapped the 2-cycle cases lose bytes (framing
    errors), and with the rising-edge sample on both bits the +2 % case does."""
    params = {"clk_freq": clk_freq, "baud": baud, "ddr": True}
    job = uart_job(params, baud_error)
    assert job["ddr"] and job["period"] == clk_freq / baud
    cr.run_bench("uart", params, "tb_uart", job, tmp_path)


# The boards' fast rates, the host 2 % off, requests back to back at full line rate (the next
# request right after the reply), through the generated Verilog of the whole top. Slow: the quick
# suite runs a fractional rate through the UART's Verilog (test_uart_verilog[25000000-...]),
# the top's Verilog over UART with the sequencer (test_top_sequencer_uart_verilog), and frames
# back to back at line rate through the top in Amaranth (test_top.py).
FAST_TOPS = [
    pytest.param(dict(TOP_PARAMS, clk_freq=18_000_000, baud=4_000_000), -0.02, id="9/2-2%",
                 marks=pytest.mark.slow),
    pytest.param(dict(TOP_PARAMS, clk_freq=25_000_000, baud=3_000_000), 0.02, id="25/3+2%",
                 marks=pytest.mark.slow),
    pytest.param(dict(TOP_PARAMS, clk_freq=12_000_000, baud=4_000_000), 0.02, id="3+2%",
                 marks=pytest.mark.slow),
]


@needs_sim
@pytest.mark.parametrize("params, baud_error", FAST_TOPS)
def test_top_uart_verilog_fast_rates(tmp_path, params, baud_error):
    cr.run_bench("top", params, "tb_top", top_job(params, 1, 12, baud_error), tmp_path)


@needs_sim
def test_bench_catches_a_wrong_vector(tmp_path):
    """The generic bench is not vacuous: one flipped expected bit makes it fail."""
    params = {"lanes": 1, "tables": 1, "wide_tables": 0}
    vec = vectors.lut_vectors(seed=1, lanes=1, tables=1, wide_tables=0)
    vec["o"][17] = [vec["o"][17][0] ^ 0x04]
    component, _ = cr.generate_verilog("lut", params)
    job = cr.stream_spec(component, lut_phases(vec))
    with pytest.raises(AssertionError, match=r"phase 1 o: 1 of 256 beats differ, first #17"):
        cr.run_bench("lut", params, "tb_stream", job, tmp_path)


# --- The same vectors in Amaranth's simulator ----------------------------------------------------

def _phases_in_amaranth(component, phases):
    """Run stream phases (structured payloads) through lowbit.sim.harness.run_stream, in
    sequence."""
    inputs, outputs, writes = {}, {}, []
    for phase in phases:
        if "outputs" not in phase:
            writes += phase["inputs"]["i_write"]
            continue
        inputs.update(phase["inputs"])
        outputs.update({p: len(v) for p, v in phase["outputs"].items()})

    async def setup(ctx):
        for w in writes:
            ctx.set(component.i_write.payload, w)
            ctx.set(component.i_write.valid, 1)
            await ctx.tick()
        ctx.set(component.i_write.valid, 0)
        await ctx.tick().repeat(2)
    return run_stream(component, inputs, outputs, setup=setup, valid_prob=0.7, ready_prob=0.6)


def test_lut_vectors_in_amaranth():
    vec = vectors.lut_vectors(seed=0, n_wide=128, **LUT_PARAMS)
    component, _ = cr.generate_verilog("lut", LUT_PARAMS)
    out = _phases_in_amaranth(component, lut_phases(vec))
    assert out == {"o": vec["o"], "o_wide": vec["o_wide"]}


def test_link_vectors_against_the_model_driver():
    """The link/top vectors agree with the protocol model used by the driver tests: replaying
    every event through a fresh DeviceModel gives the recorded replies."""
    from lowbit.sim.link import DeviceModel
    vec = vectors.top_vectors(scratch_bytes=256, frame_bytes=64, n=12, seed=0)
    model = DeviceModel(scratch_bytes=256, frame_bytes=64)
    for event in vec["events"]:
        got = model.timeout() if event.get("timeout") else model.feed(bytes(event["send"]))
        assert list(got) == event["reply"]
    assert list(model.scratch) == vec["scratch"]
    statuses = {e["reply"][1] for e in vec["events"] if e["reply"]}
    assert statuses >= {0, 1, 2, 3, 4, 5, 6}          # every status code is exercised


@needs_sim
@pytest.mark.parametrize("mode", [
    "trunc2",
    *(pytest.param(m, marks=pytest.mark.slow)
      for m in ("normal", "normal144", "trunc3", "uniform", "raw")),
])
def test_grand_verilog(tmp_path, mode):
    params = {"lanes": 2, "reset_seed": 11}
    vec = vectors.grand_vectors(lanes=2, reset_seed=11, mode=mode, n=24)
    component, _ = cr.generate_verilog("grand", params)
    job = cr.stream_spec(component, [{"outputs": {"o": vec["o"]}}], ready_prob=0.6)
    job["inits"] = {"mode": vec["mode"]}
    cr.run_bench("grand", params, "tb_stream", job, tmp_path)


@needs_sim
@pytest.mark.slow
@pytest.mark.rotate  # one heavy case a day runs in CI's slow run (tests/conftest.py)
@pytest.mark.parametrize("seed", [1, *(pytest.param(s, marks=pytest.mark.heavy) for s in (2, 3))])
def test_lut_link_verilog_more_seeds(tmp_path, seed):
    test_lut_verilog(tmp_path / "lut", seed)
    test_link_verilog(tmp_path / "link", seed)


@needs_sim
@pytest.mark.slow
@pytest.mark.rotate  # one heavy case a day runs in CI's slow run (tests/conftest.py)
@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.heavy)])
def test_top_uart_verilog_spram(tmp_path, seed):
    cr.run_bench("top", TOP_SPRAM_PARAMS, "tb_top", top_job(TOP_SPRAM_PARAMS, seed, 40), tmp_path)


# --- Arithmetic blocks: BFP column, discrete unit, quantiser --------------------------------------
# Vectors from lowbit.sim.vectors (golden models), mapped here to the blocks' configuration ports.
# Each
# case is a phase; tb_bfp / tb_discrete / tb_quantiser run them with benchlib.run_phases.

from lowbit.hw.bfp import ExpMode  # noqa: E402
from lowbit.hw.common import ROUNDING_NAMES  # noqa: E402
from lowbit.hw.discrete import DiscreteOp  # noqa: E402
from lowbit.hw.quantiser import QuantTarget  # noqa: E402

ROUNDING_CODES = {name: member.value for member, name in ROUNDING_NAMES.items()}
BFP_PARAMS = {"lanes": 4, "block": 4, "max_blocks": 4}
#: The lean column the iCEBreaker builds (lowbit.boards.profiles: every area option off).
BFP_LITE_PARAMS = {**BFP_PARAMS, "stochastic": False, "predictor": False, "acc_block_ram": True,
                   "pipelined": False}
DISCRETE_PARAMS = {}                                       # the block's defaults
QUANT_PARAMS = {"lanes": 4}
QUANT_FIXED_PARAMS = {"fmt": "fixed", "width": 24, "frac_bits": 12, "lanes": 4, "exp_bits": 6,
                      "rand_bits": 6, "mult_bits": 8}


def _payload_shape(component, port):
    return component.signature.members[port].signature.members["payload"].shape


def phase_spec(component, phases, **kwargs):
    """:func:`cocotb_runner.stream_spec` plus the phase keys of ``benchlib.run_phases``:
    ``writes`` (one dict of port values per cycle) and ``quiet`` (stream -> payload offered
    but never to be taken)."""
    job = cr.stream_spec(component, phases, **kwargs)
    members = component.signature.members
    for packed, phase in zip(job["phases"], phases, strict=True):
        packed["writes"] = [{p: cr.pack(members[p].shape, v) for p, v in w.items()}
                            for w in phase.get("writes", [])]
        packed["quiet"] = {p: cr.pack(_payload_shape(component, p), v)
                           for p, v in phase.get("quiet", {}).items()}
    return job


def _book(words):
    return [{"shift": w & 7, "direction": (w >> 3) & 1, "sign": w >> 4} for w in words]


def bfp_phases(component, vec):
    phases = []
    for case in vec["cases"]:
        cfg = case["config"]
        quiet = {}
        if cfg["rounding"] != "stochastic":
            quiet["i_rand"] = 1
        if not cfg["bias"]:
            quiet["i_bias"] = {"m": 1, "e": 0}
        sets = {"cfg_width": cfg["width"], "cfg_rounding": ROUNDING_CODES[cfg["rounding"]],
                "cfg_exp_mode": getattr(ExpMode, cfg["exp_mode"].upper()),
                "cfg_fixed_exp": cfg["fixed_exp"], "cfg_bias_en": int(cfg["bias"]),
                "cfg_blocks": cfg["blocks"]}
        for port in ("pred_k", "pred_margin"):          # the predicted mode's ports, if any
            if f"cfg_{port}" in component.signature.members:
                sets[f"cfg_{port}"] = cfg[port]
        phases.append({"set": sets, "inputs": case["inputs"], "outputs": case["outputs"],
                       "quiet": quiet})
    return phases


def discrete_phases(component, vec, *, gap=3):
    """``gap`` idle cycles after each case: the unit's ``op`` may change only when no beat is
    in flight, and beats of ``MUL``/``DIV``/``LUT`` stay in the ``DOT`` stages for two
    cycles after their output (see ``test_discrete_op_switch_verilog``)."""
    return [{"set": {"book": _book(case["config"]["book"]),
                     "op": DiscreteOp[case["config"]["op"]].value,
                     "lut_op": case["config"]["lut_op"]},
             "writes": case["writes"], "inputs": case["inputs"], "outputs": case["outputs"],
             "ticks": gap}
            for case in vec["cases"]]


def quantiser_phases(component, vec):
    phases = []
    for case in vec["cases"]:
        cfg = case["config"]
        sets = {"target": QuantTarget[cfg["target"].upper()].value,
                "rounding": ROUNDING_CODES[cfg["rounding"]], "mant_width": cfg["mant_width"],
                "rule": int(cfg["rule"] == "ceil"), "shift": cfg["shift"], "zero": cfg["zero"]}
        if "mult" in cfg:
            sets["mult"] = cfg["mult"]
        if "book" in cfg:
            sets.update(book=_book(cfg["book"]), code_width=cfg["code_width"])
        quiet = {} if cfg["rounding"] == "stochastic" else {"i_rand": [1] * component.lanes}
        # The book's order relation is decoded into registers: 3 stable cycles before a beat.
        phases.append({"set": sets, "ticks": 3})
        phases.append({"inputs": case["inputs"], "outputs": case["outputs"], "quiet": quiet})
    return phases


def _bfp_vectors(c, seed):
    return vectors.bfp_vectors(lanes=c.lanes, block=c.block, width=c.width, exp_bits=c.exp_bits,
                               max_blocks=c.max_blocks, frac_bits=c.frac_bits,
                               rand_bits=c.rand_bits, stat_shift=getattr(c, "stat_shift", None),
                               jobs=6, seed=seed)


def _lean_bfp_vectors(c, seed):
    """The shared column vectors without the cases the lean column cannot run (stochastic
    rounding, the predicted exponent); the others never depend on them."""
    vec = _bfp_vectors(c, seed)
    return dict(vec, cases=[case for case in vec["cases"]
                            if case["config"]["rounding"] != "stochastic"
                            and case["config"]["exp_mode"] != "predicted"])


ARITH = {
    "bfp": (BFP_PARAMS, _bfp_vectors, bfp_phases, "tb_bfp"),
    "bfp-lite": (BFP_LITE_PARAMS, _lean_bfp_vectors, bfp_phases, "tb_bfp"),
    "discrete": (DISCRETE_PARAMS, lambda c, s: vectors.discrete_vectors(
        lanes=c.lanes, width=c.width, code_bits=c.code_bits, acc_width=c.acc_width, seed=s),
        discrete_phases, "tb_discrete"),
    "quantiser": (QUANT_PARAMS, lambda c, s: _quantiser_vectors(c, s), quantiser_phases,
                  "tb_quantiser"),
    "quantiser-fixed": (QUANT_FIXED_PARAMS, lambda c, s: _quantiser_vectors(c, s),
                        quantiser_phases, "tb_quantiser"),
}


def _quantiser_vectors(c, seed):
    return vectors.quantiser_vectors(fmt=c.fmt, width=c.width, frac_bits=c.frac_bits,
                                     lanes=c.lanes, block=c.block, w_max=c.w_max,
                                     exp_bits=c.exp_bits, rand_bits=c.rand_bits,
                                     mult_bits=c.mult_bits, code_bits=c.code_bits, stride=37,
                                     seed=seed)


def arith_job(name, seed, params=None):
    default, make_vectors, make_phases, bench = ARITH[name]
    params = default if params is None else params
    component, _ = cr.generate_verilog(name.split("-")[0], params)
    vec = make_vectors(component, seed)
    job = phase_spec(component, make_phases(component, vec), seed=seed, valid_prob=0.7,
                     ready_prob=0.6)
    job["interrupt"] = 40
    return component, vec, job, params, bench


@needs_sim
@pytest.mark.parametrize("name", [
    "bfp",                                  # the quick suite's: the column's 23 phases
    *(pytest.param(n, marks=pytest.mark.slow)
      for n in ("discrete", "quantiser", "quantiser-fixed", "bfp-lite"))])
def test_arith_verilog(tmp_path, name):
    _, _, job, params, bench = arith_job(name, 0)
    cr.run_bench(name.split("-")[0], params, bench, job, tmp_path)


def _setup(component, sets, writes):
    async def setup(ctx):
        for port, value in sets.items():
            ctx.set(getattr(component, port), value)
        for write in writes:
            for port, value in write.items():
                ctx.set(getattr(component, port), value)
            await ctx.tick()
        await ctx.tick().repeat(3)
    return setup


def _arith_in_amaranth(component, phases, *, seed=0):
    """The same phases through ``lowbit.sim.harness.run_stream`` (one simulation per phase with
    inputs, configuration and table writes applied in ``setup``); returns the outputs."""
    sets, writes, results = {}, [], []
    for phase in phases:
        sets.update(phase.get("set", {}))
        writes += phase.get("writes", [])
        if not phase.get("inputs"):
            continue
        setup = _setup(component, dict(sets), list(writes))
        out = run_stream(component, phase["inputs"],
                         {p: len(v) for p, v in phase["outputs"].items()}, setup=setup,
                         valid_prob=0.8, ready_prob=0.7, seed=seed)
        results.append(out)      # table writes stay: each simulation starts empty
    return results


# Slow: the quick suite checks the column in Amaranth's simulator against the same model, on the
# same configuration and the same kinds of cases, in tests/test_bfp_rtl.py (SMALL).
@pytest.mark.slow
@pytest.mark.rotate  # one heavy case a day runs in CI's slow run (tests/conftest.py)
@pytest.mark.parametrize("name,every", [
    ("bfp", 2), ("bfp-lite", 1), ("discrete", 1), ("quantiser", 4), ("bfp", 1),
    pytest.param("quantiser", 1, marks=pytest.mark.heavy), ("quantiser-fixed", 1),
])
def test_arith_vectors_in_amaranth(name, every):
    """The vectors of ``test_arith_verilog`` pass in Amaranth's simulator too, so a failure
    in Icarus points at the Verilog path, not at the vectors (the column's every second and the
    quantiser's every fourth case, and all of them)."""
    component, vec, _, _, _ = arith_job(name, 0)
    vec = dict(vec, cases=vec["cases"][::every])
    phases = ARITH[name][2](component, vec)
    expected = [p["outputs"] for p in phases if p.get("inputs")]
    assert _arith_in_amaranth(component, phases) == expected


@needs_sim
@pytest.mark.parametrize("fault", ["flipped-bit",
                                   pytest.param("rand-taken", marks=pytest.mark.slow)])
def test_arith_bench_catches_faults(tmp_path, fault):
    """Negative controls of ``run_phases``: a flipped expected bit fails and names the beat; a
    block taking a stream that the phase declares quiet fails too."""
    component, vec, job, params, bench = arith_job("bfp", 0)
    k = next(j for j, c in enumerate(vec["cases"]) if c["config"]["rounding"] == "stochastic")
    phase = job["phases"][k]
    if fault == "flipped-bit":
        phase["outputs"]["o"][5] ^= 1
        match = rf"phase {k} o: 1 of {len(phase['outputs']['o'])} beats differ, first #5"
    else:
        del phase["inputs"]["i_rand"]
        phase["quiet"]["i_rand"] = 0
        match = "i_rand: taken although this phase must not read it"
    with pytest.raises(AssertionError, match=match):
        cr.run_bench("bfp", params, bench, job, tmp_path)


@needs_sim
def test_discrete_op_switch_verilog(tmp_path):
    """``op`` changes from ``MUL`` (and ``LUT``) to ``DOT`` in the cycle after the previous
    operation's last output beat was taken (no idle gap): the dot products must be the
    model's. (This found MUL/DIV/LUT beats leaking into the DOT accumulator.)"""
    component, vec, _, params, bench = arith_job("discrete", 0)
    by_name = {c["name"]: c for c in vec["cases"]}
    cases = [by_name["mul-default"], by_name["dot"], by_name["lut-add"], by_name["dot"]]
    job = phase_spec(component, discrete_phases(component, {"cases": cases}, gap=0), seed=0,
                     valid_prob=1.0, ready_prob=1.0)
    cr.run_bench("discrete", params, bench, job, tmp_path)


@needs_sim
@pytest.mark.slow
@pytest.mark.rotate  # one heavy case a day runs in CI's slow run (tests/conftest.py)
@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.heavy)])
@pytest.mark.parametrize("name", ["bfp", "discrete", "quantiser", "quantiser-fixed"])
def test_arith_verilog_more_seeds(tmp_path, name, seed):
    _, _, job, params, bench = arith_job(name, seed)
    cr.run_bench(name.split("-")[0], params, bench, job, tmp_path)


@needs_sim
@pytest.mark.slow
@pytest.mark.parametrize("name,params", [
    ("bfp", {}),                                   # 16 lanes, 16-element blocks, 16 blocks
    ("discrete", {"lanes": 3, "width": 12, "code_bits": 3, "acc_width": 14}),
    ("quantiser", {"lanes": 1, "block": 32, "w_max": 12, "exp_bits": 7, "rand_bits": 3,
                   "mult_bits": 0}),
])
def test_arith_verilog_other_sizes(tmp_path, name, params):
    """The block defaults for the column, and other generics for the discrete unit (3-bit
    codes, 12-bit operands, a narrow accumulator) and the quantiser (one lane, MXINT8-sized
    blocks, 12-bit mantissas, 3 random bits, no int8 multiplier)."""
    _, _, job, params, bench = arith_job(name, 0, params)
    cr.run_bench(name, params, bench, job, tmp_path)


# --- Verilog that every simulator runs ----------------------------------------------------------

#: Yosys' Verilog backend writes the bits of a signal that Amaranth assigns in a process (e.g. a
#: struct with some fields set under ``m.If``) as ``always @*`` blocks, one per group of bits. A
#: group whose right-hand sides are all constants (a field left at its reset value, or set only
#: to constants) gives an ``always @*`` with an empty sensitivity list: Icarus never runs it and
#: those bits stay X. The scan below finds such blocks in ``verilog.convert`` output.
_ALWAYS_COMB = re.compile(r"always @\*\s")
_BEGIN_END = re.compile(r"\\\S+\s|\bbegin\b|\bend\b")     # escaped identifiers are skipped
#: Yosys' first statement of a ``begin`` block: reads a ``reg`` initialised to 0 (an event at
#: time 0 in Verilog-2005). It is not a read of the design, so it does not count.
_BACKEND_TRIGGER = re.compile(r"if \(\\\$auto\$verilog_backend\.cc:\d+:dump_module\$\d+ \) "
                              r"begin end")
_ASSIGNED = re.compile(r"^\s*[^=;\n]+?\s=(?!=)", re.M)
_KEYWORDS = re.compile(r"\b(?:begin|end|if|else|casez|case|endcase|default)\b")
_LITERAL = re.compile(r"\b\d*'[sS]?[hbdoHBDO][0-9a-fA-FxXzZ?_]+|\b\d+\b")
_IDENTIFIER = re.compile(r"\\\S+|[A-Za-z_][\w$]*")


def always_comb_blocks(text):
    """The bodies of the ``always @*`` blocks of Yosys Verilog ``text`` (one statement, or a
    ``begin`` ... ``end`` block), in order."""
    for match in _ALWAYS_COMB.finditer(text):
        rest = text[match.end():]
        if not re.match(r"begin\b", rest):
            yield rest[:rest.index(";") + 1]
            continue
        depth = 0
        for token in _BEGIN_END.finditer(rest):
            if token.group() in ("begin", "end"):
                depth += 1 if token.group() == "begin" else -1
                if depth == 0:
                    yield rest[:token.end()]
                    break


def constant_only_processes(text):
    """The ``always @*`` bodies of ``text`` that read no signal: every right-hand side and
    condition is a literal, so the block has nothing to be sensitive to."""
    def reads(body):
        for pattern in (_BACKEND_TRIGGER, _ASSIGNED, _KEYWORDS, _LITERAL):
            body = pattern.sub(" ", body)
        return _IDENTIFIER.findall(body)
    return [body for body in always_comb_blocks(text) if not reads(body)]


class _PartlyConstantStruct(wiring.Component):
    """The pattern FloatMAC had: a struct assigned in a process (a field set under ``m.If``),
    with a field never driven (left at its reset value) and a field driven by a constant."""

    def __init__(self):
        super().__init__({"a": In(4), "y": Out(data.StructLayout({"v": 4, "k": 2, "s": 1,
                                                                  "z": 1}))})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += [self.y.v.eq(self.a), self.y.s.eq(self.a[0]), self.y.z.eq(0)]
        with m.If(self.a == 0):
            m.d.comb += self.y.v.eq(15)
        return m


def test_constant_only_scan():
    """The scan finds exactly the constant-only blocks Yosys writes for the old FloatMAC pattern
    (the undriven field and the constant one, not the fields read from ``a``), and knows both
    shapes of ``always @*`` (one statement, ``begin`` ... ``end``) and case statements."""
    text = verilog.convert(_PartlyConstantStruct(), name="partly_constant")
    assert sorted(body.split()[0] for body in constant_only_processes(text)) == ["y[5:4]",
                                                                                   "y[7]"]
    assert len(list(always_comb_blocks(text))) > 2        # v and s are not flagged
    handmade = ("  always @*\n    x[1:0] = 2'h0;\n"
                "  always @*\n    x[3:2] = \\$12 [1:0];\n"
                "  always @* begin\n    if (\\$auto$verilog_backend.cc:2355:dump_module$1 ) "
                "begin end\n    y = 4'h3;\n    if (1'h1) begin\n      y = 4'b0001;\n    end\n"
                "  end\n"
                "  always @* begin\n    z = 1'h0;\n    casez (sel)\n      2'b?1:\n"
                "        z = 1'h1;\n    endcase\n  end\n"
                "  always @* begin\n    w = 1'h0;\n    if (en) begin\n      w = 1'h1;\n"
                "    end\n  end\n")
    assert len(list(always_comb_blocks(handmade))) == 5
    assert [body.split()[0] for body in constant_only_processes(handmade)] == ["x[1:0]",
                                                                               "begin"]


@pytest.mark.parametrize("params", [
    pytest.param({"fmt": "f16"}, marks=pytest.mark.slow), {"fmt": "f32"},
    *(pytest.param(p, marks=pytest.mark.slow) for p in (
        {"fmt": "f16", "mult": "sb_mac16"}, {"fmt": "f32", "mult": "mult18x18d"},
        {"fmt": "f16", "mult": "mult18x18d", "sim_model": False})),
], ids=lambda params: "-".join(str(v) for v in params.values()))
def test_floatmac_verilog_has_no_constant_only_process(params):
    """FloatMAC's Verilog (default ``lut`` multipliers and the hard-multiplier styles, f16 and
    f32) has no ``always @*`` that Icarus would never run. (It had: the NaN / Inf flags of the
    adder's near path and the NaN flag of the rounded product.)"""
    _, text = cr.generate_verilog("floatmac", dict(params, lanes=2, max_len=4))
    assert constant_only_processes(text) == []


def icarus_warnings(tmp_path, text):
    """Icarus Verilog's compile-time messages for the Verilog ``text`` (Verilog-2005 mode)."""
    source = tmp_path / "design.v"
    source.write_text(text)
    done = subprocess.run(["iverilog", *cr.ICARUS_ARGS, "-o", str(tmp_path / "design.vvp"),
                           str(source)], capture_output=True, text=True, check=True)
    return done.stdout + done.stderr


@needs_sim
@pytest.mark.parametrize("fmt", [pytest.param("f16", marks=pytest.mark.slow), "f32"])
def test_floatmac_verilog_icarus_triggers_every_process(tmp_path, fmt):
    """Icarus itself agrees: it warns about an ``always @*`` that can never trigger for the
    pattern FloatMAC had (negative control), and not for FloatMAC's Verilog."""
    toy = icarus_warnings(tmp_path, verilog.convert(_PartlyConstantStruct(), name="toy"))
    assert toy.count("@* found no sensitivities so it will never trigger") == 2
    _, text = cr.generate_verilog("floatmac", {"lanes": 2, "fmt": fmt, "max_len": 4})
    assert "found no sensitivities" not in icarus_warnings(tmp_path, text)


# Slow: the quick suite scans the top's (most of the blocks inside) in
# test_cli.py::test_verilog_to_stdout.
@pytest.mark.slow
@pytest.mark.parametrize("block", block_names())
def test_registry_verilog_has_no_constant_only_process(block):
    """Every block as ``lowbit verilog BLOCK`` builds it on defaults."""
    _, text = cr.generate_verilog(block, {})
    assert constant_only_processes(text) == []


# --- Float MAC baseline (#10) and the top with the layer sequencer --------------------------------

FLOATMAC_PARAMS = {"f16": {"lanes": 4, "fmt": "f16", "max_len": 16},
                   "f32": {"lanes": 4, "fmt": "f32", "max_len": 16}}


def floatmac_phases(vec):
    return [{"set": {"cfg_len": c["len"]}, "inputs": {"i_w": c["w"], "i_x": c["x"]},
             "outputs": {"o": c["o"]}} for c in vec["cases"]]


def floatmac_job(fmt, seed):
    params = FLOATMAC_PARAMS[fmt]
    component, _ = cr.generate_verilog("floatmac", params)
    vec = vectors.floatmac_vectors(lanes=component.lanes, fmt=fmt, seed=seed)
    job = cr.stream_spec(component, floatmac_phases(vec), seed=seed, valid_prob=0.7,
                         ready_prob=0.6)
    job["interrupt"] = 12
    return component, vec, job, params


@needs_sim
@pytest.mark.parametrize("fmt", [pytest.param("f16", marks=pytest.mark.slow), "f32"])
def test_floatmac_verilog(tmp_path, fmt):
    """FloatMAC's Verilog against lowbit.sim.floatmac bit for bit: every pair of edge values,
    overflow,
    Inf - Inf, cancellation, flush to zero, subnormal inputs and random products, with valid
    gaps, back-pressure, stream rules and a reset in mid-product, on the Verilog exactly as
    ``lowbit verilog floatmac`` writes it."""
    _, _, job, params = floatmac_job(fmt, 0)
    cr.run_bench("floatmac", params, "tb_floatmac", job, tmp_path)


# Slow: the quick suite checks FloatMAC in Amaranth's simulator against the same model on every
# pair of edge values, random products and the adder's cases in tests/test_floatmac.py (f32).
@pytest.mark.slow
@pytest.mark.parametrize("fmt,every", [("f16", 2), ("f32", 2), ("f16", 1), ("f32", 1)])
def test_floatmac_vectors_in_amaranth(fmt, every):
    """The same FloatMAC vectors through Amaranth's simulator (the edge pairs and every second
    random case, and all of them)."""
    component, vec, _, _ = floatmac_job(fmt, 0)
    vec = dict(vec, cases=vec["cases"][::every])
    phases = floatmac_phases(vec)
    expected = [p["outputs"] for p in phases]
    assert _arith_in_amaranth(component, phases) == expected


@needs_sim
def test_floatmac_bench_catches_a_wrong_vector(tmp_path):
    """Negative control: one flipped expected bit of an edge-pair product fails the bench."""
    _, _, job, params = floatmac_job("f32", 0)
    job["phases"][0]["outputs"]["o"][7] ^= 1 << 16
    with pytest.raises(AssertionError, match=r"phase 0 o: 1 of \d+ beats differ, first #7"):
        cr.run_bench("floatmac", params, "tb_floatmac", job, tmp_path)


# The fastest UART (divisor 3, uart.MIN_DIVISOR) and the engines the sequencer vectors use (the
# BFP column, the LUT): Icarus runs this top about 1.4 times as fast as with the discrete unit,
# the quantiser and the grand unit beside them (TOP_SEQ_EVERY_ENGINE, -m slow).
TOP_SEQ_PARAMS = {"clk_freq": 6_000_000, "baud": 2_000_000, "scratch_bytes": 2048,
                  "frame_bytes": 256, "timeout_bits": 20, "simulation": True, "sequencer": True,
                  "matrix_lanes": 4, "block": 4, "max_blocks": 4, "weight_depth": 64,
                  "lanes": 2, "lut_tables": 2, "discrete": False, "quantiser": False,
                  "grand": False}
TOP_SEQ_EVERY_ENGINE = dict(TOP_SEQ_PARAMS, discrete=True, quantiser=True, grand=True)


def test_top_seq_vectors_cover_the_program():
    """The sequencer vectors do what they claim in the model: the two layer programs halt OK,
    the limited run stops with LIMIT, the last one with BAD_ADDRESS at its MOVE, and MATVEC
    overwrote exactly its outputs of the fill pattern."""
    import struct

    from lowbit.sim.link import Opcode, Status, decode_reply
    vec = vectors.top_seq_vectors(params=TOP_SEQ_PARAMS, seed=0)
    runs = [decode_reply(bytes(e["reply"])) for e in vec["events"] if e.get("run")]
    assert [(s, *struct.unpack("<IIII", body)[:2]) for s, body in runs] == [
        (Status.OK, 8 * 16, 9), (Status.OK, 64 * 2 + 4 * 16, 5), (Status.LIMIT, 96 * 2 + 16, 1),
        (Status.BAD_ADDRESS, 96 * 2 + 2 * 16, 2)]
    read = next(e for e in vec["events"] if e["send"][1] == Opcode.MEM_READ)
    status, data = decode_reply(bytes(read["reply"]))
    words = struct.unpack(f"<{len(data) // 2}H", data)
    ya = 232 - 200                                   # MATVEC output, after its fill pattern
    assert status == Status.OK and 0xBEEF not in words[ya:ya + 8]
    assert words[ya + 8:ya + 16] == (0xBEEF,) * 8    # nothing written past the tiles


@needs_sim
@pytest.mark.parametrize("params", [
    pytest.param(TOP_SEQ_PARAMS, id="bfp-lut"),
    pytest.param(TOP_SEQ_EVERY_ENGINE, id="every-engine", marks=pytest.mark.slow)])
def test_top_sequencer_uart_verilog(tmp_path, params):
    """The top with the sequencer, over UART frames: MEM_WRITE a layer and programs, RUN them
    (MATVEC with bias, LUT, CONFIG, HALT; stochastic rounding; LIMIT; BAD_ADDRESS) and
    MEM_READ the results, all replies equal to DeviceModel's (RUN: status, pc, executed; the
    real cycle count is non-zero and the frame's CRC is valid)."""
    import json
    import struct

    from lowbit.sim.link import decode_reply
    component, _ = cr.generate_verilog("top", params)
    vec = vectors.top_seq_vectors(params=params, seed=0)
    job = dict(vec, divisor=component.divisor, timeout_bits=component.timeout_bits,
               run_cycles=20_000)
    cr.run_bench("top", params, "tb_top_seq", job, tmp_path)
    replies = json.loads((tmp_path / "received.json").read_text())
    for event, got in zip(vec["events"], replies, strict=True):
        if event.get("run"):
            status, body = decode_reply(bytes(got))             # raises on a bad CRC
            want = decode_reply(bytes(event["reply"]))
            # Status, pc, executed and the busy cycles as the model predicts them; the cycle
            # count (the model's is 0) only positive.
            assert (status, body[:8], body[12:]) == (want[0], want[1][:8], want[1][12:])
            assert struct.unpack("<I", body[8:12])[0] > 0


@needs_sim
def test_top_sequencer_bench_catches_a_wrong_run_reply(tmp_path):
    """Negative control of ``tb_top_seq``: a RUN whose expected ``executed`` count is off by
    one fails the bench (the masked comparison of RUN replies still covers status, pc and
    executed). The shortest such job: MEM_WRITE of ``NOP; HALT`` and its RUN, the expected
    replies DeviceModel's (the layer traffic of the full vectors would only cost Icarus time)."""
    from lowbit.sim.link import DeviceModel, Opcode, encode_request, mem_write_payload
    from lowbit.sim.program import Instruction as I
    from lowbit.sim.program import assemble
    component, _ = cr.generate_verilog("top", TOP_SEQ_PARAMS)
    model = DeviceModel(**TOP_SEQ_PARAMS)
    events = []
    for opcode, payload, run in [
            (Opcode.MEM_WRITE, mem_write_payload(0, assemble([I.nop(), I.halt()])), False),
            (Opcode.RUN, (0).to_bytes(4, "little") + (10).to_bytes(4, "little"), True)]:
        request = encode_request(opcode, payload)
        events.append({"send": list(request), "reply": list(model.feed(request)), "run": run})
    first = 1
    assert events[first]["reply"][1] == 0 and events[first]["reply"][8:12] == [2, 0, 0, 0]
    events[-1]["reply"][8] ^= 1                     # payload[4]: low byte of executed
    job = dict(events=events, divisor=component.divisor, timeout_bits=component.timeout_bits,
               run_cycles=20_000)
    with pytest.raises(AssertionError, match=rf"event {first}: sent a550"):
        cr.run_bench("top", TOP_SEQ_PARAMS, "tb_top_seq", job, tmp_path)
