"""Board builds: the accelerator top on a board, bitstream, resource and timing report, flashing.

Importing this module (through :mod:`lowbit.boards.toolchain`) sets the YoWASP tool variables.
"""

import dataclasses
import inspect
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

from amaranth.build import ResourceError
from amaranth.hdl import Cat, ClockDomain, Elaboratable, Module
from amaranth.lib import io

from .floorplan import column_floorplan, floorplan_script
from .profiles import get_board
from .toolchain import DEVICES, ToolchainError, parse_nextpnr_report, setup_toolchain_env

__all__ = ["BoardTop", "top_parameters", "board_profile", "board_plan", "build_board",
           "flash_board", "format_report", "check_bitstream", "FlashError", "BITSTREAM_NAME",
           "LC_WARN_FRACTION", "synth_options"]

BITSTREAM_NAME = "lowbit"


class FlashError(RuntimeError):
    """Programming a board failed; the message says why and what to do."""


def top_parameters(profile, clk_freq=None):
    """Split a profile's top parameters into those :class:`lowbit.hw.top.Accelerator` takes and not.

    Returns
    -------
    (dict, dict)
        Parameters passed to the top (including ``clk_freq``), and profile settings that the top
        as it stands does not take yet (reported, never silently dropped).
    """
    from lowbit.hw.top import Accelerator
    accepted = inspect.signature(Accelerator.__init__).parameters
    params = {"clk_freq": profile.clk_freq if clk_freq is None else clk_freq}
    unused = {}
    for key, value in profile.top.items():
        if key != "clk_freq":
            (params if key in accepted else unused)[key] = value
    return params, unused


class BoardTop(Elaboratable):
    """The accelerator on a board: the top's UART pins and LEDs wired to the board's resources.

    When the profile's ``clk_freq`` differs from the board oscillator's frequency, the ``sync``
    domain comes from the device's PLL (:class:`lowbit.hw.clocking.PLLClock`, fed from the
    oscillator's pad when ``profile.pll_pad``), held in reset until it locks; otherwise the
    platform's default clock drives it.

    Parameters
    ----------
    profile : BoardProfile
        The board.
    """

    def __init__(self, profile):
        self.profile = profile
        self.params, self.unused = top_parameters(profile)

    def elaborate(self, platform):
        from lowbit.hw.top import Accelerator
        m = Module()
        if self.profile.clk_freq != platform.default_clk_frequency:
            from lowbit.hw.clocking import PLLClock
            osc = platform.request(platform.default_clk, 0, dir="-")
            if self.profile.pll_pad:
                clk_in = osc.io
            else:
                m.submodules.osc_buffer = osc_buffer = io.Buffer("i", osc)
                clk_in = osc_buffer.i
            m.domains.sync = ClockDomain("sync")
            # No constraint on the PLL's output: nextpnr derives it from the oscillator's and
            # the dividers, on whatever net synthesis leaves it ("Derived frequency constraint").
            m.submodules.pll = PLLClock(DEVICES[self.profile.device]["family"],
                                        platform.default_clk_frequency, self.profile.clk_freq,
                                        clk_in, pad=self.profile.pll_pad)
        m.submodules.accel = accel = Accelerator(**self.params)
        # Every subsignal raw (dir="-"): some boards' UARTs also carry rts/dtr.
        dirs = {sub.name: "-" for sub in platform.lookup("uart", 0).ios}
        uart = platform.request("uart", 0, dir=dirs)
        # uart_ddr: the pin's DDR input register samples the line at both clock edges.
        m.submodules.rx_buffer = rx = (io.DDRBuffer if accel.uart_ddr else io.Buffer)("i",
                                                                                     uart.rx)
        m.submodules.tx_buffer = tx = io.Buffer("o", uart.tx)
        m.d.comb += [accel.rx.eq(Cat(rx.i[0], rx.i[1]) if accel.uart_ddr else rx.i),
                     tx.o.eq(accel.tx)]
        for i in range(len(accel.leds)):
            try:
                led = platform.request("led", i, dir="-")
            except ResourceError:
                break
            m.submodules[f"led_buffer_{i}"] = buf = io.Buffer("o", led)
            m.d.comb += buf.o.eq(accel.leds[i])
        return m


def _platform(profile):
    cls = profile.platform_class()
    if profile.name == "orangecrab":
        # amaranth-boards appends a `dfu-suffix` step, a tool that pip cannot install; lowbit
        # writes the DFU suffix itself (see _add_dfu_suffix).
        from amaranth.vendor import LatticeECP5Platform

        class _Platform(cls):
            required_tools = property(lambda self: LatticeECP5Platform.required_tools.fget(self))
            command_templates = property(
                lambda self: LatticeECP5Platform.command_templates.fget(self))
        cls = _Platform
    platform = cls()
    if profile.uart is not None:
        from amaranth.build import Attrs
        from amaranth.build.dsl import Resource  # noqa: F401
        from amaranth_boards.resources import UARTResource
        rx, tx, conn = profile.uart
        attrs = Attrs(IO_TYPE="LVCMOS33") if DEVICES[profile.device]["family"] == "ecp5" \
            else Attrs(IO_STANDARD="SB_LVCMOS")
        platform.add_resources([UARTResource(0, rx=rx, tx=tx, conn=conn, attrs=attrs)])
    return platform


def _add_dfu_suffix(path, vendor=0x1209, product=0x5AF0):
    """Append a DFU 1.1 suffix (what ``dfu-suffix -a`` writes) to ``path``, once."""
    data = Path(path).read_bytes()
    if len(data) >= 16 and data[-8:-5] == b"UFD":
        return
    suffix = (0xFFFF).to_bytes(2, "little") + product.to_bytes(2, "little") + \
        vendor.to_bytes(2, "little") + (0x0100).to_bytes(2, "little") + b"UFD" + bytes([16])
    crc = zlib.crc32(data + suffix) ^ 0xFFFFFFFF
    Path(path).write_bytes(data + suffix + crc.to_bytes(4, "little"))


class _Ticker:
    """Prints elapsed time every few seconds while a long step runs."""

    def __init__(self, say, what, every=15):
        self.say, self.what, self.every = say, what, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        t0 = time.monotonic()
        while not self._stop.wait(self.every):
            self.say(f"  ... still {self.what} ({time.monotonic() - t0:.0f} s)")

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def board_profile(board, top=None):
    """The profile of ``board``, with the top parameters ``top`` (a dict) in place of the
    profile's own where given (``clk_freq`` replaces the profile's clock).

    Raises
    ------
    ValueError
        Unknown board, or ``top`` not a dict.
    """
    profile = get_board(board)
    if top is None:
        return profile
    if not isinstance(top, dict):
        raise ValueError(f"Top parameters must be a dict, not {top!r}")
    top = dict(top)
    clk_freq = top.pop("clk_freq", profile.clk_freq)
    return dataclasses.replace(profile, clk_freq=clk_freq, top={**profile.top, **top})


#: Yosys commands run after reading the design, on every board: the sequencer's FSM (thirty-odd
#: states, decoded all over its datapath) in one-hot encoding, a flip-flop per state. Yosys
#: does not recode it by itself, because Amaranth gives the state register an initial value;
#: the tops start in reset (PLL lock, or the platform's power-on reset), which loads the
#: initial state. On the iCEBreaker this takes the FSM's next-state logic off the critical
#: path (docs/up5k_budget.md, session 13); recoding every FSM of the top did worse.
YOSYS_AFTER_READ = ('setattr -set fsm_encoding "one-hot" '
                    f"{BITSTREAM_NAME}.accel.sequencer/fsm_state")


def _nextpnr_opts(seed, routed_netlist, extra=()):
    opts = f"--seed {seed} --report {BITSTREAM_NAME}.report.json --timing-allow-fail"
    if routed_netlist:
        opts += f" --write {BITSTREAM_NAME}.routed.json"
    return " ".join([opts, *extra])


#: ``lut_mapping="abc"`` (ECP5): ``synth_ecp5`` up to its ``map_luts`` step, the classic ABC's
#: LUT mapping, then ``synth_ecp5`` from ``map_cells`` on (what
#: :func:`lowbit.boards.toolchain.implement` falls back to where abc9 stops).
CLASSIC_ABC = dict(synth_opts="-run :map_luts",
                   script_after_synth=("techmap -map +/lattice/latches_map.v; "
                                       "abc -dress -lut 4:7; clean; "
                                       f"synth_ecp5 -top {BITSTREAM_NAME} -run map_cells:"))


def _routed_netlist(routed_netlist, profile):
    """``routed_netlist`` of :func:`build_board`, with ``None`` resolved for ``profile``."""
    if routed_netlist is None:
        return DEVICES[profile.device]["family"] == "ice40"
    if not isinstance(routed_netlist, bool):
        raise TypeError(f"routed_netlist must be a bool or None, not {routed_netlist!r}")
    return routed_netlist


def board_plan(board, *, seed=1, top=None, routed_netlist=None):
    """The Amaranth build plan of :func:`build_board` (elaborated, not run): its ``files`` are
    the design, the constraints, the Yosys script and the build script with the nextpnr
    options (:func:`lowbit.boards.buildcache.board_digest` hashes them).

    Parameters are those of :func:`build_board`.

    Returns
    -------
    amaranth.build.run.BuildPlan
    """
    profile = board_profile(board, top)
    return _prepare(_platform(profile), BoardTop(profile), seed,
                    _routed_netlist(routed_netlist, profile), profile)


def synth_options(profile):
    """The Yosys options of ``profile``'s build (Amaranth's ``synth_opts`` and
    ``script_after_synth``): the LUT mapping's, then the floorplan's ``BEL`` attributes.

    Raises
    ------
    ValueError
        A floorplan that does not fit the profile's device or top
        (:func:`lowbit.boards.floorplan.column_floorplan`).
    """
    synth = dict(CLASSIC_ABC) if profile.lut_mapping == "abc" else {}
    if profile.floorplan:
        t = profile.top
        plan = column_floorplan(profile.device, lanes=t.get("matrix_lanes"),
                                multiplier=t.get("multiplier"),
                                weight_depth=t.get("weight_depth"), hard_lanes=t.get("dsp_lanes"))
        synth["script_after_synth"] = "\n".join(
            [s for s in (synth.get("script_after_synth"), floorplan_script(BITSTREAM_NAME, plan))
             if s])
    return synth


def _prepare(platform, top, seed, routed_netlist, profile):
    synth = synth_options(profile)
    return platform.prepare(top, name=BITSTREAM_NAME, script_after_read=YOSYS_AFTER_READ,
                            nextpnr_opts=_nextpnr_opts(seed, routed_netlist,
                                                       profile.nextpnr_opts), **synth)


def build_board(board="icebreaker", *, seed=1, build_dir=None, do_build=True, progress=None,
                routed_netlist=None, top=None):
    """Build the accelerator for ``board``: bitstream plus resource and timing report.

    Parameters
    ----------
    board : str
        A name from :data:`lowbit.boards.profiles.BOARDS`.
    seed : int
        nextpnr placement seed.
    build_dir : str, optional
        Output directory (default ``build/<board>``).
    do_build : bool
        If false, only elaborate and write the build files (no toolchain needed).
    progress : callable(str), optional
        Receives progress messages.
    routed_netlist : bool or None
        Also write nextpnr's routed design (``--write``) as ``<build_dir>/lowbit.routed.json``
        (its path is the report's ``routed_netlist``), for gate-level simulation
        (``docs/verification.md``, "Gate level"). The bitstream is the same either way.
        ``None`` (default): on the iCE40 boards, whose routed netlists the gate-level check
        simulates (about 13 MB for the iCEBreaker; ``python tests/gatelevel.py --routed
        build/icebreaker/lowbit.routed.json`` checks what ``lowbit build`` wrote), not on the
        ECP5 ones.
    top : dict, optional
        Parameters of :class:`lowbit.hw.top.Accelerator` that replace the profile's
        (:func:`board_profile`; ``lowbit explore top --board B`` sweeps them).

    Returns
    -------
    dict
        The report (also written to ``<build_dir>/report.json``); with ``do_build=False`` only
        the board, parameters and the build plan's file names.

    Raises
    ------
    TypeError
        ``routed_netlist`` neither a bool nor ``None``.
    ValueError
        Unknown board or bad seed.
    ToolchainError
        A toolchain step failed.
    """
    profile = board_profile(board, top)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"Seed must be a non-negative integer, not {seed!r}")
    routed_netlist = _routed_netlist(routed_netlist, profile)
    say = progress or (lambda msg: None)
    setup_toolchain_env()
    build_dir = Path(build_dir or Path("build") / board)
    top = BoardTop(profile)
    platform = _platform(profile)
    report = {"board": board, "title": profile.title, "device": profile.device,
              "part": DEVICES[profile.device]["part"], "seed": seed,
              "clk_freq_mhz": profile.clk_freq / 1e6, "top": top.params,
              "profile_not_used_yet": top.unused}
    say(f"lowbit: elaborating the accelerator for {profile.title}")
    t0 = time.monotonic()
    plan = _prepare(platform, top, seed, routed_netlist, profile)
    if not do_build:
        report["files"] = sorted(plan.files)
        return report
    say(f"lowbit: synthesis, place and route with YoWASP into {build_dir} "
        "(the first run compiles the tools, ~1 min)")
    with _Ticker(say, "building"):
        try:
            products = plan.execute_local(str(build_dir))
        except subprocess.CalledProcessError as e:
            logs = [p for p in (build_dir / f"{BITSTREAM_NAME}.tim",
                                build_dir / f"{BITSTREAM_NAME}.rpt") if p.exists()]
            tail = ""
            for log in logs[::-1]:
                lines = [ln for ln in log.read_text(errors="replace").splitlines()
                         if "ERROR" in ln or "error" in ln.lower()]
                if lines:
                    tail = lines[-1].strip()
                    break
            where = tail or f"see the logs in {build_dir}"
            raise ToolchainError(f"build for {board} failed (exit {e.returncode}): {where}"
                                 ) from None
    del products
    bitstream = build_dir / f"{BITSTREAM_NAME}.{profile.bitstream}"
    if profile.name == "orangecrab":
        _add_dfu_suffix(bitstream)
    family = DEVICES[profile.device]["family"]
    res = parse_nextpnr_report(build_dir / f"{BITSTREAM_NAME}.report.json", family)
    dev = DEVICES[profile.device]
    report.update(
        bitstream=str(bitstream), bitstream_bytes=bitstream.stat().st_size,
        seconds=round(time.monotonic() - t0, 1),
        resources={
            "lcs": {"used": res["lcs"], "total": dev["lcs"]},
            "dsps": {"used": res["dsps"], "total": dev["dsps"]},
            "rams": {"used": res["rams"], "total": dev["rams"]},
            "spram": {"used": res["spram"], "total": dev["spram"]},
        },
        fmax=res["fmax"],
        timing_met=all(v["achieved"] >= v["constraint"] for v in res["fmax"].values()),
    )
    if "ffs" in res:
        report["resources"]["ffs"] = {"used": res["ffs"], "total": dev["lcs"]}
    if routed_netlist:
        report["routed_netlist"] = str(build_dir / f"{BITSTREAM_NAME}.routed.json")
    timing = build_dir / f"{BITSTREAM_NAME}.tim"
    if timing.is_file():
        report["timing_report"] = str(timing)
    (build_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


_RESOURCE_NAMES = {
    "ice40": {"lcs": "logic cells (LC)", "dsps": "SB_MAC16", "rams": "EBR (4 kbit)",
              "spram": "SPRAM (256 kbit)"},
    "ecp5": {"lcs": "LUT4", "ffs": "flip-flops", "dsps": "MULT18X18D", "rams": "DP16KD (18 kbit)",
             "spram": "SPRAM"},
}


#: Logic-cell use (fraction of the device) from which :func:`format_report` warns: the placer
#: struggles and timing degrades near a full device, and a small change will no longer fit.
LC_WARN_FRACTION = 0.95


def format_report(report):
    """Render a build report as a plain-text table: resources, Fmax per clock domain, the
    bitstream and the timing report's file, and a warning at :data:`LC_WARN_FRACTION` or more
    of the device's logic cells (LUT4s on ECP5)."""
    family = DEVICES[report["device"]]["family"]
    names = _RESOURCE_NAMES[family]
    lines = [f"{report['title']} — {report['part']}, seed {report['seed']}, "
             f"{report['seconds']} s", "",
             f"{'resource':<22}{'used':>8}{'of':>8}{'%':>8}"]
    for key, val in report["resources"].items():
        if key == "spram" and family == "ecp5":
            continue
        pct = 100 * val["used"] / val["total"] if val["total"] else 0.0
        lines.append(f"{names[key]:<22}{val['used']:>8}{val['total']:>8}{pct:>7.1f}%")
    lines += ["", f"{'clock domain':<40}{'Fmax MHz':>10}{'target MHz':>12}{'':>6}"]
    for clk, v in report["fmax"].items():
        ok = "ok" if v["achieved"] >= v["constraint"] else "FAIL"
        lines.append(f"{clk:<40}{v['achieved']:>10.2f}{v['constraint']:>12.2f}{ok:>6}")
    lines += ["", f"bitstream: {report['bitstream']} ({report['bitstream_bytes']} bytes)"]
    if report.get("timing_report"):
        lines.append(f"timing report: {report['timing_report']} (nextpnr's log: Fmax and "
                     "critical path per clock domain)")
    if report.get("profile_not_used_yet"):
        lines.append("profile settings the top does not use yet: "
                     + ", ".join(f"{k}={v}" for k, v in report["profile_not_used_yet"].items()))
    lcs = report["resources"].get("lcs") or {}
    if lcs.get("total") and lcs["used"] >= LC_WARN_FRACTION * lcs["total"]:
        lines.append(f"warning: {names['lcs']} use is {100 * lcs['used'] / lcs['total']:.1f} % "
                     f"(>= {100 * LC_WARN_FRACTION:.0f} %): the device is nearly full, so timing "
                     "suffers and a small change may no longer fit")
    return "\n".join(lines)


#: Smallest file :func:`check_bitstream` takes for a bitstream (the smallest iCE40, the LP384,
#: takes about 7 kB; the header alone is a few dozen bytes).
MIN_BITSTREAM_BYTES = 1024
#: Where the configuration data starts, per family, as icepack and ecppack write it (checked
#: against real builds): both open with a comment block ``FF 00 <text> 00 FF`` (ecppack: NUL
#: after each metadata string, then ``FF``); then the iCE40 sync word ``7E AA 99 7E``, or the
#: ECP5 preamble ``FF FF BD B3``.
BITSTREAM_SYNC = {"ice40": b"\x00\xff\x7e\xaa\x99\x7e", "ecp5": b"\x00\xff\xff\xff\xbd\xb3"}


def check_bitstream(path, family):
    """Check that ``path`` looks like a bitstream of ``family`` (``"ice40"``: icepack's ``.bin``,
    ``"ecp5"``: ecppack's ``.bit``): at least :data:`MIN_BITSTREAM_BYTES`, the comment header
    and the family's sync word (:data:`BITSTREAM_SYNC`) within the first 4 KiB.

    Raises
    ------
    FlashError
        With the reason (empty, too small, or no header / sync word: not a bitstream of this
        family).
    """
    path = Path(path)
    size = path.stat().st_size
    if size < MIN_BITSTREAM_BYTES:
        raise FlashError(f"{path} is {'empty' if size == 0 else f'only {size} bytes'}: not a "
                         "bitstream; rebuild it with `lowbit build`")
    with open(path, "rb") as f:
        head = f.read(4096)
    if not head.startswith(b"\xff\x00") or BITSTREAM_SYNC[family] not in head:
        names = {"ice40": "iCE40", "ecp5": "ECP5"}
        other = [k for k, sync in BITSTREAM_SYNC.items() if k != family and sync in head]
        what = f"an {names[other[0]]} bitstream" if other else "not a bitstream"
        raise FlashError(f"{path} is {what} (no {names[family]} header and sync word); rebuild "
                         "it with `lowbit build`")


def _check_build_report(build_dir, board, bitstream):
    """Refuse a bitstream whose ``report.json`` says it was built for another board, or whose size
    differs from the one the build recorded. Without a readable report there is nothing to
    compare (the bitstream check still applies)."""
    try:
        report = json.loads((build_dir / "report.json").read_text())
    except (OSError, ValueError):
        return
    if not isinstance(report, dict):
        return
    built_for = report.get("board")
    if built_for is not None and built_for != board:
        where = build_dir / "report.json"
        raise FlashError(f"{bitstream} was built for board {built_for!r} ({where}), not "
                         f"{board!r}; run `lowbit build --board {board}` or pass "
                         f"--board {built_for}")
    expected = report.get("bitstream_bytes")
    size = bitstream.stat().st_size
    if isinstance(expected, int) and expected != size and \
            Path(str(report.get("bitstream", ""))).name == bitstream.name:
        raise FlashError(f"{bitstream} has {size} bytes but its build wrote {expected} "
                         f"({build_dir / 'report.json'}); rebuild it with `lowbit build --board "
                         f"{board}`")


def flash_board(board="icebreaker", *, build_dir=None):
    """Program ``board`` with the bitstream in ``build_dir`` using amaranth-boards' programmer.

    Before the programmer runs, the bitstream is checked (:func:`check_bitstream`: not empty, the
    device family's header) and, where ``lowbit build`` left a ``report.json`` beside it, that
    the build was for ``board`` and wrote a file of this size.

    Raises
    ------
    ValueError
        Unknown board.
    FlashError
        No bitstream (build first), a file that is not a bitstream of the board's family, a
        build for another board, the programmer tool is not installed, or programming failed
        (most often: the board is not connected).
    """
    from amaranth.build.run import LocalBuildProducts

    profile = get_board(board)
    build_dir = Path(build_dir or Path("build") / board)
    bitstream = build_dir / f"{BITSTREAM_NAME}.{profile.bitstream}"
    if not bitstream.is_file():
        raise FlashError(f"no bitstream at {bitstream}; run `lowbit build --board {board}` first")
    check_bitstream(bitstream, DEVICES[profile.device]["family"])
    _check_build_report(build_dir, board, bitstream)
    tool = os.environ.get(profile.programmer_env, profile.programmer)
    if shutil.which(tool) is None:
        raise FlashError(f"programmer {tool!r} not found on PATH; install it (e.g. Debian "
                         f"package {'fpga-icestorm' if tool == 'iceprog' else tool}) or set "
                         f"{profile.programmer_env}")
    platform = _platform(profile)
    try:
        platform.toolchain_program(LocalBuildProducts(str(build_dir)), BITSTREAM_NAME)
    except subprocess.CalledProcessError as e:
        raise FlashError(f"{tool} failed (exit {e.returncode}); is the {profile.title} "
                         "connected and accessible?") from None
    except OSError as e:
        raise FlashError(f"could not run {tool}: {e}") from None


def _stderr(msg):
    print(msg, file=sys.stderr, flush=True)
