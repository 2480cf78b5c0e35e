"""The suite's rules in tests/conftest.py: a missing tool skips here and fails under ``CI=true``;
random inputs are seeded reproducibly; heavy cases of a ``rotate`` test take turns in CI."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parent / "conftest.py"


def _child_env(**extra):
    """The environment of a child pytest: this one's, plus ``extra``, without the installed
    plugins' automatic loading (hypothesis alone takes a second to import in every child; the
    rules under test are the conftest's, which needs none of them) and without
    ``PYTHONWARNINGS`` (under ``PYTHONWARNINGS=error`` the child's marks, registered in the
    checkout's pyproject.toml and not in its temporary directory, would stop its collection)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    return dict(env, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", **extra)

SAMPLE = '''
import pytest

@pytest.mark.needs_tools("frobnicator is not on PATH")
def test_marked():
    pass

def test_body(require_tool):
    require_tool("widget is not on PATH")

@pytest.mark.needs_tools(None)
def test_present(require_tool):
    require_tool(None)
'''


def test_require_tool_skips_here_and_fails_in_ci(require_tool, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    require_tool(None)                                   # the tool is there: nothing happens
    with pytest.raises(pytest.skip.Exception, match="^iverilog is not on PATH$"):
        require_tool("iverilog is not on PATH")
    monkeypatch.setenv("CI", "true")
    require_tool(None)
    with pytest.raises(pytest.fail.Exception, match=r"iverilog is not on PATH \(CI=true: a "
                                                    r"missing tool fails the run"):
        require_tool("iverilog is not on PATH")


def _outcomes(tmp_path, ci):
    """Run SAMPLE under the suite's conftest in a child pytest; ``{test name: outcome}``."""
    work = tmp_path / ("ci" if ci else "local")
    work.mkdir()
    shutil.copy(CONFTEST, work / "conftest.py")
    (work / "test_sample.py").write_text(SAMPLE)
    env = {k: v for k, v in _child_env().items() if k != "CI"}
    if ci:
        env["CI"] = "true"
    r = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider",
                        str(work)], capture_output=True, text=True, cwd=work, env=env,
                       timeout=120)
    found = dict(re.findall(r"::(test_\w+) (PASSED|SKIPPED|FAILED|ERROR)", r.stdout))
    return found, r


def test_marker_and_fixture_in_a_run(tmp_path):
    """The ``needs_tools`` marker and the ``require_tool`` fixture in a real pytest run: both
    skip without CI; under ``CI=true`` the marked test errors in setup, the other fails, and the
    run's exit status is non-zero. A present tool runs the test in both."""
    local, r = _outcomes(tmp_path, ci=False)
    assert local == {"test_marked": "SKIPPED", "test_body": "SKIPPED",
                     "test_present": "PASSED"}, r.stdout
    assert r.returncode == 0
    ci, r = _outcomes(tmp_path, ci=True)
    assert ci == {"test_marked": "ERROR", "test_body": "FAILED", "test_present": "PASSED"}, \
        r.stdout
    assert r.returncode == 1 and "frobnicator is not on PATH (CI=true" in r.stdout


def test_stable_seed_is_the_same_in_every_process(stable_seed, capsys):
    """Not ``hash()``, which Python salts per process for strings: the seed of a test id is a
    constant, and it is printed (a failing test's captured output shows it)."""
    assert stable_seed("gauss", "nearest") == 1317255236
    assert stable_seed(True, "max", "stochastic") != stable_seed(False, "max", "stochastic")
    out = capsys.readouterr().out
    assert "random seed 1317255236 = zlib.crc32(repr(('gauss', 'nearest')).encode())" in out


ROTATING = '''
import pytest

@pytest.mark.slow
@pytest.mark.rotate
@pytest.mark.parametrize("case", ["cheap", *(pytest.param(c, marks=pytest.mark.heavy)
                                            for c in ("h0", "h1", "h2"))])
def test_sweep(case):
    pass

@pytest.mark.slow
@pytest.mark.parametrize("case", ["cheap", pytest.param("h0", marks=pytest.mark.heavy)])
def test_fixed(case):
    pass
'''


@pytest.mark.parametrize("day, heavy", [(6, "h0"), (7, "h1")])
def test_rotation_runs_one_heavy_case_a_day(tmp_path, day, heavy):
    """``-m 'slow and not heavy'`` with the rotation: the cheap cases, and of a ``rotate`` test
    the heavy case ``day % 3`` (named in the output with the day that repeats it); a test
    without ``rotate`` keeps its heavy cases out."""
    work = tmp_path / "rot"
    work.mkdir()
    shutil.copy(CONFTEST, work / "conftest.py")
    (work / "test_rot.py").write_text(ROTATING)
    env = _child_env(LOWBIT_ROTATION=str(day))
    r = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-m",
                        "slow and not heavy", str(work)], capture_output=True, text=True,
                       cwd=work, env=env, timeout=120)
    ran = re.findall(r"::(test_\w+\[\w+\]) PASSED", r.stdout)
    assert sorted(ran) == sorted(["test_sweep[cheap]", f"test_sweep[{heavy}]",
                                  "test_fixed[cheap]"]), r.stdout
    assert f"rotation day {day} (set LOWBIT_ROTATION={day} to repeat): " \
           f"test_rot.py::test_sweep[{heavy}] runs as not heavy" in r.stdout


def test_long_files_run_first(tmp_path):
    """The files of ``LONG_FIRST`` run before the others, in its order, each file's tests in
    their own order; what is selected does not change."""
    work = tmp_path / "order"
    work.mkdir()
    shutil.copy(CONFTEST, work / "conftest.py")
    for name in ("test_a.py", "test_boards.py", "test_gatelevel.py", "test_z.py"):
        (work / name).write_text("def test_one():\n    pass\n\n\ndef test_two():\n    pass\n")
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                        "no:cacheprovider", str(work)], capture_output=True, text=True, cwd=work,
                       env=_child_env(), timeout=120)
    ids = [line for line in r.stdout.splitlines() if "::" in line]
    assert ids == [f"{f}::{t}" for f in ("test_gatelevel.py", "test_boards.py", "test_a.py",
                                         "test_z.py") for t in ("test_one", "test_two")], r.stdout
