"""The benchmark suite's run cache and throughput figures (scripts/bench.py), without builds."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import bench  # noqa: E402

from lowbit.hw.prng import Xoroshiro128aox  # noqa: E402


def test_netlist_key_is_stable_and_tracks_the_netlist():
    key = bench.netlist_key(Xoroshiro128aox(lanes=1), "up5k", 1, True)
    assert key == bench.netlist_key(Xoroshiro128aox(lanes=1), "up5k", 1, True)
    assert key != bench.netlist_key(Xoroshiro128aox(lanes=2), "up5k", 1, True)
    assert key != bench.netlist_key(Xoroshiro128aox(lanes=1), "up5k", 2, True)
    assert key != bench.netlist_key(Xoroshiro128aox(lanes=1), "hx8k", 1, True)
    assert key != bench.netlist_key(Xoroshiro128aox(lanes=1), "up5k", 1, False)
    # The default clock target keeps the key; any explicit one is part of it.
    assert key == bench.netlist_key(Xoroshiro128aox(lanes=1), "up5k", 1, True, None)
    at_60 = bench.netlist_key(Xoroshiro128aox(lanes=1), "up5k", 1, True, 60)
    at_70 = bench.netlist_key(Xoroshiro128aox(lanes=1), "up5k", 1, True, 70)
    router2 = bench.netlist_key(Xoroshiro128aox(lanes=1), "up5k", 1, True, None,
                                ("--router", "router2"))
    assert len({key, at_60, at_70, router2}) == 4


def fake_implement(calls):
    def implement(component, device, *, seed, name, dsp):
        calls.append((name, device, seed))
        return {"lcs": 300 + seed, "lcs_block": 200 + seed, "wrapper_lcs": 100, "dsps": 0,
                "rams": 0, "spram": 0, "fmax_mhz": 50.0 + seed, "seconds": 1.0, "seed": seed}
    return implement


def test_resume_reuses_cached_builds_and_saves_each_build(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(bench, "implement", fake_implement(calls))
    path = tmp_path / "runs.json"
    first = bench.bench_one("prng", "up5k", [1, 2, 3], lambda msg: None,
                            bench.RunCache(path, use=True))
    assert len(calls) == 3 and first["fmax_mhz_median"] == 52.0
    assert len(bench.RunCache(path, use=True).runs) == 3
    again = bench.bench_one("prng", "up5k", [1, 2, 3, 4], lambda msg: None,
                            bench.RunCache(path, use=True))
    assert calls[3:] == [("prng", "up5k", 4)]
    assert again["fmax_mhz_all"] == [51.0, 52.0, 53.0, 54.0]
    # Without --resume every build runs again (and refreshes the cache).
    bench.bench_one("prng", "up5k", [1], lambda msg: None, bench.RunCache(path, use=False))
    assert len(calls) == 5


def test_cached_only_builds_nothing_and_marks_missing_rows_pending(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(bench, "implement", fake_implement(calls))
    path = tmp_path / "runs.json"
    bench.bench_one("prng", "up5k", [2], lambda msg: None, bench.RunCache(path, use=True))
    row = bench.bench_one("prng", "up5k", [1, 2, 3], lambda msg: None,
                          bench.RunCache(path, use=True), cached_only=True)
    assert len(calls) == 1 and row["seeds"] == [2] and row["fmax_mhz_median"] == 52.0
    row = bench.bench_one("prng", "hx8k", [1], lambda msg: None, bench.RunCache(path, use=True),
                          cached_only=True)
    assert row["pending"] and len(calls) == 1
    assert "not measured yet" in bench.render_markdown([row], "cmd")


def test_a_failed_build_is_cached_as_a_failure(tmp_path, monkeypatch):
    calls = []

    def failing(component, device, *, seed, name, dsp):
        calls.append(seed)
        raise bench.ToolchainError("nextpnr failed: no LCs left")
    monkeypatch.setattr(bench, "implement", failing)
    path = tmp_path / "runs.json"
    row = bench.bench_one("prng", "up5k", [1, 2], lambda msg: None, bench.RunCache(path, True))
    assert "no LCs left" in row["error"] and calls == [1]
    row = bench.bench_one("prng", "up5k", [1, 2], lambda msg: None, bench.RunCache(path, True),
                          cached_only=True)
    assert "no LCs left" in row["error"] and calls == [1]


def test_throughput_and_ceiling_ratio():
    t = bench.throughput("bfp", "up5k", {"lanes": 16}, 43.0)
    assert t["per_second"] == pytest.approx(16 * 43e6)
    assert t["ceiling_ratio"] == pytest.approx(43 / 86, abs=1e-3)
    t = bench.throughput("bfp", "ecp5-85f", {"lanes": 64}, 100.0)
    assert t["ceiling_ratio"] == pytest.approx(64 / 156, abs=1e-3)
    assert "ceiling" not in bench.throughput("lut", "hx8k", {"lanes": 4}, 80.0)
    assert bench.throughput("link", "up5k", {}, 80.0) is None
    assert bench.throughput("bfp", "up5k", {"lanes": 16}, None) is None


def test_the_top_is_built_with_each_board_profile_on_the_device():
    assert bench.boards_on("up5k") == ["icebreaker", "icebreaker-discrete"]
    lean = bench.block_params("top", "up5k")
    discrete = bench.block_params("top", "up5k", board="icebreaker-discrete")
    assert lean["bfp"] is True and discrete.get("bfp") is False and discrete["discrete"] is True
    with pytest.raises(ValueError, match="Board 'hx8k' is not a up5k board"):
        bench.block_params("top", "up5k", board="hx8k")
    rows = [{"block": "top", "device": "up5k", "board": "icebreaker-discrete", "pending": True}]
    assert "| top (icebreaker-discrete) | up5k |" in bench.render_markdown(rows, "x")


def test_bench_bfp_shares_the_run_cache_with_bench(tmp_path, monkeypatch):
    import bench_bfp
    calls = []

    def implement(component, device, *, seed, freq_mhz, name, dsp, build_dir, progress,
                  pnr_args):
        calls.append((device, seed, freq_mhz, dsp, *pnr_args))
        return {"lcs": 4000, "lcs_block": 3700, "wrapper_lcs": 300, "dsps": 8, "rams": 7,
                "spram": 0, "fmax_mhz": 50.0 + seed, "seconds": 1.0, "seed": seed}
    monkeypatch.setattr(bench_bfp, "implement", implement)
    monkeypatch.setattr(bench_bfp, "sustained_macs_per_cycle", lambda params, blocks: 1.0)
    path = tmp_path / "runs.json"
    rows = bench_bfp.run(["up5k"], [1, 2], progress=lambda msg: None,
                         cache=bench.RunCache(path, use=True))
    assert calls == [("up5k", 1, None, True), ("up5k", 2, None, True)]
    assert rows[0]["fmax_mhz"] == 51.5 and rows[0]["target_mhz"] == 100
    # The same builds serve bench.py's row of the column, and bench_bfp.py --resume.
    row = bench.bench_one("bfp", "up5k", [1, 2], lambda msg: None,
                          bench.RunCache(path, use=True), cached_only=True)
    assert row["fmax_mhz_all"] == [51.0, 52.0]
    bench_bfp.run(["up5k"], [1, 2], progress=lambda msg: None,
                  cache=bench.RunCache(path, use=True))
    assert len(calls) == 2
    # Other nextpnr options are other builds.
    rows = bench_bfp.run(["up5k"], [1], progress=lambda msg: None,
                         cache=bench.RunCache(path, use=True), pnr_args=("--router", "router2"))
    assert calls[2:] == [("up5k", 1, None, True, "--router", "router2")]
    assert rows[0]["pnr_args"] == ["--router", "router2"]


def test_a_classic_abc_fallback_is_marked_in_the_table(monkeypatch):
    """Builds whose LUTs the classic ABC mapped (abc9 failed) are marked, the others not."""
    def implement(component, device, *, seed, name, dsp):
        res = fake_implement([])(component, device, seed=seed, name=name, dsp=dsp)
        res["synth"] = ("synth_ecp5 (map_luts: abc -dress -lut 4:7, abc9 failed)" if seed == 2
                        else "synth_ecp5")
        return res

    monkeypatch.setattr(bench, "implement", implement)
    row = bench.bench_one("prng", "ecp5-25f", [1, 2], lambda msg: None, None)
    assert row["classic_abc_seeds"] == [2]
    text = bench.render_markdown([row], "cmd")
    assert "| 51.5 (classic ABC) |" in text and "abc9 LUT mapping failed" in text
    row = bench.bench_one("prng", "ecp5-25f", [1], lambda msg: None, None)
    assert row["classic_abc_seeds"] == []
    assert "classic ABC" not in bench.render_markdown([row], "cmd")


def test_whole_accelerator_table():
    """The whole-accelerator rows (scripts/bench_boards.py, bench_demo.py): a board build of
    the board's current top wins over an out-of-context row, a build of another top is ignored,
    one of an earlier netlist of the same top is marked, MAC/cycle and MMAC/s follow from the
    cycles per image, and the peer's row is beside them."""
    import benchcommon as bc

    from lowbit.boards import demo
    ice = demo.board_top("icebreaker")
    clock = demo.BOARDS["icebreaker"].clk_freq / 1e6
    build = {"params": ice, "lcs": 5000, "dsps": 8, "rams": 20, "spram": 4,
             "fmax_mhz_median": 40.0, "fmax_mhz_all": [41.0, 40.0, 39.0]}
    demo_bench = {"boards": {"bfp": [{"boards": ["icebreaker"], "params": ice,
                                      "cycles_per_image": 236.8}]}}
    ooc = [{"block": "top", "params": demo.board_top("ulx3s"), "lcs_block": 20000, "dsps": 17,
            "rams": 58, "spram": 0, "fmax_mhz_median": 56.5, "fmax_mhz_all": [56.5] * 3}]
    rows = {r["board"]: r for r in bc.whole_accelerator_rows(
        {"boards": {"icebreaker": build}}, demo_bench, ooc)}
    r = rows["icebreaker"]
    assert (r["source"], r["lcs"], r["fmax_mhz"]) == ("board build", 5000, 40.0)
    assert r["mac_per_cycle"] == pytest.approx(10.0)
    assert r["mmacs"] == pytest.approx(10.0 * clock) and r["mmacs_at_fmax"] == pytest.approx(400)
    assert rows["ulx3s"]["source"] == "out of context" and rows["ulx3s"]["lcs"] == 20000
    assert rows["ulx3s"]["cycles_per_image"] is None and rows["hx8k"]["source"] is None
    other = dict(build, params=dict(ice, matrix_lanes=ice["matrix_lanes"] // 2))
    assert bc.whole_accelerator_rows({"boards": {"icebreaker": other}}, {}, [])[0]["source"] \
        is None
    text = bc.whole_accelerator_markdown(list(rows.values()))
    assert f"| icebreaker | up5k | {ice['matrix_lanes']} | 5000 / 5280 (94.7 %) | 8 / 8 |" in text
    assert "40 (41 / 40 / 39)" in text and "| 10.00 |" in text and "MARLANN" in text
    assert "56.5 (56.5 / 56.5 / 56.5) ooc" in text
    # A build of the same parameters but another netlist (the gateware changed) is marked.
    digests = {"icebreaker": "new"}.get
    stale = bc.whole_accelerator_rows({"boards": {"icebreaker": dict(build, digest="old")}},
                                      demo_bench, [], digests=digests)[0]
    fresh = bc.whole_accelerator_rows({"boards": {"icebreaker": dict(build, digest="new")}},
                                      demo_bench, [], digests=digests)[0]
    assert (stale["source"], fresh["source"]) == ("earlier netlist", "board build")
    assert "40 (41 / 40 / 39) earlier netlist" in bc.whole_accelerator_markdown([stale])
    # So is a cycle count measured on another netlist; one recorded without a digest is not.
    assert fresh["cycles_source"] is None
    for recorded, mark in (("old", "earlier netlist"), ("new", None)):
        tagged = {"boards": {"bfp": [dict(demo_bench["boards"]["bfp"][0],
                                          digests={"icebreaker": recorded})]}}
        row = bc.whole_accelerator_rows({"boards": {"icebreaker": dict(build, digest="new")}},
                                        tagged, [], digests=digests)[0]
        assert row["cycles_source"] == mark and row["cycles_per_image"] == 236.8
        assert ("236.8 earlier netlist" in bc.whole_accelerator_markdown([row])) == bool(mark)


def test_replace_section_inserts_then_replaces():
    import benchcommon as bc
    doc = "# Title\n\nintro\n"
    once = bc.replace_section(doc, "table 1")
    assert once.startswith("# Title\n\n" + bc.ACCEL_BEGIN + "\ntable 1\n" + bc.ACCEL_END)
    assert once.endswith("intro\n") and bc.section_of(once) == "table 1"
    twice = bc.replace_section(once, "table 2")
    assert twice.count(bc.ACCEL_BEGIN) == 1 and bc.section_of(twice) == "table 2"
    assert twice.replace("table 2", "table 1") == once


def test_bench_grand_times_the_golden_models(capsys):
    """``bench_grand.py --model``: the golden models' speed (the former wall-clock test of
    Xoroshiro128aox.take), every model timed on the count asked for; nothing is built."""
    import bench_grand
    speed = bench_grand.model_speed(words=1200, runs=1, modes=("normal", "raw"))
    assert set(speed) == {"prng", "grand-normal", "grand-raw"}
    assert speed["prng"]["count"] == 1200 and speed["grand-normal"]["count"] == 200
    assert all(r["seconds"] > 0 and r["per_s"] == r["count"] / r["seconds"]
               for r in speed.values())
    bench_grand.main(["--model", "--words", "120", "--runs", "1"])
    out = capsys.readouterr().out
    assert out.startswith("prng ") and "grand-normal144" in out and " M/s" in out


def test_bench_boards_records_finished_builds_of_the_current_plan(tmp_path, monkeypatch):
    """``bench_boards.py --reports`` records a finished build directory only if its plan files
    (design, pins, constraints, tool options; the seed aside) are the current plan's: a
    directory of another plan, of another board, or two of one seed are refused."""
    import json
    from types import SimpleNamespace

    import bench_boards

    from lowbit.boards import build

    plan = {"lowbit.il": "module \\top\n  attribute \\src \"a.py:1\"\nend\n",
            "lowbit.ys": "read_rtlil lowbit.il\n", "build_lowbit.sh": "nextpnr --seed 1\n"}
    monkeypatch.setattr(build, "board_plan", lambda board, seed=1, top=None,
                        routed_netlist=False: SimpleNamespace(files={
                            k: v.replace("--seed 1", f"--seed {seed}" + " --write r.json"
                                         * routed_netlist) for k, v in plan.items()}))
    monkeypatch.setattr(bench_boards, "board_digest", lambda board: "D" * 32)
    monkeypatch.setattr(bench_boards, "plan_digest", lambda board: "P" * 32)

    def build_dir(seed, files=plan, board="icebreaker"):
        d = tmp_path / f"s{seed}"
        d.mkdir()
        for name, text in files.items():
            (d / name).write_text(text.replace("--seed 1", f"--seed {seed}"))
        (d / "report.json").write_text(json.dumps({
            "board": board, "seed": seed, "timing_met": True, "seconds": 1.0,
            "fmax": {"clk": {"achieved": 36.0 + seed}},
            "resources": {k: {"used": v} for k, v in
                          dict(lcs=5000, dsps=8, rams=29, spram=1).items()}}))
        return str(d)

    entry = bench_boards.recorded_board("icebreaker", [build_dir(2), build_dir(1)],
                                        say=lambda msg: None)
    assert entry["digest"] == "D" * 32 and [s["seed"] for s in entry["seeds"]] == [1, 2]
    assert entry["plan"] == "P" * 32
    assert entry["fmax_mhz_all"] == [37.0, 38.0] and entry["lcs"] == 5000
    moved = dict(plan, **{"lowbit.il": plan["lowbit.il"].replace("a.py:1", "b.py:9")})
    assert bench_boards.recorded_board("icebreaker", [build_dir(3, moved)],
                                       say=lambda msg: None)["seeds"][0]["seed"] == 3
    routed = dict(plan, **{"build_lowbit.sh": "nextpnr --seed 1 --write r.json\n"})
    assert bench_boards.recorded_board("icebreaker", [build_dir(7, routed)],
                                       say=lambda msg: None)["seeds"][0]["seed"] == 7
    other = dict(plan, **{"lowbit.ys": "read_rtlil lowbit.il\nsynth\n"})
    for dirs, match in (([build_dir(4, other)], "another plan"),
                        ([build_dir(5, board="hx8k")], "no build of icebreaker"),
                        ([build_dir(6), str(tmp_path / "s6")], "same seed")):
        with pytest.raises(SystemExit, match=match):
            bench_boards.recorded_board("icebreaker", dirs, say=lambda msg: None)


def test_bench_boards_resume_needs_the_same_plan(monkeypatch, tmp_path):
    """``bench_boards.py --resume`` keeps a recorded seed only when both the top's logic and the
    build plan (router, floorplan, constraints: ``plan``) are the ones recorded: the same
    logic under another nextpnr option is built again."""
    import bench_boards

    monkeypatch.setattr(bench_boards, "board_digest", lambda board: "D" * 32)
    monkeypatch.setattr(bench_boards, "plan_digest", lambda board: "P" * 32)
    monkeypatch.setattr(bench_boards, "board_top", lambda board: {})
    built = []

    def fake_build(board, *, seed, build_dir, progress):
        built.append(seed)
        return {"seed": seed, "timing_met": True, "seconds": 1.0,
                "fmax": {"clk": {"achieved": 90.0 + seed}},
                "resources": {k: {"used": 1} for k in ("lcs", "dsps", "rams", "spram")}}

    monkeypatch.setattr(bench_boards, "build_board", fake_build)
    old = {"seed": 1, "fmax_mhz": 85.0, "lcs": 1, "dsps": 1, "rams": 1, "spram": 1,
           "timing_met": True, "seconds": 1.0}
    for plan, rebuilt in (("P" * 32, [2]), ("Q" * 32, [1, 2]), (None, [1, 2])):
        built.clear()
        known = {"digest": "D" * 32, "seeds": [old], **({"plan": plan} if plan else {})}
        entry = bench_boards.bench_board("ulx3s", [1, 2], known=known, build_dir=tmp_path,
                                         say=lambda msg: None)
        assert built == rebuilt and entry["plan"] == "P" * 32
        assert entry["fmax_mhz_all"] == ([85.0, 92.0] if rebuilt == [2] else [91.0, 92.0])
