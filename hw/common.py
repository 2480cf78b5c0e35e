"""Shapes shared by several blocks and by the accelerator's configuration registers."""

from amaranth.hdl import Const, Signal
from amaranth.lib import enum

__all__ = ["Rounding", "ROUNDING_NAMES", "check_int", "check_bool", "any_of",
           "register_copy"]


class Rounding(enum.Enum, shape=2):
    """Rounding mode of a quantiser or output shifter.

    The golden models in :mod:`sim` name these modes by the strings in :data:`ROUNDING_NAMES`.
    """
    NEAREST_EVEN = 0
    TOWARD_ZERO = 1
    STOCHASTIC = 2


#: Rounding member -> the golden models' name of the mode.
ROUNDING_NAMES = {
    Rounding.NEAREST_EVEN: "nearest",
    Rounding.TOWARD_ZERO: "zero",
    Rounding.STOCHASTIC: "stochastic",
}


def check_int(name, value, lo, hi):
    """``value`` if it is an integer in ``[lo, hi]`` (not a bool).

    Raises
    ------
    TypeError
        If ``value`` is not an integer.
    ValueError
        If it is out of range; the message reads "<name> must be an integer between lo and hi,
        not <value>".
    """
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer between {lo} and {hi}, not {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer between {lo} and {hi}, not {value}")
    return value


def check_bool(name, value):
    """``value`` if it is a bool; TypeError otherwise."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, not {value!r}")
    return value


def any_of(terms):
    """OR of the values ``terms`` (bitwise, so also of multi-bit ones) as a balanced tree (a
    chain of ORs is mapped as a chain of LUTs); ``Const(0)`` when there are none."""
    terms = list(terms)
    if not terms:
        return Const(0)
    while len(terms) > 1:
        terms = [terms[k] | terms[k + 1] if k + 1 < len(terms) else terms[k]
                 for k in range(0, len(terms), 2)]
    return terms[0]


def register_copy(m, ref, d, name):
    """A flip-flop copy of the register ``ref``, whose next value is ``d`` in every cycle
    (``m.d.sync += ref.eq(d)``, no enable), that synthesis keeps apart from ``ref``.

    Placed beside its own readers, a copy splits a net that would otherwise span the die. Yosys
    merges registers with the same next value, so the copy's next value is ``d ^ copy ^ ref``:
    ``d``, as the copy equals ``ref`` from reset on (both take their reset value, 0), but read
    from its own output. It costs a LUT input in front of each bit.

    Returns
    -------
    Signal
        The copy, shaped as ``ref``; ``name`` names it.
    """
    copy = Signal.like(ref, name=name)
    m.d.sync += copy.eq(d ^ copy ^ ref)
    return copy
