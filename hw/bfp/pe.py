"""PE array of the BFP column (:class:`BFPLanes`): step 1 of its dataflow.

Each beat takes one weight column ``M[:, j]`` (``N`` mantissas and ``N`` row exponents) from
``i_w`` and the element ``x[j]`` (mantissa and block exponent) from ``i_x``, both in the same
cycle. The products (``lowbit.hw.mult``, registered) are summed exactly per block; after the
last beat of each block the ``N`` block sums and the exponent sums ``e3 = eM + ex`` (taken from
that beat) move into a drain register, which is shifted out one lane per cycle into the combiner
(:mod:`lowbit.hw.bfp.combiner`), or ``drain_lanes`` lanes a cycle into as many combiners. The
drain holds the row exponents ``eM`` and one copy of ``ex``: ``e3`` and the NaN test are formed
once per head lane.
"""

from amaranth.hdl import Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from lowbit.hw.bfp.shared import _GROUP, _clog2, _elem_layout, _groups
from lowbit.hw.mult import MultiplierArray

__all__ = ["BFPLanes"]


class BFPLanes(wiring.Component):
    """The PE array: multipliers, exact per-block sums, exponent adders and the drain register.

    Parameters
    ----------
    lanes, block, width, exp_bits, mult, sim_model, pipelined, hard_lanes
        As for :class:`BFPColumn` (``pipelined=False``: no fabric register R after the
        multipliers).
    drain_lanes : int
        Lanes ``G`` the drain shifts out per pop (``pipelined`` only; ``G`` divides ``N``):
        a pass of ``N / G`` pops.
    input_stage : bool
        ``pipelined`` only: a register stage I in front of the multipliers, under the same stall
        as stages M and R. ``x`` goes into one copy per group of four lanes, the weights and
        exponents into one register per lane, the beat's valid into one flip-flop per group,
        which with that group's stall copy is the group's multiplier enable. The inputs then
        fan out to 16 registers, not to every multiplier (on the ECP5-85F, 64 MULT18X18D
        across the die). One cycle more from a beat to its product; the same handshake (still
        ``ready = valid & ~hold``) and the same results.

    Members
    -------
    i_w : In(stream.Signature(StructLayout({"m": Array(signed(W), N), "e": Array(signed(E), N)})))
    i_x : In(stream.Signature(StructLayout({"m": signed(W), "e": signed(E)})))
    head : Out(StructLayout({"p": signed(PW), "e": signed(E + 1), "nan": 1}))
        The drain's head lane (valid while ``count > 0``).
    heads : Out(ArrayLayout(head, G))
        Only with ``drain_lanes`` ``G > 1``: the drain's ``G`` head lanes (``heads[0]`` is
        ``head``).
    count : Out(range(N / G + 1))
        Pops left in the drain (lanes left with ``G = 1``).
    nonempty : Out(1)
        ``count != 0``, as a register.
    pop : In(1)
        Shift the drain by ``G`` lanes this cycle (only while ``count > 0``). Once a pass has
        started, the owner pops every cycle until the drain is empty.
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
    placement (with ``"mult18x18d"`` each group's copy). The vector's exponent is kept once,
    beside the drain.
    """

    def __init__(self, *, lanes, block, width, exp_bits, mult, sim_model, pipelined=True,
                 hard_lanes=None, drain_lanes=1, input_stage=False):
        self._lanes, self._block, self._width, self._exp_bits = lanes, block, width, exp_bits
        self._pipelined = pipelined
        assert lanes % drain_lanes == 0 and (pipelined or drain_lanes == 1)
        assert pipelined or not input_stage
        self._drain = drain_lanes
        self._input_stage = input_stage
        self._pw = 2 * width + _clog2(block)
        self._mult = MultiplierArray(lanes=lanes, width=width, style=mult, sim_model=sim_model,
                                     hard_lanes=hard_lanes,
                                     en_group=_GROUP if input_stage else None)
        self._mult_style = mult
        head = data.StructLayout({"p": signed(self._pw), "e": signed(exp_bits + 1), "nan": 1})
        super().__init__({
            "i_w": In(stream.Signature(data.StructLayout({
                "m": data.ArrayLayout(signed(width), lanes),
                "e": data.ArrayLayout(signed(exp_bits), lanes)}))),
            "i_x": In(stream.Signature(_elem_layout(width, exp_bits))),
            "head": Out(head),
            **({"heads": Out(data.ArrayLayout(head, drain_lanes))} if drain_lanes > 1 else {}),
            "count": Out(range(lanes // drain_lanes + 1)),
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
        ]
        if not self._input_stage:
            m.d.comb += mult.en.eq(fire)
            for i in range(n):
                m.d.comb += [mult.a[i].eq(self.i_w.payload.m[i]),
                             mult.b[i].eq(self.i_x.payload.m)]

        if self._pipelined:
            self._elaborate_pipelined(m, fire, hold)
            return m
        # Stage M: the multipliers' product registers. Beside them the exponents of a block's
        # last beat: the row exponents per lane, the element's once. Their sum and NaN test
        # are taken once, at the drain's head, not once per lane (about 12 LUTs a lane).
        beat = Signal(range(self._block))
        beat_last = Signal()    # beat == B - 1
        m_valid = Signal()
        m_last = Signal()
        m_we = [Signal(signed(eb), name=f"m_we_{i}") for i in range(n)]
        m_ex = Signal(signed(eb))
        m.d.comb += beat_last.eq(beat == self._block - 1)
        with m.If(~hold):
            m.d.sync += [m_valid.eq(fire), m_last.eq(fire & beat_last)]
        with m.If(fire):
            m.d.sync += beat.eq(Mux(beat_last, 0, beat + 1))
        # The exponents are kept from a block's last beat until the drain loads, a cycle after
        # stage M passes that beat on; the next last beat fires a cycle after that at the
        # earliest (B >= 2, and no beat fires while the stage holds its last one).
        with m.If(fire & beat_last):
            m.d.sync += m_ex.eq(self.i_x.payload.e)
            for i in range(n):
                m.d.sync += m_we[i].eq(self.i_w.payload.e[i])
        prod = [mult.p[i] for i in range(n)]

        # The drain: N lanes of (block sum, row exponent), shifted out towards lane 0, and the
        # element exponent of their block.
        d_p = [Signal(signed(pw), name=f"d_p{i}") for i in range(n)]
        d_e = [Signal(signed(eb), name=f"d_e{i}") for i in range(n)]
        d_ex = Signal(signed(eb))
        acc = [Signal(signed(pw), name=f"acc{i}", reset_less=True) for i in range(n)]
        m.d.comb += [
            self.head.p.eq(d_p[0]), self.head.e.eq(d_e[0] + d_ex),
            self.head.nan.eq((d_e[0] == nan_code) | (d_ex == nan_code)),
        ]
        # A block's last beat is taken (`take`) while the drain is low, and the drain loads the
        # block sums from the accumulators a cycle later (`loading`), when they hold that
        # beat's product too. Low is count <= 2: mid-pass the owner pops a lane every cycle,
        # so count == 2 means its last lane is popped in the cycle of the load, which
        # overrides the shift (as count == 1 did when the drain loaded in the cycle of the
        # take). Kept as a register: it gates the whole PE pipeline.
        low = Signal(init=1)
        # `hold` (= m_valid & m_last & ~low) is computed one cycle ahead into a register: it
        # fans out to every PE register's enable.
        hold_r = Signal()
        low_next = Signal()
        pop = Signal()
        acc_en = Signal()
        take = Signal()
        loading = Signal()
        m.d.comb += [
            hold.eq(hold_r),
            pop.eq(self.pop & self.nonempty),
            acc_en.eq(m_valid & ~hold),
            take.eq(acc_en & m_last),
            low_next.eq(Mux(take | loading, 0, Mux(pop, self.count <= 3, low))),
        ]
        m.d.sync += [hold_r.eq((hold | (fire & beat_last)) & ~low_next), loading.eq(take),
                     low.eq(low_next)]
        with m.If(pop):
            m.d.sync += [self.count.eq(self.count - 1), self.nonempty.eq(self.count != 1)]
        with m.If(loading):
            m.d.sync += [self.count.eq(n), self.nonempty.eq(1), d_ex.eq(m_ex)]
        # One enable and a two-way multiplexer per register bit. Written as a pop overridden
        # by a load, synthesis keeps the hold path in logic: one more LUT per bit.
        with m.If(pop | loading):
            for i in range(n):
                nxt = (d_p[i + 1], d_e[i + 1]) if i < n - 1 else (0, 0)
                m.d.sync += [d_p[i].eq(Mux(loading, acc[i], nxt[0])),
                             d_e[i].eq(Mux(loading, m_we[i], nxt[1]))]
        # The accumulators take each product; a block's first product replaces the sum
        # (`first`, set by the last beat and at reset), which fits in the adder's LUT. Only
        # the accumulator flip-flops read the sums, so each packs with its LUT into one logic
        # cell (a sum read by the drain as well needs a cell for the flip-flop alone).
        first = Signal(init=1)
        with m.If(acc_en):
            m.d.sync += first.eq(m_last)
            for i in range(n):
                m.d.sync += acc[i].eq(Mux(first, prod[i], acc[i] + prod[i]))
        return m

    def _elaborate_pipelined(self, m, fire, hold):
        n, pw, eb, w = self._lanes, self._pw, self._exp_bits, self._width
        gd = self._drain
        npass = n // gd         # pops per pass
        nan_code = -(1 << (eb - 1))
        mult = self._mult
        ng = _groups(n)
        grp = [i // _GROUP for i in range(n)]

        # Stage M: the multipliers' product registers, with the operands' exponents beside
        # them: the row exponents per lane, the element's once (their sum and NaN test are
        # taken at the drain's head, as unpipelined).
        beat = Signal(range(self._block))
        m_valid = Signal()
        m_last = Signal()
        m_we = [Signal(signed(eb), name=f"m_we_{i}") for i in range(n)]
        m_ex = Signal(signed(eb))
        # The control copies, per group g, all next-state registers: pv / pl (stage R holds a
        # beat / a block's last beat), full (the accumulators hold a whole block sum), z (the
        # next beat starts a sum), hold (the stall: full while the drain is busy), en (stage R
        # moves into the accumulators) and load (the accumulators move into the drain). Copy 0
        # of en and z drives every accumulator (see below).
        ctl = {nm: [Signal(name=f"{nm}_g{g}", init=nm == "z") for g in range(ng)]
               for nm in ("pv", "pl", "full", "z", "hold", "en", "load")}
        hold_g, en_g, load_g, z_g = ctl["hold"], ctl["en"], ctl["load"], ctl["z"]
        x_e, w_e = self.i_x.payload.e, self.i_w.payload.e
        if self._input_stage:
            # Stage I: each group's copy of x and of the valid, and its multipliers' enable
            # (the copies' enables are the group's stall copies, so synthesis keeps them
            # apart). The beat that enters stage M is the one in stage I.
            i_v = [Signal(name=f"i_v_g{g}") for g in range(ng)]
            i_xm = [Signal(signed(w), name=f"i_xm_g{g}") for g in range(ng)]
            i_wm = [Signal(signed(w), name=f"i_wm{i}") for i in range(n)]
            i_we = [Signal(signed(eb), name=f"i_we{i}") for i in range(n)]
            i_xe = Signal(signed(eb))
            for g in range(ng):
                with m.If(~hold_g[g]):
                    m.d.sync += [i_v[g].eq(self.i_w.valid & self.i_x.valid),
                                 i_xm[g].eq(self.i_x.payload.m)]
                m.d.comb += mult.en[g].eq(i_v[g] & ~hold_g[g])
            with m.If(~hold_g[0]):
                m.d.sync += i_xe.eq(x_e)
            for i in range(n):
                with m.If(~hold_g[grp[i]]):
                    m.d.sync += [i_wm[i].eq(self.i_w.payload.m[i]), i_we[i].eq(w_e[i])]
                m.d.comb += [mult.a[i].eq(i_wm[i]), mult.b[i].eq(i_xm[grp[i]])]
            fire = i_v[0] & ~hold
            x_e, w_e = i_xe, i_we
        beat_last = Signal()    # beat == B - 1, a register
        with m.If(~hold):
            m.d.sync += [m_valid.eq(fire), m_last.eq(fire & beat_last)]
        with m.If(fire):
            m.d.sync += [beat.eq(Mux(beat_last, 0, beat + 1)),
                         beat_last.eq(beat == self._block - 2)]
        # The exponent registers take only a block's last beat: they hold it in stage M until
        # the drain loads it, three cycles later at the earliest (the next last beat comes
        # B beats later, and stage M is stalled while a block sum waits).
        # While the next beat is a last one they take every cycle's inputs (the fired beat's
        # come last: `beat_last` falls with the fire), so the enable is two flip-flops.
        # `i_x`'s exponent goes to one register: a test of it fanned out to every lane was
        # the 64-lane column's critical path.
        with m.If(~hold_g[0] & beat_last):
            m.d.sync += m_ex.eq(x_e)
        for i in range(n):
            with m.If(~hold_g[grp[i]] & beat_last):
                m.d.sync += m_we[i].eq(w_e[i])
        # Stage R: a fabric register after the hard multipliers (their outputs route slowly).
        prod = [Signal(signed(2 * w), name=f"prod{i}") for i in range(n)]
        for i in range(n):
            with m.If(~hold_g[grp[i]]):
                m.d.sync += prod[i].eq(mult.p[i])
        if self._block < 3:
            # With B = 2 the next last beat reaches stage M before the drain loads: keep the
            # exponents in stage R too.
            r_we = [Signal(signed(eb), name=f"r_we_{i}") for i in range(n)]
            r_ex = Signal(signed(eb))
            with m.If(~hold_g[0] & m_last):
                m.d.sync += r_ex.eq(m_ex)
            for i in range(n):
                with m.If(~hold_g[grp[i]] & m_last):
                    m.d.sync += r_we[i].eq(m_we[i])
            m_we, m_ex = r_we, r_ex

        # The drain: N lanes of (block sum, row exponent), shifted out towards lane 0, and the
        # element exponent of their block.
        d_p = [Signal(signed(pw), name=f"d_p{i}") for i in range(n)]
        d_e = [Signal(signed(eb), name=f"d_e{i}") for i in range(n)]
        d_ex = Signal(signed(eb))
        acc = [Signal(signed(pw), name=f"acc{i}") for i in range(n)]
        # The pops left, also in thermometer code (bit i: count > i) for one-LUT tests.
        therm = Signal(npass)
        m.d.comb += [
            self.head.p.eq(d_p[0]), self.head.e.eq(d_e[0] + d_ex),
            self.head.nan.eq((d_e[0] == nan_code) | (d_ex == nan_code)),
            hold.eq(hold_g[0]),
            self.loading.eq(load_g[0]),
            self.nonempty.eq(therm[0]),
            self.last_one.eq(therm[0] & ~therm[1] if npass > 1 else therm[0]),
        ]
        for j in range(1, gd):
            m.d.comb += [
                self.heads[j].p.eq(d_p[j]), self.heads[j].e.eq(d_e[j] + d_ex),
                self.heads[j].nan.eq((d_e[j] == nan_code) | (d_ex == nan_code)),
            ]
        if gd > 1:
            m.d.comb += self.heads[0].eq(self.head)
        # A block may load while count <= 1 (count == 1 only happens mid-pass, when the last
        # lanes are popped this cycle). A pop implies count > 0.
        low_next = Signal()
        m.d.comb += low_next.eq(Mux(load_g[0], npass <= 1,
                                    Mux(self.pop, ~therm[2] if npass > 2 else 1,
                                        ~therm[1] if npass > 1 else 1)))
        with m.If(self.pop):
            m.d.sync += therm.eq(therm >> 1)
        with m.If(load_g[0]):
            m.d.sync += [therm.eq(-1), d_ex.eq(m_ex)]
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
            m.d.sync += self.count.eq(npass)
        for i in range(n):
            g = grp[i]
            if i < n - gd:
                with m.If(self.pop_groups[g]):
                    m.d.sync += [d_p[i].eq(d_p[i + gd]), d_e[i].eq(d_e[i + gd])]
            with m.If(load_g[g]):
                m.d.sync += [d_p[i].eq(acc[i]), d_e[i].eq(m_we[i])]
            # iCE40: one enable for every accumulator. Its wide fan-out makes nextpnr put it
            # on a global network, which keeps each accumulator's carry chain (LUTs of four
            # inputs with their flip-flops) within a logic tile's 32 local inputs, so
            # unsplit. ECP5 (MULT18X18D) has no such limit and nextpnr-ecp5 keeps the enable
            # in general routing, where one copy for 64 lanes took 6-9 ns: a copy per group.
            c = g if self._mult_style == "mult18x18d" else 0
            with m.If(en_g[c]):
                m.d.sync += acc[i].eq(Mux(z_g[c], prod[i], acc[i] + prod[i]))
