"""``lowbit demo digits``: the digits MLP end to end on the accelerator (issues #8 and #10).

The demo trains the 64-32-10 MLP of :mod:`sim.mlp` in float64 (or loads it from the cache
under the build directory), converts it to the accelerator's layers (BFP, or discrete weights
after quantisation-aware fine-tuning), places it on a device with
:meth:`boards.driver.Accelerator.load_network`, runs test images through
:meth:`~boards.driver.Accelerator.run_network` and checks every output code and exponent
against the golden model :func:`sim.mlp.forward`. It reports the float, golden and device
accuracy, the wall-clock images per second, the accelerator cycles per image (from the ``RUN``
replies) and the images per second that the cycle count projects on each board.

Devices (``target``)
--------------------
* ``"cxxrtl"``: the real top compiled with CXXRTL (:class:`sim.transport.SimulatedSerial`);
  the default when a C++ compiler is installed. The first run compiles (2-6 min, cached).
* ``"amaranth"``: the real top in Amaranth's simulator (~1-2k cycles/s: a few images).
* ``"model"``: the protocol model :class:`sim.link.DeviceModel` (instant; no cycle counts).
* a serial port (``port=``): a board built with ``lowbit build``; its profile's top parameters
  tell the driver the design (``board=``).

The simulated top is :data:`SIM_TOP`: the default top with the sequencer, ``N = 16`` matrix
lanes and block size ``B = 16``; the projections scale its cycle count by each board's clock.
"""

import dataclasses
import json
import os
import shutil
from pathlib import Path

import numpy as np

from sim import mlp

from .profiles import BOARDS, DEFAULT_BOARD, get_board

__all__ = ["VARIANTS", "SIMULATORS", "SIM_TOP", "DEFAULT_IMAGES", "DemoError", "UsageError",
           "MismatchError", "DemoResult", "default_simulator", "cxxrtl_available",
           "prepare_network", "connect", "run_digits", "projections", "board_fit", "measured_fmax",
           "format_result"]

#: Network variants.
VARIANTS = ("bfp", "discrete")
#: Simulated devices.
SIMULATORS = ("cxxrtl", "amaranth", "model")
#: Parameters of the simulated top (:class:`hw.top.Accelerator`).
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


# -- network --------------------------------------------------------------------------------------

def prepare_network(variant, column, *, split=None, build_dir="build", progress=None):
    """The float model and the converted network of ``variant`` for a device's ``column``.

    The float model (and, for ``"discrete"``, its fine-tuned copy) is cached as ``.npz`` under
    ``<build_dir>/demo/``; conversion (a second or so) is always redone because it depends on
    the device's column.

    Returns
    -------
    (sim.mlp.FloatMLP, sim.mlp.QuantisedMLP)
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


def _input_quant(net, where="device"):
    """The :class:`sim.program.InputQuant` of ``net``'s input quantisation (``where``:
    ``"device"`` runs QUANT, ``"host"`` sends the same numbers already quantised)."""
    from sim.program import InputQuant
    iq = net.input_quant
    return InputQuant(where, width=iq.width, rule=iq.rule, rounding="nearest",
                      shift=iq.shift if iq.kind == "int8" else 0)


# -- devices --------------------------------------------------------------------------------------

def connect(*, simulator=None, port=None, board=DEFAULT_BOARD, progress=None):
    """An :class:`boards.driver.Accelerator` for the demo and a description of it.

    ``port`` opens a board (top parameters of ``board``'s profile); otherwise ``simulator``
    (default :func:`default_simulator`) runs :data:`SIM_TOP`.
    """
    from .driver import Accelerator
    if port is not None:
        profile = get_board(board)
        _say(progress, f"lowbit: opening {port} ({profile.title})")
        params = dict(profile.top)
        return Accelerator.open(port, baud=params.get("baud", 1_000_000), params=params), \
            f"{board} on {port}"
    simulator = default_simulator() if simulator is None else simulator
    if simulator == "model":
        return Accelerator.model(**SIM_TOP), "model (sim.link.DeviceModel)"
    if simulator == "cxxrtl":
        _say(progress, "lowbit: building the CXXRTL simulator of the top (the first run "
                       "compiles it, 2-6 min; later runs load it from the cache)")
    else:
        _say(progress, "lowbit: elaborating the top for Amaranth's simulator")
    return Accelerator.simulated(simulator=simulator, **SIM_TOP), f"{simulator} simulator"


# -- projections ----------------------------------------------------------------------------------

def measured_fmax(board, *, build_dir="build", bench_dir=None):
    """Measured Fmax (MHz) of ``board``'s accelerator with the sequencer, and its source, or
    ``None``.

    Looks at ``<build_dir>/<board>/report.json`` (``lowbit build``: the lowest achieved
    frequency over its clock domains), then at the ``top`` rows of ``docs/bench/*.json``
    (out-of-context median over seeds) for the board's device. Only builds of a top with the
    sequencer count: the first top (host link only) says nothing about the layer engines.
    """
    profile = get_board(board)
    report = Path(build_dir) / board / "report.json"
    if report.exists():
        try:
            rep = json.loads(report.read_text())
            fmax = rep.get("fmax") or {}
            achieved = [v["achieved"] for v in fmax.values() if "achieved" in v]
            if achieved and (rep.get("top") or {}).get("sequencer"):
                return min(achieved), str(report)
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
    bench = Path(bench_dir) if bench_dir else Path(__file__).resolve().parent.parent / "docs" \
        / "bench"
    best = None
    for path in sorted(bench.glob("*.json")) if bench.is_dir() else []:
        try:
            rows = json.loads(path.read_text()).get("rows", [])
        except (ValueError, AttributeError):
            continue
        for row in rows if isinstance(rows, list) else []:
            if isinstance(row, dict) and row.get("block") == "top" and \
                    row.get("device") == profile.device and row.get("fmax_mhz_median") and \
                    (row.get("params") or {}).get("sequencer"):
                best = (float(row["fmax_mhz_median"]), str(path))
    return best


def board_fit(board, net):
    """``None`` if ``board``'s profile (its top parameters) can run ``net``
    (:class:`sim.mlp.QuantisedMLP`), else the reason (engines, weight memory, scratchpad)."""
    from sim.program import NetworkLayout

    from .driver import Accelerator
    design = Accelerator.model(**get_board(board).top).design
    try:
        NetworkLayout(net.layers, design, input=_input_quant(
            net, "device" if design.has("quantiser") else "host"))
    except (TypeError, ValueError) as e:
        return str(e)
    return None


def projections(cycles_per_image, *, build_dir="build", net=None, lanes=None):
    """Projected images/s on every board: the board clock (and its measured Fmax) divided by
    ``cycles_per_image``.

    With ``net`` (the network the cycles were measured on) each board's profile is checked to
    run it (:func:`board_fit`); boards that cannot get no rate. ``lanes`` is the matrix lane
    count of the measurement, to flag boards with another ``N`` (their cycle count differs).
    Returns a list of dicts (board, clock_mhz, lanes, images_per_s, fmax_mhz, fmax_source,
    images_per_s_at_fmax, unfit, other_lanes).
    """
    out = []
    for name, profile in BOARDS.items():
        clock = profile.clk_freq / 1e6
        fm = measured_fmax(name, build_dir=build_dir)
        unfit = board_fit(name, net) if net is not None else None
        board_lanes = profile.top.get("matrix_lanes")
        rate = clock * 1e6 / cycles_per_image if cycles_per_image and not unfit else None
        row = {"board": name, "clock_mhz": clock, "lanes": board_lanes, "images_per_s": rate,
               "fmax_mhz": fm[0] if fm else None, "fmax_source": fm[1] if fm else None,
               "images_per_s_at_fmax": None, "unfit": unfit,
               "other_lanes": lanes is not None and board_lanes is not None
               and board_lanes != lanes}
        if fm and rate and fm[0] > clock:
            row["images_per_s_at_fmax"] = fm[0] * 1e6 / cycles_per_image
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


def run_digits(variant="bfp", *, simulator=None, port=None, images=None, board=DEFAULT_BOARD,
               build_dir="build", progress=None, accelerator=None):
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
    board : str
        Board profile (for ``port``; the projections list every board).
    build_dir : str
        Directory of the model cache (``<build_dir>/demo``) and of ``lowbit build`` reports.
    progress : callable(str), optional
        Receives progress messages.
    accelerator : boards.driver.Accelerator, optional
        Use this device instead of connecting (tests).

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
    if board not in BOARDS:
        raise UsageError(f"Unknown board {board!r}; supported boards: {', '.join(BOARDS)}")
    target = "port" if port is not None else (simulator or default_simulator())
    n = _check_images(images, target)
    split = mlp.load_split()
    if accelerator is None:
        acc, target_name = connect(simulator=simulator, port=port, board=board,
                                   progress=progress)
    else:
        acc, target_name = accelerator, "given accelerator"
    design = acc.design
    column = design.column()
    model, net = prepare_network(variant, column, split=split, build_dir=build_dir,
                                 progress=progress)
    lanes = design.matrix_lanes
    _say(progress, f"lowbit: placing the {variant} network on the device "
                   f"(N={lanes}, B={design.block})")
    where = "device" if acc.has_engine("quantiser") else "host"
    acc.load_network(net.layers, quantise_input=_input_quant(net, where))
    x = split.x_test[:n]
    codes = mlp.pixels_to_f16(x)
    _say(progress, f"lowbit: running {n} test image{'s' * (n != 1)} on the {target_name}")
    outputs, stats = acc.run_network(codes)
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
        cycles_per_image=cpi, runs=int(stats["runs"]),
        projections=projections(cpi, build_dir=build_dir, net=net, lanes=lanes) if cpi else [])


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
    if r.cycles_per_image is None:
        lines.append("  cycles per image: not available (the model transport counts no "
                     "cycles)")
        return "\n".join(lines)
    lines.append(f"  cycles per image: {r.cycles_per_image:.1f} (RUN replies, {r.cycles} "
                 "cycles in all)")
    lines.append("  projected on the boards (cycles per image at the board clock):")
    for p in r.projections:
        if p.get("unfit"):
            lines.append(f"    {p['board']:<11} {p['clock_mhz']:5.1f} MHz: its profile cannot "
                         f"run this network ({p['unfit']})")
            continue
        line = f"    {p['board']:<11} {p['clock_mhz']:5.1f} MHz: {p['images_per_s']:9.0f} images/s"
        if p.get("other_lanes"):
            line += f" (at N={p['lanes']} its cycle count differs)"
        if p["images_per_s_at_fmax"]:
            line += (f"; measured Fmax {p['fmax_mhz']:.1f} MHz would allow "
                     f"{p['images_per_s_at_fmax']:.0f} images/s")
        elif p["fmax_mhz"]:
            line += f" (measured Fmax {p['fmax_mhz']:.1f} MHz)"
        else:
            line += " (no measured Fmax of a top with the sequencer yet)"
        lines.append(line)
    return "\n".join(lines)
