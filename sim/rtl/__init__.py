"""Gateware-simulation plumbing: the modules of :mod:`lowbit.sim` that run the gateware.

- :mod:`lowbit.sim.rtl.harness`: stream harness for Amaranth's simulator (random valid gaps and
  back-pressure, stream-rule checks);
- :mod:`lowbit.sim.rtl.cxxrtl`: the top compiled with CXXRTL and loaded with ctypes;
- :mod:`lowbit.sim.rtl.transport`: pyserial lookalikes over the real top in a simulator
  (:class:`~lowbit.sim.rtl.transport.SimulatedSerial`) or over the protocol model
  (:class:`~lowbit.sim.rtl.transport.ModelSerial`).

These import Amaranth (and :mod:`lowbit.hw`). Everything else in :mod:`lowbit.sim` is a golden
model (pure numpy) that never imports Amaranth.
"""
