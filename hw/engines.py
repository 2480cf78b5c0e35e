"""Engine command handlers of the accelerator top: host commands that stream through an engine.

Each handler sits on a :class:`lowbit.hw.link.Dispatcher` row and speaks the
:class:`lowbit.hw.link.CommandSignature` protocol: it takes the command, reads the request payload
from
``arg``, answers one ``resp`` (status, reply length) and then exactly that many ``data`` bytes.
Every check happens before the first side effect, so a rejected command changes nothing.
The protocol of each command is in ``docs/protocol.md`` and modelled by
:class:`lowbit.sim.link.DeviceModel`.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from lowbit.sim.link import MAX_LENGTH, Opcode, Status

from .common import check_bool
from .grand import GrandUnit
from .link import CommandSignature, _check_int
from .lut import TransferLUT
from .ports import LUTPortSignature, load_or_step
from .uart import quiet_on_error

__all__ = ["LUTHandler", "GrandHandler"]


class LUTHandler(wiring.Component):
    """LUT_WRITE / LUT_APPLY through a :class:`lowbit.hw.lut.TransferLUT` (byte tables).

    ``LUT_WRITE`` payload: table u8, start u8, then ``n`` entries; writes entries
    ``start .. start+n-1`` of byte table ``table``. Checks, in order: payload shorter than 2 ->
    ``BAD_LENGTH``; ``table >= tables`` -> ``BAD_ADDRESS``; ``start + n > 256`` ->
    ``BAD_LENGTH``. ``LUT_APPLY`` payload: table u8, then ``n`` codes; the reply is the ``n``
    looked-up bytes, ``table[code]`` with the code as uint8. Checks: empty payload ->
    ``BAD_LENGTH``; ``table >= tables`` -> ``BAD_ADDRESS``.

    Codes go through the engine ``lanes`` at a time (the last beat may be partial), so the
    engine is the same one a layer program uses.

    Parameters
    ----------
    lanes : int
        Engine lanes, 1..32.
    tables : int
        Resident byte tables, 1..64.
    frame_bytes : int
        Largest request payload (the link's frame buffer), 16..65535: the payload counter has
        its width.

    The layer sequencer's LUT instruction uses the same engine (so a table written over the link
    is the one a program reads): while ``seq_en`` is high, ``seq`` drives the engine's lane 0
    (the handler is idle then, because the link is stop-and-wait).

    The table and the start are read from ``args`` (the link's copy of the payload's first
    bytes, :attr:`lowbit.hw.link.HostLink.args`); their bytes on ``command.arg`` are passed over.

    Members
    -------
    command : In(CommandSignature())
    args : In(16)
        The payload's first two bytes (:attr:`lowbit.hw.link.HostLink.args`).
    seq : In(lowbit.hw.ports.LUTPortSignature())
        One-code lookups of the sequencer.
    seq_en : In(1)
        The sequencer owns the engine.
    """

    @quiet_on_error
    def __init__(self, *, lanes=2, tables=4, frame_bytes=MAX_LENGTH):
        _check_int("Lane count", lanes, 1, 32)
        _check_int("LUT table count", tables, 1, 64)
        _check_int("Frame buffer size", frame_bytes, 16, MAX_LENGTH)
        self._lanes = lanes
        self._tables = tables
        self._frame_bytes = frame_bytes
        super().__init__({"command": In(CommandSignature()), "args": In(16),
                          "seq": In(LUTPortSignature()), "seq_en": In(1)})

    lanes = property(lambda self: self._lanes)
    tables = property(lambda self: self._tables)

    def elaborate(self, platform):
        m = Module()
        c = self.command
        lanes = self._lanes
        m.submodules.lut = lut = TransferLUT(lanes=lanes, tables=self._tables, wide_tables=0)

        applying = Signal()
        table = self.args[0:8]
        start = self.args[8:16]
        status = Signal(8)
        # Payload bytes still to handle: counted down from the length over the table and start
        # bytes too, so that it holds the codes / entries at CHECK without a subtracter there.
        left = Signal(range(self._frame_bytes + 1))
        addr = Signal(9)
        beat = Signal(lut.i.payload.code.shape())
        fill = Signal(range(lanes + 1))   # codes gathered into ``beat``
        out = Signal(lut.o.payload.shape())
        avail = Signal(range(lanes + 1))  # looked-up bytes of ``out`` not yet sent
        avail_one = Signal()              # avail == 1, kept beside it
        pos = Signal(range(lanes))

        m.d.comb += [
            lut.i_write.payload.wide.eq(0),
            lut.i_write.payload.table.eq(table),
            lut.i_write.payload.addr.eq(addr),
            lut.i_write.payload.data.eq(c.arg.payload),
            lut.i.payload.table.eq(table),
            lut.i.payload.code.eq(beat),
        ]

        # ``left``: loaded with the length as the command comes, one less a byte
        # (load_or_step: the load's choice merges into the decrement's LUTs).
        left_load = Signal()
        left_dec = Signal()
        # left == 0 and left == 1, kept beside it: no compare in front of arg.ready or the
        # state.
        left_z = Signal()
        left_one = Signal()
        with m.If(left_load | left_dec):
            m.d.sync += [left.eq(load_or_step(left, -1, left_load, c.cmd.payload.length)),
                         left_z.eq(Mux(left_load, c.cmd.payload.length == 0, left == 1)),
                         left_one.eq(Mux(left_load, c.cmd.payload.length == 1, left == 2))]

        # CHECK's tests as registers, taken every cycle (no compare in front of the state):
        # ``args`` holds still while the command runs, and in START's last cycle ``left`` is
        # one more than in CHECK, so ``start + left > 257`` there is ``start + left > 256`` in
        # CHECK (LUT_WRITE; LUT_APPLY, which skips START, does not use it).
        bad_table = Signal()
        too_long = Signal()
        m.d.sync += [bad_table.eq(table >= self._tables), too_long.eq(start + left > 257)]
        # ``arg.ready`` is a flip-flop (``arg_ready``), set as TABLE, START, WRITE (entries
        # left) and GATHER (codes wanted) come. GATHER waits a cycle (``g_wait``) after it is
        # entered and after each code it takes, in which it tests its end (a full beat or the
        # last code) into ``arg_ready`` (a cycle per code more; the UART takes ten bit
        # periods per reply byte).
        arg_ready = Signal()
        g_wait = Signal()
        m.d.comb += c.arg.ready.eq(arg_ready)

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += c.cmd.ready.eq(1)
                with m.If(c.cmd.valid):
                    is_apply = c.cmd.payload.opcode == Opcode.LUT_APPLY
                    n = c.cmd.payload.length
                    m.d.comb += left_load.eq(1)
                    m.d.sync += [applying.eq(is_apply), status.eq(Status.OK)]
                    with m.If(Mux(is_apply, n >= 1, n >= 2)):
                        m.d.sync += arg_ready.eq(1)
                        m.next = "TABLE"
                    with m.Else():
                        m.d.sync += status.eq(Status.BAD_LENGTH)
                        m.next = "RESP"
            # TABLE and START pass over the bytes that ``args`` holds.
            with m.State("TABLE"):
                with m.If(c.arg.valid):
                    m.d.comb += left_dec.eq(1)
                    m.d.sync += arg_ready.eq(~applying)
                    m.next = "CHECK"
                    with m.If(~applying):
                        m.next = "START"
            with m.State("START"):
                with m.If(c.arg.valid):
                    m.d.comb += left_dec.eq(1)
                    m.d.sync += arg_ready.eq(0)
                    m.next = "CHECK"
            with m.State("CHECK"):
                m.d.sync += [addr.eq(start), fill.eq(0), avail.eq(0), pos.eq(0)]
                m.next = "RESP"
                with m.If(bad_table):
                    m.d.sync += status.eq(Status.BAD_ADDRESS)
                with m.Elif(~applying & too_long):
                    m.d.sync += status.eq(Status.BAD_LENGTH)
                with m.Elif(~applying):
                    m.d.sync += arg_ready.eq(~left_z)
                    m.next = "WRITE"
            with m.State("WRITE"):
                with m.If(left_z):
                    m.next = "RESP"
                with m.Else():
                    # i_write is always ready; one entry per arg byte (arg_ready is ~left_z).
                    m.d.comb += lut.i_write.valid.eq(c.arg.valid)
                    with m.If(c.arg.valid):
                        m.d.comb += left_dec.eq(1)
                        m.d.sync += [addr.eq(addr + 1), arg_ready.eq(~left_one)]
            with m.State("RESP"):
                reply = (status == Status.OK) & applying
                m.d.comb += [c.resp.valid.eq(1), c.resp.payload.status.eq(status),
                             c.resp.payload.length.eq(Mux(reply, left, 0))]
                with m.If(c.resp.ready):
                    m.next = "IDLE"
                    with m.If(reply & ~left_z):
                        m.d.sync += g_wait.eq(1)
                        m.next = "GATHER"
            with m.State("GATHER"):
                # Collect up to ``lanes`` codes, then look them up in one beat.
                with m.If(g_wait):
                    m.d.sync += [g_wait.eq(0),
                                 arg_ready.eq(~((fill == lanes) | (fill == left)))]
                with m.Elif(~arg_ready):
                    m.next = "LOOKUP"
                with m.Else():
                    with m.If(c.arg.valid):
                        with m.Switch(fill):
                            for k in range(lanes):
                                with m.Case(k):
                                    m.d.sync += beat[k].eq(c.arg.payload)
                        m.d.sync += [fill.eq(fill + 1), g_wait.eq(1), arg_ready.eq(0)]
            with m.State("LOOKUP"):
                m.d.comb += lut.i.valid.eq(1)
                with m.If(lut.i.ready):
                    m.next = "RESULT"
            with m.State("RESULT"):
                m.d.comb += lut.o.ready.eq(1)
                with m.If(lut.o.valid):
                    m.d.sync += [out.eq(lut.o.payload), avail.eq(fill),
                                 avail_one.eq(fill == 1), pos.eq(0)]
                    m.next = "SEND"
            with m.State("SEND"):
                m.d.comb += [c.data.valid.eq(1), c.data.payload.eq(out[pos])]
                with m.If(c.data.ready):
                    m.d.comb += left_dec.eq(1)
                    m.d.sync += [pos.eq(pos + 1), avail.eq(avail - 1),
                                 avail_one.eq(avail == 2)]
                    with m.If(avail_one):
                        m.d.sync += [fill.eq(0), g_wait.eq(1)]
                        m.next = "GATHER"
                        with m.If(left_one):
                            m.next = "IDLE"
        with m.If(self.seq_en):
            m.d.comb += [lut.i.valid.eq(self.seq.i.valid),
                         lut.i.payload.table.eq(self.seq.i.payload.table),
                         lut.i.payload.code[0].eq(self.seq.i.payload.code),
                         self.seq.i.ready.eq(lut.i.ready),
                         self.seq.o.valid.eq(lut.o.valid),
                         self.seq.o.payload.eq(lut.o.payload[0]),
                         lut.o.ready.eq(self.seq.o.ready)]
        return m


class GrandHandler(wiring.Component):
    """GRAND_SEED / GRAND_SAMPLES through a :class:`lowbit.hw.grand.GrandUnit`.

    ``GRAND_SEED`` payload: ``16 * lanes`` bytes, the generator state of every lane (``s0``
    u64, ``s1`` u64, lane 0 first; the host computes it with :func:`lowbit.sim.prng.seed_lanes`).
    It loads the state (bit 0 of ``s1`` forced to 1, :func:`lowbit.sim.prng.load_state`), discards
    buffered samples and latches the mode from ``mode`` (the ``GRAND_MODE`` register; codes 6
    and 7 act as normal). The mode therefore changes only at a GRAND_SEED. Check: payload
    length ``!= 16 * lanes`` -> ``BAD_LENGTH``.

    ``GRAND_SAMPLES`` payload: count u16, format u8 (0: f16, 2 bytes per sample; 1: f32, 4
    bytes). The reply is the next ``count`` samples of the sequence, lane-interleaved (lane 0
    of a result, lane 1, ...), little-endian. Samples of a result that a command does not take
    are kept for the next one, so consecutive commands read one unbroken sequence, equal to
    :class:`lowbit.sim.grand.GrandModel`'s. Checks, in order: payload length ``!= 3`` ->
    ``BAD_LENGTH``; format > 1 -> ``BAD_ADDRESS``; reply longer than ``frame_bytes`` ->
    ``BAD_LENGTH``.

    Parameters
    ----------
    lanes : int
        Generator lanes, 1..32.
    frame_bytes : int
        Largest reply payload.

    The layer sequencer's GRAND instruction reads the same sequence: while ``seq_en`` is high,
    ``seq`` offers the next sample (f16) of the sequence, so programs and ``GRAND_SAMPLES``
    share one unbroken stream (and the mode latched at ``GRAND_SEED``).

    Parameters
    ----------
    lanes : int
        Generator lanes, 1..32.
    frame_bytes : int
        Largest reply payload.
    modes : iterable of str or GrandMode, optional
        Modes of the unit (:class:`lowbit.hw.grand.GrandUnit`; default all).
    pipelined : bool
        For fast clocks on a large die (default ``False``): the unit's ``split_stall`` and
        the state's shift (``16 * lanes`` bytes, ``128 * lanes`` flip-flops) a cycle after
        each byte is taken, from a register of the byte and of the shift's enable, so that the
        argument handshake does not reach the state's clock enables. The same replies.

    Members
    -------
    command : In(CommandSignature())
    mode : In(3)
        The mode latched at GRAND_SEED.
    seq : Out(stream.Signature(16))
        f16 samples for the sequencer.
    seq_en : In(1)
        The sequencer owns the sample stream.
    """

    @quiet_on_error
    def __init__(self, *, lanes=2, frame_bytes=512, modes=None, pipelined=False):
        _check_int("Lane count", lanes, 1, 32)
        _check_int("Frame buffer size", frame_bytes, 16, 4096)
        self._lanes = lanes
        self._frame_bytes = frame_bytes
        self._modes = modes
        self._pipelined = check_bool("Pipelined", pipelined)
        super().__init__({"command": In(CommandSignature()), "mode": In(3),
                          "seq": Out(stream.Signature(16)), "seq_en": In(1)})

    lanes = property(lambda self: self._lanes)

    def elaborate(self, platform):
        m = Module()
        c = self.command
        lanes = self._lanes
        m.submodules.grand = grand = GrandUnit(lanes=lanes, modes=self._modes,
                                                     split_stall=self._pipelined)

        mode = Signal(3)
        # Codes 6 and 7 are not modes; the unit itself treats them as NORMAL.
        m.d.comb += grand.mode.eq(mode)
        seeding = Signal()
        length = Signal(16)
        status = Signal(8)
        count = Signal(range(16 * lanes + 1))       # seed bytes taken / sample arguments
        state = Signal(128 * lanes)
        args = Signal(24)
        fmt = Signal()
        left = Signal(16)                       # samples still to send
        beat = Signal(grand.o.payload.shape())
        avail = Signal(range(lanes + 1))        # samples of ``beat`` not yet sent
        pos = Signal(range(lanes))
        byte = Signal(2)
        nbytes = Signal(19)
        want = Signal()
        consume = Signal()

        m.d.comb += grand.seed.eq(state)
        if self._pipelined:
            # The last byte shifts in the cycle after it is taken, while ARGS sees the count
            # complete; LOAD reads the state two cycles later.
            shift = Signal()
            shift_byte = Signal(8)
            m.d.sync += shift.eq(0)
            with m.If(shift):
                m.d.sync += state.eq(Cat(state[8:], shift_byte))
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += c.cmd.ready.eq(1)
                with m.If(c.cmd.valid):
                    is_seed = c.cmd.payload.opcode == Opcode.GRAND_SEED
                    n = c.cmd.payload.length
                    m.d.sync += [seeding.eq(is_seed), length.eq(n), count.eq(0),
                                 status.eq(Status.OK)]
                    with m.If(Mux(is_seed, n == 16 * lanes, n == 3)):
                        m.next = "ARGS"
                    with m.Else():
                        m.d.sync += status.eq(Status.BAD_LENGTH)
                        m.next = "RESP"
            with m.State("ARGS"):
                with m.If(count == Mux(seeding, 16 * lanes, 3)):
                    m.next = "LATCH"
                    with m.If(~seeding):
                        m.next = "CHECK"
                with m.Else():
                    m.d.comb += c.arg.ready.eq(1)
                    with m.If(c.arg.valid):
                        m.d.sync += count.eq(count + 1)
                        with m.If(seeding):
                            if self._pipelined:
                                m.d.sync += [shift.eq(1), shift_byte.eq(c.arg.payload)]
                            else:
                                m.d.sync += state.eq(Cat(state[8:], c.arg.payload))
                        with m.Else():
                            m.d.sync += args.eq(Cat(args[8:], c.arg.payload))
            with m.State("LATCH"):
                # The unit registers its mode port; load one cycle after the mode settles.
                m.d.sync += mode.eq(self.mode)
                m.next = "LOAD"
            with m.State("LOAD"):
                m.d.comb += grand.seed_load.eq(1)
                m.d.sync += avail.eq(0)
                m.next = "RESP"
            with m.State("CHECK"):
                m.d.sync += [left.eq(args[0:16]), fmt.eq(args[16]), byte.eq(0),
                             nbytes.eq(Mux(args[16], args[0:16] << 2, args[0:16] << 1))]
                m.next = "SIZE"
                with m.If(args[16:24] > 1):
                    m.d.sync += status.eq(Status.BAD_ADDRESS)
                    m.next = "RESP"
            with m.State("SIZE"):
                m.next = "RESP"
                with m.If(nbytes > self._frame_bytes):
                    m.d.sync += status.eq(Status.BAD_LENGTH)
            with m.State("RESP"):
                reply = (status == Status.OK) & ~seeding
                m.d.comb += [c.resp.valid.eq(1), c.resp.payload.status.eq(status),
                             c.resp.payload.length.eq(Mux(reply, nbytes, 0))]
                with m.If(c.resp.ready):
                    m.next = "IDLE"
                    with m.If(reply & (left != 0)):
                        m.next = "SEND"
            with m.State("SEND"):
                m.d.comb += want.eq(1)
                with m.If(avail != 0):
                    sample = beat[pos]
                    word = Mux(fmt, sample.f32, sample.f16)
                    last_byte = byte == Mux(fmt, 3, 1)
                    m.d.comb += [c.data.valid.eq(1), c.data.payload.eq(word.word_select(byte, 8))]
                    with m.If(c.data.ready):
                        m.d.sync += byte.eq(byte + 1)
                        with m.If(last_byte):
                            m.d.comb += consume.eq(1)
                            m.d.sync += [byte.eq(0), left.eq(left - 1)]
                            with m.If(left == 1):
                                m.next = "IDLE"
        # The sample buffer: one result of the unit, handed out a sample at a time to the
        # GRAND_SAMPLES reply or to the sequencer.
        with m.If(self.seq_en):
            m.d.comb += [want.eq(1), self.seq.valid.eq(avail != 0),
                         self.seq.payload.eq(beat[pos].f16),
                         consume.eq(self.seq.ready & (avail != 0))]
        with m.If(consume):
            m.d.sync += [pos.eq(pos + 1), avail.eq(avail - 1)]
        with m.If(want & (avail == 0)):
            m.d.comb += grand.o.ready.eq(1)
            with m.If(grand.o.valid):
                m.d.sync += [beat.eq(grand.o.payload), avail.eq(lanes), pos.eq(0)]
        return m
