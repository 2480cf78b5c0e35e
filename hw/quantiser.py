"""Stochastic quantiser: f16 or wide fixed-point streams to BFP blocks, int8 or discrete codes
(DESIGN §3.4).

The golden model is :mod:`lowbit.sim.quantiser` (BFP through :func:`lowbit.sim.bfp.quantise`,
discrete codes
through :func:`lowbit.sim.discrete.to_codes`); this gateware matches it bit for bit. See
``docs/quantiser.md`` for the architecture and measured figures.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Shape, Signal, signed, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from lowbit.hw.common import Rounding, any_of, check_bool, register_copy
from lowbit.hw.common import check_int as _check_int
from lowbit.hw.discrete import CodeEntry

__all__ = ["Quantiser", "QuantTarget", "FORMATS"]

#: Input formats: raw binary16 codes, or signed fixed point.
FORMATS = ("f16", "fixed")

# Left-shift headroom of the shifter: an int8 value whose scaled magnitude would need more than
# this many left shifts is at least 2^9 and saturates; BFP needs up to W_max - 2 (a block whose
# largest element is the smallest one of the input format), so the shifter takes
# max(_HEADROOM, w_max - 2).
_HEADROOM = 8
# Scaled int8 values are clamped to ±_INT8_CLAMP before the zero point is added; any value
# beyond it saturates after the zero point anyway.
_INT8_CLAMP = 512


# Code-book values are ±2^e with -7 <= e <= 7; the discrete path works in units of 2^-7 of them.
_CODE_FRAC = 7


class QuantTarget(enum.Enum, shape=2):
    """Output format of :class:`Quantiser` (its ``target`` port; the ``QUANT_FORMAT``
    register)."""
    BFP = 0
    INT8 = 1
    DISCRETE = 2



def _range_shape(lo, hi):
    return Shape.cast(range(lo, hi + 1))


def _lod(m, value, name):
    """Index of the highest set bit of ``value`` (0 when ``value`` is 0)."""
    # A priority chain. A log-depth tree was faster on iCE40 (fixed point, UP5K: 26 vs 20 MHz)
    # but made YoWASP's ABC9 abort during synth_ecp5, so the chain stays for now.
    idx = Signal(range(max(len(value), 2)), name=name)
    for i in range(len(value)):
        with m.If(value[i]):
            m.d.comb += idx.eq(i)
    return idx


class Quantiser(wiring.Component):
    """Quantise f16 or fixed-point streams to BFP blocks at a run-time width, int8 or codes.

    Every input beat carries ``lanes`` elements; element ``k`` of the stream is lane
    ``k % lanes`` of beat ``k // lanes``. A BFP block is ``block`` consecutive elements, i.e.
    ``block / lanes`` beats. Each input beat is written to one half of a ping-pong buffer while
    the largest magnitude of the block is tracked; when the block is complete its half is handed
    to the emitter, which reads it back one beat per cycle through a pipeline that derives the
    shared exponent from the tracked maximum and shifts, rounds and saturates every lane. The
    other half takes the next block meanwhile, so the throughput is one beat (``lanes``
    elements) per cycle. In int8 and discrete mode a "block" is one beat. The first output beat
    of a block is valid :attr:`latency` (12, or 11 without the discrete path) cycles after the
    handshake of the block's last input beat.
    Configuration ports must be held constant while a block is in flight (change them only when
    the quantiser is idle).

    Random bits: in stochastic rounding the emitter takes one ``i_rand`` beat (``rand_bits`` per
    lane) per output beat; lane ``l`` of it rounds lane ``l`` of that output beat. In the other
    modes ``i_rand`` is not read.

    Parameters
    ----------
    fmt : str
        Input format, ``"f16"`` (raw binary16 codes) or ``"fixed"`` (signed fixed point).
    width : int
        Fixed-point input width in bits, 4..48 (``fmt="fixed"`` only). Default 32.
    frac_bits : int
        Fixed-point fraction bits, ``0..width`` (``fmt="fixed"`` only). Default 16.
    lanes : int
        Elements per beat, 1..16. Default 2.
    block : int
        BFP block size ``B``, a multiple of ``lanes``, up to 256. Default 16.
    w_max : int
        Largest run-time mantissa width ``W``, 2..16. Default 8.
    exp_bits : int
        Shared-exponent width ``E``, 3..12; it must cover every exponent the input format can
        produce, so that the exponent never needs clamping. Default 8.
    rand_bits : int
        Random bits ``R`` per element for stochastic rounding, 1..16. Default 8.
    mult_bits : int
        Width of the int8 affine multiplier, 0..16; 0 leaves only power-of-two scales.
        ``width + mult_bits`` must not exceed 53 for fixed-point input. Default 12.
    code_bits : int
        Largest discrete code width ``n``, 0..3; the ``book`` port has ``2**code_bits``
        entries and the run-time ``code_width`` selects ``n <= code_bits``. 0 leaves the
        discrete path out (``target = DISCRETE`` then outputs zeros). Default 3.
    ceil_lop : bool
        Also build the ``"ceil_lop"`` shared-exponent rule (seed 002 claim 8 as written,
        ``ceil(log2 amax) - (W - 2)``): the ``rule`` port becomes 2 bits wide. Default
        ``False`` (the ``rule`` port is 1 bit, the accelerator top's ``QUANT_RULE``).
    compare_first : bool
        For fast clocks: the discrete path takes its own copy of stage 5's value, clamped as
        it enters the copy (NaN to 0, infinities and overflows past every code value), so no
        multiplexer is on either side of the comparators' carry chains; the copy is loaded
        only in discrete mode, and each lane compares with its own copies of the code values,
        so neither the rounding path's registers nor the configuration registers' nets span
        the lanes in front of the carry chains. The same results. Default ``False``.
    gap_register : bool
        For fast clocks: the discrete path's gap between the neighbouring code values
        (``hi - lo``, the factor of stage 6's stochastic product) is a register of stage 5b,
        selected by the lower neighbour from configuration registers holding each code's gap
        to the next larger valid value (``hi`` is that value), so neither a subtraction follows
        the neighbours' pick nor a carry chain is in front of the hard multiplier; and so is
        the midpoint's sum ``lo + hi`` (from registers of each code's sum with that value), so
        that stage 6 to 7 is one comparison, not an addition and a comparison; and stage 6
        clamps both neighbours' codes (the book's least or greatest outside its range), so
        that stage 7's comparison is followed by one choice between two registers. The same
        results and latency; the book's gaps settle six cycles after ``book`` or
        ``code_width`` changes, before a beat offered then reaches them. Default ``False``.

    Members
    -------
    i : In(stream.Signature(ArrayLayout(elem, lanes)))
        Input elements: ``unsigned(16)`` f16 codes or ``signed(width)`` fixed point.
    i_rand : In(stream.Signature(ArrayLayout(unsigned(rand_bits), lanes)))
        Random bits (stochastic rounding only), e.g. from :class:`lowbit.hw.prng.Xoroshiro128aox`.
    o : Out(stream.Signature(StructLayout({"q": ArrayLayout(signed(Q), lanes), "e": signed(E)})))
        Quantised elements, ``Q = max(w_max, 8)``: BFP mantissas (``W`` significant bits) with
        their block's shared exponent ``e`` (the NaN code ``-2^(E-1)`` for a NaN block), or
        int8 codes with ``e = 0``.
    target : In(QuantTarget)
        BFP or INT8.
    rounding : In(Rounding)
        Nearest-even, toward zero or stochastic.
    mant_width : In(range(w_max + 1))
        Run-time mantissa width ``W``, 2..w_max (BFP).
    rule : In(1), or In(2) with ``ceil_lop``
        Shared-exponent rule (BFP, :data:`lowbit.sim.bfp.RULES`): 0 = "floor", 1 = "ceil",
        2 = "ceil_lop" (3 acts as 2).
    shift : In(signed(exp_bits))
        int8 scale exponent: ``q = clamp(round(x · mult · 2^-shift) + zero, -128, 127)``.
    mult : In(unsigned(mult_bits))
        int8 affine multiplier (present when ``mult_bits > 0``; must be non-zero).
    zero : In(signed(8))
        int8 zero point.
    book : In(ArrayLayout(lowbit.hw.discrete.CodeEntry, 2**code_bits))
        Discrete code book (present when ``code_bits > 0``), entries ``(shift, direction,
        sign)`` exactly as :class:`lowbit.hw.discrete.DiscreteUnit`'s ``book`` port and
        :meth:`lowbit.sim.discrete.CodeBook.words`, so one register set drives both engines. Any
        order;
        only the first ``2**code_width`` entries are used.
    code_width : In(range(code_bits + 1))
        Run-time code width ``n``, 1..code_bits (present when ``code_bits > 0``).

    Discrete codes (``target = DISCRETE``) follow :func:`lowbit.sim.quantiser.quantise_discrete`:
    ``rounding = STOCHASTIC`` is the seed-001 stochastic choice, any other mode is "nearest".
    The output lane holds the code (0..2^n-1), ``e`` is 0. The comparisons are exact: the
    element is shifted to ``floor(x · 2^(7+R))`` with a sticky bit and compared with the code
    values (multiples of 2^-7); the book's order relation is decoded into registers off the
    data path, so configuration must be stable 3 cycles before the first beat.

    Raises
    ------
    TypeError
        For a parameter of the wrong kind (e.g. a bool or float where an integer is expected).
    ValueError
        For a parameter out of range, a block that is not a multiple of the lanes, or an
        exponent width too small for the input format.
    """

    def __init__(self, *, fmt="f16", width=32, frac_bits=16, lanes=2, block=16, w_max=8,
                 exp_bits=8, rand_bits=8, mult_bits=12, code_bits=3, ceil_lop=False,
                 compare_first=False, gap_register=False):
        if not isinstance(fmt, str):
            raise TypeError(f"Input format must be one of {', '.join(FORMATS)}, not {fmt!r}")
        if fmt not in FORMATS:
            raise ValueError(f"Input format must be one of {', '.join(FORMATS)}, not {fmt!r}")
        _check_int("Fixed-point width", width, 4, 48)
        _check_int("Fraction bit count", frac_bits, 0, width)
        _check_int("Lane count", lanes, 1, 16)
        _check_int("Block size", block, 1, 256)
        if block % lanes:
            raise ValueError(f"Block size must be a multiple of the lane count {lanes}, "
                             f"not {block}")
        _check_int("Mantissa width", w_max, 2, 16)
        _check_int("Exponent width", exp_bits, 3, 12)
        _check_int("Random bit count", rand_bits, 1, 16)
        _check_int("Multiplier width", mult_bits, 0, 16)
        _check_int("Code width", code_bits, 0, 3)
        check_bool("ceil_lop", ceil_lop)
        check_bool("compare_first", compare_first)
        check_bool("gap_register", gap_register)
        if fmt == "fixed" and width + mult_bits > 53:
            raise ValueError(f"Fixed-point width plus multiplier width must be at most 53, "
                             f"not {width + mult_bits}")
        # Every exponent a block can need must be finite and representable.
        if fmt == "f16":
            fl_min, fl_max = -24, 15
        else:
            fl_min, fl_max = -frac_bits, width - 1 - frac_bits
        e_lo, e_hi = fl_min - (w_max - 2), fl_max + 1
        if e_lo <= -(1 << (exp_bits - 1)) or e_hi > (1 << (exp_bits - 1)) - 1:
            raise ValueError(f"Exponent width {exp_bits} is too small for {fmt} input with "
                             f"w_max={w_max}: exponents reach {e_lo}..{e_hi}")
        self._fmt, self._width, self._frac_bits = fmt, width, frac_bits
        self._lanes, self._block, self._w_max = lanes, block, w_max
        self._exp_bits, self._rand_bits, self._mult_bits = exp_bits, rand_bits, mult_bits
        self._code_bits = code_bits
        self._ceil_lop = ceil_lop
        self._compare_first = compare_first
        self._gap_register = gap_register

        elem = unsigned(16) if fmt == "f16" else signed(width)
        members = {
            "i": In(stream.Signature(data.ArrayLayout(elem, lanes))),
            "i_rand": In(stream.Signature(data.ArrayLayout(unsigned(rand_bits), lanes))),
            "o": Out(stream.Signature(data.StructLayout({
                "q": data.ArrayLayout(signed(self.out_bits), lanes),
                "e": signed(exp_bits),
            }))),
            "target": In(QuantTarget),
            "rounding": In(Rounding),
            "mant_width": In(range(w_max + 1), init=w_max),
            "rule": In(2 if ceil_lop else 1),
            "shift": In(signed(exp_bits)),
            "zero": In(signed(8)),
        }
        if mult_bits:
            members["mult"] = In(unsigned(mult_bits), init=1)
        if code_bits:
            members["book"] = In(data.ArrayLayout(CodeEntry, 1 << code_bits))
            members["code_width"] = In(range(code_bits + 1), init=code_bits)
        super().__init__(members)

    fmt = property(lambda self: self._fmt)
    width = property(lambda self: self._width)
    frac_bits = property(lambda self: self._frac_bits)
    lanes = property(lambda self: self._lanes)
    block = property(lambda self: self._block)
    w_max = property(lambda self: self._w_max)
    exp_bits = property(lambda self: self._exp_bits)
    rand_bits = property(lambda self: self._rand_bits)
    mult_bits = property(lambda self: self._mult_bits)
    code_bits = property(lambda self: self._code_bits)
    ceil_lop = property(lambda self: self._ceil_lop)
    compare_first = property(lambda self: self._compare_first)
    gap_register = property(lambda self: self._gap_register)

    @property
    def out_bits(self):
        """Width ``Q`` of an output lane: ``max(w_max, 8)``."""
        return max(self._w_max, 8)

    @property
    def latency(self):
        """Cycles from the handshake of a block's last input beat to its first output beat
        being valid, with no stalls: 12 with the discrete path (``code_bits > 0``), else 11."""
        return 12 if self._code_bits else 11

    def elaborate(self, platform):
        m = Module()
        L, E, R, G = self._lanes, self._exp_bits, self._rand_bits, self._rand_bits
        depth = self._block // L
        f16 = self._fmt == "f16"
        elem_bits = 16 if f16 else self._width
        key_bits = 15 if f16 else self._width

        bfp = Signal()
        disc = Signal()
        stoch = Signal()
        m.d.comb += [bfp.eq(self.target == QuantTarget.BFP),
                     disc.eq(self.target == QuantTarget.DISCRETE),
                     stoch.eq(self.rounding == Rounding.STOCHASTIC)]

        # ---- Ping-pong buffer --------------------------------------------------------------
        m.submodules.mem = mem = Memory(shape=unsigned(L * elem_bits), depth=2 * depth, init=[])
        wp = mem.write_port()
        rp = mem.read_port()

        full = Signal(2)
        bank_amax = [Signal(key_bits, name=f"bank{b}_amax") for b in range(2)]
        bank_nan = [Signal(name=f"bank{b}_nan") for b in range(2)]

        # ---- Ingest: write beats, track the block's largest magnitude and NaN/Inf ----------
        b_in = Signal()
        idx = Signal(range(max(depth, 2)))
        run_amax = Signal(key_bits)
        run_nan = Signal()
        keys, nans = [], []
        for lane in range(L):
            x = self.i.payload[lane]
            key = Signal(key_bits, name=f"key{lane}")
            nan = Signal(name=f"nan{lane}")
            if f16:
                special = x[10:15] == 0x1F
                m.d.comb += [nan.eq(special), key.eq(Mux(special, 0, x[0:15]))]
            else:
                m.d.comb += key.eq(Mux(x < 0, -x, x))
            keys.append(key)
            nans.append(nan)
        beat_max = keys[0]
        for lane in range(1, L):
            nxt = Signal(key_bits, name=f"beat_max{lane}")
            m.d.comb += nxt.eq(Mux(keys[lane] > beat_max, keys[lane], beat_max))
            beat_max = nxt
        last_in = ~bfp | (idx == depth - 1)
        m.d.comb += [
            self.i.ready.eq(~full.bit_select(b_in, 1)),
            wp.addr.eq(Mux(b_in, depth, 0) + idx),
            wp.data.eq(self.i.payload.as_value()),
            wp.en.eq(self.i.valid & self.i.ready),
        ]
        # The beat's maximum is registered and folded into the running maximum one cycle
        # later, so the input handshake path is only the lane comparison.
        ing_valid = Signal()
        ing_max = Signal(key_bits)
        ing_nan = Signal()
        ing_first = Signal()
        ing_last = Signal()
        ing_bank = Signal()
        m.d.sync += ing_valid.eq(self.i.valid & self.i.ready)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [ing_max.eq(beat_max), ing_nan.eq(Cat(*nans).any()),
                         ing_first.eq(idx == 0), ing_last.eq(last_in), ing_bank.eq(b_in)]
            with m.If(last_in):
                m.d.sync += [idx.eq(0), b_in.eq(~b_in)]
                for b in range(2):
                    with m.If(b_in == b):
                        m.d.sync += full[b].eq(1)
            with m.Else():
                m.d.sync += idx.eq(idx + 1)
        new_amax = Signal(key_bits)
        new_nan = Signal()
        m.d.comb += [
            new_amax.eq(Mux(~ing_first & (run_amax > ing_max), run_amax, ing_max)),
            new_nan.eq((~ing_first & run_nan) | ing_nan),
        ]
        with m.If(ing_valid):
            m.d.sync += [run_amax.eq(new_amax), run_nan.eq(new_nan)]
            with m.If(ing_last):
                for b in range(2):
                    with m.If(ing_bank == b):
                        m.d.sync += [bank_amax[b].eq(new_amax), bank_nan[b].eq(new_nan)]

        # ---- Emitter pipeline: every stage advances when the output can move ---------------
        en = Signal()
        out_valid = Signal()
        m.d.comb += [en.eq(~out_valid | self.o.ready), self.o.valid.eq(out_valid)]

        b_out = Signal()
        ridx = Signal(range(max(depth, 2)))
        issue = Signal()
        last_out = ~bfp | (ridx == depth - 1)
        m.d.comb += [
            issue.eq(full.bit_select(b_out, 1) & en & (~stoch | self.i_rand.valid)),
            self.i_rand.ready.eq(issue & stoch),
            rp.addr.eq(Mux(b_out, depth, 0) + ridx),
            rp.en.eq(en),
        ]
        with m.If(issue):
            with m.If(last_out):
                m.d.sync += [ridx.eq(0), b_out.eq(~b_out)]
                for b in range(2):
                    with m.If(b_out == b):
                        m.d.sync += full[b].eq(0)
            with m.Else():
                m.d.sync += ridx.eq(ridx + 1)

        rand_layout = data.ArrayLayout(unsigned(R), L)
        # Stage 1: the read data arrives. The block's maximum and NaN flag are taken from the
        # bank registers in the first cycle of the stage (the maximum is folded one cycle after
        # the last input beat, so it is not ready at issue time) and held while stalled: the
        # bank may be refilled, and its registers overwritten, during a long stall.
        s1_valid = Signal()
        s1_bank = Signal()
        s1_fresh = Signal()
        s1_hold_amax = Signal(key_bits)
        s1_hold_nan = Signal()
        s1_rand = Signal(rand_layout)
        m.d.sync += s1_fresh.eq(issue)
        with m.If(en):
            m.d.sync += [s1_valid.eq(issue), s1_bank.eq(b_out), s1_rand.eq(self.i_rand.payload)]
        s1_amax = Signal(key_bits)
        s1_nan = Signal()
        m.d.comb += [
            s1_amax.eq(Mux(s1_fresh, Mux(s1_bank, bank_amax[1], bank_amax[0]), s1_hold_amax)),
            s1_nan.eq(Mux(s1_fresh, Mux(s1_bank, bank_nan[1], bank_nan[0]), s1_hold_nan)),
        ]
        m.d.sync += [s1_hold_amax.eq(s1_amax), s1_hold_nan.eq(s1_nan)]

        # Shared exponent of the block from its largest magnitude (lowbit.sim.bfp's rule).
        if f16:
            a_exp = s1_amax[10:15]
            a_sig = Signal(11)
            a_k = Signal(signed(7))
            m.d.comb += [
                a_sig.eq(Mux(a_exp != 0, Cat(s1_amax[0:10], 1), s1_amax[0:10])),
                a_k.eq(Mux(a_exp != 0, a_exp - 25, -24)),
            ]
        else:
            a_sig = s1_amax
            a_k = Const(-self._frac_bits, signed(8))
        n_sig = len(a_sig)
        a_lod = _lod(m, a_sig, "amax_lod")
        # amax · 2^-e_floor = a_sig left-aligned, read as W-1 integer bits: "ceil" adds one when
        # it exceeds 2^(W-1) - 1, i.e. its top W-1 bits are all ones and a lower bit is set.
        norm_sh = Signal(range(n_sig))
        m.d.comb += norm_sh.eq(n_sig - 1 - a_lod)

        # Stage 1b: the read data, floor(log2(amax)) and amax left-aligned.
        s1b_valid = Signal()
        s1b_data = Signal(unsigned(L * elem_bits))
        s1b_fl = Signal(signed(max(E, 8) + 2))
        s1b_norm = Signal(n_sig)
        s1b_zero = Signal()
        s1b_nan = Signal()
        s1b_rand = Signal(rand_layout)
        with m.If(en):
            m.d.sync += [s1b_valid.eq(s1_valid), s1b_data.eq(rp.data),
                         s1b_fl.eq(a_k + a_lod), s1b_norm.eq(a_sig << norm_sh),
                         s1b_zero.eq(s1_amax == 0), s1b_nan.eq(s1_nan), s1b_rand.eq(s1_rand)]

        norm = s1b_norm
        ceil_inc = Signal()
        with m.Switch(self.mant_width):
            for w in range(2, self._w_max + 1):
                with m.Case(w):
                    if w - 1 < n_sig:
                        top = ((1 << (w - 1)) - 1) << (n_sig - (w - 1))
                        rest = (1 << (n_sig - (w - 1))) - 1
                        m.d.comb += ceil_inc.eq(((norm & top) == top) & ((norm & rest) != 0))
        e_blk = Signal(signed(E))
        with m.If(s1b_nan):
            m.d.comb += e_blk.eq(-(1 << (E - 1)))
        with m.Elif(s1b_zero):
            m.d.comb += e_blk.eq(0)
        with m.Else():
            if self._ceil_lop:
                # "ceil_lop": floor + 1 unless amax is a power of two (a lone leading one).
                lop_inc = (norm & ((1 << (n_sig - 1)) - 1)) != 0
                inc = Mux(self.rule[1], lop_inc, self.rule[0] & ceil_inc)
                m.d.comb += e_blk.eq(s1b_fl - (self.mant_width - 2) + inc)
            else:
                m.d.comb += e_blk.eq(s1b_fl - (self.mant_width - 2) + (self.rule & ceil_inc))

        # Stage 2: element data and the block exponent.
        s2_valid = Signal()
        s2_data = Signal(data.ArrayLayout(unsigned(elem_bits), L))
        s2_e = Signal(signed(E))
        s2_nan = Signal()
        s2_rand = Signal(rand_layout)
        with m.If(en):
            m.d.sync += [s2_valid.eq(s1b_valid), s2_data.eq(s1b_data), s2_e.eq(e_blk),
                         s2_nan.eq(s1b_nan), s2_rand.eq(s1b_rand)]

        # Decode each element into v · 2^k (v signed) and the right shift a = base - k.
        # Discrete codes: the element is scaled by 2^_CODE_FRAC (a right shift by -7).
        base = Signal(signed(max(E, 5)))
        m.d.comb += base.eq(Mux(bfp, s2_e, Mux(disc, -_CODE_FRAC, self.shift)))
        if f16:
            v_shape, k_lo, k_hi = signed(12), -24, 6
        else:
            v_shape, k_lo, k_hi = signed(self._width), -self._frac_bits, -self._frac_bits
        a_shape = _range_shape(min(-(1 << (E - 1)), -_CODE_FRAC) - k_hi,
                               (1 << (E - 1)) - 1 - k_lo)
        s3_valid = Signal()
        s3_v = [Signal(v_shape, name=f"s3_v{lane}") for lane in range(L)]
        s3_a = [Signal(a_shape, name=f"s3_a{lane}") for lane in range(L)]
        s3_special = [Signal(name=f"s3_special{lane}") for lane in range(L)]
        s3_isnan = [Signal(name=f"s3_isnan{lane}") for lane in range(L)]
        s3_e = Signal(signed(E))
        s3_nan = Signal()
        s3_rand = Signal(rand_layout)
        with m.If(en):
            m.d.sync += [s3_valid.eq(s2_valid), s3_e.eq(s2_e), s3_nan.eq(s2_nan),
                         s3_rand.eq(s2_rand)]
        for lane in range(L):
            x = s2_data[lane]
            if f16:
                ex, fr, sg = x[10:15], x[0:10], x[15]
                sig = Mux(ex != 0, Cat(fr, 1), fr)
                k = Mux(ex != 0, ex - 25, -24)
                with m.If(en):
                    m.d.sync += [
                        s3_v[lane].eq(Mux(sg, -sig, sig)),
                        s3_a[lane].eq(base - k),
                        s3_special[lane].eq(ex == 0x1F),
                        s3_isnan[lane].eq(fr != 0),
                    ]
            else:
                with m.If(en):
                    m.d.sync += [s3_v[lane].eq(x.as_signed()),
                                 s3_a[lane].eq(base + self._frac_bits)]

        # Stage 3: scale by the affine multiplier (int8 only), then the shift control.
        mult = Const(1, 1)
        if self._mult_bits:
            mult = Mux(self.target == QuantTarget.INT8, self.mult, 1)
        p_shape = signed(v_shape.width + max(self._mult_bits, 1) + 1)
        p_bits = p_shape.width
        # Integer bits kept after the shift: BFP/int8 need max(10, w_max) + 1; discrete codes
        # need x · 2^7 up to beyond the largest code value 2^7, i.e. 16 + 1.
        qw = max(10, self._w_max, 16 if self._code_bits else 0) + 1
        hr = max(_HEADROOM, self._w_max - 2)
        n_v = max(p_bits + hr + G, G + qw + 1)
        sh_max = n_v
        sh_shape = unsigned((sh_max).bit_length())
        s4_valid = Signal()
        s4_p = [Signal(p_shape, name=f"s4_p{lane}") for lane in range(L)]
        s4_sh = [Signal(sh_shape, name=f"s4_sh{lane}") for lane in range(L)]
        s4_ovf = [Signal(name=f"s4_ovf{lane}") for lane in range(L)]
        s4_special = [Signal(name=f"s4_special{lane}") for lane in range(L)]
        s4_isnan = [Signal(name=f"s4_isnan{lane}") for lane in range(L)]
        s4_e = Signal(signed(E))
        s4_nan = Signal()
        s4_rand = Signal(rand_layout)
        with m.If(en):
            m.d.sync += [s4_valid.eq(s3_valid), s4_e.eq(s3_e), s4_nan.eq(s3_nan),
                         s4_rand.eq(s3_rand)]
        for lane in range(L):
            a_h = Signal(signed(a_shape.width + 2), name=f"a_h{lane}")
            m.d.comb += a_h.eq(s3_a[lane] + hr)
            with m.If(en):
                m.d.sync += [
                    s4_p[lane].eq(s3_v[lane] * mult),
                    s4_ovf[lane].eq(a_h < 0),
                    s4_sh[lane].eq(Mux(a_h < 0, 0, Mux(a_h > sh_max, sh_max, a_h))),
                    s4_special[lane].eq(s3_special[lane]),
                    s4_isnan[lane].eq(s3_isnan[lane]),
                ]

        # Stage 4: y = floor(p · 2^(hr + G) / 2^sh) with a sticky bit of the lost bits.
        # Only the low G + QW bits of y are kept (QW-bit integer part, enough for every
        # unsaturated result); `big` flags a y whose integer part does not fit them.
        s5_valid = Signal()
        s5_y = [Signal(signed(G + qw), name=f"s5_y{lane}") for lane in range(L)]
        s5_big = [Signal(name=f"s5_big{lane}") for lane in range(L)]
        s5_sticky = [Signal(name=f"s5_sticky{lane}") for lane in range(L)]
        s5_neg = [Signal(name=f"s5_neg{lane}") for lane in range(L)]
        s5_special = [Signal(name=f"s5_special{lane}") for lane in range(L)]
        s5_isnan = [Signal(name=f"s5_isnan{lane}") for lane in range(L)]
        s5_e = Signal(signed(E))
        s5_nan = Signal()
        s5_rand = Signal(rand_layout)
        # The shifter is split over two stages: the large shift steps first (stage 4a), then
        # the small ones (stage 4b).
        n_steps = sh_shape.width
        split = n_steps // 2

        def shift_steps(val, sticky, sh, steps, lane, tag):
            for i in steps:
                amount = 1 << i
                nxt = Signal(signed(n_v), name=f"sh{tag}{lane}_{i}")
                nsticky = Signal(name=f"sticky{tag}{lane}_{i}")
                lost = val[:min(amount, n_v)] != 0
                with m.If(sh[i]):
                    m.d.comb += [nxt.eq(val >> amount), nsticky.eq(sticky | lost)]
                with m.Else():
                    m.d.comb += [nxt.eq(val), nsticky.eq(sticky)]
                val, sticky = nxt, nsticky
            return val, sticky

        s4b_valid = Signal()
        s4b_val = [Signal(signed(n_v), name=f"s4b_val{lane}") for lane in range(L)]
        s4b_sticky = [Signal(name=f"s4b_sticky{lane}") for lane in range(L)]
        s4b_sh = [Signal(sh_shape, name=f"s4b_sh{lane}") for lane in range(L)]
        s4b_ovf = [Signal(name=f"s4b_ovf{lane}") for lane in range(L)]
        s4b_neg = [Signal(name=f"s4b_neg{lane}") for lane in range(L)]
        s4b_special = [Signal(name=f"s4b_special{lane}") for lane in range(L)]
        s4b_isnan = [Signal(name=f"s4b_isnan{lane}") for lane in range(L)]
        s4b_e = Signal(signed(E))
        s4b_nan = Signal()
        s4b_rand = Signal(rand_layout)
        with m.If(en):
            m.d.sync += [s4b_valid.eq(s4_valid), s4b_e.eq(s4_e), s4b_nan.eq(s4_nan),
                         s4b_rand.eq(s4_rand),
                         s5_valid.eq(s4b_valid), s5_e.eq(s4b_e), s5_nan.eq(s4b_nan),
                         s5_rand.eq(s4b_rand)]
        # With ``compare_first``, the discrete path's own copy of stage 5's value and sticky
        # bit, clamped as it enters (NaN to 0, infinities and overflows to +-y_max, past every
        # code value, with no sticky bit): loaded only in discrete mode (so synthesis keeps it
        # apart from stage 5's registers) and placed beside the comparators, which then have
        # no multiplexer on either side.
        d5_copy = self._compare_first and self._code_bits > 0
        if d5_copy:
            disc_q = Signal()
            m.d.sync += disc_q.eq(disc)
            d5_y_in = [Signal.like(s5_y[lane], name=f"ds5_y{lane}") for lane in range(L)]
            d5_s_in = [Signal(name=f"ds5_sticky{lane}") for lane in range(L)]
            y_max = (1 << (G + qw - 1)) - 1
        for lane in range(L):
            val = Signal(signed(n_v), name=f"shin{lane}")
            m.d.comb += val.eq(s4_p[lane] << (hr + G))
            val, sticky = shift_steps(val, Const(0, 1), s4_sh[lane],
                                      range(n_steps - 1, split - 1, -1), lane, "a")
            with m.If(en):
                m.d.sync += [
                    s4b_val[lane].eq(val), s4b_sticky[lane].eq(sticky),
                    s4b_sh[lane].eq(s4_sh[lane]),
                    s4b_ovf[lane].eq(s4_ovf[lane] & (s4_p[lane] != 0)),
                    s4b_neg[lane].eq(s4_p[lane] < 0),
                    s4b_special[lane].eq(s4_special[lane]),
                    s4b_isnan[lane].eq(s4_isnan[lane]),
                ]
            val, sticky = shift_steps(s4b_val[lane], s4b_sticky[lane], s4b_sh[lane],
                                      range(split - 1, -1, -1), lane, "b")
            high = val[G + qw - 1:]
            big = s4b_ovf[lane] | ~(high.all() | (high == 0))
            s5 = [
                (s5_y, val[:G + qw]), (s5_sticky, sticky), (s5_big, big),
                (s5_neg, s4b_neg[lane]), (s5_special, s4b_special[lane]),
                (s5_isnan, s4b_isnan[lane])]
            with m.If(en):
                m.d.sync += [reg[lane].eq(value) for reg, value in s5]
            if d5_copy:
                with m.If(en & disc_q):
                    with m.If(s4b_special[lane] & s4b_isnan[lane]):
                        m.d.sync += [d5_y_in[lane].eq(0), d5_s_in[lane].eq(0)]
                    with m.Elif(s4b_special[lane] | big):
                        m.d.sync += [d5_y_in[lane].eq(Mux(s4b_neg[lane], -y_max, y_max)),
                                     d5_s_in[lane].eq(0)]
                    with m.Else():
                        m.d.sync += [d5_y_in[lane].eq(val[:G + qw]), d5_s_in[lane].eq(sticky)]

        # Stage 5: round.
        # The saturation bounds are registered copies of the configuration (held constant while
        # traffic flows), which keeps their decoding off the saturation path.
        mant_max = Signal(signed(self._w_max + 1))
        mant_min = Signal(signed(self._w_max + 1))
        with m.Switch(self.mant_width):
            for w in range(2, self._w_max + 1):
                with m.Case(w):
                    m.d.sync += [mant_max.eq((1 << (w - 1)) - 1), mant_min.eq(1 - (1 << (w - 1)))]
        q_bits = self.out_bits
        s6_valid = Signal()
        s6_bfp = [Signal(signed(q_bits), name=f"s6_bfp{lane}") for lane in range(L)]
        s6_rc = [Signal(signed(11), name=f"s6_rc{lane}") for lane in range(L)]
        s6_neg = [Signal(name=f"s6_neg{lane}") for lane in range(L)]
        s6_special = [Signal(name=f"s6_special{lane}") for lane in range(L)]
        s6_isnan = [Signal(name=f"s6_isnan{lane}") for lane in range(L)]
        s6_e = Signal(signed(E))
        s5b_valid = Signal()
        s5b_rt = [Signal(signed(qw + 1), name=f"s5b_rt{lane}") for lane in range(L)]
        s5b_big = [Signal(name=f"s5b_big{lane}") for lane in range(L)]
        s5b_neg = [Signal(name=f"s5b_neg{lane}") for lane in range(L)]
        s5b_special = [Signal(name=f"s5b_special{lane}") for lane in range(L)]
        s5b_isnan = [Signal(name=f"s5b_isnan{lane}") for lane in range(L)]
        s5b_e = Signal(signed(E))
        s5b_nan = Signal()
        with m.If(en):
            m.d.sync += [s5b_valid.eq(s5_valid), s5b_e.eq(Mux(bfp, s5_e, 0)),
                         s5b_nan.eq(s5_nan),
                         s6_valid.eq(s5b_valid), s6_e.eq(s5b_e)]
        for lane in range(L):
            y = s5_y[lane]
            q0 = Signal(signed(qw), name=f"q0_{lane}")
            frac = Signal(G, name=f"frac{lane}")
            m.d.comb += [q0.eq(y >> G), frac.eq(y[:G])]
            rest = (frac[:G - 1] != 0) if G > 1 else Const(0, 1)
            up = Signal(name=f"up{lane}")
            with m.Switch(self.rounding):
                with m.Case(Rounding.NEAREST_EVEN):
                    m.d.comb += up.eq(frac[G - 1] & (rest | s5_sticky[lane] | q0[0]))
                with m.Case(Rounding.TOWARD_ZERO):
                    m.d.comb += up.eq(s5_neg[lane] & ((frac != 0) | s5_sticky[lane]))
                with m.Case(Rounding.STOCHASTIC):
                    m.d.comb += up.eq((frac + s5_rand[lane])[G])
            with m.If(en):
                m.d.sync += [s5b_rt[lane].eq(q0 + up), s5b_big[lane].eq(s5_big[lane]),
                             s5b_neg[lane].eq(s5_neg[lane]),
                             s5b_special[lane].eq(s5_special[lane]),
                             s5b_isnan[lane].eq(s5_isnan[lane])]

        # Stage 5b: saturate (BFP: at the run-time width; int8: clamp to ±512).
        for lane in range(L):
            rt = s5b_rt[lane]
            big = s5b_big[lane]
            q_bfp = Signal(signed(q_bits), name=f"q_bfp{lane}")
            with m.If(s5b_nan):
                m.d.comb += q_bfp.eq(0)
            with m.Elif(big):
                m.d.comb += q_bfp.eq(Mux(s5b_neg[lane], mant_min, mant_max))
            with m.Elif(rt > mant_max):
                m.d.comb += q_bfp.eq(mant_max)
            with m.Elif(rt < mant_min):
                m.d.comb += q_bfp.eq(mant_min)
            with m.Else():
                m.d.comb += q_bfp.eq(rt)
            rc = Signal(signed(11), name=f"rc{lane}")
            with m.If(big):
                m.d.comb += rc.eq(Mux(s5b_neg[lane], -_INT8_CLAMP, _INT8_CLAMP))
            with m.Elif(rt > _INT8_CLAMP):
                m.d.comb += rc.eq(_INT8_CLAMP)
            with m.Elif(rt < -_INT8_CLAMP):
                m.d.comb += rc.eq(-_INT8_CLAMP)
            with m.Else():
                m.d.comb += rc.eq(rt)
            with m.If(en):
                m.d.sync += [s6_bfp[lane].eq(q_bfp), s6_rc[lane].eq(rc),
                             s6_neg[lane].eq(s5b_neg[lane]),
                             s6_special[lane].eq(s5b_special[lane]),
                             s6_isnan[lane].eq(s5b_isnan[lane])]

        if self._code_bits:
            codes = self._discrete(m, en, stoch, G, qw, s5_y, s5_big, s5_sticky, s5_neg,
                                   s5_special, s5_isnan, s5_rand,
                                   clamped=(d5_y_in, d5_s_in) if d5_copy else None)
        else:
            codes = [Const(0, 1)] * L

        # Stage 6: int8 zero point and saturation; NaN -> zero point, ±Inf -> ±saturate.
        out_q = [Signal(signed(q_bits), name=f"out_q{lane}") for lane in range(L)]
        out_e = Signal(signed(E))
        for lane in range(L):
            rz = Signal(signed(12), name=f"rz{lane}")
            m.d.comb += rz.eq(s6_rc[lane] + self.zero)
            q_int = Signal(signed(8), name=f"q_int{lane}")
            with m.If(s6_special[lane] & s6_isnan[lane]):
                m.d.comb += q_int.eq(self.zero)
            with m.Elif(s6_special[lane]):
                # An Inf decodes to v = ±1024, so its sign is the sign of the product.
                m.d.comb += q_int.eq(Mux(s6_neg[lane], -128, 127))
            with m.Elif(rz > 127):
                m.d.comb += q_int.eq(127)
            with m.Elif(rz < -128):
                m.d.comb += q_int.eq(-128)
            with m.Else():
                m.d.comb += q_int.eq(rz)
            if self._code_bits:
                # Stage 7 (discrete path present): one more register for BFP/int8 results
                # while the discrete path makes its stochastic comparison.
                s7_q = Signal(signed(q_bits), name=f"s7_q{lane}")
                with m.If(en):
                    m.d.sync += [s7_q.eq(Mux(bfp, s6_bfp[lane], q_int)),
                                 out_q[lane].eq(Mux(disc, codes[lane], s7_q))]
            else:
                with m.If(en):
                    m.d.sync += out_q[lane].eq(Mux(bfp, s6_bfp[lane], q_int))
        if self._code_bits:
            s7_valid = Signal()
            s7_e = Signal(signed(E))
            with m.If(en):
                m.d.sync += [s7_valid.eq(s6_valid), s7_e.eq(s6_e),
                             out_valid.eq(s7_valid), out_e.eq(s7_e)]
        else:
            with m.If(en):
                m.d.sync += [out_valid.eq(s6_valid), out_e.eq(s6_e)]
        for lane in range(L):
            m.d.comb += self.o.payload.q[lane].eq(out_q[lane])
        m.d.comb += self.o.payload.e.eq(out_e)
        return m

    def _discrete(self, m, en, stoch, G, qw, s5_y, s5_big, s5_sticky, s5_neg, s5_special,
                  s5_isnan, s5_rand, clamped=None):
        """Discrete-code path: three pipeline stages beside the rounding/saturation stages and
        the extra stage 7; returns the per-lane code of stage 7 (registered into the output by
        the caller).

        ``s5_y`` is ``floor(x · 2^(7+G))`` (``G = R``) with ``s5_sticky`` set when bits were
        lost. In these units every code value is an integer ``V · 2^G`` (``V`` in units of
        2^-7), so ``x >= V`` is ``y >= V · 2^G``; the nearest test ``2x ≷ lo + hi`` is
        ``2y + sticky ≷ (lo + hi) · 2^G``, and the stochastic test
        ``r · (hi - lo) < (x - lo) · 2^R`` is ``r · (hi - lo) < y - lo · 2^G + sticky``.
        """
        L, n_max = self._lanes, self._code_bits
        nc = 1 << n_max
        y_bits = G + qw
        y_max = (1 << (y_bits - 1)) - 1

        # ---- Configuration, decoded into registers (off the data path) -----------------------
        # cfg_v: code value in units of 2^-7; cfg_key: a 5-bit key with the order of the values
        # (negative 7 - e in 0..14, positive 23 + e in 16..30).
        cfg_valid = Signal(nc)
        cfg_v = [Signal(signed(_CODE_FRAC + 9), name=f"cfg_v{c}") for c in range(nc)]
        cfg_key = [Signal(5, name=f"cfg_key{c}") for c in range(nc)]
        cfg_d = [None] * nc           # their next values
        for c in range(nc):
            entry = self.book[c]
            exp = Signal(signed(5), name=f"cfg_exp{c}")
            mag = Signal(unsigned(_CODE_FRAC + 8), name=f"cfg_mag{c}")
            m.d.comb += [
                exp.eq(Mux(entry.direction, entry.shift, -entry.shift)),
                mag.eq(Const(1, 1) << (exp + _CODE_FRAC).as_unsigned()[:4]),
            ]
            cfg_d[c] = dict(valid=c < (Const(1, 4) << self.code_width),
                            v=Mux(entry.sign, -mag, mag))
            m.d.sync += [
                cfg_valid[c].eq(cfg_d[c]["valid"]),
                cfg_v[c].eq(cfg_d[c]["v"]),
                cfg_key[c].eq(Mux(entry.sign, 7 - exp, 23 + exp)),
            ]
        # beats_max[c][d]: c is preferred over d as "largest" (larger value, or equal value
        # and lower index); beats_min likewise for "smallest".
        beats_max = [[None] * nc for _ in range(nc)]
        beats_min = [[None] * nc for _ in range(nc)]
        key_gt = {}               # key_gt[c, d]: code c's value is larger than code d's
        for c in range(nc):
            for d in range(c + 1, nc):
                gt, lt = Signal(name=f"cfg_gt{c}_{d}"), Signal(name=f"cfg_lt{c}_{d}")
                m.d.sync += [gt.eq(cfg_key[c] > cfg_key[d]), lt.eq(cfg_key[c] < cfg_key[d])]
                beats_max[c][d], beats_max[d][c] = ~lt, lt
                beats_min[c][d], beats_min[d][c] = ~gt, gt
                key_gt[c, d], key_gt[d, c] = gt, lt

        def select(onehot, values):
            """The value of ``values`` that the one-hot ``onehot`` selects, as an AND-OR tree
            (0 when none is selected)."""
            return any_of(Mux(onehot[k], v, 0) for k, v in enumerate(values))

        def pick(flags, beats, name):
            """One-hot of the preferred flagged code, and its index."""
            onehot = []
            for c in range(nc):
                sel = Signal(name=f"{name}_sel{c}")
                others = [~flags[d] | beats[c][d] for d in range(nc) if d != c]
                m.d.comb += sel.eq(flags[c] & (Cat(*others).all() if others else 1))
                onehot.append(sel)
            index = Signal(n_max, name=f"{name}_idx")
            for c in range(nc):
                with m.If(onehot[c]):
                    m.d.comb += index.eq(c)
            return onehot, index

        if clamped is not None:
            # Each lane's copies of the code values and of their flags (register_copy),
            # beside its comparators: no configuration register's net spans the lanes in front
            # of a carry chain.
            def lane_cfg(lane):
                return [dict(v=register_copy(m, cfg_v[c], cfg_d[c]["v"], f"cfg_v{c}_l{lane}"),
                             valid=register_copy(m, cfg_valid[c], cfg_d[c]["valid"],
                                                 f"cfg_valid{c}_l{lane}"))
                        for c in range(nc)]
        if self._gap_register:
            # Each code's gap to the next larger valid value (stage 6's factor hi - lo, as hi
            # is the next value above lo), in four configuration stages, so that no
            # configuration path is deeper than a pick: the codes above, the next one up
            # (one-hot), its value, the gap. Stage 5b selects the gap with lo's one-hot, so no
            # subtraction follows the neighbours' pick.
            cfg_gap = [Signal(unsigned(_CODE_FRAC + 9), name=f"cfg_gap{c}") for c in range(nc)]
            # (and the sum lo + hi, stage 6's midpoint, so that stage 6 is one comparison)
            cfg_mid = [Signal(signed(_CODE_FRAC + 10), name=f"cfg_mid{c}") for c in range(nc)]
            for c in range(nc):
                above = Signal(nc, name=f"cfg_above{c}")
                m.d.sync += above.eq(Cat(Const(0) if d == c else cfg_valid[d] & key_gt[d, c]
                                         for d in range(nc)))
                up_hot = Signal(nc, name=f"cfg_up{c}")
                m.d.sync += up_hot.eq(Cat(pick(above, beats_min, f"cfg_up{c}")[0]))
                up_v = Signal(signed(_CODE_FRAC + 9), name=f"cfg_up_v{c}")
                m.d.sync += [up_v.eq(select(up_hot, cfg_v)),
                             cfg_gap[c].eq(up_v - cfg_v[c]), cfg_mid[c].eq(up_v + cfg_v[c])]
        _, min_idx = pick(cfg_valid, beats_min, "cfg_min")
        _, max_idx = pick(cfg_valid, beats_max, "cfg_max")
        cfg_min_code = Signal(n_max)
        cfg_max_code = Signal(n_max)
        m.d.sync += [cfg_min_code.eq(min_idx), cfg_max_code.eq(max_idx)]

        codes = []
        for lane in range(L):
            # Stage 5 (discrete): clamp specials, compare with every code value.
            if clamped is not None:
                y, sticky = clamped[0][lane], clamped[1][lane]
            else:
                y = Signal(signed(y_bits), name=f"dy{lane}")
                sticky = Signal(name=f"dsticky{lane}")
                with m.If(s5_special[lane] & s5_isnan[lane]):
                    m.d.comb += [y.eq(0), sticky.eq(0)]
                with m.Elif(s5_special[lane] | s5_big[lane]):
                    # Beyond every code value, so the outer code whatever the sticky bit.
                    m.d.comb += [y.eq(Mux(s5_neg[lane], -y_max, y_max)), sticky.eq(0)]
                with m.Else():
                    m.d.comb += [y.eq(s5_y[lane]), sticky.eq(s5_sticky[lane])]
            d5_le = Signal(nc, name=f"d5_le{lane}")
            d5_y = Signal(signed(y_bits), name=f"d5_y{lane}")
            d5_s = Signal(name=f"d5_s{lane}")
            d5_r = Signal(G, name=f"d5_r{lane}")
            lc = lane_cfg(lane) if clamped is not None else [
                dict(v=cfg_v[c], valid=cfg_valid[c]) for c in range(nc)]
            with m.If(en):
                m.d.sync += [d5_y.eq(y), d5_s.eq(sticky), d5_r.eq(s5_rand[lane])]
                for c in range(nc):
                    m.d.sync += d5_le[c].eq(lc[c]["valid"] & (y >= (lc[c]["v"] << G)))

            # Stage 5b (discrete): the neighbours lo <= x < hi and their codes.
            gt = Signal(nc, name=f"d5_gt{lane}")
            m.d.comb += gt.eq(cfg_valid & ~d5_le)
            lo_hot, lo_idx = pick(d5_le, beats_max, f"lo{lane}")
            hi_hot, hi_idx = pick(gt, beats_min, f"hi{lane}")
            lo_v = Signal(signed(_CODE_FRAC + 9), name=f"lo_v{lane}")
            hi_v = Signal(signed(_CODE_FRAC + 9), name=f"hi_v{lane}")
            if self._gap_register:
                m.d.comb += [lo_v.eq(select(lo_hot, cfg_v)), hi_v.eq(select(hi_hot, cfg_v))]
            else:
                for c in range(nc):
                    with m.If(lo_hot[c]):
                        m.d.comb += lo_v.eq(cfg_v[c])
                    with m.If(hi_hot[c]):
                        m.d.comb += hi_v.eq(cfg_v[c])
            d6 = {name: Signal(shape, name=f"d6_{name}{lane}") for name, shape in [
                ("y", signed(y_bits)), ("s", 1), ("r", G), ("lo", signed(_CODE_FRAC + 9)),
                ("hi", signed(_CODE_FRAC + 9)), ("lo_idx", n_max), ("hi_idx", n_max),
                ("below", 1), ("above", 1)]}
            with m.If(en):
                m.d.sync += [
                    d6["y"].eq(d5_y), d6["s"].eq(d5_s), d6["r"].eq(d5_r),
                    d6["lo"].eq(lo_v), d6["hi"].eq(hi_v),
                    d6["lo_idx"].eq(lo_idx), d6["hi_idx"].eq(hi_idx),
                    d6["below"].eq(d5_le == 0), d6["above"].eq(gt == 0),
                ]

            # Stage 6 (discrete): nearest or stochastic choice between lo and hi.
            lo_scaled = d6["lo"] << G
            diff = Signal(signed(y_bits + 2), name=f"ddiff{lane}")
            gap = Signal(unsigned(_CODE_FRAC + 9), name=f"dgap{lane}")
            z = Signal(signed(y_bits + 2), name=f"dz{lane}")
            mid = Signal(signed(y_bits + 2), name=f"dmid{lane}")
            if self._gap_register:
                # (stage 5b's lower neighbour's gap, a register beside d6's)
                lo_gap = Signal.like(gap, name=f"lo_gap{lane}")
                lo_mid = Signal(signed(_CODE_FRAC + 10), name=f"lo_mid{lane}")
                d6_mid = Signal.like(lo_mid, name=f"d6_mid{lane}")
                m.d.comb += [lo_gap.eq(select(lo_hot, cfg_gap)), lo_mid.eq(select(lo_hot, cfg_mid))]
                with m.If(en):
                    m.d.sync += [gap.eq(lo_gap), d6_mid.eq(lo_mid)]
            # (With gap_register, z = 2y + s, s one bit, is a concatenation: no carry chain.)
            gr = self._gap_register
            m.d.comb += [
                diff.eq(d6["y"] - lo_scaled + d6["s"]),
                *([] if gr else [gap.eq(d6["hi"] - d6["lo"])]),
                z.eq(Cat(d6["s"], d6["y"]).as_signed() if gr else (d6["y"] << 1) + d6["s"]),
                mid.eq(d6_mid << G if gr else (d6["lo"] + d6["hi"]) << G),
            ]
            # The product r·(hi - lo) is registered before its comparison (stage 7), which keeps
            # the hard multiplier's combinational delay on its own.
            d7 = {name: Signal(shape, name=f"d7_{name}{lane}") for name, shape in [
                ("prod", unsigned(G + _CODE_FRAC + 9)), ("diff", signed(y_bits + 2)),
                ("near_hi", 1), ("lo_idx", n_max), ("hi_idx", n_max), ("below", 1),
                ("above", 1)]}
            with m.If(en):
                m.d.sync += [
                    d7["prod"].eq(d6["r"] * gap), d7["diff"].eq(diff),
                    d7["near_hi"].eq((z > mid) | ((z == mid) & (d6["hi_idx"] < d6["lo_idx"]))),
                ]
                if gr:
                    # The clamps decided in stage 6: each neighbour's code as it will be chosen
                    # (the book's least or greatest below or above the range), so that stage
                    # 7's comparison is followed by one choice between two registers.
                    m.d.sync += [
                        d7[k].eq(Mux(d6["below"], cfg_min_code,
                                     Mux(d6["above"], cfg_max_code, d6[k])))
                        for k in ("lo_idx", "hi_idx")
                    ]
                else:
                    m.d.sync += [
                        d7["lo_idx"].eq(d6["lo_idx"]), d7["hi_idx"].eq(d6["hi_idx"]),
                        d7["below"].eq(d6["below"]), d7["above"].eq(d6["above"]),
                    ]

            # Stage 7 (discrete): the stochastic comparison and the code.
            stoch_hi = d7["prod"] < d7["diff"]
            code = Signal(n_max, name=f"dcode{lane}")
            if gr:
                m.d.comb += code.eq(Mux(Mux(stoch, stoch_hi, d7["near_hi"]),
                                        d7["hi_idx"], d7["lo_idx"]))
                codes.append(code)
                continue
            with m.If(d7["below"]):
                m.d.comb += code.eq(cfg_min_code)
            with m.Elif(d7["above"]):
                m.d.comb += code.eq(cfg_max_code)
            with m.Elif(Mux(stoch, stoch_hi, d7["near_hi"])):
                m.d.comb += code.eq(d7["hi_idx"])
            with m.Else():
                m.d.comb += code.eq(d7["lo_idx"])
            codes.append(code)
        return codes
