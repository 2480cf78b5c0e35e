# amaranth: UnusedElaboratable=no
"""Formal properties of the blocks with SymbiYosys (DESIGN §6 level 4).

Every proof in ``tests/formal/properties.py`` (:data:`PROOFS`) is emitted as RTLIL with its
``.sby`` script and run with ``yowasp-sby`` and the yices SMT solver; mode (k-induction or
bounded model check) and depth are listed in ``docs/verification.md``. A broken stream, on which
the same stream-rule harness must fail, shows that the rule can fail.

The end of the file holds the property-based (hypothesis) test of the host protocol at the
driver level: random commands and corrupted requests, checked against
``lowbit.sim.link.DeviceModel``.
"""

import os
import sys
from pathlib import Path

import pytest
from amaranth.hdl import Elaboratable, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "formal"))

import sby  # noqa: E402
from properties import PROOFS, _HandlerContract, _History, free_ports, stream_rules  # noqa: E402

from lowbit.hw.link import CommandSignature  # noqa: E402

MISSING = sby.missing_tools()
# Skips without the tools, fails under CI=true (tests/conftest.py: missing_tool).
needs_sby = pytest.mark.needs_tools(MISSING and f"formal tests cannot run: {MISSING}")


def _cases():
    for name, proof in PROOFS.items():
        marks = [pytest.mark.slow] if proof.slow else []
        yield pytest.param(name, proof, id=name, marks=marks)


@needs_sby
@pytest.mark.parametrize("name,proof", list(_cases()))
def test_proof(tmp_path, name, proof):
    path = sby.write_task(name, proof.harness(), proof.mode, proof.depth, tmp_path)
    ok, log = sby.run_task(path)
    assert ok, f"{name}: SymbiYosys did not pass\n{log[-4000:]}"
    if proof.mode == "prove":
        assert "successful proof by k-induction" in log
    if proof.mode == "cover":
        assert "Reached cover statement" in log and "Unreached cover" not in log


class _EagerSource(wiring.Component):
    """Drops ``valid`` every other cycle whether or not the payload was taken (a rule breaker)."""
    o: Out(stream.Signature(8))

    def elaborate(self, platform):
        m = Module()
        count = Signal(8)
        m.d.sync += [self.o.valid.eq(~self.o.valid), count.eq(count + 1)]
        m.d.comb += self.o.payload.eq(count)
        return m


class _BrokenHarness(Elaboratable):
    def __init__(self):
        self.dut = _EagerSource()
        self.ports = free_ports(self.dut)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = self.dut
        stream_rules(m, _History(m), self.dut.o, "broken")
        return m


@needs_sby
def test_stream_rule_catches_a_broken_stream(tmp_path):
    path = sby.write_task("broken", _BrokenHarness(), "bmc", 6, tmp_path)
    ok, log = sby.run_task(path)
    assert not ok and "DONE (FAIL" in log
    # The failing assertion is the "valid dropped" one of stream_rules.
    source = (Path(sby.__file__).parent / "properties.py").read_text()
    line = source[:source.index("valid dropped before ready")].count("\n") + 1
    assert "failed assertion top._witness_" in log and f"properties.py:{line}" in log


class _ChattyHandler(wiring.Component):
    """Answers every command with a 1-byte reply, then sends two bytes (a contract breaker)."""
    command: In(CommandSignature())

    def elaborate(self, platform):
        m = Module()
        c = self.command
        sent = Signal(2)
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += c.cmd.ready.eq(1)
                with m.If(c.cmd.valid):
                    m.next = "RESP"
            with m.State("RESP"):
                m.d.comb += [c.resp.valid.eq(1), c.resp.payload.length.eq(1)]
                with m.If(c.resp.ready):
                    m.d.sync += sent.eq(0)
                    m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += c.data.valid.eq(1)
                with m.If(c.data.ready):
                    m.d.sync += sent.eq(sent + 1)
                    with m.If(sent == 1):
                        m.next = "IDLE"
        return m


class _ChattyHarness(Elaboratable):
    def __init__(self):
        self.dut = _ChattyHandler()
        self.ports = free_ports(self.dut)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = self.dut
        _HandlerContract(m, _History(m), self.dut.command, "chatty", max_length=4)
        return m


@needs_sby
def test_handler_contract_catches_an_extra_byte(tmp_path):
    path = sby.write_task("chatty", _ChattyHarness(), "bmc", 8, tmp_path)
    ok, log = sby.run_task(path)
    assert not ok and "DONE (FAIL" in log
    source = (Path(sby.__file__).parent / "properties.py").read_text()
    line = source[:source.index("Assert(self.answered & (self.owed != 0)")].count("\n") + 1
    assert f"properties.py:{line}" in log


def test_proof_table():
    assert set(p.mode for p in PROOFS.values()) <= {"prove", "bmc", "cover"}
    for name, proof in PROOFS.items():
        assert proof.depth >= 4, name
        harness = proof.harness()
        assert harness.ports, name


# --- Property-based test of the host protocol at the driver level ---------------------------------
# Random commands through the host driver to the simulated top (the real gateware, byte level),
# some with a corrupted request. A tee between driver and device feeds every request, exactly as
# sent (corruption included), to lowbit.sim.link.DeviceModel: each reply must equal the model's
# byte for
# byte, the driver must raise exactly when the model's status is an error, and at the end the
# top's scratchpad (read back through the driver) must equal the model's.

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from lowbit.boards.driver import Accelerator, BadCRC, StatusError  # noqa: E402
from lowbit.sim.link import REGISTERS, DeviceModel, Status  # noqa: E402

DRIVER_PARAMS = dict(scratch_bytes=128, frame_bytes=32, timeout_bits=20)


class _TeePort:
    """Forwards the driver's bytes to the device, optionally flipping one bit of a request in
    a byte that keeps the frame length (opcode, payload or CRC), and records the model's
    reply to exactly those bytes."""

    def __init__(self, port, model):
        self.port, self.model = port, model
        self.flip = None
        self.expected = bytearray()
        self.received = bytearray()

    def write(self, data):
        data = bytearray(data)
        if self.flip is not None:
            where, bit = self.flip
            positions = [1] + list(range(4, len(data)))
            data[positions[where % len(positions)]] ^= 1 << bit
            self.flip = None
        self.expected += self.model.feed(bytes(data))
        return self.port.write(bytes(data))

    def read(self, n=1):
        data = self.port.read(n)
        self.received += data
        return data

    def reset_input_buffer(self):
        self.port.reset_input_buffer()

    def close(self):
        self.port.close()


@pytest.fixture(scope="module")
def tee_driver():
    acc = Accelerator.simulated(check=False, **DRIVER_PARAMS)
    model = DeviceModel(scratch_bytes=DRIVER_PARAMS["scratch_bytes"],
                        frame_bytes=DRIVER_PARAMS["frame_bytes"])
    acc.port = tee = _TeePort(acc.port, model)
    acc.identify()
    yield acc, tee, model
    acc.close()


_SIZE = DRIVER_PARAMS["scratch_bytes"]
_REG_INDICES = [r.index for r in REGISTERS] + [0x08, 0x30]
_corrupt = st.one_of(st.none(), st.tuples(st.integers(0, 40), st.integers(0, 7)))
_commands = st.lists(st.one_of(
    st.tuples(st.just("write"), st.integers(0, _SIZE + 4),
              st.binary(min_size=0, max_size=DRIVER_PARAMS["frame_bytes"] - 4), _corrupt),
    st.tuples(st.just("read"), st.integers(0, _SIZE + 4),
              st.integers(0, DRIVER_PARAMS["frame_bytes"]), _corrupt),
    st.tuples(st.just("write_reg"), st.sampled_from(_REG_INDICES),
              st.integers(0, (1 << 32) - 1), _corrupt),
    st.tuples(st.just("read_reg"), st.sampled_from(_REG_INDICES), st.none(), _corrupt),
), min_size=1, max_size=6)


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(commands=_commands)
def test_driver_protocol_property(tee_driver, commands):
    acc, tee, model = tee_driver
    for op, a, b, corrupt in commands:
        tee.flip = corrupt
        tee.expected.clear()
        tee.received.clear()
        before = bytes(model.scratch)
        method = {"write": acc.write_mem, "read": acc.read_mem, "write_reg": acc.write_reg,
                  "read_reg": acc.read_reg}[op]
        try:
            result = method(a) if op == "read_reg" else method(a, b)
            error = None
        except StatusError as e:
            error = e
        # The device's reply is the model's reply to the very bytes sent, byte for byte.
        assert bytes(tee.received) == bytes(tee.expected), (op, a, b, corrupt)
        if not tee.expected:                          # an empty transfer sends no frame
            assert error is None and op in ("write", "read") and not b
            continue
        status = tee.expected[1]
        if error is None:
            assert status == Status.OK
            if op == "read":
                assert result.tobytes() == bytes(model.scratch[a:a + b])
            elif op == "read_reg":
                assert result == int.from_bytes(tee.expected[4:8], "little")
        else:
            assert error.status == status != Status.OK
            if isinstance(error, BadCRC):
                assert corrupt is not None
            assert bytes(model.scratch) == before            # a failed command changes nothing
    # The driver's view of the whole scratchpad equals the model's.
    assert acc.read_mem(0, _SIZE).tobytes() == bytes(model.scratch)
