"""``lowbit explore`` (issue #23): sweeps of block and board builds on Dask distributed.

Quick: the parameters and their errors, the engine in this process with a stand-in for
``implement`` (cache hits, failed builds), rows, table, JSON and plot; and real builds of the
smallest block (the UART: 2-3 s) on an embedded ``LocalCluster`` of two workers, and a sweep
cancelled by Ctrl-C. Slow: a scheduler and a worker started as subprocesses, a netlist that does
not fit (25 CPU-seconds); heavy: a board sweep of the iCEBreaker's top.
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest
from test_cli import run_main  # `lowbit ARGV` in this process: (status, stdout, stderr)

from lowbit.boards import explore
from lowbit.boards.buildcache import RunCache
from lowbit.boards.profiles import get_board
from lowbit.boards.toolchain import ToolchainError

LOWBIT = [sys.executable, "-m", "lowbit.boards.cli"]


# -- parameters ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text, values", [
    ("4,8,16", [4, 8, 16]),
    ("16", [16]),
    ("lut,sb_mac16", ["lut", "sb_mac16"]),
    ("'lut', sb_mac16", ["lut", "sb_mac16"]),
    ("True,False", [True, False]),
    ("(),('normal',)", [(), ("normal",)]),
    ("('normal', 'raw')", [("normal", "raw")]),
    ("18e6,12e6", [18e6, 12e6]),
])
def test_parse_values(text, values):
    assert explore.parse_values(text) == values


@pytest.mark.parametrize("text, message", [("", "no value"), ("4,4", "value 4 is given twice"),
                                           ("a,,b", "no value")])
def test_parse_values_refuses(text, message):
    with pytest.raises(ValueError, match=message):
        explore.parse_values(text)


def test_configs_are_every_combination_on_the_profile():
    cfgs = explore.configs("lut", [("lanes", [2, 4]), ("tables", [1, 2])], device="up5k")
    assert [c.swept for c in cfgs] == [{"lanes": 2, "tables": 1}, {"lanes": 2, "tables": 2},
                                       {"lanes": 4, "tables": 1}, {"lanes": 4, "tables": 2}]
    assert all(c.device == "up5k" and c.board is None and c.clock_mhz == 36 for c in cfgs)
    # A block with a multiplier takes the profile's, and the vendor primitives.
    (bfp,) = explore.configs("bfp", [("lanes", [4])], board="hx8k")
    assert bfp.params == {"mult": "lut", "sim_model": False, "lanes": 4} and not bfp.dsp
    assert bfp.device == "hx8k" and bfp.board is None and bfp.clock_mhz == 12
    # The top on a board is a board build; on a device, out of context with its first board.
    (top,) = explore.configs("top", [("matrix_lanes", [8])], board="icebreaker")
    assert top.board == "icebreaker" and top.params["matrix_lanes"] == 8
    assert top.params["clk_freq"] == get_board("icebreaker").clk_freq
    assert top.params["use_spram"] is True
    (ooc,) = explore.configs("top", (), device="hx8k", clock_mhz=20)
    assert ooc.board is None and ooc.params["multiplier"] == "lut" and ooc.clock_mhz == 20


@pytest.mark.parametrize("args, kwargs, message", [
    (("lut", [("nosuch", [1])]), {"device": "up5k"},
     "block 'lut' has no parameter 'nosuch'; its parameters: lanes, tables, wide_tables"),
    (("lut", [("lanes", [1]), ("lanes", [2])]), {"device": "up5k"}, "given twice"),
    (("prng", [("lanes", [1, 0])]), {"device": "up5k"},
     "prng lanes=0: Lane count must be an integer between 1 and 64, not 0"),
    (("nosuch", ()), {"device": "up5k"}, "unknown block 'nosuch'"),
    (("prng", ()), {"device": "xc7"}, "unknown device 'xc7'"),
    (("prng", ()), {"board": "de0"}, "unknown board 'de0'"),
    (("prng", ()), {}, "either a device or a board"),
    (("top", ()), {"board": "icebreaker", "freq_mhz": 50}, "out-of-context builds"),
])
def test_configs_refuse_bad_input(args, kwargs, message):
    with pytest.raises(explore.ExploreError, match=message):
        explore.configs(*args, **kwargs)


@pytest.mark.parametrize("argv, expected", [
    (("nosuch",), "argument BLOCK: invalid choice: 'nosuch'"),
    (("prng", "--device", "xc7"), "argument --device/-d: invalid choice: 'xc7'"),
    (("prng", "--param", "foo=1"), "block 'prng' has no parameter 'foo'; its parameters: "
     "lanes, reset_seed"),
    (("prng", "--param", "lanes=0,1"), "prng lanes=0: Lane count must be an integer"),
    (("prng", "--param", "lanes=abc"), "prng lanes='abc': Lane count must be an integer"),
    (("prng", "--param", "lanes"), "argument --param/-p: must be written key=value"),
    (("prng", "--param", "lanes=1,1"), "lanes: value 1 is given twice"),
    (("prng", "--param", "lanes=1", "--param", "lanes=2"), "parameter 'lanes' is given twice"),
    (("prng", "--seeds", "1", "1"), "a seed is given twice"),
    (("prng", "--seeds", "-1"), "argument --seeds: must be an integer between 0 and"),
    (("prng", "--workers", "0"), "argument --workers/-j: must be an integer between 1"),
    (("prng", "--workers", "2", "--scheduler", "tcp://x:1"), "not allowed with argument"),
    (("prng", "--device", "up5k", "--board", "hx8k"), "not allowed with argument"),
    (("top", "--nextpnr=--router router2"), "apply to out-of-context builds"),
    (("prng", "--nextpnr=--a \"b"), "--nextpnr: No closing quotation"),
    (("prng", "--json", "/nonexistent/rows.json"), "--json: no folder /nonexistent"),
    (("prng", "--clock", "0"), "argument --clock: must be a finite number in (0, 1000]"),
])
def test_bad_input_is_a_one_line_error(capsys, tmp_path, argv, expected):
    status, out, err = run_main(capsys, "explore", *argv, "--cache", str(tmp_path / "c.json"))
    assert status == 2 and out == "", err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("lowbit explore: error: ") and expected in err, err


def test_a_corrupt_cache_is_a_one_line_error(capsys, tmp_path):
    bad = tmp_path / "runs.json"
    bad.write_text("{not json")
    status, _, err = run_main(capsys, "explore", "prng", "--cache", str(bad))
    assert status == 2 and "is not valid JSON" in err and len(err.strip().splitlines()) == 1


# -- the engine in this process -----------------------------------------------------------------

def fake_implement(calls):
    """A stand-in for implement(): the same figures for every build, Fmax after the seed."""
    def implement(component, device, *, seed, name, dsp, **extra):
        calls.append((name, seed))
        return {"lcs": 500, "lcs_block": 300, "wrapper_lcs": 200, "dsps": 0, "rams": 0,
                "spram": 0, "fmax_mhz": 80.0 + seed, "seconds": 1.0, "seed": seed}
    return implement


def test_the_engine_caches_builds_and_failures(tmp_path):
    calls = []
    builds = fake_implement(calls)

    def implement(component, device, *, seed, name, dsp, **extra):
        if name == "uart":
            calls.append((name, seed))
            raise ToolchainError("nextpnr failed (exit 1): ERROR: Unable to place cell 'x'")
        return builds(component, device, seed=seed, name=name, dsp=dsp)

    cfgs = explore.configs("prng", [("lanes", [1, 2])], device="up5k") + \
        explore.configs("uart", (), device="up5k")
    cache = RunCache(tmp_path / "runs.json")
    seen = []
    rows = explore.run_sweep(cfgs, [1, 2, 3], cache=cache, implement=implement,
                             on_build=lambda c, e: seen.append((c.block, e["seed"], e["cached"])))
    # A failed seed stops the configuration's other seeds.
    assert calls == [("prng", 1), ("prng", 2), ("prng", 3)] * 2 + [("uart", 1)]
    assert len(seen) == 7 and not any(c for _, _, c in seen)
    assert [r["fmax_mhz"] for r in rows[:2]] == [82.0, 82.0]
    assert rows[0]["fits"] and rows[0]["meets_clock"] and rows[0]["lcs_block"] == 300
    assert rows[0]["throughput"]["per_second"] == pytest.approx(82e6)
    assert rows[1]["throughput"]["per_second"] == pytest.approx(2 * 82e6)
    assert rows[2]["fits"] is False and "Unable to place" in rows[2]["error"]
    assert len(RunCache(tmp_path / "runs.json").runs) == 7
    # The same sweep again builds nothing: the failure is cached like a result.
    calls.clear()
    seen.clear()
    again = explore.run_sweep(cfgs, [1, 2, 3], cache=RunCache(tmp_path / "runs.json"),
                              implement=implement,
                              on_build=lambda c, e: seen.append((c.block, e["seed"], e["cached"])))
    assert calls == [] and all(c for _, _, c in seen) and len(seen) == 7
    assert [r.get("fmax_mhz") for r in again] == [r.get("fmax_mhz") for r in rows]
    # --rebuild: the cache is written, not read.
    explore.run_sweep(cfgs[:1], [1], cache=RunCache(tmp_path / "runs.json", use=False),
                      implement=implement)
    assert calls == [("prng", 1)]


def test_an_error_that_is_not_the_tools_is_a_row_but_not_cached(tmp_path):
    def implement(component, device, **kwargs):
        raise MemoryError("out of memory")

    cache = RunCache(tmp_path / "runs.json")
    (row,) = explore.run_sweep(explore.configs("prng", (), device="up5k"), [1], cache=cache,
                               implement=implement)
    assert row["error"] == "MemoryError: out of memory" and row["fits"] is None
    assert cache.runs == {}


def test_the_engine_shares_the_benchmarks_cache(tmp_path, monkeypatch):
    """A build ``scripts/bench.py`` made is a cache hit for ``lowbit explore`` (same key)."""
    sys.path.insert(0, str(explore.Path(__file__).resolve().parent.parent / "scripts"))
    try:
        import bench
    finally:
        sys.path.pop(0)
    calls = []
    monkeypatch.setattr(bench, "implement", fake_implement(calls))
    path = tmp_path / "runs.json"
    bench.bench_one("lut", "hx8k", [1, 2], lambda msg: None, bench.RunCache(path, True))
    assert len(calls) == 2
    (row,) = explore.run_sweep(explore.configs("lut", (), device="hx8k"), [1, 2],
                               cache=RunCache(path), implement=fake_implement(calls))
    assert len(calls) == 2 and all(s["cached"] for s in row["seeds"])


def test_cache_writers_keep_each_others_entries(tmp_path):
    path = tmp_path / "runs.json"
    a, b = RunCache(path), RunCache(path)
    a.put("k1", {"lcs": 1})
    b.put("k2", {"lcs": 2})
    a.put("k3", {"lcs": 3})
    assert set(json.loads(path.read_text())) == {"k1", "k2", "k3"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.json"]


def test_a_board_build_is_a_row_with_the_boards_figures(monkeypatch):
    """The board sweep's path without the 3-7 minute build: the top's parameters reach
    build_board, and its report becomes the row's figures."""
    import lowbit.boards.build as build
    seen = {}

    def build_board(board, *, seed, build_dir, top):
        seen.update(board=board, seed=seed, top=top)
        return {"resources": {"lcs": {"used": 5000, "total": 5280},
                              "dsps": {"used": 8, "total": 8}, "rams": {"used": 20, "total": 30},
                              "spram": {"used": 4, "total": 4}},
                "fmax": {"clk": {"achieved": 17.5, "constraint": 18.0}}, "timing_met": False,
                "seconds": 200.0}

    monkeypatch.setattr(build, "build_board", build_board)
    (cfg,) = explore.configs("top", [("matrix_lanes", [8])], board="icebreaker")
    (row,) = explore.run_sweep([cfg], [3])
    assert seen == {"board": "icebreaker", "seed": 3, "top": cfg.params}
    assert row["lcs_block"] == row["lcs"] == 5000 and row["dsps"] == 8 and row["spram"] == 4
    assert row["fits"] and row["meets_clock"] is False and row["fmax_mhz"] == 17.5
    assert row["throughput"] == {"unit": "MAC", "per_cycle": 8, "per_second": 8 * 17.5e6,
                                 "ceiling": 16 * 86e6, "ceiling_ratio": 0.102,
                                 "ceiling_what": explore.CEILINGS["up5k", "MAC"][1]}
    # Its key: the board, the seed and the digest of the whole build plan.
    key = cfg.key(3, cfg.digest())
    assert key.endswith(":board:icebreaker:3")
    other = explore.configs("top", [("matrix_lanes", [4])], board="icebreaker")[0]
    assert other.digest() != cfg.digest()


# -- rows, table, JSON, plot --------------------------------------------------------------------

def _rows():
    cfgs = explore.configs("lut", [("lanes", [1, 2, 4, 8])], device="up5k")
    results = [
        {1: {"seed": 1, "lcs": 400, "lcs_block": 200, "dsps": 0, "rams": 2, "spram": 0,
             "fmax_mhz": 90.0, "seconds": 5}},
        {1: {"seed": 1, "lcs": 500, "lcs_block": 300, "dsps": 1, "rams": 4, "spram": 0,
             "fmax_mhz": 12.0, "seconds": 5}},          # misses the 36 MHz clock
        {1: {"seed": 1, "lcs": 600, "lcs_block": 500, "dsps": 2, "rams": 8, "spram": 0,
             "fmax_mhz": 80.0, "seconds": 5, "cached": True}},
        {1: {"seed": 1, "error": "nextpnr failed: ERROR: Unable to place cell 'a'"}},
    ]
    return explore.pareto([explore.make_row(c, [1], r) for c, r in zip(cfgs, results,
                                                                         strict=True)])


def test_rows_pareto_and_table():
    rows = _rows()
    assert [r["pareto"] for r in rows] == [True, False, True, False]
    assert [r["meets_clock"] for r in rows] == [True, False, True, None]
    assert [r["fits"] for r in rows] == [True, True, True, False]
    assert rows[2]["seeds"] == [{"seed": 1, "fmax_mhz": 80.0, "seconds": 5, "cached": True,
                                 "meets_clock": True}]
    text = explore.format_table(rows, [1]).splitlines()
    assert text[0].split() == ["lanes", "LC", "(%", "of", "device)", "DSP", "RAM", "SPRAM",
                               "Fmax", "MHz,", "seeds", "1", "median", "throughput", "fits",
                               "meets", "36", "MHz", "Pareto"]
    assert text[1].split() == ["1", "200", "(3.8", "%)", "0", "2", "0", "90", "90", "90", "M",
                               "lookup/s", "yes", "yes", "*"]
    assert text[2].split()[-2:] == ["yes", "no"]              # fits, misses the clock
    assert text[4].split()[:5] == ["8", "does", "not", "fit:", "Unable"]


def test_json_and_plot_of_a_sweep_from_the_cache(capsys, tmp_path):
    """A sweep the cache holds whole: no cluster starts, and --json / --plot are written."""
    out_json, out_png = tmp_path / "rows.json", tmp_path / "front.png"
    status, out, err = run_main(capsys, *_cached_prng_sweep(tmp_path), "--json", str(out_json),
                                "--plot", str(out_png))
    assert status == 0, err
    assert "Dask" not in err and "0 built, 4 from the cache" in err
    assert "101.5 / 102" not in out and "101 / 102" in out and "101.5" in out
    data = json.loads(out_json.read_text())
    assert data["command"].startswith("lowbit explore prng --device hx8k")
    assert (data["block"], data["device"], data["clock_mhz"], data["seeds"]) == \
        ("prng", "hx8k", 12.0, [1, 2])
    row = data["rows"][1]
    assert row["params"] == {"lanes": 2} and row["fmax_mhz"] == 100.5
    assert [s["fmax_mhz"] for s in row["seeds"]] == [100.0, 101.0]
    assert row["lcs_block"] == 400 and row["dsps"] == 0 and row["rams"] == 0
    assert row["fits"] and row["meets_clock"] and row["pareto"]
    assert row["throughput"]["per_second"] == pytest.approx(2 * 100.5e6)
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _cached_prng_sweep(tmp_path):
    """A run cache holding a sweep of the PRNG with 1 and 2 lanes on the HX8K, seeds 1 and 2;
    the ``lowbit explore`` arguments of that sweep."""
    cfgs = explore.configs("prng", [("lanes", [1, 2])], device="hx8k")
    cache = RunCache(tmp_path / "runs.json")
    for k, cfg in enumerate(cfgs):
        for seed in (1, 2):
            cache.put(cfg.key(seed, cfg.digest()),
                      {"seed": seed, "lcs": 400, "lcs_block": 200 * (k + 1), "wrapper_lcs": 200,
                       "dsps": 0, "rams": 0, "spram": 0, "fmax_mhz": 100.0 + seed - k,
                       "seconds": 3.0})
    return ["explore", "prng", "--device", "hx8k", "--param", "lanes=1,2", "--seeds", "1", "2",
            "--cache", str(tmp_path / "runs.json")]


def test_a_progress_bar_on_a_terminal(tmp_path):
    from test_progress import _pty_run
    out = _pty_run([*LOWBIT, *_cached_prng_sweep(tmp_path)])
    assert "builds:" in out and "/4 [" in out and "build/s" in out
    assert "prng lanes=2 on hx8k seed 2: 400 LC, 101.0 MHz (cached)" in out


def test_without_dask_a_sweep_says_what_to_install(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)        # import distributed fails
    status, out, err = run_main(capsys, "explore", "uart", "--seeds", "1", "--cache",
                                str(tmp_path / "runs.json"))
    assert status == 1 and out == ""
    assert err.strip().splitlines()[-1] == ("lowbit explore: error: a sweep on a cluster needs "
                                            "Dask distributed: pip install 'lowbit[explore]' "
                                            "(or pip install 'dask[distributed]')")


# -- real builds on Dask --------------------------------------------------------------------------

def test_builds_on_a_local_cluster_of_two_workers(tmp_path):
    """The UART (2-3 s) and a build that fails (an option nextpnr does not know), one on each
    of two workers: a row of the UART's figures and a row of the failure; then again from the
    cache. (Real builds of other blocks and devices in this process: test_toolchain.py.)"""
    cfgs = explore.configs("uart", (), device="hx8k") + \
        explore.configs("uart", (), device="hx8k", pnr_args=("--no-such-option",))
    cache = RunCache(tmp_path / "runs.json")
    with explore.dask_client(workers=2) as client:
        assert len(client.scheduler_info()["workers"]) == 2
        rows = explore.run_sweep(cfgs, [1], cache=cache, client=client)
    assert [r["block"] for r in rows] == ["uart", "uart"]
    assert rows[0]["fits"] and rows[0]["meets_clock"] and rows[0]["fmax_mhz"] > 20, rows[0]
    assert rows[0]["lcs_block"] > 50 and not rows[0]["seeds"][0]["cached"]
    assert rows[1]["fits"] is None and "no-such-option" in rows[1]["error"]
    assert len(cache.runs) == 2

    def no_client():
        raise AssertionError("a sweep the cache holds needs no cluster")

    again = explore.run_sweep(cfgs, [1], cache=RunCache(tmp_path / "runs.json"),
                              client=no_client)
    assert [r.get("fmax_mhz") for r in again] == [r.get("fmax_mhz") for r in rows]
    assert all(r["seeds"][0]["cached"] for r in again)


@pytest.mark.slow
def test_the_benchmarks_on_two_workers(tmp_path):
    """``scripts/bench.py --workers 2``: the benchmark rows through the same engine, on an
    embedded cluster, and then from the cache it filled."""
    args = [sys.executable, str(explore.Path(__file__).resolve().parent.parent / "scripts" /
                                "bench.py"),
            "--blocks", "uart", "prng", "--devices", "hx8k", "--seeds", "1", "--no-float",
            "--cache", str(tmp_path / "runs.json"), "--json", str(tmp_path / "all.json"),
            "--markdown", str(tmp_path / "PERFORMANCE.md")]
    r = subprocess.run([*args, "--workers", "2"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "starting a local Dask cluster of 2 workers" in r.stderr
    rows = json.loads((tmp_path / "all.json").read_text())["rows"]
    assert [(row["block"], row["device"]) for row in rows] == [("uart", "hx8k"), ("prng", "hx8k")]
    assert all(row["fmax_mhz_median"] > 20 and row["seeds"] == [1] for row in rows)
    r = subprocess.run([*args, "--resume"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stderr.count("(cached)") == 2, r.stderr
    assert json.loads((tmp_path / "all.json").read_text())["rows"] == rows


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _processes(*commands):
    """Start ``commands`` as subprocesses (each in its own session); on exit, terminate each
    with everything it started."""
    procs = []
    try:
        for cmd, wait in commands:
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, start_new_session=True))
            wait()
        yield procs
    finally:
        for p in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=20)


def _listening(port, timeout=60):
    def wait():
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.2)
        raise AssertionError(f"nothing listens on port {port}")
    return wait


@pytest.mark.slow
def test_a_sweep_on_a_scheduler_and_a_worker_started_apart(tmp_path):
    """``dask scheduler`` and ``dask worker`` as a user starts them, ``lowbit explore
    --scheduler`` connecting to them."""
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    # `dask scheduler` and `dask worker` of this Python (`python -m dask` is the `dask` command).
    scheduler = [sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1", "--port",
                 str(port), "--no-dashboard"]
    worker = [sys.executable, "-m", "dask", "worker", address, "--nthreads", "2",
              "--no-dashboard", "--host", "127.0.0.1"]
    with _processes((scheduler, _listening(port)), (worker, lambda: None)) as procs:
        r = subprocess.run([*LOWBIT, "explore", "uart", "--device", "hx8k", "--param",
                            "baud=115200,1000000", "--seeds", "1", "--scheduler", address,
                            "--cache", str(tmp_path / "runs.json"), "--json",
                            str(tmp_path / "rows.json")],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert f"1 worker at {address}" in r.stderr and "2 built" in r.stderr
        rows = json.loads((tmp_path / "rows.json").read_text())["rows"]
        assert [row["params"] for row in rows] == [{"baud": 115200}, {"baud": 1000000}]
        assert all(row["fits"] and row["fmax_mhz"] for row in rows)
        # A client that dies without a word (SIGKILL): its running builds end on the worker.
        worker_proc = psutil.Process(procs[1].pid)
        client = subprocess.Popen([*LOWBIT, "explore", "lut", "--device", "up5k", "--seeds", "1",
                                   "--scheduler", address, "--no-cache"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
        try:
            builds = [k for k in _wait_for_a_build(worker_proc)
                      if "_child_main" in " ".join(_cmdline(k)) or "yowasp" in " ".join(
                          _cmdline(k))]
        finally:
            os.killpg(client.pid, signal.SIGKILL)
            client.wait()
        end = time.monotonic() + 15
        while _running(builds) and time.monotonic() < end:
            time.sleep(0.2)
        assert not _running(builds), [_cmdline(k) for k in _running(builds)]
    # No scheduler there any more: a one-line error, status 1.
    r = subprocess.run([*LOWBIT, "explore", "prng", "--seeds", "1", "--scheduler", address,
                        "--no-cache", "--timeout", "2"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1].startswith(
        f"lowbit explore: error: cannot reach the Dask scheduler at {address}")
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("when", ["building", pytest.param("starting", marks=pytest.mark.slow)])
def test_ctrl_c_cancels_the_builds_and_leaves_no_process(tmp_path, when):
    """Ctrl-C on a terminal (SIGINT to the whole process group) while the builds run, or while
    the cluster starts: lowbit explore cancels the builds, ends their tools, closes its cluster
    and exits 130 at once, with one line and no traceback (of its own or of a worker)."""
    cmd = [*LOWBIT, "explore", "lut", "--device", "up5k", "--param", "lanes=1,2,4,8",
           "--seeds", "1", "--workers", "2", "--cache", str(tmp_path / "runs.json")]
    since = time.time() - 1
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        me = psutil.Process(p.pid)
        if when == "starting":
            first = p.stderr.readline()
            assert first.startswith("lowbit explore: starting a local Dask cluster"), first
            seen = set(me.children(recursive=True))
        else:
            seen = _wait_for_a_build(me)
        t0 = time.monotonic()
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 130, err
    assert took < 20, took
    assert "Traceback" not in err and out == ""
    assert "lowbit explore: interrupted: 4 builds cancelled, 0 finished" in err
    time.sleep(1)
    left = _running(seen) + _leftovers(p.pid, since)
    assert not left, [_cmdline(k) for k in left]


def _leftovers(session, since):
    """Processes still running of the session ``session`` (the workers of lowbit explore's
    cluster), or builds (``_child_main``, each in a session of its own) started since
    ``since``."""
    out = []
    for proc in psutil.process_iter():
        try:
            mine = os.getsid(proc.pid) == session or (
                proc.create_time() >= since and "_child_main" in " ".join(proc.cmdline()))
            if mine and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except (psutil.Error, OSError):
            continue
    return out


def _wait_for_a_build(proc, timeout=120):
    """Wait until a YoWASP tool runs below ``proc``; the processes below it then."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        kids = set(proc.children(recursive=True))
        if any("yowasp" in " ".join(_cmdline(k)) for k in kids):
            return kids
        time.sleep(0.2)
    pytest.fail("no build started")


def _running(procs):
    return [k for k in procs if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]


def _cmdline(proc):
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


@pytest.mark.slow
def test_a_netlist_that_does_not_fit_is_a_row(capsys, tmp_path):
    """16 PRNG lanes (~5000 LC) do not fit the UP5K beside the measurement wrapper (12 s)."""
    status, out, err = run_main(capsys, "explore", "prng", "--device", "up5k", "--param",
                                "lanes=1,16", "--seeds", "1", "--workers", "2", "--cache",
                                str(tmp_path / "runs.json"), "--json",
                                str(tmp_path / "rows.json"))
    assert status == 0, err
    rows = json.loads((tmp_path / "rows.json").read_text())["rows"]
    assert rows[0]["fits"] and rows[0]["pareto"]
    assert rows[1]["fits"] is False and not rows[1]["pareto"] and rows[1]["error"]
    assert "does not fit" in out.splitlines()[2]


@pytest.mark.slow
@pytest.mark.heavy
def test_a_board_sweep_of_the_icebreaker_top(capsys, tmp_path):
    """The iCEBreaker's top with its pins and PLL, then from the cache. Heavy (out of CI's slow
    run): 2-2.5 CPU-minutes for the build that test_boards' iCEBreaker bitstream makes too;
    the quick test_a_board_build_is_a_row_with_the_boards_figures covers the sweep's side."""
    argv = ("explore", "top", "--board", "icebreaker", "--seeds", "1", "--workers", "1",
            "--cache", str(tmp_path / "runs.json"), "--json", str(tmp_path / "rows.json"))
    status, out, err = run_main(capsys, *argv)
    assert status == 0, err
    (row,) = json.loads((tmp_path / "rows.json").read_text())["rows"]
    assert row["board"] == "icebreaker" and row["fits"] and row["clock_mhz"] == 36
    assert row["dsps"] >= 1 and row["spram"] >= 1 and isinstance(row["meets_clock"], bool)
    status, out, err = run_main(capsys, *argv)
    assert status == 0 and "0 built, 1 from the cache" in err
