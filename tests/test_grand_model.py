"""Golden model of the grand unit (lowbit.sim.grand): exact rules and statistics on 10^6 samples."""

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from lowbit.sim.grand import (
    C144,
    C144_SHIFT,
    IH12_TOTAL,
    MODES,
    TRUNC_RULE,
    VARIANCE,
    WORDS_PER_RESULT,
    GrandModel,
    f16_to_f32_bits,
    f16_values,
    fallback_probability,
    field_sum,
    ih12_counts,
    ih12_density_ratio,
    ih12_pmf,
    ih12_tail_count,
    ih12_tail_ratio,
    normal_f16_bits,
    results_from_words,
    seed_f16_to_f32_bits,
)
from lowbit.sim.prng import Xoroshiro128aox

N_STAT = 10 ** 6


def word_from_fields(fields, top=0):
    w = top << 60
    for i, f in enumerate(fields):
        w |= f << (5 * i)
    return w


def word_with_sum(s, top=0):
    fields, rem = [], s
    for _ in range(12):
        fields.append(min(31, rem))
        rem -= fields[-1]
    assert rem == 0
    return word_from_fields(fields, top)


def words(*ws):
    return np.array(ws, dtype=np.uint64)


def value_of(f16_bits):
    return float(np.uint16(f16_bits).view(np.float16))


def rne_f16(value):
    """Independent round-to-nearest-even of a positive or negative Fraction to binary16."""
    if value == 0:
        return Fraction(0)
    sign = -1 if value < 0 else 1
    v = abs(value)
    e = v.numerator.bit_length() - v.denominator.bit_length()
    while Fraction(2) ** e > v:
        e -= 1
    while Fraction(2) ** (e + 1) <= v:
        e += 1
    assert -14 <= e <= 15                      # normal range: no subnormals here
    ulp = Fraction(2) ** (e - 10)
    q, r = divmod(v, ulp)
    q = int(q)
    if r * 2 > ulp or (r * 2 == ulp and q % 2 == 1):
        q += 1
    return sign * q * ulp


# -- exact rules ---------------------------------------------------------------------------------

def test_all_373_sums_normalise_exactly():
    s = np.arange(373)
    h = normal_f16_bits(s)
    assert np.array_equal(h.view(np.float16).astype(np.float64), (s - 186) / 32)
    assert len(set(h.tolist())) == 373
    # Through the word path, with random top nibbles.
    rng = np.random.default_rng(0)
    ws = np.array([word_with_sum(int(x), int(rng.integers(16))) for x in s], dtype=np.uint64)
    assert np.array_equal(field_sum(ws), s)
    f16, f32 = results_from_words(ws, "normal")
    assert np.array_equal(f16, h)
    assert np.array_equal(f32, h.view(np.float16).astype(np.float32).view(np.uint32))


def test_corner_encodings():
    f16, f32 = results_from_words(
        words(0, 0x0FFFFFFFFFFFFFFF, word_with_sum(186), word_with_sum(187), word_with_sum(185),
              0xF000000000000000), "normal")
    assert f16.tolist() == [0xC5D0, 0x45D0, 0x0000, 0x2800, 0xA800, 0xC5D0]
    assert f32.tolist() == [0xC0BA0000, 0x40BA0000, 0x00000000, 0x3D000000, 0xBD000000,
                            0xC0BA0000]


def test_f32_rewiring_equals_widening():
    h = normal_f16_bits(np.arange(373))
    assert np.array_equal(seed_f16_to_f32_bits(h), f16_to_f32_bits(h))
    assert np.all(f16_to_f32_bits(h) & 0xFFFF == 0)


@pytest.mark.parametrize("mode", MODES)
def test_top_four_bits_have_no_effect(mode):
    rng = np.random.default_rng(1)
    ws = Xoroshiro128aox(5, 1).take(3000 * WORDS_PER_RESULT[mode])
    flipped = ws ^ (rng.integers(1, 16, ws.shape).astype(np.uint64) << np.uint64(60))
    a, b = results_from_words(ws, mode), results_from_words(flipped, mode)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_normal144_rule_and_rounding():
    # Every reachable T, rounded by the model and independently with exact rationals.
    t = np.arange(-12 * 186, 12 * 186 + 1)
    from lowbit.sim.grand import _to_f16_bits
    got = _to_f16_bits(t * C144, C144_SHIFT)
    expect = [rne_f16(Fraction(int(x) * C144, 2 ** C144_SHIFT)) for x in t]
    assert [Fraction(value_of(b)) for b in got] == expect
    assert got[t == 0][0] == 0x0000
    # End to end: 12 words summing to a chosen T; the sums spread over the 12 words.
    for total in (0, 1, 2232, 4464, 1234, 3000):
        base, extra = divmod(total, 12)
        ws = [word_with_sum(base + (j < extra), top=j) for j in range(12)]
        f16, f32 = results_from_words(np.array(ws, dtype=np.uint64), "normal144")
        assert Fraction(value_of(f16[0])) == rne_f16(Fraction((total - 2232) * C144, 2 ** 18))
        assert f32[0] == f16_to_f32_bits(f16)[0]
    # The constant is round(2^18 / (32 sqrt 12)).
    assert C144 == round(2 ** 18 / (32 * 12 ** 0.5))


def test_trunc2_selection():
    # N1 = +2 exactly is kept (the test is strict |N| > 2).
    f16, _ = results_from_words(words(word_with_sum(186 + 64), 0, 0), "trunc2")
    assert value_of(f16[0]) == 2.0
    # N1 = -2 - 1/32 is out: N2 = -2 is used.
    f16, _ = results_from_words(words(word_with_sum(186 - 65), word_with_sum(186 - 64), 0),
                                "trunc2")
    assert value_of(f16[0]) == -2.0
    # Both out: U10(w, 0) + U10(w, 1) = ((2a + 1 - 1024) + (2b + 1 - 1024)) / 1024.
    for a, b in [(0, 0), (1023, 1023), (700, 5), (511, 512)]:
        w2 = a | (b << 10) | (0xFFFFF << 20)
        f16, _ = results_from_words(words(0, 0x0FFFFFFFFFFFFFFF, w2), "trunc2")
        assert value_of(f16[0]) == ((2 * a + 1 - 1024) + (2 * b + 1 - 1024)) / 1024


def test_trunc3_selection():
    f16, _ = results_from_words(words(word_with_sum(186 + 96), 0), "trunc3")
    assert value_of(f16[0]) == 3.0
    f16, _ = results_from_words(words(word_with_sum(186 - 96), 0), "trunc3")
    assert value_of(f16[0]) == -3.0
    for a, b, c in [(0, 0, 0), (511, 511, 511), (3, 300, 17)]:
        w1 = a | (b << 9) | (c << 18) | (0xFFFFFFFFF << 27)
        f16, f32 = results_from_words(words(word_with_sum(186 + 97), w1), "trunc3")
        exact = sum(2 * i + 1 - 512 for i in (a, b, c)) / 512
        assert value_of(f16[0]) == exact
        assert float(np.uint32(f32[0]).view(np.float32)) == exact


def test_uniform_and_raw():
    f16, _ = results_from_words(words(0, 2047, 1024, 1023 | (0xABC << 11)), "uniform")
    assert [value_of(x) for x in f16] == [-2047 / 2048, 2047 / 2048, 1 / 2048, -1 / 2048]
    w = 0xFEDC_BA98_7654_3210
    f16, f32 = results_from_words(words(w), "raw")
    assert (int(f16[0]), int(f32[0])) == (0x3210, 0x76543210)


def test_uniform_values_are_exact_and_symmetric():
    f16, _ = results_from_words(np.arange(2048, dtype=np.uint64), "uniform")
    v = f16_values(f16)
    assert np.array_equal(v, (2 * np.arange(2048) + 1 - 2048) / 2048)
    assert v.sum() == 0.0


def test_lane_packing_of_model():
    lanes = 3
    f16, f32 = GrandModel(77, lanes).generate("trunc2", 100)
    ws = Xoroshiro128aox(77, lanes).take(300)
    for k in range(lanes):
        r16, r32 = results_from_words(ws[:, k], "trunc2")
        assert np.array_equal(f16[:, k], r16) and np.array_equal(f32[:, k], r32)


def test_words_consumed_per_mode():
    g = GrandModel(3, 2)
    ref = Xoroshiro128aox(3, 2)
    for mode in MODES:
        g.generate(mode, 5)
        ref.take(5 * WORDS_PER_RESULT[mode])
        assert np.array_equal(g.prng.state, ref.state)


def test_model_validation():
    with pytest.raises(ValueError, match="Mode must be one of"):
        results_from_words(words(1), "gauss")
    with pytest.raises(ValueError, match="between 0 and 372"):
        normal_f16_bits([373])
    with pytest.raises(TypeError, match="integer array"):
        results_from_words(np.array([1.0]), "normal")
    with pytest.raises(TypeError):
        GrandModel(seed=1.5)


# -- statistics on 10^6 model samples -------------------------------------------------------------

def _moments_bound(v, mean, var, mu4, sigmas=5):
    n = len(v)
    assert abs(v.mean() - mean) < sigmas * np.sqrt(var / n)
    assert abs(v.var() - var) < sigmas * np.sqrt((mu4 - var ** 2) / n)


@pytest.fixture(scope="module")
def normal_samples():
    f16, f32 = GrandModel(20251122, 2).generate("normal", N_STAT // 2)
    return f16.ravel(), f32.ravel()


def test_normal_mean_variance(normal_samples):
    f16, f32 = normal_samples
    v = f16_values(f16)
    assert np.array_equal(v, f32.view(np.float32).astype(np.float64))
    k = np.arange(373) - 186
    p = ih12_pmf()
    var = float(VARIANCE["normal"])
    assert abs((p * (k / 32) ** 2).sum() - var) < 1e-12
    mu4 = (p * (k / 32) ** 4).sum()
    _moments_bound(v, 0.0, var, mu4)
    assert np.all(np.abs(v) <= 5.8125) and np.all(v * 32 == np.round(v * 32))


def test_normal_chi_square_against_ih12(normal_samples):
    f16, _ = normal_samples
    s = np.round(f16_values(f16) * 32).astype(int) + 186
    observed = np.bincount(s, minlength=373).astype(float)
    expected = ih12_pmf() * len(s)
    # Pool the tails so that every bin expects at least 5 samples.
    keep = np.nonzero(expected >= 5)[0]
    lo, hi = keep[0], keep[-1]
    obs = np.concatenate([[observed[:lo + 1].sum()], observed[lo + 1:hi], [observed[hi:].sum()]])
    exp = np.concatenate([[expected[:lo + 1].sum()], expected[lo + 1:hi], [expected[hi:].sum()]])
    chi2, p = stats.chisquare(obs, exp)
    assert p > 1e-3, (chi2, p)
    # And the grand normal is *not* exactly N(0,1): the same test against a quantised normal
    # rejects it (the tails are too light), as the seed says.
    edges = (np.arange(lo, hi) - 186 + 0.5) / 32
    q = np.diff(np.concatenate([[0.0], stats.norm.cdf(edges), [1.0]])) * len(s)
    assert stats.chisquare(obs, q * obs.sum() / q.sum())[1] < 1e-6


def test_normal_cdf_deviation(normal_samples):
    k = np.arange(373) - 186
    x = k / 32
    exact = np.abs(np.cumsum(ih12_pmf()) - stats.norm.cdf(x + 1 / 64)).max()
    assert exact <= 0.0024                       # the seed's claim, for the exact distribution
    f16, _ = normal_samples
    s = np.round(f16_values(f16) * 32).astype(int) + 186
    ecdf = np.cumsum(np.bincount(s, minlength=373)) / len(s)
    dev = np.abs(ecdf - stats.norm.cdf(x + 1 / 64)).max()
    # Sampling error of an empirical CDF: DKW bound at 99.9 % for 10^6 samples is 0.00195.
    assert dev <= 0.0024 + np.sqrt(np.log(2 / 1e-3) / (2 * len(s)))
    # PDF within 20 % of the Gaussian up to 3 sigma (seed claim).
    ratio = ih12_pmf() * 32 / stats.norm.pdf(x)
    assert np.all((ratio[np.abs(x) <= 3] > 0.8) & (ratio[np.abs(x) <= 3] < 1.2))


def test_normal144_statistics():
    v = GrandModel(99, 4).values("normal144", 100_000).ravel()       # 4·10^5 samples
    var = float(VARIANCE["normal144"])
    _moments_bound(v, 0.0, var, 3 * var ** 2 * (1 - 2 / (5 * 144)))
    assert abs(var - 1023 / 1024) < 2e-4
    # Better tails than a single grand normal: P(|X| > 3) is 0.00270 for N(0,1), 0.00188 for
    # IH-12 (exact); the normal-144 sample must be close to the Gaussian value.
    gauss = 2 * stats.norm.sf(3.0)
    p12 = ih12_pmf()[np.abs(np.arange(373) - 186) > 96].sum()
    p144 = np.mean(np.abs(v) > 3.0)
    sigma = np.sqrt(gauss / len(v))
    assert abs(p144 - gauss) < 5 * sigma
    assert abs(p12 - gauss) > 8 * sigma
    assert np.abs(v).max() > 4.0         # tails beyond the reach of IH-12 at this sample size


@pytest.mark.parametrize("mode, bound, tries", [("trunc2", 2.0, 2), ("trunc3", 3.0, 1)])
def test_truncated_statistics(mode, bound, tries):
    g = GrandModel(4321, 2)
    ws = g.prng.take(N_STAT // 2 * WORDS_PER_RESULT[mode])
    f16, f32 = results_from_words(ws, mode)
    v = f16_values(f16)
    assert np.all(np.abs(v) <= bound)
    assert np.array_equal(v.ravel(), f32.view(np.float32).ravel().astype(np.float64))
    assert abs(v.mean()) < 5 * v.std() / np.sqrt(v.size)
    # The grand normals tried by each result, and the fallbacks read from the model's output: a
    # result equal to none of its tries (the fallback sums are strictly inside +-bound).
    n = (field_sum(ws.reshape(-1, WORDS_PER_RESULT[mode], 2)[:, :tries]) - 186) / 32
    fell_back = np.all(v[:, None, :] != n, axis=1)
    assert np.array_equal(fell_back, np.all(np.abs(n) > bound, axis=1))
    # Counts against the exact probabilities (binomial sigma, 4 sigma): the per-word tail
    # P(|N| > bound) over every tried word, and the fallback rate per result.
    for hits, prob in [(np.abs(n) > bound, Fraction(ih12_tail_count(32 * bound), IH12_TOTAL)),
                       (fell_back, fallback_probability(mode))]:
        p = float(prob)
        expect = p * hits.size
        sigma = math.sqrt(hits.size * p * (1 - p))
        assert abs(hits.sum() - expect) < 4 * sigma, (int(hits.sum()), expect, sigma)


# -- exact distribution and the seed's statistical claims ---------------------------------------

def test_ih12_counts_exact():
    c = ih12_counts()
    assert len(c) == 373 and all(isinstance(x, int) for x in c)
    assert sum(c) == IH12_TOTAL == 2 ** 60
    # Independent closed form (inclusion-exclusion) for sums of 12 uniforms on 0..31.
    closed = [sum((-1) ** j * math.comb(12, j) * math.comb(s - 32 * j + 11, 11)
                  for j in range(12 + 1) if s - 32 * j >= 0) for s in range(373)]
    assert list(c) == closed
    assert c == c[::-1] and c[:3] == (1, 12, 78)
    assert Fraction(sum(x * (s - 186) ** 2 for s, x in enumerate(c)), IH12_TOTAL) == 1023
    assert np.array_equal(ih12_pmf(), np.array(c, dtype=float) / 2.0 ** 60)


def test_fallback_probabilities_exact():
    # trunc2: two grand normals beyond +-2 (|S - 186| > 64), each with probability
    # 769886175356909 / 2^54; trunc3: one beyond +-3 (|S - 186| > 96).
    assert TRUNC_RULE == {"trunc2": (2, 64), "trunc3": (1, 96)}
    assert ih12_tail_count(64) == 769886175356909 * 2 ** 6
    p2, p3 = fallback_probability("trunc2"), fallback_probability("trunc3")
    assert p2 == Fraction(769886175356909, 2 ** 54) ** 2
    assert p2 == Fraction(592724723005689234793534034281, 2 ** 108)
    assert p3 == Fraction(271598028961545, 2 ** 57)
    assert round(float(1 / p2), 1) == 547.5 and round(float(1 / p3), 1) == 530.6
    assert round(float(1 / p2)) == 548 and round(float(1 / p3)) == 531        # the digest's
    with pytest.raises(ValueError, match="no fallback"):
        fallback_probability("normal")


def test_seed_density_ratio_claims():
    c = ih12_counts()
    k = np.arange(-186, 187)
    x = k / 32
    # On the lattice the ratio is 32 P(S = 186 + k) / phi(k/32), computed here independently.
    direct = np.array([32 * c[186 + i] / IH12_TOTAL / math.exp(-(i / 32) ** 2 / 2)
                       * math.sqrt(2 * math.pi) for i in k])
    assert np.allclose(ih12_density_ratio(x), direct, rtol=1e-12, atol=0)
    # "Tails within 10 % of the ideal normal up to 2.8 sigma": every t in [-2.8, 2.8] on a grid
    # of step 1e-4 (between lattice points the pmf is interpolated linearly).
    t = np.linspace(-2.8, 2.8, 56001)
    r = ih12_density_ratio(t)
    assert np.all((r >= 0.9) & (r <= 1.1)), (r.min(), r.max())
    assert round(float(ih12_density_ratio(89 / 32)), 3) == 0.921      # the digest's "0.921"
    # The claim stops holding soon after: first lattice point below 0.9 is 92/32 = 2.875.
    lattice = direct[186:]
    assert int(np.argmax(lattice < 0.9)) == 92
    # "PDF within 20 % up to 3 sigma": min 0.859 (at 3), max 1.025 (at 55/32).
    inner = direct[np.abs(x) <= 3]
    assert (round(inner.min(), 3), round(inner.max(), 3)) == (0.859, 1.025)
    assert int(np.argmax(lattice)) == 55
    # "0.649 at 3.5 sigma" (and 0.376 at 4 sigma): the tails fall faster than the normal's.
    assert round(float(ih12_density_ratio(3.5)), 3) == 0.649
    assert round(float(ih12_density_ratio(4.0)), 3) == 0.376
    assert ih12_density_ratio(5.9) == 0.0


def test_tail_probability_reading_differs():
    # P(|X| > t) / P(|Z| > t) does not give the seed's numbers (so the claims are density
    # ratios): 0.821 at 2.8 sigma, 0.479 at 3.5 sigma, below 0.9 already from t = 2.282 on.
    for t, expect in [(2.8, 0.821), (3.0, 0.698), (3.5, 0.479)]:
        exact = ih12_tail_count(32 * t) / IH12_TOTAL
        assert ih12_tail_ratio(t) == pytest.approx(exact / (2 * stats.norm.sf(t)), rel=1e-12)
        assert round(ih12_tail_ratio(t), 3) == expect
    assert ih12_tail_ratio(2.281) > 0.9 > ih12_tail_ratio(2.282)


def test_uniform_statistics():
    f16, _ = GrandModel(11, 2).generate("uniform", N_STAT // 2)
    v = f16_values(f16).ravel()
    var = float(VARIANCE["uniform"])
    _moments_bound(v, 0.0, var, 1 / 5)
    i = np.round((v * 2048 + 2047) / 2).astype(int)
    assert stats.chisquare(np.bincount(i, minlength=2048))[1] > 1e-3
