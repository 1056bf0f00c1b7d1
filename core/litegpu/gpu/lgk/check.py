"""LGK type checker: types every expression, inserts f16/f32 conversions and splats; ``retype_buffers``,
``eval_int_expr``."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

from .nodes import (
    Assign,
    Binary,
    Block,
    Buffer,
    Call,
    Conv,
    Decl,
    Expr,
    ExprStmt,
    For,
    Func,
    If,
    Index,
    Jump,
    Kernel,
    Member,
    Name,
    Num,
    Program,
    Return,
    SharedDecl,
    Stmt,
    Ternary,
    Unary,
    transform,
)
from .preprocess import source_location
from .types import (
    BOOL,
    FLOAT_KINDS,
    I32,
    INT_KINDS,
    VOID,
    KernelTemplateError,
    Ty,
    parse_type_name,
    precision_types,
)

# ----------------------------------------------------------------------------------------------
# Type checker
# ----------------------------------------------------------------------------------------------

# name -> (category, min args, max args). Categories drive both checking and emission.
BUILTINS: dict[str, tuple[str, int, int]] = {
    # float, componentwise
    **{f: ("fmap", 1, 1) for f in ("exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "floor", "ceil",
                                   "sign", "exp2", "log2", "atan", "trunc")},
    "pow": ("fmap", 2, 2), "atan2": ("fmap", 2, 2), "fma": ("fmap", 3, 3), "mix": ("fmap", 3, 3),
    # numeric, componentwise
    "abs": ("nmap", 1, 1), "min": ("nmap", 2, 2), "max": ("nmap", 2, 2), "clamp": ("nmap", 3, 3),
    "dot": ("dot", 2, 2),
    "select": ("select", 3, 3),
    "any": ("reduce_bool", 1, 1), "all": ("reduce_bool", 1, 1),
    "gid": ("index", 1, 1), "lid": ("index", 1, 1), "wgid": ("index", 1, 1),
    "barrier": ("barrier", 0, 0),
    "bool_true": ("const", 0, 0), "bool_false": ("const", 0, 0),
}


class Scope:
    def __init__(self, parent: Scope | None = None):
        self.parent = parent
        self.vars: dict[str, tuple[Ty, bool, str]] = {}

    def lookup(self, n: str) -> tuple[Ty, bool, str] | None:
        s: Scope | None = self
        while s is not None:
            if n in s.vars:
                return s.vars[n]
            s = s.parent
        return None


class Checker:
    """Types a program in place: sets ``Expr.ty``, wraps implicit conversions in ``Conv``."""

    def __init__(self, prog: Program, name: str, aliases: Mapping[str, str], default_real: str,
                 half_math: bool = True):
        self.prog, self.name, self.aliases, self.default_real = prog, name, aliases, default_real
        # False: f16 buffers are storage only; indexing one reads/writes an f32 value
        self.half_math = half_math
        self.buffers: dict[str, Buffer] = {}
        self.shared: dict[str, SharedDecl] = {}
        self.ret: Ty = VOID
        self.in_kernel = False

    def err(self, node: Any, msg: str) -> KernelTemplateError:
        return KernelTemplateError(f"{source_location(self.name, getattr(node, 'line', 0))}: {msg}")

    # -- entry points
    def check_func(self, f: Func) -> None:
        self.buffers, self.shared, self.ret, self.in_kernel = {}, {}, f.ret, False
        scope = Scope()
        for n, t in f.params:
            scope.vars[n] = (t, False, "fnparam")
        self.block(f.body, scope)

    def check_kernel(self, k: Kernel) -> None:
        self.buffers = {b.name: b for b in k.buffers}
        self.shared = {s.name: s for s in k.shared}
        self.ret, self.in_kernel = VOID, True
        scope = Scope()
        for p in k.params:
            scope.vars[p.name] = (p.ty, False, "param")
        names = [b.name for b in k.buffers] + [p.name for p in k.params] + [s.name for s in k.shared]
        if len(set(names)) != len(names):
            raise self.err(k, f"kernel {k.name}: duplicate binding/param names")
        for g in k.grid:
            t = self.expr(g, scope)
            if not t.is_int:
                raise self.err(g, "grid sizes are integers")
            self.coerce(g, I32)
        self.block(k.body, scope)

    # -- statements
    def block(self, b: Block, scope: Scope) -> None:
        inner = Scope(scope)
        for s in b.stmts:
            self.stmt(s, inner)

    def stmt(self, s: Stmt, scope: Scope) -> None:
        if isinstance(s, Decl):
            if s.name in scope.vars:
                raise self.err(s, f"{s.name!r} declared twice in one scope")
            if s.init is not None:
                t = self.expr(s.init, scope)
                if s.ty is None:
                    s.ty = self.concrete(t)
                s.init = self.coerce(s.init, s.ty, splat=True)
            assert s.ty is not None
            if s.ty.kind == "void":
                raise self.err(s, "cannot declare a void value")
            scope.vars[s.name] = (s.ty, s.mutable, "local")
        elif isinstance(s, Assign):
            tt = self.lvalue(s.target, scope)
            vt = self.expr(s.value, scope)
            if s.op != "=":
                bt = self.arith(s.op[0], tt, vt, s)
                if bt != tt:
                    raise self.err(s, f"'{s.op}' would change the type of the target ({tt} -> {bt})")
            s.value = self.coerce(s.value, tt, splat=True)
        elif isinstance(s, If):
            self.cond(s.cond, scope)
            self.block(s.then, scope)
            if s.other is not None:
                self.block(s.other, scope)
        elif isinstance(s, For):
            inner = Scope(scope)
            if s.init is not None:
                self.stmt(s.init, inner)
            if s.cond is not None:
                self.cond(s.cond, inner)
            if s.step is not None:
                if isinstance(s.step, Decl):
                    raise self.err(s, "a for step cannot declare")
                self.stmt(s.step, inner)
            self.block(s.body, inner)
        elif isinstance(s, Return):
            if s.value is None:
                if self.ret != VOID:
                    raise self.err(s, "missing return value")
            else:
                self.expr(s.value, scope)
                s.value = self.coerce(s.value, self.ret, splat=True)
        elif isinstance(s, ExprStmt):
            self.expr(s.e, scope)
            if not isinstance(s.e, Call):
                raise self.err(s, "expression statement has no effect")
        elif isinstance(s, Block):
            self.block(s, scope)
        elif isinstance(s, Jump):
            pass
        else:
            raise self.err(s, f"unexpected statement {type(s).__name__}")

    def cond(self, e: Expr, scope: Scope) -> None:
        if self.expr(e, scope) != BOOL:
            raise self.err(e, f"condition must be a scalar bool, not {e.ty}")

    def lvalue(self, e: Expr, scope: Scope) -> Ty:
        if isinstance(e, Name):
            v = scope.lookup(e.id)
            if v is None:
                raise self.err(e, f"unknown name {e.id!r}")
            if not v[1]:
                raise self.err(e, f"{e.id!r} is not a 'var'")
            e.ty, e.sym = v[0], v[2]
            return v[0]
        if isinstance(e, Index) and isinstance(e.base, Name) and e.base.id in self.buffers:
            b = self.buffers[e.base.id]
            if b.access == "read":
                raise self.err(e, f"buffer {b.name!r} is read-only")
            e.ty = self.index(e, scope)
            return e.ty
        if isinstance(e, Index) and isinstance(e.base, Name) and e.base.id in self.shared:
            e.ty = self.index(e, scope)
            return e.ty
        if isinstance(e, Member) and isinstance(e.base, Name) and len(e.name) == 1:
            bt = self.lvalue(e.base, scope)
            return self.member(e, bt)
        raise self.err(e, "cannot assign to this expression")

    # -- expressions
    def concrete(self, t: Ty) -> Ty:
        if t.kind == "absf":
            return Ty(self.default_real, t.n)
        if t.kind == "absi":
            return Ty("i32", t.n)
        return t

    def unify_kind(self, a: str, b: str, node: Any) -> str:
        if a == b:
            return a
        pair = {a, b}
        if pair == {"absf", "absi"}:
            return "absf"
        if "absi" in pair:
            other = (pair - {"absi"}).pop()
            if other in FLOAT_KINDS or other in INT_KINDS:
                return other
        if "absf" in pair:
            other = (pair - {"absf"}).pop()
            if other in FLOAT_KINDS:
                return other
        if pair == {"f16", "f32"}:
            return "f32"
        raise self.err(node, f"mixed types {a} and {b}: write an explicit conversion")

    def arith(self, op: str, a: Ty, b: Ty, node: Any) -> Ty:
        if a.kind == "bool" or b.kind == "bool":
            raise self.err(node, f"arithmetic '{op}' on bool")
        kind = self.unify_kind(a.kind, b.kind, node)
        if a.n != b.n and 1 not in (a.n, b.n):
            raise self.err(node, f"vector widths differ ({a} {op} {b})")
        if op == "%" and kind in ("f16", "f32", "absf"):
            raise self.err(node, "'%' on floats is not portable")
        if op in ("&", "|", "^", "<<", ">>") and kind not in ("i32", "u32", "absi"):
            raise self.err(node, f"'{op}' needs integers")
        return Ty(kind, max(a.n, b.n))

    def coerce(self, e: Expr, target: Ty, splat: bool = False) -> Expr:
        """Give ``e`` the type ``target``: fix abstract literals, convert f16<->f32, splat scalars."""
        t = e.ty
        if t == target:
            return e
        if t.n != target.n and not (t.n == 1 and splat):
            raise self.err(e, f"expected {target}, got {t}")
        kind_target = Ty(target.kind, t.n)
        if t.is_abstract:
            if t.kind == "absf" and target.kind not in FLOAT_KINDS:
                raise self.err(e, f"float literal where {target} is expected")
            if t.kind == "absi" and target.kind not in FLOAT_KINDS + INT_KINDS:
                raise self.err(e, f"int literal where {target} is expected")
            self.settle(e, kind_target)
        elif t.kind != target.kind:
            if t.kind in FLOAT_KINDS and target.kind in FLOAT_KINDS:
                e = Conv(e, line=e.line, ty=kind_target)
            else:
                raise self.err(e, f"expected {target}, got {t}: write an explicit conversion")
        if t.n != target.n:
            e = Conv(e, line=e.line, ty=target)
        return e

    def settle(self, e: Expr, t: Ty) -> None:
        """Push a concrete kind into an abstract-typed expression tree."""
        if not e.ty.is_abstract:
            return
        e.ty = Ty(t.kind, e.ty.n)
        if isinstance(e, Num):
            if e.ty.kind == "f16" and abs(float(e.value)) > 65504:
                raise self.err(e, f"literal {e.value} overflows f16")
        elif isinstance(e, Unary):
            self.settle(e.e, t)
        elif isinstance(e, Binary) and e.op not in ("<<", ">>"):
            self.settle(e.l, t)
            self.settle(e.r, t)
        elif isinstance(e, Binary):
            self.settle(e.l, t)
            self.settle(e.r, Ty("i32"))
        elif isinstance(e, Ternary):
            self.settle(e.t, t)
            self.settle(e.f, t)
        elif isinstance(e, Call):
            for a in e.args:
                self.settle(a, t)
        elif isinstance(e, Conv):
            self.settle(e.e, t)

    def expr(self, e: Expr, scope: Scope) -> Ty:
        e.ty = self._expr(e, scope)
        return e.ty

    def _expr(self, e: Expr, scope: Scope) -> Ty:
        if isinstance(e, Num):
            if e.ty == Ty("u32"):
                return e.ty
            return Ty("absf") if e.is_float else Ty("absi")
        if isinstance(e, Name):
            v = scope.lookup(e.id)
            if v is None:
                if e.id in self.buffers or e.id in self.shared:
                    raise self.err(e, f"{e.id!r} is an array: index it")
                raise self.err(e, f"unknown name {e.id!r}")
            e.sym = v[2]
            return v[0]
        if isinstance(e, Unary):
            t = self.expr(e.e, scope)
            if e.op == "!":
                if t != BOOL:
                    raise self.err(e, "'!' needs a scalar bool")
            elif e.op == "~":
                if not t.is_int:
                    raise self.err(e, "'~' needs an integer")
            elif not (t.is_float or t.is_int):
                raise self.err(e, f"'-' on {t}")
            return t
        if isinstance(e, Binary):
            a, b = self.expr(e.l, scope), self.expr(e.r, scope)
            if e.op in ("&&", "||"):
                if a != BOOL or b != BOOL:
                    raise self.err(e, f"'{e.op}' needs scalar bools")
                return BOOL
            if e.op in ("<<", ">>"):
                if not (a.is_int and b.is_int) or a.n != b.n:
                    raise self.err(e, "shifts need integers of one width")
                e.r = self.coerce(e.r, Ty("i32" if not b.kind == "u32" else "u32", b.n)) if b.is_abstract else e.r
                return a
            if e.op in ("==", "!=", "<", "<=", ">", ">="):
                if a.kind == "bool" or b.kind == "bool":
                    if a != b or a.n != 1:
                        raise self.err(e, "bools compare only as scalars")
                    return BOOL
                t = self.arith(e.op, a, b, e)
                if not t.is_abstract:
                    e.l = self.coerce(e.l, t.with_n(a.n)) if a.n == t.n else self.coerce(e.l, Ty(t.kind))
                    e.r = self.coerce(e.r, t.with_n(b.n)) if b.n == t.n else self.coerce(e.r, Ty(t.kind))
                if a.n != b.n:  # vector vs scalar comparisons: splat (GLSL lessThan needs it)
                    if not t.is_abstract:
                        e.l = self.coerce(e.l, t, splat=True)
                        e.r = self.coerce(e.r, t, splat=True)
                    else:
                        raise self.err(e, "compare a vector with a typed scalar")
                return Ty("bool", t.n)
            t = self.arith(e.op, a, b, e)
            if not t.is_abstract:
                e.l = self.coerce(e.l, Ty(t.kind, a.n))
                e.r = self.coerce(e.r, Ty(t.kind, b.n))
            return t
        if isinstance(e, Ternary):
            self.cond(e.c, scope)
            a, b = self.expr(e.t, scope), self.expr(e.f, scope)
            if a.kind == "bool" and b.kind == "bool" and a.n == b.n:
                return a
            t = self.arith("?:", a, b, e)
            if not t.is_abstract:
                e.t = self.coerce(e.t, t, splat=True)
                e.f = self.coerce(e.f, t, splat=True)
            return t
        if isinstance(e, Index):
            return self.index(e, scope)
        if isinstance(e, Member):
            return self.member(e, self.expr(e.base, scope))
        if isinstance(e, Call):
            return self.call(e, scope)
        raise self.err(e, f"unexpected expression {type(e).__name__}")

    def index(self, e: Index, scope: Scope) -> Ty:
        it = self.expr(e.idx, scope)
        if it.n != 1 or not it.is_int:
            raise self.err(e, "indices are scalar integers")
        if it.is_abstract:
            self.settle(e.idx, I32)
        if isinstance(e.base, Name) and e.base.id in self.buffers:
            e.kind = "buffer"
            elem = self.buffers[e.base.id].elem
            if elem.kind == "f16" and not self.half_math:
                return Ty("f32", elem.n)  # storage-only half: the emitter converts on load and store
            return elem
        if isinstance(e.base, Name) and e.base.id in self.shared:
            e.kind = "shared"
            return self.shared[e.base.id].ty
        bt = self.expr(e.base, scope)
        if bt.n == 1:
            raise self.err(e, "cannot index a scalar")
        e.kind = "lane"
        return bt.scalar

    def member(self, e: Member, bt: Ty) -> Ty:
        if bt.n == 1 or not re.fullmatch(r"[xyzw]{1,4}", e.name) or any("xyzw".index(c) >= bt.n for c in e.name):
            raise self.err(e, f"bad swizzle .{e.name} on {bt}")
        e.ty = Ty(bt.kind, len(e.name))
        return e.ty

    def call(self, e: Call, scope: Scope) -> Ty:
        ctor = parse_type_name(e.fn, self.aliases)
        if ctor is not None:
            return self.ctor(e, ctor, scope)
        if e.fn in self.prog.funcs:
            f = self.prog.funcs[e.fn]
            e.kind = "user"
            if len(e.args) != len(f.params):
                raise self.err(e, f"{e.fn} takes {len(f.params)} arguments")
            for i, (a, (_, pt)) in enumerate(zip(e.args, f.params, strict=True)):
                self.expr(a, scope)
                e.args[i] = self.coerce(a, pt, splat=True)
            return f.ret
        if e.fn not in BUILTINS:
            raise self.err(e, f"unknown function {e.fn!r}")
        cat, lo, hi = BUILTINS[e.fn]
        e.kind = "builtin"
        if not lo <= len(e.args) <= hi:
            raise self.err(e, f"{e.fn} takes {lo} argument(s)")
        ts = [self.expr(a, scope) for a in e.args]
        if cat in ("fmap", "nmap", "dot"):
            kind = ts[0].kind
            for t in ts[1:]:
                kind = self.unify_kind(kind, t.kind, e)
            if kind == "bool" or (cat in ("fmap", "dot") and kind not in FLOAT_KINDS + ("absf", "absi")):
                raise self.err(e, f"{e.fn} on {kind}")
            if cat in ("fmap", "dot") and kind == "absi":
                kind = "absf"
            n = max(t.n for t in ts)
            if kind in ("absf", "absi"):
                kind = self.concrete(Ty(kind)).kind
            if cat == "dot":
                if n == 1 or any(t.n != n for t in ts):
                    raise self.err(e, "dot needs two vectors of one width")
            e.args = [self.coerce(a, Ty(kind, n), splat=True) for a in e.args]
            return Ty(kind, 1 if cat == "dot" else n)
        if cat == "select":
            f, t, c = ts
            if c.kind != "bool":
                raise self.err(e, "select(f, t, cond): cond must be bool")
            if f.kind == "bool" and t.kind == "bool" and f.n == t.n == c.n == 1:
                return BOOL
            kind = self.concrete(Ty(self.unify_kind(f.kind, t.kind, e))).kind
            n = max(f.n, t.n, c.n)
            if c.n not in (1, n):
                raise self.err(e, "select: condition width")
            e.args[0] = self.coerce(e.args[0], Ty(kind, n), splat=True)
            e.args[1] = self.coerce(e.args[1], Ty(kind, n), splat=True)
            return Ty(kind, n)
        if cat == "reduce_bool":
            if ts[0].kind != "bool":
                raise self.err(e, f"{e.fn} needs bools")
            return BOOL
        if cat == "index":
            a = e.args[0]
            if not self.in_kernel:
                raise self.err(e, f"{e.fn}() only inside a kernel")
            if not (isinstance(a, Num) and not a.is_float and 0 <= int(a.value) <= 2):
                raise self.err(e, f"{e.fn}(d): d is 0, 1 or 2")
            return I32
        if cat == "barrier":
            if not self.in_kernel:
                raise self.err(e, "barrier() only inside a kernel")
            return VOID
        if cat == "const":
            return BOOL
        raise self.err(e, f"unhandled builtin {e.fn}")

    def ctor(self, e: Call, t: Ty, scope: Scope) -> Ty:
        e.kind = "ctor"
        ts = [self.expr(a, scope) for a in e.args]
        if len(ts) == 1 and ts[0].n in (1, t.n):
            a = ts[0]
            if a.is_abstract:
                if t.kind == "bool":
                    raise self.err(e, "bool from a literal: write true/false")
                self.settle(e.args[0], Ty(t.kind if t.kind != "bool" else "i32"))
            return t
        if sum(x.n for x in ts) != t.n:
            raise self.err(e, f"{e.fn}(...) needs {t.n} components")
        for i, (a, at) in enumerate(zip(e.args, ts, strict=True)):
            if at.kind != t.kind:
                if at.is_abstract or (at.kind in FLOAT_KINDS and t.kind in FLOAT_KINDS):
                    e.args[i] = self.coerce(a, Ty(t.kind, at.n))
                else:
                    raise self.err(e, f"{e.fn}: component of type {at}: convert it first")
        return t


def retype_buffers(prog: Program, kernel: str, storage: Mapping[str, str]) -> None:
    """Store the float buffers named in ``storage`` as ``storage[name]`` (``f16``/``f32``) while the
    kernel keeps computing with their declared types (mixed precision: a tensor kept in fp32 read by an
    fp16 kernel, or an fp16 tensor read by a kernel rendered in fp32).

    Runs on the parsed program, before :func:`check`: every read of such a buffer becomes a constructor
    of its declared type (``real4(src[i])``), so the template type-checks exactly as before; writes
    convert through the assignment's usual coercion.  The dialects need nothing new: they already
    spell buffer declarations from ``Buffer.elem`` and f16 <-> f32 constructors.
    """
    if kernel not in prog.kernels or not storage:
        return
    k = prog.kernels[kernel]
    logical: dict[str, Ty] = {}
    buffers = []
    for b in k.buffers:
        want = storage.get(b.name)
        if want is not None and want not in FLOAT_KINDS:
            raise KernelTemplateError(f"kernel {kernel}: buffer {b.name!r} storage {want!r} is not f16/f32")
        if want is not None and b.elem.kind in FLOAT_KINDS and want != b.elem.kind:
            logical[b.name] = b.elem
            b = Buffer(b.name, b.access, Ty(want, b.elem.n))
        buffers.append(b)
    unknown = set(storage) - {b.name for b in k.buffers}
    if unknown:
        raise KernelTemplateError(f"kernel {kernel}: no buffer named {', '.join(sorted(unknown))}")
    if not logical:
        return
    k.buffers = buffers

    def read(e: Any) -> Any:
        """Every read of a retyped buffer wrapped in a constructor of its declared type."""
        if isinstance(e, Index) and isinstance(e.base, Name) and e.base.id in logical:
            return Call(str(logical[e.base.id]), [e], line=e.line)
        if isinstance(e, Assign) and isinstance(e.target, Call) and e.target.args:
            e.target = e.target.args[0]  # a write stays a store into the buffer itself
        return e

    transform(k.body, read)


def check(prog: Program, kernel: str, name: str, precision: str,
          half_math: bool = True) -> tuple[Kernel, list[Func]]:
    """Type-check ``kernel`` and the functions it reaches; return them (functions in source order).

    ``half_math`` must match the :func:`parse` call that made ``prog``."""
    if kernel not in prog.kernels:
        raise KernelTemplateError(f"{name}: no kernel {kernel!r} (has {', '.join(prog.kernels)})")
    aliases = precision_types(precision, half_math)
    ch = Checker(prog, name, aliases, aliases["real"], half_math)
    k = prog.kernels[kernel]
    ch.check_kernel(k)
    # functions reached from the kernel, transitively
    reached: set[str] = set()
    # each checked body's user calls, from one walk (the order check below reuses them: walking the
    # trees was a large part of a cold render)
    calls_of: dict[str, list[str]] = {}
    todo: list[tuple[str, Any]] = [("", k.body)]
    while todo:
        owner, node = todo.pop()
        calls = calls_of[owner] = [c.fn for c in walk_nodes(node) if isinstance(c, Call) and c.kind == "user"]
        for fn in calls:
            if fn not in reached:
                reached.add(fn)
                f = prog.funcs[fn]
                ch.check_func(f)
                todo.append((fn, f.body))
    order = list(prog.funcs)
    funcs = [prog.funcs[n] for n in order if n in reached]
    # helpers must be defined before use in C-like dialects
    pos = {f.name: i for i, f in enumerate(funcs)}
    for f in funcs:
        for fn in calls_of[f.name]:
            if pos[fn] >= pos[f.name]:
                raise KernelTemplateError(f"{source_location(name, f.line)}: {f.name} calls {fn}, defined later (or recursively)")
    return k, funcs


_NODE = (Expr, Stmt)
#: per node class, the fields that can hold child nodes (from the dataclass annotations)
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}


def _child_fields(cls: type) -> tuple[str, ...]:
    names: tuple[str, ...] = ()
    if issubclass(cls, _NODE) and dataclasses.is_dataclass(cls):
        names = tuple(f.name for f in dataclasses.fields(cls)
                      if any(w in str(f.type) for w in ("Expr", "Stmt", "Block")))
    _CHILD_FIELDS[cls] = names
    return names


def walk_nodes(node: Any) -> list[Any]:
    """Every AST node under ``node`` (pre-order), as a list.  Only the fields that can hold nodes are
    looked at, and no generator: walking the trees was a large part of a cold render."""
    out: list[Any] = []
    stack = [node]
    pop, push, extend, emit, known = stack.pop, stack.append, stack.extend, out.append, _CHILD_FIELDS.get
    while stack:
        n = pop()
        emit(n)
        cls = n.__class__
        names = known(cls)
        if names is None:
            names = _child_fields(cls)
        for a in names:
            v = getattr(n, a)
            if v is None:
                continue
            if isinstance(v, list):
                extend([x for x in v if isinstance(x, _NODE)])
            elif isinstance(v, _NODE):
                push(v)
    return out


def eval_int_expr(e: Expr, values: Mapping[str, int | float]) -> int:
    """Evaluate a checked grid expression with C integer semantics (trunc division)."""
    if isinstance(e, Num):
        return int(e.value)
    if isinstance(e, Name):
        if e.id not in values:
            raise KernelTemplateError(f"missing kernel param {e.id!r}")
        return int(values[e.id])
    if isinstance(e, Conv):
        return eval_int_expr(e.e, values)
    if isinstance(e, Unary) and e.op == "-":
        return -eval_int_expr(e.e, values)
    if isinstance(e, Call) and e.fn in ("min", "max") and len(e.args) == 2:
        a, b = (eval_int_expr(x, values) for x in e.args)
        return min(a, b) if e.fn == "min" else max(a, b)
    if isinstance(e, Binary):
        a, b = eval_int_expr(e.l, values), eval_int_expr(e.r, values)
        if e.op == "+":
            return a + b
        if e.op == "-":
            return a - b
        if e.op == "*":
            return a * b
        if e.op == "/":
            return int(a / b) if b else 0
        if e.op == "%":
            return int(math.fmod(a, b)) if b else 0
    raise KernelTemplateError(f"grid expression too complex at line {e.line}")
