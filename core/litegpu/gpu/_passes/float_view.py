"""Quantized tensors become float tensors (the float view); quantized results are snapped to their grid."""

from __future__ import annotations

import logging
from collections import Counter

import numpy as np

from ..._errors import DelegateError
from .._graph import QDQ_OP, Epilogue, GpuGraph, GpuNode, QuantView, Report
from .._quant import (
    BYTE_OPS,
    DYNAMIC_QDQ_OP,
    GRID_KEEPING,
    HYBRID_RESCALE_OP,
    INPUT_RANGE_OP,
    MOVE_OPS,
    WEIGHTED,
    HybridInput,
    hybrid_input,
    node_qdtype,
    quantize_rows,
    range_groups,
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
      TRANSPOSE_CONV, FULLY_CONNECTED with a float input and int8 constant weights) computes what
      LiteRT's hybrid kernel computes: its input quantized per row on the fly, integer products, the
      sums scaled back in LiteRT's float order (:func:`_hybrid_integer_ops`).  Without it its weights
      are dequantized like any quantized constant and it computes LiteRT's float twin.
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
    # hybrid nodes: on LiteRT's integers (before the constants loop: their weights stay integers)
    if simulate:
        lines += _hybrid_integer_ops(g, _hybrid_nodes(g, views))

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
        if wt.dtype != "int8" or np.any(np.asarray(wt.quantization.zero_point) != 0):
            out.append((n, f"{wt.dtype} weights with zero point(s) {np.asarray(wt.quantization.zero_point)[:4]} "
                           "(LiteRT's hybrid weights are symmetric int8)"))
            continue
        out.append((n, hybrid_input(n.op, n.attrs, g.tensors[x].shape, wt)))
    return out


def _hybrid_integer_ops(g: GpuGraph, hybrid: list[tuple[GpuNode, HybridInput | str]]) -> Report:
    """Each hybrid node computes what LiteRT's hybrid kernel computes, on integer-valued floats:

    ``x -> [HYBRID_INPUT_RANGE] -> HYBRID_INPUT_QDQ -> (q - zp, row scales)``; the node reads ``q - zp``
    and its int8 weights' integers (no bias, no epilogue, float32 even in the fp16 modes: its sums are
    LiteRT's integer sums, exact below 2^24); ``HYBRID_RESCALE`` multiplies them by the weight and row
    scales in LiteRT's order; an ``ADD`` of the bias (a launch of its own, so the multiply and the add
    round apart as in LiteRT) carries the node's epilogue (its fused activation) into the original
    output.  Nodes reading one tensor on one grid share the first two nodes; a constant input is
    quantized here, once."""
    quantized: dict[tuple[int, str, str], tuple[int, int]] = {}
    ranges: dict[int, int] = {}
    counts: Counter[str] = Counter()
    skipped: list[str] = []
    order: list[GpuNode] = []
    pending = {id(n): how for n, how in hybrid}
    for n in g.nodes:
        how = pending.get(id(n))
        if how is None:
            order.append(n)
            continue
        if isinstance(how, str):
            skipped.append(f"{n.describe()}: {how}")
            order.append(n)
            continue
        xi, wi, bi, axis = WEIGHTED[n.op]
        x = n.inputs[xi]
        xt = g.tensors[x]
        key = (x, how.mode, how.per)
        if key not in quantized:
            if xt.is_constant:
                q, sc = quantize_rows(np.asarray(xt.data, np.float32).reshape(xt.shape), how.mode, how.per)
                quantized[key] = (g.add_constant(f"{xt.name}/int8", q.reshape(xt.ir_shape)), g.add_constant(
                    f"{xt.name}/int8_scale", sc))
            else:
                inputs = [x]
                if how.per == "batch":
                    if x not in ranges:
                        ranges[x] = g.add_tensor(f"{xt.name}/range", (xt.shape[0], 1, range_groups(xt.shape), 2))
                        order.append(g.new_node(INPUT_RANGE_OP, [x], [ranges[x]], origin=n.origin))
                    inputs.append(ranges[x])
                q = g.add_tensor(f"{xt.name}/int8", xt.shape)
                sc = g.add_tensor(f"{xt.name}/int8_scale", (xt.shape[0], 1, 1, 1) if how.per == "batch"
                                  else (*xt.shape[:3], 1))
                g.tensors[q].fp32 = g.tensors[sc].fp32 = True
                order.append(g.new_node(DYNAMIC_QDQ_OP, inputs, [q, sc], {"mode": how.mode, "per": how.per},
                                        origin=n.origin))
                order[-1].fp32 = True
                quantized[key] = (q, sc)
            counts[f"{how.mode} per {how.per}"] += 1
        q, sc = quantized[key]
        # the weights' integers, and their scales per output channel
        w = g.tensors[n.inputs[wi]]
        wq = np.asarray(w.data).reshape(w.ir_shape)
        channels = g.tensors[n.outputs[0]].shape[3]
        w_scale = np.asarray(w.quantization.scale, np.float32).reshape(-1)
        w_scale = np.broadcast_to(w_scale, (channels,)).copy() if w_scale.size == 1 else w_scale
        n.inputs[xi] = q
        n.inputs[wi] = g.add_constant(f"{w.name}/integers", wq.astype(np.float32))
        bias = n.inputs[bi] if bi < len(n.inputs) else -1
        if bi < len(n.inputs):
            n.inputs[bi] = -1
        out = n.outputs[0]
        yt = g.tensors[out]
        acc = g.add_tensor(f"{yt.name}/int_sums", yt.ir_shape, ir_shape=yt.ir_shape)
        g.tensors[acc].fp32 = n.fp32 = True
        n.outputs[0] = acc
        epilogue, n.epilogue = n.epilogue, []
        order.append(n)
        scaled = out if bias < 0 else g.add_tensor(f"{yt.name}/scaled", yt.ir_shape, ir_shape=yt.ir_shape)
        order.append(g.new_node(HYBRID_RESCALE_OP, [acc, sc, g.add_constant(f"{w.name}/scales", w_scale)], [scaled],
                                {"order": how.order, "per": how.per}, origin=n.origin))
        order[-1].fp32 = True  # LiteRT's float32 products, whatever the precision mode
        last = order[-1]
        if bias >= 0:
            bt = g.tensors[bias]
            b4 = bias if not bt.is_constant else g.add_constant(
                f"{bt.name}/bhwc", np.asarray(bt.data, np.float32).reshape(1, 1, 1, -1))
            last = g.new_node("ADD", [scaled, b4], [out], origin=n.origin)
            order.append(last)
        last.epilogue = epilogue
    g.nodes = order
    lines = []
    if counts:
        lines.append(f"{len(hybrid) - len(skipped)} hybrid nodes on LiteRT's integers, inputs quantized: "
                     + ", ".join(f"{c} {k}" for k, c in sorted(counts.items())))
    for why in skipped:
        # the node still runs (as the model's float twin), but further from LiteRT than the others: say so
        logging.getLogger("litegpu").warning("dynamic-range %s computed with dequantized weights, not LiteRT's "
                                             "integer arithmetic (about 1e-2 from LiteRT's CPU)", why)
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
