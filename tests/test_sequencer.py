"""The layer sequencer (lowbit.hw.sequencer) inside the accelerator top, through the byte link.

Programs are ``lowbit.sim.program.assemble`` bytes written with MEM_WRITE and run with RUN; results
are read back with MEM_READ and compared bit for bit with the golden models (lowbit.sim.network,
lowbit.sim.quantiser, lowbit.sim.lut, lowbit.sim.grand, lowbit.sim.prng).
"""

import os
import struct
import sys

import numpy as np
import pytest

from lowbit.boards.profiles import BOARDS
from lowbit.hw.ports import DISCRETE_ACC_WIDTH, RAND_BITS
from lowbit.hw.sequencer import Sequencer
from lowbit.hw.top import Accelerator
from lowbit.sim import link as L
from lowbit.sim.discrete import CodeBook
from lowbit.sim.grand import GrandModel
from lowbit.sim.lut import lookup
from lowbit.sim.network import (
    BFPDense,
    DiscreteDense,
    bfp_dense,
    discrete_dense,
    pack_elements,
    unpack_elements,
)
from lowbit.sim.prng import Xoroshiro128aox, load_state
from lowbit.sim.program import F_BIAS, F_LUT, Op, assemble
from lowbit.sim.program import Instruction as I
from lowbit.sim.quantiser import decode_f16, quantise_bfp, quantise_int8
from lowbit.sim.rtl.transport import SimulatedSerial

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from backdoor import FastMemoryPort, Scratchpad  # noqa: E402

N, B = 4, 4
BASE = dict(scratch_bytes=2048, frame_bytes=512, timeout_bits=20, sequencer=True,
            matrix_lanes=N, block=B, max_blocks=4, weight_depth=64, lanes=2, lut_tables=2)
WORDS = BASE["scratch_bytes"] // 2
REG = {r.name: r.index for r in L.REGISTERS}
ROUND = {"nearest": 0, "zero": 1, "stochastic": 2}


class Device:
    """The simulated top with helpers for memory, registers and RUN.

    ``write`` / ``read`` go through the link's MEM_WRITE / MEM_READ; ``put`` / ``get``, the
    data a test computes on and the results it checks, and the programs ``run`` stores go
    through the simulator's backdoor (tests/backdoor.py: no simulated cycles; the link takes a
    byte every 2-3 cycles). Registers, tables and RUN always cross the link."""

    def __init__(self, **kw):
        self.params = {**BASE, **kw}
        self.port = SimulatedSerial(level="byte", **self.params)
        self.top = self.port.top
        self.mem = Scratchpad(self.port)

    def send(self, opcode, payload=b""):
        self.port.write(L.encode_request(opcode, payload))
        head = self.port.read(4, timeout_cycles=400_000)
        assert len(head) == 4, "no reply"
        n = int.from_bytes(head[2:4], "little")
        return L.decode_reply(head + self.port.read(n + 2, timeout_cycles=10_000))

    def ok(self, opcode, payload=b""):
        status, body = self.send(opcode, payload)
        assert status == L.Status.OK, L.Status(status)
        return body

    def write(self, word_addr, data):
        data = bytes(data)
        step = self.params["frame_bytes"] - 4
        for k in range(0, len(data), step):
            self.ok(L.Opcode.MEM_WRITE, L.mem_write_payload(2 * word_addr + k, data[k:k + step]))

    def put(self, word_addr, words):
        self.mem.write(word_addr, words)

    def read(self, byte_addr, n):
        out = bytearray()
        step = self.params["frame_bytes"]
        for k in range(0, n, step):
            out += self.ok(L.Opcode.MEM_READ, L.mem_read_payload(byte_addr + k,
                                                                  min(step, n - k)))
        return bytes(out)

    def get(self, word_addr, n):
        return self.mem.read(word_addr, n)

    def reg(self, name, value):
        self.ok(L.Opcode.REG_WRITE, L.reg_write_payload(REG[name], value & 0xFFFFFFFF))

    def run(self, program, at=0, limit=10_000):
        """Store ``program`` at word ``at`` (through the backdoor) and RUN it: ``(status,
        pc_byte, executed, cycles, busy)``."""
        self.mem.write_bytes(2 * at, assemble(program))
        status, body = self.send(L.Opcode.RUN, struct.pack("<II", 2 * at, limit))
        assert len(body) == 16
        return (status, *struct.unpack("<IIII", body))

    def run_ok(self, program, at=0):
        status, pc, executed, cycles, _ = self.run(program, at)
        assert status == L.Status.OK, (L.Status(status), pc, executed)
        return cycles

    def seed_rounding(self, s0, s1):
        self.reg("PRNG_SEED0", s0 & 0xFFFFFFFF)
        self.reg("PRNG_SEED1", s0 >> 32)
        self.reg("PRNG_SEED2", s1 & 0xFFFFFFFF)
        self.reg("PRNG_SEED3", s1 >> 32)
        return Xoroshiro128aox.from_state(load_state([[s0, s1]]))


@pytest.fixture(scope="module")
def dev():
    return Device()


@pytest.fixture(scope="module")
def bfp_only():
    """The BFP column without the discrete unit, the quantiser and the grand unit."""
    return Device(discrete=False, quantiser=False, grand=False)


@pytest.fixture(scope="module")
def fixed_uncounted():
    """``bfp_only`` with a fixed mantissa width of 8 and without the busy counter."""
    return Device(bfp_mant_width=False, busy_count=False, discrete=False, quantiser=False,
                  grand=False)


def test_backdoor_equals_the_link(dev):
    """tests/backdoor.py, through which the other tests load their data and read their results,
    equals the link both ways: a random image stored through the backdoor comes back through
    MEM_READ (at each end of the scratchpad), and a MEM_WRITE across the middle shows through
    the backdoor, the rest of the image unchanged. Whole images through the link:
    ``test_driver.py::test_sim_network_matches_golden``, ``test_top.py``; and (slow)
    ``test_random_programs_vs_device_model`` (MEM_READ of the scratchpad, also compared with
    the backdoor's)."""
    rng = np.random.default_rng(31)
    size, frame = BASE["scratch_bytes"], 128
    image = bytearray(rng.integers(0, 256, size).astype(np.uint8).tobytes())
    dev.mem.write_bytes(0, image)
    assert dev.read(0, frame) == image[:frame]
    assert dev.read(size - frame, frame) == image[size - frame:]
    middle = rng.integers(0, 256, frame).astype(np.uint8).tobytes()
    at = size // 2 - frame // 2
    dev.write(at // 2, middle)
    image[at:at + len(middle)] = middle
    assert dev.mem.read_bytes(0, size) == image
    assert dev.get(at // 2, 2).tolist() == [middle[0] | middle[1] << 8, middle[2] | middle[3] << 8]
    with pytest.raises(IndexError):
        dev.mem.read(WORDS - 1, 2)


def weight_words(w_m, w_e, block):
    """LOADW source words of a weight matrix ``(R, K)``: tile ``t``, beat ``j``, bank ``l``."""
    r, k = w_m.shape
    tiles = -(-r // N)
    m = np.zeros((tiles * N, k), dtype=np.int64)
    e = np.zeros((tiles * N, k), dtype=np.int64)
    m[:r] = w_m
    e[:r] = np.repeat(w_e, block, axis=1)
    words = pack_elements(m, e)                               # (tiles*N, K)
    return words.reshape(tiles, N, k).transpose(0, 2, 1).reshape(-1)   # entry-major, bank


def rand_rows(gen, tiles):
    return (gen.take(tiles * N)[:, 0] & ((1 << RAND_BITS) - 1)).astype(np.int64).reshape(tiles, N)


def random_layer(rng, rows, cols, *, bias, exp_mode, rounding, width=8, out_exp=-3):
    nb = cols // B
    return BFPDense(w_m=rng.integers(-128, 128, (rows, cols)), w_e=rng.integers(-6, 2, (rows, nb)),
                    bias_m=rng.integers(-128, 128, rows) if bias else None,
                    bias_e=rng.integers(-4, 3, rows) if bias else None,
                    width=width, rounding=rounding, exp_mode=exp_mode, out_exp=out_exp)


# Word addresses of the data regions used by the tests.
PROG, WSRC, XA, BA, YA, ZA = 0, 128, 320, 400, 480, 560


@pytest.mark.parametrize("bias,exp_mode,rounding", [
    # The quick suite: bias, max exponent, stochastic rounding; the others with -m slow.
    pytest.param(True, "fixed", "nearest", marks=pytest.mark.slow),
    pytest.param(False, "max", "nearest", marks=pytest.mark.slow),
    (True, "max", "stochastic"),
    pytest.param(False, "fixed", "zero", marks=pytest.mark.slow),
])
def test_matvec(dev, bias, exp_mode, rounding, stable_seed):
    """MATVEC of a 10 x 12 layer (3 tiles, R not a multiple of N) against lowbit.sim.network."""
    rng = np.random.default_rng(stable_seed(bias, exp_mode, rounding))
    rows, cols = 10, 12
    layer = random_layer(rng, rows, cols, bias=bias, exp_mode=exp_mode, rounding=rounding,
                         width=7)
    x_m, x_e = rng.integers(-128, 128, cols), rng.integers(-5, 3, cols // B)
    tiles = -(-rows // N)
    dev.put(WSRC, weight_words(layer.w_m, layer.w_e, B))
    dev.put(XA, pack_elements(x_m, np.repeat(x_e, B)))
    if bias:
        dev.put(BA, pack_elements(np.pad(layer.bias_m, (0, tiles * N - rows)),
                                  np.pad(layer.bias_e, (0, tiles * N - rows))))
    dev.reg("MANT_WIDTH", 7)
    dev.reg("ROUNDING", ROUND[rounding])
    dev.reg("EXP_SELECT", 1 if exp_mode == "fixed" else 0)
    dev.reg("FIXED_EXP", layer.out_exp & 0xFF)
    gen = dev.seed_rounding(0x0123456789ABCDEF, 0xFEDCBA9876543210)
    dev.put(YA, np.full(tiles * N + 2, 0xBEEF))
    status, _, _, cycles, busy = dev.run([
        I.loadw(WSRC, 3, tiles * cols),
        I.matvec(XA, YA, 3, cols // B, tiles, bias=BA if bias else None), I.halt()])
    assert status == L.Status.OK
    assert busy == tiles * cols < cycles       # busy cycles: each tile's beats over K inputs
    rand = rand_rows(gen, tiles) if rounding == "stochastic" else None
    m, e = bfp_dense(layer, x_m, x_e, dev.top.column_model(), rand=rand)
    got = dev.get(YA, tiles * N + 2)
    gm, ge = unpack_elements(got[:rows])
    assert gm.tolist() == m.tolist()
    assert ge.tolist() == e.tolist()
    assert got[tiles * N:].tolist() == [0xBEEF] * 2      # nothing written past the tiles


def f16_codes(values):
    return np.asarray(values, dtype=np.float16).view(np.uint16).astype(np.int64)


def test_two_layer_network(dev):
    """QUANT (f16) -> MATVEC+bias -> LUT -> MATVEC+bias from one program, vs lowbit.sim.network."""
    rng = np.random.default_rng(7)
    k1, r1, r2 = 8, 8, 6
    x = rng.normal(0, 2, k1)
    codes = f16_codes(x)
    table = rng.integers(-128, 128, 256)
    l1 = BFPDense(w_m=rng.integers(-128, 128, (r1, k1)), w_e=rng.integers(-8, -4, (r1, k1 // B)),
                  bias_m=rng.integers(-128, 128, r1), bias_e=rng.integers(-6, -3, r1),
                  exp_mode="fixed", out_exp=-2, table=table, table_exp=-5)
    l2 = random_layer(rng, r2, r1, bias=True, exp_mode="fixed", rounding="nearest", out_exp=-4)
    dev.reg("MANT_WIDTH", 8)
    dev.reg("ROUNDING", 0)
    dev.reg("QUANT_FORMAT", 0)
    dev.reg("QUANT_RULE", 0)
    dev.reg("EXP_SELECT", 1)
    dev.reg("LUT_SELECT", 1)
    dev.ok(L.Opcode.LUT_WRITE, bytes([1, 0]) + bytes(int(v) & 0xFF for v in table))
    w1 = weight_words(l1.w_m, l1.w_e, B)
    w2 = weight_words(l2.w_m, l2.w_e, B)
    dev.put(WSRC, np.concatenate([w1, w2]))
    dev.put(XA, codes)
    dev.put(BA, np.concatenate([pack_elements(l1.bias_m, l1.bias_e),
                                pack_elements(np.pad(l2.bias_m, (0, 2)),
                                              np.pad(l2.bias_e, (0, 2)))]))
    e1, e2 = 0, len(w1) // N
    program = [
        I.loadw(WSRC, 0, (len(w1) + len(w2)) // N),
        I.quant(XA, XA + 16, k1),
        I.config(REG["FIXED_EXP"], l1.out_exp & 0xFF),
        I.matvec(XA + 16, YA, e1, k1 // B, r1 // N, bias=BA),
        I.config(REG["LUT_EXP"], l1.table_exp & 0xFF),
        I.lut(YA, YA, r1),
        I.config(REG["FIXED_EXP"], l2.out_exp & 0xFF),
        I.matvec(YA, ZA, e2, r1 // B, 2, bias=BA + r1),
        I.halt(),
    ]
    dev.run_ok(program)
    xm, xe = quantise_bfp(decode_f16(codes), block=B, width=8)
    assert unpack_elements(dev.get(XA + 16, k1))[0].tolist() == xm.reshape(-1).tolist()
    col = dev.top.column_model()
    h_m, h_e = bfp_dense(l1, xm.reshape(-1), xe, col)
    y_m, y_e = bfp_dense(l2, h_m, h_e[::B], col)
    gm, ge = unpack_elements(dev.get(ZA, r2))
    assert gm.tolist() == y_m.tolist()
    assert ge.tolist() == y_e.tolist()


@pytest.mark.parametrize("fmt,rounding", [
    ("bfp", "stochastic"), *(pytest.param("int8", r, marks=pytest.mark.slow)
                             for r in ("nearest", "stochastic"))])
def test_quant(dev, fmt, rounding):
    rng = np.random.default_rng(3)
    codes = f16_codes(rng.normal(0, 3, 12))
    codes[5] = 0x7C00                                     # +Inf
    dev.put(XA, codes)
    dev.reg("QUANT_FORMAT", 0 if fmt == "bfp" else 1)
    dev.reg("ROUNDING", ROUND[rounding])
    dev.reg("MANT_WIDTH", 6)
    dev.reg("QUANT_RULE", 1)
    dev.reg("QUANT_SHIFT", -3 & 0xFF)
    gen = dev.seed_rounding(99, 12345)
    dev.run_ok([I.quant(XA, YA, 12), I.halt()])
    x = decode_f16(codes)
    rand = (gen.take(12)[:, 0] & 0xFF).astype(np.int64) if rounding == "stochastic" else None
    got = dev.get(YA, 12)
    if fmt == "bfp":
        m, e = quantise_bfp(x, block=B, width=6, rule="ceil", rounding=rounding, rand=rand)
        assert got.tolist() == pack_elements(m.reshape(-1), np.repeat(e, B)).tolist()
    else:
        q = quantise_int8(x, shift=-3, rounding=rounding, rand=rand)
        assert got.tolist() == (q & 0xFF).tolist()


def test_lut_grand_move_config(dev):
    """LUT (same table as LUT_WRITE), GRAND (continues GRAND_SAMPLES' sequence), MOVE, CONFIG."""
    rng = np.random.default_rng(11)
    table = rng.integers(0, 256, 256)
    dev.ok(L.Opcode.LUT_WRITE, bytes([0, 0]) + bytes(int(v) for v in table))
    src = rng.integers(0, 1 << 16, 9)
    dev.put(XA, src)
    lanes = dev.top.lanes
    seed_state = np.array([[0x1111, 0x2223], [0x3333, 0x4445]], dtype=np.uint64)
    dev.ok(L.Opcode.GRAND_SEED, b"".join(struct.pack("<QQ", *map(int, s)) for s in seed_state))
    first = dev.ok(L.Opcode.GRAND_SAMPLES, struct.pack("<HB", 3, 0))
    dev.run_ok([I.config(REG["LUT_SELECT"], 0), I.config(REG["LUT_EXP"], 0x85),
                I.lut(XA, YA, 9), I.grand(ZA, 7), I.move(XA, XA + 20, 9),
                I.config(REG["FIXED_EXP"], 0x1234567F), I.halt()])
    assert dev.get(YA, 9).tolist() == [int(lookup(table, [v & 0xFF])[0]) | 0x8500 for v in src]
    gen = GrandModel(0, lanes)
    gen.prng.state = load_state(seed_state)
    f16, _ = gen.generate("normal", 5)
    seq = f16.reshape(-1).astype(np.int64)
    assert list(struct.unpack("<3H", first)) == seq[:3].tolist()
    assert dev.get(ZA, 7).tolist() == seq[3:10].tolist()
    assert dev.get(XA + 20, 9).tolist() == src.tolist()
    reg = dev.ok(L.Opcode.REG_READ, L.reg_read_payload(REG["FIXED_EXP"]))
    assert int.from_bytes(reg, "little") == 0x7F


# The one-address case with -m slow; its results: the SPRAM's single address,
# test_spram_scratchpad_banks.
@pytest.mark.parametrize("write_addr", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_reads_beside_writes_with_a_write_address(dev, write_addr):
    """A block-RAM scratchpad gives the sequencer a write address of its own
    (``Accelerator.scratch_write_addr``, by default): the reader issues in the cycles the write
    register writes. In place and shifted down by one (``dst = src - 1``, writes one word behind
    the reads) a LUT over 64 words costs about a cycle per word, and equals the lookup of the
    words as they were (each read happens before the write to its word). With
    ``scratch_write_addr=False`` (the ULX3S's profile) the same block RAM takes turns: two
    cycles a word, the same words."""
    if not write_addr:
        dev = Device(scratch_write_addr=False)
    assert dev.top.scratch_write_addr == dev.top.sequencer_params()["write_addr"] == write_addr
    with pytest.raises(ValueError, match="SPRAM has one address"):
        Accelerator(use_spram=True, scratch_bytes=32768, sequencer=True, scratch_write_addr=True)
    rng = np.random.default_rng(12)
    table = rng.integers(0, 256, 256)
    dev.ok(L.Opcode.LUT_WRITE, bytes([1, 0]) + bytes(int(v) for v in table))
    dev.reg("LUT_SELECT", 1)
    dev.reg("LUT_EXP", 0)
    halt = dev.run_ok([I.halt()])
    for dst in (XA, XA - 1):
        src = rng.integers(0, 1 << 16, 64)
        dev.put(XA, src)
        cycles = dev.run_ok([I.lut(XA, dst, 64), I.halt()]) - halt
        assert dev.get(dst, 64).tolist() == [int(v) for v in lookup(table, src & 0xFF)]
        # One word a cycle plus the fetch and the engine's latency (two a word with one address).
        assert cycles < 64 + 30 if write_addr else cycles > 2 * 64, cycles


def test_move_overlapping(dev):
    dev.put(XA, range(1, 11))
    dev.run_ok([I.move(XA, XA + 1, 9), I.halt()])       # word by word: a fill
    assert dev.get(XA, 10).tolist() == [1] * 10
    dev.put(XA, range(1, 11))
    dev.run_ok([I.move(XA + 1, XA, 9), I.halt()])
    assert dev.get(XA, 10).tolist() == [2, 3, 4, 5, 6, 7, 8, 9, 10, 10]


def test_batch_loop(dev):
    """LOOP/DJNZ/SETOFS/ADDOFS/JUMP: one MATVEC per input of a batch of three."""
    rng = np.random.default_rng(5)
    layer = random_layer(rng, 4, 8, bias=False, exp_mode="fixed", rounding="nearest")
    xs = rng.integers(-128, 128, (3, 8))
    xe = rng.integers(-3, 2, (3, 2))
    dev.put(WSRC, weight_words(layer.w_m, layer.w_e, B))
    for b in range(3):
        dev.put(XA + 8 * b, pack_elements(xs[b], np.repeat(xe[b], B)))
    dev.reg("ROUNDING", 0)
    dev.reg("MANT_WIDTH", 8)
    dev.reg("EXP_SELECT", 1)
    dev.reg("FIXED_EXP", layer.out_exp & 0xFF)
    body = 8 * 4                                           # word address of the loop body
    program = [I.loadw(WSRC, 0, 8), I.setofs(0, 0), I.loop(3), I.jump(body),
               I.matvec(XA, YA, 0, 2, 1, flags=3), I.addofs(8, 4), I.djnz(body), I.halt()]
    status, pc, executed, cycles, _ = dev.run(program)
    assert (status, pc, executed) == (L.Status.OK, 7 * 16, 4 + 3 * 3 + 1)
    col = dev.top.column_model()
    for b in range(3):
        m, e = bfp_dense(layer, xs[b], xe[b], col)
        assert dev.get(YA + 4 * b, 4).tolist() == pack_elements(m, e).tolist()


@pytest.mark.parametrize("seq_pipelined", [False, True])
def test_dmatvec(seq_pipelined):
    """LOADW then three DMATVECs equal lowbit.sim.network.discrete_dense; with
    ``seq_pipelined`` (LOADW's writes, the discrete unit's codes and its gathered x through
    registers, its sum in three stages) too, a cycle slower per group of N words and more
    per row."""
    dev = Device(bfp=False, quantiser=False, seq_pipelined=seq_pipelined)
    assert dev.top.seq_pipelined is seq_pipelined
    rng = np.random.default_rng(9)
    book = CodeBook(2, [(0, 0, 0), (1, 0, 0), (0, 1, 1), (1, 0, 2)])
    rows, cols = 5, 10
    layer = DiscreteDense(w_codes=rng.integers(0, 4, (rows, cols)), book=book,
                          bias=rng.integers(-3000, 3000, rows), shift=3,
                          acc_width=DISCRETE_ACC_WIDTH, out_exp=-2)
    x = rng.integers(-128, 128, cols)
    x[0] = -128
    nbd = -(-cols // N)
    codes = np.zeros((rows, nbd * N), dtype=np.int64)
    codes[:, :cols] = layer.w_codes
    words = codes.reshape(rows, nbd, N).reshape(-1)       # entry r*nbd+b, bank l
    dev.put(WSRC, words)
    dev.put(XA, pack_elements(x, 3))
    dev.put(BA, layer.bias & 0xFFFF)
    w = book.words()
    dev.reg("CODE_BOOK0", sum(v << 8 * k for k, v in enumerate(w)))
    dev.reg("CODE_WIDTH", 2)
    dev.reg("DISC_SHIFT", 3)
    dev.reg("FIXED_EXP", -2 & 0xFF)
    status, _, _, cycles, busy = dev.run([
        I.loadw(WSRC, 1, rows * nbd), I.dmatvec(XA, YA, 1, cols, rows, bias=BA),
        I.config(REG["DISC_SHIFT"], 0), I.dmatvec(XA, ZA, 1, cols, rows),
        I.config(REG["DISC_SHIFT"], 15), I.dmatvec(XA, ZA + 8, 1, cols, rows, bias=BA),
        I.config(REG["DISC_SHIFT"], 3), I.dmatvec(XA, ZA + 16, 1, cols - 1, rows, bias=BA),
        I.halt()])
    assert status == L.Status.OK
    assert busy == 4 * rows * nbd < cycles     # busy cycles: ceil(K / N) beats per row
    # Pipelined, a cycle more per group of N words (the gather's register) and six per row
    # (the discrete unit's entry stage and two more stages of its sum, and the rounding's
    # addition, shift and saturation a register each), and one per row whose last group is one
    # word (the last DMATVEC's: its codes, through two registers, come in three cycles after
    # the beat before, a cycle after the word);
    # the port's register, the scratchpad's read register, the register beside the memory and
    # the reader's second stage: four cycles more per fetch (9 instructions), per range read
    # (LOADW's, each row's x words) and per bias word (3 of the 4 DMATVECs).
    assert dev.top.scratch_read_register is seq_pipelined
    lag = 4 * (9 + 1 + 4 * rows + 3 * rows)
    assert cycles == 652 + (4 * rows * (nbd + 6) + rows + lag if seq_pipelined else 0)
    m, e = discrete_dense(layer, x, lanes=N)
    assert dev.get(YA, rows).tolist() == pack_elements(m, e).tolist()
    nobias = DiscreteDense(w_codes=layer.w_codes, book=book, shift=0, out_exp=-2)
    m, e = discrete_dense(nobias, x, lanes=N)
    assert dev.get(ZA, rows).tolist() == pack_elements(m, e).tolist()
    big = DiscreteDense(w_codes=layer.w_codes, book=book, bias=layer.bias, shift=15, out_exp=-2)
    m, e = discrete_dense(big, x, lanes=N)
    assert dev.get(ZA + 8, rows).tolist() == pack_elements(m, e).tolist()
    # K = 9: each row's last group is one word, whose beat waits for the registered codes.
    short = DiscreteDense(w_codes=layer.w_codes[:, :cols - 1], book=book, bias=layer.bias,
                          shift=3, acc_width=DISCRETE_ACC_WIDTH, out_exp=-2)
    m, e = discrete_dense(short, x[:cols - 1], lanes=N)
    assert dev.get(ZA + 16, rows).tolist() == pack_elements(m, e).tolist()
    # MATVEC and QUANT are not built: BAD_OPCODE, and IDENTIFY says what is present.
    assert dev.run([I.quant(XA, YA, 4)])[:3] == (L.Status.BAD_OPCODE, 0, 0)
    ident = L.Identity.from_bytes(dev.ok(L.Opcode.IDENTIFY))
    assert set(ident.engine_names) == {"grand", "discrete", "lut", "sequencer"}
    # Small shifts without bias, where the results fall inside the int8 range: the rounding's
    # half (added before the shift) changes them, unlike the saturated or shift-0 rows above.
    x_small = x // 4
    dev.put(XA, pack_elements(x_small, 3))
    for shift in (1, 2):
        dev.reg("DISC_SHIFT", shift)
        assert dev.run([I.dmatvec(XA, ZA + 24, 1, cols, rows), I.halt()])[0] == L.Status.OK
        half = DiscreteDense(w_codes=layer.w_codes, book=book, shift=shift, out_exp=-2)
        m, e = discrete_dense(half, x_small, lanes=N)
        floor = DiscreteDense(w_codes=layer.w_codes, book=book, shift=0, out_exp=-2)
        assert (discrete_dense(floor, x_small, lanes=N)[0] >> shift != m).any()
        assert (np.abs(m) < 127).all()
        assert dev.get(ZA + 24, rows).tolist() == pack_elements(m, e).tolist()


@pytest.mark.parametrize("seq_pipelined", [False, True])
def test_dmatvec_groups_of_lanes(seq_pipelined):
    """DMATVEC on 16 lanes (two of the pipelined gather's groups of eight) with rows whose
    last group ends in the lower group (K = 19: lanes 3..15 of the second beat take no word)
    and rows of one short group (K = 5), after rows that filled every lane: the lanes past a
    row's last word are 0 (code 0 is the weight +1 here, so a stale x would show); and rows of
    83 words, whose six groups each stop the reader while the unit takes them (with
    ``seq_pipelined`` the reader's words on their way then fill its skid registers, and its
    occupancy must stop it). Equal to lowbit.sim.network.discrete_dense."""
    n = 16
    dev = Device(bfp=False, quantiser=False, matrix_lanes=n, seq_pipelined=seq_pipelined)
    rng = np.random.default_rng(16)
    book = CodeBook(2, [(0, 0, 0), (1, 0, 1), (0, 1, 1), (1, 0, 2)])
    w = book.words()
    dev.reg("CODE_BOOK0", sum(v << 8 * k for k, v in enumerate(w)))
    dev.reg("CODE_WIDTH", 2)
    dev.reg("DISC_SHIFT", 0)
    dev.reg("FIXED_EXP", 0)
    rows = 3
    ws, xs, bs, ys = 64, 360, 500, 520        # word addresses: codes, x, bias, results
    out = {}
    for k, kk in enumerate((19, 5, 19, 83)):
        layer = DiscreteDense(w_codes=rng.integers(0, 4, (rows, kk)), book=book,
                              bias=rng.integers(-300, 300, rows), shift=0,
                              acc_width=DISCRETE_ACC_WIDTH, out_exp=0)
        x = rng.integers(60, 128, kk) * rng.choice([-1, 1], kk)
        nbd = -(-kk // n)
        codes = np.zeros((rows, nbd * n), dtype=np.int64)
        codes[:, :kk] = layer.w_codes
        entry, dst = 8 * k, ys + 4 * k
        dev.put(ws, codes.reshape(-1))
        dev.put(xs, pack_elements(x, 0))
        dev.put(bs + 4 * k, layer.bias & 0xFFFF)
        out[dst] = (layer, x)
        status = dev.run([I.loadw(ws, entry, rows * nbd),
                          I.dmatvec(xs, dst, entry, kk, rows, bias=bs + 4 * k), I.halt()])[0]
        assert status == L.Status.OK
    for dst, (layer, x) in out.items():
        m, e = discrete_dense(layer, x, lanes=n)
        assert dev.get(dst, rows).tolist() == pack_elements(m, e).tolist()


def scratch_image(dev):
    return dev.mem.read_bytes(0, BASE["scratch_bytes"])


@pytest.fixture(scope="module")
def second_stage():
    """The ULX3S's reader: ``seq_pipelined`` (the reader's second stage, the x buffer's
    register, the scratchpad's read register, a read latency of 4 for the memory handler), the
    x buffer and one scratchpad address (``scratch_write_addr=False``)."""
    dev = Device(seq_pipelined=True, scratch_write_addr=False)
    assert dev.top.scratch_read_latency == 4 and dev.top.matvec_x_buffer
    assert dev.top.scratch_read_register and dev.top.sequencer_params()["read_register"]
    return dev


@pytest.mark.parametrize("case", ["matvec", "two_layer", "quant", "lut_grand_move_config",
                                  "move_overlapping", "batch_loop", "samples"])
def test_second_stage_reader(second_stage, case, stable_seed):
    """Every reader consumer through the reader's second stage: MATVEC with bias over three
    tiles (the later ones from the x buffer's registered reads), two layers, QUANT, LUT /
    GRAND / MOVE / CONFIG, overlapping MOVEs, a LOOP of MATVECs and MATVEC's samples, each
    against its reference as in the tests of the default top (the DMATVEC's and the random
    programs': ``test_dmatvec[True]``, ``test_random_programs_vs_device_model``)."""
    dev = second_stage
    {"matvec": lambda: test_matvec(dev, True, "max", "stochastic", stable_seed),
     "two_layer": lambda: test_two_layer_network(dev),
     "quant": lambda: test_quant(dev, "bfp", "stochastic"),
     "lut_grand_move_config": lambda: test_lut_grand_move_config(dev),
     "move_overlapping": lambda: test_move_overlapping(dev),
     "batch_loop": lambda: test_batch_loop(dev),
     "samples": lambda: test_matvec_samples_equal_machine(dev, 2, 2, F_LUT)}[case]()


def test_second_stage_quant_config_in_the_program(second_stage):
    """With ``seq_pipelined`` the quantiser's configuration is a copy of the registers a cycle
    behind them: CONFIGs right before each QUANT (BFP at width 5 with the floor rule, then int8
    with a shift; the first with values unlike the registers' before the program) take effect
    for the QUANT that follows, against the models. (The margin is wide: with the copy 25 cycles
    behind the registers this passes, with 70 it fails; the configuration is used from the
    block's shared exponent on, after the fetch and the block's 16 words.)"""
    dev = second_stage
    rng = np.random.default_rng(8)
    codes = f16_codes(rng.normal(0, 5, 2 * B))
    dev.put(XA, codes)
    dev.reg("QUANT_FORMAT", 1)
    dev.reg("ROUNDING", ROUND["nearest"])
    dev.reg("MANT_WIDTH", 8)
    dev.reg("QUANT_RULE", 1)
    dev.reg("QUANT_SHIFT", 0)
    dev.run_ok([I.config(REG["QUANT_FORMAT"], 0), I.config(REG["MANT_WIDTH"], 5),
                I.config(REG["QUANT_RULE"], 0), I.quant(XA, YA, 2 * B),
                I.config(REG["QUANT_FORMAT"], 1), I.config(REG["QUANT_SHIFT"], -2 & 0xFF),
                I.config(REG["ROUNDING"], ROUND["zero"]), I.quant(XA, ZA, 2 * B), I.halt()])
    x = decode_f16(codes)
    m, e = quantise_bfp(x, block=B, width=5, rule="floor", rounding="nearest")
    assert dev.get(YA, 2 * B).tolist() == pack_elements(m.reshape(-1), np.repeat(e, B)).tolist()
    q = quantise_int8(x, shift=-2, rounding="zero")
    assert dev.get(ZA, 2 * B).tolist() == (q & 0xFF).tolist()


def test_errors_change_nothing(dev):
    """Every failing instruction stops the program with no effect; the next command works."""
    dev.reg("QUANT_FORMAT", 0)
    dev.reg("LUT_SELECT", 0)
    cases = [
        ([I(0x30)], L.Status.BAD_OPCODE),
        ([I.config(REG["ID_MAGIC"], 1)], L.Status.BAD_ADDRESS),
        ([I.config(0x99, 1)], L.Status.BAD_ADDRESS),
        ([I.move(XA, YA, 0)], L.Status.BAD_LENGTH),
        ([I.move(WORDS - 3, YA, 4)], L.Status.BAD_ADDRESS),
        ([I.move(XA, WORDS - 3, 4)], L.Status.BAD_ADDRESS),
        ([I.setofs(WORDS, 0), I.move(0, YA, 1, flags=1)], L.Status.BAD_ADDRESS),
        ([I.loadw(XA, 0, 0)], L.Status.BAD_LENGTH),
        ([I.loadw(XA, 60, 5)], L.Status.BAD_ADDRESS),
        ([I.loadw(WORDS - 8, 0, 3)], L.Status.BAD_ADDRESS),
        ([I.quant(XA, YA, 6)], L.Status.BAD_LENGTH),      # BFP count not a multiple of B
        ([I.quant(XA, YA, 0)], L.Status.BAD_LENGTH),
        ([I.quant(XA, WORDS - 4, 8)], L.Status.BAD_ADDRESS),
        ([I.matvec(XA, YA, 0, 0, 1)], L.Status.BAD_LENGTH),
        ([I.matvec(XA, YA, 0, 5, 1)], L.Status.BAD_LENGTH),  # more than max_blocks
        ([I.matvec(XA, YA, 0, 1, 0)], L.Status.BAD_LENGTH),
        ([I.matvec(XA, YA, 60, 2, 1)], L.Status.BAD_ADDRESS),  # weight entries 60..67
        ([I.matvec(WORDS - 4, YA, 0, 2, 1)], L.Status.BAD_ADDRESS),
        ([I.matvec(XA, WORDS - 4, 0, 1, 2)], L.Status.BAD_ADDRESS),
        ([I.matvec(XA, YA, 0, 1, 1, bias=WORDS - 2)], L.Status.BAD_ADDRESS),
        ([I.lut(XA, YA, 0)], L.Status.BAD_LENGTH),
        ([I.lut(XA, WORDS, 1)], L.Status.BAD_ADDRESS),
        ([I.config(REG["LUT_SELECT"], 2), I.lut(XA, YA, 1)], L.Status.BAD_ADDRESS),
        ([I.grand(YA, 0)], L.Status.BAD_LENGTH),
        ([I.grand(WORDS - 1, 2)], L.Status.BAD_ADDRESS),
    ]
    image = b"".join(assemble(prog + [I.halt()]).ljust(48, b"\0") for prog, _ in cases)
    dev.mem.write_bytes(0, image)
    before = scratch_image(dev)
    for k, (prog, expected) in enumerate(cases):
        at = 24 * k
        status, body = dev.send(L.Opcode.RUN, struct.pack("<II", 2 * at, 100))
        pc, executed, _, busy = struct.unpack("<IIII", body)
        assert (status, pc, executed) == (expected, 2 * at + 16 * (len(prog) - 1),
                                          len(prog) - 1), prog
        assert busy == 0, prog                 # a failing instruction issues no beat
        if prog[0].op == Op.CONFIG:
            dev.reg("LUT_SELECT", 0)
        assert dev.send(L.Opcode.PING, b"ok") == (L.Status.OK, b"ok")
    assert scratch_image(dev) == before


#: The pairs of ``_boundary_cases`` the quick suite runs: one range of each instruction (MOVE's
#: source, LOADW's source, QUANT's destination, MATVEC's tile ending on the last weight entry
#: and its block count, LUT's table, DMATVEC's bias, GRAND's destination);
#: ``test_range_boundaries[all]`` (slow) runs all 24.
SAMPLE_PAIRS = (0, 4, 7, 13, 14, 17, 20, 23)


def _boundary_cases(sample=False):
    """``(program, status)``: each range the sequencer checks at its last valid value and one
    past it (W words of scratchpad, D weight entries, N lanes, B-element blocks); with
    ``sample``, only the pairs :data:`SAMPLE_PAIRS`."""
    W, D, OK, ADDR, LEN = WORDS, BASE["weight_depth"], L.Status.OK, L.Status.BAD_ADDRESS, \
        L.Status.BAD_LENGTH
    lut0 = I.config(REG["LUT_SELECT"], 0)
    pairs = [
        # MOVE: source, destination, and both through the offsets.
        (I.move(W - 4, 600, 4), I.move(W - 3, 600, 4)),
        (I.move(610, W - 4, 4), I.move(610, W - 3, 4)),
        ([I.setofs(W - 1, 0), I.move(0, 620, 1, flags=1)],
         [I.setofs(W, 0), I.move(0, 620, 1, flags=1)]),
        ([I.setofs(0, W - 1), I.move(630, 0, 1, flags=2)],
         [I.setofs(0, W), I.move(630, 0, 1, flags=2)]),
        # LOADW: count·N source words, count weight entries.
        (I.loadw(W - 3 * N, 0, 3), I.loadw(W - 3 * N + 1, 0, 3)),
        (I.loadw(640, D - 5, 5), I.loadw(640, D - 4, 5)),
        # QUANT (int8): source and destination.
        (I.quant(W - 6, 660, 6), I.quant(W - 5, 660, 6)),
        (I.quant(670, W - 6, 6), I.quant(670, W - 5, 6)),
        # MATVEC: K = nb·B input words, T·N outputs, T·N bias words, entry + T·K entries,
        # nb <= max_blocks.
        (I.matvec(W - 2 * B, 700, 0, 2, 1), I.matvec(W - 2 * B + 1, 700, 0, 2, 1)),
        (I.matvec(680, W - 2 * N, 0, 1, 2), I.matvec(680, W - 2 * N + 1, 0, 1, 2)),
        (I.matvec(680, 700, 0, 1, 2, bias=W - 2 * N),
         I.matvec(680, 700, 0, 1, 2, bias=W - 2 * N + 1)),
        (I.matvec(680, 700, D - 2 * B, 2, 1), I.matvec(680, 700, D - 2 * B + 1, 2, 1)),
        (I.matvec(680, 700, 0, 4, 4), I.matvec(680, 700, 1, 4, 4)),
        # ... and where a tile ends exactly on the last entry with tiles still to come.
        (I.matvec(680, 700, D - 3 * B, 1, 3), I.matvec(680, 700, D - 2 * B, 1, 3)),
        (I.matvec(680, 700, 0, BASE["max_blocks"], 1),
         (I.matvec(680, 700, 0, BASE["max_blocks"] + 1, 1), LEN)),
        # LUT: source, destination, table LUT_SELECT < lut_tables.
        ([lut0, I.lut(W - 5, 720, 5)], [lut0, I.lut(W - 4, 720, 5)]),
        ([lut0, I.lut(730, W - 5, 5)], [lut0, I.lut(730, W - 4, 5)]),
        ([I.config(REG["LUT_SELECT"], BASE["lut_tables"] - 1), I.lut(740, 750, 3)],
         [I.config(REG["LUT_SELECT"], BASE["lut_tables"]), I.lut(740, 750, 3)]),
        # DMATVEC (K = 5 columns: 2 entries per row): input, output, bias, weight entries.
        (I.dmatvec(W - 5, 760, 0, 5, 2), I.dmatvec(W - 4, 760, 0, 5, 2)),
        (I.dmatvec(770, W - 3, 0, 5, 3), I.dmatvec(770, W - 2, 0, 5, 3)),
        (I.dmatvec(770, 780, 0, 5, 3, bias=W - 3), I.dmatvec(770, 780, 0, 5, 3, bias=W - 2)),
        (I.dmatvec(770, 780, D - 6, 5, 3), I.dmatvec(770, 780, D - 5, 5, 3)),
        (I.dmatvec(770, 780, D - 6, 5, 3), I.dmatvec(770, 780, D - 4, 5, 3)),
        # GRAND: destination.
        (I.grand(W - 2, 2), I.grand(W - 1, 2)),
    ]
    if sample:
        pairs = [pairs[k] for k in SAMPLE_PAIRS]
    cases = []
    for good, bad in pairs:
        bad, status = bad if isinstance(bad, tuple) else (bad, ADDR)
        cases += [(good if isinstance(good, list) else [good], OK),
                  (bad if isinstance(bad, list) else [bad], status)]
    return cases


@pytest.mark.parametrize("pairs", ["sample", pytest.param("all", marks=pytest.mark.slow)])
def test_range_boundaries(dev, pairs):
    """Every range the sequencer checks (MOVE, LOADW, QUANT, MATVEC, LUT, DMATVEC, GRAND;
    scratchpad words, weight entries, block count, LUT table): the last valid value runs (OK),
    one past it fails with the documented status at that instruction. Each RUN's reply fields
    and, at the end, the whole scratchpad (random data, so every write shows) equal
    lowbit.sim.link.DeviceModel's, which was given the same state first. The quick suite runs
    one range of each instruction (``SAMPLE_PAIRS``: 16 of the 48 RUNs, ~1 s of Amaranth time
    each); ``[all]`` (slow) every range."""
    _check_range_boundaries(dev, sample=pairs == "sample")


@pytest.mark.parametrize("pairs", ["sample", pytest.param("all", marks=pytest.mark.slow)])
def test_range_boundaries_bfp_only(bfp_only, pairs):
    """The same with the BFP column alone (no discrete unit, no quantiser: MATVEC's nb and T
    kept as narrow as the ranges need, the weight range by multiplication), where QUANT,
    DMATVEC and GRAND fail with BAD_OPCODE as the model says."""
    _check_range_boundaries(bfp_only, sample=pairs == "sample",
                            lacks={Op.QUANT, Op.DMATVEC, Op.GRAND})


def _both(dev, model):
    """``both(opcode, payload)``: send a request to the top and to ``model``, assert equal
    replies (a RUN's cycle count, bytes 8..11, is the hardware's), return the top's."""
    def both(opcode, payload=b""):
        want = L.decode_reply(model.feed(L.encode_request(opcode, payload)))
        got = dev.send(opcode, payload)
        if opcode == L.Opcode.RUN:     # the cycle count (bytes 8..11) is the hardware's
            assert (got[0], got[1][:8], got[1][12:]) == (want[0], want[1][:8], want[1][12:])
        else:
            assert got == want
        return got
    return both


def _check_range_boundaries(dev, sample=False, lacks=()):
    model = L.DeviceModel(**dev.params)
    rng = np.random.default_rng(25)

    both = _both(dev, model)

    def store(byte_addr, data):
        """The model's through its MEM_WRITE, the top's through the backdoor (tests/backdoor.py);
        every other request and every reply crosses the link."""
        step = BASE["frame_bytes"] - 4
        for k in range(0, len(data), step):
            reply = model.feed(L.encode_request(L.Opcode.MEM_WRITE, L.mem_write_payload(
                byte_addr + k, data[k:k + step])))
            assert L.decode_reply(reply) == (L.Status.OK, b"")
        dev.mem.write_bytes(byte_addr, data)

    store(0, rng.integers(0, 256, BASE["scratch_bytes"]).astype(np.uint8).tobytes())
    for t in range(BASE["lut_tables"]):
        both(L.Opcode.LUT_WRITE, bytes([t, 0]) + rng.integers(0, 256, 256).astype(np.uint8)
             .tobytes())
    both(L.Opcode.GRAND_SEED, rng.integers(1, 256, 32).astype(np.uint8).tobytes())
    for name, value in [("MANT_WIDTH", 8), ("ROUNDING", 0), ("EXP_SELECT", 0), ("FIXED_EXP", 3),
                        ("QUANT_FORMAT", 1), ("QUANT_RULE", 0), ("QUANT_SHIFT", 0),
                        ("LUT_SELECT", 0), ("LUT_EXP", 0), ("DISC_SHIFT", 2), ("CODE_WIDTH", 2),
                        ("CODE_BOOK0", 0x12_0B_01_10), ("CODE_BOOK1", 0x03_14_0A_02)]:
        both(L.Opcode.REG_WRITE, L.reg_write_payload(REG[name], value))
    prog = 200
    store(2 * prog, assemble([I.loadw(300, 0, BASE["weight_depth"]), I.halt()]))
    assert both(L.Opcode.RUN, struct.pack("<II", 2 * prog, 10))[0] == L.Status.OK
    for program, status in _boundary_cases(sample=sample):
        if any(ins.op in lacks for ins in program):
            continue
        store(2 * prog, assemble(program + [I.halt()]))
        got = both(L.Opcode.RUN, struct.pack("<II", 2 * prog, 10))
        pc, executed = struct.unpack("<II", got[1][:8])
        # pc: the failing instruction (executed: those before it), or the HALT (counted).
        last = len(program) - 1 if status != L.Status.OK else len(program)
        assert (got[0], pc, executed) == (status, 2 * prog + 16 * last,
                                          last + (status == L.Status.OK)), program
    assert dev.mem.read_bytes(0, BASE["scratch_bytes"]) == bytes(model.scratch)


def test_limit_and_run_payload(dev):
    P = 200
    # An endless loop ends at the instruction limit; pc is the instruction that would run next.
    status, pc, executed, cycles, busy = dev.run([I.nop(), I.jump(P)], at=P, limit=7)
    assert (status, pc, executed) == (L.Status.LIMIT, 2 * P + 16, 7)
    assert cycles > 7 and busy == 0
    # HALT as the limit-th instruction is OK.
    assert dev.run([I.nop(), I.halt()], at=P, limit=2)[:3] == (L.Status.OK, 2 * P + 16, 2)
    # Limits whose low 16 bits run out (0, or 0 after three instructions) are not reached:
    # the count is 32 bits (the sequencer keeps it in two halves).
    for limit in (0x1_0000, 0x1_0003, 0x5_0002, 0xFFFF_FFFF):
        assert dev.run([I.nop()] * 5 + [I.halt()], at=P, limit=limit)[:3] == (
            L.Status.OK, 2 * P + 80, 6)
    # Running off the end of the scratchpad: the fetch fails with BAD_ADDRESS.
    assert dev.run([I.nop()], at=WORDS - 8)[:3] == (L.Status.BAD_ADDRESS, 2 * WORDS, 1)
    assert dev.run([I.jump(WORDS - 4)], at=P)[:3] == (L.Status.BAD_ADDRESS, 2 * WORDS - 8, 1)
    # A jump to the last whole instruction runs it; one word further, its fetch fails.
    dev.write(WORDS - 8, assemble([I.halt()]))
    assert dev.run([I.jump(WORDS - 8)], at=P)[:3] == (L.Status.OK, 2 * WORDS - 16, 2)
    assert dev.run([I.jump(WORDS - 7)], at=P)[:3] == (L.Status.BAD_ADDRESS, 2 * WORDS - 14, 1)
    for payload, expected in [(b"", L.Status.BAD_LENGTH),
                              (struct.pack("<IIB", 0, 1, 0), L.Status.BAD_LENGTH),
                              (struct.pack("<II", 1, 1), L.Status.BAD_ADDRESS),
                              (struct.pack("<II", 2 * WORDS - 14, 1), L.Status.BAD_ADDRESS),
                              (struct.pack("<II", 1 << 31, 1), L.Status.BAD_ADDRESS),
                              (struct.pack("<II", 0, 0), L.Status.BAD_LENGTH)]:
        assert dev.send(L.Opcode.RUN, payload) == (expected, b"")
    assert dev.run([I.halt()], at=WORDS - 8)[:3] == (L.Status.OK, 2 * WORDS - 16, 1)


@pytest.mark.parametrize("name,value,exc", [
    ("sequencer", 1, TypeError), ("matrix_lanes", 6, ValueError), ("matrix_lanes", 128, ValueError),
    ("matrix_lanes", 8.0, TypeError), ("block", 12, ValueError), ("block", 1, ValueError),
    ("block", True, TypeError), ("max_blocks", 0, ValueError), ("max_blocks", 257, ValueError),
    ("weight_depth", 100, ValueError), ("weight_depth", 8, ValueError),
    ("weight_depth", "64", TypeError), ("bfp", 0, TypeError), ("quantiser", None, TypeError),
    ("discrete", 1, TypeError), ("code_bits", 4, ValueError), ("code_bits", 2.0, TypeError),
    ("multiplier", "dsp", ValueError), ("multiplier", 3, TypeError),
    ("dsp_lanes", 9, ValueError), ("dsp_lanes", -1, ValueError), ("dsp_lanes", 4.0, TypeError),
    ("dsp_lanes", True, TypeError), ("grand_modes", "normal", TypeError),
    ("grand_modes", ["gauss"], ValueError),
    ("grand_modes", [1], TypeError), ("scratch_write_addr", 1, TypeError),
    ("seq_pipelined", 1, TypeError), ("seq_pipelined", None, TypeError),
])
def test_parameter_validation(name, value, exc):
    with pytest.raises(exc):
        Accelerator(**{name: value})


def test_seq_pipelined_message_and_profiles():
    """``seq_pipelined`` is a bool, named in the error; the ULX3S's profile carries the
    registers (its 100 MHz target), the others do not (their netlists stay as they were)."""
    with pytest.raises(TypeError, match="seq_pipelined must be a bool, not 'yes'"):
        Accelerator(seq_pipelined="yes")
    with pytest.raises(TypeError, match="pipelined must be a bool, not 1"):
        Sequencer(pipelined=1)
    assert {name for name, b in BOARDS.items() if b.top.get("seq_pipelined")} == {"ulx3s"}
    with pytest.raises(TypeError, match="read_register must be a bool, not 1"):
        Sequencer(pipelined=True, read_register=1)
    with pytest.raises(ValueError, match="read_register needs pipelined"):
        Sequencer(read_register=True)
    assert Sequencer(pipelined=True, read_register=True).read_register
    # The block-RAM scratchpad's read register comes with seq_pipelined; not on the SPRAM.
    assert not Accelerator(seq_pipelined=True, use_spram=True).scratch_read_register
    assert "read_register" not in Accelerator().sequencer_params()


def test_dsp_lanes_reach_the_column():
    """``dsp_lanes`` is checked against ``matrix_lanes`` and reaches the column as its
    ``hard_lanes``; the Sequencer checks its own ``hard_lanes``."""
    import re

    from amaranth.back import rtlil
    with pytest.raises(ValueError, match="^DSP lane count must be an integer between 0 and 32, "
                                         "not 40$"):
        Accelerator(sequencer=True, matrix_lanes=32, dsp_lanes=40)
    top = Accelerator(sequencer=True, matrix_lanes=8, dsp_lanes=5, multiplier="mult18x18d")
    assert top.dsp_lanes == 5 and Accelerator().dsp_lanes is None
    seq = Sequencer(**top.sequencer_params())
    assert seq.hard_lanes == 5
    with pytest.raises(ValueError, match="^Hard lane count must be an integer between 0 and 8, "
                                         "not 9$"):
        Sequencer(lanes=8, hard_lanes=9)
    with pytest.raises(TypeError, match="^Hard lane count must be None or an integer"):
        Sequencer(hard_lanes="all")
    text = rtlil.convert(Sequencer(**dict(top.sequencer_params(), simulation=False)))
    assert len(re.findall(r"cell \\MULT18X18D ", text)) == 5


def test_engine_bits_and_sequencer_params():
    top = Accelerator(sequencer=True, discrete=False, grand=False, lut_tables=0)
    assert set(top.engine_names) == {"bfp", "quantiser", "sequencer"}
    assert set(Accelerator().engine_names) == {"grand", "lut"}
    with pytest.raises(ValueError, match="power of two"):
        Sequencer(lanes=12)


def _specified(ins):
    """The instruction's results are specified by the ISA: an engine instruction's destination
    does not overlap its sources, except LUT's and QUANT's in place (MOVE copies any overlap)."""
    w, bias = ins.words, bool(ins.flags & F_BIAS)
    if ins.op == Op.MATVEC:                              # x, bias against dst, every sample
        stride = -(-w[3] * B // N) * N
        srcs = [(w[0], w[6] * stride + w[3] * B)] + [(w[5], w[4] * N)] * bias
        dst = (w[1], (w[6] + 1) * w[4] * N)
    elif ins.op == Op.DMATVEC:
        srcs = [(w[0], w[3])] + [(w[5], w[4])] * bias
        dst = (w[1], w[4])
    elif ins.op in (Op.QUANT, Op.LUT):                   # in place or apart
        if w[0] == w[1]:
            return True
        srcs, dst = [(w[0], w[2])], (w[1], w[2])
    else:
        return True
    return all(a + k <= dst[0] or dst[0] + dst[1] <= a for a, k in srcs)


def random_instruction(rng, words, depth):
    """One data or control instruction with operands mostly in range, whose results the ISA
    specifies (:func:`_specified`; an overlap of an engine's destination with its sources has
    unspecified results, and the top and the Machine differ there)."""
    while True:
        ins = _random_instruction(rng, words, depth)
        if _specified(ins):
            return ins


def _random_instruction(rng, words, depth):
    def addr(n):
        return int(rng.integers(600, words - n + 1)) if rng.random() < 0.95 else \
            int(rng.integers(0, 0x10000))
    kind = rng.choice(["matvec", "quant", "lut", "dmatvec", "grand", "move", "loadw", "config"])
    if kind == "matvec":
        nb, tiles = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        samples = int(rng.integers(1, 4)) if rng.random() < 0.5 else 1
        stride = -(-nb * B // N) * N
        return I.matvec(addr((samples - 1) * stride + nb * B), addr(samples * tiles * N),
                        int(rng.integers(0, depth - tiles * nb * B)),
                        nb, tiles, bias=addr(tiles * N) if rng.random() < 0.5 else None,
                        flags=F_LUT if rng.random() < 0.3 else 0, samples=samples)
    if kind == "dmatvec":
        k, r = int(rng.integers(1, 12)), int(rng.integers(1, 6))
        return I.dmatvec(addr(k), addr(r), int(rng.integers(0, 20)), k, r,
                         bias=addr(r) if rng.random() < 0.5 else None)
    if kind == "loadw":
        n = int(rng.integers(1, 6))
        return I.loadw(addr(n * N), int(rng.integers(0, depth - n)), n)
    if kind == "config":
        name = rng.choice(["MANT_WIDTH", "ROUNDING", "EXP_SELECT", "FIXED_EXP", "QUANT_FORMAT",
                           "QUANT_RULE", "QUANT_SHIFT", "LUT_SELECT", "LUT_EXP", "DISC_SHIFT",
                           "CODE_WIDTH", "PRNG_SEED3"])
        return I.config(REG[name], int(rng.integers(0, 1 << 32)))
    n = int(rng.integers(1, 3)) * B
    if kind == "quant":
        return I.quant(addr(n), addr(n), n)
    if kind == "lut":
        return I.lut(addr(n), addr(n), n)
    if kind == "grand":
        return I.grand(addr(n), n)
    return I.move(addr(n), addr(n), n)


@pytest.mark.slow
@pytest.mark.rotate  # one heavy case a day runs in CI's slow run (tests/conftest.py)
@pytest.mark.parametrize("seed,trials,top", [
    (2024, 1, {}), pytest.param(1, 30, {}, marks=pytest.mark.heavy),
    pytest.param(2, 30, {}, marks=pytest.mark.heavy),
    (3, 10, {"seq_pipelined": True}), (4, 10, {"matvec_bias_fifo": True})],
    ids=["2024-1", "1-30", "2-30", "3-10-seq_pipelined", "4-10-matvec_bias_fifo"])
def test_random_programs_vs_device_model(seed, trials, top):
    """Random programs on random data: status, pc, executed, busy and the whole scratchpad
    equal lowbit.sim.link.DeviceModel's (the host engineer's interpreter,
    lowbit.sim.program.Machine), the data, tables and the scratchpad read back through the
    link. ``[2024-1]`` runs one program, ``[1-30]`` and ``[2-30]`` (heavy: one of them a day in
    CI's slow run) 30,
    ``[3-10-seq_pipelined]`` and ``[4-10-matvec_bias_fifo]`` 10 each on a top with that
    option. The quick suite's random programs:
    ``test_driver.py::test_sim_random_programs_match_model`` (the same outcomes and
    scratchpads, the data through the simulator's backdoor)."""
    dev = Device(**top)
    model = L.DeviceModel(**dev.params)
    rng = np.random.default_rng(seed)

    def both(opcode, payload=b""):
        expected = L.decode_reply(model.feed(L.encode_request(opcode, payload)))
        got = dev.send(opcode, payload)
        if opcode == L.Opcode.RUN:
            # Everything but the cycle count, which the model cannot predict: status, pc,
            # executed, and the matrix engine's busy cycles (its accepted beats).
            assert (got[0], got[1][:8], got[1][12:]) == \
                (expected[0], expected[1][:8], expected[1][12:]), \
                (L.Status(got[0]), struct.unpack("<IIII", got[1]) if got[1] else None,
                 model.last_run)
        else:
            assert got == expected
        return got

    both(L.Opcode.MEM_WRITE, L.mem_write_payload(1200, rng.integers(0, 256, 400).astype(np.uint8)
                                                 .tobytes()))
    both(L.Opcode.MEM_WRITE, L.mem_write_payload(1600, f16_codes(rng.normal(0, 4, 100))
                                                 .astype("<u2").tobytes()))
    for t in range(2):
        both(L.Opcode.LUT_WRITE, bytes([t, 0]) + rng.integers(0, 256, 256).astype(np.uint8)
             .tobytes())
    both(L.Opcode.GRAND_SEED, rng.integers(0, 256, 32).astype(np.uint8).tobytes())
    for name, value in [("CODE_BOOK0", 0x12_0B_01_10), ("CODE_BOOK1", 0x03_14_0A_02),
                        ("PRNG_SEED0", 0x1234), ("PRNG_SEED3", 0x5678)]:
        both(L.Opcode.REG_WRITE, L.reg_write_payload(REG[name], value))
    both(L.Opcode.MEM_WRITE, L.mem_write_payload(0, assemble([I.loadw(600, 0, 60), I.halt()])))
    both(L.Opcode.RUN, struct.pack("<II", 0, 10))
    for _ in range(trials):
        program = [random_instruction(rng, WORDS, BASE["weight_depth"]) for _ in range(5)]
        both(L.Opcode.MEM_WRITE, L.mem_write_payload(0, assemble(program + [I.halt()])))
        both(L.Opcode.RUN, struct.pack("<II", 0, 100))
        image = dev.read(0, BASE["scratch_bytes"])
        assert image == bytes(model.scratch), program
        # The backdoor of the other tests (tests/backdoor.py) sees what MEM_READ sends.
        assert dev.mem.read_bytes(0, BASE["scratch_bytes"]) == image


def test_spram_scratchpad_banks():
    """The reader stage and write register on the UP5K SPRAM scratchpad (behavioural model),
    with operands in the second bank and results in both."""
    dev = Device(use_spram=True, scratch_bytes=65536, frame_bytes=300)
    rng = np.random.default_rng(13)
    layer = random_layer(rng, 6, 8, bias=True, exp_mode="max", rounding="nearest")
    hi = 16384
    tiles = 2
    dev.put(hi + 100, weight_words(layer.w_m, layer.w_e, B))
    x_m, x_e = rng.integers(-128, 128, 8), rng.integers(-3, 3, 2)
    dev.put(hi + 300, pack_elements(x_m, np.repeat(x_e, B)))
    dev.put(hi + 320, pack_elements(np.pad(layer.bias_m, (0, 2)), np.pad(layer.bias_e, (0, 2))))
    table = rng.integers(0, 256, 256)
    dev.ok(L.Opcode.LUT_WRITE, bytes([0, 0]) + bytes(int(v) for v in table))
    dev.reg("EXP_SELECT", 0)
    dev.run_ok([I.loadw(hi + 100, 0, tiles * 8),
                I.matvec(hi + 300, 200, 0, 2, tiles, bias=hi + 320),
                I.config(REG["LUT_SELECT"], 0), I.lut(200, hi + 500, 6), I.move(200, hi - 3, 6),
                I.halt()])
    m, e = bfp_dense(layer, x_m, x_e, dev.top.column_model())
    assert dev.get(200, 6).tolist() == pack_elements(m, e).tolist()
    assert dev.get(hi - 3, 6).tolist() == pack_elements(m, e).tolist()
    assert dev.get(hi + 500, 6).tolist() == [int(table[v & 0xFF]) for v in m]
    # Across the banks through MEM_READ too (the other reads above use the backdoor).
    assert dev.read(2 * (hi - 3), 12) == dev.mem.read_bytes(2 * (hi - 3), 12)


def test_matvec_predicted_selector_matches_model_across_tiles_and_runs():
    """EXP_SELECT 2: the column's predicted exponent selector, its history carried across the
    tiles of a RUN (a scale jump resets it) and cleared when the next RUN starts; the real top
    equals the model on every output word (its weights, input and outputs through the
    simulator's backdoor, tests/backdoor.py)."""
    from lowbit.boards.driver import Accelerator as Driver
    from lowbit.sim.program import config
    params = dict(sequencer=True, scratch_bytes=2048, frame_bytes=256, matrix_lanes=4, block=4,
                  max_blocks=4, weight_depth=64, timeout_bits=20)
    rng = np.random.default_rng(5)
    tiles, nb = 6, 2
    k = nb * 4
    weights = rng.integers(-127, 128, (tiles * k, 4))
    weights[3 * k:] //= 32                      # a scale jump down between tile 2 and tile 3
    words = (weights & 0xFF) | ((rng.integers(-6, -2, (tiles * k, 4)) & 0xFF) << 8)
    x = (rng.integers(-127, 128, k) & 0xFF) | ((-3 & 0xFF) << 8)
    prog = [config("EXP_SELECT", 2), I.matvec(300, 400, 0, nb, tiles),
            I.halt()]
    outs = []
    hw = Driver.simulated(**params)
    hw.port = FastMemoryPort(hw.port)
    try:
        for acc in (hw, Driver.model(**params)):
            acc.load_weights(0, words)
            acc.write_mem(600, np.asarray(x, dtype="<u2").tobytes())
            acc.load_program(prog)
            got = []
            for _ in range(2):
                acc.run(0, 10)
                got.append(acc.read_mem(800, 2 * 4 * tiles))
            outs.append(got)
    finally:
        hw.close()
    assert np.array_equal(outs[0][0], outs[1][0]) and np.array_equal(outs[0][1], outs[1][1])
    assert np.array_equal(outs[0][0], outs[0][1])      # history cleared at each RUN
    exps = set(np.frombuffer(outs[0][0], dtype=np.uint8)[1::2].tolist())
    assert len(exps) > 1
    ref = Driver.model(**params)                        # the max selector gives other words
    ref.load_weights(0, words)
    ref.write_mem(600, np.asarray(x, dtype="<u2").tobytes())
    ref.load_program([config("EXP_SELECT", 0)] + prog[1:])
    ref.run(0, 10)
    assert not np.array_equal(ref.read_mem(800, 2 * 4 * tiles), outs[1][0])


# -- the iCEBreaker's BFP profile (lowbit.boards.profiles "icebreaker"): the column's area options
# --

def _icebreaker_design():
    """The lowbit.sim.program.Design of the iCEBreaker profile's top."""
    from lowbit.boards.profiles import get_board
    from lowbit.sim.program import Design
    t = get_board("icebreaker").top
    return Design(matrix_lanes=t["matrix_lanes"], block=t["block"], max_blocks=t["max_blocks"],
                  weight_depth=t["weight_depth"], scratch_bytes=t["scratch_bytes"],
                  lanes=t["lanes"], lut_tables=t["lut_tables"], engines={"bfp"},
                  bfp_stochastic=t["bfp_stochastic"], bfp_predictor=t["bfp_predictor"],
                  bfp_mant_width=t.get("bfp_mant_width", True),
                  seq_control=t.get("seq_control", True))


def _icebreaker_busy_count():
    from lowbit.boards.profiles import get_board
    return get_board("icebreaker").top["busy_count"]


@pytest.fixture(scope="module")
def icebreaker():
    from lowbit.boards.profiles import get_board
    return Device(**get_board("icebreaker").top)


def test_icebreaker_profile_options():
    """The profile carries the BFP column with every area option, the bias FIFO, no discrete
    unit and no rounding PRNG; the Design the model runs knows the two it must (stochastic,
    predictor)."""
    from lowbit.boards.profiles import get_board
    t = get_board("icebreaker").top
    assert t["bfp"] and not t["discrete"] and not t["quantiser"] and t["matrix_lanes"] == 16
    seq = Sequencer(**Accelerator(**t).sequencer_params())
    seq._MustUse__silence = True
    assert (seq.bfp_stochastic, seq.bfp_predictor) == (False, False)
    assert (seq.bias_fifo, seq.x_buffer) == (True, False)     # one port: the FIFO, no buffer
    assert seq.column_params()["predictor"] is False
    assert _icebreaker_design().column().has_predictor is False
    for name in ("bfp_stochastic", "bfp_predictor", "bfp_acc_block_ram", "bfp_pipelined"):
        with pytest.raises(TypeError, match=f"{name} must be a bool, not 1"):
            Sequencer(**{name: 1})
    from lowbit.sim.program import Design, NetworkLayout
    for name in ("bfp_stochastic", "bfp_predictor"):
        with pytest.raises(TypeError, match=f"{name} must be a bool, not 1"):
            Design(**{name: 1})
    # A network needing what the column lacks is refused when the program is laid out.
    rng = np.random.default_rng(0)
    for kw, what in ((dict(rounding="stochastic"), "rounds stochastically"),
                     (dict(exp_mode="predicted"), "predicted exponent selector")):
        layer = BFPDense(w_m=rng.integers(-128, 128, (4, 16)), w_e=np.zeros((4, 1), int),
                         **{"exp_mode": "max", **kw})
        with pytest.raises(ValueError, match=what):
            NetworkLayout([layer], _icebreaker_design())
        NetworkLayout([layer], Design(block=16))
    from amaranth.back import rtlil
    text = rtlil.convert(Sequencer(**{**Accelerator(**t).sequencer_params(), "lut": False}))
    assert "module \\top.prng" not in text and "module \\top.column" in text
    assert "module \\top.prng" in rtlil.convert(Sequencer(bfp_stochastic=True, quantiser=False))


def _run_both(dev, machine, program, at, words, regs):
    """Same scratchpad words, registers and program on the top and the Machine; returns
    ``(top RUN result, Machine RunResult)``."""
    for addr, values in words.items():
        dev.put(addr, values)
        machine.write_words(addr, values)
    for name, value in regs.items():
        dev.reg(name, value)
        assert machine.write_reg(REG[name], value) == L.Status.OK
    code = assemble(program)
    machine.write_words(at, np.frombuffer(code, dtype="<u2"))
    return dev.run(program, at=at), machine.run(2 * at, 100)


def test_icebreaker_matvec_equals_machine(icebreaker):
    """One layer program (LOADW, MATVEC with bias and the max selector, the same with F_LUT,
    MATVEC with a fixed exponent) on the iCEBreaker's top equals lowbit.sim.program.Machine
    word for word."""
    from lowbit.sim.program import Machine
    dev, machine = icebreaker, Machine(_icebreaker_design(), busy_count=_icebreaker_busy_count())
    rng = np.random.default_rng(44)
    b, n = 16, machine.design.matrix_lanes
    rows = 3 * n // 2                   # two tiles, the second one partly used
    l1 = BFPDense(w_m=rng.integers(-128, 128, (rows, 32)), w_e=rng.integers(-8, -3, (rows, 2)),
                  bias_m=rng.integers(-128, 128, rows), bias_e=rng.integers(-6, -2, rows),
                  exp_mode="max", width=8 if _icebreaker_design().bfp_mant_width is False else 7)
    table = rng.integers(0, 256, 256)
    last = machine.design.lut_tables - 1          # the profile's last table
    dev.ok(L.Opcode.LUT_WRITE, bytes([last, 0]) + bytes(int(v) for v in table))
    machine.luts[last][:] = bytes(int(v) for v in table)
    tiles = -(-rows // n)
    w = np.zeros((tiles * n, 32), dtype=np.int64)
    e = np.zeros((tiles * n, 32), dtype=np.int64)
    w[:rows], e[:rows] = l1.w_m, np.repeat(l1.w_e, b, axis=1)
    wwords = pack_elements(w, e).reshape(tiles, n, 32).transpose(0, 2, 1).reshape(-1)
    x = pack_elements(rng.integers(-128, 128, 32), np.repeat(rng.integers(-4, 2, 2), b))
    bias = pack_elements(l1.bias_m, l1.bias_e)
    X, BI, Y, Z, WS = 3000, 3100, 3200, 3300, 4000
    program = [I.loadw(WS, 10, tiles * 32), I.matvec(X, Y, 10, 2, tiles, bias=BI),
               I.config(REG["LUT_SELECT"], last),
               I.matvec(X, Z, 10, 2, tiles, bias=BI, flags=F_LUT),
               I.config(REG["EXP_SELECT"], 1),
               I.matvec(X, Z + tiles * n, 10 + 32, 2, tiles - 1), I.halt()]
    (status, pc, executed, cycles, busy), ref = _run_both(
        dev, machine, program, 200, {WS: wwords, X: x, BI: bias, Y: np.zeros(rows + 8, int)},
        {"MANT_WIDTH": l1.width, "ROUNDING": 0, "EXP_SELECT": 0, "FIXED_EXP": -5 & 0xFF})
    assert (status, pc, executed) == (ref.status, ref.pc, ref.executed) == \
        (L.Status.OK, 400 + 16 * 6, 7)
    # T · K beats per MATVEC: (3 tiles - 1) · 32 busy cycles, counted by the iCEBreaker's top.
    assert busy == ref.busy == (3 * tiles - 1) * 32 and cycles > busy
    for addr, count in ((Y, rows), (Z, (2 * tiles - 1) * n)):
        assert dev.get(addr, count).tolist() == machine.read_words(addr, count).tolist()
    x_m, x_e = unpack_elements(x)
    m, ee = bfp_dense(l1, x_m, x_e[::b], dev.top.column_model())
    assert dev.get(Y, rows).tolist() == pack_elements(m, ee).tolist()
    assert cycles > tiles * 32


@pytest.mark.slow                      # 10 CPU-s: the 64-lane column in Amaranth's simulator
@pytest.mark.parametrize("seq_pipelined", [False, True])
def test_64_lanes_matvec_equals_machine(seq_pipelined):
    """The widest column the sequencer takes (N = 64, the ULX3S's): LOADW and a MATVEC of one and
    a half tiles with bias (the second tile's unused rows in the lanes' upper half), and a
    one-tile MATVEC with a fixed exponent, equal lowbit.sim.program.Machine word for word and
    lowbit.sim.network.bfp_dense; the busy count is T · K. With B = 4 the column's drain moves
    16 lanes a cycle into 16 combiners (``drain_lanes``, by default N / B). ``[True]``: with
    the ULX3S's ``seq_pipelined``, so the column's input stage (x in 16 copies, one per four
    lanes) too."""
    from lowbit.sim.program import Design, Machine
    n, b, k = 64, 4, 4
    params = dict(matrix_lanes=n, block=b, max_blocks=1, weight_depth=16, discrete=False,
                  quantiser=False, grand=False, lanes=1, lut_tables=0, bfp_predictor=False,
                  scratch_bytes=2048, seq_pipelined=seq_pipelined)
    dev = Device(**params)
    assert dev.top.drain_lanes == 16
    machine = Machine(Design(matrix_lanes=n, block=b, max_blocks=1, weight_depth=16,
                             scratch_bytes=2048, lanes=1, lut_tables=0,
                             engines={"bfp"}, bfp_predictor=False))
    rng = np.random.default_rng(64)
    rows, tiles = 3 * n // 2, 2
    layer = BFPDense(w_m=rng.integers(-128, 128, (rows, k)), w_e=rng.integers(-8, -3, (rows, 1)),
                     bias_m=rng.integers(-128, 128, rows), bias_e=rng.integers(-6, -2, rows),
                     exp_mode="max", rounding="nearest")
    w = np.zeros((tiles * n, k), dtype=np.int64)
    e = np.zeros((tiles * n, k), dtype=np.int64)
    w[:rows], e[:rows] = layer.w_m, np.repeat(layer.w_e, b, axis=1)
    wwords = pack_elements(w, e).reshape(tiles, n, k).transpose(0, 2, 1).reshape(-1)
    x = pack_elements(rng.integers(-128, 128, k), np.repeat(rng.integers(-4, 2, 1), b))
    bias = np.zeros(tiles * n, dtype=np.int64)
    bias[:rows] = pack_elements(layer.bias_m, layer.bias_e)
    X, BI, Y, Z, WS = 60, 64, 192, 320, 512
    program = [I.loadw(WS, 0, tiles * k), I.matvec(X, Y, 0, 1, tiles, bias=BI),
               I.config(REG["EXP_SELECT"], 1), I.matvec(X, Z, k, 1, 1), I.halt()]
    (status, pc, executed, cycles, busy), ref = _run_both(
        dev, machine, program, 0, {WS: wwords, X: x, BI: bias}, {"MANT_WIDTH": 8, "ROUNDING": 0,
                                                              "EXP_SELECT": 0, "FIXED_EXP": 0xFB})
    assert (status, pc, executed) == (ref.status, ref.pc, ref.executed) == (L.Status.OK, 64, 5)
    assert busy == ref.busy == (tiles + 1) * k and cycles > busy
    for addr, count in ((Y, tiles * n), (Z, n)):
        assert dev.get(addr, count).tolist() == machine.read_words(addr, count).tolist()
    x_m, x_e = unpack_elements(x)
    m, ee = bfp_dense(layer, x_m, x_e[b - 1::b], dev.top.column_model())
    assert dev.get(Y, rows).tolist() == pack_elements(m, ee).tolist()


def test_icebreaker_matvec_lut_flag_equals_matvec_then_lut(icebreaker):
    """MATVEC with F_LUT (the activation on the column's way out) writes what MATVEC then LUT
    would write (``table[m] | LUT_EXP << 8`` of the plain MATVEC's words; the iCEBreaker's
    sequencer has no LUT instruction), on its top and in the Machine, word for word, with a
    max and a fixed exponent; with LUT_SELECT past the tables it fails with BAD_ADDRESS and
    writes nothing."""
    from lowbit.sim.program import Machine
    dev, machine = icebreaker, Machine(_icebreaker_design(), busy_count=_icebreaker_busy_count())
    rng = np.random.default_rng(45)
    b, n, k = 16, machine.design.matrix_lanes, 32
    tiles = 2
    ww = rng.integers(0, 1 << 16, tiles * k * n) & 0xF8FF | 0xF800   # exponents -8..-1
    x = pack_elements(rng.integers(-128, 128, k), np.repeat(rng.integers(-4, 2, 2), b))
    bias = pack_elements(rng.integers(-128, 128, tiles * n), rng.integers(-6, -2, tiles * n))
    table = rng.integers(0, 256, 256)
    tables = machine.design.lut_tables
    dev.ok(L.Opcode.LUT_WRITE, bytes([tables - 1, 0]) + bytes(int(v) for v in table))
    machine.luts[tables - 1][:] = bytes(int(v) for v in table)
    X, BI, Y, Z, WS = 3000, 3100, 3200, 3300, 4000
    fused = I.matvec(X, Y, 20, 2, tiles, bias=BI, flags=F_LUT)
    program = [I.loadw(WS, 20, tiles * k), fused, I.matvec(X, Z, 20, 2, tiles, bias=BI),
               I.config(REG["EXP_SELECT"], 1),
               I.matvec(X, Y + 64, 20, 2, tiles, flags=F_LUT),
               I.matvec(X, Z + 64, 20, 2, tiles), I.halt()]
    zeros = np.zeros(tiles * n + 64, int)
    (status, pc, executed, _, busy), ref = _run_both(
        dev, machine, program, 200, {WS: ww, X: x, BI: bias, Y: zeros, Z: zeros},
        {"MANT_WIDTH": 8, "ROUNDING": 0, "EXP_SELECT": 0, "FIXED_EXP": -4 & 0xFF,
         "LUT_SELECT": tables - 1, "LUT_EXP": 0xFC})
    assert (status, pc, executed, busy) == (ref.status, ref.pc, ref.executed, ref.busy) == \
        (L.Status.OK, 400 + 16 * 6, 7, 4 * tiles * k)
    for at in (Y, Z):
        assert dev.get(at, tiles * n + 64).tolist() == \
            machine.read_words(at, tiles * n + 64).tolist()
    for off in (0, 64):
        got = dev.get(Y + off, tiles * n)
        plain = dev.get(Z + off, tiles * n)
        assert got.tolist() == (table[plain & 0xFF] | 0xFC << 8).tolist()
        assert set((got >> 8).tolist()) == {0xFC}
    # LUT_SELECT 2 is past the iCEBreaker's two tables.
    assert tables == 2
    before = dev.get(Y, tiles * n).tolist()
    (status, pc, executed, _, _), ref = _run_both(dev, machine, [fused, I.halt()], 200, {},
                                                 {"LUT_SELECT": tables})
    assert (status, pc, executed) == (ref.status, ref.pc, ref.executed) == \
        (L.Status.BAD_ADDRESS, 400, 0)
    assert dev.get(Y, tiles * n).tolist() == before


def test_matvec_lut_flag_needs_the_lut_engine():
    """Without the LUT engine a MATVEC with F_LUT fails with BAD_OPCODE, as DeviceModel says,
    even with a zero block count; the same MATVEC without the flag runs."""
    dev = Device(lut_tables=0, grand=False)
    model = L.DeviceModel(**dev.params)
    for flags, nb, status in [(F_LUT, 1, L.Status.BAD_OPCODE), (F_LUT, 0, L.Status.BAD_OPCODE),
                              (0, 1, L.Status.OK)]:
        program = [I.nop(), I.matvec(600, 700, 0, nb, 1, flags=flags), I.halt()]
        code = assemble(program)
        model.feed(L.encode_request(L.Opcode.MEM_WRITE, L.mem_write_payload(0, code)))
        ref = L.decode_reply(model.feed(L.encode_request(L.Opcode.RUN,
                                                         struct.pack("<II", 0, 10))))
        got = dev.run(program)
        assert got[:3] == (ref[0], *struct.unpack("<II", ref[1][:8])) == \
            (status, 16 * (1 + (status == L.Status.OK)), 1 + 2 * (status == L.Status.OK))


_CONTROL = {"jump": I.jump(0), "loop": I.loop(3), "djnz": I.djnz(0), "setofs": I.setofs(1, 2),
            "addofs": I.addofs(1, 2), "move": I.move(3000, 3200, 4), "lut": I.lut(3000, 3200, 4)}


@pytest.mark.parametrize("regs,program", [
    ({"ROUNDING": 2, "EXP_SELECT": 0}, "matvec"),      # no stochastic rounding
    ({"ROUNDING": 0, "EXP_SELECT": 2}, "matvec"),      # no predicted exponent selector
    ({"ROUNDING": 0, "EXP_SELECT": 0}, "dmatvec"),     # no discrete unit
    ({"ROUNDING": 0, "EXP_SELECT": 0}, "quant"),       # no quantiser
    *[({"ROUNDING": 0, "EXP_SELECT": 0}, name) for name in _CONTROL],  # straight-line only
])
def test_icebreaker_rejects_what_it_lacks(icebreaker, regs, program):
    """A MATVEC needing a left-out option fails with BAD_OPCODE before anything happens (as the
    Machine says), even with a count that is also bad; ROUNDING 3 (nearest) still runs. So do
    the control and data-movement instructions (``seq_control`` off: straight-line
    programs)."""
    from lowbit.sim.program import Machine
    dev, machine = icebreaker, Machine(_icebreaker_design(), busy_count=_icebreaker_busy_count())
    ins = {"matvec": I.matvec(3000, 3200, 0, 0, 1), "dmatvec": I.dmatvec(3000, 3200, 0, 4, 1),
           "quant": I.quant(3000, 3200, 16), **_CONTROL}[program]
    before = dev.get(3200, 4).tolist()
    (status, pc, executed, _, _), ref = _run_both(dev, machine, [I.nop(), ins, I.halt()], 100,
                                               {}, regs)
    assert (status, pc, executed) == (ref.status, ref.pc, ref.executed) == \
        (L.Status.BAD_OPCODE, 216, 1)
    assert dev.get(3200, 4).tolist() == before
    if program == "matvec":
        rng = np.random.default_rng(10 * regs["ROUNDING"] + regs["EXP_SELECT"])
        n, top = machine.design.matrix_lanes, machine.design.weight_depth - 16
        words = {4000: rng.integers(0, 1 << 16, 16 * n), 3000: rng.integers(0, 1 << 16, 16)}
        (status, *_), ref = _run_both(
            dev, machine, [I.loadw(4000, top, 16), I.matvec(3000, 3200, top, 1, 1), I.halt()],
            100, words, {"ROUNDING": 3, "EXP_SELECT": 0, "MANT_WIDTH": 8})
        assert status == ref.status == L.Status.OK
        assert dev.get(3200, n).tolist() == machine.read_words(3200, n).tolist()
        assert dev.get(3200, 4).tolist() != before


def _digits(images, build_dir, simulator="amaranth"):
    from lowbit.boards import demo
    from lowbit.boards.driver import Accelerator as Driver
    from lowbit.boards.profiles import get_board
    acc = Driver.simulated(simulator=simulator, **get_board("icebreaker").top)
    try:
        return demo.run_digits("bfp", simulator=simulator, images=images, board="icebreaker",
                               build_dir=str(build_dir), accelerator=acc)
    finally:
        acc.close()


@pytest.mark.slow
def test_icebreaker_runs_the_digits_demo(tmp_path):
    """The default demo (BFP MLP, 64-32-10, input quantised on the host) on the iCEBreaker
    profile's top in Amaranth's simulator, through the driver: bit for bit with the golden
    model for two images (run_digits raises MismatchError otherwise). About 40 s; the fast
    sibling is test_icebreaker_matvec_equals_machine."""
    r = _digits(2, tmp_path)
    assert r.images == 2 and r.device_accuracy == r.golden_accuracy
    assert r.design["matrix_lanes"] == 16 and r.design["block"] == 16
    # A 16-lane column cannot beat one MAC per lane per cycle. Two images share a RUN's setup
    # that a 143-image chunk spreads thinner (431 cycles/image), so they land above it (482
    # in session 17) and well below the 572 of the instruction-at-a-time program before it.
    assert r.macs_per_image == 64 * 32 + 32 * 10
    assert r.macs_per_image / 16 <= r.cycles_per_image < 560
    assert r.busy_cycles is not None and 0 < r.busy_fraction <= 1


def test_matvec_weight_range_by_multiplication(bfp_only):
    """Without the discrete unit MATVEC checks ``entry + T·nb·B <= weight_depth`` with one
    multiplication: the boundary cases and huge tile counts answer as
    lowbit.sim.link.DeviceModel."""
    dev, model = bfp_only, L.DeviceModel(**bfp_only.params)
    depth = BASE["weight_depth"]
    cases = [(60, 1, 1), (61, 1, 1), (0, 4, 4), (0, 4, 5), (0, 1, 16), (1, 1, 16), (0, 1, 17),
             (0, 2, 64), (0, 1, 0xFFFF), (48, 4, 1), (49, 4, 1), (depth, 1, 1), (0xFFFF, 1, 1)]
    got, want = [], []
    for entry, nb, tiles in cases:
        prog = assemble([I.matvec(600, 700, entry, nb, tiles), I.halt()])
        for target in (dev, model):
            payload = L.mem_write_payload(0, prog)
            if target is dev:
                dev.mem.write_bytes(0, prog)
                got.append(dev.send(L.Opcode.RUN, struct.pack("<II", 0, 4))[0])
            else:
                model.feed(L.encode_request(L.Opcode.MEM_WRITE, payload))
                want.append(L.decode_reply(model.feed(L.encode_request(
                    L.Opcode.RUN, struct.pack("<II", 0, 4))))[0])
    assert got == want
    assert got.count(L.Status.OK) == 4 and got.count(L.Status.BAD_ADDRESS) == 9


@pytest.mark.parametrize("busy_count,matvecs", [
    (True, 1), (False, 1),
    pytest.param(True, 3, marks=pytest.mark.slow), pytest.param(False, 3, marks=pytest.mark.slow)])
def test_run_reply_counters(bfp_only, fixed_uncounted, busy_count, matvecs):
    """The RUN reply's counters shift out through ``executed``'s low byte: every byte of
    ``executed``, ``cycles`` and ``busy`` as the model predicts (``busy`` ``0xFFFFFFFF``, not
    counted, without the busy counter), above 255 where the counters reach it. A loop of 16
    iterations of ``matvecs`` MATVECs of 16 beats and ``15 - matvecs`` NOPs: the quick cases
    run one MATVEC per iteration (``busy`` 256, ``cycles`` above 2**11), the slow ones three
    (``busy`` 768, ``cycles`` above 2**12)."""
    from lowbit.sim.program import NOT_COUNTED
    dev = bfp_only if busy_count else fixed_uncounted
    k, loops = BASE["max_blocks"] * B, 16    # executed 259: its low byte wraps, as busy's does
    dev.put(WSRC, np.zeros(k * N, dtype=np.int64))
    dev.put(XA, np.zeros(k, dtype=np.int64))
    body = [I.matvec(XA, YA, 0, k // B, 1)] * matvecs + [I.nop()] * (15 - matvecs)
    status, pc, executed, cycles, busy = dev.run(
        [I.loadw(WSRC, 0, k), I.loop(loops), *body, I.djnz(16), I.halt()])
    assert status == L.Status.OK
    assert (pc, executed) == (2 * 8 * 18, 2 + loops * 16 + 1)
    assert busy == (loops * matvecs * k if busy_count else NOT_COUNTED)
    assert cycles > loops * matvecs * k and cycles > 1 << (11 if matvecs == 1 else 12)


def test_fixed_mant_width_refuses_what_the_model_refuses(fixed_uncounted):
    """Without the runtime mantissa width (``bfp_mant_width=False``) the column's width is 8: a
    MATVEC with ``MANT_WIDTH`` below 8 fails with BAD_OPCODE, one with 8 or more (clamped to 8)
    runs; the gateware answers every RUN as lowbit.sim.link.DeviceModel does, outputs
    included."""
    dev = fixed_uncounted
    model = L.DeviceModel(**dev.params)
    assert not model.design.bfp_mant_width

    both = _both(dev, model)

    rng = np.random.default_rng(11)
    layer = random_layer(rng, N, 2 * B, bias=False, exp_mode="max", rounding="nearest")
    words = weight_words(layer.w_m, layer.w_e, B)
    x = pack_elements(rng.integers(-128, 128, 2 * B), np.repeat(rng.integers(-4, 2, 2), B))
    for addr, data in ((WSRC, words), (XA, x)):
        both(L.Opcode.MEM_WRITE, L.mem_write_payload(2 * addr, np.asarray(data, "<u2").tobytes()))
    prog = assemble([I.loadw(WSRC, 0, 2 * B), I.matvec(XA, YA, 0, 2, 1), I.halt()])
    both(L.Opcode.MEM_WRITE, L.mem_write_payload(0, prog))
    for width, status in ((7, L.Status.BAD_OPCODE), (2, L.Status.BAD_OPCODE),
                          (0, L.Status.BAD_OPCODE), (8, L.Status.OK), (12, L.Status.OK)):
        both(L.Opcode.REG_WRITE, L.reg_write_payload(REG["MANT_WIDTH"], width))
        both(L.Opcode.MEM_WRITE, L.mem_write_payload(2 * YA, bytes(2 * N)))
        assert both(L.Opcode.RUN, struct.pack("<II", 0, 10))[0] == status, width
        both(L.Opcode.MEM_READ, L.mem_read_payload(2 * YA, 2 * N))


# -- MATVEC's samples (w7): S products of the same weights in one instruction ------------------

def _samples_case(dev, design, samples, tiles, nb, regs, *, flags=0, bias=True, x_at=300,
                  dst=600, seed=1, busy_count=True):
    """LOADW and one MATVEC of ``samples`` samples on the top and the Machine: ``(top RUN
    result, Machine RunResult, top words, Machine words)`` of the destination."""
    from lowbit.sim.program import Machine, matvec_stride
    machine = Machine(design, busy_count=busy_count)
    rng = np.random.default_rng(seed)
    n, b = design.matrix_lanes, design.block
    k, stride = nb * b, matvec_stride(nb, design)
    ww = pack_elements(rng.integers(-128, 128, (tiles * k, n)),
                       rng.integers(-8, -3, (tiles * k, n))).reshape(-1)
    xs = pack_elements(rng.integers(-128, 128, samples * stride),
                       np.repeat(rng.integers(-4, 2, samples * stride // b), b))
    bw = pack_elements(rng.integers(-128, 128, tiles * n), rng.integers(-6, -2, tiles * n))
    table = bytes(rng.integers(0, 256, 256).tolist())
    dev.ok(L.Opcode.LUT_WRITE, bytes([1, 0]) + table)
    machine.luts[1][:] = table
    count = samples * tiles * n
    program = [I.loadw(800, 0, tiles * k),
               I.matvec(x_at, dst, 0, nb, tiles, bias=200 if bias else None, flags=flags,
                        samples=samples), I.halt()]
    words = {800: ww, 300: xs, 200: bw}
    if dst + count <= WORDS and dst < 800:
        words[dst] = np.zeros(count, int)
    got, ref = _run_both(dev, machine, program, 20, words,
                         {"LUT_SELECT": 1, "LUT_EXP": 0xFD, **regs})
    span = min(count, WORDS - dst)
    return got, ref, dev.get(dst, span).tolist(), machine.read_words(dst, span).tolist()


SEEDED = {"PRNG_SEED0": 5, "PRNG_SEED1": 6, "PRNG_SEED2": 7, "PRNG_SEED3": 9}


@pytest.mark.parametrize("rounding,exp_select,flags", [(2, 2, F_LUT), (0, 0, 0)])
def test_matvec_samples_equal_machine(dev, rounding, exp_select, flags):
    """The simulated top (x buffer, write address) runs a MATVEC of 4 samples of 3 tiles as
    lowbit.sim.program.Machine does: the words, random draws (stochastic rounding, predicted
    selector's history across samples), status, pc, executed and busy."""
    from lowbit.sim.program import Design
    design = Design(matrix_lanes=N, block=B, max_blocks=4, weight_depth=64, scratch_bytes=2048,
                    lanes=2, lut_tables=2)
    regs = {"MANT_WIDTH": 6, "ROUNDING": rounding, "EXP_SELECT": exp_select, "FIXED_EXP": 0,
            **SEEDED}
    for samples in (1, 4):
        (status, pc, ex, cyc, busy), ref, got, exp = _samples_case(dev, design, samples, 3, 2,
                                                                   regs, flags=flags)
        assert (status, pc, ex, busy) == (ref.status, ref.pc, ref.executed, ref.busy) == \
            (L.Status.OK, 72, 3, samples * 3 * 2 * B)
        assert got == exp


def test_matvec_samples_16_lanes_lut_register():
    """With ``seq_pipelined`` the table's result is registered before the write (``lut_v`` /
    ``lut_d``, one cycle later): a 16-lane MATVEC of 1 sample and one of 3 samples through the
    table (F_LUT) write what the Machine writes, with its status, pc, executed and busy."""
    from lowbit.sim.program import Design
    dev = Device(seq_pipelined=True, scratch_write_addr=False, matrix_lanes=16, scratch_bytes=4096)
    design = Design(matrix_lanes=16, block=B, max_blocks=4, weight_depth=64, scratch_bytes=4096,
                    lanes=2, lut_tables=2)
    regs = {"MANT_WIDTH": 6, "ROUNDING": 0, "EXP_SELECT": 0, "FIXED_EXP": 0, **SEEDED}
    for samples, flags in ((1, 0), (3, F_LUT)):
        (status, pc, ex, cyc, busy), ref, got, exp = _samples_case(dev, design, samples, 2, 2,
                                                                   regs, flags=flags, seed=16)
        assert (status, pc, ex, busy) == (ref.status, ref.pc, ref.executed, ref.busy) == \
            (L.Status.OK, 72, 3, samples * 2 * 2 * B)
        assert len(got) == samples * 2 * 16 and got == exp


def test_matvec_samples_stride_rounds_k_up_to_the_lanes():
    """N = 8 lanes over blocks of 4: a sample of K = 12 inputs starts 16 words after the
    previous one (a previous MATVEC's T · N outputs), with and without the x buffer."""
    from lowbit.sim.program import Design, matvec_stride
    design = Design(matrix_lanes=8, block=4, max_blocks=4, weight_depth=64, scratch_bytes=2048,
                    lanes=2, lut_tables=2)
    assert matvec_stride(3, design) == 16
    for x_buffer in (True, False):
        dev = Device(matrix_lanes=8, block=4, matvec_x_buffer=x_buffer, discrete=False,
                     quantiser=False, grand=False)
        (status, *_, busy), ref, got, exp = _samples_case(
            dev, design, 3, 2, 3, {"MANT_WIDTH": 7, "ROUNDING": 0, "EXP_SELECT": 0})
        assert status == ref.status == L.Status.OK and busy == ref.busy == 3 * 2 * 12
        assert got == exp


def _icebreaker_sample_cycles(dev, counts, tiles, nb, regs):
    """RUN cycles of the F_LUT MATVEC with bias of :func:`_samples_case` on the iCEBreaker's top,
    one run per sample count in ``counts``, each checked equal to the Machine (status, pc,
    executed, busy beats and the words)."""
    design = _icebreaker_design()
    cycles = []
    for samples in counts:
        (status, pc, ex, cyc, busy), ref, got, exp = _samples_case(
            dev, design, samples, tiles, nb, regs, flags=F_LUT,
            busy_count=_icebreaker_busy_count())
        assert (status, pc, ex, busy) == (ref.status, ref.pc, ref.executed, ref.busy) == \
            (L.Status.OK, 72, 3, samples * tiles * nb * design.block)
        assert got == exp
        cycles.append(cyc)
    return cycles


def test_icebreaker_matvec_samples(icebreaker):
    """The iCEBreaker's top (one SPRAM port, bias FIFO): a MATVEC of 3 samples with bias and
    F_LUT equals the Machine, and each sample after the first costs about its scratchpad
    accesses alone (x and results: the port's bound; its bias from the bias memory), the
    previous sample's drain, output and writes overlapped with it; the whole instruction's
    ranges are checked first: a last sample past the scratchpad (input or destination) fails
    with BAD_ADDRESS and writes nothing."""
    from lowbit.sim.program import matvec_stride
    design = _icebreaker_design()
    regs = {"MANT_WIDTH": 8, "ROUNDING": 0, "EXP_SELECT": 0, "FIXED_EXP": -5 & 0xFF}
    cycles = _icebreaker_sample_cycles(icebreaker, (1, 3), 2, 2, regs)
    # A later sample reads its x and writes its results (its bias is in the bias memory):
    # 96 port cycles; the combiner takes as many items (2 tiles of 2 blocks of 16 lanes, and
    # 16 bias items each).
    port = 2 * 32 + 2 * 16
    assert port <= (cycles[1] - cycles[0]) / 2 < 1.2 * port, cycles
    words = design.words
    stride, tiles = matvec_stride(2, design), 2
    for x_at, dst in ((words - 2 * stride - 32 + 1, 600), (300, words - 3 * tiles * 16 + 1)):
        before = icebreaker.get(0, words)
        prog = [I.matvec(x_at, dst, 0, 2, tiles, samples=3), I.halt()]
        status, pc, ex, *_ = icebreaker.run(prog, at=20)
        assert (status, pc, ex) == (L.Status.BAD_ADDRESS, 40, 0)
        after = icebreaker.get(0, words)
        after[20:36] = before[20:36]                      # the program itself
        assert after.tolist() == before.tolist()
    prog = [I.matvec(words - 2 * stride - 32, 600, 0, 2, tiles, samples=3), I.halt()]
    assert icebreaker.run(prog, at=20)[0] == L.Status.OK        # the last word is in range


def test_icebreaker_results_wait_for_the_column(icebreaker):
    """The iCEBreaker's top holds a tile's results in the output unit's FIFO while the reader
    feeds x, and writes them while the column stalls on the next tile's bias (the bank is
    free once the product is in the FIFO): a later sample of a 64-input, 2-tile MATVEC with
    bias and F_LUT (the digits MLP's hidden layer) costs about 89 cycles a tile, little more
    than its 64 beats and 16 bias items, where results written as they came cost about 97;
    the words equal the Machine's."""
    regs = {"MANT_WIDTH": 8, "ROUNDING": 0, "EXP_SELECT": 1, "FIXED_EXP": -5 & 0xFF}
    cycles = _icebreaker_sample_cycles(icebreaker, (1, 4), 2, 4, regs)
    per_sample = (cycles[1] - cycles[0]) / 3
    assert 2 * (64 + 16) <= per_sample <= 2 * 92, cycles       # 178.3 (195.0 writing at once)
