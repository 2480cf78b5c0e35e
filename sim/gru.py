"""A GRU trained with per-gate BFP widths on the accelerator's arithmetic (seed 004, issue #24).

Seed 004's Examples 6 and 15-20 give the gates of an LSTM or GRU their own bit widths (the
inputs of gate 1 processed at width 1, of gate 2 at width 2; Example 16: the LSTM's ``j``
gate — the input modulation — at a width different from the others; Example 20: GRUs too),
and ¶[0059] lets a layer or gate choose its data type (BFP at a width, or float32). This
module trains a one-layer GRU that way on a sequence task made from scikit-learn's bundled
8×8 digits: each image is read row by row, a sequence of ``T = 8`` steps of 8 features
(pixels / 16), and the digit is classified from the last hidden state. Pure NumPy.

Cell (Cho et al.'s original GRU, the reset gate applied before the candidate's product)::

    u_t = [x_t, h_(t-1)]
    z_t = sigmoid(W_z · u_t + b_z)                  update gate        (gate "z")
    r_t = sigmoid(W_r · u_t + b_r)                  reset gate         (gate "r")
    n_t = tanh(W_n · [x_t, r_t ⊙ h_(t-1)] + b_n)    candidate          (gate "n", the j gate)
    h_t = (1 - z_t) ⊙ n_t + z_t ⊙ h_(t-1)
    logits = W_o · h_T + b_o                         readout            (layer 1, no gate)

Every matrix product of training is one product per gate, run as :mod:`lowbit.sim.train`
runs the MLP's: through :meth:`lowbit.sim.train.Backend.bfp_matvec` (the MAC column's golden
model on :class:`lowbit.sim.train.GoldenBackend`, or a device through
:class:`lowbit.sim.train.DeviceBackend`) with the operands converted on the host by
:func:`lowbit.sim.train.host_quantise` (:func:`lowbit.sim.bfp.quantise`, floor rule, blocks of
the column's ``B`` along the reduction axis). A product of gate ``g`` uses the widths
``Widths(a, w)`` that the schedule gives ``g`` (:meth:`lowbit.sim.schedule.PrecisionSchedule.
widths` with ``layer=0, gate=g``; the readout ``layer=1``): weights at ``w`` (nearest), the
vector operand at ``a``, output width ``a``, exponent selector ``max``:

1. *forward* ``W_g · u`` with the bias path (bias one block per element at ``w``);
2. *backward* ``W_gᵀ · δ``: ``W_gᵀ`` re-blocked along its reduction axis, ``δ`` (the gate's
   pre-activation gradient) at ``a`` with the run's rounding, one product per time step;
3. *weight gradient* ``dW_g = Σ_(t,b) δ_(t,b) · u_(t,b)ᵀ`` with time and batch as the
   reduction axis (``T · V`` ≤ the column's longest product), the matrix ``Δᵀ`` at ``a``
   (run's rounding), the vectors the columns of ``U`` plus an all-ones vector (``db``).

A gate (or the readout, or a whole time) whose schedule entry is ``"float32"`` runs its three
products in float32 on the host instead (operands cast to ``numpy.float32``, float32
accumulation). The element-wise gate arithmetic, the softmax and the update (momentum SGD on a
float64 master copy, cosine learning-rate decay, as the MLP) run on the host in float64.

Per-step precision: with a :class:`lowbit.sim.schedule.StepController` the batch accuracy and
loss of every step are fed to it and its offset moves every BFP width of the next step
(:meth:`~lowbit.sim.schedule.StepController.adjust`); the schedule's step table (step within the
epoch) applies as well.
"""

import dataclasses
import math

import numpy as np

from .schedule import PrecisionSchedule, StepController
from .train import GoldenBackend, _cross_entropy, epoch_steps, host_quantise, load_digits_split

__all__ = ["GATES", "SEQ_LEN", "FEATURES", "GRU_SCHEDULES", "GRUConfig", "GRUTrainer",
           "digit_sequences", "train_gru"]

#: Gate names of the cell (update, reset, candidate).
GATES = ("z", "r", "n")
#: Sequence length and features per step (an 8×8 digit read row by row).
SEQ_LEN, FEATURES = 8, 8


def digit_sequences(x):
    """Digits ``(n, 64)`` (pixels 0..16) as sequences ``(T, n, 8)`` of rows, scaled to 0..1."""
    x = np.asarray(x, np.float64)
    if x.ndim != 2 or x.shape[1] != SEQ_LEN * FEATURES:
        raise ValueError(f"Digits must have shape (n, 64), not {x.shape}")
    return np.ascontiguousarray((x / 16.0).reshape(len(x), SEQ_LEN, FEATURES).transpose(1, 0, 2))


def _schedules():
    """The named schedules of ``scripts/train_gru.py`` (see :data:`GRU_SCHEDULES`)."""
    return {
        "float32": PrecisionSchedule("float32"),
        "bfp8": PrecisionSchedule("a8w8"),
        # Example 16: the j gate (the GRU's candidate n) at another width than the others;
        # ¶[0076]'s 6- and 5-bit mantissas; the readout (output layer) at the 8-bit baseline.
        "gates-n6-zr5": PrecisionSchedule("a8w8", gates={"n": "a6w6", "z": "a5w5",
                                                         "r": "a5w5"}),
        # "or the reverse" (¶13): the candidate below the other gates.
        "gates-n5-zr6": PrecisionSchedule("a8w8", gates={"n": "a5w5", "z": "a6w6",
                                                         "r": "a6w6"}),
        # Pushing lower: 4-bit gates with the candidate at 6, and the candidate alone at 4.
        "gates-n6-zr4": PrecisionSchedule("a8w8", gates={"n": "a6w6", "z": "a4w4",
                                                         "r": "a4w4"}),
        "gates-n4-zr6": PrecisionSchedule("a8w8", gates={"n": "a4w4", "z": "a6w6",
                                                         "r": "a6w6"}),
        # Where it breaks: 3-bit gates around a 6-bit candidate, and the reverse.
        "gates-n6-zr3": PrecisionSchedule("a8w8", gates={"n": "a6w6", "z": "a3w3",
                                                         "r": "a3w3"}),
        "gates-n3-zr6": PrecisionSchedule("a8w8", gates={"n": "a3w3", "z": "a6w6",
                                                         "r": "a6w6"}),
        # Data type per gate (¶[0059]): the candidate in float32, the other gates in BFP-4.
        "gates-nf32-zr4": PrecisionSchedule("a8w8", gates={"n": "float32", "z": "a4w4",
                                                           "r": "a4w4"}),
    }


#: Named schedules: ``float32`` (everything float32), ``bfp8`` (all gates and the readout at
#: a8w8), ``gates-n6-zr5`` (Example 16 / ¶[0076]: candidate ``n`` at a6w6, ``z`` and ``r`` at
#: a5w5, readout a8w8), ``gates-n5-zr6`` (the reverse), ``gates-n6-zr4``, ``gates-n4-zr6``,
#: ``gates-n6-zr3``, ``gates-n3-zr6``, ``gates-nf32-zr4`` (candidate float32, ``z`` and ``r``
#: BFP-4).
GRU_SCHEDULES = tuple(_schedules())


@dataclasses.dataclass
class GRUConfig:
    """One GRU training run.

    Parameters
    ----------
    schedule : str or lowbit.sim.schedule.PrecisionSchedule
        A name of :data:`GRU_SCHEDULES` or a schedule (gates ``"z"``, ``"r"``, ``"n"`` of
        layer 0; the readout is layer 1).
    hidden : int
        Hidden size ``H`` (1..256).
    epochs, batch : int
        Epochs; sequences per step (``T · batch`` must fit the column's longest product).
    lr, momentum : float
        Momentum SGD with cosine decay as :class:`lowbit.sim.train.TrainConfig`.
    seed : int
        Run seed (initial weights from the grand unit's model, shuffling, host random bits).
    rounding : {"nearest", "stochastic"}
        Rounding of the column's outputs and of the host's gradient conversions.
    step_controller : lowbit.sim.schedule.StepController or None
        Per-step width offset from moving averages of batch accuracy and speed.
    """
    schedule: object = "bfp8"
    hidden: int = 32
    epochs: int = 8
    batch: int = 32
    lr: float = 0.2
    momentum: float = 0.9
    seed: int = 1
    rounding: str = "nearest"
    step_controller: StepController | None = None


def _check(cfg):
    if isinstance(cfg.schedule, str):
        table = _schedules()
        if cfg.schedule not in table:
            raise ValueError(f"Schedule must be one of {', '.join(GRU_SCHEDULES)}, not "
                             f"{cfg.schedule!r}")
        cfg.schedule = table[cfg.schedule]
    elif not isinstance(cfg.schedule, PrecisionSchedule):
        raise TypeError(f"Schedule must be a name or a PrecisionSchedule, not {cfg.schedule!r}")
    for name, value, lo, hi in (("Hidden size", cfg.hidden, 1, 256),
                                ("Epochs", cfg.epochs, 1, 10000),
                                ("Batch size", cfg.batch, 1, 4096),
                                ("Seed", cfg.seed, 0, (1 << 64) - 1)):
        if not isinstance(value, int | np.integer) or isinstance(value, bool):
            raise TypeError(f"{name} must be an integer, not {value!r}")
        if not lo <= value <= hi:
            raise ValueError(f"{name} must be between {lo} and {hi}, not {value}")
    for name, value, ok in (("Learning rate", cfg.lr, lambda v: 0 < v <= 10),
                            ("Momentum", cfg.momentum, lambda v: 0 <= v < 1)):
        if isinstance(value, bool) or not isinstance(value, int | float | np.floating):
            raise TypeError(f"{name} must be a real number, not {value!r}")
        if not math.isfinite(value) or not ok(value):
            raise ValueError(f"{name} out of range: {value!r}")
    if cfg.rounding not in ("nearest", "stochastic"):
        raise ValueError(f"Rounding must be 'nearest' or 'stochastic', not {cfg.rounding!r}")
    if cfg.step_controller is not None and not isinstance(cfg.step_controller, StepController):
        raise TypeError(f"Step controller must be a StepController, not "
                        f"{cfg.step_controller!r}")
    return cfg


def _sigmoid(a):
    return 0.5 * (1.0 + np.tanh(0.5 * a))


class GRUTrainer:
    """Trains :class:`GRUConfig` on a backend (default :class:`lowbit.sim.train.GoldenBackend`).

    Members
    -------
    params : dict
        Float64 master copy: ``"W_z"``, ``"b_z"``, ``"W_r"``, ... (``H × (8 + H)``), ``"W_o"``,
        ``"b_o"`` (``10 × H``).
    history : list of dict
        Per epoch: ``epoch``, ``test_acc``, ``train_loss``, ``widths`` (per gate and readout at
        the epoch's last step), ``offset`` (step controller), ``seconds``.
    trace : list or None
        Set to a list to record, per product, ``(gate, phase, widths)`` in call order (gate
        ``"z"``/``"r"``/``"n"``/``"o"``; phase ``"fwd"``/``"bwd"``/``"dw"``).
    calls : dict
        Products issued per data type: ``"bfp"`` (backend calls) and ``"float32"``.

    Raises
    ------
    TypeError, ValueError
        For a bad configuration (naming the value), or a batch whose ``T · batch`` exceeds
        the column's longest product.
    """

    def __init__(self, config, backend=None, data=None):
        self.cfg = _check(config)
        self.backend = GoldenBackend() if backend is None else backend
        col = self.backend.column
        if SEQ_LEN * config.batch > col.block * col.max_blocks:
            raise ValueError(f"Batch size {config.batch}: the weight gradient reduces over "
                             f"time x batch = {SEQ_LEN * config.batch} values, more than the "
                             f"column's longest product, {col.block * col.max_blocks}")
        self.data = load_digits_split() if data is None else data
        self.rng = np.random.default_rng(config.seed)
        self.backend.seed_rounding(config.seed)
        self.backend.seed_grand(config.seed)
        h, k = config.hidden, FEATURES + config.hidden
        self.params = {}
        for g in GATES:
            self.params[f"W_{g}"] = math.sqrt(1.0 / k) * self.backend.grand(h * k).reshape(h, k)
            self.params[f"b_{g}"] = np.zeros(h)
        self.params["W_o"] = math.sqrt(1.0 / h) * self.backend.grand(10 * h).reshape(10, h)
        self.params["b_o"] = np.zeros(10)
        self.velocity = {name: np.zeros_like(p) for name, p in self.params.items()}
        self.history = []
        self.epoch = 0
        self.step_in_epoch = 0
        self.trace = None
        self.calls = {"bfp": 0, "float32": 0}

    # -- widths and products ---------------------------------------------------------------
    def widths(self, gate):
        """Widths (or float32) of ``gate`` (``"z"``, ``"r"``, ``"n"``, or ``"o"`` for the
        readout) at the current epoch and step, after the step controller's offset."""
        layer, name = (1, None) if gate == "o" else (0, gate)
        wd = self.cfg.schedule.widths(layer, self.epoch, step=self.step_in_epoch, gate=name)
        if self.cfg.step_controller is not None:
            wd = self.cfg.step_controller.adjust(wd)
        return wd

    def _host_rand(self, shape):
        return self.rng.integers(0, 1 << self.backend.column.rand_bits, size=shape,
                                 dtype=np.int64)

    def _product(self, gate, phase, w, x, bias=None, *, wd):
        """``x @ w.T (+ bias)`` for ``x`` (V, K), ``w`` (R, K) as one product at ``wd``."""
        if self.trace is not None:
            self.trace.append((gate, phase, wd))
        if wd.is_float:
            self.calls["float32"] += 1
            out = x.astype(np.float32) @ w.T.astype(np.float32)
            if bias is not None:
                out = out + bias.astype(np.float32)
            return out.astype(np.float64)
        self.calls["bfp"] += 1
        col = self.backend.column
        # As the MLP's products: the weight gradient's matrix is the gradient (width a, the
        # run's rounding) and its vectors the layer inputs (nearest); the backward product's
        # vector is the gradient.
        run = self.cfg.rounding
        w_m, w_e = host_quantise(w, wd.a if phase == "dw" else wd.w, col.block,
                                 run if phase == "dw" else "nearest", self._host_rand,
                                 col.rand_bits)
        x_m, x_e = host_quantise(x, wd.a, col.block, run if phase == "bwd" else "nearest",
                                 self._host_rand, col.rand_bits)
        kw = {}
        if bias is not None:
            b_m, b_e = host_quantise(bias[:, None], wd.w, 1)
            kw = dict(bias_m=b_m.reshape(-1), bias_e=b_e.reshape(-1))
        m, e = self.backend.bfp_matvec(w_m, w_e, x_m, x_e, width=wd.a,
                                       rounding=self.cfg.rounding, **kw)
        return np.ldexp(m.astype(np.float64), e)

    # -- forward / backward ----------------------------------------------------------------
    def forward(self, xs, *, keep=False):
        """Logits of sequences ``xs`` (T, V, 8); with ``keep`` also the per-step values."""
        p = self.params
        v = xs.shape[1]
        h = np.zeros((v, self.cfg.hidden))
        wd = {g: self.widths(g) for g in (*GATES, "o")}
        cache = []
        for x in xs:
            u = np.concatenate([x, h], axis=1)
            z = _sigmoid(self._product("z", "fwd", p["W_z"], u, p["b_z"], wd=wd["z"]))
            r = _sigmoid(self._product("r", "fwd", p["W_r"], u, p["b_r"], wd=wd["r"]))
            u2 = np.concatenate([x, r * h], axis=1)
            n = np.tanh(self._product("n", "fwd", p["W_n"], u2, p["b_n"], wd=wd["n"]))
            if keep:
                cache.append((u, u2, h, z, r, n))
            h = (1.0 - z) * n + z * h
        logits = self._product("o", "fwd", p["W_o"], h, p["b_o"], wd=wd["o"])
        return (logits, h, cache, wd) if keep else logits

    def _weight_grad(self, gate, delta, inputs, wd):
        """``(dW, db)`` of ``gate``: ``Σ δ uᵀ`` over the rows of ``delta`` (n, R) and
        ``inputs`` (n, K) — time and batch — as one product."""
        cols = np.concatenate([inputs.T, np.ones((1, len(inputs)))])
        d = self._product(gate, "dw", delta.T, cols, wd=wd)
        return d[:-1].T, d[-1]

    def gradients(self, xs, y):
        """Loss, batch accuracy and gradients (dict like :attr:`params`) of one batch."""
        p = self.params
        n_real = xs.shape[1]
        logits, h_last, cache, wd = self.forward(xs, keep=True)
        loss, g = _cross_entropy(logits, y, n_real)
        acc = float(np.mean(np.argmax(logits, axis=1) == y))
        grads = {}
        grads["W_o"], grads["b_o"] = self._weight_grad("o", g, h_last, wd["o"])
        dh = self._product("o", "bwd", p["W_o"].T, g, wd=wd["o"])
        deltas = {gate: [] for gate in GATES}
        f = FEATURES
        for u, u2, h, z, r, n in reversed(cache):
            da_n = dh * (1.0 - z) * (1.0 - n * n)
            da_z = dh * (h - n) * z * (1.0 - z)
            dh_prev = dh * z
            du2 = self._product("n", "bwd", p["W_n"].T, da_n, wd=wd["n"])
            drh = du2[:, f:]
            da_r = drh * h * r * (1.0 - r)
            dh_prev = dh_prev + drh * r
            du_z = self._product("z", "bwd", p["W_z"].T, da_z, wd=wd["z"])
            du_r = self._product("r", "bwd", p["W_r"].T, da_r, wd=wd["r"])
            dh = dh_prev + du_z[:, f:] + du_r[:, f:]
            deltas["z"].append((da_z, u))
            deltas["r"].append((da_r, u))
            deltas["n"].append((da_n, u2))
        for gate in GATES:
            delta = np.concatenate([d for d, _ in deltas[gate]])
            inputs = np.concatenate([i for _, i in deltas[gate]])
            grads[f"W_{gate}"], grads[f"b_{gate}"] = self._weight_grad(gate, delta, inputs,
                                                                       wd[gate])
        return loss, acc, grads

    # -- loop ------------------------------------------------------------------------------
    def step(self, x, y):
        """One training step on digits ``x`` (V, 64) with labels ``y``; returns the loss."""
        loss, acc, grads = self.gradients(digit_sequences(x), np.asarray(y))
        lr = self.cfg.lr * (1 + math.cos(math.pi * self.epoch / self.cfg.epochs)) / 2
        for name, grad in grads.items():
            v = self.velocity[name]
            v *= self.cfg.momentum
            v += grad
            self.params[name] -= lr * v
        if self.cfg.step_controller is not None:
            self.cfg.step_controller.update(acc, loss)
        return loss

    def predict(self, x, chunk=256):
        """Class predictions with the schedule's arithmetic (nearest rounding, no draws)."""
        rounding, self.cfg.rounding = self.cfg.rounding, "nearest"
        trace, self.trace = self.trace, None
        try:
            return np.concatenate([np.argmax(self.forward(digit_sequences(x[k:k + chunk])),
                                             axis=1) for k in range(0, len(x), chunk)])
        finally:
            self.cfg.rounding, self.trace = rounding, trace

    def accuracy(self, x, y):
        return float(np.mean(self.predict(x) == y))

    def run_epoch(self, limit=None):
        """One epoch over the shuffled training set (``limit`` caps the steps)."""
        import time
        t0 = time.perf_counter()
        x_te, y_te = self.data[2:]
        self.step_in_epoch = 0
        losses = epoch_steps(self, limit)
        widths = {g: str(self.widths(g)) for g in (*GATES, "o")}
        acc = self.accuracy(x_te, y_te)
        ctl = self.cfg.step_controller
        self.history.append({"epoch": self.epoch, "test_acc": acc,
                             "train_loss": float(np.mean(losses)), "widths": widths,
                             "offset": None if ctl is None else ctl.offset,
                             "seconds": time.perf_counter() - t0})
        self.epoch += 1
        return self.history[-1]


def train_gru(config, backend=None, *, data=None, limit=None, progress=None):
    """Train ``config`` for ``config.epochs`` epochs; returns the :class:`GRUTrainer`."""
    trainer = GRUTrainer(config, backend, data)
    for _ in range(config.epochs):
        rec = trainer.run_epoch(limit)
        if progress is not None:
            progress(rec)
    return trainer
