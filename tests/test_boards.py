"""Board profiles, board elaboration and real bitstream builds."""

import json
import zlib

import pytest

from lowbit.boards.build import _add_dfu_suffix, build_board, format_report, top_parameters
from lowbit.boards.profiles import BOARDS, DEFAULT_BOARD, get_board
from lowbit.boards.toolchain import DEVICES


def test_default_board_is_icebreaker():
    assert DEFAULT_BOARD == "icebreaker"
    assert get_board("icebreaker").device == "up5k"


def test_unknown_board():
    with pytest.raises(ValueError, match=r"Unknown board 'de0'; supported boards: icebreaker, "
                                         r"icebreaker-discrete, hx8k, ulx3s, orangecrab"):
        get_board("de0")


def test_icebreaker_profiles():
    """Two profiles of one board: the default with the BFP MATVEC column (every area option,
    no discrete unit, no quantiser), and one with the discrete unit (DMATVEC)."""
    bfp, disc = get_board("icebreaker"), get_board("icebreaker-discrete")
    assert (bfp.platform, bfp.device, bfp.clk_freq) == (disc.platform, disc.device, disc.clk_freq)
    assert bfp.top["bfp"] and not bfp.top["discrete"] and not bfp.top["quantiser"]
    assert disc.top["discrete"] and not disc.top["bfp"]
    assert {k: bfp.top[k] for k in ("bfp_stochastic", "bfp_predictor", "bfp_acc_block_ram",
                                    "bfp_pipelined")} == dict(
        bfp_stochastic=False, bfp_predictor=False, bfp_acc_block_ram=True, bfp_pipelined=False)
    assert (bfp.top["matrix_lanes"], bfp.top["block"], bfp.top["max_blocks"]) == (4, 16, 4)


@pytest.mark.parametrize("board", list(BOARDS))
def test_profile_fits_its_device(board):
    p = get_board(board)
    dev = DEVICES[p.device]
    assert p.top["use_spram"] is bool(dev["spram"])
    assert p.top["multiplier"] == {"up5k": "sb_mac16", "hx8k": "lut"}.get(
        p.device, "mult18x18d")
    assert p.platform_class().device.replace("iCE40", "").lower().startswith(
        dev["part"].replace("iCE40", "").split("-")[0].lower()[:5])


@pytest.mark.parametrize("board", list(BOARDS))
def test_every_board_elaborates_without_toolchain(board, tmp_path):
    report = build_board(board, do_build=False, build_dir=tmp_path)
    assert report["board"] == board
    assert report["top"]["clk_freq"] == get_board(board).clk_freq
    assert any(f.endswith(".il") for f in report["files"])
    params, unused = top_parameters(get_board(board))
    assert set(params) | set(unused) == {"clk_freq", *get_board(board).top}


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
    assert json.loads((tmp_path / "report.json").read_text()) == report
    bitstream = tmp_path / f"lowbit.{get_board(board).bitstream}"
    assert bitstream.is_file() and bitstream.stat().st_size > 1000
    res = report["resources"]
    assert 0 < res["lcs"]["used"] <= res["lcs"]["total"]
    assert report["fmax"], "no clock domain in the timing report"
    assert report["timing_met"]
    table = format_report(report)
    assert "Fmax MHz" in table and str(res["lcs"]["used"]) in table


def test_default_board_places_and_routes(tmp_path):
    report = build_board(DEFAULT_BOARD, build_dir=tmp_path, seed=1)
    _check_report(report, tmp_path, DEFAULT_BOARD)
    assert report["resources"]["spram"]["used"] >= 1


@pytest.mark.slow
@pytest.mark.parametrize("board", [b for b in BOARDS if b != DEFAULT_BOARD])
def test_other_boards_place_and_route(board, tmp_path):
    report = build_board(board, build_dir=tmp_path, seed=1)
    _check_report(report, tmp_path, board)
