"""lowbit.hw.clocking: PLL divider searches, the PLL component, and each board's PLL clock."""

import dataclasses

import pytest
from amaranth.back import rtlil
from amaranth.hdl import ClockDomain, Module, Signal

from lowbit.boards.build import BoardTop, _platform
from lowbit.boards.profiles import BOARDS
from lowbit.boards.toolchain import DEVICES
from lowbit.hw.clocking import PLLClock, ecp5_pll_config, ice40_pll_config


@pytest.mark.parametrize("f_out, divr, divf, divq, filter_range", [
    # icepll -i 12 -o F for each (what icestorm's tool prints).
    (18e6, 0, 47, 5, 1),
    (36e6, 0, 47, 4, 1),
    (48e6, 0, 63, 4, 1),
    (96e6, 0, 63, 3, 1),
])
def test_ice40_known_configurations(f_out, divr, divf, divq, filter_range):
    c = ice40_pll_config(12e6, f_out)
    assert (c.divr, c.divf, c.divq, c.filter_range) == (divr, divf, divq, filter_range)
    assert c.f_out == f_out


@pytest.mark.parametrize("f_in", [12e6, 25e6, 100e6])
@pytest.mark.parametrize("f_out", [16e6, 21e6, 33.3e6, 40e6, 59e6, 120e6, 275e6])
def test_ice40_configuration_obeys_the_pll_limits(f_in, f_out):
    c = ice40_pll_config(f_in, f_out)
    assert 10e6 <= c.f_pfd <= 133e6 and 533e6 <= c.f_vco <= 1066e6
    assert 0 <= c.divr <= 15 and 0 <= c.divf <= 127 and 1 <= c.divq <= 6
    assert c.f_out == pytest.approx(f_in * (c.divf + 1) / ((c.divr + 1) * 2 ** c.divq))
    # The PLL's frequency grid is never coarser than 1 % in this range.
    assert abs(c.f_out - f_out) / f_out < 0.01


@pytest.mark.parametrize("f_in, f_out, clki, clkfb, clkop", [
    (25e6, 100e6, 1, 4, 4),
    (25e6, 50e6, 1, 2, 8),
    (48e6, 60e6, 4, 5, 7),
])
def test_ecp5_known_configurations(f_in, f_out, clki, clkfb, clkop):
    c = ecp5_pll_config(f_in, f_out)
    assert (c.clki_div, c.clkfb_div, c.clkop_div) == (clki, clkfb, clkop)
    assert c.f_out == f_out


@pytest.mark.parametrize("f_out", [10e6, 33.3e6, 62.5e6, 101e6, 133e6, 200e6, 333e6])
def test_ecp5_configuration_obeys_the_pll_limits(f_out):
    c = ecp5_pll_config(25e6, f_out)
    assert 3.125e6 <= c.f_pfd <= 400e6 and 400e6 <= c.f_vco <= 800e6
    assert c.f_out == pytest.approx(25e6 / c.clki_div * c.clkfb_div)
    assert abs(c.f_out - f_out) / f_out < 0.01


@pytest.mark.parametrize("call, exc, match", [
    (lambda: ice40_pll_config("12", 18e6), TypeError, "PLL input frequency must be a frequency"),
    (lambda: ice40_pll_config(12e6, True), TypeError, "PLL output frequency must be"),
    (lambda: ice40_pll_config(5e6, 18e6), ValueError, "between 10 and 133 MHz, not 5 MHz"),
    (lambda: ice40_pll_config(12e6, 300e6), ValueError, "between 16 and 275 MHz, not 300 MHz"),
    (lambda: ecp5_pll_config(25e6, 1e6), ValueError, "between 3.125 and 400 MHz, not 1 MHz"),
    (lambda: PLLClock("xilinx", 12e6, 18e6, Signal()), ValueError, "'ice40' or 'ecp5'"),
    (lambda: PLLClock("ecp5", 25e6, 50e6, Signal(), pad=True), ValueError, "iCE40 only"),
    (lambda: PLLClock("ice40", 12e6, 40e6, Signal()), ValueError,
     "cannot make 40 MHz from 12 MHz; the closest it makes is 39.7500 MHz"),
    (lambda: PLLClock("ice40", 12e6, 18e6, Signal(), domain=""), TypeError, "Domain"),
    (lambda: PLLClock("ice40", 12e6, 18e6, Signal(), tolerance=1), ValueError, "Tolerance"),
])
def test_bad_arguments(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def _rtlil(pll):
    m = Module()
    m.domains.sync = ClockDomain("sync")
    m.submodules.pll = pll
    # Something in the domain, so that it is not empty.
    counter = Signal(4)
    m.d.sync += counter.eq(counter + 1)
    return rtlil.convert(m, ports=[counter, pll.locked])


def test_ice40_pll_instance():
    clk_in = Signal()
    text = _rtlil(PLLClock("ice40", 12e6, 18e6, clk_in))
    assert "cell \\SB_PLL40_CORE" in text
    for param, value in (("DIVR", 0), ("DIVF", 47), ("DIVQ", 5), ("FILTER_RANGE", 1)):
        assert f"parameter \\{param} {value}\n" in text, param
    assert 'parameter \\FEEDBACK_PATH "SIMPLE"' in text


def test_ecp5_pll_instance():
    text = _rtlil(PLLClock("ecp5", 25e6, 100e6, Signal()))
    assert "cell \\EHXPLLL" in text
    for param, value in (("CLKI_DIV", 1), ("CLKFB_DIV", 4), ("CLKOP_DIV", 4),
                         ("CLKOP_CPHASE", 3)):
        assert f"parameter \\{param} {value}\n" in text, param
    assert 'attribute \\FREQUENCY_PIN_CLKOP "100.000000"' in text


def test_ecp5_reset_goes_through_a_global_buffer():
    # ECP5: the synchroniser's output reaches the domain's reset through a DCCA (a global
    # network); iCE40 keeps the plain ResetSynchronizer.
    text = _rtlil(PLLClock("ecp5", 25e6, 100e6, Signal()))
    dcca = text.split("cell \\DCCA", 1)[1].split("end", 1)[0]
    assert "connect \\CLKI \\rst_local" in dcca and "connect \\CE 1'1" in dcca
    assert "connect \\CLKO \\rst" in dcca
    assert "cell \\DCCA" not in _rtlil(PLLClock("ice40", 12e6, 18e6, Signal()))


@pytest.mark.parametrize("board", list(BOARDS))
def test_every_board_clock_is_one_its_pll_makes(board):
    profile = BOARDS[board]
    osc = profile.platform_class()().default_clk_frequency
    if profile.clk_freq == osc:
        return
    config = (ice40_pll_config if DEVICES[profile.device]["family"] == "ice40"
              else ecp5_pll_config)(osc, profile.clk_freq)
    assert config.f_out == profile.clk_freq


def _plan(profile):
    """The build plan's RTLIL and constraints of ``profile`` with a small accelerator: the
    board's clock, PLL and UART settings (``clk_freq``, ``pll_pad``, ``baud``, ``uart_ddr``)
    as the profile has them, one lane, a 256-byte scratchpad and no engines. The clock
    network does not depend on the accelerator's size, and elaborating a board's whole top
    costs seconds (``test_boards.py`` builds each board's own top)."""
    small = {k: v for k, v in profile.top.items() if k in ("baud", "uart_ddr")}
    small.update(lanes=1, scratch_bytes=256, lut_tables=0, grand=False)
    profile = dataclasses.replace(profile, top=small)
    plan = _platform(profile).prepare(BoardTop(profile), name="t")
    text = {n: (f if isinstance(f, str) else f.decode()) for n, f in plan.files.items()
            if n.endswith((".il", ".pcf", ".lpf"))}
    return text


def test_icebreaker_runs_from_the_pll_on_the_oscillator_pad():
    profile = BOARDS["icebreaker"]
    assert profile.clk_freq > 12e6 and profile.pll_pad
    files = _plan(profile)
    assert "cell \\SB_PLL40_PAD \\pll" in files["t.il"]
    assert "connect \\PACKAGEPIN \\clk12_0__io [0]" in files["t.il"]
    # nextpnr derives the PLL output's constraint from the oscillator's; a constraint on an
    # internal net would name a net that synthesis renames (and nextpnr would drop it).
    constraints = [ln for ln in files["t.pcf"].splitlines() if ln.startswith("set_frequency")]
    assert constraints == [f"set_frequency clk12_0__io {12e6 / 1e6}"]


def test_board_at_its_oscillator_frequency_has_no_pll():
    # 6 Mbaud: 2 cycles per bit at 12 MHz (the profile's 12 Mbaud needs at least 24 MHz).
    ice = BOARDS["icebreaker"]
    profile = dataclasses.replace(ice, clk_freq=12e6, top={**ice.top, "baud": 6_000_000})
    assert profile.top["clk_freq"] == 12e6
    assert "SB_PLL40" not in _plan(profile)["t.il"]


def test_ecp5_board_with_a_pll():
    assert BOARDS["ulx3s"].clk_freq == 80e6          # its profile runs from the PLL
    profile = dataclasses.replace(BOARDS["ulx3s"], clk_freq=40e6)
    files = _plan(profile)
    assert "cell \\EHXPLLL \\pll" in files["t.il"]
    assert "FREQUENCY NET" not in files["t.lpf"]
    assert 'FREQUENCY PORT "clk25_0__io" 25000000.0 HZ;' in files["t.lpf"]
