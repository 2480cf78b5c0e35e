# amaranth: UnusedElaboratable=no
"""TransferLUT gateware against the lowbit.sim.lut golden model, bit for bit, in Amaranth's
simulator."""

import numpy as np
import pytest
from amaranth.back import verilog

from lowbit.hw.lut import TransferLUT
from lowbit.hw.registry import build_block
from lowbit.sim.lut import (
    WIDE_DEPTH,
    Quant,
    TableBank,
    lookup,
    lookup_int16,
    lookup_wide,
    wide_format,
    wide_image,
)
from lowbit.sim.rtl.harness import payload_value, run_stream

Q16_IN, Q16_OUT = Quant(2 ** -12, 0, "int16"), Quant(2 ** -15, 0, "int16")


def load(dut, writes):
    """A ``setup`` for run_stream that streams ``writes`` into ``i_write`` (always ready)."""
    async def setup(ctx):
        for w in writes:
            ctx.set(dut.i_write.payload, w)
            ctx.set(dut.i_write.valid, 1)
            await ctx.tick()
            assert ctx.get(dut.i_write.ready)
        ctx.set(dut.i_write.valid, 0)
        await ctx.tick().repeat(2)          # writes are registered: visible two cycles later
    return setup


def byte_beats(slots, lanes, codes=range(256)):
    codes = list(codes)
    beats = []
    for slot in slots:
        padded = codes + [0] * (-len(codes) % lanes)
        beats += [{"table": slot, "code": padded[j:j + lanes]}
                  for j in range(0, len(padded), lanes)]
    return beats


def wide_beats(slot, xs, lanes, fmt=0):
    xs = [int(v) for v in xs] + [0] * (-len(xs) % lanes)
    return [{"table": slot, "format": fmt, "code": xs[j:j + lanes]}
            for j in range(0, len(xs), lanes)]


def run_rtl(dut, bank, byte=(), wide=(), extra_writes=(), **kw):
    """Load ``bank`` and run byte beats and wide beats; return flat per-lane outputs."""
    inputs, outputs = {}, {}
    if byte:
        inputs["i"], outputs["o"] = byte, len(byte)
    if wide:
        inputs["i_wide"], outputs["o_wide"] = wide, len(wide)
    out = run_stream(dut, inputs, outputs,
                     setup=load(dut, bank.write_payloads() + list(extra_writes)), **kw)
    return ([v for beat in out.get("o", []) for v in beat],
            [v for beat in out.get("o_wide", []) for v in beat])


def byte_model(bank, slots, lanes, codes=range(256)):
    codes = list(codes)
    out = []
    for slot in slots:
        image = bank.tables[slot].view(np.uint8)
        out += lookup(image, codes).tolist() + [int(image[0])] * (-len(codes) % lanes)
    return out


A8, B8, U8 = Quant(0.05, 3), Quant(1 / 128, -2), Quant(0.03, 128, "uint8")
BYTE_GROUPS = [
    # (lanes, tables, [(ops, q_in, q_out)]): every operator, int8 and uint8, sym and asym
    (4, 4, [("tanh", A8, B8), ("sigmoid", A8, Quant(1 / 256, 0, "uint8")),
            ("relu6", U8, Quant(0.025, 0, "uint8")), ("exp", Quant(0.04, 0), Quant(0.1, -100))]),
    (3, 3, [(("leaky_relu", 0.1), Quant(0.1, 0, narrow_range=True), Quant(0.08, 0)),
            ("gelu", A8, Quant(0.03, -40)), ("silu", A8, Quant(0.03, -30))]),
    (1, 4, [("erf", Quant(0.02, -10), B8), ("relu", U8, U8),
            ("identity", Quant(0.0625, 0), Quant(0.0625, 0)),
            (["tanh", "exp"], A8, Quant(0.02, -128))]),
]


@pytest.mark.parametrize("lanes,tables,specs", BYTE_GROUPS)
def test_byte_tables_all_inputs(lanes, tables, specs):
    bank = TableBank()
    slots = [bank.add(*spec) for spec in specs]
    assert slots == list(range(len(specs)))
    dut = TransferLUT(lanes=lanes, tables=tables, wide_tables=0)
    beats = byte_beats(slots, lanes)
    got, _ = run_rtl(dut, bank, byte=beats, valid_prob=0.8, ready_prob=0.6, seed=lanes)
    assert got == byte_model(bank, slots, lanes)


def test_wide_interpolation_random_and_edge_inputs():
    bank = TableBank()
    bank.add("tanh", A8, B8)
    slot = bank.add_wide("tanh", Q16_IN, Q16_OUT)
    rng = np.random.default_rng(3)
    edges = [-32768, 32767, -1, 0, 1, 127, 128, -128, -129, 32639, 32640, 32641, -32641]
    xs = np.r_[edges, rng.integers(-32768, 32768, 1200)]
    dut = TransferLUT(lanes=4, tables=1, wide_tables=1)
    got_b, got_w = run_rtl(dut, bank, byte=byte_beats([0], 4), wide=wide_beats(slot, xs, 4),
                           valid_prob=0.7, ready_prob=0.7, seed=5)
    assert got_w[:len(xs)] == lookup_int16(bank.wide_tables[slot], xs).tolist()
    assert got_b == byte_model(bank, [0], 4)          # both paths run side by side


def test_wide_tables_are_selected_per_beat_including_entry_512():
    bank = TableBank()
    bank.add("identity", A8, A8)
    s0 = bank.add_wide("sigmoid", Q16_IN, Q16_OUT)
    s1 = bank.add_wide(("leaky_relu", 0.2), Quant(1e-3, 0, "int16"), Quant(1e-3, 0, "int16"))
    xs = np.r_[np.arange(32512, 32768), np.arange(-32768, -32512), np.arange(-200, 200)]
    dut = TransferLUT(lanes=2, tables=1, wide_tables=2)
    beats = wide_beats(s0, xs, 2) + wide_beats(s1, xs, 2)
    _, got = run_rtl(dut, bank, wide=beats, ready_prob=0.5, seed=9)
    expected = np.r_[lookup_int16(bank.wide_tables[s0], xs), lookup_int16(bank.wide_tables[s1], xs)]
    assert got == expected.tolist()
    assert bank.wide_tables[s0][512] != bank.wide_tables[s1][512]


def test_out_of_range_writes_are_ignored():
    bank = TableBank()
    bank.add("tanh", A8, B8)
    bank.add("sigmoid", A8, B8)
    bank.add("relu", A8, B8)
    bank.add_wide("tanh", Q16_IN, Q16_OUT)
    junk = ([{"wide": 0, "table": 3, "addr": a, "data": 0x5A} for a in range(256)]
            + [{"wide": 0, "table": 1, "addr": 256 + a, "data": 0xA5} for a in range(256)]
            + [{"wide": 1, "table": 0, "addr": 513 + a, "data": 0x1234} for a in range(511)]
            + [{"wide": 1, "table": 1, "addr": a, "data": 0x4321} for a in range(513)])
    dut = TransferLUT(lanes=2, tables=3, wide_tables=1)
    xs = np.r_[np.arange(-32768, 32768, 97), 32767]
    got_b, got_w = run_rtl(dut, bank, byte=byte_beats([0, 1, 2], 2), wide=wide_beats(0, xs, 2),
                           extra_writes=junk)
    assert got_b == byte_model(bank, [0, 1, 2], 2)
    assert got_w[:len(xs)] == lookup_int16(bank.wide_tables[0], xs).tolist()


def test_tables_reload_at_run_time():
    old, new = TableBank(), TableBank()
    old.add("tanh", A8, B8)
    new.add("exp", A8, Quant(0.1, -128))
    dut = TransferLUT(lanes=4, tables=1, wide_tables=0)
    first = []

    async def setup(ctx):
        await load(dut, old.write_payloads())(ctx)
        ctx.set(dut.o.ready, 1)
        for beat in byte_beats([0], 4):
            ctx.set(dut.i.payload, beat)
            ctx.set(dut.i.valid, 1)
            await ctx.tick()
            # Latency 1: after the edge that took the beat, o holds its lookup.
            assert ctx.get(dut.o.valid)
            first.extend(payload_value(ctx.get(dut.o.payload)))
        ctx.set(dut.i.valid, 0)
        await ctx.tick()
        ctx.set(dut.o.ready, 0)
        await load(dut, new.write_payloads())(ctx)

    out = run_stream(dut, {"i": byte_beats([0], 4)}, {"o": 64}, setup=setup, ready_prob=0.8)
    assert first == byte_model(old, [0], 4)
    assert [v for beat in out["o"] for v in beat] == byte_model(new, [0], 4)
    assert first != byte_model(new, [0], 4)


# --- layers of different widths: formats 1 (int16 -> int8) and 2 (8-bit -> int16) ----------

#: Every segment's first, second, middle and last two inputs, and the extremes.
SEGMENT_EDGES = np.unique(np.concatenate(
    [(np.arange(512) - 256) * 128 + d for d in (0, 1, 64, 126, 127)] + [[-32768, 32767]]))


def mixed_width_bank():
    bank = TableBank()
    bank.add("identity", A8, A8)
    wide = Quant(2 ** -12, 0, "int16")
    slots = [bank.add_wide("tanh", wide, Quant(1 / 128, 0)),                    # format 1
             bank.add("sigmoid", A8, Quant(2 ** -15, -16384, "int16")),          # format 2
             bank.add("gelu", U8, Quant(1e-3, 500, "int16")),                   # format 2, uint8
             bank.add_wide("silu", wide, Quant(2 ** -12, 0, "int16"))]          # format 0
    # format 1 with int8 slopes that wrap (entries 100/101 and 300/301), as the C++ int8_t does
    crafted = np.random.default_rng(4).integers(-128, 128, WIDE_DEPTH).astype(np.int8)
    crafted[100:102], crafted[300:302] = [-128, 127], [120, -120]
    bank.wide_tables.append(crafted)
    return bank, slots + [len(bank.wide_tables) - 1]


def test_wide_formats_for_layers_of_different_widths():
    bank, slots = mixed_width_bank()
    rng = np.random.default_rng(11)
    xs = np.r_[SEGMENT_EDGES, rng.integers(-32768, 32768, 300)]
    codes = np.arange(256)
    runs = [(slots[0], xs), (slots[1], codes), (slots[2], codes), (slots[3], xs),
            (slots[4], np.r_[np.arange(100 * 128 - 32768, 102 * 128 - 32768),
                             np.arange(300 * 128 - 32768, 302 * 128 - 32768)])]
    beats, expected = [], []
    for slot, inputs in runs:
        table = bank.wide_tables[slot]
        fmt = wide_format(table)
        beats += wide_beats(slot, inputs, 3, fmt)
        padded = np.r_[inputs, [0] * (-len(inputs) % 3)]
        want = lookup_wide(wide_image(table)[0], padded, fmt)
        # the model's lookups of the tables themselves, independently of the wide image
        own = lookup(table, inputs) if fmt == 2 else lookup_int16(table, inputs)
        assert np.array_equal(want[:len(inputs)], own)
        expected += want.astype(int).tolist()
    assert [wide_format(bank.wide_tables[s]) for s in slots] == [1, 2, 2, 0, 1]
    dut = TransferLUT(lanes=3, tables=1, wide_tables=5)
    _, got = run_rtl(dut, bank, wide=beats, valid_prob=0.8, ready_prob=0.7, seed=12)
    assert got == expected


def test_wide_format_two_takes_the_low_byte_of_each_lane():
    bank = TableBank()
    bank.add("identity", A8, A8)
    slot = bank.add("tanh", A8, Quant(1e-4, 3, "int16"))
    codes = np.arange(256)
    junk_high = codes | (np.random.default_rng(2).integers(-128, 128, 256) << 8)
    dut = TransferLUT(lanes=4, tables=1, wide_tables=1)
    _, got = run_rtl(dut, bank, wide=wide_beats(slot, junk_high, 4, 2), seed=3)
    assert got == lookup(bank.wide_tables[slot], codes).astype(int).tolist()


@pytest.mark.slow
def test_int16_to_int8_all_inputs():
    bank = TableBank()
    bank.add("identity", A8, A8)
    slot = bank.add_wide("sigmoid", Q16_IN, Quant(1 / 256, 0))
    xs = np.arange(-32768, 32768)
    dut = TransferLUT(lanes=8, tables=1, wide_tables=1)
    _, got = run_rtl(dut, bank, wide=wide_beats(slot, xs, 8, 1), ready_prob=0.9)
    assert got == lookup_int16(bank.wide_tables[slot], xs).astype(int).tolist()


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["sigmoid", "tanh", "gelu", ("leaky_relu", 0.1), "exp"])
def test_wide_interpolation_all_inputs(spec):
    bank = TableBank()
    bank.add("identity", A8, A8)
    qi, qo = (Quant(2 ** -12, 16384, "int16"), Quant(2 ** -10, 0, "int16")) if spec == "exp" \
        else (Q16_IN, Q16_OUT)
    slot = bank.add_wide(spec, qi, qo)
    xs = np.arange(-32768, 32768)
    dut = TransferLUT(lanes=8, tables=1, wide_tables=1)
    _, got = run_rtl(dut, bank, wide=wide_beats(slot, xs, 8), ready_prob=0.9)
    assert got == lookup_int16(bank.wide_tables[slot], xs).tolist()


# --- parameters, signature, Verilog ----------------------------------------------------------

@pytest.mark.parametrize("kwargs,exc,msg", [
    ({"lanes": True}, TypeError, "Lanes must be an integer between 1 and 32, not True"),
    ({"lanes": 2.0}, TypeError, "Lanes must be an integer between 1 and 32, not 2.0"),
    ({"lanes": 0}, ValueError, "Lanes must be an integer between 1 and 32, not 0"),
    ({"lanes": 33}, ValueError, "Lanes must be an integer between 1 and 32, not 33"),
    ({"tables": "2"}, TypeError, "Tables must be an integer between 1 and 64"),
    ({"tables": 0}, ValueError, "Tables must be an integer between 1 and 64, not 0"),
    ({"tables": 65}, ValueError, "Tables must be an integer between 1 and 64, not 65"),
    ({"wide_tables": False}, TypeError, "Wide tables must be an integer between 0 and 16"),
    ({"wide_tables": -1}, ValueError, "Wide tables must be an integer between 0 and 16, not -1"),
    ({"wide_tables": 17}, ValueError, "Wide tables must be an integer between 0 and 16, not 17"),
])
def test_parameter_validation(kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        TransferLUT(**kwargs)


def test_properties_and_signature():
    dut = TransferLUT(lanes=3, tables=5, wide_tables=2)
    assert (dut.lanes, dut.tables, dut.wide_tables) == (3, 5, 2)
    with pytest.raises(AttributeError):
        dut.lanes = 4
    assert dut.i.payload.shape().size == 3 + 3 * 8
    assert dut.i_wide.payload.shape().size == 1 + 2 + 3 * 16
    assert dut.o_wide.payload.shape().size == 3 * 16
    assert dut.i_write.payload.shape().size == 1 + 3 + 10 + 16
    narrow = TransferLUT(wide_tables=0)
    assert not hasattr(narrow, "i_wide") and not hasattr(narrow, "o_wide")


def test_builds_from_registry_on_defaults():
    dut = build_block("lut")
    assert isinstance(dut, TransferLUT)
    text = verilog.convert(dut, name="lut")
    assert "module lut" in text
