"""STABLEHLO_RNG_BIT_GENERATOR (THREEFRY, PHILOX, DEFAULT) vs LiteRT's builtin kernel: the same random
bits and output state, bit for bit, for 32- and 64-bit outputs and a counter that wraps."""

from __future__ import annotations

import numpy as np
import pytest
from litegpu.testing import ModelBuilder, run_litegpu
from opcheck import run_litert


def _model(algorithm: int, n_state: int, shape: tuple[int, ...], dtype: str) -> bytes:
    b = ModelBuilder()
    s = b.input("s", (n_state,), "uint64")
    ns, y = b.tensor("ns", (n_state,), "uint64"), b.tensor("y", shape, dtype)
    b.op("STABLEHLO_RNG_BIT_GENERATOR", [s], [ns, y], algorithm=algorithm)
    b.output(ns, y)
    return b.build()


@pytest.mark.parametrize("algorithm, n_state", [(0, 2), (1, 3), (1, 2), (2, 2)],
                         ids=["DEFAULT", "PHILOX-3", "PHILOX-2", "THREEFRY"])
@pytest.mark.parametrize("shape, dtype", [((7,), "uint32"), ((3, 5), "int64"), ((4,), "int32"), ((2, 3), "uint64")])
def test_rng_bit_generator(algorithm, n_state, shape, dtype):
    data = _model(algorithm, n_state, shape, dtype)
    for state in ([0x123456789ABCDEF0, 0xFFFFFFFFFFFFFFFE, 77], [1, 2, 3]):  # the first wraps the counter
        feeds = [np.array(state[:n_state], np.uint64)]
        want, got = run_litert(data, feeds, reference=False), run_litegpu(data, feeds)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and np.array_equal(g, w)
