"""lowbit: synthesizable low-precision neural-network arithmetic for small FPGAs.

The installed package ``lowbit`` is this folder (``pyproject.toml`` maps it with setuptools'
``package-dir``); its subpackages are the repository's top-level folders:

- :mod:`lowbit.hw`: Amaranth gateware, one module per block and the accelerator top;
- :mod:`lowbit.sim`: the bit-exact numpy golden models (they never import Amaranth), with the
  gateware-simulation plumbing in :mod:`lowbit.sim.rtl`;
- :mod:`lowbit.boards`: board profiles, build and flash, the host driver and the command line.

``from lowbit import Accelerator`` gives the host driver
(:class:`lowbit.boards.driver.Accelerator`). It is imported on first use, so
``import lowbit.sim.bfp`` stays free of Amaranth and pyserial.
"""

__version__ = "0.1.0"

__all__ = ["Accelerator", "__version__"]


def __getattr__(name):
    if name == "Accelerator":
        from lowbit.boards.driver import Accelerator
        return Accelerator
    raise AttributeError(f"module 'lowbit' has no attribute {name!r}")
