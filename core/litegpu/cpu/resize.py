"""RESIZE_BILINEAR (float32) and RESIZE_NEAREST_NEIGHBOR (any dtype).

Source coordinates are computed exactly as LiteRT's reference kernels do, in
float32: ``scale = in / out`` (``(in - 1) / (out - 1)`` with align_corners),
``src = (dst + 0.5) * scale - 0.5`` with half-pixel centers for bilinear
(``(dst + 0.5) * scale`` for nearest), then floor/ceil clamped to the input
(bilinear) or floor / round-half-away (nearest with align_corners).  Bilinear
weights are ``src - floor`` *without* clamping, as LiteRT does, so the
half-pixel edge cases (negative ``src``) come out the same.

Bilinear interpolation is done separably (two gathers and a lerp per axis,
cheaper axis first); nearest is a single fancy-index gather.
"""

from __future__ import annotations

import numpy as np

from .._errors import ModelError
from ._float_util import F32, round_half_away, spec_shape
from ._registry import ALL_NUMERIC, FLOAT, NodeContext, Prepared, register_kernel

__all__ = ["bilinear_source", "nearest_source"]


def _scale(in_size: int, out_size: int, align_corners: bool) -> np.float32:
    if align_corners and out_size > 1:
        return F32.type(in_size - 1) / F32.type(out_size - 1)
    return F32.type(in_size) / F32.type(out_size)


def bilinear_source(out_size: int, in_size: int, align_corners: bool, half_pixel: bool):
    """(lower index, upper index, float32 weight of the upper) for each output position."""
    scale = _scale(in_size, out_size, align_corners)
    v = np.arange(out_size, dtype=F32)
    if half_pixel:
        src = (v + F32.type(0.5)) * scale - F32.type(0.5)
    else:
        src = v * scale
    lo = np.maximum(np.floor(src).astype(np.int64), 0)
    hi = np.minimum(np.ceil(src).astype(np.int64), in_size - 1)
    # LiteRT clamps the indices, not the coordinate: the weight may leave [0, 1] when
    # lo == hi (both taps then read the same pixel, so the result is unaffected).
    d = (src - lo.astype(F32)).astype(F32)
    return lo, hi, d


def nearest_source(out_size: int, in_size: int, align_corners: bool, half_pixel: bool) -> np.ndarray:
    if out_size == 0:  # an empty output (LiteRT's nearest resize allows a size of 0): no source, no scale
        return np.zeros(0, np.int64)
    scale = _scale(in_size, out_size, align_corners)
    offset = F32.type(0.5) if half_pixel else F32.type(0.0)
    v = (np.arange(out_size, dtype=F32) + offset) * scale
    idx = round_half_away(v) if align_corners else np.floor(v)
    idx = np.minimum(idx.astype(np.int64), in_size - 1)
    if half_pixel:
        idx = np.maximum(idx, 0)
    return idx


def _size_of(ctx: NodeContext) -> tuple[int, int] | None:
    if len(ctx.inputs) < 2 or ctx.inputs[1] is None:
        raise ctx.invalid("needs a size input")
    t = ctx.inputs[1]
    if t.dtype != "int32":
        raise ctx.invalid(f"size must be int32, got {t.dtype}")
    shp = spec_shape(t)
    if shp is not None and (len(shp) != 1 or shp[0] != 2):
        raise ctx.invalid(f"size must have shape [2], got {shp}")
    if t.data is None:
        return None
    v = np.asarray(t.data).reshape(-1)
    return int(v[0]), int(v[1])


def _runtime_size(arr: np.ndarray) -> tuple[int, int]:
    v = np.asarray(arr).reshape(-1)
    if v.size != 2:
        raise ModelError(f"resize: size must have 2 elements, got {v.size}")
    return int(v[0]), int(v[1])


class _AxisLerp:
    """Linear interpolation along one axis of an NHWC array (axis 1 or 2), planned for one shape.

    The general case gathers the two source rows/columns of every output position and blends
    them; the weights are pre-broadcast over everything after the axis so that numpy's inner
    loops run over whole rows.  Exact 2x upsampling with half-pixel centers (MediaPipe's only
    resize) needs no gather: output 2i blends x[i-1] and x[i] by 1/4 : 3/4, output 2i+1 blends
    x[i] and x[i+1] by 3/4 : 1/4, clamped at the edges; that is two passes over the input and
    two strided writes.
    """

    def __init__(self, shape: tuple[int, ...], axis: int, out_size: int, align: bool, half: bool):
        self.axis = axis
        n_in = shape[axis]
        out_shape = list(shape)
        out_shape[axis] = out_size
        self.out_shape = tuple(out_shape)
        self.identity = out_size == n_in and not half and not align
        self.double = half and not align and out_size == 2 * n_in and n_in > 1
        if self.identity or self.double:
            return
        lo, hi, d = bilinear_source(out_size, n_in, align, half)
        self.lo, self.hi = lo, hi
        inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
        # (out_size, inner) weights, flattened to match the array viewed as (..., out_size * inner).
        self.d = np.repeat(d, inner).reshape(out_size * inner) if axis == 2 else d.reshape(out_size, 1)
        self.inner = inner
        self.a = np.empty(self.out_shape, F32)
        self.b = np.empty(self.out_shape, F32)

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Interpolate ``x`` into ``out`` (a new array when None)."""
        if self.identity:
            if out is None:
                return x.copy()
            np.copyto(out, x)
            return out
        if out is None:
            out = np.empty(self.out_shape, F32)
        ax = self.axis
        if self.double:
            return self._double(x, out)
        a, b = self.a, self.b
        np.take(x, self.lo, axis=ax, out=a)
        np.take(x, self.hi, axis=ax, out=b)
        lead = int(np.prod(self.out_shape[:ax]))
        a2 = a.reshape(lead, -1) if ax == 2 else a.reshape(lead, self.out_shape[ax], -1)
        b2 = b.reshape(a2.shape)
        np.subtract(b2, a2, out=b2)
        np.multiply(b2, self.d, out=b2)
        np.add(a2, b2, out=out.reshape(a2.shape))
        return out

    def _double(self, x: np.ndarray, out: np.ndarray) -> np.ndarray:
        ax = self.axis
        n = x.shape[ax]
        # out viewed as (..., n, 2, rest): [..., i, 0] is output 2i, [..., i, 1] is output 2i+1.
        pre, rest = self.out_shape[:ax], self.out_shape[ax + 1:]
        o = out.reshape(pre + (n, 2) + rest)
        even = o[(slice(None),) * ax + (slice(None), 0)]
        odd = o[(slice(None),) * ax + (slice(None), 1)]
        sl = (slice(None),) * ax
        hi, lo = x[sl + (slice(1, None),)], x[sl + (slice(None, -1),)]
        q = np.subtract(lo, hi)  # x[i-1] - x[i] for i >= 1
        np.multiply(q, F32.type(0.25), out=q)
        np.add(hi, q, out=even[sl + (slice(1, None),)])  # x[i] + (x[i-1] - x[i]) / 4
        np.subtract(lo, q, out=odd[sl + (slice(None, -1),)])  # x[i] + (x[i+1] - x[i]) / 4
        even[sl + (0,)] = x[sl + (0,)]
        odd[sl + (n - 1,)] = x[sl + (n - 1,)]
        return out


class _BilinearPlan:
    def __init__(self, in_shape, oh, ow, align, half):
        n, h, w, c = in_shape
        self.out_shape = (n, oh, ow, c)
        # The column pass writes runs of only C elements, the row pass whole rows: give the
        # column pass the smaller array (go first) unless that makes the intermediate much bigger.
        if h * ow <= 2 * oh * w:
            first = _AxisLerp(in_shape, 2, ow, align, half)
            second = _AxisLerp(first.out_shape, 1, oh, align, half)
        else:
            first = _AxisLerp(in_shape, 1, oh, align, half)
            second = _AxisLerp(first.out_shape, 2, ow, align, half)
        self.steps = (first, second)
        self.mid = np.empty(first.out_shape, F32)  # the intermediate never leaves the kernel

    def run(self, x: np.ndarray) -> np.ndarray:
        first, second = self.steps
        return second(first(np.asarray(x, F32), self.mid))


def _check_sizes(in_shape: tuple[int, ...], out_hw: tuple[int, int] | None, empty_ok: bool) -> None:
    """The input's rank (at prepare when its shape is known, and for each planned shape) and the output size
    (``out_hw``, where known; ``empty_ok``: 0 gives an empty output, as LiteRT's RESIZE_NEAREST_NEIGHBOR does,
    where its RESIZE_BILINEAR refuses it).  The errors do not name the node: the interpreter prefixes them with
    where they happened (subgraph, node, op and version), as for every kernel error that does not name its node."""
    if len(in_shape) != 4:
        raise ModelError(f"input must be 4-D, got {in_shape}")
    if out_hw is not None and min(out_hw) < (0 if empty_ok else 1):
        raise ModelError(f"output size must be {'at least 0' if empty_ok else 'positive'}, got {out_hw[0]}x{out_hw[1]}")


def _resize(ctx: NodeContext, make, empty_ok: bool = False) -> Prepared:
    if not ctx.inputs or ctx.inputs[0] is None:
        raise ctx.invalid("needs an input")
    align = bool(ctx.options.get("align_corners", False))
    half = bool(ctx.options.get("half_pixel_centers", False))
    size = _size_of(ctx)
    in_shape = spec_shape(ctx.inputs[0])
    if in_shape is not None:
        _check_sizes(in_shape, None, empty_ok)
    state: dict = {}

    def plan(shape, hw):
        key = (shape, hw)
        if state.get("key") != key:
            _check_sizes(shape, hw, empty_ok)
            state["p"] = make(shape, hw[0], hw[1], align, half)
            state["key"] = key
        return state["p"]

    out_shape = None
    if size is not None and in_shape is not None:
        out_shape = plan(in_shape, size).out_shape

    def run(inputs):
        x = inputs[0]
        hw = size if size is not None else _runtime_size(inputs[1])
        return [plan(x.shape, hw).run(x)]

    # Every plan returns a new array (the nearest-neighbour gather copies).
    return Prepared([out_shape], run, fresh=True)


@register_kernel("RESIZE_BILINEAR", dtypes=FLOAT, versions=range(1, 5))
def resize_bilinear(ctx: NodeContext) -> Prepared:
    if ctx.options.get("align_corners", False) and ctx.options.get("half_pixel_centers", False):
        raise ctx.invalid("half_pixel_centers and align_corners "
                          "cannot both be true")
    return _resize(ctx, _BilinearPlan)


class _NearestPlan:
    def __init__(self, in_shape, oh, ow, align, half):
        n, h, w, c = in_shape
        self.out_shape = (n, oh, ow, c)
        self.yi = nearest_source(oh, h, align, half)[:, None]
        self.xi = nearest_source(ow, w, align, half)[None, :]

    def run(self, x: np.ndarray) -> np.ndarray:
        return x[:, self.yi, self.xi]


@register_kernel("RESIZE_NEAREST_NEIGHBOR", dtypes=ALL_NUMERIC, versions=range(1, 5))
def resize_nearest_neighbor(ctx: NodeContext) -> Prepared:
    return _resize(ctx, _NearestPlan, empty_ok=True)
