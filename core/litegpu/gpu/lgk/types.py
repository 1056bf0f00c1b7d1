"""LGK types and the error every stage raises: ``Ty``, the precision-bound kinds of ``real``/``acc``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..._backend_options import PRECISIONS
from ..._errors import LiteGPUError


class KernelTemplateError(LiteGPUError, ValueError):
    """A kernel template is malformed, or was rendered with options it does not accept."""



# ----------------------------------------------------------------------------------------------
# Types
# ----------------------------------------------------------------------------------------------

FLOAT_KINDS = ("f16", "f32")
INT_KINDS = ("i32", "u32")


@dataclass(frozen=True)
class Ty:
    """A value type: ``kind`` in f16/f32/i32/u32/bool/void or the abstract literal kinds
    ``absf``/``absi``; ``n`` is the vector width (1 = scalar)."""

    kind: str
    n: int = 1

    @property
    def is_float(self) -> bool:
        return self.kind in ("f16", "f32", "absf")

    @property
    def is_int(self) -> bool:
        return self.kind in ("i32", "u32", "absi")

    @property
    def is_abstract(self) -> bool:
        return self.kind in ("absf", "absi")

    @property
    def scalar(self) -> Ty:
        return Ty(self.kind, 1)

    def with_n(self, n: int) -> Ty:
        return Ty(self.kind, n)

    def __str__(self) -> str:
        return self.kind if self.n == 1 else f"{self.kind}x{self.n}"


VOID = Ty("void")
BOOL = Ty("bool")
I32 = Ty("i32")
_TYPE_NAME = re.compile(r"^(real|acc|f32|f16|i32|u32|bool)(?:x?([234]))?$")


def precision_types(precision: str, half_math: bool = True) -> dict[str, str]:
    """The concrete kinds of ``real`` and ``acc`` for a precision variant.

    ``half_math=False`` gives the arithmetic types of the storage-only half variant: every value a
    kernel computes with (``real``, ``acc``, even a written ``f16``) is ``f32``; only buffers keep
    their 16-bit storage type (:func:`parse` types buffers with ``precision_types(precision)``).
    """
    if precision in PRECISIONS and not half_math:
        return {"real": "f32", "acc": "f32", "f16": "f32"}
    if precision == "fp32":
        return {"real": "f32", "acc": "f32"}
    if precision == "fp16":
        return {"real": "f16", "acc": "f16"}
    if precision == "fp16_fp32acc":
        return {"real": "f16", "acc": "f32"}
    raise KernelTemplateError(f"unknown precision {precision!r} (one of {', '.join(PRECISIONS)})")


def parse_type_name(name: str, aliases: Mapping[str, str]) -> Ty | None:
    m = _TYPE_NAME.match(name)
    if m is None:
        return None
    kind = aliases.get(m.group(1), m.group(1))
    return Ty(kind, int(m.group(2) or 1))
