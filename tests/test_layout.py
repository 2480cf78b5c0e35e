"""Rules of the layout (DESIGN §1): one import namespace ``lowbit``, golden models never import
Amaranth, gateware never imports boards, every module lints clean."""

import ast
import os
import pkgutil
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import lowbit
import lowbit.hw
import lowbit.sim
import lowbit.sim.rtl

ROOT = Path(__file__).resolve().parent.parent
# lowbit.sim.rtl: the simulation plumbing that runs the gateware; every other module of lowbit.sim
# (subpackages included) is a golden model.
SIM_HELPERS = {"harness", "transport", "cxxrtl"}
GOLDEN = sorted(m.name.removeprefix("lowbit.sim.")
                for m in pkgutil.walk_packages(lowbit.sim.__path__, "lowbit.sim.")
                if m.name != "lowbit.sim.rtl" and not m.name.startswith("lowbit.sim.rtl."))
# Every gateware module, subpackages included, as a path relative to hw/.
GATEWARE = sorted(str(p.relative_to(ROOT / "hw")) for p in (ROOT / "hw").rglob("*.py"))


def _outside(code, tmp_path):
    """Run ``python -c code`` in an empty folder, with no path into the checkout."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def test_namespace_maps_the_top_level_folders():
    assert Path(lowbit.hw.__path__[0]).resolve() == ROOT / "hw"
    assert Path(lowbit.sim.__path__[0]).resolve() == ROOT / "sim"
    assert isinstance(lowbit.__version__, str) and lowbit.__version__.count(".") >= 2


def test_from_lowbit_import_accelerator():
    from lowbit import Accelerator
    from lowbit.boards.driver import Accelerator as driver_accelerator
    assert Accelerator is driver_accelerator
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        lowbit.nonexistent  # noqa: B018


@pytest.mark.parametrize("name", ["hw", "sim", "boards"])
def test_bare_top_level_names_are_not_installed(name, tmp_path):
    r = _outside(f"import {name}", tmp_path)
    assert r.returncode != 0 and "ModuleNotFoundError" in r.stderr, r.stdout + r.stderr
    r = _outside(f"import lowbit.{name}; print(lowbit.{name}.__name__)", tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == f"lowbit.{name}", r.stderr


def test_lowbit_version_on_the_command_line():
    r = subprocess.run([sys.executable, "-m", "lowbit.boards.cli", "--version"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    assert r.stdout.strip() == f"lowbit {lowbit.__version__}"


def test_wheel_holds_only_lowbit(tmp_path):
    # Built from a copy: setuptools writes build/ beside the sources it builds.
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "__pycache__", ".*_cache"))
    # Without PYTHONWARNINGS: under PYTHONWARNINGS=error pip stops at its own deprecations
    # (pkg_resources in the build backend's environment), which are not what this tests.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
                        "-w", str(tmp_path), str(src)], capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = tmp_path.glob("lowbit-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"lowbit"}
    for package in ("lowbit/__init__.py", "lowbit/hw/top.py", "lowbit/sim/bfp.py",
                    "lowbit/sim/rtl/transport.py", "lowbit/boards/driver.py"):
        assert package in names
    assert not any(n.startswith(("lowbit/tests/", "lowbit/scripts/", "lowbit/docs/"))
                   for n in names)


def test_sim_rtl_holds_exactly_the_simulation_plumbing():
    assert Path(lowbit.sim.rtl.__path__[0]).resolve() == ROOT / "sim" / "rtl"
    assert {m.name for m in pkgutil.iter_modules(lowbit.sim.rtl.__path__)} == SIM_HELPERS
    assert not SIM_HELPERS & {m.name for m in pkgutil.iter_modules(lowbit.sim.__path__)}
    assert "link" in GOLDEN and "program" in GOLDEN and "rtl" not in GOLDEN


#: Imports each module named on the command line in a child forked from a fresh interpreter
#: that has loaded numpy (neither Amaranth nor lowbit): one interpreter and one numpy import for
#: all the golden models. Prints ``module <modules of Amaranth, lowbit.hw or lowbit.boards
#: loaded>`` for each, or ``module ! <error>``.
_IMPORT_EACH = """
import os, sys
import numpy

def bad():
    return sorted(m for m in sys.modules if m.split('.')[0] == 'amaranth'
                  or m.startswith(('lowbit.hw', 'lowbit.boards')))

assert not bad(), bad()
for name in sys.argv[1:]:
    sys.stdout.flush()
    if os.fork() == 0:
        try:
            __import__('lowbit.sim.' + name)
            print(name, *bad())
        except BaseException as e:
            print(name, '!', repr(e))
        sys.stdout.flush()
        os._exit(0)
    os.wait()
"""


@pytest.fixture(scope="module")
def golden_imports():
    """``{module: what importing lowbit.sim.<module> loads of Amaranth, lowbit.hw and
    lowbit.boards}`` for every golden model, each imported in a fresh process."""
    r = subprocess.run([sys.executable, "-c", _IMPORT_EACH, *GOLDEN], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [line.split() for line in r.stdout.splitlines()]
    return {line[0]: line[1:] for line in lines}


@pytest.mark.parametrize("module", GOLDEN)
def test_golden_model_does_not_import_amaranth(golden_imports, module):
    assert golden_imports[module] == [], f"lowbit.sim.{module} imports {golden_imports[module]}"


@pytest.mark.parametrize("module", GATEWARE)
def test_gateware_does_not_import_boards(module):
    tree = ast.parse((ROOT / "hw" / module).read_text())
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            # A relative import that climbs out of lowbit.hw reaches a sibling of it.
            depth = len(Path(module).parts)
            names = ["lowbit." + (node.module or "")] if node.level > depth else []
        for name in names:
            assert not name.startswith("lowbit.boards"), f"lowbit.hw.{module} imports {name}"
        if isinstance(node, ast.Attribute) and node.attr == "environ":
            pytest.fail(f"lowbit.hw.{module} reads the environment; gateware takes parameters")


def test_no_module_imports_a_bare_top_level_name():
    for path in sorted(ROOT.glob("[hsbt]*/**/*.py")) + sorted(ROOT.glob("scripts/*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in ("hw", "sim", "boards"), (
                    f"{path.relative_to(ROOT)}:{node.lineno} imports {name}, not lowbit.{name}")


# ---- Import graph --------------------------------------------------------------------------
# The folders whose modules must not import each other in a loop, with the name each module
# is imported by (scripts/ is a folder of top-level modules: a script imports ``bench``).
LAYERED = {"hw": "lowbit.hw", "sim": "lowbit.sim", "boards": "lowbit.boards", "scripts": ""}


def _module_files():
    """``{module name: (path, is package)}`` of every module of :data:`LAYERED`."""
    out = {}
    for folder, package in LAYERED.items():
        recursive = bool(package)
        paths = (ROOT / folder).rglob("*.py") if recursive else (ROOT / folder).glob("*.py")
        for path in paths:
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            name = ".".join(([package] if package else []) + parts)
            out[name] = (path, is_package)
    return out


def _import_graph():
    """``{module: {imported module: line}}`` of every import statement, at module level and
    inside functions alike, between modules of :data:`LAYERED` (relative imports resolved;
    ``from package import name`` is an edge to ``package.name`` when that is a module)."""
    modules = _module_files()

    def deepest(name):
        # The longest prefix of a dotted name that is one of the modules (None if none is).
        parts = name.split(".")
        for k in range(len(parts), 0, -1):
            if ".".join(parts[:k]) in modules:
                return ".".join(parts[:k])
        return None

    graph = {}
    for name, (path, is_package) in modules.items():
        edges = graph.setdefault(name, {})
        package = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module
                targets = [f"{source}.{a.name}" for a in node.names if a.name != "*"] or [source]
            for target in targets:
                target = deepest(target)
                if target is not None and target != name:
                    edges.setdefault(target, node.lineno)
    return graph


def _cycles(graph):
    """``(modules, cycle)`` of every strongly connected component of ``graph`` with more than
    one module (Tarjan's algorithm): its modules, sorted, and one shortest cycle through the
    first of them (a list of modules, first == last)."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(set(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    cycles = []
    for component in components:
        # The shortest way back to the component's first module, breadth first.
        start = min(component)
        paths, seen = [[start]], set()
        while paths:
            path = paths.pop(0)
            nexts = sorted(w for w in graph[path[-1]] if w in component)
            if start in nexts:
                cycles.append((sorted(component), path + [start]))
                break
            for w in nexts:
                if w not in seen:
                    seen.add(w)
                    paths.append(path + [w])
    return sorted(cycles)


def test_import_graph_has_no_cycle():
    graph = _import_graph()
    assert {"lowbit.hw.top", "lowbit.sim.link", "lowbit.boards.driver", "bench"} <= graph.keys()
    cycles = _cycles(graph)
    files = _module_files()

    def describe(modules, cycle):
        steps = [f"{a} -> {b} ({files[a][0].relative_to(ROOT)}:{graph[a][b]})"
                 for a, b in zip(cycle, cycle[1:], strict=False)]
        return f"- {', '.join(modules)}, e.g.\n  " + "\n  ".join(steps)

    assert not cycles, "import cycles:\n" + "\n".join(describe(*c) for c in cycles)


def test_ci_runs_the_readmes_commands():
    """``.ci/run`` runs the README's two commands: its first (the install and ``lowbit build``,
    in two steps there) and its second (the quick suite) verbatim."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```sh\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert len(block) == 2, block
    install, tests = block
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert tests in ci, f"{tests!r} is not a line of .ci/run"
    assert install.split(" && ")[-1] in ci and "pip install" in install
    assert any("pip install" in line and "-e '.[test]'" in line for line in ci)
