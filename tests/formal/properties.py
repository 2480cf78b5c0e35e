"""Formal property harnesses (DESIGN §6 level 4) for SymbiYosys.

Each harness is an ``Elaboratable`` that instantiates a block with reduced parameters, leaves
its inputs free (top-level ports: the solver chooses them every cycle, reset included), constrains
the environment with ``Assume`` only where the block's contract needs it, and states the
property with ``Assert`` (``amaranth.hdl.Assert`` / ``Assume`` / ``Cover``, Amaranth 0.5).

Stream rule (every checked output stream): if ``valid`` was high and ``ready`` low in the
previous cycle, and that cycle was not a reset (or another documented restart), then ``valid``
is still high and ``payload`` is unchanged.

:data:`PROOFS` lists the harnesses with their SymbiYosys mode (``prove`` = k-induction, which
holds for every reachable state and every input sequence; ``bmc`` = bounded model check from
reset) and depth.
"""

import dataclasses
import functools

from amaranth.hdl import Assert, Assume, Cover, Elaboratable, Module, ResetSignal, Signal, Value
from amaranth.lib import wiring

from hw.grand import GrandUnit
from hw.link import HostLink, PingHandler
from hw.lut import TransferLUT
from hw.top import MemoryHandler, Scratchpad
from hw.uart import UARTReceiver

__all__ = ["PROOFS", "Proof", "stream_rules", "assume_stream_rules", "free_ports"]


def _past(m, value, name):
    reg = Signal.like(value, name=name, reset_less=True)
    m.d.sync += reg.eq(value)
    return reg


class _History:
    """Registers of the previous cycle shared by the rules of one harness."""

    def __init__(self, m, restart=None):
        self.m = m
        self.started = Signal(name="started", reset_less=True)
        m.d.sync += self.started.eq(1)
        restart = ResetSignal() if restart is None else ResetSignal() | restart
        # The previous cycle was a restart: the state is the reset state now, valid may drop.
        self.prev_restart = _past(m, restart, "prev_restart")

    @property
    def checkable(self):
        return self.started & ~self.prev_restart


def stream_rules(m, hist, stream, name, *, assume=False, exempt=None):
    """Assert (or, for an environment-driven stream, assume) the valid/ready rules.

    ``exempt``, if given, is a signal that lifts the rule for the cycle after it is high (a
    documented abandonment of the stream).
    """
    prev_valid = _past(m, stream.valid, f"{name}_prev_valid")
    prev_ready = _past(m, stream.ready, f"{name}_prev_ready")
    payload = Value.cast(stream.payload)
    prev_payload = _past(m, payload, f"{name}_prev_payload")
    prop = Assume if assume else Assert
    check = hist.checkable & prev_valid & ~prev_ready
    if exempt is not None:
        check &= ~_past(m, exempt, f"{name}_prev_exempt")
    with m.If(check):
        m.d.comb += [prop(stream.valid, f"{name}: valid dropped before ready"),
                     prop(payload == prev_payload,
                          f"{name}: payload changed while waiting")]


def assume_stream_rules(m, hist, stream, name):
    stream_rules(m, hist, stream, name, assume=True)


def free_ports(component):
    """The input signals of ``component``'s signature: left undriven, the solver picks them."""
    ports = []
    for _, member, value in component.signature.flatten(component):
        if member.flow == wiring.In:
            ports.append(Value.cast(value))
    return ports


def _fsm_state(module, name="fsm"):
    """``(state signal, encoding)`` of FSM ``name`` of an elaborated ``Module``.

    Reads Amaranth's private FSM bookkeeping: the blocks do not export their parser state, and
    this harness must not change them.
    """
    module._flush_ctrl()
    fsm = module._generated[name]
    return fsm._data["signal"], fsm.encoding


class UartRxStream(Elaboratable):
    """``UARTReceiver(divisor=4)``: ``o`` obeys the stream rules for any ``rx`` waveform."""

    def __init__(self):
        self.dut = UARTReceiver(divisor=4)
        self.ports = free_ports(self.dut)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = self.dut
        hist = _History(m)
        stream_rules(m, hist, self.dut.o, "uart_rx_o")
        m.d.comb += Cover(self.dut.o.valid & self.dut.o.ready)
        return m


class LinkStreams(Elaboratable):
    """``HostLink(frame_bytes=20, timeout_cycles=4)``: stream rules on ``o`` (reply bytes),
    ``command.cmd`` (or, with ``arg=True``, ``command.arg``), with a host and a handler that
    themselves obey the stream rules on ``i`` / ``resp`` / ``data`` (assumed) and otherwise
    behave arbitrarily. ``arg`` may be abandoned once the handler's response is accepted (the
    documented early stop); the rule applies until then.

    ``o`` and ``cmd`` are proved by k-induction; ``arg`` only by BMC, because its ``valid``
    comes from an ``executing`` flag that only the idle state clears, and induction starts from
    unreachable states where it is stale for longer than any practical depth.
    """

    FRAME_BYTES = 20

    def __init__(self, *, arg=False):
        self.dut = _LinkProbe(frame_bytes=self.FRAME_BYTES, timeout_cycles=4)
        self.ports = free_ports(self.dut)
        self.arg = arg

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        hist = _History(m)
        if not self.arg:
            stream_rules(m, hist, dut.o, "link_o")
            stream_rules(m, hist, dut.command.cmd, "link_cmd")
        # A handler may answer before reading all of ``arg``; the rest is then discarded, so
        # the arg stream is abandoned from the accepted response until the next command.
        c = dut.command
        abandoned = Signal()
        with m.If(c.cmd.valid & c.cmd.ready):
            m.d.sync += abandoned.eq(0)
        with m.Elif(c.resp.valid & c.resp.ready):
            m.d.sync += abandoned.eq(1)
        if self.arg:
            stream_rules(m, hist, c.arg, "link_arg",
                         exempt=abandoned | (c.resp.valid & c.resp.ready))
        assume_stream_rules(m, hist, dut.i, "link_i")
        assume_stream_rules(m, hist, dut.command.resp, "link_resp")
        assume_stream_rules(m, hist, dut.command.data, "link_data")

        return m


class LinkFrameBuffer(Elaboratable):
    """``HostLink(frame_bytes=17, timeout_cycles=4)``: no frame-buffer overflow.

    Every write is at address ``n`` where ``n`` payload bytes were already written in the
    current frame, and ``n < frame_bytes`` (the depth is deliberately not a power of two, so an
    overflow would not be hidden by address wrap-around). The handler side is free (stream
    rules assumed).
    """

    FRAME_BYTES = 17

    def __init__(self):
        self.dut = _LinkProbe(frame_bytes=self.FRAME_BYTES, timeout_cycles=4)
        self.ports = free_ports(self.dut)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        hist = _History(m)
        assume_stream_rules(m, hist, dut.i, "link_i")
        assume_stream_rules(m, hist, dut.command.resp, "link_resp")
        assume_stream_rules(m, hist, dut.command.data, "link_data")
        written = Signal(range(self.FRAME_BYTES + 2))
        with m.If(dut.probe_idle):
            m.d.sync += written.eq(0)
        with m.Elif(dut.probe_wen & (written <= self.FRAME_BYTES)):
            m.d.sync += written.eq(written + 1)
        with m.If(dut.probe_wen):
            m.d.comb += [Assert(dut.probe_waddr == written, "frame buffer: address skipped"),
                         Assert(written < self.FRAME_BYTES, "frame buffer overflow")]
        m.d.comb += Cover(dut.probe_wen & (written == self.FRAME_BYTES - 1))
        return m


class _LinkProbe(HostLink):
    """A HostLink whose elaboration also exposes its parser state and frame-buffer writes."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.probe_idle = Signal()
        self.probe_wen = Signal()
        self.probe_waddr = Signal(16)

    def elaborate(self, platform):
        m = super().elaborate(platform)
        state, encoding = _fsm_state(m)
        wp = m.submodules.buf.write_ports[0]
        m.d.comb += [self.probe_idle.eq(state == encoding["IDLE"]), self.probe_wen.eq(wp.en),
                     self.probe_waddr.eq(wp.addr)]
        return m


class LinkReturnsToIdle(Elaboratable):
    """``HostLink(frame_bytes=16, timeout_cycles=6)`` + ``PingHandler``, reply always taken:
    whatever bytes came before, once the host stops sending the parser is idle again within
    ``BOUND = timeout_cycles + frame_bytes + 12`` cycles (the timeout, then the longest reply:
    4 header + 16 payload + 2 CRC bytes, plus dispatch).
    """

    FRAME_BYTES = 16
    TIMEOUT = 6
    BOUND = TIMEOUT + FRAME_BYTES + 12

    def __init__(self):
        self.dut = _LinkProbe(frame_bytes=self.FRAME_BYTES, timeout_cycles=self.TIMEOUT)
        self.ports = [self.dut.i.valid, self.dut.i.payload, self.dut.o.ready]

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        m.submodules.ping = ping = PingHandler()
        wiring.connect(m, dut.command, ping.command)
        m.d.comb += Assume(dut.o.ready)
        quiet = Signal(range(self.BOUND + 1))
        with m.If(dut.i.valid):
            m.d.sync += quiet.eq(0)
        with m.Elif(quiet != self.BOUND):
            m.d.sync += quiet.eq(quiet + 1)
        with m.If(~ResetSignal()):
            m.d.comb += Assert((quiet < self.BOUND) | dut.probe_idle,
                               "link still busy long after the host went quiet")
        m.d.comb += Cover((quiet == self.BOUND - 1) & ~dut.probe_idle)
        return m


class LutStreams(Elaboratable):
    """``TransferLUT(lanes=1, tables=1, wide_tables=1)``: stream rules on ``o`` and ``o_wide``
    while tables are written at any time."""

    def __init__(self):
        self.dut = TransferLUT(lanes=1, tables=1, wide_tables=1)
        self.ports = free_ports(self.dut)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = self.dut
        hist = _History(m)
        stream_rules(m, hist, self.dut.o, "lut_o")
        stream_rules(m, hist, self.dut.o_wide, "lut_o_wide")
        return m


class MemoryBounds(Elaboratable):
    """``MemoryHandler(size=48, frame_bytes=16)`` on a 64-byte ``Scratchpad``: the handler
    never writes outside its ``size`` bytes (word addresses ``< size / 2``; the memory is larger
    so an overflow would show), and its ``resp`` / ``data`` streams obey the rules, for any
    command stream that obeys them."""

    SIZE = 48

    def __init__(self):
        self.scratch = Scratchpad(size=64)
        self.dut = MemoryHandler(size=self.SIZE, frame_bytes=16,
                                 addr_width=self.scratch.addr_width)
        self.ports = [v for v in free_ports(self.dut) if v is not self.dut.mem.rdata]

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        m.submodules.scratch = self.scratch
        wiring.connect(m, dut.mem, self.scratch.port)
        hist = _History(m)
        c = dut.command
        assume_stream_rules(m, hist, c.cmd, "mem_cmd")
        assume_stream_rules(m, hist, c.arg, "mem_arg")
        stream_rules(m, hist, c.resp, "mem_resp")
        stream_rules(m, hist, c.data, "mem_data")
        with m.If(dut.mem.we):
            m.d.comb += Assert(dut.mem.addr < self.SIZE // 2, "scratchpad write out of range")
        m.d.comb += Cover(dut.mem.we & (dut.mem.addr == self.SIZE // 2 - 1))
        return m


class GrandBound(Elaboratable):
    """``GrandUnit(lanes=1, modes={normal, trunc2, trunc3, uniform})``: every result is within
    ±5.8125 (f16 and f32 patterns, NaN/Inf excluded), with the run-time mode, seed loads and
    back-pressure free; and the stream rules hold on ``o`` (a seed load restarts the unit like
    a reset, so the cycle after one is exempt).

    Normal-144 (up to 12 · 5.8125 / √12 in principle) and raw bits are not bounded by 5.8125
    and are not built here; a mode code without a datapath runs as normal.
    """

    F16_MAX = 0x45D0          # 5.8125 as binary16
    F32_MAX = 0x40BA0000      # 5.8125 as binary32

    def __init__(self):
        self.dut = GrandUnit(lanes=1, modes=("trunc2", "trunc3", "uniform"))
        self.ports = free_ports(self.dut)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        hist = _History(m, restart=dut.seed_load)
        stream_rules(m, hist, dut.o, "grand_o")
        lane = dut.o.payload[0]
        with m.If(dut.o.valid):
            m.d.comb += [Assert(lane.f16[:15] <= self.F16_MAX, "f16 result beyond 5.8125"),
                         Assert(lane.f32[:31] <= self.F32_MAX, "f32 result beyond 5.8125")]
        m.d.comb += Cover(dut.o.valid & (lane.f16[:15] == self.F16_MAX))
        return m


@dataclasses.dataclass(frozen=True)
class Proof:
    """One SymbiYosys task: harness factory, mode (``prove`` / ``bmc``), depth, slow marker."""
    harness: object
    mode: str
    depth: int
    slow: bool = False


PROOFS = {
    "uart_rx_stream": Proof(UartRxStream, "prove", 12),
    "link_streams": Proof(LinkStreams, "prove", 16),
    "link_arg_stream": Proof(functools.partial(LinkStreams, arg=True), "bmc", 20),
    "link_frame_buffer": Proof(LinkFrameBuffer, "bmc", 26),
    "link_idle": Proof(LinkReturnsToIdle, "bmc", 46),
    "link_idle_deep": Proof(LinkReturnsToIdle, "bmc", 60, slow=True),
    "lut_streams": Proof(LutStreams, "prove", 10),
    "memory_bounds": Proof(MemoryBounds, "bmc", 20),
    "grand_bound": Proof(GrandBound, "bmc", 24),
}
