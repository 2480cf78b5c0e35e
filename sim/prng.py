"""Golden model of the xoroshiro128aox pseudo-random generator and of its lane seeding rule.

xoroshiro128aox is Graphcore's published variant of xoroshiro128 (DESIGN §3.1). With 64-bit
words ``s0``, ``s1`` and ``rotl`` the 64-bit left rotation, one step is::

    sx  = s0 ^ s1
    sa  = s0 & s1
    out = sx ^ (rotl(sa, 1) | rotl(sa, 2))      # the output word of this step
    s0  = rotl(s0, 55) ^ sx ^ (sx << 14)        # the next state
    s1  = rotl(sx, 36)

The output is a function of the state *before* the update, so the first word of a freshly
seeded generator already depends on the seed. The state update is the linear (over GF(2))
xoroshiro128 transition; its period is 2^128 − 1 and the all-zero state is a fixed point that
must never be used.

Seeding rule (:func:`seed_lanes`): a 64-bit ``seed`` starts a splitmix64 stream (Steele, Lea and
Flood; the reference constants below); lane ``k`` of ``L`` lanes takes the words number ``2k``
and ``2k + 1`` of that stream as its ``s0`` and ``s1``, and then bit 0 of ``s1`` is set
(:func:`load_state`). Setting that bit is the gateware's load rule too: it makes the all-zero
state impossible without a 128-bit zero detector, at the price of one bit of seed space. The
splitmix64 output mixer is a bijection of its 64-bit counter and the counter takes ``2L``
distinct values (the increment is odd), so the ``2L`` words are pairwise distinct and so are
the lanes' ``s0``: no two lanes share a state. As usual with splitmix64 seeding, lanes are
independent in practice (statistically), not provably non-overlapping.

All arithmetic is modulo 2^64 and exact; there is no rounding in this module.

Performance: :meth:`Xoroshiro128aox.take` is vectorised. Because the state update is linear,
the state ``K`` steps ahead is a fixed 128×128 bit matrix applied to the current state; ``take``
jumps ahead by ``K`` to get ``n / K`` starting states per lane and then steps all of them in
parallel with numpy, so 10^6 words take a fraction of a second.
"""

import functools

import numpy as np

__all__ = ["MASK64", "SPLITMIX64_GAMMA", "rotl64", "splitmix64_next", "xoroshiro128aox_next",
           "xoroshiro128aox_output", "load_state", "seed_lanes", "Xoroshiro128aox"]

MASK64 = (1 << 64) - 1
#: splitmix64's counter increment (the 64-bit golden ratio, odd).
SPLITMIX64_GAMMA = 0x9E3779B97F4A7C15
_SM_M1 = 0xBF58476D1CE4E5B9
_SM_M2 = 0x94D049BB133111EB


def rotl64(x, k):
    """Rotate the 64-bit integer ``x`` left by ``k`` (0 ≤ k < 64)."""
    return ((x << k) | (x >> (64 - k))) & MASK64 if k else x & MASK64


def splitmix64_next(x):
    """One splitmix64 step: return ``(word, new_counter)`` for counter ``x``."""
    x = (x + SPLITMIX64_GAMMA) & MASK64
    z = x
    z = ((z ^ (z >> 30)) * _SM_M1) & MASK64
    z = ((z ^ (z >> 27)) * _SM_M2) & MASK64
    return z ^ (z >> 31), x


def xoroshiro128aox_output(s0, s1):
    """The output word of state ``(s0, s1)`` (Python ints)."""
    sx = s0 ^ s1
    sa = s0 & s1
    return sx ^ (rotl64(sa, 1) | rotl64(sa, 2))


def xoroshiro128aox_next(s0, s1):
    """One generator step on Python ints.

    Returns
    -------
    (out, s0, s1)
        The output word of the current state and the next state.
    """
    sx = s0 ^ s1
    sa = s0 & s1
    out = sx ^ (rotl64(sa, 1) | rotl64(sa, 2))
    n0 = rotl64(s0, 55) ^ sx ^ ((sx << 14) & MASK64)
    n1 = rotl64(sx, 36)
    return out, n0, n1


def _check_int(value, name, lo, hi):
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    value = int(value)
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer between {lo} and {hi}, not {value}")
    return value


def load_state(state):
    """The state a lane takes when ``state`` is loaded: bit 0 of ``s1`` is forced to 1.

    This is the gateware's seed-load rule (``lowbit.hw.prng``); it maps every 128-bit value, zero
    included, to a valid nonzero state. Works on a ``(lanes, 2)`` array (returns a copy).
    """
    state = np.array(state, dtype=np.uint64)
    state[..., 1] |= np.uint64(1)
    return state


def seed_lanes(seed, lanes):
    """The initial ``(s0, s1)`` of each of ``lanes`` lanes for a 64-bit ``seed``.

    Lane ``k`` gets splitmix64 words ``2k`` and ``2k + 1`` of the stream started at counter
    ``seed``, with bit 0 of ``s1`` set (see the module docstring); no lane state is zero and all
    are distinct. The result is unchanged by :func:`load_state`.

    Returns
    -------
    numpy.ndarray of uint64, shape (lanes, 2)
        ``[k, 0]`` is ``s0`` and ``[k, 1]`` is ``s1`` of lane ``k``.

    Raises
    ------
    TypeError
        If ``seed`` or ``lanes`` is not an integer.
    ValueError
        If ``seed`` is outside [0, 2^64) or ``lanes`` < 1.
    """
    seed = _check_int(seed, "Seed", 0, MASK64)
    lanes = _check_int(lanes, "Lane count", 1, 1 << 20)
    state = np.zeros((lanes, 2), dtype=np.uint64)
    x = seed
    for k in range(lanes):
        for j in range(2):
            w, x = splitmix64_next(x)
            state[k, j] = w
    return load_state(state)


def _step_np(s0, s1):
    """Vectorised step on uint64 arrays: returns (out, s0, s1)."""
    sx = s0 ^ s1
    sa = s0 & s1
    out = sx ^ (((sa << np.uint64(1)) | (sa >> np.uint64(63)))
                | ((sa << np.uint64(2)) | (sa >> np.uint64(62))))
    n0 = ((s0 << np.uint64(55)) | (s0 >> np.uint64(9))) ^ sx ^ (sx << np.uint64(14))
    n1 = (sx << np.uint64(36)) | (sx >> np.uint64(28))
    return out, n0, n1


@functools.lru_cache(maxsize=32)
def _jump_columns(k):
    """Columns of the state-transition matrix raised to ``k``: the image of each unit state.

    Returns a tuple of 128 Python ints (state as ``s0 | s1 << 64``).
    """
    s0 = np.array([(1 << j) & MASK64 if j < 64 else 0 for j in range(128)], dtype=np.uint64)
    s1 = np.array([0 if j < 64 else 1 << (j - 64) for j in range(128)], dtype=np.uint64)
    for _ in range(k):
        _, s0, s1 = _step_np(s0, s1)
    return tuple(int(a) | (int(b) << 64) for a, b in zip(s0, s1, strict=True))


def _jump(state, cols):
    r = 0
    j = 0
    while state:
        if state & 1:
            r ^= cols[j]
        state >>= 1
        j += 1
    return r


class Xoroshiro128aox:
    """``L`` independent xoroshiro128aox lanes, seeded by :func:`seed_lanes`.

    Parameters
    ----------
    seed : int
        64-bit seed, 0 ≤ seed < 2^64.
    lanes : int
        Number of lanes ``L`` ≥ 1.

    Members
    -------
    state : numpy.ndarray of uint64, shape (lanes, 2)
        Copy of the current ``(s0, s1)`` of each lane. Assigning it sets the state (an
        all-zero lane state raises ``ValueError``).
    lanes : int
        ``L``.

    Raises
    ------
    TypeError, ValueError
        As :func:`seed_lanes`.
    """

    def __init__(self, seed=0, lanes=1):
        self._state = seed_lanes(seed, lanes)
        self._lanes = self._state.shape[0]

    @classmethod
    def from_state(cls, state):
        """A generator starting from an explicit ``(lanes, 2)`` state array."""
        gen = cls(0, np.asarray(state).shape[0])
        gen.state = state
        return gen

    @property
    def lanes(self):
        return self._lanes

    @property
    def state(self):
        return self._state.copy()

    @state.setter
    def state(self, value):
        value = np.asarray(value, dtype=np.uint64)
        if value.shape != (self._lanes, 2):
            raise ValueError(f"State must have shape ({self._lanes}, 2), not {value.shape}")
        if np.any((value[:, 0] == 0) & (value[:, 1] == 0)):
            raise ValueError("A lane state must not be all-zero")
        self._state = value.copy()

    def next(self):
        """One word per lane: ``numpy.ndarray[uint64]`` of shape ``(lanes,)``."""
        out, s0, s1 = _step_np(self._state[:, 0], self._state[:, 1])
        self._state = np.stack([s0, s1], axis=1)
        return out

    def take(self, n):
        """The next ``n`` words of every lane: ``numpy.ndarray[uint64]`` of shape ``(n, lanes)``.

        Row ``t`` holds the ``t``-th word of each lane, so ``take(a)`` then ``take(b)`` equals
        ``take(a + b)``.
        """
        n = _check_int(n, "Word count", 0, 1 << 40)
        if n == 0:
            return np.zeros((0, self._lanes), dtype=np.uint64)
        if n <= 64:
            return np.stack([self.next() for _ in range(n)])
        k = 1 << max(6, min(12, (n.bit_length() + 1) // 2))    # about sqrt(n) steps per block
        blocks = -(-n // k)
        cols = _jump_columns(k)
        starts = np.zeros((self._lanes, blocks, 2), dtype=np.uint64)
        for lane in range(self._lanes):
            st = int(self._state[lane, 0]) | (int(self._state[lane, 1]) << 64)
            for b in range(blocks):
                starts[lane, b] = (st & MASK64, st >> 64)
                st = _jump(st, cols)
        out = np.empty((k, self._lanes, blocks), dtype=np.uint64)
        s0, s1 = starts[..., 0], starts[..., 1]
        for i in range(k):
            out[i], s0, s1 = _step_np(s0, s1)
        # out[i, lane, b] is word b*k + i of the lane.
        words = out.transpose(2, 0, 1).reshape(blocks * k, self._lanes)[:n]
        # Advance the real state by exactly n words.
        last_block, rem = divmod(n, k)
        if last_block < blocks:
            s0, s1 = starts[:, last_block, 0].copy(), starts[:, last_block, 1].copy()
            for _ in range(rem):
                _, s0, s1 = _step_np(s0, s1)
        else:
            s0, s1 = s0[:, -1], s1[:, -1]     # n is a whole number of blocks: the last one's end
        self._state = np.stack([s0, s1], axis=1)
        return np.ascontiguousarray(words)
