"""Design-space exploration: sweeps of block and board builds, in parallel on Dask distributed.

``lowbit explore BLOCK --device D --param k=v1,v2 ... --seeds 1 2 3`` builds every combination
of the parameters out of context (:func:`lowbit.boards.toolchain.implement`, as the benchmarks
do) once per placement seed; ``lowbit explore top --board B --param ...`` builds the board's top
with its pins and PLL (:func:`lowbit.boards.build.build_board`). The result is a row per
configuration: resources, Fmax per seed and their median, throughput, whether it fits and
whether it meets the clock, and whether it is on the Pareto front of area against throughput.

The engine (:func:`run_sweep`) is shared with ``scripts/bench.py``:

- every build goes through the run cache (:class:`lowbit.boards.buildcache.RunCache`, keyed by
  netlist digest, device or board, seed and nextpnr options), so a repeated sweep builds nothing
  and the benchmarks and ``lowbit explore`` reuse each other's builds;
- builds run one after another in this process, or as tasks on a Dask cluster (an embedded
  ``LocalCluster``, or a scheduler the user started): each task runs the build in a child
  process of its own process group, so that cancelling a sweep (Ctrl-C) ends the YoWASP
  processes of the running builds too;
- a failed build, or one that does not fit the device, is a row with its error; a netlist's
  tool failure is cached like a result (it fails the same way again).

Dask is an optional dependency (``pip install 'lowbit[explore]'``); this module imports it only
when a sweep runs on a cluster. See ``docs/explore.md``.
"""

import argparse
import ast
import contextlib
import dataclasses
import inspect
import itertools
import json
import os
import pickle
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from .buildcache import (
    RunCache,
    board_digest,
    board_key,
    default_cache_path,
    netlist_digest,
    netlist_key,
)
from .options import int_in, real_in
from .profiles import BOARDS
from .toolchain import ABC9_FALLBACK, DEVICES, ToolchainError

__all__ = ["Config", "configs", "run_sweep", "dask_client", "SweepInterrupted", "ExploreError",
           "RATES", "CEILINGS", "throughput", "boards_on", "device_params", "pareto",
           "format_table", "plot_pareto", "build_here", "add_parser", "run"]


class ExploreError(Exception):
    """A sweep cannot run (no Dask, no scheduler, bad parameters); the message says why."""


class SweepInterrupted(Exception):
    """The sweep was interrupted (Ctrl-C) and its remaining builds cancelled.

    Members
    -------
    finished : int
        Builds that finished (each is in the run cache).
    cancelled : int
        Builds cancelled, running or waiting.
    """

    def __init__(self, finished, cancelled):
        super().__init__(f"interrupted: {cancelled} build{'s' * (cancelled != 1)} cancelled, "
                         f"{finished} finished")
        self.finished, self.cancelled = finished, cancelled


# == Throughput ===================================================================================

#: Results per cycle of a block, from its parameters: (unit, function of the parameters).
RATES = {
    "bfp": ("MAC", lambda p: p.get("lanes", 16)),
    "floatmac": ("MAC", lambda p: p.get("lanes", 16)),
    "grand": ("sample", lambda p: p.get("lanes", 2)),
    "prng": ("64-bit word", lambda p: p.get("lanes", 1)),
    "lut": ("lookup", lambda p: p.get("lanes", 4)),
    "quantiser": ("element", lambda p: p.get("lanes", 2)),
    "discrete": ("lane op", lambda p: p.get("lanes", 4)),
}

#: The accelerator top's rate for ``lowbit explore``: its matrix engine's lanes (MACs per cycle,
#: a peak; the sustained figure is ``scripts/bench_demo.py``'s), when it has one. The benchmark
#: table (``scripts/bench.py``) gives no throughput for the top.
TOP_RATE = ("MAC", lambda p: p.get("matrix_lanes", 8)
            if p.get("bfp", True) or p.get("discrete", True) else None)

#: DESIGN §7 ceilings per (device, unit): (results per second, description). ECP5 has no
#: published anchor; its MAC ceiling is every MULT18X18D at the block's own Fmax (None).
CEILINGS = {
    ("up5k", "MAC"): (16 * 86e6, "8 SB_MAC16 dual 8x8 = 16 MAC/cycle at 86 MHz"),
    ("hx8k", "MAC"): (16 * 82e6, "16 LUT lanes at 82 MHz"),
    ("ecp5-25f", "MAC"): (None, "28 MULT18X18D at the block's Fmax"),
    ("ecp5-85f", "MAC"): (None, "156 MULT18X18D at the block's Fmax"),
    ("up5k", "sample"): (4 * 59e6, "4-lane generator at 59 MHz"),
}


def throughput(name, device, params, fmax_mhz, rates=RATES):
    """Results per second of block ``name`` with ``params`` at ``fmax_mhz``.

    Returns
    -------
    dict or None
        ``{"unit", "per_cycle", "per_second"}``, plus ``"ceiling"``, ``"ceiling_what"`` and
        ``"ceiling_ratio"`` where :data:`CEILINGS` has the device's ceiling for the unit;
        ``None`` for a block without a rate in ``rates`` (:data:`RATES`) or without an Fmax.
    """
    if name not in rates or not fmax_mhz:
        return None
    unit, per_cycle = rates[name][0], rates[name][1](params)
    if not per_cycle:
        return None
    rate = per_cycle * fmax_mhz * 1e6
    out = {"unit": unit, "per_cycle": per_cycle, "per_second": rate}
    if (device, unit) in CEILINGS:
        ceiling, what = CEILINGS[device, unit]
        if ceiling is None:
            ceiling = DEVICES[device]["dsps"] * fmax_mhz * 1e6
        out.update(ceiling=ceiling, ceiling_what=what, ceiling_ratio=round(rate / ceiling, 3))
    return out


# == Configurations ===============================================================================

def boards_on(device):
    """Names of the board profiles on ``device``, in :data:`lowbit.boards.profiles.BOARDS`
    order."""
    return [name for name, p in BOARDS.items() if p.device == device]


def device_params(name, device, board=None):
    """The parameters block ``name`` is built with on ``device`` (the benchmarks' and the
    base of a sweep): from the board profile ``board``, or the first profile on the device.

    For the top, the profile's top parameters the top takes (and ``clk_freq``); for another
    block, the profile's multiplier style where the block takes one, and ``sim_model=False``
    (the vendor primitives) where it has that parameter.

    Raises
    ------
    ValueError
        If ``board`` is not a board on ``device``.
    """
    from lowbit.hw.registry import block_class
    if board is not None and BOARDS[board].device != device:
        raise ValueError(f"Board {board!r} is not a {device} board")
    profile = BOARDS[board] if board is not None else \
        next((p for p in BOARDS.values() if p.device == device), None)
    accepted = inspect.signature(block_class(name).__init__).parameters
    params = {}
    if profile is None:
        return params
    if name == "top":
        params = {k: v for k, v in profile.top.items() if k in accepted}
        if "clk_freq" in accepted:
            params["clk_freq"] = profile.clk_freq
    else:
        for key in ("multiplier", "mult"):
            if key in accepted:
                params[key] = profile.top["multiplier"]
        if "sim_model" in accepted:
            # Vendor primitives (SB_MAC16, MULT18X18D) instead of behavioural models.
            params["sim_model"] = False
    return params


@dataclasses.dataclass(frozen=True, eq=False)
class Config:
    """One configuration of a sweep: one row of the result, built once per seed.

    Members
    -------
    block : str
        A block of :data:`lowbit.hw.registry.BLOCKS`.
    params : dict
        Every parameter it is built with (the base parameters and the swept ones).
    device : str
        A device of :data:`lowbit.boards.toolchain.DEVICES`.
    swept : dict
        The swept parameters (a subset of ``params``; they name the row).
    board : str or None
        For the top: build the board's top with its pins and PLL
        (:func:`lowbit.boards.build.build_board`) instead of out of context.
    dsp : bool
        Out of context: let synthesis map multipliers to DSPs (false for LUT multipliers).
    freq_mhz : float or None
        Out of context: nextpnr's clock target (``None``: ``implement``'s default).
    pnr_args : tuple of str
        Out of context: extra nextpnr options.
    clock_mhz : float or None
        The clock a build must meet (the board's).
    """
    block: str
    params: dict
    device: str
    swept: dict = dataclasses.field(default_factory=dict)
    board: str | None = None
    dsp: bool = True
    freq_mhz: float | None = None
    pnr_args: tuple = ()
    clock_mhz: float | None = None

    @property
    def label(self):
        """``BLOCK k=v ... on DEVICE`` (or ``on BOARD``)."""
        swept = " ".join(f"{k}={v!r}" for k, v in self.swept.items())
        return f"{self.block}{' ' + swept if swept else ''} on {self.board or self.device}"

    def component(self):
        """A new instance of the block (for a board build: the top with the board's
        parameters). Raises the constructor's ``TypeError`` / ``ValueError``."""
        from lowbit.hw.registry import build_block
        return build_block(self.block, **self.params)

    def digest(self):
        """The netlist digest of the configuration (an elaboration): :func:`~lowbit.boards.
        buildcache.netlist_digest`, or :func:`~lowbit.boards.buildcache.board_digest` for a
        board build."""
        if self.board is not None:
            return board_digest(self.board, top=self.params)
        return netlist_digest(self.component())

    def key(self, seed, digest):
        """The run cache's key of the build with ``seed`` (``digest``: :meth:`digest`)."""
        if self.board is not None:
            return board_key(self.board, seed, digest=digest)
        return netlist_key(None, self.device, seed, self.dsp, self.freq_mhz, self.pnr_args,
                           digest=digest)


def parse_values(text):
    """The values of one ``--param k=v1,v2,...``: Python literals (a tuple is one value:
    ``modes=(),("normal",)``), or plain strings (``mult=lut,sb_mac16``).

    Raises
    ------
    ValueError
        No value, or a value given twice.
    """
    try:
        values = ast.literal_eval(f"[{text}]")
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        values = [_literal(part) for part in _split_commas(text)]
    if not values or any(isinstance(v, str) and not v for v in values):
        raise ValueError(f"no value in {text!r}")
    for k, v in enumerate(values):
        if v in values[:k]:
            raise ValueError(f"value {v!r} is given twice")
    return values


def _literal(text):
    text = text.strip()
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def _split_commas(text):
    """``text`` split at the commas outside brackets and quotes."""
    parts, depth, quote, cur = [], 0, None, ""
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        cur += ch
    return parts + [cur]


def sweep_param(text):
    """An argparse type: ``k=v1,v2,...`` as ``(k, [v1, v2, ...])`` (:func:`parse_values`)."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"must be written key=value[,value...], not {text!r}")
    key, value = text.split("=", 1)
    key = key.strip()
    if not key.isidentifier():
        raise argparse.ArgumentTypeError(f"parameter name must be an identifier, not {key!r}")
    try:
        return key, parse_values(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{key}: {e}") from None


def configs(block, sweep=(), *, device=None, board=None, freq_mhz=None, pnr_args=(),
            clock_mhz=None):
    """The configurations of a sweep, every combination of ``sweep`` in order, each checked by
    the block's constructor.

    Parameters
    ----------
    block : str
        A block of :data:`lowbit.hw.registry.BLOCKS`.
    sweep : sequence of (str, list)
        Parameter names and their values (each name once).
    device : str, optional
        Build out of context on this device, with its first board profile's parameters
        (:func:`device_params`) as the base.
    board : str, optional
        The top: build the board's top (pins, PLL). Another block: out of context on the
        board's device with the board profile's parameters. The board's clock is the clock to
        meet.
    freq_mhz, pnr_args
        Out of context: nextpnr's clock target and extra options (:class:`Config`).
    clock_mhz : float, optional
        The clock to meet (default: the board's, or that of the first board on the device).

    Returns
    -------
    list of Config

    Raises
    ------
    ExploreError
        Unknown block or parameter, a parameter swept twice, a combination the block's
        constructor refuses (the message names it), or options that do not apply.
    """
    from lowbit.hw.registry import BLOCKS, block_params
    if block not in BLOCKS:
        raise ExploreError(f"unknown block {block!r}; known blocks: {', '.join(BLOCKS)}")
    if (device is None) == (board is None):
        raise ExploreError("give either a device or a board")
    if board is not None and board not in BOARDS:
        raise ExploreError(f"unknown board {board!r}; boards: {', '.join(BOARDS)}")
    if device is not None and device not in DEVICES:
        raise ExploreError(f"unknown device {device!r}; devices: {', '.join(DEVICES)}")
    board_build = block == "top" and board is not None
    if board_build and (freq_mhz is not None or pnr_args):
        raise ExploreError("--freq and --nextpnr apply to out-of-context builds; a board "
                           "build of the top uses the board's clock and lowbit build's options")
    try:
        accepted = [p.name for p in block_params(block)]
    except ImportError as e:
        raise ExploreError(str(e)) from None
    names = [k for k, _ in sweep]
    for k, name in enumerate(names):
        if name in names[:k]:
            raise ExploreError(f"parameter {name!r} is given twice")
        if name not in accepted:
            raise ExploreError(f"block {block!r} has no parameter {name!r}; its parameters: "
                               f"{', '.join(accepted)} (see `lowbit verilog --list`)")
    device = BOARDS[board].device if board is not None else device
    if clock_mhz is None:
        on = [board] if board is not None else boards_on(device)
        clock_mhz = BOARDS[on[0]].clk_freq / 1e6 if on else None
    base = device_params(block, device, board)
    out = []
    for values in itertools.product(*(v for _, v in sweep)):
        swept = dict(zip(names, values, strict=True))
        params = {**base, **swept}
        multiplier = params.get("mult", params.get("multiplier"))
        cfg = Config(block, params, device, swept=swept, board=board if board_build else None,
                     dsp=multiplier != "lut", freq_mhz=freq_mhz, pnr_args=tuple(pnr_args),
                     clock_mhz=clock_mhz)
        try:
            component = cfg.component()
        except (TypeError, ValueError) as e:
            what = " ".join(f"{k}={v!r}" for k, v in swept.items()) or "(defaults)"
            raise ExploreError(f"{block} {what}: {e}") from None
        component._MustUse__silence = True          # constructed only to check the parameters
        out.append(cfg)
    return out


# == One build ====================================================================================

def build_here(config, seed, *, build_dir=None, implement=None):
    """Build ``config`` with placement ``seed`` in this process.

    Parameters
    ----------
    config : Config
    seed : int
    build_dir : str, optional
        Keep the build's files here (default: a temporary folder, removed).
    implement : callable, optional
        In place of :func:`lowbit.boards.toolchain.implement` (called with the keyword
        arguments ``seed``, ``name`` and ``dsp``, and ``freq_mhz``, ``pnr_args`` and
        ``build_dir`` only where they are set).

    Returns
    -------
    dict
        ``implement``'s result, or for a board build the report's figures in the same fields
        (``lcs``, ``lcs_block`` = ``lcs``, ``dsps``, ``rams``, ``spram``, ``fmax``,
        ``fmax_mhz``: the slowest clock's, ``timing_met``, ``seconds``).

    Raises
    ------
    ToolchainError
        A tool failed (the netlist does not fit, for instance).
    """
    if config.board is not None:
        from .build import build_board
        with contextlib.ExitStack() as stack:
            if build_dir is None:
                build_dir = stack.enter_context(tempfile.TemporaryDirectory(
                    prefix="lowbit-explore-"))
            report = build_board(config.board, seed=seed, build_dir=build_dir,
                                 top=config.params)
        res = report["resources"]
        lcs = res["lcs"]["used"]
        return {"seed": seed, "lcs": lcs, "lcs_block": lcs, "wrapper_lcs": 0,
                "ffs": res.get("ffs", {}).get("used"), "dsps": res["dsps"]["used"],
                "rams": res["rams"]["used"], "spram": res["spram"]["used"],
                "fmax": report["fmax"],
                "fmax_mhz": min(v["achieved"] for v in report["fmax"].values()),
                "timing_met": report["timing_met"], "seconds": report["seconds"],
                "board": config.board}
    if implement is None:
        from .toolchain import implement
    extra = {}
    if config.freq_mhz is not None:
        extra["freq_mhz"] = config.freq_mhz
    if config.pnr_args:
        extra["pnr_args"] = config.pnr_args
    if build_dir is not None:
        extra["build_dir"] = build_dir
    return implement(config.component(), config.device, seed=seed, name=config.block,
                     dsp=config.dsp, **extra)


#: Tool messages that mean "the design does not fit the device".
_NO_FIT = re.compile(r"(only has|Unable to place|not enough|exceed|too many|No Bel|"
                     r"Failed to place|insufficient)", re.I)


def does_not_fit(error):
    """Whether a build's error message says that the design does not fit the device."""
    return bool(_NO_FIT.search(error or ""))


def _failure(seed, error, cacheable):
    return {"error": error, "seed": seed, **({} if cacheable else {"cache": False})}


def _build_or_failure(config, seed, build_dir=None, implement=None):
    """:func:`build_here`, or a failure entry: a tool's failure is cached like a result (the
    same netlist fails the same way), any other error (``"cache": False``) is not."""
    try:
        return build_here(config, seed, build_dir=build_dir, implement=implement)
    except ToolchainError as e:
        return _failure(seed, str(e), True)
    except Exception as e:            # noqa: BLE001 -- a failed build is a row, not a crash
        return _failure(seed, f"{type(e).__name__}: {e}", False)


# -- on a Dask worker: each build in a child process of its own process group -------------------

#: Running builds of this (worker) process: task key -> child process.
_RUNNING = {}
_RUNNING_LOCK = threading.Lock()
_CHILD = ("import sys; from lowbit.boards.explore import _child_main; "
          "sys.exit(_child_main(sys.argv[1:]))")


def _build_task(config, seed, build_dir, key):
    """A Dask task: :func:`build_here` in a child Python of its own process group (so that
    :func:`_abort_builds` ends it with its tools), returning its result or failure entry."""
    with tempfile.TemporaryDirectory(prefix="lowbit-task-") as tmp:
        spec, result, log = (Path(tmp) / n for n in ("spec.pickle", "result.json", "stderr"))
        spec.write_bytes(pickle.dumps((config, seed, build_dir)))
        with open(log, "wb") as err:
            proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(spec), str(result)],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=err, start_new_session=True)
        with _RUNNING_LOCK:
            _RUNNING[key] = proc
        try:
            status = proc.wait()
        finally:
            with _RUNNING_LOCK:
                _RUNNING.pop(key, None)
        if result.exists():
            return json.loads(result.read_text())
        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
        return _failure(seed, f"the build process ended with status {status}"
                        + (f": {tail}" if tail else ""), False)


def _child_main(argv):
    """The child process of :func:`_build_task`: build, write the result as JSON. Ends its
    process group if its parent (the worker) goes away."""
    parent = os.getppid()

    def watch():
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                _kill_group(os.getpid(), grace=0)

    threading.Thread(target=watch, daemon=True).start()
    spec, result = argv
    config, seed, build_dir = pickle.loads(Path(spec).read_bytes())
    out = _build_or_failure(config, seed, build_dir)
    Path(result).write_text(json.dumps(out))
    return 0


def _kill_group(pid, grace=3.0):
    """End the process group led by ``pid``: SIGTERM, then SIGKILL after ``grace`` seconds."""
    if not hasattr(os, "killpg"):                      # not POSIX
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 0)):
        if sig == signal.SIGTERM and not grace:
            continue
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        end = time.monotonic() + wait
        while time.monotonic() < end:
            try:
                os.killpg(pid, 0)
            except (ProcessLookupError, PermissionError):
                return
            time.sleep(0.05)


def _abort_builds(keys=None):
    """Run on each worker by a cancelling client: end the builds of the tasks ``keys`` (all of
    this worker's when ``None``) with their tools. Returns how many were running."""
    with _RUNNING_LOCK:
        procs = [p for k, p in _RUNNING.items() if keys is None or k in keys]
    for proc in procs:
        _kill_group(proc.pid)
        with contextlib.suppress(Exception):
            proc.wait(timeout=5)
    return len(procs)


def _abort_plugin():
    """A Dask worker plugin that ends a build whose task is cancelled or released while it
    runs: when the client cancels it, and when the client goes away without a word (killed),
    and the scheduler forgets its tasks."""
    from distributed import WorkerPlugin

    class AbortCancelledBuilds(WorkerPlugin):
        name = "lowbit-abort-cancelled-builds"
        idempotent = True

        def transition(self, key, start, finish, **kwargs):
            # The module's registry, imported on the worker (not pickled with this class).
            from lowbit.boards import explore
            if start == "executing" and finish != "memory" and key in explore._RUNNING:
                # Off the worker's event loop: ending a process group takes a moment.
                threading.Thread(target=explore._abort_builds, args=([key],),
                                 daemon=True).start()

    return AbortCancelledBuilds()


def _worker_info():
    """Run on each worker when a sweep connects: lowbit's version there."""
    import lowbit
    return {"lowbit": lowbit.__version__, "python": sys.version.split()[0]}


# == The cluster ==================================================================================

def default_workers():
    """Workers of the embedded cluster: one per CPU this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


@contextlib.contextmanager
def dask_client(workers=None, scheduler=None, *, timeout=30, say=None):
    """A Dask ``Client``: of a scheduler the user started (``scheduler``, ``tcp://HOST:PORT``),
    or of an embedded ``LocalCluster`` of ``workers`` processes with one thread each (default:
    :func:`default_workers`). Closed, with the embedded cluster, on exit.

    Raises
    ------
    ExploreError
        Dask is not installed, the scheduler cannot be reached or has no worker within
        ``timeout`` seconds, or a worker cannot import lowbit.
    """
    import logging
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ExploreError("a sweep on a cluster needs Dask distributed: pip install "
                           "'lowbit[explore]' (or pip install 'dask[distributed]')") from None
    say = say or (lambda msg: None)
    # The builds' own errors come back as rows; Dask's log lines about cancelled tasks and
    # closing workers would only clutter the terminal (the embedded cluster's: not even its
    # errors, of a worker closing while its scheduler goes, say).
    quiet = logging.ERROR if scheduler is not None else logging.CRITICAL
    logging.getLogger("distributed").setLevel(quiet)
    cluster = None
    if scheduler is None:
        workers = workers or default_workers()
        say(f"lowbit explore: starting a local Dask cluster of {workers} worker"
            f"{'s' * (workers != 1)}")
        # A Ctrl-C on the terminal reaches the whole process group; only this process acts
        # on it (cancels the builds, closes the cluster): the workers ignore it from their
        # start (the preload, this module, runs dask_setup). The scheduler's HTTP server
        # (dashboard, health) on a free port: the default 8787 may be another cluster's.
        with _sigint_blocked():
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                   dashboard_address=":0", silence_logs=quiet,
                                   preload=[__name__])
        client = Client(cluster)
    else:
        try:
            client = Client(scheduler, timeout=timeout)
        except (OSError, TimeoutError, ValueError) as e:
            raise ExploreError(f"cannot reach the Dask scheduler at {scheduler}: "
                               f"{str(e).splitlines()[0] if str(e) else type(e).__name__}"
                               ) from None
    try:
        client.register_plugin(_abort_plugin())
        if scheduler is not None:
            try:
                client.wait_for_workers(1, timeout=timeout)
            except (TimeoutError, OSError):
                raise ExploreError(f"the Dask scheduler at {scheduler} has no worker (start "
                                   f"one: dask worker {scheduler})") from None
            try:
                info = client.run(_worker_info)
            except Exception as e:                  # noqa: BLE001 -- the worker's reason
                raise ExploreError(f"a Dask worker cannot run lowbit's builds ({e}); install "
                                   "lowbit on every worker") from None
            say(f"lowbit explore: {len(info)} worker{'s' * (len(info) != 1)} at {scheduler}")
        yield client
    finally:
        with _sigint_ignored():
            client.close()
            if cluster is not None:
                cluster.close()


def dask_setup(worker):
    """Dask's preload hook, run in each worker of the embedded cluster as it starts: ignore
    SIGINT, which a Ctrl-C on the terminal sends to the whole process group (this client
    cancels the builds and closes the cluster)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def _sigint_blocked():
    """SIGINT blocked in this thread while the embedded cluster starts: the threads it starts,
    and the worker processes they spawn, inherit the blocked signal (so a Ctrl-C before a
    worker's preload ignores it does not interrupt its start), and this thread receives a
    Ctrl-C of that time when it unblocks it."""
    if not hasattr(signal, "pthread_sigmask") or \
            threading.current_thread() is not threading.main_thread():
        yield
        return
    # multiprocessing's resource tracker unblocks SIGINT in the thread that starts it: start
    # it here, before, so that it is not one of the cluster's threads.
    from multiprocessing import resource_tracker
    resource_tracker.ensure_running()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@contextlib.contextmanager
def _sigint_ignored():
    """Ignore Ctrl-C while cleaning up (in the main thread; elsewhere do nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


# == The sweep ====================================================================================

def run_sweep(configs, seeds, *, cache=None, client=None, cached_only=False, build_dir=None,
              implement=None, on_build=None):
    """Build every configuration with every seed; a row per configuration.

    Parameters
    ----------
    configs : list of Config
    seeds : list of int
    cache : RunCache, optional
        Finished builds are read from (when ``cache.use``) and written to it.
    client : distributed.Client or callable, optional
        Run the builds as tasks on this Dask client (or on the one the callable returns, asked
        for at the first build the cache does not have, so a sweep the cache holds whole starts
        no cluster); ``None``: one after another in this process.
    cached_only : bool
        Build nothing: rows from the cache alone (a row without any build is ``pending``).
    build_dir : str, optional
        Keep every build's files under this folder (on the machine that builds).
    implement : callable, optional
        In this process only: in place of :func:`lowbit.boards.toolchain.implement`
        (:func:`build_here`).
    on_build : callable(Config, dict), optional
        Called with each finished build's entry (cached ones too: ``"cached": True``).

    Returns
    -------
    list of dict
        :func:`make_row` of each configuration, in order.

    Raises
    ------
    SweepInterrupted
        On Ctrl-C, after the remaining builds were cancelled (and the running ones ended).

    Notes
    -----
    A configuration whose build failed for one seed (in this run or in the cache) is not built
    with its other seeds in this process, nor submitted for them when the failure is cached.
    """
    sweep = _Sweep(configs, seeds, cache, _Pool(client), build_dir, implement, on_build)
    try:
        with sweep.ctrl_c:
            sweep.start(cached_only)
            sweep.collect()
    except KeyboardInterrupt:
        with _sigint_ignored():
            if sweep.futures:
                sweep.pool.cancel(list(sweep.futures))
            finished = sum(len(d) for d in sweep.done)
            raise SweepInterrupted(finished, len(configs) * len(seeds) - finished) from None
    return [make_row(cfg, seeds, sweep.done[i], sweep.errors.get(i))
            for i, cfg in enumerate(configs)]


class _Sweep:
    """The state of :func:`run_sweep`: the builds done (``done[i][seed]``), the configurations
    that failed before any build (``errors``), and the submitted builds (``futures``)."""

    def __init__(self, configs, seeds, cache, pool, build_dir, implement, on_build):
        self.configs, self.seeds, self.cache, self.pool = configs, seeds, cache, pool
        self.build_dir, self.implement = build_dir, implement
        self.on_build = on_build or (lambda config, entry: None)
        self.done = [dict() for _ in configs]
        self.errors, self.futures = {}, {}
        self.ctrl_c = _CtrlC(at_once=pool.local)

    def finish(self, i, seed, key, entry, cached=False):
        """Record (and cache, unless it came from there or must not be) a build's entry."""
        if not cached and self.cache is not None and entry.get("cache", True):
            with self.ctrl_c.deferred():       # a Ctrl-C now would leave a half-written file
                self.cache.put(key, entry)
        self.done[i][seed] = {**entry, "cached": cached}
        self.on_build(self.configs[i], self.done[i][seed])

    def start(self, cached_only):
        """Every configuration in turn: its cache entries, then its other builds, here (one
        after another) or submitted to the cluster."""
        cache, pool = self.cache, self.pool
        for i, cfg in enumerate(self.configs):
            self.ctrl_c.check()
            digest = None
            if cache is not None:
                try:
                    digest = cfg.digest()
                except Exception as e:         # noqa: BLE001 -- an elaboration error is a row
                    self.errors[i] = f"elaboration failed: {type(e).__name__}: {e}"
                    continue
            keys = {s: cfg.key(s, digest) if digest else None for s in self.seeds}
            for seed in self.seeds:
                hit = cache.get(keys[seed]) if cache is not None else None
                if hit is not None:
                    self.finish(i, seed, keys[seed], hit, cached=True)
            if cached_only or any("error" in r for r in self.done[i].values()):
                continue
            for seed in self.seeds:
                if seed in self.done[i]:
                    continue
                where = _dir(self.build_dir, cfg, digest, seed)
                if pool.local:
                    self.finish(i, seed, keys[seed],
                                _build_or_failure(cfg, seed, where, self.implement))
                    self.ctrl_c.check()
                    if "error" in self.done[i][seed]:
                        break
                else:
                    key = f"lowbit-build-{cfg.block}-{seed}-{uuid.uuid4().hex[:12]}"
                    fut = pool.client().submit(_build_task, cfg, seed, where, key, key=key,
                                               pure=False)
                    self.futures[fut] = (i, seed, keys[seed])

    def collect(self):
        """The submitted builds' entries as they finish."""
        if not self.futures:
            return
        from distributed import as_completed
        results = as_completed(list(self.futures))
        while not results.is_empty():
            # Polled, not blocked on: a Ctrl-C that Python swallowed (in a __del__, say) still
            # ends the sweep.
            self.ctrl_c.check()
            if not results.has_ready():
                time.sleep(0.1)
                continue
            for fut in results.next_batch(block=False):
                i, seed, key = self.futures.pop(fut)
                try:
                    entry = fut.result()
                except Exception as e:             # noqa: BLE001 -- a lost worker, say
                    entry = _failure(seed, f"{type(e).__name__}: {e}", False)
                self.finish(i, seed, key, entry)


class _CtrlC:
    """SIGINT while a sweep runs (in the main thread), remembered: :meth:`check` raises
    ``KeyboardInterrupt`` once it came.

    With ``at_once`` (builds in this process) the signal also raises it where it arrives, to
    stop a build's wait (its tools, in this process group, get the signal too), unless
    :meth:`deferred` holds it back until a step is complete. Otherwise (builds on a cluster) it
    is only remembered: the sweep polls :meth:`check`, so the ``KeyboardInterrupt`` is never
    raised in a ``__del__`` or a callback, where Python would print it and carry on.
    """

    def __init__(self, at_once=True):
        self.hit, self.at_once, self._defer, self._old = False, at_once, 0, None

    def _handler(self, signum, frame):
        self.hit = True
        if self.at_once and not self._defer:
            raise KeyboardInterrupt

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
            self._old = None

    def check(self):
        if self.hit:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def deferred(self):
        self._defer += 1
        try:
            yield
        finally:
            self._defer -= 1
        if not self._defer:
            self.check()


class _Pool:
    """The Dask client of :func:`run_sweep` (a client, or a callable that makes one when first
    needed)."""

    def __init__(self, client):
        self._source, self._client = client, None
        self.local = client is None            # builds in this process

    def client(self):
        if self._client is None:
            source = self._source
            self._client = source if hasattr(source, "submit") else source()
        return self._client

    def cancel(self, futures):
        """Cancel ``futures`` and end the builds the workers are running for them."""
        client = self.client()
        with contextlib.suppress(Exception):
            client.cancel(futures, force=True)
        with contextlib.suppress(Exception):
            client.run(_abort_builds, [f.key for f in futures], wait=True)


def _dir(build_dir, config, digest, seed):
    if build_dir is None:
        return None
    where = config.board or config.device
    return str(Path(build_dir) / f"{config.block}-{where}-{(digest or 'nocache')[:8]}-s{seed}")


def make_row(config, seeds, results, error=None):
    """The row of one configuration from its builds (``results``: seed -> entry).

    Returns
    -------
    dict
        ``block``, ``device``, ``board``, ``params`` (the swept ones), ``all_params``,
        ``clock_mhz``, ``seeds`` (per seed: ``seed``, ``fmax_mhz``, ``meets_clock``,
        ``seconds``, ``cached``), and:

        - a built configuration: ``fits`` (true), ``meets_clock`` (every seed), ``fmax_mhz``
          (the median), ``fmax_mhz_all``, ``lcs`` (as placed), ``lcs_block`` (the block alone,
          the out-of-context wrapper subtracted), ``wrapper_lcs``, ``ffs``, ``dsps``, ``rams``,
          ``spram``, ``lcs_pct``, ``dsps_pct``, ``classic_abc_seeds``, ``throughput``
          (:func:`throughput` at the median Fmax);
        - a failed one: ``error``, ``fits`` (false when the tools say it does not fit, else
          ``None``), ``meets_clock`` ``None``;
        - one without any build (``cached_only``): ``pending``.
    """
    clock = config.clock_mhz
    row = {"block": config.block, "device": config.device, "board": config.board,
           "params": dict(config.swept), "all_params": dict(config.params), "clock_mhz": clock}
    runs = [results[s] for s in seeds if s in results]
    per_seed = []
    for r in runs:
        entry = {"seed": r.get("seed"), "fmax_mhz": r.get("fmax_mhz"),
                 "seconds": r.get("seconds"), "cached": r.get("cached", False)}
        if "error" in r:
            entry["error"] = r["error"]
        else:
            entry["meets_clock"] = _meets(r, clock)
        per_seed.append(entry)
    row["seeds"] = per_seed
    failed = [r["error"] for r in runs if "error" in r]
    if error is not None or failed:
        err = error if error is not None else failed[0]
        return {**row, "error": err, "fits": False if does_not_fit(err) else None,
                "meets_clock": None, "fmax_mhz": None, "throughput": None}
    if not runs:
        return {**row, "pending": True}
    fmaxes = [r["fmax_mhz"] for r in runs if r.get("fmax_mhz")]
    fmax = round(statistics.median(fmaxes), 2) if fmaxes else None
    dev = DEVICES[config.device]
    r0 = runs[0]
    meets = [e["meets_clock"] for e in per_seed]
    rates = {**RATES, "top": TOP_RATE}
    return {
        **row, "fits": True,
        "meets_clock": None if None in meets else all(meets),
        "fmax_mhz": fmax, "fmax_mhz_all": fmaxes,
        "lcs": r0["lcs"], "lcs_block": r0["lcs_block"], "wrapper_lcs": r0.get("wrapper_lcs", 0),
        "ffs": r0.get("ffs"), "dsps": r0["dsps"], "rams": r0["rams"], "spram": r0.get("spram"),
        "lcs_pct": round(100 * r0["lcs_block"] / dev["lcs"], 1),
        "dsps_pct": round(100 * r0["dsps"] / dev["dsps"], 1) if dev["dsps"] else None,
        # Seeds whose ECP5 synthesis fell back to the classic ABC mapping (abc9 failed).
        "classic_abc_seeds": [r["seed"] for r in runs if ABC9_FALLBACK in r.get("synth", "")],
        "throughput": throughput(config.block, config.device, config.params, fmax, rates),
    }


def _meets(result, clock_mhz):
    if "timing_met" in result:                 # a board build: every clock domain
        return bool(result["timing_met"])
    if clock_mhz is None or not result.get("fmax_mhz"):
        return None
    return result["fmax_mhz"] >= clock_mhz


def pareto(rows):
    """Mark the rows on the Pareto front of area (``lcs_block``) against throughput (results
    per second, or the median Fmax for a block without a rate): ``row["pareto"]`` is true for
    a built row that no other built row matches or beats on both with one strictly better.
    Returns ``rows``."""
    built = [r for r in rows if r.get("fits") and _speed(r) is not None]
    for r in rows:
        r["pareto"] = False
    for r in built:
        a, s = r["lcs_block"], _speed(r)
        r["pareto"] = not any(o["lcs_block"] <= a and _speed(o) >= s and
                              (o["lcs_block"] < a or _speed(o) > s) for o in built)
    return rows


def _speed(row):
    tp = row.get("throughput")
    return tp["per_second"] if tp else row.get("fmax_mhz")


# == Output =======================================================================================

def _value(v):
    return repr(v) if isinstance(v, str) else str(v)


def format_table(rows, seeds):
    """A plain-text table of the rows: the swept parameters, LC / LUT4 (and % of the device),
    DSP, RAM, SPRAM, Fmax per seed and median, throughput, fits, meets the clock, and ``*`` on
    the Pareto front. A failed row gives its error in place of the figures."""
    if not rows:
        return "(no configuration)"
    names = list(rows[0]["params"])
    clock = rows[0]["clock_mhz"]
    lc = "LUT4" if DEVICES[rows[0]["device"]]["family"] == "ecp5" else "LC"
    head = [*names, f"{lc} (% of device)", "DSP", "RAM", "SPRAM",
            f"Fmax MHz, seeds {' / '.join(map(str, seeds))}", "median", "throughput", "fits",
            f"meets {clock:g} MHz" if clock else "meets clock", "Pareto"]
    table, notes = [], {}
    for k, r in enumerate(rows):
        cells = [_value(r["params"][n]) for n in names]
        if r.get("pending"):
            notes[k] = "not built (the cache has no build of it)"
        elif "error" in r:
            msg = r["error"]
            if "ERROR:" in msg:
                msg = msg[msg.index("ERROR:") + 6:].split(" | ")[0].strip()
            notes[k] = f"{'does not fit' if r['fits'] is False else 'failed'}: {msg[:100]}"
        else:
            by_seed = {s["seed"]: s["fmax_mhz"] for s in r["seeds"]}
            tp = r["throughput"]
            cells += [f"{r['lcs_block']} ({r['lcs_pct']:g} %)", str(r["dsps"]), str(r["rams"]),
                      "—" if r["spram"] is None else str(r["spram"]),
                      " / ".join("—" if by_seed.get(s) is None else f"{by_seed[s]:g}"
                                 for s in seeds),
                      "—" if r["fmax_mhz"] is None else f"{r['fmax_mhz']:g}",
                      f"{tp['per_second'] / 1e6:.0f} M {tp['unit']}/s" if tp else "—", "yes",
                      {True: "yes", False: "no", None: "?"}[r["meets_clock"]],
                      "*" if r.get("pareto") else ""]
        table.append(cells)
    widths = [max([len(head[j])] + [len(c[j]) for c in table if len(c) > j])
              for j in range(len(head))]

    def line(cells):
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=False)).rstrip()

    out = [line(head)]
    for k, cells in enumerate(table):
        out.append(line(cells) + ("  " * bool(names) + notes[k] if k in notes else ""))
    return "\n".join(out)


def plot_pareto(rows, path, *, title):
    """Draw area (LC / LUT4 of the block) against throughput of the built rows to ``path``
    (any format Matplotlib writes, by its extension): filled markers meet the clock, hollow
    ones do not, the Pareto front is the line, its points labelled with their parameters.

    Raises
    ------
    ExploreError
        Matplotlib is not installed, or there is no built row to draw.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ExploreError("--plot needs Matplotlib: pip install 'lowbit[explore]'") from None
    built = [r for r in rows if r.get("fits") and _speed(r) is not None]
    if not built:
        raise ExploreError(f"nothing to plot in {path}: no configuration was built")
    tp = built[0].get("throughput")
    unit = f"M {tp['unit']}/s (results per cycle × median Fmax)" if tp else "median Fmax, MHz"
    scale = 1e6 if tp else 1
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for meets, face in ((True, "C0"), (False, "none"), (None, "C7")):
        pts = [r for r in built if r.get("meets_clock") is meets]
        if pts:
            label = {True: "meets the clock", False: "misses the clock",
                     None: "clock unknown"}[meets]
            ax.scatter([r["lcs_block"] for r in pts], [_speed(r) / scale for r in pts],
                       facecolors=face, edgecolors="C0", label=label, zorder=3)
    front = sorted((r for r in built if r.get("pareto")), key=lambda r: r["lcs_block"])
    ax.step([r["lcs_block"] for r in front], [_speed(r) / scale for r in front], where="post",
            color="C1", label="Pareto front", zorder=2)
    for r in front:
        text = ", ".join(f"{k}={_value(v)}" for k, v in r["params"].items())
        if text:
            ax.annotate(text, (r["lcs_block"], _speed(r) / scale), textcoords="offset points",
                        xytext=(4, 4), fontsize=7)
    family = DEVICES[built[0]["device"]]["family"]
    ax.set_xlabel(f"{'LUT4' if family == 'ecp5' else 'logic cells'} of the block")
    ax.set_ylabel(unit)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.savefig(path)


# == Command line =================================================================================

def add_parser(sub):
    """Add the ``explore`` command to the ``lowbit`` sub-parsers ``sub``."""
    from lowbit.hw.registry import BLOCKS
    p = sub.add_parser(
        "explore", help="sweep a block's or a board top's parameters: builds on a Dask cluster",
        description="Build every combination of the swept parameters once per placement seed "
                    "(out of context, or the board's top with --board), in parallel on Dask "
                    "distributed, through the run cache; print resources, Fmax, throughput, "
                    "fit and clock per configuration (docs/explore.md).")
    p.add_argument("block", choices=list(BLOCKS), metavar="BLOCK",
                   help=f"block to build ({', '.join(BLOCKS)}); top with --board: the board's "
                        "top with its pins")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--device", "-d", choices=list(DEVICES),
                       help="build out of context on this device (default: up5k)")
    where.add_argument("--board", "-b", choices=list(BOARDS),
                       help="the board: its top with pins and PLL for `top`, else out of "
                            "context on its device with its profile; its clock is the clock to "
                            "meet (default for top: icebreaker)")
    p.add_argument("--param", "-p", action="append", default=[], type=sweep_param,
                   metavar="K=V[,V...]",
                   help="a parameter and its values (Python literals; a tuple is one value), "
                        "once each; every combination is built")
    p.add_argument("--seeds", nargs="+", type=int_in(0, 2**31 - 1), default=[1, 2, 3],
                   metavar="N", help="placement seeds (default: 1 2 3)")
    run_on = p.add_mutually_exclusive_group()
    run_on.add_argument("--workers", "-j", type=int_in(1, 4096), metavar="N",
                        help="workers of the embedded Dask cluster (default: one per CPU)")
    run_on.add_argument("--scheduler", metavar="ADDRESS",
                        help="the Dask scheduler of a running cluster, tcp://HOST:PORT (start "
                             "it with `dask scheduler`, and `dask worker ADDRESS` on each "
                             "machine with lowbit installed)")
    p.add_argument("--json", metavar="FILE", help="write the rows as JSON")
    p.add_argument("--plot", metavar="FILE",
                   help="draw the Pareto front of area against throughput (PNG, SVG, PDF)")
    cache = p.add_mutually_exclusive_group()
    cache.add_argument("--cache", metavar="FILE",
                       help="run cache (default: docs/bench/runs.json of a checkout, the "
                            "benchmarks' cache; else ~/.cache/lowbit/runs.json)")
    cache.add_argument("--no-cache", action="store_true", help="neither read nor write a cache")
    p.add_argument("--rebuild", action="store_true",
                   help="build again what the cache has (and refresh its entries)")
    p.add_argument("--clock", type=real_in(0, 1000), metavar="MHZ",
                   help="the clock to meet, MHz (default: the board's, or that of the device's "
                        "first board)")
    p.add_argument("--freq", type=real_in(0, 1000), metavar="MHZ",
                   help="out of context: nextpnr's clock target (default: 100 MHz on iCE40, "
                        "200 on ECP5)")
    p.add_argument("--nextpnr", default="", metavar="OPTIONS",
                   help="out of context: extra nextpnr options, one string "
                        "(--nextpnr='--router router2'); part of the cache key")
    p.add_argument("--build-dir", metavar="DIR",
                   help="keep every build's files under DIR on the machine that builds "
                        "(default: temporary folders)")
    p.add_argument("--timeout", type=real_in(0, 3600), default=30, metavar="S",
                   help="seconds to wait for the scheduler and a worker (default: 30)")
    p.set_defaults(func=run)
    return p


def _say(msg):
    print(msg, file=sys.stderr, flush=True)


def _check_output(path, what):
    """A usage error now, not after the builds, when ``path``'s folder does not exist."""
    if path is not None and not Path(path).resolve().parent.is_dir():
        raise ExploreError(f"--{what}: no folder {Path(path).parent} for {path}")


def run(args):
    """The ``explore`` command; returns the exit status (2: bad input, 1: the sweep could not
    run, 130: interrupted)."""
    import shlex
    try:
        if args.seeds and len(set(args.seeds)) != len(args.seeds):
            raise ExploreError("a seed is given twice in --seeds")
        board = args.board
        device = args.device
        if board is None and device is None:
            if args.block == "top":
                from .profiles import DEFAULT_BOARD
                board = DEFAULT_BOARD
            else:
                device = "up5k"
        try:
            pnr_args = tuple(shlex.split(args.nextpnr))
        except ValueError as e:
            raise ExploreError(f"--nextpnr: {e}") from None
        sweep = configs(args.block, args.param, device=device, board=board,
                        freq_mhz=args.freq, pnr_args=pnr_args, clock_mhz=args.clock)
        _check_output(args.json, "json")
        _check_output(args.plot, "plot")
        if args.plot is not None:
            try:
                import matplotlib  # noqa: F401
            except ImportError:
                raise ExploreError("--plot needs Matplotlib: pip install 'lowbit[explore]'"
                                   ) from None
    except ExploreError as e:
        _say(f"lowbit explore: error: {e}")
        return 2
    cache = None
    if not args.no_cache:
        path = Path(args.cache) if args.cache else default_cache_path()
        try:
            cache = RunCache(path, use=not args.rebuild)
        except (OSError, ValueError) as e:
            _say(f"lowbit explore: error: {e}")
            return 2
    try:
        rows, stats = _explore(args, sweep, cache)
    except SweepInterrupted as e:
        where = (f"; the finished builds are kept in the run cache {cache.path}, so the same "
                 "command goes on from there") if cache else ""
        _say(f"lowbit explore: {e}{where}")
        return 130
    except ExploreError as e:
        _say(f"lowbit explore: error: {e}")
        return 1
    pareto(rows)
    print(format_table(rows, args.seeds))
    cfg = sweep[0]
    where = f"board {cfg.board}" if cfg.board else cfg.device
    title = f"{args.block} on {where}, seeds {' '.join(map(str, args.seeds))}"
    if args.json:
        Path(args.json).write_text(json.dumps({
            "command": "lowbit " + " ".join(shlex.quote(a) for a in getattr(args, "argv", [])),
            "block": args.block, "device": cfg.device, "board": cfg.board,
            "clock_mhz": cfg.clock_mhz, "seeds": args.seeds, **stats, "rows": rows},
            indent=1, default=str) + "\n")
        _say(f"lowbit explore: wrote {args.json}")
    if args.plot:
        try:
            plot_pareto(rows, args.plot, title=f"{title}: area against throughput")
            _say(f"lowbit explore: wrote {args.plot}")
        except ExploreError as e:
            _say(f"lowbit explore: {e}")
    return 0


def _explore(args, sweep, cache):
    """Run the sweep with a progress bar; ``(rows, stats)``."""
    from .demo import progress_bar
    total = len(sweep) * len(args.seeds)
    t0 = time.monotonic()
    stats = {"builds": 0, "cached": 0, "failed": 0}
    with contextlib.ExitStack() as stack:
        bar = stack.enter_context(progress_bar(total, unit="build", desc="builds"))

        def say(msg):
            if bar.disable:
                _say(msg)
            else:
                bar.write(msg, file=sys.stderr)

        def on_build(config, entry):
            stats["cached" if entry.get("cached") else "builds"] += 1
            seed = entry.get("seed")
            if "error" in entry:
                stats["failed"] += 1
                what = "does not fit" if does_not_fit(entry["error"]) else "failed"
                msg = f"{what}: {entry['error'].splitlines()[0][:120]}"
            else:
                msg = f"{entry['lcs_block']} LC, {entry['fmax_mhz']} MHz"
            when = "cached" if entry.get("cached") else \
                f"{entry['seconds']:g} s" if entry.get("seconds") else None
            say(f"  {config.label} seed {seed}: {msg}{f' ({when})' if when else ''}")
            bar.update(1)

        def client():
            return stack.enter_context(dask_client(args.workers, args.scheduler,
                                                   timeout=args.timeout, say=say))

        rows = run_sweep(sweep, args.seeds, cache=cache, client=client,
                         build_dir=args.build_dir, on_build=on_build)
    stats["seconds"] = round(time.monotonic() - t0, 1)
    stats["workers"] = (args.workers or default_workers()) if args.scheduler is None else None
    stats["scheduler"] = args.scheduler
    _say(f"lowbit explore: {len(sweep)} configuration{'s' * (len(sweep) != 1)}, "
         f"{stats['builds']} built, {stats['cached']} from the cache, in {stats['seconds']} s")
    return rows, stats
