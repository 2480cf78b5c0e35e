import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The tests import lowbit.hw, lowbit.sim and lowbit.boards. `pip install -e .` maps them onto
# this checkout; without an install, the checkout's root is loaded as the package `lowbit` here
# (the same mapping as pyproject.toml's package-dir), so a bare clone still runs its tests.
if importlib.util.find_spec("lowbit") is None:
    _spec = importlib.util.spec_from_file_location(
        "lowbit", os.path.join(ROOT, "__init__.py"), submodule_search_locations=[ROOT])
    _lowbit = importlib.util.module_from_spec(_spec)
    sys.modules["lowbit"] = _lowbit
    _spec.loader.exec_module(_lowbit)
