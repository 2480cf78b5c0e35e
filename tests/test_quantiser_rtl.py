"""Quantiser gateware (lowbit.hw.quantiser) against the golden model (lowbit.sim.quantiser), bit
for bit."""

import numpy as np
import pytest
from amaranth.hdl import Fragment
from amaranth.sim import Simulator
from streams import cached, run_stream

from lowbit.hw.common import Rounding
from lowbit.hw.quantiser import Quantiser, QuantTarget
from lowbit.sim import quantiser as mq
from lowbit.sim.discrete import CodeBook
from lowbit.sim.prng import Xoroshiro128aox

ROUND = {"nearest": Rounding.NEAREST_EVEN, "zero": Rounding.TOWARD_ZERO,
         "stochastic": Rounding.STOCHASTIC}
ALL_F16 = np.arange(1 << 16)
# Default-run subset: every 32nd code plus the edges (zeros, subnormal/normal boundary,
# largest finite, ±Inf, NaNs), 2,080 codes. The full 65,536 run behind @pytest.mark.slow.
_EDGES = [0x0000, 0x0001, 0x0002, 0x0003, 0x03FF, 0x0400, 0x0401, 0x3BFF, 0x3C00, 0x3C01,
          0x7BFE, 0x7BFF, 0x7C00, 0x7C01, 0x7E00, 0x7FFF]
SOME_F16 = np.concatenate([np.arange(7, 1 << 16, 32), _EDGES, np.array(_EDGES) | 0x8000])


def prng_rand(n, rand_bits, seed=99):
    """The top ``rand_bits`` of xoroshiro128aox words, as the accelerator top wires them."""
    words = Xoroshiro128aox(seed=seed, lanes=1).take(n).reshape(-1)
    return (words >> np.uint64(64 - rand_bits)).astype(np.int64)


TARGET = {"bfp": QuantTarget.BFP, "int8": QuantTarget.INT8, "discrete": QuantTarget.DISCRETE}
#: ``rule`` port codes (``lowbit.sim.bfp.RULES`` order); "ceil_lop" needs ``ceil_lop=True``.
RULE = {"floor": 0, "ceil": 1, "ceil_lop": 2}


def run_rtl(dut, elems, *, target="bfp", rounding="nearest", width=8, rule="floor", shift=0,
            mult=1, zero=0, rand=None, book=None, valid_prob=1.0, ready_prob=1.0, seed=0,
            rule_code=None, settle=3):
    """Stream the flat ``elems`` through ``dut``; return (flat outputs, exponent per beat).

    ``rule_code`` overrides the ``rule`` port's value (the model still follows ``rule``);
    ``settle`` is the cycles between setting ``book`` and the stream's start."""
    L = dut.lanes
    elems = np.asarray(elems, dtype=np.int64)
    assert elems.size % L == 0
    beats = [[int(v) for v in elems[i:i + L]] for i in range(0, elems.size, L)]
    inputs = {"i": beats}
    if rounding == "stochastic":
        inputs["i_rand"] = [[int(v) for v in rand[i:i + L]] for i in range(0, elems.size, L)]

    async def setup(ctx):
        ctx.set(dut.target, TARGET[target])
        ctx.set(dut.rounding, ROUND[rounding])
        ctx.set(dut.mant_width, width)
        ctx.set(dut.rule, RULE[rule] if rule_code is None else rule_code)
        ctx.set(dut.shift, shift)
        ctx.set(dut.zero, zero)
        if dut.mult_bits:
            ctx.set(dut.mult, mult)
        if book is not None:
            # The book port may be wider than the book: unused entries get junk, which the
            # quantiser must ignore.
            words = book.words() + [0x1F] * ((1 << dut.code_bits) - len(book.entries))
            ctx.set(dut.book, [{"shift": w & 7, "direction": (w >> 3) & 1, "sign": w >> 4}
                               for w in words])
            ctx.set(dut.code_width, book.n)
            if settle:
                await ctx.tick().repeat(settle)

    # The harness gives i and i_rand independent random valid gaps.
    out = run_stream(dut, inputs, {"o": len(beats)}, setup=setup, valid_prob=valid_prob,
                     ready_prob=ready_prob, seed=seed)["o"]
    q = np.array([o["q"] for o in out], dtype=np.int64).reshape(-1)
    e = np.array([o["e"] for o in out], dtype=np.int64)
    return q, e


def model(elems, dut, *, target="bfp", rounding="nearest", width=8, rule="floor", shift=0,
          mult=1, zero=0, rand=None, book=None):
    """The golden model for the same stream: (flat outputs, exponent per beat)."""
    if dut.fmt == "f16":
        x = mq.decode_f16(elems)
    else:
        x = mq.decode_fixed(np.asarray(elems), dut.frac_bits, width=dut.width)
    kw = {} if rounding != "stochastic" else {"rand": rand, "rand_bits": dut.rand_bits}
    if target == "discrete":
        mode = "stochastic" if rounding == "stochastic" else "nearest"
        q = mq.quantise_discrete(x, book, mode=mode, **kw)
        return q.astype(np.int64), np.zeros(x.size // dut.lanes, dtype=np.int64)
    if target == "int8":
        q = mq.quantise_int8(x, shift=shift, mult=mult, zero=zero, rounding=rounding, **kw)
        return q, np.zeros(x.size // dut.lanes, dtype=np.int64)
    m, e = mq.quantise_bfp(x, block=dut.block, width=width, exp_bits=dut.exp_bits, rule=rule,
                           rounding=rounding, **kw)
    return m, np.repeat(e, dut.block // dut.lanes)


def check(dut, elems, **kw):
    rand = kw.get("rand")
    if kw.get("rounding") == "stochastic" and rand is None:
        kw["rand"] = rand = prng_rand(len(elems), dut.rand_bits)
    sim_kw = {k: kw.pop(k) for k in ("valid_prob", "ready_prob", "seed", "rule_code", "settle")
              if k in kw}
    got_q, got_e = run_rtl(dut, elems, **kw, **sim_kw)
    want_q, want_e = model(elems, dut, **kw)
    bad = np.flatnonzero(got_q != want_q)
    assert bad.size == 0, (f"{bad.size} mismatches, first at {bad[0]}: element "
                           f"{int(np.asarray(elems)[bad[0]]):#x} gave {got_q[bad[0]]}, "
                           f"model {want_q[bad[0]]}")
    assert np.array_equal(got_e, want_e)


# ---- parameter validation ------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,exc,match", [
    ({"fmt": 16}, TypeError, "Input format"),
    ({"fmt": "f32"}, ValueError, "Input format"),
    ({"fmt": "fixed", "width": 49}, ValueError, "Fixed-point width"),
    ({"fmt": "fixed", "width": 32.0}, TypeError, "Fixed-point width"),
    ({"frac_bits": 33}, ValueError, "Fraction bit count"),
    ({"lanes": 0}, ValueError, "Lane count"),
    ({"lanes": True}, TypeError, "Lane count"),
    ({"block": 257}, ValueError, "Block size"),
    ({"block": 15}, ValueError, "multiple of the lane count"),
    ({"w_max": 1}, ValueError, "Mantissa width"),
    ({"w_max": 17}, ValueError, "Mantissa width"),
    ({"exp_bits": 2}, ValueError, "Exponent width"),
    ({"exp_bits": 5}, ValueError, "too small for f16"),
    ({"w_max": 16, "exp_bits": 6}, ValueError, r"too small for f16 input with w_max=16: "
                                               r"exponents reach -38\.\.16"),
    ({"fmt": "fixed", "width": 16, "frac_bits": 2, "w_max": 16, "exp_bits": 5}, ValueError,
     "too small"),
    ({"fmt": "fixed", "width": 40, "frac_bits": 0, "exp_bits": 6}, ValueError, "too small"),
    ({"rand_bits": 0}, ValueError, "Random bit count"),
    ({"rand_bits": 8.0}, TypeError, "Random bit count"),
    ({"mult_bits": 17}, ValueError, "Multiplier width"),
    ({"fmt": "fixed", "width": 48, "mult_bits": 6}, ValueError, "at most 53"),
    ({"code_bits": 4}, ValueError, "Code width"),
    ({"code_bits": -1}, ValueError, "Code width"),
    ({"code_bits": 2.0}, TypeError, "Code width"),
    ({"code_bits": False}, TypeError, "Code width"),
    ({"ceil_lop": 1}, TypeError, "ceil_lop must be a bool, not 1"),
    ({"compare_first": "yes"}, TypeError, "compare_first must be a bool, not 'yes'"),
    ({"gap_register": 1}, TypeError, "gap_register must be a bool, not 1"),
])
def test_validation(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        Quantiser(**kwargs)


def test_properties_and_signature():
    dut = Quantiser(fmt="fixed", width=24, frac_bits=10, lanes=4, block=32, w_max=6,
                    exp_bits=7, rand_bits=5, mult_bits=0)
    assert (dut.fmt, dut.width, dut.frac_bits, dut.lanes, dut.block, dut.w_max, dut.exp_bits,
            dut.rand_bits, dut.mult_bits, dut.out_bits) == ("fixed", 24, 10, 4, 32, 6, 7, 5, 0,
                                                            8)
    assert not hasattr(dut, "mult")
    assert dut.code_bits == 3 and dut.book.shape().length == 8 and dut.code_width.init == 3
    nodisc = Quantiser(code_bits=0)
    assert nodisc.code_bits == 0 and not hasattr(nodisc, "book")
    Fragment.get(nodisc, None)
    wide = Quantiser(w_max=12)
    assert wide.out_bits == 12
    for block in (dut, wide):
        Fragment.get(block, None)       # elaborates (and marks the components as used)
    with pytest.raises(AttributeError):
        dut.lanes = 2


# ---- f16 codes through each element-wise (int8) path ---------------------------------------

INT8_CASES = [
    ("nearest", -4, 1, 0),          # power-of-two scale 2^-4
    ("zero", 9, 3001, -7),          # affine: scale ≈ 2^9 / 3001, zero point -7
    ("stochastic", 3, 1, 12),
    ("stochastic", 20, 4095, -128),
]


@pytest.mark.parametrize("rounding,shift,mult,zero", [
    # The quick suite: stochastic rounding with the affine scale at its extremes; the other
    # cases with -m slow (every case also runs on every code there).
    case if case == ("stochastic", 20, 4095, -128) else pytest.param(*case, marks=pytest.mark.slow)
    for case in INT8_CASES])
def test_int8_f16_codes(rounding, shift, mult, zero):
    check(cached(Quantiser, lanes=8, mult_bits=12), SOME_F16, target="int8", rounding=rounding,
          shift=shift, mult=mult, zero=zero)


# The every-code runs take minutes each: CI's slow run ("slow and not heavy") takes one case
# of each, the others are also marked heavy.
@pytest.mark.slow
@pytest.mark.rotate  # one heavy case a day runs in CI's slow run (tests/conftest.py)
@pytest.mark.parametrize("rounding,shift,mult,zero", [
    case if case == ("zero", 9, 3001, -7) else pytest.param(*case, marks=pytest.mark.heavy)
    for case in INT8_CASES])
def test_int8_every_f16_code(rounding, shift, mult, zero):
    check(cached(Quantiser, lanes=8, mult_bits=12), ALL_F16, target="int8", rounding=rounding,
          shift=shift, mult=mult, zero=zero)


# ---- f16 codes through BFP blocks ----------------------------------------------------------

BFP_CASES = [
    ("sorted", "nearest", 8, "floor"),
    ("shuffled", "zero", 4, "ceil"),
    ("shuffled", "stochastic", 3, "floor"),
]


def _order(codes, order):
    return codes if order == "sorted" else np.random.default_rng(5).permutation(codes)


@pytest.mark.parametrize("order,rounding,width,rule", [
    # The quick suite: the sorted blocks (zero, subnormal-only and NaN/Inf blocks); the shuffled
    # ones (other roundings, the ceil rule) with -m slow.
    case if case == BFP_CASES[0] else pytest.param(*case, marks=pytest.mark.slow)
    for case in BFP_CASES])
def test_bfp_f16_codes(order, rounding, width, rule):
    """Sorted blocks include all-zero/subnormal-only blocks and NaN/Inf blocks; shuffled ones
    mix magnitudes."""
    codes = _order(np.sort(SOME_F16), order)
    check(cached(Quantiser, lanes=8, block=16, mult_bits=0), codes, rounding=rounding, width=width,
          rule=rule)


@pytest.mark.slow
@pytest.mark.rotate  # one heavy case a day runs in CI's slow run (tests/conftest.py)
@pytest.mark.parametrize("order,rounding,width,rule", [
    case if case == BFP_CASES[0] else pytest.param(*case, marks=pytest.mark.heavy)
    for case in BFP_CASES])
def test_bfp_every_f16_code(order, rounding, width, rule):
    check(cached(Quantiser, lanes=8, block=16, mult_bits=0), _order(ALL_F16, order),
          rounding=rounding, width=width, rule=rule)


@pytest.mark.slow
@pytest.mark.rotate  # one heavy case a day runs in CI's slow run (tests/conftest.py)
@pytest.mark.parametrize("rounding", [pytest.param("nearest", marks=pytest.mark.heavy), "zero",
                                      pytest.param("stochastic", marks=pytest.mark.heavy)])
@pytest.mark.parametrize("rule", ["floor", pytest.param("ceil", marks=pytest.mark.heavy)])
@pytest.mark.parametrize("width", [pytest.param(2, marks=pytest.mark.heavy), 7])
def test_bfp_every_f16_code_all_modes(rounding, rule, width):
    codes = np.random.default_rng(width).permutation(ALL_F16)
    check(cached(Quantiser, lanes=8, block=16, mult_bits=0), codes, rounding=rounding, width=width,
          rule=rule)


@pytest.mark.parametrize("width", [*(pytest.param(w, marks=pytest.mark.slow) for w in (2, 3, 5)),
                                   8])
def test_bfp_ceil_boundaries(width):
    """Blocks whose maximum sits exactly on, just below and just above (2^(W-1)-1)·2^e for
    every W, including subnormal maxima, in both rules, at run-time width ``width`` (8 in the
    quick suite, 2, 3 and 5 with -m slow)."""
    dut = cached(Quantiser, lanes=2, block=4, mult_bits=0)
    codes = []
    for w in range(2, 9):
        top = (1 << (w - 1)) - 1
        for sig in (top << (11 - w + 1), (top << (11 - w + 1)) + 1, (top + 1) << (11 - w + 1)):
            for exp in (0, 1, 15, 30):
                if exp == 0:
                    code = (sig >> 2) & 0x3FF
                else:
                    code = (exp << 10) | (sig & 0x3FF)
                codes += [code, 0x8000 | (code >> 1), 1, 0]
    codes = np.array(codes)
    for rule in ("floor", "ceil"):
        check(dut, codes, rounding="nearest", width=width, rule=rule)


# ---- the "ceil_lop" rule (seed 002 claim 8 as written) --------------------------------------

def test_ceil_lop_port_width_and_default_unchanged():
    """The rule port is 2 bits only with ``ceil_lop``; without it the quantiser is the one the
    accelerator top builds (1-bit ``QUANT_RULE``)."""
    assert Quantiser().rule.shape().width == 1 and not Quantiser().ceil_lop
    dut = Quantiser(ceil_lop=True)
    assert dut.rule.shape().width == 2 and dut.ceil_lop
    Fragment.get(dut, None)


@pytest.mark.parametrize("width", [
    # The widest in the quick suite, the narrowest in CI's slow run, the others only in -m slow.
    pytest.param(2, marks=pytest.mark.slow),
    *(pytest.param(w, marks=[pytest.mark.slow, pytest.mark.heavy]) for w in (3, 5)), 8])
def test_ceil_lop_every_block_maximum(width):
    """Exhaustive over the rule's input: 10-bit fixed point, one block per block maximum
    magnitude 0..512 (both signs, with smaller elements beside it), each of the three rules
    through one ``ceil_lop=True`` quantiser (nearest-even), bit for bit with the model."""
    dut = cached(Quantiser, fmt="fixed", width=10, frac_bits=3, lanes=4, block=4, exp_bits=6,
                 mult_bits=0, code_bits=0, ceil_lop=True)
    a = np.arange(513)
    sign = np.where(a % 2, -1, 1)
    blocks = np.stack([np.minimum(a, 511) * sign, -(a * 5 // 7), a // 3, -(a // 2)], axis=1)
    blocks[512, 0] = -512                  # the largest magnitude only exists negative
    vals = blocks.reshape(-1)
    for rule in ("ceil_lop", "floor", "ceil"):
        check(dut, vals, rounding="nearest", width=width, rule=rule)


@pytest.mark.parametrize("order,rounding,width", [
    ("sorted", "nearest", 8),                    # with code 3 as well; the others -m slow
    pytest.param("shuffled", "stochastic", 5, marks=pytest.mark.slow),
    pytest.param("shuffled", "zero", 16, marks=pytest.mark.slow)])
def test_ceil_lop_f16_codes(order, rounding, width):
    """The f16 subset (zero, subnormal-only and NaN/Inf blocks when sorted), W up to 16 (the
    smallest exponent width that covers f16 at w_max = 16 is 7); code 3 acts as 2."""
    codes = _order(np.sort(SOME_F16), order)
    dut = cached(Quantiser, lanes=8, block=16, w_max=16, exp_bits=7, mult_bits=0, code_bits=0,
                 ceil_lop=True)
    check(dut, codes, rounding=rounding, width=width, rule="ceil_lop")
    if order == "sorted":
        check(dut, codes, rounding=rounding, width=width, rule="ceil_lop", rule_code=3)


@pytest.mark.parametrize("width", [*(pytest.param(w, marks=pytest.mark.slow) for w in (2, 8)),
                                   16])
def test_ceil_lop_power_of_two_boundaries(width):
    """f16 block maxima on every power of two, one ulp above it (only the lowest significand
    bit set beside the leading one) and one ulp below the next, for every exponent field,
    and subnormal maxima, both signs: the rule adds one exactly when the maximum is not a
    power of two."""
    dut = cached(Quantiser, lanes=4, block=4, w_max=16, exp_bits=7, mult_bits=0, code_bits=0,
                 ceil_lop=True)
    maxima = [(ex << 10) | frac for ex in range(1, 31) for frac in (0, 1, 0x3FF)]
    maxima += [1, 2, 3, 0x200, 0x201, 0x3FF]
    codes = [[c, 0x8000 | (c >> 1), c >> 3, 0] if k % 2 else [0x8000 | c, c >> 2, 1, 0x8001]
             for k, c in enumerate(maxima)]
    codes = np.array(codes).reshape(-1)
    for rule in ("ceil_lop", "floor", "ceil"):
        check(dut, codes, rounding="nearest", width=width, rule=rule)


def test_ceil_lop_seed_255():
    """Seed 002's 255 at W = 16: -6 / 0x3FC0 with ceil_lop, -7 / 0x7F80 with floor and ceil
    (16-bit fixed point, one fraction bit, the claim-29 5-bit exponent)."""
    dut = cached(Quantiser, fmt="fixed", width=16, frac_bits=1, lanes=2, block=2, w_max=16,
                 exp_bits=5, mult_bits=0, code_bits=0, ceil_lop=True)
    vals = np.array([255 << 1, 0])
    for rule, want in (("ceil_lop", (0x3FC0, -6)), ("floor", (0x7F80, -7)),
                       ("ceil", (0x7F80, -7))):
        q, e = run_rtl(dut, vals, width=16, rule=rule, rounding="zero")
        assert (int(q[0]), int(e[0])) == want


# ---- seed 002 claim 29: 16-bit mantissas, 5-bit exponents ------------------------------------

@pytest.mark.parametrize("rounding", [pytest.param("nearest", marks=pytest.mark.slow),
                                      pytest.param("zero", marks=pytest.mark.slow),
                                      "stochastic"])
def test_claim29_w16_e5_fixed_point(rounding):
    """w_max = 16 with the 5-bit exponent: the widest input E = 5 covers is 16-bit fixed point
    with one fraction bit (exponents -15..15). Values over every bit position, ±full scale,
    the smallest magnitudes (a block of ±1 needs a left shift of 14, beyond the shifter's
    former fixed 8-bit headroom), zero blocks; runtime W = 16, 9 and 2, all three rules;
    exponents from -15 (the smallest finite one) to 14."""
    dut = cached(Quantiser, fmt="fixed", width=16, frac_bits=1, lanes=4, block=8, w_max=16,
                 exp_bits=5, rand_bits=6, mult_bits=0, code_bits=0, ceil_lop=True)
    rng = np.random.default_rng(290)
    mags = rng.integers(0, 16, 256)
    vals = (rng.integers(0, 1 << 15, 256) >> (15 - mags)) * rng.choice([-1, 1], 256)
    edges = [-(1 << 15), (1 << 15) - 1, 0, 1, -1, 3, -2, 0,       # full scale and tiny values
             1, -1, 0, 0, 1, 0, 0, 0,                              # a block of ±1: e = -15
             0, 0, 0, 0, 0, 0, 0, 0,                               # an all-zero block
             -(1 << 15), -(1 << 15), (1 << 15) - 1, 0, 0, 0, 0, 0]  # W = 2: e = 14
    vals = np.concatenate([vals, edges]).astype(np.int64)
    for width, rule in ((16, "floor"), (16, "ceil"), (9, "ceil_lop"), (2, "floor")):
        q, e = run_rtl(dut, vals, rounding=rounding, width=width, rule=rule,
                       rand=prng_rand(len(vals), 6), ready_prob=0.7, seed=width)
        want_q, want_e = model(vals, dut, rounding=rounding, width=width, rule=rule,
                               rand=prng_rand(len(vals), 6))
        assert np.array_equal(q, want_q) and np.array_equal(e, want_e)
        if width == 16:
            assert e.min() == -15
        if width == 2:
            assert e.max() == 14            # -2^15 · 2^-1 = 2^14, the largest magnitude


@pytest.mark.parametrize("rounding,rule", [
    pytest.param("nearest", "floor", marks=pytest.mark.slow), ("stochastic", "ceil")])
def test_w16_f16_codes(rounding, rule):
    """f16 at w_max = 16 needs E >= 7 (exponents -38..16; the quantiser has no exponent
    clamp): the f16 subset, sorted (zero, subnormal and NaN/Inf blocks). The 14-bit left
    shifts of blocks of tiny maxima are in ``test_ceil_lop_power_of_two_boundaries`` and
    ``test_claim29_w16_e5_fixed_point``."""
    dut = cached(Quantiser, lanes=8, block=16, w_max=16, exp_bits=7, mult_bits=0, code_bits=0)
    check(dut, np.sort(SOME_F16), rounding=rounding, width=16, rule=rule)


@pytest.mark.parametrize("target,rounding,width,rule", [
    ("bfp", "stochastic", 12, "ceil"),
    pytest.param("bfp", "nearest", 11, "floor", marks=pytest.mark.slow),
    pytest.param("int8", "zero", 8, "floor", marks=pytest.mark.slow),
])
def test_other_generics(target, rounding, width, rule):
    """One lane, MXINT8-sized 32-element blocks, w_max 12 (12-bit output lanes), the smallest
    exponent width for f16 at that w_max (7), 3 random bits, power-of-two scales only."""
    dut = cached(Quantiser, lanes=1, block=32, w_max=12, exp_bits=7, rand_bits=3, mult_bits=0)
    codes = np.random.default_rng(21).integers(0, 1 << 16, 384)
    codes[:32] = np.arange(32)                # a subnormal-only block
    check(dut, codes, target=target, rounding=rounding, width=width, rule=rule, shift=-5,
          zero=-3, ready_prob=0.8, seed=2)


# ---- fixed-point input (MAC accumulators) --------------------------------------------------

@pytest.mark.parametrize("target,rounding,width,rule", [
    # The quick suite: stochastic rounding with the ceil rule; the others with -m slow.
    pytest.param("bfp", "nearest", 8, "floor", marks=pytest.mark.slow),
    ("bfp", "stochastic", 4, "ceil"),
    pytest.param("bfp", "zero", 2, "floor", marks=pytest.mark.slow),
    pytest.param("int8", "nearest", 8, "floor", marks=pytest.mark.slow),
    pytest.param("int8", "stochastic", 8, "floor", marks=pytest.mark.slow),
])
def test_fixed_point_input(target, rounding, width, rule):
    dut = cached(Quantiser, fmt="fixed", width=24, frac_bits=12, lanes=4, block=16, exp_bits=6,
                 rand_bits=6, mult_bits=8)
    rng = np.random.default_rng(11)
    lim = 1 << 23
    mags = rng.integers(0, 24, 768)          # magnitudes spread over every bit position
    vals = (rng.integers(0, lim, 768) >> (23 - mags)) * rng.choice([-1, 1], 768)
    edges = [-lim, lim - 1, 0, 1, -1, 4095, 4096, -4096, 0, 0, 0, 0, 0, 0, 0, 0]
    vals = np.concatenate([vals, edges]).astype(np.int64)
    check(dut, vals, target=target, rounding=rounding, width=width, rule=rule, shift=-3,
          mult=200, zero=3)


# ---- handshake: valid gaps, back-pressure, random-bit stream --------------------------------

@pytest.mark.parametrize("target", ["bfp", pytest.param("int8", marks=pytest.mark.slow)])
def test_gaps_and_backpressure(target):
    dut = cached(Quantiser, lanes=2, block=8)
    codes = np.random.default_rng(2).integers(0, 1 << 16, 512)
    check(dut, codes, target=target, rounding="stochastic", width=5, shift=-2, mult=1234,
          valid_prob=0.6, ready_prob=0.5, seed=4)


def test_block_of_one_beat():
    """One-beat blocks under heavy back-pressure: a bank is refilled (and its maximum
    overwritten) while the previous block still waits in the pipeline."""
    dut = cached(Quantiser, lanes=4, block=4, mult_bits=0)
    codes = np.random.default_rng(8).integers(0, 1 << 16, 256)
    check(dut, codes, rounding="nearest", width=6, ready_prob=0.25, seed=1)


@pytest.mark.parametrize("code_bits,latency", [(3, 12), (0, 11)])
def test_throughput_and_latency(code_bits, latency):
    """One beat per cycle once a block is in; first output `latency` cycles after the block's
    last input beat (one more with the discrete path); i_rand is only read in stochastic
    mode."""
    dut = Quantiser(lanes=2, block=8, mult_bits=0, code_bits=code_bits)
    assert dut.latency == latency
    n_beats = 40
    beats = [[0x3C00 + i, 0xBC00 + i] for i in range(n_beats)]
    log = {}

    async def bench(ctx):
        ctx.set(dut.mant_width, 6)
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.i_rand.valid, 0)
        cycle, sent, got = 0, 0, 0
        while got < n_beats:
            ctx.set(dut.i.valid, sent < n_beats)
            if sent < n_beats:
                ctx.set(dut.i.payload, beats[sent])
            _, _, i_ready, o_valid, rand_ready = await ctx.tick().sample(
                dut.i.ready, dut.o.valid, dut.i_rand.ready)
            assert not rand_ready
            if sent < n_beats and i_ready:
                if sent == 3:
                    log["last_in"] = cycle
                sent += 1
            if o_valid:
                log.setdefault("first_out", cycle)
                got += 1
            cycle += 1
        log["cycles"] = cycle

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert log["first_out"] - log["last_in"] == dut.latency
    assert log["cycles"] <= n_beats + dut.latency + 4 + 1


# ---- discrete codes --------------------------------------------------------------------------

def random_book(n, seed):
    """A random book of width n: random signs, directions and shifts (duplicates likely)."""
    rng = np.random.default_rng(seed)
    return CodeBook(n, [(int(rng.integers(2)), int(rng.integers(2)), int(rng.integers(8)))
                        for _ in range(1 << n)])


def _near_book_values(book, rand_bits):
    """f16 codes on, next to and midway between the code values, beyond them, and specials."""
    vals = np.unique(book.values())
    pts = list(vals) + list((vals[1:] + vals[:-1]) / 2) + [0.0, 300.0, -300.0, 1e4, -1e4]
    pts += list(vals[:-1] + (vals[1:] - vals[:-1]) * (np.arange(1, len(vals)) / 2 ** rand_bits))
    codes = np.array(pts, dtype=np.float16).view(np.uint16).astype(np.int64)
    codes = np.concatenate([codes, codes + 1, codes - 1]) & 0xFFFF
    return np.concatenate([codes, [0x7C00, 0xFC00, 0x7E00, 0xFE01, 0x8000, 0x0001, 0x8001]])


DISCRETE_CASES = [
    (1, "default", "nearest"), (1, "default", "stochastic"),
    (2, "default", "nearest"), (2, "default", "stochastic"),
    (3, "default", "nearest"), (3, "default", "stochastic"),
    (1, 1, "stochastic"), (2, 2, "nearest"), (3, 3, "stochastic"), (3, 4, "nearest"),
    (2, 5, "zero"),         # any non-stochastic mode converts to the nearest code
]


def _book(n, which):
    return CodeBook.default(n) if which == "default" else random_book(n, which)


#: The quick suite's case of DISCRETE_CASES: the widest default book, stochastic; every other
#: case (each book width, random books, nearest codes, the "zero" mode) runs with -m slow.
_DISCRETE_QUICK = (3, "default", "stochastic")


@pytest.mark.parametrize("n,which,rounding", [
    case if case == _DISCRETE_QUICK else pytest.param(*case, marks=pytest.mark.slow)
    for case in DISCRETE_CASES])
def test_discrete_f16_codes(n, which, rounding):
    """The strided f16 subset plus codes on, next to and between the book's values."""
    book = _book(n, which)
    dut = cached(Quantiser, lanes=8, mult_bits=0, rand_bits=5)
    codes = np.concatenate([SOME_F16, _near_book_values(book, dut.rand_bits)])
    codes = np.concatenate([codes, np.zeros(-codes.size % 8, dtype=np.int64)])
    check(dut, codes, target="discrete", rounding=rounding, book=book)


@pytest.mark.slow
@pytest.mark.rotate  # one heavy case a day runs in CI's slow run (tests/conftest.py)
@pytest.mark.parametrize("n,which,rounding", [
    (2, "default", "nearest"),
    *(pytest.param(*case, marks=pytest.mark.heavy) for case in [
        (2, "default", "stochastic"), (3, 6, "stochastic"), (1, "default", "nearest")])])
def test_discrete_every_f16_code(n, which, rounding):
    check(cached(Quantiser, lanes=8, mult_bits=0), ALL_F16, target="discrete", rounding=rounding,
          book=_book(n, which))


@pytest.mark.parametrize("n,which,rounding", [
    (3, "default", "stochastic"), pytest.param(2, 5, "zero", marks=pytest.mark.slow),
    pytest.param(3, 4, "nearest", marks=pytest.mark.slow),
    pytest.param(1, 1, "stochastic", marks=pytest.mark.slow)])
def test_discrete_compare_first(n, which, rounding):
    """``compare_first`` and ``gap_register`` (the ULX3S's sequencer): the clamp applied as
    the value enters the discrete path's copy, each lane's copies of the code values and the
    gap from the lower neighbour's configuration register give the same codes, specials and
    values beyond the book included."""
    book = _book(n, which)
    dut = cached(Quantiser, lanes=8, mult_bits=0, rand_bits=5, compare_first=True,
                 gap_register=True)
    assert dut.compare_first and not cached(Quantiser).compare_first
    assert dut.gap_register and not cached(Quantiser).gap_register
    codes = np.concatenate([SOME_F16, _near_book_values(book, dut.rand_bits)])
    codes = np.concatenate([codes, np.zeros(-codes.size % 8, dtype=np.int64)])
    check(dut, codes, target="discrete", rounding=rounding, book=book)


@pytest.mark.parametrize("fast", [False, True])
def test_discrete_book_set_as_the_stream_starts(fast):
    """The book's configuration registers (with ``gap_register`` four stages of them) settle
    before the first beat reaches them: a book set in the cycle the first beat is offered
    quantises that beat, random books of duplicates and gaps of every size included."""
    dut = cached(Quantiser, lanes=4, mult_bits=0, code_bits=3, rand_bits=3,
                 compare_first=fast, gap_register=fast)
    for k, book in enumerate([CodeBook.default(3), random_book(3, 60), random_book(3, 61)]):
        # Points between neighbours, where the stochastic choice weighs the gap: the first
        # two beats, then values on and next to the book's.
        vals = np.unique(book.values())
        between = vals[:-1] + (vals[1:] - vals[:-1]) * (np.arange(1, len(vals)) % 7 + 1) / 8
        first = np.resize(np.array(between, dtype=np.float16).view(np.uint16), 8)
        codes = np.concatenate([first, _near_book_values(book, 3)]).astype(np.int64)
        codes = np.concatenate([codes, np.zeros(-codes.size % 4, dtype=np.int64)])
        check(dut, codes, target="discrete", rounding="stochastic", book=book, seed=k,
              settle=0)


@pytest.mark.parametrize("fast", [False, True])
def test_discrete_books_in_sequence(fast):
    """One quantiser, several books and widths loaded in turn (the configuration registers
    follow the book; narrower books leave junk in the unused entries); ``[True]`` with
    ``compare_first`` and ``gap_register``."""
    dut = cached(Quantiser, lanes=4, mult_bits=0, code_bits=3, rand_bits=3,
                 compare_first=fast, gap_register=fast)
    rng = np.random.default_rng(3)
    for k, n in enumerate((3, 1, 2)):
        book = random_book(n, 40 + k)
        codes = np.concatenate([_near_book_values(book, 3), rng.integers(0, 1 << 16, 64)])
        codes = np.concatenate([codes, np.zeros(-codes.size % 4, dtype=np.int64)])
        check(dut, codes, target="discrete", rounding="stochastic", book=book, seed=k)


@pytest.mark.parametrize("rounding", [
    # Nearest codes from fixed-point input with -m slow (by default from f16 input, above).
    pytest.param("nearest", marks=pytest.mark.slow), "stochastic"])
def test_discrete_fixed_point(rounding):
    """Fixed-point input with resolution finer than the stochastic threshold's, values
    spread over every magnitude, and the 2-bit code port."""
    dut = cached(Quantiser, fmt="fixed", width=24, frac_bits=14, lanes=4, exp_bits=7, rand_bits=4,
                 mult_bits=0, code_bits=2)
    rng = np.random.default_rng(12)
    lim = 1 << 23
    mags = rng.integers(0, 24, 1024)
    vals = (rng.integers(0, lim, 1024) >> (23 - mags)) * rng.choice([-1, 1], 1024)
    for book in (CodeBook.default(2), random_book(2, 9), random_book(1, 10)):
        near = np.round(_near_to_fixed(book, 14, dut.rand_bits)).astype(np.int64)
        data = np.concatenate([vals, near, [-lim, lim - 1, 0, 1, -1]]).astype(np.int64)
        data = np.concatenate([data, np.zeros(-data.size % 4, dtype=np.int64)])
        check(dut, data, target="discrete", rounding=rounding, book=book, ready_prob=0.7)


def _near_to_fixed(book, frac_bits, rand_bits):
    vals = np.unique(book.values())
    pts = np.concatenate([vals, (vals[1:] + vals[:-1]) / 2,
                          vals[:-1] + (vals[1:] - vals[:-1]) / 2 ** rand_bits])
    pts = np.ldexp(pts, frac_bits)
    return np.concatenate([pts, pts + 1, pts - 1])


def test_discrete_gaps_and_backpressure():
    dut = cached(Quantiser, lanes=2, block=8, code_bits=3)
    codes = np.random.default_rng(6).integers(0, 1 << 16, 400)
    codes[::3] = np.random.default_rng(7).integers(0x2000, 0x5000, 134)   # near the code values
    check(dut, codes, target="discrete", rounding="stochastic", book=CodeBook.default(3),
          valid_prob=0.6, ready_prob=0.5, seed=4)
