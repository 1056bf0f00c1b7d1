"""The .tflite reader: a path or bytes in, the immutable IR of ``_ir.py`` out.

Reading is done through the layouts of the ``tflite`` package's generated flatbuffers
classes (written once into ``_tflite_layout.py``, so no ``tflite`` module is imported),
by the bounds-checked helpers of ``_flatbuf.py`` (the python flatbuffers runtime has no
verifier).  Everything that could make a later stage crash, hang
or silently compute garbage is checked here, once, and reported as a
:class:`~litegpu.ModelError` that names the offending tensor, operator or buffer:

* structure: offsets, vector lengths and strings inside the file (messages start
  with LiteRT's words "The model is not a valid Flatbuffer buffer");
* the file identifier ``TFL3`` and schema version 3 (LiteRT refuses anything else);
* indices: tensors (``-1`` only for optional operator inputs/outputs), buffers,
  operator codes, subgraphs referenced by signatures and control-flow options;
* no subgraph reaches itself through control-flow options (no recursion);
* operators in topological order, no tensor produced twice;
* constant data exactly as large as shape x dtype; shapes non-negative and
  tensors of sane size; quantization and sparsity parameters consistent.

Constant data are read-only numpy views of the model bytes (or of the file's
mmap), so reading a model copies almost nothing.
"""

from __future__ import annotations

import dataclasses
import math
import mmap
import os
import stat
import struct
from collections.abc import Iterable
from typing import Any

import numpy as np

from ._errors import ModelError, describe_failure
from ._flatbuf import (
    INVALID_FLATBUFFER,
    TableView,
    parse_operator_options,
    root_table,
    sparse_index_vector_layout,
)
from ._ir import DimensionMetadata, Model, Operator, Quantization, SignatureDef, Sparsity, Subgraph, Tensor
from ._schema import (
    BLOCKWISE_DETAILS,
    CUSTOM_OPCODE,
    PACKED_BITS,
    BlockwiseQuantization,
    builtin_op_name,
    storage_dtype,
    tensor_type_name,
)

__all__ = ["read_model", "string_values", "MAX_ELEMENTS", "MAX_TENSOR_BYTES"]

#: Largest element count of one tensor we accept (TFLite counts elements in int32 in places).
MAX_ELEMENTS = 2**31 - 1
#: Largest byte size of one tensor we accept; more almost surely means a corrupt shape.
MAX_TENSOR_BYTES = 2**32

_IDENTIFIER = b"TFL3"
_SCHEMA_VERSION = 3
_NO_SUBGRAPH = "No subgraph in the model."

# Errors the flatbuffers runtime (or numpy/struct under it) raises on a corrupt file.
_FLATBUFFER_ERRORS = (struct.error, IndexError, TypeError, ValueError, OverflowError, UnicodeDecodeError)

# Option keys that hold subgraph indices (WHILE, IF, CALL_ONCE, CALL and the StableHLO ops).
_SUBGRAPH_KEYS_SUFFIX = "subgraph_index"
_SUBGRAPH_KEYS = ("subgraph", "called_computations")


def read_model(source: str | os.PathLike[str] | bytes | bytearray | memoryview) -> Model:
    """Read a .tflite model into the immutable IR.

    ``source`` is a file path (the file is memory-mapped; constant data stay views of
    the map) or the model bytes (``bytearray`` and writable ``memoryview`` are copied
    once so that the model cannot change under us).  Raises :class:`ModelError`
    naming the problem when the file is not a valid, consistent TFLite model.

    Constant data: dense constants are shaped like ``Tensor.shape``; packed sub-byte
    types (int4, int2, uint4) are unpacked into int8/uint8 (low bits first) with the
    dtype name kept; bfloat16/float8 data are their raw bits (uint16/uint8); string
    tensors hold the raw buffer bytes (1-D uint8); sparse constants hold the 1-D array
    of stored values (the layout is in ``Tensor.sparsity``).  See docs/design.md.
    """
    raw, path = _open(source)
    return _Reader(raw, path).read()


def _open(source: Any) -> tuple[Any, str | None]:
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode):  # /dev/urandom, a pipe, a folder: not "empty"
                    raise ModelError(f"{INVALID_FLATBUFFER}: {path!r} is not a regular file; pass the path of "
                                     "a .tflite file (or its bytes as model_content)")
                size = st.st_size
                if size == 0:
                    raise ModelError(f"{INVALID_FLATBUFFER}: {path!r} is empty")
                # The map outlives the file object; numpy views keep it alive.
                raw: Any = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as e:
            raise ModelError(f"Could not open {path!r}: {e.strerror or e}") from e
        return raw, path
    if isinstance(source, bytes):
        return source, None
    if isinstance(source, bytearray):
        return bytes(source), None
    if isinstance(source, memoryview):
        if not source.c_contiguous:
            raise ModelError("model memoryview must be C-contiguous")
        mv = source.cast("B") if source.format != "B" or source.ndim != 1 else source
        return (mv if mv.readonly else mv.tobytes()), None
    raise TypeError(f"read_model() takes a path or bytes, not {type(source).__name__}")


def _fmt_shape(shape: Iterable[int]) -> str:
    return "(" + ",".join(str(d) for d in shape) + ")"


def _ro(arr: np.ndarray) -> np.ndarray:
    arr.flags.writeable = False
    return arr


class _Reader:
    def __init__(self, raw: Any, path: str | None):
        self.raw = raw
        self.path = path
        self.size = len(raw)
        self.where = "model"  # what is being read, for structural error messages
        self._buffers: list[TableView] = []
        self._buffer_cache: dict[int, tuple[int, int] | None] = {}

    # ---- entry ------------------------------------------------------------------------------
    def read(self) -> Model:
        if self.size < 8:
            raise ModelError(f"{INVALID_FLATBUFFER}: only {self.size} bytes")
        if bytes(self.raw[4:8]) != _IDENTIFIER:
            # LiteRT's verifier insists on the identifier too (a file without it is refused).
            raise ModelError(f"{INVALID_FLATBUFFER}: file identifier is {bytes(self.raw[4:8])!r}, "
                             f"not {_IDENTIFIER!r}")
        try:
            return self._read()
        except ModelError:
            raise
        except _FLATBUFFER_ERRORS as e:
            raise ModelError(f"{INVALID_FLATBUFFER}: {self.where}: {describe_failure(e)}") from e
        except RecursionError as e:  # pragma: no cover - the schema is not recursive
            raise ModelError(f"{INVALID_FLATBUFFER}: {self.where}: nesting too deep") from e

    def _read(self) -> Model:
        fb = root_table("Model", self.raw, "model")
        version = fb.scalar("version")
        if version != _SCHEMA_VERSION:
            raise ModelError(f"Model provided is schema version {version} not equal to supported "
                             f"version {_SCHEMA_VERSION}.")
        self.where = "model description"
        description = fb.string("description") or ""
        self.where = "buffers"
        self._buffers = fb.tables("buffers", "buffer")
        self.where = "operator codes"
        opcodes = self._read_opcodes(fb)
        self.where = "subgraphs"
        fb_subgraphs = fb.tables("subgraphs", "subgraph")
        if not fb_subgraphs:
            raise ModelError(_NO_SUBGRAPH)
        subgraphs = tuple(self._read_subgraph(i, sg, opcodes) for i, sg in enumerate(fb_subgraphs))
        self.where = "subgraph references"
        _check_subgraph_calls(subgraphs)
        self.where = "signature defs"
        signatures = self._read_signatures(fb, subgraphs)
        self.where = "metadata"
        metadata = self._read_metadata(fb)
        return Model(
            version=version,
            description=description,
            subgraphs=subgraphs,
            signatures=signatures,
            metadata=metadata,
            source=self.path,
            nbytes=self.size,
            raw=self.raw,
        )

    # ---- buffers ----------------------------------------------------------------------------
    def _buffer_span(self, index: int, what: str) -> tuple[int, int] | None:
        """(offset, size) in the file of buffer ``index``'s bytes; None for "no data"
        (buffer 0, an empty buffer)."""
        if index in self._buffer_cache:
            return self._buffer_cache[index]
        if index >= len(self._buffers):
            raise ModelError(f"{what}: buffer {index} does not exist (the model has "
                             f"{len(self._buffers)} buffers)")
        span: tuple[int, int] | None = None
        if index != 0:
            buf = self._buffers[index]
            bwhere = f"buffer {index}"
            offset, size = buf.scalar("offset"), buf.scalar("size")
            if offset > 1:
                # Data stored after the flatbuffer (models over 2 GB): offset from the file start.
                if offset + size > self.size:
                    raise ModelError(f"{bwhere}: data at offset {offset}, {size} bytes, runs past the "
                                     f"end of the {self.size}-byte file")
                span = (offset, size) if size else None
            else:
                data = buf.vector_span("data")
                if data is not None and data[1]:
                    span = data
        self._buffer_cache[index] = span
        return span

    def _buffer_bytes(self, index: int, what: str) -> bytes:
        span = self._buffer_span(index, what)
        if span is None:
            return b""
        off, size = span
        return bytes(self.raw[off:off + size])

    # ---- operator codes ---------------------------------------------------------------------
    def _read_opcodes(self, fb: TableView) -> list[tuple[str, int, str | None]]:
        out = []
        for i, oc in enumerate(fb.tables("operator_codes", "operator code")):
            what = f"operator code {i}"
            self.where = what
            # TFLite's rule: the larger of the int8 deprecated code and the int32 code
            # (old files fill only the former, files with codes >= 127 only the latter).
            code = max(oc.scalar("deprecated_builtin_code"), oc.scalar("builtin_code"))
            version = oc.scalar("version")
            if code < 0:
                raise ModelError(f"{what}: negative builtin code {code}")
            custom = oc.string("custom_code")
            if code == CUSTOM_OPCODE:
                if not custom:
                    raise ModelError(f"{what}: operator with CUSTOM builtin_code has no custom_code")
                out.append(("CUSTOM", version, custom))
                continue
            name = builtin_op_name(code)
            if name is None:
                raise ModelError(f"{what}: builtin code {code} is not in this TFLite schema "
                                 "(a newer `tflite` package may know it)")
            out.append((name, version, None))
        return out

    # ---- subgraphs --------------------------------------------------------------------------
    def _read_subgraph(self, sgi: int, sg: TableView, opcodes: list[tuple[str, int, str | None]]) -> Subgraph:
        pre = f"subgraph {sgi}, " if sgi else ""
        self.where = f"subgraph {sgi}"
        name = sg.string("name") or ""
        fb_tensors = sg.tables("tensors", f"{pre}tensor")
        tensors = tuple(self._read_tensor(pre, i, t) for i, t in enumerate(fb_tensors))
        tensors = _resolve_block_scales(pre, tensors)
        n = len(tensors)
        self.where = f"subgraph {sgi}"
        inputs = _indices(sg.int32s("inputs"), n, f"{pre}subgraph inputs", optional=False)
        outputs = _indices(sg.int32s("outputs"), n, f"{pre}subgraph outputs", optional=False)
        operators = tuple(
            self._read_operator(pre, i, op, opcodes, tensors)
            for i, op in enumerate(sg.tables("operators", f"{pre}operator"))
        )
        _check_dataflow(pre, tensors, operators)
        tensors = _empty_constants(tensors, operators, inputs)
        return Subgraph(index=sgi, name=name, tensors=tensors, operators=operators, inputs=inputs,
                        outputs=outputs)

    # ---- tensors ----------------------------------------------------------------------------
    def _read_tensor(self, pre: str, index: int, t: TableView) -> Tensor:
        what = f"{pre}tensor {index}"
        self.where = what
        name = t.string("name") or ""
        what = f"{pre}tensor {index} ({name!r})"
        self.where = what
        t.what = what
        code = t.scalar("type")
        dtype = tensor_type_name(code)
        if dtype is None:
            raise ModelError(f"{what}: unknown tensor type {code}")
        shape = t.int32s("shape") or ()
        if shape and min(shape) < 0:
            raise ModelError(f"{what}: negative dimension in shape {_fmt_shape(shape)}")
        signature = t.int32s("shape_signature")
        # An empty signature next to a non-empty shape means "no signature" (older converters).
        if signature is not None and not signature and shape:
            signature = None
        if signature is not None:
            if len(signature) != len(shape):
                raise ModelError(f"{what}: shape_signature {_fmt_shape(signature)} and shape "
                                 f"{_fmt_shape(shape)} differ in rank")
            if signature and min(signature) < -1:
                raise ModelError(f"{what}: invalid dimension in shape_signature {_fmt_shape(signature)}")
        elements = math.prod(shape)
        sdt = storage_dtype(dtype)
        itemsize = sdt.itemsize if sdt is not None else 1
        if elements > MAX_ELEMENTS or elements * itemsize > MAX_TENSOR_BYTES:
            raise ModelError(f"{what}: shape {_fmt_shape(shape)} {dtype} has {elements} elements "
                             f"({elements * itemsize} bytes), more than this reader accepts")
        quant = self._read_quantization(t, what, shape)
        sparsity = self._read_sparsity(t, what, shape)
        buffer = t.scalar("buffer")
        span = self._buffer_span(buffer, what)
        data = None if span is None else self._tensor_data(what, dtype, shape, elements, buffer, span,
                                                           sparse=sparsity is not None)
        has_rank = bool(t.scalar("has_rank")) or len(shape) > 0 or data is not None
        return Tensor(
            index=index,
            name=name,
            dtype=dtype,
            shape=shape,
            shape_signature=signature,
            buffer=buffer,
            data=data,
            quantization=quant,
            sparsity=sparsity,
            is_variable=bool(t.scalar("is_variable")),
            has_rank=has_rank,
        )

    def _tensor_data(self, what: str, dtype: str, shape: tuple[int, ...], elements: int, buffer: int,
                     span: tuple[int, int], sparse: bool) -> np.ndarray:
        offset, size = span
        raw = self.raw
        if dtype == "string":
            _check_string_buffer(what, buffer, raw, offset, size, elements)
            return _ro(np.frombuffer(raw, np.uint8, size, offset))
        sdt = storage_dtype(dtype)
        if sdt is None:
            raise ModelError(f"{what}: a {dtype} tensor cannot hold constant data (buffer {buffer})")
        if dtype in PACKED_BITS:
            bits, signed = PACKED_BITS[dtype]
            per_byte = 8 // bits
            count = per_byte * size if sparse else elements
            need = -(-count // per_byte)
            if size != need:
                raise ModelError(f"{what}: buffer {buffer} holds {size} bytes but shape {_fmt_shape(shape)} "
                                 f"{dtype} needs {need}")
            vals = _unpack_bits(np.frombuffer(raw, np.uint8, size, offset), bits, signed)[:count]
            return _ro(vals if sparse else vals.reshape(shape))
        if sparse:
            # A sparse tensor's buffer holds only the stored values; the dense shape comes
            # from the sparsity parameters when it is densified.
            if size % sdt.itemsize:
                raise ModelError(f"{what}: sparse buffer {buffer} holds {size} bytes, not a multiple of "
                                 f"the {sdt.itemsize}-byte {dtype}")
            return _ro(np.frombuffer(raw, sdt, size // sdt.itemsize, offset))
        need = elements * sdt.itemsize
        if size != need:
            raise ModelError(f"{what}: buffer {buffer} holds {size} bytes but shape {_fmt_shape(shape)} "
                             f"{dtype} needs {need}")
        arr = np.frombuffer(raw, sdt, elements, offset).reshape(shape)
        if dtype == "bool" and arr.size and np.frombuffer(raw, np.uint8, size, offset).max() > 1:
            arr = arr.view(np.uint8) != 0  # normalize non-canonical bools (a copy)
        return _ro(arr)

    def _read_quantization(self, t: TableView, what: str, shape: tuple[int, ...]) -> Quantization | None:
        qwhat = f"{what}: quantization"
        q = t.table("quantization", qwhat)
        if q is None:
            return None
        if q.scalar("details_type") == BLOCKWISE_DETAILS:
            return self._read_blockwise(q, qwhat, shape)
        scale = q.vector("scale")
        zero = q.vector("zero_point")
        qmin = q.vector("min")
        qmax = q.vector("max")
        if scale is None or scale.size == 0:
            return None  # min/max alone (or nothing) is not a quantization LiteRT applies
        if zero is None or zero.size != scale.size:
            nz = 0 if zero is None else zero.size
            raise ModelError(f"{qwhat}: {nz} zero_point values and {scale.size} scale values; "
                             "must have the same number")
        axis = q.scalar("quantized_dimension")
        if scale.size > 1:
            if not 0 <= axis < len(shape):
                raise ModelError(f"{qwhat}: quantized_dimension {axis} out of range for shape "
                                 f"{_fmt_shape(shape)}")
            if shape[axis] != scale.size:
                raise ModelError(f"{qwhat}: {scale.size} scales but shape {_fmt_shape(shape)} has "
                                 f"{shape[axis]} along quantized_dimension {axis}")
        return Quantization(
            scale=_ro(scale.astype(np.float32)),
            zero_point=_ro(zero.astype(np.int64)),
            quantized_dimension=int(axis),
            min=None if qmin is None or qmin.size == 0 else _ro(qmin.astype(np.float32)),
            max=None if qmax is None or qmax.size == 0 else _ro(qmax.astype(np.float32)),
        )

    def _read_blockwise(self, q: TableView, qwhat: str, shape: tuple[int, ...]) -> Quantization:
        """Blockwise details: the scales tensor is resolved once every tensor is read
        (:func:`_resolve_block_scales`)."""
        bw = q.union("details", BlockwiseQuantization, f"{qwhat}: blockwise details")
        if bw is None:
            raise ModelError(f"{qwhat}: blockwise quantization without its details table")
        block = int(bw.scalar("block_size"))
        if block <= 0:
            raise ModelError(f"{qwhat}: blockwise block_size {block} must be positive")
        empty = _ro(np.zeros(0, np.float32))
        return Quantization(scale=empty, zero_point=_ro(np.zeros(0, np.int64)),
                            quantized_dimension=int(q.scalar("quantized_dimension")), block_size=block,
                            block_scales_tensor=int(bw.scalar("scales")))

    def _read_sparsity(self, t: TableView, what: str, shape: tuple[int, ...]) -> Sparsity | None:
        swhat = f"{what}: sparsity"
        sp = t.table("sparsity", swhat)
        if sp is None:
            return None
        order_arr = sp.vector("traversal_order")
        block_arr = sp.vector("block_map")
        order = () if order_arr is None else tuple(order_arr.tolist())
        block_map = () if block_arr is None else tuple(block_arr.tolist())
        rank = len(shape)
        if sorted(order) != list(range(len(order))) or len(order) != rank + len(block_map):
            raise ModelError(f"{swhat}: traversal_order {order} is not a permutation of the {rank} "
                             f"dimensions plus {len(block_map)} block dimensions")
        if any(not 0 <= b < rank for b in block_map):
            raise ModelError(f"{swhat}: block_map {block_map} refers to dimensions outside rank {rank}")
        dims = []
        fb_dims = sp.tables("dim_metadata", f"{swhat}: dim_metadata")
        if len(fb_dims) != len(order):
            raise ModelError(f"{swhat}: {len(fb_dims)} dim_metadata entries for {len(order)} "
                             "traversal dimensions")
        for k, dm in enumerate(fb_dims):
            dwhat = f"{swhat}: dim_metadata[{k}]"
            fmt = dm.scalar("format")
            if fmt == 0:
                dense = dm.scalar("dense_size")
                if dense < 0:
                    raise ModelError(f"{dwhat}: negative dense_size {dense}")
                dims.append(DimensionMetadata(format=0, dense_size=dense))
            elif fmt == 1:
                seg = self._sparse_index_vector(dm, "array_segments", dwhat)
                idx = self._sparse_index_vector(dm, "array_indices", dwhat)
                if seg is None or idx is None:
                    raise ModelError(f"{dwhat}: SPARSE_CSR dimension without array_segments/array_indices")
                dims.append(DimensionMetadata(format=1, dense_size=dm.scalar("dense_size"), array_segments=seg,
                                              array_indices=idx))
            else:
                raise ModelError(f"{dwhat}: unknown dimension format {fmt}")
        return Sparsity(traversal_order=order, block_map=block_map, dim_metadata=tuple(dims))

    def _sparse_index_vector(self, dm: TableView, field: str, what: str) -> np.ndarray | None:
        code = dm.scalar(field + "_type")
        if code == 0:
            return None
        lay = sparse_index_vector_layout(code)
        if lay is None:
            raise ModelError(f"{what}: unknown sparse index vector type {code}")
        vec = dm.union(field, lay, f"{what}: {field}")
        if vec is None:
            return None
        values = vec.vector("values")
        return _ro(np.zeros(0, np.int32)) if values is None else values

    # ---- operators --------------------------------------------------------------------------
    def _read_operator(self, pre: str, index: int, op: TableView, opcodes: list[tuple[str, int, str | None]],
                       tensors: tuple[Tensor, ...]) -> Operator:
        what = f"{pre}operator {index}"
        self.where = what
        oi = op.scalar("opcode_index")
        if oi >= len(opcodes):
            raise ModelError(f"{what}: opcode_index {oi} out of range (the model has {len(opcodes)} "
                             "operator codes)")
        opcode, version, custom = opcodes[oi]
        what = f"{pre}operator {index} ({custom or opcode})"
        self.where = op.what = what
        n = len(tensors)
        inputs = _indices(op.int32s("inputs"), n, f"{what} inputs", optional=True)
        outputs = _indices(op.int32s("outputs"), n, f"{what} outputs", optional=True)
        intermediates = _indices(op.int32s("intermediates"), n, f"{what} intermediates", optional=True)
        options = parse_operator_options(op, what)
        custom_options = None
        if custom is not None:
            large_off, large_size = op.scalar("large_custom_options_offset"), op.scalar("large_custom_options_size")
            if large_off > 1:
                if large_off + large_size > self.size:
                    raise ModelError(f"{what}: custom options at offset {large_off}, {large_size} bytes, "
                                     f"run past the end of the {self.size}-byte file")
                custom_options = bytes(self.raw[large_off:large_off + large_size])
            else:
                co = op.vector("custom_options")
                custom_options = b"" if co is None else co.tobytes()
        return Operator(
            index=index,
            opcode=opcode,
            version=version,
            inputs=inputs,
            outputs=outputs,
            intermediates=intermediates,
            options=options,
            custom_code=custom,
            custom_options=custom_options,
        )

    # ---- signatures and metadata ------------------------------------------------------------
    def _read_signatures(self, fb: TableView, subgraphs: tuple[Subgraph, ...]) -> tuple[SignatureDef, ...]:
        out = []
        for i, sd in enumerate(fb.tables("signature_defs", "signature def")):
            what = f"signature def {i}"
            self.where = what
            key = sd.string("signature_key") or ""
            what = f"signature def {i} ({key!r})"
            sgi = sd.scalar("subgraph_index")
            if sgi >= len(subgraphs):
                raise ModelError(f"{what}: subgraph_index {sgi} out of range (the model has "
                                 f"{len(subgraphs)} subgraphs)")
            n = len(subgraphs[sgi].tensors)
            maps = []
            for side in ("inputs", "outputs"):
                m: dict[str, int] = {}
                for tm in sd.tables(side, f"{what} {side}"):
                    name = tm.string("name") or ""
                    ti = tm.scalar("tensor_index")
                    if ti >= n:
                        raise ModelError(f"{what}: {side[:-1]} {name!r} refers to tensor {ti}, but "
                                         f"subgraph {sgi} has {n} tensors")
                    m[name] = ti
                maps.append(m)
            out.append(SignatureDef(key=key, subgraph_index=sgi, inputs=maps[0], outputs=maps[1]))
        return tuple(out)

    def _read_metadata(self, fb: TableView) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for i, md in enumerate(fb.tables("metadata", "metadata")):
            what = f"metadata {i}"
            self.where = what
            name = md.string("name") or ""
            out.setdefault(name, self._buffer_bytes(md.scalar("buffer"), f"{what} ({name!r})"))
        return out


# ---- checks ---------------------------------------------------------------------------------------


def _unpack_bits(packed: np.ndarray, bits: int, signed: bool) -> np.ndarray:
    """Unpack sub-byte integers, least significant bits first, into int8 (signed) or uint8."""
    mask = (1 << bits) - 1
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    vals = ((packed[:, None] >> shifts) & mask).reshape(-1)  # (size * per_byte,) uint8
    if not signed:
        return vals
    half = 1 << (bits - 1)
    return ((vals.astype(np.int16) ^ half) - half).astype(np.int8)


def _indices(vals: tuple[int, ...] | None, n: int, what: str, *, optional: bool) -> tuple[int, ...]:
    """A vector of tensor indices (:meth:`TableView.int32s`), each in ``[0, n)`` (or -1 where optional).
    (min and max of the tuple, not numpy comparisons: 2 us less per vector, about 500 in a model's read)"""
    if not vals:
        return ()
    lo = -1 if optional else 0
    if min(vals) < lo or max(vals) >= n:
        j = next(j for j, v in enumerate(vals) if not lo <= v < n)
        raise ModelError(f"{what}: tensor index {vals[j]} at position {j} is out of range "
                         f"(the subgraph has {n} tensors)")
    return vals


def _check_string_buffer(what: str, buffer: int, raw: Any, offset: int, size: int, elements: int) -> None:
    """TFLite string tensors: int32 count N, N+1 int32 offsets from the buffer start, then the bytes."""
    if size < 8:
        raise ModelError(f"{what}: string buffer {buffer} holds {size} bytes, too few for its header")
    count = int(np.frombuffer(raw, "<i4", 1, offset)[0])
    if count < 0 or 4 * (count + 2) > size:
        raise ModelError(f"{what}: string buffer {buffer} claims {count} strings in {size} bytes")
    if count != elements:
        raise ModelError(f"{what}: string buffer {buffer} holds {count} strings but the shape needs {elements}")
    offs = np.frombuffer(raw, "<i4", count + 1, offset + 4)
    if offs[0] != 4 * (count + 2) or offs[-1] != size or (np.diff(offs) < 0).any():
        raise ModelError(f"{what}: string buffer {buffer} has inconsistent string offsets")


def string_values(raw: np.ndarray) -> np.ndarray:
    """The strings (1-D object array of bytes) of a string constant as read (its raw, checked buffer)."""
    buf = np.asarray(raw, np.uint8).tobytes()
    count = int(np.frombuffer(buf, "<i4", 1, 0)[0])
    offs = np.frombuffer(buf, "<i4", count + 1, 4)
    out = np.empty(count, dtype=object)
    for i in range(count):
        out[i] = buf[offs[i]:offs[i + 1]]
    return out


def _resolve_block_scales(pre: str, tensors: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    """Blockwise-quantized tensors get the per-block scales of the tensor their details name
    (constant, one row per weight row, ``innermost / block_size`` columns)."""
    out = list(tensors)
    for i, t in enumerate(tensors):
        q = t.quantization
        if q is None or not q.block_size:
            continue
        what = f"{pre}tensor {i} ({t.name!r}): blockwise quantization"
        si = q.block_scales_tensor
        if not 0 <= si < len(tensors):
            raise ModelError(f"{what}: scales tensor {si} out of range (0..{len(tensors) - 1})")
        s = tensors[si]
        if s.data is None:
            raise ModelError(f"{what}: scales tensor {si} ({s.name!r}) is not a constant")
        if not t.shape or t.shape[-1] % q.block_size:
            raise ModelError(f"{what}: innermost dimension of shape {_fmt_shape(t.shape)} is not a "
                             f"multiple of block_size {q.block_size}")
        rows = math.prod(t.shape[:-1])
        want = rows * (t.shape[-1] // q.block_size)
        if s.data.size != want:
            raise ModelError(f"{what}: scales tensor {si} has {s.data.size} values; shape "
                             f"{_fmt_shape(t.shape)} in blocks of {q.block_size} needs {want}")
        scales = _ro(np.asarray(s.data).reshape(rows, t.shape[-1] // q.block_size))
        out[i] = dataclasses.replace(t, quantization=dataclasses.replace(q, block_scales=scales))
    return tuple(out)


def _empty_constants(tensors: tuple[Tensor, ...], operators: tuple[Operator, ...],
                     inputs: tuple[int, ...]) -> tuple[Tensor, ...]:
    """A zero-element tensor with its own (necessarily empty) buffer that nothing produces is a
    constant whose data are the empty array (e.g. the ``()`` shape operand of RESHAPE)."""
    candidates = [t.index for t in tensors if t.data is None and t.buffer != 0 and not t.is_variable
                  and storage_dtype(t.dtype) is not None and 0 in t.shape and t.sparsity is None]
    if not candidates:
        return tensors
    written = set(inputs)
    for op in operators:
        written.update(op.outputs)
    out = list(tensors)
    for i in candidates:
        if i not in written:
            t = tensors[i]
            dt = storage_dtype(t.dtype)
            out[i] = dataclasses.replace(t, data=_ro(np.zeros(t.shape, dt)))
    return tuple(out)


def _subgraph_refs(op: Operator) -> list[int]:
    refs: list[int] = []
    for key, value in op.options.items():
        if key.endswith(_SUBGRAPH_KEYS_SUFFIX) or key in _SUBGRAPH_KEYS:
            if isinstance(value, tuple):
                refs.extend(int(v) for v in value)
            else:
                refs.append(int(value))
    return refs


def _check_subgraph_calls(subgraphs: tuple[Subgraph, ...]) -> None:
    """Subgraph indices in control-flow options are in range and never lead back to the caller."""
    n = len(subgraphs)
    calls: list[set[int]] = []
    for sg in subgraphs:
        pre = f"subgraph {sg.index}, " if sg.index else ""
        targets: set[int] = set()
        for op in sg.operators:
            for ref in _subgraph_refs(op):
                if not 0 <= ref < n:
                    raise ModelError(f"{pre}operator {op.index} ({op.name}): refers to subgraph {ref}, but "
                                     f"the model has {n} subgraphs")
                targets.add(ref)
        calls.append(targets)
    # Iterative depth-first search for a cycle (WHILE/IF/CALL_ONCE must not recurse).
    state = [0] * n  # 0 = unvisited, 1 = on the current path, 2 = done
    for start in range(n):
        if state[start]:
            continue
        path = [start]
        stack = [iter(sorted(calls[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
                continue
            if state[nxt] == 1:
                cycle = path[path.index(nxt):] + [nxt]
                raise ModelError("subgraphs call each other recursively: "
                                 + " -> ".join(str(s) for s in cycle))
            if state[nxt] == 0:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(calls[nxt])))


def _check_dataflow(pre: str, tensors: tuple[Tensor, ...], operators: tuple[Operator, ...]) -> None:
    """Each tensor is produced at most once, and only read by operators after its producer."""
    producer: dict[int, int] = {}
    for op in operators:
        for t in op.outputs:
            if t < 0:
                continue
            if t in producer:
                raise ModelError(f"{pre}tensor {t} ({tensors[t].name!r}) is produced by both operator "
                                 f"{producer[t]} and operator {op.index} ({op.name})")
            producer[t] = op.index
    for op in operators:
        for t in op.inputs:
            p = producer.get(t)
            if p is not None and p >= op.index:
                if p == op.index:
                    # LiteRT's words first, so users searching for them find this
                    raise ModelError(f"{pre}Tensor {t} is both input {op.inputs.index(t)} and output "
                                     f"{op.outputs.index(t)}: operator {op.index} ({op.name}) reads tensor "
                                     f"{t} ({tensors[t].name!r}), which it also produces")
                raise ModelError(f"{pre}operator {op.index} ({op.name}) reads tensor {t} "
                                 f"({tensors[t].name!r}) before operator {p} produces it "
                                 "(operators are not in topological order)")
