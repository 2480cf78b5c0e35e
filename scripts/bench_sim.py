"""Simulation speed: Amaranth's Python simulator against CXXRTL on the accelerator top.

Both simulators run the same host workload through :class:`sim.transport.SimulatedSerial` at
the byte level (MEM_WRITE / MEM_READ / PING / REG frames, stop and wait, replies checked against
each other for bit identity). Speed is simulated clock cycles per wall-clock second of the whole
session (Python host side included), median over ``--runs`` runs; the one-time setup (Amaranth:
elaboration; CXXRTL: RTLIL + yosys + C++ compile, or the cache lookup) is reported separately.

Usage::

    python scripts/bench_sim.py                # 3 runs, writes docs/bench/sim.json
    python scripts/bench_sim.py --quick        # a short workload, 1 run
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

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from sim import link as L  # noqa: E402
from sim.transport import SimulatedSerial  # noqa: E402

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


def _cxx_version():
    cxx = os.environ.get("CXX") or "g++"
    try:
        return subprocess.run([cxx, "--version"], capture_output=True, text=True,
                              check=True).stdout.splitlines()[0]
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=200, help="request frames per run")
    p.add_argument("--runs", type=int, default=3, help="runs per simulator (median reported)")
    p.add_argument("--quick", action="store_true", help="40 frames, 1 run")
    p.add_argument("--simulators", default="amaranth,cxxrtl")
    p.add_argument("--json", default=str(ROOT / "docs" / "bench" / "sim.json"))
    args = p.parse_args(argv)
    if args.quick:
        args.frames, args.runs = 40, 1
    frames = workload(args.frames)
    sims = args.simulators.split(",")
    results = {}
    for sim in sims:
        runs = [run(sim, frames) for _ in range(args.runs)]
        rates = [r["cycles"] / r["seconds"] for r in runs]
        results[sim] = dict(runs=runs, cycles_per_s=rates,
                            median_cycles_per_s=statistics.median(rates))
    digests = {r["reply_sha256"] for res in results.values() for r in res["runs"]}
    cycles = {r["cycles"] for res in results.values() for r in res["runs"]}
    identical = len(digests) == 1 and len(cycles) == 1

    print(f"workload: {args.frames} frames (MEM_WRITE 256 B, MEM_READ 256 B, PING 64 B, "
          f"REG_WRITE), {next(iter(cycles))} cycles, median of {args.runs} run(s)")
    print(f"{'simulator':<10} {'setup s':>8} {'run s':>8} {'cycles/s':>12}")
    for sim, res in results.items():
        setup = res["runs"][-1]["setup_s"]
        seconds = statistics.median(x["seconds"] for x in res["runs"])
        print(f"{sim:<10} {setup:8.2f} {seconds:8.3f} {res['median_cycles_per_s']:12,.0f}")
    ratio = None
    if {"amaranth", "cxxrtl"} <= set(results):
        ratio = (results["cxxrtl"]["median_cycles_per_s"]
                 / results["amaranth"]["median_cycles_per_s"])
        print(f"CXXRTL / Amaranth speed: {ratio:.0f}x")
    print(f"reply bytes and cycle counts identical across simulators: {identical}")

    doc = dict(workload=dict(frames=args.frames, params=PARAMS, cycles=next(iter(cycles))),
               runs=args.runs, results=results, cxxrtl_over_amaranth=ratio,
               identical=identical, machine=dict(python=platform.python_version(),
                                                 cpus=os.cpu_count(), cxx=_cxx_version()),
               command=" ".join(["python", "scripts/bench_sim.py", *(argv or sys.argv[1:])]))
    path = pathlib.Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {path}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
