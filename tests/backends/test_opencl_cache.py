"""The OpenCL delegate stores compiled partitions in the cache and loads them back."""

from __future__ import annotations

import logging

import litegpu
import numpy as np
import pytest
from _litegpu_backends import load_backend_delegate
from litegpu.testing import ModelBuilder, assert_allclose_rel, run_litert


def _model(channels: int = 6) -> bytes:
    rng = np.random.default_rng(3)
    b = ModelBuilder()
    x = b.input("x", (1, 9, 9, 5))
    w = b.const("w", rng.standard_normal((channels, 3, 3, 5)).astype(np.float32))
    bias = b.const("b", rng.standard_normal(channels).astype(np.float32))
    y = b.tensor("y", (1, 5, 5, channels))
    b.op("CONV_2D", [x, w, bias], [y], padding=0, stride_w=2, stride_h=2, fused_activation_function=1)
    z = b.tensor("z", (1, 5, 5, channels))
    b.op("LOGISTIC", [y], [z])
    b.output(z)
    return b.build()


def _run(model: bytes, cache_dir, **opts):
    d = load_backend_delegate("opencl", {"cache": {"dir": str(cache_dir), "enabled": True}, **opts})
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
    it.allocate_tensors()
    kernels = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
    x = np.random.default_rng(0).standard_normal((1, 9, 9, 5)).astype(np.float32)
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"]), kernels, x


def test_second_prepare_loads_the_entry_and_answers_the_same(tmp_path):
    model = _model()
    cold, (k1,), x = _run(model, tmp_path / "c")
    warm, (k2,), _ = _run(model, tmp_path / "c")
    assert not k1.cache_hit and k2.cache_hit
    assert k2.programs_from_cache == len(k2.binaries) > 0
    (ref,) = run_litert(model, [x])
    assert_allclose_rel(cold, ref, 1e-4)
    np.testing.assert_array_equal(warm, cold)


def test_a_changed_option_or_shape_makes_a_new_entry(tmp_path):
    model = _model()
    _run(model, tmp_path / "c")
    _, (k,), _ = _run(model, tmp_path / "c", tuning="fast")  # the default is none
    assert not k.cache_hit
    _, (k,), _ = _run(_model(channels=7), tmp_path / "c")
    assert not k.cache_hit
    assert len(list((tmp_path / "c").glob("*.lgc"))) == 3


def test_a_corrupt_entry_is_ignored_with_a_warning_and_rewritten(tmp_path, caplog):
    model = _model()
    ref, _, _ = _run(model, tmp_path / "c")
    (entry,) = (tmp_path / "c").glob("*.lgc")
    raw = bytearray(entry.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    entry.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING):
        out, (k,), _ = _run(model, tmp_path / "c")
    assert not k.cache_hit
    assert any("checksum" in r.getMessage() or "corrupt" in r.getMessage() for r in caplog.records)
    np.testing.assert_array_equal(out, ref)
    _, (k,), _ = _run(model, tmp_path / "c")
    assert k.cache_hit


def test_cache_off_stores_nothing(tmp_path):
    d = load_backend_delegate("opencl", {"cache": {"dir": str(tmp_path / "c"), "enabled": False}})
    it = litegpu.Interpreter(model_content=_model(), experimental_delegates=[d])
    it.allocate_tensors()
    assert not (tmp_path / "c").exists() or not list((tmp_path / "c").iterdir())


@pytest.mark.parametrize("bad", [{"dir": 5}, {"colour": "red"}])
def test_bad_cache_options_are_config_errors(tmp_path, bad):
    with pytest.raises((litegpu.ConfigError, TypeError)):
        d = load_backend_delegate("opencl", {"cache": bad})
        litegpu.Interpreter(model_content=_model(), experimental_delegates=[d]).allocate_tensors()
