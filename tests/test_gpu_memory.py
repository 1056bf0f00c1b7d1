"""Memory planner, PHWC4/weight layouts and precision policy of the GPU compiler.

Run as a script (``PYTHONPATH=core python3 tests/test_gpu_memory.py``) to print the per-model table of
docs/gpu-compiler.md.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
from litegpu import ConfigError
from litegpu.gpu import _layout as L
from litegpu.gpu._graph import GpuGraph, GpuNode
from litegpu.gpu._memory import plan_arena, plan_graph_memory, tensor_lifetimes
from litegpu.gpu._passes import run_passes
from litegpu.gpu._precision import FP16_MAX, fp16_risks, precision_policy
from litegpu.models import MEDIAPIPE_MODELS

RNG = np.random.default_rng(7)

# ----------------------------------------------------------------------------------------------------------
# arena planning
# ----------------------------------------------------------------------------------------------------------


def test_chain_reaches_lower_bound_and_respects_alignment():
    # a chain t0 -> t1 -> t2 -> t3: two live at a time
    sizes = {0: 1000, 1: 3000, 2: 500, 3: 2000}
    lifetimes = {0: (0, 1), 1: (1, 2), 2: (2, 3), 3: (3, 4)}
    plan = plan_arena(sizes, lifetimes, alignment=256)
    plan.check()
    assert all(off % 256 == 0 for off in plan.offsets.values())
    assert plan.lower_bound == 1024 + 3072  # sizes rounded up to 256
    assert plan.arena_bytes == plan.lower_bound
    assert plan.naive_bytes == 1024 + 3072 + 512 + 2048


def test_residual_lifetimes():
    # a long-lived skip tensor must not be overwritten by the branch in between
    sizes = {0: 4096, 1: 4096, 2: 4096, 3: 4096}
    lifetimes = {0: (0, 3), 1: (1, 2), 2: (2, 3), 3: (3, 4)}
    plan = plan_arena(sizes, lifetimes, alignment=64)
    plan.check()
    assert plan.offsets[0] not in (plan.offsets[1], plan.offsets[2])
    assert plan.arena_bytes == plan.lower_bound == 3 * 4096


@pytest.mark.parametrize("seed", range(20))
def test_random_lifetimes_never_overlap(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    first = rng.integers(0, 40, n)
    span = rng.integers(0, 12, n)
    sizes = {t: int(rng.integers(1, 100_000)) for t in range(n)}
    lifetimes = {t: (int(first[t]), int(first[t] + span[t])) for t in range(n)}
    plan = plan_arena(sizes, lifetimes, alignment=128)
    plan.check()
    assert plan.lower_bound <= plan.arena_bytes <= plan.naive_bytes
    assert all(plan.offsets[t] % 128 == 0 for t in plan.offsets)


def test_empty_and_bad_alignment():
    plan = plan_arena({}, {})
    assert plan.arena_bytes == plan.lower_bound == plan.naive_bytes == 0 and plan.ratio == 1.0
    for bad in (0, 3, -256):
        with pytest.raises(ConfigError, match="alignment"):
            plan_arena({0: 10}, {0: (0, 0)}, alignment=bad)


def test_lifetimes_exclude_boundary_tensors():
    from litegpu.gpu._graph import GpuTensor

    def t(i):
        return GpuTensor(i, f"t{i}", (1, 2, 2, 3), "float32", (1, 2, 2, 3))

    tensors = {i: t(i) for i in range(5)}
    nodes = [GpuNode(0, "RELU", [0], [1]), GpuNode(1, "RELU", [1], [2]), GpuNode(2, "ADD", [2, 1], [3]),
             GpuNode(3, "RELU", [3], [4])]
    g = GpuGraph(tensors, nodes, [0], [4, 2])
    assert tensor_lifetimes(g) == {1: (0, 2), 3: (2, 3)}


# ----------------------------------------------------------------------------------------------------------
# layouts
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("c", [1, 3, 4, 5, 8, 13])
def test_phwc4_round_trip_and_definition(c):
    x = RNG.standard_normal((2, 3, 5, c)).astype(np.float32)
    y = L.bhwc_to_phwc4(x)
    assert y.shape == (2, (c + 3) // 4, 3, 5, 4) and y.flags.c_contiguous
    b, s, h, w, k = np.indices(y.shape)
    ch = 4 * s + k
    inside = ch < c
    np.testing.assert_array_equal(y[inside], x[b[inside], h[inside], w[inside], ch[inside]])
    assert not y[~inside].any()  # padded lanes are zero
    np.testing.assert_array_equal(L.phwc4_to_bhwc(y, c), x)
    assert L.phwc4_nbytes((2, 3, 5, c), 2) == y.size * 2
    ir = x.reshape(2, 3 * 5, c) if c > 1 else x
    np.testing.assert_array_equal(L.from_device(L.to_device(ir, x.shape, "float16"), x.shape, ir.shape),
                                  ir.astype(np.float16).astype(np.float32))


def test_conv_and_fc_weight_layouts_follow_their_definitions():
    w = RNG.standard_normal((7, 3, 2, 5)).astype(np.float32)  # OHWI
    p = L.conv_weights(w)
    assert p.shape == (2, 3, 2, 8, 4)
    s, y, x, i, k = np.indices(p.shape)
    o = 4 * s + k
    inside = (o < 7) & (i < 5)
    np.testing.assert_array_equal(p[inside], w[o[inside], y[inside], x[inside], i[inside]])
    assert not p[~inside].any()

    d = RNG.standard_normal((1, 3, 3, 6)).astype(np.float32)
    q = L.depthwise_weights(d)
    assert q.shape == (2, 3, 3, 4)
    s, y, x, k = np.indices(q.shape)
    inside = 4 * s + k < 6
    np.testing.assert_array_equal(q[inside], d[0, y[inside], x[inside], (4 * s + k)[inside]])

    f = RNG.standard_normal((5, 6)).astype(np.float32)
    r = L.fc_weights(f, "float16")
    assert r.shape == (2, 8, 4) and r.dtype == np.float16
    s, i, k = np.indices(r.shape)
    inside = (4 * s + k < 5) & (i < 6)
    np.testing.assert_array_equal(r[inside], f[(4 * s + k)[inside], i[inside]].astype(np.float16))

    v = L.channel_vector(np.arange(6, dtype=np.float32), 6)
    np.testing.assert_array_equal(v, [[0, 1, 2, 3], [4, 5, 0, 0]])


# ----------------------------------------------------------------------------------------------------------
# precision
# ----------------------------------------------------------------------------------------------------------


def test_precision_policy():
    with pytest.raises(ConfigError, match="fp16_fp32acc"):
        precision_policy("half")
    conv, add, mean = GpuNode(0, "CONV_2D", [], []), GpuNode(1, "ADD", [], []), GpuNode(2, "MEAN", [], [])
    assert [precision_policy("fp32").accumulator(n) for n in (conv, add, mean)] == ["float32"] * 3
    assert [precision_policy("fp16").accumulator(n) for n in (conv, add, mean)] == ["float16"] * 3
    assert [precision_policy("fp16_fp32acc").accumulator(n) for n in (conv, add, mean)] == \
        ["float32", "float16", "float32"]
    p = precision_policy("fp16")
    assert p.constant(np.ones(3, np.float32)).dtype == np.float16
    assert p.constant(np.ones(3, np.int32)).dtype == np.int32
    assert p.itemsize == 2 and precision_policy("fp32").itemsize == 4


def test_fp16_risks_flag_out_of_range_constants():
    from litegpu.gpu._graph import GpuTensor

    big = np.array([1.0, -70000.0, 3.0], np.float32)
    tiny = np.array([1e-9, 0.0], np.float32)
    ok = np.array([FP16_MAX, -1.0], np.float32)
    tensors = {i: GpuTensor(i, n, (1, 1, 1, a.size), "float32", a.shape, data=a)
               for i, (n, a) in enumerate((("big", big), ("tiny", tiny), ("ok", ok)))}
    risks = fp16_risks(GpuGraph(tensors, [], [], []))
    assert len(risks) == 2 and "'big'" in risks[0] and "beyond" in risks[0] and "'tiny'" in risks[1]


# ----------------------------------------------------------------------------------------------------------
# MediaPipe models: planned arena within 1.1x of the lower bound
# ----------------------------------------------------------------------------------------------------------

MEDIAPIPE = sorted(MEDIAPIPE_MODELS)  # paths come from the mediapipe_models fixture (tests/conftest.py)
_CUSTOM = ("Landmarks2TransformMatrix", "TransformTensorBilinear", "TransformLandmarks")


def _mediapipe_graph(path: str) -> GpuGraph:
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from _gpu_tflite import read_model
    from litegpu.gpu._runtime import supports  # noqa: F401  (the same set the partitioner would claim)

    m = read_model(path)
    ops = m.main.operators
    # the GPU-supported prefix (face_landmark_with_attention has MediaPipe custom ops further on)
    cut = next((i for i, o in enumerate(ops) if o.name in _CUSTOM), len(ops))
    g = GpuGraph.from_subgraph(m.main, range(cut))
    run_passes(g)
    return g


@pytest.mark.mediapipe
@pytest.mark.parametrize("name", MEDIAPIPE)
@pytest.mark.parametrize("itemsize", [4, 2])
def test_mediapipe_arena_within_10_percent_of_lower_bound(name, itemsize, mediapipe_models):
    path = str(mediapipe_models[name])
    plan = plan_graph_memory(_mediapipe_graph(path), itemsize=itemsize, alignment=256)
    plan.check()
    assert plan.ratio <= 1.1, plan.summary()
    assert plan.arena_bytes < plan.naive_bytes


def _table() -> None:
    from litegpu.gpu._memory import _orders, _place

    print("| model | GPU ops | intermediates | planned (fp32) | lower bound | naive | planned / lower bound |"
          " planned / naive | greedy-by-size alone / lower bound | winning order |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    from litegpu.models import fetch_mediapipe

    for path in (str(p) for _, p in sorted(fetch_mediapipe().items())):
        g = _mediapipe_graph(path)
        p = plan_graph_memory(g, itemsize=4, alignment=256)
        name = path.rsplit("/", 1)[-1]
        by_size = _place(_orders(p.sizes, p.lifetimes)["size"], p.sizes, p.lifetimes, True)
        size_only = max(by_size[t] + p.sizes[t] for t in by_size) / p.lower_bound
        print(f"| {name} | {len(g.nodes)} | {len(p.offsets)} | {p.arena_bytes / 2**20:.3f} MiB | "
              f"{p.lower_bound / 2**20:.3f} MiB | {p.naive_bytes / 2**20:.3f} MiB | {p.ratio:.3f} | "
              f"{p.arena_bytes / p.naive_bytes:.3f} | {size_only:.3f} | {p.strategy} |")


if __name__ == "__main__":
    _table()
