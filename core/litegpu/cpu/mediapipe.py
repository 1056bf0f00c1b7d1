"""MediaPipe's custom op ``Convolution2DTransposeBias``.

MediaPipe registers a transposed convolution with bias whose options are a raw
``TfLiteTransposeConvParams`` C struct copied into ``custom_options``: int32
little-endian ``padding`` (TfLitePadding: 1 = SAME, 2 = VALID; 0 = unknown),
``stride_width``, ``stride_height`` (newer headers append more fields, which
the op ignores).  Inputs: data ``(N, H, W, Cin)``, weights ``(Cout, KH, KW,
Cin)``, bias ``(Cout,)``.  The output size is derived, not given:
``stride * (in - 1) + k - p`` with ``p = max(0, k - (in - 1) % stride - 1)``
for SAME and 0 for VALID, and the result is cropped by ``p // 2`` at the start.
"""

from __future__ import annotations

import struct

import numpy as np

from .._errors import ModelError
from ._float_util import DerivedCache, require_float, spec_shape
from ._registry import FLOAT, NodeContext, Prepared, register_kernel
from .conv import TransposeConvPlan

__all__ = ["parse_transpose_conv_bias_options"]

_TFLITE_PADDING_SAME, _TFLITE_PADDING_VALID = 1, 2


def parse_transpose_conv_bias_options(data: bytes | None) -> tuple[int, int, int]:
    """(padding, stride_w, stride_h) from the custom options; padding uses TfLitePadding values."""
    if data is None or len(data) < 12:
        raise ModelError(f"Convolution2DTransposeBias: custom options must hold at least 3 int32 "
                         f"(padding, stride_w, stride_h), got {0 if data is None else len(data)} bytes")
    padding, stride_w, stride_h = struct.unpack_from("<3i", bytes(data), 0)
    if padding not in (_TFLITE_PADDING_SAME, _TFLITE_PADDING_VALID):
        raise ModelError(f"Convolution2DTransposeBias: unsupported padding code {padding}")
    if stride_w <= 0 or stride_h <= 0:
        raise ModelError(f"Convolution2DTransposeBias: strides must be positive, got {stride_w}x{stride_h}")
    return padding, stride_w, stride_h


def _out_and_crop(padding: int, in_size: int, k: int, stride: int) -> tuple[int, int]:
    p = max(0, k - (in_size - 1) % stride - 1) if padding == _TFLITE_PADDING_SAME else 0
    return stride * (in_size - 1) + k - p, p // 2


@register_kernel("Convolution2DTransposeBias", dtypes=FLOAT)
def convolution_2d_transpose_bias(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 3 or any(t is None for t in ctx.inputs) or len(ctx.outputs) != 1:
        raise ctx.invalid("needs input, weights and bias")
    require_float(ctx, [0, 1, 2])
    padding, sw, sh = parse_transpose_conv_bias_options(ctx.op.custom_options)
    fshape, bshape = spec_shape(ctx.inputs[1]), spec_shape(ctx.inputs[2])
    if fshape is None or len(fshape) != 4:
        raise ctx.invalid(f"weights must be 4-D, got {fshape}")
    if bshape is not None and (len(bshape) != 1 or bshape[0] != fshape[0]):
        raise ctx.invalid(f"bias shape {bshape} does not match "
                          f"{fshape[0]} output channels")
    state: dict = {}

    def plan(shape) -> TransposeConvPlan:
        if state.get("key") != shape:
            if len(shape) != 4:
                raise ModelError(f"Convolution2DTransposeBias: input must be 4-D, got {shape}")
            oh, pt = _out_and_crop(padding, shape[1], fshape[1], sh)
            ow, pl = _out_and_crop(padding, shape[2], fshape[2], sw)
            state["p"] = TransposeConvPlan(shape, fshape, (shape[0], oh, ow, fshape[0]), sh, sw, pt, pl, None)
            state["key"] = shape
        return state["p"]

    in_shape = spec_shape(ctx.inputs[0])
    out_shape = plan(in_shape).out_shape if in_shape is not None else None
    wcache = DerivedCache(TransposeConvPlan.weights, ctx.inputs[1].data)

    def run(inputs):
        x, w, b = inputs
        return [plan(x.shape).run(x, wcache.get(w), np.asarray(b).reshape(-1))]

    return Prepared([out_shape], run, fresh=True)
