"""Shape arithmetic shared by the passes, the lowering and the reference evaluator.

Everything here is resolved once, at prepare: explicit padding of
convolutions and pools, output sizes, strided-slice ranges.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from .._errors import DelegateError

__all__ = [
    "PADDING_SAME",
    "PADDING_VALID",
    "out_size",
    "window_padding",
    "conv_geometry",
    "transpose_conv_crop",
    "transpose_bias_params",
    "resolve_strided_slice",
]

PADDING_SAME, PADDING_VALID = 0, 1


def out_size(padding: int, in_size: int, filter_size: int, stride: int, dilation: int = 1) -> int:
    """Output size of a convolution or pool along one axis (TFLite's rule)."""
    eff = (filter_size - 1) * dilation + 1
    if padding == PADDING_SAME:
        return (in_size + stride - 1) // stride
    if padding == PADDING_VALID:
        return (in_size - eff + stride) // stride
    raise DelegateError(f"unknown padding {padding}")


def window_padding(padding: int, in_size: int, filter_size: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    """(before, after) padding along one axis for SAME/VALID (after may be larger than needed)."""
    o = out_size(padding, in_size, filter_size, stride, dilation)
    eff = (filter_size - 1) * dilation + 1
    total = max((o - 1) * stride + eff - in_size, 0)
    return total // 2, total - total // 2


def conv_geometry(attrs: Mapping[str, Any], in_hw: Sequence[int], k_hw: Sequence[int]) -> dict[str, Any]:
    """Resolved window geometry of a conv/pool node: strides, dilations, (top, bottom, left, right).

    ``attrs["explicit_padding"]`` (set by the pad-merging pass) is *added* to
    the SAME/VALID padding the op computes itself, so a PAD merged into a SAME
    convolution keeps both.
    """
    sh, sw = int(attrs.get("stride_h", 1)), int(attrs.get("stride_w", 1))
    dh, dw = int(attrs.get("dilation_h_factor", 1)), int(attrs.get("dilation_w_factor", 1))
    ex = tuple(attrs.get("explicit_padding", (0, 0, 0, 0)))
    ih, iw = in_hw[0] + ex[0] + ex[1], in_hw[1] + ex[2] + ex[3]
    pad = int(attrs.get("padding", PADDING_VALID))
    t, b = window_padding(pad, ih, k_hw[0], sh, dh)
    left, r = window_padding(pad, iw, k_hw[1], sw, dw)
    return {
        "stride": (sh, sw),
        "dilation": (dh, dw),
        "pads": (t + ex[0], b + ex[1], left + ex[2], r + ex[3]),
        "out_hw": (out_size(pad, ih, k_hw[0], sh, dh), out_size(pad, iw, k_hw[1], sw, dw)),
    }


def transpose_conv_crop(padding: int, in_size: int, out_size_: int, k: int, stride: int) -> int:
    """Offset of the output window inside the full transposed-convolution result along one axis.

    The full result has ``(in - 1) * stride + k`` positions; TFLite computes the
    offset as the SAME/VALID padding of the forward convolution that maps the
    output back to the input.
    """
    conv_out = out_size(padding, out_size_, k, stride)
    total = max((conv_out - 1) * stride + k - out_size_, 0)
    return total // 2


def transpose_bias_params(custom_options: bytes | None) -> dict[str, int]:
    """Parse ``Convolution2DTransposeBias`` custom options (TfLiteTransposeConvParams: three int32).

    That struct uses the C API padding enum (1 = SAME, 2 = VALID); we return
    the schema's enum (SAME=0, VALID=1) like every other op.
    """
    if not custom_options or len(custom_options) < 12:
        raise DelegateError("Convolution2DTransposeBias: custom options missing or too short")
    pad, sw, sh = struct.unpack_from("<iii", custom_options)
    if pad not in (1, 2) or sw <= 0 or sh <= 0:
        raise DelegateError(f"Convolution2DTransposeBias: bad parameters padding={pad} stride=({sh},{sw})")
    return {"padding": PADDING_SAME if pad == 1 else PADDING_VALID, "stride_w": sw, "stride_h": sh}


def resolve_strided_slice(shape: Sequence[int], begin: Sequence[int], end: Sequence[int],
                          strides: Sequence[int], attrs: Mapping[str, Any]) -> tuple[list[tuple[int, int, int]], list[int]]:
    """Per-axis ``(start, stop, step)`` of a STRIDED_SLICE (python slice semantics) and the shrunk axes.

    Handles begin/end/shrink masks, negative indices and ``offset``;
    ellipsis and new-axis masks are refused (``supports`` declines them).
    """
    if attrs.get("ellipsis_mask", 0) or attrs.get("new_axis_mask", 0):
        raise DelegateError("STRIDED_SLICE with ellipsis_mask or new_axis_mask")
    rank = len(shape)
    bm, em, sm = int(attrs.get("begin_mask", 0)), int(attrs.get("end_mask", 0)), int(attrs.get("shrink_axis_mask", 0))
    offset = bool(attrs.get("offset", False))
    out: list[tuple[int, int, int]] = []
    shrunk = []
    for a in range(rank):
        n = int(shape[a])
        if a >= len(begin):
            out.append((0, n, 1))
            continue
        st = int(strides[a])
        if st == 0:
            raise DelegateError("STRIDED_SLICE with a zero stride")
        b, e = int(begin[a]), int(end[a])
        if offset:
            e = b + e
        if sm >> a & 1:
            b = b + n if b < 0 else b
            out.append((b, b + 1, 1))
            shrunk.append(a)
            continue
        if bm >> a & 1:
            b = 0 if st > 0 else n - 1
        else:
            b = b + n if b < 0 else b
            b = min(max(b, 0), n) if st > 0 else min(max(b, -1), n - 1)
        if em >> a & 1:
            e = n if st > 0 else -1
        else:
            e = e + n if e < 0 else e
            e = min(max(e, 0), n) if st > 0 else min(max(e, -1), n - 1)
        out.append((b, e, st))
    return out, shrunk


def slice_len(start: int, stop: int, step: int) -> int:
    """Number of elements of python's ``range(start, stop, step)`` (stop -1 meaning "before 0")."""
    if step > 0:
        return max(0, (stop - start + step - 1) // step)
    return max(0, (start - stop - step - 1) // (-step))
