# amaranth: UnusedElaboratable=no
"""The generated Verilog in an independent simulator (DESIGN §6 level 3): cocotb + Icarus.

Each test generates a block's Verilog the way ``lowbit verilog BLOCK`` does, compiles it with
Icarus Verilog and drives it from a cocotb bench in ``tests/cocotb/`` with the golden vectors of
:mod:`sim.vectors`, comparing bit for bit under random valid gaps and back-pressure. The same
vectors also run through Amaranth's simulator here (``test_vectors_in_amaranth_*``), so a
disagreement between the two simulators cannot hide behind different stimuli.
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "cocotb"))

import cocotb_runner as cr  # noqa: E402

from sim import vectors  # noqa: E402
from sim.harness import run_stream  # noqa: E402

MISSING = cr.missing_tools()
needs_sim = pytest.mark.skipif(MISSING is not None, reason=f"cocotb tests skipped: {MISSING}")

LUT_PARAMS = {"lanes": 2, "tables": 2, "wide_tables": 1}
LINK_PARAMS = {"frame_bytes": 16, "timeout_cycles": 60}
# A fast UART (divisor 8), a small EBR scratchpad and a short inter-byte timeout.
TOP_PARAMS = {"clk_freq": 8_000_000, "baud": 1_000_000, "scratch_bytes": 256, "frame_bytes": 64,
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


def top_job(params, seed, n):
    component, _ = cr.generate_verilog("top", params)
    vec = vectors.top_vectors(lanes=component.lanes, scratch_bytes=component.scratch_bytes,
                              frame_bytes=component.frame_bytes, use_spram=component.use_spram,
                              n=n, seed=seed)
    return dict(vec, divisor=component.divisor, timeout_bits=component.timeout_bits, seed=seed)


@needs_sim
def test_top_uart_verilog(tmp_path):
    cr.run_bench("top", TOP_PARAMS, "tb_top", top_job(TOP_PARAMS, 0, 12), tmp_path)


@needs_sim
def test_uart_verilog(tmp_path):
    params = {"clk_freq": 12_000_000, "baud": 1_000_000}
    component, _ = cr.generate_verilog("uart", params)
    job = dict(vectors.uart_vectors(n=40, seed=3), divisor=component.divisor, valid_prob=0.3,
               ready_prob=0.5, seed=3)
    cr.run_bench("uart", params, "tb_uart", job, tmp_path)


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
    """Run stream phases (structured payloads) through sim.harness.run_stream, in sequence."""
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
    from sim.link import DeviceModel
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
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_lut_link_verilog_more_seeds(tmp_path, seed):
    test_lut_verilog(tmp_path / "lut", seed)
    test_link_verilog(tmp_path / "link", seed)


@needs_sim
@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_top_uart_verilog_spram(tmp_path, seed):
    cr.run_bench("top", TOP_SPRAM_PARAMS, "tb_top", top_job(TOP_SPRAM_PARAMS, seed, 40), tmp_path)
