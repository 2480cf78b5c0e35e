"""Progress on long work (issue #22): the bars of `lowbit demo` and `lowbit train` on a terminal,
none elsewhere, and the CXXRTL compile notice only when it compiles."""

import os
import sys

import numpy as np
import pytest

from lowbit.sim.rtl import cxxrtl


def _pty_run(argv, timeout=300):
    """Run ``argv`` on a pseudo-terminal (100 columns); returns its output (stdout and stderr)."""
    pty = pytest.importorskip("pty")
    import fcntl
    import select
    import struct
    import termios
    import time
    pid, fd = pty.fork()
    if pid == 0:                                    # pragma: no cover (the child)
        os.execvp(argv[0], argv)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    out, end = b"", time.monotonic() + timeout
    try:
        while time.monotonic() < end:
            if not select.select([fd], [], [], 1.0)[0]:
                continue
            try:
                data = os.read(fd, 4096)
            except OSError:
                break
            if not data:
                break
            out += data
    finally:
        os.close(fd)
        os.waitpid(pid, 0)
    return out.decode(errors="replace")


TRAIN = [sys.executable, "-m", "lowbit.boards.cli", "train", "digits", "--backend", "model",
         "--epochs", "1", "--steps", "2", "--hidden", "16", "--batch", "16"]


def test_train_shows_a_bar_on_a_terminal():
    out = _pty_run(TRAIN)
    assert "training:" in out and "product/s" in out
    assert "/10 [" in out                             # 2 steps x (3 * 2 - 1) products
    assert "epoch   1/1: test accuracy" in out


def test_no_bar_under_json_or_off_a_terminal(capsys):
    out = _pty_run([*TRAIN, "--json"])
    assert "product/s" not in out and '"history"' in out
    import argparse

    from lowbit.boards.train import add_parser
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(TRAIN[3:])
    assert args.func(args) == 0                      # stderr is captured: not a terminal
    assert "product/s" not in capsys.readouterr().err


def test_demo_runs_in_whole_run_chunks_with_the_same_results():
    """The demo's bar advances per RUN: slicing the batch at RUN boundaries gives the same
    outputs and the same RUN count as one call."""
    from lowbit.boards.demo import SIM_TOP, _input_quant, _run_images, prepare_network
    from lowbit.boards.driver import Accelerator
    from lowbit.sim import mlp
    acc = Accelerator.model(**SIM_TOP)
    split = mlp.load_split()
    _, net = prepare_network("bfp", acc.design.column(), split=split)
    acc.load_network(net.layers, quantise_input=_input_quant(net, "device"))
    codes = mlp.pixels_to_f16(split.x_test[:3 * acc.network.chunk + 5])
    whole, s1 = acc.run_network(codes)
    parts, s2 = _run_images(acc, codes, bar=True)
    assert np.array_equal(whole.m, parts.m) and np.array_equal(whole.e, parts.e)
    assert (s1["runs"], s1["samples"], s1["chunk"]) == (s2["runs"], s2["samples"], s2["chunk"])


def test_compile_notice_fires_once_and_only_inside_its_block():
    calls = []
    cxxrtl._notify_compile()                        # no block: nothing to call
    with cxxrtl.on_compile(lambda: calls.append(1)):
        cxxrtl._notify_compile()
        cxxrtl._notify_compile()                    # yosys, then the compiler: one notice
    cxxrtl._notify_compile()
    assert calls == [1]
    assert cxxrtl._COMPILE_NOTICES == []


@pytest.mark.parametrize("compiles", [False, True])
def test_demo_announces_a_compile_only_when_there_is_one(monkeypatch, compiles):
    from lowbit.boards import demo
    from lowbit.boards.driver import Accelerator

    def simulated(**params):
        if compiles:
            cxxrtl._notify_compile()
        return "accelerator"
    monkeypatch.setattr(Accelerator, "simulated", staticmethod(simulated))
    said = []
    acc, _ = demo.connect(simulator="cxxrtl", progress=said.append)
    assert acc == "accelerator"
    assert said[0].startswith("lowbit: loading the CXXRTL simulator of the simulated top")
    assert any("2-6 min" in s for s in said) == compiles
