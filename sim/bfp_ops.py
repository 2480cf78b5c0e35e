"""Element-wise BFP operations of seed 002's Table 1: M + V, M − V and M ÷ V (golden models).

Seed 002 lists, besides M × V (:mod:`lowbit.sim.bfp_column`), how the units of its BFP unit
change for the other matrix operations (Table 1 is missing from the text; digest §3.4
reconstructs it from [0053], [0056], [0162], [0166]): for M + V and M − V the **exponent
subtractor** gives the exponent difference, the **mantissa shifter** aligns one operand's
mantissas to the other's exponent, the adder adds or subtracts, and the output exponent is
"increased accordingly" (a carry out of the top bit) or "decreased accordingly" (cancellation);
for M ÷ V the mantissas are divided and the exponents **subtracted**. Pure NumPy; never imports
Amaranth.

Operands are BFP blocks as :func:`lowbit.sim.bfp.quantise` gives them: mantissas ``(..., nb,
B)`` (``W``-bit two's-complement integers, ``|m| <= 2^(W-1)``) and one exponent per block
``(..., nb)``, the NaN code ``-2^(E-1)`` marking a NaN block. Both operands
have the same shape (NumPy broadcasting applies, so a vector can be added to every row of a
matrix); the result has one exponent per block of the same blocking.

:func:`add` (``subtract=False``: a + b; ``True``: a − b) is the arithmetic of the BFP column's
bias path (:mod:`lowbit.sim.bfp_column`, ``docs/bfp.md`` §2), so the column computes it bit for
bit as ``(±I)·b + a`` (identity weights of exponent 0, ``x = b``, bias ``a``):

1. NaN: a block pair in which either exponent is the NaN code gives a NaN block (exponent
   ``-2^(E-1)``, mantissas 0).
2. Exponent subtractor and shifter, per element: ``c_a = a · 2^F``, ``c_b = ±b · 2^F``
   (``F = guard_bits``; ``-b`` is negated **before** alignment). If one of them is 0 the other
   is taken exactly with its own exponent; else both are aligned to ``e = max(e_a, e_b)`` by an
   arithmetic (floor) right shift of the one with the smaller exponent by the difference, and
   added: ``A = (c_a >> (e - e_a)) + (c_b >> (e - e_b))`` with exponent ``e``, value
   ``A · 2^(e - F)``. Bits below ``2^(e - F)`` of the smaller operand are the only ones
   dropped (none when the exponents differ by at most ``F``).
3. Output exponent selector (the max rule of the column, = the "floor" rule on the sums):
   ``e_out = max_i(bitlen|A_i| + e_i) - F - (W - 1)`` over the non-zero elements of the block
   (0 if every sum is 0), clamped to ``[-2^(E-1) + 1, 2^(E-1) - 1]``. A carry out raises it
   by one over the operands' rule exponent, cancellation lowers it.
4. Output mantissa shifter: ``s = e_out - e_i + F``; ``s <= 0``: exact left shift; ``s > 0``:
   right shift rounded to nearest (ties to even), toward zero, or stochastically
   ``floor(A / 2^s + r / 2^R)`` with one ``R``-bit integer ``r`` per element (``rand``).
5. Saturation to ``±(2^(W-1) - 1)``.

:func:`divide` (a ÷ b, element by element) rounds the exact quotient once:

1. NaN: a NaN block on either side, or **any zero divisor** in the block pair (x/0 and 0/0
   have no finite value and the format has no ±Inf), gives a NaN block.
2. Exponent subtractor ``e_q = e_a - e_b``; the quotients ``q_i = a_i / b_i`` are exact
   rationals, value ``q_i · 2^e_q``.
3. Output exponent: the "floor" rule on the exact quotients,
   ``e_out = floor(log2 max_i |q_i|) + e_q - (W - 2)``; 0 if every ``a_i`` is 0; clamped as
   above.
4. Mantissas: ``t_i = q_i · 2^(e_q - e_out)`` rounded from the exact rational (nearest with
   ties to even, toward zero, or ``floor(t + r / 2^R)``), then saturated to
   ``±(2^(W-1) - 1)`` (nearest or stochastic rounding of the largest quotient can reach
   ``2^(W-1)``, as with the floor rule of :func:`lowbit.sim.bfp.quantise`).
"""

import numpy as np

from lowbit.sim.bfp import ROUNDINGS, _check_int, exponent_range, nan_exponent

__all__ = ["add", "divide"]


def _operands(a_m, a_e, b_m, b_e, exp_bits):
    arrays = [np.asarray(v) for v in (a_m, a_e, b_m, b_e)]
    for v in arrays:
        if not np.issubdtype(v.dtype, np.integer):
            raise TypeError(f"Mantissas and exponents must be integer arrays, not {v.dtype}")
    a_m, a_e, b_m, b_e = (v.astype(np.int64) for v in arrays)
    if a_m.ndim < 2 or a_e.shape != a_m.shape[:-1] or b_m.ndim < 2 or \
            b_e.shape != b_m.shape[:-1]:
        raise ValueError("Mantissas must be shaped (..., nb, B) and exponents (..., nb)")
    a_m, b_m = np.broadcast_arrays(a_m, b_m)
    a_e, b_e = np.broadcast_arrays(a_e, b_e)
    e_min, e_max = exponent_range(exp_bits)
    nan_code = nan_exponent(exp_bits)
    for e in (a_e, b_e):
        if np.any((e != nan_code) & ((e < e_min) | (e > e_max))):
            raise ValueError(f"Exponents must be in [{e_min}, {e_max}] or the NaN code")
    return a_m, a_e, b_m, b_e, (a_e == nan_code) | (b_e == nan_code)


def _rand(rounding, rand, rand_bits, shape):
    if rounding not in ROUNDINGS:
        raise ValueError(f"Rounding must be one of {', '.join(ROUNDINGS)}, not {rounding!r}")
    if rounding != "stochastic":
        return np.zeros(shape, dtype=np.int64), 1
    rand_bits = _check_int("Random bit count", rand_bits, 1, 16)
    if rand is None:
        raise ValueError("Stochastic rounding needs rand, one integer per element")
    rand = np.asarray(rand)
    if not np.issubdtype(rand.dtype, np.integer) or rand.shape != shape:
        raise ValueError(f"rand must be an integer array of shape {shape}")
    if rand.size and (rand.min() < 0 or rand.max() >= 1 << rand_bits):
        raise ValueError(f"rand values must be in [0, 2^{rand_bits})")
    return rand.astype(np.int64), rand_bits


def _bitlen(v):
    """Bit length of non-negative int64 values below 2^53."""
    _, k = np.frexp(v.astype(np.float64))
    return np.where(v == 0, 0, k).astype(np.int64)


def add(a_m, a_e, b_m, b_e, *, width=8, exp_bits=8, guard_bits=3, rounding="nearest", rand=None,
        rand_bits=8, subtract=False):
    """``a + b`` (or ``a - b``) of BFP blocks, as the column's bias path computes it.

    Parameters
    ----------
    a_m, b_m : array_like of int, shape (..., nb, B)
        Mantissas, ``W``-bit two's complement (``|m| <= 2^(width - 1)``).
    a_e, b_e : array_like of int, shape (..., nb)
        Block exponents (finite or the NaN code).
    width : int
        Output mantissa width ``W`` (2..16).
    exp_bits : int
        Exponent width ``E`` (2..16).
    guard_bits : int
        Fraction guard bits ``F`` of the aligned sum (0..8; the column's ``frac_bits``).
    rounding : {"nearest", "zero", "stochastic"}
    rand : array_like of int, optional
        One ``rand_bits``-bit integer per element (stochastic rounding).
    rand_bits : int
        ``R`` (1..16).
    subtract : bool
        ``a - b`` instead of ``a + b``.

    Returns
    -------
    mantissas : numpy.ndarray of int64, shape (..., nb, B)
    exponents : numpy.ndarray of int64, shape (..., nb)
    """
    width = _check_int("Mantissa width", width, 2, 16)
    f = _check_int("Guard bit count", guard_bits, 0, 8)
    if not isinstance(subtract, bool):
        raise TypeError(f"subtract must be a bool, not {subtract!r}")
    a_m, a_e, b_m, b_e, nan = _operands(a_m, a_e, b_m, b_e, exp_bits)
    lim = 1 << (width - 1)
    if np.any(np.abs(a_m) > lim) or np.any(np.abs(b_m) > lim):
        raise ValueError(f"Mantissas must fit {width} signed bits")
    rand, rbits = _rand(rounding, rand, rand_bits, a_m.shape)
    e_min, e_max = exponent_range(exp_bits)
    ea = np.broadcast_to(a_e[..., None], a_m.shape)
    eb = np.broadcast_to(b_e[..., None], b_m.shape)
    ca = a_m << f
    cb = (-b_m if subtract else b_m) << f
    e = np.maximum(ea, eb)
    # Shifts beyond 62 give the same floor (0 or -1) as 62: |c| < 2^(16 + 8).
    s_a, s_b = np.minimum(e - ea, 62), np.minimum(e - eb, 62)
    acc = np.where(ca == 0, cb, np.where(cb == 0, ca, (ca >> s_a) + (cb >> s_b)))
    e_acc = np.where(ca == 0, eb, np.where(cb == 0, ea, e))
    # Output exponent: the max rule over the block's non-zero sums.
    top = np.where(acc == 0, np.iinfo(np.int64).min // 2, _bitlen(np.abs(acc)) + e_acc)
    zero = (acc == 0).all(axis=-1)
    e_out = np.where(zero, 0, top.max(axis=-1) - f - (width - 1))
    e_out = np.clip(e_out, e_min, e_max)
    s = e_out[..., None] - e_acc + f
    # Right shifts: every shift of at least bitlen + R + 1 rounds as that one does.
    sr = np.clip(s, 1, 16 + 8 + rbits + 2)
    if rounding == "nearest":
        q = (acc + ((1 << (sr - 1)) - 1) + ((acc >> sr) & 1)) >> sr
    elif rounding == "zero":
        q = (acc + np.where(acc < 0, (1 << sr) - 1, 0)) >> sr
    else:
        fl = acc >> sr
        rem = acc - (fl << sr)                              # in [0, 2^sr)
        q = fl + ((rem << rbits) + (rand << sr) >= 1 << (sr + rbits))
    mx = lim - 1
    left = np.clip(acc, -lim, lim) << np.clip(-s, 0, width + 1)
    q = np.where(s <= 0, left, q)
    m = np.clip(q, -mx, mx)
    m = np.where(nan[..., None], 0, m)
    return m.astype(np.int64), np.where(nan, nan_exponent(exp_bits), e_out).astype(np.int64)


def _floor_log2_ratio(a, b):
    """``floor(log2(a / b))`` of positive Python integers."""
    k = a.bit_length() - b.bit_length()
    return k if (a << max(-k, 0)) >= (b << max(k, 0)) else k - 1


def _round_ratio(num, den, rounding, r, rbits):
    """Round ``num / den`` (``den > 0``) to an integer."""
    q, rem = divmod(num, den)                      # floor division, 0 <= rem < den
    if rounding == "nearest":
        return q + (2 * rem > den or (2 * rem == den and q % 2 == 1))
    if rounding == "zero":
        return q + (num < 0 and rem != 0)
    return q + ((rem << rbits) + r * den >= den << rbits)


def divide(a_m, a_e, b_m, b_e, *, width=8, exp_bits=8, rounding="nearest", rand=None,
           rand_bits=8):
    """``a / b`` of BFP blocks, element by element, rounded once from the exact quotient.

    Parameters and returns as :func:`add` (without ``guard_bits`` and ``subtract``); the
    rules are in the module docstring (a zero divisor makes its block NaN).
    """
    width = _check_int("Mantissa width", width, 2, 16)
    a_m, a_e, b_m, b_e, nan = _operands(a_m, a_e, b_m, b_e, exp_bits)
    rand, rbits = _rand(rounding, rand, rand_bits, a_m.shape)
    nan = nan | (b_m == 0).any(axis=-1)
    e_min, e_max = exponent_range(exp_bits)
    mx = (1 << (width - 1)) - 1
    m = np.zeros(a_m.shape, dtype=np.int64)
    e_out = np.zeros(a_e.shape, dtype=np.int64)
    for blk in np.ndindex(a_e.shape):
        if nan[blk]:
            e_out[blk] = nan_exponent(exp_bits)
            continue
        num = [int(v) for v in a_m[blk]]
        den = [int(v) for v in b_m[blk]]
        e_q = int(a_e[blk]) - int(b_e[blk])
        lops = [_floor_log2_ratio(abs(x), abs(y)) for x, y in zip(num, den, strict=True) if x]
        if not lops:
            continue                                   # every quotient 0: e = 0, mantissas 0
        e = min(max(max(lops) + e_q - (width - 2), e_min), e_max)
        e_out[blk] = e
        k = e_q - e
        for i, (x, y) in enumerate(zip(num, den, strict=True)):
            if y < 0:
                x, y = -x, -y
            t = _round_ratio(x << max(k, 0), y << max(-k, 0), rounding, int(rand[blk][i]),
                             rbits)
            m[blk][i] = min(max(t, -mx), mx)
    return m, e_out
