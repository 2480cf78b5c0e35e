"""Throughput of the digits demo (issue #10) in the simulators and projected on every board.

Images/s in the model transport, Amaranth and CXXRTL simulators, cycles per image, and each
board's projected images/s from the cycles per image of its own top.

For every device and variant the script connects once (simulator start-up and CXXRTL compile
are not timed), places the network once (timed separately as ``load_s``), then runs the same
test images ``--runs`` times through :meth:`lowbit.boards.driver.Accelerator.run_network`, checks
every
output against :func:`lowbit.sim.mlp.forward` bit for bit, and reports the median wall-clock
images/s.
These rows run :data:`lowbit.boards.demo.SIM_TOP`. Cycles per image come from the ``RUN`` replies
(identical in both simulators: they run the same gateware).

Board projections: for every board of :data:`lowbit.boards.profiles.BOARDS` whose profile can run
the
variant (:func:`lowbit.boards.demo.board_fit`), the network is converted for that board's column and
run in CXXRTL on a simulated top with the board's own top parameters
(:func:`lowbit.boards.demo.board_top`, what ``lowbit build`` gives
:class:`lowbit.hw.top.Accelerator`), every
output checked bit for bit; boards with identical top parameters share one measurement. The
projection is ``board clock / its cycles per image`` (and its measured top Fmax / the same,
where one exists). ``lowbit demo digits`` reads these per-board counts back
(:func:`lowbit.boards.demo.stored_cycles`).

Writes ``docs/bench/demo.json`` and the tables between the ``bench:begin`` / ``bench:end``
markers of ``docs/demo.md``. The first CXXRTL compile of each distinct top takes 2-6 min
(cached under ``~/.cache/lowbit/cxxrtl``).

    python scripts/bench_demo.py                       # all devices and boards, 3 runs each
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

from benchcommon import accelerator_section, board_digest, replace_section  # noqa: E402

from lowbit.boards import demo  # noqa: E402
from lowbit.boards.driver import Accelerator  # noqa: E402
from lowbit.sim import mlp  # noqa: E402

DEVICES = ("model", "amaranth", "cxxrtl")
#: Images per run: full and --quick.
IMAGES = {"model": (540, 100), "cxxrtl": (540, 100), "amaranth": (3, 2)}
#: Images per board top (CXXRTL, one run: the cycle count does not vary): full and --quick.
BOARD_IMAGES = (540, 100)
MARK_BEGIN, MARK_END = "<!-- bench:begin -->", "<!-- bench:end -->"
#: The committed results, which docs/PERFORMANCE.md's whole-accelerator table reads.
DEFAULT_JSON = os.path.join(ROOT, "docs", "bench", "demo.json")


def _accelerator(device, params):
    if device == "model":
        return Accelerator.model(**params)
    return Accelerator.simulated(simulator=device, **params)


def bench_one(device, variant, *, images, runs, split, build_dir, log, params=None):
    """One row: ``variant`` on ``device`` running the top ``params`` (default
    :data:`lowbit.boards.demo.SIM_TOP`), ``runs`` timed runs of ``images`` test images, every output
    checked against the golden model of that top's design."""
    params = demo.SIM_TOP if params is None else params
    t0 = time.perf_counter()
    acc = _accelerator(device, params)
    start_s = time.perf_counter() - t0
    design = acc.design
    column = design.column()
    _, net = demo.prepare_network(variant, column, split=split, build_dir=build_dir)
    where = demo.INPUT_WHERE
    t0 = time.perf_counter()
    acc.load_network(net.layers, quantise_input=demo._input_quant(net, where))
    load_s = time.perf_counter() - t0
    codes = mlp.pixels_to_f16(split.x_test[:images])
    gm, ge = mlp.forward(net, codes, column=column, lanes=design.matrix_lanes)
    rates, cycles, run_commands, link = [], set(), set(), set()
    for k in range(runs):
        out, stats = acc.run_network(codes)
        if not (np.array_equal(out.m, gm) and np.array_equal(out.e, ge)):
            raise SystemExit(f"{device} {variant}: outputs differ from the golden model")
        rates.append(images / stats["seconds"])
        cycles.add(int(stats["cycles"]))
        run_commands.add((int(stats["runs"]), int(stats["chunk"])))
        if k:                                  # the first run also loads the program
            link.add(stats["link_bytes"])
        log(f"  {device:<8} {variant:<8} run {k + 1}/{runs}: {rates[-1]:10.1f} images/s, "
            f"{stats['cycles']} cycles, {stats['runs']} RUN commands")
    if len(cycles) != 1:
        raise SystemExit(f"{device} {variant}: cycle counts differ between runs: {cycles}")
    total = cycles.pop()
    (n_runs, chunk), = run_commands
    acc.close()
    return {"device": device, "variant": variant, "images": images, "runs": runs,
            "images_per_s_median": statistics.median(rates), "images_per_s_all": rates,
            "cycles": total, "cycles_per_image": total / images if total else None,
            "run_commands": n_runs, "images_per_run_command": chunk,
            "start_s": round(start_s, 2), "load_s": round(load_s, 2),
            "accuracy": mlp.accuracy(mlp.predictions(gm, ge), split.y_test[:images]),
            "bit_exact": True, "input_quantised_on": where,
            "link_bytes_per_image": (link.pop() if link else stats["link_bytes"]) / images,
            "design": {"matrix_lanes": design.matrix_lanes, "block": design.block,
                       "max_blocks": design.max_blocks, "weight_depth": design.weight_depth}}


def _board_tops(boards):
    """``[(top parameters, [board, ...]), ...]``: boards with identical tops grouped."""
    groups = []
    for name in boards:
        params = demo.board_top(name)
        for top, names in groups:
            if demo.same_top(top, params, cycles=True):
                names.append(name)
                break
        else:
            groups.append((params, [name]))
    return groups


def bench_boards(variant, *, boards, images, split, build_dir, log):
    """Cycles per image of ``variant`` on each distinct board top in CXXRTL (one run of
    ``images`` images, bit-exact); boards whose profile cannot run the variant are left out."""
    out = []
    for params, names in _board_tops(boards):
        column = Accelerator.model(**params).design.column()
        _, net = demo.prepare_network(variant, column, split=split, build_dir=build_dir)
        fit = [name for name in names if demo.board_fit(name, net) is None]
        if not fit:
            log(f"  {'/'.join(names)} {variant}: the profile cannot run it")
            continue
        log(f"  {'/'.join(fit)} {variant}: CXXRTL top with the board's parameters "
            "(the first compile takes 2-6 min)")
        row = bench_one("cxxrtl", variant, images=images, runs=1, split=split,
                        build_dir=build_dir, log=log, params=params)
        # The gateware each board's count was measured on: whole_accelerator_rows marks a
        # count of an earlier netlist of the same parameters.
        out.append({"boards": fit, "params": params,
                    "digests": {name: board_digest(name) for name in fit}, **row})
    return out


def _projections(result, build_dir):
    """Board projections per variant from the per-board measurements of ``result``."""
    out = {}
    for variant in result.get("boards", {}):
        cycles = demo.stored_cycles(variant, data=result)
        nets = {}
        for params, names in _board_tops(demo.BOARDS):
            column = Accelerator.model(**params).design.column()
            net = demo.prepare_network(variant, column, build_dir=build_dir)[1]
            nets.update(dict.fromkeys(names, net))
        out[variant] = demo.projections(
            cycles, build_dir=build_dir, net=nets,
            sources={m: "CXXRTL, the board's own top" for m in cycles})
    return out


def table(rows, projections, boards):
    lines = ["| device | variant | images | images/s (median) | cycles/image | load s |",
             "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        cpi = f"{r['cycles_per_image']:.1f}" if r["cycles_per_image"] else "n/a"
        lines.append(f"| {r['device']} | {r['variant']} | {r['images']} | "
                     f"{r['images_per_s_median']:.3g} | {cpi} | {r['load_s']:.1f} |")
    for variant, proj in projections.items():
        found = {name: m for m in boards.get(variant, []) for name in m["boards"]}
        images = sorted({m["images"] for m in found.values()})
        lines += ["", f"Projected images/s on the boards, {variant} variant: board clock / "
                  "cycles per image measured in CXXRTL",
                  "on a simulated top with the board's own top parameters (`lowbit build`'s), "
                  f"{' / '.join(map(str, images)) or 'no'} test",
                  "images per top, every output bit-exact against `lowbit.sim.mlp.forward`, "
                  "input quantised on the host; the link: bytes per image through the driver",
                  "(requests and replies, `lowbit.boards.demo.link_traffic`, 540 images) and "
                  "link-bound images/s = profile baud / 10 / bytes per image:", "",
                  "| board | clock MHz | N | images / RUN commands | cycles/image | images/s | "
                  "measured Fmax MHz | images/s at Fmax | baud | link bytes/image | "
                  "link-bound images/s |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for p in proj:
            head = f"| {p['board']} | {p['clock_mhz']:g} | {p['lanes']} |"
            if p.get("unfit"):
                lines.append(f"{head} profile cannot run it: {p['unfit']} | | | | | | | |")
                continue
            link = (f" {p['baud'] / 1e6:g} M | {p['link_bytes_per_image']:.1f} | "
                    f"{p['link_images_per_s']:.0f} |" if p.get("link_images_per_s")
                    else " | | |")
            m = found.get(p["board"])
            if not p["cycles_per_image"] or m is None:
                lines.append(f"{head} | not measured | | | |{link}")
                continue
            shared = [n for n in m["boards"] if n != p["board"]]
            cpi = f"{p['cycles_per_image']:.1f}" + (f" (same top as {', '.join(shared)})"
                                                     if shared else "")
            fm = f"{p['fmax_mhz']:.1f}" if p["fmax_mhz"] else "—"
            at = f"{p['images_per_s_at_fmax']:.0f}" if p["images_per_s_at_fmax"] else "—"
            lines.append(f"{head} {m['images']} / {m['run_commands']} | {cpi} | "
                         f"{p['images_per_s']:.0f} | {fm} | {at} |{link}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", nargs="*", choices=DEVICES, default=list(DEVICES),
                        help="simulated devices (default: all; none: only the boards' tops "
                             "of --boards, the devices' rows kept from --output)")
    parser.add_argument("--variants", nargs="+", choices=demo.VARIANTS,
                        default=list(demo.VARIANTS))
    parser.add_argument("--boards", nargs="*", choices=list(demo.BOARDS),
                        default=list(demo.BOARDS),
                        help="boards whose own top is measured for the projections (default: "
                             "all; none: no projections)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per row (median)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0],
                        help="accepted for the benchmark suite's interface; the demo has no "
                             "placement seeds (only 0)")
    parser.add_argument("--quick", action="store_true",
                        help="fewer images (100 in model/CXXRTL and per board top, 2 in "
                             "Amaranth)")
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    parser.add_argument("--output", default=DEFAULT_JSON,
                        help="the results' JSON; the entries this run does not measure are kept "
                             "from it (docs/PERFORMANCE.md is re-rendered only for the default)")
    parser.add_argument("--doc", default=os.path.join(ROOT, "docs", "demo.md"),
                        help="markdown file whose bench:begin/end section gets the table")
    parser.add_argument("--render", metavar="JSON",
                        help="only re-render the table of an earlier run's JSON into --doc")
    args = parser.parse_args(argv)
    if args.render:
        with open(args.render) as f:
            result = json.load(f)
        result["projections"] = _projections(result, args.build_dir)
        result["commands"] = commands_of(result["rows"], result.get("boards", {}))
        with open(args.render, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        text = table(result["rows"], result["projections"], result.get("boards", {}))
        print(text)
        _write_doc(args.doc, result, text)
        _write_accelerator()
        return 0
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.seeds != [0]:
        parser.error("the demo benchmark has no placement seeds; leave --seeds out")
    split = mlp.load_split()
    log = print
    command = ("python scripts/bench_demo.py " + " ".join(argv if argv is not None
                                                            else sys.argv[1:])).strip()
    rows = []
    for device in args.devices:
        images = IMAGES[device][1 if args.quick else 0]
        for variant in args.variants:
            rows.append(dict(bench_one(device, variant, images=images, runs=args.runs,
                                       split=split, build_dir=args.build_dir, log=log),
                             command=command))
    boards = {}
    if args.boards:
        for variant in args.variants:
            boards[variant] = [dict(m, command=command) for m in bench_boards(
                variant, boards=args.boards, images=BOARD_IMAGES[1 if args.quick else 0],
                split=split, build_dir=args.build_dir, log=log)]
    rows, boards = _merge_earlier(args.output, rows, boards)
    result = {"command": command, "commands": commands_of(rows, boards), "rows": rows,
              "boards": boards,
              "sim_top": demo.SIM_TOP,
              "machine": {"python": platform.python_version(), "cpus": os.cpu_count()}}
    projections = result["projections"] = _projections(result, args.build_dir)
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    text = table(rows, projections, boards)
    print(text)
    _write_doc(args.doc, result, text)
    if os.path.abspath(args.output) == os.path.abspath(DEFAULT_JSON):
        _write_accelerator()
    return 0


def commands_of(rows, boards):
    """The distinct commands that measured ``rows`` and ``boards``' entries, in their order."""
    entries = [*rows, *(m for variant in boards for m in boards[variant])]
    return list(dict.fromkeys(e["command"] for e in entries if e.get("command")))


def _merge_earlier(path, rows, boards):
    """``rows`` and ``boards`` with the entries of an earlier run in ``path`` that this run did
    not measure (other devices and variants, other boards' tops), so that a run over some
    boards keeps the others' figures. A kept entry without a command of its own (written before
    entries carried one) gets the earlier run's."""
    if not os.path.exists(path):
        return rows, boards
    with open(path) as f:
        old = json.load(f)
    for entry in [*old.get("rows", []),
                  *(m for ms in old.get("boards", {}).values() for m in ms)]:
        if not entry.get("command") and old.get("command"):
            entry["command"] = old["command"]
    done = {(r["device"], r["variant"]) for r in rows}
    rows = [r for r in old.get("rows", []) if (r["device"], r["variant"]) not in done] + rows
    merged = {}
    for variant in {*old.get("boards", {}), *boards}:
        new = boards.get(variant, [])
        names = {name for m in new for name in m["boards"]}
        kept = [m for m in old.get("boards", {}).get(variant, [])
                if not names.intersection(m["boards"])]
        merged[variant] = kept + new
    return rows, merged


def _write_accelerator():
    """The whole-accelerator table of docs/PERFORMANCE.md, with the cycles just measured."""
    section = accelerator_section()
    path = os.path.join(ROOT, "docs", "PERFORMANCE.md")
    with open(path) as f:
        doc = f.read()
    with open(path, "w") as f:
        f.write(replace_section(doc, section))
    print(section)


def _write_doc(path, result, text):
    if not path or not os.path.exists(path):
        return
    with open(path) as f:
        doc = f.read()
    if MARK_BEGIN in doc and MARK_END in doc:
        head, rest = doc.split(MARK_BEGIN, 1)
        _, tail = rest.split(MARK_END, 1)
        commands = result.get("commands") or [result["command"]]
        body = "\n" + "".join(f"`{c}`\n" for c in commands) + f"\n{text}\n"
        with open(path, "w") as f:
            f.write(head + MARK_BEGIN + body + MARK_END + tail)


if __name__ == "__main__":
    sys.exit(main())
