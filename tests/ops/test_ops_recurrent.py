"""BIDIRECTIONAL_SEQUENCE_LSTM, BIDIRECTIONAL_SEQUENCE_RNN and SVDF (float) against LiteRT's reference
kernels, over several invokes (their state variables carry over between invokes)."""

from __future__ import annotations

import numpy as np
import pytest
from kb_harness import compare, rng
from litegpu.testing import ModelBuilder, assert_allclose_rel, run_invokes

TANH, RELU, NONE = 4, 1, 0


def _w(r, *shape, scale=0.4):
    return (r.standard_normal(shape) * scale).astype(np.float32)


def _lstm_half(b, r, tag, n_input, n_cell, n_output, cifg, peephole, projection):
    ins = []
    for g in "ifco":
        ins.append(-1 if cifg and g == "i" else b.const(f"{tag}x2{g}", _w(r, n_cell, n_input)))
    for g in "ifco":
        ins.append(-1 if cifg and g == "i" else b.const(f"{tag}h2{g}", _w(r, n_cell, n_output)))
    for g in "ifo":
        ins.append(b.const(f"{tag}c2{g}", _w(r, n_cell)) if peephole and not (cifg and g == "i") else -1)
    for g in "ifco":
        ins.append(-1 if cifg and g == "i" else b.const(f"{tag}b{g}", _w(r, n_cell, scale=0.2)))
    ins.append(b.const(f"{tag}proj", _w(r, n_output, n_cell)) if projection else -1)
    ins.append(b.const(f"{tag}proj_b", _w(r, n_output, scale=0.1)) if projection else -1)
    return ins


def bidi_lstm_model(seed, *, n_batch=2, steps=4, n_input=3, n_cell=5, projection=False, cifg=False,
                    peephole=False, merge=False, time_major=True, act=TANH, cell_clip=0.0, aux=False, cross=False,
                    n_aux=3):
    r = rng(seed)
    n_output = 3 if projection else n_cell
    b = ModelBuilder()
    xs = (steps, n_batch, n_input) if time_major else (n_batch, steps, n_input)
    x = b.input("x", xs)
    ins = [x]
    ins += _lstm_half(b, r, "fw", n_input, n_cell, n_output, cifg, peephole, projection)
    ins += _lstm_half(b, r, "bw", n_input, n_cell, n_output, cifg, peephole, projection)
    for tag in ("fw", "bw"):
        ins.append(b.tensor(f"{tag}_h", (n_batch, n_output), is_variable=True))
        ins.append(b.tensor(f"{tag}_c", (n_batch, n_cell), is_variable=True))
    feeds_shapes = [xs]
    if aux or cross:  # non-stacking mode: the backward direction reads the aux input
        aux_shape = xs[:-1] + (n_aux,)
        ins.append(b.input("aux", aux_shape))
        feeds_shapes.append(aux_shape)
    else:
        ins.append(-1)
    if cross:  # cross-linked: both directions add aux-input weights times the aux input
        ins += [-1 if cifg and g == "i" else b.const(f"{tag}a2{g}", _w(r, n_cell, n_aux))
                for tag in ("fw", "bw") for g in "ifco"]
    else:
        ins += [-1] * 8
    ys = xs[:-1] + (2 * n_output if merge else n_output,)
    outs = [b.tensor("y_fw", ys)] + ([] if merge else [b.tensor("y_bw", ys)])
    b.op("BIDIRECTIONAL_SEQUENCE_LSTM", ins, outs, fused_activation_function=act, cell_clip=cell_clip,
         merge_outputs=merge, time_major=time_major)
    b.output(*outs)
    return b.build(), [r.standard_normal(s).astype(np.float32) for s in feeds_shapes]


BIDI_LSTM = [
    dict(),
    dict(merge=True),
    dict(time_major=False, peephole=True),
    # merged batch-major outputs with one batch row only: LiteRT then indexes each row's output state
    # by the merged width (2 x n_output) and reads past the state for the second row
    dict(projection=True, cifg=True, merge=True, time_major=False, n_batch=1),
    dict(cell_clip=0.5, act=RELU),
    dict(aux=True),
    dict(cross=True, n_aux=2),
    dict(cross=True, cifg=True, time_major=False, n_aux=4),
]


def _id(c):
    return "-".join(f"{k}={v}" for k, v in c.items()) or "plain"


@pytest.mark.parametrize("cfg", BIDI_LSTM, ids=_id)
def test_bidirectional_sequence_lstm(cfg):
    model, feeds = bidi_lstm_model(len(_id(cfg)), **cfg)
    compare(model, feeds, "BIDIRECTIONAL_SEQUENCE_LSTM", invokes=3, tol=1e-5)


def bidi_rnn_model(seed, *, n_batch=2, steps=4, n_input=3, units=5, merge=False, time_major=True, act=TANH,
                   aux=False, cross=False, n_aux=3):
    r = rng(seed)
    b = ModelBuilder()
    xs = (steps, n_batch, n_input) if time_major else (n_batch, steps, n_input)
    x = b.input("x", xs)
    ins = [x]
    for tag in ("fw", "bw"):
        ins += [b.const(f"{tag}w", _w(r, units, n_input)), b.const(f"{tag}r", _w(r, units, units, scale=0.3)),
                b.const(f"{tag}b", _w(r, units, scale=0.1)), b.tensor(f"{tag}h", (n_batch, units), is_variable=True)]
    feeds_shapes = [xs]
    if aux or cross:
        aux_shape = xs[:-1] + (n_aux,)
        ins.append(b.input("aux", aux_shape))
        feeds_shapes.append(aux_shape)
    else:
        ins.append(-1)
    ins += [b.const(f"{t}aw", _w(r, units, n_aux)) for t in ("fw", "bw")] if cross else [-1, -1]
    ys = xs[:-1] + (2 * units if merge else units,)
    outs = [b.tensor("y_fw", ys)] + ([] if merge else [b.tensor("y_bw", ys)])
    b.op("BIDIRECTIONAL_SEQUENCE_RNN", ins, outs, fused_activation_function=act, merge_outputs=merge,
         time_major=time_major)
    b.output(*outs)
    return b.build(), [r.standard_normal(s).astype(np.float32) for s in feeds_shapes]


BIDI_RNN = [dict(), dict(merge=True, act=RELU), dict(time_major=False), dict(time_major=False, merge=True),
            dict(aux=True), dict(aux=True, time_major=False, act=NONE),
            # cross-linked (time-major only with an aux input as wide as the input: LiteRT steps
            # through it by the input's width)
            dict(cross=True), dict(cross=True, n_aux=2, time_major=False), dict(cross=True, n_aux=5, time_major=False)]


@pytest.mark.parametrize("cfg", BIDI_RNN, ids=_id)
def test_bidirectional_sequence_rnn(cfg):
    model, feeds = bidi_rnn_model(len(_id(cfg)), **cfg)
    compare(model, feeds, "BIDIRECTIONAL_SEQUENCE_RNN", invokes=3, tol=1e-5)


def svdf_model(seed, *, batch=2, n_input=4, units=3, rank=2, memory=5, bias=True, act=NONE):
    r = rng(seed)
    b = ModelBuilder()
    x = b.input("x", (batch, n_input))
    ins = [x, b.const("wf", _w(r, units * rank, n_input)), b.const("wt", _w(r, units * rank, memory)),
           b.const("b", _w(r, units, scale=0.1)) if bias else -1,
           b.tensor("state", (batch, memory * units * rank), is_variable=True)]
    y = b.tensor("y", (batch, units))
    b.op("SVDF", ins, [y], rank=rank, fused_activation_function=act)
    b.output(y)
    return b.build(), [r.standard_normal((batch, n_input)).astype(np.float32)]


SVDF = [dict(), dict(rank=1, act=RELU), dict(bias=False, memory=1), dict(batch=3, units=4, rank=3, act=TANH)]


@pytest.mark.parametrize("cfg", SVDF, ids=_id)
def test_svdf(cfg):
    model, feeds = svdf_model(len(_id(cfg)), **cfg)
    compare(model, feeds, "SVDF", invokes=4, tol=1e-5)


def fp16_lstm_model(seed, *, seeded_state: bool):
    """UNIDIRECTIONAL_SEQUENCE_LSTM as the converter makes it with float16 weights: every weight is a
    float16 constant behind a DEQUANTIZE, and (``seeded_state``) so is each initial state, whose
    DEQUANTIZE writes the variable state tensor itself."""
    r = rng(seed)
    n_batch, steps, n_input, n_cell = 2, 3, 4, 5
    b = ModelBuilder()
    x = b.input("x", (n_batch, steps, n_input))

    def fp16(name, value, out=None):
        c = b.const(name + "_fp16", value.astype(np.float16))
        o = b.tensor(name, value.shape) if out is None else out
        b.op("DEQUANTIZE", [c], [o])
        return o

    ins = [x] + [fp16(f"x2{g}", _w(r, n_cell, n_input)) for g in "ifco"]
    ins += [fp16(f"h2{g}", _w(r, n_cell, n_cell)) for g in "ifco"] + [-1, -1, -1]
    ins += [fp16(f"b{g}", _w(r, n_cell, scale=0.2)) for g in "ifco"] + [-1, -1]
    for name in ("h", "c"):
        state = b.tensor(name, (n_batch, n_cell), is_variable=True)
        if seeded_state:
            fp16(name + "_init", _w(r, n_batch, n_cell), out=state)
        ins.append(state)
    ins += [-1] * 4
    y = b.tensor("y", (n_batch, steps, n_cell))
    b.op("UNIDIRECTIONAL_SEQUENCE_LSTM", ins, [y], fused_activation_function=TANH, time_major=False)
    b.output(y)
    return b.build(), r.standard_normal((n_batch, steps, n_input)).astype(np.float32)


@pytest.mark.parametrize("seeded_state", [False, True])
def test_float16_weight_lstm_with_dequantized_initial_state(seeded_state):
    """The "output state variable tensor was passed read-only" bug: a DEQUANTIZE writing the state
    variable.  LiteRT runs it once (constant input), so the state starts from its value and carries
    over; reset_all_variables zeroes it and the DEQUANTIZE does not run again."""
    model, feed = fp16_lstm_model(5, seeded_state=seeded_state)
    ref, ours = (run_invokes(model, [[feed]] * 4, litegpu=lg, reset_before=(3,)) for lg in (False, True))
    for a, e in zip(ours, ref, strict=True):
        assert_allclose_rel(a[0], e[0], 1e-5)
    assert not np.allclose(ref[0][0], ref[1][0])  # the state carried over
