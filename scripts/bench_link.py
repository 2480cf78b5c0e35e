"""Benchmark the host link: UART, HostLink (parser + framer + frame buffer) and the first top.

Blocks: ``uart`` (receiver + transmitter, 1 Mbaud at 12 MHz), ``link`` (HostLink with a
512-byte frame buffer and a PING handler behind it) and ``top`` (the accelerator top with its
UART, per-device scratchpad). Each configuration is implemented out of context
(:func:`lowbit.boards.toolchain.implement`) per device and seed; the table gives LCs / LUT4s
(``lcs_block``: minus the wrapper estimate), DSPs, block RAMs, SPRAMs and the median Fmax over
seeds, plus the link's payload throughput at each board profile's rate (stop and wait: one
request, one reply; computed from the frame sizes of :mod:`lowbit.sim.link`) and the digits
demo's bytes per image and link-bound images/s per board (:func:`lowbit.boards.demo.link_traffic`).

Usage::

    python scripts/bench_link.py                        # all four devices, seeds 1 2 3
    python scripts/bench_link.py --quick                # up5k only, one seed
    python scripts/bench_link.py --devices hx8k --seeds 1 2 --blocks top
    python scripts/bench_link.py --link-only            # the per-board link table only (fast;
                                                        # rewrites only its entry of the JSON)

Writes ``docs/bench/link.json``.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

from amaranth.hdl import Module  # noqa: E402
from amaranth.lib import stream, wiring  # noqa: E402
from amaranth.lib.wiring import In, Out  # noqa: E402

from lowbit.boards import toolchain  # noqa: E402
from lowbit.hw.link import HostLink, PingHandler  # noqa: E402
from lowbit.hw.top import Accelerator  # noqa: E402
from lowbit.hw.uart import UART, uart_period  # noqa: E402
from lowbit.sim import link as L  # noqa: E402

#: Per-device top parameters: SPRAM scratchpad on UP5K, block RAM elsewhere.
TOP_PARAMS = {
    "up5k": dict(use_spram=True, scratch_bytes=131072),
    "hx8k": dict(scratch_bytes=4096),
    "ecp5-25f": dict(scratch_bytes=16384),
    "ecp5-85f": dict(scratch_bytes=65536),
}


class LinkEcho(wiring.Component):
    """HostLink (parser, framer, 512-byte frame buffer, CRC) answering every command with a
    PING echo, so that only byte streams are ports."""
    i: In(stream.Signature(8))
    o: Out(stream.Signature(8))

    def elaborate(self, platform):
        m = Module()
        m.submodules.link = link = HostLink(frame_bytes=512, timeout_cycles=120_000)
        m.submodules.ping = ping = PingHandler()
        wiring.connect(m, link.command, ping.command)
        wiring.connect(m, wiring.flipped(self.i), link.i)
        wiring.connect(m, link.o, wiring.flipped(self.o))
        return m


BLOCKS = {
    "uart": lambda dev: UART(clk_freq=12e6, baud=1_000_000),
    "link": lambda dev: LinkEcho(),
    "top": lambda dev: Accelerator(clk_freq=12e6, baud=1_000_000, frame_bytes=512,
                                   **TOP_PARAMS[dev]),
}


def board_links():
    """Per board: the profile's baud, payload throughput of full frames, and the digits demo's
    bytes per image through the driver and link-bound images/s (BFP and discrete, where the
    profile runs them; input quantised on the host)."""
    from lowbit.boards import demo
    rows = []
    for name, profile in demo.BOARDS.items():
        params = demo.board_top(name)
        baud = params["baud"]
        row = {"board": name, "clock_mhz": profile.clk_freq / 1e6, "baud": baud,
               "cycles_per_bit": str(uart_period(profile.clk_freq, baud,
                                                 ddr=params.get("uart_ddr", False))),
               "uart_ddr": params.get("uart_ddr", False),
               **throughput(baud, params.get("frame_bytes", 512))}
        from lowbit.boards.driver import Accelerator
        column = Accelerator.model(**params).design.column()
        for variant in demo.VARIANTS:
            net = demo.prepare_network(variant, column)[1]
            if demo.board_fit(name, net):
                continue
            per_image = demo.link_traffic(params, net)
            row[variant] = {"bytes_per_image": round(per_image, 2),
                            "link_images_per_s": round(demo.link_rate(baud, per_image))}
        rows.append(row)
    return rows


def throughput(baud, frame_bytes):
    """Payload bytes/s of MEM_WRITE and MEM_READ with full frames, stop and wait, 10 bits/byte.

    Ignores the device's processing time between request and reply (a few cycles per frame)
    and the host's turnaround.
    """
    n_w = frame_bytes - 4
    write = len(L.encode_request(L.Opcode.MEM_WRITE, L.mem_write_payload(0, bytes(n_w))))
    write += len(L.encode_reply(L.Status.OK))
    read = len(L.encode_request(L.Opcode.MEM_READ, L.mem_read_payload(0, frame_bytes)))
    read += len(L.encode_reply(L.Status.OK, bytes(frame_bytes)))
    byte_rate = baud / 10
    return {"mem_write_Bps": round(byte_rate * n_w / write),
            "mem_read_Bps": round(byte_rate * frame_bytes / read),
            "line_Bps": round(byte_rate)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", nargs="+", default=list(toolchain.DEVICES),
                    choices=list(toolchain.DEVICES))
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--blocks", nargs="+", default=list(BLOCKS), choices=list(BLOCKS))
    ap.add_argument("--quick", action="store_true", help="up5k only, one seed")
    ap.add_argument("--link-only", action="store_true",
                    help="only the per-board link table (no place and route)")
    ap.add_argument("--output", default=str(Path(__file__).resolve().parent.parent
                                            / "docs" / "bench" / "link.json"))
    args = ap.parse_args(argv)
    if args.quick:
        args.devices, args.seeds = ["up5k"], args.seeds[:1]

    links = board_links()
    print("board                clock  baud     cycles/bit  MEM_WRITE kB/s  BFP bytes/image "
          "(link-bound/s)  discrete bytes/image (link-bound/s)")
    for r in links:
        cells = [f"{r[v]['bytes_per_image']:6.1f} ({r[v]['link_images_per_s']:5d})" if v in r
                 else "     -        " for v in ("bfp", "discrete")]
        print(f"{r['board']:<20} {r['clock_mhz']:4g}  {r['baud'] / 1e6:g} M    "
              f"{r['cycles_per_bit']:<10}  {r['mem_write_Bps'] / 1e3:8.1f}        {cells[0]}"
              f"          {cells[1]}")
    if args.link_only:
        # Only the boards' entry of the file changes; the place-and-route rows stay.
        out = Path(args.output)
        try:
            old = json.loads(out.read_text())
        except (OSError, ValueError):
            old = {"rows": []}
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({**old, "boards": links}, indent=2) + "\n")
        print(f"wrote the boards' entry of {out}")
        return 0
    rows = []
    for dev in args.devices:
        ceiling = toolchain.DEVICES[dev]
        for block in args.blocks:
            runs = []
            for seed in args.seeds:
                res = toolchain.implement(BLOCKS[block](dev), dev, seed=seed,
                                          name=f"link_{block}",
                                          progress=lambda s: print("  " + s, file=sys.stderr))
                runs.append(res)
            fmaxes = [r["fmax_mhz"] for r in runs if r["fmax_mhz"] is not None]
            first = runs[0]
            row = {
                "block": block, "device": dev, "seeds": args.seeds,
                "params": TOP_PARAMS[dev] if block == "top" else {},
                "lcs": first["lcs"], "lcs_block": first["lcs_block"],
                "lcs_fraction": round(first["lcs"] / ceiling["lcs"], 4),
                "dsps": first["dsps"], "rams": first["rams"], "spram": first["spram"],
                "fmax_mhz_median": round(statistics.median(fmaxes), 2) if fmaxes else None,
                "fmax_mhz_all": fmaxes,
                "seconds": sum(r["seconds"] for r in runs),
            }
            rows.append(row)
            print(f"{block:<5} {dev:<9} LCs {row['lcs']:>5} (block {row['lcs_block']:>5}, "
                  f"{100 * row['lcs_fraction']:.1f}% of device)  DSP {row['dsps']}  "
                  f"RAM {row['rams']}  SPRAM {row['spram']}  "
                  f"Fmax {row['fmax_mhz_median']} MHz (median of {len(fmaxes)})", flush=True)

    tp = throughput(1_000_000, 512)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": "python scripts/bench_link.py " + " ".join(
        sys.argv[1:] if argv is None else argv), "rows": rows, "throughput_1mbaud": tp,
        "boards": links},
        indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
