"""Recurrent ops: LSTM (the basic kernel) and UNIDIRECTIONAL_SEQUENCE_LSTM have checks and references but
no lowering: the ``expand_lstm`` / ``expand_sequence_lstm`` passes rewrite them into matrix products,
elementwise ops and ``LSTM_CELL`` nodes, whose kernel ``lstm_cell`` is in ``shaders/lstm.lgk``.
"""

from __future__ import annotations

import numpy as np

from ..._delegate import NodeView
from ..._errors import DelegateError
from .. import _layout as L
from .. import _reference_ops as rf
from .._graph import GpuOp
from .._kernel_specs import KernelSpec, Opt, boolean, spec
from .._lstm_integer import (
    CONSTANTS,
    INTEGER_LSTM_OP,
    LSTM_INT8_CAPS,
    LSTM_INT8_GROUPS,
    integer_lstm_reference,
    integer_reason,
)
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


def _pow2_at_least(n: int, choices: tuple[int, ...]) -> int:
    return next((c for c in choices if c >= n), choices[-1])


def lower_integer_lstm(lw: Lowerer) -> list[GpuOp]:
    """``INTEGER_SEQUENCE_LSTM`` -> one ``lstm_int8`` launch (one work group per batch row, all steps)."""
    n, g = lw.n, lw.g
    x, h, c, *consts = n.inputs
    y, h_out, c_out = n.outputs
    a = n.attrs
    time_major = bool(a["time_major"])
    xs = g.tensors[x].shape
    steps, batch = (xs[0], xs[2]) if time_major else (xs[2], xs[0])
    n_cell, n_in, n_out = int(a["n_cell"]), int(a["n_input"]), int(a["n_output"])
    views = {}
    for name, t in (("X", x), ("H", h), ("C", c), ("Y", y)):
        v = g.tensors[t].qview
        if v is None:
            raise DelegateError(f"{n.describe()}: tensor {g.tensors[t].name!r} has no float view (run float_view)")
        views[name] = v
    for binding, t in (("x", x), ("h_in", h), ("c_in", c)):
        lw.bind(binding, t)
    for name, t in zip(CONSTANTS, consts, strict=True):
        lw.const(name, np.ascontiguousarray(np.asarray(g.tensors[t].data), np.int32).reshape(-1))
    for binding, t in (("y", y), ("h_out", h_out), ("c_out", c_out)):
        lw.bind(binding, t)
    s_in, s_cell, s_out = -(-n_in // 4), -(-n_cell // 4), -(-n_out // 4)
    params = {"B": batch, "T": steps, "NIN": n_in, "SIN": s_in, "NC": n_cell, "SC": s_cell, "NOUT": n_out,
              "SOUT": s_out,
              "TIME_MAJOR": int(time_major),
              "X_SCALE": float(views["X"].scale), "X_ZP": int(views["X"].zero_point),
              "H_SCALE": float(views["H"].scale), "H_ZP": int(views["H"].zero_point),
              "C_SCALE": float(views["C"].scale), "Y_SCALE": float(views["Y"].scale),
              "Y_ZP": int(views["Y"].zero_point),
              **{k: int(a[k]) for k in ("HID_M", "HID_S", "HID_ZP", "CELL_CLIP", "CELL_SHIFT", "PROJ_OFF",
                                        "PROJ_M", "PROJ_S", "OUT_ZP", "PROJ_CLIP")}}
    opts = {"group": _pow2_at_least(max(n_cell, n_out), LSTM_INT8_GROUPS),
            "cap": _pow2_at_least(4 * max(s_in, s_cell, s_out), LSTM_INT8_CAPS),
            "cifg": bool(a["cifg"]), "peephole": bool(a["peephole"]), "projection": bool(a["projection"])}
    return [lw.op("lstm_int8", opts, params)]


def check_any_lstm(node: NodeView) -> str:
    """The check of LSTM and UNIDIRECTIONAL_SEQUENCE_LSTM.  Float ones: :func:`check_lstm` /
    :func:`check_sequence_lstm`; an int8 one the integer kernel takes is accepted (the
    ``integer_sequence_lstm`` pass gives it to ``lstm_int8``, bit-exact); an int8 sequence LSTM it does
    not take goes to the float view's check (``expand_sequence_lstm``, within 1 LSB); other quantized
    LSTMs are declined with the reason."""
    seq = node.op.name == "UNIDIRECTIONAL_SEQUENCE_LSTM"
    float_check = check_sequence_lstm if seq else check_lstm
    x = node.inputs[0]
    if x is None or x.dtype not in ("int8", "uint8"):
        return float_check(node)
    reason = integer_reason(node, seq)
    if not reason:
        return ""
    if seq:
        return float_check(node) and reason
    return reason


# ---------------------------------------------------------------------------------------------------------
# kernels (shaders/lstm.lgk) and table entries
# ---------------------------------------------------------------------------------------------------------

KERNELS: tuple[KernelSpec, ...] = (
    spec("lstm_cell", "lstm.lgk", "LSTM cell: gates (i, g, f, o) + previous state -> state, output; peephole",
         {"peephole": Opt(False, (False, True))}, [{}, {"peephole": True}], default_wg=(32, 2, 1)),
    # one group per batch row runs the whole sequence: the group is fixed by the template
    spec("lstm_int8", "lstm.lgk", "full-integer (8x8_16) sequence LSTM, bit-exact: every step, one group per row",
         {"group": Opt(32, LSTM_INT8_GROUPS), "cap": Opt(64, LSTM_INT8_CAPS), "cifg": boolean(), "peephole": boolean(),
          "projection": boolean()},
         [{}, {"group": 4, "cap": 16}, {"group": 8, "cap": 32, "cifg": True}, {"group": 16, "cap": 128, "peephole": True},
          {"group": 64, "cap": 256, "cifg": True, "peephole": True}, {"group": 128, "cap": 512, "projection": True},
          {"group": 128, "cap": 1024, "cifg": True, "peephole": True, "projection": True}],
         shared_wg=lambda opts: (opts["group"], 1, 1)),
)

OPS: dict[str, GpuOpEntry] = {
    # (an int8 full-kernel LSTM: the integer_sequence_lstm pass, one step of the bit-exact kernel)
    "LSTM": GpuOpEntry(None, None, check_any_lstm, {2: "weights", 3: "bias"}, ref=rf.lstm),
    "LSTM_CELL": GpuOpEntry("lstm_cell", lower_lstm_cell, claimed=False, ref=rf.lstm_cell),
    # the integer_sequence_lstm pass makes it of a full-integer UNIDIRECTIONAL_SEQUENCE_LSTM (bit-exact)
    INTEGER_LSTM_OP: GpuOpEntry("lstm_int8", lower_integer_lstm, claimed=False, ref=integer_lstm_reference),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": GpuOpEntry(None, None, check_any_lstm,
                                               {**{i: "weights" for i in range(1, 9)},
                                                **{i: "bias" for i in range(12, 16)},
                                                16: "weights", 17: "bias"}, ref=rf.sequence_lstm),
}
