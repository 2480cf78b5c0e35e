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
reset; ``cover`` = every ``Cover`` of the harness is reached within the depth, which shows that
the assumptions leave the interesting behaviour possible) and depth.

Engines abstracted by a harness (:class:`_FreeGrand`, :class:`_FreeLUT`) keep the real
engine's signature and are substituted only while the handler elaborates; their outputs are
free inputs of the harness, so a property proved with them holds for any engine behaviour.
"""

import dataclasses
import functools
from unittest import mock

from amaranth.hdl import (
    Assert,
    Assume,
    Cover,
    Elaboratable,
    Module,
    Mux,
    ResetSignal,
    Signal,
    Value,
)
from amaranth.lib import data, wiring

import lowbit.hw.engines
from lowbit.hw.bfp import BFPColumn
from lowbit.hw.discrete import DiscreteUnit
from lowbit.hw.engines import GrandHandler, LUTHandler
from lowbit.hw.floatmac import FloatMAC
from lowbit.hw.grand import GrandUnit, sample_layout
from lowbit.hw.link import HostLink, PingHandler
from lowbit.hw.lut import TransferLUT
from lowbit.hw.quantiser import Quantiser
from lowbit.hw.top import MemoryHandler, Scratchpad
from lowbit.hw.uart import UARTReceiver
from lowbit.sim.link import Opcode, Status

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
    is a flag (``avail``) set from the read pointer and cleared only by a taken byte and the
    receiving states, and induction starts from unreachable states where it is stale for longer
    than any practical depth.
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
    ``BOUND = timeout_cycles + 2 * frame_bytes + 14`` cycles (the timeout, then the longest
    reply: 4 header bytes, 16 payload bytes read out of the frame buffer at one per two cycles,
    2 CRC bytes, plus the checks, the dispatch and the answer; 42 cycles from a 16-byte PING's
    last byte to idle).
    """

    FRAME_BYTES = 16
    TIMEOUT = 6
    BOUND = TIMEOUT + 2 * FRAME_BYTES + 14

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


class _OutputStream(Elaboratable):
    """Stream rules on the output ``o`` of a block whose every input (configuration included,
    changed at any time) is free; ``restart`` names an input that restarts the block like a
    reset (the cycle after it is exempt)."""

    def __init__(self, factory, name, restart=None):
        self.dut = factory()
        self.ports = free_ports(self.dut)
        self.name, self.restart = name, restart

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        restart = None if self.restart is None else getattr(dut, self.restart)
        hist = _History(m, restart=restart)
        stream_rules(m, hist, dut.o, self.name)
        m.d.comb += Cover(dut.o.valid & dut.o.ready)
        return m


#: Reduced parameters of the arithmetic blocks for their stream-rule proofs: the handshake
#: logic is the same at every size, the datapath (which the solver must carry) is small.
BfpStreams = functools.partial(_OutputStream, functools.partial(
    BFPColumn, lanes=4, block=2, width=4, exp_bits=4, max_blocks=2, frac_bits=1, rand_bits=2),
    "bfp_o")
DiscreteStreams = functools.partial(_OutputStream, functools.partial(
    DiscreteUnit, lanes=2, width=4, code_bits=2), "discrete_o")
QuantiserStreams = functools.partial(_OutputStream, functools.partial(
    Quantiser, lanes=1, block=2, w_max=4, exp_bits=6, rand_bits=2, mult_bits=2, code_bits=1),
    "quantiser_o")
GrandStreams = functools.partial(_OutputStream, functools.partial(
    GrandUnit, lanes=1, modes=("trunc2",)), "grand_o", restart="seed_load")
FloatMacStreams = functools.partial(_OutputStream, functools.partial(
    FloatMAC, lanes=1, fmt="f16", max_len=4), "floatmac_o")


class _HandlerContract:
    """The :class:`lowbit.hw.link.CommandSignature` contract seen from the link, as assertions on a
    handler's ``command`` interface, with an environment (the link) that obeys it (assumed).

    Environment: ``cmd`` and ``arg`` obey the stream rules, and ``arg`` offers at most the
    command's ``length`` bytes. Handler: exactly one ``resp`` per command, ``data`` only after
    it and exactly ``resp.length`` bytes of it before the next command is taken, stream rules
    on ``resp`` and ``data``.

    ``seq_en`` (the layer sequencer owns the engine, ``lowbit.hw.top``: ``seq_en = sequencer.busy``)
    is high only between commands: the sequencer runs inside the host's ``RUN`` command, which
    another handler answers, and the host is stop-and-wait.

    Members (signals of the harness): ``arg_index`` (arg bytes taken in this command),
    ``answered``, ``owed`` (reply bytes still due), and the transfer strobes ``cmd_fire``,
    ``arg_fire``, ``resp_fire``, ``data_fire``.
    """

    def __init__(self, m, hist, c, name, *, max_length, seq_en=None):
        self.cmd_fire = c.cmd.valid & c.cmd.ready
        self.arg_fire = c.arg.valid & c.arg.ready
        self.resp_fire = c.resp.valid & c.resp.ready
        self.data_fire = c.data.valid & c.data.ready
        assume_stream_rules(m, hist, c.cmd, f"{name}_cmd")
        assume_stream_rules(m, hist, c.arg, f"{name}_arg")
        stream_rules(m, hist, c.resp, f"{name}_resp")
        stream_rules(m, hist, c.data, f"{name}_data")
        m.d.comb += Assume(c.cmd.payload.length <= max_length)
        length = Signal(16, name=f"{name}_length")
        self.arg_index = Signal(16, name=f"{name}_arg_index")
        self.answered = Signal(name=f"{name}_answered", init=1)
        self.owed = Signal(16, name=f"{name}_owed")
        with m.If(self.cmd_fire):
            m.d.sync += [length.eq(c.cmd.payload.length), self.arg_index.eq(0),
                         self.answered.eq(0)]
        with m.If(self.arg_fire):
            m.d.sync += self.arg_index.eq(self.arg_index + 1)
        with m.If(c.arg.valid):
            m.d.comb += Assume(self.arg_index < length)
        with m.If(self.resp_fire):
            m.d.sync += [self.answered.eq(1), self.owed.eq(c.resp.payload.length)]
        with m.If(self.data_fire):
            m.d.sync += self.owed.eq(self.owed - 1)
        with m.If(self.cmd_fire):
            m.d.comb += Assert(self.answered & (self.owed == 0),
                               f"{name}: command taken before the last one was answered")
        with m.If(c.resp.valid):
            m.d.comb += Assert(~self.answered, f"{name}: a second response")
        with m.If(c.data.valid):
            m.d.comb += Assert(self.answered & (self.owed != 0),
                               f"{name}: reply byte beyond the announced length")
        if seq_en is not None:
            with m.If(seq_en):
                m.d.comb += Assume(~c.cmd.valid & self.answered & (self.owed == 0))


class _FreeGrand(GrandUnit):
    """A :class:`lowbit.hw.grand.GrandUnit` stand-in (same signature) whose ``o`` is driven by free
    harness inputs: it may offer any sample at any time, so a property proved with it holds for
    every behaviour of the real unit."""

    def __init__(self, *, lanes, free_valid, free_payload):
        super().__init__(lanes=lanes)
        self._free = (free_valid, free_payload)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += [self.o.valid.eq(self._free[0]), self.o.payload.eq(self._free[1])]
        return m


class _AbstractGrandHandler(GrandHandler):
    """A :class:`lowbit.hw.engines.GrandHandler` elaborated around :class:`_FreeGrand`."""

    def __init__(self, *, lanes, frame_bytes, free_valid, free_payload):
        super().__init__(lanes=lanes, frame_bytes=frame_bytes)
        self.unit = _FreeGrand(lanes=lanes, free_valid=free_valid, free_payload=free_payload)

    def elaborate(self, platform):
        with mock.patch.object(lowbit.hw.engines, "GrandUnit", lambda **kwargs: self.unit):
            m = super().elaborate(platform)
        assert m.submodules.grand is self.unit
        return m


class GrandSampleBuffer(Elaboratable):
    """``GrandHandler(lanes=2, frame_bytes=16)`` with the unit abstracted to a free stream: the
    handler's one-beat sample buffer never overflows or underflows, and it keeps the command
    contract (:class:`_HandlerContract`).

    The harness counts samples in the buffer: ``lanes`` per beat taken from the unit, minus
    one per sample sent (2 bytes in f16 format, 4 in f32, from the command's format byte) and
    one per sample handed to the sequencer on ``seq``, emptied by a successful ``GRAND_SEED``.
    A beat may be taken only when the count is 0 (the
    buffer is empty: nothing overwritten) and a reply byte only when it is positive (no sample
    sent twice or from an empty buffer). Commands, payloads, the mode and the unit's samples
    are free.
    """

    LANES = 2

    def __init__(self):
        self.free_valid = Signal(name="unit_valid")
        self.free_payload = Signal(data.ArrayLayout(sample_layout, self.LANES),
                                   name="unit_payload")
        self.dut = _AbstractGrandHandler(lanes=self.LANES, frame_bytes=16,
                                         free_valid=self.free_valid,
                                         free_payload=self.free_payload)
        self.ports = free_ports(self.dut) + [self.free_valid, Value.cast(self.free_payload)]

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        hist = _History(m)
        c = dut.command
        k = _HandlerContract(m, hist, c, "grand", max_length=40, seq_en=dut.seq_en)
        # Sample values only flow through to reply bytes; the handler's control never reads
        # them, so fixing them shrinks the problem without losing a behaviour of the buffer.
        m.d.comb += Assume(Value.cast(self.free_payload) == 0)
        # The format byte of a GRAND_SAMPLES command (its third payload byte).
        samples_cmd = Signal()
        f32 = Signal()
        # The dispatcher routes only these two opcodes here.
        m.d.comb += Assume((c.cmd.payload.opcode == Opcode.GRAND_SEED) |
                           (c.cmd.payload.opcode == Opcode.GRAND_SAMPLES))
        with m.If(k.cmd_fire):
            m.d.sync += samples_cmd.eq(c.cmd.payload.opcode == Opcode.GRAND_SAMPLES)
        with m.If(k.arg_fire & samples_cmd & (k.arg_index == 2)):
            m.d.sync += f32.eq(c.arg.payload[0])
        held = Signal(range(2 * self.LANES + 2))
        byte = Signal(2)
        unit_fire = Signal()
        m.d.comb += unit_fire.eq(dut.unit.o.valid & dut.unit.o.ready)
        last_byte = byte == Mux(f32, 3, 1)
        seq_fire = dut.seq.valid & dut.seq.ready
        with m.If(unit_fire):
            m.d.sync += held.eq(held + self.LANES)
        with m.If(k.data_fire):
            m.d.sync += byte.eq(Mux(last_byte, 0, byte + 1))
            with m.If(last_byte):
                m.d.sync += held.eq(held - 1)
        with m.If(seq_fire):
            m.d.sync += held.eq(held - 1)
        with m.If(k.resp_fire & ~samples_cmd & (c.resp.payload.status == Status.OK)):
            m.d.sync += held.eq(0)             # GRAND_SEED discards buffered samples
        with m.If(unit_fire):
            m.d.comb += Assert(held == 0, "grand: sample buffer overwritten")
        with m.If(c.data.valid | dut.seq.valid):
            m.d.comb += Assert(held != 0, "grand: sample from an empty sample buffer")
        m.d.comb += Assert(held <= self.LANES, "grand: sample buffer over capacity")
        m.d.comb += Cover(k.data_fire & last_byte & (held == 1) & samples_cmd)
        return m


class _FreeLUT(TransferLUT):
    """A :class:`lowbit.hw.lut.TransferLUT` stand-in (same signature, byte tables only) whose lookup
    handshakes are free harness inputs: ``i.ready`` and ``o.valid`` at any time (the results
    are zeros; their values never steer the handler). ``i_write`` is always ready, as in the
    real engine."""

    def __init__(self, *, lanes, tables, i_ready, o_valid):
        super().__init__(lanes=lanes, tables=tables, wide_tables=0)
        self._free = (i_ready, o_valid)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += [self.i.ready.eq(self._free[0]), self.o.valid.eq(self._free[1]),
                     self.i_write.ready.eq(1)]
        return m


class _AbstractLUTHandler(LUTHandler):
    """A :class:`lowbit.hw.engines.LUTHandler` elaborated around :class:`_FreeLUT`."""

    def __init__(self, *, lanes, tables, i_ready, o_valid):
        super().__init__(lanes=lanes, tables=tables)
        self.unit = _FreeLUT(lanes=lanes, tables=tables, i_ready=i_ready, o_valid=o_valid)

    def elaborate(self, platform):
        with mock.patch.object(lowbit.hw.engines, "TransferLUT", lambda **kwargs: self.unit):
            m = super().elaborate(platform)
        assert m.submodules.lut is self.unit
        return m


class LUTGatherBuffer(Elaboratable):
    """``LUTHandler(lanes=2, tables=1)`` with the engine abstracted to free lookup handshakes:
    the handler's gather buffer (codes collected into one lookup beat) never holds more than
    ``lanes`` codes, every reply byte of a ``LUT_APPLY`` comes from a code already taken, and
    the command contract holds (:class:`_HandlerContract`). Commands and payloads are free."""

    LANES = 2

    def __init__(self):
        self.i_ready = Signal(name="engine_i_ready")
        self.o_valid = Signal(name="engine_o_valid")
        self.dut = _AbstractLUTHandler(lanes=self.LANES, tables=1, i_ready=self.i_ready,
                                       o_valid=self.o_valid)
        self.ports = free_ports(self.dut) + [self.i_ready, self.o_valid]

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        hist = _History(m)
        c = dut.command
        k = _HandlerContract(m, hist, c, "lut", max_length=12, seq_en=dut.seq_en)
        m.d.comb += Assume((c.cmd.payload.opcode == Opcode.LUT_WRITE) |
                           (c.cmd.payload.opcode == Opcode.LUT_APPLY))
        # Codes of a LUT_APPLY (payload bytes after the table byte) taken after the response,
        # minus reply bytes sent.
        pending = Signal(range(16))
        with m.If(k.cmd_fire):
            m.d.sync += pending.eq(0)
        with m.Elif(k.answered & k.arg_fire & ~k.data_fire):
            m.d.sync += pending.eq(pending + 1)
        with m.Elif(k.data_fire & ~(k.answered & k.arg_fire)):
            m.d.sync += pending.eq(pending - 1)
        with m.If(c.data.valid):
            m.d.comb += Assert(pending != 0, "lut: reply byte without its code")
        m.d.comb += Assert(pending <= self.LANES, "lut: gather buffer over capacity")
        m.d.comb += Cover(k.data_fire & (pending == self.LANES))
        return m


@dataclasses.dataclass(frozen=True)
class Proof:
    """One SymbiYosys task: harness factory, mode (``prove`` / ``bmc`` / ``cover``), depth,
    slow marker."""
    harness: object
    mode: str
    depth: int
    slow: bool = False


#: ``slow``: left to ``-m slow`` (CI's slow run has every proof). The quick suite keeps a sample
#: of each kind: k-induction of the stream rules (UART, link, column, discrete unit, quantiser),
#: a bounded check (``link_arg_stream``) and a cover (``lut_gather_buffer_cover``), plus the
#: negative controls of tests/test_formal.py.
PROOFS = {
    "uart_rx_stream": Proof(UartRxStream, "prove", 12),
    "link_streams": Proof(LinkStreams, "prove", 16),
    "link_arg_stream": Proof(functools.partial(LinkStreams, arg=True), "bmc", 20),
    "link_frame_buffer": Proof(LinkFrameBuffer, "bmc", 26, slow=True),
    "link_idle": Proof(LinkReturnsToIdle, "bmc", 64, slow=True),
    "link_idle_deep": Proof(LinkReturnsToIdle, "bmc", 78, slow=True),
    "lut_streams": Proof(LutStreams, "prove", 10, slow=True),
    "memory_bounds": Proof(MemoryBounds, "bmc", 20, slow=True),
    "grand_bound": Proof(GrandBound, "bmc", 24, slow=True),
    "grand_streams": Proof(GrandStreams, "prove", 4, slow=True),
    "bfp_streams": Proof(BfpStreams, "prove", 4),
    "discrete_streams": Proof(DiscreteStreams, "prove", 4),
    "quantiser_streams": Proof(QuantiserStreams, "prove", 4),
    "floatmac_streams": Proof(FloatMacStreams, "prove", 4, slow=True),
    "grand_sample_buffer": Proof(GrandSampleBuffer, "bmc", 20, slow=True),
    "grand_sample_buffer_cover": Proof(GrandSampleBuffer, "cover", 20, slow=True),
    "lut_gather_buffer": Proof(LUTGatherBuffer, "bmc", 20, slow=True),
    "lut_gather_buffer_cover": Proof(LUTGatherBuffer, "cover", 20),
}
