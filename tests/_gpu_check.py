"""Shared checks of the GPU compiler tests: build -> LiteRT oracle -> GpuGraph -> passes -> evaluator."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
from _gpu_tflite import read_model
from litegpu.gpu._graph import GpuGraph
from litegpu.gpu._passes import Pass, run_passes
from litegpu.gpu._reference import evaluate

REL = 1e-5


def run_litert(model: bytes, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """LiteRT's reference kernels: the oracle."""
    from litegpu.testing import run_litert as shared

    try:
        return shared(model, list(inputs))
    except ValueError as e:  # a few ops (ELU) have no reference kernel: use the optimized one
        if "Didn't find op" not in str(e):
            raise
        return shared(model, list(inputs), reference=False)


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    if a.dtype == bool or b.dtype == bool:
        return float(np.any(a != b))
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)) if a.size else 0.0


def assert_rel(a: np.ndarray, b: np.ndarray, tol: float = REL, what: str = "") -> None:
    e = rel_err(a, b)
    assert e <= tol, f"{what}: relative error {e:.3g} > {tol:g}"


def graph_of(model: bytes) -> GpuGraph:
    return GpuGraph.from_subgraph(read_model(model).main)


def check_passes(model: bytes, inputs: Sequence[np.ndarray], passes: Sequence[Pass] | None = None,
                 tol: float = REL) -> tuple[GpuGraph, dict[str, list[str]]]:
    """Evaluate the graph before and after ``passes`` (default pipeline) and compare both with LiteRT."""
    ref = run_litert(model, inputs)
    g = graph_of(model)
    before = evaluate(g, list(inputs))
    for t, r in zip(g.outputs, ref, strict=False):
        assert_rel(before[t], r, tol, "reference evaluator vs LiteRT")
    g2 = g.copy()
    reports = run_passes(g2) if passes is None else run_passes(g2, passes)
    after = evaluate(g2, list(inputs))
    for t, r in zip(g2.outputs, ref, strict=False):
        assert_rel(after[t], r, tol, "after passes vs LiteRT")
    return g2, reports


#: template options that only say how a launch splits its work (the cost model's choice, ``gpu/_cost.py``)
_WORK_SPLIT = re.compile(r"\b(block_[ws]|split|pack|unroll|tile_[pshw]|kc|ksize|hcap|ke|kp|mc|threads)=\d+,?"
                         r"|\btwo_round=True,?")


def without_work_split(described: str) -> str:
    """A launch's ``describe()`` text without the work-split options the cost model picks per device, and
    conv2d_tiled (the same convolution, tiled) named conv2d: what a test of the plan's shape compares."""
    s = _WORK_SPLIT.sub("", described).replace(",]", "]").replace("[]", "")
    return s.replace("conv2d_tiled", "conv2d")
