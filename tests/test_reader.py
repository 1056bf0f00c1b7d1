"""The .tflite reader: real models agree with LiteRT, every feature round-trips, bad files are refused
with a ModelError that names the problem."""

from __future__ import annotations

import collections
import importlib
import struct
from pathlib import Path

import flatbuffers
import numpy as np
import pytest
from litegpu import ModelError, read_model
from litegpu.testing import ModelBuilder, run_litert

litert = pytest.importorskip("ai_edge_litert.interpreter")

TESTDATA = Path("/work/shared/models/litert-testdata")
MEDIAPIPE = Path("/tmp/dl/mpx/mediapipe/modules")
TESTDATA_FILES = sorted(TESTDATA.glob("*.bin")) if TESTDATA.is_dir() else []
MEDIAPIPE_FILES = sorted(MEDIAPIPE.rglob("*.tflite")) if MEDIAPIPE.is_dir() else []
needs_mediapipe = pytest.mark.skipif(not MEDIAPIPE_FILES, reason=f"MediaPipe models not found in {MEDIAPIPE}")

# numpy type LiteRT's get_tensor_details reports for our non-numpy dtype names
_LITERT_DTYPE = {"string": np.bytes_, "resource": np.object_, "variant": np.object_}


def _litert(model: str | bytes):
    kw = {"experimental_op_resolver_type": litert.OpResolverType.BUILTIN_REF}
    if isinstance(model, bytes):
        return litert.Interpreter(model_content=model, **kw)
    return litert.Interpreter(model_path=str(model), **kw)


def _litert_details(it) -> tuple[list[dict], list[dict]]:
    """LiteRT's view of subgraph 0 as read from the file (before allocate_tensors, which adds
    scratch tensors and propagates shapes)."""
    return it._get_ops_details(), it.get_tensor_details()


def _assert_matches_litert(m, details: tuple[list[dict], list[dict]]) -> None:
    """Subgraph 0 of ``m`` has LiteRT's operators (names, inputs, outputs) and tensors
    (names, shapes, signatures, dtypes, quantization, sparsity)."""
    ops, tensors = details

    def name(op):  # LiteRT names every unresolved Flex (TensorFlow) custom op just "Flex"
        return "Flex" if op.is_custom and op.name.startswith("Flex") else op.name

    assert collections.Counter(d["op_name"] for d in ops) == collections.Counter(map(name, m.main.operators))
    for d in ops:
        op = m.main.operators[d["index"]]
        assert d["op_name"] == name(op)
        assert tuple(d["inputs"].tolist()) == op.inputs
        assert tuple(d["outputs"].tolist()) == op.outputs
    assert len(tensors) == len(m.main.tensors)
    for d in tensors:
        t = m.main.tensors[d["index"]]
        assert d["name"] == t.name
        assert tuple(d["shape"].tolist()) == t.shape, t.name
        assert tuple(d["shape_signature"].tolist()) == (t.shape if t.shape_signature is None else t.shape_signature)
        expect = _LITERT_DTYPE[t.dtype] if t.dtype in _LITERT_DTYPE else np.dtype(t.dtype).type
        assert d["dtype"] == expect, t.name
        qp = d["quantization_parameters"]
        if t.quantization is None:
            assert qp["scales"].size == 0, t.name
        else:
            np.testing.assert_array_equal(qp["scales"], t.quantization.scale)
            np.testing.assert_array_equal(qp["zero_points"], t.quantization.zero_point)
            assert qp["quantized_dimension"] == t.quantization.quantized_dimension
        sp = d["sparsity_parameters"]
        assert bool(sp) == (t.sparsity is not None), t.name
        if sp:
            assert tuple(sp["traversal_order"].tolist()) == t.sparsity.traversal_order
            assert tuple(sp.get("block_map", np.zeros(0)).tolist()) == t.sparsity.block_map
            assert len(sp["dim_metadata"]) == len(t.sparsity.dim_metadata)
            for ref, dm in zip(sp["dim_metadata"], t.sparsity.dim_metadata, strict=True):
                assert ref["format"] == dm.format
                if dm.format == 0:
                    assert ref["dense_size"] == dm.dense_size
                else:
                    np.testing.assert_array_equal(ref["array_segments"], dm.array_segments)
                    np.testing.assert_array_equal(ref["array_indices"], dm.array_indices)


# ---- real models ------------------------------------------------------------------------------------


@needs_mediapipe
@pytest.mark.mediapipe
@pytest.mark.parametrize("path", MEDIAPIPE_FILES, ids=lambda p: p.stem)
def test_mediapipe_model_matches_litert(path):
    m = read_model(path)
    it = _litert(path)
    _assert_matches_litert(m, _litert_details(it))
    assert m.source == str(path) and m.nbytes == path.stat().st_size
    # dense constants hold exactly the bytes LiteRT uses (read-only tensors need no allocation)
    checked = 0
    for t in m.main.tensors:
        if t.data is not None and t.sparsity is None and t.dtype != "string":
            np.testing.assert_array_equal(t.data, it.get_tensor(t.index))
            assert not t.data.flags.writeable
            checked += 1
    assert checked > 0


@needs_mediapipe
@pytest.mark.mediapipe
@pytest.mark.parametrize("name", ["face_detection_full_range_sparse", "pose_detection"])
def test_mediapipe_sparse_models_expose_sparsity(name):
    (path,) = [p for p in MEDIAPIPE_FILES if p.stem == name] or pytest.skip(f"{name} not present")
    m = read_model(path)
    sparse = [t for t in m.main.tensors if t.sparsity is not None]
    assert sparse
    for t in sparse:
        csr = [d for d in t.sparsity.dim_metadata if d.format == 1]
        assert csr and csr[0].array_segments is not None and csr[0].array_indices is not None
        # the buffer holds exactly the stored (non-zero) values: one per CSR index times the dense block
        dense_after = np.prod([d.dense_size for d in t.sparsity.dim_metadata[t.sparsity.dim_metadata.index(csr[0]) + 1:]])
        assert t.data.ndim == 1 and t.data.size == csr[0].array_indices.size * dense_after
    assert any(o.opcode == "DENSIFY" for o in m.main.operators)


@pytest.mark.skipif(not TESTDATA_FILES, reason=f"{TESTDATA} not found")
@pytest.mark.parametrize("path", TESTDATA_FILES, ids=lambda p: p.stem)
def test_litert_testdata(path):
    """Each file loads or raises ModelError; a file LiteRT takes in (and prepares) loads and matches;
    files LiteRT refuses as no flatbuffer / no subgraph are refused in LiteRT's words."""
    details = litert_error = None
    try:
        it = _litert(path)
        details = _litert_details(it)
        it.allocate_tensors()
    except (ValueError, RuntimeError) as e:
        litert_error = str(e)
    try:
        m = read_model(path)
    except ModelError as e:
        if litert_error is not None:
            for words in ("The model is not a valid Flatbuffer buffer", "No subgraph in the model."):
                if words in litert_error:
                    assert words in str(e)
        assert litert_error is not None, f"LiteRT runs {path.name} but we refuse it: {e}"
        return
    assert litert_error is None or not any(
        w in litert_error for w in ("not a valid Flatbuffer", "No subgraph")), litert_error
    if details is not None:
        _assert_matches_litert(m, details)


@pytest.mark.skipif(not TESTDATA_FILES, reason=f"{TESTDATA} not found")
def test_litert_testdata_features():
    def load(name):
        return read_model(TESTDATA / f"{name}.bin")

    m = load("core__multi_signatures")
    assert {s.key for s in m.signatures} == {"add", "sub"} or len(m.signatures) == 2
    it = _litert(TESTDATA / "core__multi_signatures.bin")
    ref = it.get_signature_list()
    assert {s.key: {"inputs": sorted(s.inputs), "outputs": sorted(s.outputs)} for s in m.signatures} == {
        k: {"inputs": sorted(v["inputs"]), "outputs": sorted(v["outputs"])} for k, v in ref.items()}
    m = load("core__nested_while")
    assert len(m.subgraphs) == 5
    w = m.main.operators[0]
    assert w.opcode == "WHILE" and {"cond_subgraph_index", "body_subgraph_index"} <= set(w.options)
    m = load("core__test_custom_node_with_init_data")
    (op,) = m.main.operators
    assert op.is_custom and op.name == "the_custom_code" and op.custom_options == b"ABC"
    m = load("core__sparse_tensor")
    t = m.main.tensors[0]
    assert t.sparsity.traversal_order == (0, 1, 2, 3) and t.sparsity.block_map == (0, 1)
    np.testing.assert_array_equal(t.sparsity.dim_metadata[1].array_segments, [0, 2, 3])
    m = load("core__with_metadata")
    assert m.metadata["min_runtime_version"].startswith(b"1.5.0")
    assert "NPU_BYTE_CODE" in m.metadata
    m = load("core__zero_size_constant")
    assert m.main.tensors[1].shape == (0,) and m.main.tensors[1].is_constant


# ---- features, through the ModelBuilder ----------------------------------------------------------------


def _conv_model():
    rng = np.random.default_rng(0)
    b = ModelBuilder(description="conv test")
    x = b.input("x", (1, 6, 6, 3), "int8", quant=(0.5, -3))
    scales = np.array([0.01, 0.02, 0.03, 0.04], np.float32)
    w = b.const("conv1/weights", rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8),
                quant=(scales, np.zeros(4, np.int64), 0))
    bias = b.const("conv1/bias", np.arange(4, dtype=np.int32), quant=(scales * 0.5, np.zeros(4, np.int64), 0))
    y = b.tensor("y", (1, 3, 3, 4), "int8", quant=(0.25, 5))
    b.op("CONV_2D", [x, w, bias], [y], padding=0, stride_w=2, stride_h=2, dilation_w_factor=1,
         dilation_h_factor=1, fused_activation_function=3, version=3)
    b.output(y)
    b.signature("serving_default", {"x": x}, {"y": y})
    return b


def test_conv_model_roundtrip_and_matches_litert():
    data = _conv_model().build()
    m = read_model(data)
    _assert_matches_litert(m, _litert_details(_litert(data)))
    assert m.version == 3 and m.description == "conv test" and m.nbytes == len(data) and m.source is None
    (op,) = m.main.operators
    assert op.opcode == "CONV_2D" and op.version == 3 and not op.is_custom
    assert op.options == {"padding": 0, "stride_w": 2, "stride_h": 2, "fused_activation_function": 3,
                          "dilation_w_factor": 1, "dilation_h_factor": 1, "quantized_bias_type": 0}
    w = m.main.tensors[op.inputs[1]]
    assert w.name == "conv1/weights" and w.dtype == "int8" and w.shape == (4, 3, 3, 3)
    assert w.quantization.per_channel and w.quantization.quantized_dimension == 0
    assert w.quantization.scale.dtype == np.float32 and w.quantization.zero_point.dtype == np.int64
    assert w.data.shape == (4, 3, 3, 3) and not w.data.flags.writeable
    assert np.shares_memory(w.data, np.frombuffer(data, np.uint8))  # zero-copy view of the model bytes
    x = m.main.tensors[m.main.inputs[0]]
    assert x.quantization.scale.tolist() == [0.5] and x.quantization.zero_point.tolist() == [-3]
    assert x.data is None and not x.is_constant
    (sig,) = m.signatures
    assert sig.key == "serving_default" and sig.subgraph_index == 0
    assert dict(sig.inputs) == {"x": 0} and dict(sig.outputs) == {"y": m.main.outputs[0]}


def test_sources_path_bytes_bytearray_memoryview(tmp_path):
    data = _conv_model().build()
    path = tmp_path / "conv.tflite"
    path.write_bytes(data)
    ref = read_model(data)
    wref = ref.main.tensors[1].data
    for source in (path, str(path), bytearray(data), memoryview(data), memoryview(bytearray(data))):
        m = read_model(source)
        np.testing.assert_array_equal(m.main.tensors[1].data, wref)
        assert not m.main.tensors[1].data.flags.writeable
        assert m.nbytes == len(data)
    m = read_model(path)
    assert m.source == str(path)
    import mmap
    assert isinstance(m.raw, mmap.mmap)
    # a bytearray is copied: changing it afterwards does not change the model
    ba = bytearray(data)
    m = read_model(ba)
    ba[:] = bytes(len(ba))
    np.testing.assert_array_equal(m.main.tensors[1].data, wref)


def test_all_features_roundtrip():
    b = ModelBuilder()
    x = b.input("x", (1, 4), "float32", shape_signature=(-1, 4))
    state = b.tensor("state", (1, 4), "float32", is_variable=True)
    c16 = b.const("c16", np.array([[0.5, -1.25, 3.0, 65504.0]], np.float16))
    c = b.tensor("c", (1, 4), "float32")
    b.op("DEQUANTIZE", [c16], [c])
    s = b.tensor("s", (1, 4), "float32")
    b.op("ADD", [x, c], [s], fused_activation_function=1)
    y = b.tensor("y", (1, 4), "float32")
    b.custom_op("MyOp", [s, -1, state], [y], custom_options=b"\x01\x02\x03")
    b.output(y)
    b.add_metadata("min_runtime_version", b"1.14.0")
    b.add_metadata("blob", bytes(range(256)))
    b.signature("run", {"input": x}, {"output": y})
    # subgraph 1: WHILE cond; subgraph 2: body (not called from main: just carried)
    cond = b.add_subgraph("cond")
    ci = cond.input("i", (), "int32")
    lim = cond.const("lim", np.array(3, np.int32))
    co = cond.tensor("lt", (), "bool")
    cond.op("LESS", [ci, lim], [co])
    cond.output(co)
    body = b.add_subgraph("body")
    bi = body.input("i", (), "int32")
    one = body.const("one", np.array(1, np.int32))
    bo = body.tensor("j", (), "int32")
    body.op("ADD", [bi, one], [bo])
    body.output(bo)
    loop = b.add_subgraph("loop")
    li = loop.input("i", (), "int32")
    lo = loop.tensor("o", (), "int32")
    loop.op("WHILE", [li], [lo], cond_subgraph_index=1, body_subgraph_index=2)
    loop.output(lo)
    m = read_model(b.build())

    assert [sg.name for sg in m.subgraphs] == ["main", "cond", "body", "loop"]
    t = m.main.tensors
    assert t[x].shape_signature == (-1, 4) and t[x].is_dynamic
    assert t[state].is_variable and t[state].data is None
    assert t[c16].dtype == "float16" and t[c16].data.dtype == np.float16
    np.testing.assert_array_equal(t[c16].data, [[0.5, -1.25, 3.0, 65504.0]])
    add = m.main.operators[1]
    assert add.opcode == "ADD" and add.options["fused_activation_function"] == 1
    custom = m.main.operators[2]
    assert custom.opcode == "CUSTOM" and custom.name == "MyOp" and custom.custom_code == "MyOp"
    assert custom.inputs == (s, -1, state) and custom.custom_options == b"\x01\x02\x03"
    assert m.metadata == {"min_runtime_version": b"1.14.0", "blob": bytes(range(256))}
    assert m.signatures[0].inputs == {"input": x}
    assert m.subgraphs[1].tensors[lim].data.shape == () and m.subgraphs[1].tensors[lim].data == 3
    w = m.subgraphs[3].operators[0]
    assert w.options == {"cond_subgraph_index": 1, "body_subgraph_index": 2}


def test_float16_constant_matches_litert():
    vals = np.array([[1.5, -2.0, 0.099975586, 1000.0]], np.float16)
    b = ModelBuilder()
    c16 = b.const("c16", vals)
    c = b.tensor("c", (1, 4), "float32")
    b.op("DEQUANTIZE", [c16], [c])
    x = b.input("x", (1, 4))
    y = b.tensor("y", (1, 4))
    b.op("ADD", [x, c], [y])
    b.output(y)
    data = b.build()
    (out,) = run_litert(data, [np.zeros((1, 4), np.float32)])
    m = read_model(data)
    np.testing.assert_array_equal(m.main.tensors[c16].data.astype(np.float32), out)


def test_int4_constants_unpacked_low_nibble_first():
    b = ModelBuilder()
    # values 1, 2, -8, -1, 7 packed two per byte, low nibble first: 0x21, 0xF8, 0x07
    t = b.tensor("w4", (5,), "int4", data=bytes([0x21, 0xF8, 0x07]))
    u = b.tensor("w4b", (2, 2), "int4", data=bytes([0x9A, 0x3C]))
    b.output(t, u)
    m = read_model(b.build())
    w = m.main.tensors[t]
    assert w.dtype == "int4" and w.data.dtype == np.int8
    assert w.data.tolist() == [1, 2, -8, -1, 7]
    assert m.main.tensors[u].data.tolist() == [[-6, -7], [-4, 3]]
    b.tensors[t].shape = (7,)  # 7 int4 values need 4 bytes, the buffer has 3
    with pytest.raises(ModelError, match=r"buffer 1 holds 3 bytes but shape \(7\) int4 needs 4"):
        read_model(b.build())


def test_newer_packed_and_float8_types(monkeypatch):
    """Types of LiteRT 2.3's schema newer than the ``tflite`` package: uint4, int2, float8."""
    from litegpu.testing import _builder

    for name, code in (("int2", 19), ("uint4", 20), ("float8_e4m3fn", 21), ("float8_e5m2", 22)):
        monkeypatch.setitem(_builder._DTYPES, name, code)
    b = ModelBuilder()
    u4 = b.tensor("u4", (3,), "uint4", data=bytes([0xF1, 0x07]))
    i2 = b.tensor("i2", (5,), "int2", data=bytes([0b11100100, 0b01]))
    f8 = b.tensor("f8", (2,), "float8_e4m3fn", data=bytes([0x38, 0xB8]))
    e5 = b.tensor("e5", (1,), "float8_e5m2")
    b.output(u4, i2, f8, e5)
    t = read_model(b.build()).main.tensors
    assert t[u4].dtype == "uint4" and t[u4].data.tolist() == [1, 15, 7]
    assert t[i2].dtype == "int2" and t[i2].data.tolist() == [0, 1, -2, -1, 1]
    assert t[f8].dtype == "float8_e4m3fn" and t[f8].data.tolist() == [0x38, 0xB8]
    assert t[e5].dtype == "float8_e5m2"


def test_string_and_exotic_dtypes():
    strings = [b"ab", b"", b"xyz"]
    n = len(strings)
    offsets = np.cumsum([4 * (n + 2)] + [len(s) for s in strings]).astype("<i4")
    raw = np.int32(n).tobytes() + offsets.tobytes() + b"".join(strings)
    b = ModelBuilder()
    st = b.tensor("s", (3,), "string", data=raw)
    bf = b.tensor("bf", (2,), "bfloat16", data=np.array([0x3F80, 0xC000], np.uint16).tobytes())
    cx = b.const("cx", np.array([1 + 2j], np.complex64))
    r = b.tensor("r", (), "resource")
    v = b.tensor("v", (), "variant")
    i4 = b.tensor("i4", (2,), "int4")
    b.output(st, bf, cx, r, v, i4)
    m = read_model(b.build())
    t = m.main.tensors
    assert t[st].dtype == "string" and t[st].data.dtype == np.uint8 and t[st].data.tobytes() == raw
    assert t[bf].dtype == "bfloat16" and t[bf].data.view(np.uint16).tolist() == [0x3F80, 0xC000]
    assert t[cx].dtype == "complex64" and t[cx].data.tolist() == [1 + 2j]
    assert [t[i].dtype for i in (r, v, i4)] == ["resource", "variant", "int4"]
    # a string buffer whose count disagrees with the shape is refused
    b.tensors[st].shape = (4,)
    with pytest.raises(ModelError, match=r"tensor 0 \('s'\): string buffer 1 holds 3 strings"):
        read_model(b.build())


def _external_buffer_model(const: np.ndarray) -> bytes:
    """ADD(x, c) where c's data lies after the flatbuffer (Buffer.offset/size, as in >2 GB models)."""
    mods = {n: importlib.import_module(f"tflite.{n}") for n in
            ("Buffer", "Model", "Operator", "OperatorCode", "SubGraph", "Tensor")}
    Buffer, Model, Operator = mods["Buffer"], mods["Model"], mods["Operator"]
    OperatorCode, SubGraph, Tensor = mods["OperatorCode"], mods["SubGraph"], mods["Tensor"]
    payload = const.astype("<f4").tobytes()

    def build(offset: int) -> bytes:
        b = flatbuffers.Builder(0)
        bufs = []
        for i in range(3):
            Buffer.BufferStart(b)
            if i == 2:
                Buffer.BufferAddOffset(b, offset)
                Buffer.BufferAddSize(b, len(payload))
            bufs.append(Buffer.BufferEnd(b))
        tens = []
        for name, buf in (("x", 0), ("c", 2), ("y", 0)):
            nm = b.CreateString(name)
            Tensor.TensorStartShapeVector(b, 2)
            b.PrependInt32(const.shape[1])
            b.PrependInt32(const.shape[0])
            shp = b.EndVector()
            Tensor.TensorStart(b)
            Tensor.TensorAddShape(b, shp)
            Tensor.TensorAddBuffer(b, buf)
            Tensor.TensorAddName(b, nm)
            tens.append(Tensor.TensorEnd(b))

        def ivec(start, vals):
            start(b, len(vals))
            for v in reversed(vals):
                b.PrependInt32(v)
            return b.EndVector()

        ins = ivec(Operator.OperatorStartInputsVector, [0, 1])
        outs = ivec(Operator.OperatorStartOutputsVector, [2])
        Operator.OperatorStart(b)
        Operator.OperatorAddOpcodeIndex(b, 0)
        Operator.OperatorAddInputs(b, ins)
        Operator.OperatorAddOutputs(b, outs)
        op = Operator.OperatorEnd(b)
        OperatorCode.OperatorCodeStart(b)
        OperatorCode.OperatorCodeAddDeprecatedBuiltinCode(b, 0)
        OperatorCode.OperatorCodeAddBuiltinCode(b, 0)
        OperatorCode.OperatorCodeAddVersion(b, 1)
        oc = OperatorCode.OperatorCodeEnd(b)
        Model.ModelStartBuffersVector(b, 3)
        for o in reversed(bufs):
            b.PrependUOffsetTRelative(o)
        bufv = b.EndVector()
        SubGraph.SubGraphStartTensorsVector(b, 3)
        for o in reversed(tens):
            b.PrependUOffsetTRelative(o)
        tv = b.EndVector()
        SubGraph.SubGraphStartOperatorsVector(b, 1)
        b.PrependUOffsetTRelative(op)
        ov = b.EndVector()
        sgi = ivec(SubGraph.SubGraphStartInputsVector, [0])
        sgo = ivec(SubGraph.SubGraphStartOutputsVector, [2])
        SubGraph.SubGraphStart(b)
        SubGraph.SubGraphAddTensors(b, tv)
        SubGraph.SubGraphAddOperators(b, ov)
        SubGraph.SubGraphAddInputs(b, sgi)
        SubGraph.SubGraphAddOutputs(b, sgo)
        sg = SubGraph.SubGraphEnd(b)
        Model.ModelStartOperatorCodesVector(b, 1)
        b.PrependUOffsetTRelative(oc)
        ocv = b.EndVector()
        Model.ModelStartSubgraphsVector(b, 1)
        b.PrependUOffsetTRelative(sg)
        sgv = b.EndVector()
        Model.ModelStart(b)
        Model.ModelAddVersion(b, 3)
        Model.ModelAddOperatorCodes(b, ocv)
        Model.ModelAddSubgraphs(b, sgv)
        Model.ModelAddBuffers(b, bufv)
        b.Finish(Model.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())

    head = build(1 << 40)  # same size as the final one: the offset is a fixed-width field
    offset = (len(head) + 15) // 16 * 16
    head = build(offset)
    return head + bytes(offset - len(head)) + payload


def test_buffers_stored_after_the_flatbuffer(tmp_path):
    const = np.array([[1.0, -2.0, 3.5, 8.0]], np.float32)
    data = _external_buffer_model(const)
    x = np.array([[0.5, 0.5, 0.5, 0.5]], np.float32)
    (ref,) = run_litert(data, [x])  # LiteRT reads the same model
    for source in (data, tmp_path / "ext.tflite"):
        if isinstance(source, Path):
            source.write_bytes(data)
        m = read_model(source)
        c = m.main.tensors[1]
        np.testing.assert_array_equal(c.data, const)
        np.testing.assert_array_equal(x + c.data, ref)
    # truncate the appended data: the buffer now runs past the end of the file
    with pytest.raises(ModelError, match=r"buffer 2: data at offset \d+, 16 bytes, runs past the end"):
        read_model(data[:-4])


# ---- refusals -----------------------------------------------------------------------------------------


def _simple():
    b = ModelBuilder()
    x = b.input("x", (2, 3))
    w = b.const("w", np.ones((2, 3), np.float32))
    y = b.tensor("y", (2, 3))
    b.op("ADD", [x, w], [y])
    b.output(y)
    return b, x, w, y


def _refused(b: ModelBuilder | bytes, pattern: str) -> ModelError:
    data = b if isinstance(b, (bytes, bytearray)) else b.build()
    with pytest.raises(ModelError, match=pattern) as e:
        read_model(data)
    return e.value


def test_refuses_constant_of_wrong_size():
    b = ModelBuilder()
    x = b.input("x", (1, 5, 5, 3))
    w = b.tensor("conv1/weights", (8, 3, 3, 3), "float32", data=bytes(100))
    y = b.tensor("y", (1, 3, 3, 8))
    b.op("CONV_2D", [x, w, -1], [y], padding=1)
    b.output(y)
    err = _refused(b, "needs 864")
    assert str(err) == "tensor 1 ('conv1/weights'): buffer 1 holds 100 bytes but shape (8,3,3,3) float32 needs 864"


def test_refuses_bad_indices():
    b, x, w, y = _simple()
    b.ops[0].inputs = [x, 7]
    _refused(b, r"operator 0 \(ADD\) inputs: tensor index 7 at position 1 is out of range \(the subgraph has 3")
    b.ops[0].inputs = [x, -2]
    _refused(b, "tensor index -2")
    b.ops[0].inputs = [x, -1]  # -1 is an omitted optional input: fine
    assert read_model(b.build()).main.operators[0].inputs == (x, -1)
    b, *_ = _simple()
    b.inputs = [-1]
    _refused(b, "subgraph inputs: tensor index -1")
    b, x, w, y = _simple()
    b.tensors[w].buffer = 9
    _refused(b, r"tensor 1 \('w'\): buffer 9 does not exist \(the model has 2 buffers\)")
    b, *_ = _simple()
    b.signature("s", {"x": 5}, {})
    _refused(b, r"signature def 0 \('s'\): input 'x' refers to tensor 5, but subgraph 0 has 3 tensors")
    b, *_ = _simple()
    b.signature("s", {}, {}, subgraph=3)
    _refused(b, "subgraph_index 3 out of range")


def test_refuses_wrong_version_identifier_and_no_subgraphs():
    b, *_ = _simple()
    b.version = 2
    _refused(b, r"^Model provided is schema version 2 not equal to supported version 3\.$")
    b.version = 3
    data = bytearray(b.build())
    data[4:8] = b"\0\0\0\0"
    _refused(bytes(data), "^The model is not a valid Flatbuffer buffer")
    b.subgraphs = []
    _refused(b, r"No subgraph in the model\.")
    _refused(b"This is an invalid model.", "^The model is not a valid Flatbuffer buffer")
    _refused(b"", "^The model is not a valid Flatbuffer buffer")


def test_refuses_missing_file(tmp_path):
    with pytest.raises(ModelError, match="Could not open"):
        read_model(tmp_path / "nope.tflite")
    (tmp_path / "empty.tflite").write_bytes(b"")
    with pytest.raises(ModelError, match="not a valid Flatbuffer buffer"):
        read_model(tmp_path / "empty.tflite")


def test_refuses_bad_dataflow():
    b, x, w, y = _simple()
    z = b.tensor("z", (2, 3))
    b.op("RELU", [y], [z])
    b.ops.reverse()  # RELU now reads y before ADD produces it
    _refused(b, r"operator 0 \(RELU\) reads tensor 2 \('y'\) before operator 1 produces it")
    b.ops.reverse()
    b.ops[1].outputs = [y]
    _refused(b, r"tensor 2 \('y'\) is produced by both operator 0 and operator 1 \(RELU\)")
    b, x, w, y = _simple()
    b.ops[0].outputs = [x]
    _refused(b, r"operator 0 \(ADD\) reads tensor 0 \('x'\), which it also produces")


def _while_model(cond: int, body: int, extra_call: tuple[int, int, int] | None = None):
    b = ModelBuilder()
    i = b.input("i", (), "int32")
    o = b.tensor("o", (), "int32")
    b.op("WHILE", [i], [o], cond_subgraph_index=cond, body_subgraph_index=body)
    b.output(o)
    for k in range(2):
        sg = b.add_subgraph(f"sg{k + 1}")
        a = sg.input("a", (), "int32")
        r = sg.tensor("r", (), "int32")
        if extra_call is not None and extra_call[0] == k + 1:
            sg.op("WHILE", [a], [r], cond_subgraph_index=extra_call[1], body_subgraph_index=extra_call[2])
        else:
            sg.op("NEG", [a], [r])
        sg.output(r)
    return b


def test_refuses_bad_subgraph_references():
    assert len(read_model(_while_model(1, 2).build()).subgraphs) == 3
    _refused(_while_model(1, 7), r"operator 0 \(WHILE\): refers to subgraph 7, but the model has 3 subgraphs")
    _refused(_while_model(1, 0), r"subgraphs call each other recursively: 0 -> 0")
    _refused(_while_model(1, 2, extra_call=(2, 1, 2)), r"recursively: 2 -> 2")
    _refused(_while_model(1, 2, extra_call=(2, 1, 0)), r"recursively: 0 -> 2 -> 0")


def test_refuses_bad_shapes():
    b = ModelBuilder()
    b.output(b.input("x", (1, -3)))
    _refused(b, r"tensor 0 \('x'\): negative dimension in shape \(1,-3\)")
    b = ModelBuilder()
    b.output(b.input("x", (65536, 65536, 4)))
    _refused(b, r"tensor 0 \('x'\): shape \(65536,65536,4\) float32 has 17179869184 elements")
    b = ModelBuilder()
    b.output(b.input("x", (2, 3), shape_signature=(-1, 3, 1)))
    _refused(b, "differ in rank")


def test_refuses_bad_quantization():
    b, x, w, y = _simple()
    b.tensors[w].quant = (np.array([0.1, 0.2], np.float32), np.zeros(2, np.int64), 2)
    _refused(b, r"tensor 1 \('w'\): quantization: quantized_dimension 2 out of range for shape \(2,3\)")
    b.tensors[w].quant = (np.array([0.1, 0.2], np.float32), np.zeros(2, np.int64), 1)
    _refused(b, r"2 scales but shape \(2,3\) has 3 along quantized_dimension 1")
    b.tensors[w].quant = (np.array([0.1, 0.2], np.float32), np.zeros(3, np.int64), 0)
    _refused(b, "3 zero_point values and 2 scale values")


def _tensor_shape_length_offset(data: bytes, tensor_index: int = 0) -> int:
    """File offset of the length word of subgraph 0's tensor ``tensor_index``'s shape vector."""
    def table(pos):
        vt = pos - struct.unpack_from("<i", data, pos)[0]
        return lambda slot: struct.unpack_from("<H", data, vt + slot)[0] if slot < struct.unpack_from(
            "<H", data, vt)[0] else 0

    def deref(pos):
        return pos + struct.unpack_from("<I", data, pos)[0]

    root = deref(0)
    sgs = deref(root + table(root)(8))
    sg = deref(sgs + 4)
    tens = deref(sg + table(sg)(4))
    t = deref(tens + 4 + 4 * tensor_index)
    return deref(t + table(t)(4))


def test_refuses_corrupt_vector_length_quickly():
    b, *_ = _simple()
    data = bytearray(b.build())
    at = _tensor_shape_length_offset(bytes(data))
    assert struct.unpack_from("<I", data, at)[0] == 2
    for n in (2**31, 2**32 - 1, len(data)):
        struct.pack_into("<I", data, at, n)
        _refused(bytes(data), rf"^The model is not a valid Flatbuffer buffer: tensor 0 \('x'\): shape: {n} elements")


def test_refuses_truncated_files():
    data = _conv_model().build()
    for cut in (4, 12, len(data) // 3, len(data) // 2, len(data) - 40):
        with pytest.raises(ModelError):
            read_model(data[:cut])


def test_unknown_options_and_builtin_codes():
    b, *_ = _simple()
    data = b.build()
    m = read_model(data)
    assert m.main.operators[0].options == {"fused_activation_function": 0, "pot_scale_int16": True}
