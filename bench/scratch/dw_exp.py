import time, numpy as np, sys
sys.path.insert(0, "bench/scratch")
from _mini_tfl import single_op_model, S
from ai_edge_litert.interpreter import Interpreter

def bench(f, n=20):
    f(); ts = []
    for _ in range(n):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return np.median(ts) * 1e3

rng = np.random.default_rng(0)
N, H, W, C, K = 1, 128, 128, 32, 3
x = rng.standard_normal((N, H, W, C), dtype=np.float32)
w = rng.standard_normal((1, K, K, C), dtype=np.float32)
bias = rng.standard_normal(C, dtype=np.float32)
o = S.DepthwiseConv2DOptionsT(); o.padding = S.Padding.SAME; o.strideW = o.strideH = 1; o.dilationWFactor = o.dilationHFactor = 1; o.depthMultiplier = 1
model = single_op_model(S.BuiltinOperator.DEPTHWISE_CONV_2D, S.BuiltinOptions.DepthwiseConv2DOptions, o, [(x.shape, None), (w.shape, w), (bias.shape, bias)], (N, H, W, C))
it = Interpreter(model_content=model, num_threads=1)
it.allocate_tensors(); it.set_tensor(it.get_input_details()[0]["index"], x)
print("litert xnnpack 1t ms", bench(it.invoke))
ref = it.get_tensor(it.get_output_details()[0]["index"])
xp = np.zeros((N, H + 2, W + 2, C), np.float32); s = xp.strides
taps = [(i, j) for i in range(K) for j in range(K)]
wk = w.reshape(K, K, C)
tmp = np.empty((N, H, W, C), np.float32)
def A():
    xp[:, 1:-1, 1:-1] = x
    out = np.empty((N, H, W, C), np.float32)
    for t, (i, j) in enumerate(taps):
        v = xp[:, i:i + H, j:j + W]
        if t == 0: np.multiply(v, wk[i, j], out=out)
        else: np.multiply(v, wk[i, j], out=tmp); out += tmp
    out += bias
    return out
print("A taps ms", bench(A), np.abs(A() - ref).max())
Wp = W + 2
xq = np.zeros((N, (H + 3) * Wp, C), np.float32); xq4 = xq.reshape(N, H + 3, Wp, C)
tmpf = np.empty((N, H * Wp, C), np.float32)
def B():
    xq4[:, 1:H + 1, 1:W + 1] = x
    acc = np.empty((N, H * Wp, C), np.float32)
    for t, (i, j) in enumerate(taps):
        off = i * Wp + j; v = xq[:, off:off + H * Wp]
        if t == 0: np.multiply(v, wk[i, j], out=acc)
        else: np.multiply(v, wk[i, j], out=tmpf); acc += tmpf
    out = acc.reshape(N, H, Wp, C)[:, :, :W]
    out = out + bias
    return out
print("B flat taps ms", bench(B), np.abs(B() - ref).max())
# chunked rows flat
R = 16
tmpc = np.empty((R * Wp, C), np.float32)
def Cc():
    xq4[:, 1:H + 1, 1:W + 1] = x
    acc = np.empty((N, H * Wp, C), np.float32)
    for n in range(N):
        for r in range(0, H, R):
            rr = min(R, H - r); a = acc[n, r * Wp:(r + rr) * Wp]; tm = tmpc[:rr * Wp]
            for t, (i, j) in enumerate(taps):
                off = (r + i) * Wp + j; v = xq[n, off:off + rr * Wp]
                if t == 0: np.multiply(v, wk[i, j], out=a)
                else: np.multiply(v, wk[i, j], out=tm); a += tm
    out = acc.reshape(N, H, Wp, C)[:, :, :W]
    return out + bias
print("C chunk flat ms", bench(Cc), np.abs(Cc() - ref).max())
def D():
    xp[:, 1:-1, 1:-1] = x
    v = np.lib.stride_tricks.as_strided(xp, (N, H, W, K, K, C), (s[0], s[1], s[2], s[1], s[2], s[3]))
    return np.einsum("nhwijc,ijc->nhwc", v, wk) + bias
print("D einsum ms", bench(D, 3), np.abs(D() - ref).max())
# E: matmul per channel batch: cols (C, HW, KK) @ (C, KK, 1)
cols = np.empty((C, N * H * W, K * K), np.float32)
wc = np.ascontiguousarray(wk.reshape(K * K, C).T)[:, :, None]
def E():
    xp[:, 1:-1, 1:-1] = x
    v = np.lib.stride_tricks.as_strided(xp, (N, H, W, K, K, C), (s[0], s[1], s[2], s[1], s[2], s[3]))
    np.copyto(cols.reshape(C, N, H, W, K, K), v.transpose(5, 0, 1, 2, 3, 4))
    return np.matmul(cols, wc)[..., 0].T.reshape(N, H, W, C) + bias
print("E batched matvec", bench(E, 5), np.abs(E() - ref).max())
wtile = [np.tile(wk[i, j], Wp) for (i, j) in taps]
tmpf2 = np.empty((N, H, Wp * C), np.float32)
def F():
    xq4[:, 1:H + 1, 1:W + 1] = x
    acc = np.empty((N, H, Wp * C), np.float32)
    for t, (i, j) in enumerate(taps):
        off = i * Wp + j; v = xq[:, off:off + H * Wp].reshape(N, H, Wp * C)
        if t == 0: np.multiply(v, wtile[t], out=acc)
        else: np.multiply(v, wtile[t], out=tmpf2); acc += tmpf2
    out = acc.reshape(N, H, Wp, C)[:, :, :W]
    return out + bias
print("F flat tiled ms", bench(F), np.abs(F() - ref).max())
R = 8
tmpc2 = np.empty((R, Wp * C), np.float32)
def G():
    xq4[:, 1:H + 1, 1:W + 1] = x
    acc = np.empty((N, H, Wp * C), np.float32)
    for n in range(N):
        for r in range(0, H, R):
            rr = min(R, H - r); a = acc[n, r:r + rr]; tm = tmpc2[:rr]
            for t, (i, j) in enumerate(taps):
                off = (r + i) * Wp + j; v = xq[n, off:off + rr * Wp].reshape(rr, Wp * C)
                if t == 0: np.multiply(v, wtile[t], out=a)
                else: np.multiply(v, wtile[t], out=tm); a += tm
    out = acc.reshape(N, H, Wp, C)[:, :, :W]
    return out + bias
print("G chunk tiled ms", bench(G), np.abs(G() - ref).max())
a1 = np.random.rand(H*Wp*C).astype(np.float32); a2 = np.random.rand(H*Wp*C).astype(np.float32)
print("one mul contiguous", bench(lambda: np.multiply(a1, a2, out=a1)))
print("one add contiguous", bench(lambda: np.add(a1, a2, out=a1)))
xs = xq.strides
wt4 = np.stack([np.tile(wk[i, j], Wp) for (i, j) in taps]).reshape(K, K, Wp * C)
for R in (4, 8, 16, 128):
    def Hh():
        xq4[:, 1:H + 1, 1:W + 1] = x
        acc = np.empty((N, H, Wp * C), np.float32)
        for n in range(N):
            for r in range(0, H, R):
                rr = min(R, H - r)
                base = xq[n, r * Wp:]
                v = np.lib.stride_tricks.as_strided(base, (K, K, rr, Wp * C), (Wp * xs[1], xs[1], Wp * xs[1], 4))
                np.einsum("ijrl,ijl->rl", v, wt4, out=acc[n, r:r + rr])
        out = acc.reshape(N, H, Wp, C)[:, :, :W]
        return out + bias
    print("H einsum R", R, bench(Hh), np.abs(Hh() - ref).max())
