"""Golden model of the transfer lookup tables between quantised layers (DESIGN §3.5, seed 003).

A transfer table fuses dequantise -> operator chain -> requantise into one table indexed by the
input code, so the accelerator applies an activation between two quantised layers with one
memory read per element.

**int8 / uint8 tables (256 entries).** For every input bit pattern ``i`` in 0..255 the input
code is ``j = i`` (uint8 input) or the int8 value of the pattern (int8 input); this is the
TFLite-Micro convention *index = input code as uint8*, i.e. ``TF[uint8(j)]``. Then

    TF[i] = clamp(round_half_away(op_n(...op_1(s_in * (j - z_in))...) * (1 / s_out)) + z_out,
                  qmin_out, qmax_out)

in one of two arithmetics (``arithmetic=`` of :func:`transfer_table`):

- ``"tflite"`` (the default): TFLite-Micro's ``LUTPopulateInt8`` entry for entry, in IEEE
  float32 as its C++ computes it: the scales are float32 (as a ``.tflite`` file stores them),
  ``dequantized = s_in * float(j - z_in)``, each operator's result is a float32, ``inverse =
  1.0f / s_out`` and ``rescaled = round(transformed * inverse)``, every operation rounded to
  float32. So a product that is a tie in exact arithmetic usually lands just off it, and its
  entry is the one TFLite stores (checked against a verbatim C++ transcription compiled with
  the system compiler, ``tests/test_lut_model.py``). Identity, ReLU, ReLU6 and leaky ReLU
  (``alpha`` as a float32) are exact float32 operations, so their tables are TFLite's bit
  for bit. The transcendental operators are evaluated in float64 on the float32 input and
  rounded to float32, i.e. the correctly rounded float32 value; a C++ library whose float
  function (``expf``, ``tanhf``, ...) is not correctly rounded can differ in the last float32
  bit, which moves an entry only when the value is within one float32 ulp of a rounding
  boundary.
- ``"float64"``: IEEE float64 throughout (numpy), the scales as given, and the quotient
  ``y / s_out`` a correctly rounded float64 division: the closer-to-exact table (the seed
  digest's choice), which differs from TFLite's in about one entry in a thousand for scales
  that are not powers of two (identity requantisation between scales of ratio 2, for
  example: exact ties on one side, float32 results just off them on the other).

Both arithmetics agree wherever the scales are powers of two (every product is then exact in
either), which is how the demo network's ReLU tables are built. The other rules are common:

- Rounding is round half away from zero (``std::round``, TFLite's ``TfLiteRound``); exact ties
  occur in float64 e.g. for identity requantisation between power-of-two scales of ratio 2.
- Saturation: after adding the output zero point, the value is clamped to the output range:
  int8 [-128, 127], uint8 [0, 255], int8 with ``narrow_range`` [-127, 127] (TFLite's own
  routine clamps to the type's full range; narrow-range activations do not occur there). ±Inf
  (``exp`` overflowing the float type) saturates like any large value (in TFLite's C++ the
  conversion of an infinity to ``int32_t`` is undefined).
- NaN: the operators here never produce NaN from finite inputs; if a chain does, the generator
  raises ``ValueError`` instead of storing a meaningless code.
- With ``narrow_range`` input, the pattern 0x80 (code -128, outside the range) is still
  dequantised and looked up normally, so the table always has 256 defined entries.

**int8 / uint8 inputs with int16 outputs (256 entries).** The layers on the two sides may
have different widths (seed 003): :func:`transfer_table` with an int16 output quantisation
gives 256 int16 entries by the same formula, arithmetic, rounding and saturation (to
[-32768, 32767]); the gateware keeps them in its 16-bit memories (:func:`wide_image`).

**int16 inputs (513-entry interpolated tables).** The TFLite int16 scheme (``gen_lut`` /
``LUTPopulateInt16`` with ``FloatT = double`` and ``lut_lookup_with_interpolation``), followed
exactly: :func:`gen_lut_int16` samples the float chain at 513 points across the whole int16 input
range, corrects each entry by half the midpoint interpolation error, and :func:`lookup_int16`
interpolates between two entries with the 7 low input bits using integer arithmetic, rounding
the product half up (``(slope * offset + 64) >> 7``). The output is int16 or, for a wide
layer feeding a narrow one, int8 (TFLite's ``gen_lut<double, int16_t, int8_t>``: output
scaling 256 / (255 s_out), entries clamped to [-128, 127], slope and result wrapping in
int8). :func:`int16_error_bound` is a proved per-input bound of the distance to the exactly
quantised result (see ``docs/lut.md``).

This module is pure numpy (plus :mod:`math` for ``erf``); it never imports Amaranth.
"""

import hashlib
import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Quant", "Op", "OP_NAMES", "make_op", "normalize_ops", "round_half_away", "dequantize",
    "quantize", "apply_ops", "transfer_table", "lookup", "gen_lut_int16", "lookup_int16",
    "int16_error_bound", "TableBank", "WIDE_DEPTH", "ARITHMETICS", "WIDE_OUTPUTS", "WIDE_FORMATS",
    "wide_format", "wide_image", "wide_inputs", "lookup_wide", "add_int8", "mul_int8",
    "AddByTables",
]

#: Arithmetics of :func:`transfer_table`: TFLite-Micro's float32 (default) or float64.
ARITHMETICS = ("tflite", "float64")

#: Entries of an int16 interpolated table.
WIDE_DEPTH = 513

_RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767)}
_NP_DTYPES = {"int8": np.int8, "uint8": np.uint8, "int16": np.int16}


def _is_int(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_real(value):
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_))


@dataclass(frozen=True)
class Quant:
    """Per-tensor affine quantisation ``r = scale * (q - zero_point)``.

    Symmetric quantisation is ``zero_point = 0`` (optionally with ``narrow_range``, the range
    [-127, 127] of int8); asymmetric quantisation has any zero point inside the code range.

    Parameters
    ----------
    scale : float
        Positive, finite quantisation step.
    zero_point : int
        Code of real zero; must lie in the code range of ``dtype``.
    dtype : str
        ``"int8"``, ``"uint8"`` or ``"int16"``.
    narrow_range : bool
        Exclude the most negative code (signed types only).

    Raises
    ------
    TypeError
        For a non-real scale, a non-integer zero point, a non-string dtype or a non-bool
        narrow_range.
    ValueError
        For a scale that is not positive and finite, an unknown dtype, a zero point outside
        the range, or ``narrow_range`` on uint8.
    """
    scale: float
    zero_point: int = 0
    dtype: str = "int8"
    narrow_range: bool = False

    def __post_init__(self):
        if not _is_real(self.scale):
            raise TypeError(f"Scale must be a real number, not {self.scale!r}")
        if not (math.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"Scale must be positive and finite, not {self.scale!r}")
        if not _is_int(self.zero_point):
            raise TypeError(f"Zero point must be an integer, not {self.zero_point!r}")
        if not isinstance(self.dtype, str):
            raise TypeError(f"Dtype must be a string, not {self.dtype!r}")
        if self.dtype not in _RANGES:
            raise ValueError(f"Dtype must be one of {', '.join(_RANGES)}, not {self.dtype!r}")
        if not isinstance(self.narrow_range, bool):
            raise TypeError(f"Narrow range must be a bool, not {self.narrow_range!r}")
        if self.narrow_range and self.dtype == "uint8":
            raise ValueError("Narrow range applies to signed types only, not uint8")
        lo, hi = _RANGES[self.dtype]
        if not lo <= self.zero_point <= hi:
            raise ValueError(f"Zero point must be between {lo} and {hi} for {self.dtype}, "
                             f"not {self.zero_point}")
        object.__setattr__(self, "scale", float(self.scale))
        object.__setattr__(self, "zero_point", int(self.zero_point))

    @property
    def qmin(self):
        """Smallest code of the range."""
        return _RANGES[self.dtype][0] + (1 if self.narrow_range else 0)

    @property
    def qmax(self):
        """Largest code of the range."""
        return _RANGES[self.dtype][1]

    @property
    def bits(self):
        """Code width in bits."""
        return 16 if self.dtype == "int16" else 8


# --- operators -------------------------------------------------------------------------------

_GELU_XMIN = -0.7517915246935645  # argmin of x * Phi(x)
_SILU_XMIN = -1.2784645427610738  # argmin of x * sigmoid(x)
_SQRT1_2 = math.sqrt(0.5)
_erf_vec = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x):
    # The two branches keep exp from overflowing for large |x|.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _exp_scalar(x):
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _peak_max(fn, a, b, peaks):
    """max |fn| on [a, b] for |fn| monotone between consecutive ``peaks`` (and 0)."""
    points = [a, b] + [p for p in peaks if a < p < b]
    return max(abs(fn(p)) for p in points)


def _sig(x):
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def _d_sigmoid(x):
    s = _sig(x)
    return s * (1 - s)


def _dd_sigmoid(x):
    s = _sig(x)
    return s * (1 - s) * (1 - 2 * s)


_LN_2_SQRT3 = math.log(2 + math.sqrt(3))     # peaks of |sigmoid''|
_ATANH_1_SQRT3 = math.atanh(1 / math.sqrt(3))  # peaks of |tanh''|
_TWO_SQRTPI = 2 / math.sqrt(math.pi)


def _local(d1, d2, peaks2):
    """Local bounds for a smooth odd-symmetric-derivative operator (sigmoid, tanh, erf).

    |f'| decreases with |x| and |f''| rises from 0 at x = 0 to its peaks then falls, so their
    maxima over [a, b] are attained at the ends or at a peak inside.
    """
    return (lambda a, b: _peak_max(d1, a, b, (0.0,)),
            lambda a, b: _peak_max(d2, a, b, (0.0,) + peaks2))


def _exp_bound(a, b):
    return _exp_scalar(b)


def _leaky_lip(alpha):
    def lip(a, b):
        return max(abs(alpha) if a < 0 else 0.0, 1.0 if b > 0 else 0.0)
    return lip


#: name -> (function, |f'| bound on [a, b], |f''| bound on [a, b] away from kinks, kinks,
#: critical points). Constants hold on the whole real line.
_OPS = {
    "identity": (lambda x, a: x, 1.0, 0.0, (), ()),
    "relu": (lambda x, a: np.maximum(x, 0.0), lambda a, b: 1.0 if b > 0 else 0.0, 0.0, (0.0,),
             (0.0,)),
    "relu6": (lambda x, a: np.minimum(np.maximum(x, 0.0), 6.0),
              lambda a, b: 1.0 if (b > 0 and a < 6) else 0.0, 0.0, (0.0, 6.0), (0.0, 6.0)),
    "leaky_relu": (lambda x, a: np.where(x >= 0, x, a * x), None, 0.0, (0.0,), (0.0,)),
    "sigmoid": (lambda x, a: _sigmoid(x),
                *_local(_d_sigmoid, _dd_sigmoid, (-_LN_2_SQRT3, _LN_2_SQRT3)), (), ()),
    "tanh": (lambda x, a: np.tanh(x),
             *_local(lambda x: 1 - math.tanh(x) ** 2,
                     lambda x: 2 * math.tanh(x) * (1 - math.tanh(x) ** 2),
                     (-_ATANH_1_SQRT3, _ATANH_1_SQRT3)), (), ()),
    "erf": (lambda x, a: _erf_vec(x),
            *_local(lambda x: _TWO_SQRTPI * math.exp(-x * x),
                    lambda x: 2 * x * _TWO_SQRTPI * math.exp(-x * x),
                    (-_SQRT1_2, _SQRT1_2)), (), ()),
    # gelu' = Phi + x phi peaks at x = sqrt(2) (1.128986); gelu'' = phi (2 - x^2) peaks at 0.
    "gelu": (lambda x, a: 0.5 * x * (1.0 + _erf_vec(x * _SQRT1_2)), 1.12899,
             2 / math.sqrt(2 * math.pi), (), (_GELU_XMIN,)),
    # silu' peaks near x = 2.3994 at 1.099839; silu'' = s(1-s)(2 + x(1-2s)) peaks at 0 (0.5).
    "silu": (lambda x, a: x * _sigmoid(x), 1.09984, 0.5, (), (_SILU_XMIN,)),
    "exp": (lambda x, a: np.exp(x), _exp_bound, _exp_bound, (), ()),
}

#: Operator names understood by :func:`make_op` (``requantise`` is an alias of ``identity``).
OP_NAMES = tuple(_OPS) + ("requantise",)


@dataclass(frozen=True)
class Op:
    """One point-to-point operator of a transfer chain.

    Members
    -------
    name : str
        One of :data:`OP_NAMES` (aliases resolved).
    alpha : float
        Negative-side slope of ``leaky_relu`` (0.0 for the other operators).
    """
    name: str
    alpha: float = 0.0

    def __call__(self, x):
        """Apply the operator to a float64 array."""
        with np.errstate(over="ignore"):
            return _OPS[self.name][0](np.asarray(x, dtype=np.float64), self.alpha)

    def f32(self, x):
        """Apply the operator to a float32 array as C++ ``float`` code does (a float32 result):
        the piecewise-linear operators exactly in float32 (``alpha`` as a float32), the others
        as the correctly rounded float32 of their float64 value."""
        x = np.asarray(x, dtype=np.float32)
        if self.name == "identity":
            return x
        if self.name == "relu":
            return np.maximum(x, np.float32(0))
        if self.name == "relu6":
            return np.minimum(np.maximum(x, np.float32(0)), np.float32(6))
        if self.name == "leaky_relu":
            return np.where(x >= 0, x, np.float32(self.alpha) * x).astype(np.float32)
        with np.errstate(over="ignore"):
            return self(x.astype(np.float64)).astype(np.float32)

    def scalar(self, x):
        """Apply the operator to one float (used by the error bound)."""
        return float(self(np.float64(x)))

    def lipschitz(self, a, b):
        """An upper bound of |f'| on [a, b]."""
        lip = _leaky_lip(self.alpha) if self.name == "leaky_relu" else _OPS[self.name][1]
        return lip(a, b) if callable(lip) else lip

    def second(self, a, b):
        """An upper bound of |f''| on [a, b], or None if f is not twice differentiable there."""
        if any(a < k < b for k in self.kinks):
            return None
        m2 = _OPS[self.name][2]
        return m2(a, b) if callable(m2) else m2

    @property
    def kinks(self):
        """Points where the derivative jumps."""
        if self.name == "leaky_relu" and self.alpha == 1.0:
            return ()
        return _OPS[self.name][3]

    def slope_jumps(self):
        """(kink, jump of f') pairs of a piecewise-linear operator."""
        jumps = {"relu": ((0.0, 1.0),), "relu6": ((0.0, 1.0), (6.0, -1.0)),
                 "leaky_relu": ((0.0, 1.0 - self.alpha),)}
        return jumps.get(self.name, ()) if self.kinks else ()

    def image(self, a, b):
        """(min, max) of f on [a, b]."""
        points = [a, b] + [c for c in _OPS[self.name][4] if a < c < b]
        values = [self.scalar(p) for p in points]
        return min(values), max(values)


def make_op(name, alpha=None):
    """Build an :class:`Op` from a name (and ``alpha`` for ``leaky_relu``, default 0.01).

    Raises
    ------
    TypeError
        If ``name`` is not a string or ``alpha`` is not a real number.
    ValueError
        For an unknown operator, a non-finite alpha, or alpha given to another operator.
    """
    if not isinstance(name, str):
        raise TypeError(f"Operator name must be a string, not {name!r}")
    if name == "requantise":
        name = "identity"
    if name not in _OPS:
        raise ValueError(f"Operator must be one of {', '.join(OP_NAMES)}, not {name!r}")
    if name == "leaky_relu":
        alpha = 0.01 if alpha is None else alpha
        if not _is_real(alpha):
            raise TypeError(f"Leaky-ReLU alpha must be a real number, not {alpha!r}")
        if not math.isfinite(alpha):
            raise ValueError(f"Leaky-ReLU alpha must be finite, not {alpha!r}")
        return Op(name, float(alpha))
    if alpha is not None:
        raise ValueError(f"Operator {name!r} takes no alpha")
    return Op(name)


def normalize_ops(ops):
    """Turn an operator spec into a tuple of :class:`Op`.

    ``ops`` is one spec or a list/tuple of specs applied in order; a spec is an :class:`Op`, a
    name (``"tanh"``) or a ``(name, alpha)`` pair (``("leaky_relu", 0.2)``). An empty chain is
    the identity.

    Raises
    ------
    TypeError, ValueError
        For a malformed spec, from :func:`make_op`.
    """
    if isinstance(ops, (Op, str)) or (isinstance(ops, tuple) and len(ops) == 2
                                       and isinstance(ops[0], str) and _is_real(ops[1])):
        ops = [ops]
    if not isinstance(ops, (list, tuple)):
        raise TypeError(f"Operators must be a name, an Op, or a list of them, not {ops!r}")
    out = []
    for spec in ops:
        if isinstance(spec, Op):
            out.append(make_op(spec.name, spec.alpha if spec.name == "leaky_relu" else None))
        elif isinstance(spec, str):
            out.append(make_op(spec))
        elif isinstance(spec, tuple) and len(spec) == 2:
            out.append(make_op(*spec))
        else:
            raise TypeError(f"Operator spec must be a name, an Op or (name, alpha), not {spec!r}")
    return tuple(out)


def apply_ops(ops, x):
    """Apply the chain ``ops`` (see :func:`normalize_ops`) to ``x`` in float64."""
    y = np.asarray(x, dtype=np.float64)
    for op in normalize_ops(ops):
        y = op(y)
    return y


# --- quantisation ----------------------------------------------------------------------------

def round_half_away(v):
    """Round float64 values to the nearest integer, ties away from zero (``std::round``).

    Exact for every float64, including 0.49999999999999994 (which ``floor(v + 0.5)`` gets wrong).
    Infinities are returned unchanged.
    """
    v = np.asarray(v, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        t = np.trunc(v)
        frac = np.where(np.isfinite(v), v - t, 0.0)
    return t + np.where(np.abs(frac) >= 0.5, np.sign(v), 0.0)


def dequantize(codes, q):
    """Real values ``q.scale * (codes - q.zero_point)`` in float64."""
    return np.float64(q.scale) * (np.asarray(codes, dtype=np.float64) - q.zero_point)


def quantize(y, q):
    """Codes ``clamp(round_half_away(y / q.scale) + q.zero_point, q.qmin, q.qmax)`` as int64.

    Raises
    ------
    ValueError
        If ``y`` contains NaN.
    """
    y = np.asarray(y, dtype=np.float64)
    if np.isnan(y).any():
        raise ValueError("Operator chain produced NaN; no code represents it")
    with np.errstate(over="ignore"):
        r = round_half_away(y / q.scale) + q.zero_point
    return np.clip(r, q.qmin, q.qmax).astype(np.int64)


def _index_codes(q_in):
    """Input code of every uint8 index 0..255."""
    idx = np.arange(256, dtype=np.int64)
    return idx if q_in.dtype == "uint8" else np.where(idx >= 128, idx - 256, idx)


def _tflite_codes(ops, q_in, q_out):
    """TFLite-Micro's ``LUTPopulateInt8`` in float32 (see the module docstring), unclamped, as
    float64 integers (±inf for overflow)."""
    s_in, s_out = np.float32(q_in.scale), np.float32(q_out.scale)
    with np.errstate(over="ignore"):
        if not (np.isfinite(s_in) and np.isfinite(s_out) and s_in > 0 and s_out > 0):
            raise ValueError(f"Scales {q_in.scale!r} and {q_out.scale!r} must be positive "
                             "finite float32 values for TFLite arithmetic")
        inverse = np.float32(1) / s_out
        y = s_in * (_index_codes(q_in) - q_in.zero_point).astype(np.float32)
        for op in normalize_ops(ops):
            y = op.f32(y)
        if np.isnan(y).any():
            raise ValueError("Operator chain produced NaN; no code represents it")
        rescaled = round_half_away(y * inverse)          # the product rounded to float32
    return rescaled + q_out.zero_point


def transfer_table(ops, q_in, q_out, *, arithmetic="tflite"):
    """The 256-entry transfer table of ``ops`` from 8-bit ``q_in`` to ``q_out``.

    The output may be wider than the input (seed 003: the two layers' widths may differ): an
    int16 ``q_out`` gives 256 int16 entries by the same rule (the same arithmetic, rounding
    half away from zero, then the output zero point, then saturation to [-32768, 32767], or
    [-32767, 32767] with ``narrow_range``). This is ``LUTPopulateInt8`` with its output type
    widened, one exact entry per input code; TFLite's own int8 -> int16 routine
    (``gen_lut<float, int8_t, int16_t>``) instead samples 256 nodes spread over 255/256 of a
    code each, with its interpolation bias, and ignores the output zero point.

    Parameters
    ----------
    ops
        An operator chain (:func:`normalize_ops`).
    q_in, q_out : Quant
        Input quantisation (int8 or uint8) and output quantisation (int8, uint8 or int16).
    arithmetic : {"tflite", "float64"}
        TFLite-Micro's float32 ``LUTPopulateInt8`` (default: the table a TFLite-Micro model
        expects, entry for entry) or float64 throughout (closer to exact); see the module
        docstring.

    Returns
    -------
    numpy.ndarray
        256 output codes of dtype ``q_out.dtype`` (int8, uint8 or int16); entry ``i`` belongs
        to the input whose code, reinterpreted as uint8, is ``i``. The memory image of an
        8-bit table loaded into the gateware is ``table.view(np.uint8)``; an int16 table goes
        into a wide slot (:func:`wide_image`).

    Raises
    ------
    TypeError
        If ``q_in`` or ``q_out`` is not a :class:`Quant`.
    ValueError
        If the input is not an 8-bit type, the chain produces NaN, an unknown arithmetic, or
        (``"tflite"``) a scale that is not a positive finite float32.
    """
    for name, q in (("Input", q_in), ("Output", q_out)):
        if not isinstance(q, Quant):
            raise TypeError(f"{name} quantisation must be a Quant, not {q!r}")
    if q_in.bits != 8:
        raise ValueError(f"Input of a 256-entry table must be int8 or uint8, not {q_in.dtype} "
                         "(int16 inputs use the 513-entry interpolated tables, gen_lut_int16)")
    if arithmetic not in ARITHMETICS:
        raise ValueError(f"Arithmetic must be one of {', '.join(ARITHMETICS)}, not "
                         f"{arithmetic!r}")
    if arithmetic == "float64":
        y = apply_ops(ops, dequantize(_index_codes(q_in), q_in))
        return quantize(y, q_out).astype(_NP_DTYPES[q_out.dtype])
    codes = _tflite_codes(ops, q_in, q_out)
    return np.clip(codes, q_out.qmin, q_out.qmax).astype(np.int64).astype(
        _NP_DTYPES[q_out.dtype])


def lookup(table, codes):
    """Run-time lookup: ``table[uint8(codes)]`` (works for int8 and uint8 codes)."""
    return np.asarray(table)[np.asarray(codes).astype(np.int64) & 0xFF]


# --- int16 interpolated tables (TFLite scheme) -----------------------------------------------

#: Output types of an interpolated table (TFLite's ``gen_lut`` takes int8 and int16 outputs).
WIDE_OUTPUTS = ("int16", "int8")


def _check_int16(q_in, q_out):
    for name, q in (("Input", q_in), ("Output", q_out)):
        if not isinstance(q, Quant):
            raise TypeError(f"{name} quantisation must be a Quant, not {q!r}")
    if q_in.dtype != "int16" or q_in.narrow_range:
        raise ValueError(f"Input of an interpolated table must be full-range int16, "
                         f"not {q_in.dtype}{' narrow' if q_in.narrow_range else ''}")
    if q_out.dtype not in WIDE_OUTPUTS or q_out.narrow_range:
        raise ValueError(f"Output of an interpolated table must be full-range int16 or int8, "
                         f"not {q_out.dtype}{' narrow' if q_out.narrow_range else ''}")
    if q_out.zero_point != 0:
        # The TFLite table holds round(f * 2^bits / ((2^bits - 1) s_out)) with no output
        # offset.
        raise ValueError(f"Output zero point of an interpolated table must be 0, "
                         f"not {q_out.zero_point}")


def _gen_parts(ops, q_in, q_out):
    ops = normalize_ops(ops)
    _check_int16(q_in, q_out)
    lo, hi = _RANGES[q_out.dtype]
    s_in, s_out = np.float64(q_in.scale), np.float64(q_out.scale)
    input_min = s_in * np.float64(-32768 - q_in.zero_point)
    input_max = s_in * np.float64(32767 - q_in.zero_point)
    output_min = s_out * np.float64(lo)
    output_max = s_out * np.float64(hi)
    step = (input_max - input_min) / np.float64(512)
    half_step = step / np.float64(2)
    inv = np.float64(hi - lo + 1) / (output_max - output_min)
    i = np.arange(512, dtype=np.float64)
    val = apply_ops(ops, input_min + i * step)
    val_mid = apply_ops(ops, input_min + i * step + half_step)
    val_next = apply_ops(ops, input_min + (i + 1) * step)
    last = apply_ops(ops, input_max)
    if not (np.isfinite(val).all() and np.isfinite(val_mid).all()
            and np.isfinite(val_next).all() and np.isfinite(last)):
        raise ValueError("Operator chain is not finite in float64 over the int16 input range")
    with np.errstate(over="ignore"):
        sample = round_half_away(val * inv)
        interp = round_half_away((val_next * inv + round_half_away(val * inv)) / 2)
        mid = round_half_away(val_mid * inv)
        bias = round_half_away((interp - mid) / 2)
        lut = np.empty(WIDE_DEPTH, dtype=np.int64)
        lut[:512] = np.clip(sample - bias, lo, hi)
        lut[512] = np.clip(round_half_away(last * inv), lo, hi)
    return dict(lut=lut.astype(_NP_DTYPES[q_out.dtype]), bias=bias, input_min=float(input_min),
                step=float(step), inv=float(inv), ops=ops, lo=lo, hi=hi)


def gen_lut_int16(ops, q_in, q_out):
    """The 513-entry interpolated table of ``ops`` from int16 ``q_in`` to int16 or int8
    ``q_out``.

    Follows TFLite's ``LUTPopulateInt16`` / ``gen_lut<double, int16_t, LutOutT>`` (``LutOutT``
    int16 or int8) step for step in float64, with ``[lo, hi]`` the output type's range:
    ``input_min/max = s_in * (-32768 - z_in)`` / ``s_in * (32767 - z_in)``, ``step =
    (input_max - input_min) / 512``, output scaling ``K = (hi - lo + 1) / (s_out hi - s_out
    lo)`` (65536 / (65535 s_out) for int16, 256 / (255 s_out) for int8), entry ``i < 512`` =
    ``clamp(round(f(x_i) K) - round((round((f(x_{i+1}) K + round(f(x_i) K)) / 2) - round(f(x_i
    + step/2) K)) / 2))``, entry 512 = ``clamp(round(f(input_max) K))``, all rounding half away
    from zero and clamping to ``[lo, hi]``. An int16 -> int8 table is how a wide layer feeds a
    narrow one (seed 003: the widths of the two layers may differ).

    Returns
    -------
    numpy.ndarray
        513 entries of dtype ``q_out.dtype``.

    Raises
    ------
    TypeError, ValueError
        For an input that is not full-range int16, an output that is not full-range int16 or
        int8 (its zero point must be 0), or a chain that is not finite in float64 over the
        input range.
    """
    return _gen_parts(ops, q_in, q_out)["lut"]


def _wrap16(v):
    return ((np.asarray(v, dtype=np.int64) + 32768) & 0xFFFF) - 32768


def _wrap8(v):
    return ((np.asarray(v, dtype=np.int64) + 128) & 0xFF) - 128


def _out_dtype(lut, dtype):
    if dtype is None:
        dtype = "int8" if np.asarray(lut).dtype == np.int8 else "int16"
    if dtype not in WIDE_OUTPUTS:
        raise ValueError(f"Output of an interpolated table must be one of "
                         f"{', '.join(WIDE_OUTPUTS)}, not {dtype!r}")
    return dtype


def lookup_int16(lut, x, *, dtype=None):
    """TFLite ``lut_lookup_with_interpolation`` on int16 inputs ``x`` (exact integer model).

    ``index = 256 + (x >> 7)``, ``offset = x & 0x7f``, ``slope = T(lut[index + 1] -
    lut[index])`` (wrapping like the C++ ``LutOutT``), ``delta = (slope * offset + 64) >> 7``
    (arithmetic shift: the product rounded half up), result ``T(lut[index] + delta)``, where
    ``T`` is the output type: ``dtype`` (``"int16"`` or ``"int8"``), by default int8 for an
    int8 array and int16 otherwise.

    Raises
    ------
    ValueError
        For a table that does not have 513 entries or an unknown ``dtype``.
    """
    dtype = _out_dtype(lut, dtype)
    wrap = _wrap8 if dtype == "int8" else _wrap16
    lut = np.asarray(lut, dtype=np.int64)
    if lut.shape != (WIDE_DEPTH,):
        raise ValueError(f"Interpolated table must have {WIDE_DEPTH} entries, not {lut.shape}")
    x = np.asarray(x, dtype=np.int64)
    index = 256 + (x >> 7)
    offset = x & 0x7F
    base = lut[index]
    slope = wrap(lut[index + 1] - base)
    delta = (slope * offset + 64) >> 7
    return wrap(base + delta).astype(_NP_DTYPES[dtype])


def _chain_constants(ops, a, b):
    """(Lipschitz, max |f''| or None, (min, max)) of the chain on [a, b]."""
    lip, second, lo, hi = 1.0, 0.0, a, b
    for op in ops:
        l1, m2 = op.lipschitz(lo, hi), op.second(lo, hi)
        second = None if (second is None or m2 is None) else m2 * lip * lip + l1 * second
        lip *= l1
        lo, hi = op.image(lo, hi)
    return lip, second, (lo, hi)


def int16_error_bound(ops, q_in, q_out):
    """Proved bound, per int16 input, of ``|lookup_int16(lut, x) - ideal(x)|`` in output codes.

    ``ideal(x) = clamp(round_half_away(f(s_in (x - z_in)) / s_out), lo, hi)``, ``[lo, hi]``
    the output type's range (int16 or int8). For the segment ``i = 256 + (x >> 7)`` (nodes
    ``t_i = input_min + i step``, scaling ``K = (hi - lo + 1) / ((hi - lo) s_out)``, ``G =
    clamp(K f)``) the bound is the sum of

    - 1/2: rounding of ``delta`` (``(p + 64) >> 7`` is within 1/2 of ``p / 128``),
    - 1/2 + max(|bias_i|, |bias_{i+1}|): node error ``|lut[i] - G(t_i)|`` (bias_512 = 0),
    - the linear-interpolation error of G on the segment: ``K M2 step^2 / 8`` when the chain is
      twice differentiable there (``M2`` bounds ``|f''|``) and ``K f`` stays in the int16
      range; otherwise ``K L step / 2`` with ``L`` a Lipschitz constant of f,
    - ``K L s_in (i + 1) / 512``: the nodes sit at ``128 - 1/512`` input codes apart, not 128,
    - ``max |f| / ((hi - lo) s_out)``: the table scales by K instead of ``1 / s_out``,
    - 1/2: the ideal result's own rounding.

    A segment whose two entries differ by more than ``hi`` (the C++ slope wraps) gets an
    infinite bound. See ``docs/lut.md`` for the proof.

    Returns
    -------
    numpy.ndarray
        65536 float64 bounds, indexed by ``x + 32768``.
    """
    parts = _gen_parts(ops, q_in, q_out)
    ops, lut, bias = parts["ops"], parts["lut"].astype(np.int64), parts["bias"]
    input_min, step, k = parts["input_min"], parts["step"], parts["inv"]
    lo_t, hi_t = parts["lo"], parts["hi"]
    s_in, z_in, s_out = q_in.scale, q_in.zero_point, q_out.scale
    bias_ext = np.append(np.abs(bias), 0.0)
    seg = np.empty(512)
    for i in range(512):
        a, b = input_min + i * step, input_min + (i + 1) * step
        # The inputs of this segment reach slightly past the nodes (misalignment term).
        ea = min(a, s_in * (128 * (i - 256) - z_in))
        eb = max(b, s_in * (128 * (i - 256) + 127 - z_in))
        lip, second, (lo, hi) = _chain_constants(ops, a, b)
        elip, _, (elo, ehi) = _chain_constants(ops, ea, eb)
        if elo * k >= hi_t or ehi * k <= lo_t:
            interp = misalign = 0.0     # G = clamp(K f) is constant here
        else:
            # |l(clamp g) - clamp g| <= |l(g) - g| + 2 * (how far g leaves the output range).
            over = 2 * max(0.0, hi * k - hi_t, lo_t - lo * k)
            jumps = [(x, d) for x, d in ops[0].slope_jumps() if a < x < b] if len(ops) == 1 else []
            interp = k * lip * step / 2
            if second is not None:
                interp = min(interp, k * second * step * step / 8 + over)
            elif jumps:
                interp = min(interp, over + k * sum(abs(d) * (x - a) * (b - x) / (b - a)
                                                    for x, d in jumps))
            misalign = k * elip * s_in * (i + 1) / 512
        bound = (1.0 + max(bias_ext[i], bias_ext[i + 1]) + interp + misalign
                 + max(abs(elo), abs(ehi)) / ((hi_t - lo_t) * s_out) + 0.5)
        if abs(lut[i + 1] - lut[i]) > hi_t or not math.isfinite(bound):
            bound = math.inf
        seg[i] = bound
    return np.repeat(seg, 128)


# --- wide slots: the 16-bit-entry memories of the gateware ----------------------------------

#: Formats of a table held in a wide (513 x 16-bit) slot, by code (the gateware's and the
#: link's format number): 0 = int16 input, int16 output (interpolated, 513 entries); 1 = int16
#: input, int8 output (interpolated, 513 entries); 2 = int8 or uint8 input, int16 output (256
#: entries, exact, no interpolation).
WIDE_FORMATS = ("int16>int16", "int16>int8", "8>int16")


def wide_format(table):
    """Format code (:data:`WIDE_FORMATS`) of a table that goes into a wide slot.

    Raises
    ------
    TypeError
        If ``table`` is not a numpy array.
    ValueError
        If it is not one of: 513 int16, 513 int8 (:func:`gen_lut_int16`), 256 int16
        (:func:`transfer_table` with an int16 output).
    """
    if not isinstance(table, np.ndarray):
        raise TypeError(f"A wide table must be a numpy array, not {type(table).__name__}")
    kinds = {((WIDE_DEPTH,), np.int16): 0, ((WIDE_DEPTH,), np.int8): 1, ((256,), np.int16): 2}
    code = kinds.get((table.shape, table.dtype.type))
    if code is None:
        raise ValueError(f"A wide table must be 513 int16, 513 int8 or 256 int16 entries, not "
                         f"{table.shape[0] if table.ndim == 1 else table.shape} {table.dtype}")
    return code


def wide_image(table):
    """The 513 16-bit words (uint16) of a wide slot holding ``table``, and its format code.

    Formats 0 and 1 store entry ``k`` at word ``k`` (int8 entries sign-extended). Format 2 (an
    8-bit-input table) stores ``table[i]`` at word ``256 + int8(i)``, i.e. words 128..383 by the
    input code taken as int8; the other words are 0. The wide datapath then looks an 8-bit code
    ``c`` up as the int16 input ``int8(c) * 128``: index ``256 + int8(c)``, offset 0, so the
    interpolation adds ``(slope * 0 + 64) >> 7 = 0`` and the result is the entry itself.

    Raises
    ------
    TypeError, ValueError
        As :func:`wide_format`.
    """
    fmt = wide_format(table)
    if fmt == 2:
        words = np.zeros(WIDE_DEPTH, dtype=np.int64)
        words[256 + _index_codes(Quant(1.0))] = table
    else:
        words = table.astype(np.int64)
    return (words & 0xFFFF).astype(np.uint16), fmt


def wide_inputs(codes, fmt):
    """The int16 inputs of the wide datapath for ``codes`` looked up in format ``fmt``: the
    codes themselves (formats 0, 1) or ``int8(code) * 128`` (format 2, 8-bit codes)."""
    codes = np.asarray(codes, dtype=np.int64)
    if fmt == 2:
        return (((codes & 0xFF) ^ 0x80) - 0x80) << 7
    return codes


def lookup_wide(image, codes, fmt):
    """What the gateware returns for ``codes`` looked up in a wide slot holding the words
    ``image`` (:func:`wide_image`) in format ``fmt``: :func:`lookup_int16` on the words taken as
    int16 (format 1: as int8, their low bytes, slope and result wrapping in int8) at
    :func:`wide_inputs`. Returns int16 (formats 0, 2) or int8 (format 1)."""
    words = np.asarray(image, dtype=np.int64)
    if fmt == 1:
        return lookup_int16(_wrap8(words), wide_inputs(codes, fmt), dtype="int8")
    return lookup_int16(_wrap16(words), wide_inputs(codes, fmt), dtype="int16")


# --- table sharing ---------------------------------------------------------------------------

class TableBank:
    """The tables of a network, each generated once and stored once (seed 003: T <= P).

    Tables are keyed by their canonical specification (operator chain with aliases resolved,
    both :class:`Quant`), so a repeated specification is not generated again, and by their
    content, so two specifications giving byte-identical tables share one slot.

    Members
    -------
    tables : list of numpy.ndarray
        Distinct 256-entry 8-bit tables (dtype int8/uint8), slot order.
    wide_tables : list of numpy.ndarray
        Distinct tables of the wide slots, slot order: 513-entry interpolated tables (int16 or
        int8 output) and 256-entry int16-output tables of 8-bit inputs (:func:`wide_format`).
    generated : int
        How many tables were actually generated (cache misses).
    """

    def __init__(self):
        self.tables = []
        self.wide_tables = []
        self.generated = 0
        self._by_key = {}
        self._by_content = {}

    def _add(self, kind, key, make, store):
        if key in self._by_key:
            return self._by_key[key]
        table = make()
        self.generated += 1
        digest = (kind, table.dtype.str, table.shape,
                  hashlib.sha256(np.ascontiguousarray(table).tobytes()).hexdigest())
        if digest not in self._by_content:
            store.append(table)
            self._by_content[digest] = len(store) - 1
        self._by_key[key] = self._by_content[digest]
        return self._by_key[key]

    def add(self, ops, q_in, q_out, *, arithmetic="tflite"):
        """Slot of the 256-entry table of ``ops`` from ``q_in`` to ``q_out``
        (:func:`transfer_table` in ``arithmetic``): a byte slot for an 8-bit output, a wide
        slot (in :attr:`wide_tables`) for an int16 output."""
        ops = normalize_ops(ops)
        wide = isinstance(q_out, Quant) and q_out.dtype == "int16"
        return self._add("wide" if wide else "byte", ("byte", ops, q_in, q_out, arithmetic),
                         lambda: transfer_table(ops, q_in, q_out, arithmetic=arithmetic),
                         self.wide_tables if wide else self.tables)

    def add_wide(self, ops, q_in, q_out):
        """Slot (in :attr:`wide_tables`) of the 513-entry interpolated table of ``ops`` from
        int16 ``q_in`` to int16 or int8 ``q_out``."""
        ops = normalize_ops(ops)
        return self._add("wide", ("wide", ops, q_in, q_out),
                         lambda: gen_lut_int16(ops, q_in, q_out), self.wide_tables)

    def write_payloads(self):
        """The ``i_write`` stream payloads that load every table into the gateware.

        Byte tables: ``{"wide": 0, "table": slot, "addr": i, "data": uint8 pattern}`` for
        i in 0..255; wide slots: ``{"wide": 1, ..., "data": word}`` for the 513 words of
        :func:`wide_image` (look them up in the format :func:`wide_format` gives).
        """
        out = []
        for slot, table in enumerate(self.tables):
            for addr, v in enumerate(table.view(np.uint8).tolist()):
                out.append({"wide": 0, "table": slot, "addr": addr, "data": v})
        for slot, table in enumerate(self.wide_tables):
            for addr, v in enumerate(wide_image(table)[0].tolist()):
                out.append({"wide": 1, "table": slot, "addr": addr, "data": v})
        return out


# --- two-input operators (seed 003 §1.6: multi-input operators) ------------------------------

def _quantize_multiplier(real):
    """TFLite's ``QuantizeMultiplier``: ``real = q * 2^(shift - 31)``, q in [2^30, 2^31)."""
    if real == 0:
        return 0, 0
    frac, shift = math.frexp(real)
    q = int(round_half_away(np.float64(frac * (1 << 31))))
    if q == 1 << 31:
        q //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return q, shift


def _srdhm(a, b):
    """gemmlowp ``SaturatingRoundingDoublingHighMul`` on int32 values (int64 arrays)."""
    a = np.asarray(a, dtype=np.int64)
    ab = a * np.int64(b)
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    v = ab + nudge
    q = np.where(v >= 0, v >> 31, -((-v) >> 31))        # C++ division: toward zero
    return np.where((a == -(1 << 31)) & (b == -(1 << 31)), (1 << 31) - 1, q)


def _rdbpot(x, exponent):
    """gemmlowp ``RoundingDivideByPOT``: ``x / 2^exponent``, ties away from zero."""
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (remainder > threshold)


def _mbqm(x, q, shift):
    """TFLite ``MultiplyByQuantizedMultiplier`` (double rounding, the reference kernels')."""
    left, right = max(shift, 0), max(-shift, 0)
    return _rdbpot(_srdhm(np.asarray(x, dtype=np.int64) << left, q), right)


def _check_binary(qa, qb, q_out):
    for name, q in (("First input", qa), ("Second input", qb), ("Output", q_out)):
        if not isinstance(q, Quant):
            raise TypeError(f"{name} quantisation must be a Quant, not {q!r}")
        if q.dtype != "int8":
            raise ValueError(f"{name} of an int8 element-wise operator must be int8, "
                             f"not {q.dtype}")


def _codes(name, x):
    x = np.asarray(x)
    if x.dtype.kind not in "iu":
        raise TypeError(f"{name} codes must be integers, not {x.dtype}")
    if x.size and (x.min() < -128 or x.max() > 127):
        raise ValueError(f"{name} codes must be in -128..127, not {x.min()}..{x.max()}")
    return x.astype(np.int64)


def add_int8(a, qa, b, qb, q_out):
    """Element-wise ``a + b`` of two int8 tensors, TFLite(-Micro)'s reference int8 ``ADD``.

    Integer-only, transcribed from ``reference_integer_ops::AddElementwise`` and its
    preparation: ``left_shift = 20``; with the scales as float32 widened to double, ``twice_max
    = 2 max(s_a, s_b)``, input multipliers ``s_a / twice_max``, ``s_b / twice_max`` and output
    multiplier ``twice_max / (2^20 s_out)``, each ``QuantizeMultiplier``-ed (``q`` in
    [2^30, 2^31), ``round(frac * 2^31)`` half away from zero); per element ``v = (x - z) <<
    20``, ``scaled = RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(v, q), -shift)`` for
    both inputs, then the same on their sum with the output multiplier, ``+ z_out``, clamped to
    [-128, 127] (no fused activation). Rounding: the doubling high multiply rounds half away
    from zero, ``RoundingDivideByPOT`` rounds half away from zero. Broadcasting follows numpy.

    Raises
    ------
    TypeError, ValueError
        For quantisations that are not int8 :class:`Quant`, or codes that are not integers in
        -128..127.
    """
    _check_binary(qa, qb, q_out)
    a, b = _codes("First input", a), _codes("Second input", b)
    sa, sb, so = (float(np.float32(q.scale)) for q in (qa, qb, q_out))
    twice_max = 2 * max(sa, sb)
    (m1, e1), (m2, e2) = _quantize_multiplier(sa / twice_max), _quantize_multiplier(sb / twice_max)
    mo, eo = _quantize_multiplier(twice_max / ((1 << 20) * so))
    s1 = _rdbpot(_srdhm((a - qa.zero_point) << 20, m1), -e1)
    s2 = _rdbpot(_srdhm((b - qb.zero_point) << 20, m2), -e2)
    raw = _rdbpot(_srdhm(s1 + s2, mo), -eo) + q_out.zero_point
    return np.clip(raw, -128, 127).astype(np.int8)


def mul_int8(a, qa, b, qb, q_out):
    """Element-wise ``a * b`` of two int8 tensors, TFLite(-Micro)'s reference int8 ``MUL``:
    ``clamp(z_out + MultiplyByQuantizedMultiplier((a - z_a)(b - z_b), q, shift), -128, 127)``
    with ``(q, shift) = QuantizeMultiplier(s_a s_b / s_out)`` (float32 scales widened to double);
    rounding as in :func:`add_int8`. Errors as :func:`add_int8`."""
    _check_binary(qa, qb, q_out)
    a, b = _codes("First input", a), _codes("Second input", b)
    sa, sb, so = (float(np.float32(q.scale)) for q in (qa, qb, q_out))
    q, shift = _quantize_multiplier(sa * sb / so)
    raw = _mbqm((a - qa.zero_point) * (b - qb.zero_point), q, shift) + q_out.zero_point
    return np.clip(raw, -128, 127).astype(np.int8)


@dataclass(frozen=True)
class AddByTables:
    """Element-wise ``op(a + b)`` of two int8 tensors decomposed for the LUT engine (seed 003
    §1.6 without a 65,536-entry two-input table): two int8 -> int16 tables rescale each input
    to a common int16 quantisation ``mid`` (scale ``max(s_a, s_b) / 64``, zero point 0, so each
    rescaled value is within ±16320 and their sum fits int16), an int16 adder, and one int16 ->
    int8 interpolated table applies ``op`` and requantises to ``q_out``::

        out = lookup_int16(out_table, wrap16(a_table[uint8(a)] + b_table[uint8(b)]))

    Build it with :meth:`make`. Each rescale rounds half away from zero (±1/2 ``mid`` code);
    the output table adds the interpolated scheme's error (:func:`int16_error_bound`), so the
    result is within a code or two of the exactly quantised ``op(r_a + r_b)``, not bit-exact
    with TFLite's integer ``ADD`` (:func:`add_int8`). The output zero point must be 0 (the
    interpolated table has no output offset).

    Members
    -------
    a_table, b_table : numpy.ndarray
        256 int16 entries each (:func:`transfer_table`; wide-slot format 2).
    out_table : numpy.ndarray
        513 int8 entries (:func:`gen_lut_int16`; wide-slot format 1).
    mid : Quant
        The int16 quantisation of the rescaled inputs and of their sum.
    """
    a_table: np.ndarray
    b_table: np.ndarray
    out_table: np.ndarray
    mid: Quant

    @classmethod
    def make(cls, qa, qb, q_out, ops=()):
        """Tables for ``op(a + b)`` from int8 ``qa``, ``qb`` to int8 ``q_out`` (zero point 0).

        Raises
        ------
        TypeError, ValueError
            For quantisations that are not int8 :class:`Quant` or an output zero point other
            than 0 (from :func:`gen_lut_int16`).
        """
        _check_binary(qa, qb, q_out)
        mid = Quant(max(qa.scale, qb.scale) / 64, 0, "int16")
        return cls(transfer_table("identity", qa, mid), transfer_table("identity", qb, mid),
                   gen_lut_int16(ops, mid, q_out), mid)

    def __call__(self, a, b):
        """``op(a + b)`` for int8 codes ``a``, ``b`` (numpy broadcasting); int8 result."""
        a, b = _codes("First input", a), _codes("Second input", b)
        total = lookup(self.a_table, a).astype(np.int64) + lookup(self.b_table, b)
        return lookup_int16(self.out_table, _wrap16(total))
