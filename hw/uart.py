"""8N1 asynchronous serial receiver and transmitter with stream ports.

One start bit (0), eight data bits LSB first, one stop bit (1); the line idles high. The bit
period is ``divisor`` clock cycles, ``divisor = round(clk_freq / baud)`` (12 for 1 Mbaud on a
12 MHz clock).
"""

import functools
import numbers

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["UARTReceiver", "UARTTransmitter", "UART", "uart_divisor", "MIN_DIVISOR"]

#: Smallest supported bit period in cycles: mid-bit sampling needs a few cycles per bit.
MIN_DIVISOR = 4


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


def _check_divisor(divisor):
    if not isinstance(divisor, int) or isinstance(divisor, bool):
        raise TypeError(f"Divisor must be an integer, not {divisor!r}")
    if divisor < MIN_DIVISOR:
        raise ValueError(f"Divisor must be an integer of at least {MIN_DIVISOR}, not {divisor}")
    return divisor


def uart_divisor(clk_freq, baud):
    """Bit period in cycles, ``round(clk_freq / baud)``, with argument validation.

    Raises
    ------
    TypeError
        If ``clk_freq`` is not a real number or ``baud`` is not an integer (bools rejected).
    ValueError
        If either is not positive, or the divisor is below :data:`MIN_DIVISOR`.
    """
    if not isinstance(clk_freq, numbers.Real) or isinstance(clk_freq, bool):
        raise TypeError(f"Clock frequency must be a number, not {clk_freq!r}")
    if not clk_freq > 0:
        raise ValueError(f"Clock frequency must be positive, not {clk_freq}")
    if not isinstance(baud, int) or isinstance(baud, bool):
        raise TypeError(f"Baud rate must be an integer, not {baud!r}")
    if baud <= 0:
        raise ValueError(f"Baud rate must be a positive integer, not {baud}")
    divisor = round(clk_freq / baud)
    if divisor < MIN_DIVISOR:
        raise ValueError(f"Baud rate {baud} is too fast for a {clk_freq / 1e6:g} MHz clock: "
                         f"divisor {divisor} is below {MIN_DIVISOR}")
    return divisor


class UARTReceiver(wiring.Component):
    """8N1 receiver with start-bit validation and mid-bit sampling.

    The line passes through a two-flip-flop synchroniser. A falling edge starts a frame; the
    start bit is sampled again in its middle and a line that is high again there is a glitch,
    ignored. Data bits are sampled in their middles, LSB first. A low stop bit is a framing
    error: the byte is dropped, ``framing_error`` pulses and the receiver waits for the line to
    return high (so a break is one error, not many). A byte that completes while the previous
    one is still waiting on ``o`` is dropped and ``overrun`` pulses. The receiver is ready for
    the next start bit right after the middle of the stop bit, which tolerates a sender up to
    a few percent faster.

    Parameters
    ----------
    divisor : int
        Bit period in clock cycles, at least :data:`MIN_DIVISOR`.

    Members
    -------
    rx : In(1)
        Serial input (idle high).
    o : Out(stream.Signature(8))
        Received bytes.
    framing_error, overrun : Out(1)
        One-cycle pulses.
    """

    @quiet_on_error
    def __init__(self, divisor=12):
        self._divisor = _check_divisor(divisor)
        super().__init__({
            "rx": In(1, init=1),
            "o": Out(stream.Signature(8)),
            "framing_error": Out(1),
            "overrun": Out(1),
        })

    @property
    def divisor(self):
        return self._divisor

    def elaborate(self, platform):
        m = Module()
        d = self._divisor
        sync1 = Signal(init=1)
        line = Signal(init=1)
        m.d.sync += [sync1.eq(self.rx), line.eq(sync1)]

        count = Signal(range(d))
        bits = Signal(range(9))
        shreg = Signal(8)

        with m.If(self.o.valid & self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        m.d.sync += [self.framing_error.eq(0), self.overrun.eq(0)]

        with m.FSM():
            with m.State("IDLE"):
                with m.If(~line):
                    # Two cycles of synchroniser delay plus half a cycle of edge uncertainty.
                    m.d.sync += count.eq((d - 3) // 2)
                    m.next = "START"
            with m.State("START"):
                with m.If(count != 0):
                    m.d.sync += count.eq(count - 1)
                with m.Elif(line):
                    m.next = "IDLE"
                with m.Else():
                    m.d.sync += [count.eq(d - 1), bits.eq(0)]
                    m.next = "DATA"
            with m.State("DATA"):
                with m.If(count != 0):
                    m.d.sync += count.eq(count - 1)
                with m.Else():
                    m.d.sync += [count.eq(d - 1), shreg.eq(Cat(shreg[1:], line)),
                                 bits.eq(bits + 1)]
                    with m.If(bits == 7):
                        m.next = "STOP"
            with m.State("STOP"):
                with m.If(count != 0):
                    m.d.sync += count.eq(count - 1)
                with m.Elif(line):
                    with m.If(self.o.valid & ~self.o.ready):
                        m.d.sync += self.overrun.eq(1)
                    with m.Else():
                        m.d.sync += [self.o.payload.eq(shreg), self.o.valid.eq(1)]
                    m.next = "IDLE"
                with m.Else():
                    m.d.sync += self.framing_error.eq(1)
                    m.next = "BREAK"
            with m.State("BREAK"):
                with m.If(line):
                    m.next = "IDLE"
        return m


class UARTTransmitter(wiring.Component):
    """8N1 transmitter.

    A byte accepted on ``i`` is sent as start bit, eight data bits LSB first and a stop bit,
    each ``divisor`` cycles long; ``i.ready`` is high only while the transmitter is idle, so
    the next byte is accepted the cycle after the stop bit ends and bytes go back to back.
    ``tx`` is driven from a flip-flop.

    Parameters
    ----------
    divisor : int
        Bit period in clock cycles, at least :data:`MIN_DIVISOR`.

    Members
    -------
    i : In(stream.Signature(8))
        Bytes to send.
    tx : Out(1)
        Serial output (idle high).
    """

    @quiet_on_error
    def __init__(self, divisor=12):
        self._divisor = _check_divisor(divisor)
        super().__init__({
            "i": In(stream.Signature(8)),
            "tx": Out(1, init=1),
        })

    @property
    def divisor(self):
        return self._divisor

    def elaborate(self, platform):
        m = Module()
        d = self._divisor
        count = Signal(range(d))
        left = Signal(range(11))
        shreg = Signal(10, init=0x3FF)

        m.d.sync += self.tx.eq(shreg[0])
        m.d.comb += self.i.ready.eq(left == 0)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [shreg.eq(Cat(Const(0, 1), self.i.payload, Const(1, 1))),
                         left.eq(10), count.eq(d - 1)]
        with m.Elif(left != 0):
            with m.If(count != 0):
                m.d.sync += count.eq(count - 1)
            with m.Else():
                m.d.sync += [count.eq(d - 1), left.eq(left - 1),
                             shreg.eq(Cat(shreg[1:], Const(1, 1)))]
        return m


class UART(wiring.Component):
    """8N1 UART: a :class:`UARTReceiver` and a :class:`UARTTransmitter` at one baud rate.

    Parameters
    ----------
    clk_freq : int or float
        Clock frequency in Hz (default 12 MHz).
    baud : int
        Baud rate (default 1 Mbaud). The bit period is ``round(clk_freq / baud)`` cycles.

    Members
    -------
    rx : In(1)
        Serial input.
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
        See :func:`uart_divisor`.
    """

    @quiet_on_error
    def __init__(self, *, clk_freq=12e6, baud=1_000_000):
        self._divisor = uart_divisor(clk_freq, baud)
        self._clk_freq = clk_freq
        self._baud = baud
        super().__init__({
            "rx": In(1, init=1),
            "tx": Out(1, init=1),
            "i": In(stream.Signature(8)),
            "o": Out(stream.Signature(8)),
            "framing_error": Out(1),
            "overrun": Out(1),
        })

    @property
    def divisor(self):
        return self._divisor

    @property
    def clk_freq(self):
        return self._clk_freq

    @property
    def baud(self):
        return self._baud

    def elaborate(self, platform):
        m = Module()
        m.submodules.rx = rx = UARTReceiver(self._divisor)
        m.submodules.tx = tx = UARTTransmitter(self._divisor)
        m.d.comb += [
            rx.rx.eq(self.rx),
            self.tx.eq(tx.tx),
            self.framing_error.eq(rx.framing_error),
            self.overrun.eq(rx.overrun),
        ]
        wiring.connect(m, wiring.flipped(self.i), tx.i)
        wiring.connect(m, rx.o, wiring.flipped(self.o))
        return m
