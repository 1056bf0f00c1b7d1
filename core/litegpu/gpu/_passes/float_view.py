"""Quantized tensors become float tensors (the float view); quantized results are snapped to their grid."""

from __future__ import annotations

from collections import Counter

import numpy as np

from ..._errors import DelegateError
from .._graph import QDQ_OP, Epilogue, GpuGraph, GpuNode, QuantView, Report
from .._quant import (
    BYTE_OPS,
    DYNAMIC_QDQ_OP,
    GRID_KEEPING,
    INPUT_RANGE_OP,
    MOVE_OPS,
    WEIGHTED,
    HybridInput,
    hybrid_input,
    node_qdtype,
    range_groups,
    snap_rows,
    tensor_view,
)
from .._reference_ops import dequantize_array

__all__ = ["float_view", "QDQ_OP"]

#: the GPU-graph op that copies its input through its epilogue (a QDQ step, or nothing)

_INT = ("int8", "uint8", "int16")


def _simulate(g: GpuGraph) -> bool:
    return bool(g.options.get("quantization_simulation", True))


def float_view(g: GpuGraph) -> Report:
    """Run a quantized partition in floats, as LiteRT's GPU delegate does.

    * Quantized constants read by a node (int8/uint8/int16, per-tensor or per-channel) become float32
      ``scale * (q - zero_point)`` once, here.  An int32 bias of CONV_2D, DEPTHWISE_CONV_2D,
      FULLY_CONNECTED or TRANSPOSE_CONV is scaled by ``input scale * weight scale`` (per output channel),
      the scale its integer accumulator has in LiteRT.  Constants read by DEQUANTIZE/DENSIFY are left to
      ``fold_constants``.
    * Runtime quantized tensors become float32 tensors with a :class:`QuantView` (``qview``): partition
      inputs/outputs are converted on the host (``PlanTensor.quant``).
    * QUANTIZE becomes a ``QUANTIZE_AND_DEQUANTIZE`` node (a copy with a ``QDQ`` epilogue step onto the
      output's grid); DEQUANTIZE of a runtime tensor is a plain copy and is removed when it can be.
    * With ``quantization_simulation`` (the default) every node writing a quantized tensor that is read
      again (inside the partition, or by a later partition of the delegate) ends its epilogue with a
      ``QDQ`` step: clamp to the tensor's range and round to its grid.  Ops that only move, pick or pad
      values of operands on the same grid (``_quant.GRID_KEEPING``) skip it.  Host outputs are
      quantized on download anyway.  The fusion passes keep QDQ last; where a kernel takes no ``qdq``
      option, ``legalise_epilogues`` moves it into a node of its own.
    * With ``quantization_simulation``, a dynamic-range ("hybrid") node (CONV_2D, DEPTHWISE_CONV_2D,
      TRANSPOSE_CONV, FULLY_CONNECTED with a float input and int8 constant weights) reads its input
      snapped onto the int8 grid LiteRT's hybrid kernel quantizes it to on the fly, per row
      (:func:`_snap_hybrid_inputs`), so the float op with the dequantized weights computes LiteRT's
      integer product up to float summation order.
    """
    simulate = _simulate(g)
    consumers = g.consumers()
    counts: Counter[str] = Counter()
    lines: Report = []

    # views first, from the IR types, before anything is rewritten
    views: dict[int, QuantView] = {}
    for n in g.nodes:
        q = node_qdtype(n.op, [g.tensors[t] for t in (*n.inputs, *n.outputs) if t >= 0])
        for t in (*n.inputs, *n.outputs):
            if t < 0 or t in views or g.tensors[t].is_constant:
                continue
            v = tensor_view(g.tensors[t], n.op, q)
            if v is not None:
                views[t] = v
    if not views and not any(_quantized_constant(g, t) for n in g.nodes for t in n.inputs):
        return ["no quantized tensors"]
    # hybrid nodes, found while their weights are still int8
    hybrid = _hybrid_nodes(g, views) if simulate else []

    # constants read directly by the ops: dequantized once
    made: dict[tuple[int, int], int] = {}  # (tensor, how it is read) -> its float constant
    for n in g.nodes:
        if n.op in ("DEQUANTIZE", "DENSIFY"):
            continue
        orig = list(n.inputs)  # the bias scale needs the weights' quantization
        for i, t in enumerate(orig):
            if not _quantized_constant(g, t):
                continue
            x = g.tensors[t]
            bias_scale = None
            # ops on raw bytes read a constant's bytes on the output's grid (PADV2's pad value...)
            raw = views.get(n.outputs[0]) if n.op in BYTE_OPS and x.dtype in _INT else None
            if n.op in WEIGHTED and i == WEIGHTED[n.op][2] and x.dtype in ("int32", "int64"):
                xi, wi = WEIGHTED[n.op][:2]
                if orig[xi] in views and orig[wi] >= 0 and g.tensors[orig[wi]].quantization is not None:
                    w_scale = np.asarray(g.tensors[orig[wi]].quantization.scale, np.float64)
                    bias_scale = np.float64(views[orig[xi]].scale) * w_scale
            key = (t, hash(bias_scale.tobytes()) if bias_scale is not None else hash(raw))
            if key not in made:
                q = np.asarray(x.data).reshape(x.ir_shape)
                if bias_scale is not None:
                    value = (q.astype(np.float64) * bias_scale.reshape(-1)).astype(np.float32)
                    counts["int32 bias (input x weight scale)"] += 1
                elif raw is not None:
                    value = (q.astype(np.float32) - np.float32(raw.zero_point)) * np.float32(raw.scale)
                    counts[f"{x.dtype} (on the output's grid)"] += 1
                elif x.quantization is None:
                    value = q.astype(np.float32)
                    counts[f"{x.dtype} (no quantization)"] += 1
                else:
                    value = dequantize_array(q, x.quantization)
                    kind = "per-channel" if np.asarray(x.quantization.scale).size > 1 else "per-tensor"
                    counts[f"{x.dtype} {kind}"] += 1
                made[key] = g.add_constant(f"{x.name}/dequantized", value)
            n.inputs[i] = made[key]

    # a move whose output is quantized differently reinterprets the same integers: rescale the floats
    n_moves = 0
    for n in g.nodes:
        out = views.get(n.outputs[0]) if n.outputs else None
        src = views.get(n.inputs[0]) if n.inputs and n.inputs[0] >= 0 else None
        if n.op in MOVE_OPS and out is not None and src is not None and out != src:
            # out = (in / s_in + zp_in - zp_out) * s_out
            mul = np.float32(out.scale / src.scale)
            add = np.float32((src.zero_point - out.zero_point) * out.scale)
            n.epilogue += [Epilogue("MUL", g.add_constant(f"{g.tensors[n.outputs[0]].name}/rescale",
                                                          np.full((1, 1, 1, 1), mul, np.float32))),
                           Epilogue("ADD", g.add_constant(f"{g.tensors[n.outputs[0]].name}/reoffset",
                                                          np.full((1, 1, 1, 1), add, np.float32)))]
            n_moves += 1

    # runtime tensors: floats on the device, quantized on the host
    for t, v in views.items():
        x = g.tensors[t]
        x.dtype = "float32"
        x.qview = v

    # QUANTIZE / DEQUANTIZE, and the grid snapping of quantized results
    copies: list[GpuNode] = []
    n_qdq = 0
    for n in g.nodes:
        out = n.outputs[0] if n.outputs else -1
        view = views.get(out)
        if n.op == "DEQUANTIZE" and n.inputs[0] in views:
            n.op = QDQ_OP
            copies.append(n)
            continue
        if n.op == "QUANTIZE":
            n.op = QDQ_OP
            copies.append(n)
            if view is not None and _read_again(g, out, consumers):
                n.epilogue.append(Epilogue("QDQ", q=view.qdq))
                n_qdq += 1
            continue
        if not simulate or view is None or not _read_again(g, out, consumers) or n.op == QDQ_OP:
            continue
        if n.op in GRID_KEEPING and all(e.op == "RELU" for e in n.epilogue) and all(
                views.get(t) == view for t in _data_inputs(g, n)):
            continue
        for k in n.outputs[1:]:  # SPLIT-like nodes with several quantized outputs keep the grid (above)
            if k in views and _read_again(g, k, consumers):
                raise DelegateError(f"{n.describe()}: several quantized outputs to snap to their grids")
        n.epilogue.append(Epilogue("QDQ", q=view.qdq))
        n_qdq += 1

    removed = 0
    for n in copies:
        if not n.epilogue and g.bypass(n, n.inputs[0], n.outputs[0]):
            removed += 1

    if hybrid:
        lines += _snap_hybrid_inputs(g, hybrid)

    summary = ", ".join(f"{c} {k}" for k, c in sorted(counts.items())) or "none"
    lines.append(f"float view of {len(views)} quantized tensors; constants dequantized: {summary}")
    lines.append(f"{n_qdq} QDQ steps ({'simulation on' if simulate else 'simulation off: QUANTIZE only'}); "
                 f"{removed} DEQUANTIZE/QUANTIZE copies removed; {n_moves} moves between different grids rescaled")
    return lines


def _hybrid_nodes(g: GpuGraph, views: dict[int, QuantView]) -> list[tuple[GpuNode, HybridInput | str]]:
    """The dynamic-range nodes (float activation input, int8 quantized constant weights) and the grid
    LiteRT quantizes their input to, or why it cannot be followed."""
    out: list[tuple[GpuNode, HybridInput | str]] = []
    for n in g.nodes:
        if n.op not in WEIGHTED:
            continue
        xi, wi = WEIGHTED[n.op][:2]
        x = n.inputs[xi] if xi < len(n.inputs) else -1
        w = n.inputs[wi] if wi < len(n.inputs) else -1
        if x < 0 or w < 0 or x in views or g.tensors[x].dtype != "float32" or not g.is_constant(w):
            continue
        wt = g.tensors[w]
        if wt.dtype not in _INT or wt.quantization is None:
            continue
        out.append((n, hybrid_input(n.op, n.attrs, g.tensors[x].shape, wt)))
    return out


def _snap_hybrid_inputs(g: GpuGraph, hybrid: list[tuple[GpuNode, HybridInput | str]]) -> Report:
    """Each hybrid node reads its input snapped onto LiteRT's per-row int8 grid: a ``HYBRID_INPUT_QDQ``
    node (after a ``HYBRID_INPUT_RANGE`` for per-batch rows) right before it; nodes reading the same
    tensor on the same grid share them.  A constant input is snapped here, once."""
    snapped: dict[tuple[int, HybridInput], int] = {}
    ranges: dict[int, int] = {}
    before: dict[int, list[GpuNode]] = {}
    skipped: list[str] = []
    counts: Counter[str] = Counter()
    for n, how in hybrid:
        if isinstance(how, str):
            skipped.append(f"{n.describe()}: {how}")
            continue
        xi = WEIGHTED[n.op][0]
        x = n.inputs[xi]
        key = (x, how)
        if key not in snapped:
            xt = g.tensors[x]
            if xt.is_constant:
                value = snap_rows(np.asarray(xt.data, np.float32).reshape(xt.shape), how.mode, how.per)
                snapped[key] = g.add_constant(f"{xt.name}/int8_grid", value.reshape(xt.ir_shape))
            else:
                new = before.setdefault(n.id, [])
                inputs = [x]
                if how.per == "batch":
                    if x not in ranges:
                        ranges[x] = g.add_tensor(f"{xt.name}/range", (xt.shape[0], 1, range_groups(xt.shape), 2))
                        new.append(g.new_node(INPUT_RANGE_OP, [x], [ranges[x]], origin=n.origin))
                    inputs.append(ranges[x])
                snapped[key] = g.add_tensor(f"{xt.name}/int8_grid", xt.shape)
                new.append(g.new_node(DYNAMIC_QDQ_OP, inputs, [snapped[key]], {"mode": how.mode, "per": how.per},
                                      origin=n.origin))
            counts[f"{how.mode} per {how.per}"] += 1
        n.inputs[xi] = snapped[key]
    if before:
        g.nodes = [m for n in g.nodes for m in (*before.get(n.id, ()), n)]
    lines = []
    if counts:
        lines.append(f"{sum(counts.values())} hybrid inputs snapped to LiteRT's int8 grid: "
                     + ", ".join(f"{c} {k}" for k, c in sorted(counts.items())))
    lines += [f"not simulated (float input): {s}" for s in skipped]
    return lines


def _quantized_constant(g: GpuGraph, t: int) -> bool:
    if t < 0 or not g.is_constant(t):
        return False
    x = g.tensors[t]
    if x.sparsity is not None:
        return False
    return x.dtype in _INT or (x.dtype in ("int32", "int64") and x.quantization is not None)


def _read_again(g: GpuGraph, t: int, consumers: dict[int, list[GpuNode]]) -> bool:
    """Is ``t`` read after it is written: by a node of the partition or by a later partition on the device?"""
    x = g.tensors[t]
    return bool(consumers.get(t)) or (x.is_output and not x.host_output)


def _data_inputs(g: GpuGraph, n: GpuNode) -> list[int]:
    """The runtime inputs of ``n`` that carry values (not constants, shapes, axes or paddings)."""
    return [t for t in n.reads() if not g.is_constant(t) and g.tensors[t].dtype not in ("int32", "int64")]
