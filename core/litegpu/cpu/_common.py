"""Helpers shared by CPU kernels: fused activations, padding, broadcasting."""

from __future__ import annotations

import numpy as np

from .._errors import ModelError

__all__ = ["ACT_NONE", "ACT_RELU", "ACT_RELU_N1_TO_1", "ACT_RELU6", "ACT_TANH", "ACT_SIGN_BIT",
           "activation_fn", "PADDING_SAME", "PADDING_VALID", "same_padding", "out_size"]

# TFLite ActivationFunctionType
ACT_NONE, ACT_RELU, ACT_RELU_N1_TO_1, ACT_RELU6, ACT_TANH, ACT_SIGN_BIT = range(6)
# TFLite Padding
PADDING_SAME, PADDING_VALID = 0, 1


def activation_fn(act: int):
    """The in-place float activation for a TFLite fused activation code, or None."""
    if act == ACT_NONE:
        return None
    if act == ACT_RELU:
        return lambda x: np.maximum(x, 0, out=x)
    if act == ACT_RELU_N1_TO_1:
        return lambda x: np.clip(x, -1, 1, out=x)
    if act == ACT_RELU6:
        return lambda x: np.clip(x, 0, 6, out=x)
    if act == ACT_TANH:
        return lambda x: np.tanh(x, out=x)
    if act == ACT_SIGN_BIT:
        return lambda x: np.copyto(x, np.signbit(x).astype(x.dtype)) or x
    raise ModelError(f"unknown fused activation function {act}")


def out_size(padding: int, in_size: int, filter_size: int, stride: int, dilation: int = 1) -> int:
    """Output size of a convolution/pool along one axis (TFLite's ComputeOutSize)."""
    eff = (filter_size - 1) * dilation + 1
    if stride <= 0 or dilation <= 0:
        raise ModelError(f"stride {stride} and dilation {dilation} must be positive")
    if padding == PADDING_SAME:
        return (in_size + stride - 1) // stride
    if padding == PADDING_VALID:
        return (in_size - eff + stride) // stride
    raise ModelError(f"unknown padding {padding}")


def same_padding(padding: int, in_size: int, filter_size: int, stride: int, dilation: int,
                 out: int) -> tuple[int, int]:
    """(before, after) padding for one axis, TFLite's ComputePaddingHeightWidth."""
    eff = (filter_size - 1) * dilation + 1
    total = max((out - 1) * stride + eff - in_size, 0)
    before = total // 2
    return before, total - before
