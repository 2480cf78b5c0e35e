"""Mixed-precision schedule and threshold controller (lowbit.sim.schedule, seed 004)."""

import numpy as np
import pytest

from lowbit.sim import quantiser as mq
from lowbit.sim.schedule import (
    PrecisionSchedule,
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
