"""Recurrent ops: LSTM (the basic kernel) and UNIDIRECTIONAL_SEQUENCE_LSTM have checks and references but
no lowering: the ``expand_lstm`` / ``expand_sequence_lstm`` passes rewrite them into matrix products,
elementwise ops and ``LSTM_CELL`` nodes, whose kernel ``lstm_cell`` is in ``shaders/lstm.lgk``.
"""

from __future__ import annotations

import numpy as np

from ..._delegate import NodeView
from .. import _layout as L
from .. import _reference_ops as rf
from .._graph import GpuOp
from .._kernel_specs import KernelSpec, Opt, spec
from ._entry import GpuOpEntry, Lowerer, opt

__all__ = ["OPS", "KERNELS"]


def check_lstm(node: NodeView) -> str:
    if opt(node, "kernel_type", 0) != 1:
        return "LSTM other than the basic kernel (kernel_type BASIC)"
    if len(node.op.inputs) != 5:
        return "basic LSTM needs 5 inputs"
    if opt(node, "fused_activation_function", 4) != 4:
        return "basic LSTM with an activation other than TANH"
    if opt(node, "proj_clip", 0.0):
        return "basic LSTM with proj_clip"
    x, h = node.inputs[0], node.inputs[1]
    if len(x.shape) != 2 or len(h.shape) != 2:
        return "basic LSTM with inputs of rank other than 2"
    if h.is_variable or node.inputs[4].is_variable:
        return "basic LSTM with variable state inputs (the new state is written back into them)"
    return ""


def check_sequence_lstm(node: NodeView) -> str:
    ins = node.op.inputs
    if len(ins) not in (20, 24):
        return "UNIDIRECTIONAL_SEQUENCE_LSTM needs 20 or 24 inputs"
    if ins[1] < 0 and (node.inputs[0].dtype != "float32" or ins[5] >= 0 or ins[12] >= 0):
        return "quantized UNIDIRECTIONAL_SEQUENCE_LSTM with CIFG (coupled input and forget gates)"
    if any(i >= 0 for i in ins[9:12]) and (node.inputs[0].dtype != "float32" or any(i >= 0 for i in ins[20:24])):
        return "UNIDIRECTIONAL_SEQUENCE_LSTM with peephole connections (quantized, or with layer norm)"
    if ins[16] >= 0 and node.inputs[0].dtype != "float32":
        return "quantized UNIDIRECTIONAL_SEQUENCE_LSTM with a projection"
    if ins[16] >= 0 and (node.inputs[16].data is None or (ins[17] >= 0 and node.inputs[17].data is None)):
        return "UNIDIRECTIONAL_SEQUENCE_LSTM with a projection not in the file"
    if any(i >= 0 for i in ins[20:24]) and (node.inputs[0].dtype != "float32" or any(
            node.inputs[k] is None or node.inputs[k].data is None for k in range(20 if ins[1] >= 0 else 21, 24))):
        return "quantized UNIDIRECTIONAL_SEQUENCE_LSTM with layer normalization"
    if opt(node, "fused_activation_function", 4) != 4:
        return "UNIDIRECTIONAL_SEQUENCE_LSTM with an activation other than TANH"
    x, h, c = node.inputs[0], node.inputs[18], node.inputs[19]
    if len(x.shape) != 3 or h is None or c is None or len(h.shape) != 2 or len(c.shape) != 2:
        return "UNIDIRECTIONAL_SEQUENCE_LSTM needs a 3-D input and 2-D states"
    if not (h.is_variable and c.is_variable):
        return "UNIDIRECTIONAL_SEQUENCE_LSTM whose states are not variable tensors"
    gate_inputs = (*range(1, 9), *range(12, 16)) if ins[1] >= 0 else (2, 3, 4, 6, 7, 8, 13, 14, 15)
    if any(node.inputs[i] is None or node.inputs[i].data is None for i in gate_inputs):
        return "UNIDIRECTIONAL_SEQUENCE_LSTM with weights or biases not in the file"
    return ""


def lower_lstm_cell(lw: Lowerer) -> list[GpuOp]:
    n = lw.n
    gates, prev_c = n.inputs[0], n.inputs[1]
    new_c, new_h = n.outputs
    lw.bind("gates", gates)
    lw.bind("prev_c", prev_c)
    c = lw.shape(new_c)[3]
    peep = n.inputs[2] if len(n.inputs) > 2 else -1
    if peep >= 0:  # (3, C): input, forget, output gate weights, one run of C slices each
        lw.const("peep", np.concatenate([L.channel_vector(p, c) for p in lw.data(peep).reshape(3, c)]))
    lw.bind("new_c", new_c)
    lw.bind("new_h", new_h)
    params = {"B": lw.shape(new_c)[0], "C": c, "S": L.slices(c), "CELL_CLIP": float(n.attrs.get("cell_clip", 0.0))}
    return [lw.op("lstm_cell", {"peephole": True} if peep >= 0 else {}, params)]


# ---------------------------------------------------------------------------------------------------------
# kernels (shaders/lstm.lgk) and table entries
# ---------------------------------------------------------------------------------------------------------

KERNELS: tuple[KernelSpec, ...] = (
    spec("lstm_cell", "lstm.lgk", "LSTM cell: gates (i, g, f, o) + previous state -> state, output; peephole",
         {"peephole": Opt(False, (False, True))}, [{}, {"peephole": True}], default_wg=(32, 2, 1)),
)

OPS: dict[str, GpuOpEntry] = {
    "LSTM": GpuOpEntry(None, None, check_lstm, {2: "weights", 3: "bias"}, ref=rf.lstm),
    "LSTM_CELL": GpuOpEntry("lstm_cell", lower_lstm_cell, claimed=False, ref=rf.lstm_cell),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": GpuOpEntry(None, None, check_sequence_lstm,
                                               {**{i: "weights" for i in range(1, 9)},
                                                **{i: "bias" for i in range(12, 16)},
                                                16: "weights", 17: "bias"}, ref=rf.sequence_lstm),
}
