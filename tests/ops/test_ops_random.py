"""STABLEHLO_RNG_BIT_GENERATOR (THREEFRY, PHILOX, DEFAULT), RANDOM_UNIFORM, RANDOM_STANDARD_NORMAL, MULTINOMIAL vs
LiteRT's builtin kernels: the same random bits and output state, bit for bit, for 32- and 64-bit
outputs and a counter that wraps; the same uniform stream and multinomial samples for fixed seeds."""

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


@pytest.mark.sweep(every=2, by=lambda p: p["algorithm"])  # the rest run in `make test-all`
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


def _random_model(op: str, shape: tuple[int, ...], seed: int, seed2: int) -> bytes:
    b = ModelBuilder()
    s = b.const("shape", np.array(shape, np.int32))
    y = b.tensor("y", shape)
    b.op(op, [s], [y], seed=seed, seed2=seed2)
    b.output(y)
    return b.build()


@pytest.mark.parametrize("op", ["RANDOM_UNIFORM", "RANDOM_STANDARD_NORMAL"])
@pytest.mark.parametrize("shape, seed, seed2", [((7,), 5, 9), ((3, 4), 123456789012, 0), ((5,), 0, 77),
                                                ((2, 3, 3), -1, 2**40)])
def test_random_with_fixed_seeds(op, shape, seed, seed2):
    """LiteRT's stream, continued over invokes: uniform bit-exact, normal within float32 libm ulps."""
    import litegpu
    from ai_edge_litert import interpreter as litert
    from litegpu.testing import assert_allclose_rel

    data = _random_model(op, shape, seed, seed2)
    theirs = litert.Interpreter(model_content=data, experimental_op_resolver_type=(
        litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
    ours = litegpu.Interpreter(model_content=data)
    for it in (theirs, ours):
        it.allocate_tensors()
    for _ in range(3):
        want, got = [(it.invoke(), it.get_tensor(it.get_output_details()[0]["index"]))[1] for it in (theirs, ours)]
        if op == "RANDOM_UNIFORM":
            assert np.array_equal(got, want)
        else:
            assert_allclose_rel(got, want, 1e-5)


def test_random_without_seeds_is_random():
    data = _random_model("RANDOM_UNIFORM", (1000,), 0, 0)
    a, b = (run_litegpu(data, [])[0] for _ in range(2))
    assert a.min() >= 0 and a.max() < 1 and 0.4 < a.mean() < 0.6 and not np.array_equal(a, b)


@pytest.mark.parametrize("batch, classes, samples, seed, seed2, dtype",
                         [(2, 5, 7, 3, 4, "int64"), (3, 10, 20, 99, 0, "int32"), (1, 3, 1, 7, 7, "int64")])
def test_multinomial_with_fixed_seeds(batch, classes, samples, seed, seed2, dtype):
    import litegpu
    from ai_edge_litert import interpreter as litert

    b = ModelBuilder()
    x = b.input("x", (batch, classes))
    y = b.tensor("y", (batch, samples), dtype)
    b.op("MULTINOMIAL", [x, b.const("n", np.array(samples, np.int32))], [y], seed=seed, seed2=seed2)
    b.output(y)
    data = b.build()
    logits = np.random.default_rng(batch).normal(0, 2, (batch, classes)).astype(np.float32)
    logits[0, 1] = -np.inf  # a class that is never drawn
    theirs = litert.Interpreter(model_content=data, experimental_op_resolver_type=(
        litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
    ours = litegpu.Interpreter(model_content=data)
    for it in (theirs, ours):
        it.allocate_tensors()
    for _ in range(3):  # the stream jumps ahead per invoke
        outs = []
        for it in (theirs, ours):
            it.set_tensor(it.get_input_details()[0]["index"], logits)
            it.invoke()
            outs.append(it.get_tensor(it.get_output_details()[0]["index"]))
        assert outs[1].dtype == outs[0].dtype and np.array_equal(outs[1], outs[0])
