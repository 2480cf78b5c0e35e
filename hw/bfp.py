"""Block-floating-point systolic MAC column (DESIGN §3.2, seed 002 Figs. 1, 4, 5).

The column computes ``y = M · x (+ b)`` for BFP operands with ``N`` processing elements (one per
output row). Its arithmetic — exact block products, exponent adder, cross-block accumulation with
fraction guard bits, bias path, output exponent selector and output mantissa shifter — is
specified in :mod:`sim.bfp_column`, whose :class:`~sim.bfp_column.ColumnModel` it matches bit
for bit. ``docs/bfp.md`` describes the architecture.

Dataflow
--------
1. **PE array** (:class:`BFPLanes`): each beat takes one weight column ``M[:, j]`` (``N``
   mantissas and ``N`` row exponents) from ``i_w`` and the element ``x[j]`` (mantissa and block
   exponent) from ``i_x``, both in the same cycle. The products (``hw.mult``, registered) are
   summed exactly per block; on the last beat of each block the ``N`` block sums and the exponent
   sums ``e3 = eM + ex`` (taken from that beat) move into a drain register.
2. **Combiner** (:class:`BlockCombiner`, shared by all lanes): the drain is shifted out one lane
   per cycle into a 4-stage read–align–shift–add pipeline that updates the lane's accumulator
   ``(A, ea, nan)`` in a double-banked memory. After the last block, when ``cfg_bias_en`` is
   set, ``N`` bias beats from ``i_bias`` pass through the same pipeline (exponent subtractor,
   bias shifter, bias adder).
3. **Output unit** (:class:`OutputUnit`): scans the finished bank for the largest
   ``bitlen(|A|) + ea`` (output exponent selector), then emits one output mantissa per beat on
   ``o`` with the output mantissa shifter, rounding and saturation. In stochastic mode it takes
   one ``i_rand`` beat per output element. The next product is accumulated into the other bank
   meanwhile.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .common import Rounding
from .mult import MULT_STYLES, MultiplierArray

__all__ = ["BFPColumn", "BFPLanes", "BlockCombiner", "OutputUnit", "ExpMode", "column_widths"]


class ExpMode:
    """Values of the ``cfg_exp_mode`` port (the golden model's ``exp_mode`` names)."""
    MAX = 0
    FIXED = 1


def _clog2(n):
    return (n - 1).bit_length()


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


def _check_int(name, value, lo, hi):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer between {lo} and {hi}, not {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer between {lo} and {hi}, not {value}")
    return value


def _elem_layout(width, exp_bits):
    return data.StructLayout({"m": signed(width), "e": signed(exp_bits)})


class BFPLanes(wiring.Component):
    """The PE array: multipliers, exact per-block sums, exponent adders and the drain register.

    Parameters
    ----------
    lanes, block, width, exp_bits, mult, sim_model
        As for :class:`BFPColumn`.

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
    """

    def __init__(self, *, lanes, block, width, exp_bits, mult, sim_model):
        self._lanes, self._block, self._width, self._exp_bits = lanes, block, width, exp_bits
        self._pw = 2 * width + _clog2(block)
        self._mult = MultiplierArray(lanes=lanes, width=width, style=mult, sim_model=sim_model)
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
        # Stage R: a fabric register after the hard multipliers (their outputs route slowly).
        p_valid = Signal()
        p_last = Signal()
        prod = [Signal(signed(2 * self._width), name=f"prod{i}") for i in range(n)]
        e3 = [Signal(signed(eb + 1), name=f"e3_{i}") for i in range(n)]
        nan = [Signal(name=f"nan_{i}") for i in range(n)]
        with m.If(~hold):
            m.d.sync += [p_valid.eq(m_valid), p_last.eq(m_last)]
            for i in range(n):
                m.d.sync += [prod[i].eq(mult.p[i]), e3[i].eq(m_e3[i]), nan[i].eq(m_nan[i])]

        # The drain: N lanes of (block sum, e3, nan), shifted out towards lane 0.
        d_p = [Signal(signed(pw), name=f"d_p{i}") for i in range(n)]
        d_e = [Signal(signed(eb + 1), name=f"d_e{i}") for i in range(n)]
        d_nan = [Signal(name=f"d_nan{i}") for i in range(n)]
        acc = [Signal(signed(pw), name=f"acc{i}") for i in range(n)]
        can_load = Signal()
        m.d.comb += [
            hold.eq(p_valid & p_last & ~can_load),
            self.head.p.eq(d_p[0]), self.head.e.eq(d_e[0]), self.head.nan.eq(d_nan[0]),
        ]
        # A block may load while count <= 1 (count == 1 only happens mid-pass, when the last
        # lane is popped this cycle). Kept as a register: it gates the whole PE pipeline.
        low = Signal(init=1)
        m.d.comb += can_load.eq(low)
        with m.If(self.pop & (self.count != 0)):
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


class BlockCombiner(wiring.Component):
    """Pipeline that merges one ``(P, e)`` contribution per cycle into a lane's accumulator.

    Stages: S0 issue (memory read), S1 exponent subtractor and zero tests, S1b align decision
    and shift amount, S2 shift, S3 add and write back. The memory read port must be transparent
    to the write port when ``N`` < 5 (a lane is read again in the cycle its update is
    written). Implements step 2 of :mod:`sim.bfp_column` exactly.

    Members
    -------
    item : In(StructLayout)
        ``valid, idx, bank, p, e, nan, first, final``: the contribution entering S0.
    done : Out(2)
        One-cycle pulse per bank whose final item was written.
    rd_addr / rd_data / wr_*
        Ports of the accumulator memory (owned by :class:`BFPColumn`).
    """

    def __init__(self, *, lanes, pw, aw, exp_bits, frac_bits):
        self._lanes, self._pw, self._aw, self._eb, self._f = lanes, pw, aw, exp_bits, frac_bits
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
        aw, eb, f = self._aw, self._eb, self._f
        it = self.item
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
        m.d.sync += [
            t.valid.eq(s1.valid), t.idx.eq(s1.idx), t.bank.eq(s1.bank), t.final.eq(s1.final),
            t.nan.eq((~s1.first & self.rd_data.nan) | s1.nan),
            t.e.eq(s1.e), t.ea.eq(ea), t.d.eq(s1.e - ea), t.a.eq(a), t.c.eq(s1.p << f),
            t.a_zero.eq(a == 0), t.p_zero.eq(s1.p == 0),
        ]

        # S1b: which operand to align, and by how much (clamped to AW - 1).
        s2 = Signal(data.StructLayout({
            "valid": 1, "idx": range(self._lanes), "bank": 1, "final": 1, "nan": 1,
            "ea": signed(eb + 1), "sh": signed(aw), "amt": range(aw), "add": signed(aw)}))
        m.d.sync += [
            s2.valid.eq(t.valid), s2.idx.eq(t.idx), s2.bank.eq(t.bank),
            s2.final.eq(t.final), s2.nan.eq(t.nan),
        ]
        with m.If(t.a_zero):
            m.d.sync += [s2.sh.eq(t.c), s2.amt.eq(0), s2.add.eq(0), s2.ea.eq(t.e)]
        with m.Elif(t.p_zero):
            m.d.sync += [s2.sh.eq(t.a), s2.amt.eq(0), s2.add.eq(0), s2.ea.eq(t.ea)]
        with m.Elif(t.d > 0):
            m.d.sync += [s2.sh.eq(t.a), s2.add.eq(t.c), s2.ea.eq(t.e),
                         s2.amt.eq(Mux(t.d >= aw - 1, aw - 1, t.d))]
        with m.Else():
            m.d.sync += [s2.sh.eq(t.c), s2.add.eq(t.a), s2.ea.eq(t.ea),
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
        return m


class OutputUnit(wiring.Component):
    """Output exponent selector and output mantissa shifter; one output element per beat.

    A scan pass reads the bank's ``N`` accumulators (memory read, ``|A|``, leading-one
    detector, ``+ ea``, running maximum) and selects and clamps ``e4`` in two more cycles. The
    emit pass is a pipeline (memory read, shift amount, clamps, coarse and fine barrel shift
    with sticky bits, rounding decision, increment, saturation) that accepts one element per
    cycle and stalls as a whole while ``o`` is held or a stochastic rounding waits for
    ``i_rand``.

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
    i_rand, o : streams; cfg_* : configuration (see :class:`BFPColumn`).
    """

    def __init__(self, *, lanes, aw, width, exp_bits, frac_bits, rand_bits, acc_layout):
        self._lanes, self._aw, self._w, self._eb = lanes, aw, width, exp_bits
        self._f, self._r = frac_bits, rand_bits
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
            "cfg_exp_mode": In(1),
            "cfg_fixed_exp": In(signed(exp_bits)),
        })

    def elaborate(self, platform):
        m = Module()
        n, aw, w, eb, f, r = self._lanes, self._aw, self._w, self._eb, self._f, self._r
        e_max = (1 << (eb - 1)) - 1
        nan_code = -(1 << (eb - 1))
        bank = Signal()
        idx = Signal(range(n + 1))
        m.d.comb += self.rd_addr.eq(Cat(idx[:_clog2(n)], bank))

        # Configuration-only values, registered (the configuration is static during a product).
        mx = Signal(w)
        neg_mx = Signal(signed(w + 1))
        m.d.sync += [mx.eq((Const(1, w + 1) << (self.cfg_width - 1).as_unsigned()) - 1),
                     neg_mx.eq(-mx)]

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
        bitlen = Signal(range(aw + 1))
        nonzero, msb = _leading_one(s_abs)
        m.d.comb += bitlen.eq(Mux(nonzero, msb + 1, 0))
        qv = Signal()
        q_a = Signal(signed(aw))
        q_ea = Signal(signed(eb + 1))
        m.d.sync += [rv.eq(0), qv.eq(rv), sv.eq(qv), tv.eq(sv & (s_abs != 0)),
                     t_len.eq(bitlen), t_ea.eq(s_ea)]
        with m.If(rv):
            m.d.sync += [q_a.eq(self.rd_data.a), q_ea.eq(self.rd_data.ea),
                         any_nan.eq(any_nan | self.rd_data.nan)]
        with m.If(qv):
            m.d.sync += [s_abs.eq(Mux(q_a < 0, -q_a, q_a)), s_ea.eq(q_ea)]
        uv = Signal()
        m.d.sync += [top.eq(t_len + t_ea), uv.eq(tv)]
        with m.If(uv):
            m.d.sync += any_nz.eq(1)
            with m.If(~any_nz | (top > top_max)):
                m.d.sync += top_max.eq(top)

        # -- emit pipeline ---------------------------------------------------------------------
        en = Signal()
        issuing = Signal()
        stochastic = self.cfg_rounding == Rounding.STOCHASTIC
        # Stages: A shift amount, B clamps, C1/C2 shifters, D rounding decision, E increment,
        # then saturation into the output register.
        v0, va, vb, vc1, vc, vd, ve = (Signal(name=f"v{c}")
                                       for c in ("0", "a", "b", "c1", "c", "d", "e"))
        a_a = Signal(signed(aw))
        a_s = Signal(signed(eb + 4))
        b_a = Signal(signed(aw))
        b_left = Signal()
        b_sr = Signal(range(aw + r + 1))
        b_sl = Signal(range(w + 2))
        c1_left = Signal()
        c1_lsh = Signal(signed(aw + w + 1))
        c1_x = Signal(signed(aw + r))
        c1_lo = Signal(3)
        c1_sticky = Signal()
        c1_neg = Signal()
        c_left = Signal()
        c_lsh = Signal(signed(aw + w + 1))
        c_qext = Signal(signed(aw + r))
        c_sticky = Signal()
        c_neg = Signal()
        d_left = Signal()
        d_lsh = Signal(signed(w + 2))
        d_q = Signal(signed(w + 2))
        d_up = Signal()
        e_val = Signal(signed(w + 3))

        max_right = aw + r
        m.d.comb += self.rd_en.eq(en | ~issuing)
        with m.If(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(en):
            m.d.sync += [v0.eq(issuing & (idx < n)), va.eq(v0), vb.eq(va), vc1.eq(vb),
                         vc.eq(vc1), vd.eq(vc)]
            m.d.sync += [a_a.eq(self.rd_data.a), a_s.eq(e4 - self.rd_data.ea + f)]
            m.d.sync += [
                b_a.eq(a_a),
                b_left.eq(a_s <= 0),
                b_sr.eq(Mux(a_s >= max_right, max_right, a_s)),
                b_sl.eq(Mux(-a_s >= w + 1, w + 1, -a_s)),
            ]
            # Stages C1/C2: the right shift by multiples of 8, then by 0..7, each with the
            # sticky OR of the bits it drops.
            x = Signal(signed(aw + r))
            mask_hi = Signal(aw + r)
            sr_hi = Cat(Const(0, 3), b_sr[3:])
            m.d.comb += [x.eq(b_a << r),
                         mask_hi.eq(~(Const(-1, signed(aw + r + 1)) << sr_hi))]
            m.d.sync += [
                c1_left.eq(b_left),
                c1_lsh.eq(b_a << b_sl),
                c1_x.eq(x >> sr_hi),
                c1_lo.eq(b_sr[:3]),
                c1_sticky.eq((x.as_unsigned() & mask_hi) != 0),
                c1_neg.eq(b_a < 0),
            ]
            mask_lo = Signal(8)
            m.d.comb += mask_lo.eq(~(Const(-1, signed(9)) << c1_lo))
            m.d.sync += [
                c_left.eq(c1_left),
                c_lsh.eq(c1_lsh),
                c_qext.eq(c1_x >> c1_lo),
                c_sticky.eq(c1_sticky | ((c1_x.as_unsigned()[:8] & mask_lo) != 0)),
                c_neg.eq(c1_neg),
            ]
            q = Signal(signed(aw + w + 2))
            f_r = Signal(r)
            up = Signal()
            m.d.comb += [q.eq(c_qext >> r), f_r.eq(c_qext[:r])]
            with m.Switch(self.cfg_rounding):
                with m.Case(Rounding.NEAREST_EVEN):
                    below = ((f_r[:r - 1] != 0) | c_sticky) if r > 1 else c_sticky
                    m.d.comb += up.eq(f_r[r - 1] & (below | q[0]))
                with m.Case(Rounding.TOWARD_ZERO):
                    m.d.comb += up.eq(c_neg & ((f_r != 0) | c_sticky))
                with m.Default():
                    m.d.comb += up.eq((f_r + self.i_rand.payload)[r])
            # Values beyond ±2^W saturate anyway: narrow them to [-2^W, 2^W] before the
            # increment (sign and zero tests of the high bits, no comparator carry chain).
            def narrow(v):
                hi = v[w:]
                big = ~hi[-1] & (hi != 0)
                small = hi[-1] & ~hi.all()
                return Mux(big, 1 << w, Mux(small, -(1 << w), v[:w + 1].as_signed()))
            m.d.sync += [
                d_left.eq(c_left), d_up.eq(up), d_q.eq(narrow(q)), d_lsh.eq(narrow(c_lsh)),
            ]
            # Stage E: rounding increment. Stage F: saturation into the output register.
            m.d.sync += [e_val.eq(Mux(d_left, d_lsh, d_q + d_up)), ve.eq(vd)]
            sat = Signal(signed(w))
            with m.If(e_val > mx):
                m.d.comb += sat.eq(mx)
            with m.Elif(e_val < neg_mx):
                m.d.comb += sat.eq(neg_mx)
            with m.Else():
                m.d.comb += sat.eq(e_val)
            m.d.sync += [
                self.o.valid.eq(ve),   # overrides the clear below when the pipeline moves
                self.o.payload.m.eq(Mux(nan_blk, 0, sat)),
                self.o.payload.e.eq(Mux(nan_blk, nan_code, e4)),
            ]
            with m.If(issuing & (idx < n)):
                m.d.sync += idx.eq(idx + 1)
        # The whole emit pipeline moves unless the output is held, or stage D waits for a
        # random number.
        need_rand = vc & stochastic
        m.d.comb += [
            en.eq((~self.o.valid | self.o.ready) & (~need_rand | self.i_rand.valid)),
            self.i_rand.ready.eq(need_rand & (~self.o.valid | self.o.ready)),
        ]

        raw = Signal(signed(eb + 4))
        accepted = Signal(range(n + 1))
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += accepted.eq(accepted + 1)

        m.d.comb += self.busy.eq(1)
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.busy.eq(0)
                with m.If(self.start):
                    m.d.sync += [bank.eq(self.bank), idx.eq(0), any_nz.eq(0), any_nan.eq(0)]
                    m.next = "SCAN"
            with m.State("SCAN"):
                with m.If(idx == n - 1):
                    m.next = "SCAN_TAIL"
                m.d.sync += [idx.eq(idx + 1), rv.eq(1)]
            with m.State("SCAN_TAIL"):
                with m.If(~rv & ~qv & ~sv & ~tv & ~uv):
                    m.next = "SELECT"
            with m.State("SELECT"):
                with m.If(self.cfg_exp_mode == ExpMode.FIXED):
                    m.d.sync += raw.eq(self.cfg_fixed_exp)
                with m.Elif(any_nz):
                    m.d.sync += raw.eq(top_max - f - (self.cfg_width - 1))
                with m.Else():
                    m.d.sync += raw.eq(0)
                m.next = "CLAMP"
            with m.State("CLAMP"):
                m.d.sync += [
                    e4.eq(Mux(raw > e_max, e_max, Mux(raw < -e_max, -e_max, raw))),
                    nan_blk.eq(any_nan),
                    idx.eq(0),
                    accepted.eq(0),
                ]
                m.next = "EMIT"
            with m.State("EMIT"):
                m.d.comb += issuing.eq(1)
                with m.If((accepted == n - 1) & self.o.valid & self.o.ready):
                    m.d.comb += self.finish.eq(1)
                    m.next = "IDLE"
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
        Multiplier style (see :mod:`hw.mult`).
    sim_model : bool
        Use the multipliers' behavioural model (needed for simulation; ``False`` for synthesis
        of the hard-block styles).

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
    cfg_exp_mode : In(1)
        :class:`ExpMode`: 0 = max over the output vector, 1 = fixed.
    cfg_fixed_exp : In(signed(E))
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
                 rand_bits=8, mult="lut", sim_model=True):
        try:
            self._validate(lanes, block, width, exp_bits, max_blocks, frac_bits, rand_bits,
                           mult, sim_model)
        except (TypeError, ValueError):
            self._MustUse__silence = True    # a rejected component is not "unused"
            raise
        self._lanes, self._block, self._width, self._exp_bits = lanes, block, width, exp_bits
        self._max_blocks, self._frac_bits, self._rand_bits = max_blocks, frac_bits, rand_bits
        self._mult, self._sim_model = mult, sim_model
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
            "cfg_exp_mode": In(1),
            "cfg_fixed_exp": In(signed(exp_bits)),
            "cfg_bias_en": In(1),
            "cfg_blocks": In(range(max_blocks + 1), init=1),
        })

    @staticmethod
    def _validate(lanes, block, width, exp_bits, max_blocks, frac_bits, rand_bits, mult,
                  sim_model):
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

    lanes = property(lambda self: self._lanes)
    block = property(lambda self: self._block)
    width = property(lambda self: self._width)
    exp_bits = property(lambda self: self._exp_bits)
    max_blocks = property(lambda self: self._max_blocks)
    frac_bits = property(lambda self: self._frac_bits)
    rand_bits = property(lambda self: self._rand_bits)
    mult = property(lambda self: self._mult)
    sim_model = property(lambda self: self._sim_model)
    #: Width of the exact block sum.
    pw = property(lambda self: self._pw)
    #: Width of the accumulator.
    aw = property(lambda self: self._aw)

    def elaborate(self, platform):
        m = Module()
        n, eb = self._lanes, self._exp_bits
        m.submodules.pe = pe = BFPLanes(lanes=n, block=self._block, width=self._width,
                                        exp_bits=eb, mult=self._mult, sim_model=self._sim_model)
        m.submodules.comb = comb = BlockCombiner(lanes=n, pw=self._pw, aw=self._aw,
                                                 exp_bits=eb, frac_bits=self._frac_bits)
        m.submodules.out = out = OutputUnit(lanes=n, aw=self._aw, width=self._width,
                                            exp_bits=eb, frac_bits=self._frac_bits,
                                            rand_bits=self._rand_bits,
                                            acc_layout=comb.acc_layout)
        m.submodules.acc = acc = Memory(shape=comb.acc_layout, depth=2 << _clog2(n), init=[])
        wr = acc.write_port()
        rd_c = acc.read_port(transparent_for=(wr,))
        rd_o = acc.read_port()
        m.d.comb += [
            rd_c.addr.eq(comb.rd_addr), comb.rd_data.eq(rd_c.data),
            rd_o.addr.eq(out.rd_addr), rd_o.en.eq(out.rd_en), out.rd_data.eq(rd_o.data),
            wr.en.eq(comb.wr_en), wr.addr.eq(comb.wr_addr), wr.data.eq(comb.wr_data),
        ]
        wiring.connect(m, wiring.flipped(self.i_w), pe.i_w)
        wiring.connect(m, wiring.flipped(self.i_x), pe.i_x)
        wiring.connect(m, wiring.flipped(self.i_rand), out.i_rand)
        wiring.connect(m, out.o, wiring.flipped(self.o))
        m.d.comb += [
            out.cfg_width.eq(self.cfg_width), out.cfg_rounding.eq(self.cfg_rounding),
            out.cfg_exp_mode.eq(self.cfg_exp_mode), out.cfg_fixed_exp.eq(self.cfg_fixed_exp),
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
        last_blk = blk == self.cfg_blocks - 1
        end_pass = pcnt == n - 1
        pop = Signal()
        claim = Signal()
        m.d.comb += [
            pop.eq(~bias_phase & (mid_pass | (can_start & pe.nonempty))),
            pe.pop.eq(pop),
            claim.eq(pop & ~mid_pass & (blk == 0)),
        ]
        take_bias = Signal()
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
                item.nan.eq(pe.head.nan), item.first.eq(blk == 0),
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
        m.d.comb += [
            start.eq(~out.busy & ~out.finish & ~fin & bank_done.bit_select(obank, 1)),
            out.start.eq(start), out.bank.eq(obank),
        ]
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
