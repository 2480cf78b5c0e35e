"""Engine commands of the top (LUT_WRITE / LUT_APPLY) against the protocol model, byte for byte,
and against the transfer-table golden model."""

import numpy as np
import pytest

from lowbit.hw.engines import LUTHandler
from lowbit.sim import link as L
from lowbit.sim.lut import Quant, transfer_table
from lowbit.sim.rtl.transport import SimulatedSerial

PARAMS = dict(scratch_bytes=256, frame_bytes=300, timeout_bits=20)


def make(**kw):
    params = {**PARAMS, **kw}
    port = SimulatedSerial(level="byte", **params)
    model = L.DeviceModel(scratch_bytes=params["scratch_bytes"],
                          frame_bytes=params["frame_bytes"], lanes=params.get("lanes", 2),
                          lut_tables=params.get("lut_tables", 4))
    return port, model


def exchange(port, model, opcode, payload=b""):
    data = L.encode_request(opcode, payload)
    expected = model.feed(data)
    port.write(data)
    got = port.read(len(expected), timeout_cycles=8000 + 4 * (len(data) + len(expected)))
    assert got == expected
    return L.decode_reply(got)


# One lane with -m slow; test_cxxrtl.py's session loads and applies a table on a one-lane top.
@pytest.mark.parametrize("lanes", [pytest.param(1, marks=pytest.mark.slow), 3])
def test_lut_load_and_apply_every_code(lanes):
    port, model = make(lanes=lanes, lut_tables=2)
    qi = Quant(scale=0.05, zero_point=-3)
    qo = Quant(scale=1 / 256, zero_point=-128)
    table = transfer_table("sigmoid", qi, qo)
    raw = table.astype(np.uint8).tobytes()
    assert exchange(port, model, L.Opcode.LUT_WRITE, bytes([1, 0]) + raw[:200])[0] == L.Status.OK
    assert exchange(port, model, L.Opcode.LUT_WRITE, bytes([1, 200]) + raw[200:])[0] == L.Status.OK
    codes = bytes(range(256))
    status, out = exchange(port, model, L.Opcode.LUT_APPLY, bytes([1]) + codes)
    assert status == L.Status.OK
    assert out == raw
    # Table 0 was never written: its entries are the power-on zeros.
    status, out = exchange(port, model, L.Opcode.LUT_APPLY, bytes([0, 5, 7, 9]))
    assert (status, out) == (L.Status.OK, b"\0\0\0")


def test_lut_errors_change_nothing():
    port, model = make(lut_tables=2)
    exchange(port, model, L.Opcode.LUT_WRITE, bytes([0, 10, 1, 2, 3]))
    cases = [
        (L.Opcode.LUT_WRITE, b"", L.Status.BAD_LENGTH),
        (L.Opcode.LUT_WRITE, b"\x00", L.Status.BAD_LENGTH),
        (L.Opcode.LUT_WRITE, bytes([2, 0, 9]), L.Status.BAD_ADDRESS),
        (L.Opcode.LUT_WRITE, bytes([0, 255, 9, 9]), L.Status.BAD_LENGTH),
        (L.Opcode.LUT_APPLY, b"", L.Status.BAD_LENGTH),
        (L.Opcode.LUT_APPLY, bytes([7, 1]), L.Status.BAD_ADDRESS),
    ]
    for opcode, payload, status in cases:
        assert exchange(port, model, opcode, payload) == (status, b"")
    status, out = exchange(port, model, L.Opcode.LUT_APPLY, bytes([0, 9, 10, 11, 12, 13, 255]))
    assert out == bytes([0, 1, 2, 3, 0, 0])
    # An odd number of codes leaves a partial last beat; the link still works after it.
    assert exchange(port, model, L.Opcode.PING, b"ok") == (L.Status.OK, b"ok")


def test_identity_reports_the_lut_engine():
    port, model = make()
    status, body = exchange(port, model, L.Opcode.IDENTIFY)
    assert "lut" in L.Identity.from_bytes(body).engine_names
    port, model = make(lut_tables=0)
    assert exchange(port, model, L.Opcode.LUT_APPLY, b"\0\1") == (L.Status.BAD_OPCODE, b"")


@pytest.mark.parametrize("kw, exc, msg", [
    (dict(lanes=0), ValueError, "Lane count must be an integer between 1 and 32, not 0"),
    (dict(tables=65), ValueError, "LUT table count must be an integer between 1 and 64, not 65"),
    (dict(tables=2.0), TypeError, "LUT table count must be an integer"),
])
def test_handler_parameters(kw, exc, msg):
    with pytest.raises(exc, match=msg):
        LUTHandler(**kw)


def test_driver_lut_round_trip():
    from lowbit.boards.driver import Accelerator, BadAddress
    qi = Quant(scale=0.1, zero_point=0)
    qo = Quant(scale=0.05, zero_point=-128)
    table = transfer_table("relu6", qi, qo)
    with Accelerator.simulated(scratch_bytes=256, frame_bytes=64, lanes=2) as acc:
        acc.lut_load(3, table)
        codes = np.arange(-128, 128, dtype=np.int8)
        out = acc.lut_apply(3, codes)
        assert np.array_equal(out.view(np.int8), table[codes.view(np.uint8)])
        with pytest.raises(BadAddress):
            acc.lut_apply(4, codes[:3])
        with pytest.raises(ValueError, match="256 entries"):
            acc.lut_load(0, table[:10])


# -- the grand unit behind GRAND_SEED / GRAND_SAMPLES ------------------------------------------

def _seed_payload(seed, lanes):
    from lowbit.sim.prng import seed_lanes
    return seed_lanes(seed, lanes).astype("<u8").tobytes()


@pytest.mark.parametrize("lanes, mode, top", [
    (3, 2, {}), (3, 4, {"seq_pipelined": True}),
    *(pytest.param(*c, {}, marks=pytest.mark.slow) for c in ((2, 0), (1, 5)))],
    ids=["3-trunc2", "3-uniform-pipelined", "2-normal", "1-raw"])
def test_grand_samples_match_the_model(lanes, mode, top):
    """``top``: ``seq_pipelined`` builds the handler with ``pipelined`` (its registered seed
    shift and the unit's split stall)."""
    from lowbit.sim.grand import MODES, GrandModel
    port, model = make(lanes=lanes, **top)
    reg = L.REGISTER_BY_NAME["GRAND_MODE"].index
    exchange(port, model, L.Opcode.REG_WRITE, L.reg_write_payload(reg, mode))
    assert exchange(port, model, L.Opcode.GRAND_SEED, _seed_payload(1234, lanes)) == \
        (L.Status.OK, b"")
    # Odd counts leave part of a result buffered: the sequence must continue unbroken.
    got16 = b""
    for count in (5, 1, 6):
        status, body = exchange(port, model, L.Opcode.GRAND_SAMPLES, bytes([count, 0, 0]))
        assert status == L.Status.OK
        got16 += body
    status, got32 = exchange(port, model, L.Opcode.GRAND_SAMPLES, bytes([4, 0, 1]))
    ref = GrandModel(0, lanes)
    from lowbit.sim.prng import seed_lanes
    ref.prng.state = seed_lanes(1234, lanes)
    f16, f32 = ref.generate(MODES[mode], (16 + lanes - 1) // lanes + 4)
    seq16 = f16.reshape(-1)
    seq32 = f32.reshape(-1)
    assert np.frombuffer(got16, "<u2").tolist() == seq16[:12].tolist()
    assert np.frombuffer(got32, "<u4").tolist() == seq32[12:16].tolist()


@pytest.mark.parametrize("kwargs, exc, msg", [
    ({"lanes": 0}, ValueError, "Lane count must be an integer between 1 and 32, not 0"),
    ({"frame_bytes": 8}, ValueError, "Frame buffer size must be an integer between 16"),
    ({"pipelined": 1}, TypeError, "Pipelined must be a bool, not 1"),
])
def test_grand_handler_validation(kwargs, exc, msg):
    from lowbit.hw.engines import GrandHandler
    with pytest.raises(exc, match=msg):
        GrandHandler(**kwargs)


def test_grand_after_reset_and_errors():
    port, model = make()
    # Without a seed the unit runs from its reset state, in normal mode.
    status, body = exchange(port, model, L.Opcode.GRAND_SAMPLES, bytes([3, 0, 0]))
    assert status == L.Status.OK and len(body) == 6
    values = np.frombuffer(body, "<u2").view(np.float16).astype(float)
    assert np.all(np.abs(values) <= 5.8125) and np.all(values * 32 == np.round(values * 32))
    for opcode, payload, status in [
        (L.Opcode.GRAND_SEED, bytes(31), L.Status.BAD_LENGTH),
        (L.Opcode.GRAND_SAMPLES, bytes([1, 0]), L.Status.BAD_LENGTH),
        (L.Opcode.GRAND_SAMPLES, bytes([1, 0, 2]), L.Status.BAD_ADDRESS),
        (L.Opcode.GRAND_SAMPLES, bytes([200, 0, 1]), L.Status.BAD_LENGTH),
    ]:
        assert exchange(port, model, opcode, payload) == (status, b"")
    # The errors consumed nothing: the sequence continues.
    status, body = exchange(port, model, L.Opcode.GRAND_SAMPLES, bytes([4, 0, 0]))
    assert status == L.Status.OK


def test_driver_grand_samples():
    from lowbit.sim.grand import GrandModel
    from lowbit.sim.prng import seed_lanes
    with simulated_accelerator() as acc:
        acc.grand_seed(99, mode="trunc3")
        x = acc.grand_samples(40, np.float32)
        ref = GrandModel(0, 2)
        ref.prng.state = seed_lanes(99, 2)
        _, f32 = ref.generate("trunc3", 20)
        assert x.view(np.uint32).tolist() == f32.reshape(-1).tolist()
        assert np.all(np.abs(x) <= 3)
        with pytest.raises(ValueError, match="Grand mode must be one of"):
            acc.grand_seed(1, mode="cauchy")


def simulated_accelerator():
    from lowbit.boards.driver import Accelerator
    return Accelerator.simulated(scratch_bytes=256, frame_bytes=64, lanes=2)
