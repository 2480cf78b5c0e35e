"""cocotb bench of the stochastic quantiser's Verilog (``lowbit verilog quantiser``).

Phases from :func:`lowbit.sim.vectors.quantiser_vectors`: the target (BFP, int8, discrete codes),
rounding and format parameters on the configuration ports (held three cycles before the first
beat, as the block requires), element beats on ``i`` and random bits on ``i_rand`` (stochastic
rounding only) with independent random valid gaps, outputs on ``o`` under random back-pressure,
compared with :mod:`lowbit.sim.quantiser` bit for bit. Outside stochastic rounding ``i_rand`` is
offered but must never be taken; the run starts with a block cut short by a reset.
"""

import cocotb
from benchlib import load_job, run_phases


@cocotb.test()
async def quantiser_vectors(dut):
    await run_phases(dut, load_job())
