"""The layer-program sequencer of the accelerator top (DESIGN §3.6, issue #8).

The sequencer executes the instruction set of :mod:`lowbit.sim.program` (its module docstring is the
normative specification) from the scratchpad, on behalf of the host command ``RUN``. It owns the
weight memory, the BFP column, the quantiser, the discrete unit and the rounding PRNG; it
borrows the scratchpad port, the transfer-LUT engine and the grand unit's sample stream from the
host-command handlers while it runs (``busy``). ``docs/sequencer.md`` describes the design.

Datapath
--------
Every data instruction uses one scratchpad port (one read or one write per cycle, one cycle of
read latency; two with ``pipelined``, whose reader has a second stage) through two shared
pieces:

* a **reader stage**: a read is issued when the stage is empty or its word is being taken; the
  word then sits in the memory's output register, which holds it while it waits (the port reads
  only with ``re``, and write cycles do not disturb the read register), so no skid buffer is
  needed. The address is always the next one to read, from flip-flops: the decision to read
  reaches the memory as ``re`` alone;
* a **write register**: a result offered by an engine is written on the next cycle, and writes
  win the port over reads. Engines' output streams are therefore always ready.

Weights live in ``lanes`` banks (``lib.memory.Memory``, 16 bits x ``weight_depth``) read at one
entry per cycle, in step with the reader stage (the banks' read enable holds their output while
the stage waits).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from lowbit.sim.link import REGISTERS, Status
from lowbit.sim.program import CONTROL_OPS, F_BIAS, F_LUT, F_OFS_DST, F_OFS_SRC, Op
from lowbit.sim.topparams import check_drain_lanes

from .bfp import BFPColumn, ExpMode
from .common import check_bool as _check_bool
from .common import check_int as _check_int
from .common import register_copy
from .discrete import CodeEntry, DiscreteOp, DiscreteUnit
from .link import CommandSignature
from .mult import MULT_STYLES, check_hard_lanes
from .ports import (
    COLUMN_FRAC_BITS,
    DISCRETE_ACC_WIDTH,
    RAND_BITS,
    SEQ_REGISTERS,
    ConfigPortSignature,
    LUTPortSignature,
    ScratchPortSignature,
    load_or_step,
    registered_port,
)
from .prng import Xoroshiro128aox
from .quantiser import Quantiser, QuantTarget
from .uart import quiet_on_error

__all__ = ["Sequencer"]

_REG_WIDTH = {r.name.lower(): r.width for r in REGISTERS}


def _check_pow2(name, value, lo, hi):
    _check_int(name, value, lo, hi)
    if value & (value - 1):
        raise ValueError(f"{name} must be a power of two between {lo} and {hi}, not {value}")
    return value


def _log2(n):
    return n.bit_length() - 1


class Sequencer(wiring.Component):
    """Run layer programs (:mod:`lowbit.sim.program`) for the host command ``RUN``.

    ``RUN`` payload: start byte address u32, instruction limit u32. Checks, in order: length
    ``!= 8`` -> ``BAD_LENGTH``; start odd or ``start + 16 > scratch_bytes`` -> ``BAD_ADDRESS``;
    limit 0 -> ``BAD_LENGTH`` (all with an empty reply). Otherwise the program runs and the reply
    carries 16 bytes, ``pc`` (byte address of the instruction that halted or failed, or that
    would have run next at the limit), ``executed`` (instructions completed, HALT included),
    ``cycles`` (clock cycles of the execution) and ``busy`` (cycles in which the matrix engine
    accepted a beat: one input element with its ``N`` weights, for the BFP column or the
    discrete unit; :class:`lowbit.sim.program.RunResult` predicts it), all u32; status ``OK``
    (HALT), ``LIMIT`` or the failing instruction's error (``docs/sequencer.md`` lists the checks
    of every instruction).

    Parameters
    ----------
    scratch_bytes : int
        Scratchpad size in bytes (even).
    addr_width : int
        Word address width of the scratchpad port.
    lanes : int
        Matrix lanes ``N``: weight banks, BFP column lanes and discrete terms per beat; a power
        of two, 4..64.
    block : int
        BFP block size ``B`` (column and quantiser), a power of two, 2..256.
    max_blocks : int
        Largest MATVEC block count ``nb``, 1..256.
    weight_depth : int
        Entries per weight bank, a power of two, 16..16384.
    bfp, quantiser, discrete : bool
        Build the BFP column (MATVEC), the quantiser (QUANT), the discrete unit (DMATVEC).
    bfp_stochastic : bool
        The column rounds stochastically (``ROUNDING`` 2). Without it a MATVEC with
        ``ROUNDING`` 2 fails with ``BAD_OPCODE``, and without the quantiser there is no
        rounding PRNG.
    bfp_predictor : bool
        The column has the predicted exponent selector (``EXP_SELECT`` 2). Without it a
        MATVEC with ``EXP_SELECT`` 2 fails with ``BAD_OPCODE``.
    bfp_mant_width : bool
        The column takes its output mantissa width from ``MANT_WIDTH`` (2..8). Without it the
        column's width is fixed at 8 and a MATVEC with ``MANT_WIDTH`` below 8 (as decoded: the
        register clamped to 2..8) fails with ``BAD_OPCODE``.
    bfp_acc_block_ram, bfp_pipelined, bfp_pipelined_combiner : bool
        The column's accumulator memory in block RAM, its pipelines with all stages, its
        combiner's stages without the others' (:class:`lowbit.hw.bfp.BFPColumn`
        ``acc_block_ram``, ``pipelined`` and ``pipelined_combiner``; area and timing options
        for iCE40).
    busy_count : bool
        Count the matrix engine's busy cycles for the RUN reply (a 32-bit counter); without
        it the reply's ``busy`` is ``0xFFFFFFFF``, "not counted".
    code_bits : int
        Largest discrete code width of the discrete unit and quantiser, 1..3.
    quant_mult_bits : int
        Width of the quantiser's int8 multiplier (0..16; driven with 1).
    lut : bool
        A transfer-LUT engine is attached to ``lut`` (LUT instruction).
    lut_tables : int
        Its byte tables (``LUT_SELECT`` must be below), 1..64.
    grand : bool
        A grand unit is attached to ``grand`` (GRAND instruction).
    mult : {"lut", "sb_mac16", "mult18x18d"}
        Multiplier style of the BFP column.
    hard_lanes : int or None
        At most this many column lanes (0..``lanes``) use ``mult``, the others LUT-logic
        multipliers (:class:`lowbit.hw.bfp.BFPColumn` ``hard_lanes``); ``None``: every lane.
    drain_lanes : int
        Lanes the BFP column's drain moves per cycle (:class:`lowbit.hw.bfp.BFPColumn`
        ``drain_lanes``; a power of two up to ``lanes / 4``, 1 without ``bfp_pipelined``).
    x_buffer : bool
        A MATVEC keeps its input vector ``x`` in a memory of ``max_blocks · B`` words as the
        first tile reads it, and feeds the later tiles' beats from there: the scratchpad port
        is left to the bias words and the results, and a tile's beats overlap the previous
        tile's bias. (MATVEC's results with a destination overlapping ``x`` are unspecified;
        with the buffer they are the reference Machine's, which reads all sources first.)
    bias_fifo : bool
        Without the x buffer: MATVEC's bias words go from the reader into a bias memory of
        ``weight_depth / block · lanes`` words (the most a MATVEC's ``T · N`` bias words can be;
        one block RAM on the iCEBreaker) in front of the column, so the reader moves on to the
        next tile's ``x`` as soon as it has read them, while the column still drains the tile's
        last block before it takes them; the instruction's later samples (w7) take their bias
        from there, so only its first sample reads the bias from the scratchpad. ``x_buffer``
        must be off. The same results in fewer cycles.
    control : bool
        The control and data-movement instructions (:data:`lowbit.sim.program.CONTROL_OPS`:
        JUMP, LOOP, DJNZ, SETOFS, ADDOFS, MOVE, LUT). Without them they decode as unknown
        opcodes (``BAD_OPCODE``), the offsets are 0 (the ``F_OFS`` flags add nothing) and
        their logic is left out: straight-line programs, whose layers are MATVECs of many
        samples (the iCEBreaker's profile).
    pipelined : bool
        Register stages for fast clocks (the ULX3S's profile), where block RAM outputs (about
        5.7 ns clock-to-out on ECP5) met logic and long routes:

        * LOADW's writes reach the weight banks through a register of the data, the entry and
          one enable per bank, the data and the entry in one copy per eight banks (each write
          lands a cycle later; no instruction reads the weights within a fetch of LOADW's
          end);
        * the discrete unit takes its weight codes from two registers after the banks'
          outputs, the first beside the banks (a beat waits until the second holds its entry,
          three cycles after the entry changes);
        * DMATVEC's x words reach the gather register a cycle after they are taken, through a
          register of the word in sign-magnitude form, so each group of ``N`` words takes a
          cycle more; the gather is written in groups of eight lanes, each with registers of
          its own (the word's lane in the group, and whether the row's last word is in or
          below the group, which sets the lanes past it to 0), and is never cleared, so no
          beat, state or single enable reaches its ``8·N`` flip-flops;
        * DMATVEC's result is rounded and saturated in three stages (the rounding's addition,
          the shift, the saturation; each into a register) and written from the last (three
          cycles more per row);
        * the discrete unit looks up each lane's code book entry into a register before it
          shifts (:class:`lowbit.hw.discrete.DiscreteUnit` ``entry_stage``) and sums a beat's
          lane terms in three stages (``sum_stages``; each a cycle more per row), its
          result is always taken (so its pipeline never stalls), and DM_SUM's saturation
          reads the top bits of two parallel sums;
        * the discrete unit's code book and ``CODE_WIDTH``'s mask of the codes are copies of the
          registers in flip-flops (a cycle behind them), the mask applied as the codes enter
          their registers beside the lanes, and the unit keeps a copy of the book per four
          lanes (``local_book``, two cycles behind its port);
        * the BFP column has a register stage in front of its multipliers (x in one copy per
          four lanes, :class:`lowbit.hw.bfp.BFPColumn` ``input_stage``; a cycle more from a
          beat to its product);
        * the scratchpad's port (``mem``: its address, enables and write data) is a register,
          so every read and write reaches the memory a cycle after it is decided, in order,
          and ``busy`` lasts a cycle past the RUN for the last one;
        * the reader has a register of the scratchpad's output beside its block RAMs and a
          second stage, a register of the word, which every consumer reads (a read latency of
          4 with the port's register, 5 with ``read_register``: three cycles more, or four,
          per instruction fetch, per range read and per single read of MOVE and DM_BIAS), and
          the x buffer's reads go through a register the same way; the weight banks read in
          step with the second stage, so the column's x and weights both come from registers
          beside their memories;
        * the scratchpad reads in every cycle of a RUN and four skid registers (five with
          ``read_register``) behind the second stage take each word that it cannot, so that
          reads are issued from flip-flops alone (fewer than five words read and not taken, six
          with ``read_register``; a thermometer code in flip-flops stepped by issues and takes:
          no consumer's handshake and no count reaches the scratchpad's read enable), and
          ``rd_ptr + 1`` is a register of its own, and so is the next address to read (no
          carry chain and no multiplexer on ``fresh`` in front of the scratchpad's address);
          the banks' read enable in MATVEC's x phase follows the column's readiness alone;
        * the quantiser compares before it clamps (:class:`lowbit.hw.quantiser.Quantiser`
          ``compare_first``), and its configuration (format, rounding, width, rule, shift,
          code width and book) is a copy of the registers in flip-flops, a cycle behind them
          (the rounding and the width as register copies, :func:`lowbit.hw.common.register_copy`,
          that synthesis keeps apart from the column's copies of them);
        * with the x buffer, MATVEC's bias phases start a cycle after their condition, from a
          register (a cycle more per tile's bias).

        The same results; about ``lanes · (1 + code_bits) + 200 + log2(weight_depth)``
        flip-flops more, ``22 + log2(weight_depth)`` more per eight lanes past the first eight
        (LOADW's copies, the gather's registers), 17 more with the x buffer, and the discrete
        unit's entry stage and group sums.
    read_register : bool
        With ``pipelined``: the scratchpad's ``rdata`` is already a register of its block RAMs'
        outputs (:class:`lowbit.hw.top.Scratchpad` ``read_register``), a cycle later, so the
        reader's ``rd_q`` takes the registered word and the reader counts a cycle more per
        instruction fetch, range read and single read (a read latency of 5 with the port's
        register). Default ``False``.
    simulation : bool
        Behavioural multiplier models (for Amaranth's simulator).
    write_addr : bool
        The scratchpad port has a write address of its own (``mem.waddr``; a block-RAM
        scratchpad's read and write ports side by side): the reader issues in the cycles the
        write register writes, so results, bias words and inputs no longer take turns.

    Members
    -------
    command : In(lowbit.hw.link.CommandSignature())
        The ``RUN`` row of the dispatcher.
    busy : Out(1)
        A program runs: the sequencer owns ``mem``, ``lut`` and ``grand``.
    mem : Out(lowbit.hw.ports.ScratchPortSignature(addr_width, write_addr=write_addr))
        The scratchpad port; its addresses are 0 while not ``busy`` (a top may OR another
        user's address into them).
    cfg : Out(lowbit.hw.ports.ConfigPortSignature())
        CONFIG's register write port.
    lut : Out(lowbit.hw.ports.LUTPortSignature())
    grand : In(stream.Signature(16))
        f16 grand samples in ``GRAND_SAMPLES`` order.
    prng_load : In(1)
        Load the rounding PRNG from ``prng_seed0..3`` (one cycle after ``PRNG_SEED3`` was
        written).
    <register> : In(width)
        The registers of :data:`lowbit.hw.ports.SEQ_REGISTERS`.
    """

    @quiet_on_error
    def __init__(self, *, scratch_bytes=4096, addr_width=11, lanes=8, block=16, max_blocks=16,
                 weight_depth=512, bfp=True, quantiser=True, discrete=True, code_bits=3,
                 quant_mult_bits=0, lut=True, lut_tables=4, grand=True, mult="lut",
                 simulation=True, bfp_stochastic=True, bfp_predictor=True,
                 bfp_acc_block_ram=False, bfp_pipelined=True, busy_count=True,
                 bfp_pipelined_combiner=False, bfp_mant_width=True, hard_lanes=None,
                 write_addr=False, drain_lanes=1, x_buffer=False, pipelined=False,
                 bias_fifo=False, control=True, read_register=False):
        _check_int("Scratchpad size", scratch_bytes, 64, 1 << 17)
        _check_int("Address width", addr_width, 1, 16)
        self._scratch_bytes, self._addr_width = scratch_bytes, addr_width
        self._lanes = _check_pow2("Matrix lane count", lanes, 4, 64)
        self._block = _check_pow2("Block size", block, 2, 256)
        self._max_blocks = _check_int("Maximum block count", max_blocks, 1, 256)
        self._weight_depth = _check_pow2("Weight memory depth", weight_depth, 16, 16384)
        self._bfp = _check_bool("bfp", bfp)
        self._quantiser = _check_bool("quantiser", quantiser)
        self._discrete = _check_bool("discrete", discrete)
        self._bfp_stochastic = _check_bool("bfp_stochastic", bfp_stochastic)
        self._bfp_predictor = _check_bool("bfp_predictor", bfp_predictor)
        self._bfp_mant_width = _check_bool("bfp_mant_width", bfp_mant_width)
        self._bfp_acc_block_ram = _check_bool("bfp_acc_block_ram", bfp_acc_block_ram)
        self._bfp_pipelined = _check_bool("bfp_pipelined", bfp_pipelined)
        self._bfp_pipelined_combiner = _check_bool("bfp_pipelined_combiner",
                                                   bfp_pipelined_combiner)
        self._busy_count = _check_bool("busy_count", busy_count)
        self._code_bits = _check_int("Code width", code_bits, 1, 3)
        self._quant_mult_bits = _check_int("Multiplier width", quant_mult_bits, 0, 16)
        self._lut = _check_bool("lut", lut)
        self._lut_tables = _check_int("LUT table count", lut_tables, 1, 64)
        self._grand = _check_bool("grand", grand)
        if not isinstance(mult, str):
            raise TypeError(f"Multiplier style must be one of {', '.join(MULT_STYLES)}, "
                            f"not {mult!r}")
        if mult not in MULT_STYLES:
            raise ValueError(f"Multiplier style must be one of {', '.join(MULT_STYLES)}, "
                             f"not {mult!r}")
        self._mult = mult
        self._hard_lanes = check_hard_lanes(hard_lanes, self._lanes)
        self._drain_lanes = check_drain_lanes(drain_lanes, self._lanes, self._bfp_pipelined)
        self._x_buffer = _check_bool("x_buffer", x_buffer)
        self._pipelined = _check_bool("pipelined", pipelined)
        self._bias_fifo = _check_bool("bias_fifo", bias_fifo)
        self._read_register = _check_bool("read_register", read_register)
        if self._read_register and not self._pipelined:
            raise ValueError("read_register needs pipelined (the reader's stages count the "
                             "scratchpad's read register)")
        self._control = _check_bool("control", control)
        if self._bias_fifo and self._x_buffer:
            raise ValueError("bias_fifo needs x_buffer off (with the x buffer the bias words "
                             "already overlap the later tiles)")
        self._simulation = _check_bool("simulation", simulation)
        self._write_addr = _check_bool("write_addr", write_addr)
        members = {
            "command": In(CommandSignature()),
            "busy": Out(1),
            "mem": Out(ScratchPortSignature(addr_width, write_addr=write_addr)),
            "cfg": Out(ConfigPortSignature()),
            "lut": Out(LUTPortSignature()),
            "grand": In(stream.Signature(16)),
            "prng_load": In(1),
        }
        for name in SEQ_REGISTERS:
            members[name] = In(_REG_WIDTH[name])
        super().__init__(members)

    lanes = property(lambda self: self._lanes)
    block = property(lambda self: self._block)
    max_blocks = property(lambda self: self._max_blocks)
    weight_depth = property(lambda self: self._weight_depth)
    bfp_stochastic = property(lambda self: self._bfp_stochastic)
    bfp_predictor = property(lambda self: self._bfp_predictor)
    bfp_mant_width = property(lambda self: self._bfp_mant_width)
    hard_lanes = property(lambda self: self._hard_lanes)
    drain_lanes = property(lambda self: self._drain_lanes)
    x_buffer = property(lambda self: self._x_buffer)
    pipelined = property(lambda self: self._pipelined)
    bias_fifo = property(lambda self: self._bias_fifo)
    read_register = property(lambda self: self._read_register)
    control = property(lambda self: self._control)
    write_addr = property(lambda self: self._write_addr)

    def column_params(self):
        """Keyword parameters of the BFP column (also those of its golden
        :class:`lowbit.sim.bfp_column.ColumnModel`, less ``mult`` and ``sim_model``)."""
        return dict(lanes=self._lanes, block=self._block, width=8, exp_bits=8,
                    max_blocks=self._max_blocks, frac_bits=COLUMN_FRAC_BITS,
                    rand_bits=RAND_BITS, predictor=self._bfp_predictor)

    def elaborate(self, platform):
        m = Module()
        N, B = self._lanes, self._block
        lgN, lgB = _log2(N), _log2(B)
        words = self._scratch_bytes // 2
        depth = self._weight_depth
        c = self.command
        p = self.mem
        if self._pipelined:
            # The scratchpad's port through a register (``mem`` is flip-flops: no logic and no
            # state decode in front of the address, enables and data fanned out to the block
            # RAMs across the die): every read and write reaches the memory a cycle after the
            # sequencer decides it, in the order decided.
            p = registered_port(m, self.mem)

        # ---- Rounding PRNG -------------------------------------------------------------------
        # Only the column and the quantiser round stochastically; without them there is no PRNG.
        rand = Signal(RAND_BITS)
        rand_ready = []
        if (self._bfp and self._bfp_stochastic) or self._quantiser:
            m.submodules.prng = prng = Xoroshiro128aox(lanes=1)
            m.d.comb += [prng.seed[0].s0.eq(Cat(self.prng_seed0, self.prng_seed1)),
                         prng.seed[0].s1.eq(Cat(self.prng_seed2, self.prng_seed3)),
                         prng.seed_load.eq(self.prng_load), rand.eq(prng.o.payload[0])]

        # ---- Weight memory ---------------------------------------------------------------------
        banks = []
        w_wr_addr = Signal(range(depth))
        w_wr_data = Signal(16)
        w_wr_lane = Signal(range(N))
        w_wr_en = Signal()
        w_rd_addr = Signal(range(depth))
        w_rd_en = Signal()
        # With ``pipelined``, the read enable in one copy per eight banks (``w_rd_en_g``): each
        # placed beside its banks, not one net fanned out to every bank across the die.
        w_rd_en_g = [Signal(name=f"w_rd_en_g{g}") for g in range(-(-N // 8))] \
            if self._pipelined else [w_rd_en] * -(-N // 8)
        if self._pipelined:
            # LOADW's write, registered with its bank decoded: the scratchpad's output reaches
            # a flip-flop beside it, not every bank across the die. The entry and the data in
            # one copy per eight banks, each loaded only by a write to its banks (so synthesis
            # keeps the copies apart): no net of them spans the die.
            wq_en = Signal(N)
            m.d.sync += wq_en.eq(Cat((w_wr_en & (w_wr_lane == k)) for k in range(N)))
            wq_addr, wq_data = [], []
            for g in range(-(-N // 8)):
                addr_g = Signal.like(w_wr_addr, name=f"wq_addr{g}")
                data_g = Signal(16, name=f"wq_data{g}")
                with m.If(w_wr_en & (w_wr_lane[3:] == g) if N > 8 else w_wr_en):
                    m.d.sync += [addr_g.eq(w_wr_addr), data_g.eq(w_wr_data)]
                wq_addr.append(addr_g)
                wq_data.append(data_g)
        for k in range(N):
            # LOADW writes and the engines read at different times, so read-write collisions
            # never happen: ``no_rw_check`` spares synthesis the collision logic (on iCE40 about
            # 45 flip-flops and 30 LUTs per bank). It needs the read register in the fabric
            # description (a combinational port, then a register) to be merged into the RAM.
            mem = Memory(shape=16, depth=depth, init=[], attrs={"no_rw_check": 1})
            m.submodules[f"weights{k}"] = mem
            wp = mem.write_port()
            rp = mem.read_port(domain="comb")
            rdata_k = Signal(16, name=f"bank{k}")
            if self._pipelined:
                m.d.comb += [wp.addr.eq(wq_addr[k // 8]), wp.data.eq(wq_data[k // 8]),
                             wp.en.eq(wq_en[k])]
            else:
                m.d.comb += [wp.addr.eq(w_wr_addr), wp.data.eq(w_wr_data),
                             wp.en.eq(w_wr_en & (w_wr_lane == k))]
            m.d.comb += rp.addr.eq(w_rd_addr)
            with m.If(w_rd_en_g[k // 8]):
                m.d.sync += rdata_k.eq(rp.data)
            banks.append(rdata_k)

        # ---- Engines -------------------------------------------------------------------------
        code_book = Cat(self.code_book0, self.code_book1)
        # Pulses when a RUN starts executing: the predicted exponent selector's history is
        # per RUN (no product is in flight then, so the column clears it before the next one).
        run_start = Signal()
        # Register values the ISA leaves open, decoded as lowbit.sim.program.Machine does: ROUNDING
        # 3
        # is nearest, EXP_SELECT 3 is fixed, MANT_WIDTH is clamped to 2..8.
        # With ``pipelined`` the decoded values are registers, a cycle behind the register file
        # (an instruction reads them a fetch after a CONFIG at least), so that no decode of
        # them is in front of the engines' carry chains.
        rounding = Signal(2)
        mant_width = Signal(4)
        decoded = [
            rounding.eq(Mux(self.rounding == 3, 0, self.rounding)),
            mant_width.eq(Mux(self.mant_width < 2, 2,
                              Mux(self.mant_width > 8, 8, self.mant_width))),
        ]
        if self._pipelined:
            m.d.sync += decoded
        else:
            m.d.comb += decoded
        if self._bfp:
            col = BFPColumn(**self.column_params(), mult=self._mult, sim_model=self._simulation,
                            stochastic=self._bfp_stochastic,
                            acc_block_ram=self._bfp_acc_block_ram,
                            pipelined=self._bfp_pipelined,
                            pipelined_combiner=self._bfp_pipelined_combiner,
                            hard_lanes=self._hard_lanes, drain_lanes=self._drain_lanes,
                            input_stage=self._pipelined and self._bfp_pipelined)
            m.submodules.column = col
            m.d.comb += [
                col.cfg_width.eq(mant_width if self._bfp_mant_width else 8),
                col.cfg_rounding.eq(rounding),
                col.cfg_exp_mode.eq(Mux(self.exp_select == 2, ExpMode.PREDICTED,
                                        Mux(self.exp_select != 0, ExpMode.FIXED, ExpMode.MAX))),
                col.pred_clear.eq(run_start),
                col.cfg_fixed_exp.eq(self.fixed_exp),
            ]
            if self._bfp_stochastic:
                m.d.comb += [col.i_rand.valid.eq(1), col.i_rand.payload.eq(rand)]
                rand_ready.append(col.i_rand.ready)
        if self._quantiser:
            qu = Quantiser(fmt="f16", lanes=1, block=B, w_max=8, exp_bits=8,
                           rand_bits=RAND_BITS, mult_bits=self._quant_mult_bits,
                           code_bits=self._code_bits, compare_first=self._pipelined,
                           gap_register=self._pipelined)
            m.submodules.quantiser = qu
            if self._pipelined:
                # With ``pipelined``, the quantiser's configuration is a copy in flip-flops, a
                # cycle behind the registers (as the discrete unit's book, below: written by
                # CONFIG or REG_WRITE, never within a fetch of the quantiser's first beat), so
                # that it sits by the quantiser, not by the register file across the die. The
                # column registers the rounding and the width the same way, and synthesis
                # would merge those copies (and the decoding of the width behind them) into
                # one beside either unit: the quantiser's are register copies of them.
                m.d.sync += [qu.target.eq(self.quant_format), qu.rule.eq(self.quant_rule),
                             qu.shift.eq(self.quant_shift)]
                for name, port, src in (("rounding", qu.rounding, rounding),
                                        ("mant_width", qu.mant_width, mant_width)):
                    ref = Signal.like(src, name=f"q_{name}_ref")
                    m.d.sync += ref.eq(src)
                    m.d.comb += port.eq(register_copy(m, ref, src, f"q_{name}"))
                m.d.comb += [qu.zero.eq(0), qu.i_rand.valid.eq(1), qu.i_rand.payload[0].eq(rand)]
            else:
                q_cfg = [qu.target.eq(self.quant_format), qu.rounding.eq(rounding),
                         qu.mant_width.eq(mant_width), qu.rule.eq(self.quant_rule),
                         qu.shift.eq(self.quant_shift)]
                m.d.comb += [*q_cfg, qu.zero.eq(0),
                             qu.i_rand.valid.eq(1), qu.i_rand.payload[0].eq(rand)]
            if self._quant_mult_bits:
                m.d.comb += qu.mult.eq(1)
            q_book_dom = m.d.sync if self._pipelined else m.d.comb
            q_book_dom += qu.code_width.eq(self.code_width)
            for k in range(1 << self._code_bits):
                q_book_dom += qu.book[k].eq(code_book.word_select(k, 8)[:CodeEntry.size])
            rand_ready.append(qu.i_rand.ready)
        if self._discrete:
            du = DiscreteUnit(lanes=N, width=8, code_bits=self._code_bits,
                              acc_width=DISCRETE_ACC_WIDTH, tables=False,
                              sum_stages=3 if self._pipelined else 1, local_book=self._pipelined,
                              entry_stage=self._pipelined)
            m.submodules.discrete = du
            m.d.comb += du.op.eq(DiscreteOp.DOT)
            # With ``pipelined``, the unit's code book is a copy in flip-flops beside it, a
            # cycle behind the registers (written by CONFIG or REG_WRITE, never within a fetch
            # of a DMATVEC's beats): the register file is across the die from the 64 lanes.
            book_dom = m.d.sync if self._pipelined else m.d.comb
            for k in range(1 << self._code_bits):
                book_dom += du.book[k].eq(code_book.word_select(k, 8)[:CodeEntry.size])
        if rand_ready:
            m.d.comb += prng.o.ready.eq(Cat(*rand_ready).any())

        # ---- Run state -------------------------------------------------------------------------
        start = Signal(17)            # RUN start byte address, bits 0..16
        start_hi = Signal()           # any of its bits 17..31 set
        # CHECK's address test as a register taken every cycle: the start's bytes come at
        # least five cycles before CHECK (ARGS, bytes 0..3 of 8), and stay.
        start_bad = Signal()
        m.d.sync += start_bad.eq(start[0] | start_hi | (start > self._scratch_bytes - 16))
        # Instructions left before the limit: the RUN's limit shifted in, one less at each
        # NEXT; the decrements' carries out say it is not 0 (``executed == limit``, no
        # compare). As load_or_step, the load's choice merges into the decrement's LUTs, but
        # chosen by a flip-flop (``limit_in``, ARGS at the limit's bytes, when ``left`` does
        # not count), so that the carry chains start at flip-flops; ``left_load`` (a byte taken
        # then) only enables. Two halves of 16 bits, so no carry chain is 32 long: the high
        # half takes the low half's borrow a cycle later (``borrow``), long before the next
        # DECODE reads ``at_limit`` (a half-borrowed count is never 0).
        left_lo = Signal(16)
        left_hi = Signal(16)
        left_load = Signal()          # ARGS: a byte of the limit comes in
        limit_in = Signal()
        lo_dec = Signal(17)
        hi_dec = Signal(17)
        borrow = Signal()
        nargs = Signal(4)
        status = Signal(8)
        pc = Signal(17)               # word address of the current instruction
        executed = Signal(32)
        cycles = Signal(32)
        busy_cycles = Signal(32, init=0 if self._busy_count else 0xFFFFFFFF)
        beat = Signal()               # the matrix engine accepts a beat this cycle
        sidx = Signal(4)
        send_valid = Signal()         # SEND: the reply's next byte (send_byte) is offered
        send_byte = Signal(8)
        # The RUN reply's counters shift out through ``executed``'s low byte (SEND, after the
        # pc's bytes): ``executed`` takes ``cycles``' low byte, ``cycles`` ``busy``'s, so no
        # 16:1 byte multiplexer. The shift costs no LUT: written as the counter's sum with
        # ``send_hi`` in the addend's upper bits (the sum is not used while shifting), the
        # choice merges into the carry chain's LUT, whose inputs are the bit, the addend, the
        # carry and one free (the bit shifted in). ``send_hi`` (SEND past the pc's bytes, when
        # the counters do not count) is a flip-flop, so the carry chains start at flip-flops,
        # not at the FSM's decode; ``shift`` (a byte taken then) only enables.
        shift = Signal()
        send_hi = Signal()
        ex_inc = Signal()             # NEXT: an instruction completed

        def count_or_shift(counter, inc, above):
            with m.If(inc | shift):
                m.d.sync += counter.eq(Mux(send_hi, Cat(counter[8:], above),
                                           counter + Cat(Const(1, 1), send_hi.replicate(31))))

        if self._busy_count:
            count_or_shift(busy_cycles, beat, Const(0, 8))
        # Cleared when a RUN starts (CHECK), so no reset: the clear is then the flip-flops' own
        # synchronous reset, not a LUT per bit beside the domain's reset.
        cnt = Signal(16, reset_less=True)
        ofs_a = Signal(16, reset_less=True)
        ofs_b = Signal(16, reset_less=True)
        # The instruction's words as they are kept: w0 as its opcode flip-flops (is_op, below)
        # and flags, w1 and w2 as src and dst (the decode pipeline), w3..w6 as they are; w6 is
        # also MATVEC's and DMATVEC's bias pointer once RANGE has checked it.
        # Without the discrete unit, w4 and w5 are only MATVEC's nb and T: kept as wide as the
        # lengths need (nb_bits, t_bits below), their tests (zero, too big) taken as they
        # arrive.
        t_bits = max(_log2(self._weight_depth) - lgB, 0) + 1
        nb_bits = self._max_blocks.bit_length()
        w_bits = {4: nb_bits, 5: t_bits} if not self._discrete else {}
        w = [None, None, None] + [Signal(w_bits.get(k, 16), name=f"w{k}") for k in range(3, 7)]
        fidx = Signal(4)
        # The scratchpad's words as the sequencer reads them: the memory's output, or with
        # ``pipelined`` a register of it (the reader's second stage, below), a cycle later.
        lag = (4 if self._read_register else 3) if self._pipelined else 0
        rd_word = Signal(16, name="rd_word") if self._pipelined else None
        rdata = rd_word if self._pipelined else p.rdata
        # F_OFS_SRC, F_OFS_DST, F_BIAS and, with the column, MATVEC's F_LUT.
        flags = Signal(4 if self._bfp else 3)
        is_data = Signal()            # w0's opcode is 0x10 or above
        # MATVEC's w7, its samples after the first (S - 1): ``sm_left`` takes the count as it
        # arrives (SAMP counts it down, the range additions still to make; ``s_more``:
        # ``sm_left != 0`` as a register, which DECODE reads as "w7 is not 0") and ``w7_big``
        # whether it is too big for any range to fit (S · N > words, a failure in RANGE as the
        # ranges').
        # While the MATVEC runs, ``sm_more`` says a sample is still to start: the current
        # sample's input does not end where the last one's does (x_acc, below).
        sm_bits = max(1, (words // N - 1).bit_length())
        w7_big = Signal()
        sm_left = Signal(sm_bits)
        s_more = Signal()
        sm_more = Signal()
        sm_first = Signal()           # the MATVEC's first sample (its bias from the scratchpad)
        st_range = Signal()           # RANGE
        running = Signal()
        if self._pipelined:
            # A cycle longer than the RUN (the port's register applies the RUN's last cycle),
            # as a flip-flop: set with ``running``, cleared a cycle after it.
            busy_q = Signal()
            m.d.sync += busy_q.eq(running)
            m.d.comb += self.busy.eq(busy_q)
        else:
            m.d.comb += self.busy.eq(running)
        count_or_shift(cycles, running, busy_cycles[:8])
        count_or_shift(executed, ex_inc, cycles[:8])

        # Effective operands.
        count = w[3]
        assert F_OFS_SRC == 1 and F_OFS_DST == 2 and F_BIAS == 4 and F_LUT == 8
        bias_en = flags[2]
        # MATVEC's results go through the LUT engine (flags[3] only exists with the column).
        mv_lut = flags[3] if self._bfp and self._lut else Const(0)

        # Weight-range check of DMATVEC (and MATVEC with the discrete unit): entry + R·ceil(K/N)
        # (entry + T·K) by repeated addition in MUL, stopping as soon as the end passes the
        # weight depth.
        mul_acc = Signal(18)
        mul_step = Signal(17)
        mul_cnt = Signal(16)

        # ---- Decode pipeline -------------------------------------------------------------------
        # Free-running registers of what the checks need, one adder or comparison per stage,
        # so that no decision of DECODE or RANGE waits for a sum. The words arrive one per cycle
        # (w0 first, w6 last, one cycle before DECODE) and stay until the next fetch (but w6,
        # MATVEC's bias pointer after RANGE, when the pipeline's outputs are no longer read),
        # and the offsets and registers change at least a fetch earlier, so stage A is valid in
        # the last fetch cycle, stage B in DECODE and stage C in RANGE (which comes after
        # DECODE). src, dst and the lengths hold while an instruction runs.
        # Stage A: the op class (one flip-flop per opcode, loaded from w0 as it arrives), the
        # effective operands (src and dst, loaded as w1 and w2 arrive: w1 + ofs_a, w2 + ofs_b),
        # the lengths of the ranges (``lw`` bits and a flag for more: a longer range never fits
        # the scratchpad or the weights), count tests.
        is_op = {name: Signal(name=f"is_{name.lower()}") for name in Op.NAMES.values()}
        op_loadw, op_grand, op_lut = is_op["LOADW"], is_op["GRAND"], is_op["LUT"]
        op_mat = is_op["MATVEC"] | is_op["DMATVEC"]
        src = Signal(16)
        dst = Signal(16)
        lw = max(words, depth).bit_length()
        len_src = Signal(lw)          # also GRAND's count of samples
        len_dst = Signal(lw)
        src_big = Signal()
        dst_big = Signal()
        cnt_z = Signal()              # w3 == 0 (count)
        w4_z = Signal()
        w5_z = Signal()
        nb_big = Signal()             # w4 > max_blocks (MATVEC)
        cnt_big = Signal()            # cnt > 1 (DJNZ)
        lut_bad = Signal()
        # MATVEC's nb (w4) and T (w5) as narrow as they can be where the lengths matter: nb
        # above max_blocks fails in DECODE, T >= 2^t_bits always ends past the weights in
        # RANGE (T·nb·B >= 2·depth; nb >= 1), which fails as the ranges do. An opcode without
        # its engine fails in DECODE, so its lengths are not needed.
        len_s = Signal(16 + lgN)
        len_d = Signal(16 + lgN)
        ls, ld = count, count
        if self._discrete:
            ls, ld = Mux(is_op["DMATVEC"], w[4], ls), Mux(is_op["DMATVEC"], w[5], ld)
        if self._bfp:
            ls = Mux(is_op["MATVEC"], w[4][:nb_bits] << lgB, ls)
            ld = Mux(is_op["MATVEC"], w[5][:t_bits] << lgN, ld)
        m.d.comb += [len_s.eq(Mux(op_loadw, count << lgN, ls)), len_d.eq(ld)]
        # The offsets are added to data instructions' operands with their flags and always for
        # ADDOFS, never for the other control instructions: src and dst are then w1 and w2
        # themselves (JUMP's and DJNZ's target, LOOP's count, CONFIG's index and value,
        # SETOFS's offsets) and ADDOFS's new offsets, one adder each.
        src_sum = Signal(16)
        dst_sum = Signal(16)
        # (The word with or without the sum, not the word plus an offset or 0: the choice then
        # merges into the adder's own LUT.)
        if self._control:
            m.d.comb += [
                src_sum.eq(Mux(flags[0] & is_data | is_op["ADDOFS"], rdata + ofs_a, rdata)),
                dst_sum.eq(Mux(flags[1] & is_data | is_op["ADDOFS"], rdata + ofs_b, rdata)),
            ]
        else:
            m.d.comb += [src_sum.eq(rdata), dst_sum.eq(rdata)]
        m.d.sync += [
            len_src.eq(len_s),
            src_big.eq(len_s[lw:] != 0),
            cnt_z.eq(count == 0),
            cnt_big.eq(cnt > 1),
        ]
        # (A MATVEC of several samples holds its summed destination length from SAMP until
        # the next fetch.)
        len_hold = Signal()
        with m.If(~len_hold):
            m.d.sync += [len_dst.eq(len_d), dst_big.eq(len_d[lw:] != 0)]
        if self._lut:
            m.d.sync += lut_bad.eq(self.lut_select >= self._lut_tables)
        # Stage B: the ends of the ranges.
        end_src = Signal(max(16, lw) + 1)
        end_dst = Signal(max(16, lw) + 1)
        end_bias = Signal(max(16, lw) + 1)
        # GRAND reads nothing: its source range is empty (without the grand unit GRAND fails in
        # DECODE).
        m.d.sync += [end_src.eq(src + (Mux(op_grand, 0, len_src) if self._grand else len_src)),
                     end_dst.eq(dst + len_dst),
                     end_bias.eq(w[6] + len_dst)]
        # Stage C: the range checks.
        bad_src = Signal()
        bad_dst = Signal()
        bad_bias = Signal()
        m.d.sync += [bad_src.eq(src_big | (end_src > words)),
                     bad_dst.eq(dst_big | (end_dst > Mux(op_loadw, depth, words)))]
        # The bias range is one sample's: held with the destination length's sum (SAMP's
        # first cycle takes it from the single sample's length).
        with m.If(~len_hold):
            m.d.sync += bad_bias.eq(dst_big | (end_bias > words))
        # A MATVEC of S samples (w7 = S - 1): its input range ends at x + (S-1)·X + K, its
        # destination range at dst + S·T·N. SAMP adds X to ``x_acc`` (loaded in DECODE with
        # stage B's x + K) and T·N to ``len_dst`` (the destination length, so the write
        # register's count covers every sample) S - 1 times, one addition a cycle, stopping
        # as soon as either passes the scratchpad; ``s_over`` (the input's end past it) is
        # cleared in DECODE and a register behind ``x_acc``, so RANGE (after SAMP_WAIT, when
        # stage C has the destination's end) reads both. X = ceil(K / N) · N, the stride of
        # a MATVEC's outputs per sample; with N <= B it is K.
        x_acc = Signal(lw + 2)
        s_over = Signal()
        if self._bfp:
            if N <= B:
                xs = w[4][:nb_bits] << lgB
            else:
                xs = Signal(nb_bits + lgB + 1)
                m.d.sync += xs.eq(((w[4][:nb_bits] + (N // B - 1)) >> (lgN - lgB)) << lgN)
            # (stage B's x + K, a cycle behind src, against the last sample's end: valid two
            # cycles after a sample starts, and the next one starts K cycles later at least)
            m.d.sync += [s_over.eq(x_acc > words), sm_more.eq(end_src != x_acc)]
        # The weight range of MATVEC without the discrete unit, in the same stages: entry +
        # T·nb·B by one small multiplication. T >= 2·depth/B always ends past the weights
        # (nb >= 1); below, T and nb <= max_blocks are narrow.
        w_bad = Signal()
        t_big = Signal()              # w5 >= 2^t_bits (set as w5 arrives)
        if not self._discrete:
            prod = Signal(t_bits + nb_bits)
            w_end = Signal(max(17, len(prod) + lgB) + 1)
            m.d.sync += [prod.eq(w[5][:t_bits] * w[4][:nb_bits]),
                         w_end.eq(w[3] + (prod << lgB)), w_bad.eq(t_big | (w_end > depth))]
        else:
            m.d.comb += w_bad.eq(mul_acc > depth)

        # ---- Reader stage and write register (module docstring) --------------------------------
        rd_valid = Signal()
        rd_ptr = Signal(16)
        rd_left = Signal(lw)
        # rd_ptr is the next address to read while ``fresh`` (a load made it so), else the
        # address of the last read, whose word the stage holds.
        fresh = Signal()
        # rd_ptr + 1, from flip-flops only: the next address to read when not ``fresh``, and
        # rd_ptr's next value where a read steps (rp_inc). No multiplexer picks between it and
        # rd_ptr in front of the adder, which synthesis would turn into rd_ptr + rp_inc, a late
        # carry-in.
        # With ``pipelined`` it is a register loaded with rd_ptr's next value plus one, so that
        # no carry chain reaches the scratchpad's address.
        rd_inc = Signal(16, init=int(self._pipelined))
        # The scratchpad address from flip-flops only (the memory holds its output while the
        # reader does not read, so the address never waits for the reader's late decision,
        # which reaches the memory as ``re`` alone): the next address to read (rd_next), or a
        # write's (wr_ptr, on wr_valid or in MOVE_WR) or DM_BIAS's. While no program runs it
        # is 0 (``mem``'s contract: the top ORs the host's address in).
        rd_next = Signal(16)
        addr_base = Signal(16)
        re = Signal()
        st_movewr = Signal()          # MOVE_WR, as a flag: the write's address, enable and data
        take = Signal()
        reading = Signal()            # the current state lets the reader issue
        # The states that feed an engine from the reader, one flip-flop each (set when RANGE
        # or the state before enters them, cleared when they end), so that the reader's
        # decisions do not decode the FSM's state: LOADW, LUT, QUANT, MATVEC's x and weights
        # (mv_x) and bias (mv_b) phases, DMATVEC's beats (DM_RUN).
        st_loadw = Signal()
        st_lut = Signal()
        st_quant = Signal()
        st_mv = Signal()              # the whole MATVEC
        st_mvlut = Signal()           # the whole MATVEC with F_LUT
        mv_x = Signal()
        mv_b = Signal()
        st_dm = Signal()
        wr_valid = Signal()
        wr_data = Signal(16)
        wr_ptr = Signal(16)
        wr_left = Signal(lw)
        wr_in_valid = Signal()
        wr_in_data = Signal(16)
        # ``rd_left != 0`` and ``wr_left == 0`` as registers, kept beside the counters (every
        # load of a counter loads its flag), so that no issue or finish decision waits for a
        # 17-bit zero test.
        rd_more = Signal()
        wr_done = Signal()
        # rd_ptr's loads: the pc (fetch), src (RANGE, a tile or row: the decode pipeline's
        # registers hold while an instruction runs, as its words and the offsets do), bias_ptr,
        # +1.
        rp_pc, rp_src, rp_bias, rp_inc = (Signal(name=f"rp_{k}")
                                          for k in ("pc", "src", "bias", "inc"))
        issue = Signal()
        rl_dec = Signal()             # rd_left counts down
        # ``rd_fill``: a word enters the stage (the memory's output register, or with
        # ``pipelined`` the stage's own register); the weight banks read in step with it.
        # ``rd_last``: no word is left to read or on its way to the stage, so the word the stage
        # holds is the range's last.
        # With one address a write takes the port (the write register wins over reads); with a
        # write address of its own, both go in the same cycle.
        port_free = ~wr_valid if not self._write_addr else 1
        if self._pipelined:
            rd_fill = Signal()
            rd_last = Signal()
            # After the port's register, the memory's output, a register of it beside the block
            # RAMs (``rd_q``; with ``read_register`` the scratchpad's own, and ``rd_q`` after it)
            # and a register of the word (``rd_word``) that the consumers read, so that no
            # logic and no route across the die follows a block RAM's clock-to-out; and four
            # skid registers (``rd_skid``, ``skid_v``; one per word in flight, and one) behind
            # it. The scratchpad reads in every cycle of a RUN (``mem.re`` is ``running``), so no
            # decision reaches the read enable fanned out to its block RAMs, and each word read
            # must enter the stage or a skid register when it leaves ``rd_q``: a read is issued
            # while fewer than five words (six) are read and not taken, from flip-flops alone,
            # never waiting for a consumer's ``take``. One word a cycle, as with one stage; each
            # range's last word takes three cycles more (four) to arrive. Words enter the stage
            # in order, the skids' first.
            # A read's word on its way: in the port's register (``rd_mem``), at the memory's
            # output (``rd_mem2``), with ``read_register`` in the scratchpad's register of it
            # (``rd_memb``), in ``rd_q``'s register (``rd_memq``).
            rd_mem = Signal()
            rd_mem2 = Signal()
            rd_memq = Signal()
            flight = [rd_mem, rd_mem2, *([Signal(name="rd_memb")] if self._read_register
                                         else []), rd_memq]
            rd_memb = flight[-2]      # the stage before rd_q's
            rd_q = Signal(16, reset_less=True)
            m.d.sync += [rd_q.eq(p.rdata),
                         *(b.eq(a) for a, b in zip(flight[:-1], flight[1:], strict=True))]
            n_skid = len(flight) + 1
            rd_skid = [Signal(16, name=f"rd_skid{k}", reset_less=True) for k in range(n_skid)]
            skid_v = [Signal(name=f"skid_v{k}") for k in range(n_skid)]
            has_room = Signal()       # the stage takes a word this cycle
            # The words read and not taken (at most n_skid + 1) as a thermometer code in
            # flip-flops (``occ[k]``: more than k), stepped up by an issue and down by a take:
            # the issue's room is ``~occ[n_skid]``, a flip-flop, and no adder counts.
            occ = [Signal(name=f"rd_occ{k}") for k in range(n_skid + 1)]
            up, down = Signal(), Signal()
            m.d.comb += [up.eq(issue & ~take), down.eq(take & ~issue)]
            for k in range(n_skid + 1):
                with m.If(up):
                    m.d.sync += occ[k].eq(occ[k - 1] if k else 1)
                with m.Elif(down):
                    m.d.sync += occ[k].eq(occ[k + 1] if k < n_skid else 0)
            m.d.comb += [
                has_room.eq(~rd_valid | take),
                rd_fill.eq((rd_memq | skid_v[0]) & has_room),
                issue.eq(reading & rd_more & port_free & ~occ[n_skid]),
                rd_last.eq(~rd_more & ~Cat(*flight).any() & ~skid_v[0]),
            ]
            # The words held in the skids and arriving: the first goes to the stage when it has
            # room, the rest to the skids in order. The skids fill in order, so "at least j
            # held" is skid j - 1's flag, or skid j - 2's with a word arriving.
            def held_ge(j):
                v = [Const(1)] + skid_v + [Const(0)]
                return v[j] | rd_memq & v[j - 1]
            with m.If(has_room):
                m.d.sync += [rd_valid.eq(held_ge(1)),
                             rd_word.eq(Mux(skid_v[0], rd_skid[0], rd_q))]
                for k in range(n_skid):
                    m.d.sync += skid_v[k].eq(held_ge(k + 2))
                    m.d.sync += rd_skid[k].eq(Mux(skid_v[k + 1], rd_skid[k + 1], rd_q)
                                              if k + 1 < n_skid else rd_q)
            with m.Else():
                for k in range(n_skid):
                    m.d.sync += skid_v[k].eq(held_ge(k + 1))
                    with m.If(~skid_v[k]):
                        m.d.sync += rd_skid[k].eq(rd_q)
            m.d.sync += rd_mem.eq(issue)
            m.d.sync += [wr_valid.eq(wr_in_valid), wr_data.eq(wr_in_data)]
        else:
            # (The one-stage branches here and in the x buffer keep their statements in the
            # order they had before the second stage, so that the other boards' netlists, and
            # the builds recorded by their digests, stay what they were.)
            rd_fill, rd_last = issue, ~rd_more
            m.d.comb += issue.eq(reading & rd_more & (~rd_valid | take) & port_free)
            m.d.sync += [wr_valid.eq(wr_in_valid), wr_data.eq(wr_in_data)]
            m.d.sync += rd_valid.eq(issue | (rd_valid & ~take))
        # The write data: the write register's, but in MOVE_WR and DM_POST (not gated by
        # ``we``: only a multiplexer on flip-flops' choice in front of the memory).
        m.d.comb += [p.wmask.eq(0b11), p.wdata.eq(wr_data)]
        if self._pipelined:
            # rd_inc and rd_next as registers of their own (``rd_na``, below): no carry chain
            # and no multiplexer on ``fresh`` in front of the scratchpad's address.
            rd_na = Signal(16)
            m.d.comb += rd_next.eq(rd_na)
        else:
            m.d.comb += [rd_inc.eq(rd_ptr + 1), rd_next.eq(Mux(fresh, rd_ptr, rd_inc))]
        m.d.comb += [addr_base.eq(rd_next), p.addr.eq(Mux(running, addr_base, 0))]
        # (With ``pipelined`` the scratchpad reads in every cycle of a RUN: the reader above.)
        m.d.comb += p.re.eq(running if self._pipelined else re)
        # Every write goes to wr_ptr: with a write address of its own the reads keep theirs.
        w_addr = addr_base
        if self._write_addr:
            w_addr = Signal.like(addr_base)
            m.d.comb += p.waddr.eq(Mux(running, wr_ptr, 0))
        wr_one = Signal()             # wr_left == 1 (MOVE), valid a cycle after wr_left changes
        m.d.sync += wr_one.eq(wr_left == 1)
        # RANGE loads wr_ptr and wr_left; a write steps them (wr_left not in DM_POST).
        wr_load, wp_step, wl_step = Signal(), Signal(), Signal()

        fetching = Signal()           # FETCH_WORDS as a flag: its reads step rd_ptr

        def reader():
            # After the FSM: the stage's decisions come last, so they are the last multiplexer
            # in front of the pointers and the address (the FSM's own loads and addresses never
            # meet a write or an issue).
            with m.If(fetching):
                m.d.comb += [rp_inc.eq(~fresh), re.eq(1)]
            with m.If(st_movewr):
                m.d.comb += [w_addr.eq(wr_ptr), p.we.eq(1), p.wdata.eq(rdata)]
            with m.If(wr_valid):
                m.d.comb += [w_addr.eq(wr_ptr), p.we.eq(1), wp_step.eq(1), wl_step.eq(1)]
                m.d.sync += wr_done.eq(wr_left == 1)
            with (m.If(issue) if self._write_addr else m.Elif(issue)):
                m.d.comb += [rp_inc.eq(~fresh), re.eq(1), rl_dec.eq(1)]
                m.d.sync += [fresh.eq(0), rd_more.eq(rd_left != 1)]

        # Instruction-specific state.
        # MATVEC tiles / DMATVEC rows still to feed: T < 2^t_bits, R <= depth when RANGE passes.
        tiles_left = Signal(max(t_bits, depth.bit_length() if self._discrete else 0))
        tl_more = Signal()            # tiles_left != 0
        w_base = Signal(range(depth + 1))    # weight entry of the current DMATVEC row
        # The weight entry read. A MATVEC tile's weights follow the previous tile's (entry +
        # t·K), where w_ptr ends, so it is loaded once, in RANGE.
        w_ptr = Signal(range(depth + 1))
        bias_ptr = w[6][:self._addr_width]  # the bias range fits: no carry past the address
        bias_base = Signal(self._addr_width)    # MATVEC: each sample's bias starts here
        lw_valid = Signal()
        lw_lane = Signal(range(N))
        lw_entry = Signal(range(depth + 1))
        nb_d = Signal(16)             # DMATVEC entries per row
        gather = Signal(8 * N)
        # The discrete unit's weight codes: the banks' outputs, or with ``pipelined``
        # a register of them beside the banks (the block RAM's clock-to-out is most of a fast
        # cycle) and a register of that masked, valid (dm_codes_ok) three cycles after the entry
        # changes (``dm_chg``: DM_ROW's load of w_ptr, a beat's step): the banks hold the entry's
        # codes a cycle after a read at it (``bank_ok``), the registers a cycle and two after.
        dm_chg = Signal()
        # CODE_WIDTH's mask of the codes' bits. With ``pipelined`` it is a copy in a register
        # (a cycle behind the register file, across the die, as the code book's copy) applied
        # as the codes enter their registers beside the lanes, not in front of the unit.
        if self._pipelined:
            code_mask = Signal(self._code_bits)
            m.d.sync += code_mask.eq((Const(1, 4) << self.code_width) - 1)
            dm_raw = [Signal(self._code_bits, name=f"dm_raw{k}") for k in range(N)]
            dm_codes = [Signal(self._code_bits, name=f"dm_code{k}") for k in range(N)]
            dm_codes_ok = Signal()
            bank_ok = Signal()
            raw_ok = Signal()
            m.d.sync += [dm_raw[k].eq(banks[k][:self._code_bits]) for k in range(N)]
            m.d.sync += [dm_codes[k].eq(dm_raw[k] & code_mask) for k in range(N)]
            m.d.sync += [bank_ok.eq(~dm_chg & (w_rd_en | bank_ok)),
                         raw_ok.eq(~dm_chg & bank_ok), dm_codes_ok.eq(~dm_chg & raw_ok)]
        else:
            dm_codes = [banks[k][:self._code_bits] for k in range(N)]
        # With ``pipelined``, a word DM_RUN takes reaches the gather a cycle later through
        # registers of the word in sign-magnitude form and of its lane and flags; the reader
        # stops while the registered word completes a group (``dm_hold``).
        g_lane = Signal(range(N))
        g_full = Signal()
        g_last = Signal()
        if self._pipelined:
            dm_t = Signal()           # a word is in the registers
            dm_x = Signal(8)
            dm_full = Signal()        # it completes its group
            dm_last = Signal()        # it is the row's last
            dm_hold = dm_t & dm_full
            dm_in = rdata[:8]
            dm_mag = Mux(dm_in[7], -dm_in.as_signed(), dm_in)[:8]
            # ``take`` in DM_RUN, from flip-flops alone (no other consumer's readiness).
            dm_take = Signal()
            m.d.comb += dm_take.eq(rd_valid & st_dm & ~g_full & ~dm_hold)
            m.d.sync += [dm_t.eq(dm_take), dm_x.eq(Cat(Mux(dm_mag[7], 127, dm_mag[:7]),
                                                     dm_in[7])),
                         dm_full.eq((g_lane == N - 1) | rd_last), dm_last.eq(rd_last)]
            if self._discrete:
                # The gather's writes, in groups of eight lanes, each with flip-flops of its
                # own loaded as a word for the group is taken (so that no enable fans out to
                # every lane): the word's lane within the group, and whether the row's last
                # word is below the group (all its lanes to 0) or in it (its lanes above to
                # 0). So a row's last group has 0 past its last word and the gather is never
                # cleared (no beat and no state reach its 8·N flip-flops).
                gl = min(8, N)
                for g in range(N // gl):
                    grp = g_lane[3:] if N > gl else Const(0)
                    here = dm_take & (grp == g)
                    gw = Signal(name=f"dm_w_g{g}")
                    gsub = Signal(range(gl), name=f"dm_lane_g{g}")
                    g_below = Signal(name=f"dm_zall_g{g}")
                    g_in = Signal(name=f"dm_zup_g{g}")
                    m.d.sync += [gw.eq(here), g_in.eq(here & rd_last),
                                 g_below.eq(dm_take & rd_last & (grp < g))]
                    with m.If(here):
                        m.d.sync += gsub.eq(g_lane[:len(gsub)])
                    for i in range(gl):
                        sel = gw & (gsub == i)
                        with m.If(sel | g_below | g_in & (gsub < i)):
                            m.d.sync += gather.word_select(g * gl + i, 8).eq(Mux(sel, dm_x, 0))
                # The unit's inputs are the gather's registers in every state, not only in
                # DM_RUN: g_full is set in DM_RUN alone and cleared by its last beat, so the
                # FSM's state need not gate 64 lanes' payload (a path across the die).
                # Its result is always taken (DM_WAIT reads it; a row's only output comes
                # while the FSM waits for it in DM_WAIT), so the unit's pipeline never stalls
                # and its enable, fanned out to every lane, is a constant.
                m.d.comb += [du.i.valid.eq(g_full & dm_codes_ok), du.i.payload.last.eq(g_last),
                             du.o.ready.eq(1)]
                for k in range(N):
                    m.d.comb += [du.i.payload.x[k].eq(gather.word_select(k, 8)),
                                 du.i.payload.w[k].eq(dm_codes[k])]
        bias_q = Signal(signed(16))
        acc_q = Signal(signed(DISCRETE_ACC_WIDTH + 1))
        v_q = Signal(signed(DISCRETE_ACC_WIDTH + 2))

        # ---- Control ---------------------------------------------------------------------------
        jump = Signal()               # JUMP, or DJNZ with cnt > 1: NEXT loads w1 into pc
        nb_dec = Signal(17)
        m.d.comb += nb_dec.eq((w[4] + (N - 1)) >> lgN)
        # DMATVEC's x element in sign-magnitude form (the discrete unit's input), saturated.
        if not self._pipelined:
            x_in = rdata[:8]
            x_sm = Signal(8)
            mag = Signal(8)
            m.d.comb += [mag.eq(Mux(x_in[7], -x_in.as_signed(), x_in)),
                         x_sm.eq(Cat(Mux(mag[7], 127, mag[:7]), x_in[7]))]

        # DECODE's outcome (stage B of the decode pipeline): the opcode and the counts, checked
        # in the order of lowbit.sim.program.Machine (data instructions: counts here,
        # BAD_LENGTH; ranges in RANGE).
        dec_fail = Signal()           # BAD_LENGTH if dec_len, else BAD_OPCODE
        dec_len = Signal()
        dec_range = Signal()
        dec_mul = Signal()
        dec_config = Signal()
        o_fail, o_len = Signal(), Signal()
        o_range, o_mul, o_config = Signal(), Signal(), Signal()
        ctrl = [is_op[n] for n in ("NOP", "HALT", "JUMP", "LOOP", "DJNZ", "SETOFS", "ADDOFS")]
        simple = [is_op["MOVE"], is_op["LOADW"]]
        simple += [is_op["LUT"]] * self._lut + [is_op["GRAND"]] * self._grand
        known = Cat(*ctrl, *simple, is_op["CONFIG"]).any()
        m.d.comb += o_config.eq(is_op["CONFIG"])
        len_fail = []
        if self._quantiser:
            fmt = self.quant_format
            len_fail.append(is_op["QUANT"] & (cnt_z | (fmt == 3)
                                              | ((fmt == QuantTarget.BFP) & (count[:lgB] != 0))
                                              | ((fmt == QuantTarget.DISCRETE)
                                                 & (self.code_width == 0))))
            known = known | is_op["QUANT"]
        lacks = Const(0)
        if self._bfp:
            # A rounding, exponent selector or mantissa width the column lacks: as a missing engine
            # (lowbit.sim.program.Machine checks it first too). Without the discrete unit the
            # weight range comes from the decode pipeline (w_bad).
            if not self._bfp_stochastic:
                lacks = lacks | (rounding == 2)
            if not self._bfp_predictor:
                lacks = lacks | (self.exp_select == 2)
            if not self._bfp_mant_width:
                # Below 8 as decoded (clamped to 2..8): the register below 8.
                lacks = lacks | (self.mant_width < 8)
            if not self._lut:
                lacks = lacks | flags[3]
            lacks = is_op["MATVEC"] & lacks
            len_fail.append(is_op["MATVEC"] & (w4_z | nb_big | w5_z))
            known = known | is_op["MATVEC"]
        if self._discrete:
            len_fail.append(is_op["DMATVEC"] & (w4_z | w5_z | (self.code_width == 0)))
            known = known | is_op["DMATVEC"]
        rng = Cat(*simple, *[is_op["QUANT"]] * self._quantiser,
                  *[is_op["MATVEC"]] * (self._bfp and not self._discrete)).any()
        mul = Cat(Const(0), *[is_op["MATVEC"]] * (self._bfp and self._discrete),
                  *[is_op["DMATVEC"]] * self._discrete).any()
        m.d.comb += [
            o_fail.eq(~known | lacks | (Cat(*simple).any() & cnt_z) | Cat(0, *len_fail).any()),
            o_len.eq(known & ~lacks), o_range.eq(rng), o_mul.eq(mul),
        ]
        # The limit (left changes in NEXT, a fetch before DECODE), the fetch range, the
        # RUN's limit of 0 (set in ARGS).
        at_limit = Signal()
        pc_bad = Signal()
        limit_z = Signal()
        m.d.comb += [lo_dec.eq(left_lo + (~limit_in).replicate(16)),
                     hi_dec.eq(left_hi + (~limit_in).replicate(16))]
        with m.If(left_load | ex_inc):
            m.d.sync += left_lo.eq(Mux(limit_in, Cat(left_lo[8:], left_hi[:8]), lo_dec[:16]))
        with m.If(left_load | borrow):
            m.d.sync += left_hi.eq(Mux(limit_in, Cat(left_hi[8:], c.arg.payload), hi_dec[:16]))
        m.d.sync += [borrow.eq(ex_inc & ~lo_dec[16]), at_limit.eq(~lo_dec[16] & ~hi_dec[16]),
                     pc_bad.eq(pc > words - 8)]
        m.d.sync += [dec_fail.eq(o_fail), dec_len.eq(o_len), dec_range.eq(o_range),
                     dec_mul.eq(o_mul), dec_config.eq(o_config)]

        # CONFIG's index and value, not gated by the state: the register file reads them only
        # with ``cfg.we`` (a multiplexer on its own write bus), and ``cfg.ok`` decodes the index.
        m.d.comb += [self.cfg.index.eq(src), self.cfg.value.eq(Cat(dst, w[3]))]

        # The reader's consumers, from the flags. Engines' outputs are always taken (the write
        # register), so their input readiness does not wait for the state.
        ready = st_loadw | st_dm & ~g_full & ~dm_hold if self._pipelined else \
            st_loadw | st_dm & ~g_full
        # The reader's bias words are taken: by the column, or by the bias FIFO.
        b_ready = Signal() if self._bfp and self._bias_fifo else (
            col.i_bias.ready if self._bfp else Const(0))
        # The banks' read enable in MATVEC's x phase: ``rd_fill`` there, written with the
        # column's readiness alone (the reader's only consumer then) instead of ``take``'s OR of
        # every consumer, so that the enable fanned out to every bank follows fewer LUTs.
        # (``take_x``: the same for the x buffer's write, a word taken in the x phase.)
        fill_x, take_x = rd_fill, take & mv_x
        if self._pipelined and self._bfp:
            def fill_on(memq):
                """``fill_x`` with the word's arrival flag ``memq`` (``rd_memq`` or a copy)."""
                return (memq | skid_v[0]) & (~rd_valid | col.i_x.ready)
            fill_x = fill_on(rd_memq)
            take_x = rd_valid & mv_x & col.i_x.ready

        def bank_en(fill):
            """The weight banks' read enable, with the x phase's ``fill`` (``fill_x`` or a
            copy's): MATVEC's x words, the x buffer's reads, DMATVEC."""
            if self._bfp and self._x_buffer:
                return fill & mv_x | xb_fill | st_dm
            return fill & mv_x | st_dm
        # ---- x buffer (MATVEC's later tiles) -----------------------------------------------
        if self._bfp and self._x_buffer:
            kmax = self._max_blocks * B
            m.submodules.xbuf = xbuf = Memory(shape=16, depth=kmax, init=[])
            xb_wr = xbuf.write_port()
            xb_rd = xbuf.read_port()
            xb_widx = Signal(range(kmax))
            xb_ridx = Signal(range(kmax))
            x_first = Signal()            # the MATVEC's first tile is still to start
            xb_x = Signal()               # a later tile's beats, from the buffer
            xb_valid = Signal()
            xb_left = Signal(lw)
            xb_more = Signal()            # xb_left != 0, as a register
            xb_issue = Signal()
            xb_start = Signal()
            # Tiles whose x phase has started and whose bias phase has not (the reader feeds
            # the bias phases in order, after the first tile's x).
            b_pend = Signal.like(tiles_left)
            b_inc = Signal()
            b_dec = Signal()
            # The buffer's reads in stages as the reader's (``xb_fill``, ``xb_last``; with
            # ``pipelined`` the buffer's output register ``xb_mem`` and the word's ``xb_word``).
            if self._pipelined:
                xb_fill = Signal()
                xb_last = Signal()
                m.d.comb += [xb_wr.en.eq(take_x), xb_wr.addr.eq(xb_widx),
                             xb_wr.data.eq(rdata), xb_rd.en.eq(xb_issue), xb_rd.addr.eq(xb_ridx)]
                xb_mem = Signal()
                xb_word = Signal(16)
                xb_data = xb_word
                m.d.comb += [
                    xb_fill.eq(xb_mem & (~xb_valid | col.i_x.ready)),
                    xb_issue.eq(xb_x & xb_more & (~xb_mem | ~xb_valid | col.i_x.ready)),
                    xb_last.eq(~xb_more & ~xb_mem)]
                m.d.sync += [xb_mem.eq(xb_issue | (xb_mem & ~xb_fill)),
                             xb_valid.eq(xb_fill | (xb_valid & ~col.i_x.ready))]
                with m.If(~xb_valid | col.i_x.ready):
                    m.d.sync += xb_word.eq(xb_rd.data)
                with m.If(take_x):
                    m.d.sync += xb_widx.eq(xb_widx + 1)
            else:
                xb_data, xb_fill, xb_last = xb_rd.data, xb_issue, ~xb_more
                m.d.comb += [
                    xb_wr.en.eq(take & mv_x), xb_wr.addr.eq(xb_widx), xb_wr.data.eq(rdata),
                    xb_issue.eq(xb_x & xb_more & (~xb_valid | col.i_x.ready)),
                    xb_rd.en.eq(xb_issue), xb_rd.addr.eq(xb_ridx),
                ]
                with m.If(take & mv_x):
                    m.d.sync += xb_widx.eq(xb_widx + 1)
                m.d.sync += xb_valid.eq(xb_issue | (xb_valid & ~col.i_x.ready))
            with m.If(xb_issue):
                m.d.sync += [xb_ridx.eq(xb_ridx + 1), xb_left.eq(xb_left - 1),
                             xb_more.eq(xb_left != 1)]
            with m.If(xb_x & xb_last & (~xb_valid | col.i_x.ready)):
                m.d.sync += xb_x.eq(0)
            with m.If(xb_start):
                m.d.sync += [xb_x.eq(1), xb_ridx.eq(0), xb_left.eq(len_src), xb_more.eq(1)]
            m.d.sync += b_pend.eq(b_pend + b_inc - b_dec)
        m.d.comb += [w_rd_addr.eq(w_ptr), w_rd_en.eq(bank_en(fill_x))]
        if self._pipelined and self._bfp:
            # Each copy of the enable reads a copy of its own of the word's arrival
            # (``rd_memq``, a register_copy), so that synthesis keeps the copies apart and the
            # placer puts each by its banks.
            for g, en_g in enumerate(w_rd_en_g):
                memq_g = register_copy(m, rd_memq, rd_memb, f"rd_memq_g{g}")
                m.d.comb += en_g.eq(bank_en(fill_on(memq_g)))
        elif self._pipelined:
            m.d.comb += [en_g.eq(w_rd_en) for en_g in w_rd_en_g]
        # The column's results: taken as they come, or, with the bias memory and one address,
        # held in the output unit's FIFO while the reader feeds the column x (``o_ready`` is a
        # register: taken while the reader has no x left to read or waits for the column). So
        # a tile's writes take the port while the combiner is busy with the next tile's bias
        # and the PE array stalls, not in cycles that would carry beats (digits MLP on the
        # iCEBreaker: 247.0 -> 229.1 cycles per image). Without a predictor the output unit
        # releases a bank once its product is in the FIFO, so the hold stalls the column only
        # when the FIFO is full; then the reader waits, and the hold ends (no deadlock).
        o_ready = Const(1)
        if self._bfp and self._bias_fifo and not self._write_addr:
            o_ready = Signal()
            m.d.sync += o_ready.eq(~mv_x | ~rd_more | rd_valid & ~take)
        if self._lut:
            # The payload is meaningful only with valid: not gated by the state.
            m.d.comb += [self.lut.i.valid.eq(rd_valid & st_lut), self.lut.o.ready.eq(1),
                         self.lut.i.payload.table.eq(self.lut_select),
                         self.lut.i.payload.code.eq(rdata[:8])]
            if self._bfp:
                # MATVEC with F_LUT: the column's results are the codes. The engine takes one
                # every cycle (its output is always taken), so the column's output needs no
                # back-pressure from it (``o_ready`` only).
                with m.If(st_mvlut):
                    m.d.comb += [self.lut.i.valid.eq(col.o.valid & o_ready),
                                 self.lut.i.payload.code.eq(col.o.payload.m[:8])]
            ready = ready | st_lut & self.lut.i.ready
        lut_valid, lut_data = (self.lut.o.valid, self.lut.o.payload) if self._lut else (0, 0)
        if self._lut and self._pipelined:
            # The table's block RAM has no output register (Yosys maps it without one: 5.8 ns
            # clock-to-out on ECP5), so its result is registered before the write mux; this
            # was the ULX3S critical path. One cycle more per LUT or F_LUT MATVEC.
            lut_valid = Signal(name="lut_v")
            lut_data = Signal.like(self.lut.o.payload, name="lut_d")
            m.d.sync += [lut_valid.eq(self.lut.o.valid), lut_data.eq(self.lut.o.payload)]
        if self._quantiser:
            m.d.comb += [qu.i.valid.eq(rd_valid & st_quant), qu.o.ready.eq(1)]
            ready = ready | st_quant & qu.i.ready
        if self._bfp:
            # The column's configuration is only read during a MATVEC; outside, it is idle.
            if self._x_buffer:
                # Beats from the reader (the first tile) or from the x buffer (the others).
                x_valid = rd_valid & mv_x | xb_valid
                m.d.comb += [
                    col.cfg_blocks.eq(w[4]), col.cfg_bias_en.eq(bias_en),
                    col.i_x.payload.eq(Mux(xb_x, xb_data, rdata)),
                    col.i_bias.payload.eq(rdata),
                    col.i_x.valid.eq(x_valid), col.i_w.valid.eq(x_valid),
                    col.i_bias.valid.eq(rd_valid & mv_b), beat.eq(x_valid & col.i_x.ready),
                    col.o.ready.eq(1),
                ]
            else:
                # The bias words from the reader, or through the bias FIFO.
                bias_data, bias_valid = rdata, rd_valid & mv_b
                if self._bias_fifo:
                    # The bias memory: the first sample's reader writes the tiles' T·N words in
                    # order (``bf_wp``), the column reads them (``bf_rp``, back to 0 after the
                    # last) through the memory's read register (``bf_valid``), in the first
                    # sample only those written, in the later ones all of them. A read never
                    # meets a write to its entry, so no collision logic (``no_rw_check``, as the
                    # weight banks: the read register after a combinational port is the RAM's).
                    bdepth = max(N, depth // B * N)
                    m.submodules.bias_fifo = bmem = Memory(
                        shape=16, depth=bdepth, init=[],
                        attrs={"ram_style": "block", "no_rw_check": 1})
                    bf_w = bmem.write_port()
                    bf_rc = bmem.read_port(domain="comb")
                    bf_data = Signal(16)
                    bf_wp = Signal(range(bdepth))
                    bf_rp = Signal(range(bdepth))
                    bf_rp_inc = Signal(len(bf_rp) + 1)
                    bf_valid = Signal()
                    bf_we = Signal()
                    bf_re = Signal()
                    m.d.comb += [
                        b_ready.eq(1), bf_rp_inc.eq(bf_rp + 1),
                        bf_we.eq(rd_valid & mv_b),
                        bf_re.eq(bias_en & (~sm_first | (bf_rp != bf_wp))
                                 & (~bf_valid | col.i_bias.ready)),
                        bf_w.en.eq(bf_we), bf_w.addr.eq(bf_wp), bf_w.data.eq(rdata),
                        bf_rc.addr.eq(bf_rp),
                    ]
                    m.d.sync += bf_valid.eq(bf_re | bf_valid & ~col.i_bias.ready)
                    with m.If(bf_we):
                        m.d.sync += bf_wp.eq(bf_wp + 1)
                    with m.If(bf_re):
                        # Back to the first word for a later sample (a MATVEC of one sample
                        # ends its reads where the writes ended).
                        last = (bf_rp_inc == (w[5][:t_bits] << lgN)) & (~sm_first | sm_more)
                        m.d.sync += [bf_rp.eq(Mux(last, 0, bf_rp_inc)), bf_data.eq(bf_rc.data)]
                    with m.If(st_range):
                        # (A word the last sample read past its bias is dropped here.)
                        m.d.sync += [bf_wp.eq(0), bf_rp.eq(0), bf_valid.eq(0)]
                    bias_data, bias_valid = bf_data, bf_valid
                m.d.comb += [
                    col.cfg_blocks.eq(w[4]), col.cfg_bias_en.eq(bias_en),
                    col.i_x.payload.eq(rdata), col.i_bias.payload.eq(bias_data),
                    col.i_x.valid.eq(rd_valid & mv_x), col.i_w.valid.eq(rd_valid & mv_x),
                    col.i_bias.valid.eq(bias_valid),
                    beat.eq(rd_valid & mv_x & col.i_x.ready),
                    col.o.ready.eq(o_ready),
                ]
            for k in range(N):
                m.d.comb += [col.i_w.payload.m[k].eq(banks[k][:8]),
                             col.i_w.payload.e[k].eq(banks[k][8:])]
            ready = ready | mv_x & col.i_x.ready | mv_b & b_ready
        m.d.comb += [reading.eq(st_loadw | st_lut | st_quant | mv_x | mv_b | st_dm),
                     take.eq(rd_valid & ready)]

        def finish():
            m.next = "NEXT"

        # The answer (RESP_EMPTY, RESP) from flip-flops set as the states are entered: no
        # state decode in front of the dispatcher's OR (the status is 0 outside them).
        resp_valid = Signal()
        resp_long = Signal()          # RESP: the reply's 16 bytes follow
        m.d.comb += [c.resp.valid.eq(resp_valid),
                     c.resp.payload.status.eq(Mux(resp_valid, status, 0)),
                     c.resp.payload.length.eq(Mux(resp_long, 16, 0))]

        def fail(code):
            m.d.sync += status.eq(code)
            m.next = "DONE"

        # The command's and the arguments' readiness from flip-flops too: ``idle`` (IDLE until
        # a command is taken) and ``args_ready`` (ARGS before the eighth byte). IDLE, RESP,
        # RESP_EMPTY and SEND move on a cycle after their handshake, on these flip-flops, so
        # that no handshake of the link reaches the state register (a cycle each, outside
        # ``cycles``).
        idle = Signal(init=1)
        len_ok = Signal()             # the command taken in IDLE has the length 8
        args_ready = Signal()
        m.d.comb += [c.cmd.ready.eq(idle), c.arg.ready.eq(args_ready),
                     c.data.valid.eq(send_valid), c.data.payload.eq(send_byte)]

        with m.FSM():
            with m.State("IDLE"):
                # The command is taken (``idle``), then the state moves a cycle later on
                # flip-flops: no handshake of the link in front of the state register.
                with m.If(~idle):
                    with m.If(len_ok):
                        m.d.sync += args_ready.eq(1)
                        m.next = "ARGS"
                    with m.Else():
                        m.d.sync += [status.eq(Status.BAD_LENGTH), resp_valid.eq(1)]
                        m.next = "RESP_EMPTY"
                with m.Elif(c.cmd.valid):
                    m.d.sync += [nargs.eq(0), limit_z.eq(1), limit_in.eq(0), idle.eq(0),
                                 len_ok.eq(c.cmd.payload.length == 8)]
            with m.State("ARGS"):
                with m.If(~args_ready):
                    m.next = "CHECK"
                with m.Else():
                    with m.If(c.arg.valid):
                        nargs_inc = Signal(4)
                        m.d.comb += nargs_inc.eq(nargs + 1)
                        m.d.sync += [nargs.eq(nargs_inc), limit_in.eq(nargs_inc[2:] == 1),
                                     args_ready.eq(nargs_inc != 8)]
                        b = c.arg.payload
                        with m.Switch(nargs):
                            with m.Case(0):
                                m.d.sync += start[:8].eq(b)
                            with m.Case(1):
                                m.d.sync += start[8:16].eq(b)
                            with m.Case(2):
                                m.d.sync += [start[16].eq(b[0]), start_hi.eq(b[1:] != 0)]
                            with m.Case(3):
                                m.d.sync += start_hi.eq(start_hi | (b != 0))
                            with m.Default():
                                # limit == 0 as a flag beside the shift register.
                                m.d.comb += left_load.eq(1)
                                with m.If(b != 0):
                                    m.d.sync += limit_z.eq(0)
            with m.State("CHECK"):
                m.d.sync += [pc.eq(start[1:]), executed.eq(0), cycles.eq(0), cnt.eq(0),
                             ofs_a.eq(0), ofs_b.eq(0), status.eq(Status.OK)]
                if self._busy_count:
                    m.d.sync += busy_cycles.eq(0)
                with m.If(start_bad):
                    m.d.sync += [status.eq(Status.BAD_ADDRESS), resp_valid.eq(1)]
                    m.next = "RESP_EMPTY"
                with m.Elif(limit_z):
                    m.d.sync += [status.eq(Status.BAD_LENGTH), resp_valid.eq(1)]
                    m.next = "RESP_EMPTY"
                with m.Else():
                    m.d.sync += running.eq(1)
                    if self._pipelined:
                        m.d.sync += busy_q.eq(1)
                    m.d.comb += run_start.eq(1)
                    m.next = "FETCH"
            with m.State("RESP_EMPTY"):
                # As in IDLE: the answer is taken, then the state moves.
                with m.If(c.resp.ready):
                    m.d.sync += resp_valid.eq(0)
                with m.If(~resp_valid):
                    m.d.sync += idle.eq(1)
                    m.next = "IDLE"

            # -- fetch and decode ------------------------------------------------------------
            with m.State("FETCH"):
                # rd_ptr is the fetch address (no adder in front of the scratchpad's address
                # but rd_inc's increment).
                m.d.comb += rp_pc.eq(1)
                m.d.sync += [fidx.eq(0), fetching.eq(1), len_hold.eq(0)]
                m.next = "FETCH_WORDS"
            with m.State("FETCH_WORDS"):
                # Reads as the reader issues (the address's default): the pc first (fresh from
                # FETCH), then one word further each cycle (on ``fetching``, after the FSM).
                # Word k arrives in cycle k + 1 (``rdata``'s latency; a cycle more, ``lag``,
                # with the reader's second stage).
                m.d.sync += [fidx.eq(fidx + 1), fresh.eq(0)]
                with m.Switch(fidx):
                    with m.Case(1 + lag):
                        # (An instruction the sequencer lacks stays 0: an unknown opcode.)
                        m.d.sync += [is_op[name].eq(rdata[:8] == code)
                                     for code, name in Op.NAMES.items()
                                     if self._control or code not in CONTROL_OPS]
                        m.d.sync += [flags.eq(rdata[8:]), is_data.eq(rdata[4:8] != 0)]
                    with m.Case(2 + lag):
                        m.d.sync += src.eq(src_sum)
                    with m.Case(3 + lag):
                        m.d.sync += dst.eq(dst_sum)
                    for k in range(4, 8):          # w7: MATVEC's samples (below)
                        with m.Case(k + lag):
                            m.d.sync += w[k - 1].eq(rdata)
                            # w4's and w5's tests (stage A), from the word as it arrives.
                            if k == 5:
                                m.d.sync += [w4_z.eq(rdata == 0),
                                             nb_big.eq(rdata > self._max_blocks)]
                            if k == 6:
                                m.d.sync += [w5_z.eq(rdata == 0), t_big.eq(rdata[t_bits:] != 0)]
                    if self._bfp:
                        with m.Case(8 + lag):
                            m.d.sync += [sm_left.eq(rdata), s_more.eq(rdata != 0),
                                         w7_big.eq(rdata[sm_bits:] != 0)]
                with m.If(fidx == 8 + lag):
                    m.d.sync += fetching.eq(0)
                    m.next = "DECODE"
            with m.State("DECODE"):
                # The limit and the fetch range are checked here, from registers, though they
                # come first: the words fetched past them are not used.
                # The op class from stage A's flip-flops, not a decode of w0.
                m.d.sync += jump.eq(is_op["JUMP"] | is_op["DJNZ"] & cnt_big)
                # LOOP and DJNZ as one multiplexer (they never meet), which merges into the
                # decrement's LUTs.
                # DJNZ counts down to 0 (from 1 as from more; from 0 it stays).
                with m.If(is_op["LOOP"] | is_op["DJNZ"] & (cnt_big | cnt[0])):
                    m.d.sync += cnt.eq(load_or_step(cnt, -1, is_op["LOOP"], src))
                with m.If(is_op["SETOFS"] | is_op["ADDOFS"]):
                    # Stage A's sums: w1 + 0 and w2 + 0 for SETOFS, the offsets added for ADDOFS.
                    m.d.sync += [ofs_a.eq(src), ofs_b.eq(dst)]
                if self._bfp and self._discrete:
                    with m.If(is_op["MATVEC"]):
                        m.d.sync += [mul_acc.eq(w[3]), mul_cnt.eq(w[5]),
                                     mul_step.eq(w[4] << lgB)]
                if self._discrete:
                    with m.If(is_op["DMATVEC"]):
                        m.d.sync += [mul_acc.eq(w[3]), mul_cnt.eq(w[5]),
                                     mul_step.eq(nb_dec), nb_d.eq(nb_dec)]
                if self._bfp:
                    m.d.sync += [x_acc.eq(end_src), s_over.eq(0)]
                with m.If(at_limit):
                    fail(Status.LIMIT)
                with m.Elif(pc_bad):
                    fail(Status.BAD_ADDRESS)
                with m.Elif(dec_fail):
                    fail(Mux(dec_len, Status.BAD_LENGTH, Status.BAD_OPCODE))
                if self._bfp:
                    with m.Elif(is_op["MATVEC"] & s_more):
                        m.next = "SAMP"
                with m.Elif(dec_range):
                    m.next = "RANGE"
                if self._discrete:
                    with m.Elif(dec_mul):
                        m.next = "MUL"
                with m.Elif(dec_config):
                    m.next = "CONFIG"
                with m.Else():
                    finish()
            if self._discrete:
                with m.State("MUL"):
                    with m.If((mul_cnt == 0) | (mul_acc > depth)):
                        m.next = "RANGE"
                    with m.Else():
                        m.d.sync += [mul_acc.eq(mul_acc + mul_step), mul_cnt.eq(mul_cnt - 1)]
            if self._bfp:
                with m.State("SAMP"):
                    with m.If(~s_more | s_over | dst_big | w7_big):
                        m.next = "SAMP_WAIT"
                    with m.Else():
                        ld_sum = Signal(lw + 1)
                        m.d.comb += ld_sum.eq(len_dst + len_d[:lw])
                        m.d.sync += [x_acc.eq(x_acc + xs), len_dst.eq(ld_sum[:lw]),
                                     len_hold.eq(1),
                                     dst_big.eq(dst_big | ld_sum[lw] | (len_d[lw:] != 0)),
                                     sm_left.eq(sm_left - 1), s_more.eq(sm_left != 1)]
                with m.State("SAMP_WAIT"):
                    # Stage C takes the destination's last end.
                    m.next = "MUL" if self._discrete else "RANGE"
            with m.State("RANGE"):
                # One shared checker (the decode pipeline's stage C): source range,
                # destination range (scratchpad, or weight entries for LOADW), bias range,
                # weight range, LUT table.
                bad = (bad_src | bad_dst | (op_mat & bias_en & bad_bias)
                       | (op_mat & w_bad) | ((op_lut | is_op["MATVEC"] & mv_lut) & lut_bad)
                       | (is_op["MATVEC"] & (s_over | w7_big)))
                m.d.comb += st_range.eq(1)
                if self._bfp:
                    # The samples to start after the first, and the first bias word of each.
                    m.d.sync += sm_first.eq(1)
                    if not self._bias_fifo:
                        m.d.sync += bias_base.eq(w[6])
                m.d.comb += rp_src.eq(1)
                m.d.comb += wr_load.eq(1)
                m.d.sync += [lw_lane.eq(0), lw_entry.eq(dst),
                             lw_valid.eq(0), w_base.eq(w[3]), w_ptr.eq(w[3]),
                             mv_x.eq(0), mv_b.eq(0),
                             *([x_first.eq(1), b_pend.eq(0), xb_widx.eq(0)]
                               if self._bfp and self._x_buffer else []),
                             tiles_left.eq(w[5]), tl_more.eq(1),
                             # Every count is nonzero when the checks pass (DECODE); a MATVEC
                             # or DMATVEC loads its reader per tile or row.
                             rd_more.eq(~op_mat), wr_done.eq(0)]
                with m.If(bad):
                    fail(Status.BAD_ADDRESS)
                with m.Else():
                    # (A flag of an engine that is not built stays 0: its opcode fails in
                    # DECODE.)
                    m.d.sync += [st_loadw.eq(op_loadw), st_mv.eq(is_op["MATVEC"])]
                    if self._quantiser:
                        m.d.sync += st_quant.eq(is_op["QUANT"])
                    if self._lut:
                        m.d.sync += st_lut.eq(op_lut)
                        if self._bfp:
                            m.d.sync += st_mvlut.eq(is_op["MATVEC"] & mv_lut)
                    # The instructions that reach RANGE, the last one as the default: the
                    # state always changes here (no hold term in the state's enable).
                    ranged = [(is_op["MOVE"], "MOVE_RD"), (op_loadw, "LOADW")]
                    ranged += [(is_op["QUANT"], "QUANT")] * self._quantiser
                    ranged += [(op_lut, "LUT")] * self._lut
                    ranged += [(op_grand, "GRAND")] * self._grand
                    ranged += [(is_op["MATVEC"], "MATVEC")] * self._bfp
                    ranged += [(is_op["DMATVEC"], "DM_ROW")] * self._discrete
                    for k, (cond, state) in enumerate(ranged):
                        with (m.Else() if k == len(ranged) - 1
                              else m.If(cond) if k == 0 else m.Elif(cond)):
                            m.next = state

            # -- control instructions -------------------------------------------------------
            with m.State("CONFIG"):
                with m.If(self.cfg.ok):
                    m.d.comb += self.cfg.we.eq(1)
                    finish()
                with m.Else():
                    fail(Status.BAD_ADDRESS)

            # -- data instructions ----------------------------------------------------------
            with m.State("MOVE_RD"):
                # Reads at rd_ptr (rd_next: rd_ptr stays fresh through a MOVE, as rp_inc
                # steps it).
                m.d.comb += re.eq(1)
                if self._pipelined:
                    m.next = "MOVE_LAG"
                else:
                    m.d.sync += st_movewr.eq(1)
                    m.next = "MOVE_WR"
            if self._pipelined:
                # The word passes the port's register, the memory, the register beside it and
                # reaches the stage's.
                for k in range(1, lag + 1):
                    with m.State("MOVE_LAG" if k == 1 else f"MOVE_LAG{k}"):
                        if k == lag:
                            m.d.sync += st_movewr.eq(1)
                            m.next = "MOVE_WR"
                        else:
                            m.next = f"MOVE_LAG{k + 1}"
            with m.State("MOVE_WR"):
                # The address, the write enable and the data on st_movewr (after the FSM, as the
                # reader).
                m.d.comb += [rp_inc.eq(1), wp_step.eq(1), wl_step.eq(1)]
                m.d.sync += st_movewr.eq(0)
                m.next = "MOVE_RD"
                with m.If(wr_one):
                    finish()
            with m.State("LOADW"):
                m.d.sync += lw_valid.eq(rd_fill)
                with m.If(lw_valid):
                    m.d.sync += lw_lane.eq(lw_lane + 1)
                    with m.If(lw_lane == N - 1):
                        m.d.sync += lw_entry.eq(lw_entry + 1)
                m.d.comb += [w_wr_en.eq(lw_valid), w_wr_data.eq(rdata), w_wr_lane.eq(lw_lane),
                             w_wr_addr.eq(lw_entry)]
                with m.If(rd_last & ~lw_valid):
                    m.d.sync += st_loadw.eq(0)
                    finish()
            with m.State("GRAND"):
                if self._grand:
                    more = rd_more
                    m.d.comb += [self.grand.ready.eq(more),
                                 wr_in_valid.eq(self.grand.valid & more),
                                 wr_in_data.eq(self.grand.payload)]
                    with m.If(self.grand.valid & more):
                        m.d.comb += rl_dec.eq(1)
                        m.d.sync += rd_more.eq(rd_left != 1)
                with m.If(wr_done):
                    finish()
            with m.State("LUT"):
                if self._lut:
                    m.d.comb += [wr_in_valid.eq(lut_valid),
                                 wr_in_data.eq(Cat(lut_data, self.lut_exp))]
                with m.If(wr_done):
                    m.d.sync += st_lut.eq(0)
                    finish()
            with m.State("QUANT"):
                if self._quantiser:
                    m.d.comb += [qu.i.payload[0].eq(rdata),
                                 wr_in_valid.eq(qu.o.valid),
                                 wr_in_data.eq(Cat(qu.o.payload.q[0][:8], qu.o.payload.e[:8]))]
                with m.If(wr_done):
                    m.d.sync += st_quant.eq(0)
                    finish()
            with m.State("MATVEC"):
                if self._bfp:
                    m.d.comb += [wr_in_valid.eq(col.o.valid & o_ready),
                                 wr_in_data.eq(Cat(col.o.payload.m[:8], col.o.payload.e[:8]))]
                    if self._lut:
                        with m.If(st_mvlut):
                            m.d.comb += [wr_in_valid.eq(lut_valid),
                                         wr_in_data.eq(Cat(lut_data, self.lut_exp))]
                with m.If(wr_done):
                    m.d.sync += [st_mv.eq(0), st_mvlut.eq(0)]
                    finish()
            if self._discrete:
                with m.State("DM_ROW"):
                    # Per row: the bias word (if any), then the beats, then the requantiser.
                    m.d.comb += rp_src.eq(1)
                    if self._pipelined:
                        m.d.comb += dm_chg.eq(1)
                    m.d.sync += [g_lane.eq(0), g_full.eq(0)]
                    if not self._pipelined:
                        m.d.sync += gather.eq(0)
                    m.d.sync += [rd_more.eq(1),
                                 w_ptr.eq(w_base),
                                 bias_q.eq(0)]
                    with m.If(~tl_more):
                        finish()
                    with m.Elif(bias_en):
                        m.next = "DM_BIAS"
                    with m.Else():
                        m.d.sync += st_dm.eq(1)
                        m.next = "DM_RUN"
                with m.State("DM_BIAS"):
                    m.d.comb += [addr_base.eq(bias_ptr), re.eq(1)]
                    m.next = "DM_BIAS_LAG" if self._pipelined else "DM_BIAS2"
                if self._pipelined:
                    for k in range(1, lag + 1):
                        with m.State("DM_BIAS_LAG" if k == 1 else f"DM_BIAS_LAG{k}"):
                            m.next = "DM_BIAS2" if k == lag else f"DM_BIAS_LAG{k + 1}"
                with m.State("DM_BIAS2"):
                    m.d.sync += [bias_q.eq(rdata), bias_ptr.eq(bias_ptr + 1), st_dm.eq(1)]
                    m.next = "DM_RUN"
                with m.State("DM_RUN"):
                    # The stage holds one word at a time, so with nothing left to issue the word
                    # taken is the row's last.
                    last_take = rd_last
                    if not self._pipelined:
                        m.d.comb += [du.i.valid.eq(g_full), du.i.payload.last.eq(g_last)]
                        code_mask = Signal(self._code_bits)
                        m.d.comb += code_mask.eq((Const(1, 4) << self.code_width) - 1)
                        for k in range(N):
                            m.d.comb += [du.i.payload.x[k].eq(gather.word_select(k, 8)),
                                         du.i.payload.w[k].eq(dm_codes[k] & code_mask)]
                    if self._pipelined:
                        with m.If(take):
                            m.d.sync += g_lane.eq(g_lane + 1)
                        with m.If(dm_t & dm_full):
                            m.d.sync += [g_full.eq(1), g_last.eq(dm_last)]
                    else:
                        with m.If(take):
                            m.d.sync += [gather.word_select(g_lane, 8).eq(x_sm),
                                         g_lane.eq(g_lane + 1)]
                            with m.If((g_lane == N - 1) | last_take):
                                m.d.sync += [g_full.eq(1), g_last.eq(last_take)]
                    m.d.comb += beat.eq(du.i.valid & du.i.ready)
                    with m.If(du.i.valid & du.i.ready):
                        if self._pipelined:
                            m.d.comb += dm_chg.eq(1)
                        m.d.sync += g_full.eq(0)
                        if not self._pipelined:
                            m.d.sync += gather.eq(0)
                        m.d.sync += [g_lane.eq(0), w_ptr.eq(w_ptr + 1)]
                        with m.If(g_last):
                            m.d.sync += st_dm.eq(0)
                            m.next = "DM_WAIT"
                with m.State("DM_WAIT"):
                    acc = du.o.payload.acc
                    amag = acc[:DISCRETE_ACC_WIDTH - 1]
                    m.d.comb += du.o.ready.eq(1)
                    with m.If(du.o.valid):
                        m.d.sync += acc_q.eq(Mux(acc[-1], -amag, amag))
                        m.next = "DM_SUM"
                with m.State("DM_SUM"):
                    lim = (1 << (DISCRETE_ACC_WIDTH - 1)) - 1
                    s = acc_q + bias_q
                    if self._pipelined:
                        # The saturation from the top bits of two parallel sums, s and s - 1,
                        # not from comparators after the adder (as the discrete unit's).
                        A = DISCRETE_ACC_WIDTH
                        s_m1 = acc_q + (bias_q - 1)
                        pos = ~s[-1] & s[A - 1:].any()
                        neg = s_m1[-1] & ~s_m1[A - 1:].all()
                        m.d.sync += v_q.eq(Mux(pos, lim, Mux(neg, -lim, s)))
                    else:
                        m.d.sync += v_q.eq(Mux(s > lim, lim, Mux(s < -lim, -lim, s)))
                    m.next = "DM_POST"
                with m.State("DM_POST"):
                    # |v| <= 2^15 - 1, so every shift from 16 up gives 0: a 4-bit shifter.
                    sh = self.disc_shift[:4]
                    rnd = (Const(1, 17) << sh)[1:]
                    if self._pipelined:
                        # The rounding addition first, into a register (DM_SHIFT shifts,
                        # DM_SAT saturates): no shifter, carry chain and comparison in one
                        # cycle.
                        m.d.sync += v_q.eq(v_q + rnd.as_signed())
                        m.next = "DM_SHIFT"
                    else:
                        y = (v_q + rnd.as_signed()) >> sh
                        yc = Mux(self.disc_shift[4], 0,
                                 Mux(y > 127, 127, Mux(y < -127, -127, y)))

                    def dm_write(code):
                        m.d.comb += [w_addr.eq(wr_ptr), p.we.eq(1),
                                     p.wdata.eq(Cat(code, self.fixed_exp))]
                        m.d.comb += wp_step.eq(1)
                        m.d.sync += [tiles_left.eq(tiles_left - 1),
                                     tl_more.eq(tiles_left != 1),
                                     w_base.eq(w_base + nb_d)]
                        m.next = "DM_ROW"

                    if not self._pipelined:
                        dm_write(yc[:8])
                if self._pipelined:
                    dm_y = Signal(8)
                    with m.State("DM_SHIFT"):
                        # The rounding shift, then the saturation, each into a register, and the
                        # result written from there: no carry chain in front of the scratchpad's
                        # data input.
                        m.d.sync += v_q.eq(v_q >> self.disc_shift[:4])
                        m.next = "DM_SAT"
                    with m.State("DM_SAT"):
                        yc = Mux(self.disc_shift[4], 0,
                                 Mux(v_q > 127, 127, Mux(v_q < -127, -127, v_q)))
                        m.d.sync += dm_y.eq(yc[:8])
                        m.next = "DM_WRITE"
                    with m.State("DM_WRITE"):
                        dm_write(dm_y)

            # -- end of instruction ---------------------------------------------------------
            with m.State("NEXT"):
                # Counted here, not where the instruction ends (one enable, not the OR of every
                # state's end); FETCH compares it with the limit.
                m.d.comb += ex_inc.eq(1)
                with m.If(is_op["HALT"]):
                    m.next = "DONE"
                with m.Else():
                    m.d.sync += pc.eq(Mux(jump, src, pc + 8))
                    m.next = "FETCH"
            with m.State("DONE"):
                m.d.sync += [running.eq(0), sidx.eq(0), resp_valid.eq(1), resp_long.eq(1)]
                m.next = "RESP"
            # The reply's bytes come from two flip-flops (valid) and eight (the byte), set a
            # byte ahead: no state decode or byte multiplexer in front of the dispatcher's OR.
            # Both are 0 outside SEND.
            pc_bytes = Cat(Const(0, 1), pc, Const(0, 14))
            with m.State("RESP"):
                with m.If(c.resp.ready):
                    m.d.sync += [resp_valid.eq(0), resp_long.eq(0)]
                with m.If(~resp_valid):
                    m.d.sync += [send_valid.eq(1), send_byte.eq(pc_bytes[:8])]
                    m.next = "SEND"
            with m.State("SEND"):
                # The pc's four bytes, then the counters' twelve through executed's low byte
                # (a shift with each of them taken: the next is then executed's second byte).
                sidx_inc = Signal(4)
                m.d.comb += sidx_inc.eq(sidx + 1)
                with m.If(c.data.ready & send_valid):
                    m.d.sync += [sidx.eq(sidx_inc), send_hi.eq(sidx_inc[2:] != 0)]
                    m.d.comb += shift.eq(send_hi)
                    m.d.sync += send_byte.eq(
                        Mux(send_hi, executed[8:16],
                            Mux(sidx[:2] == 3, executed[:8],
                                Cat(pc_bytes[8:], Const(0, 8)).word_select(sidx[:2], 8))))
                    with m.If(sidx == 15):
                        m.d.sync += [send_valid.eq(0), send_byte.eq(0)]
                with m.If(~send_valid):
                    m.d.sync += idle.eq(1)
                    m.next = "IDLE"
        def next_sample(*more):
            # A MATVEC's next sample: its tiles again, from the first tile's weights and bias,
            # its x one stride further (the write register's count covers every sample).
            # (With the bias memory the later samples read no bias words.)
            m.d.sync += [tiles_left.eq(w[5]), tl_more.eq(1), src.eq(src + xs),
                         w_ptr.eq(w[3]), sm_first.eq(0), *more]
            if not self._bias_fifo:
                m.d.sync += bias_ptr.eq(bias_base)

        if self._bfp and self._x_buffer:
            # MATVEC's phases with the x buffer: the first tile's x from the reader (into the
            # buffer), the later tiles' from the buffer, each as soon as the previous tile's x
            # is in; the reader feeds each tile's bias after the first tile's x.
            with m.If(st_mv & x_first):
                m.d.comb += [rp_src.eq(1), b_inc.eq(bias_en)]
                m.d.sync += [rd_more.eq(1), tiles_left.eq(tiles_left - 1),
                             tl_more.eq(tiles_left != 1), mv_x.eq(1), x_first.eq(0)]
            with m.If(st_mv & ~x_first & ~mv_x & ~xb_x & tl_more):
                m.d.comb += [xb_start.eq(1), b_inc.eq(bias_en)]
                m.d.sync += [tiles_left.eq(tiles_left - 1), tl_more.eq(tiles_left != 1)]
            with m.If(mv_x):
                with m.If(fill_x):
                    m.d.sync += w_ptr.eq(w_ptr + 1)
                with m.If(rd_last & (~rd_valid | col.i_x.ready)):
                    m.d.sync += mv_x.eq(0)
            with m.If(xb_fill):
                m.d.sync += w_ptr.eq(w_ptr + 1)
            b_start = st_mv & ~x_first & ~mv_x & ~mv_b & (b_pend != 0)
            if self._pipelined:
                # A bias phase starts a cycle after its condition, from a register (``b_go``,
                # never twice in a row: ``mv_b`` is set by then), so that the count's compare
                # and the phase flags do not reach the reader's pointer and count, across the
                # sequencer, in the same cycle. Nothing else in the cycle between can start a
                # reader phase or end the MATVEC: both wait for ``b_pend == 0``.
                b_go = Signal()
                m.d.sync += b_go.eq(b_start & ~b_go)
                b_start = b_go & st_mv
            with m.If(b_start):
                m.d.comb += [rp_bias.eq(1), b_dec.eq(1)]
                m.d.sync += [rd_more.eq(1), mv_b.eq(1)]
            with m.If(mv_b & rd_last & (~rd_valid | col.i_bias.ready)):
                m.d.sync += [bias_ptr.eq(rd_inc), mv_b.eq(0)]
            # The next sample, once every tile of this one has taken its x from the buffer and
            # its bias (the buffer then takes the next sample's x).
            with m.If(st_mv & ~x_first & ~mv_x & ~xb_x & ~mv_b & ~tl_more & (b_pend == 0)
                      & sm_more):
                next_sample(x_first.eq(1), xb_widx.eq(0))
        elif self._bfp:
            # MATVEC's reader phases, on the flags (after the FSM, as the reader).
            with m.If(st_mv & ~mv_x & ~mv_b & tl_more):
                # The next tile: x and its weight columns.
                m.d.comb += rp_src.eq(1)
                m.d.sync += [rd_more.eq(1), tiles_left.eq(tiles_left - 1),
                             tl_more.eq(tiles_left != 1), mv_x.eq(1)]
            with m.If(mv_x):
                with m.If(fill_x):
                    m.d.sync += w_ptr.eq(w_ptr + 1)
                with m.If(rd_last & (~rd_valid | col.i_x.ready)):
                    m.d.sync += mv_x.eq(0)
                    # (With the bias memory, the later samples' bias is there already.)
                    with m.If(bias_en & (sm_first if self._bias_fifo else 1)):
                        m.d.comb += rp_bias.eq(1)
                        m.d.sync += [rd_more.eq(1), mv_b.eq(1)]
            with m.If(mv_b & rd_last & (~rd_valid | b_ready)):
                # The next tile's bias follows this one's: one past the last read (rd_ptr),
                # which the reader's increment already forms.
                m.d.sync += [bias_ptr.eq(rd_inc), mv_b.eq(0)]
            # The next sample, once this one's last tile has its x and bias.
            with m.If(st_mv & ~mv_x & ~mv_b & ~tl_more & sm_more):
                next_sample()
        reader()
        with m.If(wr_load | wp_step):
            m.d.sync += wr_ptr.eq(load_or_step(wr_ptr, 1, wr_load, dst))
        with m.If(wr_load | wl_step):
            m.d.sync += wr_left.eq(load_or_step(wr_left, -1, wr_load, len_dst))
        # rd_ptr's next value as one AND-OR of its sources (the selects never meet), not a
        # chain of multiplexers in statement order.
        # rd_left's: K or the source length with rd_ptr's load from src (RANGE, a tile, a row),
        # N with its load from bias_ptr, the count down (an issue, a GRAND sample): one
        # multiplexer, not one per statement.
        with m.If(rl_dec):
            m.d.sync += rd_left.eq(rd_left - 1)
        with m.Elif(rp_bias):
            m.d.sync += rd_left.eq(N)
        with m.Elif(rp_src):
            m.d.sync += rd_left.eq(len_src)
        rp_sel = Cat(rp_pc, rp_src, rp_bias, rp_inc)
        rp_load = Mux(rp_pc, pc, 0) | Mux(rp_src, src, 0) | Mux(rp_bias, bias_ptr, 0)
        rp_next = rp_load | Mux(rp_inc, rd_inc, 0)
        with m.If(rp_sel.any()):
            m.d.sync += rd_ptr.eq(rp_next)
        if self._pipelined:
            # The step's adder on rd_inc's own flip-flops: an issue (rp_inc) only picks it.
            with m.If(rp_pc | rp_src | rp_bias):
                m.d.sync += rd_inc.eq(rp_load[:16] + 1)
            with m.Elif(rp_inc):
                m.d.sync += rd_inc.eq(rd_inc + 1)
        with m.If(rp_pc | rp_src | rp_bias):
            m.d.sync += fresh.eq(1)
        if self._pipelined:
            # rd_next = Mux(fresh, rd_ptr, rd_inc) a cycle ahead: a load's value, or one
            # further where a read steps rd_ptr (rp_inc) or reads at a fresh one (an issue or a
            # fetch, which clear ``fresh``).
            with m.If(rp_pc | rp_src | rp_bias):
                m.d.sync += rd_na.eq(rp_load)
            with m.Elif(rp_inc | fresh & (issue | fetching)):
                m.d.sync += rd_na.eq(rd_na + 1)
        return m
