"""Matrix products: FULLY_CONNECTED, BATCH_MATMUL and the sibling heads node the passes make
(``SIBLING_HEADS``, ``_passes/sibling_heads``); kernels in ``shaders/matmul.lgk``."""

from __future__ import annotations

import numpy as np

from ..._delegate import NodeView
from ..._errors import DelegateError
from .. import _layout as L
from .. import _reference_ops as rf
from .._cost import choose_fc
from .._graph import HEADS_OP, GpuOp
from .._kernel_specs import (
    ACT,
    ACTIVATIONS,
    FUSED_ACTIVATIONS,
    QDQ,
    SPLIT,
    SPLITS,
    KernelSpec,
    Opt,
    boolean,
    spec,
    split_wg,
)
from ._entry import WEIGHTS_BIAS, GpuOpEntry, Lowerer, opt

__all__ = ["OPS", "KERNELS"]


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
    lw.bind_weighted(L.fc_weights(w), o, operands)
    split, _ = choose_fc(rows, L.slices(o), L.slices(i), lw.cost)
    return [lw.op("fully_connected", {**opts, "split": split if split > 1 else None},
                  {"B": rows, "SRC_S": L.slices(i), "C": o, "S": L.slices(o)})]


def lower_heads(lw: Lowerer) -> list[GpuOp]:
    """The ``heads`` launch of a SIBLING_HEADS node: inputs [x, w0, b0, w1, b1, ...] (bias -1 where absent),
    attrs ``acts`` (one activation a head), ``pixels`` (P), ``taps`` (T) and ``mean``."""
    n = lw.n
    a = n.attrs
    x = n.inputs[0]
    b, h, wd, c = lw.shape(x)
    pixels, taps, mean = int(a["pixels"]), int(a["taps"]), bool(a.get("mean"))
    if pixels * taps != h * wd:
        raise DelegateError(f"{n.describe()}: {pixels} pixels x {taps} taps do not cover the {h}x{wd} input")
    wtaps = 1 if mean else taps
    lw.bind("src", x)
    packed, biases = [], []
    params: dict[str, int | float] = {}
    end = 0
    for d in range(len(n.outputs)):
        w = lw.data(n.inputs[1 + 2 * d])
        o = int(w.shape[0])
        packed.append(L.conv_weights(w.reshape(o, 1, wtaps, c)))
        bi = n.inputs[2 + 2 * d]
        biases.append(L.channel_vector(lw.data(bi).reshape(-1) if bi >= 0 else None, o))
        end += L.slices(o)
        params[f"E{d}"], params[f"C{d}"] = end, o
    lw.const("weights", np.concatenate(packed))
    lw.const("bias", np.concatenate(biases))
    for d, y in enumerate(n.outputs):
        lw.bind(f"dst{d}", y)
    split, _ = choose_fc(b * pixels, end, L.slices(c) * taps, lw.cost)
    return [lw.op("heads", {"n": len(n.outputs), "acts": tuple(a["acts"]), "mean": mean or None,
                            "split": split if split > 1 else None},
                  {"B": b, "SRC_S": L.slices(c), "T": taps, "P": pixels, "S": end, "INV_T": 1.0 / taps, **params})]


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

KERNELS: tuple[KernelSpec, ...] = (
    spec("fully_connected", "matmul.lgk", "y[b, o] = act(sum_k x[b, k] w[o, k] + bias[o])",
         {"act": ACT, "split": SPLIT, "qdq": QDQ}, [{"act": a} for a in FUSED_ACTIVATIONS]
         + [{"split": n, "act": a} for n, a in zip(SPLITS[1:], ("NONE", "RELU", "PRELU", "TANH", "RELU6", "NONE"), strict=True)]
         + [{"qdq": True}, {"split": 32, "qdq": True}],
         default_wg=(32, 2, 1), shared_wg=split_wg),
    spec("heads", "matmul.lgk", "y_d = act_d(sum x w_d + bias_d) for n heads reading one input (optionally its mean)",
         {"n": Opt(2, tuple(range(1, 9))), "acts": Opt(("NONE", "NONE"), ACTIVATIONS, many=True),
          "mean": boolean(), "split": SPLIT},
         [{"n": 2, "acts": ("NONE", "LOGISTIC")}, {"n": 3, "acts": ("RELU", "NONE", "RELU6"), "split": 32},
          {"n": 4, "acts": ("LOGISTIC", "LOGISTIC", "NONE", "NONE"), "mean": True, "split": 128},
          {"n": 1, "acts": ("TANH",), "mean": True}],
         default_wg=(32, 2, 1), shared_wg=split_wg),
    spec("batch_matmul", "matmul.lgk", "batched matmul with broadcasting and adj_x/adj_y",
         {"adj_x": boolean(), "adj_y": boolean()},
         [{"adj_x": x, "adj_y": y} for x in (False, True) for y in (False, True)]),
)

OPS: dict[str, GpuOpEntry] = {
    "FULLY_CONNECTED": GpuOpEntry("fully_connected", lower_fc, check_fc, WEIGHTS_BIAS,
                                  ref=rf.fully_connected),
    "BATCH_MATMUL": GpuOpEntry("batch_matmul", lower_bmm, check_bmm, ref=rf.batch_matmul),
    HEADS_OP: GpuOpEntry("heads", lower_heads, claimed=False, ref=rf.sibling_heads),
}
