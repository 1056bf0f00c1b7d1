"""The GPU ops' support checks and lowerings: one ``check_*`` and one ``lower_*`` per op family.

A check answers one node (a :class:`NodeView`) with "" (supported) or the reason in words; a
lowering turns one GPU node into kernel launches (:class:`GpuOp`: template name, options and runtime
params as the templates in ``core/litegpu/shaders/`` declare them, see ``docs/gpu-kernels.md``) and
re-lays out its constants once (``_layout``).  Which op uses which is the op table's business
(``_op_table.py``); this module knows no op list and imports neither the passes nor the table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .._delegate import NodeView
from .._errors import DelegateError
from . import _layout as L
from ._cost import DeviceCost, choose_conv, choose_fc, choose_reduce, profile_for
from ._geometry import conv_geometry, transpose_bias_params, transpose_conv_crop
from ._graph import QDQ_OP, Epilogue, GpuGraph, GpuNode, GpuOp
from ._precision import PrecisionPolicy

__all__ = ["Lowerer", "MAX_CONCAT_INPUTS", "REDUCE_KINDS", "dw_pw_tiling"]

MAX_CONCAT_INPUTS = 8  # the concat template renders up to 8 inputs

#: the reduce template's ``op`` option for each TFLite reduction
REDUCE_KINDS = {"MEAN": "MEAN", "SUM": "SUM", "REDUCE_MAX": "MAX", "REDUCE_MIN": "MIN"}

#: dw_pw_conv2d tiling (:func:`dw_pw_tiling`), from every variant timed on an H200 (bench/gpu_dw_pw.py --explore)
_SPLIT_OUTPUTS, _SPLIT4_OUTPUTS = 20480, 8192
_SMALL, _MEDIUM = 1024, 4096


def dw_pw_tiling(outputs: int, src_slices: int, out_slices: int, width: int) -> tuple[int, int, int]:
    """``(split, block_s, block_w)`` of a fused depthwise -> 1x1 launch (kernel ``dw_pw_conv2d``) with
    ``outputs`` output vectors (B * H * W * output slices) and ``src_slices`` input slices.

    Not the cost model's reduction split (``_cost``): a step of this kernel's reduction is a whole depthwise evaluation of one
    input slice (KH * KW loads) and 16 * block_s multiply-adds, so one work item walking every input slice
    is a long serial chain even at 8-16 slices (a 96 -> 96 channel block at 8x8 took 53 us that way on an
    H200, 7.5 us split 32 ways).  Timed over every variant of the fusable pairs of the 13 MediaPipe models:
    the best group is about one input slice per thread (the power of two >= ``src_slices``, 4 to 128;
    4- and 8-thread groups win here) while the grid is small (<= 20480 output vectors; 4 threads only up
    to 8192); larger maps fill the GPU already and run best unsplit, one output vector per work item.
    With a split: 1 output slice x 1 pixel per group up to 1024 output vectors, then 2 slices, then
    2 slices x 2 pixels past 4096.
    """
    if outputs > _SPLIT_OUTPUTS or src_slices < 4 or (src_slices < 8 and outputs > _SPLIT4_OUTPUTS):
        return 1, 1, 1
    split = min(128, 1 << (src_slices - 1).bit_length())
    block_s, block_w = (1, 1) if outputs <= _SMALL else (2, 1) if outputs <= _MEDIUM else (2, 2)
    return split, min(block_s, out_slices), 1 if width == 1 else block_w


#: conv2d's defaults of the options the cost model picks (left out of a launch's options when equal)
_CONV_DEFAULTS = {"block_w": 2, "block_s": 1, "split": 1}


def _non_default(choice: dict[str, int]) -> dict[str, int]:
    """reduce's split / unroll as options: left out at their default 1."""
    return {k: v for k, v in choice.items() if v != 1}


def _opt(node: NodeView, key: str, default: Any = 0) -> Any:
    return node.op.options.get(key, default)


def check_conv(node: NodeView) -> str:
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


def check_depthwise(node: NodeView) -> str:
    x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
    if len(x.shape) != 4 or w is None or len(w.shape) != 4 or w.shape[0] != 1:
        return "DEPTHWISE_CONV_2D needs a 4-D input and [1, KH, KW, C] weights"
    if w.shape[3] != y.shape[3] or y.shape[3] % x.shape[3]:
        return "DEPTHWISE_CONV_2D channel counts are inconsistent"
    return ""


def check_transpose_conv(node: NodeView) -> str:
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


def check_fc(node: NodeView) -> str:
    w = node.inputs[1]
    if w is None or len(w.shape) != 2:
        return "FULLY_CONNECTED needs 2-D weights"
    if _opt(node, "weights_format", 0) != 0:
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


def check_pool(node: NodeView) -> str:
    if len(node.inputs[0].shape) != 4:
        return f"{node.op.name} needs a 4-D input"
    if min(_opt(node, "filter_height", 1), _opt(node, "filter_width", 1), _opt(node, "stride_h", 1),
           _opt(node, "stride_w", 1)) < 1:
        return f"{node.op.name} with a non-positive window or stride"
    return ""


def check_concat(node: NodeView) -> str:
    n = len([t for t in node.inputs if t is not None])
    if n > MAX_CONCAT_INPUTS:
        return f"CONCATENATION of {n} inputs (the kernel takes up to {MAX_CONCAT_INPUTS})"
    return ""


def check_strided_slice(node: NodeView) -> str:
    if _opt(node, "ellipsis_mask") or _opt(node, "new_axis_mask"):
        return "STRIDED_SLICE with ellipsis_mask or new_axis_mask"
    return ""


def check_resize_nearest(node: NodeView) -> str:
    if _opt(node, "align_corners", False) and _opt(node, "half_pixel_centers", False):
        return "RESIZE_NEAREST_NEIGHBOR with align_corners and half_pixel_centers"
    return check_4d(node)


def check_resize_bilinear(node: NodeView) -> str:
    if _opt(node, "align_corners", False) and _opt(node, "half_pixel_centers", False):
        return "RESIZE_BILINEAR with align_corners and half_pixel_centers"
    return check_4d(node)


def check_4d(node: NodeView) -> str:
    if len(node.inputs[0].shape) != 4:
        return f"{node.op.name} needs a 4-D input"
    return ""


def check_lstm(node: NodeView) -> str:
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
    if _opt(node, "fused_activation_function", 4) != 4:
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


class Lowerer:
    """Lowers one node; collects constants (re-laid out, storage type) and bindings."""

    def __init__(self, g: GpuGraph, node: GpuNode, policy: PrecisionPolicy,
                 epilogue: tuple[dict[str, Any], list[Epilogue]] | None):
        self.g, self.n, self.p = g, node, policy
        self._epilogue = epilogue  # the node's epilogue matched onto its kernel's slots (_capabilities)
        self.constants: dict[str, np.ndarray] = {}
        self.bindings: list[tuple[str, int | str]] = []

    @property
    def cost(self) -> DeviceCost:
        """The device calibration variant choices are priced on (``compile_graph(device=...)``)."""
        return self.g.options.get("cost") or profile_for(None)

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
        m = self._epilogue
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


def _residual_params(lw: Lowerer, opts: Mapping[str, Any], operands: Sequence[Epilogue]) -> dict[str, int]:
    """The conv2d / dw_pw_conv2d residual's own geometry when it is not the output's: RES_S its slice
    count (a channel PAD merged, ``residual_channels="fewer"``), RES_H/RES_W/RES_K the tensor a
    MAX_POOL_2D merged into the read pools (``residual_pool``)."""
    if not (opts.get("residual_channels") == "fewer" or opts.get("residual_pool")):
        return {}
    step = next(e for e in operands if e.op in ("ADD", "MUL") and e.operand is not None
                and (e.zero_extend or e.pool))
    _, rh, rw, rc = lw.shape(step.operand)
    params = {"RES_S": L.slices(rc)}
    if step.pool:
        params.update(RES_H=rh, RES_W=rw, RES_K=step.pool)
    return params


def lower_conv(lw: Lowerer) -> list[GpuOp]:
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
    params.update(_residual_params(lw, opts, operands))
    # the variant (per-thread block and reduction split, or the tiled matrix product) from the cost model;
    # conv2d_tiled has no pooled residual read (fuse_pool_residual)
    kernel, choice, _ = choose_conv(params, lw.cost, grouped, tiled=not opts.get("residual_pool"))
    if kernel == "conv2d_tiled":
        return [lw.op(kernel, {**opts, **choice}, params)]
    return [lw.op("conv2d", {**opts, "grouped": grouped or None,
                             **{k: v for k, v in choice.items() if v != _CONV_DEFAULTS[k]}}, params)]


def lower_depthwise(lw: Lowerer) -> list[GpuOp]:
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
              "DIL_W": geo["dilation"][1], "MULT": mult, **_residual_params(lw, opts, operands)}
    # a 3x3 or 5x5 window (every depthwise of the MediaPipe models) renders with its taps unrolled: the
    # same work with every load independent, so never slower (no choice for the cost model to make)
    ksize = w.shape[1] if mult == 1 and w.shape[1] == w.shape[2] and w.shape[1] in (3, 5) else 0
    return [lw.op("depthwise_conv2d", {**opts, "multiplier": "one" if mult == 1 else "any",
                                       "ksize": ksize or None}, params)]


def lower_dw_pw(lw: Lowerer) -> list[GpuOp]:
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
    params.update(_residual_params(lw, opts, operands))
    split, block_s, block_w = dw_pw_tiling(b * oh * ow * params["S"], params["SRC_S"], params["S"], ow)
    # a 3x3 / 5x5 depthwise window renders unrolled, as in lower_depthwise
    ksize = dw_w.shape[1] if dw_w.shape[1] == dw_w.shape[2] and dw_w.shape[1] in (3, 5) else 0
    return [lw.op("dw_pw_conv2d", {**opts, "dw_act": dw_act if dw_act != "NONE" else None, "ksize": ksize or None,
                                   "block_w": block_w if block_w != 2 else None,
                                   "block_s": block_s if block_s != 1 else None,
                                   "split": split if split > 1 else None}, params)]


def lower_transpose_conv(lw: Lowerer) -> list[GpuOp]:
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
    lw.bind("src", x)
    lw.const("weights", L.fc_weights(w))
    bias = lw.data(n.inputs[2]).reshape(-1) if len(n.inputs) > 2 and n.inputs[2] >= 0 else None
    lw.const("bias", L.channel_vector(bias, o))
    lw.bind_epilogue_operands(operands, o)
    lw.bind("dst", y)
    split, _ = choose_fc(rows, L.slices(o), L.slices(i), lw.cost)
    return [lw.op("fully_connected", {**opts, "split": split if split > 1 else None},
                  {"B": rows, "SRC_S": L.slices(i), "C": o, "S": L.slices(o)})]


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


def lower_pool(lw: Lowerer) -> list[GpuOp]:
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
        choice, _ = choose_reduce(b * L.slices(c), h * wd, lw.cost)
        params = {**lw.dims(x, "SRC_"), **lw.dims(y), "RB": 0, "RH": 1, "RW": 1, "RC": 0}
        return [lw.op("reduce", {"op": "MEAN" if options["op"] == "AVG" else "MAX",
                                 "qdq": opts.get("qdq"), **_non_default(choice)}, params)]
    if n.attrs.get("pad_value") is not None:
        # explicit padding merged from a PAD (only when _capabilities.POOL_TAKES_PAD_VALUE)
        ex = n.attrs["explicit_padding"]
        params.update({"EX_T": ex[0], "EX_B": ex[1], "EX_L": ex[2], "EX_R": ex[3],
                       "PAD_VALUE": float(n.attrs["pad_value"])})
        options["explicit_pad"] = True
    return [lw.op("pool2d", options, params)]


def lower_binary(lw: Lowerer) -> list[GpuOp]:
    n = lw.n
    a, b_ = n.inputs[0], n.inputs[1]
    y = n.outputs[0]
    opts, operands = lw.epilogue()
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
    for e in operands:  # the residual op's tensor (the only operand a binary epilogue binds)
        lw.bind("res", e.operand)
    lw.bind("dst", y)
    return [lw.op("binary", options, params)]


def lower_unary(lw: Lowerer) -> list[GpuOp]:
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


def lower_reduce(lw: Lowerer) -> list[GpuOp]:
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
    choice, _ = choose_reduce(params["B"] * params["H"] * params["W"] * params["S"], steps, lw.cost)
    return [lw.op("reduce", {"op": REDUCE_KINDS[n.op], **opts, **_non_default(choice)}, params)]


def lower_softmax(lw: Lowerer) -> list[GpuOp]:
    opts, _ = lw.epilogue()
    lw.bind("src", lw.n.inputs[0])
    lw.bind("dst", lw.n.outputs[0])
    return [lw.op("softmax", {"log": False, **opts},
                  {**lw.dims(lw.n.outputs[0]), "beta": float(lw.n.attrs.get("beta", 1.0))})]


def lower_concat(lw: Lowerer) -> list[GpuOp]:
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


def lower_gather(lw: Lowerer) -> list[GpuOp]:
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


def _slice_op(lw: Lowerer, src: int, dst: int, ranges: Sequence[tuple[int, int, int]]) -> GpuOp:
    sub = Lowerer(lw.g, lw.n, lw.p, lw._epilogue)
    sub.bind("src", src)
    sub.bind("dst", dst)
    s = lw.shape(src)
    params = {**sub.dims(dst), "SRC_H": s[1], "SRC_W": s[2], "SRC_C": s[3], "SRC_S": L.slices(s[3])}
    for ax, name in enumerate("BHWC"):
        params[f"BEG_{name}"] = int(ranges[ax][0])
        params[f"STR_{name}"] = int(ranges[ax][2])
    return sub.op("slice", {}, params, outputs=[dst])


def lower_slice(lw: Lowerer) -> list[GpuOp]:
    n = lw.n
    return [_slice_op(lw, n.inputs[0], n.outputs[0], n.attrs["ranges"])]


def lower_split(lw: Lowerer) -> list[GpuOp]:
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


def lower_pad(lw: Lowerer) -> list[GpuOp]:
    n = lw.n
    x, y = n.inputs[0], n.outputs[0]
    p = n.attrs["paddings"]
    mode = "CONSTANT" if n.op != "MIRROR_PAD" else ("REFLECT" if int(n.attrs.get("mode", 0)) == 0 else "SYMMETRIC")
    lw.bind("src", x)
    lw.bind("dst", y)
    params = {**lw.dims(y), **lw.dims(x, "SRC_"), "P_B": p[0][0], "P_H": p[1][0], "P_W": p[2][0], "P_C": p[3][0],
              "value": float(n.attrs.get("pad_value", 0.0))}
    return [lw.op("pad", {"mode": mode}, params)]


def lower_space(lw: Lowerer) -> list[GpuOp]:
    n = lw.n
    x, y = n.inputs[0], n.outputs[0]
    lw.bind("src", x)
    lw.bind("dst", y)
    s = lw.shape(x)
    params = {**lw.dims(y), "SRC_H": s[1], "SRC_W": s[2], "SRC_S": L.slices(s[3]), "BS": int(n.attrs["block_size"])}
    if n.op == "SPACE_TO_DEPTH":
        params["SRC_C"] = s[3]
    return [lw.op(n.op.lower(), {}, params)]


def lower_resize(lw: Lowerer) -> list[GpuOp]:
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
