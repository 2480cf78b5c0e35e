"""``lowbit demo digits``: the digits MLP through the driver, bit for bit (lowbit.boards.demo)."""

import dataclasses
import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from lowbit.boards import cli, demo
from lowbit.boards.driver import Accelerator
from lowbit.sim import mlp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from backdoor import FastMemoryPort  # noqa: E402


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
    """The driver over lowbit.sim.link.DeviceModel equals lowbit.sim.mlp.forward bit for bit, also
    with
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
    from lowbit.sim.program import InputQuant
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


class _Counting:
    """An accelerator whose RUN replies report ``cycles`` cycles in all (the model counts
    none), to exercise the projections without a compiled top."""

    def __init__(self, acc, cycles):
        self._acc, self._cycles = acc, cycles

    def __getattr__(self, name):
        return getattr(self._acc, name)

    def run_network(self, x):
        out, stats = self._acc.run_network(x)
        return out, dict(stats, cycles=self._cycles)


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


def test_cli_demo_board_in_simulation(build_dir, capsys):
    """``--board B`` with a simulator runs B's own top (here on the protocol model), and a board
    whose profile cannot run the network is refused before anything runs."""
    tmp_path = build_dir
    assert cli.main(["demo", "digits", "--simulator", "model", "--board", "icebreaker",
                     "--images", "10", "--build-dir", str(tmp_path), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    # The board's own top, not the reference simulated one (max_blocks 16, weight_depth 512).
    assert r["board"] == "icebreaker" and r["design"]["matrix_lanes"] == 16
    assert (r["design"]["max_blocks"], r["design"]["weight_depth"]) == (4, 256)
    assert r["device_accuracy"] == r["golden_accuracy"] and r["macs_per_image"] == 2368
    assert r["clock_mhz"] == demo.BOARDS["icebreaker"].clk_freq / 1e6
    assert cli.main(["demo", "digits", "--simulator", "model", "--board", "hx8k",
                     "--build-dir", str(tmp_path)]) == 2
    assert "The hx8k profile cannot run the bfp network" in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["--port", "/dev/null", "--simulator", "model"], "not both"),
])
def test_cli_demo_bad_arguments(argv, message, tmp_path, capsys):
    assert cli.main(["demo", "digits", "--build-dir", str(tmp_path)] + argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["demo", "mnist"], ["demo", "digits", "--variant", "int4"],
                                  ["demo", "digits", "--simulator", "verilator"],
                                  ["demo", "digits", "--images", "many"],
                                  ["demo", "digits", "--images", "0"],
                                  ["demo", "digits", "--images", "541"]])
def test_cli_demo_parser_errors(argv, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("lowbit demo: error: argument")
    if argv[-1] in ("0", "541"):
        assert f"must be an integer between 1 and 540, not {argv[-1]}" in err


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


def test_projections_use_each_boards_own_cycles(tmp_path):
    """Every board's rate is its clock over its own cycle count; a board without one gets
    none (never another top's count scaled)."""
    rows = {p["board"]: p for p in demo.projections(
        {"icebreaker": 1000, "orangecrab": 750}, build_dir=str(tmp_path),
        sources={"icebreaker": "a", "orangecrab": "b"})}
    assert set(rows) == set(demo.BOARDS)
    assert rows["icebreaker"]["images_per_s"] == pytest.approx(
        demo.BOARDS["icebreaker"].clk_freq / 1000)
    assert rows["icebreaker"]["cycles_per_image"] == 1000
    assert rows["icebreaker"]["cycles_source"] == "a"
    assert rows["orangecrab"]["images_per_s"] == pytest.approx(64_000)
    for name in ("icebreaker-discrete", "hx8k", "ulx3s"):
        assert rows[name]["images_per_s"] is None and rows[name]["cycles_per_image"] is None
        assert rows[name]["images_per_s_at_fmax"] is None
    assert rows["ulx3s"]["lanes"] == 64 and rows["hx8k"]["lanes"] == 4
    text = demo.format_result(demo.DemoResult(
        "bfp", "t", 1, {"matrix_lanes": 16, "block": 16}, 1, 1, 1, 1, 1, 540, 1.0, 1.0, 1000,
        1000.0, 1, list(rows.values())))
    mhz = demo.BOARDS["icebreaker"].clk_freq / 1e6
    assert re.search(rf"icebreaker +{mhz:.1f} MHz: +{mhz * 1000:.0f} images/s "
                     r"\(1000\.0 cycles/image, cycles from a\)", text)
    ulx3s_mhz = demo.BOARDS["ulx3s"].clk_freq / 1e6
    assert re.search(rf"ulx3s +{ulx3s_mhz:.1f} MHz: not measured", text)
    assert "differs" not in text
    with pytest.raises(ValueError, match="Unknown board 'pynq'"):
        demo.projections({"pynq": 1000})
    with pytest.raises(ValueError, match="must be positive, not 0"):
        demo.projections({"hx8k": 0})
    with pytest.raises(TypeError, match="mapping of board names"):
        demo.projections(1000)


def test_measured_fmax_only_of_the_boards_own_top(tmp_path):
    """A build report or a bench ``top`` row counts only with the board's own top
    parameters: not the first top, not another board's profile on the same chip."""
    own = demo.board_top("hx8k")
    (tmp_path / "hx8k").mkdir()
    report = tmp_path / "hx8k" / "report.json"
    report.write_text(json.dumps({"top": own, "fmax": {
        "sync": {"achieved": 30.0, "constraint": 12.0},
        "other": {"achieved": 50.0, "constraint": 1}}}))
    hx = {p["board"]: p for p in demo.projections({"hx8k": 1000},
                                                  build_dir=str(tmp_path))}["hx8k"]
    assert hx["fmax_mhz"] == 30.0 and hx["images_per_s_at_fmax"] == pytest.approx(30_000)
    assert hx["fmax_source"] == str(report)
    bench = tmp_path / "bench"
    bench.mkdir()
    report.write_text(json.dumps({"top": {"lanes": 2}, "fmax": {
        "sync": {"achieved": 80.0, "constraint": 12.0}}}))
    assert demo.measured_fmax("hx8k", build_dir=str(tmp_path), bench_dir=str(bench)) is None
    # JSON spells the profile's tuple as a list; the top row carries clk_freq: still equal.
    (bench / "x.json").write_text(json.dumps({"rows": [
        {"block": "top", "device": "up5k", "fmax_mhz_median": 40.0,
         "params": demo.board_top("icebreaker")},
        {"block": "top", "device": "up5k", "fmax_mhz_median": 90.0, "params": {}},
        {"block": "top", "device": "hx8k", "fmax_mhz_median": 45.0, "params": own}]}))
    assert demo.measured_fmax("icebreaker", build_dir=str(tmp_path),
                              bench_dir=str(bench)) == (40.0, str(bench / "x.json"))
    assert demo.measured_fmax("hx8k", build_dir=str(tmp_path),
                              bench_dir=str(bench)) == (45.0, str(bench / "x.json"))
    assert demo.measured_fmax("icebreaker-discrete", build_dir=str(tmp_path),
                              bench_dir=str(bench)) is None
    # The board's own builds (scripts/bench_boards.py) come before the out-of-context rows, if
    # they are of its own top.
    (bench / "boards.json").write_text(json.dumps({"boards": {
        "hx8k": {"fmax_mhz_median": 55.5, "params": own},
        "icebreaker": {"fmax_mhz_median": 99.0, "params": {"lanes": 2}}}}))
    assert demo.measured_fmax("hx8k", build_dir=str(tmp_path),
                              bench_dir=str(bench)) == (55.5, str(bench / "boards.json"))
    assert demo.measured_fmax("icebreaker", build_dir=str(tmp_path),
                              bench_dir=str(bench)) == (40.0, str(bench / "x.json"))


def test_same_top_fills_in_defaults():
    assert demo.same_top(demo.SIM_TOP, dict(demo.SIM_TOP, uart=False, simulation=True))
    assert demo.same_top({"sequencer": True, "matrix_lanes": 16},
                         {"sequencer": True, "matrix_lanes": 16, "clk_freq": 12e6})
    assert not demo.same_top(demo.SIM_TOP, demo.board_top("orangecrab"))
    assert demo.same_top(demo.board_top("hx8k"),
                         json.loads(json.dumps(demo.board_top("hx8k"))))
    # The clock, the baud rate and the busy counter never change a RUN's cycle count.
    slower = dict(demo.board_top("icebreaker"), clk_freq=12e6, baud=115200, busy_count=True)
    assert not demo.same_top(slower, demo.board_top("icebreaker"))
    assert demo.same_top(slower, demo.board_top("icebreaker"), cycles=True)
    assert not demo.same_top(dict(slower, matrix_lanes=8), demo.board_top("icebreaker"),
                             cycles=True)


def _demo_json(path, measurements, variant="bfp"):
    path.write_text(json.dumps({"boards": {variant: measurements}}))
    return path


def test_stored_cycles(tmp_path, monkeypatch):
    """Per-board counts of scripts/bench_demo.py: a measurement serves every board listed
    with it whose top is still the one measured; a stale one serves none."""
    monkeypatch.setitem(demo.BOARDS, "icebreaker-copy",
                        dataclasses.replace(demo.BOARDS["icebreaker"], name="icebreaker-copy"))
    path = _demo_json(tmp_path / "demo.json", [
        {"boards": ["icebreaker", "icebreaker-copy"], "params": demo.board_top("icebreaker"),
         "cycles_per_image": 1081.5},
        {"boards": ["ulx3s"], "params": dict(demo.board_top("ulx3s"), weight_depth=512),
         "cycles_per_image": 900.0},
        {"boards": ["orangecrab"], "params": demo.board_top("orangecrab"),
         "cycles_per_image": None}])
    assert demo.stored_cycles("bfp", path=path) == {"icebreaker": 1081.5,
                                                    "icebreaker-copy": 1081.5}
    assert demo.stored_cycles("discrete", path=path) == {}
    assert demo.stored_cycles("bfp", path=tmp_path / "missing.json") == {}
    (tmp_path / "bad.json").write_text("{")
    assert demo.stored_cycles("bfp", path=tmp_path / "bad.json") == {}


def test_bench_groups_identical_tops(monkeypatch):
    """scripts/bench_demo.py measures boards with identical top parameters once."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    import bench_demo
    monkeypatch.setitem(demo.BOARDS, "icebreaker-copy",
                        dataclasses.replace(demo.BOARDS["icebreaker"], name="icebreaker-copy"))
    groups = bench_demo._board_tops(list(demo.BOARDS))
    names = [g[1] for g in groups]
    assert ["icebreaker", "icebreaker-copy"] in names
    assert len(groups) == len(demo.BOARDS) - 1
    assert all(demo.same_top(top, demo.board_top(n)) for top, ns in groups for n in ns)


def test_bench_keeps_what_a_run_did_not_measure(tmp_path):
    """scripts/bench_demo.py over some boards keeps the other boards' entries (and the other
    devices' rows) of the earlier JSON, and replaces those it measured again."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    import bench_demo
    path = tmp_path / "demo.json"
    assert bench_demo._merge_earlier(str(path), [], {"bfp": []}) == ([], {"bfp": []})
    old = {"rows": [{"device": "model", "variant": "bfp", "n": 1},
                    {"device": "cxxrtl", "variant": "bfp", "n": 2}],
           "boards": {"bfp": [{"boards": ["ulx3s"], "n": 3}, {"boards": ["orangecrab"], "n": 4}],
                      "discrete": [{"boards": ["hx8k"], "n": 5}]}}
    path.write_text(json.dumps(old))
    rows, boards = bench_demo._merge_earlier(
        str(path), [{"device": "model", "variant": "bfp", "n": 6}],
        {"bfp": [{"boards": ["orangecrab"], "n": 7}]})
    assert [r["n"] for r in rows] == [2, 6]
    assert {v: [m["n"] for m in ms] for v, ms in boards.items()} == {"bfp": [3, 7],
                                                                    "discrete": [5]}


def test_bench_names_the_command_of_every_entry(tmp_path):
    """Each entry of scripts/bench_demo.py's JSON carries the command that measured it (entries
    kept from a run before that get the run's command), and docs/demo.md's section lists every
    command behind its table, not only the last run's."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    import bench_demo
    path = tmp_path / "demo.json"
    path.write_text(json.dumps({
        "command": "bench A",
        "rows": [{"device": "cxxrtl", "variant": "bfp"},
                 {"device": "model", "variant": "discrete", "command": "bench B"}],
        "boards": {"bfp": [{"boards": ["ulx3s"]}]}}))
    rows, boards = bench_demo._merge_earlier(
        str(path), [{"device": "model", "variant": "bfp", "command": "bench C"}],
        {"bfp": [{"boards": ["orangecrab"], "command": "bench C"}]})
    assert [r["command"] for r in rows] == ["bench A", "bench B", "bench C"]
    assert [m["command"] for m in boards["bfp"]] == ["bench A", "bench C"]
    commands = bench_demo.commands_of(rows, boards)
    assert commands == ["bench A", "bench B", "bench C"]
    doc = tmp_path / "demo.md"
    doc.write_text(f"intro\n{bench_demo.MARK_BEGIN}\nold\n{bench_demo.MARK_END}\nrest\n")
    bench_demo._write_doc(str(doc), {"command": "bench C", "commands": commands}, "TABLE")
    text = doc.read_text()
    assert "old" not in text and text.startswith("intro\n") and text.endswith("rest\n")
    assert text.index("`bench A`") < text.index("`bench B`") < text.index("`bench C`") < \
        text.index("TABLE")


def test_run_digits_projections_from_cycles_file(build_dir, tmp_path, monkeypatch):
    """`lowbit demo digits`: boards whose top is the device's use the run's cycles, the
    others the stored per-board counts, else nothing."""
    acc = _Counting(Accelerator.model(**demo.board_top("orangecrab")), 777)
    path = _demo_json(tmp_path / "demo.json", [
        {"boards": ["icebreaker"], "params": demo.board_top("icebreaker"),
         "cycles_per_image": 1000.0},
        {"boards": ["orangecrab"], "params": demo.board_top("orangecrab"),
         "cycles_per_image": 1.0}])
    r = demo.run_digits("bfp", simulator="model", images=7, build_dir=str(build_dir),
                        accelerator=acc, cycles_file=str(path))
    rows = {p["board"]: p for p in r.projections}
    assert r.cycles_per_image == 777 / 7
    assert rows["orangecrab"]["cycles_per_image"] == 777 / 7
    assert rows["orangecrab"]["cycles_source"] == "this run"
    assert rows["icebreaker"]["cycles_per_image"] == 1000.0
    assert rows["icebreaker"]["cycles_source"] == str(path)
    assert rows["icebreaker"]["images_per_s"] == pytest.approx(
        demo.BOARDS["icebreaker"].clk_freq / 1000)
    assert rows["ulx3s"]["images_per_s"] is None
    assert rows["hx8k"]["unfit"] and rows["hx8k"]["images_per_s"] is None
    text = demo.format_result(r)
    assert f"cycles from {path}" in text and "cycles from this run" in text


def test_board_fit(model, tuned, split):
    """The board profiles decide which network runs where (engines, weight memory)."""
    bfp_net = mlp.convert_bfp(model, split.x_train[:100])
    disc = mlp.convert_discrete(tuned[0], split.x_train[:100], scales=tuned[1])
    assert demo.board_fit("icebreaker", bfp_net) is None
    assert "bfp engine" in demo.board_fit("icebreaker-discrete", bfp_net)
    assert "discrete engine" in demo.board_fit("icebreaker", disc)
    assert demo.board_fit("ulx3s", bfp_net) is None
    assert demo.board_fit("orangecrab", disc) is None
    rows = {p["board"]: p for p in demo.projections(
        {"icebreaker-discrete": 1000, "ulx3s": 1000}, net={"icebreaker-discrete": bfp_net,
                                                           "ulx3s": bfp_net})}
    assert rows["icebreaker-discrete"]["unfit"]
    assert rows["icebreaker-discrete"]["images_per_s"] is None
    assert rows["icebreaker-discrete"]["cycles_per_image"] is None
    assert rows["ulx3s"]["images_per_s"] == pytest.approx(demo.BOARDS["ulx3s"].clk_freq / 1000)
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
    assert acc.has_engine("sequencer"), "IDENTIFY's engine bit 'sequencer' is clear"
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
def test_real_top_cxxrtl(tmp_path, variant, require_tool):
    """100 images through the compiled top (first run compiles it, ~2 min), bit for bit."""
    from lowbit.boards.demo import cxxrtl_available
    require_tool(None if cxxrtl_available() else "no C++ compiler for CXXRTL ($CXX or g++)")
    acc = _real_top("cxxrtl")
    r = demo.run_digits(variant, simulator="cxxrtl", images=100, build_dir=str(tmp_path),
                        accelerator=acc)
    assert r.device_accuracy == r.golden_accuracy and r.cycles > 0


def test_board_top_in_amaranth_own_cycles(tmp_path, monkeypatch):
    """``board="icebreaker"`` in simulation runs the iCEBreaker's own top (N = 16, max_blocks
    4, no quantiser) in Amaranth's simulator: bit for bit against its golden model; its
    MAC/cycle and MMAC/s come from this run, and its projection (and that of a board with an
    identical profile) uses this run's cycle count. The weights' and results' MEM_WRITE and
    MEM_READ take the simulator's backdoor (tests/backdoor.py; the cycles are the RUN replies',
    which it does not change): through the 12 Mbaud byte link they were ~20 CPU-s of the run.
    The whole demo through the link: ``test_sequencer.py::test_icebreaker_runs_the_digits_demo``
    (slow), ``test_demo.py::test_real_top_amaranth`` (slow)."""
    monkeypatch.setitem(demo.BOARDS, "icebreaker-copy",
                        dataclasses.replace(demo.BOARDS["icebreaker"], name="icebreaker-copy"))
    connect, ports = demo.connect, []

    def fast_connect(**kw):
        acc, name = connect(**kw)
        acc.port = FastMemoryPort(acc.port)
        ports.append(acc.port)
        return acc, name

    monkeypatch.setattr(demo, "connect", fast_connect)
    assert not demo.same_top(demo.board_top("icebreaker"), demo.SIM_TOP)
    r = demo.run_digits("bfp", simulator="amaranth", images=1, build_dir=str(tmp_path),
                        board="icebreaker", cycles_file=str(tmp_path / "none.json"))
    assert r.device_accuracy == r.golden_accuracy and r.design["matrix_lanes"] == 16
    assert (r.design["max_blocks"], r.design["weight_depth"]) == (4, 256)
    assert r.board == "icebreaker" and "icebreaker's top" in r.target
    assert r.cycles > 0 and r.cycles_per_image == r.cycles
    assert r.macs_per_image == 64 * 32 + 32 * 10
    assert r.mac_per_cycle == pytest.approx(r.macs_per_image / r.cycles_per_image)
    assert r.clock_mhz == demo.BOARDS["icebreaker"].clk_freq / 1e6
    assert r.mmacs == pytest.approx(r.mac_per_cycle * r.clock_mhz)
    # No build in tmp_path: the Fmax is the board's recorded builds' (docs/bench/boards.json).
    fmax = demo.measured_fmax("icebreaker", build_dir=str(tmp_path))
    assert fmax is not None and fmax[1].endswith("boards.json")
    assert r.fmax_mhz == fmax[0] and r.mmacs_at_fmax == pytest.approx(r.mac_per_cycle * fmax[0])
    assert "MAC/cycle sustained" in demo.format_result(r)
    rows = {p["board"]: p for p in r.projections}
    for name in ("icebreaker", "icebreaker-copy"):
        assert rows[name]["cycles_per_image"] == r.cycles_per_image
        assert rows[name]["cycles_source"] == "this run"
        assert rows[name]["images_per_s"] == pytest.approx(
            demo.BOARDS["icebreaker"].clk_freq / r.cycles)
        assert rows[name]["mac_per_cycle"] == pytest.approx(r.mac_per_cycle)
    assert rows["ulx3s"]["images_per_s"] is None and rows["orangecrab"]["images_per_s"] is None
    assert len(ports) == 1 and ports[0].fast > 0


@pytest.mark.slow
@pytest.mark.heavy                       # compiles every board's top in CXXRTL: minutes
@pytest.mark.parametrize("variant", ["bfp", "discrete"])
def test_bench_boards_cxxrtl(tmp_path, variant, require_tool):
    """scripts/bench_demo.py on every board's own top in CXXRTL, 100 images each, bit for bit
    (bench_one raises on a mismatch); the first compile of each top takes 2-6 min."""
    require_tool(None if demo.cxxrtl_available() else "no C++ compiler for CXXRTL ($CXX or g++)")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    import bench_demo
    split = mlp.load_split()
    found = bench_demo.bench_boards(variant, boards=list(demo.BOARDS), images=100, split=split,
                                    build_dir=str(tmp_path), log=lambda msg: None)
    measured = {n for m in found for n in m["boards"]}
    fits = {"bfp": {"icebreaker", "ulx3s", "orangecrab"},
            "discrete": {"icebreaker-discrete", "hx8k", "ulx3s", "orangecrab"}}
    assert measured == fits[variant]
    for m in found:
        assert m["bit_exact"] and m["cycles"] > 0 and m["images"] == 100
        assert m["design"]["matrix_lanes"] == demo.board_top(m["boards"][0])["matrix_lanes"]
    result = {"boards": {variant: found}}
    assert set(demo.stored_cycles(variant, data=result)) == measured


# -- the link (issue 21) ---------------------------------------------------------------------------

def test_link_traffic_counts_the_packed_bytes(build_dir):
    """Bytes per image through the driver: 64 mantissas + 4 block exponents in, one code per
    row of the last layer's tiles + one exponent per tile out, plus a few percent of frames;
    the projections carry it with the link-bound rate at the profile's baud."""
    params = demo.board_top("icebreaker")
    acc = Accelerator.model(**params)
    net = demo.prepare_network("bfp", acc.design.column(), build_dir=build_dir)[1]
    per_image = demo.link_traffic(params, net)
    payload = 64 + 4 + 16 + 2                              # N = 8: two tiles of eight rows
    assert payload < per_image < payload * 1.06
    assert demo.link_rate(4_000_000, per_image) == pytest.approx(400_000 / per_image)
    # The traffic of real runs equals it (the same driver, RUN executed).
    acc.load_network(net.layers, quantise_input=demo._input_quant(net, "host"))
    codes = mlp.pixels_to_f16(mlp.load_split().x_test)
    acc.run_network(codes[:10])                            # the program is loaded once
    _, stats = acc.run_network(codes)
    assert stats["link_bytes"] / len(codes) == pytest.approx(per_image, rel=0.01)
    rows = demo.projections({"icebreaker": 1000.0}, build_dir=str(build_dir), net=net)
    ice = next(r for r in rows if r["board"] == "icebreaker")
    assert ice["baud"] == params["baud"] and ice["link_bytes_per_image"] == per_image
    assert ice["images_per_s_bound"] == min(ice["images_per_s"], ice["link_images_per_s"])


def test_demo_reports_the_link(build_dir):
    r = demo.run_digits("bfp", simulator="model", images=20, board="ulx3s",
                        build_dir=str(build_dir))
    assert r.baud == 3_000_000 and 80 < r.link_bytes_per_image < 400
    assert r.link_images_per_s == pytest.approx(300_000 / r.link_bytes_per_image)
    assert "bytes per image" in demo.format_result(r)


@pytest.mark.parametrize("argv, message", [
    (["demo", "digits", "--baud", "3000000", "--simulator", "model"], "use it with --port"),
    (["demo", "digits", "--baud", "0"], "between 1 and 12000000, not 0"),
    (["demo", "digits", "--baud", "fast"], "not 'fast'"),
    (["train", "digits", "--baud", "3000000"], "use it with --port"),
])
def test_baud_option_errors(argv, message, capsys):
    try:
        code = cli.main(argv)
    except SystemExit as e:
        code = e.code
    assert code == 2 and message in capsys.readouterr().err
