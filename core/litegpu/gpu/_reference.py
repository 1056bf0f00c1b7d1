"""A pure-numpy evaluator of a :class:`GpuGraph`: the executable meaning of the GPU graph.

The compiler tests run a graph before and after each pass through
:func:`evaluate` and compare both with LiteRT, so every pass is checked for
keeping the graph's meaning.  It also serves the runtime authors as the
specification of each node form the passes create (explicit padding with a
pad value, epilogue chains, BHWC-normalised attributes) and can simulate fp16
storage (``storage="float16"`` rounds every stored tensor and constant).

Each op's numpy function is its op table entry's ``ref`` (``gpu/ops/``, functions in
``_reference_ops.py``); this module only walks the graph, applies epilogues and rounds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .._errors import DelegateError
from ._graph import Epilogue, GpuGraph, residual_index
from ._reference_ops import RefContext, dw_pw_expansion, qdq, resize_bilinear_to, zero_extend
from .ops import OPS

__all__ = ["evaluate", "apply_epilogue", "max_pool_windows"]


def max_pool_windows(x: np.ndarray, k: int) -> np.ndarray:
    """``x`` (4-D) max-pooled over ``k x k`` windows at stride ``k``, windows in bounds only (VALID)."""
    b, h, w, c = x.shape
    oh, ow = (h - k) // k + 1, (w - k) // k + 1
    return x[:, :oh * k, :ow * k].reshape(b, oh, k, ow, k, c).max(axis=(2, 4))


def apply_epilogue(x: np.ndarray, steps: Sequence[Epilogue], values: Mapping[int, np.ndarray]) -> np.ndarray:
    """Apply a node's epilogue chain to its result (4-D)."""
    for e in steps:
        if e.op == "QDQ":
            x = qdq(x, *e.q)
        elif e.operand is None:
            x = OPS[e.op].ref(x, {"alpha": e.alpha} if e.alpha is not None else {})
        else:
            other = values[e.operand]
            if e.pool:  # a MAX_POOL_2D merged into the read
                other = max_pool_windows(other, e.pool)
            if e.resize is not None:  # a RESIZE_BILINEAR to the result's H x W merged into the read
                other = resize_bilinear_to(other, x.shape[1], x.shape[2], *e.resize)
            if e.zero_extend:  # fewer channels than x, zero past them (a merged channel PAD)
                other = zero_extend(other, x.shape[3])
            f = OPS[e.op].ref
            x = f(other, x) if e.reverse else f(x, other)
        x = x.astype(np.float32, copy=False) if x.dtype == np.float64 else x
    return x


def _eval_node(c: RefContext) -> list[np.ndarray]:
    n = c.n
    entry = OPS.get(n.op)
    if entry is None or entry.ref is None:
        raise DelegateError(f"reference evaluator: no implementation of {n.op}")
    if entry.kernel == "binary":
        rhs = c.get(1)
        if n.attrs.get("zero_extend_rhs"):  # fewer channels than the result, zero past them (a merged channel PAD)
            rhs = zero_extend(rhs, c.out_shape()[3])
        return [entry.ref(c.get(0), rhs)]
    if entry.kernel == "unary":
        return [entry.ref(c.get(0), n.attrs)]
    return entry.ref(c)


def evaluate(graph: GpuGraph, inputs: Mapping[int, np.ndarray] | Sequence[np.ndarray], *,
             storage: str = "float32") -> dict[int, np.ndarray]:
    """Run ``graph`` on ``inputs`` (by tensor id, or a list in ``graph.inputs`` order).

    Returns every partition output by id, shaped like its IR shape.
    ``storage="float16"`` rounds constants and every stored result to fp16
    (arithmetic stays fp32), to estimate the error of fp16 storage; as the
    compiled plan does, it keeps tensors marked ``fp32`` (the
    ``mixed_precision`` pass) and the constants of nodes marked ``fp32`` in
    float32.
    """
    if not isinstance(inputs, Mapping):
        inputs = dict(zip(graph.inputs, inputs, strict=False))
    half = storage == "float16"

    def rnd(v: np.ndarray) -> np.ndarray:
        return v.astype(np.float16).astype(np.float32) if v.dtype == np.float32 else v

    readers = graph.consumers()
    keep = {t for t, x in graph.tensors.items()
            if x.fp32 or (x.is_constant and t in readers and all(n.fp32 for n in readers[t]))}
    if not half:
        keep = set(graph.tensors)
    values: dict[int, np.ndarray] = {}
    for t, x in graph.tensors.items():
        if x.data is not None and x.sparsity is None:
            d = np.asarray(x.data)
            values[t] = (d.reshape(x.shape) if t in keep else rnd(d.reshape(x.shape))) if d.size == x.size else d
    for t in graph.inputs:
        x = graph.tensors[t]
        v = np.asarray(inputs[t], dtype=x.dtype).reshape(x.shape)
        values[t] = v if t in keep else rnd(v)
    for node in graph.nodes:
        ctx = RefContext(graph, node, values, OPS)
        try:
            results = _eval_node(ctx)
        except DelegateError:
            raise
        except Exception as e:  # a broken graph must say which node
            raise DelegateError(f"reference evaluator failed on {node.describe()}: {e}") from e
        for k, (t, r) in enumerate(zip(node.outputs, results, strict=False)):
            x = graph.tensors[t]
            r = np.asarray(r)
            if r.dtype == np.float64:
                r = r.astype(np.float32)
            r = r.reshape(x.shape)
            if k == 0 and node.epilogue:
                if node.attrs.get("store_pre"):  # outputs[1]: the value just before the residual step
                    j = residual_index(node.epilogue)
                    r = apply_epilogue(r, node.epilogue[:j], values)
                    pre = graph.tensors[node.outputs[1]]
                    values[node.outputs[1]] = r.reshape(pre.shape).astype(pre.dtype, copy=False)
                    if node.outputs[1] not in keep:
                        values[node.outputs[1]] = rnd(values[node.outputs[1]])
                    r = apply_epilogue(r, node.epilogue[j:], values)
                else:
                    r = apply_epilogue(r, node.epilogue, values)
            r = r.astype(x.dtype, copy=False)
            values[t] = r if t in keep else rnd(r)
            if k == 0 and node.attrs.get("expand"):  # outputs[1]: the next 1x1 conv of the stored result
                z = graph.tensors[node.outputs[1]]
                e = dw_pw_expansion(ctx, values[t]).reshape(z.shape).astype(z.dtype, copy=False)
                values[node.outputs[1]] = e if node.outputs[1] in keep else rnd(e)
    return {t: values[t].reshape(graph.tensors[t].ir_shape) for t in graph.outputs}
