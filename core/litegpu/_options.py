"""Typed option descriptions shared by the configuration schema and backends.

A backend declares the options it understands as a mapping of name to
:class:`Option` (``BackendSpec.option_schema``); the YAML configuration schema
is built from the same pieces, so one checker produces every "bad value"
message, worded the same way everywhere::

    option_schema = {
        "workgroup_size": Option.int(64, min=1, max=1024, doc="threads per workgroup"),
        "fast_math": Option.bool(False, doc="allow reassociation"),
        "queue": Option.enum("in_order", "out_of_order", doc="command queue kind"),
    }

:meth:`Option.check` returns ``None`` for a good value or the text of the
problem ("'fp8' is not one of fp32, fp16, fp16_fp32acc; did you mean 'fp16'?"),
which the caller prefixes with the dotted key path and suffixes with the
source location.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Option", "suggest", "describe_value", "short_repr"]

_KINDS = ("bool", "int", "number", "str", "enum", "list", "any")


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters: a hostile value (a huge list, a long string)
    must not turn an error message into megabytes."""
    if isinstance(value, (list, tuple, dict)) and len(value) > 8:
        return f"<{type(value).__name__} of {len(value)} items>"
    try:
        text = repr(value)
    except RecursionError:
        return f"<deeply nested {type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def suggest(word: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``choices``, or ``""``."""
    if len(str(word)) > 100:  # difflib is quadratic: nothing long is a typo of a short name
        return ""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=2, cutoff=0.6)
    if not close:
        return ""
    if len(close) == 1:
        return f"; did you mean {close[0]!r}?"
    return f"; did you mean {close[0]!r} or {close[1]!r}?"


def describe_value(value: Any) -> str:
    """A value as it appears in error messages: its repr and, for non-scalars, its type."""
    if isinstance(value, (dict, list, tuple)):
        return f"a {_yaml_type(value)}"
    return f"{_yaml_type(value)} {short_repr(value)}"


def _yaml_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, dict):
        return "mapping"
    return type(value).__name__


@dataclass(frozen=True)
class Option:
    """One typed option.

    ``kind`` is one of ``bool``, ``int``, ``number`` (int or float), ``str``,
    ``enum`` (one of ``choices``), ``list`` (each item checked by ``items``)
    or ``any``.  ``min``/``max`` bound numbers (inclusive).  ``nullable``
    allows ``null``/``None``.  ``normalize`` maps a raw value before checking
    (``str.upper`` for log levels).  ``doc`` is shown by ``litegpu config
    --schema`` and in generated docs.
    """

    kind: str
    default: Any = None
    choices: tuple[Any, ...] | None = None
    min: float | None = None
    max: float | None = None
    nullable: bool = False
    items: Option | None = None
    doc: str = ""
    normalize: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"Option kind {self.kind!r} is not one of {', '.join(_KINDS)}")
        if self.kind == "enum" and not self.choices:
            raise ValueError("an enum Option needs choices")

    # Constructors that read well in a schema table.
    @classmethod
    def bool(cls, default: bool = False, *, doc: str = "") -> Option:
        return cls("bool", default, doc=doc)

    @classmethod
    def int(
        cls, default: int | None = 0, *, min: float | None = None, max: float | None = None,
        nullable: bool = False, doc: str = "",
    ) -> Option:
        return cls("int", default, min=min, max=max, nullable=nullable, doc=doc)

    @classmethod
    def number(
        cls, default: float | None = 0.0, *, min: float | None = None, max: float | None = None,
        nullable: bool = False, doc: str = "",
    ) -> Option:
        return cls("number", default, min=min, max=max, nullable=nullable, doc=doc)

    @classmethod
    def str(cls, default: str | None = "", *, nullable: bool = False, doc: str = "") -> Option:
        return cls("str", default, nullable=nullable, doc=doc)

    @classmethod
    def enum(
        cls, *choices: Any, default: Any = None, nullable: bool = False, doc: str = "",
        normalize: Callable[[Any], Any] | None = None,
    ) -> Option:
        if default is None and not nullable:
            default = choices[0]
        return cls("enum", default, choices=tuple(choices), nullable=nullable, doc=doc, normalize=normalize)

    @classmethod
    def list(cls, items: Option, default: Sequence[Any] = (), *, doc: str = "") -> Option:
        return cls("list", tuple(default), items=items, doc=doc)

    def type_name(self) -> str:
        """The expected type in words, for messages and docs."""
        if self.kind == "enum":
            return "one of " + ", ".join(str(c) for c in self.choices or ())
        if self.kind == "list" and self.items is not None:
            return f"a list of ({self.items.type_name()})"
        return {"bool": "a boolean", "int": "an integer", "number": "a number", "str": "a string",
                "any": "any value"}[self.kind]

    def prepare(self, value: Any) -> Any:
        """``value`` after ``normalize`` (kept as is when normalizing fails)."""
        if self.normalize is None or value is None:
            return value
        try:
            return self.normalize(value)
        except Exception:
            return value

    def check(self, value: Any) -> str | None:
        """The problem with ``value`` in words, or ``None`` when it is valid."""
        if value is None:
            return None if self.nullable or self.kind == "any" else f"expected {self.type_name()}, got null"
        kind = self.kind
        if kind == "any":
            return None
        if kind == "bool":
            return None if isinstance(value, bool) else f"expected a boolean (true/false), got {describe_value(value)}"
        if kind in ("int", "number"):
            ok_types: tuple[type, ...] = (int,) if kind == "int" else (int, float)
            if isinstance(value, bool) or not isinstance(value, ok_types):
                return f"expected {self.type_name()}, got {describe_value(value)}"
            if isinstance(value, float) and not math.isfinite(value):
                # NaN passes every comparison's "else" branch (tolerance: .nan disabled the
                # accuracy check); no option means anything by an infinite value either.
                return f"{value!r} is not a finite number"
            if self.min is not None and value < self.min:
                return f"{value!r} is below the minimum {self.min:g}"
            if self.max is not None and value > self.max:
                return f"{value!r} is above the maximum {self.max:g}"
            return None
        if kind == "str":
            return None if isinstance(value, str) else f"expected a string, got {describe_value(value)}"
        if kind == "enum":
            choices = self.choices or ()
            if isinstance(value, bool) or not isinstance(value, (str, int, float)) or value not in choices:
                listed = ", ".join(str(c) for c in choices)
                hint = suggest(str(value), [str(c) for c in choices]) if isinstance(value, str) else ""
                return f"{short_repr(value)} is not one of {listed}{hint}"
            return None
        if kind == "list":
            if not isinstance(value, (list, tuple)):
                return f"expected {self.type_name()}, got {describe_value(value)}"
            if self.items is not None:
                for i, item in enumerate(value):
                    problem = self.items.check(item)
                    if problem:
                        return f"item {i}: {problem}"
            return None
        raise AssertionError(kind)  # pragma: no cover - guarded by __post_init__
