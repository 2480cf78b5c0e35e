"""Golden models of seed 002's Table 1 element-wise operations (lowbit.sim.bfp_ops)."""

import math
from fractions import Fraction

import numpy as np
import pytest

from lowbit.sim.bfp import nan_exponent, quantise
from lowbit.sim.bfp_column import ColumnModel
from lowbit.sim.bfp_ops import add, divide


def q16(values):
    """Seed 002's format: W = 16 ("floor" rule), one block."""
    return quantise(np.array(values, dtype=float), block=len(values), width=16)


# -- seed 002 worked numbers through the Table 1 operations ------------------------------------


def test_seed_255_sum_raises_and_difference_lowers_the_exponent():
    a_m, a_e = q16([255.0])
    assert (a_m.tolist(), a_e.tolist()) == ([[0x7F80]], [-7])
    # 255 + 255 = 510: the carry out raises the exponent by one ([0056] "increased").
    m, e = add(a_m, a_e, a_m, a_e, width=16)
    assert (m.tolist(), e.tolist()) == ([[0x7F80]], [-6])
    # 255 - 254.5 = 0.5: cancellation lowers it ([0162] "decreased"), exactly.
    b_m, b_e = q16([254.5])
    m, e = add(a_m, a_e, b_m, b_e, width=16, subtract=True)
    assert (m.tolist(), e.tolist()) == ([[0x4000]], [-15])
    # 255 / 2: exponents subtracted (-7 - -13), then the floor rule on the quotient 127.5.
    c_m, c_e = q16([2.0])
    m, e = divide(a_m, a_e, c_m, c_e, width=16)
    assert (m.tolist(), e.tolist()) == ([[0x7F80]], [-8])
    # Table 2's +3 block plus its -3 representation of the small values.
    t_m, t_e = q16([131072, 256, 1, 0.5, 0.125])
    s_m, s_e = quantise(np.array([0, 256, 1, 0.5, 0.125]), block=5, width=16)
    m, e = add(t_m, t_e, s_m, s_e, width=16, rounding="zero")
    assert e.tolist() == [3] and m.tolist() == [[0x4000, 0x0040, 0, 0, 0]]


# -- add / subtract ----------------------------------------------------------------------------


def _random_operands(rng, shape, width, spread):
    mx = (1 << (width - 1)) - 1
    m = rng.integers(-mx, mx + 1, shape) >> rng.integers(0, width, shape[:-1] + (1,))
    return m, rng.integers(-spread, spread + 1, shape[:-1])


@pytest.mark.parametrize("rounding", ["nearest", "zero", "stochastic"])
@pytest.mark.parametrize("width", [2, 8, 16])
def test_add_within_guard_bits_is_quantise_of_the_exact_sum(rounding, width):
    """Exponents at most F apart: nothing is dropped, so the result is the format's quantiser
    ("floor" rule) applied to the exact sums."""
    rng = np.random.default_rng(width)
    a_m, a_e = _random_operands(rng, (300, 8), width, 20)
    b_m, _ = _random_operands(rng, (300, 8), width, 20)
    b_e = a_e + rng.integers(-3, 4, a_e.shape)
    rand = rng.integers(0, 256, a_m.shape)
    for subtract in (False, True):
        m, e = add(a_m, a_e, b_m, b_e, width=width, rounding=rounding, rand=rand,
                   subtract=subtract)
        exact = np.ldexp(a_m.astype(float), a_e[:, None]) + \
            (-1 if subtract else 1) * np.ldexp(b_m.astype(float), b_e[:, None])
        wm, we = quantise(exact.reshape(-1), block=8, width=width, rounding=rounding,
                          rand=rand.reshape(-1), rand_bits=8)
        assert np.array_equal(m, wm) and np.array_equal(e, we)


def column_add(a_m, a_e, b_m, b_e, *, width, exp_bits, rounding, rand, subtract=False,
               frac_bits=3):
    """``(±I)·b + a`` on the column model: identity weights of exponent 0, x = b, bias a."""
    n = a_m.shape[-1]
    col = ColumnModel(lanes=n, block=n, width=width, exp_bits=exp_bits, max_blocks=1,
                      frac_bits=frac_bits)
    w = -np.eye(n, dtype=np.int64) if subtract else np.eye(n, dtype=np.int64)
    ms, es = [], []
    for k in range(a_m.shape[0]):
        y, e = col.matvec(w, np.zeros((n, 1), np.int64), b_m[k], b_e[k:k + 1],
                          bias_m=a_m[k], bias_e=np.repeat(a_e[k], n), rounding=rounding,
                          rand=rand[k])
        ms.append(y)
        es.append(e)
    return np.array(ms), np.array(es)


@pytest.mark.parametrize("rounding", ["nearest", "zero", "stochastic"])
@pytest.mark.parametrize("width,exp_bits,frac_bits", [(8, 8, 3), (16, 5, 3), (4, 4, 0)])
def test_add_is_the_column_bias_path(rounding, width, exp_bits, frac_bits):
    """Over the whole exponent range (bits dropped by the aligning shift), zero elements and
    blocks, the NaN code on either side, both operations: the column model's (±I)·b + a."""
    rng = np.random.default_rng(width + exp_bits)
    lim = (1 << (exp_bits - 1)) - 1
    a_m, a_e = _random_operands(rng, (120, 4), width, lim)
    b_m, b_e = _random_operands(rng, (120, 4), width, lim)
    a_m[::7] = 0
    b_m[3::11, 1] = 0
    a_e[5] = nan_exponent(exp_bits)
    b_e[6] = nan_exponent(exp_bits)
    b_m[8] = -a_m[8]                          # exact cancellation: zero result, e = 0
    b_e[8] = a_e[8]
    rand = rng.integers(0, 256, a_m.shape)
    for subtract in (False, True):
        got = add(a_m, a_e, b_m, b_e, width=width, exp_bits=exp_bits, guard_bits=frac_bits,
                  rounding=rounding, rand=rand, subtract=subtract)
        want = column_add(a_m, a_e, b_m, b_e, width=width, exp_bits=exp_bits,
                          rounding=rounding, rand=rand, subtract=subtract,
                          frac_bits=frac_bits)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        assert got[1][5] == got[1][6] == nan_exponent(exp_bits)
        if not subtract:
            assert got[1][8] == 0 and not got[0][8].any()


def test_add_broadcast_and_validation():
    m, e = add(np.ones((3, 1, 4), int), np.zeros((3, 1), int), np.ones((1, 4), int),
               np.array([2]), width=8)
    assert m.shape == (3, 1, 4) and (m == 80).all() and (e == -4).all()   # 5 = 80 · 2^-4
    ok = (np.zeros((1, 4), int), np.zeros(1, int))
    with pytest.raises(ValueError, match="Mantissa width must be an integer between 2 and 16"):
        add(*ok, *ok, width=17)
    with pytest.raises(ValueError, match="Guard bit count"):
        add(*ok, *ok, guard_bits=9)
    with pytest.raises(TypeError, match="subtract must be a bool"):
        add(*ok, *ok, subtract=1)
    with pytest.raises(ValueError, match="fit 8 signed bits"):
        add(np.full((1, 4), 200), ok[1], *ok)
    with pytest.raises(ValueError, match="Exponents must be in"):
        add(ok[0], np.array([200]), *ok)
    with pytest.raises(ValueError, match="needs rand"):
        add(*ok, *ok, rounding="stochastic")
    with pytest.raises(TypeError, match="integer arrays"):
        add(np.zeros((1, 4)), ok[1], *ok)


# -- divide ------------------------------------------------------------------------------------


def _exact_divide(a_m, a_e, b_m, b_e, width, rounding, rand, rbits=8, exp_bits=8):
    """Fraction reference of one block."""
    lim = (1 << (exp_bits - 1)) - 1
    if 0 in b_m:
        return [0] * len(a_m), nan_exponent(exp_bits)
    q = [Fraction(int(x), int(y)) * Fraction(2) ** (int(a_e) - int(b_e))
         for x, y in zip(a_m, b_m, strict=True)]
    amax = max(abs(v) for v in q)
    if amax == 0:
        return [0] * len(a_m), 0
    k = math.floor(math.log2(amax))
    k += (Fraction(2) ** (k + 1) <= amax) - (Fraction(2) ** k > amax)   # float log2 slips
    e = min(max(k - (width - 2), -lim), lim)
    mx = (1 << (width - 1)) - 1
    out = []
    for v, r in zip(q, rand, strict=True):
        t = v / Fraction(2) ** e
        if rounding == "nearest":
            f = math.floor(t)
            n = f + (t - f > Fraction(1, 2) or (t - f == Fraction(1, 2) and f % 2 == 1))
        elif rounding == "zero":
            n = math.trunc(t)
        else:
            n = math.floor(t + Fraction(int(r), 1 << rbits))
        out.append(min(max(n, -mx), mx))
    return out, e


@pytest.mark.parametrize("rounding", ["nearest", "zero", "stochastic"])
@pytest.mark.parametrize("width", [2, 5, 8, 16])
def test_divide_against_fractions(rounding, width):
    """Random blocks (ties included: small integers), zero dividends, zero divisors (NaN),
    negative divisors, exponents at the range's ends (clamped), the NaN code."""
    rng = np.random.default_rng(40 + width)
    mx = (1 << (width - 1)) - 1
    a_m = rng.integers(-mx, mx + 1, (200, 4))
    b_m = rng.integers(-mx, mx + 1, (200, 4))
    b_m[b_m == 0] = 1
    a_m[:40] = rng.integers(-4, 5, (40, 4))
    b_m[:40] = rng.choice([-4, -2, -1, 1, 2, 4], (40, 4))
    a_m[50] = 0
    b_m[51, 2] = 0
    a_e = rng.integers(-100, 101, 200)
    b_e = rng.integers(-100, 101, 200)
    a_e[60], b_e[60] = 127, -127
    a_e[61], b_e[61] = -127, 127
    a_e[62] = nan_exponent(8)
    rand = rng.integers(0, 256, a_m.shape)
    m, e = divide(a_m, a_e, b_m, b_e, width=width, rounding=rounding, rand=rand)
    for k in range(200):
        if k == 62:
            assert e[k] == nan_exponent(8) and not m[k].any()
            continue
        want = _exact_divide(a_m[k], a_e[k], b_m[k], b_e[k], width, rounding, rand[k])
        assert (m[k].tolist(), int(e[k])) == want, k
    assert e[51] == nan_exponent(8) and e[50] == 0 and e[60] == 127 and e[61] == -127
    if width == 2:
        assert (np.abs(m) <= 1).all()


def test_divide_saturation_and_validation():
    # 127 / 1 at W = 8 with nearest: 127 · 2^-1... the largest quotient 255/2 rounds to 128.
    m, e = divide(np.array([[127, 1]]), np.array([1]), np.array([[1, 1]]), np.array([1]),
                  width=8)
    assert (m.tolist(), e.tolist()) == ([[127, 1]], [0])
    m, e = divide(np.array([[255, 3]]), np.array([0]), np.array([[2, 2]]), np.array([0]),
                  width=9)
    assert (m.tolist(), e.tolist()) == ([[255, 3]], [-1])
    m, e = divide(np.array([[127, -127]]), np.array([0]), np.array([[2, 2]]), np.array([0]),
                  width=8)
    assert (m.tolist(), e.tolist()) == ([[127, -127]], [-1])   # 63.5 · 2 = 127 exactly
    m, e = divide(np.array([[255]]), np.array([0]), np.array([[1]]), np.array([0]), width=8)
    assert (m.tolist(), e.tolist()) == ([[127]], [1])          # 127.5 -> 128 saturates
    ok = (np.ones((1, 4), int), np.zeros(1, int))
    with pytest.raises(ValueError, match="Mantissa width"):
        divide(*ok, *ok, width=1)
    with pytest.raises(ValueError, match="Rounding must be one of"):
        divide(*ok, *ok, rounding="up")
