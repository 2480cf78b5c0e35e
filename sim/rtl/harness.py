"""Drive stream components in Amaranth's simulator.

This is the simulation helper that gateware tests (and the simulated host transport) build on:

    outputs = run_stream(block, {"i": payloads}, {"o": n_expected})

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

__all__ = ["StreamRuleError", "run_stream", "payload_value"]


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


def _port(component, name):
    port = getattr(component, name, None)
    if port is None:
        raise ValueError(f"Component {type(component).__name__} has no port {name!r}")
    return port


def run_stream(component, inputs, outputs, *, setup=None, valid_prob=1.0, ready_prob=1.0,
               seed=0, max_cycles=None, vcd=None, domain="sync"):
    """Simulate ``component``, feed ``inputs`` and collect ``outputs``.

    Parameters
    ----------
    component : wiring.Component
        The design under test. Its streams are ports named in ``inputs`` / ``outputs``.
    inputs : dict of str to list
        Port name -> payloads to send, in order. A payload is anything ``ctx.set`` accepts for
        the port's payload shape (int, or dict / list for ``lib.data`` layouts).
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
        Write a waveform to this path.

    Returns
    -------
    dict of str to list
        Port name -> collected payloads (plain Python data, see :func:`payload_value`).

    Raises
    ------
    StreamRuleError
        If an output drops ``valid`` or changes its payload before it is accepted.
    TimeoutError
        If the expected outputs do not arrive within ``max_cycles``.
    """
    if not (0 < valid_prob <= 1 and 0 < ready_prob <= 1):
        raise ValueError("valid_prob and ready_prob must be in (0, 1]")
    rng = random.Random(seed)
    total = sum(len(v) for v in inputs.values()) + sum(outputs.values())
    if max_cycles is None:
        max_cycles = 1000 + int(20 * total / min(valid_prob, ready_prob))
    in_ports = {name: _port(component, name) for name in inputs}
    out_ports = {name: _port(component, name) for name in outputs}
    collected = {name: [] for name in outputs}
    state = {"done": False, "setup": setup is None}

    sim = Simulator(component)
    sim.add_clock(1e-6, domain=domain)

    # The testbenches set a port only when its value changes: each ``ctx.set`` makes the
    # simulator settle the design once more. Valid stays high from one payload to the next
    # unless a gap comes between them; the random draws are those of setting it every time.
    def make_feeder(name, port, payloads):
        async def feeder(ctx):
            while not state["setup"]:
                await ctx.tick(domain)
            valid = False
            for payload in payloads:
                while rng.random() >= valid_prob:
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

    async def collector(ctx):
        if setup is not None:
            await setup(ctx)
        state["setup"] = True
        pending = {name: None for name in out_ports}
        ready = {name: None for name in out_ports}
        for _ in range(max_cycles):
            if all(len(collected[n]) >= outputs[n] for n in outputs):
                state["done"] = True
                return
            accept = {}
            for name, port in out_ports.items():
                accept[name] = len(collected[name]) < outputs[name] and rng.random() < ready_prob
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
        raise TimeoutError(f"{type(component).__name__}: expected {outputs}, got "
                           f"{ {n: len(v) for n, v in collected.items()} } "
                           f"after {max_cycles} cycles")

    for name, port in in_ports.items():
        sim.add_testbench(make_feeder(name, port, list(inputs[name])), background=True)
    sim.add_testbench(collector)
    if vcd:
        with sim.write_vcd(vcd):
            sim.run()
    else:
        sim.run()
    return collected
