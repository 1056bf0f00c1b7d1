"""Lowering: what the GPU path accepts (:func:`supports`), and GPU nodes -> kernel launches (:class:`GpuOp`).

:func:`supports` answers the partitioner node by node, with a reason in words
when it declines.  :func:`compile_graph` / :func:`compile_partition` run the
passes, lower every node to template kernels (names, template options and
runtime params as the templates in ``shaders/`` declare them, see
``docs/gpu-kernels.md``), re-lay out constants once in the storage type,
plan the arena and return a :class:`GpuPlan` (format: ``docs/gpu-compiler.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._delegate import NodeView, PartitionSpec, Support
from .._errors import DelegateError
from .._ir import Subgraph, Tensor
from . import _layout as L
from ._capabilities import UNARY_KERNEL_OPS, match_epilogue
from ._geometry import conv_geometry, transpose_bias_params, transpose_conv_crop
from ._graph import Epilogue, GpuGraph, GpuNode, GpuOp, GpuPlan, PlanTensor
from ._memory import DEFAULT_ALIGNMENT, plan_arena
from ._passes import DEFAULT_PIPELINE, Pass, run_passes
from ._passes.float_view import QDQ_OP
from ._passes.fuse_dw_pw import DW_PW_OP, dw_pw_tiling
from ._precision import PrecisionPolicy, fp16_risks, precision_policy
from ._quant import quantized_reason

__all__ = ["SUPPORTED_OPS", "supports", "lower_node", "compile_graph", "compile_partition", "MAX_CONCAT_INPUTS"]

MAX_CONCAT_INPUTS = 8  # the concat template renders up to 8 inputs

_BINARY = ("ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "POW", "PRELU", "LOGICAL_AND")
_UNARY = tuple(sorted(UNARY_KERNEL_OPS - {"SQUARE"}))
_RESHAPES = ("RESHAPE", "SQUEEZE", "EXPAND_DIMS")
_REDUCE = {"MEAN": "MEAN", "SUM": "SUM", "REDUCE_MAX": "MAX", "REDUCE_MIN": "MIN"}

#: Group sizes split_for picks from.  The templates also take 4 and 8, but measured on an H200
#: (bench/gpu_kernels.py) such small groups lose to no split at all: a GPU core runs a bounded
#: number of work groups at once, so 4-thread groups leave it mostly idle.
_SPLIT_SIZES = (128, 64, 32, 16)
#: Threads a split should not push a launch beyond: enough to keep a large GPU's memory pipes busy,
#: while a small one (a few thousand threads in flight) still runs the groups back to back.
_SPLIT_THREADS = 131072


def split_for(outputs: int, steps: int) -> int:
    """Threads to share each output of a reduction (``split`` option of conv2d, fully_connected,
    reduce): ``outputs`` independent work items, each ``steps`` loop iterations long.

    A GPU hides memory latency only with many threads in flight.  When the output grid is small
    (deep layers at 8x8 or 1x1, global pooling, fully-connected heads) one thread per output walks
    its whole reduction serially, each step waiting on a load: measured on an H200, a 7x7x1152 ->
    7x7x192 1x1 convolution took 96 us that way and 12 us split 32 ways.  Splitting each output's
    reduction over a work group (partial sums meeting in shared memory) multiplies the threads in
    flight and divides the serial chain.  Pick the largest group that keeps at least two steps per
    thread and the launch within ``_SPLIT_THREADS``; 1 (no split) otherwise.
    """
    for s in _SPLIT_SIZES:
        if steps >= 2 * s and outputs * s <= _SPLIT_THREADS:
            return s
    return 1

#: every op name (builtin or custom code) :func:`supports` may accept
SUPPORTED_OPS = frozenset({
    *_BINARY, *_UNARY, *_RESHAPES, *_REDUCE, "SOFTMAX", "CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV",
    "FULLY_CONNECTED", "BATCH_MATMUL", "AVERAGE_POOL_2D", "MAX_POOL_2D", "CONCATENATION", "TRANSPOSE", "SLICE",
    "STRIDED_SLICE", "SPLIT", "SPLIT_V", "PAD", "PADV2", "MIRROR_PAD", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH",
    "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "LSTM", "Convolution2DTransposeBias", "DEQUANTIZE",
    "DENSIFY", "QUANTIZE",
})

# ops whose listed inputs are parameters that must be constant: op -> {input index: what it is}
_PARAM_INPUTS: dict[str, dict[int, str]] = {
    "CONV_2D": {1: "weights", 2: "bias"},
    "DEPTHWISE_CONV_2D": {1: "weights", 2: "bias"},
    "TRANSPOSE_CONV": {0: "output shape", 1: "weights", 3: "bias"},
    "Convolution2DTransposeBias": {1: "weights", 2: "bias"},
    "FULLY_CONNECTED": {1: "weights", 2: "bias"},
    "MEAN": {1: "axes"}, "SUM": {1: "axes"}, "REDUCE_MAX": {1: "axes"}, "REDUCE_MIN": {1: "axes"},
    "TRANSPOSE": {1: "permutation"},
    "SLICE": {1: "begin", 2: "size"},
    "STRIDED_SLICE": {1: "begin", 2: "end", 3: "strides"},
    "SPLIT": {0: "axis"},
    "SPLIT_V": {1: "size_splits", 2: "axis"},
    "PAD": {1: "paddings"}, "PADV2": {1: "paddings", 2: "pad value"}, "MIRROR_PAD": {1: "paddings"},
    "RESIZE_BILINEAR": {1: "size"}, "RESIZE_NEAREST_NEIGHBOR": {1: "size"},
    "RESHAPE": {1: "shape"},
    "EXPAND_DIMS": {1: "axis"},
    "LSTM": {2: "weights", 3: "bias"},
    "PRELU": {1: "alpha"},
}


# ---------------------------------------------------------------------------------------------------------
# supports
# ---------------------------------------------------------------------------------------------------------


def _constant_like(sg: Subgraph, t: int, depth: int = 0) -> bool:
    """A constant, or made from one by DEQUANTIZE/DENSIFY (folded at prepare)."""
    if t < 0:
        return True
    if sg.tensors[t].is_constant:
        return True
    if depth > 4:
        return False
    for op in sg.operators:
        if t in op.outputs:
            return op.name in ("DEQUANTIZE", "DENSIFY") and bool(op.inputs) and _constant_like(sg, op.inputs[0],
                                                                                              depth + 1)
    return False


def _float_like(t: Tensor) -> bool:
    return t.dtype in ("float32", "float16")


def supports(node: NodeView) -> Support:
    """Can the GPU path run ``node``?  Never raises; declines with a reason in words."""
    try:
        return _supports(node)
    except Exception as e:  # a malformed node is declined, the CPU path reports it properly
        return Support.no(f"could not analyse the node: {e}")


def _supports(node: NodeView) -> Support:
    op = node.op
    name = op.name
    if name not in SUPPORTED_OPS:
        return Support.no(f"{name} is not implemented on the GPU path")
    sg = node.subgraph
    ins = [t for t in node.inputs if t is not None]
    for t in (*ins, *node.outputs):
        if not t.has_rank:
            return Support.no(f"tensor {t.name!r} has unknown rank")
        if len(t.shape) > 4:
            return Support.no(f"rank {len(t.shape)} tensors")
        if t.is_dynamic and not t.is_constant:
            return Support.no(f"dynamic shape ({t.name!r} has signature {list(t.shape_signature)})")
        if 0 in t.shape and not t.is_constant:
            return Support.no(f"empty tensor {t.name!r}")
    params = _PARAM_INPUTS.get(name, {})
    for i, what in params.items():
        if i < len(op.inputs) and op.inputs[i] >= 0 and not _constant_like(sg, op.inputs[i]):
            return Support.no(f"{name} with a non-constant {what}")

    # quantized activations: the float view (``_quant``) decides
    quant = quantized_reason(node, params)
    if quant is not None:
        if quant:
            return Support.no(quant)
        check = _CHECKS.get(name)
        reason = check(node) if check is not None else ""
        return Support.no(reason) if reason else Support.yes()

    # data types: activations are float (bool for LOGICAL_AND); parameters may be int32
    if name in ("DEQUANTIZE", "DENSIFY"):
        src = node.inputs[0]
        if src is None or not _constant_like(sg, op.inputs[0]):
            return Support.no(f"{name} of a non-constant tensor (only constant weights fold away)")
        if node.outputs[0].dtype not in ("float32", "float16"):
            return Support.no(f"{name} to {node.outputs[0].dtype}")
        return Support.yes()
    runtime = [(i, t) for i, t in enumerate(node.inputs) if t is not None and i not in params]
    for i, t in runtime + [(-1, t) for t in node.outputs]:
        if name == "LOGICAL_AND":
            if t.dtype != "bool":
                return Support.no(f"LOGICAL_AND of {t.dtype} tensors")
            continue
        if t.quantization is not None and t.dtype in ("int8", "uint8", "int16"):
            return Support.no(f"quantized {t.dtype} activations (the GPU path computes in float)")
        if t.dtype == "int32" or t.dtype == "int64":
            return Support.no(f"{t.dtype} tensors")
        if not _float_like(t) and not (t.is_constant or _constant_like(sg, op.inputs[i] if i >= 0 else -1)):
            return Support.no(f"{t.dtype} tensors")
    for i, what in params.items():
        if what in ("weights", "bias", "alpha") and i < len(node.inputs) and node.inputs[i] is not None:
            t = node.inputs[i]
            if t.dtype not in ("float32", "float16") and not _dequantized(sg, op.inputs[i]):
                return Support.no(f"{name} with {t.dtype} {what} (hybrid quantization)")
    check = _CHECKS.get(name)
    if check is not None:
        reason = check(node)
        if reason:
            return Support.no(reason)
    return Support.yes()


def _dequantized(sg: Subgraph, t: int) -> bool:
    return not sg.tensors[t].is_constant and _constant_like(sg, t)


def _opt(node: NodeView, key: str, default: Any = 0) -> Any:
    return node.op.options.get(key, default)


def _check_conv(node: NodeView) -> str:
    x, w = node.inputs[0], node.inputs[1]
    if len(x.shape) != 4 or w is None or len(w.shape) != 4:
        return "CONV_2D needs a 4-D input and OHWI weights"
    cin, i = x.shape[3], w.shape[3]
    if i <= 0 or cin % i:
        return f"CONV_2D input channels {cin} not a multiple of the filter's {i}"
    groups = cin // i
    if w.shape[0] % groups:
        return f"grouped CONV_2D: {w.shape[0]} filters not divisible into {groups} groups"
    if min(_opt(node, "stride_h", 1), _opt(node, "stride_w", 1), _opt(node, "dilation_h_factor", 1),
           _opt(node, "dilation_w_factor", 1)) < 1:
        return "CONV_2D with non-positive stride or dilation"
    return ""


def _check_depthwise(node: NodeView) -> str:
    x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
    if len(x.shape) != 4 or w is None or len(w.shape) != 4 or w.shape[0] != 1:
        return "DEPTHWISE_CONV_2D needs a 4-D input and [1, KH, KW, C] weights"
    if w.shape[3] != y.shape[3] or y.shape[3] % x.shape[3]:
        return "DEPTHWISE_CONV_2D channel counts are inconsistent"
    return ""


def _check_transpose_conv(node: NodeView) -> str:
    if node.op.name == "Convolution2DTransposeBias":
        try:
            transpose_bias_params(node.op.custom_options)
        except DelegateError as e:
            return str(e)
        x, w = node.inputs[0], node.inputs[1]
    else:
        x, w = node.inputs[2], node.inputs[1]
        if _opt(node, "fused_activation_function") not in (0, 1, 2, 3, 4, 5):
            return "TRANSPOSE_CONV with an unknown fused activation"
    if x is None or w is None or len(x.shape) != 4 or len(w.shape) != 4 or w.shape[3] != x.shape[3]:
        return f"{node.op.name} needs a 4-D input and OHWI weights matching its channels"
    return ""


def _check_fc(node: NodeView) -> str:
    w = node.inputs[1]
    if w is None or len(w.shape) != 2:
        return "FULLY_CONNECTED needs 2-D weights"
    if _opt(node, "weights_format", 0) != 0:
        return "FULLY_CONNECTED with shuffled weights"
    x = node.inputs[0]
    if int(np.prod(x.shape)) % w.shape[1]:
        return "FULLY_CONNECTED input size is not a multiple of the weights' input size"
    return ""


def _check_bmm(node: NodeView) -> str:
    a, b = node.inputs[0], node.inputs[1]
    if len(a.shape) < 2 or len(b.shape) < 2:
        return "BATCH_MATMUL of rank < 2 tensors"
    return ""


def _check_pool(node: NodeView) -> str:
    if len(node.inputs[0].shape) != 4:
        return f"{node.op.name} needs a 4-D input"
    if min(_opt(node, "filter_height", 1), _opt(node, "filter_width", 1), _opt(node, "stride_h", 1),
           _opt(node, "stride_w", 1)) < 1:
        return f"{node.op.name} with a non-positive window or stride"
    return ""


def _check_concat(node: NodeView) -> str:
    n = len([t for t in node.inputs if t is not None])
    if n > MAX_CONCAT_INPUTS:
        return f"CONCATENATION of {n} inputs (the kernel takes up to {MAX_CONCAT_INPUTS})"
    return ""


def _check_strided_slice(node: NodeView) -> str:
    if _opt(node, "ellipsis_mask") or _opt(node, "new_axis_mask"):
        return "STRIDED_SLICE with ellipsis_mask or new_axis_mask"
    return ""


def _check_resize_nearest(node: NodeView) -> str:
    if _opt(node, "align_corners", False) and _opt(node, "half_pixel_centers", False):
        return "RESIZE_NEAREST_NEIGHBOR with align_corners and half_pixel_centers"
    return _check_4d(node)


def _check_resize_bilinear(node: NodeView) -> str:
    if _opt(node, "align_corners", False) and _opt(node, "half_pixel_centers", False):
        return "RESIZE_BILINEAR with align_corners and half_pixel_centers"
    return _check_4d(node)


def _check_4d(node: NodeView) -> str:
    if len(node.inputs[0].shape) != 4:
        return f"{node.op.name} needs a 4-D input"
    return ""


def _check_lstm(node: NodeView) -> str:
    if _opt(node, "kernel_type", 0) != 1:
        return "LSTM other than the basic kernel (kernel_type BASIC)"
    if len(node.op.inputs) != 5:
        return "basic LSTM needs 5 inputs"
    if _opt(node, "fused_activation_function", 4) != 4:
        return "basic LSTM with an activation other than TANH"
    if _opt(node, "proj_clip", 0.0):
        return "basic LSTM with proj_clip"
    x, h = node.inputs[0], node.inputs[1]
    if len(x.shape) != 2 or len(h.shape) != 2:
        return "basic LSTM with inputs of rank other than 2"
    return ""


_CHECKS: dict[str, Callable[[NodeView], str]] = {
    "CONV_2D": _check_conv,
    "DEPTHWISE_CONV_2D": _check_depthwise,
    "TRANSPOSE_CONV": _check_transpose_conv,
    "Convolution2DTransposeBias": _check_transpose_conv,
    "FULLY_CONNECTED": _check_fc,
    "BATCH_MATMUL": _check_bmm,
    "AVERAGE_POOL_2D": _check_pool,
    "MAX_POOL_2D": _check_pool,
    "CONCATENATION": _check_concat,
    "STRIDED_SLICE": _check_strided_slice,
    "RESIZE_NEAREST_NEIGHBOR": _check_resize_nearest,
    "RESIZE_BILINEAR": _check_resize_bilinear,
    "DEPTH_TO_SPACE": _check_4d,
    "SPACE_TO_DEPTH": _check_4d,
    "LSTM": _check_lstm,
}


# ---------------------------------------------------------------------------------------------------------
# lowering
# ---------------------------------------------------------------------------------------------------------


class _Lowerer:
    """Lowers one node; collects constants (re-laid out, storage type) and bindings."""

    def __init__(self, g: GpuGraph, node: GpuNode, policy: PrecisionPolicy):
        self.g, self.n, self.p = g, node, policy
        self.constants: dict[str, np.ndarray] = {}
        self.bindings: list[tuple[str, int | str]] = []

    # -- helpers
    def shape(self, t: int) -> tuple[int, int, int, int]:
        return self.g.tensors[t].shape

    def data(self, t: int) -> np.ndarray:
        x = self.g.tensors[t]
        if x.data is None:
            raise DelegateError(f"{self.n.describe()}: input {x.name!r} must be constant on the GPU path")
        if x.quantization is not None and x.dtype in ("int8", "uint8", "int16", "int32"):
            raise DelegateError(f"{self.n.describe()}: quantized constant {x.name!r} was not dequantized "
                                "(run the float_view pass)")
        return np.asarray(x.data, np.float32).reshape(x.ir_shape)

    def dims(self, t: int, prefix: str = "") -> dict[str, int]:
        b, h, w, c = self.shape(t)
        return {f"{prefix}B": b, f"{prefix}H": h, f"{prefix}W": w, f"{prefix}C": c, f"{prefix}S": L.slices(c)}

    def const(self, key: str, arr: np.ndarray) -> str:
        self.constants[key] = self.p.constant(arr, self.n)
        self.bindings.append((key, key))
        return key

    def tensor_or_const(self, binding: str, t: int) -> None:
        """Bind a runtime tensor, or a constant laid out as PHWC4 of its own 4-D shape."""
        if self.g.is_constant(t):
            x = self.g.tensors[t]
            self.constants[binding] = self.p.constant(L.constant_phwc4(np.asarray(x.data), x.shape), self.n)
            self.bindings.append((binding, binding))
        else:
            self.bindings.append((binding, t))

    def bind(self, name: str, t: int) -> None:
        self.bindings.append((name, t))

    def epilogue(self) -> tuple[dict[str, Any], list[Epilogue]]:
        m = match_epilogue(self.g, self.n)
        if m is None:  # legalise_epilogues guarantees a match; a hand-built graph may not
            raise DelegateError(f"{self.n.describe()}: epilogue does not fit the kernel (run legalise_epilogues)")
        return m

    def bind_epilogue_operands(self, operands: list[Epilogue], channels: int) -> None:
        after_residual = False
        for e in operands:
            if e.op == "PRELU":  # a PRELU after the residual step has its own alpha (res_alpha)
                self.const("res_alpha" if after_residual else "alpha",
                           L.channel_vector(self.data(e.operand).reshape(-1), channels))
            else:
                self.tensor_or_const("res", e.operand)
                after_residual = True

    def op(self, kernel: str, options: dict[str, Any], params: dict[str, Any],
           outputs: Sequence[int] | None = None) -> GpuOp:
        outs = list(self.n.outputs if outputs is None else outputs)
        if options.get("qdq"):
            # the QDQ epilogue step's grid, as the template's Q_* params (f32)
            scale, zp, qmin, qmax = self.n.epilogue[-1].q
            params = {**params, "Q_SCALE": float(scale), "Q_ZP": float(zp), "Q_MIN": float(qmin),
                      "Q_MAX": float(qmax)}
        reads = [t for _, t in self.bindings if isinstance(t, int)]
        ins = [t for t in reads if t not in outs]
        precision = self.p.node_precision(self.n)
        return GpuOp(kernel=kernel, params=params, inputs=ins, outputs=outs, constants=dict(self.constants),
                     node=self.n.id, origin=self.n.origin, accumulator=self.p.accumulator(self.n),
                     options={k: v for k, v in options.items() if v is not None},
                     bindings=list(self.bindings), precision=None if precision == self.p.mode else precision,
                     buffer_storage=self.buffer_storage(precision))

    def buffer_storage(self, precision: str) -> dict[str, str]:
        """Bindings whose element type differs from the one ``precision`` stores floats in."""
        real = "float32" if precision == "fp32" else "float16"
        out = {}
        for name, src in self.bindings:
            if isinstance(src, str):
                st = self.constants[src].dtype.name
            else:
                st = self.p.storage(self.g.tensors[src])
            if st in ("float32", "float16") and st != real:
                out[name] = st
        return out


def _lower_conv(lw: _Lowerer) -> list[GpuOp]:
    n = lw.n
    x, y = n.inputs[0], n.outputs[0]
    w = lw.data(n.inputs[1])
    b, h, wd, c = lw.shape(x)
    _, oh, ow, o = lw.shape(y)
    groups = c // w.shape[3]
    geo = conv_geometry(n.attrs, (h, wd), w.shape[1:3])
    opts, operands = lw.epilogue()
    # the template needs group sizes in whole slices; otherwise a dense filter with zeros elsewhere
    w, grouped = L.grouped_conv_filter(w, groups)
    lw.bind("src", x)
    lw.const("weights", L.conv_weights(w))
    bias = lw.data(n.inputs[2]).reshape(-1) if len(n.inputs) > 2 and n.inputs[2] >= 0 else None
    lw.const("bias", L.channel_vector(bias, o))
    lw.bind_epilogue_operands(operands, o)
    lw.bind("dst", y)
    t, _, le, _ = geo["pads"]
    params = {"B": b, "SRC_H": h, "SRC_W": wd, "SRC_S": L.slices(c), "H": oh, "W": ow, "C": o, "S": L.slices(o),
              "KH": w.shape[1], "KW": w.shape[2], "STRIDE_H": geo["stride"][0], "STRIDE_W": geo["stride"][1],
              "PAD_T": t, "PAD_L": le, "DIL_H": geo["dilation"][0], "DIL_W": geo["dilation"][1],
              "SRC_SG": L.slices(c // groups) if grouped else L.slices(c),
              "DST_SG": L.slices(o // groups) if grouped else L.slices(o)}
    if opts.get("residual_channels") == "fewer":  # the residual's own slice count (a channel PAD merged)
        params["RES_S"] = L.slices(lw.shape(next(e.operand for e in operands if e.zero_extend))[3])
    # one output pixel per row (1x1 heads): a second pixel per work item would be wasted work
    block_w = 1 if ow == 1 else 2
    outputs = b * oh * -(-ow // block_w) * params["S"]
    split = split_for(outputs, params["KH"] * params["KW"] * params["SRC_SG"])
    return [lw.op("conv2d", {**opts, "grouped": grouped or None, "block_w": block_w if block_w != 2 else None,
                             "split": split if split > 1 else None}, params)]


def _lower_depthwise(lw: _Lowerer) -> list[GpuOp]:
    n = lw.n
    x, y = n.inputs[0], n.outputs[0]
    w = lw.data(n.inputs[1])
    b, h, wd, c = lw.shape(x)
    _, oh, ow, o = lw.shape(y)
    geo = conv_geometry(n.attrs, (h, wd), w.shape[1:3])
    opts, operands = lw.epilogue()
    lw.bind("src", x)
    lw.const("weights", L.depthwise_weights(w))
    bias = lw.data(n.inputs[2]).reshape(-1) if len(n.inputs) > 2 and n.inputs[2] >= 0 else None
    lw.const("bias", L.channel_vector(bias, o))
    lw.bind_epilogue_operands(operands, o)
    lw.bind("dst", y)
    mult = o // c
    params = {"B": b, "SRC_H": h, "SRC_W": wd, "SRC_S": L.slices(c), "H": oh, "W": ow, "C": o, "S": L.slices(o),
              "KH": w.shape[1], "KW": w.shape[2], "STRIDE_H": geo["stride"][0], "STRIDE_W": geo["stride"][1],
              "PAD_T": geo["pads"][0], "PAD_L": geo["pads"][2], "DIL_H": geo["dilation"][0],
              "DIL_W": geo["dilation"][1], "MULT": mult}
    return [lw.op("depthwise_conv2d", {**opts, "multiplier": "one" if mult == 1 else "any"}, params)]


def _lower_dw_pw(lw: _Lowerer) -> list[GpuOp]:
    """The fused depthwise -> 1x1 conv node (``_passes/fuse_dw_pw``): one ``dw_pw_conv2d`` launch."""
    n = lw.n
    x, y = n.inputs[0], n.outputs[0]
    dw_w, pw_w = lw.data(n.inputs[1]), lw.data(n.inputs[3])
    b, h, wd, c = lw.shape(x)
    _, oh, ow, o = lw.shape(y)
    geo = conv_geometry(n.attrs["dw"], (h, wd), dw_w.shape[1:3])
    opts, operands = lw.epilogue()
    dw_act = n.attrs.get("dw_act") or "NONE"

    def vector(i: int, channels: int) -> np.ndarray:
        t = n.inputs[i] if len(n.inputs) > i else -1
        return L.channel_vector(lw.data(t).reshape(-1) if t >= 0 else None, channels)

    lw.bind("src", x)
    lw.const("dw_weights", L.depthwise_weights(dw_w))
    lw.const("dw_bias", vector(2, c))
    if dw_act == "PRELU":
        lw.const("dw_alpha", vector(5, c))
    lw.const("weights", L.conv_weights(pw_w))
    lw.const("bias", vector(4, o))
    lw.bind_epilogue_operands(operands, o)
    lw.bind("dst", y)
    params = {"B": b, "SRC_H": h, "SRC_W": wd, "SRC_S": L.slices(c), "H": oh, "W": ow, "C": o, "S": L.slices(o),
              "KH": dw_w.shape[1], "KW": dw_w.shape[2], "STRIDE_H": geo["stride"][0], "STRIDE_W": geo["stride"][1],
              "PAD_T": geo["pads"][0], "PAD_L": geo["pads"][2], "DIL_H": geo["dilation"][0],
              "DIL_W": geo["dilation"][1]}
    if opts.get("residual_channels") == "fewer":  # the residual's own slice count (a channel PAD merged)
        params["RES_S"] = L.slices(lw.shape(next(e.operand for e in operands if e.zero_extend))[3])
    split, block_s, block_w = dw_pw_tiling(b * oh * ow * params["S"], params["SRC_S"], params["S"], ow)
    return [lw.op("dw_pw_conv2d", {**opts, "dw_act": dw_act if dw_act != "NONE" else None,
                                   "block_w": block_w if block_w != 2 else None,
                                   "block_s": block_s if block_s != 1 else None,
                                   "split": split if split > 1 else None}, params)]


def _lower_transpose_conv(lw: _Lowerer) -> list[GpuOp]:
    n = lw.n
    if n.op == "Convolution2DTransposeBias":
        x, wi, bi = n.inputs[0], n.inputs[1], n.inputs[2] if len(n.inputs) > 2 else -1
        attrs = transpose_bias_params(n.attrs.get("custom_options"))
    else:
        x, wi, bi = n.inputs[2], n.inputs[1], n.inputs[3] if len(n.inputs) > 3 else -1
        attrs = n.attrs
    y = n.outputs[0]
    w = lw.data(wi)
    b, h, wd, c = lw.shape(x)
    _, oh, ow, o = lw.shape(y)
    sh, sw = int(attrs.get("stride_h", 1)), int(attrs.get("stride_w", 1))
    pad = int(attrs.get("padding", 0))
    opts, operands = lw.epilogue()
    lw.bind("src", x)
    lw.const("weights", L.transpose_conv_weights(w))
    lw.const("bias", L.channel_vector(lw.data(bi).reshape(-1) if bi >= 0 else None, o))
    lw.bind_epilogue_operands(operands, o)
    lw.bind("dst", y)
    params = {"B": b, "SRC_H": h, "SRC_W": wd, "SRC_S": L.slices(c), "H": oh, "W": ow, "C": o, "S": L.slices(o),
              "KH": w.shape[1], "KW": w.shape[2], "STRIDE_H": sh, "STRIDE_W": sw,
              "PAD_T": transpose_conv_crop(pad, h, oh, w.shape[1], sh),
              "PAD_L": transpose_conv_crop(pad, wd, ow, w.shape[2], sw)}
    return [lw.op("transpose_conv2d", opts, params)]


def _lower_fc(lw: _Lowerer) -> list[GpuOp]:
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
    lw.bind("src", x)
    lw.const("weights", L.fc_weights(w))
    bias = lw.data(n.inputs[2]).reshape(-1) if len(n.inputs) > 2 and n.inputs[2] >= 0 else None
    lw.const("bias", L.channel_vector(bias, o))
    lw.bind_epilogue_operands(operands, o)
    lw.bind("dst", y)
    split = split_for(rows * L.slices(o), L.slices(i))
    return [lw.op("fully_connected", {**opts, "split": split if split > 1 else None},
                  {"B": rows, "SRC_S": L.slices(i), "C": o, "S": L.slices(o)})]


def _lower_bmm(lw: _Lowerer) -> list[GpuOp]:
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


def _lower_pool(lw: _Lowerer) -> list[GpuOp]:
    n = lw.n
    x, y = n.inputs[0], n.outputs[0]
    b, h, wd, c = lw.shape(x)
    _, oh, ow, _ = lw.shape(y)
    kh, kw = int(n.attrs["filter_height"]), int(n.attrs["filter_width"])
    geo = conv_geometry(n.attrs, (h, wd), (kh, kw))
    opts, _ = lw.epilogue()
    lw.bind("src", x)
    lw.bind("dst", y)
    params = {"B": b, "SRC_H": h, "SRC_W": wd, "H": oh, "W": ow, "C": c, "S": L.slices(c), "KH": kh, "KW": kw,
              "STRIDE_H": geo["stride"][0], "STRIDE_W": geo["stride"][1], "PAD_T": geo["pads"][0],
              "PAD_L": geo["pads"][2]}
    options = {"op": "MAX" if n.op == "MAX_POOL_2D" else "AVG", **opts}
    t, le = geo["pads"][0], geo["pads"][2]
    if ((oh, ow) == (1, 1) and kh - t >= h and kw - le >= wd and n.attrs.get("pad_value") is None
            and opts.get("act", "NONE") == "NONE"):
        # a global pool (one window over the whole image) is a reduction: as one, its long sum is
        # split over a work group instead of walked by one thread per channel slice
        split = split_for(b * L.slices(c), h * wd)
        params = {**lw.dims(x, "SRC_"), **lw.dims(y), "RB": 0, "RH": 1, "RW": 1, "RC": 0}
        return [lw.op("reduce", {"op": "MEAN" if options["op"] == "AVG" else "MAX",
                                 "qdq": opts.get("qdq"), "split": split if split > 1 else None}, params)]
    if n.attrs.get("pad_value") is not None:
        # explicit padding merged from a PAD (only when _capabilities.POOL_TAKES_PAD_VALUE)
        ex = n.attrs["explicit_padding"]
        params.update({"EX_T": ex[0], "EX_B": ex[1], "EX_L": ex[2], "EX_R": ex[3],
                       "PAD_VALUE": float(n.attrs["pad_value"])})
        options["explicit_pad"] = True
    return [lw.op("pool2d", options, params)]


def _lower_binary(lw: _Lowerer) -> list[GpuOp]:
    n = lw.n
    a, b_ = n.inputs[0], n.inputs[1]
    y = n.outputs[0]
    opts, _ = lw.epilogue()
    params = lw.dims(y)
    lw.tensor_or_const("lhs", a)
    options = {"op": n.op, **opts}
    rb = lw.g.tensors[b_]
    if rb.is_constant and rb.size == 1:
        options["rhs"] = "scalar"
        params["R_VALUE"] = float(np.asarray(rb.data).reshape(-1)[0])
    else:
        lw.tensor_or_const("rhs", b_)
        params.update(lw.dims(b_, "R_"))
        if n.attrs.get("zero_extend_rhs"):  # rhs has fewer channels, zero past them (_passes/channel_pad)
            options["rhs_channels"] = "fewer"
    params.update(lw.dims(a, "L_"))
    lw.bind("dst", y)
    return [lw.op("binary", options, params)]


def _lower_unary(lw: _Lowerer) -> list[GpuOp]:
    n = lw.n
    op = n.op
    if op == "GELU" and n.attrs.get("approximate"):
        op = "GELU_TANH"
    if op == QDQ_OP:
        op = "NONE"  # a copy; the QDQ step (if any) is its epilogue
    opts, _ = lw.epilogue()
    lw.bind("src", n.inputs[0])
    lw.bind("dst", n.outputs[0])
    params = {**lw.dims(n.outputs[0]), "alpha": float(n.attrs.get("alpha", 0.0))}
    return [lw.op("unary", {"op": op, **opts}, params)]


def _lower_reduce(lw: _Lowerer) -> list[GpuOp]:
    n = lw.n
    axes = set(n.attrs["axes"])
    opts, _ = lw.epilogue()
    lw.bind("src", n.inputs[0])
    lw.bind("dst", n.outputs[0])
    params = {**lw.dims(n.inputs[0], "SRC_"), **lw.dims(n.outputs[0]),
              "RB": int(0 in axes), "RH": int(1 in axes), "RW": int(2 in axes), "RC": int(3 in axes)}
    steps = 1
    for flag, dim in (("RB", "SRC_B"), ("RH", "SRC_H"), ("RW", "SRC_W"), ("RC", "SRC_S")):
        steps *= params[dim] if params[flag] else 1
    split = split_for(params["B"] * params["H"] * params["W"] * params["S"], steps)
    return [lw.op("reduce", {"op": _REDUCE[n.op], **opts, "split": split if split > 1 else None}, params)]


def _lower_softmax(lw: _Lowerer) -> list[GpuOp]:
    opts, _ = lw.epilogue()
    lw.bind("src", lw.n.inputs[0])
    lw.bind("dst", lw.n.outputs[0])
    return [lw.op("softmax", {"log": False, **opts},
                  {**lw.dims(lw.n.outputs[0]), "beta": float(lw.n.attrs.get("beta", 1.0))})]


def _lower_concat(lw: _Lowerer) -> list[GpuOp]:
    n = lw.n
    ins = [t for t in n.inputs if t >= 0]
    axis = int(n.attrs["axis"])
    params = lw.dims(n.outputs[0])
    for i, t in enumerate(ins):
        lw.tensor_or_const(f"in{i}", t)
        params[f"E{i}"] = lw.shape(t)[axis]
    lw.bind("dst", n.outputs[0])
    return [lw.op("concat", {"axis": axis, "n": len(ins)}, params)]


def _row_major_strides(shape: Sequence[int]) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


def _lower_gather(lw: _Lowerer) -> list[GpuOp]:
    """RESHAPE and TRANSPOSE as the ``gather`` template: output logical dims D0..D5 (row-major, leading 1s),
    T_i the source row-major stride of the axis output axis i comes from."""
    n = lw.n
    x, y = n.inputs[0], n.outputs[0]
    out = lw.shape(y)
    if n.op == "TRANSPOSE":
        perm = list(n.attrs["perm"])
        src_strides = _row_major_strides(lw.shape(x))
        dims = [1, 1, *out]
        strides = [0, 0, *[src_strides[p] for p in perm]]
    else:
        total = int(np.prod(out))
        dims = [1, 1, 1, 1, 1, total]
        strides = [0, 0, 0, 0, 0, 1]
    lw.bind("src", x)
    lw.bind("dst", y)
    params = {**lw.dims(y), "SRC_H": lw.shape(x)[1], "SRC_W": lw.shape(x)[2], "SRC_C": lw.shape(x)[3],
              "SRC_S": L.slices(lw.shape(x)[3])}
    params.update({f"D{i}": dims[i] for i in range(1, 6)})
    params.update({f"T{i}": strides[i] for i in range(6)})
    return [lw.op("gather", {}, params)]


def _slice_op(lw: _Lowerer, src: int, dst: int, ranges: Sequence[tuple[int, int, int]]) -> GpuOp:
    sub = _Lowerer(lw.g, lw.n, lw.p)
    sub.bind("src", src)
    sub.bind("dst", dst)
    s = lw.shape(src)
    params = {**sub.dims(dst), "SRC_H": s[1], "SRC_W": s[2], "SRC_C": s[3], "SRC_S": L.slices(s[3])}
    for ax, name in enumerate("BHWC"):
        params[f"BEG_{name}"] = int(ranges[ax][0])
        params[f"STR_{name}"] = int(ranges[ax][2])
    return sub.op("slice", {}, params, outputs=[dst])


def _lower_slice(lw: _Lowerer) -> list[GpuOp]:
    n = lw.n
    return [_slice_op(lw, n.inputs[0], n.outputs[0], n.attrs["ranges"])]


def _lower_split(lw: _Lowerer) -> list[GpuOp]:
    n = lw.n
    x = n.inputs[1] if n.op == "SPLIT" else n.inputs[0]
    axis = int(n.attrs["axis"])
    ops, offset = [], 0
    for t in n.outputs:
        ranges = [(0, 0, 1)] * 4
        ranges[axis] = (offset, 0, 1)
        ops.append(_slice_op(lw, x, t, ranges))
        offset += lw.shape(t)[axis]
    return ops


def _lower_pad(lw: _Lowerer) -> list[GpuOp]:
    n = lw.n
    x, y = n.inputs[0], n.outputs[0]
    p = n.attrs["paddings"]
    mode = "CONSTANT" if n.op != "MIRROR_PAD" else ("REFLECT" if int(n.attrs.get("mode", 0)) == 0 else "SYMMETRIC")
    lw.bind("src", x)
    lw.bind("dst", y)
    params = {**lw.dims(y), **lw.dims(x, "SRC_"), "P_B": p[0][0], "P_H": p[1][0], "P_W": p[2][0], "P_C": p[3][0],
              "value": float(n.attrs.get("pad_value", 0.0))}
    return [lw.op("pad", {"mode": mode}, params)]


def _lower_space(lw: _Lowerer) -> list[GpuOp]:
    n = lw.n
    x, y = n.inputs[0], n.outputs[0]
    lw.bind("src", x)
    lw.bind("dst", y)
    s = lw.shape(x)
    params = {**lw.dims(y), "SRC_H": s[1], "SRC_W": s[2], "SRC_S": L.slices(s[3]), "BS": int(n.attrs["block_size"])}
    if n.op == "SPACE_TO_DEPTH":
        params["SRC_C"] = s[3]
    return [lw.op(n.op.lower(), {}, params)]


def _lower_resize(lw: _Lowerer) -> list[GpuOp]:
    n = lw.n
    x, y = n.inputs[0], n.outputs[0]
    _, h, w, _ = lw.shape(x)
    _, oh, ow, _ = lw.shape(y)
    align, half = bool(n.attrs.get("align_corners")), bool(n.attrs.get("half_pixel_centers"))

    def scale(i: int, o: int) -> float:
        return float(np.float32((i - 1) / (o - 1) if align and o > 1 else i / o))

    opts, _ = lw.epilogue()
    lw.bind("src", x)
    lw.bind("dst", y)
    params = {**lw.dims(y), "SRC_H": h, "SRC_W": w, "SCALE_H": scale(h, oh), "SCALE_W": scale(w, ow),
              "HALF_PIXEL": int(half), "ALIGN": int(align)}
    return [lw.op("resize", {"mode": "BILINEAR" if n.op == "RESIZE_BILINEAR" else "NEAREST", **opts}, params)]


def _lower_lstm_cell(lw: _Lowerer) -> list[GpuOp]:
    n = lw.n
    gates, prev_c = n.inputs[0], n.inputs[1]
    new_c, new_h = n.outputs
    lw.bind("gates", gates)
    lw.bind("prev_c", prev_c)
    lw.bind("new_c", new_c)
    lw.bind("new_h", new_h)
    c = lw.shape(new_c)[3]
    params = {"B": lw.shape(new_c)[0], "C": c, "S": L.slices(c), "CELL_CLIP": float(n.attrs.get("cell_clip", 0.0))}
    return [lw.op("lstm_cell", {}, params)]


_LOWER: dict[str, Callable[[_Lowerer], list[GpuOp]]] = {
    "CONV_2D": _lower_conv,
    "DEPTHWISE_CONV_2D": _lower_depthwise,
    DW_PW_OP: _lower_dw_pw,
    "TRANSPOSE_CONV": _lower_transpose_conv,
    "Convolution2DTransposeBias": _lower_transpose_conv,
    "FULLY_CONNECTED": _lower_fc,
    "BATCH_MATMUL": _lower_bmm,
    "AVERAGE_POOL_2D": _lower_pool,
    "MAX_POOL_2D": _lower_pool,
    **{op: _lower_binary for op in _BINARY},
    **{op: _lower_unary for op in (*UNARY_KERNEL_OPS, "SIGN_BIT", QDQ_OP)},
    **{op: _lower_reduce for op in _REDUCE},
    "SOFTMAX": _lower_softmax,
    "CONCATENATION": _lower_concat,
    **{op: _lower_gather for op in (*_RESHAPES, "TRANSPOSE")},
    "SLICE": _lower_slice,
    "STRIDED_SLICE": _lower_slice,
    "SPLIT": _lower_split,
    "SPLIT_V": _lower_split,
    "PAD": _lower_pad,
    "PADV2": _lower_pad,
    "MIRROR_PAD": _lower_pad,
    "DEPTH_TO_SPACE": _lower_space,
    "SPACE_TO_DEPTH": _lower_space,
    "RESIZE_BILINEAR": _lower_resize,
    "RESIZE_NEAREST_NEIGHBOR": _lower_resize,
    "LSTM_CELL": _lower_lstm_cell,
}


def lower_node(g: GpuGraph, node: GpuNode, policy: PrecisionPolicy) -> list[GpuOp]:
    """The kernel launches computing ``node`` (after the passes; ``node.bhwc`` must be set)."""
    if not node.bhwc:
        raise DelegateError(f"{node.describe()}: not normalised to BHWC (run normalise_bhwc)")
    f = _LOWER.get(node.op)
    if f is None:
        raise DelegateError(f"{node.describe()}: no GPU kernel for {node.op}")
    return f(_Lowerer(g, node, policy))


def compile_graph(g: GpuGraph, *, precision: str = "fp32", alignment: int = DEFAULT_ALIGNMENT,
                  passes: Sequence[Pass] = DEFAULT_PIPELINE, quantization_simulation: bool = True) -> GpuPlan:
    """Run ``passes`` on ``g`` (in place), lower it and plan its memory.

    ``quantization_simulation``: snap quantized results to their grids (``_passes/float_view``)."""
    policy = precision_policy(precision)
    g.options["quantization_simulation"] = bool(quantization_simulation)
    reports = run_passes(g, passes)
    for x in g.tensors.values():
        if not x.is_constant and x.dtype in ("int8", "uint8", "int16"):
            raise DelegateError(f"tensor {x.name!r} is {x.dtype} on the GPU path (run the float_view pass)")
    ops: list[GpuOp] = []
    for node in g.nodes:
        ops += lower_node(g, node, policy)
    written = {t for op in ops for t in op.outputs}
    for t in g.outputs:
        if t not in written and t not in g.inputs:  # an output that is an input passes through
            raise DelegateError(f"partition output {g.tensors[t].name!r} is not computed on the GPU")

    boundary = set(g.inputs) | set(g.outputs)
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, op in enumerate(ops):
        for t in op.outputs:
            if t not in boundary:
                first.setdefault(t, i)
                last[t] = max(last.get(t, i), i)
        for t in op.inputs:
            if t in first:
                last[t] = i
    lifetimes = {t: (first[t], last[t]) for t in first}
    sizes = {t: L.phwc4_nbytes(g.tensors[t].shape, policy.tensor_itemsize(g.tensors[t])) for t in lifetimes}
    mem = plan_arena(sizes, lifetimes, alignment=alignment)

    tensors: dict[int, PlanTensor] = {}
    used = set(boundary) | set(lifetimes)
    for t in sorted(used):
        x = g.tensors[t]
        kind = "input" if t in g.inputs else "output" if t in g.outputs else "intermediate"
        quant = (x.qview.scale, x.qview.zero_point) if x.qview is not None and kind != "intermediate" else None
        tensors[t] = PlanTensor(id=t, name=x.name, kind=kind, shape=x.shape, ir_shape=x.ir_shape,
                                dtype=x.qview.dtype if x.qview is not None else x.dtype, quant=quant,
                                storage=policy.storage(x), layout="PHWC4",
                                nbytes=L.phwc4_nbytes(x.shape, policy.tensor_itemsize(x)),
                                offset=mem.offsets.get(t), host_output=x.host_output and kind == "output")
    warnings = fp16_risks(g) if policy.mode != "fp32" else []
    plan = GpuPlan(ops=ops, tensors=tensors, inputs=list(g.inputs), outputs=list(g.outputs), precision=policy.mode,
                   arena_bytes=mem.arena_bytes, alignment=alignment, memory=mem.summary(), report=reports,
                   warnings=warnings)
    plan.report["lower"] = [f"{len(ops)} kernel launches: " + ", ".join(
        f"{k} {v}" for k, v in sorted(_count(op.kernel for op in ops).items()))]
    fused = sum(1 for op in ops if op.options.get("qdq") and op.options.get("op") != "NONE")
    alone = sum(1 for op in ops if op.options.get("qdq") and op.options.get("op") == "NONE")
    if fused or alone:
        plan.report["lower"].append(f"QDQ: {fused} fused into their producer's kernel, {alone} launches of "
                                    "their own (QUANTIZE, or after a kernel without the qdq option)")
    plan.report["memory"] = [f"arena {mem.arena_bytes} bytes for {len(lifetimes)} intermediates "
                             f"(naive {mem.naive_bytes}, lower bound {mem.lower_bound}, "
                             f"ratio {mem.ratio:.3f}, {mem.strategy})"]
    return plan


def _count(items) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return out


def compile_partition(spec: PartitionSpec, *, precision: str = "fp32", alignment: int = DEFAULT_ALIGNMENT,
                      passes: Sequence[Pass] = DEFAULT_PIPELINE, quantization_simulation: bool = True) -> GpuPlan:
    """Compile one delegate partition into a :class:`GpuPlan`."""
    return compile_graph(GpuGraph.from_partition(spec), precision=precision, alignment=alignment, passes=passes,
                         quantization_simulation=quantization_simulation)
