"""The accelerator's layer programs: instruction set, encoding and assembler (DESIGN §3.6).

Programs live in the scratchpad (so the instruction memory is a region of it that the host
writes with ``MEM_WRITE``) and run with the host command ``RUN``. The sequencer executes one
instruction at a time; an engine instruction finishes (its last result written) before the next
one is fetched, so the order of every random draw and every memory write is defined by the
program alone.

Encoding
--------
An instruction is 16 bytes: eight little-endian u16 words ``w0..w7`` at an even byte address.
``w0 = op | flags << 8``. Scratchpad addresses in instructions are **word** addresses (byte
address / 2). Unused words must be 0 (the sequencer ignores them).

Machine state: ``pc`` (word address of the instruction), ``cnt`` (loop counter, u16),
``ofs_a``, ``ofs_b`` (address offsets, u16). ``RUN`` sets ``pc`` to its start address and
clears ``cnt``, ``ofs_a``, ``ofs_b``. Flag bits of data instructions: :data:`F_OFS_SRC` adds
``ofs_a`` to the source word address ``w1``, :data:`F_OFS_DST` adds ``ofs_b`` to the
destination ``w2`` (modulo 2^16), :data:`F_BIAS` enables the bias operand, :data:`F_LUT`
(MATVEC) passes the results through a LUT table. An instruction ignores the flags it does not
use.

==== ======== ============================================================================
op   name     operands and meaning
==== ======== ============================================================================
0x00 NOP      —
0x01 HALT     — ends the program; ``RUN`` replies OK.
0x02 CONFIG   w1 register index, w2/w3 value (lo/hi): like ``REG_WRITE`` (read-only index
              or unknown index: error ``BAD_ADDRESS``).
0x03 JUMP     w1 target word address.
0x04 LOOP     w1 count: ``cnt = count``.
0x05 DJNZ     w1 target: if ``cnt > 1``: ``cnt -= 1`` and jump; else ``cnt = 0``, fall through
              (``LOOP n`` … ``DJNZ`` runs the body ``max(n, 1)`` times).
0x06 SETOFS   w1 ``ofs_a``, w2 ``ofs_b``.
0x07 ADDOFS   w1 added to ``ofs_a``, w2 added to ``ofs_b`` (mod 2^16).
0x10 MOVE     w1 src, w2 dst, w3 count: copy ``count`` words (ascending; overlapping ranges
              copy as if word by word).
0x11 LOADW    w1 src, w2 entry, w3 count: weight memory load. Reads ``count · lanes`` words;
              word ``j · lanes + l`` goes to bank ``l``, entry ``entry + j``.
0x20 QUANT    w1 src, w2 dst, w3 count: quantise ``count`` f16 words with the quantiser
              (``QUANT_FORMAT``, ``ROUNDING``, ``MANT_WIDTH``, ``QUANT_RULE``, ``QUANT_SHIFT``,
              code book registers) and write one element word per input: BFP ``m | e << 8``
              (``e`` the block's exponent; ``count`` a multiple of the block size ``B``), int8
              ``q`` (high byte 0), discrete code (high byte 0).
0x21 MATVEC   w1 x, w2 dst, w3 weight entry, w4 blocks ``nb``, w5 tiles ``T``, w6 bias,
              w7 more samples ``S − 1``: ``S · T`` BFP column products of ``K = nb · B``
              beats. Tile ``t`` reads weight entries ``entry + t·K + j`` (``j < K``; bank
              ``l`` is row ``t·N + l``; entry word ``m | e << 8``, the exponent of the block
              is taken from its last beat), the ``K`` element words of its sample and, with
              ``F_BIAS``, the ``N`` element words at ``bias + t·N``; it writes ``N`` element
              words ``m | e4 << 8`` at ``dst + (s·T + t)·N``. Sample ``s`` reads its input
              at ``x + s·X``, ``X = ⌈K / N⌉ · N`` (the stride of a previous MATVEC's
              outputs), with the same weights and bias: the instruction equals ``S``
              one-sample MATVECs one after another (``x``, ``dst`` stepping), in their
              order of random draws and predicted-selector history, but the device
              overlaps each sample's products with the previous one's output
              (:meth:`Instruction.matvec` ``samples``). The ranges are the whole
              instruction's: input ``(S − 1)·X + K`` words, destination ``S·T·N``.
              Registers: ``MANT_WIDTH``, ``ROUNDING``, ``EXP_SELECT`` (0 max, 1 fixed,
              2 predicted with a history per RUN, 3 fixed), ``FIXED_EXP``. With
              :data:`F_LUT` each result is written as LUT writes it, ``table[m] |
              LUT_EXP << 8`` with the byte table ``LUT_SELECT`` (``MATVEC`` then ``LUT dst,
              dst, T·N`` in one instruction; it needs the LUT engine, else ``BAD_OPCODE``).
0x22 LUT      w1 src, w2 dst, w3 count: ``dst[i] = table[src[i] & 0xFF] | LUT_EXP << 8`` with
              the byte table ``LUT_SELECT``.
0x23 DMATVEC  w1 x, w2 dst, w3 weight entry, w4 columns ``K``, w5 rows ``R``, w6 bias:
              discrete-weight product (:func:`lowbit.sim.network.discrete_dense` without table).
              Row ``r`` reads ``ceil(K / lanes)`` entries from ``entry + r·ceil(K/lanes)``;
              bank ``l`` of the ``b``-th holds the code of column ``b·lanes + l`` (low bits;
              columns past ``K`` are ignored). ``x`` are ``K`` element words (mantissa byte
              used); with ``F_BIAS`` the bias is ``R`` signed 16-bit words at ``bias``. Writes
              ``R`` words ``y | FIXED_EXP << 8``. Registers: ``CODE_WIDTH``, ``CODE_BOOK0/1``,
              ``DISC_SHIFT``.
0x24 GRAND    w2 dst, w3 count: ``count`` f16 grand samples (``GRAND_MODE``), lane order as
              ``GRAND_SAMPLES``.
==== ======== ============================================================================

Overlapping ranges: MOVE copies as if word by word (above); LUT and QUANT may work in place
(``dst == src``). Any other overlap of an engine instruction's destination with one of its
sources has unspecified results (the engines read ahead of their writes); the reference
:class:`Machine` reads all sources of an instruction before writing.

Errors stop the program at the failing instruction, which has no effect: unknown op
(``BAD_OPCODE``), an engine the build lacks (``BAD_OPCODE``), any word range outside the
scratchpad or weight entries outside the weight memory (``BAD_ADDRESS``), a zero or too large
count / block count / tile count, or a QUANT BFP count not a multiple of ``B``
(``BAD_LENGTH``). ``RUN``'s instruction limit ends a runaway program with ``LIMIT``.

Random numbers for stochastic rounding come from the rounding PRNG, one xoroshiro128aox lane
(:class:`lowbit.sim.prng.Xoroshiro128aox`) loaded from ``PRNG_SEED0..3`` when ``PRNG_SEED3`` is
written (``s0 = SEED1:SEED0``, ``s1 = SEED3:SEED2``). Each random number is the low ``R`` bits
of one 64-bit output: MATVEC draws ``N`` per tile in lane order as the tile is output, QUANT one
per element in order.
"""

import dataclasses
import operator
import struct

import numpy as np

from .protocol import _REGISTER_BY_INDEX, REGISTER_BY_NAME, REGISTERS, Status

__all__ = ["Op", "F_OFS_SRC", "F_OFS_DST", "F_BIAS", "F_LUT", "INSTRUCTION_BYTES", "Instruction",
           "assemble", "disassemble", "ENGINES", "Design", "Fault", "RunResult", "Machine",
           "config", "hoist_configs", "InputQuant", "NetworkLayout", "load_weights_program",
           "matvec_stride", "CONTROL_OPS"]

INSTRUCTION_BYTES = 16

F_OFS_SRC = 0x01
F_OFS_DST = 0x02
F_BIAS = 0x04
#: MATVEC: the results go through the LUT table ``LUT_SELECT`` (the activation of a layer).
F_LUT = 0x08


class Op:
    """Instruction opcodes (the ``op`` byte of ``w0``)."""
    NOP = 0x00
    HALT = 0x01
    CONFIG = 0x02
    JUMP = 0x03
    LOOP = 0x04
    DJNZ = 0x05
    SETOFS = 0x06
    ADDOFS = 0x07
    MOVE = 0x10
    LOADW = 0x11
    QUANT = 0x20
    MATVEC = 0x21
    LUT = 0x22
    DMATVEC = 0x23
    GRAND = 0x24

    NAMES = {0x00: "NOP", 0x01: "HALT", 0x02: "CONFIG", 0x03: "JUMP", 0x04: "LOOP",
             0x05: "DJNZ", 0x06: "SETOFS", 0x07: "ADDOFS", 0x10: "MOVE", 0x11: "LOADW",
             0x20: "QUANT", 0x21: "MATVEC", 0x22: "LUT", 0x23: "DMATVEC", 0x24: "GRAND"}


@dataclasses.dataclass(frozen=True)
class Instruction:
    """One instruction: ``op``, ``flags`` and the operand words ``w1..w7``."""
    op: int
    flags: int = 0
    words: tuple = (0, 0, 0, 0, 0, 0, 0)

    def __post_init__(self):
        words = tuple(self.words) + (0,) * (7 - len(self.words))
        if len(words) != 7:
            raise ValueError(f"An instruction has 7 operand words, not {len(self.words)}")
        for name, v, hi in [("Opcode", self.op, 0xFF), ("Flags", self.flags, 0xFF)] + \
                [(f"Operand word {k + 1}", w, 0xFFFF) for k, w in enumerate(words)]:
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"{name} must be an integer, not {v!r}")
            if not 0 <= v <= hi:
                raise ValueError(f"{name} must be between 0 and {hi}, not {v}")
        object.__setattr__(self, "words", words)

    def encode(self):
        """The 16 instruction bytes."""
        return struct.pack("<8H", self.op | self.flags << 8, *self.words)

    @classmethod
    def decode(cls, data):
        w = struct.unpack("<8H", bytes(data))
        return cls(w[0] & 0xFF, w[0] >> 8, w[1:])

    def __str__(self):
        name = Op.NAMES.get(self.op, f"op{self.op:#04x}")
        return f"{name} flags={self.flags:#x} " + " ".join(str(w) for w in self.words)

    # Constructors, one per op ------------------------------------------------------------
    @classmethod
    def nop(cls):
        return cls(Op.NOP)

    @classmethod
    def halt(cls):
        return cls(Op.HALT)

    @classmethod
    def config(cls, index, value):
        value &= 0xFFFFFFFF
        return cls(Op.CONFIG, 0, (index, value & 0xFFFF, value >> 16))

    @classmethod
    def jump(cls, target):
        return cls(Op.JUMP, 0, (target,))

    @classmethod
    def loop(cls, count):
        return cls(Op.LOOP, 0, (count,))

    @classmethod
    def djnz(cls, target):
        return cls(Op.DJNZ, 0, (target,))

    @classmethod
    def setofs(cls, a, b):
        return cls(Op.SETOFS, 0, (a & 0xFFFF, b & 0xFFFF))

    @classmethod
    def addofs(cls, da, db):
        return cls(Op.ADDOFS, 0, (da & 0xFFFF, db & 0xFFFF))

    @classmethod
    def move(cls, src, dst, count, flags=0):
        return cls(Op.MOVE, flags, (src, dst, count))

    @classmethod
    def loadw(cls, src, entry, count, flags=0):
        return cls(Op.LOADW, flags, (src, entry, count))

    @classmethod
    def quant(cls, src, dst, count, flags=0):
        return cls(Op.QUANT, flags, (src, dst, count))

    @classmethod
    def matvec(cls, x, dst, entry, blocks, tiles, bias=None, flags=0, samples=1):
        """MATVEC; ``samples`` (1..65536) products of the same weights, one per input vector
        (w7 = ``samples - 1``)."""
        flags |= F_BIAS if bias is not None else 0
        if not isinstance(samples, int) or isinstance(samples, bool):
            raise TypeError(f"MATVEC sample count must be an integer, not {samples!r}")
        if not 1 <= samples <= 0x10000:
            raise ValueError(f"MATVEC sample count must be between 1 and 65536, not {samples}")
        return cls(Op.MATVEC, flags, (x, dst, entry, blocks, tiles, bias or 0, samples - 1))

    @classmethod
    def lut(cls, src, dst, count, flags=0):
        return cls(Op.LUT, flags, (src, dst, count))

    @classmethod
    def dmatvec(cls, x, dst, entry, cols, rows, bias=None, flags=0):
        flags |= F_BIAS if bias is not None else 0
        return cls(Op.DMATVEC, flags, (x, dst, entry, cols, rows, bias or 0))

    @classmethod
    def grand(cls, dst, count, flags=0):
        return cls(Op.GRAND, flags, (0, dst, count))


def assemble(instructions):
    """Bytes of a program (a sequence of :class:`Instruction`)."""
    out = bytearray()
    for ins in instructions:
        if not isinstance(ins, Instruction):
            raise TypeError(f"Program items must be Instructions, not {ins!r}")
        out += ins.encode()
    return bytes(out)


def disassemble(data):
    """:class:`Instruction` list of program bytes (length a multiple of 16)."""
    data = bytes(data)
    if len(data) % INSTRUCTION_BYTES:
        raise ValueError(f"Program length must be a multiple of {INSTRUCTION_BYTES} bytes, "
                         f"not {len(data)}")
    return [Instruction.decode(data[k:k + INSTRUCTION_BYTES])
            for k in range(0, len(data), INSTRUCTION_BYTES)]


# == The machine: a reference interpreter of the instruction set ================================

#: Engines an instruction needs (names of :data:`lowbit.sim.link.ENGINE_BITS`).
_OP_ENGINE = {Op.QUANT: "quantiser", Op.MATVEC: "bfp", Op.LUT: "lut", Op.DMATVEC: "discrete",
              Op.GRAND: "grand"}
#: Every engine an accelerator may have besides the sequencer.
ENGINES = ("grand", "bfp", "discrete", "quantiser", "lut")
#: The control and data-movement instructions a sequencer without ``seq_control`` lacks
#: (:attr:`Design.seq_control`).
CONTROL_OPS = (Op.JUMP, Op.LOOP, Op.DJNZ, Op.SETOFS, Op.ADDOFS, Op.MOVE, Op.LUT)


def _check_param(name, value, lo, hi):
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer between {lo} and {hi}, not {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer between {lo} and {hi}, not {value!r}")
    return int(value)


@dataclasses.dataclass(frozen=True)
class Design:
    """The generator parameters of an accelerator that its programs depend on.

    The names are those of :class:`lowbit.hw.top.Accelerator` (and of
    :class:`lowbit.sim.link.DeviceModel`).

    Parameters
    ----------
    matrix_lanes : int
        ``N``: weight banks, BFP column lanes and discrete terms per beat (4..64).
    block : int
        ``B``: BFP block size (2..64).
    max_blocks : int
        Largest MATVEC block count ``nb`` (1..256).
    weight_depth : int
        Entries of each weight bank (1..65536).
    scratch_bytes : int
        Scratchpad bytes (even, 32..131072).
    lanes : int
        Grand unit lanes (1..32).
    lut_tables : int
        Byte tables of the LUT engine (0..64; 0: no LUT engine).
    engines : frozenset of str
        Engines present, from :data:`ENGINES` (``"lut"`` is implied by ``lut_tables``).
    frac_bits : int
        Fraction guard bits of the BFP column's accumulator (0..8).
    rand_bits : int
        ``R``: random bits per stochastic rounding (1..16).
    disc_acc_width : int
        Accumulator width of the discrete unit (8..32).
    grand_modes : tuple of str, optional
        Modes built into the grand unit (default all of :data:`lowbit.sim.grand.MODES`); a mode left
        out acts as "normal".
    bfp_stochastic, bfp_predictor : bool
        The BFP column rounds stochastically / has the predicted exponent selector (default
        both). Without one, a MATVEC that needs it (``ROUNDING`` 2 / ``EXP_SELECT`` 2) fails
        with ``BAD_OPCODE``, as a missing engine does.
    bfp_mant_width : bool
        The BFP column's output mantissa width comes from ``MANT_WIDTH`` (default). Without it
        the width is 8, and a MATVEC with ``MANT_WIDTH`` below 8 (as decoded: clamped to 2..8)
        fails with ``BAD_OPCODE``.
    matvec_samples : bool
        MATVEC reads w7, its samples after the first (default; design version 0.3 and later).
        Without it (gateware of design 0.2) w7 is ignored: every MATVEC is one sample, and
        :class:`NetworkLayout` runs a layer sample by sample.
    seq_control : bool
        The sequencer has the control and data-movement instructions :data:`CONTROL_OPS`
        (default). Without them (the iCEBreaker's profile) they fail with ``BAD_OPCODE``, the
        ``F_OFS`` flags add nothing (the offsets stay 0), and programs are straight-line:
        :class:`NetworkLayout` runs each layer as one MATVEC of every sample.
    """
    matrix_lanes: int = 8
    block: int = 16
    max_blocks: int = 16
    weight_depth: int = 512
    scratch_bytes: int = 4096
    lanes: int = 2
    lut_tables: int = 4
    engines: frozenset = frozenset(ENGINES)
    frac_bits: int = 3
    rand_bits: int = 8
    disc_acc_width: int = 16
    grand_modes: tuple = None
    bfp_stochastic: bool = True
    bfp_predictor: bool = True
    bfp_mant_width: bool = True
    matvec_samples: bool = True
    seq_control: bool = True

    def __post_init__(self):
        from .grand import MODES
        modes = MODES if self.grand_modes is None else self.grand_modes
        if isinstance(modes, str) or any(m not in MODES for m in modes):
            raise ValueError(f"Grand modes must be names of {', '.join(MODES)}, not {modes!r}")
        object.__setattr__(self, "grand_modes", tuple(m for m in MODES if m in set(modes)))
        _check_param("Matrix lane count", self.matrix_lanes, 4, 64)
        _check_param("Block size", self.block, 2, 64)
        _check_param("Maximum block count", self.max_blocks, 1, 256)
        _check_param("Weight depth", self.weight_depth, 1, 65536)
        _check_param("Scratchpad size", self.scratch_bytes, 32, 131072)
        if self.scratch_bytes % 2:
            raise ValueError(f"Scratchpad size must be even, not {self.scratch_bytes}")
        _check_param("Lane count", self.lanes, 1, 32)
        _check_param("LUT table count", self.lut_tables, 0, 64)
        _check_param("Fraction guard bit count", self.frac_bits, 0, 8)
        _check_param("Random bit count", self.rand_bits, 1, 16)
        _check_param("Discrete accumulator width", self.disc_acc_width, 8, 32)
        for name in ("bfp_stochastic", "bfp_predictor", "bfp_mant_width", "matvec_samples",
                     "seq_control"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise TypeError(f"{name} must be a bool, not {getattr(self, name)!r}")
        if isinstance(self.engines, str) or not all(isinstance(e, str) for e in self.engines):
            raise TypeError(f"Engines must be a collection of names, not {self.engines!r}")
        engines = frozenset(self.engines) - {"lut", "sequencer"}
        bad = engines - set(ENGINES)
        if bad:
            raise ValueError(f"Unknown engines {sorted(bad)}; known: {', '.join(ENGINES)}")
        if self.lut_tables:
            engines |= {"lut"}
        object.__setattr__(self, "engines", engines)

    def has(self, engine):
        """True if the design has ``engine`` (a name of :data:`ENGINES`)."""
        return engine in self.engines

    @property
    def words(self):
        """Scratchpad size in 16-bit words."""
        return self.scratch_bytes // 2

    def column(self):
        """The :class:`lowbit.sim.bfp_column.ColumnModel` of the design's BFP column."""
        from .bfp_column import ColumnModel
        return ColumnModel(lanes=self.matrix_lanes, block=self.block, width=8, exp_bits=8,
                           max_blocks=self.max_blocks, frac_bits=self.frac_bits,
                           rand_bits=self.rand_bits, predictor=self.bfp_predictor)


class Fault(Exception):
    """An instruction failed with ``status`` (a :class:`lowbit.sim.link.Status`); it had no
    effect."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


#: ``busy`` of a RUN reply from a device that does not count busy cycles.
NOT_COUNTED = 0xFFFFFFFF


@dataclasses.dataclass(frozen=True)
class RunResult:
    """Outcome of :meth:`Machine.run`: status, byte address ``pc``, instructions ``executed``,
    ``cycles`` (0 in the model: it cannot predict the hardware's count), ``busy`` (the matrix
    engine's busy cycles: the beats it accepted, one input element with its ``N`` weights each;
    a MATVEC of ``T`` tiles over ``K`` inputs is ``T · K`` beats, a DMATVEC of ``R`` rows over
    ``K`` inputs ``R · ceil(K / N)``; the model counts them exactly, as the hardware does) and,
    for an error, a ``message`` saying why. ``busy / cycles`` is the matrix engine's
    utilisation over the RUN."""
    status: int
    pc: int
    executed: int
    cycles: int = 0
    busy: int = 0
    message: str = ""

    def payload(self):
        """The 16-byte RUN reply payload ``pc u32, executed u32, cycles u32, busy u32``."""
        return struct.pack("<4I", self.pc & 0xFFFFFFFF, self.executed & 0xFFFFFFFF,
                           self.cycles & 0xFFFFFFFF, self.busy & 0xFFFFFFFF)

    @classmethod
    def from_payload(cls, status, payload):
        pc, executed, cycles, busy = struct.unpack("<4I", bytes(payload))
        return cls(status, pc, executed, cycles, busy)


def matvec_stride(blocks, design):
    """Words from one MATVEC sample's input to the next one's: ``K = blocks · B`` rounded up
    to a multiple of ``N`` (the stride of a MATVEC's outputs, ``T · N`` per sample)."""
    n = design.matrix_lanes
    return -(-blocks * design.block // n) * n


def _s8(v):
    v &= 0xFF
    return v - 256 if v > 127 else v


class Machine:
    """Reference interpreter of the instruction set (module docstring), built on the golden
    block models: :meth:`lowbit.sim.bfp_column.ColumnModel.matvec` (MATVEC),
    :func:`lowbit.sim.network.
    discrete_dense` (DMATVEC), :func:`lowbit.sim.quantiser.quantise_bfp` / ``quantise_int8`` /
    ``quantise_discrete`` (QUANT), :func:`lowbit.sim.lut.lookup` (LUT), :func:`lowbit.sim.grand.
    results_from_words` (GRAND) and :class:`lowbit.sim.prng.Xoroshiro128aox` (random numbers).

    State: :attr:`scratch` (bytearray, shared with a :class:`lowbit.sim.link.DeviceModel`),
    :attr:`banks` (``N`` weight banks, uint16 arrays of ``weight_depth``), :attr:`regs`
    (register index -> value), :attr:`luts` (byte tables), the grand unit (:attr:`grand_prng`,
    :attr:`grand_mode`, :attr:`grand_pending`) and the rounding PRNG (:attr:`rng`).

    Register values the ISA leaves open are decoded as follows (the hardware does the same):
    ``ROUNDING`` 3 is "nearest"; ``EXP_SELECT`` 0 is "max", 2 "predicted", 1 and 3 "fixed";
    the predicted selector's history (:class:`lowbit.sim.bfp_column.ExponentPredictor`, defaults
    ``k = 3``, margin 2, ``stat_shift = 4``) carries across the MATVEC tiles of one RUN and is
    cleared when a RUN starts; ``MANT_WIDTH`` is clamped to
    2..8; ``QUANT_FORMAT`` 3 and ``CODE_WIDTH`` 0 make QUANT / DMATVEC fail with
    ``BAD_LENGTH``; QUANT to discrete codes rounds stochastically when ``ROUNDING`` is 2, else
    to nearest. Random numbers are drawn only when the rounding is stochastic. MATVEC takes the
    exponent of an input block, like that of a weight block, from its last beat. Within one
    instruction the checks run in this order: engine present and, for MATVEC, its rounding and
    exponent selector built and its mantissa width (:class:`Design` ``bfp_stochastic`` /
    ``bfp_predictor`` / ``bfp_mant_width``) (``BAD_OPCODE``), counts
    (``BAD_LENGTH``), register-selected resources such as ``LUT_SELECT`` and ranges
    (``BAD_ADDRESS``).

    Parameters
    ----------
    design : Design
    scratch : bytearray, optional
        The scratchpad (``design.scratch_bytes`` long); default a zeroed one.
    regs : dict, optional
        The register file (shared with the link model); default the reset values.
    luts : list of bytearray, optional
        The LUT engine's tables; default zeroed ones.
    busy_count : bool
        The device counts the matrix engine's busy cycles (RUN results' ``busy``); without
        it they carry :data:`NOT_COUNTED`.
    """

    def __init__(self, design=None, *, scratch=None, regs=None, luts=None, busy_count=True):
        from .prng import Xoroshiro128aox
        if design is None:
            design = Design()
        if not isinstance(design, Design):
            raise TypeError(f"Design must be a lowbit.sim.program.Design, not {design!r}")
        self.design = design
        if scratch is None:
            scratch = bytearray(design.scratch_bytes)
        if not isinstance(scratch, bytearray) or len(scratch) != design.scratch_bytes:
            raise ValueError(f"Scratchpad must be a bytearray of {design.scratch_bytes} bytes")
        self.scratch = scratch
        self.regs = regs if regs is not None else {r.index: r.reset for r in REGISTERS}
        self.luts = luts if luts is not None else \
            [bytearray(256) for _ in range(design.lut_tables)]
        self.banks = np.zeros((design.matrix_lanes, design.weight_depth), dtype=np.uint16)
        self.grand_prng = Xoroshiro128aox(0, design.lanes)
        self.grand_mode = "normal"
        self.grand_pending = []
        #: Busy cycles (accepted beats) of the matrix engine in the current RUN, and whether the
        #: device counts them (RUN replies from one that does not carry :data:`NOT_COUNTED`; it
        #: is a reply field, not a design parameter programs depend on).
        self.busy = 0
        self.busy_count = bool(busy_count)
        #: The rounding PRNG (one lane; reset state ``seed_lanes(0, 1)``).
        self.rng = Xoroshiro128aox(0, 1)
        self._column = design.column() if design.has("bfp") else None

    # -- state helpers ------------------------------------------------------------------------
    @property
    def _words(self):
        return np.frombuffer(self.scratch, dtype="<u2")

    def read_words(self, addr, count):
        """``count`` scratchpad words from word address ``addr`` (a copy, int64)."""
        return self._words[addr:addr + count].astype(np.int64)

    def write_words(self, addr, values):
        """Write words (taken modulo 2^16) at word address ``addr``."""
        values = np.asarray(values, dtype=np.int64) & 0xFFFF
        self._words[addr:addr + len(values)] = values.astype(np.uint16)

    def reg(self, name):
        """Value of register ``name``."""
        return self.regs[REGISTER_BY_NAME[name].index]

    def write_reg(self, index, value):
        """Write a register as ``REG_WRITE`` / CONFIG do; returns the status (a
        :class:`lowbit.sim.link.Status`): ``BAD_ADDRESS`` for an unknown index, ``READ_ONLY`` for a
        read-only one. Writing ``PRNG_SEED3`` loads the rounding PRNG."""
        from .prng import load_state
        r = _REGISTER_BY_INDEX.get(index)
        if r is None:
            return Status.BAD_ADDRESS
        if r.access != "rw":
            return Status.READ_ONLY
        self.regs[r.index] = int(value) & ((1 << r.width) - 1)
        if r.name == "PRNG_SEED3":
            s0 = self.reg("PRNG_SEED0") | self.reg("PRNG_SEED1") << 32
            s1 = self.reg("PRNG_SEED2") | self.reg("PRNG_SEED3") << 32
            self.rng.state = load_state([[s0, s1]])
        return Status.OK

    def draw(self, n):
        """The next ``n`` random numbers of the rounding PRNG (low ``R`` bits), int64."""
        words = self.rng.take(n)[:, 0]
        return (words & np.uint64((1 << self.design.rand_bits) - 1)).astype(np.int64)

    def grand_take(self, count):
        """The next ``count`` grand results as ``(f16, f32)`` int pairs, lane order. ``count`` is
        any integer (a NumPy one too: its arithmetic would wrap in its own width)."""
        from .grand import WORDS_PER_RESULT, results_from_words
        count = operator.index(count)
        while len(self.grand_pending) < count:
            need = -(-(count - len(self.grand_pending)) // self.design.lanes)
            words = self.grand_prng.take(need * WORDS_PER_RESULT[self.grand_mode])
            f16, f32 = results_from_words(words, self.grand_mode)
            for t in range(f16.shape[0]):
                self.grand_pending += [(int(f16[t, k]), int(f32[t, k]))
                                       for k in range(self.design.lanes)]
        taken, self.grand_pending = self.grand_pending[:count], self.grand_pending[count:]
        return taken

    def grand_seed(self, state):
        """Load the grand unit's generator (``(lanes, 2)`` words) and latch ``GRAND_MODE``."""
        from .grand import MODES
        from .prng import load_state
        self.grand_prng.state = load_state(state)
        code = self.reg("GRAND_MODE")
        mode = MODES[code] if code < len(MODES) else "normal"
        self.grand_mode = mode if mode in self.design.grand_modes else "normal"
        self.grand_pending = []

    def load_weights(self, entry, words):
        """Host-side shortcut of LOADW: ``words`` of shape ``(count, N)`` at ``entry``."""
        words = np.asarray(words, dtype=np.int64)
        self.banks[:, entry:entry + words.shape[0]] = (words.T & 0xFFFF).astype(np.uint16)

    # -- execution ----------------------------------------------------------------------------
    def run(self, start, limit):
        """Run from byte address ``start`` for at most ``limit`` instructions.

        The caller (``RUN``) has checked ``start`` and ``limit``. Returns a :class:`RunResult`
        with status OK (HALT), LIMIT or the failing instruction's error.
        """
        self.pc = start // 2
        self.cnt = self.ofs_a = self.ofs_b = 0
        self.busy = 0
        if self._column is not None:
            self._column.clear_history()
        executed = 0
        while executed < limit:
            if self.pc + INSTRUCTION_BYTES // 2 > self.design.words:
                return RunResult(Status.BAD_ADDRESS, 2 * self.pc, executed, busy=self._busy(),
                                 message="instruction fetch past the end of the scratchpad")
            ins = Instruction.decode(self.read_words(self.pc, 8).astype("<u2").tobytes())
            try:
                nxt = self.step(ins)
            except Fault as f:
                return RunResult(f.status, 2 * self.pc, executed, busy=self._busy(),
                                 message=str(f))
            executed += 1
            if nxt is None:
                return RunResult(Status.OK, 2 * self.pc, executed, busy=self._busy())
            self.pc = nxt
        return RunResult(Status.LIMIT, 2 * self.pc, executed, busy=self._busy())

    def _busy(self):
        return self.busy if self.busy_count else NOT_COUNTED

    def _range(self, what, addr, count):
        if addr + count > self.design.words:
            raise Fault(Status.BAD_ADDRESS, f"{what} words {addr}..{addr + count - 1} are "
                        f"outside the scratchpad (0..{self.design.words - 1})")
        return addr

    def _entries(self, entry, count):
        if entry + count > self.design.weight_depth:
            raise Fault(Status.BAD_ADDRESS, f"Weight entries {entry}..{entry + count - 1} are "
                        f"outside the weight memory (0..{self.design.weight_depth - 1})")

    @staticmethod
    def _count(what, value, hi=None):
        if value == 0 or (hi is not None and value > hi):
            limit = "" if hi is None else f" (at most {hi})"
            raise Fault(Status.BAD_LENGTH, f"{what} {value} is out of range{limit}")
        return value

    def step(self, ins):
        """Execute one instruction at :attr:`pc`; returns the next word pc, or None for HALT.

        Raises :class:`Fault` (nothing changed) for a failing instruction.
        """
        op, flags, w = ins.op, ins.flags, ins.words
        nxt = self.pc + INSTRUCTION_BYTES // 2
        if op not in Op.NAMES:
            raise Fault(Status.BAD_OPCODE, f"unknown opcode {op:#04x}")
        if op in CONTROL_OPS and not self.design.seq_control:
            lacks = ", ".join(Op.NAMES[o] for o in CONTROL_OPS)
            raise Fault(Status.BAD_OPCODE, f"{Op.NAMES[op]}: this design's sequencer runs "
                        f"straight-line programs (no {lacks})")
        engine = _OP_ENGINE.get(op)
        if engine is not None and not self.design.has(engine):
            raise Fault(Status.BAD_OPCODE, f"{Op.NAMES[op]} needs the {engine} engine, which "
                        f"this design lacks")
        if op == Op.MATVEC:
            self._matvec_features(flags)
        if op == Op.NOP:
            return nxt
        if op == Op.HALT:
            return None
        if op == Op.CONFIG:
            status = self.write_reg(w[0], w[1] | w[2] << 16)
            if status != Status.OK:
                raise Fault(Status.BAD_ADDRESS, f"CONFIG of register {w[0]:#x} "
                            f"({Status(status).name})")
            return nxt
        if op == Op.JUMP:
            return w[0]
        if op == Op.LOOP:
            self.cnt = w[0]
            return nxt
        if op == Op.DJNZ:
            if self.cnt > 1:
                self.cnt -= 1
                return w[0]
            self.cnt = 0
            return nxt
        if op == Op.SETOFS:
            self.ofs_a, self.ofs_b = w[0], w[1]
            return nxt
        if op == Op.ADDOFS:
            self.ofs_a = (self.ofs_a + w[0]) & 0xFFFF
            self.ofs_b = (self.ofs_b + w[1]) & 0xFFFF
            return nxt
        src = (w[0] + (self.ofs_a if flags & F_OFS_SRC else 0)) & 0xFFFF
        dst = (w[1] + (self.ofs_b if flags & F_OFS_DST else 0)) & 0xFFFF
        getattr(self, "_" + Op.NAMES[op].lower())(src, dst, w, flags)
        return nxt

    # -- data instructions ----------------------------------------------------------------------
    def _move(self, src, dst, w, flags):
        count = self._count("MOVE count", w[2])
        self._range("MOVE source", src, count)
        self._range("MOVE destination", dst, count)
        if dst <= src or dst >= src + count:
            self.write_words(dst, self.read_words(src, count))
        else:                            # overlapping upwards: the pattern repeats
            period = self.read_words(src, dst - src)
            self.write_words(dst, np.resize(period, count))

    def _loadw(self, src, entry, w, flags):
        n = self.design.matrix_lanes
        count = self._count("LOADW count", w[2])
        self._range("LOADW source", src, count * n)
        self._entries(entry, count)
        self.load_weights(entry, self.read_words(src, count * n).reshape(count, n))

    def _quant(self, src, dst, w, flags):
        from .quantiser import decode_f16, quantise_bfp, quantise_discrete, quantise_int8
        d = self.design
        count = self._count("QUANT count", w[2])
        fmt = self.reg("QUANT_FORMAT")
        if fmt == 0 and count % d.block:
            raise Fault(Status.BAD_LENGTH, f"QUANT count {count} is not a multiple of the "
                        f"block size {d.block}")
        if fmt == 3:
            raise Fault(Status.BAD_LENGTH, "QUANT_FORMAT 3 is not a format")
        if fmt == 2:
            book = self._book()
        self._range("QUANT source", src, count)
        self._range("QUANT destination", dst, count)
        rounding = self._rounding()
        x = decode_f16(self.read_words(src, count).astype(np.uint16))
        rand = self.draw(count) if rounding == "stochastic" else None
        if fmt == 0:
            width = self._width()
            rule = "ceil" if self.reg("QUANT_RULE") else "floor"
            m, e = quantise_bfp(x, block=d.block, width=width, exp_bits=8, rule=rule,
                                rounding=rounding, rand=rand, rand_bits=d.rand_bits)
            words = (m & 0xFF) | (np.repeat(e, d.block) & 0xFF) << 8
        elif fmt == 1:
            words = quantise_int8(x, shift=_s8(self.reg("QUANT_SHIFT")), rounding=rounding,
                                  rand=rand, rand_bits=d.rand_bits) & 0xFF
        else:
            mode = "stochastic" if rounding == "stochastic" else "nearest"
            words = quantise_discrete(x, book, mode=mode, rand=rand,
                                      rand_bits=d.rand_bits if rand is not None else None)
        self.write_words(dst, np.asarray(words, dtype=np.int64))

    def _matvec_features(self, flags=0):
        d = self.design
        if flags & F_LUT and not d.has("lut"):
            raise Fault(Status.BAD_OPCODE, "MATVEC with F_LUT needs the LUT engine, which this "
                        "design lacks")
        if not d.bfp_stochastic and self.reg("ROUNDING") == 2:
            raise Fault(Status.BAD_OPCODE, "MATVEC with stochastic rounding (ROUNDING 2) needs "
                        "the column's stochastic rounding, which this design lacks")
        if not d.bfp_predictor and self.reg("EXP_SELECT") == 2:
            raise Fault(Status.BAD_OPCODE, "MATVEC with the predicted exponent selector "
                        "(EXP_SELECT 2) needs the column's predictor, which this design lacks")
        if not d.bfp_mant_width and self._width() != 8:
            raise Fault(Status.BAD_OPCODE, f"MATVEC with MANT_WIDTH {self._width()} needs "
                        "the column's runtime mantissa width, which this design lacks (8 only)")

    def _matvec(self, x, dst, w, flags):
        from .network import pack_elements, unpack_elements
        d = self.design
        n, b = d.matrix_lanes, d.block
        entry, nb, tiles, bias = w[2], w[3], w[4], w[5]
        samples = w[6] + 1 if d.matvec_samples else 1
        self._count("MATVEC block count", nb, d.max_blocks)
        self._count("MATVEC tile count", tiles)
        k = nb * b
        stride = matvec_stride(nb, d)
        self._range("MATVEC input", x, (samples - 1) * stride + k)
        self._range("MATVEC destination", dst, samples * tiles * n)
        if flags & F_BIAS:
            self._range("MATVEC bias", bias, tiles * n)
        self._entries(entry, tiles * k)
        if flags & F_LUT:
            table = self._lut_table()
        rounding, width = self._rounding(), self._width()
        exp_mode = {0: "max", 2: "predicted"}.get(self.reg("EXP_SELECT"), "fixed")
        fixed_exp = _s8(self.reg("FIXED_EXP"))
        last = np.arange(b - 1, k, b)
        x_m, x_e = unpack_elements(np.stack([self.read_words(x + s * stride, k)
                                             for s in range(samples)]))
        # Row t·N + l of the matrix is bank l's row of tile t; the tiles run in order, each
        # drawing its N random numbers, as the column does.
        w_m, w_e = (a.reshape(n, tiles, k).transpose(1, 0, 2).reshape(tiles * n, k)
                    for a in unpack_elements(self.banks[:, entry:entry + tiles * k]))
        kw = {}
        if flags & F_BIAS:
            kw["bias_m"], kw["bias_e"] = unpack_elements(self.read_words(bias, tiles * n))
        rand = None
        if rounding == "stochastic":
            rand = np.stack([self.draw(n) for _ in range(samples * tiles)]).reshape(
                samples, tiles, n)
        m, e = self._column.matvec_batch(w_m, w_e[:, last], x_m, x_e[:, last],
                                         width=width, rounding=rounding, exp_mode=exp_mode,
                                         fixed_exp=fixed_exp, rand=rand, **kw)
        m, e = m.reshape(-1), e.reshape(-1)
        if flags & F_LUT:
            self.write_words(dst, self._lookup(table, m))
        else:
            self.write_words(dst, pack_elements(m, e))
        self.busy += samples * tiles * k

    def _lut_table(self):
        table = self.reg("LUT_SELECT")
        if table >= self.design.lut_tables:
            raise Fault(Status.BAD_ADDRESS, f"LUT_SELECT {table} is not a table (the design "
                        f"has {self.design.lut_tables})")
        return table

    def _lookup(self, table, codes):
        """Words ``table[code & 0xFF] | LUT_EXP << 8`` (LUT, and MATVEC with F_LUT)."""
        from .lut import lookup
        codes = np.asarray(codes, dtype=np.int64) & 0xFF
        out = lookup(np.frombuffer(bytes(self.luts[table]), dtype=np.uint8), codes)
        return out.astype(np.int64) | (self.reg("LUT_EXP") << 8)

    def _lut(self, src, dst, w, flags):
        count = self._count("LUT count", w[2])
        table = self._lut_table()
        self._range("LUT source", src, count)
        self._range("LUT destination", dst, count)
        self.write_words(dst, self._lookup(table, self.read_words(src, count)))

    def _book(self):
        from .discrete import CodeBook
        width = self.reg("CODE_WIDTH")
        if width == 0:
            raise Fault(Status.BAD_LENGTH, "CODE_WIDTH 0 is not a code width")
        raw = self.reg("CODE_BOOK0") | self.reg("CODE_BOOK1") << 32
        entries = []
        for c in range(1 << width):
            v = raw >> (8 * c) & 0x1F
            entries.append((v >> 4 & 1, v >> 3 & 1, v & 7))
        return CodeBook(width, entries)

    def _dmatvec(self, x, dst, w, flags):
        from .network import DiscreteDense, discrete_dense, pack_elements, unpack_elements
        d = self.design
        n = d.matrix_lanes
        entry, cols, rows, bias = w[2], w[3], w[4], w[5]
        self._count("DMATVEC column count", cols)
        self._count("DMATVEC row count", rows)
        book = self._book()
        beats = -(-cols // n)
        self._range("DMATVEC input", x, cols)
        self._range("DMATVEC destination", dst, rows)
        if flags & F_BIAS:
            self._range("DMATVEC bias", bias, rows)
        self._entries(entry, rows * beats)
        ent = self.banks[:, entry:entry + rows * beats].astype(np.int64)
        # entry r*beats + b, bank l -> column b*n + l of row r
        codes = ent.T.reshape(rows, beats * n)[:, :cols] & ((1 << book.n) - 1)
        x_m, _ = unpack_elements(self.read_words(x, cols))
        b_words = None
        if flags & F_BIAS:
            b_words = self.read_words(bias, rows)
            b_words = np.where(b_words > 0x7FFF, b_words - 0x10000, b_words)
        shift = self.reg("DISC_SHIFT")
        out_exp = _s8(self.reg("FIXED_EXP"))
        layer = DiscreteDense(codes, book, bias=b_words, shift=shift,
                              acc_width=d.disc_acc_width, out_exp=out_exp)
        y, _ = discrete_dense(layer, x_m, lanes=n)
        self.write_words(dst, pack_elements(y, out_exp))
        self.busy += rows * beats

    def _grand(self, src, dst, w, flags):
        count = self._count("GRAND count", w[2])
        self._range("GRAND destination", dst, count)
        self.write_words(dst, [f16 for f16, _ in self.grand_take(count)])

    def _rounding(self):
        return ("nearest", "zero", "stochastic", "nearest")[self.reg("ROUNDING")]

    def _width(self):
        return min(max(self.reg("MANT_WIDTH"), 2), 8)


# == Program builders ==========================================================================

def _reg_index(name):
    return REGISTER_BY_NAME[name].index


def config(name, value):
    """CONFIG instruction writing ``value`` to register ``name``."""
    return Instruction.config(_reg_index(name), int(value))


#: Registers whose write does more than store a value (``PRNG_SEED3`` loads the PRNG):
#: :func:`hoist_configs` never drops or moves a CONFIG of these.
_SIDE_EFFECT_REGISTERS = frozenset(REGISTER_BY_NAME[n].index for n in
                                   ("PRNG_SEED0", "PRNG_SEED1", "PRNG_SEED2", "PRNG_SEED3"))


def hoist_configs(body):
    """Split a loop body into the CONFIGs to run once before the loop and the body without
    the CONFIGs that write a value the register already holds.

    Every CONFIG costs a fetch like any instruction (about a dozen cycles on the sequencer),
    and a network's body sets the same registers for every sample. Before the loop, each
    register the body writes is set to the value the body leaves in it; a CONFIG of the body
    is then kept only if the register holds another value at that point. An instruction
    after the body's first CONFIG of a register sees the value it saw in the unhoisted
    program, in every iteration, and the registers end the loop with the same values; only
    the CONFIGs executed change. An instruction before the body's first CONFIG of a register
    saw the previous iteration's value (the device's in the first) and now sees the body's
    last value in every iteration: the network bodies of :class:`NetworkLayout` configure
    every register before the instruction that reads it, except the MATVEC that clears the
    predicted selector, whose output is overwritten. A body without CONFIGs is returned
    unchanged with an empty prologue.

    Parameters
    ----------
    body : list of Instruction
        Straight-line instructions (no JUMP, LOOP or DJNZ).

    Returns
    -------
    prologue, body : list of Instruction
    """
    def key(ins):
        return ins.words[0], ins.words[1:3]

    hoistable = [ins for ins in body
                 if ins.op == Op.CONFIG and ins.words[0] not in _SIDE_EFFECT_REGISTERS]
    last = dict(key(ins) for ins in hoistable)
    state = dict(last)
    kept = []
    for ins in body:
        if ins.op in (Op.JUMP, Op.LOOP, Op.DJNZ):
            raise ValueError(f"A loop body to hoist from is straight-line, not {ins}")
        if ins.op == Op.CONFIG and ins.words[0] in last:
            index, value = key(ins)
            if state[index] == value:
                continue
            state[index] = value
        kept.append(ins)
    prologue = [Instruction(Op.CONFIG, 0, (index, *value)) for index, value in last.items()]
    return prologue, kept


_ROUNDING_CODES = {"nearest": 0, "zero": 1, "stochastic": 2}
_EXP_SELECT_CODES = {"max": 0, "fixed": 1, "predicted": 2}
_INPUT_MODES = ("device", "host")


def _layer_kind(layer):
    from .network import BFPDense, DiscreteDense
    if isinstance(layer, BFPDense):
        return "bfp"
    if isinstance(layer, DiscreteDense):
        return "discrete"
    raise TypeError(f"Layers must be lowbit.sim.network.BFPDense or DiscreteDense, not {layer!r}")


def _table_key(table):
    return None if table is None else bytes((np.asarray(table) & 0xFF).astype(np.uint8))


@dataclasses.dataclass(frozen=True)
class InputQuant:
    """How the f16 input of a network becomes the first layer's element words.

    A BFP first layer takes BFP blocks of the design's block size (``width``, ``rule``,
    ``rounding``); a discrete first layer takes int8 codes ``quantise_int8(x, shift=shift)``
    with ``rounding``. ``where="device"`` runs QUANT in the program (needs the quantiser
    engine); ``"host"`` quantises on the host (:func:`lowbit.sim.bfp.quantise`,
    :func:`lowbit.sim.quantiser.quantise_int8`: the same numbers) and sends element words.
    Stochastic
    rounding needs the device's rounding PRNG, so it is device-only.
    """
    where: str = "device"
    width: int = 8
    rule: str = "floor"
    rounding: str = "nearest"
    shift: int = 0

    def __post_init__(self):
        if self.where not in _INPUT_MODES:
            raise ValueError(f"Input quantisation must be 'device' or 'host', not {self.where!r}")
        _check_param("Input mantissa width", self.width, 2, 8)
        if self.rule not in ("floor", "ceil"):
            raise ValueError(f"Exponent rule must be 'floor' or 'ceil', not {self.rule!r}")
        if self.rounding not in _ROUNDING_CODES:
            raise ValueError(f"Rounding must be 'nearest', 'zero' or 'stochastic', not "
                             f"{self.rounding!r}")
        _check_param("Input shift", self.shift, -128, 127)
        if self.where == "host" and self.rounding == "stochastic":
            raise ValueError("Stochastic input rounding runs on the device only")


class NetworkLayout:
    """Placement of a network of :mod:`lowbit.sim.network` layers on an accelerator, and its
    program.

    Weight memory: the layers' weights one after another from entry 0 (:meth:`weight_words`
    gives the LOADW image: a BFP layer of ``T`` tiles uses ``T · K`` entries, entry
    ``t·K + j`` of bank ``l`` holding ``m | e << 8`` of row ``t·N + l``, column ``j``, rows past
    ``R`` zero; a discrete layer uses ``R · ceil(K/N)`` entries of codes). LUT tables: each
    distinct activation table gets one table index from 0 (:attr:`tables`).

    Scratchpad (word addresses): the program at 0 (:attr:`program_words`, the longest batch's),
    the biases (BFP: ``T · N`` element words per layer, padding zero; discrete: ``R`` int16), the
    input area (``chunk`` samples of :attr:`in_words`), the output area (``chunk`` samples of
    :attr:`out_words`; a BFP last layer writes its ``T · N`` padded rows), then two areas for
    the samples' intermediate vectors, which the stages use in turn. :attr:`chunk` is the
    largest batch that fits.

    The program (:meth:`program`) runs ``count`` samples layer by layer: one segment per stage
    (the input's QUANT when the device quantises it, each layer's MATVEC or DMATVEC, a LUT a
    layer applies separately) runs that stage for every sample of the batch before the next
    one starts, with the stage's registers set once (only those that change) and its
    instructions unrolled :attr:`UNROLL` samples to a loop iteration. A BFP layer applies its
    activation table in its MATVEC (:data:`F_LUT`) unless ``fuse_lut`` is false; a discrete
    layer's table is a LUT segment of its own. A BFP layer with ``exp_mode="predicted"`` is
    preceded, per sample, by a one-tile, one-block MATVEC with the max selector and nearest
    rounding into its own output, which clears the predicted selector's history: every
    predicted layer of every sample starts afresh, as :func:`lowbit.sim.network.bfp_dense`
    does, whatever the batch. Stochastic rounding draws its numbers in the program's order
    (stage by stage), so the device equals the :class:`Machine`.

    Parameters
    ----------
    layers : sequence of lowbit.sim.network.BFPDense / DiscreteDense
    design : Design
    input : InputQuant, optional
        Quantisation of the f16 input (default: on the device if it has the quantiser, else on
        the host, nearest, width 8, floor rule).
    table_base : int
        First LUT table index to use.
    fuse_lut : bool
        A BFP layer's activation table is applied by its MATVEC (:data:`F_LUT`) instead of a
        LUT instruction after it: the same results, without the LUT's pass over the
        scratchpad (default). A discrete layer always uses LUT.

    Raises
    ------
    TypeError, ValueError
        If the network does not fit the design (block size, engines, weight depth, tables,
        scratchpad), or consecutive layers do not chain.
    """

    def __init__(self, layers, design, *, input=None, table_base=0, fuse_lut=True):
        if not isinstance(design, Design):
            raise TypeError(f"Design must be a lowbit.sim.program.Design, not {design!r}")
        if not isinstance(fuse_lut, bool):
            raise TypeError(f"fuse_lut must be a bool, not {fuse_lut!r}")
        self.fuse_lut = fuse_lut
        layers = list(layers)
        if not layers:
            raise ValueError("A network needs at least one layer")
        kinds = [_layer_kind(layer) for layer in layers]
        self.design, self.layers, self.kinds = design, layers, kinds
        if input is None:
            input = InputQuant("device" if design.has("quantiser") else "host")
        if not isinstance(input, InputQuant):
            raise TypeError(f"Input quantisation must be a lowbit.sim.program.InputQuant, not "
                            f"{input!r}")
        if input.where == "device" and not design.has("quantiser"):
            raise ValueError("The design has no quantiser engine; quantise the input on the "
                             "host (InputQuant('host'))")
        self.input = input
        n, b = design.matrix_lanes, design.block
        for i, (layer, kind) in enumerate(zip(layers, kinds, strict=True)):
            if not design.has(kind):
                raise ValueError(f"Layer {i} needs the {kind} engine, which the design lacks")
            if i and layer.cols != layers[i - 1].rows:
                raise ValueError(f"Layer {i} has {layer.cols} inputs but layer {i - 1} has "
                                 f"{layers[i - 1].rows} outputs")
            if kind == "bfp":
                if layer.block != b:
                    raise ValueError(f"Layer {i} has block size {layer.block}, the design {b}")
                if layer.cols // b > design.max_blocks:
                    raise ValueError(f"Layer {i} has {layer.cols // b} blocks, the design at "
                                     f"most {design.max_blocks}")
                if layer.width > 8:
                    raise ValueError(f"Layer {i} width {layer.width} exceeds 8")
                if layer.rounding == "stochastic" and not design.bfp_stochastic:
                    raise ValueError(f"Layer {i} rounds stochastically; the design's BFP column "
                                     f"has no stochastic rounding")
                if layer.exp_mode == "predicted" and not design.bfp_predictor:
                    raise ValueError(f"Layer {i} uses the predicted exponent selector; the "
                                     f"design's BFP column has none")
                if layer.width != 8 and not design.bfp_mant_width:
                    raise ValueError(f"Layer {i} has width {layer.width}; the design's BFP "
                                     f"column has width 8 only")
            else:
                if layer.acc_width != design.disc_acc_width:
                    raise ValueError(f"Layer {i} accumulator width {layer.acc_width} differs "
                                     f"from the design's {design.disc_acc_width}")
            if layer.table is not None and not design.has("lut"):
                raise ValueError(f"Layer {i} has an activation table but the design has no "
                                 f"LUT engine")
        # Weight memory.
        self.entries = []
        entry = 0
        for layer, kind in zip(layers, kinds, strict=True):
            count = self._tiles(layer) * layer.cols if kind == "bfp" else \
                layer.rows * -(-layer.cols // n)
            self.entries.append((entry, count))
            entry += count
        if entry > design.weight_depth:
            raise ValueError(f"The network needs {entry} weight entries, the design has "
                             f"{design.weight_depth}")
        self.weight_entries = entry
        # LUT tables.
        self.tables = {}
        for layer in layers:
            key = _table_key(layer.table)
            if key is not None and key not in self.tables:
                self.tables[key] = table_base + len(self.tables)
        if self.tables and table_base + len(self.tables) > design.lut_tables:
            raise ValueError(f"The network needs {len(self.tables)} LUT tables from index "
                             f"{table_base}, the design has {design.lut_tables}")
        # Scratchpad.
        self.out_widths = [self._padded(layer, kind)
                           for layer, kind in zip(layers, kinds, strict=True)]
        self.in_words = layers[0].cols
        self.out_words = self.out_widths[-1]
        self.bias_addr = [None] * len(layers)
        self.in_addr = self.out_addr = 0
        self._areas = (0, 0)
        # The longest program: every segment's loop and UNROLL - 1 samples after it.
        self.program_words = 8 * len(self._program(2 * self.UNROLL - 1)[0])
        addr = self.program_words
        self.bias_addr = []
        for layer, kind, width in zip(layers, kinds, self.out_widths, strict=True):
            has_bias = (layer.bias_m if kind == "bfp" else layer.bias) is not None
            self.bias_addr.append(addr if has_bias else None)
            addr += width if has_bias else 0
        # Two areas for the samples' intermediate vectors, taking turns layer by layer; each
        # holds a chunk of the widest vector it ever holds.
        widths = [[0], [0]]
        for area, width in self._vectors()[:-1]:
            widths[area].append(width)
        per_sample = self.in_words + self.out_words + max(widths[0]) + max(widths[1])
        self.chunk = min((design.words - addr) // per_sample, 0xFFFF)
        if self.chunk < 1:
            raise ValueError(f"The network does not fit the scratchpad of {design.scratch_bytes}"
                             f" bytes ({addr + per_sample} words needed for one sample)")
        self.in_addr = addr
        self.out_addr = self.in_addr + self.chunk * self.in_words
        area_a = self.out_addr + self.chunk * self.out_words
        self._areas = (area_a, area_a + self.chunk * max(widths[0]))

    # -- geometry ---------------------------------------------------------------------------------
    def _tiles(self, layer):
        return -(-layer.rows // self.design.matrix_lanes)

    def _padded(self, layer, kind):
        return self._tiles(layer) * self.design.matrix_lanes if kind == "bfp" else layer.rows

    @property
    def rows(self):
        """Outputs of the network (rows of the last layer)."""
        return self.layers[-1].rows

    # -- memory images ----------------------------------------------------------------------------
    def weight_words(self):
        """The LOADW image of every layer: uint16 array ``(weight_entries, N)``."""
        from .network import block_exponents, pack_elements
        n, b = self.design.matrix_lanes, self.design.block
        out = np.zeros((self.weight_entries, n), dtype=np.uint16)
        for layer, kind, (entry, count) in zip(self.layers, self.kinds, self.entries, strict=True):
            if kind == "bfp":
                rows = self._tiles(layer) * n
                w_m = np.zeros((rows, layer.cols), dtype=np.int64)
                w_e = np.zeros((rows, layer.cols), dtype=np.int64)
                w_m[:layer.rows] = layer.w_m
                w_e[:layer.rows] = [block_exponents(e, b, layer.cols) for e in layer.w_e]
                words = pack_elements(w_m, w_e)                         # (rows, K)
                # entry t*K + j, bank l  <-  row t*N + l, column j
                img = words.reshape(-1, n, layer.cols).transpose(0, 2, 1).reshape(-1, n)
            else:
                beats = -(-layer.cols // n)
                codes = np.zeros((layer.rows, beats * n), dtype=np.int64)
                codes[:, :layer.cols] = layer.w_codes
                img = codes.reshape(layer.rows * beats, n)
            out[entry:entry + count] = img
        return out

    def bias_words(self):
        """``(word address, uint16 words)`` of every layer bias."""
        from .network import pack_elements
        out = []
        for layer, kind, addr, width in zip(self.layers, self.kinds, self.bias_addr,
                                            self.out_widths, strict=True):
            if addr is None:
                continue
            if kind == "bfp":
                m = np.zeros(width, dtype=np.int64)
                e = np.zeros(width, dtype=np.int64)
                m[:layer.rows], e[:layer.rows] = layer.bias_m, layer.bias_e
                out.append((addr, pack_elements(m, e)))
            else:
                out.append((addr, (np.asarray(layer.bias, dtype=np.int64) & 0xFFFF)
                            .astype(np.uint16)))
        return out

    def table_images(self):
        """``{table index: 256 uint8}`` of the activation tables."""
        return {idx: np.frombuffer(key, dtype=np.uint8).copy() for key, idx in self.tables.items()}

    # -- input -----------------------------------------------------------------------------------
    def f16(self, x):
        """``x`` (float array, samples on the first axis, or f16 codes as uint16) as f16
        codes of shape ``(samples, in_words)``."""
        x = np.asarray(x)
        if x.ndim == 1:
            x = x[None]
        if x.ndim != 2 or x.shape[1] != self.in_words:
            raise ValueError(f"Input must have shape (samples, {self.in_words}), not {x.shape}")
        if x.dtype == np.uint16:
            return x.copy()
        if not np.issubdtype(x.dtype, np.floating):
            raise TypeError(f"Input must be a float array (or f16 codes as uint16), not "
                            f"{x.dtype}")
        return x.astype(np.float16).view(np.uint16)

    def host_quantise(self, codes):
        """Element words ``(samples, in_words)`` of f16 codes, as QUANT would write them."""
        from .bfp import quantise
        from .quantiser import decode_f16, quantise_int8
        q = self.input
        x = decode_f16(np.asarray(codes, dtype=np.uint16))
        if self.kinds[0] == "bfp":
            m, e = quantise(x, block=self.design.block, width=q.width, exp_bits=8, rule=q.rule,
                            rounding=q.rounding)
            m = m.reshape(x.shape)
            e = np.repeat(e, self.design.block, axis=-1)
            return ((m & 0xFF) | (e & 0xFF) << 8).astype(np.uint16)
        return (quantise_int8(x, shift=q.shift, rounding=q.rounding) & 0xFF).astype(np.uint16)

    def input_words(self, x):
        """The words the input area holds for samples ``x`` (f16 codes or element words)."""
        codes = self.f16(x)
        return codes if self.input.where == "device" else self.host_quantise(codes)

    # -- program ---------------------------------------------------------------------------------
    def _layer_config(self, layer, kind):
        if kind == "bfp":
            # FIXED_EXP only where the selector reads it: the max and predicted selectors
            # ignore it, so a network whose layers alternate fixed and max keeps one value,
            # which hoist_configs then sets once per RUN.
            fixed = [config("FIXED_EXP", layer.out_exp & 0xFF)] * (layer.exp_mode == "fixed")
            return [config("MANT_WIDTH", layer.width),
                    config("ROUNDING", _ROUNDING_CODES[layer.rounding]),
                    config("EXP_SELECT", _EXP_SELECT_CODES[layer.exp_mode]), *fixed]
        words = layer.book.words() + [0] * (8 - len(layer.book.words()))
        book0 = sum(v << 8 * k for k, v in enumerate(words[:4]))
        book1 = sum(v << 8 * k for k, v in enumerate(words[4:]))
        return [config("CODE_WIDTH", layer.book.n), config("CODE_BOOK0", book0),
                config("CODE_BOOK1", book1), config("DISC_SHIFT", layer.shift),
                config("FIXED_EXP", layer.out_exp & 0xFF)]

    #: Samples per iteration of a segment's loop (the loop's ADDOFS and DJNZ run once per
    #: UNROLL samples).
    UNROLL = 4

    def _vectors(self):
        """``[(area, width)]``: where each stage of a sample writes its vector, in order (the
        input quantisation on the device, then each layer, then each separate LUT): ``area`` 0
        or 1 is an intermediate area, ``"out"`` the output area; the last one is ``"out"``."""
        stages = []
        if self.input.where == "device":
            stages.append(self.in_words)
        for i, (layer, kind) in enumerate(zip(self.layers, self.kinds, strict=True)):
            stages.append(self.out_widths[i])
            if layer.table is not None and not (kind == "bfp" and self.fuse_lut):
                stages.append(self.out_widths[i])
        return [(k % 2, w) for k, w in enumerate(stages[:-1])] + [("out", stages[-1])]

    def _segments(self):
        """The program's segments: ``(body, src_stride, dst_stride)``, one per stage of
        :meth:`_vectors`. ``body`` is one sample's instructions (CONFIGs included), with the
        addresses of sample 0 and ``F_OFS_SRC`` / ``F_OFS_DST`` where an operand steps by the
        stride from sample to sample (``ofs_a`` and ``ofs_b``)."""
        ofs = F_OFS_SRC | F_OFS_DST
        areas = {0: self._areas[0], 1: self._areas[1], "out": self.out_addr}
        vectors = iter(self._vectors())
        cur, cur_w = self.in_addr, self.in_words
        segments = []

        def stage():
            area, width = next(vectors)
            return areas[area], width

        q = self.input
        if q.where == "device":
            fmt = 0 if self.kinds[0] == "bfp" else 1
            nxt, w = stage()
            segments.append(([config("QUANT_FORMAT", fmt), config("MANT_WIDTH", q.width),
                              config("ROUNDING", _ROUNDING_CODES[q.rounding]),
                              config("QUANT_RULE", int(q.rule == "ceil")),
                              config("QUANT_SHIFT", q.shift & 0xFF),
                              Instruction.quant(cur, nxt, self.in_words, ofs)], cur_w, w))
            cur, cur_w = nxt, w
        for i, (layer, kind) in enumerate(zip(self.layers, self.kinds, strict=True)):
            entry = self.entries[i][0] if self.entries else 0
            bias = self.bias_addr[i]
            nxt, w = stage()
            body = []
            if kind == "bfp" and layer.exp_mode == "predicted":
                # A RUN clears the predicted selector's history only once; a product with
                # another selector clears it (one tile of one block, nearest rounding so no
                # random numbers are drawn; the layer's MATVEC overwrites its output).
                body += [config("EXP_SELECT", 0), config("ROUNDING", 0),
                         Instruction.matvec(cur, nxt, entry, 1, 1, flags=ofs)]
            body += self._layer_config(layer, kind)
            table = [] if layer.table is None else \
                [config("LUT_SELECT", self.tables[_table_key(layer.table)]),
                 config("LUT_EXP", layer.table_exp & 0xFF)]
            if kind == "bfp":
                fused = bool(table) and self.fuse_lut
                # With F_LUT the activation on the MATVEC's way out.
                body += table * fused
                body.append(Instruction.matvec(cur, nxt, entry, layer.cols // self.design.block,
                                               self._tiles(layer), bias,
                                               flags=ofs | (F_LUT if fused else 0)))
                table = [] if fused else table
            else:
                body.append(Instruction.dmatvec(cur, nxt, entry, layer.cols, layer.rows, bias,
                                                flags=ofs))
            segments.append((body, cur_w, w))
            cur, cur_w = nxt, w
            if table:
                nxt, w = stage()
                segments.append((table + [Instruction.lut(cur, nxt, self.out_widths[i], ofs)],
                                 cur_w, w))
                cur, cur_w = nxt, w
        return segments

    @staticmethod
    def _step(ins, k, src_stride, dst_stride):
        """``ins`` for the ``k``-th sample after the offsets' (its addresses moved on)."""
        w = list(ins.words)
        if ins.flags & F_OFS_SRC:
            w[0] = (w[0] + k * src_stride) & 0xFFFF
        if ins.flags & F_OFS_DST:
            w[1] = (w[1] + k * dst_stride) & 0xFFFF
        return Instruction(ins.op, ins.flags, tuple(w))

    def _batched(self, per, src_stride, dst_stride):
        """The one MATVEC of a segment whose samples a single MATVEC runs (w7), without its
        offset flags, or None: a segment of one BFP MATVEC and nothing else per sample (no
        CONFIG: a predicted layer clears its selector sample by sample), its vectors
        ``matvec_stride`` and ``T · N`` words apart, on a design with ``matvec_samples``."""
        if not self.design.matvec_samples or len(per) != 1 or per[0].op != Op.MATVEC:
            return None
        ins = per[0]
        blocks, tiles = ins.words[3], ins.words[4]
        if (src_stride, dst_stride) != (matvec_stride(blocks, self.design),
                                        tiles * self.design.matrix_lanes):
            return None
        return Instruction(ins.op, ins.flags & ~(F_OFS_SRC | F_OFS_DST), ins.words)

    def _program(self, count, *, hoist=True, at=0):
        """``(program, executed)`` of :meth:`program` (``hoist=False``: every CONFIG of a
        sample's body stays in the loop; ``at``: the word address the program is stored at)."""
        u = self.UNROLL
        loops, rest = divmod(count, u)
        prog, executed = [], 0
        known = {}                      # register index -> value its last CONFIG wrote
        for body, ss, ds in self._segments():
            once, per = hoist_configs(body) if hoist else ([], body)
            for ins in once:
                if known.get(ins.words[0]) != ins.words[1:3]:
                    prog.append(ins)
                    executed += 1
            batch = self._batched(per, ss, ds)
            if batch is not None:
                # One MATVEC runs the segment's every sample (w7), its products overlapping.
                prog.append(Instruction.matvec(*batch.words[:5], flags=batch.flags,
                                               bias=batch.words[5] if batch.flags & F_BIAS
                                               else None, samples=count))
                executed += 1
                for ins in once:
                    if ins.op == Op.CONFIG:
                        known[ins.words[0]] = ins.words[1:3]
                continue
            if not self.design.seq_control:
                raise ValueError(
                    "The design's sequencer runs straight-line programs (no loops or offsets), "
                    "so every stage must be one MATVEC of every sample; a stage of "
                    f"{', '.join(Op.NAMES[ins.op] for ins in per)} per sample is not (a "
                    "predicted-selector layer, a separate LUT, a QUANT or DMATVEC stage, or "
                    "vectors not at MATVEC's stride)")
            prog.append(Instruction.setofs(0, 0))
            executed += 1
            if loops:
                prog.append(Instruction.loop(loops))
                start = len(prog)
                prog += [self._step(ins, k, ss, ds) for k in range(u) for ins in per]
                prog += [Instruction.addofs(u * ss, u * ds), Instruction.djnz(at + start * 8)]
                executed += 1 + loops * (u * len(per) + 2)
            prog += [self._step(ins, k, ss, ds) for k in range(rest) for ins in per]
            executed += rest * len(per)
            for ins in once + per:
                if ins.op == Op.CONFIG:
                    known[ins.words[0]] = ins.words[1:3]
        return prog + [Instruction.halt()], executed + 1

    def program(self, count):
        """The program (list of :class:`Instruction`) running ``count`` samples (1..chunk).

        Layer by layer: a segment per stage of a sample (the input's QUANT, each layer's
        MATVEC or DMATVEC, a separate LUT) runs that stage for every sample before the next
        stage starts, so consecutive products are independent and each stage's registers are
        set once per RUN. A segment is its CONFIGs (:func:`hoist_configs`, and only those
        that change a register), ``SETOFS 0, 0``, ``LOOP count // UNROLL``, ``UNROLL`` copies
        of one sample's instructions (addresses stepping by the vectors' widths),
        ``ADDOFS``, ``DJNZ``, then the ``count % UNROLL`` samples left over; ``HALT`` ends
        the program. A BFP layer's segment (not a predicted one) is its CONFIGs and one
        MATVEC of ``count`` samples instead (:attr:`Design.matvec_samples`), which overlaps
        each sample's products with the previous sample's output; the results and random
        draws are the same."""
        _check_param("Sample count", count, 1, self.chunk)
        return self._program(count)[0]

    def instructions(self, count):
        """Instructions :meth:`program` ``(count)`` executes (HALT included)."""
        _check_param("Sample count", count, 1, self.chunk)
        return self._program(count)[1]

    # -- golden reference -----------------------------------------------------------------------
    def reference(self, x):
        """The network's outputs for samples ``x`` by the golden layer functions
        (:func:`lowbit.sim.network.bfp_dense`, :func:`~lowbit.sim.network.discrete_dense`): ``(m,
        e)`` int64
        arrays of shape ``(samples, rows)``. A BFP layer's input block exponent is the
        exponent of the block's last element (as MATVEC reads it). Stochastic rounding
        anywhere raises ``ValueError`` (its numbers come from the device's PRNG: use a
        :class:`Machine`)."""
        from .network import bfp_dense, discrete_dense, unpack_elements
        if self.input.rounding == "stochastic" and self.input.where == "device" or any(
                k == "bfp" and layer.rounding == "stochastic"
                for layer, k in zip(self.layers, self.kinds, strict=True)):
            raise ValueError("The reference has no stochastic rounding; run a Machine")
        inp = self.input
        codes = self.f16(x)
        words = self.host_quantise(codes) if inp.where == "device" else \
            self.input_words(codes)
        column = self.design.column() if "bfp" in self.kinds else None
        b = self.design.block
        out_m, out_e = [], []
        for row in words:
            m, e = unpack_elements(row)
            for layer, kind in zip(self.layers, self.kinds, strict=True):
                if kind == "bfp":
                    m, e = bfp_dense(layer, m[:layer.cols], e[b - 1:layer.cols:b], column)
                else:
                    m, e = discrete_dense(layer, m[:layer.cols],
                                          lanes=self.design.matrix_lanes)
            out_m.append(m)
            out_e.append(e)
        return np.array(out_m, dtype=np.int64), np.array(out_e, dtype=np.int64)


def load_weights_program(src, entry, count):
    """``LOADW src, entry, count; HALT`` (weights staged at word address ``src``)."""
    return [Instruction.loadw(src, entry, count), Instruction.halt()]
