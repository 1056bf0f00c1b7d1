import time, numpy as np, sys
sys.path.insert(0, "bench/scratch")
from _mini_tfl import single_op_model, S
from ai_edge_litert.interpreter import Interpreter, OpResolverType

def bench(f, n=20):
    f(); ts = []
    for _ in range(n):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return np.median(ts) * 1e3

rng = np.random.default_rng(0)
N, H, W, C, O, K = 1, 128, 128, 32, 32, 3
x = rng.standard_normal((N, H, W, C), dtype=np.float32)
w = rng.standard_normal((O, K, K, C), dtype=np.float32)
bias = rng.standard_normal(O, dtype=np.float32)
o = S.Conv2DOptionsT(); o.padding = S.Padding.SAME; o.strideW = o.strideH = 1; o.dilationWFactor = o.dilationHFactor = 1
model = single_op_model(S.BuiltinOperator.CONV_2D, S.BuiltinOptions.Conv2DOptions, o, [(x.shape, None), (w.shape, w), (bias.shape, bias)], (N, H, W, O))
it = Interpreter(model_content=model, num_threads=1)
it.allocate_tensors(); it.set_tensor(it.get_input_details()[0]["index"], x)
print("litert xnnpack 1t ms", bench(it.invoke))
ref = it.get_tensor(it.get_output_details()[0]["index"])

# option A: full im2col
xp = np.zeros((N, H + 2, W + 2, C), np.float32)
wm = np.ascontiguousarray(w.transpose(1, 2, 3, 0).reshape(K * K * C, O))
cols = np.empty((N * H * W, K * K * C), np.float32)
s = xp.strides
def A():
    xp[:, 1:-1, 1:-1] = x
    v = np.lib.stride_tricks.as_strided(xp, (N, H, W, K, K, C), (s[0], s[1], s[2], s[1], s[2], s[3]))
    np.copyto(cols.reshape(N, H, W, K, K, C), v)
    out = np.matmul(cols, wm)
    out += bias
    return out.reshape(N, H, W, O)
print("A im2col ms", bench(A), np.abs(A() - ref).max())
# option B: chunked
R = 16
colsb = np.empty((R * W, K * K * C), np.float32)
def B():
    xp[:, 1:-1, 1:-1] = x
    out = np.empty((N, H, W, O), np.float32)
    of = out.reshape(N, H * W, O)
    for n in range(N):
        for r in range(0, H, R):
            rr = min(R, H - r)
            v = np.lib.stride_tricks.as_strided(xp[n, r:], (rr, W, K, K, C), (s[1], s[2], s[1], s[2], s[3]))
            cb = colsb[: rr * W]
            np.copyto(cb.reshape(rr, W, K, K, C), v)
            np.matmul(cb, wm, out=of[n, r * W:(r + rr) * W])
    out += bias
    return out
print("B chunk ms", bench(B), np.abs(B() - ref).max())
# option C: tap accumulate with padded width
Wp = W + 2
xq = np.zeros((N, (H + 3) * Wp, C), np.float32)  # slack row
xq4 = xq.reshape(N, H + 3, Wp, C)
wt = [np.ascontiguousarray(w[:, i, j, :].T) for i in range(K) for j in range(K)]
tmp = np.empty((H * Wp, O), np.float32)
def Cf():
    xq4[:, 1:H + 1, 1:W + 1] = x
    acc = np.empty((N, H * Wp, O), np.float32)
    for n in range(N):
        for t, (i, j) in enumerate([(i, j) for i in range(K) for j in range(K)]):
            off = i * Wp + j
            if t == 0:
                np.matmul(xq[n, off:off + H * Wp], wt[t], out=acc[n])
            else:
                np.matmul(xq[n, off:off + H * Wp], wt[t], out=tmp); acc[n] += tmp
    out = acc.reshape(N, H, Wp, O)[:, :, :W]
    return out + bias
print("C taps ms", bench(Cf), np.abs(Cf() - ref).max())
