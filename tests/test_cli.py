"""The ``lowbit`` command line, run as a user would: through a subprocess."""

import json
import shutil
import subprocess
import sys

import pytest

from lowbit.hw.registry import BLOCKS, available_blocks, parse_params


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


def test_unknown_block_names_the_known_ones():
    r = lowbit("verilog", "nosuch")
    assert r.returncode == 1
    assert r.stderr.startswith("lowbit: error: Unknown block 'nosuch'; known blocks: prng")
    assert len(r.stderr.strip().splitlines()) == 1


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


def test_bad_parameter_is_a_one_line_error():
    block = available_blocks()[0] if available_blocks() else "top"
    r = lowbit("verilog", block, "--param", "no_such_parameter=3")
    assert r.returncode == 1
    assert r.stderr.startswith("lowbit: error:")
    assert "no_such_parameter" in r.stderr
    r = lowbit("verilog", block, "--param", "oops")
    assert r.returncode == 1 and "key=value" in r.stderr


def test_flash_without_bitstream(tmp_path):
    r = lowbit("flash", "--build-dir", str(tmp_path))
    assert r.returncode == 1
    assert f"no bitstream at {tmp_path}/lowbit.bin" in r.stderr
    assert "lowbit build --board icebreaker" in r.stderr


def test_flash_without_programmer(tmp_path, monkeypatch):
    (tmp_path / "lowbit.bin").write_bytes(b"\0" * 16)
    env_tool = "lowbit-no-such-programmer"
    r = subprocess.run([sys.executable, "-m", "lowbit.boards.cli", "flash",
                        "--build-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=60,
                       env={**__import__("os").environ, "ICEPROG": env_tool})
    assert r.returncode == 1
    assert f"programmer '{env_tool}' not found" in r.stderr


@pytest.mark.parametrize("block", [b for b in BLOCKS])
def test_verilog_of_every_block_parses_in_iverilog(block, tmp_path):
    if block not in available_blocks():
        pytest.skip(f"block {block!r} is not implemented yet")
    out = tmp_path / f"{block}.v"
    r = lowbit("verilog", block, "-o", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert f"module lowbit_{block}" in text
    if shutil.which("iverilog") is None:
        pytest.skip("iverilog is not installed (.ci/run installs it)")
    r = subprocess.run(["iverilog", "-g2012", "-o", str(tmp_path / "a.out"), str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_verilog_to_stdout():
    if "top" not in available_blocks():
        pytest.skip("the top is not implemented yet")
    r = lowbit("verilog")
    assert r.returncode == 0, r.stderr
    assert "module lowbit_top" in r.stdout
