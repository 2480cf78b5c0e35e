"""The accelerator top: UART, host link, command handlers, registers, scratchpad, sequencer.

The communication backbone the engines plug into::

    rx -> UARTReceiver -> HostLink -> Dispatcher -+   (the dispatcher answers PING itself)
    tx <- UARTTransmitter <-'                     +-> RegisterHandler (IDENTIFY, configuration
                                                  |                    registers)
                                                  +-> MemoryHandler -> Scratchpad <-+
                                                  +-> LUTHandler, GrandHandler      |
                                                  +-> Sequencer (RUN) --------------+

With ``sequencer=True`` the layer sequencer (:mod:`lowbit.hw.sequencer`, ``docs/sequencer.md``) runs
programs from the scratchpad; while it runs (``busy``) it owns the scratchpad port, the LUT
engine and the grand unit's sample stream, and writes registers through the register
handler's second port (CONFIG).

Engine commands are added as one more handler on the :class:`lowbit.hw.link.Dispatcher` (a row of
:meth:`Accelerator.dispatch_table` with opcodes from :data:`lowbit.sim.link.ENGINE_OPCODES`); the
configuration registers are the ``Out`` ports of the :class:`RegisterHandler` (``regs.mant_width``
etc.), which engine wiring inside :meth:`Accelerator.elaborate` reads. The
protocol and the register map are defined in :mod:`lowbit.sim.link` (``docs/protocol.md``).
"""

from amaranth.hdl import Cat, ClockSignal, Const, Instance, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from lowbit.sim.link import (
    DESIGN_VERSION,
    ENGINE_BITS,
    IDENTITY_BYTES,
    MAGIC,
    PACKED_TRANSFERS,
    PROTOCOL_VERSION,
    REGISTER_BY_NAME,
    REGISTERS,
    Identity,
    Opcode,
    Status,
    identity_registers,
)
from lowbit.sim.topparams import SPRAM_BYTES, check_top_params
from lowbit.sim.topparams import check_scratch_bytes as _check_scratch_bytes

from .common import any_of
from .common import check_bool as _check_bool
from .common import check_int as _check_int
from .engines import GrandHandler, LUTHandler
from .link import ARG_BYTES, CommandSignature, Dispatcher, HostLink
from .ports import (
    COLUMN_FRAC_BITS,
    DISCRETE_ACC_WIDTH,
    RAND_BITS,
    SEQ_REGISTERS,
    ConfigPortSignature,
    ScratchPortSignature,
    load_or_step,
    registered_port,
)
from .sequencer import Sequencer
from .uart import UARTReceiver, UARTTransmitter, quiet_on_error

_REGISTER_INDICES = {r.index for r in REGISTERS}

__all__ = ["Accelerator", "Scratchpad", "SPRAM256KA", "IdentifyHandler", "RegisterHandler",
           "MemoryHandler", "SPRAM_BYTES"]

# SPRAM_BYTES (bytes in one iCE40 UP5K SB_SPRAM256KA, 16384 words of 16 bits) and the
# validation of the top's parameters live in lowbit.sim.topparams, shared with the model
# (lowbit.sim.link.DeviceModel), so that both accept exactly the same parameters.


class SPRAM256KA(wiring.Component):
    """iCE40 UP5K single-port RAM SB_SPRAM256KA (16384 x 16, nibble write mask).

    With ``simulation=True`` it is a behavioural model in ``lib.memory.Memory`` with the
    primitive's behaviour: a write when ``cs & we`` stores the nibbles enabled in ``maskwren``;
    a read when ``cs & ~we`` updates ``dataout`` on the clock edge; otherwise ``dataout`` holds.
    Otherwise it is an ``Instance`` of the primitive (for synthesis).

    Members
    -------
    addr : In(14), datain : In(16), maskwren : In(4), we : In(1), cs : In(1)
    dataout : Out(16)
    """
    addr: In(14)
    datain: In(16)
    maskwren: In(4)
    we: In(1)
    cs: In(1)
    dataout: Out(16)

    @quiet_on_error
    def __init__(self, *, simulation=False):
        self._simulation = _check_bool("simulation", simulation)
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        if self._simulation:
            m.submodules.mem = mem = Memory(shape=16, depth=16384, init=[])
            wr = mem.write_port(granularity=4)
            rd = mem.read_port(transparent_for=())
            m.d.comb += [
                wr.addr.eq(self.addr), wr.data.eq(self.datain),
                wr.en.eq(self.maskwren.replicate(1) & (self.cs & self.we).replicate(4)),
                rd.addr.eq(self.addr), rd.en.eq(self.cs & ~self.we),
                self.dataout.eq(rd.data),
            ]
        else:
            m.submodules.spram = Instance(
                "SB_SPRAM256KA",
                i_ADDRESS=self.addr, i_DATAIN=self.datain, i_MASKWREN=self.maskwren,
                i_WREN=self.we, i_CHIPSELECT=self.cs, i_CLOCK=ClockSignal("sync"),
                i_STANDBY=Const(0), i_SLEEP=Const(0), i_POWEROFF=Const(1),
                o_DATAOUT=self.dataout)
        return m


class Scratchpad(wiring.Component):
    """Byte-addressable scratchpad of 16-bit words.

    Parameters
    ----------
    size : int
        Bytes. Block RAM: a power of two from 64 to 65536. SPRAM: 32768, 65536, 98304 or
        131072 (one to four SB_SPRAM256KA banks).
    use_spram : bool
        Use UP5K SPRAM banks (:class:`SPRAM256KA`) instead of ``lib.memory.Memory``.
    simulation : bool
        Use the SPRAM behavioural model (only meaningful with ``use_spram``).
    write_addr : bool
        Block RAM only: writes take the port's own write address ``waddr``, and a cycle may
        read and write (the block RAM's read and write ports, side by side). The SPRAM has one
        address.
    read_register : bool
        Block RAM only: ``rdata`` comes a cycle later, from a register of each bank's output
        (banks of :data:`REGISTER_BANK_WORDS` words, each a ``Memory`` of its own, ``bankK``),
        multiplexed by the registered bank. A block RAM's clock-to-out (5.6 ns on the ECP5's
        DP16KD without its output register, which Yosys does not use) then meets no logic and
        no route to a far register: each register takes one block RAM's bit, beside it.

    Members
    -------
    port : In(ScratchPortSignature(addr_width, write_addr=write_addr))

    Raises
    ------
    ValueError
        ``write_addr`` or ``read_register`` with ``use_spram``.
    """

    #: Words in a bank of the ``read_register`` scratchpad: the ECP5 DP16KD's deepest shape
    #: (16384 x 1), so that each output bit of a bank is one block RAM's.
    REGISTER_BANK_WORDS = 16384

    @quiet_on_error
    def __init__(self, *, size=4096, use_spram=False, simulation=False, write_addr=False,
                 read_register=False):
        self._use_spram = _check_bool("use_spram", use_spram)
        self._simulation = _check_bool("simulation", simulation)
        self._write_addr = _check_bool("write_addr", write_addr)
        self._read_register = _check_bool("read_register", read_register)
        if write_addr and use_spram:
            raise ValueError("A write address of its own needs the block-RAM scratchpad; the "
                             "SPRAM has one address")
        if read_register and use_spram:
            raise ValueError("A read register needs the block-RAM scratchpad; the SPRAM's "
                             "output is not registered here")
        self._size = _check_scratch_bytes(size, use_spram)
        self._addr_width = max((self._size // 2 - 1).bit_length(), 1)
        super().__init__({"port": In(ScratchPortSignature(self._addr_width,
                                                          write_addr=write_addr))})

    @property
    def write_addr(self):
        return self._write_addr

    @property
    def read_register(self):
        return self._read_register

    @property
    def size(self):
        return self._size

    @property
    def addr_width(self):
        return self._addr_width

    def elaborate(self, platform):
        m = Module()
        p = self.port
        if not self._use_spram and self._read_register:
            depth = self._size // 2
            bank_words = min(depth, self.REGISTER_BANK_WORDS)
            lb = bank_words.bit_length() - 1
            n_banks = depth // bank_words
            waddr = p.waddr if self._write_addr else p.addr
            re = p.re if self._write_addr else p.re & ~p.we
            # The bank of the words at the memories' outputs (which hold without a read), and
            # of the registers' a cycle later.
            bank_q, bank_qq = Signal(range(n_banks)), Signal(range(n_banks))
            with m.If(re):
                m.d.sync += bank_q.eq(p.addr[lb:])
            m.d.sync += bank_qq.eq(bank_q)
            for k in range(n_banks):
                m.submodules[f"bank{k}"] = mem = Memory(shape=16, depth=bank_words, init=[])
                wr = mem.write_port(granularity=8)
                rd = mem.read_port(transparent_for=())
                q = Signal(16, name=f"bank{k}_q", reset_less=True)
                m.d.comb += [wr.addr.eq(waddr[:lb]), wr.data.eq(p.wdata),
                             wr.en.eq(p.wmask & (p.we & (waddr[lb:] == k)).replicate(2)),
                             rd.addr.eq(p.addr[:lb]), rd.en.eq(re)]
                m.d.sync += q.eq(rd.data)
                # Every bank reads (no bank decode on the read enable); the word is the
                # registered bank's, two cycles after its address.
                with m.If(bank_qq == k):
                    m.d.comb += p.rdata.eq(q)
            return m
        if not self._use_spram:
            m.submodules.mem = mem = Memory(shape=16, depth=self._size // 2, init=[])
            wr = mem.write_port(granularity=8)
            rd = mem.read_port(transparent_for=())
            m.d.comb += [wr.addr.eq(p.waddr if self._write_addr else p.addr),
                         wr.data.eq(p.wdata), wr.en.eq(p.wmask & p.we.replicate(2)),
                         rd.addr.eq(p.addr), rd.en.eq(p.re if self._write_addr else p.re & ~p.we),
                         p.rdata.eq(rd.data)]
            return m
        banks = self._size // SPRAM_BYTES
        bank = p.addr[14:] if banks > 1 else Const(0, 1)
        bank_q = Signal.like(bank)
        # Every bank reads on every read cycle (chip select gates writes by the bank, reads by
        # ``re`` alone), which keeps the bank decode off the read address path; the output mux
        # uses the registered bank. Without a read or a write the banks' outputs hold.
        with m.If(p.re & ~p.we):
            m.d.sync += bank_q.eq(bank)
        for k in range(banks):
            ram = SPRAM256KA(simulation=self._simulation)
            m.submodules[f"spram{k}"] = ram
            m.d.comb += [ram.addr.eq(p.addr[:14]), ram.datain.eq(p.wdata),
                         ram.maskwren.eq(Cat(p.wmask[0], p.wmask[0], p.wmask[1], p.wmask[1])),
                         ram.we.eq(p.we), ram.cs.eq(Mux(p.we, bank == k, p.re))]
            with m.If(bank_q == k):
                m.d.comb += p.rdata.eq(ram.dataout)
        return m


class IdentifyHandler(wiring.Component):
    """IDENTIFY: answer the 16-byte identification record (``BAD_LENGTH`` if a payload came).

    Parameters
    ----------
    identity : lowbit.sim.link.Identity

    Members
    -------
    command : In(CommandSignature())
    """
    command: In(CommandSignature())

    @quiet_on_error
    def __init__(self, identity):
        if not isinstance(identity, Identity):
            raise TypeError(f"Identity must be a lowbit.sim.link.Identity, not {identity!r}")
        self._record = identity.to_bytes()
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        c = self.command
        idx = Signal(range(IDENTITY_BYTES + 1))
        ok = Signal()
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += c.cmd.ready.eq(1)
                with m.If(c.cmd.valid):
                    m.d.sync += [ok.eq(c.cmd.payload.length == 0), idx.eq(0)]
                    m.next = "RESP"
            with m.State("RESP"):
                m.d.comb += [c.resp.valid.eq(1),
                             c.resp.payload.status.eq(Status.OK),
                             c.resp.payload.length.eq(IDENTITY_BYTES)]
                with m.If(~ok):
                    m.d.comb += [c.resp.payload.status.eq(Status.BAD_LENGTH),
                                 c.resp.payload.length.eq(0)]
                with m.If(c.resp.ready):
                    m.next = "SEND"
                    with m.If(~ok):
                        m.next = "IDLE"
            with m.State("SEND"):
                m.d.comb += c.data.valid.eq(1)
                with m.Switch(idx):
                    for k, b in enumerate(self._record):
                        with m.Case(k):
                            m.d.comb += c.data.payload.eq(b)
                with m.If(c.data.ready):
                    m.d.sync += idx.eq(idx + 1)
                    with m.If(idx == IDENTITY_BYTES - 1):
                        m.next = "IDLE"
        return m


class RegisterHandler(wiring.Component):
    """REG_READ / REG_WRITE over the register map :data:`lowbit.sim.link.REGISTERS`.

    Read-write registers are flip-flops of their declared width, exposed as ``Out`` ports
    named after the register in lower case (e.g. ``mant_width``). Identification registers
    are constants from ``identity`` and ``design``. The counters ``LINK_SKIPPED``,
    ``LINK_ERRORS`` and ``UART_ERRORS`` read the ``In`` ports of the same lower-case names.

    REG_READ does not multiplex the flip-flops: every write also goes to a block-RAM copy
    (identification constants and reset values are its initial contents), and a read takes the
    copy. So there is no wide read multiplexer, and the flip-flops of registers that no engine
    of the design reads are removed by synthesis. Memory contents are not reset, so neither are
    the read-write registers: they take their reset values when the design starts (bitstream
    load, simulation start) and keep their values across a reset of the ``sync`` domain, and a
    read always returns what the engines see.

    It also answers IDENTIFY: the 24-byte record is six more words of the block-RAM copy (at
    :attr:`IDENT_BASE`, indices no register uses, so REG_READ answers them ``BAD_ADDRESS``),
    streamed out four bytes a word, the next word's address presented a cycle ahead. (A handler
    of its own, :class:`IdentifyHandler`, decodes the record from LUTs: ~50 LUT4s and a
    dispatcher port more on the iCEBreaker.)

    Answers: wrong payload length -> ``BAD_LENGTH``; unknown index -> ``BAD_ADDRESS``; write
    to a read-only register -> ``READ_ONLY`` (nothing written); else ``OK`` with the 4-byte
    little-endian value (read) or no payload (write; bits above the width are dropped).

    The index and the value are read from ``args`` (the link's copy of the payload's first
    bytes, :attr:`lowbit.hw.link.HostLink.args`), not collected from ``command.arg``: the
    payload bytes are left to the link to discard.

    A second write port, ``cfg`` (:class:`lowbit.hw.ports.ConfigPortSignature`, the sequencer's
    CONFIG), writes read-write registers; its ``ok`` says combinationally whether ``index`` is
    one. The host and the sequencer never write in the same cycle (the link is stop-and-wait and
    ``RUN`` answers at the end). A write reaches the registers (and the copy) one cycle after
    the port's ``we`` (or the host's EXEC): the port's signals are registered before the index
    is decoded. ``prng_load`` pulses in the cycle after ``PRNG_SEED3`` was written by either
    port, when the four seed registers hold the new seed.

    Parameters
    ----------
    identity : lowbit.sim.link.Identity
    design : dict, optional
        Generator parameters reported by ``ID_MATRIX`` / ``ID_ENGINE`` (keys of
        :data:`lowbit.sim.link.DESIGN_PARAMS`; missing ones take its defaults).
    read_register : bool
        The copy's words reach ``value`` through a register of the block RAM's output, a cycle
        more per REG_READ / REG_WRITE / IDENTIFY (for fast clocks: the ECP5 DP16KD's 5.6 ns
        clock-to-out then meets a route to one flip-flop, not ``value``'s multiplexer). Default
        ``False``.

    Members
    -------
    command : In(CommandSignature())
    args : In(48)
        The payload's first six bytes (:attr:`lowbit.hw.link.HostLink.args`).
    cfg : In(lowbit.hw.ports.ConfigPortSignature())
    prng_load : Out(1)
    """

    DYNAMIC = ("LINK_SKIPPED", "LINK_ERRORS", "UART_ERRORS")
    #: Word index of the IDENTIFY record in the register copy.
    IDENT_BASE = 0x38

    @quiet_on_error
    def __init__(self, identity, design=None, *, read_register=False):
        self._read_register = _check_bool("read_register", read_register)
        if not isinstance(identity, Identity):
            raise TypeError(f"Identity must be a lowbit.sim.link.Identity, not {identity!r}")
        if design is not None and not isinstance(design, dict):
            raise TypeError(f"Design parameters must be a dict, not {design!r}")
        self._constants = identity_registers(identity, **(design or {}))
        self._record = identity.to_bytes()
        members = {"command": In(CommandSignature()), "args": In(8 * ARG_BYTES),
                   "cfg": In(ConfigPortSignature()), "prng_load": Out(1)}
        for r in REGISTERS:
            if r.access == "rw":
                members[r.name.lower()] = Out(r.width, init=r.reset)
            elif r.name in self.DYNAMIC:
                members[r.name.lower()] = In(r.width)
        super().__init__(members)

    @property
    def read_register(self):
        return self._read_register

    def elaborate(self, platform):
        m = Module()
        c = self.command
        # The command as two flags (with ``ident``), decoded once when it is taken.
        is_write = Signal()
        is_read = Signal()
        status = Signal(8)
        ok = Signal()             # status == OK
        value = Signal(32)
        idx = Signal(range(IDENTITY_BYTES + 1))
        ident = Signal()          # the command is IDENTIFY
        word = Signal(range(IDENTITY_BYTES // 4 + 1))

        index = self.args[0:16]
        wvalue = self.args[16:48]
        rw = [r for r in REGISTERS if r.access == "rw"]
        # Register indices are decoded as "upper bits zero" and a switch on the low bits, which
        # takes far fewer LUTs than a full 16-bit compare per register.
        ib = max(r.index for r in REGISTERS).bit_length()

        # One write port for both writers (the host's REG_WRITE in EXEC and the sequencer's
        # CONFIG, never in the same cycle): each register bit is then a flip-flop with an enable
        # fed straight from the shared value, not a per-bit multiplexer of two sources.
        # The host's side is chosen by the state (EXEC), not by the host's write enable: that
        # would decode the index twice in a row (whether it names a read-write register, then
        # which register the chosen index names).
        # The write is a pipeline of two cycles: the write's enable (a port's, with the bits of
        # its index above the six low ones zero) and the chosen port's index and value are
        # registered (``wq_*``), and in the next cycle the flip-flops and the copy are written
        # from those registers. The index is registered predecoded: its three upper bits as
        # eight one-hot flags (``wq_hi``), so that each register's match is a short function of
        # the enable, a flag and the three low bits; the copy's mask is an OR of the matches of
        # the wider registers. (A decode of the six bits is mapped as a chain of up to ten
        # LUTs.) Each register takes the value's low bits straight from ``wq_value``; the copy
        # takes it masked to the register's width. A write to an index that names no
        # read-write register enables no flip-flop and no copy word.
        assert ib == 6
        in_exec = Signal()
        w_index = Signal(16)
        wq_en = Signal()
        wq_hi = Signal(8)
        wq_index = Signal(ib)
        wq_value = Signal(32, reset_less=True)
        m.d.comb += w_index.eq(Mux(in_exec, index, self.cfg.index))
        m.d.sync += [wq_en.eq((in_exec & is_write & ~ident & (index[ib:] == 0))
                              | (self.cfg.we & (self.cfg.index[ib:] == 0))),
                     wq_hi.eq(Cat(w_index[3:ib] == k for k in range(8))),
                     wq_index.eq(w_index[:ib]),
                     wq_value.eq(Mux(in_exec, wvalue, self.cfg.value))]
        with m.If(self.cfg.index[ib:] == 0):
            with m.Switch(self.cfg.index[:ib]):
                for r in rw:
                    with m.Case(r.index):
                        m.d.comb += self.cfg.ok.eq(1)
        match = {}
        for r in rw:
            match[r.name] = Signal(name=f"w_{r.name.lower()}")
            m.d.comb += match[r.name].eq(wq_en & wq_hi[r.index >> 3]
                                         & (wq_index[:3] == r.index & 7))
        w_mask = Cat(any_of(match[r.name] for r in rw if r.width > j) for j in range(32))
        w_rw = any_of(match.values())
        seed3 = REGISTER_BY_NAME["PRNG_SEED3"].name
        m.d.sync += self.prng_load.eq(match[seed3])
        regs = {r.name: Signal(r.width, init=r.reset, reset_less=True, name=r.name.lower())
                for r in rw}
        for r in rw:
            m.d.comb += getattr(self, r.name.lower()).eq(regs[r.name])
            with m.If(match[r.name]):
                m.d.sync += regs[r.name].eq(wq_value[:r.width])

        ib = max(ib, (self.IDENT_BASE + IDENTITY_BYTES // 4 - 1).bit_length())
        init = [0] * (1 << ib)
        for r in REGISTERS:
            if r.access == "rw":
                init[r.index] = r.reset
            elif r.name not in self.DYNAMIC:
                init[r.index] = self._constants[r.name]
        for k in range(IDENTITY_BYTES // 4):
            assert self.IDENT_BASE + k not in _REGISTER_INDICES
            init[self.IDENT_BASE + k] = int.from_bytes(self._record[4 * k:4 * k + 4], "little")
        # The copy is read only in state READ, when nothing writes it (writes come in the cycle
        # after EXEC and after CONFIG, which runs while this handler is idle), so synthesis
        # need not add read-during-write logic.
        m.submodules.copy = copy = Memory(shape=32, depth=1 << ib, init=init,
                                          attrs={"no_rw_check": 1})
        wr = copy.write_port()
        rd = copy.read_port(domain="comb")
        rd_data = Signal(32)
        m.d.sync += rd_data.eq(rd.data)
        if self._read_register:
            rd_word = Signal(32, reset_less=True)
            m.d.sync += rd_word.eq(rd_data)
        else:
            rd_word = rd_data
        # IDENTIFY: READ / EXEC load the record's first word into ``value`` as REG_READ loads a
        # register; while SEND streams a word (``value`` shifting a byte down as each is
        # taken), the copy reads the next one, which ``value`` takes with the word's last byte.
        sending = Signal()
        send_on = Signal()
        m.d.comb += [wr.addr.eq(wq_index), wr.data.eq(wq_value & w_mask),
                     wr.en.eq(w_rw),
                     rd.addr.eq(Mux(ident, self.IDENT_BASE + Mux(sending, word + 1, 0),
                                    index[:ib]))]

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += c.cmd.ready.eq(1)
                m.d.sync += word.eq(0)
                with m.If(c.cmd.valid):
                    is_ident = c.cmd.payload.opcode == Opcode.IDENTIFY
                    m.d.sync += [is_write.eq(c.cmd.payload.opcode == Opcode.REG_WRITE),
                                 is_read.eq(c.cmd.payload.opcode == Opcode.REG_READ),
                                 idx.eq(0), ident.eq(is_ident), ok.eq(0)]
                    need = Mux(c.cmd.payload.opcode == Opcode.REG_READ, 2, 6)
                    with m.If(is_ident):
                        with m.If(c.cmd.payload.length == 0):
                            m.next = "READ"
                        with m.Else():
                            m.d.sync += status.eq(Status.BAD_LENGTH)
                            m.next = "RESP"
                    with m.Elif(c.cmd.payload.length == need):
                        # The arguments are in ``args`` already.
                        m.next = "READ"
                    with m.Else():
                        m.d.sync += status.eq(Status.BAD_LENGTH)
                        m.next = "RESP"
            with m.State("READ"):
                # The copy's read register takes the word at the address now, for EXEC.
                m.next = "READ2" if self._read_register else "EXEC"
            if self._read_register:
                with m.State("READ2"):
                    m.next = "EXEC"
            with m.State("EXEC"):
                m.d.comb += in_exec.eq(1)
                # ``ok`` is the status's test for OK, registered with it: RESP's reply length
                # is then a choice between constants by flip-flops.
                st = Signal(8)
                m.d.comb += st.eq(Mux(ident, Status.OK, Status.BAD_ADDRESS))
                m.d.sync += value.eq(rd_word)
                with m.If(~ident & (index[ib:] == 0)):
                    with m.Switch(index[:ib]):
                        for r in REGISTERS:
                            with m.Case(r.index):
                                if r.access == "rw":
                                    m.d.comb += st.eq(Status.OK)
                                else:
                                    if r.name in self.DYNAMIC:
                                        m.d.sync += value.eq(getattr(self, r.name.lower()))
                                    m.d.comb += st.eq(Mux(is_write, Status.READ_ONLY, Status.OK))
                m.d.sync += [status.eq(st), ok.eq(st == Status.OK)]
                m.next = "RESP"
            with m.State("RESP"):
                reading = ok & is_read
                m.d.comb += [c.resp.valid.eq(1), c.resp.payload.status.eq(status),
                             c.resp.payload.length.eq(Mux(reading, 4, Mux(ok & ident,
                                                                          IDENTITY_BYTES, 0)))]
                with m.If(c.resp.ready):
                    m.next = "IDLE"
                    with m.If(reading | (ok & ident)):
                        m.d.sync += send_on.eq(1)
                        m.next = "SEND"
            with m.State("SEND"):
                m.d.comb += sending.eq(1)
                with m.If(c.data.ready):
                    m.d.sync += [idx.eq(idx + 1), value.eq(value >> 8)]
                    with m.If(ident & (idx[:2] == 3)):
                        m.d.sync += [value.eq(rd_word), word.eq(word + 1)]
                    with m.If(idx == Mux(ident, IDENTITY_BYTES - 1, 3)):
                        m.d.sync += send_on.eq(0)
                        m.next = "IDLE"
        # The reply's bytes from flip-flops: ``value`` shifts a byte down as each is taken, and
        # ``send_on`` (SEND as a flag) gates them, so that no state decode or byte multiplexer
        # comes before the dispatcher's OR.
        m.d.comb += [c.data.valid.eq(send_on), c.data.payload.eq(Mux(send_on, value[:8], 0))]
        return m


class MemoryHandler(wiring.Component):
    """MEM_READ / MEM_WRITE and the packed transfers of the scratchpad.

    MEM_WRITE payload: byte address u32, then the data. MEM_READ payload: byte address u32,
    count u16; the reply carries ``count`` bytes. The packed transfers
    (:data:`lowbit.sim.link.PACKED_TRANSFERS`) move one byte lane of the words: MEM_WRITE_LOW
    writes each data byte to the low byte of the next word, MEM_FILL_HIGH each to the high
    bytes of the next ``block`` words, MEM_READ_LOW returns the low bytes of ``count`` words,
    MEM_READ_HIGH the high byte of every ``tile``-th word. Checks, in order: payload length
    (reads exactly 6, writes at least 4) -> ``BAD_LENGTH``; address at or past the end (or
    odd, for a packed transfer) -> ``BAD_ADDRESS``; range past the end (a packed transfer's
    bytes span ``2·span`` scratchpad bytes each) or a read longer than ``frame_bytes`` ->
    ``BAD_LENGTH``. Nothing is written unless all checks pass.

    The opcodes' low bits decode the transfer: bit 0 write, bit 1 low lane, bit 2 high lane
    (MEM_READ 0x20 .. MEM_FILL_HIGH 0x25). A packed transfer walks the words with the byte
    pointer on the lane (odd for the high byte, so the byte enables are MEM_WRITE's) in steps
    of two; a span of several words repeats a written byte or skips words read (a skipped word
    takes a cycle).

    The address and the count are read from ``args`` (the link's copy of the payload's first
    bytes, :attr:`lowbit.hw.link.HostLink.args`); a write skips the address's four bytes on
    ``command.arg`` before its data.

    For timing, the checks take two cycles (CHECK, CHECK2), the FSM decides on flags kept beside
    its counters, and the scratchpad address is the pointer register, stepped a cycle after each
    transfer: a word is written every second cycle at most, a byte read every third (against 10
    bit periods a byte on the line).

    Parameters
    ----------
    size : int
        Scratchpad bytes.
    frame_bytes : int
        Largest reply payload of a read.
    addr_width : int
        Word address width of the scratchpad port.
    block, tile : int
        Words per byte of MEM_FILL_HIGH and MEM_READ_HIGH (powers of two: the top's ``block``
        and ``matrix_lanes``).
    read_latency : int
        1: the reply's bytes come from the scratchpad's output; 2: from a register of it (for
        fast clocks, where a block RAM's clock-to-out leaves no time for the byte multiplexer
        and the link behind it): a cycle more after each pointer step, against the line's
        10 bit periods a byte; 3: the same, and the port's address, enables and data are
        registers too (``mem`` is flip-flops: no state decode in front of the block RAMs'
        enables), a cycle more again; 4: the same, and the scratchpad's output is a register
        of its block RAMs' (:class:`Scratchpad` ``read_register``), a cycle more again.

    Members
    -------
    command : In(CommandSignature())
    args : In(48)
        The payload's first six bytes (:attr:`lowbit.hw.link.HostLink.args`).
    mem : Out(ScratchPortSignature(addr_width))
    """

    @quiet_on_error
    def __init__(self, *, size, frame_bytes, addr_width, block=16, tile=8, read_latency=1):
        self._read_latency = _check_int("Read latency", read_latency, 1, 4)
        self._size = size
        self._frame_bytes = frame_bytes
        self._block = block
        self._tile = tile
        super().__init__({"command": In(CommandSignature()), "args": In(8 * ARG_BYTES),
                          "mem": Out(ScratchPortSignature(addr_width))})

    @property
    def read_latency(self):
        return self._read_latency

    def elaborate(self, platform):
        m = Module()
        c = self.command
        p = self.mem
        if self._read_latency >= 3:
            p = registered_port(m, self.mem)
        writing = Signal()
        packed = Signal()        # a packed transfer: one lane, the pointer steps by 2
        high = Signal()          # MEM_READ_HIGH / MEM_FILL_HIGH: spans of several words
        status = Signal(8)
        ok = Signal()            # status == OK
        skip = Signal(2)         # address bytes of a write passed over on ``arg``
        bad_addr = Signal()      # CHECK's address test, for CHECK2
        # Checks against the 32-bit address happen once, in CHECK; afterwards only the low bits
        # that address the scratchpad are kept.
        aw = self._size.bit_length()
        addr = self.args[0:32]
        # A count above frame_bytes is refused (BAD_LENGTH); below it, it has ``fb`` bits.
        fb = self._frame_bytes.bit_length()
        count = Signal(fb)
        too_long = Signal()
        ptr = Signal(aw)
        left = Signal(range(self._frame_bytes + 1))
        lb, lt = self._block.bit_length() - 1, self._tile.bit_length() - 1
        rep = Signal(max(lb, lt, 1))            # word within a span
        last = Signal(max(lb, lt, 1))           # span - 1
        # Scratchpad bytes the request covers: count << (0 | 1 | 1 + log2 span).
        extent = Signal(fb + max(lb, lt) + 1)
        with m.If(~packed):
            m.d.comb += extent.eq(count)
        with m.Elif(~high):
            m.d.comb += extent.eq(count << 1)
        with m.Elif(writing):
            m.d.comb += extent.eq(count << (1 + lb))
        with m.Else():
            m.d.comb += extent.eq(count << (1 + lt))
        end = Signal(max(aw, len(extent)) + 1)   # the request's end, CHECK's sum, for CHECK2
        # In a span: a written byte is consumed at its last word, a read one sent at its first.
        # A flag register, set with ``rep``, so that the pointer's step does not start with a
        # compare.
        span_end = Signal()

        # The pointer: loaded in CHECK, else stepped by 1 (2 for a packed transfer) in the
        # cycle after ``adv`` (``stepping``, a flip-flop, so that no handshake reaches its
        # carry chain). Written with the load's select in the addend's upper bits (the sum is
        # not used where it loads), so that the choice merges into the carry chain's LUTs
        # (lowbit.hw.ports.load_or_step). The scratchpad's address is the register ``ptr``
        # itself: after a step, WRITE waits a cycle (``stepping``) for the new address and
        # READ two (``stepping``, ``moved``; three with a read latency of 2, ``moved2``) for
        # the word at it, which costs nothing against the line's bytes.
        load = Signal()
        adv = Signal()
        stepping = Signal()
        moved = Signal()
        # With a read latency of 2, ``rdata`` is a register of the memory's output and the word
        # at a new address arrives a cycle later still (``moved2``).
        moved_more = []
        if self._read_latency >= 2:
            moved_more = [Signal(name=f"moved{k}") for k in range(2, self._read_latency + 1)]
            rdata = Signal(16)
            m.d.sync += [rdata.eq(p.rdata), moved_more[0].eq(moved)]
            m.d.sync += [b.eq(a) for a, b in zip(moved_more[:-1], moved_more[1:], strict=True)]
        else:
            rdata = p.rdata
        addend = Cat(stepping & ~packed, stepping & packed, load.replicate(aw - 2))
        m.d.comb += [p.addr.eq(ptr[1:]), p.re.eq(1),
                     p.wdata.eq(Cat(c.arg.payload, c.arg.payload)),
                     p.wmask.eq(Mux(ptr[0], 0b10, 0b01))]
        m.d.sync += [ptr.eq(Mux(load, Cat(addr[0] | high, addr[1:aw]), ptr + addend)),
                     stepping.eq(adv), moved.eq(stepping)]

        # ``left``: loaded with the count in CHECK, one less a byte (load_or_step). Its tests
        # against 0 and 1 are flags kept beside it (``left_zero``, ``left_one``), so that the
        # FSM's choices, and the pointer stepping on them, do not start with a compare.
        left_dec = Signal()
        left_zero = Signal()
        left_one = Signal()
        with m.If(load | left_dec):
            m.d.sync += left.eq(load_or_step(left, -1, load, count))
        with m.If(load):
            m.d.sync += [left_zero.eq(count == 0), left_one.eq(count == 1)]
        with m.Elif(left_dec):
            m.d.sync += [left_zero.eq(left_one), left_one.eq(left == 2)]

        def advance():
            rep_next = Mux(rep == last, 0, rep + 1)
            m.d.comb += adv.eq(1)
            m.d.sync += [rep.eq(rep_next), span_end.eq(rep_next == Mux(writing, last, 0))]

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += c.cmd.ready.eq(1)
                with m.If(c.cmd.valid):
                    op = c.cmd.payload.opcode
                    is_write = op[0]
                    n = c.cmd.payload.length
                    m.d.sync += [writing.eq(is_write), packed.eq(op[1] | op[2]), high.eq(op[2]),
                                 # rep = 0: a read's span starts at its end, a write's
                                 # only when the span is one word.
                                 rep.eq(0), span_end.eq(~is_write | ~op[2]),
                                 last.eq(Mux(op[2], Mux(is_write, self._block - 1,
                                                         self._tile - 1), 0)),
                                 # The arguments are in ``args`` already.
                                 # (n - 4 as load_or_step's sum: the choice merges.)
                                 count.eq(load_or_step(n, -4, ~is_write,
                                                       self.args[32:32 + fb])),
                                 too_long.eq(~is_write & (self.args[32:48] > self._frame_bytes)),
                                 ok.eq(0)]
                    with m.If(Mux(is_write, n >= 4, n == 6)):
                        m.next = "CHECK"
                    with m.Else():
                        m.d.sync += status.eq(Status.BAD_LENGTH)
                        m.next = "RESP"
            # The checks take two cycles: CHECK registers the address test and the request's
            # end (a sum), CHECK2 compares the end and decides.
            with m.State("CHECK"):
                m.d.comb += load.eq(1)
                # Only used with addr < size, so its low ``aw`` bits are the whole address.
                m.d.sync += [bad_addr.eq((addr >= self._size) | (packed & addr[0])),
                             end.eq(addr[:aw] + extent)]
                m.next = "CHECK2"
            with m.State("CHECK2"):
                m.next = "RESP"
                with m.If(bad_addr):
                    m.d.sync += status.eq(Status.BAD_ADDRESS)
                with m.Elif((end > self._size) | too_long):
                    m.d.sync += status.eq(Status.BAD_LENGTH)
                with m.Else():
                    m.d.sync += [status.eq(Status.OK), ok.eq(1)]
                    with m.If(writing):
                        m.next = "SKIP"
            with m.State("SKIP"):
                # The four address bytes; ``skip`` wraps to 0 with the last.
                m.d.comb += c.arg.ready.eq(1)
                with m.If(c.arg.valid):
                    m.d.sync += skip.eq(skip + 1)
                    with m.If(skip == 3):
                        m.next = "WRITE"
            with m.State("WRITE"):
                with m.If(left_zero):
                    m.next = "RESP"
                with m.Else():
                    m.d.comb += [c.arg.ready.eq(span_end & ~stepping),
                                 p.we.eq(c.arg.valid & ~stepping)]
                    with m.If(c.arg.valid & ~stepping):
                        advance()
                        m.d.comb += left_dec.eq(span_end)
            with m.State("RESP"):
                reading = ok & ~writing
                m.d.comb += [c.resp.valid.eq(1), c.resp.payload.status.eq(status),
                             c.resp.payload.length.eq(Mux(reading, left, 0))]
                with m.If(c.resp.ready):
                    m.next = "IDLE"
                    with m.If(reading & ~left_zero):
                        m.next = "READ"
            with m.State("READ"):
                # rdata holds the word at ``ptr`` unless the pointer stepped in the last two
                # cycles (three with a read latency of 2); words skipped within a span need no
                # data.
                fresh = ~stepping & ~moved
                for moved_k in moved_more:
                    fresh = fresh & ~moved_k
                m.d.comb += [c.data.valid.eq(span_end & fresh),
                             c.data.payload.eq(Mux(ptr[0], rdata[8:], rdata[:8]))]
                with m.If((c.data.ready & fresh) | ~span_end):
                    advance()
                with m.If(c.data.ready & span_end & fresh):
                    m.d.comb += left_dec.eq(1)
                    with m.If(left_one):
                        m.next = "IDLE"
        return m


class Accelerator(wiring.Component):
    """The accelerator top: host link, registers, scratchpad, engines and the layer sequencer.

    Parameters
    ----------
    clk_freq : int or float
        Clock frequency in Hz (default 12 MHz, iCEBreaker).
    baud : int
        UART baud rate (default 1 Mbaud). The UART keeps the exact bit period
        ``clk_freq / baud`` (a fraction, :func:`lowbit.hw.uart.uart_period`), which must be at
        least 3 cycles (2 with ``uart_ddr``); IDENTIFY reports the rate and the clock.
    uart_ddr : bool
        The UART receiver takes two samples of the line per cycle (``rx`` is 2 bits: the
        samples of a DDR input register at the pin, rising edge first;
        :class:`lowbit.hw.uart.UARTReceiver`), so the link runs at 2 cycles per bit: 12 Mbaud
        at 24 MHz. Default ``False``.
    lanes : int
        Engine lanes, 1 to 32 (reported by IDENTIFY; engines are attached later).
    scratch_bytes : int, optional
        Scratchpad size; default 4096 in block RAM, 131072 (four banks) in SPRAM.
    use_spram : bool
        Put the scratchpad in UP5K SB_SPRAM256KA banks.
    frame_bytes : int
        Frame buffer size = largest payload of a request and of a MEM_READ reply, 16 to 4096.
    timeout_bits : int
        Inter-byte timeout inside a frame, in bit times (10 to 1000000).
    lut_tables : int
        Byte tables of the transfer-LUT engine (LUT_WRITE / LUT_APPLY), 0 to 64; 0 leaves
        the engine out.
    grand : bool
        Include the Irwin-Hall grand unit (GRAND_SEED / GRAND_SAMPLES), ``lanes`` lanes.
    grand_modes : iterable of str, optional
        Modes built into the grand unit (names of :data:`lowbit.sim.grand.MODES`; default all; a
        mode left out acts as normal). For area.
    sequencer : bool
        Include the layer sequencer (host command ``RUN``, :mod:`lowbit.hw.sequencer`) and the
        weight
        memory; the engines below exist only with it. Default ``False``.
    matrix_lanes : int
        Matrix lanes ``N``: weight banks, BFP column lanes, discrete terms per beat; a power of
        two, 4 to 32.
    block : int
        BFP block size ``B`` of the column and the quantiser, a power of two, 2 to 256.
    max_blocks : int
        Largest MATVEC block count, 1 to 256.
    weight_depth : int
        Entries (16-bit words) per weight bank, a power of two, 16 to 16384.
    bfp, quantiser, discrete : bool
        Build the BFP column (MATVEC), the quantiser (QUANT), the discrete unit (DMATVEC).
    bfp_stochastic, bfp_predictor, bfp_mant_width : bool
        Options of the BFP column (:class:`lowbit.hw.sequencer.Sequencer`): stochastic
        rounding, the predicted exponent selector, the output mantissa width from
        ``MANT_WIDTH`` (a MATVEC needing one that is left out fails with ``BAD_OPCODE``; without
        the last the width is 8).
    bfp_acc_block_ram, bfp_pipelined, bfp_pipelined_combiner : bool
        Area and timing options of the BFP column: the accumulator in block RAM, all pipeline
        stages, the combiner's.
    busy_count : bool
        Count the matrix engine's busy cycles of a RUN (the reply's ``busy``; without it
        ``0xFFFFFFFF``, "not counted").
    code_bits : int
        Largest discrete code width of the discrete unit and the quantiser, 1 to 3.
    multiplier : {"lut", "sb_mac16", "mult18x18d"}
        Multiplier style of the BFP column.
    dsp_lanes : int or None
        At most this many BFP column lanes (0 to ``matrix_lanes``) use ``multiplier``; the
        others are LUT-logic multipliers that synthesis never maps to a DSP (a column wider
        than the device's DSPs, :class:`lowbit.hw.mult.MultiplierArray` ``hard_lanes``).
        Default ``None``: every lane.
    drain_lanes : int or None
        Lanes the BFP column's drain moves into its combiners per cycle (a power of two up to
        ``matrix_lanes / 4``; :class:`lowbit.hw.bfp.BFPColumn` ``drain_lanes``). Default
        ``None``: ``matrix_lanes / block`` (at least 1) with ``bfp_pipelined``, else 1, so that
        a column wider than its block is not drain-bound.
    matvec_x_buffer : bool or None
        The sequencer keeps a MATVEC's input vector in a memory of its own as the first tile
        reads it and feeds the later tiles from there (:class:`lowbit.hw.sequencer.Sequencer`
        ``x_buffer``). Default ``None``: with the BFP column and a block-RAM scratchpad (one
        more block RAM of ``max_blocks · block`` words).
    matvec_bias_fifo : bool
        MATVEC's bias words go into a bias memory in front of the column, so the sequencer
        reads the next tile's ``x`` while the column still drains the tile's last block, and a
        MATVEC's later samples take their bias from there (:class:`lowbit.hw.sequencer.
        Sequencer` ``bias_fifo``; one block RAM on the iCEBreaker; not with
        ``matvec_x_buffer``, whose default it turns off). Default ``False``.
    seq_control : bool
        The sequencer's control and data-movement instructions: JUMP, LOOP, DJNZ, SETOFS,
        ADDOFS (the offsets the ``F_OFS`` flags add), MOVE and LUT (:class:`lowbit.hw.
        sequencer.Sequencer` ``control``). ``False``: they fail with ``BAD_OPCODE`` and the
        flags add nothing, for straight-line programs (layers as MATVECs of many samples;
        the iCEBreaker's profile). Default ``True``.
    seq_pipelined : bool
        Register stages for fast clocks: LOADW's writes, the discrete unit's weight codes,
        DMATVEC's x words and results go through registers and the discrete unit sums its lanes
        in two stages, and the scratchpad's port goes through registers: the memory handler's
        address, enables and data and the memory's output (:class:`MemoryHandler`
        ``read_latency`` 3), and the sequencer's the same way, its reader a stage more
        (:class:`lowbit.hw.sequencer.Sequencer` ``pipelined``; the same results), and the
        GRAND handler's registers for fast clocks (:class:`lowbit.hw.engines.GrandHandler`
        ``pipelined``), and the link's ``arg`` bytes from a register of its frame buffer
        (:class:`lowbit.hw.link.HostLink` ``arg_register``). Default ``False``.
    scratch_write_addr : bool or None
        The sequencer writes the block-RAM scratchpad at an address of its own while it reads
        (:attr:`scratch_write_addr`); ``None`` (default): wherever the scratchpad is block RAM
        and the sequencer is built. ``True`` with ``use_spram`` is a ValueError.
    uart : bool
        With ``True`` (default) the ports are ``rx`` / ``tx``. With ``False`` the UART is left
        out and the link's byte streams are the ports ``i`` / ``o`` (the simulation shortcut:
        one byte per cycle instead of 10 bit times; the timeout still counts
        ``timeout_bits * divisor`` cycles, ``divisor`` the bit period rounded).
    simulation : bool
        Use behavioural models of vendor primitives (SPRAM) so Amaranth's simulator runs it.

    Members
    -------
    rx : In(1), or In(2) with ``uart_ddr``
        UART receive (``uart=True``); with ``uart_ddr`` the cycle's two line samples,
        ``rx[0]`` the earlier.
    tx : Out(1)
        UART transmit (``uart=True``).
    i : In(stream.Signature(8))
        Request bytes (``uart=False``).
    o : Out(stream.Signature(8))
        Reply bytes (``uart=False``).
    leds : Out(2)
        Bit 0: activity (stretched pulse per received byte); bit 1: error (set by an error
        reply, cleared by the next OK reply).

    Raises
    ------
    TypeError, ValueError
        For a parameter of the wrong kind or out of range.
    """

    @quiet_on_error
    def __init__(self, *, clk_freq=12e6, baud=1_000_000, lanes=2, scratch_bytes=None,
                 use_spram=False, frame_bytes=512, timeout_bits=10_000, lut_tables=4, grand=True,
                 grand_modes=None, sequencer=False, matrix_lanes=8, block=16, max_blocks=16,
                 weight_depth=512, bfp=True, quantiser=True, discrete=True, code_bits=3,
                 multiplier="lut", uart=True, simulation=False, bfp_stochastic=True,
                 bfp_predictor=True, bfp_acc_block_ram=False, bfp_pipelined=True,
                 busy_count=True, uart_ddr=False, bfp_pipelined_combiner=False,
                 bfp_mant_width=True, dsp_lanes=None, scratch_write_addr=None,
                 drain_lanes=None, matvec_x_buffer=None, seq_pipelined=False,
                 matvec_bias_fifo=False, seq_control=True):
        p = check_top_params(
            clk_freq=clk_freq, baud=baud, lanes=lanes, scratch_bytes=scratch_bytes,
            use_spram=use_spram, frame_bytes=frame_bytes, timeout_bits=timeout_bits,
            lut_tables=lut_tables, grand=grand, grand_modes=grand_modes, sequencer=sequencer,
            matrix_lanes=matrix_lanes, block=block, max_blocks=max_blocks,
            weight_depth=weight_depth, bfp=bfp, quantiser=quantiser, discrete=discrete,
            code_bits=code_bits, multiplier=multiplier, uart=uart, simulation=simulation,
            bfp_stochastic=bfp_stochastic, bfp_predictor=bfp_predictor,
            bfp_acc_block_ram=bfp_acc_block_ram, bfp_pipelined=bfp_pipelined,
            uart_ddr=uart_ddr, bfp_pipelined_combiner=bfp_pipelined_combiner,
            bfp_mant_width=bfp_mant_width, dsp_lanes=dsp_lanes,
            scratch_write_addr=scratch_write_addr, drain_lanes=drain_lanes,
            matvec_x_buffer=matvec_x_buffer, seq_pipelined=seq_pipelined,
            matvec_bias_fifo=matvec_bias_fifo, seq_control=seq_control)
        self._uart_ddr = uart_ddr
        self._divisor = p["divisor"]
        self._period = p["bit_period"]
        self._clk_freq = clk_freq
        self._baud = baud
        self._lanes = lanes
        self._use_spram = use_spram
        self._scratch_bytes = p["scratch_bytes"]
        self._frame_bytes = frame_bytes
        self._timeout_bits = timeout_bits
        self._uart = uart
        self._simulation = simulation
        self._lut_tables = lut_tables
        self._grand = grand
        self._grand_modes = p["grand_modes"]
        self._sequencer = sequencer
        self._scratch_write_addr = (sequencer and not use_spram if scratch_write_addr is None
                                    else sequencer and scratch_write_addr)
        self._seq_params = dict(
            lanes=matrix_lanes, block=block, max_blocks=max_blocks, weight_depth=weight_depth,
            bfp=bfp, quantiser=quantiser, discrete=discrete, code_bits=code_bits,
            mult=multiplier, bfp_stochastic=bfp_stochastic, bfp_predictor=bfp_predictor,
            bfp_acc_block_ram=bfp_acc_block_ram, bfp_pipelined=bfp_pipelined,
            bfp_pipelined_combiner=bfp_pipelined_combiner, bfp_mant_width=bfp_mant_width,
            busy_count=_check_bool("busy_count", busy_count), hard_lanes=dsp_lanes,
            drain_lanes=p["drain_lanes"], x_buffer=p["matvec_x_buffer"],
            pipelined=p["seq_pipelined"], bias_fifo=p["matvec_bias_fifo"],
            control=p["seq_control"])
        if self.scratch_read_register:
            self._seq_params["read_register"] = True
        self._engines = (((1 << ENGINE_BITS["lut"]) if lut_tables else 0)
                         | ((1 << ENGINE_BITS["grand"]) if grand else 0))
        if sequencer:
            self._engines |= 1 << ENGINE_BITS["sequencer"]
            for name in ("bfp", "quantiser", "discrete"):
                if self._seq_params[name]:
                    self._engines |= 1 << ENGINE_BITS[name]
        self._identity = Identity(MAGIC, PROTOCOL_VERSION, DESIGN_VERSION, self._lanes,
                                  self._scratch_bytes, self._frame_bytes, self._engines,
                                  self._use_spram, baud, round(clk_freq),
                                  seq_control=p["seq_control"])
        if uart:
            members = {"rx": In(2, init=3) if uart_ddr else In(1, init=1),
                       "tx": Out(1, init=1)}
        else:
            members = {"i": In(stream.Signature(8)), "o": Out(stream.Signature(8))}
        members["leds"] = Out(2)
        super().__init__(members)

    clk_freq = property(lambda self: self._clk_freq)
    baud = property(lambda self: self._baud)
    divisor = property(lambda self: self._divisor)
    #: UART bit period in cycles (:class:`fractions.Fraction`, ``clk_freq / baud``).
    bit_period = property(lambda self: self._period)
    lanes = property(lambda self: self._lanes)
    scratch_bytes = property(lambda self: self._scratch_bytes)
    use_spram = property(lambda self: self._use_spram)
    frame_bytes = property(lambda self: self._frame_bytes)
    timeout_bits = property(lambda self: self._timeout_bits)
    uart = property(lambda self: self._uart)
    uart_ddr = property(lambda self: self._uart_ddr)
    simulation = property(lambda self: self._simulation)
    identity = property(lambda self: self._identity)
    lut_tables = property(lambda self: self._lut_tables)

    grand = property(lambda self: self._grand)
    grand_modes = property(lambda self: self._grand_modes)
    sequencer = property(lambda self: self._sequencer)
    matrix_lanes = property(lambda self: self._seq_params["lanes"])
    block = property(lambda self: self._seq_params["block"])
    max_blocks = property(lambda self: self._seq_params["max_blocks"])
    weight_depth = property(lambda self: self._seq_params["weight_depth"])
    multiplier = property(lambda self: self._seq_params["mult"])
    dsp_lanes = property(lambda self: self._seq_params["hard_lanes"])
    drain_lanes = property(lambda self: self._seq_params["drain_lanes"])
    matvec_x_buffer = property(lambda self: self._seq_params["x_buffer"])
    seq_pipelined = property(lambda self: self._seq_params["pipelined"])
    matvec_bias_fifo = property(lambda self: self._seq_params["bias_fifo"])
    seq_control = property(lambda self: self._seq_params["control"])

    def design_params(self):
        """Generator parameters reported by the ``ID_MATRIX`` / ``ID_ENGINE`` registers
        (:func:`lowbit.sim.link.design_registers`), as the driver reads them back."""
        p = self._seq_params
        return dict(matrix_lanes=p["lanes"], block=p["block"], max_blocks=p["max_blocks"],
                    weight_depth=p["weight_depth"], lut_tables=self._lut_tables,
                    code_bits=p["code_bits"], bfp_stochastic=p["bfp_stochastic"],
                    bfp_predictor=p["bfp_predictor"], bfp_mant_width=p["bfp_mant_width"],
                    frac_bits=COLUMN_FRAC_BITS,
                    rand_bits=RAND_BITS, disc_acc_width=DISCRETE_ACC_WIDTH,
                    grand_modes=self._grand_modes)

    def sequencer_params(self):
        """Keyword parameters of the :class:`lowbit.hw.sequencer.Sequencer` of this design."""
        return dict(self._seq_params, scratch_bytes=self._scratch_bytes,
                    addr_width=max((self._scratch_bytes // 2 - 1).bit_length(), 1),
                    lut=bool(self._lut_tables), lut_tables=max(self._lut_tables, 1),
                    grand=self._grand, simulation=self._simulation,
                    write_addr=self.scratch_write_addr)

    @property
    def scratch_read_latency(self):
        """Cycles from the memory handler's scratchpad read to the register it takes the word
        from: 3 with the sequencer's ``seq_pipelined`` (its port and the memory's output
        through registers, as the sequencer's reader, which has a stage more), 4 with the
        scratchpad's read register too (:attr:`scratch_read_register`), else 1."""
        if self.scratch_read_register:
            return 4
        return 3 if self._sequencer and self._seq_params["pipelined"] else 1

    @property
    def scratch_read_register(self):
        """The block-RAM scratchpad's output is a register of each bank's (:class:`Scratchpad`
        ``read_register``): with the sequencer's ``seq_pipelined``, a cycle more for its reader
        (:class:`lowbit.hw.sequencer.Sequencer` ``read_register``) and the memory handler."""
        return self._sequencer and self._seq_params["pipelined"] and not self._use_spram

    @property
    def scratch_write_addr(self):
        """The sequencer writes the scratchpad at an address of its own while it reads: the
        block-RAM scratchpad's read and write ports side by side (not the SPRAM's one port)."""
        return self._scratch_write_addr

    def column_model(self):
        """The golden :class:`lowbit.sim.bfp_column.ColumnModel` of the sequencer's BFP column."""
        from lowbit.sim.bfp_column import ColumnModel
        seq = Sequencer(**self.sequencer_params())
        seq._MustUse__silence = True
        return ColumnModel(**seq.column_params())

    @property
    def engine_names(self):
        return [n for n, b in ENGINE_BITS.items() if self._engines >> b & 1]

    def dispatch_table(self):
        """Rows of the dispatcher: opcode groups, one handler each (engines append rows). PING
        is not among them: the dispatcher answers it (:class:`lowbit.hw.link.Dispatcher`
        ``echo``)."""
        table = [(Opcode.IDENTIFY, Opcode.REG_READ, Opcode.REG_WRITE),
                 (Opcode.MEM_READ, Opcode.MEM_WRITE, *PACKED_TRANSFERS)]
        if self._lut_tables:
            table.append((Opcode.LUT_WRITE, Opcode.LUT_APPLY))
        if self._grand:
            table.append((Opcode.GRAND_SEED, Opcode.GRAND_SAMPLES))
        if self._sequencer:
            table.append((Opcode.RUN,))
        return table

    def elaborate(self, platform):
        m = Module()
        link = HostLink(frame_bytes=self._frame_bytes,
                        timeout_cycles=self._timeout_bits * self._divisor,
                        arg_register=self.seq_pipelined)
        m.submodules.link = link
        m.submodules.dispatch = dispatch = Dispatcher(self.dispatch_table(),
                                                      echo=(Opcode.PING,))
        # Engines read the configuration registers from the ``regs`` ports (e.g. regs.mant_width).
        # The register handler also answers IDENTIFY (its record is in the registers' RAM).
        m.submodules.registers = regs = RegisterHandler(self._identity, self.design_params(),
                                                        read_register=self.seq_pipelined)
        scratch = Scratchpad(size=self._scratch_bytes, use_spram=self._use_spram,
                             simulation=self._simulation, write_addr=self.scratch_write_addr,
                             read_register=self.scratch_read_register)
        m.submodules.scratch = scratch
        m.submodules.memory = mem = MemoryHandler(
            size=self._scratch_bytes, frame_bytes=self._frame_bytes,
            addr_width=scratch.addr_width, block=self._seq_params["block"],
            tile=self._seq_params["lanes"], read_latency=self.scratch_read_latency)
        handlers = [regs, mem]
        if self._lut_tables:
            m.submodules.lut = lut = LUTHandler(lanes=self._lanes, tables=self._lut_tables,
                                                frame_bytes=self._frame_bytes)
            handlers.append(lut)
        if self._grand:
            m.submodules.grand = grand = GrandHandler(lanes=self._lanes,
                                                      frame_bytes=self._frame_bytes,
                                                      modes=self._grand_modes,
                                                      pipelined=self._seq_params["pipelined"])
            m.d.comb += grand.mode.eq(regs.grand_mode)
            handlers.append(grand)
        if self._sequencer:
            m.submodules.sequencer = seq = Sequencer(**self.sequencer_params())
            handlers.append(seq)
            wiring.connect(m, seq.cfg, regs.cfg)
            m.d.comb += seq.prng_load.eq(regs.prng_load)
            for name in SEQ_REGISTERS:
                m.d.comb += getattr(seq, name).eq(getattr(regs, name))
            if self._lut_tables:
                wiring.connect(m, seq.lut, lut.seq)
                m.d.comb += lut.seq_en.eq(seq.busy)
            if self._grand:
                wiring.connect(m, grand.seq, seq.grand)
                m.d.comb += grand.seq_en.eq(seq.busy)
        wiring.connect(m, link.command, dispatch.command)
        # One copy of the payload's fixed arguments, kept by the link, for every handler that
        # has them (each used to collect them from ``arg`` into a register of its own).
        m.d.comb += [regs.args.eq(link.args), mem.args.eq(link.args)]
        if self._lut_tables:
            m.d.comb += lut.args.eq(link.args[:16])
        for k, handler in enumerate(handlers):
            wiring.connect(m, getattr(dispatch, f"handler_{k}"), handler.command)
        if self._sequencer:
            # The host's MemoryHandler and the sequencer never run at the same time (the link
            # is stop-and-wait and RUN replies only at the end), so a mux on ``busy`` arbitrates.
            # The address is an OR (the sequencer's is 0 while it is not busy): no multiplexer
            # behind the sequencer's last, on its reader's late decision.
            m.d.comb += scratch.port.addr.eq(seq.mem.addr | Mux(seq.busy, 0, mem.mem.addr))
            if self.scratch_write_addr:
                m.d.comb += scratch.port.waddr.eq(seq.mem.waddr
                                                  | Mux(seq.busy, 0, mem.mem.addr))
            with m.If(seq.busy):
                m.d.comb += [scratch.port.we.eq(seq.mem.we), scratch.port.wmask.eq(seq.mem.wmask),
                             scratch.port.wdata.eq(seq.mem.wdata), scratch.port.re.eq(seq.mem.re)]
            with m.Else():
                m.d.comb += [scratch.port.we.eq(mem.mem.we), scratch.port.wmask.eq(mem.mem.wmask),
                             scratch.port.wdata.eq(mem.mem.wdata), scratch.port.re.eq(mem.mem.re)]
            m.d.comb += [seq.mem.rdata.eq(scratch.port.rdata), mem.mem.rdata.eq(scratch.port.rdata)]
        else:
            wiring.connect(m, mem.mem, scratch.port)

        framing = Signal(8)
        overrun = Signal(8)
        rx_byte = Signal()
        if self._uart:
            m.submodules.uart_rx = urx = UARTReceiver(self._period, ddr=self._uart_ddr)
            m.submodules.uart_tx = utx = UARTTransmitter(self._period)
            m.d.comb += [urx.rx.eq(self.rx), self.tx.eq(utx.tx)]
            wiring.connect(m, urx.o, link.i)
            # One byte register between the link and the transmitter: the link's ready is a
            # flip-flop, not the transmitter's bit counter feeding the link, the dispatcher and
            # the handlers in one cycle. It costs no line time: a byte lasts 10 bit periods.
            # The register's state is two flip-flops, ``tx_room`` for the link's side and its
            # complement ``tx_full`` for the transmitter's (at the pin), so that placement keeps
            # each beside its readers: one flip-flop read on both sides sat by the pin, a long
            # route from the start of the link's reply path (the dispatcher, the handlers).
            tx_byte = Signal(8)
            tx_full = Signal()
            tx_room = Signal(init=1)
            m.d.comb += [link.o.ready.eq(tx_room), utx.i.valid.eq(tx_full),
                         utx.i.payload.eq(tx_byte)]
            with m.If(link.o.valid & tx_room):
                m.d.sync += [tx_byte.eq(link.o.payload), tx_full.eq(1), tx_room.eq(0)]
            with m.Elif(utx.i.ready):
                m.d.sync += [tx_full.eq(0), tx_room.eq(1)]
            # Saturating at 0xFF: the carry out of the increment says so (no compare).
            framing_inc = Signal(9)
            overrun_inc = Signal(9)
            m.d.comb += [framing_inc.eq(framing + 1), overrun_inc.eq(overrun + 1)]
            with m.If(urx.framing_error & ~framing_inc[8]):
                m.d.sync += framing.eq(framing_inc)
            with m.If(urx.overrun & ~overrun_inc[8]):
                m.d.sync += overrun.eq(overrun_inc)
            m.d.comb += rx_byte.eq(urx.o.valid & urx.o.ready)
        else:
            wiring.connect(m, wiring.flipped(self.i), link.i)
            wiring.connect(m, link.o, wiring.flipped(self.o))
            m.d.comb += rx_byte.eq(self.i.valid & self.i.ready)
        m.d.comb += [regs.link_skipped.eq(link.skipped), regs.link_errors.eq(link.errors),
                     regs.uart_errors.eq(Cat(framing, overrun))]

        # LEDs: activity stretched to 2-4 prescaler periods (~1/20 s) so single frames are
        # visible; a free-running prescaler plus a 2-bit counter keeps long carry chains with
        # load muxes off the timing path. Error: latched.
        prescale = Signal(max((int(self._clk_freq) // 40 - 1).bit_length(), 1))
        tick = Signal()
        # The tick is the increment's carry out (the prescaler wraps), not a compare with 0.
        prescale_inc = Signal(len(prescale) + 1)
        m.d.comb += prescale_inc.eq(prescale + 1)
        m.d.sync += [prescale.eq(prescale_inc), tick.eq(prescale_inc[-1])]
        activity = Signal(2)
        with m.If(rx_byte):
            m.d.sync += activity.eq(3)
        with m.Elif(tick & (activity != 0)):
            m.d.sync += activity.eq(activity - 1)
        error = Signal()
        with m.If(link.reply_error):
            m.d.sync += error.eq(1)
        with m.Elif(link.reply_ok):
            m.d.sync += error.eq(0)
        m.d.comb += self.leds.eq(Cat(activity != 0, error))
        return m

