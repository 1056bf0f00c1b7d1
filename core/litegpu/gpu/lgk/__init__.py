"""The neutral kernel language (LGK): preprocessor, parser, type checker and the shared emitter.

A kernel template is written once in a small C-like language and rendered into OpenCL C, GLSL 4.50
and WGSL by the dialect emitters of ``gpu/_dialects``.  The language is typed so that each emitter
can spell what its target insists on: WGSL's explicit conversions and ``select``, GLSL's
``lessThan``, OpenCL's ``convert_float4``.  The precision-neutral types ``real``/``real4`` (storage
and math) and ``acc``/``acc4`` (accumulators) are bound per precision variant; conversions between
``f16`` and ``f32`` are inserted automatically, int <-> float conversions must be written.

Pipeline: ``preprocess`` (``#if``/``#for``/``#fragment``/``{{expr}}`` over the template options) -> ``parse``
(a ``Program`` of functions and kernels) -> ``check`` (types every expression, inserts conversions
and splats) -> a dialect ``Emitter`` subclass renders the kernel and the helpers it calls.
docs/gpu-kernels.md is the language reference.

Modules: ``preprocess`` (directives and substitutions), ``types`` (``Ty``, ``KernelTemplateError``),
``nodes`` (the syntax tree), ``parse`` (lexer and parser), ``check`` (type checker), ``emit``
(the base emitter each dialect subclasses), ``branches`` (one launch serving several
branches: ``branch_kernel``).
"""

from __future__ import annotations

from typing import Any

from ..._backend_options import PRECISIONS
from .types import KernelTemplateError, Ty

# The parser, checker and emitter are imported when first asked for: a warm start takes its kernels
# from the serialization cache and renders nothing, so it need not import them.
_LAZY = {"check": "check", "eval_int_expr": "check", "retype_buffers": "check", "branch_kernel": "branches",
         "Emitter": "emit",
         "parse": "parse", "preprocess": "preprocess"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value

__all__ = [
    "KernelTemplateError",
    "Ty",
    "PRECISIONS",
    "preprocess",
    "parse",
    "check",
    "retype_buffers",
    "branch_kernel",
    "Emitter",
    "eval_int_expr",
]
