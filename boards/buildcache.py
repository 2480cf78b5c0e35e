"""The run cache of finished builds, shared by ``lowbit explore`` and the benchmark scripts.

A build is keyed by what decides its result: the digest of its netlist, the device (or, for a
board build, the board), the placement seed and the options given to nextpnr. The same key means
the same build, whichever program asks for it: a configuration that ``lowbit explore`` has built
is a cache hit for ``scripts/bench.py --resume`` and the other way round.

- :func:`netlist_digest`: SHA-256 of a block's RTLIL (wrapped as
  :func:`lowbit.boards.toolchain.implement` wraps it, ``src`` attributes stripped, so moving code
  keeps the digest).
- :func:`netlist_key`: the key of one out-of-context build (:func:`~lowbit.boards.toolchain.
  implement`).
- :func:`board_digest`, :func:`board_key`: the same for a board build
  (:func:`lowbit.boards.build.build_board`: the top with the board's pins, PLL and constraints).
- :class:`RunCache`: the cache file (JSON, one entry per key), written after every build and
  merged under a lock, so that several programs can add to one file at the same time.
"""

import contextlib
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path

__all__ = ["netlist_digest", "netlist_key", "board_digest", "board_key", "RunCache",
           "default_cache_path"]

_SRC = re.compile(r"^\s*attribute \\src .*\n", flags=re.M)


def netlist_digest(component):
    """SHA-256 (32 hex digits) of the wrapped block's RTLIL without ``src`` attributes: the
    part of :func:`netlist_key` that costs an elaboration, the same for every seed.

    Parameters
    ----------
    component : amaranth.lib.wiring.Component
        The block, as it is given to :func:`lowbit.boards.toolchain.implement`.

    Returns
    -------
    str
    """
    from amaranth.back import rtlil

    from .toolchain import OOCWrapper
    text = rtlil.convert(OOCWrapper(component), name="top")
    return hashlib.sha256(_SRC.sub("", text).encode()).hexdigest()[:32]


def netlist_key(component, device, seed, dsp, freq_mhz=None, pnr_args=(), *, digest=None):
    """Cache key of one out-of-context build.

    Parameters
    ----------
    component : amaranth.lib.wiring.Component
        The block (elaborated here unless ``digest`` is given).
    device : str
        A device of :data:`lowbit.boards.toolchain.DEVICES`.
    seed : int
        The placement seed.
    dsp : bool
        Whether synthesis may map multipliers to DSP blocks.
    freq_mhz : float, optional
        The clock target given to nextpnr; part of the key only when it is not ``implement``'s
        default (``None``).
    pnr_args : sequence of str
        Extra nextpnr options; part of the key when there are any.
    digest : str, optional
        :func:`netlist_digest` of ``component``, if the caller has it already.

    Returns
    -------
    str
        ``DIGEST:DEVICE:SEED:DSP[:FREQMHz][:PNR ARGS]``.
    """
    if digest is None:
        digest = netlist_digest(component)
    key = f"{digest}:{device}:{seed}:{int(dsp)}"
    if freq_mhz is not None:
        key += f":{freq_mhz}MHz"
    if pnr_args:
        key += ":" + " ".join(pnr_args)
    return key


def board_digest(board, top=None, *, routed_netlist=None):
    """SHA-256 (32 hex digits) of a board build's plan, as :func:`lowbit.boards.build.build_board`
    would run it, without ``src`` attributes and without the placement seed.

    The plan holds the whole design (the top, its pins, the PLL), its constraint files, the Yosys
    script and the nextpnr command line, so any change to one of them is another digest.

    Parameters
    ----------
    board : str
        A board of :data:`lowbit.boards.profiles.BOARDS`.
    top : dict, optional
        Top parameters that replace the profile's (as ``build_board(top=...)``).
    routed_netlist : bool or None
        The plan of a build that also writes nextpnr's routed netlist (the same bitstream; a
        different nextpnr command line, so another digest); ``None`` as ``build_board``'s
        default (on the iCE40 boards).

    Returns
    -------
    str
    """
    from .build import board_plan
    return _plan_digest(board_plan(board, seed=0, top=top, routed_netlist=routed_netlist).files)


def _plan_digest(files):
    from .build import BITSTREAM_NAME
    h = hashlib.sha256()
    for name in sorted(files):
        if name.endswith((".bat", ".debug.v")) or name == f"build_{BITSTREAM_NAME}.json":
            continue                         # another OS's script, a debug aid, the file list
        text = files[name]
        text = text if isinstance(text, str) else text.decode("latin-1")
        text = re.sub(r"--seed \d+", "--seed N", _SRC.sub("", text))
        h.update(f"{name}\0{text}\0".encode())
    return h.hexdigest()[:32]


def build_dir_digest(board, build_dir, top=None):
    """:func:`board_digest` of the plan files a finished build directory of ``board`` holds
    (its ``lowbit build`` inputs, read back), or None where one is missing: equal to
    :func:`board_digest` exactly when the directory was built from the same design, pins,
    constraints and tool options."""
    from pathlib import Path

    from .build import board_plan
    files = {}
    for name in board_plan(board, seed=0, top=top).files:
        path = Path(build_dir) / name
        if not path.is_file():
            return None
        files[name] = path.read_bytes()
    return _plan_digest(files)


def board_key(board, seed, *, digest):
    """Cache key of one board build: ``DIGEST:board:BOARD:SEED`` (``digest``:
    :func:`board_digest`)."""
    return f"{digest}:board:{board}:{seed}"


def default_cache_path():
    """The run cache ``lowbit explore`` uses unless told otherwise.

    In a checkout (an editable install), the benchmarks' ``docs/bench/runs.json`` beside the
    package, so that the benchmarks and ``lowbit explore`` share their builds; elsewhere
    ``$XDG_CACHE_HOME/lowbit/runs.json`` (``~/.cache/lowbit/runs.json``).
    """
    root = Path(__file__).resolve().parent.parent
    bench = root / "docs" / "bench"
    if bench.is_dir() and (root / "pyproject.toml").is_file():
        return bench / "runs.json"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "lowbit" / "runs.json"


class RunCache:
    """Finished builds by key (:func:`netlist_key`, :func:`board_key`), in a JSON file.

    Each :meth:`put` is written at once, so an interrupted run keeps what it finished. The file
    is re-read and merged under a lock (``fcntl.flock`` on a lock file in the temporary folder,
    where there is ``fcntl``) before it is written, so programs writing one file at the same
    time keep each other's entries.

    Parameters
    ----------
    path : str or Path
        The cache file (created on the first :meth:`put`).
    use : bool
        Whether :meth:`get` answers from the cache (``False``: every build runs again, and
        refreshes its entry).
    """

    def __init__(self, path, use=True):
        self.path, self.use = Path(path), use
        self.runs = self._read()

    def _read(self):
        try:
            runs = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except ValueError as e:
            raise ValueError(f"run cache {self.path} is not valid JSON ({e}); move it away "
                             "or pass another cache file") from None
        if not isinstance(runs, dict):
            raise ValueError(f"run cache {self.path} is not a JSON object of builds")
        return runs

    def get(self, key):
        """The entry of ``key``, or ``None`` (always ``None`` when not :attr:`use`)."""
        return self.runs.get(key) if self.use else None

    def put(self, key, result):
        """Store ``result`` under ``key`` and write the file (merged with what others wrote)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._locked():
            self.runs = {**self._read(), key: result}
            tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self.runs, indent=1, sort_keys=True) + "\n")
            tmp.replace(self.path)

    @contextlib.contextmanager
    def _locked(self):
        try:
            import fcntl
        except ImportError:                  # not POSIX: no lock, last writer wins
            yield
            return
        # The lock file is outside the cache's folder (a checkout's docs/bench stays clean).
        tag = hashlib.sha256(str(self.path.resolve()).encode()).hexdigest()[:16]
        with open(Path(tempfile.gettempdir()) / f"lowbit-runcache-{tag}.lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
