"""The compiled CXXRTL simulator against Amaranth's simulator on the accelerator top.

The same host session (every opcode, error frames, garbage, timeouts, memory traffic) runs
through ``SimulatedSerial(simulator="amaranth")`` and ``SimulatedSerial(simulator="cxxrtl")``;
reply bytes, cycle counts, LEDs and the final scratchpad must be identical. The top is compiled
once into the default cache (``~/.cache/lowbit/cxxrtl``), so later runs only load it.
"""

import random

import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

import sim.cxxrtl as cx
from boards.driver import Accelerator, BadAddress, BadLength
from sim import link as L
from sim.transport import SimulatedSerial

SCRATCH = 256
FRAME = 64
TIMEOUT_BITS = 20
PARAMS = dict(scratch_bytes=SCRATCH, frame_bytes=FRAME, timeout_bits=TIMEOUT_BITS)
TIMEOUT_CYCLES = TIMEOUT_BITS * 12


def _frame(opcode, payload=b""):
    return L.encode_request(opcode, payload)


def host_session(seed=0):
    """A scripted session: list of ``(kind, bytes, replies)``.

    ``kind`` is ``"send"`` (write the bytes, collect ``replies`` reply frames) or ``"stall"``
    (write a partial or oversized frame, wait out the inter-byte timeout, collect the
    TRUNCATED or BAD_LENGTH reply).
    """
    rng = random.Random(seed)
    s = [("send", _frame(L.Opcode.IDENTIFY), 1),
         ("send", _frame(L.Opcode.IDENTIFY, b"x"), 1),
         ("send", _frame(L.Opcode.PING), 1),
         ("send", _frame(L.Opcode.PING, bytes(range(FRAME))), 1),
         ("send", _frame(L.Opcode.PING, bytes(FRAME + 1)), 1)]          # drained: BAD_LENGTH
    # Every opcode with a random short payload (unknown ones answer BAD_OPCODE).
    for op in range(256):
        s.append(("send", _frame(op, rng.randbytes(rng.randrange(0, 9))), 1))
    # Registers: write random values everywhere (read-only and unknown indices included).
    for index in [r.index for r in L.REGISTERS] + [0x08, 0x3F, 0xFFFF]:
        s.append(("send", _frame(L.Opcode.REG_WRITE,
                                 L.reg_write_payload(index, rng.getrandbits(32))), 1))
        s.append(("send", _frame(L.Opcode.REG_READ, L.reg_read_payload(index)), 1))
    # Memory: fill the scratchpad, odd addresses and lengths, out-of-range requests.
    for addr in range(0, SCRATCH, FRAME - 4):
        n = min(FRAME - 4, SCRATCH - addr)
        s.append(("send", _frame(L.Opcode.MEM_WRITE, L.mem_write_payload(addr,
                                                                          rng.randbytes(n))), 1))
    for _ in range(12):
        addr, n = rng.randrange(SCRATCH), rng.randrange(1, 20)
        s.append(("send", _frame(L.Opcode.MEM_WRITE, L.mem_write_payload(addr,
                                                                          rng.randbytes(n))), 1))
        s.append(("send", _frame(L.Opcode.MEM_READ, L.mem_read_payload(addr, n)), 1))
    for addr, count in [(SCRATCH, 1), (SCRATCH - 1, 2), (0, FRAME + 1), (1 << 31, 4)]:
        s.append(("send", _frame(L.Opcode.MEM_READ, L.mem_read_payload(addr, count)), 1))
        s.append(("send", _frame(L.Opcode.MEM_WRITE, L.mem_write_payload(addr, b"\xEE" * 2)),
                  1))
    # Transfer-LUT engine, if the top has it: load a table and apply it.
    if hasattr(L.Opcode, "LUT_WRITE"):
        table = bytes(rng.randrange(256) for _ in range(FRAME - 2))
        s.append(("send", _frame(L.Opcode.LUT_WRITE, bytes([0, 0]) + table), 1))
        s.append(("send", _frame(L.Opcode.LUT_APPLY, bytes([0]) + rng.randbytes(FRAME - 1)), 1))
    # Bad CRCs, garbage between frames, truncated frames.
    for _ in range(6):
        bad = bytearray(_frame(L.Opcode.PING, rng.randbytes(rng.randrange(0, 8))))
        # Not the length bytes: a longer length leaves the frame open until the inter-byte
        # timeout, which the stall steps below cover.
        bad[rng.choice([i for i in range(1, len(bad)) if i not in (2, 3)])] ^= \
            1 << rng.randrange(8)
        garbage = bytes(b for b in rng.randbytes(rng.randrange(1, 12)) if b != L.SOF_REQUEST)
        s.append(("send", garbage + bytes(bad), 1))
        s.append(("send", garbage + _frame(L.Opcode.PING, b"ok"), 1))
    s.append(("stall", _frame(L.Opcode.MEM_WRITE, L.mem_write_payload(0, bytes(8)))[:9], 1))
    s.append(("stall", bytes([L.SOF_REQUEST, L.Opcode.PING]), 1))
    s.append(("stall", bytes([L.SOF_REQUEST, L.Opcode.PING, 0xFF, 0xFF]) + bytes(FRAME + 2), 1))
    return s


def run_session(port, session):
    """Run ``session``; returns a transcript of (reply bytes, cycles, leds) per step."""
    transcript = []
    for kind, data, replies in session:
        port.write(data)
        if kind == "stall":
            port.flush()
            port.idle(TIMEOUT_CYCLES + 50)
        parser = L.ReplyParser()
        raw = b""
        got = 0
        while got < replies:
            chunk = port.read(parser.needed(), timeout_cycles=8000)
            assert chunk, f"no reply to {data.hex()}"
            raw += chunk
            got += len(parser.feed(chunk))
        transcript.append((raw, port.cycles, port.leds))
    assert port.read(1, timeout_cycles=2000) == b""                      # nothing left over
    return transcript


def dump_scratchpad(port):
    out = b""
    for addr in range(0, SCRATCH, FRAME):
        port.write(_frame(L.Opcode.MEM_READ, L.mem_read_payload(addr, FRAME)))
        status, body = L.decode_reply(port.read(FRAME + 6, timeout_cycles=4000))
        assert status == L.Status.OK
        out += body
    return out


@pytest.fixture(scope="module")
def cxxrtl_port():
    port = SimulatedSerial(simulator="cxxrtl", **PARAMS)   # compiles once (cached)
    yield port
    port.close()


def test_session_identical(cxxrtl_port):
    """Every reply byte, the cycle of every step, the LEDs and the scratchpad are identical;
    the replies also equal the protocol model's."""
    session = host_session(seed=1)
    ref = SimulatedSerial(**PARAMS)
    want = run_session(ref, session)
    got = run_session(cxxrtl_port, session)
    assert [t[0] for t in got] == [t[0] for t in want]
    assert got == want
    statuses = {L.decode_reply(raw)[0] for raw, _, _ in want if raw}
    assert statuses >= {L.Status.OK, L.Status.BAD_CRC, L.Status.BAD_OPCODE, L.Status.BAD_ADDRESS,
                        L.Status.BAD_LENGTH, L.Status.TRUNCATED, L.Status.READ_ONLY}
    assert dump_scratchpad(cxxrtl_port) == dump_scratchpad(ref)
    assert cxxrtl_port.cycles == ref.cycles
    model = L.DeviceModel(scratch_bytes=SCRATCH, frame_bytes=FRAME)
    expected = []
    for kind, data, _ in session:
        expected.append(model.feed(data) + (model.timeout() if kind == "stall" else b""))
    assert [t[0] for t in got] == expected


def test_driver_api():
    """``Accelerator.simulated(simulator="cxxrtl")`` is the same driver API (cached library)."""
    with Accelerator.simulated(simulator="cxxrtl", **PARAMS) as acc:
        assert acc.port.simulator == "cxxrtl"
        assert acc.identity.scratch_bytes == SCRATCH
        assert acc.ping(b"\x00\xA5\x5A") == b"\x00\xA5\x5A"
        a = np.random.default_rng(3).integers(-32768, 32767, size=100, dtype=np.int16)
        acc.write_mem(40, a)
        assert np.array_equal(acc.read_mem(40, 100, dtype=np.int16), a)
        acc.write_reg("PRNG_SEED2", 0xDEADBEEF)
        assert acc.read_reg("PRNG_SEED2") == 0xDEADBEEF
        with pytest.raises(BadAddress):
            acc.write_mem(SCRATCH, b"\x01")
        with pytest.raises(BadLength):
            acc.read_mem(SCRATCH - 2, 4)
        assert acc.port.in_waiting == 0
        assert acc.port.leds & 2 == 2              # error LED latched by the last reply


def test_cached_library_is_reused(cxxrtl_port, monkeypatch):
    """An unchanged top is neither regenerated nor recompiled: no subprocess runs at all."""
    def no_subprocess(*args, **kwargs):
        raise AssertionError(f"unexpected subprocess {args}")
    monkeypatch.setattr(cx.subprocess, "run", no_subprocess)
    port = SimulatedSerial(simulator="cxxrtl", **PARAMS)
    assert port._cx.library == cxxrtl_port._cx.library
    assert cx.default_cache_dir() in port._cx.library.parents
    port.write(_frame(L.Opcode.PING, b"again"))
    assert L.decode_reply(port.read(11)) == (L.Status.OK, b"again")
    port.close()
    with pytest.raises(ValueError, match="closed"):
        port._cx.run(1)


def test_missing_compiler(tmp_path, monkeypatch):
    monkeypatch.setenv("CXX", "lowbit-no-such-c++")
    top = _Echo()
    with pytest.raises(cx.CompilerNotFound, match="C\\+\\+ compiler 'lowbit-no-such-c\\+\\+' "
                                                  "not found; install g\\+\\+"):
        cx.build(top, cache_dir=tmp_path)
    monkeypatch.setenv("LOWBIT_CXXRTL_CACHE", str(tmp_path))
    with pytest.raises(cx.CompilerNotFound):
        SimulatedSerial(simulator="cxxrtl", **PARAMS)


def test_compiler_failure(tmp_path):
    with pytest.raises(cx.CxxrtlError, match="Compiling the CXXRTL simulator failed"):
        cx.build(_Echo(), cache_dir=tmp_path, cxxflags=("-std=c++17", "--no-such-flag"))


@pytest.mark.parametrize("kw, msg", [
    (dict(simulator="verilator"), "Simulator must be 'amaranth' or 'cxxrtl', not 'verilator'"),
    (dict(simulator="cxxrtl", level="uart"), "byte level only"),
    (dict(simulator="cxxrtl", vcd="x.vcd"), "VCD output needs the Amaranth simulator"),
])
def test_transport_arguments(kw, msg):
    with pytest.raises(ValueError, match=msg):
        SimulatedSerial(**kw, **PARAMS)


class _Echo(wiring.Component):
    """A byte-stream design that is not the top: replies ``byte + 1`` after a one-cycle stall
    per byte, so the harness's handshake handling matters."""
    i: In(stream.Signature(8))
    o: Out(stream.Signature(8))
    leds: Out(3)

    def elaborate(self, platform):
        m = Module()
        full = Signal()
        busy = Signal()
        m.d.comb += [self.i.ready.eq(~full & ~busy), self.o.valid.eq(full)]
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [self.o.payload.eq(self.i.payload + 1), full.eq(1), busy.eq(1),
                         self.leds.eq(self.leds + 1)]
        with m.Elif(busy):
            m.d.sync += busy.eq(0)
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += full.eq(0)
        return m


class _NoStreams(wiring.Component):
    a: In(8)
    b: Out(8)

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.b.eq(self.a)
        return m


def test_other_byte_stream_design():
    """The harness knows only the ports: another design runs, and its cycle behaviour is the
    byte-level testbench's (one byte per 2 cycles here, the counter LEDs sampled per cycle)."""
    sim = cx.ByteStreamSim(_Echo())
    sim.write(bytes([0, 1, 254, 255, 7]))
    assert sim.run(100, step=4, rx_target=5) == 12
    assert sim.read(10) == bytes([1, 2, 255, 0, 8])
    assert (sim.cycles, sim.leds, sim.tx_pending, sim.rx_pending) == (12, 5, 0, 0)
    sim.write(b"\x10\x20")
    assert sim.run(1000, step=1, until_tx_empty=True) == 4    # offered from cycle 14
    assert sim.rx_pending == 1                                   # 0x11; 0x21 is one cycle out
    sim.clear_rx()
    assert sim.run(5) == 5 and sim.read(5) == b"\x21"
    with pytest.raises(cx.CxxrtlError, match="the design has no port 'i__valid'"):
        cx.ByteStreamSim(_NoStreams())


@pytest.mark.slow
def test_long_random_session_against_model():
    """Thousands of random frames through CXXRTL, checked against the protocol model."""
    rng = random.Random(7)
    port = SimulatedSerial(simulator="cxxrtl", **PARAMS)
    model = L.DeviceModel(scratch_bytes=SCRATCH, frame_bytes=FRAME)
    ops = [L.Opcode.PING, L.Opcode.MEM_WRITE, L.Opcode.MEM_READ, L.Opcode.REG_WRITE,
           L.Opcode.REG_READ]
    for _ in range(5000):
        op = rng.choice(ops)
        if op == L.Opcode.MEM_WRITE:
            payload = L.mem_write_payload(rng.randrange(SCRATCH + 8),
                                          rng.randbytes(rng.randrange(0, FRAME - 3)))
        elif op == L.Opcode.MEM_READ:
            payload = L.mem_read_payload(rng.randrange(SCRATCH + 8), rng.randrange(0, FRAME + 2))
        elif op == L.Opcode.REG_WRITE:
            payload = L.reg_write_payload(rng.choice(L.REGISTERS).index, rng.getrandbits(32))
        elif op == L.Opcode.REG_READ:
            payload = L.reg_read_payload(rng.choice(L.REGISTERS).index)
        else:
            payload = rng.randbytes(rng.randrange(0, FRAME))
        data = _frame(op, payload)
        if rng.random() < 0.05:
            data = bytearray(data)
            data[rng.randrange(1, len(data))] ^= 0x10
            data = bytes(data)
        expected = model.feed(data)
        port.write(data)
        assert port.read(len(expected), timeout_cycles=200_000) == expected
    assert dump_scratchpad(port) == bytes(model.scratch)
    port.close()


@pytest.mark.slow
def test_changed_top_recompiles(cxxrtl_port):
    """A different top hashes differently and gets its own library."""
    port = SimulatedSerial(simulator="cxxrtl", **{**PARAMS, "scratch_bytes": 512})
    assert port._cx.library != cxxrtl_port._cx.library
    port.write(_frame(L.Opcode.MEM_READ, L.mem_read_payload(510, 2)))
    assert L.decode_reply(port.read(8)) == (L.Status.OK, b"\x00\x00")
    port.close()
