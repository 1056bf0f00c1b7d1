"""Full-integer recurrent ops, bit-exact with LiteRT: LSTM and UNIDIRECTIONAL_SEQUENCE_LSTM ("8x8_16"),
the uint8 basic LSTM cell, SVDF (int8 input and output, int16 state).

The converter's full-integer LSTM has int8 activations (input, output state, output), int8
weights, int16 peephole and layer-norm coefficients, int32 biases, a 16-bit cell state whose
scale is a power of two (2^cell_scale, cell_scale <= -9) and five *intermediate* tensors whose
quantization fixes the gates' scales: 0-3 the (layer-normalized) gate pre-activations, used only
with layer norm (otherwise Q3.12, scale 2^-12), and 4 the hidden state ``o * tanh(c)`` that feeds
the projection.  LiteRT tells this 8x8_16 form from the 8x8_8 one by the count of intermediates
(5 against 12); litegpu runs the 8x8_16 form, the one the converter makes.

Per time step, all in integers (``MBQM`` = multiply by a quantized multiplier, double rounding):

* gate = clamp16(MBQM(W_x x + bias_x, s_x) + clamp16(MBQM(W_h h + bias_h, s_h))) where each
  ``bias`` is the gate bias (without layer norm) folded with ``-zero_point * rowsum(W)``; plus
  the peephole term MBQM(w_c * c, s_c); then layer norm (integer mean / inverse sqrt) and the
  gemmlowp fixed-point sigmoid (Q3.12 in) or tanh (Q3.12 in), Q0.15 out;
* c' = clamp16(rdbpot(f * c, 15) + rdbpot(i * g, 30 + cell_scale)), with ``i = 32767 - f`` for
  CIFG, then the quantized cell clip;
* h = o * tanh(c') (Q(15+cell_scale) in) requantized to the hidden scale, then the projection
  (int8 matmul requantized to the output state's scale, quantized projection clip).

Two LiteRT particularities are reproduced on purpose: the projection input is offset by
``-hidden_zp`` and its bias folded with ``+hidden_zp`` (its sign convention), and the peephole
product runs over ``n_output`` (not ``n_cell``) elements of the flattened batch, which matters
only when a projection makes them differ.
"""

from __future__ import annotations

import numpy as np

from .._registry import NodeContext, Prepared, TensorSpec, register_kernel
from ..lstm import write_state
from ._common import plan_by_shape
from ._fixedpoint import (
    checked_log2,
    logistic_int16_table,
    mul_by_quantized_multiplier,
    qparams,
    quantize_multiplier,
    rdbpot,
    sat_rounding_mul_by_pot16,
    srdhm16,
    tanh_int16_table,
    wrap16,
    wrap32,
)
from .activations import _inv_sqrt_multiplier

__all__: list[str] = []

F32 = np.float32
_GATES = "ifco"


def _mult(real: float) -> tuple[int, int]:
    m, s = quantize_multiplier(float(real))
    return int(m), int(s)


def _clamp16(x: np.ndarray) -> np.ndarray:
    return np.clip(x, -32768, 32767)


def _act16(table: np.ndarray, x: np.ndarray) -> np.ndarray:
    return table[x + 32768].astype(np.int64)


class _IntegerLstm:
    """The prepared parameters of one 8x8_16 LSTM node (LiteRT's PopulateQuantizedLstmParams8x8_16
    and PopulatePrecomputedZPTimesWeightsWithBias)."""

    def __init__(self, ctx: NodeContext):
        ins = ctx.inputs
        if len(ins) < 20 or ins[0] is None or ins[18] is None or ins[19] is None:
            raise ctx.fail("expects 20 or 24 inputs with the input and both state tensors")
        if len(ctx.intermediates) != 5:
            raise ctx.fail(f"a full-integer LSTM needs 5 intermediate tensors (the 8x8_16 form the converter "
                           f"makes), got {len(ctx.intermediates)}; the 12-intermediate 8x8_8 form is not supported")
        x, h_state, c_state, out = ins[0], ins[18], ins[19], ctx.outputs[0]
        for t, want in ((x, "int8"), (h_state, "int8"), (c_state, "int16"), (out, "int8")):
            if t.dtype != want:
                raise ctx.fail(f"tensor {t.name!r} is {t.dtype}; the integer LSTM needs {want}")

        def scale(t: TensorSpec, what: str) -> F32:
            return F32(qparams(t, what)[0][0])

        def const(i: int, dtype: str) -> np.ndarray | None:
            t = ins[i] if i < len(ins) else None
            if t is None:
                return None
            if t.data is None:
                raise ctx.fail(f"input {i} ({t.name}) must be constant")
            if t.dtype != dtype:
                raise ctx.fail(f"input {i} ({t.name}) is {t.dtype}; the integer LSTM needs {dtype}")
            return np.asarray(t.data).astype(np.int64)

        self.cifg = ins[1] is None
        gates = "fco" if self.cifg else _GATES
        self.gates = gates
        w_x = {g: const(1 + k, "int8") for k, g in enumerate(_GATES)}
        w_h = {g: const(5 + k, "int8") for k, g in enumerate(_GATES)}
        peep = {"i": const(9, "int16"), "f": const(10, "int16"), "o": const(11, "int16")}
        bias = {g: const(12 + k, "int32") for k, g in enumerate(_GATES)}
        ln = {g: const(20 + k, "int16") for k, g in enumerate(_GATES)} if len(ins) >= 24 else dict.fromkeys(_GATES)
        proj_w, proj_b = const(16, "int8"), const(17, "int32")
        for g in gates:
            if w_x[g] is None or w_h[g] is None:
                raise ctx.fail(f"gate {g}: missing input or recurrent weights")
            if w_h[g].ndim != 2:
                raise ctx.fail("diagonal recurrent weights are not supported by the integer LSTM")
        self.use_ln = ln["f"] is not None
        self.use_peephole = peep["o"] is not None
        self.n_cell, self.n_input = w_x["o"].shape
        self.n_output = w_h["o"].shape[1]
        for g in gates:
            if w_x[g].shape != (self.n_cell, self.n_input) or w_h[g].shape != (self.n_cell, self.n_output):
                raise ctx.fail(f"gate {g}: weights {w_x[g].shape} / {w_h[g].shape} do not fit "
                               f"({self.n_cell} cells, {self.n_input} inputs, {self.n_output} outputs)")
            if not self.use_ln and bias[g] is None:
                raise ctx.fail(f"gate {g}: missing bias")
        if self.use_peephole and self.n_output > self.n_cell:
            raise ctx.fail("peephole weights with more outputs than cells (LiteRT reads past the weights)")
        if proj_w is None and self.n_output != self.n_cell:
            raise ctx.fail(f"without projection the output size {self.n_output} must equal the cell size")

        s_x, zp_x = scale(x, "input"), int(qparams(x)[1][0])
        s_h, zp_h = scale(h_state, "output state"), int(qparams(h_state)[1][0])
        cell_scale = checked_log2(float(qparams(c_state, "cell state")[0][0]))
        if cell_scale is None or cell_scale > -9:
            # LiteRT ignores the failed set-up here and runs with unset scales (or, above 2^-9, a
            # tanh that writes nothing): there is no defined answer to reproduce
            raise ctx.fail("the cell state's scale must be a power of two no larger than 2^-9 (LiteRT's "
                           "integer LSTM computes no meaningful output otherwise)")
        self.cell_scale = cell_scale
        inter = ctx.intermediates
        inter_scale = [scale(inter[k], f"intermediate {k}") if self.use_ln else F32(2.0 ** -12) for k in range(4)]
        hidden_scale = scale(inter[4], "intermediate 4 (hidden)")
        self.hidden_zp = int(qparams(inter[4])[1][0])
        self.out_zp = zp_h
        gate_slot = {"i": 0, "f": 1, "c": 2, "o": 3}

        def wscale(i: int) -> F32:
            return scale(ins[i], f"input {i}")

        self.mx, self.mh, self.mc, self.bx, self.bh, self.ln = {}, {}, {}, {}, {}, {}
        for k, g in enumerate(_GATES):
            if g not in gates:
                continue
            inter_g = inter_scale[gate_slot[g]]
            self.mx[g] = _mult(F32(wscale(1 + k) * s_x) / inter_g)
            self.mh[g] = _mult(F32(wscale(5 + k) * s_h) / inter_g)
            b = None if self.use_ln else bias[g]
            self.bx[g] = wrap32((0 if b is None else b) - zp_x * w_x[g].sum(axis=1))
            self.bh[g] = wrap32(-zp_h * w_h[g].sum(axis=1))
            if self.use_peephole and g != "c":
                pi = {"i": 9, "f": 10, "o": 11}[g]
                self.mc[g] = (peep[g], _mult(F32(2.0 ** cell_scale * float(wscale(pi)) / float(inter_g))))
            if self.use_ln:
                li = 20 + k
                ln_scale = wscale(li)
                if bias[g] is None:
                    raise ctx.fail(f"gate {g}: layer norm needs the gate bias")
                guard = max(1, int(F32(10000) * ln_scale))
                self.ln[g] = (ln[g], bias[g], _mult(ln_scale), guard)
        self.w_x = {g: np.ascontiguousarray(w_x[g].T) for g in gates}
        self.w_h = {g: np.ascontiguousarray(w_h[g].T) for g in gates}
        self.hidden_mult = _mult(F32(2.0 ** -15 / float(hidden_scale) * 2.0 ** -15))
        self.proj = None
        if proj_w is not None:
            pb = wrap32((0 if proj_b is None else proj_b) + self.hidden_zp * proj_w.sum(axis=1))
            self.proj = (np.ascontiguousarray(proj_w.T), pb, _mult(F32(wscale(16) * hidden_scale) / s_h))
        opt = ctx.options
        cell_clip, proj_clip = F32(opt.get("cell_clip", 0.0) or 0.0), F32(opt.get("proj_clip", 0.0) or 0.0)
        s_c = F32(qparams(c_state)[0][0])
        s_out = scale(out, "output")
        self.cell_clip = int(np.clip(cell_clip / s_c, -32768.0, 32767.0)) if cell_clip > 0 else 0
        self.proj_clip = int(np.clip(proj_clip / s_out, -128.0, 127.0)) if proj_clip > 0 else 0
        self.sigmoid = logistic_int16_table(3)
        self.tanh_gate = tanh_int16_table(3)
        self.tanh_cell = tanh_int16_table(15 + cell_scale)

    # ---- one step over a batch of rows (LstmStepInteger8x8_16)
    def _layer_norm(self, g: str, z: np.ndarray) -> np.ndarray:
        coef, bias, (ma, mb), guard = self.ln[g]
        n = z.shape[1]
        total = z.sum(axis=1, keepdims=True)
        sum_sq = (z * z).sum(axis=1, keepdims=True)
        mean = _tdiv(total * 1024, n)
        variance = sum_sq * ((1 << 20) // n) - mean * mean
        var2 = _tdiv(variance, 1 << 20)
        var2 = np.where(var2 < 1, guard, var2)
        inv_m, inv_s = _inv_sqrt_multiplier(var2)
        rescaled = mul_by_quantized_multiplier(wrap32(1024 * z - mean), inv_m, inv_s)
        v3 = wrap32(rescaled * coef + bias)
        v4 = _tdiv(np.where(v3 > 0, v3 + 512, v3 - 512), 1024)
        return _clamp16(mul_by_quantized_multiplier(v4, ma, mb + 12))

    def _gate(self, g: str, x: np.ndarray, h: np.ndarray, c: np.ndarray, table: np.ndarray) -> np.ndarray:
        acc = wrap32(x @ self.w_x[g] + self.bx[g])
        z = _clamp16(mul_by_quantized_multiplier(acc, *self.mx[g]))
        acc = wrap32(h @ self.w_h[g] + self.bh[g])
        z = _clamp16(mul_by_quantized_multiplier(acc, *self.mh[g]) + z)
        if g in self.mc:
            w, (m, s) = self.mc[g]
            b, n_out = z.shape[0], self.n_output
            # LiteRT's peephole walks n_output elements per batch row of the flat arrays
            flat_z = z.reshape(-1).copy()
            span = b * n_out
            prod = w[:n_out][None, :] * c.reshape(-1)[:span].reshape(b, n_out)
            flat_z[:span] = _clamp16(mul_by_quantized_multiplier(prod, m, s).reshape(-1) + flat_z[:span])
            z = flat_z.reshape(z.shape)
        if self.use_ln:
            z = self._layer_norm(g, z)
        return _act16(table, z)

    def step(self, x: np.ndarray, h: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """x (B, n_input) int8, h (B, n_output) int8, c (B, n_cell) int16 as int64 -> (h', c')."""
        i = None if self.cifg else self._gate("i", x, h, c, self.sigmoid)
        f = self._gate("f", x, h, c, self.sigmoid)
        g = self._gate("c", x, h, c, self.tanh_gate)
        c = wrap16(rdbpot(f * c, 15))
        other = (32767 - f) if self.cifg else i
        c = _clamp16(c + wrap16(rdbpot(other * g, 30 + self.cell_scale)))
        if self.cell_clip > 0:
            c = np.clip(c, -self.cell_clip, self.cell_clip)
        o = self._gate("o", x, h, c, self.sigmoid)
        t = _act16(self.tanh_cell, c)
        hm, hs = self.hidden_mult
        if self.proj is not None:
            w, b, (pm, ps) = self.proj
            hidden = np.clip(mul_by_quantized_multiplier(o * t, hm, hs) - self.hidden_zp, -128, 127)
            h = np.clip(mul_by_quantized_multiplier(wrap32(hidden @ w + b), pm, ps) + self.out_zp, -128, 127)
            if self.proj_clip > 0:
                h = np.clip(h, -self.proj_clip, self.proj_clip)
        else:
            h = np.clip(mul_by_quantized_multiplier(o * t, hm, hs) + self.hidden_zp, -128, 127)
        return h, c


def _tdiv(a: np.ndarray, d: int) -> np.ndarray:
    """C integer division (truncation toward zero) of int64 values by a positive int."""
    a = np.asarray(a, np.int64)
    return np.where(a >= 0, a // d, -((-a) // d))


def _integer_lstm(ctx: NodeContext, sequence: bool) -> Prepared:
    lstm = _IntegerLstm(ctx)
    time_major = bool(ctx.options.get("time_major", True)) if sequence else True

    def plan(shapes):
        xs = shapes[0]
        if sequence:
            if len(xs) != 3 or xs[2] != lstm.n_input:
                raise ctx.fail(f"input must be 3-D with {lstm.n_input} features, got {xs}")
            steps, batch = (xs[0], xs[1]) if time_major else (xs[1], xs[0])
            oshape = (xs[0], xs[1], lstm.n_output)
        else:
            if len(xs) != 2 or xs[1] != lstm.n_input:
                raise ctx.fail(f"input must be (batch, {lstm.n_input}), got {xs}")
            steps, batch = 1, xs[0]
            oshape = (batch, lstm.n_output)
        h_size, c_size = batch * lstm.n_output, batch * lstm.n_cell

        def run(inputs):
            x = np.asarray(inputs[0]).astype(np.int64)
            h_var, c_var = inputs[18], inputs[19]
            if h_var.size != h_size or c_var.size != c_size:
                raise ctx.fail(f"state tensors hold {h_var.size} / {c_var.size} values, expected {h_size} / {c_size}")
            h = h_var.reshape(batch, lstm.n_output).astype(np.int64)
            c = c_var.reshape(batch, lstm.n_cell).astype(np.int64)
            if sequence and not time_major:
                x = np.swapaxes(x, 0, 1)
            x = x.reshape(steps, batch, lstm.n_input)
            out = np.empty((steps, batch, lstm.n_output), np.int8)
            if time_major:
                for t in range(steps):  # sequential in time
                    h, c = lstm.step(x[t], h, c)
                    out[t] = h
            else:
                # LiteRT runs a batch-major sequence one batch row at a time (n_batch = 1), which
                # changes only the peephole's row walk
                for b in range(batch):
                    hb, cb = h[b:b + 1], c[b:b + 1]
                    for t in range(steps):
                        hb, cb = lstm.step(x[t, b:b + 1], hb, cb)
                        out[t, b] = hb[0]
                    h[b], c[b] = hb[0], cb[0]
            # the state variables persist across invokes: update their storage in place
            write_state(h_var, h.astype(np.int8), "output state")
            write_state(c_var, c.astype(np.int16), "cell state")
            if not sequence:
                return [out[0]]
            return [np.ascontiguousarray(out if time_major else np.swapaxes(out, 0, 1))]

        return [oshape], run

    return plan_by_shape(ctx, plan)


@register_kernel("LSTM", dtypes=("int8",), versions=range(1, 5))
def integer_lstm(ctx: NodeContext) -> Prepared:
    return _integer_lstm(ctx, sequence=False)


@register_kernel("LSTM", dtypes=("uint8",), versions=range(1, 5))
def quantized_basic_lstm(ctx: NodeContext) -> Prepared:
    """LiteRT's quantized basic LSTM cell (kernel_type BASIC, LstmCell<4>): uint8 input, previous
    activation and weights, int32 bias, int16 state with scale 2^-11 (4 integer bits).

    ``activ_temp = clamp16(MBQM(bias + sum((concat - 128) (w - zp_w)), 4096 * s_bias))`` in Q3.12;
    gates i, g, f, o by gemmlowp's int16 logistic/tanh; ``c' = sat(Rescale4(i g) + f c)``;
    ``h = o tanh(Rescale3(c'))`` rounded to uint8 around 128.  As LiteRT does, the new activation
    and state are also copied into the previous-activation and previous-state inputs when those
    are variable tensors.  Outputs: activation, state, concat_temp, activ_temp."""
    ins = ctx.inputs
    if int(ctx.options.get("kernel_type", 0)) != 1:
        raise ctx.fail("a uint8 LSTM must use the basic kernel (kernel_type BASIC)")
    if len(ins) != 5 or any(t is None for t in ins) or len(ctx.outputs) != 4:
        raise ctx.fail("the basic LSTM needs 5 inputs and 4 outputs")
    x, h_in, w, bias, c_in = ins
    act_out, state_out, concat_out, temp_out = ctx.outputs
    want = ((x, "uint8"), (h_in, "uint8"), (w, "uint8"), (bias, "int32"), (c_in, "int16"), (act_out, "uint8"),
            (state_out, "int16"), (concat_out, "uint8"), (temp_out, "int16"))
    for t, dt in want:
        if t.dtype != dt:
            raise ctx.fail(f"tensor {t.name!r} is {t.dtype}; the quantized basic LSTM needs {dt}")
    state_log2 = checked_log2(float(qparams(state_out, "state output")[0][0]))
    if state_log2 is None or 15 + state_log2 != 4:
        raise ctx.fail("the state must have scale 2^-11 (4 integer bits), the only quantized LSTM cell LiteRT has")
    if w.data is None or bias.data is None:
        raise ctx.fail("the weights and bias must be constant")
    w_q = np.asarray(w.data).astype(np.int64)
    w_q = w_q.reshape(w_q.shape[0], -1) - int(qparams(w, "weights")[1][0])
    b_q = np.asarray(bias.data).astype(np.int64).reshape(-1)
    if w_q.shape[0] % 4 or b_q.size != w_q.shape[0]:
        raise ctx.fail(f"weights {w_q.shape} and bias {b_q.shape} do not make 4 gates")
    depth = w_q.shape[0] // 4
    m, sh = _mult(4096 * float(qparams(bias, "bias")[0][0]))
    w_t = np.ascontiguousarray(w_q.T)
    sigmoid, tanh3 = logistic_int16_table(3), tanh_int16_table(3)

    def run(inputs):
        xv, hv, _, _, cv = inputs
        lead = xv.shape[:-1]
        concat = np.concatenate([xv.reshape(-1, xv.shape[-1]), hv.reshape(-1, hv.shape[-1])], axis=1)
        if concat.shape[1] != w_t.shape[0]:
            raise ctx.fail(f"input and previous activation give {concat.shape[1]} values, the weights take "
                           f"{w_t.shape[0]}")
        acc = wrap32((concat.astype(np.int64) - 128) @ w_t + b_q)
        temp = _clamp16(mul_by_quantized_multiplier(acc, m, sh))
        i, g, f, o = (temp[:, k * depth:(k + 1) * depth] for k in range(4))
        i, f, o = _act16(sigmoid, i), _act16(sigmoid, f), _act16(sigmoid, o)
        g = _act16(tanh3, g)
        c = cv.reshape(-1, depth).astype(np.int64)
        new_c = _clamp16(sat_rounding_mul_by_pot16(srdhm16(i, g), -4) + srdhm16(f, c))  # SaturatingAdd in Q4.11
        out = srdhm16(o, _act16(tanh3, sat_rounding_mul_by_pot16(new_c, 1)))
        activ = (np.clip(rdbpot(out, 8), -128, 127) + 128).astype(np.uint8).reshape(lead + (depth,))
        state = new_c.astype(np.int16).reshape(lead + (depth,))
        # LiteRT copies the results into the previous-activation and previous-state tensors
        if h_in.is_variable:
            write_state(inputs[1], activ, "previous activation")
        if c_in.is_variable:
            write_state(inputs[4], state, "previous state")
        return [activ, state, concat.astype(np.uint8).reshape(lead + (concat.shape[1],)),
                temp.astype(np.int16).reshape(lead + (4 * depth,))]

    xs = x.shape
    shapes: list = [None] * 4
    if xs is not None and len(xs) >= 1:
        lead = tuple(xs[:-1])
        shapes = [lead + (depth,), lead + (depth,), lead + (w_t.shape[0],), lead + (4 * depth,)]
    return Prepared(shapes, run)


@register_kernel("UNIDIRECTIONAL_SEQUENCE_LSTM", dtypes=("int8",), versions=range(1, 5))
def integer_unidirectional_sequence_lstm(ctx: NodeContext) -> Prepared:
    return _integer_lstm(ctx, sequence=True)


# --------------------------------------------------------------------------- SVDF


@register_kernel("SVDF", dtypes=("int8",), versions=range(1, 5))
def integer_svdf(ctx: NodeContext) -> Prepared:
    """LiteRT's EvalIntegerSVDF: int8 input and feature weights, int16 time weights and state (zero
    point 0), int32 bias, int8 output.  Per invoke the state shifts one step left, its newest column
    is ``clamp16(MBQM(W_f (x - zp_x), s1))``; the output is ``clamp8(MBQM(sum over rank of
    (W_t . state) + bias, s2) + zp_out)``, with ``s1 = s_x s_wf / s_state`` and
    ``s2 = s_state s_wt / s_out``.  LiteRT requires the RELU activation here and then applies none;
    so does litegpu."""
    ins = ctx.inputs
    if len(ins) != 5 or any(ins[i] is None for i in (0, 1, 2, 4)):
        raise ctx.fail("expects inputs (input, feature weights, time weights, bias (optional), state)")
    x, wf, wt, bias, state = ins
    out = ctx.outputs[0]
    for t, want in ((x, "int8"), (wf, "int8"), (wt, "int16"), (state, "int16"), (out, "int8")):
        if t.dtype != want:
            raise ctx.fail(f"tensor {t.name!r} is {t.dtype}; the integer SVDF needs {want}")
    if bias is not None and bias.dtype != "int32":
        raise ctx.fail(f"the bias is {bias.dtype}; the integer SVDF needs int32")
    if int(ctx.options.get("fused_activation_function", 0)) != 1:
        raise ctx.fail("the integer SVDF needs the RELU activation (LiteRT accepts no other)")
    if not state.is_variable:
        raise ctx.fail("the state must be a variable tensor")
    for t, what in ((wf, "feature weights"), (wt, "time weights")):
        if t.data is None:
            raise ctx.fail(f"the {what} must be constant")
    w_f = np.asarray(wf.data).astype(np.int64)
    w_t = np.asarray(wt.data).astype(np.int64)
    rank = int(ctx.options.get("rank", 1) or 1)
    n_filters, memory = w_t.shape
    if w_f.shape[0] != n_filters or n_filters % rank:
        raise ctx.fail(f"feature weights {w_f.shape} and time weights {w_t.shape} do not fit rank {rank}")
    units = n_filters // rank
    b = None if bias is None or bias.data is None else np.asarray(bias.data).astype(np.int64).reshape(-1)
    if bias is not None and b is None:
        raise ctx.fail("the bias must be constant")
    s_x, zp_x = F32(qparams(x, "input")[0][0]), int(qparams(x)[1][0])
    s_state = F32(qparams(state, "state")[0][0])
    s_out, zp_out = F32(qparams(out, "output")[0][0]), int(qparams(out)[1][0])
    m1 = _mult(F32(s_x * F32(qparams(wf, "feature weights")[0][0])) / s_state)
    m2 = _mult(F32(s_state * F32(qparams(wt, "time weights")[0][0])) / s_out)
    w_ft = np.ascontiguousarray(w_f.T)

    def plan(shapes):
        xs = shapes[0]
        if len(xs) != 2 or xs[1] != w_f.shape[1]:
            raise ctx.fail(f"input must be (batch, {w_f.shape[1]}), got {xs}")
        batch = xs[0]

        def run(inputs):
            v, st = inputs[0], inputs[4]
            if st.size != batch * n_filters * memory:
                raise ctx.fail(f"state holds {st.size} values, expected {batch * n_filters * memory}")
            s = st.reshape(batch, n_filters, memory).astype(np.int64)
            new = np.empty_like(s)
            new[:, :, :-1] = s[:, :, 1:]
            feat = wrap32((v.astype(np.int64) - zp_x) @ w_ft)
            new[:, :, -1] = _clamp16(mul_by_quantized_multiplier(feat, *m1))
            acc = wrap32(np.einsum("bfm,fm->bf", new, w_t))
            acc = wrap32(acc.reshape(batch, units, rank).sum(axis=2))
            if b is not None:
                acc = wrap32(acc + b)
            write_state(st, new.astype(np.int16), "state")
            return [np.clip(mul_by_quantized_multiplier(acc, *m2) + zp_out, -128, 127).astype(np.int8)]

        return [(batch, units)], run

    return plan_by_shape(ctx, plan)
