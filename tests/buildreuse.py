"""Test-side reuse of a finished board build (``lowbit build``'s, in ``build/<board>``).

The README's first command and CI build the default board before the tests. A test that needs
the toolchain's products of the identical build plan (:func:`reuse_builds`: the default board's
place-and-route test, the gate-level test) copies them from there instead of running Yosys and
nextpnr again on identical inputs; any difference, or no finished run, builds from scratch.
"""

import importlib.metadata
import shutil
from pathlib import Path

from amaranth.build.run import BuildPlan, LocalBuildProducts

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["toolchain_installed_ns", "finished_run_of", "reuse_builds", "describe"]


def toolchain_installed_ns():
    """When the YoWASP tools (yosys, nextpnr, icepack/ecppack, runtime) were last installed."""
    times = [0]
    for dist in importlib.metadata.distributions():
        if (dist.metadata["Name"] or "").lower().startswith("yowasp"):
            times += [dist.locate_file(f).stat().st_mtime_ns for f in dist.files or ()
                      if f.name == "METADATA"]
    return max(times)


def finished_run_of(plan, build_dir):
    """Whether ``build_dir`` holds a finished toolchain run of exactly ``plan``: every file of
    the plan (RTLIL, constraints, the build script with the seed and nextpnr's options) is
    there byte for byte, and ``report.json``, which :func:`lowbit.boards.build.build_board`
    writes only after the toolchain succeeded, is newer than all of them and than the installed
    YoWASP tools."""
    report = build_dir / "report.json"
    if not report.is_file():
        return False
    done = report.stat().st_mtime_ns
    for name, content in plan.files.items():
        path = build_dir / name
        data = content.encode("utf-8") if isinstance(content, str) else content
        if not path.is_file() or path.stat().st_mtime_ns > done or path.read_bytes() != data:
            return False
    return toolchain_installed_ns() <= done


def reuse_builds(monkeypatch, board):
    """Let every ``build_board(board)`` in this test take the toolchain's products from a
    finished run of the same build plan in ``build/<board>`` (of the working directory or of
    the checkout) instead of running the toolchain. Everything after the toolchain (reading
    nextpnr's report, the resource and timing report, ``report.json``) still runs. Returns the
    list of directories reused (appended to as builds reuse one)."""
    execute_local = BuildPlan.execute_local
    reused = []

    def execute_or_reuse(plan, root="build", **kwargs):
        for cached in dict.fromkeys(p.resolve() for p in (Path("build") / board,
                                                          ROOT / "build" / board)):
            if cached != Path(root).resolve() and finished_run_of(plan, cached):
                shutil.copytree(cached, root, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("report.json"))
                reused.append(cached)
                return LocalBuildProducts(str(root))
        return execute_local(plan, root, **kwargs)

    monkeypatch.setattr(BuildPlan, "execute_local", execute_or_reuse)
    return reused


def describe(reused):
    """Where a test's toolchain products came from, for its log: ``reused`` is
    :func:`reuse_builds`' list."""
    return f"reused from {reused[0]}" if reused else "built here"
