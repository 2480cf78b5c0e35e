"""Mixed-precision schedule and threshold controller (lowbit.sim.schedule, seed 004)."""

import numpy as np
import pytest

from lowbit.sim import quantiser as mq
from lowbit.sim.schedule import (
    FLOAT32,
    PrecisionSchedule,
    StepController,
    ThresholdController,
    Widths,
    parse_widths,
    quantisation_error,
)


def test_parse_widths():
    assert parse_widths("a5w6") == Widths(5, 6)
    assert str(parse_widths((6, 6))) == "a6w6"
    assert parse_widths(Widths(3, 4)).w == 4
    assert parse_widths("a5w6")["a"] == 5
    with pytest.raises(ValueError, match="look like"):
        parse_widths("w6a5")
    with pytest.raises(ValueError, match="between 2 and 8"):
        parse_widths("a9w6")
    with pytest.raises(ValueError, match="between 2 and 8"):
        parse_widths((1, 4))
    with pytest.raises(TypeError):
        parse_widths(56)
    with pytest.raises(TypeError, match="integer"):
        parse_widths((5.0, 6))
    with pytest.raises(KeyError):
        parse_widths("a5w6")["x"]


def test_epoch_schedule_a5w6_then_a6w6():
    """Seed 004 ¶[0065]: epoch 502 at a5w6, epoch 504 at a6w6 (activations raised)."""
    sched = PrecisionSchedule("a8w8", epochs={0: "a5w6", 1: "a6w6"})
    assert sched.widths(layer=3, epoch=0) == Widths(5, 6)
    assert sched.widths(layer=3, epoch=1) == Widths(6, 6)
    assert sched.widths(layer=0, epoch=7) == Widths(6, 6)      # piecewise constant
    late = PrecisionSchedule("a8w8", epochs={2: "a4w4"})
    assert late.widths(0, 1) == Widths(8, 8) and late.widths(0, 2) == Widths(4, 4)


def test_layer_widths_and_combination():
    """Input/output layers more precise than hidden (¶[0061]); Examples 5 and 12 combine."""
    layers = {0: "a8w8", 3: "a7w8"}
    epochs = {0: "a5w6"}
    mean = PrecisionSchedule("a6w6", layers=layers, epochs=epochs, combine="mean")
    assert mean.widths(0, 0) == Widths(7, 7)        # (8+5)/2 rounds up, (8+6)/2
    assert mean.widths(3, 0) == Widths(6, 7)
    assert mean.widths(1, 0) == Widths(5, 6)        # hidden layer: epoch width alone
    nudge = PrecisionSchedule("a6w6", layers=layers, epochs=epochs, combine="nudge")
    assert nudge.widths(0, 0) == Widths(6, 7)       # epoch width moved one towards the layer's
    lower = PrecisionSchedule("a6w6", layers={1: "a3w6"}, epochs=epochs, combine="nudge")
    assert lower.widths(1, 0) == Widths(4, 6)       # decreased, equal stays
    only_layer = PrecisionSchedule("a6w6", layers=layers, epochs=epochs, combine="layer")
    assert only_layer.widths(0, 0) == Widths(8, 8)
    only_epoch = PrecisionSchedule("a6w6", layers=layers, epochs=epochs, combine="epoch")
    assert only_epoch.widths(0, 0) == Widths(5, 6)
    assert PrecisionSchedule("a6w6", layers=layers).widths(3, 9) == Widths(7, 8)
    assert PrecisionSchedule("a6w6").widths(3, 9) == Widths(6, 6)


def test_schedule_validation():
    with pytest.raises(ValueError, match="Combine"):
        PrecisionSchedule(combine="max")
    with pytest.raises(TypeError, match="Epoch index"):
        PrecisionSchedule(epochs={1.0: "a5w5"})
    with pytest.raises(ValueError, match="Layer index"):
        PrecisionSchedule(layers={-1: "a5w5"})
    with pytest.raises(ValueError, match="between 2 and 6"):
        PrecisionSchedule("a8w8", max_bits=6)
    with pytest.raises(TypeError, match="Minimum width"):
        PrecisionSchedule(min_bits=True)
    with pytest.raises(ValueError, match="Maximum width"):
        PrecisionSchedule("a4w4", min_bits=4, max_bits=3)
    with pytest.raises(TypeError, match="Layer index"):
        PrecisionSchedule().widths("0", 0)
    with pytest.raises(ValueError, match="Epoch index"):
        PrecisionSchedule().widths(0, -2)


def test_controller_hysteresis():
    ctl = ThresholdController(5, low=0.01, high=0.05)
    assert ctl.update("L1", 0.10) == 6          # above the upper threshold: raise
    assert ctl.update("L1", 0.03) == 6          # between: hold
    assert ctl.update("L1", 0.05) == 6          # at the threshold: hold (strictly above)
    assert ctl.update("L1", 0.001) == 5         # below the lower threshold: lower
    assert ctl.update("L2", 0.2) == 6           # keys are independent
    assert ctl.width("L1") == 5 and ctl.width("L3") == 5
    for _ in range(10):
        ctl.update("L1", 1.0)
    assert ctl.width("L1") == 8                 # clamped at max_bits
    for _ in range(10):
        ctl.update("L1", 0.0)
    assert ctl.width("L1") == 2                 # clamped at min_bits
    assert ctl.history[0] == ("L1", 0.10, 0.10, 5, 6)


def test_controller_step_initial_dict_and_smoothing():
    ctl = ThresholdController({("fc1", "a"): 4}, low=0.1, high=0.2, step=2)
    assert ctl.width(("fc1", "a")) == 4 and ctl.width(("fc2", "a")) == 8
    assert ctl.update(("fc1", "a"), 0.5) == 6
    smooth = ThresholdController(6, low=0.1, high=0.2, smoothing=0.5)
    assert smooth.update("k", 0.15) == 6
    # Average 0.5 * 0.15 + 0.5 * 0.3 = 0.225 > 0.2: raise; the average restarts.
    assert smooth.update("k", 0.3) == 7
    assert smooth.history[-1][2] == pytest.approx(0.225)
    assert smooth.update("k", 0.05) == 6         # fresh average: 0.05 < 0.1
    assert smooth.update("k", 0.15) == 6         # fresh again after the change: hold
    assert smooth.update("k", 0.19) == 6         # 0.5 * 0.15 + 0.5 * 0.19 = 0.17: hold
    assert smooth.update("k", 0.25) == 7         # 0.5 * 0.17 + 0.5 * 0.25 = 0.21: raise
    assert smooth.history[-1][2] == pytest.approx(0.21)


def test_controller_validation():
    with pytest.raises(ValueError, match="low < high"):
        ThresholdController(low=0.2, high=0.1)
    with pytest.raises(ValueError, match="low < high"):
        ThresholdController(low=-0.1, high=0.1)
    with pytest.raises(TypeError, match="Upper threshold"):
        ThresholdController(low=0.1, high="0.2")
    with pytest.raises(ValueError, match="Smoothing"):
        ThresholdController(low=0.1, high=0.2, smoothing=1.0)
    with pytest.raises(ValueError, match="Initial width"):
        ThresholdController(9, low=0.1, high=0.2)
    with pytest.raises(TypeError, match="Width step"):
        ThresholdController(low=0.1, high=0.2, step=1.5)
    ctl = ThresholdController(low=0.1, high=0.2)
    with pytest.raises(ValueError, match="non-negative"):
        ctl.update("k", -1)
    with pytest.raises(ValueError, match="finite"):
        ctl.update("k", float("nan"))


def test_quantisation_error_drives_the_controller_with_bfp():
    """End to end: BFP error falls with the width, so the controller settles between the
    thresholds on real quantiser output."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(1024)
    errs = []
    for w in range(2, 9):
        m, e = mq.quantise_bfp(x, block=16, width=w)
        xq = np.ldexp(m.astype(float), np.repeat(e, 16))
        errs.append(quantisation_error(x, xq))
    assert all(a > b for a, b in zip(errs, errs[1:], strict=False))
    ctl = ThresholdController(2, low=errs[5], high=errs[3])   # settles at W = 5, 6 or 7
    for _ in range(10):
        w = ctl.width("x")
        ctl.update("x", errs[w - 2])
    assert errs[5] <= errs[ctl.width("x") - 2] <= errs[3]
    assert quantisation_error(np.zeros(4), np.ones(4)) == 0.0
    assert quantisation_error([1.0, np.nan], [1.0, 0.0]) == 0.0
    with pytest.raises(ValueError, match="Shapes"):
        quantisation_error(np.zeros(3), np.zeros(4))


# -- data type, per-step and per-gate entries ------------------------------------------------

def test_float32_entries():
    """¶[0059]: an entry chooses BFP widths or float32; float32 is never averaged."""
    assert parse_widths("float32") == FLOAT32 and FLOAT32.is_float
    assert str(FLOAT32) == "float32" and FLOAT32.a == FLOAT32.w == 24
    assert not parse_widths("a5w6").is_float
    assert parse_widths(FLOAT32) is FLOAT32
    with pytest.raises(ValueError, match="'int64'"):
        parse_widths(Widths(8, 8, "int64"))
    sched = PrecisionSchedule("a6w6", layers={2: "float32"}, epochs={0: "a4w4", 3: "float32"},
                              gates={"n": "float32", "z": "a8w8"})
    assert sched.widths(2, 0) == FLOAT32            # the layer's data type wins over a width
    assert sched.widths(1, 0) == Widths(4, 4)
    assert sched.widths(1, 3) == FLOAT32            # float32 epoch: every layer
    assert sched.widths(1, 0, gate="n") == FLOAT32  # float32 gate
    assert sched.widths(1, 0, gate="z") == Widths(6, 6)     # mean(8, 4)
    assert sched.widths(2, 0, gate="z") == Widths(6, 6)     # a gate entry replaces its layer's
    assert sched.widths(2, 0, gate="r") == FLOAT32          # no gate entry: the layer's


def test_step_table_replaces_the_epoch_table_within_an_epoch():
    """Examples 4 and 8: step 1 at one width, step 2 at another, restarting every epoch."""
    sched = PrecisionSchedule("a8w8", epochs={0: "a5w5", 2: "a7w7"}, steps={0: "a4w4",
                                                                            10: "a6w6"})
    assert sched.widths(0, 0, step=0) == Widths(4, 4)
    assert sched.widths(0, 0, step=9) == Widths(4, 4)
    assert sched.widths(0, 0, step=10) == Widths(6, 6)
    assert sched.widths(0, 2, step=3) == Widths(4, 4)       # restarts every epoch
    assert sched.widths(0, 2) == Widths(7, 7)               # no step: the epoch table
    late = PrecisionSchedule("a8w8", epochs={0: "a5w5"}, steps={5: "a3w3"})
    assert late.widths(0, 0, step=4) == Widths(5, 5)        # before the first step entry
    assert late.widths(0, 0, step=5) == Widths(3, 3)
    mixed = PrecisionSchedule("a8w8", layers={0: "a8w8"}, steps={0: "a4w6"})
    assert mixed.widths(0, 0, step=0) == Widths(6, 7)       # location and step combine
    assert mixed.widths(1, 0, step=0) == Widths(4, 6)
    assert mixed.widths(1, 0) == Widths(8, 8)


def test_step_and_gate_validation():
    with pytest.raises(TypeError, match="Step index must be a non-negative integer, not '1'"):
        PrecisionSchedule(steps={"1": "a5w5"})
    with pytest.raises(ValueError, match="Step index must be a non-negative integer, not -1"):
        PrecisionSchedule().widths(0, 0, step=-1)
    with pytest.raises(TypeError, match="Gate name must be a string, not 3"):
        PrecisionSchedule(gates={3: "a5w5"})
    with pytest.raises(ValueError, match="Gate name must not be empty"):
        PrecisionSchedule(gates={"": "a5w5"})
    with pytest.raises(TypeError, match="Gate name must be a string, not 0"):
        PrecisionSchedule().widths(0, 0, gate=0)
    with pytest.raises(ValueError, match="'a5'"):
        PrecisionSchedule(gates={"n": "a5"})


# -- per-step decisions on moving averages (¶[0074]) ------------------------------------------

def _steady(n, acc=0.8, loss0=2.0, rate=0.01, seed=0):
    """A calm synthetic history: accuracy ``acc`` ± 0.02, loss falling by ``rate`` per step."""
    rng = np.random.default_rng(seed)
    return ([acc + 0.02 * rng.uniform(-1, 1) for _ in range(n)],
            [loss0 - rate * k + 0.02 * rng.uniform(-1, 1) for k in range(n)])


def _feed(ctl, accs, losses):
    return [ctl.update(a, loss) for a, loss in zip(accs, losses, strict=True)]


def test_sudden_accuracy_drop_raises_the_width():
    """The documented reaction: a batch accuracy below its moving average by more than
    ``accuracy_drop`` raises the offset by one at that very step, then ``cooldown`` steps
    pass without decisions."""
    accs, losses = _steady(30)
    accs[20] = 0.55                                 # sudden drop: 0.8 -> 0.55 (> 0.15 below)
    ctl = StepController(cooldown=3)
    offsets = _feed(ctl, accs, losses)
    assert offsets[:20] == [0] * 20
    assert offsets[20:] == [1] * 10
    events = [h[5] for h in ctl.history]
    assert events[:5] == ["warmup"] * 5
    assert set(events[5:20]) == {"calm"}
    assert events[20] == "drop" and events[21:24] == ["skip"] * 3 and events[24] == "calm"
    assert ctl.history[20][2] == pytest.approx(0.8, abs=0.02)   # the average before the drop
    assert ctl.adjust("a5w6") == Widths(6, 7)


def test_gradual_decline_is_not_a_sudden_change():
    """The moving average follows a slow decline (0.01 per step, lag 0.09 < 0.15): no
    reaction; the same total decline in one step reacts."""
    accs = [0.9 - 0.01 * k for k in range(40)]
    losses = [2.0 - 0.01 * k for k in range(40)]
    ctl = StepController()
    assert _feed(ctl, accs, losses) == [0] * 40
    assert ctl.averages[0] == pytest.approx(0.9 - 0.39 + 0.09, abs=0.01)
    jump = StepController()
    assert _feed(jump, [0.9] * 10 + [0.5] * 5, [1.0] * 15)[10] == 1


def test_sudden_loss_spike_raises_the_width():
    """Speed = loss decrease per step; a loss spike (speed 0.5 below its average) reacts,
    with the accuracy unchanged. ``speed_drop=None`` ignores it."""
    accs, losses = _steady(30, seed=1)
    losses[15] += 1.0                               # speed about -1.0 against an average of 0.01
    ctl = StepController()
    offsets = _feed(ctl, accs, losses)
    assert offsets[14] == 0 and offsets[15] == 1
    assert ctl.history[15][3] == pytest.approx(losses[14] - losses[15])
    assert ctl.history[15][4] == pytest.approx(0.01, abs=0.02)
    assert _feed(StepController(speed_drop=None), accs, losses) == [0] * 30


def test_literal_reading_lowers_on_a_drop_and_bounds_hold():
    """``on_drop="lower"`` is ¶[0074]'s literal wording; offsets stay within their bounds."""
    accs = [0.8] * 10 + [0.3] + [0.8] * 5 + [0.3] + [0.8] * 5 + [0.3]
    losses = [1.0] * len(accs)
    low = StepController(on_drop="lower", min_offset=-1, cooldown=0)
    offsets = _feed(low, accs, losses)
    assert offsets[10] == -1 and offsets[-1] == -1          # clamped at min_offset
    high = StepController(max_offset=1, cooldown=0)
    assert _feed(high, accs, losses)[-1] == 1               # clamped at max_offset
    assert StepController(max_offset=2, min_bits=2, max_bits=8).adjust("a7w8") == Widths(7, 8)
    assert high.adjust(FLOAT32) is FLOAT32


def test_calm_relaxes_the_offset_after_patience():
    """After a raise, ``patience`` consecutive calm decisions move the offset back."""
    accs = [0.8] * 10 + [0.5] + [0.8] * 20
    ctl = StepController(cooldown=2, patience=4, smoothing=0.5)
    offsets = _feed(ctl, accs, [1.0] * len(accs))
    # Step 10 drops; 11, 12 cool down; 13 is calm? 0.8 vs avg (~0.65 after the drop): calm.
    assert offsets[10] == 1
    assert offsets[:10] == [0] * 10
    first_relax = offsets.index(0, 11)
    assert first_relax == 16                # decisions at 13, 14, 15, 16: the fourth relaxes
    assert ctl.history[16][5] == "relax"


def test_period_limits_decisions():
    accs = [0.8] * 10 + [0.3] + [0.8] * 10
    losses = [1.0] * len(accs)
    # Decisions at steps 5 + 4k (n - warmup divisible by 4): 8, 12, ...; 10 is skipped.
    assert _feed(StepController(period=4), accs, losses) == [0] * len(accs)
    every = StepController(period=5)            # decisions at 9, 14, ...: step 10 is skipped
    assert _feed(every, accs, losses)[10] == 0
    on = StepController(period=5, warmup=5)
    accs2 = [0.8] * 9 + [0.3] + [0.8] * 5
    assert _feed(on, accs2, [1.0] * len(accs2))[9] == 1


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(smoothing=1.0), ValueError, "Smoothing must be in \\[0, 1\\), not 1.0"),
    (dict(smoothing="0.9"), TypeError, "Smoothing must be a real number, not '0.9'"),
    (dict(accuracy_drop=0), ValueError, "Accuracy drop must be in \\(0, 1\\], not 0"),
    (dict(speed_drop=-1), ValueError, "Speed drop must be a finite positive number, not -1"),
    (dict(speed_drop=float("inf")), ValueError, "not inf"),
    (dict(warmup=0), ValueError, "Warm-up must be an integer between 1 and .*, not 0"),
    (dict(period=1.5), TypeError, "Period must be an integer .*, not 1.5"),
    (dict(cooldown=-1), ValueError, "Cool-down .*, not -1"),
    (dict(patience=0), ValueError, "Patience .*, not 0"),
    (dict(step=0), ValueError, "Offset step .*, not 0"),
    (dict(min_offset=1), ValueError, "Minimum offset must be an integer between -6 and 0, "
                                     "not 1"),
    (dict(max_offset=7), ValueError, "Maximum offset must be an integer between 0 and 6, "
                                     "not 7"),
    (dict(on_drop="up"), ValueError, "On-drop reaction must be 'raise' or 'lower', not 'up'"),
])
def test_step_controller_validation(kwargs, error, message):
    with pytest.raises(error, match=message):
        StepController(**kwargs)


def test_step_controller_sample_validation():
    ctl = StepController()
    with pytest.raises(ValueError, match="Accuracy must be in \\[0, 1\\], not 1.5"):
        ctl.update(1.5, 1.0)
    with pytest.raises(ValueError, match="Loss must be finite, not nan"):
        ctl.update(0.5, float("nan"))
    with pytest.raises(TypeError, match="Loss must be a real number, not None"):
        ctl.update(0.5, None)
    assert ctl.history == []
