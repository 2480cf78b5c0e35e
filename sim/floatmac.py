"""Golden model of the IEEE float multiply-accumulate baseline (issue #10).

Pure NumPy; never imports Amaranth. :class:`lowbit.hw.floatmac.FloatMAC` matches :func:`float_mac`
bit for bit. The datapath has the shape of the BFP column's PE array: every beat ``k`` brings
one weight column ``w[k, :]`` (one element per lane) and one vector element ``x[k]`` that is
broadcast to all lanes, and lane ``i`` computes, in order,

    acc_i = +0;  for k in 0..K-1:  acc_i = round(acc_i + round(w[k, i] * x[k]))

Values are IEEE 754 binary16 (``"f16"``) or binary32 (``"f32"``) bit patterns.

Rules
-----
* **Not fused.** The product and the sum are each rounded to the format's precision
  (11 or 24 significand bits), **round to nearest, ties to even**.
* **Flush to zero (FTZ) on inputs and outputs.** A subnormal input (exponent field 0, fraction
  non-zero) is read as a zero of the same sign. A result is first rounded to the format's
  precision *with an unbounded exponent range*; if the rounded magnitude is below the smallest
  normal (2^-14 for f16, 2^-126 for f32) it becomes a zero with the sign of the exact result.
  So a value in ``[2^emin · (1 - 2^-(p+1)), 2^emin)`` rounds up to the smallest normal and
  smaller ones flush (``p`` = 11 or 24 significand bits). Subnormals are never produced.
* **Overflow.** A rounded magnitude of 2^(emax+1) or more becomes ±Inf (round to nearest never
  saturates at the largest finite value).
* **Zeros.** ``0 · y`` is a zero with sign ``sign(0) XOR sign(y)`` (``y`` finite); an exact zero
  sum of non-zero operands is ``+0``; ``(+0) + (-0) = +0``, ``(-0) + (-0) = -0``.
* **Inf and NaN.** ``Inf · 0`` and ``Inf + (-Inf)`` are NaN; ``Inf · y`` (``y`` finite, non-zero)
  and ``Inf + y`` (``y`` finite) are Inf with the usual sign. Any NaN operand gives NaN. Every
  NaN result is the canonical quiet NaN with sign 0 (``0x7E00`` / ``0x7FC00000``); NaN
  payloads are not propagated.

Where every intermediate value is zero or normal, this is exactly NumPy's float16 / float32
arithmetic (``acc = acc + w * x`` in the format), which the tests check. Internally the model
computes in float64: products of two formats' significands (at most 48 bits) are exact; f16 sums
are exact; f32 sums are rounded twice (to 53 then to 24 bits), which gives the correctly rounded
sum because 53 >= 2·24 + 2.
"""

import numpy as np

__all__ = ["FORMATS", "FloatFormat", "float_mac", "fmul", "fadd", "round_pack", "to_bits",
           "from_bits", "flush_inputs"]


class FloatFormat:
    """An IEEE 754 binary interchange format.

    Members
    -------
    name : str
    bits : int
        Total width.
    exp_bits : int
        Exponent field width.
    precision : int
        Significand bits including the hidden bit (``p``).
    bias, emin, emax : int
    dtype, uint : numpy dtypes of the values and of their bit patterns.
    nan : int
        The canonical quiet NaN bit pattern.
    """

    def __init__(self, name, bits, exp_bits, dtype, uint):
        self.name = name
        self.bits = bits
        self.exp_bits = exp_bits
        self.precision = bits - exp_bits
        self.bias = (1 << (exp_bits - 1)) - 1
        self.emin = 1 - self.bias
        self.emax = self.bias
        self.dtype = np.dtype(dtype)
        self.uint = np.dtype(uint)
        self.nan = ((1 << exp_bits) - 1) << (self.precision - 1) | 1 << (self.precision - 2)

    @property
    def min_normal(self):
        return float(np.ldexp(1.0, self.emin))

    @property
    def max_finite(self):
        return float(np.ldexp(2.0 - np.ldexp(1.0, 1 - self.precision), self.emax))

    def __repr__(self):
        return f"FloatFormat({self.name!r})"


#: The supported formats by name.
FORMATS = {
    "f16": FloatFormat("f16", 16, 5, np.float16, np.uint16),
    "f32": FloatFormat("f32", 32, 8, np.float32, np.uint32),
}


def _fmt(fmt):
    if isinstance(fmt, FloatFormat):
        return fmt
    if not isinstance(fmt, str):
        raise TypeError(f"Format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if fmt not in FORMATS:
        raise ValueError(f"Format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    return FORMATS[fmt]


def to_bits(values, fmt="f16"):
    """Bit patterns (uint16 / uint32) of ``values`` converted to the format by NumPy."""
    f = _fmt(fmt)
    return np.asarray(values, dtype=np.float64).astype(f.dtype).view(f.uint)


def from_bits(bits, fmt="f16"):
    """The float64 values of bit patterns (subnormals read as IEEE subnormals)."""
    f = _fmt(fmt)
    with np.errstate(invalid="ignore"):         # signalling NaNs
        return np.asarray(bits).astype(f.uint).view(f.dtype).astype(np.float64)


def flush_inputs(bits, fmt="f16"):
    """Input rule: subnormal bit patterns become zeros of the same sign; others unchanged."""
    f = _fmt(fmt)
    b = np.asarray(bits).astype(f.uint)
    frac_mask = (1 << (f.precision - 1)) - 1
    exp = (b >> (f.precision - 1)) & ((1 << f.exp_bits) - 1)
    sign = b & f.uint.type(1 << (f.bits - 1))
    return np.where((exp == 0) & ((b & frac_mask) != 0), sign, b).astype(f.uint)


def round_pack(exact, fmt="f16"):
    """Round float64 values to the format's precision (nearest even, unbounded exponent), then
    flush results below the smallest normal to signed zero and overflow to signed Inf.

    ``exact`` must hold finite values; NaN / Inf are handled by the callers. Zeros keep their sign.
    """
    f = _fmt(fmt)
    v = np.asarray(exact, dtype=np.float64)
    mant, exp = np.frexp(v)                       # v = mant · 2^exp, 0.5 <= |mant| < 1
    r = np.ldexp(np.rint(np.ldexp(mant, f.precision)), exp - f.precision)
    r = np.where(np.abs(r) < f.min_normal, np.copysign(0.0, v), r)
    r = np.where(np.abs(r) > f.max_finite, np.copysign(np.inf, v), r)
    return r.astype(f.dtype).view(f.uint)


def _inf_bits(v, f):
    inf = ((1 << f.exp_bits) - 1) << (f.precision - 1)
    return np.where(np.signbit(v), inf | 1 << (f.bits - 1), inf).astype(f.uint)


def _classify(bits, f):
    v = from_bits(flush_inputs(bits, f), f)
    return v, np.isnan(v), np.isinf(v)


def fmul(a, b, fmt="f16"):
    """One rounded product of bit patterns ``a`` and ``b`` (broadcast), as bit patterns."""
    f = _fmt(fmt)
    va, na, ia = _classify(a, f)
    vb, nb, ib = _classify(b, f)
    nan = na | nb | (ia & (vb == 0)) | (ib & (va == 0))
    with np.errstate(invalid="ignore"):
        prod = va * vb                            # exact: at most 48 significand bits
    finite = np.where(np.isfinite(prod), prod, 0.0)
    out = np.where(np.isinf(prod), _inf_bits(prod, f), round_pack(finite, f))
    return np.where(nan, f.uint.type(f.nan), out).astype(f.uint)


def fadd(a, b, fmt="f16"):
    """One rounded sum of bit patterns ``a`` and ``b`` (broadcast), as bit patterns."""
    f = _fmt(fmt)
    va, na, ia = _classify(a, f)
    vb, nb, ib = _classify(b, f)
    nan = na | nb | (ia & ib & (np.signbit(va) != np.signbit(vb)))
    with np.errstate(invalid="ignore"):
        s = va + vb                               # f16 exact; f32 rounded to 53 bits first
    # IEEE: an exact zero sum is +0 unless both operands are -0 (NumPy does the same).
    finite = np.where(np.isfinite(s), s, 0.0)
    out = np.where(np.isinf(s), _inf_bits(s, f), round_pack(finite, f))
    return np.where(nan, f.uint.type(f.nan), out).astype(f.uint)


def float_mac(w, x, fmt="f16"):
    """Multiply-accumulate of ``K`` beats, as :class:`lowbit.hw.floatmac.FloatMAC` computes it.

    Parameters
    ----------
    w : array_like of int, shape (..., K, N)
        Weight bit patterns: beat ``k`` carries ``w[..., k, :]``, one per lane.
    x : array_like of int, shape (..., K)
        Vector element bit patterns, broadcast to all lanes.
    fmt : {"f16", "f32"}

    Returns
    -------
    numpy.ndarray of uint16 / uint32, shape (..., N)
        The accumulators' bit patterns after the ``K`` beats (rules in the module docstring).

    Raises
    ------
    ValueError
        If the shapes do not match or ``K`` is 0.
    """
    f = _fmt(fmt)
    w = np.asarray(w)
    x = np.asarray(x)
    if w.ndim < 2 or x.shape != w.shape[:-1]:
        raise ValueError(f"Weights must have shape (..., K, N) and x shape (..., K), not "
                         f"{w.shape} and {x.shape}")
    if w.shape[-2] == 0:
        raise ValueError("At least one beat is needed")
    w = w.astype(f.uint)
    x = x.astype(f.uint)
    acc = np.zeros(w.shape[:-2] + w.shape[-1:], dtype=f.uint)
    for k in range(w.shape[-2]):
        acc = fadd(acc, fmul(w[..., k, :], x[..., k, None], f), f)
    return acc
