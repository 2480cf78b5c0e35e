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
  literal reading of ¶[0074] (lower it when accuracy falls) is treated as a drafting slip
  (:class:`StepController` keeps it as an option, ``on_drop="lower"``).
* Data type (¶[0059], ¶[0075]): an entry is either BFP widths ("a5w6") or ``"float32"``
  (:data:`FLOAT32`). float32 is never averaged with a width: when the location entry (gate or
  layer) or the time entry (step or epoch) of a product says float32, the product is float32.
* Time (Examples 4 and 8, ¶[0066]): a schedule has an epoch table and a step table (step
  index *within* the epoch); for a given step the step table, when it has an entry at or
  before the step, replaces the epoch table's entry. Location: a gate entry (Examples 15-20,
  keyed by gate name) replaces its layer's entry.
* Per-step decisions on moving averages (¶[0074]) are :class:`StepController`: the tracked
  statistics are the batch accuracy of each step and the training *speed*, defined as the
  loss decrease per step, ``speed_t = loss_(t-1) - loss_t`` (nats per step). Measured MAC/s
  was not chosen: on the accelerator the column's cycles per product do not depend on the
  runtime width ``W <= W_max`` (so MAC/s carries no information about the width decision),
  and on the golden model or a shared host wall-clock rates measure the machine, not the
  training, and would make runs non-reproducible.
"""

import math
import re
from dataclasses import dataclass

import numpy as np

__all__ = ["Widths", "FLOAT32", "DTYPES", "parse_widths", "PrecisionSchedule",
           "ThresholdController", "StepController", "quantisation_error", "COMBINE_MODES"]

#: Ways of combining a layer width with an epoch width.
COMBINE_MODES = ("mean", "nudge", "layer", "epoch")

_WIDTH_RE = re.compile(r"^a(\d+)w(\d+)$")


def _check_width(value, what, lo, hi):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an integer between {lo} and {hi}, not {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{what} must be an integer between {lo} and {hi}, not {value}")
    return value


#: Data types an entry can choose (¶[0059]): BFP at the entry's widths, or float32.
DTYPES = ("bfp", "float32")


@dataclass(frozen=True)
class Widths:
    """Mantissa widths of activations (``a``) and weights (``w``), written "a5w6", and the
    data type (``dtype``, one of :data:`DTYPES`; default ``"bfp"``).

    A float32 entry is :data:`FLOAT32`: ``a = w = 24``, float32's significand width with the
    hidden bit (seed 004 ¶[0044]), written "float32".
    """
    a: int
    w: int
    dtype: str = "bfp"

    def __str__(self):
        return "float32" if self.is_float else f"a{self.a}w{self.w}"

    @property
    def is_float(self):
        """True for the float32 data type."""
        return self.dtype == "float32"

    def __getitem__(self, kind):
        if kind not in ("a", "w"):
            raise KeyError(f"Width kind must be 'a' or 'w', not {kind!r}")
        return self.a if kind == "a" else self.w


#: The float32 data type as a schedule entry (``parse_widths("float32")``).
FLOAT32 = Widths(24, 24, "float32")


def parse_widths(spec, *, min_bits=2, max_bits=8):
    """Parse ``"a5w6"`` (or a :class:`Widths`, or an ``(a, w)`` pair) into :class:`Widths`.

    ``"float32"`` (or :data:`FLOAT32`) chooses the float32 data type instead of BFP widths.

    Raises
    ------
    TypeError
        If ``spec`` is not a string, pair or :class:`Widths`.
    ValueError
        If the string is malformed or a width is outside ``min_bits..max_bits``.
    """
    if isinstance(spec, Widths):
        if spec.dtype not in DTYPES:
            raise ValueError(f"Data type must be one of {', '.join(DTYPES)}, not "
                             f"{spec.dtype!r}")
        if spec.is_float:
            return FLOAT32
        a, w = spec.a, spec.w
    elif isinstance(spec, str) and spec.strip() == "float32":
        return FLOAT32
    elif isinstance(spec, str):
        match = _WIDTH_RE.match(spec.strip())
        if match is None:
            raise ValueError(f"Width spec must look like 'a5w6' or be 'float32', not {spec!r}")
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
    """Per-layer, per-gate, per-epoch and per-step widths (or data types) and their combination.

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
        How a location width (gate or layer) and a time width (step or epoch) combine when both
        are given; one of :data:`COMBINE_MODES` (see the module docstring). Default ``"mean"``.
    min_bits, max_bits : int
        Legal widths (default 2 and 8, the hardware's ``2..W_max``).
    steps : dict of int to str, optional
        Step *within the epoch* at which a width takes effect -> widths, piecewise constant
        and restarting every epoch (Examples 4 and 8: step 1 at one width, step 2 at another).
        Where it has an entry at or before the step it replaces the epoch table's entry.
    gates : dict of str to str, optional
        Gate name (e.g. ``"z"``, ``"r"``, ``"n"`` of a GRU, ``"j"``, ``"i"``, ``"f"``,
        ``"o"`` of an LSTM) -> widths (Examples 6 and 15-20). A gate's entry replaces the
        entry of its layer.

    Any entry may be ``"float32"`` (:data:`FLOAT32`): the products it covers use float32
    (¶[0059]); see the module docstring for how it combines.

    Raises
    ------
    TypeError
        For a non-integer epoch, step or layer key, a non-string gate name, a bound or a
        malformed width spec type.
    ValueError
        For a negative key, an empty gate name, an unknown combine mode, bad bounds or a width
        out of bounds.
    """

    def __init__(self, default="a8w8", *, epochs=None, layers=None, combine="mean", min_bits=2,
                 max_bits=8, steps=None, gates=None):
        _check_width(min_bits, "Minimum width", 2, 64)
        _check_width(max_bits, "Maximum width", min_bits, 64)
        if combine not in COMBINE_MODES:
            raise ValueError(f"Combine mode must be one of {', '.join(COMBINE_MODES)}, "
                             f"not {combine!r}")
        self._min, self._max = min_bits, max_bits
        self._default = parse_widths(default, min_bits=min_bits, max_bits=max_bits)
        self._epochs = self._table(epochs, "Epoch")
        self._steps = self._table(steps, "Step")
        self._layers = self._table(layers, "Layer")
        self._gates = {}
        for name, spec in (gates or {}).items():
            if not isinstance(name, str):
                raise TypeError(f"Gate name must be a string, not {name!r}")
            if not name:
                raise ValueError(f"Gate name must not be empty, not {name!r}")
            self._gates[name] = parse_widths(spec, min_bits=min_bits, max_bits=max_bits)
        self._combine = combine

    def _table(self, table, what):
        out = {}
        for key, spec in (table or {}).items():
            _check_index(key, what)
            out[key] = parse_widths(spec, min_bits=self._min, max_bits=self._max)
        return dict(sorted(out.items()))

    @property
    def default(self):
        return self._default

    @property
    def combine(self):
        return self._combine

    @property
    def gates(self):
        """Gate name -> widths (a copy)."""
        return dict(self._gates)

    def epoch_widths(self, epoch):
        """Widths the epoch table gives for ``epoch`` (``None`` before its first entry)."""
        return _lookup(self._epochs, epoch)

    def step_widths(self, step):
        """Widths the step table gives for ``step`` within an epoch (``None`` before its first
        entry)."""
        return _lookup(self._steps, step)

    def widths(self, layer, epoch, step=None, gate=None):
        """Effective :class:`Widths` of ``layer`` (or of its ``gate``) in ``epoch`` at ``step``.

        ``step`` (the step within the epoch) and ``gate`` are optional; without them the
        result is that of the layer and epoch tables alone.

        Raises
        ------
        TypeError, ValueError
            For an index that is not a non-negative integer (``step`` may be None), or a
            ``gate`` that is neither None nor a string.
        """
        _check_index(layer, "Layer")
        _check_index(epoch, "Epoch")
        if step is not None:
            _check_index(step, "Step")
        if gate is not None and not isinstance(gate, str):
            raise TypeError(f"Gate name must be a string, not {gate!r}")
        where = self._gates.get(gate) if gate is not None else None
        if where is None:
            where = self._layers.get(layer)
        when = self.step_widths(step) if step is not None else None
        if when is None:
            when = self.epoch_widths(epoch)
        if where is None and when is None:
            return self._default
        if where is None:
            return when
        if when is None:
            return where
        if where.is_float or when.is_float:
            return FLOAT32
        return Widths(*(_combine(where[k], when[k], self._combine) for k in "aw"))


def _check_index(value, what):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} index must be a non-negative integer, not {value!r}")
    if value < 0:
        raise ValueError(f"{what} index must be a non-negative integer, not {value}")
    return value


def _lookup(table, index):
    found = None
    for start, widths in table.items():
        if start <= index:
            found = widths
    return found


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


class StepController:
    """Per-step width decisions on moving averages of accuracy and speed (seed 004 ¶[0074]).

    After every training step, :meth:`update` takes the step's batch accuracy and training
    loss. The *speed* of a step is the loss decrease, ``speed_t = loss_(t-1) - loss_t`` (none
    for the first step). Both statistics have exponential moving averages,
    ``avg = smoothing * avg + (1 - smoothing) * sample`` (the first sample starts the
    average). Every ``period`` steps after ``warmup`` samples (¶[0074]: "periodically sampled
    statistics") the step's samples are compared with the averages *before* they take the
    samples in:

    * **sudden drop** — the accuracy is below its average by more than ``accuracy_drop``, or
      the speed is below its average by more than ``speed_drop`` (a loss spike): the width
      *offset* moves by ``step`` — up with ``on_drop="raise"`` (the default: more precision
      when training suddenly degrades, as ¶[0072] and ¶12 argue), down with
      ``on_drop="lower"`` (¶[0074]'s literal wording, ambiguity A7) — and for the next
      ``cooldown`` steps no decision is taken (the new width has to act before it is judged);
    * **calm** — no drop: with ``patience`` set, after ``patience`` consecutive calm decisions
      the offset moves ``step`` the other way (back towards cheaper arithmetic, ¶[0072]'s
      "decrease to save compute"); without ``patience`` (None) nothing happens.

    The offset stays within ``min_offset..max_offset`` and is added to the schedule's widths by
    :meth:`adjust` (clamped to ``min_bits..max_bits``; float32 entries are left alone). The
    averages keep running across a decision, so a lasting change becomes the new normal.

    Parameters
    ----------
    smoothing : float
        Exponential smoothing factor in ``[0, 1)`` (default 0.9).
    accuracy_drop : float
        Accuracy drop (fraction, ``> 0``) that counts as sudden (default 0.15).
    speed_drop : float or None
        Speed drop (nats per step, ``> 0``) that counts as sudden (default 0.5); None
        ignores the speed.
    warmup : int
        Samples before the first decision (``>= 1``, default 5).
    period : int
        Steps between decisions (``>= 1``, default 1).
    cooldown : int
        Steps without decisions after a change (``>= 0``, default 5).
    patience : int or None
        Consecutive calm decisions before the offset moves back (``>= 1``); None (default)
        never moves it back.
    step : int
        Offset change per decision (``>= 1``, default 1).
    min_offset, max_offset : int
        Offset bounds, ``min_offset <= 0 <= max_offset`` (default 0 and 2).
    on_drop : {"raise", "lower"}
        Direction of the reaction to a sudden drop (default ``"raise"``).
    min_bits, max_bits : int
        Width bounds of :meth:`adjust` (default 2 and 8).

    Members
    -------
    offset : int
        The current width offset.
    history : list of tuple
        Per :meth:`update`: ``(step, accuracy, accuracy_avg, speed, speed_avg, event,
        offset)``, the averages *before* the step's samples, ``event`` one of ``"warmup"``,
        ``"skip"`` (not a decision step or cooling down), ``"drop"``, ``"calm"``,
        ``"relax"`` (calm long enough: offset moved back, or held at its bound).

    Raises
    ------
    TypeError, ValueError
        For wrongly typed or out-of-range parameters (the message names the value).
    """

    def __init__(self, *, smoothing=0.9, accuracy_drop=0.15, speed_drop=0.5, warmup=5,
                 period=1, cooldown=5, patience=None, step=1, min_offset=0, max_offset=2,
                 on_drop="raise", min_bits=2, max_bits=8):
        _check_width(min_bits, "Minimum width", 2, 64)
        _check_width(max_bits, "Maximum width", min_bits, 64)
        self._smoothing = _check_real(smoothing, "Smoothing")
        if not 0 <= smoothing < 1:
            raise ValueError(f"Smoothing must be in [0, 1), not {smoothing}")
        self._acc_drop = _check_real(accuracy_drop, "Accuracy drop")
        if not 0 < accuracy_drop <= 1:
            raise ValueError(f"Accuracy drop must be in (0, 1], not {accuracy_drop}")
        if speed_drop is not None:
            speed_drop = _check_real(speed_drop, "Speed drop")
            if not 0 < speed_drop < math.inf:
                raise ValueError(f"Speed drop must be a finite positive number, not "
                                 f"{speed_drop}")
        self._speed_drop = speed_drop
        self._warmup = _check_width(warmup, "Warm-up", 1, 1 << 30)
        self._period = _check_width(period, "Period", 1, 1 << 30)
        self._cooldown = _check_width(cooldown, "Cool-down", 0, 1 << 30)
        if patience is not None:
            _check_width(patience, "Patience", 1, 1 << 30)
        self._patience = patience
        span = max_bits - min_bits
        self._step = _check_width(step, "Offset step", 1, max(span, 1))
        self._min_off = _check_width(min_offset, "Minimum offset", -span, 0)
        self._max_off = _check_width(max_offset, "Maximum offset", 0, span)
        if on_drop not in ("raise", "lower"):
            raise ValueError(f"On-drop reaction must be 'raise' or 'lower', not {on_drop!r}")
        self._sign = 1 if on_drop == "raise" else -1
        self._min, self._max = min_bits, max_bits
        self.offset = 0
        self.history = []
        self._n = 0
        self._acc_avg = self._speed_avg = self._last_loss = None
        self._hold = 0
        self._calm = 0

    @property
    def averages(self):
        """``(accuracy_avg, speed_avg)`` (None before the first sample)."""
        return self._acc_avg, self._speed_avg

    def _avg(self, avg, sample):
        if sample is None:
            return avg
        return sample if avg is None else self._smoothing * avg + (1 - self._smoothing) * sample

    def update(self, accuracy, loss):
        """Feed one step's batch accuracy (``0..1``) and loss; return the (new) offset.

        Raises
        ------
        TypeError
            If a value is not a real number.
        ValueError
            If ``accuracy`` is outside ``[0, 1]`` or ``loss`` is not finite.
        """
        accuracy = _check_real(accuracy, "Accuracy")
        loss = _check_real(loss, "Loss")
        if not 0 <= accuracy <= 1:
            raise ValueError(f"Accuracy must be in [0, 1], not {accuracy}")
        if not math.isfinite(loss):
            raise ValueError(f"Loss must be finite, not {loss}")
        speed = None if self._last_loss is None else self._last_loss - loss
        self._last_loss = loss
        acc_avg, speed_avg = self._acc_avg, self._speed_avg
        self._n += 1
        if self._n <= self._warmup or acc_avg is None:
            event = "warmup"
        elif self._hold > 0 or (self._n - self._warmup) % self._period:
            event = "skip"
        else:
            drop = acc_avg - accuracy > self._acc_drop
            if self._speed_drop is not None and speed is not None and speed_avg is not None:
                drop = drop or speed_avg - speed > self._speed_drop
            if drop:
                event = "drop"
                self._move(self._sign * self._step)
                self._calm = 0
            else:
                event = "calm"
                self._calm += 1
                if self._patience is not None and self._calm >= self._patience:
                    event = "relax"
                    self._move(-self._sign * self._step)
                    self._calm = 0
        if self._hold > 0 and event == "skip":
            self._hold -= 1
        self._acc_avg = self._avg(acc_avg, accuracy)
        self._speed_avg = self._avg(speed_avg, speed)
        self.history.append((self._n - 1, accuracy, acc_avg, speed, speed_avg, event,
                             self.offset))
        return self.offset

    def _move(self, delta):
        new = min(max(self.offset + delta, self._min_off), self._max_off)
        if new != self.offset:
            self._hold = self._cooldown
        self.offset = new

    def adjust(self, widths):
        """``widths`` moved by the current offset, clamped to ``min_bits..max_bits``; a
        float32 entry is returned unchanged."""
        widths = parse_widths(widths, min_bits=2, max_bits=64)
        if widths.is_float:
            return widths
        return Widths(*(min(max(widths[k] + self.offset, self._min), self._max) for k in "aw"))


def _check_real(value, what):
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"{what} must be a real number, not {value!r}")
    return float(value)
