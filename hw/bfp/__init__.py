"""Block-floating-point systolic MAC column (DESIGN §3.2, seed 002 Figs. 1, 4, 5).

The column computes ``y = M · x (+ b)`` for BFP operands with ``N`` processing elements (one per
output row). Its arithmetic — exact block products, exponent adder, cross-block accumulation with
fraction guard bits, bias path, output exponent selector and output mantissa shifter — is
specified in :mod:`lowbit.sim.bfp_column`, whose :class:`~lowbit.sim.bfp_column.ColumnModel` it
matches bit for bit. ``docs/bfp.md`` describes the architecture.

Dataflow
--------
One module per unit (each module's docstring states the unit's part); :class:`BFPColumn`
(:mod:`lowbit.hw.bfp.column`) connects them around the accumulator memory.

1. **PE array** (:class:`BFPLanes`, :mod:`lowbit.hw.bfp.pe`): multipliers, exact per-block
   sums, exponent adders and the drain register.
2. **Combiner** (:class:`BlockCombiner`, :mod:`lowbit.hw.bfp.combiner`, shared by all lanes,
   or one per drain lane with ``drain_lanes``): merges one ``(P, e)`` contribution per cycle (a
   drain lane or a bias beat) into a lane's accumulator.
3. **Output unit** (:class:`OutputUnit`, :mod:`lowbit.hw.bfp.output`): output exponent selector
   and output mantissa shifter; one output element per beat.
4. **Predictor** (:class:`ExponentPredictor`, :mod:`lowbit.hw.bfp.predictor`, inside the output
   unit): history and update engine of the predicted output exponent selector.
5. **Window predictor** (:class:`WindowPredictor`, :mod:`lowbit.hw.bfp.window`, inside the
   output unit of a column built with ``window``): the windowed mean/σ selector of seed 002
   claim 1.

:mod:`lowbit.hw.bfp.shared` holds what they share (:class:`ExpMode`, :func:`column_widths`).
"""

from lowbit.hw.bfp.column import BFPColumn, check_drain_lanes
from lowbit.hw.bfp.combiner import BlockCombiner
from lowbit.hw.bfp.output import OutputUnit
from lowbit.hw.bfp.pe import BFPLanes
from lowbit.hw.bfp.predictor import ExponentPredictor, predictor_widths
from lowbit.hw.bfp.shared import ExpMode, column_widths
from lowbit.hw.bfp.window import WindowPredictor, window_widths

__all__ = ["BFPColumn", "BFPLanes", "BlockCombiner", "OutputUnit", "ExponentPredictor",
           "ExpMode", "WindowPredictor", "column_widths", "predictor_widths", "window_widths",
           "check_drain_lanes"]
