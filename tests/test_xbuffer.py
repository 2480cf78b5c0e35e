"""The sequencer's MATVEC x buffer (``matvec_x_buffer``: later tiles' beats from the buffer) and
bias FIFO (``matvec_bias_fifo``: the reader moves on while the column drains)."""

import numpy as np
import pytest
from test_sequencer import Device, _run_both

from lowbit.sim import link as L
from lowbit.sim.network import pack_elements
from lowbit.sim.program import Design, Machine
from lowbit.sim.program import Instruction as I
from lowbit.sim.topparams import check_top_params

#: RUN cycles of a program of HALT alone (scripts/cycle_costs.py).
HALT_CYCLES = 13
#: Cycles of a later tile of test_tiles_from_the_buffer_equal_machine's MATVEC on the plain top.
PLAIN_LATER_TILE = 95 + 2 / 3


def test_default_and_validation():
    """On by default with the sequencer, the BFP column and a block-RAM scratchpad; off with
    the SPRAM (the iCEBreaker's netlist is unchanged) or without the column."""
    def xb(**kwargs):
        return check_top_params(sequencer=True, **kwargs)["matvec_x_buffer"]

    assert xb() is True
    assert xb(use_spram=True) is False
    assert xb(bfp=False) is False
    assert xb(use_spram=True, matvec_x_buffer=True) is True
    with pytest.raises(TypeError, match="matvec_x_buffer must be a bool, not 1"):
        xb(matvec_x_buffer=1)


def test_bias_fifo_default_and_validation():
    """The bias FIFO is off by default; it turns the x buffer's default off and refuses the
    x buffer beside it."""
    def both(**kwargs):
        p = check_top_params(sequencer=True, **kwargs)
        return p["matvec_x_buffer"], p["matvec_bias_fifo"]

    assert both() == (True, False)
    assert both(matvec_bias_fifo=True) == (False, True)
    assert both(use_spram=True, matvec_bias_fifo=True) == (False, True)
    with pytest.raises(ValueError, match="matvec_bias_fifo needs matvec_x_buffer off"):
        both(matvec_x_buffer=True, matvec_bias_fifo=True)
    with pytest.raises(TypeError, match="matvec_bias_fifo must be a bool, not 1"):
        both(matvec_bias_fifo=1)


# The quick suite's cases are the buffer's and the FIFO's; the plain MATVEC equals the Machine
# there too on the SPRAM scratchpads (test_sequencer.py: test_spram_scratchpad_banks), its
# cycles per tile with -m slow.
@pytest.mark.parametrize("variant", ["x_buffer", "bias_fifo",
                                     pytest.param("plain", marks=pytest.mark.slow)])
def test_tiles_from_the_buffer_equal_machine(variant):
    """Four tiles of K = 64 with bias on a one-address scratchpad, then a one-tile MATVEC
    without bias: equal to lowbit.sim.program.Machine word for word, with the same busy count.
    With the buffer the scratchpad serves x once (64 reads), then only the bias words (8 per
    tile) and the results (8 per tile), and each tile's beats overlap the previous one's bias:
    a later tile takes fewer than the K + 2N cycles of port traffic the plain top needs. With
    the bias FIFO the port still carries K + 2N words a tile, but the reader no longer waits
    for the column to drain before it hands over the bias: a later tile takes fewer cycles
    than the plain top's."""
    n, b, nb, tiles = 8, 8, 8, 4
    k = nb * b
    x_buffer = variant == "x_buffer"
    params = dict(matrix_lanes=n, block=b, max_blocks=nb, weight_depth=256, discrete=False,
                  quantiser=False, grand=False, lanes=1, lut_tables=0, bfp_predictor=False,
                  scratch_write_addr=False, matvec_x_buffer=x_buffer, scratch_bytes=8192,
                  matvec_bias_fifo=variant == "bias_fifo")
    dev = Device(**params)
    assert dev.top.matvec_x_buffer is x_buffer
    assert dev.top.matvec_bias_fifo is (variant == "bias_fifo")
    machine = Machine(Design(matrix_lanes=n, block=b, max_blocks=nb, weight_depth=256,
                             scratch_bytes=8192, lanes=1, lut_tables=0, engines={"bfp"},
                             bfp_predictor=False))
    rng = np.random.default_rng(5)
    wwords = pack_elements(rng.integers(-128, 128, (n, tiles * k)),
                           np.repeat(rng.integers(-8, -3, (n, tiles * nb)), b, axis=1))
    x = pack_elements(rng.integers(-128, 128, k), np.repeat(rng.integers(-4, 2, nb), b))
    bias = pack_elements(rng.integers(-128, 128, tiles * n), rng.integers(-6, -2, tiles * n))
    X, BI, Y, Z, WS = 100, 140, 180, 220, 240
    program = [I.loadw(WS, 0, tiles * k), I.matvec(X, Y, 0, nb, tiles, bias=BI),
               I.matvec(X, Z, k, nb, 1), I.halt()]
    words = {WS: wwords.T.reshape(-1), X: x, BI: bias}
    regs = {"MANT_WIDTH": 8, "ROUNDING": 0, "EXP_SELECT": 0}
    (status, pc, executed, cycles, busy), ref = _run_both(dev, machine, program, 0, words, regs)
    assert (status, executed) == (ref.status, ref.executed) == (L.Status.OK, 4)
    assert busy == ref.busy == (tiles + 1) * k
    for addr, count in ((Y, tiles * n), (Z, n)):
        assert dev.get(addr, count).tolist() == machine.read_words(addr, count).tolist()
    # The two MATVECs again on the loaded weights, and the one-tile MATVEC alone.
    matvecs = dev.run([*program[1:3], I.halt()])[3]
    one = dev.run([I.matvec(X, Z, k, nb, 1), I.halt()])[3]
    assert HALT_CYCLES < one < matvecs < cycles
    # Cycles per tile after the first (the MATVECs' RUN less HALT and twice the one-tile
    # MATVEC): the plain tiles take at least the port's x, bias and result words, K + 2N
    # (measured: 95.7 with K = 64, N = 8); the buffered ones fewer (75.7); with the bias FIFO
    # the port's words but not the plain top's wait for the drain (85.7).
    later = (matvecs - HALT_CYCLES - (one - HALT_CYCLES) - (one - HALT_CYCLES)) / (tiles - 1)
    if x_buffer:
        assert later < k + 2 * n, later
    elif variant == "bias_fifo":
        assert k + 2 * n <= later < PLAIN_LATER_TILE, later
    else:
        assert later == pytest.approx(PLAIN_LATER_TILE), later
