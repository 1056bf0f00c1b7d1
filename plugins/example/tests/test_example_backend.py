"""Tests of the example backend, run against the installed distribution."""

from __future__ import annotations

import litegpu
import numpy as np
import pytest


def test_registered_by_its_entry_point():
    info = {b.name: b for b in litegpu.available_backends()}.get("example")
    assert info is not None, "litegpu-example-numpy is not installed (pip install plugins/example)"
    assert info.available and info.plugin == "litegpu-example-numpy"


def test_options_are_validated():
    with pytest.raises(litegpu.ConfigError, match="backends.example.copy_on_transfer"):
        litegpu.load_delegate("example", {"copy_on_transfer": "yes"})


def test_elementwise_model_matches_litert(litegpu_backend):
    testing = pytest.importorskip("litegpu.testing")
    if not hasattr(testing, "ModelBuilder"):
        pytest.skip("litegpu.testing.ModelBuilder is not available in this litegpu build")
    b = testing.ModelBuilder()
    x = b.input("x", (1, 4, 4, 3), "float32")
    y = b.input("y", (1, 1, 1, 3), "float32")
    s = b.tensor("s", (1, 4, 4, 3), "float32")
    r = b.tensor("r", (1, 4, 4, 3), "float32")
    b.op("ADD", [x, y], [s], fused_activation_function=1)
    b.op("LOGISTIC", [s], [r])
    b.output(r)
    model = b.build()
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((1, 4, 4, 3), dtype=np.float32), rng.standard_normal((1, 1, 1, 3), dtype=np.float32)]
    expected = testing.run_litert(model, inputs)
    got = litegpu_backend.run(model, inputs)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-6, atol=1e-6)
