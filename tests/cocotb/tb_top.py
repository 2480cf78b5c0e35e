"""cocotb bench of ``lowbit_top`` (Accelerator) through its UART pins ``rx`` / ``tx``.

The bench is the host: it encodes nothing itself, it sends the request bytes of each event as
real 8N1 frames on ``rx`` at the top's bit period (start bit, 8 data bits LSB first, stop bit;
the exact fractional period, off by ``baud_error`` as a host with another clock), back to back,
decodes ``tx`` with its own receiver (falling edge, then mid-bit samples) and compares the reply
bytes with :class:`lowbit.sim.link.DeviceModel`'s, byte for byte. The host is stop-and-wait like the
driver: it sends the next request only after the reply to the previous one has arrived.
"""

import cocotb
from benchlib import (
    PERIOD_NS,
    bit_time_ns,
    load_job,
    start,
    uart_monitor,
    uart_send,
    until_count,
    wait_ns,
)
from cocotb.triggers import with_timeout


@cocotb.test()
async def uart_frames(dut):
    job = load_job()
    await start(dut, job)
    bit_ns = bit_time_ns(job)          # the host's: the top's exact period, off by baud_error
    received = []
    cocotb.start_soon(uart_monitor(dut, bit_ns, received))
    # The device's inter-byte timeout: timeout_bits periods of the rounded divisor.
    timeout_ns = job["timeout_bits"] * job["divisor"] * PERIOD_NS
    for k, event in enumerate(job["events"]):
        received.clear()
        for byte in event.get("send", []):
            await uart_send(dut, byte, bit_ns)
        if event.get("timeout"):
            await wait_ns(timeout_ns + 4 * bit_ns)
        expected = event["reply"]

        try:
            limit_ns = (len(expected) + 4) * 12 * bit_ns + timeout_ns
            await with_timeout(until_count(received, len(expected), bit_ns), round(limit_ns),
                               "ns")
        except TimeoutError:
            raise AssertionError(f"event {k}: {len(received)} of {len(expected)} reply bytes "
                                 f"arrived") from None
        # An extra reply byte would have started by now; stay well inside the inter-byte
        # timeout, which a partial frame sent by this event is about to run into.
        await wait_ns(min(12, job["timeout_bits"] // 2) * bit_ns)
        assert received == expected, (f"event {k}: sent {bytes(event.get('send', [])).hex()}, "
                                      f"reply {bytes(received).hex()}, expected "
                                      f"{bytes(expected).hex()}")
