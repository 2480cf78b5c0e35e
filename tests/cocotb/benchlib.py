"""cocotb side: clock, reset and valid/ready stream drivers shared by the benches.

Runs inside the simulator process: imports cocotb only (no Amaranth, no golden models). The job
(vectors, port reset values) comes from the JSON file named by ``LOWBIT_VECTORS``.

Timing convention: inputs are written right after a rising edge; at ``ReadOnly`` of the same
cycle the settled handshake signals are sampled, and a transfer happens at the next rising edge
exactly when ``valid & ready`` was sampled high. Outputs are checked against the stream rules on
every cycle: once ``valid`` is seen without ``ready``, the next cycle must still show ``valid``
with the same payload.
"""

import json
import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

PERIOD_NS = 10


def load_job():
    with open(os.environ["LOWBIT_VECTORS"]) as f:
        return json.load(f)


def read(handle):
    """Integer value of a port; raises if it holds X or Z bits."""
    value = handle.value
    try:
        if hasattr(value, "to_unsigned"):
            return value.to_unsigned()
        return int(value)
    except ValueError:
        raise AssertionError(f"{handle._name} holds {value!r}, not a defined value") from None


async def start(dut, job, cycles=3):
    """Drive every input to its reset value, start the clock and pulse the synchronous reset."""
    for name, init in job["inits"].items():
        getattr(dut, name).value = init
    dut.rst.value = 1
    cocotb.start_soon(Clock(dut.clk, PERIOD_NS, unit="ns").start())
    for _ in range(cycles):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


class StreamRuleError(AssertionError):
    """An output stream broke the valid/ready rules."""


class Source:
    """Feeds payloads to an input stream ``<name>__valid/__payload/__ready`` with random gaps."""

    def __init__(self, dut, name, rng, prob):
        self.valid = getattr(dut, f"{name}__valid")
        self.payload = getattr(dut, f"{name}__payload")
        self.ready = getattr(dut, f"{name}__ready")
        self.rng, self.prob = rng, prob
        self.queue = []
        self.offering = False
        self.fire = False

    def drive(self):
        if not self.offering and self.queue and self.rng.random() < self.prob:
            self.payload.value = self.queue[0]
            self.offering = True
        self.valid.value = int(self.offering)

    def sample(self):
        self.fire = self.offering and bool(read(self.ready))

    def update(self):
        if self.fire:
            self.queue.pop(0)
            self.offering = False

    @property
    def done(self):
        return not self.queue and not self.offering


class Sink:
    """Collects an output stream with random back-pressure and checks the stream rules."""

    def __init__(self, dut, name, rng, prob):
        self.name = name
        self.valid = getattr(dut, f"{name}__valid")
        self.payload = getattr(dut, f"{name}__payload")
        self.ready = getattr(dut, f"{name}__ready")
        self.rng, self.prob = rng, prob
        self.want = 0
        self.got = []
        self.pending = None
        self.accept = False

    def drive(self):
        self.accept = len(self.got) < self.want and self.rng.random() < self.prob
        self.ready.value = int(self.accept)

    def sample(self):
        valid = bool(read(self.valid))
        payload = read(self.payload) if valid else None
        if self.pending is not None:
            if not valid:
                raise StreamRuleError(f"{self.name}: valid dropped before payload "
                                      f"{self.pending:#x} was accepted")
            if payload != self.pending:
                raise StreamRuleError(f"{self.name}: payload changed from {self.pending:#x} "
                                      f"to {payload:#x} while waiting for ready")
        if valid and self.accept:
            self.got.append(payload)
            self.pending = None
        elif valid:
            self.pending = payload

    def update(self):
        pass

    def forget(self):
        """Forget a waiting payload (a phase boundary where the bench changed configuration)."""
        self.pending = None

    @property
    def done(self):
        return len(self.got) >= self.want


async def cycle(dut, parts):
    """One clock cycle: drive all ``parts``, sample them settled, take the edge, update."""
    for p in parts:
        p.drive()
    await ReadOnly()
    for p in parts:
        p.sample()
    await RisingEdge(dut.clk)
    for p in parts:
        p.update()


def rng_for(job, salt=0):
    return random.Random(job.get("seed", 0) * 7919 + salt)
