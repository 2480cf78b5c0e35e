"""Golden model of the quantiser (lowbit.sim.quantiser): int8 rounding, BFP delegation,
statistics."""

from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from lowbit.sim import bfp
from lowbit.sim import quantiser as mq
from lowbit.sim.discrete import CodeBook
from lowbit.sim.prng import Xoroshiro128aox

ALL_F16 = np.arange(1 << 16)


def f16_fraction(code):
    """Exact value of a finite f16 code as a Fraction, independent of numpy's float16."""
    s, ex, fr = code >> 15, (code >> 10) & 0x1F, code & 0x3FF
    sig, k = (fr, -24) if ex == 0 else (fr | 0x400, ex - 25)
    v = Fraction(sig) * Fraction(2) ** k
    return -v if s else v


def int8_reference(code, *, shift, mult, zero, rounding, r=0, rand_bits=8):
    """One element of the int8 rule in Fraction arithmetic (the spec, written independently)."""
    ex, fr = (code >> 10) & 0x1F, code & 0x3FF
    if ex == 0x1F:
        if fr:
            return zero
        return -128 if code >> 15 else 127
    t = f16_fraction(code) * mult * Fraction(2) ** -shift
    if rounding == "nearest":
        fl = t.numerator // t.denominator
        d = t - fl
        q = fl + (d > Fraction(1, 2) or (d == Fraction(1, 2) and fl % 2 == 1))
    elif rounding == "zero":
        q = int(t)                       # int() of a Fraction truncates toward zero
    else:
        u = t + Fraction(r, 1 << rand_bits)
        q = u.numerator // u.denominator
    return max(-128, min(127, q + zero))


# ---- decoding ------------------------------------------------------------------------------

def test_decode_f16_every_code():
    """All 65,536 codes against an independent bit-field decoder (Fractions for a sample)."""
    x = mq.decode_f16(ALL_F16)
    s, ex, fr = ALL_F16 >> 15, (ALL_F16 >> 10) & 0x1F, ALL_F16 & 0x3FF
    sig = np.where(ex == 0, fr, fr | 0x400)
    k = np.where(ex == 0, -24, ex - 25)
    want = np.where(s == 1, -1.0, 1.0) * np.ldexp(sig.astype(np.float64), k)
    finite = ex != 0x1F
    assert np.array_equal(x[finite], want[finite])
    assert np.array_equal(np.signbit(x[finite]), s[finite] == 1)
    for code in range(0, 1 << 16, 97):
        if (code >> 10) & 0x1F != 0x1F:
            assert Fraction(x[code]) == f16_fraction(code)
    assert x[0x0000] == 0 and x[0x8000] == 0 and np.signbit(x[0x8000])
    assert x[0x0001] == 2.0 ** -24 and x[0x03FF] == 1023 * 2.0 ** -24
    assert x[0x7C00] == np.inf and x[0xFC00] == -np.inf
    assert np.isnan(x[0x7C01]) and np.isnan(x[0xFE00])
    assert np.count_nonzero(np.isnan(x)) == 2 * 1023


def test_decode_f16_and_fixed_validation():
    with pytest.raises(TypeError):
        mq.decode_f16(np.array([1.5]))
    with pytest.raises(ValueError):
        mq.decode_f16(np.array([70000]))
    with pytest.raises(ValueError):
        mq.decode_f16(np.array([-1]))
    assert list(mq.decode_fixed(np.array([-256, 3]), 8, width=10)) == [-1.0, 3 / 256]
    with pytest.raises(ValueError):
        mq.decode_fixed(np.array([512]), 8, width=10)
    with pytest.raises(TypeError):
        mq.decode_fixed(np.array([0.5]), 8)
    with pytest.raises(TypeError):
        mq.decode_fixed(np.array([1]), True)


# ---- int8 ----------------------------------------------------------------------------------

@pytest.mark.parametrize("rounding", mq.ROUNDINGS)
@pytest.mark.parametrize("shift,mult,zero", [(-3, 1, 0), (7, 1000, -5), (-10, 3, 17)])
def test_int8_matches_fraction_reference(rounding, shift, mult, zero):
    rng = np.random.default_rng(shift + 100 * mult)
    codes = np.concatenate([rng.choice(ALL_F16, 1500, replace=False),
                            [0, 0x8000, 1, 0x8001, 0x3C00, 0xBC00, 0x7C00, 0xFC00, 0x7E00]])
    rand = rng.integers(0, 1 << 5, codes.size)
    got = mq.quantise_int8(mq.decode_f16(codes), shift=shift, mult=mult, zero=zero,
                           rounding=rounding, rand=rand if rounding == "stochastic" else None,
                           rand_bits=5)
    want = [int8_reference(int(c), shift=shift, mult=mult, zero=zero, rounding=rounding,
                           r=int(r), rand_bits=5) for c, r in zip(codes, rand, strict=True)]
    assert got.tolist() == want


def test_int8_worked_cases():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, -1.7, 1.7, 300.0, -300.0, 0.0, -0.0,
                  np.inf, -np.inf, np.nan])
    assert mq.quantise_int8(x).tolist() == [0, 2, 2, 0, -2, -2, -2, 2, 127, -128, 0, 0, 127,
                                            -128, 0]
    assert mq.quantise_int8(x, rounding="zero").tolist() == [0, 1, 2, 0, -1, -2, -1, 1, 127,
                                                             -128, 0, 0, 127, -128, 0]
    # Zero point added after rounding; NaN gives the zero point.
    assert mq.quantise_int8(x, zero=-100).tolist() == [-100, -98, -98, -100, -102, -102, -102,
                                                       -98, 127, -128, -100, -100, 127, -128,
                                                       -100]
    # Power-of-two scale 2^-2: x · 4.
    assert mq.quantise_int8(np.array([0.375, -0.125]), shift=-2).tolist() == [2, 0]


def test_affine_scale():
    for scale in (0.1, 0.0037, 1.0, 3.0, 1e4, 2.0 ** -20):
        for bits in (4, 12, 16):
            mult, shift = mq.affine_scale(scale, bits)
            assert (1 << (bits - 1)) <= mult < (1 << bits)
            assert abs(mult * 2.0 ** -shift * scale - 1) <= 2.0 ** -bits
    with pytest.raises(ValueError):
        mq.affine_scale(0.0)
    with pytest.raises(ValueError):
        mq.affine_scale(float("inf"))
    with pytest.raises(TypeError):
        mq.affine_scale(1.0, 12.0)


def test_int8_validation():
    x = np.zeros(3)
    with pytest.raises(ValueError, match="Rounding"):
        mq.quantise_int8(x, rounding="up")
    with pytest.raises(ValueError, match="Zero point"):
        mq.quantise_int8(x, zero=128)
    with pytest.raises(TypeError, match="Zero point"):
        mq.quantise_int8(x, zero=1.0)
    with pytest.raises(ValueError, match="Multiplier"):
        mq.quantise_int8(x, mult=0)
    with pytest.raises(TypeError, match="Shift"):
        mq.quantise_int8(x, shift=True)
    with pytest.raises(ValueError, match="needs rand"):
        mq.quantise_int8(x, rounding="stochastic")
    with pytest.raises(ValueError, match="shape"):
        mq.quantise_int8(x, rounding="stochastic", rand=np.zeros(2, int))
    with pytest.raises(ValueError, match="2\\^4"):
        mq.quantise_int8(x, rounding="stochastic", rand=np.array([0, 16, 1]), rand_bits=4)
    with pytest.raises(TypeError, match="integer array"):
        mq.quantise_int8(x, rounding="stochastic", rand=np.zeros(3))


# ---- stochastic rounding: exact bias over all r, and statistics with the PRNG --------------

@pytest.mark.parametrize("rand_bits", [1, 4, 8, 12])
def test_stochastic_bias_bound_exact(rand_bits):
    """Mean of q(t) over all 2^R random integers is floor(t·2^R)/2^R: bias in (-2^-R, 0]."""
    rng = np.random.default_rng(rand_bits)
    t = np.concatenate([rng.uniform(-20, 20, 200), np.arange(-8, 8) / 4, [1 / 3, -1 / 3]])
    r = np.arange(1 << rand_bits)
    q = mq.round_scaled(np.repeat(t, r.size), "stochastic", rand=np.tile(r, t.size),
                        rand_bits=rand_bits).reshape(t.size, r.size)
    mean = q.mean(axis=1)
    assert np.all(mean <= t) and np.all(mean > t - 2.0 ** -rand_bits)
    assert np.array_equal(mean, np.floor(np.ldexp(t, rand_bits)) / 2 ** rand_bits)
    on_grid = np.ldexp(t, rand_bits) == np.floor(np.ldexp(t, rand_bits))
    assert np.all(mean[on_grid] == t[on_grid])
    # Only the two neighbouring integers are ever produced.
    assert np.all((q == np.floor(t)[:, None]) | (q == np.floor(t)[:, None] + 1))


def test_stochastic_unbiased_with_prng():
    """Many f16 x, 4096 PRNG draws each: the mean is within its 99.99% interval of x and the
    variance is the Bernoulli variance p(1-p) of the fractional part."""
    rand_bits, draws = 12, 4096
    rng = np.random.default_rng(7)
    codes = rng.integers(0x3000, 0x5800, 64)      # values from 2^-3 to 2^7 with fractions
    codes = codes | (rng.integers(0, 2, 64) << 15)
    x = mq.decode_f16(codes)
    words = Xoroshiro128aox(seed=1234, lanes=1).take(draws * x.size).reshape(-1)
    rand = (words >> np.uint64(64 - rand_bits)).astype(np.int64).reshape(x.size, draws)
    q = mq.quantise_int8(np.repeat(x, draws).reshape(x.size, draws), rounding="stochastic",
                         rand=rand, rand_bits=rand_bits).astype(np.float64)
    frac = x - np.floor(x)
    var = frac * (1 - frac)
    z = stats.norm.ppf(1 - 1e-4 / 2)
    half_width = z * np.sqrt(var / draws) + 2.0 ** -rand_bits
    assert np.all(np.abs(q.mean(axis=1) - x) <= half_width)
    # Variance: sample variance of a Bernoulli(p) mean, compared within a loose bound.
    sample_var = q.var(axis=1)
    assert np.all(np.abs(sample_var - var) <= 4 * np.sqrt(var / draws) + 2.0 ** -rand_bits)


# ---- BFP: delegated to lowbit.sim.bfp, block layout and the f16 special values
# --------------------

def test_bfp_every_f16_code():
    """All 65,536 codes in blocks of 16 (shuffled and in order): the wrapper gives lowbit.sim.bfp's
    result in stream order, NaN/Inf blocks carry the NaN code, subnormal-only blocks work."""
    rng = np.random.default_rng(3)
    for codes in (ALL_F16, rng.permutation(ALL_F16)):
        x = mq.decode_f16(codes)
        m, e = mq.quantise_bfp(x, block=16, width=6, rule="floor", rounding="nearest")
        assert m.shape == x.shape and e.shape == (4096,)
        want_m, want_e = bfp.quantise(x.reshape(1, -1), block=16, width=6)
        assert np.array_equal(m, want_m.reshape(-1)) and np.array_equal(e, want_e.reshape(-1))
        blocks = codes.reshape(-1, 16)
        special = np.any((blocks & 0x7C00) == 0x7C00, axis=1)
        assert np.all(e[special] == -128) and np.all(m.reshape(-1, 16)[special] == 0)
        keep = ~np.repeat(special, 16)
        err = np.abs(bfp.dequantise(m.reshape(-1, 16), e)[keep] - x[keep])
        scale = np.ldexp(1.0, np.repeat(e, 16))[keep]
        assert np.all(err <= scale)      # within one ulp of the block (saturation included)
    # The first block in order is 0 and the smallest subnormals: e = -24 - (6 - 2) - 1.
    m, e = mq.quantise_bfp(mq.decode_f16(ALL_F16[:16]), width=6)
    assert e[0] == -24 + 3 - 4 and list(m[:4]) == [0, 2, 4, 6]


def test_bfp_stochastic_rand_in_stream_order():
    x = mq.decode_f16(np.arange(0x3C00, 0x3C20))
    rand = np.arange(32) % 16
    m, _ = mq.quantise_bfp(x, block=16, width=3, rounding="stochastic", rand=rand,
                           rand_bits=4)
    want, _ = bfp.quantise(x, block=16, width=3, rounding="stochastic", rand=rand, rand_bits=4)
    assert np.array_equal(m, want.reshape(-1))
    with pytest.raises(ValueError):
        mq.quantise_bfp(x, width=3, rounding="stochastic")


# ---- discrete codes ------------------------------------------------------------------------

def test_discrete_wrapper_and_f16_specials():
    book = CodeBook.default(2)
    x = mq.decode_f16(np.array([0x3C00, 0xBC00, 0x7C00, 0xFC00, 0x0000, 0x8000, 0x7E00,
                                0x3000]))
    codes = mq.quantise_discrete(x, book)
    # +1, -1, +Inf clipped to +1, -Inf to -1, ±0 and NaN (as 0) to the nearest of ±1/8 (lowest
    # index wins the tie: -1/8), 1/8 exactly.
    assert codes.tolist() == [3, 0, 3, 0, 1, 1, 1, 2]
    rand = np.arange(8)
    st = mq.quantise_discrete(x, book, mode="stochastic", rand=rand, rand_bits=3)
    assert st[:4].tolist() == [3, 0, 3, 0] and st[7] == 2


def discrete_fixed_reference(codes, book, *, mode, rand=None, rand_bits=8):
    """The integer formulation the gateware uses, written independently of ``to_codes``.

    ``y = floor(x · 2^(7+R))`` and a sticky bit ``s`` (bits lost); code values ``V`` in units of
    2^-7. ``lo``/``hi`` are the largest value ``<= x`` and the smallest value ``> x``
    (lowest code index among equal values); nearest takes ``hi`` iff ``2y + s > (lo + hi)·2^R``
    or, on equality, hi's code index is lower; stochastic iff ``r·(hi - lo) < y - lo·2^R + s``.
    Below every value: the lowest index of the smallest; at or above the largest: its lowest.
    """
    R = rand_bits
    vals = [int(v * 128) for v in book.values()]            # exact: values are ±2^(-7..7)
    out = []
    for k, code in enumerate(int(c) for c in codes):
        if (code >> 10) & 0x1F == 0x1F:
            if code & 0x3FF:
                y, s = 0, 0                                  # NaN converts as 0
            else:
                y, s = (-(1 << 40) if code >> 15 else 1 << 40), 0
        else:
            t = f16_fraction(code) * (1 << (7 + R))
            y = t.numerator // t.denominator
            s = int(t != y)
        le = [c for c in range(len(vals)) if vals[c] << R <= y]
        gt = [c for c in range(len(vals)) if vals[c] << R > y]
        if not le:
            out.append(min(range(len(vals)), key=lambda c: (vals[c], c)))
            continue
        if not gt:
            out.append(min(range(len(vals)), key=lambda c: (-vals[c], c)))
            continue
        lo = min(le, key=lambda c: (-vals[c], c))
        hi = min(gt, key=lambda c: (vals[c], c))
        if mode == "nearest":
            z, mid = 2 * y + s, (vals[lo] + vals[hi]) << R
            take = z > mid or (z == mid and hi < lo)
        else:
            take = int(rand[k]) * (vals[hi] - vals[lo]) < y - (vals[lo] << R) + s
        out.append(hi if take else lo)
    return np.array(out)


_BOOKS = [CodeBook.default(1), CodeBook.default(2), CodeBook.default(3),
          CodeBook(3, [(0, 1, 7), (1, 0, 7), (0, 0, 2), (0, 0, 2), (1, 1, 3), (0, 1, 0), (1, 0, 0),
                       (0, 0, 7)])]


@pytest.mark.parametrize("book,mode", [
    # Every code of each book in the stochastic mode (every 7th code) and of the random book in
    # the nearest mode in the quick suite; the default books' nearest runs with -m slow.
    pytest.param(b, m, id=f"book{k}-{m}",
                 marks=[pytest.mark.slow] if m == "nearest" and k < 3 else [])
    for m in ("nearest", "stochastic") for k, b in enumerate(_BOOKS)])
def test_discrete_integer_formulation_every_f16_code(book, mode):
    """The model equals the exact integer rule of the gateware on every f16 code (every 7th
    code for the stochastic mode, with fresh random bits)."""
    codes = ALL_F16 if mode == "nearest" else ALL_F16[::7]
    rand = np.random.default_rng(1).integers(0, 1 << 5, codes.size)
    kw = {"rand": rand, "rand_bits": 5} if mode == "stochastic" else {}
    got = mq.quantise_discrete(mq.decode_f16(codes), book, mode=mode, **kw)
    want = discrete_fixed_reference(codes, book, mode=mode, rand=rand, rand_bits=5)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("rand_bits", [1, 3, 8])
def test_discrete_stochastic_bias_bound_exact(rand_bits):
    """Over all 2^R random values, the mean code value of y between two neighbours exceeds y
    by less than 2^-R of the gap (P(hi) = ceil(frac · 2^R) / 2^R), and equals y when frac is a
    multiple of 2^-R."""
    book = CodeBook.default(3)
    values = book.values()
    ys = np.linspace(-1, 1, 301)
    r = np.arange(1 << rand_bits)
    for y in ys:
        codes = mq.quantise_discrete(np.full(r.size, y), book, mode="stochastic", rand=r,
                                     rand_bits=rand_bits)
        mean = values[codes].mean()
        uniq = np.unique(values)
        i = min(np.searchsorted(uniq, y, side="right") - 1, uniq.size - 2)
        gap = uniq[i + 1] - uniq[i]
        assert 0 <= mean - y < gap * 2.0 ** -rand_bits
        frac = (y - uniq[i]) / gap
        if (frac * (1 << rand_bits)).is_integer():
            assert mean == y
