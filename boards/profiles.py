"""Supported boards and their device profiles (DESIGN §5).

A profile picks what of the accelerator goes on the device: lanes, scratchpad memory, the
multiplier style and the host-link baud rate (the fastest exact rate of the board's USB bridge
that the UART samples at the profile's clock: at least 3 cycles per bit, or 2 with the rx pin's
DDR register, ``uart_ddr``: :mod:`lowbit.hw.uart`).
Boards stay thin: all the gateware lives in :mod:`hw` and takes these values as parameters.
"""

from dataclasses import dataclass, field

__all__ = ["BoardProfile", "BOARDS", "DEFAULT_BOARD", "get_board"]


@dataclass(frozen=True)
class BoardProfile:
    """One supported board.

    Members
    -------
    name : str
        Command-line name (``lowbit build --board NAME``).
    title : str
        Human-readable board name.
    platform : str
        ``module:Class`` of the amaranth-boards platform.
    device : str
        Key of :data:`lowbit.boards.toolchain.DEVICES` (resource ceilings, out-of-context builds).
    clk_freq : float
        Frequency of the clock the accelerator runs from, Hz. Where it differs from the board
        oscillator's, the device's PLL makes it (:class:`lowbit.hw.clocking.PLLClock`), so it
        must be a frequency the PLL makes exactly.
    pll_pad : bool
        iCE40: the oscillator's pin is a PLL input pad (``SB_PLL40_PAD``); otherwise the PLL
        takes the buffered oscillator clock (``SB_PLL40_CORE``). Unused on ECP5.
    top : dict
        Keyword parameters of :class:`lowbit.hw.top.Accelerator` for this device, ``clk_freq``
        among them, always equal to the profile's ``clk_freq`` (filled in and kept in step by
        the constructor, so that the top, its model and the driver built from ``top`` alone
        time the UART as the board does).
    programmer : str
        The programming tool amaranth-boards runs for this board.
    programmer_env : str
        Environment variable that overrides the programmer's path.
    bitstream : str
        Extension of the file that is programmed (``bin`` for iCE40, ``bit`` for ECP5).
    uart : tuple, optional
        ``(rx_pin, tx_pin, connector)`` when the board has no UART resource of its own and one is
        added on header pins; ``None`` to use the board's ``uart`` resource.
    nextpnr_opts : tuple of str
        Extra nextpnr options of the board build (e.g. ``("--router", "router2")``).
    lut_mapping : ``"abc9"`` or ``"abc"``
        ECP5: how Yosys maps the LUTs, ``synth_ecp5``'s own abc9 (default) or the classic ABC
        in its ``map_luts`` step (as :func:`lowbit.boards.toolchain.implement`'s fallback), for
        netlists on which abc9 stops.
    floorplan : bool
        ECP5: place the BFP column's lanes, each lane's multiplier and weight bank in the same
        columns and each group of four lanes in one period of the hard-block rows
        (:mod:`lowbit.boards.floorplan`), instead of where nextpnr's placer puts them. Off on
        every board: measured on the ULX3S, it was slower (docs/sequencer.md, session 31).
    """
    name: str
    title: str
    platform: str
    device: str
    clk_freq: float
    top: dict = field(default_factory=dict)
    programmer: str = "iceprog"
    programmer_env: str = "ICEPROG"
    bitstream: str = "bin"
    uart: tuple | None = None
    pll_pad: bool = False
    notes: str = ""
    nextpnr_opts: tuple = ()
    lut_mapping: str = "abc9"
    floorplan: bool = False

    def __post_init__(self):
        if self.lut_mapping not in ("abc9", "abc"):
            raise ValueError(f"LUT mapping must be 'abc9' or 'abc', not {self.lut_mapping!r}")
        if not isinstance(self.floorplan, bool):
            raise TypeError(f"Floorplan must be a bool, not {self.floorplan!r}")
        object.__setattr__(self, "top", {**self.top, "clk_freq": self.clk_freq})

    def platform_class(self):
        """Import and return the amaranth-boards platform class."""
        import importlib
        module, cls = self.platform.split(":")
        return getattr(importlib.import_module(module), cls)


BOARDS = {
    "icebreaker": BoardProfile(
        name="icebreaker", title="1BitSquared iCEBreaker (iCE40UP5K-SG48)",
        platform="amaranth_boards.icebreaker:ICEBreakerPlatform", device="up5k", clk_freq=36e6,
        pll_pad=True,
        top=dict(lanes=1, multiplier="sb_mac16", use_spram=True, scratch_bytes=32768,
                 baud=12_000_000, uart_ddr=True, lut_tables=2, grand=False, sequencer=True,
                 matrix_lanes=16, block=16, max_blocks=4, weight_depth=256, bfp=True,
                 bfp_stochastic=False, bfp_predictor=False, bfp_acc_block_ram=True,
                 bfp_pipelined=False, bfp_pipelined_combiner=True, busy_count=True,
                 quantiser=False, discrete=False, code_bits=3, bfp_mant_width=False,
                 matvec_bias_fifo=True, seq_control=False),
        notes="8 SB_MAC16 DSPs, 4 SPRAM; 36 MHz from the PLL (SB_PLL40_PAD on the 12 MHz "
              "oscillator); UART over the FT2232H's second channel at 12 Mbaud, its fastest "
              "(3 cycles per bit; the rx pin's DDR input register samples the line at both "
              "clock edges, 6 samples per bit, uart_ddr). "
              "The link, the sequencer, the LUT engine and a 16-lane BFP column on all 8 "
              "SB_MAC16 (MATVEC, "
              "K <= 64, nearest / toward-zero rounding, max or fixed output exponent, output "
              "mantissas of 8 bits: a MATVEC with ROUNDING 2, EXP_SELECT 2 or MANT_WIDTH below "
              "8 fails with BAD_OPCODE); the input is quantised "
              "on the host; MATVEC's bias words pass through a bias memory that serves a "
              "MATVEC's later samples too (matvec_bias_fifo); RUN replies count the column's "
              "busy cycles. The sequencer runs straight-line programs (seq_control=False: no "
              "JUMP, LOOP, DJNZ, SETOFS, ADDOFS, MOVE or LUT instruction; a layer is one MATVEC "
              "of every sample, activations through F_LUT or LUT_APPLY; two activation "
              "tables, lut_tables=2). The "
              "discrete unit is on icebreaker-discrete (docs/sequencer.md)",
    ),
    "icebreaker-discrete": BoardProfile(
        name="icebreaker-discrete",
        title="1BitSquared iCEBreaker (iCE40UP5K-SG48), discrete unit",
        platform="amaranth_boards.icebreaker:ICEBreakerPlatform", device="up5k", clk_freq=12e6,
        top=dict(lanes=1, multiplier="sb_mac16", use_spram=True, scratch_bytes=32768,
                 baud=4_000_000, lut_tables=4, grand=False, sequencer=True, matrix_lanes=4,
                 weight_depth=1024, bfp=False, quantiser=False, discrete=True, code_bits=3),
        notes="the iCEBreaker with the discrete unit (DMATVEC, N = 4) in place of the BFP "
              "column: the link, the sequencer, the LUT engine and the discrete unit "
              "(docs/sequencer.md); 4 Mbaud (12 MHz / 3 cycles per bit)",
    ),
    "hx8k": BoardProfile(
        name="hx8k", title="Lattice iCE40-HX8K Breakout (iCE40HX8K-CT256)",
        platform="amaranth_boards.ice40_hx8k_b_evn:ICE40HX8KBEVNPlatform", device="hx8k",
        clk_freq=12e6,
        top=dict(lanes=1, multiplier="lut", use_spram=False, scratch_bytes=4096,
                 baud=4_000_000, lut_tables=4, grand=True, grand_modes=(), sequencer=True,
                 matrix_lanes=4, weight_depth=1024, bfp=False, quantiser=False, discrete=True,
                 code_bits=3),
        notes="no DSPs and no SPRAM: scratchpad in EBR; the sequencer with the discrete unit, "
              "the LUT engine and a one-lane normal-only grand unit (the BFP column and the "
              "quantiser do not fit beside them, docs/sequencer.md); UART over the FT2232H at "
              "4 Mbaud (12 MHz / 3 cycles per bit)",
    ),
    "ulx3s": BoardProfile(
        name="ulx3s", title="Radiona ULX3S (ECP5 LFE5U-85F)",
        platform="amaranth_boards.ulx3s:ULX3S_85F_Platform", device="ecp5-85f", clk_freq=80e6,
        top=dict(lanes=8, multiplier="mult18x18d", use_spram=False, scratch_bytes=65536,
                 baud=3_000_000, sequencer=True, matrix_lanes=64, block=16, max_blocks=16,
                 weight_depth=1024, bfp=True, quantiser=True, discrete=True, code_bits=3,
                 scratch_write_addr=False, seq_pipelined=True),
        programmer="openFPGALoader", programmer_env="OPENFPGALOADER", bitstream="bit",
        notes="156 MULT18X18D, 208 DP16KD: a 64-lane BFP column (its drain four lanes a "
              "cycle, drain_lanes), MATVEC's x buffer and the sequencer's register stages "
              "(seq_pipelined; with them the scratchpad's and the register file's block RAMs "
              "read through registers beside them); 80 MHz from the PLL (EHXPLLL on the 25 MHz "
              "oscillator); UART over the FT231X at 3 Mbaud, its fastest (80/3 cycles per "
              "bit). The scratchpad keeps one address (scratch_write_addr=False). Yosys "
              "0.70's abc9 stops on this "
              "top, so its LUTs are mapped by the classic ABC (lut_mapping); nextpnr-ecp5 "
              "routes it with router1 (nextpnr_opts), whose routes of the same placements are "
              "faster than router2's (docs/sequencer.md, session 31)",
        nextpnr_opts=("--router", "router1"), lut_mapping="abc",
    ),
    "orangecrab": BoardProfile(
        name="orangecrab", title="Good Stuff Department OrangeCrab r0.2 (ECP5 LFE5U-25F)",
        platform="amaranth_boards.orangecrab_r0_2:OrangeCrabR0_2_25FPlatform",
        device="ecp5-25f", clk_freq=48e6,
        top=dict(lanes=4, multiplier="mult18x18d", dsp_lanes=27, use_spram=False,
                 scratch_bytes=16384, baud=3_000_000, sequencer=True, matrix_lanes=32, block=16,
                 max_blocks=16, weight_depth=512, bfp=True, quantiser=True, discrete=True,
                 code_bits=3),
        programmer="dfu-util", programmer_env="DFU_UTIL", bitstream="bit",
        uart=("0", "1", ("io", 0)),
        notes="28 MULT18X18D: a 32-lane BFP column, 27 lanes on them (one is the "
              "quantiser's) and 5 LUT-logic multipliers (dsp_lanes), its drain two lanes a "
              "cycle (drain_lanes); 56 DP16KD. "
              "No on-board UART: connect a 3.3 V USB-serial adapter to feather pins 0 (RX) "
              "and 1 (TX); 3 Mbaud suits an FTDI FT232R / FT231X adapter (an FT232H one "
              "takes 12 Mbaud at 48 MHz, a CP2102 --baud 921600)",
    ),
}

DEFAULT_BOARD = "icebreaker"


def get_board(name):
    """Return the profile of board ``name``.

    Raises
    ------
    ValueError
        If the board is not supported; the message lists the supported boards.
    """
    if not isinstance(name, str) or name not in BOARDS:
        raise ValueError(f"Unknown board {name!r}; supported boards: {', '.join(BOARDS)}")
    return BOARDS[name]
