# amaranth: UnusedElaboratable=no
"""Wide LUT slots over the link (issue #24 item 3): LUT_WRITE_WIDE / LUT_APPLY_WIDE in the
protocol model, the driver against it, and the simulated top (which has no wide slots yet)."""

import numpy as np
import pytest

from lowbit.boards.driver import Accelerator, BadAddress, MissingEngine
from lowbit.sim import link as L
from lowbit.sim.lut import (
    WIDE_DEPTH,
    Quant,
    gen_lut_int16,
    lookup,
    lookup_int16,
    lookup_wide,
    transfer_table,
    wide_image,
)

W16 = Quant(2 ** -12, 0, "int16")
TABLES = [gen_lut_int16("tanh", W16, Quant(2 ** -15, 0, "int16")),          # format 0
          gen_lut_int16("sigmoid", W16, Quant(1 / 256, 0)),                 # format 1
          transfer_table("gelu", Quant(0.05, 3), Quant(1e-3, -40, "int16"))]   # format 2


def rq(opcode, payload):
    return L.encode_request(opcode, payload)


def status_of(model, frame):
    return L.decode_reply(model.feed(frame))


@pytest.mark.parametrize("frame_bytes", [64, 512])
def test_driver_loads_and_applies_every_format(frame_bytes):
    acc = Accelerator.model(frame_bytes=frame_bytes, lut_wide_tables=3)
    assert "lut_wide" in acc.identity.engine_names
    fmts = [acc.lut_load_wide(slot, table) for slot, table in enumerate(TABLES)]
    assert fmts == [0, 1, 2]
    model = acc.port.model
    for slot, table in enumerate(TABLES):
        assert np.array_equal(model.wide_luts[slot], wide_image(table)[0])
    xs = np.r_[-32768, 32767, np.arange(-32768, 32768, 37)]
    got0 = acc.lut_apply_wide(0, xs, 0)
    assert got0.dtype == np.int16 and np.array_equal(got0, lookup_int16(TABLES[0], xs))
    got1 = acc.lut_apply_wide(1, xs, "int16>int8")
    assert got1.dtype == np.int8 and np.array_equal(got1, lookup_int16(TABLES[1], xs))
    codes = np.r_[np.arange(-128, 128), np.arange(256)]
    got2 = acc.lut_apply_wide(2, codes, 2)
    assert got2.dtype == np.int16 and np.array_equal(got2, lookup(TABLES[2], codes))
    assert acc.lut_apply_wide(2, np.zeros(0, int), 2).shape == (0,)


def test_wide_commands_check_everything_before_changing_anything():
    model = L.DeviceModel(frame_bytes=64, lut_wide_tables=2)
    op, S = L.Opcode, L.Status
    words = np.arange(1, 31, dtype="<u2")
    last = bytes([1]) + (WIDE_DEPTH - 30).to_bytes(2, "little") + words.tobytes()
    assert status_of(model, rq(op.LUT_WRITE_WIDE, last)) == (S.OK, b"")
    before = [w.copy() for w in model.wide_luts]
    bad = [
        (rq(op.LUT_WRITE_WIDE, b"\x00\x00"), S.BAD_LENGTH),                    # no start
        (rq(op.LUT_WRITE_WIDE, b"\x02\x00\x00\x01\x00"), S.BAD_ADDRESS),       # slot 2 of 2
        (rq(op.LUT_WRITE_WIDE, b"\x00\x00\x00\x01"), S.BAD_LENGTH),            # half a word
        (rq(op.LUT_WRITE_WIDE, bytes([0]) + (WIDE_DEPTH - 29).to_bytes(2, "little")
            + words.tobytes()), S.BAD_LENGTH),                                # past entry 512
        (rq(op.LUT_APPLY_WIDE, b"\x00"), S.BAD_LENGTH),                        # no format
        (rq(op.LUT_APPLY_WIDE, b"\x02\x00\x00\x00"), S.BAD_ADDRESS),           # slot 2 of 2
        (rq(op.LUT_APPLY_WIDE, b"\x00\x03\x00\x00"), S.BAD_ADDRESS),           # format 3
        (rq(op.LUT_APPLY_WIDE, b"\x00\x00\x00"), S.BAD_LENGTH),                # half a code
        (rq(op.LUT_APPLY_WIDE, bytes([0, 2]) + bytes(33)), S.BAD_LENGTH),     # reply 66 > 64
    ]
    for frame, status in bad:
        assert status_of(model, frame) == (status, b""), frame
    assert all(np.array_equal(a, b) for a, b in zip(before, model.wide_luts, strict=True))
    # The largest valid replies: 32 codes in format 2 (64 bytes), 31 in format 0.
    assert status_of(model, rq(op.LUT_APPLY_WIDE, bytes([1, 2]) + bytes(32)))[0] == S.OK
    got = status_of(model, rq(op.LUT_APPLY_WIDE, bytes([1, 0]) + bytes(2 * 31)))
    assert got[0] == S.OK and len(got[1]) == 62
    # The words just written are what format 0 reads at the top of the input range.
    x = np.array([32767 - 127 * 128 - 127 + 128 * k for k in range(1)])
    status, body = status_of(model, rq(op.LUT_APPLY_WIDE, bytes([1, 0]) + x.astype("<i2")
                                       .tobytes()))
    assert np.frombuffer(body, "<i2").tolist() == lookup_wide(model.wide_luts[1], x, 0).tolist()


def test_devices_without_wide_slots_answer_bad_opcode():
    """Backward compatible: the new opcodes are unclaimed engine opcodes on every existing
    design (the model with 0 wide slots, which is every gateware top)."""
    model = L.DeviceModel()
    assert "lut_wide" not in model.identity.engine_names
    for opcode in (L.Opcode.LUT_WRITE_WIDE, L.Opcode.LUT_APPLY_WIDE):
        assert opcode in L.ENGINE_OPCODES
        assert status_of(model, rq(opcode, b"\x00\x00\x00\x00"))[0] == L.Status.BAD_OPCODE


@pytest.mark.parametrize("call,exc,msg", [
    (lambda a: a.lut_load_wide(-1, TABLES[0]), ValueError, "Wide LUT table must be an integer "
     "between 0 and 255, not -1"),
    (lambda a: a.lut_load_wide(True, TABLES[0]), TypeError, "not True"),
    (lambda a: a.lut_load_wide(0, TABLES[0].tolist()), TypeError, "not list"),
    (lambda a: a.lut_load_wide(0, TABLES[0][:512]), ValueError, "not 512 int16"),
    (lambda a: a.lut_load_wide(0, np.zeros(256, np.uint8)), ValueError, "not 256 uint8"),
    (lambda a: a.lut_apply_wide(0, [0], 3), ValueError, "between 0 and 2, not 3"),
    (lambda a: a.lut_apply_wide(0, [0], "int8>int16"), ValueError,
     "one of int16>int16, int16>int8, 8>int16 or 0..2, not 'int8>int16'"),
    (lambda a: a.lut_apply_wide(0, [0], 1.0), TypeError, "Wide LUT format must be an integer"),
    (lambda a: a.lut_apply_wide(0, [0.5], 0), TypeError, "Wide LUT codes must be integers"),
    (lambda a: a.lut_apply_wide(0, [[1]], 0), ValueError, "1-d array"),
    (lambda a: a.lut_apply_wide(0, [32768], 0), ValueError, "-32768..32767, not 32768..32768"),
    (lambda a: a.lut_apply_wide(0, [-129], 2), ValueError, "-128..255, not -129..-129"),
])
def test_driver_validation_sends_nothing(call, exc, msg):
    acc = Accelerator.model(lut_wide_tables=1)
    acc.identify()
    before = acc.port.model.wide_luts[0].copy()
    errors = acc.port.model.errors
    with pytest.raises(exc, match=msg):
        call(acc)
    assert acc.port.model.errors == errors
    assert np.array_equal(acc.port.model.wide_luts[0], before)


def test_bad_slot_is_refused_by_the_device_and_nothing_is_written():
    acc = Accelerator.model(frame_bytes=64, lut_wide_tables=2)
    with pytest.raises(BadAddress, match="LUT_WRITE_WIDE failed with status BAD_ADDRESS"):
        acc.lut_load_wide(2, TABLES[0])
    with pytest.raises(BadAddress, match="LUT_APPLY_WIDE"):
        acc.lut_apply_wide(5, [1, 2], 0)
    assert not any(w.any() for w in acc.port.model.wide_luts)
    assert acc.port.model.errors == 2          # one frame each: the first frame is the check


def test_simulated_top_has_no_wide_slots_and_the_driver_says_so():
    """The gateware top (LUTHandler with byte tables only) answers the new opcodes BAD_OPCODE
    like the model without wide slots, and the driver refuses before sending."""
    acc = Accelerator.simulated(scratch_bytes=256, frame_bytes=64, timeout_bits=20)
    model = L.DeviceModel(scratch_bytes=256, frame_bytes=64)
    assert "lut_wide" not in acc.identity.engine_names
    with pytest.raises(MissingEngine, match="no lut_wide engine"):
        acc.lut_load_wide(0, TABLES[0])
    with pytest.raises(MissingEngine, match="no lut_wide engine"):
        acc.lut_apply_wide(0, [1], 0)
    for frame in (rq(L.Opcode.LUT_WRITE_WIDE, b"\x00\x00\x00\x01\x00"),
                  rq(L.Opcode.LUT_APPLY_WIDE, b"\x00\x00\x01\x00")):
        assert acc.send(frame[1], frame[4:-2]) == L.decode_reply(model.feed(frame))
    # The byte tables still work next to them.
    table = transfer_table("tanh", Quant(0.05, 3), Quant(1 / 128, 0))
    acc.lut_load(0, table)
    assert np.array_equal(acc.lut_apply(0, np.arange(256)), table.view(np.uint8))
    acc.close()
