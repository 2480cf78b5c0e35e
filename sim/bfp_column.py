"""Golden model of the BFP systolic MAC column (DESIGN §3.2), and a float64 reference.

Pure NumPy / Python integers; never imports Amaranth. :class:`lowbit.hw.bfp.BFPColumn` matches
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
   defines when the max rule is used instead); ``"window"``: the exponent predicted from the
   mean and σ of the last 512 / 1024 / 8192 output magnitudes (:class:`WindowPredictor`, the
   same fallback rules). Then clamped to ``[-2^(E-1)+1, 2^(E-1)-1]``.
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

from collections import deque

import numpy as np

from .bfp import ROUNDINGS, dequantise, exponent_range, nan_exponent

__all__ = ["ColumnModel", "ExponentPredictor", "WindowPredictor", "predict_exponent",
           "window_exponent", "clog2", "reference_matvec", "error_bound", "EXP_MODES",
           "PREDICTOR_EVENTS", "WINDOW_LENGTHS", "WINDOW_GUARD"]

#: Output exponent selector modes, in the order of the gateware's ``exp_mode`` port
#: (``"window"``, code 3, is the max rule on a column without the window predictor).
EXP_MODES = ("max", "fixed", "predicted", "window")
#: Window lengths of the windowed mean/sigma predictor (seed 002 [0052], [0093]).
WINDOW_LENGTHS = (512, 1024, 8192)
#: Guard bits ``G`` of the window's values above ``W_max - 1`` (see :class:`WindowPredictor`).
WINDOW_GUARD = 2
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
    Every choice below is mirrored bit for bit by :class:`lowbit.hw.bfp.ExponentPredictor`.

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


def window_exponent(n, s1, s2, *, k, width, vw, unit_exp=0):
    """Eq. 3/4 on ``μ + k·σ`` of a window, by integer comparisons in the squared domain.

    ``n`` values ``x_i`` (non-negative integers below ``2^vw``, in units of ``2^unit_exp``) have
    ``s1 = Σx`` and ``s2 = Σx²``; ``μ = s1/n``, ``σ = sqrt(s2/n - μ²)`` (population). Returns
    ``unit_exp + L - (width - 2)`` with ``L = floor(log2(μ + k·σ))`` clamped below at 0: ``L + 1``
    is the smallest ``j`` in ``1..vw+3`` with ``μ + k·σ < 2^j``, i.e. (times ``n``, squared)
    ``A_j = n·2^j - s1 > 0`` and ``k²·(n·s2 - s1²) < A_j²``. Exact: no division, no square
    root, no rounding. ``None`` if ``s1 == 0`` (the window holds only zeros). The seed's example
    ``μ = 10``, ``σ = 0.5``, ``k = 3`` (``μ + 3σ = 11.5``), ``W = 16``: −11.
    """
    n, s1, s2, k = int(n), int(s1), int(s2), int(k)
    if s1 == 0:
        return None
    v = k * k * (n * s2 - s1 * s1)
    if v < 0:
        raise ValueError("The window sums are inconsistent (n·Σx² < (Σx)²)")
    for j in range(1, vw + 4):
        a = (n << j) - s1
        if a > 0 and a * a > v:
            return int(unit_exp) + j - 1 - (int(width) - 2)
    raise ValueError(f"μ + kσ is not below 2^{vw + 3}: values wider than {vw} bits?")


class WindowPredictor(ExponentPredictor):
    """The windowed mean/σ predictor of seed 002 claim 1 (``exp_mode="window"``).

    Seed 002 updates the output exponent from the mean μ and the standard deviation σ of the
    **absolute values of the output values** (claim 1) over the last ``N_w`` = 512, 1024 or 8192
    of them, held in a FIFO (claim 5), with running sums of ``x`` and ``x²`` (claims 3, 4, 14,
    19; σ = sqrt(E[x²] - E[x]²), seed Eq. 5), applies Eq. 3/4 to ``μ + kσ`` (claim 20, [0088]-
    [0091]), keeps the previous exponent when the error of doing so is small (claim 21) and
    clears the history on overflow or underflow (claims 23, 30, 31). Every choice below is
    mirrored bit for bit by :class:`lowbit.hw.bfp.WindowPredictor`.

    Selection
        :meth:`select` is :meth:`ExponentPredictor.select` (the same events, the same
        overflow/underflow window ``[raw, raw + u]``, the max rule as the fallback, the history
        cleared on overflow/underflow, all-zero and NaN products leave it unchanged).
    What enters the window
        Every output element of every product that is neither all-zero nor NaN: ``|m_i|``, the
        output mantissa magnitudes after rounding and saturation at the runtime width ``W``, in
        lane order 0..N-1, converted to the units ``2^h`` of the history exponent ``h``:
        ``x_i = |m_i| · 2^(e4 - h)`` (exact left shift if ``e4 >= h``, floor right shift
        else). ``h`` is the exponent ``e4`` of the product that started the history. If
        ``|e4 - h| > G`` (``G`` = :data:`WINDOW_GUARD` = 2) the history is **re-based**: cleared,
        and the product's values start a new history with ``h = e4`` (:attr:`rebased`). So
        every ``x_i < 2^VW``, ``VW = W_max - 1 + G`` bits (the FIFO's width).
    Running sums
        ``n`` (values held, ``<= N_w``), ``S1 = Σx``, ``S2 = Σx²``, exact integers of
        ``VW + log2 N_w`` and ``2·VW + log2 N_w`` bits. Adding ``x`` to a full window first
        removes the oldest value ``x_o`` (``S1 -= x_o``, ``S2 -= x_o²``); the window is a
        sliding FIFO, not block-reset sums. A window not yet full uses its ``n`` values (no
        division: the comparison below is multiplied through by ``n``).
    Prediction, after the product's last value (:func:`window_exponent`)
        ``S1 == 0`` clears the history (nothing to predict from). Else
        ``e_new = h + L - (W - 2)``, ``L = floor(log2(μ + kσ))`` clamped below at 0, found as
        the smallest ``j`` in ``1..VW+3`` with ``A_j = n·2^j - S1 > 0`` and
        ``k²·(n·S2 - S1²) < A_j²`` (``μ + kσ < 2^j`` multiplied by ``n`` and squared: no square
        root; exact, so no rounding and no ties). ``k`` is the programmable spread multiple
        (1..7, default the seed's 3).
    Error test (claim 21)
        With ``e_prev`` the product's exponent ``e4``, the error magnitude of keeping ``e_prev``
        is ``e_prev - e_new`` bits of the predicted maximum lost to the coarser exponent; if
        ``0 <= e_prev - e_new <= t`` (``t``, ``pred_tol``, 0..7, the predetermined value) the
        exponent is not changed: ``unit_exp = e_prev``; else ``unit_exp = e_new`` (a larger
        ``e_new`` would saturate the predicted maximum and is always taken). ``t = 0`` is the
        plain rule.

    Parameters
    ----------
    width : int
        Maximum mantissa width ``W_max`` (2..16).
    exp_bits : int
        Exponent width ``E`` (3..12).
    window : int
        Window length ``N_w``: 512, 1024 or 8192.

    Members
    -------
    count, unit_exp : int
        Values held and the exponent predicted for the next product.
    hist_exp : int
        ``h``, the units of the window's values.
    s1, s2 : int
        The running sums.
    fifo : collections.deque of int
        The values, oldest first.
    rebased : bool
        The last :meth:`update` re-based the history.
    event : str or None
        As :class:`ExponentPredictor`.
    """

    def __init__(self, *, width=8, exp_bits=8, window=512):
        self.width = _check_int("Mantissa width", width, 2, 16)
        self.exp_bits = _check_int("Exponent width", exp_bits, 3, 12)
        self.window = _check_window(window)
        self.vw = self.width - 1 + WINDOW_GUARD
        self.event = None
        self.rebased = False
        self.clear()

    def clear(self):
        """Empty the history (the next predicted product uses the max rule)."""
        self.count = self.unit_exp = self.hist_exp = self.s1 = self.s2 = 0
        self.fifo = deque()

    def update(self, samples, e4, *, width, k=3, tol=0, restart=False):
        """Add the product's output magnitudes ``samples`` (exponent ``e4``), then predict."""
        width = _check_int("Runtime mantissa width", width, 2, self.width)
        k = _check_int("Spread multiple", k, 1, 7)
        tol = _check_int("Error tolerance", tol, 0, 7)
        xs = [_check_int("Sample", int(v), 0, (1 << (width - 1)) - 1) for v in samples]
        e4 = int(e4)
        self.rebased = not restart and self.count > 0 and abs(e4 - self.hist_exp) > WINDOW_GUARD
        if restart or self.count == 0 or self.rebased:
            self.clear()
            self.hist_exp = e4
        d = e4 - self.hist_exp
        for v in xs:
            x = _shift(v, -d)
            if self.count == self.window:
                old = self.fifo.popleft()
                self.s1 -= old
                self.s2 -= old * old
            else:
                self.count += 1
            self.fifo.append(x)
            self.s1 += x
            self.s2 += x * x
        e_new = window_exponent(self.count, self.s1, self.s2, k=k, width=width, vw=self.vw,
                                unit_exp=self.hist_exp)
        if e_new is None:
            self.clear()
            return
        self.unit_exp = e4 if 0 <= e4 - e_new <= tol else e_new

    def state(self):
        """The state as a dict (``count``, ``s1``, ``s2``, ``hist_exp``, ``unit_exp``)."""
        return {"count": self.count, "s1": self.s1, "s2": self.s2, "hist_exp": self.hist_exp,
                "unit_exp": self.unit_exp}


def _check_window(window):
    if not isinstance(window, (int, np.integer)) or isinstance(window, (bool, np.bool_)):
        raise TypeError(f"Window length must be one of "
                        f"{', '.join(map(str, WINDOW_LENGTHS))}, not {window!r}")
    if window not in WINDOW_LENGTHS:
        raise ValueError(f"Window length must be one of "
                         f"{', '.join(map(str, WINDOW_LENGTHS))}, not {window!r}")
    return int(window)


class ColumnModel:
    """Bit-exact model of :class:`lowbit.hw.bfp.BFPColumn` with the same generator parameters.

    Every step is vectorised over the lanes, the row tiles and a batch of vectors
    (:meth:`matvec_batch`); only the predicted exponent selector, whose state carries from one
    product to the next, loops over the products (in order). Integers are int64 when every
    intermediate value fits (``AW + R <= 61``, e.g. every column with ``W_max <= 8``), else
    Python integers in object arrays; the block products are formed in float64, exact because
    every partial sum is below ``2^(PW - 1) <= 2^39``.

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
    window : int or None
        Window length of the windowed mean/σ predictor (:class:`WindowPredictor`; 512, 1024 or
        8192; the gateware's ``window`` parameter). ``None`` (the default): no such predictor,
        ``exp_mode="window"`` is the max rule.

    Members
    -------
    pw, aw : int
        Widths of the exact block product and of the accumulator (see the module docstring).
    predictor : ExponentPredictor
        The predicted selector's history, carried from one product to the next (as in the
        gateware). Products in the other modes clear it.
    window_predictor : WindowPredictor or None
        The window selector's history (``exp_mode="window"``); products in the other modes
        clear it.

    Raises
    ------
    TypeError, ValueError
        For a parameter of the wrong kind or out of range.
    """

    def __init__(self, *, lanes=16, block=16, width=8, exp_bits=8, max_blocks=16, frac_bits=3,
                 rand_bits=8, stat_shift=4, predictor=True, window=None):
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
        self.window = None if window is None else _check_window(window)
        self.window_predictor = None if window is None else WindowPredictor(
            width=self.width, exp_bits=self.exp_bits, window=self.window)
        # The widest intermediate value of the rounding step is below 2^(AW + R + 1).
        self._dtype = np.int64 if self.aw + self.rand_bits <= 61 else object
        self._nan = nan_exponent(self.exp_bits)
        self._e_min, self._e_max = exponent_range(self.exp_bits)

    # -- operands and configuration -------------------------------------------------------------

    def _operands(self, w_m, w_e, x_m, x_e, bias_m, bias_e, *, rows=None):
        """Checked int64 operands: ``w`` (R, nb·B) and (R, nb), ``x`` (V, nb·B) and (V, nb),
        bias (R,) or None. ``rows`` (the lane count for one product) fixes ``R``; without it
        the vectors are a batch (2-d)."""
        b = self.block
        w_m, w_e, x_m, x_e = (np.asarray(v, dtype=np.int64) for v in (w_m, w_e, x_m, x_e))
        nb = x_e.shape[-1] if x_e.ndim else 0
        if not 1 <= nb <= self.max_blocks:
            raise ValueError(f"Block count must be between 1 and {self.max_blocks}, not {nb}")
        if rows is None:
            ok = (w_m.ndim == 2 and w_m.shape[0] >= 1 and x_m.ndim == 2 and x_e.ndim == 2 and
                  x_m.shape[0] == x_e.shape[0])
            n, v = (w_m.shape[0], x_m.shape[0]) if ok else (0, 0)
        else:
            ok, n, v = x_m.ndim == 1 and x_e.ndim == 1, rows, 1
            x_m, x_e = x_m.reshape(1, -1), x_e.reshape(1, -1)
        if not ok or w_m.shape != (n, nb * b) or w_e.shape != (n, nb) or \
                x_m.shape != (v, nb * b):
            raise ValueError("Operand shapes do not match the column's lanes and block size")
        if not (_fits(w_m, self.width) and _fits(x_m, self.width)):
            raise ValueError(f"Mantissas must fit in {self.width} signed bits")
        for name, ex in (("Weight", w_e), ("Vector", x_e)):
            if not _fits(ex, self.exp_bits):
                raise ValueError(f"{name} exponents must fit in {self.exp_bits} signed bits")
        if bias_m is not None:
            bias_m = np.broadcast_to(np.asarray(bias_m, dtype=np.int64), (n,))
            bias_e = np.broadcast_to(np.asarray(bias_e, dtype=np.int64), (n,))
            if not _fits(bias_m, self.width):
                raise ValueError(f"Bias mantissas must fit in {self.width} signed bits")
            if not _fits(bias_e, self.exp_bits):
                raise ValueError(f"Bias exponents must fit in {self.exp_bits} signed bits")
        return w_m, w_e, x_m, x_e, bias_m, bias_e

    def _config(self, *, width, rounding, exp_mode, pred_k, pred_margin, pred_tol=0):
        if rounding not in ROUNDINGS:
            raise ValueError(f"Rounding must be one of {', '.join(ROUNDINGS)}, not {rounding!r}")
        if exp_mode not in EXP_MODES:
            raise ValueError(f"Exponent mode must be one of {', '.join(EXP_MODES)}, "
                             f"not {exp_mode!r}")
        width = self._runtime_width(width)
        pred_k = _check_int("Spread multiple", pred_k, 1, 7)
        pred_margin = _check_int("Underflow margin", pred_margin, 0, 7)
        pred_tol = _check_int("Error tolerance", pred_tol, 0, 7)
        if (exp_mode == "predicted" and not self.has_predictor) or \
                (exp_mode == "window" and self.window_predictor is None):
            exp_mode = "max"
        return width, exp_mode, pred_k, pred_margin, pred_tol

    def _fixed(self, fixed_exp):
        return _check_int("Fixed exponent", fixed_exp, -(1 << (self.exp_bits - 1)),
                          (1 << (self.exp_bits - 1)) - 1)

    def _runtime_width(self, width):
        if width is None:
            return self.width
        return _check_int("Runtime mantissa width", width, 2, self.width)

    # -- steps, vectorised ----------------------------------------------------------------------

    def _combine(self, acc, ea, c, e, e_add):
        """Combine contributions ``c = P · 2^F`` of exponents ``e`` into the accumulators
        ``(acc, ea)``. ``e_add`` is ``e``, or far below every exponent where ``P == 0`` (then
        the sum below leaves ``(acc, ea)`` unchanged)."""
        top = self.aw - 1
        d = np.minimum(np.maximum(e_add - ea, -top), top)
        sa = np.maximum(d, 0)                       # e > ea: shift A; else shift c by -d
        total = (acc >> sa) + (c >> (sa - d))
        fresh = acc == 0
        return np.where(fresh, c, total), np.where(fresh, e, np.maximum(ea, e_add))

    def _accumulate(self, w_m, w_e, x_m, x_e, bias_m, bias_e):
        """Accumulators ``(A, ea, nan)`` of shape (V, R) of checked operands."""
        b, nb = self.block, w_e.shape[1]
        v, r = x_m.shape[0], w_m.shape[0]
        # All block products at once, (nb, V, R); float64 is exact (|partial sums| < 2^39).
        xf = x_m.reshape(v, nb, b).transpose(1, 0, 2).astype(np.float64)
        wf = w_m.reshape(r, nb, b).transpose(1, 2, 0).astype(np.float64)
        p = np.matmul(xf, wf).astype(np.int64)
        e = x_e.T[:, :, None] + w_e.T[:, None, :]
        if bias_m is not None:
            p = np.concatenate([p, np.broadcast_to(bias_m, (1, v, r))])
            e = np.concatenate([e, np.broadcast_to(bias_e, (1, v, r))])
        e_add = np.where(p == 0, -(1 << 40), e)
        if self._dtype is object:
            p = p.astype(object)
        c = p << self.frac_bits
        acc, ea = c[0], e[0]
        for k in range(1, len(c)):
            acc, ea = self._combine(acc, ea, c[k], e[k], e_add[k])
        nan = (w_e == self._nan).any(axis=1)[None, :] | (x_e == self._nan).any(axis=1)[:, None]
        if bias_m is not None:
            nan = nan | (bias_e == self._nan)[None, :]
        return acc, ea, nan

    def _raw_max(self, acc, ea, width):
        """Max rule's unclamped exponent over the last axis, and whether every lane is 0."""
        zero = acc == 0
        # |A| < 2^(AW - 1) <= 2^53 converts to float64 exactly: no carry to correct.
        top = np.where(zero, -(1 << 40), _bitlen(np.abs(acc), exact=self.aw <= 54) + ea)
        top = top.max(axis=-1)
        return top - self.frac_bits - (width - 1), zero.all(axis=-1)

    def _round(self, a, s, width, rounding, r):
        """Output mantissas of accumulators ``a`` for right shifts ``s`` (negative: left)."""
        dt = a.dtype
        mx = (1 << (width - 1)) - 1
        sr = np.minimum(np.maximum(s, 1), self.aw + self.rand_bits)
        if dt.kind == "O":
            sr = sr.astype(object)
        if rounding == "nearest":
            # Half to even: floor((a + 2^(sr-1) - 1 + lsb) / 2^sr), lsb that of floor(a / 2^sr).
            q = (a + ((1 << (sr - 1)) - 1) + ((a >> sr) & 1)) >> sr
        elif rounding == "zero":
            q = (a + np.where(a < 0, (1 << sr) - 1, 0)) >> sr
        else:
            # floor(a / 2^sr + r / 2^R) = q + [rem · 2^R + r · 2^sr >= 2^(sr + R)], divided
            # by 2^min(sr, R) so that no term exceeds 2^sr.
            q = a >> sr
            rem = a - (q << sr)                     # in [0, 2^sr)
            big, r, t = 1 << self.rand_bits, np.asarray(r).astype(dt), sr - self.rand_bits
            up = np.where(t >= 0, rem >= (big - r) << np.maximum(t, 0),
                          (rem << np.maximum(-t, 0)) + r >= big)
            q = q + up.astype(dt)
        left = s <= 0
        if left.any():
            # A value beyond 2^W_max saturates after any left shift, as the clipped one does.
            lim = 1 << self.width
            shift = np.minimum(np.maximum(-s, 0), self.width + 1)
            shifted = np.minimum(np.maximum(a, -lim), lim) << shift
            q = np.where(left, shifted, q)
        return np.minimum(np.maximum(q, -mx), mx).astype(np.int64)

    def _products(self, w_m, w_e, x_m, x_e, bias_m, bias_e, rand, *, width, rounding,
                  exp_mode, fixed_exp, pred_k, pred_margin, pred_tol=0):
        """Products of checked operands, vector-major then tile: ``m`` (V, T, N), ``e4`` (V, T).

        ``w`` has ``T·N`` rows (padded by the caller).
        """
        n, f = self.lanes, self.frac_bits
        acc, ea, nan = self._accumulate(w_m, w_e, x_m, x_e, bias_m, bias_e)
        v, t = acc.shape[0], acc.shape[1] // n
        acc, ea = acc.reshape(v, t, n), ea.reshape(v, t, n)
        nan = nan.reshape(v, t, n).any(axis=2)
        raw, zero = self._raw_max(acc, ea, width)
        e_min, e_max = self._e_min, self._e_max
        if exp_mode in ("predicted", "window"):
            window = exp_mode == "window"
            other = self.predictor if window else self.window_predictor
            if v * t and other is not None:
                other.clear()
                other.event = None
            m = np.zeros((v, t, n), dtype=np.int64)
            e4 = np.full((v, t), self._nan, dtype=np.int64)
            pred = self.window_predictor if window else self.predictor
            for i, j in np.ndindex(v, t):
                e, restart = pred.select(None if zero[i, j] else int(raw[i, j]),
                                         margin=pred_margin, nan=bool(nan[i, j]))
                if nan[i, j]:
                    continue
                e4[i, j] = e = min(max(int(raw[i, j]) if restart else e, e_min), e_max)
                m[i, j] = self._round(acc[i, j], e - ea[i, j] + f, width, rounding,
                                      None if rand is None else rand[i, j])
                if pred.event == "zero":
                    continue
                if window:
                    pred.update(np.abs(m[i, j]).tolist(), e, width=width, k=pred_k,
                                tol=pred_tol, restart=pred.event != "predicted")
                else:
                    pred.update(int(np.abs(m[i, j]).max()), e, width=width, k=pred_k,
                                restart=pred.event != "predicted")
            return m, e4
        if exp_mode == "max":
            e4 = np.where(zero, 0, raw)
        else:
            e4 = np.full((v, t), self._fixed(fixed_exp), dtype=np.int64)
        e4 = np.minimum(np.maximum(e4, e_min), e_max)
        m = self._round(acc, e4[:, :, None] - ea + f, width, rounding, rand)
        if nan.any():
            m[nan] = 0
            e4[nan] = self._nan
        if v * t:
            self.clear_history()
            self.predictor.event = None
        return m, e4

    # -- one product, step by step ---------------------------------------------------------------

    def accumulate(self, w_m, w_e, x_m, x_e, bias_m=None, bias_e=None):
        """Per-lane accumulators ``(A, ea, nan)`` after all blocks and the optional bias.

        Operands as :meth:`matvec`. Returns lists of Python ints / bools of length ``N``.
        """
        ops = self._operands(w_m, w_e, x_m, x_e, bias_m, bias_e, rows=self.lanes)
        acc, ea, nan = self._accumulate(*ops)
        return [int(a) for a in acc[0]], ea[0].tolist(), nan[0].tolist()

    def accumulate_batch(self, w_m, w_e, x_m, x_e, bias_m=None, bias_e=None):
        """Accumulators of every row against every vector (rows need not fill whole tiles).

        Operands as :meth:`matvec_batch`. Returns ``(A, ea, nan)``, arrays of shape (V, R):
        ``A`` int64, or object (Python ints) for columns with ``AW + R > 61``.
        """
        return self._accumulate(*self._operands(w_m, w_e, x_m, x_e, bias_m, bias_e))

    def raw_max_exponent(self, acc, ea, *, width=None):
        """The max rule's exponent before clamping, ``None`` if every lane is zero."""
        raw, zero = self._raw_max(np.array(acc, dtype=self._dtype),
                                  np.asarray(ea, dtype=np.int64), self._runtime_width(width))
        return None if zero else int(raw)

    def select_exponent(self, acc, ea, nan, *, width=None, exp_mode="max", fixed_exp=0,
                        pred_margin=2):
        """Output exponent ``e4`` of the output block (NaN code if any lane is NaN).

        ``"predicted"`` consults (and on a reset clears) :attr:`predictor`; the caller adds the
        sample afterwards (:meth:`matvec` does both).
        """
        width = self._runtime_width(width)
        e_min, e_max = exponent_range(self.exp_bits)
        raw = self.raw_max_exponent(acc, ea, width=width)
        if exp_mode == "window" and self.window_predictor is None:
            exp_mode = "max"
        if exp_mode in ("predicted", "window"):
            pred = self.predictor if exp_mode == "predicted" else self.window_predictor
            e4, restart = pred.select(raw, margin=pred_margin, nan=any(nan))
            if any(nan):
                return nan_exponent(self.exp_bits)
            return min(max(raw if restart else e4, e_min), e_max)
        if any(nan):
            return nan_exponent(self.exp_bits)
        if exp_mode == "max":
            e4 = 0 if raw is None else raw
        elif exp_mode == "fixed":
            e4 = self._fixed(fixed_exp)
        else:
            raise ValueError(f"Exponent mode must be one of {', '.join(EXP_MODES)}, "
                             f"not {exp_mode!r}")
        return min(max(e4, e_min), e_max)

    def shift_round(self, a, s, *, width=None, rounding="nearest", r=0):
        """Output mantissa of accumulator ``a`` for right shift ``s`` (negative: left)."""
        if rounding not in ROUNDINGS:
            raise ValueError(f"Rounding must be one of {', '.join(ROUNDINGS)}, not {rounding!r}")
        return int(self._round(np.array([a], dtype=self._dtype), np.array([s], dtype=np.int64),
                               self._runtime_width(width), rounding, np.array([r]))[0])

    # -- whole products ---------------------------------------------------------------------------

    def clear_history(self):
        """Clear the predicted selectors' histories (the gateware's ``pred_clear``)."""
        self.predictor.clear()
        if self.window_predictor is not None:
            self.window_predictor.clear()
            self.window_predictor.event = None

    def matvec(self, w_m, w_e, x_m, x_e, *, bias_m=None, bias_e=None, width=None,
               rounding="nearest", exp_mode="max", fixed_exp=0, rand=None, pred_k=3,
               pred_margin=2, pred_tol=0):
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
        exp_mode : {"max", "fixed", "predicted", "window"}
            ``"predicted"`` uses and updates :attr:`predictor`, ``"window"``
            :attr:`window_predictor`; each mode clears the other modes' histories.
        fixed_exp : int
            Exponent of ``"fixed"`` mode.
        pred_k : int
            Spread multiple ``k`` of ``"predicted"`` mode (1..7): prediction ``μ + k·dev``;
            of ``"window"`` mode: ``μ + k·σ``.
        pred_margin : int
            Underflow margin ``u`` of ``"predicted"`` and ``"window"`` modes (0..7).
        pred_tol : int
            Error tolerance ``t`` of ``"window"`` mode (0..7, claim 21; see
            :class:`WindowPredictor`).
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
            rand = rand.reshape(1, 1, -1)
        else:
            rand = None
        width, exp_mode, pred_k, pred_margin, pred_tol = self._config(
            width=width, rounding=rounding, exp_mode=exp_mode, pred_k=pred_k,
            pred_margin=pred_margin, pred_tol=pred_tol)
        ops = self._operands(w_m, w_e, x_m, x_e, bias_m, bias_e, rows=self.lanes)
        m, e4 = self._products(*ops, rand, width=width, rounding=rounding, exp_mode=exp_mode,
                               fixed_exp=fixed_exp, pred_k=pred_k, pred_margin=pred_margin,
                               pred_tol=pred_tol)
        return m[0, 0], int(e4[0, 0])

    def tiles(self, rows):
        """Row tiles of ``N`` lanes needed for ``rows`` output rows."""
        return -(-int(rows) // self.lanes)

    def matvec_batch(self, w_m, w_e, x_m, x_e, *, bias_m=None, bias_e=None, width=None,
                     rounding="nearest", exp_mode="max", fixed_exp=0, rand=None, pred_k=3,
                     pred_margin=2, pred_tol=0):
        """``V`` products ``W · x_v + b`` of a matrix of any height, as the column runs them.

        The ``R`` rows are processed in ``T`` = :meth:`tiles` ``(R)`` tiles of ``N`` rows, the
        last padded with zero rows (exponents 0, zero biases of exponent 0); each tile and
        vector is one :meth:`matvec`, issued vector by vector and, within a vector, tile by
        tile. That order matters for ``"predicted"`` (the history carries from product to
        product) and for the random numbers of stochastic rounding.

        Parameters
        ----------
        w_m : array_like of int, shape (R, nb·B)
        w_e : array_like of int, shape (R, nb)
        x_m : array_like of int, shape (V, nb·B)
        x_e : array_like of int, shape (V, nb)
        bias_m, bias_e : array_like of int, shape (R,) or scalar, optional
        width, rounding, exp_mode, fixed_exp, pred_k, pred_margin, pred_tol
            As :meth:`matvec`, for every product.
        rand : array_like of int, shape (V, T, N), optional
            Stochastic rounding's random numbers in ``[0, 2^R)``, per product and lane.

        Returns
        -------
        m, e : numpy.ndarray of int64, shape (V, R)
            Output mantissas and the exponent of each element's tile.
        """
        width, exp_mode, pred_k, pred_margin, pred_tol = self._config(
            width=width, rounding=rounding, exp_mode=exp_mode, pred_k=pred_k,
            pred_margin=pred_margin, pred_tol=pred_tol)
        w_m, w_e, x_m, x_e, bias_m, bias_e = self._operands(w_m, w_e, x_m, x_e, bias_m, bias_e)
        rows, v, n = w_m.shape[0], x_m.shape[0], self.lanes
        t = self.tiles(rows)
        if rounding == "stochastic":
            if rand is None:
                raise ValueError("Stochastic rounding needs rand, one integer per lane")
            rand = np.asarray(rand, dtype=np.int64)
            if rand.shape != (v, t, n):
                raise ValueError(f"rand must have shape {(v, t, n)}, not {rand.shape}")
            if rand.size and (rand.min() < 0 or rand.max() >= 1 << self.rand_bits):
                raise ValueError(f"rand must be integers in [0, 2^{self.rand_bits})")
        else:
            rand = None
        pad = t * n - rows
        w_m, w_e = np.pad(w_m, ((0, pad), (0, 0))), np.pad(w_e, ((0, pad), (0, 0)))
        if bias_m is not None:
            bias_m, bias_e = np.pad(bias_m, (0, pad)), np.pad(bias_e, (0, pad))
        m, e4 = self._products(w_m, w_e, x_m, x_e, bias_m, bias_e, rand, width=width,
                               rounding=rounding, exp_mode=exp_mode, fixed_exp=fixed_exp,
                               pred_k=pred_k, pred_margin=pred_margin, pred_tol=pred_tol)
        return m.reshape(v, t * n)[:, :rows], np.repeat(e4, n, axis=1)[:, :rows]


def _bitlen(a, exact=False):
    """``bit_length`` of every element of a non-negative int64 or object array (as int64);
    ``exact``: every element converts to float64 exactly."""
    if a.dtype.kind == "O":
        return np.frompyfunc(lambda v: int(v).bit_length(), 1, 1)(a).astype(np.int64)
    _, bits = np.frexp(a.astype(np.float64))
    bits = bits.astype(np.int64)
    if exact:
        return bits
    # The conversion to float64 rounds to nearest, which may carry into the next power of 2.
    return bits - ((a > 0) & (a < np.left_shift(np.int64(1), np.maximum(bits - 1, 0))))


def _fits(a, bits):
    """Every element of int64 array ``a`` is a ``bits``-bit two's complement value."""
    return a.size == 0 or int(((a >> (bits - 1)) + 1).view(np.uint64).max()) <= 1


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
