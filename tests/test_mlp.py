"""The digits MLP: training, conversion to BFP / discrete layers, golden forward
(lowbit.sim.mlp)."""

import numpy as np
import pytest

from lowbit.sim import mlp
from lowbit.sim.bfp import dequantise, exponent_range
from lowbit.sim.bfp_column import ColumnModel
from lowbit.sim.discrete import CodeBook
from lowbit.sim.network import BFPDense, DiscreteDense, bfp_dense, discrete_dense
from lowbit.sim.quantiser import quantise_bfp


@pytest.fixture(scope="module")
def split():
    return mlp.load_split()


@pytest.fixture(scope="module")
def model(split):
    return mlp.train_float(split.x_train, split.y_train)


@pytest.fixture(scope="module")
def bfp_net(model, split):
    return mlp.convert_bfp(model, split.x_train)


def _discrete(model, split, bits):
    scales = mlp.discrete_scales(model, bits)
    tuned = mlp.finetune_discrete(model, split.x_train, split.y_train, bits=bits, scales=scales)
    return mlp.convert_discrete(tuned, split.x_train, bits=bits, scales=scales)


@pytest.fixture(scope="module")
def disc_net(model, split):
    return _discrete(model, split, 3)


# -- data and training ------------------------------------------------------------------------

def test_split_is_fixed(split):
    again = mlp.load_split()
    assert split.x_train.shape == (1257, 64) and split.x_test.shape == (540, 64)
    assert np.array_equal(split.x_test, again.x_test)
    assert np.array_equal(split.y_train, again.y_train)
    assert split.x_train.min() == 0 and split.x_train.max() == 16
    assert set(np.unique(split.y_test)) == set(range(10))


def test_training_is_deterministic(model, split):
    again = mlp.train_float(split.x_train, split.y_train)
    for name in ("w1", "b1", "w2", "b2"):
        assert np.array_equal(getattr(model, name), getattr(again, name)), name
    other = mlp.train_float(split.x_train, split.y_train, seed=1, epochs=1)
    assert not np.array_equal(other.w1, model.w1)


def test_float_accuracy(model, split):
    assert mlp.accuracy(model.predict(split.x_test), split.y_test) >= 0.95
    assert model.hidden == 32


def test_finetune_is_deterministic(model, split):
    a = mlp.finetune_discrete(model, split.x_train[:200], split.y_train[:200], epochs=2)
    b = mlp.finetune_discrete(model, split.x_train[:200], split.y_train[:200], epochs=2)
    assert np.array_equal(a.w1, b.w1) and np.array_equal(a.b2, b.b2)
    assert not np.array_equal(a.w1, model.w1)


def test_cache(tmp_path, split):
    path = tmp_path / "sub" / "mlp.npz"
    first = mlp.load_or_train(str(path), split=split, epochs=1)
    assert path.exists()
    second = mlp.load_or_train(str(path), epochs=50)     # loaded, not retrained
    assert np.array_equal(first.w2, second.w2)


# -- input quantisation -----------------------------------------------------------------------

def test_input_quantisation_is_lossless(split):
    codes = mlp.pixels_to_f16(split.x_test[:50])
    assert codes.dtype == np.uint16 and codes.shape == (50, 64)
    m, e = mlp.InputQuant("bfp", block=16).quantise(codes)
    assert m.shape == (50, 64) and e.shape == (50, 4)
    assert np.array_equal(dequantise(m.reshape(50, 4, 16), e), split.x_test[:50] / 16)
    assert np.array_equal(m[7], quantise_bfp(split.x_test[7] / 16, block=16)[0])
    q, qe = mlp.InputQuant("int8", shift=-6).quantise(codes)
    assert np.array_equal(q, split.x_test[:50] * 4) and np.all(qe == -6)
    q7, _ = mlp.InputQuant("int8", shift=-7).quantise(codes)
    assert q7.max() == 127                      # pixel 16 saturates at shift -7


# -- BFP network ------------------------------------------------------------------------------

def test_bfp_accuracy_within_one_point(model, bfp_net, split):
    f = mlp.accuracy(model.predict(split.x_test), split.y_test)
    q = mlp.accuracy(mlp.predict(bfp_net, split.x_test), split.y_test)
    assert abs(q - f) <= 0.01, (f, q)


def test_bfp_conversion_invariants(bfp_net):
    hidden, output = bfp_net.layers
    assert bfp_net.variant == "bfp" and bfp_net.input_quant.block == 16
    assert isinstance(hidden, BFPDense) and isinstance(output, BFPDense)
    assert hidden.w_m.shape == (32, 64) and hidden.w_e.shape == (32, 4)
    assert output.w_m.shape == (10, 32) and output.w_e.shape == (10, 2)
    e_lo, e_hi = exponent_range(8)
    for layer in (hidden, output):
        assert np.abs(layer.w_m).max() == 127          # the floor rule uses the whole range
        assert np.abs(layer.bias_m).max() <= 127
        for e in (layer.w_e, layer.bias_e):
            assert e.min() >= e_lo and e.max() <= e_hi
        assert layer.width == 8 and layer.rounding == "nearest"
    assert hidden.exp_mode == "fixed" and hidden.table_exp == hidden.out_exp
    codes = np.arange(256)
    assert np.array_equal(hidden.table, np.maximum(np.where(codes > 127, codes - 256, codes), 0))
    assert output.exp_mode == "max" and output.table is None


def test_bfp_weights_dequantise_close(model, bfp_net):
    hidden, output = bfp_net.layers
    for layer, w in ((hidden, model.w1), (output, model.w2)):
        deq = dequantise(layer.w_m.reshape(len(w), -1, 16), layer.w_e)
        # Nearest rounding: error at most half a step of the block's exponent; a block
        # maximum that rounds to 128 saturates to 127 (floor rule): at most one step.
        step = np.repeat(np.ldexp(1.0, layer.w_e), 16, axis=1)
        err = np.abs(deq - w)
        sat = np.abs(layer.w_m) == 127
        assert np.all(err[~sat] <= step[~sat] / 2) and np.all(err[sat] <= step[sat])


def test_bfp_no_saturation_on_calibration_set(bfp_net, split):
    hidden = bfp_net.layers[0]
    x_m, x_e = bfp_net.input_quant.quantise(mlp.pixels_to_f16(split.x_train))
    acc = mlp._bfp_accumulators(hidden, x_m, x_e, ColumnModel())
    top = np.abs(acc).max() / 2.0 ** hidden.out_exp
    assert 63.5 < top <= 127                  # fits, and the next smaller exponent would not


def test_bfp_hidden_matches_float(model, bfp_net, split):
    """The hidden codes are relu(W x + b) of the quantised operands within the documented
    column error (accumulation < 5 · 2^(ea - 3), rounding half a step)."""
    hidden = bfp_net.layers[0]
    x = split.x_test[:20]
    x_m, x_e = bfp_net.input_quant.quantise(mlp.pixels_to_f16(x))
    w = dequantise(hidden.w_m.reshape(32, 4, 16), hidden.w_e)
    b = np.ldexp(hidden.bias_m.astype(float), hidden.bias_e)
    col = ColumnModel()
    for xm, xe, pix in zip(x_m, x_e, x, strict=True):
        m, e = bfp_dense(hidden, xm, xe, col)
        assert np.all(e == hidden.out_exp) and m.min() >= 0
        exact = np.maximum(w @ (pix / 16) + b, 0)
        assert np.all(np.abs(np.ldexp(m.astype(float), e) - exact) <= 0.51 * 2.0 ** e)


def test_forward_chains_the_layers(bfp_net, split):
    codes = mlp.pixels_to_f16(split.x_test[:5])
    m, e = mlp.forward(bfp_net, codes)
    assert m.shape == (5, 10) and e.shape == (5, 10)
    col = ColumnModel()
    x_m, x_e = bfp_net.input_quant.quantise(codes)
    for i in range(5):
        h, he = bfp_dense(bfp_net.layers[0], x_m[i], x_e[i], col)
        y, ye = bfp_dense(bfp_net.layers[1], h, he[::16], col)
        assert np.array_equal(y, m[i]) and np.array_equal(ye, e[i])
        assert np.all(ye == ye[0]) and np.abs(y).max() >= 64   # "max" selector, one tile


def test_forward_with_small_column(model, split):
    """N = 4 lanes: three output tiles with their own exponents, argmax over m · 2^e."""
    col = ColumnModel(lanes=4, block=8)
    net = mlp.convert_bfp(model, split.x_train[:300], column=col)
    assert net.layers[0].w_e.shape == (32, 8)
    m, e = mlp.forward(net, mlp.pixels_to_f16(split.x_test[:40]), column=col)
    assert len(np.unique(e[:, [0, 4, 8]])) > 1
    pred = mlp.predictions(m, e)
    assert mlp.accuracy(pred, split.y_test[:40]) >= 0.9
    with pytest.raises(ValueError, match="block size"):
        mlp.forward(net, mlp.pixels_to_f16(split.x_test[:1]))


def test_predictions_rule():
    m = np.array([[3, 5, 5, 1], [100, 60, 0, 0], [100, 60, 0, 0]])
    e = np.array([[0, 0, 0, 0], [-2, -2, -2, -2], [-3, -1, 0, 0]])
    assert list(mlp.predictions(m, e)) == [1, 0, 1]


# -- discrete network -------------------------------------------------------------------------

def test_discrete_accuracy(model, disc_net, split):
    """3-bit book after fine-tuning: measured 0.969 (float 0.970). The floor 0.95 is two points
    under the float model: a weight alphabet of 7 values with truncating shifts may lose more
    than BFP's one point, but not more than that on this data set."""
    q = mlp.accuracy(mlp.predict(disc_net, split.x_test), split.y_test)
    assert q >= 0.95, q


def test_discrete_2bit_accuracy(model, split):
    """Ternary weights (measured 0.950): floor 0.90, the accuracy one hidden unit's worth of
    slack above what ternary 64-32-10 nets typically lose (a few points)."""
    net = _discrete(model, split, 2)
    assert net.layers[0].book.n == 2
    assert mlp.accuracy(mlp.predict(net, split.x_test), split.y_test) >= 0.90


def test_discrete_conversion_invariants(disc_net, split):
    hidden, output = disc_net.layers
    assert isinstance(hidden, DiscreteDense) and isinstance(output, DiscreteDense)
    assert hidden.w_codes.shape == (32, 64) and output.w_codes.shape == (10, 32)
    assert hidden.book == mlp.discrete_book(3) and hidden.book.n == 3
    assert disc_net.input_quant == mlp.InputQuant("int8", shift=-6)
    for layer in (hidden, output):
        assert 0 <= layer.w_codes.min() and layer.w_codes.max() <= 7
        assert layer.acc_width == 16 and 0 <= layer.shift <= 24
    a1, a2 = disc_net.scales
    assert hidden.out_exp == hidden.shift + a1 - 6 == hidden.table_exp
    assert output.out_exp == output.shift + a2 + hidden.table_exp and output.table is None
    # No saturation on the calibration set: the requantised values fit before the clamp,
    # and the shift is the least that does.
    x_m, _ = disc_net.input_quant.quantise(mlp.pixels_to_f16(split.x_train))
    v = mlp._discrete_acc(hidden.w_codes, hidden.book, x_m, 16) + hidden.bias
    s = hidden.shift
    assert np.abs((v + (1 << (s - 1))) >> s).max() <= 127
    if s:
        assert np.abs(v >> (s - 1)).max() > 127 or np.abs(v).max() > 127


def test_discrete_zero_code_is_zero():
    book = mlp.discrete_book(3)
    assert list(book.values()) == [-1, -0.5, -0.25, -2**-7, 2**-7, 0.25, 0.5, 1]
    layer = DiscreteDense(np.array([[3, 4, 7]]), book)
    m, _ = discrete_dense(layer, np.array([127, -127, 5]))
    assert list(m) == [5]
    assert mlp.discrete_book(2) == CodeBook.from_values([-1, -2**-7, 2**-7, 1])


def test_discrete_forward_matches_batch_path(disc_net, split):
    codes = mlp.pixels_to_f16(split.x_test[:8])
    m, e = mlp.forward(disc_net, codes)
    hidden, output = disc_net.layers
    x_m, _ = disc_net.input_quant.quantise(codes)
    for i in range(8):
        h, _ = discrete_dense(hidden, x_m[i])
        y, ye = discrete_dense(output, h)
        assert np.array_equal(y, m[i]) and np.all(ye == e[i])
    assert np.all(e == output.out_exp)
    # The same through lanes = 1 (no accumulator ever saturates).
    m1, _ = mlp.forward(disc_net, codes, lanes=1)
    assert np.array_equal(m1, m)


# -- argument checks --------------------------------------------------------------------------

def test_train_float_validation(split):
    x, y = split.x_train[:10], split.y_train[:10]
    with pytest.raises(TypeError, match="Hidden unit count must be an integer"):
        mlp.train_float(x, y, hidden=True)
    with pytest.raises(ValueError, match="between 1 and 256, not 0"):
        mlp.train_float(x, y, hidden=0)
    with pytest.raises(TypeError, match="Epoch count"):
        mlp.train_float(x, y, epochs=1.5)
    with pytest.raises(ValueError, match="Learning rate"):
        mlp.train_float(x, y, lr=-1.0)
    with pytest.raises(TypeError, match="Weight decay"):
        mlp.train_float(x, y, weight_decay="0")
    with pytest.raises(ValueError, match="Labels"):
        mlp.train_float(x, y[:5])
    with pytest.raises(ValueError, match="Labels"):
        mlp.train_float(x, y + 10)
    with pytest.raises(ValueError, match="64 pixels"):
        mlp.train_float(x[:, :8], y)
    with pytest.raises(ValueError, match="finite"):
        mlp.train_float(np.full((10, 64), np.nan), y)


def test_model_and_net_validation(model, bfp_net):
    with pytest.raises(ValueError, match="do not form"):
        mlp.FloatMLP(model.w1, model.b1, model.w2[:, :5], model.b2)
    with pytest.raises(ValueError, match="finite"):
        mlp.FloatMLP(model.w1 * np.inf, model.b1, model.w2, model.b2)
    with pytest.raises(TypeError, match="FloatMLP"):
        mlp.convert_bfp("model", np.zeros((1, 64)))
    with pytest.raises(TypeError, match="FloatMLP"):
        mlp.convert_discrete(None, np.zeros((1, 64)))
    with pytest.raises(TypeError, match="ColumnModel"):
        mlp.convert_bfp(model, np.zeros((1, 64)), column=16)
    with pytest.raises(ValueError, match="must divide"):
        mlp.convert_bfp(model, np.zeros((1, 64)), column=ColumnModel(block=64))
    with pytest.raises(ValueError, match="mantissa width 6"):
        mlp.convert_bfp(model, np.zeros((1, 64)), column=ColumnModel(width=6))
    with pytest.raises(ValueError, match="at most 2 blocks"):
        mlp.convert_bfp(model, np.zeros((1, 64)), column=ColumnModel(max_blocks=2))
    with pytest.raises(ValueError, match="Mantissa width must be an integer between 2 and 8"):
        mlp.convert_bfp(model, np.zeros((1, 64)), width=9)
    with pytest.raises(ValueError, match="Variant"):
        mlp.QuantisedMLP("int4", mlp.InputQuant(), bfp_net.layers)
    with pytest.raises(TypeError, match="DiscreteDense"):
        mlp.QuantisedMLP("discrete", mlp.InputQuant(), bfp_net.layers)
    with pytest.raises(TypeError, match="QuantisedMLP"):
        mlp.forward(bfp_net.layers, np.zeros((1, 64), np.uint16))
    with pytest.raises(ValueError, match="shape"):
        mlp.forward(bfp_net, np.zeros((1, 65), np.uint16))


def test_discrete_validation(model):
    with pytest.raises(ValueError, match="Code width must be an integer between 2 and 3"):
        mlp.discrete_book(1)
    with pytest.raises(TypeError, match="Code width"):
        mlp.discrete_book(True)
    with pytest.raises(TypeError, match="pair"):
        mlp.convert_discrete(model, np.zeros((1, 64)), scales=0)
    with pytest.raises(ValueError, match="Scale exponent"):
        mlp.finetune_discrete(model, np.zeros((1, 64)), [0], scales=(0, 99))
    with pytest.raises(ValueError, match="Input shift"):
        mlp.convert_discrete(model, np.zeros((1, 64)), input_shift=200)
    with pytest.raises(ValueError, match="Accumulator width"):
        mlp.convert_discrete(model, np.zeros((1, 64)), acc_width=40)
    with pytest.raises(ValueError, match="saturate"):
        mlp.convert_discrete(model, np.zeros((1, 64)), acc_width=10)


def test_input_quant_and_accuracy_validation():
    with pytest.raises(ValueError, match="'bfp' or 'int8'"):
        mlp.InputQuant("f16")
    with pytest.raises(ValueError, match="Exponent rule"):
        mlp.InputQuant(rule="round")
    with pytest.raises(TypeError, match="Block size"):
        mlp.InputQuant(block=16.0)
    with pytest.raises(ValueError, match="Mantissa width"):
        mlp.InputQuant(width=9)
    with pytest.raises(ValueError, match="equal"):
        mlp.accuracy([1, 2], [1])
    with pytest.raises(ValueError, match="non-empty"):
        mlp.accuracy([], [])
    assert mlp.accuracy([1, 2, 3, 4], [1, 2, 0, 4]) == 0.75
