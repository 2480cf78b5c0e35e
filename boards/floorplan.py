"""Placement constraints for the BFP column's lanes on ECP5 (a board profile's ``floorplan``).

nextpnr's analytic placer puts the 64-lane column's hard blocks wherever its spreading leaves
them: on the ULX3S, seed 1 placed lane 31's multiplier at X9/Y10 and its weight bank at X69/Y22,
and the four lanes of a control group up to 37 columns apart, so that every lane path (bank ->
input register -> multiplier, the group's enables, the drain's shift) ran across the die.

The ECP5's hard blocks sit in rows: on the LFE5U-85F, MULT18X18D in rows 10, 34 and 58 and
DP16KD in rows 22, 46, 70 and 82, both in periods of nine columns with four of each per period
(multipliers ``MULT18_0/1/4/5`` at columns ``p, p+1, p+4, p+5``, block RAMs ``EBR0..3`` at
``p, p+2, p+4, p+6``). A group of four lanes (the column's control group) fills one period:
its four multipliers in a DSP row and its four weight banks twelve rows away in the same
columns. The groups run as a serpentine over two DSP rows (34 and 58, their banks in rows 22
and 70), so that the drain's shift from group ``g + 1`` to group ``g`` is always between
neighbours, and the drain's head (group 0) is near the die's centre; the rows between (and
EBR row 46) are left to the sequencer, the scratchpad and the engines.

The constraints are nextpnr ``BEL`` attributes, set by Yosys (``setattr``) after synthesis,
each after a ``select -assert-count 1`` of its cell, so that a build whose netlist lacks a
cell stops there instead of placing without it.

Measured on the ULX3S's top (docs/sequencer.md, session 31), this floorplan made the top slower
(68-83 MHz on the seeds where the unconstrained placement reached 83-85 with router2), so no
profile enables it: it is the tool for the next floorplans (a profile's ``floorplan``), with
the die's geometry checked in ``tests/test_boards.py``.
"""

__all__ = ["FLOORPLANS", "column_floorplan", "floorplan_script"]

#: The devices with a column floorplan: their DSP and block-RAM geometry (rows, periods).
FLOORPLANS = {
    "ecp5-85f": dict(periods=(4, 13, 22, 31, 40, 49, 58, 69, 78, 87, 96, 105, 114),
                     rows=((34, 22), (58, 70))),
}

# Offsets of a period's four multipliers and four block RAMs, and their bel names.
_MULT = ((0, "MULT18_0"), (1, "MULT18_1"), (4, "MULT18_4"), (5, "MULT18_5"))
_EBR = ((0, "EBR0"), (2, "EBR1"), (4, "EBR2"), (6, "EBR3"))
_GROUP = 4

#: The cells the floorplan places, as the top's Yosys netlist names them (lane ``k``).
MULT_CELL = "accel.sequencer.column.pe.mult.mul{k}"
BANK_CELL = "accel.sequencer.weights{k}.0.0"


def _serpentine(periods, groups):
    """(DSP row index, period) of each of ``groups`` groups (a multiple of 4): centre-out
    along the first row, across the second, back along the first."""
    mid, half = len(periods) // 2, groups // 4
    left = periods[mid - half:mid]           # the first row's left half, right to left
    right = periods[mid:mid + half]          # and its right half
    return ([(0, p) for p in reversed(left)] + [(1, p) for p in left + right]
            + [(0, p) for p in reversed(right)])


def column_floorplan(device, *, lanes, multiplier, weight_depth, hard_lanes=None):
    """The ``BEL`` of each lane's multiplier and weight bank.

    Parameters
    ----------
    device : str
        A key of :data:`FLOORPLANS`.
    lanes : int
        The column's lanes (the top's ``matrix_lanes``): a multiple of 16.
    multiplier : str
        The top's multiplier style: ``"mult18x18d"`` (one MULT18X18D per lane).
    weight_depth : int
        Entries per weight bank: at most 1024, so that a bank of 16-bit words is one DP16KD.
    hard_lanes : int or None
        The top's ``dsp_lanes``: ``None`` (every lane on a MULT18X18D).

    Returns
    -------
    list of (str, str)
        ``(cell, bel)`` pairs, lane by lane.

    Raises
    ------
    TypeError
        A lane count or weight depth that is not an integer.
    ValueError
        A device without a floorplan, or a column it does not fit.
    """
    if device not in FLOORPLANS:
        raise ValueError(f"No column floorplan for device {device!r}; those with one: "
                         f"{', '.join(FLOORPLANS)}")
    if multiplier != "mult18x18d" or hard_lanes is not None:
        raise ValueError(f"The column floorplan needs a MULT18X18D per lane (multiplier "
                         f"'mult18x18d', no dsp_lanes), not {multiplier!r} with dsp_lanes "
                         f"{hard_lanes!r}")
    for name, value in (("lane count", lanes), ("weight depth", weight_depth)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"The column floorplan's {name} must be an integer, not {value!r}")
    if weight_depth > 1024:
        raise ValueError(f"The column floorplan needs weight banks of at most 1024 entries "
                         f"(one DP16KD), not {weight_depth!r}")
    geometry = FLOORPLANS[device]
    periods = geometry["periods"]
    most = 16 * min(len(periods) // 2, len(periods) - len(periods) // 2)
    if lanes % 16 or lanes < 16 or lanes > most:
        raise ValueError(f"The column floorplan needs a multiple of 16 lanes, at most {most}, "
                         f"not {lanes!r}")
    plan = []
    for g, (row, p) in enumerate(_serpentine(periods, lanes // _GROUP)):
        dsp_row, ebr_row = geometry["rows"][row]
        for i in range(_GROUP):
            k = _GROUP * g + i
            plan.append((MULT_CELL.format(k=k), f"X{p + _MULT[i][0]}/Y{dsp_row}/{_MULT[i][1]}"))
            plan.append((BANK_CELL.format(k=k), f"X{p + _EBR[i][0]}/Y{ebr_row}/{_EBR[i][1]}"))
    return plan


def floorplan_script(top_name, plan):
    """The Yosys commands that set ``plan``'s ``BEL`` attributes in module ``top_name``."""
    cmds = []
    for cell, bel in plan:
        sel = f"{top_name}/{cell}"
        cmds += [f"select -assert-count 1 {sel}", f'setattr -set BEL "{bel}" {sel}']
    return "\n".join(cmds)
