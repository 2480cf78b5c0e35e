"""Output unit of the BFP column (:class:`OutputUnit`): step 3 of its dataflow.

The unit scans the finished bank for the largest ``bitlen(|A|) + ea``, selects ``e4`` (max rule,
fixed, or predicted by the :class:`~lowbit.hw.bfp.predictor.ExponentPredictor` from the
statistics of earlier products, with the max rule as the fallback on overflow/underflow), then
emits one output mantissa per beat through the output mantissa shifter, rounding and saturation
and an output FIFO onto ``o``. In stochastic mode it takes one ``i_rand`` beat per output
element. The next product is accumulated into the other bank meanwhile.
"""

import contextlib
from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Shape, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from lowbit.hw.bfp.predictor import ExponentPredictor
from lowbit.hw.bfp.shared import ExpMode, _clog2, _elem_layout, _leading_one, no_init
from lowbit.hw.bfp.window import WindowPredictor
from lowbit.hw.common import Rounding

__all__ = ["OutputUnit"]


#: Depth of the output unit's FIFO: covers the emit pipeline's round trip (issue -> FIFO ->
#: accepted -> credit), so a ready consumer takes one element per cycle.
_EMIT_FIFO_DEPTH = 16


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
    the product's last element (see ``finish``).

    Pipelined, the fixed mode skips the scan (unless the predictor is still busy with an
    earlier product's update): ``e4`` is the configured exponent whatever the accumulators
    hold, and whether a lane is NaN comes from ``bank_nan``, so the emit pass starts about
    ``N + 6`` cycles sooner. (The unpipelined unit, the iCEBreaker's area profile, scans in
    every mode: there the flags' logic cost the top its 36 MHz at one placement seed.)

    Members
    -------
    start : In(1)
        Pulse: the bank ``bank`` holds a finished product.
    bank : In(1)
    bank_nan : In(1)
        Pipelined only. With ``start``: whether any lane of the bank is NaN (the OR of the NaN
        flags the scan would read), for the fixed mode's skipped scan.
    busy : Out(1)
    finish : Out(1)
        One-cycle pulse when the last element of the bank was accepted on ``o`` (with a
        predictor) or written into the output FIFO (without one: the bank is free then, and
        the FIFO holds the product for the consumer).
    rd_addr / rd_en / rd_data
        Read port of the accumulator memory.
    rd_addr_a
        Unpipelined only: the address of the accumulators' A, whose memory is separate from
        that of ea and the NaN flag (``rd_addr``); both read into ``rd_data``.
    i_rand, o : streams; cfg_*, pred_clear : configuration (see :class:`BFPColumn`).
    """

    def __init__(self, *, lanes, aw, width, exp_bits, frac_bits, rand_bits, acc_layout,
                 stat_shift=4, predictor=True, stochastic=True, pipelined=True, window=None):
        self._lanes, self._aw, self._w, self._eb = lanes, aw, width, exp_bits
        self._f, self._r, self._stat_shift = frac_bits, rand_bits, stat_shift
        self._predictor, self._stochastic = predictor, stochastic
        self._pipelined = pipelined
        self._window = window
        extra = {"cfg_pred_tol": In(3)} if window else {}
        super().__init__({
            "start": In(1),
            "bank": In(1),
            **({"bank_nan": In(1)} if pipelined else {}),
            "busy": Out(1),
            "finish": Out(1),
            "rd_addr": Out(_clog2(lanes) + 1),
            **({} if pipelined else {"rd_addr_a": Out(_clog2(lanes) + 1)}),
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
            **extra,
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
        # The windowed mean/σ predictor (mode 3), only on a column built with `window`.
        windowed = Const(0, 1)
        pred_eu = pred.unit_exp
        if self._window:
            m.submodules.wpred = wpred = WindowPredictor(width=w, exp_bits=eb,
                                                         window=self._window)
            m.d.comb += [wpred.sample_valid.eq(self.o.valid & self.o.ready),
                         wpred.sample.eq(self.o.payload.m), wpred.tol.eq(self.cfg_pred_tol)]
            m.d.sync += wpred.commit.eq(self.finish)
            windowed = self.cfg_exp_mode == ExpMode.WINDOW
            pred_eu = Signal(signed(max(len(pred.unit_exp), len(wpred.unit_exp)) + 1))
            m.d.comb += pred_eu.eq(Mux(windowed, wpred.unit_exp, pred.unit_exp))
        # A clear request waits for the next exponent selection.
        clear_req = Signal()
        with m.If(self.pred_clear):
            m.d.sync += clear_req.eq(1)
        e_max = (1 << (eb - 1)) - 1
        nan_code = -(1 << (eb - 1))
        bank = Signal()
        idx = Signal(range(n + 1))
        emitting = Signal()     # unpipelined: in EMIT (set with it, a register)
        if self._pipelined:
            m.d.comb += self.rd_addr.eq(Cat(idx[:_clog2(n)], bank))
        else:
            # Unpipelined, the accumulators' A (`rd_addr_a`) and their ea and NaN flag
            # (`rd_addr`) are separate memories, each read where it is used: the emit pass
            # reads A a cycle after ea (its shift amount comes first), the scan reads ea two
            # cycles after A (|A| and its leading one come first). Two delayed copies of the
            # index and two address multiplexers replace 44 flip-flops that delayed the data.
            idx_d1 = Signal(_clog2(n))
            idx_d2 = Signal(_clog2(n))
            lane = idx[:_clog2(n)]
            m.d.sync += [idx_d1.eq(lane), idx_d2.eq(idx_d1)]
            m.d.comb += [
                self.rd_addr.eq(Cat(Mux(emitting, lane, idx_d2), bank)),
                self.rd_addr_a.eq(Cat(Mux(emitting, idx_d1, lane), bank)),
            ]

        # Configuration-only values, registered (the configuration is static during a product).
        mx = Signal(w)
        neg_mx = Signal(signed(w + 1))
        fw = Signal(range(f + w + 1))   # F + W - 1: raw = top_max - fw
        hm = Signal(w + 2)              # unpipelined: bit j is j >= W - 1
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
            # The saturation's limits as one thermometer code, bit j: j >= W - 1 (see stage F).
            m.d.sync += [hm.eq(Cat(self.cfg_width <= j + 1 for j in range(w + 2))),
                         fw.eq(f + self.cfg_width - 1)]

        # -- scan: |A| -> bitlen(|A|) + ea -> running maximum ------------------------------
        rv = Signal()
        sv = Signal()
        tv = Signal()
        s_abs = Signal(aw)
        s_ea = Signal(signed(eb + 1))
        t_len = Signal(range(aw + 1))
        t_ea = Signal(signed(eb + 1))
        # top = bitlen(|A|) + ea lies in [-2^E, aw + 2^E - 1]: E + 3 bits unless the
        # accumulator is wide against the exponent range (e.g. W = 16 with E <= 4).
        tb = max(eb + 3, Shape.cast(range(-(1 << eb), aw + (1 << eb))).width)
        top = Signal(signed(tb))
        top_max = Signal(signed(tb))
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
        # Unpipelined, the groups' non-zero tests are taken a stage earlier, with s_abs (s_gnz):
        # stage T then selects the group from flip-flops.
        s_gnz = Signal(len(groups))
        for j, grp in enumerate(groups):
            nz_j, idx_j = _leading_one(grp)
            merged += [g_nz[j].eq(nz_j if self._pipelined else s_gnz[j]),
                       g_idx[j].eq(idx_j)]                      # stage G (merged)
        bitlen = Signal(range(aw + 1))
        # Unpipelined, stage T keeps the leading one's position (0 with no bit set) and
        # top's stage adds bitlen's remaining 1 + s_corr (t_add, with ea): no adder between
        # the leading-one detector and the register.
        t_add = Signal(2)
        for j in range(len(groups)):    # the highest non-zero group wins
            pos_j = Cat(g_idx[j], Const(j, 8))
            with m.If(g_nz[j]):
                m.d.comb += bitlen.eq(pos_j + 1 if self._pipelined else pos_j)
        qv = Signal()
        q_a = Signal(signed(aw))
        q_ea = Signal(signed(eb + 1))
        xv = Signal()           # pipelined: stage X (the low half of the negation) valid
        s_neg = Signal()        # unpipelined: A < 0 (s_abs holds ~A)
        s_corr = Signal()       # unpipelined: A = -2^k (|A| is one longer than ~A)
        m.d.sync += [rv.eq(0), sv.eq(xv if self._pipelined else qv),
                     tv.eq(gv & ((g_nz != 0) | s_neg)), t_len.eq(bitlen)]
        if not self._pipelined:
            # bitlen(|A|) = t_len + t_add: position + 1 + s_corr with a bit set, else s_corr.
            m.d.sync += t_add.eq(Cat((g_nz != 0) ^ s_corr, (g_nz != 0) & s_corr))
        merged += [gv.eq(sv)]
        if self._pipelined:
            m.d.sync += [t_ea.eq(g_ea), g_ea.eq(s_ea)]
        else:
            m.d.comb += t_ea.eq(self.rd_data.ea)     # read two cycles after A
        # Stage Q (merged): the memory's output register, copied. Pipelined, it copies every
        # cycle and the emit pipeline reads it too (its stage Q): nothing but a flip-flop
        # follows the memory (an ECP5 DP16KD without its output register takes 5.8 ns from
        # clock to data).
        if self._pipelined:
            m.d.sync += [qv.eq(rv), q_a.eq(self.rd_data.a), q_ea.eq(self.rd_data.ea)]
        else:
            m.d.comb += [qv.eq(rv), q_a.eq(self.rd_data.a), q_ea.eq(self.rd_data.ea)]
        nv = Signal()           # unpipelined: the scan's NaN flag is read (with ea) in stage T
        if self._pipelined:
            with m.If(rv):
                m.d.sync += any_nan.eq(any_nan | self.rd_data.nan)
        else:
            m.d.sync += nv.eq(gv)
            with m.If(nv):
                m.d.sync += any_nan.eq(any_nan | self.rd_data.nan)
        uv = Signal()
        scan_empty = Signal(init=1)
        top_gt = Signal(signed(tb + 1))
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
            # bitlen(|A|) from A's ones' complement: ~A = |A| - 1 for A < 0, one bit
            # shorter exactly when A = -2^k (A's bits are ones, then zeros). Against a
            # negation (a carry chain) and a multiplexer: 20 LUTs fewer at AW = 26.
            with m.If(qv):
                ones = (q_a ^ q_a[-1].replicate(aw))[:aw]
                m.d.sync += [
                    s_abs.eq(ones),
                    s_gnz.eq(Cat(ones[i:i + 8] != 0 for i in range(0, aw, 8))),
                    s_neg.eq(q_a[-1]),
                    s_corr.eq(q_a[-1] & ~Cat(~q_a[i + 1] & q_a[i] for i in range(aw - 1)).any()),
                ]
            m.d.sync += [top.eq(t_len + t_add + t_ea), uv.eq(tv)]
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
        # Without pipelining, stage A is combinational (merged into B), the fine shift (C2)
        # and the rounding decision (D) follow stage C1's register into stage E's, and the
        # increment comes with the saturation (F).
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
        # Unpipelined, stage C keeps the fraction and q[:W]: q[W] is the sign unless `c_ov`.
        c_qext = Signal(signed(xw if self._pipelined else rr + w))
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
            # e4 + F + W + 1 needs more than E + 1 bits when F + W + 1 > 2^(E-1) (W = 16
            # with E = 5: up to 15 + 20).
            e4_off = Signal(range(-(1 << (eb - 1)), (1 << (eb - 1)) + f + w + 1))
            m.d.sync += [e4_off.eq(e4 + (f + w + 1)), a_a.eq(q_a), a_s.eq(e4_off - q_ea)]
        else:
            merged += a_s.eq(e4 - self.rd_data.ea + (f + w + 1))
        if self._pipelined:
            m.d.sync += b_a.eq(a_a)
        else:
            m.d.comb += b_a.eq(self.rd_data.a)      # read a cycle after ea
        m.d.sync += b_sr.eq(Mux(a_s < 0, 0, Mux(a_s >= xw, xw, a_s)))
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
        c_ov = Signal()         # unpipelined: the value is beyond +-2^W (hi, below, not all sign)
        mask_lo = Signal(8)
        if self._pipelined:
            m.d.sync += [
                c1_x.eq(x >> sr_hi),
                c1_lo.eq(b_sr[:3]),
                c1_sticky.eq(sticky_hi),
                c1_neg.eq(b_a < 0),
            ]
            m.d.comb += mask_lo.eq(~(Const(-1, signed(9)) << c1_lo))
            m.d.sync += [
                c_qext.eq(c1_x >> c1_lo),
                c_sticky.eq(c1_sticky | ((c1_x.as_unsigned()[:8] & mask_lo) != 0)),
                c_neg.eq(c1_neg),
            ]
        else:
            # The register between stages B and E is stage C1's (after the coarse shift, from
            # the memory's output): the fine shift of the R + W + 1 bits that round (`c_qext`
            # is that narrow; c1_x keeps the bits up to R + W + 7 for it), its sticky bit and
            # the flag below come after it, merged into stage D.
            b_neg = b_a < 0
            # The flag for the bits above the window, `q[W:]` not all equal to the sign: the
            # bits of the fine shift's input from R + W + lo up, and below the coarse shift
            # the bytes of A from 7 + 8h up (their part taken in stage C1, c1_ov). The
            # shifter's upper bits and the flag's 27-bit tests cost about 110 LUTs and 26
            # flip-flops; the flag alone about 30 LUTs.
            grp = [Cat(b_a[i] ^ b_neg for i in range(j, min(j + 8, aw))).any()
                   for j in range(7, aw, 8)]
            coarse = [g_nz & (b_sr[3:] <= g) for g, g_nz in enumerate(grp)]
            c1_ov = Signal()
            m.d.sync += [
                c1_x.eq(x >> sr_hi),
                c1_lo.eq(b_sr[:3]),
                c1_sticky.eq(sticky_hi),
                c1_neg.eq(b_neg),
                c1_ov.eq(Cat(*coarse).any()),
            ]
            lo_hi = rr + w          # c1_x[lo_hi + i], i >= lo: above the window
            fine = [(c1_x[lo_hi + i] ^ c1_neg) & (c1_lo <= i)
                    for i in range(8) if lo_hi + i < xw]
            m.d.comb += [
                mask_lo.eq(~(Const(-1, signed(9)) << c1_lo)),
                c_qext.eq(c1_x >> c1_lo),
                c_sticky.eq(c1_sticky | ((c1_x.as_unsigned()[:8] & mask_lo) != 0)),
                c_neg.eq(c1_neg),
                c_ov.eq(Cat(*fine, c1_ov).any()),
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
        # increment (sign and zero tests of the high bits, no comparator carry chain;
        # unpipelined, the tests are the flag `c_ov` of stage C).
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
            big = ~c_neg & c_ov
            small = c_neg & c_ov
            # Stage E registers the rounding decision and its operand; stage F increments and
            # saturates into the output FIFO.
            m.d.sync += [d_up.eq(up),
                         d_q.eq(Mux(big, 1 << w,
                                    Mux(small, -(1 << w), Cat(q[:w], c_neg).as_signed())))]
            m.d.comb += e_val.eq(d_q + d_up)
            # The limits are +-mx = +-(2^(W-1) - 1): e_val > mx when it is positive with a bit
            # at or above W - 1 set; e_val < -mx when it is negative with a bit there clear,
            # or it is -2^(W-1) (those bits set, the ones below clear). mx's bit j is ~hm[j]
            # and -mx's hm[j] | (j == 0), so each output bit is one LUT. Against two
            # subtractions and a three-way choice: 22 LUTs, 34 carries, 7 flip-flops fewer.
            neg = e_val[-1]
            above = Cat(e_val[j] & hm[j] for j in range(w + 2)).any()
            clear = Cat(~e_val[j] & hm[j] for j in range(w + 2)).any()
            low_zero = Cat(~e_val[j] | hm[j] for j in range(w + 2)).all()
            gt = ~neg & above
            lt = neg & (clear | low_zero)
            sat = Signal(signed(w))
            m.d.comb += sat.eq(Cat(Mux(gt, ~hm[j], Mux(lt, hm[j] | (j == 0), e_val[j]))
                                   for j in range(w)))
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
            # The output FIFO, with the timing of a SyncFIFOBuffered (a memory and an output
            # register that takes the oldest entry when it is empty or being read). The
            # credits keep at most 16 entries in it, so the pointers tell empty from full and
            # a read never meets a write to its address: `no_rw_check` spares synthesis the
            # collision logic (15 flip-flops and their multiplexers), and the read register,
            # described in the fabric, merges into the block RAM (without a reset or a
            # power-up value, `NO_INIT`, as the block RAM's: `o.valid` is what the reset
            # clears).
            m.submodules.fifo = fifo = Memory(shape=w + eb, depth=_EMIT_FIFO_DEPTH, init=[],
                                              attrs={"no_rw_check": 1})
            f_wr = fifo.write_port()
            f_rd = fifo.read_port(domain="comb")
            f_wp = Signal(range(_EMIT_FIFO_DEPTH))
            f_rp = Signal(range(_EMIT_FIFO_DEPTH))
            f_ov = Signal()                         # the read register holds an element
            f_data = Signal(w + eb, reset_less=True, attrs=no_init(platform))
            f_take = Signal()
            m.d.comb += [
                f_wr.en.eq(w_en), f_wr.addr.eq(f_wp),
                f_wr.data.eq(Cat(Mux(nan_blk, 0, sat), o_e)),
                f_rd.addr.eq(f_rp),
                f_take.eq((f_wp != f_rp) & (~f_ov | self.o.ready)),
                self.o.valid.eq(f_ov), self.o.payload.eq(f_data),
            ]
            with m.If(w_en):
                m.d.sync += f_wp.eq(f_wp + 1)
            with m.If(f_take):
                m.d.sync += [f_rp.eq(f_rp + 1), f_data.eq(f_rd.data), f_ov.eq(1)]
            with m.Elif(self.o.ready):
                m.d.sync += f_ov.eq(0)
        with m.If(issue):
            m.d.sync += [idx.eq(idx + 1), more.eq(idx != n - 1)]

        raw = Signal(signed(tb + 1))
        dwin = Signal(signed(max(len(raw), len(pred_eu)) + 1))
        in_window = Signal()
        raw_c = Signal(signed(eb))
        raw_hi = Signal()       # pipelined: raw > e_max, registered in CHECK
        raw_lo = Signal()       # pipelined: raw < -e_max
        if not (self._predictor or self._window):
            # Without a predictor e4 is the clamped exponent, which holds still from WINDOW
            # until the next product's: no copy of it in CLAMP (8 flip-flops).
            m.d.comb += e4.eq(raw_c)
        # The product ends (``finish``, the bank released) at its last element's acceptance
        # with a predictor, which samples the accepted elements; without one, at its last
        # element's write into the FIFO, which holds the exponent with each element, so the
        # bank is free while the consumer has not taken the product yet.
        accepted = Signal(range(n + 1))
        acc_last = Signal()      # accepted == n - 1, as a register
        counted = w_en if not (self._predictor or self._window) else self.o.valid & self.o.ready
        with m.If(counted):
            m.d.sync += [accepted.eq(accepted + 1), acc_last.eq(accepted == n - 2)]

        tail_busy = pred.busy | wpred.busy if self._window else pred.busy
        tail_done = ~rv & scan_empty & ~tail_busy
        emit_done = acc_last & counted
        raw_max = top_max - fw
        if self._pipelined:
            # Registered. `tail_done`: once true in SCAN_TAIL it stays true (no read is issued
            # there, and the predictor was started by the previous product's commit, long
            # before). `emit_done`: the last element (`finish` follows it a cycle later).
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
            if self._window:
                wbegin_q = Signal()
                m.d.sync += wbegin_q.eq(0)
                m.d.comb += [wpred.begin.eq(wbegin_q), wpred.restart.eq(restart_q),
                             wpred.e4.eq(raw_c), wpred.width.eq(self.cfg_width),
                             wpred.k.eq(self.cfg_pred_k)]
        fsm = _OneHotFSM(m, states) if self._pipelined else _FSM(m)
        with fsm:
            with fsm.state("IDLE"):
                m.d.comb += self.busy.eq(0)
                with m.If(self.start):
                    m.d.sync += [bank.eq(self.bank), idx.eq(0), any_nz.eq(0), any_nan.eq(0)]
                    if self._pipelined:
                        m.d.sync += top_max.eq(-1 << (len(top_max) - 1))
                        # The fixed mode needs no scan: the exponent is the register, and the
                        # NaN flag comes with the bank. (An earlier product's predictor update
                        # still running waits in SCAN_TAIL as before.)
                        with m.If((self.cfg_exp_mode == ExpMode.FIXED) & ~tail_busy):
                            m.d.sync += any_nan.eq(self.bank_nan)
                            fsm.goto("SELECT")
                        with m.Else():
                            fsm.goto("SCAN")
                    else:
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
                m.d.sync += dwin.eq(pred_eu - raw)
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
            pmode = predicted
            if self._window:
                usable = Mux(windowed, wpred.usable, pred.usable) & ~clear_req
                pmode = predicted | windowed
            if self._pipelined:
                with fsm.state("DECIDE"):
                    m.d.sync += use_pred_r.eq(pmode & usable & (in_window | ~any_nz))
                    fsm.goto("CLAMP")
            with fsm.state("CLAMP"):
                use_pred = (use_pred_r if self._pipelined
                            else pmode & usable & (in_window | ~any_nz))
                e4_sel = Mux(use_pred, pred_eu, raw_c)
                if self._predictor or self._window:
                    m.d.sync += e4.eq(e4_sel)
                m.d.sync += [
                    o_e.eq(Mux(any_nan, nan_code, e4_sel)),
                    nan_blk.eq(any_nan),
                    idx.eq(0),
                    more.eq(1),
                    accepted.eq(0),
                    acc_last.eq(0),
                    clear_req.eq(self.pred_clear),
                ]
                m.d.comb += pred.clear.eq(clear_req | ~predicted)
                if self._window:
                    m.d.comb += wpred.clear.eq(clear_req | ~windowed)
                if self._pipelined:
                    m.d.sync += [begin_q.eq(predicted & any_nz & ~any_nan),
                                 restart_q.eq(~(usable & in_window))]
                    if self._window:
                        m.d.sync += wbegin_q.eq(windowed & any_nz & ~any_nan)
                else:
                    m.d.comb += [
                        pred.begin.eq(predicted & any_nz & ~any_nan),
                        pred.restart.eq(~(usable & in_window)),
                        pred.e4.eq(raw_c),
                        pred.width.eq(self.cfg_width),
                        pred.k.eq(self.cfg_pred_k),
                    ]
                    if self._window:
                        m.d.comb += [
                            wpred.begin.eq(windowed & any_nz & ~any_nan),
                            wpred.restart.eq(~(usable & in_window)),
                            wpred.e4.eq(raw_c),
                            wpred.width.eq(self.cfg_width),
                            wpred.k.eq(self.cfg_pred_k),
                        ]
                if not self._pipelined:
                    m.d.sync += emitting.eq(1)
                fsm.goto("EMIT")
            with fsm.state("EMIT"):
                with m.If(emit_done):
                    m.d.comb += self.finish.eq(1)
                    if not self._pipelined:
                        m.d.sync += emitting.eq(0)
                    fsm.goto("IDLE")
        return m
