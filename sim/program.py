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
destination ``w2`` (modulo 2^16), :data:`F_BIAS` enables the bias operand.

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
0x21 MATVEC   w1 x, w2 dst, w3 weight entry, w4 blocks ``nb``, w5 tiles ``T``, w6 bias:
              ``T`` BFP column products of ``K = nb · B`` beats. Tile ``t`` reads weight
              entries ``entry + t·K + j`` (``j < K``; bank ``l`` is row ``t·N + l``; entry word
              ``m | e << 8``, the exponent of the block is taken from its last beat), the ``K``
              element words at ``x`` and, with ``F_BIAS``, the ``N`` element words at
              ``bias + t·N``; it writes ``N`` element words ``m | e4 << 8`` at ``dst + t·N``.
              Registers: ``MANT_WIDTH``, ``ROUNDING``, ``EXP_SELECT``, ``FIXED_EXP``.
0x22 LUT      w1 src, w2 dst, w3 count: ``dst[i] = table[src[i] & 0xFF] | LUT_EXP << 8`` with
              the byte table ``LUT_SELECT``.
0x23 DMATVEC  w1 x, w2 dst, w3 weight entry, w4 columns ``K``, w5 rows ``R``, w6 bias:
              discrete-weight product (:func:`sim.network.discrete_dense` without table).
              Row ``r`` reads ``ceil(K / lanes)`` entries from ``entry + r·ceil(K/lanes)``;
              bank ``l`` of the ``b``-th holds the code of column ``b·lanes + l`` (low bits;
              columns past ``K`` are ignored). ``x`` are ``K`` element words (mantissa byte
              used); with ``F_BIAS`` the bias is ``R`` signed 16-bit words at ``bias``. Writes
              ``R`` words ``y | FIXED_EXP << 8``. Registers: ``CODE_WIDTH``, ``CODE_BOOK0/1``,
              ``DISC_SHIFT``.
0x24 GRAND    w2 dst, w3 count: ``count`` f16 grand samples (``GRAND_MODE``), lane order as
              ``GRAND_SAMPLES``.
==== ======== ============================================================================

Errors stop the program at the failing instruction, which has no effect: unknown op
(``BAD_OPCODE``), an engine the build lacks (``BAD_OPCODE``), any word range outside the
scratchpad or weight entries outside the weight memory (``BAD_ADDRESS``), a zero or too large
count / block count / tile count, or a QUANT BFP count not a multiple of ``B``
(``BAD_LENGTH``). ``RUN``'s instruction limit ends a runaway program with ``LIMIT``.

Random numbers for stochastic rounding come from the rounding PRNG, one xoroshiro128aox lane
(:class:`sim.prng.Xoroshiro128aox`) loaded from ``PRNG_SEED0..3`` when ``PRNG_SEED3`` is
written (``s0 = SEED1:SEED0``, ``s1 = SEED3:SEED2``). Each random number is the low ``R`` bits
of one 64-bit output: MATVEC draws ``N`` per tile in lane order as the tile is output, QUANT one
per element in order.
"""

import dataclasses
import struct

__all__ = ["Op", "F_OFS_SRC", "F_OFS_DST", "F_BIAS", "INSTRUCTION_BYTES", "Instruction",
           "assemble", "disassemble"]

INSTRUCTION_BYTES = 16

F_OFS_SRC = 0x01
F_OFS_DST = 0x02
F_BIAS = 0x04


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
    def matvec(cls, x, dst, entry, blocks, tiles, bias=None, flags=0):
        flags |= F_BIAS if bias is not None else 0
        return cls(Op.MATVEC, flags, (x, dst, entry, blocks, tiles, bias or 0))

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
