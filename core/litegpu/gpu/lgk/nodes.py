"""LGK syntax tree: expressions, statements, buffers, functions, kernels, the program."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .types import VOID, Ty

# ----------------------------------------------------------------------------------------------
# AST
# ----------------------------------------------------------------------------------------------


@dataclass(eq=False)
class Expr:
    line: int = field(default=0, kw_only=True)
    ty: Ty = field(default=VOID, kw_only=True)


@dataclass(eq=False)
class Num(Expr):
    value: float | int
    is_float: bool


@dataclass(eq=False)
class Name(Expr):
    id: str
    sym: str = ""  # local / param / fnparam after checking


@dataclass(eq=False)
class Unary(Expr):
    op: str
    e: Expr


@dataclass(eq=False)
class Binary(Expr):
    op: str
    l: Expr
    r: Expr


@dataclass(eq=False)
class Ternary(Expr):
    c: Expr
    t: Expr
    f: Expr


@dataclass(eq=False)
class Call(Expr):
    fn: str
    args: list[Expr]
    kind: str = ""  # builtin / user / ctor after checking


@dataclass(eq=False)
class Index(Expr):
    base: Expr
    idx: Expr
    kind: str = ""  # buffer / shared / lane


@dataclass(eq=False)
class Member(Expr):
    base: Expr
    name: str


@dataclass(eq=False)
class Conv(Expr):
    """Inserted by the checker: convert ``e`` to ``ty`` (float precision change or splat)."""

    e: Expr


@dataclass(eq=False)
class Stmt:
    line: int = field(default=0, kw_only=True)


@dataclass(eq=False)
class Decl(Stmt):
    name: str
    ty: Ty | None
    init: Expr | None
    mutable: bool


@dataclass(eq=False)
class Assign(Stmt):
    target: Expr
    op: str
    value: Expr


@dataclass(eq=False)
class If(Stmt):
    cond: Expr
    then: Block
    other: Block | None


@dataclass(eq=False)
class For(Stmt):
    init: Stmt | None
    cond: Expr | None
    step: Stmt | None
    body: Block


@dataclass(eq=False)
class Return(Stmt):
    value: Expr | None


@dataclass(eq=False)
class Jump(Stmt):
    word: str  # break / continue


@dataclass(eq=False)
class ExprStmt(Stmt):
    e: Expr


@dataclass(eq=False)
class Block(Stmt):
    stmts: list[Stmt]


@dataclass(eq=False)
class SharedDecl(Stmt):
    name: str
    ty: Ty
    size: int


@dataclass(frozen=True)
class Buffer:
    name: str
    access: str  # read / write / read_write
    elem: Ty


@dataclass(frozen=True)
class Param:
    name: str
    ty: Ty  # i32 or f32 scalar


@dataclass(eq=False)
class Func:
    name: str
    params: list[tuple[str, Ty]]
    ret: Ty
    body: Block
    line: int


@dataclass(eq=False)
class Kernel:
    name: str
    buffers: list[Buffer]
    params: list[Param]
    grid: list[Expr]
    body: Block
    shared: list[SharedDecl]
    line: int


@dataclass(eq=False)
class Program:
    funcs: Mapping[str, Func]  # parse() gives a lazily unpickled mapping
    kernels: dict[str, Kernel]


def transform(node: Expr | Stmt, fn: Callable[[Expr | Stmt], Expr | Stmt]) -> Expr | Stmt:
    """Rewrite a tree bottom-up, in place: every child (fields holding a node or a list of them) is replaced
    by its rewrite, then ``fn`` gives what replaces ``node`` (itself, changed or not, or a new node)."""
    for key, v in vars(node).items():
        if isinstance(v, (Expr, Stmt)):
            setattr(node, key, transform(v, fn))
        elif isinstance(v, list):
            setattr(node, key, [transform(x, fn) if isinstance(x, (Expr, Stmt)) else x for x in v])
    return fn(node)
