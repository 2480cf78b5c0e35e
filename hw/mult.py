"""Registered signed multiplier arrays: LUT logic, iCE40 SB_MAC16 (dual 8×8), ECP5 MULT18X18D.

All styles have the same contract, so a block can switch style per device profile:
``p[i] = a[i] · b[i]`` (signed two's complement, full ``2·width``-bit product), registered:
the product of the operands present in a cycle with ``en`` high appears on ``p`` after the next
clock edge and holds while ``en`` is low. Hard-block styles use :class:`amaranth.hdl.Instance`;
the simulator cannot run an ``Instance``, so with ``sim_model=True`` (the default) every style
elaborates to the behavioural model below, which is what the tests check. Pass
``sim_model=False`` to generate the hard blocks for synthesis.

* ``"lut"``: behavioural ``a * b`` into a register; Yosys maps it to logic (or to DSPs where
  ``synth_ice40 -dsp`` chooses to).
* ``"sb_mac16"``: one iCE40 SB_MAC16 per two lanes in 8×8 mode (``MODE_8x8``, both operands
  signed, ``TOP/BOT_8x8_MULT_REG`` product registers, ``CE = en``): lane ``2k`` uses the low
  bytes of A/B and output ``O[15:0]``, lane ``2k+1`` the high bytes and ``O[31:16]``
  (semantics of Yosys's ``cells_sim.v``). ``width <= 8``.
* ``"mult18x18d"``: one ECP5 MULT18X18D per lane, inputs sign-extended to 18 bits, input
  registers A and B on ``CLK0``/``CE0 = en`` (no output register), ``SIGNEDA = SIGNEDB = 1``.
  ``width <= 18``. The input registers, not the output register, hold the operands: they take
  the routing of a broadcast operand to every DSP off the multiplier's path, which is what
  limits a 64-lane ECP5-85F column (85 MHz with the output register, 94 MHz with these).

``hard_lanes`` caps the lanes of the chosen style: lanes ``hard_lanes`` and up are *fabric*
multipliers (:func:`fabric_product`), an explicit Baugh-Wooley sum of ``width`` AND rows with
the product register after it. They hold no ``$mul`` cell, so no synthesis flow maps them to a
DSP (``synth_ecp5`` maps every ``$mul``, including the ``"lut"`` style's, to MULT18X18D): they
are the lanes beyond a device's DSP budget. Like the hard blocks they elaborate to the
behavioural model with ``sim_model=True``; with ``sim_model=False`` they simulate as they are.
"""

from amaranth.hdl import Cat, ClockSignal, Const, Instance, Module, Signal, Value, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["MULT_STYLES", "MultiplierArray", "fabric_product", "fabric_product_int",
           "check_hard_lanes"]

#: Multiplier styles and their largest operand width.
MULT_STYLES = {"lut": 18, "sb_mac16": 8, "mult18x18d": 18}


def _fabric_rows(w):
    """The Baugh-Wooley rows of a ``w × w`` signed product: ``(offset, bits)`` per row ``i``,
    each bit ``(j, i, inverted)`` for ``a[j] & b[i]`` (complemented where exactly one of ``i``,
    ``j`` is the sign position ``w - 1``), or ``None`` for a constant one (``2^w`` above row
    0, ``2^(2w-1)`` above row ``w - 1``)."""
    rows = []
    for i in range(w):
        bits = [(j, i, (i == w - 1) != (j == w - 1)) for j in range(w)]
        if i in (0, w - 1):
            bits.append(None)
        rows.append((i, bits))
    return rows


def _fabric_sum(rows, w, add):
    """Sum ``rows`` (``(offset, value, width)``) pairwise, level by level; ``add(v0, v1,
    shift, width, name)`` returns ``v0 + (v1 << shift)`` in ``width`` bits. Returns the total's
    ``(offset, value)``. Each sum is one bit wider than its wider operand, at most reaching
    bit ``2w - 1``."""
    level = 0
    while len(rows) > 1:
        nxt = []
        for k in range(0, len(rows) - 1, 2):
            (o0, v0, n0), (o1, v1, n1) = rows[k], rows[k + 1]
            n = min(max(n0, o1 - o0 + n1) + 1, 2 * w - o0)
            nxt.append((o0, add(v0, v1, o1 - o0, n, f"s{level}_{k // 2}"), n))
        if len(rows) % 2:
            nxt.append(rows[-1])
        rows = nxt
        level += 1
    return rows[0][:2]


def fabric_product(m, a, b, name="fab"):
    """The ``2·w``-bit signed product of ``w``-bit signed ``a`` and ``b`` without a multiplier.

    Baugh-Wooley: ``w`` unsigned rows of AND bits ``a[j] & b[i]`` at weight ``2^(i+j)``, the
    bits with exactly one sign operand (``i`` or ``j`` equal to ``w - 1``) complemented, plus
    ``2^w + 2^(2w-1)`` (a one above row 0 and one above row ``w - 1``), modulo ``2^(2w)``. The
    rows are unsigned and summed pairwise, each sum a signal of ``m`` (a tree of ``ceil(log2
    w)`` levels of carry chains): at ``w = 8`` on ECP5 about 36 CCU2C and 100 LUT4 a lane,
    where Yosys's own LUT multiplier (``synth_ecp5 -nodsp``), or one sum of all the rows
    (which Yosys turns into a carry-save tree), take about 300 LUT4.

    Parameters
    ----------
    m : Module
        Takes the tree's sums (combinational).
    a, b : Value
        Operands of the same width ``w >= 2``, read as two's complement.
    name : str
        Prefix of the sums' signal names.

    Returns
    -------
    Value
        ``signed(2·w)``.
    """
    a, b = Value.cast(a), Value.cast(b)
    w = len(a)

    def bit(t):
        if t is None:
            return Const(1, 1)
        j, i, inverted = t
        return ~(a[j] & b[i]) if inverted else a[j] & b[i]

    def add(v0, v1, shift, width, tag):
        s = Signal(width, name=f"{name}_{tag}")
        m.d.comb += s.eq(v0 + Cat(Const(0, shift), v1))
        return s

    rows = [(o, Cat(*(bit(t) for t in bits)), len(bits)) for o, bits in _fabric_rows(w)]
    offset, total = _fabric_sum(rows, w, add)
    return Cat(Const(0, offset), total)[:2 * w].as_signed()


def fabric_product_int(a, b, w):
    """:func:`fabric_product`'s rows and sums evaluated on integers: the same bits, the same
    tree and the same sum widths. ``a`` and ``b`` are ``w``-bit two's complement values
    (Python or NumPy integers, or NumPy integer arrays: every pair at once); returns the
    signed ``2·w``-bit product."""
    def bit(t):
        if t is None:
            return 1
        j, i, inverted = t
        x = (a >> j) & (b >> i) & 1
        return x ^ 1 if inverted else x

    def add(v0, v1, shift, width, tag):
        return (v0 + (v1 << shift)) & ((1 << width) - 1)

    rows = [(o, sum(bit(t) << k for k, t in enumerate(bits)), len(bits))
            for o, bits in _fabric_rows(w)]
    offset, total = _fabric_sum(rows, w, add)
    p = (total << offset) & ((1 << 2 * w) - 1)
    return p - ((p >> (2 * w - 1)) << 2 * w)


def check_hard_lanes(hard_lanes, lanes, name="Hard lane count"):
    """``hard_lanes`` if it is ``None`` or an integer in ``[0, lanes]``.

    Raises
    ------
    TypeError
        If it is neither ``None`` nor an integer (bools rejected).
    ValueError
        If it is out of range: "Hard lane count must be an integer between 0 and 32, not 40".
    """
    if hard_lanes is None:
        return None
    if not isinstance(hard_lanes, int) or isinstance(hard_lanes, bool):
        raise TypeError(f"{name} must be None or an integer between 0 and {lanes}, "
                        f"not {hard_lanes!r}")
    if not 0 <= hard_lanes <= lanes:
        raise ValueError(f"{name} must be an integer between 0 and {lanes}, not {hard_lanes}")
    return hard_lanes


class MultiplierArray(wiring.Component):
    """``lanes`` registered signed multipliers of ``width``-bit operands.

    Parameters
    ----------
    lanes : int
        Number of products (1..256); ``"sb_mac16"`` pairs lanes, using ``ceil(lanes / 2)`` DSPs.
    width : int
        Operand width (2..18, at most 8 for ``"sb_mac16"``).
    style : {"lut", "sb_mac16", "mult18x18d"}
        Implementation.
    sim_model : bool
        Elaborate the behavioural model instead of the hard blocks and the fabric lanes
        (always for ``"lut"`` lanes).
    hard_lanes : int or None
        At most this many lanes (the first ones, ``0..lanes``) use ``style``; the others are
        fabric multipliers (:func:`fabric_product`, never a DSP). ``None``: every lane.
        ``"sb_mac16"`` takes ``ceil(hard_lanes / 2)`` DSPs.
    en_group : int or None
        Lanes per clock enable (1..``lanes``; even with ``"sb_mac16"``, whose two lanes share a
        DSP): ``en`` has ``ceil(lanes / en_group)`` bits and lane ``i`` takes ``en[i //
        en_group]``, so that each group's enable can be a register of its own beside its
        multipliers. ``None`` (the default): one enable for every lane.

    Members
    -------
    a, b : In(ArrayLayout(signed(width), lanes))
        Operands.
    en : In(1), or In(ceil(lanes / en_group)) with ``en_group``
        Clock enable of the product register (per group of lanes with ``en_group``).
    p : Out(ArrayLayout(signed(2 * width), lanes))
        Registered products.

    Raises
    ------
    TypeError
        For a non-integer ``lanes`` / ``width`` / ``hard_lanes``, a non-string style or a
        non-bool ``sim_model``.
    ValueError
        For values out of range or an unknown style.
    """

    def __init__(self, *, lanes=2, width=8, style="lut", sim_model=True, hard_lanes=None,
                 en_group=None):
        try:
            self._validate(lanes, width, style, sim_model)
            self._hard_lanes = check_hard_lanes(hard_lanes, lanes)
            if en_group is not None:
                if not isinstance(en_group, int) or isinstance(en_group, bool):
                    raise TypeError(f"Enable group must be None or an integer between 1 and "
                                    f"{lanes}, not {en_group!r}")
                if not 1 <= en_group <= lanes:
                    raise ValueError(f"Enable group must be an integer between 1 and {lanes}, "
                                     f"not {en_group}")
                if style == "sb_mac16" and en_group % 2:
                    raise ValueError(f"Enable group must be even with style 'sb_mac16' (two "
                                     f"lanes share a DSP), not {en_group}")
        except (TypeError, ValueError):
            self._MustUse__silence = True    # a rejected component is not "unused"
            raise
        self._lanes = lanes
        self._width = width
        self._style = style
        self._sim_model = sim_model
        self._en_group = en_group
        super().__init__({
            "a": In(data.ArrayLayout(signed(width), lanes)),
            "b": In(data.ArrayLayout(signed(width), lanes)),
            "en": In(1 if en_group is None else -(-lanes // en_group)),
            "p": Out(data.ArrayLayout(signed(2 * width), lanes)),
        })

    @staticmethod
    def _validate(lanes, width, style, sim_model):
        if not isinstance(style, str):
            raise TypeError(f"Multiplier style must be one of {', '.join(MULT_STYLES)}, "
                            f"not {style!r}")
        if style not in MULT_STYLES:
            raise ValueError(f"Multiplier style must be one of {', '.join(MULT_STYLES)}, "
                             f"not {style!r}")
        for name, value, hi in (("Lane count", lanes, 256),
                                ("Operand width", width, MULT_STYLES[style])):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an integer between {1 if name[0] == 'L' else 2}"
                                f" and {hi}, not {value!r}")
        if not 1 <= lanes <= 256:
            raise ValueError(f"Lane count must be an integer between 1 and 256, not {lanes}")
        if not 2 <= width <= MULT_STYLES[style]:
            raise ValueError(f"Operand width must be an integer between 2 and "
                             f"{MULT_STYLES[style]} for style {style!r}, not {width}")
        if not isinstance(sim_model, bool):
            raise TypeError(f"sim_model must be a bool, not {sim_model!r}")

    @property
    def lanes(self):
        return self._lanes

    @property
    def width(self):
        return self._width

    @property
    def style(self):
        return self._style

    @property
    def sim_model(self):
        return self._sim_model

    @property
    def en_group(self):
        """Lanes per bit of ``en`` (``None``: one enable)."""
        return self._en_group

    def _en(self, lane):
        return self.en if self._en_group is None else self.en[lane // self._en_group]

    def _en_groups(self, lo, hi):
        # Lanes lo..hi-1 in runs of one enable each: (lanes, enable).
        if self._en_group is None:
            return [(range(lo, hi), self.en)] if hi > lo else []
        g = self._en_group
        return [(range(max(lo, k), min(hi, k + g)), self.en[k // g])
                for k in range(lo - lo % g, hi, g)]

    @property
    def hard_lanes(self):
        """Lanes of ``style`` (the first ones); the rest are fabric multipliers."""
        return self._lanes if self._hard_lanes is None else self._hard_lanes

    def elaborate(self, platform):
        m = Module()
        hard = self.hard_lanes
        if self._sim_model:
            for lanes, en in self._en_groups(0, self._lanes):
                with m.If(en):
                    for i in lanes:
                        m.d.sync += self.p[i].eq(self.a[i] * self.b[i])
            return m
        if self._style == "lut":
            for lanes, en in self._en_groups(0, hard):
                with m.If(en):
                    for i in lanes:
                        m.d.sync += self.p[i].eq(self.a[i] * self.b[i])
        elif self._style == "sb_mac16":
            self._sb_mac16(m, hard)
        else:
            self._mult18x18d(m, hard)
        for lanes, en in self._en_groups(hard, self._lanes):
            with m.If(en):
                for i in lanes:
                    m.d.sync += self.p[i].eq(fabric_product(m, self.a[i], self.b[i],
                                                            f"fab{i}"))
        return m

    def _sb_mac16(self, m, lanes):
        zero = Const(0, 8)
        for k in range(0, lanes, 2):
            lo_a = Value.cast(self.a[k])
            lo_b = Value.cast(self.b[k])
            pair = k + 1 < lanes
            hi_a = Value.cast(self.a[k + 1]) if pair else zero
            hi_b = Value.cast(self.b[k + 1]) if pair else zero
            # Sign-extend each operand to its byte: the 8x8 mode signs bit 7 / bit 15.
            ext = [Cat(v, v[-1].replicate(8 - len(v))) if len(v) < 8 else v
                   for v in (lo_a, hi_a, lo_b, hi_b)]
            o = Signal(32, name=f"mac{k // 2}_o")
            m.submodules[f"mac{k // 2}"] = Instance(
                "SB_MAC16",
                p_NEG_TRIGGER=0, p_C_REG=0, p_A_REG=0, p_B_REG=0, p_D_REG=0,
                p_TOP_8x8_MULT_REG=1, p_BOT_8x8_MULT_REG=1,
                p_PIPELINE_16x16_MULT_REG1=0, p_PIPELINE_16x16_MULT_REG2=0,
                p_TOPOUTPUT_SELECT=2, p_TOPADDSUB_LOWERINPUT=0, p_TOPADDSUB_UPPERINPUT=0,
                p_TOPADDSUB_CARRYSELECT=0, p_BOTOUTPUT_SELECT=2, p_BOTADDSUB_LOWERINPUT=0,
                p_BOTADDSUB_UPPERINPUT=0, p_BOTADDSUB_CARRYSELECT=0, p_MODE_8x8=1,
                p_A_SIGNED=1, p_B_SIGNED=1,
                i_CLK=ClockSignal("sync"), i_CE=self._en(k),
                i_A=Cat(ext[0], ext[1]), i_B=Cat(ext[2], ext[3]), i_C=Const(0, 16),
                i_D=Const(0, 16),
                i_AHOLD=0, i_BHOLD=0, i_CHOLD=0, i_DHOLD=0, i_IRSTTOP=0, i_IRSTBOT=0,
                i_ORSTTOP=0, i_ORSTBOT=0, i_OLOADTOP=0, i_OLOADBOT=0, i_ADDSUBTOP=0,
                i_ADDSUBBOT=0, i_OHOLDTOP=0, i_OHOLDBOT=0, i_CI=0, i_ACCUMCI=0, i_SIGNEXTIN=0,
                o_O=o)
            m.d.comb += self.p[k].eq(o[:16].as_signed())
            if pair:
                m.d.comb += self.p[k + 1].eq(o[16:].as_signed())

    def _mult18x18d(self, m, lanes):
        for k in range(lanes):
            a = Value.cast(self.a[k])
            b = Value.cast(self.b[k])
            a18 = Cat(a, a[-1].replicate(18 - len(a))) if len(a) < 18 else a
            b18 = Cat(b, b[-1].replicate(18 - len(b))) if len(b) < 18 else b
            p = Signal(36, name=f"mul{k}_p")
            ports = {f"i_A{j}": a18[j] for j in range(18)}
            ports.update({f"i_B{j}": b18[j] for j in range(18)})
            ports.update({f"i_C{j}": 0 for j in range(18)})
            ports.update({f"o_P{j}": p[j] for j in range(36)})
            m.submodules[f"mul{k}"] = Instance(
                "MULT18X18D",
                p_REG_INPUTA_CLK="CLK0", p_REG_INPUTA_CE="CE0", p_REG_INPUTA_RST="RST0",
                p_REG_INPUTB_CLK="CLK0", p_REG_INPUTB_CE="CE0", p_REG_INPUTB_RST="RST0",
                p_REG_INPUTC_CLK="NONE", p_REG_PIPELINE_CLK="NONE", p_REG_OUTPUT_CLK="NONE",
                p_GSR="DISABLED", p_RESETMODE="SYNC",
                p_SOURCEB_MODE="B_SHIFT", p_MULT_BYPASS="DISABLED",
                i_SIGNEDA=1, i_SIGNEDB=1, i_SOURCEA=0, i_SOURCEB=0,
                i_CLK0=ClockSignal("sync"), i_CLK1=0, i_CLK2=0, i_CLK3=0,
                i_CE0=self._en(k), i_CE1=1, i_CE2=1, i_CE3=1,
                i_RST0=0, i_RST1=0, i_RST2=0, i_RST3=0,
                **ports)
            m.d.comb += self.p[k].eq(p[:2 * self._width].as_signed())
