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
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge, Timer

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
    """Drive every input to its reset value, start the clock and pulse the synchronous reset.

    With ``job["hdl_clock"]`` the clock is already running in Verilog (``cocotb_runner``'s
    ``lowbit_bench_clock``: the same waveform, high from time 0, period ``PERIOD_NS``); Icarus
    then toggles ``clk`` without a VPI callback per edge, about twice as fast for a bench that
    runs long stretches without Python (the UART benches)."""
    for name, init in job["inits"].items():
        if name != "clk" or not job.get("hdl_clock"):
            getattr(dut, name).value = init
    dut.rst.value = 1
    if not job.get("hdl_clock"):
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


class QuietSource:
    """Offers a payload on an input stream that the block must not take in this phase (e.g.
    random bits outside stochastic rounding); fails if ``ready`` is ever high.

    The offer is withdrawn when the phase ends (the block never took it, so it cannot tell).
    """

    def __init__(self, dut, name, payload):
        self.name = name
        self.valid = getattr(dut, f"{name}__valid")
        self.payload = getattr(dut, f"{name}__payload")
        self.ready = getattr(dut, f"{name}__ready")
        self.value = payload

    def drive(self):
        self.valid.value = 1
        self.payload.value = self.value

    def sample(self):
        if read(self.ready):
            raise AssertionError(f"{self.name}: taken although this phase must not read it")

    def update(self):
        pass

    done = True


async def _interrupted_prelude(dut, job, rng):
    """Traffic cut short by a reset: the configuration and inputs of the first phase with
    inputs are offered for ``job["interrupt"]`` cycles while no output is taken, then the
    synchronous reset is pulsed. Whatever was in flight must be gone afterwards."""
    for phase in job["phases"]:
        for port, value in phase["set"].items():
            getattr(dut, port).value = value
        if phase["inputs"]:
            break
    sources = []
    for port, payloads in phase["inputs"].items():
        src = Source(dut, port, rng, job["valid_prob"])
        src.queue = list(payloads)
        sources.append(src)
    for _ in range(job["interrupt"]):
        await cycle(dut, sources)
    for src in sources:
        src.valid.value = 0
    dut.rst.value = 1
    for _ in range(2):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


async def run_phases(dut, job, *, settle=16):
    """Run the phases of a stream job (``cocotb_runner.stream_spec`` format) and check them.

    Each phase: ``set`` configuration ports (held); ``writes``, one dict of port values per
    cycle (e.g. a table-write port; the last dict should disable it); ``quiet``, input streams
    offered a payload that the block must never take during the phase; ``inputs`` fed with
    random valid gaps; ``outputs`` collected with random back-pressure and compared bit for
    bit; ``ticks`` idle cycles afterwards. Output streams are checked against the stream rules
    on every cycle, and after the last phase no output may present a further beat for
    ``settle`` cycles (nothing extra, nothing duplicated). With ``job["interrupt"]`` the run
    starts with traffic cut short by a reset (:func:`_interrupted_prelude`).
    """
    await start(dut, job)
    rng = rng_for(job)
    if job.get("interrupt"):
        await _interrupted_prelude(dut, job, rng)
    sinks = {}
    for k, phase in enumerate(job["phases"]):
        for port, value in phase["set"].items():
            getattr(dut, port).value = value
        for write in phase.get("writes", []):
            for port, value in write.items():
                getattr(dut, port).value = value
            await RisingEdge(dut.clk)
        sources = []
        for port, payloads in phase["inputs"].items():
            src = Source(dut, port, rng, job["valid_prob"])
            src.queue = list(payloads)
            sources.append(src)
        quiet = [QuietSource(dut, port, value) for port, value in phase.get("quiet", {}).items()]
        for sink in sinks.values():
            sink.forget()
        active = []
        for port, expected in phase["outputs"].items():
            sink = sinks.setdefault(port, Sink(dut, port, rng, job["ready_prob"]))
            sink.got, sink.want = [], len(expected)
            active.append(sink)
        idle = [s for p, s in sinks.items() if p not in phase["outputs"]]
        for s in idle:
            s.want = len(s.got)            # never ready
        parts = sources + quiet + active + idle
        total = sum(len(s.queue) for s in sources) + sum(s.want for s in active)
        limit = job.get("max_cycles") or 1000 + 30 * total
        n = 0
        while not (all(s.done for s in sources) and all(s.done for s in active)):
            await cycle(dut, parts)
            n += 1
            assert n < limit, f"phase {k}: timed out after {n} cycles"
        for src in sources + quiet:
            src.valid.value = 0
        for s in sinks.values():
            s.ready.value = 0
        for port, expected in phase["outputs"].items():
            got = sinks[port].got
            bad = [j for j, (g, e) in enumerate(zip(got, expected, strict=True)) if g != e]
            assert not bad, (f"phase {k} {port}: {len(bad)} of {len(expected)} beats differ, "
                             f"first #{bad[0]}: got {got[bad[0]]:#x}, expected "
                             f"{expected[bad[0]]:#x}")
        for _ in range(phase["ticks"]):
            await RisingEdge(dut.clk)
    for _ in range(settle):
        await ReadOnly()
        for port, sink in sinks.items():
            assert not read(sink.valid), f"{port}: a beat beyond the expected ones"
        await RisingEdge(dut.clk)


# --- UART host (8N1 at the top's bit period) ------------------------------------------------------

def bit_time_ns(job):
    """The host's bit time: the top's exact bit period (``period`` cycles, a float, or the
    whole ``divisor``) times the clock period, off by ``baud_error`` (the host's clock)."""
    return job.get("period", job["divisor"]) * PERIOD_NS * (1 + job.get("baud_error", 0.0))


async def wait_ns(ns):
    """A Timer of ``ns`` nanoseconds (any float), rounded to the simulator's 1 ps."""
    await Timer(max(round(ns * 1000), 1), unit="ps")


async def uart_send(dut, byte, bit_ns):
    """Send one 8N1 frame on ``rx``: start bit, 8 data bits LSB first, stop bit; a fractional
    bit time keeps the frame's total length exact (edges rounded to 1 ps)."""
    done = 0
    for k, level in enumerate([0] + [byte >> j & 1 for j in range(8)] + [1]):
        dut.rx.value = level
        edge = round((k + 1) * bit_ns * 1000)
        await Timer(edge - done, unit="ps")
        done = edge


async def uart_monitor(dut, bit_ns, out):
    """Decode ``tx`` forever (falling edge, then mid-bit samples), appending bytes to ``out``."""
    while True:
        await FallingEdge(dut.tx)
        await wait_ns(bit_ns / 2)
        assert int(dut.tx.value) == 0, "tx: start bit shorter than half a bit"
        byte = 0
        for k in range(8):
            await wait_ns(bit_ns)
            byte |= int(dut.tx.value) << k
        await wait_ns(bit_ns)
        assert int(dut.tx.value) == 1, f"tx: framing error after byte {byte:#04x}"
        out.append(byte)


async def until_count(received, n, bit_ns):
    """Return once ``received`` holds ``n`` bytes (polled once per bit time)."""
    while len(received) < n:
        await wait_ns(bit_ns)
