"""lowbit golden models (pure numpy), and the gateware-simulation plumbing in :mod:`lowbit.sim.rtl`.

Every module of :mod:`lowbit.sim` outside :mod:`lowbit.sim.rtl` is a golden model: it never
imports Amaranth, so it can be used on a host without the HDL installed. :mod:`lowbit.sim.rtl`
(stream harness, CXXRTL, simulated serial transport) runs the gateware and imports Amaranth.
"""
