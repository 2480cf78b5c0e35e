"""The dense-layer contract (sim/network.py): validation, element packing, tiling, requantiser."""

import numpy as np
import pytest

from lowbit.sim.bfp_column import ColumnModel
from lowbit.sim.discrete import CodeBook, SMFormat, matvec
from lowbit.sim.lut import lookup
from lowbit.sim.network import (
    BFPDense,
    DiscreteDense,
    bfp_dense,
    block_exponents,
    discrete_dense,
    pack_elements,
    unpack_elements,
)
from lowbit.sim.prng import Xoroshiro128aox
from lowbit.sim.program import Design, InputQuant, Machine, NetworkLayout, assemble

RNG = np.random.default_rng(2026)


def _layer(rows=20, cols=32, block=16, **kw):
    return BFPDense(RNG.integers(-127, 128, (rows, cols)),
                    RNG.integers(-9, -3, (rows, cols // block)), **kw)


def test_pack_unpack_round_trip_every_byte():
    m, e = np.meshgrid(np.arange(-128, 128), np.arange(-128, 128))
    words = pack_elements(m, e)
    assert words.dtype == np.uint16
    assert pack_elements(-1, -2) == 0xFEFF
    got_m, got_e = unpack_elements(words)
    assert np.array_equal(got_m, m) and np.array_equal(got_e, e)


@pytest.mark.parametrize("m, e", [(128, 0), (0, -129)])
def test_pack_rejects_non_int8(m, e):
    with pytest.raises(ValueError, match="int8"):
        pack_elements([m], [e])


def test_tiles_equal_one_padded_column_product_per_tile():
    col = ColumnModel(lanes=8, block=16, width=8, max_blocks=4)
    layer = _layer(rows=20, bias_m=RNG.integers(-100, 100, 20), bias_e=np.full(20, -5),
                   exp_mode="max")
    x_m, x_e = RNG.integers(-127, 128, 32), np.array([-4, -6])
    m, e = bfp_dense(layer, x_m, x_e, col)
    for rows in [range(0, 8), range(8, 16), range(16, 20)]:
        rows = list(rows)
        pad = 8 - len(rows)
        wm = np.pad(layer.w_m[rows], ((0, pad), (0, 0)))
        we = np.pad(layer.w_e[rows], ((0, pad), (0, 0)))
        bm, be = np.pad(layer.bias_m[rows], (0, pad)), np.pad(layer.bias_e[rows], (0, pad))
        want_m, want_e = col.matvec(wm, we, x_m, x_e, bias_m=bm, bias_e=be, exp_mode="max")
        assert list(m[rows]) == list(want_m[:len(rows)])
        assert set(e[rows]) == {want_e}


def test_table_maps_mantissas_and_sets_exponent():
    col = ColumnModel(lanes=16, block=16, width=8, max_blocks=4)
    relu = np.maximum(np.arange(256).astype(np.uint8).view(np.int8), 0)
    plain = _layer(out_exp=-3)
    act = BFPDense(plain.w_m, plain.w_e, out_exp=-3, table=relu, table_exp=-5)
    x_m, x_e = RNG.integers(-127, 128, 32), np.array([-2, -3])
    m0, _ = bfp_dense(plain, x_m, x_e, col)
    m1, e1 = bfp_dense(act, x_m, x_e, col)
    assert np.array_equal(m1, np.maximum(m0, 0)) and set(e1) == {-5}
    assert (m0 < 0).any()


def _predicted_case(rng, n, b, rounding):
    """A random predicted-mode layer: 2..5 tiles of ``n`` rows, rows of varied magnitude (so
    the selector predicts, overflows and underflows), maybe a bias."""
    nb = int(rng.integers(1, 4))
    rows, cols = int(rng.integers(n + 1, 5 * n + 1)), nb * b
    e0 = int(rng.integers(-10, -5))
    w_m = rng.integers(-127, 128, (rows, cols)) >> rng.integers(0, 5, (rows, 1))
    bias = {}
    if rng.random() < 0.5:
        bias = dict(bias_m=rng.integers(-127, 128, rows), bias_e=rng.integers(-8, -3, rows))
    return BFPDense(w_m, rng.integers(e0, e0 + 2, (rows, nb)), width=int(rng.integers(2, 9)),
                    rounding=rounding, exp_mode="predicted", **bias)


@pytest.mark.parametrize("seed", range(9))
def test_predicted_layer_equals_machine_program(seed):
    """bfp_dense in predicted mode == lowbit.sim.program.Machine running the layer's program
    (NetworkLayout: EXP_SELECT 2, its history cleared before the layer) on several samples in
    one RUN, for every rounding (stochastic: the PRNG's numbers, N per tile, in order)."""
    rng = np.random.default_rng(500 + seed)
    n, b = [(4, 4), (8, 8), (4, 16)][seed % 3]
    rounding = ("nearest", "zero", "stochastic")[seed // 3]
    design = Design(matrix_lanes=n, block=b, max_blocks=4, weight_depth=512, scratch_bytes=8192)
    layer = _predicted_case(rng, n, b, rounding)
    lay = NetworkLayout([layer], design, input=InputQuant("host"))
    samples = 3
    x_m = rng.integers(-127, 128, (samples, layer.cols))
    x_e = rng.integers(-3, 1, (samples, layer.cols // b))
    machine = Machine(design)
    machine.rng = Xoroshiro128aox(seed, 1)
    machine.load_weights(0, lay.weight_words())
    for addr, words in lay.bias_words():
        machine.write_words(addr, words)
    for s_ in range(samples):
        machine.write_words(lay.in_addr + s_ * lay.in_words,
                            pack_elements(x_m[s_], block_exponents(x_e[s_], b, layer.cols)))
    raw = assemble(lay.program(samples))
    machine.scratch[:len(raw)] = raw
    assert machine.run(0, lay.instructions(samples)).status == 0
    got_m, got_e = unpack_elements(machine.read_words(lay.out_addr, samples * lay.out_words)
                                   .reshape(samples, -1)[:, :layer.rows])
    draws = Xoroshiro128aox(seed, 1)
    tiles = -(-layer.rows // n)
    column = design.column()
    for s_ in range(samples):
        rand = None
        if rounding == "stochastic":
            rand = (draws.take(tiles * n)[:, 0] & np.uint64(0xFF)).astype(np.int64) \
                .reshape(tiles, n)
        m, e = bfp_dense(layer, x_m[s_], x_e[s_], column, rand=rand)
        assert np.array_equal(got_m[s_], m) and np.array_equal(got_e[s_], e), s_


def test_predicted_mode_uses_the_history_from_tile_to_tile():
    """Across a layer's tiles the selector predicts (exponents differ from the max rule's);
    the history starts cleared whatever the column held; without a predictor it is the max
    rule."""
    rng = np.random.default_rng(7)
    col = ColumnModel(lanes=4, block=8, width=8, max_blocks=4)
    differs = 0
    for _ in range(10):
        layer = _predicted_case(rng, 4, 8, "nearest")
        x_m, x_e = rng.integers(-127, 128, layer.cols), rng.integers(-3, 1, layer.cols // 8)
        m, e = bfp_dense(layer, x_m, x_e, col)
        again = bfp_dense(layer, x_m, x_e, col)             # the column's history is dirty now
        assert np.array_equal(again[0], m) and np.array_equal(again[1], e)
        as_max = bfp_dense(BFPDense(layer.w_m, layer.w_e, layer.bias_m, layer.bias_e,
                                    width=layer.width, exp_mode="max"), x_m, x_e, col)
        differs += not np.array_equal(as_max[1], e)
        assert np.array_equal(as_max[1][:4], e[:4])         # the first tile: max rule
        plain = ColumnModel(lanes=4, block=8, width=8, max_blocks=4, predictor=False)
        no_pred = bfp_dense(layer, x_m, x_e, plain)
        assert np.array_equal(no_pred[0], as_max[0]) and np.array_equal(no_pred[1], as_max[1])
    assert differs >= 3


@pytest.mark.parametrize("kw, err, match", [
    (dict(exp_mode="min"), ValueError, "Exponent mode must be 'fixed', 'max' or 'predicted'"),
    (dict(rounding="up"), ValueError, "Rounding"),
    (dict(bias_m=np.zeros(20, int)), ValueError, "both bias"),
    (dict(bias_m=np.zeros(3, int), bias_e=np.zeros(3, int)), ValueError, r"shape \(20,\)"),
    (dict(table=np.zeros(255, int)), ValueError, "256"),
    (dict(table=np.zeros(256, int), exp_mode="max"), ValueError, "fixed"),
])
def test_bfp_dense_validation(kw, err, match):
    with pytest.raises(err, match=match):
        _layer(**kw)


def test_bfp_dense_rejects_float_weights_and_mismatched_exponents():
    with pytest.raises(TypeError, match="integer array"):
        BFPDense(np.zeros((2, 16)), np.zeros((2, 1), int))
    with pytest.raises(ValueError, match="do not match"):
        BFPDense(np.zeros((2, 16), int), np.zeros((3, 1), int))
    with pytest.raises(ValueError, match="block size"):
        bfp_dense(_layer(block=8), np.zeros(32, int), np.zeros(4, int),
                  ColumnModel(lanes=4, block=16))


def test_discrete_dense_requantiser_rounds_half_up_and_clamps():
    book = CodeBook.default(2)
    w = RNG.integers(0, 4, (12, 40))
    x = RNG.integers(-128, 128, 40)
    bias = RNG.integers(-300, 300, 12)
    for shift in (0, 1, 3, 31):
        layer = DiscreteDense(w, book, bias=bias, shift=shift, acc_width=20, out_exp=2)
        m, e = discrete_dense(layer, x)
        fmt = SMFormat(8, 0)
        acc = SMFormat(20, 0).to_int(matvec(w, fmt.from_int(np.clip(x, -127, 127)), book, fmt,
                                            acc_width=20))
        v = acc + bias
        want = [max(-127, min(127, (int(t) + (1 << (shift - 1))) >> shift if shift else int(t)))
                for t in v]
        assert list(m) == want and set(e) == {2}
    table = (np.arange(256) * 7 % 256).astype(np.uint8)
    m2, e2 = discrete_dense(DiscreteDense(w, book, bias=bias, shift=3, acc_width=20, table=table,
                                          table_exp=-1), x)
    m1, _ = discrete_dense(DiscreteDense(w, book, bias=bias, shift=3, acc_width=20), x)
    assert np.array_equal(m2, lookup(table.view(np.int8), m1)) and set(e2) == {-1}


@pytest.mark.parametrize("kw, err, match", [
    (dict(book=None), TypeError, "CodeBook"),
    (dict(w_codes=np.full((2, 4), 4)), ValueError, "codes must be in 0..3"),
    (dict(shift=32), ValueError, "shift"),
    (dict(acc_width=7), ValueError, "acc_width"),
    (dict(bias=np.zeros(3, int)), ValueError, "Bias"),
])
def test_discrete_dense_validation(kw, err, match):
    args = dict(w_codes=np.zeros((2, 4), int), book=CodeBook.default(2))
    args.update(kw)
    with pytest.raises(err, match=match):
        DiscreteDense(**args)
