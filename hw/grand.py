"""Irwin–Hall Gaussian ("grand") unit: ``L`` lanes of xoroshiro128aox-fed random numbers."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from lowbit.sim.prng import MASK64

from .common import check_bool as _check_bool
from .common import check_int as _check_int
from .prng import Xoroshiro128aox, lane_state_layout

__all__ = ["GrandMode", "sample_layout", "GrandUnit"]


class GrandMode(enum.Enum, shape=3):
    """Run-time mode of :class:`GrandUnit` (the golden model's names in brackets).

    Codes 6 and 7 are not modes; the unit treats them as ``NORMAL``.
    """
    NORMAL = 0          # "normal":    (S − 186) / 32
    NORMAL_144 = 1      # "normal144": sum of 12 grand normals / √12 (fixed-point rule)
    TRUNC_2SIGMA = 2    # "trunc2":    N1, else N2, else U + U
    TRUNC_3SIGMA = 3    # "trunc3":    N1, else U + U + U
    UNIFORM = 4         # "uniform":   uniform on the odd multiples of 2^-11 in (−1, 1)
    RAW = 5             # "raw":       f32 = w[31:0], f16 = w[15:0]


#: One lane's result: the same value as binary16 and binary32 bit patterns.
sample_layout = data.StructLayout({"f16": 16, "f32": 32})

# Kinds of a stage-D result and their scale: v · 2^-5 (N), 2^-11 (U), 2^-9 (F); M: normal-144.
_KIND_N, _KIND_U, _KIND_F, _KIND_M = range(4)
# PRNG words per result (lowbit.sim.grand.WORDS_PER_RESULT).
_WORDS = {GrandMode.NORMAL: 1, GrandMode.NORMAL_144: 12, GrandMode.TRUNC_2SIGMA: 3,
          GrandMode.TRUNC_3SIGMA: 2, GrandMode.UNIFORM: 1, GrandMode.RAW: 1}



_MODE_NAMES = {"normal": GrandMode.NORMAL, "normal144": GrandMode.NORMAL_144,
               "trunc2": GrandMode.TRUNC_2SIGMA, "trunc3": GrandMode.TRUNC_3SIGMA,
               "uniform": GrandMode.UNIFORM, "raw": GrandMode.RAW}


def _check_modes(modes):
    if modes is None:
        return frozenset(GrandMode)
    if isinstance(modes, (str, GrandMode)) or not hasattr(modes, "__iter__"):
        raise TypeError(f"Modes must be an iterable of GrandMode members or mode names, "
                        f"not {modes!r}")
    result = {GrandMode.NORMAL}
    for mode in modes:
        if isinstance(mode, GrandMode):
            result.add(mode)
        elif isinstance(mode, str):
            if mode not in _MODE_NAMES:
                raise ValueError(f"Mode name must be one of {', '.join(_MODE_NAMES)}, "
                                 f"not {mode!r}")
            result.add(_MODE_NAMES[mode])
        else:
            raise TypeError(f"Mode must be a GrandMode member or a mode name, not {mode!r}")
    return frozenset(result)


def _sext(v, width):
    """``v`` sign-extended (or truncated) to ``width`` bits, as an unsigned bit pattern."""
    v = v.as_signed()
    return Cat(v, v[-1].replicate(max(0, width - len(v))))[:width]


class GrandUnit(wiring.Component):
    """``L`` lanes of Irwin–Hall Gaussian (and truncated, uniform, raw) random numbers.

    Bit-exact with :class:`lowbit.sim.grand.GrandModel` ``(reset_seed, lanes)``: lane ``k`` consumes
    the words of lane ``k`` of an internal :class:`lowbit.hw.prng.Xoroshiro128aox`, and each result
    takes ``lowbit.sim.grand.WORDS_PER_RESULT[mode]`` consecutive words (1 for normal, uniform and
    raw; 2 for trunc-3σ; 3 for trunc-2σ; 12 for normal-144). Words are never skipped, so the
    output sequence is the model's sequence whatever the back-pressure.

    Pipeline (all lanes in lockstep, one global stall; every stage has at most one carry
    chain, for Fmax on iCE40; no DSP or RAM is used). The last stage feeds ``o`` through a
    skid buffer: when ``o`` is offered a result but not ready, that result moves into a spare
    register and ``o`` shows it from there, and the pipeline stalls from the next cycle until
    it is taken. So the stall is a register ("the spare register is empty"), not a function
    of ``o.ready``: no combinational path runs from ``o.ready`` into the clock enables of the
    stages (``o.ready`` only reaches the stall register's input; ``o.payload`` is a 2:1
    multiplexer of two registers). The spare register adds no latency and no bubbles.

    ====  =====================================================================================
    A     the PRNG word (bits [59:0]) and the mode sequencer (first / last word of a result)
    B1    sums of two 5-bit fields (six of them); the first sums of the truncation fallbacks
    B     sums of four 5-bit fields (three of them); the truncation fallbacks' field sums
    C     ``n = S − 186``; ``fc``: the fallback numerator of the current truncated mode, or
          the uniform's numerator
    D     the mode's signed result ``v · 2^-E`` (the normal-144 accumulator, the N1/N2
          selection of the truncated modes: the range flags ``|n| ≤ 64`` and ``|n| ≤ 96``
          are both registered with the candidate, the mode picks one in the next cycle)
    D2    sign and magnitude ``|v| < 2^12``
    E1    position ``p`` of the leading one
    E2    ``M = |v| << (11 − p)``
    F     addends of ``M · 2365 = M·2304 + M·60 + M`` (normal-144) or ``M << 11``
    G     one carry-save level and one adder: ``P``
    H1    fraction, round-up bit (nearest, ties to even; only normal-144 ever rounds) and
          exponent
    H2    the rounding increment, f32 widening; the output register (and its spare)
    ====  =====================================================================================

    Raw results skip stages B to H1: the word in stage A goes straight to the output register.
    So that they cannot overtake results still in flight, the first raw word after other
    modes waits until the pipeline is empty (at most 11 bubbles; no word is skipped, so the
    sequence is still the model's).

    Latency: the first result of a run is valid ``LATENCY + WORDS_PER_RESULT[mode]`` cycles
    (``LATENCY`` = 12; ``RAW_LATENCY`` = 2 for raw) after the cycle of reset or of a seed
    load (stage A idles for one cycle so that the registered mode is valid). Throughput while
    ``o.ready`` is high: ``L`` results every cycle in the one-word modes (no bubbles), every
    2, 3 or 12 cycles in the others.

    Mode changes take effect at the next result boundary: the mode port is registered and the
    registered value is sampled with the first word of each result. ``seed_load`` acts as a
    synchronous restart: it loads the generator (see :class:`lowbit.hw.prng.Xoroshiro128aox`; the
    host computes the state with ``lowbit.sim.prng.seed_lanes``), empties the pipeline and drops
    ``o.valid`` without waiting for ``o.ready``, like a reset. The next results are the
    model's results for the new state.

    Parameters
    ----------
    lanes : int
        Number of lanes ``L``, 1 to 64 (default 2, as the seed's ``f16v2grand``).
    reset_seed : int
        64-bit seed of the state after reset.
    modes : iterable of GrandMode or str, optional
        Modes to build (default: all). ``NORMAL`` is always built; a mode left out acts as
        ``NORMAL`` at run time, and its datapath (e.g. the ×2365 of normal-144, the raw bypass)
        is not generated. For area-critical builds.
    split_stall : bool
        The stall, which fans out to every stage's clock enable, is split (default
        ``False``): ``o``'s valid and multiplexer read their own flip-flop of the skid
        register's state (``held``, the stall's complement, so that synthesis does not merge
        it with the stall), and each lane's stages and skid register a copy of the stall of
        their own (``adv_k``, each computed from its own output). On a large die one stall
        sits among its loads, far from ``o``'s consumer and from most lanes. The same results
        and timing.

    Members
    -------
    o : Out(stream.Signature(data.ArrayLayout(sample_layout, lanes)))
        Element ``k`` (bits [48k+47:48k]) is lane ``k``: ``f16`` in the low 16 bits, ``f32`` in
        the high 32 bits; both hold the same value (raw mode: ``f32 = w[31:0]``,
        ``f16 = w[15:0]``).
    mode : In(GrandMode)
        Run-time mode.
    seed : In(data.ArrayLayout(lowbit.hw.prng.lane_state_layout, lanes))
        Generator state to load.
    seed_load : In(1)
        Load strobe.

    Raises
    ------
    TypeError
        If ``lanes`` or ``reset_seed`` is not an integer, ``modes`` is not an iterable of
        modes, or ``split_stall`` is not a bool.
    ValueError
        If ``lanes`` or ``reset_seed`` is out of range, or a mode name is unknown.
    """

    #: Cycles from reset or a seed load to the first result, less its words per result.
    LATENCY = 12
    #: The same for raw results, which bypass the arithmetic stages.
    RAW_LATENCY = 2

    def __init__(self, *, lanes=2, reset_seed=0, modes=None, split_stall=False):
        try:
            self._lanes = _check_int("Lane count", lanes, 1, 64)
            self._reset_seed = _check_int("Reset seed", reset_seed, 0, MASK64)
            self._modes = _check_modes(modes)
            self._split_stall = _check_bool("Split stall", split_stall)
        except (TypeError, ValueError):
            self._MustUse__silence = True       # a rejected component is not an unused one
            raise
        super().__init__({
            "o": Out(stream.Signature(data.ArrayLayout(sample_layout, self._lanes))),
            "mode": In(GrandMode),
            "seed": In(data.ArrayLayout(lane_state_layout, self._lanes)),
            "seed_load": In(1),
        })

    @property
    def lanes(self):
        return self._lanes

    @property
    def reset_seed(self):
        return self._reset_seed

    @property
    def split_stall(self):
        return self._split_stall

    @property
    def modes(self):
        """The modes built in (a frozenset of :class:`GrandMode`)."""
        return self._modes

    def elaborate(self, platform):
        m = Module()
        m.submodules.prng = prng = Xoroshiro128aox(lanes=self._lanes,
                                                   reset_seed=self._reset_seed,
                                                   per_lane_ready=self._split_stall)
        lanes = range(self._lanes)
        has = self._modes.__contains__
        # Output skid buffer: the pipeline's last register (main: out_valid, out) feeds o
        # unless the skid register (spare: ~adv, skid) holds the older result. The stall adv
        # is then a register, "the skid register is empty", so no combinational path runs
        # from o.ready to the pipeline's clock enables (it fans out to every stage).
        adv = Signal(init=1)    # every stage moves (the skid register is empty)
        take = Signal()         # stage A takes a word (else it holds a bubble)
        en_a = Signal()         # adv & take, as its own register (stage A's clock enable)
        out_valid = Signal()
        out = Signal(self.o.payload.shape())
        skid = Signal(self.o.payload.shape())
        adv_n = Signal()
        take_n = Signal()
        if self._split_stall:
            held = Signal()     # ~adv, in a flip-flop of its own beside o's consumer
            m.d.sync += held.eq(~adv_n)
            with m.If(self.seed_load):
                m.d.sync += held.eq(0)
            m.d.comb += [self.o.valid.eq(out_valid | held),
                         self.o.payload.eq(Mux(held, skid, out))]
        else:
            m.d.comb += [self.o.valid.eq(out_valid | ~adv),
                         self.o.payload.eq(Mux(adv, out, skid))]
        m.d.comb += [
            adv_n.eq(Mux(adv, ~out_valid, 0) | self.o.ready),
            prng.seed.eq(self.seed),
            prng.seed_load.eq(self.seed_load),
            prng.o.ready.eq(en_a),
        ]
        # The stall as each lane's stages read it: with ``split_stall`` a copy per lane, each
        # computed from its own output (so synthesis keeps the copies apart) and equal to adv on
        # every cycle; it fans out to one lane's clock enables, not to all of them.
        if self._split_stall:
            adv_k = [Signal(init=1, name=f"adv_{k}") for k in lanes]
            # Stage A's enable too (the PRNG lane's step and its word's register), each from
            # its lane's stall copy.
            en_a_k = [Signal(name=f"en_a_{k}") for k in lanes]
            for k in lanes:
                adv_kn = Mux(adv_k[k], ~out_valid, 0) | self.o.ready
                m.d.sync += [adv_k[k].eq(adv_kn), en_a_k[k].eq(adv_kn & take_n)]
                m.d.comb += prng.lane_ready[k].eq(en_a_k[k])
        else:
            adv_k = [adv for k in lanes]
            en_a_k = [en_a for k in lanes]
        # valid[i]: stage i holds the last word of a result, or that result.
        valid = [Signal(name=f"valid_{i}") for i in range(self.LATENCY - 1)]
        raw_valid = Signal()    # stage A holds a raw result (it bypasses the arithmetic)

        # Stage A: the PRNG word (bits [59:0]) and the mode sequencer. The mode port is
        # registered (mode_q) and sampled with the first word of each result; stage A takes
        # no word in the cycle after reset or a seed load, so mode_q is already valid.
        req = Signal(GrandMode)                  # modes not built in act as NORMAL
        req_single = Signal()                    # req results take one word
        req_words_m1 = Signal(4)                 # words per result of req, minus one
        m.d.comb += [req.eq(GrandMode.NORMAL), req_single.eq(1), req_words_m1.eq(0)]
        with m.Switch(self.mode):
            for mode in sorted(self._modes, key=lambda x: x.value):
                with m.Case(mode):
                    words = _WORDS[mode]
                    m.d.comb += [req.eq(mode), req_single.eq(words == 1),
                                 req_words_m1.eq(words - 1)]
        mode_q = Signal(GrandMode)
        single_q = Signal()
        words_m1_q = Signal(4)
        m.d.sync += [mode_q.eq(req), single_q.eq(req_single), words_m1_q.eq(req_words_m1)]
        first = Signal(init=1)                   # the next word starts a result
        cur = Signal(GrandMode)                  # mode of the result in progress
        rem = Signal(4)                          # words of that result still to come
        rem_zero = Signal()
        raw_q = Signal()                         # mode_q is RAW
        m.d.sync += raw_q.eq(req == GrandMode.RAW)
        eff = Signal(GrandMode)
        last = Signal()
        rem_cur = Signal(4)
        is_raw = Signal()
        # A raw result is one word, so a word that does not start a result is never raw:
        # is_raw needs first and raw_q only (no mode compare on the path to valid[0]).
        m.d.comb += [
            eff.eq(Mux(first, mode_q, cur)),
            last.eq(Mux(first, single_q, rem_zero)),
            rem_cur.eq(Mux(first, words_m1_q, rem)),
            is_raw.eq(first & raw_q),
        ]
        # Per-stage copies of (first word of a result, mode); bubbles look like raw words.
        ctl = [(Signal(name=f"first_{c}"), Signal(GrandMode, name=f"mode_{c}"))
               for c in ("A", "B1", "B", "C")]
        wa = [Signal(60, name=f"wa_{k}") for k in lanes]
        with m.If(en_a):
            m.d.sync += [first.eq(last), rem.eq(rem_cur - 1), rem_zero.eq(rem_cur == 1),
                         valid[0].eq(last & ~is_raw), raw_valid.eq(is_raw),
                         ctl[0][0].eq(first), ctl[0][1].eq(eff)]
            with m.If(first):
                m.d.sync += cur.eq(mode_q)
            if not self._split_stall:
                for k in lanes:
                    m.d.sync += wa[k].eq(prng.o.payload[k][:60])
        with m.Elif(adv):
            m.d.sync += [valid[0].eq(0), raw_valid.eq(0),
                         ctl[0][0].eq(0), ctl[0][1].eq(GrandMode.RAW)]
        if self._split_stall:
            for k in lanes:
                with m.If(en_a_k[k]):
                    m.d.sync += wa[k].eq(prng.o.payload[k][:60])
        with m.If(adv):
            for i in range(1, len(ctl)):
                m.d.sync += [a.eq(b) for a, b in zip(ctl[i], ctl[i - 1], strict=True)]
            for i in range(1, len(valid)):
                m.d.sync += valid[i].eq(valid[i - 1])
            m.d.sync += out_valid.eq(valid[-1] | raw_valid)
            if not self._split_stall:
                m.d.sync += skid.eq(out)
        if self._split_stall:
            for k in lanes:
                with m.If(adv_k[k]):
                    m.d.sync += skid[k].eq(out[k])
        m.d.sync += [adv.eq(adv_n), en_a.eq(adv_n & take_n), take.eq(take_n)]
        # A raw result goes straight from stage A to the output register, so it must not
        # overtake results still in the pipeline: the first word of a raw result waits until
        # nothing is in flight. inflight_n may over-estimate by the word pending in stage A
        # when it is not taken, but then the next word is that word, not a raw first word.
        # take is a register (a short clock-enable path): its next value is computed from the
        # next values of first, of the mode decode and of inflight. After reset or a load it is
        # 0 for one cycle, so that mode_q holds the mode port before the first word is taken.
        if has(GrandMode.RAW):
            inflight_n = Cat(*valid).any() | (last & ~is_raw)
            first_n = Mux(en_a, last, first)
            m.d.comb += take_n.eq(~(first_n & (req == GrandMode.RAW) & inflight_n))
        else:
            m.d.comb += take_n.eq(1)

        # Registered decodes of stage C's (first, mode), written per lane (Yosys merges the
        # identical flip-flops, so the netlist holds one copy fanning out to every lane).
        dec = []
        for k in lanes:
            d = {name: Signal(name=f"{name}_c_{k}")
                 for name in ("first", "u", "m", "t", "t2", "t3")}
            mode_b = ctl[2][1]
            with m.If(adv_k[k]):
                m.d.sync += [
                    d["first"].eq(ctl[2][0]),
                    d["u"].eq(mode_b == GrandMode.UNIFORM),
                    d["m"].eq(mode_b == GrandMode.NORMAL_144),
                    d["t"].eq((mode_b == GrandMode.TRUNC_2SIGMA)
                              | (mode_b == GrandMode.TRUNC_3SIGMA)),
                    d["t2"].eq(mode_b == GrandMode.TRUNC_2SIGMA),
                    d["t3"].eq(mode_b == GrandMode.TRUNC_3SIGMA),
                ]
            dec.append(d)
        # Stages B1, B and C: n = S - 186 by an adder tree (B1: sums of two fields, B: of four;
        # one carry chain per stage); fc: the truncation fallbacks, or the uniform.
        nc = [Signal(signed(10), name=f"nc_{k}") for k in lanes]
        fc = [Signal(signed(12), name=f"fc_{k}") for k in lanes]
        truncs = [x for x in (GrandMode.TRUNC_2SIGMA, GrandMode.TRUNC_3SIGMA) if has(x)]
        mode_b = ctl[2][1]
        for k in lanes:
            w = wa[k]
            f = [w[5 * i:5 * i + 5] for i in range(12)]
            pb = [Signal(6, name=f"pb{j}_{k}") for j in range(6)]
            qb = [Signal(7, name=f"qb{j}_{k}") for j in range(3)]
            with m.If(adv_k[k]):
                m.d.sync += [p.eq(f[2 * j] + f[2 * j + 1]) for j, p in enumerate(pb)]
                m.d.sync += [q.eq(pb[2 * j] + pb[2 * j + 1]) for j, q in enumerate(qb)]
                # n = q0 + q1 + q2 - 186.
                m.d.sync += nc[k].eq((qb[0] + qb[1]) + (qb[2] - 186))
            fcv = None
            if truncs:
                # The fallbacks over 2^9 (see lowbit.sim.grand).
                fb2_1 = Signal(11, name=f"fb2_1_{k}")
                fb3_1 = Signal(10, name=f"fb3_1_{k}")
                w3_1 = Signal(9, name=f"w3_1_{k}")
                fb2 = Signal(11, name=f"fb2_{k}")
                fb3 = Signal(11, name=f"fb3_{k}")
                with m.If(adv_k[k]):
                    m.d.sync += [fb2_1.eq(w[0:10] + w[10:20]),
                                 fb3_1.eq(w[0:9] + w[9:18]), w3_1.eq(w[18:27]),
                                 fb2.eq(fb2_1), fb3.eq(fb3_1 + w3_1)]
                fcv = Mux(mode_b == GrandMode.TRUNC_2SIGMA,
                          fb2 + 1 - 1024, fb3.shift_left(1) + 3 - 1536)
            if has(GrandMode.UNIFORM):
                # The uniform's numerator over 2^11 shares fc (and stage D's fallback input):
                # 2i + 1 - 2048 in two's complement is {~i[10], i[9:0], 1}.
                ub1 = Signal(11, name=f"ub1_{k}")
                ub = Signal(11, name=f"ub_{k}")
                with m.If(adv_k[k]):
                    m.d.sync += [ub1.eq(w[:11]), ub.eq(ub1)]
                uv = Cat(1, ub[0:10], ~ub[10]).as_signed()
                fcv = uv if fcv is None else Mux(mode_b == GrandMode.UNIFORM, uv, fcv)
            if fcv is not None:
                with m.If(adv_k[k]):
                    m.d.sync += fc[k].eq(fcv)

        # Stage D: the mode's result as a signed value v · 2^-E(kind), |v| < 2^12:
        # xd = {kind[1:0], v[13:0]}. Stage D2 turns it into sign and magnitude:
        # xd2 = {kind[1:0], neg, mag[11:0]}.
        xd = [Signal(16, name=f"xd_{k}") for k in lanes]
        xd2 = [Signal(15, name=f"xd2_{k}") for k in lanes]
        for k in lanes:
            n = nc[k]
            first_c, t2_c, t3_c = dec[k]["first"], dec[k]["t2"], dec[k]["t3"]
            is_m = Signal(name=f"is_m_{k}")     # stage D2 holds a normal-144 result
            with m.If(adv_k[k]):
                m.d.sync += is_m.eq(dec[k]["m"])
            acc = Signal(signed(14), name=f"acc_{k}")
            total = Signal(signed(14), name=f"total_{k}")
            m.d.comb += total.eq(Mux(first_c, 0, acc) + n)
            sel = Signal(signed(10), name=f"sel_{k}")
            in64 = Signal(name=f"in64_{k}")     # |sel| <= 64 (2σ)
            in96 = Signal(name=f"in96_{k}")     # |sel| <= 96 (3σ)

            def put(v, kind, xd=xd[k]):
                return xd.eq(Cat(_sext(v, 14), kind))

            # fsel: the result is fc (the uniform, or a truncation's fallback).
            fsel = dec[k]["u"] if has(GrandMode.UNIFORM) else Const(0)
            if truncs:
                # Both range flags are registered, the mode picks one a cycle later: no
                # mode multiplexer between n and the flags. |n| <= 186 < 256, so n[8] is
                # n[9] and the compares need 9 bits.
                n9 = Cat(n[:8], n[9]).as_signed()
                with m.If(adv_k[k] & dec[k]["t"] & (first_c | (~in64 & t2_c))):
                    m.d.sync += [sel.eq(n), in64.eq((n9 <= 64) & (n9 >= -64)),
                                 in96.eq((n9 <= 96) & (n9 >= -96))]
                fsel = fsel | (dec[k]["t"] & ~Mux(t3_c, in96, in64))
            # Mutually exclusive cases, in priority order; the rest (bubbles too) is NORMAL.
            cases = []
            if has(GrandMode.NORMAL_144):
                # D2 takes the total from acc (a shorter path than through xd).
                cases.append((dec[k]["m"], [acc.eq(total), xd[k][14:16].eq(_KIND_M)]))
            if has(GrandMode.UNIFORM) or truncs:
                kind = (Mux(dec[k]["u"], _KIND_U, _KIND_F) if has(GrandMode.UNIFORM)
                        else Const(_KIND_F, 2))
                cases.append((fsel, [put(fc[k], kind)]))
            if truncs:
                cases.append((dec[k]["t"], [put(sel, Const(_KIND_N, 2))]))
            with m.If(adv_k[k]):
                for i, (cond, stmts) in enumerate(cases):
                    with (m.Elif if i else m.If)(cond):
                        m.d.sync += stmts
                with (m.Else() if cases else m.If(1)):
                    m.d.sync += put(n, Const(_KIND_N, 2))
            v = Signal(signed(14), name=f"v_{k}")
            if has(GrandMode.NORMAL_144):
                m.d.comb += v.eq(Mux(is_m, acc, xd[k][:14].as_signed()))
            else:
                m.d.comb += v.eq(xd[k][:14].as_signed())
            with m.If(adv_k[k]):
                m.d.sync += xd2[k].eq(Cat(Mux(v < 0, -v, v)[:12], v < 0, xd[k][14:16]))

        # Stages E1 and E2: normalise: xe = {kind, neg, nz, p[3:0], M[11:0]}, where p is the
        # position of the leading one of mag (found in E1) and M = mag << (11 - p) (E2).
        xe = [Signal(20, name=f"xe_{k}") for k in lanes]
        for k in lanes:
            mag = xd2[k][:12]
            p = Signal(4, name=f"p_{k}")
            with m.If(mag[11]):
                m.d.comb += p.eq(11)
            for i in range(10, -1, -1):
                with m.Elif(mag[i]):
                    m.d.comb += p.eq(i)
            xe1 = Signal(20, name=f"xe1_{k}")    # {kind, neg, nz, p[3:0], mag[11:0]}
            norm = Signal(12, name=f"norm_{k}")
            m.d.comb += norm.eq(xe1[:12] << (11 - xe1[12:16]).as_unsigned()[:4])
            with m.If(adv_k[k]):
                m.d.sync += [xe1.eq(Cat(mag, p, mag.any(), xd2[k][12], xd2[k][13:15])),
                             xe[k].eq(Cat(norm, xe1[12:20]))]

        # Stages F and G: P = M · 2365 = M·2304 + M·60 + M for normal-144 (shift-and-add, no
        # DSP), P = M << 11 for the other kinds. F selects three addends, G adds them with one
        # carry-save level and one carry chain. xg = {kind, neg, nz, p[3:0], P[23:0]}.
        xg = [Signal(32, name=f"xg_{k}") for k in lanes]
        for k in lanes:
            mm, meta = xe[k][:12], xe[k][12:20]
            r1 = Signal(24, name=f"r1_{k}")
            meta_f = Signal(8, name=f"meta_{k}")
            with m.If(adv_k[k]):
                m.d.sync += meta_f.eq(meta)
            if has(GrandMode.NORMAL_144):
                is_mf = xe[k][18:20] == _KIND_M
                r2 = Signal(24, name=f"r2_{k}")
                m3 = Signal(12, name=f"m3_{k}")
                with m.If(adv_k[k]):
                    m.d.sync += [
                        r1.eq(Mux(is_mf, mm.shift_left(11) + mm.shift_left(8),
                                  mm.shift_left(11))),
                        r2.eq(Mux(is_mf, mm.shift_left(6) - mm.shift_left(2), 0)),
                        m3.eq(Mux(is_mf, mm, 0)),
                    ]
                csa_s = r1 ^ r2 ^ m3
                csa_c = ((r1 & r2) | (r1 & m3) | (r2 & m3)).shift_left(1)
                prod = csa_s + csa_c
            else:
                with m.If(adv_k[k]):
                    m.d.sync += r1.eq(mm.shift_left(11))
                prod = r1
            with m.If(adv_k[k]):
                m.d.sync += xg[k].eq(Cat(prod[:24], meta_f))

        # Stages H1 and H2: round to f16 (nearest, ties to even) into the output register.
        # H1 picks the fraction, the round-up bit and the exponent:
        # xh = {neg, nz, up, exp[4:0], frac[9:0]}; H2 increments {exp, frac} by up.
        for k in lanes:
            big, p, nz, neg, kind = (xg[k][:24], xg[k][24:28], xg[k][28], xg[k][29],
                                     xg[k][30:32])
            # Kind M: P's leading one is bit 22 or 23 and the value is P · 2^(p - 29). Other
            # kinds are exact: M's leading one is bit 11, value M · 2^(p - 11 - E(kind)).
            top = Signal(name=f"top_{k}")
            m.d.comb += top.eq((kind == _KIND_M) & big[23])
            frac = Mux(top, big[13:23], big[12:22])
            guard = Mux(top, big[12], big[11])
            sticky = Mux(top, big[:12].any(), big[:11].any())
            up = guard & (sticky | frac[0])
            bias = Signal(5, name=f"bias_{k}")
            with m.Switch(kind):
                with m.Case(_KIND_N):
                    m.d.comb += bias.eq(15 - 5)
                with m.Case(_KIND_U):
                    m.d.comb += bias.eq(15 - 11)
                with m.Case(_KIND_F):
                    m.d.comb += bias.eq(15 - 9)
                with m.Case(_KIND_M):
                    m.d.comb += bias.eq(8 + top)
            exp = Signal(5, name=f"exp_{k}")
            m.d.comb += exp.eq(Mux(nz, p + bias, 0))    # zero: frac, exp and up are all 0
            xh = Signal(18, name=f"xh_{k}")
            with m.If(adv_k[k]):
                m.d.sync += xh.eq(Cat(frac, exp, up, nz, neg))
            em = Signal(15, name=f"em_{k}")
            m.d.comb += em.eq(xh[:15] + xh[15])
            e = em[10:15]
            # f16 → f32 widening: the f32 exponent e + 112 of a normal f16 exponent e is
            # {e4, ~e4, ~e4, ~e4, e3..e0} (no subnormal, infinity or NaN ever occurs).
            wide = Mux(xh[16], Cat(Const(0, 13), em[:10], e[:4], ~e[4], ~e[4], ~e[4], e[4],
                                   xh[17]), 0)
            lane = out[k]
            with m.If(adv_k[k]):
                if has(GrandMode.RAW):
                    m.d.sync += [
                        lane.f16.eq(Mux(raw_valid, wa[k][0:16], Cat(em, xh[17]))),
                        lane.f32.eq(Mux(raw_valid, wa[k][0:32], wide)),
                    ]
                else:
                    m.d.sync += [lane.f16.eq(Cat(em, xh[17])), lane.f32.eq(wide)]

        with m.If(self.seed_load):
            m.d.sync += [*(v.eq(0) for v in valid), raw_valid.eq(0), out_valid.eq(0),
                         adv.eq(1), first.eq(1), take.eq(0), en_a.eq(0)]
            if self._split_stall:
                m.d.sync += [a.eq(1) for a in adv_k]
                m.d.sync += [e.eq(0) for e in en_a_k]
        return m
