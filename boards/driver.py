"""Host driver of the accelerator: one API over a serial port or the simulated top.

>>> acc = Accelerator.simulated(scratch_bytes=1024)        # the real gateware, simulated
>>> acc.write_mem(0, np.arange(16, dtype=np.int16))
>>> acc.read_mem(0, 16, dtype=np.int16)
>>> acc = Accelerator.open("/dev/ttyUSB1", baud=1_000_000)  # a board
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
    MAGIC,
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
           "IdentityError", "MissingEngine", "RunError", "Activations", "design_of",
           "device_params", "ID_REGISTERS"]


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


class Activations(typing.NamedTuple):
    """Int8 codes ``m`` and exponents ``e`` (value ``m · 2^e``), shape ``(samples, rows)``."""
    m: np.ndarray
    e: np.ndarray

    def values(self):
        """The float64 values ``m · 2^e``."""
        return np.ldexp(self.m.astype(np.float64), self.e)


#: Identification registers :meth:`Accelerator.identify` reads after the IDENTIFY record.
ID_REGISTERS = ("ID_MATRIX", "ID_ENGINE")

#: Top parameters a device reports (IDENTIFY record, ``ID_MATRIX``, ``ID_ENGINE``) and their
#: defaults (those of :class:`lowbit.hw.top.Accelerator` and :class:`lowbit.sim.link.DeviceModel`;
#: ``scratch_bytes=None``: 131072 with SPRAM, else 4096).
_TOP_DEFAULTS = dict(lanes=2, scratch_bytes=None, frame_bytes=512, use_spram=False, grand=True,
                     sequencer=False, bfp=True, quantiser=True, discrete=True, **DESIGN_PARAMS)


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
                            "bfp_stochastic", "bfp_predictor")}
    if "lut" not in engines:
        kw["lut_tables"] = 0
    return Design(scratch_bytes=identity.scratch_bytes, lanes=identity.lanes,
                  engines=engines - {"lut"}, **kw)


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
    """

    def __init__(self, port, *, check=True, params=None):
        if params is not None and not isinstance(params, dict):
            raise TypeError(f"Expected parameters must be a dict, not {params!r}")
        self.port = port
        self.identity = None
        self.device_params = None
        self._design = None
        self.params = None if params is None else dict(params)
        self.network = None
        self._program_count = None
        self._parser = ReplyParser()
        if check:
            self.identify()

    @classmethod
    def open(cls, port, baud=1_000_000, *, timeout=1.0, check=True, params=None):
        """Open a board on serial ``port`` (e.g. ``"/dev/ttyUSB1"``) with pyserial; the design
        is read from the device; ``params`` (optional) are the top parameters the board's
        build is expected to have (e.g. its profile's), checked by :meth:`identify`."""
        try:
            import serial
        except ImportError as e:  # pragma: no cover - pyserial is a dependency
            raise LinkError("pyserial is not installed (pip install pyserial)") from e
        try:
            ser = serial.Serial(port, baudrate=baud, timeout=timeout)
        except serial.SerialException as e:
            raise LinkError(f"Cannot open serial port {port!r}: {e}") from e
        ser.reset_input_buffer()
        return cls(ser, check=check, params=params)

    @classmethod
    def simulated(cls, *, level="byte", baud_error=0.0, timeout_cycles=200_000, check=True,
                  simulator="amaranth", **params):
        """The real top in simulation (:class:`lowbit.sim.rtl.transport.SimulatedSerial`).

        ``params`` are :class:`lowbit.hw.top.Accelerator` parameters; ``level`` is ``"byte"`` (byte
        stream shortcut, fast) or ``"uart"`` (bit-level 8N1); ``simulator`` is ``"amaranth"``
        (Amaranth's simulator) or ``"cxxrtl"`` (compiled, ~100x faster, byte level only).
        """
        from lowbit.sim.rtl.transport import SimulatedSerial
        port = SimulatedSerial(level=level, baud_error=baud_error,
                               timeout_cycles=timeout_cycles, simulator=simulator, **params)
        return cls(port, check=check, params=params)

    @classmethod
    def model(cls, *, check=True, **params):
        """The protocol model :class:`lowbit.sim.link.DeviceModel` behind
        :class:`lowbit.sim.rtl.transport.ModelSerial`: pure Python, instant, the reference of the
        real top with the same ``params`` (:class:`lowbit.hw.top.Accelerator` parameter names)."""
        from lowbit.sim.rtl.transport import ModelSerial
        return cls(ModelSerial(**params), check=check, params=params)

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
        :func:`lowbit.sim.lut.transfer_table`); they are sent as their uint8 bit patterns.

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
        """Seed the grand unit from a 64-bit ``seed`` (states by
        :func:`lowbit.sim.prng.seed_lanes`).

        ``mode`` (a ``lowbit.sim.grand.MODES`` name or code 0..5) is written to ``GRAND_MODE``
        first;
        the unit latches the mode at the seed, so this is how the mode changes.
        """
        from lowbit.sim.grand import MODES
        from lowbit.sim.prng import seed_lanes
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
        if addr % 2:
            raise ValueError(f"Start address must be even, not {addr}")
        self._require("sequencer")
        with self._wait_for(min(limit, 1 << 24) * cycles_per_instruction):
            status, body = self.send(Opcode.RUN, addr.to_bytes(4, "little")
                                     + limit.to_bytes(4, "little"))
        if len(body) != 12:
            if status == Status.OK:
                raise ReplyError(f"RUN reply has {len(body)} bytes, not 12")
            self.command_error(Opcode.RUN, status)
        result = RunResult.from_payload(status, body)
        if status != Status.OK:
            name = status.name if isinstance(status, Status) else f"0x{status:02X}"
            err = _run_error(status)(f"RUN stopped with {name} at byte address {result.pc} "
                                     f"after {result.executed} instructions", status)
            err.result = result
            raise err
        return result

    def command_error(self, opcode, status):
        """Raise the :class:`StatusError` subclass of ``status`` for a request ``opcode``."""
        name = status.name if isinstance(status, Status) else f"0x{status:02X}"
        op = Opcode(opcode).name if opcode in Opcode._value2member_map_ else f"0x{opcode:02X}"
        raise _STATUS_ERRORS.get(status, StatusError)(f"{op} failed with status {name}", status)

    def load_program(self, program, addr=0):
        """Write a program (a list of :class:`lowbit.sim.program.Instruction` or its bytes) at byte
        address ``addr``; returns its length in bytes."""
        from lowbit.sim.program import Instruction, assemble
        if isinstance(program, (bytes, bytearray, memoryview)):
            raw = bytes(program)
            if len(raw) % 16:
                raise ValueError(f"Program length must be a multiple of 16 bytes, not {len(raw)}")
        elif all(isinstance(i, Instruction) for i in program):
            raw = assemble(program)
        else:
            raise TypeError("A program is a list of lowbit.sim.program.Instruction or its bytes")
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
        self._program_count = None    # the LOADW program replaces the network's
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
        """
        from lowbit.sim.discrete import CodeBook
        from lowbit.sim.network import unpack_elements
        from lowbit.sim.program import _ROUNDING_CODES, Instruction, config
        codes = _f16_codes(x_f16)
        if fmt not in ("bfp", "int8", "discrete"):
            raise ValueError(f"Format must be 'bfp', 'int8' or 'discrete', not {fmt!r}")
        width = _check_int("Mantissa width", width, 2, 8)
        if rule not in ("floor", "ceil"):
            raise ValueError(f"Exponent rule must be 'floor' or 'ceil', not {rule!r}")
        if rounding not in _ROUNDING_CODES:
            raise ValueError(f"Rounding must be 'nearest', 'zero' or 'stochastic', not "
                             f"{rounding!r}")
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
        ``x_e`` (K/B,). Returns ``(m, e)``: R output mantissas and the exponent of each row
        (each tile of ``N`` rows has its own with ``exp_mode="max"``), as
        :func:`lowbit.sim.network.bfp_dense`."""
        from lowbit.sim.network import BFPDense
        layer = BFPDense(w_m, w_e, bias_m, bias_e, width=width, rounding=rounding,
                         exp_mode=exp_mode, out_exp=fixed_exp)
        return self.dense(layer, (x_m, x_e))

    def discrete_matvec(self, w_codes, x_m, *, book, bias=None, shift=0, out_exp=0):
        """Discrete-weight ``W·x`` (DMATVEC) of int8 codes ``x_m`` with weight codes of
        ``book``, integer ``bias``, requantiser ``shift`` (0..24): one
        :class:`lowbit.sim.network.DiscreteDense` layer with the device's accumulator width. Returns
        ``(m, e)`` as :func:`lowbit.sim.network.discrete_dense`."""
        from lowbit.sim.network import DiscreteDense
        layer = DiscreteDense(w_codes, book, bias=bias, shift=shift,
                              acc_width=self.design.disc_acc_width, out_exp=out_exp)
        return self.dense(layer, x_m)

    def dense(self, layer, x):
        """Run one :mod:`lowbit.sim.network` layer on one input vector.

        ``x`` is ``(x_m, x_e)`` (mantissas, block exponents) for a
        :class:`~lowbit.sim.network.BFPDense` layer and the int8 codes ``x_m`` for a
        :class:`~lowbit.sim.network.DiscreteDense` layer. Returns ``(m, e)`` like the golden
        functions.
        Replaces the loaded network (weights, tables 0.., scratchpad).
        """
        from lowbit.sim.network import BFPDense, block_exponents, pack_elements
        from lowbit.sim.program import InputQuant
        if isinstance(layer, BFPDense):
            if not (isinstance(x, tuple) and len(x) == 2):
                raise TypeError("A BFP layer's input is a tuple (x_m, x_e)")
            x_m, x_e = (np.asarray(v) for v in x)
            if x_m.shape != (layer.cols,) or x_e.shape != (layer.cols // layer.block,):
                raise ValueError(f"Input shapes {x_m.shape}, {x_e.shape} do not match the "
                                 f"layer's {layer.cols} columns in blocks of {layer.block}")
            words = pack_elements(x_m, block_exponents(x_e, layer.block, layer.cols))
        else:
            x_m = np.asarray(x)
            if x_m.shape != (getattr(layer, "cols", None),):
                raise ValueError(f"Input shape {x_m.shape} does not match the layer")
            words = pack_elements(x_m, 0)
        self.load_network([layer], quantise_input=InputQuant("host"))
        out = self._run_words(words[None])
        return out.m[0], out.e[0]

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
            For layers that are not :mod:`lowbit.sim.network` layers or do not fit the device.
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
        self.network = None
        if layout.weight_entries:
            self.load_weights(0, layout.weight_words())
        for idx, table in layout.table_images().items():
            self.lut_load(idx, table)
        for addr, words in layout.bias_words():
            self.write_mem(2 * addr, words.astype("<u2"))
        self._program_count = None
        self.network = layout
        return layout

    def run_network(self, x):
        """Run the loaded network on a batch.

        Parameters
        ----------
        x : array, shape (samples, inputs) or (inputs,)
            Float values (converted to float16 with numpy) or f16 codes as ``uint16``.

        Returns
        -------
        outputs : Activations
            ``m`` (int8 codes) and ``e`` (exponents) of the last layer, shape
            ``(samples, rows)``; ``outputs.values()`` are the floats.
        stats : dict
            ``samples``, ``runs`` (RUN commands), ``chunk`` (samples per RUN),
            ``instructions`` and ``cycles`` (sums over the RUN replies; cycles are 0 from the
            model) and ``seconds`` (host wall time).
        """
        if self.network is None:
            raise ValueError("No network is loaded (call load_network first)")
        return self._run_words(self.network.input_words(x), stats=True)

    def _run_words(self, words, stats=False):
        lay = self.network
        t0 = time.perf_counter()
        n = words.shape[0]
        out = []
        runs = instructions = cycles = 0
        for k in range(0, n, lay.chunk):
            part = words[k:k + lay.chunk]
            count = part.shape[0]
            if self._program_count != count:
                self.load_program(lay.program(count))
                self._program_count = count
            self.write_mem(2 * lay.in_addr, part.reshape(-1).astype("<u2"))
            limit = lay.instructions(count)
            res = self.run(0, limit, cycles_per_instruction=4096 + 64 * lay.in_words)
            if res.executed != limit:
                raise ReplyError(f"The network program ran {res.executed} instructions, "
                                 f"expected {limit}")
            runs, instructions, cycles = runs + 1, instructions + res.executed, \
                cycles + res.cycles
            out.append(self.read_mem(2 * lay.out_addr, count * lay.out_words, np.uint16)
                       .reshape(count, lay.out_words)[:, :lay.rows])
        from lowbit.sim.network import unpack_elements
        m, e = unpack_elements(np.concatenate(out) if out else
                               np.zeros((0, lay.rows), np.uint16))
        acts = Activations(m, e)
        if not stats:
            return acts
        return acts, {"samples": n, "runs": runs, "chunk": lay.chunk,
                      "instructions": instructions, "cycles": cycles,
                      "seconds": time.perf_counter() - t0}


def _check_int(name, value, lo, hi):
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer between {lo} and {hi}, not {value}")
    return int(value)


def _f16_codes(x):
    x = np.asarray(x)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"Input must be a non-empty 1-D array, not shape {x.shape}")
    if x.dtype == np.uint16:
        return x.copy()
    if not np.issubdtype(x.dtype, np.floating):
        raise TypeError(f"Input must be a float array (or f16 codes as uint16), not {x.dtype}")
    return x.astype(np.float16).view(np.uint16)


def _book_config(book):
    from lowbit.sim.program import config
    words = book.words() + [0] * (8 - len(book.words()))
    return [config("CODE_WIDTH", book.n),
            config("CODE_BOOK0", sum(v << 8 * k for k, v in enumerate(words[:4]))),
            config("CODE_BOOK1", sum(v << 8 * k for k, v in enumerate(words[4:])))]
