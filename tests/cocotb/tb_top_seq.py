"""cocotb bench of ``lowbit_top`` built with the layer sequencer, through its UART pins.

The bench is the host, as in ``tb_top``: it sends the request bytes of each event
(:func:`lowbit.sim.vectors.top_seq_vectors`: MEM_WRITE of a layer, a LUT table and programs, RUN,
MEM_READ of the results) as 8N1 frames on ``rx``, stop-and-wait, and decodes ``tx``. Replies are
compared with :class:`lowbit.sim.link.DeviceModel`'s byte for byte, except for ``RUN`` replies: the
model reports ``cycles = 0``, so there only the header, status, ``pc`` and ``executed`` (the
first 12 bytes) and the length are compared. Every received reply is written to
``received.json`` next to the vectors, where the pytest side checks the ``RUN`` replies' CRC and
cycle counts.
"""

import json
import os

import cocotb
from benchlib import PERIOD_NS, load_job, start, uart_monitor, uart_send, until_count
from cocotb.triggers import Timer, with_timeout


@cocotb.test()
async def sequencer_programs(dut):
    job = load_job()
    await start(dut, job)
    bit_ns = job["divisor"] * PERIOD_NS
    received = []
    replies = []
    cocotb.start_soon(uart_monitor(dut, bit_ns, received))
    timeout_ns = job["timeout_bits"] * bit_ns
    for k, event in enumerate(job["events"]):
        received.clear()
        for byte in event["send"]:
            await uart_send(dut, byte, bit_ns)
        expected = event["reply"]
        try:
            # The reply's bytes and the inter-byte timeout, the device's handling of the
            # request (it stores a MEM_WRITE's payload at up to 3 cycles a byte), a RUN's cycles.
            limit_ns = ((len(expected) + 4) * 12 * bit_ns + timeout_ns
                        + 4 * len(event["send"]) * PERIOD_NS
                        + job["run_cycles"] * PERIOD_NS * event.get("run", False))
            await with_timeout(until_count(received, len(expected), bit_ns), limit_ns, "ns")
        except TimeoutError:
            raise AssertionError(f"event {k}: {len(received)} of {len(expected)} reply bytes "
                                 f"arrived") from None
        await Timer(12 * bit_ns, unit="ns")           # an extra byte would have started
        replies.append(list(received))
        got, want = (received[:12], expected[:12]) if event.get("run") else (received, expected)
        assert len(received) == len(expected) and got == want, (
            f"event {k}: sent {bytes(event['send'][:16]).hex()}..., reply "
            f"{bytes(received).hex()}, expected {bytes(expected).hex()}")
    path = os.path.join(os.path.dirname(os.environ["LOWBIT_VECTORS"]), "received.json")
    with open(path, "w") as f:
        json.dump(replies, f)
