"""cocotb bench of the discrete shift/XOR unit's Verilog (``lowbit verilog discrete``).

Phases from :func:`lowbit.sim.vectors.discrete_vectors`: the code book and operation on the
configuration ports, the discrete ⊗ discrete tables written through the table port one entry
per cycle, operand beats on ``i`` with random valid gaps and results on ``o`` under random
back-pressure, compared with :mod:`lowbit.sim.discrete` bit for bit (``MUL``, ``DIV``, ``LUT`` one
beat per input beat; ``DOT`` one beat per dot product). The run starts with traffic cut short
by a reset.
"""

import cocotb
from benchlib import load_job, run_phases


@cocotb.test()
async def discrete_unit_vectors(dut):
    await run_phases(dut, load_job())
