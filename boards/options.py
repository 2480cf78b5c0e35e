"""Argument types shared by the ``lowbit`` commands (:mod:`lowbit.boards.cli`,
:mod:`lowbit.boards.train`): each checks one option's value and raises
:class:`argparse.ArgumentTypeError` with a one-line reason, which argparse reports naming the
option (exit status 2).
"""

import argparse
import math

__all__ = ["int_in", "real_in", "hidden_sizes"]


def int_in(lo, hi=None):
    """An argparse type: an integer in ``lo..hi`` (``hi=None``: no upper bound)."""
    span = f"between {lo} and {hi}" if hi is not None else f"of at least {lo}"

    def parse(text):
        try:
            value = int(text, 0) if text.strip().lower().startswith("0x") else int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer {span}, not {text!r}") \
                from None
        if value < lo or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"must be an integer {span}, not {value}")
        return value
    parse.__name__ = "integer"
    return parse


def baud_rate(text):
    """An argparse type: a UART rate, an integer from 1 to 12000000 (the FT2232H's fastest,
    :data:`lowbit.boards.driver.MAX_BAUD`)."""
    from .driver import MAX_BAUD
    return int_in(1, MAX_BAUD)(text)


baud_rate.__name__ = "baud rate"


def real_in(lo, hi, *, lo_open=True):
    """An argparse type: a finite number in ``(lo, hi]`` (``lo_open=False``: ``[lo, hi]``)."""
    span = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"

    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number in {span}, not {text!r}") \
                from None
        if not math.isfinite(value) or value > hi or value < lo or (lo_open and value == lo):
            raise argparse.ArgumentTypeError(f"must be a finite number in {span}, not {text}")
        return value
    parse.__name__ = "number"
    return parse


def hidden_sizes(text):
    """An argparse type: comma-separated hidden layer sizes (at least one, each 1..4096)."""
    from lowbit.sim.train import MAX_HIDDEN
    parts = [p.strip() for p in str(text).split(",")]
    try:
        sizes = tuple(int(p) for p in parts)
    except ValueError:
        sizes = None
    if not sizes or any(not 1 <= h <= MAX_HIDDEN for h in sizes):
        raise argparse.ArgumentTypeError(
            f"must be one or more comma-separated layer sizes between 1 and {MAX_HIDDEN} "
            f"(e.g. 32,32), not {text!r}")
    return sizes
