"""litegpu._records.dataclass behaves as dataclasses.dataclass for the options it takes (the stdlib's
classes are the expectation), and refuses the ones it does not."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from dataclasses import field
from typing import Any, ClassVar

import pytest
from litegpu._records import dataclass as record


def _pair(**options: Any) -> tuple[type, type]:
    """The same class body made by dataclasses and by _records."""

    def make(deco: Any) -> type:
        @deco(**options)
        class Point:
            """A point."""

            x: int
            y: int = 2
            tags: list = field(default_factory=list)
            note: str = field(default="n", repr=False, compare=False)
            kind: ClassVar[str] = "point"

        return Point

    return make(dataclasses.dataclass), make(record)


@pytest.mark.parametrize("options", [{}, {"frozen": True}, {"eq": False}, {"frozen": True, "eq": False},
                                     {"repr": False}])
def test_same_behaviour_as_dataclasses(options):
    std, ours = _pair(**options)
    for cls in (std, ours):
        assert dataclasses.is_dataclass(cls)
    assert [f.name for f in dataclasses.fields(ours)] == [f.name for f in dataclasses.fields(std)] == \
        ["x", "y", "tags", "note"]
    assert ours.__match_args__ == std.__match_args__
    for args, kwargs in [((1,), {}), ((1, 5), {"tags": [3]}), ((), {"x": 4, "note": "m"}), ((1, 2, [0], "z"), {})]:
        a, b = std(*args, **kwargs), ours(*args, **kwargs)
        assert vars(a) == vars(b)
        assert dataclasses.asdict(a) == dataclasses.asdict(b)
        assert dataclasses.astuple(a) == dataclasses.astuple(b)
        if options.get("repr", True):
            assert repr(b) == repr(a).replace(std.__qualname__, ours.__qualname__)
        assert (b == ours(*args, **kwargs)) == (a == std(*args, **kwargs))
        assert (b == ours(9)) == (a == std(9))
        assert (b == a) is False  # another class: never equal
        assert (ours.__hash__ is None) == (std.__hash__ is None)
        if std.__hash__ is not None and options.get("frozen") and options.get("eq", True):
            tagless = ours(1, 2, (), "a"), std(1, 2, (), "a")
            assert hash(tagless[0]) == hash(tagless[1]) == hash((1, 2, ()))
        r = dataclasses.replace(b, y=7)
        assert type(r) is ours and r.y == 7 and r.x == b.x
        assert vars(copy.deepcopy(b)) == vars(b)
    fresh = ours(1), ours(1)
    assert fresh[0].tags is not fresh[1].tags  # default_factory per instance
    assert ours.kind == "point" and "kind" not in vars(fresh[0])
    assert ours.__doc__ == std.__doc__ == "A point."


def test_frozen_refuses_assignment_and_deletion():
    _, ours = _pair(frozen=True)
    p = ours(1)
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'x'"):
        p.x = 3
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field 'y'"):
        del p.y
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.other = 1  # as dataclasses: no new attribute either
    assert pickle.loads(pickle.dumps(Module.Frozen(3))) == Module.Frozen(3)


class Module:  # picklable (module-level) classes
    @record(frozen=True)
    class Frozen:
        """F."""

        a: int


def test_bad_calls_raise_type_error():
    _, ours = _pair()
    with pytest.raises(TypeError, match="missing required argument: 'x'"):
        ours()
    with pytest.raises(TypeError, match="takes 5 positional arguments but 6 were given"):
        ours(1, 2, [], "n", 5)
    with pytest.raises(TypeError, match="multiple values for argument 'x'"):
        ours(1, x=2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        ours(1, z=2)


def test_own_methods_kept_post_init_called_and_no_docstring_described():
    calls = []

    @record(frozen=True, eq=False)
    class Key:
        a: int
        b: str = "s"
        c: int = field(default=5, init=False)

        def __post_init__(self) -> None:
            calls.append((self.a, self.b, self.c))
            object.__setattr__(self, "derived", self.a * 2)

        def __repr__(self) -> str:
            return "Key!"

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Key) and other.a == self.a

        def __hash__(self) -> int:
            return 17

    k = Key(3)
    assert calls == [(3, "s", 5)] and k.derived == 6 and repr(k) == "Key!" and k == Key(3, "t") and hash(k) == 17
    with pytest.raises(TypeError, match="unexpected keyword argument 'c'"):
        Key(1, c=3)

    @dataclasses.dataclass
    class Std:
        a: int
        b: str = "s"

    @record
    class Ours:
        a: int
        b: str = "s"

    assert Ours.__doc__ == Std.__doc__.replace("Std", "Ours") == "Ours(a: 'int', b: 'str' = 's')"
    assert Ours.__hash__ is None  # compared by value and mutable, as dataclasses make it


def test_unsupported_options_refused():
    with pytest.raises(TypeError):
        @record(frozen=True)
        class Own:
            a: int

            def __setattr__(self, name: str, value: Any) -> None:
                object.__setattr__(self, name, value)

    with pytest.raises(TypeError, match="slots"):
        @record
        class Slotted:
            __slots__ = ("a",)
            a: int

    with pytest.raises(TypeError, match="init-only"):
        @record
        class WithInitVar:
            a: dataclasses.InitVar[int]
