"""Dynamic-range ("hybrid") kernels: float32 activations with int8 weights (per-tensor or
per-channel scales), as LiteRT's reference kernels evaluate them, for CONV_2D,
DEPTHWISE_CONV_2D, TRANSPOSE_CONV, FULLY_CONNECTED, BATCH_MATMUL and
UNIDIRECTIONAL_SEQUENCE_LSTM.

LiteRT quantizes the float input on the fly, per batch row: symmetric (scale
``max|x| / 127``, values ``round(x * 127 / max|x|)``) or, when the op asks for
``asymmetric_quantize_inputs`` (and always for per-channel convolutions), asymmetric
(scale ``(max - min) / 255`` in double, a nudged zero point, values
``round(zp + x / scale)``).  The int8 dot products are exact integers; they are turned
back into floats with exactly LiteRT's float32 operation order:

* CONV_2D per-tensor: ``float(acc) * (s_row * s_w) + bias``, then the activation clamp;
* CONV_2D per-channel (and grouped): ``float(acc) * s_w[c] * s_row + bias`` with ``acc``
  taken over ``q - zp_row`` (taps outside the image contribute nothing);
* DEPTHWISE_CONV_2D (always asymmetric): ``float(acc) * (s_w[c] * s_row) + bias`` with
  ``acc`` over ``q - zp_row``;
* TRANSPOSE_CONV (always asymmetric): every single product is scattered into a float32
  output, ``out += float((q - zp_row) * w) * s_w[c] * s_row``, then ``+ bias``;
* FULLY_CONNECTED: ``bias + float(acc - rowsum_w * zp_row) * (s_row * s_w[c])``;
* BATCH_MATMUL: ``(s_row * s_w[c]) * int(float(acc) - float(rowsum_w) * zp_row)``;
* UNIDIRECTIONAL_SEQUENCE_LSTM: every gate is ``bias + sum over (input, recurrent) of
  float(acc - rowsum * zp) * (s_row * s_w)`` (+ dequantized peephole * cell), then the
  float sigmoid/tanh cell update of LiteRT's hybrid LSTM step, optional projection
  (quantized again per row) and clipping; input and output state are quantized per batch
  row at every time step.

Chaining
--------
These ops' kernels are looked up by the input dtype, so a hybrid node and a plain float
node share the key ``(op, "float32")`` with the float kernels that another module
registers.  The hybrid kernels therefore take precedence over the float ones (this module
comes after them in ``litegpu.cpu.KERNEL_MODULES``, whatever order the modules are imported in;
its :func:`register` looks the float kernels up, which imports them first) and hand every
node whose weights are not int8 to the kernel registered before them
(``CPU_KERNELS.lookup_next``).  To keep "no kernel for this op" visible while a float
kernel is missing, :func:`register` only installs a hybrid kernel for an op whose float
kernel is already registered (``force=True`` installs it regardless, for tests).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .._common import PADDING_SAME, PADDING_VALID
from .._registry import CPU_KERNELS, NodeContext, Prepared
from ._common import Shape, delegate, plan_by_shape
from ._fixedpoint import qparams, round_half_away

__all__ = ["register", "symmetric_quantize_rows", "asymmetric_quantize_rows", "input_quantization", "HYBRID_OPS"]

F32 = np.float32


# ---------------------------------------------------------------------------------------------
# on-the-fly input quantization (LiteRT's portable tensor utils), vectorised over rows


def symmetric_quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``x`` (2-D float32) -> (int8 values as int64, float32 scale per row)."""
    x = x.astype(F32, copy=False)
    rng = np.maximum(np.abs(x.min(axis=1)), np.abs(x.max(axis=1))).astype(F32)
    zero = rng == 0
    safe = np.where(zero, F32(1), rng)
    scale = np.where(zero, F32(1), (safe / F32(127)).astype(F32))
    inv = (F32(127) / safe).astype(F32)
    q = round_half_away((x * inv[:, None]).astype(F32))
    q = np.clip(q, -127, 127).astype(np.int64)
    q[zero] = 0
    return q, scale.astype(F32)


def asymmetric_quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of ``x`` -> (int8 values as int64, float32 scale, int zero point) per row.

    The range ``max(0, max) - min(0, min)`` is a float32 subtraction and the scale its
    double quotient by 255 (what the LiteRT build we test against computes; a fully
    double-precision variant differs in the last bit of some scales).
    """
    x = x.astype(F32, copy=False)
    rmin32 = np.minimum(F32(0), x.min(axis=1)).astype(F32)
    rmax32 = np.maximum(F32(0), x.max(axis=1)).astype(F32)
    rmin, rmax = rmin32.astype(np.float64), rmax32.astype(np.float64)
    same = rmin32 == rmax32
    span = (rmax32 - rmin32).astype(F32).astype(np.float64)
    scale = np.where(same, 1.0, span / 255.0)
    zp_min = -128.0 - rmin / scale
    zp_max = 127.0 - rmax / scale
    err_min = 128.0 + np.abs(rmin / scale)
    err_max = 127.0 + np.abs(rmax / scale)
    zpd = np.where(err_min < err_max, zp_min, zp_max)
    zp = np.where(zpd <= -128.0, -128, np.where(zpd >= 127.0, 127, round_half_away(np.clip(zpd, -128, 127))))
    zp = np.where(same, 0, zp).astype(np.int64)
    sf = np.where(same, F32(1), scale.astype(F32)).astype(F32)
    inv = (F32(1) / sf).astype(F32)
    # The scaled value is rounded before the zero point is added (measured: with zero point
    # -128, 5.5 -> -122, where rounding ``zp + x / scale`` = -122.5 would give -123).
    q = round_half_away((x * inv[:, None]).astype(F32)) + zp[:, None]
    q = np.clip(q, -128, 127).astype(np.int64)
    q[same] = 0
    return q, sf, zp


def input_quantization(op: str, options: dict, weight_scales: np.ndarray, groups: int = 1) -> str:
    """How LiteRT's hybrid ``op`` quantizes its float input per row: "asymmetric" or "symmetric".

    CONV_2D: asymmetric on its per-channel path (weight scales that differ) and for grouped
    convolutions, else symmetric; DEPTHWISE_CONV_2D and TRANSPOSE_CONV: always asymmetric;
    FULLY_CONNECTED (and the others): as the op's ``asymmetric_quantize_inputs`` option says.
    The GPU float view (``litegpu.gpu._quant``) asks the same question."""
    s = np.asarray(weight_scales).reshape(-1)
    if op == "CONV_2D":
        per_channel = s.size > 1 and not np.all(s == s[0])
        return "asymmetric" if per_channel or groups != 1 else "symmetric"
    if op in ("DEPTHWISE_CONV_2D", "TRANSPOSE_CONV"):
        return "asymmetric"
    return "asymmetric" if options.get("asymmetric_quantize_inputs", False) else "symmetric"


def _activation(ctx: NodeContext, clamp_only: bool) -> Callable[[np.ndarray], np.ndarray]:
    act = int(ctx.options.get("fused_activation_function", 0) or 0)
    if act == 0:
        return lambda v: v
    if act == 1:
        return lambda v: np.maximum(v, F32(0))
    if act == 2:
        return lambda v: np.clip(v, F32(-1), F32(1))
    if act == 3:
        return lambda v: np.clip(v, F32(0), F32(6))
    if act == 4 and not clamp_only:
        return lambda v: np.tanh(v.astype(np.float64)).astype(F32)
    if act == 4:
        return lambda v: v  # LiteRT's conv turns TANH into "no clamp"
    raise ctx.fail(f"fused activation {act} is not supported for hybrid {ctx.op.name}")


def _weights(ctx: NodeContext, axis_channels: int, channels: int):
    w = ctx.inputs[1]
    if w.data is None:
        raise ctx.fail("hybrid kernels need constant int8 weights")
    scales, _ = qparams(w, "weights")
    per_channel = scales.size > 1
    if per_channel and (w.quantization.quantized_dimension != axis_channels or scales.size != channels):
        raise ctx.fail(f"per-channel weight scales must run along dimension {axis_channels} ({channels})")
    return np.asarray(w.data).astype(np.int64), scales.astype(F32), per_channel


def _float_bias(ctx: NodeContext, idx: int, channels: int) -> np.ndarray | None:
    b = ctx.inputs[idx] if len(ctx.inputs) > idx else None
    if b is None:
        return None
    if b.dtype != "float32":
        raise ctx.fail(f"hybrid {ctx.op.name} needs a float32 bias, got {b.dtype}")
    if b.data is not None:
        v = np.asarray(b.data, F32).reshape(-1)
        if v.size != channels:
            raise ctx.fail(f"bias has {v.size} elements for {channels} channels")
        return v
    return None


def _is_hybrid(ctx: NodeContext) -> bool:
    x = ctx.inputs[0] if ctx.inputs else None
    w = ctx.inputs[1] if len(ctx.inputs) > 1 else None
    return x is not None and w is not None and x.dtype == "float32" and w.dtype in ("int8", "int4")


# ---------------------------------------------------------------------------------------------
# CONV_2D


def hybrid_conv_2d(ctx: NodeContext) -> Prepared:
    if not _is_hybrid(ctx):
        return delegate(ctx, ctx.inputs[0].dtype, hybrid_conv_2d, "float CONV_2D")
    from .conv import _geometry, _tap

    cout, kh, kw, cin_g = (int(d) for d in ctx.inputs[1].shape)
    wq, ws, per_channel = _weights(ctx, 0, cout)
    if per_channel and np.all(ws == ws[0]):
        per_channel = False  # LiteRT only takes the per-channel path when the scales differ
    bias = _float_bias(ctx, 2, cout)
    act = _activation(ctx, clamp_only=True)
    if int(ctx.options.get("padding", PADDING_SAME)) not in (PADDING_SAME, PADDING_VALID):
        raise ctx.fail("unknown padding")

    def plan(shapes: list[Shape | None]):
        n, h, wd, cin = shapes[0]
        if cin % cin_g:
            raise ctx.fail(f"input depth {cin} is not a multiple of the filter depth {cin_g}")
        groups = cin // cin_g
        (oh, ow), pads, strides, dils = _geometry(ctx, (h, wd), (kh, kw))
        pt, pb, pl, pr = pads
        m = oh * ow
        asym = input_quantization("CONV_2D", ctx.options, ws, groups) == "asymmetric"
        wt = wq.reshape(groups, cout // groups, kh * kw * cin_g).transpose(0, 2, 1).astype(np.float64)

        def run(inputs):
            xv = inputs[0].astype(F32)
            rows = xv.reshape(n, -1)
            if asym:
                q, sf, zp = asymmetric_quantize_rows(rows)
                q = q - zp[:, None]
            else:
                q, sf = symmetric_quantize_rows(rows)
            qx = q.reshape(n, h, wd, cin).astype(np.float64)
            xp = np.zeros((n, h + pt + pb, wd + pl + pr, cin), np.float64)
            xp[:, pt:pt + h, pl:pl + wd, :] = qx
            cols = np.empty((n, oh, ow, kh * kw, cin), np.float64)
            t = 0
            for ky in range(kh):
                for kx in range(kw):
                    cols[:, :, :, t, :] = _tap(xp, ky, kx, oh, ow, strides, dils)
                    t += 1
            cols = cols.reshape(n * m, kh * kw, groups, cin_g).transpose(2, 0, 1, 3).reshape(groups, n * m, -1)
            acc = np.matmul(cols, wt).transpose(1, 0, 2).reshape(n, m, cout).astype(np.int64)
            accf = acc.astype(F32)
            if asym:
                r = (accf * ws[None, None, :]).astype(F32) * sf[:, None, None]
            else:
                r = accf * (sf * ws[0]).astype(F32)[:, None, None]
            r = r.astype(F32)
            b = bias if bias is not None else (None if len(inputs) < 3 or inputs[2] is None
                                                else inputs[2].astype(F32).reshape(-1))
            if b is not None:
                r = (r + b).astype(F32)
            return [act(r).reshape(n, oh, ow, cout).astype(F32)]

        return [(n, oh, ow, cout)], run

    return plan_by_shape(ctx, plan)


# ---------------------------------------------------------------------------------------------
# DEPTHWISE_CONV_2D


def _channel_scales(ctx: NodeContext, axis: int, channels: int) -> tuple[np.ndarray, np.ndarray]:
    """int8 weights as int64 and one float32 scale per output channel.

    LiteRT's hybrid depthwise and transposed convolutions index the weight scales by output
    channel; a per-tensor scale is repeated for every channel (what LiteRT's TRANSPOSE_CONV
    prepare does; its depthwise reference kernel would read past a one-entry scale array,
    so the repeated scale is the only defined answer there).
    """
    wq, ws, per_channel = _weights(ctx, axis, channels)
    return wq, (ws if per_channel else np.full(channels, ws[0], F32))


def hybrid_depthwise_conv_2d(ctx: NodeContext) -> Prepared:
    if not _is_hybrid(ctx):
        return delegate(ctx, ctx.inputs[0].dtype, hybrid_depthwise_conv_2d, "float DEPTHWISE_CONV_2D")
    from .conv import _geometry, _tap

    wshape = ctx.inputs[1].shape
    if wshape is None or len(wshape) != 4 or int(wshape[0]) != 1:
        raise ctx.fail(f"weights must be [1, kh, kw, channels], got {wshape}")
    _, kh, kw, cout = (int(d) for d in wshape)
    wq, ws = _channel_scales(ctx, 3, cout)
    bias = _float_bias(ctx, 2, cout)
    act = _activation(ctx, clamp_only=True)
    taps = wq.reshape(kh * kw, cout)

    def plan(shapes: list[Shape | None]):
        if shapes[0] is None or len(shapes[0]) != 4:
            raise ctx.fail(f"the input must be 4-D, got {shapes[0]}")
        n, h, wd, cin = shapes[0]
        mult = int(ctx.options.get("depth_multiplier", 1) or 1)
        if cin * mult != cout and cout % max(cin, 1) == 0:
            mult = cout // cin  # the option is redundant; LiteRT trusts the shapes
        if cin * mult != cout:
            raise ctx.fail(f"{cout} output channels are not input depth {cin} x depth multiplier {mult}")
        (oh, ow), pads, strides, dils = _geometry(ctx, (h, wd), (kh, kw))
        pt, pb, pl, pr = pads

        def run(inputs):
            rows = inputs[0].astype(F32).reshape(n, -1)
            q, sf, zp = asymmetric_quantize_rows(rows)
            qx = (q - zp[:, None]).reshape(n, h, wd, cin)
            if mult != 1:
                qx = np.repeat(qx, mult, axis=3)  # output channel c reads input channel c // mult
            xp = np.zeros((n, h + pt + pb, wd + pl + pr, cout), np.int64)
            xp[:, pt:pt + h, pl:pl + wd, :] = qx  # taps outside the image contribute nothing
            acc = np.zeros((n, oh, ow, cout), np.int64)
            t = 0
            for ky in range(kh):
                for kx in range(kw):
                    acc += _tap(xp, ky, kx, oh, ow, strides, dils) * taps[t]
                    t += 1
            # float(acc) * (scale[c] * scale_row), then + bias, then the clamp
            scale = (ws[None, :] * sf[:, None]).astype(F32)[:, None, None, :]
            r = (acc.astype(np.int32).astype(F32) * scale).astype(F32)
            b = bias if bias is not None else (None if len(inputs) < 3 or inputs[2] is None
                                                else inputs[2].astype(F32).reshape(-1))
            if b is not None:
                r = (r + b).astype(F32)
            return [act(r).astype(F32)]

        return [(n, oh, ow, cout)], run

    return plan_by_shape(ctx, plan)


# ---------------------------------------------------------------------------------------------
# TRANSPOSE_CONV


def hybrid_transpose_conv(ctx: NodeContext) -> Prepared:
    ins = ctx.inputs
    if len(ins) < 3 or ins[1] is None or ins[2] is None or ins[2].dtype != "float32" or ins[1].dtype != "int8":
        return delegate(ctx, ins[0].dtype if ins and ins[0] is not None else "int32", hybrid_transpose_conv,
                        "not a float-input TRANSPOSE_CONV with int8 weights")
    from ..conv import transpose_conv_padding

    wshape = ins[1].shape
    if wshape is None or len(wshape) != 4:
        raise ctx.fail(f"weights must be 4-D [out, kh, kw, in], got {wshape}")
    cout, kh, kw, cin = (int(d) for d in wshape)
    wdata = ins[1].data
    if wdata is None:
        raise ctx.fail("hybrid kernels need constant int8 weights")
    scales, _ = qparams(ins[1], "weights")
    if scales.size not in (1, cout):
        raise ctx.fail(f"{scales.size} weight scales for {cout} output channels")
    ws = np.full(cout, scales[0], F32) if scales.size == 1 else scales.astype(F32)
    wq = np.asarray(wdata).astype(np.int64)
    bias = _float_bias(ctx, 3, cout)
    act = _activation(ctx, clamp_only=True)
    o = ctx.options
    padding = int(o.get("padding", PADDING_SAME))
    sh, sw = int(o.get("stride_h", 1)), int(o.get("stride_w", 1))
    if padding not in (PADDING_SAME, PADDING_VALID) or min(sh, sw) <= 0:
        raise ctx.fail(f"bad padding {padding} or strides ({sh}, {sw})")
    const_shape = None if ins[0].data is None else tuple(int(v) for v in np.asarray(ins[0].data).reshape(-1))

    def compute(x: np.ndarray, oshape: tuple[int, ...], b: np.ndarray | None) -> np.ndarray:
        if x.ndim != 4 or x.shape[3] != cin:
            raise ctx.fail(f"input {x.shape} does not match the weights' depth {cin}")
        if len(oshape) != 4 or oshape[0] != x.shape[0] or oshape[3] != cout:
            raise ctx.fail(f"output_shape {oshape} does not fit input {x.shape} and weights {wshape}")
        n, h, wd, _ = x.shape
        _, oh, ow, _ = oshape
        pt = transpose_conv_padding(padding, oh, kh, sh)
        pl = transpose_conv_padding(padding, ow, kw, sw)
        q, sf, zp = asymmetric_quantize_rows(x.astype(F32).reshape(n, -1))
        qx = (q - zp[:, None]).reshape(n, h, wd, cin)
        # LiteRT scatters every (input pixel, input channel) product into a float32 output:
        # ``out += float(q * w) * scale[c] * scale_row``, pixels in row-major order, channels
        # innermost.  An output element receives one tap per input pixel, so walking the taps
        # from the last to the first (later pixels hit earlier taps) and the input channels in
        # order reproduces LiteRT's summation order exactly.
        hf = max((h - 1) * sh + kh, pt + oh)
        wf = max((wd - 1) * sw + kw, pl + ow)
        full = np.zeros((n, hf, wf, cout), F32)
        sfb = sf[:, None, None, None]
        for i in range(kh - 1, -1, -1):
            for j in range(kw - 1, -1, -1):
                dst = full[:, i:i + (h - 1) * sh + 1:sh, j:j + (wd - 1) * sw + 1:sw]
                for c in range(cin):
                    prod = (qx[..., c:c + 1] * wq[:, i, j, c]).astype(F32)
                    term = ((prod * ws).astype(F32) * sfb).astype(F32)
                    np.add(dst, term, out=dst)
        r = full[:, pt:pt + oh, pl:pl + ow]
        if b is not None:
            r = (r + b).astype(F32)
        return act(r).astype(F32)

    def run(inputs):
        oshape = const_shape if const_shape is not None else tuple(int(v) for v in np.asarray(inputs[0]).reshape(-1))
        b = bias if bias is not None else (None if len(inputs) < 4 or inputs[3] is None
                                            else inputs[3].astype(F32).reshape(-1))
        return [compute(inputs[2], oshape, b)]

    return Prepared([const_shape], run)


# ---------------------------------------------------------------------------------------------
# FULLY_CONNECTED


def hybrid_fully_connected(ctx: NodeContext) -> Prepared:
    if not _is_hybrid(ctx):
        return delegate(ctx, ctx.inputs[0].dtype, hybrid_fully_connected, "float FULLY_CONNECTED")
    wquant = ctx.inputs[1].quantization
    if wquant is not None and wquant.block_size:
        return _blockwise_fully_connected(ctx)
    units, depth = (int(d) for d in ctx.inputs[1].shape)
    wq, ws, per_channel = _weights(ctx, 0, units)
    bias = _float_bias(ctx, 2, units)
    act = _activation(ctx, clamp_only=False)
    asym = input_quantization("FULLY_CONNECTED", ctx.options, ws) == "asymmetric"
    keep = bool(ctx.options.get("keep_num_dims", False))
    row_sums = wq.sum(axis=1)
    wt = wq.T.astype(np.float64)

    def plan(shapes: list[Shape | None]):
        xs = shapes[0]
        total = int(np.prod(xs))
        if depth == 0 or total % depth:
            raise ctx.fail(f"input of {total} elements is not a multiple of the weights depth {depth}")
        batch = total // depth
        oshape = tuple(xs[:-1]) + (units,) if keep else (batch, units)

        def run(inputs):
            rows = inputs[0].astype(F32).reshape(batch, depth)
            if asym:
                q, sf, zp = asymmetric_quantize_rows(rows)
            else:
                q, sf = symmetric_quantize_rows(rows)
                zp = np.zeros(batch, np.int64)
            acc = (q.astype(np.float64) @ wt).astype(np.int64)
            acc = (acc - row_sums[None, :] * zp[:, None]).astype(np.int32)
            scale = (sf[:, None] * ws[None, :]).astype(F32) if per_channel else (sf * ws[0]).astype(F32)[:, None]
            b = bias if bias is not None else (None if len(inputs) < 3 or inputs[2] is None
                                                else inputs[2].astype(F32).reshape(-1))
            base = np.zeros((batch, units), F32) if b is None else np.broadcast_to(b, (batch, units))
            r = (base + (acc.astype(F32) * scale).astype(F32)).astype(F32)
            return [act(r).astype(F32).reshape(oshape)]

        return [oshape], run

    return plan_by_shape(ctx, plan)


def _blockwise_fully_connected(ctx: NodeContext) -> Prepared:
    """int4 weights with per-block float16 scales (the schema's BlockwiseQuantization), as LiteRT's
    optimized CPU kernel computes them: each input row quantized asymmetrically to int8, then per
    output unit and block ``acc_b = sum(q_x * q_w)`` (exact integers), accumulated in float32 in
    block order as ``sum_b acc_b * s_b``, minus ``zp_row * sum_b s_b * sum(q_w in b)``, times the
    row's input scale, plus the bias.

    LiteRT takes that path only for constant int4 weights with an even depth of at least 32 and
    at least 4 units; elsewhere it reads the blockwise tensor as affine with scale 0 (its reference
    kernels always do) and returns the bias alone, so those nodes are refused here.  LiteRT's kernel
    leaves the fused activation out while its XNNPACK delegate applies it; litegpu applies it."""
    w = ctx.inputs[1]
    q = w.quantization
    assert q is not None and q.block_scales is not None
    if w.dtype != "int4" or w.data is None or w.shape is None or len(w.shape) != 2:
        raise ctx.fail("blockwise-quantized weights must be a constant 2-D int4 tensor (LiteRT's only "
                       f"blockwise kernel), got {w.dtype} {w.shape}")
    units, depth = (int(d) for d in w.shape)
    if depth % 2 or depth < 32 or units < 4:
        raise ctx.fail(f"blockwise int4 weights of shape ({units}, {depth}): LiteRT computes these only for "
                       "an even depth >= 32 and >= 4 units (otherwise it returns the bias alone)")
    if q.block_scales.dtype != np.float16:
        raise ctx.fail(f"blockwise scales are {q.block_scales.dtype}; LiteRT's kernel reads them as float16")
    block = q.block_size
    nblocks = depth // block
    scales = q.block_scales.astype(F32).reshape(units, nblocks)
    wq = np.asarray(w.data).astype(np.int64).reshape(units, nblocks, block)
    # per block: the weights (for the exact integer dot products) and their sums
    wblocks = [np.ascontiguousarray(wq[:, b, :].T).astype(np.float64) for b in range(nblocks)]
    ksum = wq.sum(axis=2).astype(F32)  # (units, nblocks); small integers, exact in float32
    kfsum = np.zeros(units, F32)
    for b in range(nblocks):
        kfsum = (kfsum + (scales[:, b] * ksum[:, b]).astype(F32)).astype(F32)
    bias = _float_bias(ctx, 2, units)
    act = _activation(ctx, clamp_only=False)
    keep = bool(ctx.options.get("keep_num_dims", False))

    def plan(shapes: list[Shape | None]):
        xs = shapes[0]
        total = int(np.prod(xs))
        if total % depth:
            raise ctx.fail(f"input of {total} elements is not a multiple of the weights depth {depth}")
        batch = total // depth
        oshape = tuple(xs[:-1]) + (units,) if keep else (batch, units)

        def run(inputs):
            rows = inputs[0].astype(F32).reshape(batch, depth)
            qx, sf, zp = asymmetric_quantize_rows(rows)
            qx = qx.astype(np.float64)
            out = np.zeros((batch, units), F32)
            for b in range(nblocks):
                acc = (qx[:, b * block:(b + 1) * block] @ wblocks[b]).astype(F32)  # exact: |acc| < 2**24
                out = (out + (acc * scales[None, :, b]).astype(F32)).astype(F32)
            out = (out - (zp.astype(F32)[:, None] * kfsum[None, :]).astype(F32)).astype(F32)
            out = (out * sf[:, None]).astype(F32)
            bv = bias if bias is not None else (None if len(inputs) < 3 or inputs[2] is None
                                                else inputs[2].astype(F32).reshape(-1))
            if bv is not None:
                out = (out + bv[None, :]).astype(F32)
            return [act(out).astype(F32).reshape(oshape)]

        return [oshape], run

    return plan_by_shape(ctx, plan)


# ---------------------------------------------------------------------------------------------
# BATCH_MATMUL


def hybrid_batch_matmul(ctx: NodeContext) -> Prepared:
    if not _is_hybrid(ctx):
        return delegate(ctx, ctx.inputs[0].dtype, hybrid_batch_matmul, "float BATCH_MATMUL")
    wspec = ctx.inputs[1]
    adj_x = bool(ctx.options.get("adj_x", False))
    adj_y = bool(ctx.options.get("adj_y", False))
    asym = bool(ctx.options.get("asymmetric_quantize_inputs", False))
    if wspec.data is None:
        raise ctx.fail("hybrid BATCH_MATMUL needs constant int8 weights")
    wv = np.asarray(wspec.data).astype(np.int64)
    if wv.ndim < 2:
        raise ctx.fail("weights must be at least 2-D")
    wnk = np.swapaxes(wv, -1, -2) if not adj_y else wv  # [..., N, K]
    n_cols = wnk.shape[-2]
    scales, _ = qparams(wspec, "weights")
    per_channel = scales.size > 1
    if per_channel and scales.size != n_cols:
        raise ctx.fail(f"{scales.size} weight scales for {n_cols} output columns")
    ws = scales.astype(F32)
    row_sums = wnk.sum(axis=-1)  # [..., N]
    wkn = np.swapaxes(wnk, -1, -2).astype(np.float64)  # [..., K, N]

    def plan(shapes: list[Shape | None]):
        xs = shapes[0]
        if len(xs) < 2:
            raise ctx.fail("the input must be at least 2-D")
        m_rows = xs[-1] if adj_x else xs[-2]
        k = xs[-2] if adj_x else xs[-1]
        if k != wnk.shape[-1]:
            raise ctx.fail(f"contraction sizes differ: input {xs} and weights {wv.shape}")
        try:
            batch = tuple(np.broadcast_shapes(tuple(xs[:-2]), tuple(wnk.shape[:-2])))
        except ValueError:
            raise ctx.fail(f"batch dimensions of {xs} and {wv.shape} do not broadcast") from None
        oshape = batch + (m_rows, n_cols)

        def run(inputs):
            x = inputs[0].astype(F32)
            if adj_x:
                x = np.swapaxes(x, -1, -2)
            lead = x.shape[:-1]
            rows = np.ascontiguousarray(x).reshape(-1, k)
            if asym:
                q, sf, zp = asymmetric_quantize_rows(rows)
            else:
                q, sf = symmetric_quantize_rows(rows)
                zp = np.zeros(rows.shape[0], np.int64)
            if not per_channel:
                sf = (sf * ws[0]).astype(F32)
            qx = q.reshape(lead + (k,)).astype(np.float64)
            acc = np.matmul(qx, wkn).astype(np.int64)  # [..., M, N]
            zpf = zp.astype(F32).reshape(lead + (1,))
            sff = sf.reshape(lead + (1,))
            corr = (acc.astype(F32) - (row_sums[..., None, :].astype(F32) * zpf).astype(F32)).astype(F32)
            tot = np.trunc(corr).astype(np.int64).astype(F32)
            scale = (sff * ws).astype(F32) if per_channel else sff
            r = (scale * tot).astype(F32)
            return [np.broadcast_to(r, oshape).astype(F32)]

        return [oshape], run

    return plan_by_shape(ctx, plan)


# ---------------------------------------------------------------------------------------------
# UNIDIRECTIONAL_SEQUENCE_LSTM


def _mbvma(w: np.ndarray, scale, q: np.ndarray, sf: np.ndarray, zp: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """LiteRT's hybrid MatrixBatchVectorMultiplyAccumulate: ``acc += float(q @ w.T - rowsum(w) * zp)
    * (sf * scale)`` per batch row, in its operation order (int8 rows ``q`` with per-row scale ``sf``
    and zero point ``zp``, int8 weights ``w`` with scale ``scale``)."""
    dot = (q.astype(np.float64) @ w.T.astype(np.float64)).astype(np.int64)
    dot = (dot - w.sum(axis=1)[None, :] * zp[:, None]).astype(np.int32)
    s = (sf * scale).astype(F32)[:, None]
    return (acc + (dot.astype(F32) * s).astype(F32)).astype(F32)


def _sigmoid(v: np.ndarray) -> np.ndarray:
    e = np.exp(-v.astype(np.float64)).astype(F32)
    return (F32(1) / (F32(1) + e)).astype(F32)


def _lstm_act(act: int):
    if act == 0:
        return lambda v: v
    if act == 1:
        return lambda v: np.maximum(v, F32(0))
    if act == 3:
        return lambda v: np.clip(v, F32(0), F32(6))
    if act == 4:
        return lambda v: np.tanh(v.astype(np.float64)).astype(F32)
    if act == 6:
        return _sigmoid
    return None


def hybrid_unidirectional_sequence_lstm(ctx: NodeContext) -> Prepared:
    return _hybrid_lstm(ctx, hybrid_unidirectional_sequence_lstm, sequence=True)


def hybrid_lstm(ctx: NodeContext) -> Prepared:
    """LSTM v3 (symmetric) / v4 (asymmetric input quantization): one time step of the same math;
    the basic kernel and float weights go on to the float kernel."""
    return _hybrid_lstm(ctx, hybrid_lstm, sequence=False)


def _hybrid_lstm_cell(ctx: NodeContext, ins: list):
    """The hybrid LSTM step of one direction: ``ins`` are its 24 inputs in UNIDIRECTIONAL_SEQUENCE_LSTM
    order.  Returns (step(x, h, c) -> (h, c), n_input, n_cell, n_output)."""
    o = ctx.options
    act = _lstm_act(int(o.get("fused_activation_function", 4) or 0))
    if act is None:
        raise ctx.fail(f"activation {o.get('fused_activation_function')} is not supported")
    if bool(o.get("diagonal_recurrent_tensors", False)):
        raise ctx.fail("diagonal recurrent weights are not supported")
    cell_clip = F32(o.get("cell_clip", 0.0) or 0.0)
    proj_clip = F32(o.get("proj_clip", 0.0) or 0.0)
    asym = bool(o.get("asymmetric_quantize_inputs", False))

    def weight(i):
        t = ins[i]
        if t is None:
            return None
        if t.data is None:
            raise ctx.fail(f"hybrid LSTM weights must be constant (input {i})")
        if t.dtype in ("int8", "int4"):
            s, _ = qparams(t, f"input {i}")
            if s.size != 1:
                raise ctx.fail("hybrid LSTM needs per-tensor weight scales")
            return np.asarray(t.data).astype(np.int64), F32(s[0])
        if t.dtype == "float32":
            return np.asarray(t.data, F32), None
        raise ctx.fail(f"input {i} has dtype {t.dtype}")

    def vec(i):
        t = ins[i]
        if t is None:
            return None
        if t.data is None or t.dtype != "float32":
            raise ctx.fail(f"input {i} must be a constant float32 vector")
        return np.asarray(t.data, F32).reshape(-1)

    use_cifg = ins[1] is None
    gates = {}
    ln_coef: dict[str, np.ndarray | None] = {}
    for name, wi, ri, ci, bi in (("i", 1, 5, 9, 12), ("f", 2, 6, 10, 13), ("c", 3, 7, None, 14), ("o", 4, 8, 11, 15)):
        if name == "i" and use_cifg:
            continue
        w_in, w_rec = weight(wi), weight(ri)
        if w_in is None or w_rec is None or w_in[1] is None or w_rec[1] is None:
            raise ctx.fail(f"gate {name}: hybrid LSTM needs int8 input and recurrent weights")
        peep = None
        if ci is not None and ins[ci] is not None:
            pw = weight(ci)
            # peephole weights are dequantized once: int8 * scale in float32
            peep = (pw[0].astype(F32) * pw[1]).astype(F32) if pw[1] is not None else pw[0]
        gates[name] = (w_in, w_rec, peep, vec(bi))
        ln_coef[name] = vec(20 + "ifco".index(name)) if len(ins) > 20 + "ifco".index(name) else None
    use_ln = ln_coef["f"] is not None
    proj = weight(16)
    if proj is not None and proj[1] is None:
        raise ctx.fail("hybrid LSTM projection weights must be int8")
    proj_bias = vec(17)
    n_cell = gates["f"][0][0].shape[0]
    n_input = gates["f"][0][0].shape[1]
    n_output = gates["f"][1][0].shape[1]
    quant = asymmetric_quantize_rows if asym else None

    def quantize(rows):
        if asym:
            return quant(rows)
        q, sf = symmetric_quantize_rows(rows)
        return q, sf, np.zeros(rows.shape[0], np.int64)

    mbvma = _mbvma

    def gate(name, qx, qh, cell, activation):
        (wx, sx), (wh, sh), peep, bias = gates[name]
        n_b = qx[0].shape[0]
        # with layer norm the bias comes after the normalization
        start = bias if bias is not None and not use_ln else np.zeros(n_cell, F32)
        g = np.broadcast_to(start, (n_b, n_cell)).astype(F32)
        g = mbvma(wx, sx, *qx, g)
        g = mbvma(wh, sh, *qh, g)
        if peep is not None and cell is not None:
            g = (g + (peep[None, :] * cell).astype(F32)).astype(F32)
        if use_ln:  # LiteRT's MeanStddevNormalization, then coefficients and bias
            mean = (g.sum(axis=1, keepdims=True, dtype=F32) / F32(n_cell)).astype(F32)
            d = (g - mean).astype(F32)
            var = ((d * d).sum(axis=1, keepdims=True, dtype=F32) / F32(n_cell)).astype(F32)
            g = (d * (F32(1) / np.sqrt(var + F32(1e-8))).astype(F32)).astype(F32)
            g = (g * ln_coef[name] + (bias if bias is not None else F32(0))).astype(F32)
        return activation(g)

    def step(x, h, c):
        qx = quantize(x)
        qh = quantize(h)
        ig = None if use_cifg else gate("i", qx, qh, c, _sigmoid)
        fg = gate("f", qx, qh, c, _sigmoid)
        cg = gate("c", qx, qh, None, act)
        c = (fg * c).astype(F32)
        if use_cifg:
            c = (c + (cg * (F32(1) - fg).astype(F32)).astype(F32)).astype(F32)
        else:
            c = (c + (cg * ig).astype(F32)).astype(F32)
        if cell_clip > 0:
            c = np.clip(c, -cell_clip, cell_clip)
        og = gate("o", qx, qh, c, _sigmoid)
        hid = (og * act(c)).astype(F32)
        if proj is not None:
            base = np.broadcast_to(proj_bias if proj_bias is not None else np.zeros(n_output, F32),
                                   (hid.shape[0], n_output)).astype(F32)
            h = mbvma(proj[0], proj[1], *quantize(hid), base) if np.any(hid != 0) else base.copy()
            if proj_clip > 0:
                h = np.clip(h, -proj_clip, proj_clip)
        else:
            h = hid
        return h, c

    return step, n_input, n_cell, n_output


def _hybrid_lstm(ctx: NodeContext, me, sequence: bool) -> Prepared:
    ins = ctx.inputs
    if (len(ins) < 20 or ins[0] is None or ins[2] is None or ins[0].dtype != "float32"
            or ins[2].dtype not in ("int8", "int4")):
        return delegate(ctx, ins[0].dtype if ins and ins[0] is not None else "float32",
                        me, f"float {ctx.op.name}")
    step, n_input, n_cell, n_output = _hybrid_lstm_cell(ctx, list(ins))
    time_major = bool(ctx.options.get("time_major", False)) if sequence else True

    def plan(shapes: list[Shape | None]):
        xs = shapes[0]
        if not sequence:  # LSTM: one (batch, n_input) step
            if len(xs) != 2 or xs[1] != n_input:
                raise ctx.fail(f"input must be (batch, {n_input}), got {xs}")
            xs = (1, *xs)
        if len(xs) != 3 or xs[2] != n_input:
            raise ctx.fail(f"input must be 3-D with {n_input} features, got {xs}")
        steps, batch = (xs[0], xs[1]) if time_major else (xs[1], xs[0])
        oshape = (steps, batch, n_output) if time_major else (batch, steps, n_output)
        if not sequence:
            oshape = oshape[1:]

        def run(inputs):
            x = inputs[0].astype(F32).reshape(xs)
            if not time_major:
                x = np.swapaxes(x, 0, 1)
            h_var, c_var = inputs[18], inputs[19]
            h = np.asarray(h_var, F32).reshape(batch, n_output)
            c = np.asarray(c_var, F32).reshape(batch, n_cell)
            out = np.empty((steps, batch, n_output), F32)
            for t in range(steps):  # the recurrence is sequential in time
                h, c = step(x[t], h, c)
                out[t] = h
            # the state variables are updated in place (they persist across invokes)
            np.copyto(h_var, h.reshape(h_var.shape))
            np.copyto(c_var, c.reshape(c_var.shape))
            if not sequence:
                return [out[0]]
            return [out if time_major else np.ascontiguousarray(np.swapaxes(out, 0, 1))]

        return [oshape], run

    return plan_by_shape(ctx, plan)


def hybrid_bidirectional_sequence_lstm(ctx: NodeContext) -> Prepared:
    """BIDIRECTIONAL_SEQUENCE_LSTM v2 (symmetric) / v3 (asymmetric): two hybrid LSTMs, the backward
    one over reversed time (inputs as the float kernel documents them)."""
    ins = ctx.inputs
    if len(ins) < 48 or ins[0] is None or ins[2] is None or ins[0].dtype != "float32" or ins[2].dtype != "int8":
        return delegate(ctx, ins[0].dtype if ins and ins[0] is not None else "float32",
                        hybrid_bidirectional_sequence_lstm, "float BIDIRECTIONAL_SEQUENCE_LSTM")
    if any(ins[i] is not None for i in range(40, 48)):
        raise ctx.fail("auxiliary input weights (cross-linked stacking) are not supported")
    bw_in = 39 if ins[39] is not None else 0  # non-stacking mode: the backward pass reads the aux input
    cells = []
    for base, (hi, ci) in ((0, (35, 36)), (17, (37, 38))):
        view = [ins[0]] + [ins[base + k] for k in range(1, 18)] + [ins[hi], ins[ci]] + [None] * 4
        cells.append(_hybrid_lstm_cell(ctx, view))
    time_major = bool(ctx.options.get("time_major", True))
    merge = bool(ctx.options.get("merge_outputs", False))
    if len(ctx.outputs) != (1 if merge else 2):
        raise ctx.fail("needs one output with merge_outputs, two without")

    def run(inputs):
        outs = []
        for (step, _, n_cell, n_output), x_i, (hi, ci), forward in (
                (cells[0], 0, (35, 36), True), (cells[1], bw_in, (37, 38), False)):
            x = inputs[x_i].astype(F32)
            xt = x if time_major else np.swapaxes(x, 0, 1)
            steps, batch = xt.shape[:2]
            h = np.asarray(inputs[hi], F32).reshape(batch, n_output)
            c = np.asarray(inputs[ci], F32).reshape(batch, n_cell)
            out = np.empty((steps, batch, n_output), F32)
            for t in (range(steps) if forward else range(steps - 1, -1, -1)):  # sequential in time
                h, c = step(xt[t], h, c)
                out[t] = h
            np.copyto(inputs[hi], h.reshape(inputs[hi].shape))
            np.copyto(inputs[ci], c.reshape(inputs[ci].shape))
            outs.append(np.ascontiguousarray(out if time_major else np.swapaxes(out, 0, 1)))
        return [np.concatenate(outs, axis=-1)] if merge else outs

    return Prepared([None] * len(ctx.outputs), run)


# ---------------------------------------------------------------------------------------------
# SVDF


def hybrid_svdf(ctx: NodeContext) -> Prepared:
    """SVDF v2 (symmetric) / v4 (asymmetric): float input and state, int8 feature and time weights.
    The input rows are quantized on the fly (skipped when the whole input is zero, as LiteRT does),
    the time weights are dequantized once; the rest is the float SVDF."""
    ins = ctx.inputs
    if len(ins) != 5 or ins[0] is None or ins[1] is None or ins[0].dtype != "float32" or ins[1].dtype != "int8":
        return delegate(ctx, ins[0].dtype if ins and ins[0] is not None else "float32", hybrid_svdf,
                        "float SVDF")
    wf_t, wt_t, bias_t, state_t = ins[1], ins[2], ins[3], ins[4]
    if wf_t.data is None or wt_t is None or wt_t.data is None or wt_t.dtype != "int8":
        raise ctx.fail("hybrid SVDF needs constant int8 feature and time weights")
    if state_t is None or not state_t.is_variable or state_t.dtype != "float32":
        raise ctx.fail("the state must be a float32 variable tensor")
    w_f = np.asarray(wf_t.data).astype(np.int64)
    s_f = F32(qparams(wf_t, "feature weights")[0][0])
    w_t = (np.asarray(wt_t.data).astype(F32) * F32(qparams(wt_t, "time weights")[0][0])).astype(F32)
    bias = None
    if bias_t is not None:
        if bias_t.data is None or bias_t.dtype != "float32":
            raise ctx.fail("the bias must be a constant float32 vector")
        bias = np.asarray(bias_t.data, F32).reshape(-1)
    rank = int(ctx.options.get("rank", 1) or 1)
    n_filters, memory = w_t.shape
    if w_f.shape[0] != n_filters or n_filters % rank:
        raise ctx.fail(f"feature weights {w_f.shape} and time weights {w_t.shape} do not fit rank {rank}")
    units = n_filters // rank
    asym = bool(ctx.options.get("asymmetric_quantize_inputs", False))
    act = _lstm_act(int(ctx.options.get("fused_activation_function", 0) or 0))
    if act is None:
        raise ctx.fail(f"activation {ctx.options.get('fused_activation_function')} is not supported")

    def plan(shapes: list[Shape | None]):
        xs = shapes[0]
        if len(xs) != 2 or xs[1] != w_f.shape[1]:
            raise ctx.fail(f"input must be (batch, {w_f.shape[1]}), got {xs}")
        batch = xs[0]

        def run(inputs):
            x, state = inputs[0].astype(F32), inputs[4]
            if state.size != batch * n_filters * memory:
                raise ctx.fail(f"state holds {state.size} values, expected {batch * n_filters * memory}")
            s = np.asarray(state, F32).reshape(batch, n_filters, memory)
            new = np.empty_like(s)
            new[:, :, :-1] = s[:, :, 1:]
            feat = np.zeros((batch, n_filters), F32)
            if np.any(x != 0):
                if asym:
                    q, sf, zp = asymmetric_quantize_rows(x)
                else:
                    (q, sf), zp = symmetric_quantize_rows(x), np.zeros(batch, np.int64)
                feat = _mbvma(w_f, s_f, q, sf, zp, feat)
            new[:, :, -1] = feat
            out = np.einsum("bfm,fm->bf", new, w_t, dtype=F32).reshape(batch, units, rank).sum(axis=2, dtype=F32)
            if bias is not None:
                out = (out + bias).astype(F32)
            np.copyto(state, new.reshape(state.shape))
            return [act(out.astype(F32))]

        return [(batch, units)], run

    return plan_by_shape(ctx, plan)


# ---------------------------------------------------------------------------------------------
# registration

#: op -> (hybrid prepare, versions LiteRT accepts, the dtype the node is looked up by)
HYBRID_OPS: dict[str, tuple[Callable[[NodeContext], Prepared], range, str]] = {
    "CONV_2D": (hybrid_conv_2d, range(1, 9), "float32"),
    "DEPTHWISE_CONV_2D": (hybrid_depthwise_conv_2d, range(1, 8), "float32"),
    # looked up by its first input, the int32 output_shape
    "TRANSPOSE_CONV": (hybrid_transpose_conv, range(1, 6), "int32"),
    "FULLY_CONNECTED": (hybrid_fully_connected, range(1, 15), "float32"),
    "BATCH_MATMUL": (hybrid_batch_matmul, range(1, 5), "float32"),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": (hybrid_unidirectional_sequence_lstm, range(1, 5), "float32"),
    # versions 3 (symmetric) and 4 (asymmetric input quantization) are the hybrid LSTM
    "LSTM": (hybrid_lstm, range(1, 5), "float32"),
    # versions 2 (symmetric) and 4 (asymmetric input quantization)
    "SVDF": (hybrid_svdf, range(1, 5), "float32"),
    # versions 2 (symmetric) and 3 (asymmetric input quantization)
    "BIDIRECTIONAL_SEQUENCE_LSTM": (hybrid_bidirectional_sequence_lstm, range(1, 4), "float32"),
}


def register(force: bool = False, registry=CPU_KERNELS) -> list[str]:
    """Install the hybrid kernels (see the module docstring); returns the ops installed."""
    done = []
    for op, (fn, versions, dtype) in HYBRID_OPS.items():
        already = any(e.prepare is fn for e in registry._entries.get(op, ()))
        if already:
            continue
        if force or any(registry.lookup(op, dtype, v) is not None for v in versions):
            registry.register(op, fn, dtypes=(dtype,), versions=versions)
            done.append(op)
    return done


register()
