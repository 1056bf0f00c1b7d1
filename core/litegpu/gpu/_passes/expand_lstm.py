"""Expand a basic LSTM cell into CONCATENATION + FULLY_CONNECTED + LSTM_CELL."""

from __future__ import annotations

from .._graph import GpuGraph, Report

__all__ = ["expand_lstm"]


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
