"""The BFP column with a register stage in front of its multipliers (``input_stage``, the
ULX3S's column) against the golden column model, and its handshake against the plain column."""

import numpy as np
import pytest
from amaranth.sim import Simulator
from test_bfp_rtl import check_mixed_products

from lowbit.hw.bfp import BFPColumn
from lowbit.hw.bfp.pe import BFPLanes


@pytest.mark.parametrize("kwargs, exc, msg", [
    ({"input_stage": 1}, TypeError, "^input_stage must be a bool, not 1$"),
    ({"input_stage": True, "pipelined": False}, ValueError,
     "^input_stage needs pipelined=True$"),
])
def test_validation(kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        BFPColumn(**kwargs)


def test_property():
    col = BFPColumn(lanes=8, input_stage=True)
    col._MustUse__silence = True
    assert col.input_stage and not BFPColumn().input_stage


@pytest.mark.parametrize("params", [
    # B = 2 (the exponents kept in stage R too), one drain lane; 16 lanes (four groups) with
    # four drain lanes and the hard multipliers' behavioural model with an enable per group.
    {"lanes": 8, "block": 2},
    {"lanes": 16, "block": 4, "drain_lanes": 4, "mult": "mult18x18d"},
])
def test_input_stage_matches_model(params):
    """The column with ``input_stage`` against the model: products of three blocks with bias,
    stochastic rounding, stalls on every stream, NaN blocks; then products of one block."""
    check_mixed_products({**params, "input_stage": True},
                         np.random.default_rng(params["lanes"] + params["block"]), seed=5)


def _trace(input_stage, valid, cycles, seed):
    # BFPLanes under random input validity, its drain popped as soon as it holds a block: per
    # cycle whether a beat was taken, and the cycles in which a block moves into the drain.
    pe = BFPLanes(lanes=8, block=4, width=8, exp_bits=8, mult="mult18x18d", sim_model=True,
                  input_stage=input_stage)
    rng = np.random.default_rng(seed)
    valids = rng.random(cycles) < valid
    taken, loads = [], []

    async def bench(ctx):
        for t in range(cycles):
            ctx.set(pe.i_w.valid, int(valids[t]))
            ctx.set(pe.i_x.valid, int(valids[t]))
            popping = ctx.get(pe.count) > 0
            ctx.set(pe.pop, int(popping))
            ctx.set(pe.pop_groups, 0b11 if popping else 0)
            taken.append(ctx.get(pe.i_x.valid) & ctx.get(pe.i_x.ready))
            assert ctx.get(pe.i_x.ready) == ctx.get(pe.i_w.ready)
            if ctx.get(pe.loading):
                loads.append(t)
            await ctx.tick()

    sim = Simulator(pe)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return taken, loads


def test_handshake_as_the_plain_array():
    """Beats on every cycle, the drain taken as soon as it is full: by every cycle the staged
    array has taken as many beats as the plain one or one more (the beat its stage I holds),
    and each block reaches the drain one cycle later: a cycle of latency, no throughput lost
    (the random stalls of the model tests above check the values)."""
    plain = _trace(False, 1.0, 300, 0)
    staged = _trace(True, 1.0, 300, 0)
    assert len(plain[1]) > 30
    extra = np.cumsum(staged[0]) - np.cumsum(plain[0])
    assert extra.min() == 0 and extra.max() == 1
    assert staged[1] == [t + 1 for t in plain[1] if t + 1 < 300]
