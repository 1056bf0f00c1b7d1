"""Bounds-checked reading of flatbuffer tables laid out by the ``tflite`` package's generated
classes, and the generic operator-options parser built on it.

The python ``flatbuffers`` runtime has no verifier: its accessors trust every
offset and length in the file.  A corrupt string length is silently truncated
by slicing, and a vector length of 2**31 makes a loop over ``XLength()`` run
(and allocate) for ever.  So we let the generated classes tell us the *layout*
and do the reading ourselves:

* :func:`class_fields` learns, once per generated class, how each accessor reads its
  field (vtable slot, kind, element type, default, sub-table class) by running
  it against a recording stand-in for ``flatbuffers.table.Table``.
* :func:`layout` gives a table's :class:`Layout` by name from ``_tflite_layout.py``, the
  layouts :func:`class_fields` found in the ``tflite`` package, written once by
  ``python -m litegpu.tools.tflite_layout --write`` (importing the package costs about 0.1 s
  a process: it imports all ~190 generated modules).  A table the file does not hold (a newer
  ``tflite`` package) is learnt from the package, as before.
* :class:`TableView` reads a table through that layout: its vtable is checked and
  read once; every scalar, string, vector and sub-table offset is checked against
  the buffer before it is used; vector lengths are checked against the bytes
  left *before* anything is iterated or allocated.  Numeric vectors come back as
  read-only numpy views of the buffer.

Any violation raises :class:`~litegpu.ModelError` starting with LiteRT's words
"The model is not a valid Flatbuffer buffer" and naming what was being read.

Options tables become dicts whose keys are the snake_case field names
(``DilationWFactor`` -> ``dilation_w_factor``); numeric vectors become tuples
(``[ubyte]`` vectors become ``bytes``), strings ``str``, enums stay ints.
"""

from __future__ import annotations

import functools
import importlib
import re
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._errors import ModelError
from ._schema import little_endian, package_union_members

__all__ = [
    "INVALID_FLATBUFFER",
    "FieldSpec",
    "Layout",
    "layout",
    "as_layout",
    "class_fields",
    "fields",
    "snake_case",
    "TableView",
    "root_table",
    "parse_table",
    "parse_operator_options",
    "options_layout",
    "sparse_index_vector_layout",
]

#: The words LiteRT uses when its verifier rejects a file; every structural error starts with them.
INVALID_FLATBUFFER = "The model is not a valid Flatbuffer buffer"

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")

# A table with no fields: a 4-byte vtable (size 4, table size 4) at 0 and the table at 4
# pointing back to it.  Used to probe generated accessors for their defaults.
_EMPTY_TABLE = b"\x04\x00\x04\x00\x04\x00\x00\x00"

_STRUCT_CODES = {("b", 1): "?", ("i", 1): "b", ("u", 1): "B", ("i", 2): "h", ("u", 2): "H",
                 ("i", 4): "i", ("u", 4): "I", ("i", 8): "q", ("u", 8): "Q", ("f", 4): "f",
                 ("f", 8): "d"}


def _invalid(what: str, detail: str) -> ModelError:
    return ModelError(f"{INVALID_FLATBUFFER}: {what}: {detail}")


# ---- reflection over the generated classes -----------------------------------------------------


@dataclass(frozen=True)
class FieldSpec:
    """How a generated accessor reads its field."""

    accessor: str  # generated method name, e.g. "DilationWFactor"
    name: str  # snake_case, e.g. "dilation_w_factor"
    slot: int  # vtable offset (4 + 2 * field id)
    kind: str  # scalar | string | table | union | vector | table_vector | string_vector
    dtype: np.dtype | None = None  # scalars and numeric vectors: little-endian element type
    table: type | str | None = None  # table, table_vector: the generated class (or its name)
    default: Any = None  # scalars: the schema default

    @property
    def index(self) -> int:
        return (self.slot - 4) // 2

    @functools.cached_property
    def unpack(self) -> Any:
        assert self.dtype is not None
        return struct.Struct("<" + _STRUCT_CODES[(self.dtype.kind, self.dtype.itemsize)]).unpack_from


class _Recorder:
    """Stands in for ``flatbuffers.table.Table`` and records what a generated accessor does
    with its field (which decides the field's kind and element type).  With ``present`` false
    every field reads as absent, so the accessor returns the schema default."""

    __slots__ = ("Bytes", "Pos", "calls", "slot", "flags", "present")

    def __init__(self, present: bool) -> None:
        self.Bytes = _EMPTY_TABLE
        self.Pos = 4
        self.calls: list[str] = []
        self.slot: int | None = None
        self.flags: Any = None
        self.present = present

    def Offset(self, slot: int) -> int:
        self.calls.append("Offset")
        if self.slot is None:  # a patched accessor may go on to read other fields
            self.slot = slot
        return 4 if self.present else 0

    def Get(self, flags: Any, off: int) -> Any:
        self.calls.append("Get")
        if self.flags is None:
            self.flags = flags
        return flags.py_type(0)

    def String(self, off: int) -> bytes:
        self.calls.append("String")
        return b""

    def Vector(self, off: int) -> int:
        self.calls.append("Vector")
        return 0

    def VectorLen(self, off: int) -> int:
        self.calls.append("VectorLen")
        return 0

    def Indirect(self, off: int) -> int:
        self.calls.append("Indirect")
        return 4

    def Union(self, t2: Any, off: int) -> None:
        self.calls.append("Union")
        t2.Bytes, t2.Pos = _EMPTY_TABLE, 4

    def GetVectorAsNumpy(self, flags: Any, off: int) -> np.ndarray:
        self.calls.append("Vector")
        if self.flags is None:
            self.flags = flags
        return np.zeros(0)


@functools.cache  # a model's read asks for the same few union names once per operator
def snake_case(name: str) -> str:
    """``StrideW`` -> ``stride_w``, ``DilationWFactor`` -> ``dilation_w_factor``, ``AdjX`` -> ``adj_x``."""
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    return s.lower()


def _call(cls: type, accessor: str, present: bool) -> tuple[_Recorder, Any]:
    method = getattr(cls, accessor)
    obj = cls.__new__(cls)
    rec = _Recorder(present)
    obj._tab = rec
    nargs = method.__code__.co_argcount
    if nargs == 1:
        result = method(obj)
    elif nargs == 2:
        result = method(obj, 0)
    else:
        raise TypeError(accessor)
    return rec, result


def _probe(cls: type, accessor: str) -> FieldSpec | None:
    try:
        rec, result = _call(cls, accessor, present=True)
    except Exception:  # not a plain field accessor
        return None
    if rec.slot is None or not rec.calls or rec.calls[0] != "Offset":
        return None
    steps = rec.calls[1:]
    if "Offset" in steps:  # a hand-patched accessor (OperatorCode.BuiltinCode) reads more fields
        steps = steps[: steps.index("Offset")]
    dtype = None
    if rec.flags is not None:
        import flatbuffers.number_types as _N

        dtype = _N.to_numpy_type(rec.flags)
    default = None
    if steps == ["Get"]:
        kind = "scalar"
        # The raw stored value is what we read; the default is the schema's for an absent field.
        default = _call(cls, accessor, present=False)[1] if accessor != "BuiltinCode" else 0
    elif steps == ["String"]:
        kind = "string"
    elif steps == ["Indirect"]:
        kind, dtype = "table", None
    elif steps == ["Union"]:
        kind, dtype = "union", None
    elif steps == ["Vector", "Get"]:
        kind = "vector"
    elif steps == ["Vector"]:  # a *AsNumpy-only accessor
        kind = "vector"
    elif steps == ["Vector", "Indirect"]:
        kind, dtype = "table_vector", None
    elif steps == ["Vector", "String"]:
        kind, dtype = "string_vector", None
    else:
        return None
    if dtype is not None:
        dtype = little_endian(dtype)
    table = type(result) if kind in ("table", "table_vector") and result is not None else None
    return FieldSpec(accessor, snake_case(accessor), rec.slot, kind, dtype, table, default)


@functools.cache
def class_fields(cls: type) -> tuple[FieldSpec, ...]:
    """The fields of a generated table class, in schema (slot) order, learnt from its accessors."""
    names = [k for k, v in vars(cls).items() if callable(v) and not k.startswith("_")]
    nameset = set(names)
    specs = []
    for name in names:
        if name == "Init" or name.startswith("GetRootAs") or name.endswith("BufferHasIdentifier"):
            continue
        if any(name.endswith(sfx) and name[: -len(sfx)] in nameset for sfx in ("Length", "IsNone", "AsNumpy")):
            continue
        spec = _probe(cls, name)
        if spec is not None:
            specs.append(spec)
    return tuple(sorted(specs, key=lambda s: s.slot))


class Layout:
    """How one table of the schema is laid out: its name and its fields (slot order)."""

    __slots__ = ("name", "fields", "by_name", "fast")

    def __init__(self, name: str, fields: tuple[FieldSpec, ...]) -> None:
        self.name = name
        self.fields = fields
        self.by_name = {f.name: f for f in fields}
        #: name -> (field, its vtable index): what every read of a field looks up (a model read asks
        #: about 10,000 times for a MediaPipe model)
        self.fast = {f.name: (f, f.index) for f in fields}

    def __repr__(self) -> str:
        return f"Layout({self.name!r}, {len(self.fields)} fields)"


@functools.cache
def _class_layout(cls: type) -> Layout:
    return Layout(cls.__name__, class_fields(cls))


def _generated_class(name: str) -> type:
    return getattr(importlib.import_module(f"tflite.{name}"), name)


@functools.cache
def layout(name: str) -> Layout:
    """The layout of schema table ``name`` (``"Model"``, ``"Conv2DOptions"``): from the generated
    ``_tflite_layout.py``, else (a table newer than that file) learnt from the ``tflite`` package."""
    from ._tflite_layout import TABLES

    raw = TABLES.get(name)
    if raw is None:
        return _class_layout(_generated_class(name))
    return Layout(name, tuple(
        FieldSpec(acc, snake_case(acc), slot, kind, None if dt is None else little_endian(np.dtype(dt)), table,
                  default) for acc, slot, kind, dt, table, default in raw))


def as_layout(x: Layout | type | str) -> Layout:
    """A :class:`Layout` from a layout, a table's name or a class in the generated classes' form."""
    if isinstance(x, Layout):
        return x
    if isinstance(x, str):
        return layout(x)
    return _class_layout(x)


def fields(x: Layout | type | str) -> tuple[FieldSpec, ...]:
    """The fields of a table (a :class:`Layout`, a table's name or a generated class), slot order."""
    return as_layout(x).fields


@functools.cache
def _package_union(union: str) -> dict[int, type]:
    return package_union_members(union)


def _union_layout(union: str, type_code: int) -> Any:
    """The :class:`~litegpu._flatbuf.Layout` of union ``union``'s member ``type_code`` (the
    generated table's; a code it does not know from the installed ``tflite`` package), or None."""
    from ._tflite_layout import UNIONS

    name = UNIONS.get(union, {}).get(type_code)
    if name is not None:
        return as_layout(name)
    cls = _package_union(union).get(type_code)
    return None if cls is None else as_layout(cls)


def options_layout(type_code: int, union: str = "BuiltinOptions") -> Any:
    """Layout of the options table for a union type code of ``BuiltinOptions`` or ``BuiltinOptions2``
    (None for NONE or an unknown code)."""
    return _union_layout(union, type_code)


def sparse_index_vector_layout(type_code: int) -> Any:
    """Layout for a ``SparseIndexVector`` union code (Int32Vector, Uint16Vector, Uint8Vector)."""
    return _union_layout("SparseIndexVector", type_code)


# ---- bounds-checked table access -----------------------------------------------------------------


@functools.cache
def _vtable_struct(n: int) -> struct.Struct:
    """The unpacker of a vtable's ``n`` field offsets (one per size, not a format string per table)."""
    return struct.Struct(f"<{n}H")


@functools.cache
def _int32s_struct(n: int) -> struct.Struct:
    """The unpacker of ``n`` little-endian int32 (:meth:`TableView.int32s`)."""
    return struct.Struct(f"<{n}i")


class TableView:
    """One table of a flatbuffer, read through ``table``'s layout (a :class:`Layout`, a table's
    name or a class in the generated classes' form).

    The vtable is validated and read on construction; field accessors check every
    offset and length against the buffer.  ``what`` names the table in errors.
    """

    __slots__ = ("layout", "buf", "pos", "what", "_vt", "_specs", "_fast", "_size")

    def __init__(self, table: Layout | type | str, buf: Any, pos: int, what: str, size: int | None = None):
        self.layout = table if type(table) is Layout else as_layout(table)
        self.buf = buf
        self.pos = pos
        self.what = what
        self._specs = self.layout.by_name
        self._fast = self.layout.fast
        # ``size``: len(buf), where the caller knows it (the buffer does not change size)
        self._size = size = len(buf) if size is None else size
        if pos < 0 or pos + 4 > size:
            raise _invalid(what, f"table at offset {pos} is outside the {size}-byte buffer")
        vt = pos - _I32.unpack_from(buf, pos)[0]
        if vt < 0 or vt + 4 > size:
            raise _invalid(what, f"vtable at offset {vt} is outside the {size}-byte buffer")
        vsize = _U16.unpack_from(buf, vt)[0]
        tsize = _U16.unpack_from(buf, vt + 2)[0]
        if vsize < 4 or vsize % 2 or vt + vsize > size:
            raise _invalid(what, f"vtable at offset {vt} has invalid size {vsize}")
        if tsize < 4 or pos + tsize > size:
            raise _invalid(what, f"table at offset {pos} of {tsize} bytes runs past the end of the buffer")
        self._vt = _vtable_struct((vsize - 4) // 2).unpack_from(buf, vt + 4)

    def _offset(self, spec: FieldSpec) -> int:
        i = spec.index
        return self._vt[i] if i < len(self._vt) else 0

    def _spec(self, name: str) -> FieldSpec:
        return self._specs[name]

    def has(self, name: str) -> bool:
        return self._offset(self._spec(name)) != 0

    def scalar(self, name: str) -> Any:
        """A scalar field as stored, or its schema default when absent."""
        spec, i = self._fast[name]
        vt = self._vt
        o = vt[i] if i < len(vt) else 0
        if not o:
            return spec.default
        at = self.pos + o
        assert spec.dtype is not None
        if at + spec.dtype.itemsize > self._size:
            raise _invalid(self.what, f"{name}: field at offset {at} is outside the buffer")
        return spec.unpack(self.buf, at)[0]

    def _target(self, spec: FieldSpec) -> int | None:
        """Where the uoffset stored in field ``spec`` points (None when absent)."""
        i = spec.index
        vt = self._vt
        o = vt[i] if i < len(vt) else 0
        if not o:
            return None
        at = self.pos + o
        if at + 4 > self._size:
            raise _invalid(self.what, f"{spec.name}: field at offset {at} is outside the buffer")
        return at + _U32.unpack_from(self.buf, at)[0]

    def _span(self, spec: FieldSpec, itemsize: int) -> tuple[int, int] | None:
        """(first byte, element count) of a vector or string, checked to fit in the buffer
        before anything is read, so a corrupt length of 2**31 costs nothing."""
        start = self._target(spec)
        if start is None:
            return None
        size = self._size
        if start + 4 > size:
            raise _invalid(self.what, f"{spec.name}: vector at offset {start} is outside the buffer")
        n = _U32.unpack_from(self.buf, start)[0]
        first = start + 4
        if n * itemsize > size - first:
            raise _invalid(self.what, f"{spec.name}: {n} elements of {itemsize} bytes at offset {first} "
                                      f"run past the end of the {size}-byte buffer")
        return first, n

    def vector_span(self, name: str) -> tuple[int, int] | None:
        spec = self._spec(name)
        assert spec.dtype is not None
        return self._span(spec, spec.dtype.itemsize)

    def int32s(self, name: str) -> tuple[int, ...] | None:
        """An int32 vector (a shape, a list of tensor indices) as a tuple of ints (None when absent).
        What ``tuple(vector(name).tolist())`` gives, without the numpy view: a model's read asks for
        about four such short vectors per tensor and operator, and each view and list cost about 1.5 us
        more (1-1.5 ms of a 250-tensor model's read on the 2-core CI machine)."""
        spec = self._spec(name)
        if spec.kind != "vector" or spec.dtype is None or spec.dtype.kind != "i" or spec.dtype.itemsize != 4:
            raise TypeError(f"{name} is not an int32 vector")
        span = self._span(spec, 4)
        if span is None:
            return None
        return _int32s_struct(span[1]).unpack_from(self.buf, span[0])

    def vector(self, name: str) -> np.ndarray | None:
        """A numeric vector as a read-only numpy view of the buffer (None when absent)."""
        spec = self._spec(name)
        assert spec.kind == "vector" and spec.dtype is not None
        span = self._span(spec, spec.dtype.itemsize)
        if span is None:
            return None
        arr = np.frombuffer(self.buf, dtype=spec.dtype, count=span[1], offset=span[0])
        arr.flags.writeable = False
        return arr

    def _string_at(self, start: int, label: str) -> str:
        size = self._size
        if start + 4 > size:
            raise _invalid(self.what, f"{label}: string at offset {start} is outside the buffer")
        n = _U32.unpack_from(self.buf, start)[0]
        first = start + 4
        # Like the flatbuffers verifier we insist on the terminating NUL, which also
        # catches most corrupt lengths; bad UTF-8 is replaced, not fatal.
        if n >= size - first or self.buf[first + n] != 0:
            raise _invalid(self.what, f"{label}: string of {n} bytes at offset {first} runs past the "
                                      "end of the buffer or is not NUL-terminated")
        return bytes(self.buf[first:first + n]).decode("utf-8", errors="replace")

    def string(self, name: str) -> str | None:
        spec = self._spec(name)
        start = self._target(spec)
        return None if start is None else self._string_at(start, name)

    def strings(self, name: str) -> tuple[str, ...]:
        spec = self._spec(name)
        span = self._span(spec, 4)
        if span is None:
            return ()
        first, n = span
        return tuple(self._string_at(first + 4 * j + _U32.unpack_from(self.buf, first + 4 * j)[0],
                                     f"{name}[{j}]") for j in range(n))

    def table(self, name: str, what: str | None = None) -> TableView | None:
        spec = self._spec(name)
        at = self._target(spec)
        if at is None:
            return None
        assert spec.table is not None
        return TableView(spec.table, self.buf, at, what or f"{self.what}: {name}", self._size)

    def tables(self, name: str, what: str | None = None) -> list[TableView]:
        spec = self._spec(name)
        span = self._span(spec, 4)
        if span is None:
            return []
        first, n = span
        assert spec.table is not None
        label = what or f"{self.what}: {name}"
        offs = np.frombuffer(self.buf, "<u4", n, first).astype(np.int64)
        positions = (first + 4 * np.arange(n, dtype=np.int64) + offs).tolist()
        lay, buf, size = as_layout(spec.table), self.buf, self._size
        return [TableView(lay, buf, p, f"{label}[{j}]", size) for j, p in enumerate(positions)]

    def union(self, name: str, table: Layout | type | str, what: str | None = None) -> TableView | None:
        """The table of union field ``name`` read as ``table`` (None when absent)."""
        spec = self._spec(name)
        at = self._target(spec)
        return None if at is None else TableView(table, self.buf, at, what or f"{self.what}: {name}", self._size)


def root_table(table: Layout | type | str, buf: Any, what: str) -> TableView:
    """The root table of a flatbuffer (the uoffset at byte 0)."""
    if len(buf) < 8:
        raise _invalid(what, f"only {len(buf)} bytes")
    return TableView(table, buf, _U32.unpack_from(buf, 0)[0], what)


# ---- options -------------------------------------------------------------------------------------

_MAX_DEPTH = 8  # the schema has no recursive tables; this only bounds a corrupt file


def parse_table(t: TableView, _depth: int = 0) -> dict[str, Any]:
    """All fields of a table as a dict of snake_case names (absent fields take schema defaults)."""
    if _depth > _MAX_DEPTH:
        raise _invalid(t.what, "tables nested too deeply")
    out: dict[str, Any] = {}
    for f in t.layout.fields:
        if f.kind == "scalar":
            out[f.name] = t.scalar(f.name)
        elif f.kind == "string":
            out[f.name] = t.string(f.name) or ""
        elif f.kind == "vector":
            arr = t.vector(f.name)
            if f.dtype == np.uint8:
                out[f.name] = b"" if arr is None else arr.tobytes()
            else:
                out[f.name] = () if arr is None else tuple(arr.tolist())
        elif f.kind == "string_vector":
            out[f.name] = t.strings(f.name)
        elif f.kind == "table":
            sub = t.table(f.name)
            out[f.name] = None if sub is None else parse_table(sub, _depth + 1)
        elif f.kind == "table_vector":
            out[f.name] = tuple(parse_table(s, _depth + 1) for s in t.tables(f.name))
        # unions inside options tables do not occur in the schema; they are skipped
    return out


def parse_operator_options(op: TableView, what: str) -> dict[str, Any]:
    """The builtin options of an ``Operator`` table (``builtin_options`` and, in newer schemas,
    ``builtin_options2``) as one dict."""
    options: dict[str, Any] = {}
    for union, type_field in (("BuiltinOptions", "builtin_options_type"),
                              ("BuiltinOptions2", "builtin_options2_type")):
        if type_field not in op._specs:  # an older tflite package without this union
            continue
        code = op.scalar(type_field)
        if code == 0:
            continue
        lay = options_layout(code, union)
        if lay is None:
            raise ModelError(f"{what}: unknown {union} type {code} (not in this TFLite schema)")
        table = op.union(snake_case(union), lay, f"{what}: {lay.name}")
        if table is None:  # the type is set but the table left out: schema defaults, like LiteRT
            table = TableView(lay, _EMPTY_TABLE, 4, f"{what}: {lay.name}")
        options.update(parse_table(table))
    return options
