"""Expand LSTMs into CONCATENATION + FULLY_CONNECTED + LSTM_CELL: the basic LSTM cell, and the float
UNIDIRECTIONAL_SEQUENCE_LSTM unrolled over its time steps."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .._graph import QDQ_OP, Epilogue, GpuGraph, GpuNode, Report
from ..ops.movement import MAX_CONCAT_INPUTS

__all__ = ["expand_lstm", "expand_sequence_lstm"]


def expand_lstm(g: GpuGraph) -> Report:
    """Rewrite TFLite's basic LSTM (kernel_type BASIC; inputs input, prev_activ, weights, bias,
    prev_state; outputs activ, state, concat_temp, activ_temp) as three nodes the kernels compute:

    * ``CONCATENATION([input, prev_activ], axis=C) -> concat_temp``
    * ``FULLY_CONNECTED(concat_temp, weights, bias) -> activ_temp`` (the 4 gates' pre-activations, in
      TFLite's order input, cell candidate, forget, output)
    * ``LSTM_CELL(activ_temp, prev_state) -> (state, activ)`` with ``attrs["cell_clip"]``:
      ``state = sigmoid(f) * prev_state + sigmoid(i) * tanh(g)`` (``cell_clip`` 0: LiteRT's basic
      kernel ignores the option),
      ``activ = sigmoid(o) * tanh(state)``.

    Runs after ``normalise_bhwc``; the rank-2 tensors are ``(B, 1, 1, N)`` in BHWC.
    """
    lines: Report = []
    for node in list(g.nodes):
        if node.op != "LSTM" or len(node.inputs) != 5 or len(node.outputs) != 4:
            continue
        x, h, w, bias, c = node.inputs
        activ, state, concat_temp, activ_temp = node.outputs
        at = g.node_index(node)
        origin = node.origin
        new = [
            g.new_node("CONCATENATION", [x, h], [concat_temp], {"axis": 3}, origin=origin),
            g.new_node("FULLY_CONNECTED", [concat_temp, w, bias], [activ_temp], {"keep_num_dims": False},
                       origin=origin),
            # LiteRT's basic kernel ignores cell_clip (checked against it): so do we
            g.new_node("LSTM_CELL", [activ_temp, c], [state, activ], {"cell_clip": 0.0}, origin=origin),
        ]
        g.nodes[at:at + 1] = new
        lines.append(f"expanded LSTM#{node.id} into CONCATENATION + FULLY_CONNECTED + LSTM_CELL")
    return [f"expanded {len(lines)} basic LSTM cells", *lines]


#: UNIDIRECTIONAL_SEQUENCE_LSTM inputs: input->gate weights (i, f, c, o), recurrent->gate weights, gate
#: biases, and the output/cell state variables
_X_W, _H_W, _BIAS, _PROJ, _H_VAR, _C_VAR = (1, 2, 3, 4), (5, 6, 7, 8), (12, 13, 14, 15), (16, 17), 18, 19
_LN = (20, 21, 22, 23)  # layer-norm coefficients of the gates i, f, c, o
_PEEP = (9, 10, 11)  # peephole (cell-to-gate) weights of the gates i, f, o
#: LSTM_CELL reads its gates in the basic kernel's order: input, cell candidate, forget, output
_CELL_ORDER = (0, 2, 1, 3)


def expand_sequence_lstm(g: GpuGraph) -> Report:
    """Unroll a UNIDIRECTIONAL_SEQUENCE_LSTM (CIFG, peephole (without layer norm), layer norm and projection
    on float ones;
    the checks in ``ops/lstm.check_sequence_lstm``) over its time steps.  Per step ``t``:

    * ``SLICE`` of step ``t`` of the input (batch-major ``(B, 1, T, I)``; a time-major input is first
      ``TRANSPOSE`` d into that view),
    * ``CONCATENATION([x_t, h], axis=C)`` and one ``FULLY_CONNECTED`` with the eight weight matrices stacked
      into ``[4N, I + N_out]`` and the four biases into ``[4N]`` (gates in LSTM_CELL's order); with layer
      norm the biases come after it (``_layer_norm``: RESHAPE to ``(B, 1, 4, N)``, MEAN, SUB, MUL, MEAN,
      ADD, RSQRT, MUL, MUL, ADD, RESHAPE),
    * ``LSTM_CELL(gates, c[, peephole]) -> (c_t, h_t)`` with the op's ``cell_clip``;
    * with a projection, ``h_t = FULLY_CONNECTED(o * tanh(c_t), W_proj, b_proj)`` clipped to
      ``+-proj_clip`` (MINIMUM + MAXIMUM) when that is set.

    For an integer LSTM (the float view ran first) ``h_t`` and ``c_t`` are snapped to the state variables'
    grids (int8 / int16) after every step by a ``QUANTIZE_AND_DEQUANTIZE`` copy, as LiteRT's kernel stores
    them (with ``quantization_simulation``, the default).

    The ``h_t`` are concatenated along time into the output.  The last ``h_T``/``c_T`` are partition outputs
    standing for the state variables (:attr:`GpuGraph.state_outputs`): the runtime returns them under the
    variables' ids, so the interpreter carries the state to the next invoke as LiteRT does.
    Runs after ``normalise_bhwc``.
    """
    lines: Report = []
    simulate = bool(g.options.get("quantization_simulation", True))
    for node in list(g.nodes):
        if node.op != "UNIDIRECTIONAL_SEQUENCE_LSTM":
            continue
        ins, origin = node.inputs, node.origin
        x, y = ins[0], node.outputs[0]
        h_var, c_var = ins[_H_VAR], ins[_C_VAR]
        time_major = bool(node.attrs.get("time_major", True))
        xs = g.tensors[x].shape
        steps = xs[0] if time_major else xs[2]
        batch = xs[2] if time_major else xs[0]
        n_in, n_cell = xs[3], g.tensors[ins[_X_W[1]]].ir_shape[0]
        n_out = g.tensors[h_var].shape[3]
        # CIFG (no input gate: i = 1 - sigmoid(f)) is the input gate of the negated forget gate, since
        # sigmoid(-z) = 1 - sigmoid(z); with layer norm too when that gate shares the forget gate's coefficients
        cifg = ins[_X_W[0]] < 0

        xw = [_data(g, ins[i]) for i in _X_W]
        hw = [_data(g, ins[i]) for i in _H_W]
        bs = [_data(g, ins[i]).reshape(-1) for i in _BIAS]
        if cifg:
            xw[0], hw[0], bs[0] = -xw[1], -hw[1], -bs[1]
        w_all = np.concatenate([np.concatenate([xw[k], hw[k]], axis=1) for k in _CELL_ORDER], axis=0)
        b_all = np.concatenate([bs[k] for k in _CELL_ORDER])
        ln = None
        if len(ins) > 23 and all(ins[i] >= 0 for i in _LN[1:]):
            # layer norm: the biases are added after the normalisation, per gate (LiteRT's float kernel)
            lns = [_LN[1] if cifg and k == 0 else _LN[k] for k in range(4)]
            coef = np.stack([np.asarray(g.tensors[ins[lns[k]]].data, np.float32).reshape(-1) for k in _CELL_ORDER])
            ln = (g.add_constant(f"{node.id}/ln_coef", coef.reshape(1, 1, 4, n_cell)),
                  g.add_constant(f"{node.id}/ln_bias", b_all.reshape(1, 1, 4, n_cell)),
                  g.add_constant(f"{node.id}/ln_eps", np.full((1, 1, 1, 1), 1e-8, np.float32)))
            b_all = np.zeros_like(b_all)
        proj = None
        if len(ins) > _PROJ[0] and ins[_PROJ[0]] >= 0:
            pw = np.asarray(g.tensors[ins[_PROJ[0]]].data, np.float32)
            pb = (np.asarray(g.tensors[ins[_PROJ[1]]].data, np.float32).reshape(-1) if ins[_PROJ[1]] >= 0
                  else np.zeros(pw.shape[0], np.float32))
            proj = (g.add_constant(f"{node.id}/proj_weights", pw), g.add_constant(f"{node.id}/proj_bias", pb))
        peep: list[int] = []
        if any(ins[i] >= 0 for i in _PEEP):  # LSTM_CELL's peephole option: (3, N) for the gates i, f, o
            pv = [_data(g, ins[i]).reshape(-1) if ins[i] >= 0 else np.zeros(n_cell, np.float32) for i in _PEEP]
            if cifg:
                pv[0] = -pv[1]
            peep = [g.add_constant(f"{node.id}/peephole", np.stack(pv))]
        w_id = g.add_constant(f"{node.id}/lstm_weights", w_all)
        b_id = g.add_constant(f"{node.id}/lstm_bias", b_all)
        new: list[GpuNode] = []
        seq = x
        if time_major:  # (T, 1, B, I) -> (B, 1, T, I)
            seq = g.add_tensor(f"{node.id}/x_batch_major", (batch, 1, steps, n_in))
            new.append(g.new_node("TRANSPOSE", [x], [seq], {"perm": (2, 1, 0, 3)}, origin=origin))
        h, c_prev = h_var, c_var
        hs: list[int] = []
        clip = float(node.attrs.get("cell_clip", 0.0) or 0.0)
        for t in range(steps):
            x_t = g.add_tensor(f"{node.id}/x{t}", (batch, 1, 1, n_in))
            new.append(g.new_node("SLICE", [seq], [x_t], {"ranges": [(0, 0, 1), (0, 0, 1), (t, 0, 1), (0, 0, 1)]},
                                  origin=origin))
            xh = g.add_tensor(f"{node.id}/xh{t}", (batch, 1, 1, n_in + n_out))
            new.append(g.new_node("CONCATENATION", [x_t, h], [xh], {"axis": 3}, origin=origin))
            gates = g.add_tensor(f"{node.id}/gates{t}", (batch, 1, 1, 4 * n_cell))
            if ln is None:
                new.append(g.new_node("FULLY_CONNECTED", [xh, w_id, b_id], [gates], {"keep_num_dims": False},
                                      origin=origin))
            else:
                raw = g.add_tensor(f"{node.id}/gates_raw{t}", (batch, 1, 1, 4 * n_cell))
                new.append(g.new_node("FULLY_CONNECTED", [xh, w_id, b_id], [raw], {"keep_num_dims": False},
                                      origin=origin))
                new += _layer_norm(g, raw, gates, ln, batch, n_cell, origin)
            last = t == steps - 1
            c = g.add_tensor(f"{node.id}/c{t}", (batch, 1, 1, n_cell),
                             ir_shape=g.tensors[c_var].ir_shape if last else None)
            h = g.add_tensor(f"{node.id}/h{t}", (batch, 1, 1, n_out),
                             ir_shape=g.tensors[h_var].ir_shape if last else None)
            projected = h
            if proj is not None:  # the cell's o * tanh(c) goes through the projection into h
                h = g.add_tensor(f"{node.id}/m{t}", (batch, 1, 1, n_cell))
            # the float view of an integer LSTM: LiteRT's kernel stores the cell state (int16) and the
            # hidden state (int8) on their grids after every step; so do we (a QDQ copy of each) unless
            # quantization_simulation is off.  Without it the error compounds over the steps: measured on
            # PoCL, 24 builder models, up to 11 LSB of the int8 output against 1 LSB with it.
            snaps = [(k, v, g.tensors[v].qview) for k, v in ((0, c_var), (1, h_var))
                     if g.tensors[v].qview is not None and simulate]
            cell_out = [c, h]
            for k, v, view in snaps:
                raw = g.add_tensor(f"{node.id}/{'ch'[k]}{t}_raw", g.tensors[cell_out[k]].shape)
                new_q = g.new_node(QDQ_OP, [raw], [cell_out[k]], origin=origin)
                new_q.epilogue.append(Epilogue("QDQ", q=view.qdq))
                cell_out[k] = raw
                snaps[snaps.index((k, v, view))] = (k, v, new_q)
            new.append(g.new_node("LSTM_CELL", [gates, c_prev, *peep], cell_out, {"cell_clip": clip}, origin=origin))
            new += [q for _k, _v, q in snaps]
            if proj is not None:
                new += _projection(g, node, h, projected, proj, origin)
                h = projected
            c_prev = c
            hs.append(h)
        seq_out = y if not time_major else g.add_tensor(f"{node.id}/y_batch_major", (batch, 1, steps, n_out))
        new += _concat_time(g, hs, seq_out, origin)
        if time_major:
            new.append(g.new_node("TRANSPOSE", [seq_out], [y], {"perm": (2, 1, 0, 3)}, origin=origin))
        at = g.node_index(node)
        g.nodes[at:at + 1] = new
        for var, final in ((h_var, hs[-1]), (c_var, c_prev)):
            if var in g.outputs:  # the interpreter reads the new state back under the variable's id
                g.outputs[g.outputs.index(var)] = final
                g.tensors[var] = replace(g.tensors[var], is_output=False)
                g.tensors[final] = replace(g.tensors[final], is_output=True, host_output=True,
                                           qview=g.tensors[var].qview)
                g.state_outputs[final] = var
        lines.append(f"unrolled UNIDIRECTIONAL_SEQUENCE_LSTM#{node.id} over {steps} steps "
                     "(SLICE + CONCATENATION + FULLY_CONNECTED + LSTM_CELL each)")
    return [f"unrolled {len(lines)} sequence LSTMs", *lines]


def _data(g: GpuGraph, t: int) -> np.ndarray:
    """A constant input as float32 (empty for an omitted one)."""
    return np.asarray(g.tensors[t].data, np.float32) if t >= 0 else np.zeros(0, np.float32)


def _layer_norm(g: GpuGraph, raw: int, out: int, ln: tuple[int, int, int], batch: int, n_cell: int,
                origin: tuple[int, ...]) -> list[GpuNode]:
    """Per gate: ``(z - mean) / sqrt(var + 1e-8) * coef + bias`` over the gate's N cells, with the gates
    viewed as ``(B, 1, 4, N)`` (LiteRT's float layer-norm LSTM)."""
    coef, bias, eps = ln
    shape4, shape1 = (batch, 1, 4, n_cell), (batch, 1, 4, 1)
    name = g.tensors[raw].name

    def t(tag: str, shape: tuple[int, int, int, int]) -> int:
        return g.add_tensor(f"{name}/{tag}", shape)

    z, mean, d, sq, var, ve, inv, nz, sc, biased = (
        t("z", shape4), t("mean", shape1), t("d", shape4), t("sq", shape4), t("var", shape1), t("var_eps", shape1),
        t("inv", shape1), t("norm", shape4), t("scaled", shape4), t("biased", shape4))
    mean_attrs = {"axes": (3,), "keep_dims": True}
    return [
        g.new_node("RESHAPE", [raw], [z], origin=origin),
        g.new_node("MEAN", [z], [mean], dict(mean_attrs), origin=origin),
        g.new_node("SUB", [z, mean], [d], origin=origin),
        g.new_node("MUL", [d, d], [sq], origin=origin),
        g.new_node("MEAN", [sq], [var], dict(mean_attrs), origin=origin),
        g.new_node("ADD", [var, eps], [ve], origin=origin),
        g.new_node("RSQRT", [ve], [inv], origin=origin),
        g.new_node("MUL", [d, inv], [nz], origin=origin),
        g.new_node("MUL", [nz, coef], [sc], origin=origin),
        g.new_node("ADD", [sc, bias], [biased], origin=origin),
        g.new_node("RESHAPE", [biased], [out], origin=origin),
    ]


def _projection(g: GpuGraph, node: GpuNode, m: int, h: int, proj: tuple[int, int],
                origin: tuple[int, ...]) -> list[GpuNode]:
    """``h = FULLY_CONNECTED(m, W_proj, b_proj)``, clipped to +-proj_clip when it is > 0 (LiteRT's float kernel)."""
    clip = float(node.attrs.get("proj_clip", 0.0) or 0.0)
    if clip <= 0:
        return [g.new_node("FULLY_CONNECTED", [m, *proj], [h], {"keep_num_dims": False}, origin=origin)]
    raw = g.add_tensor(f"{node.id}/proj{h}", g.tensors[h].shape)
    low = g.add_tensor(f"{node.id}/proj_low{h}", g.tensors[h].shape)
    hi = g.add_constant(f"{node.id}/proj_clip", np.full((1, 1, 1, 1), clip, np.float32))
    lo = g.add_constant(f"{node.id}/proj_clip_neg", np.full((1, 1, 1, 1), -clip, np.float32))
    return [g.new_node("FULLY_CONNECTED", [m, *proj], [raw], {"keep_num_dims": False}, origin=origin),
            g.new_node("MINIMUM", [raw, hi], [low], origin=origin),
            g.new_node("MAXIMUM", [low, lo], [h], origin=origin)]


def _concat_time(g: GpuGraph, parts: list[int], out: int, origin: tuple[int, ...]) -> list[GpuNode]:
    """CONCATENATION of ``parts`` along W into ``out``, in groups the concat kernel takes."""
    nodes: list[GpuNode] = []
    while len(parts) > MAX_CONCAT_INPUTS:
        grouped = []
        for k in range(0, len(parts), MAX_CONCAT_INPUTS):
            group = parts[k:k + MAX_CONCAT_INPUTS]
            if len(group) == 1:
                grouped.append(group[0])
                continue
            s = g.tensors[group[0]].shape
            width = sum(g.tensors[p].shape[2] for p in group)
            t = g.add_tensor(f"{out}/concat{len(nodes)}", (s[0], 1, width, s[3]))
            nodes.append(g.new_node("CONCATENATION", group, [t], {"axis": 2}, origin=origin))
            grouped.append(t)
        parts = grouped
    nodes.append(g.new_node("CONCATENATION", parts, [out], {"axis": 2}, origin=origin))
    return nodes
