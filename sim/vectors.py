"""Golden vectors shared by the Amaranth tests and the cocotb tests of the generated Verilog.

Every generator here is seeded, pure Python / NumPy (never Amaranth), and returns plain data
(ints, lists, dicts, ``bytes``) that serialises to JSON, so the same vectors drive Amaranth's
simulator and an independent Verilog simulator. The expected outputs come from the blocks'
golden models (:mod:`sim.lut`, :mod:`sim.link`, :mod:`sim.prng`), never from the gateware.

Stream payloads are given in the structured form of the block's ``lib.data`` layout (dicts for
struct layouts, lists for array layouts); packing them into bit vectors is the test side's job.
"""

import numpy as np

from sim.link import (
    REGISTERS,
    DeviceModel,
    Opcode,
    encode_request,
    mem_read_payload,
    mem_write_payload,
    reg_read_payload,
    reg_write_payload,
)

__all__ = ["uart_vectors", "lut_vectors", "link_vectors", "top_vectors", "prng_vectors",
           "grand_vectors", "GRAND_MODES"]

#: Bytes that exercise the UART's bit order and the link's framing bytes.
EDGE_BYTES = [0x00, 0xFF, 0x55, 0xAA, 0x01, 0x80, 0xA5, 0x5A, 0x7F, 0xFE]


def uart_vectors(*, n=64, seed=0):
    """Bytes for a UART loop test: the edge bytes, then ``n`` random bytes.

    Returns
    -------
    dict
        ``{"bytes": [int, ...]}``; the expected output is the input itself (8N1 is lossless).
    """
    rng = np.random.default_rng(seed)
    return {"bytes": EDGE_BYTES + rng.integers(0, 256, n).tolist()}


#: Byte tables of the LUT vectors: (operator chain, q_in, q_out) as :meth:`TableBank.add` takes.
def _lut_specs():
    from sim.lut import Quant
    return {
        "byte": [("tanh", Quant(0.05, 3), Quant(1 / 128, -2)),
                 ("sigmoid", Quant(0.03, 128, "uint8"), Quant(1 / 256, 0, "uint8")),
                 (("leaky_relu", 0.1), Quant(0.1, 0, narrow_range=True), Quant(0.08, 0)),
                 ("gelu", Quant(0.05, 3), Quant(0.03, -40))],
        "wide": [("tanh", Quant(2 ** -12, 0, "int16"), Quant(2 ** -15, 0, "int16")),
                 ("sigmoid", Quant(2 ** -11, 0, "int16"), Quant(2 ** -15, 0, "int16"))],
    }


def lut_vectors(*, lanes=2, tables=2, wide_tables=1, n_wide=256, seed=0):
    """Table loads, lookups and expected results of :class:`hw.lut.TransferLUT`.

    Byte lookups cover all 256 codes of every resident table (an exhaustive sweep); wide
    lookups are the int16 edge codes (both ends, every interpolation segment boundary near 0
    and near 32767) and ``n_wide`` random codes, spread over the resident wide tables.

    Returns
    -------
    dict
        ``writes`` (``i_write`` payloads), ``i`` / ``o`` (byte lookup beats and expected
        beats), ``i_wide`` / ``o_wide`` (empty when ``wide_tables == 0``).
    """
    from sim.lut import TableBank, lookup, lookup_int16

    specs = _lut_specs()
    if tables > len(specs["byte"]) or wide_tables > len(specs["wide"]):
        raise ValueError(f"At most {len(specs['byte'])} byte and {len(specs['wide'])} wide "
                         f"tables have vectors")
    bank = TableBank()
    slots = [bank.add(*spec) for spec in specs["byte"][:tables]]
    wslots = [bank.add_wide(*spec) for spec in specs["wide"][:wide_tables]]
    rng = np.random.default_rng(seed)

    beats_i, beats_o = [], []
    for slot in slots:
        image = bank.tables[slot].view(np.uint8)
        codes = rng.permutation(256).tolist()
        codes += [0] * (-len(codes) % lanes)
        out = lookup(image, codes).tolist()
        for j in range(0, len(codes), lanes):
            beats_i.append({"table": slot, "code": codes[j:j + lanes]})
            beats_o.append(out[j:j + lanes])

    wide_i, wide_o = [], []
    if wslots:
        edges = [-32768, 32767, -1, 0, 1, 127, 128, -128, -129, 32639, 32640, 32641, -32641]
        xs = edges + rng.integers(-32768, 32768, n_wide).tolist()
        xs += [0] * (-len(xs) % lanes)
        for k, j in enumerate(range(0, len(xs), lanes)):
            slot = wslots[k % len(wslots)]
            beat = xs[j:j + lanes]
            wide_i.append({"table": slot, "code": beat})
            wide_o.append(lookup_int16(bank.wide_tables[slot], beat).tolist())
    return {"writes": bank.write_payloads(), "i": beats_i, "o": beats_o,
            "i_wide": wide_i, "o_wide": wide_o}


def _corrupt(frame, rng):
    frame = bytearray(frame)
    pos = int(rng.integers(1, len(frame)))
    frame[pos] ^= 1 << int(rng.integers(0, 8))
    return bytes(frame)


def _send(model, events, data):
    """Append send events for ``data``, split after every byte that produces a reply.

    A stop-and-wait host waits for each reply before sending on; a corrupted length field can
    end a frame early, and the bytes after that reply are a new event.
    """
    chunk = []
    for byte in bytes(data):
        chunk.append(byte)
        reply = model.feed(bytes([byte]))
        if reply:
            events.append({"send": chunk, "reply": list(reply)})
            chunk = []
    if chunk:
        events.append({"send": chunk, "reply": []})


def link_vectors(*, frame_bytes=16, n=24, seed=0):
    """Request events and expected reply bytes of :class:`hw.link.HostLink` with a PING handler.

    The test bench behind the link's ``command`` interface answers every command ``OK`` and
    echoes its payload (what :class:`hw.link.PingHandler` does), so good frames are PINGs;
    around them come garbage bytes, corrupted CRCs, oversized lengths (drained) and frames cut
    short (inter-byte timeout). Expected replies are :class:`sim.link.DeviceModel`'s.

    Returns
    -------
    dict
        ``events`` in order: ``{"send": [bytes...], "reply": [bytes...]}`` (send, then expect
        exactly that reply, possibly empty), or ``{"timeout": True, "reply": [...]}`` (stay
        silent past the timeout); and the model's final ``skipped`` and ``errors`` counters.
    """
    rng = np.random.default_rng(seed)
    model = DeviceModel(frame_bytes=frame_bytes)
    events = []

    def send(data):
        _send(model, events, data)

    def timeout():
        events.append({"timeout": True, "reply": list(model.timeout())})

    send(encode_request(Opcode.PING, b""))
    send(encode_request(Opcode.PING, bytes(range(frame_bytes))))
    for _ in range(n):
        kind = int(rng.integers(0, 6))
        payload = rng.integers(0, 256, int(rng.integers(0, frame_bytes + 1)), dtype=np.uint8)
        frame = encode_request(Opcode.PING, payload.tobytes())
        if kind == 0:
            send(frame)
        elif kind == 1:                               # bad CRC (a header flip may also drain)
            bad = _corrupt(frame, rng)
            send(bad)
            if model.in_frame:
                timeout()
        elif kind == 2:                               # garbage between frames
            garbage = bytes(b for b in rng.integers(0, 256, 5, dtype=np.uint8) if b != 0xA5)
            send(garbage + frame)
        elif kind == 3:                               # oversized length, drained
            n_len = frame_bytes + 1 + int(rng.integers(0, 4))
            head = bytes([0xA5, Opcode.PING]) + n_len.to_bytes(2, "little")
            send(head + bytes(n_len + 2))
        elif kind == 4:                               # truncated by the inter-byte timeout
            send(frame[:int(rng.integers(1, len(frame)))])
            timeout()
        else:                                         # oversized, cut short while draining
            head = bytes([0xA5, Opcode.PING]) + (frame_bytes + 3).to_bytes(2, "little")
            send(head + bytes(3))
            timeout()
    return {"events": events, "skipped": model.skipped, "errors": model.errors}


def top_vectors(*, lanes=2, scratch_bytes=256, frame_bytes=64, use_spram=False, n=12, seed=0):
    """Request events and expected replies of :class:`hw.top.Accelerator` (the host link).

    Starts with PING, IDENTIFY, a read of every register and a write/read-back of the
    scratchpad, then ``n`` random commands: register writes and reads (read-only and unknown
    ones included), memory writes and reads (past the end too), unknown opcodes, corrupted
    frames, garbage bytes and truncated frames. Expected replies are
    :class:`sim.link.DeviceModel`'s; the events have the form of :func:`link_vectors`.
    """
    rng = np.random.default_rng(seed)
    model = DeviceModel(lanes=lanes, scratch_bytes=scratch_bytes, frame_bytes=frame_bytes,
                        use_spram=use_spram)
    events = []

    def send(data):
        _send(model, events, data)

    def timeout():
        events.append({"timeout": True, "reply": list(model.timeout())})

    def rand_bytes(k):
        return rng.integers(0, 256, k, dtype=np.uint8).tobytes()

    send(encode_request(Opcode.PING, b"lowbit"))
    send(encode_request(Opcode.IDENTIFY))
    rw = [r for r in REGISTERS if r.access == "rw"]
    for r in REGISTERS:
        send(encode_request(Opcode.REG_READ, reg_read_payload(r.index)))
    data = rand_bytes(min(frame_bytes - 4, scratch_bytes // 2))
    send(encode_request(Opcode.MEM_WRITE, mem_write_payload(3, data)))
    send(encode_request(Opcode.MEM_READ, mem_read_payload(1, len(data) + 4)))
    send(encode_request(Opcode.REG_READ, reg_read_payload(0x1F)))          # unknown register
    send(encode_request(Opcode.MEM_WRITE, mem_write_payload(scratch_bytes, b"\x01")))
    for _ in range(n):
        kind = int(rng.integers(0, 9))
        if kind == 0:
            r = rw[int(rng.integers(0, len(rw)))]
            value = int(rng.integers(0, 1 << 32, dtype=np.uint64))
            send(encode_request(Opcode.REG_WRITE, reg_write_payload(r.index, value)))
            send(encode_request(Opcode.REG_READ, reg_read_payload(r.index)))
        elif kind == 1:                               # read-only or unknown register
            index = int(rng.choice([0x00, 0x03, 0x05, 0x08, 0x1F, 0xFFFF]))
            send(encode_request(Opcode.REG_WRITE, reg_write_payload(index, 1)))
        elif kind == 2:
            k = int(rng.integers(0, frame_bytes - 3))
            addr = int(rng.integers(0, scratch_bytes - k + 1)) if k <= scratch_bytes else 0
            send(encode_request(Opcode.MEM_WRITE, mem_write_payload(addr, rand_bytes(k))))
        elif kind == 3:
            count = int(rng.integers(0, frame_bytes + 1))
            addr = int(rng.integers(0, scratch_bytes + 2))
            send(encode_request(Opcode.MEM_READ, mem_read_payload(addr, count)))
        elif kind == 4:                               # unknown opcode, wrong lengths
            send(encode_request(int(rng.choice([0x00, 0x03, 0x40, 0x7F, 0xFF])), rand_bytes(2)))
            send(encode_request(Opcode.IDENTIFY, b"x"))
            send(encode_request(Opcode.MEM_READ, rand_bytes(5)))
        elif kind == 5:                               # corrupted frame: nothing may change
            frame = encode_request(Opcode.MEM_WRITE, mem_write_payload(0, rand_bytes(8)))
            send(_corrupt(frame, rng))
            if model.in_frame:
                timeout()
        elif kind == 6:                               # garbage, then a good frame
            garbage = bytes(b for b in rand_bytes(4) if b != 0xA5)
            send(garbage + encode_request(Opcode.PING, rand_bytes(3)))
        elif kind == 7:                               # truncated frame
            frame = encode_request(Opcode.PING, rand_bytes(6))
            send(frame[:int(rng.integers(1, len(frame)))])
            timeout()
        else:                                         # oversized length, drained
            head = bytes([0xA5, Opcode.PING]) + (frame_bytes + 1).to_bytes(2, "little")
            send(head + bytes(frame_bytes + 3))
    for reg in ("LINK_SKIPPED", "LINK_ERRORS"):
        index = next(r.index for r in REGISTERS if r.name == reg)
        send(encode_request(Opcode.REG_READ, reg_read_payload(index)))
    send(encode_request(Opcode.MEM_READ, mem_read_payload(0, min(frame_bytes, scratch_bytes))))
    return {"events": events, "skipped": model.skipped, "errors": model.errors,
            "scratch": list(model.scratch)}


def prng_vectors(*, lanes=1, reset_seed=0, load_seed=1, n=48, seed=0):
    """Expected words of :class:`hw.prng.Xoroshiro128aox` before and after a run-time seed load.

    Returns
    -------
    dict
        ``o_reset``: the first ``n`` output beats after reset (``reset_seed``); ``seed``: the
        per-lane ``{"s0", "s1"}`` state to put on the ``seed`` port for ``load_seed``;
        ``o_load``: the first ``n`` beats after that load. A beat is a list of one 64-bit word
        per lane, from :class:`sim.prng.Xoroshiro128aox`.
    """
    from sim.prng import Xoroshiro128aox, seed_lanes
    state = seed_lanes(load_seed, lanes)
    return {
        "o_reset": Xoroshiro128aox(reset_seed, lanes).take(n).tolist(),
        "seed": [{"s0": int(s0), "s1": int(s1)} for s0, s1 in state],
        "o_load": Xoroshiro128aox(load_seed, lanes).take(n).tolist(),
    }


#: Run-time mode codes of :class:`hw.grand.GrandUnit` (``GrandMode``), by the model's names.
GRAND_MODES = {"normal": 0, "normal144": 1, "trunc2": 2, "trunc3": 3, "uniform": 4, "raw": 5}


def grand_vectors(*, lanes=2, reset_seed=0, mode="normal", n=32):
    """Expected results of :class:`hw.grand.GrandUnit` running ``mode`` from reset.

    Returns
    -------
    dict
        ``mode`` (the code for the ``mode`` port) and ``o``: ``n`` beats, each a list of one
        ``{"f16", "f32"}`` bit-pattern pair per lane, from :class:`sim.grand.GrandModel`.
    """
    from sim.grand import GrandModel
    f16, f32 = GrandModel(reset_seed, lanes).generate(mode, n)
    beats = [[{"f16": int(a), "f32": int(b)} for a, b in zip(r16, r32, strict=True)]
             for r16, r32 in zip(f16.tolist(), f32.tolist(), strict=True)]
    return {"mode": GRAND_MODES[mode], "o": beats}
