"""Validation of the accelerator top's parameters, shared by the gateware and its model.

:class:`lowbit.hw.top.Accelerator` (the gateware) and :class:`lowbit.sim.link.DeviceModel` (its
byte-exact model, behind ``Accelerator.model()`` of the host driver) take the same parameters
and must accept exactly the same values: a model built with parameters the gateware refuses
would describe a device that cannot exist (e.g. ``scratch_bytes=100``, or ``frame_bytes=3``,
after which no MEM_WRITE fits a frame). Both call :func:`check_top_params`. Pure Python: the
golden models never import Amaranth.

Kinds are strict: integers are Python ``int`` (not ``bool``, not ``float``), switches are
``bool``. A wrong kind raises ``TypeError``, a value out of range ``ValueError``, with messages
like "Lane count must be an integer between 1 and 32, not 33" (``docs/protocol.md``, "Top ports
and parameters").
"""

import fractions
import numbers

__all__ = ["TOP_DEFAULTS", "SPRAM_BYTES", "MIN_DIVISOR", "MIN_DDR_DIVISOR", "MULTIPLIERS",
           "check_int",
           "check_bool", "check_pow2", "check_scratch_bytes", "check_grand_modes",
           "check_multiplier", "uart_period", "uart_divisor", "MAX_PERIOD_DENOMINATOR",
           "check_top_params"]

#: Bytes in one iCE40 UP5K SB_SPRAM256KA (16384 words of 16 bits).
SPRAM_BYTES = 32768
#: Smallest UART bit period in cycles (mid-bit sampling needs a few cycles per bit); the same
#: as :data:`lowbit.hw.uart.MIN_DIVISOR`.
MIN_DIVISOR = 3
#: Smallest bit period with the receiver sampling the line at both clock edges (``uart_ddr``):
#: four samples per bit. Below :data:`MIN_DIVISOR` the period must be whole cycles (the
#: transmitter's edges then have no jitter).
MIN_DDR_DIVISOR = 2
#: Largest denominator of a fractional UART bit period (:func:`uart_period`).
MAX_PERIOD_DENOMINATOR = 64
#: Multiplier styles of the BFP column (the keys of :data:`lowbit.hw.mult.MULT_STYLES`).
MULTIPLIERS = ("lut", "sb_mac16", "mult18x18d")

#: The parameters :func:`check_top_params` checks, with the defaults of
#: :class:`lowbit.hw.top.Accelerator` (``scratch_bytes=None``: 131072 with SPRAM, else 4096;
#: ``grand_modes=None``: every mode).
TOP_DEFAULTS = dict(clk_freq=12e6, baud=1_000_000, lanes=2, scratch_bytes=None, use_spram=False,
                    frame_bytes=512, timeout_bits=10_000, lut_tables=4, grand=True,
                    grand_modes=None, sequencer=False, matrix_lanes=8, block=16, max_blocks=16,
                    weight_depth=512, bfp=True, quantiser=True, discrete=True, code_bits=3,
                    multiplier="lut", uart=True, simulation=False, bfp_stochastic=True,
                    bfp_predictor=True, bfp_acc_block_ram=False, bfp_pipelined=True,
                    uart_ddr=False, bfp_pipelined_combiner=False, bfp_mant_width=True,
                    dsp_lanes=None, scratch_write_addr=None, drain_lanes=None,
                    matvec_x_buffer=None, seq_pipelined=False, matvec_bias_fifo=False,
                    seq_control=True)


def check_int(name, value, lo, hi):
    """``value`` if it is an integer in ``[lo, hi]`` (not a bool).

    Raises
    ------
    TypeError
        If ``value`` is not an integer.
    ValueError
        If it is out of range; the message reads "<name> must be an integer between lo and hi,
        not <value>".
    """
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer between {lo} and {hi}, not {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer between {lo} and {hi}, not {value}")
    return value


def check_bool(name, value):
    """``value`` if it is a bool; TypeError otherwise."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, not {value!r}")
    return value


def check_pow2(name, value, lo, hi):
    """``value`` if it is a power of two in ``[lo, hi]`` (:func:`check_int`, then ValueError)."""
    check_int(name, value, lo, hi)
    if value & (value - 1):
        raise ValueError(f"{name} must be a power of two between {lo} and {hi}, not {value}")
    return value


def check_multiplier(style):
    """``style`` if it is one of :data:`MULTIPLIERS`."""
    if not isinstance(style, str):
        raise TypeError(f"Multiplier style must be one of {', '.join(MULTIPLIERS)}, "
                        f"not {style!r}")
    if style not in MULTIPLIERS:
        raise ValueError(f"Multiplier style must be one of {', '.join(MULTIPLIERS)}, "
                         f"not {style!r}")
    return style


def check_grand_modes(modes):
    """``None`` (every mode) or the tuple of mode names of :data:`lowbit.sim.grand.MODES`."""
    from .grand import MODES
    if modes is None:
        return None
    if isinstance(modes, str) or not hasattr(modes, "__iter__"):
        raise TypeError(f"Grand modes must be an iterable of mode names, not {modes!r}")
    modes = tuple(modes)
    for mode in modes:
        if not isinstance(mode, str):
            raise TypeError(f"Grand modes must be mode names, not {mode!r}")
        if mode not in MODES:
            raise ValueError(f"Grand mode must be one of {', '.join(MODES)}, not {mode!r}")
    return modes


def check_scratch_bytes(size, use_spram):
    """``size`` if it is a scratchpad size the top can build: block RAM, a power of two from
    64 to 65536; SPRAM (``use_spram``), one to four banks of :data:`SPRAM_BYTES`."""
    if not isinstance(size, int) or isinstance(size, bool):
        raise TypeError(f"Scratchpad size must be an integer, not {size!r}")
    if use_spram:
        allowed = [SPRAM_BYTES * k for k in (1, 2, 3, 4)]
        if size not in allowed:
            raise ValueError(f"SPRAM scratchpad size must be one of {allowed}, not {size}")
    elif not (64 <= size <= 65536 and size & (size - 1) == 0):
        raise ValueError(f"Scratchpad size must be a power of two between 64 and 65536, "
                         f"not {size}")
    return size


def uart_period(clk_freq, baud, *, ddr=False):
    """UART bit period in clock cycles, ``clk_freq / baud`` as a :class:`fractions.Fraction`
    (denominator at most :data:`MAX_PERIOD_DENOMINATOR`), with argument validation.

    The UART times its bits with this exact ratio (a fractional bit period: e.g. 25/3 cycles
    for 3 Mbaud on a 25 MHz clock alternates bits of 8, 8 and 9 cycles), so any rate with at
    least :data:`MIN_DIVISOR` cycles per bit is made without a rounding error of the rate.
    With ``ddr`` (the receiver samples the line at both clock edges, ``uart_ddr``) the period
    may be as short as :data:`MIN_DDR_DIVISOR` cycles, a whole number of cycles below
    :data:`MIN_DIVISOR` (2 cycles per bit: 12 Mbaud at 24 MHz).

    Raises
    ------
    TypeError
        If ``clk_freq`` is not a real number or ``baud`` is not an integer (bools rejected).
    ValueError
        If either is not positive, or the period is below :data:`MIN_DIVISOR` cycles (with
        ``ddr``: below :data:`MIN_DDR_DIVISOR`, or fractional below :data:`MIN_DIVISOR`).
    """
    if not isinstance(clk_freq, numbers.Real) or isinstance(clk_freq, bool):
        raise TypeError(f"Clock frequency must be a number, not {clk_freq!r}")
    if not clk_freq > 0:
        raise ValueError(f"Clock frequency must be positive, not {clk_freq}")
    if not isinstance(baud, int) or isinstance(baud, bool):
        raise TypeError(f"Baud rate must be an integer, not {baud!r}")
    if baud <= 0:
        raise ValueError(f"Baud rate must be a positive integer, not {baud}")
    period = (fractions.Fraction(clk_freq).limit_denominator(1 << 20) / baud)
    period = period.limit_denominator(MAX_PERIOD_DENOMINATOR)
    least = MIN_DDR_DIVISOR if ddr else MIN_DIVISOR
    if period < least:
        raise ValueError(f"Baud rate {baud} is too fast for a {clk_freq / 1e6:g} MHz clock: "
                         f"divisor {float(period):g} is below {least} cycles per bit"
                         + ("" if ddr else f" ({MIN_DDR_DIVISOR} with uart_ddr)"))
    if period < MIN_DIVISOR and period.denominator != 1:
        raise ValueError(f"Baud rate {baud} at a {clk_freq / 1e6:g} MHz clock: a divisor below "
                         f"{MIN_DIVISOR} cycles per bit must be whole cycles, not "
                         f"{float(period):g}")
    return period


def uart_divisor(clk_freq, baud):
    """The UART bit period rounded to whole cycles, ``round(clk_freq / baud)`` (validated by
    :func:`uart_period`; the UART itself keeps the exact fraction). The inter-byte timeout
    counts ``timeout_bits`` periods of this many cycles."""
    return round(uart_period(clk_freq, baud))


def check_drain_lanes(drain_lanes, lanes, pipelined=True):
    """``drain_lanes`` if it is a power of two from 1 to ``lanes / 4`` that divides ``lanes``
    (only 1 without ``pipelined``).

    Raises
    ------
    TypeError
        If it is not an integer (bools rejected).
    ValueError
        If it is out of range: "Drain lane count must be a power of two between 1 and 4
        dividing the lane count 16, not 8".
    """
    hi = max(1, lanes // 4)
    msg = f"Drain lane count must be a power of two between 1 and {hi} dividing the lane " \
          f"count {lanes}, not {drain_lanes!r}"
    if not isinstance(drain_lanes, int) or isinstance(drain_lanes, bool):
        raise TypeError(msg)
    if (not 1 <= drain_lanes <= hi or drain_lanes & (drain_lanes - 1)
            or lanes % drain_lanes):
        raise ValueError(msg)
    if drain_lanes > 1 and not pipelined:
        raise ValueError(f"Drain lane count {drain_lanes} needs the pipelined column "
                         f"(pipelined=True)")
    return drain_lanes


def check_top_params(**params):
    """Check the top's parameters; returns them with the defaults of :data:`TOP_DEFAULTS`
    filled in, ``scratch_bytes`` resolved, ``grand_modes`` a tuple (or ``None``) and
    ``bit_period`` (the UART bit period in cycles, a Fraction) and ``divisor`` (it rounded)
    added.

    Checked in this order (the first bad parameter raises): ``uart_ddr``, ``clk_freq`` /
    ``baud``,
    ``lanes``, ``use_spram``, ``scratch_bytes``, ``frame_bytes``, ``timeout_bits``, ``uart``,
    ``simulation``, ``lut_tables``, ``grand``, ``grand_modes``, ``sequencer``,
    ``matrix_lanes``, ``block``, ``max_blocks``, ``weight_depth``, ``bfp``, ``quantiser``,
    ``discrete``, ``code_bits``, ``multiplier``, ``dsp_lanes``, ``bfp_stochastic``,
    ``bfp_predictor``, ``bfp_acc_block_ram``, ``bfp_pipelined``, ``bfp_pipelined_combiner``,
    ``bfp_mant_width``, ``drain_lanes`` (``None`` is resolved: ``matrix_lanes / block``, at
    least 1 and at most ``matrix_lanes / 4``, with ``bfp_pipelined``; else 1),
    ``matvec_x_buffer`` (``None`` is resolved: with the sequencer, the BFP column and a
    block-RAM scratchpad, and not with ``matvec_bias_fifo``), ``seq_pipelined``,
    ``matvec_bias_fifo`` (not with ``matvec_x_buffer``), ``seq_control``;
    then an odd ``matrix_lanes`` with the ``sb_mac16`` multiplier.

    Raises
    ------
    TypeError
        For an unknown parameter or a value of the wrong kind.
    ValueError
        For a value out of range.
    """
    unknown = set(params) - set(TOP_DEFAULTS)
    if unknown:
        raise TypeError(f"Unknown top parameters: {', '.join(sorted(unknown))}")
    p = {**TOP_DEFAULTS, **params}
    p["bit_period"] = uart_period(p["clk_freq"], p["baud"],
                                  ddr=check_bool("uart_ddr", p["uart_ddr"]))
    p["divisor"] = round(p["bit_period"])
    check_int("Lane count", p["lanes"], 1, 32)
    check_bool("use_spram", p["use_spram"])
    if p["scratch_bytes"] is None:
        p["scratch_bytes"] = 4 * SPRAM_BYTES if p["use_spram"] else 4096
    check_scratch_bytes(p["scratch_bytes"], p["use_spram"])
    check_int("Frame buffer size", p["frame_bytes"], 16, 4096)
    check_int("Timeout in bit times", p["timeout_bits"], 10, 1_000_000)
    check_bool("uart", p["uart"])
    check_bool("simulation", p["simulation"])
    check_int("LUT table count", p["lut_tables"], 0, 64)
    check_bool("grand", p["grand"])
    p["grand_modes"] = check_grand_modes(p["grand_modes"])
    check_bool("sequencer", p["sequencer"])
    check_pow2("Matrix lane count", p["matrix_lanes"], 4, 64)
    check_pow2("Block size", p["block"], 2, 256)
    check_int("Maximum block count", p["max_blocks"], 1, 256)
    check_pow2("Weight memory depth", p["weight_depth"], 16, 16384)
    for name in ("bfp", "quantiser", "discrete"):
        check_bool(name, p[name])
    check_int("Code width", p["code_bits"], 1, 3)
    check_multiplier(p["multiplier"])
    if p["dsp_lanes"] is not None:
        if not isinstance(p["dsp_lanes"], int) or isinstance(p["dsp_lanes"], bool):
            raise TypeError(f"DSP lane count must be None or an integer between 0 and "
                            f"{p['matrix_lanes']}, not {p['dsp_lanes']!r}")
        check_int("DSP lane count", p["dsp_lanes"], 0, p["matrix_lanes"])
    if p["scratch_write_addr"] is not None:
        check_bool("scratch_write_addr", p["scratch_write_addr"])
        if p["scratch_write_addr"] and p["use_spram"]:
            raise ValueError("scratch_write_addr needs the block-RAM scratchpad; the SPRAM has "
                             "one address")
    for name in ("bfp_stochastic", "bfp_predictor", "bfp_acc_block_ram", "bfp_pipelined",
                 "bfp_pipelined_combiner", "bfp_mant_width"):
        check_bool(name, p[name])
    if p["drain_lanes"] is None:
        p["drain_lanes"] = (min(max(1, p["matrix_lanes"] // p["block"]), p["matrix_lanes"] // 4)
                            if p["bfp_pipelined"] else 1)
    check_drain_lanes(p["drain_lanes"], p["matrix_lanes"], p["bfp_pipelined"])
    check_bool("matvec_bias_fifo", p["matvec_bias_fifo"])
    if p["matvec_x_buffer"] is None:
        p["matvec_x_buffer"] = (p["sequencer"] and p["bfp"] and not p["use_spram"]
                                and not p["matvec_bias_fifo"])
    check_bool("matvec_x_buffer", p["matvec_x_buffer"])
    if p["matvec_x_buffer"] and p["matvec_bias_fifo"]:
        raise ValueError("matvec_bias_fifo needs matvec_x_buffer off: with the x buffer the "
                         "bias words already overlap the later tiles")
    check_bool("seq_pipelined", p["seq_pipelined"])
    check_bool("seq_control", p["seq_control"])
    if p["sequencer"] and p["bfp"] and p["multiplier"] == "sb_mac16" and p["matrix_lanes"] % 2:
        raise ValueError("Matrix lane count must be even with sb_mac16")
    return p
