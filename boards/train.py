"""``lowbit train digits``: train the digits MLP with the accelerator doing the products.

The training itself is :mod:`lowbit.sim.train`. This module picks the backend — the golden models
(``golden``), the protocol model (``model``), the simulated top (``cxxrtl``, ``amaranth``; with
``--board B`` board B's own top) or a board (``--port``) — runs the epochs with one progress line
each (and, on a terminal, a progress bar over the column and discrete products with rate and
ETA; none under ``--json``), and (unless ``--no-check``)
trains the same run on the golden backend alongside and checks after every epoch that the
device produced bit-identical weights. Test accuracy is computed with the golden backend's
arithmetic on the current weights (the device equals it bit for bit; evaluating 540 images on
a simulated top would take much longer than the training).

A device without a grand unit (the iCEBreaker's top) gets its initial weights from the same
generator on the host (:class:`lowbit.sim.train.DeviceBackend`'s ``host_grand``: the grand
unit's golden model, same seed and lanes), and the run says so in one line. A variant the
device cannot run (stochastic rounding without it, the discrete variant without the discrete
unit, a BFP variant without the column) is refused before anything runs.

Options are checked by argparse types (exit status 2, one line naming the option), and the
Python API checks the same values (:func:`lowbit.sim.train.check_config`).

The lead wires :func:`add_parser` and :func:`run` into :mod:`lowbit.boards.cli`.
"""

import json
import sys
import time

__all__ = ["add_parser", "run", "BACKENDS"]

#: ``--backend`` choices; ``sim`` is the compiled (CXXRTL) top if a C++ compiler is
#: installed, else Amaranth's simulator.
BACKENDS = ("sim", "golden", "model", "cxxrtl", "amaranth")
#: Default (epochs, steps per epoch) per backend: about a minute each.
DEFAULTS = {"golden": (10, None), "model": (2, 5), "cxxrtl": (2, 5), "amaranth": (1, 1),
            "port": (2, 5)}


class UsageError(Exception):
    """A bad combination of options (exit status 2)."""


class MismatchError(Exception):
    """The device's weights differ from the golden backend's (exit status 1)."""


def _say(msg):
    print(msg, file=sys.stderr, flush=True)


def add_parser(subparsers):
    """Add the ``train`` command to an ``argparse`` sub-parser collection."""
    from lowbit.sim.train import MAX_LR, VARIANTS

    from .options import baud_rate, hidden_sizes, int_in, real_in
    from .profiles import BOARDS, DEFAULT_BOARD
    p = subparsers.add_parser(
        "train", help="train the digits MLP with the accelerator's arithmetic",
        description="Mixed-precision training of the 64-H-10 digits MLP (issue #11): the "
                    "accelerator does the forward and backward matrix-vector products and the "
                    "weight-gradient products; the host does softmax, f' masks and the update.")
    p.add_argument("task", choices=["digits"], help="the training task")
    p.add_argument("--variant", choices=list(VARIANTS), default="bfp8",
                   help="arithmetic (default: bfp8)")
    p.add_argument("--backend", choices=list(BACKENDS), default="sim",
                   help="where the products run: the simulated top (default: sim = CXXRTL if "
                        "a C++ compiler is installed, else Amaranth), the golden models, or the "
                        "protocol model")
    p.add_argument("--port", help="serial port of a board (overrides --backend)")
    p.add_argument("--baud", type=baud_rate,
                   help="UART rate of the board's bitstream, with --port (default: the board "
                        "profile's, which IDENTIFY confirms)")
    p.add_argument("--board", "-b", choices=list(BOARDS),
                   help=f"board profile: of --port (default: {DEFAULT_BOARD}), or the board "
                        "whose own top the model or simulator runs (default: the reference "
                        "simulated top, N=16)")
    p.add_argument("--epochs", type=int_in(1, 10_000),
                   help="epochs, 1..10000 (default: 10 golden, 2 device)")
    p.add_argument("--steps", type=int_in(1),
                   help="training steps per epoch, at least 1 (default: all on golden; 1 in "
                        "Amaranth's simulator, 5 on the CXXRTL top, the model or a board)")
    p.add_argument("--batch", type=int_in(1), default=32,
                   help="samples per step, a multiple of the block size and at most the "
                        "column's longest product (default: 32)")
    p.add_argument("--hidden", type=hidden_sizes, default=(32, 32),
                   help="hidden layer sizes, comma-separated (default: 32,32)")
    p.add_argument("--seed", type=int_in(0, 2**64 - 1), default=1,
                   help="run seed, 0..2^64-1 (default: 1)")
    p.add_argument("--lr", type=real_in(0.0, MAX_LR),
                   help=f"learning rate, in (0, {MAX_LR:g}] (default: the variant's)")
    p.add_argument("--no-check", action="store_true",
                   help="do not train the golden backend alongside to check bit-exactness")
    p.add_argument("--json", action="store_true", help="print the history as JSON")
    p.set_defaults(func=run)
    return p


def _backend(args):
    """``(kind, backend)`` for the options."""
    from lowbit.sim.train import DeviceBackend, GoldenBackend
    if args.port is not None:
        from .demo import connect
        accel, _ = connect(port=args.port, board=args.board, progress=_say, baud=args.baud)
        return "port", DeviceBackend(accel)
    if args.baud is not None:
        raise UsageError("--baud is the rate of a board's serial port: use it with --port")
    kind = args.backend
    if kind == "golden":
        if args.board is not None:
            raise UsageError("--board names a device's top: use it with --port or a device "
                             "backend (model, cxxrtl, amaranth, sim), not golden")
        return kind, GoldenBackend()
    if kind == "sim":
        from .demo import default_simulator
        kind = default_simulator()
    from .demo import connect
    accel, desc = connect(simulator=kind, board=args.board, progress=_say)
    _say(f"lowbit train: device: {desc}")
    return kind, DeviceBackend(accel)


#: Variants and what of the device they need beyond the BFP column or the discrete unit.
_STOCHASTIC = ("bfp4-stochastic", "bfp4-stochastic-f64master", "mixed", "discrete")


def device_refusal(variant, accel):
    """``None`` if ``accel`` (an :class:`lowbit.boards.driver.Accelerator`) can run the products
    of ``variant``, else the reason (from its IDENTIFY record and design registers)."""
    has = getattr(accel, "has_engine", None)
    if has is None:
        return None
    if variant == "discrete":
        if not has("discrete"):
            return "the device has no discrete unit (DMATVEC); use a BFP variant"
        return None
    if not has("bfp"):
        return "the device has no BFP column (MATVEC); use --variant discrete"
    design = getattr(accel, "design", None)
    if variant in _STOCHASTIC and design is not None and not design.bfp_stochastic:
        return (f"variant {variant} rounds stochastically and the device's BFP column has no "
                "stochastic rounding; use bfp8, bfp4-nearest or bfp4-nearest-f64master")
    return None


class _Counting:
    """A training backend that calls :attr:`tick` after every column or discrete product (the
    progress bar's unit: ``3L - 1`` products per step of an ``L``-layer network: forward, weight
    gradient, and backward below the first layer); everything else is the wrapped backend's."""

    def __init__(self, backend):
        self._backend = backend
        self.tick = None
        self._paused = False

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def _count(self):
        if self.tick is not None and not self._paused:
            self.tick()

    def bfp_matvec(self, *args, **kwargs):
        out = self._backend.bfp_matvec(*args, **kwargs)
        self._count()
        return out

    def discrete_matvec(self, *args, **kwargs):
        out = self._backend.discrete_matvec(*args, **kwargs)
        self._count()
        return out

    def paused(self, fn):
        """``fn`` with counting off while it runs (evaluation's products)."""
        def run(*args, **kwargs):
            self._paused = True
            try:
                return fn(*args, **kwargs)
            finally:
                self._paused = False
        return run


def _product_bar(total, *, enabled):
    """The progress bar over ``total`` products (:func:`lowbit.boards.demo.progress_bar`)."""
    from .demo import progress_bar
    return progress_bar(total, unit="product", desc="training", enabled=enabled)


def _golden_twin(backend):
    from lowbit.sim.train import GoldenBackend
    return GoldenBackend(backend.column, disc_lanes=backend.disc_lanes,
                         disc_acc_width=backend.disc_acc_width, grand_lanes=backend.grand_lanes)


def train_digits(args, *, progress_bar=False):
    """Run the training; returns ``(history, info)``. Raises UsageError / MismatchError.

    ``progress_bar``: show a bar over the products on a terminal (:func:`_product_bar`)."""
    from lowbit.sim.train import Trainer, variant_config
    hidden = args.hidden
    if isinstance(hidden, str):         # the Python API may pass the option's text
        import argparse

        from .options import hidden_sizes
        try:
            hidden = hidden_sizes(hidden)
        except argparse.ArgumentTypeError as e:
            raise UsageError(f"--hidden {e}") from None
    overrides = dict(hidden=tuple(hidden), batch=args.batch, seed=args.seed)
    if args.lr is not None:
        overrides["lr"] = args.lr
    try:                                # every option, before anything connects or runs
        variant_config(args.variant, **overrides)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.variant == "float64":
        kind, backend = "float64", None
    else:
        kind, backend = _backend(args)
    if backend is not None and hasattr(backend, "accel"):
        refusal = device_refusal(args.variant, backend.accel)
        if refusal:
            raise UsageError(refusal)
    if getattr(backend, "host_grand", False):
        _say(f"lowbit train: the device has no grand unit: the initial weights come from the "
             f"same generator on the host (lowbit.sim.grand, {backend.grand_lanes} "
             f"lane{'s' * (backend.grand_lanes != 1)}, seed {args.seed}), so the run is "
             "reproducible")
    epochs, steps = DEFAULTS.get(kind, DEFAULTS["golden"])
    epochs = args.epochs if args.epochs is not None else epochs
    steps = args.steps if args.steps is not None else steps
    if epochs < 1 or (steps is not None and steps < 1):
        raise UsageError("--epochs and --steps must be at least 1")
    overrides["epochs"] = epochs
    counted = None if backend is None else _Counting(backend)
    try:
        cfg = variant_config(args.variant, **overrides)
        trainer = Trainer(cfg, counted)
    except ValueError as e:
        raise UsageError(str(e)) from None
    twin = None
    device = kind not in ("golden", "float64")
    if device:
        # The device computes the products; accuracy is evaluated on the golden twin.
        twin = Trainer(variant_config(args.variant, **overrides), _golden_twin(backend))
    _say(f"lowbit train: digits, variant {args.variant}, backend {kind}, {epochs} epochs"
         + (f" of {steps} steps" if steps else "") + f", batch {cfg.batch}, hidden "
         f"{tuple(hidden)}")
    history = []
    per_epoch = -(-len(trainer.data[0]) // cfg.batch)
    per_epoch = per_epoch if steps is None else min(steps, per_epoch)
    bar = _product_bar(epochs * per_epoch * (3 * len(cfg.hidden) + 2),
                       enabled=progress_bar and counted is not None)
    if counted is not None:
        counted.tick = bar.update
        if not device:                  # run_epoch's evaluation products are not counted
            trainer.accuracy = counted.paused(trainer.accuracy)
    say = _say if bar.disable else (lambda msg: bar.write(msg, file=sys.stderr))
    with bar:
        for _ in range(epochs):
            t0 = time.perf_counter()
            if device:
                rec = _device_epoch(trainer, twin, steps, check=not args.no_check)
            else:
                rec = trainer.run_epoch(steps)
            rec = dict(rec, seconds=time.perf_counter() - t0)
            history.append(rec)
            widths = f"  widths {' '.join(rec['widths'])}" if rec.get("widths") else ""
            exact = "  bit-exact" if rec.get("bit_exact") else ""
            say(f"epoch {rec['epoch'] + 1:>3}/{epochs}: test accuracy "
                f"{100 * rec['test_acc']:5.1f} %  train loss {rec['train_loss']:.4f}{widths}  "
                f"{rec['seconds']:.1f} s{exact}")
    info = {"variant": args.variant, "backend": kind, "epochs": epochs, "steps": steps,
            "batch": cfg.batch, "hidden": list(hidden), "seed": args.seed,
            "host_grand": bool(getattr(backend, "host_grand", False)),
            "final_test_acc": history[-1]["test_acc"]}
    return history, info


def _device_epoch(dev, twin, steps, *, check):
    """One epoch on the device; the golden twin runs the same steps (same shuffle)."""
    import numpy as np
    x_tr, y_tr, x_te, y_te = dev.data
    order = dev.rng.permutation(len(x_tr))
    if twin is not None:
        twin.rng.permutation(len(x_tr))
    for tr in (dev, twin):
        if tr is not None and tr.cfg.policy is not None:
            tr._errors_pending = True
    losses = []
    for s, k in enumerate(range(0, len(order), dev.cfg.batch)):
        if steps is not None and s >= steps:
            break
        idx = order[k:k + dev.cfg.batch]
        loss = dev.step(x_tr[idx], y_tr[idx])
        losses.append(loss)
        if check:
            if twin.step(x_tr[idx], y_tr[idx]) != loss or not all(
                    np.array_equal(a, b) for a, b in zip(dev.weights, twin.weights,
                                                          strict=True)):
                raise MismatchError(f"epoch {dev.epoch + 1}, step {s + 1}: the device's "
                                    f"weights differ from the golden backend's")
    widths = None
    if dev.cfg.policy is not None:
        widths = [str(dev._widths(layer)) for layer in range(len(dev.weights))]
        dev.cfg.policy.end_epoch(dev.epoch)
        if check:
            twin.cfg.policy.end_epoch(twin.epoch)
    if not check:                       # evaluate the device's weights on the twin
        twin.weights = [w.copy() for w in dev.weights]
        twin.biases = [b.copy() for b in dev.biases]
        twin._codes = None if dev._codes is None else [c.copy() for c in dev._codes]
    twin.epoch = dev.epoch
    acc = twin.accuracy(x_te, y_te)
    rec = {"epoch": dev.epoch, "test_acc": acc, "train_loss": float(np.mean(losses)),
           "widths": widths, "steps": len(losses), "bit_exact": check}
    dev.history.append(rec)
    dev.epoch += 1
    twin.epoch += 1
    return rec


def run(args):
    """The ``train`` command; returns the exit status."""
    try:
        history, info = train_digits(args, progress_bar=not args.json)
    except UsageError as e:
        _say(f"lowbit train: error: {e}")
        return 2
    except MismatchError as e:
        _say(f"lowbit train: MISMATCH: {e}")
        return 1
    if args.json:
        print(json.dumps({**info, "history": history}, indent=1, default=str))
    else:
        print(f"digits {info['variant']} on {info['backend']}: test accuracy "
              f"{100 * info['final_test_acc']:.1f} % after {info['epochs']} epochs")
    return 0
