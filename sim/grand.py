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
"""

from fractions import Fraction

import numpy as np

from .prng import Xoroshiro128aox

__all__ = ["MODES", "WORDS_PER_RESULT", "C144", "C144_SHIFT", "VARIANCE", "field_sum",
           "normal_f16_bits", "f16_to_f32_bits", "seed_f16_to_f32_bits", "ih12_pmf",
           "results_from_words", "f16_values", "GrandModel"]

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


def ih12_pmf():
    """Exact probability of each sum S = 0..372 (the 12-fold convolution of uniform{0..31})."""
    p = np.ones(1)
    for _ in range(12):
        p = np.convolve(p, np.ones(32))
    return p / 32.0 ** 12


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
        n1, n2 = field_sum(w[:, 0]) - 186, field_sum(w[:, 1]) - 186
        fallback = (_uniform_num(w[:, 2], 10, 0) + _uniform_num(w[:, 2], 10, 1)) << 8
        num = np.where(np.abs(n1) <= 64, n1 << 13, np.where(np.abs(n2) <= 64, n2 << 13, fallback))
    else:  # trunc3
        n1 = field_sum(w[:, 0]) - 186
        fallback = sum(_uniform_num(w[:, 1], 9, j) for j in range(3)) << 9
        num = np.where(np.abs(n1) <= 96, n1 << 13, fallback)
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
