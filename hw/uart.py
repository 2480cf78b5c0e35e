"""8N1 asynchronous serial receiver and transmitter with stream ports.

One start bit (0), eight data bits LSB first, one stop bit (1); the line idles high. The bit
period is ``clk_freq / baud`` clock cycles, kept as an exact fraction ``p/q``
(:func:`uart_period`): 9/2 cycles for 4 Mbaud at 18 MHz (bits of 4 and 5 cycles), 25/3 for
3 Mbaud at 25 MHz (8, 8 and 9), 3 for 12 Mbaud at 36 MHz. Both directions time their bits with
a counter in fractions of a cycle, so the average rate is exact and every bit edge or sample
point is within half a cycle of its ideal time. At least :data:`MIN_DIVISOR` (3) cycles per
bit: the receiver samples each bit at the middle of the window in which a sample is right,
which at 3 cycles per bit still tolerates a sender 3 % off (:class:`UARTReceiver`).
"""

import fractions
import functools

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from lowbit.sim.topparams import (
    MAX_PERIOD_DENOMINATOR,
    MIN_DDR_DIVISOR,
    MIN_DIVISOR,
    uart_divisor,
    uart_period,
)

__all__ = ["UARTReceiver", "UARTTransmitter", "UART", "uart_period", "uart_divisor",
           "MIN_DIVISOR", "MIN_DDR_DIVISOR"]


def quiet_on_error(init):
    """Decorate a component's ``__init__`` so that a constructor that raises (argument
    validation) does not also leave an "elaboratable created but never used" warning behind.
    """
    @functools.wraps(init)
    def wrapper(self, *args, **kwargs):
        try:
            init(self, *args, **kwargs)
        except Exception:
            self._MustUse__silence = True
            raise
    return wrapper


def _check_divisor(divisor, least=MIN_DIVISOR):
    """The bit period ``divisor`` (an int, or a :class:`fractions.Fraction` with a denominator
    of at most :data:`MAX_PERIOD_DENOMINATOR`; at least ``least`` cycles, whole cycles below
    :data:`MIN_DIVISOR`) as a Fraction."""
    if isinstance(divisor, bool) or not isinstance(divisor, (int, fractions.Fraction)):
        raise TypeError(f"Divisor must be an integer or a fractions.Fraction, not {divisor!r}")
    if divisor < least:
        raise ValueError(f"Divisor must be at least {least} cycles per bit, not {divisor}")
    if divisor < MIN_DIVISOR and fractions.Fraction(divisor).denominator != 1:
        raise ValueError(f"Divisor must be whole cycles below {MIN_DIVISOR} cycles per bit, "
                         f"not {divisor}")
    divisor = fractions.Fraction(divisor)
    if divisor.denominator > MAX_PERIOD_DENOMINATOR:
        raise ValueError(f"Divisor must have a denominator of at most "
                         f"{MAX_PERIOD_DENOMINATOR}, not {divisor}")
    return divisor


class _Period:
    """Common members of the receiver and the transmitter."""

    @property
    def period(self):
        """Bit period in cycles (:class:`fractions.Fraction`)."""
        return self._period

    @property
    def divisor(self):
        """Bit period rounded to whole cycles."""
        return round(self._period)


class UARTReceiver(_Period, wiring.Component):
    """8N1 receiver with start-bit validation and mid-bit sampling.

    The line passes through a two-flip-flop synchroniser. A falling edge starts a frame; the
    start bit is sampled again in its middle and a line that is high again there is a glitch,
    ignored. Data bits are sampled in their middles, LSB first. A low stop bit is a framing
    error: the byte is dropped, ``framing_error`` pulses and the receiver waits for the line to
    return high (so a break is one error, not many). A byte that completes while the previous
    one is still waiting on ``o`` is dropped and ``overrun`` pulses. The receiver is ready for
    the next start bit right after the middle of the stop bit, which tolerates a sender up to
    a few percent faster.

    Sample points: bit ``k`` (0 the start bit, 9 the stop bit) is sampled at the cycle nearest
    to ``(P - 1)/2 + k·P`` cycles after the cycle in which the start edge was seen, ``P`` the
    period. The edge lies in the cycle before it was seen, so this is the middle of the window
    in which a sample is right whatever the edge's phase (``P - 1`` cycles wide). A sender
    whose bits are ``P·(1 + e)`` long is received while ``9·P·e <= (P - 1)/2 + r`` (slow) and
    ``10·P·|e| <= (P - 1)/2 - r`` (fast; the stop bit's sample must come before the next start
    edge), ``r`` the rounding of the sample point to a cycle (``|r| <= 1/2``, ties early).
    Measured in simulation (``tests/test_uart.py``, bytes back to back, edges at five phases
    within a cycle): ±3 % at 3 and 4 cycles per bit, ±3.5 % at 9/2 and 6, ±4 % at 25/3.

    With ``ddr`` the line is sampled twice a cycle, at the rising and at the falling clock edge
    (a DDR input register at the pin, e.g. :class:`amaranth.lib.io.DDRBuffer`, whose two
    flip-flops replace the synchroniser's first stage): ``rx`` carries both samples of a cycle,
    ``rx[0]`` the earlier. Everything above then holds in half cycles ("slots"): the edge is
    located to a slot, bit ``k`` is sampled in the slot nearest to ``(S - 1)/2 + k·S`` slots
    after the slot in which it was seen (``S = 2·P`` slots a bit; ties late), so the receiver
    takes 12 Mbaud at 24 MHz, two cycles per bit, with about the margins of four cycles per
    bit without a DDR register (measured at 2 cycles per bit, bytes back to back: a sender up
    to 4.5 % fast or 2.5 % slow). A stop bit sampled in a cycle's first slot whose second slot
    is already low starts the next frame at that slot (without it a sender 4 % fast loses
    bytes). At least :data:`MIN_DDR_DIVISOR` cycles per bit.

    Parameters
    ----------
    divisor : int or fractions.Fraction
        Bit period in clock cycles, at least :data:`MIN_DIVISOR` (a fraction: the exact
        ``clk_freq / baud`` of :func:`uart_period`); with ``ddr`` at least
        :data:`MIN_DDR_DIVISOR`, whole cycles below :data:`MIN_DIVISOR`.
    ddr : bool
        Two line samples per cycle (default ``False``).

    Members
    -------
    rx : In(1), or In(2) with ``ddr``
        Serial input (idle high); with ``ddr`` the cycle's two samples, ``rx[0]`` first.
    o : Out(stream.Signature(8))
        Received bytes.
    framing_error, overrun : Out(1)
        One-cycle pulses.

    Raises
    ------
    TypeError
        If ``divisor`` is not an int or Fraction, or ``ddr`` not a bool.
    ValueError
        If ``divisor`` is too short (see above) or its denominator exceeds
        :data:`MAX_PERIOD_DENOMINATOR`.
    """

    @quiet_on_error
    def __init__(self, divisor=12, *, ddr=False):
        if not isinstance(ddr, bool):
            raise TypeError(f"ddr must be a bool, not {ddr!r}")
        self._ddr = ddr
        self._period = _check_divisor(divisor, MIN_DDR_DIVISOR if ddr else MIN_DIVISOR)
        super().__init__({
            "rx": In(2 if ddr else 1, init=3 if ddr else 1),
            "o": Out(stream.Signature(8)),
            "framing_error": Out(1),
            "overrun": Out(1),
        })

    @property
    def ddr(self):
        """Two line samples per cycle."""
        return self._ddr

    def elaborate(self, platform):
        m = Module()
        # Slots per cycle: one line sample each.
        n = 2 if self._ddr else 1
        period = self._period * n
        p, q = period.numerator, period.denominator
        line = Signal(n, init=(1 << n) - 1)
        if self._ddr:
            m.d.sync += line.eq(self.rx)
        else:
            sync1 = Signal(init=1)
            m.d.sync += [sync1.eq(self.rx), line.eq(sync1)]

        # Time from this cycle's first slot to the next sample point in units of 1/(2q) slot,
        # plus half a slot (q units): the sample is taken in the first slot ``j`` of the cycle
        # for which ``count - 2q·j`` is at most one slot (2q units), i.e. in the slot nearest
        # to the ideal point. One bit is 2p units; at least 4 slots a bit with ``ddr`` (3
        # without), so a cycle holds at most one sample point and ``count`` stays in [0, 2p].
        count = Signal(range(2 * p + 1))
        hits = [Signal(name=f"hit{j}") for j in range(n)]
        for j, hit in enumerate(hits):
            m.d.comb += hit.eq((count <= 2 * q * (j + 1)) if j == 0 else
                               (count <= 2 * q * (j + 1)) & ~hits[j - 1])
        sample = Signal()
        value = Signal()
        m.d.comb += [sample.eq(Cat(*hits).any()),
                     value.eq(Mux(hits[0], line[0], line[n - 1]))]
        bits = Signal(range(9))
        shreg = Signal(8)

        with m.If(self.o.valid & self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        m.d.sync += [self.framing_error.eq(0), self.overrun.eq(0)]

        def start(slot):
            # First sample (S - 1)/2 slots after ``slot`` of this cycle: (p - q) units plus the
            # half slot, counted from the next cycle's first slot.
            m.d.sync += count.eq(p + 2 * q * (slot - n))

        def tick():
            """In START / DATA / STOP: count down; returns the sample condition."""
            m.d.sync += count.eq(count - 2 * q * n + Mux(sample, 2 * p, 0))
            return sample

        with m.FSM():
            with m.State("IDLE"):
                with m.If(~line[0]):
                    start(0)
                    m.next = "START"
                if n == 2:
                    with m.Elif(~line[1]):
                        start(1)
                        m.next = "START"
            with m.State("START"):
                with m.If(tick()):
                    m.d.sync += bits.eq(0)
                    m.next = "DATA"
                    with m.If(value):
                        m.next = "IDLE"
            with m.State("DATA"):
                with m.If(tick()):
                    m.d.sync += [shreg.eq(Cat(shreg[1:], value)), bits.eq(bits + 1)]
                    with m.If(bits == 7):
                        m.next = "STOP"
            with m.State("STOP"):
                with m.If(tick()):
                    with m.If(value):
                        with m.If(self.o.valid & ~self.o.ready):
                            m.d.sync += self.overrun.eq(1)
                        with m.Else():
                            m.d.sync += [self.o.payload.eq(shreg), self.o.valid.eq(1)]
                        m.next = "IDLE"
                        if n == 2:
                            with m.If(hits[0] & ~line[1]):
                                start(1)
                                m.next = "START"
                    with m.Else():
                        m.d.sync += self.framing_error.eq(1)
                        m.next = "BREAK"
            with m.State("BREAK"):
                with m.If(line[n - 1]):
                    m.next = "IDLE"
        return m


class UARTTransmitter(_Period, wiring.Component):
    """8N1 transmitter.

    A byte accepted on ``i`` is sent as start bit, eight data bits LSB first and a stop bit,
    each one period long (a fractional period alternates bits of the two nearest whole cycle
    counts, every edge within a cycle of its ideal time). ``i.ready`` is high while the
    transmitter is idle and in the last cycle of a stop bit, so bytes offered in time go back
    to back with no idle cycle, ``10·P`` cycles apart on average: the full line rate. ``tx``
    is driven from a flip-flop.

    Parameters
    ----------
    divisor : int or fractions.Fraction
        Bit period in clock cycles, at least :data:`MIN_DDR_DIVISOR`, whole cycles below
        :data:`MIN_DIVISOR` (so that every edge is on time).

    Members
    -------
    i : In(stream.Signature(8))
        Bytes to send.
    tx : Out(1)
        Serial output (idle high).
    """

    @quiet_on_error
    def __init__(self, divisor=12):
        self._period = _check_divisor(divisor, MIN_DDR_DIVISOR)
        super().__init__({
            "i": In(stream.Signature(8)),
            "tx": Out(1, init=1),
        })

    def elaborate(self, platform):
        m = Module()
        p, q = self._period.numerator, self._period.denominator
        # Time left in the current bit in units of 1/q cycle; the bit ends in the cycle in
        # which less than one cycle is left. The remainder carries over, so the bit edges
        # follow the exact period.
        count = Signal(range(p))
        left = Signal(range(11))
        shreg = Signal(10, init=0x3FF)

        bit_end = Signal()
        m.d.comb += bit_end.eq(count < q)
        m.d.sync += self.tx.eq(shreg[0])
        # Ready while idle, and in the last cycle of a stop bit: the next start bit then
        # follows the stop bit without an idle cycle, and the period's remainder carries on.
        m.d.comb += self.i.ready.eq((left == 0) | ((left == 1) & bit_end))
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [shreg.eq(Cat(Const(0, 1), self.i.payload, Const(1, 1))),
                         left.eq(10), count.eq(Mux(left == 0, p - q, count + p - q))]
        with m.Elif(left != 0):
            with m.If(~bit_end):
                m.d.sync += count.eq(count - q)
            with m.Else():
                m.d.sync += [count.eq(count + p - q), left.eq(left - 1),
                             shreg.eq(Cat(shreg[1:], Const(1, 1)))]
        return m


class UART(_Period, wiring.Component):
    """8N1 UART: a :class:`UARTReceiver` and a :class:`UARTTransmitter` at one baud rate.

    Parameters
    ----------
    clk_freq : int or float
        Clock frequency in Hz (default 12 MHz).
    baud : int
        Baud rate (default 1 Mbaud). The bit period is ``clk_freq / baud`` cycles, exactly
        (:func:`uart_period`), at least :data:`MIN_DIVISOR` (with ``ddr``:
        :data:`MIN_DDR_DIVISOR`, whole cycles below :data:`MIN_DIVISOR`).
    ddr : bool
        The receiver takes two line samples per cycle (:class:`UARTReceiver`).

    Members
    -------
    rx : In(1), or In(2) with ``ddr``
        Serial input (with ``ddr`` the cycle's two samples, ``rx[0]`` first).
    tx : Out(1)
        Serial output.
    i : In(stream.Signature(8))
        Bytes to transmit.
    o : Out(stream.Signature(8))
        Bytes received.
    framing_error, overrun : Out(1)
        One-cycle pulses from the receiver.

    Raises
    ------
    TypeError, ValueError
        See :func:`uart_period`.
    """

    @quiet_on_error
    def __init__(self, *, clk_freq=12e6, baud=1_000_000, ddr=False):
        if not isinstance(ddr, bool):
            raise TypeError(f"ddr must be a bool, not {ddr!r}")
        self._period = uart_period(clk_freq, baud, ddr=ddr)
        self._clk_freq = clk_freq
        self._baud = baud
        self._ddr = ddr
        super().__init__({
            "rx": In(2 if ddr else 1, init=3 if ddr else 1),
            "tx": Out(1, init=1),
            "i": In(stream.Signature(8)),
            "o": Out(stream.Signature(8)),
            "framing_error": Out(1),
            "overrun": Out(1),
        })

    @property
    def clk_freq(self):
        return self._clk_freq

    @property
    def baud(self):
        return self._baud

    @property
    def ddr(self):
        return self._ddr

    def elaborate(self, platform):
        m = Module()
        m.submodules.rx = rx = UARTReceiver(self._period, ddr=self._ddr)
        m.submodules.tx = tx = UARTTransmitter(self._period)
        m.d.comb += [
            rx.rx.eq(self.rx),
            self.tx.eq(tx.tx),
            self.framing_error.eq(rx.framing_error),
            self.overrun.eq(rx.overrun),
        ]
        wiring.connect(m, wiring.flipped(self.i), tx.i)
        wiring.connect(m, rx.o, wiring.flipped(self.o))
        return m
