"""Digests of the logic of every block and every board's top: proof that a refactor changed none.

A digest is :func:`benchcommon.netlist_digest`: SHA-256 of the RTLIL without ``src`` attributes
(file names and line numbers move when code moves; the logic does not). The designs are every
registered block with its defaults and with each device's benchmark parameters, every board's top
(as ``lowbit build`` elaborates it) and the demo's simulated top. Because the benchmark run cache
keys on the same digest, equal digests also mean no row of docs/PERFORMANCE.md goes stale.

Usage::

    python scripts/netlist_digests.py -o before.json          # record
    python scripts/netlist_digests.py --compare before.json   # exit 1 and list what changed
"""

import argparse
import json
import sys

import bench
from benchcommon import netlist_digest

from lowbit.boards.build import top_parameters
from lowbit.boards.demo import SIM_TOP
from lowbit.boards.profiles import BOARDS
from lowbit.boards.toolchain import DEVICES
from lowbit.hw.registry import available_blocks, block_class


def designs():
    """``(label, component factory)`` of every design whose logic is recorded."""
    out = []
    for name in available_blocks():
        cls = block_class(name)
        out.append((f"{name}:defaults", lambda cls=cls: cls()))
        for device in DEVICES:
            params = bench.block_params(name, device)
            if params:
                label = f"{name}:{device}:" + ",".join(f"{k}={v!r}" for k, v in
                                                        sorted(params.items()))
                out.append((label, lambda cls=cls, params=params: cls(**params)))
    top = block_class("top")
    for board, profile in BOARDS.items():
        params = top_parameters(profile)[0]
        out.append((f"top:board:{board}", lambda params=params: top(**params)))
    out.append(("top:demo-sim", lambda: top(**SIM_TOP)))
    return out


def digests(say=lambda msg: None):
    result = {}
    for label, make in designs():
        result[label] = netlist_digest(make())
        say(f"{label}: {result[label]}")
    return result


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", help="write the digests as JSON")
    p.add_argument("--compare", metavar="FILE", help="compare with digests written before")
    args = p.parse_args(argv)
    now = digests(say=lambda msg: print(msg, file=sys.stderr, flush=True))
    if args.output:
        with open(args.output, "w") as f:
            json.dump(now, f, indent=1, sort_keys=True)
    if args.compare:
        with open(args.compare) as f:
            before = json.load(f)
        changed = sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k))
        for k in changed:
            print(f"changed: {k}: {before.get(k)} -> {now.get(k)}")
        print(f"{len(now) - len(changed)} of {len(before.keys() | now.keys())} designs unchanged")
        return 1 if changed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
