"""Generic cocotb bench for stream blocks: phases of inputs, expected outputs and port settings.

The job (see ``cocotb_runner.stream_spec``) lists phases; each sets configuration ports, feeds
its input streams with random valid gaps, collects its output streams with random back-pressure
and compares them with the golden vectors bit for bit.
"""

import cocotb
from benchlib import Sink, Source, cycle, load_job, rng_for, start
from cocotb.triggers import RisingEdge


@cocotb.test()
async def stream_vectors(dut):
    job = load_job()
    await start(dut, job)
    rng = rng_for(job)
    sinks = {}
    for k, phase in enumerate(job["phases"]):
        for port, value in phase["set"].items():
            getattr(dut, port).value = value
        sources = []
        for port, payloads in phase["inputs"].items():
            src = Source(dut, port, rng, job["valid_prob"])
            src.queue = list(payloads)
            sources.append(src)
        for sink in sinks.values():
            sink.forget()
        active = []
        for port, expected in phase["outputs"].items():
            sink = sinks.setdefault(port, Sink(dut, port, rng, job["ready_prob"]))
            sink.got, sink.want = [], len(expected)
            active.append(sink)
        idle = [s for p, s in sinks.items() if p not in phase["outputs"]]
        for s in idle:
            s.want = len(s.got)            # never ready
        parts = sources + active + idle
        total = sum(len(s.queue) for s in sources) + sum(s.want for s in active)
        limit = job.get("max_cycles") or 1000 + 30 * total
        n = 0
        while not (all(s.done for s in sources) and all(s.done for s in active)):
            await cycle(dut, parts)
            n += 1
            assert n < limit, f"phase {k}: timed out after {n} cycles"
        for src in sources:
            src.valid.value = 0
        for s in sinks.values():
            s.ready.value = 0
        for port, expected in phase["outputs"].items():
            got = sinks[port].got
            bad = [j for j, (g, e) in enumerate(zip(got, expected, strict=True)) if g != e]
            assert not bad, (f"phase {k} {port}: {len(bad)} of {len(expected)} beats differ, "
                             f"first #{bad[0]}: got {got[bad[0]]:#x}, expected "
                             f"{expected[bad[0]]:#x}")
        for _ in range(phase["ticks"]):
            await RisingEdge(dut.clk)
