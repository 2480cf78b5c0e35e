"""Drive stream components in Amaranth's simulator.

This is the simulation helper that gateware tests (and the simulated host transport) build on:

    outputs = run_stream(block, {"i": payloads}, {"o": n_expected})

or, for many jobs through one block, ``StreamBench(block).run(...)`` once per job: the
simulator is built once and reset between jobs.

Every input stream is fed its payloads in order, every output stream is collected until the
expected count arrives. Valid gaps on inputs and back-pressure on outputs are random (seeded), and
every output is checked against the stream rules while it runs: once ``valid`` is asserted it stays
asserted, and the payload stays stable, until ``ready`` takes it. A violation raises
:class:`StreamRuleError`.

Unlike the golden models in :mod:`sim`, this module imports Amaranth.
"""

import random

from amaranth.lib import data
from amaranth.sim import Simulator

__all__ = ["StreamRuleError", "StreamBench", "run_stream", "payload_value"]


class StreamRuleError(AssertionError):
    """An output stream broke the valid/ready handshake rules."""


def payload_value(value):
    """Convert a value read from the simulator into plain Python data.

    Integers stay integers; ``lib.data`` struct views become dicts (recursively); array views
    become lists.
    """
    if isinstance(value, data.Const):
        layout = value.shape()
        if isinstance(layout, data.ArrayLayout):
            return [payload_value(value[i]) for i in range(layout.length)]
        if isinstance(layout, (data.StructLayout, data.UnionLayout)):
            return {name: payload_value(value[name]) for name, _ in layout}
        return value.as_value().value
    if hasattr(value, "value"):
        return value.value
    return int(value)


def _check_probabilities(valid_prob, ready_prob):
    if not (0 < valid_prob <= 1 and 0 < ready_prob <= 1):
        raise ValueError("valid_prob and ready_prob must be in (0, 1]")


def _port(component, name):
    port = getattr(component, name, None)
    if port is None:
        raise ValueError(f"Component {type(component).__name__} has no port {name!r}")
    return port


class StreamBench:
    """A simulator of one component that runs stream jobs (:meth:`run`) one after another.

    Building Amaranth's simulator of a block (elaborating it, preparing its netlist, compiling it
    to Python) costs as much as simulating hundreds of its cycles, and tests stream many jobs
    through one block. A bench builds the simulator once and resets it between jobs
    (``Simulator.reset``: every signal and memory back to its initial value, the clock and the
    testbenches restarted), so every job starts from the state a fresh simulator would.

    Parameters
    ----------
    component : wiring.Component
        The design under test. Its streams are ports named in the jobs' ``inputs`` /
        ``outputs``.
    domain : str
        The clock domain of the streams.
    """

    def __init__(self, component, *, domain="sync"):
        self._component, self._domain = component, domain
        self._sim = Simulator(component)
        self._sim.add_clock(1e-6, domain=domain)
        self._feeding, self._collecting, self._ran = set(), False, False
        self._job = None

    @property
    def component(self):
        return self._component

    def run(self, inputs, outputs, *, setup=None, valid_prob=1.0, ready_prob=1.0, seed=0,
            max_cycles=None, vcd=None):
        """Feed ``inputs`` and collect ``outputs`` from the reset state.

        Parameters
        ----------
        inputs : dict of str to list
            Port name -> payloads to send, in order. A payload is anything ``ctx.set`` accepts
            for the port's payload shape (int, or dict / list for ``lib.data`` layouts).
        outputs : dict of str to int
            Port name -> number of payloads to collect.
        setup : async callable(ctx), optional
            Runs before any stream traffic, e.g. to set configuration ports. It may tick.
        valid_prob, ready_prob : float
            Probability that an input offers a payload / an output accepts one, per cycle.
        seed : int
            Seed of the valid/ready pattern.
        max_cycles : int, optional
            Give up (``TimeoutError``) after this many cycles; default is generous.
        vcd : str, optional
            Write a waveform of this job to this path.

        Returns
        -------
        dict of str to list
            Port name -> collected payloads (plain Python data, see :func:`payload_value`).

        Raises
        ------
        ValueError
            If a probability is outside (0, 1] or a port does not exist.
        StreamRuleError
            If an output drops ``valid`` or changes its payload before it is accepted.
        TimeoutError
            If the expected outputs do not arrive within ``max_cycles``.
        """
        _check_probabilities(valid_prob, ready_prob)
        for name in (*inputs, *outputs):
            _port(self._component, name)
        total = sum(len(v) for v in inputs.values()) + sum(outputs.values())
        if max_cycles is None:
            max_cycles = 1000 + int(20 * total / min(valid_prob, ready_prob))
        self._job = _Job({n: list(v) for n, v in inputs.items()}, dict(outputs), setup,
                         valid_prob, ready_prob, seed, max_cycles)
        if self._ran:
            self._sim.reset()
        for name in inputs:
            if name not in self._feeding:
                self._sim.add_testbench(self._feeder(name), background=True)
                self._feeding.add(name)
        if not self._collecting:
            self._sim.add_testbench(self._collector)
            self._collecting = True
        self._ran = True
        if vcd:
            with self._sim.write_vcd(vcd):
                _with_stack_room(self._sim.run)
        else:
            _with_stack_room(self._sim.run)
        return self._job.collected

    # The testbenches read the current job: they are added once and restart with every reset.
    # They set a port only when its value changes: each ``ctx.set`` makes the simulator settle
    # the design once more. Valid stays high from one payload to the next unless a gap comes
    # between them; the random draws are those of setting it every time.
    def _feeder(self, name):
        port, domain = _port(self._component, name), self._domain

        async def feeder(ctx):
            job = self._job
            if name not in job.inputs:
                return
            while not job.setup_done:
                await ctx.tick(domain)
            valid = False
            for payload in job.inputs[name]:
                while job.rng.random() >= job.valid_prob:
                    if valid:
                        ctx.set(port.valid, 0)
                        valid = False
                    await ctx.tick(domain)
                ctx.set(port.payload, payload)
                if not valid:
                    ctx.set(port.valid, 1)
                    valid = True
                await ctx.tick(domain).until(port.ready)
            if valid:
                ctx.set(port.valid, 0)
        return feeder

    async def _collector(self, ctx):
        job, domain = self._job, self._domain
        outputs, collected, rng = job.outputs, job.collected, job.rng
        out_ports = {name: _port(self._component, name) for name in outputs}
        if job.setup is not None:
            await job.setup(ctx)
        job.setup_done = True
        pending = {name: None for name in out_ports}
        ready = {name: None for name in out_ports}
        for _ in range(job.max_cycles):
            if all(len(collected[n]) >= outputs[n] for n in outputs):
                return
            accept = {}
            for name, port in out_ports.items():
                accept[name] = (len(collected[name]) < outputs[name]
                                and rng.random() < job.ready_prob)
                if accept[name] != ready[name]:
                    ready[name] = accept[name]
                    ctx.set(port.ready, accept[name])
            # Sample just before the edge: these are the values the DUT's handshake sees.
            sampled = {}
            for name, port in out_ports.items():
                valid = ctx.get(port.valid)
                sampled[name] = (valid, payload_value(ctx.get(port.payload)) if valid else None)
            await ctx.tick(domain)
            for name in out_ports:
                valid, payload = sampled[name]
                if pending[name] is not None:
                    if not valid:
                        raise StreamRuleError(f"{name}: valid dropped before the payload "
                                              f"{pending[name]!r} was accepted")
                    if payload != pending[name]:
                        raise StreamRuleError(f"{name}: payload changed from {pending[name]!r} "
                                              f"to {payload!r} while waiting for ready")
                if valid and accept[name]:
                    collected[name].append(payload)
                    pending[name] = None
                elif valid:
                    pending[name] = payload
            # (valid, payload) are compared in the next iteration's sample of this cycle.
        raise TimeoutError(f"{type(self._component).__name__}: expected {outputs}, got "
                           f"{ {n: len(v) for n, v in collected.items()} } "
                           f"after {job.max_cycles} cycles")


class _Job:
    def __init__(self, inputs, outputs, setup, valid_prob, ready_prob, seed, max_cycles):
        self.inputs, self.outputs, self.setup = inputs, outputs, setup
        self.valid_prob, self.ready_prob = valid_prob, ready_prob
        self.rng = random.Random(seed)
        self.max_cycles = max_cycles
        self.collected = {name: [] for name in outputs}
        self.setup_done = setup is None


_BALLAST = []


def _with_stack_room(call):
    """``call()`` from a frame of 65,536 locals (512 KiB, never written: about 0.3 ms).

    The simulator runs a block as Python functions with a local per signal (8 KiB and more for
    a lane-parallel block). CPython 3.11 keeps frames in 16 KiB chunks: a frame that does not
    fit in the current chunk gets a chunk of its own, mapped when the frame is entered and
    unmapped when it returns. When the stack happens to end near a chunk's end, as it does under
    pytest-xdist, that is every simulated cycle (the quantiser's f16 tests: 1.2 million page
    faults, 7x the CPU time). This frame starts a chunk of 1 MiB whose other half holds the
    simulator's frames."""
    if not _BALLAST:
        names = " = ".join(f"_{k}" for k in range(1 << 16))
        namespace = {}
        exec(f"def ballast(call):\n    if False:\n        {names} = None\n    return call()\n",
             namespace)
        _BALLAST.append(namespace["ballast"])
    return _BALLAST[0](call)


def run_stream(component, inputs, outputs, *, setup=None, valid_prob=1.0, ready_prob=1.0,
               seed=0, max_cycles=None, vcd=None, domain="sync"):
    """Simulate ``component``, feed ``inputs`` and collect ``outputs``: one job on a
    :class:`StreamBench` of its own (see :meth:`StreamBench.run` for the arguments, the result
    and the errors)."""
    _check_probabilities(valid_prob, ready_prob)       # before building the simulator
    return StreamBench(component, domain=domain).run(
        inputs, outputs, setup=setup, valid_prob=valid_prob, ready_prob=ready_prob, seed=seed,
        max_cycles=max_cycles, vcd=vcd)
