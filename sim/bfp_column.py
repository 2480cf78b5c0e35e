"""Golden model of the BFP systolic MAC column (DESIGN §3.2), and a float64 reference.

Pure NumPy / Python integers; never imports Amaranth. :class:`hw.bfp.BFPColumn` matches
:meth:`ColumnModel.matvec` bit for bit.

Arithmetic
----------
The column computes ``y = M · x + b`` for an ``N × K`` weight matrix, ``K = nb · B``. Weights are
BFP blocks along the reduction axis: row ``i`` of block ``k`` has mantissas
``M[i, kB:(k+1)B]`` (signed, ``W_max`` bits) and exponent ``eM[i, k]``; the vector block ``k``
has mantissas ``x[kB:(k+1)B]`` and exponent ``ex[k]``. Exponent codes are ``E``-bit signed;
``-2^(E-1)`` is NaN.

1. **Block products, exact.** ``P[i, k] = sum_j M[i, j] · x[j]`` over the block, in
   ``PW = 2·W_max + clog2(B)`` signed bits (never overflows, also for ``-2^(W_max-1)`` inputs).
   Exponent adder: ``e3[i, k] = eM[i, k] + ex[k]`` (``E + 1`` bits, no overflow). The lane is
   NaN if either exponent is the NaN code.
2. **Accumulation across blocks** (one accumulator ``(A, ea)`` per lane, value
   ``A · 2^(ea - F)``, ``F = frac_bits`` fraction guard bits, ``A`` of
   ``AW = PW + F + clog2(max_blocks + 2)`` signed bits). Each contribution ``(P, e)`` — the block
   products in order, then the bias — is combined as ``c = P · 2^F``:

   * first block of a matrix-vector product: ``A = c, ea = e``;
   * else if ``A == 0``: ``A = c, ea = e``;
   * else if ``P == 0``: unchanged (an all-zero block never moves the exponent);
   * else if ``e > ea``: ``A = (A >> min(e - ea, AW - 1)) + c``, ``ea = e``;
   * else: ``A = A + (c >> min(ea - e, AW - 1))``.

   ``>>`` is an arithmetic shift (floor): **bits are dropped only here**, below
   ``2^(ea - F)`` of the larger exponent. ``|A|`` never exceeds
   ``(contributions) · 2^(PW - 1 + F)``, so ``AW`` bits never overflow; each combination errs by
   less than ``2^(ea - F)`` (toward −∞).
3. **Bias path** (optional): bias ``b[i]`` with exponent ``e5[i]`` is the last contribution;
   the exponent subtractor computes ``e6 = e5 - ea`` (seed 002: ``e6 = e5 - e3``) and the bias
   shifter / bias adder are the combiner's shifter and adder above.
4. **Output exponent selector** ``e4``: ``"max"``: ``max_i (bitlen(|A_i|) + ea_i) - F - (W - 1)``
   over lanes with ``A_i != 0`` (= the floor rule ``floor(log2(max|y|)) - (W - 2)``), 0 if every
   lane is zero; ``"fixed"``: the configured exponent; ``"predicted"``: the exponent predicted
   from the running statistics of earlier products (:class:`ExponentPredictor`, which also
   defines when the max rule is used instead). Then clamped to ``[-2^(E-1)+1, 2^(E-1)-1]``.
   If any lane is NaN, the whole output block is NaN: exponent ``-2^(E-1)``, mantissas 0.
5. **Output mantissa shifter**: ``s = e4 - ea_i + F``; ``t = A_i · 2^-s``.
   ``s <= 0``: exact left shift. ``s > 0``: rounding of ``t`` with ``s`` clamped to ``AW + R``
   (larger shifts give the same result): ``"nearest"`` half to even, ``"zero"`` toward zero,
   ``"stochastic"`` ``floor(t + r · 2^-R)`` with one random ``r`` in ``[0, 2^R)`` per output
   element (``R = rand_bits``). Then symmetric saturation to ``±(2^(W-1) - 1)`` for the runtime
   ``W``.

Error bound (vs. the exact product of the dequantised operands, per output element):
``|y - y_exact| < k · 2^(ea_max - F) + 2^e4`` (``k`` contributions), and
``< k · 2^(ea_max - F) + 2^(e4 - 1)`` with nearest rounding when no element saturates, provided
``e4`` is not clamped. See :func:`error_bound`.
"""

import numpy as np

from .bfp import ROUNDINGS, dequantise, exponent_range, nan_exponent

__all__ = ["ColumnModel", "ExponentPredictor", "predict_exponent", "clog2", "reference_matvec",
           "error_bound", "EXP_MODES", "PREDICTOR_EVENTS"]

#: Output exponent selector modes, in the order of the gateware's ``exp_mode`` port.
EXP_MODES = ("max", "fixed", "predicted")
#: What the predicted selector did for a product (:attr:`ExponentPredictor.event`).
PREDICTOR_EVENTS = ("predicted", "max", "overflow", "underflow", "zero", "nan")


def clog2(n):
    """Ceiling of log2 for a positive integer (``clog2(1) == 0``)."""
    return (int(n) - 1).bit_length()


def _check_int(name, value, lo, hi):
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer between {lo} and {hi}, not {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer between {lo} and {hi}, not {value!r}")
    return int(value)


def _shift(v, d):
    """``v · 2^-d``: arithmetic (floor) right shift for ``d > 0``, exact left shift else."""
    return v >> d if d >= 0 else v << -d


def predict_exponent(mu, spread, *, k, width, frac=0, unit_exp=0):
    """Seed 002's predicted exponent: Eq. 3/4 applied to the predicted maximum ``μ + k·σ``.

    ``mu`` and ``spread`` are non-negative integers in units of ``2^(unit_exp - frac)``. Returns
    ``floor(log2((mu + k·spread) · 2^(unit_exp - frac))) - (width - 2)``, computed exactly as
    ``unit_exp + bitlen(mu + k·spread) - (width - 1 + frac)``, or ``None`` if ``mu + k·spread``
    is 0. Seed example: ``μ = 10``, ``σ = 0.5``, ``k = 3``, ``W = 16`` → −11.
    """
    p = int(mu) + int(k) * int(spread)
    if p < 0:
        raise ValueError("The predicted maximum must not be negative")
    if p == 0:
        return None
    return int(unit_exp) + p.bit_length() - (int(width) - 1 + int(frac))


class ExponentPredictor:
    """State and rules of the predicted output exponent selector (``exp_mode="predicted"``).

    Seed 002 predicts the next output block's largest magnitude from running statistics of
    earlier outputs (claims 1-5, 18-20: rolling values of the block's largest absolute value,
    their mean and standard deviation, ``μ + kσ``), applies Eq. 3/4 to the prediction, and
    clears the statistics when an overflow or underflow is detected (claims 23, 30, 31).
    Every choice below is mirrored bit for bit by :class:`hw.bfp.ExponentPredictor`.

    Sample
        One per product: ``x = max_i |m_i|``, the largest output mantissa magnitude of the
        product (after rounding and saturation, at the runtime width ``W``), in units of the
        product's exponent ``e4`` (claim 18: rolling values of the block's max absolute value).
    State
        ``count`` in ``[0, 2^a]`` (0: empty history; ``a = stat_shift``); mean ``mu`` and spread
        ``dev`` as non-negative integers with ``FS = a + 2`` fraction bits, in units of
        ``2^unit_exp``. While ``count > 0``, ``unit_exp`` *is* the exponent predicted for the
        next product (the statistics are renormalised after every update).
    Selection (:meth:`select`), for a product that is not NaN, with ``raw`` the max rule's
    exponent before clamping (``None`` if every lane is zero) and ``u`` the underflow margin:
        * the history is *usable* if ``count > 0`` and ``unit_exp`` is a finite exponent;
        * all-zero product: ``e4 = unit_exp`` if usable else 0; the history is unchanged
          (event ``"zero"``);
        * usable and ``raw <= unit_exp <= raw + u``: ``e4 = unit_exp``, the sample is added
          (event ``"predicted"``);
        * usable and ``unit_exp < raw`` (**overflow**: the largest output would need more than
          ``W - 1`` magnitude bits, i.e. it would saturate before rounding) or
          ``unit_exp > raw + u`` (**underflow**: the largest output would use fewer than
          ``W - 1 - u`` magnitude bits): the history is cleared and the product uses the max
          rule (the exponent is adjusted to avoid the overflow/underflow, claims 23/30/31);
          its sample starts the new history (events ``"overflow"``, ``"underflow"``);
        * not usable: the product uses the max rule and its sample starts a new history
          (event ``"max"``; this is also the first product after a reset).
        A NaN product (event ``"nan"``) leaves the history unchanged. The caller clamps ``e4``
        (the max rule's exponent may lie outside the exponent range; the prediction never does).
    Update (:meth:`update`), with ``X = x · 2^FS`` and the product's ``W`` and ``k``:
        * new history: ``mu = X``, ``dev = 0``, ``unit_exp = e4``, ``count = 1``;
        * else the ``n``-th sample (``n = count + 1``) has weight ``2^-s``,
          ``s = min(a, floor(log2 n))`` (weights 1, 1/2, 1/2, 1/4 ×4, …: about a cumulative
          mean while warming up, then an exponentially weighted mean over about ``2^a``
          products): ``D = X - mu``; ``mu += D >> s``; ``dev += (|D| - dev) >> s``;
          ``count = min(count + 1, 2^a)``. ``>>`` is an arithmetic (floor) shift;
        * prediction ``P = mu + k·dev``. ``P == 0`` clears the history. Else
          ``δ = bitlen(P) - (W - 1 + FS)``: ``mu`` and ``dev`` are shifted right by ``δ``
          (floor; left and exact if ``δ < 0``) and ``unit_exp += δ``, so that
          ``unit_exp = floor(log2(P · 2^(e4 - FS))) - (W - 2)`` (:func:`predict_exponent`).
    Spread
        ``dev`` is the exponentially weighted **mean absolute deviation** of the samples from
        the running mean, not ``sqrt(E[x²] - E[x]²)`` (seed Eq. 5): it needs no squarer and no
        square root. For Gaussian samples σ ≈ 1.25 · MAD, so ``k = 3`` is about 2.4σ and
        ``k = 4`` about 3.2σ.
    Bounds
        ``mu``, ``dev < 2^(W_max - 1 + FS)`` always (tested), which sizes the registers.

    Parameters
    ----------
    width : int
        Maximum mantissa width ``W_max`` (2..16).
    exp_bits : int
        Exponent width ``E`` (3..12).
    stat_shift : int
        ``a`` (0..8): the statistics average over about ``2^a`` products.

    Members
    -------
    count, mu, dev, unit_exp : int
        The state (see above).
    event : str or None
        What :meth:`select` did for the last product (one of :data:`PREDICTOR_EVENTS`).
    """

    def __init__(self, *, width=8, exp_bits=8, stat_shift=4):
        self.width = _check_int("Mantissa width", width, 2, 16)
        self.exp_bits = _check_int("Exponent width", exp_bits, 3, 12)
        self.stat_shift = _check_int("Statistics shift", stat_shift, 0, 8)
        self.frac = self.stat_shift + 2
        self.event = None
        self.clear()

    def clear(self):
        """Empty the history (the next predicted product uses the max rule)."""
        self.count = self.mu = self.dev = self.unit_exp = 0

    @property
    def usable(self):
        e_min, e_max = exponent_range(self.exp_bits)
        return self.count > 0 and e_min <= self.unit_exp <= e_max

    def select(self, raw, *, margin=2, nan=False):
        """``(e4, restart)`` for one product; ``restart`` means the sample starts a new history.

        ``raw`` is the max rule's unclamped exponent, ``None`` for an all-zero product.
        ``e4`` is ``None`` for a NaN product and for products that use the max rule.
        """
        margin = _check_int("Underflow margin", margin, 0, 7)
        if nan:
            self.event = "nan"
            return None, False
        usable = self.usable
        if raw is None:
            self.event = "zero"
            return (self.unit_exp if usable else 0), False
        if usable and raw <= self.unit_exp <= raw + margin:
            self.event = "predicted"
            return self.unit_exp, False
        if usable:
            self.event = "overflow" if self.unit_exp < raw else "underflow"
        else:
            self.event = "max"
        self.clear()
        return None, True

    def update(self, x, e4, *, width, k=3, restart=False):
        """Add the product's sample ``x = max|m|`` (exponent ``e4``) and renormalise."""
        width = _check_int("Runtime mantissa width", width, 2, self.width)
        k = _check_int("Spread multiple", k, 1, 7)
        x = _check_int("Sample", x, 0, (1 << (width - 1)) - 1)
        a, fs = self.stat_shift, self.frac
        big = 1 << (self.width - 1 + fs)
        xf = x << fs
        if restart or self.count == 0:
            self.mu, self.dev, self.unit_exp, self.count = xf, 0, int(e4), 1
        else:
            if e4 != self.unit_exp:
                raise ValueError(f"Sample exponent {e4} is not the predicted {self.unit_exp}")
            s = min(a, (self.count + 1).bit_length() - 1)
            d = xf - self.mu
            self.mu += d >> s
            self.dev += (abs(d) - self.dev) >> s
            self.count = min(self.count + 1, 1 << a)
        delta = predict_exponent(self.mu, self.dev, k=k, width=width, frac=fs)
        if delta is None:
            self.clear()
            return
        self.mu, self.dev = _shift(self.mu, delta), _shift(self.dev, delta)
        self.unit_exp += delta
        assert 0 <= self.mu < big and 0 <= self.dev < big

    def state(self):
        """The state as a dict (``count``, ``mu``, ``dev``, ``unit_exp``)."""
        return {"count": self.count, "mu": self.mu, "dev": self.dev,
                "unit_exp": self.unit_exp}


class ColumnModel:
    """Bit-exact model of :class:`hw.bfp.BFPColumn` with the same generator parameters.

    Parameters
    ----------
    lanes : int
        Processing elements ``N`` (4..256), i.e. outputs per matrix-vector product.
    block : int
        Block size ``B`` (2..256).
    width : int
        Maximum mantissa width ``W_max`` (2..16); the runtime width ``W`` is ``2..W_max``.
    exp_bits : int
        Exponent width ``E`` (3..12).
    max_blocks : int
        Largest number of blocks ``nb`` per product (1..4096); sizes the accumulator.
    frac_bits : int
        Fraction guard bits ``F`` of the accumulator (0..8).
    rand_bits : int
        Random bits ``R`` of stochastic output rounding (1..16).
    stat_shift : int
        Averaging shift ``a`` of the predicted exponent selector (0..8, see
        :class:`ExponentPredictor`).
    predictor : bool
        The column has the predicted selector (the gateware's ``predictor`` parameter); without
        it ``exp_mode="predicted"`` is the max rule.

    Members
    -------
    pw, aw : int
        Widths of the exact block product and of the accumulator (see the module docstring).
    predictor : ExponentPredictor
        The predicted selector's history, carried from one :meth:`matvec` to the next (as in
        the gateware). Products in the ``"max"`` and ``"fixed"`` modes clear it.

    Raises
    ------
    TypeError, ValueError
        For a parameter of the wrong kind or out of range.
    """

    def __init__(self, *, lanes=16, block=16, width=8, exp_bits=8, max_blocks=16, frac_bits=3,
                 rand_bits=8, stat_shift=4, predictor=True):
        self.lanes = _check_int("Lane count", lanes, 4, 256)
        self.block = _check_int("Block size", block, 2, 256)
        self.width = _check_int("Mantissa width", width, 2, 16)
        self.exp_bits = _check_int("Exponent width", exp_bits, 3, 12)
        self.max_blocks = _check_int("Maximum block count", max_blocks, 1, 4096)
        self.frac_bits = _check_int("Fraction guard bit count", frac_bits, 0, 8)
        self.rand_bits = _check_int("Random bit count", rand_bits, 1, 16)
        self.pw = 2 * self.width + clog2(self.block)
        self.aw = self.pw + self.frac_bits + clog2(self.max_blocks + 2)
        self.predictor = ExponentPredictor(width=self.width, exp_bits=self.exp_bits,
                                           stat_shift=stat_shift)
        if not isinstance(predictor, (bool, np.bool_)):
            raise TypeError(f"predictor must be a bool, not {predictor!r}")
        self.has_predictor = bool(predictor)

    # -- steps ------------------------------------------------------------------------------

    def _combine(self, a, ea, p, e, first):
        c = p << self.frac_bits
        if first or a == 0:
            return c, e
        if p == 0:
            return a, ea
        if e > ea:
            return (a >> min(e - ea, self.aw - 1)) + c, e
        return a + (c >> min(ea - e, self.aw - 1)), ea

    def accumulate(self, w_m, w_e, x_m, x_e, bias_m=None, bias_e=None):
        """Per-lane accumulators ``(A, ea, nan)`` after all blocks and the optional bias.

        Returns lists of Python ints / bools of length ``N``.
        """
        n, b = self.lanes, self.block
        w_m, w_e, x_m, x_e = (np.asarray(v, dtype=np.int64) for v in (w_m, w_e, x_m, x_e))
        nb = x_e.shape[0]
        if not 1 <= nb <= self.max_blocks:
            raise ValueError(f"Block count must be between 1 and {self.max_blocks}, not {nb}")
        if w_m.shape != (n, nb * b) or w_e.shape != (n, nb) or x_m.shape != (nb * b,):
            raise ValueError("Operand shapes do not match the column's lanes and block size")
        lo, hi = -(1 << (self.width - 1)), (1 << (self.width - 1)) - 1
        if w_m.min() < lo or w_m.max() > hi or x_m.min() < lo or x_m.max() > hi:
            raise ValueError(f"Mantissas must fit in {self.width} signed bits")
        nan_code = nan_exponent(self.exp_bits)
        e_lo, e_hi = nan_code, -nan_code - 1
        for name, ex in (("Weight", w_e), ("Vector", x_e)):
            if ex.min() < e_lo or ex.max() > e_hi:
                raise ValueError(f"{name} exponents must fit in {self.exp_bits} signed bits")
        acc = [0] * n
        ea = [0] * n
        nan = [False] * n
        for k in range(nb):
            sl = slice(k * b, (k + 1) * b)
            prods = w_m[:, sl] @ x_m[sl]
            for i in range(n):
                nan[i] |= bool(w_e[i, k] == nan_code or x_e[k] == nan_code)
                acc[i], ea[i] = self._combine(acc[i], ea[i], int(prods[i]),
                                              int(w_e[i, k] + x_e[k]), k == 0)
        if bias_m is not None:
            bias_m = np.broadcast_to(np.asarray(bias_m, dtype=np.int64), (n,))
            bias_e = np.broadcast_to(np.asarray(bias_e, dtype=np.int64), (n,))
            if bias_m.min() < lo or bias_m.max() > hi:
                raise ValueError(f"Bias mantissas must fit in {self.width} signed bits")
            if bias_e.min() < e_lo or bias_e.max() > e_hi:
                raise ValueError(f"Bias exponents must fit in {self.exp_bits} signed bits")
            for i in range(n):
                nan[i] |= bool(bias_e[i] == nan_code)
                acc[i], ea[i] = self._combine(acc[i], ea[i], int(bias_m[i]), int(bias_e[i]),
                                              False)
        return acc, ea, nan

    def raw_max_exponent(self, acc, ea, *, width=None):
        """The max rule's exponent before clamping, ``None`` if every lane is zero."""
        width = self._runtime_width(width)
        tops = [abs(a).bit_length() + e for a, e in zip(acc, ea, strict=True) if a != 0]
        return max(tops) - self.frac_bits - (width - 1) if tops else None

    def select_exponent(self, acc, ea, nan, *, width=None, exp_mode="max", fixed_exp=0,
                        pred_margin=2):
        """Output exponent ``e4`` of the output block (NaN code if any lane is NaN).

        ``"predicted"`` consults (and on a reset clears) :attr:`predictor`; the caller adds the
        sample afterwards (:meth:`matvec` does both).
        """
        width = self._runtime_width(width)
        e_min, e_max = exponent_range(self.exp_bits)
        if exp_mode == "predicted":
            raw = self.raw_max_exponent(acc, ea, width=width)
            e4, restart = self.predictor.select(raw, margin=pred_margin, nan=any(nan))
            if any(nan):
                return nan_exponent(self.exp_bits)
            return min(max(raw if restart else e4, e_min), e_max)
        if any(nan):
            return nan_exponent(self.exp_bits)
        if exp_mode == "max":
            raw = self.raw_max_exponent(acc, ea, width=width)
            e4 = 0 if raw is None else raw
        elif exp_mode == "fixed":
            e4 = _check_int("Fixed exponent", fixed_exp, -(1 << (self.exp_bits - 1)),
                            (1 << (self.exp_bits - 1)) - 1)
        else:
            raise ValueError(f"Exponent mode must be one of {', '.join(EXP_MODES)}, "
                             f"not {exp_mode!r}")
        return min(max(e4, e_min), e_max)

    def shift_round(self, a, s, *, width=None, rounding="nearest", r=0):
        """Output mantissa of accumulator ``a`` for right shift ``s`` (negative: left)."""
        width = self._runtime_width(width)
        mx = (1 << (width - 1)) - 1
        if s <= 0:
            q = a << min(-s, self.width + 1)
        else:
            s = min(s, self.aw + self.rand_bits)
            q = a >> s
            rem = a - (q << s)                      # in [0, 2^s)
            if rounding == "nearest":
                half = 1 << (s - 1)
                q += rem > half or (rem == half and q & 1)
            elif rounding == "zero":
                q += a < 0 and rem != 0
            elif rounding == "stochastic":
                # floor(a / 2^s + r / 2^R) = q + [rem · 2^R + r · 2^s >= 2^(s + R)]
                q += (rem << self.rand_bits) + (r << s) >= 1 << (s + self.rand_bits)
            else:
                raise ValueError(f"Rounding must be one of {', '.join(ROUNDINGS)}, "
                                 f"not {rounding!r}")
        return max(-mx, min(mx, q))

    def _runtime_width(self, width):
        if width is None:
            return self.width
        return _check_int("Runtime mantissa width", width, 2, self.width)

    # -- the whole product ------------------------------------------------------------------

    def clear_history(self):
        """Clear the predicted selector's history (the gateware's ``pred_clear``)."""
        self.predictor.clear()

    def matvec(self, w_m, w_e, x_m, x_e, *, bias_m=None, bias_e=None, width=None,
               rounding="nearest", exp_mode="max", fixed_exp=0, rand=None, pred_k=3,
               pred_margin=2):
        """One matrix-vector product, exactly as the gateware computes it.

        Parameters
        ----------
        w_m : array_like of int, shape (N, nb·B)
            Weight mantissas (``W_max``-bit signed).
        w_e : array_like of int, shape (N, nb)
            Weight exponents per row and block.
        x_m : array_like of int, shape (nb·B,)
        x_e : array_like of int, shape (nb,)
        bias_m, bias_e : array_like of int, shape (N,) or scalar, optional
            Bias mantissas and exponents (bias path enabled when given).
        width : int, optional
            Runtime output mantissa width ``W`` (default ``W_max``).
        rounding : {"nearest", "zero", "stochastic"}
        exp_mode : {"max", "fixed", "predicted"}
            ``"predicted"`` uses and updates :attr:`predictor`; the other modes clear it.
        fixed_exp : int
            Exponent of ``"fixed"`` mode.
        pred_k : int
            Spread multiple ``k`` of ``"predicted"`` mode (1..7): prediction ``μ + k·dev``.
        pred_margin : int
            Underflow margin ``u`` of ``"predicted"`` mode (0..7).
        rand : array_like of int, shape (N,), optional
            Random numbers in ``[0, 2^R)`` of stochastic rounding, one per output element.

        Returns
        -------
        mantissas : numpy.ndarray of int64, shape (N,)
        exponent : int
        """
        if rounding not in ROUNDINGS:
            raise ValueError(f"Rounding must be one of {', '.join(ROUNDINGS)}, not {rounding!r}")
        if rounding == "stochastic":
            if rand is None:
                raise ValueError("Stochastic rounding needs rand, one integer per lane")
            rand = np.asarray(rand, dtype=np.int64)
            if rand.shape != (self.lanes,) or rand.min() < 0 or \
                    rand.max() >= 1 << self.rand_bits:
                raise ValueError(f"rand must be {self.lanes} integers in [0, 2^{self.rand_bits})")
        else:
            rand = np.zeros(self.lanes, dtype=np.int64)
        if exp_mode not in EXP_MODES:
            raise ValueError(f"Exponent mode must be one of {', '.join(EXP_MODES)}, "
                             f"not {exp_mode!r}")
        width = self._runtime_width(width)
        pred_k = _check_int("Spread multiple", pred_k, 1, 7)
        pred_margin = _check_int("Underflow margin", pred_margin, 0, 7)
        if exp_mode == "predicted" and not self.has_predictor:
            exp_mode = "max"
        acc, ea, nan = self.accumulate(w_m, w_e, x_m, x_e, bias_m, bias_e)
        e4 = self.select_exponent(acc, ea, nan, width=width, exp_mode=exp_mode,
                                  fixed_exp=fixed_exp, pred_margin=pred_margin)
        if exp_mode != "predicted":
            self.predictor.clear()
            self.predictor.event = None
        if any(nan):
            return np.zeros(self.lanes, dtype=np.int64), e4
        m = [self.shift_round(a, e4 - e + self.frac_bits, width=width, rounding=rounding,
                              r=int(r)) for a, e, r in zip(acc, ea, rand, strict=True)]
        if exp_mode == "predicted" and self.predictor.event not in ("zero", "nan"):
            self.predictor.update(max(abs(v) for v in m), e4, width=width, k=pred_k,
                                  restart=self.predictor.event != "predicted")
        return np.array(m, dtype=np.int64), e4


def reference_matvec(w_m, w_e, x_m, x_e, *, block, bias_m=None, bias_e=None, exp_bits=8):
    """Float64 ``M · x + b`` of the dequantised BFP operands (NaN blocks give NaN rows).

    Exact up to float64 rounding of the sum, for error analysis of the column.
    """
    w = dequantise(np.asarray(w_m).reshape(len(w_m), -1, block), np.asarray(w_e),
                   exp_bits=exp_bits)
    x = dequantise(np.asarray(x_m).reshape(-1, block), np.asarray(x_e), exp_bits=exp_bits)
    y = w @ x
    if bias_m is not None:
        n = len(w_m)
        bm = np.broadcast_to(np.asarray(bias_m), (n,)).reshape(n, 1)
        be = np.broadcast_to(np.asarray(bias_e), (n,)).reshape(n)
        y = y + dequantise(bm, be, exp_bits=exp_bits)
    return y


def error_bound(model, acc_exponents, e4, contributions, *, rounding="nearest"):
    """Documented bound on ``|y · 2^e4 - y_exact|`` per element (see the module docstring).

    ``acc_exponents`` are the lanes' final ``ea``; ``contributions`` the number of combined
    blocks (plus one with bias). The nearest-rounding bound assumes no element saturated.
    """
    acc = contributions * 2.0 ** (max(acc_exponents) - model.frac_bits)
    out = 2.0 ** (e4 - 1) if rounding == "nearest" else 2.0 ** e4
    return acc + out
