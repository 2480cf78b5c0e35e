"""Block floating point (BFP) number format: quantise, dequantise and OCP E8M0 scales.

Golden model of DESIGN §2 (seed 002, OCP Microscaling). Pure NumPy; never imports Amaranth.

Format
------
``B`` consecutive elements share one exponent. An element is a signed two's-complement mantissa
``m`` of ``W`` bits restricted to the symmetric range ``±(2^(W-1) - 1)``; the shared exponent is a
signed ``E``-bit integer ``e``; the element's value is ``m · 2^e``. The most negative exponent
code ``-2^(E-1)`` is reserved as NaN, so finite exponents lie in
``[-2^(E-1) + 1, 2^(E-1) - 1]``.

Shared exponent
---------------
With ``amax`` the largest magnitude in the block:

* all-zero block (``amax == 0``, including ``-0.0``): ``e = 0``;
* ``"floor"`` (OCP rule, seed 002 Eq. 4): ``e = floor(log2(amax)) - (W - 2)``. The largest
  element then scales to ``t`` in ``[2^(W-2), 2^(W-1))``; truncation never overflows, while
  nearest or stochastic rounding can reach ``2^(W-1)`` and is saturated to ``2^(W-1) - 1``;
* ``"ceil"`` (no clipping): ``e = ceil(log2(amax / (2^(W-1) - 1)))``, the least ``e`` with
  ``amax <= (2^(W-1) - 1) · 2^e``; it equals the floor exponent or exceeds it by one, and no
  rounding mode can saturate;
* ``"ceil_lop"`` (seed 002 claim 8 as written: the leading-one position rounded up):
  ``e = ceil(log2(amax)) - (W - 2)``. It equals the floor exponent for a power of two and
  exceeds it by one otherwise, so the largest element scales to ``t`` in
  ``(2^(W-3), 2^(W-2)]``: one bit of headroom (one bit less precision) and, like ``"ceil"``,
  no saturation. Seed 002's 255 at ``W = 16`` gives ``-6`` and ``0x3FC0`` (``"floor"`` and
  ``"ceil"``: ``-7`` and ``0x7F80``).

All three are computed exactly from the binary exponent and fraction of ``amax`` (no ``log2``).
The exponent is then clamped to ``[-2^(E-1) + 1, 2^(E-1) - 1]``. Clamping *up* (a block too
small for the exponent range) makes the mantissas smaller than the rule intends: they lose low
bits and may round to zero. Clamping *down* (a block too large) makes them larger: they
saturate to ``±(2^(W-1) - 1)``.

Mantissas
---------
``t = x · 2^-e`` is exact in binary64 (apart from values far below ``2^-1022`` whose sign is
kept and that are treated exactly by every rounding mode), then

* ``"nearest"``: round half to even;
* ``"zero"``: truncate toward zero;
* ``"stochastic"``: ``floor(t + r · 2^-R)`` with ``r`` an integer in ``[0, 2^R)`` (one per
  element, argument ``rand``) and ``R = rand_bits``; evaluated exactly (no floating-point
  addition), so it is unbiased to within ``2^-R`` of an ulp for uniform ``r``;

and finally saturated symmetrically to ``±(2^(W-1) - 1)``. A block that contains a NaN or ±Inf
is a NaN block: exponent ``-2^(E-1)``, all mantissas 0. ``-0.0`` quantises to mantissa 0.

OCP E8M0
--------
An OCP MX block of integer elements has value ``P · 2^(S - 127) · 2^-(W - 2)`` for scale byte
``S`` (E8M0, bias 127, ``0xFF`` = NaN) and ``W``-bit integer element ``P`` (MXINT8: ``W = 8``,
implicit element scale ``2^-6``, ``B = 32``). Since our value is ``m · 2^e`` with the same
integer mantissa, ``S = e + (W - 2) + 127`` and ``e = S - 127 - (W - 2)``. The floor rule gives
``S = floor(log2(amax)) + 127``, the OCP shared-scale rule for MXINT8 (``emax_elem = 0``).
"""

import numpy as np

__all__ = ["ROUNDINGS", "RULES", "nan_exponent", "exponent_range", "max_mantissa",
           "shared_exponent", "quantise", "quantise_with_exponent", "dequantise", "to_e8m0",
           "from_e8m0", "E8M0_NAN", "E8M0_BIAS"]

#: Rounding mode names, in :class:`lowbit.hw.common.Rounding` order.
ROUNDINGS = ("nearest", "zero", "stochastic")
#: Shared-exponent rules.
RULES = ("floor", "ceil", "ceil_lop")
#: E8M0 scale byte that encodes NaN.
E8M0_NAN = 0xFF
#: Exponent bias of E8M0.
E8M0_BIAS = 127


def _check_int(name, value, lo, hi):
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer between {lo} and {hi}, not {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer between {lo} and {hi}, not {value!r}")
    return int(value)


def _check_choice(name, value, choices):
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {', '.join(choices)}, not {value!r}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, not {value!r}")
    return value


def nan_exponent(exp_bits=8):
    """The reserved NaN exponent code ``-2^(E-1)``."""
    exp_bits = _check_int("Exponent width", exp_bits, 2, 16)
    return -(1 << (exp_bits - 1))


def exponent_range(exp_bits=8):
    """``(e_min, e_max) = (-2^(E-1) + 1, 2^(E-1) - 1)``, the finite exponents."""
    exp_bits = _check_int("Exponent width", exp_bits, 2, 16)
    return -(1 << (exp_bits - 1)) + 1, (1 << (exp_bits - 1)) - 1


def max_mantissa(width):
    """``2^(W-1) - 1``, the saturation magnitude of a ``W``-bit mantissa."""
    width = _check_int("Mantissa width", width, 2, 32)
    return (1 << (width - 1)) - 1


def _unclamped_exponent(amax, width, rule):
    """Exact rule exponent of finite, non-negative ``amax`` (0 where ``amax == 0``)."""
    frac, k = np.frexp(amax)            # amax = frac · 2^k, frac in [0.5, 1)
    k = k.astype(np.int64)
    e = k - (width - 1)                 # floor(log2(amax)) - (W - 2), as floor(log2) = k - 1
    if rule == "ceil":
        # amax · 2^-e = frac · 2^(W-1) exactly; it must not exceed 2^(W-1) - 1.
        e = e + (np.ldexp(frac, width - 1) > (1 << (width - 1)) - 1)
    elif rule == "ceil_lop":
        # ceil(log2(amax)) = floor(log2(amax)) + 1 unless amax is a power of two (frac = 1/2).
        e = e + (frac != 0.5)
    return np.where(amax == 0, 0, e)


def shared_exponent(amax, *, width, exp_bits=8, rule="floor"):
    """Shared exponent of blocks with largest magnitude ``amax``.

    Parameters
    ----------
    amax : array_like of float
        Largest magnitude of each block (non-negative; NaN or ±Inf marks a NaN block).
    width : int
        Mantissa width ``W`` (2..32).
    exp_bits : int
        Exponent width ``E`` (2..16).
    rule : {"floor", "ceil", "ceil_lop"}
        Exponent rule (see the module docstring). The all-zero block gets 0 and a NaN block
        the NaN code under every rule.

    Returns
    -------
    numpy.ndarray of int64
        Exponents, clamped to the finite range; ``-2^(E-1)`` for NaN blocks; 0 for ``amax == 0``.

    Raises
    ------
    TypeError, ValueError
        For bad parameters, or a negative ``amax``.
    """
    width = _check_int("Mantissa width", width, 2, 32)
    e_min, e_max = exponent_range(exp_bits)
    rule = _check_choice("Exponent rule", rule, RULES)
    amax = np.asarray(amax, dtype=np.float64)
    if np.any(amax < 0):
        raise ValueError("amax must be non-negative")
    finite = np.isfinite(amax)
    e = _unclamped_exponent(np.where(finite, amax, 0.0), width, rule)
    e = np.clip(e, e_min, e_max)
    return np.where(finite, e, nan_exponent(exp_bits)).astype(np.int64)


def _round(t, x, rounding, rand, rand_bits):
    """Round the exactly scaled ``t = x · 2^-e`` to integers (float64 holding integers)."""
    if rounding == "nearest":
        return np.rint(t)
    if rounding == "zero":
        return np.trunc(t)
    # Stochastic: floor(t + d), d = r · 2^-R in [0, 1), without a rounding addition.
    d = np.ldexp(rand.astype(np.float64), -rand_bits)
    a = np.abs(t)
    n = np.floor(a)
    g = a - n                            # exact: fractional part of a non-negative float
    # A non-zero x whose t underflowed to 0 has a tiny, positive g (smaller than any d > 0).
    tiny = (t == 0) & (x != 0)
    pos = n + (g >= 1 - d)               # t >= 0: floor(n + g + d) = n + [g + d >= 1]
    neg = -(n + ((g > d) | (tiny & (d == 0))))  # t < 0: floor(-n - g + d) = -n - [g > d]
    return np.where(np.signbit(t) & (x != 0), neg, pos)


def _check_rand(rounding, rand, rand_bits, shape):
    if rounding != "stochastic":
        return None, None
    rand_bits = _check_int("Random bit count", rand_bits, 1, 53)
    if rand is None:
        raise ValueError("Stochastic rounding needs rand, an integer array shaped like x")
    rand = np.asarray(rand)
    if not np.issubdtype(rand.dtype, np.integer):
        raise TypeError(f"rand must be an integer array, not {rand.dtype}")
    if rand.shape != shape:
        raise ValueError(f"rand must have the shape of x {shape}, not {rand.shape}")
    if rand.size and (rand.min() < 0 or rand.max() >= (1 << rand_bits)):
        raise ValueError(f"rand values must be in [0, 2^{rand_bits})")
    return rand.astype(np.int64), rand_bits


def quantise_with_exponent(x, exponents, *, width=8, exp_bits=8, rounding="nearest", rand=None,
                           rand_bits=None, overflow="saturate"):
    """Mantissas of the blocks of ``x`` for given shared exponents.

    Parameters
    ----------
    x : array_like of float, shape (..., nb, B)
        Blocked values.
    exponents : array_like of int, shape (..., nb)
        Finite exponents, or the NaN code (whose blocks get mantissas 0).
    width, exp_bits, rounding, rand, rand_bits
        As for :func:`quantise`; ``rand`` has the shape of ``x``.
    overflow : {"saturate", "wrap"}
        ``"saturate"`` (the format's rule) clamps to ``±(2^(W-1) - 1)``; ``"wrap"`` keeps the
        low ``W`` bits as a two's-complement number (seed 002 Table 2, exponent −3 row) and is
        only for reproducing that table.

    Returns
    -------
    numpy.ndarray of int64, shape (..., nb, B)
    """
    width = _check_int("Mantissa width", width, 2, 32)
    e_min, e_max = exponent_range(exp_bits)
    rounding = _check_choice("Rounding", rounding, ROUNDINGS)
    overflow = _check_choice("Overflow", overflow, ("saturate", "wrap"))
    x = np.asarray(x, dtype=np.float64)
    if x.ndim < 1:
        raise ValueError("x must have a block axis")
    rand, rand_bits = _check_rand(rounding, rand, rand_bits, x.shape)
    e = np.asarray(exponents)
    if not np.issubdtype(e.dtype, np.integer):
        raise TypeError(f"Exponents must be integers, not {e.dtype}")
    e = e.astype(np.int64)
    if e.shape != x.shape[:-1]:
        raise ValueError(f"Exponents must have shape {x.shape[:-1]}, not {e.shape}")
    nan_block = e == nan_exponent(exp_bits)
    if np.any(~nan_block & ((e < e_min) | (e > e_max))):
        raise ValueError(f"Exponents must be in [{e_min}, {e_max}] or the NaN code")
    nan_block = nan_block | np.any(~np.isfinite(x), axis=-1)
    xs = np.where(nan_block[..., None], 0.0, x)
    t = np.ldexp(xs, -np.where(nan_block, 0, e)[..., None])
    mx = max_mantissa(width)
    if overflow == "saturate":
        t = np.clip(t, -mx, mx)         # rounding is monotone and ±mx are integers
        m = _round(t, xs, rounding, rand, rand_bits).astype(np.int64)
    else:
        r = _round(t, xs, rounding, rand, rand_bits)
        r = np.fmod(r, 2.0 ** 53).astype(np.int64)   # exact mod 2^W below needs |r| < 2^63
        m = ((r + (1 << (width - 1))) & ((1 << width) - 1)) - (1 << (width - 1))
    return np.where(nan_block[..., None], 0, m).astype(np.int64)


def quantise(x, *, block=16, width=8, exp_bits=8, rule="floor", rounding="nearest", rand=None,
             rand_bits=None):
    """Quantise ``x`` to BFP blocks of ``block`` consecutive elements along the last axis.

    Parameters
    ----------
    x : array_like of float, shape (..., n)
        Values; ``n`` must be a multiple of ``block``.
    block : int
        Block size ``B`` (1..4096).
    width : int
        Mantissa width ``W`` (2..32), sign included.
    exp_bits : int
        Exponent width ``E`` (2..16).
    rule : {"floor", "ceil", "ceil_lop"}
        Shared-exponent rule (module docstring): ``"floor"`` ``floor(log2 amax) - (W - 2)``,
        ``"ceil"`` ``ceil(log2(amax / (2^(W-1) - 1)))``, ``"ceil_lop"``
        ``ceil(log2 amax) - (W - 2)``; 0 for an all-zero block, the NaN code for a block with
        a NaN or ±Inf, whatever the rule.
    rounding : {"nearest", "zero", "stochastic"}
        Mantissa rounding: half to even, toward zero, or ``floor(t + r · 2^-R)``.
    rand : array_like of int, shape (..., n), optional
        Random integers in ``[0, 2^R)`` for stochastic rounding (required for it).
    rand_bits : int, optional
        ``R`` (1..53), required for stochastic rounding.

    Returns
    -------
    mantissas : numpy.ndarray of int64, shape (..., n // block, block)
    exponents : numpy.ndarray of int64, shape (..., n // block)

    Raises
    ------
    TypeError
        For a parameter of the wrong kind (e.g. a bool or float width).
    ValueError
        For a bad value, a length that is not a multiple of ``block``, or missing / out-of-range
        random numbers.
    """
    block = _check_int("Block size", block, 1, 4096)
    width = _check_int("Mantissa width", width, 2, 32)
    _check_int("Exponent width", exp_bits, 2, 16)
    rule = _check_choice("Exponent rule", rule, RULES)
    rounding = _check_choice("Rounding", rounding, ROUNDINGS)
    x = np.asarray(x, dtype=np.float64)
    if x.ndim < 1:
        raise ValueError("x must have at least one axis")
    n = x.shape[-1]
    if n % block:
        raise ValueError(f"Length {n} of the last axis is not a multiple of the block size "
                         f"{block}")
    rand, rand_bits = _check_rand(rounding, rand, rand_bits, x.shape)
    shape = (*x.shape[:-1], n // block, block)
    xb = x.reshape(shape)
    with np.errstate(invalid="ignore"):
        amax = np.max(np.abs(xb), axis=-1, initial=0.0)
    amax = np.where(np.any(~np.isfinite(xb), axis=-1), np.nan, amax)
    e = shared_exponent(amax, width=width, exp_bits=exp_bits, rule=rule)
    m = quantise_with_exponent(xb, e, width=width, exp_bits=exp_bits, rounding=rounding,
                               rand=None if rand is None else rand.reshape(shape),
                               rand_bits=rand_bits)
    return m, e


def dequantise(mantissas, exponents, *, exp_bits=8):
    """Values ``m · 2^e`` of BFP blocks, as float64 shaped like the quantised input.

    Parameters
    ----------
    mantissas : array_like of int, shape (..., nb, B)
    exponents : array_like of int, shape (..., nb)
        The NaN code ``-2^(E-1)`` makes every element of its block NaN.
    exp_bits : int
        Exponent width ``E``.

    Returns
    -------
    numpy.ndarray of float64, shape (..., nb · B)
        Exact (``m · 2^e`` is a binary64 number for ``|m| < 2^53`` unless it overflows to ±Inf).
    """
    nan = nan_exponent(exp_bits)
    m = np.asarray(mantissas)
    e = np.asarray(exponents)
    if not (np.issubdtype(m.dtype, np.integer) and np.issubdtype(e.dtype, np.integer)):
        raise TypeError("Mantissas and exponents must be integer arrays")
    if m.ndim < 2 or e.shape != m.shape[:-1]:
        raise ValueError(f"Exponents of shape {e.shape} do not match mantissas of shape "
                         f"{m.shape}")
    e = e.astype(np.int64)
    v = np.ldexp(m.astype(np.float64), np.where(e == nan, 0, e)[..., None])
    v = np.where((e == nan)[..., None], np.nan, v)
    return v.reshape(*m.shape[:-2], m.shape[-2] * m.shape[-1])


def to_e8m0(exponents, *, width, exp_bits=8):
    """OCP E8M0 scale bytes ``S = e + (W - 2) + 127`` of shared exponents (NaN code → 0xFF).

    Raises
    ------
    ValueError
        If a finite exponent maps outside ``[0, 254]`` (not representable in E8M0).
    """
    width = _check_int("Mantissa width", width, 2, 32)
    e = np.asarray(exponents)
    if not np.issubdtype(e.dtype, np.integer):
        raise TypeError(f"Exponents must be integers, not {e.dtype}")
    e = e.astype(np.int64)
    nan = e == nan_exponent(exp_bits)
    s = e + (width - 2) + E8M0_BIAS
    if np.any(~nan & ((s < 0) | (s > 254))):
        raise ValueError(f"Exponents must be in [{-E8M0_BIAS - width + 2}, "
                         f"{127 - width + 2}] to be an E8M0 scale for W={width}")
    return np.where(nan, E8M0_NAN, s).astype(np.uint8)


def from_e8m0(scale_bytes, *, width, exp_bits=8):
    """Shared exponents ``e = S - 127 - (W - 2)`` of OCP E8M0 scale bytes (0xFF → NaN code).

    Raises
    ------
    ValueError
        If a byte is outside ``[0, 255]`` or its exponent does not fit in ``exp_bits`` (e.g. the
        smallest E8M0 scales need ``exp_bits=9`` for ``W=8``).
    """
    width = _check_int("Mantissa width", width, 2, 32)
    e_min, e_max = exponent_range(exp_bits)
    s = np.asarray(scale_bytes)
    if not np.issubdtype(s.dtype, np.integer):
        raise TypeError(f"Scale bytes must be integers, not {s.dtype}")
    s = s.astype(np.int64)
    if np.any((s < 0) | (s > 255)):
        raise ValueError("Scale bytes must be in [0, 255]")
    nan = s == E8M0_NAN
    e = s - E8M0_BIAS - (width - 2)
    if np.any(~nan & ((e < e_min) | (e > e_max))):
        raise ValueError(f"Scale bytes map outside the exponent range [{e_min}, {e_max}] of "
                         f"exp_bits={exp_bits}")
    return np.where(nan, nan_exponent(exp_bits), e).astype(np.int64)
