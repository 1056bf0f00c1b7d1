"""Run a model in LiteRT (the oracle) and in litegpu, and compare the answers.

LiteRT (``ai-edge-litert``) is a test and benchmark dependency only, so it is
imported lazily; a clear error says how to install it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["run_litert", "run_litegpu", "run_invokes", "rel_error", "assert_allclose_rel", "random_inputs"]


def _litert():
    try:
        from ai_edge_litert import interpreter as litert
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("the LiteRT oracle needs `pip install ai-edge-litert`") from e
    return litert


def run_litert(model: bytes | str, inputs: Sequence[np.ndarray], *, reference: bool = True,
               num_threads: int = 1) -> list[np.ndarray]:
    """Outputs of LiteRT (reference kernels by default) for ``inputs`` in input order."""
    litert = _litert()
    kw: dict[str, Any] = {"num_threads": num_threads}
    if reference:
        kw["experimental_op_resolver_type"] = litert.OpResolverType.BUILTIN_REF
    src = {"model_path": model} if isinstance(model, str) else {"model_content": bytes(model)}
    it = litert.Interpreter(**src, **kw)
    return _run(it, inputs)


def run_litegpu(model: bytes | str, inputs: Sequence[np.ndarray], delegates: Sequence[Any] | None = None,
                **kw: Any) -> list[np.ndarray]:
    """Outputs of ``litegpu.Interpreter`` for ``inputs`` in input order."""
    import litegpu

    src = {"model_path": model} if isinstance(model, str) else {"model_content": bytes(model)}
    it = litegpu.Interpreter(**src, experimental_delegates=list(delegates or []), **kw)
    return _run(it, inputs)


def _run(it: Any, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    details = it.get_input_details()
    if len(details) != len(inputs):
        raise ValueError(f"model has {len(details)} inputs, got {len(inputs)}")
    for d, x in zip(details, inputs, strict=False):
        x = np.asarray(x)
        if tuple(d["shape"]) != x.shape:
            it.resize_tensor_input(d["index"], list(x.shape))
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs, strict=False):
        it.set_tensor(d["index"], np.asarray(x, dtype=d["dtype"]))
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def run_invokes(model: bytes, feeds: Sequence[Sequence[np.ndarray]], *, litegpu: bool = False,
                reset_before: Sequence[int] = ()) -> list[list[np.ndarray]]:
    """Outputs of one interpreter over several invokes (models with state: variables persist between
    invokes): ``feeds[k]`` are the inputs of invoke k; ``reset_all_variables`` runs before each
    invoke listed in ``reset_before``.  LiteRT's reference kernels, or ``litegpu`` on the CPU."""
    if litegpu:
        import litegpu as lg

        it = lg.Interpreter(model_content=bytes(model))
    else:
        litert = _litert()
        it = litert.Interpreter(model_content=bytes(model), num_threads=1,
                                experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    outs = []
    for k, inputs in enumerate(feeds):
        if k in reset_before:
            it.reset_all_variables()
        for d, x in zip(it.get_input_details(), inputs, strict=True):
            it.set_tensor(d["index"], np.asarray(x, dtype=d["dtype"]))
        it.invoke()
        outs.append([np.array(it.get_tensor(d["index"])) for d in it.get_output_details()])
    return outs


def rel_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """max |actual - expected| / max(max |expected|, tiny); NaN anywhere -> inf.  Complex values
    compare as their (real, imaginary) pairs."""
    if np.iscomplexobj(actual) or np.iscomplexobj(expected):
        return rel_error(np.asarray(actual, np.complex128).view(np.float64),
                         np.asarray(expected, np.complex128).view(np.float64))
    a = np.asarray(actual, np.float64)
    e = np.asarray(expected, np.float64)
    if a.shape != e.shape:
        raise AssertionError(f"shape {a.shape} != expected {e.shape}")
    if np.isnan(a).any() != np.isnan(e).any():
        return float("inf")
    mask = ~(np.isnan(e) | np.isinf(e))
    if not mask.any():
        return 0.0
    if not np.array_equal(np.isinf(a), np.isinf(e)):
        return float("inf")
    denom = max(float(np.max(np.abs(e[mask]))), 1e-30)
    return float(np.max(np.abs(a[mask] - e[mask]))) / denom if a.size else 0.0


def assert_allclose_rel(actual: np.ndarray, expected: np.ndarray, tol: float) -> float:
    """Assert ``rel_error <= tol`` (exact equality for integer/bool dtypes); returns the error."""
    a, e = np.asarray(actual), np.asarray(expected)
    if a.dtype != e.dtype:
        raise AssertionError(f"dtype {a.dtype} != expected {e.dtype}")
    if a.dtype.kind in "iub":
        if a.shape != e.shape or not np.array_equal(a, e):
            bad = int(np.sum(a != e)) if a.shape == e.shape else -1
            raise AssertionError(f"integer outputs differ in {bad} of {e.size} elements")
        return 0.0
    err = rel_error(a, e)
    if not err <= tol:
        raise AssertionError(f"relative error {err:.3e} > {tol:.1e}")
    return err


def random_inputs(details: Sequence[dict], seed: int = 0) -> list[np.ndarray]:
    """Random inputs for LiteRT-style input details (Gaussian floats, ranged ints)."""
    rng = np.random.default_rng(seed)
    out = []
    for d in details:
        shape = tuple(int(s) for s in d["shape"])
        dt = np.dtype(d["dtype"])
        if dt.kind == "f":
            out.append(rng.standard_normal(shape).astype(dt))
        elif dt.kind == "b":
            out.append(rng.integers(0, 2, shape).astype(bool))
        else:
            info = np.iinfo(dt)
            lo, hi = max(info.min, -100), min(info.max, 100)
            out.append(rng.integers(lo, hi + 1, shape).astype(dt))
    return out
