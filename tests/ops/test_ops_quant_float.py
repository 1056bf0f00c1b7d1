"""DEQUANTIZE, QUANTIZE (incl. requantize) and DENSIFY (sparse constants) against LiteRT."""

from __future__ import annotations

import glob
import itertools

import flatbuffers
import numpy as np
import pytest
from kb_harness import WORST, compare, rng, run_ours
from litegpu.testing import ModelBuilder, run_litert


def _one_op(op, x, in_dtype, out_dtype, in_quant=None, out_quant=None, const=False, version=1):
    b = ModelBuilder()
    if const:
        xi = b.const("x", x, quant=in_quant, dtype=in_dtype)
    else:
        xi = b.input("x", x.shape, in_dtype, quant=in_quant)
    y = b.tensor("y", x.shape, out_dtype, quant=out_quant)
    b.op(op, [xi], [y], version=version)
    b.output(y)
    return b.build()


# ---------------------------------------------------------------- DEQUANTIZE

DEQ_CASES = [
    ("float16", None, (3, 5)),
    ("int8", (0.05, -3), (2, 7, 3)),
    ("uint8", (0.02, 128), (4, 4)),
    ("int16", (0.001, 0), (9,)),
    ("int8", (np.array([0.1, 0.02, 0.5], np.float32), np.array([0, 0, 0]), 1), (4, 3, 2)),
    ("int8", (np.array([0.1, 0.02, 0.5, 0.3], np.float32), np.array([0, 0, 0, 0]), 0), (4, 3)),
]


@pytest.mark.parametrize("const", [False, True], ids=["input", "const"])
@pytest.mark.parametrize("case", DEQ_CASES, ids=lambda c: f"{c[0]}-{'pc' if c[1] is not None and len(c[1]) == 3 else 'pt'}"
                         f"-{'x'.join(map(str, c[2]))}")
def test_dequantize(case, const):
    dtype, quant, shape = case
    r = rng(hash(shape) % 2**32)
    if dtype == "float16":
        x = (r.standard_normal(shape) * 10).astype(np.float16)
    else:
        info = np.iinfo(dtype)
        x = r.integers(info.min, info.max + 1, shape).astype(dtype)
    per_channel = quant is not None and len(quant) == 3
    version = {"float16": 3, "int16": 3, "uint8": 1}.get(dtype, 5 if per_channel else 2)
    model = _one_op("DEQUANTIZE", x, dtype, "float32", in_quant=quant, const=const, version=version)
    if const:
        # A constant-input DEQUANTIZE is computed once at prepare; the output is the graph output.
        ref = run_litert(model, [])[0]
        ours = run_ours(model, [])[0]
        np.testing.assert_array_equal(ours, ref)
        WORST["DEQUANTIZE"] = max(WORST.get("DEQUANTIZE", 0.0), 0.0)
    else:
        compare(model, [x], "DEQUANTIZE", tol=0.0)


# ---------------------------------------------------------------- QUANTIZE (float -> int)

Q_CASES = [
    ("int8", (0.05, -3)),
    ("uint8", (0.02, 128)),
    ("int16", (0.001, 0)),
    ("int8", (0.25, 0)),  # exact halves: round half away from zero
    ("uint8", (0.5, 10)),
]


@pytest.mark.parametrize("case", Q_CASES, ids=lambda c: f"{c[0]}-s{c[1][0]}-z{c[1][1]}")
def test_quantize_float(case):
    dtype, quant = case
    r = rng(hash(case) % 2**32)
    scale = quant[0]
    info = np.iinfo(dtype)
    span = (info.max - info.min) * scale
    x = r.uniform(-0.7 * span, 0.7 * span, (5, 6, 7)).astype(np.float32)
    # Exact halves and saturating values.
    halves = (np.arange(-20, 20) + 0.5).astype(np.float32) * np.float32(scale)
    x.reshape(-1)[: halves.size] = halves
    x.reshape(-1)[-4:] = [1e6, -1e6, span, -span]
    model = _one_op("QUANTIZE", x, "float32", dtype, out_quant=quant, version=2 if dtype == "int16" else 1)
    compare(model, [x], "QUANTIZE")


def test_quantize_per_channel():
    r = rng(21)
    x = r.uniform(-3, 3, (3, 4, 5)).astype(np.float32)
    quant = (np.array([0.02, 0.05, 0.1, 0.01], np.float32), np.array([0, 0, 0, 0]), 1)
    model = _one_op("QUANTIZE", x, "float32", "int8", out_quant=quant, version=3)
    try:
        ref = run_litert(model, [x])[0]
    except RuntimeError as e:
        pytest.skip(f"LiteRT 2.3 refuses per-channel QUANTIZE: {e}")
    ours = run_ours(model, [x])[0]
    np.testing.assert_array_equal(ours, ref)


# ---------------------------------------------------------------- QUANTIZE (requantize)

RQ_CASES = [
    ("int8", (0.05, -3), "uint8", (0.05, 125)),  # the int8 -> uint8 shift
    ("uint8", (0.02, 128), "int8", (0.02, 0)),
    ("int8", (0.05, -3), "int8", (0.11, 7)),
    ("uint8", (0.1, 100), "uint8", (0.037, 3)),
    ("int8", (0.3, 10), "uint8", (0.05, 128)),  # scale up: saturation
    ("int16", (0.001, 0), "int8", (0.02, -1)),
    ("int16", (0.002, 0), "int16", (0.0007, 0)),
]


@pytest.mark.parametrize("case", RQ_CASES, ids=lambda c: f"{c[0]}-{c[2]}-{c[1][0]}-{c[3][0]}")
def test_requantize(case):
    in_dt, in_q, out_dt, out_q = case
    r = rng(hash(case) % 2**32)
    info = np.iinfo(in_dt)
    x = r.integers(info.min, info.max + 1, (4, 9, 5)).astype(in_dt)
    model = _one_op("QUANTIZE", x, in_dt, out_dt, in_quant=in_q, out_quant=out_q,
                    version=2 if "int16" in (in_dt, out_dt) else 1)
    compare(model, [x], "QUANTIZE(requant)")


# ---------------------------------------------------------------- DENSIFY


def _encode_sparse(dense: np.ndarray, trav, bmap, bsize, formats):
    """A test-only TFLite sparse encoder: (values, dim metadata list of (format, dense_size, seg, idx))."""
    rank = dense.ndim
    inner = dict(zip(bmap, bsize, strict=True))
    split_shape, axes_outer, axes_inner = [], [], {}
    for d in range(rank):
        if d in inner:
            axes_outer.append(len(split_shape))
            split_shape += [dense.shape[d] // inner[d], inner[d]]
            axes_inner[d] = len(split_shape) - 1
        else:
            axes_outer.append(len(split_shape))
            split_shape.append(dense.shape[d])
    expanded = dense.reshape(split_shape).transpose(axes_outer + [axes_inner[d] for d in bmap])
    e = expanded.transpose(trav)
    levels = len(trav)
    values, segs, inds = [], {lv: [0] for lv in range(levels)}, {lv: [] for lv in range(levels)}

    def rec(lv, sub):
        if lv == levels:
            values.append(sub)
            return
        for i in range(sub.shape[0]):
            if formats[lv] == 0:
                rec(lv + 1, sub[i])
            elif np.any(sub[i] != 0):
                inds[lv].append(i)
                rec(lv + 1, sub[i])
        if formats[lv] == 1:
            segs[lv].append(len(inds[lv]))

    rec(0, e)
    meta = [(formats[lv], e.shape[lv], segs[lv], inds[lv]) for lv in range(levels)]
    return np.array(values, dense.dtype), meta


def _densify_model(dense: np.ndarray, trav, bmap, bsize, formats, dequantize=False) -> bytes:
    from ai_edge_litert import schema_py_generated as S

    values, meta = _encode_sparse(dense, trav, bmap, bsize, formats)
    b = ModelBuilder()
    sp = b.const("sparse", values)
    y = b.tensor("dense", dense.shape, dense.dtype.name)
    b.op("DENSIFY", [sp], [y])
    out = y
    if dequantize:
        out = b.tensor("f32", dense.shape, "float32")
        b.op("DEQUANTIZE", [y], [out], version=3)
    b.output(out)
    m = S.ModelT.InitFromPackedBuf(b.build(), 0)
    t = m.subgraphs[0].tensors[sp]
    t.shape = list(dense.shape)
    spt = S.SparsityParametersT()
    spt.traversalOrder, spt.blockMap = list(trav), list(bmap)
    spt.dimMetadata = []
    for fmt, size, seg, idx in meta:
        dm = S.DimensionMetadataT()
        dm.format, dm.denseSize = fmt, size
        if fmt == 1:
            dm.arraySegmentsType, dm.arrayIndicesType = S.SparseIndexVector.Int32Vector, S.SparseIndexVector.Int32Vector
            dm.arraySegments, dm.arrayIndices = S.Int32VectorT(), S.Int32VectorT()
            dm.arraySegments.values, dm.arrayIndices.values = list(seg), list(idx)
        spt.dimMetadata.append(dm)
    t.sparsity = spt
    fb = flatbuffers.Builder(1024)
    fb.Finish(m.Pack(fb), file_identifier=b"TFL3")
    return bytes(fb.Output())


def _sparse_matrix(shape, density, dtype, seed):
    r = rng(seed)
    x = r.standard_normal(shape).astype(dtype)
    x[r.random(shape) > density] = 0
    return x


# (shape, traversal order, block map, block sizes, formats per level)
DENSIFY_CASES = [
    ((6, 8), (0, 1), (), (), (0, 1)),
    ((6, 8), (1, 0), (), (), (0, 1)),
    ((5, 7), (0, 1), (), (), (1, 1)),
    ((8, 12), (0, 1, 2, 3), (0, 1), (2, 4), (0, 1, 0, 0)),
    ((8, 8), (0, 1, 2), (1,), (4,), (0, 1, 0)),
    ((3, 4, 6), (0, 1, 2), (), (), (0, 1, 1)),
    ((4, 6, 5), (2, 0, 1), (), (), (0, 0, 1)),
]


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
@pytest.mark.parametrize("case", DENSIFY_CASES, ids=lambda c: f"{'x'.join(map(str, c[0]))}-t{''.join(map(str, c[1]))}"
                         f"-b{''.join(map(str, c[2]))}-f{''.join(map(str, c[4]))}")
def test_densify(case, dtype):
    shape, trav, bmap, bsize, formats = case
    dense = _sparse_matrix(shape, 0.3, dtype, hash(case) % 2**32)
    if bmap:  # block sparsity: zero whole blocks
        dense = dense.copy()
    model = _densify_model(dense, trav, bmap, bsize, formats)
    ref = run_litert(model, [])[0]
    np.testing.assert_array_equal(ref, dense)  # the encoder is right
    np.testing.assert_array_equal(run_ours(model, [])[0], ref)


def test_densify_then_dequantize():
    dense = _sparse_matrix((16, 3, 3, 8), 0.4, "float16", 77)
    model = _densify_model(dense, (0, 1, 2, 3), (), (), (0, 0, 0, 1), dequantize=True)
    compare(model, [], "DENSIFY+DEQUANTIZE", tol=0.0)


def test_densify_helper_on_reader_ir():
    """litegpu.cpu.sparse.densify on the IR the reader produces (the GPU core's entry point)."""
    from litegpu._reader import read_model
    from litegpu.cpu.sparse import densify

    dense = _sparse_matrix((8, 12), 0.3, "float32", 5)
    model = read_model(_densify_model(dense, (0, 1, 2, 3), (0, 1), (2, 4), (0, 1, 0, 0)))
    t = [t for t in model.main.tensors if t.sparsity is not None][0]
    np.testing.assert_array_equal(densify(t), dense)


def _mediapipe_sparse_models():
    return sorted(glob.glob("/tmp/dl/mpx/mediapipe/modules/**/*sparse*.tflite", recursive=True)) + sorted(
        glob.glob("/tmp/dl/mpx/mediapipe/modules/pose_detection/*.tflite"))


@pytest.mark.parametrize("path", _mediapipe_sparse_models() or ["<missing>"])
def test_densify_mediapipe_weights(path):
    """Every DENSIFY output of a real sparse MediaPipe model equals LiteRT's."""
    if path == "<missing>":
        pytest.skip("no local MediaPipe sparse models (/tmp/dl/mpx)")
    from ai_edge_litert import interpreter as litert
    from litegpu._reader import read_model
    from litegpu.cpu.sparse import densify

    model = read_model(path)
    it = litert.Interpreter(model_path=path, experimental_preserve_all_tensors=True, num_threads=1,
                            experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    for d in it.get_input_details():
        it.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
    it.invoke()
    n = 0
    for op in model.main.operators:
        if op.name == "DENSIFY":
            src = model.main.tensors[op.inputs[0]]
            np.testing.assert_array_equal(densify(src), it.get_tensor(op.outputs[0]))
            n += 1
    assert n > 0


def test_encoder_roundtrip_all_formats():
    """Sanity of the decoder on every dense/CSR combination of a 3-D tensor."""
    from litegpu._ir import DimensionMetadata, Sparsity
    from litegpu.cpu.sparse import densify_values

    dense = _sparse_matrix((3, 4, 5), 0.35, "float32", 3)
    for formats in itertools.product((0, 1), repeat=3):
        for trav in itertools.permutations(range(3)):
            values, meta = _encode_sparse(dense, trav, (), (), formats)
            sp = Sparsity(tuple(trav), (), tuple(
                DimensionMetadata(f, s, np.array(seg, np.int32) if f else None, np.array(idx, np.int32) if f else None)
                for f, s, seg, idx in meta))
            np.testing.assert_array_equal(densify_values(values, sp, dense.shape), dense)


def test_zz_report_worst():
    for k, v in sorted(WORST.items()):
        print(f"worst rel err {k}: {v:.3e}")
