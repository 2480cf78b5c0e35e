"""Grand unit gateware (lowbit.hw.grand) against the golden model (lowbit.sim.grand), bit for
bit."""

import numpy as np
import pytest
from amaranth.sim import Simulator
from streams import cached, run_stream

from lowbit.hw.grand import GrandMode, GrandUnit
from lowbit.hw.registry import build_block
from lowbit.sim.grand import (
    MODES,
    WORDS_PER_RESULT,
    GrandModel,
    field_sum,
    normal_f16_bits,
    results_from_words,
)
from lowbit.sim.prng import Xoroshiro128aox, seed_lanes

MODE_OF = dict(zip(MODES, [GrandMode.NORMAL, GrandMode.NORMAL_144, GrandMode.TRUNC_2SIGMA,
                           GrandMode.TRUNC_3SIGMA, GrandMode.UNIFORM, GrandMode.RAW],
                   strict=True))


def state_payload(state):
    return [{"s0": int(a), "s1": int(b)} for a, b in state]


NAME_OF = {v: k for k, v in MODE_OF.items()}


def run_grand(dut, mode, n, *, load_seed=None, ready_prob=1.0, seed=0):
    """``n`` output transfers of ``dut`` in ``mode``: (f16, f32) arrays of shape (n, lanes)."""
    async def setup(ctx):
        if isinstance(mode, str):
            ctx.set(dut.mode, MODE_OF[mode])
        else:                                   # a raw code, possibly not a GrandMode
            ctx.set(dut.mode.as_value(), mode)
        if load_seed is not None:
            ctx.set(dut.seed, state_payload(seed_lanes(load_seed, dut.lanes)))
            ctx.set(dut.seed_load, 1)
            await ctx.tick()
            ctx.set(dut.seed_load, 0)

    out = run_stream(dut, {}, {"o": n}, setup=setup, ready_prob=ready_prob, seed=seed)["o"]
    f16 = np.array([[lane["f16"] for lane in row] for row in out], dtype=np.uint16)
    f32 = np.array([[lane["f32"] for lane in row] for row in out], dtype=np.uint32)
    return f16, f32


def assert_model(got, seed, lanes, mode, n):
    f16, f32 = GrandModel(seed, lanes).generate(mode, n)
    assert np.array_equal(got[0], f16)
    assert np.array_equal(got[1], f32)


# Default run: 2,000 results per mode (480 for normal-144, i.e. 5,760 PRNG words),
# each mode with its own seed and
# back-pressure; the slow run below has 10,000 results per mode and seed.
@pytest.mark.parametrize("mode, lanes, reset_seed, ready, split", [
    # The quick suite: the 8-lane sum of 144 words, and 8 lanes with a stall copy per lane
    # (split_stall, the ULX3S's) under back-pressure; the other modes with -m slow.
    pytest.param("normal", 4, 1, 0.8, False, marks=pytest.mark.slow),
    ("normal144", 8, 2, 1.0, False),
    ("normal", 8, 9, 0.6, True),
    pytest.param("trunc2", 4, 3, 1.0, False, marks=pytest.mark.slow),
    pytest.param("trunc3", 4, 4, 0.9, False, marks=pytest.mark.slow),
    pytest.param("uniform", 4, 5, 0.8, False, marks=pytest.mark.slow),
    pytest.param("raw", 4, 6, 0.8, False, marks=pytest.mark.slow),
])
def test_rtl_equals_model(mode, lanes, reset_seed, ready, split):
    n = (480 if mode == "normal144" else 2_000) // lanes
    got = run_grand(cached(GrandUnit, lanes=lanes, reset_seed=reset_seed, split_stall=split),
                    mode, n, ready_prob=ready)
    assert_model(got, reset_seed, lanes, mode, n)


@pytest.mark.slow
@pytest.mark.rotate  # one heavy case a day runs in CI's slow run (tests/conftest.py)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("reset_seed", [
    10, *(pytest.param(s, marks=pytest.mark.heavy) for s in (11, 12))])
def test_rtl_equals_model_10k_slow(mode, reset_seed):
    lanes = 8 if mode == "normal144" else 4
    n = 10_000 // lanes
    got = run_grand(cached(GrandUnit, lanes=lanes, reset_seed=reset_seed), mode, n,
                    ready_prob=0.8, seed=reset_seed)
    assert_model(got, reset_seed, lanes, mode, n)
    if mode in ("trunc2", "trunc3"):
        # The uniform fallback was exercised (about 1 in 540 results: ~18 expected).
        k = WORDS_PER_RESULT[mode]
        ws = Xoroshiro128aox(reset_seed, lanes).take(n * k).reshape(n, k, lanes)
        normals = np.abs(field_sum(ws[:, :k - 1]) - 186)
        fallback = np.all(normals > (64 if mode == "trunc2" else 96), axis=1)
        assert fallback.sum() >= 3


def test_rtl_truncated_fallback_paths():
    """Both fallbacks through the gateware, forced by loading chosen first words."""
    # trunc-3σ: N1 = 3 + 1/32 is out, so the result is U9 + U9 + U9 of the second word, which
    # is the word after the loaded one; the model gives it from the loaded state.
    lanes = 2
    big = _word_with_sum(186 + 97, 3)
    small = _word_with_sum(186 - 96, 5)                # exactly -3: kept
    dut = GrandUnit(lanes=lanes)
    got = _first_results(dut, GrandMode.TRUNC_3SIGMA, [[big, small]])[0]
    gen = Xoroshiro128aox.from_state([state_for_first_word(big), state_for_first_word(small)])
    f16, f32 = results_from_words(gen.take(2), "trunc3")
    assert [(int(a), int(b)) for a, b in zip(f16[0], f32[0], strict=True)] == got
    assert got[1][0] == 0xC200                           # -3.0
    # trunc-2σ: a loadable state whose first two words both give |N| > 2 (found by search).
    d = 1
    while True:
        gen = Xoroshiro128aox.from_state([state_for_first_word(d)])
        n1, n2 = np.abs(field_sum(gen.take(2)[:, 0]) - 186)
        if n1 > 64 and n2 > 64:
            break
        d = (d * 6364136223846793005 + 1442695040888963407) % (1 << 64)
    got = _first_results(GrandUnit(lanes=1), GrandMode.TRUNC_2SIGMA, [[d]])[0]
    gen = Xoroshiro128aox.from_state([state_for_first_word(d)])
    f16, f32 = results_from_words(gen.take(3), "trunc2")
    assert got == [(int(f16[0, 0]), int(f32[0, 0]))]
    value = float(np.uint16(got[0][0]).view(np.float16))
    assert abs(value) <= 2          # both normals are beyond ±2: this is the uniform sum
    assert (float(np.uint16(got[0][0]).view(np.float16)) * 32) % 1 != 0   # a uniform sum


@pytest.mark.parametrize("lanes", [*(pytest.param(n, marks=pytest.mark.slow) for n in (1, 2, 4)),
                                   8])
def test_rtl_lane_counts(lanes):
    got = run_grand(cached(GrandUnit, lanes=lanes, reset_seed=lanes), "normal", 150,
                    ready_prob=0.5, seed=lanes)
    assert_model(got, lanes, lanes, "normal", 150)


@pytest.mark.parametrize("mode", ["normal", *(pytest.param(m, marks=pytest.mark.slow)
                                              for m in ("trunc2", "normal144"))])
def test_rtl_seed_load_at_run_time(mode):
    dut = cached(GrandUnit, lanes=2, reset_seed=0)
    n = 200 // WORDS_PER_RESULT[mode] + 5
    got = run_grand(dut, mode, n, load_seed=0xDEADBEEF, ready_prob=0.6, seed=3)
    assert_model(got, 0xDEADBEEF, 2, mode, n)


def state_for_first_word(d):
    """A state whose first output word is ``d`` under the load rule (s1 = 1).

    With s1 = 1: aox(s0, 1) = s0 ^ 1 if s0 is even, s0 ^ 7 if s0 is odd.
    """
    return (d ^ 1, 1) if d & 1 else (d ^ 7, 1)


def _first_results(dut, mode, lane_words):
    """Load states whose first words are the given ones and read one result per load.

    ``lane_words`` is a list of per-lane word lists; returns the f16/f32 of each load.
    """
    results = []

    async def bench(ctx):
        ctx.set(dut.mode, mode)
        ctx.set(dut.o.ready, 1)
        for ws in lane_words:
            ctx.set(dut.seed, state_payload([state_for_first_word(w) for w in ws]))
            ctx.set(dut.seed_load, 1)
            await ctx.tick()
            ctx.set(dut.seed_load, 0)
            cycles = 0
            while not ctx.get(dut.o.valid):
                await ctx.tick()
                cycles += 1
            # Documented latency: LATENCY + (words per result) cycles after the load cycle.
            latency = GrandUnit.RAW_LATENCY if mode == GrandMode.RAW else GrandUnit.LATENCY
            assert cycles == latency + WORDS_PER_RESULT[NAME_OF[mode]]
            raw = ctx.get(dut.o.payload.as_value())
            results.append([((raw >> (48 * k)) & 0xFFFF, (raw >> (48 * k + 16)) & 0xFFFFFFFF)
                            for k in range(dut.lanes)])

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return results


def _word_with_sum(s, top):
    fields, rem = [], s
    for _ in range(12):
        fields.append(min(31, rem))
        rem -= fields[-1]
    w = top << 60
    for i, f in enumerate(fields):
        w |= f << (5 * i)
    return w


def test_rtl_all_373_sums_top_bits_and_lane_order():
    """Every sum 0..372 through the gateware, with random top nibbles, lanes packed in order."""
    lanes = 8
    rng = np.random.default_rng(7)
    sums = np.concatenate([np.arange(373), np.arange(373)[::-1]])      # each lane sees both
    sums = np.concatenate([sums, np.zeros((-len(sums)) % lanes, dtype=int)]).reshape(-1, lanes)
    words = [[_word_with_sum(int(s), int(rng.integers(1, 16))) for s in row] for row in sums]
    got = _first_results(GrandUnit(lanes=lanes), GrandMode.NORMAL, words)
    f16 = np.array([[h for h, _ in row] for row in got])
    f32 = np.array([[f for _, f in row] for row in got], dtype=np.uint32)
    assert np.array_equal(f16, normal_f16_bits(sums))
    assert np.array_equal(f32, normal_f16_bits(sums).view(np.float16).astype(np.float32)
                          .view(np.uint32))
    assert f16[0, 0] == 0xC5D0 and f32[0, 0] == 0xC0BA0000


@pytest.mark.parametrize("mode", ["trunc2", pytest.param("trunc3", marks=pytest.mark.slow)])
def test_rtl_truncation_range_flags_for_every_sum(mode):
    """The range flags (|n| ≤ 64 for 2σ, ≤ 96 for 3σ) for every stage-C value n = S − 186.

    The first word of a truncated result is loaded with each sum 0..372, twice, in two
    different lanes: where |N1| is in range the result is N1, else the fallback of the words
    after it; both are compared with the model on the loaded generator's words.
    """
    lanes = 8
    rng = np.random.default_rng(11)
    sums = np.concatenate([np.arange(373), np.arange(373)[::-1]])
    sums = np.concatenate([sums, np.zeros((-len(sums)) % lanes, dtype=int)]).reshape(-1, lanes)
    words = [[_word_with_sum(int(s), int(rng.integers(0, 16))) for s in row] for row in sums]
    got = _first_results(GrandUnit(lanes=lanes), MODE_OF[mode], words)
    k = WORDS_PER_RESULT[mode]
    limit = 64 if mode == "trunc2" else 96
    kept = 0
    for row, got_row, sum_row in zip(words, got, sums, strict=True):
        gen = Xoroshiro128aox.from_state([state_for_first_word(w) for w in row])
        f16, f32 = results_from_words(gen.take(k), mode)
        assert [(int(a), int(b)) for a, b in zip(f16[0], f32[0], strict=True)] == got_row
        for s, h in zip(sum_row, f16[0], strict=True):
            if abs(int(s) - 186) <= limit:
                assert h == normal_f16_bits(np.array([s]))[0]       # N1 kept, boundary included
                kept += 1
    assert kept == 2 * (2 * limit + 1) + sum(abs(int(s) - 186) <= limit
                                             for s in sums.ravel()[2 * 373:])


def test_rtl_first_word_in_every_single_word_mode():
    w = [0xF0123456789ABCDE, 0x0FEDCBA987654321]
    for mode in ("normal", "uniform", "raw"):
        got = _first_results(GrandUnit(lanes=2), MODE_OF[mode], [w])[0]
        f16, f32 = results_from_words(np.array([w], dtype=np.uint64), mode)
        assert [(int(a), int(b)) for a, b in zip(f16[0], f32[0], strict=True)] == got


def test_rtl_mode_switch_takes_effect_at_a_result_boundary():
    dut = GrandUnit(lanes=2, reset_seed=21)
    got = []

    async def bench(ctx):
        ctx.set(dut.mode, GrandMode.TRUNC_2SIGMA)
        ctx.set(dut.o.ready, 1)
        for cycle in range(80):
            if cycle == 31:
                ctx.set(dut.mode, GrandMode.NORMAL)
            if ctx.get(dut.o.valid):
                got.append(ctx.get(dut.o.payload.as_value()))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    words = Xoroshiro128aox(21, 2).take(200)
    packed = [[(v >> (48 * k)) & 0xFFFF for k in range(2)] for v in got]
    # Some number j of trunc-2σ results (3 words each), then normal results from word 3j on.
    matches = []
    for j in range(len(packed) + 1):
        a, _ = results_from_words(words[:3 * j], "trunc2")
        b, _ = results_from_words(words[3 * j:], "normal")
        if packed == np.concatenate([a, b])[:len(packed)].tolist():
            matches.append(j)
    assert matches and 5 <= matches[0] <= 12, matches


def test_rtl_invalid_mode_codes_act_as_normal():
    for code in (6, 7):
        got = run_grand(cached(GrandUnit, lanes=2, reset_seed=8), code, 40)
        assert_model(got, 8, 2, "normal", 40)


def test_rtl_seed_load_restarts_while_stalled():
    """seed_load drops a pending result (like a reset); the next ones come from the new state."""
    dut = GrandUnit(lanes=2, reset_seed=1)
    got = []

    async def bench(ctx):
        ctx.set(dut.mode, GrandMode.NORMAL)
        for _ in range(GrandUnit.LATENCY + 3):           # fill the pipeline, stalled
            await ctx.tick()
        assert ctx.get(dut.o.valid)
        ctx.set(dut.seed, state_payload(seed_lanes(99, 2)))
        ctx.set(dut.seed_load, 1)
        await ctx.tick()
        ctx.set(dut.seed_load, 0)
        assert not ctx.get(dut.o.valid)
        ctx.set(dut.o.ready, 1)
        while len(got) < 10:
            if ctx.get(dut.o.valid):
                got.append([ctx.get(dut.o.payload[k].f16) for k in range(2)])
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert np.array_equal(np.array(got), GrandModel(99, 2).generate("normal", 10)[0])


@pytest.mark.parametrize("mode", [GrandMode.NORMAL, GrandMode.UNIFORM, GrandMode.RAW])
def test_rtl_no_bubbles_in_single_word_modes(mode):
    dut = GrandUnit(lanes=2)
    valid = []

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.mode, mode)
        for _ in range(40):
            await ctx.tick()
            valid.append(ctx.get(dut.o.valid))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    latency = GrandUnit.RAW_LATENCY if mode == GrandMode.RAW else GrandUnit.LATENCY
    assert not any(valid[:latency]) and all(valid[latency:])


@pytest.mark.parametrize("before, after", [("normal144", "raw"), ("raw", "trunc3"),
                                           ("uniform", "raw"), ("trunc2", "raw"),
                                           ("raw", "normal144")])
def test_rtl_switch_into_and_out_of_raw_keeps_order(before, after):
    dut = GrandUnit(lanes=2, reset_seed=5)
    got = []

    async def bench(ctx):
        ctx.set(dut.mode, MODE_OF[before])
        for cycle in range(120):
            ctx.set(dut.o.ready, cycle % 3 != 1)
            if cycle == 40:
                ctx.set(dut.mode, MODE_OF[after])
            if ctx.get(dut.o.valid) and ctx.get(dut.o.ready):
                got.append(ctx.get(dut.o.payload.as_value()))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    words = Xoroshiro128aox(5, 2).take(400)
    packed = [[(v >> (48 * k)) & 0xFFFF for k in range(2)] for v in got]
    kb = WORDS_PER_RESULT[before]
    matches = []
    for j in range(len(packed) + 1):
        a, _ = results_from_words(words[:kb * j], before)
        b, _ = results_from_words(words[kb * j:], after)
        if packed == np.concatenate([a, b])[:len(packed)].tolist():
            matches.append(j)
    assert matches and 0 < matches[0] < len(packed), (matches, len(packed))


def _cycle_trace(dut, cycles, seed):
    """``o``'s valid and payload of ``dut`` (two lanes, uniform then normal-144) every cycle,
    under random back-pressure and a seed load between stalls; ``ready`` follows a fixed
    pseudo-random sequence, so two units see the same one."""
    rng = np.random.default_rng(seed)
    ready = rng.random(cycles) < 0.6
    trace = []

    async def bench(ctx):
        ctx.set(dut.mode, GrandMode.UNIFORM)
        for t in range(cycles):
            if t == cycles // 3:
                ctx.set(dut.mode, GrandMode.NORMAL_144)
            # A seed load between two stalls: before it the skid register is full, after it
            # the pipeline refills and its first result waits.
            load = t == cycles // 2
            if load:
                assert ctx.get(dut.o.valid)
                ctx.set(dut.seed, state_payload(seed_lanes(7, 2)))
            ctx.set(dut.seed_load, load)
            ctx.set(dut.o.ready, 0 if cycles // 2 - 20 <= t < cycles // 2 + 40 else int(ready[t]))
            valid = ctx.get(dut.o.valid)
            trace.append((valid, ctx.get(dut.o.payload.as_value()) if valid else None))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return trace


def test_rtl_split_stall_same_transfers_every_cycle():
    """split_stall changes where o's multiplexer reads the skid state, nothing a consumer
    sees: the same valid and payload on every cycle, stalls and a seed load included."""
    plain = _cycle_trace(GrandUnit(lanes=2, reset_seed=3), 600, seed=5)
    split = _cycle_trace(GrandUnit(lanes=2, reset_seed=3, split_stall=True), 600, seed=5)
    assert sum(v for v, _ in plain) > 150       # the run moves results and stalls
    assert split == plain


@pytest.mark.parametrize("kwargs, exc, msg", [
    ({"lanes": 0}, ValueError, "Lane count must be an integer between 1 and 64, not 0"),
    ({"lanes": 65}, ValueError, "Lane count must be an integer between 1 and 64, not 65"),
    ({"lanes": 4.0}, TypeError, "Lane count must be an integer"),
    ({"lanes": True}, TypeError, "Lane count must be an integer"),
    ({"reset_seed": -1}, ValueError, "Reset seed must be an integer between"),
    ({"reset_seed": 1 << 64}, ValueError, "Reset seed must be an integer between"),
    ({"reset_seed": "0"}, TypeError, "Reset seed must be an integer"),
    ({"split_stall": 1}, TypeError, "Split stall must be a bool, not 1"),
])
def test_rtl_validation(kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        GrandUnit(**kwargs)


def test_rtl_registry_and_verilog():
    from amaranth.back import verilog
    dut = build_block("grand", lanes=4, reset_seed=3)
    assert isinstance(dut, GrandUnit) and dut.lanes == 4 and dut.reset_seed == 3
    from amaranth.hdl import Fragment
    Fragment.get(dut, None)                      # elaborates
    assert "module grand" in verilog.convert(build_block("grand"), name="grand")


def test_rtl_modes_parameter():
    dut = GrandUnit(lanes=2, reset_seed=4, modes=["uniform", GrandMode.RAW])
    assert dut.modes == {GrandMode.NORMAL, GrandMode.UNIFORM, GrandMode.RAW}
    assert_model(run_grand(dut, "uniform", 30), 4, 2, "uniform", 30)
    dut = GrandUnit(lanes=2, reset_seed=4, modes=["uniform"])
    assert_model(run_grand(dut, "normal144", 30), 4, 2, "normal", 30)   # not built: NORMAL


@pytest.mark.parametrize("modes, exc, msg", [
    ("normal", TypeError, "Modes must be an iterable"),
    (3, TypeError, "Modes must be an iterable"),
    ([1], TypeError, "Mode must be a GrandMode member or a mode name, not 1"),
    (["gauss"], ValueError, "Mode name must be one of normal, normal144, trunc2, trunc3"),
])
def test_rtl_modes_validation(modes, exc, msg):
    with pytest.raises(exc, match=msg):
        GrandUnit(modes=modes)
