"""Enum tables of the TFLite schema, taken from the ``tflite`` package's generated code.

The generated classes are the single source of truth: tensor type codes, builtin
operator codes and the ``BuiltinOptions``/``BuiltinOptions2`` unions are read
from them by ``python -m litegpu.tools.tflite_layout --write`` into ``_tflite_layout.py``
(with the tables' layouts, see ``_flatbuf.py``), so that reading a model imports no
``tflite`` module (the package imports all its ~190 modules, about 0.1 s); a test
regenerates the file and compares.  A code that file does not know is looked up in the
installed ``tflite`` package, so a newer release that adds types, ops or options is still
picked up without editing anything.
"""

from __future__ import annotations

import functools
import importlib
import sys
from typing import Any

import numpy as np

__all__ = [
    "tensor_type_name",
    "tensor_type_names",
    "storage_dtype",
    "little_endian",
    "builtin_op_name",
    "builtin_op_code",
    "builtin_op_names",
    "CUSTOM_OPCODE",
    "PACKED_BITS",
    "PADDING",
    "ACTIVATION",
]

#: TFLite ``Padding`` enum (values as stored in options).
PADDING = {"SAME": 0, "VALID": 1}
#: TFLite ``ActivationFunctionType`` enum.
ACTIVATION = {"NONE": 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3, "TANH": 4, "SIGN_BIT": 5}
#: Builtin code of custom operators (``BuiltinOperator.CUSTOM``).
CUSTOM_OPCODE = 32


def _generated(name: str) -> Any:
    """The generated class ``tflite.<name>.<name>`` (the package re-exports the classes
    under the module names, so we go through the module to be explicit)."""
    return getattr(importlib.import_module(f"tflite.{name}"), name)


def _enum_members(cls: type) -> dict[str, int]:
    return {k: v for k, v in vars(cls).items() if not k.startswith("_") and isinstance(v, int)}


# ---- tensor types ------------------------------------------------------------------------------

# Tensor types of newer schemas (LiteRT 2.3) than the ``tflite`` package we may have; the
# generated enum wins where it knows a code.
_NEWER_TENSOR_TYPES = {19: "int2", 20: "uint4", 21: "float8_e4m3fn", 22: "float8_e5m2"}
# Builtin operators of newer schemas, likewise.
_NEWER_BUILTIN_OPS = {209: "STABLEHLO_CASE"}

# dtype names whose in-memory storage is not a numpy dtype of the same name.
# Sub-byte integers are stored packed and unpacked by the reader (see PACKED_BITS);
# bfloat16 and the float8 types have no numpy dtype: their bits are kept as unsigned ints.
_STORAGE_OVERRIDES: dict[str, str | None] = {
    "int4": "int8",
    "int2": "int8",
    "uint4": "uint8",
    "bfloat16": "uint16",
    "float8_e4m3fn": "uint8",
    "float8_e5m2": "uint8",
    "string": None,
    "resource": None,
    "variant": None,
}

#: Packed sub-byte types: dtype name -> (bits per value, signed).  Values are packed from the
#: least significant bits of each byte up (int4: low nibble first).
PACKED_BITS: dict[str, tuple[int, bool]] = {"int4": (4, True), "uint4": (4, False), "int2": (2, True)}


def package_tensor_type_names() -> dict[int, str]:
    """TensorType code -> dtype name, from the installed ``tflite`` package.

    The schema's enum names lower-cased are exactly our dtype names
    (``FLOAT32`` -> ``"float32"``, ``INT4`` -> ``"int4"``, ``STRING`` -> ``"string"``).
    """
    names = {v: k.lower() for k, v in _enum_members(_generated("TensorType")).items()}
    for code, name in _NEWER_TENSOR_TYPES.items():
        names.setdefault(code, name)
    return names


@functools.cache
def tensor_type_names() -> dict[int, str]:
    """TensorType code -> dtype name, for every type of the schema (the generated table's; see
    :func:`package_tensor_type_names`)."""
    from ._tflite_layout import TENSOR_TYPES

    return dict(TENSOR_TYPES)


@functools.cache
def _package_tensor_type_names() -> dict[int, str]:
    return package_tensor_type_names()


def tensor_type_name(code: int) -> str | None:
    """dtype name of a TensorType code, or None when the schema does not know it."""
    name = tensor_type_names().get(code)
    return name if name is not None else _package_tensor_type_names().get(code)


def little_endian(dtype: np.dtype) -> np.dtype:
    """``dtype`` in the file's (little-endian) byte order; the plain native dtype on
    little-endian hosts, so that arrays print as ``float32`` rather than ``<f4``."""
    dtype = np.dtype(dtype)
    return dtype if sys.byteorder == "little" or dtype.itemsize == 1 else dtype.newbyteorder("<")


def storage_dtype(name: str) -> np.dtype | None:
    """The (little-endian) numpy dtype that holds the data of a tensor of dtype ``name`` once
    read (None for types without numeric storage: string, resource, variant)."""
    storage = _STORAGE_OVERRIDES.get(name, name)
    return None if storage is None else little_endian(np.dtype(storage))


# ---- builtin operators -------------------------------------------------------------------------


def package_builtin_op_names() -> dict[int, str]:
    """Builtin operator code -> name (``3`` -> ``"CONV_2D"``), from the installed ``tflite`` package."""
    from tflite.utils import BUILTIN_OPCODE2NAME

    names = dict(BUILTIN_OPCODE2NAME)
    # The BuiltinOperator enum may be newer than the utils table: take both.
    for k, v in _enum_members(_generated("BuiltinOperator")).items():
        names.setdefault(v, k)
    for code, name in _NEWER_BUILTIN_OPS.items():
        names.setdefault(code, name)
    return names


@functools.cache
def builtin_op_names() -> dict[int, str]:
    """Builtin operator code -> name (``3`` -> ``"CONV_2D"``): the generated table's, with what the
    installed ``tflite`` package adds looked up only for a code the table does not know."""
    from ._tflite_layout import BUILTIN_OPS

    return dict(BUILTIN_OPS)


@functools.cache
def _package_builtin_op_names() -> dict[int, str]:
    return package_builtin_op_names()


@functools.cache
def _builtin_codes() -> dict[str, int]:
    return {v: k for k, v in builtin_op_names().items()}


def builtin_op_name(code: int) -> str | None:
    """Name of a builtin operator code, or None when this schema does not know it."""
    name = builtin_op_names().get(code)
    return name if name is not None else _package_builtin_op_names().get(code)


def builtin_op_code(name: str) -> int:
    """Builtin code of an operator name (KeyError if unknown)."""
    code = _builtin_codes().get(name)
    if code is not None:
        return code
    return {v: k for k, v in _package_builtin_op_names().items()}[name]


# ---- options unions ----------------------------------------------------------------------------


def package_union_members(union: str) -> dict[int, type]:
    """Union ``union``'s members (type code -> generated table class), from the installed ``tflite``
    package."""
    try:
        members = _enum_members(_generated(union))
    except (ImportError, AttributeError):  # an old tflite without BuiltinOptions2
        return {}
    table: dict[int, type] = {}
    for name, value in members.items():
        if value == 0:  # NONE
            continue
        try:
            table[value] = _generated(name)
        except (ImportError, AttributeError):  # enum member without a generated class
            continue
    return table


# ---- quantization details ----------------------------------------------------------------------

#: ``QuantizationDetails`` union code of ``BlockwiseQuantization`` (newer schemas than the ``tflite``
#: package we read with, which has no class for it).
BLOCKWISE_DETAILS = 2


class BlockwiseQuantization:
    """Reader class for the schema's ``BlockwiseQuantization`` table, in the generated classes' form:
    ``scales`` (tensor index of the per-block scales), ``zero_points`` (tensor index, -1 none),
    ``block_size`` (elements of the innermost dimension per scale)."""

    __slots__ = ("_tab",)

    def _int(self, slot: int) -> int:
        import flatbuffers

        o = flatbuffers.number_types.UOffsetTFlags.py_type(self._tab.Offset(slot))
        if o != 0:
            return self._tab.Get(flatbuffers.number_types.Int32Flags, o + self._tab.Pos)
        return 0

    def Scales(self) -> int:  # noqa: N802 - the generated classes' accessor names
        return self._int(4)

    def ZeroPoints(self) -> int:  # noqa: N802
        return self._int(6)

    def BlockSize(self) -> int:  # noqa: N802
        return self._int(8)
