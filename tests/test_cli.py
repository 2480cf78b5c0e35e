"""The ``lowbit`` command line, run as a user would: through a subprocess."""

import json
import shutil
import subprocess
import sys

import pytest

from lowbit.boards.cli import main
from lowbit.hw.registry import (
    BLOCKS,
    available_blocks,
    block_class,
    block_params,
    parse_params,
)


def lowbit(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "lowbit.boards.cli", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=600)


def test_boards_lists_every_board_with_its_profile():
    r = lowbit("boards", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [row["board"] for row in rows] == ["icebreaker", "icebreaker-discrete", "hx8k",
                                              "ulx3s", "orangecrab"]
    assert [row["default"] for row in rows] == [True, False, False, False, False]
    for row in rows:
        assert row["profile"]["lanes"] >= 1
    r = lowbit("boards")
    assert r.returncode == 0 and "icebreaker (default)" in r.stdout


def test_unknown_board_is_a_usage_error():
    r = lowbit("build", "--board", "de0nano")
    assert r.returncode == 2
    assert "invalid choice: 'de0nano'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def run_main(capsys, *argv):
    """``lowbit ARGV`` in this process: ``(status, stdout, stderr)``."""
    try:
        status = main(list(argv))
    except SystemExit as e:
        status = e.code
    out = capsys.readouterr()
    return status, out.out, out.err


def _usage_error(capsys, *argv):
    """Run ``lowbit ARGV``, assert a one-line usage error (status 2), return the line."""
    status, _, err = run_main(capsys, *argv)
    assert status == 2, err
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


def test_unknown_block_names_the_known_ones(capsys):
    err = _usage_error(capsys, "verilog", "nosuch")
    assert err.startswith("lowbit verilog: error: argument block: unknown block 'nosuch'; known "
                          "blocks: prng")


@pytest.mark.parametrize("argv, expected", [
    (("build", "--seed", "-5"), "argument --seed: must be an integer between 0 and"),
    (("build", "--seed", "x"), "argument --seed: must be an integer between 0 and"),
    (("demo", "digits", "--images", "0"), "argument --images: must be an integer between 1 and "
     "540, not 0"),
    (("demo", "digits", "--images", "2.5"), "argument --images: must be an integer"),
    (("demo", "digits", "--simulator", "verilator"), "argument --simulator: invalid choice"),
    (("flash", "--board", "nosuch"), "argument --board/-b: invalid choice"),
    (("train", "digits", "--hidden", "0"), "argument --hidden: must be one or more"),
    (("train", "digits", "--hidden", ""), "argument --hidden: must be one or more"),
    (("train", "digits", "--lr", "nan"), "argument --lr: must be a finite number in (0, 10]"),
    (("train", "digits", "--lr", "inf"), "argument --lr"),
    (("train", "digits", "--lr", "-1"), "argument --lr"),
    (("train", "digits", "--lr", "1e6"), "argument --lr"),
    (("train", "digits", "--seed", "-5"), "argument --seed: must be an integer between 0 and "
     "18446744073709551615, not -5"),
    (("train", "digits", "--batch", "0"), "argument --batch: must be an integer of at least 1"),
    (("train", "digits", "--epochs", "0"), "argument --epochs"),
    (("train", "digits", "--steps", "-1"), "argument --steps"),
    (("verilog", "bfp", "--param", "oops"), "argument --param/-p: Parameter must be written "
     "key=value"),
])
def test_bad_options_are_one_line_usage_errors(capsys, argv, expected):
    err = _usage_error(capsys, *argv)
    assert err.startswith(f"lowbit {argv[0]}: error: "), err
    assert expected in err


@pytest.mark.parametrize("pairs, expected", [
    (["lanes=4"], {"lanes": 4}),
    (["mode='raw'", "x=1.5", "flag=True"], {"mode": "raw", "x": 1.5, "flag": True}),
    (["name=up5k"], {"name": "up5k"}),
])
def test_parse_params(pairs, expected):
    assert parse_params(pairs) == expected


@pytest.mark.parametrize("bad", ["lanes", "=3", "1x=2"])
def test_parse_params_rejects(bad):
    with pytest.raises(ValueError, match="Parameter"):
        parse_params([bad])


def test_parse_params_rejects_a_repeated_parameter():
    with pytest.raises(ValueError, match="Parameter 'lanes' is given twice"):
        parse_params(["lanes=4", "lanes=8"])


def test_bad_parameter_is_a_one_line_error(capsys):
    err = _usage_error(capsys, "verilog", "bfp", "--param", "no_such_parameter=3")
    assert err.startswith("lowbit verilog: error: block 'bfp' has no parameter "
                          "'no_such_parameter'; its parameters: lanes, block, width, ")
    assert "sim_model" in err and "pipelined" in err
    err = _usage_error(capsys, "verilog", "bfp", "--param", "lanes=4", "--param", "lanes=8")
    assert "parameter 'lanes' is given twice (lanes=4 and lanes=8)" in err
    err = _usage_error(capsys, "verilog", "bfp", "--param", "lanes=3")
    assert "block 'bfp': Lane count must be an integer between 4 and 256, not 3" in err


def test_verilog_for_synthesis_instantiates_the_primitives(capsys, tmp_path):
    """``sim_model=False`` unless the user sets it: SB_MAC16 in the Verilog, as in the top."""
    out = tmp_path / "bfp.v"
    small = ("--param", "lanes=4", "--param", "block=4", "--param", "max_blocks=2")
    status, _, err = run_main(capsys, "verilog", "bfp", *small, "--param", "mult='sb_mac16'",
                              "-o", str(out))
    assert status == 0, err
    assert "SB_MAC16" in out.read_text()
    status, _, err = run_main(capsys, "verilog", "bfp", *small, "--param", "mult=sb_mac16",
                              "--param", "sim_model=True", "-o", str(out))
    assert status == 0, err
    assert "SB_MAC16" not in out.read_text()


def test_verilog_list_shows_parameters_defaults_and_ranges(capsys):
    status, out, _ = run_main(capsys, "verilog", "--list")
    assert status == 0
    lines = out.splitlines()
    bfp = lines.index(next(ln for ln in lines if ln.startswith("bfp ")))
    params = {}
    for ln in lines[bfp + 1:]:
        if not ln.startswith("    "):
            break
        params[ln.split()[0]] = ln
    assert "4..256" in params["lanes=16"]
    assert "lut | sb_mac16 | mult18x18d" in params["mult='lut'"]
    assert "constructor's default: True" in params["sim_model=False"]
    assert any(ln.startswith("top ") for ln in lines)


def test_every_registered_block_imports():
    """available_blocks() leaves out a block whose module fails to import (for the CLI's
    listing); the tests iterate BLOCKS, so such a block fails them instead of vanishing."""
    assert available_blocks() == list(BLOCKS)
    for block in BLOCKS:
        block_class(block)


@pytest.mark.parametrize("block", list(BLOCKS))
def test_every_block_parameter_is_documented(block):
    """--list reads each parameter from the constructor's docstring: every one must be there."""
    for p in block_params(block):
        assert p.kind, f"{block}: parameter {p.name!r} is missing from the docstring"
        assert p.valid


def test_boards_show_uart_and_led_pins(capsys):
    status, out, _ = run_main(capsys, "boards", "--json")
    assert status == 0
    pins = {row["board"]: row["pins"] for row in json.loads(out)}
    ice = pins["icebreaker"]
    assert (ice["uart"]["rx"]["pin"], ice["uart"]["tx"]["pin"]) == ("6", "9")
    assert [(led["role"], led["pin"], led["inverted"]) for led in ice["leds"]] == \
        [("activity", "11", True), ("error", "37", True)]
    crab = pins["orangecrab"]["uart"]            # the profile's own UART on feather pins 0/1
    assert crab["rx"] == {"pin": "N17", "connector": "io 0 pin 0", "inverted": False}
    assert crab["tx"]["pin"] == "M18"
    assert pins["ulx3s"]["uart"]["rx"]["pin"] == "M1"
    status, out, _ = run_main(capsys, "boards")
    assert "pins: UART rx 6, tx 9; LEDs activity 11 (active low), error 37 (active low)" in out


def test_closed_stdout_ends_quietly():
    """`lowbit boards --json | head`: the reader goes away, lowbit exits 0 without a word."""
    with subprocess.Popen([sys.executable, "-m", "lowbit.boards.cli", "boards", "--json"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as p:
        p.stdout.close()
        err = p.stderr.read()
        assert p.wait(timeout=120) == 0
    assert err == b""


def test_flash_without_bitstream(tmp_path):
    r = lowbit("flash", "--build-dir", str(tmp_path))
    assert r.returncode == 1
    assert f"no bitstream at {tmp_path}/lowbit.bin" in r.stderr
    assert "lowbit build --board icebreaker" in r.stderr


#: The opening of an icepack bitstream (comment block, sync word, first commands), then
#: padding: enough for the header check.
ICE40_BIN = b"\xff\x00\x00\xff\x7e\xaa\x99\x7e\x51\x00\x01\x05" + b"\x00" * 2048
#: The opening of an ecppack bitstream (metadata comment, preamble).
ECP5_BIT = b"\xff\x00Part: LFE5U-25F-6CABGA381\x00\xff\xff\xff\xbd\xb3" + b"\xff" * 2048


@pytest.mark.parametrize("board, name, data, expected", [
    ("icebreaker", "lowbit.bin", b"", "lowbit.bin is empty: not a bitstream"),
    ("icebreaker", "lowbit.bin", b"\x7e\xaa\x99\x7e", "lowbit.bin is only 4 bytes"),
    ("icebreaker", "lowbit.bin", b"garbage" * 500, "lowbit.bin is not a bitstream (no iCE40 "
     "header and sync word)"),
    ("icebreaker", "lowbit.bin", ECP5_BIT, "lowbit.bin is an ECP5 bitstream"),
    ("ulx3s", "lowbit.bit", ICE40_BIN, "lowbit.bit is an iCE40 bitstream"),
])
def test_flash_refuses_what_is_not_a_bitstream(capsys, tmp_path, board, name, data, expected):
    (tmp_path / name).write_bytes(data)
    status, _, err = run_main(capsys, "flash", "--board", board, "--build-dir", str(tmp_path))
    assert status == 1
    assert expected in err and len(err.strip().splitlines()) == 1


def test_flash_refuses_a_build_for_another_board(capsys, tmp_path):
    (tmp_path / "lowbit.bin").write_bytes(ICE40_BIN)
    report = {"board": "icebreaker-discrete", "bitstream": str(tmp_path / "lowbit.bin"),
              "bitstream_bytes": len(ICE40_BIN)}
    (tmp_path / "report.json").write_text(json.dumps(report))
    status, _, err = run_main(capsys, "flash", "--board", "icebreaker", "--build-dir",
                              str(tmp_path))
    assert status == 1
    assert "was built for board 'icebreaker-discrete'" in err and "not 'icebreaker'" in err
    report.update(board="icebreaker", bitstream_bytes=len(ICE40_BIN) + 1)
    (tmp_path / "report.json").write_text(json.dumps(report))
    status, _, err = run_main(capsys, "flash", "--board", "icebreaker", "--build-dir",
                              str(tmp_path))
    assert status == 1 and f"has {len(ICE40_BIN)} bytes but its build wrote" in err


def test_real_bitstreams_pass_the_check():
    """Builds in build/ (when there are any: `lowbit build`) pass the header check."""
    from pathlib import Path

    from lowbit.boards.build import check_bitstream
    from lowbit.boards.profiles import BOARDS
    from lowbit.boards.toolchain import DEVICES
    found = 0
    for name, profile in BOARDS.items():
        path = Path("build") / name / f"lowbit.{profile.bitstream}"
        if path.is_file():
            check_bitstream(path, DEVICES[profile.device]["family"])
            found += 1
    if not found:
        pytest.skip("no bitstream in build/ (run `lowbit build`)")


def test_flash_without_programmer(tmp_path, monkeypatch):
    (tmp_path / "lowbit.bin").write_bytes(ICE40_BIN)
    env_tool = "lowbit-no-such-programmer"
    r = subprocess.run([sys.executable, "-m", "lowbit.boards.cli", "flash",
                        "--build-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=60,
                       env={**__import__("os").environ, "ICEPROG": env_tool})
    assert r.returncode == 1
    assert f"programmer '{env_tool}' not found" in r.stderr


def _parses_in_iverilog(path, require_tool):
    require_tool(None if shutil.which("iverilog") else
                 "iverilog is not installed (apt-get install iverilog; .ci/run installs it)")
    r = subprocess.run(["iverilog", "-g2012", "-o", str(path.with_suffix(".vvp")), str(path)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# Slow: the quick suite parses the top (most of the blocks inside) in test_verilog_to_stdout.
@pytest.mark.slow
@pytest.mark.parametrize("block", list(BLOCKS))
def test_verilog_of_every_block_parses_in_iverilog(block, tmp_path, require_tool):
    out = tmp_path / f"{block}.v"
    r = lowbit("verilog", block, "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert f"module lowbit_{block}" in out.read_text()
    _parses_in_iverilog(out, require_tool)


def test_verilog_to_stdout(tmp_path, require_tool):
    """``lowbit verilog`` writes the top to stdout; Icarus parses it, and every ``always @*``
    block in it reads a signal (test_cocotb.py's scan)."""
    from test_cocotb import constant_only_processes
    r = lowbit("verilog")
    assert r.returncode == 0, r.stderr
    assert "module lowbit_top" in r.stdout
    assert constant_only_processes(r.stdout) == []
    out = tmp_path / "top.v"
    out.write_text(r.stdout)
    _parses_in_iverilog(out, require_tool)


def _report(lcs_used):
    return {"board": "icebreaker", "title": "iCEBreaker", "device": "up5k",
            "part": "iCE40UP5K-SG48", "seed": 1, "seconds": 1.0,
            "resources": {"lcs": {"used": lcs_used, "total": 5280},
                          "dsps": {"used": 2, "total": 8}},
            "fmax": {"clk": {"achieved": 20.0, "constraint": 18.0}},
            "bitstream": "build/icebreaker/lowbit.bin", "bitstream_bytes": 104090,
            "timing_report": "build/icebreaker/lowbit.tim"}


def test_build_report_names_the_timing_report_and_warns_when_nearly_full():
    from lowbit.boards.build import format_report
    text = format_report(_report(4000))
    assert "timing report: build/icebreaker/lowbit.tim" in text
    assert "warning" not in text
    assert "warning" not in format_report(_report(5015))           # 94.98 %
    last = format_report(_report(5016)).splitlines()[-1]            # 95.0 %
    assert last.startswith("warning: logic cells (LC) use is 95.0 % (>= 95 %)")


def test_readme_board_table_pins_match_the_platforms():
    """The README's pin columns are what `lowbit boards` reads from amaranth-boards, and its
    link column the profile's baud rate."""
    from pathlib import Path

    from lowbit.boards.cli import board_pins
    from lowbit.boards.profiles import BOARDS
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    rows = {}
    for line in readme.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[0].startswith("`"):
            rows[cells[0].split("`")[1]] = cells
    assert set(rows) == set(BOARDS)
    for name, profile in BOARDS.items():
        pins = board_pins(profile)
        link, uart, leds = rows[name][3], rows[name][4], rows[name][5]
        assert link.startswith(f"{profile.top['baud'] / 1e6:g} Mbaud"), name
        assert ("DDR" in link) == profile.top.get("uart_ddr", False), name
        assert uart.startswith(f"{pins['uart']['rx']['pin']} / {pins['uart']['tx']['pin']}"), name
        if pins["leds"]:
            assert leds.startswith(", ".join(led["pin"] for led in pins["leds"])), name
        else:
            assert leds.startswith("none"), name
