"""Port signatures and constants shared by the accelerator top and its parts.

:mod:`lowbit.hw.top` connects the scratchpad, the configuration registers, the LUT engine
(:mod:`lowbit.hw.engines`) and the layer sequencer (:mod:`lowbit.hw.sequencer`) through these
signatures, and reports the sequencer's fixed widths in its ``ID_MATRIX`` / ``ID_ENGINE``
registers. They live here so that the top imports the sequencer and the engines and both of those
import only this module.
"""

from amaranth.hdl import Cat, Mux
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["ScratchPortSignature", "ConfigPortSignature", "LUTPortSignature", "SEQ_REGISTERS",
           "COLUMN_FRAC_BITS", "RAND_BITS", "DISCRETE_ACC_WIDTH", "load_or_step"]

#: Fraction guard bits of the sequencer's BFP column (:class:`lowbit.sim.bfp_column.ColumnModel`).
COLUMN_FRAC_BITS = 3
#: Random bits per element of stochastic rounding (column and quantiser): the low bits of a
#: rounding-PRNG word.
RAND_BITS = 8
#: Accumulator width of the discrete unit (:class:`lowbit.sim.network.DiscreteDense` ``acc_width``).
DISCRETE_ACC_WIDTH = 16

#: Read-write registers the sequencer reads (lower-case names of :data:`lowbit.sim.link.REGISTERS`).
SEQ_REGISTERS = ("mant_width", "rounding", "exp_select", "fixed_exp", "quant_format",
                 "code_width", "code_book0", "code_book1", "lut_select", "lut_exp", "disc_shift",
                 "quant_shift", "quant_rule", "prng_seed0", "prng_seed1", "prng_seed2",
                 "prng_seed3")


class ScratchPortSignature(wiring.Signature):
    """A byte-addressed scratchpad port of 16-bit words, seen from the memory's user.

    Members
    -------
    addr : Out(16)
        Word address (byte address >> 1).
    we : Out(1)
        Write this cycle.
    re : Out(1)
        Read this cycle (on a cycle without ``we``, unless the port has ``waddr``); without it
        ``rdata`` holds. A user can keep a word waiting in the memory's output register without
        knowing its address again: the address then never waits for the decision to read.
    wmask : Out(2)
        Byte enables of the word (bit 0: byte at the even address).
    wdata : Out(16)
        Write data.
    rdata : In(16)
        The word at the ``addr`` of the last cycle that read (one cycle of read latency; not
        updated on cycles that do not read, nor, with one address, on cycles that write).
    waddr : Out(addr_width)
        With ``write_addr`` only: the word address of a write. The port then reads at ``addr``
        and writes at ``waddr`` in the same cycle (a block RAM's simple dual port); a read of
        the word written in the same cycle returns its old value.

    Parameters
    ----------
    addr_width : int
        Word address width.
    write_addr : bool
        Writes take their own address ``waddr``, and ``re`` and ``we`` may be high together.
    """

    def __init__(self, addr_width=16, *, write_addr=False):
        members = {
            "addr": Out(addr_width),
            "we": Out(1),
            "re": Out(1),
            "wmask": Out(2),
            "wdata": Out(16),
            "rdata": In(16),
        }
        if write_addr:
            members["waddr"] = Out(addr_width)
        super().__init__(members)


class ConfigPortSignature(wiring.Signature):
    """Second write port of the configuration registers, seen from the writer (CONFIG).

    Members
    -------
    we : Out(1)
        Write ``value`` to register ``index`` this cycle (ignored unless ``ok``).
    index : Out(16)
    value : Out(32)
    ok : In(1)
        ``index`` is a read-write register (combinational).
    """

    def __init__(self):
        super().__init__({"we": Out(1), "index": Out(16), "value": Out(32), "ok": In(1)})


class LUTPortSignature(wiring.Signature):
    """One-element lookups in the shared transfer-LUT engine, seen from the user.

    Members
    -------
    i : Out(stream.Signature(StructLayout({"table": 6, "code": 8})))
    o : In(stream.Signature(8))
    """

    def __init__(self):
        super().__init__({
            "i": Out(stream.Signature(data.StructLayout({"table": 6, "code": 8}))),
            "o": In(stream.Signature(8)),
        })


def load_or_step(value, step, load, other):
    """``other`` where ``load``, else ``value + step`` (a constant, modulo ``value``'s width).

    Written so that the choice costs no LUT on iCE40: the addend's bits are ``load`` or
    ``~load`` (the step's where ``load`` is low; the sum is not used where it is high), so each
    bit's carry-chain LUT has ``load`` among its inputs already and takes ``other``'s bit on its
    free one. ``Mux(load, other, value + step)`` costs a LUT per bit more.
    """
    step &= (1 << len(value)) - 1
    addend = Cat(*[~load if step >> k & 1 else load for k in range(len(value))])
    return Mux(load, other, value + addend)


def registered_port(m, port):
    """A user-side copy of the scratchpad ``port`` (a :class:`ScratchPortSignature` member the
    user drives), registered onto it: the returned interface's address, enables and write data
    reach ``port`` a cycle later (``port`` is flip-flops), its ``rdata`` is ``port``'s."""
    p = port.signature.create(path=("mem_cmd",))
    names = ["addr", "we", "re", "wmask", "wdata"]
    if "waddr" in port.signature.members:
        names.append("waddr")
    m.d.sync += [getattr(port, n).eq(getattr(p, n)) for n in names]
    m.d.comb += p.rdata.eq(port.rdata)
    return p
