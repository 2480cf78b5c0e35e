"""The compiled CXXRTL simulator against Amaranth's simulator on the accelerator top.

The same host session (every opcode, error frames, garbage, timeouts, memory traffic) runs
through ``SimulatedSerial(simulator="amaranth")`` and ``SimulatedSerial(simulator="cxxrtl")``;
reply bytes, cycle counts, LEDs and the final scratchpad must be identical. The top is compiled
once into the default cache (``~/.cache/lowbit/cxxrtl``), so later runs only load it.
"""

import random
import re
import struct

import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

import lowbit.sim.rtl.cxxrtl as cx
from lowbit.boards.demo import SIM_TOP
from lowbit.boards.driver import Accelerator, BadAddress, BadLength
from lowbit.sim import link as L
from lowbit.sim.network import BFPDense, bfp_dense, pack_elements, unpack_elements
from lowbit.sim.program import Instruction as I
from lowbit.sim.program import assemble
from lowbit.sim.rtl.transport import SimulatedSerial

SCRATCH = 256
FRAME = 64
TIMEOUT_BITS = 20
# One lane and two tables: every engine of the top is there, and a cold compile takes about
# 12 CPU-s instead of 18 with the default two lanes and four tables.
PARAMS = dict(scratch_bytes=SCRATCH, frame_bytes=FRAME, timeout_bits=TIMEOUT_BITS, lanes=1,
              lut_tables=2)
TIMEOUT_CYCLES = TIMEOUT_BITS * 12
#: Unoptimised: a tiny design's compile is mostly that of CXXRTL's runtime, at -O2 a second more;
#: this file's top compiles in 8 CPU-s instead of 18 at -O2 and runs the quick session in half a
#: second (the Amaranth simulator's side of it takes several); the slow long session keeps -O2.
#: The demo's tops, at -O2
#: (DEFAULT_CXXFLAGS), are compared with Amaranth's simulator in the slow run
#: (test_full_top_run_identical, test_exact_cycle_equals_single_eval).
O0 = tuple("-O0" if flag == "-O2" else flag for flag in cx.DEFAULT_CXXFLAGS)


def _frame(opcode, payload=b""):
    return L.encode_request(opcode, payload)


#: The opcodes of the quick session: every opcode the link knows, each neighbour of one
#: (unknown: BAD_OPCODE) and the ends of the byte; the slow case sends all 256.
SAMPLE_OPCODES = sorted({v for o in L.Opcode for v in (int(o) - 1, int(o), int(o) + 1)}
                        | {0x00, 0x7F, 0x80, 0xFE, 0xFF})


def host_session(seed=0, opcodes=range(256)):
    """A scripted session: list of ``(kind, bytes, replies)``.

    ``kind`` is ``"send"`` (write the bytes, collect ``replies`` reply frames) or ``"stall"``
    (write a partial or oversized frame, wait out the inter-byte timeout, collect the
    TRUNCATED or BAD_LENGTH reply). ``opcodes``: those sent with a random short payload.
    """
    rng = random.Random(seed)
    s = [("send", _frame(L.Opcode.IDENTIFY), 1),
         ("send", _frame(L.Opcode.IDENTIFY, b"x"), 1),
         ("send", _frame(L.Opcode.PING), 1),
         ("send", _frame(L.Opcode.PING, bytes(range(FRAME))), 1),
         ("send", _frame(L.Opcode.PING, bytes(FRAME + 1)), 1)]          # drained: BAD_LENGTH
    # Every opcode with a random short payload (unknown ones answer BAD_OPCODE).
    for op in opcodes:
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
    port = SimulatedSerial(simulator="cxxrtl", cxxflags=O0, **PARAMS)   # compiles once (cached)
    yield port
    port.close()


@pytest.mark.parametrize("opcodes", ["sample", pytest.param("all", marks=pytest.mark.slow)])
def test_session_identical(cxxrtl_port, opcodes):
    """Every reply byte, the cycle of every step, the LEDs and the scratchpad are identical;
    the replies also equal the protocol model's. The quick case sends the known opcodes and
    their neighbours (``SAMPLE_OPCODES``, most of the Amaranth simulator's time otherwise
    goes into 256 opcode frames), ``[all]`` (slow) every opcode."""
    session = host_session(seed=1, opcodes=SAMPLE_OPCODES if opcodes == "sample" else range(256))
    # A port of its own (the library is cached): the transcript holds the cycle counts, which
    # start at 0 on both simulators.
    cxxrtl_port = SimulatedSerial(simulator="cxxrtl", cxxflags=O0, **PARAMS)
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
    model = L.DeviceModel(**PARAMS)
    expected = []
    for kind, data, _ in session:
        expected.append(model.feed(data) + (model.timeout() if kind == "stall" else b""))
    assert [t[0] for t in got] == expected
    cxxrtl_port.close()


def test_driver_api():
    """``Accelerator.simulated(simulator="cxxrtl")`` is the same driver API (cached library)."""
    with Accelerator.simulated(simulator="cxxrtl", cxxflags=O0, **PARAMS) as acc:
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
    port = SimulatedSerial(simulator="cxxrtl", cxxflags=O0, **PARAMS)
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
    with pytest.raises(cx.CompilerNotFound):          # the smallest top: yosys runs first
        SimulatedSerial(simulator="cxxrtl", scratch_bytes=64, frame_bytes=16, lanes=1,
                        lut_tables=0, grand=False)


def test_compiler_failure(tmp_path):
    with pytest.raises(cx.CxxrtlError, match="Compiling the CXXRTL simulator failed"):
        cx.build(_Echo(), cache_dir=tmp_path, cxxflags=("-std=c++17", "--no-such-flag"))


@pytest.mark.parametrize("kw, msg", [
    (dict(simulator="verilator"), "Simulator must be 'amaranth' or 'cxxrtl', not 'verilator'"),
    (dict(simulator="cxxrtl", level="uart"), "byte level only"),
    (dict(simulator="cxxrtl", vcd="x.vcd"), "VCD output needs the Amaranth simulator"),
    (dict(cxxflags=O0), "Compiler flags are for the CXXRTL simulator only"),
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
    sim = cx.ByteStreamSim(_Echo(), cxxflags=O0)
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
        cx.ByteStreamSim(_NoStreams(), cxxflags=O0)


def test_seq_pipelined_top_reaches_write_cxxrtl(tmp_path, monkeypatch):
    """A top with the ULX3S's ``seq_pipelined`` (its discrete unit's result registers constant
    zeros, beside the LUT engine's constant write-register bits) gets through the script: its
    ``opt`` used to stop on "Conflicting init values" (flip-flops it turns into constants get
    an init of x, wires that alias other ones keep 0)."""
    from amaranth.back import rtlil

    from lowbit.hw.top import Accelerator
    top = Accelerator(scratch_bytes=2048, frame_bytes=512, sequencer=True, matrix_lanes=4,
                      block=4, max_blocks=4, weight_depth=64, lanes=2, lut_tables=2,
                      seq_pipelined=True, scratch_write_addr=False, simulation=True)
    text = rtlil.convert(top, name="top")
    assert "p_top" in cx._generate_cpp(text, tmp_path)
    # The script without the step that keeps init only on flip-flop outputs stops on it.
    plain = re.sub(r"select -set ffq .*?select -clear; ", "", cx._YOSYS_SCRIPT)
    assert plain != cx._YOSYS_SCRIPT
    monkeypatch.setattr(cx, "_YOSYS_SCRIPT", plain)
    with pytest.raises(cx.CxxrtlError, match="Conflicting init values"):
        cx._generate_cpp(text, tmp_path)


@pytest.mark.slow
def test_long_random_session_against_model():
    """Thousands of random frames through CXXRTL, checked against the protocol model. At the
    default -O2 (a library of its own): the 5000 frames take about 25 CPU-s at -O0, 1 at -O2."""
    rng = random.Random(7)
    port = SimulatedSerial(simulator="cxxrtl", **PARAMS)
    model = L.DeviceModel(**PARAMS)
    ops = [L.Opcode.PING, L.Opcode.MEM_WRITE, L.Opcode.MEM_READ, L.Opcode.REG_WRITE,
           L.Opcode.REG_READ]
    replies = 0
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
            # Not the length bytes: a frame announcing up to 4 KiB more would swallow the
            # following frames (all replies empty, the test vacuous) and leave the link waiting.
            data = bytearray(data)
            data[rng.choice([i for i in range(1, len(data)) if i not in (2, 3)])] ^= 0x10
            data = bytes(data)
        expected = model.feed(data)
        replies += bool(expected)
        port.write(data)
        assert port.read(len(expected), timeout_cycles=200_000) == expected
    assert replies == 5000
    assert dump_scratchpad(port) == bytes(model.scratch)
    port.close()


@pytest.mark.slow
def test_changed_top_recompiles(cxxrtl_port):
    """A different top hashes differently and gets its own library."""
    port = SimulatedSerial(simulator="cxxrtl", cxxflags=O0, **{**PARAMS, "scratch_bytes": 512})
    assert port._cx.library != cxxrtl_port._cx.library
    port.write(_frame(L.Opcode.MEM_READ, L.mem_read_payload(510, 2)))
    assert L.decode_reply(port.read(8)) == (L.Status.OK, b"\x00\x00")
    port.close()


# -- the full top: sequencer and engines ------------------------------------------------------

REG = {r.name: r.index for r in L.REGISTERS}
#: Word addresses of the full-top session: program, weight source, x, bias, y, LUT output.
PROG, WSRC, XA, BA, YA, ZA = 0, 256, 1400, 1450, 1500, 1550


def full_top_session(top, seed=5):
    """Frames that place a 20 x 32 BFP layer (2 tiles of N = 16 rows, 2 blocks of B = 16) and a
    transfer table, RUN ``LOADW; MATVEC (bias, max selector); LUT; HALT`` and read the results;
    returns ``(frames, layer, x_m, x_e, table)``."""
    rng = np.random.default_rng(seed)
    n, b = top.matrix_lanes, top.block
    rows, cols = 20, 2 * b
    tiles = -(-rows // n)
    layer = BFPDense(w_m=rng.integers(-128, 128, (rows, cols)),
                     w_e=rng.integers(-6, 0, (rows, cols // b)),
                     bias_m=rng.integers(-128, 128, rows), bias_e=rng.integers(-4, 1, rows),
                     width=8, rounding="nearest", exp_mode="max")
    x_m, x_e = rng.integers(-128, 128, cols), rng.integers(-4, 2, cols // b)
    m = np.zeros((tiles * n, cols), dtype=np.int64)
    e = np.zeros((tiles * n, cols), dtype=np.int64)
    m[:rows], e[:rows] = layer.w_m, np.repeat(layer.w_e, b, axis=1)
    wwords = pack_elements(m, e).reshape(tiles, n, cols).transpose(0, 2, 1).reshape(-1)
    bias = pack_elements(np.pad(layer.bias_m, (0, tiles * n - rows)),
                         np.pad(layer.bias_e, (0, tiles * n - rows)))
    table = rng.integers(0, 256, 256)
    program = [I.loadw(WSRC, 0, tiles * cols),
               I.matvec(XA, YA, 0, cols // b, tiles, bias=BA),
               I.config(REG["LUT_SELECT"], 1), I.lut(YA, ZA, rows), I.halt()]
    step = top.frame_bytes - 4
    frames = []

    def put(word_addr, words):
        data = np.asarray(words, dtype="<u2").tobytes()
        for k in range(0, len(data), step):
            frames.append(_frame(L.Opcode.MEM_WRITE,
                                 L.mem_write_payload(2 * word_addr + k, data[k:k + step])))

    put(WSRC, wwords)
    put(XA, pack_elements(x_m, np.repeat(x_e, b)))
    put(BA, bias)
    put(YA, np.full(tiles * n + ZA - YA, 0xBEEF))
    put(PROG, np.frombuffer(assemble(program), dtype="<u2"))
    for name, value in [("MANT_WIDTH", 8), ("ROUNDING", 0), ("EXP_SELECT", 0),
                        ("LUT_EXP", 0)]:
        frames.append(_frame(L.Opcode.REG_WRITE, L.reg_write_payload(REG[name], value)))
    frames.append(_frame(L.Opcode.LUT_WRITE, bytes([1, 0]) + bytes(int(v) for v in table)))
    frames.append(_frame(L.Opcode.RUN, struct.pack("<II", 2 * PROG, 100)))
    frames.append(_frame(L.Opcode.MEM_READ, L.mem_read_payload(2 * YA, 2 * (ZA - YA + rows))))
    return frames, layer, x_m, x_e, table


def run_frames(port, frames):
    """Send each frame and read its whole reply; returns [(reply bytes, cycles after it)]."""
    out = []
    for data in frames:
        port.write(data)
        head = port.read(4, timeout_cycles=200_000)
        assert len(head) == 4, f"no reply to {data[:8].hex()}"
        rest = port.read(int.from_bytes(head[2:4], "little") + 2, timeout_cycles=10_000)
        out.append((head + rest, port.cycles))
    return out


@pytest.fixture(scope="module")
def full_port():
    """The demo's top in CXXRTL (one library for the demo, the benchmarks and these tests).

    Compiling it takes minutes when it is not cached, so the tests using it are ``slow``: they
    run (and compile) in every slow run, never depending on what an earlier run left behind.
    """
    port = SimulatedSerial(simulator="cxxrtl", **SIM_TOP)
    yield port
    port.close()


@pytest.mark.slow
def test_full_top_run_identical(full_port):
    """A RUN of a MATVEC + LUT program on the demo's top (sequencer, BFP column, quantiser,
    discrete unit, LUT, grand) gives the same reply bytes after the same cycle counts in both
    simulators, with the one-evaluation cycle, and the results equal the golden models."""
    check_full_top(full_port)


def check_full_top(full_port):
    assert full_port._cx.single_eval
    frames, layer, x_m, x_e, table = full_top_session(full_port.top)
    got = run_frames(full_port, frames)
    want = run_frames(SimulatedSerial(**SIM_TOP), frames)
    assert got == want
    status, body = L.decode_reply(got[-2][0])
    assert status == L.Status.OK
    executed, cycles, busy = struct.unpack("<IIII", body)[1:]
    assert executed == 5 and cycles > busy >= 64         # 64 MAC beats at least
    status, body = L.decode_reply(got[-1][0])
    assert status == L.Status.OK
    words = np.frombuffer(body, dtype="<u2").astype(np.int64)
    rows, ygap = layer.w_m.shape[0], ZA - YA
    m, e = bfp_dense(layer, x_m, x_e, full_port.top.column_model())
    gm, ge = unpack_elements(words[:rows])
    assert (gm.tolist(), ge.tolist()) == (m.tolist(), e.tolist())
    assert words[ygap:].tolist() == table[words[:rows] & 0xFF].tolist()


@pytest.mark.slow
def test_limit_past_16_bits(full_port):
    """RUN's 32-bit instruction limit across the sequencer's two 16-bit halves (the high half
    takes the low half's borrow a cycle later): an endless loop stops with LIMIT after exactly
    ``limit`` instructions at limits around 2^16 (about 12 cycles an instruction, up to 1.6
    million cycles a RUN)."""
    loop = np.frombuffer(assemble([I.nop(), I.jump(PROG)]), dtype="<u2")
    run_frames(full_port, [_frame(L.Opcode.MEM_WRITE,
                                  L.mem_write_payload(2 * PROG, loop.tobytes()))])
    for limit in (0xFFFF, 0x1_0000, 0x1_0001, 0x2_0005):
        full_port.write(_frame(L.Opcode.RUN, struct.pack("<II", 2 * PROG, limit)))
        head = full_port.read(4, timeout_cycles=3_000_000)
        assert len(head) == 4, f"no reply to RUN with the limit {limit:#x}"
        status, body = L.decode_reply(head + full_port.read(18, timeout_cycles=10_000))
        pc, executed = struct.unpack("<II", body[:8])
        assert (status, executed, pc) == (L.Status.LIMIT, limit, 2 * PROG + 16 * (limit & 1))


@pytest.mark.slow
def test_exact_cycle_equals_single_eval(full_port):
    """The two-evaluation cycle (``exact=True``) of the same library gives the same replies at
    the same cycles as the default one-evaluation cycle on the full top."""
    frames = full_top_session(full_port.top, seed=6)[0]
    fast = SimulatedSerial(simulator="cxxrtl", **SIM_TOP)
    exact = SimulatedSerial(simulator="cxxrtl", **SIM_TOP)
    exact._cx.close()
    exact._cx = cx.ByteStreamSim(exact.top, exact=True)
    assert fast._cx.single_eval and not exact._cx.single_eval
    assert exact._cx.library == fast._cx.library == full_port._cx.library
    assert run_frames(fast, frames) == run_frames(exact, frames)
    fast.close()
    exact.close()
