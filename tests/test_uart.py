"""8N1 UART receiver and transmitter in Amaranth's simulator."""

import random
from fractions import Fraction

import pytest
from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from lowbit.hw.registry import build_block
from lowbit.hw.uart import UART, UARTReceiver, UARTTransmitter, uart_divisor, uart_period
from lowbit.sim.rtl.harness import run_stream


@pytest.mark.parametrize("args, exc, msg", [
    ((12e6, True), TypeError, "Baud rate must be an integer"),
    ((12e6, 115200.0), TypeError, "Baud rate must be an integer"),
    ((12e6, 0), ValueError, "Baud rate must be a positive integer, not 0"),
    (("12e6", 9600), TypeError, "Clock frequency must be a number"),
    ((True, 9600), TypeError, "Clock frequency must be a number"),
    ((-1, 9600), ValueError, "Clock frequency must be positive"),
    ((12e6, 5_000_000), ValueError, "divisor 2.4 is below 3"),
    ((18e6, 8_000_000), ValueError, "divisor 2.25 is below 3 cycles per bit"),
    ((25e6, 12_000_000), ValueError, "too fast for a 25 MHz clock"),
    ((24e6, 12_000_000), ValueError, r"divisor 2 is below 3 cycles per bit \(2 with uart_ddr\)"),
])
def test_divisor_validation(args, exc, msg):
    with pytest.raises(exc, match=msg):
        uart_divisor(*args)


def test_ddr_divisor_validation():
    """With the receiver's two samples per cycle: down to 2 cycles per bit, whole cycles below
    3 (the transmitter's edges), fractions from 3 as before."""
    assert uart_period(24e6, 12_000_000, ddr=True) == 2
    assert uart_period(36e6, 12_000_000, ddr=True) == 3
    assert uart_period(30e6, 9_000_000, ddr=True) == Fraction(10, 3)
    with pytest.raises(ValueError, match="divisor 1.5 is below 2 cycles per bit$"):
        uart_period(18e6, 12_000_000, ddr=True)
    with pytest.raises(ValueError, match="below 3 cycles per bit must be whole cycles, not 2.5"):
        uart_period(30e6, 12_000_000, ddr=True)
    with pytest.raises(TypeError, match="ddr must be a bool, not 1"):
        UARTReceiver(2, ddr=1)
    with pytest.raises(TypeError, match="ddr must be a bool, not 'yes'"):
        UART(clk_freq=24e6, baud=12_000_000, ddr="yes")
    with pytest.raises(ValueError, match="Divisor must be whole cycles below 3 cycles per bit, "
                                         "not 5/2"):
        UARTReceiver(Fraction(5, 2), ddr=True)
    with pytest.raises(ValueError, match="Divisor must be at least 2 cycles per bit, not 3/2"):
        UARTReceiver(Fraction(3, 2), ddr=True)
    for dut in (UARTReceiver(2, ddr=True), UARTTransmitter(2),
                UART(clk_freq=24e6, baud=12_000_000, ddr=True)):
        dut._MustUse__silence = True
        assert dut.period == 2
    assert len(UARTReceiver(2, ddr=True).rx) == 2 and len(UARTReceiver(3).rx) == 1


@pytest.mark.parametrize("cls", [UARTReceiver, UARTTransmitter])
def test_component_divisor_validation(cls):
    with pytest.raises(TypeError, match="Divisor must be an integer or a fractions.Fraction, "
                                        "not 12.0"):
        cls(12.0)
    with pytest.raises(TypeError, match="Divisor must be an integer"):
        cls(True)
    if cls is UARTReceiver:
        with pytest.raises(ValueError, match="Divisor must be at least 3 cycles per bit, not 2"):
            cls(2)
    else:
        # The transmitter takes whole cycles down to 2 (12 Mbaud at 24 MHz).
        with pytest.raises(ValueError, match="Divisor must be at least 2 cycles per bit, not 1"):
            cls(1)
    with pytest.raises(ValueError, match="not 5/2"):
        cls(Fraction(5, 2))
    with pytest.raises(ValueError, match="denominator of at most 64, not 1001/100"):
        cls(Fraction(1001, 100))
    dut = cls(Fraction(25, 3))
    dut._MustUse__silence = True
    assert (dut.period, dut.divisor) == (Fraction(25, 3), 8)


def test_divisor_rounding():
    assert uart_divisor(12e6, 1_000_000) == 12
    assert uart_divisor(12_000_000, 115200) == 104            # 104.17
    assert uart_divisor(48e6, 1_000_000) == 48
    assert uart_divisor(12e6, 923_077) == 13                  # 12.9999...
    uart = build_block("uart", baud=2_000_000)
    uart._MustUse__silence = True
    assert (uart.divisor, uart.baud, uart.clk_freq) == (6, 2_000_000, 12e6)


def test_exact_periods():
    """The UART keeps clk_freq / baud exactly: the boards' rates."""
    assert uart_period(18e6, 3_000_000) == 6
    assert uart_period(18e6, 4_000_000) == Fraction(9, 2)
    assert uart_period(25e6, 3_000_000) == Fraction(25, 3)
    assert uart_period(48e6, 12_000_000) == 4
    assert uart_period(36e6, 12_000_000) == 3 and uart_period(36e6, 8_000_000) == Fraction(9, 2)
    assert uart_period(12e6, 115200) == Fraction(625, 6)
    assert uart_period(1e6 / 3, 9600).denominator <= 64
    uart = build_block("uart", clk_freq=25e6, baud=3_000_000)
    uart._MustUse__silence = True
    assert (uart.period, uart.divisor) == (Fraction(25, 3), 8)


class Loopback(wiring.Component):
    """A UART whose tx drives its own rx."""
    i: In(stream.Signature(8))
    o: Out(stream.Signature(8))

    def __init__(self, baud, clk_freq=12e6):
        self.uart = UART(clk_freq=clk_freq, baud=baud)
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        m.submodules.uart = self.uart
        m.d.comb += self.uart.rx.eq(self.uart.tx)
        wiring.connect(m, wiring.flipped(self.i), self.uart.i)
        wiring.connect(m, self.uart.o, wiring.flipped(self.o))
        return m


@pytest.mark.parametrize("baud", [3_000_000, 2_400_000, 1_000_000, 923_077])   # divisors 4,5,12,13
def test_loopback(baud):
    rng = random.Random(baud)
    data = [0x00, 0xFF, 0x55, 0xAA, 0x01, 0x80] + [rng.randrange(256) for _ in range(10)]
    dut = Loopback(baud)
    out = run_stream(dut, {"i": data}, {"o": len(data)}, valid_prob=0.7, ready_prob=0.9,
                     seed=baud, max_cycles=20 * 14 * len(data))
    assert out["o"] == data


# Periods 9/2, 25/3, 40/3, 65/3, 25 and the ULX3S's 80/3.
@pytest.mark.parametrize("clk, baud", [(18e6, 4_000_000), (25e6, 3_000_000),
                                       (40e6, 3_000_000), (65e6, 3_000_000),
                                       (75e6, 3_000_000), (80e6, 3_000_000)])
def test_loopback_fractional(clk, baud):
    rng = random.Random(baud)
    data = [0x00, 0xFF, 0x55, 0xAA] + [rng.randrange(256) for _ in range(8)]
    out = run_stream(Loopback(baud, clk), {"i": data}, {"o": len(data)}, valid_prob=1.0,
                     ready_prob=1.0, seed=1, max_cycles=round(1.5 * clk / baud * 10 * len(data)))
    assert out["o"] == data


def _levels(data, bit, stop_bits=None, phase=0.0):
    """Line levels per cycle for bytes ``data`` at a (fractional) bit period, back to back,
    the first edge ``phase`` cycles into the first cycle."""
    levels, t = [1] * 4, 4.0 + phase
    for k, byte in enumerate(data):
        stop = 1 if stop_bits is None else stop_bits[k]
        for lv in [0] + [byte >> j & 1 for j in range(8)] + [stop]:
            t += bit
            levels.extend([lv] * (int(t) - (len(levels))))
    return levels + [1] * 3 * int(bit)


def _ddr_levels(data, bit, stop_bits=None, phase=0.0):
    """Per cycle the receiver's ``rx`` with ``ddr`` (bit 0 the sample at ``c``, bit 1 at
    ``c + 1/2``) for bytes ``data`` back to back at a bit period of ``bit`` cycles, the first
    start edge at ``4 + phase`` cycles, every edge at its exact time."""
    edges, t = [], 4.0 + phase
    for k, byte in enumerate(data):
        stop = 1 if stop_bits is None else stop_bits[k]
        for lv in [0] + [byte >> j & 1 for j in range(8)] + [stop]:
            edges.append((t, lv))
            t += bit
    out, level, e = [], 1, 0
    for s in range(2 * int(t + 3 * bit + 1)):
        while e < len(edges) and edges[e][0] <= s / 2:
            level = edges[e][1]
            e += 1
        out.append(level)
    return [out[c] | out[c + 1] << 1 for c in range(0, len(out), 2)]


def _run_rx(levels, divisor=12, ready=True, ddr=False):
    """Feed ``levels`` to a receiver with bit period ``divisor``; returns (bytes, framing
    errors, overruns)."""
    dut = UARTReceiver(divisor, ddr=ddr)
    got, framing, overrun = [], [0], [0]

    async def bench(ctx):
        ctx.set(dut.o.ready, ready)
        for lv in levels:
            ctx.set(dut.rx, lv)
            _, _, valid, payload, fe, ov = await ctx.tick().sample(
                dut.o.valid, dut.o.payload, dut.framing_error, dut.overrun)
            if valid and ready:
                got.append(payload)
            framing[0] += fe
            overrun[0] += ov
        if not ready:
            got.append(ctx.get(dut.o.payload) if ctx.get(dut.o.valid) else None)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return got, framing[0], overrun[0]


@pytest.mark.parametrize("error", [-0.02, 0.0, 0.02])
def test_rx_baud_mismatch(error):
    """Divisor 12 (1 Mbaud at 12 MHz): a sender 2 % fast or slow, bytes back to back."""
    rng = random.Random(7)
    data = [0x00, 0xFF, 0x7F, 0xFE, 0x55] + [rng.randrange(256) for _ in range(15)]
    got, framing, overrun = _run_rx(_levels(data, 12 * (1 + error)))
    assert (got, framing, overrun) == (data, 0, 0)


# The boards' periods: 3 (12 Mbaud at 36 MHz), 4 (3 Mbaud at 12 MHz, 12 Mbaud at 48 MHz),
# 9/2 (4 Mbaud at 18 MHz), 25/3 (3 Mbaud at 25 MHz), 40/3 (3 Mbaud at 40 MHz, the ULX3S until
# session 25), 20 (3 Mbaud at 60 MHz, session 25's ULX3S), 65/3 (3 Mbaud at 65 MHz, session
# 26's ULX3S), 25 (3 Mbaud at 75 MHz, sessions 27-28's ULX3S), 80/3 (3 Mbaud at 80 MHz, the
# ULX3S).
PERIODS = [Fraction(3), Fraction(4), Fraction(9, 2), Fraction(25, 3), Fraction(40, 3),
           Fraction(20), Fraction(65, 3), Fraction(25), Fraction(80, 3)]


@pytest.mark.parametrize("period", [
    # The ULX3S's 80/3 and two other fractional periods, 65/3 and 40/3, in the quick suite
    # (both ways); the other periods with -m slow.
    p if p in (Fraction(80, 3), Fraction(65, 3), Fraction(40, 3))
    else pytest.param(p, marks=pytest.mark.slow)
    for p in PERIODS],
    ids=str)
@pytest.mark.parametrize("error", [-0.02, 0.02])
def test_rx_fast_rates_baud_mismatch(period, error):
    """At the fast rates a sender 2 % fast or slow, 24 bytes back to back with no idle gap,
    at several phases of the first edge within a cycle."""
    rng = random.Random(str(period) + str(error))
    data = [0x00, 0xFF, 0x7F, 0xFE, 0x55, 0xAA] + [rng.randrange(256) for _ in range(18)]
    for phase in (0.0, 0.3, 0.7):
        got = _run_rx(_levels(data, float(period) * (1 + error), phase=phase), period)
        assert got == (data, 0, 0), phase


@pytest.mark.parametrize("period", [Fraction(3), Fraction(9, 2)], ids=str)
@pytest.mark.parametrize("error", [-0.06, 0.06])
def test_rx_fails_beyond_its_tolerance(period, error):
    """A sender 6 % off is not received cleanly: the sweep above is not vacuous."""
    data = [0x00, 0xFF, 0x0F, 0xF0] * 3
    got = _run_rx(_levels(data, float(period) * (1 + error)), period)
    assert got != (data, 0, 0)


# With two samples a cycle (uart_ddr): 2 (12 Mbaud at 24 MHz, the iCEBreaker), 3, 25/3.
DDR_PERIODS = [Fraction(2), Fraction(3), Fraction(25, 3)]


@pytest.mark.parametrize("period", [
    # The iCEBreaker's 2 cycles per bit in the quick suite; the others with -m slow.
    p if p == 2 else pytest.param(p, marks=pytest.mark.slow) for p in DDR_PERIODS], ids=str)
@pytest.mark.parametrize("error", [-0.025, pytest.param(0.0, marks=pytest.mark.slow), 0.025])
def test_ddr_rx_baud_mismatch(period, error):
    """Two line samples a cycle: a sender 2.5 % fast or slow, 24 bytes back to back with no
    idle gap, the first edge at phases across both half cycles."""
    rng = random.Random(str(period) + str(error) + "ddr")
    data = [0x00, 0xFF, 0x7F, 0xFE, 0x55, 0xAA] + [rng.randrange(256) for _ in range(18)]
    for phase in (0.0, 0.2, 0.45, 0.5, 0.8):
        got = _run_rx(_ddr_levels(data, float(period) * (1 + error), phase=phase), period,
                      ddr=True)
        assert got == (data, 0, 0), phase


def test_ddr_rx_fast_sender_restarts_in_the_stop_bit_cycle():
    """A sender 4 % fast at 2 cycles per bit: a stop bit sampled in a cycle's first half whose
    second half is already low starts the next frame there, half a cycle earlier than the next
    cycle's look would (without that, bytes are lost at most phases)."""
    rng = random.Random(5)
    data = [0x00, 0xFF, 0x7F, 0xFE, 0x55, 0xAA] + [rng.randrange(256) for _ in range(18)]
    for phase in (0.0, 0.2, 0.45, 0.6, 0.95):
        got = _run_rx(_ddr_levels(data, 2 * (1 - 0.04), phase=phase), 2, ddr=True)
        assert got == (data, 0, 0), phase


@pytest.mark.parametrize("error", [-0.06, 0.06])
def test_ddr_rx_fails_beyond_its_tolerance(error):
    """At 2 cycles per bit a sender 6 % off is not received cleanly."""
    data = [0x00, 0xFF, 0x0F, 0xF0] * 3
    assert _run_rx(_ddr_levels(data, 2 * (1 + error)), 2, ddr=True) != (data, 0, 0)


def test_ddr_rx_framing_error_glitch_and_recovery():
    levels = _ddr_levels([0x3C, 0x81], 2.0, stop_bits=[1, 0]) + _ddr_levels([0x42], 2.0)
    assert _run_rx(levels, 2, ddr=True)[:2] == ([0x3C, 0x42], 1)
    # A low pulse shorter than half a bit is not a start bit.
    levels = [3] * 10 + [0b10, 0b01] + [3] * 20 + _ddr_levels([0x99], 2.0)
    assert _run_rx(levels, 2, ddr=True) == ([0x99], 0, 0)
    # A break is one framing error, then reception resumes.
    levels = [3] * 10 + [0] * 100 + [3] * 10 + _ddr_levels([0x5A], 2.0)
    assert _run_rx(levels, 2, ddr=True) == ([0x5A], 1, 0)


def test_rx_framing_error_glitch_and_recovery():
    # A byte with a low stop bit is dropped and flagged; once the line has been idle the next
    # byte arrives (back to back, the start bit after a low stop bit is ambiguous).
    levels = _levels([0x3C, 0x81], 12, stop_bits=[1, 0]) + _levels([0x42], 12)
    got, framing, _ = _run_rx(levels)
    assert (got, framing) == ([0x3C, 0x42], 1)
    # A low pulse shorter than half a bit is not a start bit.
    levels = [1] * 20 + [0] * 3 + [1] * 30 + _levels([0x99], 12)
    assert _run_rx(levels) == ([0x99], 0, 0)
    # A break (line low for many bit times) is one framing error, then reception resumes.
    levels = [1] * 10 + [0] * 300 + [1] * 30 + _levels([0x5A], 12)
    assert _run_rx(levels) == ([0x5A], 1, 0)


def test_rx_overrun():
    """With nobody reading, the first byte is held (stream rule) and later ones overrun."""
    got, framing, overrun = _run_rx(_levels([0x11, 0x22, 0x33], 12), ready=False)
    assert (got, framing, overrun) == ([0x11], 0, 2)


@pytest.mark.parametrize("period", [Fraction(12), Fraction(3), Fraction(9, 2), Fraction(25, 3),
                                    Fraction(2)],
                         ids=str)
@pytest.mark.parametrize("error", [-0.02, 0.02])
def test_tx_against_mismatched_receiver(error, period):
    """The transmitter's frames, back to back, decode at a receiver whose clock is 2 % off
    (an ideal mid-bit sampler; the fractional periods alternate bit lengths)."""
    rng = random.Random(3)
    data = [0x00, 0xFF] + [rng.randrange(256) for _ in range(10)]
    dut = UARTTransmitter(period)
    bit = float(period) * (1 + error)
    samples = [int((k + 0.5) * bit) for k in range(10)]
    got = []

    async def feeder(ctx):
        for byte in data:
            ctx.set(dut.i.payload, byte)
            ctx.set(dut.i.valid, 1)
            await ctx.tick().until(dut.i.ready)
        ctx.set(dut.i.valid, 0)

    async def receiver(ctx):
        line = []
        for _ in range(int(len(data) * 10 * period) + 100):
            _, _, tx = await ctx.tick().sample(dut.tx)
            line.append(tx)
        t = 0
        while t < len(line) and len(got) < len(data):
            if line[t]:
                t += 1
                continue
            bits = [line[t + s] for s in samples]
            assert bits[0] == 0 and bits[9] == 1, "framing error at the receiver"
            got.append(sum(b << k for k, b in enumerate(bits[1:9])))
            t += samples[9]     # resume looking for a start edge after the stop sample

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(feeder, background=True)
    sim.add_testbench(receiver)
    sim.run()
    assert got == data


@pytest.mark.parametrize("period", [Fraction(12), Fraction(3), Fraction(9, 2), Fraction(25, 3),
                                    Fraction(2)],
                         ids=str)
def test_tx_back_to_back_at_full_line_rate(period):
    """Bytes offered without a gap leave with no idle cycle: start edges exactly 10 periods
    apart (within a cycle each, exactly on average)."""
    dut = UARTTransmitter(period)
    n = 8
    edges = []

    async def bench(ctx):
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload, 0xFE)                 # start bit then a low bit 0: one edge
        prev, t = 1, 0
        while len(edges) < n:
            _, _, tx = await ctx.tick().sample(dut.tx)
            t += 1
            if prev and not tx:
                edges.append(t)
            prev = tx

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    gaps = [b - a for a, b in zip(edges, edges[1:], strict=False)]
    assert all(abs(g - 10 * period) < 1 for g in gaps), gaps
    assert edges[-1] - edges[0] == round(10 * period * (n - 1)) or \
        abs(edges[-1] - edges[0] - 10 * period * (n - 1)) < 1
