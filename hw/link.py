"""Framed host link: request parser, reply framer and the command interface behind them.

The protocol (frame layout, CRC, statuses, parser rules) is specified by :mod:`lowbit.sim.link`,
whose
:class:`lowbit.sim.link.DeviceModel` is the reference this gateware matches byte for byte; see also
``docs/protocol.md``.

The link does not execute anything itself. After a request frame has been received completely
into the frame buffer and its CRC checked, it offers the command on a :class:`CommandSignature`
interface: a ``cmd`` stream (opcode, payload length), the payload as the ``arg`` byte stream
(read out of the frame buffer), and back the ``resp`` stream (status, reply length) followed by
exactly that many reply bytes on ``data``. A :class:`Dispatcher` routes commands by opcode to
handler components (one per opcode group) and answers unknown opcodes itself; adding an engine
command means adding a handler and a row to the dispatch table (see :mod:`lowbit.hw.top`).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from lowbit.sim.link import MAX_LENGTH, SOF_REPLY, SOF_REQUEST, Status

from .common import any_of
from .common import check_bool as _check_bool
from .common import check_int as _check_int
from .crc import CRC16
from .ports import load_or_step
from .uart import quiet_on_error

__all__ = ["CMD_LAYOUT", "RESP_LAYOUT", "ARG_BYTES", "CommandSignature", "HostLink",
           "Dispatcher", "PingHandler"]

#: Payload bytes the link keeps in :attr:`HostLink.args` (the longest fixed part of a request:
#: REG_WRITE's index and value, MEM_READ's address and count).
ARG_BYTES = 6
#: A command offered by the link: the opcode and the payload length in bytes.
CMD_LAYOUT = data.StructLayout({"opcode": 8, "length": 16})
#: A handler's answer: status and the number of reply payload bytes that follow on ``data``.
RESP_LAYOUT = data.StructLayout({"status": 8, "length": 16})


class CommandSignature(wiring.Signature):
    """The command interface, seen from the side that issues commands (the link).

    Members
    -------
    cmd : Out(stream.Signature(CMD_LAYOUT))
        One command per frame with a good CRC.
    arg : Out(stream.Signature(8))
        The request payload, in order, ``length`` bytes at most. A handler may stop reading
        early (e.g. after finding an error); the rest is discarded.
    resp : In(stream.Signature(RESP_LAYOUT))
        Exactly one answer per command.
    data : In(stream.Signature(8))
        Exactly ``resp.length`` reply payload bytes, after ``resp``.
    """

    def __init__(self):
        super().__init__({
            "cmd": Out(stream.Signature(CMD_LAYOUT)),
            "arg": Out(stream.Signature(8)),
            "resp": In(stream.Signature(RESP_LAYOUT)),
            "data": In(stream.Signature(8)),
        })



class HostLink(wiring.Component):
    """Request parser and reply framer of the host protocol.

    Receives request bytes on ``i``, stores the payload in a frame buffer
    (``lib.memory.Memory``, ``frame_bytes`` deep), checks the CRC and only then offers the
    command on ``command``; sends the reply frame on ``o`` with the CRC computed on the fly.
    Frames with a bad CRC, a length over ``frame_bytes`` or an inter-byte timeout are answered
    by the link itself (``BAD_CRC``, ``BAD_LENGTH``, ``TRUNCATED``) and never reach
    ``command``. While a command executes and its reply is sent, ``i`` is not ready (the host
    waits for each reply). One CRC unit serves both directions.

    For timing, decisions are taken from registers: the tests of the header's length and of the
    CRC's high byte are acted on in the cycle after the byte (states LEN_CHK and CHECK),
    ``i.ready`` and ``arg.valid`` are flip-flops, the payload is read out on ``arg`` at one byte
    per two cycles (from a registered address), an answer on ``resp`` is taken a cycle before the
    header starts, and reply bytes leave ``o`` from a register (loaded when it is empty or being
    taken, so up to one byte per cycle), entering the CRC as they are taken.

    Parameters
    ----------
    frame_bytes : int
        Largest request payload, the depth of the frame buffer (16 to 65535).
    timeout_cycles : int
        Inter-byte timeout inside a frame, in clock cycles (at least 2).
    arg_register : bool
        The ``arg`` payload comes from a register of the frame buffer's output, at one byte per
        three cycles, instead of from the buffer's output itself (one per two): no handler's
        logic follows a block RAM's clock-to-out (ECP5 at high clocks). Default ``False``.

    Members
    -------
    i : In(stream.Signature(8))
        Request bytes.
    o : Out(stream.Signature(8))
        Reply bytes.
    command : Out(CommandSignature())
        Commands for the handlers.
    skipped : Out(16)
        Bytes skipped while idle (saturating counter).
    errors : Out(16)
        Error replies sent (saturating counter).
    reply_ok, reply_error : Out(1)
        Pulse when a reply header with status OK / another status is sent.
    args : Out(8 * ARG_BYTES)
        The first :data:`ARG_BYTES` payload bytes of the command on ``command``, byte ``k`` at
        bits ``8k`` to ``8k + 7``, taken as the frame comes in (valid from ``cmd.valid`` until
        the reply is sent; bytes past the payload's end are left from earlier frames). The
        handlers read their fixed arguments here instead of collecting them from ``arg``
        into registers of their own.

    Raises
    ------
    TypeError, ValueError
        For a parameter of the wrong kind or out of range.
    """

    @quiet_on_error
    def __init__(self, *, frame_bytes=512, timeout_cycles=120_000, arg_register=False):
        self._frame_bytes = _check_int("Frame buffer size", frame_bytes, 16, MAX_LENGTH)
        self._timeout_cycles = _check_int("Timeout in cycles", timeout_cycles, 2, 1 << 30)
        self._arg_register = _check_bool("arg_register", arg_register)
        super().__init__({
            "i": In(stream.Signature(8)),
            "o": Out(stream.Signature(8)),
            "command": Out(CommandSignature()),
            "skipped": Out(16),
            "errors": Out(16),
            "reply_ok": Out(1),
            "reply_error": Out(1),
            "args": Out(8 * ARG_BYTES),
        })

    @property
    def frame_bytes(self):
        return self._frame_bytes

    @property
    def arg_register(self):
        return self._arg_register

    @property
    def timeout_cycles(self):
        return self._timeout_cycles

    def elaborate(self, platform):
        m = Module()
        m.submodules.crc = crc = CRC16()
        m.submodules.buf = buf = Memory(shape=8, depth=self._frame_bytes, init=[])
        wr = buf.write_port()
        rd = buf.read_port(transparent_for=())

        cmd, arg, resp, rdata = (self.command.cmd, self.command.arg, self.command.resp,
                                 self.command.data)
        byte = self.i.payload
        take = Signal()          # a request byte is accepted this cycle
        m.d.comb += take.eq(self.i.valid & self.i.ready)

        opcode = Signal(8)
        # Request payload length: at most frame_bytes once the frame is accepted (a longer one
        # is drained), so it has fewer bits than the header's field, and so do the command's
        # length and the handlers' copies (synthesis sees the upper bits are zero).
        length = Signal(self._frame_bytes.bit_length())
        # Bytes still to come: payload (or the drained payload of a frame too long for the
        # buffer), or reply payload (down-counter, so that the tests against it are compares
        # with constants).
        remaining = Signal(range(MAX_LENGTH + 1))
        # The frame is too long for the buffer: its payload is counted through PAYLOAD without
        # being written and its CRC bytes are taken and not checked, so the drain needs no
        # states and no ``length + 2`` adder of its own.
        drain = Signal()
        # Byte index within the reply header / CRC: 0 from the end of a reply (the CRC's high
        # byte) to the next reply's header, so the request's states and their decisions (CHECK's
        # CRC test among them) never reach its enable.
        step = Signal(2)
        crc_lo = Signal(8)
        status = Signal(8)
        timer = Signal(range(self._timeout_cycles))
        # ``timer == timeout_cycles - 1``, kept as a flag beside the timer (set as it counts to
        # that value, cleared wherever the timer restarts).
        timed_out = Signal()
        # The byte-wide halves of the request's 16-bit tests, taken with the first byte so that
        # the second byte's decision is one byte-wide compare: at LEN_LO whether the low byte
        # is zero and whether it exceeds frame_bytes' low byte, at CRC_LO whether it matches the
        # CRC's low byte (the CRC is complete from CRC_LO on). The length's and the CRC high
        # byte's outcome is acted on in LEN_CHK and CHECK, the cycle after the byte was taken.
        lo_zero = Signal()
        lo_over = Signal()
        lo_match = Signal()
        len_zero = Signal()      # the length is zero (from LEN_HI, for LEN_CHK)
        answered = Signal()      # RESPONSE took the answer
        fb_lo, fb_hi = self._frame_bytes & 0xFF, self._frame_bytes >> 8

        # ``i.ready`` is a flag, the states IDLE to CRC_HI (cleared as they are left, set as
        # they are entered), not a decode of the state.
        rx_ready = Signal(init=1)
        m.d.comb += self.i.ready.eq(rx_ready)

        # Frame buffer read-out as the arg stream, one byte per two cycles: ``arg.valid`` is a
        # flip-flop (``avail``), and the read address is the register ``ptr``. A byte taken
        # steps ``ptr`` and clears ``avail``; in the next cycle (``stale``) the buffer reads the
        # byte at the new ``ptr`` and ``avail`` is set again if ``ptr != length``. So no adder
        # reaches the buffer's address or ``arg.valid``, and a handler's ready reaches only
        # flip-flops' enables. While the frame comes in, ``ptr`` is the write address (one
        # counter for both: the read-out starts after the CRC).
        ptr = Signal(range(self._frame_bytes + 1))
        ptr_clear = Signal()
        ptr_step = Signal()
        avail = Signal()
        stale = Signal()
        take_arg = Signal()
        # With ``arg_register`` the payload is a register of the buffer's output, loaded every
        # cycle, and ``avail`` is set a cycle later (``stale`` delayed): the byte at the new
        # ``ptr`` reaches it two cycles after the step. The first byte is there already: ``ptr``
        # is 0 from CRC_LO on, at least three cycles before DISPATCH.
        if self._arg_register:
            arg_q = Signal(8, reset_less=True)
            stale_q = Signal()
            m.d.sync += [arg_q.eq(rd.data), stale_q.eq(stale)]
            payload, refill = arg_q, stale_q
        else:
            payload, refill = rd.data, stale
        m.d.comb += [
            take_arg.eq(arg.valid & arg.ready),
            arg.valid.eq(avail),
            arg.payload.eq(payload),
            rd.addr.eq(ptr),
            wr.data.eq(byte),
            wr.addr.eq(ptr),
            cmd.payload.opcode.eq(opcode),
            cmd.payload.length.eq(length),
        ]
        m.d.sync += stale.eq(take_arg)
        with m.If(ptr_clear):
            m.d.sync += ptr.eq(0)
        with m.Elif(ptr_step | take_arg):
            m.d.sync += ptr.eq(ptr + 1)
        # Set when the command is taken (``ptr`` is 0 then) and in the cycle after a byte was
        # taken, cleared as a byte is taken and while receiving. Written as gates, not as a
        # choice, so that synthesis makes no enable of the handlers' ready: it meets only the
        # flip-flop's last LUT.
        avail_set = Signal()
        m.d.comb += avail_set.eq(refill | (cmd.valid & cmd.ready))
        m.d.sync += avail.eq(~rx_ready & ~take_arg
                             & ((avail_set & (ptr != length)) | (~avail_set & avail)))

        # One copy of the fixed arguments for all handlers; data, so no reset.
        args = Signal(8 * ARG_BYTES, reset_less=True)
        m.d.comb += self.args.eq(args)

        # The saturating counters stop at 0xFFFF: the carry out of the increment says so, where
        # a compare with 0xFFFF would take five LUTs.
        skipped_inc = Signal(17)
        errors_inc = Signal(17)
        m.d.comb += [skipped_inc.eq(self.skipped + 1), errors_inc.eq(self.errors + 1)]

        # remaining's loads (the request's length, the answer's) and its count down as one
        # sum whose addend carries the load's select (lowbit.hw.ports.load_or_step: the
        # choice merges into the carry chain's LUTs); reply() clears it. The loads are made on
        # every cycle of their state (LEN_HI, RESPONSE), not only on the handshake that leaves
        # it: the last one is the handshake's, and the load select depends on no handshake.
        # The load select is a flag (the states LEN_HI and RESPONSE until the answer is taken),
        # not a decode of the state, as it drives the carry chain.
        rem_load = Signal()
        rem_len = Signal()           # the load is the request's length (LEN_HI), not the answer's
        rem_dec = Signal()
        rem_clear = Signal()
        new_length = Signal(16)
        m.d.comb += new_length.eq(Cat(crc_lo, byte))
        with m.If(rem_load | rem_dec):
            m.d.sync += remaining.eq(load_or_step(remaining, -1, rem_load,
                                                  Mux(rem_len, new_length, resp.payload.length)))
        with m.If(rem_clear):
            m.d.sync += remaining.eq(0)

        # Reply bytes leave from a register (``obuf``, ``ofull``), loaded when it is empty or
        # being taken, and the CRC takes them from there as they are taken (``ocrc``: the byte
        # counts), so that no handler's reply byte reaches the CRC in the cycle it is offered.
        # The CRC's low byte is loaded only once the register is empty (the last counted byte
        # is in the CRC).
        # The register's input is the handler's byte where ``in_data`` (a flag for state DATA),
        # else the link's own byte (``own``): one multiplexer between a handler and ``obuf``.
        obuf = Signal(8)
        ofull = Signal()
        ocrc = Signal()
        oload = Signal()
        in_data = Signal()
        own = Signal(8)
        own_crc = Signal()       # the link's own byte counts in the CRC
        osend = Signal()
        m.d.comb += [self.o.valid.eq(ofull), self.o.payload.eq(obuf),
                     oload.eq(~ofull | self.o.ready)]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += ofull.eq(0)
        with m.If(self.o.valid & self.o.ready & ocrc):
            m.d.comb += [crc.en.eq(1), crc.data.eq(obuf)]
        m.d.comb += rdata.ready.eq(in_data & oload)
        with m.If(rdata.valid & rdata.ready):
            m.d.comb += [rem_dec.eq(1), osend.eq(1)]
            with m.If(remaining == 1):
                m.d.sync += in_data.eq(0)
        with m.If(osend):
            m.d.sync += [obuf.eq(Mux(in_data, rdata.payload, own)), ofull.eq(1),
                         ocrc.eq(in_data | own_crc)]

        def send(payload, counted):
            m.d.comb += [osend.eq(1), own.eq(payload), own_crc.eq(counted)]

        def reply(code, *, loading=True):
            # ``loading``: rem_load may be set (LEN_HI); elsewhere it is clear already, and
            # leaving it alone keeps CHECK's CRC test out of its enable.
            m.d.comb += rem_clear.eq(1)
            m.d.sync += [status.eq(code), rx_ready.eq(0)]
            if loading:
                m.d.sync += rem_load.eq(0)
            m.next = "HEADER"

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += ptr_clear.eq(1)
                m.d.sync += [timer.eq(0), timed_out.eq(0), drain.eq(0)]
                with m.If(take):
                    with m.If(byte == SOF_REQUEST):
                        m.d.comb += crc.clear.eq(1)
                        m.next = "OPCODE"
                    with m.Elif(~skipped_inc[16]):
                        m.d.sync += self.skipped.eq(skipped_inc)

            # Receiving: every state below restarts the timer on each byte.
            for state in ("OPCODE", "LEN_LO", "LEN_HI", "PAYLOAD", "CRC_LO", "CRC_HI"):
                with m.State(state):
                    if state == "LEN_HI":
                        m.d.comb += rem_len.eq(1)
                    with m.If(take):
                        m.d.sync += [timer.eq(0), timed_out.eq(0)]
                    with m.Elif(timed_out):
                        reply(Mux(drain, Status.BAD_LENGTH, Status.TRUNCATED))
                    with m.Else():
                        m.d.sync += [timer.eq(timer + 1),
                                     timed_out.eq(timer == self._timeout_cycles - 2)]
                    with m.If(take):
                        if state in ("OPCODE", "LEN_LO", "LEN_HI", "PAYLOAD"):
                            m.d.comb += [crc.en.eq(1), crc.data.eq(byte)]
                        if state == "OPCODE":
                            m.d.sync += opcode.eq(byte)
                            m.next = "LEN_LO"
                        elif state == "LEN_LO":
                            m.d.sync += [crc_lo.eq(byte),      # free until CRC_LO
                                         lo_zero.eq(byte == 0), lo_over.eq(byte > fb_lo),
                                         rem_load.eq(1)]
                            m.next = "LEN_HI"
                        elif state == "LEN_HI":
                            # new_length > frame_bytes, new_length == 0, for LEN_CHK
                            m.d.sync += [length.eq(new_length),
                                         drain.eq((byte > fb_hi) | ((byte == fb_hi) & lo_over)),
                                         len_zero.eq((byte == 0) & lo_zero),
                                         rx_ready.eq(0), rem_load.eq(0)]
                            m.next = "LEN_CHK"
                        elif state == "PAYLOAD":
                            m.d.comb += [wr.en.eq(~drain), rem_dec.eq(1)]
                            m.d.comb += ptr_step.eq(1)
                            with m.Switch(ptr):
                                for k in range(ARG_BYTES):
                                    with m.Case(k):
                                        m.d.sync += args.word_select(k, 8).eq(byte)
                            with m.If(remaining == 1):
                                m.next = "CRC_LO"
                        elif state == "CRC_LO":
                            m.d.sync += [crc_lo.eq(byte), lo_match.eq(byte == crc.crc[:8])]
                            m.next = "CRC_HI"
                        elif state == "CRC_HI":
                            # The high byte's difference from the CRC's, for CHECK.
                            m.d.sync += [crc_lo.eq(byte ^ crc.crc[8:]), rx_ready.eq(0)]
                            m.next = "CHECK"
                    if state == "CRC_LO":
                        # The read-out starts at 0: rd.data holds byte 0 from DISPATCH on.
                        m.d.comb += ptr_clear.eq(1)

            with m.State("LEN_CHK"):
                # Not ready for a byte: the next is taken in PAYLOAD or CRC_LO, whose timer runs
                # on from 0.
                m.d.sync += rx_ready.eq(1)
                with m.If(len_zero & ~drain):
                    m.next = "CRC_LO"
                with m.Else():
                    m.next = "PAYLOAD"

            with m.State("CHECK"):
                with m.If(drain):
                    reply(Status.BAD_LENGTH, loading=False)
                with m.Elif(lo_match & (crc_lo == 0)):
                    m.next = "DISPATCH"
                with m.Else():
                    reply(Status.BAD_CRC, loading=False)

            with m.State("DISPATCH"):
                m.d.comb += cmd.valid.eq(1)
                with m.If(cmd.ready):
                    m.d.sync += rem_load.eq(1)
                    m.next = "RESPONSE"

            with m.State("RESPONSE"):
                # ``status`` and ``remaining`` load the answer on every cycle until it is
                # taken (it is zero while not valid, so the last load is the handshake's), and
                # the header starts in the cycle after: a handler's resp.valid reaches only the
                # flag ``answered``, not the state.
                m.d.comb += resp.ready.eq(~answered)
                with m.If(~answered):
                    m.d.sync += status.eq(resp.payload.status)
                with m.If(resp.valid & ~answered):
                    m.d.sync += [answered.eq(1), rem_load.eq(0)]
                with m.If(answered):
                    m.d.sync += answered.eq(0)
                    m.next = "HEADER"

            # Reply: SOF, status, len_lo, len_hi, payload, crc_lo, crc_hi.
            with m.State("HEADER"):
                with m.If(oload):
                    m.d.sync += step.eq(step + 1)
                    with m.Switch(step):
                        with m.Case(0):
                            m.d.comb += crc.clear.eq(1)
                            send(SOF_REPLY, 0)
                        with m.Case(1):
                            send(status, 1)
                            with m.If(status == Status.OK):
                                m.d.comb += self.reply_ok.eq(1)
                            with m.Else():
                                m.d.comb += self.reply_error.eq(1)
                                with m.If(~errors_inc[16]):
                                    m.d.sync += self.errors.eq(errors_inc)
                        with m.Case(2):
                            send(remaining[:8], 1)
                        with m.Default():
                            send(remaining[8:16], 1)
                            with m.If(remaining != 0):
                                m.d.sync += in_data.eq(1)
                                m.next = "DATA"
                            with m.Else():
                                m.next = "CRC"

            with m.State("DATA"):
                # The bytes are taken outside the FSM, on ``in_data``, which the last clears.
                with m.If(~in_data):
                    m.next = "CRC"

            with m.State("CRC"):
                # ``step`` wrapped to 0 after the header. The low byte waits for the register
                # to be empty (the last counted byte in the CRC), the high byte only for room.
                with m.If(Mux(step[0], oload, ~ofull)):
                    m.d.sync += step.eq(~step[0])
                    send(Mux(step[0], crc.crc[8:], crc.crc[:8]), 0)
                    with m.If(step[0]):
                        m.d.sync += rx_ready.eq(1)
                        m.next = "IDLE"
        return m


class Dispatcher(wiring.Component):
    """Route commands by opcode to handler ports; answer unknown opcodes with ``BAD_OPCODE``.

    The handlers' ``resp``, ``data`` and ``arg.ready`` are ORed together (``arg.ready`` gated by
    the handler that has the command), so a handler must hold ``resp`` and ``data`` (valid and
    payload) at zero from the end of its reply to the next command it takes.

    The handshake is registered: a command is taken (by its handler, or for the dispatcher's
    own answer) the cycle after one in which it was offered and its handler was ready, so
    ``command.cmd.ready`` is low in a command's first cycle, and a handler's ``cmd.ready`` must
    not fall while the handler has no command.

    Opcodes in ``echo`` are answered by the dispatcher itself as :class:`PingHandler` answers
    them (``OK``, the payload echoed), without a handler port: one answer fewer to OR (PING on
    the top, whose ORs then take four answers, one LUT4 a bit).

    Parameters
    ----------
    table : sequence of iterables of int
        ``table[k]`` is the set of opcodes handled on port ``handler_k``. Opcodes must be bytes
        and appear once (in ``table`` and ``echo`` together).
    echo : iterable of int
        Opcodes the dispatcher answers by echoing the payload (default none).

    Members
    -------
    command : In(CommandSignature())
        From the link.
    handler_<k> : Out(CommandSignature())
        To the handler of table row ``k``.

    Raises
    ------
    TypeError, ValueError
        For a malformed table.
    """

    @quiet_on_error
    def __init__(self, table, *, echo=()):
        rows = []
        seen = set()
        for row in (*table, echo):
            row = tuple(row)
            for op in row:
                _check_int("Opcode", op, 0, 255)
                if op in seen:
                    raise ValueError(f"Opcode 0x{op:02X} appears twice in the dispatch table")
                seen.add(op)
            rows.append(tuple(int(op) for op in row))
        *rows, self._echo = rows
        if not rows:
            raise ValueError("Dispatch table must have at least one row")
        self._table = tuple(rows)
        members = {"command": In(CommandSignature())}
        for k in range(len(rows)):
            members[f"handler_{k}"] = Out(CommandSignature())
        super().__init__(members)

    @property
    def table(self):
        return self._table

    @property
    def echo(self):
        return self._echo

    def elaborate(self, platform):
        m = Module()
        up = self.command
        ports = [getattr(self, f"handler_{k}") for k in range(len(self._table))]
        # One-hot: the handler of the current command (none for an unknown opcode). A handler
        # only drives its outputs between taking a command and its last reply byte (they are
        # assigned in its FSM's states), so the answers are ORed together, not multiplexed by a
        # handler number: a multiplexer costs about three LUTs per bit of resp and data.
        sel = Signal(len(ports))
        pending = Signal()       # the current command had no handler; BAD_OPCODE not yet taken
        echoing = Signal()
        answering = Signal()

        # The handshake is registered: in a cycle where the command waits, its opcode is
        # decoded and its handler's ``cmd.ready`` read, and ``go`` (a flip-flop) makes the
        # handshake in the next cycle, with the decode registered too (``match``). So neither
        # the opcode's compares nor a handler's ready reach the link's and the handlers'
        # handshake logic. It needs a handler's ready not to fall while it has no command
        # (each handler's is its idle state).
        match_now = [Const(0) if not row
                     else any_of(up.cmd.payload.opcode == op for op in row)
                     for row in self._table]
        echo_now = any_of(up.cmd.payload.opcode == op for op in self._echo)
        match = [Signal(name=f"match_{k}") for k in range(len(ports))]
        echo = Signal()
        m.d.sync += [Cat(match).eq(Cat(match_now)), echo.eq(echo_now)]
        none = Signal()
        m.d.comb += none.eq(~any_of(match) & ~echo)
        go = Signal()
        ready_now = ((~any_of(match_now) | echo_now) & ~pending & ~answering)
        for k, port in enumerate(ports):
            ready_now = ready_now | (match_now[k] & port.cmd.ready)
        m.d.sync += go.eq(up.cmd.valid & ~go & ready_now)

        # The echo (PingHandler's): ``answering`` from the command to its answer, then the
        # payload passes through while ``echoing``. ``length`` is cleared with the answer, so
        # the answer is zero while idle without a gate per bit.
        length = Signal.like(up.cmd.payload.length)
        with m.If(go & echo):
            m.d.sync += [length.eq(up.cmd.payload.length), answering.eq(1)]
        with m.If(answering & up.resp.ready):
            m.d.sync += [length.eq(0), answering.eq(0)]
        echo_data = Signal()
        m.d.comb += echo_data.eq(up.arg.valid & echoing & ~answering)

        arg_ready = echoing & ~answering & up.data.ready
        # BAD_OPCODE (the dispatcher's own answer) and OK with the echo's length.
        resp_valid = pending | answering
        resp_payload = Cat(Mux(pending, Const(Status.BAD_OPCODE, 8), 0), length)
        data_valid = echo_data
        data_payload = Mux(echo_data, up.arg.payload, 0)
        for k, port in enumerate(ports):
            # ``go`` implies ``cmd.valid`` (a command waits for its handshake).
            m.d.comb += [port.cmd.valid.eq(go & match[k]),
                         port.cmd.payload.eq(up.cmd.payload),
                         port.arg.payload.eq(up.arg.payload),
                         port.arg.valid.eq(up.arg.valid & sel[k]),
                         port.resp.ready.eq(up.resp.ready),
                         port.data.ready.eq(up.data.ready)]
            # arg.ready is gated: a handler may be ready for arguments while idle.
            arg_ready = arg_ready | (sel[k] & port.arg.ready)
            resp_valid = resp_valid | port.resp.valid
            resp_payload = resp_payload | port.resp.payload.as_value()
            data_valid = data_valid | port.data.valid
            data_payload = data_payload | port.data.payload
        m.d.comb += [up.cmd.ready.eq(go),
                     up.arg.ready.eq(arg_ready),
                     up.resp.valid.eq(resp_valid),
                     up.resp.payload.eq(resp_payload),
                     up.data.valid.eq(data_valid),
                     up.data.payload.eq(data_payload)]
        with m.If(go):
            m.d.sync += [sel.eq(Cat(match)), pending.eq(none), echoing.eq(echo)]
        with m.If(pending & up.resp.ready):
            m.d.sync += pending.eq(0)
        return m


class PingHandler(wiring.Component):
    """PING: answer ``OK`` and echo the request payload.

    Members
    -------
    command : In(CommandSignature())
    """
    command: In(CommandSignature())

    def elaborate(self, platform):
        m = Module()
        c = self.command
        length = Signal(16)
        answering = Signal()
        m.d.comb += [
            c.cmd.ready.eq(~answering),
            c.resp.valid.eq(answering),
            c.resp.payload.status.eq(Status.OK),
            c.resp.payload.length.eq(length),
            # The echo is a pass-through; the link offers at most ``length`` arg bytes.
            c.data.valid.eq(c.arg.valid & ~answering),
            c.data.payload.eq(Mux(c.arg.valid, c.arg.payload, 0)),
            c.arg.ready.eq(c.data.ready & ~answering),
        ]
        with m.If(c.cmd.valid & c.cmd.ready):
            m.d.sync += [length.eq(c.cmd.payload.length), answering.eq(1)]
        with m.If(c.resp.valid & c.resp.ready):
            # Cleared (the flip-flops' synchronous reset), so resp is zero while idle, as the
            # dispatcher requires, without a gate per bit.
            m.d.sync += [length.eq(0), answering.eq(0)]
        return m
