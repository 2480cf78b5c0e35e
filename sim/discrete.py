"""Golden model of the discrete-data shift/XOR unit (seed 001, DESIGN §2 and §3.3). Pure numpy.

Number formats
--------------
Discrete codes
    A :class:`CodeBook` has ``2**n`` entries (``n`` in {1, 2, 3}). Entry ``c`` is a triple
    ``(sign, direction, shift)`` meaning ``(-1)**sign * 2**(+shift if direction else -shift)``,
    with ``sign``, ``direction`` in {0, 1} and ``shift`` in 0..7. Codes are ``uint8`` indices.
    Packed into a register (:meth:`CodeBook.words`) an entry is 5 bits:
    ``shift | direction << 3 | sign << 4``.
Sign-magnitude fixed point (:class:`SMFormat`)
    The continuous operand of the shift/XOR datapath. A ``width``-bit word holds the sign in its
    top bit and an unsigned magnitude in the ``width - 1`` bits below; the value is
    ``(-1)**sign * magnitude * 2**-frac``. The range is symmetric, ``±(2**(width-1) - 1)``
    magnitude units. Words are handled as unsigned integers (``int64`` arrays). Negative zero
    (sign 1, magnitude 0) is accepted as an input and means zero; every function here returns
    canonical zero (all bits 0).

Rules (the gateware in :mod:`lowbit.hw.discrete` follows them bit for bit)
-------------------------------------------------------------------
Continuous × discrete (:func:`mul_cd`)
    ``sign = sign_x XOR sign_c``; a right shift by ``k`` truncates the magnitude toward zero
    (``mag >> k``); a left shift saturates the magnitude at ``2**(width-1) - 1``. A zero
    magnitude gets sign 0. So 16 × −1/2 in 8-bit sign-magnitude is ``0b10001000`` (−8).
Continuous ÷ discrete (:func:`div_cd`)
    The same operation with the shift direction reversed (dividing by ``2**-k`` is a left shift),
    so 16 ÷ −2 is ``0b10001000`` too. Sign flip and shift commute in sign-magnitude.
Discrete ⊗ discrete (:func:`dd_table`, :func:`dd_op`)
    ``+``, ``−``, ``×``, ``÷`` through ``2**n × 2**n`` tables built from the book. Entries are the
    exact results encoded in an :class:`SMFormat`, rounded toward zero and saturated.
Dot products and accumulation (:func:`dot`, :func:`matvec`)
    Each term is a :func:`mul_cd` product (already truncated/saturated at the operand width). The
    terms are consumed ``lanes`` at a time ("beats"); the terms of a beat are added exactly, and
    the running sum is saturated to ``±(2**(acc_width-1) - 1)`` after every beat. The result is a
    sign-magnitude word of ``acc_width`` bits with the operand's ``frac``. Missing terms of the
    last beat are zero. Without saturation the result does not depend on ``lanes``.
Continuous → discrete (:func:`to_codes`)
    ``y = clip(x, -zone, zone)`` (``zone`` defaults to the largest code magnitude). NaN raises.
    *nearest*: the code whose value is nearest to ``y``; ties (equal distances, or several codes
    with one value) go to the lowest code index. *stochastic* (the seed's rule): if ``y`` is
    below the smallest or above the largest code value it maps to that outer code (this is the
    zone clipping; it is biased when ``zone`` exceeds the outer code). Otherwise let
    ``lo <= y < hi`` be the two nearest code values around ``y`` (``y`` equal to the top value
    gives that value). With random integer ``r`` in ``[0, 2**rand_bits)`` the output is ``hi``
    iff ``r * (hi - lo) < (y - lo) * 2**rand_bits``, else ``lo``; a ``y`` on a code value always
    gives that code. ``P(hi) = ceil((y-lo)/(hi-lo) * 2**R) / 2**R``, unbiased to within
    ``2**-R`` of the gap. Each value's code is its lowest code index. The comparison is exact for
    inputs with at most ~40 significant bits (f16, f32, fixed point up to 32 bits).
Backward pass (seed 001 Fig. 5)
    :func:`matvec_t` is ``Wᵀ·g`` (the same accumulation rule over the columns of ``W``),
    :func:`ew_mul` the element-wise product by a discrete ``f′``, :func:`weight_grad` the outer
    product ``dw = g·xᵀ`` with one of ``g`` or ``x`` discrete.
Weight update (:func:`update_weights`)
    Multiplier-free momentum with power-of-two learning rate and momentum:
    ``v = sat(dw + (v_prev >> mom_shift))`` and ``w = sat(w - (v >> lr_shift))``, i.e.
    ``lr = 2**-lr_shift``, ``momentum = 2**-mom_shift``; ``v`` is the seed's ``dw′`` kept for the
    next update. Shifts truncate magnitudes toward zero; sums saturate to the format's range.
    Discrete weights are re-quantised from the continuous master copy with :func:`to_codes`.
"""

from fractions import Fraction

import numpy as np

__all__ = [
    "CodeBook", "SMFormat", "mul_cd", "div_cd", "dd_table", "dd_op", "DD_OPS", "to_codes",
    "from_codes", "dot", "matvec", "matvec_t", "ew_mul", "weight_grad", "update_weights",
]

#: Names of the discrete ⊗ discrete operations, in the order of their table index.
DD_OPS = ("add", "sub", "mul", "div")

_MAX_SHIFT = 7


def _check_int(value, name, lo, hi):
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer between {lo} and {hi}, not {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer between {lo} and {hi}, not {value!r}")
    return int(value)


class CodeBook:
    """A programmable book of ``2**n`` discrete values ``±2**(±shift)``.

    Parameters
    ----------
    n : int
        Code width in bits, 1, 2 or 3.
    entries : sequence of (sign, direction, shift)
        ``2**n`` triples; ``sign`` 1 is negative, ``direction`` 1 is a left shift (``2**+shift``),
        0 a right shift (``2**-shift``); ``shift`` in 0..7.

    Members
    -------
    n : int
    entries : tuple of (int, int, int)

    Raises
    ------
    TypeError
        If ``n`` or a field is not an integer (bools are rejected), or an entry is not a triple.
    ValueError
        If ``n`` is not 1..3, the number of entries is not ``2**n``, or a field is out of range.
    """

    def __init__(self, n, entries):
        self._n = _check_int(n, "Code width", 1, 3)
        entries = list(entries)
        if len(entries) != 1 << self._n:
            raise ValueError(f"A {self._n}-bit code book needs {1 << self._n} entries, "
                             f"not {len(entries)}")
        checked = []
        for entry in entries:
            if not isinstance(entry, (tuple, list)) or len(entry) != 3:
                raise TypeError(f"Code book entry must be a (sign, direction, shift) triple, "
                                f"not {entry!r}")
            sign, direction, shift = entry
            checked.append((_check_int(sign, "Sign", 0, 1),
                            _check_int(direction, "Direction", 0, 1),
                            _check_int(shift, "Shift", 0, _MAX_SHIFT)))
        self._entries = tuple(checked)

    @property
    def n(self):
        return self._n

    @property
    def entries(self):
        return self._entries

    @classmethod
    def default(cls, n):
        """The default book of width ``n``.

        1 bit: {0: +1, 1: −1} (seed 001). 2 bits: {00: −1, 01: −1/8, 10: +1/8, 11: +1} (seed 001).
        3 bits: {−1, −1/2, −1/4, −1/8, +1/8, +1/4, +1/2, +1} for codes 0..7.
        """
        n = _check_int(n, "Code width", 1, 3)
        if n == 1:
            return cls(1, [(0, 0, 0), (1, 0, 0)])
        if n == 2:
            return cls(2, [(1, 0, 0), (1, 0, 3), (0, 0, 3), (0, 0, 0)])
        return cls(3, [(1, 0, 0), (1, 0, 1), (1, 0, 2), (1, 0, 3),
                       (0, 0, 3), (0, 0, 2), (0, 0, 1), (0, 0, 0)])

    @classmethod
    def from_values(cls, values):
        """Build a book from ``2**n`` values, each ``±2**k`` with ``-7 <= k <= 7``.

        Raises
        ------
        ValueError
            If the number of values is not 2, 4 or 8, or a value is not such a power of two.
        """
        values = [float(v) for v in values]
        if len(values) not in (2, 4, 8):
            raise ValueError(f"A code book has 2, 4 or 8 values, not {len(values)}")
        entries = []
        for v in values:
            mant, exp = np.frexp(abs(v))
            if v == 0 or not np.isfinite(v) or mant != 0.5 or not -7 <= exp - 1 <= 7:
                raise ValueError(f"Code book value must be ±2**k with -7 <= k <= 7, not {v!r}")
            k = int(exp) - 1
            entries.append((int(v < 0), int(k > 0), abs(k)))
        return cls(len(values).bit_length() - 1, entries)

    def exponents(self):
        """Signed exponents ``±shift`` of the entries, as an ``int64`` array."""
        return np.array([s if d else -s for _, d, s in self._entries], dtype=np.int64)

    def signs(self):
        """Sign bits of the entries, as an ``int64`` array."""
        return np.array([e[0] for e in self._entries], dtype=np.int64)

    def values(self):
        """The represented values, ``float64`` array of length ``2**n``, indexed by code."""
        return np.where(self.signs() == 1, -1.0, 1.0) * np.ldexp(1.0, self.exponents())

    def words(self):
        """Entries packed as 5-bit register words ``shift | direction << 3 | sign << 4``."""
        return [s | d << 3 | g << 4 for g, d, s in self._entries]

    def __eq__(self, other):
        return isinstance(other, CodeBook) and self._entries == other._entries

    def __hash__(self):
        return hash(self._entries)

    def __repr__(self):
        return f"CodeBook({self._n}, {list(self._entries)!r})"


class SMFormat:
    """Sign-magnitude fixed point: ``width`` bits, sign on top, value ``±mag * 2**-frac``.

    Parameters
    ----------
    width : int
        Total width in bits, 2..48.
    frac : int
        Fraction bits, 0..40 (may exceed the magnitude width for small-valued formats).

    Members
    -------
    width, frac : int
    max_mag : int
        Largest magnitude, ``2**(width-1) - 1``.

    Raises
    ------
    TypeError
        If ``width`` or ``frac`` is not an integer.
    ValueError
        If they are out of range.
    """

    def __init__(self, width=8, frac=0):
        self._width = _check_int(width, "Width", 2, 48)
        self._frac = _check_int(frac, "Fraction bits", 0, 40)

    @property
    def width(self):
        return self._width

    @property
    def frac(self):
        return self._frac

    @property
    def max_mag(self):
        return (1 << (self._width - 1)) - 1

    def __eq__(self, other):
        return isinstance(other, SMFormat) and (self.width, self.frac) == (other.width, other.frac)

    def __hash__(self):
        return hash((self._width, self._frac))

    def __repr__(self):
        return f"SMFormat(width={self._width}, frac={self._frac})"

    def check(self, words, name="words"):
        """Return ``words`` as an ``int64`` array; ValueError if a word does not fit."""
        arr = np.asarray(words)
        if arr.dtype.kind not in "iub":
            raise TypeError(f"{name} must be an integer array, not {arr.dtype}")
        arr = arr.astype(np.int64)
        if arr.size and (arr.min() < 0 or arr.max() >= 1 << self._width):
            raise ValueError(f"{name} must be {self._width}-bit sign-magnitude words")
        return arr

    def unpack(self, words):
        """``(sign, magnitude)`` arrays of ``words``."""
        words = self.check(words)
        return words >> (self._width - 1), words & self.max_mag

    def pack(self, sign, mag):
        """Words from sign and magnitude arrays; a zero magnitude gets sign 0."""
        sign = np.asarray(sign, dtype=np.int64)
        mag = np.asarray(mag, dtype=np.int64)
        return np.where(mag == 0, 0, (sign << (self._width - 1)) | mag)

    def to_int(self, words):
        """Signed integers (units of ``2**-frac``) of ``words``."""
        sign, mag = self.unpack(words)
        return np.where(sign == 1, -mag, mag)

    def from_int(self, ints):
        """Words of signed integers, saturated to ``±max_mag``."""
        ints = np.clip(np.asarray(ints, dtype=np.int64), -self.max_mag, self.max_mag)
        return self.pack((ints < 0).astype(np.int64), np.abs(ints))

    def decode(self, words):
        """Values of ``words`` as ``float64``."""
        return np.ldexp(self.to_int(words).astype(np.float64), -self._frac)

    def encode(self, values, rounding="zero"):
        """Words nearest to real ``values``: ``"zero"`` (truncate) or ``"nearest"`` (ties to
        even); then saturate. NaN raises ValueError; ±Inf saturates."""
        values = np.asarray(values, dtype=np.float64)
        if np.isnan(values).any():
            raise ValueError("Cannot encode NaN in sign-magnitude fixed point")
        scaled = np.ldexp(values, self._frac)
        if rounding == "zero":
            ints = np.trunc(scaled)
        elif rounding == "nearest":
            ints = np.rint(scaled)
        else:
            raise ValueError(f"Rounding must be 'zero' or 'nearest', not {rounding!r}")
        ints = np.clip(ints, -self.max_mag, self.max_mag)
        return self.from_int(ints.astype(np.int64))


def _check_book(book):
    if not isinstance(book, CodeBook):
        raise TypeError(f"Code book must be a CodeBook, not {book!r}")


def _check_fmt(fmt):
    if not isinstance(fmt, SMFormat):
        raise TypeError(f"Format must be an SMFormat, not {fmt!r}")


def _check_codes(codes, book, name="codes"):
    arr = np.asarray(codes)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array, not {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.size and (arr.min() < 0 or arr.max() >= 1 << book.n):
        raise ValueError(f"{name} must be {book.n}-bit codes")
    return arr


def _shift_cd(x, codes, book, fmt, divide):
    _check_book(book)
    _check_fmt(fmt)
    sign_x, mag = fmt.unpack(x)
    codes = _check_codes(codes, book)
    sign_x, mag, codes = np.broadcast_arrays(sign_x, mag, codes)
    exp = book.exponents()[codes]
    if divide:
        exp = -exp
    right = np.right_shift(mag, np.maximum(-exp, 0))
    left = np.minimum(np.left_shift(mag, np.maximum(exp, 0)), fmt.max_mag)
    out_mag = np.where(exp < 0, right, left)
    return fmt.pack(sign_x ^ book.signs()[codes], out_mag)


def mul_cd(x, codes, book, fmt):
    """Continuous × discrete: ``x`` (sign-magnitude words of ``fmt``) times code values.

    Sign XOR; right shifts truncate the magnitude, left shifts saturate it; zero is canonical.
    ``x`` and ``codes`` broadcast. Returns ``int64`` words of ``fmt``.
    """
    return _shift_cd(x, codes, book, fmt, divide=False)


def div_cd(x, codes, book, fmt):
    """Continuous ÷ discrete: as :func:`mul_cd` with the shift direction reversed."""
    return _shift_cd(x, codes, book, fmt, divide=True)


def dd_table(book, op, fmt):
    """The ``2**n × 2**n`` table of ``a op b`` (row = code ``a``, column = code ``b``).

    Parameters
    ----------
    book : CodeBook
    op : str
        One of :data:`DD_OPS`: ``"add"``, ``"sub"`` (``a − b``), ``"mul"``, ``"div"`` (``a ÷ b``).
    fmt : SMFormat
        Result format; exact results are rounded toward zero and saturated.

    Returns
    -------
    ndarray of int64
        Sign-magnitude words of ``fmt``.
    """
    _check_book(book)
    _check_fmt(fmt)
    if op not in DD_OPS:
        raise ValueError(f"Operation must be one of {', '.join(DD_OPS)}, not {op!r}")
    vals = [Fraction(-1 if s else 1) * Fraction(2) ** (k if d else -k)
            for s, d, k in book.entries]
    size = len(vals)
    table = np.zeros((size, size), dtype=np.int64)
    for a in range(size):
        for b in range(size):
            r = {"add": lambda p, q: p + q, "sub": lambda p, q: p - q,
                 "mul": lambda p, q: p * q, "div": lambda p, q: p / q}[op](vals[a], vals[b])
            scaled = r * (1 << fmt.frac)
            mag = min(abs(scaled.numerator) // scaled.denominator, fmt.max_mag)
            table[a, b] = int(fmt.pack(int(r < 0), mag))
    return table


def dd_op(a, b, book, op, fmt):
    """Discrete ⊗ discrete by table lookup: words of ``fmt`` for codes ``a op b`` (broadcast)."""
    table = dd_table(book, op, fmt)
    a = _check_codes(a, book, "a")
    b = _check_codes(b, book, "b")
    return table[a, b]


def from_codes(codes, book):
    """Discrete → continuous: the ``float64`` values of ``codes``."""
    _check_book(book)
    return book.values()[_check_codes(codes, book)]


def to_codes(x, book, *, mode="nearest", rand=None, rand_bits=None, zone=None):
    """Continuous → discrete conversion (seed 001 module 7).

    Parameters
    ----------
    x : array_like of real
        Values (any float or integer dtype; converted to ``float64``).
    book : CodeBook
    mode : str
        ``"nearest"`` or ``"stochastic"``.
    rand : array_like of int, optional
        Stochastic mode only (ignored in nearest mode): random integers in ``[0, 2**rand_bits)``,
        broadcast against ``x`` (the PRNG bits).
    rand_bits : int, optional
        Stochastic mode only (ignored in nearest mode): width ``R`` of ``rand``, 1..32.
    zone : float, optional
        Clipping bound, ``> 0``; default the largest code magnitude.

    Returns
    -------
    ndarray of uint8
        Codes, shaped like ``broadcast(x, rand)``.

    Raises
    ------
    ValueError
        Unknown mode, NaN input, bad ``zone``, or (stochastic mode) ``rand`` out of range or
        missing.
    TypeError
        Non-integer ``rand`` / ``rand_bits``.
    """
    _check_book(book)
    x = np.asarray(x, dtype=np.float64)
    if np.isnan(x).any():
        raise ValueError("Cannot convert NaN to a discrete code")
    vals = book.values()
    if zone is None:
        zone = float(np.abs(vals).max())
    if isinstance(zone, bool) or not isinstance(zone, (int, float, np.integer, np.floating)):
        raise TypeError(f"Zone must be a positive number, not {zone!r}")
    if not (np.isfinite(zone) and zone > 0):
        raise ValueError(f"Zone must be a positive finite number, not {zone!r}")
    y = np.clip(x, -zone, zone)
    # Distinct values in ascending order, each with its lowest code index.
    uniq, first = np.unique(vals, return_index=True)
    if mode == "nearest":
        dist = np.abs(y[..., None] - vals)
        return np.argmin(dist, axis=-1).astype(np.uint8)
    if mode != "stochastic":
        raise ValueError(f"Mode must be 'nearest' or 'stochastic', not {mode!r}")
    if rand is None or rand_bits is None:
        raise ValueError("Stochastic conversion needs rand and rand_bits")
    rand_bits = _check_int(rand_bits, "Random bit count", 1, 32)
    rand = np.asarray(rand)
    if rand.dtype.kind not in "iu":
        raise TypeError(f"rand must be an integer array, not {rand.dtype}")
    rand = rand.astype(np.int64)
    if rand.size and (rand.min() < 0 or rand.max() >= 1 << rand_bits):
        raise ValueError(f"rand must hold {rand_bits}-bit integers")
    y, rand = np.broadcast_arrays(y, rand)
    # Index of the lower neighbour lo = uniq[i] with lo <= y < hi = uniq[i + 1].
    i = np.clip(np.searchsorted(uniq, y, side="right") - 1, 0, max(len(uniq) - 2, 0))
    if len(uniq) == 1:
        return np.full(y.shape, first[0], dtype=np.uint8)
    lo, hi = uniq[i], uniq[i + 1]
    take_hi = rand * (hi - lo) < (y - lo) * float(1 << rand_bits)
    idx = np.where(take_hi, i + 1, i)
    idx = np.where(y <= uniq[0], 0, np.where(y >= uniq[-1], len(uniq) - 1, idx))
    return first[idx].astype(np.uint8)


def _check_acc(acc_width, fmt):
    return _check_int(acc_width, "Accumulator width", fmt.width, 48)


def _accumulate(terms, fmt, acc_width, lanes):
    """Saturating beat-wise accumulation of ``terms`` (words of ``fmt``) along the last axis."""
    lanes = _check_int(lanes, "Lanes", 1, 256)
    acc_fmt = SMFormat(acc_width, fmt.frac)
    ints = fmt.to_int(terms)
    n = ints.shape[-1]
    beats = -(-n // lanes) if n else 0
    pad = beats * lanes - n
    ints = np.concatenate([ints, np.zeros(ints.shape[:-1] + (pad,), np.int64)], axis=-1)
    ints = ints.reshape(ints.shape[:-1] + (beats, lanes)).sum(axis=-1)
    acc = np.zeros(ints.shape[:-1], dtype=np.int64)
    for k in range(beats):
        acc = np.clip(acc + ints[..., k], -acc_fmt.max_mag, acc_fmt.max_mag)
    return acc_fmt.from_int(acc)


def dot(x, codes, book, fmt, *, acc_width=16, lanes=4):
    """Dot product of continuous words ``x`` and discrete ``codes`` along the last axis.

    Terms are :func:`mul_cd` products; accumulation as in the module docstring. Returns
    sign-magnitude words of ``SMFormat(acc_width, fmt.frac)``.
    """
    _check_fmt(fmt)
    acc_width = _check_acc(acc_width, fmt)
    return _accumulate(mul_cd(x, codes, book, fmt), fmt, acc_width, lanes)


def matvec(w_codes, x, book, fmt, *, acc_width=16, lanes=4):
    """``y = W·x`` for a discrete weight matrix ``w_codes`` (M×N) and continuous ``x`` (N)."""
    w_codes = np.asarray(w_codes)
    x = np.asarray(x)
    if w_codes.ndim != 2 or x.ndim != 1 or w_codes.shape[1] != x.shape[0]:
        raise ValueError(f"matvec needs an M×N matrix and an N vector, not {w_codes.shape} "
                         f"and {x.shape}")
    return dot(x[None, :], w_codes, book, fmt, acc_width=acc_width, lanes=lanes)


def matvec_t(w_codes, g, book, fmt, *, acc_width=16, lanes=4):
    """``Wᵀ·g`` (backward output gradient) for discrete ``w_codes`` (M×N) and ``g`` (M)."""
    return matvec(np.asarray(w_codes).T, g, book, fmt, acc_width=acc_width, lanes=lanes)


def ew_mul(g, fprime_codes, book, fmt):
    """Element-wise ``g ⊙ f′`` with a discrete activation derivative (:func:`mul_cd`)."""
    return mul_cd(g, fprime_codes, book, fmt)


def weight_grad(g, x, book, fmt, *, discrete="x"):
    """Weight gradient ``dw[i, j] = g[i] · x[j]`` (``dw = g·xᵀ``) by shift/XOR.

    Parameters
    ----------
    g, x : array_like
        1-D. The one named by ``discrete`` holds codes of ``book``, the other words of ``fmt``.
    discrete : str
        ``"x"`` or ``"g"``.

    Returns
    -------
    ndarray of int64
        ``len(g) × len(x)`` words of ``fmt``.
    """
    g = np.asarray(g)
    x = np.asarray(x)
    if g.ndim != 1 or x.ndim != 1:
        raise ValueError("weight_grad needs two vectors")
    if discrete == "x":
        return mul_cd(g[:, None], x[None, :], book, fmt)
    if discrete == "g":
        return mul_cd(x[None, :], g[:, None], book, fmt)
    raise ValueError(f"discrete must be 'x' or 'g', not {discrete!r}")


def update_weights(w, dw, v_prev, fmt, *, lr_shift, mom_shift=None):
    """One multiplier-free momentum update of continuous weights (words of ``fmt``).

    ``v = sat(dw + (v_prev >> mom_shift))``; ``w' = sat(w − (v >> lr_shift))``. Shifts act on
    magnitudes (truncating toward zero); ``mom_shift=None`` means no momentum (``v = dw``).

    Returns
    -------
    (w_new, v) : tuple of int64 arrays
        Words of ``fmt``; keep ``v`` as ``v_prev`` (the seed's ``dw′``) for the next update.
    """
    _check_fmt(fmt)
    lr_shift = _check_int(lr_shift, "Learning-rate shift", 0, 31)

    def shr(words, k):
        sign, mag = fmt.unpack(words)
        return fmt.pack(sign, mag >> k)

    if mom_shift is None:
        v = fmt.from_int(fmt.to_int(dw))
    else:
        mom_shift = _check_int(mom_shift, "Momentum shift", 0, 31)
        v = fmt.from_int(fmt.to_int(dw) + fmt.to_int(shr(v_prev, mom_shift)))
    w_new = fmt.from_int(fmt.to_int(w) - fmt.to_int(shr(v, lr_shift)))
    return w_new, v
