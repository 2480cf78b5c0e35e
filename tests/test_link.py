"""Protocol model (sim/link.py), CRC-16 gateware, and the link's stream behaviour."""

import random
from pathlib import Path

import numpy as np
import pytest
from amaranth.back import rtlil
from amaranth.sim import Simulator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lowbit.hw.crc import CRC16
from lowbit.hw.link import Dispatcher, HostLink
from lowbit.hw.registry import build_block
from lowbit.hw.top import Accelerator
from lowbit.sim import link as L
from lowbit.sim.rtl.harness import run_stream

# -- CRC ----------------------------------------------------------------------------------------


def _crc_bitwise(data, crc=0xFFFF):
    """CRC-16/CCITT-FALSE straight from the definition, independent of the table model."""
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021 if crc & 0x8000 else crc << 1) & 0xFFFF
    return crc


def test_crc_model_check_value():
    assert L.crc16(b"123456789") == 0x29B1
    assert L.crc16(b"") == 0xFFFF
    rng = random.Random(0)
    for n in range(40):
        data = bytes(rng.randrange(256) for _ in range(n))
        assert L.crc16(data) == _crc_bitwise(data)
        assert L.crc16(data[n // 2:], L.crc16(data[:n // 2])) == L.crc16(data)


def _run_crc(chunks):
    """Feed byte chunks to the CRC16 gateware, clearing between chunks; CRC after each byte."""
    dut = CRC16()
    out = []

    async def bench(ctx):
        for chunk in chunks:
            ctx.set(dut.clear, 1)
            await ctx.tick()
            ctx.set(dut.clear, 0)
            seen = []
            for k, byte in enumerate(chunk):
                ctx.set(dut.data, byte)
                ctx.set(dut.en, 1)
                await ctx.tick()
                if k % 3 == 2:       # an idle cycle must not change the CRC
                    ctx.set(dut.en, 0)
                    ctx.set(dut.data, 0x5A)
                    await ctx.tick()
                seen.append(ctx.get(dut.crc))
            ctx.set(dut.en, 0)
            out.append(seen)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return out


def test_crc_gateware_matches_model():
    rng = random.Random(1)
    chunks = [b"123456789", bytes(range(256)), bytes(rng.randrange(256) for _ in range(50))]
    for chunk, seen in zip(chunks, _run_crc(chunks), strict=True):
        assert seen == [L.crc16(chunk[:k + 1]) for k in range(len(chunk))]
    assert _run_crc([b"123456789"])[0][-1] == 0x29B1


def test_crc_clear_wins_over_en():
    """``clear`` and ``en`` in the same cycle (the docstring: ``clear`` wins): the register
    restarts at 0xFFFF and the byte offered in that cycle is not shifted in; ``en`` alone
    continues from there."""
    dut = CRC16()
    seen = []

    async def bench(ctx):
        ctx.set(dut.en, 1)
        for byte in b"12":
            ctx.set(dut.data, byte)
            await ctx.tick()
        seen.append(ctx.get(dut.crc))
        ctx.set(dut.clear, 1)
        ctx.set(dut.data, 0x33)
        await ctx.tick()
        seen.append(ctx.get(dut.crc))
        ctx.set(dut.clear, 0)
        ctx.set(dut.data, ord("9"))
        await ctx.tick()
        seen.append(ctx.get(dut.crc))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [L.crc16(b"12"), 0xFFFF, L.crc16(b"9")]


# -- frame encode / decode ----------------------------------------------------------------------

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(code=st.integers(0, 255), payload=st.binary(max_size=300),
       garbage=st.binary(max_size=20))
def test_frame_round_trip(code, payload, garbage):
    req = L.encode_request(code, payload)
    assert req[0] == L.SOF_REQUEST and len(req) == len(payload) + 6
    assert L.decode_request(req) == (code, payload)
    rep = L.encode_reply(code, payload)
    assert L.decode_reply(rep) == (code, payload)
    # The host-side parser finds the replies behind garbage, whatever the chunking.
    garbage = bytes(b for b in garbage if b != L.SOF_REPLY)
    stream = garbage + rep + rep
    parser = L.ReplyParser()
    found = []
    for k in range(0, len(stream), 7):
        found += parser.feed(stream[k:k + 7])
    assert found == [(code, payload)] * 2 and parser.skipped == len(garbage)


@settings(max_examples=60, deadline=None)
@given(payload=st.binary(min_size=1, max_size=40), pos=st.integers(1), bit=st.integers(0, 7))
def test_corrupted_frame_is_rejected(payload, pos, bit):
    frame = bytearray(L.encode_request(L.Opcode.PING, payload))
    pos = 1 + pos % (len(frame) - 1)
    frame[pos] ^= 1 << bit
    with pytest.raises(L.FrameError):
        L.decode_request(bytes(frame))
    # The device model answers it with BAD_CRC (or, if the length field grew past the frame
    # buffer, drains it) and never executes it.
    model = L.DeviceModel(frame_bytes=64)
    replies = L.ReplyParser().feed(model.feed(bytes(frame)) + model.timeout())
    assert replies and all(status in (L.Status.BAD_CRC, L.Status.BAD_LENGTH, L.Status.TRUNCATED)
                           for status, _ in replies)


def test_decode_errors():
    good = L.encode_request(L.Opcode.PING, b"abc")
    with pytest.raises(L.FrameError, match="at least 6 bytes"):
        L.decode_request(good[:5])
    with pytest.raises(L.FrameError, match="Start of frame must be 0xA5, not 0x5A"):
        L.decode_request(L.encode_reply(0, b"abc"))
    with pytest.raises(L.FrameError, match="Length field says 3 payload bytes, frame has 2"):
        L.decode_request(good[:-3] + good[-2:])
    with pytest.raises(L.FrameError, match="CRC mismatch"):
        L.decode_request(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(ValueError, match="at most 65535"):
        L.encode_request(1, bytes(65536))
    with pytest.raises(ValueError, match="must be a byte"):
        L.encode_reply(256)


def test_tables_are_consistent():
    assert len({s.value for s in L.Status}) == len(L.Status)
    core = {L.Opcode.PING, L.Opcode.IDENTIFY, L.Opcode.REG_READ, L.Opcode.REG_WRITE,
            L.Opcode.MEM_READ, L.Opcode.MEM_WRITE, *L.PACKED_TRANSFERS}
    assert not core & set(L.ENGINE_OPCODES)
    assert set(L.Opcode) - core <= set(L.ENGINE_OPCODES)
    indices = [r.index for r in L.REGISTERS]
    assert len(set(indices)) == len(indices) and all(0 < r.width <= 32 for r in L.REGISTERS)
    assert all(r.reset < 1 << r.width for r in L.REGISTERS)
    ident = L.Identity(L.MAGIC, 1, (0, 1), 4, 65536, 512, 0b10011, True)
    assert L.Identity.from_bytes(ident.to_bytes()) == ident
    fast = L.Identity(L.MAGIC, 3, (0, 2), 1, 32768, 512, 0b110010, True, 3_000_000, 18_000_000)
    assert len(fast.to_bytes()) == L.IDENTITY_BYTES == 24
    assert L.Identity.from_bytes(fast.to_bytes()) == fast
    assert fast.to_bytes()[16:] == (3_000_000).to_bytes(4, "little") + \
        (18_000_000).to_bytes(4, "little")
    assert ident.engine_names == ["grand", "bfp", "lut"]
    # Flags bit 1: a sequencer without the control instructions (straight-line programs).
    lean = L.Identity(L.MAGIC, 3, (0, 3), 1, 32768, 512, 0b110010, True, seq_control=False)
    assert lean.to_bytes()[15] == 0b11 and ident.to_bytes()[15] == 0b01
    assert L.Identity.from_bytes(lean.to_bytes()) == lean
    assert L.identity_registers(lean)["ID_PARAMS"] >> 16 == 0b11
    assert L.identity_registers(ident)["ID_PARAMS"] >> 16 == 0b01
    assert L.identity_registers(ident)["ID_MAGIC"] == 0x42574F4C
    assert set(L.identity_registers(ident)) == {r.name for r in L.REGISTERS
                                                if r.name.startswith("ID_")}


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 255), lg_b=st.integers(0, 8), nb=st.integers(1, 256),
       lg_d=st.integers(0, 16), tables=st.integers(0, 255), code=st.integers(0, 3),
       stoch=st.booleans(), pred=st.booleans(),
       frac=st.integers(0, 15), rand=st.integers(1, 16), acc=st.integers(1, 32),
       modes=st.sets(st.sampled_from(("normal", "normal144", "trunc2", "trunc3", "uniform",
                                      "raw"))))
def test_design_registers_round_trip(n, lg_b, nb, lg_d, tables, code, stoch, pred, frac, rand,
                                     acc, modes):
    params = dict(matrix_lanes=n, block=1 << lg_b, max_blocks=nb, weight_depth=1 << lg_d,
                  lut_tables=tables, code_bits=code, bfp_stochastic=stoch, bfp_predictor=pred,
                  frac_bits=frac, rand_bits=rand,
                  disc_acc_width=acc, grand_modes=modes)
    regs = L.design_registers(**params)
    assert regs["ID_MATRIX"] < 1 << 32 and regs["ID_ENGINE"] < 1 << 31
    got = L.decode_design_registers(regs["ID_MATRIX"], regs["ID_ENGINE"])
    order = ("normal", "normal144", "trunc2", "trunc3", "uniform", "raw")
    assert got == {**params, "bfp_mant_width": True,
                   "grand_modes": tuple(m for m in order if m in modes)}


def test_design_registers_layout_and_defaults():
    regs = L.design_registers()
    # N 8, log2 B 4, max_blocks-1 15, log2 depth 9; tables 4, code 3, stochastic and
    # predictor, frac 3, rand-1 7, acc-1 15, all six grand modes.
    assert regs == {"ID_MATRIX": 0x090F0408, "ID_ENGINE": 0x3F << 25 | 0xF73F04}
    assert L.design_registers(bfp_predictor=False)["ID_ENGINE"] == regs["ID_ENGINE"] ^ 1 << 11
    assert L.design_registers(bfp_stochastic=False)["ID_ENGINE"] == regs["ID_ENGINE"] ^ 1 << 10
    assert L.decode_design_registers(*regs.values()) == \
        {**L.DESIGN_PARAMS, "grand_modes": ("normal", "normal144", "trunc2", "trunc3",
                                            "uniform", "raw")}
    assert L.design_registers(grand_modes=("raw",))["ID_ENGINE"] >> 25 == 0b100000
    model = L.DeviceModel(matrix_lanes=16, block=8, weight_depth=64, code_bits=2,
                          disc_acc_width=20, grand_modes=(), bfp_predictor=False,
                          bfp_acc_block_ram=True)
    reg = {r.name: model.regs[r.index] for r in L.REGISTERS}
    assert L.decode_design_registers(reg["ID_MATRIX"], reg["ID_ENGINE"]) == dict(
        L.DESIGN_PARAMS, matrix_lanes=16, block=8, weight_depth=64, code_bits=2,
        disc_acc_width=20, grand_modes=(), bfp_predictor=False)
    assert not model.design.bfp_predictor and model.design.bfp_stochastic


def test_design_registers_mant_width_bit():
    """ID_ENGINE bit 31 is set where the column lacks the runtime mantissa width, so that the
    designs with it read as before."""
    regs = L.design_registers()
    fixed = L.design_registers(bfp_mant_width=False)
    assert fixed == {**regs, "ID_ENGINE": regs["ID_ENGINE"] | 1 << 31}
    assert L.decode_design_registers(*fixed.values())["bfp_mant_width"] is False
    assert L.decode_design_registers(*regs.values())["bfp_mant_width"] is True
    with pytest.raises(TypeError, match="bfp_mant_width must be a bool, not 1"):
        L.design_registers(bfp_mant_width=1)


@pytest.mark.parametrize("kw, exc, match", [
    (dict(lanes=4), TypeError, "Unknown design parameters: lanes"),
    (dict(block=16.0), TypeError, "block must be an integer, not 16.0"),
    (dict(matrix_lanes=True), TypeError, "matrix_lanes must be an integer"),
    (dict(block=24), ValueError, "block must be a power of two, not 24"),
    (dict(weight_depth=0), ValueError, "weight_depth must be a power of two, not 0"),
    (dict(matrix_lanes=256), ValueError, "matrix_lanes must be between 0 and 255 to fit "
                                         "ID_MATRIX, not 256"),
    (dict(max_blocks=0), ValueError, "max_blocks must be between 1 and 256"),
    (dict(rand_bits=17), ValueError, "rand_bits must be between 1 and 16 to fit ID_ENGINE"),
    (dict(disc_acc_width=33), ValueError, "disc_acc_width must be between 1 and 32"),
    (dict(code_bits=4), ValueError, "code_bits must be between 0 and 3"),
    (dict(bfp_predictor=1), TypeError, "bfp_predictor must be a bool, not 1"),
    (dict(grand_modes="normal"), TypeError, "iterable of mode names"),
    (dict(grand_modes=("gauss",)), ValueError, "Grand modes must be names of"),
])
def test_design_registers_validation(kw, exc, match):
    with pytest.raises(exc, match=match):
        L.design_registers(**kw)


@pytest.mark.parametrize("code_bits, exc", [(0, ValueError), (4, ValueError), (2.0, TypeError),
                                             (True, TypeError)])
def test_device_model_code_bits_validation(code_bits, exc):
    with pytest.raises(exc, match="Code width must be an integer between 1 and 3"):
        L.DeviceModel(code_bits=code_bits)


def test_device_model_rules():
    model = L.DeviceModel(scratch_bytes=64, frame_bytes=16)
    rq = L.encode_request
    assert model.feed(b"\x00\x01" + rq(L.Opcode.PING, b"hi")) == L.encode_reply(0, b"hi")
    assert model.skipped == 2
    assert model.feed(rq(L.Opcode.MEM_WRITE, L.mem_write_payload(60, b"abcd"))) == \
        L.encode_reply(L.Status.OK)
    assert model.feed(rq(L.Opcode.MEM_WRITE, L.mem_write_payload(61, b"abcd"))) == \
        L.encode_reply(L.Status.BAD_LENGTH)
    assert model.feed(rq(L.Opcode.MEM_READ, L.mem_read_payload(64, 0))) == \
        L.encode_reply(L.Status.BAD_ADDRESS)
    assert model.feed(rq(L.Opcode.MEM_READ, L.mem_read_payload(0, 17))) == \
        L.encode_reply(L.Status.BAD_LENGTH)
    assert model.feed(rq(L.Opcode.REG_WRITE, L.reg_write_payload(0x01, 5))) == \
        L.encode_reply(L.Status.READ_ONLY)
    # Oversized length: BAD_LENGTH only after len + 2 more bytes.
    assert model.feed(bytes([0xA5, 1, 17, 0]) + bytes(18)) == b""
    assert model.feed(b"\x00") == L.encode_reply(L.Status.BAD_LENGTH)
    assert model.feed(b"\xA5\x01") == b"" and model.timeout() == L.encode_reply(L.Status.TRUNCATED)
    assert model.timeout() == b""
    assert model.scratch[60:] == b"abcd" and model.errors == 6


def test_device_model_identity_reports_the_link():
    model = L.DeviceModel(clk_freq=18e6, baud=3_000_000)
    status, body = L.decode_reply(model.feed(L.encode_request(L.Opcode.IDENTIFY)))
    ident = L.Identity.from_bytes(body)
    assert (status, ident.protocol, ident.baud, ident.clk_hz) == (0, 3, 3_000_000, 18_000_000)
    with pytest.raises(ValueError, match="divisor 2.25 is below 3"):
        L.DeviceModel(clk_freq=18e6, baud=8_000_000)


def _words(model):
    return np.frombuffer(bytes(model.scratch), dtype="<u2")


def test_device_model_packed_transfers():
    """MEM_WRITE_LOW / MEM_FILL_HIGH / MEM_READ_LOW / MEM_READ_HIGH: lanes, spans, the checks
    in order, nothing written by a refused request."""
    rq, ok = L.encode_request, L.encode_reply(L.Status.OK)
    op = L.Opcode
    model = L.DeviceModel(scratch_bytes=128, frame_bytes=32, block=4, matrix_lanes=8)
    assert model.feed(rq(op.MEM_FILL_HIGH, L.mem_write_payload(4, b"\x81\x7f"))) == ok
    assert model.feed(rq(op.MEM_WRITE_LOW, L.mem_write_payload(6, bytes(range(1, 11))))) == ok
    words = _words(model)
    assert list(words[2:10] >> 8) == [0x81] * 4 + [0x7F] * 4
    assert list(words[3:13] & 0xFF) == list(range(1, 11)) and words[2] == 0x8100
    assert words[13] == 0 and not words[:2].any()
    status, body = L.decode_reply(model.feed(rq(op.MEM_READ_LOW, L.mem_read_payload(4, 5))))
    assert (status, body) == (0, bytes([0, 1, 2, 3, 4]))
    # MEM_READ_HIGH: every matrix_lanes-th (8th) word's high byte.
    model.scratch[17] = 0x11
    model.scratch[33] = 0x22
    status, body = L.decode_reply(model.feed(rq(op.MEM_READ_HIGH, L.mem_read_payload(0, 3))))
    assert (status, body) == (0, b"\x00\x11\x22")
    # Spans that end exactly at the end are accepted.
    assert model.feed(rq(op.MEM_FILL_HIGH, L.mem_write_payload(112, b"\x05\x06"))) == ok
    assert model.feed(rq(op.MEM_READ_HIGH, L.mem_read_payload(112, 1))) == \
        L.encode_reply(0, b"\x05")
    assert model.feed(rq(op.MEM_WRITE_LOW, L.mem_write_payload(126, b"\x09"))) == ok
    assert model.feed(rq(op.MEM_READ_LOW, L.mem_read_payload(96, 16))) == \
        L.encode_reply(0, bytes(15) + b"\x09")
    before = bytes(model.scratch)
    errors = model.errors
    refused = [
        (op.MEM_WRITE_LOW, b"\x00\x00\x00", L.Status.BAD_LENGTH),         # no address
        (op.MEM_READ_LOW, L.mem_read_payload(0, 1) + b"\x00", L.Status.BAD_LENGTH),
        (op.MEM_READ_HIGH, b"", L.Status.BAD_LENGTH),
        (op.MEM_WRITE_LOW, L.mem_write_payload(128, b"\x01"), L.Status.BAD_ADDRESS),
        (op.MEM_FILL_HIGH, L.mem_write_payload(3, b"\x01"), L.Status.BAD_ADDRESS),  # odd
        (op.MEM_READ_LOW, L.mem_read_payload(1, 1), L.Status.BAD_ADDRESS),
        (op.MEM_READ_HIGH, L.mem_read_payload(1 << 31, 1), L.Status.BAD_ADDRESS),
        (op.MEM_WRITE_LOW, L.mem_write_payload(120, bytes(5)), L.Status.BAD_LENGTH),
        (op.MEM_FILL_HIGH, L.mem_write_payload(122, b"\x01"), L.Status.BAD_LENGTH),
        (op.MEM_FILL_HIGH, L.mem_write_payload(0, bytes(17)), L.Status.BAD_LENGTH),
        (op.MEM_READ_HIGH, L.mem_read_payload(114, 1), L.Status.BAD_LENGTH),
        (op.MEM_READ_LOW, L.mem_read_payload(0, 33), L.Status.BAD_LENGTH),     # > frame
        (op.MEM_READ_LOW, L.mem_read_payload(100, 15), L.Status.BAD_LENGTH),
    ]
    for code, payload, status in refused:
        assert model.feed(rq(code, payload)) == L.encode_reply(status), (code, payload)
    assert bytes(model.scratch) == before and model.errors == errors + len(refused)
    # Zero counts at a valid address are OK and do nothing.
    assert model.feed(rq(op.MEM_FILL_HIGH, L.mem_write_payload(0, b""))) == ok
    assert model.feed(rq(op.MEM_READ_HIGH, L.mem_read_payload(0, 0))) == ok


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_packed_transfers_are_views_of_the_words(data):
    """Against numpy views: a block-exponent fill and low-lane write give the words
    ``m | e << 8``; the low / high reads return the words' bytes at the spans."""
    block = data.draw(st.sampled_from([2, 4, 16]))
    lanes = data.draw(st.sampled_from([4, 8, 16]))
    model = L.DeviceModel(scratch_bytes=1024, frame_bytes=256, block=block, matrix_lanes=lanes)
    blocks = data.draw(st.integers(0, 8))
    start = 2 * block * data.draw(st.integers(0, 8))
    m = data.draw(st.binary(min_size=blocks * block, max_size=blocks * block))
    e = data.draw(st.binary(min_size=blocks, max_size=blocks))
    rq = L.encode_request
    model.feed(rq(L.Opcode.MEM_FILL_HIGH, L.mem_write_payload(start, e)))
    model.feed(rq(L.Opcode.MEM_WRITE_LOW, L.mem_write_payload(start, m)))
    w = _words(model)[start // 2:start // 2 + blocks * block]
    assert np.array_equal(w, np.frombuffer(m, np.uint8).astype(np.uint16)
                          | np.repeat(np.frombuffer(e, np.uint8).astype(np.uint16) << 8, block))
    count = data.draw(st.integers(0, 1024 // (2 * lanes)))
    status, hi = L.decode_reply(model.feed(rq(L.Opcode.MEM_READ_HIGH,
                                              L.mem_read_payload(0, count))))
    assert status == 0 and \
        hi == (_words(model)[:count * lanes:lanes] >> 8).astype(np.uint8).tobytes()
    status, lo = L.decode_reply(model.feed(rq(L.Opcode.MEM_READ_LOW,
                                              L.mem_read_payload(start, len(m)))))
    assert status == 0 and lo == m


def _run_payload(start, limit):
    return start.to_bytes(4, "little") + limit.to_bytes(4, "little")


def test_device_model_run_framing():
    from lowbit.sim.program import Instruction, assemble
    rq = L.encode_request
    model = L.DeviceModel(scratch_bytes=256, frame_bytes=64, sequencer=True)
    assert model.identity.engine_names == ["grand", "bfp", "discrete", "quantiser", "lut",
                                           "sequencer"]
    prog = assemble([Instruction.nop(), Instruction.move(100, 110, 3), Instruction.halt()])
    model.feed(rq(L.Opcode.MEM_WRITE, L.mem_write_payload(32, prog)))
    model.feed(rq(L.Opcode.MEM_WRITE, L.mem_write_payload(200, b"abcdef")))
    reply = model.feed(rq(L.Opcode.RUN, _run_payload(32, 10)))
    status, body = L.decode_reply(reply)
    assert status == L.Status.OK and body == bytes([64, 0, 0, 0, 3, 0, 0, 0] + [0] * 8)
    assert model.scratch[220:226] == b"abcdef"
    # Payload checks, in order; empty replies; nothing runs.
    errors = model.errors
    for payload, status in [(b"", L.Status.BAD_LENGTH), (bytes(9), L.Status.BAD_LENGTH),
                            (_run_payload(33, 0), L.Status.BAD_ADDRESS),
                            (_run_payload(241, 1), L.Status.BAD_ADDRESS),
                            (_run_payload(242, 1), L.Status.BAD_ADDRESS),
                            (_run_payload(1 << 31, 1), L.Status.BAD_ADDRESS),
                            (_run_payload(32, 0), L.Status.BAD_LENGTH)]:
        model.scratch[220:226] = bytes(6)
        assert model.feed(rq(L.Opcode.RUN, payload)) == L.encode_reply(status), payload
        assert model.scratch[220:226] == bytes(6)
    assert model.errors == errors + 7
    # The last 16 bytes are a valid start (fetch of 8 words ends at the scratchpad's end).
    model.scratch[240:256] = assemble([Instruction.halt()])
    assert L.decode_reply(model.feed(rq(L.Opcode.RUN, _run_payload(240, 1))))[0] == L.Status.OK
    # LIMIT and a failing instruction carry the 16-byte record and count as error replies.
    model.scratch[0:32] = assemble([Instruction.nop(), Instruction.jump(0)])
    status, body = L.decode_reply(model.feed(rq(L.Opcode.RUN, _run_payload(0, 5))))
    assert status == L.Status.LIMIT and body[:8] == bytes([16, 0, 0, 0, 5, 0, 0, 0])
    model.scratch[0:16] = assemble([Instruction.move(0, 120, 9)])
    status, body = L.decode_reply(model.feed(rq(L.Opcode.RUN, _run_payload(0, 5))))
    assert status == L.Status.BAD_ADDRESS and body == bytes(16)
    assert model.errors == errors + 9
    assert model.last_run.message


def test_device_model_run_needs_the_sequencer_and_engine_bits():
    rq = L.encode_request
    model = L.DeviceModel()
    assert model.identity.engines == 0b10001            # grand + lut; engines need a sequencer
    assert model.feed(rq(L.Opcode.RUN, _run_payload(0, 1))) == L.encode_reply(
        L.Status.BAD_OPCODE)
    model = L.DeviceModel(sequencer=True, bfp=False, discrete=False, lut_tables=0, grand=False)
    assert model.identity.engine_names == ["quantiser", "sequencer"]
    with pytest.raises(TypeError, match="Unknown DeviceModel parameters: fpu"):
        L.DeviceModel(fpu=True)
    L.DeviceModel(clk_freq=24e6, multiplier="sb_mac16", code_bits=2, uart=False)   # ignored


def test_prng_seed3_write_loads_rounding_prng():
    from lowbit.sim.prng import Xoroshiro128aox
    rq = L.encode_request
    model = L.DeviceModel(sequencer=True)
    for k, v in enumerate((5, 6, 7, 8)):
        model.feed(rq(L.Opcode.REG_WRITE, L.reg_write_payload(0x20 + k, v)))
    ref = Xoroshiro128aox.from_state([[6 << 32 | 5, 8 << 32 | 7]]).take(3)[:, 0]
    assert list(model.machine.draw(3)) == list((ref & 0xFF).astype(int))
    assert model.regs[0x23] == 8


# -- gateware parameters ------------------------------------------------------------------------

def test_link_parameter_validation():
    with pytest.raises(TypeError, match="Frame buffer size must be an integer"):
        HostLink(frame_bytes=512.0)
    with pytest.raises(ValueError, match="Frame buffer size must be an integer between 16 and "
                                         "65535, not 8"):
        HostLink(frame_bytes=8)
    with pytest.raises(TypeError, match="Timeout in cycles must be an integer"):
        HostLink(timeout_cycles=True)
    with pytest.raises(ValueError, match="Timeout in cycles must be an integer between 2"):
        HostLink(timeout_cycles=1)
    with pytest.raises(TypeError, match="arg_register must be a bool, not 1"):
        HostLink(arg_register=1)
    assert HostLink(arg_register=True).arg_register and not HostLink().arg_register
    with pytest.raises(ValueError, match="Opcode 0x01 appears twice"):
        Dispatcher([(1, 2), (1,)])
    with pytest.raises(ValueError, match="Opcode must be an integer between 0 and 255, not 256"):
        Dispatcher([(256,)])
    with pytest.raises(TypeError, match="Opcode must be an integer"):
        Dispatcher([("a",)])
    with pytest.raises(ValueError, match="at least one row"):
        Dispatcher([])


def test_dispatcher_echo_opcodes():
    d = Dispatcher([(1, 2)], echo=(0,))
    assert d.table == ((1, 2),) and d.echo == (0,)
    with pytest.raises(ValueError, match="Opcode 0x01 appears twice"):
        Dispatcher([(1, 2)], echo=(1,))
    with pytest.raises(ValueError, match="at least one row"):
        Dispatcher([], echo=(0,))


# -- stream behaviour ---------------------------------------------------------------------------

@pytest.mark.parametrize("seed, arg_register", [(0, False), (1, False), (2, True)])
def test_link_under_gaps_and_backpressure(seed, arg_register):
    """Random valid gaps on requests and back-pressure on replies: the reply stream obeys the
    stream rules (checked by the harness) and equals the model's, byte for byte. With
    ``arg_register`` (the top's ``seq_pipelined``) the handlers' argument bytes come from a
    register of the frame buffer."""
    rng = random.Random(seed)
    rq = L.encode_request
    frames = [
        rq(L.Opcode.PING, bytes(rng.randrange(256) for _ in range(20))),
        b"\x01\x02",
        rq(L.Opcode.MEM_WRITE, L.mem_write_payload(9, bytes(range(30)))),
        rq(L.Opcode.MEM_READ, L.mem_read_payload(5, 40)),
        rq(L.Opcode.IDENTIFY),
        rq(0x42, b"engine"),
        rq(L.Opcode.REG_READ, L.reg_read_payload(0x10)),
        rq(L.Opcode.MEM_READ, L.mem_read_payload(200, 60)),
    ]
    request = b"".join(frames)
    model = L.DeviceModel(scratch_bytes=256, frame_bytes=64)
    expected = model.feed(request)
    top = Accelerator(uart=False, scratch_bytes=256, frame_bytes=64, timeout_bits=100,
                      seq_pipelined=arg_register)
    out = run_stream(top, {"i": list(request)}, {"o": len(expected)}, valid_prob=0.6,
                     ready_prob=0.5, seed=seed)
    assert bytes(out["o"]) == expected


def test_registry_blocks_elaborate():
    for name in ("uart", "link"):
        assert "module" in rtlil.convert(build_block(name)).lower()


def test_protocol_doc_lists_every_table_entry():
    doc = (Path(__file__).resolve().parent.parent / "docs" / "protocol.md").read_text()
    for entry in [*L.Status, *L.Opcode]:
        assert f"| {entry.value} | {entry.name} |" in doc or \
            f"| 0x{entry.value:02X} | {entry.name} |" in doc, entry
    for reg in L.REGISTERS:
        assert f"| {reg.name} | {reg.width} | {reg.access} |" in doc or \
            reg.name.startswith("PRNG_SEED"), reg
