# amaranth: UnusedElaboratable=no
"""DiscreteUnit gateware against the golden model :mod:`lowbit.sim.discrete`, bit for bit."""

import os
import subprocess

import numpy as np
import pytest
from amaranth.back import rtlil
from amaranth.hdl import Fragment
from amaranth.lib import wiring
from streams import cached, run_stream

from lowbit.hw.discrete import CodeEntry, DiscreteOp, DiscreteUnit
from lowbit.hw.registry import build_block
from lowbit.sim.discrete import (
    DD_OPS,
    CodeBook,
    SMFormat,
    dd_table,
    div_cd,
    dot,
    matvec,
    matvec_t,
    mul_cd,
)


def random_book(rng, n):
    return CodeBook(n, [(int(rng.integers(2)), int(rng.integers(2)), int(rng.integers(8)))
                        for _ in range(1 << n)])


def run_rtl(dut, op, x, w, book, *, last=None, n_out=None, lut_op=0, tables=None,
            valid_prob=0.8, ready_prob=0.7, seed=0):
    """Send beats ``x[b]``, ``w[b]`` (``beats × lanes``) with ``op``; return the output beats.

    ``tables`` maps table index -> 2-D table of words, written through the table port first.
    """
    x = np.asarray(x).reshape(-1, dut.lanes)
    w = np.asarray(w).reshape(-1, dut.lanes)
    last = np.zeros(len(x), int) if last is None else np.asarray(last)
    n = dut.code_bits

    async def setup(ctx):
        for k, word in enumerate(book.words()):
            ctx.set(dut.book[k].as_value(), word)
        ctx.set(dut.op, op)
        ctx.set(dut.lut_op, lut_op)
        for t, table in (tables or {}).items():
            for a in range(table.shape[0]):
                for b in range(table.shape[1]):
                    ctx.set(dut.tbl_en, 1)
                    ctx.set(dut.tbl_addr, t << (2 * n) | a << n | b)
                    ctx.set(dut.tbl_data, int(table[a, b]))
                    await ctx.tick()
        if dut.tables:
            ctx.set(dut.tbl_en, 0)
        await ctx.tick().repeat(3 if dut.local_book else 1)

    beats = [{"x": [int(v) for v in xb], "w": [int(v) for v in wb], "last": int(lb)}
             for xb, wb, lb in zip(x, w, last, strict=True)]
    if n_out is None:
        n_out = len(beats)
    out = run_stream(dut, {"i": beats}, {"o": n_out}, setup=setup, valid_prob=valid_prob,
                     ready_prob=ready_prob, seed=seed)["o"]
    return np.array([o["y"] for o in out]), np.array([o["acc"] for o in out])


def all_pairs(width, n, lanes):
    """Every (operand, code) pair, padded to whole beats by repeating the first pairs."""
    xs, cs = np.meshgrid(np.arange(1 << width), np.arange(1 << n), indexing="ij")
    xs, cs = xs.ravel(), cs.ravel()
    pad = -len(xs) % lanes
    return np.r_[xs, xs[:pad]], np.r_[cs, cs[:pad]]


# --- parameters and interface ------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, exc, msg", [
    ({"lanes": 0}, ValueError, "Lane count must be an integer between 1 and 64, not 0"),
    ({"lanes": 65}, ValueError, "Lane count must be an integer between 1 and 64, not 65"),
    ({"lanes": True}, TypeError, "Lane count must be an integer"),
    ({"lanes": 4.0}, TypeError, "Lane count must be an integer"),
    ({"width": 2}, ValueError, "Operand width must be an integer between 3 and 24, not 2"),
    ({"width": 25}, ValueError, "Operand width must be an integer between 3 and 24, not 25"),
    ({"width": "8"}, TypeError, "Operand width must be an integer"),
    ({"code_bits": 0}, ValueError, "Code width must be an integer between 1 and 3, not 0"),
    ({"code_bits": 4}, ValueError, "Code width must be an integer between 1 and 3, not 4"),
    ({"code_bits": False}, TypeError, "Code width must be an integer"),
    ({"acc_width": 7}, ValueError, "Accumulator width must be an integer between 8 and 48, not 7"),
    ({"acc_width": 49}, ValueError, "Accumulator width must be an integer between 8 and 48"),
    ({"acc_width": 16.0}, TypeError, "Accumulator width must be an integer"),
    ({"tables": 1}, TypeError, "Tables must be a bool, not 1"),
    ({"sum_stages": 0}, ValueError, "^Sum stages must be an integer between 1 and 3, not 0$"),
    ({"sum_stages": 4}, ValueError, "^Sum stages must be an integer between 1 and 3, not 4$"),
    ({"sum_stages": True}, TypeError, "^Sum stages must be an integer"),
    ({"local_book": None}, TypeError, "^Local book must be a bool, not None$"),
    ({"entry_stage": 1}, TypeError, "^Entry stage must be a bool, not 1$"),
])
def test_parameter_validation(kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        DiscreteUnit(**kwargs)


def test_defaults_properties_and_signature():
    dut = DiscreteUnit()
    assert ((dut.lanes, dut.width, dut.code_bits, dut.acc_width, dut.tables, dut.sum_stages)
            == (4, 8, 2, 16, True, 1))
    assert DiscreteUnit(sum_stages=3).sum_stages == 3
    assert DiscreteUnit(local_book=True).local_book and not dut.local_book
    assert DiscreteUnit(entry_stage=True).entry_stage and not dut.entry_stage
    assert DiscreteUnit(width=12).acc_width == 20
    assert "tbl_en" not in DiscreteUnit(tables=False).signature.members
    for attr in ("lanes", "width", "code_bits", "acc_width", "tables", "sum_stages",
                 "local_book", "entry_stage"):
        with pytest.raises(AttributeError):
            setattr(dut, attr, 1)
    members = dut.signature.members
    assert members["book"].shape.elem_shape == CodeEntry
    assert members["book"].shape.length == 4
    assert members["op"].shape is DiscreteOp
    assert members["tbl_addr"].shape == 6
    assert members["i"].flow == wiring.Flow.In and members["o"].flow == wiring.Flow.Out
    block = build_block("discrete", lanes=2)
    assert isinstance(block, DiscreteUnit) and block.lanes == 2
    Fragment.get(block, None)


def test_book_word_packing_matches_model():
    # CodeEntry's bit layout is the model's register word.
    book = CodeBook(2, [(1, 0, 5), (0, 1, 7), (1, 1, 0), (0, 0, 2)])
    for (sign, direction, shift), word in zip(book.entries, book.words(), strict=True):
        view = CodeEntry.const({"sign": sign, "direction": direction, "shift": shift})
        assert view.as_value().value == word


def test_no_multiplier_in_netlist():
    text = rtlil.convert(DiscreteUnit(lanes=4, width=8, code_bits=3))
    assert "$mul" not in text and "$div" not in text


# --- continuous x discrete, exhaustive for 8-bit operands ---------------------------------------

@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("op", [DiscreteOp.MUL, DiscreteOp.DIV])
def test_shift_exhaustive_8bit(n, op):
    rng = np.random.default_rng(10 * n + op.value)
    dut = cached(DiscreteUnit, lanes=4, width=8, code_bits=n)
    fmt = SMFormat(8, 0)
    model = mul_cd if op == DiscreteOp.MUL else div_cd
    x, c = all_pairs(8, n, dut.lanes)
    # The default book, then a random book with left shifts (saturation) and mixed signs.
    for book in (CodeBook.default(n), random_book(rng, n)):
        y, acc = run_rtl(dut, op, x, c, book, seed=n)
        assert (y.ravel() == model(x, c, book, fmt)).all()
        assert (acc == 0).all()


@pytest.mark.parametrize("width", [3, 5])
def test_shift_exhaustive_narrow(width):
    # Shifts longer than the magnitude: right shifts give zero, left shifts saturate any
    # nonzero magnitude.
    rng = np.random.default_rng(width)
    dut = cached(DiscreteUnit, lanes=2, width=width, code_bits=3)
    fmt = SMFormat(width, 1)
    x, c = all_pairs(width, 3, dut.lanes)
    book = CodeBook(3, [(0, 0, 7), (1, 1, 7), (0, 1, 5), (1, 0, 4), (0, 1, 3), (1, 0, 2),
                        (0, 1, 1), (1, 0, 0)])
    for op, model in ((DiscreteOp.MUL, mul_cd), (DiscreteOp.DIV, div_cd)):
        y, _ = run_rtl(dut, op, x, c, book, seed=int(rng.integers(100)))
        assert (y.ravel() == model(x, c, book, fmt)).all()


def test_seed_examples_in_gateware():
    book = CodeBook(2, [(1, 0, 0), (1, 0, 1), (1, 1, 1), (0, 0, 0)])
    dut = cached(DiscreteUnit, lanes=1, width=8, code_bits=2)
    y, _ = run_rtl(dut, DiscreteOp.MUL, [0b00010000], [0b01], book)
    assert y.tolist() == [[0b10001000]]
    y, _ = run_rtl(dut, DiscreteOp.DIV, [0b00010000], [0b10], book)
    assert y.tolist() == [[0b10001000]]


@pytest.mark.parametrize("op", [DiscreteOp.MUL, DiscreteOp.DIV])
def test_shift_random_16bit(op):
    rng = np.random.default_rng(20 + op.value)
    dut = cached(DiscreteUnit, lanes=3, width=16, code_bits=3)
    fmt = SMFormat(16, 8)
    model = mul_cd if op == DiscreteOp.MUL else div_cd
    book = random_book(rng, 3)
    x = rng.integers(0, 1 << 16, (200, 3))
    x[:4] = [[0, 0x8000, 0x7FFF], [0xFFFF, 1, 0x8001], [0x4000, 0xC000, 0x0100],
             [0x7FFF, 0xFFFF, 0]]
    c = rng.integers(0, 8, (200, 3))
    y, _ = run_rtl(dut, op, x, c, book, valid_prob=0.6, ready_prob=0.5, seed=3)
    assert (y == model(x, c, book, fmt)).all()


# --- discrete x discrete lookup tables -----------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 3])
def test_lut_exhaustive(n):
    rng = np.random.default_rng(30 + n)
    dut = cached(DiscreteUnit, lanes=4, width=8, code_bits=n)
    fmt = SMFormat(8, 3)
    book = CodeBook.default(n) if n != 2 else random_book(rng, n)
    tables = {t: dd_table(book, name, fmt) for t, name in enumerate(DD_OPS)}
    a, b = np.meshgrid(np.arange(1 << n), np.arange(1 << n), indexing="ij")
    a, b = a.ravel(), b.ravel()
    pad = -len(a) % dut.lanes
    a, b = np.r_[a, a[:pad]], np.r_[b, b[:pad]]
    # Bits of x above the code are ignored in LUT mode.
    x = a | rng.integers(0, 1 << (8 - n), len(a)) << n
    for t, name in enumerate(DD_OPS):
        y, _ = run_rtl(dut, DiscreteOp.LUT, x, b, book, lut_op=t, tables=tables, seed=t)
        assert (y.ravel() == tables[t][a, b]).all(), name


def test_without_tables_lut_mode_gives_zero():
    rng = np.random.default_rng(35)
    dut = cached(DiscreteUnit, lanes=2, width=8, code_bits=2, tables=False)
    x = rng.integers(0, 256, (20, 2))
    c = rng.integers(0, 4, (20, 2))
    y, acc = run_rtl(dut, DiscreteOp.LUT, x, c, CodeBook.default(2))
    assert (y == 0).all() and (acc == 0).all()
    y, _ = run_rtl(dut, DiscreteOp.MUL, x, c, CodeBook.default(2))
    assert (y == mul_cd(x, c, CodeBook.default(2), SMFormat(8))).all()


# --- accumulation: dot products, matvec, backward ------------------------------------------------

def dot_beats(dut, vectors):
    """Dot products ``[(x, codes), ...]`` as beats, zero-padded to whole beats."""
    xs, cs, lasts = [], [], []
    for vx, vc in vectors:
        beats = -(-len(vx) // dut.lanes)
        x = np.zeros(beats * dut.lanes, int)
        c = np.zeros(beats * dut.lanes, int)
        x[:len(vx)] = vx
        c[:len(vc)] = vc
        xs.append(x)
        cs.append(c)
        lasts.append(np.r_[np.zeros(beats - 1, int), 1])
    return np.concatenate(xs), np.concatenate(cs), np.concatenate(lasts)


@pytest.mark.parametrize("n, width, acc_width, lanes", [
    (1, 8, 16, 4), (2, 8, 10, 4), (3, 8, 9, 2), (3, 16, 24, 3), (2, 12, 12, 1), (1, 8, 8, 4),
    (2, 3, 4, 3),
])
def test_dot_saturating(n, width, acc_width, lanes):
    rng = np.random.default_rng(40 + n + acc_width)
    dut = cached(DiscreteUnit, lanes=lanes, width=width, code_bits=n, acc_width=acc_width)
    fmt = SMFormat(width, 4)
    book = random_book(rng, n)
    vectors = [(rng.integers(0, 1 << width, k), rng.integers(0, 1 << n, k))
               for k in (1, lanes, lanes + 1, 7, 16, 33, 2)]
    # Largest products, all positive, then a swing: negative run followed by a positive run.
    big = int(np.argmax(book.exponents()))
    sign = book.entries[big][0] << (width - 1)
    top = (1 << (width - 1)) - 1
    vectors.append((np.full(40, top | sign), np.full(40, big)))
    vectors.append((np.r_[np.full(20, top | sign ^ (1 << (width - 1))), np.full(20, top | sign)],
                    np.full(40, big)))
    x, c, last = dot_beats(dut, vectors)
    y, acc = run_rtl(dut, DiscreteOp.DOT, x, c, book, last=last, n_out=len(vectors), seed=n)
    expect = [int(dot(vx, vc, book, fmt, acc_width=acc_width, lanes=lanes))
              for vx, vc in vectors]
    assert acc.tolist() == expect
    assert (y == 0).all()
    # The crafted vectors do exercise saturation whenever the accumulator is narrow.
    exact = [int(dot(vx, vc, book, fmt, acc_width=48, lanes=lanes)) for vx, vc in vectors[-2:]]
    saturated = [SMFormat(acc_width).to_int(e) != SMFormat(48).to_int(u)
                 for e, u in zip(expect[-2:], exact, strict=True)]
    if acc_width < width + 6:
        assert all(saturated)


@pytest.mark.parametrize("lanes, acc_width, stages", [
    (64, 16, 2), (64, 16, 3), (5, 10, 2), (5, 10, 3), (2, 16, 2), (2, 16, 3), (1, 12, 3),
])
def test_sum_stages_equal_model_a_cycle_later_each(lanes, acc_width, stages):
    """``sum_stages``: the lane terms summed in two or three stages of partial sums give the
    model's dot products, saturating ones among them, a cycle later per stage than one."""

    rng = np.random.default_rng(70 + lanes + 100 * stages)
    dut = cached(DiscreteUnit, lanes=lanes, code_bits=3, acc_width=acc_width, tables=False,
                 sum_stages=stages)
    book = random_book(rng, 3)
    fmt = SMFormat(8, 4)
    big = int(np.argmax(book.exponents()))
    top = 127 | book.entries[big][0] << 7
    vectors = [(rng.integers(0, 256, k), rng.integers(0, 8, k))
               for k in (1, lanes, 2 * lanes + 1, 3 * lanes)]
    vectors.append((np.full(2 * lanes + 3, top), np.full(2 * lanes + 3, big)))
    x, c, last = dot_beats(dut, vectors)
    _, acc = run_rtl(dut, DiscreteOp.DOT, x, c, book, last=last, n_out=len(vectors), seed=lanes)
    assert acc.tolist() == [int(dot(vx, vc, book, fmt, acc_width=acc_width, lanes=lanes))
                            for vx, vc in vectors]

    def latency(unit):
        return _first_output_cycle(unit, book, DiscreteOp.DOT,
                                   {"x": [1] * lanes, "w": [0] * lanes})

    one = DiscreteUnit(lanes=lanes, code_bits=3, acc_width=acc_width, tables=False)
    assert latency(one) == [4]
    assert latency(dut) == [3 + stages]


def _first_output_cycle(unit, book, op, payload, lut_op=0):
    """Cycles from one beat taken (``payload``, ``last`` 1) to the first ``o.valid``."""
    from amaranth.sim import Simulator
    seen = []

    async def bench(ctx):
        for k, word in enumerate(book.words()):
            ctx.set(unit.book[k].as_value(), word)
        ctx.set(unit.op, op)
        ctx.set(unit.lut_op, lut_op)
        ctx.set(unit.o.ready, 1)
        await ctx.tick().repeat(3)
        ctx.set(unit.i.valid, 1)
        ctx.set(unit.i.payload, {**payload, "last": 1})
        await ctx.tick()
        ctx.set(unit.i.valid, 0)
        for cycle in range(1, 10):
            if ctx.get(unit.o.valid):
                seen.append(cycle)
                return
            await ctx.tick()

    sim = Simulator(unit)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return seen


@pytest.mark.parametrize("local_book", [False, True])
def test_entry_stage_equals_model_one_cycle_later(local_book):
    """``entry_stage`` (with and without ``local_book``, as the ULX3S's DMATVEC has both):
    every 8-bit operand against every 2-bit code in MUL and DIV, every LUT entry of the four
    tables, and dot products (saturating ones among them) under random stalls equal the
    model; the first output comes a cycle later than without the stage in each mode."""
    rng = np.random.default_rng(80 + local_book)
    n, lanes = 2, 5
    dut = cached(DiscreteUnit, lanes=lanes, code_bits=n, acc_width=12, entry_stage=True,
                 local_book=local_book)
    fmt = SMFormat(8, 3)
    book = random_book(rng, n)
    x, c = all_pairs(8, n, lanes)
    for op, model in ((DiscreteOp.MUL, mul_cd), (DiscreteOp.DIV, div_cd)):
        y, acc = run_rtl(dut, op, x, c, book, valid_prob=0.6, ready_prob=0.5, seed=op.value)
        assert (y.ravel() == model(x, c, book, fmt)).all() and (acc == 0).all()
    tables = {t: dd_table(book, name, fmt) for t, name in enumerate(DD_OPS)}
    a, b = np.meshgrid(np.arange(1 << n), np.arange(1 << n), indexing="ij")
    a, b = np.r_[a.ravel(), a.ravel()[:4]], np.r_[b.ravel(), b.ravel()[:4]]
    xl = a | rng.integers(0, 1 << (8 - n), len(a)) << n
    for t, name in enumerate(DD_OPS):
        y, _ = run_rtl(dut, DiscreteOp.LUT, xl, b, book, lut_op=t, tables=tables, seed=t)
        assert (y.ravel() == tables[t][a, b]).all(), name
    big = int(np.argmax(book.exponents()))
    top = 127 | book.entries[big][0] << 7
    vectors = [(rng.integers(0, 256, k), rng.integers(0, 4, k)) for k in (1, 5, 11, 23)]
    vectors.append((np.full(4 * lanes, top), np.full(4 * lanes, big)))
    xd, cd, last = dot_beats(dut, vectors)
    _, acc = run_rtl(dut, DiscreteOp.DOT, xd, cd, book, last=last, n_out=len(vectors), seed=9)
    assert acc.tolist() == [int(dot(vx, vc, book, fmt, acc_width=12, lanes=lanes))
                            for vx, vc in vectors]
    plain = DiscreteUnit(lanes=lanes, code_bits=n, acc_width=12, local_book=local_book)
    beat = {"x": [1] * lanes, "w": [0] * lanes}
    for op in (DiscreteOp.MUL, DiscreteOp.LUT, DiscreteOp.DOT):
        before = _first_output_cycle(plain, book, op, beat)
        assert before == [4 if op == DiscreteOp.DOT else 2]
        assert _first_output_cycle(dut, book, op, beat) == [before[0] + 1]


def test_matvec_and_transpose():
    rng = np.random.default_rng(50)
    dut = cached(DiscreteUnit, lanes=4, width=8, code_bits=2, acc_width=14)
    fmt = SMFormat(8, 4)
    book = CodeBook.default(2)
    w = rng.integers(0, 4, (5, 10))
    for mat, vec, ref in ((w, rng.integers(0, 256, 10), matvec),
                          (w.T, rng.integers(0, 256, 5), None)):
        rows, cols = mat.shape
        beats = -(-cols // 4)
        xs = np.zeros((rows, beats * 4), int)
        cs = np.zeros((rows, beats * 4), int)
        xs[:, :cols] = vec
        cs[:, :cols] = mat
        last = np.tile(np.r_[np.zeros(beats - 1, int), 1], rows)
        _, acc = run_rtl(dut, DiscreteOp.DOT, xs, cs, book, last=last, n_out=rows, seed=rows)
        if ref is matvec:
            expect = matvec(w, vec, book, fmt, acc_width=14, lanes=4)
        else:
            expect = matvec_t(w, vec, book, fmt, acc_width=14, lanes=4)
        assert acc.tolist() == expect.tolist()


def test_full_throughput_without_backpressure():
    # With valid and ready always high, one beat per cycle: the stream finishes in time.
    rng = np.random.default_rng(60)
    dut = cached(DiscreteUnit, lanes=2, width=8, code_bits=1)
    book = CodeBook.default(1)
    x = rng.integers(0, 256, (300, 2))
    c = rng.integers(0, 2, (300, 2))
    y, _ = run_rtl(dut, DiscreteOp.MUL, x, c, book, valid_prob=1.0, ready_prob=1.0)
    assert (y == mul_cd(x, c, book, SMFormat(8))).all()


@pytest.mark.slow
def test_synthesis_uses_no_dsp(tmp_path):
    from lowbit.boards.toolchain import setup_toolchain_env

    env = setup_toolchain_env(dict(os.environ))
    (tmp_path / "d.il").write_text(rtlil.convert(DiscreteUnit(lanes=4, width=8, code_bits=3),
                                                 name="top"))
    subprocess.run([env["YOSYS"], "-q", "-p", "read_rtlil d.il; synth_ice40 -dsp -top top; "
                    "tee -o d.stat stat"], cwd=tmp_path, env=env, check=True)
    stat = (tmp_path / "d.stat").read_text()
    assert "SB_LUT4" in stat and "SB_MAC16" not in stat


@pytest.mark.parametrize("prev", [DiscreteOp.MUL, DiscreteOp.DIV])
def test_switch_to_dot_right_after_last_output(prev):
    """Switching ``op`` to DOT in the cycle after the previous operation's last output beat was
    taken: its beats, still in the DOT stages, must not reach the accumulator."""
    from amaranth.sim import Simulator
    dut = DiscreteUnit()
    book = CodeBook.default(2)
    res = []

    async def bench(ctx):
        for k, word in enumerate(book.words()):
            ctx.set(dut.book[k].as_value(), word)
        ctx.set(dut.op, prev)
        ctx.set(dut.o.ready, 1)
        for x in (100, 90):
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload, {"x": [x] * 4, "w": [3] * 4, "last": 0})
            await ctx.tick()
        ctx.set(dut.i.valid, 0)
        got = 0
        while got < 2:
            _, _, v = await ctx.tick().sample(dut.o.valid)
            got += v
        ctx.set(dut.op, DiscreteOp.DOT)
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload, {"x": [1, 0, 0, 0], "w": [3] * 4, "last": 1})
        await ctx.tick()
        ctx.set(dut.i.valid, 0)
        for _ in range(10):
            _, _, v, p = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            if v:
                res.append(p.acc)
                break

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    want = dot(np.array([[1, 0, 0, 0]]), np.array([[3] * 4]), book, SMFormat(8, 0), acc_width=16)
    assert res == [int(want[0])]


def test_local_book_follows_the_port_two_cycles_later():
    """``local_book`` on 9 lanes (three copies, the last of one lane): the model's products in
    MUL mode and its dot products with the book of the port; after each change of the book,
    the beats two cycles later use the new one in every lane, the beats one cycle later the
    old one in some."""
    from amaranth.sim import Simulator

    rng = np.random.default_rng(12)
    lanes = 9
    dut = cached(DiscreteUnit, lanes=lanes, code_bits=3, tables=False, local_book=True)
    fmt = SMFormat(8)
    book = random_book(rng, 3)
    x, c = rng.integers(0, 256, (40, lanes)), rng.integers(0, 8, (40, lanes))
    y, _ = run_rtl(dut, DiscreteOp.MUL, x, c, book, seed=3)
    assert (y == mul_cd(x.ravel(), c.ravel(), book, fmt).reshape(-1, lanes)).all()
    vectors = [(rng.integers(0, 256, k), rng.integers(0, 8, k)) for k in (3, 9, 20)]
    xd, cd, last = dot_beats(dut, vectors)
    _, acc = run_rtl(dut, DiscreteOp.DOT, xd, cd, book, last=last, n_out=3, seed=4)
    assert acc.tolist() == [int(dot(vx, vc, book, fmt, lanes=lanes)) for vx, vc in vectors]

    books = [random_book(rng, 3) for _ in range(4)]
    xs = rng.integers(0, 256, lanes)
    cs = np.arange(lanes) % 8
    got = {}

    async def bench(ctx):
        ctx.set(dut.op, DiscreteOp.MUL)
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.i.payload, {"x": xs.tolist(), "w": cs.tolist(), "last": 0})
        outs = []
        for b in books:
            for k, word in enumerate(b.words()):
                ctx.set(dut.book[k].as_value(), word)
            # Cycles 0..4 after the change: beats in cycles 1 and 2, then two idle cycles for
            # them to leave (a latency of 2).
            for cycle in range(5):
                ctx.set(dut.i.valid, int(cycle in (1, 2)))
                await ctx.tick()
                if ctx.get(dut.o.valid):
                    outs.append(np.array([ctx.get(dut.o.payload.y[k]) for k in range(lanes)]))
        assert len(outs) == 2 * len(books)
        for j in range(len(books)):
            got[j, 1], got[j, 2] = outs[2 * j], outs[2 * j + 1]

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    for j, b in enumerate(books):
        want = mul_cd(xs, cs, b, fmt)
        assert (got[j, 2] == want).all()
        assert (got[j, 1] != want).any()
