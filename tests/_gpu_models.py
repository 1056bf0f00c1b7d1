"""Small models for the GPU compiler tests (built with ModelBuilder, run by LiteRT as the oracle)."""

from __future__ import annotations

import numpy as np
from _gpu_tflite import model_builder

RNG = np.random.default_rng(1234)


def rnd(*shape, lo=-1.0, hi=1.0):
    return RNG.uniform(lo, hi, size=shape).astype(np.float32)


def conv_model(b, x, cin, cout, hw, *, k=3, act=0, padding=0, name="c", stride=1):
    w = b.const(f"{name}_w", rnd(cout, k, k, cin))
    bias = b.const(f"{name}_b", rnd(cout))
    oh = hw if padding == 0 else hw - k + 1
    oh = (oh + stride - 1) // stride if padding == 0 else (hw - k) // stride + 1
    y = b.tensor(f"{name}_y", (1, oh, oh, cout))
    b.op("CONV_2D", [x, w, bias], [y], padding=padding, stride_w=stride, stride_h=stride,
         fused_activation_function=act)
    return y


def resize_block(fine_hw, coarse_hw, *, align=False, half=False, residual="ADD", dw=False, extra_reader=False):
    """skip = RESIZE_BILINEAR(coarse) to the fine size; main = conv(fine) (or depthwise -> 1x1); residual
    ADD/MUL; RELU6 (a feature pyramid's top-down block)."""
    b = model_builder()
    fine = b.input("fine", (1, *fine_hw, 6))
    coarse = b.input("coarse", (1, *coarse_hw, 8))
    up = b.tensor("up", (1, *fine_hw, 8))
    b.op("RESIZE_BILINEAR", [coarse, b.const("size", np.array(fine_hw, np.int32))], [up], align_corners=align,
         half_pixel_centers=half)
    x = fine
    if dw:
        x = b.tensor("dw", (1, *fine_hw, 6))
        b.op("DEPTHWISE_CONV_2D", [fine, b.const("dww", rnd(1, 3, 3, 6)), b.const("dwb", rnd(6))], [x], padding=0,
             stride_w=1, stride_h=1, depth_multiplier=1, fused_activation_function=3)
    main = b.tensor("main", (1, *fine_hw, 8))
    k = 1 if dw else 3
    b.op("CONV_2D", [x, b.const("w", rnd(8, k, k, 6)), b.const("b", rnd(8))], [main], padding=0, stride_w=1,
         stride_h=1)
    s_ = b.tensor("s", (1, *fine_hw, 8))
    b.op(residual, [up, main], [s_], fused_activation_function=3)
    b.output(s_)
    if extra_reader:
        b.output(up)
    return b.build(), [rnd(1, *fine_hw, 6, lo=-2, hi=2), rnd(1, *coarse_hw, 8, lo=-2, hi=2)]


def resize_conv_block(coarse_hw, fine_hw, *, k=1, stride=1, padding=0, align=False, half=False,
                      also_residual=False):
    """up = RESIZE_BILINEAR(x) to the fine size; y = CONV_2D(up) (k x k) + skip -> RELU (a decoder's upsample
    and projection); ``also_residual``: the conv adds ``up`` itself (the resize read twice)."""
    b = model_builder()
    x = b.input("x", (1, *coarse_hw, 6))
    up = b.tensor("up", (1, *fine_hw, 6))
    b.op("RESIZE_BILINEAR", [x, b.const("size", np.array(fine_hw, np.int32))], [up], align_corners=align,
         half_pixel_centers=half)
    oh, ow = ((n - k) // stride + 1 if padding == 1 else -(-n // stride) for n in fine_hw)
    cout = 6 if also_residual else 8
    main = b.tensor("main", (1, oh, ow, cout))
    b.op("CONV_2D", [up, b.const("w", rnd(cout, k, k, 6)), b.const("b", rnd(cout))], [main], padding=padding,
         stride_w=stride, stride_h=stride)
    skip = up if also_residual else b.input("skip", (1, oh, ow, cout))
    y = b.tensor("y", (1, oh, ow, cout))
    b.op("ADD", [skip, main], [y], fused_activation_function=1)
    b.output(y)
    feeds = [rnd(1, *coarse_hw, 6, lo=-2, hi=2)] + ([] if also_residual else [rnd(1, oh, ow, cout, lo=-2, hi=2)])
    return b.build(), feeds


def resize_dw_block(coarse_hw, fine_hw, *, stride=1, align=False, half=False, residual=True, extra_reader=False,
                    conv_first=False):
    """up = RESIZE_BILINEAR(x) to the fine size; y = 1x1(RELU6(depthwise 3x3 (up))) + up -> RELU6 (pose_landmark's
    last upsampling and the residual block after it: the resize read by the depthwise and as the residual);
    ``residual`` False: no ADD (and any stride); ``extra_reader``: ``up`` is a model output too; ``conv_first``: x is
    a 1x1 conv's result (an expansion before the resize)."""
    b = model_builder()
    x = b.input("x", (1, *coarse_hw, 8))
    if conv_first:
        e = b.tensor("e", (1, *coarse_hw, 8))
        b.op("CONV_2D", [x, b.const("ew", rnd(8, 1, 1, 8)), b.const("eb", rnd(8))], [e], padding=0, stride_w=1,
             stride_h=1, fused_activation_function=3)
        x = e
    up = b.tensor("up", (1, *fine_hw, 8))
    b.op("RESIZE_BILINEAR", [x, b.const("size", np.array(fine_hw, np.int32))], [up], align_corners=align,
         half_pixel_centers=half)
    oh, ow = (-(-n // stride) for n in fine_hw)
    d = b.tensor("d", (1, oh, ow, 8))
    b.op("DEPTHWISE_CONV_2D", [up, b.const("dww", rnd(1, 3, 3, 8)), b.const("dwb", rnd(8))], [d], padding=0,
         stride_w=stride, stride_h=stride, depth_multiplier=1, fused_activation_function=3)
    main = b.tensor("main", (1, oh, ow, 8))
    b.op("CONV_2D", [d, b.const("w", rnd(8, 1, 1, 8)), b.const("b", rnd(8))], [main], padding=0, stride_w=1,
         stride_h=1)
    y = main
    if residual:
        y = b.tensor("y", (1, oh, ow, 8))
        b.op("ADD", [main, up], [y], fused_activation_function=3)
    b.output(y)
    if extra_reader:
        b.output(up)
    return b.build(), [rnd(1, *coarse_hw, 8, lo=-2, hi=2)]


def shared_residual_block(*, skip_late=False, op="ADD"):
    """u = CONV_2D(x); s = ADD(skip, u) (or MUL) -> RELU, an output; t = MUL(skip, g) + u, another output (a
    selfie_segmentation decoder block: the conv result read by the residual op and by another op).
    ``skip_late``: skip is a depthwise conv's result computed after u's conv (not ready where u's conv runs)."""
    b = model_builder()
    x = b.input("x", (1, 6, 7, 8))
    g = b.input("g", (1, 1, 1, 8))
    u = b.tensor("u", (1, 6, 7, 8))
    b.op("CONV_2D", [x, b.const("w", rnd(8, 1, 1, 8)), b.const("b", rnd(8))], [u], padding=0, stride_w=1,
         stride_h=1)
    if skip_late:
        skip = b.tensor("skip", (1, 6, 7, 8))
        b.op("DEPTHWISE_CONV_2D", [x, b.const("w2", rnd(1, 3, 3, 8)), b.const("b2", rnd(8))], [skip], padding=0,
             stride_w=1, stride_h=1, depth_multiplier=1)
    else:
        skip = b.input("skip", (1, 6, 7, 8))
    s_, m, t = b.tensor("s", (1, 6, 7, 8)), b.tensor("m", (1, 6, 7, 8)), b.tensor("t", (1, 6, 7, 8))
    b.op(op, [skip, u], [s_], fused_activation_function=1)
    b.op("MUL", [skip, g], [m])
    b.op("ADD", [m, u], [t])
    b.output(s_)
    b.output(t)
    feeds = [rnd(1, 6, 7, 8, lo=-2, hi=2), rnd(1, 1, 1, 8)] + ([] if skip_late else [rnd(1, 6, 7, 8, lo=-2, hi=2)])
    return b.build(), feeds


def detection_head_block(k=2):
    """Two feature levels (8x8 and 4x4, 16 channels), each with a 1x1 conv to 2 * k per-anchor values, RESHAPEd to
    (1, anchors, k) and concatenated along the anchors (axis 1): an SSD-style detection head (palm / face
    detection)."""
    b = model_builder()
    outs = []
    for j, hw in enumerate((8, 4)):
        x = b.input(f"x{j}", (1, hw, hw, 16))
        c = b.tensor(f"c{j}", (1, hw, hw, 2 * k))
        b.op("CONV_2D", [x, b.const(f"w{j}", rnd(2 * k, 1, 1, 16)), b.const(f"b{j}", rnd(2 * k))], [c], padding=0,
             stride_w=1, stride_h=1)
        r = b.tensor(f"r{j}", (1, hw * hw * 2, k))
        b.op("RESHAPE", [c, b.const(f"s{j}", np.array([1, hw * hw * 2, k], np.int32))], [r],
             new_shape=[1, hw * hw * 2, k])
        outs.append(r)
    y = b.tensor("y", (1, 160, k))
    b.op("CONCATENATION", outs, [y], axis=1)
    b.output(y)
    return b.build(), [rnd(1, 8, 8, 16), rnd(1, 4, 4, 16)]


def gated_resize_conv_block():
    """MUL(x, gate) -> RESIZE_BILINEAR (4x5 -> 8x10, half-pixel) -> 1x1 CONV_2D: selfie_segmentation's first
    decoder block, a squeeze-excite gate scaling the map a resize then upsamples."""
    b = model_builder()
    x, gate = b.input("x", (1, 4, 5, 8)), b.input("gate", (1, 1, 1, 8))
    m, up, y = b.tensor("m", (1, 4, 5, 8)), b.tensor("up", (1, 8, 10, 8)), b.tensor("y", (1, 8, 10, 6))
    b.op("MUL", [x, gate], [m])
    b.op("RESIZE_BILINEAR", [m, b.const("size", np.array((8, 10), np.int32))], [up], half_pixel_centers=True)
    b.op("CONV_2D", [up, b.const("w", rnd(6, 1, 1, 8)), b.const("b", rnd(6))], [y], padding=0, stride_w=1,
         stride_h=1)
    b.output(y)
    return b.build(), [rnd(1, 4, 5, 8, lo=-2, hi=2), rnd(1, 1, 1, 8)]


def channel_pad_block(cin: int, cout: int, *, value=None, pads=None, pad_first=False, dw_main=False,
                       extra_reader=False, act_after="RELU", main_output=False):
    """BlazeFace-style widening block: skip = PAD(max_pool(x)) on channels, main = conv(dw(x)) (or a
    depthwise with multiplier when ``dw_main``), ADD, activation.  ``main_output``: the main path's
    result is a model output too, so the ADD cannot join its producer and stays a binary node."""
    b = model_builder()
    x = b.input("x", (1, 8, 10, cin))
    feeds = [rnd(1, 8, 10, cin)]
    mp = b.tensor("mp", (1, 4, 5, cin))
    b.op("MAX_POOL_2D", [x], [mp], padding=1, stride_w=2, stride_h=2, filter_width=2, filter_height=2)
    pads = pads or [[0, 0], [0, 0], [0, 0], [0, cout - cin]]
    pshape = tuple(4 + sum(pads[1]) if i == 1 else 5 + sum(pads[2]) if i == 2 else cout if i == 3 else 1
                   for i in range(4))
    p = b.tensor("padded", pshape)
    pc = b.const("pads", np.array(pads, np.int32))
    if value is None:
        b.op("PAD", [mp, pc], [p])
    else:
        b.op("PADV2", [mp, pc, b.const("pv", np.array([value], np.float32))], [p])
    hw = pshape[1:3]
    main = b.tensor("main", (1, *hw, cout))
    if dw_main:
        b.op("DEPTHWISE_CONV_2D", [x, b.const("dw", rnd(1, 3, 3, cout)), b.const("db", rnd(cout))], [main],
             padding=0, stride_w=2, stride_h=2, depth_multiplier=cout // cin)
    elif hw != (4, 5):  # a spatial pad: the main path reads an input of the padded size
        feeds.append(rnd(1, *hw, cin))
        b.op("CONV_2D", [b.input("x2", (1, *hw, cin)), b.const("pw", rnd(cout, 1, 1, cin)), b.const("pb", rnd(cout))],
             [main], padding=1, stride_w=1, stride_h=1)
    else:
        d = b.tensor("d", (1, 4, 5, cin))
        b.op("DEPTHWISE_CONV_2D", [x, b.const("dw", rnd(1, 3, 3, cin)), b.const("db", rnd(cin))], [d], padding=0,
             stride_w=2, stride_h=2, depth_multiplier=1)
        b.op("CONV_2D", [d, b.const("pw", rnd(cout, 1, 1, cin)), b.const("pb", rnd(cout))], [main], padding=1,
             stride_w=1, stride_h=1)
    s_ = b.tensor("s", (1, *hw, cout))
    b.op("ADD", [p, main] if pad_first else [main, p], [s_])
    y = b.tensor("y", (1, *hw, cout))
    if act_after == "PRELU":
        b.op("PRELU", [s_, b.const("alpha", rnd(1, 1, cout))], [y])
    else:
        b.op(act_after, [s_], [y])
    b.output(y)
    if extra_reader:
        b.output(p)
    if main_output:
        b.output(main)
    return b.build(), feeds


def _unary(op, lo=-3.0, hi=3.0, **opts):
    b = model_builder()
    x = b.input("x", (1, 3, 4, 5))
    y = b.tensor("y", (1, 3, 4, 5))
    b.op(op, [x], [y], **opts)
    b.output(y)
    return b.build(), [rnd(1, 3, 4, 5, lo=lo, hi=hi)]


def _binary(op, bshape=(5,), lo=-2.0, hi=2.0, **opts):
    b = model_builder()
    x = b.input("x", (2, 3, 4, 5))
    c = b.input("c", bshape)
    y = b.tensor("y", (2, 3, 4, 5))
    b.op(op, [x, c], [y], **opts)
    b.output(y)
    return b.build(), [rnd(2, 3, 4, 5, lo=lo, hi=hi), rnd(*bshape, lo=lo, hi=hi)]


def _model_resize(op, align, half, size=(7, 9)):
    b = model_builder()
    x = b.input("x", (1, 4, 5, 3))
    y = b.tensor("y", (1, *size, 3))
    b.op(op, [x, b.const("size", np.array(size, np.int32))], [y], align_corners=align, half_pixel_centers=half)
    b.output(y)
    return b.build(), [rnd(1, 4, 5, 3)]


def _model_conv(groups=1, dilation=1, stride=2, padding=0):
    b = model_builder()
    x = b.input("x", (1, 9, 8, 8))
    k = 3
    eff = (k - 1) * dilation + 1
    oh = (9 + stride - 1) // stride if padding == 0 else (9 - eff) // stride + 1
    ow = (8 + stride - 1) // stride if padding == 0 else (8 - eff) // stride + 1
    y = b.tensor("y", (1, oh, ow, 6))
    b.op("CONV_2D", [x, b.const("w", rnd(6, k, k, 8 // groups)), b.const("b", rnd(6))], [y], padding=padding,
         stride_w=stride, stride_h=stride, dilation_w_factor=dilation, dilation_h_factor=dilation, version=6)
    b.output(y)
    return b.build(), [rnd(1, 9, 8, 8)]


def _model_transpose_conv(padding):
    b = model_builder()
    x = b.input("x", (1, 4, 5, 3))
    oh, ow = (8, 10) if padding == 0 else (9, 11)
    y = b.tensor("y", (1, oh, ow, 6))
    b.op("TRANSPOSE_CONV", [b.const("os", np.array([1, oh, ow, 6], np.int32)), b.const("w", rnd(6, 3, 3, 3)), x,
                            b.const("bias", rnd(6))], [y], padding=padding, stride_w=2, stride_h=2, version=3)
    b.output(y)
    return b.build(), [rnd(1, 4, 5, 3)]


def _model_misc(op):
    b = model_builder()
    x = b.input("x", (1, 4, 6, 8))
    if op == "DEPTH_TO_SPACE":
        y = b.tensor("y", (1, 8, 12, 2))
        b.op(op, [x], [y], block_size=2)
    elif op == "SPACE_TO_DEPTH":
        y = b.tensor("y", (1, 2, 3, 32))
        b.op(op, [x], [y], block_size=2)
    elif op == "MIRROR_PAD":
        y = b.tensor("y", (1, 6, 9, 8))
        b.op(op, [x, b.const("p", np.array([[0, 0], [1, 1], [2, 1], [0, 0]], np.int32))], [y], mode=0)
    elif op == "MIRROR_PAD_SYM":
        y = b.tensor("y", (1, 6, 9, 8))
        b.op("MIRROR_PAD", [x, b.const("p", np.array([[0, 0], [1, 1], [2, 1], [0, 0]], np.int32))], [y], mode=1)
    elif op == "AVERAGE_POOL_2D":
        y = b.tensor("y", (1, 2, 3, 8))
        b.op(op, [x], [y], padding=0, stride_w=2, stride_h=2, filter_width=3, filter_height=3)
    elif op == "MAX_POOL_2D":
        y = b.tensor("y", (1, 2, 3, 8))
        b.op(op, [x], [y], padding=0, stride_w=2, stride_h=2, filter_width=3, filter_height=3)
    elif op == "TRANSPOSE":
        y = b.tensor("y", (1, 8, 4, 6))
        b.op(op, [x, b.const("perm", np.array([0, 3, 1, 2], np.int32))], [y])
    elif op == "STRIDED_SLICE":
        y = b.tensor("y", (1, 2, 3, 3))
        b.op(op, [x, b.const("b", np.array([0, 3, -1, 1], np.int32)), b.const("e", np.array([1, 0, 0, 8], np.int32)),
                  b.const("s", np.array([1, -2, -2, 3], np.int32))], [y])
    elif op == "DEPTHWISE_CONV_2D":
        y = b.tensor("y", (1, 2, 4, 16))
        b.op(op, [x, b.const("w", rnd(1, 3, 3, 16)), b.const("b", rnd(16))], [y], padding=1, stride_w=1,
             stride_h=1, dilation_w_factor=1, dilation_h_factor=1, depth_multiplier=2)
    elif op == "GELU":
        y = b.tensor("y", (1, 4, 6, 8))
        b.op(op, [x], [y], approximate=False)
    elif op == "GELU_APPROX":
        y = b.tensor("y", (1, 4, 6, 8))
        b.op("GELU", [x], [y], approximate=True)
    b.output(y)
    return b.build(), [rnd(1, 4, 6, 8, lo=-3, hi=3)]


def _model_dw_pw(kind):
    """DEPTHWISE_CONV_2D -> 1x1 CONV_2D pairs (fused into one dw_pw_conv2d launch), channels not multiples of 4."""
    b = model_builder()
    if kind == "prelu_residual":  # BlazeFace block: dw -> PRELU -> 1x1 -> PRELU -> ADD(skip) -> PRELU
        x = b.input("x", (1, 7, 9, 6))
        inputs = [rnd(1, 7, 9, 6, lo=-2, hi=2)]
        d = b.tensor("d", (1, 7, 9, 6))
        b.op("DEPTHWISE_CONV_2D", [x, b.const("dw", rnd(1, 3, 3, 6)), b.const("db", rnd(6))], [d], padding=0,
             stride_w=1, stride_h=1, depth_multiplier=1)
        t = b.tensor("t", (1, 7, 9, 6))
        b.op("PRELU", [d, b.const("a0", rnd(1, 1, 6, lo=0, hi=0.5))], [t])
        y = b.tensor("y", (1, 7, 9, 6))
        b.op("CONV_2D", [t, b.const("pw", rnd(6, 1, 1, 6)), b.const("pb", rnd(6))], [y], padding=0, stride_w=1,
             stride_h=1)
        p1 = b.tensor("p1", (1, 7, 9, 6))
        b.op("PRELU", [y, b.const("a1", rnd(1, 1, 6, lo=0, hi=0.5))], [p1])
        s = b.tensor("s", (1, 7, 9, 6))
        b.op("ADD", [p1, x], [s])
        y = b.tensor("p2", (1, 7, 9, 6))
        b.op("PRELU", [s, b.const("a2", rnd(1, 1, 6, lo=0, hi=0.5))], [y])
    elif kind == "5x5_s2":  # stride 2, batch 2, dw RELU6, pw RELU
        x = b.input("x", (2, 11, 9, 7))
        inputs = [rnd(2, 11, 9, 7)]
        d = b.tensor("d", (2, 6, 5, 7))
        b.op("DEPTHWISE_CONV_2D", [x, b.const("dw", rnd(1, 5, 5, 7)), b.const("db", rnd(7))], [d], padding=0,
             stride_w=2, stride_h=2, depth_multiplier=1, fused_activation_function=3)
        y = b.tensor("y", (2, 6, 5, 10))
        b.op("CONV_2D", [d, b.const("pw", rnd(10, 1, 1, 7)), b.const("pb", rnd(10))], [y], padding=1, stride_w=1,
             stride_h=1, fused_activation_function=1)
    elif kind == "split":  # 130 channels on a 3x5 grid: the input slices split over a work group
        x = b.input("x", (1, 3, 5, 130))
        inputs = [rnd(1, 3, 5, 130)]
        d = b.tensor("d", (1, 3, 5, 130))
        b.op("DEPTHWISE_CONV_2D", [x, b.const("dw", rnd(1, 3, 3, 130)), b.const("db", rnd(130))], [d], padding=0, stride_w=1,
             stride_h=1, dilation_w_factor=2, dilation_h_factor=2, depth_multiplier=1)
        y = b.tensor("y", (1, 3, 5, 9))
        b.op("CONV_2D", [d, b.const("pw", rnd(9, 1, 1, 130, lo=-0.2, hi=0.2)), b.const("pb", rnd(9))], [y],
             padding=0, stride_w=1, stride_h=1, fused_activation_function=3)
    else:  # "pad_mul": a PAD merged into the depthwise, the 1x1 conv times another input, then RELU
        x = b.input("x", (1, 6, 6, 5))
        r = b.input("r", (1, 6, 6, 3))
        inputs = [rnd(1, 6, 6, 5), rnd(1, 6, 6, 3)]
        p = b.tensor("p", (1, 8, 8, 5))
        b.op("PAD", [x, b.const("pads", np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32))], [p])
        d = b.tensor("d", (1, 6, 6, 5))
        b.op("DEPTHWISE_CONV_2D", [p, b.const("dw", rnd(1, 3, 3, 5)), b.const("db", rnd(5))], [d], padding=1,
             stride_w=1, stride_h=1, depth_multiplier=1, fused_activation_function=1)
        c = b.tensor("c", (1, 6, 6, 3))
        b.op("CONV_2D", [d, b.const("pw", rnd(3, 1, 1, 5)), b.const("pb", rnd(3))], [c], padding=0, stride_w=1,
             stride_h=1)
        y = b.tensor("y", (1, 6, 6, 3))
        b.op("MUL", [c, r], [y], fused_activation_function=1)
    b.output(y)
    return b.build(), inputs


def se_block(b, x, shape, hidden, *, squeeze="pool", layers="conv", gate_act="LOGISTIC", name="s"):
    """A squeeze-and-excitation gate applied to ``x``: global mean (AVERAGE_POOL_2D over the map or MEAN over
    H, W) -> 1x1 layer (CONV_2D, or FULLY_CONNECTED for ``layers="fc"``) + RELU -> 1x1 layer -> ``gate_act``
    -> MUL(x, gate); returns the product."""
    n, h, w, c = shape
    if squeeze == "pool":
        p = b.tensor(f"{name}_p", (n, 1, 1, c))
        b.op("AVERAGE_POOL_2D", [x], [p], padding=1, stride_w=w, stride_h=h, filter_width=w, filter_height=h)
    else:
        p = b.tensor(f"{name}_p", (n, c) if layers == "fc" else (n, 1, 1, c))
        b.op("MEAN", [x, b.const(f"{name}_ax", np.array([1, 2], np.int32))], [p], keep_dims=layers != "fc")
    vec = (lambda k: (n, k)) if layers == "fc" else (lambda k: (n, 1, 1, k))
    f1, f2 = b.tensor(f"{name}_f1", vec(hidden)), b.tensor(f"{name}_f2", vec(c))
    for src, dst, cin, cout, act, k in ((p, f1, c, hidden, 1, 1), (f1, f2, hidden, c, 0, 2)):
        if layers == "fc":
            b.op("FULLY_CONNECTED", [src, b.const(f"{name}_w{k}", rnd(cout, cin)), b.const(f"{name}_b{k}", rnd(cout))],
                 [dst], fused_activation_function=act)
        else:
            b.op("CONV_2D", [src, b.const(f"{name}_w{k}", rnd(cout, 1, 1, cin)), b.const(f"{name}_b{k}", rnd(cout))],
                 [dst], padding=0, stride_w=1, stride_h=1, fused_activation_function=act)
    gate = b.tensor(f"{name}_g", vec(c))
    b.op(gate_act, [f2], [gate])
    m = b.tensor(f"{name}_m", shape)
    b.op("MUL", [x, gate], [m])
    return m


def _model_se(kind):
    """A MobileNetV3 squeeze-and-excitation block: dw -> gate -> MUL -> 1x1 conv + ADD (one se_gate launch and
    the 1x1 conv scaling its input by the gate, _passes/squeeze_excite); channels not multiples of 4."""
    b = model_builder()
    n = 2 if kind == "conv_batch2" else 1
    # "wide": more channel slices (150) than a group has threads, so every se_gate stage runs several passes
    # "big": a map over SE_GATE_POOL_BUDGET (2 slices x 96 x 90), so the mean keeps its own reduce launch
    c, hidden, hw = {"wide": (600, 150, (3, 4)), "big": (6, 3, (96, 90))}.get(kind, (22, 6, (9, 7)))
    shape = (n, *hw, c)
    x = b.input("x", shape)
    d = b.tensor("d", shape)
    b.op("DEPTHWISE_CONV_2D", [x, b.const("dw", rnd(1, 3, 3, c)), b.const("db", rnd(c))], [d], padding=0,
         stride_w=1, stride_h=1, depth_multiplier=1, fused_activation_function=3)
    m = se_block(b, d, shape, hidden, squeeze="mean" if kind == "fc" else "pool",
                 layers="fc" if kind == "fc" else "conv", gate_act="LOGISTIC")
    y1 = b.tensor("c", shape)
    b.op("CONV_2D", [m, b.const("pw", rnd(c, 1, 1, c, lo=-0.1, hi=0.1)), b.const("pb", rnd(c))], [y1], padding=1,
         stride_w=1, stride_h=1)
    y = b.tensor("y", shape)
    b.op("ADD", [y1, x], [y])
    b.output(y)
    return b.build(), [rnd(*shape, lo=-2, hi=2)]


_OP_CASES = {
    **{op: (lambda op=op: _unary(op)) for op in ["ABS", "NEG", "SIN", "COS", "TANH", "LOGISTIC", "RELU", "RELU6",
                                                 "RELU_N1_TO_1", "ELU", "HARD_SWISH", "EXP"]},
    "LOG": lambda: _unary("LOG", 0.1, 5), "SQRT": lambda: _unary("SQRT", 0.1, 5),
    "RSQRT": lambda: _unary("RSQRT", 0.1, 5), "LEAKY_RELU": lambda: _unary("LEAKY_RELU", alpha=0.2),
    **{op: (lambda op=op: _binary(op)) for op in ["ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE"]},
    "DIV": lambda: _binary("DIV", lo=0.5, hi=2), "POW": lambda: _binary("POW", lo=0.5, hi=2),
    "ADD_4d_broadcast": lambda: _binary("ADD", (2, 1, 4, 1)), "PRELU": lambda: _binary("PRELU", (1, 1, 5)),
    "CONV_2D": _model_conv, "CONV_2D_dilated": lambda: _model_conv(dilation=2, stride=1, padding=1),
    "CONV_2D_grouped": lambda: _model_conv(groups=2),
    **{f"DW_PW_{k}": (lambda k=k: _model_dw_pw(k)) for k in ("prelu_residual", "5x5_s2", "split", "pad_mul")},
    **{f"SQUEEZE_EXCITE_{k}": (lambda k=k: _model_se(k)) for k in ("conv_batch2", "fc", "wide", "big")},
    "TRANSPOSE_CONV_same": lambda: _model_transpose_conv(0),
    "TRANSPOSE_CONV_valid": lambda: _model_transpose_conv(1),
    **{f"{op}_{a}_{h}": (lambda op=op, a=a, h=h: _model_resize(op, a, h))
       for op in ("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR") for a, h in ((False, False), (True, False),
                                                                            (False, True))},
    "RESIZE_BILINEAR_down": lambda: _model_resize("RESIZE_BILINEAR", False, True, (3, 2)),
    **{op: (lambda op=op: _model_misc(op)) for op in ["DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "MIRROR_PAD",
                                                      "MIRROR_PAD_SYM", "AVERAGE_POOL_2D", "MAX_POOL_2D",
                                                      "TRANSPOSE", "STRIDED_SLICE", "DEPTHWISE_CONV_2D", "GELU",
                                                      "GELU_APPROX"]},
}




def _model_shapes(op):
    """Data-movement and reduction ops on non-trivial shapes (ranks 2-4, channels not multiples of 4)."""
    b = model_builder()
    x = b.input("x", (2, 3, 5, 6))
    inputs = [rnd(2, 3, 5, 6)]
    if op == "CONCATENATION_C":
        z = b.input("z", (2, 3, 5, 3))
        inputs.append(rnd(2, 3, 5, 3))
        y = b.tensor("y", (2, 3, 5, 9))
        b.op("CONCATENATION", [x, z], [y], axis=3)
        outs = [y]
    elif op == "CONCATENATION_H":
        y = b.tensor("y", (2, 6, 5, 6))
        b.op("CONCATENATION", [x, b.const("k", rnd(2, 3, 5, 6))], [y], axis=1)
        outs = [y]
    elif op == "SPLIT":
        outs = [b.tensor(f"y{i}", (2, 3, 5, 2)) for i in range(3)]
        b.op("SPLIT", [b.const("ax", np.array([3], np.int32)), x], outs, num_splits=3)
    elif op == "SPLIT_V":
        outs = [b.tensor("y0", (2, 1, 5, 6)), b.tensor("y1", (2, 2, 5, 6))]
        b.op("SPLIT_V", [x, b.const("sz", np.array([1, 2], np.int32)), b.const("ax", np.array([1], np.int32))],
             outs, num_splits=2)
    elif op == "SOFTMAX":
        y = b.tensor("y", (2, 3, 5, 6))
        b.op("SOFTMAX", [x], [y], beta=0.5)
        outs = [y]
    elif op in ("SUM", "REDUCE_MAX", "REDUCE_MIN", "MEAN"):
        y = b.tensor("y", (2, 3, 5))
        b.op(op, [x, b.const("ax", np.array([3], np.int32))], [y], keep_dims=False)
        outs = [y]
    elif op == "RESHAPE":
        y = b.tensor("y", (6, 30))
        b.op("RESHAPE", [x, b.const("s", np.array([6, 30], np.int32))], [y], new_shape=(6, 30))
        outs = [y]
    elif op == "SLICE":
        y = b.tensor("y", (1, 2, 3, 5))
        b.op("SLICE", [x, b.const("b", np.array([1, 1, 2, 1], np.int32)), b.const("s", np.array([1, -1, 3, 5], np.int32))],
             [y])
        outs = [y]
    elif op in ("PAD", "PADV2"):
        y = b.tensor("y", (2, 4, 8, 9))
        pads = b.const("p", np.array([[0, 0], [1, 0], [2, 1], [1, 2]], np.int32))
        if op == "PAD":
            b.op(op, [x, pads], [y])
        else:
            b.op(op, [x, pads, b.const("v", np.array([-1.5], np.float32))], [y])
        outs = [y]
    elif op == "BATCH_MATMUL":
        z = b.input("z", (2, 3, 6, 7))
        inputs.append(rnd(2, 3, 6, 7))
        y = b.tensor("y", (2, 3, 5, 7))
        b.op(op, [x, z], [y])
        outs = [y]
    elif op == "FULLY_CONNECTED_rank3":
        y = b.tensor("y", (2, 3, 5, 4))
        b.op("FULLY_CONNECTED", [x, b.const("w", rnd(4, 6)), b.const("bias", rnd(4))], [y], keep_num_dims=True)
        outs = [y]
    elif op == "LOGICAL_AND":
        b = model_builder()
        p, q = b.input("p", (1, 2, 3, 5), "bool"), b.input("q", (1, 2, 3, 5), "bool")
        y = b.tensor("y", (1, 2, 3, 5), "bool")
        b.op(op, [p, q], [y])
        b.output(y)
        rng = np.random.default_rng(3)
        return b.build(), [rng.random((1, 2, 3, 5)) < 0.5, rng.random((1, 2, 3, 5)) < 0.5]
    for o in outs:
        b.output(o)
    return b.build(), inputs


_OP_CASES.update({op: (lambda op=op: _model_shapes(op)) for op in (
    "CONCATENATION_C", "CONCATENATION_H", "SPLIT", "SPLIT_V", "SOFTMAX", "SUM", "REDUCE_MAX", "REDUCE_MIN",
    "MEAN", "RESHAPE", "SLICE", "PAD", "PADV2", "BATCH_MATMUL", "FULLY_CONNECTED_rank3", "LOGICAL_AND")})
