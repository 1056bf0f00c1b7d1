"""Scratch speed check: litegpu numpy kernels vs LiteRT XNNPACK (1 thread). Not a test."""
import sys, time, numpy as np
sys.path.insert(0, "bench/scratch")
from _mini_tfl import single_op_model, S
from _hand import prep
from ai_edge_litert.interpreter import Interpreter

def bench(f, n=15):
    f(); ts = []
    for _ in range(n):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return float(np.median(ts) * 1e3)

rng = np.random.default_rng(0)
rows = []
def case(name, op, optT, optsT, opts, x, w, b):
    ins = [(x, False), (w, True), (b, True)]
    p, arrs = prep(op, opts, ins)
    got = p.run(arrs)[0]
    m = single_op_model(getattr(S.BuiltinOperator, op), optT, optsT, [(a.shape, None if i == 0 else a) for i, (a, _) in enumerate(ins)], got.shape)
    it = Interpreter(model_content=m, num_threads=1); it.allocate_tensors(); it.set_tensor(it.get_input_details()[0]["index"], x)
    t_ref = bench(it.invoke); ref = it.get_tensor(it.get_output_details()[0]["index"])
    t_us = bench(lambda: p.run(arrs))
    err = float(np.abs(got - ref).max() / np.abs(ref).max())
    rows.append((name, t_us, t_ref, t_us / t_ref, err))
    print(f"{name:40s} ours {t_us:7.3f} ms  xnnpack {t_ref:7.3f} ms  ratio {t_us/t_ref:5.2f}  err {err:.1e}", flush=True)

def conv(N, H, W, C, O, K, s, pad=0):
    x = rng.standard_normal((N, H, W, C), dtype=np.float32); w = rng.standard_normal((O, K, K, C), dtype=np.float32) * 0.1
    b = rng.standard_normal(O, dtype=np.float32)
    o = S.Conv2DOptionsT(); o.padding = pad; o.strideW = o.strideH = s; o.dilationWFactor = o.dilationHFactor = 1
    case(f"conv {N}x{H}x{W}x{C}->{O} k{K} s{s}", "CONV_2D", S.BuiltinOptions.Conv2DOptions, o, dict(padding=pad, stride_w=s, stride_h=s), x, w, b)

def dw(N, H, W, C, K, s, pad=0):
    x = rng.standard_normal((N, H, W, C), dtype=np.float32); w = rng.standard_normal((1, K, K, C), dtype=np.float32)
    b = rng.standard_normal(C, dtype=np.float32)
    o = S.DepthwiseConv2DOptionsT(); o.padding = pad; o.strideW = o.strideH = s; o.dilationWFactor = o.dilationHFactor = 1; o.depthMultiplier = 1
    case(f"dw {N}x{H}x{W}x{C} k{K} s{s}", "DEPTHWISE_CONV_2D", S.BuiltinOptions.DepthwiseConv2DOptions, o, dict(padding=pad, stride_w=s, stride_h=s, depth_multiplier=1), x, w, b)

which = sys.argv[1] if len(sys.argv) > 1 else "all"
if which in ("all", "conv"):
    conv(1, 128, 128, 32, 32, 3, 1)
    conv(1, 64, 64, 64, 128, 1, 1)
    conv(1, 32, 32, 128, 128, 1, 1)
    conv(1, 256, 256, 3, 16, 3, 2)
    conv(1, 192, 192, 3, 32, 5, 2)
    conv(1, 64, 64, 32, 64, 2, 2, 1)
if which in ("all", "dw"):
    dw(1, 128, 128, 32, 3, 1)
    dw(1, 64, 64, 64, 3, 1)
    dw(1, 48, 48, 128, 5, 1)
    dw(1, 128, 128, 32, 3, 2)
    dw(1, 96, 96, 64, 5, 2)
    dw(1, 16, 16, 256, 3, 1)
if which in ("all", "conv", "dw"):
    r = np.array([row[3] for row in rows]); print("geomean ratio", float(np.exp(np.log(r).mean())))

def pool(op, N, H, W, C, K, s, pad):
    x = rng.standard_normal((N, H, W, C), dtype=np.float32)
    o = S.Pool2DOptionsT(); o.padding = pad; o.strideW = o.strideH = s; o.filterWidth = o.filterHeight = K
    opts = dict(padding=pad, stride_w=s, stride_h=s, filter_width=K, filter_height=K)
    p, arrs = prep(op, opts, [(x, False)])
    got = p.run(arrs)[0]
    m = single_op_model(getattr(S.BuiltinOperator, op), S.BuiltinOptions.Pool2DOptions, o, [(x.shape, None)], got.shape)
    it = Interpreter(model_content=m, num_threads=1); it.allocate_tensors(); it.set_tensor(it.get_input_details()[0]["index"], x)
    t_ref = bench(it.invoke); ref = it.get_tensor(it.get_output_details()[0]["index"])
    t_us = bench(lambda: p.run(arrs))
    err = float(np.abs(got - ref).max() / np.abs(ref).max())
    rows.append((op, t_us, t_ref, t_us / t_ref, err))
    print(f"{op} {N}x{H}x{W}x{C} k{K} s{s} p{pad}".ljust(40) + f" ours {t_us:7.3f} ms  xnnpack {t_ref:7.3f} ms  ratio {t_us/t_ref:5.2f}  err {err:.1e}", flush=True)

def resize(N, H, W, C, oh, ow, half=True):
    import litegpu.cpu.resize  # noqa
    x = rng.standard_normal((N, H, W, C), dtype=np.float32)
    size = np.array([oh, ow], np.int32)
    o = S.ResizeBilinearOptionsT(); o.halfPixelCenters = half; o.alignCorners = False
    p, arrs = prep("RESIZE_BILINEAR", dict(half_pixel_centers=half), [(x, False), (size, True)])
    got = p.run(arrs)[0]
    m = single_op_model(S.BuiltinOperator.RESIZE_BILINEAR, S.BuiltinOptions.ResizeBilinearOptions, o, [(x.shape, None), (size.shape, size)], got.shape)
    it = Interpreter(model_content=m, num_threads=1); it.allocate_tensors(); it.set_tensor(it.get_input_details()[0]["index"], x)
    t_ref = bench(it.invoke); ref = it.get_tensor(it.get_output_details()[0]["index"])
    t_us = bench(lambda: p.run(arrs))
    err = float(np.abs(got - ref).max() / np.abs(ref).max())
    rows.append(("resize", t_us, t_ref, t_us / t_ref, err))
    print(f"resize {N}x{H}x{W}x{C} -> {oh}x{ow}".ljust(40) + f" ours {t_us:7.3f} ms  xnnpack {t_ref:7.3f} ms  ratio {t_us/t_ref:5.2f}  err {err:.1e}", flush=True)

if which == "poolresize":
    import litegpu.cpu.pooling  # noqa
    pool("MAX_POOL_2D", 1, 96, 96, 32, 2, 2, 0)
    pool("MAX_POOL_2D", 1, 96, 96, 16, 2, 2, 1)
    pool("MAX_POOL_2D", 1, 24, 24, 128, 2, 2, 0)
    pool("MAX_POOL_2D", 1, 128, 128, 8, 2, 2, 1)
    pool("AVERAGE_POOL_2D", 1, 64, 64, 16, 64, 64, 1)
    pool("AVERAGE_POOL_2D", 1, 16, 16, 96, 16, 16, 1)
    pool("AVERAGE_POOL_2D", 1, 32, 32, 24, 3, 1, 0)
    resize(1, 12, 12, 256, 24, 24)
    resize(1, 64, 64, 16, 128, 128)
    resize(1, 128, 128, 8, 256, 256)
    resize(1, 7, 7, 1152, 14, 14)
    resize(1, 32, 32, 48, 64, 64)
    resize(1, 30, 40, 16, 45, 50, False)
    r = np.array([row[3] for row in rows]); print("geomean ratio", float(np.exp(np.log(r).mean())))
