"""Training of the digits MLP with the accelerator's arithmetic (issue #11; seeds 000, 001, 004).

Pure NumPy (scikit-learn only to load the data set); never imports Amaranth. The accelerator
does every matrix product of training — forward ``W·x``, backward ``Wᵀ·g`` and the weight
gradient ``dW = Σ_b g_b·x_bᵀ`` — and the host does the rest (softmax and loss gradient, the
ReLU derivative mask, the weight update — on a float64 master copy or on the weights stored in
BFP —, the precision controller).

Backends
--------
A backend is the set of products the accelerator runs (:class:`Backend`):

* :meth:`Backend.bfp_matvec` — the BFP MAC column (:class:`lowbit.sim.bfp_column.ColumnModel`), a
  batch of vectors against one weight matrix, the rows in tiles of ``N`` lanes (the last tile
  padded with zero rows), each vector one ``MATVEC`` of ``T`` tiles;
* :meth:`Backend.discrete_matvec` — the discrete shift/XOR unit as
  :func:`lowbit.sim.network.discrete_dense` (no table);
* :meth:`Backend.grand` — normal samples of the Irwin–Hall grand unit (weight initialisation);
* :meth:`Backend.seed_rounding` — loads the rounding PRNG (``PRNG_SEED0..3``).

:class:`GoldenBackend` runs the golden models (a batch of vectors is one
:meth:`lowbit.sim.bfp_column.ColumnModel.matvec_batch`, vectorised over vectors and tiles) and
models
the rounding PRNG's draws exactly as :mod:`lowbit.sim.program` specifies them (one xoroshiro128aox
lane, the low ``R`` bits of one output word per random number, ``N`` per tile in lane order,
vectors in call order). It draws only for stochastic rounding. :class:`DeviceBackend` sends
the same calls, in the same order, to a :class:`lowbit.boards.driver.Accelerator` (model transport,
simulated top, or a board).

Arithmetic of one training step (BFP variants)
----------------------------------------------
Layer ``l`` has float64 master weights ``W`` (``R × K``) and bias ``b``; its widths
``Widths(a, w)`` come from the precision policy (fixed, or seed 004's schedule plus threshold
controller). ``B`` is the column's block size, ``V`` the batch (padded with zero samples to a
multiple of ``B``).

1. *Forward*: ``W`` is quantised to BFP along ``K`` at width ``w`` (bias: one block per
   element), the layer input along ``K`` at width ``a`` of the layer that produced it (exact
   for hidden activations: they already are blocks of ``N = B`` elements on the column grid);
   one column product per sample with the bias path, output width ``a``, ``"max"`` exponent
   selector. Hidden layers: ReLU on the output mantissas (exact); ``f′ = [m > 0]``.
2. *Loss gradient* (host): ``g = (softmax(z) − onehot(y)) / n`` in float64.
3. *Weight gradient*: ``dW[:, j] = Gᵀ · X[:, j]`` — the batch is the reduction axis: the
   matrix is ``Gᵀ`` (``R × V``, blocks along the batch), the vectors are the ``K`` columns of
   the layer input over the batch plus an all-ones vector (giving ``db``). Every beat carries
   ``N`` useful MACs: ``K + 1`` products of ``ceil(R / N)`` tiles of ``V`` beats, i.e.
   ``(K + 1) · ceil(R / N) · V`` column beats for ``R · K · V`` MACs. (The per-sample outer
   product, one product with one non-zero beat per block, would need ``B`` times as many.)
4. *Backward*: ``g_in = (Wᵀ · g) ⊙ f′``: ``Wᵀ`` re-blocked along its new reduction axis ``R``
   (quantised from the master copy at width ``w``, ``R`` padded to a multiple of ``B``), one
   column product per sample, output width ``a`` of the layer below.
5. *Update* (host): momentum SGD, ``v = μ·v + dW`` (``v`` float64), ``W -= lr·v`` on the
   float64 master copy; or, with ``master_bits = M`` (the issue's ``bfp4-nearest`` /
   ``bfp4-stochastic``: ``M = 4``), on the weights *stored* as BFP-M, the result rounded back
   into BFP-M with the run's rounding (random bits from the host generator): nearest rounding
   loses every update below half an ulp of its block, stochastic rounding keeps it in
   expectation (seed 000). ``*-f64master`` are the same BFP-4 arithmetic with a float64 master.

Roundings: the column's output rounding uses the run's mode (``rounding``; the forward pass
may use ``forward_rounding``); stochastic rounding takes its random numbers from the on-chip
rounding PRNG. The host's conversions round to nearest (input, weights, hidden activations —
exact when a column tile equals a block, ``N = B``; with ``N < B`` a block takes the larger of
two tile exponents) or, for the gradients it quantises (loss gradient, ``Gᵀ`` along the batch,
``g`` for ``Wᵀ·g``), with the run's mode, stochastic with random bits from a host generator
(NumPy PCG64 seeded from the run seed). So a run is deterministic and identical on every
backend.

Discrete variant (seed 001 backward pass)
-----------------------------------------
Weights are codes of :data:`DISCRETE_BOOK` (3 bits, ``{±1, ±1/2, ±1/4, ±2^-7}``, the inference
demo's book; ``±2^-7`` acts as zero) times a per-layer power of two ``γ`` (host bookkeeping),
drawn from the float64 master copy (clipped to ``[-γ, γ]``) by seed 001's *stochastic*
conversion (:func:`to_codes`, host random bits) after every update. Activations are int8 codes
with a power-of-two scale. Forward: ``DMATVEC`` with the integer bias and a requantiser shift;
backward ``Wᵀ·g``: ``DMATVEC`` of the transposed codes with the loss gradient as int8 codes
(nearest, per-batch power-of-two scale); ``× f′``: :func:`lowbit.sim.discrete.ew_mul` with the ReLU
derivative as codes of :data:`FPRIME_BOOK` (``1`` or ``2^-7``, which zeroes an int8 magnitude);
``dW = g·xᵀ``: the gradient is converted to codes stochastically (unbiased; seed 001 lets
gradients be discrete) and ``dW[:, j] = G_codesᵀ · X[:, j]`` runs on the discrete unit (the
batch as the reduction axis, as above; it equals the sum of :func:`lowbit.sim.discrete.weight_grad`
outer products when nothing saturates). Each product's shift is predicted from the previous
outputs of the same product (peak with decay 0.9; a saturated output counts as twice the
range; the first from a float64 estimate), like the column's predicted exponent selector.

Mixed precision (seed 004)
--------------------------
:class:`MixedPolicy`: the widths of layer ``l`` in epoch ``t`` are
``max(schedule.widths(l, t), controller.width((l, kind)))`` per kind ``a``/``w``. The schedule
(:class:`lowbit.sim.schedule.PrecisionSchedule`) raises the widths over the epochs and gives the
input
and output layers more bits; the :class:`lowbit.sim.schedule.ThresholdController` sees, after every
epoch, the measured quantisation error of each layer (weights: relative RMS error of the BFP
weights against the master copy; activations: of the layer's forward outputs on the epoch's
first batch against the float64 product of the same operands, i.e. seed 004's "repeat a
subset of the computation at high precision") and raises a width when the error is above its
upper threshold, lowers it (down to the schedule) below the lower one. Within an epoch the
schedule's step table (step within the epoch) applies, and an optional
:class:`lowbit.sim.schedule.StepController` is fed every step's batch accuracy and loss and
moves the widths of the next step (seed 004 ¶[0074]: moving averages of accuracy and speed).
"""

import dataclasses
import math

import numpy as np

from .bfp import dequantise, quantise
from .bfp_column import ColumnModel
from .discrete import CodeBook, SMFormat, ew_mul, to_codes
from .discrete import dot as discrete_dot
from .grand import WORDS_PER_RESULT, GrandModel, f16_values, results_from_words
from .prng import Xoroshiro128aox, seed_lanes
from .schedule import PrecisionSchedule, ThresholdController, Widths, quantisation_error

__all__ = ["load_digits_split", "validation_split", "RoundingPRNG", "Backend",
           "GoldenBackend", "DeviceBackend", "DISCRETE_BOOK", "FPRIME_BOOK", "FixedPolicy",
           "MixedPolicy", "TrainConfig", "Trainer", "VARIANTS", "variant_config", "check_config",
           "discrete_dense_batch", "host_quantise", "epoch_steps", "train"]

#: Training variants of :func:`variant_config`.
VARIANTS = ("float64", "bfp8", "bfp4-nearest", "bfp4-stochastic", "mixed", "discrete",
            "bfp4-nearest-f64master", "bfp4-stochastic-f64master")


# -- data ------------------------------------------------------------------------------------

def load_digits_split():
    """The digits split of the inference demo: ``(x_train, y_train, x_test, y_test)``.

    :func:`lowbit.sim.mlp.load_split`: scikit-learn's bundled 8×8 digits,
    ``train_test_split(..., test_size=0.3, random_state=0)`` without stratification (1257
    training and 540 test images); pixels as integers 0..16.
    """
    from .mlp import load_split
    split = load_split()
    return tuple(np.asarray(getattr(split, name)).astype(np.int64)
                 for name in ("x_train", "y_train", "x_test", "y_test"))


def validation_split(data, fraction=0.2, seed=0):
    """Carve a validation set out of the training set of ``data``.

    Returns ``(x_fit, y_fit, x_val, y_val)``: a fixed random ``fraction`` of the training
    images (NumPy ``default_rng(seed)`` permutation) is held out; the test set is not used, so
    hyper-parameters chosen on it (the learning rate of the BFP-4 runs) never see the test set.
    """
    x_tr, y_tr = data[0], data[1]
    order = np.random.default_rng(seed).permutation(len(x_tr))
    n_val = int(round(fraction * len(x_tr)))
    val, fit = order[:n_val], order[n_val:]
    return x_tr[fit], y_tr[fit], x_tr[val], y_tr[val]


#: The discrete variant's default code book (3 bits, as the inference demo's):
#: ``{-1, -1/2, -1/4, -2^-7, +2^-7, +1/4, +1/2, +1}``; ``±2^-7`` times an int8 magnitude
#: truncates to 0, so those codes act as zero weights.
DISCRETE_BOOK = CodeBook.from_values([-1, -0.5, -0.25, -2**-7, 2**-7, 0.25, 0.5, 1])
#: 1-bit book of the ReLU derivative ``f′`` on the shift/XOR datapath: code 0 is ``+1``,
#: code 1 is ``+2^-7`` (an int8 magnitude shifted right by 7 is 0).
FPRIME_BOOK = CodeBook.from_values([1, 2**-7])


# -- the rounding PRNG -------------------------------------------------------------------------

def _take(gen, n):
    """``gen.take(n)``, avoiding counts that are a multiple of ``take``'s jump block.

    ``lowbit.sim.prng.Xoroshiro128aox.take`` leaves a malformed state when ``n > 64`` is a multiple
    of
    its block length (a power of two >= 64); ``n - 1`` never is, so such counts are split.
    """
    n = int(n)
    if n > 64 and n % 64 == 0:
        return np.concatenate([gen.take(n - 1), gen.take(1)])
    return gen.take(n)


class RoundingPRNG:
    """The accelerator's rounding PRNG: one xoroshiro128aox lane (:mod:`lowbit.sim.program`).

    Parameters
    ----------
    seed : int
        64-bit run seed; the state is :func:`lowbit.sim.prng.seed_lanes` ``(seed, 1)`` (``s1`` odd,
        so every load rule gives the same state).
    rand_bits : int
        ``R``: each random number is the low ``R`` bits of one output word.

    Members
    -------
    registers : dict
        ``PRNG_SEED0..3`` values that load this state (write ``PRNG_SEED3`` last).
    """

    def __init__(self, seed, rand_bits):
        state = seed_lanes(seed, 1)
        self._gen = Xoroshiro128aox.from_state(state)
        self._bits = rand_bits
        s0, s1 = int(state[0, 0]), int(state[0, 1])
        self.registers = {"PRNG_SEED0": s0 & 0xFFFFFFFF, "PRNG_SEED1": s0 >> 32,
                          "PRNG_SEED2": s1 & 0xFFFFFFFF, "PRNG_SEED3": s1 >> 32}

    def draw(self, n):
        """The next ``n`` random numbers (int64 in ``[0, 2^R)``)."""
        words = _take(self._gen, n)[:, 0]
        return (words & np.uint64((1 << self._bits) - 1)).astype(np.int64)


# -- backends ----------------------------------------------------------------------------------

class Backend:
    """The accelerator's products (see the module docstring). Subclasses implement them.

    Members
    -------
    column : lowbit.sim.bfp_column.ColumnModel
        The MAC column's geometry (lanes ``N``, block ``B``, ``W_max``, ``R``).
    disc_lanes, disc_acc_width : int
        Terms per beat and accumulator width of the discrete unit.
    grand_lanes : int
        Lanes of the grand unit (sample order).
    """

    column: ColumnModel
    disc_lanes = 4
    disc_acc_width = 16
    grand_lanes = 2

    def seed_rounding(self, seed):
        raise NotImplementedError

    def seed_grand(self, seed):
        raise NotImplementedError

    def grand(self, n):
        raise NotImplementedError

    def bfp_matvec(self, w_m, w_e, x_m, x_e, *, bias_m=None, bias_e=None, width=8,
                   rounding="nearest"):
        raise NotImplementedError

    def discrete_matvec(self, w_codes, x_m, *, book, bias=None, shift=0):
        raise NotImplementedError


class GoldenBackend(Backend):
    """Golden-model backend: :meth:`lowbit.sim.bfp_column.ColumnModel.matvec_batch`,
    :func:`discrete_dense_batch`, :class:`lowbit.sim.grand.GrandModel` and :class:`RoundingPRNG`.

    Parameters
    ----------
    column : lowbit.sim.bfp_column.ColumnModel, optional
        Column geometry (default ``ColumnModel()``: 16 lanes, block 16, ``W_max`` 8, ``F`` 3,
        ``R`` 8).
    disc_lanes, disc_acc_width, grand_lanes : int
        Discrete-unit and grand-unit parameters of the modelled accelerator.

    Members
    -------
    calls : dict
        Number of column products (``"matvec"``), column beats (``"beats"``) and discrete
        products (``"dmatvec"``) issued so far.
    """

    def __init__(self, column=None, *, disc_lanes=4, disc_acc_width=16, grand_lanes=2):
        self.column = ColumnModel() if column is None else column
        self.disc_lanes = disc_lanes
        self.disc_acc_width = disc_acc_width
        self.grand_lanes = grand_lanes
        self._prng = RoundingPRNG(0, self.column.rand_bits)
        self._grand = GrandModel(0, grand_lanes)
        self._pending = np.zeros(0)
        self.calls = {"matvec": 0, "beats": 0, "dmatvec": 0}

    def seed_rounding(self, seed):
        self._prng = RoundingPRNG(seed, self.column.rand_bits)

    def seed_grand(self, seed):
        self._grand = GrandModel(seed, self.grand_lanes)
        self._pending = np.zeros(0)

    def grand(self, n):
        n = int(n)
        while self._pending.size < n:
            need = -(-(n - self._pending.size) // self.grand_lanes)
            words = _take(self._grand.prng, need * WORDS_PER_RESULT["normal"])
            f16, _ = results_from_words(words, "normal")
            self._pending = np.concatenate([self._pending, f16_values(f16).reshape(-1)])
        out, self._pending = self._pending[:n], self._pending[n:]
        return out

    def bfp_matvec(self, w_m, w_e, x_m, x_e, *, bias_m=None, bias_e=None, width=8,
                   rounding="nearest"):
        v, k = np.shape(x_m)
        t = self.column.tiles(len(w_m))
        rand = None
        if rounding == "stochastic":
            rand = self._prng.draw(v * t * self.column.lanes).reshape(v, t, self.column.lanes)
        self.calls["matvec"] += v
        self.calls["beats"] += v * t * k
        return self.column.matvec_batch(w_m, w_e, x_m, x_e, bias_m=bias_m, bias_e=bias_e,
                                        width=width, rounding=rounding, rand=rand)

    def discrete_matvec(self, w_codes, x_m, *, book, bias=None, shift=0):
        self.calls["dmatvec"] += len(x_m)
        return discrete_dense_batch(w_codes, x_m, book=book, bias=bias, shift=shift,
                                    acc_width=self.disc_acc_width, lanes=self.disc_lanes)


class DeviceBackend(Backend):
    """The accelerator through the host driver (:class:`lowbit.boards.driver.Accelerator`).

    A batch of vectors is one single-layer network program of the driver
    (``load_network`` with the weights, then the vectors in order, one ``MATVEC`` /
    ``DMATVEC`` each), or with ``batched=False`` (or a driver without layer programs) one
    ``bfp_matvec`` / ``discrete_matvec`` call per vector; either way the rounding PRNG draws
    in the order :class:`GoldenBackend` models.

    Parameters
    ----------
    accel : lowbit.boards.driver.Accelerator
    column : lowbit.sim.bfp_column.ColumnModel, optional
        The column geometry of the device; default from ``accel.design``
        (:class:`lowbit.sim.program.Design`: ``matrix_lanes``, ``block``, ``max_blocks``,
        ``frac_bits``, ``rand_bits``), else ``ColumnModel()``.
    disc_lanes, disc_acc_width, grand_lanes : int, optional
        Default: ``accel.design``'s ``matrix_lanes``, ``disc_acc_width`` and ``lanes``, else
        4, 16 and 2.
    batched : bool
        Use the driver's layer programs for whole batches (default, when available).
    host_grand : bool, optional
        Draw the initial weights' normal samples on the host instead of the device's grand
        unit: :class:`GoldenBackend`'s model of the unit (:class:`lowbit.sim.grand.GrandModel`,
        ``grand_lanes`` lanes, the run seed), i.e. exactly the numbers a grand unit of this
        design would give, so a run is the same with or without one. Default: when the
        device's IDENTIFY record lists no grand unit (``accel.has_engine("grand")``), e.g. the
        iCEBreaker's top.

    Members
    -------
    host_grand : bool
        The initial weights come from the host (see above).

    Raises
    ------
    NotImplementedError
        If the driver lacks the numpy product API (``bfp_matvec``, ``discrete_matvec``).
    """

    REQUIRED = ("bfp_matvec", "discrete_matvec", "grand_samples", "grand_seed", "write_reg")

    def __init__(self, accel, *, column=None, disc_lanes=None, disc_acc_width=None,
                 grand_lanes=None, batched=True, host_grand=None):
        missing = [name for name in self.REQUIRED if not hasattr(accel, name)]
        if missing:
            raise NotImplementedError(f"The driver lacks {', '.join(missing)}")
        self.accel = accel
        d = getattr(accel, "design", None)
        if column is None and d is not None:
            column = ColumnModel(lanes=d.matrix_lanes, block=d.block, max_blocks=d.max_blocks,
                                 frac_bits=d.frac_bits, rand_bits=d.rand_bits)
        self.column = column or ColumnModel()
        self.disc_lanes = disc_lanes or (d.matrix_lanes if d is not None else 4)
        self.disc_acc_width = disc_acc_width or (d.disc_acc_width if d is not None else 16)
        self.grand_lanes = grand_lanes or (d.lanes if d is not None else 2)
        # Batches through the driver's layer programs when it has them (weights loaded once
        # per product), else one driver call per vector.
        self._batched = batched and hasattr(accel, "load_network") and \
            hasattr(accel, "_run_words")
        if host_grand is None:
            has_engine = getattr(accel, "has_engine", None)
            host_grand = has_engine is not None and not has_engine("grand")
        self.host_grand = bool(host_grand)
        self._host = GoldenBackend(self.column, grand_lanes=self.grand_lanes) \
            if self.host_grand else None

    def seed_rounding(self, seed):
        regs = RoundingPRNG(seed, self.column.rand_bits).registers
        for name in ("PRNG_SEED0", "PRNG_SEED1", "PRNG_SEED2", "PRNG_SEED3"):
            self.accel.write_reg(name, regs[name])

    def seed_grand(self, seed):
        if self.host_grand:
            self._host.seed_grand(seed)
        else:
            self.accel.grand_seed(seed, mode="normal")

    def grand(self, n):
        if self.host_grand:
            return self._host.grand(n)
        return np.asarray(self.accel.grand_samples(int(n)), dtype=np.float64)

    def _batch(self, layer, words):
        """Run one-layer network ``layer`` on element words ``(V, K)``: weights loaded once,
        the samples in order (one MATVEC / DMATVEC each) in as few RUNs as fit."""
        from lowbit.sim.program import InputQuant
        self.accel.load_network([layer], quantise_input=InputQuant("host"))
        out = self.accel._run_words(np.asarray(words))
        return np.asarray(out.m, np.int64), np.asarray(out.e, np.int64)

    def bfp_matvec(self, w_m, w_e, x_m, x_e, *, bias_m=None, bias_e=None, width=8,
                   rounding="nearest"):
        from lowbit.sim.network import BFPDense, block_exponents, pack_elements
        rows = len(w_m)
        if self._batched:
            layer = BFPDense(w_m, w_e, bias_m, bias_e, width=width, rounding=rounding,
                             exp_mode="max")
            b = self.column.block
            e = np.stack([block_exponents(row, b, np.shape(x_m)[1]) for row in x_e])
            return self._batch(layer, pack_elements(x_m, e))
        n = self.column.lanes
        out_m = np.zeros((len(x_m), rows), np.int64)
        out_e = np.zeros((len(x_m), rows), np.int64)
        for i in range(len(x_m)):
            m, e = self.accel.bfp_matvec(w_m, w_e, x_m[i], x_e[i], bias_m=bias_m,
                                         bias_e=bias_e, width=width, rounding=rounding,
                                         exp_mode="max")
            e = np.asarray(e, np.int64).reshape(-1)
            if e.size == 1:
                e = np.full(rows, e[0])
            elif e.size != rows:          # one exponent per tile
                e = np.repeat(e, n)[:rows]
            out_m[i] = np.asarray(m, np.int64).reshape(-1)[:rows]
            out_e[i] = e
        return out_m, out_e

    def discrete_matvec(self, w_codes, x_m, *, book, bias=None, shift=0):
        from lowbit.sim.network import DiscreteDense, pack_elements
        if self._batched:
            layer = DiscreteDense(np.asarray(w_codes), book, bias=bias, shift=shift,
                                  acc_width=self.disc_acc_width)
            return self._batch(layer, pack_elements(np.clip(x_m, -128, 127), 0))[0]
        out = np.zeros((len(x_m), len(w_codes)), np.int64)
        for i in range(len(x_m)):
            m = self.accel.discrete_matvec(w_codes, x_m[i], book=book, bias=bias, shift=shift)
            m = m[0] if isinstance(m, tuple) else m
            out[i] = np.asarray(m, np.int64).reshape(-1)[:len(w_codes)]
        return out


def discrete_dense_batch(w_codes, x_m, *, book, bias=None, shift=0, acc_width=16, lanes=4):
    """:func:`lowbit.sim.network.discrete_dense` (no table) for a batch ``x_m`` of shape ``(V, K)``.

    Returns the ``(V, R)`` output codes ``y`` (int64).
    """
    w = np.asarray(w_codes, np.int64)
    x = np.clip(np.asarray(x_m, np.int64), -127, 127)
    fmt = SMFormat(8, 0)
    acc = discrete_dot(fmt.from_int(x)[:, None, :], w[None, :, :], book, fmt,
                       acc_width=acc_width, lanes=lanes)
    v = SMFormat(acc_width, 0).to_int(acc)
    if bias is not None:
        lim = (1 << (acc_width - 1)) - 1
        v = np.clip(v + np.asarray(bias, np.int64), -lim, lim)
    if shift:
        v = (v + (1 << (shift - 1))) >> shift
    return np.clip(v, -127, 127)


# -- precision policies ----------------------------------------------------------------------

class FixedPolicy:
    """The same :class:`lowbit.sim.schedule.Widths` for every layer and epoch."""

    def __init__(self, widths):
        self._w = widths if isinstance(widths, Widths) else Widths(*widths)

    def widths(self, layer, epoch, step=None):
        return self._w

    def observe(self, layer, kind, error):
        pass

    def end_step(self, accuracy, loss):
        pass

    def end_epoch(self, epoch):
        return []


class MixedPolicy:
    """Seed 004: schedule (per layer, per epoch, per step) with controllers on top.

    The widths of a layer at a step are ``max(schedule, threshold controller)`` per kind,
    then moved by the step controller's offset (when there is one, clamped to 2..8).

    Parameters
    ----------
    schedule : lowbit.sim.schedule.PrecisionSchedule
    controller : lowbit.sim.schedule.ThresholdController
        Keys ``(layer, "a")`` and ``(layer, "w")``; fed once per epoch.
    step_controller : lowbit.sim.schedule.StepController, optional
        Fed the batch accuracy and loss after every step (¶[0074]).

    Raises
    ------
    ValueError
        From :meth:`widths`, when the schedule chooses float32 for a layer: the MLP trainer
        runs every layer on the column (float32 per gate is :mod:`lowbit.sim.gru`'s).
    """

    def __init__(self, schedule, controller, step_controller=None):
        self.schedule = schedule
        self.controller = controller
        self.step_controller = step_controller
        self._errors = {}

    def widths(self, layer, epoch, step=None):
        s = self.schedule.widths(layer, epoch, step)
        if s.is_float:
            raise ValueError(f"Layer {layer}: the MLP trainer runs every layer on the BFP "
                             f"column, not {s}")
        out = Widths(*(max(s[k], self.controller.width((layer, k))) for k in "aw"))
        if self.step_controller is not None:
            out = self.step_controller.adjust(out)
        return out

    def end_step(self, accuracy, loss):
        """Feed one step's batch accuracy and loss to the step controller (if any)."""
        if self.step_controller is not None:
            self.step_controller.update(accuracy, loss)

    def observe(self, layer, kind, error):
        """Record the quantisation error of ``(layer, kind)`` measured in this epoch."""
        self._errors[(layer, kind)] = error

    def end_epoch(self, epoch):
        """Feed the epoch's errors to the controller; returns ``[(key, error, width)]``."""
        out = [(key, err, self.controller.update(key, err))
               for key, err in sorted(self._errors.items())]
        self._errors = {}
        return out


# -- configuration -----------------------------------------------------------------------------

@dataclasses.dataclass
class TrainConfig:
    """One training run.

    Parameters
    ----------
    variant : str
        One of :data:`VARIANTS`.
    hidden : tuple of int
        Hidden layer sizes (multiples of the column's block size).
    epochs, batch : int
        Epochs; samples per step (a multiple of the block size).
    lr, momentum : float
        Momentum SGD on the master copy; the learning rate follows a cosine decay over the
        epochs, ``lr · (1 + cos(π · epoch / epochs)) / 2``.
    init_scale : float
        Weight init ``init_scale · sqrt(2 / fan_in) · grand`` (He init from the grand unit).
    seed : int
        Run seed (grand unit, rounding PRNG, host generator, shuffling).
    policy : FixedPolicy or MixedPolicy or None
        Widths (BFP variants).
    rounding : {"nearest", "stochastic"}
        BFP rounding mode of the backward pass and the weight gradients.
    forward_rounding : {"nearest", "stochastic"} or None
        BFP rounding mode of the forward pass (None: ``rounding``).
    master_bits : int or None
        None: float64 master copy. An integer ``M``: there is no high-precision copy, the
        weights are *stored* as BFP blocks of ``M``-bit mantissas (block ``B`` along ``K``,
        the forward pass's blocks) and the biases as ``M``-bit BFP with one block per element.
        The initial weights are rounded into that format to nearest (the same start for every
        rounding mode); every update ``W ← W − lr·v`` is rounded back into it with
        ``rounding`` (stochastic: ``R`` random bits per element from the host generator). The
        momentum buffer ``v`` stays float64.
    book : lowbit.sim.discrete.CodeBook or None
        Weight (and gradient) code book of the discrete variant (default
        :data:`DISCRETE_BOOK`).
    """
    variant: str = "bfp8"
    hidden: tuple = (32, 32)
    epochs: int = 10
    batch: int = 32
    lr: float = 0.05
    momentum: float = 0.9
    init_scale: float = 1.0
    seed: int = 1
    policy: object = None
    rounding: str = "nearest"
    forward_rounding: str | None = None
    master_bits: int | None = None
    book: CodeBook | None = None


def mixed_policy(epochs, layers):
    """The default seed-004 policy for ``layers`` weight layers over ``epochs`` epochs.

    Schedule: epochs start at "a4w4", move to "a5w5" after a quarter and "a6w6" after half of
    the run; the input and output layers have "a8w8" combined by the mean (so 6, 7, 7 bits);
    controller thresholds 0.03 (lower) and 0.12 (upper) on the relative RMS error.
    """
    e = max(epochs, 1)
    schedule = PrecisionSchedule("a6w6", epochs={0: "a4w4", e // 4 or 1: "a5w5",
                                                 e // 2 or 1: "a6w6"},
                                 layers={0: "a8w8", layers - 1: "a8w8"}, combine="mean")
    initial = {(layer, k): schedule.widths(layer, 0)[k] for layer in range(layers)
               for k in "aw"}
    controller = ThresholdController(initial, low=0.03, high=0.12)
    return MixedPolicy(schedule, controller)


#: Largest learning rate :func:`check_config` accepts (the variants use 0.05 to 0.2; far larger
#: rates only diverge).
MAX_LR = 10.0
#: Largest hidden layer :func:`check_config` accepts (a device's column bounds it further:
#: :class:`Trainer` checks the reduction lengths against it).
MAX_HIDDEN = 4096


def _is_int(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_real(value):
    return isinstance(value, (int, float, np.integer, np.floating)) and \
        not isinstance(value, (bool, np.bool_))


def check_config(cfg):
    """Check the options of a :class:`TrainConfig` (what ``lowbit train`` checks of its options).

    ``hidden``: one or more layer sizes, integers 1..:data:`MAX_HIDDEN`; ``epochs``, ``batch``:
    integers of at least 1; ``lr``: finite, in (0, :data:`MAX_LR`]; ``momentum``: finite, in
    [0, 1); ``init_scale``: finite and positive; ``seed``: an integer 0..2^64-1 (it seeds the
    64-bit grand and rounding generators). A device's limits (block size, reduction length) are
    checked by :class:`Trainer` against its column.

    Raises
    ------
    ValueError
        Naming the option and the value.
    """
    hidden = cfg.hidden
    if not isinstance(hidden, (tuple, list)) or not hidden:
        raise ValueError(f"Hidden layer sizes must be a non-empty sequence of integers, not "
                         f"{hidden!r}")
    for h in hidden:
        if not _is_int(h) or not 1 <= h <= MAX_HIDDEN:
            raise ValueError(f"Hidden layer sizes must be integers between 1 and {MAX_HIDDEN}, "
                             f"not {h!r}")
    for name, value in (("Epochs", cfg.epochs), ("Batch size", cfg.batch)):
        if not _is_int(value) or value < 1:
            raise ValueError(f"{name} must be an integer of at least 1, not {value!r}")
    if not _is_real(cfg.lr) or not math.isfinite(cfg.lr) or not 0 < cfg.lr <= MAX_LR:
        raise ValueError(f"Learning rate must be a finite number in (0, {MAX_LR:g}], not "
                         f"{cfg.lr!r}")
    if not _is_real(cfg.momentum) or not math.isfinite(cfg.momentum) or \
            not 0 <= cfg.momentum < 1:
        raise ValueError(f"Momentum must be a finite number in [0, 1), not {cfg.momentum!r}")
    if not _is_real(cfg.init_scale) or not math.isfinite(cfg.init_scale) or \
            not cfg.init_scale > 0:
        raise ValueError(f"Init scale must be a finite positive number, not {cfg.init_scale!r}")
    if not _is_int(cfg.seed) or not 0 <= cfg.seed < 1 << 64:
        raise ValueError(f"Seed must be an integer between 0 and 2^64-1, not {cfg.seed!r}")
    return cfg


def variant_config(variant, **overrides):
    """The :class:`TrainConfig` of a named variant (:data:`VARIANTS`), with overrides.

    Raises
    ------
    ValueError
        For an unknown variant, an unknown option, or an option value
        :func:`check_config` rejects.
    """
    if variant not in VARIANTS:
        raise ValueError(f"Variant must be one of {', '.join(VARIANTS)}, not {variant!r}")
    cfg = TrainConfig(variant=variant)
    # Learning rates: 0.1 for discrete; for the BFP-4-storage pair the value tuned for each on
    # the validation split (scripts/train_digits.py --tune-lr): nearest needs larger steps.
    cfg.lr = {"discrete": 0.1, "bfp4-nearest": 0.2, "bfp4-stochastic": 0.05}.get(variant, 0.05)
    for key, value in overrides.items():
        if not hasattr(cfg, key):
            raise ValueError(f"Unknown training option {key!r}")
        setattr(cfg, key, value)
    layers = len(cfg.hidden) + 1
    bfp4 = ("bfp4-nearest", "bfp4-stochastic", "bfp4-nearest-f64master",
            "bfp4-stochastic-f64master")
    if cfg.policy is None:
        cfg.policy = {"bfp8": FixedPolicy((8, 8)), **{v: FixedPolicy((4, 4)) for v in bfp4},
                      "mixed": mixed_policy(cfg.epochs, layers)}.get(variant)
    if "rounding" not in overrides:
        cfg.rounding = "stochastic" if variant in ("bfp4-stochastic", "bfp4-stochastic-f64master",
                                                   "mixed", "discrete") else "nearest"
    if "master_bits" not in overrides and variant in ("bfp4-nearest", "bfp4-stochastic"):
        cfg.master_bits = 4
    return check_config(cfg)


# -- training ----------------------------------------------------------------------------------

def host_quantise(x, width, block, rounding="nearest", rand=None, rand_bits=8):
    """The host's BFP conversion of ``x`` (V, n) along the last axis for a column product.

    ``x`` is padded with zeros to a multiple of ``block`` and quantised by
    :func:`lowbit.sim.bfp.quantise` (floor rule) at mantissa width ``width``. Returns
    ``(m, e)``: mantissas shaped like the padded ``x`` and exponents ``(V, n_blocks)``, the
    operands of :meth:`Backend.bfp_matvec`. For stochastic rounding ``rand(shape)`` gives the
    random integers (``rand_bits`` bits).
    """
    x = np.asarray(x, np.float64)
    pad = -x.shape[-1] % block
    if pad:
        x = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, pad)])
    kw = {}
    if rounding == "stochastic":
        kw = dict(rand=rand(x.shape), rand_bits=rand_bits)
    m, e = quantise(x, block=block, width=width, rounding=rounding, **kw)
    return m.reshape(x.shape), e


def _softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(axis=1, keepdims=True)


def _cross_entropy(z, y, n_real):
    """Mean softmax cross-entropy of the first ``n_real`` rows of logits ``z`` (labels ``y``)
    and its gradient with respect to ``z`` (zero for the padding rows)."""
    p = _softmax(z)
    g = p.copy()
    g[np.arange(len(y)), y] -= 1.0
    g[n_real:] = 0.0
    g /= n_real
    loss = -np.sum(np.log(np.maximum(p[np.arange(n_real), y[:n_real]], 1e-300))) / n_real
    return loss, g


def _pow2_scale(amax, top):
    """Least power of two ``s`` with ``amax / s <= top`` (1 for a zero ``amax``)."""
    if not amax > 0:
        return 1.0
    return 2.0 ** math.ceil(math.log2(amax / top))


class Trainer:
    """Runs one :class:`TrainConfig` on a backend (``None`` for the float64 variant).

    Members
    -------
    weights, biases : list of numpy.ndarray
        The float64 master copy.
    history : list of dict
        Per epoch: ``epoch``, ``test_acc``, ``train_loss``, ``widths`` (per layer),
        ``controller`` (decisions), ``seconds``.
    """

    def __init__(self, config, backend=None, data=None):
        check_config(config)
        self.cfg = config
        self.backend = backend
        if config.variant != "float64" and backend is None:
            raise ValueError(f"Variant {config.variant!r} needs a backend")
        self.data = load_digits_split() if data is None else data
        self.sizes = (64, *config.hidden, 10)
        self.rng = np.random.default_rng(config.seed)
        self.history = []
        self.epoch = 0
        self.steps = 0
        self.step_in_epoch = 0
        self.batch_acc = None
        if backend is not None:
            b = backend.column.block
            if config.batch % b or any(h % b for h in config.hidden):
                raise ValueError(f"Batch and hidden sizes must be multiples of the block size "
                                 f"{b}")
            # Reduction lengths of the column's products: the layer inputs (forward), the
            # batch (weight gradients) and the layer outputs (backward).
            k_max = b * backend.column.max_blocks
            sizes = (("Batch size", config.batch), *(("Hidden layer size", h)
                                                     for h in config.hidden))
            for what, k in sizes if config.variant != "discrete" else ():
                if k > k_max:
                    raise ValueError(f"{what} {k} exceeds the column's longest product, "
                                     f"{k_max} (block {b} x {backend.column.max_blocks} "
                                     f"blocks): the products reduce over it")
            backend.seed_rounding(config.seed)
            backend.seed_grand(config.seed)
        self.book = config.book or DISCRETE_BOOK
        self.weights, self.biases, self.gammas = [], [], []
        source = backend
        if source is None:            # float64: the same grand samples, from the model
            source = GoldenBackend()
            source.seed_grand(config.seed)
        for k, r in zip(self.sizes[:-1], self.sizes[1:], strict=True):
            z = source.grand(r * k)
            w = config.init_scale * math.sqrt(2.0 / k) * np.asarray(z).reshape(r, k)
            # Discrete weights are codes times a per-layer power of two (host bookkeeping).
            self.gammas.append(2.0 ** math.ceil(math.log2(2 * math.sqrt(2.0 / k))))
            if config.variant == "discrete":
                w = np.clip(w, -self.gammas[-1], self.gammas[-1])
            self.weights.append(w)
            self.biases.append(np.zeros(r))
        self.velocity = [(np.zeros_like(w), np.zeros_like(b))
                         for w, b in zip(self.weights, self.biases, strict=True)]
        self._shift_peak = {}
        self._codes = None
        self._errors_pending = None
        if config.variant == "discrete":
            self._draw_codes()
        if config.master_bits and backend is not None:
            self._store(range(len(self.weights)), "nearest")

    # -- host quantisation -----------------------------------------------------------------
    def _host_rand(self, shape):
        r = self.backend.column.rand_bits
        return self.rng.integers(0, 1 << r, size=shape, dtype=np.int64)

    def _q(self, x, width, rounding=None, block=None):
        """Host BFP quantisation of ``x`` (V, n) along the last axis (padded to blocks of
        ``block``, default the column's ``B``)."""
        return host_quantise(x, width, block or self.backend.column.block,
                             rounding or self.cfg.rounding, self._host_rand,
                             self.backend.column.rand_bits)

    def _widths(self, layer):
        return self.cfg.policy.widths(layer, self.epoch, self.step_in_epoch)

    # -- BFP products --------------------------------------------------------------------------
    def _bfp_forward(self, layer, a_m, a_e, *, measure=False, rounding=None):
        wd = self._widths(layer)
        w_m, w_e = self._q(self.weights[layer], wd.w, "nearest")
        b_m, b_e = quantise(self.biases[layer][:, None], block=1, width=wd.w)
        b_m, b_e = b_m.reshape(-1), b_e.reshape(-1)
        rounding = rounding or self.cfg.forward_rounding or self.cfg.rounding
        m, e = self.backend.bfp_matvec(w_m, w_e, a_m, a_e, bias_m=b_m, bias_e=b_e,
                                       width=wd.a, rounding=rounding)
        if measure:
            b = self.backend.column.block
            wq = dequantise(w_m.reshape(len(w_m), -1, b), w_e).reshape(w_m.shape)
            xq = dequantise(a_m.reshape(len(a_m), -1, b), a_e).reshape(a_m.shape)
            ref = xq @ wq.T + np.ldexp(b_m.astype(np.float64), b_e)
            self.cfg.policy.observe(layer, "a", quantisation_error(ref, np.ldexp(m, e)))
            self.cfg.policy.observe(layer, "w", quantisation_error(self.weights[layer], wq))
        return m, e

    def _forward_bfp(self, x, *, measure=False, rounding=None):
        """Forward pass; returns the layer inputs (float, exact) and masks, and the logits."""
        wd0 = self._widths(0)
        a_m, a_e = self._q(x / 16.0, wd0.a, "nearest")
        inputs, masks = [], []
        for layer in range(len(self.weights)):
            b = self.backend.column.block
            inputs.append(dequantise(a_m.reshape(len(a_m), -1, b), a_e).reshape(a_m.shape))
            m, e = self._bfp_forward(layer, a_m, a_e, measure=measure, rounding=rounding)
            if layer == len(self.weights) - 1:
                return inputs, masks, np.ldexp(m.astype(np.float64), e)
            m = np.maximum(m, 0)
            masks.append(m > 0)
            a_m, a_e = self._q(np.ldexp(m.astype(np.float64), e), self._widths(layer).a,
                               "nearest")
        raise AssertionError("unreachable")

    def _step_bfp(self, x, y, n_real):
        measure = self._errors_pending
        self._errors_pending = False
        inputs, masks, z = self._forward_bfp(x, measure=measure)
        loss, g = _cross_entropy(z, y, n_real)
        self.batch_acc = float(np.mean(np.argmax(z[:n_real], axis=1) == y[:n_real]))
        grads = [None] * len(self.weights)
        for layer in reversed(range(len(self.weights))):
            wd = self._widths(layer)
            a = inputs[layer]
            # dW[:, j] = Gᵀ · X[:, j]: the batch is the reduction axis.
            gt_m, gt_e = self._q(g.T, wd.a)
            cols = np.concatenate([a.T, np.ones((1, len(a)))])
            c_m, c_e = self._q(cols, wd.a, "nearest")
            m, e = self.backend.bfp_matvec(gt_m, gt_e, c_m, c_e, width=wd.a,
                                           rounding=self.cfg.rounding)
            d = np.ldexp(m.astype(np.float64), e)
            grads[layer] = (d[:-1].T, d[-1])
            if layer:
                wt_m, wt_e = self._q(self.weights[layer].T, wd.w, "nearest")
                g_m, g_e = self._q(g, wd.a)
                below = self._widths(layer - 1).a
                m, e = self.backend.bfp_matvec(wt_m, wt_e, g_m, g_e, width=below,
                                               rounding=self.cfg.rounding)
                g = np.ldexp(m.astype(np.float64), e) * masks[layer - 1]
        return loss, grads

    # -- float64 -------------------------------------------------------------------------------
    def _forward_float(self, x):
        a = x / 16.0
        inputs, masks = [], []
        for layer, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            inputs.append(a)
            z = a @ w.T + b
            if layer == len(self.weights) - 1:
                return inputs, masks, z
            masks.append(z > 0)
            a = np.maximum(z, 0)
        raise AssertionError("unreachable")

    def _step_float(self, x, y, n_real):
        inputs, masks, z = self._forward_float(x[:n_real])
        p = _softmax(z)
        g = p.copy()
        g[np.arange(n_real), y[:n_real]] -= 1.0
        g /= n_real
        loss = -np.sum(np.log(np.maximum(p[np.arange(n_real), y[:n_real]], 1e-300))) / n_real
        grads = [None] * len(self.weights)
        for layer in reversed(range(len(self.weights))):
            grads[layer] = (g.T @ inputs[layer], g.sum(axis=0))
            if layer:
                g = (g @ self.weights[layer]) * masks[layer - 1]
        return loss, grads

    # -- discrete (seed 001) -----------------------------------------------------------------
    def _draw_codes(self):
        self._codes = [to_codes(w / gamma, self.book, mode="stochastic",
                                rand=self.rng.integers(0, 1 << 16, size=w.shape),
                                rand_bits=16)
                       for w, gamma in zip(self.weights, self.gammas, strict=True)]

    def _shift(self, key, estimate):
        """Requantiser shift of product ``key``: from the previous outputs' peak, else
        ``estimate`` (the float64 magnitude of the accumulator)."""
        peak = self._shift_peak.get(key)
        if peak is None:
            peak = float(estimate)
            self._shift_peak[key] = peak
        return max(0, math.ceil(math.log2(max(peak, 1.0) / 120.0)))

    def _observe_shift(self, key, y, shift):
        top = float(np.abs(y).max(initial=0))
        # A saturated output hides its magnitude: assume twice the range.
        peak = (2 * top if top >= 127 else top) * 2.0 ** shift
        self._shift_peak[key] = max(peak, 0.9 * self._shift_peak.get(key, 0.0))

    def _dmatvec(self, key, codes, x_m, bias=None):
        vals = self.book.values()[codes]
        est = np.abs(np.asarray(x_m, np.float64) @ vals.T).max(initial=0)
        shift = self._shift(key, est)
        y = self.backend.discrete_matvec(codes, x_m, book=self.book, bias=bias, shift=shift)
        self._observe_shift(key, y, shift)
        return y, shift

    def _forward_discrete(self, x, *, train=True):
        a_m = np.minimum(x * 8, 127)
        scale = 2.0 ** -7
        inputs, masks = [], []
        for layer, codes in enumerate(self._codes):
            inputs.append((a_m, scale))
            bias = np.rint(self.biases[layer] / scale).astype(np.int64)
            lim = (1 << (self.backend.disc_acc_width - 1)) - 1
            bias = np.clip(bias, -lim, lim)
            y, shift = self._dmatvec(("fwd", layer), codes, a_m, bias)
            scale = scale * 2.0 ** shift * self.gammas[layer]
            if layer == len(self._codes) - 1:
                return inputs, masks, y * scale
            masks.append(y > 0)
            a_m = np.maximum(y, 0)
        raise AssertionError("unreachable")

    def _step_discrete(self, x, y, n_real):
        inputs, masks, z = self._forward_discrete(x)
        loss, g = _cross_entropy(z, y, n_real)
        grads = [None] * len(self.weights)
        for layer in reversed(range(len(self.weights))):
            a_m, a_scale = inputs[layer]
            # dW = Σ_b g_b·x_bᵀ with the gradient as stochastic codes (seed 001 module 7).
            gs = _pow2_scale(np.abs(g).max(initial=0), 1.0)
            gc = to_codes(g / gs, self.book, mode="stochastic",
                          rand=self.rng.integers(0, 1 << 16, size=g.shape), rand_bits=16)
            ones = np.full((1, len(a_m)), 64)
            cols = np.concatenate([a_m.T, ones])
            d, shift = self._dmatvec(("dw", layer), gc.T.astype(np.int64), cols)
            d = d.astype(np.float64) * 2.0 ** shift * gs
            grads[layer] = (d[:-1].T * a_scale, d[-1] / 64.0)
            if layer:
                # Wᵀ·g on the discrete unit, g as int8 codes (nearest).
                s = _pow2_scale(np.abs(g).max(initial=0), 127.0)
                g_m = np.rint(g / s).astype(np.int64)
                codes_t = np.ascontiguousarray(self._codes[layer].T).astype(np.int64)
                gb, shift = self._dmatvec(("bwd", layer), codes_t, g_m)
                # × f′ on the shift/XOR datapath (seed 001 S9): codes of FPRIME_BOOK.
                fmt = SMFormat(8, 0)
                fcodes = np.where(masks[layer - 1], 0, 1)
                gb = fmt.to_int(ew_mul(fmt.from_int(gb), fcodes, FPRIME_BOOK, fmt))
                g = gb * s * 2.0 ** shift * self.gammas[layer]
        return loss, grads

    # -- loop ------------------------------------------------------------------------------------
    def _update(self, grads):
        lr = self.cfg.lr * (1 + math.cos(math.pi * self.epoch / max(self.cfg.epochs, 1))) / 2
        mu = self.cfg.momentum
        for layer, (dw, db) in enumerate(grads):
            vw, vb = self.velocity[layer]
            vw *= mu
            vw += dw
            vb *= mu
            vb += db
            self.weights[layer] -= lr * vw
            self.biases[layer] -= lr * vb
            if self.cfg.variant == "discrete":
                g = self.gammas[layer]
                np.clip(self.weights[layer], -g, g, out=self.weights[layer])
        if self.cfg.master_bits and self.backend is not None:
            self._store(range(len(grads)), self.cfg.rounding)
        if self.cfg.variant == "discrete":
            self._draw_codes()

    def _store(self, layers, rounding):
        """Round the weights and biases of ``layers`` into their stored format (``master_bits``
        BFP: blocks of ``B`` along ``K``, one block per bias) with ``rounding``."""
        bits = self.cfg.master_bits
        for layer in layers:
            w = self.weights[layer]
            m, e = self._q(w, bits, rounding)
            b = self.backend.column.block
            self.weights[layer] = dequantise(m.reshape(len(m), -1, b), e).reshape(w.shape)
            m, e = self._q(self.biases[layer][:, None], bits, rounding, block=1)
            self.biases[layer] = dequantise(m.reshape(-1, 1, 1), e).reshape(-1)

    def step(self, x, y):
        """One training step on a batch (padded with zero samples to the batch size)."""
        n_real = len(x)
        if self.cfg.variant != "float64" and n_real % self.backend.column.block:
            pad = -n_real % self.backend.column.block
            x = np.concatenate([x, np.zeros((pad, x.shape[1]), x.dtype)])
            y = np.concatenate([y, np.zeros(pad, y.dtype)])
        if self.cfg.variant == "float64":
            loss, grads = self._step_float(x, y, n_real)
        elif self.cfg.variant == "discrete":
            loss, grads = self._step_discrete(x, y, n_real)
        else:
            loss, grads = self._step_bfp(x, y, n_real)
        self._update(grads)
        if self.cfg.policy is not None and self.batch_acc is not None:
            self.cfg.policy.end_step(self.batch_acc, float(loss))
        self.steps += 1
        return loss

    def predict(self, x, chunk=256):
        """Class predictions with the variant's arithmetic (BFP: nearest output rounding).

        Leaves the training state alone (no random draws; the discrete shift predictor is
        restored), so evaluating never changes the run.
        """
        peaks = dict(self._shift_peak)
        out = []
        for k in range(0, len(x), chunk):
            xb = x[k:k + chunk]
            if self.cfg.variant == "float64":
                z = self._forward_float(xb)[2]
            else:
                n = len(xb)
                pad = -n % self.backend.column.block
                xp = np.concatenate([xb, np.zeros((pad, xb.shape[1]), xb.dtype)])
                if self.cfg.variant == "discrete":
                    z = self._forward_discrete(xp)[2][:n]
                else:
                    z = self._forward_bfp(xp, rounding="nearest")[2][:n]
            out.append(np.argmax(z, axis=1))
        self._shift_peak = peaks
        return np.concatenate(out)

    def accuracy(self, x, y):
        return float(np.mean(self.predict(x) == y))

    def run_epoch(self, limit=None):
        """One epoch over the (shuffled) training set; ``limit`` caps the number of steps."""
        import time
        t0 = time.perf_counter()
        x_te, y_te = self.data[2:]
        if self.cfg.policy is not None:
            self._errors_pending = True
        losses = epoch_steps(self, limit)
        widths = None
        decisions = []
        if self.cfg.policy is not None:
            widths = [str(self._widths(layer)) for layer in range(len(self.weights))]
            decisions = [(list(key), err, w) for key, err, w in
                         self.cfg.policy.end_epoch(self.epoch)]
        acc = self.accuracy(x_te, y_te)
        self.history.append({"epoch": self.epoch, "test_acc": acc,
                             "train_loss": float(np.mean(losses)), "widths": widths,
                             "controller": decisions,
                             "seconds": time.perf_counter() - t0})
        self.epoch += 1
        return self.history[-1]


def epoch_steps(trainer, limit=None):
    """The training steps of one epoch: ``trainer.step(x, y)`` on batches of
    ``trainer.cfg.batch`` of the training set (``trainer.data[:2]``) in the order of one
    permutation drawn from ``trainer.rng``, with ``trainer.step_in_epoch`` the step's index;
    ``limit`` caps the steps. Returns the steps' losses."""
    x_tr, y_tr = trainer.data[:2]
    order = trainer.rng.permutation(len(x_tr))
    losses = []
    for s, k in enumerate(range(0, len(order), trainer.cfg.batch)):
        if limit is not None and s >= limit:
            break
        trainer.step_in_epoch = s
        idx = order[k:k + trainer.cfg.batch]
        losses.append(trainer.step(x_tr[idx], y_tr[idx]))
    return losses


def train(config, backend=None, *, data=None, progress=None, limit=None):
    """Train ``config`` for ``config.epochs`` epochs; returns the :class:`Trainer`.

    ``progress(record)`` is called after every epoch; ``limit`` caps the steps per epoch.
    """
    trainer = Trainer(config, backend, data)
    for _ in range(config.epochs):
        rec = trainer.run_epoch(limit)
        if progress is not None:
            progress(rec)
    return trainer

