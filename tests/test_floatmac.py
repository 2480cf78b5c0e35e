"""IEEE float MAC baseline (issue #10): the golden model's rules, and the gateware bit for bit."""

import re

import numpy as np
import pytest
from amaranth.back import rtlil
from amaranth.sim import Simulator
from streams import cached, run_stream

from lowbit.hw.floatmac import FloatMAC
from lowbit.sim.floatmac import FORMATS, fadd, float_mac, flush_inputs, fmul, from_bits, to_bits

F16, F32 = FORMATS["f16"], FORMATS["f32"]


def edge_values(f):
    """Bit patterns of the format's corner cases (both signs)."""
    p, eb = f.precision, f.exp_bits
    one = f.bias << (p - 1)
    inf = ((1 << eb) - 1) << (p - 1)
    frac = (1 << (p - 1)) - 1
    pos = [0, 1, frac, 1 << (p - 1), (1 << (p - 1)) + 1, inf - 1, inf, inf | 1,
           inf | 1 << (p - 2), inf | frac, one, one + 1, one - 1, one - 2, one + frac,
           one - ((p + 1) << (p - 1)), one - (p << (p - 1)), one + (3 << (p - 1)),
           (2 << (p - 1)) | 5, inf - 1 - (1 << (p - 1))]
    return pos + [v | 1 << (f.bits - 1) for v in pos]


def random_operands(rng, f, shape, p_edge=0.2, p_bits=0.15):
    """Mostly Gaussian values with a wide exponent spread, some corner cases, some raw bits."""
    vals = rng.normal(size=shape) * np.exp2(rng.integers(-6, 7, size=shape))
    out = to_bits(vals, f).astype(np.int64)
    edges = np.array(edge_values(f))
    u = rng.random(shape)
    out = np.where(u < p_edge, rng.choice(edges, size=shape), out)
    raw = rng.integers(0, 1 << f.bits, size=shape)
    return np.where(u > 1 - p_bits, raw, out)


# --- golden model --------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["f16", "f32"])
def test_model_is_numpy_where_everything_is_normal(fmt):
    # Without subnormals on the way, the model is NumPy's own float16 / float32 MAC. With
    # magnitudes in [1/4, 4] every product is at least 2^-4 and a multiple of 2^-14, so every
    # partial sum is zero or normal.
    f = FORMATS[fmt]
    rng = np.random.default_rng(1)
    k, n = 64, 512

    def operands(shape):
        return (rng.uniform(0.25, 4, shape) * rng.choice([-1, 1], shape)).astype(f.dtype)

    w, x = operands((k, n)), operands(k)
    acc = np.zeros(n, f.dtype)
    for j in range(k):
        acc = acc + w[j] * x[j]
        assert ((acc == 0) | (np.abs(acc) >= f.min_normal)).all()
    np.testing.assert_array_equal(float_mac(w.view(f.uint), x.view(f.uint), fmt),
                                  acc.view(f.uint))


def test_model_product_exhaustive_f16():
    # Every f16 weight against a spread of x values: numpy's correctly rounded product wherever
    # the exact product is normal; flush to zero below the rounding threshold of 2^-14.
    w = np.arange(1 << 16, dtype=np.uint16)
    xs = to_bits([1.0, -1.5, np.pi, 2.0 ** -7, 1000.0, -65504.0, 2.0 ** -14, 0.999, 3e-3], F16)
    for x in xs:
        got = fmul(w, x, "f16")
        wv, xv = from_bits(flush_inputs(w, "f16"), "f16"), from_bits(x, "f16")
        with np.errstate(invalid="ignore", over="ignore"):
            exact = wv * xv
            ref = (wv.astype(np.float16) * np.float16(xv)).view(np.uint16)
        nan = np.isnan(exact)
        assert (got[nan] == 0x7E00).all()
        normal = ~nan & (np.abs(exact) >= 2.0 ** -14)
        np.testing.assert_array_equal(got[normal], ref[normal])
        small = ~nan & ~normal
        up = np.abs(exact[small]) >= 2.0 ** -14 * (1 - 2.0 ** -12)
        sign = np.signbit(exact[small]).astype(np.uint16) << 15
        np.testing.assert_array_equal(got[small], np.where(up, 0x0400 | sign, sign))


@pytest.mark.parametrize("fmt", ["f16", "f32"])
def test_model_sum_matches_numpy_on_normal_results(fmt):
    f = FORMATS[fmt]
    rng = np.random.default_rng(2)
    a = random_operands(rng, f, 200_000, p_edge=0.05, p_bits=0.3)
    # b: near a in exponent, often a neighbour of -a, to exercise alignment and cancellation.
    b = a ^ (1 << (f.bits - 1)) ^ rng.integers(0, 1 << f.precision, a.shape)
    b = np.where(rng.random(a.shape) < 0.5, b, random_operands(rng, f, a.shape))
    got = fadd(a, b, fmt)
    av = from_bits(flush_inputs(a, fmt), fmt).astype(f.dtype)
    bv = from_bits(flush_inputs(b, fmt), fmt).astype(f.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        ref = av + bv
    nan = np.isnan(ref)
    assert (got[nan] == f.nan).all()
    ok = ~nan & ((ref == 0) | (np.abs(ref) >= f.min_normal))
    assert ok.mean() > 0.9
    np.testing.assert_array_equal(got[ok], ref.view(f.uint)[ok])
    # Results below the smallest normal are exact in float64 here: they flush to signed zero.
    tiny = ~ok & ~nan
    assert tiny.any()
    np.testing.assert_array_equal(got[tiny], np.signbit(ref[tiny]).astype(f.uint) <<
                                  f.uint.type(f.bits - 1))


# (operation, a, b, expected) as bit patterns.
WORKED = {
    "f16": [
        (fmul, 0x3C01, 0x3C01, 0x3C02),   # (1+2^-10)^2 = 1 + 2^-9 + 2^-20 -> 1 + 2^-9
        (fmul, 0x0001, 0x3C00, 0x0000),   # subnormal input flushes
        (fmul, 0x8001, 0x3C00, 0x8000),   # ... to a zero of its sign
        (fmul, 0x0400, 0x3800, 0x0000),   # 2^-15 flushes
        (fmul, 0x2200, 0x1D55, 0x0400),   # 2^-14·(1 - 2^-12): the tie rounds up to 2^-14
        (fmul, 0x2200, 0x1D54, 0x0000),   # just below it flushes (IEEE: subnormal 0x03FF)
        (fmul, 0x3BFE, 0x0400, 0x0000),   # 2^-14 - 2^-24 is exact in 11 bits: flushes
        (fmul, 0x7BFF, 0x3C01, 0x7C00),   # overflow to Inf
        (fmul, 0x7C00, 0x0000, 0x7E00),   # Inf * 0 = NaN
        (fmul, 0x7C00, 0x0001, 0x7E00),   # Inf * flushed subnormal = NaN
        (fmul, 0x7C00, 0xBC00, 0xFC00),
        (fmul, 0xFE01, 0x3C00, 0x7E00),   # NaN payloads and signs are not propagated
        (fmul, 0x8000, 0x3C00, 0x8000),
        (fadd, 0x3C00, 0x1000, 0x3C00),   # 1 + 2^-11: tie to even
        (fadd, 0x3C01, 0x1000, 0x3C02),   # 1+2^-10 + 2^-11: tie to even (up)
        (fadd, 0x7BFF, 0x4C00, 0x7C00),   # 65504 + 16 = 65520: tie rounds to 2^16, overflow
        (fadd, 0x7BFF, 0x4BFF, 0x7BFF),
        (fadd, 0x3C01, 0xBC00, 0x1400),   # cancellation: 2^-10
        (fadd, 0x3C00, 0xBC00, 0x0000),   # exact zero is +0
        (fadd, 0x8000, 0x8000, 0x8000),
        (fadd, 0x0000, 0x8000, 0x0000),
        (fadd, 0x0401, 0x8400, 0x0000),   # 2^-24 flushes
        (fadd, 0x8401, 0x0400, 0x8000),   # ... with the sign of the exact result
        (fadd, 0x7C00, 0xFC00, 0x7E00),
        (fadd, 0x7C00, 0x7BFF, 0x7C00),
    ],
    "f32": [
        (fmul, 0x3F800001, 0x3F800001, 0x3F800002),
        (fmul, 0x00000001, 0x3F800000, 0x00000000),
        (fmul, 0x7F7FFFFF, 0x40000000, 0x7F800000),
        (fmul, 0x00800000, 0x3F000000, 0x00000000),
        (fadd, 0x3F800000, 0x33800000, 0x3F800000),
        (fadd, 0x3F800001, 0x33800000, 0x3F800002),
        (fadd, 0x3F800001, 0xBF800000, 0x34000000),
        (fadd, 0x7F800000, 0xFF800000, 0x7FC00000),
    ],
}


@pytest.mark.parametrize("fmt", ["f16", "f32"])
def test_model_worked_examples(fmt):
    for op, a, b, want in WORKED[fmt]:
        assert int(op(a, b, fmt)) == want, (op.__name__, hex(a), hex(b))


def test_model_mac_order_and_start():
    one, half_ulp = 0x3C00, 0x1000
    # Left to right with rounding at every step: 1 + 2^-11 + 2^-11 stays 1 (ties to even).
    assert float_mac([[one], [half_ulp], [half_ulp]], [one] * 3) == [0x3C00]
    assert float_mac([[half_ulp], [half_ulp], [one]], [one] * 3) == [0x3C01]
    # The accumulator starts at +0: a single -0 product gives +0.
    assert float_mac([[0x8000]], [0x3C00]) == [0x0000]


def test_model_arguments():
    with pytest.raises(TypeError, match="Format must be one of f16, f32, not 16"):
        float_mac([[0]], [0], 16)
    with pytest.raises(ValueError, match="Format must be one of f16, f32, not 'bf16'"):
        float_mac([[0]], [0], "bf16")
    with pytest.raises(ValueError, match=r"shape \(\.\.\., K, N\)"):
        float_mac([[0, 0]], [0, 0])
    with pytest.raises(ValueError, match="At least one beat"):
        float_mac(np.zeros((0, 2)), np.zeros(0))


# --- gateware ------------------------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "exc", "msg"), [
    ({"lanes": 0}, ValueError, "Lane count must be an integer between 1 and 256, not 0"),
    ({"lanes": 257}, ValueError, "Lane count must be an integer between 1 and 256, not 257"),
    ({"lanes": 4.0}, TypeError, "Lane count must be an integer between 1 and 256, not 4.0"),
    ({"lanes": True}, TypeError, "Lane count must be an integer between 1 and 256, not True"),
    ({"fmt": "f64"}, ValueError, "Format must be one of f16, f32, not 'f64'"),
    ({"fmt": 16}, TypeError, "Format must be one of f16, f32, not 16"),
    ({"mult": "dsp"}, ValueError, "Multiplier style must be one of lut, sb_mac16, mult18x18d"),
    ({"mult": None}, TypeError, "Multiplier style must be one of lut, sb_mac16, mult18x18d"),
    ({"max_len": 0}, ValueError, "Maximum product length must be an integer between 1 and 65536"),
    ({"max_len": 65537}, ValueError, "Maximum product length must be an integer between 1 and"),
    ({"max_len": "8"}, TypeError, "Maximum product length must be an integer between 1 and"),
    ({"sim_model": 1}, TypeError, "sim_model must be a bool, not 1"),
])
def test_parameter_validation(kwargs, exc, msg):
    with pytest.raises(exc, match=re.escape(msg)):
        FloatMAC(**kwargs)


def test_signature_and_properties():
    mac = FloatMAC(lanes=3, fmt="f32", mult="mult18x18d", max_len=100)
    assert (mac.lanes, mac.fmt, mac.mult, mac.max_len, mac.sim_model) == \
        (3, "f32", "mult18x18d", 100, True)
    assert (mac.bits, mac.precision) == (32, 24)
    assert len(mac.i_w.payload.as_value()) == 96
    assert len(mac.i_x.payload) == 32
    assert len(mac.o.payload.as_value()) == 96
    assert mac.cfg_len.shape().width == 7
    with pytest.raises(AttributeError):
        mac.lanes = 4


def run_rtl(mac, w, x, *, valid_prob=0.8, ready_prob=0.7, seed=0):
    """Feed ``P`` products (``w``: (P, K, N), ``x``: (P, K)); return the (P, N) outputs."""
    w, x = np.asarray(w), np.asarray(x)
    nprod, k = x.shape

    async def setup(ctx):
        ctx.set(mac.cfg_len, k)

    out = run_stream(mac, {"i_w": w.reshape(-1, w.shape[-1]).tolist(),
                           "i_x": x.reshape(-1).tolist()},
                     {"o": nprod}, setup=setup, valid_prob=valid_prob, ready_prob=ready_prob,
                     seed=seed)
    return np.array(out["o"], dtype=np.int64)


@pytest.mark.parametrize(("fmt", "k"), [pytest.param("f16", 1, marks=pytest.mark.slow),
                                        pytest.param("f16", 7, marks=pytest.mark.slow),
                                        ("f32", 5)])
def test_rtl_random_and_edges(fmt, k):
    f = FORMATS[fmt]
    rng = np.random.default_rng(k)
    nprod, n = 300 // k, 4
    w = random_operands(rng, f, (nprod, k, n))
    x = random_operands(rng, f, (nprod, k))
    got = run_rtl(cached(FloatMAC, lanes=n, fmt=fmt, max_len=8), w, x, seed=k)
    np.testing.assert_array_equal(got, float_mac(w, x, fmt))


@pytest.mark.parametrize("fmt", [pytest.param("f16", marks=pytest.mark.slow), "f32"])
def test_rtl_products_of_corner_cases(fmt):
    # One beat per product: every corner case times every corner case (and some randoms).
    f = FORMATS[fmt]
    edges = np.array(edge_values(f))
    n = 8
    pairs = np.array([(a, b) for a in edges for b in edges])
    w = pairs[:, 0].reshape(-1, n)                          # (P, N): lane i of product j
    x = np.resize(edges, len(w))
    w = np.concatenate([w, np.resize(pairs[:, 1], w.shape)])
    x = np.concatenate([x, np.resize(edges[::-1], len(x))])
    got = run_rtl(cached(FloatMAC, lanes=n, fmt=fmt), w[:, None, :], x[:, None], valid_prob=1,
                  ready_prob=1)
    np.testing.assert_array_equal(got, float_mac(w[:, None, :], x[:, None], fmt))


@pytest.mark.parametrize("fmt", [pytest.param("f16", marks=pytest.mark.slow), "f32"])
def test_rtl_adder_alignment_and_cancellation(fmt):
    # x = 1.0 and K = 2, so each lane adds two weights exactly as the adder sees them:
    # exponent differences 0 .. p + 5, near-cancellation, ties, overflow and underflow.
    f = FORMATS[fmt]
    rng = np.random.default_rng(5)
    p = f.precision
    n, nprod = 8, 40
    a = random_operands(rng, f, (nprod, n), p_edge=0.3, p_bits=0.2)
    a_exp = (a >> (p - 1)) & ((1 << f.exp_bits) - 1)
    d = rng.integers(0, p + 6, (nprod, n))
    b_exp = np.clip(a_exp - d, 1, (1 << f.exp_bits) - 2)
    b = (rng.integers(0, 2, (nprod, n)) << (f.bits - 1)) | (b_exp << (p - 1)) | \
        rng.integers(0, 1 << (p - 1), (nprod, n))
    # A third of the pairs: b = -a with the low fraction bits perturbed (cancellation).
    cancel = (a ^ (1 << (f.bits - 1))) ^ rng.integers(0, 8, (nprod, n))
    b = np.where(rng.random((nprod, n)) < 0.33, cancel, b)
    w = np.stack([a, b], axis=1)
    x = np.full((nprod, 2), f.bias << (p - 1))
    got = run_rtl(cached(FloatMAC, lanes=n, fmt=fmt), w, x, valid_prob=0.9, ready_prob=0.5,
                  seed=3)
    np.testing.assert_array_equal(got, float_mac(w, x, fmt))
    np.testing.assert_array_equal(got, fadd(a, b, fmt))


def test_rtl_length_change_between_runs_and_zero_length():
    f = F16
    rng = np.random.default_rng(7)
    mac = cached(FloatMAC, lanes=2, fmt="f16", max_len=3)
    for k in (3, 1, 2):
        w = random_operands(rng, f, (6, k, 2))
        x = random_operands(rng, f, (6, k))
        np.testing.assert_array_equal(run_rtl(mac, w, x, seed=k), float_mac(w, x, "f16"))
    w = random_operands(rng, f, (5, 1, 2))
    x = random_operands(rng, f, (5, 1))

    async def setup(ctx):
        ctx.set(mac.cfg_len, 0)       # acts as 1

    out = run_stream(mac, {"i_w": w[:, 0].tolist(), "i_x": x[:, 0].tolist()}, {"o": 5},
                     setup=setup)
    np.testing.assert_array_equal(out["o"], float_mac(w, x, "f16"))


def test_rtl_one_beat_per_cycle():
    # With valid and ready held high, P products of K beats take P·K cycles plus the latency.
    mac = FloatMAC(lanes=2, fmt="f16", max_len=8)
    k, nprod = 4, 6
    seen = []

    async def bench(ctx):
        ctx.set(mac.cfg_len, k)
        ctx.set(mac.i_w.payload, [0x3C00, 0x4000])
        ctx.set(mac.i_x.payload, 0x3C00)
        ctx.set(mac.i_w.valid, 1)
        ctx.set(mac.i_x.valid, 1)
        ctx.set(mac.o.ready, 1)
        taken = 0
        for cycle in range(nprod * k + 20):
            _, _, w_ready, o_valid, o_payload = await ctx.tick().sample(
                mac.i_w.ready, mac.o.valid, mac.o.payload)
            taken += w_ready
            if taken == nprod * k:
                ctx.set(mac.i_w.valid, 0)
                ctx.set(mac.i_x.valid, 0)
            if o_valid:
                seen.append((cycle, [int(v) for v in o_payload]))

    sim = Simulator(mac)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert [c for c, _ in seen] == [k * (j + 1) - 1 + FloatMAC.LATENCY for j in range(nprod)]
    assert all(v == [0x4400, 0x4800] for _, v in seen)        # 4·1 and 4·2


def test_hard_multiplier_netlists():
    il = rtlil.convert(FloatMAC(lanes=2, fmt="f16", mult="mult18x18d", sim_model=False))
    assert len(re.findall(r"cell \\MULT18X18D ", il)) == 2
    # f32 significands do not fit one block: a behavioural product for Yosys to split.
    il = rtlil.convert(FloatMAC(lanes=2, fmt="f32", mult="mult18x18d", sim_model=False))
    assert "MULT18X18D" not in il and "$mul" in il


@pytest.mark.slow
@pytest.mark.rotate  # one heavy case a day runs in CI's slow run (tests/conftest.py)
@pytest.mark.parametrize("fmt", [pytest.param("f16", marks=pytest.mark.heavy), "f32"])
def test_rtl_long_run_16_lanes(fmt):
    f = FORMATS[fmt]
    rng = np.random.default_rng(11)
    w = random_operands(rng, f, (60, 32, 16))
    x = random_operands(rng, f, (60, 32))
    got = run_rtl(cached(FloatMAC, lanes=16, fmt=fmt, max_len=32), w, x, seed=11)
    np.testing.assert_array_equal(got, float_mac(w, x, fmt))
