"""Rules of the layout (DESIGN §1): golden models never import Amaranth, gateware never imports
boards, every module lints clean."""

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import hw
import sim

ROOT = Path(__file__).resolve().parent.parent
# Simulation helpers that drive the gateware; everything else in sim/ is a golden model.
SIM_HELPERS = {"harness", "transport", "cxxrtl"}
GOLDEN = [m.name for m in pkgutil.iter_modules(sim.__path__) if m.name not in SIM_HELPERS]
GATEWARE = [m.name for m in pkgutil.iter_modules(hw.__path__)]


@pytest.mark.parametrize("module", GOLDEN)
def test_golden_model_does_not_import_amaranth(module):
    code = (f"import sys; import sim.{module}; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('amaranth', 'hw'));"
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, f"sim.{module} imports {r.stdout.strip()} {r.stderr[-500:]}"


@pytest.mark.parametrize("module", GATEWARE)
def test_gateware_does_not_import_boards(module):
    tree = ast.parse((ROOT / "hw" / f"{module}.py").read_text())
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            assert name.split(".")[0] != "boards", f"hw.{module} imports {name}"
        if isinstance(node, ast.Attribute) and node.attr == "environ":
            pytest.fail(f"hw.{module} reads the environment; gateware takes parameters")
