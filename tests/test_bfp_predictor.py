"""Golden model of the predicted output exponent selector
(lowbit.sim.bfp_column.ExponentPredictor)."""

from collections import Counter

import numpy as np
import pytest

from lowbit.sim.bfp import nan_exponent, quantise
from lowbit.sim.bfp_column import ColumnModel, ExponentPredictor, predict_exponent


def product(rng, n=16, block=16, x_shift=0):
    """One product's operands: Gaussian weights and vector, the vector scaled by 2^x_shift."""
    w_m, w_e = quantise(rng.standard_normal((n, block)), block=block)
    x_m, x_e = quantise(rng.standard_normal(block), block=block)
    return w_m.reshape(n, block), w_e, x_m.reshape(block), x_e + x_shift


def run_sequence(model, shifts, seed=0, **kwargs):
    """Predicted-mode products with the vector scaled by 2^shift each; [(y, e4, event)]."""
    rng = np.random.default_rng(seed)
    out = []
    for shift in shifts:
        y, e4 = model.matvec(*product(rng, model.lanes, model.block, shift),
                             exp_mode="predicted", **kwargs)
        out.append((y, e4, model.predictor.event))
    return out


# -- the seed's worked example and the prediction formula ---------------------------------------


def test_seed_mu_plus_3sigma_gives_minus_11():
    # Seed 002 [0088]-[0091]: mu = 10, sigma = 0.5, k = 3 -> absolute max 11.5 -> e = -11 (W = 16).
    assert predict_exponent(20, 1, k=3, width=16, frac=1) == -11
    assert predict_exponent(10 << 8, 1 << 7, k=3, width=16, frac=8) == -11
    # Through the predictor's renormalisation: state (10, 0.5) in units of 2^0, FS = 2.
    pred = ExponentPredictor(width=16, stat_shift=0)
    assert pred.frac == 2
    pred.update(10, 0, width=16, k=3, restart=True)     # first sample: mu = 10, dev = 0
    assert pred.unit_exp == predict_exponent(10, 0, k=3, width=16) == 3 - 14
    pred.count, pred.mu, pred.dev, pred.unit_exp = 1, 10 << 2, 2, 0
    delta = predict_exponent(pred.mu, pred.dev, k=3, width=16, frac=2)
    assert delta == -11


@pytest.mark.parametrize("width", [2, 3, 8, 16])
def test_prediction_is_floor_log2_rule(width):
    rng = np.random.default_rng(width)
    for _ in range(300):
        mu, dev = (int(v) for v in rng.integers(0, 5000, 2))
        k, frac = int(rng.integers(1, 8)), int(rng.integers(0, 11))
        e = predict_exponent(mu, dev, k=k, width=width, frac=frac, unit_exp=5)
        p = mu + k * dev
        if p == 0:
            assert e is None
            continue
        # floor(log2(p · 2^(5 - frac))) - (W - 2), exactly
        assert 2.0 ** (e + width - 2) <= p * 2.0 ** (5 - frac) < 2.0 ** (e + width - 1)


# -- warm-up weights and the update arithmetic --------------------------------------------------


def test_update_arithmetic_by_hand():
    pred = ExponentPredictor(width=8, stat_shift=2)
    fs = pred.frac
    assert fs == 4
    pred.update(40, -3, width=8, k=3, restart=True)
    # mu = 40·16 = 640, dev = 0, P = 640: bitlen 10 -> delta = 10 - (7 + 4) = -1.
    assert pred.state() == {"count": 1, "mu": 1280, "dev": 0, "unit_exp": -4}
    # Second sample (weight 1/2) at the predicted exponent: X = 100·16 = 1600.
    pred.update(100, -4, width=8, k=3)
    d = 1600 - 1280
    mu, dev = 1280 + (d >> 1), 0 + ((abs(d) - 0) >> 1)
    p = mu + 3 * dev
    delta = p.bit_length() - 11
    assert (mu, dev, p, delta) == (1440, 160, 1920, 0)
    assert pred.state() == {"count": 2, "mu": 1440, "dev": 160, "unit_exp": -4}
    # Third sample: weight 1/2 (n = 3), a smaller value; floor shifts of negative differences.
    pred.update(50, -4, width=8, k=3)
    d = 800 - 1440
    mu, dev = 1440 + (d >> 1), 160 + ((abs(d) - 160) >> 1)
    assert (mu, dev) == (1120, 400)
    p = mu + 3 * dev                                    # 2320: bitlen 12 -> delta = 1
    assert pred.state() == {"count": 3, "mu": 560, "dev": 200, "unit_exp": -3}
    # Weights: n = 4..7 -> 1/4, n >= 8 -> 1/2^a = 1/4; count saturates at 2^a.
    for _ in range(3):
        pred.update(35, pred.unit_exp, width=8, k=3)
    assert pred.count == 4


def test_sample_exponent_must_be_the_prediction():
    pred = ExponentPredictor()
    pred.update(64, 0, width=8, k=3, restart=True)
    with pytest.raises(ValueError, match="not the predicted"):
        pred.update(64, pred.unit_exp + 1, width=8, k=3)


def test_zero_prediction_clears_history():
    pred = ExponentPredictor()
    pred.update(0, 5, width=8, k=3, restart=True)
    assert pred.count == 0 and not pred.usable


@pytest.mark.parametrize("width", [2, 4, 8])
@pytest.mark.parametrize("stat_shift", [0, 1, 4, 8])
def test_state_bounds_random_walk(width, stat_shift):
    # Any sample sequence, k and runtime width keep mu, dev < 2^(W_max - 1 + FS) (update()
    # asserts it) and unit_exp within the gateware register's range.
    from lowbit.hw.bfp import predictor_widths
    _, _, (lo, hi) = predictor_widths(width=8, exp_bits=8, stat_shift=stat_shift)
    rng = np.random.default_rng(width * 10 + stat_shift)
    pred = ExponentPredictor(width=8, exp_bits=8, stat_shift=stat_shift)
    for _ in range(400):
        w = int(rng.integers(2, width + 1))
        x = int(rng.integers(0, 1 << (w - 1)))
        e4 = int(rng.integers(-127, 128))
        restart = not pred.usable or rng.random() < 0.1
        pred.update(x, e4 if restart else pred.unit_exp, width=w, k=int(rng.integers(1, 8)),
                    restart=restart)
        assert lo <= pred.unit_exp <= hi


# -- selection rules ----------------------------------------------------------------------------


def test_selection_rules():
    pred = ExponentPredictor(width=8, exp_bits=8)
    assert pred.select(-3, margin=2) == (None, True) and pred.event == "max"
    pred.update(100, -3, width=8, k=3, restart=True)
    eu = pred.unit_exp
    for raw, event in [(eu, "predicted"), (eu - 2, "predicted"), (eu - 3, "underflow"),
                       (eu + 1, "overflow")]:
        saved = pred.state()
        res = pred.select(raw, margin=2)
        assert pred.event == event
        if event == "predicted":
            assert res == (eu, False)
        else:
            assert res == (None, True) and pred.count == 0
        pred.count, pred.mu, pred.dev, pred.unit_exp = saved.values()
    assert pred.select(None, margin=2) == (eu, False) and pred.event == "zero"
    assert pred.select(eu + 5, margin=0, nan=True) == (None, False) and pred.event == "nan"
    assert pred.count == 1
    # A prediction outside the exponent range is not used.
    pred.unit_exp = 128
    assert pred.select(120, margin=7) == (None, True) and pred.event == "max"
    assert pred.select(None) == (0, False)


def test_first_product_is_the_max_rule():
    rng = np.random.default_rng(3)
    ops = product(rng)
    model = ColumnModel(lanes=16, block=16)
    want = model.matvec(*ops, exp_mode="max")
    got = model.matvec(*ops, exp_mode="predicted")
    assert model.predictor.event == "max"
    assert (got[0].tolist(), got[1]) == (want[0].tolist(), want[1])
    assert model.predictor.count == 1


# -- behaviour over sequences -------------------------------------------------------------------


def test_convergence_on_stationary_gaussian():
    model = ColumnModel(lanes=16, block=16, max_blocks=1, stat_shift=4)
    pred = model.predictor
    rng = np.random.default_rng(1)
    events, mus, devs, samples = [], [], [], []
    for _ in range(300):
        y, e4 = model.matvec(*product(rng), exp_mode="predicted", pred_k=3)
        events.append(pred.event)
        samples.append(np.abs(y).max() * 2.0 ** e4)
        mus.append(pred.mu * 2.0 ** (pred.unit_exp - pred.frac))
        devs.append(pred.dev * 2.0 ** (pred.unit_exp - pred.frac))
        if pred.event == "predicted":
            # No overflow: the largest output fits in W - 1 bits before rounding, and it
            # uses at least W - 1 - u bits.
            assert 2 ** (8 - 1 - 2 - 1) <= np.abs(y).max() <= 127
    counts = Counter(events[20:])
    assert counts["predicted"] >= 0.97 * 280, counts
    assert counts["underflow"] == 0
    s = np.array(samples[100:])
    assert abs(np.mean(mus[100:]) / s.mean() - 1) < 0.05
    assert abs(np.mean(devs[100:]) / np.mean(np.abs(s - s.mean())) - 1) < 0.25
    # The prediction mu + k·dev sits above the typical maximum (the seed's confidence bound).
    assert np.mean(np.array(mus[100:]) + 3 * np.array(devs[100:])) > np.quantile(s, 0.95)


@pytest.mark.parametrize("jump, event", [(6, "overflow"), (-6, "underflow")])
def test_scale_jump_resets_history(jump, event):
    shifts = [0] * 30 + [jump] * 30
    model = ColumnModel(lanes=16, block=16, max_blocks=1, stat_shift=3)
    seq = run_sequence(model, shifts, seed=7)
    ref = ColumnModel(lanes=16, block=16, max_blocks=1)
    max_mode = [ref.matvec(*ops, exp_mode="max") for ops in _ops(shifts, seed=7)]
    events = [ev for _, _, ev in seq]
    assert events[0] == "max" and events[30] == event
    assert "overflow" not in events[25:30] and "underflow" not in events[25:30]
    # The product that detects the jump uses the max rule (nothing saturates, full precision)
    # and starts the new history; the prediction then follows the new scale.
    assert seq[30][0].tolist() == max_mode[30][0].tolist() and seq[30][1] == max_mode[30][1]
    assert Counter(events[40:])["predicted"] >= 19
    assert abs(seq[-1][1] - max_mode[-1][1]) <= 2
    assert abs(seq[20][1] - seq[-1][1] + jump) <= 2


def _ops(shifts, seed):
    rng = np.random.default_rng(seed)
    return [product(rng, 16, 16, s) for s in shifts]


def test_zero_and_nan_products_keep_history_other_modes_clear_it():
    rng = np.random.default_rng(4)
    model = ColumnModel(lanes=16, block=16)
    for _ in range(5):
        model.matvec(*product(rng), exp_mode="predicted")
    state = model.predictor.state()
    w_m, w_e, x_m, x_e = product(rng)
    y, e4 = model.matvec(w_m, w_e, np.zeros_like(x_m), x_e, exp_mode="predicted")
    assert model.predictor.event == "zero" and y.tolist() == [0] * 16
    assert e4 == state["unit_exp"] and model.predictor.state() == state
    x_e[0] = nan_exponent(8)
    y, e4 = model.matvec(w_m, w_e, x_m, x_e, exp_mode="predicted")
    assert model.predictor.event == "nan" and e4 == nan_exponent(8)
    assert model.predictor.state() == state
    model.matvec(*product(rng), exp_mode="fixed", fixed_exp=3)
    assert model.predictor.count == 0
    model.matvec(*product(rng), exp_mode="predicted")
    assert model.predictor.event == "max"
    model.clear_history()
    model.matvec(*product(rng), exp_mode="predicted")
    assert model.predictor.event == "max"


def test_clamped_exponents_fall_back_to_max_rule():
    # Outputs far above the exponent range: every product saturates like the max rule does.
    model = ColumnModel(lanes=4, block=4, exp_bits=5)
    ref = ColumnModel(lanes=4, block=4, exp_bits=5)
    rng = np.random.default_rng(8)
    for _ in range(6):
        w_m, w_e, x_m, x_e = product(rng, 4, 4)
        w_e[:] = 15
        x_e[:] = 10
        got = model.matvec(w_m, w_e, x_m, x_e, exp_mode="predicted")
        want = ref.matvec(w_m, w_e, x_m, x_e, exp_mode="max")
        assert (got[0].tolist(), got[1]) == (want[0].tolist(), want[1]) == (got[0].tolist(), 15)
        assert model.predictor.event in ("max", "overflow")


# -- validation ---------------------------------------------------------------------------------


def test_validation():
    with pytest.raises(ValueError, match="Statistics shift must be an integer between 0 and 8, "
                                         "not 9"):
        ExponentPredictor(stat_shift=9)
    with pytest.raises(TypeError, match="Statistics shift"):
        ColumnModel(stat_shift=2.0)
    with pytest.raises(TypeError, match="predictor must be a bool, not 1"):
        ColumnModel(predictor=1)
    model = ColumnModel(lanes=4, block=4)
    ops = product(np.random.default_rng(0), 4, 4)
    with pytest.raises(ValueError, match="Spread multiple must be an integer between 1 and 7, "
                                         "not 0"):
        model.matvec(*ops, exp_mode="predicted", pred_k=0)
    with pytest.raises(TypeError, match="Spread multiple"):
        model.matvec(*ops, exp_mode="predicted", pred_k=True)
    with pytest.raises(ValueError, match="Underflow margin must be an integer between 0 and 7"):
        model.matvec(*ops, exp_mode="predicted", pred_margin=8)
    pred = ExponentPredictor()
    with pytest.raises(ValueError, match="Sample must be an integer between 0 and 7"):
        pred.update(8, 0, width=4, restart=True)
    with pytest.raises(ValueError, match="must not be negative"):
        predict_exponent(-5, 1, k=1, width=8)
