"""Tests for the backend.  Install first: pip install -e '.[test]'; then: pytest."""

from __future__ import annotations

import litegpu
import numpy as np
import pytest
from litegpu.testing import ModelBuilder, run_litert


def test_backend_is_registered():
    names = [b.name for b in litegpu.available_backends()]
    assert "mybackend" in names, "not registered: is the package installed (pip install -e .)?"


def test_unsupported_op_is_declined_with_a_reason():
    b = ModelBuilder()
    x = b.input("x", (1, 4), "float32")
    y = b.tensor("y", (1, 4), "float32")
    b.op("TANH", [x], [y])
    b.output(y)
    sg = litegpu.read_model(b.build()).main
    view = litegpu.NodeView(sg.operators[0], (sg.tensors[0],), (sg.tensors[1],), sg, None)
    answer = litegpu.load_delegate("mybackend").supports(view)
    assert not answer and answer.reason


def test_bad_option_is_a_config_error():
    with pytest.raises(litegpu.ConfigError, match="backends.mybackend.queue_depth"):
        litegpu.load_delegate("mybackend", {"queue_depth": 0})


def test_add_matches_litert(litegpu_backend):
    # Runs once per backend (this one and cpu, see addopts); skips with the reason where unavailable.
    b = ModelBuilder()
    x = b.input("x", (1, 8, 8, 3), "float32")
    y = b.input("y", (1, 8, 8, 3), "float32")
    z = b.tensor("z", (1, 8, 8, 3), "float32")
    b.op("ADD", [x, y], [z])
    b.output(z)
    model = b.build()
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((1, 8, 8, 3), dtype=np.float32) for _ in range(2)]
    np.testing.assert_allclose(litegpu_backend.run(model, inputs)[0], run_litert(model, inputs)[0], rtol=1e-6)
