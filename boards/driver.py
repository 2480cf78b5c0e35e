"""Host driver of the accelerator: one API over a serial port or the simulated top.

>>> acc = Accelerator.simulated(scratch_bytes=1024)        # the real gateware, simulated
>>> acc.write_mem(0, np.arange(16, dtype=np.int16))
>>> acc.read_mem(0, 16, dtype=np.int16)
>>> acc = Accelerator.open("/dev/ttyUSB1", baud=1_000_000)  # a board

Every request is answered by one reply frame; a status other than OK raises the
:class:`LinkError` subclass named after the status (:class:`BadCRC`, :class:`BadOpcode`,
:class:`BadAddress`, :class:`BadLength`, :class:`Truncated`, :class:`ReadOnly`, :class:`Busy`).
A missing, short or corrupted reply raises :class:`NoReply` or :class:`ReplyError`. The protocol
itself is :mod:`sim.link`.
"""

import numpy as np

from sim.link import (
    DESIGN_VERSION,
    MAGIC,
    PROTOCOL_VERSION,
    REGISTER_BY_NAME,
    REGISTERS,
    FrameError,
    Identity,
    Opcode,
    ReplyParser,
    Status,
    encode_request,
    mem_read_payload,
    mem_write_payload,
    reg_read_payload,
    reg_write_payload,
)

__all__ = ["Accelerator", "LinkError", "StatusError", "BadCRC", "BadOpcode", "BadAddress",
           "BadLength", "Truncated", "ReadOnly", "Busy", "NoReply", "ReplyError",
           "IdentityError"]


class LinkError(RuntimeError):
    """Base of every host-link failure."""


class StatusError(LinkError):
    """The device answered with an error status (:attr:`status`)."""
    status = None

    def __init__(self, message, status=None):
        super().__init__(message)
        if status is not None:
            self.status = status


class BadCRC(StatusError):
    status = Status.BAD_CRC


class BadOpcode(StatusError):
    status = Status.BAD_OPCODE


class BadAddress(StatusError):
    status = Status.BAD_ADDRESS


class BadLength(StatusError):
    status = Status.BAD_LENGTH


class Truncated(StatusError):
    status = Status.TRUNCATED


class ReadOnly(StatusError):
    status = Status.READ_ONLY


class Busy(StatusError):
    status = Status.BUSY


class NoReply(LinkError):
    """No (complete) reply arrived within the timeout."""


class ReplyError(LinkError):
    """A reply frame was malformed (bad CRC of the reply)."""


class IdentityError(LinkError):
    """The device is not a lowbit accelerator of a compatible version."""


_STATUS_ERRORS = {cls.status: cls for cls in
                  (BadCRC, BadOpcode, BadAddress, BadLength, Truncated, ReadOnly, Busy)}


class Accelerator:
    """Host driver. Build it with :meth:`open` (board) or :meth:`simulated` (gateware sim).

    Parameters
    ----------
    port
        An object with pyserial's ``write(bytes)``, ``read(n)`` and ``reset_input_buffer()``.
    check : bool
        Run :meth:`identify` now (raises :class:`IdentityError` for a foreign device).

    Attributes
    ----------
    identity : sim.link.Identity or None
        The record from the last :meth:`identify`.
    """

    def __init__(self, port, *, check=True):
        self.port = port
        self.identity = None
        self._parser = ReplyParser()
        if check:
            self.identify()

    @classmethod
    def open(cls, port, baud=1_000_000, *, timeout=1.0, check=True):
        """Open a board on serial ``port`` (e.g. ``"/dev/ttyUSB1"``) with pyserial."""
        try:
            import serial
        except ImportError as e:  # pragma: no cover - pyserial is a dependency
            raise LinkError("pyserial is not installed (pip install pyserial)") from e
        try:
            ser = serial.Serial(port, baudrate=baud, timeout=timeout)
        except serial.SerialException as e:
            raise LinkError(f"Cannot open serial port {port!r}: {e}") from e
        ser.reset_input_buffer()
        return cls(ser, check=check)

    @classmethod
    def simulated(cls, *, level="byte", baud_error=0.0, timeout_cycles=200_000, check=True,
                  simulator="amaranth", **params):
        """The real top in simulation (:class:`sim.transport.SimulatedSerial`).

        ``params`` are :class:`hw.top.Accelerator` parameters; ``level`` is ``"byte"`` (byte
        stream shortcut, fast) or ``"uart"`` (bit-level 8N1); ``simulator`` is ``"amaranth"``
        (Amaranth's simulator) or ``"cxxrtl"`` (compiled, ~100x faster, byte level only).
        """
        from sim.transport import SimulatedSerial
        port = SimulatedSerial(level=level, baud_error=baud_error,
                               timeout_cycles=timeout_cycles, simulator=simulator, **params)
        return cls(port, check=check)

    def close(self):
        self.port.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- frames ----------------------------------------------------------------------------
    def send(self, opcode, payload=b""):
        """Send one request and return the reply as ``(status, payload)`` (no status check)."""
        self._parser.reset()
        flush = getattr(self.port, "reset_input_buffer", None)
        if flush is not None:
            flush()    # drop a late reply to an earlier, timed-out request
        self.port.write(encode_request(opcode, payload))
        while True:
            need = self._parser.needed()
            data = self.port.read(need)
            if len(data) == 0:
                raise NoReply(f"No reply to opcode 0x{int(opcode):02X} within the timeout "
                              f"({self._parser.pending} bytes of a reply received)")
            try:
                replies = self._parser.feed(data)
            except FrameError as e:
                raise ReplyError(f"Corrupted reply to opcode 0x{int(opcode):02X}: {e}") from e
            if replies:
                status, body = replies[0]
                try:
                    status = Status(status)
                except ValueError:
                    pass
                return status, body

    def command(self, opcode, payload=b""):
        """Send one request; return the reply payload or raise the status's error."""
        status, body = self.send(opcode, payload)
        if status != Status.OK:
            name = status.name if isinstance(status, Status) else f"0x{status:02X}"
            op = Opcode(opcode).name if opcode in Opcode._value2member_map_ else f"0x{opcode:02X}"
            cls = _STATUS_ERRORS.get(status, StatusError)
            raise cls(f"{op} failed with status {name}", status)
        return body

    # -- commands --------------------------------------------------------------------------
    def ping(self, payload=b""):
        """Round trip; the device echoes ``payload``. Returns the echo."""
        payload = bytes(payload)
        echo = self.command(Opcode.PING, payload)
        if echo != payload:
            raise ReplyError(f"PING echo differs: sent {payload!r}, got {echo!r}")
        return echo

    def identify(self):
        """Read and check the identification record; returns :class:`sim.link.Identity`.

        Raises
        ------
        IdentityError
            If the magic is not ``b"LOWB"``, the protocol version differs or the design's
            major version differs from the driver's.
        """
        body = self.command(Opcode.IDENTIFY)
        try:
            ident = Identity.from_bytes(body)
        except FrameError as e:
            raise IdentityError(f"Malformed identification record: {e}") from e
        if ident.magic != MAGIC:
            raise IdentityError(f"Not a lowbit accelerator: magic {ident.magic!r}, "
                                f"expected {MAGIC!r}")
        if ident.protocol != PROTOCOL_VERSION:
            raise IdentityError(f"Protocol version {ident.protocol} on the device, driver "
                                f"speaks {PROTOCOL_VERSION}")
        if ident.design[0] != DESIGN_VERSION[0]:
            raise IdentityError(f"Design version {ident.design[0]}.{ident.design[1]} on the "
                                f"device, driver expects {DESIGN_VERSION[0]}.x")
        self.identity = ident
        return ident

    @staticmethod
    def _reg_index(reg):
        if isinstance(reg, str):
            try:
                return REGISTER_BY_NAME[reg.upper()].index
            except KeyError:
                raise KeyError(f"Unknown register {reg!r}; known: "
                               f"{', '.join(r.name for r in REGISTERS)}") from None
        if not isinstance(reg, (int, np.integer)) or isinstance(reg, bool):
            raise TypeError(f"Register must be a name or an index, not {reg!r}")
        return int(reg)

    def read_reg(self, reg):
        """Value (int) of register ``reg`` (name or index)."""
        body = self.command(Opcode.REG_READ, reg_read_payload(self._reg_index(reg)))
        if len(body) != 4:
            raise ReplyError(f"REG_READ reply has {len(body)} bytes, not 4")
        return int.from_bytes(body, "little")

    def write_reg(self, reg, value):
        """Write ``value`` (0 .. 2**32-1) to register ``reg`` (name or index)."""
        value = int(value)
        if not 0 <= value < 1 << 32:
            raise ValueError(f"Register value must fit 32 bits, not {value}")
        self.command(Opcode.REG_WRITE, reg_write_payload(self._reg_index(reg), value))

    def _chunk(self):
        if self.identity is None:
            self.identify()
        return self.identity.frame_bytes

    def write_mem(self, addr, data):
        """Write ``data`` (numpy array or bytes-like) at byte address ``addr`` of the scratchpad.

        Arrays are written in little-endian byte order, in frames of at most ``frame_bytes``.
        """
        if isinstance(data, np.ndarray):
            arr = np.ascontiguousarray(data)
            raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        else:
            raw = bytes(data)
        step = self._chunk() - 4
        for k in range(0, len(raw), step):
            self.command(Opcode.MEM_WRITE, mem_write_payload(addr + k, raw[k:k + step]))

    def read_mem(self, addr, n, dtype=np.uint8):
        """Read ``n`` elements of ``dtype`` from byte address ``addr``; returns an array."""
        dtype = np.dtype(dtype).newbyteorder("<")
        total = int(n) * dtype.itemsize
        step = self._chunk()
        raw = bytearray()
        for k in range(0, total, step):
            count = min(step, total - k)
            body = self.command(Opcode.MEM_READ, mem_read_payload(addr + k, count))
            if len(body) != count:
                raise ReplyError(f"MEM_READ reply has {len(body)} bytes, not {count}")
            raw += body
        return np.frombuffer(bytes(raw), dtype=dtype).astype(dtype.newbyteorder("="))

    # -- transfer-LUT engine --------------------------------------------------------------------
    def lut_load(self, table, values):
        """Load byte table ``table`` (0 .. lut_tables-1) with 256 entries.

        ``values`` is any array of 256 int8 or uint8 codes (e.g. from
        :func:`sim.lut.transfer_table`); they are sent as their uint8 bit patterns.

        Raises
        ------
        ValueError
            If ``values`` does not hold 256 entries in -128..255.
        LinkError
            ``BadAddress`` for a table the design does not have.
        """
        values = np.asarray(values)
        if values.shape != (256,) or values.min(initial=0) < -128 or values.max(initial=0) > 255:
            raise ValueError(f"A transfer table needs 256 entries in -128..255, not an array of "
                             f"shape {values.shape}")
        raw = (values.astype(np.int64) & 0xFF).astype(np.uint8).tobytes()
        step = max(self._chunk() - 2, 1)
        for start in range(0, 256, step):
            chunk = raw[start:start + step]
            self.command(Opcode.LUT_WRITE, bytes([table, start]) + chunk)

    def lut_apply(self, table, codes):
        """Look ``codes`` (int8 or uint8 array) up in byte table ``table``; returns uint8."""
        codes = np.asarray(codes)
        if codes.ndim != 1 or (codes.size and (codes.min() < -128 or codes.max() > 255)):
            raise ValueError("Codes must be a 1-D array of values in -128..255")
        raw = (codes.astype(np.int64) & 0xFF).astype(np.uint8).tobytes()
        step = max(self._chunk() - 1, 1)
        out = bytearray()
        for k in range(0, len(raw), step):
            chunk = raw[k:k + step]
            body = self.command(Opcode.LUT_APPLY, bytes([table]) + chunk)
            if len(body) != len(chunk):
                raise ReplyError(f"LUT_APPLY reply has {len(body)} bytes, not {len(chunk)}")
            out += body
        return np.frombuffer(bytes(out), dtype=np.uint8).copy()

    # -- grand unit -----------------------------------------------------------------------------
    def grand_seed(self, seed, mode=None):
        """Seed the grand unit from a 64-bit ``seed`` (states by :func:`sim.prng.seed_lanes`).

        ``mode`` (a ``sim.grand.MODES`` name or code 0..5) is written to ``GRAND_MODE`` first;
        the unit latches the mode at the seed, so this is how the mode changes.
        """
        from sim.grand import MODES
        from sim.prng import seed_lanes
        if mode is not None:
            code = MODES.index(mode) if isinstance(mode, str) and mode in MODES else mode
            if not isinstance(code, int) or isinstance(code, bool) or not 0 <= code < len(MODES):
                raise ValueError(f"Grand mode must be one of {', '.join(MODES)}, not {mode!r}")
            self.write_reg("GRAND_MODE", code)
        if self.identity is None:
            self.identify()
        state = seed_lanes(seed, self.identity.lanes)
        self.command(Opcode.GRAND_SEED, state.astype("<u8").tobytes())

    def grand_samples(self, n, dtype=np.float16):
        """The next ``n`` samples of the grand unit as ``float16`` or ``float32`` values."""
        dtype = np.dtype(dtype)
        if dtype not in (np.dtype(np.float16), np.dtype(np.float32)):
            raise ValueError(f"Sample type must be float16 or float32, not {dtype}")
        size = dtype.itemsize
        step = max(self._chunk() // size, 1)
        raw = bytearray()
        for k in range(0, int(n), step):
            count = min(step, int(n) - k)
            body = self.command(Opcode.GRAND_SAMPLES,
                                count.to_bytes(2, "little") + bytes([size == 4]))
            if len(body) != count * size:
                raise ReplyError(f"GRAND_SAMPLES reply has {len(body)} bytes, not {count * size}")
            raw += body
        return np.frombuffer(bytes(raw), dtype=dtype.newbyteorder("<")).astype(dtype)
