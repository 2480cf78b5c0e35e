"""Discrete-data shift/XOR unit (seed 001, DESIGN §3.3).

``L`` lanes multiply (or divide) sign-magnitude fixed-point operands by discrete codes through a
run-time code book, by sign XOR and a saturating barrel shift; a saturating accumulator turns a
stream of beats into dot products (matrix–vector products, ``Wᵀ·g``); discrete ⊗ discrete
``+ − × ÷`` go through run-time loaded lookup tables. There is no multiplier anywhere. The golden
model is :mod:`lowbit.sim.discrete`; this gateware matches it bit for bit.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .common import check_int as _check_int

__all__ = ["DiscreteOp", "CodeEntry", "DiscreteUnit"]


class DiscreteOp(enum.Enum, shape=2):
    """Operation of a :class:`DiscreteUnit`, set on its ``op`` port.

    ``MUL`` and ``DIV``: per lane ``y = x × code`` / ``x ÷ code``
    (:func:`lowbit.sim.discrete.mul_cd`,
    :func:`lowbit.sim.discrete.div_cd`). ``DOT``: accumulate ``Σ x × code`` over beats until
    ``last``
    (:func:`lowbit.sim.discrete.dot`). ``LUT``: per lane ``y = table[lut_op][a][w]`` with ``a`` the
    low
    code bits of ``x`` (:func:`lowbit.sim.discrete.dd_table`).
    """
    MUL = 0
    DIV = 1
    DOT = 2
    LUT = 3


#: One code-book entry as a register word: ``shift | direction << 3 | sign << 4``
#: (:meth:`lowbit.sim.discrete.CodeBook.words`).
CodeEntry = data.StructLayout({"shift": 3, "direction": 1, "sign": 1})



class DiscreteUnit(wiring.Component):
    """Multiplier-free continuous × discrete unit with accumulation and discrete LUT ops.

    Operands are sign-magnitude words of ``width`` bits (sign on top; the unit never needs the
    position of the binary point, so any ``frac`` of :class:`lowbit.sim.discrete.SMFormat` works).
    Codes
    are ``code_bits`` wide and index the run-time code book.

    Parameters
    ----------
    lanes : int
        Lanes per beat, 1..64 (default 4).
    width : int
        Operand width in bits including the sign, 3..24 (default 8).
    code_bits : int
        Code width ``n``, 1..3 (default 2); the book has ``2**n`` entries. Narrower books are used
        by loading only their first entries and sending narrower codes.
    acc_width : int or None
        Accumulator width in bits including the sign, ``width``..48; default ``width + 8``.
    tables : bool
        Build the discrete ⊗ discrete lookup tables (``LUT`` mode, one block-RAM read port per
        lane) and their write port (default True). Without them ``LUT`` mode outputs zeros.
    sum_stages : int
        Register stages of a ``DOT`` beat's lane sum, 1..3 (default 1). With ``s`` stages each
        stage adds groups of at most ``r`` of the previous stage's sums, ``r`` the smallest
        integer with ``r ** s >= lanes`` (64 lanes: one sum of 64 terms, two stages of 8, or
        three of 4): each stage more is a cycle more of ``DOT`` latency and a shorter adder
        tree between registers, for the clock of wide units. The results are the same.
    local_book : bool
        Each group of four lanes reads a copy of the code book of its own, in flip-flops beside
        it, two cycles behind ``book`` (default False): the book fans out to ``ceil(lanes /
        4)`` copies instead of to every lane's decoder (on the ECP5-85F, 64 lanes across the
        die). A copy loads the book in the cycle after it differs from it, so each copy's next
        state reads its own flip-flops and synthesis keeps the copies apart. Change ``book``
        at least two cycles before the beats that use it.
    entry_stage : bool
        A register stage in front of the shifters (default False): each lane's code book
        entry, looked up from its code, and its operand (and, with ``tables``, its code) go into
        registers, and the shift and saturation work from them: one cycle more of latency in
        every mode and no book lookup and shifter in one cycle, for the clock of wide units.
        The results are the same.

    Members
    -------
    book : In(ArrayLayout(CodeEntry, 2**code_bits))
        The code book (configuration).
    op : In(DiscreteOp)
        The operation (configuration). Change it only while the unit is idle (no beat in flight
        and no unfinished dot product).
    lut_op : In(2)
        ``LUT`` mode: which table, index into :data:`lowbit.sim.discrete.DD_OPS` (add, sub, mul,
        div).
    tbl_en, tbl_addr, tbl_data : In(1), In(2 + 2 * code_bits), In(width)
        Table write port (only when ``tables``): on a cycle with ``tbl_en``, entry
        ``tbl_addr = op << 2n | a << n | b`` becomes ``tbl_data`` (a sign-magnitude word, see
        :func:`lowbit.sim.discrete.dd_table`). Do not write while ``LUT`` beats are in flight.
    i : In(stream.Signature(StructLayout({"x": ArrayLayout(width, L), "w": ArrayLayout(n, L),
        "last": 1})))
        Operands: ``x`` words and ``w`` codes per lane; ``last`` ends a dot product. In ``LUT``
        mode the left code ``a`` of lane ``l`` is ``x[l][:n]``.
    o : Out(stream.Signature(StructLayout({"y": ArrayLayout(width, L), "acc": acc_width})))
        ``MUL``/``DIV``/``LUT``: one beat per input beat, ``y`` the lane results, ``acc`` 0.
        ``DOT``: one beat per dot product (input beat with ``last``); ``acc`` the saturated sum as
        an ``acc_width``-bit sign-magnitude word, ``y`` all zero.

    Latency from an accepted input beat to its output beat is 2 cycles (``MUL``, ``DIV``,
    ``LUT``) or ``3 + sum_stages`` cycles (``DOT``), a cycle more with ``entry_stage``;
    one beat per cycle when ``o.ready``
    stays high. ``i.ready`` is high whenever the output register is empty or being taken (it
    follows ``o.ready`` combinationally; ``o.valid`` never depends on ``o.ready``).

    Raises
    ------
    TypeError
        If a parameter is not an integer (bools rejected), or ``tables``, ``local_book`` or
        ``entry_stage`` is not a bool.
    ValueError
        If a parameter is out of range.
    """

    def __init__(self, *, lanes=4, width=8, code_bits=2, acc_width=None, tables=True,
                 sum_stages=1, local_book=False, entry_stage=False):
        self._lanes = _check_int("Lane count", lanes, 1, 64)
        self._width = _check_int("Operand width", width, 3, 24)
        self._code_bits = _check_int("Code width", code_bits, 1, 3)
        if acc_width is None:
            acc_width = width + 8
        self._acc_width = _check_int("Accumulator width", acc_width, width, 48)
        if not isinstance(tables, bool):
            raise TypeError(f"Tables must be a bool, not {tables!r}")
        self._tables = tables
        self._sum_stages = _check_int("Sum stages", sum_stages, 1, 3)
        if not isinstance(local_book, bool):
            raise TypeError(f"Local book must be a bool, not {local_book!r}")
        self._local_book = local_book
        if not isinstance(entry_stage, bool):
            raise TypeError(f"Entry stage must be a bool, not {entry_stage!r}")
        self._entry_stage = entry_stage
        n = self._code_bits
        members = {
            "book": In(data.ArrayLayout(CodeEntry, 1 << n)),
            "op": In(DiscreteOp),
            "lut_op": In(2),
        }
        if tables:
            members.update(tbl_en=In(1), tbl_addr=In(2 + 2 * n), tbl_data=In(width))
        super().__init__({
            **members,
            "i": In(stream.Signature(data.StructLayout({
                "x": data.ArrayLayout(unsigned(width), lanes),
                "w": data.ArrayLayout(unsigned(n), lanes),
                "last": 1,
            }))),
            "o": Out(stream.Signature(data.StructLayout({
                "y": data.ArrayLayout(unsigned(width), lanes),
                "acc": unsigned(self._acc_width),
            }))),
        })

    @property
    def lanes(self):
        return self._lanes

    @property
    def width(self):
        return self._width

    @property
    def code_bits(self):
        return self._code_bits

    @property
    def acc_width(self):
        return self._acc_width

    @property
    def tables(self):
        return self._tables

    @property
    def sum_stages(self):
        return self._sum_stages

    @property
    def local_book(self):
        return self._local_book

    @property
    def entry_stage(self):
        return self._entry_stage

    def elaborate(self, platform):
        m = Module()
        L, W, n, A = self._lanes, self._width, self._code_bits, self._acc_width
        mw = W - 1
        max_mag = (1 << mw) - 1
        acc_max = (1 << (A - 1)) - 1
        op = self.op
        x, w = self.i.payload.x, self.i.payload.w

        # One enable for the whole pipeline: it moves when the output register is free or taken.
        adv = Signal()
        m.d.comb += [adv.eq(~self.o.valid | self.o.ready), self.i.ready.eq(adv)]

        # Stage 1: code book lookup, sign XOR and saturating barrel shift per lane (y1 may hold
        # a negative zero); the table read (LUT mode) happens in parallel in the memory's read
        # register.
        v1, last1, dot1 = Signal(), Signal(), Signal()
        y1 = [Signal(W, name=f"y1_{k}") for k in range(L)]
        i_valid, i_last = self.i.valid, self.i.payload.last
        if self._entry_stage:
            # Stage 0: the beat's operands, codes and book entries in registers.
            i_valid, i_last = Signal(name="v0"), Signal(name="last0")
            x0 = [Signal(W, name=f"x0_{k}") for k in range(L)]
            w0 = [Signal(n, name=f"w0_{k}") for k in range(L)]
            with m.If(adv):
                m.d.sync += [i_valid.eq(self.i.valid), i_last.eq(self.i.payload.last)]
                m.d.sync += [x0[k].eq(x[k]) for k in range(L)]
                if self._tables:
                    m.d.sync += [w0[k].eq(w[k]) for k in range(L)]
        with m.If(adv):
            # ``dot1`` marks beats taken in DOT mode, so MUL/DIV/LUT beats still in the pipeline
            # when ``op`` changes to DOT never reach the accumulator.
            m.d.sync += [v1.eq(i_valid), last1.eq(i_last), dot1.eq(op == DiscreteOp.DOT)]
        books = [self.book] * L
        if self._local_book:
            books = []
            for g in range((L + 3) // 4):
                copy = Signal.like(self.book, name=f"book_g{g}")
                load = Signal(name=f"book_load_g{g}")
                m.d.sync += load.eq(copy.as_value() != self.book.as_value())
                with m.If(load):
                    m.d.sync += copy.eq(self.book)
                books += [copy] * 4
        lut_data = []
        if self._tables:
            table = m.submodules.table = Memory(shape=unsigned(W), depth=4 << (2 * n), init=[])
            wp = table.write_port()
            m.d.comb += [wp.en.eq(self.tbl_en), wp.addr.eq(self.tbl_addr),
                         wp.data.eq(self.tbl_data)]
        for k in range(L):
            # A case statement rather than ``book[w]``: indexing a view by a signal scales the
            # index with a constant $mul, and this unit is meant to contain no multiplier cell.
            entry = Signal(CodeEntry, name=f"entry{k}")
            with m.Switch(w[k]):
                for c in range(1 << n):
                    with m.Case(c):
                        m.d.comb += entry.eq(books[k][c])
            xk, wk = x[k], w[k]
            if self._entry_stage:
                entry0 = Signal(CodeEntry, name=f"entry0_{k}")
                with m.If(adv):
                    m.d.sync += entry0.eq(entry)
                entry, xk, wk = entry0, x0[k], w0[k]
            # One right shifter serves both directions: a left shift is the bit-reversed right
            # shift of the bit-reversed magnitude, and the bits it drops are the overflow.
            mag_in = xk[:mw]
            to_left = Signal(name=f"to_left{k}")
            m.d.comb += to_left.eq(entry.direction ^ (op == DiscreteOp.DIV))
            r = Mux(to_left, Cat(*reversed(list(mag_in))), mag_in)
            shifted = Signal(mw, name=f"shifted{k}")
            m.d.comb += shifted.eq(r >> entry.shift)
            mask = Cat(*(entry.shift > j for j in range(mw)))
            ovf = (r & mask).any()
            mag = Signal(mw, name=f"mag{k}")
            m.d.comb += mag.eq(Mux(to_left, Mux(ovf, max_mag, Cat(*reversed(list(shifted)))),
                                   shifted))
            with m.If(adv):
                m.d.sync += y1[k].eq(Cat(mag, xk[mw] ^ entry.sign))
            if self._tables:
                rp = table.read_port()
                m.d.comb += [rp.en.eq(adv), rp.addr.eq(Cat(wk, xk[:n], self.lut_op))]
                lut_data.append(rp.data)
            else:
                lut_data.append(Const(0, W))

        # Stages 2 and 3 (DOT): two's complement terms, then their exact sum (with
        # ``sum_stages`` above 1, stage 3 is that many stages of partial sums).
        sum_w = W + max(L - 1, 0).bit_length()
        v2, last2, v3, last3 = Signal(), Signal(), Signal(), Signal()
        t2 = [Signal(signed(W), name=f"t2_{k}") for k in range(L)]
        sum3 = Signal(signed(sum_w))
        S = self._sum_stages
        if S > 1:
            with m.If(adv):
                for k in range(L):
                    mag = y1[k][:mw]
                    m.d.sync += t2[k].eq(Mux(y1[k][mw], -mag, mag))
            r = 1
            while r ** S < L:
                r += 1
            # Each stage's sums with the count of lane terms each covers (their width).
            level = [(t, 1) for t in t2]
            v_prev, last_prev = v2, last2
            with m.If(adv):
                m.d.sync += [v2.eq(v1 & dot1), last2.eq(last1)]
                for st in range(S):
                    nxt_level = []
                    for j in range(0, len(level), r):
                        grp = level[j:j + r]
                        terms = sum(c for _, c in grp)
                        p = sum3 if st == S - 1 else Signal(
                            signed(W + max(terms - 1, 0).bit_length()), name=f"part{st}_{j // r}")
                        m.d.sync += p.eq(sum((v for v, _ in grp[1:]), grp[0][0]))
                        nxt_level.append((p, terms))
                    level = nxt_level
                    if st == S - 1:
                        v_st, last_st = v3, last3
                    else:
                        v_st, last_st = Signal(name=f"v2_{st}"), Signal(name=f"last2_{st}")
                    m.d.sync += [v_st.eq(v_prev), last_st.eq(last_prev)]
                    v_prev, last_prev = v_st, last_st
        else:
            with m.If(adv):
                m.d.sync += [v2.eq(v1 & dot1), last2.eq(last1), v3.eq(v2), last3.eq(last2)]
                for k in range(L):
                    mag = y1[k][:mw]
                    m.d.sync += t2[k].eq(Mux(y1[k][mw], -mag, mag))
                total = t2[0]
                for t in t2[1:]:
                    total = total + t
                m.d.sync += sum3.eq(total)

        # Stage 4 (DOT): saturating accumulation. Overflow is read from the top bits of two
        # parallel sums rather than by comparators chained after the adder.
        acc = Signal(signed(A))
        nxt = Signal(signed(max(A, sum_w) + 1))
        nxt_m1 = Signal(signed(max(A, sum_w) + 1))
        m.d.comb += [nxt.eq(acc + sum3), nxt_m1.eq(acc + (sum3 - 1))]
        pos_ovf = ~nxt[-1] & nxt[A - 1:].any()
        # nxt < -acc_max iff nxt - 1 < -2**(A-1), which the top bits of nxt - 1 show.
        neg_ovf = nxt_m1[-1] & ~nxt_m1[A - 1:].all()
        sat = Signal(signed(A))
        m.d.comb += sat.eq(Mux(pos_ovf, acc_max, Mux(neg_ovf, -acc_max, nxt[:A])))
        acc_out = Signal(signed(A))
        m.d.comb += self.o.payload.acc.eq(Cat(Mux(acc_out[-1], -acc_out, acc_out)[:A - 1],
                                              acc_out[-1]))

        # The output register: stage 2 of MUL/DIV/LUT, stage 4 of DOT.
        with m.If(adv):
            with m.If(op == DiscreteOp.DOT):
                m.d.sync += [self.o.valid.eq(v3 & last3), acc_out.eq(0)]
                m.d.sync += [self.o.payload.y[k].eq(0) for k in range(L)]
                with m.If(v3):
                    m.d.sync += [acc.eq(Mux(last3, 0, sat)), acc_out.eq(sat)]
            with m.Else():
                m.d.sync += [self.o.valid.eq(v1), acc_out.eq(0)]
                for k in range(L):
                    # Zero gets sign 0 here, off stage 1's path; the DOT terms do not need it.
                    canon = Cat(y1[k][:mw], y1[k][mw] & y1[k][:mw].any())
                    m.d.sync += self.o.payload.y[k].eq(
                        Mux(op == DiscreteOp.LUT, lut_data[k], canon))
        return m
