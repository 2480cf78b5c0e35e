"""Transfer lookup-table engine (DESIGN §3.5, seed 003); golden model :mod:`lowbit.sim.lut`."""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from .common import check_int as _check_int

__all__ = ["TransferLUT"]


def _data(shape, name):
    # Datapath registers need no reset: the valid bits that qualify them have one.
    return Signal(shape, name=name, reset_less=True)


class TransferLUT(wiring.Component):
    """Apply precomputed transfer tables to ``lanes`` codes per cycle.

    **Byte tables** (``i`` -> ``o``): ``tables`` tables of 256 x 8 bits are resident at once.
    A lookup beat carries a table number and ``lanes`` input codes; each output lane is
    ``table[code]`` with the code taken as its uint8 bit pattern (TFLite-Micro convention), so
    int8 and uint8 tables are the same to the hardware. Every lane has its own copy of the
    tables (one read port per lane; a write updates all copies at once), ``256 * tables`` x 8
    bits per lane: on iCE40 one 512 x 8 EBR holds two tables.

    **Interpolated int16 tables** (``i_wide`` -> ``o_wide``, present when ``wide_tables > 0``):
    ``wide_tables`` tables of 513 x 16 bits. Each output lane is TFLite's
    ``lut_lookup_with_interpolation``: ``index = 256 + (x >> 7)``, ``base = lut[index]``,
    ``slope = int16(lut[index + 1] - base)``, result ``int16(base + ((slope * (x & 0x7f) + 64)
    >> 7))``. The even and odd entries sit in two 256 x 16 memories per lane so that both
    neighbours are read in one cycle; entry 512 (only ever a right neighbour) is a register.
    Each wide beat carries a ``format`` (:data:`lowbit.sim.lut.WIDE_FORMATS`), so that one slot
    also serves layers of different widths:

    - 0, int16 -> int16: as above.
    - 1, int16 -> int8: TFLite's int8-output interpolation: the slope is the low byte of
      ``lut[index + 1] - lut[index]`` as an int8 and the result the low byte of ``base +
      delta`` as an int8 (sign-extended on ``o_wide``); only the entries' low bytes matter.
    - 2, int8/uint8 -> int16: an exact 256-entry table stored at entries ``256 + int8(c)``
      (:func:`lowbit.sim.lut.wide_image`); lane code ``c`` is taken from the low 8 bits of the
      lane and looked up as the int16 input ``int8(c) * 128`` (offset 0, so the result is the
      entry). Format 3 acts as 0.

    **Loading** (``i_write``): one entry per beat, always ready. ``wide = 0`` writes byte table
    ``table`` at ``addr`` (0..255) with ``data[0:8]``; ``wide = 1`` writes interpolated table
    ``table`` at ``addr`` (0..512) with ``data``. Writes to a table or address that does not
    exist are ignored. Writes are registered (but with one lane and no wide tables): an entry
    is seen by lookups accepted two or more cycles after its write beat (one or more without
    the register); a lookup that races a write of the same table returns the old or the new
    entry, so load a table before looking it up.

    Latency: ``o`` 1 cycle, ``o_wide`` 6 cycles; each path accepts one beat per cycle while its
    output is taken (a stalled output stalls only its own path). A lookup of a table number
    ``>= tables`` (``>= wide_tables``) returns an unspecified value.

    Parameters
    ----------
    lanes : int
        Lookups per cycle, 1..32 (default 4).
    tables : int
        Resident byte tables, 1..64 (default 2).
    wide_tables : int
        Resident interpolated int16 tables, 0..16 (default 1; 0 removes the int16 datapath).

    Members
    -------
    i : In(stream.Signature(StructLayout({"table": unsigned, "code": ArrayLayout(8, lanes)})))
    o : Out(stream.Signature(ArrayLayout(unsigned(8), lanes)))
    i_write : In(stream.Signature(StructLayout({"wide": 1, "table", "addr": 10, "data": 16})))
    i_wide : In(stream.Signature(StructLayout({"table", "format": 2,
                                               "code": ArrayLayout(signed(16), lanes)})))
    o_wide : Out(stream.Signature(ArrayLayout(signed(16), lanes)))

    Raises
    ------
    TypeError
        If a parameter is not an integer (bool included).
    ValueError
        If a parameter is out of its range.
    """

    def __init__(self, *, lanes=4, tables=2, wide_tables=1):
        _check_int("Lanes", lanes, 1, 32)
        _check_int("Tables", tables, 1, 64)
        _check_int("Wide tables", wide_tables, 0, 16)
        self._lanes = lanes
        self._tables = tables
        self._wide_tables = wide_tables
        self._tbits = max(1, ceil_log2(tables))
        self._wbits = max(1, ceil_log2(max(wide_tables, 1)))
        members = {
            "i": In(stream.Signature(data.StructLayout({
                "table": unsigned(self._tbits),
                "code": data.ArrayLayout(unsigned(8), lanes)}))),
            "o": Out(stream.Signature(data.ArrayLayout(unsigned(8), lanes))),
            "i_write": In(stream.Signature(data.StructLayout({
                "wide": 1, "table": unsigned(max(self._tbits, self._wbits)),
                "addr": unsigned(10), "data": unsigned(16)}))),
        }
        if wide_tables:
            members["i_wide"] = In(stream.Signature(data.StructLayout({
                "table": unsigned(self._wbits), "format": unsigned(2),
                "code": data.ArrayLayout(signed(16), lanes)})))
            members["o_wide"] = Out(stream.Signature(data.ArrayLayout(signed(16), lanes)))
        super().__init__(members)

    @property
    def lanes(self):
        """Lookups per cycle."""
        return self._lanes

    @property
    def tables(self):
        """Resident byte tables."""
        return self._tables

    @property
    def wide_tables(self):
        """Resident interpolated int16 tables."""
        return self._wide_tables

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.i_write.ready.eq(1)
        # Writes are registered once (decoded enables included) so that their fan-out to every
        # lane's memories starts at flip-flops. One lane's byte memory alone (no wide tables)
        # takes them as they come: a register there is some twenty lone flip-flops for a
        # fan-out of one (the iCEBreaker).
        registered = self._lanes > 1 or self._wide_tables > 0
        wr = Signal.like(self.i_write.payload, reset_less=True)
        new, valid = self.i_write.payload, self.i_write.valid
        byte_we, last_we, even_we, odd_we = (Signal(name=n) for n in (
            "byte_we", "last_we", "even_we", "odd_we"))
        wide_we = valid & new.wide & (new.table < self._wide_tables)
        dom = m.d.sync if registered else m.d.comb
        dom += wr.eq(self.i_write.payload)
        dom += [
            byte_we.eq(valid & ~new.wide & (new.table < self._tables) & (new.addr < 256)),
            last_we.eq(wide_we & (new.addr == 512)),
            # Entry 2k lives in the even memory at k, entry 2k + 1 in the odd memory at k.
            even_we.eq(wide_we & (new.addr < 512) & ~new.addr[0]),
            odd_we.eq(wide_we & (new.addr < 512) & new.addr[0]),
        ]

        # Byte tables: one memory per lane, address = table * 256 + code.
        advance = Signal()
        m.d.comb += [advance.eq(~self.o.valid | self.o.ready), self.i.ready.eq(advance)]
        with m.If(advance):
            m.d.sync += self.o.valid.eq(self.i.valid)
        for lane in range(self._lanes):
            mem = Memory(shape=unsigned(8), depth=256 * self._tables, init=[])
            m.submodules[f"byte{lane}"] = mem
            wp = mem.write_port()
            rp = mem.read_port(domain="sync")
            m.d.comb += [
                wp.addr.eq(Cat(wr.addr[:8], wr.table)), wp.data.eq(wr.data[:8]),
                wp.en.eq(byte_we),
                rp.addr.eq(Cat(self.i.payload.code[lane], self.i.payload.table)),
                rp.en.eq(advance),
                self.o.payload[lane].eq(rp.data),
            ]

        if self._wide_tables:
            self._elaborate_wide(m, wr, last_we, even_we, odd_we)
        return m

    def _elaborate_wide(self, m, wr, last_we, even_we, odd_we):
        ntab = self._wide_tables
        advance = Signal()
        m.d.comb += [advance.eq(~self.o_wide.valid | self.o_wide.ready),
                     self.i_wide.ready.eq(advance)]
        valid = [Signal(name=f"s{n}_valid") for n in range(5)]
        with m.If(advance):
            m.d.sync += [valid[0].eq(self.i_wide.valid), self.o_wide.valid.eq(valid[-1])]
            m.d.sync += [valid[n + 1].eq(valid[n]) for n in range(4)]

        wtable = wr.table[:self._wbits]
        last = Array(Signal(signed(16), name=f"last{t}") for t in range(ntab))
        with m.If(last_we):
            m.d.sync += last[wtable].eq(wr.data)

        # Stage 0 registers the table number and, per lane, the two read addresses, so that
        # the block RAMs (and their read-during-write logic) see addresses straight from FFs.
        s0_table = _data(self._wbits, "s0_table")
        s1_table = _data(self._wbits, "s1_table")
        fmt = self.i_wide.payload.format
        # Format 1 (int8 output) travels with the beat to the slope and the output stages.
        narrow = [_data(1, f"s{n}_narrow") for n in range(5)]
        with m.If(advance):
            m.d.sync += [s0_table.eq(self.i_wide.payload.table), s1_table.eq(s0_table),
                         narrow[0].eq(fmt == 1)]
            m.d.sync += [narrow[n + 1].eq(narrow[n]) for n in range(4)]
        byte_in = Signal()
        m.d.comb += byte_in.eq(fmt == 2)

        for lane in range(self._lanes):
            code = self.i_wide.payload.code[lane]
            # Format 2: the 8-bit code c as the int16 input int8(c) * 128.
            x = Signal(signed(16), name=f"x{lane}")
            m.d.comb += x.eq(Mux(byte_in, Cat(Const(0, 7), code[:8], code[7]), code))
            index = Signal(9, name=f"index{lane}")      # 256 + (x >> 7)
            m.d.comb += index.eq(Cat(x[7:15], ~x[15]))
            k, p = index[1:], index[0]
            even_k = _data(8, f"s0_even{lane}")         # k + p wraps to 0 only for index 511
            odd_k = _data(8, f"s0_odd{lane}")
            s0_p, s1_p = _data(1, f"s0_p{lane}"), _data(1, f"s1_p{lane}")
            # index 511: the right neighbour is entry 512, held in a register
            s0_top, s1_top = _data(1, f"s0_top{lane}"), _data(1, f"s1_top{lane}")
            offsets = [_data(7, f"s{n}_offset{lane}") for n in range(5)]
            with m.If(advance):
                m.d.sync += [
                    even_k.eq(k + p), odd_k.eq(k), s0_p.eq(p), s0_top.eq(index == 511),
                    s1_p.eq(s0_p), s1_top.eq(s0_top), offsets[0].eq(x[:7]),
                ]
                m.d.sync += [offsets[n + 1].eq(offsets[n]) for n in range(4)]

            # Stage 1: the block-RAM reads.
            even = Memory(shape=unsigned(16), depth=256 * ntab, init=[])
            odd = Memory(shape=unsigned(16), depth=256 * ntab, init=[])
            m.submodules[f"even{lane}"] = even
            m.submodules[f"odd{lane}"] = odd
            ewp, owp = even.write_port(), odd.write_port()
            erp, orp = even.read_port(domain="sync"), odd.read_port(domain="sync")
            m.d.comb += [
                ewp.addr.eq(Cat(wr.addr[1:9], wtable)), ewp.data.eq(wr.data), ewp.en.eq(even_we),
                owp.addr.eq(Cat(wr.addr[1:9], wtable)), owp.data.eq(wr.data), owp.en.eq(odd_we),
                erp.addr.eq(Cat(even_k, s0_table)), erp.en.eq(advance),
                orp.addr.eq(Cat(odd_k, s0_table)), orp.en.eq(advance),
            ]

            # Stage 2: register the two neighbours (off the block-RAM output path).
            left = _data(signed(16), f"left{lane}")
            right = _data(signed(16), f"right{lane}")
            # Stage 3: base and slope.
            base = _data(signed(16), f"base{lane}")
            slope = _data(signed(16), f"slope{lane}")
            with m.If(advance):
                m.d.sync += [
                    left.eq(Mux(s1_p, orp.data, erp.data)),
                    right.eq(Mux(s1_p, Mux(s1_top, last[s1_table], erp.data), orp.data)),
                    base.eq(left),
                    # wraps like the C++ int16_t (int8_t for format 1) slope
                    slope.eq(Mux(narrow[2], (right - left)[:8].as_signed(), right - left)),
                ]
            # Stage 4: a second copy of base and slope; synthesis may absorb these registers
            # into a DSP's input registers, which keeps the subtraction out of the DSP's setup.
            base_d = _data(signed(16), f"base_d{lane}")
            slope_d = _data(signed(16), f"slope_d{lane}")
            with m.If(advance):
                m.d.sync += [base_d.eq(base), slope_d.eq(slope)]
            # Stage 5 (output): base + round-half-up(slope * offset / 128).
            delta = Signal(signed(17), name=f"delta{lane}")
            m.d.comb += delta.eq((slope_d * offsets[4] + 64) >> 7)
            result = Signal(signed(16), name=f"result{lane}")
            m.d.comb += result.eq(base_d + delta)
            with m.If(advance):
                m.d.sync += self.o_wide.payload[lane].eq(
                    Mux(narrow[4], result[:8].as_signed(), result))
