"""Simulation speed: Amaranth's Python simulator against CXXRTL on two accelerator tops.

Both simulators run the same host workload through :class:`lowbit.sim.rtl.transport.SimulatedSerial`
at the byte level. Speed is simulated clock cycles per wall-clock second of the whole session
(Python host side included), median over ``--runs`` runs; the one-time setup (Amaranth: elaboration;
CXXRTL: RTLIL + yosys + C++ compile, or the cache lookup) is reported separately.

Tops (``--tops``):

- ``link``: the first top, host link only (``scratch_bytes=4096, frame_bytes=512``; LUT and
  grand engines, no sequencer). Workload: MEM_WRITE / MEM_READ / PING / REG frames, stop and
  wait; the reply bytes and cycle counts of every run must be identical across simulators.
- ``full``: the digits demo's top (:data:`lowbit.boards.demo.SIM_TOP`: sequencer, BFP column with
  N = 16 and B = 16, quantiser, discrete unit, LUT, grand -- the engines of the ULX3S and
  OrangeCrab profiles). Workload: the BFP digits network placed once with
  :meth:`lowbit.boards.driver.Accelerator.load_network` (not timed), then ``run_network`` on test
  images (write inputs, ``RUN``, read outputs; RUN-heavy). Amaranth runs ``--full-images-amaranth``
  images, CXXRTL ``--full-images``; every output must equal :func:`lowbit.sim.mlp.forward`, and a
  CXXRTL run on the Amaranth image count must give the same outputs and cycle count.

Usage::

    python scripts/bench_sim.py                # both tops, 3 runs, writes docs/bench/sim.json
    python scripts/bench_sim.py --quick        # short workloads, 1 run
    python scripts/bench_sim.py --tops full    # the full top only
"""

import argparse
import hashlib
import json
import os
import pathlib
import platform
import random
import statistics
import subprocess
import sys
import time

import numpy as np  # noqa: E402

from lowbit.sim import link as L  # noqa: E402
from lowbit.sim.rtl.transport import SimulatedSerial  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
PARAMS = dict(scratch_bytes=4096, frame_bytes=512)


def workload(frames, seed=0):
    """Request frames and their reply lengths (from the protocol model)."""
    rng = random.Random(seed)
    model = L.DeviceModel(**PARAMS)
    out = []
    for k in range(frames):
        kind = k % 4
        if kind == 0:
            addr = rng.randrange(0, PARAMS["scratch_bytes"] - 256)
            req = L.encode_request(L.Opcode.MEM_WRITE, L.mem_write_payload(addr,
                                                                            rng.randbytes(256)))
        elif kind == 1:
            addr = rng.randrange(0, PARAMS["scratch_bytes"] - 256)
            req = L.encode_request(L.Opcode.MEM_READ, L.mem_read_payload(addr, 256))
        elif kind == 2:
            req = L.encode_request(L.Opcode.PING, rng.randbytes(64))
        else:
            reg = rng.choice([r for r in L.REGISTERS if r.access == "rw"])
            req = L.encode_request(L.Opcode.REG_WRITE, L.reg_write_payload(reg.index,
                                                                           rng.getrandbits(32)))
        out.append((req, len(model.feed(req))))
    return out


def run(simulator, frames):
    t0 = time.perf_counter()
    port = SimulatedSerial(simulator=simulator, **PARAMS)
    setup = time.perf_counter() - t0
    digest = hashlib.sha256()
    t0 = time.perf_counter()
    for req, n in frames:
        port.write(req)
        reply = port.read(n)
        if len(reply) != n:
            raise RuntimeError(f"{simulator}: short reply ({len(reply)} of {n} bytes)")
        digest.update(reply)
    seconds = time.perf_counter() - t0
    cycles = port.cycles
    port.close()
    return dict(setup_s=setup, seconds=seconds, cycles=cycles, reply_sha256=digest.hexdigest())


def full_network(build_dir):
    """The demo's BFP digits network for :data:`lowbit.boards.demo.SIM_TOP` and the test images."""
    from lowbit.boards import demo
    from lowbit.boards.driver import Accelerator
    from lowbit.sim import mlp
    split = mlp.load_split()
    design = Accelerator.model(**demo.SIM_TOP).design
    _, net = demo.prepare_network("bfp", design.column(), split=split, build_dir=build_dir)
    return net, mlp.pixels_to_f16(split.x_test), design


def run_full(simulator, net, codes, design, images, runs, check_images=None):
    """Place ``net`` (its cycles are returned as ``load_cycles``), run ``check_images`` images
    once untimed if given (``check``: cycles and output digest of that first run), then time
    ``runs`` calls of ``run_network`` on ``images`` images."""
    from lowbit.boards import demo
    from lowbit.boards.driver import Accelerator
    from lowbit.sim import mlp
    t0 = time.perf_counter()
    acc = Accelerator.simulated(simulator=simulator, **demo.SIM_TOP)
    setup = time.perf_counter() - t0
    acc.load_network(net.layers, quantise_input=demo._input_quant(net))
    load_cycles = acc.port.cycles

    def one(n):
        gm, ge = mlp.forward(net, codes[:n], column=design.column(), lanes=design.matrix_lanes)
        c0 = acc.port.cycles
        t0 = time.perf_counter()
        res, stats = acc.run_network(codes[:n])
        seconds = time.perf_counter() - t0
        if not (np.array_equal(res.m, gm) and np.array_equal(res.e, ge)):
            raise RuntimeError(f"{simulator}: outputs differ from lowbit.sim.mlp.forward")
        digest = hashlib.sha256(res.m.tobytes() + res.e.tobytes()).hexdigest()
        return dict(setup_s=setup, seconds=seconds, cycles=acc.port.cycles - c0,
                    run_cycles=int(stats["cycles"]), images=n, output_sha256=digest)

    check = None
    if check_images:
        c = one(check_images)
        check = dict(cycles=c["cycles"], output_sha256=c["output_sha256"])
    out = [one(images) for _ in range(runs)]
    acc.close()
    return out, load_cycles, check


def bench_full(sims, args):
    net, codes, design = full_network(args.build_dir)
    results = {}
    for sim in sims:
        images = args.full_images_amaranth if sim == "amaranth" else args.full_images
        check = args.full_images_amaranth if sim != "amaranth" and "amaranth" in sims else None
        runs, load_cycles, checked = run_full(sim, net, codes, design, images, args.runs, check)
        rates = [r["cycles"] / r["seconds"] for r in runs]
        results[sim] = dict(runs=runs, cycles_per_s=rates,
                            median_cycles_per_s=statistics.median(rates),
                            images_per_s=statistics.median(r["images"] / r["seconds"]
                                                           for r in runs),
                            load_cycles=load_cycles, check=checked)
    identical = True
    if "amaranth" in results:
        # Each simulator's first run after placing the network (the Amaranth image count) must
        # give the same outputs after the same cycles; placing it the same cycles too.
        ref = results["amaranth"]
        first = dict(cycles=ref["runs"][0]["cycles"],
                     output_sha256=ref["runs"][0]["output_sha256"])
        identical = all(res["check"] == first and res["load_cycles"] == ref["load_cycles"]
                        for sim, res in results.items() if sim != "amaranth")
    return results, identical


def bench_link(sims, args):
    frames = workload(args.frames)
    results = {}
    for sim in sims:
        runs = [run(sim, frames) for _ in range(args.runs)]
        rates = [r["cycles"] / r["seconds"] for r in runs]
        results[sim] = dict(runs=runs, cycles_per_s=rates,
                            median_cycles_per_s=statistics.median(rates))
    digests = {r["reply_sha256"] for res in results.values() for r in res["runs"]}
    cycles = {r["cycles"] for res in results.values() for r in res["runs"]}
    return results, len(digests) == 1 and len(cycles) == 1


def _cxx_version():
    cxx = os.environ.get("CXX") or "g++"
    try:
        return subprocess.run([cxx, "--version"], capture_output=True, text=True,
                              check=True).stdout.splitlines()[0]
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tops", default="link,full", help="link, full or both (comma-separated)")
    p.add_argument("--frames", type=int, default=200, help="request frames per run (link top)")
    p.add_argument("--full-images", type=int, default=105,
                   help="images per CXXRTL run on the full top (21 per RUN)")
    p.add_argument("--full-images-amaranth", type=int, default=2,
                   help="images per Amaranth run on the full top")
    p.add_argument("--runs", type=int, default=3, help="runs per simulator (median reported)")
    p.add_argument("--quick", action="store_true",
                   help="40 frames, 21 CXXRTL images, 1 Amaranth image, 1 run")
    p.add_argument("--simulators", default="amaranth,cxxrtl")
    p.add_argument("--build-dir", default=str(ROOT / "build"), help="demo model cache")
    p.add_argument("--json", default=str(ROOT / "docs" / "bench" / "sim.json"))
    args = p.parse_args(argv)
    if args.quick:
        args.frames, args.full_images, args.full_images_amaranth, args.runs = 40, 21, 1, 1
    tops = args.tops.split(",")
    if not set(tops) <= {"link", "full"}:
        p.error(f"--tops must name link and/or full, not {args.tops!r}")
    sims = args.simulators.split(",")
    doc = dict(runs=args.runs, tops={},
               machine=dict(python=platform.python_version(), cpus=os.cpu_count(),
                            cxx=_cxx_version(), load_average=os.getloadavg()),
               command=" ".join(["python", "scripts/bench_sim.py", *(argv if argv is not None
                                                                     else sys.argv[1:])]))
    ok = True
    for top in tops:
        if top == "link":
            results, identical = bench_link(sims, args)
            cycles = results[sims[0]]["runs"][0]["cycles"]
            desc = (f"{args.frames} frames (MEM_WRITE 256 B, MEM_READ 256 B, PING 64 B, "
                    f"REG_WRITE), {cycles} cycles")
            work = dict(frames=args.frames, params=PARAMS, cycles=cycles)
        else:
            from lowbit.boards import demo
            results, identical = bench_full(sims, args)
            desc = ("BFP digits network, run_network on "
                    + ", ".join(f"{res['runs'][0]['images']} images in {sim} "
                                f"({res['runs'][0]['cycles']} cycles)"
                                for sim, res in results.items()))
            work = dict(network="digits bfp", params=demo.SIM_TOP,
                        images={sim: res["runs"][0]["images"] for sim, res in results.items()},
                        cycles={sim: res["runs"][0]["cycles"] for sim, res in results.items()})
        ratio = None
        if {"amaranth", "cxxrtl"} <= set(results):
            ratio = (results["cxxrtl"]["median_cycles_per_s"]
                     / results["amaranth"]["median_cycles_per_s"])
        print(f"\n{top} top: {desc}; median of {args.runs} run(s)")
        print(f"{'simulator':<10} {'setup s':>8} {'run s':>8} {'cycles/s':>12}")
        for sim, res in results.items():
            setup = res["runs"][-1]["setup_s"]
            seconds = statistics.median(x["seconds"] for x in res["runs"])
            print(f"{sim:<10} {setup:8.2f} {seconds:8.3f} {res['median_cycles_per_s']:12,.0f}")
        if ratio is not None:
            print(f"CXXRTL / Amaranth speed: {ratio:.0f}x")
        print(f"replies / outputs and cycle counts identical across simulators: {identical}")
        doc["tops"][top] = dict(workload=work, results=results, cxxrtl_over_amaranth=ratio,
                                identical=identical)
        ok &= identical
    path = pathlib.Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
