"""Reply status codes and the register map of the host protocol (``docs/protocol.md``).

They are shared by the host-link model :mod:`lowbit.sim.link` (which re-exports them with the
rest of the protocol: frames, opcodes, identification) and the layer-program model
:mod:`lowbit.sim.program` (CONFIG writes registers, instructions fail with a status), so that
the program model does not import the link model that runs it.
"""

import dataclasses
import enum

__all__ = ["Status", "Register", "REGISTERS", "REGISTER_BY_NAME"]


class Status(enum.IntEnum):
    """Reply status codes."""
    OK = 0           #: executed
    BAD_CRC = 1      #: CRC mismatch; nothing executed
    BAD_OPCODE = 2   #: opcode not implemented; nothing executed
    BAD_ADDRESS = 3  #: register index unknown, or memory address outside the scratchpad
    BAD_LENGTH = 4   #: payload length wrong for the opcode, too large, or range past the end
    TRUNCATED = 5    #: inter-byte timeout inside a frame; the frame was dropped
    READ_ONLY = 6    #: write to a read-only register; nothing written
    BUSY = 7         #: reserved for engine commands (engine cannot accept the command now)
    LIMIT = 8        #: RUN stopped at its instruction limit


@dataclasses.dataclass(frozen=True)
class Register:
    """One 32-bit configuration register.

    Only the low ``width`` bits are stored; writes drop the others and reads return them as 0.
    A read-only register (``access == "ro"``) rejects writes with ``READ_ONLY``.
    """
    name: str
    index: int
    width: int
    access: str
    reset: int
    doc: str


#: Register map. ``reset`` of identification registers is filled in per design by
#: :func:`lowbit.sim.link.identity_registers`; of counters it is 0.
REGISTERS = (
    Register("ID_MAGIC", 0x00, 32, "ro", 0, 'b"LOWB" as a little-endian u32 (0x42574F4C)'),
    Register("ID_VERSION", 0x01, 24, "ro", 0,
             "protocol version [7:0], design major [15:8], design minor [23:16]"),
    Register("ID_PARAMS", 0x02, 18, "ro", 0,
             "lanes [7:0], engine bitmask [15:8], scratchpad in SPRAM [16], sequencer without "
             "the control and data-movement instructions (straight-line programs) [17]"),
    Register("ID_SCRATCH", 0x03, 32, "ro", 0, "scratchpad size in bytes"),
    Register("ID_FRAME", 0x04, 16, "ro", 0, "frame buffer size (largest payload) in bytes"),
    Register("LINK_SKIPPED", 0x05, 16, "ro", 0, "bytes skipped while idle (saturating)"),
    Register("LINK_ERRORS", 0x06, 16, "ro", 0, "error replies sent (saturating)"),
    Register("UART_ERRORS", 0x07, 16, "ro", 0,
             "UART framing errors [7:0], receive overruns [15:8] (saturating)"),
    Register("ID_MATRIX", 0x08, 32, "ro", 0,
             "matrix lanes N [7:0], log2 block B [15:8], max_blocks - 1 [23:16], "
             "log2 weight_depth [31:24]"),
    Register("ID_ENGINE", 0x09, 32, "ro", 0,
             "lut_tables [7:0], code_bits [9:8], BFP column with stochastic rounding [10] "
             "and with the predicted exponent selector [11], frac_bits [15:12], "
             "rand_bits - 1 [19:16], disc_acc_width - 1 [24:20], grand modes built "
             "(bit 25 + k: lowbit.sim.grand.MODES[k]) [30:25], BFP column without the "
             "runtime mantissa width (fixed at 8) [31]"),
    Register("MANT_WIDTH", 0x10, 4, "rw", 8, "BFP mantissa width W"),
    Register("ROUNDING", 0x11, 2, "rw", 0, "rounding mode (lowbit.hw.common.Rounding)"),
    Register("EXP_SELECT", 0x12, 2, "rw", 0, "exponent selector: 0 max, 1 fixed, 2 predicted"),
    Register("FIXED_EXP", 0x13, 8, "rw", 0, "shared exponent used by the fixed selector"),
    Register("GRAND_MODE", 0x14, 3, "rw", 0,
             "grand mode: normal, normal-144, trunc 2s, trunc 3s, uniform, raw"),
    Register("QUANT_FORMAT", 0x15, 2, "rw", 0, "quantiser output: 0 BFP, 1 int8, 2 discrete"),
    Register("CODE_WIDTH", 0x16, 2, "rw", 2, "discrete code width n (1..3)"),
    Register("CODE_BOOK0", 0x17, 32, "rw", 0, "code book entries 0..3, one byte each"),
    Register("CODE_BOOK1", 0x18, 32, "rw", 0, "code book entries 4..7, one byte each"),
    Register("LUT_SELECT", 0x19, 4, "rw", 0, "transfer table selected for the LUT engine"),
    Register("LUT_EXP", 0x1A, 8, "rw", 0, "exponent byte of the LUT instruction's output words"),
    Register("DISC_SHIFT", 0x1B, 5, "rw", 0, "right shift of the discrete matvec requantiser"),
    Register("QUANT_SHIFT", 0x1C, 8, "rw", 0, "int8 scale exponent of the quantiser (signed)"),
    Register("QUANT_RULE", 0x1D, 1, "rw", 0, "BFP shared-exponent rule: 0 floor, 1 ceil"),
    Register("PRNG_SEED0", 0x20, 32, "rw", 0, "PRNG seed word 0 (s0[31:0])"),
    Register("PRNG_SEED1", 0x21, 32, "rw", 0, "PRNG seed word 1 (s0[63:32])"),
    Register("PRNG_SEED2", 0x22, 32, "rw", 0, "PRNG seed word 2 (s1[31:0])"),
    Register("PRNG_SEED3", 0x23, 32, "rw", 0, "PRNG seed word 3 (s1[63:32])"),
)
REGISTER_BY_NAME = {r.name: r for r in REGISTERS}
_REGISTER_BY_INDEX = {r.index: r for r in REGISTERS}
