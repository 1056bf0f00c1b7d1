"""STABLEHLO_COMPOSITE runs its decomposition subgraph on the CPU, as LiteRT does."""

from __future__ import annotations

import numpy as np
import pytest
from litegpu.testing import ModelBuilder, rel_error, run_litegpu, run_litert


def _model(shape=(2, 3, 4)) -> bytes:
    b = ModelBuilder()
    x = b.input("x", shape, "float32")
    z = b.input("z", shape, "float32")
    y = b.tensor("y", shape, "float32")
    dec = b.add_subgraph("decomposition")
    a = dec.input("a", shape, "float32")
    c = dec.input("c", shape, "float32")
    s = dec.tensor("s", shape, "float32")
    dec.op("MUL", [a, c], [s])
    t = dec.tensor("t", shape, "float32")
    dec.op("TANH", [s], [t])
    dec.output(t)
    from flatbuffers import flexbuffers

    b.op("STABLEHLO_COMPOSITE", [x, z], [y], name="test.mul_tanh", decomposition_subgraph_index=b.subgraph_index(dec),
         composite_attributes=bytes(flexbuffers.Dumps({"alpha": 1.0})), version=1)
    b.output(y)
    return b.build()


@pytest.mark.parametrize("shape", [(2, 3, 4), (7,), (1, 5, 5, 3)], ids=str)
def test_composite_runs_its_decomposition(shape):
    model = _model(shape)
    r = np.random.default_rng(0)
    feeds = [r.standard_normal(shape).astype(np.float32) for _ in range(2)]
    (ref,) = run_litert(model, feeds, reference=False)
    (ours,) = run_litegpu(model, feeds)
    assert ours.shape == ref.shape
    assert rel_error(ours, ref) <= 1e-5
