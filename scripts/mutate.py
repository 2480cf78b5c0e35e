"""One-token mutation testing of gateware modules: does a small, realistic bug fail a test?

Every mutant changes one token of one ``hw/`` file, inside the functions that build hardware
(``elaborate`` by default; ``--functions`` adds others, e.g. ``crc16_next``):

* comparisons: ``>`` <-> ``>=``, ``<`` <-> ``<=``, ``==`` <-> ``!=``;
* integer constants: ``n`` -> ``n + 1`` and ``n - 1`` (``0`` -> ``1`` only);
* logic and arithmetic of the rounding and range expressions: ``&`` <-> ``|``, ``^`` -> ``|``,
  ``+`` <-> ``-``, ``<<`` <-> ``>>``; ``m.If`` <-> ``m.Elif`` (a priority swap needs two
  tokens and is not generated).

Each mutant runs the given pytest selection (``-x``, warnings as errors as configured) and is
*killed* when the selection fails or times out, *survived* when it passes. The survivors are
listed with their line: each is a missing test or an equivalent mutant (one that cannot change
the behaviour, e.g. a constant in a width that is never reached), which the report cannot tell
apart; read them.

The shared checkout is never modified: the package is copied to a temporary directory, the
mutant is written into the copy (and the copy's file restored in a ``finally`` after each run),
and pytest runs in the copy with ``PYTHONPATH`` pointing at it (ahead of the editable install),
``PYTHONDONTWRITEBYTECODE`` set.

Usage::

    python scripts/mutate.py hw/crc.py --tests "tests/test_link.py -k crc" \\
        --functions elaborate crc16_next
    python scripts/mutate.py hw/bfp/output.py --tests "tests/test_bfp_rtl.py -k exact_ties" \\
        --sample 12 --seed 1
    python scripts/mutate.py hw/sequencer.py --list            # the mutants, nothing run
    python scripts/mutate.py hw/bfp/output.py --lines 555 --tests "tests/test_bfp_rtl.py -k tiny"

Exit status 0 when every mutant run was killed, 1 when some survived.
"""

import argparse
import ast
import io
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import tokenize
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Operator swaps (one token each).
SWAPS = {">": [">="], ">=": [">"], "<": ["<="], "<=": ["<"], "==": ["!="], "!=": ["=="],
         "&": ["|"], "|": ["&"], "^": ["|"], "+": ["-"], "-": ["+"], "<<": [">>"],
         ">>": ["<<"]}
#: Names swapped where they follow ``m.`` (conditional priority).
NAME_SWAPS = {"If": ["Elif"], "Elif": ["If"]}
#: What the copy leaves out.
IGNORE = shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__", ".pytest_cache",
                                ".ruff_cache", ".hypothesis", "sim_build*")


@dataclass
class Mutant:
    line: int
    col: int
    old: str
    new: str
    kind: str

    def apply(self, source):
        lines = source.splitlines(keepends=True)
        text = lines[self.line - 1]
        assert text[self.col:self.col + len(self.old)] == self.old, (self, text)
        lines[self.line - 1] = text[:self.col] + self.new + text[self.col + len(self.old):]
        return "".join(lines)

    def describe(self, source):
        text = source.splitlines()[self.line - 1].strip()
        # line:column (1-based) tells two equal tokens on one line apart.
        return f"line {self.line}:{self.col + 1}: {self.old} -> {self.new} ({self.kind}): {text}"


def function_lines(source, names):
    """Line ranges ``[(first, last)]`` of the functions and methods called ``names``."""
    spans = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
            spans.append((node.lineno, node.end_lineno))
    return spans


def mutants(source, functions=("elaborate",)):
    """Every one-token mutant of ``source`` inside the functions ``functions``."""
    spans = function_lines(source, set(functions))

    def inside(line):
        return any(a <= line <= b for a, b in spans)

    toks = list(tokenize.generate_tokens(io.StringIO(source).readline))
    out = []
    for k, tok in enumerate(toks):
        (line, col), text = tok.start, tok.string
        if not inside(line):
            continue
        if tok.type == tokenize.OP and text in SWAPS:
            if text == "-" and k and (toks[k - 1].type == tokenize.OP and
                                      toks[k - 1].string not in (")", "]")):
                continue                      # a unary minus: "+x" is the same value
            kind = "comparison" if text in ("<", "<=", ">", ">=", "==", "!=") else "operator"
            out += [Mutant(line, col, text, new, kind) for new in SWAPS[text]]
        elif tok.type == tokenize.NUMBER and text.isdigit():
            value = int(text)
            news = [value + 1] if value == 0 else [value + 1, value - 1]
            out += [Mutant(line, col, text, str(v), "constant") for v in news]
        elif (tok.type == tokenize.NAME and text in NAME_SWAPS and k >= 2
              and toks[k - 1].string == "." and toks[k - 2].string == "m"):
            out += [Mutant(line, col, text, new, "priority") for new in NAME_SWAPS[text]]
    return out


def run_tests(workdir, selection, timeout):
    """``"killed"`` / ``"survived"`` / ``"timeout"`` of the pytest ``selection`` in ``workdir``."""
    env = dict(os.environ, PYTHONPATH=str(workdir.parent), PYTHONDONTWRITEBYTECODE="1")
    env.pop("CI", None)
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
           *shlex.split(selection)]
    try:
        r = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout"
    if r.returncode == 0:
        return "survived"
    if r.returncode in (1,):
        return "killed"
    # 2..5: interrupted, internal error, usage error, nothing collected: not a verdict.
    raise RuntimeError(f"pytest exited with {r.returncode}:\n{r.stdout[-2000:]}{r.stderr}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("file", help="the module to mutate, relative to the checkout (e.g. hw/crc.py)")
    p.add_argument("--tests", help="pytest arguments of the selection that must kill them")
    p.add_argument("--functions", nargs="+", default=["elaborate"],
                   help="functions whose bodies are mutated (default: elaborate)")
    p.add_argument("--lines", nargs="+", type=int, default=None,
                   help="only the mutants on these lines")
    p.add_argument("--sample", type=int, default=None, help="run this many random mutants")
    p.add_argument("--seed", type=int, default=0, help="seed of --sample")
    p.add_argument("--timeout", type=float, default=600, help="seconds per mutant run")
    p.add_argument("--list", action="store_true", help="list the mutants; run nothing")
    args = p.parse_args(argv)

    rel = Path(args.file)
    source = (ROOT / rel).read_text()
    found = mutants(source, args.functions)
    if args.lines:
        found = [m for m in found if m.line in args.lines]
    chosen = found
    if args.sample is not None and args.sample < len(found):
        chosen = sorted(random.Random(args.seed).sample(found, args.sample),
                        key=lambda m: (m.line, m.col))
    if args.list or not args.tests:
        for m in chosen:
            print(m.describe(source))
        print(f"{len(chosen)} of {len(found)} mutants of {rel}")
        return 0
    with tempfile.TemporaryDirectory(prefix="lowbit-mutate-") as tmp:
        work = Path(tmp) / "lowbit"
        shutil.copytree(ROOT, work, ignore=IGNORE)
        target = work / rel
        print(f"baseline: {args.tests}", flush=True)
        if run_tests(work, args.tests, args.timeout) != "survived":
            print("the selection fails without a mutant: fix that first")
            return 2
        results = []
        for k, m in enumerate(chosen, 1):
            t0 = time.monotonic()
            try:
                target.write_text(m.apply(source))
                verdict = run_tests(work, args.tests, args.timeout)
            finally:
                target.write_text(source)
            results.append((m, verdict))
            print(f"[{k}/{len(chosen)}] {verdict:8} {time.monotonic() - t0:5.1f} s  "
                  f"{m.describe(source)}", flush=True)
    survivors = [m for m, v in results if v == "survived"]
    killed = len(results) - len(survivors)
    print(f"\n{rel}: {len(results)} mutants run ({len(found)} in all), {killed} killed, "
          f"{len(survivors)} survived")
    for m in survivors:
        print(f"  survived: {m.describe(source)}")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
