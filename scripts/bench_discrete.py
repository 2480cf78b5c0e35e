"""Benchmark the discrete shift/XOR unit: logic cells per lane, Fmax, and cost per MAC against a
reference multiply–accumulate built from LUT multipliers of the same operand width.

The reference (:class:`LutMulMAC`) is a plain ``a * b`` lane array with the same pipeline depth,
exact lane sum and saturating accumulator as :class:`lowbit.hw.discrete.DiscreteUnit`'s ``DOT``
path,
synthesised with DSP inference switched off so that its multipliers are LUT logic (as in the BFP
column's LUT multiplier style). The discrete unit is synthesised with the device's normal flow
(``synth_ice40 -dsp`` on UP5K), so its zero DSP count shows that it holds no multiplier.

Usage::

    python scripts/bench_discrete.py                      # up5k, hx8k, ecp5-25f; seeds 1 2 3
    python scripts/bench_discrete.py --quick              # up5k only, one seed
    python scripts/bench_discrete.py --devices hx8k --seeds 1 2 3 --lanes 1 8

Figures: ``lcs_block`` is the nextpnr LC / LUT4 count minus the out-of-context wrapper estimate
(:func:`lowbit.boards.toolchain.implement`); "per lane" is the increment between the smallest and
the
largest lane count; Fmax is the median over seeds. Three designs are built: ``discrete`` (the
full unit), ``discrete-mac`` (``tables=False``: the shift/XOR MAC datapath without the discrete ⊗
discrete tables, the like-for-like comparison with the reference) and ``lutmul``.
"""

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from amaranth.hdl import Module, Mux, Signal, signed  # noqa: E402
from amaranth.lib import data, stream, wiring  # noqa: E402
from amaranth.lib.wiring import In, Out  # noqa: E402

from lowbit.boards import toolchain  # noqa: E402
from lowbit.hw.discrete import DiscreteUnit  # noqa: E402

NODSP = {"ice40": "synth_ice40", "ecp5": "synth_ecp5 -nodsp"}


class LutMulMAC(wiring.Component):
    """Reference: ``lanes`` two's-complement ``width × width`` multipliers (``a * b``), exact
    lane sum and a saturating ``acc_width`` accumulator, 4 pipeline stages, emitting on ``last``.
    """

    def __init__(self, *, lanes=4, width=8, acc_width=16):
        self._lanes, self._width, self._acc_width = lanes, width, acc_width
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({
                "a": data.ArrayLayout(signed(width), lanes),
                "b": data.ArrayLayout(signed(width), lanes),
                "last": 1,
            }))),
            "o": Out(stream.Signature(signed(acc_width))),
        })

    def elaborate(self, platform):
        m = Module()
        L, W, A = self._lanes, self._width, self._acc_width
        acc_max = (1 << (A - 1)) - 1
        adv = Signal()
        m.d.comb += [adv.eq(~self.o.valid | self.o.ready), self.i.ready.eq(adv)]
        a = [Signal(signed(W), name=f"a{k}") for k in range(L)]
        b = [Signal(signed(W), name=f"b{k}") for k in range(L)]
        p = [Signal(signed(2 * W), name=f"p{k}") for k in range(L)]
        va, vb, vc, la, lb, lc = (Signal(name=s) for s in ("va", "vb", "vc", "la", "lb", "lc"))
        total = Signal(signed(2 * W + max(L - 1, 0).bit_length()))
        acc = Signal(signed(A))
        nxt = Signal(signed(max(A, len(total)) + 1))
        sat = Signal(signed(A))
        m.d.comb += [nxt.eq(acc + total),
                     sat.eq(Mux(nxt > acc_max, acc_max, Mux(nxt < -acc_max, -acc_max, nxt)))]
        with m.If(adv):
            m.d.sync += [va.eq(self.i.valid), la.eq(self.i.payload.last),
                         vb.eq(va), lb.eq(la), vc.eq(vb), lc.eq(lb)]
            for k in range(L):
                m.d.sync += [a[k].eq(self.i.payload.a[k]), b[k].eq(self.i.payload.b[k]),
                             p[k].eq(a[k] * b[k])]
            s = p[0]
            for k in range(1, L):
                s = s + p[k]
            m.d.sync += [total.eq(s), self.o.valid.eq(vc & lc)]
            with m.If(vc):
                m.d.sync += [acc.eq(Mux(lc, 0, sat)), self.o.payload.eq(sat)]
        return m


def run_one(kind, device, seed, lanes, width, code_bits, build_root, synth_extra=""):
    if kind in ("discrete", "discrete-mac"):
        dut = DiscreteUnit(lanes=lanes, width=width, code_bits=code_bits,
                           tables=kind == "discrete")
        synth = toolchain.DEVICES[device]["synth"]
    else:
        dut = LutMulMAC(lanes=lanes, width=width, acc_width=width + 8)
        # Synthesis that infers no DSP blocks, so the multipliers are LUT logic.
        synth = NODSP[toolchain.DEVICES[device]["family"]]
    synth = f"{synth} {synth_extra}".strip()
    dev = device
    if synth != toolchain.DEVICES[device]["synth"]:
        # A local variant of the device entry with this synthesis command.
        dev = f"{device}:{synth}"
        toolchain.DEVICES.setdefault(dev, {**toolchain.DEVICES[device], "synth": synth})
    build_dir = None
    if build_root:
        build_dir = os.path.join(build_root, f"{kind}-{device}-L{lanes}-s{seed}")
    res = toolchain.implement(dut, dev, seed=seed, build_dir=build_dir, name=kind,
                              progress=lambda msg: print("  ..", msg, file=sys.stderr))
    return {"kind": kind, "device": device, "seed": seed, "lanes": lanes, "width": width,
            "code_bits": code_bits if kind != "lutmul" else None, "lcs": res["lcs"],
            "lcs_block": res["lcs_block"], "dsps": res["dsps"], "rams": res["rams"],
            "fmax_mhz": res["fmax_mhz"], "seconds": res["seconds"], "synth": synth}


def summarise(runs, lanes_list):
    """Median Fmax and LCs per (kind, device, lanes), plus per-lane increments and ratios."""
    groups = {}
    for r in runs:
        groups.setdefault((r["kind"], r["device"], r["lanes"]), []).append(r)
    rows = []
    for (kind, device, lanes), rs in groups.items():
        rows.append({
            "kind": kind, "device": device, "lanes": lanes, "width": rs[0]["width"],
            "code_bits": rs[0]["code_bits"], "seeds": [r["seed"] for r in rs],
            "lcs_block": statistics.median(r["lcs_block"] for r in rs),
            "dsps": max(r["dsps"] for r in rs), "rams": max(r["rams"] for r in rs),
            "fmax_mhz_median": round(statistics.median(r["fmax_mhz"] for r in rs), 2),
        })
        rows[-1]["lcs_per_lane"] = round(rows[-1]["lcs_block"] / lanes, 1)
        rows[-1]["gmac_s"] = round(lanes * rows[-1]["fmax_mhz_median"] / 1000, 3)
    lo, hi = min(lanes_list), max(lanes_list)
    ratios = []
    for device in sorted({r["device"] for r in rows}):
        per = {}
        for kind in ("discrete", "discrete-mac", "lutmul"):
            by = {r["lanes"]: r for r in rows if r["kind"] == kind and r["device"] == device}
            if hi not in by:
                continue
            entry = {"lcs_per_mac_total": by[hi]["lcs_block"] / hi}
            if lo in by and lo != hi:
                entry["lcs_per_mac_incr"] = (by[hi]["lcs_block"] - by[lo]["lcs_block"]) / (hi - lo)
            per[kind] = entry
        for kind in ("discrete-mac", "discrete"):
            if kind not in per or "lutmul" not in per:
                continue
            ratio = {"device": device, "design": kind, "lanes": hi}
            for key in ("lcs_per_mac_total", "lcs_per_mac_incr"):
                if key in per[kind] and key in per["lutmul"]:
                    d, r = per[kind][key], per["lutmul"][key]
                    ratio[key] = {"shift_xor": round(d, 1), "lutmul": round(r, 1),
                                  "ratio": round(r / d, 2) if d else None}
            ratios.append(ratio)
    return rows, ratios


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", nargs="+", default=["up5k", "hx8k", "ecp5-25f"],
                    choices=list(toolchain.DEVICES))
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--lanes", nargs="+", type=int, default=[1, 4])
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--code-bits", type=int, default=2)
    ap.add_argument("--kinds", nargs="+", default=["discrete", "discrete-mac", "lutmul"],
                    choices=["discrete", "discrete-mac", "lutmul"],
                    help="discrete: the full unit; discrete-mac: tables=False (the MAC datapath "
                         "alone); lutmul: the LUT multiplier reference")
    ap.add_argument("--quick", action="store_true", help="up5k only, seed 1, lanes 1 and 4")
    ap.add_argument("--build-dir", help="keep build files under this directory")
    ap.add_argument("--resume", action="store_true",
                    help="reuse the finished runs that an interrupted run recorded in the "
                         "temporary directory")
    ap.add_argument("--json", default=str(Path(__file__).resolve().parent.parent
                                          / "docs" / "bench" / "discrete.json"))
    args = ap.parse_args(argv)
    if args.quick:
        args.devices, args.seeds = ["up5k"], [1]

    # Finished runs are appended to a side file so that --resume can skip them after a failure.
    tag = hashlib.sha1(str(Path(args.json).resolve()).encode()).hexdigest()[:8]
    partial = Path(tempfile.gettempdir()) / f"lowbit-bench-discrete-{tag}.partial.jsonl"
    done = {}
    if args.resume and partial.exists():
        for line in partial.read_text().splitlines():
            r = json.loads(line)
            done[(r["kind"], r["device"], r["lanes"], r["seed"], r["width"])] = r
    elif partial.exists():
        partial.unlink()
    runs = []
    for device in args.devices:
        for kind in args.kinds:
            for lanes in args.lanes:
                for seed in args.seeds:
                    key = (kind, device, lanes, seed, args.width)
                    if key in done and (kind == "lutmul" or done[key]["code_bits"] ==
                                        args.code_bits):
                        runs.append(done[key])
                        continue
                    print(f"{kind} {device} lanes={lanes} seed={seed}", file=sys.stderr)
                    try:
                        run = run_one(kind, device, seed, lanes, args.width, args.code_bits,
                                      args.build_dir)
                    except toolchain.ToolchainError as e:
                        # YoWASP's abc9 crashes (exit 1, empty log) on a few ECP5 netlists, e.g.
                        # discrete-mac with 4 lanes; abc9 with -dff maps them. The run records
                        # the synthesis command it used.
                        extra = "-dff" if "ecp5" in device else ""
                        print(f"  .. retrying with '{extra}' after: {e}", file=sys.stderr)
                        run = run_one(kind, device, seed, lanes, args.width, args.code_bits,
                                      args.build_dir, synth_extra=extra)
                    runs.append(run)
                    with open(partial, "a") as f:
                        f.write(json.dumps(run) + "\n")
    rows, ratios = summarise(runs, args.lanes)

    hdr = (f"{'design':12} {'device':9} {'lanes':>5} {'LCs':>6} {'LC/lane':>8} {'DSP':>4} "
           f"{'RAM':>4} {'Fmax MHz':>9} {'GMAC/s':>7}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        print(f"{r['kind']:12} {r['device']:9} {r['lanes']:>5} {r['lcs_block']:>6} "
              f"{r['lcs_per_lane']:>8} {r['dsps']:>4} {r['rams']:>4} "
              f"{r['fmax_mhz_median']:>9} {r['gmac_s']:>7}")
    for q in ratios:
        for key, label in (("lcs_per_mac_total", "total/lanes"),
                           ("lcs_per_mac_incr", "per added lane")):
            if key in q:
                v = q[key]
                print(f"{q['device']}: LCs per MAC ({label}): LUT multiplier {v['lutmul']} vs "
                      f"{q['design']} {v['shift_xor']} -> ratio {v['ratio']}x")

    out = {"command": "python scripts/bench_discrete.py " + " ".join(argv or sys.argv[1:]),
           "width": args.width, "code_bits": args.code_bits, "seeds": args.seeds,
           "rows": rows, "ratios": ratios, "runs": runs}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    partial.unlink()
    print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
