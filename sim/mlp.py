"""The digits MLP end to end (issue #8): float64 training, conversion, golden forward.

A 64-32-10 multilayer perceptron (ReLU hidden layer, softmax cross-entropy) is trained in
float64 on scikit-learn's bundled 8×8 digits, then converted to the accelerator's dense layers
(:mod:`lowbit.sim.network`): a BFP network (:class:`lowbit.sim.network.BFPDense`) and a
discrete-weight
network (:class:`lowbit.sim.network.DiscreteDense`). :func:`forward` is the golden model of the
whole
network as the accelerator runs it; the accelerator's outputs equal it bit for bit. Pure NumPy
(plus ``sklearn.datasets.load_digits`` and ``train_test_split`` for the data); never imports
Amaranth.

Data and split
--------------
``load_digits()`` (1797 images of 64 pixels in 0..16, labels 0..9), split by
``train_test_split(test_size=0.3, random_state=0)`` (no stratification): 1257 training and 540
test images. The network input is ``pixels / 16`` (in [0, 1], exact in f16).

Training (:func:`train_float`)
------------------------------
float64 throughout. He-normal ``w1`` (std ``sqrt(2/64)``), ``w2`` with std ``sqrt(1/hidden)``,
zero biases, drawn from ``numpy.random.default_rng(seed)``. Adam (``lr = 3e-3``, betas 0.9 and
0.999, eps 1e-8) on the mean cross-entropy plus ``weight_decay / 2 · |w|²`` (weights only),
mini-batches of 32 in an order drawn from the same generator each epoch, 60 epochs. Same seed,
same weights, bit for bit (on one machine; BLAS summation order may differ between machines,
which is why the demo caches the trained model).

Input quantisation (:class:`InputQuant`)
----------------------------------------
The host sends ``pixels / 16`` as f16; the device's QUANT instruction converts it.

* BFP (``kind="bfp"``): :func:`lowbit.sim.quantiser.quantise_bfp` of each image in blocks of ``B``,
  width ``W = 8``, "floor" rule, nearest-even rounding. Lossless here: pixel values have 4
  fraction bits and the floor rule leaves at least 6 mantissa bits below the block's top bit.
* int8 (``kind="int8"``, the discrete network): :func:`lowbit.sim.quantiser.quantise_int8` with
  ``shift`` (value ``q · 2^shift``), nearest-even rounding, saturation to [-128, 127]. The
  default ``shift = -6`` maps pixel ``p`` to ``4p`` (0..64), also lossless. (``-7`` doubles the
  resolution of the truncating discrete products but saturates pixel 16; it measured no better.)

BFP conversion (:func:`convert_bfp`)
------------------------------------
* Weights: :func:`lowbit.sim.bfp.quantise` along the reduction axis in blocks of the column's ``B``,
  ``W = 8``, floor rule, nearest-even, saturating; one exponent per row and block.
* Biases: BFP elements with their own exponent (:func:`lowbit.sim.bfp.quantise` with block 1, W =
8).
* Hidden layer: output width 8, nearest-even, fixed output exponent ``out_exp`` = the least
  exponent with ``max |y| <= 127 · 2^out_exp`` over the exact column accumulators
  (:meth:`lowbit.sim.bfp_column.ColumnModel.accumulate`) of the whole calibration set (the training
  images) — so no output saturates on the calibration set. ReLU through a transfer table
  (:func:`lowbit.sim.lut.transfer_table`) from int8 with scale ``2^out_exp`` to int8 with scale
  ``2^out_exp`` (``table_exp = out_exp``): the next layer's int8 input scale.
* Output layer: output width 8, nearest-even, exponent mode "max" (one exponent per tile of
  ``N`` rows), no table.
* Prediction: the argmax of the output values ``m · 2^e`` (with one tile — ``N >= 10`` — the
  argmax of the mantissas); ties go to the lowest class.

Discrete conversion (:func:`finetune_discrete`, :func:`convert_discrete`)
-------------------------------------------------------------------------
The float model is first fine-tuned for 30 epochs with the discrete weights in the forward and
backward passes (straight-through estimator, :func:`finetune_discrete`), then converted:

* Input: int8 quantisation as above (exponent ``e_x = shift``).
* Weights: ``w ≈ 2^a · v`` with ``v`` the value of a code of the book (nearest code,
  :func:`lowbit.sim.discrete.to_codes`, ties to the lowest code); the per-layer scale exponent ``a``
  minimises the squared weight error of the float model over ``a`` in -12..4
  (:func:`discrete_scales`; fine-tuning keeps them). The default book is 3 bits:
  ``{-1, -1/2, -1/4, -2^-7, +2^-7, +1/4, +1/2, +1}``: ``±2^-7`` times an int8 magnitude
  (< 128) truncates to 0, so it is an exact zero weight. The 2-bit book is ternary,
  ``{-1, -2^-7, +2^-7, +1}``.
* Accumulator units are ``2^(a + e_x)``; the bias is ``round(b / 2^(a + e_x))`` (half to even).
  The requantiser shift is the least ``s`` in 0..24 for which no accumulator-plus-bias of the
  calibration set rounds beyond ±127, and the output exponent is ``s + a + e_x`` (the scale is
  folded into the shift). Hidden layer: ReLU table with ``table_exp`` = that exponent, as in
  the BFP net; output layer: no table. ``acc_width = 16``; the conversion checks that no
  accumulator can saturate for any int8 input, so the result does not depend on the discrete
  unit's lane count.

Golden forward (:func:`forward`)
--------------------------------
Per image: input quantisation, then :func:`lowbit.sim.network.bfp_dense` or
:func:`lowbit.sim.network.discrete_dense` layer by layer; the hidden codes and their exponents (one
per
row, all equal after the table) feed the next layer as blocks of ``B`` (BFP) or as int8 codes
(discrete). All rounding is nearest-even (the network uses no random numbers), saturation is
symmetric to ±127, and no NaN can arise (finite inputs, exponents in range).
"""

import dataclasses
import os

import numpy as np

from . import bfp
from .bfp import _check_int
from .bfp_column import ColumnModel
from .discrete import CodeBook, SMFormat, dot, to_codes
from .lut import Quant, transfer_table
from .network import BFPDense, DiscreteDense, bfp_dense, discrete_dense
from .quantiser import decode_f16, quantise_bfp, quantise_int8

__all__ = ["INPUTS", "CLASSES", "TEST_SIZE", "SPLIT_SEED", "Split", "load_split", "FloatMLP",
           "train_float", "pixels_to_f16", "InputQuant", "QuantisedMLP", "convert_bfp",
           "convert_discrete", "discrete_book", "discrete_scales", "finetune_discrete",
           "forward", "predict", "predictions", "accuracy", "load_or_train"]

#: Pixels per image and classes.
INPUTS = 64
CLASSES = 10
#: The fixed train/test split: ``train_test_split(test_size=TEST_SIZE, random_state=SPLIT_SEED)``.
TEST_SIZE = 0.3
SPLIT_SEED = 0


def _check_real(name, value, lo):
    if not isinstance(value, (int, float, np.integer, np.floating)) or \
            isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a real number, not {value!r}")
    if not (np.isfinite(value) and value >= lo):
        raise ValueError(f"{name} must be a finite number of at least {lo}, not {value!r}")
    return float(value)


# -- data -------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, eq=False)
class Split:
    """The fixed train/test split of the digits: pixels (float64, 0..16) and labels (int64)."""
    x_train: np.ndarray
    x_test: np.ndarray
    y_train: np.ndarray
    y_test: np.ndarray


def load_split():
    """The digits split by ``train_test_split(test_size=0.3, random_state=0)``: 1257 / 540."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    d = load_digits()
    xtr, xte, ytr, yte = train_test_split(d.data.astype(np.float64), d.target.astype(np.int64),
                                          test_size=TEST_SIZE, random_state=SPLIT_SEED)
    return Split(xtr, xte, ytr, yte)


def _check_pixels(pixels):
    x = np.asarray(pixels, dtype=np.float64)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2 or x.shape[1] != INPUTS:
        raise ValueError(f"Images must have {INPUTS} pixels, not shape {np.shape(pixels)}")
    if not np.all(np.isfinite(x)):
        raise ValueError("Pixels must be finite")
    return x


def pixels_to_f16(pixels):
    """Raw f16 codes (uint16, shape (n, 64)) of ``pixels / 16``: what the host sends."""
    x = _check_pixels(pixels)
    return (x / 16.0).astype(np.float16).view(np.uint16)


# -- float model ------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, eq=False)
class FloatMLP:
    """float64 MLP ``w2 · relu(w1 · x + b1) + b2`` on ``x = pixels / 16``.

    Members
    -------
    w1 : array, shape (hidden, 64)
    b1 : array, shape (hidden,)
    w2 : array, shape (10, hidden)
    b2 : array, shape (10,)
    """
    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray

    def __post_init__(self):
        for name in ("w1", "b1", "w2", "b2"):
            a = np.asarray(getattr(self, name), dtype=np.float64)
            if not np.all(np.isfinite(a)):
                raise ValueError(f"{name} must be finite")
            object.__setattr__(self, name, a)
        h = self.w1.shape[0]
        if self.w1.shape != (h, INPUTS) or self.b1.shape != (h,) or \
                self.w2.shape != (CLASSES, h) or self.b2.shape != (CLASSES,):
            raise ValueError(f"Parameter shapes {self.w1.shape}, {self.b1.shape}, "
                             f"{self.w2.shape}, {self.b2.shape} do not form a 64-h-10 MLP")

    @property
    def hidden(self):
        return self.w1.shape[0]

    def logits(self, pixels):
        """Output logits, shape (n, 10), of images of raw pixels (0..16)."""
        x = _check_pixels(pixels) / 16.0
        return np.maximum(x @ self.w1.T + self.b1, 0.0) @ self.w2.T + self.b2

    def predict(self, pixels):
        return np.argmax(self.logits(pixels), axis=1)

    def save(self, path):
        np.savez(path, w1=self.w1, b1=self.b1, w2=self.w2, b2=self.b2)

    @classmethod
    def load(cls, path):
        with np.load(path) as f:
            return cls(f["w1"], f["b1"], f["w2"], f["b2"])



def _adam(params, x, y, rng, *, epochs, batch, lr, weight_decay, effective=None):
    """Adam on the mean cross-entropy, in place on ``params = [w1, b1, w2, b2]``.

    ``effective(w1, w2)`` gives the weights the forward and backward passes use (the
    straight-through estimator of :func:`finetune_discrete`); the gradient updates ``params``.
    """
    m1 = [np.zeros_like(p) for p in params]
    m2 = [np.zeros_like(p) for p in params]
    b1, b2, eps = 0.9, 0.999, 1e-8
    t = 0
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for k in range(0, len(order), batch):
            idx = order[k:k + batch]
            xb, yb = x[idx], y[idx]
            w1, c1, w2, c2 = params
            q1, q2 = (w1, w2) if effective is None else effective(w1, w2)
            h = xb @ q1.T + c1
            a = np.maximum(h, 0.0)
            z = a @ q2.T + c2
            z = z - z.max(axis=1, keepdims=True)
            p = np.exp(z)
            p /= p.sum(axis=1, keepdims=True)
            g = p
            g[np.arange(len(yb)), yb] -= 1.0
            g /= len(yb)
            gh = (g @ q2) * (h > 0)
            grads = [gh.T @ xb + weight_decay * w1, gh.sum(axis=0),
                     g.T @ a + weight_decay * w2, g.sum(axis=0)]
            t += 1
            for i, (param, grad) in enumerate(zip(params, grads, strict=True)):
                m1[i] = b1 * m1[i] + (1 - b1) * grad
                m2[i] = b2 * m2[i] + (1 - b2) * grad * grad
                param -= lr * (m1[i] / (1 - b1 ** t)) / (np.sqrt(m2[i] / (1 - b2 ** t)) + eps)


def train_float(pixels, labels, *, hidden=32, seed=0, epochs=60, batch=32, lr=3e-3,
                weight_decay=1e-4):
    """Train the float64 MLP with Adam (see the module docstring); deterministic in ``seed``.

    Parameters
    ----------
    pixels : array, shape (n, 64)
        Raw pixels (0..16).
    labels : array of int, shape (n,)
    hidden : int
        Hidden units (1..256).
    seed : int
        Seed of ``numpy.random.default_rng`` (initialisation and batch order).
    epochs, batch : int
    lr, weight_decay : float

    Returns
    -------
    FloatMLP

    Raises
    ------
    TypeError, ValueError
        For parameters of the wrong kind or out of range, or mismatched data.
    """
    hidden = _check_int("Hidden unit count", hidden, 1, 256)
    seed = _check_int("Seed", seed, 0, 2**63 - 1)
    epochs = _check_int("Epoch count", epochs, 1, 10_000)
    batch = _check_int("Batch size", batch, 1, 1 << 20)
    lr = _check_real("Learning rate", lr, 0.0)
    weight_decay = _check_real("Weight decay", weight_decay, 0.0)
    x = _check_pixels(pixels) / 16.0
    y = np.asarray(labels)
    if y.shape != (x.shape[0],) or not np.issubdtype(y.dtype, np.integer) or \
            y.min() < 0 or y.max() >= CLASSES:
        raise ValueError(f"Labels must be {x.shape[0]} integers in 0..{CLASSES - 1}")
    rng = np.random.default_rng(seed)
    params = [rng.standard_normal((hidden, INPUTS)) * np.sqrt(2.0 / INPUTS), np.zeros(hidden),
              rng.standard_normal((CLASSES, hidden)) * np.sqrt(1.0 / hidden), np.zeros(CLASSES)]
    _adam(params, x, y, rng, epochs=epochs, batch=batch, lr=lr, weight_decay=weight_decay)
    return FloatMLP(*params)


def load_or_train(path=None, *, split=None, **train_args):
    """The float model trained on ``split.x_train`` with ``train_args``, cached at ``path``.

    ``path`` (an ``.npz`` file) is loaded when it exists, else written after training; ``None``
    trains without a cache.
    """
    if path is not None and os.path.exists(path):
        return FloatMLP.load(path)
    split = load_split() if split is None else split
    model = train_float(split.x_train, split.y_train, **train_args)
    if path is not None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        model.save(path)
    return model


# -- quantised network ------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class InputQuant:
    """How the device's QUANT instruction turns the f16 input into element words.

    Members
    -------
    kind : {"bfp", "int8"}
    block : int
        BFP block size ``B`` (``kind="bfp"``).
    width : int
        BFP mantissa width ``W`` (``kind="bfp"``).
    rule : {"floor", "ceil"}
        BFP shared-exponent rule.
    shift : int
        int8 scale exponent (``kind="int8"``): value ``q · 2^shift``.
    """
    kind: str = "bfp"
    block: int = 16
    width: int = 8
    rule: str = "floor"
    shift: int = -6

    def __post_init__(self):
        if self.kind not in ("bfp", "int8"):
            raise ValueError(f"Input quantisation must be 'bfp' or 'int8', not {self.kind!r}")
        if self.rule not in ("floor", "ceil"):     # the device's QUANT_RULE register
            raise ValueError(f"Exponent rule must be 'floor' or 'ceil', not {self.rule!r}")
        _check_int("Block size", self.block, 1, INPUTS)
        _check_int("Mantissa width", self.width, 2, 8)
        _check_int("Input shift", self.shift, -128, 127)

    def quantise(self, f16_codes):
        """Element mantissas (n, 64) and exponents of f16 images (n, 64).

        Exponents: (n, 64 // B) block exponents (BFP), or (n, 1) holding ``shift`` (int8).
        """
        codes = np.asarray(f16_codes)
        if codes.ndim != 2 or codes.shape[1] != INPUTS:
            raise ValueError(f"f16 images must have shape (n, {INPUTS}), not {codes.shape}")
        x = decode_f16(codes)
        if self.kind == "int8":
            q = quantise_int8(x, shift=self.shift, rounding="nearest")
            return q, np.full((len(q), 1), self.shift, dtype=np.int64)
        ms, es = [], []
        for row in x:
            m, e = quantise_bfp(row, block=self.block, width=self.width, rule=self.rule,
                                rounding="nearest")
            ms.append(m)
            es.append(e)
        return np.array(ms, dtype=np.int64).reshape(len(x), INPUTS), \
            np.array(es, dtype=np.int64).reshape(len(x), -1)


@dataclasses.dataclass(frozen=True, eq=False)
class QuantisedMLP:
    """A converted network: its input quantisation and its layers (as :mod:`lowbit.sim.network`).

    Members
    -------
    variant : {"bfp", "discrete"}
    input_quant : InputQuant
    layers : tuple of BFPDense or of DiscreteDense
        Hidden layer (with a ReLU table), output layer (without).
    scales : tuple of int
        Discrete net: the per-layer weight scale exponents ``a`` (empty for BFP).
    """
    variant: str
    input_quant: InputQuant
    layers: tuple
    scales: tuple = ()

    def __post_init__(self):
        kind = {"bfp": BFPDense, "discrete": DiscreteDense}.get(self.variant)
        if kind is None:
            raise ValueError(f"Variant must be 'bfp' or 'discrete', not {self.variant!r}")
        if not self.layers or not all(isinstance(la, kind) for la in self.layers):
            raise TypeError(f"Layers of a {self.variant} network must be {kind.__name__}s")
        object.__setattr__(self, "layers", tuple(self.layers))


def _quantise_rows(w, block, width):
    m, e = bfp.quantise(w, block=block, width=width, rule="floor", rounding="nearest")
    return m.reshape(w.shape), e


def _quantise_bias(b, width):
    m, e = bfp.quantise(np.asarray(b, dtype=np.float64)[:, None], block=1, width=width,
                        rule="floor", rounding="nearest")
    return m.reshape(-1), e.reshape(-1)


def _bfp_accumulators(layer, x_m, x_e, column):
    """Exact accumulator values ``A · 2^(ea - F)`` (n, R) of a BFP layer over a batch."""
    acc, ea, _ = column.accumulate_batch(layer.w_m, layer.w_e, x_m, x_e, layer.bias_m,
                                         layer.bias_e)
    return np.ldexp(np.asarray(acc).astype(np.float64), ea - column.frac_bits)


def _check_column(column, hidden, width):
    if not isinstance(column, ColumnModel):
        raise TypeError(f"Column must be a lowbit.sim.bfp_column.ColumnModel, not {column!r}")
    b = column.block
    if INPUTS % b or hidden % b:
        raise ValueError(f"Block size {b} must divide the layer widths {INPUTS} and {hidden}")
    if column.width < width:
        raise ValueError(f"The column's mantissa width {column.width} is below W = {width}")
    if column.max_blocks < max(INPUTS, hidden) // b:
        raise ValueError(f"The column takes at most {column.max_blocks} blocks, the network "
                         f"needs {max(INPUTS, hidden) // b}")


def convert_bfp(model, calib_pixels, *, column=None, width=8):
    """The BFP network of ``model`` (module docstring, "BFP conversion").

    Parameters
    ----------
    model : FloatMLP
    calib_pixels : array, shape (n, 64)
        Calibration images (raw pixels): the training set.
    column : lowbit.sim.bfp_column.ColumnModel, optional
        The device's column (default ``ColumnModel()``: 16 lanes, B = 16).
    width : int
        Mantissa width ``W`` of weights, biases and outputs (2..8).

    Returns
    -------
    QuantisedMLP
    """
    if not isinstance(model, FloatMLP):
        raise TypeError(f"Model must be a FloatMLP, not {model!r}")
    column = ColumnModel() if column is None else column
    width = _check_int("Mantissa width", width, 2, 8)
    _check_column(column, model.hidden, width)
    b = column.block
    iq = InputQuant("bfp", block=b, width=width)
    w1m, w1e = _quantise_rows(model.w1, b, width)
    b1m, b1e = _quantise_bias(model.b1, width)
    x_m, x_e = iq.quantise(pixels_to_f16(calib_pixels))
    probe = BFPDense(w1m, w1e, b1m, b1e, width=width, exp_mode="fixed")
    amax = np.abs(_bfp_accumulators(probe, x_m, x_e, column)).max(initial=0.0)
    out_exp = int(bfp.shared_exponent(amax, width=width, rule="ceil"))
    q = Quant(2.0 ** out_exp)
    hidden = BFPDense(w1m, w1e, b1m, b1e, width=width, exp_mode="fixed", out_exp=out_exp,
                      table=transfer_table("relu", q, q), table_exp=out_exp)
    w2m, w2e = _quantise_rows(model.w2, b, width)
    b2m, b2e = _quantise_bias(model.b2, width)
    output = BFPDense(w2m, w2e, b2m, b2e, width=width, exp_mode="max")
    return QuantisedMLP("bfp", iq, (hidden, output))


def discrete_book(bits=3):
    """The code book of the discrete network: 3 bits ``{-1, -1/2, -1/4, -2^-7, +2^-7, +1/4,
    +1/2, +1}`` or 2 bits ``{-1, -2^-7, +2^-7, +1}`` (ternary); ``±2^-7`` acts as zero."""
    bits = _check_int("Code width", bits, 2, 3)
    if bits == 2:
        return CodeBook.from_values([-1, -2**-7, 2**-7, 1])
    return CodeBook.from_values([-1, -0.5, -0.25, -2**-7, 2**-7, 0.25, 0.5, 1])


def _scale_exponent(w, book):
    """Scale exponent ``a`` in -12..4 minimising ``|w - 2^a · v(codes)|²``."""
    best = None
    for a in range(-12, 5):
        v = book.values()[to_codes(np.ldexp(w, -a), book)]
        err = float(np.sum((w - np.ldexp(v, a)) ** 2))
        if best is None or err < best[0]:
            best = (err, a)
    return best[1]


def _discrete_acc(codes, book, x_m, acc_width, lanes=4):
    """Signed accumulators (n, R) of ``codes`` against int8 inputs (n, K)."""
    fmt = SMFormat(8, 0)
    x_sm = fmt.from_int(np.clip(np.asarray(x_m, dtype=np.int64), -127, 127))
    acc = dot(x_sm[:, None, :], codes[None, :, :], book, fmt, acc_width=acc_width, lanes=lanes)
    return SMFormat(acc_width, 0).to_int(acc)


def _discrete_layer(w, b, a, book, x_m, x_exp, acc_width, table):
    """Convert one layer with scale exponent ``a``; returns (DiscreteDense, outputs)."""
    codes = to_codes(np.ldexp(w, -a), book).astype(np.int64)
    lim = (1 << (acc_width - 1)) - 1
    bias = np.clip(np.rint(np.ldexp(b, -(a + x_exp))), -lim, lim).astype(np.int64)
    worst = 127 * np.abs(book.values()[codes]).sum(axis=1).max() + np.abs(bias).max()
    if worst > lim:
        raise ValueError(f"A {acc_width}-bit accumulator can saturate (bound {worst:g})")
    v = np.clip(_discrete_acc(codes, book, x_m, acc_width) + bias, -lim, lim)
    for shift in range(25):
        y = (v + (1 << (shift - 1))) >> shift if shift else v
        if np.abs(y).max(initial=0) <= 127:
            break
    else:
        raise ValueError("No requantiser shift keeps the calibration outputs in int8")
    out_exp = shift + a + x_exp
    if table:
        q = Quant(2.0 ** out_exp)
        layer = DiscreteDense(codes, book, bias, shift=shift, acc_width=acc_width,
                              out_exp=out_exp, table=transfer_table("relu", q, q),
                              table_exp=out_exp)
        y = np.maximum(y, 0)
    else:
        layer = DiscreteDense(codes, book, bias, shift=shift, acc_width=acc_width,
                              out_exp=out_exp)
    return layer, y


def discrete_scales(model, bits=3):
    """Per-layer weight scale exponents ``(a1, a2)`` of ``model`` for :func:`discrete_book`:
    each minimises the squared weight error over -12..4."""
    if not isinstance(model, FloatMLP):
        raise TypeError(f"Model must be a FloatMLP, not {model!r}")
    book = discrete_book(bits)
    return _scale_exponent(model.w1, book), _scale_exponent(model.w2, book)


def _check_scales(scales):
    if not isinstance(scales, (tuple, list)) or len(scales) != 2:
        raise TypeError(f"Scales must be a pair of integers, not {scales!r}")
    return tuple(_check_int("Scale exponent", a, -24, 24) for a in scales)


def finetune_discrete(model, pixels, labels, *, bits=3, scales=None, seed=1, epochs=30,
                      batch=32, lr=1e-3):
    """Fine-tune ``model`` for discrete weights (quantisation-aware, straight-through).

    Adam as in :func:`train_float` (no weight decay), but the forward and backward passes use
    the discrete weights ``2^a · v(codes)`` of the float weights (nearest code of
    :func:`discrete_book`, fixed scales ``scales``, default :func:`discrete_scales` of
    ``model``), and the gradient updates the float weights. Activations stay float64.
    Deterministic in ``seed``. Returns the fine-tuned :class:`FloatMLP`; convert it with
    :func:`convert_discrete` and the same ``scales``.
    """
    if not isinstance(model, FloatMLP):
        raise TypeError(f"Model must be a FloatMLP, not {model!r}")
    book = discrete_book(bits)
    a1, a2 = discrete_scales(model, bits) if scales is None else _check_scales(scales)
    seed = _check_int("Seed", seed, 0, 2**63 - 1)
    epochs = _check_int("Epoch count", epochs, 1, 10_000)
    batch = _check_int("Batch size", batch, 1, 1 << 20)
    lr = _check_real("Learning rate", lr, 0.0)
    x = _check_pixels(pixels) / 16.0
    y = np.asarray(labels, dtype=np.int64)

    def effective(w1, w2):
        return tuple(np.ldexp(book.values()[to_codes(np.ldexp(w, -a), book)], a)
                     for w, a in ((w1, a1), (w2, a2)))

    params = [model.w1.copy(), model.b1.copy(), model.w2.copy(), model.b2.copy()]
    _adam(params, x, y, np.random.default_rng(seed), epochs=epochs, batch=batch, lr=lr,
          weight_decay=0.0, effective=effective)
    return FloatMLP(*params)


def convert_discrete(model, calib_pixels, *, bits=3, scales=None, input_shift=-6,
                     acc_width=16):
    """The discrete-weight network of ``model`` (module docstring, "Discrete conversion").

    Parameters
    ----------
    model : FloatMLP
        Usually the output of :func:`finetune_discrete`.
    calib_pixels : array, shape (n, 64)
        Calibration images (raw pixels): the training set.
    bits : int
        Code width of the book (:func:`discrete_book`), 2 or 3.
    scales : (int, int), optional
        Weight scale exponents of the two layers (default :func:`discrete_scales`).
    input_shift : int
        int8 scale exponent of the input quantisation.
    acc_width : int
        Accumulator width of the discrete unit (8..32).

    Returns
    -------
    QuantisedMLP
    """
    if not isinstance(model, FloatMLP):
        raise TypeError(f"Model must be a FloatMLP, not {model!r}")
    book = discrete_book(bits)
    a1, a2 = discrete_scales(model, bits) if scales is None else _check_scales(scales)
    acc_width = _check_int("Accumulator width", acc_width, 8, 32)
    iq = InputQuant("int8", shift=_check_int("Input shift", input_shift, -128, 127))
    x_m, _ = iq.quantise(pixels_to_f16(calib_pixels))
    hidden, h = _discrete_layer(model.w1, model.b1, a1, book, x_m, iq.shift, acc_width, True)
    output, _ = _discrete_layer(model.w2, model.b2, a2, book, h, hidden.table_exp, acc_width,
                                False)
    return QuantisedMLP("discrete", iq, (hidden, output), scales=(a1, a2))


# -- golden forward ---------------------------------------------------------------------------

def forward(net, f16_codes, *, column=None, lanes=4):
    """Golden outputs of ``net`` for f16 images, exactly as the accelerator computes them.

    Parameters
    ----------
    net : QuantisedMLP
    f16_codes : array of uint16, shape (n, 64)
        Raw f16 codes of ``pixels / 16`` (:func:`pixels_to_f16`).
    column : lowbit.sim.bfp_column.ColumnModel, optional
        The device's column (BFP nets; default ``ColumnModel()``); its block size must be the
        net's.
    lanes : int
        Terms per beat of the discrete unit (discrete nets).

    Returns
    -------
    (m, e) : numpy.ndarray, numpy.ndarray
        Output codes and exponents, shape (n, 10), int64.
    """
    if not isinstance(net, QuantisedMLP):
        raise TypeError(f"Network must be a QuantisedMLP, not {net!r}")
    x_m, x_e = net.input_quant.quantise(f16_codes)
    if net.variant == "bfp":
        column = ColumnModel() if column is None else column
        if column.block != net.input_quant.block:
            raise ValueError(f"Column block size {column.block} differs from the network's "
                             f"{net.input_quant.block}")
    out_m, out_e = [], []
    for xm, xe in zip(x_m, x_e, strict=True):
        m, e = xm, xe
        for k, layer in enumerate(net.layers):
            if net.variant == "bfp":
                # A layer's output has one exponent per row, the next layer reads one per block
                # (the hidden layer's table gives every row the same exponent).
                m, e = bfp_dense(layer, m, e[::column.block] if k else e, column)
            else:
                m, e = discrete_dense(layer, m, lanes=lanes)
        out_m.append(m)
        out_e.append(e)
    return np.array(out_m, dtype=np.int64), np.array(out_e, dtype=np.int64)


def predictions(m, e):
    """Classes of output codes ``m`` with exponents ``e`` (n, 10): argmax of ``m · 2^e``
    (exact in float64), ties to the lowest class."""
    return np.argmax(np.ldexp(np.asarray(m, dtype=np.float64), np.asarray(e)), axis=1)


def predict(net, pixels, *, column=None, lanes=4):
    """Golden classes of raw-pixel images."""
    return predictions(*forward(net, pixels_to_f16(pixels), column=column, lanes=lanes))


def accuracy(pred, labels):
    """Fraction of ``pred`` equal to ``labels``."""
    pred, labels = np.asarray(pred), np.asarray(labels)
    if pred.shape != labels.shape or pred.ndim != 1 or not len(pred):
        raise ValueError(f"Predictions {pred.shape} and labels {labels.shape} must be equal, "
                         "non-empty 1-d arrays")
    return float(np.mean(pred == labels))
