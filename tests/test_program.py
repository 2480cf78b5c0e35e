"""lowbit.sim.program: encoding, the Machine (every instruction, every error, LIMIT) and
NetworkLayout.

The Machine is checked against hand-worked cases and against the golden block models it must
delegate to (lowbit.sim.network, lowbit.sim.bfp_column, lowbit.sim.quantiser, lowbit.sim.lut,
lowbit.sim.grand, lowbit.sim.prng).
"""

import dataclasses

import numpy as np
import pytest

from lowbit.sim import grand as G
from lowbit.sim.bfp import quantise as bfp_quantise
from lowbit.sim.discrete import CodeBook
from lowbit.sim.link import REGISTER_BY_NAME, Status
from lowbit.sim.lut import Quant, transfer_table
from lowbit.sim.network import (
    BFPDense,
    DiscreteDense,
    bfp_dense,
    discrete_dense,
    pack_elements,
    unpack_elements,
)
from lowbit.sim.prng import Xoroshiro128aox, seed_lanes
from lowbit.sim.program import (
    F_BIAS,
    F_LUT,
    F_OFS_DST,
    F_OFS_SRC,
    Design,
    InputQuant,
    Instruction,
    Machine,
    NetworkLayout,
    Op,
    assemble,
    config,
    disassemble,
    hoist_configs,
    matvec_stride,
)
from lowbit.sim.quantiser import decode_f16, quantise_int8

I = Instruction
REG = {name: r.index for name, r in REGISTER_BY_NAME.items()}
PROG = 0          # programs at word 0
DATA = 256        # data from word 256


def machine(**kw):
    kw.setdefault("scratch_bytes", 8192)
    return Machine(Design(**kw))


def run(m, program, limit=10_000, start=0):
    raw = assemble(program)
    m.scratch[start:start + len(raw)] = raw
    return m.run(start, limit)


def f16(values):
    return np.asarray(values, dtype=np.float16).view(np.uint16).astype(np.int64)


# -- encoding ---------------------------------------------------------------------------------

def test_encoding_round_trip_and_layout():
    prog = [I.matvec(1, 2, 3, 4, 5, bias=6, flags=F_OFS_SRC), I.config(0x10, 0x12345678),
            I.setofs(-1, 2), I.halt()]
    raw = assemble(prog)
    assert len(raw) == 64
    assert raw[:16] == bytes([0x21, F_OFS_SRC | F_BIAS, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 0, 0])
    assert raw[16:32] == bytes([0x02, 0, 0x10, 0, 0x78, 0x56, 0x34, 0x12]) + bytes(8)
    assert disassemble(raw) == prog
    assert prog[2].words[:2] == (0xFFFF, 2)
    with pytest.raises(ValueError, match="multiple of 16"):
        disassemble(raw[:-1])
    with pytest.raises(TypeError, match="Instructions"):
        assemble([b"\x00" * 16])
    with pytest.raises(ValueError, match="between 0 and 65535"):
        I(Op.MOVE, 0, (1 << 16,))
    with pytest.raises(TypeError, match="integer"):
        I(Op.MOVE, 0, (True,))
    with pytest.raises(ValueError, match="7 operand words"):
        I(Op.MOVE, 0, tuple(range(8)))


@pytest.mark.parametrize("kw, exc, match", [
    (dict(matrix_lanes=2), ValueError, "Matrix lane count must be an integer between 4 and 64"),
    (dict(matrix_lanes=8.0), TypeError, "Matrix lane count"),
    (dict(block=True), TypeError, "Block size"),
    (dict(block=1), ValueError, "Block size"),
    (dict(max_blocks=0), ValueError, "Maximum block count"),
    (dict(weight_depth=0), ValueError, "Weight depth"),
    (dict(scratch_bytes=16), ValueError, "Scratchpad size"),
    (dict(scratch_bytes=101), ValueError, "even"),
    (dict(lanes=0), ValueError, "Lane count"),
    (dict(lut_tables=65), ValueError, "LUT table count"),
    (dict(frac_bits=9), ValueError, "Fraction guard"),
    (dict(rand_bits=0), ValueError, "Random bit count"),
    (dict(disc_acc_width=7), ValueError, "Discrete accumulator width"),
    (dict(engines="bfp"), TypeError, "collection of names"),
    (dict(engines={"fpu"}), ValueError, "Unknown engines"),
    (dict(grand_modes=("gauss",)), ValueError, "Grand modes"),
])
def test_design_validation(kw, exc, match):
    with pytest.raises(exc, match=match):
        Design(**kw)


def test_design_engines():
    d = Design(engines={"bfp"}, lut_tables=2)
    assert d.engines == {"bfp", "lut"} and d.has("lut") and not d.has("grand")
    assert Design(engines=set(), lut_tables=0).engines == frozenset()
    with pytest.raises(TypeError, match="lowbit.sim.program.Design"):
        Machine({"matrix_lanes": 8})


# -- control instructions ---------------------------------------------------------------------

def test_nop_halt_counts_and_pc():
    m = machine()
    r = run(m, [I.nop(), I.nop(), I.halt(), I.nop()])
    assert (r.status, r.pc, r.executed, r.cycles, r.busy) == (Status.OK, 32, 3, 0, 0)
    assert r.payload() == bytes([32, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    r = run(m, [I.halt()], start=160)
    assert (r.status, r.pc, r.executed) == (Status.OK, 160, 1)


def test_limit_stops_runaway_program():
    m = machine()
    r = run(m, [I.nop(), I.jump(0)], limit=7)
    # 7 instructions: NOP JUMP NOP JUMP NOP JUMP NOP -> the JUMP at byte 16 runs next.
    assert (r.status, r.pc, r.executed) == (Status.LIMIT, 16, 7)
    r = run(m, [I.nop(), I.halt()], limit=2)
    assert (r.status, r.executed) == (Status.OK, 2)           # HALT as the last allowed one
    r = run(m, [I.nop(), I.halt()], limit=1)
    assert (r.status, r.pc, r.executed) == (Status.LIMIT, 16, 1)


def test_fetch_past_end_is_bad_address():
    m = machine(scratch_bytes=64)
    r = run(m, [I.nop(), I.nop(), I.nop(), I.nop()])
    assert (r.status, r.pc, r.executed) == (Status.BAD_ADDRESS, 64, 4)
    r = run(m, [I.jump(28)])                     # 8 words at word 28 cross the end (32 words)
    assert (r.status, r.pc, r.executed) == (Status.BAD_ADDRESS, 56, 1)


def test_loop_djnz_runs_body_max_n_1_times():
    for n, times in [(0, 1), (1, 1), (3, 3), (300, 300)]:
        m = machine()
        prog = [I.setofs(0, 0), I.loop(n),
                I.move(DATA, DATA + 100, 1, flags=F_OFS_DST),   # body at word 16
                I.addofs(0, 1), I.djnz(16), I.halt()]
        m.write_words(DATA, [0xBEEF])
        r = run(m, prog)
        assert r.status == Status.OK and r.executed == 3 + 3 * times
        out = m.read_words(DATA + 100, times + 1)
        assert list(out) == [0xBEEF] * times + [0]
        assert m.cnt == 0


def test_nested_counter_is_single_and_djnz_falls_through_at_zero():
    m = machine()
    r = run(m, [I.djnz(0), I.halt()])                 # cnt = 0: falls through
    assert (r.status, r.executed) == (Status.OK, 2)


def test_offsets_add_to_src_and_dst_modulo_2_16():
    m = machine()
    m.write_words(DATA + 5, [11, 12, 13])
    prog = [I.setofs(5, -1000), I.addofs(1, 1000 + 50),         # ofs_a 6, ofs_b 50
            I.move(DATA, DATA, 2, flags=F_OFS_SRC | F_OFS_DST),  # src DATA+6, dst DATA+50
            I.move(DATA, DATA + 60, 1, flags=F_OFS_SRC),         # src DATA+6 only
            I.setofs(-DATA, 0),
            I.move(DATA + 300, DATA + 70, 1, flags=F_OFS_SRC),   # src (DATA+300-DATA) = 300
            I.halt()]
    m.write_words(300, [77])
    assert run(m, prog).status == Status.OK
    assert list(m.read_words(DATA + 50, 2)) == [12, 13]
    assert m.read_words(DATA + 60, 1)[0] == 12
    assert m.read_words(DATA + 70, 1)[0] == 77
    assert (m.ofs_a, m.ofs_b) == ((-DATA) & 0xFFFF, 0)


def test_config_writes_registers_and_rejects_bad_index():
    m = machine()
    assert run(m, [I.config(REG["MANT_WIDTH"], 0xFFFF_FFF5), I.halt()]).status == Status.OK
    assert m.reg("MANT_WIDTH") == 5                          # masked to 4 bits
    assert run(m, [config("CODE_BOOK1", 0x89ABCDEF), I.halt()]).status == Status.OK
    assert m.reg("CODE_BOOK1") == 0x89ABCDEF
    before = dict(m.regs)
    for index in (REG["ID_MAGIC"], REG["LINK_ERRORS"], 0x0F, 0xFFFF):
        r = run(m, [I.nop(), I.config(index, 1), I.halt()])
        assert (r.status, r.pc, r.executed) == (Status.BAD_ADDRESS, 16, 1)
    assert m.regs == before


def test_config_prng_seed3_loads_rounding_prng():
    m = machine()
    seed = seed_lanes(0x1234_5678_9ABC_DEF0, 1)[0]
    s0, s1 = int(seed[0]), int(seed[1])
    prog = [config("PRNG_SEED0", s0 & 0xFFFFFFFF), config("PRNG_SEED1", s0 >> 32),
            config("PRNG_SEED2", s1 & 0xFFFFFFFF)]
    ref0 = Xoroshiro128aox(0, 1).take(4)[:, 0]
    run(m, prog + [I.halt()])
    assert list(m.draw(4)) == list(ref0 & np.uint64(0xFF))   # not loaded before SEED3
    run(m, prog + [config("PRNG_SEED3", s1 >> 32), I.halt()])
    ref = Xoroshiro128aox(0x1234_5678_9ABC_DEF0, 1).take(6)[:, 0] & np.uint64(0xFF)
    assert list(m.draw(6)) == list(ref)
    # The seed-load rule forces s1 bit 0: an all-zero seed is a valid stream.
    run(m, [config(f"PRNG_SEED{k}", 0) for k in range(4)] + [I.halt()])
    assert m.draw(3).any()


def test_unknown_opcode_and_missing_engine():
    m = machine(engines={"bfp"}, lut_tables=0)
    for ins in (I(0x08), I(0x25), I(0xFF), I.quant(DATA, DATA, 16), I.lut(DATA, DATA, 1),
                I.dmatvec(DATA, DATA, 0, 4, 1), I.grand(DATA, 2)):
        r = run(m, [I.nop(), ins, I.halt()])
        assert (r.status, r.pc, r.executed) == (Status.BAD_OPCODE, 16, 1), ins


# -- data instructions ------------------------------------------------------------------------

def test_move_copies_and_overlaps_like_word_by_word():
    m = machine()
    m.write_words(DATA, range(1, 9))
    run(m, [I.move(DATA, DATA + 20, 8), I.halt()])
    assert list(m.read_words(DATA + 20, 8)) == list(range(1, 9))
    run(m, [I.move(DATA, DATA + 3, 8), I.halt()])             # upward overlap repeats 1,2,3
    assert list(m.read_words(DATA, 11)) == [1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2]
    m.write_words(DATA, range(1, 9))
    run(m, [I.move(DATA + 2, DATA, 6), I.halt()])             # downward overlap shifts
    assert list(m.read_words(DATA, 8)) == [3, 4, 5, 6, 7, 8, 7, 8]


def test_loadw_bank_layout():
    m = machine(matrix_lanes=4, weight_depth=16)
    m.write_words(DATA, range(100, 112))                      # 3 entries x 4 lanes
    assert run(m, [I.loadw(DATA, 5, 3), I.halt()]).status == Status.OK
    # word j*lanes + l -> bank l, entry 5 + j
    assert m.banks[:, 5:8].tolist() == [[100, 104, 108], [101, 105, 109], [102, 106, 110],
                                        [103, 107, 111]]
    assert not m.banks[:, :5].any() and not m.banks[:, 8:].any()


@pytest.mark.parametrize("ins, status", [
    (I.move(DATA, DATA, 0), Status.BAD_LENGTH),
    (I.move(4090, DATA, 7), Status.BAD_ADDRESS),              # 4096 words in 8 KiB
    (I.move(DATA, 4090, 7), Status.BAD_ADDRESS),
    (I.loadw(DATA, 0, 0), Status.BAD_LENGTH),
    (I.loadw(DATA, 14, 3), Status.BAD_ADDRESS),               # weight_depth 16
    (I.loadw(4096 - 8, 0, 3), Status.BAD_ADDRESS),            # 12 words from 4088
    (I.quant(DATA, DATA, 0), Status.BAD_LENGTH),
    (I.quant(DATA, DATA, 12), Status.BAD_LENGTH),             # BFP: not a multiple of B = 8
    (I.quant(4090, DATA, 8), Status.BAD_ADDRESS),
    (I.quant(DATA, 4090, 8), Status.BAD_ADDRESS),
    (I.matvec(DATA, DATA, 0, 0, 1), Status.BAD_LENGTH),
    (I.matvec(DATA, DATA, 0, 3, 1), Status.BAD_LENGTH),       # max_blocks 2
    (I.matvec(DATA, DATA, 0, 1, 0), Status.BAD_LENGTH),
    (I.matvec(DATA, DATA, 0, 2, 2), Status.BAD_ADDRESS),      # 32 entries > 16
    (I.matvec(DATA, DATA, 9, 1, 1), Status.BAD_ADDRESS),      # entries 9..16
    (I.matvec(4090, DATA, 0, 1, 1), Status.BAD_ADDRESS),
    (I.matvec(DATA, 4093, 0, 1, 1), Status.BAD_ADDRESS),
    (I.matvec(DATA, DATA, 0, 1, 1, bias=4093), Status.BAD_ADDRESS),
    (I.lut(DATA, DATA, 0), Status.BAD_LENGTH),
    (I.lut(4095, DATA, 2), Status.BAD_ADDRESS),
    (I.lut(DATA, 4095, 2), Status.BAD_ADDRESS),
    (I.dmatvec(DATA, DATA, 0, 0, 1), Status.BAD_LENGTH),
    (I.dmatvec(DATA, DATA, 0, 4, 0), Status.BAD_LENGTH),
    (I.dmatvec(DATA, DATA, 0, 9, 6), Status.BAD_ADDRESS),     # 6 rows x 3 entries > 16
    (I.dmatvec(4094, DATA, 0, 4, 1), Status.BAD_ADDRESS),
    (I.dmatvec(DATA, 4095, 0, 4, 2), Status.BAD_ADDRESS),
    (I.dmatvec(DATA, DATA, 0, 4, 2, bias=4095), Status.BAD_ADDRESS),
    (I.grand(DATA, 0), Status.BAD_LENGTH),
    (I.grand(4095, 2), Status.BAD_ADDRESS),
])
def test_failing_instruction_has_no_effect(ins, status):
    m = machine(matrix_lanes=4, block=8, max_blocks=2, weight_depth=16)
    rng = np.random.default_rng(0)
    m.write_words(0, rng.integers(0, 1 << 16, m.design.words))
    m.banks[:] = rng.integers(0, 1 << 16, m.banks.shape)
    m.write_reg(REG["PRNG_SEED3"], 7)
    m.write_reg(REG["ROUNDING"], 2)
    state = (bytes(m.scratch), m.banks.copy(), dict(m.regs), m.rng.state, m.grand_prng.state)
    raw = assemble([I.nop(), ins, I.halt()])
    m.scratch[:48] = raw
    state = (bytes(m.scratch),) + state[1:]
    r = m.run(0, 100)
    assert (r.status, r.pc, r.executed) == (status, 16, 1), r.message
    assert r.message
    assert bytes(m.scratch) == state[0]
    assert np.array_equal(m.banks, state[1]) and m.regs == state[2]
    assert np.array_equal(m.rng.state, state[3]) and np.array_equal(m.grand_prng.state, state[4])


def test_register_selected_errors():
    m = machine(lut_tables=2)
    m.write_reg(REG["LUT_SELECT"], 2)
    r = run(m, [I.lut(DATA, DATA, 1), I.halt()])
    assert r.status == Status.BAD_ADDRESS and "LUT_SELECT" in r.message
    m.write_reg(REG["QUANT_FORMAT"], 3)
    assert run(m, [I.quant(DATA, DATA, 16), I.halt()]).status == Status.BAD_LENGTH
    m.write_reg(REG["CODE_WIDTH"], 0)
    assert run(m, [I.dmatvec(DATA, DATA, 0, 4, 1), I.halt()]).status == Status.BAD_LENGTH
    m.write_reg(REG["QUANT_FORMAT"], 2)
    assert run(m, [I.quant(DATA, DATA, 4), I.halt()]).status == Status.BAD_LENGTH


def test_quant_bfp_int8_discrete_match_models():
    m = machine(block=8)
    rng = np.random.default_rng(1)
    x = f16(np.concatenate([rng.normal(size=24) * 4, [0.0] * 8, [np.inf] + [1.0] * 7,
                            [-0.0, 65504.0, 6e-8, -3.0, 2.5, 0.5, -0.5, 1.5]]))
    n = len(x)
    m.write_words(DATA, x)
    # BFP: width 5, ceil rule, toward zero.
    for name, v in (("QUANT_FORMAT", 0), ("MANT_WIDTH", 5), ("QUANT_RULE", 1), ("ROUNDING", 1)):
        m.write_reg(REG[name], v)
    assert run(m, [I.quant(DATA, DATA + 100, n), I.halt()]).status == Status.OK
    got_m, got_e = unpack_elements(m.read_words(DATA + 100, n))
    ref_m, ref_e = bfp_quantise(decode_f16(x.astype(np.uint16)), block=8, width=5,
                                rule="ceil", rounding="zero")
    assert np.array_equal(got_m, ref_m.reshape(-1))
    assert np.array_equal(got_e, np.repeat(ref_e, 8))
    assert got_e[32] == -128                                  # the Inf block is NaN
    # int8 with a negative shift (scale 2^-3), nearest.
    m.write_reg(REG["QUANT_FORMAT"], 1)
    m.write_reg(REG["QUANT_SHIFT"], (-3) & 0xFF)
    m.write_reg(REG["ROUNDING"], 0)
    assert run(m, [I.quant(DATA, DATA + 100, 5), I.halt()]).status == Status.OK
    words = m.read_words(DATA + 100, 5)
    assert not (words >> 8).any()
    assert np.array_equal(unpack_elements(words)[0],
                          quantise_int8(decode_f16(x[:5].astype(np.uint16)), shift=-3))
    # Discrete codes of the default 2-bit book (entries 0..3 in CODE_BOOK0).
    book = CodeBook.default(2)
    m.write_reg(REG["QUANT_FORMAT"], 2)
    m.write_reg(REG["CODE_WIDTH"], 2)
    m.write_reg(REG["CODE_BOOK0"], sum(w << 8 * k for k, w in enumerate(book.words())))
    m.write_words(DATA, f16([0.9, -0.2, 0.1, -5.0, 0.0, 0.07]))
    assert run(m, [I.quant(DATA, DATA + 100, 6), I.halt()]).status == Status.OK
    assert list(m.read_words(DATA + 100, 6)) == [3, 1, 2, 0, 1, 2]


def test_quant_stochastic_draws_one_per_element_in_order():
    m = machine(block=4)
    x = f16([0.3, -1.7, 2.2, 0.01, 5.5, 5.25, -0.75, 1.0])
    m.write_words(DATA, x)
    m.write_reg(REG["ROUNDING"], 2)
    m.write_reg(REG["MANT_WIDTH"], 3)
    m.write_reg(REG["PRNG_SEED3"], 99)                         # state: s0 = 0, s1 = 99 << 32 | 1
    gen = Xoroshiro128aox.from_state([[0, 99 << 32 | 1]])
    assert run(m, [I.quant(DATA, DATA + 50, 8), I.halt()]).status == Status.OK
    rand = (gen.take(8)[:, 0] & np.uint64(0xFF)).astype(np.int64)
    ref_m, ref_e = bfp_quantise(decode_f16(x.astype(np.uint16)), block=4, width=3,
                                rounding="stochastic", rand=rand, rand_bits=8)
    got_m, got_e = unpack_elements(m.read_words(DATA + 50, 8))
    assert np.array_equal(got_m, ref_m.reshape(-1)) and np.array_equal(got_e[::4], ref_e)
    # Nearest rounding draws nothing.
    state = m.rng.state
    m.write_reg(REG["ROUNDING"], 0)
    run(m, [I.quant(DATA, DATA + 50, 8), I.halt()])
    assert np.array_equal(m.rng.state, state)


def _bfp_layer(rng, rows, cols, block, **kw):
    bias = rng.integers(-127, 128, rows), rng.integers(-8, -2, rows)
    return BFPDense(rng.integers(-127, 128, (rows, cols)),
                    rng.integers(-9, -4, (rows, cols // block)),
                    *(bias if kw.pop("bias", True) else (None, None)), **kw)


def _place_bfp(m, layer, entry=0):
    lay = NetworkLayout([layer], m.design, input=InputQuant("host"))
    m.load_weights(entry, lay.weight_words())
    return lay


@pytest.mark.parametrize("rows, exp_mode, rounding, width", [
    (8, "max", "nearest", 8), (13, "fixed", "zero", 6), (20, "max", "stochastic", 4)])
def test_matvec_matches_bfp_dense(rows, exp_mode, rounding, width):
    d = dict(matrix_lanes=8, block=8, max_blocks=4, weight_depth=128)
    m = machine(**d)
    rng = np.random.default_rng(rows)
    layer = _bfp_layer(rng, rows, 24, 8, exp_mode=exp_mode, rounding=rounding, width=width,
                       out_exp=-4)
    lay = _place_bfp(m, layer, entry=10)
    x_m, x_e = rng.integers(-127, 128, 24), rng.integers(-5, 0, 3)
    m.write_words(DATA, pack_elements(x_m, np.repeat(x_e, 8)))
    tiles = -(-rows // 8)
    bias = DATA + 200
    m.write_words(bias, lay.bias_words()[0][1])
    for name, v in (("MANT_WIDTH", width), ("ROUNDING", ("nearest", "zero", "stochastic")
                    .index(rounding)), ("EXP_SELECT", int(exp_mode == "fixed")),
                    ("FIXED_EXP", (-4) & 0xFF), ("PRNG_SEED3", 5)):
        m.write_reg(REG[name], v)
    gen = Xoroshiro128aox.from_state([[0, 5 << 32 | 1]])
    r = run(m, [I.matvec(DATA, DATA + 100, 10, 3, tiles, bias=bias), I.halt()])
    assert r.status == Status.OK
    rand = None
    if rounding == "stochastic":
        rand = (gen.take(tiles * 8)[:, 0] & np.uint64(0xFF)).astype(np.int64).reshape(tiles, 8)
    ref_m, ref_e = bfp_dense(layer, x_m, x_e, m.design.column(), rand=rand)
    got_m, got_e = unpack_elements(m.read_words(DATA + 100, tiles * 8))
    assert np.array_equal(got_m[:rows], ref_m) and np.array_equal(got_e[:rows], ref_e)
    assert not got_m[rows:].any()                             # padding rows are zero


def test_matvec_block_exponent_from_last_beat_and_nan():
    m = machine(matrix_lanes=4, block=4, max_blocks=2, weight_depth=16)
    w = np.zeros((2, 4), dtype=np.int64)                     # entries x lanes
    w[:, 0] = pack_elements([3, 1], [9, -2])                  # lane 0: exponent of beat 3
    m.load_weights(0, np.repeat(w[:1], 4, axis=0))
    words = m.banks.copy()
    words[0, 3] = pack_elements(3, -2)                         # last beat carries the exponent
    m.banks[:] = words
    m.write_words(DATA, pack_elements([1, 1, 1, 1], [50, 50, 50, 1]))
    m.write_reg(REG["EXP_SELECT"], 1)
    run(m, [I.matvec(DATA, DATA + 10, 0, 1, 1), I.halt()])
    got_m, got_e = unpack_elements(m.read_words(DATA + 10, 4))
    # lane 0: 4 * 3 * 2^(-2 + 1) = 6 at fixed exponent 0
    assert got_m[0] == 6 and got_e[0] == 0
    m.write_words(DATA + 3, pack_elements([1], [-128]))       # NaN exponent code
    run(m, [I.matvec(DATA, DATA + 10, 0, 1, 1), I.halt()])
    got_m, got_e = unpack_elements(m.read_words(DATA + 10, 4))
    assert not got_m.any() and (got_e == -128).all()


def test_matvec_reads_sources_before_writing_and_lut_quant_in_place():
    m = machine(matrix_lanes=4, block=4, max_blocks=1, weight_depth=16)
    eye = np.eye(4, dtype=np.int64)
    lay = _place_bfp(m, BFPDense(np.concatenate([eye, eye]) * 2, np.zeros((8, 1), np.int64),
                                 exp_mode="fixed"))
    m.write_words(DATA, pack_elements([1, 2, 3, 4], 0))
    m.write_reg(REG["EXP_SELECT"], 1)
    run(m, [I.matvec(DATA, DATA, 0, 1, 2), I.halt()])         # dst == x (as the top does)
    assert list(unpack_elements(m.read_words(DATA, 8))[0]) == [2, 4, 6, 8, 2, 4, 6, 8]
    assert lay.weight_entries == 8
    m.luts[0][:] = bytes(255 - k for k in range(256))
    m.write_words(DATA, [1, 2, 3])
    run(m, [I.lut(DATA, DATA, 3), I.halt()])
    assert list(m.read_words(DATA, 3)) == [254, 253, 252]
    m.write_words(DATA, f16([1.0, 2.0, 3.0, 4.0]))
    run(m, [I.quant(DATA, DATA, 4), I.halt()])               # BFP, block 4, width 8
    q_m, q_e = unpack_elements(m.read_words(DATA, 4))      # e = floor(log2 4) - 6
    assert list(q_m) == [16, 32, 48, 64] and list(q_e) == [-4] * 4


def test_lut_instruction():
    m = machine(lut_tables=3)
    m.luts[2][:] = bytes((3 * k + 1) & 0xFF for k in range(256))
    m.write_words(DATA, [0x0000, 0x00FF, 0x7F80, 0xAB05])
    m.write_reg(REG["LUT_SELECT"], 2)
    m.write_reg(REG["LUT_EXP"], 0xFD)
    assert run(m, [I.lut(DATA, DATA + 10, 4), I.halt()]).status == Status.OK
    assert list(m.read_words(DATA + 10, 4)) == [0xFD01, 0xFDFE, 0xFD81, 0xFD10]


def test_dmatvec_hand_checked_and_vs_discrete_dense():
    m = machine(matrix_lanes=4, weight_depth=64)
    book = CodeBook.default(2)                                # -1, -1/8, +1/8, +1
    m.write_reg(REG["CODE_WIDTH"], 2)
    m.write_reg(REG["CODE_BOOK0"], sum(w << 8 * k for k, w in enumerate(book.words())))
    # Row 0: codes 3,0,3,2,1 on x = 10,20,-30,64,8: 10 - 20 - 30 + 8 - 1 = -33.
    codes = np.array([[3, 0, 3, 2, 1], [0, 0, 0, 0, 0]])
    ent = np.zeros((4, 4), dtype=np.int64)                   # 2 rows x 2 entries, 4 banks
    ent[0] = [3, 0, 3, 2]
    ent[1] = [1, 0xFC, 0xFC, 0xFC]                            # columns past K ignored
    ent[2] = [0x10, 0, 0, 0]                                  # high bits ignored (code 0)
    ent[3] = [0, 0, 0, 0]
    m.load_weights(3, ent)
    x = np.array([10, 20, -30, 64, 8])
    m.write_words(DATA, pack_elements(x, 7))                  # exponents ignored
    m.write_words(DATA + 20, [5, (-200) & 0xFFFF])
    m.write_reg(REG["FIXED_EXP"], (-2) & 0xFF)
    r = run(m, [I.dmatvec(DATA, DATA + 10, 3, 5, 2, bias=DATA + 20), I.halt()])
    assert r.status == Status.OK
    y, e = unpack_elements(m.read_words(DATA + 10, 2))
    assert list(y) == [-28, -127] and list(e) == [-2, -2]     # -33 + 5; -(10+20-30+64+8) - 200
    layer = DiscreteDense(codes, book, bias=np.array([5, -200]), out_exp=-2)
    assert list(discrete_dense(layer, x, lanes=4)[0]) == [-28, -127]
    m.write_reg(REG["DISC_SHIFT"], 2)
    run(m, [I.dmatvec(DATA, DATA + 10, 3, 5, 2, bias=DATA + 20), I.halt()])
    assert list(unpack_elements(m.read_words(DATA + 10, 2))[0]) == [-7, -68]   # floor(-67.5)


@pytest.mark.parametrize("shift", [0, 3, 24, 25, 31])
def test_dmatvec_random_vs_discrete_dense(shift):
    rng = np.random.default_rng(shift)
    m = machine(matrix_lanes=8, weight_depth=256, disc_acc_width=16)
    book = CodeBook(3, [(rng.integers(2), rng.integers(2), rng.integers(8)) for _ in range(8)])
    layer = DiscreteDense(rng.integers(0, 8, (11, 21)), book, bias=rng.integers(-3000, 3000, 11),
                          shift=min(shift, 24), out_exp=3)
    lay = NetworkLayout([layer], m.design, input=InputQuant("host"))
    m.load_weights(0, lay.weight_words())
    x = rng.integers(-128, 128, 21)
    m.write_words(DATA, pack_elements(x, 0))
    m.write_words(DATA + 100, lay.bias_words()[0][1])
    m.write_reg(REG["CODE_WIDTH"], 3)
    words = book.words()
    m.write_reg(REG["CODE_BOOK0"], sum(w << 8 * k for k, w in enumerate(words[:4])))
    m.write_reg(REG["CODE_BOOK1"], sum(w << 8 * k for k, w in enumerate(words[4:])))
    m.write_reg(REG["DISC_SHIFT"], shift)
    m.write_reg(REG["FIXED_EXP"], 3)
    assert run(m, [I.dmatvec(DATA, DATA + 50, 0, 21, 11, bias=DATA + 100),
                   I.halt()]).status == Status.OK
    got, e = unpack_elements(m.read_words(DATA + 50, 11))
    ref, _ = discrete_dense(layer, x, lanes=8)
    if shift <= 24:
        assert np.array_equal(got, ref)
    else:                                                     # |v| < 2^15: every shift -> 0
        assert not got.any()
    assert (e == 3).all()


def test_grand_instruction_shares_the_unit_with_grand_samples():
    m = machine(lanes=2)
    m.write_reg(REG["GRAND_MODE"], 1)
    m.grand_seed(seed_lanes(42, 2))
    first = m.grand_take(3)                                   # as GRAND_SAMPLES would
    assert run(m, [I.grand(DATA, 5), I.halt()]).status == Status.OK
    words = G.Xoroshiro128aox(42, 2).take(12 * 4)
    f16_ref, _ = G.results_from_words(words, "normal144")
    ref = f16_ref.reshape(-1)                                 # lane order
    assert [a for a, _ in first] == list(ref[:3])
    assert list(m.read_words(DATA, 5)) == list(ref[3:8])


def test_grand_take_of_a_numpy_count():
    # A count of a narrow NumPy type (what the driver's callers may pass, found by
    # test_driver_inputs' long run: np.uint8(7), whose negation wrapped) takes the same results.
    m, ref = machine(lanes=2), machine(lanes=2)
    for x in (m, ref):
        x.grand_seed(seed_lanes(42, 2))
    assert m.grand_take(np.uint8(7)) == ref.grand_take(7)
    assert m.grand_take(np.int16(3)) == ref.grand_take(3)


def test_grand_mode_left_out_acts_as_normal():
    m = machine(grand_modes=("normal", "uniform"))
    m.write_reg(REG["GRAND_MODE"], 2)
    m.grand_seed(seed_lanes(1, 2))
    assert m.grand_mode == "normal"


# -- networks ---------------------------------------------------------------------------------

RELU = transfer_table(["relu"], Quant(scale=2.0 ** -3, dtype="int8"),
                      Quant(scale=2.0 ** -4, dtype="int8"))


def _network(rng, block=16):
    l1 = _bfp_layer(rng, 24, 32, block, exp_mode="fixed", out_exp=-3, table=RELU, table_exp=-4)
    l2 = _bfp_layer(rng, 16, 24 if block == 8 else 24, block, exp_mode="max", width=6) \
        if block == 8 else None
    return l1, l2


def _run_layout(m, lay, x):
    for idx, img in lay.table_images().items():
        m.luts[idx][:] = img.tobytes()
    m.load_weights(0, lay.weight_words())
    for addr, words in lay.bias_words():
        m.write_words(addr, words)
    out = []
    words = lay.input_words(x)
    for k in range(0, len(words), lay.chunk):
        part = words[k:k + lay.chunk]
        m.write_words(lay.in_addr, part.reshape(-1))
        raw = assemble(lay.program(len(part)))
        m.scratch[:len(raw)] = raw
        r = m.run(0, lay.instructions(len(part)))
        assert (r.status, r.executed) == (Status.OK, lay.instructions(len(part))), r
        out.append(m.read_words(lay.out_addr, len(part) * lay.out_words)
                   .reshape(len(part), -1)[:, :lay.rows])
    return unpack_elements(np.concatenate(out))


@pytest.mark.parametrize("where", ["device", "host"])
def test_network_program_equals_golden_layers(where):
    rng = np.random.default_rng(7)
    design = Design(matrix_lanes=8, block=8, max_blocks=4, weight_depth=256, scratch_bytes=4096)
    relu = RELU
    layers = [
        _bfp_layer(rng, 24, 32, 8, exp_mode="fixed", out_exp=-3, table=relu, table_exp=-4),
        _bfp_layer(rng, 16, 24, 8, exp_mode="max", width=6, bias=False),
        DiscreteDense(rng.integers(0, 4, (10, 16)), CodeBook.default(2),
                      bias=rng.integers(-40, 40, 10), shift=1, out_exp=-1, table=relu,
                      table_exp=-4),
        DiscreteDense(rng.integers(0, 2, (5, 10)), CodeBook.default(1), shift=2, out_exp=2),
    ]
    lay = NetworkLayout(layers, design, input=InputQuant(where, width=7))
    x = rng.normal(size=(40, 32)) * 2
    m = Machine(design)
    got = _run_layout(m, lay, x)
    ref = lay.reference(x)
    assert np.array_equal(got[0], ref[0]) and np.array_equal(got[1], ref[1])
    assert lay.chunk < 60                                    # several RUNs
    # Every batch's program fits the area kept for it before the biases.
    assert max(len(lay.program(n)) for n in range(1, lay.chunk + 1)) * 8 == lay.program_words
    # The reference by hand for the first sample and the first layer.
    m0, e0 = bfp_quantise(decode_f16(lay.f16(x[:1])), block=8, width=7)
    h = bfp_dense(layers[0], m0.reshape(-1), e0.reshape(-1), design.column())
    assert h[0].shape == (24,)


def test_matvec_lut_flag_is_matvec_then_lut():
    """MATVEC with F_LUT writes ``table[m] | LUT_EXP << 8`` for every result, as MATVEC and a
    LUT over its results do; it needs the LUT engine (BAD_OPCODE, checked before the counts)
    and LUT_SELECT within the tables (BAD_ADDRESS, with the ranges), and fails without
    writing."""
    design = Design(matrix_lanes=4, block=4, max_blocks=4, weight_depth=64, scratch_bytes=4096)
    runs = []
    for fused in (True, False):
        rng = np.random.default_rng(12)             # the same data for both programs
        m = Machine(design)
        m.luts[1][:] = rng.integers(0, 256, 256, dtype=np.uint8).tobytes()
        m.write_words(DATA, rng.integers(0, 1 << 16, 8 * 4))
        m.write_words(DATA + 100, rng.integers(0, 1 << 16, 16))
        m.write_words(DATA + 200, rng.integers(0, 1 << 16, 8))
        prog = [I.loadw(DATA, 0, 8), config("LUT_SELECT", 1), config("LUT_EXP", 0xFD),
                config("EXP_SELECT", 1), config("FIXED_EXP", 0xFC)]
        if fused:
            prog += [I.matvec(DATA + 100, DATA + 300, 0, 1, 2, bias=DATA + 200, flags=F_LUT)]
        else:
            prog += [I.matvec(DATA + 100, DATA + 300, 0, 1, 2, bias=DATA + 200),
                     I.lut(DATA + 300, DATA + 300, 8)]
        assert run(m, prog + [I.halt()]).status == Status.OK
        runs.append(m.read_words(DATA + 300, 8))
    assert np.array_equal(runs[0], runs[1]) and set((runs[0] >> 8).tolist()) == {0xFD}
    m = Machine(design)
    m.write_words(DATA + 300, range(8))
    bad = I.matvec(DATA + 100, DATA + 300, 0, 1, 2, flags=F_LUT)
    r = run(m, [config("LUT_SELECT", 4), bad, I.halt()])
    assert (r.status, r.pc, r.executed) == (Status.BAD_ADDRESS, 16, 1)
    assert list(m.read_words(DATA + 300, 8)) == list(range(8))
    m = machine(engines={"bfp"}, lut_tables=0)
    zero_blocks = I.matvec(DATA, DATA, 0, 0, 1, flags=F_LUT)
    for ins in (bad, zero_blocks):
        r = run(m, [I.nop(), ins, I.halt()])
        assert (r.status, r.pc, r.executed) == (Status.BAD_OPCODE, 16, 1), ins


@pytest.mark.parametrize("where", ["host", "device"])
def test_network_fused_activation_equals_the_lut_program(where):
    """A network whose BFP layers apply their tables in their MATVECs (``fuse_lut``, the
    default) gives the outputs of the program with LUT instructions, in fewer instructions; a
    discrete layer keeps its LUT."""
    rng = np.random.default_rng(8)
    design = Design(matrix_lanes=8, block=8, max_blocks=4, weight_depth=256, scratch_bytes=4096)
    layers = [
        _bfp_layer(rng, 24, 32, 8, exp_mode="fixed", out_exp=-3, table=RELU, table_exp=-4),
        DiscreteDense(rng.integers(0, 4, (16, 24)), CodeBook.default(2), shift=1, out_exp=-1,
                      table=RELU, table_exp=-4),
        _bfp_layer(rng, 10, 16, 8, exp_mode="fixed", out_exp=-2, table=RELU, table_exp=-5),
    ]
    x = rng.normal(size=(7, 32)) * 2
    outs, luts = [], []
    for fuse in (True, False):
        lay = NetworkLayout(layers, design, input=InputQuant(where), fuse_lut=fuse)
        outs.append(_run_layout(Machine(design), lay, x))
        luts.append(sum(ins.op == Op.LUT for ins in lay.program(1)))
    assert np.array_equal(outs[0][0], outs[1][0]) and np.array_equal(outs[0][1], outs[1][1])
    ref = lay.reference(x)
    assert np.array_equal(outs[0][0], ref[0]) and np.array_equal(outs[0][1], ref[1])
    assert luts == [1, 3]
    with pytest.raises(TypeError, match="fuse_lut must be a bool, not 1"):
        NetworkLayout(layers, design, fuse_lut=1)


def test_fixed_exponent_is_set_only_for_fixed_layers():
    """FIXED_EXP is configured only for a layer with the fixed selector, so a network that
    alternates a fixed and a max layer sets it once per RUN; the outputs are the golden
    layers'."""
    rng = np.random.default_rng(13)
    design = Design(matrix_lanes=4, block=4, max_blocks=4, weight_depth=256, scratch_bytes=8192)
    layers = [_bfp_layer(rng, 8, 16, 4, exp_mode="fixed", out_exp=-3, table=RELU, table_exp=-4),
              _bfp_layer(rng, 4, 8, 4, exp_mode="max")]
    lay = NetworkLayout(layers, design, input=InputQuant("host"))
    prog = lay.program(3)
    assert [ins.words[:2] for ins in prog if ins.op == Op.CONFIG and
            ins.words[0] == REG["FIXED_EXP"]] == [(REG["FIXED_EXP"], -3 & 0xFF)]
    x = rng.normal(size=(5, 16)) * 2
    got, ref = _run_layout(Machine(design), lay, x), lay.reference(x)
    assert np.array_equal(got[0], ref[0]) and np.array_equal(got[1], ref[1])


def test_network_input_quantisation_on_device_equals_host():
    rng = np.random.default_rng(3)
    design = Design(matrix_lanes=4, block=4, max_blocks=4, scratch_bytes=2048)
    layers = [DiscreteDense(rng.integers(0, 4, (6, 8)), CodeBook.default(2), shift=0)]
    x = rng.normal(size=(9, 8)) * 20
    outs = []
    for where in ("device", "host"):
        lay = NetworkLayout(layers, design, input=InputQuant(where, shift=-2,
                                                             rounding="zero"))
        outs.append(_run_layout(Machine(design), lay, x))
    assert np.array_equal(outs[0][0], outs[1][0])
    q = quantise_int8(decode_f16(lay.f16(x)), shift=-2, rounding="zero")
    ref = [discrete_dense(layers[0], row, lanes=4)[0] for row in q]
    assert np.array_equal(outs[0][0], ref)


def test_hoisted_configs_give_the_unhoisted_programs_results():
    """A segment's sample sets its layer's registers; the program sets them once before the
    segment's loop, and only where they change. Outputs, the registers left behind and the
    PRNG's state are those of the program that keeps every CONFIG in the loops, and fewer
    instructions run."""
    rng = np.random.default_rng(11)
    design = Design(matrix_lanes=4, block=4, max_blocks=4, weight_depth=256, scratch_bytes=8192)
    layers = [_bfp_layer(rng, 8, 16, 4, exp_mode="fixed", out_exp=-3, table=RELU, table_exp=-4),
              _bfp_layer(rng, 8, 8, 4, exp_mode="max", width=6, rounding="stochastic"),
              _bfp_layer(rng, 4, 8, 4, exp_mode="predicted")]
    lay = NetworkLayout(layers, design, input=InputQuant("device", width=7))
    count = 7                           # a loop of UNROLL samples and three after it
    # The program with every CONFIG is longer than the area kept for programs: it runs from
    # past the layout's scratchpad, in a machine with a larger one.
    far = design.words
    plain, plain_n = lay._program(count, hoist=False, at=far)
    hoisted, hoisted_n = lay._program(count)
    assert hoisted == lay.program(count) and hoisted_n == lay.instructions(count)
    assert len(hoisted) * 8 <= lay.program_words
    configs = [sum(ins.op == Op.CONFIG for ins in p) for p in (plain, hoisted)]
    assert configs[1] < configs[0]
    words = lay.input_words(rng.normal(size=(count, 16)) * 2).reshape(-1)
    results = []
    for prog, at in ((plain, far), (hoisted, 0)):
        m = Machine(dataclasses.replace(design, scratch_bytes=2 * design.scratch_bytes))
        m.write_reg(REG["PRNG_SEED3"], 5)
        for idx, img in lay.table_images().items():
            m.luts[idx][:] = img.tobytes()
        m.load_weights(0, lay.weight_words())
        for addr, bias in lay.bias_words():
            m.write_words(addr, bias)
        m.write_words(lay.in_addr, words)
        raw = assemble(prog)
        m.scratch[2 * at:2 * at + len(raw)] = raw
        r = m.run(2 * at, 10_000)
        assert r.status == Status.OK
        results.append((r, m.read_words(lay.out_addr, count * lay.out_words), dict(m.regs),
                        m.rng.take(4)))
    (r0, out0, regs0, rand0), (r1, out1, regs1, rand1) = results
    assert np.array_equal(out0, out1) and regs0 == regs1 and np.array_equal(rand0, rand1)
    assert (r0.executed, r1.executed) == (plain_n, hoisted_n) and hoisted_n < plain_n
    assert len(plain) * 8 > lay.program_words


@pytest.mark.parametrize("samples", [False, True])
def test_layer_by_layer_program_shape(samples):
    """One segment per stage: its CONFIGs, then the stage's every sample. With
    ``matvec_samples`` a BFP layer is one MATVEC of ``count`` samples (w7 = count - 1, no loop,
    no offsets); without it (design 0.2) SETOFS, a loop of UNROLL samples (ADDOFS, DJNZ) when
    the batch has that many, and the samples left over. Each stage's products follow one
    another without a CONFIG between them, and every batch size gives the golden outputs."""
    rng = np.random.default_rng(14)
    design = Design(matrix_lanes=4, block=4, max_blocks=4, weight_depth=256, scratch_bytes=8192,
                    matvec_samples=samples)
    layers = [_bfp_layer(rng, 8, 16, 4, exp_mode="fixed", out_exp=-3, table=RELU, table_exp=-4),
              _bfp_layer(rng, 4, 8, 4, exp_mode="max")]
    lay = NetworkLayout(layers, design, input=InputQuant("host"))
    u = lay.UNROLL
    for count in (1, u - 1, u, 2 * u + 1):
        prog = lay.program(count)
        ops = [ins.op for ins in prog]
        loops = [ins.words[0] for ins in prog if ins.op == Op.LOOP]
        mv = [ins for ins in prog if ins.op == Op.MATVEC]
        if samples:
            assert loops == [] and Op.SETOFS not in ops and Op.ADDOFS not in ops
            assert [ins.words[6] for ins in mv] == [count - 1] * 2
            assert not any(ins.flags & (F_OFS_SRC | F_OFS_DST) for ins in mv)
            assert lay.instructions(count) == len(prog)
        else:
            assert loops == [count // u] * 2 if count >= u else loops == []
            assert len(mv) == 2 * (u * (count >= u) + count % u)
            assert all(ins.words[6] == 0 for ins in mv)
        for k in range(len(ops) - 1):
            if ops[k] == Op.MATVEC and ops[k + 1] not in (Op.MATVEC, Op.ADDOFS):
                assert ops[k + 1] in (Op.CONFIG, Op.SETOFS, Op.HALT)
        x = rng.normal(size=(count, 16)) * 2
        got, ref = _run_layout(Machine(design), lay, x), lay.reference(x)
        assert np.array_equal(got[0], ref[0]) and np.array_equal(got[1], ref[1])
    # Per RUN the digits-like network sets EXP_SELECT twice, whatever the batch.
    configs = [ins.words[0] for ins in lay.program(2 * u + 1) if ins.op == Op.CONFIG]
    assert configs.count(REG["EXP_SELECT"]) == 2


def test_hoist_configs_rules():
    mw, rnd, seed = REG["MANT_WIDTH"], REG["ROUNDING"], REG["PRNG_SEED3"]
    mv = I.matvec(0, 64, 0, 1, 1)
    body = [I.config(mw, 6), mv, I.config(mw, 8), I.config(rnd, 1), mv, I.config(mw, 6),
            I.config(seed, 3), mv]
    prologue, kept = hoist_configs(body)
    # The last value of each register goes first; a CONFIG is kept where the value changes.
    assert prologue == [I.config(mw, 6), I.config(rnd, 1)]
    assert kept == [mv, I.config(mw, 8), mv, I.config(mw, 6), I.config(seed, 3), mv]
    assert hoist_configs([mv, mv]) == ([], [mv, mv])
    with pytest.raises(ValueError, match="straight-line"):
        hoist_configs([I.config(mw, 6), I.loop(2)])


def test_network_stochastic_layer_runs_on_machine_only():
    rng = np.random.default_rng(4)
    design = Design(matrix_lanes=4, block=4, max_blocks=2, scratch_bytes=2048)
    layers = [_bfp_layer(rng, 4, 8, 4, rounding="stochastic", width=3)]
    lay = NetworkLayout(layers, design)
    with pytest.raises(ValueError, match="stochastic"):
        lay.reference(np.zeros((1, 8)))
    m = Machine(design)
    m.write_reg(REG["PRNG_SEED3"], 1)
    got = _run_layout(m, lay, rng.normal(size=(3, 8)))
    assert np.abs(got[0]).max() <= 3


@pytest.mark.parametrize("make, match", [
    (lambda r: [_bfp_layer(r, 4, 32, 16)], "block size 16"),
    (lambda r: [_bfp_layer(r, 4, 40, 8)], "5 blocks"),
    (lambda r: [_bfp_layer(r, 4, 16, 8), _bfp_layer(r, 4, 16, 8)], "16 inputs"),
    (lambda r: [_bfp_layer(r, 64, 32, 8)], "weight entries"),
    (lambda r: [DiscreteDense(r.integers(0, 2, (3, 8)), CodeBook.default(1), acc_width=20)],
     "accumulator width"),
    (lambda r: [_bfp_layer(r, 1000, 8, 8)], "weight entries"),
    (lambda r: [], "at least one layer"),
])
def test_network_layout_rejects_misfits(make, match):
    design = Design(matrix_lanes=4, block=8, max_blocks=4, weight_depth=64, scratch_bytes=2048)
    with pytest.raises(ValueError, match=match):
        NetworkLayout(make(np.random.default_rng(0)), design)


def test_network_layout_engine_and_table_checks():
    rng = np.random.default_rng(0)
    layer = _bfp_layer(rng, 4, 8, 8, exp_mode="fixed", table=RELU)
    with pytest.raises(ValueError, match="no quantiser"):
        NetworkLayout([layer], Design(block=8, engines={"bfp"}), input=InputQuant("device"))
    with pytest.raises(ValueError, match="LUT engine"):
        NetworkLayout([layer], Design(block=8, engines={"bfp"}, lut_tables=0))
    with pytest.raises(ValueError, match="bfp engine"):
        NetworkLayout([layer], Design(block=8, engines={"discrete"}))
    with pytest.raises(ValueError, match="LUT tables"):
        NetworkLayout([layer], Design(block=8), table_base=4)
    with pytest.raises(TypeError, match="lowbit.sim.network"):
        NetworkLayout(["dense"], Design())
    with pytest.raises(ValueError, match="does not fit the scratchpad"):
        NetworkLayout([_bfp_layer(rng, 8, 64, 8)], Design(block=8, scratch_bytes=256))
    with pytest.raises(ValueError, match="device only"):
        InputQuant("host", rounding="stochastic")
    with pytest.raises(ValueError, match="'device' or 'host'"):
        InputQuant("fpga")
    # Shared tables: two layers with the same table use one index.
    l2 = _bfp_layer(rng, 4, 4 * 2, 8, exp_mode="fixed", table=RELU)
    lay = NetworkLayout([_bfp_layer(rng, 8, 8, 8, exp_mode="fixed", table=RELU), l2],
                        Design(matrix_lanes=4, block=8))
    assert list(lay.tables.values()) == [0]


# == MATVEC's samples (w7) =========================================================================

def _samples_setup(rng, design, samples, tiles, nb):
    """A Machine with random weights, biases and ``samples`` input vectors at their stride."""
    n, b = design.matrix_lanes, design.block
    k, stride = nb * b, matvec_stride(nb, design)
    m = Machine(design)
    m.load_weights(0, pack_elements(rng.integers(-128, 128, (tiles * k, n)),
                                    rng.integers(-9, -3, (tiles * k, n))))
    m.write_words(100, pack_elements(rng.integers(-128, 128, tiles * n),
                                     rng.integers(-7, -2, tiles * n)))
    x = pack_elements(rng.integers(-128, 128, samples * stride),
                      np.repeat(rng.integers(-4, 2, samples * stride // b), b))
    m.write_words(300, x)
    return m, stride


@pytest.mark.parametrize("n,b,exp_select,rounding,flags", [
    (4, 4, 0, 0, F_BIAS), (8, 4, 2, 2, F_BIAS | F_LUT), (4, 8, 1, 1, 0)])
def test_matvec_samples_equal_one_matvec_per_sample(n, b, exp_select, rounding, flags):
    """A MATVEC of S samples (w7 = S - 1) is S one-sample MATVECs, x stepping by
    ceil(K / N) · N and dst by T · N: the same words, random draws (stochastic rounding),
    predicted-selector history and busy count; the stride is K rounded up to the lanes."""
    design = Design(matrix_lanes=n, block=b, max_blocks=4, weight_depth=256, scratch_bytes=4096)
    tiles, nb, samples = 2, 3, 5
    assert matvec_stride(nb, design) == -(-nb * b // n) * n
    outs = []
    for batched in (True, False):
        rng = np.random.default_rng(3)
        m, stride = _samples_setup(rng, design, samples, tiles, nb)
        for name, v in (("EXP_SELECT", exp_select), ("ROUNDING", rounding), ("MANT_WIDTH", 6),
                        ("FIXED_EXP", -4 & 0xFF), ("LUT_SELECT", 1), ("LUT_EXP", 0xFD),
                        ("PRNG_SEED0", 9), ("PRNG_SEED3", 7)):
            m.write_reg(REG[name], v)
        m.luts[1][:] = bytes(rng.integers(0, 256, 256).tolist())
        bias = 100 if flags & F_BIAS else None
        fl = flags & ~F_BIAS
        if batched:
            prog = [Instruction.matvec(300, 1000, 0, nb, tiles, bias, fl, samples=samples)]
        else:
            prog = [Instruction.matvec(300 + s * stride, 1000 + s * tiles * n, 0, nb, tiles,
                                       bias, fl) for s in range(samples)]
        m.write_words(1800, np.frombuffer(assemble(prog + [Instruction.halt()]), "<u2"))
        r = m.run(3600, 100)
        assert r.status == Status.OK
        outs.append((m.read_words(1000, samples * tiles * n + 4).tolist(), r.busy,
                     m.rng.take(2).tolist()))
    assert outs[0] == outs[1]
    assert outs[0][1] == samples * tiles * nb * b


def test_matvec_samples_ranges_and_encoding():
    """The whole instruction's ranges are checked before it starts (BAD_ADDRESS, nothing
    written): the last sample's input and destination; w7 is ignored by a design without
    ``matvec_samples`` (gateware of design 0.2); the constructor checks the count."""
    design = Design(matrix_lanes=4, block=4, max_blocks=4, weight_depth=256, scratch_bytes=4096)
    words, tiles, nb = design.words, 2, 2
    rng = np.random.default_rng(5)
    m, stride = _samples_setup(rng, design, 3, tiles, nb)
    ok_x = words - 2 * stride - nb * 4              # three samples end at the scratchpad's end
    ok_dst = words - 3 * tiles * 4
    for x, dst, samples, status in ((ok_x, 1000, 3, Status.OK), (ok_x + 1, 1000, 3,
                                    Status.BAD_ADDRESS), (1000, ok_dst, 3, Status.OK),
                                    (1000, ok_dst + 1, 3, Status.BAD_ADDRESS),
                                    (1000, ok_dst + 1, 2, Status.OK)):
        prog = [Instruction.matvec(x, dst, 0, nb, tiles, samples=samples), Instruction.halt()]
        m.write_words(0, np.frombuffer(assemble(prog), "<u2"))
        before = bytes(m.scratch)
        r = m.run(0, 10)
        assert r.status == status, (x, dst, samples)
        if status != Status.OK:
            assert bytes(m.scratch) == before and r.executed == 0
    old = Machine(dataclasses.replace(design, matvec_samples=False))
    old.load_weights(0, m.banks.T[:tiles * nb * 4])
    old.scratch[:] = m.scratch
    prog = [Instruction.matvec(300, 1000, 0, nb, tiles, samples=3), Instruction.halt()]
    old.write_words(0, np.frombuffer(assemble(prog), "<u2"))
    assert old.run(0, 10).busy == tiles * nb * 4                  # one sample
    assert Instruction.matvec(0, 0, 0, 1, 1, samples=65536).words[6] == 0xFFFF
    with pytest.raises(ValueError, match="between 1 and 65536, not 0"):
        Instruction.matvec(0, 0, 0, 1, 1, samples=0)
    with pytest.raises(TypeError, match="must be an integer, not 2.0"):
        Instruction.matvec(0, 0, 0, 1, 1, samples=2.0)
    with pytest.raises(TypeError, match="matvec_samples must be a bool"):
        Design(matvec_samples=1)


def test_straight_line_design_refuses_control_and_lays_out_batched_layers():
    """A design without ``seq_control`` fails the control and data-movement instructions with
    BAD_OPCODE (nothing changes) and runs a network as one MATVEC per layer; a network with a
    stage that is not such a MATVEC (a separate LUT) is refused when it is laid out."""
    from lowbit.sim.program import CONTROL_OPS
    design = Design(matrix_lanes=4, block=4, max_blocks=4, weight_depth=256, scratch_bytes=8192,
                    seq_control=False)
    m = Machine(design)
    for ins in (Instruction.jump(0), Instruction.loop(2), Instruction.djnz(0),
                Instruction.setofs(1, 1), Instruction.addofs(1, 1),
                Instruction.move(100, 200, 4), Instruction.lut(100, 200, 4)):
        assert ins.op in CONTROL_OPS
        m.write_words(0, np.frombuffer(assemble([Instruction.nop(), ins, Instruction.halt()]),
                                       "<u2"))
        before = bytes(m.scratch)
        r = m.run(0, 10)
        assert (r.status, r.pc, r.executed) == (Status.BAD_OPCODE, 16, 1)
        assert "straight-line" in r.message and bytes(m.scratch) == before
    rng = np.random.default_rng(2)
    layers = [_bfp_layer(rng, 8, 16, 4, exp_mode="fixed", out_exp=-3, table=RELU, table_exp=-4),
              _bfp_layer(rng, 4, 8, 4, exp_mode="max")]
    lay = NetworkLayout(layers, design, input=InputQuant("host"))
    prog = lay.program(5)
    assert not {ins.op for ins in prog} & set(CONTROL_OPS)
    x = rng.normal(size=(5, 16))
    got, ref = _run_layout(Machine(design), lay, x), lay.reference(x)
    assert np.array_equal(got[0], ref[0]) and np.array_equal(got[1], ref[1])
    with pytest.raises(ValueError, match="straight-line programs .* LUT per sample"):
        NetworkLayout(layers, design, input=InputQuant("host"), fuse_lut=False)
