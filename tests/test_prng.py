"""xoroshiro128aox: golden model (lowbit.sim.prng) and gateware (lowbit.hw.prng), bit for bit."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from lowbit.hw.prng import Xoroshiro128aox as PrngRTL
from lowbit.hw.registry import build_block
from lowbit.sim.prng import (
    MASK64,
    Xoroshiro128aox,
    load_state,
    rotl64,
    seed_lanes,
    splitmix64_next,
    xoroshiro128aox_next,
    xoroshiro128aox_output,
)
from lowbit.sim.rtl.harness import run_stream


def scalar_words(state, n):
    """Reference: the published update, one Python-int step at a time."""
    lanes = [(int(a), int(b)) for a, b in state]
    rows = []
    for _ in range(n):
        row = []
        for k, (s0, s1) in enumerate(lanes):
            out, s0, s1 = xoroshiro128aox_next(s0, s1)
            lanes[k] = (s0, s1)
            row.append(out)
        rows.append(row)
    return np.array(rows, dtype=np.uint64), lanes


# -- golden model --------------------------------------------------------------------------------

def test_step_formula():
    # The DESIGN §3.1 formulas written out independently of lowbit.sim.prng's helpers.
    s0, s1 = 0x0123456789ABCDEF, 0xFEDCBA9876543210

    def rotl(x, k):
        return ((x << k) | (x >> (64 - k))) & MASK64
    sx, sa = s0 ^ s1, s0 & s1
    assert xoroshiro128aox_next(s0, s1) == (
        sx ^ (rotl(sa, 1) | rotl(sa, 2)),
        rotl(s0, 55) ^ sx ^ ((sx << 14) & MASK64),
        rotl(sx, 36))
    assert xoroshiro128aox_output(s0, s1) == sx ^ (rotl(sa, 1) | rotl(sa, 2))
    assert rotl64(1 << 63, 1) == 1


def test_splitmix64_reference():
    # The reference splitmix64 stream from counter 0.
    x, words = 0, []
    for _ in range(3):
        w, x = splitmix64_next(x)
        words.append(w)
    assert words == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]


def test_seed_lanes_rule():
    st = seed_lanes(0, 2)
    assert st.dtype == np.uint64 and st.shape == (2, 2)
    # splitmix64 words 0..3 from counter 0, with bit 0 of s1 set (load rule).
    assert [int(x) for x in st.ravel()] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F5,
                                            0x06C45D188009454F, 0xF88BB8A8724C81ED]
    assert np.array_equal(load_state(st), st)
    for seed in (0, 1, MASK64, 0x9E3779B97F4A7C15 * 3 & MASK64):
        st = seed_lanes(seed, 16)
        assert np.all(st != 0)
        assert len({(int(a), int(b)) for a, b in st}) == 16
    # The first lanes of a wider seeding are the narrower seeding.
    assert np.array_equal(seed_lanes(5, 8)[:3], seed_lanes(5, 3))


@pytest.mark.parametrize("lanes", [1, 3])
def test_vectorised_take_equals_scalar(lanes):
    gen = Xoroshiro128aox(123, lanes)
    ref, final = scalar_words(gen.state, 3000)
    got = np.concatenate([gen.take(1000), gen.take(7), gen.take(64), gen.take(1929)])
    assert np.array_equal(got, ref)
    assert [(int(a), int(b)) for a, b in gen.state] == final


def test_next_and_take_agree():
    a, b = Xoroshiro128aox(9, 4), Xoroshiro128aox(9, 4)
    rows = np.stack([a.next() for _ in range(300)])
    assert rows.shape == (300, 4) and rows.dtype == np.uint64
    assert np.array_equal(rows, b.take(300))
    assert np.array_equal(a.state, b.state)


def test_bits_are_balanced():
    words = Xoroshiro128aox(2024, 2).take(200_000)
    bits = np.unpackbits(words.view(np.uint8)).reshape(-1, 64).mean(axis=0)
    # 400k samples per bit position: 5 sigma is 0.004.
    assert np.all(np.abs(bits - 0.5) < 0.004)


def test_state_setter():
    gen = Xoroshiro128aox(0, 2)
    gen.state = [[1, 0], [0, 2]]
    assert int(gen.next()[0]) == 1        # aox(s0, 0) = s0
    with pytest.raises(ValueError, match="all-zero"):
        gen.state = [[1, 0], [0, 0]]
    with pytest.raises(ValueError, match="shape"):
        gen.state = [[1, 0]]
    assert np.array_equal(Xoroshiro128aox.from_state([[5, 6]]).state, [[5, 6]])


@pytest.mark.parametrize("seed, exc", [(True, TypeError), (1.0, TypeError), ("1", TypeError),
                                       (-1, ValueError), (1 << 64, ValueError)])
def test_model_seed_validation(seed, exc):
    with pytest.raises(exc, match="Seed must be an integer"):
        Xoroshiro128aox(seed, 1)


@pytest.mark.parametrize("lanes, exc", [(0, ValueError), (2.0, TypeError), (False, TypeError)])
def test_model_lanes_validation(lanes, exc):
    with pytest.raises(exc, match="Lane count must be an integer"):
        seed_lanes(0, lanes)


def test_take_validation():
    with pytest.raises(ValueError):
        Xoroshiro128aox().take(-1)
    assert Xoroshiro128aox(0, 3).take(0).shape == (0, 3)


# -- gateware ------------------------------------------------------------------------------------

@pytest.mark.parametrize("lanes, reset_seed, ready", [(1, 0, 1.0), (3, 77, 0.6), (2, MASK64, 0.3)])
def test_rtl_matches_model(lanes, reset_seed, ready):
    dut = PrngRTL(lanes=lanes, reset_seed=reset_seed)
    out = run_stream(dut, {}, {"o": 400}, ready_prob=ready, seed=lanes)["o"]
    assert np.array_equal(np.array(out, dtype=np.uint64),
                          Xoroshiro128aox(reset_seed, lanes).take(400))


def _state_payload(state):
    return [{"s0": int(a), "s1": int(b)} for a, b in state]


def test_rtl_seed_load_forces_s1_bit0():
    dut = PrngRTL(lanes=3, reset_seed=11)
    new = seed_lanes(4242, 3)
    new[1] = 0                                     # all-zero: loads as (0, 1)
    new[2, 1] &= ~np.uint64(1)                     # bit 0 of s1 clear: set on load

    async def setup(ctx):
        ctx.set(dut.seed, _state_payload(new))
        ctx.set(dut.seed_load, 1)
        await ctx.tick()
        ctx.set(dut.seed_load, 0)

    out = run_stream(dut, {}, {"o": 200}, setup=setup, ready_prob=0.7)["o"]
    expect = load_state(new)
    assert expect[1].tolist() == [0, 1]
    assert np.array_equal(np.array(out, dtype=np.uint64),
                          Xoroshiro128aox.from_state(expect).take(200))


def test_rtl_seed_load_while_streaming_and_lane_order():
    """A word taken in the load cycle ends the old stream; lane k is bits [64k+63:64k]."""
    dut = PrngRTL(lanes=2, reset_seed=3)
    new = np.array([[0x1110, 1], [0x2222, 0]], dtype=np.uint64)
    got = []

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        for cycle in range(12):
            if cycle == 5:
                ctx.set(dut.seed, _state_payload(new))
                ctx.set(dut.seed_load, 1)
            assert ctx.get(dut.o.valid)
            got.append(ctx.get(dut.o.payload.as_value()))
            await ctx.tick()
            ctx.set(dut.seed_load, 0)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    old = Xoroshiro128aox(3, 2).take(6)
    fresh = Xoroshiro128aox.from_state(load_state(new)).take(6)
    expect = np.concatenate([old, fresh])
    assert [[(v >> (64 * k)) & MASK64 for k in range(2)] for v in got] == expect.tolist()
    # aox(s0, 1) = s0 ^ 1 for even s0, aox(s0, 1) = s0 ^ 7 for odd s0.
    assert got[6] == 0x1111 | (0x2223 << 64)


def test_rtl_holds_state_without_ready():
    dut = PrngRTL(lanes=1, reset_seed=0)
    seen = []

    async def bench(ctx):
        for _ in range(4):
            seen.append(ctx.get(dut.o.payload[0]))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [int(Xoroshiro128aox(0, 1).next()[0])] * 4


def test_rtl_per_lane_ready_steps_each_lane_on_its_bit():
    """``per_lane_ready``: lane k steps on ``lane_ready[k]`` alone (``o.ready`` is not read),
    so each lane's words are its stream of the model, taken at its own cycles."""
    dut = PrngRTL(lanes=3, reset_seed=5, per_lane_ready=True)
    assert dut.per_lane_ready and not PrngRTL().per_lane_ready
    assert "lane_ready" not in PrngRTL().signature.members
    rng = np.random.default_rng(2)
    steps = rng.integers(0, 2, (40, 3))
    got = []

    async def bench(ctx):
        ctx.set(dut.o.ready, 0)
        for row in steps:
            ctx.set(dut.lane_ready, int(row[0] | row[1] << 1 | row[2] << 2))
            got.append([ctx.get(dut.o.payload[k]) for k in range(3)])
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    words = Xoroshiro128aox(5, 3).take(41)
    for k in range(3):
        index = np.concatenate([[0], np.cumsum(steps[:-1, k])])
        assert [g[k] for g in got] == words[index, k].tolist()


@pytest.mark.parametrize("kwargs, exc, msg", [
    ({"lanes": 0}, ValueError, "Lane count must be an integer between 1 and 64, not 0"),
    ({"lanes": 65}, ValueError, "Lane count must be an integer between 1 and 64, not 65"),
    ({"lanes": 2.0}, TypeError, "Lane count must be an integer"),
    ({"lanes": True}, TypeError, "Lane count must be an integer"),
    ({"reset_seed": -1}, ValueError, "Reset seed must be an integer between"),
    ({"reset_seed": 1 << 64}, ValueError, "Reset seed must be an integer between"),
    ({"reset_seed": None}, TypeError, "Reset seed must be an integer"),
    ({"per_lane_ready": 1}, TypeError, "^Per-lane ready must be a bool, not 1$"),
])
def test_rtl_validation(kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        PrngRTL(**kwargs)


def test_rtl_properties_and_registry():
    dut = build_block("prng", lanes=4, reset_seed=9)
    assert isinstance(dut, PrngRTL)
    assert dut.lanes == 4 and dut.reset_seed == 9
    assert np.array_equal(dut.reset_state, seed_lanes(9, 4))
    from amaranth.back import verilog
    assert "module prng" in verilog.convert(dut, name="prng")
    assert "module prng" in verilog.convert(build_block("prng"), name="prng")


@pytest.mark.parametrize("n", [64, 65, 128, 256, 4096, 5000])
def test_take_then_take_equals_one_take(n):
    """The state after ``take(n)`` is the state after n words, also when n is a whole number
    of the vectorised path's blocks (a regression: 128 words left a malformed state)."""
    a, b = Xoroshiro128aox(7, 2), Xoroshiro128aox(7, 2)
    first = a.take(n)
    assert np.array_equal(np.concatenate([first, a.take(3)]), b.take(n + 3))
    assert np.array_equal(np.stack([b.next() for _ in range(2)]),
                          np.stack([a.next() for _ in range(2)]))
