"""The toolchain wrappers: environment defaults and out-of-context implementation."""

import os

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from lowbit.boards.toolchain import TOOL_DEFAULTS, OOCWrapper, implement, setup_toolchain_env


class _Mul(wiring.Component):
    a: In(8)
    b: In(8)
    y: Out(16)

    def elaborate(self, platform):
        m = Module()
        r = Signal(16)
        m.d.sync += r.eq(self.a * self.b)
        m.d.comb += self.y.eq(r)
        return m


def test_env_defaults_are_yowasp_and_user_values_win():
    env = setup_toolchain_env({"YOSYS": "/opt/my/yosys"})
    assert env["YOSYS"] == "/opt/my/yosys"
    for key, value in TOOL_DEFAULTS.items():
        if key != "YOSYS":
            assert env[key] == value
    # The project sets the defaults itself, whatever the shell had.
    assert os.environ["NEXTPNR_ICE40"]


def test_wrapper_counts_port_bits():
    w = OOCWrapper(_Mul())
    assert (w.n_in, w.n_out) == (16, 16)


def test_implement_rejects_unknown_device():
    with pytest.raises(ValueError, match="Unknown device 'xc7a35t'"):
        implement(_Mul(), "xc7a35t")


def test_implement_on_hx8k_keeps_the_multiplier():
    res = implement(_Mul(), "hx8k", seed=1)
    # An 8x8 multiplier in LUTs costs far more than the 32-bit wrapper alone.
    assert res["lcs_block"] > 40
    assert res["dsps"] == 0
    assert res["fmax_mhz"] > 20


def test_implement_on_up5k_uses_a_dsp():
    res = implement(_Mul(), "up5k", seed=1)
    assert res["dsps"] == 1


def test_wrapper_accepts_views_and_enums():
    from amaranth.lib import data, enum

    class Mode(enum.Enum, shape=2):
        A = 0
        B = 1

    class _Viewy(wiring.Component):
        mode: In(Mode)
        x: In(data.StructLayout({"a": 3, "b": 5}))
        y: Out(data.ArrayLayout(4, 3))

        def elaborate(self, platform):
            m = Module()
            m.d.sync += self.y[0].eq(self.x.a + self.mode.as_value())
            return m

    w = OOCWrapper(_Viewy())
    assert (w.n_in, w.n_out) == (10, 12)
    from amaranth.back import rtlil
    assert "module" in rtlil.convert(w)


def test_implement_without_dsp_uses_luts():
    res = implement(_Mul(), "up5k", seed=1, dsp=False)
    assert res["dsps"] == 0 and res["lcs_block"] > 40
    assert "-dsp" not in res["synth"]


def test_implement_on_ecp5_falls_back_to_the_classic_abc_mapping(monkeypatch):
    """When Yosys's abc9 mapping fails on ECP5 (Yosys 0.70 asserts on some netlists), the same
    flow runs again with the classic ABC LUT mapping, and the result says so."""
    import lowbit.boards.toolchain as tc

    real_run = tc._run
    scripts = []

    def run(cmd, log, cwd, step):
        if step == "yosys":
            scripts.append(cmd[-1])
            if len(scripts) == 1:
                raise tc.ToolchainError("yosys failed (exit 1): abc9 assertion")
        return real_run(cmd, log, cwd, step)

    monkeypatch.setattr(tc, "_run", run)
    res = implement(_Mul(), "ecp5-25f", seed=1)
    assert len(scripts) == 2
    assert "abc -dress -lut 4:7" in scripts[1] and "-run :map_luts" in scripts[1]
    assert res["synth"] == "synth_ecp5 (map_luts: abc -dress -lut 4:7, abc9 failed)"
    assert res["dsps"] == 1 and res["fmax_mhz"] > 50
