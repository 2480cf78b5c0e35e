"""Golden models of the BFP format (lowbit.sim.bfp) and of the MAC column
(lowbit.sim.bfp_column)."""

import math
from fractions import Fraction

import numpy as np
import pytest

from lowbit.sim.bfp import (
    dequantise,
    exponent_range,
    from_e8m0,
    max_mantissa,
    nan_exponent,
    quantise,
    quantise_with_exponent,
    shared_exponent,
    to_e8m0,
)
from lowbit.sim.bfp_column import ColumnModel, error_bound, reference_matvec

# -- seed 002 worked numbers -------------------------------------------------------------------


def test_seed_255_w16():
    m, e = quantise([255.0], block=1, width=16, rounding="zero")
    assert e.tolist() == [-7]
    assert m.tolist() == [[0x7F80]]
    assert dequantise(m, e).tolist() == [255.0]


TABLE2 = np.array([131072, 256, 1, 0.5, 0.125])


@pytest.mark.parametrize("rounding", ["nearest", "zero"])
def test_seed_table2_exponent_plus3(rounding):
    # The max rule itself picks +3 for this row (seed 002 Eq. 4 on 131072 = 2^17).
    m, e = quantise(TABLE2, block=5, width=16, rounding=rounding)
    assert e.tolist() == [3]
    assert m.tolist() == [[0x4000, 0x0020, 0, 0, 0]]


def test_seed_table2_exponent_minus3():
    m = quantise_with_exponent(TABLE2[None], np.array([-3]), width=16, rounding="zero",
                               overflow="wrap")
    assert (m[0] & 0xFFFF).tolist() == [0x0000, 0x0800, 0x0008, 0x0004, 0x0001]
    # The format itself saturates symmetrically instead of wrapping.
    m = quantise_with_exponent(TABLE2[None], np.array([-3]), width=16, rounding="zero")
    assert m[0].tolist() == [0x7FFF, 0x0800, 0x0008, 0x0004, 0x0001]


def test_seed_mu_plus_3sigma():
    assert shared_exponent(10 + 3 * 0.5, width=16).tolist() == -11
    m, e = quantise([11.5], block=1, width=16)
    assert (m.tolist(), e.tolist()) == ([[0x5C00]], [-11])


# -- exponent rules ----------------------------------------------------------------------------


@pytest.mark.parametrize("width", range(2, 17))
def test_floor_rule_matches_log2_and_never_overflows_truncated(width):
    rng = np.random.default_rng(width)
    x = rng.standard_normal((200, 8)) * 2.0 ** rng.integers(-30, 30, (200, 1))
    m, e = quantise(x, block=8, width=width, rounding="zero", exp_bits=10)
    amax = np.abs(x).max(axis=1)
    assert e[:, 0].tolist() == [math.floor(math.log2(a)) - (width - 2) for a in amax]
    top = np.abs(m).max(axis=(1, 2))
    assert np.all(top >= 2 ** (width - 2)) and np.all(top <= max_mantissa(width))


@pytest.mark.parametrize("width", [2, 3, 4, 8])
def test_ceil_rule_exhaustive(width):
    # Every amax with a (width + 4)-bit significand: e is the least one with amax <= M·2^e.
    mx = max_mantissa(width)
    for sig in range(1 << (width + 3), 1 << (width + 4)):
        amax = sig * 2.0 ** -5
        e = int(shared_exponent(amax, width=width, rule="ceil"))
        assert Fraction(amax) <= mx * Fraction(2) ** e
        assert Fraction(amax) > mx * Fraction(2) ** (e - 1)
        assert e - int(shared_exponent(amax, width=width)) in (0, 1)
        for rounding in ("nearest", "zero"):
            m, _ = quantise([amax, -amax], block=2, width=width, rule="ceil", rounding=rounding)
            assert abs(m).max() <= mx


def test_seed_255_w16_ceil_lop():
    """Claim 8 as written (ceil of the leading-one position) on the seed's [0079] example:
    -6 / 0x3FC0 where Eq. 4 (floor) and the no-clipping "ceil" rule give -7 / 0x7F80."""
    for rounding in ("nearest", "zero"):
        m, e = quantise([255.0], block=1, width=16, rule="ceil_lop", rounding=rounding)
        assert (e.tolist(), m.tolist()) == ([-6], [[0x3FC0]])
        assert dequantise(m, e).tolist() == [255.0]
        for rule in ("floor", "ceil"):
            m, e = quantise([255.0], block=1, width=16, rule=rule, rounding=rounding)
            assert (e.tolist(), m.tolist()) == ([-7], [[0x7F80]])
    # Table 2's 131072 = 2^17 is a power of two: every rule gives +3, mantissa 0x4000.
    for rule in ("floor", "ceil", "ceil_lop"):
        m, e = quantise(TABLE2, block=5, width=16, rule=rule, rounding="zero")
        assert (e.tolist(), m[0, 0]) == ([3], 0x4000)


@pytest.mark.parametrize("width", [2, 3, 4, 8, 16])
def test_ceil_lop_rule_exhaustive(width):
    """Every amax with a 12-bit significand over several binades: e = ceil(log2 amax) - (W-2)
    exactly (Fraction arithmetic), the largest mantissa has one bit of headroom
    (2^(W-3) < |m| <= 2^(W-2)) in every rounding mode, and nothing saturates."""
    sigs = np.arange(1 << 11, 1 << 12)
    for scale in (-30, -11, 0, 7):
        amax = np.ldexp(sigs.astype(float), scale)
        e = shared_exponent(amax, width=width, rule="ceil_lop", exp_bits=10)
        for a, ei in zip(amax, e, strict=True):
            k = math.floor(math.log2(a))
            lop = k if Fraction(a) == Fraction(2) ** k else k + 1
            assert ei == lop - (width - 2)
        floor = shared_exponent(amax, width=width, exp_bits=10)
        assert np.array_equal(e - floor, (sigs != 1 << 11).astype(int))
        x = np.stack([amax, -amax / 3, np.zeros_like(amax), -amax], axis=1)
        for rounding in ("nearest", "zero", "stochastic"):
            m, em = quantise(x.reshape(-1), block=4, width=width, rule="ceil_lop", exp_bits=10,
                             rounding=rounding, rand=np.full(x.size, 255), rand_bits=8)
            assert np.array_equal(em, e)
            top = np.abs(m).max(axis=1)
            assert np.all(top <= 2 ** (width - 2)) and np.all(top <= max_mantissa(width))
            if width > 2 and rounding == "zero":
                assert np.all(top >= 2 ** (width - 3))


def test_ceil_lop_zero_nan_and_clamping():
    """The all-zero block gets 0 and a NaN/±Inf block the NaN code, as in the other rules;
    exponents clamp to the finite range."""
    x = np.array([0.0, -0.0, 0.0, 0.0, 1.0, np.nan, 2.0, 3.0, 1.0, -np.inf, 0, 0, 3.0, 0, 0, 0])
    m, e = quantise(x, block=4, width=8, rule="ceil_lop")
    assert e.tolist() == [0, nan_exponent(8), nan_exponent(8), -4]
    assert m[:3].tolist() == [[0] * 4] * 3 and m[3].tolist() == [48, 0, 0, 0]
    e_min, e_max = exponent_range(8)
    assert shared_exponent([2.0 ** 200, 2.0 ** -200], width=8, rule="ceil_lop").tolist() == \
        [e_max, e_min]


def test_ceil_and_floor_agree_on_powers_of_two():
    for k in range(-20, 20):
        assert shared_exponent(2.0 ** k, width=8, rule="ceil") == \
            shared_exponent(2.0 ** k, width=8)


def test_zero_block_and_negative_zero():
    m, e = quantise([0.0, -0.0, 0.0, 0.0, 1.0, 0, 0, 0], block=4)
    assert e.tolist() == [0, -6]
    assert m.tolist() == [[0, 0, 0, 0], [64, 0, 0, 0]]


def test_exponent_clamping():
    e_min, e_max = exponent_range(8)
    # Too large: exponent clamped down, mantissas saturate.
    m, e = quantise([2.0 ** 200, -(2.0 ** 140)], block=2)
    assert e.tolist() == [e_max] and m.tolist() == [[127, -127]]
    # Too small: exponent clamped up, mantissas lose low bits.
    x = np.array([2.0 ** -125, 3 * 2.0 ** -127, 2.0 ** -130, 0])
    m, e = quantise(x, block=4, rounding="zero")
    assert e.tolist() == [e_min]
    assert m.tolist() == [[4, 3, 0, 0]]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_blocks(bad):
    x = np.array([1.0, bad, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0])
    m, e = quantise(x, block=4)
    assert e.tolist() == [nan_exponent(8), -4]
    assert m[0].tolist() == [0, 0, 0, 0]
    y = dequantise(m, e)
    assert np.isnan(y[:4]).all() and y[4:].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert nan_exponent(5) == -16


# -- mantissa rounding -------------------------------------------------------------------------


@pytest.mark.parametrize("width", range(2, 9))
def test_all_mantissas_round_trip(width):
    mx = max_mantissa(width)
    mants = np.arange(-mx, mx + 1)
    n = (len(mants) + 3) // 4 * 4
    mants = np.concatenate([mants, np.zeros(n - len(mants), int)])
    for e in (-20, 0, 7):
        # Every mantissa, in blocks that contain the full-scale value so e is the same.
        blocks = mants.reshape(-1, 4).copy()
        blocks[:, 0] = mx
        x = np.ldexp(blocks.astype(float), e)
        m, ee = quantise(x.reshape(-1), block=4, width=width)
        assert np.array_equal(dequantise(m, ee), x.reshape(-1))


def _exact_round(t, rounding, r=0, rbits=8):
    t = Fraction(t)
    if rounding == "nearest":
        f = math.floor(t)
        d = t - f
        return f + (d > Fraction(1, 2) or (d == Fraction(1, 2) and f % 2 == 1))
    if rounding == "zero":
        return math.trunc(t)
    return math.floor(t + Fraction(r, 2 ** rbits))


@pytest.mark.parametrize("rounding", ["nearest", "zero", "stochastic"])
def test_rounding_exact_against_fractions(rounding):
    rng = np.random.default_rng(7)
    width = 8
    # Quarter-steps around every integer (ties included) and random values.
    t = np.concatenate([np.arange(-127.75, 127.8, 0.25), rng.uniform(-127, 127, 500)])
    x = np.concatenate([t, np.zeros((-len(t)) % 16)])
    x[::16] = 127.0                       # full scale in every block: e = 0
    rand = rng.integers(0, 256, x.shape)
    m, e = quantise(x, width=width, rounding=rounding, rand=rand, rand_bits=8)
    assert (e == 0).all()
    want = [_exact_round(v, rounding, int(r)) for v, r in zip(x, rand, strict=True)]
    assert m.reshape(-1).tolist() == [max(-127, min(127, w)) for w in want]


def test_stochastic_exact_for_long_significands_and_underflow():
    # x with bits far below 2^-R relative to t, and a huge block range (t underflows).
    x = np.array([-(1 + 2.0 ** -50) * 2 ** -9, (1 + 2.0 ** -52), -(2.0 ** -1070), 2.0 ** 100])
    rand = np.array([0, 255, 0, 0])
    m, e = quantise(x, block=4, width=8, rounding="stochastic", rand=rand, rand_bits=8,
                    exp_bits=12)
    t = [Fraction(v) / Fraction(2) ** int(e[0]) for v in x]
    want = [math.floor(ti + Fraction(int(r), 256)) for ti, r in zip(t, rand, strict=True)]
    assert m[0].tolist() == want
    assert m[0, 2] == -1                   # a negative value below every r/2^R rounds down


@pytest.mark.parametrize("rbits", [1, 4, 8])
def test_stochastic_unbiased_within_2_pow_minus_r(rbits):
    # Hermite: the mean over all r of floor(t + r/2^R) is floor(t·2^R)/2^R, within 2^-R of t.
    rng = np.random.default_rng(rbits)
    for t in np.concatenate([rng.uniform(-60, 60, 40), [0.5, -0.5, 1 / 3, -1 / 3]]):
        x = np.full((1, 1 << rbits), t)
        m = quantise_with_exponent(x, np.array([0]), rounding="stochastic",
                                   rand=np.arange(1 << rbits)[None], rand_bits=rbits)
        mean = Fraction(int(m.sum()), 1 << rbits)
        assert mean == Fraction(math.floor(Fraction(t) * 2 ** rbits), 2 ** rbits)
        assert 0 <= Fraction(t) - mean < Fraction(1, 2 ** rbits)


@pytest.mark.parametrize("rule", ["floor", "ceil", "ceil_lop"])
@pytest.mark.parametrize("rounding", ["nearest", "zero", "stochastic"])
@pytest.mark.parametrize("width", [4, 8, 16])
def test_quantisation_error_bound(rule, rounding, width):
    rng = np.random.default_rng(width)
    x = np.concatenate([rng.standard_normal(4096), rng.standard_t(1.5, 4096),
                        rng.uniform(-1, 1, 4096) * 1e-3])
    rand = rng.integers(0, 1 << 10, x.shape)
    m, e = quantise(x, block=32, width=width, rule=rule, rounding=rounding, rand=rand,
                    rand_bits=10)
    err = np.abs(dequantise(m, e) - x).reshape(-1, 32)
    ulp = 2.0 ** e[:, None]
    sat = np.abs(m) == max_mantissa(width)
    if rounding == "nearest":
        # Half an ulp, except a saturated full-scale element (< 1 ulp, floor rule only).
        assert np.all(err[~sat] <= ulp.repeat(32, 1)[~sat] / 2)
        assert np.all(err < ulp)
        if rule != "floor":
            assert np.all(err <= ulp / 2)
    else:
        assert np.all(err < ulp)
    # Relative to the block's largest magnitude: 2^e <= amax · 2^-(W-2) with the floor rule,
    # 2^e < 2 · amax / (2^(W-1) - 1) with the ceil rule, 2^e < 2 · amax · 2^-(W-2) with
    # ceil_lop (one bit of headroom).
    amax = np.abs(x).reshape(-1, 32).max(axis=1, keepdims=True)
    if rule == "floor":
        assert np.all(err <= amax * 2.0 ** -(width - 2))
    elif rule == "ceil_lop":
        assert np.all(err < 2 * amax * 2.0 ** -(width - 2))
    else:
        assert np.all(err < 2 * amax / max_mantissa(width))


# -- dequantise, validation --------------------------------------------------------------------


def test_shapes_and_dequantise_round_trip():
    x = np.arange(2 * 3 * 32, dtype=float).reshape(2, 3, 32) - 90
    m, e = quantise(x, block=16, width=12)
    assert m.shape == (2, 3, 2, 16) and e.shape == (2, 3, 2)
    assert m.dtype == np.int64 and e.dtype == np.int64
    assert np.array_equal(dequantise(m, e), x)


@pytest.mark.parametrize("kwargs, exc, msg", [
    ({"block": 3}, ValueError, "multiple of the block size"),
    ({"block": 0}, ValueError, "Block size must be an integer between 1 and 4096, not 0"),
    ({"block": 2.0}, TypeError, "Block size"),
    ({"width": 1}, ValueError, "Mantissa width must be an integer between 2 and 32, not 1"),
    ({"width": True}, TypeError, "Mantissa width"),
    ({"width": 8.0}, TypeError, "Mantissa width"),
    ({"exp_bits": 17}, ValueError, "Exponent width"),
    ({"rule": "round"}, ValueError, "Exponent rule must be one of floor, ceil, ceil_lop"),
    ({"rule": 1}, TypeError, "Exponent rule"),
    ({"rounding": "up"}, ValueError, "Rounding must be one of"),
    ({"rounding": "stochastic"}, TypeError, "Random bit count"),
    ({"rounding": "stochastic", "rand_bits": 8}, ValueError, "needs rand"),
    ({"rounding": "stochastic", "rand_bits": 0, "rand": np.zeros(16, int)}, ValueError,
     "Random bit count"),
    ({"rounding": "stochastic", "rand_bits": 4, "rand": np.full(16, 16)}, ValueError,
     r"rand values must be in \[0, 2\^4\)"),
    ({"rounding": "stochastic", "rand_bits": 4, "rand": np.zeros(8, int)}, ValueError,
     "shape of x"),
    ({"rounding": "stochastic", "rand_bits": 4, "rand": np.zeros(16)}, TypeError,
     "integer array"),
])
def test_quantise_validation(kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        quantise(np.zeros(16), **kwargs)


def test_other_validation():
    with pytest.raises(ValueError, match="non-negative"):
        shared_exponent(-1.0, width=8)
    with pytest.raises(ValueError, match="NaN code"):
        quantise_with_exponent(np.zeros((1, 4)), np.array([200]), exp_bits=8)
    with pytest.raises(TypeError, match="integers"):
        quantise_with_exponent(np.zeros((1, 4)), np.array([1.0]))
    with pytest.raises(ValueError, match="Overflow"):
        quantise_with_exponent(np.zeros((1, 4)), np.array([0]), overflow="clip")
    with pytest.raises(ValueError, match="do not match"):
        dequantise(np.zeros((2, 4), int), np.zeros(3, int))
    with pytest.raises(TypeError, match="integer arrays"):
        dequantise(np.zeros((2, 4)), np.zeros(2, int))
    with pytest.raises(ValueError, match="at least one axis"):
        quantise(1.0)


# -- OCP E8M0 ----------------------------------------------------------------------------------


def _ocp_mxint8_value(scale_byte, p):
    """OCP MX v1.0: X = 2^(S - 127) (E8M0, 0xFF NaN); MXINT8 element P · 2^-6."""
    if scale_byte == 0xFF:
        return math.nan
    return math.ldexp(p, scale_byte - 127 - 6)


def test_e8m0_matches_ocp_mxint8_definition():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 32)) * 2.0 ** rng.integers(-100, 100, (64, 1))
    x[5, 7] = np.nan
    m, e = quantise(x.reshape(-1), block=32, width=8)
    s = to_e8m0(e, width=8)
    assert s.dtype == np.uint8 and s[5] == 0xFF
    want = [[_ocp_mxint8_value(int(s[b]), int(p)) for p in m[b]] for b in range(len(s))]
    got = dequantise(m, e).reshape(-1, 32)
    assert np.array_equal(got, np.array(want), equal_nan=True)
    # OCP shared scale for INT8 elements (emax_elem = 0): floor(log2(amax)) + 127.
    amax = np.abs(x).max(axis=1)
    for b in range(len(s)):
        if b != 5:
            assert s[b] == math.floor(math.log2(amax[b])) + 127
    assert np.array_equal(from_e8m0(s, width=8), e)


def test_e8m0_all_bytes():
    s = np.arange(256)
    e = from_e8m0(s, width=8, exp_bits=9)
    assert e[255] == nan_exponent(9)
    assert e[:255].tolist() == [b - 127 - 6 for b in range(255)]
    assert to_e8m0(e, width=8, exp_bits=9).tolist() == s.tolist()
    with pytest.raises(ValueError, match="exponent range"):
        from_e8m0(np.array([0]), width=8)        # 2^-133 needs a 9-bit exponent
    with pytest.raises(ValueError, match="E8M0 scale"):
        to_e8m0(np.array([125]), width=8)
    with pytest.raises(ValueError, match=r"\[0, 255\]"):
        from_e8m0(np.array([256]), width=8)


# -- the column model --------------------------------------------------------------------------


def _operands(rng, n, nb, block, width=8, exp_lo=-8, exp_hi=8):
    mx = max_mantissa(width)
    return (rng.integers(-mx, mx + 1, (n, nb * block)), rng.integers(exp_lo, exp_hi, (n, nb)),
            rng.integers(-mx, mx + 1, nb * block), rng.integers(exp_lo, exp_hi, nb))


@pytest.mark.parametrize("rounding", ["nearest", "zero", "stochastic"])
def test_column_single_block_equals_quantise_of_exact(rounding):
    # With one block and no bias nothing is dropped: the column rounds the exact products
    # exactly like the format's quantiser (floor rule) does.
    rng = np.random.default_rng(11)
    model = ColumnModel(lanes=16, block=16)
    for _ in range(20):
        w_m, w_e, x_m, x_e = _operands(rng, 16, 1, 16)
        rand = rng.integers(0, 256, 16)
        y, e4 = model.matvec(w_m, w_e, x_m, x_e, rounding=rounding, rand=rand)
        exact = reference_matvec(w_m, w_e, x_m, x_e, block=16)
        qm, qe = quantise(exact, block=16, width=8, rounding=rounding, rand=rand, rand_bits=8)
        assert (y.tolist(), e4) == (qm[0].tolist(), int(qe[0]))


@pytest.mark.parametrize("rounding", ["nearest", "zero", "stochastic"])
@pytest.mark.parametrize("bias", [False, True])
def test_column_error_bound_vs_float64(rounding, bias):
    rng = np.random.default_rng(5)
    model = ColumnModel(lanes=8, block=8, max_blocks=8)
    for trial in range(30):
        nb = 1 + trial % 8
        w_m, w_e, x_m, x_e = _operands(rng, 8, nb, 8, exp_lo=-12, exp_hi=12)
        b_m = rng.integers(-127, 128, 8) if bias else None
        b_e = rng.integers(0, 16, 8) if bias else None
        rand = rng.integers(0, 256, 8)
        acc, ea, nan = model.accumulate(w_m, w_e, x_m, x_e, b_m, b_e)
        y, e4 = model.matvec(w_m, w_e, x_m, x_e, bias_m=b_m, bias_e=b_e, rounding=rounding,
                             rand=rand)
        exact = reference_matvec(w_m, w_e, x_m, x_e, block=8, bias_m=b_m, bias_e=b_e)
        err = np.abs(np.ldexp(y.astype(float), e4) - exact)
        sat = np.abs(y) == 127
        bound = error_bound(model, ea, e4, nb + bias, rounding=rounding)
        assert np.all(err[~sat] <= bound)
        assert np.all(err <= error_bound(model, ea, e4, nb + bias, rounding="zero"))


def test_column_accumulator_never_overflows():
    # Worst case: every product full scale and same sign, every block at the same exponent.
    model = ColumnModel(lanes=4, block=16, max_blocks=16)
    w_m = np.full((4, 256), -128)
    x_m = np.full(256, -128)
    acc, ea, _ = model.accumulate(w_m, np.zeros((4, 16), int), x_m, np.zeros(16, int),
                                  np.full(4, -128), np.zeros(4, int))
    assert all(abs(a) < 2 ** (model.aw - 1) for a in acc)
    assert acc[0] == (16 * 16 * 128 * 128 - 128) << model.frac_bits


def test_column_zero_block_keeps_exponent_and_nan():
    model = ColumnModel(lanes=4, block=4, max_blocks=4)
    w_m = np.ones((4, 12), int)
    x_m = np.array([1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0])
    x_e = np.array([-10, 100, -12])
    acc, ea, nan = model.accumulate(w_m, np.zeros((4, 3), int), x_m, x_e)
    assert ea == [-10] * 4 and acc == [(4 << 3) + (1 << 1)] * 4
    x_e[1] = nan_exponent(8)
    y, e4 = model.matvec(w_m, np.zeros((4, 3), int), x_m, x_e)
    assert e4 == nan_exponent(8) and y.tolist() == [0] * 4


def test_column_model_validation():
    with pytest.raises(ValueError, match="Lane count must be an integer between 4 and 256, not 2"):
        ColumnModel(lanes=2)
    with pytest.raises(TypeError, match="Mantissa width"):
        ColumnModel(width=8.0)
    model = ColumnModel(lanes=4, block=4)
    w_m, w_e, x_m, x_e = _operands(np.random.default_rng(0), 4, 1, 4)
    with pytest.raises(ValueError, match="needs rand"):
        model.matvec(w_m, w_e, x_m, x_e, rounding="stochastic")
    with pytest.raises(ValueError, match="Exponent mode"):
        model.matvec(w_m, w_e, x_m, x_e, exp_mode="stats")
    with pytest.raises(ValueError, match="shapes"):
        model.matvec(w_m[:, :3], w_e, x_m, x_e)
    with pytest.raises(ValueError, match="Runtime mantissa width"):
        model.matvec(w_m, w_e, x_m, x_e, width=9)
