"""Shapes shared by several blocks and by the accelerator's configuration registers."""

from amaranth.lib import enum

__all__ = ["Rounding", "ROUNDING_NAMES"]


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
