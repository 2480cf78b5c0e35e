"""Block-floating-point systolic MAC column (DESIGN §3.2, seed 002 Figs. 1, 4, 5).

The column computes ``y = M · x (+ b)`` for BFP operands with ``N`` processing elements (one per
output row). Its arithmetic — exact block products, exponent adder, cross-block accumulation with
fraction guard bits, bias path, output exponent selector and output mantissa shifter — is
specified in :mod:`lowbit.sim.bfp_column`, whose :class:`~lowbit.sim.bfp_column.ColumnModel` it
matches bit
for bit. ``docs/bfp.md`` describes the architecture.

Dataflow
--------
1. **PE array** (:class:`BFPLanes`): each beat takes one weight column ``M[:, j]`` (``N``
   mantissas and ``N`` row exponents) from ``i_w`` and the element ``x[j]`` (mantissa and block
   exponent) from ``i_x``, both in the same cycle. The products (``lowbit.hw.mult``, registered) are
   summed exactly per block; on the last beat of each block the ``N`` block sums and the exponent
   sums ``e3 = eM + ex`` (taken from that beat) move into a drain register.
2. **Combiner** (:class:`BlockCombiner`, shared by all lanes): the drain is shifted out one lane
   per cycle into a 4-stage read–align–shift–add pipeline that updates the lane's accumulator
   ``(A, ea, nan)`` in a double-banked memory. After the last block, when ``cfg_bias_en`` is
   set, ``N`` bias beats from ``i_bias`` pass through the same pipeline (exponent subtractor,
   bias shifter, bias adder).
3. **Output unit** (:class:`OutputUnit`): scans the finished bank for the largest
   ``bitlen(|A|) + ea``, selects ``e4`` (max rule, fixed, or predicted by the
   :class:`ExponentPredictor` from the statistics of earlier products, with the max rule as the
   fallback on overflow/underflow), then emits one output mantissa per beat through the output
   mantissa shifter, rounding and saturation and an output FIFO onto ``o``. In stochastic mode
   it takes one ``i_rand`` beat per output element. The next product is accumulated into the
   other bank meanwhile.
"""

import contextlib
from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .common import Rounding
from .common import check_int as _check_int
from .mult import MULT_STYLES, MultiplierArray

__all__ = ["BFPColumn", "BFPLanes", "BlockCombiner", "OutputUnit", "ExponentPredictor",
           "ExpMode", "column_widths", "predictor_widths"]


class ExpMode:
    """Values of the ``cfg_exp_mode`` port (the golden model's ``exp_mode`` names).

    Code 3 behaves as ``MAX``.
    """
    MAX = 0
    FIXED = 1
    PREDICTED = 2


#: Depth of the output unit's FIFO: covers the emit pipeline's round trip (issue -> FIFO ->
#: accepted -> credit), so a ready consumer takes one element per cycle.
_EMIT_FIFO_DEPTH = 16


def _clog2(n):
    return (n - 1).bit_length()


#: Lanes per copy of the PE array's and drain's control flip-flops (pipelined).
_GROUP = 4


def _groups(lanes):
    return (lanes + _GROUP - 1) // _GROUP


def _leading_one(v):
    """``(nonzero, index of the highest set bit)`` of ``v`` as a log-depth tree."""
    v = Value.cast(v)
    size = 1 << _clog2(len(v))
    v = Cat(v, Const(0, size - len(v)))

    def tree(bits):
        if len(bits) == 1:
            return bits[0], Const(0, 0)
        half = len(bits) // 2
        nz_hi, i_hi = tree(bits[half:])
        nz_lo, i_lo = tree(bits[:half])
        return nz_hi | nz_lo, Cat(Mux(nz_hi, i_hi, i_lo), nz_hi)

    return tree(v)


def column_widths(*, block, width, max_blocks, frac_bits):
    """``(pw, aw)``: widths of the exact block sum and of the accumulator (as in the model)."""
    pw = 2 * width + _clog2(block)
    return pw, pw + frac_bits + _clog2(max_blocks + 2)


def predictor_widths(*, width, exp_bits, stat_shift):
    """``(fs, sw, (eu_min, eu_max))``: fraction bits and width of the statistics registers,
    and the range of the predicted exponent register (see :class:`ExponentPredictor`)."""
    fs = stat_shift + 2
    e_max = (1 << (exp_bits - 1)) - 1
    return fs, width - 1 + fs, (-e_max - (width - 2 + fs), e_max + width + 1)


def _elem_layout(width, exp_bits):
    return data.StructLayout({"m": signed(width), "e": signed(exp_bits)})


class BFPLanes(wiring.Component):
    """The PE array: multipliers, exact per-block sums, exponent adders and the drain register.

    Parameters
    ----------
    lanes, block, width, exp_bits, mult, sim_model, pipelined
        As for :class:`BFPColumn` (``pipelined=False``: no fabric register R after the
        multipliers).

    Members
    -------
    i_w : In(stream.Signature(StructLayout({"m": Array(signed(W), N), "e": Array(signed(E), N)})))
    i_x : In(stream.Signature(StructLayout({"m": signed(W), "e": signed(E)})))
    head : Out(StructLayout({"p": signed(PW), "e": signed(E + 1), "nan": 1}))
        The drain's head lane (valid while ``count > 0``).
    count : Out(range(N + 1))
        Lanes left in the drain.
    nonempty : Out(1)
        ``count != 0``, as a register.
    pop : In(1)
        Shift the drain by one lane this cycle (only while ``count > 0``). Once a pass has
        started, the owner pops one lane every cycle until the drain is empty.
    pop_groups : In(ceil(N / 4))
        ``pipelined`` only: copies of ``pop`` (each a separate flip-flop in the owner), one per
        group of four lanes, which shift that group's drain registers.
    loading : Out(1)
        ``pipelined`` only: a block moves into the drain this cycle (``count`` becomes ``N``).
    last_one : Out(1)
        ``pipelined`` only: ``count == 1``.

    With ``pipelined``, the wide enables (the stall ``hold``, the accumulators' enable, the
    drain's load) are flip-flops computed a cycle ahead, one copy per group of four lanes (each
    copy's next state reads its own output, so synthesis does not merge the copies), except,
    on iCE40 styles, the accumulators' enable: one copy for all lanes, a global network after
    placement (with ``"mult18x18d"`` each group's copy). The vector's NaN test is kept once per
    group too and ORed into each lane's at the drain's load.
    """

    def __init__(self, *, lanes, block, width, exp_bits, mult, sim_model, pipelined=True):
        self._lanes, self._block, self._width, self._exp_bits = lanes, block, width, exp_bits
        self._pipelined = pipelined
        self._pw = 2 * width + _clog2(block)
        self._mult = MultiplierArray(lanes=lanes, width=width, style=mult, sim_model=sim_model)
        self._mult_style = mult
        super().__init__({
            "i_w": In(stream.Signature(data.StructLayout({
                "m": data.ArrayLayout(signed(width), lanes),
                "e": data.ArrayLayout(signed(exp_bits), lanes)}))),
            "i_x": In(stream.Signature(_elem_layout(width, exp_bits))),
            "head": Out(data.StructLayout({"p": signed(self._pw), "e": signed(exp_bits + 1),
                                           "nan": 1})),
            "count": Out(range(lanes + 1)),
            "nonempty": Out(1),
            "pop": In(1),
            **({"pop_groups": In(_groups(lanes)), "loading": Out(1), "last_one": Out(1)}
               if pipelined else {}),
        })

    def elaborate(self, platform):
        m = Module()
        n, pw, eb = self._lanes, self._pw, self._exp_bits
        nan_code = -(1 << (eb - 1))
        m.submodules.mult = mult = self._mult

        hold = Signal()
        fire = Signal()
        m.d.comb += [
            fire.eq(self.i_w.valid & self.i_x.valid & ~hold),
            self.i_w.ready.eq(self.i_x.valid & ~hold),
            self.i_x.ready.eq(self.i_w.valid & ~hold),
            mult.en.eq(fire),
        ]
        for i in range(n):
            m.d.comb += [mult.a[i].eq(self.i_w.payload.m[i]), mult.b[i].eq(self.i_x.payload.m)]

        if self._pipelined:
            self._elaborate_pipelined(m, fire, hold)
            return m
        # Stage M: the multipliers' product registers, with the exponent adders beside them.
        beat = Signal(range(self._block))
        m_valid = Signal()
        m_last = Signal()
        m_e3 = [Signal(signed(eb + 1), name=f"m_e3_{i}") for i in range(n)]
        m_nan = [Signal(name=f"m_nan_{i}") for i in range(n)]
        with m.If(~hold):
            m.d.sync += [m_valid.eq(fire), m_last.eq(fire & (beat == self._block - 1))]
        with m.If(fire):
            m.d.sync += beat.eq(Mux(beat == self._block - 1, 0, beat + 1))
            x_nan = self.i_x.payload.e == nan_code
            for i in range(n):
                we = self.i_w.payload.e[i]
                m.d.sync += [m_e3[i].eq(we + self.i_x.payload.e),
                             m_nan[i].eq(x_nan | (we == nan_code))]
        # Stage R: a fabric register after the hard multipliers (their outputs route slowly);
        # without pipelining, stage M itself.
        p_valid = Signal()
        p_last = Signal()
        prod = [Signal(signed(2 * self._width), name=f"prod{i}") for i in range(n)]
        e3 = [Signal(signed(eb + 1), name=f"e3_{i}") for i in range(n)]
        nan = [Signal(name=f"nan_{i}") for i in range(n)]
        stage_r = [p_valid.eq(m_valid), p_last.eq(m_last)]
        for i in range(n):
            stage_r += [prod[i].eq(mult.p[i]), e3[i].eq(m_e3[i]), nan[i].eq(m_nan[i])]
        if self._pipelined:
            with m.If(~hold):
                m.d.sync += stage_r
        else:
            m.d.comb += stage_r

        # The drain: N lanes of (block sum, e3, nan), shifted out towards lane 0.
        d_p = [Signal(signed(pw), name=f"d_p{i}") for i in range(n)]
        d_e = [Signal(signed(eb + 1), name=f"d_e{i}") for i in range(n)]
        d_nan = [Signal(name=f"d_nan{i}") for i in range(n)]
        acc = [Signal(signed(pw), name=f"acc{i}") for i in range(n)]
        can_load = Signal()
        m.d.comb += [
            self.head.p.eq(d_p[0]), self.head.e.eq(d_e[0]), self.head.nan.eq(d_nan[0]),
        ]
        # A block may load while count <= 1 (count == 1 only happens mid-pass, when the last
        # lane is popped this cycle). Kept as a register: it gates the whole PE pipeline.
        low = Signal(init=1)
        m.d.comb += can_load.eq(low)
        # `hold` (= p_valid & p_last & ~low) is computed one cycle ahead into a register: it
        # fans out to every PE register's enable.
        hold_r = Signal()
        low_next = Signal()
        m.d.comb += [
            low_next.eq(low),
            hold.eq(hold_r),
        ]
        with m.If(self.pop & self.nonempty):
            m.d.comb += low_next.eq(self.count <= 2)
        with m.If(p_valid & ~hold & p_last):
            m.d.comb += low_next.eq(n <= 1)
        # Next cycle the last stage holds a block's last beat: it does now (held), or the stage
        # before moves one in.
        if self._pipelined:
            m.d.sync += hold_r.eq((hold | (m_valid & m_last)) & ~low_next)
        else:
            m.d.sync += hold_r.eq((hold | (fire & (beat == self._block - 1))) & ~low_next)
        with m.If(self.pop & self.nonempty):
            m.d.sync += [self.count.eq(self.count - 1), self.nonempty.eq(self.count != 1),
                         low.eq(self.count <= 2)]
            for i in range(n - 1):
                m.d.sync += [d_p[i].eq(d_p[i + 1]), d_e[i].eq(d_e[i + 1]),
                             d_nan[i].eq(d_nan[i + 1])]
        with m.If(p_valid & ~hold):
            with m.If(p_last):
                m.d.sync += [self.count.eq(n), self.nonempty.eq(1), low.eq(n <= 1)]
                for i in range(n):
                    m.d.sync += [d_p[i].eq(acc[i] + prod[i]), d_e[i].eq(e3[i]),
                                 d_nan[i].eq(nan[i]), acc[i].eq(0)]
            with m.Else():
                for i in range(n):
                    m.d.sync += acc[i].eq(acc[i] + prod[i])
        return m

    def _elaborate_pipelined(self, m, fire, hold):
        n, pw, eb, w = self._lanes, self._pw, self._exp_bits, self._width
        nan_code = -(1 << (eb - 1))
        mult = self._mult
        ng = _groups(n)
        grp = [i // _GROUP for i in range(n)]

        # Stage M: the multipliers' product registers, with the exponent adders beside them.
        beat = Signal(range(self._block))
        m_valid = Signal()
        m_last = Signal()
        m_e3 = [Signal(signed(eb + 1), name=f"m_e3_{i}") for i in range(n)]
        m_nan = [Signal(name=f"m_nan_{i}") for i in range(n)]
        # The control copies, per group g, all next-state registers: pv / pl (stage R holds a
        # beat / a block's last beat), full (the accumulators hold a whole block sum), z (the
        # next beat starts a sum), hold (the stall: full while the drain is busy), en (stage R
        # moves into the accumulators) and load (the accumulators move into the drain). Copy 0
        # of en and z drives every accumulator (see below).
        ctl = {nm: [Signal(name=f"{nm}_g{g}", init=nm == "z") for g in range(ng)]
               for nm in ("pv", "pl", "full", "z", "hold", "en", "load")}
        hold_g, en_g, load_g, z_g = ctl["hold"], ctl["en"], ctl["load"], ctl["z"]
        beat_last = Signal()    # beat == B - 1, a register
        with m.If(~hold):
            m.d.sync += [m_valid.eq(fire), m_last.eq(fire & beat_last)]
        with m.If(fire):
            m.d.sync += [beat.eq(Mux(beat_last, 0, beat + 1)),
                         beat_last.eq(beat == self._block - 2)]
        # The exponent adders take only a block's last beat: the sums stay in stage M until
        # the drain loads them, three cycles later at the earliest (the next last beat comes
        # B beats later, and stage M is stalled while a block sum waits).
        # While the next beat is a last one they take every cycle's inputs (the fired beat's
        # come last: `beat_last` falls with the fire), so the enable is two flip-flops.
        # The vector's NaN test is kept once per group of lanes and ORed in at the drain's
        # load: one test of `i_x` fanned out to every lane was the 64-lane column's
        # critical path.
        x_nan = self.i_x.payload.e == nan_code
        m_xnan = [Signal(name=f"m_xnan_g{g}") for g in range(ng)]
        for g in range(ng):
            with m.If(~hold_g[g] & beat_last):
                m.d.sync += m_xnan[g].eq(x_nan)
        for i in range(n):
            with m.If(~hold_g[grp[i]] & beat_last):
                we = self.i_w.payload.e[i]
                m.d.sync += [m_e3[i].eq(we + self.i_x.payload.e), m_nan[i].eq(we == nan_code)]
        # Stage R: a fabric register after the hard multipliers (their outputs route slowly).
        prod = [Signal(signed(2 * w), name=f"prod{i}") for i in range(n)]
        for i in range(n):
            with m.If(~hold_g[grp[i]]):
                m.d.sync += prod[i].eq(mult.p[i])
        if self._block < 3:
            # With B = 2 the next last beat reaches stage M before the drain loads: keep the
            # exponent sums in stage R too.
            r_e3 = [Signal(signed(eb + 1), name=f"r_e3_{i}") for i in range(n)]
            r_nan = [Signal(name=f"r_nan_{i}") for i in range(n)]
            r_xnan = [Signal(name=f"r_xnan_g{g}") for g in range(ng)]
            for g in range(ng):
                with m.If(~hold_g[g] & m_last):
                    m.d.sync += r_xnan[g].eq(m_xnan[g])
            for i in range(n):
                with m.If(~hold_g[grp[i]] & m_last):
                    m.d.sync += [r_e3[i].eq(m_e3[i]), r_nan[i].eq(m_nan[i])]
            m_e3, m_nan, m_xnan = r_e3, r_nan, r_xnan

        # The drain: N lanes of (block sum, e3, nan), shifted out towards lane 0.
        d_p = [Signal(signed(pw), name=f"d_p{i}") for i in range(n)]
        d_e = [Signal(signed(eb + 1), name=f"d_e{i}") for i in range(n)]
        d_nan = [Signal(name=f"d_nan{i}") for i in range(n)]
        acc = [Signal(signed(pw), name=f"acc{i}") for i in range(n)]
        # The lanes left, also in thermometer code (bit i: count > i) for one-LUT tests.
        therm = Signal(n)
        m.d.comb += [
            self.head.p.eq(d_p[0]), self.head.e.eq(d_e[0]), self.head.nan.eq(d_nan[0]),
            hold.eq(hold_g[0]),
            self.loading.eq(load_g[0]),
            self.nonempty.eq(therm[0]),
            self.last_one.eq(therm[0] & ~therm[1] if n > 1 else therm[0]),
        ]
        # A block may load while count <= 1 (count == 1 only happens mid-pass, when the last
        # lane is popped this cycle). A pop implies count > 0.
        low_next = Signal()
        m.d.comb += low_next.eq(Mux(load_g[0], n <= 1,
                                    Mux(self.pop, ~therm[2] if n > 2 else 1,
                                        ~therm[1] if n > 1 else 1)))
        with m.If(self.pop):
            m.d.sync += therm.eq(therm >> 1)
        with m.If(load_g[0]):
            m.d.sync += therm.eq(-1)
        # A whole block sum waits in the accumulators until the drain takes it; meanwhile
        # stages M and R stall. Each copy's next state reads its own flip-flops.
        for g in range(ng):
            pv, pl, full, z, hold_c, en, load = (ctl[nm][g] for nm in
                                                  ("pv", "pl", "full", "z", "hold", "en", "load"))
            pv_n = Mux(hold_c, pv, m_valid)
            full_n = Mux(en, pl, Mux(load, 0, full))
            hold_n = full_n & ~low_next
            m.d.sync += [
                pv.eq(pv_n), pl.eq(Mux(hold_c, pl, m_last)), full.eq(full_n),
                z.eq(Mux(en, pl, Mux(load, 1, z))),
                hold_c.eq(hold_n), load.eq(full_n & low_next), en.eq(pv_n & ~hold_n),
            ]
        with m.If(self.pop):
            m.d.sync += self.count.eq(self.count - 1)
        with m.If(load_g[0]):
            m.d.sync += self.count.eq(n)
        for i in range(n):
            g = grp[i]
            if i < n - 1:
                with m.If(self.pop_groups[g]):
                    m.d.sync += [d_p[i].eq(d_p[i + 1]), d_e[i].eq(d_e[i + 1]),
                                 d_nan[i].eq(d_nan[i + 1])]
            with m.If(load_g[g]):
                m.d.sync += [d_p[i].eq(acc[i]), d_e[i].eq(m_e3[i]),
                             d_nan[i].eq(m_nan[i] | m_xnan[g])]
            # iCE40: one enable for every accumulator. Its wide fan-out makes nextpnr put it
            # on a global network, which keeps each accumulator's carry chain (LUTs of four
            # inputs with their flip-flops) within a logic tile's 32 local inputs, so
            # unsplit. ECP5 (MULT18X18D) has no such limit and nextpnr-ecp5 keeps the enable
            # in general routing, where one copy for 64 lanes took 6-9 ns: a copy per group.
            c = g if self._mult_style == "mult18x18d" else 0
            with m.If(en_g[c]):
                m.d.sync += acc[i].eq(Mux(z_g[c], prod[i], acc[i] + prod[i]))


class BlockCombiner(wiring.Component):
    """Pipeline that merges one ``(P, e)`` contribution per cycle into a lane's accumulator.

    Stages: S0 issue (memory read), S1 exponent subtractor and zero tests, S1b align decision
    and shift amount, S2 shift, S3 add and write back. The memory read port must be transparent
    to the write port when ``N`` < 5 (a lane is read again in the cycle its update is
    written). With ``pipelined=False`` S1 and S1b are combinational (the update is written two
    cycles after the read, so no collision happens for ``N`` >= 3). Pipelined with ``N >= 6``,
    two more stages (a register after the memory, the shifter in two) write the update six
    cycles after the read. Implements step 2 of :mod:`lowbit.sim.bfp_column` exactly.

    Members
    -------
    item : In(StructLayout)
        ``valid, idx, bank, p, e, nan, first, final``: the contribution entering S0.
    done : Out(2)
        One-cycle pulse per bank whose final item was written.
    rd_addr / rd_data / wr_*
        Ports of the accumulator memory (owned by :class:`BFPColumn`).
    """

    def __init__(self, *, lanes, pw, aw, exp_bits, frac_bits, pipelined=True):
        self._lanes, self._pw, self._aw, self._eb, self._f = lanes, pw, aw, exp_bits, frac_bits
        self._pipelined = pipelined
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

    def elaborate(self, platform):
        m = Module()
        if self._pipelined and self._lanes >= 6:
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
        a = Mux(s1.first, 0, self.rd_data.a)
        ea = Mux(s1.first, 0, self.rd_data.ea)
        merged += [
            t.valid.eq(s1.valid), t.idx.eq(s1.idx), t.bank.eq(s1.bank), t.final.eq(s1.final),
            t.nan.eq((~s1.first & self.rd_data.nan) | s1.nan),
            t.e.eq(s1.e), t.ea.eq(ea), t.d.eq(s1.e - ea), t.a.eq(a), t.c.eq(s1.p << f),
            t.a_zero.eq(a == 0), t.p_zero.eq(s1.p == 0),
        ]

        # S1b: which operand to align, and by how much (clamped to AW - 1).
        s2 = Signal(data.StructLayout({
            "valid": 1, "idx": range(self._lanes), "bank": 1, "final": 1, "nan": 1,
            "ea": signed(eb + 1), "sh": signed(aw), "amt": range(aw), "add": signed(aw)}))
        merged += [
            s2.valid.eq(t.valid), s2.idx.eq(t.idx), s2.bank.eq(t.bank),
            s2.final.eq(t.final), s2.nan.eq(t.nan),
        ]
        with m.If(t.a_zero):
            merged += [s2.sh.eq(t.c), s2.amt.eq(0), s2.add.eq(0), s2.ea.eq(t.e)]
        with m.Elif(t.p_zero):
            merged += [s2.sh.eq(t.a), s2.amt.eq(0), s2.add.eq(0), s2.ea.eq(t.ea)]
        with m.Elif(t.d > 0):
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


class _FSM:
    """An Amaranth FSM behind the interface of :class:`_OneHotFSM`."""

    def __init__(self, m):
        self._m = m
        self._fsm = m.FSM()

    def __enter__(self):
        return self._fsm.__enter__()

    def __exit__(self, *exc):
        return self._fsm.__exit__(*exc)

    def state(self, name):
        return self._m.State(name)

    def goto(self, name):
        self._m.next = name


class _OneHotFSM:
    """A state machine with one flip-flop per state (the first state is the initial one)."""

    def __init__(self, m, names):
        self._m = m
        self._st = {nm: Signal(name=f"st_{nm.lower()}", init=i == 0)
                    for i, nm in enumerate(names)}
        self._cur = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    @contextlib.contextmanager
    def state(self, name):
        self._cur = name
        with self._m.If(self._st[name]):
            yield

    def goto(self, name):
        self._m.d.sync += [self._st[self._cur].eq(0), self._st[name].eq(1)]


class OutputUnit(wiring.Component):
    """Output exponent selector and output mantissa shifter; one output element per beat.

    A scan pass reads the bank's ``N`` accumulators (memory read, ``|A|``, two-stage
    leading-one detector, ``+ ea``, running maximum); three more cycles select ``e4`` (max,
    fixed, or the :class:`ExponentPredictor`'s prediction checked against the max rule's
    overflow/underflow window) and clamp it. The emit pass is a pipeline (memory read, shift
    amount, clamps, coarse and fine barrel shift with sticky bits, rounding decision,
    increment, saturation) into an output FIFO; it never stalls: an element is issued only
    with a FIFO credit (and, in stochastic rounding, an ``i_rand`` beat, which travels with
    the element). One right shifter serves both shift directions. ``pipelined=False`` folds
    the stages marked so in :meth:`elaborate` into their successors; ``stochastic=False``
    leaves the random-number path out and keeps one fraction bit. Pipelined, the memory's
    output goes into a register before any logic (stage Q, shared by both passes), ``|A|``
    takes two stages, the rounding decision, narrowing and saturation three more (values
    beyond ``±2^W`` travel as flags into the saturation), the clamp's compares are taken a
    state before its choice, the state register is one-hot and ``finish`` comes a cycle after
    the last acceptance.

    Members
    -------
    start : In(1)
        Pulse: the bank ``bank`` holds a finished product.
    bank : In(1)
    busy : Out(1)
    finish : Out(1)
        One-cycle pulse when the last element of the bank was accepted.
    rd_addr / rd_en / rd_data
        Read port of the accumulator memory.
    i_rand, o : streams; cfg_*, pred_clear : configuration (see :class:`BFPColumn`).
    """

    def __init__(self, *, lanes, aw, width, exp_bits, frac_bits, rand_bits, acc_layout,
                 stat_shift=4, predictor=True, stochastic=True, pipelined=True):
        self._lanes, self._aw, self._w, self._eb = lanes, aw, width, exp_bits
        self._f, self._r, self._stat_shift = frac_bits, rand_bits, stat_shift
        self._predictor, self._stochastic = predictor, stochastic
        self._pipelined = pipelined
        super().__init__({
            "start": In(1),
            "bank": In(1),
            "busy": Out(1),
            "finish": Out(1),
            "rd_addr": Out(_clog2(lanes) + 1),
            "rd_en": Out(1),
            "rd_data": In(acc_layout),
            "i_rand": In(stream.Signature(rand_bits)),
            "o": Out(stream.Signature(_elem_layout(width, exp_bits))),
            "cfg_width": In(range(width + 1)),
            "cfg_rounding": In(Rounding),
            "cfg_exp_mode": In(2),
            "cfg_fixed_exp": In(signed(exp_bits)),
            "cfg_pred_k": In(3, init=3),
            "cfg_pred_margin": In(3, init=2),
            "pred_clear": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        n, aw, w, eb, f = self._lanes, self._aw, self._w, self._eb, self._f
        # Nearest and toward-zero rounding need one fraction bit beside the sticky bit; only
        # stochastic rounding looks at R of them.
        rr = self._r if self._stochastic else 1
        # Without pipelining, the stages marked so below are combinational.
        merged = m.d.sync if self._pipelined else m.d.comb
        if self._predictor:
            m.submodules.pred = pred = ExponentPredictor(width=w, exp_bits=eb,
                                                         stat_shift=self._stat_shift)
        else:
            # No predictor: its outputs stay 0 (never usable, never busy), so the predicted
            # mode is the max rule; its inputs are left unconnected.
            pred = SimpleNamespace(**{name: Signal(shape, name=f"pred_{name}") for name, shape in (
                ("clear", 1), ("begin", 1), ("restart", 1), ("e4", signed(eb)), ("width", 8),
                ("k", 3), ("sample_valid", 1), ("sample", signed(w)), ("commit", 1),
                ("busy", 1), ("usable", 1), ("unit_exp", signed(eb)))})
        m.d.comb += [pred.sample_valid.eq(self.o.valid & self.o.ready),
                     pred.sample.eq(self.o.payload.m)]
        m.d.sync += pred.commit.eq(self.finish)
        # A clear request waits for the next exponent selection.
        clear_req = Signal()
        with m.If(self.pred_clear):
            m.d.sync += clear_req.eq(1)
        e_max = (1 << (eb - 1)) - 1
        nan_code = -(1 << (eb - 1))
        bank = Signal()
        idx = Signal(range(n + 1))
        m.d.comb += self.rd_addr.eq(Cat(idx[:_clog2(n)], bank))

        # Configuration-only values, registered (the configuration is static during a product).
        mx = Signal(w)
        neg_mx = Signal(signed(w + 1))
        fw = Signal(range(f + w + 1))   # F + W - 1: raw = top_max - fw
        if self._pipelined:
            # The width registered first; then mx = 2^(W-1) - 1 and -mx as thermometer codes
            # (one LUT per bit).
            cw = Signal.like(self.cfg_width)
            m.d.sync += [
                cw.eq(self.cfg_width),
                mx.eq(Cat(cw > i + 1 for i in range(w))),
                neg_mx.eq(Cat(cw >= 2, *(cw <= i + 1 for i in range(1, w + 1)))),
                fw.eq(f + cw - 1),
            ]
        else:
            m.d.sync += [mx.eq((Const(1, w + 1) << (self.cfg_width - 1).as_unsigned()) - 1),
                         neg_mx.eq(-mx), fw.eq(f + self.cfg_width - 1)]

        # -- scan: |A| -> bitlen(|A|) + ea -> running maximum ------------------------------
        rv = Signal()
        sv = Signal()
        tv = Signal()
        s_abs = Signal(aw)
        s_ea = Signal(signed(eb + 1))
        t_len = Signal(range(aw + 1))
        t_ea = Signal(signed(eb + 1))
        top = Signal(signed(eb + 3))
        top_max = Signal(signed(eb + 3))
        any_nz = Signal()
        any_nan = Signal()
        e4 = Signal(signed(eb))
        nan_blk = Signal()
        # The leading-one detector in two stages: per 8-bit group (G), then across groups (T).
        groups = [s_abs[i:i + 8] for i in range(0, aw, 8)]
        gv = Signal()
        g_nz = Signal(len(groups))
        g_idx = [Signal(3, name=f"g_idx{j}") for j in range(len(groups))]
        g_ea = Signal(signed(eb + 1))
        for j, grp in enumerate(groups):
            nz_j, idx_j = _leading_one(grp)
            merged += [g_nz[j].eq(nz_j), g_idx[j].eq(idx_j)]     # stage G (merged)
        bitlen = Signal(range(aw + 1))
        for j in range(len(groups)):    # the highest non-zero group wins
            with m.If(g_nz[j]):
                m.d.comb += bitlen.eq(Cat(g_idx[j], Const(j, 8)) + 1)
        qv = Signal()
        q_a = Signal(signed(aw))
        q_ea = Signal(signed(eb + 1))
        xv = Signal()           # pipelined: stage X (the low half of the negation) valid
        m.d.sync += [rv.eq(0), sv.eq(xv if self._pipelined else qv), tv.eq(gv & (g_nz != 0)),
                     t_len.eq(bitlen), t_ea.eq(g_ea)]
        merged += [gv.eq(sv), g_ea.eq(s_ea)]
        # Stage Q (merged): the memory's output register, copied. Pipelined, it copies every
        # cycle and the emit pipeline reads it too (its stage Q): nothing but a flip-flop
        # follows the memory (an ECP5 DP16KD without its output register takes 5.8 ns from
        # clock to data).
        if self._pipelined:
            m.d.sync += [qv.eq(rv), q_a.eq(self.rd_data.a), q_ea.eq(self.rd_data.ea)]
        else:
            m.d.comb += [qv.eq(rv), q_a.eq(self.rd_data.a), q_ea.eq(self.rd_data.ea)]
        with m.If(rv):
            m.d.sync += any_nan.eq(any_nan | self.rd_data.nan)
        uv = Signal()
        scan_empty = Signal(init=1)
        top_gt = Signal(signed(eb + 4))
        if self._pipelined:
            # |A| in two stages of half the width, both free-running (their valid flags
            # travel beside them): X negates the low half, inverts the high half of a negative
            # value and takes the borrow into an increment bit; S is one incrementer.
            half = aw // 2
            x_lo = Signal(half)
            x_hi = Signal(aw - half)
            x_inc = Signal()
            x_ea = Signal(signed(eb + 1))
            m.d.sync += [
                xv.eq(qv),
                x_hi.eq(Mux(q_a[-1], ~q_a[half:], q_a[half:])),
                x_lo.eq(Mux(q_a[-1], -q_a[:half], q_a[:half])),
                x_inc.eq(q_a[-1] & (q_a[:half] == 0)), x_ea.eq(q_ea),
                s_abs.eq(Cat(x_lo, x_hi + x_inc)), s_ea.eq(x_ea),
            ]
            # `top` is the least value when no lane is there, so the running maximum's
            # compare alone (a subtraction's sign: a carry chain) enables it; top_max starts
            # at that least value too.
            m.d.sync += [top.eq(Mux(tv, t_len + t_ea, -1 << (len(top) - 1))), uv.eq(tv)]
            # qv, xv, sv, gv, tv and uv all clear (registered from their inputs).
            m.d.sync += scan_empty.eq(~(rv | qv | xv | sv | gv | tv))
            m.d.comb += top_gt.eq(top_max - top)
            with m.If(uv):
                m.d.sync += any_nz.eq(1)
            with m.If(top_gt[-1]):
                m.d.sync += top_max.eq(top)
        else:
            with m.If(qv):
                m.d.sync += [s_abs.eq(Mux(q_a < 0, -q_a, q_a)), s_ea.eq(q_ea)]
            m.d.sync += [top.eq(t_len + t_ea), uv.eq(tv)]
            # qv, sv, gv, tv and uv all clear (registered from their inputs).
            m.d.sync += scan_empty.eq(~(rv | qv | sv | gv | tv))
            # top > top_max as the sign of a subtraction (a carry chain, not a LUT comparator).
            m.d.comb += top_gt.eq(top_max - top)
            with m.If(uv):
                m.d.sync += any_nz.eq(1)
                with m.If(~any_nz | top_gt[-1]):
                    m.d.sync += top_max.eq(top)

        # -- emit pipeline ---------------------------------------------------------------------
        # The pipeline never stalls: an element is issued only when the output FIFO is sure to
        # have room for it (credits = FIFO depth - elements in flight or queued), so no enable
        # fans out to the pipeline registers. A stochastic rounding's random number is taken
        # at issue and travels with its element.
        more = Signal()          # elements of this product left to issue (EMIT only)
        # Credits in thermometer code (bit i set: more than i credits), so the issue decision
        # reads one flip-flop and an update is a one-bit shift.
        credit = Signal(_EMIT_FIFO_DEPTH, init=(1 << _EMIT_FIFO_DEPTH) - 1)
        stochastic = Signal()
        if self._stochastic:
            m.d.sync += stochastic.eq(self.cfg_rounding == Rounding.STOCHASTIC)
        base = more & credit[0]
        issue = Signal()
        pop = Signal()
        m.d.comb += [
            issue.eq(base & (~stochastic | self.i_rand.valid)),
            self.i_rand.ready.eq(base & stochastic),
            pop.eq(self.o.valid & self.o.ready),
        ]
        with m.If(issue & ~pop):
            m.d.sync += credit.eq(credit >> 1)
        with m.Elif(pop & ~issue):
            m.d.sync += credit.eq(Cat(1, credit[:-1]))
        # Stages: (pipelined: Q, the memory's output copied,) A shift amount, B clamps, C1/C2
        # shifters, D rounding decision, E increment, F saturation into the output FIFO.
        # Without pipelining, stages A, C1 and D are combinational (merged into B, C2, E).
        v0, va, vb, vc1, vc, vd, ve = (Signal(name=f"v{c}")
                                       for c in ("0", "a", "b", "c1", "c", "d", "e"))
        r0, ra, rb, rc1, rc = (Signal(rr, name=f"r{c}") for c in ("0", "a", "b", "c1", "c"))
        # One right shifter for both directions: A << (R + W + 1) shifted right by
        # s + W + 1, clamped to 0 (a left shift by W + 1 or more saturates anyway) and to the
        # whole width (everything shifted out). A left shift leaves no fraction bits, so it
        # never rounds.
        xw = aw + rr + w + 1
        a_a = Signal(signed(aw))
        a_s = Signal(signed(eb + 5))
        b_a = Signal(signed(aw))
        b_sr = Signal(range(xw + 1))
        c1_x = Signal(signed(xw))
        c1_lo = Signal(3)
        c1_sticky = Signal()
        c1_neg = Signal()
        c_qext = Signal(signed(xw))
        c_sticky = Signal()
        c_neg = Signal()
        d_q = Signal(signed(w + 2))
        d_up = Signal()
        e_val = Signal(signed(w + 3))

        m.d.comb += self.rd_en.eq(1)
        vd2 = Signal()          # pipelined: stage D2's valid
        m.d.sync += [v0.eq(issue), vb.eq(va), vc.eq(vc1),
                     ve.eq(vd2 if self._pipelined else vd)]
        # Pipelined, stage Q comes between v0 / r0 and va / ra (below).
        merged += [*([] if self._pipelined else [va.eq(v0)]), vc1.eq(vb), vd.eq(vc)]
        if self._stochastic:
            m.d.sync += [r0.eq(self.i_rand.payload), rb.eq(ra), rc.eq(rc1)]
            merged += [*([] if self._pipelined else [ra.eq(r0)]), rc1.eq(rb)]
        if self._pipelined:
            # Stage Q is the scan's copy of the memory's output. e4 + F + W + 1 registered (e4
            # is set in CLAMP, three cycles before stage A).
            vq = Signal()
            m.d.sync += vq.eq(v0)
            merged += va.eq(vq)
            if self._stochastic:
                rq = Signal(rr)
                m.d.sync += rq.eq(r0)
                merged += ra.eq(rq)
            e4_off = Signal(signed(eb + 1))
            m.d.sync += [e4_off.eq(e4 + (f + w + 1)), a_a.eq(q_a), a_s.eq(e4_off - q_ea)]
        else:
            merged += [a_a.eq(self.rd_data.a), a_s.eq(e4 - self.rd_data.ea + (f + w + 1))]
        m.d.sync += [
            b_a.eq(a_a),
            b_sr.eq(Mux(a_s < 0, 0, Mux(a_s >= xw, xw, a_s))),
        ]
        # Stages C1/C2: the right shift by multiples of 8, then by 0..7, each with the sticky
        # OR of the bits it drops.
        x = Signal(signed(xw))
        mask_hi = Signal(xw)
        sr_hi = Cat(Const(0, 3), b_sr[3:])
        m.d.comb += [x.eq(b_a << (rr + w + 1)),
                     mask_hi.eq(~(Const(-1, signed(xw + 1)) << sr_hi))]
        if self._pipelined:
            # The coarse shift's sticky bit from per-byte zero tests taken in stage B: the
            # bytes below the shift amount (a multiple of 8) are dropped.
            xa = (a_a << (rr + w + 1))[:xw]
            nbytes = (xw + 7) // 8
            b_bnz = Signal(nbytes)
            m.d.sync += b_bnz.eq(Cat(xa[8 * j:8 * j + 8] != 0 for j in range(nbytes)))
            k = b_sr[3:]
            sticky_hi = Cat((b_bnz[j] & (k > j)) for j in range(nbytes)) != 0
        else:
            sticky_hi = (x.as_unsigned() & mask_hi) != 0
        merged += [
            c1_x.eq(x >> sr_hi),
            c1_lo.eq(b_sr[:3]),
            c1_sticky.eq(sticky_hi),
            c1_neg.eq(b_a < 0),
        ]
        mask_lo = Signal(8)
        m.d.comb += mask_lo.eq(~(Const(-1, signed(9)) << c1_lo))
        m.d.sync += [
            c_qext.eq(c1_x >> c1_lo),
            c_sticky.eq(c1_sticky | ((c1_x.as_unsigned()[:8] & mask_lo) != 0)),
            c_neg.eq(c1_neg),
        ]
        q = Signal(signed(xw - rr))
        f_r = Signal(rr)
        up = Signal()
        m.d.comb += [q.eq(c_qext >> rr), f_r.eq(c_qext[:rr])]
        if self._pipelined:
            # The rounding decision's terms in stage D (the stochastic one as a carry out),
            # the decision itself in stage D2.
            rd_low = Signal()       # fraction bits below the half bit, or sticky
            rd_half = Signal()
            rd_q0 = Signal()
            rd_neg = Signal()
            rd_stoch = Signal()
            m.d.sync += [
                rd_low.eq(((f_r[:rr - 1] != 0) | c_sticky) if rr > 1 else c_sticky),
                rd_half.eq(f_r[rr - 1]), rd_q0.eq(q[0]), rd_neg.eq(c_neg),
            ]
            if self._stochastic:
                m.d.sync += rd_stoch.eq((f_r + rc)[rr])
            below, nearest = rd_low, rd_half & (rd_low | rd_q0)
            toward_zero = rd_neg & (rd_half | rd_low)
            stoch_up = rd_stoch
        else:
            below = ((f_r[:rr - 1] != 0) | c_sticky) if rr > 1 else c_sticky
            nearest = f_r[rr - 1] & (below | q[0])
            toward_zero = c_neg & ((f_r != 0) | c_sticky)
            stoch_up = (f_r + rc)[rr]
        with m.Switch(self.cfg_rounding):
            with m.Case(Rounding.NEAREST_EVEN):
                m.d.comb += up.eq(nearest)
            with m.Case(Rounding.TOWARD_ZERO):
                m.d.comb += up.eq(toward_zero)
            with m.Default():
                # Without stochastic rounding its codes round to nearest (never used so).
                m.d.comb += up.eq(stoch_up if self._stochastic else nearest)
        # Values beyond ±2^W saturate anyway: narrow them to [-2^W, 2^W] before the
        # increment (sign and zero tests of the high bits, no comparator carry chain).
        if self._pipelined:
            # Stage D keeps the high bits' zero and all-ones tests per 8-bit group, stage D2
            # turns them into two flags (beyond +2^W, beyond -2^W: such a value saturates
            # whatever the rounding), stage E increments the low W + 1 bits, stage F
            # compares with the limits (or takes the flags) and stage G (into the FIFO)
            # selects.
            hi = q[w:]
            hgroups = [hi[i:i + 8] for i in range(0, len(hi), 8)]
            d_nz = Signal(len(hgroups))
            d_all = Signal(len(hgroups))
            d_neg = Signal()
            d_lo = Signal(signed(w + 1))
            d2_lo = Signal(signed(w + 1))
            d2_big = Signal()
            d2_small = Signal()
            d2_up = Signal()
            e_big = Signal()
            e_small = Signal()
            vf = Signal()
            f_gt = Signal()
            f_lt = Signal()
            f_val = Signal(signed(w))
            m.d.sync += [
                d_neg.eq(hi[-1]), d_lo.eq(q[:w + 1]),
                d_nz.eq(Cat(g != 0 for g in hgroups)), d_all.eq(Cat(g.all() for g in hgroups)),
                vd2.eq(vd), d2_up.eq(up), d2_lo.eq(d_lo),
                d2_big.eq(~d_neg & (d_nz != 0)), d2_small.eq(d_neg & ~d_all.all()),
                e_val.eq(d2_lo + d2_up), e_big.eq(d2_big), e_small.eq(d2_small),
                # The compares as subtraction sign bits (carry chains, not LUT trees).
                vf.eq(ve), f_gt.eq(e_big | (~e_small & (mx - e_val)[-1])),
                f_lt.eq(e_small | (e_val - neg_mx)[-1]),
                f_val.eq(e_val),
            ]
            sat = Signal(signed(w))
            m.d.comb += sat.eq(Mux(f_gt, mx, Mux(f_lt, neg_mx, f_val)))
            w_en = vf
        else:
            def narrow(v):
                hi = v[w:]
                big = ~hi[-1] & (hi != 0)
                small = hi[-1] & ~hi.all()
                return Mux(big, 1 << w, Mux(small, -(1 << w), v[:w + 1].as_signed()))
            merged += [d_up.eq(up), d_q.eq(narrow(q))]
            # Stage E: rounding increment. Stage F: saturation into the output FIFO.
            m.d.sync += e_val.eq(d_q + d_up)
            sat = Signal(signed(w))
            with m.If(e_val > mx):
                m.d.comb += sat.eq(mx)
            with m.Elif(e_val < neg_mx):
                m.d.comb += sat.eq(neg_mx)
            with m.Else():
                m.d.comb += sat.eq(e_val)
            w_en = ve
        o_e = Signal(signed(eb))
        if self._pipelined:
            # The output FIFO as a memory whose read register is the output register, with
            # its fill level in thermometer code: every control signal is one LUT from
            # flip-flops. It never overflows (the credits), so writes are not checked.
            m.submodules.fifo = fifo = Memory(shape=w + eb, depth=_EMIT_FIFO_DEPTH, init=[])
            f_wr = fifo.write_port()
            f_rd = fifo.read_port()
            f_wp = Signal(range(_EMIT_FIFO_DEPTH))
            f_rp = Signal(range(_EMIT_FIFO_DEPTH))
            f_level = Signal(_EMIT_FIFO_DEPTH)      # bit i: more than i entries stored
            f_ov = Signal()                         # the read register holds an element
            f_take = Signal()
            m.d.comb += [
                f_wr.en.eq(w_en), f_wr.addr.eq(f_wp),
                f_wr.data.eq(Cat(Mux(nan_blk, 0, sat), o_e)),
                f_take.eq(f_level[0] & (~f_ov | self.o.ready)),
                f_rd.en.eq(f_take), f_rd.addr.eq(f_rp),
                self.o.valid.eq(f_ov), self.o.payload.eq(f_rd.data),
            ]
            with m.If(w_en):
                m.d.sync += f_wp.eq(f_wp + 1)
            # The read register keeps its element while `o` stalls, else takes the next one.
            m.d.sync += f_ov.eq(Mux(f_ov & ~self.o.ready, 1, f_level[0]))
            with m.If(f_take):
                m.d.sync += f_rp.eq(f_rp + 1)
            with m.If(w_en & ~f_take):
                m.d.sync += f_level.eq(Cat(1, f_level[:-1]))
            with m.Elif(f_take & ~w_en):
                m.d.sync += f_level.eq(f_level >> 1)
        else:
            m.submodules.fifo = fifo = SyncFIFOBuffered(width=w + eb, depth=_EMIT_FIFO_DEPTH)
            m.d.comb += [
                fifo.w_en.eq(w_en),
                fifo.w_data.eq(Cat(Mux(nan_blk, 0, sat), o_e)),
                self.o.valid.eq(fifo.r_rdy),
                self.o.payload.eq(fifo.r_data),
                fifo.r_en.eq(self.o.ready),
            ]
        with m.If(issue):
            m.d.sync += [idx.eq(idx + 1), more.eq(idx != n - 1)]

        raw = Signal(signed(eb + 4))
        dwin = Signal(signed(max(len(raw), len(pred.unit_exp)) + 1))
        in_window = Signal()
        raw_c = Signal(signed(eb))
        raw_hi = Signal()       # pipelined: raw > e_max, registered in CHECK
        raw_lo = Signal()       # pipelined: raw < -e_max
        accepted = Signal(range(n + 1))
        acc_last = Signal()      # accepted == n - 1, as a register
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += [accepted.eq(accepted + 1), acc_last.eq(accepted == n - 2)]

        tail_done = ~rv & scan_empty & ~pred.busy
        emit_done = acc_last & self.o.valid & self.o.ready
        raw_max = top_max - fw
        if self._pipelined:
            # Registered. `tail_done`: once true in SCAN_TAIL it stays true (no read is issued
            # there, and the predictor was started by the previous product's commit, long
            # before). `emit_done`: the last acceptance (`finish` follows it a cycle later).
            # `raw_max`: top_max is final a cycle before SELECT (`tail_done` is registered).
            tail_done_r = Signal(name="tail_done")
            emit_done_r = Signal(name="emit_done")
            raw_max_r = Signal.like(raw, name="raw_max")
            m.d.sync += [tail_done_r.eq(tail_done), emit_done_r.eq(emit_done),
                         raw_max_r.eq(raw_max)]
            tail_done, emit_done, raw_max = tail_done_r, emit_done_r, raw_max_r
        m.d.comb += self.busy.eq(1)
        # Pipelined, the state register is one-hot (each state's decode is one flip-flop).
        states = ("IDLE", "SCAN", "SCAN_TAIL", "SELECT", "CHECK", "WINDOW", "DECIDE", "CLAMP",
                  "EMIT")
        use_pred_r = Signal()   # pipelined: DECIDE registers the choice of the prediction
        if self._pipelined:
            # `begin` and `restart` are registers, set a cycle after CLAMP; e4 (raw_c), the
            # width and k hold still until the next selection.
            begin_q = Signal()
            restart_q = Signal()
            m.d.sync += begin_q.eq(0)
            m.d.comb += [pred.begin.eq(begin_q), pred.restart.eq(restart_q),
                         pred.e4.eq(raw_c), pred.width.eq(self.cfg_width),
                         pred.k.eq(self.cfg_pred_k)]
        fsm = _OneHotFSM(m, states) if self._pipelined else _FSM(m)
        with fsm:
            with fsm.state("IDLE"):
                m.d.comb += self.busy.eq(0)
                with m.If(self.start):
                    m.d.sync += [bank.eq(self.bank), idx.eq(0), any_nz.eq(0), any_nan.eq(0)]
                    if self._pipelined:
                        m.d.sync += top_max.eq(-1 << (len(top_max) - 1))
                    fsm.goto("SCAN")
            with fsm.state("SCAN"):
                with m.If(idx == n - 1):
                    fsm.goto("SCAN_TAIL")
                m.d.sync += [idx.eq(idx + 1), rv.eq(1)]
            with fsm.state("SCAN_TAIL"):
                # The predictor finishes the previous product's update first.
                with m.If(tail_done):
                    fsm.goto("SELECT")
            with fsm.state("SELECT"):
                with m.If(self.cfg_exp_mode == ExpMode.FIXED):
                    m.d.sync += raw.eq(self.cfg_fixed_exp)
                with m.Elif(any_nz):
                    m.d.sync += raw.eq(raw_max)
                with m.Else():
                    m.d.sync += raw.eq(0)
                fsm.goto("CHECK")
            with fsm.state("CHECK"):
                # Predicted mode: is the prediction within [raw, raw + u] (no overflow, no
                # underflow)? A subtraction here, two small tests of it in WINDOW.
                m.d.sync += dwin.eq(pred.unit_exp - raw)
                if self._pipelined:
                    # The clamp's two compares here, its choice in WINDOW.
                    m.d.sync += [raw_hi.eq(raw > e_max), raw_lo.eq(raw < -e_max)]
                fsm.goto("WINDOW")
            with fsm.state("WINDOW"):
                if self._pipelined:
                    clamped = Mux(raw_hi, e_max, Mux(raw_lo, -e_max, raw))
                else:
                    clamped = Mux(raw > e_max, e_max, Mux(raw < -e_max, -e_max, raw))
                m.d.sync += [
                    in_window.eq((dwin[3:] == 0) & (dwin[:3] <= self.cfg_pred_margin)),
                    raw_c.eq(clamped),
                ]
                fsm.goto("DECIDE" if self._pipelined else "CLAMP")
            predicted = self.cfg_exp_mode == ExpMode.PREDICTED
            usable = pred.usable & ~clear_req
            if self._pipelined:
                with fsm.state("DECIDE"):
                    m.d.sync += use_pred_r.eq(predicted & usable & (in_window | ~any_nz))
                    fsm.goto("CLAMP")
            with fsm.state("CLAMP"):
                use_pred = (use_pred_r if self._pipelined
                            else predicted & usable & (in_window | ~any_nz))
                e4_sel = Mux(use_pred, pred.unit_exp, raw_c)
                m.d.sync += [
                    e4.eq(e4_sel),
                    o_e.eq(Mux(any_nan, nan_code, e4_sel)),
                    nan_blk.eq(any_nan),
                    idx.eq(0),
                    more.eq(1),
                    accepted.eq(0),
                    acc_last.eq(0),
                    clear_req.eq(self.pred_clear),
                ]
                m.d.comb += pred.clear.eq(clear_req | ~predicted)
                if self._pipelined:
                    m.d.sync += [begin_q.eq(predicted & any_nz & ~any_nan),
                                 restart_q.eq(~(usable & in_window))]
                else:
                    m.d.comb += [
                        pred.begin.eq(predicted & any_nz & ~any_nan),
                        pred.restart.eq(~(usable & in_window)),
                        pred.e4.eq(raw_c),
                        pred.width.eq(self.cfg_width),
                        pred.k.eq(self.cfg_pred_k),
                    ]
                fsm.goto("EMIT")
            with fsm.state("EMIT"):
                with m.If(emit_done):
                    m.d.comb += self.finish.eq(1)
                    fsm.goto("IDLE")
        return m


class ExponentPredictor(wiring.Component):
    """History and update engine of the predicted output exponent selector.

    Implements :class:`lowbit.sim.bfp_column.ExponentPredictor` (which states the rules): the state
    ``count``, ``mu``, ``dev`` (``W_max - 1 + FS`` bits, ``FS = stat_shift + 2`` fraction
    bits) and ``unit_exp``, the largest output mantissa magnitude of the product in flight,
    and a small sequential engine that adds the sample and renormalises after the product's
    last output. The engine shifts one bit per cycle (the weight ``2^-s`` of the sample, then
    the renormalisation ``δ``) and adds ``dev`` ``k`` times: about ``s + 2k + |δ| + 17`` cycles
    per product, which overlap the next product's scan pass (iterated floor shifts equal one
    floor shift).

    Members
    -------
    clear : In(1)
        Empty the history (only while ``busy`` is low; takes effect a cycle later).
    begin : In(1)
        Pulse at the exponent selection of a product whose sample is to be added: latches
        ``restart``, ``e4``, ``width`` and ``k`` and clears the running maximum (a cycle later;
        the product's first sample comes later still).
    restart, e4, width, k : In
        The sample starts a new history; the product's exponent, runtime width and spread
        multiple (0 behaves as 1).
    sample_valid, sample : In
        The product's output mantissas, as they are accepted.
    commit : In(1)
        Pulse: the product's last output was accepted (after ``begin``; at least one cycle
        after the last ``sample_valid``).
    busy : Out(1)
    usable : Out(1)
        The history is not empty and ``unit_exp`` is a finite exponent (registered; valid while
        ``busy`` is low).
    unit_exp : Out(signed)
        The predicted exponent.
    """

    def __init__(self, *, width, exp_bits, stat_shift):
        self._w, self._eb, self._a = width, exp_bits, stat_shift
        self._fs, self._sw, self._eu_range = predictor_widths(
            width=width, exp_bits=exp_bits, stat_shift=stat_shift)
        super().__init__({
            "clear": In(1),
            "begin": In(1),
            "restart": In(1),
            "e4": In(signed(exp_bits)),
            "width": In(range(width + 1)),
            "k": In(3),
            "sample_valid": In(1),
            "sample": In(signed(width)),
            "commit": In(1),
            "busy": Out(1),
            "usable": Out(1),
            "unit_exp": Out(range(self._eu_range[0], self._eu_range[1] + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        w, a, fs, sw = self._w, self._a, self._fs, self._sw
        e_max = (1 << (self._eb - 1)) - 1
        count = Signal(range((1 << a) + 1))
        mu = Signal(sw)
        dev = Signal(sw)
        eu = self.unit_exp
        busy = Signal()          # the engine is running (a register, for the selector's timing)

        # Latched at `begin`: the product's parameters.
        restart = Signal()
        e4 = Signal(signed(self._eb))
        wref = Signal(range(w + fs))     # W - 2 + FS: delta = bitlen(P) - 1 - wref
        k = Signal(3)
        active = Signal()
        m.d.comb += self.busy.eq(busy | (self.commit & active))
        with m.If(self.begin):
            m.d.sync += [restart.eq(self.restart), e4.eq(self.e4),
                         wref.eq(self.width - 2 + fs),
                         k.eq(Mux(self.k == 0, 1, self.k))]
        # `begin` and `clear` also act a cycle late, from registers: the first sample and
        # `commit` come many cycles after `begin`, and the history is next read at the next
        # selection.
        begin_r = Signal()
        clear_r = Signal()
        m.d.sync += [begin_r.eq(self.begin), clear_r.eq(self.clear)]
        with m.If(begin_r):
            m.d.sync += active.eq(1)

        # The running maximum of |m| (two stages, off the output path).
        sv = Signal()
        am = Signal(w)
        xmax = Signal(w - 1)
        m.d.sync += [sv.eq(self.sample_valid),
                     am.eq(Mux(self.sample < 0, -self.sample, self.sample))]
        gt = Signal(signed(w + 1))
        m.d.comb += gt.eq(xmax - am)
        with m.If(begin_r):
            m.d.sync += xmax.eq(0)
        with m.Elif(sv & gt[-1]):
            m.d.sync += xmax.eq(am)

        diff = Signal(signed(sw + 1))
        g = Signal(signed(sw + 2))
        sh = Signal(range(max(a, 1) + 1))
        kc = Signal(3)
        p = Signal(sw + 3)
        delta = Signal(signed(_clog2(sw + 4) + 2))
        p_nz = Signal()
        p_msb = Signal(range(len(p)))
        count_inc = Signal.like(count)   # min(count + 1, 2^a)
        # s = min(a, floor(log2(count + 1))) for the sample about to be added.
        n_next = Signal(range((1 << a) + 2))
        s = Signal(range(max(a, 1) + 1))
        _, lg = _leading_one(n_next)
        m.d.comb += [n_next.eq(count + 1), s.eq(Mux(lg > a, a, lg))]
        eu_ok = Signal()                 # unit_exp is a finite exponent (registered)
        m.d.sync += eu_ok.eq((eu >= -e_max) & (eu <= e_max))

        # The engine: a one-hot state register, and one flag register per operation on the
        # statistics, set a cycle ahead, so that every register's enable and input select
        # comes straight from flip-flops.
        names = ("idle", "settle", "load", "abs", "dev", "dev2", "weigh", "pred", "norm",
                 "norm2", "delta", "delta2", "adjust", "shift", "range")
        st = SimpleNamespace(**{nm: Signal(name=f"st_{nm}", init=nm == "idle")
                                for nm in names})
        ld = Signal()       # LOAD of a new history (the sample is fresh)
        w_add = Signal()    # WEIGH: the weighted sample is added (summed this cycle)
        w_sum = Signal()    # the sums are written to mu and dev this cycle
        p_add = Signal()    # P + dev is written to P this cycle
        p_wait = Signal()   # P + dev is being summed
        # SHIFT: the renormalising shifts left, in thermometer code (bit i: more than i), so
        # that "shift this cycle" is its bit 0, a flip-flop.
        shifts = Signal(max(w + fs - 1, sw + 2))
        shifting = shifts[0]
        right = Signal()    # SHIFT: the direction
        start = st.idle & self.commit & active
        w_shift = Signal()  # WEIGH: D and G are shifted this cycle (st.weigh & ~w_add)
        m.d.sync += w_shift.eq((st.dev2 & (sh != 0)) | (w_shift & (sh != 1)))
        # P == 0 found in DELTA, as a register set in NORM2 (it gates the state, `busy` and
        # the history's emptying).
        cleared = Signal()
        m.d.sync += [
            st.idle.eq((st.idle & ~start) | cleared | st.range),
            st.settle.eq(start),
            st.load.eq(st.settle),
            st.abs.eq(st.load & ~ld),
            st.dev.eq(st.abs),
            st.dev2.eq(st.dev),
            st.weigh.eq(st.dev2 | w_shift),
            st.pred.eq((st.load & ld) | w_sum),
            st.norm.eq(p_add & (kc == 1)),
            st.norm2.eq(st.norm),
            st.delta.eq(st.norm2),
            st.delta2.eq(st.delta & p_nz),
            st.adjust.eq(st.delta2),
            st.shift.eq(st.adjust | shifting),
            st.range.eq(st.shift & ~shifting),
        ]
        # Emptying the history (a clear request while idle, or P == 0) acts a cycle later,
        # from one flag register: the history is next read at the next product.
        empty = Signal()
        m.d.sync += empty.eq((st.idle & clear_r) | cleared)
        with m.If(empty):
            m.d.sync += [count.eq(0), self.usable.eq(0)]
        # `active` clears in SETTLE, a cycle after `start` (no second start can come: the
        # engine is no longer idle), so its next state reads only flip-flops.
        with m.If(start):
            m.d.sync += busy.eq(1)
        with m.If(st.settle):
            m.d.sync += active.eq(0)
        with m.If(st.settle):
            m.d.sync += [ld.eq(restart | (count == 0)), sh.eq(s),
                         count_inc.eq(Mux(count == 1 << a, count, count + 1))]
        x = Cat(Const(0, fs), xmax)
        # D = X - mu and -D, free-running (mu and the sample are stable from SETTLE on).
        x_mu = Signal.like(diff)
        mu_x = Signal.like(diff)
        m.d.sync += [x_mu.eq(x - mu), mu_x.eq(mu - x)]
        with m.If(st.load):
            m.d.sync += ld.eq(0)
            with m.If(~ld):
                m.d.sync += diff.eq(x_mu)
        # |D| (a choice between D and -D) and |D| - dev, free-running (ready in DEV and DEV2).
        abs_d = Signal(sw + 1)
        g_pre = Signal.like(g)
        m.d.sync += [abs_d.eq(Mux(x_mu[-1], mu_x, x_mu)), g_pre.eq(abs_d - dev)]
        with m.If(st.dev2):
            m.d.sync += [g.eq(g_pre), w_add.eq(sh == 0)]
        with m.If(w_shift):
            m.d.sync += [diff.eq(diff >> 1), g.eq(g >> 1), sh.eq(sh - 1), w_add.eq(sh == 1)]
        # The sums, free-running: ready a cycle after `w_add`, when `w_sum` writes them. In
        # SETTLE they take a new history's values instead (X and 0, written in LOAD), so
        # that mu and dev have one load source.
        mu_sum = Signal(sw)
        dev_sum = Signal(sw)
        m.d.sync += [mu_sum.eq(Mux(st.settle, x, mu + diff)),
                     dev_sum.eq(Mux(st.settle, 0, dev + g)), w_sum.eq(w_add)]
        with m.If(w_add):
            m.d.sync += w_add.eq(0)
        with m.If(w_sum):
            m.d.sync += count.eq(count_inc)
        with m.If(ld):
            m.d.sync += [eu.eq(e4), count.eq(1)]
        # mu and dev: load (`ld | w_sum`, one register) or shift (`shifting`, one register,
        # its direction another): each bit's next value is a function of five inputs.
        load_sum = Signal()
        m.d.sync += load_sum.eq((st.settle & (restart | (count == 0))) | w_add)
        with m.If(load_sum):
            m.d.sync += [mu.eq(mu_sum), dev.eq(dev_sum)]
        with m.Elif(shifting):
            m.d.sync += [mu.eq(Mux(right, mu >> 1, mu << 1)),
                         dev.eq(Mux(right, dev >> 1, dev << 1))]
        # P = mu + k·dev by k additions of dev (one small adder, free-running: two cycles
        # per addition).
        p_sum = Signal.like(p)
        m.d.sync += p_sum.eq(p + dev)
        with m.If(st.pred):
            m.d.sync += [p.eq(mu), kc.eq(k), p_wait.eq(1)]
        with m.If(p_wait):
            m.d.sync += [p_wait.eq(0), p_add.eq(1)]
        with m.If(p_add):
            m.d.sync += [p.eq(p_sum), kc.eq(kc - 1), p_add.eq(0), p_wait.eq(kc != 1)]
        # bitlen(P) - 1 in two stages: per 8-bit group, then across the groups.
        pgroups = [p[i:i + 8] for i in range(0, len(p), 8)]
        n_nz = Signal(len(pgroups))
        n_idx = [Signal(3, name=f"n_idx{j}") for j in range(len(pgroups))]
        with m.If(st.norm):
            for j, grp in enumerate(pgroups):
                nz_j, idx_j = _leading_one(grp)
                m.d.sync += [n_nz[j].eq(nz_j), n_idx[j].eq(idx_j)]
        m.d.sync += cleared.eq(st.norm2 & (n_nz == 0))
        with m.If(st.norm2):
            m.d.sync += p_nz.eq(n_nz != 0)
            for j in range(len(pgroups)):    # the highest non-zero group wins
                with m.If(n_nz[j]):
                    m.d.sync += p_msb.eq(Cat(n_idx[j], Const(j, 8)))
        # delta = bitlen(P) - 1 - wref, free-running (ready in DELTA2).
        # |delta| in thermometer code, free-running too (ready in ADJUST).
        delta_pre = Signal.like(delta)
        shifts_pre = Signal.like(shifts)
        m.d.sync += [delta_pre.eq(p_msb - wref),
                     shifts_pre.eq(Cat((delta_pre > i) | (delta_pre < -i)
                                       for i in range(len(shifts))))]
        with m.If(st.delta2):
            m.d.sync += delta.eq(delta_pre)
        with m.If(cleared):
            m.d.sync += busy.eq(0)
        with m.If(st.adjust):
            m.d.sync += [eu.eq(eu + delta), shifts.eq(shifts_pre), right.eq(~delta[-1])]
        with m.Else():
            m.d.sync += shifts.eq(shifts >> 1)
        with m.If(st.range):
            m.d.sync += [self.usable.eq(eu_ok), busy.eq(0)]
        return m


class BFPColumn(wiring.Component):
    """BFP matrix-vector column: ``N`` PEs, exponent adder, selector, shifter and bias path.

    Parameters
    ----------
    lanes : int
        Processing elements ``N`` (4..256): outputs per product, weight mantissas per beat.
    block : int
        Block size ``B`` (2..256).
    width : int
        Maximum mantissa width ``W_max`` (2..16; at most 8 with ``mult="sb_mac16"``).
    exp_bits : int
        Exponent width ``E`` (3..12).
    max_blocks : int
        Largest ``cfg_blocks`` (1..4096); sizes the accumulator.
    frac_bits : int
        Fraction guard bits ``F`` of the accumulator (0..8).
    rand_bits : int
        Random bits ``R`` per output element in stochastic rounding (1..16).
    mult : {"lut", "sb_mac16", "mult18x18d"}
        Multiplier style (see :mod:`lowbit.hw.mult`).
    sim_model : bool
        Use the multipliers' behavioural model (needed for simulation; ``False`` for synthesis
        of the hard-block styles).
    stat_shift : int
        Averaging shift ``a`` of the predicted exponent selector (0..8): its statistics average
        over about ``2^a`` products.
    predictor : bool
        Build the predicted exponent selector (≈ 420 iCE40 LUTs). Without it, ``cfg_exp_mode``
        2 is the max rule.
    stochastic : bool
        Build stochastic rounding (the random-number pipeline of the output unit). Without it,
        ``i_rand`` is never ready and ``cfg_rounding`` must not select stochastic rounding (its
        code rounds to nearest; the sequencer rejects such a MATVEC before it starts).
    acc_block_ram : bool
        Ask synthesis to put the accumulator memory (``2·N`` words of ``aw + E + 2`` bits, two
        read ports) in block RAM instead of flip-flops: on iCE40 six EBRs for ``N <= 128``
        instead of ≈ ``2N·(aw + E + 2)`` flip-flops and the read multiplexers.
    pipelined : bool
        ``False`` merges pipeline stages for area where the clock is slow (iCE40 at 12 MHz):
        no fabric register after the multipliers, a two-stage combiner (S1 and S1b folded into
        the shift stage), no copy of the memory output in the scan, and a four-stage emit
        pipeline (stages A, C1 and D folded into the next), a three-stage scan (Q and G
        folded). About 500 fewer flip-flops at ``N = 4``, a lower Fmax, the same results.
        ``True`` also computes the control decisions a cycle ahead into flip-flops (the PE
        array's and drain's enables in one copy per four lanes), and, for ``N >= 6``, adds two
        combiner stages (see :class:`BlockCombiner`): the UP5K timing work of ``docs/bfp.md``.

    Members
    -------
    i_w : In(stream.Signature(StructLayout({"m": Array(signed(W), N), "e": Array(signed(E), N)})))
        Weight column ``M[:, j]`` and the row exponents of its block (used on the block's last
        beat).
    i_x : In(stream.Signature(StructLayout({"m": signed(W), "e": signed(E)})))
        Vector element ``x[j]`` and its block exponent (used on the block's last beat).
    i_bias : In(stream.Signature(StructLayout({"m": signed(W), "e": signed(E)})))
        ``N`` bias elements per product, in lane order, when ``cfg_bias_en``.
    i_rand : In(stream.Signature(R))
        One random number per output element in stochastic rounding (e.g. from the PRNG).
    o : Out(stream.Signature(StructLayout({"m": signed(W), "e": signed(E)})))
        ``N`` output elements per product, lane order, all with the block's exponent ``e4``.
    cfg_width : In(range(W_max + 1))
        Runtime output mantissa width ``W`` (2..W_max).
    cfg_rounding : In(Rounding)
    cfg_exp_mode : In(2)
        :class:`ExpMode`: 0 = max over the output vector, 1 = fixed, 2 = predicted from the
        statistics of earlier products (:class:`ExponentPredictor`; products in the other
        modes clear its history), 3 = as 0.
    cfg_fixed_exp : In(signed(E))
    cfg_pred_k : In(3), init 3
        Predicted mode: spread multiple ``k`` (1..7; 0 acts as 1) of the prediction
        ``μ + k·dev``.
    cfg_pred_margin : In(3), init 2
        Predicted mode: underflow margin ``u``.
    pred_clear : In(1)
        Pulse: clear the predicted mode's history at the next product's exponent selection.
    cfg_bias_en : In(1)
    cfg_blocks : In(range(max_blocks + 1))
        Blocks per product ``nb`` (1..max_blocks); ``K = nb · B`` beats per product.

    Configuration must be stable while a product is in flight.

    Raises
    ------
    TypeError, ValueError
        For a parameter of the wrong kind or out of range.
    """

    def __init__(self, *, lanes=16, block=16, width=8, exp_bits=8, max_blocks=16, frac_bits=3,
                 rand_bits=8, mult="lut", sim_model=True, stat_shift=4, predictor=True,
                 stochastic=True, acc_block_ram=False, pipelined=True):
        try:
            self._validate(lanes, block, width, exp_bits, max_blocks, frac_bits, rand_bits,
                           mult, sim_model, stat_shift, predictor, stochastic, acc_block_ram,
                           pipelined)
        except (TypeError, ValueError):
            self._MustUse__silence = True    # a rejected component is not "unused"
            raise
        self._lanes, self._block, self._width, self._exp_bits = lanes, block, width, exp_bits
        self._max_blocks, self._frac_bits, self._rand_bits = max_blocks, frac_bits, rand_bits
        self._mult, self._sim_model, self._stat_shift = mult, sim_model, stat_shift
        self._predictor, self._stochastic = predictor, stochastic
        self._acc_block_ram, self._pipelined = acc_block_ram, pipelined
        self._pw, self._aw = column_widths(block=block, width=width, max_blocks=max_blocks,
                                           frac_bits=frac_bits)
        elem = _elem_layout(width, exp_bits)
        super().__init__({
            "i_w": In(stream.Signature(data.StructLayout({
                "m": data.ArrayLayout(signed(width), lanes),
                "e": data.ArrayLayout(signed(exp_bits), lanes)}))),
            "i_x": In(stream.Signature(elem)),
            "i_bias": In(stream.Signature(elem)),
            "i_rand": In(stream.Signature(rand_bits)),
            "o": Out(stream.Signature(elem)),
            "cfg_width": In(range(width + 1), init=width),
            "cfg_rounding": In(Rounding),
            "cfg_exp_mode": In(2),
            "cfg_fixed_exp": In(signed(exp_bits)),
            "cfg_pred_k": In(3, init=3),
            "cfg_pred_margin": In(3, init=2),
            "pred_clear": In(1),
            "cfg_bias_en": In(1),
            "cfg_blocks": In(range(max_blocks + 1), init=1),
        })

    @staticmethod
    def _validate(lanes, block, width, exp_bits, max_blocks, frac_bits, rand_bits, mult,
                  sim_model, stat_shift, predictor, stochastic, acc_block_ram, pipelined):
        _check_int("Lane count", lanes, 4, 256)
        _check_int("Block size", block, 2, 256)
        _check_int("Mantissa width", width, 2, 16)
        _check_int("Exponent width", exp_bits, 3, 12)
        _check_int("Maximum block count", max_blocks, 1, 4096)
        _check_int("Fraction guard bit count", frac_bits, 0, 8)
        _check_int("Random bit count", rand_bits, 1, 16)
        if not isinstance(mult, str):
            raise TypeError(f"Multiplier style must be one of {', '.join(MULT_STYLES)}, "
                            f"not {mult!r}")
        if mult not in MULT_STYLES:
            raise ValueError(f"Multiplier style must be one of {', '.join(MULT_STYLES)}, "
                             f"not {mult!r}")
        if width > MULT_STYLES[mult]:
            raise ValueError(f"Mantissa width must be at most {MULT_STYLES[mult]} with "
                             f"multiplier style {mult!r}, not {width}")
        if not isinstance(sim_model, bool):
            raise TypeError(f"sim_model must be a bool, not {sim_model!r}")
        _check_int("Statistics shift", stat_shift, 0, 8)
        for name, value in (("predictor", predictor), ("stochastic", stochastic),
                            ("acc_block_ram", acc_block_ram), ("pipelined", pipelined)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be a bool, not {value!r}")

    lanes = property(lambda self: self._lanes)
    block = property(lambda self: self._block)
    width = property(lambda self: self._width)
    exp_bits = property(lambda self: self._exp_bits)
    max_blocks = property(lambda self: self._max_blocks)
    frac_bits = property(lambda self: self._frac_bits)
    rand_bits = property(lambda self: self._rand_bits)
    mult = property(lambda self: self._mult)
    sim_model = property(lambda self: self._sim_model)
    stat_shift = property(lambda self: self._stat_shift)
    predictor = property(lambda self: self._predictor)
    stochastic = property(lambda self: self._stochastic)
    acc_block_ram = property(lambda self: self._acc_block_ram)
    pipelined = property(lambda self: self._pipelined)
    #: Width of the exact block sum.
    pw = property(lambda self: self._pw)
    #: Width of the accumulator.
    aw = property(lambda self: self._aw)

    def elaborate(self, platform):
        m = Module()
        n, eb = self._lanes, self._exp_bits
        m.submodules.pe = pe = BFPLanes(lanes=n, block=self._block, width=self._width,
                                        exp_bits=eb, mult=self._mult, sim_model=self._sim_model,
                                        pipelined=self._pipelined)
        m.submodules.comb = comb = BlockCombiner(lanes=n, pw=self._pw, aw=self._aw,
                                                 exp_bits=eb, frac_bits=self._frac_bits,
                                                 pipelined=self._pipelined)
        m.submodules.out = out = OutputUnit(lanes=n, aw=self._aw, width=self._width,
                                            exp_bits=eb, frac_bits=self._frac_bits,
                                            rand_bits=self._rand_bits,
                                            acc_layout=comb.acc_layout,
                                            stat_shift=self._stat_shift,
                                            predictor=self._predictor,
                                            stochastic=self._stochastic,
                                            pipelined=self._pipelined)
        attrs = {"ram_style": "block"} if self._acc_block_ram else {}
        # Unpipelined, the combiner writes a lane two cycles after reading it and reads it
        # again N >= 4 cycles after, and the output unit reads the other bank: no read-write
        # collision ever happens, so ``no_rw_check`` spares synthesis the collision logic
        # (the read registers must then be described in the fabric to merge into the RAM).
        plain = not self._pipelined
        if plain:
            attrs["no_rw_check"] = 1
        m.submodules.acc = acc = Memory(shape=comb.acc_layout, depth=2 << _clog2(n), init=[],
                                        attrs=attrs or None)
        wr = acc.write_port()
        m.d.comb += [wr.en.eq(comb.wr_en), wr.addr.eq(comb.wr_addr), wr.data.eq(comb.wr_data)]
        if plain:
            rd_c = acc.read_port(domain="comb")
            rd_o = acc.read_port(domain="comb")
            m.d.comb += [rd_c.addr.eq(comb.rd_addr), rd_o.addr.eq(out.rd_addr)]
            m.d.sync += comb.rd_data.eq(rd_c.data)
            with m.If(out.rd_en):
                m.d.sync += out.rd_data.eq(rd_o.data)
        else:
            rd_c = acc.read_port(transparent_for=(wr,))
            rd_o = acc.read_port()
            m.d.comb += [
                rd_c.addr.eq(comb.rd_addr), comb.rd_data.eq(rd_c.data),
                rd_o.addr.eq(out.rd_addr), rd_o.en.eq(out.rd_en), out.rd_data.eq(rd_o.data),
            ]
        wiring.connect(m, wiring.flipped(self.i_w), pe.i_w)
        wiring.connect(m, wiring.flipped(self.i_x), pe.i_x)
        wiring.connect(m, wiring.flipped(self.i_rand), out.i_rand)
        wiring.connect(m, out.o, wiring.flipped(self.o))
        m.d.comb += [
            out.cfg_width.eq(self.cfg_width), out.cfg_rounding.eq(self.cfg_rounding),
            out.cfg_exp_mode.eq(self.cfg_exp_mode), out.cfg_fixed_exp.eq(self.cfg_fixed_exp),
            out.cfg_pred_k.eq(self.cfg_pred_k), out.cfg_pred_margin.eq(self.cfg_pred_margin),
            out.pred_clear.eq(self.pred_clear),
        ]

        # Pass controller: which contribution enters the combiner, and the two banks. `pop`
        # is one gate from registers: `mid_pass` (pcnt != 0) and `can_start` (registered from
        # the next state) keep the long decisions off the drain's wide enable.
        blk = Signal(range(self._max_blocks))
        pcnt = Signal(range(n))
        mid_pass = Signal()
        can_start = Signal()
        bias_phase = Signal()
        cbank = Signal()
        obank = Signal()
        bank_busy = Signal(2)
        bank_done = Signal(2)
        busy_next = Signal(2)
        pop = Signal()
        claim = Signal()
        take_bias = Signal()
        if self._pipelined:
            # Every decision is a register computed from the next state (a pass lasts N >= 4
            # cycles, so `next_last`, derived from `blk` a cycle late, is ready at its end).
            nb1 = Signal.like(blk)           # cfg_blocks - 1
            one_blk = Signal()               # cfg_blocks == 1
            next_last = Signal()             # blk + 1 == cfg_blocks - 1
            last_blk = Signal()              # blk == cfg_blocks - 1
            first = Signal(init=1)           # blk == 0
            end_pass = Signal(init=n == 1)   # pcnt == n - 1
            mid_pe = Signal()                # mid_pass outside the bias phase
            # `pop` is a flip-flop too, with one copy per group of drain lanes.
            pop_c = [Signal(name=f"pop_c{g}") for g in range(_groups(n))]
            m.d.sync += [nb1.eq(self.cfg_blocks - 1), one_blk.eq(nb1 == 0),
                         next_last.eq(blk + 1 == nb1)]
            m.d.comb += [pop.eq(pop_c[0]), pe.pop_groups.eq(Cat(pop_c))]
        else:
            last_blk = blk == self.cfg_blocks - 1
            end_pass = pcnt == n - 1
            first = blk == 0
            m.d.comb += pop.eq(~bias_phase & (mid_pass | (can_start & pe.nonempty)))
        m.d.comb += [
            pe.pop.eq(pop),
            claim.eq(pop & ~mid_pass & first),
        ]
        m.d.comb += [
            self.i_bias.ready.eq(bias_phase),
            take_bias.eq(bias_phase & self.i_bias.valid),
        ]
        blk_n = Signal.like(blk)
        pcnt_n = Signal.like(pcnt)
        bias_n = Signal()
        cbank_n = Signal()
        m.d.comb += [blk_n.eq(blk), pcnt_n.eq(pcnt), bias_n.eq(bias_phase), cbank_n.eq(cbank)]
        item = comb.item
        m.d.comb += [item.idx.eq(pcnt), item.bank.eq(cbank)]
        with m.If(pop):
            m.d.comb += [
                item.valid.eq(1), item.p.eq(pe.head.p), item.e.eq(pe.head.e),
                item.nan.eq(pe.head.nan), item.first.eq(first),
                item.final.eq(last_blk & ~self.cfg_bias_en),
                pcnt_n.eq(Mux(end_pass, 0, pcnt + 1)),
            ]
            with m.If(end_pass):
                with m.If(last_blk):
                    m.d.comb += blk_n.eq(0)
                    with m.If(self.cfg_bias_en):
                        m.d.comb += bias_n.eq(1)
                    with m.Else():
                        m.d.comb += cbank_n.eq(~cbank)
                with m.Else():
                    m.d.comb += blk_n.eq(blk + 1)
        with m.If(take_bias):
            m.d.comb += [
                item.valid.eq(1), item.p.eq(self.i_bias.payload.m),
                item.e.eq(self.i_bias.payload.e),
                item.nan.eq(self.i_bias.payload.e == -(1 << (eb - 1))),
                item.first.eq(0), item.final.eq(1),
                pcnt_n.eq(Mux(end_pass, 0, pcnt + 1)),
            ]
            with m.If(end_pass):
                m.d.comb += [bias_n.eq(0), cbank_n.eq(~cbank)]
        if self._pipelined:
            # The same next state, written from registers: mid-pass, a pop is certain, so a
            # pass's last pop is `end_pass & mid_pe`.
            # `end_pass_b`, a copy of `end_pass`, serves the bank and phase decisions (its
            # next state reads its own output, so synthesis keeps both).
            end_pass_b = Signal(init=n == 1)
            step = pop | take_bias
            adv = end_pass_b & mid_pe
            bias_end = end_pass_b & take_bias
            bias_nx = Mux(bias_phase, ~bias_end, adv & last_blk & self.cfg_bias_en)
            cbank_nx = cbank ^ ((adv & last_blk & ~self.cfg_bias_en) | bias_end)
            first_n = Mux(adv, last_blk, first)
            mid_n = Mux(mid_pass, ~(adv | bias_end), step)
            m.d.sync += [
                blk.eq(blk_n), pcnt.eq(pcnt_n), bias_phase.eq(bias_nx), cbank.eq(cbank_nx),
                mid_pass.eq(mid_n), mid_pe.eq(Mux(mid_pe, ~end_pass_b, ~bias_phase & pop)),
                first.eq(first_n),
            ]
            # Next cycle's pop: mid-pass, or a pass may start (on a product's later block, or
            # on its first block when the bank it will write is free) and the drain holds a
            # block. Written per case (in a PE pass, at its end, idle; never in the bias
            # phase). Each copy reads its own output in place of `pop`.
            # The start conditions are registers: `go_end` (at a pass's end) a cycle late (its
            # inputs settle at least N cycles before use, or, for a bank's release, err on the
            # late side), `go_idle` exact. After the bias phase, a pass starts from idle (a
            # cycle later than it could).
            go_end = Signal()
            go_idle = Signal()
            m.d.sync += [
                go_end.eq(~last_blk | (~self.cfg_bias_en & ~bank_busy.bit_select(~cbank, 1))),
                go_idle.eq(~first_n | ~bank_busy.bit_select(cbank_nx, 1)),
            ]
            for p_c in pop_c:
                nonempty_c = pe.loading | (pe.nonempty & ~(p_c & pe.last_one))
                m.d.sync += p_c.eq(Mux(mid_pe, ~end_pass | (go_end & nonempty_c),
                                       ~bias_phase & (p_c | (go_idle & nonempty_c))))
            with m.If(step):
                m.d.sync += [end_pass.eq(Mux(end_pass, n == 1, pcnt == n - 2)),
                             end_pass_b.eq(Mux(end_pass_b, n == 1, pcnt == n - 2))]
            with m.If(adv):
                m.d.sync += last_blk.eq(Mux(last_blk, one_blk, next_last))
            with m.Elif(first):
                m.d.sync += last_blk.eq(one_blk)
        else:
            m.d.sync += [
                blk.eq(blk_n), pcnt.eq(pcnt_n), bias_phase.eq(bias_n), cbank.eq(cbank_n),
                mid_pass.eq(pcnt_n != 0),
                # A pass may start on a product's later block, or on its first block when the
                # bank it will write has been released by the output unit.
                can_start.eq(~bias_n & ((blk_n != 0) | ~busy_next.bit_select(cbank_n, 1))),
            ]

        # Bank hand-over to the output unit. The release of a bank is registered (`fin`)
        # to keep the output handshake off the pass controller's paths.
        start = Signal()
        fin = Signal()
        m.d.sync += fin.eq(out.finish)
        # Pipelined, `start` is registered (the output unit reacts to it only while idle, and
        # is busy from the cycle after it reacts).
        start_dom = m.d.sync if self._pipelined else m.d.comb
        start_dom += start.eq(~out.busy & ~out.finish & ~fin & bank_done.bit_select(obank, 1))
        m.d.comb += [out.start.eq(start), out.bank.eq(obank)]
        done_next = Signal(2)
        m.d.comb += [done_next.eq(bank_done | comb.done), busy_next.eq(bank_busy)]
        with m.If(claim):
            m.d.comb += busy_next.bit_select(cbank, 1).eq(1)
        with m.If(fin):
            m.d.comb += [done_next.bit_select(obank, 1).eq(0),
                         busy_next.bit_select(obank, 1).eq(0)]
            m.d.sync += obank.eq(~obank)
        m.d.sync += [bank_done.eq(done_next), bank_busy.eq(busy_next)]
        return m
