"""The BFP column with several drain lanes (``drain_lanes``) against the golden column model."""

import numpy as np
import pytest
from test_bfp_rtl import check, check_mixed_products, make_job

from lowbit.hw.bfp import BFPColumn, check_drain_lanes


@pytest.mark.parametrize("kwargs, exc, msg", [
    ({"lanes": 16, "drain_lanes": 8}, ValueError,
     "Drain lane count must be a power of two between 1 and 4 dividing the lane count 16, "
     "not 8"),
    ({"lanes": 16, "drain_lanes": 3}, ValueError, "power of two"),
    ({"lanes": 18, "drain_lanes": 4}, ValueError, "dividing the lane count 18"),
    ({"lanes": 16, "drain_lanes": 0}, ValueError, "not 0"),
    ({"lanes": 16, "drain_lanes": 2.0}, TypeError, "Drain lane count"),
    ({"lanes": 16, "drain_lanes": True}, TypeError, "Drain lane count"),
    ({"lanes": 16, "drain_lanes": 2, "pipelined": False}, ValueError,
     "Drain lane count 2 needs the pipelined column"),
])
def test_validation(kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        BFPColumn(**kwargs)


def test_check_drain_lanes():
    assert check_drain_lanes(1, 4, pipelined=False) == 1
    assert check_drain_lanes(4, 16) == 4
    col = BFPColumn(lanes=8, drain_lanes=2)
    col._MustUse__silence = True
    assert col.drain_lanes == 2 and BFPColumn().drain_lanes == 1


@pytest.mark.parametrize("lanes, drain, block", [(8, 2, 4), (16, 4, 2)])
def test_drain_lanes_match_model(lanes, drain, block):
    """Products of three blocks with bias, stochastic rounding, stalls on every stream and a slow
    output, NaN blocks, and a product of one block (a pass of N / G pops per block)."""
    check_mixed_products({"lanes": lanes, "block": block, "drain_lanes": drain},
                         np.random.default_rng(lanes + drain), seed=3)


def test_drain_lanes_keep_the_column_busy(monkeypatch):
    """32 lanes, blocks of 8, G = 4: a block's 32 sums drain in 8 cycles, so six products of
    eight blocks (384 beats) finish within 700 cycles, setup included (measured: 645). One lane
    a cycle, the drain alone needs 6 · 8 · 32 = 1536 (measured: 1647)."""
    import test_bfp_rtl
    run_stream = test_bfp_rtl.run_stream
    monkeypatch.setattr(test_bfp_rtl, "run_stream",
                        lambda *args, **kwargs: run_stream(*args, **kwargs, max_cycles=700))
    rng = np.random.default_rng(7)
    jobs = [make_job(rng, 32, 8, 8, bias=False) for _ in range(6)]
    check({"lanes": 32, "block": 8, "max_blocks": 8, "drain_lanes": 4}, jobs)


def test_top_parameter():
    """The top's ``drain_lanes``: ``matrix_lanes / block`` by default with the pipelined column
    (1 where the column is no wider than its block, as on every board today), 1 unpipelined;
    an explicit value is checked against the column's rule; the golden device model takes it
    and ignores it (the results do not depend on it)."""
    from lowbit.hw.top import Accelerator
    from lowbit.sim.link import DeviceModel
    from lowbit.sim.topparams import check_top_params

    def drain(**kwargs):
        return check_top_params(sequencer=True, **kwargs)["drain_lanes"]

    assert drain(matrix_lanes=16, block=16) == 1
    assert drain(matrix_lanes=64, block=16) == 4
    assert drain(matrix_lanes=64, block=4) == 16
    assert drain(matrix_lanes=8, block=2) == 2        # at most matrix_lanes / 4
    assert drain(matrix_lanes=64, block=16, bfp_pipelined=False) == 1
    assert drain(matrix_lanes=32, block=16, drain_lanes=8) == 8
    top = Accelerator(sequencer=True, matrix_lanes=32, block=16)
    assert top.drain_lanes == 2 and top.sequencer_params()["drain_lanes"] == 2
    with pytest.raises(ValueError, match="Drain lane count must be a power of two between 1 "
                                         "and 8 dividing the lane count 32, not 16"):
        Accelerator(sequencer=True, matrix_lanes=32, drain_lanes=16)
    with pytest.raises(ValueError, match="needs the pipelined column"):
        Accelerator(sequencer=True, matrix_lanes=32, drain_lanes=2, bfp_pipelined=False)
    with pytest.raises(TypeError, match="Drain lane count"):
        DeviceModel(sequencer=True, matrix_lanes=32, drain_lanes="2")
    DeviceModel(sequencer=True, matrix_lanes=32, drain_lanes=4)
