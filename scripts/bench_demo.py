"""Throughput of the digits demo (issue #10): images/s in the model transport, Amaranth and
CXXRTL simulators, cycles per image, projected images/s on each board.

For every device and variant the script connects once (simulator start-up and CXXRTL compile
are not timed), places the network once (timed separately as ``load_s``), then runs the same
test images ``--runs`` times through :meth:`boards.driver.Accelerator.run_network`, checks every
output against :func:`sim.mlp.forward` bit for bit, and reports the median wall-clock images/s.
Cycles per image come from the ``RUN`` replies (identical in both simulators: they run the same
gateware); the projection is ``board clock / cycles per image`` (and the measured Fmax of a top
with the sequencer, where one exists).

Writes ``docs/bench/demo.json`` and the table between the ``bench:begin`` / ``bench:end``
markers of ``docs/demo.md``.

    python scripts/bench_demo.py                       # all devices, 3 runs each
    python scripts/bench_demo.py --quick --devices model cxxrtl
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from boards import demo  # noqa: E402
from boards.driver import Accelerator  # noqa: E402
from sim import mlp  # noqa: E402

DEVICES = ("model", "amaranth", "cxxrtl")
#: Images per run: full and --quick.
IMAGES = {"model": (540, 100), "cxxrtl": (540, 100), "amaranth": (3, 2)}
MARK_BEGIN, MARK_END = "<!-- bench:begin -->", "<!-- bench:end -->"


def _accelerator(device):
    if device == "model":
        return Accelerator.model(**demo.SIM_TOP)
    return Accelerator.simulated(simulator=device, **demo.SIM_TOP)


def bench_one(device, variant, *, images, runs, split, build_dir, log):
    t0 = time.perf_counter()
    acc = _accelerator(device)
    start_s = time.perf_counter() - t0
    design = acc.design
    column = design.column()
    _, net = demo.prepare_network(variant, column, split=split, build_dir=build_dir)
    t0 = time.perf_counter()
    acc.load_network(net.layers, quantise_input=demo._input_quant(net))
    load_s = time.perf_counter() - t0
    codes = mlp.pixels_to_f16(split.x_test[:images])
    gm, ge = mlp.forward(net, codes, column=column, lanes=design.matrix_lanes)
    rates, cycles = [], set()
    for k in range(runs):
        out, stats = acc.run_network(codes)
        if not (np.array_equal(out.m, gm) and np.array_equal(out.e, ge)):
            raise SystemExit(f"{device} {variant}: outputs differ from the golden model")
        rates.append(images / stats["seconds"])
        cycles.add(int(stats["cycles"]))
        log(f"  {device:<8} {variant:<8} run {k + 1}/{runs}: {rates[-1]:10.1f} images/s, "
            f"{stats['cycles']} cycles")
    if len(cycles) != 1:
        raise SystemExit(f"{device} {variant}: cycle counts differ between runs: {cycles}")
    total = cycles.pop()
    acc.close()
    return {"device": device, "variant": variant, "images": images, "runs": runs,
            "images_per_s_median": statistics.median(rates), "images_per_s_all": rates,
            "cycles": total, "cycles_per_image": total / images if total else None,
            "start_s": round(start_s, 2), "load_s": round(load_s, 2),
            "accuracy": mlp.accuracy(mlp.predictions(gm, ge), split.y_test[:images]),
            "bit_exact": True,
            "design": {"matrix_lanes": design.matrix_lanes, "block": design.block}}


def _projections(rows, build_dir):
    """Board projections per variant from the simulated row with the most images (the
    per-RUN overhead is amortised over the most images there)."""
    out = {}
    column = Accelerator.model(**demo.SIM_TOP).design.column()
    for r in sorted(rows, key=lambda r: -r["images"]):
        if r["cycles_per_image"] and r["variant"] not in out:
            _, net = demo.prepare_network(r["variant"], column, build_dir=build_dir)
            out[r["variant"]] = {
                "device": r["device"], "images": r["images"],
                "cycles_per_image": r["cycles_per_image"],
                "boards": demo.projections(r["cycles_per_image"], build_dir=build_dir, net=net,
                                           lanes=r["design"]["matrix_lanes"])}
    return out


def table(rows, projections):
    lines = ["| device | variant | images | images/s (median) | cycles/image | load s |",
             "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        cpi = f"{r['cycles_per_image']:.1f}" if r["cycles_per_image"] else "n/a"
        lines.append(f"| {r['device']} | {r['variant']} | {r['images']} | "
                     f"{r['images_per_s_median']:.3g} | {cpi} | {r['load_s']:.1f} |")
    for variant, proj in projections.items():
        lines += ["", f"Projected images/s on the boards, {variant} variant "
                  f"({proj['cycles_per_image']:.1f} cycles/image, {proj['device']}, "
                  f"{proj['images']} images):", "",
                  "| board | clock MHz | images/s | measured Fmax MHz | images/s at Fmax |",
                  "|---|---:|---:|---:|---:|"]
        for p in proj["boards"]:
            if p.get("unfit"):
                lines.append(f"| {p['board']} | {p['clock_mhz']:g} | profile cannot run it: "
                             f"{p['unfit']} | | |")
                continue
            fm = f"{p['fmax_mhz']:.1f}" if p["fmax_mhz"] else "—"
            at = f"{p['images_per_s_at_fmax']:.0f}" if p["images_per_s_at_fmax"] else "—"
            rate = f"{p['images_per_s']:.0f}"
            if p.get("other_lanes"):
                rate += f" (board N={p['lanes']}: differs)"
            lines.append(f"| {p['board']} | {p['clock_mhz']:g} | {rate} | {fm} | {at} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", nargs="+", choices=DEVICES, default=list(DEVICES),
                        help="simulated devices (default: all)")
    parser.add_argument("--variants", nargs="+", choices=demo.VARIANTS,
                        default=list(demo.VARIANTS))
    parser.add_argument("--runs", type=int, default=3, help="timed runs per row (median)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0],
                        help="accepted for the benchmark suite's interface; the demo has no "
                             "placement seeds (only 0)")
    parser.add_argument("--quick", action="store_true",
                        help="fewer images (100 in model/CXXRTL, 2 in Amaranth)")
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    parser.add_argument("--output", default=os.path.join(ROOT, "docs", "bench", "demo.json"))
    parser.add_argument("--doc", default=os.path.join(ROOT, "docs", "demo.md"),
                        help="markdown file whose bench:begin/end section gets the table")
    parser.add_argument("--render", metavar="JSON",
                        help="only re-render the table of an earlier run's JSON into --doc")
    args = parser.parse_args(argv)
    if args.render:
        with open(args.render) as f:
            result = json.load(f)
        result["projections"] = _projections(result["rows"], args.build_dir)
        with open(args.render, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        text = table(result["rows"], result["projections"])
        print(text)
        _write_doc(args.doc, result, text)
        return 0
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.seeds != [0]:
        parser.error("the demo benchmark has no placement seeds; leave --seeds out")
    split = mlp.load_split()
    log = print
    rows = []
    for device in args.devices:
        images = IMAGES[device][1 if args.quick else 0]
        for variant in args.variants:
            rows.append(bench_one(device, variant, images=images, runs=args.runs, split=split,
                                  build_dir=args.build_dir, log=log))
    projections = _projections(rows, args.build_dir)
    command = "python scripts/bench_demo.py " + " ".join(argv if argv is not None
                                                           else sys.argv[1:])
    result = {"command": command.strip(), "rows": rows, "projections": projections,
              "sim_top": demo.SIM_TOP,
              "machine": {"python": platform.python_version(), "cpus": os.cpu_count()}}
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    text = table(rows, projections)
    print(text)
    _write_doc(args.doc, result, text)
    return 0


def _write_doc(path, result, text):
    if not path or not os.path.exists(path):
        return
    with open(path) as f:
        doc = f.read()
    if MARK_BEGIN in doc and MARK_END in doc:
        head, rest = doc.split(MARK_BEGIN, 1)
        _, tail = rest.split(MARK_END, 1)
        body = f"\n`{result['command']}`\n\n{text}\n"
        with open(path, "w") as f:
            f.write(head + MARK_BEGIN + body + MARK_END + tail)


if __name__ == "__main__":
    sys.exit(main())
