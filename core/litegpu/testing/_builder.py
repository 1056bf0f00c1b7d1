"""ModelBuilder: writes valid .tflite flatbuffers for tests, benchmarks and examples.

It uses the builder functions that the ``tflite`` package generates from the
TFLite schema, so whatever LiteRT reads, this can write: ops with options,
float and quantized (per-tensor and per-channel) constants, variables,
signatures, several subgraphs (for WHILE/IF/CALL_ONCE) and custom ops.

Example::

    b = ModelBuilder()
    x = b.input("x", (1, 8, 8, 3), "float32")
    w = b.const("w", np.ones((4, 3, 3, 3), np.float32))
    y = b.tensor("y", (1, 8, 8, 4), "float32")
    b.op("CONV_2D", [x, w, -1], [y], padding=0, stride_w=1, stride_h=1)
    b.output(y)
    data = b.build()
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import flatbuffers
import numpy as np
from tflite.utils import BUILTIN_OPCODE2NAME

__all__ = ["ModelBuilder", "SubgraphBuilder", "Blockwise"]


@dataclass(frozen=True)
class Blockwise:
    """A tensor's ``quant=`` for blockwise quantization (the schema's ``BlockwiseQuantization``):
    ``scales`` is the index of the per-block scales tensor (float16 for LiteRT's kernel),
    ``zero_points`` that of the zero points (-1: none)."""

    scales: int
    block_size: int
    zero_points: int = -1

_NAME2CODE = {v: k for k, v in BUILTIN_OPCODE2NAME.items()}

# dtype name -> TFLite TensorType
_DTYPES = {
    "float32": 0, "float16": 1, "int32": 2, "uint8": 3, "int64": 4, "string": 5, "bool": 6,
    "int16": 7, "complex64": 8, "int8": 9, "float64": 10, "complex128": 11, "uint64": 12,
    "resource": 13, "variant": 14, "uint32": 15, "uint16": 16, "int4": 17, "bfloat16": 18,
}

# Ops whose options table is not simply CamelCase(op) + "Options".
_OPTIONS_OVERRIDE = {
    "AVERAGE_POOL_2D": "Pool2DOptions", "MAX_POOL_2D": "Pool2DOptions", "L2_POOL_2D": "Pool2DOptions",
    "L2_NORMALIZATION": "L2NormOptions", "LSTM": "LSTMOptions", "RNN": "RNNOptions",
    "SVDF": "SVDFOptions", "LSH_PROJECTION": "LSHProjectionOptions",
    "UNIDIRECTIONAL_SEQUENCE_RNN": "SequenceRNNOptions",
    "UNIDIRECTIONAL_SEQUENCE_LSTM": "UnidirectionalSequenceLSTMOptions",
    "BIDIRECTIONAL_SEQUENCE_LSTM": "BidirectionalSequenceLSTMOptions",
    "BIDIRECTIONAL_SEQUENCE_RNN": "BidirectionalSequenceRNNOptions",
    "BATCH_TO_SPACE_ND": "BatchToSpaceNDOptions", "SPACE_TO_BATCH_ND": "SpaceToBatchNDOptions",
    "MEAN": "ReducerOptions", "SUM": "ReducerOptions", "REDUCE_PROD": "ReducerOptions",
    "REDUCE_MAX": "ReducerOptions", "REDUCE_MIN": "ReducerOptions", "REDUCE_ANY": "ReducerOptions",
    "REDUCE_ALL": "ReducerOptions", "TOPK_V2": "TopKV2Options", "MAXIMUM": "MaximumMinimumOptions",
    "MINIMUM": "MaximumMinimumOptions", "PADV2": "PadV2Options", "BATCH_MATMUL": "BatchMatMulOptions",
    "LEAKY_RELU": "LeakyReluOptions", "CONV_3D": "Conv3DOptions", "CONV_3D_TRANSPOSE": "Conv3DOptions",
    "EMBEDDING_LOOKUP_SPARSE": "EmbeddingLookupSparseOptions", "HASHTABLE_LOOKUP": None,
    "SELECT_V2": "SelectV2Options", "MIRROR_PAD": "MirrorPadOptions", "GELU": "GeluOptions",
    "RANDOM_STANDARD_NORMAL": "RandomOptions", "RANDOM_UNIFORM": "RandomOptions",
    "MULTINOMIAL": "RandomOptions", "RFFT2D": "Rfft2dOptions", "BROADCAST_ARGS": None,
    "STABLEHLO_COMPOSITE": "StableHLOCompositeOptions",
}


def _camel(name: str) -> str:
    return "".join(p.capitalize() for p in name.split("_")).replace("2d", "2D").replace("3d", "3D")


def _options_class_name(op: str) -> str | None:
    if op in _OPTIONS_OVERRIDE:
        return _OPTIONS_OVERRIDE[op]
    return _camel(op) + "Options"


def _options_module(cls_name: str):
    try:
        return importlib.import_module(f"tflite.{cls_name}")
    except ImportError:
        return None


def _options_union_type(cls_name: str) -> tuple[int, bool] | None:
    """(union value, is BuiltinOptions2) for an options class name."""
    from tflite.BuiltinOptions import BuiltinOptions

    v = getattr(BuiltinOptions, cls_name, None)
    if v is not None:
        return v, False
    try:
        from tflite.BuiltinOptions2 import BuiltinOptions2
    except ImportError:
        return None
    v = getattr(BuiltinOptions2, cls_name, None)
    return (v, True) if v is not None else None


def _field_camel(key: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in key.split("_"))


@dataclass
class _Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str
    buffer: int
    quant: Any = None
    shape_signature: tuple[int, ...] | None = None
    is_variable: bool = False


@dataclass
class _Op:
    code: int
    custom_code: str | None
    version: int
    inputs: list[int]
    outputs: list[int]
    options: dict[str, Any]
    custom_options: bytes | None
    intermediates: list[int] = field(default_factory=list)


class SubgraphBuilder:
    """Tensors, operators and graph inputs/outputs of one subgraph."""

    def __init__(self, model: ModelBuilder, name: str):
        self._model = model
        self.name = name
        self.tensors: list[_Tensor] = []
        self.ops: list[_Op] = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []

    # ---- tensors -----------------------------------------------------------------
    def tensor(
        self,
        name: str,
        shape: Sequence[int],
        dtype: str = "float32",
        *,
        quant: Any = None,
        shape_signature: Sequence[int] | None = None,
        is_variable: bool = False,
        data: np.ndarray | bytes | None = None,
    ) -> int:
        """A tensor; with ``data`` it is a constant.  Returns its index."""
        if dtype not in _DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}")
        buf = 0 if data is None else self._model._add_buffer(data)
        self.tensors.append(
            _Tensor(name, tuple(int(d) for d in shape), dtype, buf, quant,
                    None if shape_signature is None else tuple(int(d) for d in shape_signature), is_variable)
        )
        return len(self.tensors) - 1

    def input(self, name: str, shape: Sequence[int], dtype: str = "float32", **kw: Any) -> int:
        """A graph input."""
        i = self.tensor(name, shape, dtype, **kw)
        self.inputs.append(i)
        return i

    def const(self, name: str, value: np.ndarray, *, quant: Any = None, dtype: str | None = None) -> int:
        """A constant tensor holding ``value`` (dtype from the array unless given)."""
        arr = np.asarray(value)
        dt = dtype or arr.dtype.name
        return self.tensor(name, arr.shape, dt, quant=quant, data=arr)

    def output(self, *indices: int) -> None:
        """Mark tensors as graph outputs."""
        self.outputs.extend(indices)

    # ---- operators ---------------------------------------------------------------
    def op(self, op: str, inputs: Sequence[int], outputs: Sequence[int], *, version: int = 1,
           intermediates: Sequence[int] = (), **options: Any) -> int:
        """A builtin operator with options given as snake_case keywords."""
        if op not in _NAME2CODE:
            raise ValueError(f"unknown builtin op {op!r}")
        self.ops.append(_Op(_NAME2CODE[op], None, version, list(inputs), list(outputs), options, None,
                            list(intermediates)))
        return len(self.ops) - 1

    def custom_op(self, code: str, inputs: Sequence[int], outputs: Sequence[int], *,
                  custom_options: bytes = b"", version: int = 1) -> int:
        """A custom operator (``BuiltinOperator.CUSTOM`` with ``custom_code``)."""
        self.ops.append(_Op(_NAME2CODE["CUSTOM"], code, version, list(inputs), list(outputs), {},
                            bytes(custom_options)))
        return len(self.ops) - 1


class ModelBuilder(SubgraphBuilder):
    """Writes a .tflite model.  The builder itself is subgraph 0."""

    def __init__(self, description: str = "litegpu ModelBuilder"):
        self._buffers: list[bytes] = [b""]  # buffer 0 is the empty sentinel
        self.subgraphs: list[SubgraphBuilder] = []
        self.description = description
        self.signatures: list[tuple[str, int, dict[str, int], dict[str, int]]] = []
        self.metadata: list[tuple[str, bytes]] = []
        self.version = 3
        super().__init__(self, "main")
        self.subgraphs.append(self)

    def add_subgraph(self, name: str) -> SubgraphBuilder:
        """A new subgraph (index = number of subgraphs so far)."""
        sg = SubgraphBuilder(self, name)
        self.subgraphs.append(sg)
        return sg

    def subgraph_index(self, sg: SubgraphBuilder) -> int:
        return self.subgraphs.index(sg)

    def signature(self, key: str, inputs: Mapping[str, int], outputs: Mapping[str, int],
                  subgraph: int = 0) -> None:
        self.signatures.append((key, subgraph, dict(inputs), dict(outputs)))

    def add_metadata(self, name: str, data: bytes) -> None:
        self.metadata.append((name, self._add_buffer(data)))

    def _add_buffer(self, data: np.ndarray | bytes) -> int:
        raw = data if isinstance(data, (bytes, bytearray)) else np.ascontiguousarray(data).tobytes()
        self._buffers.append(bytes(raw))
        return len(self._buffers) - 1

    # ---- serialization -----------------------------------------------------------
    def build(self) -> bytes:
        """Serialize to .tflite bytes."""
        # the generated *modules* (``from tflite import X`` would give the classes)
        m = {n: importlib.import_module(f"tflite.{n}") for n in (
            "Buffer", "Metadata", "Model", "Operator", "OperatorCode", "QuantizationParameters",
            "SignatureDef", "SubGraph", "Tensor", "TensorMap")}
        Buffer, Metadata, Model, Operator = m["Buffer"], m["Metadata"], m["Model"], m["Operator"]
        OperatorCode, QuantizationParameters = m["OperatorCode"], m["QuantizationParameters"]
        SignatureDef, SubGraph, Tensor, TensorMap = m["SignatureDef"], m["SubGraph"], m["Tensor"], m["TensorMap"]

        b = flatbuffers.Builder(1024)

        def vec_i32(start_fn, values):
            start_fn(b, len(values))
            for v in reversed(values):
                b.PrependInt32(int(v))
            return b.EndVector()

        def vec_off(start_fn, offs):
            start_fn(b, len(offs))
            for o in reversed(offs):
                b.PrependUOffsetTRelative(o)
            return b.EndVector()

        def vec_f32(values):
            b.StartVector(4, len(values), 4)
            for v in reversed(values):
                b.PrependFloat32(float(v))
            return b.EndVector()

        def vec_i64(values):
            b.StartVector(8, len(values), 8)
            for v in reversed(values):
                b.PrependInt64(int(v))
            return b.EndVector()

        # buffers
        buf_offs = []
        for raw in self._buffers:
            if raw:
                b.StartVector(1, len(raw), 16)  # 16-byte alignment for numpy views
                b.head = b.head - len(raw)
                b.Bytes[b.head:b.head + len(raw)] = raw
                data_off = b.EndVector()
            Buffer.BufferStart(b)
            if raw:
                Buffer.BufferAddData(b, data_off)
            buf_offs.append(Buffer.BufferEnd(b))

        # operator codes
        codes: list[tuple[int, str | None, int]] = []
        for sg in self.subgraphs:
            for o in sg.ops:
                key = (o.code, o.custom_code, o.version)
                if key not in codes:
                    codes.append(key)
        code_offs = []
        for code, custom, version in codes:
            cc = b.CreateString(custom) if custom else None
            OperatorCode.OperatorCodeStart(b)
            OperatorCode.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
            OperatorCode.OperatorCodeAddBuiltinCode(b, code)
            if cc is not None:
                OperatorCode.OperatorCodeAddCustomCode(b, cc)
            OperatorCode.OperatorCodeAddVersion(b, version)
            code_offs.append(OperatorCode.OperatorCodeEnd(b))

        sg_offs = []
        for sg in self.subgraphs:
            t_offs = []
            for t in sg.tensors:
                name = b.CreateString(t.name)
                shape = vec_i32(Tensor.TensorStartShapeVector, t.shape)
                sig = vec_i32(Tensor.TensorStartShapeSignatureVector, t.shape_signature) \
                    if t.shape_signature is not None else None
                q = self._quant(b, t.quant, vec_f32, vec_i64, QuantizationParameters)
                Tensor.TensorStart(b)
                Tensor.TensorAddShape(b, shape)
                Tensor.TensorAddType(b, _DTYPES[t.dtype])
                Tensor.TensorAddBuffer(b, t.buffer)
                Tensor.TensorAddName(b, name)
                if q is not None:
                    Tensor.TensorAddQuantization(b, q)
                if t.is_variable:
                    Tensor.TensorAddIsVariable(b, True)
                if sig is not None:
                    Tensor.TensorAddShapeSignature(b, sig)
                t_offs.append(Tensor.TensorEnd(b))
            o_offs = []
            for o in sg.ops:
                ins = vec_i32(Operator.OperatorStartInputsVector, o.inputs)
                outs = vec_i32(Operator.OperatorStartOutputsVector, o.outputs)
                inter = vec_i32(Operator.OperatorStartIntermediatesVector, o.intermediates) \
                    if o.intermediates else None
                copts = None
                if o.custom_options:
                    copts = b.CreateByteVector(o.custom_options)
                opts = self._options(b, o, vec_i32, vec_f32, vec_i64)
                Operator.OperatorStart(b)
                Operator.OperatorAddOpcodeIndex(b, codes.index((o.code, o.custom_code, o.version)))
                Operator.OperatorAddInputs(b, ins)
                Operator.OperatorAddOutputs(b, outs)
                if inter is not None:
                    Operator.OperatorAddIntermediates(b, inter)
                if opts is not None:
                    utype, off, is2 = opts
                    if is2:
                        Operator.OperatorAddBuiltinOptions2Type(b, utype)
                        Operator.OperatorAddBuiltinOptions2(b, off)
                    else:
                        Operator.OperatorAddBuiltinOptionsType(b, utype)
                        Operator.OperatorAddBuiltinOptions(b, off)
                if copts is not None:
                    Operator.OperatorAddCustomOptions(b, copts)
                o_offs.append(Operator.OperatorEnd(b))
            tensors = vec_off(SubGraph.SubGraphStartTensorsVector, t_offs)
            ops = vec_off(SubGraph.SubGraphStartOperatorsVector, o_offs)
            ins = vec_i32(SubGraph.SubGraphStartInputsVector, sg.inputs)
            outs = vec_i32(SubGraph.SubGraphStartOutputsVector, sg.outputs)
            name = b.CreateString(sg.name)
            SubGraph.SubGraphStart(b)
            SubGraph.SubGraphAddTensors(b, tensors)
            SubGraph.SubGraphAddOperators(b, ops)
            SubGraph.SubGraphAddInputs(b, ins)
            SubGraph.SubGraphAddOutputs(b, outs)
            SubGraph.SubGraphAddName(b, name)
            sg_offs.append(SubGraph.SubGraphEnd(b))

        sig_offs = []
        for key, sgi, ins, outs in self.signatures:
            def tmap(m):
                offs = []
                for n, idx in m.items():
                    nm = b.CreateString(n)
                    TensorMap.TensorMapStart(b)
                    TensorMap.TensorMapAddName(b, nm)
                    TensorMap.TensorMapAddTensorIndex(b, idx)
                    offs.append(TensorMap.TensorMapEnd(b))
                return offs
            i_offs, o_offs = tmap(ins), tmap(outs)
            iv = vec_off(SignatureDef.SignatureDefStartInputsVector, i_offs)
            ov = vec_off(SignatureDef.SignatureDefStartOutputsVector, o_offs)
            k = b.CreateString(key)
            SignatureDef.SignatureDefStart(b)
            SignatureDef.SignatureDefAddInputs(b, iv)
            SignatureDef.SignatureDefAddOutputs(b, ov)
            SignatureDef.SignatureDefAddSignatureKey(b, k)
            SignatureDef.SignatureDefAddSubgraphIndex(b, sgi)
            sig_offs.append(SignatureDef.SignatureDefEnd(b))

        md_offs = []
        for name, buf in self.metadata:
            nm = b.CreateString(name)
            Metadata.MetadataStart(b)
            Metadata.MetadataAddName(b, nm)
            Metadata.MetadataAddBuffer(b, buf)
            md_offs.append(Metadata.MetadataEnd(b))

        codes_v = vec_off(Model.ModelStartOperatorCodesVector, code_offs)
        sgs_v = vec_off(Model.ModelStartSubgraphsVector, sg_offs)
        bufs_v = vec_off(Model.ModelStartBuffersVector, buf_offs)
        sigs_v = vec_off(Model.ModelStartSignatureDefsVector, sig_offs) if sig_offs else None
        md_v = vec_off(Model.ModelStartMetadataVector, md_offs) if md_offs else None
        desc = b.CreateString(self.description)
        Model.ModelStart(b)
        Model.ModelAddVersion(b, self.version)
        Model.ModelAddOperatorCodes(b, codes_v)
        Model.ModelAddSubgraphs(b, sgs_v)
        Model.ModelAddDescription(b, desc)
        Model.ModelAddBuffers(b, bufs_v)
        if sigs_v is not None:
            Model.ModelAddSignatureDefs(b, sigs_v)
        if md_v is not None:
            Model.ModelAddMetadata(b, md_v)
        b.Finish(Model.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())

    @staticmethod
    def _quant(b, quant, vec_f32, vec_i64, QP):
        if quant is None:
            return None
        if isinstance(quant, Blockwise):
            b.StartObject(3)
            b.PrependInt32Slot(0, quant.scales, 0)
            b.PrependInt32Slot(1, quant.zero_points, 0)
            b.PrependInt32Slot(2, quant.block_size, 0)
            details = b.EndObject()
            QP.QuantizationParametersStart(b)
            QP.QuantizationParametersAddDetailsType(b, 2)  # QuantizationDetails.BlockwiseQuantization
            QP.QuantizationParametersAddDetails(b, details)
            return QP.QuantizationParametersEnd(b)
        if len(quant) == 2:
            scales, zps, axis = np.atleast_1d(quant[0]), np.atleast_1d(quant[1]), 0
        else:
            scales, zps, axis = np.atleast_1d(quant[0]), np.atleast_1d(quant[1]), int(quant[2])
        s = vec_f32(list(scales))
        z = vec_i64(list(zps))
        QP.QuantizationParametersStart(b)
        QP.QuantizationParametersAddScale(b, s)
        QP.QuantizationParametersAddZeroPoint(b, z)
        QP.QuantizationParametersAddQuantizedDimension(b, axis)
        return QP.QuantizationParametersEnd(b)

    @staticmethod
    def _options(b, o: _Op, vec_i32, vec_f32, vec_i64=None):
        if o.custom_code is not None:
            return None
        op = BUILTIN_OPCODE2NAME[o.code]
        cls_name = _options_class_name(op)
        if cls_name is None:
            if o.options:
                raise ValueError(f"op {op} takes no options, got {sorted(o.options)}")
            return None
        mod = _options_module(cls_name)
        ut = _options_union_type(cls_name)
        if mod is None or ut is None:
            if o.options:
                raise ValueError(f"op {op}: no options table {cls_name} in the schema")
            return None
        # vectors first (they must be built before the table starts)
        prepared: dict[str, Any] = {}
        for key, val in o.options.items():
            camel = _field_camel(key)
            adder = getattr(mod, f"{cls_name}Add{camel}", None) or getattr(mod, f"Add{camel}", None)
            if adder is None:
                raise ValueError(f"op {op}: {cls_name} has no field {key!r}")
            if isinstance(val, (list, tuple, np.ndarray)):
                starter = getattr(mod, f"{cls_name}Start{camel}Vector")
                vals = list(val)
                if any(isinstance(v, (float, np.floating)) for v in vals):  # a [float] field
                    prepared[key] = (adder, vec_f32(vals))
                elif isinstance(val, np.ndarray) and val.dtype == np.int64 and vec_i64 is not None:
                    prepared[key] = (adder, vec_i64(vals))  # a [long] field (StableHLO options)
                else:
                    prepared[key] = (adder, vec_i32(starter, vals))
            elif isinstance(val, (bytes, bytearray)):  # a [ubyte] field (e.g. flexbuffer attributes)
                prepared[key] = (adder, b.CreateByteVector(bytes(val)))
            elif isinstance(val, str):  # a string field, built before the table like vectors
                prepared[key] = (adder, b.CreateString(val))
            else:
                prepared[key] = (adder, val)
        getattr(mod, f"{cls_name}Start")(b)
        for adder, val in prepared.values():
            adder(b, val)
        off = getattr(mod, f"{cls_name}End")(b)
        return ut[0], off, ut[1]
