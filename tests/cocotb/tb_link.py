"""cocotb bench of ``lowbit_link`` (HostLink): request bytes in, reply bytes out.

The bench plays both neighbours of the link: the host on ``i`` / ``o`` (random valid gaps and
back-pressure) and, on the flattened ``command__*`` ports, a PING handler that accepts each
command, reads all its payload bytes from ``arg``, answers ``OK`` with the same length on
``resp`` and returns the bytes on ``data``. Each event's reply is compared byte for byte with
:class:`lowbit.sim.link.DeviceModel`'s; an event that expects no reply must produce none.
"""

import cocotb
from benchlib import Sink, Source, StreamRuleError, cycle, load_job, read, rng_for, start


class Handler:
    """The PING handler behind ``command``: cmd -> arg bytes -> resp -> data bytes."""

    def __init__(self, dut, rng, prob):
        self.cmd = Sink(dut, "command__cmd", rng, prob)
        self.arg = Sink(dut, "command__arg", rng, prob)
        self.resp = Source(dut, "command__resp", rng, 1.0)
        self.data = Source(dut, "command__data", rng, prob)
        self.phase = "cmd"
        self.length = 0
        self.commands = []
        self.cmd.want = 1 << 30
        self.parts = [self.cmd, self.arg, self.resp, self.data]

    def drive(self):
        self.cmd.want = len(self.cmd.got) + (self.phase == "cmd")
        self.arg.want = len(self.arg.got) + (self.phase == "arg")
        for p in self.parts:
            p.drive()

    def sample(self):
        for p in self.parts:
            p.sample()

    def update(self):
        for p in self.parts:
            p.update()
        if self.phase == "cmd" and self.cmd.got:
            word = self.cmd.got.pop()
            opcode, self.length = word & 0xFF, word >> 8
            self.commands.append((opcode, self.length))
            self.arg.got = []
            self.phase = "arg" if self.length else "resp"
            if not self.length:
                self.resp.queue = [0 | 0 << 8]
        elif self.phase == "arg" and len(self.arg.got) == self.length:
            self.phase = "resp"
            self.resp.queue = [0 | self.length << 8]         # status OK, same length
        elif self.phase == "resp" and self.resp.done:
            self.data.queue = list(self.arg.got)
            self.phase = "data" if self.length else "cmd"
        elif self.phase == "data" and self.data.done:
            self.phase = "cmd"


@cocotb.test()
async def link_frames(dut):
    job = load_job()
    await start(dut, job)
    rng = rng_for(job)
    host = Source(dut, "i", rng, job["valid_prob"])
    reply = Sink(dut, "o", rng, job["ready_prob"])
    handler = Handler(dut, rng, job["ready_prob"])
    parts = [host, reply, handler]
    timeout = job["timeout_cycles"]
    for k, event in enumerate(job["events"]):
        host.queue = list(event.get("send", []))
        reply.got, reply.want = [], 1 << 30
        expected = event["reply"]
        n = quiet = 0
        min_cycles = timeout + 8 if event.get("timeout") else 0
        # Run until the host has sent everything, the reply is complete and the link has been
        # quiet a while (an extra byte would show), or past the timeout for a timeout event.
        while not (host.done and len(reply.got) >= len(expected) and quiet >= 24
                   and n >= min_cycles):
            before = len(reply.got)
            await cycle(dut, parts)
            quiet = quiet + 1 if len(reply.got) == before else 0
            n += 1
            if n > 40 * (len(host.queue) + len(expected)) + 4 * timeout + 400:
                raise AssertionError(f"event {k}: got {len(reply.got)} of {len(expected)} "
                                     f"reply bytes after {n} cycles")
        if reply.got != expected:
            raise AssertionError(f"event {k}: sent {bytes(event.get('send', [])).hex()}, "
                                 f"reply {bytes(reply.got).hex()}, expected "
                                 f"{bytes(expected).hex()}")
        if handler.phase != "cmd":
            raise StreamRuleError(f"event {k}: handler left in phase {handler.phase}")
    assert read(dut.skipped) == job["skipped"], "skipped-byte counter differs from the model"
    assert read(dut.errors) == job["errors"], "error-reply counter differs from the model"
