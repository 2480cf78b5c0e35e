"""A test-side backdoor into the scratchpad of a top in Amaranth's simulator.

The byte link takes a request byte every 2-3 cycles and MEM_READ sends one every 3, and
Amaranth's simulator costs the same for every cycle of the top: a 2 KB scratchpad image costs
about 6,300 cycles each way (seconds of CPU) through MEM_WRITE and MEM_READ. Tests whose point
is what the sequencer or an engine does with the data, not how the data crossed the link, load
their inputs and read their results here instead, straight from the simulator's state of the
scratchpad's memory (16-bit words; byte ``2w`` is the low byte of word ``w``, as MEM_WRITE and
MEM_READ address it).

The link's own path stays proven end to end: ``test_sequencer.py::test_backdoor_equals_the_link``
writes and reads a whole random image through MEM_WRITE and MEM_READ and checks that this
backdoor sees the same words in both directions, and the link, top and driver tests move
memory only through the link.
"""

import numpy as np
from amaranth.hdl import Shape, unsigned

from lowbit.hw.top import SPRAM_BYTES
from lowbit.hw.top import Scratchpad as _Scratchpad

__all__ = ["Scratchpad", "FastMemoryPort"]

#: Words of one UP5K SB_SPRAM256KA (``lowbit.hw.top.SPRAM256KA``).
SPRAM_WORDS = SPRAM_BYTES // 2


class Scratchpad:
    """The scratchpad words of a :class:`lowbit.sim.rtl.transport.SimulatedSerial` (Amaranth
    simulator) read and written without simulated cycles: the block-RAM scratchpad
    (``top.scratch.mem``, or ``top.scratch.bankK`` with its read register) or the UP5K SPRAM
    banks' behavioural models (``top.scratch.spramK.mem``, 16384 words each, word ``w`` in bank
    ``w >> 14``).

    Use it only while the top is idle (between a reply and the next request): a write is
    queued in the simulator's memory state as a write port's would be, and committed by the
    next simulated step, which :meth:`write` takes (one cycle)."""

    def __init__(self, port):
        sim = getattr(port, "_sim", None)
        if sim is None:
            raise TypeError("The backdoor needs a port in Amaranth's simulator")
        mems = {info.name: frag._data for frag, info in sim._design.fragments.items()
                if hasattr(frag, "_data")}
        self.words = port.top.scratch_bytes // 2
        if ("top", "scratch", "mem") in mems:
            banks = [mems["top", "scratch", "mem"]]
            self._bank_words = self.words
        elif ("top", "scratch", "bank0") in mems:
            # The scratchpad's ``read_register`` banks (lowbit.hw.top.Scratchpad).
            self._bank_words = min(self.words, _Scratchpad.REGISTER_BANK_WORDS)
            banks = [mems.get(("top", "scratch", f"bank{k}"))
                     for k in range(self.words // self._bank_words)]
        else:
            banks = [mems.get(("top", "scratch", f"spram{k}", "mem"))
                     for k in range(-(-self.words // SPRAM_WORDS))]
            self._bank_words = SPRAM_WORDS
        for data in banks:
            if data is None or Shape.cast(data.shape) != unsigned(16) or \
                    data.depth != min(self.words, self._bank_words):
                raise LookupError(f"No scratchpad memory of {self.words} 16-bit words in the "
                                  f"design: {sorted(n for n in mems if 'scratch' in n)}")
        state = sim._engine._state
        self.port = port
        self._banks = [state.slots[state.get_memory(data)] for data in banks]

    def write(self, word_addr, words):
        """Store ``words`` (16-bit values) from word ``word_addr`` on."""
        words = [int(v) for v in np.asarray(words, dtype=np.int64).reshape(-1)]
        self._check(word_addr, len(words))
        for k, value in enumerate(words):
            if not 0 <= value < 1 << 16:
                raise ValueError(f"Not a 16-bit word: {value}")
            bank, addr = divmod(word_addr + k, self._bank_words)
            self._banks[bank].write(addr, value)
        self.port.idle(1)                  # the simulator commits the queued writes
        assert not any(bank.write_queue for bank in self._banks)

    def read(self, word_addr, n):
        """``n`` words from word ``word_addr`` as an int64 array."""
        self._check(word_addr, n)
        assert not any(bank.write_queue for bank in self._banks)
        return np.array([self._banks[w // self._bank_words].read(w % self._bank_words)
                         for w in range(word_addr, word_addr + n)], dtype=np.int64)

    def _check(self, word_addr, n):
        if not 0 <= word_addr <= word_addr + n <= self.words:
            raise IndexError(f"Words {word_addr}..{word_addr + n} outside the scratchpad of "
                             f"{self.words}")

    def write_bytes(self, byte_addr, data):
        """Store ``data`` from the even byte address ``byte_addr`` on (an even length)."""
        data = bytes(data)
        if byte_addr % 2 or len(data) % 2:
            raise ValueError("The backdoor moves whole words: even address and length")
        self.write(byte_addr // 2, np.frombuffer(data, dtype="<u2"))

    def read_bytes(self, byte_addr, n):
        """``n`` bytes from the even byte address ``byte_addr`` on (an even count)."""
        if byte_addr % 2 or n % 2:
            raise ValueError("The backdoor moves whole words: even address and length")
        return self.read(byte_addr // 2, n // 2).astype("<u2").tobytes()


class FastMemoryPort:
    """A :class:`lowbit.sim.rtl.transport.SimulatedSerial` whose valid MEM_WRITE and MEM_READ
    requests are answered through the :class:`Scratchpad` backdoor, without simulated cycles;
    every other request (and a MEM_WRITE or MEM_READ the device would refuse, or any bytes that
    are not one whole request frame) goes through the link as before.

    For driver-level tests whose point is what the top computes (a network's outputs, the
    cycles of its RUNs, which the RUN replies carry and the fast path does not change), not the
    link carrying the weights and images: the driver (``lowbit.boards.driver.Accelerator``)
    runs unchanged on top of it. ``fast`` counts the requests answered here."""

    def __init__(self, port):
        from lowbit.sim import link
        self._link = link
        self.port = port
        self.mem = Scratchpad(port)
        self.size = port.top.scratch_bytes
        self.frame_bytes = port.top.frame_bytes
        self.fast = 0
        #: False: every request goes through the link.
        self.enabled = True
        self._rx = bytearray()

    def _answer(self, data):
        L = self._link
        if len(data) < 6 or data[0] != L.SOF_REQUEST:
            return None
        opcode, payload = data[1], data[4:-2]
        if opcode not in (L.Opcode.MEM_WRITE, L.Opcode.MEM_READ) or \
                data != L.encode_request(opcode, payload) or len(payload) > self.frame_bytes:
            return None
        addr = int.from_bytes(payload[0:4], "little")
        if opcode == L.Opcode.MEM_READ:
            if len(payload) != 6:
                return None
            count = int.from_bytes(payload[4:6], "little")
        else:
            count = len(payload) - 4
        if not (0 < count <= self.frame_bytes and addr + count <= self.size):
            return None
        # Whole words around the bytes (the scratchpad's words are little-endian byte pairs).
        lo, hi = addr & ~1, (addr + count + 1) & ~1
        image = bytearray(self.mem.read_bytes(lo, hi - lo))
        if opcode == L.Opcode.MEM_READ:
            return L.encode_reply(L.Status.OK, bytes(image[addr - lo:addr - lo + count]))
        image[addr - lo:addr - lo + count] = payload[4:]
        self.mem.write_bytes(lo, image)
        return L.encode_reply(L.Status.OK)

    def write(self, data):
        data = bytes(data)
        reply = self._answer(data) if self.enabled else None
        if reply is None:
            return self.port.write(data)
        self.fast += 1
        self._rx += reply
        return len(data)

    def read(self, n=1, timeout_cycles=None):
        if self._rx:
            out = bytes(self._rx[:n])
            del self._rx[:n]
            return out
        return self.port.read(n, timeout_cycles)

    @property
    def in_waiting(self):
        return len(self._rx) + self.port.in_waiting

    def reset_input_buffer(self):
        self._rx.clear()
        self.port.reset_input_buffer()

    def __getattr__(self, name):
        return getattr(self.port, name)
