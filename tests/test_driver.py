"""The host driver against the simulated top, and against a model port for failure cases."""

import dataclasses
import os
import sys

import numpy as np
import pytest

from lowbit.boards.driver import (
    Accelerator,
    BadAddress,
    BadLength,
    BadOpcode,
    IdentityError,
    LinkError,
    NoReply,
    ReadOnly,
    ReplyError,
    StatusError,
)
from lowbit.sim import link as L

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from backdoor import FastMemoryPort  # noqa: E402

PARAMS = dict(scratch_bytes=512, frame_bytes=64, timeout_bits=20)


@pytest.fixture(scope="module")
def acc():
    with Accelerator.simulated(**PARAMS) as a:
        yield a


class ModelPort:
    """A serial-port stand-in answering from :class:`lowbit.sim.link.DeviceModel`, with faults."""

    def __init__(self, model, *, mangle=None, silent=False):
        self.model, self.mangle, self.silent = model, mangle, silent
        self.rx = bytearray()

    def write(self, data):
        reply = self.model.feed(data)
        if self.mangle:
            reply = self.mangle(reply)
        if not self.silent:
            self.rx += reply

    def read(self, n):
        out, self.rx = bytes(self.rx[:n]), self.rx[n:]
        return out

    def close(self):
        pass


def test_identify(acc):
    ident = acc.identify()
    assert ident.magic == b"LOWB" and ident.protocol == L.PROTOCOL_VERSION
    assert ident.design == L.DESIGN_VERSION
    assert (ident.lanes, ident.scratch_bytes, ident.frame_bytes, ident.use_spram) == \
        (2, 512, 64, False)
    assert acc.read_reg("ID_MAGIC") == int.from_bytes(b"LOWB", "little")
    assert acc.read_reg("ID_SCRATCH") == 512


def test_ping(acc):
    assert acc.ping() == b""
    assert acc.ping(bytes(range(64))) == bytes(range(64))
    with pytest.raises(BadLength, match="PING failed with status BAD_LENGTH"):
        acc.ping(bytes(65))


def test_registers(acc):
    acc.write_reg("MANT_WIDTH", 5)
    acc.write_reg(0x20, 0xCAFEF00D)
    acc.write_reg("rounding", 7)                       # 2-bit register keeps the low bits
    assert (acc.read_reg("mant_width"), acc.read_reg("PRNG_SEED0"), acc.read_reg(0x11)) == \
        (5, 0xCAFEF00D, 3)
    with pytest.raises(ReadOnly, match="REG_WRITE failed with status READ_ONLY") as e:
        acc.write_reg("ID_VERSION", 0)
    assert e.value.status == L.Status.READ_ONLY and isinstance(e.value, LinkError)
    with pytest.raises(BadAddress):
        acc.read_reg(0x3F)
    with pytest.raises(ValueError, match="Unknown register 'NOPE'; known: ID_MAGIC"):
        acc.read_reg("NOPE")
    with pytest.raises(TypeError, match=r"Register \(a name or an index\) must be an integer"):
        acc.read_reg(True)
    with pytest.raises(ValueError, match="between 0 and 4294967295, not 4294967296"):
        acc.write_reg("PRNG_SEED1", 1 << 32)
    assert acc.read_reg("MANT_WIDTH") == 5             # the link is still in sync


def test_memory_round_trip(acc):
    rng = np.random.default_rng(0)
    a = rng.integers(-32768, 32767, size=90, dtype=np.int16)     # 180 bytes: 4 frames
    acc.write_mem(6, a)
    assert np.array_equal(acc.read_mem(6, 90, dtype=np.int16), a)
    f = rng.standard_normal(20).astype(np.float32)
    acc.write_mem(300, f)
    assert np.array_equal(acc.read_mem(300, 20, dtype=np.float32), f)
    acc.write_mem(511, b"\x7f")
    assert acc.read_mem(504, 8).tolist()[-1] == 0x7F
    assert np.array_equal(acc.read_mem(6, 4, dtype=np.int16), a[:4])   # untouched


def test_memory_errors(acc):
    acc.write_mem(0, np.arange(8, dtype=np.uint8))
    with pytest.raises(BadAddress, match="MEM_WRITE failed with status BAD_ADDRESS"):
        acc.write_mem(512, b"\x01")
    with pytest.raises(BadLength):
        acc.write_mem(510, b"\x01\x02\x03")
    with pytest.raises(BadLength, match="MEM_READ"):
        acc.read_mem(500, 13)
    with pytest.raises(BadOpcode):
        acc.command(0x50, b"engine?")
    assert acc.read_mem(0, 8).tolist() == list(range(8))


def test_open_missing_port():
    with pytest.raises(LinkError, match="Cannot open serial port"):
        Accelerator.open("/dev/lowbit-no-such-port")


def test_identity_mismatch():
    for change in (dict(magic=b"LOWC"), dict(protocol=L.PROTOCOL_VERSION + 1),
                   dict(design=(L.DESIGN_VERSION[0] + 1, 0))):
        model = L.DeviceModel()
        model.identity = dataclasses.replace(model.identity, **change)
        with pytest.raises(IdentityError):
            Accelerator(ModelPort(model))
    model = L.DeviceModel()
    model.identity = dataclasses.replace(model.identity, design=(L.DESIGN_VERSION[0], 99))
    assert Accelerator(ModelPort(model)).identity.design[1] == 99     # minor may differ


# == Identification: the design from the device ===================================================

class OldDevicePort(ModelPort):
    """A device that answers REG_READ of ``missing`` registers with ``status`` (a design
    older than 0.2 has no ID_MATRIX / ID_ENGINE: BAD_ADDRESS), or with the payload ``reply``."""

    def __init__(self, model, *, missing=("ID_MATRIX", "ID_ENGINE"), status=L.Status.BAD_ADDRESS,
                 reply=None):
        super().__init__(model)
        self.missing = {L.REGISTER_BY_NAME[name].index for name in missing}
        self.status, self.reply = status, reply

    def write(self, data):
        opcode, payload = L.decode_request(data)
        if opcode == L.Opcode.REG_READ and int.from_bytes(payload, "little") in self.missing:
            self.rx += L.encode_reply(self.status) if self.reply is None else \
                L.encode_reply(L.Status.OK, self.reply)
        else:
            super().write(data)


@pytest.mark.parametrize("board", ["icebreaker", "hx8k", "ulx3s", "orangecrab"])
def test_design_read_from_device_equals_profile(board):
    from lowbit.boards.profiles import get_board
    top = get_board(board).top
    model = L.DeviceModel(**top)
    acc = Accelerator(ModelPort(model))                 # no parameters: the device alone
    assert acc.params is None and acc.design == model.design
    d = acc.design
    assert (d.matrix_lanes, d.block, d.max_blocks, d.weight_depth) == tuple(
        top.get(k, L.DESIGN_PARAMS[k]) for k in ("matrix_lanes", "block", "max_blocks",
                                                 "weight_depth"))
    assert acc.device_params["code_bits"] == top["code_bits"]
    assert acc.device_params["lanes"] == top["lanes"]
    checked = Accelerator(ModelPort(L.DeviceModel(**top)), params=top)   # the profile agrees
    assert checked.design == model.design


def test_parameter_tables_follow_the_top():
    """Every lowbit.hw.top.Accelerator parameter is a DeviceModel parameter with the same default or
    hardware-only; the driver's defaults of what a device reports are the top's."""
    import inspect

    from lowbit.boards.driver import _TOP_DEFAULTS
    from lowbit.hw.top import Accelerator as Top
    top = {k: p.default for k, p in inspect.signature(Top).parameters.items()}
    model = {k: p.default for k, p in inspect.signature(L.DeviceModel).parameters.items()
             if p.kind == p.KEYWORD_ONLY}
    for name, default in top.items():
        if name not in L.DeviceModel.HARDWARE_ONLY:
            assert name in model and model[name] == default, name
    for name, default in _TOP_DEFAULTS.items():
        assert top.get(name, L.DESIGN_PARAMS.get(name)) == default, name


def test_wrong_profile_raises():
    from lowbit.boards.profiles import get_board
    ulx3s, ice = get_board("ulx3s").top, get_board("icebreaker").top
    with pytest.raises(IdentityError, match="max_blocks: device 16, expected 4") as e:
        Accelerator(ModelPort(L.DeviceModel(**ulx3s)), params=ice)
    for part in ("lanes: device 8, expected 1", "use_spram: device False, expected True",
                 "quantiser: device True, expected False", "scratch_bytes: device 65536, "
                 "expected 32768", "grand: device True, expected False"):
        assert part in str(e.value), part
    assert "weight_depth: device 1024, expected 256" in str(e.value)
    assert "matrix_lanes: device 64, expected 16" in str(e.value)
    assert "block:" not in str(e.value)                 # both have blocks of 16
    with pytest.raises(IdentityError, match=r"^The device differs from the expected parameters: "
                                            r"weight_depth: device 1024, expected 512$"):
        Accelerator(ModelPort(L.DeviceModel(**ulx3s)), params={**ulx3s, "weight_depth": 512})
    with pytest.raises(IdentityError, match=r"parameters: bfp_predictor: device True, "
                                            r"expected False$"):
        Accelerator(ModelPort(L.DeviceModel(**ulx3s)), params={**ulx3s, "bfp_predictor": False})
    # Parameters a profile leaves out mean the top's defaults.
    with pytest.raises(IdentityError, match="code_bits: device 2, expected 3"):
        Accelerator(ModelPort(L.DeviceModel(code_bits=2)), params={})
    with pytest.raises(IdentityError, match=r"grand_modes: device \('normal',\), expected "
                                            r"\('normal', 'normal144'"):
        Accelerator(ModelPort(L.DeviceModel(grand_modes=["normal"])), params={})
    # Hardware-only parameters are not checked; without the sequencer its engines are absent.
    Accelerator(ModelPort(L.DeviceModel(**ulx3s)), params={**ulx3s, "baud": 9600,
                                                           "clk_freq": 1e6, "multiplier": "lut"})
    Accelerator(ModelPort(L.DeviceModel(bfp=False)), params={"bfp": True})
    assert Accelerator.model(engines=0b10001).identity.engine_names == ["grand", "lut"]
    with pytest.raises(TypeError, match="Expected parameters must be a dict"):
        Accelerator(ModelPort(L.DeviceModel()), params=[("lanes", 2)])


class RecordPort(ModelPort):
    """Answers IDENTIFY with a fixed record (e.g. a protocol-2 device's 16 bytes)."""

    def __init__(self, record, baudrate=None):
        super().__init__(L.DeviceModel())
        self.record = record
        if baudrate is not None:
            self.baudrate = baudrate

    def write(self, data):
        if L.decode_request(data)[0] == L.Opcode.IDENTIFY and self.record is not None:
            self.rx += L.encode_reply(0, self.record)
        else:
            super().write(data)


def test_protocol_2_device_is_refused_clearly():
    """A bitstream of protocol 2 (16-byte record, no packed transfers) gets a clear error that
    says what to do, not a malformed-record complaint."""
    old = L.DeviceModel().identity.to_bytes()[:16]
    old = old[:4] + bytes([2]) + old[5:]
    with pytest.raises(IdentityError, match=r"Protocol version 2 on the device, driver speaks 3 "
                                            r"\(version 3 added the packed transfers.*rebuild "
                                            r"and reprogram"):
        Accelerator(RecordPort(old))
    with pytest.raises(IdentityError, match="Not a lowbit accelerator"):
        Accelerator(RecordPort(b"XXXX" + old[4:]))
    with pytest.raises(IdentityError, match="Malformed identification record"):
        Accelerator(RecordPort(L.DeviceModel().identity.to_bytes()[:20]))


def test_identify_reports_the_link_and_checks_the_port_rate():
    model = L.DeviceModel(clk_freq=25e6, baud=3_000_000)
    ident = Accelerator(ModelPort(model)).identity
    assert (ident.baud, ident.clk_hz) == (3_000_000, 25_000_000)
    record = model.identity.to_bytes()
    assert Accelerator(RecordPort(record, baudrate=3_000_000)).identity.baud == 3_000_000
    with pytest.raises(IdentityError, match=r"runs at 3000000 baud but the port at 1000000.*"
                                            r"--baud 3000000"):
        Accelerator(RecordPort(record, baudrate=1_000_000))


@pytest.mark.parametrize("baud, exc, match", [
    (0, ValueError, "Baud rate must be an integer between 1 and 12000000, not 0"),
    (24_000_000, ValueError, "not 24000000"),
    (3e6, TypeError, "Baud rate must be an integer, not 3000000.0"),
    ("fast", TypeError, "Baud rate must be an integer"),
    (True, TypeError, "Baud rate must be an integer"),
])
def test_open_refuses_bad_rates_before_touching_the_port(baud, exc, match):
    with pytest.raises(exc, match=match):
        Accelerator.open("/dev/lowbit-no-such-port", baud=baud)
    with pytest.raises(exc, match=match):
        Accelerator.open("/dev/lowbit-no-such-port", params={"baud": baud})


def test_open_probes_the_profile_rates():
    from lowbit.boards.driver import profile_rates
    from lowbit.boards.profiles import BOARDS
    rates = profile_rates()
    assert rates == sorted({p.top["baud"] for p in BOARDS.values()}, reverse=True)
    assert rates[0] == 12_000_000 and 4_000_000 in rates and 3_000_000 in rates
    with pytest.raises(LinkError, match="Cannot open serial port '/dev/lowbit-no-such-port' at "
                                        "12000000 baud"):
        Accelerator.open("/dev/lowbit-no-such-port")


def test_packed_transfers_over_the_model():
    """write_low / fill_high / read_low / read_high: several frames, the same words as
    write_mem of ``m | e << 8``; requests checked whole before the first frame."""
    acc = Accelerator.model(scratch_bytes=1024, frame_bytes=32, block=4, matrix_lanes=8)
    rng = np.random.default_rng(3)
    m = rng.integers(-128, 128, 200)
    e = rng.integers(-20, 10, 50)
    sent = acc.bytes_sent
    acc.fill_high(16, e)
    acc.write_low(16, m)
    assert acc.bytes_sent - sent == 50 + 200 + 10 * ((50 + 27) // 28 + (200 + 27) // 28)
    words = acc.read_mem(16, 200, np.uint16)
    assert np.array_equal(words, (m & 0xFF) | (np.repeat(e, 4) & 0xFF) << 8)
    assert np.array_equal(acc.read_low(16, 200), (m & 0xFF).astype(np.uint8))
    assert np.array_equal(acc.read_high(16, 25), (e[::2] & 0xFF).astype(np.uint8))
    assert acc.read_low(0, 0).tolist() == [] and acc.write_low(0, b"") is None
    model = acc.port.model
    before = bytes(model.scratch)
    for call, exc, match in [
            (lambda: acc.write_low(1, bytes(40)), BadAddress, "odd"),
            (lambda: acc.fill_high(1024, bytes(40)), BadAddress, "outside the 1024-byte"),
            (lambda: acc.fill_high(800, bytes(40)), BadLength, "runs past the end"),
            (lambda: acc.read_high(0, 100), BadLength, "runs past the end"),
            (lambda: acc.write_low(2, bytes(3)), None, None),
            (lambda: acc.write_low(1022, bytes(3)), BadLength, None),      # one frame: device
            (lambda: acc.read_low(3, 2), BadAddress, None),
            (lambda: acc.write_low(0, np.array([256])), ValueError, "-128..255, not 256"),
            (lambda: acc.write_low(0, np.array([1.5])), TypeError, "must be integers"),
            (lambda: acc.write_low(0, [1, 2]), TypeError, "bytes-like or an integer numpy"),
            (lambda: acc.read_low(0, -1), ValueError, "Byte count"),
            (lambda: acc.read_high(2.0, 1), TypeError, "Byte address")]:
        if exc is None:
            call()
            before = bytes(model.scratch)
            continue
        with pytest.raises(exc, match=match):
            call()
        assert bytes(model.scratch) == before


def test_network_link_bytes_per_image(macc):
    """run_network sends host-quantised BFP input packed: one byte per element and one per
    block, and reads one byte per output row and one per tile (plus frames)."""
    rng = np.random.default_rng(7)
    l1 = BFPDense(rng.integers(-127, 128, (8, 16)), rng.integers(-9, -5, (8, 2)),
                  exp_mode="max")
    lay = macc.load_network([l1], quantise_input="host")
    x = rng.normal(size=(40, 16))
    out, stats = macc.run_network(x)
    ref = lay.reference(x)
    assert np.array_equal(out.m, ref[0]) and np.array_equal(out.e, ref[1])
    payload = 40 * (16 + 2 + 8 + 1)                # mantissas, block exponents, rows, tiles
    assert payload < stats["link_bytes"] < payload + 400      # frames, RUN, the program


def test_old_or_broken_device_gives_identity_error():
    old = L.DeviceModel()
    old.identity = dataclasses.replace(old.identity, design=(L.DESIGN_VERSION[0], 1))
    with pytest.raises(IdentityError, match=r"design 0\.1\) cannot read the identification "
                                            r"register ID_MATRIX \(REG_READ failed with status "
                                            r"BAD_ADDRESS\); its gateware predates design 0\.2"):
        Accelerator(OldDevicePort(old))
    with pytest.raises(IdentityError, match="ID_ENGINE"):
        Accelerator(OldDevicePort(L.DeviceModel(), missing=("ID_ENGINE",)),
                    params={"sequencer": False})
    with pytest.raises(IdentityError, match="REG_READ reply has 2 bytes"):
        Accelerator(OldDevicePort(L.DeviceModel(), missing=("ID_MATRIX",), reply=b"\x08\x00"))
    with pytest.raises(IdentityError, match=r"describe no valid design \(ID_MATRIX=0x00000000, "
                                            r"ID_ENGINE=.*Matrix lane count"):
        Accelerator(OldDevicePort(L.DeviceModel(), missing=("ID_MATRIX",), reply=bytes(4)))
    # Nothing is half-set after a failed identify; check=False defers it to first use.
    acc = Accelerator(OldDevicePort(old), check=False)
    with pytest.raises(IdentityError):
        acc.has_engine("bfp")
    with pytest.raises(IdentityError):
        _ = acc.design
    assert acc.identity is None and acc.device_params is None


def test_reply_faults():
    with pytest.raises(NoReply, match=r"No reply to IDENTIFY \(opcode 0x02\) within the "
                                      r"timeout \(0 bytes of a reply received\)\. Likely causes: "
                                      r"the wrong serial port .*baud rate.*`lowbit flash`"):
        Accelerator(ModelPort(L.DeviceModel(), silent=True))
    bad_crc = ModelPort(L.DeviceModel(), mangle=lambda r: r[:-1] + bytes([r[-1] ^ 0x40]))
    with pytest.raises(ReplyError, match="Corrupted reply"):
        Accelerator(bad_crc)
    short = ModelPort(L.DeviceModel(), mangle=lambda r: r[:-3])
    with pytest.raises(NoReply, match="bytes of a reply received"):
        Accelerator(short)
    noisy = ModelPort(L.DeviceModel(), mangle=lambda r: b"\x00\xff" + r)
    acc = Accelerator(noisy)
    assert acc.ping(b"ok") == b"ok"
    weird = ModelPort(L.DeviceModel(), mangle=lambda r: L.encode_reply(0x33))
    with pytest.raises(StatusError, match="status 0x33"):
        Accelerator(weird, check=False).command(L.Opcode.PING)


def test_uart_level_driver():
    """The same driver through the real UART of the simulated top (4 Mbaud at 12 MHz, the
    UART's smallest divisor, 3: the fewest simulated cycles a byte; the host 2 % fast)."""
    acc = Accelerator.simulated(level="uart", baud_error=0.02, baud=4_000_000, **PARAMS)
    assert acc.port.top.divisor == 3
    assert acc.identity.scratch_bytes == 512
    acc.write_mem(100, np.array([1, -2, 3], dtype=np.int8))
    assert acc.read_mem(100, 3, dtype=np.int8).tolist() == [1, -2, 3]
    assert acc.read_reg("UART_ERRORS") == 0
    acc.close()


# == Layer programs over the model transport (fast) ==============================================

from lowbit.boards.driver import Limit, MissingEngine, RunError  # noqa: E402
from lowbit.sim.discrete import CodeBook  # noqa: E402
from lowbit.sim.lut import Quant, transfer_table  # noqa: E402
from lowbit.sim.network import BFPDense, DiscreteDense, bfp_dense, discrete_dense  # noqa: E402
from lowbit.sim.prng import Xoroshiro128aox  # noqa: E402
from lowbit.sim.program import InputQuant, Instruction, Machine  # noqa: E402
from lowbit.sim.quantiser import decode_f16, quantise_bfp, quantise_int8  # noqa: E402

SEQ = dict(sequencer=True, scratch_bytes=4096, frame_bytes=256, matrix_lanes=8, block=8,
           max_blocks=4, weight_depth=128, timeout_bits=20)
RELU = transfer_table(["relu"], Quant(scale=2.0 ** -3, dtype="int8"),
                      Quant(scale=2.0 ** -4, dtype="int8"))


class CountingPort:
    """Wraps a port and counts the bytes the driver writes."""

    def __init__(self, port):
        self.port, self.sent = port, 0

    def write(self, data):
        self.sent += len(data)
        return self.port.write(data)

    def __getattr__(self, name):
        return getattr(self.port, name)


@pytest.fixture
def macc():
    acc = Accelerator.model(**SEQ)
    acc.port = CountingPort(acc.port)
    return acc


def _layers(rng):
    l1 = BFPDense(rng.integers(-127, 128, (12, 16)), rng.integers(-9, -5, (12, 2)),
                  rng.integers(-127, 128, 12), rng.integers(-8, -3, 12), exp_mode="fixed",
                  out_exp=-3, table=RELU, table_exp=-4)
    l2 = DiscreteDense(rng.integers(0, 4, (5, 12)), CodeBook.default(2),
                       bias=rng.integers(-50, 50, 5), shift=2, out_exp=-1)
    return [l1, l2]


def test_model_transport_identity_and_design(macc):
    assert macc.identity.engine_names == ["grand", "bfp", "discrete", "quantiser", "lut",
                                          "sequencer"]
    d = macc.design
    assert (d.matrix_lanes, d.block, d.max_blocks, d.weight_depth, d.scratch_bytes) == \
        (8, 8, 4, 128, 4096)
    assert macc.port.model.design == d
    assert macc.has_engine("sequencer") and not Accelerator.model().has_engine("sequencer")
    with pytest.raises(ValueError, match="Unknown engine"):
        macc.has_engine("fpu")


def test_run_results_and_errors(macc):
    macc.load_program([Instruction.nop(), Instruction.halt()], addr=64)
    r = macc.run(64, 10)
    assert (r.status, r.pc, r.executed, r.cycles) == (L.Status.OK, 80, 2, 0)
    macc.load_program([Instruction.nop(), Instruction.jump(0)])
    with pytest.raises(Limit, match="LIMIT at byte address 16 after 5") as e:
        macc.run(0, 5)
    assert isinstance(e.value, RunError) and e.value.result.executed == 5
    macc.load_program([Instruction.nop(), Instruction.move(0, 2040, 9)])
    with pytest.raises(BadAddress) as e:
        macc.run(0, 5)
    assert isinstance(e.value, RunError) and (e.value.result.pc, e.value.result.executed) == \
        (16, 1)
    with pytest.raises(BadAddress) as e:                   # start past the end: no record
        macc.run(4096 - 8, 1)
    assert not isinstance(e.value, RunError)
    sent = macc.port.sent
    for args, exc, match in [((1, 1), ValueError, "even"), ((0, 0), ValueError, "limit"),
                             ((0, 1 << 32), ValueError, "limit"), ((0.0, 1), TypeError, "Start"),
                             ((True, 1), TypeError, "Start")]:
        with pytest.raises(exc, match=match):
            macc.run(*args)
    with pytest.raises(TypeError, match="Instruction"):
        macc.load_program(["NOP"])
    with pytest.raises(ValueError, match="multiple of 16"):
        macc.load_program(b"\x00" * 15)
    with pytest.raises(ValueError, match="does not fit"):
        macc.load_program([Instruction.halt()], addr=4090)
    assert macc.port.sent == sent                           # nothing was sent


def test_missing_engines_raise_before_sending():
    acc = Accelerator.model(sequencer=True, quantiser=False, discrete=False, lut_tables=0)
    acc.port = CountingPort(acc.port)
    rng = np.random.default_rng(0)
    with pytest.raises(MissingEngine, match="no quantiser engine"):
        acc.quantise(np.zeros(16), fmt="int8")
    with pytest.raises(MissingEngine, match="no discrete engine"):
        acc.discrete_matvec(np.zeros((2, 4), int), np.zeros(4, int), book=CodeBook.default(1))
    with pytest.raises(MissingEngine, match="no lut engine"):
        acc.load_network(_layers(rng)[:1])
    plain = BFPDense(np.zeros((2, 16), int), np.zeros((2, 2), int))
    with pytest.raises(MissingEngine, match="no quantiser"):
        acc.load_network([plain], quantise_input="device")
    assert acc.port.sent == 0
    with pytest.raises(MissingEngine, match="no sequencer"):
        Accelerator.model().run(0, 1)


def test_load_weights_through_loadw(macc):
    rng = np.random.default_rng(1)
    words = rng.integers(0, 1 << 16, (100, 8))
    macc.load_weights(20, words)
    assert np.array_equal(macc.port.model.machine.banks[:, 20:120], words.T)
    for args, match in [((0, np.zeros((3, 4), int)), "shape"),
                        ((0, np.zeros((3, 8))), "integer"),
                        ((0, np.full((3, 8), 1 << 16)), "16 bits"),
                        ((126, np.zeros((3, 8), int)), "weight depth")]:
        with pytest.raises(ValueError, match=match):
            macc.load_weights(*args)


def test_quantise_matches_models(macc):
    rng = np.random.default_rng(2)
    x = (rng.normal(size=296) * 5).astype(np.float32)
    codes = x.astype(np.float16).view(np.uint16)
    m, e = macc.quantise(x, width=5, rule="ceil", rounding="zero")
    ref_m, ref_e = quantise_bfp(decode_f16(codes), block=8, width=5, rule="ceil",
                                rounding="zero")
    assert np.array_equal(m, ref_m) and np.array_equal(e, ref_e)
    q = macc.quantise(codes[:37], fmt="int8", shift=-3, rounding="nearest")
    assert np.array_equal(q, quantise_int8(decode_f16(codes[:37]), shift=-3))
    book = CodeBook.default(2)
    c = macc.quantise(np.array([0.9, -0.2, 0.1, -5.0, 0.0, 0.07]), fmt="discrete", book=book)
    assert list(c) == [3, 1, 2, 0, 1, 2]
    # Stochastic: the rounding PRNG seeded from the host, one draw per element.
    macc.rounding_seed(1234)
    m, e = macc.quantise(x[:24], width=3, rounding="stochastic")
    rand = (Xoroshiro128aox(1234, 1).take(24)[:, 0] & np.uint64(0xFF)).astype(np.int64)
    ref_m, ref_e = quantise_bfp(decode_f16(codes[:24]), block=8, width=3,
                                rounding="stochastic", rand=rand, rand_bits=8)
    assert np.array_equal(m, ref_m) and np.array_equal(e, ref_e)


@pytest.mark.parametrize("kw, exc, match", [
    (dict(fmt="fp8"), ValueError, "Format"),
    (dict(width=9), ValueError, "Mantissa width"),
    (dict(width=8.0), TypeError, "Mantissa width"),
    (dict(rule="round"), ValueError, "rule"),
    (dict(rounding="up"), ValueError, "Rounding"),
    (dict(shift=200), ValueError, "Shift"),
    (dict(fmt="discrete"), TypeError, "CodeBook"),
])
def test_quantise_validation(macc, kw, exc, match):
    with pytest.raises(exc, match=match):
        macc.quantise(np.zeros(16), **kw)
    assert macc.port.sent == 0


def test_quantise_input_validation(macc):
    with pytest.raises(TypeError, match="float array"):
        macc.quantise(np.zeros(16, dtype=np.int32))
    with pytest.raises(ValueError, match="1-D"):
        macc.quantise(np.zeros((2, 8)))
    with pytest.raises(ValueError, match="multiple of 8"):
        macc.quantise(np.zeros(12))
    assert macc.port.sent == 0


def test_bfp_and_discrete_matvec_match_golden(macc):
    rng = np.random.default_rng(3)
    w_m, w_e = rng.integers(-127, 128, (19, 24)), rng.integers(-9, -5, (19, 3))
    b_m, b_e = rng.integers(-127, 128, 19), rng.integers(-7, -2, 19)
    x_m, x_e = rng.integers(-127, 128, 24), rng.integers(-3, 1, 3)
    m, e = macc.bfp_matvec(w_m, w_e, x_m, x_e, bias_m=b_m, bias_e=b_e, width=7)
    col = macc.design.column()
    ref = bfp_dense(BFPDense(w_m, w_e, b_m, b_e, width=7, exp_mode="max"), x_m, x_e, col)
    assert np.array_equal(m, ref[0]) and np.array_equal(e, ref[1])
    m, e = macc.bfp_matvec(w_m, w_e, x_m, x_e, exp_mode="fixed", fixed_exp=-2,
                           rounding="zero")
    ref = bfp_dense(BFPDense(w_m, w_e, exp_mode="fixed", out_exp=-2, rounding="zero"),
                    x_m, x_e, col)
    assert np.array_equal(m, ref[0]) and (e == -2).all()
    book = CodeBook.default(3)
    w_c, x = rng.integers(0, 8, (6, 21)), rng.integers(-128, 128, 21)
    bias = rng.integers(-300, 300, 6)
    m, e = macc.discrete_matvec(w_c, x, book=book, bias=bias, shift=3, out_exp=1)
    ref = discrete_dense(DiscreteDense(w_c, book, bias=bias, shift=3, out_exp=1), x, lanes=8)
    assert np.array_equal(m, ref[0]) and (e == 1).all()
    with pytest.raises(ValueError, match="do not match"):
        macc.bfp_matvec(w_m, w_e, x_m[:16], x_e)
    with pytest.raises(TypeError, match="tuple"):
        macc.dense(BFPDense(w_m, w_e), x_m)
    with pytest.raises(ValueError, match="block size 12"):
        macc.bfp_matvec(w_m, w_e[:, :2], x_m, x_e[:2])


def test_network_over_model_equals_reference(macc):
    rng = np.random.default_rng(4)
    layers = _layers(rng)
    lay = macc.load_network(layers)
    assert lay.input.where == "device" and macc.network is lay
    x = rng.normal(size=(lay.chunk * 2 + 3, 16)) * 2
    out, stats = macc.run_network(x)
    ref = lay.reference(x)
    assert np.array_equal(out.m, ref[0]) and np.array_equal(out.e, ref[1])
    assert stats["runs"] == 3 and stats["samples"] == len(x) and stats["cycles"] == 0
    assert stats["instructions"] == sum(lay.instructions(n) for n in
                                        (lay.chunk, lay.chunk, 3))
    assert np.allclose(out.values(), np.ldexp(ref[0], ref[1]))
    # Host quantisation gives the same numbers.
    lay_h = macc.load_network(layers, quantise_input="host")
    out_h, _ = macc.run_network(x.astype(np.float16))
    assert np.array_equal(out_h.m, out.m) and lay_h.input.where == "host"
    # A single sample, and f16 codes.
    out1, _ = macc.run_network(x[5].astype(np.float16).view(np.uint16))
    assert np.array_equal(out1.m[0], out.m[5])


def test_network_api_validation(macc):
    rng = np.random.default_rng(5)
    with pytest.raises(ValueError, match="No network"):
        macc.run_network(np.zeros((1, 16)))
    with pytest.raises(ValueError, match="quantise_input"):
        macc.load_network(_layers(rng), quantise_input="cloud")
    with pytest.raises(TypeError, match="InputQuant"):
        macc.load_network(_layers(rng), quantise_input=8)
    with pytest.raises(TypeError, match="lowbit.sim.network"):
        macc.load_network(["dense"])
    with pytest.raises(ValueError, match="block size 16"):
        macc.load_network([BFPDense(np.zeros((2, 16), int), np.zeros((2, 1), int))])
    assert macc.port.sent == 0
    macc.load_network(_layers(rng), quantise_input=InputQuant("host", width=6))
    with pytest.raises(ValueError, match=r"shape \(samples, 16\)"):
        macc.run_network(np.zeros((2, 15)))
    with pytest.raises(TypeError, match="float array"):
        macc.run_network(np.zeros((2, 16), dtype=np.int8))


def test_network_stochastic_layer_equals_machine(macc):
    rng = np.random.default_rng(6)
    layer = BFPDense(rng.integers(-127, 128, (8, 16)), rng.integers(-9, -5, (8, 2)),
                     rounding="stochastic", width=4)
    lay = macc.load_network([layer], quantise_input=InputQuant("device", rounding="stochastic"))
    macc.rounding_seed(77)
    x = rng.normal(size=(4, 16))
    out, _ = macc.run_network(x)
    # The same program on a fresh Machine seeded alike.
    m = Machine(macc.design)
    m.rng = Xoroshiro128aox(77, 1)
    m.load_weights(0, lay.weight_words())
    m.write_words(lay.in_addr, lay.input_words(x).reshape(-1))
    from lowbit.sim.program import assemble
    raw = assemble(lay.program(4))
    m.scratch[:len(raw)] = raw
    assert m.run(0, 1000).status == L.Status.OK
    from lowbit.sim.network import unpack_elements
    ref = unpack_elements(m.read_words(lay.out_addr, 4 * lay.out_words).reshape(4, -1))
    assert np.array_equal(out.m, ref[0])


def _predicted_layer(rng, rows, cols, **kw):
    """A BFP layer in predicted mode whose output blocks have similar magnitudes (so later
    tiles use the prediction), with a bias."""
    return BFPDense(rng.integers(-127, 128, (rows, cols)), rng.integers(-8, -6, (rows, cols // 8)),
                    rng.integers(-127, 128, rows), rng.integers(-8, -5, rows),
                    exp_mode="predicted", **kw)


def test_predicted_dense_and_network_over_model(macc):
    """``exp_mode="predicted"``: dense() equals bfp_dense on the design's column, and a
    two-layer predicted network over several RUN chunks equals the reference (each layer of
    each sample starts with a cleared history)."""
    rng = np.random.default_rng(13)
    col = macc.design.column()
    differs = 0
    for k in range(6):
        layer = _predicted_layer(rng, 37, 16, width=int(rng.integers(3, 9)),
                                 rounding=("nearest", "zero")[k % 2])
        x_m, x_e = rng.integers(-127, 128, 16), rng.integers(-3, 1, 2)
        m, e = macc.dense(layer, (x_m, x_e))
        ref = bfp_dense(layer, x_m, x_e, col)
        assert np.array_equal(m, ref[0]) and np.array_equal(e, ref[1])
        got = macc.bfp_matvec(layer.w_m, layer.w_e, x_m, x_e, bias_m=layer.bias_m,
                              bias_e=layer.bias_e, width=layer.width, rounding=layer.rounding,
                              exp_mode="predicted")
        assert np.array_equal(got[0], m) and np.array_equal(got[1], e)
        as_max = bfp_dense(dataclasses.replace(layer, exp_mode="max"), x_m, x_e, col)
        differs += not np.array_equal(as_max[1], e)
    assert differs >= 3                      # the predicted selector did choose exponents
    layers = [_predicted_layer(rng, 24, 16), _predicted_layer(rng, 17, 24, width=6)]
    lay = macc.load_network(layers, quantise_input="host")
    x = rng.normal(size=(lay.chunk + 3, 16))
    out, stats = macc.run_network(x)
    ref = lay.reference(x)
    assert np.array_equal(out.m, ref[0]) and np.array_equal(out.e, ref[1])
    assert stats["runs"] == 2


def test_robustness_model():
    """Garbage, truncated frames, bad CRCs, unknown opcodes, bad RUN payloads and failing
    programs: each gets its error reply (or is skipped), the next good command works and no
    memory outside the addressed range changes."""
    acc = Accelerator.model(**SEQ)
    _robustness(acc, acc.port.model.scratch.__len__())


def _robustness(acc, size, compare=None):
    rng = np.random.default_rng(9)
    image = rng.integers(0, 256, size, dtype=np.uint8)
    acc.write_mem(0, image)
    port = acc.port
    rq = L.encode_request

    def exchange(data, timeout, expect):
        port.reset_input_buffer()
        port.write(data)
        if timeout:
            port.idle(600)                                  # > timeout_bits * divisor = 240
        parser, replies = L.ReplyParser(), []
        while len(replies) < expect:
            got = port.read(parser.needed())
            assert got, "reply missing"
            replies += parser.feed(got)
        assert port.read(1, timeout_cycles=300) == b""      # and nothing more
        return replies

    words = size // 2
    a = words // 2                                          # a data word address
    prog = bytes(Instruction.move(a, a + 10, 4).encode() + Instruction.halt().encode())
    cases = [
        (bytes(b for b in rng.integers(0, 256, 30, dtype=np.uint8) if b != 0xA5), False, []),
        (rq(L.Opcode.MEM_WRITE, L.mem_write_payload(8, b"XYZ"))[:7], True, [L.Status.TRUNCATED]),
        (rq(L.Opcode.MEM_WRITE, L.mem_write_payload(8, b"XYZ"))[:-1] + b"\x00", False,
         [L.Status.BAD_CRC]),
        (rq(0x7E, b"??"), False, [L.Status.BAD_OPCODE]),
        (rq(L.Opcode.RUN, bytes(7)), False, [L.Status.BAD_LENGTH]),
        (rq(L.Opcode.RUN, _run(3, 1)), False, [L.Status.BAD_ADDRESS]),
        (rq(L.Opcode.RUN, _run(size - 14, 1)), False, [L.Status.BAD_ADDRESS]),
        (rq(L.Opcode.RUN, _run(0, 0)), False, [L.Status.BAD_LENGTH]),
    ]
    for data, timeout, statuses in cases:
        replies = exchange(data, timeout, len(statuses))
        assert [s for s, _ in replies] == statuses, data
        assert acc.ping(b"ok") == b"ok"
        assert np.array_equal(acc.read_mem(0, size), image)
    # Failing programs: the program's own bytes change, nothing else.
    for ins, status in [(Instruction(0x3F), L.Status.BAD_OPCODE),
                        (Instruction.move(size // 2 - 2, 0, 4), L.Status.BAD_ADDRESS),
                        (Instruction.matvec(a, a + 50, 0, 9, 1), L.Status.BAD_LENGTH),
                        (Instruction.matvec(a, a + 50, 120, 1, 2), L.Status.BAD_ADDRESS),
                        (Instruction.lut(a, words - 1, 2), L.Status.BAD_ADDRESS)]:
        raw = Instruction.nop().encode() + ins.encode()
        acc.write_mem(64, raw)
        image[64:64 + len(raw)] = np.frombuffer(raw, np.uint8)
        with pytest.raises(RunError) as e:
            acc.run(64, 10)
        assert e.value.status == status and e.value.result.pc == 80
        assert np.array_equal(acc.read_mem(0, size), image)
    # A good program after all that.
    acc.write_mem(0, prog)
    image[:len(prog)] = np.frombuffer(prog, np.uint8)
    assert acc.run(0, 10).executed == 2
    image[2 * a + 20:2 * a + 28] = image[2 * a:2 * a + 8]
    assert np.array_equal(acc.read_mem(0, size), image)


def _run(start, limit):
    return start.to_bytes(4, "little") + limit.to_bytes(4, "little")


# == The same API over the real top (simulated) ===================================================

@pytest.fixture(scope="module")
def sim_acc():
    """The real top, its valid MEM_WRITE and MEM_READ requests answered through the
    simulator's backdoor (tests/backdoor.py: the byte link takes a byte every 2-3 cycles, and
    the weights, inputs and results are what these tests move); every other request, and all
    of ``test_sim_network_matches_golden``'s, crosses the link."""
    acc = Accelerator.simulated(**SEQ)
    acc.port = FastMemoryPort(acc.port)
    assert acc.has_engine("sequencer"), "IDENTIFY's engine bit 5 (sequencer) is clear"
    yield acc
    acc.close()


def test_sim_run_matches_model(sim_acc):
    model = Accelerator.model(**SEQ)
    programs = [
        ([Instruction.nop(), Instruction.halt()], 10),
        ([Instruction.setofs(1, 2), Instruction.loop(3), Instruction.addofs(1, 1),
          Instruction.djnz(32), Instruction.halt()], 100),
        ([Instruction.nop(), Instruction.jump(0)], 7),
        ([Instruction.nop(), Instruction(0x3F)], 10),
        ([Instruction.move(600, 2046, 3)], 10),
        ([Instruction.config(0x01, 5)], 10),
    ]
    for prog, limit in programs:
        results = []
        for acc in (sim_acc, model):
            acc.load_program(prog, addr=64)
            try:
                r = acc.run(64, limit)
            except RunError as e:
                r = e.result
            results.append(r)
        (hw, ref) = results
        assert (hw.status, hw.pc, hw.executed) == (ref.status, ref.pc, ref.executed), prog
        assert hw.cycles > 0


def test_sim_single_operations_match_model(sim_acc):
    model = Accelerator.model(**SEQ)
    rng = np.random.default_rng(11)
    x = rng.normal(size=16) * 3
    for kw in (dict(width=6, rule="ceil"), dict(fmt="int8", shift=-2)):
        got, ref = sim_acc.quantise(x, **kw), model.quantise(x, **kw)
        if not isinstance(got, tuple):
            got, ref = (got,), (ref,)
        assert all(np.array_equal(a, b) for a, b in zip(got, ref, strict=True)), kw
    w_m, w_e = rng.integers(-127, 128, (10, 16)), rng.integers(-9, -5, (10, 2))
    b_m, b_e = rng.integers(-127, 128, 10), rng.integers(-7, -2, 10)
    x_m, x_e = rng.integers(-127, 128, 16), rng.integers(-3, 1, 2)
    args = (w_m, w_e, x_m, x_e)
    kw = dict(bias_m=b_m, bias_e=b_e, width=7)
    for a, b in zip(sim_acc.bfp_matvec(*args, **kw), model.bfp_matvec(*args, **kw), strict=True):
        assert np.array_equal(a, b)
    book = CodeBook.default(2)
    w_c, xd = rng.integers(0, 4, (5, 12)), rng.integers(-128, 128, 12)
    kw = dict(book=book, bias=rng.integers(-100, 100, 5), shift=2)
    for a, b in zip(sim_acc.discrete_matvec(w_c, xd, **kw), model.discrete_matvec(w_c, xd, **kw),
                    strict=True):
        assert np.array_equal(a, b)


def test_sim_network_matches_golden(sim_acc):
    """A two-layer network (BFP with a LUT, then discrete) loaded and run by the driver on the
    real top entirely through the link (no backdoor), equal to the golden reference."""
    rng = np.random.default_rng(12)
    layers = _layers(rng)
    sim_acc.port.enabled = False
    try:
        lay = sim_acc.load_network(layers)
        x = rng.normal(size=(3, 16)) * 2
        out, stats = sim_acc.run_network(x)
    finally:
        sim_acc.port.enabled = True
    ref = lay.reference(x)
    assert np.array_equal(out.m, ref[0]) and np.array_equal(out.e, ref[1])
    assert stats["runs"] == 1 and stats["cycles"] > 0


def test_sim_design_from_device_and_predicted_network(sim_acc):
    """The real top describes itself: the design read from its registers is the model's for
    the same parameters; a predicted-mode network (3 tiles, then 2; two samples in one RUN)
    equals the golden reference."""
    model = Accelerator.model(**SEQ)
    assert sim_acc.design == model.design
    assert sim_acc.device_params == model.device_params
    rng = np.random.default_rng(14)
    lay = sim_acc.load_network([_predicted_layer(rng, 24, 16, width=7),
                                _predicted_layer(rng, 12, 24, rounding="zero")],
                               quantise_input="host")
    x = rng.normal(size=(2, 16))
    out, stats = sim_acc.run_network(x)
    ref = lay.reference(x)
    assert np.array_equal(out.m, ref[0]) and np.array_equal(out.e, ref[1])
    assert stats["runs"] == 1
    # The first layer's predicted exponents are not all the max rule's (the prediction was
    # used on the device).
    from lowbit.sim.network import unpack_elements
    m, e = unpack_elements(lay.input_words(x))
    col, first = lay.design.column(), lay.layers[0]
    as_max = dataclasses.replace(first, exp_mode="max")
    assert any(not np.array_equal(bfp_dense(first, m[k], e[k][7::8], col)[1],
                                  bfp_dense(as_max, m[k], e[k][7::8], col)[1]) for k in range(2))


@pytest.mark.slow
def test_sim_robustness(sim_acc):
    acc = Accelerator.simulated(**{**SEQ, "scratch_bytes": 1024})
    _robustness(acc, 1024)
    acc.close()


_DIFF = dict(sequencer=True, scratch_bytes=2048, frame_bytes=256, matrix_lanes=4, block=4,
             max_blocks=4, weight_depth=64, timeout_bits=20)
_EDGE_REGS = ("MANT_WIDTH", "ROUNDING", "EXP_SELECT", "FIXED_EXP", "QUANT_FORMAT", "CODE_WIDTH",
              "CODE_BOOK0", "CODE_BOOK1", "LUT_SELECT", "LUT_EXP", "DISC_SHIFT", "QUANT_SHIFT",
              "QUANT_RULE", "PRNG_SEED3")


def _random_program(rng):
    """Twelve random instructions and HALT: any register value, ranges that may fall outside
    the scratchpad or the weight memory, sources below word 560 and destinations from 600 (an
    engine's destination never overlaps its own sources)."""
    from lowbit.sim.program import config
    prog = []
    for _ in range(12):
        k = int(rng.integers(0, 10))
        a, b = int(rng.integers(200, 560)), int(rng.integers(600, 1000))
        bias = int(rng.integers(200, 540)) if rng.integers(2) else None
        if k == 0:
            name = str(rng.choice(_EDGE_REGS))
            prog.append(config(name, int(rng.integers(0, 1 << L.REGISTER_BY_NAME[name].width))))
        elif k == 1:
            prog.append(Instruction.move(a, b, int(rng.integers(1, 40))))
        elif k == 2:
            prog.append(Instruction.loadw(a, int(rng.integers(0, 50)), int(rng.integers(1, 14))))
        elif k == 3:
            prog.append(Instruction.quant(a, b, 4 * int(rng.integers(1, 10))))
        elif k in (4, 5):
            prog.append(Instruction.matvec(a, b, int(rng.integers(0, 40)),
                                           int(rng.integers(1, 6)), int(rng.integers(1, 3)),
                                           bias=bias))
        elif k == 6:
            prog.append(Instruction.lut(a, b, int(rng.integers(1, 30))))
        elif k == 7:
            prog.append(Instruction.dmatvec(a, b, int(rng.integers(0, 40)),
                                            int(rng.integers(1, 13)), int(rng.integers(1, 6)),
                                            bias=bias))
        elif k == 8:
            prog.append(Instruction.grand(b, int(rng.integers(1, 9))))
        else:
            prog.append(Instruction.nop())
    return prog + [Instruction.halt()]


def _differential(hw, seed, trials):
    """Random programs on the real top and on the model: equal RUN outcomes (status, pc,
    executed, the matrix engine's busy cycles) and equal scratchpads after every program."""
    rng = np.random.default_rng(seed)
    model = Accelerator.model(**_DIFF)
    image = rng.integers(0, 256, _DIFF["scratch_bytes"], dtype=np.uint8)
    for acc in (hw, model):
        # The top is shared between calls: bring registers and weights to a common state.
        for reg in L.REGISTERS:
            if reg.access == "rw":
                acc.write_reg(reg.name, reg.reset)
        acc.load_weights(0, np.zeros((_DIFF["weight_depth"], _DIFF["matrix_lanes"]), int))
        acc.write_mem(0, image)
        for t in range(4):
            acc.lut_load(t, np.random.default_rng(t).integers(0, 256, 256))
        acc.grand_seed(seed)
        acc.rounding_seed(seed)
    for trial in range(trials):
        prog = _random_program(rng)
        outcome = []
        for acc in (hw, model):
            acc.load_program(prog)
            try:
                r = acc.run(0, 100)
            except RunError as e:
                r = e.result
            outcome.append((r.status, r.pc, r.executed, r.busy))
        assert outcome[0] == outcome[1], (trial, [str(i) for i in prog])
        assert np.array_equal(hw.read_mem(0, _DIFF["scratch_bytes"]),
                              model.read_mem(0, _DIFF["scratch_bytes"])), \
            (trial, [str(i) for i in prog])


@pytest.fixture(scope="module")
def diff_acc():
    """The real top for the random programs; the 2 KB scratchpad image and its reads after
    every program take the simulator's backdoor (tests/backdoor.py), the programs, registers,
    tables, weights' LOADW and RUN the link. Whole scratchpads after random programs through
    MEM_READ: ``test_sequencer.py::test_random_programs_vs_device_model`` (slow)."""
    acc = Accelerator.simulated(**_DIFF)
    acc.port = FastMemoryPort(acc.port)
    assert acc.has_engine("sequencer"), "IDENTIFY's engine bit 5 (sequencer) is clear"
    yield acc
    acc.close()


def test_sim_random_programs_match_model(diff_acc):
    """One random program; ``test_sim_random_programs_match_model_long`` (slow) runs 15 per
    seed."""
    _differential(diff_acc, 1, 1)
    assert diff_acc.port.fast > 0


@pytest.mark.slow
@pytest.mark.rotate  # one heavy case a day runs in CI's slow run (tests/conftest.py)
@pytest.mark.parametrize("seed", [2, *(pytest.param(s, marks=pytest.mark.heavy) for s in (3, 4))])
def test_sim_random_programs_match_model_long(diff_acc, seed):
    _differential(diff_acc, seed, 15)


def test_driver_learns_the_fixed_mant_width():
    """A device without the runtime mantissa width says so in ID_ENGINE; the driver's design
    has it, and a profile that expects the width differs."""
    acc = Accelerator(ModelPort(L.DeviceModel(sequencer=True, bfp_mant_width=False)))
    assert acc.design.bfp_mant_width is False
    assert Accelerator(ModelPort(L.DeviceModel(sequencer=True))).design.bfp_mant_width is True
    with pytest.raises(IdentityError, match="bfp_mant_width: device False, expected True"):
        Accelerator(ModelPort(L.DeviceModel(sequencer=True, bfp_mant_width=False)),
                    params={"sequencer": True})
