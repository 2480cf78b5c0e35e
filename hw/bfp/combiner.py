"""Combiner of the BFP column (:class:`BlockCombiner`, shared by all lanes): step 2 of its dataflow.

The PE array's drain is shifted out one lane per cycle into a 4-stage read–align–shift–add
pipeline that updates the lane's accumulator ``(A, ea, nan)`` in a double-banked memory (owned
by :class:`~lowbit.hw.bfp.column.BFPColumn`). After the last block, when ``cfg_bias_en`` is set,
``N`` bias beats from ``i_bias`` pass through the same pipeline (exponent subtractor, bias
shifter, bias adder). Implements step 2 of :mod:`lowbit.sim.bfp_column` exactly.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from lowbit.hw.bfp.shared import _clog2

__all__ = ["BlockCombiner"]


class BlockCombiner(wiring.Component):
    """Pipeline that merges one ``(P, e)`` contribution per cycle into a lane's accumulator.

    Stages: S0 issue (memory read), S1 exponent subtractor and zero tests, S1b align decision
    and shift amount, S2 shift, S3 add and write back. The memory read port must be transparent
    to the write port when ``N`` < 5 (a lane is read again in the cycle its update is
    written). With ``pipelined=False`` S1 and S1b are combinational (the update is written two
    cycles after the read, so no collision happens for ``N`` >= 3). Pipelined with ``N >= 6``,
    two more stages (a register after the memory, the shifter in two) write the update six
    cycles after the read (``deep``: by default pipelined with ``N >= 6``; the unpipelined
    column's ``pipelined_combiner`` is not deep). Implements step 2 of
    :mod:`lowbit.sim.bfp_column` exactly.

    Members
    -------
    item : In(StructLayout)
        ``valid, idx, bank, p, e, nan, first, final``: the contribution entering S0.
    done : Out(2)
        One-cycle pulse per bank whose final item was written.
    rd_addr / rd_data / wr_*
        Ports of the accumulator memory (owned by :class:`BFPColumn`).
    """

    def __init__(self, *, lanes, pw, aw, exp_bits, frac_bits, pipelined=True, deep=None):
        self._lanes, self._pw, self._aw, self._eb, self._f = lanes, pw, aw, exp_bits, frac_bits
        self._pipelined = pipelined
        self._deep = pipelined and (lanes >= 6 if deep is None else deep)
        self.item_layout = data.StructLayout({
            "valid": 1, "idx": range(lanes), "bank": 1, "p": signed(pw),
            "e": signed(exp_bits + 1), "nan": 1, "first": 1, "final": 1})
        self.acc_layout = data.StructLayout({"a": signed(aw), "ea": signed(exp_bits + 1),
                                             "nan": 1})
        super().__init__({
            "item": In(self.item_layout),
            "done": Out(2),
            "rd_addr": Out(_clog2(lanes) + 1),
            "rd_data": In(self.acc_layout),
            "wr_en": Out(1),
            "wr_addr": Out(_clog2(lanes) + 1),
            "wr_data": Out(self.acc_layout),
        })

    @property
    def write_delay(self):
        """Cycles from an item's memory read (S0) to its update's write (S3): 2 unpipelined,
        4 pipelined, 6 pipelined with ``N >= 6``."""
        if not self._pipelined:
            return 2
        return 6 if self._deep else 4

    def elaborate(self, platform):
        m = Module()
        if self._deep:
            self._elaborate_deep(m)
            return m
        aw, eb, f = self._aw, self._eb, self._f
        it = self.item
        # Without pipelining S1 and S1b are combinational: S0 -> S1..S2 -> S3.
        merged = m.d.sync if self._pipelined else m.d.comb
        m.d.comb += self.rd_addr.eq(Cat(it.idx, it.bank))

        s1 = Signal(self.item_layout)
        m.d.sync += s1.eq(it)

        # S1: operands from memory; the exponent subtractor and the zero tests.
        t = Signal(data.StructLayout({
            "valid": 1, "idx": range(self._lanes), "bank": 1, "final": 1, "nan": 1,
            "e": signed(eb + 1), "ea": signed(eb + 1), "d": signed(eb + 3), "a": signed(aw),
            "c": signed(aw), "a_zero": 1, "p_zero": 1}))
        # A first contribution counts as one into a zero accumulator (`a_zero`): the stored
        # value is never used then, so it is not forced to 0 (26 LUTs).
        merged += [
            t.valid.eq(s1.valid), t.idx.eq(s1.idx), t.bank.eq(s1.bank), t.final.eq(s1.final),
            t.nan.eq((~s1.first & self.rd_data.nan) | s1.nan),
            t.e.eq(s1.e), t.ea.eq(self.rd_data.ea), t.d.eq(s1.e - self.rd_data.ea),
            t.a.eq(self.rd_data.a), t.c.eq(s1.p << f),
            t.a_zero.eq(s1.first | (self.rd_data.a == 0)), t.p_zero.eq(s1.p == 0),
        ]

        # S1b: which operand to align, and by how much (clamped to AW - 1). Three cases, not
        # four: with P = 0 the contribution c is 0, so aligning it to the accumulator (the
        # last case, whatever its shift) keeps A and ea as they are.
        s2 = Signal(data.StructLayout({
            "valid": 1, "idx": range(self._lanes), "bank": 1, "final": 1, "nan": 1,
            "ea": signed(eb + 1), "sh": signed(aw), "amt": range(aw), "add": signed(aw)}))
        merged += [
            s2.valid.eq(t.valid), s2.idx.eq(t.idx), s2.bank.eq(t.bank),
            s2.final.eq(t.final), s2.nan.eq(t.nan),
        ]
        with m.If(t.a_zero):
            merged += [s2.sh.eq(t.c), s2.amt.eq(0), s2.add.eq(0), s2.ea.eq(t.e)]
        with m.Elif((t.d > 0) & ~t.p_zero):
            merged += [s2.sh.eq(t.a), s2.add.eq(t.c), s2.ea.eq(t.e),
                       s2.amt.eq(Mux(t.d >= aw - 1, aw - 1, t.d))]
        with m.Else():
            merged += [s2.sh.eq(t.c), s2.add.eq(t.a), s2.ea.eq(t.ea),
                       s2.amt.eq(Mux(t.d <= 1 - aw, aw - 1, -t.d))]

        # S2: the alignment (bias) shifter.
        s3 = Signal(data.StructLayout({
            "valid": 1, "idx": range(self._lanes), "bank": 1, "final": 1, "nan": 1,
            "ea": signed(eb + 1), "sh": signed(aw), "add": signed(aw)}))
        m.d.sync += [
            s3.valid.eq(s2.valid), s3.idx.eq(s2.idx), s3.bank.eq(s2.bank),
            s3.final.eq(s2.final), s3.nan.eq(s2.nan), s3.ea.eq(s2.ea), s3.add.eq(s2.add),
            s3.sh.eq(s2.sh >> s2.amt),
        ]

        self._write_back(m, s3)
        return m

    def _elaborate_deep(self, m):
        # N >= 6 lanes leave room for two more stages before a lane is read again: Q (the
        # memory output, registered, with zero tests per 4-bit group) and the shifter split
        # in two (S2a by multiples of 4, S2b by 0..3). S1 computes, besides the exponent
        # difference, its negation and the clamp and sign tests as subtraction sign bits, so
        # that S1b only selects.
        aw, eb, f, pw = self._aw, self._eb, self._f, self._pw
        it = self.item
        m.d.comb += self.rd_addr.eq(Cat(it.idx, it.bank))
        ew = max(eb, aw.bit_length()) + 2
        ctl = {"valid": 1, "idx": range(self._lanes), "bank": 1, "final": 1, "nan": 1}

        s1 = Signal(self.item_layout)
        m.d.sync += s1.eq(it)

        # Q: the operands from memory, each bit one LUT from the memory's output (an ECP5
        # DP16KD without its output register takes 5.8 ns from clock to data): the zero
        # tests per 4-bit group of the stored value, and `first` beside them.
        ngz = (aw + 3) // 4
        q = Signal(data.StructLayout({
            **ctl, "e": signed(eb + 1), "e_lo": signed(ew), "e_hi": signed(ew),
            "ea": signed(eb + 1), "a": signed(aw), "p": signed(pw), "zg": ngz, "first": 1}))
        rd_a = self.rd_data.a
        m.d.sync += [
            q.valid.eq(s1.valid), q.idx.eq(s1.idx), q.bank.eq(s1.bank), q.final.eq(s1.final),
            q.nan.eq((~s1.first & self.rd_data.nan) | s1.nan),
            q.e.eq(s1.e), q.e_lo.eq(s1.e - (aw - 2)), q.e_hi.eq(s1.e + (aw - 2)),
            q.ea.eq(Mux(s1.first, 0, self.rd_data.ea)), q.a.eq(Mux(s1.first, 0, rd_a)),
            q.p.eq(s1.p), q.zg.eq(Cat(rd_a[i:i + 4] == 0 for i in range(0, aw, 4))),
            q.first.eq(s1.first),
        ]

        # S1: d = e - ea and -d, d > 0, d >= AW - 1, d <= 1 - AW, and the zero tests.
        t = Signal(data.StructLayout({
            **ctl, "e": signed(eb + 1), "ea": signed(eb + 1), "d": signed(eb + 3),
            "nd": signed(eb + 3), "ge": 1, "le": 1, "a": signed(aw), "c": signed(aw),
            "a_zero": 1, "p_zero": 1}))
        m.d.sync += [
            t.valid.eq(q.valid), t.idx.eq(q.idx), t.bank.eq(q.bank), t.final.eq(q.final),
            t.nan.eq(q.nan), t.e.eq(q.e), t.ea.eq(q.ea),
            t.d.eq(q.e - q.ea), t.nd.eq(q.ea - q.e),
            t.ge.eq((q.ea - q.e_lo)[-1]), t.le.eq((q.e_hi - q.ea)[-1]),
            t.a.eq(q.a), t.c.eq(q.p << f), t.a_zero.eq(q.first | q.zg.all()),
            t.p_zero.eq(q.p == 0),
        ]

        # S1b: which operand to align, and by how much (clamped to AW - 1).
        s2 = Signal(data.StructLayout({
            **ctl, "ea": signed(eb + 1), "sh": signed(aw), "amt": range(aw),
            "add": signed(aw)}))
        m.d.sync += [s2.valid.eq(t.valid), s2.idx.eq(t.idx), s2.bank.eq(t.bank),
                     s2.final.eq(t.final), s2.nan.eq(t.nan)]
        with m.If(t.a_zero):
            m.d.sync += [s2.sh.eq(t.c), s2.amt.eq(0), s2.add.eq(0), s2.ea.eq(t.e)]
        with m.Elif(t.p_zero):
            m.d.sync += [s2.sh.eq(t.a), s2.amt.eq(0), s2.add.eq(0), s2.ea.eq(t.ea)]
        with m.Elif(t.nd[-1]):          # d > 0
            m.d.sync += [s2.sh.eq(t.a), s2.add.eq(t.c), s2.ea.eq(t.e),
                         s2.amt.eq(Mux(t.ge, aw - 1, t.d))]
        with m.Else():
            m.d.sync += [s2.sh.eq(t.c), s2.add.eq(t.a), s2.ea.eq(t.ea),
                         s2.amt.eq(Mux(t.le, aw - 1, t.nd))]

        # S2a, S2b: the alignment (bias) shifter.
        s2b = Signal(data.StructLayout({
            **ctl, "ea": signed(eb + 1), "sh": signed(aw), "lo": 2, "add": signed(aw)}))
        m.d.sync += [
            s2b.valid.eq(s2.valid), s2b.idx.eq(s2.idx), s2b.bank.eq(s2.bank),
            s2b.final.eq(s2.final), s2b.nan.eq(s2.nan), s2b.ea.eq(s2.ea), s2b.add.eq(s2.add),
            s2b.sh.eq(s2.sh >> Cat(Const(0, 2), s2.amt[2:])), s2b.lo.eq(s2.amt[:2]),
        ]
        s3 = Signal(data.StructLayout({
            **ctl, "ea": signed(eb + 1), "sh": signed(aw), "add": signed(aw)}))
        m.d.sync += [
            s3.valid.eq(s2b.valid), s3.idx.eq(s2b.idx), s3.bank.eq(s2b.bank),
            s3.final.eq(s2b.final), s3.nan.eq(s2b.nan), s3.ea.eq(s2b.ea), s3.add.eq(s2b.add),
            s3.sh.eq(s2b.sh >> s2b.lo),
        ]

        self._write_back(m, s3)

    def _write_back(self, m, s3):
        # S3: the (bias) adder and write-back.
        m.d.comb += [
            self.wr_en.eq(s3.valid),
            self.wr_addr.eq(Cat(s3.idx, s3.bank)),
            self.wr_data.a.eq(s3.sh + s3.add),
            self.wr_data.ea.eq(s3.ea),
            self.wr_data.nan.eq(s3.nan),
        ]
        last = s3.valid & s3.final & (s3.idx == self._lanes - 1)
        m.d.comb += self.done.eq(Mux(last, Mux(s3.bank, 0b10, 0b01), 0))
