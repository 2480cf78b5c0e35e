"""The windowed mean/σ exponent predictor of seed 002 claim 1 (``exp_mode="window"``):
golden model (lowbit.sim.bfp_column.WindowPredictor, window_exponent)."""

import math
from collections import Counter

import numpy as np
import pytest

from lowbit.sim.bfp import nan_exponent, quantise
from lowbit.sim.bfp_column import (
    WINDOW_GUARD,
    ColumnModel,
    ExponentPredictor,
    WindowPredictor,
    window_exponent,
)


def product(rng, n=16, block=16, x_shift=0):
    """One product's operands: Gaussian weights and vector, the vector scaled by 2^x_shift."""
    w_m, w_e = quantise(rng.standard_normal((n, block)), block=block)
    x_m, x_e = quantise(rng.standard_normal(block), block=block)
    return w_m.reshape(n, block), w_e, x_m.reshape(block), x_e + x_shift


# -- the seed's worked example, in both predicted modes -----------------------------------------


def test_seed_mu_plus_3sigma_both_modes():
    # Seed 002 [0088]-[0091]: mu = 10, sigma = 0.5, k = 3 -> 11.5 -> e = 3 - (16 - 2) = -11.
    # Window mode: the two values 9.5 and 10.5 (19 and 21 in units of 2^-1) have exactly
    # mu = 10 and sigma = 0.5 (population).
    assert window_exponent(2, 19 + 21, 19 ** 2 + 21 ** 2, k=3, width=16, vw=17,
                           unit_exp=-1) == -11
    pred = WindowPredictor(width=16, window=512)
    pred.update([19, 21], -1, width=16, k=3, restart=True)
    assert pred.state() == {"count": 2, "s1": 40, "s2": 802, "hist_exp": -1, "unit_exp": -11}
    # k = 2 gives 11 -> still -11; k = 1: 10.5 -> -11; a spread twice as wide, k = 3: 13 -> -11;
    # mu + k·sigma = 16 exactly (values 14, 18 in units 2^-1: mu = 8, sigma = 1, k = 8 is out of
    # range, so mu = 13, sigma = 1: 24, 28 -> 13 + 3 = 16) -> floor(log2 16) = 4 -> -10.
    assert window_exponent(2, 24 + 28, 24 ** 2 + 28 ** 2, k=3, width=16, vw=17,
                           unit_exp=-1) == -10
    assert window_exponent(2, 24 + 28, 24 ** 2 + 28 ** 2, k=2, width=16, vw=17,
                           unit_exp=-1) == -11
    # EWMA mode: the same two samples (10.5 at the exponent predicted after the first one)
    # give mu = 10, dev = 0.5 (stat_shift = 1: weights 1, 1/2) and the same exponent.
    ewma = ExponentPredictor(width=16, stat_shift=1)
    ewma.update(19, -1, width=16, k=3, restart=True)
    assert ewma.unit_exp == -11                      # 9.5: floor(log2) = 3
    ewma.update(21 << 10, -11, width=16, k=3)         # 10.5 in units of 2^-11
    fs = ewma.frac
    scale = 2.0 ** (ewma.unit_exp - fs)
    assert (ewma.mu * scale, ewma.dev * scale) == (10.0, 0.5)
    assert ewma.unit_exp == -11


# -- the squared-domain comparison --------------------------------------------------------------


@pytest.mark.parametrize("width", [2, 8, 16])
def test_window_exponent_is_floor_log2_of_mu_plus_k_sigma(width):
    rng = np.random.default_rng(width)
    vw = width + 1
    checked = 0
    for _ in range(400):
        n = int(rng.integers(1, 40))
        xs = rng.integers(0, 1 << int(rng.integers(1, vw + 1)), n)
        k = int(rng.integers(1, 8))
        s1, s2 = int(xs.sum()), int((xs * xs).sum())
        e = window_exponent(n, s1, s2, k=k, width=width, vw=vw, unit_exp=3)
        if s1 == 0:
            assert e is None
            continue
        p = xs.mean() + k * xs.std()
        lg = math.log2(p)
        if abs(lg - round(lg)) < 1e-9:
            continue                                  # float64 cannot decide a boundary
        assert e == 3 + max(math.floor(lg), 0) - (width - 2)
        checked += 1
    assert checked > 300
    # Exactly on a power of two: mu + k·sigma = 8 (values 6, 10: mu 8, sigma 2, k = 0 is not
    # allowed; values 4, 8: mu 6, sigma 2, k = 1 -> 8) -> floor(log2 8) = 3.
    assert window_exponent(2, 12, 80, k=1, width=width, vw=vw) == 3 - (width - 2)
    # Below 1 unit: clamped to L = 0.
    assert window_exponent(8192, 1, 1, k=1, width=width, vw=vw) == 0 - (width - 2)


def test_window_exponent_rejects_inconsistent_sums():
    with pytest.raises(ValueError, match="inconsistent"):
        window_exponent(2, 10, 20, k=1, width=8, vw=9)
    with pytest.raises(ValueError, match="not below"):
        window_exponent(1, 1 << 20, 1 << 40, k=7, width=8, vw=9)


# -- what enters the window; the sliding sums ---------------------------------------------------


def test_sliding_window_holds_the_last_values():
    rng = np.random.default_rng(5)
    pred = WindowPredictor(width=8, window=512)
    stream = []
    for i in range(60):
        xs = rng.integers(0, 128, 16).tolist()
        pred.update(xs, pred.hist_exp if i else 0, width=8, k=3, restart=i == 0)
        stream += xs
        want = stream[-512:]
        assert list(pred.fifo) == want
        assert pred.count == len(want) == min(len(stream), 512)
        assert (pred.s1, pred.s2) == (sum(want), sum(v * v for v in want))
        assert pred.unit_exp == window_exponent(len(want), sum(want),
                                                sum(v * v for v in want), k=3, width=8, vw=9)


def test_values_in_units_of_the_history_exponent_and_rebase():
    pred = WindowPredictor(width=8, window=512)
    pred.update([100, 3], 5, width=8, k=3, restart=True)
    assert pred.hist_exp == 5 and list(pred.fifo) == [100, 3]
    pred.update([100, 3], 7, width=8, k=3)              # e4 - h = 2 = G: exact left shift
    assert list(pred.fifo)[2:] == [400, 12] and not pred.rebased
    pred.update([100, 3], 3, width=8, k=3)              # e4 - h = -2: floor right shift
    assert list(pred.fifo)[4:] == [25, 0] and not pred.rebased
    assert max(pred.fifo) < 1 << pred.vw
    pred.update([100, 3], 5 + WINDOW_GUARD + 1, width=8, k=3)     # too far: a new history
    assert pred.rebased and pred.hist_exp == 8 and list(pred.fifo) == [100, 3]
    pred.update([7], 8 - WINDOW_GUARD - 1, width=8, k=3)
    assert pred.rebased and pred.state()["count"] == 1


def test_window_not_yet_full_uses_its_count():
    rng = np.random.default_rng(2)
    model = ColumnModel(window=1024)
    ops = product(rng)
    y, e4 = model.matvec(*ops, exp_mode="window")
    pred = model.window_predictor
    assert pred.event == "max" and pred.count == 16 and pred.hist_exp == e4
    xs = np.abs(y)
    assert pred.unit_exp == window_exponent(16, xs.sum(), (xs * xs).sum(), k=3, width=8, vw=9,
                                            unit_exp=e4)


def test_all_zero_values_clear_the_history():
    pred = WindowPredictor(width=8, window=512)
    pred.update([0] * 16, 3, width=8, k=3, restart=True)
    assert pred.count == 0 and not pred.usable


# -- selection, fallback and history clear (claims 23, 30, 31) ----------------------------------


@pytest.mark.parametrize("jump, event", [(6, "overflow"), (-6, "underflow")])
def test_scale_jump_falls_back_to_max_rule_and_clears(jump, event):
    rng = np.random.default_rng(7)
    model = ColumnModel(lanes=16, block=16, max_blocks=1, window=512)
    ref = ColumnModel(lanes=16, block=16, max_blocks=1)
    events = []
    for i in range(60):
        ops = product(rng, x_shift=jump if i >= 30 else 0)
        got = model.matvec(*ops, exp_mode="window")
        want = ref.matvec(*ops, exp_mode="max")
        events.append(model.window_predictor.event)
        if i == 30:
            # The max rule's output; the history restarts with this product's 16 values.
            assert (got[0].tolist(), got[1]) == (want[0].tolist(), want[1])
            assert model.window_predictor.count == 16
            assert model.window_predictor.hist_exp == want[1]
    assert events[0] == "max" and events[30] == event
    assert Counter(events[1:30])["predicted"] >= 27
    assert Counter(events[31:])["predicted"] >= 27


def test_zero_nan_products_keep_history_other_modes_and_clear_empty_it():
    rng = np.random.default_rng(4)
    model = ColumnModel(lanes=16, block=16, window=512)
    for _ in range(5):
        model.matvec(*product(rng), exp_mode="window")
    pred = model.window_predictor
    state = pred.state()
    w_m, w_e, x_m, x_e = product(rng)
    y, e4 = model.matvec(w_m, w_e, np.zeros_like(x_m), x_e, exp_mode="window")
    assert pred.event == "zero" and e4 == state["unit_exp"] and pred.state() == state
    x_e[0] = nan_exponent(8)
    y, e4 = model.matvec(w_m, w_e, x_m, x_e, exp_mode="window")
    assert pred.event == "nan" and e4 == nan_exponent(8) and pred.state() == state
    # The EWMA mode clears the window's history, and the window mode the EWMA's.
    model.matvec(*product(rng), exp_mode="predicted")
    assert pred.count == 0 and model.predictor.count == 1
    model.matvec(*product(rng), exp_mode="window")
    assert pred.event == "max" and model.predictor.count == 0
    for mode in ("max", "fixed"):
        model.matvec(*product(rng), exp_mode="window")
        assert pred.count == 32
        model.matvec(*product(rng), exp_mode=mode)
        assert pred.count == 0
        model.matvec(*product(rng), exp_mode="window")
    model.clear_history()
    assert pred.count == 0
    model.matvec(*product(rng), exp_mode="window")
    assert pred.event == "max"


def test_window_mode_without_window_predictor_is_max_rule():
    rng = np.random.default_rng(9)
    model, ref = ColumnModel(), ColumnModel()
    for _ in range(4):
        ops = product(rng)
        got, want = model.matvec(*ops, exp_mode="window"), ref.matvec(*ops, exp_mode="max")
        assert (got[0].tolist(), got[1]) == (want[0].tolist(), want[1])


def test_batch_equals_products_in_order():
    rng = np.random.default_rng(11)
    w_m, w_e = quantise(rng.standard_normal((40, 32)), block=16)
    x_m, x_e = quantise(rng.standard_normal((30, 32)), block=16)
    w_m, x_m = w_m.reshape(40, 32), x_m.reshape(30, 32)
    a = ColumnModel(window=512)
    m, e = a.matvec_batch(w_m, w_e, x_m, x_e, exp_mode="window", pred_tol=1)
    b = ColumnModel(window=512)
    wp = np.pad(w_m, ((0, 8), (0, 0)))
    wep = np.pad(w_e, ((0, 8), (0, 0)))
    for v in range(30):
        for t in range(3):
            y, e4 = b.matvec(wp[16 * t:16 * t + 16], wep[16 * t:16 * t + 16], x_m[v], x_e[v],
                             exp_mode="window", pred_tol=1)
            rows = slice(16 * t, min(16 * t + 16, 40))
            assert m[v, rows].tolist() == y[:rows.stop - rows.start].tolist()
            assert (e[v, rows] == e4).all()
    assert a.window_predictor.state() == b.window_predictor.state()


# -- claim 21: the error magnitude against a predetermined value --------------------------------


def test_claim21_error_tolerance_by_hand():
    # Values 100 (units 2^0), W = 8: L = 6 -> e_new = 6 - 6 = 0.
    for e4, tol, want in [(0, 0, 0), (1, 0, 0), (1, 1, 1), (2, 1, 0), (2, 2, 2), (2, 7, 2)]:
        pred = WindowPredictor(width=8, window=512)
        pred.update([100 >> e4] * 4, e4, width=8, k=1, tol=tol, restart=True)
        # e_prev = e4: kept if it loses at most `tol` bits of the predicted maximum.
        assert pred.unit_exp == want, (e4, tol)
    # A smaller e_prev (the predicted maximum would saturate) is never kept: values 127 and 0,
    # k = 7: mu + 7·sigma = 508 -> L = 8 -> e_new = 2 > e_prev = 0.
    pred = WindowPredictor(width=8, window=512)
    pred.update([127, 0], 0, width=8, k=7, tol=7, restart=True)
    assert pred.unit_exp == 2


def test_claim21_error_tolerance_steadies_the_exponent():
    # On a stationary stream, a tolerance of one bit changes the exponent less often and never
    # makes it finer than the plain rule's (it only keeps a coarser previous exponent).
    def run(tol):
        rng = np.random.default_rng(3)
        model = ColumnModel(max_blocks=1, window=512)
        out = []
        for _ in range(200):
            out.append(model.matvec(*product(rng), exp_mode="window", pred_k=2,
                                    pred_tol=tol)[1])
        return np.array(out)
    plain, tol = run(0), run(1)
    changes = (np.count_nonzero(np.diff(plain)), np.count_nonzero(np.diff(tol)))
    assert changes[1] < changes[0] // 2, changes
    assert tol.mean() >= plain.mean()


# -- parameter validation -----------------------------------------------------------------------


@pytest.mark.parametrize("window, exc, msg", [
    (100, ValueError, "Window length must be one of 512, 1024, 8192, not 100"),
    (0, ValueError, "Window length must be one of 512, 1024, 8192, not 0"),
    (512.0, TypeError, "Window length must be one of 512, 1024, 8192, not 512.0"),
    (True, TypeError, "Window length must be one of 512, 1024, 8192, not True"),
    ("512", TypeError, "Window length must be one of 512, 1024, 8192, not '512'"),
])
def test_window_validation(window, exc, msg):
    with pytest.raises(exc, match=msg):
        ColumnModel(window=window)
    with pytest.raises(exc, match=msg):
        WindowPredictor(window=window)


def test_runtime_validation():
    model = ColumnModel(lanes=4, block=4, window=512)
    ops = product(np.random.default_rng(0), 4, 4)
    with pytest.raises(ValueError, match="Error tolerance must be an integer between 0 and 7, "
                                         "not 8"):
        model.matvec(*ops, exp_mode="window", pred_tol=8)
    with pytest.raises(TypeError, match="Error tolerance"):
        model.matvec(*ops, exp_mode="window", pred_tol=1.0)
    with pytest.raises(ValueError, match="Spread multiple must be an integer between 1 and 7"):
        model.matvec(*ops, exp_mode="window", pred_k=0)
    pred = WindowPredictor(width=8)
    with pytest.raises(ValueError, match="Sample must be an integer between 0 and 7"):
        pred.update([8], 0, width=4, restart=True)
    with pytest.raises(ValueError, match="Mantissa width must be an integer between 2 and 16"):
        WindowPredictor(width=17)


# -- gateware: the predictor alone (lowbit.hw.bfp.WindowPredictor) ------------------------------


def run_window_rtl(products, *, width=8, exp_bits=8, window=512, seed=0):
    """Drive :class:`lowbit.hw.bfp.WindowPredictor` with ``products`` and compare every state
    with the model after each one.

    ``products``: dicts with ``samples`` (signed mantissas), ``e4``, ``restart``, ``w``, ``k``,
    ``tol`` and optionally ``clear`` (a clear pulse before the product). ``restart`` is forced
    when the history is not usable (as the output unit does).
    """
    from amaranth.sim import Simulator

    from lowbit.hw.bfp.window import WindowPredictor as RTL
    dut = RTL(width=width, exp_bits=exp_bits, window=window)
    model = WindowPredictor(width=width, exp_bits=exp_bits, window=window)
    rng = np.random.default_rng(seed)
    log = []

    async def bench(ctx):
        for p in products:
            if p.get("clear"):
                ctx.set(dut.clear, 1)
                await ctx.tick()
                ctx.set(dut.clear, 0)
                await ctx.tick().repeat(2)
                model.clear()
            usable = bool(ctx.get(dut.usable))
            assert usable == model.usable
            restart = p["restart"] or not usable
            e4 = p["e4"] if restart else model.unit_exp
            ctx.set(dut.restart, restart)
            ctx.set(dut.e4, p["e4"])
            ctx.set(dut.width, p["w"])
            ctx.set(dut.k, p["k"])
            ctx.set(dut.tol, p["tol"])
            ctx.set(dut.begin, 1)
            await ctx.tick()
            ctx.set(dut.begin, 0)
            await ctx.tick().repeat(3)
            for s in p["samples"]:
                while rng.random() < 0.3:
                    await ctx.tick()
                ctx.set(dut.sample_valid, 1)
                ctx.set(dut.sample, int(s))
                await ctx.tick()
                ctx.set(dut.sample_valid, 0)
            await ctx.tick()
            ctx.set(dut.commit, 1)
            await ctx.tick()
            ctx.set(dut.commit, 0)
            cycles = 1
            while ctx.get(dut.busy):
                await ctx.tick()
                cycles += 1
            model.update([abs(int(s)) for s in p["samples"]], e4, width=p["w"], k=p["k"],
                         tol=p["tol"], restart=restart)
            got = (ctx.get(dut.count), bool(ctx.get(dut.usable)))
            assert got == (model.count, model.usable), (len(log), got, model.state())
            if model.count:
                got = (ctx.get(dut.s1), ctx.get(dut.s2), ctx.get(dut.hist_exp))
                assert got == (model.s1, model.s2, model.hist_exp), (len(log), got)
            if model.usable:
                assert ctx.get(dut.unit_exp) == model.unit_exp, (len(log), model.state())
            log.append((model.count, model.unit_exp if model.usable else None, cycles))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return log


def _random_products(rng, count, *, width=8, lanes=16, scale_steps=(), zero_at=(),
                     p_width=0.3, p_restart=0.05):
    out, scale = [], 0
    for i in range(count):
        scale += dict(scale_steps).get(i, 0)
        w = width if rng.random() >= p_width else int(rng.integers(2, width + 1))
        mx = (1 << (w - 1)) - 1
        y = np.clip(np.round(rng.standard_normal(lanes) * mx / 3.2 * 2.0 ** scale), -mx, mx)
        if i in zero_at:
            y[:] = 0
        out.append({"samples": y.astype(int).tolist(), "e4": int(rng.integers(-5, 6)),
                    "restart": bool(rng.random() < p_restart), "w": w,
                    "k": int(rng.integers(1, 8)) if rng.random() < 0.3 else 3,
                    "tol": int(rng.integers(0, 3)) if rng.random() < 0.3 else 0})
    return out


def test_rtl_window_matches_model_random():
    # 48 products of 16 samples: the 512-value window fills at product 32 and then slides;
    # random restarts, runtime widths, k, tolerances and re-bases (e4 given on restarts).
    rng = np.random.default_rng(1)
    log = run_window_rtl(_random_products(rng, 30, p_width=0.5, p_restart=0.1), seed=1)
    assert len({c for c, _, _ in log}) > 5
    # Then a stationary stream that fills the window and slides it.
    # A restart, and the window fills again over the old contents.
    prods = _random_products(rng, 74, p_width=0, p_restart=0)
    for p in prods:
        p["k"], p["tol"] = 3, 0
    prods[40]["restart"] = True
    log = run_window_rtl(prods, seed=4)
    counts = [c for c, _, _ in log]
    assert counts[31:40] == [512] * 9 and counts[40] == 16 and counts[-2:] == [512] * 2
    assert all(e is not None for _, e, _ in log)


def test_rtl_window_edge_cases():
    rng = np.random.default_rng(2)
    prods = _random_products(rng, 14, scale_steps={5: -3, 9: 3}, zero_at=(3, 11), p_width=0)
    for p in prods:
        p["restart"], p["k"], p["tol"] = False, 3, 0
    prods[3]["restart"] = True          # all-zero values only: S1 = 0 empties the history
    prods[7]["clear"] = True            # a history clear (pred_clear / another mode)
    prods[12]["restart"] = True         # the fallback of claims 23/30/31: a new history
    prods[12]["e4"] = 40
    prods[13]["e4"] = -40
    log = run_window_rtl(prods, seed=2)
    # A history of zeros only is emptied (S1 = 0); zeros in a history are values like others;
    # the clear and the restart start new histories; products 8 and 9's exponents (the
    # predictions) are 3 below their histories': re-bases.
    counts = [c for c, _, _ in log]
    assert log[3][:2] == (0, None) and counts[4:8] == [16, 32, 48, 16]
    assert counts[8:12] == [16, 16, 32, 48] and log[12][:2] == (16, 40)


def test_rtl_window_wide_mantissa_short_exponent():
    rng = np.random.default_rng(3)
    run_window_rtl(_random_products(rng, 10, width=16, lanes=8), width=16, exp_bits=5,
                   window=1024, seed=3)


def test_rtl_window_boundaries():
    def prod(samples, **kw):
        return {"samples": samples, "e4": 0, "restart": False, "w": 8, "k": 3, "tol": 0, **kw}
    prods = [
        # mu + k·sigma exactly 8 (values 4 and 8, k = 1): floor(log2 8) = 3 -> e = 3 - 6.
        prod([4, -8], restart=True, k=1),
        # k = 7 on values 127 and 0 predicts 2 bits up: the next values enter shifted left by
        # 2 (the guard bits); the prediction after them lies 3 or more above h: a re-base.
        prod([127, 0], restart=True, k=7),
        prod([127, 0], k=7),
        prod([127, -127, 0], k=7),
        # A prediction exactly G + 1 = 3 above h (k = 4), then one G = 2 above: the first
        # product at it re-bases, the second does not.
        prod([127, 0], restart=True, k=4),
        prod([127, 0], k=4),
        prod([5, 0], k=4),
        prod([127, 0], restart=True, k=7),
        prod([127, 0], k=7),
    ]
    log = run_window_rtl(prods, seed=5)
    assert log[0][1] == -3
    assert [c for c, _, _ in log[1:]] == [2, 4, 3, 2, 4, 2, 2, 4]
    assert log[5][1] == 3


# -- gateware: the column with window (lowbit.hw.bfp.BFPColumn(window=...)) --------------------


WCOL = {"lanes": 4, "block": 4, "max_blocks": 2, "stat_shift": 2, "window": 512}


def stationary_job(rng, n, nb, block, *, shift=0):
    k = nb * block
    w_m, w_e = quantise(rng.standard_normal((n, k)), block=block)
    x_m, x_e = quantise(rng.standard_normal(k), block=block)
    return {"w_m": w_m.reshape(n, k), "w_e": w_e, "x_m": x_m.reshape(k), "x_e": x_e + shift}


def run_column(params, jobs, schedule, *, width=8, valid_prob=0.9, ready_prob=0.8, seed=0):
    """The column (built with ``params``) and the model over ``jobs`` with ``schedule``:
    ``(got, want, window events)``."""
    from test_bfp_rtl import Scheduled  # the per-product exponent selector fixture

    from lowbit.hw.bfp import BFPColumn
    from lowbit.sim.rtl.harness import run_stream
    col = BFPColumn(**params)
    dut = Scheduled(col, schedule)
    n, b = col.lanes, col.block
    nb = len(jobs[0]["x_e"])
    ws, xs = [], []
    for job in jobs:
        for j in range(nb * b):
            ws.append({"m": [int(v) for v in job["w_m"][:, j]],
                       "e": [int(v) for v in job["w_e"][:, j // b]]})
            xs.append({"m": int(job["x_m"][j]), "e": int(job["x_e"][j // b])})

    async def setup(ctx):
        ctx.set(dut.cfg_width, width)
        ctx.set(dut.cfg_fixed_exp, -3)
        ctx.set(dut.cfg_blocks, nb)
        await ctx.tick()

    out = run_stream(dut, {"i_w": ws, "i_x": xs}, {"o": n * len(jobs)}, setup=setup,
                     valid_prob=valid_prob, ready_prob=ready_prob, seed=seed)["o"]
    got = []
    for k in range(len(jobs)):
        chunk = out[k * n:(k + 1) * n]
        assert len({o["e"] for o in chunk}) == 1
        got.append(([o["m"] for o in chunk], chunk[0]["e"]))
    model = ColumnModel(**params)
    want, events = [], []
    for job, row in zip(jobs, schedule, strict=True):
        if row["clear"]:
            model.clear_history()
        y, e = model.matvec(job["w_m"], job["w_e"], job["x_m"], job["x_e"], width=width,
                            exp_mode=row["exp_mode"], fixed_exp=-3, pred_k=row["pred_k"],
                            pred_margin=row["pred_margin"], pred_tol=row["pred_tol"])
        want.append((y.tolist(), e))
        events.append(model.window_predictor.event if model.window_predictor else None)
    return got, want, events


def _sched(count, **kw):
    return [{"exp_mode": "window", "pred_k": 3, "pred_margin": 2, "pred_tol": 0,
             "clear": False, **kw} for _ in range(count)]


def test_column_window_scale_jumps_fall_back():
    # Overflow and underflow fall back to the max rule and clear the history (claims 23, 30,
    # 31); the prediction is used in between, and differs from the max rule.
    rng = np.random.default_rng(41)
    shifts = [0] * 10 + [7] * 8 + [-2] * 8
    jobs = [stationary_job(rng, 4, 2, 4, shift=s) for s in shifts]
    got, want, events = run_column(WCOL, jobs, _sched(len(jobs)), seed=1)
    assert got == want
    assert events[0] == "max" and events[10] == "overflow" and events[18] == "underflow"
    assert events.count("predicted") >= 18
    _, max_rule, _ = run_column(WCOL, jobs, _sched(len(jobs), exp_mode="max"), seed=1)
    assert got != max_rule


def test_column_window_schedule_clear_modes_zero_nan_tolerance():
    rng = np.random.default_rng(42)
    jobs = [stationary_job(rng, 4, 2, 4, shift=int(s)) for s in [0] * 8 + [1] * 16]
    jobs[3]["x_m"][:] = 0                      # all-zero outputs keep the history
    jobs[4]["x_e"][1] = nan_exponent(8)        # so does a NaN product
    sched = _sched(len(jobs))
    sched[7]["clear"] = True                   # pred_clear before product 7
    sched[10]["exp_mode"] = "max"              # other modes clear the window's history
    sched[12]["exp_mode"] = "predicted"
    sched[14]["exp_mode"] = "fixed"
    for i in range(16, 24):
        sched[i]["pred_tol"] = 2               # claim 21's error test
    sched[19]["pred_k"] = 1
    sched[21]["pred_margin"] = 0
    got, want, events = run_column(WCOL, jobs, sched, seed=2)
    assert got == want
    assert events[3:5] == ["zero", "nan"] and events[5] == "predicted"
    assert events[7] == "max" and events[11] == "max" and events[15] == "max"


def test_column_window_runtime_width_and_k():
    rng = np.random.default_rng(43)
    jobs = [stationary_job(rng, 4, 1, 4, shift=int(s))
            for s in np.cumsum(rng.integers(-1, 2, 14))]
    params = {**WCOL, "max_blocks": 1, "window": 1024}
    for width, k in ((3, 1), (6, 7)):
        got, want, events = run_column(params, jobs, _sched(len(jobs), pred_k=k), width=width,
                                       seed=width)
        assert got == want and "predicted" in events


@pytest.mark.slow
def test_column_window_fills_and_slides():
    # 4 outputs per product: the 512-value window is full after 128 products.
    rng = np.random.default_rng(44)
    jobs = [stationary_job(rng, 4, 1, 4) for _ in range(150)]
    params = {**WCOL, "max_blocks": 1}
    got, want, events = run_column(params, jobs, _sched(len(jobs), pred_k=4, pred_margin=4),
                                   valid_prob=1.0, ready_prob=1.0)
    assert got == want and events.count("predicted") == 149
    model = ColumnModel(**params)
    for job in jobs:
        model.matvec(job["w_m"], job["w_e"], job["x_m"], job["x_e"], exp_mode="window",
                     pred_k=4, pred_margin=4)
    assert model.window_predictor.count == 512


def test_column_without_window_mode3_is_the_max_rule():
    from lowbit.hw.bfp import BFPColumn
    assert "cfg_pred_tol" not in BFPColumn().signature.members
    assert BFPColumn().window is None and BFPColumn(window=1024).window == 1024
    rng = np.random.default_rng(45)
    jobs = [stationary_job(rng, 4, 2, 4) for _ in range(4)]
    params = {k: v for k, v in WCOL.items() if k != "window"}
    got, want, _ = run_column(params, jobs, _sched(len(jobs)))
    _, max_rule, _ = run_column(params, jobs, _sched(len(jobs), exp_mode="max"))
    assert got == want == max_rule


@pytest.mark.parametrize("window, exc, msg", [
    (100, ValueError, "Window length must be one of 512, 1024, 8192, not 100"),
    (512.0, TypeError, "Window length must be one of 512, 1024, 8192, not 512.0"),
    (True, TypeError, "Window length must be one of 512, 1024, 8192, not True"),
])
def test_gateware_window_validation(window, exc, msg):
    from lowbit.hw.bfp import BFPColumn
    from lowbit.hw.bfp import WindowPredictor as RTL
    with pytest.raises(exc, match=msg):
        BFPColumn(window=window)
    with pytest.raises(exc, match=msg):
        RTL(width=8, exp_bits=8, window=window)
    with pytest.raises(ValueError, match="Mantissa width must be an integer between 2 and 16"):
        RTL(width=1, exp_bits=8, window=512)
    with pytest.raises(ValueError, match="Exponent width must be an integer between 3 and 12"):
        RTL(width=8, exp_bits=13, window=512)


def test_rtl_window_seed_example():
    # Seed 002 [0088]-[0091] in the gateware: 9.5 and 10.5 (units 2^-1), W = 16, k = 3:
    # mu + 3·sigma = 11.5 -> -11; k = 1: 10.5 -> -11; values 12 and 14 (mu 13, sigma 1):
    # 16 exactly -> -10.
    prod = {"e4": -1, "restart": True, "w": 16, "tol": 0}
    log = run_window_rtl([{**prod, "samples": [19, -21], "k": 3},
                          {**prod, "samples": [-19, 21], "k": 1},
                          {**prod, "samples": [24, 28], "k": 3}], width=16, seed=6)
    assert [e for _, e, _ in log] == [-11, -11, -10]
