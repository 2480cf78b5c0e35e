"""Benchmark the IEEE float MAC baseline against the BFP column: resources, Fmax, MAC/s, ratios.

Usage::

    python scripts/bench_float.py                                   # 4 devices, f16+f32, 3 seeds
    python scripts/bench_float.py --devices up5k ecp5-25f --seeds 1 2 3
    python scripts/bench_float.py --quick                           # up5k, f16, seed 1
    python scripts/bench_float.py --devices ecp5-25f --with-bfp     # build the BFP column too

Each configuration builds :class:`lowbit.hw.floatmac.FloatMAC` out of context with
:func:`lowbit.boards.toolchain.implement` (median Fmax over the placement seeds), with the
multiplier
style the BFP column uses on that device (``scripts/bench_bfp.py``'s profiles): SB_MAC16 on
UP5K, LUTs on HX8K, MULT18X18D on ECP5. Lane counts: 16 and the BFP column's lane count on the
device. A configuration that does not fit the device is reported as such (that is a result);
its other seeds are skipped, since placement seeds do not change the resource count.

The BFP/float ratios compare each float row with the BFP column of the same lane count on the
same device, taken from this run (``--with-bfp``) or from ``docs/bench/bfp.json``. Results go
to ``docs/bench/float.json``.
"""

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lowbit.boards.toolchain import (  # noqa: E402
    DEVICES,
    OOCWrapper,
    ToolchainError,
    implement,
    parse_nextpnr_report,
)
from lowbit.hw.floatmac import FloatMAC  # noqa: E402

#: device -> multiplier style and lane count of the BFP column there (scripts/bench_bfp.py),
#: and the clock target handed to nextpnr (MHz).
PROFILES = {
    "up5k": {"mult": "sb_mac16", "bfp_lanes": 16, "freq": 60},
    "hx8k": {"mult": "lut", "bfp_lanes": 16, "freq": 60},
    "ecp5-25f": {"mult": "mult18x18d", "bfp_lanes": 16, "freq": 100},
    "ecp5-85f": {"mult": "mult18x18d", "bfp_lanes": 64, "freq": 100},
}

#: Patterns of nextpnr / Yosys messages that mean "the design does not fit the device".
_NO_FIT = re.compile(r"(only has|Unable to place|not enough|exceed|too many|No Bel|"
                     r"Failed to place|insufficient)", re.I)


def _fit_error(msg):
    return bool(_NO_FIT.search(msg))


def synth_demand(stat_path):
    """Cells the synthesised netlist asks for (from Yosys ``stat``), to report a misfit.

    Returns ``{"lut4": ..., "carry": ..., "ff": ..., "dsp": ...}`` (wrapper included; ``lut4``
    counts an ECP5 carry cell as its two LUT4s, as nextpnr does), or
    ``None`` if there is no report.
    """
    p = Path(stat_path)
    if not p.exists():
        return None
    cells = {}
    for line in p.read_text().splitlines():
        mt = re.match(r"\s+(\d+)\s+(\S+)\s*$", line)
        if mt:
            cells[mt.group(2)] = cells.get(mt.group(2), 0) + int(mt.group(1))
    # An ECP5 CCU2C carry cell occupies two LUT4s; iCE40 carries sit beside the LUTs.
    lut = cells.get("SB_LUT4", 0) + cells.get("LUT4", 0) + 2 * cells.get("CCU2C", 0)
    ff = sum(v for k, v in cells.items() if k.startswith(("SB_DFF", "TRELLIS_FF")))
    dsp = cells.get("SB_MAC16", 0) + cells.get("MULT18X18D", 0)
    return {"lut4": lut, "carry": cells.get("SB_CARRY", 0) + cells.get("CCU2C", 0),
            "ff": ff, "dsp": dsp}


def _resumed(mac, device, bd):
    """The result of an earlier build kept in ``bd`` (``--resume``), as implement() returns."""
    dev = DEVICES[device]
    res = parse_nextpnr_report(Path(bd) / "floatmac.report.json", dev["family"])
    wrapper = OOCWrapper(mac)
    wrapper._MustUse__silence = True        # only its port count is needed here
    mac._MustUse__silence = True
    wrapper_lcs = wrapper.n_out + (wrapper.n_in if dev["family"] == "ice40" else 0)
    clocks = [v["achieved"] for k, v in res["fmax"].items() if re.search(r"clk", k)]
    res.update(device=device, synth=dev["synth"] + " (resumed from " + str(bd) + ")",
               fmax_mhz=min(clocks) if clocks else None, wrapper_lcs=wrapper_lcs,
               lcs_block=max(res["lcs"] - wrapper_lcs, 0), seconds=0.0)
    return res


def bench_config(device, fmt, lanes, seeds, *, mult=None, build_dir=None, progress=print,
                 resume=False):
    """Build one float configuration on ``device`` over ``seeds``; return its result row.

    With ``resume`` (and ``build_dir``), a seed whose nextpnr report is already in its build
    directory is read back instead of built again.
    """
    prof = PROFILES[device]
    mult = mult or prof["mult"]
    params = {"lanes": lanes, "fmt": fmt, "mult": mult}
    row = {"block": "floatmac", "device": device, "params": params, "seeds": list(seeds)}
    runs = []
    for i, seed in enumerate(seeds):
        # A misfit does not depend on the placement seed: later seeds are skipped.
        row["seeds"] = list(seeds[:i + 1])
        mac = FloatMAC(**params, sim_model=False)
        with tempfile.TemporaryDirectory(prefix="lowbit-float-") as tmp:
            bd = tmp if build_dir is None else f"{build_dir}/{device}-{fmt}-{lanes}-{seed}"
            if resume and (Path(bd) / "floatmac.report.json").exists():
                runs.append(_resumed(mac, device, bd))
                progress(f"  {device} {fmt} x{lanes} seed {seed}: resumed, "
                         f"{runs[-1]['fmax_mhz']} MHz")
                continue
            log = Path(bd) / "floatmac.nextpnr.log"
            if resume and log.exists() and "ERROR" in log.read_text(errors="replace"):
                mac._MustUse__silence = True
                tail = log.read_text(errors="replace").strip().splitlines()[-5:]
                msg = f"nextpnr failed (resumed from {log}): " + " | ".join(tail)
                row.update(fits=not _fit_error(msg), error=msg,
                           demand=synth_demand(Path(bd) / "floatmac.stat"))
                progress(f"  {device} {fmt} x{lanes} seed {seed}: resumed failure: {msg[-120:]}")
                return row
            try:
                res = implement(mac, device, seed=seed, freq_mhz=prof["freq"],
                                name="floatmac", build_dir=bd, progress=progress,
                                dsp=mult != "lut")
            except ToolchainError as e:
                msg = str(e)
                row.update(fits=not _fit_error(msg), error=msg,
                           demand=synth_demand(Path(bd) / "floatmac.stat"))
                progress(f"  {device} {fmt} x{lanes} seed {seed}: FAILED: {msg[:200]} "
                         f"(netlist: {row['demand']})")
                return row
        runs.append(res)
        progress(f"  {device} {fmt} x{lanes} seed {seed}: {res['lcs']} LCs "
                 f"({res['lcs_block']} block), {res['dsps']} DSPs, {res['fmax_mhz']} MHz, "
                 f"{res['seconds']} s")
    fmax = statistics.median(r["fmax_mhz"] for r in runs)
    dev = DEVICES[device]
    r0 = runs[0]
    row.update(
        fits=True, lcs=r0["lcs"], lcs_block=r0["lcs_block"], ffs=r0.get("ffs"),
        dsps=r0["dsps"], rams=r0["rams"], synth=r0["synth"],
        fmax_mhz_runs=[r["fmax_mhz"] for r in runs], fmax_mhz=fmax,
        lcs_per_lane=round(r0["lcs_block"] / lanes, 1),
        peak_mac_per_s=lanes * fmax * 1e6,
        lcs_pct=round(100 * r0["lcs_block"] / dev["lcs"], 1),
        dsps_pct=round(100 * r0["dsps"] / dev["dsps"], 1) if dev["dsps"] else None,
    )
    return row


def misfit_text(row):
    """One-line description of a failed build: what the netlist needs versus the device."""
    dev = DEVICES[row["device"]]
    d = row.get("demand")
    if not row.get("fits", True):
        if d:
            return (f"does not fit: netlist needs {d['lut4']} LUT4 + {d['dsp']} DSP "
                    f"(device: {dev['lcs']} / {dev['dsps']})")
        return "does not fit: " + row["error"][-80:]
    return "build failed: " + row["error"][-80:]


def load_bfp(path):
    """BFP column rows of ``docs/bench/bfp.json`` (``scripts/bench_bfp.py``), by device."""
    p = Path(path)
    if not p.exists():
        return {}
    return {r["device"]: r for r in json.loads(p.read_text()).get("results", [])}


def bfp_summary(r):
    """The fields the ratio table needs from a BFP row of bench_bfp.py or bench.py."""
    lanes = r["params"].get("lanes", 16)
    fmax = r.get("fmax_mhz", r.get("fmax_mhz_median"))
    return {"device": r["device"], "lanes": lanes, "mult": r["params"].get("mult"),
            "lcs_block": r["lcs_block"], "dsps": r["dsps"], "fmax_mhz": fmax,
            "peak_mac_per_s": lanes * fmax * 1e6 if fmax else None,
            "seeds": r.get("seeds")}


def ratios(float_rows, bfp_by_device):
    """BFP/float ratios per float row with a BFP column on its device.

    A float row is compared with the BFP column of the same lane count; when that float
    configuration does not fit the device, the largest float configuration of the format that
    does fit stands in (``float_lanes`` then differs from ``lanes``: LC per MAC and Fmax compare
    per lane, MAC/s compares what each design delivers on the device). ``> 1`` means the BFP
    column is larger (LC per MAC) or faster (Fmax, MAC/s).
    """
    fitting = {}
    for f in float_rows:
        if "error" not in f:
            k = (f["device"], f["params"]["fmt"])
            if k not in fitting or f["params"]["lanes"] > fitting[k]["params"]["lanes"]:
                fitting[k] = f
    out = []
    for f in float_rows:
        b = bfp_by_device.get(f["device"])
        lanes = f["params"]["lanes"]
        entry = {"device": f["device"], "fmt": f["params"]["fmt"], "lanes": lanes,
                 "float_lanes": lanes}
        if b is None or b["lanes"] != lanes:
            continue
        entry.update(bfp_lc_per_mac=round(b["lcs_block"] / lanes, 1), bfp_dsps=b["dsps"],
                     bfp_fmax_mhz=b["fmax_mhz"], bfp_mac_per_s=b["peak_mac_per_s"])
        if "error" in f:
            entry["note"] = ("the float MAC does not fit the device" if not f["fits"]
                             else "the float build failed")
            alt = fitting.get((f["device"], f["params"]["fmt"]))
            if alt is None:
                out.append(entry)
                continue
            entry["note"] += ("; compared with the largest float that fits "
                              f"({alt['params']['lanes']} lanes)")
            f = alt
        fl = f["params"]["lanes"]
        entry.update(
            float_lanes=fl, float_lc_per_mac=f["lcs_per_lane"], float_dsps=f["dsps"],
            float_fmax_mhz=f["fmax_mhz"], float_mac_per_s=f["peak_mac_per_s"],
            lc_per_mac=round((b["lcs_block"] / lanes) / (f["lcs_block"] / fl), 3),
            fmax=round(b["fmax_mhz"] / f["fmax_mhz"], 2),
            mac_per_s=round(b["peak_mac_per_s"] / f["peak_mac_per_s"], 2),
        )
        out.append(entry)
    return out


def table(rows):
    head = (f"{'device':9} {'fmt':4} {'N':>3} {'mult':10} {'LCs':>6} {'block':>6} {'LC/lane':>7} "
            f"{'DSP':>4} {'Fmax':>6} {'GMAC/s':>7}")
    lines = [head, "-" * len(head)]
    for r in rows:
        p = r["params"]
        if "error" in r:
            lines.append(f"{r['device']:9} {p['fmt']:4} {p['lanes']:>3} {p['mult']:10} "
                         f"{misfit_text(r)}")
            continue
        lines.append(f"{r['device']:9} {p['fmt']:4} {p['lanes']:>3} {p['mult']:10} "
                     f"{r['lcs']:>6} {r['lcs_block']:>6} {r['lcs_per_lane']:>7} {r['dsps']:>4} "
                     f"{r['fmax_mhz']:>6.1f} {r['peak_mac_per_s'] / 1e9:>7.3f}")
    return "\n".join(lines)


def float_markdown(rows):
    """Markdown table of the float MAC rows."""
    lines = ["| device | fmt | lanes | mult | LC | LC/lane | DSP | Fmax MHz (median) | GMAC/s "
             "| seeds |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        p = r["params"]
        if "error" in r:
            lines.append(f"| {r['device']} | {p['fmt']} | {p['lanes']} | {p['mult']} | "
                         f"{misfit_text(r)} | | | | | {', '.join(map(str, r['seeds']))} |")
            continue
        lines.append(f"| {r['device']} | {p['fmt']} | {p['lanes']} | {p['mult']} | "
                     f"{r['lcs_block']} | {r['lcs_per_lane']} | {r['dsps']} | {r['fmax_mhz']} | "
                     f"{r['peak_mac_per_s'] / 1e9:.3f} | {', '.join(map(str, r['seeds']))} |")
    return "\n".join(lines)


def ratio_markdown(entries):
    """Markdown table of the BFP/float ratios (> 1: the BFP column is larger / faster)."""
    lines = ["| device | lanes BFP / float | float | LC/MAC BFP | LC/MAC float | ratio | DSP BFP "
             "| DSP float | Fmax BFP | Fmax float | ratio | GMAC/s BFP | GMAC/s float | ratio |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for e in entries:
        head = f"| {e['device']} | {e['lanes']} / {e['float_lanes']} | {e['fmt']} |"
        if "lc_per_mac" not in e:
            lines.append(f"{head} {e['bfp_lc_per_mac']} | — | — | {e['bfp_dsps']} | — | "
                         f"{e['bfp_fmax_mhz']} | — | — | {e['bfp_mac_per_s'] / 1e9:.3f} | — | "
                         f"{e['note']} |")
        else:
            lines.append(f"{head} {e['bfp_lc_per_mac']} | {e['float_lc_per_mac']} | "
                         f"{e['lc_per_mac']} | {e['bfp_dsps']} | {e['float_dsps']} | "
                         f"{e['bfp_fmax_mhz']} | {e['float_fmax_mhz']} | {e['fmax']} | "
                         f"{e['bfp_mac_per_s'] / 1e9:.3f} | {e['float_mac_per_s'] / 1e9:.3f} | "
                         f"{e['mac_per_s']} |")
    notes = [f"{e['device']} {e['fmt']}: {e['note']}" for e in entries if "note" in e]
    if notes:
        lines += [""] + [f"* {n}" for n in notes]
    return "\n".join(lines)


def run(devices, fmts, seeds, *, lanes=None, mult=None, build_dir=None, progress=print,
        resume=False, on_row=None):
    """Float rows for every device × format × lane count (``on_row(rows)`` after each)."""
    rows = []
    for device in devices:
        counts = lanes or sorted({16, PROFILES[device]["bfp_lanes"]})
        for fmt in fmts:
            for n in counts:
                rows.append(bench_config(device, fmt, n, seeds, mult=mult, build_dir=build_dir,
                                         progress=progress, resume=resume))
                if on_row is not None:
                    on_row(rows)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", nargs="+", choices=list(PROFILES), default=list(PROFILES))
    ap.add_argument("--fmts", nargs="*", choices=["f16", "f32"], default=["f16", "f32"],
                    help="formats (none: only the BFP column, with --with-bfp)")
    ap.add_argument("--lanes", nargs="+", type=int, default=None,
                    help="lane counts (default: 16 and the BFP column's lanes per device)")
    ap.add_argument("--mult", default=None, help="multiplier style (default: per device)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--quick", action="store_true", help="up5k, f16, 16 lanes, seed 1")
    ap.add_argument("--with-bfp", action="store_true",
                    help="also build the BFP column (scripts/bench_bfp.py) in this run")
    ap.add_argument("--bfp-json", default="docs/bench/bfp.json")
    ap.add_argument("--out", default="docs/bench/float.json")
    ap.add_argument("--build-dir", default=None, help="keep build files here")
    ap.add_argument("--resume", action="store_true",
                    help="reuse the nextpnr reports already in --build-dir")
    args = ap.parse_args(argv)
    if args.quick:
        args.devices, args.fmts, args.seeds, args.lanes = ["up5k"], ["f16"], [1], [16]
    t0 = time.monotonic()
    out = Path(args.out)
    command = "python scripts/bench_float.py " + " ".join(argv if argv is not None
                                                          else sys.argv[1:])
    bfp = {d: bfp_summary(r) for d, r in load_bfp(args.bfp_json).items()}
    if out.exists():
        # BFP columns built by earlier --with-bfp runs are newer than bfp.json.
        for b in json.loads(out.read_text()).get("bfp", []):
            if b.get("source") == "bench_float --with-bfp":
                bfp[b["device"]] = b

    def save(rows):
        # Re-read before writing: runs for other devices may have finished meanwhile.
        old = json.loads(out.read_text()) if out.exists() else {}
        key = lambda r: (r["device"], r["params"]["fmt"], r["params"]["lanes"])  # noqa: E731
        merged = {key(r): r for r in old.get("results", [])}
        merged.update({key(r): r for r in rows})
        for b in old.get("bfp", []):
            if b.get("source") == "bench_float --with-bfp":
                bfp.setdefault(b["device"], b)
        results = sorted(merged.values(), key=key)
        commands = [c for c in old.get("commands", []) if c != command.strip()]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({
            "block": "floatmac",
            "commands": commands + [command.strip()],
            "seconds": round(time.monotonic() - t0, 1),
            "results": results,
            "bfp": list(bfp.values()),
            "ratios": ratios(results, bfp),
        }, indent=2) + "\n")

    if args.with_bfp:
        import bench_bfp
        for r in bench_bfp.run(args.devices, args.seeds, args.build_dir):
            bfp[r["device"]] = {**bfp_summary(r), "source": "bench_float --with-bfp"}
        save([])
    if args.resume and args.build_dir is None:
        ap.error("--resume needs --build-dir")
    rows = run(args.devices, args.fmts, args.seeds, lanes=args.lanes, mult=args.mult,
               build_dir=args.build_dir, resume=args.resume, on_row=save)
    print(table(rows))
    print()
    print(ratio_markdown(ratios(rows, bfp)))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
