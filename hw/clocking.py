"""The design clock from the device's PLL: iCE40 ``SB_PLL40_*`` and ECP5 ``EHXPLLL``.

A board's oscillator is a reference, not a design clock (DESIGN §5): the top runs from a PLL
output near its Fmax. :func:`ice40_pll_config` and :func:`ecp5_pll_config` choose the dividers
(the searches of icestorm's ``icepll`` and prjtrellis' ``ecppll``, as pure functions), and
:class:`PLLClock` instantiates the primitive and drives a clock domain from it, held in reset
until the PLL reports lock.

The frequency a design is told (the UART's bit timing, the clock constraint) must be the one
the PLL makes, so the configurations return the achieved frequency, and :class:`PLLClock`
refuses a request it cannot meet within its tolerance.
"""

from dataclasses import dataclass

from amaranth.hdl import ClockSignal, Elaboratable, Instance, Module, ResetSignal, Signal
from amaranth.lib.cdc import AsyncFFSynchronizer, ResetSynchronizer

__all__ = ["ICE40PLLConfig", "ECP5PLLConfig", "ice40_pll_config", "ecp5_pll_config", "PLLClock"]


@dataclass(frozen=True)
class ICE40PLLConfig:
    """Dividers of an iCE40 PLL in ``SIMPLE`` feedback mode.

    ``f_out = f_in · (DIVF + 1) / ((DIVR + 1) · 2^DIVQ)``; the phase detector runs at
    ``f_in / (DIVR + 1)`` and the VCO at ``f_out · 2^DIVQ``.
    """
    f_in: float
    f_out: float
    divr: int
    divf: int
    divq: int
    filter_range: int

    @property
    def f_pfd(self):
        return self.f_in / (self.divr + 1)

    @property
    def f_vco(self):
        return self.f_pfd * (self.divf + 1)


@dataclass(frozen=True)
class ECP5PLLConfig:
    """Dividers of an ECP5 ``EHXPLLL`` with ``CLKOP`` feedback.

    ``f_out = f_in / CLKI_DIV · CLKFB_DIV``; the VCO runs at ``f_out · CLKOP_DIV``.
    """
    f_in: float
    f_out: float
    clki_div: int
    clkfb_div: int
    clkop_div: int

    @property
    def f_pfd(self):
        return self.f_in / self.clki_div

    @property
    def f_vco(self):
        return self.f_out * self.clkop_div


def _check_freq(what, value, lo, hi):
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{what} must be a frequency in Hz, not {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{what} must be between {lo / 1e6:g} and {hi / 1e6:g} MHz, "
                         f"not {value / 1e6:g} MHz")


def ice40_pll_config(f_in, f_out):
    """The iCE40 PLL dividers whose output is closest to ``f_out``.

    The search of ``icepll``: DIVR 0–15, DIVF 0–127, DIVQ 1–6, phase detector 10–133 MHz, VCO
    533–1066 MHz, output 16–275 MHz; among equally close outputs the first found (smallest DIVR)
    wins. ``FILTER_RANGE`` follows from the phase-detector frequency as in ``icepll``.

    Raises
    ------
    TypeError
        If a frequency is not a number.
    ValueError
        If ``f_in`` is outside 10–133 MHz or ``f_out`` outside 16–275 MHz.
    """
    _check_freq("PLL input frequency", f_in, 10e6, 133e6)
    _check_freq("PLL output frequency", f_out, 16e6, 275e6)
    best = None
    for divr in range(16):
        f_pfd = f_in / (divr + 1)
        if not 10e6 <= f_pfd <= 133e6:
            continue
        for divf in range(128):
            f_vco = f_pfd * (divf + 1)
            if not 533e6 <= f_vco <= 1066e6:
                continue
            for divq in range(1, 7):
                out = f_vco / (1 << divq)
                if best is None or abs(out - f_out) < abs(best[0] - f_out):
                    best = (out, divr, divf, divq)
    out, divr, divf, divq = best
    f_pfd = f_in / (divr + 1)
    filter_range = next(i for i, hi in enumerate((17e6, 26e6, 44e6, 66e6, 101e6, 1e12), 1)
                        if f_pfd < hi)
    return ICE40PLLConfig(f_in=f_in, f_out=out, divr=divr, divf=divf, divq=divq,
                          filter_range=filter_range)


def ecp5_pll_config(f_in, f_out):
    """The ECP5 ``EHXPLLL`` dividers whose ``CLKOP`` is closest to ``f_out``.

    The search of ``ecppll``: CLKI_DIV 1–128, CLKFB_DIV 1–80, CLKOP_DIV 1–128, phase detector
    3.125–400 MHz, VCO 400–800 MHz; among equally close outputs the first found wins.

    Raises
    ------
    TypeError
        If a frequency is not a number.
    ValueError
        If ``f_in`` is outside 8–400 MHz or ``f_out`` outside 3.125–400 MHz.
    """
    _check_freq("PLL input frequency", f_in, 8e6, 400e6)
    _check_freq("PLL output frequency", f_out, 3.125e6, 400e6)
    best = None
    for clki_div in range(1, 129):
        f_pfd = f_in / clki_div
        if not 3.125e6 <= f_pfd <= 400e6:
            continue
        for clkfb_div in range(1, 81):
            out = f_pfd * clkfb_div
            if best is not None and abs(out - f_out) >= abs(best[0] - f_out):
                continue
            for clkop_div in range(1, 129):
                if 400e6 <= out * clkop_div <= 800e6:
                    best = (out, clki_div, clkfb_div, clkop_div)
                    break
    out, clki_div, clkfb_div, clkop_div = best
    return ECP5PLLConfig(f_in=f_in, f_out=out, clki_div=clki_div, clkfb_div=clkfb_div,
                         clkop_div=clkop_div)


class PLLClock(Elaboratable):
    """Clock domain ``domain`` driven by the device's PLL from a board oscillator.

    The domain is defined by the caller (in a module that contains this one and every user of
    the domain); this drives the domain's clock and holds it in reset (through a
    :class:`~amaranth.lib.cdc.ResetSynchronizer`) until the PLL locks. On ECP5 the
    synchroniser's output reaches the domain's reset through a ``DCCA`` buffer, so that
    nextpnr routes the reset, which every flip-flop with a reset value loads, on one of the
    global networks (it promotes only clocks itself; in general routing this one net limited a
    large top's Fmax to 48 MHz).

    Parameters
    ----------
    family : ``"ice40"`` or ``"ecp5"``
        Device family: ``SB_PLL40_PAD`` / ``SB_PLL40_CORE`` or ``EHXPLLL``.
    f_in : float
        Oscillator frequency, Hz.
    f_out : float
        Requested domain frequency, Hz; the PLL must make it within ``tolerance``.
    clk_in : IOPort or Value
        With ``pad=True`` (iCE40 only) the oscillator's raw pin, wired straight to the PLL's
        ``PACKAGEPIN`` (the pin must be a PLL input pad); otherwise the buffered oscillator clock.
    pad : bool
        iCE40: ``SB_PLL40_PAD`` (input from the pad) instead of ``SB_PLL40_CORE``.
    domain : str
        Name of the clock domain driven.
    tolerance : float
        Largest relative difference between ``f_out`` and what the PLL makes.

    Members
    -------
    config : ICE40PLLConfig or ECP5PLLConfig
        The dividers; ``config.f_out`` is the domain's frequency.
    locked : Signal
        The PLL's lock output.

    Raises
    ------
    TypeError, ValueError
        Unknown family, out-of-range frequencies, or an output the PLL cannot make within
        ``tolerance`` (the message names the closest it can).
    """

    def __init__(self, family, f_in, f_out, clk_in, *, pad=False, domain="sync",
                 tolerance=1e-3):
        if family not in ("ice40", "ecp5"):
            raise ValueError(f"PLL family must be 'ice40' or 'ecp5', not {family!r}")
        if not isinstance(domain, str) or not domain:
            raise TypeError(f"Domain must be a non-empty string, not {domain!r}")
        if pad and family != "ice40":
            raise ValueError("A pad-fed PLL (pad=True) exists on iCE40 only")
        if not isinstance(tolerance, float) or not 0 <= tolerance < 0.1:
            raise ValueError(f"Tolerance must be a float between 0 and 0.1, not {tolerance!r}")
        config = (ice40_pll_config if family == "ice40" else ecp5_pll_config)(f_in, f_out)
        if abs(config.f_out - f_out) > tolerance * f_out:
            raise ValueError(f"The {family} PLL cannot make {f_out / 1e6:g} MHz from "
                             f"{f_in / 1e6:g} MHz; the closest it makes is "
                             f"{config.f_out / 1e6:.4f} MHz")
        self._family = family
        self._pad = bool(pad)
        self._domain = domain
        self._clk_in = clk_in
        self.config = config
        self.locked = Signal()

    @property
    def frequency(self):
        """The domain's frequency, Hz (what the PLL makes)."""
        return self.config.f_out

    def elaborate(self, platform):
        m = Module()
        clk = ClockSignal(self._domain)
        c = self.config
        if self._family == "ice40":
            common = dict(
                p_FEEDBACK_PATH="SIMPLE", p_DIVR=c.divr, p_DIVF=c.divf, p_DIVQ=c.divq,
                p_FILTER_RANGE=c.filter_range, p_PLLOUT_SELECT="GENCLK",
                i_RESETB=1, i_BYPASS=0, o_PLLOUTGLOBAL=clk, o_LOCK=self.locked)
            if self._pad:
                m.submodules.pll = Instance("SB_PLL40_PAD", i_PACKAGEPIN=self._clk_in, **common)
            else:
                m.submodules.pll = Instance("SB_PLL40_CORE", i_REFERENCECLK=self._clk_in,
                                            **common)
        else:
            m.submodules.pll = Instance(
                "EHXPLLL",
                p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
                p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA", p_OUTDIVIDER_MUXB="DIVB",
                p_OUTDIVIDER_MUXC="DIVC", p_OUTDIVIDER_MUXD="DIVD",
                p_CLKI_DIV=c.clki_div, p_CLKOP_ENABLE="ENABLED", p_CLKOP_DIV=c.clkop_div,
                p_CLKOP_CPHASE=c.clkop_div - 1, p_CLKOP_FPHASE=0,
                p_FEEDBK_PATH="CLKOP", p_CLKFB_DIV=c.clkfb_div,
                i_RST=0, i_STDBY=0, i_CLKI=self._clk_in, i_CLKFB=clk, o_CLKOP=clk,
                i_PHASESEL0=0, i_PHASESEL1=0, i_PHASEDIR=1, i_PHASESTEP=1,
                i_PHASELOADREG=1, i_PLLWAKESYNC=0, i_ENCLKOP=0, o_LOCK=self.locked,
                a_FREQUENCY_PIN_CLKI=f"{c.f_in / 1e6:.6f}",
                a_FREQUENCY_PIN_CLKOP=f"{c.f_out / 1e6:.6f}",
                a_ICP_CURRENT="12", a_LPF_RESISTOR="8", a_MFG_ENABLE_FILTEROPAMP="1",
                a_MFG_GMCREF_SEL="2")
        if self._family == "ice40":
            m.submodules.reset = ResetSynchronizer(~self.locked, domain=self._domain)
        else:
            rst_local = Signal()
            m.submodules.reset = AsyncFFSynchronizer(~self.locked, rst_local, o_domain=self._domain,
                                                     async_edge="pos")
            m.submodules.reset_buffer = Instance("DCCA", i_CLKI=rst_local, i_CE=1,
                                                 o_CLKO=ResetSignal(self._domain))
        return m
