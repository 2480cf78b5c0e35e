"""Registry of the blocks that ``lowbit verilog BLOCK`` and the benchmark suite can build.

Each entry names a module and a :class:`amaranth.lib.wiring.Component` subclass whose constructor
takes keyword parameters only, all with defaults. Modules are imported lazily so that a block that
fails to import does not take the others down.
"""

import ast
import importlib

__all__ = ["BLOCKS", "block_names", "block_class", "build_block", "parse_params"]


#: name -> (module, class name, one-line description)
BLOCKS = {
    "prng": ("lowbit.hw.prng", "Xoroshiro128aox",
             "xoroshiro128aox pseudo-random generator, L lanes, seedable at run time"),
    "grand": ("lowbit.hw.grand", "GrandUnit",
              "Irwin-Hall Gaussian generator (f16/f32, normal/144/truncated/uniform/raw)"),
    "bfp": ("lowbit.hw.bfp", "BFPColumn",
            "block-floating-point systolic MAC column with exponent selector and bias path"),
    "discrete": ("lowbit.hw.discrete", "DiscreteUnit",
                 "discrete-data shift/XOR unit with a run-time code book"),
    "quantiser": ("lowbit.hw.quantiser", "Quantiser",
                  "stochastic quantiser to BFP, int8 or discrete codes"),
    "lut": ("lowbit.hw.lut", "TransferLUT",
            "transfer lookup tables (int8 256-entry, int16 interpolated)"),
    "floatmac": ("lowbit.hw.floatmac", "FloatMAC",
                 "IEEE f16/f32 multiply-accumulate lanes: the float baseline of the BFP column"),
    "uart": ("lowbit.hw.uart", "UART", "8N1 UART transmitter and receiver"),
    "link": ("lowbit.hw.link", "HostLink", "framed host link: length, CRC-16, status replies"),
    "top": ("lowbit.hw.top", "Accelerator", "the accelerator top"),
}


def block_names():
    """Names of all registered blocks, in registry order."""
    return list(BLOCKS)


def block_class(name):
    """Import and return the component class of block ``name``.

    Raises
    ------
    ValueError
        If ``name`` is not a registered block.
    ImportError
        If the block's module has not been implemented (or fails to import).
    """
    if name not in BLOCKS:
        raise ValueError(f"Unknown block {name!r}; known blocks: {', '.join(BLOCKS)}")
    module, cls, _ = BLOCKS[name]
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name == module:
            raise ImportError(f"Block {name!r} is not implemented yet ({module} is missing)"
                              ) from None
        raise
    return getattr(mod, cls)


def available_blocks():
    """Names of the blocks whose modules import, in registry order."""
    names = []
    for name in BLOCKS:
        try:
            block_class(name)
        except ImportError:
            continue
        names.append(name)
    return names


def parse_params(pairs):
    """Parse ``["k=v", ...]`` into a dict; values are Python literals, else plain strings.

    Raises
    ------
    ValueError
        If an item has no ``=`` or an empty key.
    """
    params = {}
    for pair in pairs or ():
        if not isinstance(pair, str) or "=" not in pair:
            raise ValueError(f"Parameter must be written key=value, not {pair!r}")
        key, value = pair.split("=", 1)
        key = key.strip()
        if not key.isidentifier():
            raise ValueError(f"Parameter name must be an identifier, not {key!r}")
        try:
            params[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            params[key] = value
    return params


def build_block(name, **params):
    """Construct block ``name`` with keyword parameters.

    Raises
    ------
    TypeError, ValueError
        From the block's own argument validation, or for an unknown parameter name.
    """
    cls = block_class(name)
    try:
        return cls(**params)
    except TypeError as e:
        if "unexpected keyword argument" in str(e):
            raise TypeError(f"Block {name!r} has no parameter: {e}") from None
        raise
