"""How busy the matrix engine stays over a wide BFP layer: MAC/cycle and busy cycles per RUN.

For each top (the reference simulated top and every board whose profile has a BFP column) the
script places one BFP layer as wide as the top's MATVEC allows (``K = max_blocks · B``, 256 on
the N = 16 tops) and as tall as its weight memory holds (whole tiles of ``N`` rows, at most
``--rows``), runs a batch of inputs through
:meth:`lowbit.boards.driver.Accelerator.run_network` in a simulator, checks every output
against :func:`lowbit.sim.network.bfp_dense` bit for bit, and reports cycles per input, the
sustained MAC/cycle (``R · K`` per input) and the matrix engine's busy cycles (the RUN replies'
``busy``: beats it accepted) as a share of all cycles.

Issue #20 sets ">= 70 % busy on a 256-wide layer with N = 16" as the sequencer's overlap target.

    python scripts/bench_matvec.py                       # Amaranth's simulator, 8 inputs
    python scripts/bench_matvec.py --simulator cxxrtl --inputs 64
"""

import argparse
import json
import sys

import numpy as np
from benchcommon import ROOT

from lowbit.boards import demo
from lowbit.boards.driver import Accelerator
from lowbit.boards.profiles import BOARDS
from lowbit.sim.network import BFPDense, bfp_dense

JSON = ROOT / "docs" / "bench" / "matvec.json"


def tops():
    """``[(name, top parameters), ...]``: the reference simulated top, then every board with a
    BFP column (boards with the same top share a row)."""
    out = [("sim-top", dict(demo.SIM_TOP))]
    for name, profile in BOARDS.items():
        if not profile.top.get("bfp", True):
            continue
        params = demo.board_top(name)
        for _name, p in out:
            if demo.same_top(p, params, cycles=True):
                break
        else:
            out.append((name, params))
    return out


def layer_for(design, max_rows, rng):
    """The widest layer the top's MATVEC takes, with as many whole tiles as fit the banks."""
    n, b = design.matrix_lanes, design.block
    k = design.max_blocks * b
    tiles = max(1, min(max_rows // n, design.weight_depth // k))
    rows = tiles * n
    return BFPDense(w_m=rng.integers(-127, 128, (rows, k)),
                    w_e=rng.integers(-8, -2, (rows, k // b)),
                    bias_m=rng.integers(-127, 128, rows), bias_e=rng.integers(-6, 0, rows),
                    width=8, rounding="nearest", exp_mode="max")


def bench_top(name, params, *, simulator, inputs, max_rows, seed=0):
    rng = np.random.default_rng(seed)
    acc = Accelerator.simulated(simulator=simulator, **params)
    design = acc.design
    layer = layer_for(design, max_rows, rng)
    k, b = layer.cols, layer.block
    x_m = rng.integers(-127, 128, (inputs, k))
    x_e = rng.integers(-4, 2, (inputs, k // b))
    acc.load_network([layer], quantise_input="host")
    from lowbit.sim.network import block_exponents, pack_elements
    words = np.stack([pack_elements(x_m[i], block_exponents(x_e[i], b, k))
                      for i in range(inputs)])
    out, stats = acc._run_words(words, stats=True)
    column = design.column()
    for i in range(inputs):
        m, e = bfp_dense(layer, x_m[i], x_e[i], column)
        if not (np.array_equal(out.m[i], m) and np.array_equal(out.e[i], e)):
            raise AssertionError(f"{name}: input {i} differs from the golden model")
    cycles, busy = stats["cycles"], stats["busy_cycles"]
    macs = layer.rows * k * inputs
    return {"top": name, "params": params, "lanes": design.matrix_lanes, "rows": layer.rows,
            "cols": k, "inputs": inputs, "runs": stats["runs"], "cycles": cycles,
            "cycles_per_input": cycles / inputs, "mac_per_cycle": macs / cycles,
            "busy_cycles": busy, "busy_fraction": busy / cycles if busy is not None else None,
            "bit_exact": True, "simulator": simulator}


def markdown(rows):
    lines = ["| top | N | layer R × K | inputs | cycles/input | MAC/cycle | busy cycles | "
             "busy share |", "|---|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        busy = "not counted" if r["busy_cycles"] is None else str(r["busy_cycles"])
        share = "—" if r["busy_fraction"] is None else f"{r['busy_fraction']:.1%}"
        lines.append(f"| {r['top']} | {r['lanes']} | {r['rows']} × {r['cols']} | {r['inputs']} | "
                     f"{r['cycles_per_input']:.1f} | {r['mac_per_cycle']:.2f} | {busy} | "
                     f"{share} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--simulator", choices=["amaranth", "cxxrtl"], default="amaranth")
    ap.add_argument("--inputs", type=int, default=8)
    ap.add_argument("--rows", type=int, default=64, help="most rows of the layer (default 64)")
    ap.add_argument("--tops", nargs="+", help="names of the tops (default: all)")
    ap.add_argument("--json", default=str(JSON))
    args = ap.parse_args(argv)
    rows = []
    for name, params in tops():
        if args.tops and name not in args.tops:
            continue
        print(f"bench_matvec: {name}", file=sys.stderr, flush=True)
        rows.append(bench_top(name, params, simulator=args.simulator, inputs=args.inputs,
                              max_rows=args.rows))
    text = markdown(rows)
    command = "python scripts/bench_matvec.py " + " ".join(
        argv if argv is not None else sys.argv[1:])
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": command.strip(), "rows": rows}, f, indent=1, default=str)
            f.write("\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
