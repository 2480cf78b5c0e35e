"""Host-link protocol: the pure-Python reference model (no Amaranth, no numpy needed).

This module is the single source of truth of the host protocol (``docs/protocol.md``): frame
layout, CRC, opcodes and identification record, and the status codes and register map (defined
in :mod:`lowbit.sim.protocol`, which the program model shares, and re-exported here). The host
driver (:mod:`lowbit.boards.driver`), the gateware (:mod:`lowbit.hw.link`, :mod:`lowbit.hw.top`,
which build their tables from the constants here) and the tests all use it.

Frames
------
Request (host to device)::

    0xA5, opcode, len_lo, len_hi, payload[len], crc_lo, crc_hi

Reply (device to host)::

    0x5A, status, len_lo, len_hi, payload[len], crc_lo, crc_hi

The CRC is CRC-16/CCITT-FALSE (polynomial 0x1021, initial value 0xFFFF, no reflection, no final
XOR; check value of ``b"123456789"`` is 0x29B1) over every byte after the start-of-frame byte
and before the CRC: opcode (or status), both length bytes and the payload. Multi-byte fields are
little-endian.

Parser rules (mirrored exactly by :class:`DeviceModel` and the gateware)
------------------------------------------------------------------------
- While idle, every byte other than 0xA5 is skipped and counted (``LINK_SKIPPED``).
- A length larger than the frame buffer (``frame_bytes``) is answered with ``BAD_LENGTH`` after
  draining ``len + 2`` further bytes, or fewer if the inter-byte timeout ends the drain first.
  Nothing of that frame is stored.
- An inter-byte timeout (``timeout_bits`` bit times without a byte) inside a frame abandons it
  and is answered with ``TRUNCATED`` (``BAD_LENGTH`` while draining); the parser is idle again.
- A complete frame whose CRC does not match is answered with ``BAD_CRC``; nothing executes.
- A frame with a good CRC executes; unknown opcodes answer ``BAD_OPCODE``. The payload is held
  in the frame buffer until the CRC has been checked, so a bad frame never writes anything.
- Every frame that reaches its end, drains or times out gets exactly one reply. The host sends
  one request at a time and waits for its reply (stop and wait).
"""

import dataclasses
import enum
import struct

import numpy as np

from .program import Design, Machine
from .protocol import _REGISTER_BY_INDEX, REGISTER_BY_NAME, REGISTERS, Register, Status
from .topparams import check_top_params

__all__ = [
    "SOF_REQUEST", "SOF_REPLY", "PROTOCOL_VERSION", "DESIGN_VERSION", "MAGIC", "Opcode", "Status",
    "ENGINE_OPCODES", "PACKED_TRANSFERS", "Register", "REGISTERS", "REGISTER_BY_NAME",
    "ENGINE_BITS", "Identity",
    "crc16", "encode_request", "encode_reply", "decode_request", "decode_reply", "FrameError",
    "ReplyParser", "DeviceModel", "reg_read_payload", "reg_write_payload", "mem_read_payload",
    "mem_write_payload", "identity_registers", "DESIGN_PARAMS", "design_registers",
    "decode_design_registers",
]

SOF_REQUEST = 0xA5
SOF_REPLY = 0x5A
#: Version 3: the packed scratchpad transfers (MEM_READ_LOW, MEM_WRITE_LOW, MEM_READ_HIGH,
#: MEM_FILL_HIGH) and the link parameters (baud rate, clock) in the 24-byte IDENTIFY record.
#: Version 2: RUN replies carry the matrix engine's busy cycles (16 bytes, was 12).
PROTOCOL_VERSION = 3
#: (major, minor) of the gateware design; the driver refuses a different major version.
#: Minor 2 added the identification registers ``ID_MATRIX`` and ``ID_ENGINE``; minor 3
#: MATVEC's samples (w7, :data:`lowbit.sim.program.Design` ``matvec_samples``).
DESIGN_VERSION = (0, 3)
MAGIC = b"LOWB"
#: Length of the IDENTIFY reply payload.
IDENTITY_BYTES = 24
#: Largest payload length a frame header can carry.
MAX_LENGTH = 0xFFFF


class Opcode(enum.IntEnum):
    """Request opcodes. Opcodes in :data:`ENGINE_OPCODES` are reserved for engine commands."""
    PING = 0x01       #: echo the payload
    IDENTIFY = 0x02   #: no payload; reply is the 16-byte identification record
    REG_READ = 0x10   #: payload: index u16; reply: value u32
    REG_WRITE = 0x11  #: payload: index u16, value u32; reply: empty
    MEM_READ = 0x20   #: payload: byte address u32, count u16; reply: count bytes
    MEM_WRITE = 0x21  #: payload: byte address u32, data; reply: empty
    #: payload: even byte address u32, count u16; reply: the low bytes of ``count`` words
    MEM_READ_LOW = 0x22
    #: payload: even byte address u32, data; each byte to the low byte of the next word
    MEM_WRITE_LOW = 0x23
    #: payload: even byte address u32, count u16; reply: the high byte of every
    #: ``matrix_lanes``-th word, ``count`` bytes
    MEM_READ_HIGH = 0x24
    #: payload: even byte address u32, data; each byte to the high bytes of ``block`` words
    MEM_FILL_HIGH = 0x25
    GRAND_SEED = 0x40  #: payload: 16*lanes bytes of generator state; reply: empty
    GRAND_SAMPLES = 0x41  #: payload: count u16, format u8 (0 f16, 1 f32); reply: samples
    LUT_WRITE = 0x48  #: payload: table u8, start u8, entries; reply: empty
    LUT_APPLY = 0x49  #: payload: table u8, codes; reply: table[code] per code
    #: payload: wide slot u8, start u16, 16-bit words (u16 each); reply: empty
    LUT_WRITE_WIDE = 0x4A
    #: payload: wide slot u8, format u8, codes (formats 0, 1: i16 each; 2: u8 each); reply: the
    #: looked-up values (formats 0, 2: i16 each; 1: i8 each)
    LUT_APPLY_WIDE = 0x4B
    RUN = 0x50        #: payload: start byte address u32, instruction limit u32; reply: 16 bytes


#: Opcodes reserved for engine commands (answered BAD_OPCODE until an engine claims them).
ENGINE_OPCODES = range(0x40, 0x80)

#: The packed scratchpad transfers: opcode -> (writes, lane: 0 low byte / 1 high byte, span:
#: "word" one word per byte, "block" ``block`` words per byte, "tile" ``matrix_lanes`` words
#: per byte). A span's bytes cover ``2 * span`` scratchpad bytes from an even address.
PACKED_TRANSFERS = {
    Opcode.MEM_READ_LOW: (False, 0, "word"),
    Opcode.MEM_WRITE_LOW: (True, 0, "word"),
    Opcode.MEM_READ_HIGH: (False, 1, "tile"),
    Opcode.MEM_FILL_HIGH: (True, 1, "block"),
}


#: Engine name -> bit of the IDENTIFY / ID_PARAMS engine bitmask.
ENGINE_BITS = {"grand": 0, "bfp": 1, "discrete": 2, "quantiser": 3, "lut": 4, "sequencer": 5,
               "lut_wide": 6}


@dataclasses.dataclass(frozen=True)
class Identity:
    """The IDENTIFY record (24 bytes, little-endian).

    Layout: ``magic[4], protocol u8, design_major u8, design_minor u8, lanes u8,
    scratch_bytes u32, frame_bytes u16, engines u8, flags u8, baud u32, clk_hz u32`` (flags
    bit 0: scratchpad in SPRAM, bit 1: a sequencer without the control and data-movement
    instructions, ``seq_control`` false; ``baud``: the UART's rate (a top built with ``uart=False``
    reports the rate its timeout is counted in); ``clk_hz``: the clock, Hz, rounded to an
    integer).
    """
    magic: bytes
    protocol: int
    design: tuple
    lanes: int
    scratch_bytes: int
    frame_bytes: int
    engines: int
    use_spram: bool
    baud: int = 0
    clk_hz: int = 0
    seq_control: bool = True

    def to_bytes(self):
        return (self.magic + bytes([self.protocol, self.design[0], self.design[1], self.lanes])
                + self.scratch_bytes.to_bytes(4, "little")
                + self.frame_bytes.to_bytes(2, "little")
                + bytes([self.engines, int(self.use_spram) | int(not self.seq_control) << 1])
                + self.baud.to_bytes(4, "little") + self.clk_hz.to_bytes(4, "little"))

    @classmethod
    def from_bytes(cls, data):
        data = bytes(data)
        if len(data) != IDENTITY_BYTES:
            raise FrameError(f"Identity record must be {IDENTITY_BYTES} bytes, not {len(data)}")
        return cls(magic=data[0:4], protocol=data[4], design=(data[5], data[6]), lanes=data[7],
                   scratch_bytes=int.from_bytes(data[8:12], "little"),
                   frame_bytes=int.from_bytes(data[12:14], "little"), engines=data[14],
                   use_spram=bool(data[15] & 1), baud=int.from_bytes(data[16:20], "little"),
                   clk_hz=int.from_bytes(data[20:24], "little"),
                   seq_control=not data[15] & 2)

    @property
    def engine_names(self):
        return [name for name, bit in ENGINE_BITS.items() if self.engines >> bit & 1]


#: Generator parameters carried by ``ID_MATRIX`` / ``ID_ENGINE`` and their defaults (those of
#: :class:`lowbit.hw.top.Accelerator`; ``frac_bits``, ``rand_bits`` and ``disc_acc_width`` are
#: constants of :mod:`lowbit.hw.sequencer` in the gateware). ``grand_modes=None`` means all modes.
DESIGN_PARAMS = dict(matrix_lanes=8, block=16, max_blocks=16, weight_depth=512, lut_tables=4,
                     code_bits=3, bfp_stochastic=True, bfp_predictor=True, bfp_mant_width=True,
                     frac_bits=3,
                     rand_bits=8, disc_acc_width=16, grand_modes=None)

# (name, low bit, bits, kind, offset): field = log2(value) ("log2"), int(value) ("bool"),
# int(not value) ("not": a bit set where the design lacks the feature, so that the designs
# that have it, all those before the bit, read as before) or value - offset ("int").
_ID_FIELDS = {
    "ID_MATRIX": (("matrix_lanes", 0, 8, "int", 0), ("block", 8, 8, "log2", 0),
                  ("max_blocks", 16, 8, "int", 1), ("weight_depth", 24, 8, "log2", 0)),
    "ID_ENGINE": (("lut_tables", 0, 8, "int", 0), ("code_bits", 8, 2, "int", 0),
                  ("bfp_stochastic", 10, 1, "bool", 0), ("bfp_predictor", 11, 1, "bool", 0),
                  ("frac_bits", 12, 4, "int", 0), ("rand_bits", 16, 4, "int", 1),
                  ("disc_acc_width", 20, 5, "int", 1), ("bfp_mant_width", 31, 1, "not", 0)),
}
_GRAND_MODES_LSB = 25


def _grand_mode_names():
    from .grand import MODES
    return MODES


def design_registers(**params):
    """Values of ``ID_MATRIX`` and ``ID_ENGINE`` (by name) for generator parameters ``params``
    (names of :data:`DESIGN_PARAMS`; missing ones take its defaults).

    Raises
    ------
    TypeError
        For an unknown parameter, or a value that is not an integer (``grand_modes``: not an
        iterable of mode names).
    ValueError
        For a value the register field cannot carry (e.g. a block size that is not a power of
        two, a lane count above 255) or an unknown grand mode.
    """
    unknown = set(params) - set(DESIGN_PARAMS)
    if unknown:
        raise TypeError(f"Unknown design parameters: {', '.join(sorted(unknown))}")
    p = {**DESIGN_PARAMS, **params}
    regs = {}
    for reg, fields in _ID_FIELDS.items():
        value = 0
        for name, lsb, bits, kind, offset in fields:
            v = p[name]
            if kind in ("bool", "not"):
                if not isinstance(v, (bool, np.bool_)):
                    raise TypeError(f"Design parameter {name} must be a bool, not {v!r}")
                value |= int(bool(v) != (kind == "not")) << lsb
                continue
            if not isinstance(v, (int, np.integer)) or isinstance(v, (bool, np.bool_)):
                raise TypeError(f"Design parameter {name} must be an integer, not {v!r}")
            if kind == "log2":
                if v < 1 or v & (v - 1):
                    raise ValueError(f"Design parameter {name} must be a power of two, not {v}")
                field = int(v).bit_length() - 1
            else:
                field = int(v) - offset
            if not 0 <= field < 1 << bits:
                raise ValueError(f"Design parameter {name} must be between {offset} and "
                                 f"{(1 << bits) - 1 + offset} to fit {reg}, not {v}")
            value |= field << lsb
        regs[reg] = value
    modes = _grand_mode_names()
    chosen = modes if p["grand_modes"] is None else p["grand_modes"]
    if isinstance(chosen, str) or not hasattr(chosen, "__iter__"):
        raise TypeError(f"Grand modes must be an iterable of mode names, not {chosen!r}")
    chosen = set(chosen)
    if chosen - set(modes):
        raise ValueError(f"Grand modes must be names of {', '.join(modes)}, not "
                         f"{sorted(chosen - set(modes))}")
    regs["ID_ENGINE"] |= sum(1 << (_GRAND_MODES_LSB + k) for k, m in enumerate(modes)
                             if m in chosen)
    return regs


def decode_design_registers(id_matrix, id_engine):
    """The generator parameters (dict, the keys of :data:`DESIGN_PARAMS`) that register values
    ``id_matrix`` and ``id_engine`` carry; ``grand_modes`` is a tuple in
    :data:`lowbit.sim.grand.MODES` order. The inverse of :func:`design_registers`."""
    out = {}
    for reg, value in (("ID_MATRIX", id_matrix), ("ID_ENGINE", id_engine)):
        for name, lsb, bits, kind, offset in _ID_FIELDS[reg]:
            field = int(value) >> lsb & ((1 << bits) - 1)
            out[name] = {"log2": 1 << field, "bool": bool(field),
                         "not": not field}.get(kind, field + offset)
    modes = _grand_mode_names()
    out["grand_modes"] = tuple(m for k, m in enumerate(modes)
                               if int(id_engine) >> (_GRAND_MODES_LSB + k) & 1)
    return out


def identity_registers(identity, **design):
    """Values of the constant identification registers of a design, by register name:
    ``ID_MAGIC`` .. ``ID_FRAME`` from ``identity`` (the IDENTIFY record) and ``ID_MATRIX`` /
    ``ID_ENGINE`` from the generator parameters ``design`` (:func:`design_registers`)."""
    return {
        "ID_MAGIC": int.from_bytes(identity.magic, "little"),
        "ID_VERSION": identity.protocol | identity.design[0] << 8 | identity.design[1] << 16,
        "ID_PARAMS": (identity.lanes | identity.engines << 8 | int(identity.use_spram) << 16
                      | int(not identity.seq_control) << 17),
        "ID_SCRATCH": identity.scratch_bytes,
        "ID_FRAME": identity.frame_bytes,
        **design_registers(**design),
    }


def _crc_table():
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
        table.append(crc)
    return table


_CRC_TABLE = _crc_table()


def crc16(data, crc=0xFFFF):
    """CRC-16/CCITT-FALSE of ``data`` (bytes-like or iterable of ints), continuing from ``crc``.

    >>> hex(crc16(b"123456789"))
    '0x29b1'
    """
    for byte in bytes(data):
        crc = ((crc << 8) & 0xFFFF) ^ _CRC_TABLE[(crc >> 8) ^ byte]
    return crc


class FrameError(ValueError):
    """A byte string is not one well-formed frame."""


def _encode(sof, code, payload):
    payload = bytes(payload)
    if not 0 <= code <= 0xFF:
        raise ValueError(f"Opcode or status must be a byte, not {code!r}")
    if len(payload) > MAX_LENGTH:
        raise ValueError(f"Payload must be at most {MAX_LENGTH} bytes, not {len(payload)}")
    body = bytes([code]) + len(payload).to_bytes(2, "little") + payload
    return bytes([sof]) + body + crc16(body).to_bytes(2, "little")


def encode_request(opcode, payload=b""):
    """Request frame bytes for ``opcode`` (int or :class:`Opcode`) and ``payload``."""
    return _encode(SOF_REQUEST, int(opcode), payload)


def encode_reply(status, payload=b""):
    """Reply frame bytes for ``status`` (int or :class:`Status`) and ``payload``."""
    return _encode(SOF_REPLY, int(status), payload)


def _decode(sof, frame):
    frame = bytes(frame)
    if len(frame) < 6:
        raise FrameError(f"A frame has at least 6 bytes, not {len(frame)}")
    if frame[0] != sof:
        raise FrameError(f"Start of frame must be 0x{sof:02X}, not 0x{frame[0]:02X}")
    n = int.from_bytes(frame[2:4], "little")
    if len(frame) != n + 6:
        raise FrameError(f"Length field says {n} payload bytes, frame has {len(frame) - 6}")
    crc = int.from_bytes(frame[-2:], "little")
    if crc != crc16(frame[1:-2]):
        raise FrameError(f"CRC mismatch: frame 0x{crc:04X}, computed 0x{crc16(frame[1:-2]):04X}")
    return frame[1], frame[4:-2]


def decode_request(frame):
    """``(opcode, payload)`` of one request frame; :class:`FrameError` if malformed."""
    return _decode(SOF_REQUEST, frame)


def decode_reply(frame):
    """``(status, payload)`` of one reply frame; :class:`FrameError` if malformed."""
    return _decode(SOF_REPLY, frame)


class ReplyParser:
    """Incremental reply parser for the host side.

    :meth:`feed` takes received bytes and returns the complete replies found so far as
    ``(status, payload)`` pairs. Bytes before a 0x5A start byte are counted in :attr:`skipped`;
    a reply with a bad CRC raises :class:`FrameError` (the parser is reset first).
    """

    def __init__(self):
        self.skipped = 0
        self._buf = bytearray()

    @property
    def pending(self):
        """Bytes of an incomplete reply held so far."""
        return len(self._buf)

    def needed(self):
        """How many more bytes complete the reply in progress (at least 1 when idle)."""
        if len(self._buf) < 4:
            return 6 - len(self._buf) if self._buf else 6
        return int.from_bytes(self._buf[2:4], "little") + 6 - len(self._buf)

    def feed(self, data):
        replies = []
        for byte in bytes(data):
            if not self._buf:
                if byte != SOF_REPLY:
                    self.skipped += 1
                    continue
            self._buf.append(byte)
            if len(self._buf) >= 4 and self.needed() == 0:
                frame, self._buf = bytes(self._buf), bytearray()
                replies.append(decode_reply(frame))
        return replies

    def reset(self):
        self._buf = bytearray()


def reg_read_payload(index):
    return int(index).to_bytes(2, "little")


def reg_write_payload(index, value):
    return int(index).to_bytes(2, "little") + (int(value) & 0xFFFFFFFF).to_bytes(4, "little")


def mem_read_payload(addr, count):
    return int(addr).to_bytes(4, "little") + int(count).to_bytes(2, "little")


def mem_write_payload(addr, data):
    return int(addr).to_bytes(4, "little") + bytes(data)


class DeviceModel:
    """Behavioural reference of the accelerator's host link, byte for byte.

    Feed it the bytes the host sends with :meth:`feed` and model an inter-byte timeout with
    :meth:`timeout`; both return the reply bytes the device sends. :attr:`scratch` (bytearray)
    and :attr:`regs` (index -> value) are the device state; :attr:`machine` (a
    :class:`lowbit.sim.program.Machine` sharing them) holds the weight banks, LUT tables, grand unit
    and rounding PRNG and runs ``RUN`` programs. UART-level errors (framing, overrun) are not
    modelled; ``UART_ERRORS`` reads 0. ``RUN`` replies carry ``cycles = 0`` (the model cannot
    predict the hardware's cycle count).

    Parameters
    ----------
    lanes, scratch_bytes, frame_bytes, use_spram, lut_tables, grand : design parameters, as in
        :class:`lowbit.hw.top.Accelerator` (``scratch_bytes=None``: 131072 with SPRAM, else 4096).
        Every parameter the top takes is checked by the top's own rules
        (:func:`lowbit.sim.topparams.check_top_params`): the model accepts exactly the
        parameters the gateware accepts, hardware-only ones included.
    grand_modes : iterable of str, optional
        Modes built into the grand unit (default all; a mode left out acts as normal).
    sequencer, bfp, quantiser, discrete : bool
        The sequencer (``RUN``) and, with it only, the engines of the MATVEC, QUANT and DMATVEC
        instructions.
    matrix_lanes, block, max_blocks, weight_depth, frac_bits, rand_bits, disc_acc_width : int
        Sequencer and engine parameters (:class:`lowbit.sim.program.Design`); ``block`` and
        ``weight_depth`` powers of two (as in the gateware; ``ID_MATRIX`` carries their log2).
    code_bits : int
        Largest discrete code width of the discrete unit and the quantiser (reported in
        ``ID_ENGINE``; the model itself accepts every code width).
    bfp_stochastic, bfp_predictor, bfp_mant_width : bool
        The BFP column has stochastic rounding / the predicted exponent selector / its output
        mantissa width from ``MANT_WIDTH`` (:class:`lowbit.sim.program.Design`; without one a
        MATVEC needing it fails with ``BAD_OPCODE``). ``bfp_acc_block_ram``, ``bfp_pipelined``
        and ``bfp_pipelined_combiner`` are hardware-only.
    busy_count : bool
        The device counts the matrix engine's busy cycles; without it RUN replies carry
        ``busy = 0xFFFFFFFF`` (:data:`lowbit.sim.program.NOT_COUNTED`).
    seq_control : bool
        The sequencer has the control and data-movement instructions (JUMP, LOOP, DJNZ,
        SETOFS, ADDOFS, MOVE, LUT; :class:`lowbit.sim.program.Design` ``seq_control``).
    clk_freq, baud : int or float, int
        Clock (Hz) and UART rate, reported by IDENTIFY (``clk_hz`` rounded).
    engines : int, optional
        Engine bitmask of the identity record; default: derived from the parameters.
    lut_wide_tables : int
        Wide (513 x 16-bit) slots of the LUT engine, 0..16 (default 0), served by
        ``LUT_WRITE_WIDE`` / ``LUT_APPLY_WIDE`` and listed as the ``lut_wide`` engine. A
        protocol-model parameter: the gateware top has no wide slots yet (its LUT handler
        answers those opcodes ``BAD_OPCODE``, as the model does with 0).
    **hardware
        Parameters of :class:`lowbit.hw.top.Accelerator` that do not change the protocol
        (:data:`HARDWARE_ONLY`, e.g. ``clk_freq``), checked and otherwise ignored so that one
        set of top parameters builds both.

    Raises
    ------
    TypeError, ValueError
        For a parameter the top refuses (same messages), an unknown parameter, or a model
        parameter (``frac_bits``, ``rand_bits``, ``disc_acc_width``, ``engines``) out of range.
    """

    #: Top parameters without effect on the protocol.
    HARDWARE_ONLY = frozenset({"timeout_bits", "uart", "simulation", "multiplier", "dsp_lanes",
                               "scratch_write_addr", "drain_lanes",
                               "matvec_x_buffer", "seq_pipelined", "matvec_bias_fifo",
                               "bfp_acc_block_ram", "bfp_pipelined", "uart_ddr",
                               "bfp_pipelined_combiner"})

    def __init__(self, *, lanes=2, scratch_bytes=None, frame_bytes=512, use_spram=False,
                 lut_tables=4, grand=True, grand_modes=None, engines=None, sequencer=False,
                 matrix_lanes=8, block=16, max_blocks=16, weight_depth=512, bfp=True,
                 quantiser=True, discrete=True, frac_bits=3, rand_bits=8, disc_acc_width=16,
                 code_bits=3, bfp_stochastic=True, bfp_predictor=True, busy_count=True,
                 bfp_mant_width=True, clk_freq=12e6, baud=1_000_000, lut_wide_tables=0,
                 seq_control=True, **hardware):
        unknown = set(hardware) - self.HARDWARE_ONLY
        if unknown:
            raise TypeError(f"Unknown DeviceModel parameters: {', '.join(sorted(unknown))}")
        # The gateware's own rules (lowbit.hw.top.Accelerator calls the same function).
        top = check_top_params(
            lanes=lanes, scratch_bytes=scratch_bytes, frame_bytes=frame_bytes,
            use_spram=use_spram, lut_tables=lut_tables, grand=grand, grand_modes=grand_modes,
            sequencer=sequencer, matrix_lanes=matrix_lanes, block=block, max_blocks=max_blocks,
            weight_depth=weight_depth, bfp=bfp, quantiser=quantiser, discrete=discrete,
            code_bits=code_bits, bfp_stochastic=bfp_stochastic, bfp_predictor=bfp_predictor,
            bfp_mant_width=bfp_mant_width, clk_freq=clk_freq, baud=baud,
            seq_control=seq_control, **hardware)
        scratch_bytes = top["scratch_bytes"]
        if not isinstance(lut_wide_tables, int) or isinstance(lut_wide_tables, bool):
            raise TypeError(f"Wide LUT table count must be an integer between 0 and 16, not "
                            f"{lut_wide_tables!r}")
        if not 0 <= lut_wide_tables <= 16:
            raise ValueError(f"Wide LUT table count must be an integer between 0 and 16, not "
                             f"{lut_wide_tables!r}")
        if engines is not None and (not isinstance(engines, int) or isinstance(engines, bool)
                                    or not 0 <= engines < 1 << len(ENGINE_BITS)):
            raise ValueError(f"The engine bitmask must be an integer between 0 and "
                             f"{(1 << len(ENGINE_BITS)) - 1}, not {engines!r}")
        present = {"grand": grand, "bfp": bfp and sequencer, "discrete": discrete and sequencer,
                   "quantiser": quantiser and sequencer, "lut": bool(lut_tables),
                   "sequencer": sequencer, "lut_wide": bool(lut_wide_tables)}
        if engines is None:
            engines = sum(1 << ENGINE_BITS[name] for name, on in present.items() if on)
        self.lanes = lanes
        self.grand = grand
        self.sequencer = sequencer
        self.frame_bytes = frame_bytes
        self.lut_tables = lut_tables
        #: Words per byte of the packed transfers' spans (PACKED_TRANSFERS).
        self.spans = {"word": 1, "block": block, "tile": matrix_lanes}
        self.design = Design(
            matrix_lanes=matrix_lanes, block=block, max_blocks=max_blocks,
            weight_depth=weight_depth, scratch_bytes=scratch_bytes, lanes=lanes,
            lut_tables=lut_tables, frac_bits=frac_bits, rand_bits=rand_bits,
            disc_acc_width=disc_acc_width, grand_modes=grand_modes,
            engines=frozenset(n for n, on in present.items()
                              if on and n not in ("sequencer", "lut_wide")),
            bfp_stochastic=bfp_stochastic, bfp_predictor=bfp_predictor,
            bfp_mant_width=bfp_mant_width, seq_control=seq_control)
        self.identity = Identity(MAGIC, PROTOCOL_VERSION, DESIGN_VERSION, lanes, scratch_bytes,
                                 frame_bytes, engines, use_spram, baud, round(clk_freq),
                                 seq_control=seq_control)
        self.code_bits = code_bits
        ids = identity_registers(self.identity, matrix_lanes=matrix_lanes, block=block,
                                 max_blocks=max_blocks, weight_depth=weight_depth,
                                 lut_tables=lut_tables, code_bits=code_bits,
                                 bfp_stochastic=bfp_stochastic, bfp_predictor=bfp_predictor,
                                 bfp_mant_width=bfp_mant_width, frac_bits=frac_bits,
                                 rand_bits=rand_bits, disc_acc_width=disc_acc_width,
                                 grand_modes=grand_modes)
        self.regs = {r.index: ids.get(r.name, r.reset) for r in REGISTERS}
        self.scratch = bytearray(scratch_bytes)
        #: Byte tables of the LUT engine, ``luts[table][code]`` (power-on contents are 0).
        self.luts = [bytearray(256) for _ in range(lut_tables)]
        #: Wide slots of the LUT engine, 513 16-bit words each (power-on contents are 0).
        self.wide_luts = [np.zeros(513, dtype=np.uint16) for _ in range(lut_wide_tables)]
        self.machine = Machine(self.design, scratch=self.scratch, regs=self.regs, luts=self.luts,
                               busy_count=busy_count)
        #: Outcome (:class:`lowbit.sim.program.RunResult`) of the last RUN that executed.
        self.last_run = None
        self.skipped = 0
        self.errors = 0
        self._state = "idle"
        self._buf = bytearray()
        self._drain = 0

    # The grand unit lives in the machine (the GRAND instruction shares it).
    grand_prng = property(lambda self: self.machine.grand_prng)
    grand_mode = property(lambda self: self.machine.grand_mode)
    grand_pending = property(lambda self: self.machine.grand_pending)

    @property
    def in_frame(self):
        """True while the parser is inside a frame (a timeout would produce a reply)."""
        return self._state != "idle"

    # -- parser ---------------------------------------------------------------------------------
    def feed(self, data):
        out = bytearray()
        for byte in bytes(data):
            out += self._byte(byte)
        return bytes(out)

    def timeout(self):
        """An inter-byte timeout elapsed; returns the reply it causes (may be empty)."""
        state, self._state, self._buf = self._state, "idle", bytearray()
        if state == "idle":
            return b""
        return self._reply(Status.BAD_LENGTH if state == "drain" else Status.TRUNCATED)

    def _byte(self, byte):
        if self._state == "idle":
            if byte == SOF_REQUEST:
                self._state, self._buf = "frame", bytearray()
            else:
                self.skipped = min(self.skipped + 1, 0xFFFF)
            return b""
        if self._state == "drain":
            self._drain -= 1
            if self._drain == 0:
                self._state = "idle"
                return self._reply(Status.BAD_LENGTH)
            return b""
        self._buf.append(byte)
        if len(self._buf) == 3:
            n = int.from_bytes(self._buf[1:3], "little")
            if n > self.frame_bytes:
                self._state, self._drain = "drain", n + 2
            return b""
        if len(self._buf) >= 5 and len(self._buf) == int.from_bytes(self._buf[1:3], "little") + 5:
            frame, self._state, self._buf = bytes(self._buf), "idle", bytearray()
            if int.from_bytes(frame[-2:], "little") != crc16(frame[:-2]):
                return self._reply(Status.BAD_CRC)
            return self._execute(frame[0], frame[3:-2])
        return b""

    def _reply(self, status, payload=b""):
        if status != Status.OK:
            self.errors = min(self.errors + 1, 0xFFFF)
        return encode_reply(status, payload)

    # -- command execution ----------------------------------------------------------------------
    def _execute(self, opcode, payload):
        n = len(payload)
        size = len(self.scratch)
        if opcode == Opcode.PING:
            return self._reply(Status.OK, payload)
        if opcode == Opcode.IDENTIFY:
            if n != 0:
                return self._reply(Status.BAD_LENGTH)
            return self._reply(Status.OK, self.identity.to_bytes())
        if opcode in (Opcode.REG_READ, Opcode.REG_WRITE):
            if n != (2 if opcode == Opcode.REG_READ else 6):
                return self._reply(Status.BAD_LENGTH)
            reg = _REGISTER_BY_INDEX.get(int.from_bytes(payload[0:2], "little"))
            if reg is None:
                return self._reply(Status.BAD_ADDRESS)
            if opcode == Opcode.REG_READ:
                return self._reply(Status.OK, self._read_reg(reg).to_bytes(4, "little"))
            if reg.access != "rw":
                return self._reply(Status.READ_ONLY)
            self.machine.write_reg(reg.index, int.from_bytes(payload[2:6], "little"))
            return self._reply(Status.OK)
        if opcode in (Opcode.MEM_READ, Opcode.MEM_WRITE):
            if (n != 6) if opcode == Opcode.MEM_READ else (n < 4):
                return self._reply(Status.BAD_LENGTH)
            addr = int.from_bytes(payload[0:4], "little")
            count = int.from_bytes(payload[4:6], "little") if opcode == Opcode.MEM_READ else n - 4
            if addr >= size:
                return self._reply(Status.BAD_ADDRESS)
            if addr + count > size or count > self.frame_bytes:
                return self._reply(Status.BAD_LENGTH)
            if opcode == Opcode.MEM_READ:
                return self._reply(Status.OK, bytes(self.scratch[addr:addr + count]))
            self.scratch[addr:addr + count] = payload[4:]
            return self._reply(Status.OK)
        if opcode in PACKED_TRANSFERS:
            return self._execute_packed(opcode, payload)
        if opcode in (Opcode.GRAND_SEED, Opcode.GRAND_SAMPLES) and self.grand:
            return self._execute_grand(opcode, payload)
        if opcode in (Opcode.LUT_WRITE, Opcode.LUT_APPLY) and self.lut_tables:
            return self._execute_lut(opcode, payload)
        if opcode in (Opcode.LUT_WRITE_WIDE, Opcode.LUT_APPLY_WIDE) and self.wide_luts:
            return self._execute_lut_wide(opcode, payload)
        if opcode == Opcode.RUN and self.sequencer:
            return self._execute_run(payload)
        return self._reply(Status.BAD_OPCODE)

    def _execute_packed(self, opcode, payload):
        """MEM_READ_LOW / MEM_WRITE_LOW / MEM_READ_HIGH / MEM_FILL_HIGH: checked like
        MEM_READ / MEM_WRITE (length; address at or past the end, or odd; the spans past the
        end or a reply longer than ``frame_bytes``), then byte ``k`` of the data is lane
        ``lane`` of words ``span·k`` .. ``span·k + span - 1`` after ``addr`` (written to all of
        them; read from the first)."""
        writes, lane, span = PACKED_TRANSFERS[opcode]
        span = self.spans[span]
        n = len(payload)
        if (n < 4) if writes else (n != 6):
            return self._reply(Status.BAD_LENGTH)
        addr = int.from_bytes(payload[0:4], "little")
        count = n - 4 if writes else int.from_bytes(payload[4:6], "little")
        if addr >= len(self.scratch) or addr & 1:
            return self._reply(Status.BAD_ADDRESS)
        if addr + 2 * span * count > len(self.scratch) or count > self.frame_bytes:
            return self._reply(Status.BAD_LENGTH)
        first = addr + lane
        if not writes:
            return self._reply(Status.OK, bytes(self.scratch[first:first + 2 * span * count:
                                                             2 * span]))
        for k, byte in enumerate(payload[4:]):
            self.scratch[first + 2 * span * k:first + 2 * span * (k + 1):2] = bytes([byte]) * span
        return self._reply(Status.OK)

    def _execute_run(self, payload):
        if len(payload) != 8:
            return self._reply(Status.BAD_LENGTH)
        start, limit = struct.unpack("<2I", bytes(payload))
        if start & 1 or start + 16 > len(self.scratch):
            return self._reply(Status.BAD_ADDRESS)
        if limit == 0:
            return self._reply(Status.BAD_LENGTH)
        self.last_run = result = self.machine.run(start, limit)
        return self._reply(result.status, result.payload())

    def _execute_grand(self, opcode, payload):
        n = len(payload)
        if opcode == Opcode.GRAND_SEED:
            if n != 16 * self.lanes:
                return self._reply(Status.BAD_LENGTH)
            self.machine.grand_seed(np.frombuffer(bytes(payload), dtype="<u8")
                                    .reshape(self.lanes, 2))
            return self._reply(Status.OK)
        if n != 3:
            return self._reply(Status.BAD_LENGTH)
        count, fmt = int.from_bytes(payload[0:2], "little"), payload[2]
        if fmt > 1:
            return self._reply(Status.BAD_ADDRESS)
        size = 4 if fmt else 2
        if count * size > self.frame_bytes:
            return self._reply(Status.BAD_LENGTH)
        taken = self.machine.grand_take(count)
        return self._reply(Status.OK, b"".join(
            (f32 if fmt else f16).to_bytes(size, "little") for f16, f32 in taken))

    def _execute_lut(self, opcode, payload):
        n = len(payload)
        if n < (1 if opcode == Opcode.LUT_APPLY else 2):
            return self._reply(Status.BAD_LENGTH)
        table = payload[0]
        if table >= self.lut_tables:
            return self._reply(Status.BAD_ADDRESS)
        if opcode == Opcode.LUT_APPLY:
            return self._reply(Status.OK, bytes(self.luts[table][c] for c in payload[1:]))
        start, entries = payload[1], payload[2:]
        if start + len(entries) > 256:
            return self._reply(Status.BAD_LENGTH)
        self.luts[table][start:start + len(entries)] = entries
        return self._reply(Status.OK)

    def _execute_lut_wide(self, opcode, payload):
        """LUT_WRITE_WIDE / LUT_APPLY_WIDE, checked whole before anything changes: a short or
        odd payload -> BAD_LENGTH; slot >= ``lut_wide_tables`` -> BAD_ADDRESS; (write) words
        past entry 512 -> BAD_LENGTH; (apply) format > 2 -> BAD_ADDRESS, a reply longer than
        ``frame_bytes`` -> BAD_LENGTH. Lookups are :func:`lowbit.sim.lut.lookup_wide`."""
        from lowbit.sim.lut import WIDE_DEPTH, lookup_wide
        n = len(payload)
        write = opcode == Opcode.LUT_WRITE_WIDE
        if n < (3 if write else 2):
            return self._reply(Status.BAD_LENGTH)
        table = payload[0]
        if table >= len(self.wide_luts):
            return self._reply(Status.BAD_ADDRESS)
        if write:
            start, data = int.from_bytes(payload[1:3], "little"), bytes(payload[3:])
            if len(data) % 2 or start + len(data) // 2 > WIDE_DEPTH:
                return self._reply(Status.BAD_LENGTH)
            self.wide_luts[table][start:start + len(data) // 2] = np.frombuffer(data, "<u2")
            return self._reply(Status.OK)
        fmt, data = payload[1], bytes(payload[2:])
        if fmt > 2:
            return self._reply(Status.BAD_ADDRESS)
        if fmt == 2:
            codes = np.frombuffer(data, dtype=np.uint8)
        elif len(data) % 2:
            return self._reply(Status.BAD_LENGTH)
        else:
            codes = np.frombuffer(data, dtype="<i2")
        out = lookup_wide(self.wide_luts[table], codes, fmt)
        reply = out.astype("<i2").tobytes() if fmt != 1 else out.astype(np.int8).tobytes()
        if len(reply) > self.frame_bytes:
            return self._reply(Status.BAD_LENGTH)
        return self._reply(Status.OK, reply)

    def _read_reg(self, reg):
        if reg.name == "LINK_SKIPPED":
            return self.skipped
        if reg.name == "LINK_ERRORS":
            return self.errors
        return self.regs[reg.index]
