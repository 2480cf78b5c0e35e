"""Level 7 (DESIGN §6): the routed iCEBreaker netlist answers host frames exactly like the model.

``test_routed_icebreaker_netlist_answers_like_the_model`` (``slow``) builds the board with
nextpnr's routed netlist, simulates that netlist in Icarus Verilog with Yosys's iCE40 cell
models and a PLL stub, sends the host driver's frames on the UART rx pin at the profile's
baud rate (12 Mbaud through the pin's DDR register on the iCEBreaker) and checks
every reply decoded from tx against :class:`lowbit.sim.link.DeviceModel` byte for byte
(``tests/gatelevel.py``; ``docs/verification.md``, "Gate level"). The quick tests
check the host sequence and the comparison on the model alone.

Run: ``python -m pytest -m slow tests/test_gatelevel.py``.
"""

import dataclasses
import os
import sys

import pytest

from lowbit.boards.build import top_parameters
from lowbit.boards.profiles import get_board
from lowbit.sim.link import Status, decode_reply

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import buildreuse  # noqa: E402
import gatelevel  # noqa: E402


@pytest.fixture(scope="module")
def session():
    params = top_parameters(get_board(gatelevel.BOARD))[0]
    return gatelevel.host_session(params)


def test_host_session_covers_the_paths(session):
    """The sequence reaches every path the gate-level run is meant to check, and fits the
    simulator's budget (at most 100k cycles of traffic at the profile's clock and baud rate)."""
    transactions, results = session
    statuses = {decode_reply(t.reply)[0] for t in transactions if t.reply}
    assert statuses == {Status.OK, Status.BAD_CRC, Status.READ_ONLY}
    names = [t.name for t in transactions]
    assert names.count("identify") == 3                   # IDENTIFY, ID_MATRIX, ID_ENGINE
    assert [t.reply for t in transactions if t.name == "garbage between frames"] == [b""]
    assert results["read LINK_SKIPPED"] == 5 and results["read LINK_ERRORS"] == 2
    assert results["read MANT_WIDTH again"] == 7          # the bad frame wrote nothing
    run, = (t for t in transactions if t.is_run)
    assert decode_reply(run.reply)[0] == Status.OK
    # Every row of the MATVEC carries information: no mantissa rounds to (near) zero at the
    # tile's exponent, so a wrong accumulator bit in any lane has a chance to show.
    y = results["read the MATVEC result"]
    m = [((v & 0xFF) ^ 0x80) - 0x80 for v in y.tolist()]
    assert min(abs(v) for v in m) >= 16, m
    # The iCEBreaker has the LUT engine: the second MATVEC writes the first one's results
    # through the permutation table (F_LUT), with LUT_EXP in the high bytes.
    table = transactions[names.index("LUT_WRITE of a permutation")].request[6:-2]
    assert sorted(table) == list(range(256))
    assert results["read the F_LUT MATVEC result"].tolist() == \
        [table[v & 0xFF] | 0xFB << 8 for v in y.tolist()]
    # Its second sample (w7 = 1): another input, the same weights, bias and table.
    second = results["read its second sample"].tolist()
    assert {v >> 8 for v in second} == {0xFB} and second != results[
        "read the F_LUT MATVEC result"].tolist()
    line_bytes = sum(len(t.request) + len(t.reply) for t in transactions)
    profile = get_board(gatelevel.BOARD)
    assert line_bytes * 10 * profile.clk_freq / profile.top["baud"] < 100_000


def test_compare_finds_a_wrong_byte(session):
    """The comparison is byte exact: one flipped reply byte (or a missing one) is reported with
    its transaction; a RUN reply may differ in its cycles field only (the model says 0)."""
    transactions, _ = session
    replies = [t.reply for t in transactions]
    run_index = next(i for i, t in enumerate(transactions) if t.is_run)
    from lowbit.sim.link import encode_reply
    status, body = decode_reply(replies[run_index])
    replies[run_index] = encode_reply(status, body[:8] + (161).to_bytes(4, "little")
                                      + body[12:])
    good = gatelevel.GateResult(replies, [], 100, 1.0, 0.0)
    assert gatelevel.compare(transactions, good) == []
    assert gatelevel.run_cycles(transactions, good) == [161]
    for index, change in ((4, lambda r: r[:-1] + bytes([r[-1] ^ 1])), (9, lambda r: r[:-1]),
                          (run_index, lambda r: r[:5] + bytes([r[5] ^ 4]) + r[6:])):
        bad = list(replies)
        bad[index] = change(bad[index])
        problems = gatelevel.compare(transactions, dataclasses.replace(good, replies=bad))
        assert len(problems) == 1 and problems[0].startswith(f"#{index} "), problems
    problems = gatelevel.compare(transactions, dataclasses.replace(
        good, events=["X 120 x idle"]))
    assert problems == ["X 120 x idle"]
    # A reply that never completed stops the run: later transactions are not compared.
    cut = replies[:3] + [replies[3][:2]] + [b""] * (len(replies) - 4)
    problems = gatelevel.compare(transactions, dataclasses.replace(
        good, replies=cut, events=["#3 ...: stopped"], stopped=3))
    assert len(problems) == 2 and problems[1].startswith("#3 "), problems


@pytest.mark.slow
def test_routed_icebreaker_netlist_answers_like_the_model(tmp_path, require_tool,
                                                          reuse_finished_build):
    """Build, simulate the routed netlist, compare every reply with DeviceModel's."""
    reason = gatelevel.missing_tools()
    require_tool(reason and f"gate-level test cannot run: {reason}")
    # The netlist that goes on the board now: that of ``lowbit build`` (CI's first step, which
    # writes the routed netlist on the iCE40 boards) when it ran this very build plan, else
    # a build of its own.
    report = gatelevel.build_routed(tmp_path / "build")
    print("toolchain products:", buildreuse.describe(reuse_finished_build))
    outcome = gatelevel.check_routed(report["routed_netlist"], tmp_path / "sim")
    info, result = outcome.info, outcome.result
    profile = get_board(gatelevel.BOARD)
    assert info["pll_freq"] == profile.clk_freq and info["cells"]["ICESTORM_PLL"] == 1
    assert {"ICESTORM_DSP", "ICESTORM_SPRAM", "ICESTORM_RAM"} <= set(info["cells"])
    # uart_ddr: the rx pin's falling-edge flip-flop is in the netlist, and in the simulation.
    assert info["ddr_inputs"] == int(profile.top.get("uart_ddr", False))
    assert not outcome.problems, "\n".join(outcome.problems)
    assert len(result.replies) == len(outcome.transactions)
    # Stop-and-wait: the simulation lasted at least every request's and reply's line time.
    bits = 10 * sum(len(t.request) + len(t.reply) for t in outcome.transactions)
    assert result.cycles > bits * info["pll_freq"] / profile.top["baud"]
    assert len(outcome.run_cycles) == 1 and 0 < outcome.run_cycles[0] < 10_000
