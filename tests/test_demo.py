"""``lowbit demo digits``: the digits MLP through the driver, bit for bit (boards.demo)."""

import json
import re

import numpy as np
import pytest

from boards import cli, demo
from boards.driver import Accelerator
from sim import mlp


@pytest.fixture(scope="module")
def split():
    return mlp.load_split()


@pytest.fixture(scope="module")
def model(split):
    return mlp.train_float(split.x_train, split.y_train)


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory):
    """One model cache for the module (the first demo run trains, the others load)."""
    return tmp_path_factory.mktemp("build")


@pytest.fixture(scope="module")
def tuned(model, split):
    scales = mlp.discrete_scales(model, 3)
    return mlp.finetune_discrete(model, split.x_train, split.y_train, scales=scales), scales


def _run(acc, net, codes):
    acc.load_network(net.layers, quantise_input=demo._input_quant(net))
    return acc.run_network(codes)


@pytest.mark.parametrize("lanes,block", [(16, 16), (8, 16), (4, 8)])
def test_bfp_through_model_transport(model, split, lanes, block):
    """The driver over sim.link.DeviceModel equals sim.mlp.forward bit for bit, also with
    several output tiles (N < 10) and another block size."""
    acc = Accelerator.model(sequencer=True, matrix_lanes=lanes, block=block, weight_depth=1024)
    column = acc.design.column()
    assert (column.lanes, column.block) == (lanes, block)
    net = mlp.convert_bfp(model, split.x_train[:400], column=column)
    codes = mlp.pixels_to_f16(split.x_test[:60])
    out, stats = _run(acc, net, codes)
    m, e = mlp.forward(net, codes, column=column)
    assert np.array_equal(out.m, m) and np.array_equal(out.e, e)
    assert stats["samples"] == 60 and stats["cycles"] == 0
    assert mlp.accuracy(mlp.predictions(out.m, out.e), split.y_test[:60]) >= 0.9


def test_discrete_through_model_transport(tuned, split):
    acc = Accelerator.model(**demo.SIM_TOP)
    net = mlp.convert_discrete(tuned[0], split.x_train, scales=tuned[1])
    codes = mlp.pixels_to_f16(split.x_test[:60])
    out, _ = _run(acc, net, codes)
    m, e = mlp.forward(net, codes, lanes=acc.design.matrix_lanes)
    assert np.array_equal(out.m, m) and np.array_equal(out.e, e)


def test_input_quant_maps_to_the_program(model, tuned, split):
    from sim.program import InputQuant
    bfp_net = mlp.convert_bfp(model, split.x_train[:100])
    assert demo._input_quant(bfp_net) == InputQuant("device", width=8, rule="floor")
    disc = mlp.convert_discrete(tuned[0], split.x_train[:100], scales=tuned[1])
    assert demo._input_quant(disc) == InputQuant("device", shift=-6)


def test_run_digits_on_the_model(build_dir):
    tmp_path = build_dir
    r = demo.run_digits("bfp", simulator="model", images=100, build_dir=str(tmp_path))
    assert (tmp_path / "demo" / "digits_float_v1.npz").exists()
    assert r.images == 100 and r.test_images == 540
    assert r.device_accuracy == r.golden_accuracy
    assert abs(r.golden_accuracy_all - r.float_accuracy_all) <= 0.01
    assert r.cycles == 0 and r.cycles_per_image is None and r.projections == []
    assert r.design["matrix_lanes"] == 16 and r.design["block"] == 16
    text = demo.format_result(r)
    assert "bit for bit" in text and "not available" in text
    d = demo.run_digits("discrete", simulator="model", images=20, build_dir=str(tmp_path))
    assert (tmp_path / "demo" / "digits_discrete3_v1.npz").exists()
    assert d.device_accuracy == d.golden_accuracy and d.golden_accuracy_all >= 0.95


class _Corrupting:
    """An accelerator whose run_network flips one output code of image ``bad``."""

    def __init__(self, acc, bad):
        self._acc, self._bad = acc, bad

    def __getattr__(self, name):
        return getattr(self._acc, name)

    def run_network(self, x):
        out, stats = self._acc.run_network(x)
        out.m[self._bad, 3] ^= 1
        return out, stats


def test_mismatch_is_detected(build_dir, monkeypatch, capsys):
    tmp_path = build_dir
    acc = _Corrupting(Accelerator.model(**demo.SIM_TOP), 2)
    with pytest.raises(demo.MismatchError, match="image 2 ") as info:
        demo.run_digits(simulator="model", images=5, build_dir=str(tmp_path), accelerator=acc)
    assert info.value.image == 2
    monkeypatch.setattr(demo, "connect", lambda **kw: (
        _Corrupting(Accelerator.model(**demo.SIM_TOP), 1), "corrupted model"))
    assert cli.main(["demo", "digits", "--simulator", "model", "--images", "4",
                     "--build-dir", str(tmp_path)]) == 1
    assert "MISMATCH: image 1 " in capsys.readouterr().err


def test_cli_demo_on_the_model(build_dir, capsys):
    tmp_path = build_dir
    assert cli.main(["demo", "digits", "--simulator", "model", "--images", "30",
                     "--build-dir", str(tmp_path), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["images"] == 30 and r["variant"] == "bfp" and r["device_accuracy"] >= 0.9


@pytest.mark.parametrize("argv,message", [
    (["--images", "0"], "between 1 and 540, not 0"),
    (["--images", "541"], "between 1 and 540, not 541"),
    (["--port", "/dev/null", "--simulator", "model"], "not both"),
])
def test_cli_demo_bad_arguments(argv, message, tmp_path, capsys):
    assert cli.main(["demo", "digits", "--build-dir", str(tmp_path)] + argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["demo", "mnist"], ["demo", "digits", "--variant", "int4"],
                                  ["demo", "digits", "--simulator", "verilator"],
                                  ["demo", "digits", "--images", "many"]])
def test_cli_demo_parser_errors(argv, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2


def test_run_digits_validation(tmp_path):
    for kw, message in [(dict(variant="int4"), "Variant"), (dict(simulator="x"), "Simulator"),
                        (dict(board="pynq"), "Unknown board"), (dict(images=2.0), "integer"),
                        (dict(images=True), "integer")]:
        args = dict(simulator="model", build_dir=str(tmp_path))
        args.update(kw)
        with pytest.raises(demo.UsageError, match=message):
            demo.run_digits(**args)
    with pytest.raises(demo.UsageError, match="Variant"):
        demo.prepare_network("int4", None)


def test_projections(tmp_path):
    rows = {p["board"]: p for p in demo.projections(1000, build_dir=str(tmp_path))}
    assert set(rows) == {"icebreaker", "icebreaker-discrete", "hx8k", "ulx3s", "orangecrab"}
    assert rows["icebreaker"]["images_per_s"] == pytest.approx(12_000)
    assert rows["orangecrab"]["images_per_s"] == pytest.approx(48_000)
    # A lowbit build report of a top with the sequencer gives the measured Fmax ...
    (tmp_path / "hx8k").mkdir()
    (tmp_path / "hx8k" / "report.json").write_text(json.dumps(
        {"top": {"sequencer": True}, "fmax": {"sync": {"achieved": 30.0, "constraint": 12.0},
                                              "other": {"achieved": 50.0, "constraint": 1}}}))
    hx = {p["board"]: p for p in demo.projections(1000, build_dir=str(tmp_path))}["hx8k"]
    assert hx["fmax_mhz"] == 30.0 and hx["images_per_s_at_fmax"] == pytest.approx(30_000)
    # ... one of the first top (no sequencer) does not.
    (tmp_path / "hx8k" / "report.json").write_text(json.dumps(
        {"top": {"lanes": 2}, "fmax": {"sync": {"achieved": 80.0, "constraint": 12.0}}}))
    assert demo.measured_fmax("hx8k", build_dir=str(tmp_path),
                              bench_dir=str(tmp_path)) is None
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "x.json").write_text(json.dumps({"rows": [
        {"block": "top", "device": "up5k", "fmax_mhz_median": 40.0,
         "params": {"sequencer": True}},
        {"block": "top", "device": "up5k", "fmax_mhz_median": 90.0, "params": {}}]}))
    assert demo.measured_fmax("icebreaker", build_dir=str(tmp_path),
                              bench_dir=str(bench)) == (40.0, str(bench / "x.json"))
    text = demo.format_result(demo.DemoResult(
        "bfp", "t", 1, {"matrix_lanes": 16, "block": 16}, 1, 1, 1, 1, 1, 540, 1.0, 1.0, 1000,
        1000.0, 1, demo.projections(1000, build_dir=str(tmp_path))))
    assert "12000 images/s" in text and "no measured Fmax" in text


def test_board_fit(model, tuned, split):
    """The board profiles decide which network runs where (engines, weight memory)."""
    bfp_net = mlp.convert_bfp(model, split.x_train[:100])
    disc = mlp.convert_discrete(tuned[0], split.x_train[:100], scales=tuned[1])
    assert demo.board_fit("icebreaker", bfp_net) is None
    assert "bfp engine" in demo.board_fit("icebreaker-discrete", bfp_net)
    assert "discrete engine" in demo.board_fit("icebreaker", disc)
    assert demo.board_fit("ulx3s", bfp_net) is None
    assert demo.board_fit("orangecrab", disc) is None
    rows = {p["board"]: p for p in demo.projections(1000, net=bfp_net, lanes=16)}
    assert rows["icebreaker-discrete"]["unfit"]
    assert rows["icebreaker-discrete"]["images_per_s"] is None
    assert rows["ulx3s"]["images_per_s"] == pytest.approx(25_000)
    assert not rows["ulx3s"]["other_lanes"]
    text = demo.format_result(demo.DemoResult(
        "bfp", "t", 1, {"matrix_lanes": 16, "block": 16}, 1, 1, 1, 1, 1, 540, 1.0, 1.0, 1000,
        1000.0, 1, list(rows.values())))
    assert re.search(r"icebreaker-discrete +12\.0 MHz: its profile cannot run this network", text)
    # A device without the quantiser gets the input quantised on the host: same numbers.
    acc = Accelerator.model(sequencer=True, matrix_lanes=16, quantiser=False, weight_depth=512)
    codes = mlp.pixels_to_f16(split.x_test[:10])
    acc.load_network(bfp_net.layers, quantise_input=demo._input_quant(bfp_net, "host"))
    out, _ = acc.run_network(codes)
    m, e = mlp.forward(bfp_net, codes)
    assert np.array_equal(out.m, m) and np.array_equal(out.e, e)


def _real_top(simulator):
    acc = Accelerator.simulated(simulator=simulator, **demo.SIM_TOP)
    if not acc.has_engine("sequencer"):
        pytest.skip("the simulated top has no sequencer (IDENTIFY engine bit 'sequencer')")
    return acc


@pytest.mark.slow
def test_real_top_amaranth(tmp_path):
    """Three images through the real top in Amaranth's simulator (~40 s), bit for bit."""
    acc = _real_top("amaranth")
    r = demo.run_digits("bfp", simulator="amaranth", images=3, build_dir=str(tmp_path),
                        accelerator=acc)
    assert r.images == 3 and r.device_accuracy == r.golden_accuracy
    assert 300 < r.cycles_per_image < 5000


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["bfp", "discrete"])
def test_real_top_cxxrtl(tmp_path, variant):
    """100 images through the compiled top (first run compiles it, ~2 min), bit for bit."""
    from sim.cxxrtl import CompilerNotFound
    try:
        acc = _real_top("cxxrtl")
    except CompilerNotFound as e:
        pytest.skip(f"no C++ compiler for CXXRTL: {e}")
    r = demo.run_digits(variant, simulator="cxxrtl", images=100, build_dir=str(tmp_path),
                        accelerator=acc)
    assert r.device_accuracy == r.golden_accuracy and r.cycles > 0
