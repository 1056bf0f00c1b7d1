"""Float recurrent ops as LiteRT defines them: LSTM (full and basic kernels), UNIDIRECTIONAL_ and
BIDIRECTIONAL_SEQUENCE_LSTM, RNN, UNIDIRECTIONAL_ and BIDIRECTIONAL_SEQUENCE_RNN, SVDF.

Full kernel, per time step (``*`` elementwise, ``@`` matmul)::

    i = sigmoid(LN_i(W_xi x + W_hi h + w_ci * c))         (absent with CIFG)
    f = sigmoid(LN_f(W_xf x + W_hf h + w_cf * c))
    g = act    (LN_g(W_xg x + W_hg h))
    c' = clip(f * c + (1 - f if CIFG else i) * g, cell_clip)
    o = sigmoid(LN_o(W_xo x + W_ho h + w_co * c'))         (the peephole sees the new cell)
    h' = o * act(c');  h' = clip(P h' + p_bias, proj_clip)  (with a projection)

``LN(z)`` is ``(z - mean) / sqrt(var + 1e-8) * coef + bias`` when layer-norm
coefficients are given, else ``z + bias``.  Peepholes, projection, its bias,
layer norm and CIFG are all optional, as are diagonal recurrent weights
(UNIDIRECTIONAL_SEQUENCE_LSTM v4).

The input contribution of *all* time steps is one sgemm up front; the loop
over time steps then does one ``h @ W_h`` sgemm for the four gates together.

State: the output/cell state inputs (18, 19) are LiteRT *variable* tensors.
The kernel reads them at the start of an invoke and writes the new state back
into those arrays in place; the interpreter must hand ``run`` the variable
tensors' own storage (writable) for the state to persist between invokes.
"""

from __future__ import annotations

import numpy as np

from .._errors import LiteGPUError, ModelError
from ._float_util import F32, spec_shape
from ._registry import FLOAT, NodeContext, Prepared, register_kernel

__all__: list[str] = []

# TfLiteFusedActivation codes understood by LiteRT's ApplyActivationToVector.
_ACT_NONE, _ACT_RELU, _ACT_RELU_N1_TO_1, _ACT_RELU6, _ACT_TANH, _ACT_SIGMOID = 0, 1, 2, 3, 4, 6


def _sigmoid(z: np.ndarray) -> np.ndarray:
    # exp of a large positive argument overflows to inf harmlessly (1 / inf == 0).
    with np.errstate(over="ignore"):
        return np.reciprocal(np.exp(-z, dtype=F32) + F32.type(1))


def _activation(code: int):
    if code == _ACT_NONE:
        return lambda z: z
    if code == _ACT_RELU:
        return lambda z: np.maximum(z, F32.type(0))
    if code == _ACT_RELU_N1_TO_1:
        return lambda z: np.clip(z, F32.type(-1), F32.type(1))
    if code == _ACT_RELU6:
        return lambda z: np.clip(z, F32.type(0), F32.type(6))
    if code == _ACT_TANH:
        return np.tanh
    if code == _ACT_SIGMOID:
        return _sigmoid
    raise ModelError(f"unsupported activation {code}")


def _layer_norm(z: np.ndarray, coef: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = z.mean(axis=-1, keepdims=True, dtype=F32)
    d = z - mean
    var = (d * d).mean(axis=-1, keepdims=True, dtype=F32)
    return d * (F32.type(1) / np.sqrt(var + F32.type(1e-8))) * coef + bias


class _FullLstm:
    """Weights of a full-kernel LSTM, gathered for the gate loop (gates i, f, g, o)."""

    def __init__(self, ctx: NodeContext, diagonal: bool, inputs: list | None = None):
        # ``inputs``: the 24 inputs of one direction in UNIDIRECTIONAL_SEQUENCE_LSTM order (the
        # bidirectional op's halves are mapped onto it); the node's own inputs by default
        ins = ctx.inputs if inputs is None else inputs
        if len(ins) < 20:
            raise ctx.invalid(f"expected 20 or 24 inputs, got {len(ins)}")

        def get(i):
            t = ins[i] if i < len(ins) else None
            if t is None:
                return None
            if t.dtype != "float32":
                raise ctx.fail(f"input {i} ({t.name}) is {t.dtype}; only float32 LSTMs are supported")
            if t.data is None:
                raise ctx.fail(f"input {i} ({t.name}) must be constant")
            return np.asarray(t.data, F32)

        for i in (0, 18, 19):
            if ins[i] is None:
                raise ctx.invalid(f"input {i} is required")
            if ins[i].dtype != "float32":
                raise ctx.fail(f"input {i} is {ins[i].dtype}; only float32 LSTMs are supported")
        self.cifg = ins[1] is None
        w_x = [get(i) for i in (1, 2, 3, 4)]
        w_h = [get(i) for i in (5, 6, 7, 8)]
        peep = [get(i) for i in (9, 10, 11)]
        bias = [get(i) for i in (12, 13, 14, 15)]
        ln = [get(i) for i in (20, 21, 22, 23)] if len(ins) >= 24 else [None] * 4
        self.proj_w, self.proj_b = get(16), get(17)
        for name, lst, need in (("input weights", w_x, 1), ("recurrent weights", w_h, 5), ("biases", bias, 12)):
            for k, a in enumerate(lst):
                if a is None and (k > 0 or not self.cifg):
                    raise ctx.invalid(f"missing {name} (input {need + k})")
        if self.cifg and (w_h[0] is not None or bias[0] is not None or peep[0] is not None):
            raise ctx.invalid("CIFG LSTM must omit all input-gate tensors")
        gates = [1, 2, 3] if self.cifg else [0, 1, 2, 3]
        self.n_cell = w_x[1].shape[0]
        self.n_input = w_x[1].shape[1]
        self.diagonal = diagonal
        self.n_output = self.n_cell if diagonal else w_h[1].shape[1]
        nc = self.n_cell
        for k in gates:
            if w_x[k].shape != (nc, self.n_input):
                raise ctx.invalid(f"input weights of gate {k} have shape {w_x[k].shape}, "
                                  f"expected {(nc, self.n_input)}")
            want = (nc,) if diagonal else (nc, self.n_output)
            if w_h[k].shape != want:
                raise ctx.invalid(f"recurrent weights of gate {k} have shape {w_h[k].shape}, "
                                  f"expected {want}")
        if self.proj_w is not None:
            if self.proj_w.shape[1] != nc:
                raise ctx.invalid(f"projection weights {self.proj_w.shape} do not take {nc} cells")
            if not diagonal and self.proj_w.shape[0] != self.n_output:
                raise ctx.invalid(f"projection gives {self.proj_w.shape[0]} outputs, "
                                  f"recurrent weights take {self.n_output}")
            self.proj_wt = np.ascontiguousarray(self.proj_w.T)
        elif self.n_output != nc:
            raise ctx.invalid(f"without projection, output size {self.n_output} must equal "
                              f"cell size {nc}")
        self.gates = gates
        self.ng = len(gates)
        self.wx = np.ascontiguousarray(np.concatenate([w_x[k].T for k in gates], axis=1))
        if diagonal:
            self.wh = np.concatenate([w_h[k] for k in gates])
        else:
            self.wh = np.ascontiguousarray(np.concatenate([w_h[k].T for k in gates], axis=1))
        self.use_ln = ln[1] is not None
        if self.use_ln:
            self.ln = {k: ln[k] for k in gates}
        self.bias = {k: bias[k] for k in gates}
        self.bias_all = np.concatenate([bias[k] for k in gates])
        self.peep = {0: peep[0], 1: peep[1], 3: peep[2]}  # cell-to-gate (peephole) weights
        opt = ctx.options
        self.act = _activation(int(opt.get("fused_activation_function", _ACT_TANH)))
        self.cell_clip = float(opt.get("cell_clip", 0.0) or 0.0)
        self.proj_clip = float(opt.get("proj_clip", 0.0) or 0.0)

    def _gate(self, z, slot, k, cell, act):
        zk = z[:, slot[k]]
        p = self.peep.get(k)
        if p is not None:
            zk = zk + p * cell
        if self.use_ln:
            zk = _layer_norm(zk, self.ln[k], self.bias[k])
        return act(zk)

    aux_w: np.ndarray | None = None  # aux-input weights of all gates, (n_aux, gates * n_cell)

    def set_aux_weights(self, ctx: NodeContext, weights: list) -> None:
        """The bidirectional ops' cross-linked aux-input weights, one (n_cell, n_aux) per gate i, f,
        c, o (i absent with CIFG); their products with the aux input add to the gates."""
        need = [k for k in range(4) if k in self.gates]
        if any(weights[k] is None for k in need) or any(weights[k] is not None for k in range(4) if k not in need):
            raise ctx.fail("aux input weights must be given for every gate (none for the input gate with CIFG)")
        mats = []
        for k in need:
            t = weights[k]
            if t.dtype != "float32" or t.data is None or len(t.data.shape) != 2 or t.data.shape[0] != self.n_cell:
                raise ctx.fail(f"aux input weights {t.name!r} must be constant float32 ({self.n_cell}, n_aux)")
            mats.append(np.asarray(t.data, F32).T)
        self.aux_w = np.ascontiguousarray(np.concatenate(mats, axis=1))

    def sequence(self, x: np.ndarray, h: np.ndarray, c: np.ndarray,
                 aux: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """x: (T, B, n_input) time-major (``aux`` (T, B, n_aux) with aux weights).  Returns
        (outputs (T, B, n_output), h, c)."""
        t_steps, batch, _ = x.shape
        nc = self.n_cell
        xw = np.matmul(x.reshape(t_steps * batch, self.n_input), self.wx).reshape(t_steps, batch, -1)
        if self.aux_w is not None and aux is not None:
            xw += np.matmul(aux.reshape(t_steps * batch, -1), self.aux_w).reshape(t_steps, batch, -1)
        if not self.use_ln:
            xw += self.bias_all
        out = np.empty((t_steps, batch, self.n_output), F32)
        slot = {k: slice(s * nc, (s + 1) * nc) for s, k in enumerate(self.gates)}
        for t in range(t_steps):
            if self.diagonal:
                z = xw[t] + np.tile(h, self.ng) * self.wh
            else:
                z = xw[t] + h @ self.wh

            f = self._gate(z, slot, 1, c, _sigmoid)
            g = self._gate(z, slot, 2, c, self.act)
            i = (F32.type(1) - f) if self.cifg else self._gate(z, slot, 0, c, _sigmoid)
            c = f * c + i * g
            if self.cell_clip > 0:
                c = np.clip(c, -self.cell_clip, self.cell_clip)
            o = self._gate(z, slot, 3, c, _sigmoid)
            h = o * self.act(c)
            if self.proj_w is not None:
                h = h @ self.proj_wt
                if self.proj_b is not None:
                    h = h + self.proj_b
                if self.proj_clip > 0:
                    h = np.clip(h, -self.proj_clip, self.proj_clip)
            h = h.astype(F32, copy=False)
            c = c.astype(F32, copy=False)
            out[t] = h
        return out, h, c


def write_state(dst: np.ndarray, value: np.ndarray, what: str) -> None:
    if not dst.flags.writeable:
        raise LiteGPUError(f"LSTM: the {what} variable tensor was passed read-only; the interpreter must pass "
                           "variable tensors' storage so the kernel can update it in place")
    np.copyto(dst, value.reshape(dst.shape))


def _full_lstm(ctx: NodeContext, sequence: bool) -> Prepared:
    opt = ctx.options
    diagonal = bool(opt.get("diagonal_recurrent_tensors", False))
    lstm = _FullLstm(ctx, diagonal)
    time_major = bool(opt.get("time_major", True)) if sequence else True
    in_shape = spec_shape(ctx.inputs[0])

    def out_shape(shape):
        if sequence:
            if len(shape) != 3 or shape[2] != lstm.n_input:
                raise ctx.invalid(f"input must be 3-D with {lstm.n_input} features, got {shape}")
            return shape[:2] + (lstm.n_output,)
        if len(shape) != 2 or shape[1] != lstm.n_input:
            raise ctx.invalid(f"input must be (batch, {lstm.n_input}), got {shape}")
        return (shape[0], lstm.n_output)

    static_out = out_shape(in_shape) if in_shape is not None else None

    def run(inputs):
        x = np.asarray(inputs[0], F32)
        h_var, c_var = inputs[18], inputs[19]
        oshape = out_shape(x.shape)
        if sequence:
            xt = x if time_major else np.swapaxes(x, 0, 1)
        else:
            xt = x[None]
        batch = xt.shape[1]
        h0 = np.asarray(h_var, F32).reshape(batch, lstm.n_output)
        c0 = np.asarray(c_var, F32).reshape(batch, lstm.n_cell)
        out, h, c = lstm.sequence(xt, h0, c0)
        write_state(h_var, h, "output state")
        write_state(c_var, c, "cell state")
        if sequence:
            res = out if time_major else np.swapaxes(out, 0, 1)
        else:
            res = out[0]
        res = np.ascontiguousarray(res).reshape(oshape)
        extra = [h.copy(), c.copy()][: max(0, len(ctx.outputs) - 1)]
        return [res] + extra

    return Prepared([static_out] + [None] * (len(ctx.outputs) - 1), run)


def _basic_lstm(ctx: NodeContext) -> Prepared:
    """LiteRT's BASIC kernel: one FC over [x, h] -> gates (i, g, f, o); 4 outputs."""
    ins = ctx.inputs
    if len(ins) != 5 or any(t is None for t in ins) or len(ctx.outputs) != 4:
        raise ctx.invalid("basic kernel needs 5 inputs and 4 outputs")
    for t in ins:
        if t.dtype != "float32":
            raise ctx.fail(f"input {t.name} is {t.dtype}; only float32 is supported")
    opt = ctx.options
    if int(opt.get("fused_activation_function", _ACT_TANH)) != _ACT_TANH:
        raise ctx.invalid("basic kernel requires TANH activation")
    if float(opt.get("cell_clip", 0.0) or 0) != 0 or float(opt.get("proj_clip", 0.0) or 0) != 0:
        raise ctx.invalid("basic kernel does not support clipping")
    wshape = spec_shape(ins[2])
    if wshape is None or len(wshape) != 2 or wshape[0] % 4:
        raise ctx.invalid(f"basic kernel: weights must be (4*units, in+units), "
                          f"got {wshape}")
    units = wshape[0] // 4
    wcache: dict = {}
    h_var, c_var = ins[1].is_variable, ins[4].is_variable

    def run(inputs):
        x, h, w, b, c = (np.asarray(a, F32) for a in inputs)
        lead = x.shape[:-1]
        concat = np.concatenate([x.reshape(-1, x.shape[-1]), h.reshape(-1, h.shape[-1])], axis=1)
        if wcache.get("src") is not inputs[2]:
            wcache["src"], wcache["wt"] = inputs[2], np.ascontiguousarray(w.reshape(4 * units, -1).T)
        act = concat @ wcache["wt"] + b.reshape(-1)
        i = _sigmoid(act[:, :units])
        g = np.tanh(act[:, units:2 * units])
        f = _sigmoid(act[:, 2 * units:3 * units])
        o = _sigmoid(act[:, 3 * units:])
        new_c = i * g + f * c.reshape(-1, units)
        new_h = o * np.tanh(new_c)
        # LiteRT copies the results into the previous-activation and previous-state inputs: state
        # that persists when those are variable tensors
        if h_var:
            write_state(inputs[1], new_h.astype(F32), "previous activation")
        if c_var:
            write_state(inputs[4], new_c.astype(F32), "previous state")
        return [new_h.reshape(lead + (units,)).astype(F32), new_c.reshape(lead + (units,)).astype(F32),
                concat.reshape(lead + (concat.shape[1],)).astype(F32),
                act.reshape(lead + (4 * units,)).astype(F32)]

    # static output shapes when the input's is known: a delegate only claims nodes whose shapes are static
    xs = spec_shape(ins[0])
    shapes = [None] * 4
    if xs is not None and len(xs) >= 1:
        lead = tuple(xs[:-1])
        shapes = [lead + (units,), lead + (units,), lead + (int(wshape[1]),), lead + (4 * units,)]
    return Prepared(shapes, run)


@register_kernel("LSTM", dtypes=FLOAT, versions=range(1, 3))
def lstm(ctx: NodeContext) -> Prepared:
    if int(ctx.options.get("kernel_type", 0)) == 1:
        return _basic_lstm(ctx)
    return _full_lstm(ctx, sequence=False)


@register_kernel("UNIDIRECTIONAL_SEQUENCE_LSTM", dtypes=FLOAT, versions=range(1, 5))
def unidirectional_sequence_lstm(ctx: NodeContext) -> Prepared:
    return _full_lstm(ctx, sequence=True)


# --------------------------------------------------------------------------- RNN, UNIDIRECTIONAL_SEQUENCE_RNN


def _rnn_step(ctx: NodeContext, wi: int, ri: int, bi: int):
    """The step ``h' = act(x W^T + h R^T + b)`` of an RNN whose weights are inputs ``wi``/``ri``
    and bias ``bi``: float weights, or int8 weights (versions 2 and 3, dynamic range) where
    LiteRT quantizes x and h per batch row on the fly (asymmetrically with
    ``asymmetric_quantize_inputs``), skipping an all-zero x or h, and accumulates onto the bias."""
    ins = ctx.inputs
    w, r, b = ins[wi], ins[ri], ins[bi]
    if w is None or r is None or b is None:
        raise ctx.fail(f"inputs {wi}, {ri} and {bi} (weights, recurrent weights, bias) are required")
    if b.dtype != "float32":
        raise ctx.fail(f"the bias is {b.dtype}; float32 is needed")
    act = _activation(int(ctx.options.get("fused_activation_function", 0)))
    if w.dtype == "float32" and r.dtype == "float32":
        def float_step(x, h, wv, rv, bv):
            bias = bv if bv.ndim == 2 else bv.reshape(-1)  # (batch, units) when an aux term joined it
            return act((x @ np.asarray(wv, F32).T + h @ np.asarray(rv, F32).T + bias).astype(F32)).astype(F32)
        return float_step
    if w.dtype != "int8" or r.dtype != "int8" or w.data is None or r.data is None:
        raise ctx.fail(f"weights must be float32, or constant int8 (dynamic range); got {w.dtype} / {r.dtype}")
    from .quantized._fixedpoint import qparams
    from .quantized.hybrid import _mbvma, asymmetric_quantize_rows, symmetric_quantize_rows

    w_q, r_q = np.asarray(w.data).astype(np.int64), np.asarray(r.data).astype(np.int64)
    sw, sr = qparams(w, "weights")[0][0], qparams(r, "recurrent weights")[0][0]  # float32 scalars
    asym = bool(ctx.options.get("asymmetric_quantize_inputs", False))

    def quantize(rows):
        if asym:
            return asymmetric_quantize_rows(rows)
        q, sf = symmetric_quantize_rows(rows)
        return q, sf, np.zeros(rows.shape[0], np.int64)

    def hybrid_step(x, h, wv, rv, bv):
        acc = np.broadcast_to(np.asarray(bv, F32).reshape(-1), (x.shape[0], w_q.shape[0])).astype(F32)
        if np.any(x != 0):
            acc = _mbvma(w_q, sw, *quantize(x.astype(F32)), acc)
        if np.any(h != 0):
            acc = _mbvma(r_q, sr, *quantize(h), acc)
        return act(acc).astype(F32)

    return hybrid_step


def _rnn(ctx: NodeContext, sequence: bool) -> Prepared:
    """h = act(x W^T + h R^T + b) per (time) step; the hidden state variable is updated in place."""
    ins = ctx.inputs
    if len(ins) != 5 or any(t is None for t in ins) or len(ctx.outputs) < 1:
        raise ctx.fail("expects inputs (input, weights, recurrent weights, bias, hidden state) and an output")
    if not ins[4].is_variable:
        raise ctx.fail("the hidden state must be a variable tensor")
    step = _rnn_step(ctx, 1, 2, 3)
    time_major = bool(ctx.options.get("time_major", False))
    w, r, b = (spec_shape(ins[i]) for i in (1, 2, 3))
    units = None if w is None else w[0]

    def run(inputs):
        x, wv, rv, bv, h_var = inputs
        if wv.ndim != 2 or rv.shape != (wv.shape[0], wv.shape[0]) or bv.size != wv.shape[0]:
            raise ctx.invalid(f"weights {wv.shape}, recurrent weights "
                              f"{rv.shape} and bias {bv.shape} do not fit")
        seq = x if not sequence else (x if time_major else np.swapaxes(x, 0, 1))
        if not sequence:
            seq = seq[None]
        h = np.asarray(h_var, F32).reshape(seq.shape[1], wv.shape[0])
        outs = np.empty(seq.shape[:2] + (wv.shape[0],), F32)
        for t in range(seq.shape[0]):  # sequential in time
            h = step(seq[t].reshape(seq.shape[1], -1), h, wv, rv, bv)
            outs[t] = h
        write_state(h_var, h, "hidden state")
        if not sequence:
            return [outs[0]]
        return [np.ascontiguousarray(outs if time_major else np.swapaxes(outs, 0, 1))]

    xs = spec_shape(ins[0])
    oshape = None
    if xs is not None and units is not None:
        oshape = xs[:-1] + (units,) if sequence else (xs[0], units)
    return Prepared([oshape], run)


@register_kernel("RNN", dtypes=FLOAT, versions=range(1, 4))
def rnn(ctx: NodeContext) -> Prepared:
    return _rnn(ctx, sequence=False)


@register_kernel("UNIDIRECTIONAL_SEQUENCE_RNN", dtypes=FLOAT, versions=range(1, 4))
def unidirectional_sequence_rnn(ctx: NodeContext) -> Prepared:
    return _rnn(ctx, sequence=True)


# --------------------------------------------------------------------------- bidirectional sequence ops


def _bidi_halves(ctx: NodeContext, n_inputs: int, aux_weights: tuple[int, ...], aux_input: int):
    """(forward input, backward input, cross-linked) of a bidirectional op.

    With an aux input and no aux weights LiteRT is in "non-stacking" mode: the backward direction
    reads the aux input (the previous layer's backward output).  With aux weights too
    ("cross-linked" stacking) both directions read the input, and the aux input through the aux
    weights."""
    ins = ctx.inputs
    if len(ins) < n_inputs:
        raise ctx.fail(f"expects {n_inputs} inputs, got {len(ins)}")
    cross = any(ins[i] is not None for i in aux_weights if i < len(ins))
    if cross and (aux_input >= len(ins) or ins[aux_input] is None):
        raise ctx.fail("aux input weights without an aux input")
    if cross:
        return 0, 0, True
    return 0, (aux_input if aux_input < len(ins) and ins[aux_input] is not None else 0), False


def _merge_or_split(ctx: NodeContext, fw: np.ndarray, bw: np.ndarray) -> list[np.ndarray]:
    if bool(ctx.options.get("merge_outputs", False)):
        return [np.ascontiguousarray(np.concatenate([fw, bw], axis=-1))]
    return [fw, bw]


@register_kernel("BIDIRECTIONAL_SEQUENCE_LSTM", dtypes=FLOAT, versions=range(1, 4))
def bidirectional_sequence_lstm(ctx: NodeContext) -> Prepared:
    """Two full LSTMs over the sequence, the backward one in reverse time; outputs separate or
    concatenated on the feature axis (``merge_outputs``).  Inputs: 0 input, 1-17 forward weights,
    18-34 backward weights (each in UNIDIRECTIONAL_SEQUENCE_LSTM order 1-17), 35/36 forward
    output/cell state, 37/38 backward, 39 aux input, 40-47 aux weights.

    With ``merge_outputs`` and batch-major input LiteRT finds each batch row's output state at
    ``row * 2 * n_output``, past the state for any row but the first (undefined there); litegpu keeps
    each row's own state, which is LiteRT's answer whenever there is one batch row."""
    ins = ctx.inputs
    fw_in, bw_in, cross = _bidi_halves(ctx, 48, tuple(range(40, 48)), 39)
    opt = ctx.options
    time_major = bool(opt.get("time_major", True))
    halves = []
    for base, states, aux_base in ((0, (35, 36), 40), (17, (37, 38), 44)):
        view = [ins[fw_in if base == 0 else bw_in]] + [ins[base + k] for k in range(1, 18)]
        view += [ins[states[0]], ins[states[1]]]
        halves.append(_FullLstm(ctx, diagonal=False, inputs=view))
        if cross:
            halves[-1].set_aux_weights(ctx, [ins[aux_base + k] for k in range(4)])
    fw, bw = halves
    merge = bool(opt.get("merge_outputs", False))
    n_out = (len(ctx.outputs) == 1) if merge else len(ctx.outputs) >= 2
    if not n_out:
        raise ctx.fail("needs one output with merge_outputs, two without")

    def run(inputs):
        outs = []
        for lstm, x_i, (hi, ci), forward in ((fw, fw_in, (35, 36), True), (bw, bw_in, (37, 38), False)):
            x = np.asarray(inputs[x_i], F32)
            xt = x if time_major else np.swapaxes(x, 0, 1)
            if not forward:
                xt = xt[::-1]
            batch = xt.shape[1]
            h0 = np.asarray(inputs[hi], F32).reshape(batch, lstm.n_output)
            c0 = np.asarray(inputs[ci], F32).reshape(batch, lstm.n_cell)
            aux = None
            if cross:
                a = np.asarray(inputs[39], F32)
                aux = a if time_major else np.swapaxes(a, 0, 1)
                aux = np.ascontiguousarray(aux if forward else aux[::-1])
            out, h, c = lstm.sequence(np.ascontiguousarray(xt), h0, c0, aux)
            write_state(inputs[hi], h, "output state")
            write_state(inputs[ci], c, "cell state")
            if not forward:
                out = out[::-1]
            outs.append(np.ascontiguousarray(out if time_major else np.swapaxes(out, 0, 1)))
        return _merge_or_split(ctx, *outs)

    return Prepared([None] * len(ctx.outputs), run)


@register_kernel("BIDIRECTIONAL_SEQUENCE_RNN", dtypes=FLOAT, versions=range(1, 4))
def bidirectional_sequence_rnn(ctx: NodeContext) -> Prepared:
    """Two RNNs (h = act(x W^T + h R^T + b)) over the sequence, the backward one in reverse time;
    float or dynamic-range int8 weights (see ``_rnn_step``).  Inputs: 0 input, 1-4 forward
    weights/recurrent/bias/hidden state, 5-8 backward, 9 aux input, 10-11 aux weights."""
    ins = ctx.inputs
    fw_in, bw_in, cross = _bidi_halves(ctx, 9, (10, 11), 9)
    for i in (4, 8):
        if ins[i] is None or not ins[i].is_variable:
            raise ctx.fail(f"input {i} (a hidden state) must be a variable tensor")
    steps = {True: _rnn_step(ctx, 1, 2, 3), False: _rnn_step(ctx, 5, 6, 7)}
    time_major = bool(ctx.options.get("time_major", False))
    aux_w = {}
    if cross:
        for forward, i in ((True, 10), (False, 11)):
            t = ins[i]
            if t is None or t.dtype != "float32" or t.data is None or ins[1].dtype != "float32":
                raise ctx.fail("cross-linked aux weights must be constant float32, with float weights")
            aux_w[forward] = np.asarray(t.data, F32).T
        in_size, aux_size = spec_shape(ins[0])[-1], spec_shape(ins[9])[-1]
        if time_major and aux_size != in_size:
            # LiteRT's time-major pass steps through the aux input by the input's width, reading past
            # its end for a narrower aux input: no defined answer
            raise ctx.fail(f"a time-major aux input must be as wide as the input ({in_size}), got {aux_size}")
    merge = bool(ctx.options.get("merge_outputs", False))
    if len(ctx.outputs) != (1 if merge else 2):
        raise ctx.fail("needs one output with merge_outputs, two without")

    def aux_steps(aux):
        a = np.asarray(aux, F32)
        return a if time_major else np.swapaxes(a, 0, 1)

    def direction(x, w, r, b, h_var, forward, aux=None):
        seq = x if time_major else np.swapaxes(x, 0, 1)
        n_steps, batch = seq.shape[:2]
        units = w.shape[0]
        h = np.asarray(h_var, F32).reshape(batch, units)
        out = np.empty((n_steps, batch, units), F32)
        step = steps[forward]
        extra = None if aux is None else aux_steps(aux) @ aux_w[forward]
        for t in (range(n_steps) if forward else range(n_steps - 1, -1, -1)):  # sequential in time
            if extra is None:
                h = step(seq[t], h, w, r, b)
            else:  # the aux term joins the bias before the activation
                h = step(seq[t], h, w, r, np.asarray(b, F32).reshape(-1) + extra[t])
            out[t] = h
        write_state(h_var, h, "hidden state")
        return np.ascontiguousarray(out if time_major else np.swapaxes(out, 0, 1))

    hybrid = ins[1].dtype == "int8"

    def run(inputs):
        # LiteRT's batch-major backward pass reads the main input even in non-stacking mode
        bw_x = inputs[bw_in] if time_major else inputs[0]
        # LiteRT's hybrid time-major kernel nests both passes in a loop over time, so each runs the
        # whole sequence max_time times over (the state carrying on); reproduced to match it
        repeats = np.shape(inputs[0])[0] if hybrid and time_major else 1
        aux = inputs[9] if cross else None
        for _ in range(max(1, repeats)):
            fw = direction(inputs[fw_in], inputs[1], inputs[2], inputs[3], inputs[4], True, aux)
            bw = direction(bw_x, inputs[5], inputs[6], inputs[7], inputs[8], False, aux)
        return _merge_or_split(ctx, fw, bw)

    return Prepared([None] * len(ctx.outputs), run)


# --------------------------------------------------------------------------- SVDF


@register_kernel("SVDF", dtypes=FLOAT, versions=range(1, 5))
def svdf(ctx: NodeContext) -> Prepared:
    """Singular value decomposition filter (LiteRT's EvalFloatSVDF), per invoke:

    the state (batch, num_filters, memory) shifts one step left in time, its newest column becomes
    ``x @ W_feature^T``; each filter's output is its state row dotted with its time weights, summed
    over ``rank`` consecutive filters per unit, plus bias, then the activation.  The state is a
    variable tensor updated in place."""
    ins = ctx.inputs
    if len(ins) != 5 or ins[0] is None or ins[1] is None or ins[2] is None or ins[4] is None:
        raise ctx.fail("expects inputs (input, feature weights, time weights, bias (optional), state)")
    if any(ins[i] is not None and ins[i].dtype != "float32" for i in (1, 2, 3)):
        raise ctx.fail("only float32 weights are supported (hybrid and integer SVDF are not)")
    if not ins[4].is_variable:
        raise ctx.fail("the state must be a variable tensor")
    rank = int(ctx.options.get("rank", 1) or 1)
    act = _activation(int(ctx.options.get("fused_activation_function", 0)))
    wf, wt_shape = spec_shape(ins[1]), spec_shape(ins[2])
    if wf is None or wt_shape is None or len(wf) != 2 or len(wt_shape) != 2 or wf[0] != wt_shape[0] or wf[0] % rank:
        raise ctx.fail(f"feature weights {wf} and time weights {wt_shape} do not fit rank {rank}")
    n_filters, memory = wt_shape
    units = n_filters // rank
    xs = spec_shape(ins[0])

    def run(inputs):
        x, w_f, w_t, bias, state = inputs
        batch = x.shape[0]
        if state.size != batch * n_filters * memory:
            raise ctx.fail(f"state holds {state.size} values, expected {batch * n_filters * memory}")
        s = np.asarray(state, F32).reshape(batch, n_filters, memory)
        new = np.empty_like(s)
        new[:, :, :-1] = s[:, :, 1:]
        new[:, :, -1] = np.asarray(x, F32).reshape(batch, -1) @ np.asarray(w_f, F32).T
        filt = np.einsum("bfm,fm->bf", new, np.asarray(w_t, F32), dtype=F32)
        out = filt.reshape(batch, units, rank).sum(axis=2, dtype=F32)
        if bias is not None:
            out = out + np.asarray(bias, F32).reshape(-1)
        write_state(state, new, "state")
        return [act(out.astype(F32)).astype(F32)]

    return Prepared([None if xs is None else (xs[0], units)], run)
