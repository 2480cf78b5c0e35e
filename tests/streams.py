"""One component and one :class:`lowbit.sim.rtl.harness.StreamBench` per block and parameters.

The RTL tests stream many jobs through blocks built with the same parameters. :func:`cached`
returns one component per class and parameters, and :func:`run_stream` runs a job on that
component's bench, built once and reset between jobs; other components get a bench of their own.
``tests/conftest.py`` forgets them after each test module, so that a pytest-xdist worker, which
runs many modules, does not hold them all.
"""

from lowbit.sim.rtl.harness import StreamBench

__all__ = ["cached", "run_stream", "clear"]

_BLOCKS = {}
_BENCHES = {}


def clear():
    """Forget every component and bench."""
    _BLOCKS.clear()
    _BENCHES.clear()


def cached(cls, **params):
    """The component ``cls(**params)``, the same object for the same class and parameters."""
    key = (cls, repr(sorted(params.items())))
    if key not in _BLOCKS:
        _BLOCKS[key] = cls(**params)
    return _BLOCKS[key]


def run_stream(component, inputs, outputs, *, domain="sync", **kwargs):
    """:func:`lowbit.sim.rtl.harness.run_stream`, on the bench of a :func:`cached` component."""
    if not any(component is c for c in _BLOCKS.values()):
        return StreamBench(component, domain=domain).run(inputs, outputs, **kwargs)
    key = (id(component), domain)
    if key not in _BENCHES:
        _BENCHES[key] = StreamBench(component, domain=domain)
    return _BENCHES[key].run(inputs, outputs, **kwargs)
