"""The ``lowbit`` command line.

Commands
--------
``lowbit verilog [BLOCK] [--param k=v ...] [-o FILE]``
    Verilog of one block (default: the accelerator top).
``lowbit build [--board B] [--seed N] [--build-dir D]``
    Bitstream plus resource and timing report (table on stdout, JSON in the build directory).
``lowbit flash [--board B] [--build-dir D]``
    Program a board with the bitstream built by ``lowbit build``.
``lowbit boards [--json]``
    The supported boards, their device profiles and their UART and LED pins.
``lowbit demo digits [--port P] [--simulator S] [--images N] [--variant V] [--board B]``
    The digits MLP end to end: accuracy, bit-exactness against the golden model, throughput.
``lowbit train digits [--variant V] [--epochs N] [--backend B] [--port P]``
    Train the digits MLP with the accelerator's arithmetic (see ``docs/training.md``).
``lowbit explore BLOCK [--device D | --board B] [--param k=v1,v2 ...] [--seeds N ...]``
    Build every combination of a block's (or a board top's) parameters, in parallel on Dask
    distributed, and tabulate resources, Fmax, throughput, fit and clock
    (:mod:`lowbit.boards.explore`, ``docs/explore.md``).

Every failure exits with a non-zero status and a one-line reason on stderr: status 2 for a bad
option or parameter (checked before anything runs: argparse types, and the block parameters of
``lowbit verilog``), 1 for a failure while running. Output cut short by its reader (``lowbit
boards --json | head``) ends quietly with status 0.
"""

import argparse
import json
import os
import sys

from lowbit import __version__

from .options import baud_rate, int_in
from .profiles import BOARDS, DEFAULT_BOARD
from .toolchain import DEVICES, ToolchainError, setup_toolchain_env

__all__ = ["main"]


class CommandError(Exception):
    """A user-facing error: printed as one line, exit status 1."""


class UsageError(Exception):
    """A bad option or parameter found after parsing: printed as one line, exit status 2."""


def _say(msg):
    print(msg, file=sys.stderr, flush=True)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line: ``lowbit CMD: error: ... (see --help)``."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


# -- argparse types (each raises ArgumentTypeError with a one-line reason; the shared ones are
# in lowbit.boards.options) -------------------------------------------------------------------

def block_name(text):
    """An argparse type: a block of :data:`lowbit.hw.registry.BLOCKS`."""
    from lowbit.hw.registry import BLOCKS
    if text not in BLOCKS:
        raise argparse.ArgumentTypeError(f"unknown block {text!r}; known blocks: "
                                         f"{', '.join(BLOCKS)}")
    return text


def param_pair(text):
    """An argparse type: one ``k=v`` block parameter, as ``(k, v)``."""
    from lowbit.hw.registry import parse_param
    try:
        return parse_param(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _verilog_params(block, pairs):
    """The keyword parameters of ``lowbit verilog BLOCK``: the user's (each at most once, each a
    parameter of the block), plus :data:`lowbit.hw.registry.SYNTHESIS_DEFAULTS` for those the
    block takes and the user left out. Raises :class:`UsageError`."""
    from lowbit.hw.registry import SYNTHESIS_DEFAULTS, block_params
    accepted = [p.name for p in block_params(block)]
    params = {}
    for key, value in pairs:
        if key in params:
            raise UsageError(f"parameter {key!r} is given twice ({key}={params[key]!r} and "
                             f"{key}={value!r})")
        if key not in accepted:
            raise UsageError(f"block {block!r} has no parameter {key!r}; its parameters: "
                             f"{', '.join(accepted)} (see `lowbit verilog --list`)")
        params[key] = value
    for key, value in SYNTHESIS_DEFAULTS.items():
        if key in accepted:
            params.setdefault(key, value)
    return params


def _format_block_list():
    from lowbit.hw.registry import BLOCKS, SYNTHESIS_DEFAULTS, available_blocks, block_params
    lines = []
    for name in available_blocks():
        lines.append(f"{name:<10} {BLOCKS[name][2]}")
        for p in block_params(name):
            default = SYNTHESIS_DEFAULTS.get(p.name, p.default)
            note = "  (for synthesis; the constructor's default: " \
                f"{p.default!r})" if default != p.default else ""
            lines.append(f"    {p.name + '=' + repr(default):<26} {p.valid}{note}")
    return "\n".join(lines)


def cmd_verilog(args):
    from amaranth.back import verilog

    from lowbit.hw.registry import build_block
    if args.list:
        print(_format_block_list())
        return 0
    params = _verilog_params(args.block, args.param)
    try:
        component = build_block(args.block, **params)
    except (TypeError, ValueError) as e:
        raise UsageError(f"block {args.block!r}: {e}") from None
    text = verilog.convert(component, name=f"lowbit_{args.block}", emit_src=False)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
        _say(f"lowbit: wrote {args.output} ({len(text.splitlines())} lines)")
    else:
        sys.stdout.write(text)
    return 0


def cmd_build(args):
    from .build import build_board, format_report
    report = build_board(args.board, seed=args.seed, build_dir=args.build_dir, progress=_say)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_report(report))
    if not report["timing_met"]:
        raise CommandError("timing not met: the bitstream may not work at the board clock "
                           "(see the table above)")
    return 0


def cmd_flash(args):
    from .build import flash_board
    flash_board(args.board, build_dir=args.build_dir)
    _say(f"lowbit: programmed {args.board}")
    return 0


#: What the top's ``leds`` bits show (:class:`lowbit.hw.top.Accelerator`, member ``leds``).
LED_ROLES = ("activity", "error")


def _pin(platform, io):
    """``{"pin": device pin, "connector": "io 0 pin 1" or None, "inverted": bool}`` of the
    single-pin :class:`amaranth.build.Pins` ``io``."""
    name = io.names[0]
    conn = None
    if ":" in name:                       # "io_0:1": pin 1 of connector ("io", 0)
        cname, cpin = name.split(":", 1)
        cn, _, cnum = cname.rpartition("_")
        conn = f"{cn} {cnum} pin {cpin}"
        name = platform.connectors[(cn, int(cnum))].mapping[cpin]
    return {"pin": name, "connector": conn, "inverted": bool(io.invert)}


def board_pins(profile):
    """The UART and LED pins of ``profile``'s build, read from its amaranth-boards platform
    (with the profile's own ``uart`` resource where it adds one, as ``lowbit build`` does).

    Returns
    -------
    dict
        ``{"uart": {"rx": pin, "tx": pin}, "leds": [{"role": ..., **pin}, ...]}`` with pins as
        :func:`_pin` describes; ``leds`` lists the board LEDs the top drives (the first of the
        platform's ``led`` resources, one per bit of the top's ``leds``).
    """
    from amaranth.build import ResourceError

    from .build import _platform
    platform = _platform(profile)
    uart = platform.lookup("uart", 0)
    subs = {sub.name: sub.ios[0] for sub in uart.ios}
    pins = {"uart": {k: _pin(platform, subs[k]) for k in ("rx", "tx")}, "leds": []}
    for i, role in enumerate(LED_ROLES):
        try:
            led = platform.lookup("led", i)
        except ResourceError:
            break
        pins["leds"].append({"role": role, **_pin(platform, led.ios[0])})
    return pins


def _pin_text(p):
    extra = [p["connector"]] if p["connector"] else []
    if p["inverted"]:
        extra.append("active low")
    return p["pin"] + (f" ({', '.join(extra)})" if extra else "")


def cmd_boards(args):
    rows = []
    for name, p in BOARDS.items():
        dev = DEVICES[p.device]
        rows.append({"board": name, "title": p.title, "part": dev["part"],
                     "clock_mhz": p.clk_freq / 1e6, "profile": p.top, "programmer": p.programmer,
                     "default": name == DEFAULT_BOARD, "pins": board_pins(p), "notes": p.notes})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        star = " (default)" if r["default"] else ""
        prof = ", ".join(f"{k}={v}" for k, v in r["profile"].items())
        uart = r["pins"]["uart"]
        leds = ", ".join(f"{led['role']} {_pin_text(led)}" for led in r["pins"]["leds"]) or \
            "none (the board has no plain LED resource)"
        print(f"{r['board']}{star}: {r['title']}, {r['clock_mhz']:g} MHz, programmer "
              f"{r['programmer']}\n    pins: UART rx {_pin_text(uart['rx'])}, tx "
              f"{_pin_text(uart['tx'])}; LEDs {leds}\n    profile: {prof}\n    {r['notes']}")
    return 0


def cmd_demo(args):
    from .demo import MismatchError, format_result, run_digits
    from .demo import UsageError as DemoUsageError
    try:
        result = run_digits(args.variant, simulator=args.simulator, port=args.port,
                            images=args.images, board=args.board, build_dir=args.build_dir,
                            progress=_say, progress_bar=not args.json, baud=args.baud)
    except DemoUsageError as e:
        _say(f"lowbit demo: error: {e}")
        return 2
    except MismatchError as e:
        _say(f"lowbit demo: MISMATCH: {e}")
        return 1
    print(result.to_json() if args.json else format_result(result))
    return 0


def _parser():
    parser = _Parser(
        prog="lowbit",
        description="Low-precision neural-network arithmetic for small FPGAs.")
    parser.add_argument("--version", action="version", version=f"lowbit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("verilog", help="write the Verilog of a block or of the top")
    p.add_argument("block", nargs="?", default="top", type=block_name,
                   help="block name (see `lowbit verilog --list`); default: top")
    p.add_argument("--param", "-p", action="append", default=[], metavar="K=V", type=param_pair,
                   help="block parameter, once each (values are Python literals); blocks with "
                        "a sim_model parameter get sim_model=False (the vendor primitives, for "
                        "synthesis) unless it is given")
    p.add_argument("-o", "--output", help="output file (default: stdout)")
    p.add_argument("--list", action="store_true",
                   help="list the available blocks with their parameters, defaults and valid "
                        "values, and exit")
    p.set_defaults(func=cmd_verilog)

    p = sub.add_parser("build", help="build a bitstream and print its resource/timing report")
    p.add_argument("--board", "-b", default=DEFAULT_BOARD, choices=list(BOARDS),
                   help=f"target board (default: {DEFAULT_BOARD})")
    p.add_argument("--seed", type=int_in(0, 2**31 - 1), default=1,
                   help="placement seed, 0..2^31-1 (default: 1)")
    p.add_argument("--build-dir", help="output directory (default: build/BOARD)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("flash", help="program a board with the built bitstream")
    p.add_argument("--board", "-b", default=DEFAULT_BOARD, choices=list(BOARDS),
                   help=f"target board (default: {DEFAULT_BOARD})")
    p.add_argument("--build-dir", help="directory of the bitstream (default: build/BOARD)")
    p.set_defaults(func=cmd_flash)

    p = sub.add_parser("boards", help="list the supported boards, their device profiles "
                                      "and their UART and LED pins")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.set_defaults(func=cmd_boards)

    p = sub.add_parser(
        "demo", help="run a demo workload end to end (digits: the 64-32-10 MLP)",
        description="Train (or load from the cache) the digits MLP, convert it, run test images "
                    "on a simulated top or a board, check every output against the golden "
                    "model (exit 1 on a mismatch) and print accuracy and throughput.")
    p.add_argument("demo", choices=["digits"], help="the demo to run")
    p.add_argument("--port", help="serial port of a board (default: a simulated top)")
    p.add_argument("--baud", type=baud_rate,
                   help="UART rate of the board's bitstream, with --port (default: the board "
                        "profile's, which IDENTIFY confirms)")
    p.add_argument("--simulator", choices=["cxxrtl", "amaranth", "model"],
                   help="simulated device: compiled CXXRTL top (default if a C++ compiler is "
                        "installed), Amaranth's simulator, or the protocol model")
    p.add_argument("--images", type=int_in(1, 540),
                   help="test images to run, 1..540 (default: 540; 3 in Amaranth's simulator)")
    p.add_argument("--variant", choices=["bfp", "discrete"], default="bfp",
                   help="BFP weights (default) or 3-bit discrete weights")
    p.add_argument("--board", "-b", choices=list(BOARDS),
                   help=f"board profile: of --port (default: {DEFAULT_BOARD}), or the board "
                        "whose own top is simulated (default: the reference simulated top, "
                        "N=16)")
    p.add_argument("--build-dir", default="build",
                   help="directory of the model cache (BUILD_DIR/demo) and build reports "
                        "(default: build)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_demo)

    from .train import add_parser as add_train_parser
    add_train_parser(sub)
    from .explore import add_parser as add_explore_parser
    add_explore_parser(sub)
    return parser


def _quiet_stdout():
    """After the reader of stdout went away: point stdout at /dev/null so that the interpreter's
    final flush does not fail again (the recipe of Python's ``signal`` documentation)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main(argv=None):
    """Entry point of the ``lowbit`` console script; returns the exit status."""
    setup_toolchain_env()
    args = _parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)   # the command, for reports
    try:
        status = args.func(args)
        sys.stdout.flush()            # a closed pipe shows here, not at interpreter exit
        return status
    except BrokenPipeError:
        _quiet_stdout()               # the reader (e.g. `| head`) has all it wanted
        return 0
    except KeyboardInterrupt:
        _say("lowbit: interrupted")
        return 130
    except UsageError as e:
        _say(f"lowbit {args.command}: error: {e}")
        return 2
    except (CommandError, ValueError, TypeError, ImportError, OSError, RuntimeError,
            ToolchainError) as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        _say(f"lowbit: error: {msg}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
