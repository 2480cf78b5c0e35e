"""GRU with per-gate BFP widths and data types (lowbit.sim.gru; seed 004 Examples 6, 15-20)."""

import numpy as np
import pytest

from lowbit.sim.gru import GATES, GRU_SCHEDULES, GRUConfig, GRUTrainer, digit_sequences, train_gru
from lowbit.sim.schedule import FLOAT32, PrecisionSchedule, StepController, Widths
from lowbit.sim.train import GoldenBackend, RoundingPRNG, load_digits_split


@pytest.fixture(scope="module")
def data():
    x_tr, y_tr, x_te, y_te = load_digits_split()
    return x_tr[:320], y_tr[:320], x_te[:200], y_te[:200]


class RecordingBackend(GoldenBackend):
    """The golden backend, recording the operands of every column product."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def bfp_matvec(self, w_m, w_e, x_m, x_e, **kw):
        self.seen.append((int(np.abs(w_m).max()), int(np.abs(x_m).max()), kw["width"]))
        return super().bfp_matvec(w_m, w_e, x_m, x_e, **kw)


def test_digit_sequences_are_rows():
    x = np.arange(2 * 64).reshape(2, 64) % 17
    xs = digit_sequences(x)
    assert xs.shape == (8, 2, 8)
    for t in range(8):
        assert np.array_equal(xs[t, 1], x[1, 8 * t:8 * t + 8] / 16.0)
    with pytest.raises(ValueError, match=r"\(n, 64\), not \(2, 63\)"):
        digit_sequences(x[:, :63])


def test_float32_gradients_match_finite_differences(data):
    """BPTT of the cell against central differences of the loss (float32 products)."""
    tr = GRUTrainer(GRUConfig(schedule="float32", hidden=6, epochs=1, batch=4, seed=3),
                    data=data)
    xs, y = digit_sequences(data[0][:4]), data[1][:4]
    _, _, grads = tr.gradients(xs, y)
    rng = np.random.default_rng(0)
    for name in ("W_z", "W_r", "W_n", "b_z", "b_n", "W_o", "b_o"):
        p = tr.params[name]
        for idx in [tuple(rng.integers(0, s) for s in p.shape) for _ in range(3)]:
            old = p[idx]
            eps = 1e-2
            p[idx] = old + eps
            up = tr.gradients(xs, y)[0]
            p[idx] = old - eps
            down = tr.gradients(xs, y)[0]
            p[idx] = old
            assert grads[name][idx] == pytest.approx((up - down) / (2 * eps), abs=2e-3,
                                                     rel=0.05), (name, idx)


def test_per_gate_widths_are_applied(data):
    """Every product of a gate sees mantissas of that gate's widths: the weight (or, for the
    weight gradient, the gradient matrix) mantissas of a BFP-W block lie in
    [2^(W-2), 2^(W-1) - 1] (floor rule), so the largest one pins W; the vector operand fits
    the activation width; the output width is the activation width."""
    widths = {"z": Widths(4, 4), "r": Widths(5, 3), "n": Widths(6, 6), "o": Widths(7, 8)}
    sched = PrecisionSchedule("a7w8", gates={g: widths[g] for g in GATES})
    be = RecordingBackend()
    tr = GRUTrainer(GRUConfig(schedule=sched, hidden=16, epochs=1, batch=32), be, data)
    tr.trace = []
    tr.step(data[0][:32], data[1][:32])
    assert len(tr.trace) == len(be.seen) == 8 * 3 + 1 + 8 * 3 + 1 + 4
    seen = {}
    for (gate, phase, wd), (w_max, x_max, out_width) in zip(tr.trace, be.seen, strict=True):
        assert wd == widths[gate]
        wbits = wd.a if phase == "dw" else wd.w
        assert 2 ** (wbits - 2) <= w_max <= 2 ** (wbits - 1) - 1, (gate, phase, w_max)
        assert x_max <= 2 ** (wd.a - 1) - 1, (gate, phase, x_max)
        assert out_width == wd.a
        seen.setdefault((gate, phase), set()).add(w_max.bit_length() + 1)
    assert set(seen) == {(g, p) for g in (*GATES, "o") for p in ("fwd", "bwd", "dw")}
    assert seen[("r", "fwd")] == {3} and seen[("n", "fwd")] == {6} and seen[("o", "fwd")] == {8}


def test_float32_gate_runs_on_the_host(data):
    """¶[0059]: a gate whose entry is float32 never reaches the column; the others do."""
    be = RecordingBackend()
    sched = PrecisionSchedule("a8w8", gates={"n": "float32", "z": "a4w4", "r": "a4w4"})
    tr = GRUTrainer(GRUConfig(schedule=sched, hidden=16, epochs=1, batch=32), be, data)
    tr.trace = []
    tr.step(data[0][:32], data[1][:32])
    assert tr.widths("n") == FLOAT32
    float_calls = [t for t in tr.trace if t[2].is_float]
    assert {t[0] for t in float_calls} == {"n"} and len(float_calls) == 8 + 8 + 1
    assert tr.calls == {"bfp": len(be.seen), "float32": len(float_calls)}
    assert len(be.seen) == len(tr.trace) - len(float_calls)
    # The float32 choice changes the run: the same start with n at BFP-4 ends elsewhere.
    other = GRUTrainer(GRUConfig(schedule=PrecisionSchedule("a8w8", gates={
        "n": "a4w4", "z": "a4w4", "r": "a4w4"}), hidden=16, epochs=1, batch=32), data=data)
    assert np.array_equal(other.params["W_n"], GRUTrainer(
        GRUConfig(schedule=sched, hidden=16, epochs=1, batch=32), data=data).params["W_n"])
    other.step(data[0][:32], data[1][:32])
    assert not np.allclose(other.params["W_n"], tr.params["W_n"])
    everything = GRUTrainer(GRUConfig(schedule="float32", hidden=16, batch=32),
                            RecordingBackend(), data)
    everything.step(data[0][:32], data[1][:32])
    assert everything.backend.seen == [] and everything.calls["bfp"] == 0


def test_per_gate_schedule_learns_above_chance(data):
    """A tiny run of the seed-004 per-gate schedule (candidate a6w6, z and r a5w5) learns."""
    tr = train_gru(GRUConfig(schedule="gates-n6-zr5", hidden=16, epochs=3, batch=32,
                             lr=0.3), data=data)
    accs = [h["test_acc"] for h in tr.history]
    assert accs[-1] > 0.35, accs                      # chance is 0.1
    assert tr.history[-1]["widths"] == {"z": "a5w5", "r": "a5w5", "n": "a6w6", "o": "a8w8"}
    assert tr.history[-1]["train_loss"] < tr.history[0]["train_loss"]
    again = train_gru(GRUConfig(schedule="gates-n6-zr5", hidden=16, epochs=1, batch=32,
                                lr=0.3), data=data)
    assert again.history[0]["test_acc"] == accs[0]    # deterministic


def test_widths_change_within_an_epoch(data):
    """Per-step precision in the training loop: the schedule's step table and the step
    controller's offset change the widths the column sees between steps of one epoch."""
    be = RecordingBackend()
    sched = PrecisionSchedule("a8w8", steps={0: "a6w6", 2: "a4w4"})
    tr = GRUTrainer(GRUConfig(schedule=sched, hidden=16, epochs=1, batch=32), be, data)
    tr.trace = []
    tr.run_epoch(limit=3)
    fwd = [wd for gate, phase, wd in tr.trace if gate == "z" and phase == "fwd"]
    # 8 forward products of z per step (and 8 more per evaluation chunk, at step 2's widths).
    assert fwd[:16] == [Widths(6, 6)] * 16 and fwd[16:24] == [Widths(4, 4)] * 8
    # A controller that relaxes after every calm decision lowers the widths step by step.
    ctl = StepController(warmup=1, cooldown=0, patience=1, min_offset=-3, accuracy_drop=1,
                         speed_drop=None)
    tr = GRUTrainer(GRUConfig(schedule="bfp8", hidden=16, epochs=1, batch=32,
                              step_controller=ctl), data=data)
    tr.trace = []
    tr.run_epoch(limit=5)
    per_step = [wd.a for gate, phase, wd in tr.trace if gate == "o" and phase == "fwd"][:5]
    assert per_step == [8, 8, 7, 6, 5]
    assert [h[5] for h in ctl.history] == ["warmup"] + ["relax"] * 4   # clamped at -3
    assert tr.history[0]["offset"] == -3


@pytest.mark.parametrize("overrides, error, message", [
    (dict(schedule="bfp9"), ValueError, "Schedule must be one of .*, not 'bfp9'"),
    (dict(schedule=8), TypeError, "Schedule must be a name or a PrecisionSchedule, not 8"),
    (dict(hidden=0), ValueError, "Hidden size must be between 1 and 256, not 0"),
    (dict(hidden=16.0), TypeError, "Hidden size must be an integer, not 16.0"),
    (dict(batch=40), ValueError, "Batch size 40: .* 320 values, more than .* 256"),
    (dict(lr=0), ValueError, "Learning rate out of range: 0"),
    (dict(momentum="0.9"), TypeError, "Momentum must be a real number, not '0.9'"),
    (dict(rounding="up"), ValueError, "Rounding must be 'nearest' or 'stochastic', not 'up'"),
    (dict(step_controller=1), TypeError, "Step controller must be a StepController, not 1"),
    (dict(seed=-1), ValueError, "Seed must be between 0 and .*, not -1"),
])
def test_config_validation(overrides, error, message, data):
    with pytest.raises(error, match=message):
        GRUTrainer(GRUConfig(**overrides), data=data)


def test_named_schedules():
    assert GRU_SCHEDULES[:2] == ("float32", "bfp8")
    tr = GRUTrainer.__new__(GRUTrainer)
    for name in GRU_SCHEDULES:
        tr.cfg = GRUConfig(schedule=name)
        from lowbit.sim.gru import _check
        _check(tr.cfg)
        tr.epoch = tr.step_in_epoch = 0
        assert str(tr.widths("o")) in ("float32", "a8w8")
    cfg = _check(GRUConfig(schedule="gates-n6-zr5"))
    assert [str(cfg.schedule.widths(0, 0, gate=g)) for g in GATES] == ["a5w5", "a5w5", "a6w6"]


def test_stochastic_rounding_is_reproducible(data):
    """With stochastic rounding the column's outputs draw the rounding PRNG and the host's
    gradient conversions its generator: the same seed gives the same weights, another seed
    other weights."""
    def one(seed, rounding="stochastic"):
        tr = GRUTrainer(GRUConfig(schedule="gates-n6-zr4", hidden=16, batch=32, seed=seed,
                                  rounding=rounding), data=data)
        tr.step(data[0][:32], data[1][:32])
        return tr
    a, b, nearest = one(1), one(1), one(1, "nearest")
    assert np.array_equal(a.params["W_z"], b.params["W_z"])
    assert not np.array_equal(a.params["W_z"], nearest.params["W_z"])
    fresh = RoundingPRNG(1, a.backend.column.rand_bits).draw(4)
    assert not np.array_equal(a.backend._prng.draw(4), fresh)          # the column drew
    assert np.array_equal(nearest.backend._prng.draw(4), fresh)         # nearest did not
    assert a.rng.integers(1 << 30) != nearest.rng.integers(1 << 30)     # the host drew
