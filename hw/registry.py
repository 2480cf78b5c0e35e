"""Registry of the blocks that ``lowbit verilog BLOCK`` and the benchmark suite can build.

Each entry names a module and a :class:`amaranth.lib.wiring.Component` subclass whose constructor
takes keyword parameters only, all with defaults. Modules are imported lazily so that a block that
fails to import does not take the others down.

A block's parameters, their defaults and their valid ranges have one source of truth: the
constructor (its signature and the ``Parameters`` section of the class docstring, which states
each range; the constructor enforces it). :func:`block_params` reads them from there for
``lowbit verilog --list``.
"""

import ast
import importlib
import inspect
import re

__all__ = ["BLOCKS", "SYNTHESIS_DEFAULTS", "block_names", "block_class", "available_blocks",
           "build_block", "parse_params", "block_params", "ParamInfo"]


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

#: Parameters that ``lowbit verilog`` (Verilog meant for synthesis) sets unless the user does,
#: for every block whose constructor takes them: ``sim_model=False`` instantiates the vendor
#: multiplier primitives (SB_MAC16, MULT18X18D) instead of their behavioural models, as the top
#: does outside simulation.
SYNTHESIS_DEFAULTS = {"sim_model": False}


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


def parse_param(pair):
    """Parse one ``"k=v"`` into ``(k, v)``; the value is a Python literal, else a plain string.

    Raises
    ------
    ValueError
        If the item has no ``=`` or its key is not an identifier.
    """
    if not isinstance(pair, str) or "=" not in pair:
        raise ValueError(f"Parameter must be written key=value, not {pair!r}")
    key, value = pair.split("=", 1)
    key = key.strip()
    if not key.isidentifier():
        raise ValueError(f"Parameter name must be an identifier, not {key!r}")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return key, value


def parse_params(pairs):
    """Parse ``["k=v", ...]`` into a dict (see :func:`parse_param`).

    Raises
    ------
    ValueError
        If an item has no ``=`` or an empty key, or a parameter is given twice (even with the
        same value: a repeated parameter is almost always a mistake on the command line).
    """
    params = {}
    for pair in pairs or ():
        key, value = parse_param(pair)
        if key in params:
            raise ValueError(f"Parameter {key!r} is given twice ({key}={params[key]!r} and "
                             f"{key}={value!r})")
        params[key] = value
    return params


class ParamInfo:
    """One constructor parameter of a block (:func:`block_params`).

    Members
    -------
    name : str
    default : object
        The constructor's default.
    kind : str
        The type line of the docstring (``"int"``, ``"bool"``, ``'{"lut", "sb_mac16"}'``...).
    valid : str
        The valid values as the docstring states them: a range (``"4..256"``), choices
        (``"lut | sb_mac16 | mult18x18d"``), ``"True | False"``, or the type when the docstring
        states no range.
    text : str
        The docstring's description, on one line.
    """

    def __init__(self, name, default, kind, text):
        self.name, self.default, self.kind, self.text = name, default, kind, text
        self.valid = _valid_values(kind, text)

    def __repr__(self):
        return f"ParamInfo({self.name!r}, default={self.default!r}, valid={self.valid!r})"


def _docstring_params(cls):
    """``{name: (type line, description)}`` of the ``Parameters`` section of ``cls``' docstring."""
    lines = (inspect.getdoc(cls) or "").splitlines()
    out, names = {}, []
    for k, line in enumerate(lines):
        if line.strip() == "Parameters" and k + 1 < len(lines) and \
                set(lines[k + 1].strip()) == {"-"}:
            body = lines[k + 2:]
            break
    else:
        return out
    for k, line in enumerate(body):
        if k + 1 < len(body) and body[k + 1].strip() and set(body[k + 1].strip()) == {"-"}:
            break                                  # the next section's heading
        if line and not line[0].isspace():
            head, _, kind = line.partition(" : ")
            names = [n.strip() for n in head.split(",")]
            for n in names:
                out[n] = [kind.strip(), ""]
        elif line.strip():
            for n in names:
                out[n][1] = (out[n][1] + " " + line.strip()).strip()
    return {n: tuple(v) for n, v in out.items()}


_RANGE_PATTERNS = (
    (r"(-?[\w`^]+)\s*\.\.\s*(-?[\w`^]+)", "{0}..{1}"),
    (r"(-?\d[\d_]*) to (-?\d[\d_]*)", "{0}..{1}"),
    (r"0 ≤ \w+ < 2\^(\d+)", "0..2^{0}-1"),
    (r"^(\d+)-bit seed", "0..2^{0}-1"),
    (r"up to (\d+)", "≤ {0}"),
    (r"\(at least (\d+)\)", "≥ {0}"),
)
_RANGE_NOTES = ((r"power of two", "a power of two"),
                (r"a multiple of ``(\w+)``", "a multiple of {0}"))


def _valid_values(kind, text):
    if kind.startswith("{") and kind.endswith("}"):
        return " | ".join(c.strip().strip("\"'") for c in kind[1:-1].split(","))
    if kind == "bool":
        return "True | False"
    if kind == "str":
        choices = re.findall(r'``"([^"]+)"``', text)
        if choices:
            return " | ".join(choices)
    for pattern, fmt in _RANGE_PATTERNS:
        m = re.search(pattern, text)
        if m:
            extra = [note.format(*n.groups()) for pat, note in _RANGE_NOTES
                     for n in [re.search(pat, text)] if n]
            return fmt.format(*(g.replace("`", "") for g in m.groups())) + \
                "".join(f", {e}" for e in extra)
    return kind or "see the docstring"


def block_params(name):
    """The constructor parameters of block ``name``, in signature order.

    Defaults come from the signature, valid values and descriptions from the class docstring's
    ``Parameters`` section (the constructor checks them).

    Returns
    -------
    list of ParamInfo

    Raises
    ------
    ValueError, ImportError
        As :func:`block_class`.
    """
    cls = block_class(name)
    docs = _docstring_params(cls)
    out = []
    for p in inspect.signature(cls.__init__).parameters.values():
        if p.name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        kind, text = docs.get(p.name, ("", ""))
        out.append(ParamInfo(p.name, p.default, kind, text))
    return out


def build_block(name, **params):
    """Construct block ``name`` with keyword parameters.

    Raises
    ------
    TypeError, ValueError
        From the block's own argument validation; ``TypeError`` for an unknown parameter name
        (the message lists the block's parameters).
    """
    cls = block_class(name)
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    unknown = [k for k in params if k not in accepted]
    if unknown:
        raise TypeError(f"Block {name!r} has no parameter {unknown[0]!r}; its parameters: "
                        f"{', '.join(accepted)}")
    return cls(**params)
