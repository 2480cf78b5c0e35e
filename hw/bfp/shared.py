"""What the units of the BFP column share: the exponent-mode codes, widths and small helpers.

:class:`ExpMode` (the ``cfg_exp_mode`` codes), :func:`column_widths` (the widths of the exact
block sum and of the accumulator), the ``{m, e}`` element layout of the streams, and the helpers
of the generators: ``ceil(log2(n))``, the groups of four lanes of the pipelined control copies,
a log-depth leading-one detector and the attributes of a register without a power-up value.
"""

from amaranth.hdl import Cat, Const, Mux, Value, signed
from amaranth.lib import data

__all__ = ["ExpMode", "column_widths"]


class ExpMode:
    """Values of the ``cfg_exp_mode`` port (the golden model's ``exp_mode`` names).

    ``WINDOW`` (code 3) is the windowed mean/σ predictor on a column built with ``window``, and
    behaves as ``MAX`` on the others.
    """
    MAX = 0
    FIXED = 1
    PREDICTED = 2
    WINDOW = 3


def _clog2(n):
    return (n - 1).bit_length()


#: Lanes per copy of the PE array's and drain's control flip-flops (pipelined).
_GROUP = 4

#: ``attrs`` of a register whose power-up value does not matter, for Yosys: an empty ``init``
#: attribute in place of Amaranth's (the simulator still starts it at its ``init``). A read
#: register described in the fabric merges into the block RAM, whose output register has no
#: defined power-up value; with one, Yosys emulates it with a flip-flop and an AND gate per bit.
NO_INIT = {"init": Const(0, 0)}


def no_init(platform):
    """:data:`NO_INIT` when elaborating for a synthesis platform, else no attribute.

    Without a platform (``verilog.convert``, simulation) the register keeps Amaranth's init:
    Yosys's ``write_verilog`` prints the empty init as ``{0{1'b0}}``, which Icarus Verilog
    rejects, and the initial value changes nothing there (every reader waits for its valid flag).
    """
    return NO_INIT if platform is not None else {}


def _groups(lanes):
    return (lanes + _GROUP - 1) // _GROUP


def _leading_one(v):
    """``(nonzero, index of the highest set bit)`` of ``v`` as a log-depth tree."""
    v = Value.cast(v)
    size = 1 << _clog2(len(v))
    v = Cat(v, Const(0, size - len(v)))

    def tree(bits):
        if len(bits) == 1:
            return bits[0], Const(0, 0)
        half = len(bits) // 2
        nz_hi, i_hi = tree(bits[half:])
        nz_lo, i_lo = tree(bits[:half])
        return nz_hi | nz_lo, Cat(Mux(nz_hi, i_hi, i_lo), nz_hi)

    return tree(v)


def column_widths(*, block, width, max_blocks, frac_bits):
    """``(pw, aw)``: widths of the exact block sum and of the accumulator (as in the model)."""
    pw = 2 * width + _clog2(block)
    return pw, pw + frac_bits + _clog2(max_blocks + 2)


def _elem_layout(width, exp_bits):
    return data.StructLayout({"m": signed(width), "e": signed(exp_bits)})
