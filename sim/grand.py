"""Golden model of the Irwin–Hall "grand" unit (DESIGN §3.1, seed 000).

Every lane consumes its own stream of xoroshiro128aox words (:mod:`lowbit.sim.prng`; lane ``k`` of
the
generator is lane ``k`` of the unit). A *result* consumes a fixed number of consecutive words of
its lane, depending on the mode; all lanes run in lockstep.

Building blocks of one word ``w`` (64 bits):

- ``S(w)`` = sum of the twelve 5-bit fields ``w[5i+4:5i]``, i = 0..11 (bits [59:0]; the top four
  bits are ignored), so 0 ≤ S ≤ 372; ``N(w) = (S − 186) / 32`` is one grand normal, an exact
  multiple of 1/32 in [−5.8125, 5.8125] with mean 0 and variance 1023/1024.
- ``U_b(w, j)`` = ``(2·w[b(j+1)−1 : bj] + 1 − 2^b) / 2^b``: a uniform on the ``2^b`` odd
  multiples of ``2^−b`` in (−1, 1), exactly symmetric (mean 0).

Modes (name → words per result → value):

==============  =====  ==========================================================================
``"normal"``    1      ``N(w0)``.
``"normal144"`` 12     ``T = Σ_{j<12} S(w_j) − 2232`` (= 32 × the sum of 12 grand normals) and
                       ``X = T · 2365 / 2^18``. The fixed-point rule approximates
                       ``T / (32·√12)``: 2365 = round(2^18 / (32·√12)), relative error
                       +7.33e−5, so Var X = 12·1023 · 2365² / 2^36 ≈ 0.999170 (exact rational
                       in :data:`VARIANCE`). The integer ``T · 2365`` is below 2^23.
``"trunc2"``    3      ``N1 = N(w0)``, ``N2 = N(w1)``; the output is ``N1`` if ``|N1| ≤ 2``, else
                       ``N2`` if ``|N2| ≤ 2``, else ``U_10(w2, 0) + U_10(w2, 1)`` (the seed's
                       fallback to a sum of two uniforms; "> 2" is strict, as in the seed).
``"trunc3"``    2      ``N1 = N(w0)`` if ``|N1| ≤ 3``, else ``U_9(w1,0) + U_9(w1,1) + U_9(w1,2)``.
``"uniform"``   1      ``U_11(w0, 0)``.
``"raw"``       1      no value: ``f32 = w0[31:0]`` and ``f16 = w0[15:0]`` (its low half).
==============  =====  ==========================================================================

Number formats and rounding: every value is ``(−1)^s · m · 2^−18`` with an integer ``m < 2^23``.
The f16 output is that value rounded to IEEE binary16 **nearest, ties to even**; only
``"normal144"`` ever rounds (all other modes' values have at most 11 significant bits and are
exact in f16, which the uniform widths 11/10/9 were chosen for). No value is subnormal, infinite
or NaN (the smallest nonzero magnitude is 2^−11, the largest 5.8125), nothing saturates, and zero
is always **+0** (0x0000). The f32 output is the f16 result widened exactly
(``float32(float16)``), so both fields carry the same value; for ``"normal"`` this equals the
seed's bit rewiring ``{h[15:14], 4×h[13], h[12:3], 16'b0}`` (:func:`seed_f16_to_f32_bits`).

Exact distribution (integers over ``32**12``): :func:`ih12_counts`, :func:`ih12_tail_count`,
the truncated modes' fallback rates (:func:`fallback_probability`: 1/547.503 and 1/530.619) and
the seed's accuracy ratios against N(0, 1) (:func:`ih12_density_ratio`,
:func:`ih12_tail_ratio`).
"""

import math
from fractions import Fraction
from functools import cache

import numpy as np

from .prng import Xoroshiro128aox

__all__ = ["MODES", "WORDS_PER_RESULT", "C144", "C144_SHIFT", "VARIANCE", "field_sum",
           "normal_f16_bits", "f16_to_f32_bits", "seed_f16_to_f32_bits", "IH12_TOTAL",
           "TRUNC_RULE", "ih12_counts", "ih12_pmf", "ih12_tail_count", "fallback_probability",
           "ih12_density_ratio", "ih12_tail_ratio", "results_from_words", "f16_values",
           "GrandModel"]

#: Mode names in the order of the gateware's ``GrandMode`` encoding.
MODES = ("normal", "normal144", "trunc2", "trunc3", "uniform", "raw")
#: PRNG words of each lane consumed per result.
WORDS_PER_RESULT = {"normal": 1, "normal144": 12, "trunc2": 3, "trunc3": 2, "uniform": 1,
                    "raw": 1}
#: normal-144 scale: X = T * C144 / 2**C144_SHIFT.
C144 = 2365
C144_SHIFT = 18
#: Exact variance of the value of each mode (``raw`` has none).
VARIANCE = {
    "normal": Fraction(1023, 1024),
    "normal144": Fraction(12 * 1023 * C144 ** 2, 2 ** (2 * C144_SHIFT)),
    "uniform": Fraction(2 ** 22 - 1, 3 * 2 ** 22),
}
#: Truncated modes: (grand normals tried per result, bound on ``|S − 186|``). A normal is kept
#: if ``|S − 186| ≤ bound`` (bound = 32 × the sigma bound, the seed's strict "> 2" / "> 3").
TRUNC_RULE = {"trunc2": (2, 64), "trunc3": (1, 96)}
#: Number of equally likely 60-bit field patterns: ``32**12 = 2**60``.
IH12_TOTAL = 32 ** 12
_SCALE = 18          # the common fixed point: value = m * 2**-18


def _check_words(words):
    words = np.asarray(words)
    if words.dtype != np.uint64:
        if words.dtype.kind not in "ui":
            raise TypeError(f"Words must be an integer array, not {words.dtype}")
        words = words.astype(np.uint64)
    return words


def field_sum(words):
    """``S``: the sum of the twelve 5-bit fields of bits [59:0] of each word (int64 array)."""
    w = _check_words(words)
    # SWAR: add neighbouring fields inside the word (no slot overflows).
    m0 = np.uint64(sum(31 << (10 * i) for i in range(6)))
    a = (w & m0) + ((w >> np.uint64(5)) & m0)                 # 6 slots of 10 bits, <= 62
    m1 = np.uint64(sum(1023 << (20 * i) for i in range(3)))
    b = (a & m1) + ((a >> np.uint64(10)) & m1)                # 3 slots of 20 bits, <= 124
    m2 = np.uint64(0xFFFFF)
    c = (b & m2) + ((b >> np.uint64(20)) & m2) + ((b >> np.uint64(40)) & m2)
    return c.astype(np.int64)


def _uniform_num(words, bits, j):
    """Numerator of ``U_bits(w, j)`` over ``2^bits``: the odd integer ``2i + 1 − 2^bits``."""
    i = ((words >> np.uint64(bits * j)) & np.uint64((1 << bits) - 1)).astype(np.int64)
    return 2 * i + 1 - (1 << bits)


def _to_f16_bits(num, shift):
    """Bits of f16(num · 2^−shift), rounded to nearest even; +0 for 0."""
    value = np.ldexp(np.asarray(num, dtype=np.float64), -shift)   # exact: |num| < 2^53
    value = value + 0.0                                          # -0.0 -> +0.0
    return value.astype(np.float16).view(np.uint16)


def normal_f16_bits(s):
    """f16 bits of the grand normal ``(S − 186) / 32`` for sums ``s`` (the LUT 42 of the seed)."""
    s = np.asarray(s, dtype=np.int64)
    if np.any((s < 0) | (s > 372)):
        raise ValueError("A grand sum must be an integer between 0 and 372")
    return _to_f16_bits(s - 186, 5)


def f16_to_f32_bits(h):
    """Exact widening of f16 bit patterns to f32 bit patterns (``float32(float16)``)."""
    h = np.asarray(h, dtype=np.uint16)
    return h.view(np.float16).astype(np.float32).view(np.uint32)


def seed_f16_to_f32_bits(h):
    """The seed's rewiring ``{h[15:14], 4×h[13], h[12:3], 16'b0}``.

    Exact only where the f16 biased exponent is in 8..23 and ``h[2:0]`` is zero, which holds for
    every grand normal; it is kept to show that equivalence.
    """
    h = np.asarray(h, dtype=np.uint32)
    b13 = (h >> 13) & 1
    return (((h >> 14) & 3) << 30) | ((0xF * b13) << 26) | (((h >> 3) & 0x3FF) << 16)


@cache
def ih12_counts():
    """Exact number of field patterns giving each sum ``S``.

    Returns
    -------
    tuple of int
        373 Python integers, entry ``s`` = the number of the ``32**12`` equally likely 12-tuples
        of 5-bit fields whose sum is ``s`` (the 12-fold convolution of uniform{0..31}, in exact
        integer arithmetic: the largest count, 1.42e16, is above 2^53). They add up to
        :data:`IH12_TOTAL`, and ``P(S = s) = ih12_counts()[s] / IH12_TOTAL``.
    """
    counts = [1]
    for _ in range(12):
        # Convolution with 32 ones: a running sum over a window of 32.
        padded = [0] * 31 + counts + [0] * 31
        window, out = 0, []
        for i, c in enumerate(padded):
            window += c - (padded[i - 32] if i >= 32 else 0)
            if i >= 31:
                out.append(window)
        counts = out
    return tuple(counts)


def ih12_pmf():
    """Probability of each sum S = 0..372 (float64 array; :func:`ih12_counts` / 2^60)."""
    return np.array(ih12_counts(), dtype=np.float64) / float(IH12_TOTAL)


def ih12_tail_count(bound):
    """Number of field patterns with ``|S − 186| > bound`` (exact int; over :data:`IH12_TOTAL`).

    ``bound`` may be any real number; the comparison is strict, as in the truncated modes.
    """
    return sum(c for s, c in enumerate(ih12_counts()) if abs(s - 186) > bound)


def fallback_probability(mode):
    """Exact probability that one result of a truncated mode falls back to its uniform sum.

    Parameters
    ----------
    mode : str
        ``"trunc2"`` or ``"trunc3"``.

    Returns
    -------
    fractions.Fraction
        ``(P(|S − 186| > bound))**tries`` with ``(tries, bound)`` = :data:`TRUNC_RULE` ``[mode]``,
        the rule :func:`results_from_words` applies: each try is the grand normal of its own
        word (words are modelled as independent and uniform, so the tries are independent) and
        the result falls back only if every try is beyond the bound. Values::

            trunc2: (769886175356909 / 2^54)^2 = 592724723005689234793534034281 / 2^108
                    = 1 / 547.50298...   (P(|N| > 2) = 0.0427373 per word)
            trunc3: 271598028961545 / 2^57 = 1 / 530.61942...

        The seed says "约1500" for both (a garbled ≈ 1/500); the digest's 1/548 and 1/531 are
        these values rounded.

    Raises
    ------
    ValueError
        For a mode that is not truncated.
    """
    mode = _mode_name(mode)
    if mode not in TRUNC_RULE:
        raise ValueError(f"Mode {mode!r} has no fallback; it must be one of "
                         f"{', '.join(TRUNC_RULE)}")
    tries, bound = TRUNC_RULE[mode]
    return Fraction(ih12_tail_count(bound), IH12_TOTAL) ** tries


def ih12_density_ratio(t):
    """Ratio of the grand normal's density to the N(0, 1) density at ``t`` sigma.

    This is the quantity of the seed's accuracy claims ("PDF within 20 % of the Gaussian up to
    3σ", "tails within 10 % of the ideal normal up to 2.8σ", "0.649 at 3.5σ" in the digest):

    ``R(t) = 32 · p(t) / φ(t)``, ``φ(t) = exp(−t²/2) / √(2π)``,

    where ``p(k/32) = P(S = 186 + k)`` exactly on the lattice of the 373 values ``k/32`` (so
    ``32 · p`` is the histogram density of bins of width 1/32) and ``p`` is linearly
    interpolated between lattice points (0 beyond ±5.8125). On the lattice ``R`` is exactly the
    digest's ``pmf·32 / φ(x)``: 0.98788 at 0, at most 1.02544 (at 55/32), 0.92101 at
    89/32 = 2.78125 (the digest's "0.921 at 2.8σ", taken at the last lattice point ≤ 2.8; at
    2.8 itself the interpolation gives 0.91722), 0.90501 at 91/32, the first value below 0.9
    at 92/32 = 2.875 (0.89647), 0.85869 at 3, 0.64947 at 3.5 and 0.37612 at 4.

    The tail-probability reading (:func:`ih12_tail_ratio`) does **not** reproduce the seed's
    numbers: it is 0.821 at 2.8σ and 0.479 at 3.5σ.

    Parameters
    ----------
    t : float or array_like
        Position in units of the nominal sigma (the value ``X = (S − 186)/32``).

    Returns
    -------
    numpy.ndarray
        float64 ratios, the shape of ``t``.
    """
    t = np.asarray(t, dtype=np.float64)
    x = (np.arange(373) - 186) / 32
    p = np.interp(t, x, ih12_pmf(), left=0.0, right=0.0)
    return 32 * p / (np.exp(-t * t / 2) / math.sqrt(2 * math.pi))


def ih12_tail_ratio(t):
    """``P(|X| > t) / P(|Z| > t)`` for the grand normal ``X`` and ``Z`` ~ N(0, 1) (float).

    The numerator is exact (:func:`ih12_tail_count`, strict ``>`` on the lattice ``k/32``), the
    denominator ``erfc(t/√2)``. Given for comparison: the seed's "within 10 %" and "0.649"
    are density ratios (:func:`ih12_density_ratio`); this ratio is 0.698 at 3σ, 0.821 at 2.8σ
    and 0.479 at 3.5σ, and already falls below 0.9 at t ≈ 2.28.
    """
    return (ih12_tail_count(32 * t) / IH12_TOTAL) / math.erfc(t / math.sqrt(2))


def _mode_name(mode):
    if isinstance(mode, str) and mode in MODES:
        return mode
    name = getattr(mode, "name", None)       # accept the gateware enum without importing it
    if isinstance(name, str):
        lowered = {"NORMAL": "normal", "NORMAL_144": "normal144", "TRUNC_2SIGMA": "trunc2",
                   "TRUNC_3SIGMA": "trunc3", "UNIFORM": "uniform", "RAW": "raw"}.get(name)
        if lowered:
            return lowered
    raise ValueError(f"Mode must be one of {', '.join(MODES)}, not {mode!r}")


def results_from_words(words, mode):
    """The results of ``mode`` made from PRNG words.

    Parameters
    ----------
    words : array of uint64, shape (n, lanes) or (n,)
        Row ``t`` holds word ``t`` of each lane. Trailing words that do not complete a result
        are ignored.
    mode : str
        One of :data:`MODES`.

    Returns
    -------
    (f16, f32)
        uint16 and uint32 arrays of shape ``(n // WORDS_PER_RESULT[mode], lanes)`` (or without
        the lane axis for 1-D input).

    Raises
    ------
    ValueError
        For an unknown mode.
    """
    mode = _mode_name(mode)
    words = _check_words(words)
    k = WORDS_PER_RESULT[mode]
    n = words.shape[0] // k
    w = words[:n * k].reshape((n, k) + words.shape[1:])
    if mode == "raw":
        f16 = (w[:, 0] & np.uint64(0xFFFF)).astype(np.uint16)
        f32 = (w[:, 0] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        return f16, f32
    if mode == "normal":
        num = (field_sum(w[:, 0]) - 186) << 13
    elif mode == "normal144":
        t = field_sum(w).sum(axis=1) - 12 * 186
        num = t * C144
    elif mode == "uniform":
        num = _uniform_num(w[:, 0], 11, 0) << 7
    elif mode == "trunc2":
        bound = TRUNC_RULE[mode][1]
        n1, n2 = field_sum(w[:, 0]) - 186, field_sum(w[:, 1]) - 186
        fallback = (_uniform_num(w[:, 2], 10, 0) + _uniform_num(w[:, 2], 10, 1)) << 8
        num = np.where(np.abs(n1) <= bound, n1 << 13,
                       np.where(np.abs(n2) <= bound, n2 << 13, fallback))
    else:  # trunc3
        bound = TRUNC_RULE[mode][1]
        n1 = field_sum(w[:, 0]) - 186
        fallback = sum(_uniform_num(w[:, 1], 9, j) for j in range(3)) << 9
        num = np.where(np.abs(n1) <= bound, n1 << 13, fallback)
    assert np.all(np.abs(num) < 1 << 23)
    f16 = _to_f16_bits(num, _SCALE)
    return f16, f16_to_f32_bits(f16)


def f16_values(f16):
    """The float values of f16 bit patterns (float64 array)."""
    return np.asarray(f16, dtype=np.uint16).view(np.float16).astype(np.float64)


class GrandModel:
    """The grand unit: ``L`` lanes fed by :class:`lowbit.sim.prng.Xoroshiro128aox` ``(seed,
    lanes)``.

    Parameters
    ----------
    seed : int
        64-bit seed of the generator (see :func:`lowbit.sim.prng.seed_lanes`).
    lanes : int
        ``L`` ≥ 1.

    Members
    -------
    prng : lowbit.sim.prng.Xoroshiro128aox
        The generator; its state advances by the words each call consumes.
    """

    def __init__(self, seed=0, lanes=2):
        self.prng = Xoroshiro128aox(seed, lanes)

    def generate(self, mode, n):
        """The next ``n`` results of every lane: ``(f16, f32)`` arrays of shape ``(n, lanes)``."""
        mode = _mode_name(mode)
        return results_from_words(self.prng.take(n * WORDS_PER_RESULT[mode]), mode)

    def values(self, mode, n):
        """The next ``n`` results as float64 values (not for ``"raw"``)."""
        f16, _ = self.generate(mode, n)
        return f16_values(f16)
