"""Float convolutions: CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV, CONV_3D.

How they are made fast in numpy (everything planned once, per input shape):

* CONV_2D: the input is copied once into a zero-padded buffer (allocated at
  prepare, borders never written), an ``as_strided`` patch view of it is
  copied into an im2col block of a few output rows, and one BLAS sgemm per
  block multiplies it by the pre-transposed ``(KH*KW*Cin, Cout)`` weights,
  writing straight into the output; the bias rides in the GEMM as one more
  weight row (a column of ones in the block), the activation follows while
  the block is still in cache.  With short patch rows (3x3 over RGB) the block
  is stored tap-major.  1x1 convolutions skip im2col (one plain matmul; the
  bias goes into the GEMM only when Cin < Cout, where copying the input next
  to a column of ones is cheaper than a pass over the output).
  Grouped convolution does one batched matmul over the groups.
* DEPTHWISE_CONV_2D: a per-channel filter cannot use BLAS, and per-tap
  multiply/add passes are memory-bound, so the taps are reduced by a single
  ``np.einsum`` (a fused multiply-accumulate loop in C) over a strided view.
  The trick that makes its inner loop long: the padded input is stored so that
  one *output row* (all of its columns and channels) is one contiguous run
  for every tap.  With stride 1 that is the padded row itself, read at an
  offset of ``j*dilation`` pixels; with a column stride ``s`` the buffer holds
  the ``s`` column phases of each row side by side, so a tap reads one phase
  at a pixel offset.  At stride 1 a row is cut into pieces of 512-1152 floats
  and the filter is tiled over one piece, so the taps' weights stay in L1.
  1x1 filters at stride 1 are a per-channel scale (one multiply).
* Fusions (see ``_fusion.py``): a zero PAD in front of either convolution only
  widens its padded buffer; a depthwise conv without activation feeding a 1x1
  conv leaves its bias to the 1x1 conv's (``b + W b_dw``).
* TRANSPOSE_CONV: one sgemm ``(N*H*W, Cin) x (Cin, KH*KW*Cout)`` then a
  col2im scatter-add over the KH*KW taps (a single reshaped copy when the
  stride equals the kernel size), then the crop given by the padding.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .._errors import ModelError
from ._common import PADDING_SAME, PADDING_VALID, out_size, same_padding
from ._float_util import F32, Clamp, DerivedCache, activation_clamp, conv_geometry, require_float, spec_shape
from ._fusion import FusionNode
from ._registry import FLOAT, NodeContext, Prepared, register_kernel

__all__ = ["TransposeConvPlan", "transpose_conv_padding", "ConvPrepared", "DepthwisePrepared"]

try:  # the C entry point: np.einsum's Python wrapper costs about a microsecond per call
    from numpy._core.multiarray import c_einsum as _einsum
except ImportError:  # pragma: no cover - numpy 1.x
    _einsum = np.einsum

# Target size of one im2col block: big enough for an efficient sgemm, small
# enough to stay in the L2 cache together with its output block.
_IM2COL_BLOCK_BYTES = 1 << 21
# Target output block of pointwise (1x1) convolutions.
_POINTWISE_BLOCK_BYTES = 1 << 19
# Patch rows (KW * Cin floats) up to which im2col stores patches tap-major (measured: 3x3
# over RGB 9-16% faster, 5x5 over RGB no better).
_KMAJOR_MAX_RUN = 12


def _epilogue(dst: np.ndarray, bias: np.ndarray | None, clamp: Clamp | None) -> None:
    if bias is not None:
        np.add(dst, bias, out=dst)
    if clamp is not None:
        clamp(dst)


class _BiasAdder:
    """Adds a per-channel bias to a contiguous (rows, C) block.

    A plain broadcast runs numpy's inner loop over only C elements per row, which is slow
    for the small channel counts of mobile models; the bias is therefore tiled ``t`` times
    and added to the block viewed as (rows / t, t * C) (cached per bias array).
    """

    __slots__ = ("_src", "_tiled", "_t")

    def __init__(self, channels: int):
        self._t = max(1, 512 // max(channels, 1))
        self._src: np.ndarray | None = None
        self._tiled: np.ndarray | None = None

    def add(self, dst: np.ndarray, bias: np.ndarray) -> None:
        t = self._t
        m = dst.shape[0]
        if t == 1 or m % t:
            np.add(dst, bias, out=dst)
            return
        if bias is not self._src:
            self._tiled = np.tile(np.asarray(bias, F32).reshape(-1), t)
            self._src = bias
        v = dst.reshape(m // t, -1)
        np.add(v, self._tiled, out=v)


# (top, bottom, left, right) zero padding of a PAD fused in front of a convolution.
_NO_PAD = (0, 0, 0, 0)


class ConvPrepared(Prepared):
    """What the float CONV_2D kernel returns (fusions recognise its nodes by it)."""


class DepthwisePrepared(Prepared):
    """What the float DEPTHWISE_CONV_2D kernel returns (fusions recognise its nodes by it)."""


def _check_rank(ctx: NodeContext, shape: tuple[int, ...] | None, rank: int, what: str) -> None:
    if shape is not None and len(shape) != rank:
        raise ctx.invalid(f"{what} must have rank {rank}, got shape {shape}")


def _check_bias(ctx: NodeContext, idx: int, n: int) -> None:
    b = ctx.inputs[idx] if idx < len(ctx.inputs) else None
    if b is None:
        return
    bs = spec_shape(b)
    if bs is not None and int(np.prod(bs)) != n:
        raise ctx.invalid(f"bias has shape {bs}, expected {n} elements")


class _ShapeKeyed:
    """Holds the plan for the last input shape; rebuilds it when the shape changes."""

    __slots__ = ("_make", "key", "plan")

    def __init__(self, make: Callable[[tuple[int, ...]], object], shape: tuple[int, ...] | None):
        self._make = make
        self.key: tuple[int, ...] | None = None
        self.plan: object = None
        if shape is not None:
            self.get(shape)

    def get(self, shape: tuple[int, ...]):
        if shape != self.key:
            self.plan = self._make(shape)
            self.key = shape
        return self.plan


def _conv_run(plans: _ShapeKeyed) -> Callable[[list[np.ndarray | None]], list[np.ndarray]]:
    """CONV_2D's and DEPTHWISE_CONV_2D's run (input, filter, optional bias): the plan for the input's shape,
    which holds its filter's derived weights (``plan.wcache``)."""

    def run(inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x, w = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        plan = plans.get(x.shape)
        return [plan.run(x, plan.wcache.get(w), bias)]

    return run


# --------------------------------------------------------------------------- CONV_2D


class _Conv2DPlan:
    def __init__(self, in_shape, filt_shape, sh, sw, dh, dw, padding, clamp, pre=_NO_PAD):
        n, h, w, c = in_shape
        o, kh, kw, cf = filt_shape
        if cf <= 0 or c % cf:
            raise ModelError(f"input depth {c} is not a multiple of filter depth {cf}")
        g = c // cf
        if o % g:
            raise ModelError(f"{o} output channels not divisible into {g} groups")
        et, eb, el, er = pre  # a zero PAD fused in front: the geometry is that of the padded input
        oh, pt, pb = conv_geometry(padding, h + et + eb, kh, sh, dh)
        ow, pl, pr = conv_geometry(padding, w + el + er, kw, sw, dw)
        pt, pb, pl, pr = pt + et, pb + eb, pl + el, pr + er
        self.in_shape = in_shape
        self.out_shape = (n, oh, ow, o)
        self.groups = g
        self.clamp = clamp
        self.empty = 0 in self.out_shape or 0 in in_shape  # LiteRT runs empty convolutions too
        if self.empty:
            return
        self.strides = (sh, sw, dh, dw)
        self.k = (kh, kw, cf)
        self.pointwise = kh == 1 and kw == 1 and g == 1 and pt == pb == pl == pr == 0
        self.bias_adder = _BiasAdder(o)
        self._aug_src: tuple = (None, None)
        self._aug: np.ndarray | None = None
        if self.pointwise:
            m = oh * ow
            rows = max(1, min(n * m, _POINTWISE_BLOCK_BYTES // (4 * max(o, c))))
            t = self.bias_adder._t
            # Whole bias tiles per block, even where one block would hold everything: the
            # blocking decides which rows BLAS computes as a GEMV (different last-ulp
            # rounding), and tests/test_mediapipe_cpu.py's pose_landmark_full presence score
            # (a sigmoid at 6e-10, its relative error = the logit's absolute error) sits at
            # its bar with these roundings; see docs/performance.md.
            self.rows = max(t, rows - rows % t)
            # With fewer input than output channels, copying the input block next to a column
            # of ones (the bias rides in the GEMM) costs less than a bias pass over the output.
            self.cols = None
            if c < o:
                self.cols = np.empty((self.rows, c + 1), F32)
                self.cols[:, c] = 1
            # One block at stride 1 (small tensors): a short path with the views made here.
            self.single = sh == sw == 1 and n * m <= self.rows
            if self.single:
                self.m_total = n * m
                if self.cols is not None:
                    self.cols_m = self.cols[:n * m]
                    self.cols_in = self.cols_m[:, :c]
            return
        if pt or pb or pl or pr:
            self.padded = np.zeros((n, h + pt + pb, w + pl + pr, c), F32)
            self.interior = self.padded[:, pt:pt + h, pl:pl + w, :]
        else:
            self.padded = None
        kk = kh * kw * c
        self.rows = max(1, min(oh, _IM2COL_BLOCK_BYTES // (4 * ow * kk)))
        # With a few input channels (an image's first layer) a patch row is a handful of
        # floats, and copying patches pixel by pixel runs numpy's inner loop over KW*C
        # elements; stored tap-major, (KH*KW*C, pixels), each copy runs along a whole output
        # row instead, and BLAS reads the block transposed.
        self.kmajor = g == 1 and kw * c <= _KMAJOR_MAX_RUN
        if self.kmajor:
            self.cols = np.empty((kk + 1, self.rows * ow), F32)
            self.cols[kk] = 1
        elif g == 1:
            # One spare column of ones: the bias rides in the GEMM as one more weight row.
            self.cols = np.empty((self.rows * ow, kk + 1), F32)
            self.cols[:, kk] = 1
        else:
            self.cols = np.empty((g, self.rows * ow, kh * kw * cf), F32)
            self.gout = np.empty((g, self.rows * ow, o // g), F32)

    def _augmented(self, wm: np.ndarray, bias: np.ndarray) -> np.ndarray:
        """The GEMM weights with the bias as one more row (cached per weights/bias pair)."""
        if self._aug_src[0] is not wm or self._aug_src[1] is not bias:
            self._aug = np.concatenate([wm, np.asarray(bias, F32).reshape(1, -1)], axis=0)
            self._aug_src = (wm, bias)
        return self._aug  # type: ignore[return-value]

    def run(self, x: np.ndarray, wm: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        out = np.empty(self.out_shape, F32)
        if self.empty:
            if out.size:  # no input elements: every output is bias (+ activation)
                out[...] = 0 if bias is None else np.asarray(bias, F32).reshape(-1)
                _epilogue(out, None, self.clamp)
            return out
        if self.pointwise and self.single:
            m = self.m_total
            o2 = out.reshape(m, self.out_shape[3])
            if bias is not None and self.cols is not None:
                np.copyto(self.cols_in, x.reshape(m, -1))
                np.matmul(self.cols_m, self._augmented(wm, bias), out=o2)
            else:
                np.matmul(x.reshape(m, -1), wm, out=o2)
                if bias is not None:
                    self.bias_adder.add(o2, bias)
            if self.clamp is not None:
                self.clamp(o2)
            return out
        n, oh, ow, o = self.out_shape
        sh, sw, dh, dw = self.strides
        if self.pointwise:
            src = x if sh == 1 and sw == 1 else x[:, ::sh, ::sw, :]
            c = x.shape[3]
            a = src.reshape(-1, c)
            o2 = out.reshape(-1, o)
            step = self.rows
            cols = self.cols if bias is not None else None
            gemm_w = self._augmented(wm, bias) if cols is not None else wm
            for r in range(0, a.shape[0], step):
                dst = o2[r:r + step]
                if cols is not None:
                    blk = cols[:dst.shape[0]]
                    np.copyto(blk[:, :c], a[r:r + step])
                    np.matmul(blk, gemm_w, out=dst)
                else:
                    np.matmul(a[r:r + step], wm, out=dst)
                    if bias is not None:
                        self.bias_adder.add(dst, bias)
                if self.clamp is not None:
                    self.clamp(dst)
            return out
        if self.padded is not None:
            np.copyto(self.interior, x)
            src = self.padded
        else:
            src = np.ascontiguousarray(x)
        kh, kw, cf = self.k
        c = src.shape[3]
        s0, s1, s2, s3 = src.strides
        o2 = out.reshape(n, oh * ow, o)
        g = self.groups
        if g == 1:
            kk = kh * kw * c
            if bias is not None:
                gemm_w, ncols = self._augmented(wm, bias), kk + 1
            else:
                gemm_w, ncols = wm, kk
        for b in range(n):
            for r0 in range(0, oh, self.rows):
                rr = min(self.rows, oh - r0)
                m = rr * ow
                base = src[b, r0 * sh:]
                dst = o2[b, r0 * ow:r0 * ow + m]
                if self.kmajor:
                    patches = as_strided(base, (kh, kw, c, rr, ow), (s1 * dh, s2 * dw, s3, s1 * sh, s2 * sw))
                    np.copyto(self.cols[:kk, :m].reshape(kh, kw, c, rr, ow), patches)
                    np.matmul(self.cols[:ncols, :m].T, gemm_w, out=dst)
                elif g == 1:
                    patches = as_strided(base, (rr, ow, kh, kw, c), (s1 * sh, s2 * sw, s1 * dh, s2 * dw, s3))
                    np.copyto(self.cols[:m, :kk].reshape(rr, ow, kh, kw, c), patches)
                    np.matmul(self.cols[:m, :ncols], gemm_w, out=dst)
                else:
                    patches = as_strided(base, (rr, ow, kh, kw, g, cf),
                                         (s1 * sh, s2 * sw, s1 * dh, s2 * dw, s3 * cf, s3))
                    cols = self.cols[:, :m]
                    np.copyto(cols.reshape(g, rr, ow, kh, kw, cf), patches.transpose(4, 0, 1, 2, 3, 5))
                    gout = self.gout[:, :m]
                    np.matmul(cols, wm, out=gout)
                    np.copyto(dst.reshape(m, g, o // g), gout.transpose(1, 0, 2))
                    if bias is not None:
                        self.bias_adder.add(dst, bias)
                if self.clamp is not None:
                    self.clamp(dst)
        return out


def _conv2d_weights(groups: int) -> Callable[[np.ndarray], np.ndarray]:
    def fn(w: np.ndarray) -> np.ndarray:
        w = np.asarray(w, F32)
        o = w.shape[0]
        if groups == 1:
            return np.ascontiguousarray(w.reshape(o, -1).T)
        og = o // groups
        return np.ascontiguousarray(w.reshape(groups, og, -1).transpose(0, 2, 1))

    return fn


def _conv_setup(ctx: NodeContext, in_shape: tuple[int, ...] | None):
    """Validate and read what CONV_2D and DEPTHWISE_CONV_2D share: operands, padding, strides,
    dilations, fused activation and a known 4-D filter.  Returns (padding, sh, sw, dh, dw, clamp, fshape)."""
    if len(ctx.inputs) < 2 or ctx.inputs[0] is None or ctx.inputs[1] is None:
        raise ctx.invalid("needs input and filter")
    require_float(ctx, [0, 1, 2])
    opt = ctx.options
    padding = int(opt.get("padding", PADDING_SAME))
    sh, sw = int(opt.get("stride_h", 1)), int(opt.get("stride_w", 1))
    dh, dw = int(opt.get("dilation_h_factor", 1)), int(opt.get("dilation_w_factor", 1))
    clamp = activation_clamp(int(opt.get("fused_activation_function", 0)))
    if padding not in (PADDING_SAME, PADDING_VALID) or min(sh, sw, dh, dw) <= 0:
        raise ctx.invalid(f"bad padding/stride/dilation {padding} {sh} {sw} {dh} {dw}")
    fshape = spec_shape(ctx.inputs[1])
    _check_rank(ctx, in_shape, 4, "input")
    if fshape is None:
        raise ctx.fail("filter shape must be known at prepare")
    _check_rank(ctx, fshape, 4, "filter")
    return padding, sh, sw, dh, dw, clamp, fshape


@register_kernel("CONV_2D", dtypes=FLOAT, versions=range(1, 9))
def conv_2d(ctx: NodeContext) -> Prepared:
    return _conv_2d(ctx, spec_shape(ctx.inputs[0]) if ctx.inputs else None, _NO_PAD)


def _conv_2d(ctx: NodeContext, in_shape: tuple[int, ...] | None, pre: tuple[int, int, int, int]) -> Prepared:
    """CONV_2D on an input of ``in_shape`` zero-padded by ``pre`` (a fused PAD) before the conv."""
    padding, sh, sw, dh, dw, clamp, fshape = _conv_setup(ctx, in_shape)
    _check_bias(ctx, 2, fshape[0])
    def make(shape):
        if len(shape) != 4:
            raise ctx.invalid(f"input must be 4-D, got {shape}")
        plan = _Conv2DPlan(shape, fshape, sh, sw, dh, dw, padding, clamp, pre)
        plan.wcache = DerivedCache(_conv2d_weights(plan.groups), ctx.inputs[1].data)
        return plan

    plans = _ShapeKeyed(make, in_shape)
    out_shape = plans.plan.out_shape if in_shape is not None else None  # type: ignore[union-attr]
    return ConvPrepared([out_shape], _conv_run(plans), fresh=True)


# --------------------------------------------------------------------------- DEPTHWISE_CONV_2D


def _row_piece(ow: int, co: int) -> int:
    """Pixels per piece of an output row for the depthwise einsum: a divisor of ``ow``
    giving 512-1152 floats, else the whole row."""
    best = ow
    for p in range(ow, 0, -1):
        if ow % p == 0 and p * co <= 1152:
            best = p
            break
    return best if best * co >= 512 else ow


class _DepthwisePlan:
    """Depthwise conv as one einsum over a row-contiguous, column-phase-split padded buffer."""

    def __init__(self, in_shape, filt_shape, sh, sw, dh, dw, padding, mult, clamp, pre=_NO_PAD):
        n, h, w, c = in_shape
        _, kh, kw, co = filt_shape
        if co != c * mult:
            raise ModelError(
                f"DEPTHWISE_CONV_2D: filter has {co} channels, expected input depth {c} x multiplier {mult}")
        et, eb, el, er = pre  # a zero PAD fused in front: the geometry is that of the padded input
        oh, pt, pb = conv_geometry(padding, h + et + eb, kh, sh, dh)
        ow, pl, pr = conv_geometry(padding, w + el + er, kw, sw, dw)
        pt, pb, pl, pr = pt + et, pb + eb, pl + el, pr + er
        self.out_shape = (n, oh, ow, co)
        self.clamp = clamp
        self.empty = 0 in self.out_shape
        self._bias_src: np.ndarray | None = None
        self._bias_row: np.ndarray | None = None
        # A 1x1 filter at stride 1 over an unpadded input is a per-channel scale: one multiply
        # over whole rows (against the filter tiled along a row), no buffer.
        self.scale = kh == kw == 1 and sh == sw == 1 and mult == 1 and not (pt or pb or pl or pr)
        if self.empty or self.scale:
            return
        hp, wp = h + pt + pb, w + pl + pr
        wq = -(-wp // sw)  # columns per phase
        rp = sw * wq * co  # elements per buffer row
        self.mult, self.c, self.co = mult, c, co
        self.kh, self.kw, self.wq = kh, kw, wq
        # One spare row at the end: the last run of a row reads a few elements past its end.
        self.buf = np.zeros(n * hp * rp + rp, F32)
        grid = self.buf[: n * hp * rp].reshape(n, hp, sw, wq, c, mult)
        self.fills = []
        spans = []
        for q in range(sw):
            lo = max(0, -(-(pl - q) // sw))
            hi = min(wq, (w + pl - q - 1) // sw + 1)
            if hi > lo:
                x0 = lo * sw + q - pl
                self.fills.append((grid[:, pt:pt + h, q, lo:hi], x0, hi - lo))
                spans.append((lo, hi, x0 - q))
        self.sw = sw
        self.whole = None
        self.split_src: tuple[int, ...] | None = None
        if len(self.fills) == 1 and self.fills[0][2] == w and mult == 1:
            self.whole = self.fills[0][0][..., 0]  # a view: the buffer is written through it
        elif (mult == 1 and len(spans) == sw and len(set(spans)) == 1 and spans[0][2] == 0
              and (spans[0][1] - spans[0][0]) * sw == w):
            # Every phase takes whole groups of ``sw`` consecutive pixels: one copy of the input
            # viewed as (N, H, W/sw, sw, C) with the phase axis moved forward.
            lo, hi, _ = spans[0]
            self.whole = grid[:, pt:pt + h, :, lo:hi, :, 0]
            self.split_src = (n, h, hi - lo, sw, c)
        offs = [j * dw for j in range(kw)]
        qs, bs = [o % sw for o in offs], [o // sw for o in offs]
        q0, b0 = min(qs), min(bs)
        nq, nb = max(qs) - q0 + 1, max(bs) - b0 + 1
        self.taps = [(j, qs[j] - q0, bs[j] - b0) for j in range(kw)]
        self.nq, self.nb = nq, nb
        it = F32.itemsize
        start = q0 * wq * co + b0 * co
        # Each run is read only over the output row's OW*CO elements, so einsum can write
        # straight into the output array.  At stride 1 a row is further cut into pieces of
        # ``pix`` pixels, and the filter is tiled over one piece only: the taps' weights then
        # stay in the L1 cache instead of streaming a whole tiled row per tap (8-18% faster
        # with pieces of 512-1152 floats).
        self.pix = _row_piece(ow, co) if sw == 1 else ow
        pl_ = self.pix * co
        self.view = as_strided(self.buf[start:], (n, kh, nq, nb, oh, ow // self.pix, pl_),
                               (hp * rp * it, dh * rp * it, wq * co * it, co * it, sh * rp * it, pl_ * it, it),
                               writeable=False)

    def tile_weights(self, w: np.ndarray) -> np.ndarray:
        if self.empty:
            return np.asarray(w, F32)
        if self.scale:
            return np.tile(np.asarray(w, F32).reshape(-1), self.out_shape[2])
        w = np.asarray(w, F32).reshape(self.kh, self.kw, self.co)
        wt = np.zeros((self.kh, self.nq, self.nb, self.pix, self.co), F32)
        for j, q, b in self.taps:
            wt[:, q, b] = w[:, j, None, :]
        return wt.reshape(self.kh, self.nq, self.nb, self.pix * self.co)

    def run(self, x: np.ndarray, wt: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        if self.empty:
            return np.empty(self.out_shape, F32)
        n, oh, ow, co = self.out_shape
        out = np.empty(self.out_shape, F32)
        rows = out.reshape(n, oh, ow * co)
        if self.scale:
            np.multiply(x.reshape(rows.shape), wt, out=rows)
            return self._epilogue(out, rows, bias)
        if self.split_src is not None:
            np.copyto(self.whole, x.reshape(self.split_src).transpose(0, 1, 3, 2, 4))
        elif self.whole is not None:  # stride 1: the input lands in one block of the buffer
            np.copyto(self.whole, x.reshape(self.whole.shape))
        else:
            for dst, x0, cnt in self.fills:
                src = x[:, :, x0::self.sw][:, :, :cnt]
                np.copyto(dst, src[..., None])
        _einsum("nipbrxl,ipbl->nrxl", self.view, wt, out=rows.reshape(self.view.shape[:1] + self.view.shape[4:]))
        return self._epilogue(out, rows, bias)

    def _epilogue(self, out: np.ndarray, rows: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        ow = self.out_shape[2]
        if bias is not None:
            # the bias tiled along a whole output row: one long inner loop per row, not per pixel
            if bias is not self._bias_src:
                self._bias_row = np.tile(np.asarray(bias, F32).reshape(-1), ow)
                self._bias_src = bias
            np.add(rows, self._bias_row, out=rows)
        if self.clamp is not None:
            self.clamp(out)
        return out


@register_kernel("DEPTHWISE_CONV_2D", dtypes=FLOAT, versions=range(1, 8))
def depthwise_conv_2d(ctx: NodeContext) -> Prepared:
    return _depthwise_conv_2d(ctx, spec_shape(ctx.inputs[0]) if ctx.inputs else None, _NO_PAD)


def _depthwise_conv_2d(ctx: NodeContext, in_shape: tuple[int, ...] | None,
                       pre: tuple[int, int, int, int]) -> Prepared:
    """DEPTHWISE_CONV_2D on an input of ``in_shape`` zero-padded by ``pre`` (a fused PAD)."""
    padding, sh, sw, dh, dw, clamp, fshape = _conv_setup(ctx, in_shape)
    opt = ctx.options
    if fshape[0] != 1:
        raise ctx.invalid(f"filter must be 1xHxWxC, got {fshape}")
    _check_bias(ctx, 2, fshape[3])
    option_mult = int(opt.get("depth_multiplier", 0) or 0)

    def make(shape):
        if len(shape) != 4:
            raise ctx.invalid(f"input must be 4-D, got {shape}")
        c = shape[3]
        if c <= 0 or fshape[3] % c:
            raise ctx.invalid(f"filter depth {fshape[3]} is not a multiple of input depth {c}")
        # LiteRT derives the multiplier from the shapes; the option is only checked when set.
        mult = fshape[3] // c
        if option_mult and option_mult != mult and c != 1:
            raise ctx.invalid(f"depth_multiplier {option_mult} does not match shapes "
                              f"(input depth {c}, filter depth {fshape[3]})")
        plan = _DepthwisePlan(shape, fshape, sh, sw, dh, dw, padding, mult, clamp, pre)
        plan.wcache = DerivedCache(plan.tile_weights, ctx.inputs[1].data)
        return plan

    plans = _ShapeKeyed(make, in_shape)
    return DepthwisePrepared([plans.plan.out_shape if in_shape is not None else None],  # type: ignore[union-attr]
                             _conv_run(plans), fresh=True)


# --------------------------------------------------------------------------- PAD fused into a conv


def _zero_spatial_pad(pad: FusionNode) -> tuple[tuple[int, ...], tuple[int, int, int, int]] | None:
    """(input shape, (top, bottom, left, right)) of a float PAD that only pads H and W with zeros."""
    ctx = pad.ctx
    x, widths = ctx.inputs[0], ctx.inputs[1]
    shape = spec_shape(x)
    if (x is None or x.dtype != "float32" or shape is None or len(shape) != 4 or widths is None
            or widths.data is None or (x.quantization is not None and x.quantization.scale.size)):
        return None
    p = np.asarray(widths.data).reshape(-1)
    if p.size != 8 or (p < 0).any() or p[0] or p[1] or p[6] or p[7]:
        return None
    return shape, (int(p[2]), int(p[3]), int(p[4]), int(p[5]))


def _pad_fusion(make: Callable[[NodeContext, tuple[int, ...], tuple[int, int, int, int]], Prepared]):
    def fuse(pad: FusionNode, conv: FusionNode, slot: int) -> Prepared | None:
        found = _zero_spatial_pad(pad) if slot == 0 and not pad.chain else None
        if found is None:
            return None
        shape, pre = found
        inner = make(conv.ctx, shape, pre)
        if inner.output_shapes != conv.prepared.output_shapes:
            return None
        skip = len(pad.ctx.inputs) + 1  # the PAD's inputs, then the conv's padded-input slot
        run = inner.run
        return Prepared(inner.output_shapes, lambda inputs: run([inputs[0], *inputs[skip:]]), fresh=True)

    return fuse


def _depthwise_bias_into_pointwise(dw: FusionNode, conv: FusionNode, slot: int) -> Prepared | None:
    """DEPTHWISE_CONV_2D without activation feeding a 1x1 CONV_2D: the depthwise bias moves
    into the pointwise bias, ``b' = b + W b_dw`` (computed in float64, rounded once), so the
    depthwise output is never biased.  Equal in exact arithmetic; in float32 the sums round
    differently (a few ulp), like the bias the pointwise GEMM already carries as a weight row.
    Saves a pass over the depthwise output (~12% of a depthwise conv).  A zero PAD fused in
    front of the depthwise conv (``dw.chain``) stays fused.
    """
    dctx, cctx = dw.ctx, conv.ctx
    if slot != 0 or len(dctx.inputs) < 3 or dctx.inputs[2] is None or dctx.inputs[2].data is None:
        return None
    if activation_clamp(int(dctx.options.get("fused_activation_function", 0))) is not None:
        return None
    if cctx.inputs[1] is None or cctx.inputs[1].data is None:
        return None
    wconv = np.asarray(cctx.inputs[1].data)
    if wconv.ndim != 4 or wconv.shape[1:3] != (1, 1):
        return None
    pre = _NO_PAD
    if dw.chain:
        if len(dw.chain) != 1 or dw.chain[0].ctx.op.name != "PAD":
            return None
        found = _zero_spatial_pad(dw.chain[0])
        if found is None:
            return None
        x_shape, pre = found
    else:
        x_shape = spec_shape(dctx.inputs[0])
    b_dw = np.asarray(dctx.inputs[2].data, np.float64).reshape(-1)
    if x_shape is None or wconv.shape[3] != b_dw.size:
        return None  # a grouped pointwise conv: the depth does not match
    inner = _depthwise_conv_2d(dctx, x_shape, pre)
    if inner.output_shapes != dw.prepared.output_shapes:
        return None
    cbias = cctx.inputs[2] if len(cctx.inputs) > 2 else None
    if cbias is not None and cbias.data is None:
        return None
    folded = wconv.reshape(wconv.shape[0], -1).astype(np.float64) @ b_dw
    if cbias is not None:
        folded = folded + np.asarray(cbias.data, np.float64).reshape(-1)
    folded = folded.astype(F32)
    n_pre = sum(len(m.ctx.inputs) for m in dw.chain)
    w_at = n_pre + 1  # the depthwise filter among the fused step's inputs
    cw_at = n_pre + len(dctx.inputs) + 1  # the pointwise filter
    dw_run, conv_run = inner.run, conv.prepared.run

    def run(inputs):
        return conv_run([dw_run([inputs[0], inputs[w_at]])[0], inputs[cw_at], folded])

    return Prepared(conv.prepared.output_shapes, run, fresh=True)


def _register_fusions() -> None:
    from ._fusion import register_fusion
    from .padding import PadPrepared

    register_fusion("PAD", "CONV_2D", PadPrepared, ConvPrepared)(_pad_fusion(_conv_2d))
    register_fusion("PAD", "DEPTHWISE_CONV_2D", PadPrepared, DepthwisePrepared)(_pad_fusion(_depthwise_conv_2d))
    register_fusion("DEPTHWISE_CONV_2D", "CONV_2D", DepthwisePrepared, ConvPrepared)(_depthwise_bias_into_pointwise)


_register_fusions()


# --------------------------------------------------------------------------- TRANSPOSE_CONV


def transpose_conv_padding(padding: int, out_size: int, k: int, stride: int) -> int:
    """Leading crop of a transposed conv: TFLite pads as for the forward conv from the output size."""
    from ._common import out_size as conv_out

    fwd = conv_out(padding, out_size, k, stride, 1)
    before, _ = same_padding(padding, out_size, k, stride, 1, fwd)
    return before


class TransposeConvPlan:
    """``out = crop(col2im(x @ W)) + bias``; shared with MediaPipe's Convolution2DTransposeBias."""

    def __init__(self, in_shape, filt_shape, out_shape, sh, sw, pt, pl, clamp):
        n, h, w, c = in_shape
        o, kh, kw, cf = filt_shape
        if cf != c:
            raise ModelError(f"transposed conv: input depth {c} does not match filter depth {cf}")
        if len(out_shape) != 4 or out_shape[0] != n or out_shape[3] != o:
            raise ModelError(f"transposed conv: output shape {tuple(out_shape)} does not fit input {in_shape} "
                             f"and filter {filt_shape}")
        if min(sh, sw) <= 0:
            raise ModelError("transposed conv: strides must be positive")
        _, oh, ow, _ = out_shape
        self.in_shape = in_shape
        self.out_shape = tuple(int(d) for d in out_shape)
        self.k = (kh, kw)
        self.s = (sh, sw)
        self.p = (pt, pl)
        self.clamp = clamp
        hf = max((h - 1) * sh + kh, pt + oh)
        wf = max((w - 1) * sw + kw, pl + ow)
        self.full = np.empty((n, hf, wf, o), F32)
        # Stride equal to the kernel: every output pixel gets exactly one tap (a pure relayout).
        self.tiled = sh == kh and sw == kw

    @staticmethod
    def weights(w: np.ndarray) -> np.ndarray:
        w = np.asarray(w, F32)
        o, kh, kw, c = w.shape
        return np.ascontiguousarray(w.transpose(3, 1, 2, 0).reshape(c, kh * kw * o))

    def run(self, x: np.ndarray, wt: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        n, h, w, c = self.in_shape
        kh, kw = self.k
        sh, sw = self.s
        pt, pl = self.p
        _, oh, ow, o = self.out_shape
        cols = np.matmul(x.reshape(n * h * w, c), wt).reshape(n, h, w, kh, kw, o)
        full = self.full
        if self.tiled:
            np.copyto(full[:, :h * kh, :w * kw].reshape(n, h, kh, w, kw, o), cols.transpose(0, 1, 3, 2, 4, 5))
            if full.shape[1] > h * kh:
                full[:, h * kh:] = 0
            if full.shape[2] > w * kw:
                full[:, :, w * kw:] = 0
        else:
            full.fill(0)
            for i in range(kh):
                for j in range(kw):
                    dst = full[:, i:i + (h - 1) * sh + 1:sh, j:j + (w - 1) * sw + 1:sw]
                    np.add(dst, cols[:, :, :, i, j], out=dst)
        res = full[:, pt:pt + oh, pl:pl + ow]
        out = np.empty(self.out_shape, F32)
        if bias is not None:
            np.add(res, bias, out=out)
        else:
            np.copyto(out, res)
        if self.clamp is not None:
            self.clamp(out)
        return out


@register_kernel("TRANSPOSE_CONV", dtypes=("int32",), versions=range(1, 6))
def transpose_conv(ctx: NodeContext) -> Prepared:
    # Looked up by the first input's dtype, which is the int32 output_shape tensor.
    if len(ctx.inputs) < 3 or any(ctx.inputs[i] is None for i in range(3)):
        raise ctx.invalid("needs output_shape, weights and input")
    if ctx.inputs[2].dtype != "float32":
        # Every TRANSPOSE_CONV is looked up by its int32 output_shape: hand quantized nodes to the
        # kernel registered before this one, when the registry can chain.
        from ._registry import CPU_KERNELS

        lookup_next = getattr(CPU_KERNELS, "lookup_next", None)
        other = lookup_next("TRANSPOSE_CONV", "int32", ctx.op.version, transpose_conv) if lookup_next else None
        if other is None:
            raise ctx.fail(f"no kernel for {ctx.inputs[2].dtype} input (this one is float32)")
        return other(ctx)
    require_float(ctx, [1, 2, 3])
    opt = ctx.options
    padding = int(opt.get("padding", PADDING_SAME))
    sh, sw = int(opt.get("stride_h", 1)), int(opt.get("stride_w", 1))
    if padding not in (PADDING_SAME, PADDING_VALID) or min(sh, sw) <= 0:
        raise ctx.invalid("bad padding/strides")
    clamp = activation_clamp(int(opt.get("fused_activation_function", 0)))
    fshape = spec_shape(ctx.inputs[1])
    if fshape is None or len(fshape) != 4:
        raise ctx.invalid(f"filter must be 4-D, got {fshape}")
    _check_bias(ctx, 3, fshape[0])
    in_shape = spec_shape(ctx.inputs[2])
    _check_rank(ctx, in_shape, 4, "input")
    oshape_const = ctx.inputs[0].data
    plans: dict[tuple, TransposeConvPlan] = {}

    def plan_for(xshape, oshape) -> TransposeConvPlan:
        key = (xshape, oshape)
        p = plans.get(key)
        if p is None:
            if len(oshape) != 4:
                raise ctx.invalid(f"output_shape must have 4 entries, got {oshape}")
            pt = transpose_conv_padding(padding, oshape[1], fshape[1], sh)
            pl = transpose_conv_padding(padding, oshape[2], fshape[2], sw)
            p = TransposeConvPlan(xshape, fshape, oshape, sh, sw, pt, pl, clamp)
            plans.clear()
            plans[key] = p
        return p

    out_shape = None
    if oshape_const is not None:
        out_shape = tuple(int(v) for v in np.asarray(oshape_const).reshape(-1))
        if in_shape is not None:
            plan_for(in_shape, out_shape)
    wcache = DerivedCache(TransposeConvPlan.weights, ctx.inputs[1].data)

    def run(inputs):
        oshape = out_shape if out_shape is not None else tuple(int(v) for v in np.asarray(inputs[0]).reshape(-1))
        x = inputs[2]
        bias = inputs[3] if len(inputs) > 3 else None
        return [plan_for(x.shape, oshape).run(x, wcache.get(inputs[1]), bias)]

    return Prepared([out_shape], run, fresh=True)


# --------------------------------------------------------------------------- CONV_3D


class _Conv3DPlan:
    def __init__(self, in_shape, filt_shape, strides, dilations, padding, clamp):
        n, d, h, w, c = in_shape
        kd, kh, kw, cf, o = filt_shape
        if cf != c:
            raise ModelError(f"input depth {c} does not match filter in-channels {cf}")
        sd, sh, sw = strides
        dd, dh, dw = dilations
        od, fd, bd = conv_geometry(padding, d, kd, sd, dd)
        oh, ft, bt = conv_geometry(padding, h, kh, sh, dh)
        ow, fl, bl = conv_geometry(padding, w, kw, sw, dw)
        self.out_shape = (n, od, oh, ow, o)
        self.empty = 0 in self.out_shape
        self.k = (kd, kh, kw)
        self.s, self.dl = strides, dilations
        self.clamp = clamp
        if fd or bd or ft or bt or fl or bl:
            self.padded = np.zeros((n, d + fd + bd, h + ft + bt, w + fl + bl, c), F32)
            self.interior = self.padded[:, fd:fd + d, ft:ft + h, fl:fl + w]
        else:
            self.padded = None
        self.cols = np.empty((oh * ow, kd * kh * kw * c), F32)

    def run(self, x, wm, bias):
        if self.empty:
            return np.empty(self.out_shape, F32)
        src = x if self.padded is None else self.padded
        if self.padded is not None:
            np.copyto(self.interior, x)
        src = np.ascontiguousarray(src)
        n, od, oh, ow, o = self.out_shape
        kd, kh, kw = self.k
        sd, sh, sw = self.s
        dd, dh, dw = self.dl
        c = src.shape[4]
        st = src.strides
        out = np.empty(self.out_shape, F32)
        o3 = out.reshape(n, od, oh * ow, o)
        for b in range(n):
            for z in range(od):
                base = src[b, z * sd]
                patches = as_strided(base, (oh, ow, kd, kh, kw, c),
                                     (st[2] * sh, st[3] * sw, st[1] * dd, st[2] * dh, st[3] * dw, st[4]))
                np.copyto(self.cols.reshape(oh, ow, kd, kh, kw, c), patches)
                dst = o3[b, z]
                np.matmul(self.cols, wm, out=dst)
                _epilogue(dst, bias, self.clamp)
        return out


def _conv3d_options(ctx: NodeContext) -> tuple[int, tuple[int, int, int], tuple[int, int, int], Clamp | None]:
    """(padding, strides, dilations, fused clamp) of CONV_3D / CONV_3D_TRANSPOSE (Conv3DOptions)."""
    opt = ctx.options
    padding = int(opt.get("padding", PADDING_SAME))
    strides = (int(opt.get("stride_d", 1)), int(opt.get("stride_h", 1)), int(opt.get("stride_w", 1)))
    dil = (int(opt.get("dilation_d_factor", 1)), int(opt.get("dilation_h_factor", 1)),
           int(opt.get("dilation_w_factor", 1)))
    if padding not in (PADDING_SAME, PADDING_VALID) or min(strides + dil) <= 0:
        raise ctx.fail("bad padding/stride/dilation")
    return padding, strides, dil, activation_clamp(int(opt.get("fused_activation_function", 0)))


@register_kernel("CONV_3D", dtypes=FLOAT, versions=range(1, 3))
def conv_3d(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) < 2 or ctx.inputs[0] is None or ctx.inputs[1] is None:
        raise ctx.invalid("needs input and filter")
    require_float(ctx, [0, 1, 2])
    padding, strides, dil, clamp = _conv3d_options(ctx)
    in_shape, fshape = spec_shape(ctx.inputs[0]), spec_shape(ctx.inputs[1])
    _check_rank(ctx, in_shape, 5, "input")
    if fshape is None or len(fshape) != 5:
        raise ctx.invalid(f"filter must be 5-D (D,H,W,I,O), got {fshape}")
    _check_bias(ctx, 2, fshape[4])

    def make(shape):
        if len(shape) != 5:
            raise ctx.invalid(f"input must be 5-D, got {shape}")
        return _Conv3DPlan(shape, fshape, strides, dil, padding, clamp)

    plans = _ShapeKeyed(make, in_shape)
    wcache = DerivedCache(lambda w: np.ascontiguousarray(np.asarray(w, F32).reshape(-1, fshape[4])),
                          ctx.inputs[1].data)

    def run(inputs):
        x, w = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        return [plans.get(x.shape).run(x, wcache.get(w), bias)]

    return Prepared([plans.plan.out_shape if in_shape is not None else None], run)  # type: ignore[union-attr]


# --------------------------------------------------------------------------- CONV_3D_TRANSPOSE


@register_kernel("CONV_3D_TRANSPOSE", dtypes=("int32",), versions=range(1, 2))
def conv_3d_transpose(ctx: NodeContext) -> Prepared:
    """LiteRT's CONV_3D_TRANSPOSE: inputs (output_shape, filter (D, H, W, O, I), input, bias?);
    each input element scatters ``x * w`` into the output at ``in * stride - pad + tap * dilation``.
    The padding is LiteRT's: the forward convolution's padding of the output back to the input
    (half the excess, rounded down, for SAME and VALID alike)."""
    if len(ctx.inputs) < 3 or any(ctx.inputs[i] is None for i in range(3)):
        raise ctx.fail("needs output_shape, filter and input")
    require_float(ctx, [1, 2, 3])
    padding, strides, dil, clamp = _conv3d_options(ctx)
    fshape = spec_shape(ctx.inputs[1])
    if fshape is None or len(fshape) != 5:
        raise ctx.fail(f"filter must be 5-D (D, H, W, O, I), got {fshape}")
    _check_bias(ctx, 3, fshape[3])

    def plan(shapes):
        oshape = tuple(int(v) for v in shapes[0])
        xs = shapes[2]
        if len(oshape) != 5 or len(xs) != 5:
            raise ctx.fail(f"output_shape {oshape} and input shape {xs} must be 5-D")
        if oshape[0] != xs[0] or oshape[4] != fshape[3] or xs[4] != fshape[4]:
            raise ctx.fail(f"output_shape {oshape}, input {xs} and filter {fshape} do not fit")
        pads = []
        for k in range(3):
            out_sz, in_sz, f = oshape[1 + k], xs[1 + k], fshape[k]
            if out_size(padding, out_sz, f, strides[k], dil[k]) != in_sz:
                raise ctx.fail(f"output_shape {oshape} does not convolve back to the input shape {xs}")
            pads.append(same_padding(padding, out_sz, f, strides[k], dil[k], in_sz)[0])
        return oshape, pads

    def compute(x, w, b, oshape, pads):
        n, ci = x.shape[0], x.shape[4]
        co = oshape[4]
        ext = [(x.shape[1 + k] - 1) * strides[k] + (fshape[k] - 1) * dil[k] + 1 for k in range(3)]
        buf = np.zeros((n, *[max(e, p + o) for e, p, o in zip(ext, pads, oshape[1:4], strict=True)], co), F32)
        xf = x.astype(F32).reshape(-1, ci)
        for fd in range(fshape[0]):
            for fy in range(fshape[1]):
                for fx in range(fshape[2]):
                    contrib = (xf @ w[fd, fy, fx].T).reshape(*x.shape[:4], co)
                    sl = tuple(slice(t * dil[k], t * dil[k] + (x.shape[1 + k] - 1) * strides[k] + 1, strides[k])
                               for k, t in enumerate((fd, fy, fx)))
                    buf[(slice(None), *sl)] += contrib
        out = buf[(slice(None), *[slice(p, p + o) for p, o in zip(pads, oshape[1:4], strict=True)])]
        if b is not None:
            out = out + np.asarray(b, F32).reshape(-1)
        out = np.ascontiguousarray(out, dtype=F32)
        return clamp(out) if clamp is not None else out

    shape_spec = ctx.inputs[0]
    if shape_spec.data is not None and ctx.inputs[2].shape is not None:
        oshape, pads = plan([np.asarray(shape_spec.data).reshape(-1), None, tuple(ctx.inputs[2].shape)])

        def run(inputs):
            b = inputs[3] if len(inputs) > 3 else None
            return [compute(inputs[2], np.asarray(inputs[1], F32), b, oshape, pads)]

        return Prepared([oshape], run)

    def run_dynamic(inputs):
        oshape, pads = plan([np.asarray(inputs[0]).reshape(-1), None, tuple(inputs[2].shape)])
        b = inputs[3] if len(inputs) > 3 else None
        return [compute(inputs[2], np.asarray(inputs[1], F32), b, oshape, pads)]

    return Prepared([None], run_dynamic)
