"""lowbit golden models (pure numpy) and simulation helpers.

The golden models (every module except :mod:`lowbit.sim.harness` and :mod:`lowbit.sim.transport`)
never import
Amaranth, so they can be used on a host without the HDL installed.
"""
