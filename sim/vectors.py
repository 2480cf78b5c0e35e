"""Golden vectors shared by the Amaranth tests and the cocotb tests of the generated Verilog.

Every generator here is seeded, pure Python / NumPy (never Amaranth), and returns plain data
(ints, lists, dicts, ``bytes``) that serialises to JSON, so the same vectors drive Amaranth's
simulator and an independent Verilog simulator. The expected outputs come from the blocks'
golden models (:mod:`lowbit.sim.lut`, :mod:`lowbit.sim.link`, :mod:`lowbit.sim.prng`,
:mod:`lowbit.sim.grand`,
:mod:`lowbit.sim.bfp_column`, :mod:`lowbit.sim.discrete`, :mod:`lowbit.sim.quantiser`), never from
the gateware.

Stream payloads are given in the structured form of the block's ``lib.data`` layout (dicts for
struct layouts, lists for array layouts); packing them into bit vectors is the test side's job.
"""

import numpy as np

from lowbit.sim.link import (
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
           "grand_vectors", "GRAND_MODES", "bfp_vectors", "bfp_tie_job", "TIE_KINDS",
           "discrete_vectors", "quantiser_vectors",
           "F16_EDGES", "floatmac_vectors", "top_seq_vectors"]

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
    from lowbit.sim.lut import Quant
    return {
        "byte": [("tanh", Quant(0.05, 3), Quant(1 / 128, -2)),
                 ("sigmoid", Quant(0.03, 128, "uint8"), Quant(1 / 256, 0, "uint8")),
                 (("leaky_relu", 0.1), Quant(0.1, 0, narrow_range=True), Quant(0.08, 0)),
                 ("gelu", Quant(0.05, 3), Quant(0.03, -40))],
        "wide": [("tanh", Quant(2 ** -12, 0, "int16"), Quant(2 ** -15, 0, "int16")),
                 ("sigmoid", Quant(2 ** -11, 0, "int16"), Quant(2 ** -15, 0, "int16"))],
    }


def lut_vectors(*, lanes=2, tables=2, wide_tables=1, n_wide=256, seed=0):
    """Table loads, lookups and expected results of :class:`lowbit.hw.lut.TransferLUT`.

    Byte lookups cover all 256 codes of every resident table (an exhaustive sweep); wide
    lookups are the int16 edge codes (both ends, every interpolation segment boundary near 0
    and near 32767) and ``n_wide`` random codes, spread over the resident wide tables.

    Returns
    -------
    dict
        ``writes`` (``i_write`` payloads), ``i`` / ``o`` (byte lookup beats and expected
        beats), ``i_wide`` / ``o_wide`` (empty when ``wide_tables == 0``).
    """
    from lowbit.sim.lut import TableBank, lookup, lookup_int16

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
    """Request events and expected reply bytes of :class:`lowbit.hw.link.HostLink` with a PING
    handler.

    The test bench behind the link's ``command`` interface answers every command ``OK`` and
    echoes its payload (what :class:`lowbit.hw.link.PingHandler` does), so good frames are PINGs;
    around them come garbage bytes, corrupted CRCs, oversized lengths (drained) and frames cut
    short (inter-byte timeout). Expected replies are :class:`lowbit.sim.link.DeviceModel`'s.

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


def top_vectors(*, lanes=2, scratch_bytes=256, frame_bytes=64, use_spram=False, n=12, seed=0,
                clk_freq=12e6, baud=1_000_000, block=16, matrix_lanes=8):
    """Request events and expected replies of :class:`lowbit.hw.top.Accelerator` (the host link).

    Starts with PING, IDENTIFY, a read of every register and a write/read-back of the
    scratchpad, packed transfers, then ``n`` random commands: register writes and reads
    (read-only and unknown ones included), memory writes and reads and packed transfers (past
    the end and at odd addresses too), unknown opcodes, corrupted frames, garbage bytes and
    truncated frames. ``clk_freq`` / ``baud`` (reported by IDENTIFY), ``block`` and
    ``matrix_lanes`` (spans of the packed transfers) are the top's. Expected replies are
    :class:`lowbit.sim.link.DeviceModel`'s; the events have the form of :func:`link_vectors`.
    """
    rng = np.random.default_rng(seed)
    model = DeviceModel(lanes=lanes, scratch_bytes=scratch_bytes, frame_bytes=frame_bytes,
                        use_spram=use_spram, clk_freq=clk_freq, baud=baud, block=block,
                        matrix_lanes=matrix_lanes)
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
    # Packed transfers (their own random stream, so the commands above stay as they were).
    prng = np.random.default_rng(seed + 1000)
    send(encode_request(Opcode.MEM_FILL_HIGH, mem_write_payload(2 * block, b"\x81\x7f")))
    send(encode_request(Opcode.MEM_WRITE_LOW, mem_write_payload(2 * block, bytes(range(20)))))
    send(encode_request(Opcode.MEM_READ_HIGH, mem_read_payload(0, 3)))
    send(encode_request(Opcode.MEM_READ_LOW, mem_read_payload(2 * block - 2, 24)))
    packed = [Opcode.MEM_READ_LOW, Opcode.MEM_WRITE_LOW, Opcode.MEM_READ_HIGH,
              Opcode.MEM_FILL_HIGH]
    for _ in range(max(n // 2, 2)):                   # some refused: odd, past the end
        code = packed[int(prng.integers(0, 4))]
        addr = int(prng.integers(0, scratch_bytes + 4)) & ~int(prng.random() < 0.8)
        if code in (Opcode.MEM_WRITE_LOW, Opcode.MEM_FILL_HIGH):
            payload = mem_write_payload(addr, prng.integers(0, 256, int(prng.integers(0, 12)),
                                                            dtype=np.uint8).tobytes())
        else:
            payload = mem_read_payload(addr, int(prng.integers(0, 40)))
        send(encode_request(code, payload))
    for reg in ("LINK_SKIPPED", "LINK_ERRORS"):
        index = next(r.index for r in REGISTERS if r.name == reg)
        send(encode_request(Opcode.REG_READ, reg_read_payload(index)))
    send(encode_request(Opcode.MEM_READ, mem_read_payload(0, min(frame_bytes, scratch_bytes))))
    return {"events": events, "skipped": model.skipped, "errors": model.errors,
            "scratch": list(model.scratch)}


def prng_vectors(*, lanes=1, reset_seed=0, load_seed=1, n=48, seed=0):
    """Expected words of :class:`lowbit.hw.prng.Xoroshiro128aox` before and after a run-time seed
    load.

    Returns
    -------
    dict
        ``o_reset``: the first ``n`` output beats after reset (``reset_seed``); ``seed``: the
        per-lane ``{"s0", "s1"}`` state to put on the ``seed`` port for ``load_seed``;
        ``o_load``: the first ``n`` beats after that load. A beat is a list of one 64-bit word
        per lane, from :class:`lowbit.sim.prng.Xoroshiro128aox`.
    """
    from lowbit.sim.prng import Xoroshiro128aox, seed_lanes
    state = seed_lanes(load_seed, lanes)
    return {
        "o_reset": Xoroshiro128aox(reset_seed, lanes).take(n).tolist(),
        "seed": [{"s0": int(s0), "s1": int(s1)} for s0, s1 in state],
        "o_load": Xoroshiro128aox(load_seed, lanes).take(n).tolist(),
    }


#: Run-time mode codes of :class:`lowbit.hw.grand.GrandUnit` (``GrandMode``), by the model's names.
GRAND_MODES = {"normal": 0, "normal144": 1, "trunc2": 2, "trunc3": 3, "uniform": 4, "raw": 5}


def grand_vectors(*, lanes=2, reset_seed=0, mode="normal", n=32):
    """Expected results of :class:`lowbit.hw.grand.GrandUnit` running ``mode`` from reset.

    Returns
    -------
    dict
        ``mode`` (the code for the ``mode`` port) and ``o``: ``n`` beats, each a list of one
        ``{"f16", "f32"}`` bit-pattern pair per lane, from :class:`lowbit.sim.grand.GrandModel`.
    """
    from lowbit.sim.grand import GrandModel
    f16, f32 = GrandModel(reset_seed, lanes).generate(mode, n)
    beats = [[{"f16": int(a), "f32": int(b)} for a, b in zip(r16, r32, strict=True)]
             for r16, r32 in zip(f16.tolist(), f32.tolist(), strict=True)]
    return {"mode": GRAND_MODES[mode], "o": beats}


# --- BFP systolic MAC column ----------------------------------------------------------------------

def _bfp_operands(rng, n, nb, block, *, width, exp_bits, kind="gauss", bias=False, rand_bits=8):
    """One product's operands: Gaussian, uniform or heavy-tailed values with random per-block
    scales, quantised with the format's own quantiser (:func:`lowbit.sim.bfp.quantise`)."""
    from lowbit.sim.bfp import quantise

    k = nb * block
    if kind == "gauss":
        w, x = rng.standard_normal((n, k)), rng.standard_normal(k)
    elif kind == "uniform":
        w, x = rng.uniform(-1, 1, (n, k)), rng.uniform(0, 1, k)
    elif kind == "heavy":
        w, x = rng.standard_t(1.2, (n, k)), rng.standard_cauchy(k)
    else:
        raise ValueError(f"Unknown operand kind {kind!r}")
    spread = min(20, (1 << (exp_bits - 1)) // 4)
    scale = 2.0 ** rng.integers(-spread, spread, (n, nb)).repeat(block, axis=1)
    w_m, w_e = quantise(w * scale, block=block, width=width, exp_bits=exp_bits)
    x_m, x_e = quantise(x * 2.0 ** int(rng.integers(-spread, spread)), block=block, width=width,
                        exp_bits=exp_bits)
    job = {"w_m": np.asarray(w_m).reshape(n, k), "w_e": np.asarray(w_e).reshape(n, nb),
           "x_m": np.asarray(x_m).reshape(k), "x_e": np.asarray(x_e).reshape(nb),
           "rand": rng.integers(0, 1 << rand_bits, n)}
    if bias:
        b_m, b_e = quantise(rng.standard_normal(n) * 2.0 ** int(rng.integers(0, 2 * spread)),
                            block=n, width=width, exp_bits=exp_bits)
        job["b_m"] = np.asarray(b_m).reshape(n)
        job["b_e"] = np.repeat(np.asarray(b_e).reshape(-1), n)
    return job


def _bfp_edge_jobs(rng, n, block, nb, *, width, exp_bits, rand_bits):
    """Zero blocks, zero products, full scale (``-2^(W-1)`` too) and extreme exponents."""
    e_lim = (1 << (exp_bits - 1)) - 1
    top = (1 << (width - 1)) - 1
    k = nb * block
    kw = dict(width=width, exp_bits=exp_bits, rand_bits=rand_bits)
    zero_x = _bfp_operands(rng, n, nb, block, **kw)
    zero_x["x_m"][block:2 * block] = 0               # an all-zero vector block ...
    zero_x["w_e"][:, 1] = e_lim                      # ... against the largest exponents
    zero_w = _bfp_operands(rng, n, nb, block, **kw)
    zero_w["w_m"][:] = 0                             # a zero product: exponent 0
    zero_row = _bfp_operands(rng, n, nb, block, **kw)
    zero_row["w_m"][1, :] = 0
    zero_row["x_m"][:block] = 0                      # a zero first block, then data
    jobs = [zero_x, zero_w, zero_row]
    # Every product (-2^(W-1))^2, outside the symmetric range and still exact.
    jobs.append({"w_m": np.full((n, k), -top - 1), "w_e": np.zeros((n, nb), int),
                 "x_m": np.full(k, -top - 1), "x_e": np.zeros(nb, int)})
    # Full scale of both signs with exponent sums at both ends of the E + 1-bit range.
    signs = np.where(np.arange(n) % 2, -1, 1)
    jobs.append({"w_m": (signs * top)[:, None].repeat(k, axis=1),
                 "w_e": np.where(np.arange(nb) % 2, -e_lim, e_lim)[None, :].repeat(n, axis=0),
                 "x_m": np.full(k, top),
                 "x_e": np.where(np.arange(nb) % 3 == 1, -e_lim, e_lim)})
    # Mixed exponents per row and block.
    jobs.append({"w_m": np.arange(n * k).reshape(n, k) % (2 * top + 1) - top,
                 "w_e": rng.integers(-e_lim, e_lim + 1, (n, nb)),
                 "x_m": np.arange(k) * 13 % (2 * top + 1) - top,
                 "x_e": rng.integers(-e_lim, e_lim + 1, nb)})
    for job in jobs:
        job["rand"] = rng.integers(0, 1 << rand_bits, n)
    return jobs


#: Lane kinds of :func:`bfp_tie_job`, in the order lanes take them.
TIE_KINDS = ("odd", "even", "zero", "above", "odd", "below", "even", "odd")


def bfp_tie_job(rng, *, lanes, block, nb, e4, width, dropped, w_max=8, top="max", bias=False,
                rand_bits=8, offset=0):
    """One product whose output mantissas are exact ties: the bits the output shifter drops are
    ``1 0…0`` (and, in some lanes, one unit above or below that).

    Every lane ``i`` accumulates an integer ``T_i`` at exponent ``e4 - d_i`` (all its blocks and
    its bias share that exponent, so the accumulation is exact), and the output shifter drops
    ``d_i`` bits at the output exponent ``e4``: ``T_i = ±(k·2^d + 2^(d-1))`` with kept
    magnitude ``k``. ``d_i`` is ``dropped[i % len(dropped)]``; the lane kinds cycle through
    :data:`TIE_KINDS` from ``offset`` (the signs alternate, and swap on every pass, so each kind
    comes with both): ``"odd"`` / ``"even"`` kept values (random, of that parity; 0 where
    nothing larger fits), ``"zero"`` (±1/2), ``"above"`` / ``"below"`` (``|T| ± 1``: the sticky
    or the fraction bits decide; only for ``d >= 2``, else an odd tie).

    ``top`` makes lane 0 fix the max rule's exponent at ``e4`` for runtime width ``width``:
    ``"max"`` a positive tie of kept ``2^(W-1) - 1`` (rounding up saturates) or ``2^(W-2)``;
    ``"predicted"`` kept in ``[2^(W-3), 2^(W-2))``, so the max rule gives ``e4 - 1`` and a
    predicted ``e4`` lies in its window; ``None`` (fixed exponent) a lane like the others.
    Operands: the first two elements of every vector block are ``m = 2^(W_max-1) - 1`` and 1,
    so a row's block product is ``m·a + b`` from its first two weights (the others are 0; the
    remaining vector elements random); with ``bias`` a random bias mantissa at the lane's
    exponent. Stochastic random numbers sit at and beside the half: ``2^(R-1)``,
    ``2^(R-1) - 1``, 0, ``2^R - 1``.

    Returns
    -------
    dict
        A job for :meth:`lowbit.sim.bfp_column.ColumnModel.matvec` (``w_m``, ``w_e``, ``x_m``,
        ``x_e``, ``rand``, with ``bias`` also ``b_m``, ``b_e``) plus ``acc``: ``[(T_i, d_i)]``.
    """
    m = (1 << (w_max - 1)) - 1
    cap = nb * (m * m + m - 1) - (m if bias else 0)
    half_r = 1 << (rand_bits - 1)
    rand_cycle = [half_r, half_r - 1, 0, (1 << rand_bits) - 1]
    acc, rand = [], []
    for i in range(lanes):
        d = int(dropped[i % len(dropped)])
        if d < 1:
            raise ValueError("Ties need at least one dropped bit")
        kmax = min((1 << (width - 1)) - 1, max(0, (cap - (1 << (d - 1)) - 1) >> d))
        j = i + offset
        kind = TIE_KINDS[j % len(TIE_KINDS)]
        sign = -1 if (j + j // len(TIE_KINDS)) % 2 else 1      # each kind with both signs
        if i == 0 and top == "max":
            k, kind, sign = int(rng.choice([kmax, 1 << (width - 2)])), "tie", 1
            if kmax < 1 << (width - 2):
                raise ValueError(f"Lane 0 cannot reach the top with {d} dropped bits")
        elif i == 0 and top == "predicted":
            k, kind, sign = int(rng.integers(1 << (width - 3), 1 << (width - 2))), "tie", 1
        elif kind == "zero" or kmax == 0:
            k = 0
        else:
            want = 1 if kind in ("odd", "above", "below") else 0
            k = int(rng.integers(0, kmax + 1))
            if k % 2 != want:
                k = k - 1 if k > 0 else k + 1
            k = min(k, kmax)
        t = (k << d) + (1 << (d - 1))
        if d >= 2 and kind == "above":
            t += 1
        elif d >= 2 and kind == "below":
            t -= 1
        acc.append((sign * t, d))
        rand.append(rand_cycle[(i + offset) % len(rand_cycle)])
    x_e = rng.integers(-3, 4, nb)
    x_m = rng.integers(-m, m + 1, nb * block)
    x_m[0::block], x_m[1::block] = m, 1
    w_m = np.zeros((lanes, nb * block), dtype=np.int64)
    w_e = np.zeros((lanes, nb), dtype=np.int64)
    b_m = rng.integers(-m, m + 1, lanes) if bias else np.zeros(lanes, dtype=np.int64)
    for i, (t, d) in enumerate(acc):
        q, rem = divmod(t - int(b_m[i]), nb)
        for k in range(nb):
            part = q + (k < rem)
            a = max(-m, min(m, round(part / m)))
            b = part - m * a
            if abs(b) > m:
                raise ValueError(f"Lane {i}'s total {t} does not fit {nb} blocks")
            w_m[i, k * block], w_m[i, k * block + 1] = a, b
        w_e[i] = e4 - d - x_e
    job = {"w_m": w_m, "w_e": w_e, "x_m": x_m, "x_e": x_e, "rand": np.array(rand),
           "acc": acc}
    if bias:
        job["b_m"], job["b_e"] = b_m, np.array([e4 - d for _, d in acc])
    return job


def bfp_vectors(*, lanes=4, block=4, width=8, exp_bits=8, max_blocks=4, frac_bits=3,
                rand_bits=8, stat_shift=None, jobs=3, seed=0):
    """Products, configurations and expected outputs of :class:`lowbit.hw.bfp.BFPColumn`.

    Cases (one configuration each, several products in a row): Gaussian, uniform and
    heavy-tailed operands in each rounding mode (stochastic with given random numbers), ``jobs``
    products each; the
    bias path in each mode, zero blocks and zero products, full scale and extreme exponents in
    "max" and "fixed" exponent mode, NaN weight / vector / bias blocks, and narrow run-time
    widths; and, when the model has the ``"predicted"`` exponent mode, a run of products whose
    output scale jumps up and down in that mode (its state carried from product to product,
    after products in other modes); last, exact ties (:func:`bfp_tie_job`) in every rounding
    mode with bias, with a fixed exponent and at run-time width 4, when the exponent range
    holds them (``exp_bits >= 6``). Expected outputs from
    :meth:`lowbit.sim.bfp_column.ColumnModel.matvec`, called in case order on one model.

    Returns
    -------
    dict
        ``cases``: list of ``{"name", "config", "inputs", "outputs"}``. ``config`` has the
        model's names: ``width``, ``rounding``, ``exp_mode`` ("max" / "fixed" / "predicted"),
        ``fixed_exp``, ``pred_k``, ``pred_margin``, ``bias`` (bool), ``blocks``. ``inputs`` are
        the payloads of ``i_w`` (``{"m": [N], "e": [N]}``), ``i_x`` and ``i_bias``
        (``{"m", "e"}``) and ``i_rand`` (ints);
        ``outputs["o"]`` the ``{"m", "e"}`` output elements, ``N`` per product.
    """
    from lowbit.sim.bfp import nan_exponent, quantise
    from lowbit.sim.bfp_column import EXP_MODES, ColumnModel

    extra = {} if stat_shift is None else {"stat_shift": stat_shift}
    model = ColumnModel(lanes=lanes, block=block, width=width, exp_bits=exp_bits,
                        max_blocks=max_blocks, frac_bits=frac_bits, rand_bits=rand_bits, **extra)
    rng = np.random.default_rng(seed)
    n, b = lanes, block
    kw = dict(width=width, exp_bits=exp_bits, rand_bits=rand_bits)
    nb_a, nb_b = min(3, max_blocks), min(2, max_blocks)
    nan = nan_exponent(exp_bits)
    e_lim = (1 << (exp_bits - 1)) - 1

    specs = []
    for kind, rounding in (("gauss", "nearest"), ("uniform", "zero"), ("heavy", "stochastic")):
        specs.append((f"{kind}-{rounding}", [_bfp_operands(rng, n, nb_a, b, kind=kind, **kw)
                                             for _ in range(jobs)], {"rounding": rounding}))
    for rounding in ("nearest", "zero", "stochastic"):
        specs.append((f"bias-{rounding}",
                      [_bfp_operands(rng, n, nb_b, b, bias=True, **kw) for _ in range(jobs)],
                      {"rounding": rounding, "bias": True}))
    edges = _bfp_edge_jobs(rng, n, b, max_blocks, **kw)
    specs.append(("edges-nearest", edges, {"rounding": "nearest"}))
    specs.append(("edges-stochastic", edges, {"rounding": "stochastic"}))
    for fixed in (-e_lim, 0, 5, e_lim):
        specs.append((f"edges-fixed{fixed}", edges[3:],
                      {"rounding": "zero", "exp_mode": "fixed", "fixed_exp": fixed}))
    nan_jobs = [_bfp_operands(rng, n, nb_b, b, bias=True, **kw) for _ in range(4)]
    nan_jobs[0]["w_e"][n // 2, 1 % nb_b] = nan        # one weight block of one row
    nan_jobs[1]["x_e"][0] = nan                       # a vector block
    nan_jobs[2]["b_e"][n - 1] = nan                   # one bias element
    specs.append(("nan", nan_jobs, {"rounding": "nearest", "bias": True}))
    for w in sorted({2, 3, max(2, width - 3)}):
        specs.append((f"width{w}", [_bfp_operands(rng, n, nb_b, b, kind="heavy", **kw)
                                    for _ in range(2)], {"rounding": "nearest", "width": w}))

    if "predicted" in EXP_MODES:
        # Stationary Gaussian products whose output scale jumps (x exponents shifted).
        pred = []
        for shift in [0] * 6 + [5] * 5 + [-2] * 5:
            k = nb_b * b
            w_m, w_e = quantise(rng.standard_normal((n, k)), block=b, width=width,
                                exp_bits=exp_bits)
            x_m, x_e = quantise(rng.standard_normal(k), block=b, width=width,
                                exp_bits=exp_bits)
            pred.append({"w_m": np.asarray(w_m).reshape(n, k),
                         "w_e": np.asarray(w_e).reshape(n, nb_b),
                         "x_m": np.asarray(x_m).reshape(k),
                         "x_e": np.asarray(x_e).reshape(nb_b) + shift,
                         "rand": rng.integers(0, 1 << rand_bits, n)})
        specs.insert(1, ("predicted-nearest", pred, {"rounding": "nearest",
                                                     "exp_mode": "predicted"}))
        specs.insert(2, ("predicted-stochastic", pred[:8], {
            "rounding": "stochastic", "exp_mode": "predicted", "pred_k": 2, "pred_margin": 0}))

    if exp_bits >= 6:
        specs += _bfp_tie_specs(rng, n, b, nb_b, width=width, rand_bits=rand_bits)

    cases = []
    for name, jobs, cfg in specs:
        config = {"width": width, "rounding": "nearest", "exp_mode": "max", "fixed_exp": 0,
                  "pred_k": 3, "pred_margin": 2, "bias": False, **cfg}
        nb = len(jobs[0]["x_e"])
        config["blocks"] = nb
        i_w, i_x, i_bias, i_rand, out = [], [], [], [], []
        for job in jobs:
            assert len(job["x_e"]) == nb
            for j in range(nb * b):
                i_w.append({"m": [int(v) for v in job["w_m"][:, j]],
                            "e": [int(v) for v in job["w_e"][:, j // b]]})
                i_x.append({"m": int(job["x_m"][j]), "e": int(job["x_e"][j // b])})
            bias = config["bias"]
            if bias:
                i_bias += [{"m": int(m), "e": int(e)}
                           for m, e in zip(job["b_m"], job["b_e"], strict=True)]
            if config["rounding"] == "stochastic":
                i_rand += [int(r) for r in job["rand"]]
            pred = {} if "predicted" not in EXP_MODES else {
                "pred_k": config["pred_k"], "pred_margin": config["pred_margin"]}
            y, e = model.matvec(job["w_m"], job["w_e"], job["x_m"], job["x_e"],
                                bias_m=job["b_m"] if bias else None,
                                bias_e=job["b_e"] if bias else None, width=config["width"],
                                rounding=config["rounding"], exp_mode=config["exp_mode"],
                                fixed_exp=config["fixed_exp"], rand=job["rand"], **pred)
            out += [{"m": int(v), "e": int(e)} for v in y]
        inputs = {"i_w": i_w, "i_x": i_x}
        if i_bias:
            inputs["i_bias"] = i_bias
        if i_rand:
            inputs["i_rand"] = i_rand
        cases.append({"name": name, "config": config, "inputs": inputs, "outputs": {"o": out}})
    return {"cases": cases}


def _bfp_tie_specs(rng, n, block, nb, *, width, rand_bits):
    """Cases of exact-tie products: the max rule at ``W_max`` with bias (nearest, toward zero,
    stochastic), a fixed exponent (up to the most bits a lane can drop), and run-time width 4."""
    m = (1 << (width - 1)) - 1

    def jobs(count, *, w, e4, top, bias):
        cap = nb * (m * m + m - 1) - (m if bias else 0)
        dmax = max(d for d in range(1, 40) if (1 << (d - 1)) < cap)
        dtop = max(d for d in range(1, dmax + 1)
                   if (cap - (1 << (d - 1)) - 1) >> d >= 1 << (w - 2))
        out = []
        for j in range(count):
            dropped = [int(d) for d in rng.integers(1, dmax + 1, n)]
            if top == "max":
                dropped[0] = int(rng.integers(1, dtop + 1))
            out.append(bfp_tie_job(rng, lanes=n, block=block, nb=nb, e4=e4, width=w,
                                   w_max=width, dropped=dropped, top=top, bias=bias,
                                   rand_bits=rand_bits, offset=3 * j))
        return out

    ties = jobs(4, w=width, e4=3, top="max", bias=True)
    specs = [(f"ties-{r}", ties, {"rounding": r, "bias": True})
             for r in ("nearest", "zero", "stochastic")]
    specs.append(("ties-fixed", jobs(3, w=width, e4=5, top=None, bias=False),
                  {"rounding": "nearest", "exp_mode": "fixed", "fixed_exp": 5}))
    if width >= 4:
        specs.append(("ties-width4", jobs(3, w=4, e4=-2, top="max", bias=False),
                      {"rounding": "nearest", "width": 4}))
    return specs


# --- Discrete shift/XOR unit ----------------------------------------------------------------------

#: Filler word for the book port's entries beyond a narrower book (the block must ignore them).
_JUNK_WORD = 0x1F


def _random_book(rng, n):
    from lowbit.sim.discrete import CodeBook
    return CodeBook(n, [(int(rng.integers(2)), int(rng.integers(2)), int(rng.integers(8)))
                        for _ in range(1 << n)])


def _book_words(book, code_bits):
    return book.words() + [_JUNK_WORD] * ((1 << code_bits) - len(book.entries))


def discrete_vectors(*, lanes=4, width=8, code_bits=2, acc_width=None, seed=0, max_pairs=4096):
    """Beats, configurations and expected outputs of :class:`lowbit.hw.discrete.DiscreteUnit`.

    Cases: ``MUL`` with the default book over every (operand, code) pair (random pairs when
    there are more than ``max_pairs``), ``DIV`` likewise with a random book (left shifts that
    saturate, mixed signs), a 1-bit book in a wider book port (unused entries hold junk), the
    four discrete ⊗ discrete tables (written through the table port, every code pair, operand
    bits above the code random), and ``DOT`` products of several lengths, a matrix–vector
    product and runs that saturate the accumulator both ways. Expected outputs from
    :mod:`lowbit.sim.discrete` (``mul_cd``, ``div_cd``, ``dd_table``, ``dot``).

    Returns
    -------
    dict
        ``acc_width`` and ``cases``: ``{"name", "config", "writes", "inputs", "outputs"}``;
        ``config``: ``book`` (``2**code_bits`` register words), ``op`` (``"MUL"``, ``"DIV"``,
        ``"DOT"``, ``"LUT"``), ``lut_op``; ``writes``: table-port writes, one dict
        ``{"tbl_en", "tbl_addr", "tbl_data"}`` per cycle (the last one disables); ``inputs["i"]``
        ``{"x": [L], "w": [L], "last"}``; ``outputs["o"]`` ``{"y": [L], "acc"}``.
    """
    from lowbit.sim.discrete import DD_OPS, CodeBook, SMFormat, dd_table, div_cd, dot, mul_cd

    acc_width = width + 8 if acc_width is None else acc_width
    rng = np.random.default_rng(seed)
    fmt = SMFormat(width, min(3, width - 1))
    L, n = lanes, code_bits

    def beats(x, c, last=None):
        x, c = np.asarray(x).reshape(-1, L), np.asarray(c).reshape(-1, L)
        last = np.zeros(len(x), int) if last is None else last
        return [{"x": [int(v) for v in xb], "w": [int(v) for v in cb], "last": int(lb)}
                for xb, cb, lb in zip(x, c, last, strict=True)]

    def pairs(k):
        if (1 << (width + k)) <= max_pairs:
            xs, cs = np.meshgrid(np.arange(1 << width), np.arange(1 << k), indexing="ij")
            xs, cs = xs.ravel(), cs.ravel()
        else:
            xs = rng.integers(0, 1 << width, max_pairs)
            xs[:6] = [0, 1 << (width - 1), (1 << (width - 1)) - 1, (1 << width) - 1, 1,
                      (1 << (width - 1)) | 1]
            cs = rng.integers(0, 1 << k, max_pairs)
        pad = -len(xs) % L
        return np.r_[xs, xs[:pad]], np.r_[cs, cs[:pad]]

    def elementwise(name, op, book, model):
        x, c = pairs(book.n)
        y = np.asarray(model(x, c, book, fmt)).reshape(-1, L)
        return {"name": name, "config": {"book": _book_words(book, n), "op": op, "lut_op": 0},
                "writes": [], "inputs": {"i": beats(x, c)},
                "outputs": {"o": [{"y": [int(v) for v in yb], "acc": 0} for yb in y]}}

    cases = [elementwise("mul-default", "MUL", CodeBook.default(n), mul_cd),
             elementwise("div-random", "DIV", _random_book(rng, n), div_cd)]
    if n > 1:
        cases.append(elementwise("mul-1bit", "MUL", CodeBook.default(1), mul_cd))

    # Discrete x discrete tables: all four written once, then every pair through each.
    book = _random_book(rng, n)
    tables = [dd_table(book, name, fmt) for name in DD_OPS]
    writes = [{"tbl_en": 1, "tbl_addr": t << (2 * n) | a << n | b, "tbl_data": int(tab[a, b])}
              for t, tab in enumerate(tables) for a in range(1 << n) for b in range(1 << n)]
    writes.append({"tbl_en": 0, "tbl_addr": 0, "tbl_data": 0})
    a, b = np.meshgrid(np.arange(1 << n), np.arange(1 << n), indexing="ij")
    a, b = a.ravel(), b.ravel()
    pad = -len(a) % L
    a, b = np.r_[a, a[:pad]], np.r_[b, b[:pad]]
    for t, name in enumerate(DD_OPS):
        x = a | rng.integers(0, 1 << (width - n), len(a)) << n
        y = tables[t][a, b].reshape(-1, L)
        cases.append({"name": f"lut-{name}",
                      "config": {"book": _book_words(book, n), "op": "LUT", "lut_op": t},
                      "writes": writes if t == 0 else [], "inputs": {"i": beats(x, b)},
                      "outputs": {"o": [{"y": [int(v) for v in yb], "acc": 0} for yb in y]}})

    # Dot products: several lengths, a matrix-vector product, saturation both ways.
    book = _random_book(rng, n)
    vectors = [(rng.integers(0, 1 << width, k), rng.integers(0, 1 << n, k))
               for k in (1, L, L + 1, 7, 33, 2)]
    xvec = rng.integers(0, 1 << width, 10)
    vectors += [(xvec, rng.integers(0, 1 << n, 10)) for _ in range(4)]
    big = int(np.argmax(book.exponents()))
    sign = book.entries[big][0] << (width - 1)
    top = (1 << (width - 1)) - 1
    run = 2 * ((1 << (acc_width - 1)) // top + 1)      # enough largest terms to saturate
    run = min(run, 4096)
    vectors.append((np.full(run, top | sign), np.full(run, big)))
    vectors.append((np.r_[np.full(run, top | sign ^ (1 << (width - 1))),
                          np.full(run // 2, top | sign)], np.full(run + run // 2, big)))
    xs, cs, lasts, outs = [], [], [], []
    for vx, vc in vectors:
        nbeats = -(-len(vx) // L)
        xp = np.zeros(nbeats * L, int)
        cp = np.zeros(nbeats * L, int)
        xp[:len(vx)], cp[:len(vc)] = vx, vc
        xs.append(xp)
        cs.append(cp)
        lasts.append(np.r_[np.zeros(nbeats - 1, int), 1])
        outs.append({"y": [0] * L,
                     "acc": int(dot(vx, vc, book, fmt, acc_width=acc_width, lanes=L))})
    cases.append({"name": "dot", "config": {"book": _book_words(book, n), "op": "DOT",
                                            "lut_op": 0},
                  "writes": [], "inputs": {"i": beats(np.concatenate(xs), np.concatenate(cs),
                                                      np.concatenate(lasts))},
                  "outputs": {"o": outs}})
    return {"acc_width": acc_width, "cases": cases}


# --- Stochastic quantiser -------------------------------------------------------------------------

#: binary16 codes at the format's edges: zeros, smallest subnormals, the subnormal/normal
#: boundary, around 1.0, the largest finite values, infinities and NaNs, both signs.
F16_EDGES = [c | s for s in (0, 0x8000) for c in (
    0x0000, 0x0001, 0x0002, 0x0003, 0x03FF, 0x0400, 0x0401, 0x3BFF, 0x3C00, 0x3C01, 0x7BFE,
    0x7BFF, 0x7C00, 0x7C01, 0x7E00, 0x7FFF)]


def quantiser_vectors(*, fmt="f16", width=32, frac_bits=16, lanes=4, block=16, w_max=8,
                      exp_bits=8, rand_bits=8, mult_bits=12, code_bits=3, stride=97, seed=0):
    """Input beats, configurations and expected outputs of :class:`lowbit.hw.quantiser.Quantiser`.

    Elements: for ``fmt="f16"`` the binary16 edge codes :data:`F16_EDGES` and every
    ``stride``-th code (all exponents, both signs); for fixed point, values spread over every
    magnitude with both ends of the range. Cases: int8 with power-of-two and affine scales in
    each rounding mode (stochastic with given random bits); BFP blocks in sorted order (all-zero,
    subnormal-only and NaN/Inf blocks) and shuffled, in both exponent rules, every rounding mode
    and several run-time widths; discrete codes (nearest and stochastic) with the default and
    random books, a narrower book in the wider book port. Expected outputs from
    :mod:`lowbit.sim.quantiser`.

    Returns
    -------
    dict
        ``cases``: ``{"name", "config", "inputs", "outputs"}``; ``config`` has ``target``
        (``"bfp"``, ``"int8"``, ``"discrete"``), ``rounding``, ``mant_width``, ``rule``,
        ``shift``, ``zero``, and ``mult`` / ``book`` / ``code_width`` when the block has those
        ports; ``inputs["i"]`` beats of ``lanes`` elements (raw codes or integers),
        ``inputs["i_rand"]`` beats of random integers (stochastic only); ``outputs["o"]``
        ``{"q": [L], "e"}``.
    """
    from lowbit.sim import quantiser as mq
    from lowbit.sim.discrete import CodeBook

    rng = np.random.default_rng(seed)
    if fmt == "f16":
        elems = np.r_[F16_EDGES, np.arange(stride // 2, 1 << 16, stride)].astype(np.int64)
        decode = mq.decode_f16
    else:
        lim = 1 << (width - 1)
        k = 1024
        mags = rng.integers(0, width, k)
        vals = (rng.integers(0, lim, k) >> (width - 1 - mags)) * rng.choice([-1, 1], k)
        one = 1 << frac_bits
        edges = [-lim, lim - 1, 0, 1, -1, one - 1, one, -one, 0, 0, 0, 0, 0, 0, 0, 0]
        elems = np.r_[vals, edges].astype(np.int64)

        def decode(v):
            return mq.decode_fixed(v, frac_bits, width=width)
    elems = np.r_[elems, np.zeros(-len(elems) % block, np.int64)]
    shuffled = rng.permutation(elems)
    ordered = np.sort(elems) if fmt == "f16" else elems

    def rand_for(x):
        return rng.integers(0, 1 << rand_bits, len(x))

    specs = []                                 # (name, elements, config)
    mult_a = min(3001, (1 << mult_bits) - 1) if mult_bits else 1
    mult_b = (1 << mult_bits) - 1 if mult_bits else 1
    for rounding, shift, mult, zero in (("nearest", -4, 1, 0), ("zero", 9, mult_a, -7),
                                        ("stochastic", 3, 1, 12),
                                        ("stochastic", 20, mult_b, -128)):
        specs.append((f"int8-{rounding}-{shift}", shuffled,
                      {"target": "int8", "rounding": rounding, "shift": shift, "mult": mult,
                       "zero": zero}))
    for order, rounding, w, rule in (("sorted", "nearest", w_max, "floor"),
                                     ("shuffled", "zero", min(4, w_max), "ceil"),
                                     ("shuffled", "stochastic", min(3, w_max), "floor"),
                                     ("shuffled", "nearest", 2, "ceil"),
                                     ("sorted", "stochastic", w_max, "ceil")):
        specs.append((f"bfp-{order}-{rounding}-{w}-{rule}",
                      ordered if order == "sorted" else shuffled,
                      {"target": "bfp", "rounding": rounding, "mant_width": w, "rule": rule}))
    if code_bits:
        books = [("default", CodeBook.default(min(2, code_bits)), "nearest"),
                 ("random", _random_book(rng, code_bits), "stochastic"),
                 ("default1", CodeBook.default(1), "stochastic")]
        for which, book, rounding in books:
            vals = np.unique(book.values())
            pts = np.r_[vals, (vals[1:] + vals[:-1]) / 2,
                        vals[:-1] + (vals[1:] - vals[:-1]) / 2 ** rand_bits]
            if fmt == "f16":
                near = pts.astype(np.float16).view(np.uint16).astype(np.int64)
            else:
                near = np.round(np.ldexp(pts, frac_bits)).astype(np.int64)
            near = np.r_[near, near + 1, near - 1]
            if fmt == "f16":
                near &= 0xFFFF
            else:
                near = np.clip(near, -lim, lim - 1)
            x = np.r_[shuffled, near]
            x = np.r_[x, np.zeros(-len(x) % lanes, np.int64)]
            specs.append((f"discrete-{which}-{rounding}", x,
                          {"target": "discrete", "rounding": rounding, "book": book}))

    cases = []
    for name, x, cfg in specs:
        config = {"target": "bfp", "rounding": "nearest", "mant_width": w_max, "rule": "floor",
                  "shift": 0, "zero": 0, **cfg}
        values = decode(x)
        stochastic = config["rounding"] == "stochastic"
        rand = rand_for(x) if stochastic else None
        kw = {"rand": rand, "rand_bits": rand_bits} if stochastic else {}
        if config["target"] == "int8":
            q = mq.quantise_int8(values, shift=config["shift"], mult=config["mult"],
                                 zero=config["zero"], rounding=config["rounding"], **kw)
            e = np.zeros(len(x) // lanes, np.int64)
        elif config["target"] == "bfp":
            q, eb = mq.quantise_bfp(values, block=block, width=config["mant_width"],
                                    exp_bits=exp_bits, rule=config["rule"],
                                    rounding=config["rounding"], **kw)
            e = np.repeat(eb, block // lanes)
        else:
            book = config.pop("book")
            q = mq.quantise_discrete(values, book, mode=config["rounding"], **kw)
            e = np.zeros(len(x) // lanes, np.int64)
            config["book"] = _book_words(book, code_bits)
            config["code_width"] = book.n
        config.setdefault("mult", 1)
        if not mult_bits:
            config.pop("mult")
        if code_bits:
            config.setdefault("book", [_JUNK_WORD] * (1 << code_bits))
            config.setdefault("code_width", code_bits)
        q = np.asarray(q, np.int64).reshape(-1, lanes)
        inputs = {"i": x.reshape(-1, lanes).tolist()}
        if stochastic:
            inputs["i_rand"] = rand.reshape(-1, lanes).tolist()
        cases.append({"name": name, "config": config, "inputs": inputs,
                      "outputs": {"o": [{"q": [int(v) for v in qb], "e": int(eb)}
                                        for qb, eb in zip(q, e, strict=True)]}})
    return {"cases": cases}


def _float_edges(fmt):
    """Bit patterns of a format's edge values, both signs: zero, subnormals (flushed on input),
    the smallest normals, one and its neighbours, the largest finite, Inf, quiet and signalling
    NaNs (with payloads)."""
    from lowbit.sim.floatmac import FORMATS
    f = FORMATS[fmt]
    frac = f.precision - 1
    one = f.bias << frac
    top = ((1 << f.exp_bits) - 1) << frac
    codes = [0, 1, (1 << frac) - 1, 1 << frac, (1 << frac) + 1, one - 1, one, one + 1,
             one + (1 << (frac - 1)), top - 2, top - 1, top, top | 1, f.nan]
    return [c | s for s in (0, 1 << (f.bits - 1)) for c in codes]


def floatmac_vectors(*, lanes=4, fmt="f16", n_random=6, seed=0):
    """Cases of :class:`lowbit.hw.floatmac.FloatMAC`: each a product length ``K`` (``cfg_len``) and
    several products of ``K`` beats, expected outputs from :func:`lowbit.sim.floatmac.float_mac`.

    Cases: every pair of edge values (:func:`_float_edges`) as single-beat products; sums that
    overflow to Inf (and ``Inf - Inf``); exact and near cancellation; products and sums around
    the smallest normal (rounding up to it or flushing to zero); subnormal inputs mixed with
    normals; then ``n_random`` random cases (``K`` from 1 to 12, magnitudes spread over the
    exponent range, a few edge values mixed in).

    Returns
    -------
    dict
        ``{"cases": [{"name", "len", "w": [[...N...] per beat], "x": [...], "o": [[...N...]
        per product]}]}`` (bit patterns).
    """
    from lowbit.sim.floatmac import FORMATS, float_mac, to_bits
    f = FORMATS[fmt]
    rng = np.random.default_rng(seed)
    sign = 1 << (f.bits - 1)
    edges = _float_edges(fmt)
    cases = []

    def case(name, w, x):
        w = np.asarray(w, dtype=np.int64)
        w = np.take(w, np.arange(lanes) % w.shape[-1], axis=-1)     # written for 4 lanes
        x = np.asarray(x, dtype=np.int64)
        products, k = w.shape[0], w.shape[1]
        o = float_mac(w, x, fmt).astype(np.int64)
        cases.append({"name": name, "len": k, "w": w.reshape(products * k, lanes).tolist(),
                      "x": x.reshape(-1).tolist(), "o": o.tolist()})

    def bits(values):
        return to_bits(values, fmt).astype(np.int64)

    # Single-beat products of every edge pair; x is broadcast, so a beat groups the pairs
    # that share their x operand.
    pairs = [(a, b) for a in edges for b in edges]
    by_x = {}
    for a, b in pairs:
        by_x.setdefault(b, []).append(a)
    w1, x1 = [], []
    for b, ws in by_x.items():
        for k in range(0, len(ws), lanes):
            chunk = (ws[k:k + lanes] + edges)[:lanes]
            w1.append(chunk)
            x1.append(b)
    case("edge-pairs", np.array(w1)[:, None, :], np.array(x1)[:, None])

    big = f.max_finite
    one = bits(1.0)[()]
    inf = bits(np.inf)[()]
    ovf_w = bits([[big, big / 2, big, -big], [big / 2, big / 2, -big, -big]])
    case("overflow", ovf_w[None], np.array([[one, one]]))
    half = float(np.ldexp(1.0, (f.emax + 1) // 2))
    case("product-overflow", bits([[[half, -half, half / 2, half * 0.75]]]),
         bits([[half * 1.5]]))
    case("inf-minus-inf", np.array([[[inf, inf, inf, inf], [inf | sign, inf, 0, one]]]),
         np.array([[one, one]]))
    ulp = float(np.ldexp(1.0, 1 - f.precision))
    canc = bits([[1.0, 1.5, 3.0, big / 4], [-1.0, -1.5 + ulp, -3.0 - 2 * ulp, -big / 4],
                 [0.0, -ulp / 2, ulp, ulp]])
    case("cancellation", canc[None], np.array([[one, one, one]]))
    tiny = f.min_normal
    root = float(np.ldexp(1.0, f.emin // 2))
    near = bits([[root, root * (1 - ulp / 2), root * (1 - ulp), root * 0.75],
                 [tiny * 1.5, -tiny, tiny * (1 + 2 * ulp), -tiny * 1.25]])
    case("near-ftz", near[None], bits([[root, 1.0]]))
    sub = np.array([[[1, sign | 3, (1 << (f.precision - 1)) - 1, one],
                     [one, one, one, 1]]], dtype=np.int64)
    case("subnormal-inputs", sub, np.array([[one, 5]]))
    for t in range(n_random):
        k = int(rng.integers(1, 13))
        products = int(rng.integers(1, 4))
        span = (f.emax - f.emin) // 2
        scale = np.ldexp(1.0, rng.integers(-span, span + 1, (products, k, 1)) // 2)
        w = bits(rng.normal(0, 1, (products, k, lanes)) * scale)
        x = bits(rng.normal(0, 1, (products, k)) * np.ldexp(1.0, rng.integers(-span, span + 1,
                                                                            (products, k)) // 2))
        mask = rng.random(w.shape) < 0.05
        w = np.where(mask, rng.choice(edges, w.shape), w)
        case(f"random-{t}", w, x)
    return {"cases": cases}


def top_seq_vectors(*, params, seed=0):
    """Request events and expected replies of :class:`lowbit.hw.top.Accelerator` with the sequencer.

    Over the host link: write a BFP layer (weights, input, bias) and a LUT table, then programs
    written with ``MEM_WRITE`` and started with ``RUN``: LOADW, CONFIG, MATVEC with bias, LUT
    and HALT in nearest rounding with a fixed output exponent; the same layer in stochastic
    rounding with the maximum exponent (PRNG seeded by the host); a run stopped by its
    instruction limit and one stopped by an instruction with a bad address. Then ``MEM_READ``
    of the results. Expected replies are :class:`lowbit.sim.link.DeviceModel`'s with the same
    ``params``; events of ``RUN`` have ``"run": True`` (the reply's last 4 payload bytes,
    ``cycles``, are 0 in the model).
    """
    from lowbit.sim.network import pack_elements
    from lowbit.sim.program import Instruction as I
    from lowbit.sim.program import assemble

    rng = np.random.default_rng(seed)
    model = DeviceModel(**params)
    reg = {r.name: r.index for r in REGISTERS}
    n, b = params["matrix_lanes"], params["block"]
    events = []

    def send(opcode, payload=b"", **extra):
        request = encode_request(opcode, payload)
        events.append({"send": list(request), "reply": list(model.feed(request)), **extra})

    def write(word, data):
        data = bytes(data)
        step = params["frame_bytes"] - 4
        for k in range(0, len(data), step):
            send(Opcode.MEM_WRITE, mem_write_payload(2 * word + k, data[k:k + step]))

    def put(word, words):
        write(word, np.asarray(words, dtype="<u2").tobytes())

    def run(word, limit=1000):
        send(Opcode.RUN, int(2 * word).to_bytes(4, "little") + limit.to_bytes(4, "little"),
             run=True)

    tiles, nb = 2, 2
    rows, cols = tiles * n, nb * b
    w_m = rng.integers(-128, 128, (rows, cols))
    w_e = np.repeat(rng.integers(-6, 2, (rows, nb)), b, axis=1)
    wsrc = pack_elements(w_m, w_e).reshape(tiles, n, cols).transpose(0, 2, 1).reshape(-1)
    prog1, prog2, prog3, ws, xa, ba, ya, za, y2, z2 = (0, 64, 96, 128, 200, 216, 232, 248,
                                                      264, 280)
    put(ws, wsrc)
    put(xa, pack_elements(rng.integers(-128, 128, cols), np.repeat(rng.integers(-5, 3, nb), b)))
    put(ba, pack_elements(rng.integers(-128, 128, rows), rng.integers(-4, 3, rows)))
    table = rng.integers(0, 256, 256).astype(np.uint8).tobytes()
    for start in (0, 128):
        send(Opcode.LUT_WRITE, bytes([1, start]) + table[start:start + 128])
    send(Opcode.REG_WRITE, reg_write_payload(reg["FIXED_EXP"], (-3) & 0xFF))
    put(ya, np.full(rows + 8, 0xBEEF))
    write(prog1, assemble([
        I.loadw(ws, 0, tiles * cols), I.config(reg["MANT_WIDTH"], 7),
        I.config(reg["ROUNDING"], 0), I.config(reg["EXP_SELECT"], 1),
        I.matvec(xa, ya, 0, nb, tiles, bias=ba), I.config(reg["LUT_SELECT"], 1),
        I.config(reg["LUT_EXP"], 0x85), I.lut(ya, za, rows), I.halt()]))
    run(prog1)
    for k, value in enumerate(rng.integers(0, 1 << 32, 4, dtype=np.uint64)):
        send(Opcode.REG_WRITE, reg_write_payload(reg[f"PRNG_SEED{k}"], int(value)))
    write(prog2, assemble([
        I.config(reg["ROUNDING"], 2), I.config(reg["EXP_SELECT"], 0),
        I.matvec(xa, y2, 0, nb, tiles, bias=ba), I.lut(y2, z2, rows), I.halt()]))
    run(prog2)
    write(prog3, assemble([I.config(reg["MANT_WIDTH"], 6), I.lut(ya, ya, rows),
                           I.move(ya, 0x7FFF, 4), I.halt()]))
    run(prog3, limit=1)                                   # LIMIT after one instruction
    run(prog3)                                            # BAD_ADDRESS at the MOVE
    send(Opcode.MEM_READ, mem_read_payload(2 * xa, 2 * (z2 + rows - xa)))
    send(Opcode.REG_READ, reg_read_payload(reg["MANT_WIDTH"]))
    return {"events": events, "scratch": list(model.scratch)}
