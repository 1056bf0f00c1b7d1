"""A numpy executor of a compiled :class:`GpuPlan`, for tests.

It runs each :class:`GpuOp` from nothing but what a runtime gets -- kernel
name, template options, runtime params, bindings and the re-laid-out
constants -- following the index formulas the templates document
(``shaders/*.lgk`` comments, ``docs/gpu-kernels.md``).  Activations live in
PHWC4 arrays; intermediates are views into one byte arena at the planned
offsets, so a memory plan that lets two live tensors overlap corrupts the
result and the comparison with LiteRT fails.  Storage follows the plan's
storage (``PlanTensor.storage``: fp16 plans store float16, tensors kept in float32 by the
mixed-precision pass float32).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from litegpu.gpu import _layout as L
from litegpu.gpu._graph import GpuOp, GpuPlan
from litegpu.gpu._passes.twins import branch_launches
from litegpu.gpu._reference import max_pool_windows
from litegpu.gpu.ops import OPS


def _unpack_conv(w: np.ndarray, o: int, i: int) -> np.ndarray:
    """[S_o, KH, KW, I4, 4] -> OHWI [o, KH, KW, i]."""
    so, kh, kw, i4, _ = w.shape
    return w.transpose(0, 4, 1, 2, 3).reshape(so * 4, kh, kw, i4)[:o, :, :, :i].astype(np.float32)


def _act(x: np.ndarray, name: str | None, alpha: np.ndarray | None = None) -> np.ndarray:
    if not name or name == "NONE":
        return x
    if name == "PRELU":
        return OPS["PRELU"].ref(x, alpha)
    if name == "GELU_TANH":
        return OPS["GELU"].ref(x, {"approximate": True})
    return OPS[name].ref(x, {})


def _taps(x: np.ndarray, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, pt: int, pl: int, oh: int, ow: int):
    """Yield (ky, kx, patch (B, oh, ow, C)) reading zeros outside ``x``."""
    b, h, w, c = x.shape
    need_h = (oh - 1) * sh + (kh - 1) * dh + 1
    need_w = (ow - 1) * sw + (kw - 1) * dw + 1
    xp = np.zeros((b, max(need_h, pt + h), max(need_w, pl + w), c), np.float32)
    xp[:, pt:pt + h, pl:pl + w] = x
    for ky in range(kh):
        for kx in range(kw):
            yield ky, kx, xp[:, ky * dh: ky * dh + (oh - 1) * sh + 1: sh, kx * dw: kx * dw + (ow - 1) * sw + 1: sw]



def _bilinear(x: np.ndarray, h: int, w: int, scale_h: float, scale_w: float, half: bool) -> np.ndarray:
    """The resize kernel's bilinear sampling of ``x`` (BHWC) to ``h x w`` (also the conv kernels'
    ``residual_resize`` read): source coordinates from the float32 scales, neighbours clamped."""
    def coords(n: int, scale: float) -> np.ndarray:
        v = np.arange(n, dtype=np.float32)
        return (v + 0.5) * np.float32(scale) - 0.5 if half else v * np.float32(scale)

    fy, fx = coords(h, scale_h), coords(w, scale_w)
    y0 = np.maximum(np.floor(fy), 0).astype(np.int64)
    y1 = np.minimum(np.ceil(fy), x.shape[1] - 1).astype(np.int64)
    x0 = np.maximum(np.floor(fx), 0).astype(np.int64)
    x1 = np.minimum(np.ceil(fx), x.shape[2] - 1).astype(np.int64)
    ly, lx = (fy - y0)[None, :, None, None], (fx - x0)[None, None, :, None]
    top = x[:, y0][:, :, x0] * (1 - lx) + x[:, y0][:, :, x1] * lx
    bot = x[:, y1][:, :, x0] * (1 - lx) + x[:, y1][:, :, x1] * lx
    return top * (1 - ly) + bot * ly

class PlanExecutor:
    def __init__(self, plan: GpuPlan):
        self.plan = plan
        self.arena = np.zeros(max(plan.arena_bytes, 1), np.uint8)
        self.own: dict[int, np.ndarray] = {}

    # -- buffers
    def buf(self, t: int) -> np.ndarray:
        pt = self.plan.tensors[t]
        shape = L.phwc4_shape(pt.shape)
        storage = np.dtype(pt.storage)
        if pt.offset is None:
            if t not in self.own:
                self.own[t] = np.zeros(shape, storage)
            return self.own[t]
        n = int(np.prod(shape)) * storage.itemsize
        assert n == pt.nbytes, (pt.name, n, pt.nbytes)
        return self.arena[pt.offset: pt.offset + n].view(storage).reshape(shape)

    def read(self, op: GpuOp, name: str) -> np.ndarray | None:
        """The binding ``name`` as a float32 BHWC array (or the raw constant array)."""
        src = dict(op.bindings).get(name)
        if src is None:
            return None
        if isinstance(src, str):
            return np.asarray(op.constants[src], np.float32)
        pt = self.plan.tensors[src]
        return L.phwc4_to_bhwc(self.buf(src).astype(np.float32), pt.shape[3])

    def const_bhwc(self, op: GpuOp, name: str, shape4) -> np.ndarray:
        a = np.asarray(op.constants[name], np.float32)
        return L.phwc4_to_bhwc(a.reshape(L.phwc4_shape(shape4)), shape4[3])

    def operand(self, op: GpuOp, name: str, shape4) -> np.ndarray | None:
        src = dict(op.bindings).get(name)
        if src is None:
            return None
        return self.const_bhwc(op, name, shape4) if isinstance(src, str) else self.read(op, name)

    def write(self, op: GpuOp, name: str, value: np.ndarray) -> None:
        t = dict(op.bindings)[name]
        pt = self.plan.tensors[t]
        value = np.asarray(value, np.float32).reshape(pt.shape)
        if op.options.get("qdq"):  # the float view of quantized models: snap to the tensor's grid
            from litegpu.gpu._reference_ops import qdq

            value = qdq(value, op.params["Q_SCALE"], op.params["Q_ZP"], op.params["Q_MIN"], op.params["Q_MAX"])
        if op.options.get("dst_bhwc") and (op.precision or self.plan.precision) != "fp32":
            value = value.astype(np.float16).astype(np.float32)  # the kernel's half value, stored as float32
        buf = self.buf(t)
        buf[...] = L.bhwc_to_phwc4(value).astype(buf.dtype)

    # -- run
    def run(self, inputs: Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
        for t, x in inputs.items():
            pt = self.plan.tensors[t]
            x = np.asarray(x) if pt.quant is not None else np.asarray(x, np.float32)
            self.buf(t)[...] = L.to_device(x, pt.shape, pt.storage, pt.quant)
        for merged in self.plan.ops:
            for op in branch_launches(merged, self.plan.groups):  # a branched launch: each branch's launch
                getattr(self, "k_" + op.kernel)(op, op.params, op.options)
        out = {}
        for t in self.plan.outputs:
            pt = self.plan.tensors[t]
            out[t] = L.from_device(self.buf(t), pt.shape, pt.ir_shape, pt.dtype if pt.quant else "float32", pt.quant)
        return out

    # -- kernels (semantics from the template comments)
    def _conv_epilogue(self, op, r, p, o, res_value=None):
        alpha = None
        if op.options.get("act") == "PRELU":
            alpha = np.asarray(op.constants["alpha"], np.float32).reshape(-1)[:o]
        r = _act(r, op.options.get("act"), alpha)
        if op.options.get("store_pre"):  # the value before the residual, stored too (dst_pre)
            self.write(op, "dst_pre", r)
        if op.options.get("residual"):
            if op.options.get("residual_pool"):  # a RES_K x RES_K / stride RES_K max pool of the res tensor
                res = self.read(op, "res")
                assert res.shape[1:3] == (p["RES_H"], p["RES_W"]) and L.slices(res.shape[3]) == p["RES_S"], p
                res = max_pool_windows(res, p["RES_K"])
                assert res.shape[:3] == r.shape[:3], (res.shape, r.shape)
                res = np.pad(res, ((0, 0),) * 3 + ((0, o - res.shape[3]),))
            elif op.options.get("residual_resize"):  # res (RES_H x RES_W) resized bilinearly to the output's H x W
                res = self.read(op, "res")
                assert res.shape[1:3] == (p["RES_H"], p["RES_W"]), (res.shape, p)
                res = _bilinear(res, r.shape[1], r.shape[2], p["RES_SCALE_H"], p["RES_SCALE_W"], bool(p["RES_HALF"]))
            elif op.options.get("residual_channels") == "fewer":  # fewer channels (RES_S slices), zero past them
                res = self.read(op, "res")
                assert L.slices(res.shape[3]) == p["RES_S"] and res.shape[:3] == r.shape[:3], (res.shape, p)
                res = np.pad(res, ((0, 0),) * 3 + ((0, o - res.shape[3]),))
            elif res_value is not None:  # a value the kernel has itself (pw_dw_conv2d's residual_expanded)
                res = res_value
            else:
                res = self.operand(op, "res", r.shape)
            r = OPS[op.options["residual"]].ref(r, res)
            ra = None
            if op.options.get("residual_act") == "PRELU":
                ra = np.asarray(op.constants["res_alpha"], np.float32).reshape(-1)[:o]
            r = _act(r, op.options.get("residual_act"), ra)
        return r

    def k_conv2d(self, op, p, o):
        x = self.read(op, "src")
        if o.get("in_scale"):  # a folded squeeze-excite MUL: the product in the storage type, as a MUL stores it
            real = np.float32 if (op.precision or self.plan.precision) == "fp32" else np.float16
            x = (x * self.read(op, "in_scale")).astype(real).astype(np.float32)
        if o.get("in_add"):  # the folded MUL's residual ADD: the sum in the storage type, as the binary stores it
            real = np.float32 if (op.precision or self.plan.precision) == "fp32" else np.float16
            x = (x + self.read(op, "in_add")).astype(real).astype(np.float32)
        if o.get("in_resize"):  # src (IN_H x IN_W) read through a bilinear resize to SRC_H x SRC_W
            assert x.shape[1:3] == (p["IN_H"], p["IN_W"]), (x.shape, p)
            real = np.float32 if (op.precision or self.plan.precision) == "fp32" else np.float16
            x = _bilinear(x, p["SRC_H"], p["SRC_W"], p["IN_SCALE_H"], p["IN_SCALE_W"], bool(p["IN_HALF"]))
            x = x.astype(real).astype(np.float32)  # the blend is rounded to the storage type, as the resize stored it
        cin, cout = x.shape[3], p["C"]
        groups = p["SRC_S"] // p["SRC_SG"] if o.get("grouped") else 1
        w = _unpack_conv(np.asarray(op.constants["weights"], np.float32), cout,
                         p["SRC_SG"] * 4 if groups > 1 else cin)
        bias = np.asarray(op.constants["bias"], np.float32).reshape(-1)[:cout]
        out = np.zeros((p["B"], p["H"], p["W"], cout), np.float32)
        og = cout // groups
        ig = w.shape[3]
        for ky, kx, patch in _taps(x, p["KH"], p["KW"], p["STRIDE_H"], p["STRIDE_W"], p["DIL_H"], p["DIL_W"],
                                   p["PAD_T"], p["PAD_L"], p["H"], p["W"]):
            for gi in range(groups):
                out[..., gi * og:(gi + 1) * og] += patch[..., gi * ig:(gi + 1) * ig] @ w[gi * og:(gi + 1) * og, ky,
                                                                                          kx, :].T
        self.write(op, "dst", self._conv_epilogue(op, out + bias, p, cout))

    def k_conv2d_tiled(self, op, p, o):
        """The same convolution as conv2d's (ungrouped; only the work split differs)."""
        self.k_conv2d(op, p, {**o, "grouped": False})

    def k_se_gate(self, op, p, o):
        """Mean over H, W; then each 1x1 layer (conv2d's weight layout) with its activation."""
        x = self.read(op, "src")
        v = x.mean(axis=(1, 2), keepdims=True)
        layers = [("w1", "b1", o.get("act1"))] + ([("w2", "b2", o.get("act2"))] if o.get("layers", 2) == 2 else [])
        for i, (wn, bn, act) in enumerate(layers):
            n = p["C"] if i == len(layers) - 1 else p["HID_S"] * 4  # hidden lanes past its channels: zero weights
            w = _unpack_conv(np.asarray(op.constants[wn], np.float32), n, v.shape[3])[:, 0, 0, :]
            v = _act(v @ w.T + np.asarray(op.constants[bn], np.float32).reshape(-1)[:n], act)
        self.write(op, "dst", v)

    def k_depthwise_conv2d(self, op, p, o):
        x = self.read(op, "src")
        c = p["C"]
        w = np.asarray(op.constants["weights"], np.float32)  # [S, KH, KW, 4]
        w = w.transpose(1, 2, 0, 3).reshape(p["KH"], p["KW"], -1)[..., :c]
        src_c = np.arange(c) // p["MULT"]
        out = np.zeros((p["B"], p["H"], p["W"], c), np.float32)
        for ky, kx, patch in _taps(x, p["KH"], p["KW"], p["STRIDE_H"], p["STRIDE_W"], p["DIL_H"], p["DIL_W"],
                                   p["PAD_T"], p["PAD_L"], p["H"], p["W"]):
            out += patch[..., src_c] * w[ky, kx]
        bias = np.asarray(op.constants["bias"], np.float32).reshape(-1)[:c]
        self.write(op, "dst", self._conv_epilogue(op, out + bias, p, c))

    @staticmethod
    def _fused_depthwise(op, x, p, cm):
        """The depthwise of a fused kernel (dw_pw_conv2d, pw_dw_conv2d): ``dw_weights`` [S, KH, KW, 4] and
        ``dw_bias`` over the first ``cm`` channels of ``x``, before its activation."""
        dw = np.asarray(op.constants["dw_weights"], np.float32)
        dw = dw.transpose(1, 2, 0, 3).reshape(p["KH"], p["KW"], -1)[..., :cm]
        mid = np.zeros((p["B"], p["H"], p["W"], cm), np.float32)
        for ky, kx, patch in _taps(x, p["KH"], p["KW"], p["STRIDE_H"], p["STRIDE_W"], p["DIL_H"], p["DIL_W"],
                                   p["PAD_T"], p["PAD_L"], p["H"], p["W"]):
            mid += patch * dw[ky, kx]
        return mid + np.asarray(op.constants["dw_bias"], np.float32).reshape(-1)[:cm]

    def k_dw_pw_conv2d(self, op, p, o):
        x = self.read(op, "src")
        if o.get("in_resize"):  # src (IN_H x IN_W) read through a bilinear resize to SRC_H x SRC_W, as conv2d's
            assert x.shape[1:3] == (p["IN_H"], p["IN_W"]), (x.shape, p)
            real = np.float32 if (op.precision or self.plan.precision) == "fp32" else np.float16
            x = _bilinear(x, p["SRC_H"], p["SRC_W"], p["IN_SCALE_H"], p["IN_SCALE_W"], bool(p["IN_HALF"]))
            x = x.astype(real).astype(np.float32)
        cm, cout = x.shape[3], p["C"]
        mid = self._fused_depthwise(op, x, p, cm)
        dw_alpha = np.asarray(op.constants["dw_alpha"], np.float32).reshape(-1)[:cm] if "dw_alpha" in op.constants \
            else None
        # the kernel rounds the depthwise value to the storage type, as the unfused depthwise stores it
        real = np.float32 if (op.precision or self.plan.precision) == "fp32" else np.float16
        mid = _act(mid, o.get("dw_act"), dw_alpha).astype(real).astype(np.float32)
        w = np.asarray(op.constants["weights"], np.float32)
        if o.get("coalesced"):  # input-major [I4, S_o, 4] -> conv2d's [S_o, 1, 1, I4, 4]
            w = w.reshape(-1, p["S"], 4).transpose(1, 0, 2)[:, None, None]
        w = _unpack_conv(w, cout, cm)[:, 0, 0, :]
        bias = np.asarray(op.constants["bias"], np.float32).reshape(-1)[:cout]
        self.write(op, "dst", self._conv_epilogue(op, mid @ w.T + bias, p, cout))

    def k_dw_pw_small(self, op, p, o):
        """The same fused depthwise -> 1x1 (only the work split differs); with ``expand`` the next 1x1 conv of the
        stored result (``ex_weights``, conv2d's layout, ``ex_bias``, ``ex_act``) written to ``ex_dst`` too."""
        self.k_dw_pw_conv2d(op, p, o)
        if not o.get("expand"):
            return
        y = self.read(op, "dst")
        n = p["EX_C"]
        w = _unpack_conv(np.asarray(op.constants["ex_weights"], np.float32), n, y.shape[3])[:, 0, 0, :]
        alpha = np.asarray(op.constants["ex_alpha"], np.float32).reshape(-1)[:n] if "ex_alpha" in op.constants \
            else None
        bias = np.asarray(op.constants["ex_bias"], np.float32).reshape(-1)[:n]
        self.write(op, "ex_dst", _act(y @ w.T + bias, o.get("ex_act"), alpha))

    def k_pw_dw_conv2d(self, op, p, o):
        """1x1 expand (+ ex_act) -> depthwise (the expanded lanes past the channels: zero weights and bias) ->
        depthwise bias and act (no projection) or dw_act, then the 1x1 projection and conv2d's epilogue."""
        x = self.read(op, "src")
        cm, cout = p["MID_S"] * 4, p["C"]
        real = np.float32 if (op.precision or self.plan.precision) == "fp32" else np.float16

        def vec(name: str, n: int) -> np.ndarray | None:
            return np.asarray(op.constants[name], np.float32).reshape(-1)[:n] if name in op.constants else None

        # a stem launch (a KxK strided expansion read from the host layout) is not modelled here: refuse it rather
        # than give the 1x1 answer
        assert p.get("EX_K", 1) == 1, f"{op.kernel}: the test executor models 1x1 expansions only"
        w = _unpack_conv(np.asarray(op.constants["ex_weights"], np.float32), cm, x.shape[3])[:, 0, 0, :]
        e = _act(x @ w.T + vec("ex_bias", cm), o.get("ex_act"), vec("ex_alpha", cm)).astype(real).astype(np.float32)
        if o.get("mean"):  # H x W is the depthwise's map; dst its B x 1 x 1 x C mean (after the act)
            mid = self._fused_depthwise(op, e, p, cm)
            mid = _act(mid, o.get("act"), None).astype(real).astype(np.float32)[..., :cout]
            self.write(op, "dst", mid.astype(np.float64).mean(axis=(1, 2), keepdims=True).astype(np.float32))
            return
        mid = self._fused_depthwise(op, e, p, cm)
        if not o.get("project"):
            self.write(op, "dst", self._conv_epilogue(op, mid[..., :cout], p, cout))
            return
        mid = _act(mid, o.get("dw_act"), vec("dw_alpha", cm)).astype(real).astype(np.float32)
        w = _unpack_conv(np.asarray(op.constants["weights"], np.float32), cout, cm)[:, 0, 0, :]
        res = e[..., :cout] if o.get("residual_expanded") else None
        self.write(op, "dst", self._conv_epilogue(op, mid @ w.T + vec("bias", cout), p, cout, res))

    def k_transpose_conv2d(self, op, p, o):
        x = self.read(op, "src")
        c = p["C"]
        w = _unpack_conv(np.asarray(op.constants["weights"], np.float32), c, x.shape[3])
        b, h, wd, _ = x.shape
        sh, sw, kh, kw = p["STRIDE_H"], p["STRIDE_W"], p["KH"], p["KW"]
        full = np.zeros((b, (h - 1) * sh + kh + p["PAD_T"] + p["H"], (wd - 1) * sw + kw + p["PAD_L"] + p["W"], c),
                        np.float32)
        for ky in range(kh):
            for kx in range(kw):
                full[:, ky: ky + sh * (h - 1) + 1: sh, kx: kx + sw * (wd - 1) + 1: sw] += x @ w[:, ky, kx, :].T
        out = full[:, p["PAD_T"]: p["PAD_T"] + p["H"], p["PAD_L"]: p["PAD_L"] + p["W"]]
        bias = np.asarray(op.constants["bias"], np.float32).reshape(-1)[:c]
        self.write(op, "dst", self._conv_epilogue(op, out + bias, p, c))

    def k_heads(self, op, p, o):
        """Head d: rows of its source ([B, SRC_S, T, P] -- pixel q * P + p -- or, with mean, the pixel mean) times
        its weights (conv2d's layout from vec4 WB<d>, S_d x TW x SRC_S * 4 x 4), its bias, its activation; into
        dst<d>, or (rows) into the dense rows of dst<dsts[d]> from element OFF<d> of each batch item on."""
        n = o["n"]
        b = p["B"]
        weights = np.asarray(op.constants["weights"], np.float32).reshape(-1, 4)
        bias = np.asarray(op.constants["bias"], np.float32).reshape(-1)
        alpha = np.asarray(op.constants["alpha"], np.float32).reshape(-1) if "alpha" in op.constants else None
        rows: dict[int, np.ndarray] = {}
        e0 = 0
        for d in range(n):
            j = o["srcs"][d]
            x = self.read(op, f"src{j}")
            if o.get("mean"):
                x = x.mean(axis=(1, 2), keepdims=True)
            taps = 1 if o.get("mean") else p[f"T{j}"]
            pix, s_in = p[f"P{j}"], p[f"SRC_S{j}"]
            x = np.pad(x.reshape(b, taps, pix, -1), ((0, 0), (0, 0), (0, 0), (0, s_in * 4 - x.shape[3])))
            x = x.transpose(0, 2, 1, 3).reshape(b * pix, taps * s_in * 4)
            s_d, c = p[f"E{d}"] - e0, p[f"C{d}"]
            w = weights[p[f"WB{d}"]: p[f"WB{d}"] + s_d * taps * s_in * 4].reshape(s_d, taps, s_in * 4, 4)
            w = w.transpose(0, 3, 1, 2).reshape(s_d * 4, taps * s_in * 4)[:c]
            a = alpha[e0 * 4: e0 * 4 + c] if o["acts"][d] == "PRELU" else None
            y = _act(x @ w.T + bias[e0 * 4: e0 * 4 + c], o["acts"][d], a)
            e0 = p[f"E{d}"]
            if not o.get("rows"):
                self.write(op, f"dst{d}", y)
                continue
            k = o["dsts"][d]
            full = rows.setdefault(k, np.zeros((b, p[f"TOT{k}"]), np.float32))
            full[:, p[f"OFF{d}"]: p[f"OFF{d}"] + pix * c] = y.reshape(b, pix * c)
        for k, full in rows.items():
            self.write(op, f"dst{k}", full)

    def k_batch_matmul(self, op, p, o):
        m, k, n = p["M"], p["K"], p["N"]
        lhs = self.operand(op, "lhs", (p["L_B"], p["L_H"], k, m) if o.get("adj_x") else (p["L_B"], p["L_H"], m, k))
        rhs = self.operand(op, "rhs", (p["R_B"], p["R_H"], n, k) if o.get("adj_y") else (p["R_B"], p["R_H"], k, n))
        if o.get("adj_x"):
            lhs = np.swapaxes(lhs, -1, -2)
        if o.get("adj_y"):
            rhs = np.swapaxes(rhs, -1, -2)
        self.write(op, "dst", np.matmul(lhs, rhs))

    def k_binary(self, op, p, o):
        lhs = self.operand(op, "lhs", (p["L_B"], p["L_H"], p["L_W"], p["L_C"]))
        if o.get("rhs") == "scalar":
            rhs = np.float32(p["R_VALUE"])
        else:
            rhs = self.operand(op, "rhs", (p["R_B"], p["R_H"], p["R_W"], p["R_C"]))
            if o.get("rhs_channels") == "fewer":  # zero past its channels, no broadcast
                rhs = np.pad(rhs, ((0, 0),) * 3 + ((0, p["C"] - p["R_C"]),))
        v = _act(OPS[o["op"]].ref(lhs, rhs).astype(np.float32), o.get("act"))
        if o.get("residual"):  # a tensor of the output's shape
            res = self.read(op, "res")
            f = OPS[o["residual"]].ref
            v = f(res, v) if o.get("residual_reverse") else f(v, res)
            v = v.astype(np.float32)
        for f in o.get("chain", ()):
            v = _act(v, f)
        self.write(op, "dst", np.broadcast_to(v, (p["B"], p["H"], p["W"], p["C"])))

    def k_unary(self, op, p, o):
        x = self.read(op, "src")
        v = x if o["op"] == "NONE" else (OPS["LEAKY_RELU"].ref(x, {"alpha": p["alpha"]}) if o["op"] == "LEAKY_RELU"
                                         else _act(x, o["op"]))
        for f in o.get("chain", ()):
            v = _act(v, f)
        self.write(op, "dst", v)

    def k_pool2d(self, op, p, o):
        x = self.read(op, "src")
        b, h, w, c = x.shape
        kh, kw = p["KH"], p["KW"]
        fill = -np.inf if o["op"] == "MAX" else 0.0
        big = np.full((b, h + kh + p["PAD_T"] + p["H"] * p["STRIDE_H"], w + kw + p["PAD_L"] + p["W"] * p["STRIDE_W"], c),
                      fill, np.float32)
        big[:, p["PAD_T"]:p["PAD_T"] + h, p["PAD_L"]:p["PAD_L"] + w] = x
        cnt = np.zeros(big.shape[:3] + (1,), np.float32)
        cnt[:, p["PAD_T"]:p["PAD_T"] + h, p["PAD_L"]:p["PAD_L"] + w] = 1
        acc = np.full((b, p["H"], p["W"], c), fill, np.float32)
        n = np.zeros((b, p["H"], p["W"], 1), np.float32)
        for ky in range(kh):
            for kx in range(kw):
                sl = (slice(None), slice(ky, ky + (p["H"] - 1) * p["STRIDE_H"] + 1, p["STRIDE_H"]),
                      slice(kx, kx + (p["W"] - 1) * p["STRIDE_W"] + 1, p["STRIDE_W"]))
                if o["op"] == "MAX":
                    acc = np.maximum(acc, big[sl])
                else:
                    acc += big[sl]
                    n += cnt[sl]
        if o["op"] == "AVG":
            acc = acc / np.maximum(n, 1)
        self.write(op, "dst", _act(acc, o.get("act")))

    def k_reduce(self, op, p, o):
        x = self.read(op, "src")
        axes = tuple(a for a, k in enumerate(("RB", "RH", "RW", "RC")) if p[k])
        f = {"SUM": np.sum, "MEAN": np.mean, "MAX": np.max, "MIN": np.min}[o["op"]]
        self.write(op, "dst", f(x, axis=axes, keepdims=True))

    def k_softmax(self, op, p, o):
        x = self.read(op, "src") * np.float32(p["beta"])
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        self.write(op, "dst", e / e.sum(axis=-1, keepdims=True))

    def k_concat(self, op, p, o):
        xs = []
        for i in range(o["n"]):
            shape = [p["B"], p["H"], p["W"], p["C"]]
            shape[o["axis"]] = p[f"E{i}"]
            if (o.get("reshaped", 0) >> i) & 1:  # a RESHAPE merged into the read: row-major over the source's BHWC
                x = self.read(op, f"in{i}")
                assert x.shape[1:] == (p[f"RH{i}"], p[f"RW{i}"], p[f"RC{i}"]), (x.shape, p)
                xs.append(x.reshape(shape))
                continue
            xs.append(self.operand(op, f"in{i}", tuple(shape)))
        self.write(op, "dst", np.concatenate(xs, axis=o["axis"]))

    def k_gather(self, op, p, o):
        x = self.read(op, "src").reshape(-1)
        n = p["B"] * p["H"] * p["W"] * p["C"]
        f = np.arange(n)
        d = [None, p["D1"], p["D2"], p["D3"], p["D4"], p["D5"]]
        sf = np.zeros(n, np.int64)
        for i in (5, 4, 3, 2):
            sf += (f % d[i]) * p[f"T{i}"]
            f = f // d[i]
        sf += (f % d[1]) * p["T1"] + (f // d[1]) * p["T0"]
        self.write(op, "dst", x[sf])

    def k_slice(self, op, p, o):
        x = self.read(op, "src")
        idx = [p[f"BEG_{a}"] + np.arange(p[a]) * p[f"STR_{a}"] for a in "BHWC"]
        self.write(op, "dst", x[np.ix_(*idx)])

    def k_pad(self, op, p, o):
        x = self.read(op, "src")
        src = [p["SRC_B"], p["SRC_H"], p["SRC_W"], p["SRC_C"]]
        idx = []
        for a, n_src in zip("BHWC", src, strict=False):
            i = np.arange(p[a]) - p[f"P_{a}"]
            if o["mode"] != "CONSTANT":
                sym = int(o["mode"] == "SYMMETRIC")
                i = np.where(i < 0, -i - sym, i)
                i = np.where(i >= n_src, 2 * n_src - 2 + sym - i, i)
            idx.append(i)
        inside = np.ones((p["B"], p["H"], p["W"], p["C"]), bool)
        for ax, (i, n_src) in enumerate(zip(idx, src, strict=False)):
            shape = [1, 1, 1, 1]
            shape[ax] = -1
            inside &= ((i >= 0) & (i < n_src)).reshape(shape)
        clipped = [np.clip(i, 0, n - 1) for i, n in zip(idx, src, strict=False)]
        y = np.where(inside, x[np.ix_(*clipped)], np.float32(p["value"]))
        self.write(op, "dst", y)

    def k_depth_to_space(self, op, p, o):
        x = self.read(op, "src")
        bs, c = p["BS"], p["C"]
        y, xx = np.arange(p["H"]), np.arange(p["W"])
        ch = ((y[:, None, None] % bs) * bs + xx[None, :, None] % bs) * c + np.arange(c)[None, None, :]
        self.write(op, "dst", x[:, (y // bs)[:, None, None], (xx // bs)[None, :, None], ch])

    def k_space_to_depth(self, op, p, o):
        x = self.read(op, "src")
        bs, sc = p["BS"], p["SRC_C"]
        c = np.arange(p["C"])
        dy, dx, ci = c // sc // bs, (c // sc) % bs, c % sc
        y, xx = np.arange(p["H"]), np.arange(p["W"])
        self.write(op, "dst", x[:, y[:, None, None] * bs + dy, xx[None, :, None] * bs + dx, ci])

    def k_resize(self, op, p, o):
        x = self.read(op, "src")
        half = bool(p["HALF_PIXEL"])
        if o["mode"] == "NEAREST":
            def idx(n, scale, n_src):
                v = (np.arange(n, dtype=np.float32) + (0.5 if half else 0.0)) * np.float32(scale)
                v = np.floor(v + 0.5) if p["ALIGN"] else np.floor(v)
                return np.clip(v.astype(np.int64), 0, n_src - 1)

            self.write(op, "dst", x[:, idx(p["H"], p["SCALE_H"], p["SRC_H"])][:, :, idx(p["W"], p["SCALE_W"], p["SRC_W"])])
            return
        self.write(op, "dst", _bilinear(x, p["H"], p["W"], p["SCALE_H"], p["SCALE_W"], half))

    def k_lstm_cell(self, op, p, o):
        gates = self.read(op, "gates").reshape(p["B"], 4, p["C"])
        prev = self.read(op, "prev_c").reshape(p["B"], p["C"])
        sig = OPS["LOGISTIC"].ref
        c = sig(gates[:, 2], {}) * prev + sig(gates[:, 0], {}) * np.tanh(gates[:, 1])
        if p["CELL_CLIP"] > 0:
            c = np.clip(c, -p["CELL_CLIP"], p["CELL_CLIP"])
        self.write(op, "new_c", c)
        self.write(op, "new_h", sig(gates[:, 3], {}) * np.tanh(c))


def run_plan(plan: GpuPlan, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Execute ``plan`` with inputs in ``plan.inputs`` order; outputs in ``plan.outputs`` order."""
    out = PlanExecutor(plan).run(dict(zip(plan.inputs, inputs, strict=False)))
    return [out[t] for t in plan.outputs]
