"""The full-integer (8x8_16) UNIDIRECTIONAL_SEQUENCE_LSTM and LSTM on the GPU, bit-exact with LiteRT.

The float view (``_passes/expand_lstm``) runs an int8 sequence LSTM as float kernels on dequantized
values with the states snapped to their grids after every step; LiteRT's integer kernel rounds with
fixed-point multipliers instead, so 4% of the int8 outputs came out one step off.  This path runs
LiteRT's integers themselves: :func:`integer_sequence_lstm` (a pass, before ``float_view``) replaces
the node with one ``INTEGER_SEQUENCE_LSTM`` node whose kernel (``lstm_int8`` in ``shaders/lstm.lgk``)
computes every time step in int32: the gates' dot products, TFLite's MultiplyByQuantizedMultiplier
(64-bit high product emulated with 32-bit halves, ``fx_*`` helpers of ``shaders/common.lgk``), the
int16 sigmoid and tanh as 65536-entry lookup tables, the cell update's rounding shifts and clamps, and
the requantized hidden state.  Its constants (weights, biases with the zero points folded in,
multipliers, tables) are exactly those the CPU kernel prepares (``cpu/quantized/recurrent._IntegerLstm``,
the one home of that arithmetic, whose ``step`` is also this node's numpy reference); the tensors it
reads and writes are the float view's (``scale * (q - zero_point)``, which ``round(v / scale)`` turns
back into ``q - zero_point`` exactly).

Covered: the converter's 8x8_16 form with or without CIFG, peephole and projection, up to 1024 cells,
inputs and outputs (the kernel's shared arrays); the full-kernel LSTM op as one step.  Not covered:
layer norm, and a peephole with a projection to another size (:func:`check_lstm` declines them with the
reason; the CPU runs them bit-exact); a plain sequence LSTM too big for the kernel stays with the float
view (a WARNING says so).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import numpy as np

from .._delegate import NodeView
from .._errors import DelegateError, LiteGPUError
from ._graph import GpuGraph, GpuNode, Report
from ._reference_ops import RefContext

__all__ = ["INTEGER_LSTM_OP", "LSTM_INT8_GROUPS", "LSTM_INT8_CAPS", "integer_reason", "integer_sequence_lstm",
           "integer_lstm_reference", "CONSTANTS"]

log = logging.getLogger("litegpu")

#: lstm_int8: threads per group, and the length of its four shared integer arrays (4 x 1024 x 4 bytes =
#: 16 KiB, WebGPU's default workgroup storage limit)
LSTM_INT8_GROUPS = (4, 8, 16, 32, 64, 128)
LSTM_INT8_CAPS = (16, 32, 64, 128, 256, 512, 1024)

#: the GPU-graph op of one integer LSTM over its whole sequence (made by :func:`integer_sequence_lstm`)
INTEGER_LSTM_OP = "INTEGER_SEQUENCE_LSTM"

_H_VAR, _C_VAR = 18, 19
CONSTANTS = ("wx", "wh", "bias", "qm", "table")


def _integer_lstm(inputs: list[Any], outputs: list[Any], intermediates: list[Any], options: Mapping[str, Any],
                  what: str) -> Any:
    """LiteRT's prepared integer LSTM (``_IntegerLstm``) from IR or GPU-graph tensors, or the reason the
    ``lstm_int8`` kernel does not take it."""
    from ..cpu.quantized.recurrent import _IntegerLstm  # the CPU's integer arithmetic: loaded only here

    def fail(msg: str) -> DelegateError:
        return DelegateError(f"{what}: {msg}")

    ctx = SimpleNamespace(inputs=inputs, outputs=outputs, intermediates=intermediates, options=options, fail=fail)
    try:
        lstm = _IntegerLstm(ctx)
    except (LiteGPUError, ValueError) as e:
        return str(e)
    if lstm.use_ln:
        return "layer norm (the integer kernel has no integer mean / inverse square root stage)"
    if lstm.proj is not None and lstm.use_peephole and lstm.n_output != lstm.n_cell:
        # LiteRT's peephole then walks n_output values of the flattened batch, not each row's cells
        return "peephole with a projection to another size"
    if max(lstm.n_cell, lstm.n_input, lstm.n_output) > LSTM_INT8_CAPS[-1]:
        return f"more than {LSTM_INT8_CAPS[-1]} cells, inputs or outputs (the kernel's shared arrays)"
    shifts = [s for m in (lstm.mx, lstm.mh) for _, s in m.values()] + [lstm.hidden_mult[1]]
    shifts += [lstm.proj[2][1]] if lstm.proj is not None else []
    if any(s < -30 or s > 31 for s in shifts) or not 0 <= 30 + lstm.cell_scale <= 30:
        return "a multiplier shift outside the kernel's -30..31 (or a cell scale below 2^-30)"
    return lstm


def _prepared(g: GpuGraph, node: GpuNode) -> Any:
    return _integer_lstm([g.tensors[t] if t >= 0 else None for t in node.inputs],
                         [g.tensors[t] for t in node.outputs], list(node.attrs.get("intermediates", ())),
                         node.attrs, node.describe())


def integer_reason(node: NodeView, seq: bool) -> str:
    """Why the ``lstm_int8`` kernel does not take this int8 LSTM node (empty: it does)."""
    x, opts = node.inputs[0], node.op.options
    if x.dtype != "int8":
        return f"quantized {x.dtype} {node.op.name} is not implemented on the GPU path"
    if not seq and opts.get("kernel_type", 0) != 0:
        return "int8 LSTM other than the full kernel"
    if len(x.shape) != (3 if seq else 2):
        return f"int8 {node.op.name} with an input of rank {len(x.shape)}"
    if opts.get("fused_activation_function", 4) != 4:
        return f"int8 {node.op.name} with an activation other than TANH"
    state = [node.inputs[i] if i < len(node.inputs) else None for i in (_H_VAR, _C_VAR)]
    if any(t is None or not t.is_variable or len(t.shape) != 2 for t in state):
        return f"int8 {node.op.name} whose states are not 2-D variable tensors"
    inter = [node.subgraph.tensors[t] for t in node.op.intermediates if t >= 0]
    lstm = _integer_lstm(list(node.inputs), list(node.outputs), inter, opts, f"int8 {node.op.name}")
    if isinstance(lstm, str):
        return f"int8 {node.op.name} the integer kernel does not take: {lstm}"
    return ""


def integer_sequence_lstm(g: GpuGraph) -> Report:
    """Replace each full-integer UNIDIRECTIONAL_SEQUENCE_LSTM (int8 input) by one ``INTEGER_SEQUENCE_LSTM``
    node ``(x, h_var, c_var, wx, wh, bias, qm, table) -> (y, h_T, c_T)`` computing LiteRT's integers (module
    docstring).  ``h_T``/``c_T`` are partition outputs standing for the state variables
    (:attr:`GpuGraph.state_outputs`), as ``expand_sequence_lstm`` makes them.  Runs before ``float_view``:
    it reads the integer constants and the quantization of the node's intermediate tensors."""
    lines: Report = []
    for node in list(g.nodes):
        if node.op not in ("UNIDIRECTIONAL_SEQUENCE_LSTM", "LSTM") or g.tensors[node.inputs[0]].dtype != "int8":
            continue
        lstm = _prepared(g, node)
        if isinstance(lstm, str):
            # still on the GPU, but through float kernels: an int8 output may be one step off LiteRT's
            line = f"{node.describe()}: left to the float view (within 1 LSB of LiteRT, not bit-exact): {lstm}"
            log.warning("%s", line)
            lines.append(line)
            continue
        x, y = node.inputs[0], node.outputs[0]
        h_var, c_var = node.inputs[_H_VAR], node.inputs[_C_VAR]
        gates, n_cell, n_in, n_out = "ifco", lstm.n_cell, lstm.n_input, lstm.n_output
        # CIFG has no input gate: zeros stand in for it (the kernel's `cifg` option skips it)
        wx = np.stack([lstm.w_x[k].T if k in lstm.gates else np.zeros((n_cell, n_in)) for k in gates])
        wh = np.stack([lstm.w_h[k].T if k in lstm.gates else np.zeros((n_cell, n_out)) for k in gates])
        bias = np.stack([np.stack([lstm.bx[k], lstm.bh[k]]) if k in lstm.gates else np.zeros((2, n_cell))
                         for k in gates]).reshape(-1)  # [gate][x|h][cell]
        qm = np.array([[*lstm.mx[k], *lstm.mh[k]] if k in lstm.gates else [0] * 4 for k in gates]).reshape(-1)
        if lstm.use_peephole:  # [gate i, f, o][cell] weights after the biases, their (m, shift) after qm's
            peep = [lstm.mc.get(k) for k in "ifo"]
            bias = np.concatenate([bias, *[p[0] if p else np.zeros(n_cell) for p in peep]])
            qm = np.concatenate([qm, *[p[1] if p else (0, 0) for p in peep]])
        proj_off, proj = len(bias), {"PROJ_M": 0, "PROJ_S": 0}
        if lstm.proj is not None:  # its folded bias [out], then the weights [out][cell], after the rest
            pw, pb, (pm, ps) = lstm.proj
            bias = np.concatenate([bias, pb, pw.T.reshape(-1)])
            proj = {"PROJ_M": int(pm), "PROJ_S": int(ps)}
        table = np.concatenate([lstm.sigmoid, lstm.tanh_gate, lstm.tanh_cell])
        consts = [g.add_constant(f"{node.id}/lstm_int8_{name}", np.ascontiguousarray(a, np.int32))
                  for name, a in zip(CONSTANTS, (wx, wh, bias, qm, table), strict=True)]
        finals = []
        for var, tag in ((h_var, "h"), (c_var, "c")):
            v = g.tensors[var]
            t = g.add_tensor(f"{node.id}/{tag}_final", v.shape, v.dtype, ir_shape=v.ir_shape)
            g.tensors[t].quantization = v.quantization
            finals.append(t)
        hm, hs = lstm.hidden_mult
        # an LSTM is one step of a batch-major sequence: its (B, I) input is (B, 1, 1, I) in BHWC
        time_major = node.op == "UNIDIRECTIONAL_SEQUENCE_LSTM" and bool(node.attrs.get("time_major", True))
        attrs = {"time_major": time_major, "HID_M": int(hm), "HID_S": int(hs),
                 "HID_ZP": int(lstm.hidden_zp), "CELL_CLIP": int(lstm.cell_clip), "CELL_SHIFT": 30 + lstm.cell_scale,
                 "n_cell": int(lstm.n_cell), "n_input": int(lstm.n_input), "n_output": int(n_out),
                 "cifg": bool(lstm.cifg), "peephole": bool(lstm.use_peephole), "projection": lstm.proj is not None,
                 "PROJ_OFF": int(proj_off), **proj, "OUT_ZP": int(lstm.out_zp), "PROJ_CLIP": int(lstm.proj_clip)}
        new = g.new_node(INTEGER_LSTM_OP, [x, h_var, c_var, *consts], [y, *finals], attrs, origin=node.origin)
        # in the fp16 modes too the int16 cell state must round-trip exactly: float16 holds integers
        # only up to 2048, so both ends of it (and the kernel) stay float32
        new.fp32 = g.tensors[c_var].fp32 = g.tensors[finals[1]].fp32 = True
        g.nodes[g.node_index(node)] = new
        for var, final in ((h_var, finals[0]), (c_var, finals[1])):
            if var in g.outputs:  # the interpreter reads the new state back under the variable's id
                g.outputs[g.outputs.index(var)] = final
                g.tensors[var] = replace(g.tensors[var], is_output=False)
                g.tensors[final] = replace(g.tensors[final], is_output=True, host_output=True)
                g.state_outputs[final] = var
        lines.append(f"{node.op}#{node.id}: one integer LSTM kernel over the sequence "
                     f"(bit-exact, {lstm.n_cell} cells)")
    return [f"{sum(1 for ln in lines if 'bit-exact,' in ln)} integer sequence LSTMs", *lines]


def _cpu_step(g: GpuGraph, node: GpuNode) -> Any:
    """The CPU kernel's prepared LSTM (``_IntegerLstm``, whose ``step`` is the one home of the integer
    arithmetic) filled back from an ``INTEGER_SEQUENCE_LSTM`` node's constants."""
    from ..cpu.quantized.recurrent import _IntegerLstm

    wx, wh, bias, qm, table = (np.asarray(g.tensors[t].data).astype(np.int64) for t in node.inputs[3:8])
    a = node.attrs
    lstm = object.__new__(_IntegerLstm)
    gates = "ifco"
    n_cell = int(a["n_cell"])
    lstm.cifg, lstm.use_peephole = bool(a.get("cifg")), bool(a.get("peephole"))
    lstm.gates, lstm.use_ln, lstm.ln = "fco" if lstm.cifg else gates, False, {}
    wx, wh = wx.reshape(4, n_cell, -1), wh.reshape(4, n_cell, -1)
    bias, qm = bias.reshape(-1), qm.reshape(-1)
    lstm.mc = {}
    if lstm.use_peephole:
        for p, k in enumerate("ifo"):
            if k in lstm.gates:
                lstm.mc[k] = (bias[(8 + p) * n_cell:(9 + p) * n_cell], (int(qm[16 + 2 * p]), int(qm[17 + 2 * p])))
    lstm.proj = None
    lstm.n_output, lstm.out_zp, lstm.proj_clip = int(a["n_output"]), int(a["OUT_ZP"]), int(a["PROJ_CLIP"])
    if a["projection"]:
        off, n_out = int(a["PROJ_OFF"]), lstm.n_output
        pw = bias[off + n_out:off + n_out + n_out * n_cell].reshape(n_out, n_cell)
        lstm.proj = (np.ascontiguousarray(pw.T), bias[off:off + n_out], (int(a["PROJ_M"]), int(a["PROJ_S"])))
    bias, qm = bias[:8 * n_cell].reshape(4, 2, n_cell), qm[:16].reshape(4, 4)
    lstm.w_x = {k: np.ascontiguousarray(wx[i].T) for i, k in enumerate(gates)}
    lstm.w_h = {k: np.ascontiguousarray(wh[i].T) for i, k in enumerate(gates)}
    lstm.bx = {k: bias[i, 0] for i, k in enumerate(gates)}
    lstm.bh = {k: bias[i, 1] for i, k in enumerate(gates)}
    lstm.mx = {k: (int(qm[i, 0]), int(qm[i, 1])) for i, k in enumerate(gates)}
    lstm.mh = {k: (int(qm[i, 2]), int(qm[i, 3])) for i, k in enumerate(gates)}
    lstm.sigmoid, lstm.tanh_gate, lstm.tanh_cell = table[:65536], table[65536:131072], table[131072:]
    lstm.n_cell = n_cell
    lstm.cell_scale, lstm.cell_clip = int(a["CELL_SHIFT"]) - 30, int(a["CELL_CLIP"])
    lstm.hidden_mult, lstm.hidden_zp = (int(a["HID_M"]), int(a["HID_S"])), int(a["HID_ZP"])
    return lstm


def integer_lstm_reference(c: RefContext) -> list[np.ndarray]:
    """The numpy meaning of ``INTEGER_SEQUENCE_LSTM`` on float-view values: LiteRT's integer steps."""
    g, n = c.g, c.n
    lstm = _cpu_step(g, n)
    x_t, h_t, c_t, y_t = (g.tensors[t] for t in (*n.inputs[:3], n.outputs[0]))

    def ints(t: int, view: Any, zero_point: bool = True) -> np.ndarray:
        v = np.asarray(c.values[t], np.float64).reshape(g.tensors[t].ir_shape) / view.scale
        return np.floor(v + 0.5).astype(np.int64) + (view.zero_point if zero_point else 0)

    x = ints(n.inputs[0], x_t.qview)
    if x.ndim == 2:  # an LSTM: one step
        x = x[None]
    elif not n.attrs["time_major"]:
        x = np.swapaxes(x, 0, 1)
    h = ints(n.inputs[1], h_t.qview).reshape(x.shape[1], -1)
    cell = ints(n.inputs[2], c_t.qview, zero_point=False).reshape(x.shape[1], -1)
    ys = []
    for step in x:
        h, cell = lstm.step(step, h, cell)
        ys.append(h)
    y = np.stack(ys)
    if x_t.ir_shape and len(x_t.ir_shape) == 3 and not n.attrs["time_major"]:
        y = np.swapaxes(y, 0, 1)

    def floats(q: np.ndarray, view: Any, k: int, zero_point: bool = True) -> np.ndarray:
        v = (q - (view.zero_point if zero_point else 0)) * np.float64(view.scale)
        return v.astype(np.float32).reshape(c.out_shape(k))

    return [floats(y, y_t.qview, 0), floats(h, h_t.qview, 1), floats(cell, c_t.qview, 2, zero_point=False)]
