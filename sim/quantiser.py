"""Golden model of the stochastic quantiser (DESIGN §3.4): f16 or fixed point to BFP, int8, codes.

Inputs
------
* **f16**: raw IEEE 754 binary16 codes (``uint16``). :func:`decode_f16` turns them into exact
  float64 values: ±0 both give 0, subnormals are exact, ±Inf and NaN stay ±Inf and NaN.
* **fixed**: signed two's-complement integers ``v`` of ``width`` bits with ``frac_bits``
  fraction bits, value ``v · 2^-frac_bits`` (:func:`decode_fixed`, exact for widths ≤ 53).

All arithmetic below is on exact values (float64 holds every product involved exactly).

Targets
-------
* **BFP** (:func:`quantise_bfp`): delegated to :func:`lowbit.sim.bfp.quantise`, the project's single
  BFP rule (shared exponent "floor" or "ceil"; NaN/±Inf make the block NaN with exponent
  ``-2^(E-1)`` and zero mantissas; all-zero block → exponent 0; mantissas rounded then saturated
  to ±(2^(W-1)-1)). Blocks are ``block`` consecutive elements of the flattened stream.
* **int8** (:func:`quantise_int8`): ``q = clamp(round(x · mult · 2^-shift) + zero, -128, 127)``.
  ``mult = 1`` is a power-of-two scale ``2^shift``; an affine scale ``s`` with zero point ``z``
  uses ``(mult, shift) = affine_scale(s)`` so that ``mult · 2^-shift ≈ 1/s``. The rounding is
  applied to the exact product before the zero point is added. NaN → ``zero`` (the code of 0);
  +Inf → 127; −Inf → −128.
* **discrete codes** (:func:`quantise_discrete`): delegated to :func:`lowbit.sim.discrete.to_codes`.

Rounding (``rounding``)
-----------------------
* ``"nearest"``: to nearest, ties to even.
* ``"zero"``: toward zero (truncation of the magnitude).
* ``"stochastic"``: ``floor(t + r · 2^-R)`` with ``r`` the element's ``R``-bit random integer
  (``rand``, one per element in stream order, ``R = rand_bits``). Because
  ``floor(t + r/2^R) = floor((floor(t · 2^R) + r) / 2^R)``, only ``floor(t · 2^R)`` matters; the
  mean over uniform ``r`` is ``floor(t · 2^R) / 2^R``, so the bias is in ``(-2^-R, 0]`` of an ulp
  and zero when ``t`` is a multiple of ``2^-R``.

Saturation is applied after rounding (BFP: ±(2^(W-1)-1), symmetric; int8: [-128, 127] after
the zero point). This module never imports Amaranth.
"""

import math

import numpy as np

__all__ = ["ROUNDINGS", "decode_f16", "decode_fixed", "round_scaled", "affine_scale",
           "quantise_int8", "quantise_bfp", "quantise_discrete", "dequantise_int8"]

#: Rounding mode names, in the order of :class:`lowbit.hw.common.Rounding`.
ROUNDINGS = ("nearest", "zero", "stochastic")


def _check_int(value, what, lo, hi):
    if not isinstance(value, int | np.integer) or isinstance(value, bool | np.bool_):
        raise TypeError(f"{what} must be an integer between {lo} and {hi}, not {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{what} must be an integer between {lo} and {hi}, not {value}")
    return int(value)


def _check_rounding(rounding):
    if rounding not in ROUNDINGS:
        raise ValueError(f"Rounding must be one of {', '.join(ROUNDINGS)}, not {rounding!r}")


def _check_rand(rand, shape, rand_bits):
    _check_int(rand_bits, "Random bit count", 1, 32)
    if rand is None:
        raise ValueError("Stochastic rounding needs rand, one random integer per element")
    rand = np.asarray(rand)
    if rand.shape != shape:
        raise ValueError(f"rand must have the shape of x {shape}, not {rand.shape}")
    if not np.issubdtype(rand.dtype, np.integer):
        raise TypeError(f"rand must be an integer array, not {rand.dtype}")
    rand = rand.astype(np.int64)
    if rand.size and (rand.min() < 0 or rand.max() >= 1 << rand_bits):
        raise ValueError(f"rand values must be in [0, 2^{rand_bits})")
    return rand


def decode_f16(codes):
    """Exact float64 values of raw binary16 codes (any integer array of values 0..65535)."""
    codes = np.asarray(codes)
    if not np.issubdtype(codes.dtype, np.integer):
        raise TypeError(f"f16 codes must be an integer array, not {codes.dtype}")
    if codes.size and (codes.min() < 0 or codes.max() > 0xFFFF):
        raise ValueError("f16 codes must be in 0..65535")
    return codes.astype(np.uint16).view(np.float16).astype(np.float64)


def decode_fixed(values, frac_bits, width=None):
    """Exact float64 values ``v · 2^-frac_bits`` of signed fixed-point integers.

    Raises
    ------
    ValueError
        If a value does not fit ``width`` signed bits (when given) or float64 exactly.
    """
    values = np.asarray(values)
    if not np.issubdtype(values.dtype, np.integer):
        raise TypeError(f"Fixed-point values must be an integer array, not {values.dtype}")
    _check_int(frac_bits, "Fraction bit count", 0, 64)
    bits = 53 if width is None else _check_int(width, "Fixed-point width", 2, 53)
    values = values.astype(np.int64)
    if values.size and (values.min() < -(1 << (bits - 1)) or values.max() >= 1 << (bits - 1)):
        raise ValueError(f"Fixed-point values must fit {bits} signed bits")
    return np.ldexp(values.astype(np.float64), -frac_bits)


def round_scaled(t, rounding, *, rand=None, rand_bits=8):
    """Round the exact float64 values ``t`` to integers (as float64) by ``rounding``.

    Non-finite values pass through. See the module docstring for the modes.
    """
    _check_rounding(rounding)
    t = np.asarray(t, dtype=np.float64)
    if rounding == "nearest":
        return np.rint(t)
    if rounding == "zero":
        return np.trunc(t)
    rand = _check_rand(rand, t.shape, rand_bits)
    with np.errstate(invalid="ignore"):
        scaled = np.floor(np.ldexp(t, rand_bits))
        return np.floor(np.ldexp(scaled + rand, -rand_bits))


def affine_scale(scale, mult_bits=12):
    """Multiplier and shift with ``mult · 2^-shift ≈ 1/scale`` and ``mult`` of ``mult_bits`` bits.

    ``mult`` is rounded to nearest and lies in ``[2^(mult_bits-1), 2^mult_bits)``.

    Raises
    ------
    ValueError
        If ``scale`` is not a positive finite number.
    """
    _check_int(mult_bits, "Multiplier width", 1, 32)
    scale = float(scale)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"Scale must be a positive finite number, not {scale}")
    frac, exp = math.frexp(1.0 / scale)  # 1/scale = frac · 2^exp, frac in [0.5, 1)
    mult = round(frac * (1 << mult_bits))
    shift = mult_bits - exp
    if mult == 1 << mult_bits:
        mult >>= 1
        shift -= 1
    return mult, shift


def quantise_int8(x, *, shift=0, mult=1, zero=0, rounding="nearest", rand=None, rand_bits=8):
    """``clamp(round(x · mult · 2^-shift) + zero, -128, 127)`` as int8 codes (int64 array).

    Parameters
    ----------
    x : array of float
        Exact input values (from :func:`decode_f16` or :func:`decode_fixed`).
    shift : int
        Scale exponent; with ``mult = 1`` the scale is ``2^shift``.
    mult : int
        Positive multiplier (``1..2^32-1``) of the affine scale.
    zero : int
        Zero point, ``-128..127``.
    rounding : str
        ``"nearest"``, ``"zero"`` or ``"stochastic"``.
    rand : array of int, optional
        ``rand_bits``-bit random integers, one per element (stochastic rounding only).

    Raises
    ------
    TypeError, ValueError
        For bad parameters or a ``rand`` of the wrong shape or range.
    """
    _check_int(shift, "Shift", -1024, 1024)
    mult = _check_int(mult, "Multiplier", 1, (1 << 32) - 1)
    zero = _check_int(zero, "Zero point", -128, 127)
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore"):     # signalling NaNs from f16 codes
        t = np.ldexp(x * mult, -shift)
        r = round_scaled(t, rounding, rand=rand, rand_bits=rand_bits)
        q = np.where(np.isnan(x), zero, np.clip(r + zero, -128, 127))
    return q.astype(np.int64)


def dequantise_int8(q, *, shift=0, mult=1, zero=0):
    """Real values ``(q - zero) · 2^shift / mult`` of int8 codes."""
    q = np.asarray(q, dtype=np.float64)
    return np.ldexp(q - zero, shift) / mult


def quantise_bfp(x, *, block=16, width=8, exp_bits=8, rule="floor", rounding="nearest",
                 rand=None, rand_bits=8):
    """BFP quantisation of the flattened ``x`` in blocks of ``block`` consecutive elements.

    Thin wrapper over :func:`lowbit.sim.bfp.quantise` (the single BFP rule of the project).

    Returns
    -------
    mantissas : int64 array, shape of ``x``
    exponents : int64 array, one per block
    """
    from lowbit.sim import bfp

    x = np.asarray(x, dtype=np.float64)
    if rounding == "stochastic":
        rand = _check_rand(rand, x.shape, rand_bits)
        rand = rand.reshape(-1)
    mant, exps = bfp.quantise(x.reshape(-1), block=block, width=width, exp_bits=exp_bits,
                              rule=rule, rounding=rounding, rand=rand, rand_bits=rand_bits)
    return (np.asarray(mant, dtype=np.int64).reshape(x.shape),
            np.asarray(exps, dtype=np.int64).reshape(-1))


def quantise_discrete(x, book, *, mode="nearest", rand=None, rand_bits=None):
    """Discrete codes of ``x`` from code book ``book``: :func:`lowbit.sim.discrete.to_codes` (clip
    to
    ±zone, nearest with ties to the lowest code, or the seed-001 stochastic choice between the
    two neighbouring code values), with the f16 special values defined: ±Inf clip to the outer
    codes like any large value, and NaN is converted as 0 (``to_codes`` itself rejects NaN).
    ``rand_bits`` is required in stochastic mode only."""
    from lowbit.sim import discrete

    x = np.asarray(x, dtype=np.float64)
    x = np.where(np.isnan(x), 0.0, x)
    return np.asarray(discrete.to_codes(x, book, mode=mode, rand=rand, rand_bits=rand_bits))
