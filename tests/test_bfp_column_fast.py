"""The vectorised ColumnModel (lowbit.sim.bfp_column) against its former scalar implementation.

:class:`ScalarColumn` below is the per-lane, per-block Python implementation that
``ColumnModel`` had before it was vectorised, kept verbatim as the reference: every product of
thousands of random cases (Gaussian, heavy-tailed, uniform and full-scale operands, zero blocks,
rows and vectors, NaN blocks, every rounding, exponent mode and runtime width, the bias path,
stochastic rounding with fixed random streams, the predictor's history carried across products)
must give the same mantissas, exponent, accumulators and predictor state, on the int64 path,
on the Python-integer path (wide columns) and batched over vectors and row tiles.
"""

import numpy as np
import pytest

from lowbit.sim.bfp import ROUNDINGS, exponent_range, nan_exponent
from lowbit.sim.bfp_column import EXP_MODES, ColumnModel, ExponentPredictor, clog2


class ScalarColumn:
    """The scalar reference: ``ColumnModel``'s arithmetic before vectorisation."""

    def __init__(self, *, lanes=16, block=16, width=8, exp_bits=8, max_blocks=16, frac_bits=3,
                 rand_bits=8, stat_shift=4, predictor=True):
        self.lanes, self.block, self.width, self.exp_bits = lanes, block, width, exp_bits
        self.max_blocks, self.frac_bits, self.rand_bits = max_blocks, frac_bits, rand_bits
        self.pw = 2 * self.width + clog2(self.block)
        self.aw = self.pw + self.frac_bits + clog2(self.max_blocks + 2)
        self.predictor = ExponentPredictor(width=width, exp_bits=exp_bits, stat_shift=stat_shift)
        self.has_predictor = predictor

    def _combine(self, a, ea, p, e, first):
        c = p << self.frac_bits
        if first or a == 0:
            return c, e
        if p == 0:
            return a, ea
        if e > ea:
            return (a >> min(e - ea, self.aw - 1)) + c, e
        return a + (c >> min(ea - e, self.aw - 1)), ea

    def accumulate(self, w_m, w_e, x_m, x_e, bias_m=None, bias_e=None):
        n, b = self.lanes, self.block
        w_m, w_e, x_m, x_e = (np.asarray(v, dtype=np.int64) for v in (w_m, w_e, x_m, x_e))
        nb = x_e.shape[0]
        nan_code = nan_exponent(self.exp_bits)
        acc = [0] * n
        ea = [0] * n
        nan = [False] * n
        for k in range(nb):
            sl = slice(k * b, (k + 1) * b)
            prods = w_m[:, sl] @ x_m[sl]
            for i in range(n):
                nan[i] |= bool(w_e[i, k] == nan_code or x_e[k] == nan_code)
                acc[i], ea[i] = self._combine(acc[i], ea[i], int(prods[i]),
                                              int(w_e[i, k] + x_e[k]), k == 0)
        if bias_m is not None:
            bias_m = np.broadcast_to(np.asarray(bias_m, dtype=np.int64), (n,))
            bias_e = np.broadcast_to(np.asarray(bias_e, dtype=np.int64), (n,))
            for i in range(n):
                nan[i] |= bool(bias_e[i] == nan_code)
                acc[i], ea[i] = self._combine(acc[i], ea[i], int(bias_m[i]), int(bias_e[i]),
                                              False)
        return acc, ea, nan

    def raw_max_exponent(self, acc, ea, *, width):
        tops = [abs(a).bit_length() + e for a, e in zip(acc, ea, strict=True) if a != 0]
        return max(tops) - self.frac_bits - (width - 1) if tops else None

    def select_exponent(self, acc, ea, nan, *, width, exp_mode, fixed_exp, pred_margin):
        e_min, e_max = exponent_range(self.exp_bits)
        if exp_mode == "predicted":
            raw = self.raw_max_exponent(acc, ea, width=width)
            e4, restart = self.predictor.select(raw, margin=pred_margin, nan=any(nan))
            if any(nan):
                return nan_exponent(self.exp_bits)
            return min(max(raw if restart else e4, e_min), e_max)
        if any(nan):
            return nan_exponent(self.exp_bits)
        if exp_mode == "max":
            raw = self.raw_max_exponent(acc, ea, width=width)
            e4 = 0 if raw is None else raw
        else:
            e4 = fixed_exp
        return min(max(e4, e_min), e_max)

    def shift_round(self, a, s, *, width, rounding, r=0):
        mx = (1 << (width - 1)) - 1
        if s <= 0:
            q = a << min(-s, self.width + 1)
        else:
            s = min(s, self.aw + self.rand_bits)
            q = a >> s
            rem = a - (q << s)
            if rounding == "nearest":
                half = 1 << (s - 1)
                q += rem > half or (rem == half and q & 1)
            elif rounding == "zero":
                q += a < 0 and rem != 0
            else:
                q += (rem << self.rand_bits) + (r << s) >= 1 << (s + self.rand_bits)
        return max(-mx, min(mx, q))

    def matvec(self, w_m, w_e, x_m, x_e, *, bias_m=None, bias_e=None, width=None,
               rounding="nearest", exp_mode="max", fixed_exp=0, rand=None, pred_k=3,
               pred_margin=2):
        width = self.width if width is None else width
        rand = np.zeros(self.lanes, dtype=np.int64) if rand is None else rand
        if exp_mode == "predicted" and not self.has_predictor:
            exp_mode = "max"
        acc, ea, nan = self.accumulate(w_m, w_e, x_m, x_e, bias_m, bias_e)
        e4 = self.select_exponent(acc, ea, nan, width=width, exp_mode=exp_mode,
                                  fixed_exp=fixed_exp, pred_margin=pred_margin)
        if exp_mode != "predicted":
            self.predictor.clear()
            self.predictor.event = None
        if any(nan):
            return np.zeros(self.lanes, dtype=np.int64), e4
        m = [self.shift_round(a, e4 - e + self.frac_bits, width=width, rounding=rounding,
                              r=int(r)) for a, e, r in zip(acc, ea, rand, strict=True)]
        if exp_mode == "predicted" and self.predictor.event not in ("zero", "nan"):
            self.predictor.update(max(abs(v) for v in m), e4, width=width, k=pred_k,
                                  restart=self.predictor.event != "predicted")
        return np.array(m, dtype=np.int64), e4


# -- random cases --------------------------------------------------------------------------------

def random_params(rng, *, wide=False):
    """Generator parameters of a random column (``wide``: accumulators beyond int64's path)."""
    if wide:
        p = {"width": 0}
        while p["width"] == 0 or ColumnModel(**p)._dtype is not object:
            p = dict(lanes=int(rng.integers(4, 7)), block=int(rng.choice([64, 128, 256])),
                     width=int(rng.integers(12, 17)), exp_bits=int(rng.integers(3, 13)),
                     max_blocks=int(rng.choice([4, 300, 4096])),
                     frac_bits=int(rng.integers(0, 9)),
                     rand_bits=int(rng.integers(8, 17)), stat_shift=int(rng.integers(0, 9)))
        return p
    return dict(lanes=int(rng.integers(4, 13)), block=int(rng.choice([2, 3, 4, 8, 16])),
                width=int(rng.integers(2, 9)), exp_bits=int(rng.integers(3, 9)),
                max_blocks=int(rng.integers(1, 9)), frac_bits=int(rng.integers(0, 9)),
                rand_bits=int(rng.integers(1, 17)), stat_shift=int(rng.integers(0, 9)),
                predictor=bool(rng.random() < 0.9))


def mantissas(rng, shape, width, kind=None):
    """Mantissas of one of several distributions."""
    lim = 1 << (width - 1)
    kind = rng.integers(0, 5) if kind is None else kind
    if kind == 0:                                   # Gaussian
        m = np.round(rng.standard_normal(shape) * lim / 3)
    elif kind == 1:                                 # heavy-tailed
        m = np.round(rng.standard_cauchy(shape) * lim / 20)
    elif kind == 2:                                 # uniform
        m = rng.integers(-lim, lim, shape)
    elif kind == 3:                                 # full scale, both signs
        m = rng.choice([-lim, lim - 1], shape)
    else:                                           # sparse
        m = rng.integers(-lim, lim, shape) * (rng.random(shape) < 0.15)
    return np.clip(m, -lim, lim - 1).astype(np.int64)


def exponents(rng, shape, exp_bits, nan_prob, centre=None):
    """Exponent codes: narrow or over the whole range, NaN codes with ``nan_prob``; around
    ``centre`` if given."""
    e_min, e_max = exponent_range(exp_bits)
    if centre is not None:
        e = np.full(shape, centre)
    elif rng.random() < 0.5:
        c = int(rng.integers(e_min, e_max + 1)) // 2
        e = np.clip(c + rng.integers(-3, 4, shape), e_min, e_max)
    else:
        e = rng.integers(e_min, e_max + 1, shape)
    return np.where(rng.random(shape) < nan_prob, nan_exponent(exp_bits), e)


def random_product(rng, p, rows, centre=None):
    """Operands and configuration of one product with ``rows`` weight rows; with ``centre``
    a steady stream (Gaussian mantissas, exponents near ``centre``, no NaN) whose output
    exponent the predicted selector can follow."""
    b, w = p["block"], p["width"]
    nb = int(rng.integers(1, min(p["max_blocks"], 8) + 1)) if centre is None else 1
    nan_prob = 0.02 if rng.random() < 0.3 and centre is None else 0.0
    kind = None if centre is None else 0
    w_m = mantissas(rng, (rows, nb * b), w, kind)
    x_m = mantissas(rng, (nb * b,), w, kind)
    if rng.random() < 0.3:                          # all-zero vector blocks
        x_m.reshape(nb, b)[rng.random(nb) < 0.5] = 0
    if rng.random() < 0.2:                          # all-zero rows
        w_m[rng.random(rows) < 0.3] = 0
    if rng.random() < 0.05:
        x_m[:] = 0
    kw = dict(width=int(rng.integers(2, w + 1)), rounding=ROUNDINGS[rng.integers(0, 3)],
              exp_mode=EXP_MODES[rng.integers(0, 3)], pred_k=int(rng.integers(1, 8)),
              pred_margin=int(rng.integers(0, 8)),
              fixed_exp=int(rng.integers(nan_exponent(p["exp_bits"]),
                                         -nan_exponent(p["exp_bits"]))))
    if rng.random() < 0.5:
        kw["bias_m"] = mantissas(rng, (rows,), w)
        kw["bias_e"] = exponents(rng, (rows,), p["exp_bits"], nan_prob, centre)
    return (w_m, exponents(rng, (rows, nb), p["exp_bits"], nan_prob, centre), x_m,
            exponents(rng, (nb,), p["exp_bits"], nan_prob, centre), kw)


def run_sequence(rng, params, products, *, force_object=False):
    """``products`` products on one model pair in the same mode (the history carries)."""
    model, ref = ColumnModel(**params), ScalarColumn(**params)
    if force_object:
        model._dtype = object
    mode = EXP_MODES[rng.integers(0, 3)]
    e_min, e_max = exponent_range(params["exp_bits"])
    centre = int(rng.integers(e_min, e_max + 1)) // 2 if rng.random() < 0.5 else None
    for i in range(products):
        w_m, w_e, x_m, x_e, kw = random_product(rng, params, params["lanes"], centre)
        kw["exp_mode"] = mode if rng.random() < 0.9 else kw["exp_mode"]
        if centre is not None:                      # a steady configuration too
            kw.update(width=params["width"], pred_k=1 + centre % 7, pred_margin=2)
        rand = rng.integers(0, 1 << params["rand_bits"], params["lanes"])
        if kw["rounding"] == "stochastic":
            kw["rand"] = rand
        want = ref.accumulate(w_m, w_e, x_m, x_e, kw.get("bias_m"), kw.get("bias_e"))
        assert model.accumulate(w_m, w_e, x_m, x_e, kw.get("bias_m"), kw.get("bias_e")) == want
        y, e = model.matvec(w_m, w_e, x_m, x_e, **kw)
        ry, re_ = ref.matvec(w_m, w_e, x_m, x_e, **kw)
        ctx = (params, i, kw)
        assert y.dtype == np.int64 and y.tolist() == ry.tolist() and e == re_, ctx
        assert model.predictor.state() == ref.predictor.state(), ctx
        assert model.predictor.event == ref.predictor.event, ctx


@pytest.mark.parametrize("seed", range(8))
def test_matvec_equals_scalar_reference(seed):
    """~2400 products of random columns, operands and modes, in sequences of 1..40."""
    rng = np.random.default_rng(1000 + seed)
    done = 0
    while done < 300:
        n = int(rng.integers(1, 41))
        run_sequence(rng, random_params(rng), n)
        done += n


@pytest.mark.parametrize("seed", range(2))
def test_python_integer_path_equals_scalar_reference(seed):
    """The object-array path: wide columns (``AW + R > 61``) and small ones forced onto it."""
    rng = np.random.default_rng(2000 + seed)
    for _ in range(6):
        params = random_params(rng, wide=True)
        assert ColumnModel(**params)._dtype is object
        run_sequence(rng, params, int(rng.integers(1, 8)))
    for _ in range(6):
        run_sequence(rng, random_params(rng), int(rng.integers(1, 20)), force_object=True)


def test_int64_path_limit():
    """int64 exactly when every intermediate value fits: ``AW + R <= 61``."""
    assert ColumnModel()._dtype is np.int64
    widest8 = dict(width=8, block=256, max_blocks=4096, frac_bits=8, rand_bits=16)
    assert ColumnModel(**widest8)._dtype is np.int64                 # AW + R = 45 + 16
    assert ColumnModel(**{**widest8, "width": 9})._dtype is object
    edge = dict(width=16, block=256, max_blocks=64, frac_bits=8)      # AW = 40 + 8 + 7 = 55
    assert ColumnModel(**edge, rand_bits=6)._dtype is np.int64
    assert ColumnModel(**edge, rand_bits=7)._dtype is object


@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_shift_round_exhaustive_shifts(rounding):
    """The output shifter on every shift from far left to beyond ``AW + R``, both paths,
    accumulators of every magnitude (including ±2^(AW-1)-ish and the int64 edge)."""
    rng = np.random.default_rng(7)
    for params in (dict(width=8, frac_bits=3, rand_bits=8),
                   dict(width=16, block=256, max_blocks=64, frac_bits=8, rand_bits=6),
                   dict(width=16, block=256, max_blocks=4096, frac_bits=8, rand_bits=16)):
        model, ref = ColumnModel(**params), ScalarColumn(**params)
        top = model.aw - 1
        mags = [0, 1, 2, 3] + [int(v) for v in 1 << rng.integers(0, top, 40)]
        accs = [s * (m + d) for m in mags for d in (-1, 0, 1) for s in (1, -1)
                if 0 <= m + d < 1 << top]
        for s in range(-20, model.aw + model.rand_bits + 4):
            width = int(rng.integers(2, model.width + 1))
            rand = rng.integers(0, 1 << model.rand_bits, len(accs))
            got = model._round(np.array(accs, dtype=model._dtype),
                               np.full(len(accs), s, dtype=np.int64), width, rounding, rand)
            want = [ref.shift_round(a, s, width=width, rounding=rounding, r=int(r))
                    for a, r in zip(accs, rand, strict=True)]
            assert got.tolist() == want, (params, s)
            assert model.shift_round(accs[-1], s, width=width, rounding=rounding,
                                     r=int(rand[-1])) == want[-1]


def test_max_rule_bit_length_near_powers_of_two():
    """The max rule's bit length is exact where float64 would round up to the next power."""
    model = ColumnModel(width=16, block=256, max_blocks=64, frac_bits=8, rand_bits=6)
    assert model._dtype is np.int64
    for k in range(1, model.aw):                   # float64 is inexact from 2^54 on
        for a in ((1 << k) - 1, 1 << k, (1 << k) + 1, -((1 << k) - 1)):
            acc = [0, a, 0, 0]
            assert model.raw_max_exponent(acc, [5, -3, 7, 0]) == \
                abs(a).bit_length() - 3 - model.frac_bits - (model.width - 1)
    assert model.raw_max_exponent([0] * 4, [1] * 4) is None


# -- batches of vectors and row tiles ----------------------------------------------------------

@pytest.mark.parametrize("seed", range(6))
def test_matvec_batch_is_matvec_per_vector_and_tile(seed):
    """``matvec_batch`` = the tiles of every vector as single products, vector by vector,
    tile by tile (padding rows zero, exponent 0, zero bias), in every mode including the
    predicted selector, whose history carries across tiles and vectors."""
    rng = np.random.default_rng(3000 + seed)
    for trial in range(25):
        params = random_params(rng, wide=trial == 24)
        n = params["lanes"]
        rows, v = int(rng.integers(1, 3 * n + 1)), int(rng.integers(1, 5))
        w_m, w_e, x_m, x_e, kw = random_product(rng, params, rows)
        nb, b = w_e.shape[1], params["block"]
        x_m = np.stack([mantissas(rng, (nb * b,), params["width"]) for _ in range(v)])
        x_m.reshape(v, nb, b)[rng.random((v, nb)) < 0.2] = 0      # zero blocks
        x_e = exponents(rng, (v, nb), params["exp_bits"], 0.02 if trial % 4 == 0 else 0.0)
        model, ref = ColumnModel(**params), ScalarColumn(**params)
        t = model.tiles(rows)
        rand = rng.integers(0, 1 << params["rand_bits"], (v, t, n))
        if kw["rounding"] == "stochastic":
            kw["rand"] = rand
        m, e = model.matvec_batch(w_m, w_e, x_m, x_e, **kw)
        assert m.shape == e.shape == (v, rows) and m.dtype == e.dtype == np.int64
        pad = t * n - rows
        wm, we = np.pad(w_m, ((0, pad), (0, 0))), np.pad(w_e, ((0, pad), (0, 0)))
        for i in range(v):
            for j in range(t):
                sl = slice(j * n, (j + 1) * n)
                one = dict(kw)
                if "bias_m" in kw:
                    one["bias_m"] = np.pad(kw["bias_m"], (0, pad))[sl]
                    one["bias_e"] = np.pad(kw["bias_e"], (0, pad))[sl]
                if "rand" in kw:
                    one["rand"] = rand[i, j]
                rm, re_ = ref.matvec(wm[sl], we[sl], x_m[i], x_e[i], **one)
                real = min(n, rows - j * n)
                assert m[i, sl][:real].tolist() == rm[:real].tolist(), (seed, trial, i, j)
                assert e[i, sl][:real].tolist() == [re_] * real, (seed, trial, i, j)
        assert model.predictor.state() == ref.predictor.state()
        acc, ea, nan = model.accumulate_batch(w_m, w_e, x_m, x_e, kw.get("bias_m"),
                                              kw.get("bias_e"))
        for i in range(v):
            ra, rea, rnan = ref.accumulate(wm[:n], we[:n], x_m[i], x_e[i],
                                           None if "bias_m" not in kw else
                                           np.pad(kw["bias_m"], (0, pad))[:n],
                                           None if "bias_m" not in kw else
                                           np.pad(kw["bias_e"], (0, pad))[:n])
            k = min(n, rows)
            assert [int(a) for a in acc[i, :k]] == ra[:k]
            assert ea[i, :k].tolist() == rea[:k] and nan[i, :k].tolist() == rnan[:k]


def test_matvec_batch_checks():
    model = ColumnModel(lanes=4, block=4)
    z = np.zeros
    with pytest.raises(ValueError, match="shapes"):
        model.matvec_batch(z((4, 6), int), z((4, 1), int), z((1, 6), int), z((1, 1), int))
    with pytest.raises(ValueError, match="shapes"):
        model.matvec_batch(z((4, 4), int), z((4, 1), int), z(4, int), z(1, int))
    with pytest.raises(ValueError, match="Block count must be between 1 and 16, not 17"):
        model.matvec_batch(z((4, 68), int), z((4, 17), int), z((1, 68), int), z((1, 17), int))
    with pytest.raises(ValueError, match="Mantissas must fit"):
        model.matvec_batch(np.full((4, 4), 200), z((4, 1), int), z((1, 4), int),
                           z((1, 1), int))
    with pytest.raises(ValueError, match="Vector exponents must fit"):
        model.matvec_batch(z((5, 4), int), z((5, 1), int), z((1, 4), int), np.full((1, 1), 128))
    with pytest.raises(ValueError, match="Bias exponents must fit"):
        model.matvec_batch(z((5, 4), int), z((5, 1), int), z((1, 4), int), z((1, 1), int),
                           bias_m=z(5, int), bias_e=np.full(5, -129))
    with pytest.raises(ValueError, match="needs rand"):
        model.matvec_batch(z((5, 4), int), z((5, 1), int), z((1, 4), int), z((1, 1), int),
                           rounding="stochastic")
    with pytest.raises(ValueError, match=r"rand must have shape \(1, 2, 4\)"):
        model.matvec_batch(z((5, 4), int), z((5, 1), int), z((1, 4), int), z((1, 1), int),
                           rounding="stochastic", rand=z((1, 4), int))
    with pytest.raises(ValueError, match="rand must be integers in"):
        model.matvec_batch(z((5, 4), int), z((5, 1), int), z((1, 4), int), z((1, 1), int),
                           rounding="stochastic", rand=np.full((1, 2, 4), 256))
    with pytest.raises(ValueError, match="Exponent mode"):
        model.matvec_batch(z((5, 4), int), z((5, 1), int), z((1, 4), int), z((1, 1), int),
                           exp_mode="stats")
    with pytest.raises(ValueError, match="Fixed exponent must be an integer between -128"):
        model.matvec_batch(z((5, 4), int), z((5, 1), int), z((1, 4), int), z((1, 1), int),
                           exp_mode="fixed", fixed_exp=128)
    with pytest.raises(ValueError, match="Runtime mantissa width"):
        model.matvec_batch(z((5, 4), int), z((5, 1), int), z((1, 4), int), z((1, 1), int),
                           width=9)
    m, e = model.matvec_batch(z((5, 4), int), z((5, 1), int), z((0, 4), int), z((0, 1), int))
    assert m.shape == e.shape == (0, 5)
