"""Shapes shared by several blocks and by the accelerator's configuration registers."""

from amaranth.lib import enum

__all__ = ["Rounding", "ROUNDING_NAMES", "check_int", "check_bool"]


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
