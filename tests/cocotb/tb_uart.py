"""cocotb bench of ``lowbit_uart``: serial frames on ``rx`` -> ``o`` and ``i`` -> ``tx``.

Both directions run at once. The receive side gets the vectors as 8N1 frames on ``rx`` (each
bit ``period`` clock periods, exact even when fractional, start bits at arbitrary phase to the
clock) and must deliver them
on ``o`` in order, under random back-pressure, with the stream rules checked every cycle. The
transmit side gets the vectors on ``i`` with random valid gaps; an independent receiver decodes
``tx``. Then a frame with a low stop bit must pulse ``framing_error`` and deliver nothing.

With ``job["ddr"]`` (``UART(ddr=True)``: ``rx`` is 2 bits, the two samples of a cycle) the frames
go to a serial line kept in the bench, and :func:`ddr_pin` models the DDR input register at the
pin (an iCE40 SB_IO DDR input, Amaranth's ``io.DDRBuffer``): the line sampled at a rising edge
t0 and at the falling edge t0 + T/2 reaches ``rx[0]`` / ``rx[1]`` right after the rising edge
t0 + T.
"""

import cocotb
from benchlib import Sink, Source, bit_time_ns, cycle, load_job, read, rng_for, start, wait_ns
from cocotb.triggers import FallingEdge, RisingEdge, Timer
from tb_top import uart_monitor


class Line:
    """The serial line the host drives: written to ``rx`` directly, or, with ``ddr``, held here
    for :func:`ddr_pin` to sample."""

    def __init__(self, dut, ddr):
        self.dut, self.ddr = dut, ddr
        self.level = 1

    def set(self, level):
        self.level = level
        if not self.ddr:
            self.dut.rx.value = level


async def ddr_pin(dut, line):
    """The DDR input register at the pin: ``a`` the line at a rising edge, ``b`` at the next
    falling edge; both drive ``rx`` right after the following rising edge (``rx[0]`` = a)."""
    await RisingEdge(dut.clk)
    a = line.level
    while True:
        await FallingEdge(dut.clk)
        b = line.level
        await RisingEdge(dut.clk)
        dut.rx.value = a | b << 1
        a = line.level


async def send_frames(line, data, bit_ns, stop=1):
    """8N1 frames with one idle bit (plus 3 ns, off the clock grid) after each; every edge at
    its exact time from the first one, rounded to the simulator's 1 ps."""
    done, t = 0, 0.0

    async def hold(ns):
        nonlocal done, t
        t += ns
        edge = round(t * 1000)
        if edge > done:
            await Timer(edge - done, unit="ps")
        done = edge

    for byte in data:
        for level in [0] + [byte >> k & 1 for k in range(8)] + [stop]:
            line.set(level)
            await hold(bit_ns)
        line.set(1)
        await hold(bit_ns + 3)                        # one idle bit, off the clock grid


def first_difference(got, expected):
    return next((k for k, (g, e) in enumerate(zip(got, expected, strict=False)) if g != e),
                min(len(got), len(expected)))


async def count_pulses(dut, signal, out):
    while True:
        await RisingEdge(dut.clk)
        await FallingEdge(dut.clk)
        if read(signal):
            out.append(1)


@cocotb.test()
async def uart_both_directions(dut):
    job = load_job()
    await start(dut, job)
    data = job["bytes"]
    bit_ns = bit_time_ns(job)
    rng = rng_for(job)
    tx_bytes, framing, overrun = [], [], []
    line = Line(dut, bool(job.get("ddr")))
    if line.ddr:
        cocotb.start_soon(ddr_pin(dut, line))
    cocotb.start_soon(uart_monitor(dut, bit_ns, tx_bytes))
    cocotb.start_soon(count_pulses(dut, dut.framing_error, framing))
    cocotb.start_soon(count_pulses(dut, dut.overrun, overrun))
    rx_task = cocotb.start_soon(send_frames(line, data, bit_ns))
    src = Source(dut, "i", rng, job["valid_prob"])
    src.queue = list(data)
    sink = Sink(dut, "o", rng, job["ready_prob"])
    sink.want = len(data)
    n = 0
    while not (src.done and sink.done):
        await cycle(dut, [src, sink])
        n += 1
        assert n < 13 * job["divisor"] * (len(data) + 4), (
            f"timed out: {len(sink.got)} of {len(data)} bytes received, {len(src.queue)} left to "
            f"send; {len(framing)} framing_error and {len(overrun)} overrun pulses")
    src.valid.value = 0
    await rx_task
    await wait_ns(12 * bit_ns)
    assert sink.got == data, f"received bytes differ, first #{first_difference(sink.got, data)}"
    assert tx_bytes == data, f"transmitted bytes differ, first #{first_difference(tx_bytes, data)}"
    assert not framing and not overrun, "spurious framing_error / overrun pulse"

    # A low stop bit is a framing error: one pulse, no byte.
    sink.ready.value = 1
    await send_frames(line, [0x3C], bit_ns, stop=0)
    line.set(1)
    await wait_ns(4 * bit_ns)
    assert len(framing) == 1, f"{len(framing)} framing_error pulses for one bad stop bit"
    assert not read(dut.o__valid), "a byte with a bad stop bit was delivered"
    assert not overrun, "spurious overrun pulse"
