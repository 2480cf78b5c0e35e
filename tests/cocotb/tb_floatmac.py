"""cocotb bench of the IEEE float multiply-accumulate lanes' Verilog (``lowbit verilog floatmac``).

Phases from :func:`lowbit.sim.vectors.floatmac_vectors` (one product length ``cfg_len`` each):
weight
columns on ``i_w`` and broadcast elements on ``i_x`` with independent random valid gaps,
accumulators on ``o`` under random back-pressure, compared with
:func:`lowbit.sim.floatmac.float_mac`
bit for bit (edge-value pairs, overflow, ``Inf - Inf``, cancellation, flush to zero around the
smallest normal, subnormal inputs, random products). The run starts with a product cut short by
a reset.
"""

import cocotb
from benchlib import load_job, run_phases


@cocotb.test()
async def floatmac_vectors(dut):
    await run_phases(dut, load_job())
