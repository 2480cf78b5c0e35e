"""xoroshiro128aox pseudo-random generator with ``L`` lanes and a run-time seed load."""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from lowbit.sim.prng import MASK64, seed_lanes

from .common import check_int as _check_int

__all__ = ["Xoroshiro128aox", "lane_state_layout"]



#: One lane's state as loaded through the ``seed`` port: ``s0`` in bits [63:0], ``s1`` above.
lane_state_layout = data.StructLayout({"s0": 64, "s1": 64})


def _rotl(v, k):
    return Cat(v[64 - k:], v[:64 - k])


class Xoroshiro128aox(wiring.Component):
    """``L`` lanes of xoroshiro128aox, one 64-bit word per lane per transfer.

    The generator is the golden model :mod:`lowbit.sim.prng`, bit for bit. Lane ``k`` produces the
    words of lane ``k`` of ``lowbit.sim.prng.Xoroshiro128aox(reset_seed, lanes)``. The output
    stream is
    always valid; every cycle with ``o.ready`` high hands over one word per lane and steps the
    generator, so there are no bubbles. The payload is a plain function of the state registers
    (no extra latency): other blocks may use the words combinationally.

    Seeding: after reset the state is ``lowbit.sim.prng.seed_lanes(reset_seed, lanes)``. At run
    time,
    a cycle with ``seed_load`` high loads every lane's state from the ``seed`` port; the host
    computes it with ``lowbit.sim.prng.seed_lanes(new_seed, lanes)`` (the hardware does not run
    splitmix64). Loading forces bit 0 of ``s1`` to 1 (``lowbit.sim.prng.load_state``), so the
    all-zero
    state, the one state xoroshiro never leaves, cannot be loaded; ``seed_lanes`` states
    already have that bit set. A word transferred in the load cycle is the last word of the old
    stream; the next word is the first of the new one. A word on offer but not taken in the
    load cycle is dropped: like a reset, a load restarts the stream.

    Parameters
    ----------
    lanes : int
        Number of lanes ``L``, 1 to 64.
    reset_seed : int
        64-bit seed of the reset state, 0 ≤ reset_seed < 2^64.
    per_lane_ready : bool
        Each lane steps on its own bit of ``lane_ready`` instead of ``o.ready`` (default
        False).

    Members
    -------
    o : Out(stream.Signature(data.ArrayLayout(64, lanes)))
        Element ``k`` (bits [64k+63:64k]) is lane ``k``'s word.
    seed : In(data.ArrayLayout(lane_state_layout, lanes))
        State to load; element ``k`` is lane ``k``'s ``{s1, s0}``.
    seed_load : In(1)
        Load strobe.
    lane_ready : In(lanes)
        With ``per_lane_ready`` only: lane ``k`` steps on ``lane_ready[k]`` instead of ``o.ready``
        (for fast clocks: a copy of the transfer per lane, each beside its lane, so that no
        enable fans out to every lane's state). The user keeps every bit equal to ``o.ready``.

    Raises
    ------
    TypeError
        If ``lanes`` or ``reset_seed`` is not an integer, or ``per_lane_ready`` not a bool.
    ValueError
        If ``lanes`` or ``reset_seed`` is out of range.
    """

    def __init__(self, *, lanes=1, reset_seed=0, per_lane_ready=False):
        try:
            self._lanes = _check_int("Lane count", lanes, 1, 64)
            self._reset_seed = _check_int("Reset seed", reset_seed, 0, MASK64)
            if not isinstance(per_lane_ready, bool):
                raise TypeError(f"Per-lane ready must be a bool, not {per_lane_ready!r}")
        except (TypeError, ValueError):
            self._MustUse__silence = True       # a rejected component is not an unused one
            raise
        self._per_lane_ready = per_lane_ready
        self._reset_state = seed_lanes(self._reset_seed, self._lanes)
        super().__init__({
            "o": Out(stream.Signature(data.ArrayLayout(64, self._lanes))),
            "seed": In(data.ArrayLayout(lane_state_layout, self._lanes)),
            "seed_load": In(1),
            **({"lane_ready": In(self._lanes)} if per_lane_ready else {}),
        })

    @property
    def lanes(self):
        return self._lanes

    @property
    def reset_seed(self):
        return self._reset_seed

    @property
    def per_lane_ready(self):
        return self._per_lane_ready

    @property
    def reset_state(self):
        """The reset ``(lanes, 2)`` state array (a copy)."""
        return self._reset_state.copy()

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.o.valid.eq(1)
        for k in range(self._lanes):
            r0, r1 = (int(x) for x in self._reset_state[k])
            s0 = Signal(64, name=f"s0_{k}", init=r0)
            s1 = Signal(64, name=f"s1_{k}", init=r1)
            sx = s0 ^ s1
            sa = s0 & s1
            m.d.comb += self.o.payload[k].eq(sx ^ (_rotl(sa, 1) | _rotl(sa, 2)))
            lane_seed = self.seed[k]
            with m.If(self.seed_load):
                m.d.sync += [s0.eq(lane_seed.s0), s1.eq(lane_seed.s1 | 1)]
            with m.Elif(self.lane_ready[k] if self._per_lane_ready else self.o.ready):
                m.d.sync += [
                    s0.eq(_rotl(s0, 55) ^ sx ^ sx.shift_left(14)[:64]),
                    s1.eq(_rotl(sx, 36)),
                ]
        return m
