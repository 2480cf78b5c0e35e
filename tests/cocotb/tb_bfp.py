"""cocotb bench of the BFP systolic MAC column's Verilog (``lowbit verilog bfp``).

Phases from :func:`lowbit.sim.vectors.bfp_vectors` (one configuration each: run-time width,
rounding,
exponent mode, bias path, block count): weight columns on ``i_w`` and vector elements on
``i_x`` with independent random valid gaps, bias elements on ``i_bias`` and random numbers on
``i_rand`` when the phase uses them, outputs on ``o`` under random back-pressure, compared with
:class:`lowbit.sim.bfp_column.ColumnModel` bit for bit. Outside stochastic rounding ``i_rand`` is
offered but must never be taken; the run starts with a product cut short by a reset.
"""

import cocotb
from benchlib import load_job, run_phases


@cocotb.test()
async def bfp_column_vectors(dut):
    await run_phases(dut, load_job())
