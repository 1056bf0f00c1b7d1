"""Small helpers shared by the float compute kernels (conv, pooling, matmul, resize...).

* :func:`activation_clamp` follows LiteRT's ``CalculateActivationRange``: the
  fused activation of CONV_2D, pooling, FULLY_CONNECTED... is a *clamp*; codes
  other than RELU, RELU_N1_TO_1 and RELU6 (TANH, SIGN_BIT) are ignored by
  LiteRT's float kernels, so they are ignored here too.
* :class:`DerivedCache` turns a weight tensor into the layout a kernel wants
  (transposed, tiled...).  Constant weights are converted once at prepare;
  weights produced at run time (typically a DEQUANTIZE of a float16 constant,
  which returns the same array object every invoke) are converted on first
  sight and reused while the same array object keeps coming back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._errors import ModelError
from ._common import ACT_NONE, ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1, same_padding
from ._registry import NodeContext, TensorSpec

__all__ = [
    "F32",
    "activation_clamp",
    "DerivedCache",
    "conv_geometry",
    "spec_shape",
    "require_float",
    "input_spec",
    "round_half_away",
    "clip_ufunc",
    "relu",
    "relu_inplace",
]

F32 = np.dtype(np.float32)

Clamp = Callable[[np.ndarray], object]


try:  # the clip ufunc itself: np.clip's Python wrapper costs more than clipping a small tensor
    from numpy._core.umath import clip as _clip_ufunc  # numpy >= 2
except ImportError:  # pragma: no cover - numpy 1.x
    try:
        from numpy.core.umath import clip as _clip_ufunc  # type: ignore[no-redef]
    except ImportError:
        _clip_ufunc = np.clip  # type: ignore[assignment]


clip_ufunc = _clip_ufunc

# np.maximum(x, 0.0) runs a scalar loop; against an array operand it runs SIMD: about 2x
# faster on tensors that fit the caches (on big ones the extra stream costs more).
_RELU_ARRAY_MAX = 1 << 16
_ZEROS = np.zeros(_RELU_ARRAY_MAX, F32)
_ZEROS.flags.writeable = False
_ZERO = F32.type(0)


def relu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``max(x, 0)`` of a float32 array, into ``out`` (a new array when None)."""
    n = x.size
    if n <= _RELU_ARRAY_MAX and x.flags.c_contiguous:
        return np.maximum(x, _ZEROS[:n].reshape(x.shape), out=out)
    return np.maximum(x, _ZERO, out=out)


def relu_inplace(x: np.ndarray) -> np.ndarray:
    """``max(x, 0)`` written into the float32 array ``x``."""
    return relu(x, x)


def activation_clamp(act: int) -> Clamp | None:
    """In-place clamp for a fused activation code, as LiteRT's float kernels apply it.

    Bounds are float32 scalars (a Python int bound makes numpy resolve the loop per call)."""
    if act == ACT_RELU:
        return relu_inplace
    if act == ACT_RELU6:
        lo, hi = F32.type(0), F32.type(6)
        return lambda x: _clip_ufunc(x, lo, hi, out=x)
    if act == ACT_RELU_N1_TO_1:
        lo, hi = F32.type(-1), F32.type(1)
        return lambda x: _clip_ufunc(x, lo, hi, out=x)
    if act in (ACT_NONE, 4, 5):  # TANH, SIGN_BIT: not applied by LiteRT's range-based float kernels
        return None
    raise ModelError(f"unknown fused activation function {act}")


class DerivedCache:
    """``get(w)`` returns ``fn(w)``, recomputed only when a different array object arrives.

    A constant given up front is derived at its first ``get``, not here: a node the CPU never runs
    (delegated to a GPU) must not pay for re-laying out its weights at every prepare (every
    convolution of a model did, on every start)."""

    __slots__ = ("_fn", "_src", "_val")

    _UNSET: Any = object()  # fn's result may itself be None

    def __init__(self, fn: Callable[[np.ndarray], np.ndarray], const: np.ndarray | None = None):
        self._fn = fn
        self._src: np.ndarray | None = const
        self._val: Any = self._UNSET

    def get(self, w: np.ndarray) -> np.ndarray:
        if w is not self._src or self._val is self._UNSET:
            self._val = self._fn(np.asarray(w))
            self._src = w
        return self._val  # type: ignore[return-value]


def conv_geometry(padding: int, in_size: int, k: int, stride: int, dilation: int) -> tuple[int, int, int]:
    """(out, pad_before, pad_after) for one spatial axis, TFLite's rules (SAME=0 / VALID=1).

    A VALID window larger than the input gives LiteRT's C arithmetic: a size that truncates
    to 0 is an empty output (LiteRT runs it), a negative one is an error.
    """
    if padding not in (0, 1):
        raise ModelError(f"unknown padding {padding}")
    if stride <= 0 or dilation <= 0 or k <= 0:
        raise ModelError(f"filter {k}, stride {stride} and dilation {dilation} must be positive")
    eff = (k - 1) * dilation + 1
    if padding == 0:
        o = (in_size + stride - 1) // stride
    else:
        num = in_size + stride - eff
        o = num // stride if num >= 0 else -((-num) // stride)  # C division truncates toward zero
    if o < 0:
        raise ModelError(f"a window of {eff} does not fit an input of {in_size} (stride {stride})")
    before, after = same_padding(padding, in_size, k, stride, dilation, o) if o > 0 else (0, 0)
    return o, before, after


def spec_shape(t: TensorSpec | None) -> tuple[int, ...] | None:
    if t is None or t.shape is None:
        return None
    return tuple(int(d) for d in t.shape)


def input_spec(ctx: NodeContext, i: int) -> TensorSpec | None:
    return ctx.inputs[i] if i < len(ctx.inputs) else None


def require_float(ctx: NodeContext, idx: Sequence[int], what: str = "float32") -> None:
    """Every listed (present) input must be float32: LiteRT's float kernels take nothing else."""
    for i in idx:
        t = input_spec(ctx, i)
        if t is not None and t.dtype != "float32":
            raise ctx.fail(f"input {i} ({t.name}) is {t.dtype}, expected {what}")


def round_half_away(x: np.ndarray) -> np.ndarray:
    """C ``round()``: halves away from zero (numpy's ``round`` goes to even), exact in x's dtype."""
    x = np.asarray(x)
    t = np.trunc(x)
    frac = x - t  # exact: x and t share exponent range
    return t + np.where(np.abs(frac) >= 0.5, np.sign(x), 0).astype(x.dtype)
