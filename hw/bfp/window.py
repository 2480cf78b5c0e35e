"""Windowed mean/σ output exponent predictor of the BFP column (:class:`WindowPredictor`).

Seed 002 claim 1: the output exponent is updated from the mean and the standard deviation of the
absolute values of the last 512, 1024 or 8192 output values, held in a FIFO, with running sums
of ``x`` and ``x²``. Implements :class:`lowbit.sim.bfp_column.WindowPredictor` (which states
every rule) bit for bit, behind the same ports as :class:`~lowbit.hw.bfp.ExponentPredictor`, so
that the output unit drives either (``cfg_exp_mode`` 3, :class:`~lowbit.hw.bfp.shared.ExpMode`,
on a column built with ``window``).
"""

from amaranth.hdl import Module, Mux, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from lowbit.hw.common import check_int as _check_int

__all__ = ["WindowPredictor", "WINDOW_LENGTHS", "WINDOW_GUARD", "window_widths"]

#: Window lengths (as :data:`lowbit.sim.bfp_column.WINDOW_LENGTHS`).
WINDOW_LENGTHS = (512, 1024, 8192)
#: Guard bits of the window's values (as :data:`lowbit.sim.bfp_column.WINDOW_GUARD`).
WINDOW_GUARD = 2


def check_window(window):
    """``window`` if it is one of :data:`WINDOW_LENGTHS`, else TypeError / ValueError."""
    choices = ", ".join(map(str, WINDOW_LENGTHS))
    if not isinstance(window, int) or isinstance(window, bool):
        raise TypeError(f"Window length must be one of {choices}, not {window!r}")
    if window not in WINDOW_LENGTHS:
        raise ValueError(f"Window length must be one of {choices}, not {window!r}")
    return window


def window_widths(*, width, exp_bits, window):
    """``(vw, lw, (eu_min, eu_max))``: the FIFO's value width, ``log2`` of the window, and the
    range of the predicted exponent register."""
    vw = width - 1 + WINDOW_GUARD
    e_max = (1 << (exp_bits - 1)) - 1
    return vw, window.bit_length() - 1, (-e_max - (width - 2), e_max + vw + 2)


class WindowPredictor(wiring.Component):
    """History and update engine of the windowed mean/σ exponent selector.

    Sample path (one sample per cycle, pipelined): ``|m|`` → shifted by ``d = e4 - h``
    (``|d| <= G``) → the window FIFO (a block RAM of ``N_w`` × ``VW`` bits, one read and one
    write port: the oldest value is read one cycle before the new one overwrites it) →
    ``S1 += x - x_o`` and ``S2 += (x - x_o)(x + x_o)`` (one ``VW + 1``-bit multiplier).
    Prediction engine (after ``commit``, sequential, one shift-add multiplier): ``n·S2``,
    ``S1²``, ``k²·(n·S2 - S1²)``, then a binary search over ``j`` in ``1..VW+3`` of
    ``A_j = n·2^j - S1 > 0 and A_j² > k²·(n·S2 - S1²)`` (about ``4 · 2·(VW + log2 N_w)``
    cycles), then claim 21's error test. About ``2·VW + 7·log2 N_w + 60`` cycles per product,
    longer than a short product: the output unit waits (``busy``) before the next selection.

    Members
    -------
    clear, begin, restart, e4, width, k, sample_valid, sample, commit, busy, usable, unit_exp
        As :class:`~lowbit.hw.bfp.ExponentPredictor`. ``e4`` is the product's exponent when
        ``restart`` (the max rule's); otherwise the product uses ``unit_exp``.
    tol : In(3)
        Error tolerance ``t`` of claim 21 (0..7).
    count, s1, s2, hist_exp : Out
        Values held, the running sums and the history exponent (for tests and debug).
    """

    def __init__(self, *, width, exp_bits, window):
        _check_int("Mantissa width", width, 2, 16)
        _check_int("Exponent width", exp_bits, 3, 12)
        check_window(window)
        self._w, self._eb, self._nw = width, exp_bits, window
        self._vw, self._lw, eu_range = window_widths(width=width, exp_bits=exp_bits,
                                                     window=window)
        super().__init__({
            "clear": In(1),
            "begin": In(1),
            "restart": In(1),
            "e4": In(signed(exp_bits)),
            "width": In(range(width + 1)),
            "k": In(3),
            "tol": In(3),
            "sample_valid": In(1),
            "sample": In(signed(width)),
            "commit": In(1),
            "busy": Out(1),
            "usable": Out(1),
            "unit_exp": Out(range(eu_range[0], eu_range[1] + 1)),
            "count": Out(range(window + 1)),
            "s1": Out(self._vw + self._lw),
            "s2": Out(2 * self._vw + self._lw),
            "hist_exp": Out(signed(exp_bits)),
        })

    def elaborate(self, platform):
        m = Module()
        w, eb, nw, vw, lw, g = self._w, self._eb, self._nw, self._vw, self._lw, WINDOW_GUARD
        e_max = (1 << (eb - 1)) - 1
        count = self.count
        eu = self.unit_exp
        h, s1, s2 = self.hist_exp, self.s1, self.s2
        m.submodules.fifo = fifo = Memory(shape=unsigned(vw), depth=nw, init=[])
        wr = fifo.write_port()
        rd = fifo.read_port()
        rptr = Signal(lw)
        wptr = Signal(lw)

        # Latched at `begin`.
        restart = Signal()
        e4 = Signal(signed(eb))
        wref = Signal(range(w))                     # W - 2
        k = Signal(3)
        tol = Signal(3)
        active = Signal()
        busy = Signal()
        m.d.comb += self.busy.eq(busy | (self.commit & active))
        with m.If(self.begin):
            m.d.sync += [restart.eq(self.restart),
                         e4.eq(Mux(self.restart, self.e4, eu)),
                         wref.eq(self.width - 2), k.eq(Mux(self.k == 0, 1, self.k)),
                         tol.eq(self.tol)]
        begin_r = Signal()
        clear_r = Signal()
        m.d.sync += [begin_r.eq(self.begin), clear_r.eq(self.clear)]

        # A new history (or a re-base) at `begin_r`; otherwise the shift d = e4 - h.
        d = Signal(signed(3 + g.bit_length()))
        dd = Signal(signed(eb + 1))
        m.d.comb += dd.eq(e4 - h)
        with m.If(clear_r & ~busy):
            m.d.sync += [count.eq(0), self.usable.eq(0)]
        with m.If(begin_r):
            m.d.sync += active.eq(1)
            with m.If(restart | (count == 0) | (dd > g) | (dd < -g)):
                m.d.sync += [count.eq(0), s1.eq(0), s2.eq(0), rptr.eq(0), wptr.eq(0),
                             h.eq(e4), d.eq(0)]
            with m.Else():
                m.d.sync += d.eq(dd)

        # The sample pipeline.
        v0, v1, v2, v3 = (Signal(name=f"v{i}") for i in range(4))
        a0 = Signal(w)
        x1 = Signal(vw)
        dx = Signal(signed(vw + 1))
        sx = Signal(vw + 1)
        pr = Signal(signed(2 * vw + 3))
        m.d.sync += [v0.eq(self.sample_valid),
                     a0.eq(Mux(self.sample < 0, -self.sample, self.sample)),
                     v1.eq(v0), v2.eq(v1), v3.eq(v2)]
        with m.Switch(d):
            for dv in range(-g, g + 1):
                with m.Case(dv):
                    m.d.sync += x1.eq(a0 << dv if dv >= 0 else a0 >> -dv)
        m.d.comb += [rd.addr.eq(rptr), rd.en.eq(v0)]
        with m.If(v0):
            m.d.sync += rptr.eq(rptr + 1)
        full = count == nw
        old = Mux(full, rd.data, 0)
        m.d.comb += [wr.addr.eq(wptr), wr.data.eq(x1), wr.en.eq(v1)]
        with m.If(v1):
            m.d.sync += [wptr.eq(wptr + 1), dx.eq(x1 - old), sx.eq(x1 + old)]
            with m.If(~full):
                m.d.sync += count.eq(count + 1)
        with m.If(v2):
            m.d.sync += [s1.eq(s1 + dx), pr.eq(dx * sx)]
        with m.If(v3):
            m.d.sync += s2.eq(s2 + pr)

        # The prediction engine: one shift-add multiplier (ma · mb into macc).
        mw = 2 * vw + 2 * lw + 6
        ma = Signal(mw)
        mb = Signal(vw + lw + 4)
        macc = Signal(mw)
        t1 = Signal(mw)                              # n·S2, then k²·(n·S2 - S1²)
        lo = Signal(range(vw + 4))
        hi = Signal(range(vw + 4))
        mid = Signal(range(vw + 4))
        aj = Signal(signed(vw + lw + 5))
        m.d.comb += aj.eq((count << mid) - s1)
        e_new = Signal(signed(eb + 6))
        diff = Signal(signed(eb + 7))
        m.d.comb += [e_new.eq(h + lo - 1 - wref), diff.eq(e4 - e_new)]

        def mul(a, b):
            return [ma.eq(a), mb.eq(b), macc.eq(0)]

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.commit & active):
                    m.d.sync += busy.eq(1)
                    m.next = "DRAIN"
            with m.State("DRAIN"):
                m.d.sync += active.eq(0)
                with m.If(~(v0 | v1 | v2 | v3)):
                    m.next = "START"
            with m.State("START"):
                with m.If(s1 == 0):
                    m.d.sync += [count.eq(0), self.usable.eq(0), busy.eq(0)]
                    m.next = "IDLE"
                with m.Else():
                    m.d.sync += mul(s2, count)
                    m.next = "NS2"
            with m.State("NS2"):
                with m.If(mb == 0):
                    m.d.sync += [t1.eq(macc)] + mul(s1, s1)
                    m.next = "S1SQ"
            with m.State("S1SQ"):
                with m.If(mb == 0):
                    m.d.sync += mul(t1 - macc, k * k)
                    m.next = "KQ"
            with m.State("KQ"):
                with m.If(mb == 0):
                    m.d.sync += [t1.eq(macc), lo.eq(1), hi.eq(vw + 3)]
                    m.next = "SEARCH"
            with m.State("SEARCH"):
                with m.If(lo == hi):
                    m.next = "DONE"
                with m.Else():
                    m.d.sync += mid.eq((lo + hi) >> 1)
                    m.next = "TEST"
            with m.State("TEST"):
                with m.If(aj <= 0):
                    m.d.sync += lo.eq(mid + 1)
                    m.next = "SEARCH"
                with m.Else():
                    m.d.sync += mul(aj.as_unsigned(), aj.as_unsigned())
                    m.next = "SQUARE"
            with m.State("SQUARE"):
                with m.If(mb == 0):
                    with m.If(macc > t1):
                        m.d.sync += hi.eq(mid)
                    with m.Else():
                        m.d.sync += lo.eq(mid + 1)
                    m.next = "SEARCH"
            with m.State("DONE"):
                # Claim 21: keep the product's exponent if it loses at most `tol` bits.
                new = Mux((diff >= 0) & (diff <= tol), e4, e_new)
                m.d.sync += [eu.eq(new), self.usable.eq((new >= -e_max) & (new <= e_max)),
                             busy.eq(0)]
                m.next = "IDLE"
        with m.If(mb != 0):
            m.d.sync += [mb.eq(mb >> 1), ma.eq(ma << 1)]
            with m.If(mb[0]):
                m.d.sync += macc.eq(macc + ma)
        return m
