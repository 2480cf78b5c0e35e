"""BFPColumn gateware against the golden column model, bit for bit."""

import math
from fractions import Fraction

import numpy as np
import pytest
from amaranth.back import rtlil
from amaranth.hdl import Array, Module, Mux, Signal
from amaranth.lib import wiring
from streams import cached, run_stream

from lowbit.hw.bfp import BFPColumn, ExpMode, column_widths
from lowbit.hw.common import ROUNDING_NAMES, Rounding
from lowbit.hw.registry import build_block
from lowbit.sim.bfp import nan_exponent, quantise
from lowbit.sim.bfp_column import ColumnModel
from lowbit.sim.bfp_ops import add
from lowbit.sim.vectors import bfp_tie_job

ROUNDING = {name: member for member, name in ROUNDING_NAMES.items()}
EXP_MODE = {"max": ExpMode.MAX, "fixed": ExpMode.FIXED, "predicted": ExpMode.PREDICTED,
            "window": ExpMode.WINDOW}


class Scheduled(wiring.Component):
    """Test fixture: a column whose exponent-selector settings change from product to product.

    ``schedule[j]`` is a dict with ``exp_mode``, ``pred_k``, ``pred_margin`` and ``clear`` for
    product ``j`` (and ``pred_tol`` for a column with the window predictor). The settings
    switch when the previous product's last output is accepted (before the next exponent
    selection); ``clear`` pulses ``pred_clear`` at that moment.
    """

    OWN = ("cfg_exp_mode", "cfg_pred_k", "cfg_pred_margin", "cfg_pred_tol", "pred_clear")

    def __init__(self, col, schedule):
        self.col, self.schedule = col, schedule
        self.lanes, self.block, self.width = col.lanes, col.block, col.width
        super().__init__({name: member for name, member in col.signature.members.items()
                          if name not in self.OWN})

    def elaborate(self, platform):
        m = Module()
        m.submodules.col = col = self.col
        for name, member in self.signature.members.items():
            outer, inner = getattr(self, name), getattr(col, name)
            if member.is_signature and member.flow == wiring.In:
                wiring.connect(m, wiring.flipped(outer), inner)
            elif member.is_signature:
                wiring.connect(m, inner, wiring.flipped(outer))
            else:
                m.d.comb += inner.eq(outer)
        sched = self.schedule
        prod = Signal(range(len(sched) + 1))
        cnt = Signal(range(self.lanes))
        last = Signal()
        m.d.comb += last.eq(col.o.valid & col.o.ready & (cnt == self.lanes - 1))
        with m.If(col.o.valid & col.o.ready):
            m.d.sync += cnt.eq(Mux(last, 0, cnt + 1))
            with m.If(last):
                m.d.sync += prod.eq(prod + 1)
        rows = sched + [sched[-1]]
        m.d.comb += [
            col.cfg_exp_mode.eq(Array(EXP_MODE[r["exp_mode"]] for r in rows)[prod]),
            col.cfg_pred_k.eq(Array(r["pred_k"] for r in rows)[prod]),
            col.cfg_pred_margin.eq(Array(r["pred_margin"] for r in rows)[prod]),
            col.pred_clear.eq(last & Array(int(r["clear"]) for r in rows[1:] + [rows[-1]])[prod]),
        ]
        if hasattr(col, "cfg_pred_tol"):
            m.d.comb += col.cfg_pred_tol.eq(Array(r["pred_tol"] for r in rows)[prod])
        return m


def make_job(rng, n, nb, block, *, kind="gauss", width=8, exp_bits=8, bias=False):
    """One product's operands, quantised from floats with the format's quantiser."""
    k = nb * block
    if kind == "gauss":
        w, x = rng.standard_normal((n, k)), rng.standard_normal(k)
    elif kind == "uniform":
        w, x = rng.uniform(-1, 1, (n, k)), rng.uniform(0, 1, k)
    elif kind == "heavy":
        w, x = rng.standard_t(1.2, (n, k)), rng.standard_cauchy(k)
    else:
        raise ValueError(kind)
    scale = 2.0 ** rng.integers(-20, 20, (n, nb)).repeat(block, axis=1)
    w_m, w_e = quantise(w * scale, block=block, width=width, exp_bits=exp_bits)
    x_m, x_e = quantise(x * 2.0 ** rng.integers(-20, 20), block=block, width=width,
                        exp_bits=exp_bits)
    job = {"w_m": w_m.reshape(n, k), "w_e": w_e, "x_m": x_m.reshape(k), "x_e": x_e,
           "rand": rng.integers(0, 256, n)}
    if bias:
        b_m, b_e = quantise(rng.standard_normal(n) * 2.0 ** rng.integers(0, 40), block=n,
                            width=width, exp_bits=exp_bits)
        job["b_m"], job["b_e"] = b_m.reshape(n), np.repeat(b_e, n)
    return job


def run_rtl(col, jobs, *, width=None, rounding="nearest", exp_mode="max", fixed_exp=0,
            bias=False, seed=0, valid_prob=1.0, ready_prob=1.0, pred_k=3, pred_margin=2,
            feed_rand=None):
    """Stream ``jobs`` (same block count) through ``col``; returns [(mantissas, exponent)].

    ``col`` may be a :class:`Scheduled` column, which sets the exponent selector itself.
    ``feed_rand``: offer the jobs' random numbers on ``i_rand`` (default: in stochastic
    rounding; a column built without it never takes them).
    """
    n, b = col.lanes, col.block
    ws, xs, bs, rs = [], [], [], []
    nbs = {len(job["x_e"]) for job in jobs}
    assert len(nbs) == 1
    nb = nbs.pop()
    for job in jobs:
        for j in range(nb * b):
            ws.append({"m": [int(v) for v in job["w_m"][:, j]],
                       "e": [int(v) for v in job["w_e"][:, j // b]]})
            xs.append({"m": int(job["x_m"][j]), "e": int(job["x_e"][j // b])})
        if bias:
            bs += [{"m": int(m), "e": int(e)} for m, e in zip(job["b_m"], job["b_e"],
                                                              strict=True)]
        if rounding == "stochastic" if feed_rand is None else feed_rand:
            rs += [int(r) for r in job["rand"]]

    async def setup(ctx):
        ctx.set(col.cfg_width, width or col.width)
        ctx.set(col.cfg_rounding, ROUNDING[rounding])
        if not isinstance(col, Scheduled):
            ctx.set(col.cfg_exp_mode, EXP_MODE[exp_mode])
            ctx.set(col.cfg_pred_k, pred_k)
            ctx.set(col.cfg_pred_margin, pred_margin)
        ctx.set(col.cfg_fixed_exp, fixed_exp)
        ctx.set(col.cfg_bias_en, int(bias))
        ctx.set(col.cfg_blocks, nb)
        await ctx.tick()

    inputs = {"i_w": ws, "i_x": xs}
    if bias:
        inputs["i_bias"] = bs
    if rs:
        inputs["i_rand"] = rs
    out = run_stream(col, inputs, {"o": n * len(jobs)}, setup=setup, valid_prob=valid_prob,
                     ready_prob=ready_prob, seed=seed)["o"]
    res = []
    for k in range(len(jobs)):
        chunk = out[k * n:(k + 1) * n]
        exps = {o["e"] for o in chunk}
        assert len(exps) == 1, "one exponent per output block"
        res.append(([o["m"] for o in chunk], exps.pop()))
    return res


def run_model(model, jobs, *, bias=False, **kwargs):
    res = []
    for job in jobs:
        y, e = model.matvec(job["w_m"], job["w_e"], job["x_m"], job["x_e"], rand=job["rand"],
                            bias_m=job.get("b_m") if bias else None,
                            bias_e=job.get("b_e") if bias else None, **kwargs)
        res.append((y.tolist(), e))
    return res


def check(params, jobs, **kwargs):
    col = cached(BFPColumn, **params)
    model = ColumnModel(**{k: v for k, v in params.items() if k not in HW_ONLY})
    sim_kwargs = {k: kwargs.pop(k) for k in ("seed", "valid_prob", "ready_prob") if k in kwargs}
    got = run_rtl(col, jobs, **kwargs, **sim_kwargs)
    want = run_model(model, jobs, **kwargs)
    assert got == want
    return got


def check_mixed_products(params, rng, seed):
    """Products of three blocks with bias, stochastic rounding, stalls on every stream and a
    slow output, NaN blocks in x and in a weight row, then products of one block with the
    predicted exponent: ``params``' column against the model (``max_blocks`` 3, then 1)."""
    lanes, block = params["lanes"], params["block"]
    params = {**params, "max_blocks": 3}
    jobs = [make_job(rng, lanes, 3, block, kind=kind, bias=True)
            for kind in ("gauss", "heavy", "uniform", "gauss")]
    jobs[1]["x_e"][2] = nan_exponent(8)
    jobs[2]["w_e"][lanes - 1, 0] = nan_exponent(8)
    check(params, jobs, bias=True, rounding="stochastic", valid_prob=0.8, ready_prob=0.5,
          seed=seed)
    jobs = [make_job(rng, lanes, 1, block) for _ in range(3)]
    check({**params, "max_blocks": 1}, jobs, exp_mode="predicted")


SMALL = {"lanes": 4, "block": 4, "max_blocks": 4}
#: BFPColumn parameters the golden model does not have (they do not change the results).
HW_ONLY = ("mult", "sim_model", "stochastic", "acc_block_ram", "pipelined", "hard_lanes",
           "drain_lanes", "input_stage")
#: The iCEBreaker's area options (lowbit.boards.profiles): every one of them off.
LITE = {"stochastic": False, "predictor": False, "acc_block_ram": True, "pipelined": False}


# -- parameters --------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, exc, msg", [
    ({"lanes": 3}, ValueError, "Lane count must be an integer between 4 and 256, not 3"),
    ({"lanes": 4.0}, TypeError, "Lane count"),
    ({"lanes": True}, TypeError, "Lane count"),
    ({"block": 1}, ValueError, "Block size must be an integer between 2 and 256, not 1"),
    ({"width": 17}, ValueError, "Mantissa width must be an integer between 2 and 16, not 17"),
    ({"exp_bits": 2}, ValueError, "Exponent width"),
    ({"max_blocks": 0}, ValueError, "Maximum block count"),
    ({"frac_bits": 9}, ValueError, "Fraction guard bit count"),
    ({"rand_bits": 0}, ValueError, "Random bit count"),
    ({"mult": "dsp"}, ValueError, "Multiplier style must be one of lut, sb_mac16, mult18x18d"),
    ({"mult": 1}, TypeError, "Multiplier style"),
    ({"mult": "sb_mac16", "width": 9}, ValueError, "at most 8 with multiplier style"),
    ({"sim_model": 1}, TypeError, "sim_model must be a bool"),
    ({"stat_shift": 9}, ValueError, "Statistics shift must be an integer between 0 and 8, not 9"),
    ({"stat_shift": None}, TypeError, "Statistics shift"),
    ({"predictor": 1}, TypeError, "predictor must be a bool, not 1"),
    ({"lanes": 8, "hard_lanes": 9}, ValueError,
     "Hard lane count must be an integer between 0 and 8, not 9"),
    ({"hard_lanes": 4.0}, TypeError, "Hard lane count must be None or an integer"),
])
def test_validation(kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        BFPColumn(**kwargs)


def test_properties_and_widths_match_model():
    col = BFPColumn(lanes=8, block=32, width=6, exp_bits=5, max_blocks=9, frac_bits=2,
                    rand_bits=5)
    model = ColumnModel(lanes=8, block=32, width=6, exp_bits=5, max_blocks=9, frac_bits=2,
                        rand_bits=5)
    assert (col.lanes, col.block, col.width, col.exp_bits, col.max_blocks, col.frac_bits,
            col.rand_bits, col.mult, col.sim_model) == (8, 32, 6, 5, 9, 2, 5, "lut", True)
    assert (col.pw, col.aw) == (model.pw, model.aw) == (17, 23)
    assert column_widths(block=32, width=6, max_blocks=9, frac_bits=2) == (17, 23)
    with pytest.raises(AttributeError):
        col.lanes = 4
    assert f"wire width {col.aw} signed \\rd_data.a" in rtlil.convert(col)


def test_registry_builds_defaults():
    col = build_block("bfp")
    assert (col.lanes, col.block, col.width, col.exp_bits) == (16, 16, 8, 8)
    assert "module \\top.pe" in rtlil.convert(col)
    text = rtlil.convert(BFPColumn(**SMALL, mult="sb_mac16", sim_model=False))
    assert text.count("cell \\SB_MAC16") == 2


# -- bit-exact against the model ---------------------------------------------------------------


def _quick_only(keep, *cases):
    """``cases`` as parametrize values: ``keep`` in the quick suite, the others ``slow``."""
    return [c if c == keep else pytest.param(*(c if isinstance(c, tuple) else (c,)),
                                             marks=pytest.mark.slow) for c in cases]


@pytest.mark.parametrize("kind,rounding", _quick_only(
    ("heavy", "stochastic"),
    *((k, r) for r in ("nearest", "zero", "stochastic") for k in ("gauss", "uniform", "heavy"))))
def test_random_matrices(kind, rounding, stable_seed):
    rng = np.random.default_rng(stable_seed(kind, rounding))
    jobs = [make_job(rng, 4, 3, 4, kind=kind) for _ in range(3)]
    check(SMALL, jobs, rounding=rounding, valid_prob=0.7, ready_prob=0.6, seed=1)


@pytest.mark.parametrize("rounding", _quick_only("stochastic", "nearest", "zero", "stochastic"))
def test_bias_path(rounding):
    rng = np.random.default_rng(3)
    jobs = [make_job(rng, 4, 2, 4, kind="gauss", bias=True) for _ in range(4)]
    got = check(SMALL, jobs, rounding=rounding, bias=True, valid_prob=0.8, ready_prob=0.7)
    # The bias must matter: these results differ from the same products without bias.
    model = ColumnModel(**SMALL)
    assert got != run_model(model, jobs, rounding=rounding)


def test_full_scale_and_extreme_exponents():
    n, b, nb = 4, 4, 4
    e_lim = 127
    jobs = [
        # Every product -128·-128 (outside the symmetric range, still exact) at one exponent.
        {"w_m": np.full((n, nb * b), -128), "w_e": np.zeros((n, nb), int),
         "x_m": np.full(nb * b, -128), "x_e": np.zeros(nb, int)},
        # Full scale, rows of both signs, exponent sums at both ends of the E + 1-bit range.
        {"w_m": np.array([[127], [-127], [127], [-127]]).repeat(nb * b, axis=1),
         "w_e": np.array([[e_lim, -e_lim, e_lim, -e_lim]] * n),
         "x_m": np.full(nb * b, 127), "x_e": np.array([e_lim, -e_lim, -e_lim, e_lim])},
        # Mixed exponents per row and block.
        {"w_m": np.arange(n * nb * b).reshape(n, nb * b) % 255 - 127,
         "w_e": np.array([[0, 30, -30, 5], [-100, 100, 0, 0], [7, 7, 7, 7], [120, -120, 60, 1]]),
         "x_m": np.arange(nb * b) * 13 % 255 - 127, "x_e": np.array([3, -60, 90, -7])},
    ]
    for job in jobs:
        job["rand"] = np.arange(n) * 61 % 256
    params = dict(SMALL)
    for rounding in ("nearest", "stochastic"):
        got = check(params, jobs, rounding=rounding)
        # e4 clamped to the largest exponent: the outputs saturate.
        assert got[1] == ([127, -127, 127, -127], 127)
    for fixed in (-127, 0, 20, 127):
        check(params, jobs, exp_mode="fixed", fixed_exp=fixed, rounding="zero")


def test_zero_blocks_and_zero_products():
    rng = np.random.default_rng(9)
    jobs = [make_job(rng, 4, 3, 4) for _ in range(4)]
    jobs[0]["x_m"][4:8] = 0              # an all-zero vector block with a large exponent
    jobs[0]["x_e"][1] = 0
    jobs[0]["w_e"][:, 1] = 120
    jobs[1]["w_m"][:, :] = 0             # a zero product: e4 = 0
    jobs[1]["w_e"][:, :] = 0
    jobs[2]["w_m"][1, :] = 0             # one zero row among others
    jobs[3]["x_m"][:4] = 0               # zero first block, then data
    got = check(SMALL, jobs, valid_prob=0.9, ready_prob=0.9)
    assert got[1] == ([0, 0, 0, 0], 0)


def test_nan_operands():
    rng = np.random.default_rng(12)
    nan = nan_exponent(8)
    jobs = [make_job(rng, 4, 2, 4, bias=True) for _ in range(4)]
    jobs[0]["w_e"][2, 1] = nan           # one weight block of one row
    jobs[1]["x_e"][0] = nan              # a vector block
    jobs[2]["b_e"][3] = nan              # a bias element
    got = check(SMALL, jobs, bias=True)
    assert [e for _, e in got[:3]] == [nan] * 3 and got[0][0] == [0] * 4
    assert got[3][1] != nan


@pytest.mark.parametrize("options", [{}, LITE], ids=["pipelined", "lite"])
def test_tiny_products(options):
    """Every lane's ``bitlen(|A|) + ea`` below zero (exponent sums near -100): the max rule's
    running maximum must start below all of them, not at 0."""
    rng = np.random.default_rng(61)
    jobs = [make_job(rng, 4, 2, 4, kind=kind) for kind in ("gauss", "heavy", "uniform")]
    for k, job in enumerate(jobs):
        job["w_e"][:] = rng.integers(-60, -50, job["w_e"].shape)
        job["x_e"][:] = -45 - 3 * k
    got = check({**SMALL, **options}, jobs, valid_prob=0.9, ready_prob=0.8)
    assert all(-127 < e < -80 for _, e in got)
    model = ColumnModel(**SMALL)
    for job in jobs:
        acc, ea, _ = model.accumulate(job["w_m"], job["w_e"], job["x_m"], job["x_e"])
        assert max(abs(a).bit_length() + e for a, e in zip(acc, ea, strict=True)) < 0


@pytest.mark.parametrize("width", _quick_only(2, 2, 3, 5))
def test_runtime_width(width):
    rng = np.random.default_rng(width)
    jobs = [make_job(rng, 4, 2, 4, kind="heavy") for _ in range(3)]
    got = check(SMALL, jobs, width=width, rounding="nearest")
    assert max(abs(v) for m, _ in got for v in m) <= 2 ** (width - 1) - 1


def test_block16_odd_lanes_backpressure():
    rng = np.random.default_rng(21)
    params = {"lanes": 5, "block": 16, "max_blocks": 2, "frac_bits": 0, "rand_bits": 3}
    jobs = [make_job(rng, 5, 2, 16) for _ in range(3)]
    for job in jobs:
        job["rand"] %= 8
    check(params, jobs, rounding="stochastic", valid_prob=0.5, ready_prob=0.3, seed=4)


def test_pipelined_six_lanes_block3():
    """Pipelined N = 6 (the seven-stage combiner writes a lane's update in the cycle it reads
    the lane again) and B = 3 (a block's exponent sums wait in stage M while the next block's
    beats arrive), at full rate with bias, then with a slow output so that the PE array stalls
    while a block sum waits for the drain."""
    rng = np.random.default_rng(33)
    params = {"lanes": 6, "block": 3, "max_blocks": 3}
    jobs = [make_job(rng, 6, 3, 3, bias=True) for _ in range(3)]
    check(params, jobs, bias=True)
    check(params, jobs, rounding="zero", ready_prob=0.2, seed=2)


@pytest.mark.parametrize("mult", ["mult18x18d", "sb_mac16"])
def test_multiplier_styles_match_model(mult):
    """The ECP5 column (an accumulator enable per group of four lanes) and the iCE40 one (one
    for all lanes), with eight lanes (two groups), stalls on every stream, a slow output, and
    NaN vector and weight blocks (the vector's NaN test is kept per group)."""
    rng = np.random.default_rng(41)
    nan = nan_exponent(8)
    params = {"lanes": 8, "block": 4, "max_blocks": 3, "mult": mult}
    jobs = [make_job(rng, 8, 3, 4, kind=kind, bias=True)
            for kind in ("gauss", "heavy", "uniform", "gauss")]
    jobs[1]["x_e"][2] = nan
    jobs[2]["w_e"][5, 0] = nan
    check(params, jobs, bias=True, valid_prob=0.7, ready_prob=0.3, seed=6)


def test_fabric_lanes_match_model():
    """A column whose lanes 5..7 are fabric multipliers (the Baugh-Wooley sums themselves,
    ``sim_model=False``; lanes 0..4 are the ``"lut"`` style's behavioural products), against
    the model, with stalls and a NaN block."""
    rng = np.random.default_rng(43)
    params = {"lanes": 8, "block": 4, "max_blocks": 3, "mult": "lut", "hard_lanes": 5,
              "sim_model": False}
    col = BFPColumn(**params)
    col._MustUse__silence = True
    assert col.hard_lanes == 5 and BFPColumn().hard_lanes is None
    jobs = [make_job(rng, 8, 3, 4, kind=kind, bias=True) for kind in ("heavy", "uniform")]
    jobs[1]["w_e"][6, 1] = nan_exponent(8)
    check(params, jobs, bias=True, valid_prob=0.7, ready_prob=0.4, seed=8)


def test_narrow_exponent_and_mantissa():
    rng = np.random.default_rng(5)
    params = {"lanes": 4, "block": 2, "width": 4, "exp_bits": 4, "max_blocks": 3}
    jobs = [make_job(rng, 4, 3, 2, width=4, exp_bits=4) for _ in range(4)]
    check(params, jobs, rounding="zero", valid_prob=0.8)


# -- the predicted exponent selector: state carried across products ----------------------------


def make_stationary_job(rng, n, nb, block, *, shift=0, width=8, exp_bits=8):
    """Gaussian weights and vector (the vector scaled by 2^shift): a stationary output scale."""
    k = nb * block
    w_m, w_e = quantise(rng.standard_normal((n, k)), block=block, width=width, exp_bits=exp_bits)
    x_m, x_e = quantise(rng.standard_normal(k), block=block, width=width, exp_bits=exp_bits)
    return {"w_m": w_m.reshape(n, k), "w_e": w_e, "x_m": x_m.reshape(k), "x_e": x_e + shift,
            "rand": rng.integers(0, 1 << 8, n)}


def predicted_events(model, jobs, **kwargs):
    """The model's results and predictor events over ``jobs`` in predicted mode."""
    res, events = [], []
    for job in jobs:
        res += run_model(model, [job], exp_mode="predicted", **kwargs)
        events.append(model.predictor.event)
    return res, events


PRED = {"lanes": 4, "block": 4, "max_blocks": 2, "stat_shift": 2}


@pytest.mark.parametrize("rounding", _quick_only("stochastic", "nearest", "zero", "stochastic"))
def test_predicted_sequence_with_scale_jumps(rounding):
    rng = np.random.default_rng(31)
    shifts = [0] * 10 + [7] * 8 + [-2] * 8
    jobs = [make_stationary_job(rng, 4, 2, 4, shift=s) for s in shifts]
    got = check(PRED, jobs, rounding=rounding, exp_mode="predicted", valid_prob=0.8,
                ready_prob=0.7, seed=2)
    # The run exercises prediction, both resets and the warm-up, and the result differs from
    # the max rule (so the gateware's history matters).
    _, events = predicted_events(ColumnModel(**PRED), jobs, rounding=rounding)
    assert events[0] == "max" and events[10] == "overflow" and events[18] == "underflow"
    assert events.count("predicted") >= 18
    assert got != run_model(ColumnModel(**PRED), jobs, rounding=rounding, exp_mode="max")


def test_predicted_k_margin_width_and_long_history():
    rng = np.random.default_rng(32)
    params = {**PRED, "stat_shift": 0}
    jobs = [make_stationary_job(rng, 4, 1, 4, shift=int(s))
            for s in np.cumsum(rng.integers(-1, 2, 16))]
    for k, margin, width in ((1, 0, 8), (7, 3, 8), (3, 1, 3)):
        check({**params, "max_blocks": 1}, jobs, exp_mode="predicted", pred_k=k,
              pred_margin=margin, width=width, rounding="nearest")
    params = {**PRED, "stat_shift": 5, "max_blocks": 1}
    check(params, jobs + jobs, exp_mode="predicted", pred_k=2, ready_prob=0.5, seed=3)


def test_predicted_schedule_clear_modes_zero_and_nan():
    rng = np.random.default_rng(33)
    jobs = [make_stationary_job(rng, 4, 2, 4, shift=int(s)) for s in [0] * 6 + [1] * 10]
    jobs[3]["x_m"][:] = 0                      # an all-zero product keeps the history
    jobs[4]["x_e"][1] = nan_exponent(8)        # so does a NaN product
    sched = [{"exp_mode": "predicted", "pred_k": 3, "pred_margin": 2, "clear": False}
             for _ in jobs]
    sched[7]["clear"] = True                   # pred_clear before product 7
    sched[10]["exp_mode"] = "max"              # other modes clear the history
    sched[11]["exp_mode"] = "fixed"
    sched[13]["pred_k"] = 6
    sched[14]["pred_margin"] = 0
    col = Scheduled(BFPColumn(**PRED), sched)
    got = run_rtl(col, jobs, fixed_exp=-3, valid_prob=0.9, ready_prob=0.8, seed=5)
    model = ColumnModel(**PRED)
    want, events = [], []
    for job, row in zip(jobs, sched, strict=True):
        if row["clear"]:
            model.clear_history()
        want += run_model(model, [job], exp_mode=row["exp_mode"], pred_k=row["pred_k"],
                          pred_margin=row["pred_margin"], fixed_exp=-3)
        events.append(model.predictor.event)
    assert got == want
    assert events[3:5] == ["zero", "nan"] and events[7] == "max" and events[12] == "max"
    # The history survived the all-zero and the NaN product (product 5 is not the max rule).
    assert events[5] != "max" and "predicted" in events[13:]


def test_without_predictor_predicted_mode_is_the_max_rule():
    rng = np.random.default_rng(35)
    jobs = [make_stationary_job(rng, 4, 1, 4, shift=s) for s in [0] * 6 + [6] * 3]
    params = {**PRED, "max_blocks": 1, "predictor": False}
    got = check(params, jobs, exp_mode="predicted", ready_prob=0.7)
    assert got == run_model(ColumnModel(**params), jobs, exp_mode="max")
    assert got != run_model(ColumnModel(**{**params, "predictor": True}), jobs,
                            exp_mode="predicted")
    assert "module \\top.out.pred" in rtlil.convert(BFPColumn(**{**params, "predictor": True}))
    assert "module \\top.out.pred" not in rtlil.convert(BFPColumn(**params))


def test_predicted_clamped_exponents_and_odd_lanes():
    rng = np.random.default_rng(34)
    params = {"lanes": 5, "block": 16, "max_blocks": 1, "exp_bits": 5, "rand_bits": 3,
              "stat_shift": 1}
    jobs = [make_stationary_job(rng, 5, 1, 16, exp_bits=5) for _ in range(10)]
    for i, job in enumerate(jobs):
        # Output exponents near, at and beyond both ends of the 5-bit range.
        job["w_e"][:] = [14, 14, -15, -15, 0, 0, 9, 9, -8, 3][i]
        job["x_e"][:] = [1, 1, -15, -15, 0, 0, 9, 9, -8, -3][i]
        job["rand"] %= 8
    check(params, jobs, exp_mode="predicted", rounding="stochastic", valid_prob=0.5,
          ready_prob=0.3, seed=4)


@pytest.mark.slow
@pytest.mark.parametrize("rounding", ["nearest", "zero", "stochastic"])
def test_default_size_column(rounding):
    rng = np.random.default_rng(100)
    params = {"lanes": 16, "block": 16, "max_blocks": 4}
    jobs = [make_job(rng, 16, 4, 16, kind=kind, bias=True)
            for kind in ("gauss", "uniform", "heavy", "gauss")]
    check(params, jobs, rounding=rounding, bias=True, valid_prob=0.9, ready_prob=0.8)


@pytest.mark.slow
def test_default_size_predicted_sequence():
    rng = np.random.default_rng(101)
    params = {"lanes": 16, "block": 16, "max_blocks": 2}
    jobs = [make_stationary_job(rng, 16, 2, 16, shift=s) for s in [0] * 12 + [5] * 6 + [-3] * 6]
    check(params, jobs, exp_mode="predicted", rounding="stochastic", valid_prob=0.9,
          ready_prob=0.8)
    _, events = predicted_events(ColumnModel(**params), jobs, rounding="stochastic")
    assert events[12] == "overflow" and events[18] == "underflow"


def test_rounding_names_cover_enum():
    assert set(ROUNDING) == {"nearest", "zero", "stochastic"}
    assert ROUNDING["stochastic"] is Rounding.STOCHASTIC


# -- exact ties: dropped bits 1 0…0 -----------------------------------------------------------

#: The column configurations of the boards (lowbit.boards.profiles: ``bfp_pipelined``,
#: ``bfp_predictor``, ``bfp_stochastic``, ``bfp_acc_block_ram``) and the options one at a time.
TIE_COLUMNS = {
    "ulx3s": {"mult": "mult18x18d"},               # every option on (ULX3S, OrangeCrab)
    "icebreaker": {**LITE, "mult": "sb_mac16"},    # every option off
    "unpipelined": {"pipelined": False},
    "no-predictor": {"predictor": False},
    "no-stochastic": {"stochastic": False},
}

#: Tie runs: exponent rule, runtime width, bias, output exponent, dropped bits per lane for each
#: product (lane 0's first: in the max rule it sets the exponent). At W = 4 and with a fixed
#: exponent more bits are dropped than the fraction field holds (up to 15: the coarse shifter's
#: sticky bytes).
TIE_RUNS = [
    dict(exp_mode="max", width=8, bias=True, e4=3,
         dropped=[[7, 1, 2, 3], [8, 2, 5, 1], [3, 4, 6, 8], [1, 3, 2, 4]]),
    dict(exp_mode="max", width=4, bias=False, e4=-2,
         dropped=[[12, 9, 10, 11], [10, 13, 14, 9], [9, 12, 11, 14]]),
    dict(exp_mode="fixed", width=8, bias=True, e4=5,
         dropped=[[1, 2, 9, 15], [8, 10, 3, 14], [13, 7, 11, 12]]),
]


def tie_expected(job, width, rounding, rand_bits=8):
    """Output mantissas of a tie job from its lanes' exact values (Fractions, independent of the
    model): half to even (Python's ``round``), toward zero, or ``floor(t + r / 2^R)``; then
    symmetric saturation."""
    mx = (1 << (width - 1)) - 1
    out = []
    for (t, d), r in zip(job["acc"], job["rand"], strict=True):
        v = Fraction(t, 1 << d)
        q = {"nearest": round(v), "zero": math.trunc(v),
             "stochastic": math.floor(v + Fraction(int(r), 1 << rand_bits))}[rounding]
        out.append(max(-mx, min(mx, q)))
    return out


def tie_kinds(jobs):
    """What the lanes of ``jobs`` hold: ``("tie", kept parity, sign)`` for exact ties,
    ``("near", ...)`` for one unit off, and ``("dropped>8",)`` when more than 8 bits go."""
    kinds = set()
    for job in jobs:
        for t, d in job["acc"]:
            rem = t % (1 << d)
            if rem == 1 << (d - 1):
                kinds.add(("tie", "odd" if (t >> d) % 2 else "even", "-" if t < 0 else "+"))
            elif d >= 2 and abs(rem - (1 << (d - 1))) == 1:
                kinds.add(("near", "above" if rem > 1 << (d - 1) else "below"))
            if d > 8:
                kinds.add(("dropped>8",))
    return kinds


def predicted_tie_jobs(rng, model, *, width, rounding, n=8):
    """Tie jobs for the predicted exponent: each built at the exponent the model's predictor
    will choose (lane 0 keeps the max rule one below it, inside the window), run on ``model``
    to carry its state. Returns ``(jobs, exponents, events)``."""
    jobs, exps, events = [], [], []
    for j in range(n):
        pred = model.predictor
        e4, top = (pred.unit_exp, "predicted") if pred.usable else (2, "max")
        job = bfp_tie_job(rng, lanes=model.lanes, block=model.block, nb=1, e4=e4, width=width,
                          dropped=[[4, 1, 6, 3], [5, 2, 7, 1]][j % 2], top=top, offset=3 * j)
        y, e = model.matvec(job["w_m"], job["w_e"], job["x_m"], job["x_e"], width=width,
                            rounding=rounding, exp_mode="predicted", rand=job["rand"])
        assert e == e4, (j, e, e4)
        jobs.append(job)
        exps.append(e4)
        events.append(model.predictor.event)
    return jobs, exps, events


@pytest.mark.parametrize("column,rounding", [
    # The quick suite: ties to even on the two boards' columns; every other pair -m slow.
    (c, r) if r == "nearest" and c in ("ulx3s", "icebreaker")
    else pytest.param(c, r, marks=pytest.mark.slow)
    for r in ("nearest", "zero", "stochastic") for c in TIE_COLUMNS])
def test_exact_ties(column, rounding):
    """Products whose dropped bits are exactly ``1 0…0`` (odd and even kept values, both signs,
    ±1/2, saturating ties) and one unit above or below, with 1 to 15 dropped bits, in the max
    rule (W = 8 with bias, W = 4), with a fixed exponent and (with a predictor) the predicted
    one, on every column configuration a board builds. The column equals the model, and both
    equal rounding computed from the exact values. A column without stochastic rounding
    rounds its code to nearest (no ``i_rand``: test_without_stochastic_rounding)."""
    params = {**SMALL, **TIE_COLUMNS[column]}
    has_stochastic = params.get("stochastic", True)
    effective = "nearest" if rounding == "stochastic" and not has_stochastic else rounding
    model_params = {k: v for k, v in params.items() if k not in HW_ONLY}
    rng = np.random.default_rng(7)
    seen = set()
    for k, run in enumerate(TIE_RUNS):
        width, bias, e4 = run["width"], run["bias"], run["e4"]
        jobs = [bfp_tie_job(rng, lanes=4, block=4, nb=2, e4=e4, width=width, dropped=d,
                            top="max" if run["exp_mode"] == "max" else None, bias=bias,
                            offset=3 * j + k)
                for j, d in enumerate(run["dropped"])]
        seen |= tie_kinds(jobs)
        got = run_rtl(cached(BFPColumn, **params), jobs, width=width, rounding=rounding,
                      exp_mode=run["exp_mode"], fixed_exp=e4, bias=bias, valid_prob=0.8,
                      ready_prob=0.7, seed=k, feed_rand=effective == "stochastic")
        want = run_model(ColumnModel(**model_params), jobs, width=width, rounding=effective,
                         exp_mode=run["exp_mode"], fixed_exp=e4, bias=bias)
        exact = [(tie_expected(job, width, effective), e4) for job in jobs]
        assert want == exact, f"model, run {k}"
        assert got == want, f"column, run {k}"
    assert seen >= {("tie", p, s) for p in ("odd", "even") for s in "+-"} | \
        {("near", "above"), ("near", "below"), ("dropped>8",)}
    if params.get("predictor", True):
        jobs, exps, events = predicted_tie_jobs(rng, ColumnModel(**model_params), width=8,
                                                rounding=effective)
        assert events == ["max"] + ["predicted"] * (len(jobs) - 1)
        got = run_rtl(cached(BFPColumn, **params), jobs, rounding=rounding, exp_mode="predicted",
                      valid_prob=0.8, ready_prob=0.7, feed_rand=effective == "stochastic")
        assert got == [(tie_expected(job, 8, effective), e) for job, e in
                       zip(jobs, exps, strict=True)]


# -- area options (the iCEBreaker's column) ----------------------------------------------------


@pytest.mark.parametrize("name", ["stochastic", "acc_block_ram", "pipelined"])
def test_area_option_validation(name):
    with pytest.raises(TypeError, match=f"{name} must be a bool, not 1"):
        BFPColumn(**{name: 1})
    assert getattr(BFPColumn(**{name: False}), name) is False


@pytest.mark.parametrize("options", [
    LITE, {"pipelined": False}, {"stochastic": False}, {"acc_block_ram": True},
], ids=["lite", "unpipelined", "no-stochastic", "acc-ebr"])
@pytest.mark.parametrize("rounding,exp_mode,bias", [
    # The quick suite: max rule with bias (each option's case of it but the lean column's: slow).
    ("nearest", "max", True),
    pytest.param("zero", "fixed", False, marks=pytest.mark.slow),
    pytest.param("nearest", "fixed", True, marks=pytest.mark.slow),
])
def test_area_options_match_model(options, rounding, exp_mode, bias, stable_seed):
    """Every area option keeps the column bit-exact (random stalls on every stream)."""
    rng = np.random.default_rng(stable_seed(tuple(options), rounding, exp_mode))
    jobs = [make_job(rng, 4, 3, 4, kind=kind, bias=bias) for kind in ("gauss", "heavy", "gauss")]
    check({**SMALL, **options}, jobs, rounding=rounding, exp_mode=exp_mode, fixed_exp=-3,
          bias=bias, valid_prob=0.7, ready_prob=0.6, seed=2)


@pytest.mark.parametrize("params, budget", [
    ({"lanes": 16, "block": 16, "max_blocks": 4, **LITE}, None),
    ({"lanes": 16, "block": 4, "max_blocks": 4}, 119),
    ({"lanes": 8, "block": 4, "max_blocks": 4, "drain_lanes": 2}, None),
], ids=["lite", "pipelined", "drain2"])
def test_fixed_mode_skips_the_scan(params, budget, monkeypatch):
    """The pipelined column's fixed mode needs no scan of the bank: NaN blocks (from a weight,
    a vector block, a bias element) still come out NaN with the banks' NaN flags, in either
    bank and not in the products after them; and two products of one block with bias finish
    ``N + 6`` or more cycles sooner than with the max rule's scan (budget measured at full
    rate). The unpipelined ("lite") column scans in every mode: the same results."""
    import test_bfp_rtl

    rng = np.random.default_rng(41)
    n, b = params["lanes"], params["block"]
    nan = nan_exponent(8)
    jobs = [make_job(rng, n, 2, b, bias=True) for _ in range(6)]
    jobs[0]["w_e"][n - 1, 1] = nan       # bank 0
    jobs[2]["x_e"][0] = nan              # bank 0 again, after a clean product in bank 1
    jobs[3]["b_e"][1] = nan              # bank 1
    got = check(params, jobs, bias=True, exp_mode="fixed", fixed_exp=-3, valid_prob=0.8,
                ready_prob=0.6, seed=4)
    assert [e == nan for _, e in got] == [True, False, True, True, False, False]
    if budget is None:
        return
    run_stream = test_bfp_rtl.run_stream
    monkeypatch.setattr(test_bfp_rtl, "run_stream",
                        lambda *args, **kwargs: run_stream(*args, **kwargs, max_cycles=budget))
    jobs = [make_job(rng, n, 1, b, bias=True) for _ in range(2)]
    check(params, jobs, bias=True, exp_mode="fixed", fixed_exp=-3)
    with pytest.raises(TimeoutError):
        check(params, jobs, bias=True, exp_mode="max")


@pytest.mark.parametrize("predictor", [False, True], ids=["no-predictor", "predictor"])
def test_bank_free_once_the_product_is_in_the_fifo(predictor):
    """Without a predictor the output unit releases a bank when its product's last element is
    in the output FIFO, not when ``o`` takes it: with ``o`` not ready the column takes the
    beats of four products (one in the FIFO, two in the banks, one in the PE array) and then
    stalls; with a predictor, which samples the accepted elements, of three. Then ``o`` gives
    all six products as the model computes them."""
    from amaranth.sim import Simulator

    # 16 lanes: the FIFO (16 elements) holds one product.
    params = {"lanes": 16, "block": 4, "max_blocks": 4, **LITE, "predictor": predictor}
    col = BFPColumn(**params)
    n, b, nb = 16, 4, 2
    rng = np.random.default_rng(7)
    jobs = [make_job(rng, n, nb, b) for _ in range(6)]
    beats = [(job["w_m"][:, j], job["w_e"][:, j // b], job["x_m"][j], job["x_e"][j // b])
             for job in jobs for j in range(nb * b)]
    taken, out = [], []

    async def bench(ctx):
        ctx.set(col.cfg_width, 8)
        ctx.set(col.cfg_rounding, ROUNDING["nearest"])
        ctx.set(col.cfg_exp_mode, EXP_MODE["max"])
        ctx.set(col.cfg_blocks, nb)
        await ctx.tick()
        k = 0
        for cycle in range(1000):
            ready = cycle >= 400
            if k < len(beats):
                wm, we, xm, xe = beats[k]
                ctx.set(col.i_w.payload, {"m": [int(v) for v in wm], "e": [int(v) for v in we]})
                ctx.set(col.i_x.payload, {"m": int(xm), "e": int(xe)})
            ctx.set(col.i_w.valid, k < len(beats))
            ctx.set(col.i_x.valid, k < len(beats))
            ctx.set(col.o.ready, ready)
            fire = k < len(beats) and ctx.get(col.i_x.ready)
            if ready and ctx.get(col.o.valid):
                out.append(ctx.get(col.o.payload))
            await ctx.tick()
            if fire:
                k += 1
            if cycle == 399:
                taken.append(k)

    sim = Simulator(col)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert taken == [(3 if predictor else 4) * nb * b]
    model = ColumnModel(**{k: v for k, v in params.items() if k not in HW_ONLY})
    want = run_model(model, jobs)
    got = [([int(out[p * n + i].m) for i in range(n)], {int(out[p * n + i].e) for i in range(n)})
           for p in range(len(jobs))]
    assert [(m, {e}) for m, e in want] == got


def test_unpipelined_full_rate_and_edge_cases():
    """The merged pipelines at full rate (no stalls), with zero, NaN, saturating and
    full-scale products and a runtime width; the stochastic build unpipelined too."""
    rng = np.random.default_rng(31)
    nan = nan_exponent(8)
    jobs = [make_job(rng, 4, 2, 4, kind="heavy", bias=True) for _ in range(5)]
    jobs[0]["w_m"][:, :] = 0
    jobs[0]["w_e"][:, :] = 0
    jobs[1]["x_e"][1] = nan
    jobs[2]["w_m"][:, :] = -128
    jobs[2]["x_m"][:] = -128
    jobs[3]["b_e"][2] = nan
    jobs[4]["w_e"][1, 0] = nan          # one row of one block: a NaN weight exponent
    for width in (3, 8):
        check({**SMALL, **LITE}, jobs, bias=True, width=width)
    check({**SMALL, "pipelined": False}, jobs, bias=True, rounding="stochastic",
          valid_prob=0.8, ready_prob=0.5)


def test_lite_column_at_the_icebreaker_size():
    """N = 4, B = 16, 16 blocks (the iCEBreaker's column), with back-pressure."""
    rng = np.random.default_rng(8)
    params = {"lanes": 4, "block": 16, "max_blocks": 16, **LITE}
    jobs = [make_job(rng, 4, 4, 16, bias=True) for _ in range(3)]
    check(params, jobs, bias=True, exp_mode="max", valid_prob=0.8, ready_prob=0.5, seed=3)


def test_without_stochastic_rounding():
    """No random-number input: ``i_rand`` is never ready and code 2 rounds to nearest; the
    options show in the netlist (a block-RAM accumulator, fewer registers)."""
    rng = np.random.default_rng(4)
    jobs = [make_job(rng, 4, 2, 4) for _ in range(2)]
    col = BFPColumn(**SMALL, stochastic=False)
    out = run_stream(col, {"i_w": [{"m": [int(v) for v in j["w_m"][:, b]],
                                    "e": [int(v) for v in j["w_e"][:, b // 4]]}
                                   for j in jobs for b in range(8)],
                           "i_x": [{"m": int(j["x_m"][b]), "e": int(j["x_e"][b // 4])}
                                   for j in jobs for b in range(8)]},
                     {"o": 8}, setup=_set_rounding(col, Rounding.STOCHASTIC))["o"]
    want = run_model(ColumnModel(**SMALL), jobs, rounding="nearest")
    assert [([o["m"] for o in out[k:k + 4]], out[k]["e"]) for k in (0, 4)] == want
    text = rtlil.convert(BFPColumn(**SMALL, acc_block_ram=True))
    assert 'attribute \\ram_style "block"' in text
    assert 'attribute \\ram_style' not in rtlil.convert(BFPColumn(**SMALL))
    def registers(**kw):
        return rtlil.convert(BFPColumn(**SMALL, **kw)).count("cell $dff ")
    assert registers(pipelined=False) < registers() - 30


def _set_rounding(col, code):
    async def setup(ctx):
        ctx.set(col.cfg_rounding, code)
        ctx.set(col.cfg_blocks, 2)
        assert not ctx.get(col.i_rand.ready)
        await ctx.tick()
    return setup


# -- seed 002 claim 29: 16-bit mantissas, 5-bit exponents --------------------------------------

#: The claim-29 format (W = 16, E = 5: finite exponents -15..15, NaN code -16) on a small column.
W16E5 = {"lanes": 4, "block": 4, "max_blocks": 4, "width": 16, "exp_bits": 5}


def w16e5_jobs(rng, nb, count, *, bias=False):
    """Random products in the 16/5 format with exponents over the whole finite range, plus
    edge products: -2^15·-2^15 everywhere at the largest exponents (e4 clamps at 15, every
    output saturates), full scale at the smallest (e4 clamps at -15, outputs round to 0),
    exponent sums ±30, zero products and rows, and the NaN code in each operand."""
    n, k = 4, nb * 4
    mx = (1 << 15) - 1
    jobs = []
    for _ in range(count):
        w_m = rng.integers(-mx, mx + 1, (n, k)) >> rng.integers(0, 16, (n, 1))
        x_m = rng.integers(-mx, mx + 1, k) >> rng.integers(0, 16)
        jobs.append({"w_m": w_m, "w_e": rng.integers(-15, 16, (n, nb)), "x_m": x_m,
                     "x_e": rng.integers(-15, 16, nb), "rand": rng.integers(0, 256, n)})
    edge = [
        {"w_m": np.full((n, k), -(1 << 15)), "w_e": np.full((n, nb), 15),
         "x_m": np.full(k, -(1 << 15)), "x_e": np.full(nb, 15)},
        {"w_m": np.array([[mx], [-mx], [mx], [-mx]]).repeat(k, axis=1),
         "w_e": np.full((n, nb), -15), "x_m": np.full(k, mx), "x_e": np.full(nb, -15)},
        {"w_m": np.arange(n * k).reshape(n, k) * 4099 % (2 * mx + 1) - mx,
         "w_e": np.resize([15, -15, 0, 7, -8, 3], (n, nb)),
         "x_m": np.arange(k) * 7919 % (2 * mx + 1) - mx, "x_e": np.resize([15, -15, 1], nb)},
        {"w_m": np.zeros((n, k), int), "w_e": np.full((n, nb), 15),
         "x_m": np.full(k, mx), "x_e": np.full(nb, 15)},
    ]
    for job in edge:
        job["rand"] = rng.integers(0, 256, n)
    jobs[1:1] = edge
    jobs[-1]["w_m"][2] = 0                                 # a zero row
    if bias:
        for job in jobs:
            job["b_m"] = rng.integers(-mx, mx + 1, n) >> rng.integers(0, 16)
            job["b_e"] = rng.integers(-15, 16, n)
        jobs[2]["b_e"][:] = 15
    return jobs


@pytest.mark.parametrize("rounding", _quick_only("stochastic", "nearest", "zero", "stochastic"))
def test_claim29_w16_e5(rounding):
    """The column at W = 16, E = 5 (LUT multipliers) bit for bit with the model: random and
    edge products with bias, under back-pressure, in every rounding mode."""
    rng = np.random.default_rng(29)
    jobs = w16e5_jobs(rng, 2, 4, bias=True)
    got = check(W16E5, jobs, rounding=rounding, bias=True, valid_prob=0.8, ready_prob=0.6,
                seed=3)
    assert got[1][1] == 15 and {abs(v) for v in got[1][0]} == {(1 << 15) - 1}


def test_claim29_w16_e5_nan_widths_and_fixed_exponents():
    """NaN code -16 in a weight block, a vector block and a bias element; runtime widths 9
    and 2 (saturation at the narrow width); fixed exponents at both ends of the range; the
    MULT18X18D column (16x16 products in one block each) and the unpipelined "lite" column
    at full width."""
    rng = np.random.default_rng(30)
    nan = nan_exponent(5)
    jobs = w16e5_jobs(rng, 3, 3, bias=True)
    jobs[0]["w_e"][1, 2] = nan
    jobs[3]["x_e"][0] = nan
    jobs[5]["b_e"][3] = nan
    got = check(W16E5, jobs, bias=True, rounding="nearest")
    assert [e for _, e in got].count(nan) == 3 and got[0][0] == [0] * 4
    for width in (9, 2):
        got = check(W16E5, jobs[1:3], width=width, rounding="zero")
        assert max(abs(v) for m, _ in got for v in m) == 2 ** (width - 1) - 1
    for fixed in (-15, 15):
        check(W16E5, jobs[1:3], exp_mode="fixed", fixed_exp=fixed, rounding="nearest")
    check({**W16E5, "mult": "mult18x18d"}, jobs, bias=True, rounding="stochastic",
          ready_prob=0.5, seed=1)
    check({**W16E5, **LITE}, jobs, bias=True, rounding="zero", ready_prob=0.7, seed=2)


@pytest.mark.slow
@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
def test_claim29_w16_e5_default_size(rounding):
    """N = B = 16, W = 16, E = 5, four blocks with bias, in max and predicted mode."""
    rng = np.random.default_rng(31)
    params = {**W16E5, "lanes": 16, "block": 16}
    jobs = []
    for _ in range(6):
        mx = (1 << 15) - 1
        jobs.append({"w_m": rng.integers(-mx, mx + 1, (16, 64)) >> rng.integers(0, 16, (16, 1)),
                     "w_e": rng.integers(-15, 16, (16, 4)),
                     "x_m": rng.integers(-mx, mx + 1, 64), "x_e": rng.integers(-15, 16, 4),
                     "b_m": rng.integers(-mx, mx + 1, 16), "b_e": rng.integers(-15, 16, 16),
                     "rand": rng.integers(0, 256, 16)})
    check(params, jobs, rounding=rounding, bias=True, ready_prob=0.7, seed=5)
    check(params, jobs, rounding=rounding, bias=True, exp_mode="predicted")


# -- seed 002 Table 1: M + V and M - V on the column's bias path -------------------------------


@pytest.mark.parametrize("width,exp_bits,rounding", _quick_only(
    (16, 5, "stochastic"),
    *((w, e, r) for r in ("nearest", "stochastic") for w, e in ((8, 8), (16, 5)))))
def test_table1_add_and_subtract_on_the_column(width, exp_bits, rounding):
    """``a ± b`` of BFP blocks (lowbit.sim.bfp_ops.add) is the column's ``(±I)·b + a``:
    identity weights of exponent 0, x = b, bias = a (per-lane exponents). Exponents over the
    whole range (the aligning shift drops bits), zero elements, exact cancellation, the NaN
    code; bit for bit."""
    rng = np.random.default_rng(width)
    n = 4
    mx = (1 << (width - 1)) - 1
    lim = (1 << (exp_bits - 1)) - 1
    blocks = 10
    a_m = rng.integers(-mx, mx + 1, (blocks, n)) >> rng.integers(0, width, (blocks, 1))
    b_m = rng.integers(-mx, mx + 1, (blocks, n)) >> rng.integers(0, width, (blocks, 1))
    a_e, b_e = rng.integers(-lim, lim + 1, blocks), rng.integers(-lim, lim + 1, blocks)
    a_e[:4] = b_e[:4] + rng.integers(-3, 4, 4)        # close exponents: exact sums
    a_m[4, 1:] = 0
    b_m[5] = a_m[5]                                    # a - b cancels exactly
    b_e[5] = a_e[5]
    b_e[6] = nan_exponent(exp_bits)
    rand = rng.integers(0, 256, (blocks, n))
    params = {"lanes": n, "block": n, "max_blocks": 1, "width": width, "exp_bits": exp_bits}
    for subtract in (False, True):
        w = (-1 if subtract else 1) * np.eye(n, dtype=np.int64)
        jobs = [{"w_m": w, "w_e": np.zeros((n, 1), np.int64), "x_m": b_m[k],
                 "x_e": b_e[k:k + 1], "b_m": a_m[k], "b_e": np.repeat(a_e[k], n),
                 "rand": rand[k]} for k in range(blocks)]
        got = run_rtl(cached(BFPColumn, **params), jobs, rounding=rounding, bias=True,
                      valid_prob=0.8, ready_prob=0.7, seed=int(subtract))
        m, e = add(a_m, a_e, b_m, b_e, width=width, exp_bits=exp_bits, rounding=rounding,
                   rand=rand, subtract=subtract)
        assert got == [(m[k].tolist(), int(e[k])) for k in range(blocks)]
        if subtract:
            assert got[5] == ([0] * n, 0)


# -- the pipelined combiner in the unpipelined column ------------------------------------------


def test_pipelined_combiner_validation():
    with pytest.raises(TypeError, match="pipelined_combiner must be a bool, not 1"):
        BFPColumn(pipelined_combiner=1)
    assert BFPColumn(pipelined=False, pipelined_combiner=True).pipelined_combiner is True
    assert BFPColumn().pipelined_combiner is False


@pytest.mark.parametrize("lanes", _quick_only(6, 4, 5, 6, 7, 8))
def test_pipelined_combiner_matches_model(lanes, stable_seed):
    """The iCEBreaker's column with the pipelined combiner (``pipelined_combiner=True``, four
    stages) at lane counts around its write delay: a transparent read port where a lane is
    read again in the cycle its update is written (N = 4). Tiny products (the max rule's
    running maximum below zero), bias, several blocks, random stalls, then at full rate."""
    rng = np.random.default_rng(stable_seed("pipelined_combiner", lanes))
    params = {"lanes": lanes, "block": 4, "max_blocks": 4}
    jobs = [make_job(rng, lanes, 3, 4, kind=kind, bias=True)
            for kind in ("gauss", "heavy", "uniform")]
    jobs[2]["w_e"][:] = rng.integers(-60, -50, jobs[2]["w_e"].shape)
    jobs[2]["x_e"][:] = -45
    model = ColumnModel(**params)
    for kwargs in ({"valid_prob": 0.8, "ready_prob": 0.7, "seed": 3}, {}):
        col = cached(BFPColumn, **params, **LITE, pipelined_combiner=True)
        assert col.pipelined_combiner
        got = run_rtl(col, jobs, bias=True, **kwargs)
        assert got == run_model(model, jobs, bias=True)


def test_pipelined_combiner_reaches_the_top():
    """``bfp_pipelined_combiner`` of the top and the sequencer builds the column with it; it is
    hardware-only (the protocol model takes and ignores it)."""
    import re

    from lowbit.hw.sequencer import Sequencer
    from lowbit.hw.top import Accelerator
    from lowbit.sim.link import DeviceModel
    from lowbit.sim.topparams import check_top_params
    with pytest.raises(TypeError, match="bfp_pipelined_combiner must be a bool, not 1"):
        check_top_params(bfp_pipelined_combiner=1)
    with pytest.raises(TypeError, match="bfp_pipelined_combiner must be a bool, not 1"):
        Sequencer(bfp_pipelined_combiner=1)
    params = dict(sequencer=True, matrix_lanes=8, bfp_pipelined=False, quantiser=False,
                  discrete=False, bfp_stochastic=False, bfp_predictor=False)
    DeviceModel(**params, bfp_pipelined_combiner=True)
    seq = {on: Sequencer(**{**Accelerator(**params, bfp_pipelined_combiner=on)
                            .sequencer_params(), "lut": False, "grand": False})
           for on in (False, True)}
    # The combiner's stages S1 and S1b: registers in one build (more than 60 flip-flops at
    # these widths), combinational in the other.
    flops = {on: sum(int(w) for w in re.findall(r"cell \$dff \S+\n\s+parameter \\WIDTH (\d+)",
                                                 rtlil.convert(s)))
             for on, s in seq.items()}
    assert flops[True] > flops[False] + 60


def test_block_ram_read_registers_have_no_init_only_for_synthesis():
    """The accumulators' read registers carry the empty ``init`` (undefined power-up, as the
    block RAM's output register) only when elaborated for a synthesis platform: without one
    (``verilog.convert``) Yosys would print it as ``{0{1'b0}}``, which Icarus rejects."""
    from amaranth.back import verilog

    from lowbit.hw.bfp.shared import NO_INIT, no_init

    assert no_init(object()) == NO_INIT and no_init(None) == {}
    text = verilog.convert(BFPColumn(**SMALL, acc_block_ram=True, pipelined=False),
                           name="col")
    assert "reg [" in text and "{0{" not in text
