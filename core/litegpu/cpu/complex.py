"""Complex-number kernels: RFFT2D (float32 -> complex64) and COMPLEX_ABS, REAL, IMAG (complex64 ->
float32, complex128 -> float64).

RFFT2D follows LiteRT: the innermost two dimensions are cropped or zero-padded to ``fft_length``
(two powers of two), and each 2-D slice gets its real FFT, ``fft_width / 2 + 1`` complex columns.
LiteRT computes it in double precision (Ooura's FFT) and rounds to complex64; numpy's FFT in
double precision rounded the same way agrees to the last bit or two of float32.
"""

from __future__ import annotations

import numpy as np

from ._registry import NodeContext, Prepared, register_kernel
from ._shapes import plan_by_shape

__all__: list[str] = []

_COMPLEX = ("complex64", "complex128")
_PART_OF = {"complex64": "float32", "complex128": "float64"}


def _part(fn):
    def prepare(ctx: NodeContext) -> Prepared:
        if len(ctx.inputs) != 1 or len(ctx.outputs) != 1 or ctx.inputs[0] is None:
            raise ctx.fail("expects one input and one output")
        x, y = ctx.inputs[0], ctx.outputs[0]
        if y.dtype != _PART_OF[x.dtype]:
            raise ctx.fail(f"a {x.dtype} input needs a {_PART_OF[x.dtype]} output, got {y.dtype}")
        dt = np.dtype(y.dtype)

        def plan(shapes):
            return [shapes[0]], lambda inputs: [np.ascontiguousarray(fn(inputs[0])).astype(dt)]

        return plan_by_shape(ctx, plan)

    return prepare


register_kernel("COMPLEX_ABS", dtypes=_COMPLEX, versions=range(1, 2))(_part(np.abs))
register_kernel("REAL", dtypes=_COMPLEX, versions=range(1, 2))(_part(np.real))
register_kernel("IMAG", dtypes=_COMPLEX, versions=range(1, 2))(_part(np.imag))


def _fft_length(ctx: NodeContext, v: np.ndarray) -> tuple[int, int]:
    v = np.asarray(v).reshape(-1)
    if v.size != 2:
        raise ctx.fail(f"fft_length must hold 2 values, got {v.size}")
    h, w = int(v[0]), int(v[1])
    if not all(n > 0 and n & (n - 1) == 0 for n in (h, w)):
        raise ctx.fail(f"fft_length ({h}, {w}) must be powers of two (LiteRT's RFFT2D requires it)")
    if w < 2:
        # LiteRT's FFT accepts width 1 but its output is not the transform (measured: off by O(1))
        raise ctx.fail(f"fft_length width {w}: LiteRT's RFFT2D computes only widths of 2 or more")
    return h, w


@register_kernel("RFFT2D", dtypes=("float32",), versions=range(1, 2))
def rfft2d(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 2 or ctx.inputs[1] is None:
        raise ctx.fail("expects the input and fft_length")
    x, fl, y = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
    if fl.dtype != "int32":
        raise ctx.fail(f"fft_length must be int32, got {fl.dtype}")
    if y.dtype != "complex64":
        raise ctx.fail(f"the output must be complex64, got {y.dtype}")
    if x.shape is not None and len(x.shape) < 2:
        raise ctx.fail(f"the input needs at least 2 dimensions, got shape {x.shape}")
    const = None if fl.data is None else _fft_length(ctx, fl.data)

    def plan(shapes):
        lead = tuple(shapes[0][:-2])
        if const is not None:
            h, w = const
            return [lead + (h, w // 2 + 1)], lambda inputs: [compute(inputs[0], h, w)]
        return [None], lambda inputs: [compute(inputs[0], *_fft_length(ctx, inputs[1]))]

    def compute(a: np.ndarray, h: int, w: int) -> np.ndarray:
        if a.ndim < 2:
            raise ctx.fail(f"the input needs at least 2 dimensions, got shape {a.shape}")
        return np.fft.rfft2(a.astype(np.float64), s=(h, w), axes=(-2, -1)).astype(np.complex64)

    return plan_by_shape(ctx, plan)
