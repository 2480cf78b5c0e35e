"""Board profiles, board elaboration and real bitstream builds."""

import json
import os
import sys
import zlib

import pytest
from amaranth.build.run import BuildPlan

from lowbit.boards.build import (
    YOSYS_AFTER_READ,
    _add_dfu_suffix,
    build_board,
    format_report,
    top_parameters,
)
from lowbit.boards.profiles import BOARDS, DEFAULT_BOARD, get_board
from lowbit.boards.toolchain import DEVICES

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from buildreuse import describe, finished_run_of, toolchain_installed_ns  # noqa: E402


def test_default_board_is_icebreaker():
    assert DEFAULT_BOARD == "icebreaker"
    assert get_board("icebreaker").device == "up5k"


def test_unknown_board():
    with pytest.raises(ValueError, match=r"Unknown board 'de0'; supported boards: icebreaker, "
                                         r"icebreaker-discrete, hx8k, ulx3s, orangecrab"):
        get_board("de0")


def test_icebreaker_profiles():
    """Two profiles of one board: the default with the BFP MATVEC column (every area option,
    no discrete unit, no quantiser) at 36 MHz from the PLL, and one with the discrete unit
    (DMATVEC) on the 12 MHz oscillator."""
    bfp, disc = get_board("icebreaker"), get_board("icebreaker-discrete")
    assert (bfp.platform, bfp.device) == (disc.platform, disc.device)
    assert (bfp.clk_freq, bfp.pll_pad, disc.clk_freq) == (36e6, True, 12e6)
    assert bfp.top["bfp"] and not bfp.top["discrete"] and not bfp.top["quantiser"]
    assert disc.top["discrete"] and not disc.top["bfp"]
    assert {k: bfp.top[k] for k in ("bfp_stochastic", "bfp_predictor", "bfp_acc_block_ram",
                                    "bfp_pipelined", "bfp_pipelined_combiner")} == dict(
        bfp_stochastic=False, bfp_predictor=False, bfp_acc_block_ram=True, bfp_pipelined=False,
        bfp_pipelined_combiner=True)
    # 16 lanes: two per SB_MAC16, all 8 of the UP5K's (issue #20).
    assert (bfp.top["matrix_lanes"], bfp.top["block"], bfp.top["max_blocks"]) == (16, 16, 4)


@pytest.mark.parametrize("board", list(BOARDS))
def test_profile_fits_its_device(board):
    p = get_board(board)
    dev = DEVICES[p.device]
    assert p.top["use_spram"] is bool(dev["spram"])
    assert p.top["multiplier"] == {"up5k": "sb_mac16", "hx8k": "lut"}.get(
        p.device, "mult18x18d")
    assert p.platform_class().device.replace("iCE40", "").lower().startswith(
        dev["part"].replace("iCE40", "").split("-")[0].lower()[:5])


@pytest.mark.parametrize("board", [
    # The default board in the quick suite; the others with -m slow (the ULX3S top through its
    # platform also elaborates in test_clocking, with the PLL).
    b if b == DEFAULT_BOARD else pytest.param(b, marks=pytest.mark.slow) for b in BOARDS])
def test_every_board_elaborates_without_toolchain(board, tmp_path):
    report = build_board(board, do_build=False, build_dir=tmp_path)
    assert report["board"] == board
    assert report["top"]["clk_freq"] == get_board(board).clk_freq
    assert any(f.endswith(".il") for f in report["files"])
    params, unused = top_parameters(get_board(board))
    assert set(params) | set(unused) == {"clk_freq", *get_board(board).top}


def _check_sequencer_fsm_is_recoded_one_hot(script, il):
    """The Yosys script marks the sequencer's state register one-hot right after reading the
    design, and the selection names a register that exists (an empty selection would pass
    silently)."""
    script = script.splitlines()
    assert script[script.index("read_rtlil lowbit.il") + 1] == YOSYS_AFTER_READ
    module, wire = YOSYS_AFTER_READ.split()[-1].split("/")
    body = il[il.index(f"module \\{module}\n"):]
    body = body[:body.index("\nend\n")]
    assert f" \\{wire}\n" in body


def test_build_plan_options_of_the_profiles():
    """A profile's nextpnr options and LUT mapping reach its build plan: the ULX3S (80 MHz
    from the EHXPLLL) maps LUTs with the classic ABC, since Yosys 0.70's abc9 stops on its top,
    and is routed by router1, named, whose routes of its placements are faster than router2's
    (docs/sequencer.md, session 31); the other
    boards keep Yosys's and nextpnr's defaults. The plans are of a small top (the link and
    the board's clock, PLL and UART: 0.5 CPU-s each instead of 4-5 for the boards' own tops);
    the options and the mapping are the profile's, whatever its top holds."""
    import dataclasses

    from lowbit.boards.build import board_plan
    from lowbit.boards.profiles import BoardProfile

    small = dict(sequencer=False, bfp=False, quantiser=False, discrete=False, lut_tables=0,
                 grand=False, lanes=1, use_spram=False, scratch_bytes=1024)

    def plan(board):
        files = board_plan(board, top=small).files
        nextpnr = [ln for ln in files["build_lowbit.sh"].splitlines() if "--seed" in ln]
        return files["lowbit.ys"], nextpnr[0]

    ys, pnr = plan("ulx3s")
    assert BOARDS["ulx3s"].lut_mapping == "abc" and BOARDS["ulx3s"].clk_freq == 80e6
    lines = [ln.strip() for ln in ys.splitlines()]
    synth = lines.index("synth_ecp5 -run :map_luts -top lowbit")
    assert lines[synth + 1] == ("techmap -map +/lattice/latches_map.v; abc -dress -lut 4:7; "
                                "clean; synth_ecp5 -top lowbit -run map_cells:")
    assert " --router router1 " in pnr and "--seed 1 " in pnr
    for board in ("icebreaker", "orangecrab"):
        ys, pnr = plan(board)
        assert "abc -dress" not in ys and "-run" not in ys and "--router" not in pnr
    with pytest.raises(ValueError, match="LUT mapping must be 'abc9' or 'abc', not 'abc10'"):
        dataclasses.replace(BOARDS["ulx3s"], lut_mapping="abc10")
    assert BoardProfile(name="x", title="x", platform="m:C", device="up5k",
                        clk_freq=12e6).nextpnr_opts == ()


def test_routed_netlist_by_default_on_ice40_only():
    """``lowbit build`` writes nextpnr's routed netlist (``--write``) on the iCE40 boards, for
    the gate-level check, and not on the ECP5 ones unless asked; anything but a bool or None is
    refused before elaborating."""
    from lowbit.boards.build import board_plan

    small = dict(sequencer=False, bfp=False, quantiser=False, discrete=False, lut_tables=0,
                 grand=False, lanes=1, use_spram=False, scratch_bytes=1024)

    def writes(board, **kw):
        return "--write lowbit.routed.json" in board_plan(board, top=small,
                                                          **kw).files["build_lowbit.sh"]

    assert writes("icebreaker") and writes("hx8k") and not writes("orangecrab")
    assert writes("orangecrab", routed_netlist=True) and not writes("icebreaker",
                                                                    routed_netlist=False)
    with pytest.raises(TypeError, match="routed_netlist must be a bool or None, not 'yes'"):
        build_board("icebreaker", routed_netlist="yes", do_build=False)


def test_bad_seed():
    with pytest.raises(ValueError, match="Seed must be a non-negative integer, not -1"):
        build_board("icebreaker", seed=-1, do_build=False)


def test_dfu_suffix_is_what_dfu_suffix_writes(tmp_path):
    f = tmp_path / "x.bit"
    f.write_bytes(b"bitstream")
    _add_dfu_suffix(f)
    data = f.read_bytes()
    assert len(data) == 9 + 16
    assert data[9:15] == bytes.fromhex("ffff f05a 0912".replace(" ", ""))
    assert data[15:17] == b"\x00\x01" and data[17:20] == b"UFD" and data[20] == 16
    # DFU CRC: CRC-32 without the final inversion, over everything before the CRC field.
    assert int.from_bytes(data[-4:], "little") == zlib.crc32(data[:-4]) ^ 0xFFFFFFFF
    _add_dfu_suffix(f)
    assert f.read_bytes() == data


def _check_report(report, tmp_path, board):
    assert (tmp_path / "report.json").is_file()
    # Compared in JSON form: a profile's tuples (hx8k's grand_modes=()) are lists in the file.
    assert json.loads((tmp_path / "report.json").read_text()) == json.loads(json.dumps(report))
    bitstream = tmp_path / f"lowbit.{get_board(board).bitstream}"
    assert bitstream.is_file() and bitstream.stat().st_size > 1000
    res = report["resources"]
    assert 0 < res["lcs"]["used"] <= res["lcs"]["total"]
    assert report["fmax"], "no clock domain in the timing report"
    assert report["timing_met"]
    table = format_report(report)
    assert "Fmax MHz" in table and str(res["lcs"]["used"]) in table


def test_reuse_needs_a_finished_run_of_the_same_plan(tmp_path):
    """The reuse above is not blind: a changed input, an unfinished run (no ``report.json``, or
    one older than the inputs) or a newer toolchain means building again."""
    plan = BuildPlan("build_x")
    plan.add_file("x.il", "module x")
    plan.add_file("x.pcf", b"set_io a 1")
    plan.extract(tmp_path)
    assert not finished_run_of(plan, tmp_path)                    # the toolchain never ran
    (tmp_path / "report.json").write_text("{}")
    assert finished_run_of(plan, tmp_path)
    changed = BuildPlan("build_x")
    changed.add_file("x.il", "module y")
    changed.add_file("x.pcf", b"set_io a 1")
    assert not finished_run_of(changed, tmp_path)
    old = (tmp_path / "x.il").stat().st_mtime_ns - 10 ** 9
    os.utime(tmp_path / "report.json", ns=(old, old))              # inputs rewritten since
    assert not finished_run_of(plan, tmp_path)
    new = toolchain_installed_ns() - 10 ** 9
    os.utime(tmp_path / "x.il", ns=(new - 10 ** 9, new - 10 ** 9))
    os.utime(tmp_path / "x.pcf", ns=(new - 10 ** 9, new - 10 ** 9))
    os.utime(tmp_path / "report.json", ns=(new, new))              # tools installed since
    assert not finished_run_of(plan, tmp_path)


def test_default_board_places_and_routes(tmp_path, reuse_finished_build):
    """A real synthesis, place and route of the default board: this test's own, or that of
    ``lowbit build`` (the README's first command) when it ran on the identical build plan.
    Its script recodes the sequencer's state register one-hot."""
    report = build_board(DEFAULT_BOARD, build_dir=tmp_path, seed=1)
    print("toolchain products:", describe(reuse_finished_build))
    _check_report(report, tmp_path, DEFAULT_BOARD)
    assert report["resources"]["spram"]["used"] >= 1
    _check_sequencer_fsm_is_recoded_one_hot((tmp_path / "lowbit.ys").read_text(),
                                            (tmp_path / "lowbit.il").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("board", [
    # The ULX3S (router1, 12-20 CPU-minutes) is left to `-m slow` and scripts/bench_boards.py,
    # which builds it for every figure it records; the OrangeCrab keeps the ECP5 flow (and its
    # DFU suffix) in CI's slow run every day, at 2-4 CPU-minutes.
    pytest.param(b, marks=pytest.mark.heavy) if b == "ulx3s" else b
    for b in BOARDS if b != DEFAULT_BOARD])
def test_other_boards_place_and_route(board, tmp_path):
    report = build_board(board, build_dir=tmp_path, seed=1)
    _check_report(report, tmp_path, board)


def test_column_floorplan_of_the_ulx3s():
    """The column floorplan of the ULX3S's 64-lane top (``floorplan``, off in the profile:
    docs/sequencer.md, session 31): each group of four lanes in one period of the hard-block
    rows, its four MULT18X18D in DSP row 34 or 58 and its four weight banks in the same columns
    twelve rows away (EBR row 22 or 70), every site used once; the drain's neighbours (group
    g + 1 -> g) in the same row and adjacent periods, or the same period across; the drain's
    head near the die's centre. With ``floorplan`` the Yosys script sets each BEL after
    asserting its cell, after the LUT mapping and before the netlist is written."""
    import dataclasses
    import re

    from lowbit.boards.build import board_plan, synth_options
    from lowbit.boards.floorplan import BANK_CELL, MULT_CELL, column_floorplan

    t = BOARDS["ulx3s"].top
    assert t["matrix_lanes"] == 64 and not any(b.floorplan for b in BOARDS.values())
    plan = dict(column_floorplan("ecp5-85f", lanes=64, multiplier="mult18x18d",
                                 weight_depth=t["weight_depth"]))
    assert len(plan) == 128 and len(set(plan.values())) == 128
    site = re.compile(r"X(\d+)/Y(\d+)/(MULT18_[0145]|EBR[0-3])$")
    period = {}
    for k in range(64):
        xm, ym, bm = site.match(plan[MULT_CELL.format(k=k)]).groups()
        xb, yb, bb = site.match(plan[BANK_CELL.format(k=k)]).groups()
        i = k % 4
        assert bm == f"MULT18_{(0, 1, 4, 5)[i]}" and bb == f"EBR{i}"
        p = int(xm) - (0, 1, 4, 5)[i]
        assert int(xb) - 2 * i == p and (int(ym), int(yb)) in ((34, 22), (58, 70))
        assert period.setdefault(k // 4, (p, int(ym))) == (p, int(ym))
    steps = {abs(period[g + 1][0] - period[g][0]) if period[g + 1][1] == period[g][1]
             else (period[g + 1][0] - period[g][0], "across") for g in range(15)}
    assert steps <= {9, 11, (0, "across")}          # 11: the two periods beside the centre
    assert period[0] == (49, 34) and period[15] == (58, 34)
    script = synth_options(dataclasses.replace(BOARDS["ulx3s"], floorplan=True))
    ys = script["script_after_synth"].splitlines()
    assert ys[0] == synth_options(BOARDS["ulx3s"])["script_after_synth"]   # the ABC's first
    at = ys.index("select -assert-count 1 lowbit/" + MULT_CELL.format(k=17))
    assert ys[at + 1] == f'setattr -set BEL "{plan[MULT_CELL.format(k=17)]}" lowbit/' \
        + MULT_CELL.format(k=17)
    assert sum("setattr -set BEL" in ln for ln in ys) == 128 == len(ys[1:]) // 2
    assert "BEL" not in board_plan("ulx3s").files["lowbit.ys"]


@pytest.mark.parametrize("kw,exc,msg", [
    (dict(device="ecp5-25f"), ValueError, "No column floorplan for device 'ecp5-25f'"),
    (dict(multiplier="lut"), ValueError, "needs a MULT18X18D per lane .* not 'lut'"),
    (dict(hard_lanes=27), ValueError, "with dsp_lanes 27"),
    (dict(weight_depth=2048), ValueError, "at most 1024 entries .* not 2048"),
    (dict(lanes=24), ValueError, "multiple of 16 lanes, at most 96, not 24"),
    (dict(lanes=112), ValueError, "multiple of 16 lanes, at most 96, not 112"),
    (dict(lanes=64.0), TypeError, "lane count must be an integer, not 64.0"),
    (dict(weight_depth=None), TypeError, "weight depth must be an integer, not None"),
])
def test_column_floorplan_refuses(kw, exc, msg):
    """What the floorplan cannot place is refused with the bad value named: another device, a
    column not on one MULT18X18D a lane, banks of more than one DP16KD, lanes not a multiple
    of 16 or more than the DSP rows' periods hold; so is a profile's floorplan not a bool, and
    a profile whose top the floorplan does not fit stops before its build plan."""
    import dataclasses

    from lowbit.boards.build import synth_options
    from lowbit.boards.floorplan import column_floorplan

    args = dict(device="ecp5-85f", lanes=64, multiplier="mult18x18d", weight_depth=1024,
                hard_lanes=None)
    args.update(kw)
    device = args.pop("device")
    with pytest.raises(exc, match=msg):
        column_floorplan(device, **args)
    assert len(column_floorplan("ecp5-85f", lanes=32, multiplier="mult18x18d",
                                weight_depth=512)) == 64
    with pytest.raises(TypeError, match="Floorplan must be a bool, not 'yes'"):
        dataclasses.replace(BOARDS["ulx3s"], floorplan="yes")
    with pytest.raises(ValueError, match="multiple of 16 lanes, at most 96, not 24"):
        synth_options(dataclasses.replace(BOARDS["ulx3s"], floorplan=True,
                                          top={**BOARDS["ulx3s"].top, "matrix_lanes": 24}))
