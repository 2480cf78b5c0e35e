"""Host-side mixed-precision schedule and threshold controller (seed 004, DESIGN §3.4).

Seed 004 varies the BFP mantissa width of activations and weights along three axes: the layer
(input and output layers more precise than hidden ones), the training time (epoch or step, e.g.
"a5w6" in the first epoch and "a6w6" in the next) and, dynamically, the measured quantisation
error (raise the width when the error is above an upper threshold, lower it when it is below a
lower one). This module holds that bookkeeping for the training code. It is pure Python/numpy;
the widths it produces are written to the quantiser's and MAC column's ``W`` registers.

Choices where seed 004 is silent (see ``docs/quantiser.md``):

* A width is the BFP mantissa width ``W`` *including* the sign bit (the DESIGN §2 element is a
  ``W``-bit two's-complement mantissa), so "a5w6" means ``W = 5`` for activations and ``W = 6``
  for weights.
* Effective width of a layer in an epoch (Examples 5, 11, 12): ``"mean"`` is the mean of the
  layer and epoch widths, halves rounded *up* (towards more precision); ``"nudge"`` is the epoch
  width moved one step towards the layer width (Example 12's direction rule, step 1);
  ``"layer"`` / ``"epoch"`` take one of them alone.
* The controller raises the width when the error is *above* the upper threshold (¶[0072]); the
  literal reading of ¶[0074] (lower it when accuracy falls) is treated as a drafting slip.
"""

import math
import re
from dataclasses import dataclass

import numpy as np

__all__ = ["Widths", "parse_widths", "PrecisionSchedule", "ThresholdController",
           "quantisation_error", "COMBINE_MODES"]

#: Ways of combining a layer width with an epoch width.
COMBINE_MODES = ("mean", "nudge", "layer", "epoch")

_WIDTH_RE = re.compile(r"^a(\d+)w(\d+)$")


def _check_width(value, what, lo, hi):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an integer between {lo} and {hi}, not {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{what} must be an integer between {lo} and {hi}, not {value}")
    return value


@dataclass(frozen=True)
class Widths:
    """Mantissa widths of activations (``a``) and weights (``w``), written "a5w6"."""
    a: int
    w: int

    def __str__(self):
        return f"a{self.a}w{self.w}"

    def __getitem__(self, kind):
        if kind not in ("a", "w"):
            raise KeyError(f"Width kind must be 'a' or 'w', not {kind!r}")
        return self.a if kind == "a" else self.w


def parse_widths(spec, *, min_bits=2, max_bits=8):
    """Parse ``"a5w6"`` (or a :class:`Widths`, or an ``(a, w)`` pair) into :class:`Widths`.

    Raises
    ------
    TypeError
        If ``spec`` is not a string, pair or :class:`Widths`.
    ValueError
        If the string is malformed or a width is outside ``min_bits..max_bits``.
    """
    if isinstance(spec, Widths):
        a, w = spec.a, spec.w
    elif isinstance(spec, str):
        match = _WIDTH_RE.match(spec.strip())
        if match is None:
            raise ValueError(f"Width spec must look like 'a5w6', not {spec!r}")
        a, w = int(match.group(1)), int(match.group(2))
    elif isinstance(spec, tuple | list) and len(spec) == 2:
        a, w = spec
    else:
        raise TypeError(f"Width spec must be a string like 'a5w6' or an (a, w) pair, not {spec!r}")
    _check_width(a, "Activation width", min_bits, max_bits)
    _check_width(w, "Weight width", min_bits, max_bits)
    return Widths(a, w)


def _combine(layer_bits, epoch_bits, mode):
    if mode == "mean":
        return math.ceil((layer_bits + epoch_bits) / 2)
    if mode == "nudge":
        return epoch_bits + (layer_bits > epoch_bits) - (layer_bits < epoch_bits)
    if mode == "layer":
        return layer_bits
    return epoch_bits


class PrecisionSchedule:
    """Per-layer and per-epoch mantissa widths and their combination.

    Parameters
    ----------
    default : str or Widths
        Widths of every layer in every epoch not otherwise listed (seed 004's baseline).
    epochs : dict of int to str, optional
        Epoch at which a width takes effect -> widths, piecewise constant, e.g.
        ``{0: "a5w6", 1: "a6w6"}`` (¶[0065]). Epochs before the first key use ``default``.
    layers : dict of int to str, optional
        Layer index -> widths, e.g. higher widths for the input and output layers (¶[0061]).
    combine : str
        How a layer width and an epoch width combine when both are given; one of
        :data:`COMBINE_MODES` (see the module docstring). Default ``"mean"``.
    min_bits, max_bits : int
        Legal widths (default 2 and 8, the hardware's ``2..W_max``).

    Raises
    ------
    TypeError
        For a non-integer epoch or layer key, bound or a malformed width spec type.
    ValueError
        For a negative key, an unknown combine mode, bad bounds or a width out of bounds.
    """

    def __init__(self, default="a8w8", *, epochs=None, layers=None, combine="mean", min_bits=2,
                 max_bits=8):
        _check_width(min_bits, "Minimum width", 2, 64)
        _check_width(max_bits, "Maximum width", min_bits, 64)
        if combine not in COMBINE_MODES:
            raise ValueError(f"Combine mode must be one of {', '.join(COMBINE_MODES)}, "
                             f"not {combine!r}")
        self._min, self._max = min_bits, max_bits
        self._default = parse_widths(default, min_bits=min_bits, max_bits=max_bits)
        self._epochs = self._table(epochs, "Epoch")
        self._layers = self._table(layers, "Layer")
        self._combine = combine

    def _table(self, table, what):
        out = {}
        for key, spec in (table or {}).items():
            if not isinstance(key, int) or isinstance(key, bool):
                raise TypeError(f"{what} index must be a non-negative integer, not {key!r}")
            if key < 0:
                raise ValueError(f"{what} index must be a non-negative integer, not {key}")
            out[key] = parse_widths(spec, min_bits=self._min, max_bits=self._max)
        return dict(sorted(out.items()))

    @property
    def default(self):
        return self._default

    @property
    def combine(self):
        return self._combine

    def epoch_widths(self, epoch):
        """Widths the epoch table gives for ``epoch`` (``None`` before its first entry)."""
        found = None
        for start, widths in self._epochs.items():
            if start <= epoch:
                found = widths
        return found

    def widths(self, layer, epoch):
        """Effective :class:`Widths` of ``layer`` in ``epoch``."""
        for value, what in ((layer, "Layer"), (epoch, "Epoch")):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{what} index must be a non-negative integer, not {value!r}")
            if value < 0:
                raise ValueError(f"{what} index must be a non-negative integer, not {value}")
        by_layer = self._layers.get(layer)
        by_epoch = self.epoch_widths(epoch)
        if by_layer is None and by_epoch is None:
            return self._default
        if by_layer is None:
            return by_epoch
        if by_epoch is None:
            return by_layer
        return Widths(*(_combine(by_layer[k], by_epoch[k], self._combine) for k in "aw"))


def quantisation_error(x, xq):
    """Relative RMS quantisation error ``||x - xq|| / ||x||`` (0 for an all-zero ``x``).

    Non-finite elements of ``x`` are ignored (a NaN block carries no magnitude to compare).
    """
    x = np.asarray(x, dtype=np.float64)
    xq = np.asarray(xq, dtype=np.float64)
    if x.shape != xq.shape:
        raise ValueError(f"Shapes differ: {x.shape} and {xq.shape}")
    keep = np.isfinite(x)
    num = np.sqrt(np.sum((x[keep] - xq[keep]) ** 2))
    den = np.sqrt(np.sum(x[keep] ** 2))
    return 0.0 if den == 0 else float(num / den)


class ThresholdController:
    """Two-threshold (hysteresis) width controller of seed 004 ¶[0072] and Example 13.

    Each key (e.g. ``(layer, "a")``) has a width. :meth:`update` takes the measured
    quantisation error of that key: above ``high`` the width rises by ``step``, below ``low`` it
    falls by ``step``, in between it stays; widths stay within ``min_bits..max_bits``. With
    ``smoothing`` > 0 the error is first averaged exponentially,
    ``avg = smoothing * avg + (1 - smoothing) * error`` (¶[0074]'s moving average), and the
    thresholds apply to the average; the average restarts after every width change, because the
    error of the old width says nothing about the new one.

    Parameters
    ----------
    initial : int or dict
        Starting width of every key, or key -> starting width (other keys start at ``max_bits``).
    low, high : float
        Thresholds, ``0 <= low < high``.
    step : int
        Width change per decision (default 1).
    min_bits, max_bits : int
        Width bounds (default 2 and 8).
    smoothing : float
        Exponential smoothing factor in ``[0, 1)``; 0 (default) acts on each error directly.

    Raises
    ------
    TypeError, ValueError
        For wrongly typed or out-of-range parameters.
    """

    def __init__(self, initial=8, *, low, high, step=1, min_bits=2, max_bits=8, smoothing=0.0):
        _check_width(min_bits, "Minimum width", 2, 64)
        _check_width(max_bits, "Maximum width", min_bits, 64)
        _check_width(step, "Width step", 1, max_bits - min_bits if max_bits > min_bits else 1)
        for value, what in ((low, "Lower threshold"), (high, "Upper threshold"),
                            (smoothing, "Smoothing")):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"{what} must be a real number, not {value!r}")
        if not (0 <= low < high) or not math.isfinite(high):
            raise ValueError(f"Thresholds must satisfy 0 <= low < high, not low={low}, "
                             f"high={high}")
        if not 0 <= smoothing < 1:
            raise ValueError(f"Smoothing must be in [0, 1), not {smoothing}")
        self._min, self._max, self._step = min_bits, max_bits, step
        self._low, self._high, self._smoothing = float(low), float(high), float(smoothing)
        if isinstance(initial, dict):
            self._default = max_bits
            self._widths = {k: _check_width(v, "Initial width", min_bits, max_bits)
                            for k, v in initial.items()}
        else:
            self._default = _check_width(initial, "Initial width", min_bits, max_bits)
            self._widths = {}
        self._avg = {}
        self.history = []

    @property
    def thresholds(self):
        return self._low, self._high

    def width(self, key):
        """Current width of ``key``."""
        return self._widths.get(key, self._default)

    def update(self, key, error):
        """Feed the quantisation error measured for ``key``; return its (new) width.

        Raises
        ------
        ValueError
            If ``error`` is negative or not finite.
        """
        error = float(error)
        if not math.isfinite(error) or error < 0:
            raise ValueError(f"Quantisation error must be a finite non-negative number, "
                             f"not {error}")
        if self._smoothing and key in self._avg:
            level = self._smoothing * self._avg[key] + (1 - self._smoothing) * error
        else:
            level = error
        old = self.width(key)
        new = old
        if level > self._high:
            new = min(old + self._step, self._max)
        elif level < self._low:
            new = max(old - self._step, self._min)
        self._widths[key] = new
        if new != old:
            self._avg.pop(key, None)
        else:
            self._avg[key] = level
        self.history.append((key, error, level, old, new))
        return new
