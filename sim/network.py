"""Golden model of a quantised dense layer as the accelerator runs it (DESIGN §3.6).

This is the contract between the host-side network tools (training, conversion, the digits demo)
and the accelerator's layer programs: the hardware runs :func:`bfp_dense` and
:func:`discrete_dense` bit for bit. Pure NumPy; never imports Amaranth.

Data representation
-------------------
Every activation is an int8 code ``m`` with an exponent ``e`` (value ``m · 2^e``); a vector of
``K`` activations carries one exponent per block of ``B`` elements (BFP blocks along the
reduction axis). In the scratchpad an element is one 16-bit word ``m | e << 8`` (both bytes
two's complement), see :func:`pack_elements`.

BFP dense layer (:class:`BFPDense`, :func:`bfp_dense`)
------------------------------------------------------
1. **Matrix-vector product** on :class:`lowbit.sim.bfp_column.ColumnModel` (``N`` lanes): the ``R``
   weight rows are processed in tiles of ``N`` rows (the last tile padded with zero rows whose
   exponents are 0 and zero biases), each tile one :meth:`~lowbit.sim.bfp_column.ColumnModel.matvec`
   with the layer's bias, runtime width ``W``, rounding and exponent selector. With
   ``exp_mode="fixed"`` every tile's output exponent is ``out_exp`` (clamped to the exponent
   range); with ``"max"`` each tile has its own; with ``"predicted"`` each tile's exponent comes
   from the column's predicted selector (:class:`lowbit.sim.bfp_column.ExponentPredictor`, ``k =
   3``,
   margin 2): its history is cleared when the layer starts and carried from tile to tile in
   order, so the first tile uses the max rule and later tiles the prediction from the earlier
   tiles' outputs when it neither overflows nor underflows (else the max rule, restarting the
   statistics). This is MATVEC with ``EXP_SELECT`` 2 as the first product after the history
   was cleared (:class:`lowbit.sim.program.Machine`; a RUN clears it, and a layer program clears it
   before each predicted layer, see :class:`lowbit.sim.program.NetworkLayout`).
2. **Activation** (optional): the output mantissas index a 256-entry transfer table
   (:func:`lowbit.sim.lut.transfer_table`, code reinterpreted as uint8); the looked-up int8 codes
   get
   exponent ``table_exp``. A table needs ``exp_mode="fixed"``, because a table encodes one input
   scale.

Discrete dense layer (:class:`DiscreteDense`, :func:`discrete_dense`)
---------------------------------------------------------------------
Weights are codes of a :class:`lowbit.sim.discrete.CodeBook`. The int8 input codes ``m`` become
8-bit
sign-magnitude words (``-128`` saturates to ``-127``; input exponents are ignored: the scale is
the host's bookkeeping); :func:`lowbit.sim.discrete.matvec` forms the saturating sign-magnitude dot
products (``acc_width`` bits, ``lanes`` terms per beat). Then, in integers: ``v = clamp(acc +
bias, ±(2^(acc_width-1) - 1))``, ``y = clamp(floor((v + 2^(shift-1)) / 2^shift), -127, 127)``
for ``shift > 0`` (round half up), ``y = clamp(v, -127, 127)`` for ``shift = 0``. The optional
table and ``table_exp`` act as in the BFP layer; without a table the output exponent is
``out_exp``.
"""

import dataclasses

import numpy as np

from .bfp_column import ColumnModel
from .discrete import CodeBook, SMFormat
from .discrete import matvec as discrete_matvec
from .lut import lookup

__all__ = ["BFPDense", "DiscreteDense", "bfp_dense", "discrete_dense", "pack_elements",
           "unpack_elements", "block_exponents"]


def _int_array(name, value, ndim):
    a = np.asarray(value)
    if a.ndim != ndim or not np.issubdtype(a.dtype, np.integer):
        raise TypeError(f"{name} must be a {ndim}-d integer array, not {a.dtype} of shape "
                        f"{a.shape}")
    return a.astype(np.int64)


def _check_table(table):
    if table is None:
        return None
    t = np.asarray(table)
    if t.shape != (256,) or not np.issubdtype(t.dtype, np.integer):
        raise ValueError(f"An activation table must be 256 integers, not {t.dtype} of shape "
                         f"{t.shape}")
    if t.min() < -128 or t.max() > 255:
        raise ValueError("Activation table entries must be bytes")
    return (t.astype(np.int64) & 0xFF).astype(np.uint8).view(np.int8).astype(np.int64)


@dataclasses.dataclass(frozen=True, eq=False)
class BFPDense:
    """One BFP dense layer ``act(W·x + b)``.

    Parameters
    ----------
    w_m : array of int, shape (R, K)
        Weight mantissas (``K`` a multiple of the column's block size ``B``).
    w_e : array of int, shape (R, K // B)
        Weight exponents, one per row and block.
    bias_m, bias_e : array of int, shape (R,), or None
        Bias mantissas and exponents (both or neither).
    width : int
        Output mantissa width ``W`` (runtime, 2..8).
    rounding : {"nearest", "zero", "stochastic"}
    exp_mode : {"fixed", "max", "predicted"}
        Output exponent selector of the tiles (module docstring).
    out_exp : int
        Output exponent of the fixed selector.
    table : array of 256 int, or None
        Activation table (int8 or uint8 entries); needs ``exp_mode="fixed"``.
    table_exp : int
        Exponent of the table's output codes.
    """
    w_m: np.ndarray
    w_e: np.ndarray
    bias_m: np.ndarray | None = None
    bias_e: np.ndarray | None = None
    width: int = 8
    rounding: str = "nearest"
    exp_mode: str = "fixed"
    out_exp: int = 0
    table: np.ndarray | None = None
    table_exp: int = 0

    def __post_init__(self):
        w_m = _int_array("Weight mantissas", self.w_m, 2)
        w_e = _int_array("Weight exponents", self.w_e, 2)
        if w_e.shape[0] != w_m.shape[0] or w_e.shape[1] == 0 or \
                w_m.shape[1] % w_e.shape[1]:
            raise ValueError(f"Weight exponents of shape {w_e.shape} do not match mantissas of "
                             f"shape {w_m.shape}")
        object.__setattr__(self, "w_m", w_m)
        object.__setattr__(self, "w_e", w_e)
        if (self.bias_m is None) != (self.bias_e is None):
            raise ValueError("Give both bias mantissas and bias exponents, or neither")
        if self.bias_m is not None:
            for name in ("bias_m", "bias_e"):
                b = _int_array(name, getattr(self, name), 1)
                if b.shape != (w_m.shape[0],):
                    raise ValueError(f"{name} must have shape ({w_m.shape[0]},), not {b.shape}")
                object.__setattr__(self, name, b)
        if self.exp_mode not in ("fixed", "max", "predicted"):
            raise ValueError(f"Exponent mode must be 'fixed', 'max' or 'predicted', not "
                             f"{self.exp_mode!r}")
        if self.rounding not in ("nearest", "zero", "stochastic"):
            raise ValueError(f"Rounding must be 'nearest', 'zero' or 'stochastic', not "
                             f"{self.rounding!r}")
        object.__setattr__(self, "table", _check_table(self.table))
        if self.table is not None and self.exp_mode != "fixed":
            raise ValueError("An activation table needs the fixed exponent selector")

    @property
    def rows(self):
        return self.w_m.shape[0]

    @property
    def cols(self):
        return self.w_m.shape[1]

    @property
    def block(self):
        return self.w_m.shape[1] // self.w_e.shape[1]


@dataclasses.dataclass(frozen=True, eq=False)
class DiscreteDense:
    """One discrete-weight dense layer (module docstring).

    Parameters
    ----------
    w_codes : array of int, shape (R, K)
        Weight codes of ``book``.
    book : lowbit.sim.discrete.CodeBook
    bias : array of int, shape (R,), or None
        Integer bias added to the accumulator.
    shift : int
        Right shift of the requantiser, 0..31 (the DISC_SHIFT register).
    acc_width : int
        Accumulator width (8..32).
    out_exp : int
        Exponent of the output codes when there is no table.
    table : array of 256 int, or None
    table_exp : int
    """
    w_codes: np.ndarray
    book: CodeBook
    bias: np.ndarray | None = None
    shift: int = 0
    acc_width: int = 16
    out_exp: int = 0
    table: np.ndarray | None = None
    table_exp: int = 0

    def __post_init__(self):
        w = _int_array("Weight codes", self.w_codes, 2)
        if not isinstance(self.book, CodeBook):
            raise TypeError(f"Code book must be a lowbit.sim.discrete.CodeBook, not {self.book!r}")
        if w.size and (w.min() < 0 or w.max() >= 1 << self.book.n):
            raise ValueError(f"Weight codes must be in 0..{(1 << self.book.n) - 1}")
        object.__setattr__(self, "w_codes", w)
        if self.bias is not None:
            b = _int_array("Bias", self.bias, 1)
            if b.shape != (w.shape[0],):
                raise ValueError(f"Bias must have shape ({w.shape[0]},), not {b.shape}")
            object.__setattr__(self, "bias", b)
        for name, lo, hi in (("shift", 0, 31), ("acc_width", 8, 32)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise ValueError(f"{name} must be an integer between {lo} and {hi}, not {v!r}")
        object.__setattr__(self, "table", _check_table(self.table))

    @property
    def rows(self):
        return self.w_codes.shape[0]

    @property
    def cols(self):
        return self.w_codes.shape[1]


def block_exponents(exps, block, n):
    """Per-element exponents of ``n`` elements from one exponent per block."""
    return np.repeat(np.asarray(exps, dtype=np.int64), block)[:n]


def pack_elements(m, e):
    """Scratchpad words ``m | e << 8`` (uint16) of int8 mantissas ``m`` and exponents ``e``."""
    m = np.asarray(m, dtype=np.int64)
    e = np.broadcast_to(np.asarray(e, dtype=np.int64), m.shape)
    if m.min(initial=0) < -128 or m.max(initial=0) > 127 or \
            e.min(initial=0) < -128 or e.max(initial=0) > 127:
        raise ValueError("Element mantissas and exponents must be int8")
    return ((m & 0xFF) | (e & 0xFF) << 8).astype(np.uint16)


def unpack_elements(words):
    """``(m, e)`` int64 arrays from scratchpad element words."""
    w = np.asarray(words, dtype=np.int64)
    m, e = w & 0xFF, (w >> 8) & 0xFF
    return np.where(m > 127, m - 256, m), np.where(e > 127, e - 256, e)


def bfp_dense(layer, x_m, x_e, column, *, rand=None):
    """Run ``layer`` on one input vector, as the accelerator does.

    Parameters
    ----------
    layer : BFPDense
    x_m : array of int, shape (K,)
        Input mantissas.
    x_e : array of int, shape (K // B,)
        Input block exponents.
    column : lowbit.sim.bfp_column.ColumnModel
        The column (lanes ``N``, block ``B`` = ``layer.block``). Its predicted selector's
        history is cleared first and, in ``"predicted"`` mode, left as the last tile made it.
    rand : array of int, shape (tiles, N), optional
        Random numbers of stochastic output rounding, one row per tile.

    Returns
    -------
    (m, e) : numpy.ndarray, numpy.ndarray
        ``R`` output codes and one exponent per output row (the tile's exponent, or
        ``table_exp`` after an activation table).
    """
    if not isinstance(layer, BFPDense):
        raise TypeError(f"Layer must be a BFPDense, not {layer!r}")
    if not isinstance(column, ColumnModel):
        raise TypeError(f"Column must be a lowbit.sim.bfp_column.ColumnModel, not {column!r}")
    if column.block != layer.block:
        raise ValueError(f"Layer block size {layer.block} differs from the column's "
                         f"{column.block}")
    column.clear_history()
    m, e = column.matvec_batch(
        layer.w_m, layer.w_e, np.asarray(x_m)[None], np.asarray(x_e)[None],
        bias_m=layer.bias_m, bias_e=layer.bias_e, width=layer.width, rounding=layer.rounding,
        exp_mode=layer.exp_mode, fixed_exp=layer.out_exp,
        rand=None if rand is None else np.asarray(rand)[None])
    m, e = m[0], e[0]
    if layer.table is not None:
        m = lookup(layer.table, m)
        e = np.full_like(e, layer.table_exp)
    return m, e


def discrete_dense(layer, x_m, *, lanes=4):
    """Run a :class:`DiscreteDense` layer on int8 input codes ``x_m``.

    ``lanes`` is the discrete unit's terms per beat (it matters only when the accumulator
    saturates). Returns ``(m, e)`` like :func:`bfp_dense`.
    """
    if not isinstance(layer, DiscreteDense):
        raise TypeError(f"Layer must be a DiscreteDense, not {layer!r}")
    x = np.asarray(x_m, dtype=np.int64)
    if x.shape != (layer.cols,):
        raise ValueError(f"Input must have shape ({layer.cols},), not {x.shape}")
    fmt = SMFormat(8, 0)
    x_sm = fmt.from_int(np.clip(x, -127, 127))
    acc = discrete_matvec(layer.w_codes, x_sm, layer.book, fmt, acc_width=layer.acc_width,
                          lanes=lanes)
    v = SMFormat(layer.acc_width, 0).to_int(acc)
    if layer.bias is not None:
        lim = (1 << (layer.acc_width - 1)) - 1
        v = np.clip(v + layer.bias, -lim, lim)
    if layer.shift:
        v = (v + (1 << (layer.shift - 1))) >> layer.shift
    m = np.clip(v, -127, 127)
    e = np.full_like(m, layer.out_exp)
    if layer.table is not None:
        m = lookup(layer.table, m)
        e = np.full_like(e, layer.table_exp)
    return m, e
