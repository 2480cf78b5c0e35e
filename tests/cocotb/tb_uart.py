"""cocotb bench of ``lowbit_uart``: serial frames on ``rx`` -> ``o`` and ``i`` -> ``tx``.

Both directions run at once. The receive side gets the vectors as 8N1 frames on ``rx`` (each
bit ``period`` clock periods, exact even when fractional, start bits at arbitrary phase to the
clock) and must deliver them
on ``o`` in order, under random back-pressure, with the stream rules checked every cycle. The
transmit side gets the vectors on ``i`` with random valid gaps; an independent receiver decodes
``tx``. Then a frame with a low stop bit must pulse ``framing_error`` and deliver nothing.
"""

import cocotb
from benchlib import Sink, Source, bit_time_ns, cycle, load_job, read, rng_for, start, wait_ns
from cocotb.triggers import FallingEdge, RisingEdge
from tb_top import uart_monitor


async def send_frames(dut, data, bit_ns, stop=1):
    for byte in data:
        for level in [0] + [byte >> k & 1 for k in range(8)] + [stop]:
            dut.rx.value = level
            await wait_ns(bit_ns)
        dut.rx.value = 1
        await wait_ns(bit_ns + 3)                     # one idle bit, off the clock grid


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
    cocotb.start_soon(uart_monitor(dut, bit_ns, tx_bytes))
    cocotb.start_soon(count_pulses(dut, dut.framing_error, framing))
    cocotb.start_soon(count_pulses(dut, dut.overrun, overrun))
    rx_task = cocotb.start_soon(send_frames(dut, data, bit_ns))
    src = Source(dut, "i", rng, job["valid_prob"])
    src.queue = list(data)
    sink = Sink(dut, "o", rng, job["ready_prob"])
    sink.want = len(data)
    n = 0
    while not (src.done and sink.done):
        await cycle(dut, [src, sink])
        n += 1
        assert n < 13 * job["divisor"] * (len(data) + 4), "timed out"
    src.valid.value = 0
    await rx_task
    await wait_ns(12 * bit_ns)
    assert sink.got == data, "received bytes differ"
    assert tx_bytes == data, "transmitted bytes differ"
    assert not framing and not overrun, "spurious framing_error / overrun pulse"

    # A low stop bit is a framing error: one pulse, no byte.
    sink.ready.value = 1
    await send_frames(dut, [0x3C], bit_ns, stop=0)
    dut.rx.value = 1
    await wait_ns(4 * bit_ns)
    assert len(framing) == 1, f"{len(framing)} framing_error pulses for one bad stop bit"
    assert not read(dut.o__valid), "a byte with a bad stop bit was delivered"
