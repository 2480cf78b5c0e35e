"""Training of the digits MLP with the accelerator's arithmetic (lowbit.sim.train, issue #11)."""

import numpy as np
import pytest

from lowbit.sim.bfp_column import ColumnModel
from lowbit.sim.discrete import CodeBook, SMFormat, weight_grad
from lowbit.sim.grand import GrandModel
from lowbit.sim.network import DiscreteDense, discrete_dense
from lowbit.sim.prng import Xoroshiro128aox, load_state
from lowbit.sim.schedule import PrecisionSchedule, StepController, ThresholdController, Widths
from lowbit.sim.train import (
    VARIANTS,
    DeviceBackend,
    FixedPolicy,
    GoldenBackend,
    MixedPolicy,
    RoundingPRNG,
    Trainer,
    _take,
    check_config,
    discrete_dense_batch,
    load_digits_split,
    validation_split,
    variant_config,
)


@pytest.fixture(scope="module")
def data():
    return load_digits_split()


@pytest.fixture(scope="module")
def small(data):
    """A small training set (the first 96 images) and the full test set."""
    x_tr, y_tr, x_te, y_te = data
    return x_tr[:96], y_tr[:96], x_te[:64], y_te[:64]


# -- data ------------------------------------------------------------------------------------

def test_digits_split(data):
    x_tr, y_tr, x_te, y_te = data
    assert x_tr.shape == (1257, 64) and x_te.shape == (540, 64)
    assert x_tr.min() == 0 and x_tr.max() == 16
    assert set(y_tr) == set(range(10))
    again = load_digits_split()
    assert all(np.array_equal(a, b) for a, b in zip(data, again, strict=True))


# -- the golden backend's column products == ColumnModel per vector and tile ------------------

def _column_case(rng, trial):
    lanes = int(rng.choice([4, 8, 16]))
    block = int(rng.choice([2, 4, 16]))
    wmax = int(rng.choice([4, 8]))
    col = ColumnModel(lanes=lanes, block=block, width=wmax, max_blocks=4,
                      frac_bits=int(rng.integers(0, 4)), rand_bits=int(rng.choice([1, 4, 8])))
    nb, rows, v = int(rng.integers(1, 5)), int(rng.integers(1, 3 * lanes)), 3
    lim = 1 << (wmax - 1)
    w_m = rng.integers(-lim, lim, (rows, nb * block))
    x_m = rng.integers(-lim, lim, (v, nb * block))
    w_m[rng.random(w_m.shape) < 0.3] = 0
    x_m[rng.random(x_m.shape) < 0.3] = 0
    if trial % 7 == 0:
        x_m[:, :block] = 0                      # an all-zero block
    if trial % 11 == 0:
        x_m[1] = 0                              # an all-zero vector
    kw = dict(width=int(rng.integers(2, wmax + 1)),
              rounding=("nearest", "zero", "stochastic")[trial % 3])
    if trial % 2 == 0:
        kw["bias_m"] = rng.integers(-lim, lim, rows)
        kw["bias_e"] = rng.integers(-30, 30, rows)
    return (col, w_m, rng.integers(-20, 20, (rows, nb)), x_m, rng.integers(-20, 20, (v, nb)),
            kw)


@pytest.mark.parametrize("seed", range(4))
def test_golden_backend_is_column_model_per_vector_and_tile(seed):
    """GoldenBackend.bfp_matvec (one ColumnModel.matvec_batch per call) is ColumnModel.matvec
    on every tile of every vector, the rounding PRNG drawn N per tile, vectors in call order
    (tiles, padding, bias, every rounding)."""
    rng = np.random.default_rng(seed)
    for trial in range(40):
        col, w_m, w_e, x_m, x_e, kw = _column_case(rng, trial)
        gold = GoldenBackend(col)
        gold.seed_rounding(seed + trial)
        m, e = gold.bfp_matvec(w_m, w_e, x_m, x_e, **kw)
        rows, n = len(w_m), col.lanes
        t = -(-rows // n)
        assert gold.calls["matvec"] == len(x_m) and gold.calls["beats"] == len(x_m) * t * \
            w_m.shape[1]
        prng = RoundingPRNG(seed + trial, col.rand_bits)
        ref = ColumnModel(lanes=col.lanes, block=col.block, width=col.width, max_blocks=4,
                          frac_bits=col.frac_bits, rand_bits=col.rand_bits)
        pad = t * n - rows
        wm, we = np.pad(w_m, ((0, pad), (0, 0))), np.pad(w_e, ((0, pad), (0, 0)))
        for v in range(len(x_m)):
            for tile in range(t):
                sl = slice(tile * n, (tile + 1) * n)
                ref_kw = dict(kw)
                if "bias_m" in kw:
                    ref_kw["bias_m"] = np.pad(kw["bias_m"], (0, pad))[sl]
                    ref_kw["bias_e"] = np.pad(kw["bias_e"], (0, pad))[sl]
                if kw["rounding"] == "stochastic":
                    ref_kw["rand"] = prng.draw(n)
                rm, re_ = ref.matvec(wm[sl], we[sl], x_m[v], x_e[v], **ref_kw)
                real = min(n, rows - tile * n)
                assert np.array_equal(m[v, sl][:real], rm[:real]), (seed, trial, v, tile)
                assert np.all(e[v, sl][:real] == re_), (seed, trial, v, tile)


# -- random sources ------------------------------------------------------------------------------

def test_rounding_prng_matches_the_program_spec():
    """One xoroshiro128aox lane from PRNG_SEED0..3; random number = low R bits of a word."""
    prng = RoundingPRNG(1234, 8)
    regs = prng.registers
    s0 = regs["PRNG_SEED0"] | regs["PRNG_SEED1"] << 32
    s1 = regs["PRNG_SEED2"] | regs["PRNG_SEED3"] << 32
    assert s1 & 1                        # the load rule (bit 0 of s1 set) changes nothing
    ref = Xoroshiro128aox.from_state(load_state([[s0, s1]]))
    got = np.concatenate([prng.draw(5), prng.draw(128), prng.draw(300)])
    want = np.array([int(ref.next()[0]) & 0xFF for _ in range(433)])
    assert np.array_equal(got, want)


@pytest.mark.parametrize("n", [1, 64, 65, 128, 1024, 4096, 4097])
def test_take_workaround(n):
    a, b = Xoroshiro128aox(7, 2), Xoroshiro128aox(7, 2)
    words = _take(a, n)
    assert np.array_equal(words, np.stack([b.next() for _ in range(n)]))
    assert np.array_equal(a.state, b.state)
    a.take(3)                            # the state is still usable


def test_golden_grand_is_the_grand_unit_in_lane_order():
    be = GoldenBackend(grand_lanes=2)
    be.seed_grand(99)
    got = np.concatenate([be.grand(3), be.grand(1024), be.grand(5)])
    ref = GrandModel(99, 2).values("normal", 520).reshape(-1)[:1032]
    assert np.array_equal(got, ref)


# -- discrete unit -------------------------------------------------------------------------------

def test_discrete_batch_equals_discrete_dense():
    rng = np.random.default_rng(5)
    book = CodeBook.default(2)
    w = rng.integers(0, 4, (12, 40))
    x = rng.integers(-128, 128, (6, 40))
    bias = rng.integers(-300, 300, 12)
    for shift in (0, 1, 4):
        got = discrete_dense_batch(w, x, book=book, bias=bias, shift=shift, lanes=4)
        layer = DiscreteDense(w, book, bias=bias, shift=shift)
        for v in range(len(x)):
            assert np.array_equal(got[v], discrete_dense(layer, x[v], lanes=4)[0])


def test_discrete_weight_gradient_is_sum_of_outer_products():
    """dW[:, j] = G_codesᵀ · X[:, j] on the discrete unit = Σ_b weight_grad(g_b, x_b)."""
    rng = np.random.default_rng(6)
    book = CodeBook.default(2)
    g_codes = rng.integers(0, 4, (16, 10))          # batch × rows
    x = rng.integers(0, 128, (16, 24))              # batch × inputs
    dw = discrete_dense_batch(g_codes.T, x.T, book=book, acc_width=16, lanes=4).T
    fmt = SMFormat(8, 0)
    ref = sum(fmt.to_int(weight_grad(g_codes[b], fmt.from_int(x[b]), book, fmt,
                                     discrete="g")) for b in range(16))
    assert np.array_equal(dw, np.clip(ref, -127, 127))


# -- the training step ---------------------------------------------------------------------------

def test_float_gradients_match_finite_differences(small):
    x, y = small[0][:16], small[1][:16]
    tr = Trainer(variant_config("float64", hidden=(16,)), data=small)

    def loss():
        z = tr._forward_float(x)[2]
        z = z - z.max(axis=1, keepdims=True)
        return np.mean(np.log(np.exp(z).sum(axis=1)) - z[np.arange(16), y])

    _, grads = tr._step_float(x, y, 16)
    rng = np.random.default_rng(0)
    for layer in range(2):
        for _ in range(5):
            i, j = rng.integers(0, tr.weights[layer].shape[0]), \
                rng.integers(0, tr.weights[layer].shape[1])
            old = tr.weights[layer][i, j]
            tr.weights[layer][i, j] = old + 1e-6
            up = loss()
            tr.weights[layer][i, j] = old - 1e-6
            down = loss()
            tr.weights[layer][i, j] = old
            assert grads[layer][0][i, j] == pytest.approx((up - down) / 2e-6, abs=1e-6)


def test_bfp8_step_follows_float64(small):
    """With 8-bit operands every product (forward, Wᵀ·g, batch outer product) tracks float64."""
    x, y = small[0][:32], small[1][:32]
    fl = Trainer(variant_config("float64"), data=small)
    q = Trainer(variant_config("bfp8"), GoldenBackend(), data=small)
    for a, b in zip(fl.weights, q.weights, strict=True):
        assert np.array_equal(a, b)                 # the same grand initialisation
    _, gf = fl._step_float(x, y, 32)
    _, gq = q._step_bfp(x, y, 32)
    for (dwf, dbf), (dwq, dbq) in zip(gf, gq, strict=True):
        assert np.corrcoef(dwf.ravel(), dwq.ravel())[0, 1] > 0.98
        assert np.linalg.norm(dwq - dwf) < 0.2 * np.linalg.norm(dwf)
        assert np.corrcoef(dbf, dbq)[0, 1] > 0.98


@pytest.mark.parametrize("variant", VARIANTS)
def test_training_is_deterministic_and_learns(variant, small):
    x_tr, y_tr = small[0], small[1]
    runs = []
    for _ in range(2):
        cfg = variant_config(variant, epochs=4, hidden=(16,), batch=16, lr=0.1)
        be = None if variant == "float64" else GoldenBackend()
        tr = Trainer(cfg, be, data=small)
        losses = [tr.step(x_tr[k:k + 16], y_tr[k:k + 16]) for k in range(0, 96, 16)
                  for _ in range(2)]
        runs.append((tr, losses))
    (a, la), (b, lb) = runs
    assert la == lb
    for wa, wb in zip(a.weights, b.weights, strict=True):
        assert np.array_equal(wa, wb)
    assert np.mean(la[-4:]) < np.mean(la[:4])


def test_stochastic_variant_draws_the_rounding_prng(small):
    be = GoldenBackend()
    tr = Trainer(variant_config("bfp4-stochastic", hidden=(16,)), be, data=small)
    tr.step(small[0][:16], small[1][:16])
    # Forward: 16 vectors × 1 tile per layer; weight gradients: (64 + 1) + (16 + 1)
    # vectors; backward: 16 vectors.
    draws = (16 + 16 + 65 + 17 + 16) * 16
    ref = RoundingPRNG(tr.cfg.seed, 8)
    ref.draw(draws)
    assert np.array_equal(be._prng.draw(10), ref.draw(10))
    assert be.calls["matvec"] == 16 + 16 + 65 + 17 + 16


def _is_bfp(x, width, block):
    from lowbit.sim.bfp import dequantise, quantise
    x = np.asarray(x, np.float64).reshape(-1, block)
    m, e = quantise(x, block=block, width=width)
    return np.array_equal(dequantise(m, e).reshape(x.shape), x)


@pytest.mark.parametrize("bits", [4, 6])
def test_bfp_storage_stays_in_its_format(bits, small):
    """master_bits=M: from the start and after every update the weights are BFP-M blocks of
    16 along K and the biases M-bit BFP with one block per element, exactly."""
    tr = Trainer(variant_config("bfp4-stochastic", hidden=(16,), master_bits=bits),
                 GoldenBackend(), data=small)
    for w, b in zip(tr.weights, tr.biases, strict=True):
        assert _is_bfp(w, bits, 16) and _is_bfp(b, bits, 1)
    before = [w.copy() for w in tr.weights]
    for k in range(0, 48, 16):
        tr.step(small[0][k:k + 16], small[1][k:k + 16])
    for w, b, w0 in zip(tr.weights, tr.biases, before, strict=True):
        assert _is_bfp(w, bits, 16) and _is_bfp(b, bits, 1)
        assert not np.array_equal(w, w0)
    assert any(np.any(b != 0) for b in tr.biases)
    # A float64 master copy is not in any 4-bit format after an update.
    f = Trainer(variant_config("bfp4-stochastic-f64master", hidden=(16,)), GoldenBackend(),
                data=small)
    f.step(small[0][:16], small[1][:16])
    assert not _is_bfp(f.weights[0], 8, 16)


def test_bfp4_variants_differ_only_in_rounding():
    """The issue's BFP-4 pair: weights stored in BFP-4, float64 momentum, the same learning
    rate policy fields; only the rounding mode (and, if tuned, the learning rate) differs."""
    import dataclasses
    n, s = variant_config("bfp4-nearest"), variant_config("bfp4-stochastic")
    assert (n.master_bits, s.master_bits) == (4, 4)
    assert (n.rounding, s.rounding) == ("nearest", "stochastic")
    skip = {"variant", "rounding", "policy", "lr"}
    fields = [f.name for f in dataclasses.fields(n) if f.name not in skip]
    assert all(getattr(n, f) == getattr(s, f) for f in fields)
    assert n.policy.widths(0, 0) == s.policy.widths(2, 5) == Widths(4, 4)
    for name, rounding in (("bfp4-nearest-f64master", "nearest"),
                           ("bfp4-stochastic-f64master", "stochastic")):
        cfg = variant_config(name)
        assert cfg.master_bits is None and cfg.rounding == rounding
    assert variant_config("bfp4-nearest", master_bits=8).master_bits == 8
    # The learning rates tuned on the validation split (docs/bench/train.json "lr_tuning").
    assert (n.lr, s.lr) == (0.2, 0.05)


def test_bfp4_initial_weights_are_the_same_for_both_roundings(small):
    from lowbit.sim.bfp import dequantise, quantise
    a = Trainer(variant_config("bfp4-nearest", hidden=(16,)), GoldenBackend(), data=small)
    b = Trainer(variant_config("bfp4-stochastic", hidden=(16,)), GoldenBackend(), data=small)
    f = Trainer(variant_config("float64", hidden=(16,)), data=small)
    for wa, wb, wf in zip(a.weights, b.weights, f.weights, strict=True):
        assert np.array_equal(wa, wb)
        assert not np.array_equal(wa, wf)
        # Rounded to nearest (floor exponent rule, saturating) from the same grand samples.
        m, e = quantise(wf.reshape(-1, 16), block=16, width=4, rounding="nearest")
        assert np.array_equal(wa.reshape(-1, 16), dequantise(m, e).reshape(-1, 16))


@pytest.mark.parametrize("fraction,steps", [(0.1, 10), (0.25, 4)])
def test_small_updates_lost_by_nearest_kept_by_stochastic(fraction, steps, small):
    """Seed 000's argument, on the trainer's own storage path: an update of ``fraction`` of an
    ulp of its block, applied ``steps`` times to BFP-4 stored weights (momentum 0), leaves every
    nearest-rounded weight unchanged, while stochastic rounding moves the weights by the sum
    of the updates in expectation (mean over the ~500 elements with mantissa 1..3, which can
    grow by a few ulps without saturating or changing their block's exponent)."""
    from lowbit.sim.bfp import quantise
    moved = {}
    for variant in ("bfp4-nearest", "bfp4-stochastic"):
        tr = Trainer(variant_config(variant, hidden=(16,), momentum=0.0, lr=0.5),
                     GoldenBackend(), data=small)
        w0 = [w.copy() for w in tr.weights]
        q = [quantise(w.reshape(-1, 16), block=16, width=4) for w in w0]
        ulp = [np.repeat(2.0 ** e.reshape(-1), 16).reshape(w.shape)
               for w, (_, e) in zip(w0, q, strict=True)]
        # Grow |w| by `fraction` of an ulp per step: W ← W − lr·(dW) with dW = −δ/lr.
        delta = [np.sign(w) * u * fraction for w, u in zip(w0, ulp, strict=True)]
        for _ in range(steps):
            tr._update([(-d / tr.cfg.lr, np.zeros(len(b)))
                        for d, b in zip(delta, tr.biases, strict=True)])
        sel = [(np.abs(m) >= 1) & (np.abs(m) <= 3) for m, _ in q]
        grow = np.concatenate([((b - a) * np.sign(a) / u)[s.reshape(a.shape)]
                               for a, b, u, s in zip(w0, tr.weights, ulp, sel, strict=True)])
        moved[variant] = grow, [np.array_equal(a, b) for a, b in
                                zip(w0, tr.weights, strict=True)]
    grow, same = moved["bfp4-nearest"]
    assert all(same) and np.all(grow == 0)
    grow, same = moved["bfp4-stochastic"]
    expected = steps * fraction
    assert not any(same) and len(grow) > 400
    # Each step rounds up with probability `fraction`: grow ~ Binomial(steps, fraction),
    # variance <= 0.9; 3.5 standard deviations of the mean of > 400 elements is < 0.16.
    assert abs(np.mean(grow) - expected) < 0.16
    assert np.all(grow >= 0) and np.all(grow == np.round(grow))


# -- precision policies --------------------------------------------------------------------------

def test_mixed_policy_schedule_and_controller():
    sched = PrecisionSchedule("a6w6", epochs={0: "a4w4", 2: "a6w6"}, layers={0: "a8w8"})
    ctl = ThresholdController({(1, "a"): 4, (1, "w"): 4, (0, "a"): 6, (0, "w"): 6},
                              low=0.03, high=0.12)
    pol = MixedPolicy(sched, ctl)
    assert pol.widths(0, 0) == Widths(6, 6) and pol.widths(1, 0) == Widths(4, 4)
    pol.observe(1, "w", 0.2)                      # too much error: one more bit
    pol.observe(1, "a", 0.05)                     # in between: unchanged
    decisions = pol.end_epoch(0)
    assert [(k, w) for k, _, w in decisions] == [((1, "a"), 4), ((1, "w"), 5)]
    assert pol.widths(1, 1) == Widths(4, 5)
    assert pol.widths(1, 2) == Widths(6, 6)       # the schedule is the floor
    assert FixedPolicy((4, 4)).widths(3, 9) == Widths(4, 4)


def test_mixed_run_records_widths_and_decisions(small):
    cfg = variant_config("mixed", epochs=2, hidden=(16, 16))
    tr = Trainer(cfg, GoldenBackend(), data=small)
    rec = tr.run_epoch(limit=2)
    assert rec["widths"] == ["a6w6", "a4w4", "a6w6"]
    assert {tuple(k) for k, _, _ in rec["controller"]} == \
        {(layer, kind) for layer in range(3) for kind in "aw"}


class _WidthRecorder(GoldenBackend):
    def __init__(self):
        super().__init__()
        self.widths = []

    def bfp_matvec(self, *args, **kw):
        self.widths.append(kw["width"])
        return super().bfp_matvec(*args, **kw)


def test_mlp_widths_change_within_an_epoch(small):
    """Per-step precision in the MLP loop: the schedule's step table, then the step controller
    (fed every step's batch accuracy and loss) move the widths between steps of one epoch.
    A step is 8 column products (3 forward, 3 weight gradients, 2 backward); the first is the
    input layer's forward product, at the layer's activation width."""
    floor = ThresholdController(2, low=0.0, high=10.0)        # never above the schedule
    pol = MixedPolicy(PrecisionSchedule("a8w8", steps={0: "a8w8", 1: "a4w4"}), floor)
    be = _WidthRecorder()
    tr = Trainer(variant_config("bfp8", policy=pol, epochs=1, hidden=(16, 16)), be, small)
    tr.run_epoch(limit=3)
    assert be.widths[0:24:8] == [8, 4, 4]
    ctl = StepController(warmup=1, cooldown=0, patience=1, min_offset=-2, accuracy_drop=1,
                         speed_drop=None)
    pol = MixedPolicy(PrecisionSchedule("a8w8"), ThresholdController(2, low=0.0, high=10.0),
                      ctl)
    be = _WidthRecorder()
    tr = Trainer(variant_config("bfp8", policy=pol, epochs=1, hidden=(16, 16)), be, small)
    tr.run_epoch(limit=3)
    assert be.widths[0:24:8] == [8, 8, 7]
    assert [h[5] for h in ctl.history] == ["warmup", "relax", "relax"]
    assert tr.batch_acc == ctl.history[-1][1]                 # the batch accuracy it was fed
    with pytest.raises(ValueError, match="Layer 1: .*, not float32"):
        MixedPolicy(PrecisionSchedule("a8w8", layers={1: "float32"}), floor).widths(1, 0)


def test_validation_split(data):
    x_fit, y_fit, x_val, y_val = validation_split(data)
    assert (len(x_fit), len(x_val)) == (1006, 251)
    rows = {tuple(r) + (int(y),) for r, y in zip(data[0], data[1], strict=True)}
    fit = [tuple(r) + (int(y),) for r, y in zip(x_fit, y_fit, strict=True)]
    val = [tuple(r) + (int(y),) for r, y in zip(x_val, y_val, strict=True)]
    assert set(fit) | set(val) <= rows and len(fit) + len(val) == len(data[0])
    test = {tuple(r) for r in data[2]}
    assert not any(r[:-1] in test and r in set(fit) & set(val) for r in fit)
    again = validation_split(data)
    assert all(np.array_equal(a, b) for a, b in zip(again, (x_fit, y_fit, x_val, y_val),
                                                       strict=True))
    other = validation_split(data, seed=1)
    assert not np.array_equal(other[2], x_val)


def test_config_validation(small):
    with pytest.raises(ValueError, match="Variant must be one of"):
        variant_config("bfp3")
    with pytest.raises(ValueError, match="Unknown training option"):
        variant_config("bfp8", learning_rate=1)
    with pytest.raises(ValueError, match="needs a backend"):
        Trainer(variant_config("bfp8"), None, data=small)
    with pytest.raises(ValueError, match="multiples of the block size"):
        Trainer(variant_config("bfp8", batch=20), GoldenBackend(), data=small)
    with pytest.raises(ValueError, match="Batch size 512 exceeds the column's longest product, "
                                         "256"):
        Trainer(variant_config("bfp8", batch=512), GoldenBackend(), data=small)


@pytest.mark.parametrize("overrides, message", [
    (dict(hidden=(0,)), "Hidden layer sizes must be integers between 1 and 4096, not 0"),
    (dict(hidden=()), "Hidden layer sizes must be a non-empty sequence"),
    (dict(hidden=(16.5,)), "not 16.5"),
    (dict(lr=float("nan")), "Learning rate must be a finite number in (0, 10], not nan"),
    (dict(lr=float("inf")), "not inf"),
    (dict(lr=-1), "not -1"),
    (dict(lr=1e6), "not 1000000.0"),
    (dict(seed=-5), "Seed must be an integer between 0 and 2^64-1, not -5"),
    (dict(seed=1.5), "not 1.5"),
    (dict(batch=0), "Batch size must be an integer of at least 1, not 0"),
    (dict(epochs=0), "Epochs must be an integer of at least 1, not 0"),
    (dict(momentum=1.0), "Momentum must be a finite number in [0, 1), not 1.0"),
    (dict(init_scale=0), "Init scale must be a finite positive number, not 0"),
])
def test_options_are_checked_with_the_value_named(overrides, message):
    with pytest.raises(ValueError) as e:
        variant_config("bfp8", **overrides)
    assert message in str(e.value)
    cfg = variant_config("bfp8")
    for key, value in overrides.items():
        setattr(cfg, key, value)
    with pytest.raises(ValueError):                 # Trainer checks a hand-made config too
        check_config(cfg)


# -- device backend ------------------------------------------------------------------------------

class _ReferenceDevice:
    """A stand-in accelerator built from the unvectorised golden models: ColumnModel per
    tile, its own rounding PRNG loaded from the PRNG_SEED registers, the grand model."""

    def __init__(self):
        self.column = ColumnModel()
        self.regs = {}
        self.prng = None
        self.grand_model = None

    def write_reg(self, name, value):
        self.regs[name] = value
        if name == "PRNG_SEED3":
            s0 = self.regs["PRNG_SEED0"] | self.regs["PRNG_SEED1"] << 32
            s1 = self.regs["PRNG_SEED2"] | self.regs["PRNG_SEED3"] << 32
            self.prng = Xoroshiro128aox.from_state(load_state([[s0, s1]]))

    def grand_seed(self, seed, mode=None):
        self.grand_model = GrandModel(seed, 2)
        self.pending = []

    def grand_samples(self, n):
        while len(self.pending) < n:
            self.pending += list(self.grand_model.values("normal", 1)[0])
        out, self.pending = self.pending[:n], self.pending[n:]
        return np.array(out, dtype=np.float16)

    def bfp_matvec(self, w_m, w_e, x_m, x_e, *, bias_m=None, bias_e=None, width=8,
                   rounding="nearest", exp_mode="max", fixed_exp=0):
        n = self.column.lanes
        tiles = -(-len(w_m) // n)
        pad = tiles * n - len(w_m)
        w_m, w_e = np.pad(w_m, ((0, pad), (0, 0))), np.pad(w_e, ((0, pad), (0, 0)))
        ms, es = [], []
        for t in range(tiles):
            sl = slice(t * n, (t + 1) * n)
            kw = {}
            if bias_m is not None:
                kw = dict(bias_m=np.pad(bias_m, (0, pad))[sl], bias_e=np.pad(bias_e, (0, pad))[sl])
            rand = None
            if rounding == "stochastic":
                rand = [int(self.prng.next()[0]) & 0xFF for _ in range(n)]
            m, e = self.column.matvec(w_m[sl], w_e[sl], x_m, x_e, width=width, rounding=rounding,
                                      exp_mode=exp_mode, fixed_exp=fixed_exp, rand=rand, **kw)
            ms.append(m)
            es.append(e)
        return np.concatenate(ms)[:len(w_m) - pad], np.array(es)

    def discrete_matvec(self, w_codes, x_m, *, book, bias=None, shift=0):
        layer = DiscreteDense(np.asarray(w_codes), book, bias=bias, shift=shift)
        return discrete_dense(layer, x_m, lanes=4)


@pytest.mark.parametrize("variant", ["bfp4-stochastic", "discrete"])
def test_device_backend_call_order_is_bit_exact(variant, small):
    """DeviceBackend's per-vector calls (and rounding-PRNG draw order) reproduce the golden
    backend bit for bit, on a device made of the unvectorised models."""
    cfg = dict(hidden=(16,), batch=16)
    gold = Trainer(variant_config(variant, **cfg), GoldenBackend(), data=small)
    dev = Trainer(variant_config(variant, **cfg), DeviceBackend(_ReferenceDevice()), data=small)
    for k in (0, 16):
        lg = gold.step(small[0][k:k + 16], small[1][k:k + 16])
        ld = dev.step(small[0][k:k + 16], small[1][k:k + 16])
        assert lg == ld
    for a, b in zip(gold.weights, dev.weights, strict=True):
        assert np.array_equal(a, b)


def test_device_backend_needs_the_product_api():
    with pytest.raises(NotImplementedError, match="bfp_matvec"):
        DeviceBackend(object())


def _model_accelerator():
    from lowbit.boards.driver import Accelerator
    return Accelerator.model(sequencer=True)


@pytest.mark.parametrize("variant", ["bfp8", "bfp4-stochastic", "discrete"])
def test_model_transport_steps_equal_golden(variant, small):
    accel = _model_accelerator()
    dev_backend = DeviceBackend(accel)
    gold_backend = GoldenBackend(dev_backend.column, disc_lanes=dev_backend.disc_lanes,
                                 disc_acc_width=dev_backend.disc_acc_width,
                                 grand_lanes=dev_backend.grand_lanes)
    cfg = dict(hidden=(16,), batch=16)
    gold = Trainer(variant_config(variant, **cfg), gold_backend, data=small)
    dev = Trainer(variant_config(variant, **cfg), dev_backend, data=small)
    for k in (0, 16):
        assert gold.step(small[0][k:k + 16], small[1][k:k + 16]) == \
            dev.step(small[0][k:k + 16], small[1][k:k + 16])
    for a, b in zip(gold.weights, dev.weights, strict=True):
        assert np.array_equal(a, b)


@pytest.mark.slow
def test_simulated_top_step_equals_golden(small, require_tool):
    """One stochastic BFP-4 training step (130 column products) on the compiled top."""
    from lowbit.boards.demo import connect, cxxrtl_available
    require_tool(None if cxxrtl_available() else "no C++ compiler for the CXXRTL top "
                 "(Amaranth's simulator is too slow for a training step)")
    accel, _ = connect(simulator="cxxrtl")
    dev_backend = DeviceBackend(accel)
    gold_backend = GoldenBackend(dev_backend.column, disc_lanes=dev_backend.disc_lanes,
                                 disc_acc_width=dev_backend.disc_acc_width,
                                 grand_lanes=dev_backend.grand_lanes)
    cfg = dict(hidden=(16,), batch=16)
    gold = Trainer(variant_config("bfp4-stochastic", **cfg), gold_backend, data=small)
    dev = Trainer(variant_config("bfp4-stochastic", **cfg), dev_backend, data=small)
    assert gold.step(small[0][:16], small[1][:16]) == dev.step(small[0][:16], small[1][:16])
    for a, b in zip(gold.weights, dev.weights, strict=True):
        assert np.array_equal(a, b)


# -- lowbit train digits -------------------------------------------------------------------------

def _cli(argv):
    import argparse

    from lowbit.boards.train import add_parser
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_golden(capsys):
    assert _cli(["train", "digits", "--backend", "golden", "--epochs", "2", "--steps", "3",
                 "--hidden", "16", "--json"]) == 0
    out = capsys.readouterr()
    import json
    res = json.loads(out.out)
    assert res["backend"] == "golden" and len(res["history"]) == 2
    assert "epoch   2/2: test accuracy" in out.err


def test_cli_model_is_checked_against_golden(capsys):
    assert _cli(["train", "digits", "--backend", "model", "--variant", "mixed", "--epochs",
                 "2", "--steps", "1", "--hidden", "16", "--batch", "16"]) == 0
    err = capsys.readouterr().err
    assert err.count("bit-exact") == 2


def test_cli_usage_errors(capsys):
    with pytest.raises(SystemExit) as e:            # argparse types: the option is named
        _cli(["train", "digits", "--backend", "golden", "--hidden", "16,x"])
    assert e.value.code == 2 and "argument --hidden" in capsys.readouterr().err
    assert _cli(["train", "digits", "--backend", "golden", "--batch", "20"]) == 2
    assert "multiples of the block size" in capsys.readouterr().err
    assert _cli(["train", "digits", "--backend", "golden", "--batch", "100000"]) == 2
    assert "exceeds the column's longest product" in capsys.readouterr().err
    assert _cli(["train", "digits", "--backend", "golden", "--board", "icebreaker"]) == 2


# -- a device without a grand unit (the iCEBreaker) ------------------------------------------

def _board_model(board):
    from lowbit.boards.demo import board_top
    from lowbit.boards.driver import Accelerator
    return Accelerator.model(**board_top(board))


def test_host_initialisation_without_a_grand_unit(small):
    """The iCEBreaker's top has no grand unit: the initial weights come from its golden model
    on the host (same seed, the design's lanes), i.e. what a grand unit would give."""
    from lowbit.boards.driver import Accelerator
    accel = _board_model("icebreaker")
    assert not accel.has_engine("grand")
    dev_backend = DeviceBackend(accel)
    assert dev_backend.host_grand and dev_backend.grand_lanes == 1
    cfg = dict(hidden=(16,), batch=16)
    dev = Trainer(variant_config("bfp8", **cfg), dev_backend, data=small)
    gold = Trainer(variant_config("bfp8", **cfg), GoldenBackend(grand_lanes=1), data=small)
    for a, b in zip(dev.weights, gold.weights, strict=True):
        assert np.array_equal(a, b)
    # a device with a 1-lane grand unit (hx8k's top) draws the same numbers on the device
    hx8k = DeviceBackend(_board_model("hx8k"))
    assert not hx8k.host_grand
    hx8k.seed_grand(1)
    dev_backend.seed_grand(1)
    assert np.array_equal(hx8k.grand(40), dev_backend.grand(40))
    assert not DeviceBackend(Accelerator.model(sequencer=True)).host_grand


def test_cli_trains_on_the_default_board_model(capsys):
    assert _cli(["train", "digits", "--backend", "model", "--board", "icebreaker", "--epochs",
                 "1", "--steps", "1", "--hidden", "16", "--batch", "16", "--json"]) == 0
    out = capsys.readouterr()
    import json
    assert json.loads(out.out)["host_grand"] is True
    lines = [ln for ln in out.err.splitlines() if "no grand unit" in ln]
    assert len(lines) == 1 and "same generator on the host (lowbit.sim.grand, 1 lane" in lines[0]
    assert "bit-exact" in out.err


@pytest.mark.parametrize("board, variant, reason", [
    ("icebreaker", "mixed", "has no stochastic rounding"),
    ("icebreaker", "discrete", "has no discrete unit"),
    ("icebreaker-discrete", "bfp8", "has no BFP column"),
])
def test_cli_refuses_a_variant_the_device_cannot_run(capsys, board, variant, reason):
    assert _cli(["train", "digits", "--backend", "model", "--board", board, "--variant",
                 variant, "--epochs", "1", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert reason in err and "epoch" not in err


def test_progress_counts_every_product(small):
    """The bar's unit: 3L - 1 products per step of an L-layer network; evaluation's are not."""
    from lowbit.boards.train import _Counting
    ticks = []
    backend = _Counting(GoldenBackend())
    backend.tick = lambda: ticks.append(1)
    tr = Trainer(variant_config("bfp8", hidden=(16, 16), batch=16), backend, data=small)
    tr.step(small[0][:16], small[1][:16])
    assert len(ticks) == 3 * 3 - 1
    backend.paused(tr.accuracy)(small[2], small[3])
    assert len(ticks) == 8
