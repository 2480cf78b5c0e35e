"""The ``lowbit`` command line.

Commands
--------
``lowbit verilog [BLOCK] [--param k=v ...] [-o FILE]``
    Verilog of one block (default: the accelerator top).
``lowbit build [--board B] [--seed N] [--build-dir D]``
    Bitstream plus resource and timing report (table on stdout, JSON in the build directory).
``lowbit flash [--board B] [--build-dir D]``
    Program a board with the bitstream built by ``lowbit build``.
``lowbit boards``
    The supported boards and their device profiles.
``lowbit demo digits [--port P] [--simulator S] [--images N] [--variant V] [--board B]``
    The digits MLP end to end: accuracy, bit-exactness against the golden model, throughput.
``lowbit train digits [--variant V] [--epochs N] [--backend B] [--port P]``
    Train the digits MLP with the accelerator's arithmetic (see ``docs/training.md``).

Every failure exits with a non-zero status and a one-line reason on stderr.
"""

import argparse
import json
import sys

from lowbit import __version__

from .profiles import BOARDS, DEFAULT_BOARD
from .toolchain import DEVICES, ToolchainError, setup_toolchain_env

__all__ = ["main"]


class CommandError(Exception):
    """A user-facing error: printed as one line, exit status 1."""


def _say(msg):
    print(msg, file=sys.stderr, flush=True)


def cmd_verilog(args):
    from amaranth.back import verilog

    from lowbit.hw.registry import BLOCKS, available_blocks, build_block, parse_params
    if args.list:
        for name in available_blocks():
            print(f"{name:<10} {BLOCKS[name][2]}")
        return 0
    params = parse_params(args.param)
    component = build_block(args.block, **params)
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


def cmd_boards(args):
    rows = []
    for name, p in BOARDS.items():
        dev = DEVICES[p.device]
        rows.append({"board": name, "title": p.title, "part": dev["part"],
                     "clock_mhz": p.clk_freq / 1e6, "profile": p.top, "programmer": p.programmer,
                     "default": name == DEFAULT_BOARD, "notes": p.notes})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        star = " (default)" if r["default"] else ""
        prof = ", ".join(f"{k}={v}" for k, v in r["profile"].items())
        print(f"{r['board']}{star}: {r['title']}, {r['clock_mhz']:g} MHz, programmer "
              f"{r['programmer']}\n    profile: {prof}\n    {r['notes']}")
    return 0


def cmd_demo(args):
    from .demo import MismatchError, UsageError, format_result, run_digits
    try:
        result = run_digits(args.variant, simulator=args.simulator, port=args.port,
                            images=args.images, board=args.board, build_dir=args.build_dir,
                            progress=_say)
    except UsageError as e:
        _say(f"lowbit demo: error: {e}")
        return 2
    except MismatchError as e:
        _say(f"lowbit demo: MISMATCH: {e}")
        return 1
    print(result.to_json() if args.json else format_result(result))
    return 0


def _parser():
    parser = argparse.ArgumentParser(
        prog="lowbit",
        description="Low-precision neural-network arithmetic for small FPGAs.")
    parser.add_argument("--version", action="version", version=f"lowbit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("verilog", help="write the Verilog of a block or of the top")
    p.add_argument("block", nargs="?", default="top",
                   help="block name (see `lowbit verilog --list`); default: top")
    p.add_argument("--param", "-p", action="append", default=[], metavar="K=V",
                   help="block parameter, repeatable (values are Python literals)")
    p.add_argument("-o", "--output", help="output file (default: stdout)")
    p.add_argument("--list", action="store_true", help="list the available blocks and exit")
    p.set_defaults(func=cmd_verilog)

    p = sub.add_parser("build", help="build a bitstream and print its resource/timing report")
    p.add_argument("--board", "-b", default=DEFAULT_BOARD, choices=list(BOARDS),
                   help=f"target board (default: {DEFAULT_BOARD})")
    p.add_argument("--seed", type=int, default=1, help="placement seed (default: 1)")
    p.add_argument("--build-dir", help="output directory (default: build/BOARD)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("flash", help="program a board with the built bitstream")
    p.add_argument("--board", "-b", default=DEFAULT_BOARD, choices=list(BOARDS),
                   help=f"target board (default: {DEFAULT_BOARD})")
    p.add_argument("--build-dir", help="directory of the bitstream (default: build/BOARD)")
    p.set_defaults(func=cmd_flash)

    p = sub.add_parser("boards", help="list the supported boards and their device profiles")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.set_defaults(func=cmd_boards)

    p = sub.add_parser(
        "demo", help="run a demo workload end to end (digits: the 64-32-10 MLP)",
        description="Train (or load from the cache) the digits MLP, convert it, run test images "
                    "on a simulated top or a board, check every output against the golden "
                    "model (exit 1 on a mismatch) and print accuracy and throughput.")
    p.add_argument("demo", choices=["digits"], help="the demo to run")
    p.add_argument("--port", help="serial port of a board (default: a simulated top)")
    p.add_argument("--simulator", choices=["cxxrtl", "amaranth", "model"],
                   help="simulated device: compiled CXXRTL top (default if a C++ compiler is "
                        "installed), Amaranth's simulator, or the protocol model")
    p.add_argument("--images", type=int,
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
    return parser


def main(argv=None):
    """Entry point of the ``lowbit`` console script; returns the exit status."""
    setup_toolchain_env()
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        _say("lowbit: interrupted")
        return 130
    except (CommandError, ValueError, TypeError, ImportError, OSError, RuntimeError,
            ToolchainError) as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        _say(f"lowbit: error: {msg}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
