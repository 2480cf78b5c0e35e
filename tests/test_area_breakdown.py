"""scripts/area_breakdown.py: per-submodule cell counts of a board's top."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import area_breakdown  # noqa: E402

STAT = """
=== top ===

        +----------Local Count, excluding submodules.
        |
       41 wires
        5 ports
       29 cells
        2   $scopeinfo
        3   SB_CARRY
        1   SB_DFF
        4   SB_DFFESR
       12   SB_LUT4
        2   SB_MAC16
        5   SB_RAM40_4K
"""


def test_count_cells_groups_the_flip_flop_kinds():
    assert area_breakdown.count_cells(STAT, "ice40") == {
        "LUT4": 12, "FF": 5, "CARRY": 3, "RAM": 5, "DSP": 2}


def test_parse_set_reads_literals_and_rejects_a_missing_value():
    assert area_breakdown.parse_set(["matrix_lanes=16", "busy_count=True", "x=abc"]) == {
        "matrix_lanes": 16, "busy_count": True, "x": "abc"}
    with pytest.raises(SystemExit, match="name=value"):
        area_breakdown.parse_set(["matrix_lanes"])


@pytest.mark.slow
def test_breakdown_of_the_default_top_counts_its_column():
    """The iCEBreaker's top and its sequencer: 8 SB_MAC16 at 16 lanes, the column inside the
    sequencer's row, fewer LUTs in a child than in its parent."""
    rows = dict(area_breakdown.breakdown(overrides={"matrix_lanes": 16, "weight_depth": 256},
                                         depth=1))
    assert rows["top"]["DSP"] == 8 and rows["top.sequencer"]["DSP"] == 8
    assert 0 < rows["top.sequencer"]["LUT4"] < rows["top"]["LUT4"]
    assert rows["top.link"]["DSP"] == 0
