"""The TFLite schema tables the reader needs: ``python -m litegpu.tools.tflite_layout [--write | --check]``.

``litegpu/_tflite_layout.py`` holds, for every table reachable from ``Model`` and every member of
the unions the reader follows, how each field is laid out (vtable slot, kind, element type, default,
sub-table), plus the ``TensorType`` and ``BuiltinOperator`` enums and the unions' members, all as the
installed ``tflite`` package's generated classes have them (learnt by :func:`litegpu._flatbuf.class_fields`).
Reading a model then imports no ``tflite`` module: the package imports all its ~190 generated
modules at once, about 0.1 s of every process's first model read.  Run it with ``--write`` after
upgrading the ``tflite`` package (``tests/test_reader.py`` fails, naming this command, until then);
without arguments it prints the file; ``--check`` exits 1 when the file is out of date.
"""

from __future__ import annotations

import importlib
import math
from pathlib import Path

__all__ = ["render_tflite_layout", "LAYOUT_PATH", "UNIONS_READ", "main"]

LAYOUT_PATH = Path(__file__).resolve().parents[1] / "_tflite_layout.py"

#: The unions whose members the reader reads as tables (``QuantizationDetails`` has a hand-written
#: class in ``_schema.py``, newer than the package).
UNIONS_READ = ("BuiltinOptions", "BuiltinOptions2", "SparseIndexVector")

_HEADER = '''"""The TFLite schema's table layouts and enums, as the ``tflite`` package {version} generates them.

Written by ``python -m litegpu.tools.tflite_layout --write``; do not edit by hand.  ``TABLES``:
table name -> ((accessor, vtable slot, kind, little-endian dtype or None, sub-table or None,
default), ...) in slot order (see ``litegpu._flatbuf.FieldSpec``); ``UNIONS``: union -> {{type
code: table}}; ``TENSOR_TYPES``: code -> dtype name; ``BUILTIN_OPS``: code -> operator name.
"""

from __future__ import annotations

from typing import Any

TFLITE_VERSION = "{version}"
'''


def _literal(v: object) -> str:
    if isinstance(v, float) and not math.isfinite(v):
        return f"float({str(v)!r})"
    return repr(v)


def render_tflite_layout() -> str:
    """The text of ``_tflite_layout.py`` for the installed ``tflite`` package."""
    from importlib.metadata import version

    from litegpu._flatbuf import class_fields
    from litegpu._schema import package_builtin_op_names, package_tensor_type_names, package_union_members

    model = importlib.import_module("tflite.Model").Model
    unions = {u: package_union_members(u) for u in UNIONS_READ}
    todo = [model, *(c for members in unions.values() for c in members.values())]
    tables: dict[str, tuple] = {}
    while todo:
        cls = todo.pop()
        if cls.__name__ in tables:
            continue
        rows = []
        for f in class_fields(cls):
            sub = None
            if f.table is not None:
                assert isinstance(f.table, type)
                sub = f.table.__name__
                todo.append(f.table)
            rows.append((f.accessor, f.slot, f.kind, None if f.dtype is None else f.dtype.str, sub, f.default))
        tables[cls.__name__] = tuple(rows)

    head = _HEADER.format(version=version("tflite"))
    out = []
    out.append("\nTENSOR_TYPES: dict[int, str] = {\n")
    out += [f"    {k}: {v!r},\n" for k, v in sorted(package_tensor_type_names().items())]
    out.append("}\n\nBUILTIN_OPS: dict[int, str] = {\n")
    out += [f"    {k}: {v!r},\n" for k, v in sorted(package_builtin_op_names().items())]
    out.append("}\n\nUNIONS: dict[str, dict[int, str]] = {\n")
    for u, members in unions.items():
        out.append(f"    {u!r}: {{\n")
        out += [f"        {k}: {c.__name__!r},\n" for k, c in sorted(members.items())]
        out.append("    },\n")
    out.append("}\n\nTABLES: dict[str, tuple[tuple[str, int, str, str | None, str | None, Any], ...]] = {\n")
    for name in sorted(tables):
        out.append(f"    {name!r}: (\n")
        out += [f"        ({acc!r}, {slot}, {kind!r}, {dt!r}, {sub!r}, {_literal(default)}),\n"
                for acc, slot, kind, dt, sub, default in tables[name]]
        out.append("    ),\n")
    out.append("}\n")
    return head + "".join(out).replace("'", '"')


def main(argv: list[str] | None = None) -> int:
    from . import generated_file_main

    return generated_file_main(LAYOUT_PATH, render_tflite_layout, "litegpu.tools.tflite_layout", argv)


if __name__ == "__main__":
    raise SystemExit(main())
