"""The BFP column's top (:class:`BFPColumn`): the units, the accumulator memory and the passes.

:class:`BFPColumn` connects the PE array (:mod:`lowbit.hw.bfp.pe`), the combiner
(:mod:`lowbit.hw.bfp.combiner`) and the output unit (:mod:`lowbit.hw.bfp.output`) around the
accumulator memory, and holds the pass controller and the bank hand-over. The pass controller
decides each cycle whether a drain lane or a bias beat enters the combiner. Double banking: a
product accumulates into one bank while the output unit drains the other; the combiner waits
before starting a product into a bank that is still being read.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from lowbit.hw.bfp.combiner import BlockCombiner
from lowbit.hw.bfp.output import OutputUnit
from lowbit.hw.bfp.pe import BFPLanes
from lowbit.hw.bfp.shared import _clog2, _elem_layout, _groups, column_widths, no_init
from lowbit.hw.bfp.window import check_window
from lowbit.hw.common import Rounding, any_of
from lowbit.hw.common import check_int as _check_int
from lowbit.hw.mult import MULT_STYLES, check_hard_lanes
from lowbit.sim.topparams import check_drain_lanes

__all__ = ["BFPColumn", "check_drain_lanes"]


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
    hard_lanes : int or None
        At most this many lanes (0..``lanes``) use ``mult``; the others are LUT-logic
        multipliers that synthesis never maps to a DSP (:class:`lowbit.hw.mult.MultiplierArray`
        ``hard_lanes``): a column wider than the device's DSP budget. ``None``: every lane.
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
    pipelined_combiner : bool
        With ``pipelined=False``: the pipelined column's four-stage combiner (its exponent
        subtractor and its align decision in stages of their own, see
        :class:`BlockCombiner`), the rest unpipelined. The combiner's read-align-shift-add
        path is the unpipelined column's slowest (26.9 MHz at ``N = 16`` on the UP5K, 45.9
        with the stages, for about 110 LC). The accumulator's read port for the combiner is
        transparent to its write port at ``N = 4``, where the combiner reads a lane again in
        the cycle it writes the lane's update. The same results; an update is written two
        cycles later. Ignored with ``pipelined=True``, whose combiner has these stages and,
        from ``N = 6``, two more.
    window : int or None
        Build the windowed mean/σ exponent selector of seed 002 claim 1
        (:class:`~lowbit.hw.bfp.WindowPredictor`, ``cfg_exp_mode`` 3) with this window length
        (512, 1024 or 8192 output magnitudes in block RAM), and the ``cfg_pred_tol`` port.
        ``None`` (the default) leaves both out; mode 3 is then the max rule.
    drain_lanes : int
        Lanes ``G`` the drain moves into the combiner per cycle (1..``lanes / 4``, a power of
        two dividing ``lanes``; ``G > 1`` needs ``pipelined``): ``G`` combiners, each with its
        own accumulator memory of the lanes ``l`` with ``l mod G = g``. A block's ``N`` sums
        then drain in ``N / G`` cycles, so a column of ``N > B`` lanes is not drain-bound at
        ``G = N / B`` (``N · B / max(N, B)`` MAC/cycle with ``G = 1``). The bias still takes
        one beat per cycle; the output unit still emits one element per cycle. The same
        results (each lane's sums are combined in the same order).
    input_stage : bool
        ``pipelined`` only: a register stage in front of the multipliers (``x`` in one copy per
        group of four lanes, the weights in one register per lane, the enables per group; see
        :class:`BFPLanes`), so that the column's inputs fan out to ``N / 4`` registers rather
        than to ``N`` multipliers (the 64-lane column's input path on the ECP5-85F). One cycle
        more from a beat to its product; the same handshake and the same results.

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
        modes clear its history), 3 = the windowed mean/σ prediction with ``window``
        (:class:`~lowbit.hw.bfp.WindowPredictor`, the same fallback; the other modes clear its
        history), else as 0.
    cfg_fixed_exp : In(signed(E))
    cfg_pred_k : In(3), init 3
        Predicted mode: spread multiple ``k`` (1..7; 0 acts as 1) of the prediction
        ``μ + k·dev``.
    cfg_pred_margin : In(3), init 2
        Predicted mode: underflow margin ``u``.
    pred_clear : In(1)
        Pulse: clear the predicted modes' histories at the next product's exponent selection.
    cfg_pred_tol : In(3)
        Only with ``window``: the error tolerance ``t`` of claim 21 (0..7).
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
                 stochastic=True, acc_block_ram=False, pipelined=True, window=None,
                 pipelined_combiner=False, hard_lanes=None, drain_lanes=1, input_stage=False):
        try:
            self._validate(lanes, block, width, exp_bits, max_blocks, frac_bits, rand_bits,
                           mult, sim_model, stat_shift, predictor, stochastic, acc_block_ram,
                           pipelined, pipelined_combiner)
            if not isinstance(input_stage, bool):
                raise TypeError(f"input_stage must be a bool, not {input_stage!r}")
            if input_stage and not pipelined:
                raise ValueError("input_stage needs pipelined=True")
            check_hard_lanes(hard_lanes, lanes)
            check_drain_lanes(drain_lanes, lanes, pipelined)
            if window is not None:
                check_window(window)
        except (TypeError, ValueError):
            self._MustUse__silence = True    # a rejected component is not "unused"
            raise
        self._lanes, self._block, self._width, self._exp_bits = lanes, block, width, exp_bits
        self._max_blocks, self._frac_bits, self._rand_bits = max_blocks, frac_bits, rand_bits
        self._mult, self._sim_model, self._stat_shift = mult, sim_model, stat_shift
        self._predictor, self._stochastic = predictor, stochastic
        self._acc_block_ram, self._pipelined = acc_block_ram, pipelined
        self._pipelined_combiner = pipelined_combiner
        self._window = window
        self._hard_lanes = hard_lanes
        self._drain_lanes = drain_lanes
        self._input_stage = input_stage
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
            **({"cfg_pred_tol": In(3)} if window is not None else {}),
        })

    @staticmethod
    def _validate(lanes, block, width, exp_bits, max_blocks, frac_bits, rand_bits, mult,
                  sim_model, stat_shift, predictor, stochastic, acc_block_ram, pipelined,
                  pipelined_combiner=False):
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
                            ("acc_block_ram", acc_block_ram), ("pipelined", pipelined),
                            ("pipelined_combiner", pipelined_combiner)):
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
    pipelined_combiner = property(lambda self: self._pipelined_combiner)
    window = property(lambda self: self._window)
    #: Lanes of the ``mult`` style (``None``: every lane); the others are fabric multipliers.
    hard_lanes = property(lambda self: self._hard_lanes)
    #: Lanes the drain moves into the combiners per cycle.
    drain_lanes = property(lambda self: self._drain_lanes)
    #: A register stage in front of the multipliers.
    input_stage = property(lambda self: self._input_stage)
    #: Width of the exact block sum.
    pw = property(lambda self: self._pw)
    #: Width of the accumulator.
    aw = property(lambda self: self._aw)

    def elaborate(self, platform):
        m = Module()
        n, eb = self._lanes, self._exp_bits
        gd = self._drain_lanes
        npass = n // gd             # drain pops (combiner items) per pass
        kg = _clog2(gd)
        m.submodules.pe = pe = BFPLanes(lanes=n, block=self._block, width=self._width,
                                        exp_bits=eb, mult=self._mult, sim_model=self._sim_model,
                                        pipelined=self._pipelined,
                                        hard_lanes=self._hard_lanes, drain_lanes=gd,
                                        input_stage=self._input_stage)
        # One combiner per drain lane g: combiner g updates lanes g, g + G, g + 2G, ... in its
        # own accumulator memory (index l // G).
        combs = []
        for g in range(gd):
            comb = BlockCombiner(
                lanes=npass, pw=self._pw, aw=self._aw, exp_bits=eb, frac_bits=self._frac_bits,
                pipelined=self._pipelined or self._pipelined_combiner,
                deep=None if self._pipelined else False)
            m.submodules["comb" if gd == 1 else f"comb{g}"] = comb
            combs.append(comb)
        comb = combs[0]
        m.submodules.out = out = OutputUnit(lanes=n, aw=self._aw, width=self._width,
                                            exp_bits=eb, frac_bits=self._frac_bits,
                                            rand_bits=self._rand_bits,
                                            acc_layout=comb.acc_layout,
                                            stat_shift=self._stat_shift,
                                            predictor=self._predictor,
                                            stochastic=self._stochastic,
                                            pipelined=self._pipelined,
                                            window=self._window)
        attrs = {"ram_style": "block"} if self._acc_block_ram else {}
        # Unpipelined, the combiner writes a lane two cycles after reading it (with
        # `pipelined_combiner` four) and reads it again N >= 4 cycles after, and the output
        # unit reads the other bank: no read-write collision happens while the write comes
        # first, so ``no_rw_check`` spares synthesis the collision logic (the read registers
        # must then be described in the fabric to merge into the RAM). Where the combiner
        # reads a lane in the cycle it writes it (N equal to the write delay), its read port
        # is transparent to the write port instead.
        plain = not self._pipelined
        transparent = plain and comb.write_delay >= n
        if plain:
            attrs["no_rw_check"] = 1
            # Two memories, A and (ea, nan), written together: the output unit reads them at
            # different addresses (`rd_addr_a`, `rd_addr`; see OutputUnit). The same block
            # RAMs as one memory of both (A is 16 bits and a part, ea and nan a part).
            depth = 2 << _clog2(n)
            m.submodules.acc_a = acc_a = Memory(shape=signed(self._aw), depth=depth, init=[],
                                                attrs=attrs)
            m.submodules.acc_e = acc_e = Memory(
                shape=data.StructLayout({"ea": signed(eb + 1), "nan": 1}), depth=depth,
                init=[], attrs=attrs)
            # Each read register is described in the fabric, to merge into its block RAM.
            # Its power-up value is left undefined for synthesis (`NO_INIT`): the block RAM's
            # output register has none, and a defined one (or a reset) costs a flip-flop and
            # an AND gate per bit to emulate (about 70 LUTs at N = 16). Every reader ignores
            # the data until its valid flag, which the reset clears.
            for tag, mem, o_addr, fields in (("a", acc_a, out.rd_addr_a, None),
                                             ("e", acc_e, out.rd_addr, ("ea", "nan"))):
                wr = mem.write_port()
                rd_c = (mem.read_port(transparent_for=(wr,)) if transparent
                        else mem.read_port(domain="comb"))
                rd_o = mem.read_port(domain="comb")
                q_c = Signal(mem.shape, reset_less=True, attrs=no_init(platform),
                             name=f"acc_{tag}_rc")
                q_o = Signal(mem.shape, reset_less=True, attrs=no_init(platform),
                             name=f"acc_{tag}_ro")
                m.d.comb += [wr.en.eq(comb.wr_en), wr.addr.eq(comb.wr_addr),
                             rd_c.addr.eq(comb.rd_addr), rd_o.addr.eq(o_addr)]
                if transparent:
                    m.d.comb += q_c.eq(rd_c.data)
                else:
                    m.d.sync += q_c.eq(rd_c.data)
                with m.If(out.rd_en):
                    m.d.sync += q_o.eq(rd_o.data)
                if fields is None:
                    m.d.comb += [wr.data.eq(comb.wr_data.a), comb.rd_data.a.eq(q_c),
                                 out.rd_data.a.eq(q_o)]
                    continue
                for name in fields:
                    m.d.comb += [wr.data[name].eq(comb.wr_data[name]),
                                 comb.rd_data[name].eq(q_c[name]),
                                 out.rd_data[name].eq(q_o[name])]
        else:
            def acc_memory(name, cb, depth, rd_addr):
                # Combiner `cb`'s accumulator memory: its read and write ports, and the output
                # unit's read port (returned) at `rd_addr`.
                m.submodules[name] = acc = Memory(shape=cb.acc_layout, depth=depth, init=[],
                                                  attrs=attrs or None)
                wr = acc.write_port()
                m.d.comb += [wr.en.eq(cb.wr_en), wr.addr.eq(cb.wr_addr),
                             wr.data.eq(cb.wr_data)]
                rd_c = acc.read_port(transparent_for=(wr,))
                rd_o = acc.read_port()
                m.d.comb += [rd_c.addr.eq(cb.rd_addr), cb.rd_data.eq(rd_c.data),
                             rd_o.addr.eq(rd_addr), rd_o.en.eq(out.rd_en)]
                return rd_o

            if gd == 1:
                m.d.comb += out.rd_data.eq(
                    acc_memory("acc", comb, 2 << _clog2(n), out.rd_addr).data)
            else:
                # The output unit reads lane l at Cat(l, bank): memory l mod G, word
                # Cat(l // G, bank); the lane's memory is selected a cycle later, after the
                # read.
                lw = _clog2(n)
                sel = Signal(kg)
                with m.If(out.rd_en):
                    m.d.sync += sel.eq(out.rd_addr[:kg])
                with m.Switch(sel):
                    for g, cb in enumerate(combs):
                        rd_o = acc_memory(f"acc{g}", cb, 2 << _clog2(npass),
                                          Cat(out.rd_addr[kg:lw], out.rd_addr[lw]))
                        with m.Case(g):
                            m.d.comb += out.rd_data.eq(rd_o.data)
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
        if self._window is not None:
            m.d.comb += out.cfg_pred_tol.eq(self.cfg_pred_tol)

        # Pass controller: which contribution enters the combiner, and the two banks. `pop`
        # is one gate from registers: `mid_pass` (pcnt != 0) and `can_start` (registered from
        # the next state) keep the long decisions off the drain's wide enable.
        blk = Signal(range(self._max_blocks))
        pcnt = Signal(range(npass))
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
            end_pass = Signal(init=npass == 1)   # pcnt == npass - 1
            mid_pe = Signal()                # mid_pass outside the bias phase
            # `pop` is a flip-flop too, with one copy per group of drain lanes.
            pop_c = [Signal(name=f"pop_c{g}") for g in range(_groups(n))]
            m.d.sync += [nb1.eq(self.cfg_blocks - 1), one_blk.eq(nb1 == 0),
                         next_last.eq(blk + 1 == nb1)]
            m.d.comb += [pop.eq(pop_c[0]), pe.pop_groups.eq(Cat(pop_c))]
        else:
            last_blk = blk == self.cfg_blocks - 1
            end_pass = pcnt == npass - 1
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
        # With G > 1 drain lanes the bias beats still come one per cycle: beat `bsub` of a
        # group of G goes to combiner `bsub`, and the pass counter steps after the group's last.
        if gd == 1:
            bias_adv = take_bias
        else:
            bsub = Signal(kg)
            bias_adv = Signal()
            m.d.comb += bias_adv.eq(take_bias & (bsub == gd - 1))
            with m.If(take_bias):
                m.d.sync += bsub.eq(bsub + 1)
        blk_n = Signal.like(blk)
        pcnt_n = Signal.like(pcnt)
        bias_n = Signal()
        cbank_n = Signal()
        m.d.comb += [blk_n.eq(blk), pcnt_n.eq(pcnt), bias_n.eq(bias_phase), cbank_n.eq(cbank)]
        items = [cb.item for cb in combs]
        for item in items:
            m.d.comb += [item.idx.eq(pcnt), item.bank.eq(cbank)]
        with m.If(pop):
            for g, item in enumerate(items):
                head = pe.head if gd == 1 else pe.heads[g]
                m.d.comb += [
                    item.valid.eq(1), item.p.eq(head.p), item.e.eq(head.e),
                    item.nan.eq(head.nan), item.first.eq(first),
                    item.final.eq(last_blk & ~self.cfg_bias_en),
                ]
            m.d.comb += pcnt_n.eq(Mux(end_pass, 0, pcnt + 1))
            with m.If(end_pass):
                with m.If(last_blk):
                    m.d.comb += blk_n.eq(0)
                    with m.If(self.cfg_bias_en):
                        m.d.comb += bias_n.eq(1)
                    with m.Else():
                        m.d.comb += cbank_n.eq(~cbank)
                with m.Else():
                    m.d.comb += blk_n.eq(blk + 1)
        def advance_bias():
            m.d.comb += pcnt_n.eq(Mux(end_pass, 0, pcnt + 1))
            with m.If(end_pass):
                m.d.comb += [bias_n.eq(0), cbank_n.eq(~cbank)]

        with m.If(take_bias):
            for g, item in enumerate(items):
                m.d.comb += [
                    item.valid.eq(1 if gd == 1 else bsub == g), item.p.eq(self.i_bias.payload.m),
                    item.e.eq(self.i_bias.payload.e),
                    item.nan.eq(self.i_bias.payload.e == -(1 << (eb - 1))),
                    item.first.eq(0), item.final.eq(1),
                ]
            if gd == 1:
                advance_bias()
        if gd > 1:
            with m.If(bias_adv):
                advance_bias()
        if self._pipelined:
            # The same next state, written from registers: mid-pass, a pop is certain, so a
            # pass's last pop is `end_pass & mid_pe`.
            # `end_pass_b`, a copy of `end_pass`, serves the bank and phase decisions (its
            # next state reads its own output, so synthesis keeps both).
            end_pass_b = Signal(init=npass == 1)
            step = pop | bias_adv
            adv = end_pass_b & mid_pe
            bias_end = end_pass_b & bias_adv
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
                m.d.sync += [end_pass.eq(Mux(end_pass, npass == 1, pcnt == npass - 2)),
                             end_pass_b.eq(Mux(end_pass_b, npass == 1, pcnt == npass - 2))]
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
        if self._pipelined:
            # Whether any lane of a bank is NaN, for the output unit's fixed mode (no scan): a
            # lane's NaN flag only ever rises within a product (it is sticky from the lane's
            # first contribution on), so the OR of every write's flag since the bank was
            # released is the OR of the bank's final flags.
            bank_nan = Signal(2)
            nan_set = Signal(2)
            m.d.comb += nan_set.eq(Cat(*(any_of(cb.wr_en & cb.wr_data.nan
                                                & (cb.wr_addr[-1] == b) for cb in combs)
                                         for b in (0, 1))))
            m.d.comb += [out.start.eq(start), out.bank.eq(obank),
                         out.bank_nan.eq(bank_nan.bit_select(obank, 1))]
        else:
            m.d.comb += [out.start.eq(start), out.bank.eq(obank)]
        done_next = Signal(2)
        # The last lane's combiner finishes a bank last (its last item is the last bias beat).
        m.d.comb += [done_next.eq(bank_done | combs[-1].done), busy_next.eq(bank_busy)]
        with m.If(claim):
            m.d.comb += busy_next.bit_select(cbank, 1).eq(1)
        if self._pipelined:
            nan_next = Signal(2)
            m.d.comb += nan_next.eq(bank_nan | nan_set)
            with m.If(fin):
                m.d.comb += [done_next.bit_select(obank, 1).eq(0),
                             busy_next.bit_select(obank, 1).eq(0),
                             nan_next.bit_select(obank, 1).eq(0)]
                m.d.sync += obank.eq(~obank)
            m.d.sync += bank_nan.eq(nan_next)
        else:
            with m.If(fin):
                m.d.comb += [done_next.bit_select(obank, 1).eq(0),
                             busy_next.bit_select(obank, 1).eq(0)]
                m.d.sync += obank.eq(~obank)
        m.d.sync += [bank_done.eq(done_next), bank_busy.eq(busy_next)]
        return m
