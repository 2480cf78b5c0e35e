"""``lowbit demo digits``: the digits MLP end to end on the accelerator (issues #8 and #10).

The demo trains the 64-32-10 MLP of :mod:`lowbit.sim.mlp` in float64 (or loads it from the cache
under the build directory), converts it to the accelerator's layers (BFP, or discrete weights
after quantisation-aware fine-tuning), places it on a device with
:meth:`lowbit.boards.driver.Accelerator.load_network`, runs test images through
:meth:`~lowbit.boards.driver.Accelerator.run_network` and checks every output code and exponent
against the golden model :func:`lowbit.sim.mlp.forward`. It reports the float, golden and device
accuracy, the wall-clock images per second, the accelerator cycles per image (from the ``RUN``
replies) and each board's projected images per second (its clock over the cycles per image
of its own top).

Devices (``target``)
--------------------
* ``"cxxrtl"``: the real top compiled with CXXRTL
  (:class:`lowbit.sim.rtl.transport.SimulatedSerial`); the default when a C++ compiler is
  installed. The first run compiles (2-6 min, cached; the demo says so only when it compiles).
* ``"amaranth"``: the real top in Amaranth's simulator (~1-2k cycles/s: a few images).
* ``"model"``: the protocol model :class:`lowbit.sim.link.DeviceModel` (instant; no cycle counts).
* a serial port (``port=``): a board built with ``lowbit build``; its profile's top parameters
  tell the driver the design (``board=``).

The simulated top is :data:`SIM_TOP`: the default top with the sequencer, ``N = 16`` matrix
lanes and block size ``B = 16``. Each board's projection divides its clock by the cycles per
image measured on that board's own top (:func:`projections`): this run's count where the
board's top parameters equal the device's, else the count that ``scripts/bench_demo.py``
measured on a simulated top with the board's parameters (``docs/bench/demo.json``).

Progress: stage lines go to ``progress``; with ``progress_bar`` and a terminal on stderr, a
bar over the test images (updated after each ``RUN``, with images/s and ETA) shows while they
run (:func:`progress_bar`; never under ``--json`` or when stderr is not a terminal).
"""

import dataclasses
import json
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from lowbit.sim import mlp

from .profiles import BOARDS, DEFAULT_BOARD, get_board

__all__ = ["VARIANTS", "SIMULATORS", "SIM_TOP", "DEFAULT_IMAGES", "DemoError", "UsageError",
           "MismatchError", "DemoResult", "default_simulator", "cxxrtl_available",
           "prepare_network", "connect", "run_digits", "projections", "board_fit", "measured_fmax",
           "board_top", "same_top", "stored_cycles", "DEMO_BENCH", "format_result",
           "progress_bar"]

#: Network variants.
VARIANTS = ("bfp", "discrete")
#: Simulated devices.
SIMULATORS = ("cxxrtl", "amaranth", "model")
#: Parameters of the simulated top (:class:`lowbit.hw.top.Accelerator`).
SIM_TOP = dict(sequencer=True, matrix_lanes=16, block=16, max_blocks=16, weight_depth=512)
#: Test images run by default per target (each runs in well under a minute once compiled).
DEFAULT_IMAGES = {"model": 540, "cxxrtl": 540, "amaranth": 3, "port": 540}
#: Version tag of the cached models (change it when training or fine-tuning changes).
CACHE_VERSION = 1


class DemoError(RuntimeError):
    """The demo failed (exit status 1)."""


class UsageError(ValueError):
    """Bad demo arguments (exit status 2)."""


class MismatchError(DemoError):
    """A device output differs from the golden model (:attr:`image`: index among the run
    images, :attr:`test_index`: index in the test set)."""

    def __init__(self, message, image, test_index):
        super().__init__(message)
        self.image = image
        self.test_index = test_index


@dataclasses.dataclass
class DemoResult:
    """What :func:`run_digits` measured (all accuracies are fractions)."""
    variant: str
    target: str
    images: int
    design: dict
    float_accuracy: float
    golden_accuracy: float
    device_accuracy: float
    float_accuracy_all: float
    golden_accuracy_all: float
    test_images: int
    seconds: float
    images_per_s: float
    cycles: int
    cycles_per_image: float | None
    runs: int
    projections: list
    #: The board whose top ran (``None``: :data:`SIM_TOP` in simulation).
    board: str | None = None
    #: Multiply-accumulates per image (:func:`network_macs`).
    macs_per_image: int = 0
    #: Sustained MACs per clock cycle over the run (``None`` without cycle counts).
    mac_per_cycle: float | None = None
    #: The board's clock and its top's measured Fmax (:func:`measured_fmax`), MHz.
    clock_mhz: float | None = None
    fmax_mhz: float | None = None
    #: Sustained MMAC/s at the board clock and at the measured Fmax.
    mmacs: float | None = None
    mmacs_at_fmax: float | None = None
    #: The matrix engine's busy cycles over the run and their share of the cycles (``None``
    #: where the device does not count them or counts no cycles).
    busy_cycles: int | None = None
    busy_fraction: float | None = None
    #: Bytes through the link per image in this run (requests and replies, frames included),
    #: the UART rate of the device (its IDENTIFY record) and the link-bound images/s at it:
    #: ``baud / 10 / link_bytes_per_image`` (8N1: 10 bits per byte).
    link_bytes_per_image: float | None = None
    baud: int | None = None
    link_images_per_s: float | None = None

    def to_json(self):
        return json.dumps(dataclasses.asdict(self), indent=2)


def cxxrtl_available():
    """True if the C++ compiler CXXRTL needs (``$CXX`` or ``g++``) is installed."""
    return shutil.which(os.environ.get("CXX", "g++")) is not None


def default_simulator():
    """``"cxxrtl"`` if a C++ compiler is installed, else ``"amaranth"``."""
    return "cxxrtl" if cxxrtl_available() else "amaranth"


def _say(progress, msg):
    if progress is not None:
        progress(msg)


def progress_bar(total, *, unit, desc, enabled=True):
    """A :mod:`tqdm` bar over ``total`` units on stderr (count, rate and ETA), shown only when
    ``enabled`` and stderr is a terminal; otherwise a disabled bar whose methods do nothing
    (``bar.disable`` is then true)."""
    from tqdm import tqdm
    show = enabled and total > 0 and sys.stderr.isatty()
    return tqdm(total=total, unit=unit, desc=desc, file=sys.stderr, disable=not show,
                dynamic_ncols=True, leave=False)


# -- network --------------------------------------------------------------------------------------

def prepare_network(variant, column, *, split=None, build_dir="build", progress=None):
    """The float model and the converted network of ``variant`` for a device's ``column``.

    The float model (and, for ``"discrete"``, its fine-tuned copy) is cached as ``.npz`` under
    ``<build_dir>/demo/``; conversion (a second or so) is always redone because it depends on
    the device's column.

    Returns
    -------
    (lowbit.sim.mlp.FloatMLP, lowbit.sim.mlp.QuantisedMLP)
    """
    if variant not in VARIANTS:
        raise UsageError(f"Variant must be one of {', '.join(VARIANTS)}, not {variant!r}")
    split = mlp.load_split() if split is None else split
    cache = Path(build_dir) / "demo"
    path = cache / f"digits_float_v{CACHE_VERSION}.npz"
    _say(progress, f"lowbit: {'loading' if path.exists() else 'training'} the float MLP "
                   f"({path})")
    model = mlp.load_or_train(str(path), split=split)
    if variant == "bfp":
        return model, mlp.convert_bfp(model, split.x_train, column=column)
    scales = mlp.discrete_scales(model, 3)
    tuned_path = cache / f"digits_discrete3_v{CACHE_VERSION}.npz"
    if tuned_path.exists():
        tuned = mlp.FloatMLP.load(str(tuned_path))
    else:
        _say(progress, "lowbit: fine-tuning for 3-bit discrete weights")
        tuned = mlp.finetune_discrete(model, split.x_train, split.y_train, scales=scales)
        tuned.save(str(tuned_path))
    return model, mlp.convert_discrete(tuned, split.x_train, scales=scales)


def network_macs(net):
    """Multiply-accumulates of one image through ``net`` (:class:`lowbit.sim.mlp.QuantisedMLP`):
    the sum of ``R · K`` over its layers (64·32 + 32·10 = 2368 for the digits MLP)."""
    total = 0
    for layer in net.layers:
        weights = getattr(layer, "w_m", None)
        if weights is None:
            weights = layer.w_codes
        rows, cols = np.shape(weights)
        total += rows * cols
    return total


#: Where the demo quantises the input: on the host on every board, so the link carries 8-bit
#: mantissas and one exponent per block (BFP) or int8 codes (discrete), not f16 words; a
#: device's QUANT gives the same numbers (``docs/demo.md``).
INPUT_WHERE = "host"


def _input_quant(net, where="device"):
    """The :class:`lowbit.sim.program.InputQuant` of ``net``'s input quantisation (``where``:
    ``"device"`` runs QUANT, ``"host"`` sends the same numbers already quantised)."""
    from lowbit.sim.program import InputQuant
    iq = net.input_quant
    return InputQuant(where, width=iq.width, rule=iq.rule, rounding="nearest",
                      shift=iq.shift if iq.kind == "int8" else 0)


# -- devices --------------------------------------------------------------------------------------

def connect(*, simulator=None, port=None, board=None, progress=None, baud=None):
    """An :class:`lowbit.boards.driver.Accelerator` for the demo and a description of it.

    ``port`` opens a board (top parameters of ``board``'s profile, default
    :data:`~lowbit.boards.profiles.DEFAULT_BOARD`) at ``baud`` (default: the profile's rate;
    :meth:`lowbit.boards.driver.Accelerator.open`); otherwise ``simulator`` (default
    :func:`default_simulator`) runs ``board``'s own top (:func:`board_top`), or
    :data:`SIM_TOP` when no board is named.
    """
    from .driver import Accelerator
    if port is not None:
        board = DEFAULT_BOARD if board is None else board
        profile = get_board(board)
        _say(progress, f"lowbit: opening {port} ({profile.title})")
        params = board_top(board)
        acc = Accelerator.open(port, baud=baud, params=params)
        return acc, f"{board} on {port} at {acc.identity.baud} baud"
    simulator = default_simulator() if simulator is None else simulator
    params, whose = (SIM_TOP, "the simulated top") if board is None else \
        (board_top(board), f"{board}'s top")
    if simulator == "model":
        return Accelerator.model(**params), f"model (lowbit.sim.link.DeviceModel) of {whose}"
    if simulator == "cxxrtl":
        from lowbit.sim.rtl.cxxrtl import on_compile
        _say(progress, f"lowbit: loading the CXXRTL simulator of {whose}")

        def notice():
            _say(progress, "lowbit: compiling it (not in the cache yet: 2-6 min this once; "
                           "later runs load it in seconds)")
        with on_compile(notice):
            acc = Accelerator.simulated(simulator=simulator, **params)
        return acc, f"{simulator} simulator of {whose}"
    _say(progress, f"lowbit: elaborating {whose} for Amaranth's simulator")
    return Accelerator.simulated(simulator=simulator, **params), \
        f"{simulator} simulator of {whose}"


# -- projections ----------------------------------------------------------------------------------

#: Where :mod:`scripts.bench_demo` writes each board's measured cycles per image.
DEMO_BENCH = Path(__file__).resolve().parent.parent / "docs" / "bench" / "demo.json"


def board_top(board):
    """The :class:`lowbit.hw.top.Accelerator` parameters ``lowbit build`` gives ``board``'s top
    (:func:`lowbit.boards.build.top_parameters`, ``clk_freq`` included)."""
    from .build import top_parameters
    return top_parameters(get_board(board))[0]


#: Top parameters that never change a RUN's cycle count: the clock and baud rate the UART
#: divides, whether its receiver samples at both clock edges, and whether the RUN reply counts
#: busy cycles.
CYCLE_NEUTRAL = ("clk_freq", "baud", "uart_ddr", "busy_count")


def _canonical_top(params, ignore=()):
    """``params`` with every omitted :class:`lowbit.hw.top.Accelerator` default filled in, in JSON
    form (tuples as lists), so that two spellings of one top compare equal; without the
    parameters named in ``ignore``."""
    import inspect

    from lowbit.hw.top import Accelerator
    full = {name: p.default for name, p in inspect.signature(Accelerator.__init__)
            .parameters.items() if p.default is not inspect.Parameter.empty}
    full.update(params)
    for key in ("uart", "simulation", *ignore):   # uart, simulation: set by the transport
        full.pop(key, None)
    return json.loads(json.dumps(full, sort_keys=True, default=str))


def same_top(a, b, *, cycles=False):
    """True if the top parameter dicts ``a`` and ``b`` describe the same
    :class:`lowbit.hw.top.Accelerator` (omitted parameters count as their defaults); with
    ``cycles``, the same for cycle counts: tops that differ only in :data:`CYCLE_NEUTRAL` (the
    clock and baud rate the UART divides, whether busy cycles are counted) run every RUN in the
    same number of cycles."""
    ignore = CYCLE_NEUTRAL if cycles else ()
    return _canonical_top(a, ignore) == _canonical_top(b, ignore)


def measured_fmax(board, *, build_dir="build", bench_dir=None):
    """Measured Fmax (MHz) of ``board``'s own top, and its source, or ``None``.

    Looks at ``<build_dir>/<board>/report.json`` (``lowbit build``: the lowest achieved
    frequency over its clock domains), then at the board's entry of ``docs/bench/boards.json``
    (``scripts/bench_boards.py``: the board's own builds, median over seeds), then at the
    ``top`` rows of ``docs/bench/*.json`` (out-of-context median over seeds; the last matching
    row wins). Only a build whose top
    parameters equal :func:`board_top` of ``board`` counts: another top on the same device
    (the first top without the sequencer, or another board's profile on the same chip) says
    nothing about this board's clock.
    """
    own = _canonical_top(board_top(board))
    report = Path(build_dir) / board / "report.json"
    if report.exists():
        try:
            rep = json.loads(report.read_text())
            fmax = rep.get("fmax") or {}
            achieved = [v["achieved"] for v in fmax.values() if "achieved" in v]
            if achieved and _canonical_top(rep.get("top") or {}) == own:
                return min(achieved), str(report)
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
    bench = Path(bench_dir) if bench_dir else DEMO_BENCH.parent
    builds = bench / "boards.json"
    if builds.is_file():
        try:
            entry = json.loads(builds.read_text()).get("boards", {}).get(board)
            if isinstance(entry, dict) and entry.get("fmax_mhz_median") and \
                    isinstance(entry.get("params"), dict) and \
                    _canonical_top(entry["params"]) == own:
                return float(entry["fmax_mhz_median"]), str(builds)
        except (ValueError, AttributeError, TypeError):
            pass
    best = None
    for path in sorted(bench.glob("*.json")) if bench.is_dir() else []:
        try:
            rows = json.loads(path.read_text()).get("rows", [])
        except (ValueError, AttributeError):
            continue
        for row in rows if isinstance(rows, list) else []:
            if isinstance(row, dict) and row.get("block") == "top" and \
                    row.get("fmax_mhz_median") and isinstance(row.get("params"), dict) and \
                    _canonical_top(row["params"]) == own:
                best = (float(row["fmax_mhz_median"]), str(path))
    return best


def board_fit(board, net):
    """``None`` if ``board``'s profile (its top parameters) can run ``net``
    (:class:`lowbit.sim.mlp.QuantisedMLP`), else the reason (engines, weight memory, scratchpad)."""
    from lowbit.sim.program import NetworkLayout

    from .driver import Accelerator
    design = Accelerator.model(**board_top(board)).design
    try:
        NetworkLayout(net.layers, design, input=_input_quant(net, INPUT_WHERE))
    except (TypeError, ValueError) as e:
        return str(e)
    return None


def stored_cycles(variant, *, path=None, data=None):
    """Cycles per image of ``variant`` measured on each board's own simulated top by
    ``scripts/bench_demo.py``, from ``path`` (default ``docs/bench/demo.json``) or from its
    already loaded contents ``data``.

    A measurement counts for a board only if the top parameters it was made with equal the
    board's :func:`board_top` today (a changed profile makes it stale). Returns a dict
    ``{board: cycles_per_image}`` (empty if the file is missing or has no such measurement).
    """
    return {name: float(m["cycles_per_image"])
            for name, m in stored_measurements(variant, path=path, data=data).items()}


def stored_measurements(variant, *, path=None, data=None):
    """The measurement entries behind :func:`stored_cycles`: ``{board: entry}`` of
    ``docs/bench/demo.json`` (the entry's ``digests``, where recorded, name the netlist each
    board's count was measured on)."""
    if data is None:
        try:
            data = json.loads((DEMO_BENCH if path is None else Path(path)).read_text())
        except (OSError, ValueError):
            return {}
    found = (data.get("boards") or {}).get(variant) if isinstance(data, dict) else None
    out = {}
    for m in found if isinstance(found, list) else []:
        if not isinstance(m, dict) or not m.get("cycles_per_image") or \
                not isinstance(m.get("params"), dict):
            continue
        if _measured_input(m) != INPUT_WHERE:
            continue                  # QUANT on the device runs other cycles than host input
        for name in m.get("boards") or []:
            if name in BOARDS and same_top(m["params"], board_top(name), cycles=True):
                out[name] = m
    return out


def _measured_input(m):
    """Where a stored measurement quantised the input (older ones do not say: on the device
    when the top had the quantiser)."""
    where = m.get("input_quantised_on")
    if where is None:
        p = m["params"]
        where = "device" if p.get("sequencer") and p.get("quantiser", True) else "host"
    return where


def link_traffic(params, net, images=540):
    """Bytes through the link per image when ``images`` test images of ``net`` run on a top
    with ``params`` (requests and replies, frames included): the driver's own traffic
    (:meth:`lowbit.boards.driver.Accelerator.run_network`, input quantised on the host), over
    the protocol model with ``RUN`` answered at once (its payload sizes do not depend on the
    program's results), so it takes milliseconds. Placing the network is not counted."""
    import struct

    from lowbit.sim.link import Status

    from .driver import Accelerator
    acc = Accelerator.model(**params)
    model = acc.port.model

    def run_at_once(payload):
        if len(payload) != 8:
            return model._reply(Status.BAD_LENGTH)
        start, limit = struct.unpack("<2I", bytes(payload))
        return model._reply(Status.OK, struct.pack("<4I", start, limit, 0, 0))

    model._execute_run = run_at_once
    acc.load_network(net.layers, quantise_input=_input_quant(net, INPUT_WHERE))
    codes = np.zeros((images, acc.network.in_words), dtype=np.uint16)
    _, stats = acc.run_network(codes)
    return stats["link_bytes"] / images


def link_rate(baud, bytes_per_image):
    """Link-bound images/s: ``baud / 10 / bytes_per_image`` (8N1 frames: 10 bits a byte)."""
    return baud / 10 / bytes_per_image


def projections(cycles, *, build_dir="build", net=None, sources=None, macs=None):
    """Projected images/s on every board of :data:`lowbit.boards.profiles.BOARDS`, each from its own
    cycle count: the board clock (and its measured Fmax, :func:`measured_fmax`) divided by the
    cycles per image measured on that board's top.

    Parameters
    ----------
    cycles : mapping of str to float
        Cycles per image of the network on each board's own top (:func:`board_top`). A board
        that is missing (or maps to ``None``) is "not measured" and gets no rate: a cycle count
        of another top is never scaled to it.
    build_dir : str
        Directory of ``lowbit build`` reports (measured Fmax).
    net : lowbit.sim.mlp.QuantisedMLP or mapping of str to it, optional
        The network (or each board's conversion of it); boards whose profile cannot run it
        (:func:`board_fit`) get no rate and the reason in ``unfit``.
    sources : mapping of str to str, optional
        Where each board's cycle count comes from (copied to ``cycles_source``).
    macs : int, optional
        Multiply-accumulates per image (:func:`network_macs`); with it each measured row also
        has ``mac_per_cycle``, ``mmacs`` (at the board clock) and ``mmacs_at_fmax``.

    Returns
    -------
    list of dict
        One per board, in :data:`~lowbit.boards.profiles.BOARDS` order: ``board``, ``clock_mhz``,
        ``lanes`` (matrix lanes of its top), ``cycles_per_image`` and ``cycles_source``
        (``None`` when not measured), ``images_per_s``, ``fmax_mhz``, ``fmax_source``,
        ``images_per_s_at_fmax`` (only where the measured Fmax exceeds the board clock),
        ``unfit``; and the link: ``baud`` (the profile's), ``link_bytes_per_image``
        (:func:`link_traffic`, with ``net``), ``link_images_per_s`` (:func:`link_rate`) and
        ``images_per_s_bound``, the lesser of the compute- and link-bound rates.

    Raises
    ------
    TypeError
        If ``cycles`` is not a mapping (a single count for all boards is no longer accepted).
    ValueError
        If ``cycles`` names a board that does not exist or a count is not positive.
    """
    if not isinstance(cycles, Mapping):
        raise TypeError(f"Cycles must be a mapping of board names to cycles per image, not "
                        f"{cycles!r}")
    sources = {} if sources is None else dict(sources)
    for name, value in cycles.items():
        if name not in BOARDS:
            raise ValueError(f"Unknown board {name!r} in cycles; supported boards: "
                             f"{', '.join(BOARDS)}")
        if value is not None and not value > 0:
            raise ValueError(f"Cycles per image of {name} must be positive, not {value!r}")
    out = []
    for name, profile in BOARDS.items():
        clock = profile.clk_freq / 1e6
        board_net = net.get(name) if isinstance(net, Mapping) else net
        unfit = board_fit(name, board_net) if board_net is not None else None
        cpi = None if unfit else cycles.get(name)
        fm = measured_fmax(name, build_dir=build_dir)
        rate = clock * 1e6 / cpi if cpi else None
        row = {"board": name, "clock_mhz": clock, "lanes": profile.top.get("matrix_lanes"),
               "cycles_per_image": cpi, "cycles_source": sources.get(name) if cpi else None,
               "images_per_s": rate, "fmax_mhz": fm[0] if fm else None,
               "fmax_source": fm[1] if fm else None, "images_per_s_at_fmax": None,
               "unfit": unfit, "mac_per_cycle": None, "mmacs": None, "mmacs_at_fmax": None}
        if fm and rate and fm[0] > clock:
            row["images_per_s_at_fmax"] = fm[0] * 1e6 / cpi
        if macs and cpi:
            row["mac_per_cycle"] = macs / cpi
            row["mmacs"] = row["mac_per_cycle"] * clock
            if fm:
                row["mmacs_at_fmax"] = row["mac_per_cycle"] * fm[0]
        row.update(baud=profile.top.get("baud"), link_bytes_per_image=None,
                   link_images_per_s=None, images_per_s_bound=None)
        if board_net is not None and not unfit:
            per_image = link_traffic(board_top(name), board_net)
            row["link_bytes_per_image"] = per_image
            row["link_images_per_s"] = link_rate(row["baud"], per_image)
            if rate:
                row["images_per_s_bound"] = min(rate, row["link_images_per_s"])
        out.append(row)
    return out


# -- the demo -------------------------------------------------------------------------------------

def _check_images(images, target):
    if images is None:
        return min(DEFAULT_IMAGES[target], 540)
    if not isinstance(images, int) or isinstance(images, bool):
        raise UsageError(f"The image count must be an integer between 1 and 540, not "
                         f"{images!r}")
    if not 1 <= images <= 540:
        raise UsageError(f"The image count must be an integer between 1 and 540, not {images}")
    return images


def _run_images(acc, codes, *, bar=False):
    """``acc.run_network(codes)``, in slices of whole ``RUN`` chunks so that a progress bar
    (:func:`progress_bar`, when ``bar``) advances per ``RUN``: the same ``RUN`` commands as one
    call, and the statistics summed."""
    n = len(codes)
    chunk = getattr(getattr(acc, "network", None), "chunk", None)
    if not bar or not chunk or n <= chunk:
        return acc.run_network(codes)
    from lowbit.boards.driver import Activations
    step = chunk * max(1, -(-n // (chunk * 100)))    # at most ~100 updates
    ms, es = [], []
    total = {"samples": 0, "runs": 0, "chunk": chunk, "instructions": 0, "cycles": 0,
             "seconds": 0.0, "link_bytes": 0}
    with progress_bar(n, unit="image", desc="test images") as pb:
        for k in range(0, n, step):
            out, stats = acc.run_network(codes[k:k + step])
            ms.append(out.m)
            es.append(out.e)
            for key in ("samples", "runs", "instructions", "cycles", "seconds", "link_bytes"):
                total[key] += stats[key]
            pb.update(len(out.m))
    return Activations(np.concatenate(ms), np.concatenate(es)), total


def run_digits(variant="bfp", *, simulator=None, port=None, images=None, board=None,
               build_dir="build", progress=None, accelerator=None, cycles_file=None,
               progress_bar=False, baud=None):
    """Run the digits demo; returns a :class:`DemoResult`.

    Parameters
    ----------
    variant : {"bfp", "discrete"}
    simulator : {"cxxrtl", "amaranth", "model"}, optional
        Simulated device (default :func:`default_simulator`); not with ``port``.
    port : str, optional
        Serial port of a board.
    images : int, optional
        Test images to run, 1..540 (default :data:`DEFAULT_IMAGES` of the target).
    board : str, optional
        Board profile: with ``port`` the board's (default
        :data:`~lowbit.boards.profiles.DEFAULT_BOARD`); in simulation the board whose own
        top is simulated (default: :data:`SIM_TOP`). The projections list every board.
    build_dir : str
        Directory of the model cache (``<build_dir>/demo``) and of ``lowbit build`` reports.
    progress : callable(str), optional
        Receives progress messages.
    accelerator : lowbit.boards.driver.Accelerator, optional
        Use this device instead of connecting (tests); its ``params`` are its top parameters.
    cycles_file : str, optional
        The per-board cycle counts of ``scripts/bench_demo.py`` (default
        ``docs/bench/demo.json``, :func:`stored_cycles`).
    progress_bar : bool
        Show a bar over the test images while they run, when stderr is a terminal.
    baud : int, optional
        UART rate of the board's bitstream, with ``port`` (default: the profile's, confirmed
        by IDENTIFY).

    The projections (:func:`projections`) use this run's cycles per image for every board
    whose top parameters (:func:`board_top`) equal those of the device that ran (with
    ``port``: ``board``'s own), the stored per-board counts of ``cycles_file`` for the other
    boards, and no rate ("not measured") for a board with neither. A device without cycle
    counts (the protocol model) gets no projections.

    Raises
    ------
    UsageError
        For bad arguments (before anything runs).
    MismatchError
        If a device output differs from the golden model.
    """
    if variant not in VARIANTS:
        raise UsageError(f"Variant must be one of {', '.join(VARIANTS)}, not {variant!r}")
    if simulator is not None and simulator not in SIMULATORS:
        raise UsageError(f"Simulator must be one of {', '.join(SIMULATORS)}, not {simulator!r}")
    if port is not None and simulator is not None:
        raise UsageError("Give --port (a board) or --simulator, not both")
    if baud is not None and port is None:
        raise UsageError("--baud is the rate of a board's serial port: use it with --port")
    if port is not None and board is None:
        board = DEFAULT_BOARD
    if board is not None and board not in BOARDS:
        raise UsageError(f"Unknown board {board!r}; supported boards: {', '.join(BOARDS)}")
    target = "port" if port is not None else (simulator or default_simulator())
    n = _check_images(images, target)
    split = mlp.load_split()
    if accelerator is None:
        acc, target_name = connect(simulator=simulator, port=port, board=board,
                                   progress=progress, baud=baud)
    else:
        acc, target_name = accelerator, "given accelerator"
    design = acc.design
    column = design.column()
    model, net = prepare_network(variant, column, split=split, build_dir=build_dir,
                                 progress=progress)
    lanes = design.matrix_lanes
    _say(progress, f"lowbit: placing the {variant} network on the device "
                   f"(N={lanes}, B={design.block})")
    where = INPUT_WHERE
    if board is not None and accelerator is None:
        unfit = board_fit(board, net)
        if unfit:
            raise UsageError(f"The {board} profile cannot run the {variant} network: {unfit}")
    acc.load_network(net.layers, quantise_input=_input_quant(net, where))
    x = split.x_test[:n]
    codes = mlp.pixels_to_f16(x)
    _say(progress, f"lowbit: running {n} test image{'s' * (n != 1)} on the {target_name}")
    outputs, stats = _run_images(acc, codes, bar=progress_bar and sys.stderr.isatty())
    gm, ge = mlp.forward(net, codes, column=column, lanes=lanes)
    for i in range(n):
        if not (np.array_equal(outputs.m[i], gm[i]) and np.array_equal(outputs.e[i], ge[i])):
            raise MismatchError(
                f"image {i} (test index {i}) differs from the golden model: device codes "
                f"{outputs.m[i].tolist()} exponents {outputs.e[i].tolist()}, golden codes "
                f"{gm[i].tolist()} exponents {ge[i].tolist()}", i, i)
    y = split.y_test[:n]
    golden_all = mlp.predictions(*mlp.forward(net, mlp.pixels_to_f16(split.x_test),
                                              column=column, lanes=lanes)) \
        if n < len(split.x_test) else mlp.predictions(gm, ge)
    seconds = stats["seconds"]
    cycles = int(stats["cycles"])
    cpi = cycles / n if cycles else None
    macs = network_macs(net)
    proj = []
    if cpi:
        run_top = board_top(board) if port is not None else getattr(acc, "params", None)
        stored = stored_cycles(variant, path=cycles_file)
        stored_from = str(cycles_file) if cycles_file is not None else "docs/bench/demo.json"
        per_board, sources = {}, {}
        for name in BOARDS:
            if run_top is not None and same_top(run_top, board_top(name), cycles=True):
                per_board[name], sources[name] = cpi, "this run"
            elif name in stored:
                per_board[name], sources[name] = stored[name], stored_from
        proj = projections(per_board, build_dir=build_dir, net=net, sources=sources, macs=macs)
    clock = fmax = None
    if board is not None:
        clock = get_board(board).clk_freq / 1e6
        fmax = (measured_fmax(board, build_dir=build_dir) or (None,))[0]
    mac_per_cycle = macs / cpi if cpi else None
    busy = stats.get("busy_cycles") if cycles else None
    per_image = stats["link_bytes"] / n if stats.get("link_bytes") else None
    baud = acc.identity.baud if acc.identity is not None else None
    return DemoResult(
        variant=variant, target=target_name, images=n,
        design={"matrix_lanes": lanes, "block": design.block, "max_blocks": design.max_blocks,
                "weight_depth": design.weight_depth, "frac_bits": design.frac_bits},
        float_accuracy=mlp.accuracy(model.predict(x), y),
        golden_accuracy=mlp.accuracy(mlp.predictions(gm, ge), y),
        device_accuracy=mlp.accuracy(mlp.predictions(outputs.m, outputs.e), y),
        float_accuracy_all=mlp.accuracy(model.predict(split.x_test), split.y_test),
        golden_accuracy_all=mlp.accuracy(golden_all, split.y_test),
        test_images=len(split.x_test), seconds=seconds,
        images_per_s=n / seconds if seconds > 0 else float("inf"), cycles=cycles,
        cycles_per_image=cpi, runs=int(stats["runs"]), projections=proj, board=board,
        macs_per_image=macs, mac_per_cycle=mac_per_cycle, clock_mhz=clock, fmax_mhz=fmax,
        mmacs=mac_per_cycle * clock if mac_per_cycle and clock else None,
        mmacs_at_fmax=mac_per_cycle * fmax if mac_per_cycle and fmax else None,
        busy_cycles=busy, busy_fraction=busy / cycles if busy is not None else None,
        link_bytes_per_image=per_image, baud=baud,
        link_images_per_s=link_rate(baud, per_image) if baud and per_image else None)


def format_result(r):
    """The demo's report as text."""
    pct = "{:.1%}".format
    lines = [
        f"digits MLP 64-32-10, {r.variant} variant, on the {r.target} "
        f"(N={r.design['matrix_lanes']}, B={r.design['block']})",
        f"  {r.images} test images: every output equals the golden model bit for bit",
        f"  accuracy on these images: float {pct(r.float_accuracy)}, golden "
        f"{pct(r.golden_accuracy)}, device {pct(r.device_accuracy)}",
        f"  accuracy on all {r.test_images} test images: float {pct(r.float_accuracy_all)}, "
        f"golden {pct(r.golden_accuracy_all)}",
        f"  throughput: {r.images_per_s:.1f} images/s wall clock ({r.seconds:.2f} s, "
        f"{r.runs} RUN command{'s' * (r.runs != 1)})",
    ]
    if r.link_bytes_per_image:
        line = f"  link: {r.link_bytes_per_image:.1f} bytes per image (requests and replies)"
        if r.link_images_per_s:
            line += (f"; at the device's {r.baud / 1e6:g} Mbaud at most "
                     f"{r.link_images_per_s:.0f} images/s (link-bound)")
        lines.append(line)
    if r.cycles_per_image is None:
        lines.append("  cycles per image: not available (the model transport counts no "
                     "cycles)")
        return "\n".join(lines)
    lines.append(f"  cycles per image: {r.cycles_per_image:.1f} (RUN replies, {r.cycles} "
                 "cycles in all)")
    if r.mac_per_cycle:
        work = (f"  work: {r.macs_per_image} MACs per image, {r.mac_per_cycle:.2f} MAC/cycle "
                "sustained")
        if r.clock_mhz:
            work += f"; {r.mmacs:.1f} MMAC/s at the {r.board} clock ({r.clock_mhz:g} MHz)"
            if r.mmacs_at_fmax:
                work += (f", {r.mmacs_at_fmax:.1f} MMAC/s at its measured Fmax "
                         f"({r.fmax_mhz:.1f} MHz)")
        lines.append(work)
    if r.busy_fraction is not None:
        lines.append(f"  matrix engine busy {r.busy_cycles} of {r.cycles} cycles "
                     f"({r.busy_fraction:.1%}; RUN replies)")
    lines.append("  projected on the boards (board clock / cycles per image on the board's own "
                 "top):")
    for p in r.projections:
        head = f"    {p['board']:<19} {p['clock_mhz']:5.1f} MHz:"
        if p.get("unfit"):
            lines.append(f"{head} its profile cannot run this network ({p['unfit']})")
            continue
        link = (f"; link: {p['link_bytes_per_image']:.1f} bytes/image at "
                f"{p['baud'] / 1e6:g} Mbaud, {p['link_images_per_s']:.0f} images/s link-bound"
                if p.get("link_images_per_s") else "")
        if not p.get("cycles_per_image"):
            lines.append(f"{head} not measured (no cycle count of its own top: run "
                         f"scripts/bench_demo.py){link}")
            continue
        line = (f"{head} {p['images_per_s']:9.0f} images/s ({p['cycles_per_image']:.1f} "
                f"cycles/image")
        if p.get("mac_per_cycle"):
            line += f", {p['mac_per_cycle']:.2f} MAC/cycle, {p['mmacs']:.0f} MMAC/s"
        line += f", cycles from {p['cycles_source']})"
        if p["images_per_s_at_fmax"]:
            line += (f"; measured Fmax {p['fmax_mhz']:.1f} MHz would allow "
                     f"{p['images_per_s_at_fmax']:.0f} images/s")
        elif p["fmax_mhz"]:
            line += f" (measured Fmax {p['fmax_mhz']:.1f} MHz)"
        else:
            line += " (no measured Fmax of its top yet)"
        lines.append(line + link)
    return "\n".join(lines)
