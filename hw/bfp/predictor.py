"""Predicted output exponent selector of the BFP column (:class:`ExponentPredictor`).

The history and update engine inside the output unit (:mod:`lowbit.hw.bfp.output`): it keeps
the statistics of earlier products' output mantissas and offers the predicted exponent
``unit_exp`` for ``cfg_exp_mode`` 2 (:class:`~lowbit.hw.bfp.shared.ExpMode`), which the output
unit checks against the max rule's overflow/underflow window (the max rule is the fallback).
Implements :class:`lowbit.sim.bfp_column.ExponentPredictor` bit for bit;
:func:`predictor_widths` gives the widths of its registers.
"""

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from lowbit.hw.bfp.shared import _clog2, _leading_one

__all__ = ["ExponentPredictor", "predictor_widths"]


def predictor_widths(*, width, exp_bits, stat_shift):
    """``(fs, sw, (eu_min, eu_max))``: fraction bits and width of the statistics registers,
    and the range of the predicted exponent register (see :class:`ExponentPredictor`)."""
    fs = stat_shift + 2
    e_max = (1 << (exp_bits - 1)) - 1
    return fs, width - 1 + fs, (-e_max - (width - 2 + fs), e_max + width + 1)


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
