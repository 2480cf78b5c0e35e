"""Golden model of the discrete shift/XOR unit: seed examples, rules, conversions, backward."""

from fractions import Fraction

import numpy as np
import pytest

from lowbit.sim.discrete import (
    DD_OPS,
    CodeBook,
    SMFormat,
    dd_op,
    dd_table,
    div_cd,
    dot,
    ew_mul,
    from_codes,
    matvec,
    matvec_t,
    mul_cd,
    to_codes,
    update_weights,
    weight_grad,
)

F8 = SMFormat(8, 0)
ALL8 = np.arange(256)
# The seed's example book: 01 = -1/2, 10 = -2.
SEED_BOOK = CodeBook(2, [(1, 0, 0), (1, 0, 1), (1, 1, 1), (0, 0, 0)])


def ref_value(book, code):
    s, d, k = book.entries[code]
    return Fraction(-1 if s else 1) * Fraction(2) ** (k if d else -k)


def ref_shift(x_word, code, book, fmt, divide=False):
    """Independent reference: exact rational product, truncate toward zero, saturate."""
    sign = x_word >> (fmt.width - 1)
    mag = x_word & fmt.max_mag
    v = ref_value(book, code)
    r = Fraction(-mag if sign else mag) * (1 / v if divide else v)
    m = min(abs(r.numerator) // r.denominator, fmt.max_mag)
    return 0 if m == 0 else (int(r < 0) << (fmt.width - 1)) | m


# --- seed worked examples ---------------------------------------------------------------------

def test_seed_example_multiply():
    assert mul_cd(0b00010000, 0b01, SEED_BOOK, F8) == 0b10001000
    assert F8.decode(mul_cd(0b00010000, 0b01, SEED_BOOK, F8)) == -8


def test_seed_example_divide():
    assert div_cd(0b00010000, 0b10, SEED_BOOK, F8) == 0b10001000


def test_seed_examples_hold_for_any_frac():
    for frac in (0, 3, 7):
        fmt = SMFormat(8, frac)
        assert mul_cd(0b00010000, 1, SEED_BOOK, fmt) == 0b10001000
        assert div_cd(0b00010000, 2, SEED_BOOK, fmt) == 0b10001000


def test_sign_flip_and_shift_commute():
    # Flip then shift (example A) equals shift then flip (example B) for every word.
    sign, mag = F8.unpack(ALL8)
    flipped = F8.pack(sign ^ 1, mag)
    s1, m1 = F8.unpack(flipped)
    flip_first = F8.pack(s1, m1 >> 1)
    shifted = F8.pack(sign, mag >> 1)
    s2, m2 = F8.unpack(shifted)
    shift_first = F8.pack(s2 ^ 1, m2)
    assert (flip_first == shift_first).all()
    assert (mul_cd(ALL8, 1, SEED_BOOK, F8) == flip_first).all()
    assert (div_cd(ALL8, 2, SEED_BOOK, F8) == shift_first).all()


def test_one_bit_weight_is_sign_xor():
    book = CodeBook.default(1)
    assert (mul_cd(ALL8, 0, book, F8) == np.where(ALL8 == 0x80, 0, ALL8)).all()
    expect = np.where((ALL8 & 0x7F) == 0, 0, ALL8 ^ 0x80)
    assert (mul_cd(ALL8, 1, book, F8) == expect).all()


# --- exhaustive rules against an independent rational reference ---------------------------------

@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("divide", [False, True])
def test_shift_exhaustive_default_books(n, divide):
    book = CodeBook.default(n)
    fn = div_cd if divide else mul_cd
    for code in range(1 << n):
        got = fn(ALL8, code, book, F8)
        assert got.tolist() == [ref_shift(x, code, book, F8, divide) for x in range(256)]


def test_shift_exhaustive_random_books():
    rng = np.random.default_rng(1)
    for _ in range(6):
        n = int(rng.integers(1, 4))
        entries = [tuple(int(v) for v in (rng.integers(2), rng.integers(2), rng.integers(8)))
                   for _ in range(1 << n)]
        book = CodeBook(n, entries)
        for code in range(1 << n):
            for divide, fn in ((False, mul_cd), (True, div_cd)):
                assert fn(ALL8, code, book, F8).tolist() == \
                    [ref_shift(x, code, book, F8, divide) for x in range(256)]


def test_left_shift_saturates_and_zero_is_canonical():
    book = CodeBook(1, [(0, 1, 3), (1, 1, 7)])
    assert mul_cd(0x7F, 0, book, F8) == 0x7F
    assert mul_cd(0x01, 1, book, F8) == 0xFF
    assert mul_cd(0x10, 1, book, F8) == 0xFF
    assert mul_cd(0x80, 1, book, F8) == 0  # negative zero input -> canonical zero
    assert mul_cd(0x83, 1, CodeBook.default(2), F8) == 0  # -3 * -1/8 truncates to +0


def test_wide_format_random():
    fmt = SMFormat(16, 8)
    rng = np.random.default_rng(2)
    book = CodeBook.default(3)
    x = rng.integers(0, 1 << 16, 500)
    c = rng.integers(0, 8, 500)
    got = mul_cd(x, c, book, fmt)
    assert got.tolist() == [ref_shift(int(a), int(b), book, fmt) for a, b in zip(x, c, strict=True)]
    # Value check: the product is the real product truncated toward zero.
    exact = fmt.decode(x) * from_codes(c, book)
    assert np.all(np.abs(fmt.decode(got)) <= np.abs(exact))
    assert np.all(np.abs(exact - fmt.decode(got)) < 2.0 ** -fmt.frac)


# --- formats and books ---------------------------------------------------------------------------

def test_default_books():
    assert CodeBook.default(1).values().tolist() == [1, -1]
    assert CodeBook.default(2).values().tolist() == [-1, -1 / 8, 1 / 8, 1]
    v3 = CodeBook.default(3).values()
    assert v3.dtype == np.float64 and (np.diff(v3) > 0).all() and (v3 == -v3[::-1]).all()


def test_book_from_values_and_words():
    book = CodeBook.from_values([-1, -0.5, -2, 1])
    assert book == SEED_BOOK
    assert book.words() == [0b10000, 0b10001, 0b11001, 0b00000]
    assert CodeBook.from_values(CodeBook.default(3).values()) == CodeBook.default(3)
    with pytest.raises(ValueError, match="±2\\*\\*k"):
        CodeBook.from_values([1, 3])
    with pytest.raises(ValueError, match="±2\\*\\*k"):
        CodeBook.from_values([1, 2.0 ** -8])
    with pytest.raises(ValueError, match="2, 4 or 8 values"):
        CodeBook.from_values([1, 2, 4])


@pytest.mark.parametrize("args, exc, msg", [
    ((4, []), ValueError, "Code width must be an integer between 1 and 3, not 4"),
    ((True, [(0, 0, 0)] * 2), TypeError, "Code width must be an integer"),
    ((1.0, [(0, 0, 0)] * 2), TypeError, "Code width must be an integer"),
    ((1, [(0, 0, 0)] * 3), ValueError, "needs 2 entries, not 3"),
    ((1, [(0, 0, 0), (0, 0)]), TypeError, "triple"),
    ((1, [(0, 0, 0), (2, 0, 0)]), ValueError, "Sign must be an integer between 0 and 1"),
    ((1, [(0, 0, 0), (0, 2, 0)]), ValueError, "Direction must be"),
    ((1, [(0, 0, 0), (0, 0, 8)]), ValueError, "Shift must be an integer between 0 and 7, not 8"),
    ((1, [(0, 0, 0), (0, 0, 1.5)]), TypeError, "Shift must be an integer"),
])
def test_book_validation(args, exc, msg):
    with pytest.raises(exc, match=msg):
        CodeBook(*args)


def test_format_validation_and_roundtrip():
    with pytest.raises(ValueError, match="Width must be an integer between 2 and 48, not 1"):
        SMFormat(1)
    with pytest.raises(TypeError, match="Width"):
        SMFormat(8.0)
    with pytest.raises(ValueError, match="Fraction bits"):
        SMFormat(8, -1)
    with pytest.raises(ValueError, match="8-bit sign-magnitude"):
        F8.unpack([256])
    fmt = SMFormat(8, 4)
    words = fmt.from_int(np.arange(-127, 128))
    assert (fmt.to_int(words) == np.arange(-127, 128)).all()
    assert (fmt.encode(fmt.decode(words)) == words).all()
    assert fmt.encode([100.0, -100.0, 0.09, -0.09]).tolist() == [0x7F, 0xFF, 1, 0x81]
    assert fmt.encode([0.09375], rounding="nearest").tolist() == [2]  # 1.5 ulp -> even 2
    with pytest.raises(ValueError, match="NaN"):
        fmt.encode([np.nan])


# --- discrete x discrete tables ------------------------------------------------------------------

def test_dd_tables_background_book():
    book = CodeBook.default(2)
    fmt = SMFormat(12, 6)
    v = [Fraction(-1), Fraction(-1, 8), Fraction(1, 8), Fraction(1)]
    ops = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "div": lambda a, b: a / b}
    for op in DD_OPS:
        table = dd_table(book, op, fmt)
        assert table.shape == (4, 4)
        for a in range(4):
            for b in range(4):
                assert Fraction(fmt.decode(table[a, b]).item()) == ops[op](v[a], v[b])
    # The digest's tables, spot values: 1/8 x 1/8 = 1/64 exactly in Q6; -1 ÷ 1/8 = -8.
    assert dd_op(2, 2, book, "mul", fmt) == 1
    assert fmt.decode(dd_op(0, 2, book, "div", fmt)) == -8


def test_dd_table_truncates_and_saturates():
    book = CodeBook.default(2)
    fmt = SMFormat(8, 3)
    mul = dd_table(book, "mul", fmt)
    assert mul[1, 2] == 0  # -1/64 truncates to zero in Q3, canonical zero
    div = dd_table(book, "div", fmt)
    assert div[0, 2] == 0x80 | 64
    assert dd_table(book, "div", SMFormat(6, 3))[0, 1] == 31  # 8 saturates at 31/8
    with pytest.raises(ValueError, match="Operation must be one of"):
        dd_table(book, "pow", fmt)


# --- continuous -> discrete ----------------------------------------------------------------------

def test_to_codes_nearest_rules():
    book = CodeBook.default(2)
    x = [-5, -1, -0.6, -0.5625, -0.5, 0, 0.0625, 0.125, 0.5625, 0.6, 1, 7]
    assert to_codes(x, book).tolist() == [0, 0, 0, 0, 1, 1, 2, 2, 2, 3, 3, 3]
    assert to_codes(x, book).dtype == np.uint8
    # Every code value maps to its own code, for every default book.
    for n in (1, 2, 3):
        b = CodeBook.default(n)
        assert to_codes(b.values(), b).tolist() == list(range(1 << n))


def test_to_codes_nearest_matches_bruteforce():
    rng = np.random.default_rng(3)
    book = CodeBook.default(3)
    x = rng.normal(0, 0.7, 2000).astype(np.float16).astype(np.float64)
    got = to_codes(x, book)
    vals = book.values()
    for xi, ci in zip(x, got, strict=True):
        d = np.abs(np.clip(xi, -1, 1) - vals)
        assert ci == np.flatnonzero(d == d.min())[0]


def test_to_codes_duplicates_go_to_lowest_code():
    book = CodeBook(2, [(0, 0, 0), (1, 0, 0), (0, 0, 0), (1, 0, 0)])
    assert to_codes([0.9, -0.9, 0.0], book).tolist() == [0, 1, 0]
    r = np.arange(16)
    assert set(to_codes(np.full(16, 0.3), book, mode="stochastic", rand=r,
                        rand_bits=4).tolist()) == {0, 1}


def test_to_codes_stochastic_binary_rule():
    # Seed's M = 2 example: P(-1) = (1 - y) / 2; output hi iff r*(hi-lo) < (y-lo)*2^R.
    book = CodeBook.default(1)  # 0: +1, 1: -1
    R = 8
    r = np.arange(1 << R)
    for y in (-1.0, -0.75, -0.3, 0.0, 0.5, 0.99, 1.0, 3.0, -3.0):
        codes = to_codes(np.full(1 << R, y), book, mode="stochastic", rand=r, rand_bits=R)
        yc = min(max(y, -1), 1)
        n_plus = int(np.count_nonzero(codes == 0))
        assert n_plus == int(np.ceil((yc + 1) / 2 * (1 << R)))


def test_to_codes_stochastic_exact_and_unbiased():
    book = CodeBook.default(2)
    values = book.values()
    R = 10
    r = np.arange(1 << R)
    rng = np.random.default_rng(4)
    for y in rng.uniform(-1, 1, 40).astype(np.float16).astype(np.float64):
        codes = to_codes(np.full(1 << R, y), book, mode="stochastic", rand=r, rand_bits=R)
        i = np.searchsorted(values, y, side="right") - 1
        lo, hi = values[i], values[i + 1]
        # Only the two neighbours occur, hi exactly for r < (y - lo) / (hi - lo) * 2^R.
        n_hi = int(np.ceil((y - lo) / (hi - lo) * (1 << R)))
        assert (codes == np.where(r < n_hi, i + 1, i)).all()
        # Over a full sweep of r the mean exceeds y by less than (hi - lo) / 2^R.
        mean = from_codes(codes, book).mean()
        assert 0 <= mean - y < (hi - lo) / (1 << R)


def test_to_codes_stochastic_on_code_value_and_clipping():
    book = CodeBook.default(2)
    r = np.arange(256)
    for c, v in enumerate(book.values()):
        assert (to_codes(np.full(256, v), book, mode="stochastic", rand=r, rand_bits=8)
                == c).all()
    # zone 2 exceeds the outer code 1: values beyond 1 clip to the outer code.
    assert (to_codes(np.full(256, 1.5), book, mode="stochastic", rand=r, rand_bits=8,
                     zone=2) == 3).all()
    # zone 0.5 narrower than the book: 0.9 clips to 0.5, between 1/8 and 1.
    codes = to_codes(np.full(256, 0.9), book, mode="stochastic", rand=r, rand_bits=8, zone=0.5)
    assert np.count_nonzero(codes == 3) == int(np.ceil((0.5 - 0.125) / 0.875 * 256))
    assert to_codes([0.9], book, zone=0.5).tolist() == [2]


def test_to_codes_deterministic_given_rand():
    book = CodeBook.default(3)
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, 300)
    r = rng.integers(0, 1 << 12, 300)
    a = to_codes(x, book, mode="stochastic", rand=r, rand_bits=12)
    b = to_codes(x, book, mode="stochastic", rand=r, rand_bits=12)
    assert (a == b).all()


@pytest.mark.parametrize("kwargs, exc, msg", [
    ({"mode": "up"}, ValueError, "Mode must be"),
    ({"mode": "stochastic"}, ValueError, "needs rand and rand_bits"),
    ({"mode": "stochastic", "rand": [0], "rand_bits": 0}, ValueError, "Random bit count"),
    ({"mode": "stochastic", "rand": [0], "rand_bits": 4.0}, TypeError, "Random bit count"),
    ({"mode": "stochastic", "rand": [16], "rand_bits": 4}, ValueError, "4-bit integers"),
    ({"mode": "stochastic", "rand": [0.5], "rand_bits": 4}, TypeError, "integer array"),
    ({"zone": 0}, ValueError, "Zone must be a positive"),
    ({"zone": True}, TypeError, "Zone must be a positive number"),
])
def test_to_codes_validation(kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        to_codes([0.5], CodeBook.default(2), **kwargs)


def test_to_codes_nearest_ignores_rand():
    book = CodeBook.default(2)
    x = np.linspace(-1.2, 1.2, 25)
    assert (to_codes(x, book, rand=np.zeros(25, int), rand_bits=8) == to_codes(x, book)).all()


def test_to_codes_nan_raises():
    with pytest.raises(ValueError, match="NaN"):
        to_codes([np.nan], CodeBook.default(2))


def test_codes_out_of_range_raise():
    with pytest.raises(ValueError, match="2-bit codes"):
        mul_cd(3, 4, CodeBook.default(2), F8)
    with pytest.raises(TypeError, match="CodeBook"):
        mul_cd(3, 1, [1, -1], F8)


# --- accumulation, matvec and the backward pass ------------------------------------------------

def ref_dot(x, codes, book, fmt, acc_width, lanes):
    acc_max = (1 << (acc_width - 1)) - 1
    terms = [fmt.to_int(ref_shift(int(a), int(c), book, fmt)).item()
             for a, c in zip(x, codes, strict=True)]
    acc = 0
    for k in range(0, len(terms), lanes):
        acc = max(-acc_max, min(acc_max, acc + sum(terms[k:k + lanes])))
    return 0 if acc == 0 else (int(acc < 0) << (acc_width - 1)) | abs(acc)


def test_dot_matches_reference_and_saturates():
    rng = np.random.default_rng(6)
    book = CodeBook(2, [(1, 1, 2), (1, 0, 3), (0, 0, 1), (0, 1, 3)])
    for acc_width, lanes in ((10, 4), (16, 2), (9, 1), (12, 3)):
        for _ in range(20):
            n = int(rng.integers(1, 24))
            x = rng.integers(0, 256, n)
            c = rng.integers(0, 4, n)
            assert dot(x, c, book, F8, acc_width=acc_width, lanes=lanes) == \
                ref_dot(x, c, book, F8, acc_width, lanes)
    # All-maximum terms saturate at the accumulator bound.
    assert dot([0x7F] * 8, [3] * 8, book, F8, acc_width=10, lanes=2) == 511


def test_matvec_equals_decoded_numpy_without_saturation():
    rng = np.random.default_rng(7)
    fmt = SMFormat(8, 4)
    book = CodeBook.default(3)
    w = rng.integers(0, 8, (6, 10))
    # Magnitudes that are multiples of 8 lose no bits in right shifts of up to 3.
    x = fmt.from_int(rng.integers(-15, 16, 10) * 8)
    y = matvec(w, x, book, fmt, acc_width=16, lanes=4)
    expect = book.values()[w] @ fmt.decode(x)
    assert np.allclose(SMFormat(16, 4).decode(y), expect, atol=0)
    yt = matvec_t(w, fmt.from_int(rng.integers(-15, 16, 6) * 8), book, fmt, acc_width=16)
    assert yt.shape == (10,)
    with pytest.raises(ValueError, match="M×N matrix"):
        matvec(w, x[:3], book, fmt)


def test_matvec_t_is_matvec_of_transpose():
    rng = np.random.default_rng(8)
    w = rng.integers(0, 4, (5, 7))
    g = rng.integers(0, 256, 5)
    book = CodeBook.default(2)
    got = matvec_t(w, g, book, F8, acc_width=12, lanes=2)
    assert got.tolist() == [ref_dot(g, w[:, j], book, F8, 12, 2) for j in range(7)]


def test_backward_primitives():
    rng = np.random.default_rng(9)
    book = CodeBook.default(2)
    g = rng.integers(0, 256, 6)
    fp = rng.integers(0, 4, 6)
    assert (ew_mul(g, fp, book, F8) == mul_cd(g, fp, book, F8)).all()
    x_codes = rng.integers(0, 4, 5)
    dw = weight_grad(g, x_codes, book, F8, discrete="x")
    assert dw.shape == (6, 5)
    assert dw[2, 3] == ref_shift(int(g[2]), int(x_codes[3]), book, F8)
    x = rng.integers(0, 256, 5)
    g_codes = rng.integers(0, 4, 6)
    dwg = weight_grad(g_codes, x, book, F8, discrete="g")
    assert dwg.shape == (6, 5)
    assert dwg[4, 1] == ref_shift(int(x[1]), int(g_codes[4]), book, F8)
    with pytest.raises(ValueError, match="discrete must be"):
        weight_grad(g, x, book, F8, discrete="w")


def test_update_weights_rule():
    fmt = SMFormat(8, 4)
    w = fmt.from_int([100, -20, 0, 127])
    dw = fmt.from_int([16, -16, 5, -127])
    v0 = fmt.from_int([32, 32, -7, -127])
    w1, v1 = update_weights(w, dw, v0, fmt, lr_shift=2, mom_shift=1)
    # v = dw + trunc(v0 / 2); w = w - trunc(v / 4), saturating.
    assert fmt.to_int(v1).tolist() == [32, 0, 2, -127]
    assert fmt.to_int(w1).tolist() == [92, -20, 0, 127]
    w2, v2 = update_weights(w, dw, v0, fmt, lr_shift=0)
    assert (v2 == fmt.from_int(fmt.to_int(dw))).all()
    assert fmt.to_int(w2).tolist() == [84, -4, -5, 127]
    with pytest.raises(ValueError, match="Learning-rate shift"):
        update_weights(w, dw, v0, fmt, lr_shift=-1)
