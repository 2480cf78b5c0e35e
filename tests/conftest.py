import datetime
import gc
import importlib.util
import os
import sys
import zlib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Bytecode: with PYTHONDONTWRITEBYTECODE set (as on the project's machines), every process of
# the run (each pytest-xdist worker, each `lowbit` and cocotb subprocess) would compile lowbit
# and rewrite the tests' asserts anew, about 7 CPU-s a worker. The suite writes the bytecode of
# the checkout's own files (site-packages have theirs from pip) into `__pycache__` folders,
# which .gitignore keeps out of the repository, and the processes it starts do too.
if sys.dont_write_bytecode:
    sys.dont_write_bytecode = False
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# The tests import lowbit.hw, lowbit.sim and lowbit.boards. `pip install -e .` maps them onto
# this checkout; without an install, the checkout's root is loaded as the package `lowbit` here
# (the same mapping as pyproject.toml's package-dir), so a bare clone still runs its tests.
if importlib.util.find_spec("lowbit") is None:
    _spec = importlib.util.spec_from_file_location(
        "lowbit", os.path.join(ROOT, "__init__.py"), submodule_search_locations=[ROOT])
    _lowbit = importlib.util.module_from_spec(_spec)
    sys.modules["lowbit"] = _lowbit
    _spec.loader.exec_module(_lowbit)


# -- missing tools: skip here, fail in CI ------------------------------------------------------

def in_ci():
    """True under ``CI=true`` (``.ci/run``), where every tool the tests use is installed."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1")


def missing_tool(reason):
    """The one rule for a test whose external tool (Icarus, SymbiYosys, the SMT solver) is
    missing: ``reason`` is ``None`` when the tools are there, else why not. Skips the test,
    or fails it under ``CI=true``, where a skip would hide a broken installation (and every
    regression the skipped test would have caught)."""
    if reason is None:
        return
    if in_ci():
        pytest.fail(f"{reason} (CI=true: a missing tool fails the run instead of skipping it)",
                    pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def require_tool():
    """:func:`missing_tool` for a test body: ``require_tool(module.missing_tools())``."""
    return missing_tool


#: The cyclic garbage collector's thresholds in the test processes: Amaranth's elaboration and
#: its simulator's compilation make hundreds of thousands of short-lived objects per design, and
#: with the default first threshold (700) the collector ran so often that it cost about 7 % of
#: the RTL test files' CPU time (tests/test_bfp_rtl.py and test_grand_rtl.py: 45.7 CPU-s with
#: the defaults, 42.6 with these; the peak memory was the same). It still collects.
GC_THRESHOLDS = (200_000, 50, 1000)


@pytest.fixture
def reuse_finished_build(monkeypatch):
    """Let ``build_board(DEFAULT_BOARD)`` take the toolchain's products from a finished run of
    the same build plan in ``build/<board>`` (where ``lowbit build`` writes them: the README's
    first command and CI run it before the tests) instead of running yosys and nextpnr again
    on identical inputs (``tests/buildreuse.py``). Yields the list of directories reused."""
    from buildreuse import reuse_builds

    from lowbit.boards.profiles import DEFAULT_BOARD
    yield reuse_builds(monkeypatch, DEFAULT_BOARD)


def pytest_configure(config):
    gc.set_threshold(*GC_THRESHOLDS)
    config.addinivalue_line(
        "markers", "needs_tools(reason): reason is None when the external tools are there; "
                   "else the test skips, or fails under CI=true (tests/conftest.py)")
    config.addinivalue_line(
        "markers", "rotate: of this test's heavy cases, one a day (rotation_day()) is not heavy, "
                   "so -m 'slow and not heavy' runs it (tests/conftest.py)")


def pytest_runtest_setup(item):
    for mark in item.iter_markers("needs_tools"):
        missing_tool(mark.args[0] if mark.args else mark.kwargs.get("reason"))


@pytest.fixture(autouse=True, scope="module")
def _module_stream_simulators():
    """The blocks and stream benches that tests/streams.py keeps live as long as the test
    module: a worker of pytest-xdist runs many modules, and its memory would hold them all."""
    yield
    streams = sys.modules.get("streams")
    if streams is not None:
        streams.clear()


# -- reproducible random inputs ----------------------------------------------------------------

def stable_seed(*key):
    """A seed for ``key`` that is the same in every process: ``zlib.crc32`` of its ``repr``
    (``hash()`` of a string is salted per process, so a failure could not be reproduced from its
    test id). Printed, so a failing test's captured output names it."""
    seed = zlib.crc32(repr(key).encode())
    print(f"random seed {seed} = zlib.crc32(repr({key!r}).encode())")
    return seed


@pytest.fixture(name="stable_seed")
def _stable_seed():
    """:func:`stable_seed` for a test body: ``np.random.default_rng(stable_seed(a, b))``."""
    return stable_seed


# -- the daily rotation of heavy cases ---------------------------------------------------------

#: Set to a day number to run that day's rotating cases (the run prints its day).
ROTATION_ENV = "LOWBIT_ROTATION"


def rotation_day():
    """The rotation's day number: ``$LOWBIT_ROTATION`` if set, else today's proleptic
    Gregorian ordinal (UTC)."""
    value = os.environ.get(ROTATION_ENV, "").strip()
    if value:
        return int(value)
    return datetime.datetime.now(datetime.UTC).date().toordinal()


def rotate(items, day):
    """Of every test function marked ``rotate``, its heavy case number ``day % count`` (in
    collection order) loses ``heavy``; returns those items. The choice depends only on the day
    and the test's parametrization, not on the selection."""
    groups = {}
    for item in items:
        if item.get_closest_marker("rotate") and item.get_closest_marker("heavy"):
            groups.setdefault((str(item.path), item.originalname), []).append(item)
    chosen = []
    for group in groups.values():
        item = group[day % len(group)]
        item.own_markers = [m for m in item.own_markers if m.name != "heavy"]
        chosen.append(item)
    return chosen


_ROTATED = pytest.StashKey[list]()


#: Test files that run first, longest first: under pytest-xdist (``-n``, ``--dist loadfile``,
#: ``--no-loadscope-reorder``) a worker takes the next file in this order when it is free, so a
#: long file collected last (the gate-level test, one place and route and minutes of Icarus)
#: cannot leave the other workers idle at the end. The slow run's files by their CPU time in
#: session 14 (``--durations``: gate-level 410 s in one test, the boards' builds ~360 s,
#: quantiser RTL ~420, sequencer ~340, driver ~230, formal ~170, cocotb ~150), then the quick
#: suite's other long files of session 18 (``--durations=0`` under ``-n auto``, seconds:
#: cocotb 29, sequencer 29, driver 18, explore 18, BFP RTL 17, formal 16, quantiser RTL 15,
#: demo 15, top 13); the rest keep their order.
LONG_FIRST = ("test_gatelevel.py", "test_boards.py", "test_quantiser_rtl.py", "test_sequencer.py",
              "test_driver.py", "test_formal.py", "test_cocotb.py", "test_explore.py",
              "test_bfp_rtl.py", "test_demo.py", "test_top.py")


def long_first(items):
    """``items`` with the files of :data:`LONG_FIRST` first, in its order (a stable sort: the
    tests of a file keep theirs)."""
    rank = {name: k for k, name in enumerate(LONG_FIRST)}
    return sorted(items, key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # Before the -m selection (tryfirst), so a rotated case counts as not heavy there.
    day = rotation_day()
    config.stash[_ROTATED] = [(day, item) for item in rotate(items, day)]
    items[:] = long_first(items)


def pytest_report_header(config):
    # Printed by the main process also under pytest-xdist (-n), whose workers collect and
    # rotate silently; the rotated cases are then those of this day.
    day = rotation_day()
    return f"rotation day {day} (set {ROTATION_ENV}={day} to repeat the day's rotating cases)"


def pytest_collection_finish(session):
    selected = set(session.items)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    for day, item in session.config.stash.get(_ROTATED, []):
        if item in selected and reporter is not None:
            reporter.write_line(f"rotation day {day} (set {ROTATION_ENV}={day} to repeat): "
                                f"{item.nodeid} runs as not heavy")
