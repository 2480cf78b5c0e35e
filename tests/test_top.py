"""The accelerator top in Amaranth's simulator against the protocol model, byte for byte.

Most tests drive the link at the byte-stream level (``Accelerator(uart=False)`` through
``SimulatedSerial(level="byte")``, see sim/transport.py); a few run through the real UART.
"""

import random
from fractions import Fraction

import pytest
from amaranth.back import rtlil
from amaranth.sim import Simulator

from lowbit.hw.registry import build_block
from lowbit.hw.top import Accelerator, MemoryHandler, RegisterHandler, Scratchpad
from lowbit.sim import link as L
from lowbit.sim.rtl.transport import SimulatedSerial

SCRATCH = 256
FRAME = 64
TIMEOUT_BITS = 20
PARAMS = dict(scratch_bytes=SCRATCH, frame_bytes=FRAME, timeout_bits=TIMEOUT_BITS)
TIMEOUT_CYCLES = TIMEOUT_BITS * 12


def make(level="byte", **kw):
    params = {**PARAMS, **kw}
    port = SimulatedSerial(level=level, **params)
    model = L.DeviceModel(scratch_bytes=params["scratch_bytes"],
                          frame_bytes=params["frame_bytes"],
                          use_spram=params.get("use_spram", False))
    return port, model


@pytest.fixture(scope="module")
def shared():
    """One byte-level top and its model for the tests below that compare them: each test
    goes on from the state the previous one left, in both."""
    return make()


def exchange(port, model, data):
    """Send ``data`` to both; the device's reply bytes must equal the model's."""
    expected = model.feed(data)
    port.write(data)
    got = port.read(len(expected), timeout_cycles=4000 + _per_byte(port) * (len(data)
                                                                            + len(expected)))
    assert got == expected
    return got


def _per_byte(port):
    return 1 if port.level == "byte" else 10 * port.top.divisor + 2


def truncate(port, model, data):
    """Send a partial frame and wait out the inter-byte timeout."""
    assert model.feed(data) == b""
    port.write(data)
    port.flush()
    port.idle(TIMEOUT_CYCLES + 50)
    expected = model.timeout()
    assert port.read(len(expected), timeout_cycles=100 + _per_byte(port) * (len(expected) + 1)) \
        == expected
    return expected


def whole_scratchpad(port, size):
    """The device's whole scratchpad, by MEM_READ (does not change the device state)."""
    got = bytearray()
    for addr in range(0, size, FRAME):
        port.write(L.encode_request(L.Opcode.MEM_READ, L.mem_read_payload(addr, FRAME)))
        status, body = L.decode_reply(port.read(FRAME + 6, timeout_cycles=4000 + _per_byte(port)
                                                * (FRAME + 18)))
        assert status == L.Status.OK
        got += body
    return bytes(got)


# -- parameters ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kw, exc, msg", [
    (dict(lanes=True), TypeError, "Lane count must be an integer"),
    (dict(lanes=2.0), TypeError, "Lane count must be an integer"),
    (dict(lanes=0), ValueError, "Lane count must be an integer between 1 and 32, not 0"),
    (dict(lanes=33), ValueError, "between 1 and 32, not 33"),
    (dict(clk_freq="12e6"), TypeError, "Clock frequency must be a number"),
    (dict(clk_freq=0), ValueError, "Clock frequency must be positive"),
    (dict(baud=1e6), TypeError, "Baud rate must be an integer"),
    (dict(baud=0), ValueError, "Baud rate must be a positive integer"),
    (dict(baud=5_000_000), ValueError, "too fast"),
    (dict(clk_freq=18e6, baud=6_500_000), ValueError, "divisor 2.76923 is below 3"),
    (dict(scratch_bytes=4096.0), TypeError, "Scratchpad size must be an integer"),
    (dict(scratch_bytes=1000), ValueError, "power of two between 64 and 65536, not 1000"),
    (dict(scratch_bytes=32), ValueError, "power of two"),
    (dict(scratch_bytes=131072), ValueError, "power of two"),
    (dict(use_spram=True, scratch_bytes=4096), ValueError, "SPRAM scratchpad size must be"),
    (dict(use_spram=1), TypeError, "use_spram must be a bool"),
    (dict(frame_bytes=15), ValueError, "Frame buffer size must be an integer between 16"),
    (dict(frame_bytes=4097), ValueError, "between 16 and 4096, not 4097"),
    (dict(frame_bytes=False), TypeError, "Frame buffer size must be an integer"),
    (dict(timeout_bits=9), ValueError, "Timeout in bit times must be an integer between 10"),
    (dict(timeout_bits=100.0), TypeError, "Timeout in bit times must be an integer"),
    (dict(uart=0), TypeError, "uart must be a bool"),
    (dict(simulation="yes"), TypeError, "simulation must be a bool"),
])
def test_parameter_validation(kw, exc, msg):
    with pytest.raises(exc, match=msg):
        Accelerator(**kw)


@pytest.mark.parametrize("latency,exc,msg", [
    (0, ValueError, "Read latency must be an integer between 1 and 4, not 0"),
    (5, ValueError, "Read latency must be an integer between 1 and 4, not 5"),
    (2.0, TypeError, "Read latency must be an integer between 1 and 4, not 2.0"),
    (True, TypeError, "Read latency must be an integer"),
])
def test_memory_handler_read_latency_validation(latency, exc, msg):
    with pytest.raises(exc, match=msg):
        MemoryHandler(size=4096, frame_bytes=512, addr_width=11, read_latency=latency)


def test_memory_handler_latency_follows_seq_pipelined():
    """The top's memory handler reads the scratchpad with a latency of 3 (its port and the
    memory's output through registers) exactly with the sequencer's ``seq_pipelined``, 4 with
    the block-RAM scratchpad's read register (which comes with it)."""
    assert Accelerator(sequencer=True, seq_pipelined=True).scratch_read_latency == 4
    assert Accelerator(sequencer=True, seq_pipelined=True,
                       use_spram=True).scratch_read_latency == 3
    assert Accelerator(sequencer=True).scratch_read_latency == 1
    assert Accelerator(seq_pipelined=True).scratch_read_latency == 1
    assert MemoryHandler(size=64, frame_bytes=16, addr_width=5, read_latency=3).read_latency == 3


def test_grand_split_stall_follows_seq_pipelined():
    """The top's GRAND unit reads its own copy of its stall (``split_stall``, the register
    ``held`` in its module) exactly with ``seq_pipelined``."""
    def grand_module(**kwargs):
        text = rtlil.convert(Accelerator(sequencer=True, **kwargs))
        return text.split("module \\top.grand.grand\n", 1)[1].split("\nend\n", 1)[0]

    assert "wire width 1 \\held\n" in grand_module(seq_pipelined=True)
    assert "\\held" not in grand_module()


def _unused(component):
    component._MustUse__silence = True   # built to inspect its interface, not elaborated
    return component


def test_defaults_and_properties():
    top = _unused(build_block("top"))
    assert (top.divisor, top.lanes, top.scratch_bytes, top.frame_bytes) == (12, 2, 4096, 512)
    fast = _unused(Accelerator(clk_freq=25e6, baud=3_000_000))
    assert (fast.bit_period, fast.divisor) == (Fraction(25, 3), 8)
    assert (fast.identity.baud, fast.identity.clk_hz) == (3_000_000, 25_000_000)
    assert hasattr(top, "rx") and hasattr(top, "tx") and len(top.leds) == 2
    assert _unused(Accelerator(use_spram=True)).scratch_bytes == 131072
    bytes_top = _unused(Accelerator(uart=False))
    assert hasattr(bytes_top, "i") and not hasattr(bytes_top, "rx")
    regs = _unused(RegisterHandler(top.identity))
    assert {"mant_width", "rounding", "prng_seed0", "exp_select"} <= set(regs.signature.members)
    assert regs.signature.members["mant_width"].init == 8


def test_spram_is_an_instance_for_synthesis():
    text = rtlil.convert(Scratchpad(size=65536, use_spram=True))
    assert text.count("SB_SPRAM256KA") == 2
    assert "SB_SPRAM256KA" not in rtlil.convert(Scratchpad(size=32768, use_spram=True,
                                                           simulation=True))


@pytest.mark.parametrize("size,use_spram,write_addr,read_register", [
    (4096, False, False, False), (32768, True, False, False), (65536, True, False, False),
    (4096, False, True, False), (4096, False, False, True), (65536, False, True, True)])
def test_scratchpad_port_contract(size, use_spram, write_addr, read_register):
    """The scratchpad port (lowbit.hw.ports.ScratchPortSignature), cycle by cycle against a
    dictionary: a write stores its byte lanes; ``rdata`` is the word read by the last cycle
    with ``re`` and without ``we``, and holds through cycles that write or do not read (the
    sequencer's reader keeps a waiting word there). Block RAM and SPRAM banks (the behavioural
    model of the primitive), one bank or two. With a write address of its own (block RAM), a
    cycle writes at ``waddr`` and reads at ``addr``; a read of the word written in the same
    cycle returns its old value. With ``read_register`` (the ULX3S's: banks of 16384 words
    each, two of them at 64 KiB) every ``rdata`` comes a cycle later, from the bank of its
    read."""
    dut = Scratchpad(size=size, use_spram=use_spram, simulation=True, write_addr=write_addr,
                     read_register=read_register)
    assert dut.read_register is read_register
    p = dut.port
    rng = random.Random(size)
    words = size // 2
    hot = [rng.randrange(words) for _ in range(6)] + [0, words - 1, words // 2]
    hot += [words // 2 - 1, 16383 % words, 16384 % words]
    mem = {}
    trace = []

    async def bench(ctx):
        want = late = None
        for _ in range(400):
            we, re = rng.random() < 0.35, rng.random() < 0.6
            addr, data, mask = rng.choice(hot), rng.getrandbits(16), rng.randrange(4)
            waddr = rng.choice(hot) if write_addr else addr
            ctx.set(p.addr, addr)
            if write_addr:
                ctx.set(p.waddr, waddr)
            ctx.set(p.we, we)
            ctx.set(p.re, re)
            ctx.set(p.wdata, data)
            ctx.set(p.wmask, mask)
            await ctx.tick()
            if re and (write_addr or not we):
                want = mem.get(addr, 0)
            if we:
                old = mem.get(waddr, 0)
                for lane in range(2):
                    if mask >> lane & 1:
                        old = old & ~(0xFF << 8 * lane) | data & (0xFF << 8 * lane)
                mem[waddr] = old
            if read_register:
                if late is not None:
                    trace.append((ctx.get(p.rdata), late))
                late = want
            elif want is not None:
                trace.append((ctx.get(p.rdata), want))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert len(trace) > 300 and all(got == want for got, want in trace)
    if write_addr:
        with pytest.raises(ValueError, match="SPRAM has one address"):
            Scratchpad(size=32768, use_spram=True, write_addr=True)
        with pytest.raises(TypeError, match="write_addr must be a bool, not 1"):
            Scratchpad(write_addr=1)
    if read_register:
        with pytest.raises(ValueError, match="A read register needs the block-RAM scratchpad"):
            Scratchpad(size=32768, use_spram=True, read_register=True)
        with pytest.raises(TypeError, match="read_register must be a bool, not 'on'"):
            Scratchpad(read_register="on")
        banks = [n for n in rtlil.convert(dut).split() if n.startswith("\\bank") and
                 "q" not in n]
        assert len(set(banks)) == max(words // 16384, 1), banks


# -- every opcode -------------------------------------------------------------------------------

def test_every_opcode_matches_model(shared):
    port, model = shared
    rq = L.encode_request
    exchange(port, model, rq(L.Opcode.PING))
    exchange(port, model, rq(L.Opcode.PING, bytes(range(FRAME))))
    got = exchange(port, model, rq(L.Opcode.IDENTIFY))
    ident = L.Identity.from_bytes(L.decode_reply(got)[1])
    assert (ident.magic, ident.scratch_bytes, ident.frame_bytes, ident.lanes) == \
        (b"LOWB", SCRATCH, FRAME, 2)
    exchange(port, model, rq(L.Opcode.IDENTIFY, b"x"))                  # BAD_LENGTH
    for reg in L.REGISTERS:
        exchange(port, model, rq(L.Opcode.REG_READ, L.reg_read_payload(reg.index)))
        exchange(port, model, rq(L.Opcode.REG_WRITE, L.reg_write_payload(reg.index, 0xA5C3F00F)))
        got = exchange(port, model, rq(L.Opcode.REG_READ, L.reg_read_payload(reg.index)))
        value = int.from_bytes(L.decode_reply(got)[1], "little")
        if reg.access == "rw":
            assert value == 0xA5C3F00F & ((1 << reg.width) - 1)
    exchange(port, model, rq(L.Opcode.REG_READ, L.reg_read_payload(0x0F)))   # BAD_ADDRESS
    for alias in (0x4010, 0x0100 | L.REGISTER_BY_NAME["PRNG_SEED0"].index):  # BAD_ADDRESS
        exchange(port, model, rq(L.Opcode.REG_WRITE, L.reg_write_payload(alias, 3)))
        exchange(port, model, rq(L.Opcode.REG_READ, L.reg_read_payload(alias)))
    got = exchange(port, model, rq(L.Opcode.REG_READ, L.reg_read_payload(0x10)))
    assert int.from_bytes(L.decode_reply(got)[1], "little") == 0xF   # MANT_WIDTH unchanged
    exchange(port, model, rq(L.Opcode.REG_WRITE, b"\x10\x00\x01"))          # BAD_LENGTH
    exchange(port, model, rq(L.Opcode.MEM_WRITE, L.mem_write_payload(5, b"\x01\x02\x03")))
    exchange(port, model, rq(L.Opcode.MEM_WRITE, L.mem_write_payload(SCRATCH - 1, b"\xEE")))
    exchange(port, model, rq(L.Opcode.MEM_WRITE, L.mem_write_payload(7, b"")))
    exchange(port, model, rq(L.Opcode.MEM_READ, L.mem_read_payload(0, 12)))
    exchange(port, model, rq(L.Opcode.MEM_READ, L.mem_read_payload(SCRATCH - 3, 3)))
    exchange(port, model, rq(L.Opcode.MEM_READ, L.mem_read_payload(4, 0)))
    for opcode in (0x00, 0x03, 0x12, 0x26, 0x40, 0x7F, 0xFF):
        exchange(port, model, rq(opcode, b"abc"))                       # BAD_OPCODE
    assert model.scratch[5:8] == b"\x01\x02\x03"
    # The counters are registers too: the error replies so far were counted.
    got = exchange(port, model, rq(L.Opcode.REG_READ, L.reg_read_payload(0x06)))
    assert int.from_bytes(L.decode_reply(got)[1], "little") == model.errors > 10
    port.idle(50)
    assert port.in_waiting == 0


@pytest.mark.parametrize("top", [{}, {"sequencer": True, "seq_pipelined": True}],
                         ids=["latency1", "latency4"])
def test_packed_transfers_match_model(top):
    """MEM_WRITE_LOW / MEM_FILL_HIGH / MEM_READ_LOW / MEM_READ_HIGH against the model: lanes,
    spans (block 4, tile 8 words), every refusal, and the scratchpad afterwards. ``latency4``:
    the memory handler's port, the scratchpad's banks' outputs and its output through
    registers (``seq_pipelined``, :class:`lowbit.hw.top.MemoryHandler` ``read_latency=4``)."""
    rng = random.Random(5)
    port = SimulatedSerial(level="byte", **PARAMS, block=4, matrix_lanes=8, **top)
    model = L.DeviceModel(**PARAMS, block=4, matrix_lanes=8, **top)
    rq, op = L.encode_request, L.Opcode
    init = bytes(rng.randrange(256) for _ in range(SCRATCH))
    for addr in range(0, SCRATCH, FRAME - 4):
        exchange(port, model, rq(op.MEM_WRITE,
                                 L.mem_write_payload(addr, init[addr:addr + FRAME - 4])))
    for code, addr, data in [
            (op.MEM_FILL_HIGH, 8, b"\x81\x7f\x00"), (op.MEM_WRITE_LOW, 10, bytes(range(1, 30))),
            (op.MEM_FILL_HIGH, SCRATCH - 8, b"\x33"), (op.MEM_WRITE_LOW, SCRATCH - 2, b"\x44"),
            (op.MEM_WRITE_LOW, 0, b""), (op.MEM_FILL_HIGH, 2, b""),
            (op.MEM_WRITE_LOW, 1, b"\x01"), (op.MEM_FILL_HIGH, SCRATCH, b"\x01"),
            (op.MEM_WRITE_LOW, SCRATCH - 8, bytes(5)), (op.MEM_FILL_HIGH, SCRATCH - 6, b"\x01"),
            (op.MEM_FILL_HIGH, 0, bytes(FRAME - 4))]:
        exchange(port, model, rq(code, L.mem_write_payload(addr, data)))
    exchange(port, model, rq(op.MEM_WRITE_LOW, b"\x00\x00"))
    for code, addr, count in [
            (op.MEM_READ_LOW, 8, 40), (op.MEM_READ_LOW, SCRATCH - 2, 1), (op.MEM_READ_LOW, 0, 0),
            (op.MEM_READ_LOW, 0, FRAME), (op.MEM_READ_LOW, 0, FRAME + 1),
            (op.MEM_READ_HIGH, 0, 16), (op.MEM_READ_HIGH, 8, 15), (op.MEM_READ_HIGH, 8, 16),
            (op.MEM_READ_HIGH, SCRATCH - 16, 1), (op.MEM_READ_HIGH, 3, 1),
            (op.MEM_READ_LOW, 1 << 20, 1), (op.MEM_READ_HIGH, SCRATCH - 14, 1)]:
        exchange(port, model, rq(code, L.mem_read_payload(addr, count)))
    exchange(port, model, rq(op.MEM_READ_HIGH, L.mem_read_payload(0, 1) + b"\x00"))
    assert whole_scratchpad(port, SCRATCH) == bytes(model.scratch)
    port.idle(50)
    assert port.in_waiting == 0


def _boundary_requests(model):
    """``(request, status)``: each length and range the link and its handlers check, at the
    last valid value and one past it (documented statuses, docs/protocol.md)."""
    import struct
    rq, S = L.encode_request, L.Status
    tables, lanes = model.design.lut_tables, model.identity.lanes
    data = bytes(range(7, 7 + FRAME - 4))
    last_reg = max(r.index for r in L.REGISTERS)
    return [
        # MEM_WRITE: a full frame ending on the last byte; one byte further; the address.
        (rq(L.Opcode.MEM_WRITE, L.mem_write_payload(SCRATCH - len(data), data)), S.OK),
        (rq(L.Opcode.MEM_WRITE, L.mem_write_payload(SCRATCH - len(data) + 1, data)),
         S.BAD_LENGTH),
        (rq(L.Opcode.MEM_WRITE, L.mem_write_payload(SCRATCH - 1, b"\x5c")), S.OK),
        (rq(L.Opcode.MEM_WRITE, L.mem_write_payload(SCRATCH, b"\x5c")), S.BAD_ADDRESS),
        (rq(L.Opcode.MEM_WRITE, L.mem_write_payload(SCRATCH - 1, b"")), S.OK),
        (rq(L.Opcode.MEM_WRITE, L.mem_write_payload(SCRATCH, b"")), S.BAD_ADDRESS),
        (rq(L.Opcode.MEM_WRITE, b"\x00\x00\x00"), S.BAD_LENGTH),
        (rq(L.Opcode.MEM_WRITE, L.mem_write_payload(0, data + b"!")), S.BAD_LENGTH),
        # MEM_READ: the last byte, one past it, a whole frame at the end, one byte more.
        (rq(L.Opcode.MEM_READ, L.mem_read_payload(SCRATCH - 1, 1)), S.OK),
        (rq(L.Opcode.MEM_READ, L.mem_read_payload(SCRATCH - 1, 2)), S.BAD_LENGTH),
        (rq(L.Opcode.MEM_READ, L.mem_read_payload(SCRATCH, 0)), S.BAD_ADDRESS),
        (rq(L.Opcode.MEM_READ, L.mem_read_payload(SCRATCH - FRAME, FRAME)), S.OK),
        (rq(L.Opcode.MEM_READ, L.mem_read_payload(0, FRAME + 1)), S.BAD_LENGTH),
        # PING: the frame buffer's size, then one byte more (drained).
        (rq(L.Opcode.PING, data + bytes(4)), S.OK),
        (rq(L.Opcode.PING, data + bytes(5)), S.BAD_LENGTH),
        # Registers: the last index, one past it; REG_WRITE's length.
        (rq(L.Opcode.REG_READ, L.reg_read_payload(last_reg)), S.OK),
        (rq(L.Opcode.REG_READ, L.reg_read_payload(last_reg + 1)), S.BAD_ADDRESS),
        (rq(L.Opcode.REG_WRITE, L.reg_write_payload(last_reg, 9)[:6]), S.OK),
        (rq(L.Opcode.REG_WRITE, L.reg_write_payload(last_reg, 9) + b"\x00"), S.BAD_LENGTH),
        # LUT_WRITE: the last table, the last entries; LUT_APPLY's table.
        (rq(L.Opcode.LUT_WRITE, bytes([tables - 1, 200]) + bytes(range(56))), S.OK),
        (rq(L.Opcode.LUT_WRITE, bytes([tables - 1, 201]) + bytes(range(56))), S.BAD_LENGTH),
        (rq(L.Opcode.LUT_WRITE, bytes([tables, 0]) + bytes(4)), S.BAD_ADDRESS),
        (rq(L.Opcode.LUT_APPLY, bytes([tables - 1, 255, 200, 0])), S.OK),
        (rq(L.Opcode.LUT_APPLY, bytes([tables, 255])), S.BAD_ADDRESS),
        # GRAND: a reply of exactly the frame buffer (f16, f32), one sample more; the format;
        # the seed's length.
        (rq(L.Opcode.GRAND_SAMPLES, struct.pack("<HB", FRAME // 2, 0)), S.OK),
        (rq(L.Opcode.GRAND_SAMPLES, struct.pack("<HB", FRAME // 2 + 1, 0)), S.BAD_LENGTH),
        (rq(L.Opcode.GRAND_SAMPLES, struct.pack("<HB", FRAME // 4, 1)), S.OK),
        (rq(L.Opcode.GRAND_SAMPLES, struct.pack("<HB", FRAME // 4 + 1, 1)), S.BAD_LENGTH),
        (rq(L.Opcode.GRAND_SAMPLES, struct.pack("<HB", 1, 2)), S.BAD_ADDRESS),
        (rq(L.Opcode.GRAND_SEED, bytes(range(1, 16 * lanes + 1))), S.OK),
        (rq(L.Opcode.GRAND_SEED, bytes(range(1, 16 * lanes + 2))), S.BAD_LENGTH),
    ]


def test_boundaries_match_model(shared):
    """Every length and range the link checks, at its last valid value and one past it: the
    documented status, the model's reply byte for byte, and afterwards the model's whole
    scratchpad (the failures wrote nothing)."""
    port, model = shared
    for request, status in _boundary_requests(model):
        got = exchange(port, model, request)
        if model.in_frame:                      # not expected: every request is whole
            truncate(port, model, b"")
        assert L.decode_reply(got)[0] == status, request.hex()
    assert whole_scratchpad(port, SCRATCH) == bytes(model.scratch)
    assert model.scratch[SCRATCH - 1] == 0x5C


# -- identification registers -------------------------------------------------------------------

@pytest.mark.parametrize("board", ["icebreaker", pytest.param("ulx3s", marks=pytest.mark.slow)])
def test_identification_registers_match_model(board):
    """Every read-only register of the top built with a board profile's parameters reads the
    model's value; ID_MATRIX / ID_ENGINE decode to the profile's generator parameters."""
    from lowbit.boards.profiles import get_board
    top = dict(get_board(board).top)
    port = SimulatedSerial(level="byte", **top)
    model = L.DeviceModel(**top)
    values = {}
    for reg in L.REGISTERS:
        if reg.access == "ro":
            got = exchange(port, model, L.encode_request(L.Opcode.REG_READ,
                                                         L.reg_read_payload(reg.index)))
            values[reg.name] = int.from_bytes(L.decode_reply(got)[1], "little")
    assert values["ID_VERSION"] >> 8 == L.DESIGN_VERSION[0] | L.DESIGN_VERSION[1] << 8
    params = L.decode_design_registers(values["ID_MATRIX"], values["ID_ENGINE"])
    for name in ("matrix_lanes", "block", "max_blocks", "weight_depth", "lut_tables",
                 "code_bits", "bfp_stochastic", "bfp_predictor"):
        assert params[name] == top.get(name, L.DESIGN_PARAMS[name]), name
    from lowbit.sim.grand import MODES
    assert params["grand_modes"] == tuple(m for m in MODES if m in top.get("grand_modes", MODES))
    assert values["ID_MATRIX"] == L.design_registers(**port.top.design_params())["ID_MATRIX"]


def test_register_handler_design_parameter():
    ident = _unused(Accelerator()).identity
    with pytest.raises(TypeError, match="Design parameters must be a dict"):
        RegisterHandler(ident, [("block", 8)])
    with pytest.raises(ValueError, match="block must be a power of two, not 12"):
        RegisterHandler(ident, dict(block=12))
    with pytest.raises(TypeError, match="read_register must be a bool, not 1"):
        RegisterHandler(ident, read_register=1)


# -- robustness ---------------------------------------------------------------------------------

def _garbage(rng, n):
    return bytes(rng.choice([b for b in range(256) if b != L.SOF_REQUEST]) for _ in range(n))


def _bad_frames(rng):
    """(kind, bytes) of every kind of bad input, with a random good frame among them."""
    rq = L.encode_request
    addr = rng.randrange(SCRATCH)
    data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, FRAME - 4)))
    good = rq(L.Opcode.MEM_WRITE, L.mem_write_payload(addr, data[:SCRATCH - addr]))
    flipped = bytearray(good)
    flipped[rng.randrange(1, len(good))] ^= 1 << rng.randrange(8)
    return [
        ("garbage", _garbage(rng, rng.randrange(1, 8))),
        ("bad_crc", bytes(flipped)),
        ("bad_opcode", rq(rng.choice([0x05, 0x30, 0x41, 0x99]), data[:8])),
        ("bad_address", rq(L.Opcode.MEM_WRITE, L.mem_write_payload(SCRATCH + addr, data))),
        ("bad_address_huge", rq(L.Opcode.MEM_READ, L.mem_read_payload(0xFFFFFFFF, 1))),
        ("past_end", rq(L.Opcode.MEM_WRITE, L.mem_write_payload(SCRATCH - 2, data[:3] + b"xy"))),
        ("read_past_end", rq(L.Opcode.MEM_READ, L.mem_read_payload(SCRATCH - 4, 5))),
        ("read_too_long", rq(L.Opcode.MEM_READ, L.mem_read_payload(0, FRAME + 1))),
        ("short_payload", rq(L.Opcode.MEM_WRITE, b"\x01\x00")),
        ("read_only", rq(L.Opcode.REG_WRITE, L.reg_write_payload(0x00, 1))),
        ("oversized", bytes([L.SOF_REQUEST, L.Opcode.PING]) + (FRAME + 1).to_bytes(2, "little")
         + _garbage(rng, FRAME + 3)),
        ("good", good),
    ]


@pytest.mark.parametrize("seed, level", [
    (1, "byte"),
    *[pytest.param(seed, "byte", marks=pytest.mark.slow) for seed in range(2, 11)],
    pytest.param(11, "uart", marks=pytest.mark.slow),
])
def test_robustness_against_model(shared, seed, level):
    """Garbage, bad CRCs, bad opcodes, bad addresses and lengths, truncated frames: each gets
    the model's reply or is skipped, the next good command works, and the scratchpad equals
    the model's, i.e. nothing outside the addressed regions of good writes changed."""
    rng = random.Random(seed)
    port, model = shared if level == "byte" else make(level)
    init = bytes(rng.randrange(256) for _ in range(SCRATCH))
    for addr in range(0, SCRATCH, FRAME - 4):
        exchange(port, model, L.encode_request(
            L.Opcode.MEM_WRITE, L.mem_write_payload(addr, init[addr:addr + FRAME - 4])))
    events = _bad_frames(rng) * 2
    rng.shuffle(events)
    for kind, data in events:
        before = bytes(model.scratch)
        exchange(port, model, data)
        if kind != "good":
            assert model.scratch == before, kind
        if model.in_frame:
            # A corrupted length field left the frame open: the host waits out the timeout.
            truncate(port, model, b"")
        if rng.random() < 0.3:
            cut = rng.randrange(1, 9)
            truncate(port, model, L.encode_request(L.Opcode.MEM_WRITE,
                                                   L.mem_write_payload(0, b"\0" * 8))[:cut])
        # The link resynchronised: a good PING right after works.
        got = exchange(port, model, L.encode_request(L.Opcode.PING, kind.encode()))
        assert L.decode_reply(got) == (L.Status.OK, kind.encode())
    assert whole_scratchpad(port, SCRATCH) == bytes(model.scratch)
    for name in ("LINK_SKIPPED", "LINK_ERRORS"):
        exchange(port, model, L.encode_request(
            L.Opcode.REG_READ, L.reg_read_payload(L.REGISTER_BY_NAME[name].index)))
    assert model.skipped > 0 and model.errors > 0
    port.idle(50)
    assert port.in_waiting == 0


def test_truncated_and_drained_frames(shared):
    port, model = shared
    rq = L.encode_request
    frame = rq(L.Opcode.MEM_WRITE, L.mem_write_payload(10, b"0123456789"))
    for cut in (1, 2, 3, 4, 9, len(frame) - 1):
        assert L.decode_reply(truncate(port, model, frame[:cut]))[0] == L.Status.TRUNCATED
    # An oversized length is drained: len + 2 bytes, or until the timeout.
    header = bytes([L.SOF_REQUEST, L.Opcode.PING]) + (1000).to_bytes(2, "little")
    assert L.decode_reply(truncate(port, model, header + b"\x00" * 7))[0] == L.Status.BAD_LENGTH
    big = bytes([L.SOF_REQUEST, L.Opcode.PING]) + (FRAME + 100).to_bytes(2, "little")
    exchange(port, model, big + bytes([L.SOF_REQUEST]) * (FRAME + 102))
    # SOF inside garbage starts a frame that times out; afterwards all is well again.
    truncate(port, model, b"\x00\x11" + bytes([L.SOF_REQUEST]) + b"\x22")
    exchange(port, model, frame)
    assert whole_scratchpad(port, SCRATCH) == bytes(model.scratch)
    assert model.scratch[10:20] == b"0123456789"


def test_leds(shared):
    port, _ = shared
    port.write(L.encode_request(0x99))
    port.read(6, timeout_cycles=2000)
    assert port.leds == 0b11          # activity and error
    port.write(L.encode_request(L.Opcode.PING))
    port.read(6, timeout_cycles=2000)
    assert port.leds == 0b01          # an OK reply clears the error LED


def test_spram_scratchpad_across_banks():
    port, model = make(use_spram=True, scratch_bytes=65536)
    data = bytes(range(40, 60))
    for addr in (32760, 65536 - len(data), 0):
        exchange(port, model, L.encode_request(L.Opcode.MEM_WRITE,
                                               L.mem_write_payload(addr, data)))
    for addr in (32752, 65536 - 32, 0, 32767):
        exchange(port, model, L.encode_request(L.Opcode.MEM_READ, L.mem_read_payload(addr, 32)))
    exchange(port, model, L.encode_request(L.Opcode.MEM_READ, L.mem_read_payload(65536, 1)))


# -- through the real UART ----------------------------------------------------------------------

@pytest.mark.parametrize("baud_error", [pytest.param(-0.02, marks=pytest.mark.slow), 0.02])
def test_uart_level_commands(baud_error):
    """4 Mbaud at 12 MHz (divisor 3, the UART's smallest: the fewest simulated cycles a byte)
    with the host's clock 2 % off either way."""
    port = SimulatedSerial(level="uart", baud_error=baud_error, baud=4_000_000, **PARAMS)
    assert port.top.divisor == 3
    model = L.DeviceModel(scratch_bytes=SCRATCH, frame_bytes=FRAME)
    rq = L.encode_request
    exchange(port, model, rq(L.Opcode.PING, b"\x00\xff\x55\xaa" + bytes([L.SOF_REQUEST])))
    exchange(port, model, rq(L.Opcode.MEM_WRITE, L.mem_write_payload(3, b"\x80\x01")))
    exchange(port, model, b"\x13\x37" + rq(L.Opcode.MEM_READ, L.mem_read_payload(2, 4)))
    exchange(port, model, rq(L.Opcode.REG_READ, L.reg_read_payload(0x07)))  # no UART errors


def _line_levels(data, bit, t0=0.0):
    """Per-cycle levels of 8N1 bytes ``data`` back to back at a fractional bit period, the
    first start edge at time ``t0`` (cycles); returns (levels, end time)."""
    levels, t = [], t0
    for byte in data:
        for lv in [0] + [byte >> k & 1 for k in range(8)] + [1]:
            t += bit
            levels.extend([lv] * (int(t) - int(t - bit)))
    return levels, t


def _run_back_to_back(clk_freq, baud, error, frames, ddr=False):
    """A host ``error`` off that starts each request in the cycle after the previous reply's
    stop bit was sampled (no idle gap) and decodes ``tx`` at its own bit period. With ``ddr``
    the top's receiver takes the line at both clock edges (``uart_ddr``: ``rx`` gets the
    levels at ``c`` and ``c + 1/2``). Returns the replies, the model's, the cycle of every
    reply byte's start edge per reply, and the device's bit period."""
    top = Accelerator(clk_freq=clk_freq, baud=baud, simulation=True, uart_ddr=ddr, **PARAMS)
    model = L.DeviceModel(clk_freq=clk_freq, baud=baud, uart_ddr=ddr, **PARAMS)
    expected = [model.feed(f) for f in frames]
    bit = float(top.bit_period) * (1 + error)
    samples = [int((k + 0.5) * bit) for k in range(10)]
    replies, edges = [], []

    async def bench(ctx):
        now = 0
        for frame, want in zip(frames, expected, strict=True):
            if ddr:
                half, _ = _line_levels(frame, 2 * bit, t0=0.0)
                half += [1] * (len(half) % 2)
                levels = [half[j] | half[j + 1] << 1 for j in range(0, len(half), 2)]
            else:
                levels, _ = _line_levels(frame, bit, t0=0.0)
            got, starts, count, byte = bytearray(), [], None, 0
            k = 0
            while len(got) < len(want):
                ctx.set(top.rx, levels[k] if k < len(levels) else 3 if ddr else 1)
                k += 1
                _, _, tx = await ctx.tick().sample(top.tx)
                now += 1
                if count is None:
                    if not tx:
                        count, byte = 0, 0
                        starts.append(now)
                    continue
                count += 1
                if count == samples[9]:
                    assert tx, "framing error in the reply"
                    got.append(byte)
                    count = None
                elif count in samples[1:9]:
                    byte |= tx << (samples.index(count) - 1)
            replies.append(bytes(got))
            edges.append(starts)

    sim = Simulator(top)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return replies, expected, edges, float(top.bit_period)


@pytest.mark.parametrize("clk_freq, baud, error, ddr", [
    (24e6, 12_000_000, -0.02, True),              # iCEBreaker: 2 cycles per bit, uart_ddr
    pytest.param(24e6, 12_000_000, 0.02, True, marks=pytest.mark.slow),
    pytest.param(18e6, 4_000_000, -0.02, False, marks=pytest.mark.slow),   # 9/2 per bit
    pytest.param(25e6, 3_000_000, 0.02, False, marks=pytest.mark.slow),   # ULX3S: 25/3
    pytest.param(18e6, 4_000_000, 0.02, False, marks=pytest.mark.slow),
    pytest.param(25e6, 3_000_000, -0.02, False, marks=pytest.mark.slow),
    pytest.param(12e6, 4_000_000, 0.02, False, marks=pytest.mark.slow),   # 3 cycles per bit
])
def test_back_to_back_frames_at_line_rate(clk_freq, baud, error, ddr):
    """Requests back to back at the boards' rates, each starting the cycle after the previous
    reply's stop bit was sampled, from a host 2 % off: every reply equals the model's, its
    bytes leave with no idle gap (start edges 10 bit periods apart), and nothing overran
    (UART_ERRORS 0)."""
    rq, op = L.encode_request, L.Opcode
    rng = random.Random(baud)
    data = bytes(rng.randrange(256) for _ in range(40))
    frames = [rq(op.MEM_WRITE, L.mem_write_payload(0, data)),
              rq(op.MEM_FILL_HIGH, L.mem_write_payload(64, data[:4])),
              rq(op.MEM_WRITE_LOW, L.mem_write_payload(64, data[4:40])),
              rq(op.MEM_READ_LOW, L.mem_read_payload(64, 40)),
              rq(op.PING, data),
              rq(op.MEM_READ, L.mem_read_payload(0, 40)),
              rq(op.IDENTIFY),
              rq(op.REG_READ, L.reg_read_payload(L.REGISTER_BY_NAME["UART_ERRORS"].index))]
    replies, expected, edges, period = _run_back_to_back(clk_freq, baud, error, frames, ddr)
    assert replies == expected
    for starts in edges:
        gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
        assert all(abs(g - 10 * period) <= 1 for g in gaps), gaps
        assert abs(starts[-1] - starts[0] - 10 * period * len(gaps)) < 1, gaps


def test_register_config_port_and_prng_load():
    """The second write port (the sequencer's CONFIG): ``ok`` only for read-write registers,
    bits above the width dropped, and ``prng_load`` in the cycle after PRNG_SEED3 is written
    (the write lands one cycle after ``we``, so the pulse comes two cycles after it, when the
    seed register holds the new value)."""
    from amaranth.sim import Simulator

    ident = Accelerator().identity
    dut = RegisterHandler(ident)
    seen = []

    async def bench(ctx):
        # 0x4010 aliases MANT_WIDTH (0x10) in the low bits: the whole index is decoded.
        for name, value, ok in [("MANT_WIDTH", 0x1235, 1), ("ID_MAGIC", 7, 0), (0x99, 7, 0),
                                (0x4010, 9, 0), ("PRNG_SEED3", 0xCAFE, 1)]:
            index = name if isinstance(name, int) else L.REGISTER_BY_NAME[name].index
            ctx.set(dut.cfg.index, index)
            ctx.set(dut.cfg.value, value)
            assert ctx.get(dut.cfg.ok) == ok
            ctx.set(dut.cfg.we, 1)
            await ctx.tick()
            ctx.set(dut.cfg.we, 0)
            seen.append(ctx.get(dut.prng_load))
            await ctx.tick()
            seen.append(ctx.get(dut.prng_load))
            if seen[-1]:
                assert ctx.get(dut.prng_seed3) == 0xCAFE
        assert ctx.get(dut.mant_width) == 0x5
        assert ctx.get(dut.prng_seed3) == 0xCAFE

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [0, 0, 0, 0, 0, 0, 0, 0, 0, 1]


@pytest.mark.parametrize("read_register", [False, True])
def test_registers_keep_their_values_across_a_reset(read_register):
    """REG_READ answers from a block-RAM copy of the registers, which a reset cannot clear; so
    the read-write registers are not reset either (only initialised when the design starts),
    and a read after a reset returns exactly what the engines see. With ``read_register`` (the
    ULX3S's) the same answers, each from a register of the copy's output, a cycle later."""
    from amaranth.hdl import ClockDomain, Module
    from amaranth.sim import Simulator

    ident = Accelerator().identity
    dut = RegisterHandler(ident, read_register=read_register)
    assert dut.read_register is read_register
    m = Module()
    m.domains.sync = cd = ClockDomain()
    m.submodules.dut = dut
    c = dut.command

    async def command(ctx, opcode, payload):
        # The handler reads its arguments from ``args``, the link's copy of the payload's
        # first bytes, not from ``arg``.
        ctx.set(dut.args, int.from_bytes(payload[:6], "little"))
        ctx.set(c.cmd.payload, {"opcode": opcode, "length": len(payload)})
        ctx.set(c.cmd.valid, 1)
        await ctx.tick().until(c.cmd.ready)
        ctx.set(c.cmd.valid, 0)
        ctx.set(c.resp.ready, 1)
        status, length = await ctx.tick().sample(c.resp.payload.status,
                                                 c.resp.payload.length).until(c.resp.valid)
        ctx.set(c.resp.ready, 0)
        ctx.set(c.data.ready, 1)
        data = []
        while len(data) < length:
            (byte,) = await ctx.tick().sample(c.data.payload).until(c.data.valid)
            data.append(byte)
        ctx.set(c.data.ready, 0)
        return status, int.from_bytes(bytes(data), "little")

    mant = L.REGISTER_BY_NAME["MANT_WIDTH"]
    seed0 = L.REGISTER_BY_NAME["PRNG_SEED0"]
    ok = L.Status.OK
    log = []

    async def bench(ctx):
        # Power-on: reset values, from the copy's initial contents.
        log.append(await command(ctx, L.Opcode.REG_READ, L.reg_read_payload(mant.index)))
        for r, v in [(mant, 0x1233), (seed0, 0xDEADBEEF)]:
            assert (await command(ctx, L.Opcode.REG_WRITE, L.reg_write_payload(r.index, v)))[0] \
                == ok
        ctx.set(cd.rst, 1)
        await ctx.tick()
        ctx.set(cd.rst, 0)
        log.append((ctx.get(dut.mant_width), ctx.get(dut.prng_seed0)))
        log.append(await command(ctx, L.Opcode.REG_READ, L.reg_read_payload(mant.index)))
        log.append(await command(ctx, L.Opcode.REG_READ, L.reg_read_payload(seed0.index)))
        log.append(await command(ctx, L.Opcode.REG_READ, L.reg_read_payload(0)))
        # The second writer (CONFIG) updates the copy too.
        ctx.set(dut.cfg.index, mant.index)
        ctx.set(dut.cfg.value, 5)
        ctx.set(dut.cfg.we, 1)
        await ctx.tick()
        ctx.set(dut.cfg.we, 0)
        log.append(await command(ctx, L.Opcode.REG_READ, L.reg_read_payload(mant.index)))
        # IDENTIFY streams the record's words from the copy, the next read while one is sent.
        log.append(await command(ctx, L.Opcode.IDENTIFY, b""))

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    magic = int.from_bytes(b"LOWB", "little")
    assert log == [(ok, mant.reset), (0x3, 0xDEADBEEF), (ok, 0x3), (ok, 0xDEADBEEF), (ok, magic),
                   (ok, 5), (ok, int.from_bytes(ident.to_bytes(), "little"))]


@pytest.mark.parametrize("level", ["byte", "uart"])
def test_read_stops_at_the_cycle_of_the_last_byte(level):
    """``SimulatedSerial.read(n)`` simulates up to the cycle in which the ``n``-th byte came out
    of the top and no further (as pyserial's read returns once it has ``n`` bytes): the reply's
    next byte is not there yet, and a reply read a byte at a time ends on the same cycle as one
    read whole. A read that times out has simulated exactly its ``timeout_cycles``."""
    request = L.encode_request(L.Opcode.PING, bytes(range(20)))
    reply = L.DeviceModel(**PARAMS).feed(request)
    extra = {"baud": 4_000_000} if level == "uart" else {}
    ends = []
    for step in (len(reply), 1):
        port = SimulatedSerial(level=level, **PARAMS, **extra)
        port.write(request)
        got = b""
        while len(got) < len(reply):
            got += port.read(min(step, len(reply) - len(got)), timeout_cycles=5000)
            if len(got) < len(reply):
                assert port.in_waiting == 0
        assert got == reply
        ends.append(port.cycles)
        before = port.cycles
        assert port.read(1, timeout_cycles=37) == b"" and port.cycles == before + 37
    assert ends[0] == ends[1]
