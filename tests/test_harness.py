"""The stream harness every gateware test stands on (lowbit.sim.rtl.harness.run_stream and the
reusable StreamBench under it).

Its own negative controls: an output that drops ``valid`` or changes its payload before
``ready`` fails with :class:`StreamRuleError`, one that never answers with ``TimeoutError``; a
correct block passes under random valid gaps and back-pressure, payloads in order.
"""

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from lowbit.sim.rtl.harness import StreamBench, StreamRuleError, run_stream


class _Passthrough(wiring.Component):
    """A two-entry FIFO between ``i`` and ``o``: a correct stream block."""

    i: In(stream.Signature(8))
    o: Out(stream.Signature(8))

    def elaborate(self, platform):
        m = Module()
        m.submodules.q = q = fifo.SyncFIFOBuffered(width=8, depth=2)
        m.d.comb += [q.w_data.eq(self.i.payload), q.w_en.eq(self.i.valid),
                     self.i.ready.eq(q.w_rdy),
                     self.o.payload.eq(q.r_data), self.o.valid.eq(q.r_rdy), q.r_en.eq(self.o.ready)]
        return m


class _Counter(wiring.Component):
    """Offers 0, 1, 2, ... on ``o``; ``fault`` breaks the stream rules while ``ready`` is low:
    ``"drop"`` lowers ``valid`` every other cycle, ``"change"`` steps the payload anyway,
    ``"mute"`` never raises ``valid``."""

    o: Out(stream.Signature(8))

    def __init__(self, fault=None):
        self._fault = fault
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        count = Signal(8)
        phase = Signal()
        m.d.sync += phase.eq(~phase)
        m.d.comb += [self.o.payload.eq(count), self.o.valid.eq(self._fault != "mute")]
        if self._fault == "drop":
            m.d.comb += self.o.valid.eq(phase | self.o.ready)
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += count.eq(count + 1)
        if self._fault == "change":
            with m.Elif(phase):
                m.d.sync += count.eq(count + 1)
        return m


@pytest.mark.parametrize("valid_prob, ready_prob", [(1.0, 1.0), (0.3, 1.0), (1.0, 0.3),
                                                    (0.5, 0.5)])
def test_payloads_pass_in_order_under_gaps_and_backpressure(valid_prob, ready_prob):
    data = list(range(1, 41))
    out = run_stream(_Passthrough(), {"i": data}, {"o": len(data)}, valid_prob=valid_prob,
                     ready_prob=ready_prob, seed=7)
    assert out == {"o": data}


def test_a_rule_abiding_source_passes_under_backpressure():
    assert run_stream(_Counter(), {}, {"o": 20}, ready_prob=0.4, seed=3) == {"o": list(range(20))}


@pytest.mark.parametrize("fault, match", [("drop", "valid dropped before the payload"),
                                          ("change", "payload changed from")])
def test_broken_stream_rules_fail(fault, match):
    with pytest.raises(StreamRuleError, match=match):
        run_stream(_Counter(fault), {}, {"o": 20}, ready_prob=0.4, seed=3)


def test_missing_outputs_time_out():
    with pytest.raises(TimeoutError, match=r"expected \{'o': 3\}, got \{'o': 0\} after 50 cycles"):
        run_stream(_Counter("mute"), {}, {"o": 3}, max_cycles=50)


def test_bad_arguments():
    with pytest.raises(ValueError, match="valid_prob and ready_prob"):
        run_stream(_Passthrough(), {"i": [1]}, {"o": 1}, valid_prob=0)
    with pytest.raises(ValueError, match="has no port 'x'"):
        run_stream(_Passthrough(), {"x": [1]}, {"o": 1})


def test_a_bench_runs_every_job_from_the_reset_state():
    """Jobs on one StreamBench equal the same jobs each on a fresh simulator: the counter starts
    at 0 again, the seeds give the same gaps, a job without an input stream runs beside one
    with it, and a job that fails (a timeout) leaves the next one unharmed."""
    counter = StreamBench(_Counter())
    fifo_bench = StreamBench(_Passthrough())
    data = list(range(3, 30))
    for seed in (1, 2, 1):
        assert counter.run({}, {"o": 12}, ready_prob=0.5, seed=seed) == \
            run_stream(_Counter(), {}, {"o": 12}, ready_prob=0.5, seed=seed) == \
            {"o": list(range(12))}
        assert fifo_bench.run({"i": data}, {"o": len(data)}, valid_prob=0.6, ready_prob=0.4,
                              seed=seed) == {"o": data}
    assert fifo_bench.run({}, {"o": 0}) == {"o": []}
    mute = StreamBench(_Counter("mute"))
    for _ in range(2):
        with pytest.raises(TimeoutError, match="after 40 cycles"):
            mute.run({}, {"o": 1}, max_cycles=40)
    assert fifo_bench.run({"i": [7, 8]}, {"o": 1}) == {"o": [7]}
    assert fifo_bench.run({"i": [9]}, {"o": 1}) == {"o": [9]}


def test_a_bench_refuses_bad_jobs_and_runs_on():
    bench = StreamBench(_Passthrough())
    with pytest.raises(ValueError, match="valid_prob and ready_prob"):
        bench.run({"i": [1]}, {"o": 1}, ready_prob=1.5)
    with pytest.raises(ValueError, match="has no port 'x'"):
        bench.run({"i": [1]}, {"x": 1})
    assert bench.run({"i": [5]}, {"o": 1}) == {"o": [5]}
