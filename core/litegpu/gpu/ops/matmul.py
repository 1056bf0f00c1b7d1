"""Matrix products: FULLY_CONNECTED, BATCH_MATMUL and the sibling heads node the passes make
(``SIBLING_HEADS``, ``_passes/sibling_heads``); kernels in ``shaders/matmul.lgk``: ``heads`` (FULLY_CONNECTED
is its one-head case) and ``batch_matmul``."""

from __future__ import annotations

import numpy as np

from ..._delegate import NodeView
from ..._errors import DelegateError
from .. import _layout as L
from .. import _reference_ops as rf
from .._cost import choose_fc
from .._graph import HEADS_OP, GpuOp
from .._kernel_specs import (
    FUSED_ACTIVATIONS,
    QDQ,
    SPLIT,
    KernelSpec,
    Opt,
    boolean,
    spec,
    split_wg,
)
from ._entry import WEIGHTS_BIAS, GpuOpEntry, Lowerer, opt

__all__ = ["OPS", "KERNELS", "MAX_HEADS", "MAX_HEAD_SOURCES"]

#: the most heads / distinct inputs one ``heads`` launch takes (``_passes/sibling_heads`` keeps to them)
MAX_HEADS, MAX_HEAD_SOURCES = 8, 4


def check_fc(node: NodeView) -> str:
    w = node.inputs[1]
    if w is None or len(w.shape) != 2:
        return "FULLY_CONNECTED needs 2-D weights"
    if opt(node, "weights_format", 0) != 0:
        return "FULLY_CONNECTED with shuffled weights"
    x = node.inputs[0]
    if int(np.prod(x.shape)) % w.shape[1]:
        return "FULLY_CONNECTED input size is not a multiple of the weights' input size"
    return ""


def check_bmm(node: NodeView) -> str:
    a, b = node.inputs[0], node.inputs[1]
    if len(a.shape) < 2 or len(b.shape) < 2:
        return "BATCH_MATMUL of rank < 2 tensors"
    return ""


def lower_fc(lw: Lowerer) -> list[GpuOp]:
    """A FULLY_CONNECTED op: the ``heads`` kernel's one-head case (one source of ``rows`` batch items, one tap,
    one pixel), its activation (PRELU included) and QDQ epilogue in the head's slots."""
    n = lw.n
    x, y = n.inputs[0], n.outputs[0]
    w = lw.data(n.inputs[1])
    o, i = w.shape
    xs, ys = lw.shape(x), lw.shape(y)
    rows = int(np.prod(xs)) // i
    if xs[1:] != (1, 1, i) or ys != (rows, 1, 1, o):
        raise DelegateError(f"{n.describe()}: FULLY_CONNECTED needs (rows, 1, 1, I) -> (rows, 1, 1, O) views, "
                            f"got {xs} -> {ys} (fc_as_conv rewrites the others)")
    opts, operands = lw.epilogue()
    lw.bind("src0", x)
    lw.const("weights", L.fc_weights(w))
    bias = lw.data(n.inputs[2]).reshape(-1) if len(n.inputs) > 2 and n.inputs[2] >= 0 else None
    lw.const("bias", L.channel_vector(bias, o))
    lw.bind_epilogue_operands(operands, o)  # the PRELU alpha (the only operand an FC's slots take)
    lw.bind("dst0", y)
    split, _ = choose_fc(rows, L.slices(o), L.slices(i), lw.cost)
    return [lw.op("heads", {"n": 1, "acts": (opts.get("act", "NONE"),), "srcs": (0,), "qdq": opts.get("qdq"),
                            "split": split if split > 1 else None},
                  {"B": rows, "INV_T": 1.0, "SRC_S0": L.slices(i), "T0": 1, "P0": 1, "G0": L.slices(o),
                   "E0": L.slices(o), "C0": o, "WB0": 0})]


def lower_heads(lw: Lowerer) -> list[GpuOp]:
    """The ``heads`` launch of a SIBLING_HEADS node (``_passes/sibling_heads``): inputs [x_0 .. x_m-1, w_0, b_0, a_0,
    w_1, b_1, a_1, ...] (bias, PRELU alpha -1 where absent); attrs ``acts`` and ``srcs`` (a head's activation and source),
    ``pixels`` and ``taps`` (a source's P and T), ``mean``, and ``rows`` (a head's (output, element offset)
    when the heads write the dense rows of concatenated outputs)."""
    n = lw.n
    a = n.attrs
    srcs, acts = tuple(a["srcs"]), tuple(a["acts"])
    m = len(a["pixels"])
    mean = bool(a.get("mean"))
    rows = a.get("rows")
    params: dict[str, int | float] = {"B": lw.shape(n.inputs[0])[0]}
    for j in range(m):
        b, h, wd, c = lw.shape(n.inputs[j])
        pixels, taps = int(a["pixels"][j]), int(a["taps"][j])
        if pixels * taps != h * wd or b != params["B"]:
            raise DelegateError(f"{n.describe()}: {pixels} pixels x {taps} taps do not cover input {j} ({b}x{h}x{wd})")
        params.update({f"SRC_S{j}": L.slices(c), f"T{j}": taps, f"P{j}": pixels})
        lw.bind(f"src{j}", n.inputs[j])
    params["INV_T"] = 1.0 / params["T0"]
    packed, biases, alphas = [], [], []
    groups = slices = wbase = 0
    for d, j in enumerate(srcs):
        c = lw.shape(n.inputs[j])[3]
        wtaps = 1 if mean else params[f"T{j}"]
        w = lw.data(n.inputs[m + 3 * d])
        o = int(w.shape[0])
        packed.append(L.conv_weights(w.reshape(o, 1, wtaps, c)).reshape(-1, 4))
        bi, ai = n.inputs[m + 3 * d + 1], n.inputs[m + 3 * d + 2]
        biases.append(L.channel_vector(lw.data(bi).reshape(-1) if bi >= 0 else None, o))
        alphas.append(L.channel_vector(lw.data(ai).reshape(-1) if ai >= 0 else None, o))
        params[f"WB{d}"] = wbase
        wbase += packed[-1].shape[0]
        slices += L.slices(o)
        groups += L.slices(o) * params[f"P{j}"]
        params.update({f"G{d}": groups, f"E{d}": slices, f"C{d}": o})
        if rows is not None:
            params[f"OFF{d}"] = int(rows[d][1])
    lw.const("weights", np.concatenate(packed))
    lw.const("bias", np.concatenate(biases))
    if "PRELU" in acts:
        lw.const("alpha", np.concatenate(alphas))
    if rows is None:
        for d, y in enumerate(n.outputs):
            lw.bind(f"dst{d}", y)
    else:
        for k, y in enumerate(n.outputs):
            lw.bind(f"dst{k}", y)
            params[f"TOT{k}"] = int(np.prod(lw.shape(y)[1:]))
    deepest = max(params[f"SRC_S{j}"] * params[f"T{j}"] for j in range(m))
    split, _ = choose_fc(params["B"], groups, deepest, lw.cost)
    options = {"n": len(srcs), "m": m, "acts": acts, "srcs": srcs, "mean": mean or None,
               "split": split if split > 1 else None}
    if rows is not None:
        options.update({"rows": True, "n_dst": len(n.outputs), "dsts": tuple(int(r[0]) for r in rows)})
    return [lw.op("heads", options, params)]


def lower_bmm(lw: Lowerer) -> list[GpuOp]:
    n = lw.n
    a, b_, y = n.inputs[0], n.inputs[1], n.outputs[0]
    adj_x, adj_y = bool(n.attrs.get("adj_x")), bool(n.attrs.get("adj_y"))
    la, rb, out = lw.shape(a), lw.shape(b_), lw.shape(y)
    k = la[2] if adj_x else la[3]
    lw.tensor_or_const("lhs", a)
    lw.tensor_or_const("rhs", b_)
    lw.bind("dst", y)
    params = {"B": out[0], "H": out[1], "M": out[2], "N": out[3], "S": L.slices(out[3]), "K": k,
              "L_B": la[0], "L_H": la[1], "L_S": L.slices(la[3]), "R_B": rb[0], "R_H": rb[1], "R_S": L.slices(rb[3])}
    return [lw.op("batch_matmul", {"adj_x": adj_x, "adj_y": adj_y}, params)]


# ---------------------------------------------------------------------------------------------------------
# kernels (shaders/matmul.lgk) and table entries
# ---------------------------------------------------------------------------------------------------------

#: heads variants: every head count, source count, output count and split; single and multi-source, PHWC4
#: outputs and dense rows, the mean
_HEADS_VARIANTS = [
    {"n": 1, "acts": ("TANH",), "srcs": (0,), "mean": True},
    # one head, one tap: FULLY_CONNECTED (lower_fc), every activation, splits, the QDQ epilogue
    *({"n": 1, "acts": (a,), "srcs": (0,), **({"split": sp} if sp > 1 else {})}
      for a, sp in zip(FUSED_ACTIVATIONS, (1, 4, 8, 16, 32, 64, 128, 1, 16, 4), strict=False)),
    {"n": 1, "acts": ("NONE",), "srcs": (0,), "qdq": True}, {"n": 1, "acts": ("PRELU",), "srcs": (0,), "qdq": True,
                                                             "split": 32},
    {"n": 2, "acts": ("NONE", "LOGISTIC"), "srcs": (0, 0), "split": 4},
    {"n": 2, "m": 2, "acts": ("PRELU", "PRELU"), "srcs": (0, 1), "split": 16},
    {"n": 3, "m": 3, "acts": ("RELU", "NONE", "LOGISTIC"), "srcs": (2, 0, 1), "rows": True, "n_dst": 3,
     "dsts": (0, 1, 2)},
    {"n": 4, "m": 2, "acts": ("NONE",) * 4, "srcs": (0, 0, 1, 1), "rows": True, "n_dst": 2, "dsts": (0, 1, 0, 1),
     "split": 8},
    {"n": 4, "acts": ("LOGISTIC", "LOGISTIC", "NONE", "NONE"), "srcs": (0,) * 4, "mean": True, "split": 128},
    {"n": 5, "m": 4, "acts": ("RELU6", "HARD_SWISH", "NONE", "NONE", "RELU"), "srcs": (0, 1, 2, 3, 0), "rows": True,
     "n_dst": 5, "dsts": (0, 1, 2, 3, 4), "split": 16},
    {"n": 6, "m": 2, "acts": ("RELU_N1_TO_1", "SIGN_BIT") + ("NONE",) * 4, "srcs": (0, 1) * 3, "rows": True,
     "n_dst": 6, "dsts": tuple(range(6)), "split": 32},
    {"n": 7, "acts": ("NONE",) * 7, "srcs": (0,) * 7, "split": 64},
    {"n": 7, "m": 3, "acts": ("NONE",) * 7, "srcs": (0, 1, 2, 0, 1, 2, 0), "rows": True, "n_dst": 7,
     "dsts": tuple(range(7))},
    {"n": 8, "m": 4, "acts": ("NONE",) * 8, "srcs": (0, 1, 2, 3, 3, 2, 1, 0), "rows": True, "n_dst": 8,
     "dsts": tuple(range(8)), "split": 128},
    {"n": 8, "m": 2, "acts": ("NONE",) * 8, "srcs": (0, 1) * 4, "rows": True, "n_dst": 4, "dsts": (0, 1, 2, 3) * 2},
]

KERNELS: tuple[KernelSpec, ...] = (
    spec("heads", "matmul.lgk", "fully connected: y_d = act_d(sum x w_d + bias_d) for n heads (1: a FULLY_CONNECTED) "
         "reading m inputs (optionally their mean)",
         {"n": Opt(2, tuple(range(1, MAX_HEADS + 1))), "m": Opt(1, tuple(range(1, MAX_HEAD_SOURCES + 1))),
          "acts": Opt(("NONE", "NONE"), FUSED_ACTIVATIONS, many=True),
          "srcs": Opt((0, 0), tuple(range(MAX_HEAD_SOURCES)), many=True), "mean": boolean(),
          "rows": boolean(), "n_dst": Opt(1, tuple(range(1, MAX_HEADS + 1))),
          "dsts": Opt((0, 0), tuple(range(MAX_HEADS)), many=True), "split": SPLIT, "qdq": QDQ},
         _HEADS_VARIANTS,
         default_wg=(32, 2, 1), shared_wg=split_wg),
    spec("batch_matmul", "matmul.lgk", "batched matmul with broadcasting and adj_x/adj_y",
         {"adj_x": boolean(), "adj_y": boolean()},
         [{"adj_x": x, "adj_y": y} for x in (False, True) for y in (False, True)]),
)

OPS: dict[str, GpuOpEntry] = {
    "FULLY_CONNECTED": GpuOpEntry("heads", lower_fc, check_fc, WEIGHTS_BIAS,
                                  ref=rf.fully_connected),
    "BATCH_MATMUL": GpuOpEntry("batch_matmul", lower_bmm, check_bmm, ref=rf.batch_matmul),
    HEADS_OP: GpuOpEntry("heads", lower_heads, claimed=False, ref=rf.sibling_heads),
}
