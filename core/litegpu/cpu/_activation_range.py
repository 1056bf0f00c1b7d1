"""Fused activations as LiteRT applies them in arithmetic and concatenation kernels.

LiteRT's ADD/SUB/MUL/DIV/CONCATENATION kernels turn the fused activation into a
clamp range (``CalculateActivationRange``): RELU, RELU6 and RELU_N1_TO_1 clamp,
every other code (TANH, SIGN_BIT) yields the full range, i.e. no activation.
That is what these helpers reproduce, for float and integer outputs alike.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._common import ACT_NONE, ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1, ACT_SIGN_BIT, ACT_TANH
from ._float_util import relu_inplace
from ._registry import NodeContext

__all__ = ["activation_range", "clamp_fn"]


def activation_range(act: int) -> tuple[float | None, float | None]:
    """(low, high) clamp bounds of a fused activation code; None means unbounded."""
    if act == ACT_RELU:
        return 0, None
    if act == ACT_RELU6:
        return 0, 6
    if act == ACT_RELU_N1_TO_1:
        return -1, 1
    return None, None


def clamp_fn(ctx: NodeContext, key: str = "fused_activation_function") -> Callable[[np.ndarray], np.ndarray] | None:
    """An in-place clamp for the node's fused activation, or None when there is nothing to do.

    The array passed must be freshly allocated by the kernel (it is modified in place).
    """
    act = int(ctx.options.get(key, ACT_NONE) or 0)
    if act not in (ACT_NONE, ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1, ACT_TANH, ACT_SIGN_BIT):
        raise ctx.fail(f"unknown fused activation function {act}")
    lo, hi = activation_range(act)
    if lo is None and hi is None:
        return None
    if hi is None:
        def relu(x):
            return relu_inplace(x) if x.dtype == np.float32 else np.maximum(x, lo, out=x)
        return relu
    return lambda x: np.clip(x, lo, hi, out=x)
