"""Model writing for the GPU compiler tests.

The tests build models with ``litegpu.testing.ModelBuilder`` (:func:`model_builder`) and read them with
``litegpu.read_model``.  :class:`StopgapModelBuilder` is a small writer over the ``tflite`` package's
generated flatbuffer code for what ModelBuilder does not write: sparse constants (``const(...,
sparsity=...)``), used by the DENSIFY tests.  It was the stand-in for ModelBuilder before that reached
``main``; it can go once ModelBuilder writes sparsity parameters.
"""

from __future__ import annotations

import importlib
from typing import Any

import flatbuffers
import numpy as np
import tflite
from litegpu._ir import Model, Sparsity
from tflite.utils import BUILTIN_OPCODE2NAME

__all__ = ["read_model", "model_builder", "StopgapModelBuilder"]

_TYPE_NAMES = {  # TensorType enum
    0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 5: "string", 6: "bool", 7: "int16",
    8: "complex64", 9: "int8", 10: "float64", 11: "complex128", 12: "uint64", 13: "resource",
    14: "variant", 15: "uint32", 16: "uint16", 17: "int4", 18: "bfloat16",
}
_TYPE_CODES = {v: k for k, v in _TYPE_NAMES.items()}
_NAME2OPCODE = {v: k for k, v in BUILTIN_OPCODE2NAME.items()}
_OPT_ENUM = {k: v for k, v in vars(tflite.BuiltinOptions).items() if not k.startswith("_")}


class _Modules:
    """``_MODS.Tensor`` is the generated *module* tflite.Tensor (the package re-exports the classes)."""

    def __getattr__(self, name: str) -> Any:
        return importlib.import_module(f"tflite.{name}")


_MODS = _Modules()

# op name -> BuiltinOptions table name (only what the tests and MediaPipe models use)
_OPTIONS_OF = {
    "ADD": "AddOptions", "SUB": "SubOptions", "MUL": "MulOptions", "DIV": "DivOptions",
    "CONV_2D": "Conv2DOptions", "DEPTHWISE_CONV_2D": "DepthwiseConv2DOptions",
    "FULLY_CONNECTED": "FullyConnectedOptions", "MAX_POOL_2D": "Pool2DOptions",
    "AVERAGE_POOL_2D": "Pool2DOptions", "PAD": "PadOptions", "PADV2": "PadV2Options",
    "MIRROR_PAD": "MirrorPadOptions", "RESHAPE": "ReshapeOptions", "CONCATENATION": "ConcatenationOptions",
    "MEAN": "ReducerOptions", "SUM": "ReducerOptions", "REDUCE_MAX": "ReducerOptions",
    "REDUCE_MIN": "ReducerOptions", "SOFTMAX": "SoftmaxOptions", "STRIDED_SLICE": "StridedSliceOptions",
    "SLICE": "SliceOptions", "DEQUANTIZE": "DequantizeOptions", "TRANSPOSE": "TransposeOptions",
    "RESIZE_BILINEAR": "ResizeBilinearOptions", "RESIZE_NEAREST_NEIGHBOR": "ResizeNearestNeighborOptions",
    "DEPTH_TO_SPACE": "DepthToSpaceOptions", "SPACE_TO_DEPTH": "SpaceToDepthOptions",
    "SPLIT": "SplitOptions", "SPLIT_V": "SplitVOptions", "LEAKY_RELU": "LeakyReluOptions",
    "HARD_SWISH": "HardSwishOptions", "GELU": "GeluOptions", "TRANSPOSE_CONV": "TransposeConvOptions",
    "BATCH_MATMUL": "BatchMatMulOptions", "MAXIMUM": "MaximumMinimumOptions",
    "MINIMUM": "MaximumMinimumOptions", "SQUARED_DIFFERENCE": "SquaredDifferenceOptions",
    "POW": "PowOptions", "EXP": "ExpOptions", "ABS": "AbsOptions", "NEG": "NegOptions",
    "COS": "CosOptions", "LOGICAL_AND": "LogicalAndOptions", "DENSIFY": "DensifyOptions",
    "SQUEEZE": "SqueezeOptions", "EXPAND_DIMS": "ExpandDimsOptions", "LSTM": "LSTMOptions",
}


def _camel(name: str) -> str:
    return "".join(p.capitalize() for p in name.split("_"))


def read_model(data: bytes | str) -> Model:
    """litegpu's reader (kept as a name here so the GPU tests import one place)."""
    from litegpu import read_model as real

    return real(data)


class StopgapModelBuilder:
    """The subset of ``litegpu.testing.ModelBuilder`` the GPU tests use (main subgraph only)."""

    def __init__(self) -> None:
        self._tensors: list[dict[str, Any]] = []
        self._ops: list[dict[str, Any]] = []
        self._inputs: list[int] = []
        self._outputs: list[int] = []

    def _add(self, **kw: Any) -> int:
        self._tensors.append(kw)
        return len(self._tensors) - 1

    def input(self, name: str, shape: tuple[int, ...], dtype: str = "float32", quant: Any = None) -> int:
        i = self._add(name=name, shape=tuple(shape), dtype=dtype, quant=quant, data=None)
        self._inputs.append(i)
        return i

    def const(self, name: str, data: np.ndarray, quant: Any = None, sparsity: Sparsity | None = None,
              shape: tuple[int, ...] | None = None) -> int:
        data = np.asarray(data)
        return self._add(name=name, shape=tuple(shape if shape is not None else data.shape),
                         dtype=data.dtype.name, quant=quant, data=data, sparsity=sparsity)

    def tensor(self, name: str, shape: tuple[int, ...], dtype: str = "float32", quant: Any = None) -> int:
        return self._add(name=name, shape=tuple(shape), dtype=dtype, quant=quant, data=None)

    def op(self, opname: str, inputs: list[int], outputs: list[int], version: int = 1, **options: Any) -> None:
        self._ops.append(dict(name=opname, inputs=list(inputs), outputs=list(outputs), version=version,
                              options=options, custom=None))

    def custom_op(self, code: str, inputs: list[int], outputs: list[int], custom_options: bytes = b"") -> None:
        self._ops.append(dict(name="CUSTOM", inputs=list(inputs), outputs=list(outputs), version=1,
                              options={}, custom=code, custom_options=custom_options))

    def output(self, t: int) -> None:
        self._outputs.append(t)

    # -- serialisation ---------------------------------------------------------------------------------
    def build(self) -> bytes:
        b = flatbuffers.Builder(1024)
        T = _MODS

        def ivec(start, vals, kind="int32"):
            start(b, len(vals))
            for v in reversed(list(vals)):
                b.PrependInt32(int(v)) if kind == "int32" else b.PrependFloat32(float(v))
            return b.EndVector()

        def i64vec(vals):
            b.StartVector(8, len(vals), 8)
            for v in reversed(list(vals)):
                b.PrependInt64(int(v))
            return b.EndVector()

        # buffers: 0 is the empty sentinel
        buf_offsets = []
        T.Buffer.Start(b)
        buf_offsets.append(T.Buffer.End(b))
        tensor_buffers = []
        for t in self._tensors:
            if t["data"] is None:
                tensor_buffers.append(0)
                continue
            raw = np.ascontiguousarray(t["data"]).tobytes()
            b.StartVector(1, len(raw), 16)
            b.head = b.head - len(raw)
            b.Bytes[b.head:b.head + len(raw)] = raw
            data_off = b.EndVector()
            T.Buffer.Start(b)
            T.Buffer.AddData(b, data_off)
            buf_offsets.append(T.Buffer.End(b))
            tensor_buffers.append(len(buf_offsets) - 1)

        tensor_offs = []
        for t, bi in zip(self._tensors, tensor_buffers, strict=False):
            name = b.CreateString(t["name"])
            shape = ivec(T.Tensor.StartShapeVector, t["shape"])
            qoff = None
            if t["quant"] is not None:
                q = t["quant"]
                if len(q) == 2:
                    scales, zps, qdim = [q[0]], [q[1]], 0
                else:
                    scales, zps, qdim = list(np.ravel(q[0])), list(np.ravel(q[1])), q[2]
                so = ivec(T.QuantizationParameters.StartScaleVector, scales, "float")
                zo = i64vec(zps)
                T.QuantizationParameters.Start(b)
                T.QuantizationParameters.AddScale(b, so)
                T.QuantizationParameters.AddZeroPoint(b, zo)
                T.QuantizationParameters.AddQuantizedDimension(b, qdim)
                qoff = T.QuantizationParameters.End(b)
            spoff = self._write_sparsity(b, t.get("sparsity"), ivec) if t.get("sparsity") else None
            T.Tensor.Start(b)
            T.Tensor.AddShape(b, shape)
            T.Tensor.AddType(b, _TYPE_CODES[t["dtype"]])
            T.Tensor.AddBuffer(b, bi)
            T.Tensor.AddName(b, name)
            if qoff is not None:
                T.Tensor.AddQuantization(b, qoff)
            if spoff is not None:
                T.Tensor.AddSparsity(b, spoff)
            tensor_offs.append(T.Tensor.End(b))

        opcodes: list[tuple[str, int, str | None]] = []
        op_offs = []
        for o in self._ops:
            key = (o["name"], o["version"], o["custom"])
            if key not in opcodes:
                opcodes.append(key)
            ins = ivec(T.Operator.StartInputsVector, o["inputs"])
            outs = ivec(T.Operator.StartOutputsVector, o["outputs"])
            opt_type, opt_off = self._write_options(b, o["name"], o["options"], ivec)
            co = None
            if o["custom"] is not None and o.get("custom_options"):
                co = b.CreateByteVector(o["custom_options"])
            T.Operator.Start(b)
            T.Operator.AddOpcodeIndex(b, opcodes.index(key))
            T.Operator.AddInputs(b, ins)
            T.Operator.AddOutputs(b, outs)
            if opt_off is not None:
                T.Operator.AddBuiltinOptionsType(b, opt_type)
                T.Operator.AddBuiltinOptions(b, opt_off)
            if co is not None:
                T.Operator.AddCustomOptions(b, co)
            op_offs.append(T.Operator.End(b))

        def tvec(start, offs):
            start(b, len(offs))
            for off in reversed(offs):
                b.PrependUOffsetTRelative(off)
            return b.EndVector()

        tv = tvec(T.SubGraph.StartTensorsVector, tensor_offs)
        ov = tvec(T.SubGraph.StartOperatorsVector, op_offs)
        iv = ivec(T.SubGraph.StartInputsVector, self._inputs)
        outv = ivec(T.SubGraph.StartOutputsVector, self._outputs)
        sname = b.CreateString("main")
        T.SubGraph.Start(b)
        T.SubGraph.AddTensors(b, tv)
        T.SubGraph.AddOperators(b, ov)
        T.SubGraph.AddInputs(b, iv)
        T.SubGraph.AddOutputs(b, outv)
        T.SubGraph.AddName(b, sname)
        sg = T.SubGraph.End(b)

        oc_offs = []
        for name, version, custom in opcodes:
            cc = b.CreateString(custom) if custom else None
            code = 32 if name == "CUSTOM" else _NAME2OPCODE[name]
            T.OperatorCode.Start(b)
            T.OperatorCode.AddDeprecatedBuiltinCode(b, min(code, 127))
            T.OperatorCode.AddBuiltinCode(b, code)
            T.OperatorCode.AddVersion(b, version)
            if cc is not None:
                T.OperatorCode.AddCustomCode(b, cc)
            oc_offs.append(T.OperatorCode.End(b))
        ocv = tvec(T.Model.StartOperatorCodesVector, oc_offs)
        sgv = tvec(T.Model.StartSubgraphsVector, [sg])
        bv = tvec(T.Model.StartBuffersVector, buf_offsets)
        desc = b.CreateString("litegpu gpu-core test")
        T.Model.Start(b)
        T.Model.AddVersion(b, 3)
        T.Model.AddOperatorCodes(b, ocv)
        T.Model.AddSubgraphs(b, sgv)
        T.Model.AddBuffers(b, bv)
        T.Model.AddDescription(b, desc)
        b.Finish(T.Model.End(b), file_identifier=b"TFL3")
        return bytes(b.Output())

    @staticmethod
    def _write_options(b: flatbuffers.Builder, opname: str, options: dict[str, Any], ivec) -> tuple[int, Any]:
        tname = _OPTIONS_OF.get(opname)
        if tname is None:
            if options:
                raise ValueError(f"stop-gap builder has no options table for {opname}")
            return 0, None
        mod = importlib.import_module(f"tflite.{tname}")
        vectors = {}
        for k, v in options.items():
            if isinstance(v, (tuple, list)):
                vectors[k] = ivec(getattr(mod, f"Start{_camel(k)}Vector"), v)
        mod.Start(b)
        for k, v in options.items():
            add = getattr(mod, f"Add{_camel(k)}")
            add(b, vectors[k] if k in vectors else v)
        return _OPT_ENUM[tname], mod.End(b)

    @staticmethod
    def _write_sparsity(b: flatbuffers.Builder, sp: Sparsity, ivec) -> int:
        T = _MODS
        dm_offs = []
        for d in sp.dim_metadata:
            seg = idx = None
            if d.format == 1:
                seg_v = ivec(T.Int32Vector.StartValuesVector, d.array_segments)
                T.Int32Vector.Start(b)
                T.Int32Vector.AddValues(b, seg_v)
                seg = T.Int32Vector.End(b)
                idx_v = ivec(T.Int32Vector.StartValuesVector, d.array_indices)
                T.Int32Vector.Start(b)
                T.Int32Vector.AddValues(b, idx_v)
                idx = T.Int32Vector.End(b)
            T.DimensionMetadata.Start(b)
            T.DimensionMetadata.AddFormat(b, d.format)
            T.DimensionMetadata.AddDenseSize(b, d.dense_size)
            if seg is not None:
                T.DimensionMetadata.AddArraySegmentsType(b, 1)
                T.DimensionMetadata.AddArraySegments(b, seg)
                T.DimensionMetadata.AddArrayIndicesType(b, 1)
                T.DimensionMetadata.AddArrayIndices(b, idx)
            dm_offs.append(T.DimensionMetadata.End(b))
        to = ivec(T.SparsityParameters.StartTraversalOrderVector, sp.traversal_order)
        bm = ivec(T.SparsityParameters.StartBlockMapVector, sp.block_map) if sp.block_map else None
        T.SparsityParameters.StartDimMetadataVector(b, len(dm_offs))
        for off in reversed(dm_offs):
            b.PrependUOffsetTRelative(off)
        dmv = b.EndVector()
        T.SparsityParameters.Start(b)
        T.SparsityParameters.AddTraversalOrder(b, to)
        if bm is not None:
            T.SparsityParameters.AddBlockMap(b, bm)
        T.SparsityParameters.AddDimMetadata(b, dmv)
        return T.SparsityParameters.End(b)


def model_builder() -> Any:
    """A fresh ``litegpu.testing.ModelBuilder``."""
    from litegpu.testing import ModelBuilder

    return ModelBuilder()
