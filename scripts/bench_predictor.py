"""Compare the column's output exponent selectors on the digits MLP's layers (golden models only).

The BFP digits network is built as the demo builds it (:func:`lowbit.boards.demo.prepare_network`,
variant ``"bfp"``, the default column ``ColumnModel()``: N = B = 16, W = 8). Each layer's
products for the 540 test images run as one stream on a column of their own (the history
carries from image to image; the hidden layer's 2 row tiles per image, the output layer's 1),
in each exponent mode: the max rule, the demo's calibrated fixed exponent (hidden layer), the
EWMA predictor (``exp_mode="predicted"``) and the windowed mean/σ predictor
(``exp_mode="window"``, seed 002 claim 1). The output layer's inputs are the hidden layer's
outputs as the demo computes them (fixed exponent, ReLU table).

Columns of the table:

* ``pred %``: products that used the prediction;
* ``ovf %`` / ``unf %``: products whose prediction was too fine (its largest output would
  have saturated: the prediction's saturation rate) / too coarse (the largest output would
  have used fewer than ``W - 1 - u`` magnitude bits); both fall back to the max rule and clear
  the history (claims 23, 30, 31);
* ``sat %``: emitted output elements that saturated (``|y| > (2^(W-1) - 1/2) · 2^e4``);
* ``ftz %``: emitted elements that are 0 while the exact value is not (flushed to zero), of
  the non-zero exact values;
* ``bits``: mean magnitude bits of each product's largest output (``W - 1`` = 7 is full use);
* ``rel. RMS``: RMS of ``y - y_exact`` over the RMS of ``y_exact`` (``y_exact`` the float64
  product of the dequantised operands, :func:`lowbit.sim.bfp_column.reference_matvec`).

Usage::

    python scripts/bench_predictor.py                  # markdown table on stdout
    python scripts/bench_predictor.py --json out.json
"""

import argparse
import json

import numpy as np

from lowbit.boards.demo import prepare_network
from lowbit.sim import mlp
from lowbit.sim.bfp_column import ColumnModel, reference_matvec
from lowbit.sim.network import bfp_dense

#: ``(label, exp_mode, column parameters, matvec parameters)`` of the compared selectors.
MODES = (
    ("max rule", "max", {}, {}),
    ("fixed (demo calibration)", "fixed", {}, {}),
    ("EWMA a=4, k=1, u=2", "predicted", {"stat_shift": 4}, {"pred_k": 1}),
    ("EWMA a=4, k=3, u=2", "predicted", {"stat_shift": 4}, {"pred_k": 3}),
    ("EWMA a=4, k=1, u=0", "predicted", {"stat_shift": 4}, {"pred_k": 1, "pred_margin": 0}),
    ("EWMA a=4, k=3, u=0", "predicted", {"stat_shift": 4}, {"pred_k": 3, "pred_margin": 0}),
    ("window 512, k=1, u=2", "window", {"window": 512}, {"pred_k": 1}),
    ("window 512, k=3, u=2", "window", {"window": 512}, {"pred_k": 3}),
    ("window 512, k=1, u=0", "window", {"window": 512}, {"pred_k": 1, "pred_margin": 0}),
    ("window 512, k=3, u=0", "window", {"window": 512}, {"pred_k": 3, "pred_margin": 0}),
    ("window 1024, k=3, u=0", "window", {"window": 1024}, {"pred_k": 3, "pred_margin": 0}),
    ("window 8192, k=3, u=0", "window", {"window": 8192}, {"pred_k": 3, "pred_margin": 0}),
    ("window 512, k=3, u=0, t=1", "window", {"window": 512},
     {"pred_k": 3, "pred_margin": 0, "pred_tol": 1}),
)


def layer_inputs(net, x_test, column):
    """Per layer, the input vectors ``(x_m, x_e)`` (V, K) / (V, K/B) of the test images."""
    x_m, x_e = net.input_quant.quantise(mlp.pixels_to_f16(x_test))
    hidden = net.layers[0]
    h_m, h_e = [], []
    for xm, xe in zip(x_m, x_e, strict=True):
        m, e = bfp_dense(hidden, xm, xe, column)
        h_m.append(m)
        h_e.append(e[::column.block])
    return [(np.asarray(x_m), np.asarray(x_e)), (np.array(h_m), np.array(h_e))]


def run_layer(layer, x_m, x_e, mode, col_params, kwargs, *, width=8):
    """The statistics of one layer's product stream in one mode (see the module docstring)."""
    column = ColumnModel(**col_params)
    n = column.lanes
    rows = layer.w_m.shape[0]
    tiles = column.tiles(rows)
    pad = tiles * n - rows
    w_m = np.pad(layer.w_m, ((0, pad), (0, 0)))
    w_e = np.pad(layer.w_e, ((0, pad), (0, 0)))
    b_m, b_e = np.pad(layer.bias_m, (0, pad)), np.pad(layer.bias_e, (0, pad))
    pred = column.window_predictor if mode == "window" else column.predictor
    events = []
    sat = ftz = nonzero = elems = 0
    bits, err2, ref2 = [], 0.0, 0.0
    mx = (1 << (width - 1)) - 1
    for xm, xe in zip(x_m, x_e, strict=True):
        for t in range(tiles):
            sl = slice(t * n, (t + 1) * n)
            y, e4 = column.matvec(w_m[sl], w_e[sl], xm, xe, bias_m=b_m[sl], bias_e=b_e[sl],
                                  width=width, exp_mode=mode, fixed_exp=layer.out_exp, **kwargs)
            if mode in ("predicted", "window"):
                events.append(pred.event)
            live = slice(0, min(n, rows - t * n))
            exact = reference_matvec(w_m[sl], w_e[sl], xm, xe, block=column.block,
                                     bias_m=b_m[sl], bias_e=b_e[sl])[live]
            y = y[live]
            scaled = np.abs(exact) * 2.0 ** -e4
            sat += int(np.count_nonzero(scaled > mx + 0.5))
            nz = exact != 0
            nonzero += int(np.count_nonzero(nz))
            ftz += int(np.count_nonzero(nz & (y == 0)))
            elems += y.size
            bits.append(int(np.abs(y).max()).bit_length())
            err2 += float(np.sum((y * 2.0 ** e4 - exact) ** 2))
            ref2 += float(np.sum(exact ** 2))
    products = len(bits)
    ev = {name: events.count(name) for name in ("predicted", "overflow", "underflow")}

    def pct(c, d):
        return 100.0 * c / d if d else 0.0
    return {
        "products": products,
        "pred": pct(ev["predicted"], products) if events else None,
        "ovf": pct(ev["overflow"], products) if events else None,
        "unf": pct(ev["underflow"], products) if events else None,
        "sat": pct(sat, elems),
        "ftz": pct(ftz, nonzero),
        "bits": float(np.mean(bits)),
        "rel_rms": float(np.sqrt(err2 / ref2)),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="also write the results as JSON")
    ap.add_argument("--build-dir", default="build", help="where the demo caches its model")
    args = ap.parse_args(argv)
    split = mlp.load_split()
    column = ColumnModel()
    _, net = prepare_network("bfp", column, split=split, build_dir=args.build_dir)
    inputs = layer_inputs(net, split.x_test, column)
    names = ("hidden 64→32", "output 32→10")
    results = []
    print("| layer | selector | products | pred % | ovf % | unf % | sat % | ftz % | bits | "
          "rel. RMS |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, layer, (x_m, x_e) in zip(names, net.layers, inputs, strict=True):
        for label, mode, col_params, kwargs in MODES:
            if mode == "fixed" and layer.exp_mode != "fixed":
                continue
            r = run_layer(layer, x_m, x_e, mode, col_params, kwargs, width=layer.width)
            results.append({"layer": name, "selector": label, **r})
            ev = ["–" if r[key] is None else f"{r[key]:.1f}" for key in ("pred", "ovf", "unf")]
            print(f"| {name} | {label} | {r['products']} | {' | '.join(ev)} | "
                  f"{r['sat']:.2f} | {r['ftz']:.2f} | {r['bits']:.2f} | {r['rel_rms']:.4f} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
