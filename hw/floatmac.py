"""IEEE float multiply-accumulate lanes: the baseline the BFP column is measured against (#10).

:class:`FloatMAC` has the shape of the BFP column's PE array (:class:`lowbit.hw.bfp.BFPLanes`): each
beat takes one weight column (one binary16 / binary32 element per lane) and one vector element
that is broadcast to all lanes, and lane ``i`` computes ``acc_i = round(acc_i + round(w_i · x))``
(not fused, round to nearest even, flush to zero) exactly as :func:`lowbit.sim.floatmac.float_mac`
specifies. After ``cfg_len`` beats the ``N`` accumulators leave on ``o`` in one beat and the
next product starts from ``+0`` without a gap. ``docs/float_baseline.md`` has the figures.

Pipeline (every register advances together; the whole pipeline holds while ``o`` is offered
and not taken):

1. **M** — significand multipliers ``(1.f_w) · (1.f_x)`` (``p × p`` unsigned, registered; LUT
   logic or hard multipliers, see ``mult``), exponent sums, product sign and the operand classes
   (zero after flushing subnormals, Inf, NaN).
2. **R** — a fabric register after the multipliers (hard-multiplier outputs route slowly).
3. **P** — product normalisation (one bit), round to nearest even, exponent bias, flush to zero
   and overflow to Inf: the rounded product, unpacked.
4. **A** — the accumulator loop: magnitude compare and swap, alignment shifter with guard, round
   and sticky bits, add/subtract, leading-zero count, normalisation shifter, rounding, flush
   and overflow, special values. This is a one-cycle loop: the model's strict left-to-right
   order of rounded additions cannot be pipelined without interleaving independent sums, so it
   sets the Fmax (the BFP column's integer block sums have no such loop).
5. **O** — the finished accumulators, packed into bit patterns, wait on ``o``.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .common import check_int as _check_int
from .mult import MULT_STYLES, MultiplierArray

__all__ = ["FloatMAC", "FLOAT_FORMATS"]

#: Format name -> (total bits, exponent bits).
FLOAT_FORMATS = {"f16": (16, 5), "f32": (32, 8)}


def _check_choice(name, value, choices):
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {', '.join(choices)}, not {value!r}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, not {value!r}")


def _leading_zeros(v):
    """Leading-zero count of a non-zero ``v`` as a log-depth tree (don't care for zero)."""
    v = Value.cast(v)
    size = 1 << (len(v) - 1).bit_length()
    v = Cat(Const(0, size - len(v)), v)     # pad below: does not change the count of v != 0

    def tree(lo, n):
        if n == 1:
            return ~v[lo], Const(0, 0)
        half = n // 2
        z_hi, c_hi = tree(lo + half, half)
        z_lo, c_lo = tree(lo, half)
        return z_hi & z_lo, Cat(Mux(z_hi, c_lo, c_hi), z_hi)

    return tree(0, size)[1]


class FloatMAC(wiring.Component):
    """``N`` IEEE binary16 / binary32 multiply-accumulate lanes sharing one vector element.

    Parameters
    ----------
    lanes : int
        Number of lanes ``N`` (1..256).
    fmt : {"f16", "f32"}
        IEEE 754 binary16 or binary32.
    mult : {"lut", "sb_mac16", "mult18x18d"}
        Significand multiplier style, as in :mod:`lowbit.hw.mult`. ``"lut"``: a behavioural product
        register (build it with DSP inference off to get LUT logic). ``"mult18x18d"`` with
        ``"f16"``: one ECP5 MULT18X18D per lane through :class:`lowbit.hw.mult.MultiplierArray`
        (12-bit operands with a zero sign bit). Otherwise (``"sb_mac16"``: the 8×8 dual mode of
        :mod:`lowbit.hw.mult` is too narrow for an 11-bit significand; ``"mult18x18d"`` with
        ``"f32"``:
        24 bits) a behavioural product that synthesis maps onto the hard blocks (Yosys'
        ``mul2dsp``: SB_MAC16 16×16, or several blocks per product).
    max_len : int
        Largest ``cfg_len`` (1..65536).
    sim_model : bool
        Use the multipliers' behavioural model (needed for simulation; ``False`` for synthesis
        of ``"mult18x18d"`` with ``"f16"``).

    Members
    -------
    i_w : In(stream.Signature(ArrayLayout(unsigned(n), N)))
        One weight per lane per beat (bit patterns, ``n`` = 16 or 32).
    i_x : In(stream.Signature(unsigned(n)))
        The vector element of the beat, broadcast to all lanes. A beat is taken when both
        streams are valid.
    o : Out(stream.Signature(ArrayLayout(unsigned(n), N)))
        The accumulators after every ``cfg_len`` beats.
    cfg_len : In(range(max_len + 1))
        Beats per product ``K`` (0 acts as 1). Must be stable while a product is in flight.

    Latency: ``o`` is valid 5 cycles after the product's last beat is taken; one beat per cycle
    is accepted while ``o`` is not held.

    Raises
    ------
    TypeError
        For a parameter of the wrong kind (e.g. a bool or float where an int is expected).
    ValueError
        For a parameter out of range or an unknown format or style.
    """

    def __init__(self, *, lanes=16, fmt="f16", mult="lut", max_len=4096, sim_model=True):
        try:
            _check_int("Lane count", lanes, 1, 256)
            _check_choice("Format", fmt, FLOAT_FORMATS)
            _check_choice("Multiplier style", mult, MULT_STYLES)
            _check_int("Maximum product length", max_len, 1, 65536)
            if not isinstance(sim_model, bool):
                raise TypeError(f"sim_model must be a bool, not {sim_model!r}")
        except (TypeError, ValueError):
            self._MustUse__silence = True    # a rejected component is not "unused"
            raise
        self._lanes, self._fmt, self._mult = lanes, fmt, mult
        self._max_len, self._sim_model = max_len, sim_model
        self._bits, self._eb = FLOAT_FORMATS[fmt]
        self._p = self._bits - self._eb
        super().__init__({
            "i_w": In(stream.Signature(data.ArrayLayout(self._bits, lanes))),
            "i_x": In(stream.Signature(self._bits)),
            "o": Out(stream.Signature(data.ArrayLayout(self._bits, lanes))),
            "cfg_len": In(range(max_len + 1), init=1),
        })

    lanes = property(lambda self: self._lanes)
    fmt = property(lambda self: self._fmt)
    mult = property(lambda self: self._mult)
    max_len = property(lambda self: self._max_len)
    sim_model = property(lambda self: self._sim_model)
    #: Total width of a value.
    bits = property(lambda self: self._bits)
    #: Significand precision including the hidden bit.
    precision = property(lambda self: self._p)

    #: Cycles from a product's last beat being taken to ``o.valid``.
    LATENCY = 5

    def _unpacked(self):
        # e and f are meaningful only when none of zero / inf / nan is set. Combinational values
        # of this layout assign their fields unconditionally (Mux, not an m.If override): a
        # field driven only by constants in a struct that is partly assigned under m.If comes
        # out of Yosys as an `always @*` without sensitivity, which Icarus never runs
        # (tests/test_cocotb.py scans for it).
        return data.StructLayout({"s": 1, "e": self._eb, "f": self._p - 1,
                                  "zero": 1, "inf": 1, "nan": 1})

    def _decode(self, bits):
        """Sign, exponent field, fraction and the classes of a bit pattern (FTZ on input)."""
        p, eb = self._p, self._eb
        bits = Value.cast(bits)
        f, e, s = bits[:p - 1], bits[p - 1:p - 1 + eb], bits[-1]
        top = e.all()
        return s, e, f, e == 0, top & (f == 0), top & (f != 0)

    def _round(self, m, mant, rnd, sticky, exp, name):
        """Round ``mant`` (p bits, top bit set) to nearest even; return (fraction, exponent)."""
        p = self._p
        inc = rnd & (sticky | mant[0])
        mr = Signal(p + 1, name=f"{name}_mr")
        er = Signal(signed(self._eb + 2), name=f"{name}_er")
        m.d.comb += [mr.eq(mant + inc), er.eq(exp + mr[p])]
        # On a carry out, mr is 2^p and its low bits are already the fraction of 1.0.
        return mr[:p - 1], er

    def _finish(self, m, out, s, frac, er, name):
        """Flush to zero below the smallest normal, overflow to Inf, else a normal number."""
        eb = self._eb
        under = er < 1
        over = er >= (1 << eb) - 1
        special = under | over
        m.d.comb += [out.s.eq(s), out.e.eq(Mux(special, 0, er[:eb])),
                     out.f.eq(Mux(special, 0, frac)), out.zero.eq(under), out.inf.eq(over),
                     out.nan.eq(0)]

    def elaborate(self, platform):
        m = Module()
        n, p, eb, bias = self._lanes, self._p, self._eb, (1 << (self._eb - 1)) - 1
        unpacked = self._unpacked()

        # Handshake: everything advances unless a finished result is offered and not taken.
        adv = Signal()
        fire = Signal()
        m.d.comb += [
            adv.eq(~self.o.valid | self.o.ready),
            fire.eq(adv & self.i_w.valid & self.i_x.valid),
            self.i_w.ready.eq(adv & self.i_x.valid),
            self.i_x.ready.eq(adv & self.i_w.valid),
        ]
        beat = Signal(range(self._max_len))
        last = Signal()
        m.d.comb += last.eq(beat + 1 >= self.cfg_len)
        with m.If(fire):
            m.d.sync += beat.eq(Mux(last, 0, beat + 1))

        # Control bits of stages M, R, P, A: valid, first beat, last beat.
        ctl = [Signal(3, name=f"ctl_{s}") for s in "mrpa"]
        with m.If(adv):
            m.d.sync += ctl[0].eq(Cat(fire, beat == 0, fire & last))
            for a, b in zip(ctl, ctl[1:], strict=False):
                m.d.sync += b.eq(a)

        # Stage M: multipliers, exponent sums and operand classes.
        xs, xe, xf, xz, xi, xn = self._decode(self.i_x.payload)
        if self._mult == "mult18x18d" and p + 1 <= 18 and not self._sim_model:
            mul = MultiplierArray(lanes=n, width=p + 1, style="mult18x18d", sim_model=False)
            m.submodules.mult = mul
            m.d.comb += mul.en.eq(adv)
            prods = [Value.cast(mul.p[i])[:2 * p] for i in range(n)]
        else:
            prods = None
        m_prod = [Signal(2 * p, name=f"m_prod{i}") for i in range(n)]
        m_cls = [Signal(data.StructLayout({"s": 1, "esum": eb + 1, "zero": 1, "inf": 1,
                                           "nan": 1}), name=f"m_cls{i}") for i in range(n)]
        for i in range(n):
            ws, we, wf, wz, wi, wn = self._decode(self.i_w.payload[i])
            nan = wn | xn | (wi & xz) | (wz & xi)
            inf = ~nan & (wi | xi)
            if prods is None:
                with m.If(adv):
                    m.d.sync += m_prod[i].eq(Cat(wf, Const(1, 1)) * Cat(xf, Const(1, 1)))
            else:
                m.d.comb += [mul.a[i].eq(Cat(wf, Const(1, 1), Const(0, 1))),
                             mul.b[i].eq(Cat(xf, Const(1, 1), Const(0, 1))),
                             m_prod[i].eq(prods[i])]
            with m.If(adv):
                m.d.sync += m_cls[i].eq(Cat(ws ^ xs, we + xe, ~nan & ~inf & (wz | xz), inf, nan))

        # Stage R: fabric register after the multipliers.
        r_prod = [Signal(2 * p, name=f"r_prod{i}") for i in range(n)]
        r_cls = [Signal.like(m_cls[i], name=f"r_cls{i}") for i in range(n)]
        with m.If(adv):
            for i in range(n):
                m.d.sync += [r_prod[i].eq(m_prod[i]), r_cls[i].eq(m_cls[i])]

        # Stage P: the rounded product, unpacked.
        prod = [Signal(unpacked, name=f"prod{i}") for i in range(n)]
        for i in range(n):
            pr, cl = r_prod[i], r_cls[i]
            hi = pr[2 * p - 1]
            mant = Mux(hi, pr[p:], pr[p - 1:2 * p - 1])
            rnd = Mux(hi, pr[p - 1], pr[p - 2])
            sticky = Mux(hi, pr[:p - 1] != 0, pr[:p - 2] != 0)
            exp = Signal(signed(eb + 2), name=f"p{i}_exp")
            m.d.comb += exp.eq(cl.esum - bias + hi)
            frac, er = self._round(m, mant, rnd, sticky, exp, f"p{i}")
            res = Signal(unpacked, name=f"p{i}_res")
            self._finish(m, res, cl.s, frac, er, f"p{i}")
            with m.If(adv):
                m.d.sync += prod[i].eq(res)
                with m.If(cl.nan | cl.inf | cl.zero):
                    m.d.sync += [prod[i].e.eq(0), prod[i].f.eq(0), prod[i].zero.eq(cl.zero),
                                 prod[i].inf.eq(cl.inf), prod[i].nan.eq(cl.nan)]

        # Stage A: the accumulators.
        acc = [Signal(unpacked, name=f"acc{i}") for i in range(n)]
        p_valid, p_first = ctl[2][0], ctl[2][1]
        for i in range(n):
            res = self._add(m, acc[i], prod[i], p_first, f"a{i}")
            with m.If(adv & p_valid):
                m.d.sync += acc[i].eq(res)

        # Stage O: pack the finished accumulators.
        a_valid, a_last = ctl[3][0], ctl[3][2]
        with m.If(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(adv & a_valid & a_last):
            m.d.sync += self.o.valid.eq(1)
            qnan = Const(((1 << (eb + 1)) - 1) << (p - 2), eb + p - 1)
            for i in range(n):
                a = acc[i]
                mag = Mux(a.nan, qnan, Mux(a.inf, Const(((1 << eb) - 1) << (p - 1), eb + p - 1),
                                          Mux(a.zero, 0, Cat(a.f, a.e))))
                m.d.sync += self.o.payload[i].eq(Cat(mag, a.s & ~a.nan))
        return m

    @staticmethod
    def _align(m, y, d, name):
        """``y >> d`` with every bit shifted out ORed into bit 0 (the sticky bit).

        A barrel shifter whose stages collect the bits they drop, so the sticky bit needs no
        comparator on ``d``.
        """
        w = len(y)
        stages = (w - 1).bit_length()
        cur, sticky = y, Const(0, 1)
        for i in range(stages):
            amt = 1 << i
            lost = cur[:amt].any() if amt < w else cur.any()
            nxt = Signal(w, name=f"{name}_sh{i}")
            m.d.comb += nxt.eq(Mux(d[i], cur >> amt, cur))
            sticky = sticky | (d[i] & lost)
            cur = nxt
        if len(d) > stages:
            far_out = d[stages:].any()
            sticky = sticky | (far_out & y.any())
            cur = Mux(far_out, 0, cur)
        out = Signal(w, name=f"{name}_yal")
        m.d.comb += out.eq(cur | sticky)
        return out

    def _add(self, m, acc, b, first, name):
        """``round(a + b)`` with ``a = +0`` on a product's first beat, else the accumulator.

        Two paths for two finite non-zero operands, selected at the end (the classic dual-path
        adder, which keeps one long shift per path on the loop):

        * **near**: effective subtraction with exponents at most 1 apart whose difference has
          lost its top bit. Both differences ``a - b`` and ``b - a`` are formed and the
          non-negative one is normalised by a leading-zero count; the result is exact.
        * **far**: everything else. The operand with the smaller exponent is aligned with
          guard, round and sticky bits; the sum needs at most a one-bit normalisation, then
          rounding to nearest even. Result exponents ``e_max + k`` (``k`` = -1..2) and their
          flush / overflow tests are prepared beside the alignment shifter.
        """
        p, eb = self._p, self._eb
        emax_code = (1 << eb) - 1
        res = Signal(self._unpacked(), name=f"{name}_res")

        a_zero = first | acc.zero
        a_s = acc.s & ~first
        a_inf = acc.inf & ~first
        a_nan = acc.nan & ~first
        asig = Cat(acc.f, Const(1, 1))
        bsig = Cat(b.f, Const(1, 1))
        sub = acc.s ^ b.s

        dab = Signal(signed(eb + 1), name=f"{name}_dab")
        dba = Signal(signed(eb + 1), name=f"{name}_dba")
        m.d.comb += [dab.eq(acc.e - b.e), dba.eq(b.e - acc.e)]
        a_ge = ~dab[-1]
        d = Signal(eb, name=f"{name}_d")
        m.d.comb += d.eq(Mux(a_ge, dab, dba))
        xs, xe = Mux(a_ge, acc.s, b.s), Mux(a_ge, acc.e, b.e)

        # Near path: operands in units of half an ulp of the larger exponent.
        na = Mux(dba == 1, asig, Cat(Const(0, 1), asig))
        nb = Mux(dab == 1, bsig, Cat(Const(0, 1), bsig))
        r1 = Signal(p + 2, name=f"{name}_r1")
        r2 = Signal(p + 2, name=f"{name}_r2")
        m.d.comb += [r1.eq(na - nb), r2.eq(nb - na)]
        mag = Signal(p + 1, name=f"{name}_mag")
        m.d.comb += mag.eq(Mux(r1[-1], r2, r1))
        lzn = Signal(range(p + 2), name=f"{name}_lzn")
        m.d.comb += lzn.eq(_leading_zeros(mag))
        nsh = Signal(p + 1, name=f"{name}_nsh")
        m.d.comb += nsh.eq(mag << lzn)
        ne = Signal(signed(eb + 2), name=f"{name}_ne")
        m.d.comb += ne.eq(xe - lzn)
        near = Signal(self._unpacked(), name=f"{name}_near")
        m.d.comb += [near.s.eq(Mux(mag == 0, 0, Mux(r1[-1], b.s, acc.s))), near.e.eq(ne[:eb]),
                     near.f.eq(nsh[1:p]), near.zero.eq((mag == 0) | (lzn >= xe)),
                     near.inf.eq(0), near.nan.eq(0)]
        use_near = sub & ((d == 0) | ((d == 1) & ~mag[p]))

        # Far path.
        ysig = Mux(a_ge, bsig, asig)
        xwide = Cat(Const(0, 3), Mux(a_ge, asig, bsig))
        yal = self._align(m, Cat(Const(0, 3), ysig), d, name)
        total = Signal(p + 4, name=f"{name}_sum")
        m.d.comb += total.eq(Mux(sub, xwide - yal, xwide + yal))
        t3, t2 = total[p + 3], total[p + 2]
        mant = Mux(t3, total[4:], Mux(t2, total[3:p + 3], total[2:p + 2]))
        rnd = Mux(t3, total[3], Mux(t2, total[2], total[1]))
        st = Mux(t3, total[:3] != 0, Mux(t2, total[:2] != 0, total[0]))
        mr = Signal(p + 1, name=f"{name}_mr")
        m.d.comb += mr.eq(mant + (rnd & (st | mant[0])))
        # Exponent e_max + normalisation (-1, 0, +1) + rounding carry: both candidates, and
        # their flush / overflow tests, are ready before the rounding carry.
        e_opts = []
        for j in range(4):
            e_j = Signal(eb, name=f"{name}_e{j}")
            m.d.comb += e_j.eq(xe + j - 1)
            e_opts.append(e_j)
        e_norm = Mux(t3, e_opts[2], Mux(t2, e_opts[1], e_opts[0]))
        e_up = Mux(t3, e_opts[3], Mux(t2, e_opts[2], e_opts[1]))
        top1, top2 = xe == emax_code - 1, xe == emax_code - 2
        over_norm = t3 & top1
        over_up = (t3 & (top1 | top2)) | (t2 & top1)
        far = Signal(self._unpacked(), name=f"{name}_far")
        m.d.comb += [far.s.eq(xs), far.f.eq(mr[:p - 1]), far.e.eq(Mux(mr[p], e_up, e_norm)),
                     far.zero.eq(~t3 & ~t2 & ~mr[p] & (xe == 1)),
                     far.inf.eq(Mux(mr[p], over_up, over_norm))]

        m.d.comb += res.eq(Mux(use_near, near, far))

        # Zeros, infinities and NaN.
        with m.If(a_nan | b.nan | (a_inf & b.inf & (a_s != b.s))):
            m.d.comb += [res.nan.eq(1), res.inf.eq(0), res.zero.eq(0), res.s.eq(0)]
        with m.Elif(a_inf | b.inf):
            m.d.comb += [res.inf.eq(1), res.zero.eq(0), res.s.eq(Mux(a_inf, a_s, b.s))]
        with m.Elif(a_zero & b.zero):
            m.d.comb += [res.zero.eq(1), res.inf.eq(0), res.s.eq(a_s & b.s)]
        with m.Elif(a_zero):
            m.d.comb += res.eq(b)
        with m.Elif(b.zero):
            m.d.comb += res.eq(acc)
        return res
