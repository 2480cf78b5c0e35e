"""The host driver against the simulated top, and against a model port for failure cases."""

import dataclasses

import numpy as np
import pytest

from boards.driver import (
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
from sim import link as L

PARAMS = dict(scratch_bytes=512, frame_bytes=64, timeout_bits=20)


@pytest.fixture(scope="module")
def acc():
    with Accelerator.simulated(**PARAMS) as a:
        yield a


class ModelPort:
    """A serial-port stand-in answering from :class:`sim.link.DeviceModel`, with faults."""

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
    with pytest.raises(KeyError, match="Unknown register 'NOPE'"):
        acc.read_reg("NOPE")
    with pytest.raises(TypeError, match="Register must be a name or an index"):
        acc.read_reg(True)
    with pytest.raises(ValueError, match="fit 32 bits"):
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


def test_reply_faults():
    with pytest.raises(NoReply, match="No reply to opcode 0x02"):
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
    """The same driver through the real UART of the simulated top (1 Mbaud, 12 MHz)."""
    acc = Accelerator.simulated(level="uart", baud_error=0.02, **PARAMS)
    assert acc.identity.scratch_bytes == 512
    acc.write_mem(100, np.array([1, -2, 3], dtype=np.int8))
    assert acc.read_mem(100, 3, dtype=np.int8).tolist() == [1, -2, 3]
    assert acc.read_reg("UART_ERRORS") == 0
    acc.close()
