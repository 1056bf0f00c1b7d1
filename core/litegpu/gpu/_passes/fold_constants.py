"""Fold constant DENSIFY / DEQUANTIZE (and any node whose inputs are all constant) into constants."""

from __future__ import annotations

from collections import Counter

import numpy as np

from .._densify import densify
from .._graph import GpuGraph, Report
from .._reference import evaluate
from .._reference_ops import dequantize_array

__all__ = ["fold_constants"]

# folding is for small parameter tensors; a big computed constant would cost prepare time and memory
_MAX_FOLD_ELEMENTS = 1 << 22


def _kind(dtype: str, quant) -> str:
    if dtype == "float16":
        return "float16"
    if quant is not None and quant.scale.size > 1:
        return f"{dtype} per-channel"
    return f"{dtype} per-tensor"


def fold_constants(g: GpuGraph) -> Report:
    """Turn DENSIFY and DEQUANTIZE of constants, and other all-constant nodes, into constants.

    DENSIFY expands TFLite's sparse encoding (``_densify``); DEQUANTIZE turns
    float16 into float32 and int8/uint8/int16 (per-tensor or per-channel
    along ``quantized_dimension``) into ``scale * (q - zero_point)``.  Other
    nodes whose inputs are all constant are evaluated once with the reference
    evaluator.  Nodes writing a partition output are kept (the output must be
    written on the device).
    """
    counts: Counter[str] = Counter()
    lines: Report = []
    for node in list(g.nodes):
        reads = node.reads()
        if not reads or not all(g.is_constant(t) for t in reads):
            continue
        if any(g.tensors[t].is_output for t in node.outputs):
            continue
        src = g.tensors[node.inputs[0]]
        if node.op == "DENSIFY":
            if src.sparsity is None:
                data = np.asarray(src.data).reshape(src.ir_shape)
            else:
                data = densify(np.asarray(src.data), src.ir_shape, src.sparsity)
            what = f"DENSIFY {src.dtype}"
        elif node.op == "DEQUANTIZE":
            if src.sparsity is not None:
                continue  # its DENSIFY comes first; a sparse DEQUANTIZE input is malformed
            data = dequantize_array(np.asarray(src.data).reshape(src.ir_shape), src.quantization)
            what = f"DEQUANTIZE {_kind(src.dtype, src.quantization)}"
        else:
            if any(g.tensors[t].size > _MAX_FOLD_ELEMENTS for t in (*reads, *node.outputs)):
                continue
            if any(g.tensors[t].sparsity is not None for t in reads):
                continue
            sub = GpuGraph({t: g.tensors[t] for t in (*reads, *node.outputs)}, [node], [], node.outputs)
            for t in node.outputs:
                sub.tensors[t] = _as_output(g.tensors[t])
            res = evaluate(sub, {})
            for t in node.outputs:
                _make_constant(g, t, res[t])
            g.remove_node(node)
            counts[node.op] += 1
            lines.append(f"evaluated constant {node.describe()} -> t{node.outputs[0]}")
            continue
        _make_constant(g, node.outputs[0], data)
        g.remove_node(node)
        counts[what] += 1
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "nothing to fold"
    return [f"folded {sum(counts.values())} constant nodes: {summary}", *lines]


def _as_output(t):
    import copy

    c = copy.copy(t)
    c.is_output = True
    return c


def _make_constant(g: GpuGraph, t: int, value: np.ndarray) -> None:
    x = g.tensors[t]
    value = np.ascontiguousarray(np.asarray(value).reshape(x.ir_shape).astype(x.dtype, copy=False))
    value.flags.writeable = False
    x.data = value
    x.quantization = None
    x.sparsity = None
