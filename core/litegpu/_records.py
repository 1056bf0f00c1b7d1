"""``dataclass`` for the modules a warm start imports: dataclasses' fields, no per-class compile.

``dataclasses.dataclass`` writes each class's ``__init__``, ``__repr__``, ``__eq__``, ``__hash__`` (and,
frozen, ``__setattr__`` / ``__delattr__``) as source text and compiles every one of them (Python 3.11 and
3.12: one ``compile`` per method): 0.3-0.75 ms a class on the 2-core CI machine, about 7 ms of the main
thread's CPU in a warm vulkan start, which imports 18 such classes (docs/performance.md, tenth session).
The methods here cost about as much per call as the generated ones, a little more for ``__init__`` with
defaults: a class made or compared tens of thousands of times stays a stdlib dataclass (``lgk.types.Ty``:
a cold render makes ~28,000 and compares ~17,000).
:func:`dataclass` here lets ``dataclasses`` collect the fields (``dataclasses.fields``, ``replace``,
``asdict`` and ``is_dataclass`` work as on any dataclass) without generating a method, then gives the
class methods of the same behaviour made from closures over its fields: nothing is compiled.

It takes the options litegpu's classes use (``frozen``, ``eq``, ``repr``; fields with defaults,
``default_factory``, ``repr=False``, ``compare=False``, ``hash``, ``init=False``; ``__post_init__``
without init-only variables); others (``order``, ``unsafe_hash``, ``slots``, ``kw_only``, ``InitVar``)
raise TypeError when the class is made: use ``dataclasses.dataclass`` for such a class.  As with
dataclasses, a method the class defines itself is kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from operator import attrgetter
from reprlib import recursive_repr
from typing import Any, TypeVar

__all__ = ["dataclass"]

T = TypeVar("T", bound=type)

_MISSING = dataclasses.MISSING


def dataclass(cls: T | None = None, /, *, frozen: bool = False, eq: bool = True,
              repr: bool = True) -> Any:  # noqa: A002 - dataclasses' own keyword
    """``@dataclass`` / ``@dataclass(frozen=True, eq=..., repr=...)``: see the module docstring."""

    def wrap(c: T) -> T:
        return _process(c, frozen=frozen, eq=eq, repr=repr)

    return wrap if cls is None else wrap(cls)


def _process(cls: T, *, frozen: bool, eq: bool, repr: bool) -> T:  # noqa: A002
    own = cls.__dict__
    if frozen and ("__setattr__" in own or "__delattr__" in own):
        raise TypeError(f"cannot overwrite attribute __setattr__ / __delattr__ in class {cls.__name__}")
    if "__slots__" in own or cls.__setattr__ is not object.__setattr__:
        # (__init__ fills the instance's __dict__; dataclasses.dataclass takes such classes)
        raise TypeError(f"{cls.__name__}: slots or an own __setattr__ need dataclasses.dataclass")
    class_hash = own.get("__hash__", _MISSING)
    has_explicit_hash = not (class_hash is _MISSING or (class_hash is None and "__eq__" in own))
    doc = own.get("__doc__")
    if not doc:
        cls.__doc__ = cls.__name__  # (dataclasses would call inspect.signature here; set below)
    # the fields, and nothing generated: no __init__, __repr__, __eq__, and so no __hash__ action
    dataclasses.dataclass(cls, init=False, repr=False, eq=False)
    fields = dataclasses.fields(cls)
    for f in cls.__dataclass_fields__.values():  # type: ignore[attr-defined]
        if f._field_type is not dataclasses._FIELD and f._field_type is not dataclasses._FIELD_CLASSVAR:  # type: ignore[attr-defined]
            raise TypeError(f"{cls.__name__}.{f.name}: init-only variables need dataclasses.dataclass")
        if f.kw_only is True:
            raise TypeError(f"{cls.__name__}.{f.name}: keyword-only fields need dataclasses.dataclass")
    if not doc:  # as dataclasses word it: "Name(field: type = default, ...)"
        cls.__doc__ = f"{cls.__name__}({', '.join(_described(f) for f in fields)})"
    _set(cls, "__init__", _init(cls, fields))
    if repr:
        _set(cls, "__repr__", _repr(cls, tuple(f.name for f in fields if f.repr)))
    compared = tuple(f.name for f in fields if f.compare)
    if eq:
        _set(cls, "__eq__", _eq(cls, compared))
    if frozen:
        names = frozenset(f.name for f in fields)
        _set(cls, "__setattr__", _frozen_setattr(cls, names))
        _set(cls, "__delattr__", _frozen_delattr(cls, names))
    if eq and not has_explicit_hash:
        if frozen:
            hashed = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
            cls.__hash__ = _hash(hashed)  # type: ignore[assignment]
        else:
            cls.__hash__ = None  # type: ignore[assignment]  # mutable and compared by value: unhashable
    return cls


def _described(f: dataclasses.Field) -> str:
    ann = repr(f.type) if isinstance(f.type, str) else getattr(f.type, "__qualname__", str(f.type))
    if f.default is not _MISSING:
        return f"{f.name}: {ann} = {f.default!r}"
    return f"{f.name}: {ann} = <factory>" if f.default_factory is not _MISSING else f"{f.name}: {ann}"


def _set(cls: type, name: str, fn: Callable[..., Any]) -> None:
    """``fn`` as ``cls.name`` unless the class defines that method itself (as dataclasses do)."""
    if name in cls.__dict__:
        return
    fn.__name__ = name
    fn.__qualname__ = f"{cls.__qualname__}.{name}"
    setattr(cls, name, fn)


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The fields ``names`` of an object as a tuple (attrgetter: C speed; the methods below run as
    often as the generated ones they replace, e.g. lgk's ``Ty`` in every cold render)."""
    if len(names) >= 2:
        return attrgetter(*names)
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()


def _init(cls: type, fields: tuple[dataclasses.Field, ...]) -> Callable[..., None]:
    qual = f"{cls.__qualname__}.__init__()"
    names = tuple(f.name for f in fields if f.init)
    n = len(names)
    defaults = {f.name: f.default for f in fields if f.init and f.default is not _MISSING}
    factories = {f.name: f.default_factory for f in fields if f.init and f.default_factory is not _MISSING}
    # fields left out of __init__: their default, or a fresh default_factory value, or unset
    fixed = tuple((f.name, f.default, f.default_factory) for f in fields if not f.init
                  and (f.default is not _MISSING or f.default_factory is not _MISSING))
    post_init = getattr(cls, "__post_init__", None) is not None

    def bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """Every init field's value, in order, from the call's arguments and the defaults."""
        if len(args) > n:
            raise TypeError(f"{qual} takes {n + 1} positional arguments but {len(args) + 1} were given")
        values = list(args)
        for name in names[len(args):]:
            if name in kwargs:
                values.append(kwargs.pop(name))
            elif name in defaults:
                values.append(defaults[name])
            elif name in factories:
                values.append(factories[name]())
            else:
                raise TypeError(f"{qual} missing required argument: {name!r}")
        if kwargs:
            name = next(iter(kwargs))
            what = "multiple values for argument" if name in names else "an unexpected keyword argument"
            raise TypeError(f"{qual} got {what} {name!r}")
        return values

    # the instance's __dict__ filled at once: what object.__setattr__ per field does for plain
    # attributes (these classes have no slots, and none of their fields is a descriptor; _process
    # keeps a class with its own __setattr__ off this path)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        self.__dict__.update(zip(names, args if len(args) == n and not kwargs else bind(args, kwargs),
                                 strict=True))
        for name, default, factory in fixed:
            self.__dict__[name] = factory() if default is _MISSING else default
        if post_init:
            self.__post_init__()

    return __init__


def _repr(cls: type, names: tuple[str, ...]) -> Callable[[Any], str]:
    text = "{}(" + ", ".join(f"{n}={{!r}}" for n in names) + ")"
    get = _getter(names)

    @recursive_repr()
    def __repr__(self: Any) -> str:  # noqa: N807
        return text.format(self.__class__.__qualname__, *get(self))

    return __repr__


def _eq(cls: type, names: tuple[str, ...]) -> Callable[[Any, Any], Any]:
    get = _getter(names)

    def __eq__(self: Any, other: Any) -> Any:  # noqa: N807
        if other.__class__ is self.__class__:
            return get(self) == get(other)
        return NotImplemented

    return __eq__


def _hash(names: tuple[str, ...]) -> Callable[[Any], int]:
    get = _getter(names)

    def __hash__(self: Any) -> int:  # noqa: N807
        return hash(get(self))

    return __hash__


def _frozen_setattr(cls: type, names: frozenset[str]) -> Callable[[Any, str, Any], None]:
    def __setattr__(self: Any, name: str, value: Any) -> None:  # noqa: N807
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    return __setattr__


def _frozen_delattr(cls: type, names: frozenset[str]) -> Callable[[Any, str], None]:
    def __delattr__(self: Any, name: str) -> None:  # noqa: N807
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __delattr__
