"""Host driver of the accelerator: one API over a serial port or the simulated top.

>>> acc = Accelerator.simulated(scratch_bytes=1024)        # the real gateware, simulated
>>> acc.write_mem(0, np.arange(16, dtype=np.int16))
>>> acc.read_mem(0, 16, dtype=np.int16)
>>> acc = Accelerator.open("/dev/ttyUSB1")                  # a board, at its profile's rate
>>> acc = Accelerator.model(sequencer=True, bfp=True)      # the protocol model (fast)

Layer programs (:mod:`lowbit.sim.program`): :meth:`Accelerator.load_network` places a network of
:mod:`lowbit.sim.network` layers on the device (weights through LOADW, biases, LUT tables, one
program); :meth:`Accelerator.run_network` runs a batch with one ``RUN`` per chunk that fits the
scratchpad. :meth:`~Accelerator.quantise`, :meth:`~Accelerator.bfp_matvec`,
:meth:`~Accelerator.discrete_matvec` and :meth:`~Accelerator.dense` run single operations the
same way; :meth:`~Accelerator.run`, :meth:`~Accelerator.load_program` and
:meth:`~Accelerator.load_weights` are the primitives.

Every request is answered by one reply frame; a status other than OK raises the
:class:`LinkError` subclass named after the status (:class:`BadCRC`, :class:`BadOpcode`,
:class:`BadAddress`, :class:`BadLength`, :class:`Truncated`, :class:`ReadOnly`, :class:`Busy`,
:class:`Limit`). A command needing an engine the device lacks raises :class:`MissingEngine`
before anything is sent.
A missing, short or corrupted reply raises :class:`NoReply` or :class:`ReplyError`. The protocol
itself is :mod:`lowbit.sim.link`.
"""

import contextlib
import time
import typing

import numpy as np

from lowbit.sim.link import (
    DESIGN_PARAMS,
    DESIGN_VERSION,
    ENGINE_BITS,
    IDENTITY_BYTES,
    MAGIC,
    MAX_LENGTH,
    PACKED_TRANSFERS,
    PROTOCOL_VERSION,
    REGISTER_BY_NAME,
    REGISTERS,
    FrameError,
    Identity,
    Opcode,
    ReplyParser,
    Status,
    decode_design_registers,
    encode_request,
    mem_read_payload,
    mem_write_payload,
    reg_read_payload,
    reg_write_payload,
)

__all__ = ["Accelerator", "LinkError", "StatusError", "BadCRC", "BadOpcode", "BadAddress",
           "BadLength", "Truncated", "ReadOnly", "Busy", "Limit", "NoReply", "ReplyError",
           "IdentityError", "MissingEngine", "PortError", "RunError", "Activations", "design_of",
           "device_params", "ID_REGISTERS"]


#: Fastest UART rate the driver opens a port at: the FT2232H's 12 Mbaud.
MAX_BAUD = 12_000_000


def profile_rates():
    """The distinct ``baud`` rates of the board profiles (:data:`lowbit.boards.profiles.BOARDS`),
    fastest first: the rates :meth:`Accelerator.open` tries when none is given."""
    from .profiles import BOARDS
    return sorted({p.top.get("baud", 1_000_000) for p in BOARDS.values()}, reverse=True)


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


class Limit(StatusError):
    """RUN stopped at its instruction limit (:attr:`result` says where)."""
    status = Status.LIMIT


class NoReply(LinkError):
    """No (complete) reply arrived within the timeout."""


class ReplyError(LinkError):
    """A reply frame was malformed (bad CRC of the reply)."""


class IdentityError(LinkError):
    """The device is not a lowbit accelerator of a compatible version."""


class MissingEngine(LinkError):
    """The command needs an engine the device's IDENTIFY record does not list."""


class PortError(LinkError):
    """The port is closed (:meth:`Accelerator.close`) or failed (an ``OSError`` of the serial
    port, e.g. pyserial's ``SerialException``)."""


class RunError(StatusError):
    """A RUN failed; :attr:`result` (:class:`lowbit.sim.program.RunResult`) has the status, the byte
    address of the failing instruction and the instruction count. The exception is raised as
    the status's class (e.g. :class:`BadAddress`) mixed with this one."""
    result = None


_STATUS_ERRORS = {cls.status: cls for cls in
                  (BadCRC, BadOpcode, BadAddress, BadLength, Truncated, ReadOnly, Busy, Limit)}
_RUN_ERRORS = {}


def _run_error(status):
    """The exception class of a failed RUN: the status's class and :class:`RunError`."""
    base = _STATUS_ERRORS.get(status, StatusError)
    if base not in _RUN_ERRORS:
        _RUN_ERRORS[base] = type(f"Run{base.__name__}", (base, RunError), {})
    return _RUN_ERRORS[base]


#: Most samples one :meth:`Accelerator.grand_samples` call takes (the unit's stream is endless;
#: a larger count is a mistake, not a request to wait for hours).
MAX_SAMPLES = 1 << 24

#: The exponent code of a NaN block (``docs/bfp.md``: the most negative 8-bit exponent).
NAN_EXPONENT = -128


class Activations(typing.NamedTuple):
    """Int8 codes ``m`` and exponents ``e`` (value ``m · 2^e``), shape ``(samples, rows)``."""
    m: np.ndarray
    e: np.ndarray

    def values(self):
        """The float64 values ``m · 2^e``; NaN where ``e`` is the NaN code −128 (``docs/bfp.md``:
        a block with a NaN or ±Inf operand, e.g. a weight or bias exponent of −128)."""
        e = np.asarray(self.e)
        out = np.ldexp(np.asarray(self.m).astype(np.float64), np.where(e == NAN_EXPONENT, 0, e))
        return np.where(e == NAN_EXPONENT, np.nan, out)


#: Identification registers :meth:`Accelerator.identify` reads after the IDENTIFY record.
ID_REGISTERS = ("ID_MATRIX", "ID_ENGINE")

#: Top parameters a device reports (IDENTIFY record, ``ID_MATRIX``, ``ID_ENGINE``) and their
#: defaults (those of :class:`lowbit.hw.top.Accelerator` and :class:`lowbit.sim.link.DeviceModel`;
#: ``scratch_bytes=None``: 131072 with SPRAM, else 4096).
_TOP_DEFAULTS = dict(lanes=2, scratch_bytes=None, frame_bytes=512, use_spram=False, grand=True,
                     sequencer=False, bfp=True, quantiser=True, discrete=True, seq_control=True,
                     **DESIGN_PARAMS)


def _grand_modes(modes):
    from lowbit.sim.grand import MODES
    return MODES if modes is None else tuple(m for m in MODES if m in set(modes))


def device_params(identity, registers):
    """The top parameters (names of :class:`lowbit.hw.top.Accelerator`) a device reports, from its
    IDENTIFY record ``identity`` and the values of ``ID_MATRIX`` / ``ID_ENGINE`` (``registers``,
    a dict by register name). ``bfp``, ``quantiser`` and ``discrete`` say whether the engine is
    present (they are always ``False`` without the sequencer)."""
    bits = {name: bool(identity.engines >> bit & 1) for name, bit in ENGINE_BITS.items()}
    return dict(lanes=identity.lanes, scratch_bytes=identity.scratch_bytes,
                frame_bytes=identity.frame_bytes, use_spram=identity.use_spram,
                grand=bits["grand"], sequencer=bits["sequencer"], bfp=bits["bfp"],
                quantiser=bits["quantiser"], discrete=bits["discrete"],
                seq_control=identity.seq_control,
                **decode_design_registers(registers["ID_MATRIX"], registers["ID_ENGINE"]))


def design_of(identity, registers):
    """The :class:`lowbit.sim.program.Design` of a device from its IDENTIFY record and the values of
    its ``ID_MATRIX`` / ``ID_ENGINE`` registers (``registers``, a dict by register name).

    Raises
    ------
    ValueError
        If the values describe no valid design.
    """
    from lowbit.sim.program import ENGINES, Design
    p = device_params(identity, registers)
    engines = frozenset(e for e in ENGINES if identity.engines >> ENGINE_BITS[e] & 1)
    kw = {k: p[k] for k in ("matrix_lanes", "block", "max_blocks", "weight_depth", "lut_tables",
                            "frac_bits", "rand_bits", "disc_acc_width", "grand_modes",
                            "bfp_stochastic", "bfp_predictor", "bfp_mant_width")}
    if "lut" not in engines:
        kw["lut_tables"] = 0
    return Design(scratch_bytes=identity.scratch_bytes, lanes=identity.lanes,
                  engines=engines - {"lut"}, matvec_samples=identity.design >= (0, 3),
                  seq_control=identity.seq_control, **kw)


def _expected_params(params):
    """The device parameters a top built with ``params`` reports (defaults filled in)."""
    exp = {**_TOP_DEFAULTS, **{k: v for k, v in params.items() if k in _TOP_DEFAULTS}}
    if exp["scratch_bytes"] is None:
        exp["scratch_bytes"] = 131072 if exp["use_spram"] else 4096
    exp["grand_modes"] = _grand_modes(exp["grand_modes"])
    if not exp["sequencer"]:
        exp.update(bfp=False, quantiser=False, discrete=False)
    if params.get("engines") is not None:       # lowbit.sim.link.DeviceModel's bitmask override
        exp.update({name: bool(params["engines"] >> ENGINE_BITS[name] & 1)
                    for name in ("grand", "sequencer", "bfp", "quantiser", "discrete")})
    return exp


def _mismatches(device, params):
    """``(name, device value, expected value)`` of every parameter where ``device`` (from
    :func:`device_params`) differs from a top built with ``params``."""
    exp = _expected_params(params)
    out = []
    for name, value in device.items():
        want = exp[name]
        if isinstance(want, bool):
            value = bool(value)
        if value != want:
            out.append((name, value, want))
    return out


class Accelerator:
    """Host driver. Build it with :meth:`open` (board) or :meth:`simulated` (gateware sim).

    Parameters
    ----------
    port
        An object with pyserial's ``write(bytes)``, ``read(n)`` and ``reset_input_buffer()``.
    check : bool
        Run :meth:`identify` now (raises :class:`IdentityError` for a foreign device).
    params : dict, optional
        The :class:`lowbit.hw.top.Accelerator` parameters the device is expected to have been built
        with (e.g. a board profile's ``top``; parameters it lacks mean the top's defaults,
        hardware-only ones such as ``baud`` are ignored). The design is always read from the
        device (:meth:`identify`); ``params`` only checks it: any disagreement raises
        :class:`IdentityError`. ``None``: no check.

    Attributes
    ----------
    identity : lowbit.sim.link.Identity or None
        The record from the last :meth:`identify`.
    device_params : dict or None
        The top parameters the device reported at the last :meth:`identify`
        (:func:`device_params`).
    network : lowbit.sim.program.NetworkLayout or None
        The network placed by the last :meth:`load_network`.
    bytes_sent, bytes_received : int
        Bytes written to and read from the port so far (frames of both directions, for the
        link's bytes per image).
    """

    def __init__(self, port, *, check=True, params=None):
        if not all(callable(getattr(port, name, None)) for name in ("write", "read")):
            raise TypeError(f"The port must have pyserial's write(bytes) and read(n) (a "
                            f"serial.Serial, or a lowbit.sim.rtl.transport port), not {port!r}")
        if not isinstance(check, bool):
            raise TypeError(f"check must be a bool, not {check!r}")
        if params is not None and not isinstance(params, dict):
            raise TypeError(f"Expected parameters must be a dict, not {params!r}")
        self.port = port
        self._closed = False
        self.identity = None
        self.device_params = None
        self._design = None
        self.params = None if params is None else dict(params)
        self.network = None
        self._program_count = None
        self._parser = ReplyParser()
        self.bytes_sent = self.bytes_received = 0
        if check:
            self.identify()

    @classmethod
    def open(cls, port, baud=None, *, timeout=1.0, check=True, params=None):
        """Open a board on serial ``port`` (e.g. ``"/dev/ttyUSB1"``) with pyserial; the design
        is read from the device; ``params`` (optional) are the top parameters the board's
        build is expected to have (e.g. its profile's), checked by :meth:`identify`.

        ``baud`` is the rate of the bitstream's UART. ``None`` (default): ``params["baud"]``
        when given, else each board profile's rate in turn, fastest first, until one answers
        IDENTIFY (the record reports the device's rate, :attr:`identity`). :meth:`identify`
        refuses a device whose reported rate differs from the port's.

        Raises
        ------
        TypeError, ValueError
            ``baud`` is not a positive integer (at most 12 Mbaud, the fastest bridge).
        LinkError
            The port cannot be opened; :class:`NoReply` when no rate tried gets an answer.
        """
        if baud is not None:
            baud = _check_int("Baud rate", baud, 1, MAX_BAUD)
        elif params is not None and params.get("baud") is not None:
            baud = _check_int("Baud rate", params["baud"], 1, MAX_BAUD)
        if timeout is not None and (isinstance(timeout, bool)
                                    or not isinstance(timeout, (int, float)) or timeout <= 0):
            raise ValueError(f"Timeout must be a positive number of seconds, not {timeout!r}")
        try:
            import serial
        except ImportError as e:  # pragma: no cover - pyserial is a dependency
            raise LinkError("pyserial is not installed (pip install pyserial)") from e
        rates = [baud] if baud is not None else profile_rates()
        try:
            ser = serial.Serial(port, baudrate=rates[0], timeout=timeout)
        except (serial.SerialException, ValueError) as e:
            raise LinkError(f"Cannot open serial port {port!r} at {rates[0]} baud: {e}") from e
        ser.reset_input_buffer()
        if len(rates) == 1 or not check:
            return cls(ser, check=check, params=params)
        for rate in rates:              # probe: a short timeout per rate
            try:
                ser.baudrate = rate
                ser.timeout = min(timeout or 1.0, 0.2)
                acc = cls(ser, check=False, params=params)
                acc.command(Opcode.IDENTIFY)
            except (LinkError, ValueError, OSError):
                continue
            ser.timeout = timeout
            acc.identify()
            return acc
        ser.close()
        raise NoReply(f"No lowbit device answers IDENTIFY on {port!r} at any board profile's "
                      f"rate ({', '.join(map(str, rates))} baud); give the bitstream's rate "
                      f"with baud= (--baud), or program the board (`lowbit flash`)")

    @classmethod
    def simulated(cls, *, level="byte", baud_error=0.0, timeout_cycles=200_000, check=True,
                  simulator="amaranth", cxxflags=None, **params):
        """The real top in simulation (:class:`lowbit.sim.rtl.transport.SimulatedSerial`).

        ``params`` are :class:`lowbit.hw.top.Accelerator` parameters; ``level`` is ``"byte"`` (byte
        stream shortcut, fast) or ``"uart"`` (bit-level 8N1); ``simulator`` is ``"amaranth"``
        (Amaranth's simulator) or ``"cxxrtl"`` (compiled, ~100x faster, byte level only;
        ``cxxflags``: its compiler flags, default :data:`lowbit.sim.rtl.cxxrtl.DEFAULT_CXXFLAGS`).
        """
        from lowbit.sim.rtl.transport import SimulatedSerial
        port = SimulatedSerial(level=level, baud_error=baud_error,
                               timeout_cycles=timeout_cycles, simulator=simulator,
                               cxxflags=cxxflags, **params)
        return cls(port, check=check, params=params)

    @classmethod
    def model(cls, *, check=True, **params):
        """The protocol model :class:`lowbit.sim.link.DeviceModel` behind
        :class:`lowbit.sim.rtl.transport.ModelSerial`: pure Python, instant, the reference of the
        real top with the same ``params`` (:class:`lowbit.hw.top.Accelerator` parameter names)."""
        from lowbit.sim.rtl.transport import ModelSerial
        return cls(ModelSerial(**params), check=check, params=params)

    def close(self):
        """Close the port; later commands raise :class:`PortError`. Closing twice is harmless."""
        if not self._closed:
            self._closed = True
            close = getattr(self.port, "close", None)
            if close is not None:
                close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- frames ----------------------------------------------------------------------------
    def send(self, opcode, payload=b""):
        """Send one request and return the reply as ``(status, payload)`` (no status check).

        Raises
        ------
        TypeError, ValueError
            For an ``opcode`` that is not an integer 0..255 or a ``payload`` that is not
            bytes-like or longer than a frame header can carry (65535 bytes).
        PortError
            The port is closed or failed.
        NoReply, ReplyError
            No (complete) reply within the port's timeout, or a corrupted one.
        """
        opcode = _check_int("Opcode", opcode, 0, 0xFF)
        payload = _bytes_like("Payload", payload)
        if len(payload) > MAX_LENGTH:
            raise ValueError(f"A payload has at most {MAX_LENGTH} bytes, not {len(payload)}")
        name = _opcode_name(opcode)
        if self._closed:
            raise PortError(f"Cannot send {name}: the port is closed (Accelerator.close() was "
                            f"called; open a new Accelerator)")
        if getattr(self.port, "is_open", True) is False:
            raise PortError(f"Cannot send {name}: the serial port {_port_name(self.port)} "
                            f"is closed")
        self._parser.reset()
        try:
            flush = getattr(self.port, "reset_input_buffer", None)
            if flush is not None:
                flush()    # drop a late reply to an earlier, timed-out request
            frame = encode_request(opcode, payload)
            self.port.write(frame)
            self.bytes_sent += len(frame)
            while True:
                need = self._parser.needed()
                data = self.port.read(need)
                self.bytes_received += len(data)
                if len(data) == 0:
                    raise NoReply(self._no_reply_message(opcode))
                try:
                    replies = self._parser.feed(data)
                except FrameError as e:
                    raise ReplyError(f"Corrupted reply to {name}: {e}") from e
                if replies:
                    status, body = replies[0]
                    try:
                        status = Status(status)
                    except ValueError:
                        pass
                    return status, body
        except OSError as e:          # pyserial's SerialException (PortNotOpenError, ...)
            raise PortError(f"Serial port {_port_name(self.port)} failed during {name}: "
                            f"{e}") from e

    def _no_reply_message(self, opcode):
        got = self._parser.pending
        baud = getattr(self.port, "baudrate", None)
        rate = f" (this port runs at {baud} baud)" if isinstance(baud, int) else ""
        return (f"No reply to {_opcode_name(opcode)} (opcode 0x{opcode:02X}) within the timeout "
                f"({got} bytes of a reply received). Likely causes: the wrong serial port "
                f"({_port_name(self.port)}), a baud rate other than the bitstream's{rate}, or a "
                f"board not programmed with the lowbit bitstream (`lowbit flash`)")

    def command(self, opcode, payload=b"", *, context=""):
        """Send one request; return the reply payload or raise the status's error
        (:class:`StatusError` subclass; ``context`` is appended to its message)."""
        status, body = self.send(opcode, payload)
        if status != Status.OK:
            self.command_error(opcode, status, context)
        return body

    # -- commands --------------------------------------------------------------------------
    def ping(self, payload=b""):
        """Round trip; the device echoes ``payload`` (bytes-like, at most ``frame_bytes``;
        longer: :class:`BadLength` from the device). Returns the echo."""
        payload = _bytes_like("PING payload", payload)
        echo = self.command(Opcode.PING, payload)
        if echo != payload:
            raise ReplyError(f"PING echo differs: sent {payload!r}, got {echo!r}")
        return echo

    def identify(self):
        """Read and check the identification record and registers; returns
        :class:`lowbit.sim.link.Identity`.

        After the IDENTIFY record it reads ``ID_MATRIX`` and ``ID_ENGINE`` (REG_READ), which
        with the record describe the design (:attr:`design`, :attr:`device_params`).

        Raises
        ------
        IdentityError
            If the magic is not ``b"LOWB"``, the protocol version differs, the design's major
            version differs from the driver's, the identification registers cannot be read
            (gateware older than design 0.2) or describe no valid design, or the device
            disagrees with the expected :attr:`params` (the message names every parameter with
            the device's and the expected value).
        """
        body = self.command(Opcode.IDENTIFY)
        if len(body) >= 5 and body[:4] != MAGIC:
            raise IdentityError(f"Not a lowbit accelerator: magic {body[:4]!r}, "
                                f"expected {MAGIC!r}")
        if len(body) >= 5 and body[4] != PROTOCOL_VERSION:
            # Checked before the record's length: version 2 had a 16-byte record.
            raise IdentityError(
                f"Protocol version {body[4]} on the device, driver speaks {PROTOCOL_VERSION} "
                f"(version 3 added the packed transfers and the link parameters to IDENTIFY): "
                f"rebuild and reprogram the board with this lowbit (`lowbit build`, "
                f"`lowbit flash`), or use the lowbit that built its bitstream")
        try:
            ident = Identity.from_bytes(body)
        except FrameError as e:
            raise IdentityError(f"Malformed identification record ({IDENTITY_BYTES} bytes "
                                f"expected): {e}") from e
        if ident.design[0] != DESIGN_VERSION[0]:
            raise IdentityError(f"Design version {ident.design[0]}.{ident.design[1]} on the "
                                f"device, driver expects {DESIGN_VERSION[0]}.x")
        regs = {}
        for name in ID_REGISTERS:
            try:
                regs[name] = self.read_reg(name)
            except (StatusError, ReplyError) as e:
                raise IdentityError(
                    f"The device (design {ident.design[0]}.{ident.design[1]}) cannot read the "
                    f"identification register {name} ({e}); its gateware predates design "
                    f"{DESIGN_VERSION[0]}.2, which reports the generator parameters: rebuild "
                    f"and reprogram it") from e
        params = device_params(ident, regs)
        try:
            design = design_of(ident, regs)
        except ValueError as e:
            raise IdentityError(f"The device's identification registers describe no valid "
                                f"design ({', '.join(f'{k}=0x{v:08X}' for k, v in regs.items())}"
                                f"): {e}") from e
        rate = getattr(self.port, "baudrate", None)
        if isinstance(rate, int) and not isinstance(rate, bool) and rate != ident.baud:
            raise IdentityError(f"The device's UART runs at {ident.baud} baud but the port at "
                                f"{rate} (they agree only within the UART's tolerance): open "
                                f"it with baud={ident.baud} (--baud {ident.baud})")
        if self.params is not None:
            bad = _mismatches(params, self.params)
            if bad:
                raise IdentityError("The device differs from the expected parameters: " + "; ".join(
                    f"{name}: device {dev!r}, expected {want!r}" for name, dev, want in bad))
        self.identity, self.device_params, self._design = ident, params, design
        return ident

    @staticmethod
    def _reg_index(reg):
        if isinstance(reg, str):
            try:
                return REGISTER_BY_NAME[reg.upper()].index
            except KeyError:
                raise ValueError(f"Unknown register {reg!r}; known: "
                                 f"{', '.join(r.name for r in REGISTERS)}") from None
        return _check_int("Register (a name or an index)", reg, 0, 0xFFFF)

    def read_reg(self, reg):
        """Value (int) of register ``reg`` (name or index).

        Raises
        ------
        TypeError, ValueError
            ``reg`` is neither a name nor an integer, an unknown name, or an index outside
            0..65535.
        BadAddress
            From the device: no register has that index.
        """
        body = self.command(Opcode.REG_READ, reg_read_payload(self._reg_index(reg)))
        if len(body) != 4:
            raise ReplyError(f"REG_READ reply has {len(body)} bytes, not 4")
        return int.from_bytes(body, "little")

    def write_reg(self, reg, value):
        """Write ``value`` (an integer 0 .. 2**32-1) to register ``reg`` (name or index); the
        register keeps its low ``width`` bits.

        Raises
        ------
        TypeError, ValueError
            As :meth:`read_reg` for ``reg``; a ``value`` that is not an integer (bools, floats
            and strings are refused) or does not fit 32 bits.
        BadAddress, ReadOnly
            From the device: no register has that index, or it is read-only.
        """
        index = self._reg_index(reg)
        value = _check_int("Register value", value, 0, (1 << 32) - 1)
        self.command(Opcode.REG_WRITE, reg_write_payload(index, value))

    def _chunk(self):
        if self.identity is None:
            self.identify()
        return self.identity.frame_bytes

    def _scratch_request(self, op, addr, count, step):
        """Check a scratchpad request of ``count`` bytes at ``addr`` sent in frames of ``step``
        bytes. One that needs several frames (or an address no frame can carry) is checked
        whole here, raising what the device would answer, so that no frame of a failing
        request is ever sent; the device checks a one-frame request itself."""
        size = self.identity.scratch_bytes
        if count <= step and addr < 1 << 32:
            return
        if addr >= size:
            raise BadAddress(f"{op} at byte address {addr} is outside the {size}-byte "
                             f"scratchpad (checked before sending: nothing was sent)")
        if addr + count > size:
            raise BadLength(f"{op} of {count} bytes at byte address {addr} runs past the end "
                            f"of the {size}-byte scratchpad (checked before sending: nothing "
                            f"was sent)")

    def write_mem(self, addr, data):
        """Write ``data`` at byte address ``addr`` of the scratchpad.

        ``data`` is a numpy array of numbers (written in little-endian byte order) or
        bytes-like. It is sent in frames of at most ``frame_bytes - 4`` bytes; a write that
        does not fit the scratchpad is refused whole before any frame is sent, so a failed
        call writes nothing.

        Raises
        ------
        TypeError, ValueError
            ``addr`` is not a non-negative integer; ``data`` is not a numeric array or
            bytes-like (an int, a str, a list, an object array, a 0-d array).
        BadAddress, BadLength
            ``addr`` is outside the scratchpad, or the data runs past its end (checked by the
            driver when the write needs more than one frame, else by the device).
        """
        addr = _check_int("Byte address", addr, 0, None)
        raw = _data_bytes(data)
        step = self._chunk() - 4
        self._scratch_request("MEM_WRITE", addr, len(raw), step)
        if self.network is not None and addr < 2 * self.network.program_words:
            self._program_count = None          # the network's program is overwritten
        for k in range(0, max(len(raw), 1), step):
            self.command(Opcode.MEM_WRITE, mem_write_payload(addr + k, raw[k:k + step]),
                         context=f" (writing {len(raw)} bytes at byte address {addr}; the "
                                 f"scratchpad has {self.identity.scratch_bytes})")

    def read_mem(self, addr, n, dtype=np.uint8):
        """Read ``n`` elements of ``dtype`` (a numeric numpy type) from byte address ``addr``;
        returns an array.

        Raises
        ------
        TypeError, ValueError
            ``addr`` or ``n`` is not a non-negative integer, or ``dtype`` is not a numeric type.
        BadAddress, BadLength
            As :meth:`write_mem`.
        """
        addr = _check_int("Byte address", addr, 0, None)
        n = _check_int("Element count", n, 0, None)
        dtype = _numeric_dtype(dtype).newbyteorder("<")
        total = n * dtype.itemsize
        step = self._chunk()
        self._scratch_request("MEM_READ", addr, total, step)
        raw = bytearray()
        for k in range(0, max(total, 1), step):
            count = min(step, total - k)
            body = self.command(Opcode.MEM_READ, mem_read_payload(addr + k, count),
                                context=f" (reading {total} bytes at byte address {addr}; the "
                                        f"scratchpad has {self.identity.scratch_bytes})")
            if len(body) != count:
                raise ReplyError(f"MEM_READ reply has {len(body)} bytes, not {count}")
            raw += body
        return np.frombuffer(bytes(raw), dtype=dtype).astype(dtype.newbyteorder("="))

    # -- packed transfers: one byte lane of the scratchpad's words ----------------------------
    def _packed(self, opcode, addr, data=None, n=None):
        """One packed transfer (:data:`lowbit.sim.link.PACKED_TRANSFERS`), split into frames;
        a request of several frames is checked whole first (nothing half-written)."""
        writes, _, span = PACKED_TRANSFERS[opcode]
        if self.identity is None:
            self.identify()
        words = {"word": 1, "block": self.design.block, "tile": self.design.matrix_lanes}[span]
        size = self.identity.scratch_bytes
        step = self.identity.frame_bytes - (4 if writes else 0)
        count = len(data) if writes else n
        name = Opcode(opcode).name
        if count > step or addr >= 1 << 32:
            if addr >= size or addr & 1:
                what = "odd (a packed transfer starts at a word)" if addr < size else \
                    f"outside the {size}-byte scratchpad"
                raise BadAddress(f"{name} at byte address {addr}: {what} (checked before "
                                 f"sending: nothing was sent)")
            if addr + 2 * words * count > size:
                raise BadLength(f"{name} of {count} bytes ({words} words each) at byte address "
                                f"{addr} runs past the end of the {size}-byte scratchpad "
                                f"(checked before sending: nothing was sent)")
        context = (f" ({name} of {count} bytes at byte address {addr}, {words} words per byte; "
                   f"the scratchpad has {size})")
        out = bytearray()
        for k in range(0, max(count, 1), step):
            at = addr + 2 * words * k
            if writes:
                self.command(opcode, mem_write_payload(at, data[k:k + step]), context=context)
                continue
            part = min(step, count - k)
            body = self.command(opcode, mem_read_payload(at, part), context=context)
            if len(body) != part:
                raise ReplyError(f"{name} reply has {len(body)} bytes, not {part}")
            out += body
        return None if writes else np.frombuffer(bytes(out), dtype=np.uint8).copy()

    def write_low(self, addr, data):
        """Write byte ``k`` of ``data`` to the low byte of word ``k`` from the even byte
        address ``addr`` (MEM_WRITE_LOW; the high bytes keep their values): e.g. BFP
        mantissas, one byte each instead of a whole word.

        ``data`` is bytes-like or an integer array with values in -128..255 (stored modulo
        256). Frames of ``frame_bytes - 4`` bytes; a write of several frames is checked whole
        before the first is sent.

        Raises
        ------
        TypeError, ValueError
            ``addr`` is not a non-negative integer, ``data`` not bytes-like or integers in
            -128..255.
        BadAddress, BadLength
            ``addr`` is odd or outside the scratchpad, or the words run past its end.
        """
        addr = _check_int("Byte address", addr, 0, None)
        self._packed(Opcode.MEM_WRITE_LOW, addr, _lane_bytes("Data", data))

    def fill_high(self, addr, data):
        """Write byte ``k`` of ``data`` to the high bytes of words ``k·B`` .. ``k·B + B - 1``
        from the even byte address ``addr``, ``B`` the design's block size (MEM_FILL_HIGH):
        e.g. the shared exponent of each block of BFP inputs. Arguments, frames and errors as
        :meth:`write_low`."""
        addr = _check_int("Byte address", addr, 0, None)
        self._packed(Opcode.MEM_FILL_HIGH, addr, _lane_bytes("Data", data))

    def read_low(self, addr, n):
        """The low bytes of the ``n`` words from the even byte address ``addr``
        (MEM_READ_LOW), a uint8 array. Errors as :meth:`read_mem`, and ``BadAddress`` for an
        odd address."""
        addr = _check_int("Byte address", addr, 0, None)
        n = _check_int("Byte count", n, 0, None)
        return self._packed(Opcode.MEM_READ_LOW, addr, n=n)

    def read_high(self, addr, n):
        """The high bytes of words ``0, N, 2N, ...`` (``n`` of them) from the even byte address
        ``addr``, ``N`` the design's matrix lanes (MEM_READ_HIGH): e.g. one shared exponent
        per output tile. Errors as :meth:`read_low`."""
        addr = _check_int("Byte address", addr, 0, None)
        n = _check_int("Byte count", n, 0, None)
        return self._packed(Opcode.MEM_READ_HIGH, addr, n=n)

    # -- transfer-LUT engine --------------------------------------------------------------------
    def _lut_table(self, table, frames):
        """``table`` checked: an integer, a table of the device unless the command is one
        frame (the device checks a one-frame command itself)."""
        table = _check_int("LUT table", table, 0, None)
        self._require("lut")
        tables = self.design.lut_tables
        if table > 0xFF or (frames != 1 and table >= tables):
            raise BadAddress(f"The device has LUT tables 0..{tables - 1}, not {table} (checked "
                             f"before sending: nothing was sent)")
        return table

    def lut_load(self, table, values):
        """Load byte table ``table`` (0 .. lut_tables-1) with 256 entries.

        ``values`` is an integer array of 256 int8 or uint8 codes (e.g. from
        :func:`lowbit.sim.lut.transfer_table`), validated as an activation table of
        :mod:`lowbit.sim.network`; they are sent as their uint8 bit patterns.

        Raises
        ------
        TypeError
            ``table`` is not an integer.
        ValueError
            ``table`` is negative, or ``values`` is not 256 integers in -128..255 (floats,
            strings and bools are refused, not converted).
        MissingEngine
            The device has no LUT engine.
        BadAddress
            For a table the design does not have.
        """
        from lowbit.sim.network import _check_table
        try:
            values = _check_table(values)          # the golden model's own check
        except ValueError as e:
            raise ValueError(f"A transfer table needs 256 entries, integers in -128..255 "
                             f"({e})") from None
        step = max(self._chunk() - 2, 1)
        table = self._lut_table(table, -(-256 // step))
        raw = (values & 0xFF).astype(np.uint8).tobytes()
        for start in range(0, 256, step):
            chunk = raw[start:start + step]
            self.command(Opcode.LUT_WRITE, bytes([table, start]) + chunk)

    def lut_apply(self, table, codes):
        """Look ``codes`` (a 1-D integer array of int8 or uint8 codes) up in byte table
        ``table``; returns uint8.

        Raises
        ------
        TypeError
            ``table`` is not an integer, or ``codes`` not integers (floats are refused, not
            truncated).
        ValueError
            ``table`` is negative, or ``codes`` not a 1-D array of values in -128..255.
        MissingEngine
            The device has no LUT engine.
        BadAddress
            For a table the design does not have.
        """
        codes = _int_values("LUT codes", codes, 1)
        if codes.size and (codes.min() < -128 or codes.max() > 255):
            raise ValueError(f"LUT codes must be in -128..255, not {codes.min()}..{codes.max()}")
        raw = (codes.astype(np.int64) & 0xFF).astype(np.uint8).tobytes()
        step = max(self._chunk() - 1, 1)
        table = self._lut_table(table, -(-len(raw) // step))
        out = bytearray()
        for k in range(0, len(raw), step):
            chunk = raw[k:k + step]
            body = self.command(Opcode.LUT_APPLY, bytes([table]) + chunk)
            if len(body) != len(chunk):
                raise ReplyError(f"LUT_APPLY reply has {len(body)} bytes, not {len(chunk)}")
            out += body
        return np.frombuffer(bytes(out), dtype=np.uint8).copy()

    # -- wide slots of the transfer-LUT engine (tables between layers of different widths) --
    def _wide_format(self, fmt):
        from lowbit.sim.lut import WIDE_FORMATS
        if isinstance(fmt, str):
            if fmt not in WIDE_FORMATS:
                raise ValueError(f"Wide LUT format must be one of {', '.join(WIDE_FORMATS)} or "
                                 f"0..{len(WIDE_FORMATS) - 1}, not {fmt!r}")
            return WIDE_FORMATS.index(fmt)
        return _check_int("Wide LUT format", fmt, 0, len(WIDE_FORMATS) - 1)

    def lut_load_wide(self, table, lut):
        """Load wide slot ``table`` with a table between layers of different widths (or an
        int16 one): 513 int16 or 513 int8 entries (:func:`lowbit.sim.lut.gen_lut_int16`) or
        256 int16 entries of an 8-bit input (:func:`lowbit.sim.lut.transfer_table` with an
        int16 output). Sends its 513 words (:func:`lowbit.sim.lut.wide_image`) with
        ``LUT_WRITE_WIDE``, as many frames as ``frame_bytes`` needs; the table number is
        checked by the device on the first frame, so a bad one changes nothing. Returns the
        format (0..2) to look the slot up with.

        Raises
        ------
        TypeError, ValueError
            ``table`` not a non-negative integer; ``lut`` not a numpy array of one of those
            shapes and dtypes (the message names what it is).
        MissingEngine
            The device has no wide slots (no ``lut_wide`` engine).
        BadAddress
            For a slot the device does not have (nothing written).
        """
        from lowbit.sim.lut import WIDE_DEPTH, wide_image
        table = _check_int("Wide LUT table", table, 0, 0xFF)
        words, fmt = wide_image(lut)
        self._require("lut_wide")
        step = max((self._chunk() - 3) // 2, 1)
        raw = words.astype("<u2")
        for start in range(0, WIDE_DEPTH, step):
            chunk = raw[start:start + step].tobytes()
            self.command(Opcode.LUT_WRITE_WIDE,
                         bytes([table]) + start.to_bytes(2, "little") + chunk)
        return fmt

    def lut_apply_wide(self, table, codes, fmt):
        """Look ``codes`` (1-D integers) up in wide slot ``table`` in format ``fmt`` (0..2 or
        a name of :data:`lowbit.sim.lut.WIDE_FORMATS`): int16 codes -> int16 (0), int16 codes
        -> int8 (1), int8/uint8 codes -> int16 (2). Returns int16 (0, 2) or int8 (1) values,
        :func:`lowbit.sim.lut.lookup_wide` of the slot's words.

        Raises
        ------
        TypeError, ValueError
            ``table`` or ``fmt`` malformed or out of range, ``codes`` not a 1-D integer array
            in -32768..32767 (formats 0, 1) or -128..255 (format 2).
        MissingEngine
            The device has no wide slots.
        BadAddress
            For a slot the device does not have.
        """
        table = _check_int("Wide LUT table", table, 0, 0xFF)
        fmt = self._wide_format(fmt)
        codes = _int_values("Wide LUT codes", codes, 1)
        lo, hi = (-128, 255) if fmt == 2 else (-32768, 32767)
        if codes.size and (codes.min() < lo or codes.max() > hi):
            raise ValueError(f"Wide LUT codes of format {fmt} must be in {lo}..{hi}, not "
                             f"{codes.min()}..{codes.max()}")
        self._require("lut_wide")
        codes = codes.astype(np.int64)
        size_in, size_out = (1, 2) if fmt == 2 else (2, 1 if fmt == 1 else 2)
        step = max((self._chunk() - 2) // max(size_in, size_out), 1)
        out = []
        for k in range(0, len(codes), step):
            chunk = codes[k:k + step]
            raw = ((chunk & 0xFF).astype(np.uint8).tobytes() if fmt == 2
                   else chunk.astype("<i2").tobytes())
            body = self.command(Opcode.LUT_APPLY_WIDE, bytes([table, fmt]) + raw)
            if len(body) != size_out * len(chunk):
                raise ReplyError(f"LUT_APPLY_WIDE reply has {len(body)} bytes, not "
                                 f"{size_out * len(chunk)}")
            out.append(np.frombuffer(body, dtype=np.int8 if fmt == 1 else "<i2"))
        dtype = np.int8 if fmt == 1 else np.int16
        return np.concatenate(out).astype(dtype) if out else np.zeros(0, dtype)

    # -- grand unit -----------------------------------------------------------------------------
    def grand_seed(self, seed, mode=None):
        """Seed the grand unit from a 64-bit ``seed`` (states by
        :func:`lowbit.sim.prng.seed_lanes`).

        ``mode`` (a ``lowbit.sim.grand.MODES`` name or code 0..5) is written to ``GRAND_MODE``
        first; the unit latches the mode at the seed, so this is how the mode changes.

        Raises
        ------
        TypeError, ValueError
            ``seed`` is not an integer in 0..2**64-1, or ``mode`` not a mode name or code.
        MissingEngine
            The device has no grand unit.
        """
        from lowbit.sim.grand import MODES
        from lowbit.sim.prng import seed_lanes
        code = None
        if mode is not None:
            if isinstance(mode, str):
                if mode not in MODES:
                    raise ValueError(f"Grand mode must be one of {', '.join(MODES)}, not "
                                     f"{mode!r}")
                code = MODES.index(mode)
            else:
                code = _check_int("Grand mode (a name or a code)", mode, 0, len(MODES) - 1)
        seed_lanes(seed, 1)                          # validates the seed
        self._require("grand")
        state = seed_lanes(seed, self.identity.lanes)
        if code is not None:
            self.write_reg("GRAND_MODE", code)
        self.command(Opcode.GRAND_SEED, state.astype("<u8").tobytes())

    def grand_samples(self, n, dtype=np.float16):
        """The next ``n`` samples of the grand unit as ``float16`` or ``float32`` values.

        Raises
        ------
        TypeError, ValueError
            ``n`` is not an integer in 0 .. :data:`MAX_SAMPLES`, or ``dtype`` is not float16
            / float32.
        MissingEngine
            The device has no grand unit.
        """
        n = _check_int("Sample count", n, 0, MAX_SAMPLES)
        dtype = _numeric_dtype(dtype)
        if dtype not in (np.dtype(np.float16), np.dtype(np.float32)):
            raise ValueError(f"Sample type must be float16 or float32, not {dtype}")
        self._require("grand")
        size = dtype.itemsize
        step = max(self._chunk() // size, 1)
        raw = bytearray()
        for k in range(0, n, step):
            count = min(step, n - k)
            body = self.command(Opcode.GRAND_SAMPLES,
                                count.to_bytes(2, "little") + bytes([size == 4]))
            if len(body) != count * size:
                raise ReplyError(f"GRAND_SAMPLES reply has {len(body)} bytes, not {count * size}")
            raw += body
        return np.frombuffer(bytes(raw), dtype=dtype.newbyteorder("<")).astype(dtype)

    # -- layer programs -------------------------------------------------------------------------
    @property
    def design(self):
        """The device's :class:`lowbit.sim.program.Design`, as the device describes itself (IDENTIFY
        record and identification registers, read by :meth:`identify`)."""
        if self._design is None:
            self.identify()
        return self._design

    def has_engine(self, name):
        """True if the IDENTIFY record lists engine ``name`` (a ``lowbit.sim.link.ENGINE_BITS``
        key)."""
        if not isinstance(name, str):
            raise TypeError(f"An engine is named by a string of {', '.join(ENGINE_BITS)}, not "
                            f"{name!r}")
        if name not in ENGINE_BITS:
            raise ValueError(f"Unknown engine {name!r}; known: {', '.join(ENGINE_BITS)}")
        if self.identity is None:
            self.identify()
        return bool(self.identity.engines >> ENGINE_BITS[name] & 1)

    def _require(self, *names):
        for name in names:
            if not self.has_engine(name):
                have = ", ".join(self.identity.engine_names) or "none"
                raise MissingEngine(f"The device has no {name} engine (IDENTIFY lists: {have})")

    @contextlib.contextmanager
    def _wait_for(self, cycles):
        """Widen the port's reply timeout for a long command by ``cycles`` clock cycles
        (simulated ports: ``timeout_cycles``; pyserial: ``timeout`` in seconds at 12 MHz)."""
        saved = {}
        for attr, add in (("timeout_cycles", int(cycles)), ("timeout", cycles / 12e6)):
            value = getattr(self.port, attr, None)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                saved[attr] = value
                setattr(self.port, attr, type(value)(value + add))
        try:
            yield
        finally:
            for attr, value in saved.items():
                setattr(self.port, attr, value)

    def run(self, addr=0, limit=1_000_000, *, cycles_per_instruction=256):
        """Run the program at byte address ``addr`` for at most ``limit`` instructions.

        Returns
        -------
        lowbit.sim.program.RunResult
            ``pc`` (byte address of the HALT), ``executed`` (instructions, HALT included) and
            ``cycles`` (measured by the hardware; 0 from the model).

        Raises
        ------
        TypeError, ValueError
            For a non-integer, odd or negative ``addr`` or a ``limit`` outside 1..2^32-1.
        MissingEngine
            If the device has no sequencer.
        Limit
            The limit was reached (``.result`` says where); a :class:`RunError` too.
        BadOpcode, BadAddress, BadLength
            A failing instruction (as :class:`RunError`, with ``.result``), or a bad start
            address (:class:`BadAddress` without ``.result``).
        """
        from lowbit.sim.program import RunResult
        addr = _check_int("Start address", addr, 0, (1 << 32) - 2)
        limit = _check_int("Instruction limit", limit, 1, (1 << 32) - 1)
        cycles_per_instruction = _check_int("Cycles per instruction", cycles_per_instruction,
                                            1, 1 << 20)
        if addr % 2:
            raise ValueError(f"Start address must be even, not {addr}")
        self._require("sequencer")
        with self._wait_for(min(limit, 1 << 24) * cycles_per_instruction):
            status, body = self.send(Opcode.RUN, addr.to_bytes(4, "little")
                                     + limit.to_bytes(4, "little"))
        if len(body) != 16:
            if status == Status.OK:
                raise ReplyError(f"RUN reply has {len(body)} bytes, not 16")
            self.command_error(Opcode.RUN, status)
        result = RunResult.from_payload(status, body)
        if status != Status.OK:
            name = status.name if isinstance(status, Status) else f"0x{status:02X}"
            err = _run_error(status)(f"RUN stopped with {name} at byte address {result.pc} "
                                     f"after {result.executed} instructions", status)
            err.result = result
            raise err
        return result

    def command_error(self, opcode, status, context=""):
        """Raise the :class:`StatusError` subclass of ``status`` for a request ``opcode``
        (``context``: appended to the message, e.g. the request's address and length)."""
        name = status.name if isinstance(status, Status) else f"0x{status:02X}"
        raise _STATUS_ERRORS.get(status, StatusError)(
            f"{_opcode_name(opcode)} failed with status {name}{context}", status)

    def load_program(self, program, addr=0):
        """Write a program (a list of :class:`lowbit.sim.program.Instruction` or its bytes) at byte
        address ``addr``; returns its length in bytes."""
        from lowbit.sim.program import Instruction, assemble
        if isinstance(program, (bytes, bytearray, memoryview)):
            raw = bytes(program)
            if len(raw) % 16:
                raise ValueError(f"Program length must be a multiple of 16 bytes, not {len(raw)}")
        else:
            if isinstance(program, str) or not hasattr(program, "__iter__"):
                raise TypeError(f"A program is a list of lowbit.sim.program.Instruction or its "
                                f"bytes, not {program!r}")
            program = list(program)
            if not all(isinstance(i, Instruction) for i in program):
                raise TypeError("A program is a list of lowbit.sim.program.Instruction or its "
                                "bytes")
            raw = assemble(program)
        addr = _check_int("Program address", addr, 0, (1 << 32) - 1)
        if addr % 2:
            raise ValueError(f"Program address must be even, not {addr}")
        if not raw:
            raise ValueError("A program needs at least one instruction")
        if addr + len(raw) > self.design.scratch_bytes:
            raise ValueError(f"A program of {len(raw)} bytes at {addr} does not fit the "
                             f"scratchpad of {self.design.scratch_bytes} bytes")
        self.write_mem(addr, raw)
        return len(raw)

    def load_weights(self, entry, words, *, staging=None):
        """Load weight entries ``entry ..`` with ``words`` (array ``(count, N)`` of 16-bit
        words, row ``j`` holding entry ``entry + j`` of every bank) through LOADW programs.

        The words are staged in the scratchpad from word address ``staging`` (default: right
        after the 32-byte LOADW program at address 0), in as many runs as needed; the staged
        region and the first 32 bytes are overwritten.
        """
        from lowbit.sim.program import load_weights_program
        self._require("sequencer")
        d = self.design
        words = np.asarray(words)
        if words.ndim != 2 or words.shape[1] != d.matrix_lanes or \
                not np.issubdtype(words.dtype, np.integer):
            raise ValueError(f"Weight words must be an integer array of shape (count, "
                             f"{d.matrix_lanes}), not {words.dtype} {words.shape}")
        if words.size and (words.min() < -(1 << 15) or words.max() > 0xFFFF):
            raise ValueError("Weight words must fit 16 bits")
        entry = _check_int("Weight entry", entry, 0, d.weight_depth)
        if entry + words.shape[0] > d.weight_depth:
            raise ValueError(f"Entries {entry}..{entry + words.shape[0] - 1} exceed the weight "
                             f"depth {d.weight_depth}")
        staging = 16 if staging is None else _check_int("Staging address", staging, 16,
                                                        d.words - d.matrix_lanes)
        per_run = min((d.words - staging) // d.matrix_lanes, 0xFFFF)
        raw = (words.astype(np.int64) & 0xFFFF).astype("<u2")
        # The LOADW program and the staged words overwrite a loaded network's program and data.
        self.network, self._program_count = None, None
        for k in range(0, words.shape[0], per_run):
            part = raw[k:k + per_run]
            self.write_mem(2 * staging, part.reshape(-1))
            self.load_program(load_weights_program(staging, entry + k, part.shape[0]))
            self.run(0, 2)

    def rounding_seed(self, seed):
        """Seed the rounding PRNG (stochastic rounding of QUANT and MATVEC) with the 64-bit
        ``seed``: state ``lowbit.sim.prng.seed_lanes(seed, 1)``, written to PRNG_SEED0..3."""
        from lowbit.sim.prng import seed_lanes
        s0, s1 = (int(v) for v in seed_lanes(seed, 1)[0])
        for k, v in enumerate((s0 & 0xFFFFFFFF, s0 >> 32, s1 & 0xFFFFFFFF, s1 >> 32)):
            self.write_reg(f"PRNG_SEED{k}", v)

    # -- single operations ------------------------------------------------------------------
    def quantise(self, x_f16, *, fmt="bfp", width=8, rule="floor", rounding="nearest", shift=0,
                 book=None):
        """Quantise f16 values on the device (QUANT).

        Parameters
        ----------
        x_f16 : array
            1-D float array (converted to float16 with numpy) or f16 codes as ``uint16``.
        fmt : {"bfp", "int8", "discrete"}
            BFP blocks of the device's block size ``B`` (length a multiple of ``B``), int8
            codes ``quantise_int8(x, shift)``, or codes of ``book``.
        width, rule : BFP mantissa width (2..8) and shared-exponent rule ("floor", "ceil").
        rounding : {"nearest", "zero", "stochastic"}
        shift : int
            int8 scale exponent (-128..127).
        book : lowbit.sim.discrete.CodeBook
            Code book of ``fmt="discrete"``.

        Returns
        -------
        ``(m, e)`` (mantissas per element, exponents per block) for BFP, else the int8 codes
        or the discrete codes (int64 arrays).

        Raises
        ------
        TypeError, ValueError
            For an argument of the wrong kind or out of range, before anything is sent; a
            value that is NaN or ±Inf in float16 (also a float beyond ±65504) is refused with
            a ValueError naming its index (``docs/protocol.md``, "Non-finite input").
        MissingEngine
            The device has no sequencer or no quantiser.
        """
        from lowbit.sim.discrete import CodeBook
        from lowbit.sim.network import unpack_elements
        from lowbit.sim.program import _ROUNDING_CODES, Instruction, config
        codes = _f16_codes(x_f16)
        fmt = _check_choice("Format", fmt, ("bfp", "int8", "discrete"))
        width = _check_int("Mantissa width", width, 2, 8)
        rule = _check_choice("Exponent rule", rule, ("floor", "ceil"))
        rounding = _check_choice("Rounding", rounding, tuple(_ROUNDING_CODES))
        shift = _check_int("Shift", shift, -128, 127)
        if fmt == "discrete" and not isinstance(book, CodeBook):
            raise TypeError(f"Discrete quantisation needs a lowbit.sim.discrete.CodeBook, "
                            f"not {book!r}")
        self._require("sequencer", "quantiser")
        d = self.design
        if fmt == "bfp" and codes.size % d.block:
            raise ValueError(f"BFP quantisation needs a multiple of {d.block} values, not "
                             f"{codes.size}")
        self.network = None       # the QUANT program and data overwrite the network's
        regs = [config("QUANT_FORMAT", ("bfp", "int8", "discrete").index(fmt)),
                config("MANT_WIDTH", width), config("ROUNDING", _ROUNDING_CODES[rounding]),
                config("QUANT_RULE", int(rule == "ceil")), config("QUANT_SHIFT", shift & 0xFF)]
        if fmt == "discrete":
            regs += _book_config(book)
        base = 16 * (len(regs) + 2) // 2
        step = (d.words - base) // 2
        if fmt == "bfp":
            step -= step % d.block
        if step < 1:
            raise ValueError("The scratchpad is too small for a QUANT program")
        out = []
        for k in range(0, codes.size, step):
            part = codes[k:k + step]
            self.write_mem(2 * base, part.astype("<u2"))
            self.load_program(regs + [Instruction.quant(base, base + part.size, part.size),
                                      Instruction.halt()])
            self.run(0, len(regs) + 2)
            out.append(self.read_mem(2 * (base + part.size), part.size, np.uint16))
        words = np.concatenate(out).astype(np.int64)
        if fmt == "bfp":
            m, e = unpack_elements(words)
            return m, e[d.block - 1::d.block]
        if fmt == "int8":
            return unpack_elements(words)[0]
        return words & 0xFF

    def bfp_matvec(self, w_m, w_e, x_m, x_e, *, bias_m=None, bias_e=None, width=8,
                   rounding="nearest", exp_mode="max", fixed_exp=0):
        """``W·x (+ b)`` on the BFP column (MATVEC; one :class:`lowbit.sim.network.BFPDense` layer
        without table, weights loaded first). ``w_m`` (R, K), ``w_e`` (R, K/B), ``x_m`` (K,),
        ``x_e`` (K/B,): integer arrays. Returns ``(m, e)``: R output mantissas and the exponent
        of each row (each tile of ``N`` rows has its own with ``exp_mode="max"``), as
        :func:`lowbit.sim.network.bfp_dense`, which also validates the arguments (:meth:`dense`).
        """
        from lowbit.sim.network import BFPDense
        layer = BFPDense(w_m, w_e, bias_m, bias_e, width=width, rounding=rounding,
                         exp_mode=exp_mode, out_exp=fixed_exp)
        return self.dense(layer, (x_m, x_e))

    def discrete_matvec(self, w_codes, x_m, *, book, bias=None, shift=0, out_exp=0):
        """Discrete-weight ``W·x`` (DMATVEC) of int8 codes ``x_m`` with weight codes of
        ``book``, integer ``bias``, requantiser ``shift`` (0..31): one
        :class:`lowbit.sim.network.DiscreteDense` layer with the device's accumulator width.
        Returns ``(m, e)`` as :func:`lowbit.sim.network.discrete_dense`, which also validates
        the arguments (:meth:`dense`)."""
        from lowbit.sim.network import DiscreteDense
        layer = DiscreteDense(w_codes, book, bias=bias, shift=shift,
                              acc_width=self.design.disc_acc_width, out_exp=out_exp)
        return self.dense(layer, x_m)

    def dense(self, layer, x):
        """Run one :mod:`lowbit.sim.network` layer on one input vector.

        ``x`` is ``(x_m, x_e)`` (integer mantissas, block exponents) for a
        :class:`~lowbit.sim.network.BFPDense` layer and the int8 codes ``x_m`` (integers) for
        a :class:`~lowbit.sim.network.DiscreteDense` layer. Returns ``(m, e)`` like the golden
        functions. Replaces the loaded network (weights, tables 0.., scratchpad).

        Raises
        ------
        TypeError, ValueError
            Before anything is sent: whatever the golden function
            (:func:`lowbit.sim.network.bfp_dense` on the device's column,
            :func:`~lowbit.sim.network.discrete_dense`) raises for this layer and input, e.g.
            a fixed exponent outside -128..127 or a width outside 2..8; inputs that are not
            integer arrays (floats are refused, not truncated) or not int8 codes; output and
            table exponents outside -128..127 (the 8-bit registers); what
            :meth:`load_network` raises.
        MissingEngine
            As :meth:`load_network`.
        """
        from lowbit.sim.network import BFPDense, DiscreteDense, block_exponents, pack_elements
        from lowbit.sim.program import InputQuant
        if not isinstance(layer, (BFPDense, DiscreteDense)):
            raise TypeError(f"Layer must be a lowbit.sim.network.BFPDense or DiscreteDense, "
                            f"not {layer!r}")
        self._require("sequencer", "bfp" if isinstance(layer, BFPDense) else "discrete")
        if isinstance(layer, BFPDense):
            if not (isinstance(x, tuple) and len(x) == 2):
                raise TypeError("A BFP layer's input is a tuple (x_m, x_e)")
            x_m = _int_values("Input mantissas", x[0], 1)
            x_e = _int_values("Input exponents", x[1], 1)
            if x_m.shape != (layer.cols,) or x_e.shape != (layer.cols // layer.block,):
                raise ValueError(f"Input shapes {x_m.shape}, {x_e.shape} do not match the "
                                 f"layer's {layer.cols} columns in blocks of {layer.block}")
            self._golden_check(layer, (x_m, x_e))
            words = pack_elements(x_m, block_exponents(x_e, layer.block, layer.cols))
        else:
            x_m = _int_values("Input codes", x, 1)
            if x_m.shape != (layer.cols,):
                raise ValueError(f"Input shape {x_m.shape} does not match the layer's "
                                 f"{layer.cols} columns")
            if x_m.size and (x_m.min() < -128 or x_m.max() > 127):
                raise ValueError(f"Input codes must be int8 (-128..127), not "
                                 f"{x_m.min()}..{x_m.max()}")
            self._golden_check(layer, x_m)
            words = pack_elements(x_m, 0)
        self.load_network([layer], quantise_input=InputQuant("host"))
        out = self._run_words(words[None])
        return out.m[0], out.e[0]

    def _golden_check(self, layer, x=None):
        """Validate ``layer`` (and its input ``x``; default zeros) as the golden model does, by
        running it on the host: :func:`lowbit.sim.network.bfp_dense` on the device's column
        (stochastic rounding with zero random numbers) or
        :func:`~lowbit.sim.network.discrete_dense`. Also checks the exponents the 8-bit
        registers carry (``out_exp``, ``table_exp``), which the golden functions leave to the
        caller."""
        from lowbit.sim.network import BFPDense, bfp_dense, discrete_dense
        d = self.design

        def registers():
            _check_int("Output exponent", layer.out_exp, -128, 127)
            if layer.table is not None:
                _check_int("Table exponent", layer.table_exp, -128, 127)

        if isinstance(layer, BFPDense):
            if x is None:
                x = (np.zeros(layer.cols, np.int64), np.zeros(layer.cols // layer.block, np.int64))
            rand = None
            if layer.rounding == "stochastic":
                rand = np.zeros((-(-layer.rows // d.matrix_lanes), d.matrix_lanes), np.int64)
            bfp_dense(layer, *x, d.column(), rand=rand)     # its own message for out_exp first
            registers()
        else:
            # discrete_dense fills its output exponents with out_exp unchecked (a float too
            # large for int64 would reach numpy's cast): the registers' check comes first.
            registers()
            discrete_dense(layer, np.zeros(layer.cols, np.int64) if x is None else x,
                           lanes=d.matrix_lanes)

    # -- networks ---------------------------------------------------------------------------
    def load_network(self, layers, *, quantise_input="auto"):
        """Place a network of :mod:`lowbit.sim.network` layers on the device: weights (LOADW), LUT
        tables (from table 0), biases and the program (:class:`lowbit.sim.program.NetworkLayout`).

        Parameters
        ----------
        layers : sequence of lowbit.sim.network.BFPDense / DiscreteDense
        quantise_input : {"auto", "device", "host"} or lowbit.sim.program.InputQuant
            Where the f16 input becomes the first layer's codes: by QUANT on the device,
            or on the host (``lowbit.sim.bfp.quantise`` / ``lowbit.sim.quantiser.quantise_int8``,
            the same
            numbers); ``"auto"`` uses the device if it has the quantiser. An
            :class:`~lowbit.sim.program.InputQuant` also sets width, rule, rounding and int8 shift
            (default width 8, "floor", "nearest", shift 0).

        Returns
        -------
        lowbit.sim.program.NetworkLayout
            Also kept as :attr:`network`.

        Raises
        ------
        TypeError, ValueError
            For layers that are not :mod:`lowbit.sim.network` layers, do not fit the device
            (:class:`~lowbit.sim.program.NetworkLayout`) or are refused by the golden
            functions on the device's design (as :meth:`dense`). Everything is checked and
            every memory image computed before the first request: a failed call sends nothing.
        MissingEngine
            For an engine the network needs that the device lacks.
        """
        from lowbit.sim.program import InputQuant, NetworkLayout
        if isinstance(quantise_input, str):
            if quantise_input not in ("auto", "device", "host"):
                raise ValueError(f"quantise_input must be 'auto', 'device', 'host' or an "
                                 f"InputQuant, not {quantise_input!r}")
            if quantise_input == "auto":
                quantise_input = "device" if self.has_engine("quantiser") else "host"
            quantise_input = InputQuant(quantise_input)
        if not isinstance(quantise_input, InputQuant):
            raise TypeError(f"quantise_input must be 'auto', 'device', 'host' or an InputQuant, "
                            f"not {quantise_input!r}")
        if isinstance(layers, str) or not hasattr(layers, "__iter__"):
            raise TypeError(f"Layers must be a sequence of lowbit.sim.network layers, not "
                            f"{layers!r}")
        layers = list(layers)
        self._require("sequencer")
        from lowbit.sim.network import BFPDense, DiscreteDense
        for layer in layers:
            if isinstance(layer, BFPDense):
                self._require("bfp")
            elif isinstance(layer, DiscreteDense):
                self._require("discrete")
            if getattr(layer, "table", None) is not None:
                self._require("lut")
        if quantise_input.where == "device":
            self._require("quantiser")
        layout = NetworkLayout(layers, self.design, input=quantise_input)
        for layer in layers:
            self._golden_check(layer)
        weights = layout.weight_words() if layout.weight_entries else None
        tables = layout.table_images()
        biases = layout.bias_words()
        self.network = None
        if weights is not None:
            self.load_weights(0, weights)
        for idx, table in tables.items():
            self.lut_load(idx, table)
        for addr, words in biases:
            self.write_mem(2 * addr, words.astype("<u2"))
        self._program_count = None
        self.network = layout
        return layout

    def run_network(self, x):
        """Run the loaded network on a batch.

        Parameters
        ----------
        x : array, shape (samples, inputs) or (inputs,)
            Float values (converted to float16 with numpy) or f16 codes as ``uint16``. A row
            with a value that is NaN or ±Inf in float16 (also a float beyond ±65504) is refused
            with a ValueError naming the row, before anything is sent (``docs/protocol.md``,
            "Non-finite input").

        Returns
        -------
        outputs : Activations
            ``m`` (int8 codes) and ``e`` (exponents) of the last layer, shape
            ``(samples, rows)``; ``outputs.values()`` are the floats.
        stats : dict
            ``samples``, ``runs`` (RUN commands), ``chunk`` (samples per RUN),
            ``instructions``, ``cycles`` and ``busy_cycles`` (sums over the RUN replies;
            cycles are 0 from the model; busy cycles are the matrix engine's accepted beats,
            :class:`lowbit.sim.program.RunResult`, ``None`` from a device that does not count
            them) and ``seconds`` (host wall time).
        """
        if self.network is None:
            raise ValueError("No network is loaded (call load_network first)")
        x = np.asarray(x)
        codes = x if x.dtype == np.uint16 else _to_f16(x)
        codes = self.network.f16(codes)               # (samples, inputs); checks the shape
        bad = (codes & 0x7C00) == 0x7C00              # exponent all ones: ±Inf or NaN
        if bad.any():
            row, col = (int(v) for v in np.argwhere(bad)[0])
            value = (x if x.ndim == 2 else x[None])[row, col]
            raise ValueError(f"Input row {row} is not finite in float16 (column {col}: "
                             f"{_describe_f16(value)}); NaN and ±Inf inputs are refused")
        return self._run_words(self.network.input_words(codes), stats=True)

    def _run_words(self, words, stats=False):
        lay = self.network
        t0 = time.perf_counter()
        link0 = self.bytes_sent + self.bytes_received
        n = words.shape[0]
        out = []
        from lowbit.sim.program import NOT_COUNTED
        runs = instructions = cycles = busy = 0
        for k in range(0, n, lay.chunk):
            part = words[k:k + lay.chunk]
            count = part.shape[0]
            if self._program_count != count:
                self.load_program(lay.program(count))
                self._program_count = count
            self._write_inputs(part)
            limit = lay.instructions(count)
            # A budget per instruction and per layer of a sample (one MATVEC may run them all).
            budget = (4096 + 64 * lay.in_words) * (limit + count * len(lay.layers))
            res = self.run(0, limit, cycles_per_instruction=-(-budget // limit))
            if res.executed != limit:
                raise ReplyError(f"The network program ran {res.executed} instructions, "
                                 f"expected {limit}")
            runs, instructions = runs + 1, instructions + res.executed
            cycles = cycles + res.cycles
            busy = None if busy is None or res.busy == NOT_COUNTED else busy + res.busy
            out.append(self._read_outputs(count))
        from lowbit.sim.network import unpack_elements
        m, e = unpack_elements(np.concatenate(out) if out else
                               np.zeros((0, lay.rows), np.uint16))
        acts = Activations(m, e)
        if not stats:
            return acts
        link = self.bytes_sent + self.bytes_received - link0
        return acts, {"samples": n, "runs": runs, "chunk": lay.chunk,
                      "instructions": instructions, "cycles": cycles, "busy_cycles": busy,
                      "link_bytes": link, "seconds": time.perf_counter() - t0}

    def _write_inputs(self, words):
        """The input area of one chunk: element words ``(count, in_words)`` as the program
        reads them. Host-quantised input goes packed: the mantissas / int8 codes by
        MEM_WRITE_LOW, a BFP layer's block exponents by MEM_FILL_HIGH (one byte per block; a
        discrete layer reads the low byte only); f16 input for QUANT by MEM_WRITE."""
        lay = self.network
        addr = 2 * lay.in_addr
        flat = words.reshape(-1)
        if lay.input.where == "device":
            self.write_mem(addr, flat.astype("<u2"))
            return
        if lay.kinds[0] == "bfp":
            self.fill_high(addr, (flat[::self.design.block] >> 8).astype(np.uint8))
        self.write_low(addr, (flat & 0xFF).astype(np.uint8))

    def _read_outputs(self, count):
        """The last layer's words of one chunk, ``(count, rows)``: the low bytes of the output
        area by MEM_READ_LOW and one exponent per ``N`` words by MEM_READ_HIGH. The last
        layer's exponent is uniform over aligned spans of ``N`` words of the output area (a BFP
        layer writes ``T · N`` rows per sample, one exponent per tile of ``N``; a discrete
        layer one exponent for all), so this is every word, padding rows left out."""
        lay = self.network
        lanes = self.design.matrix_lanes
        n = count * lay.out_words
        addr = 2 * lay.out_addr
        low = self.read_low(addr, n)
        spans = -(-n // lanes)
        if addr + 2 * lanes * spans > self.identity.scratch_bytes:
            # The last span would run past the scratchpad: its exponent by MEM_READ.
            high = np.concatenate([self.read_high(addr, spans - 1),
                                   self.read_mem(addr + 2 * lanes * (spans - 1) + 1, 1)])
        else:
            high = self.read_high(addr, spans)
        words = low.astype(np.uint16) | np.repeat(high.astype(np.uint16) << 8, lanes)[:n]
        return words.reshape(count, lay.out_words)[:, :lay.rows]


def _check_int(name, value, lo, hi):
    """``int(value)`` for an integer (Python or numpy, not a bool) in ``lo..hi`` (``hi=None``:
    no upper bound); TypeError / ValueError naming ``name`` and the value otherwise."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    if value < lo or (hi is not None and value > hi):
        rule = f"between {lo} and {hi}" if hi is not None else f"of at least {lo}"
        raise ValueError(f"{name} must be an integer {rule}, not {value}")
    return int(value)


def _check_choice(name, value, choices):
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {', '.join(map(repr, choices))}, not {value!r}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, not {value!r}")
    return value


def _bytes_like(name, value):
    """``bytes(value)`` for bytes, bytearray or memoryview. Anything else is refused: ``bytes(5)``
    would be five zero bytes, ``bytes([1, 300])`` an error deep inside."""
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"{name} must be bytes-like (bytes, bytearray, memoryview), not "
                        f"{type(value).__name__} {value!r:.60}")
    return bytes(value)


def _numeric_dtype(dtype):
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError, KeyError) as e:
        raise TypeError(f"Not a numpy type: {dtype!r} ({e})") from None
    if dt.kind not in "biufc" or dt.itemsize == 0:
        raise TypeError(f"Element type must be a numeric numpy type, not {dt}")
    return dt


def _data_bytes(data):
    """The bytes :meth:`Accelerator.write_mem` sends for ``data``: a numeric array's
    little-endian bytes, or bytes-like data as it is."""
    if isinstance(data, np.ndarray):
        if data.dtype.kind not in "biufc":
            raise TypeError(f"Data must be an array of numbers, not of {data.dtype} (an object "
                            f"array would send host pointers)")
        if data.ndim == 0:
            raise ValueError(f"Data must be an array with at least one dimension, not the "
                             f"0-d array {data!r}")
        arr = np.ascontiguousarray(data)
        return arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
    return _bytes_like("Data (a numpy array or bytes-like)", data)


def _lane_bytes(name, data):
    """The bytes of a packed write: bytes-like data as it is, an integer array's values in
    -128..255 modulo 256."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if not isinstance(data, np.ndarray):
        raise TypeError(f"{name} must be bytes-like or an integer numpy array, not "
                        f"{type(data).__name__} {data!r:.60}")
    if data.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers, not an array of {data.dtype}")
    if data.ndim == 0:
        raise ValueError(f"{name} must be an array with at least one dimension, not the 0-d "
                         f"array {data!r}")
    if data.size and (data.min() < -128 or data.max() > 255):
        raise ValueError(f"{name} must be byte values in -128..255, not "
                         f"{data.min() if data.min() < -128 else data.max()}")
    return (data.reshape(-1).astype(np.int64) & 0xFF).astype(np.uint8).tobytes()


def _int_values(name, value, ndim):
    """``value`` as a numpy integer array of ``ndim`` dimensions (not converted: the caller
    checks its range first). Floats, bools, strings and objects are refused with a
    TypeError rather than truncated."""
    a = np.asarray(value)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers, not an array of {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-d array, not of shape {a.shape}")
    return a


def _opcode_name(opcode):
    return Opcode(opcode).name if opcode in Opcode._value2member_map_ else f"0x{opcode:02X}"


def _port_name(port):
    name = getattr(port, "port", None) or getattr(port, "name", None)
    return repr(name) if isinstance(name, str) else type(port).__name__


def _to_f16(x):
    """f16 codes (uint16) of a float array; values beyond float16's range become ±Inf codes
    (the caller refuses them) without numpy's overflow warning."""
    if not np.issubdtype(x.dtype, np.floating):
        raise TypeError(f"Input must be a float array (or f16 codes as uint16), not {x.dtype}")
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(np.float16).view(np.uint16)


def _describe_f16(value):
    if isinstance(value, np.uint16):
        return f"f16 code 0x{int(value):04X}"
    if np.isfinite(value):
        return f"{float(value)!r} overflows float16"
    return repr(float(value))


def _f16_codes(x):
    x = np.asarray(x)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"Input must be a non-empty 1-D array, not shape {x.shape}")
    codes = x.copy() if x.dtype == np.uint16 else _to_f16(x)
    bad = np.flatnonzero((codes & 0x7C00) == 0x7C00)
    if bad.size:
        raise ValueError(f"Input element {bad[0]} is not finite in float16 "
                         f"({_describe_f16(x[bad[0]])}); NaN and ±Inf inputs are refused")
    return codes


def _book_config(book):
    from lowbit.sim.program import config
    words = book.words() + [0] * (8 - len(book.words()))
    return [config("CODE_WIDTH", book.n),
            config("CODE_BOOK0", sum(v << 8 * k for k, v in enumerate(words[:4]))),
            config("CODE_BOOK1", sum(v << 8 * k for k, v in enumerate(words[4:])))]
