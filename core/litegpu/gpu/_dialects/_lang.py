"""The neutral kernel language (LGK): preprocessor, parser, type checker and the shared emitter.

A kernel template is written once in a small C-like language and rendered into OpenCL C, GLSL 4.50
and WGSL by the dialect emitters beside this module.  The language is typed so that each emitter
can spell what its target insists on: WGSL's explicit conversions and ``select``, GLSL's
``lessThan``, OpenCL's ``convert_float4``.  The precision-neutral types ``real``/``real4`` (storage
and math) and ``acc``/``acc4`` (accumulators) are bound per precision variant; conversions between
``f16`` and ``f32`` are inserted automatically, int <-> float conversions must be written.

Pipeline: ``preprocess`` (``#if``/``#for``/``{{expr}}`` over the template options) -> ``parse``
(a ``Program`` of functions and kernels) -> ``check`` (types every expression, inserts conversions
and splats) -> a dialect ``Emitter`` subclass renders the kernel and the helpers it calls.
docs/gpu-kernels.md is the language reference.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..._backend_options import PRECISIONS
from ..._errors import LiteGPUError

__all__ = [
    "KernelTemplateError",
    "Ty",
    "PRECISIONS",
    "preprocess",
    "parse",
    "check",
    "retype_buffers",
    "Emitter",
    "eval_int_expr",
]


class KernelTemplateError(LiteGPUError, ValueError):
    """A kernel template is malformed, or was rendered with options it does not accept."""


# ----------------------------------------------------------------------------------------------
# Preprocessor
# ----------------------------------------------------------------------------------------------

_SAFE_BUILTINS = {
    "range": range, "len": len, "min": min, "max": max, "int": int, "str": str, "abs": abs,
    "enumerate": enumerate, "any": any, "all": all, "zip": zip, "sorted": sorted, "repr": repr,
    "True": True, "False": False, "None": None, "tuple": tuple, "list": list, "float": float,
}
_DIRECTIVE = re.compile(r"^\s*#(if|elif|else|endif|for|endfor|set|error)\b(.*)$")
_SUBST = re.compile(r"\{\{(.*?)\}\}")


def _loc(name: Any, line: int) -> str:
    """``file:line`` for messages; ``name`` may be a callable mapping a line to that text."""
    return name(line) if callable(name) else f"{name}:{line}"


def _peval(expr: str, env: Mapping[str, Any], where: str) -> Any:
    try:
        # env as globals so comprehensions see the template variables
        return eval(expr, {**env, "__builtins__": _SAFE_BUILTINS})  # noqa: S307 (trusted templates)
    except Exception as e:  # a template bug: say where
        raise KernelTemplateError(f"{where}: cannot evaluate {expr.strip()!r}: {e}") from e


def preprocess(text: str, env: Mapping[str, Any], name: str = "<template>") -> str:
    """Expand ``#if/#elif/#else/#endif``, ``#for x in ...``/``#endfor``, ``#set x = ...``,
    ``#error msg`` and ``{{expr}}``, evaluating Python expressions over ``env``.

    Lines removed by directives are kept as blank lines so parse errors point at template lines.
    """
    lines = text.split("\n")
    out: list[str] = []

    def block(i: int, env: dict[str, Any], emit: bool, stop: tuple[str, ...]) -> tuple[int, str]:
        """Process lines from i until a directive in ``stop``; return (index, directive)."""
        while i < len(lines):
            line = lines[i]
            m = _DIRECTIVE.match(line)
            where = _loc(name, i + 1)
            if m is None:
                if emit:
                    line = line.split("//", 1)[0]  # comments go: expanded #for bodies share one line
                    out.append(_SUBST.sub(lambda mm, w=where: str(_peval(mm.group(1), env, w)), line))
                else:
                    out.append("")
                i += 1
                continue
            d, arg = m.group(1), m.group(2).strip()
            if d in stop:
                return i, d
            if d == "if":
                out.append("")
                taken = emit and bool(_peval(arg, env, where))
                done = taken
                i, d2 = block(i + 1, env, taken, ("elif", "else", "endif"))
                while d2 != "endif":
                    w2 = _loc(name, i + 1)
                    out.append("")
                    if d2 == "elif":
                        cond = (not done) and emit and bool(_peval(_DIRECTIVE.match(lines[i]).group(2), env, w2))
                        done = done or cond
                        i, d2 = block(i + 1, env, cond, ("elif", "else", "endif"))
                    else:  # else
                        i, d2 = block(i + 1, env, emit and not done, ("endif",))
                out.append("")
                i += 1
            elif d == "for":
                fm = re.match(r"^([A-Za-z_][\w, ]*)\s+in\s+(.*)$", arg)
                if fm is None:
                    raise KernelTemplateError(f"{where}: bad #for: {arg!r}")
                names = [n.strip() for n in fm.group(1).split(",")]
                items = list(_peval(fm.group(2), env, where)) if emit else []
                out.append("")
                start = i + 1
                mark = len(out)
                for it in items:
                    sub = dict(env)
                    if len(names) == 1:
                        sub[names[0]] = it
                    else:
                        sub.update(zip(names, it, strict=True))
                    block(start, sub, True, ("endfor",))
                produced = [ln.strip() for ln in out[mark:] if ln.strip()]
                del out[mark:]
                # the body's extent, found by a dry pass
                end, _ = block(start, env, False, ("endfor",))
                del out[mark:]
                # all iterations on the body's first line, so later lines keep their template numbers
                body = end - start
                if body:
                    out.append(" ".join(produced))
                    out.extend([""] * (body - 1))
                i = end + 1
                out.append("")
            elif d == "set":
                sm = re.match(r"^([A-Za-z_]\w*)\s*=\s*(.*)$", arg)
                if sm is None:
                    raise KernelTemplateError(f"{where}: bad #set: {arg!r}")
                if emit:
                    env[sm.group(1)] = _peval(sm.group(2), env, where)
                out.append("")
                i += 1
            elif d == "error":
                if emit:
                    raise KernelTemplateError(f"{name}: {_SUBST.sub(lambda mm, w=where: str(_peval(mm.group(1), env, w)), arg)}")
                out.append("")
                i += 1
            else:
                raise KernelTemplateError(f"{where}: unexpected #{d}")
        if stop:
            raise KernelTemplateError(f"{name}: missing #{'/#'.join(stop)}")
        return i, ""

    block(0, dict(env), True, ())
    return "\n".join(out)


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


# ----------------------------------------------------------------------------------------------
# Lexer
# ----------------------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"(?P<ws>\s+|//[^\n]*|/\*.*?\*/)"
    r"|(?P<num>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?u?)"
    r"|(?P<id>[A-Za-z_]\w*)"
    r"|(?P<op>->|\+=|-=|\*=|/=|%=|==|!=|<=|>=|&&|\|\||<<|>>|[-+*/%<>=!&|^~?:;,.()\[\]{}])",
    re.S,
)


@dataclass(frozen=True)
class Tok:
    kind: str  # num / id / op / eof
    text: str
    line: int


def tokenize(src: str, name: str) -> list[Tok]:
    toks: list[Tok] = []
    pos, line = 0, 1
    while pos < len(src):
        m = _TOKEN.match(src, pos)
        if m is None:
            raise KernelTemplateError(f"{_loc(name, line)}: unexpected character {src[pos]!r}")
        text = m.group(0)
        if m.lastgroup != "ws":
            toks.append(Tok(m.lastgroup or "", text, line))
        line += text.count("\n")
        pos = m.end()
    toks.append(Tok("eof", "", line))
    return toks


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
    funcs: dict[str, Func]
    kernels: dict[str, Kernel]


# ----------------------------------------------------------------------------------------------
# Parser
# ----------------------------------------------------------------------------------------------

_BINARY_PREC = [
    ("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="), ("<", "<=", ">", ">="),
    ("<<", ">>"), ("+", "-"), ("*", "/", "%"),
]
# Identifiers that some dialect reserves or that the emitters use themselves.
RESERVED = frozenset("""
    active asm attribute auto bitcast buffer case cast centroid char coherent common const constant continue
    default discard do double enable enum extern external filter fixed float fn for global goto half highp
    image in inline input int interface invariant kernel layout let local long loop lowp mat2 mat3 mat4
    mediump mod module namespace noinline noperspective out output override params partition patch
    precise precision private ptr read_write readonly resource restrict sample sampler shared short
    signed sizeof smooth static storage struct subroutine superp switch target template this true false
    typedef typename uniform union unsigned using var varying vec2 vec3 vec4 void volatile while workgroup
    writeonly gid_ lid_ wid_ main select vector matrix array atomic uint
""".split())


class Parser:
    def __init__(self, toks: list[Tok], name: str, aliases: Mapping[str, str],
                 storage_aliases: Mapping[str, str] | None = None):
        self.toks, self.i, self.name, self.aliases = toks, 0, name, aliases
        # buffer element types: the storage precision, which may differ from the arithmetic's
        self.storage_aliases = aliases if storage_aliases is None else storage_aliases

    # -- helpers
    def peek(self, k: int = 0) -> Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def err(self, msg: str, tok: Tok | None = None) -> KernelTemplateError:
        t = tok or self.peek()
        return KernelTemplateError(f"{_loc(self.name, t.line)}: {msg} (at {t.text or 'end of input'!r})")

    def next(self) -> Tok:
        t = self.peek()
        self.i += 1
        return t

    def accept(self, text: str) -> bool:
        if self.peek().text == text and self.peek().kind in ("op", "id"):
            self.i += 1
            return True
        return False

    def expect(self, text: str) -> Tok:
        if not self.accept(text):
            raise self.err(f"expected {text!r}")
        return self.toks[self.i - 1]

    def ident(self) -> str:
        t = self.next()
        if t.kind != "id":
            raise self.err("expected an identifier", t)
        return t.text

    def new_name(self) -> str:
        t = self.peek()
        n = self.ident()
        if n in RESERVED or n in BUILTINS or parse_type_name(n, self.aliases) is not None or n.startswith("_"):
            raise self.err(f"{n!r} is reserved in some dialect; pick another name", t)
        return n

    def type_(self, aliases: Mapping[str, str] | None = None) -> Ty:
        t = self.next()
        ty = parse_type_name(t.text, self.aliases if aliases is None else aliases) if t.kind == "id" else None
        if ty is None:
            raise self.err("expected a type", t)
        return ty

    def comma_list(self, close: str, item):
        out = []
        while not self.accept(close):
            out.append(item())
            if not self.accept(","):
                self.expect(close)
                break
        return out

    # -- top level
    def program(self) -> Program:
        funcs: dict[str, Func] = {}
        kernels: dict[str, Kernel] = {}
        while self.peek().kind != "eof":
            line = self.peek().line
            if self.accept("fn"):
                name = self.new_name()
                self.expect("(")

                def fparam():
                    n = self.new_name()
                    self.expect(":")
                    return (n, self.type_())

                params = self.comma_list(")", fparam)
                ret = self.type_() if self.accept("->") else VOID
                body = self.block()
                if name in funcs:
                    raise self.err(f"function {name!r} defined twice")
                funcs[name] = Func(name, params, ret, body, line)
            elif self.accept("kernel"):
                k = self.kernel(line)
                kernels[k.name] = k
            else:
                raise self.err("expected 'fn' or 'kernel'")
        return Program(funcs, kernels)

    def kernel(self, line: int) -> Kernel:
        name = self.new_name()
        self.expect("(")

        def buf():
            n = self.new_name()
            self.expect(":")
            access = self.ident()
            if access not in ("read", "write", "read_write"):
                raise self.err("buffer access must be read, write or read_write")
            elem = self.type_(self.storage_aliases)
            self.expect("[")
            self.expect("]")
            return Buffer(n, access, elem)

        buffers = self.comma_list(")", buf)
        params: list[Param] = []
        if self.accept("params"):
            self.expect("(")

            def par():
                n = self.new_name()
                self.expect(":")
                t = self.type_()
                if t not in (Ty("i32"), Ty("f32")):
                    raise self.err("params are i32 or f32 scalars")
                return Param(n, t)

            params = self.comma_list(")", par)
        self.expect("grid")
        self.expect("(")
        grid = self.comma_list(")", self.expr)
        if not 1 <= len(grid) <= 3:
            raise self.err("grid takes 1 to 3 sizes")
        grid += [Num(1, False)] * (3 - len(grid))
        self.expect("{")
        shared: list[SharedDecl] = []
        while self.peek().text == "shared":
            self.next()
            sline = self.peek().line
            sn = self.new_name()
            self.expect(":")
            sty = self.type_()
            self.expect("[")
            size = self.next()
            if size.kind != "num" or not size.text.isdigit():
                raise self.err("shared array size must be an integer literal", size)
            self.expect("]")
            self.expect(";")
            shared.append(SharedDecl(sn, sty, int(size.text), line=sline))
        body = Block(self.stmts_until("}"), line=line)
        return Kernel(name, buffers, params, grid, body, shared, line)

    # -- statements
    def block(self) -> Block:
        line = self.expect("{").line
        return Block(self.stmts_until("}"), line=line)

    def stmts_until(self, close: str) -> list[Stmt]:
        out = []
        while not self.accept(close):
            if self.peek().kind == "eof":
                raise self.err(f"missing {close!r}")
            out.append(self.stmt())
        return out

    def decl(self) -> Decl:
        line = self.peek().line
        mutable = self.next().text == "var"
        name = self.new_name()
        ty = self.type_() if self.accept(":") else None
        init = self.expr() if self.accept("=") else None
        if init is None and (not mutable or ty is None):
            raise self.err("a 'let' needs a value and a 'var' without one needs a type")
        return Decl(name, ty, init, mutable, line=line)

    def simple(self) -> Stmt:
        """A declaration, assignment or call, without the ';'."""
        t = self.peek()
        if t.text in ("let", "var") and t.kind == "id":
            return self.decl()
        e = self.expr()
        if self.peek().text in ("=", "+=", "-=", "*=", "/=", "%="):
            op = self.next().text
            return Assign(e, op, self.expr(), line=t.line)
        return ExprStmt(e, line=t.line)

    def stmt(self) -> Stmt:
        t = self.peek()
        if t.kind == "op" and t.text == "{":
            return self.block()
        if t.kind == "id":
            if t.text == "if":
                self.next()
                self.expect("(")
                c = self.expr()
                self.expect(")")
                then = self.block()
                other = None
                if self.accept("else"):
                    if self.peek().text == "if":
                        other = Block([self.stmt()], line=self.peek().line)
                    else:
                        other = self.block()
                return If(c, then, other, line=t.line)
            if t.text == "for":
                self.next()
                self.expect("(")
                init = None if self.peek().text == ";" else self.simple()
                self.expect(";")
                cond = None if self.peek().text == ";" else self.expr()
                self.expect(";")
                step = None if self.peek().text == ")" else self.simple()
                self.expect(")")
                return For(init, cond, step, self.block(), line=t.line)
            if t.text == "return":
                self.next()
                v = None if self.peek().text == ";" else self.expr()
                self.expect(";")
                return Return(v, line=t.line)
            if t.text in ("break", "continue"):
                self.next()
                self.expect(";")
                return Jump(t.text, line=t.line)
            if t.text == "shared":
                raise self.err("'shared' arrays are declared first in a kernel body")
        s = self.simple()
        self.expect(";")
        return s

    # -- expressions
    def expr(self) -> Expr:
        c = self.binary(0)
        if self.accept("?"):
            t = self.expr()
            self.expect(":")
            f = self.expr()
            return Ternary(c, t, f, line=c.line)
        return c

    def binary(self, level: int) -> Expr:
        if level == len(_BINARY_PREC):
            return self.unary()
        e = self.binary(level + 1)
        while self.peek().kind == "op" and self.peek().text in _BINARY_PREC[level]:
            op = self.next().text
            e = Binary(op, e, self.binary(level + 1), line=e.line)
        return e

    def unary(self) -> Expr:
        t = self.peek()
        if t.kind == "op" and t.text in ("-", "!", "~", "+"):
            self.next()
            e = self.unary()
            return e if t.text == "+" else Unary(t.text, e, line=t.line)
        return self.postfix(self.primary())

    def primary(self) -> Expr:
        t = self.next()
        if t.kind == "num":
            text = t.text
            if text.endswith("u"):
                return Num(int(text[:-1]), False, line=t.line, ty=Ty("u32"))
            if re.fullmatch(r"\d+", text):
                return Num(int(text), False, line=t.line)
            return Num(float(text), True, line=t.line)
        if t.kind == "id":
            if self.peek().text == "(":
                self.next()
                return Call(t.text, self.comma_list(")", self.expr), line=t.line)
            if t.text in ("true", "false"):
                return Call("bool_" + t.text, [], line=t.line)
            return Name(t.text, line=t.line)
        if t.text == "(":
            e = self.expr()
            self.expect(")")
            return e
        raise self.err("expected an expression", t)

    def postfix(self, e: Expr) -> Expr:
        while True:
            if self.accept("["):
                idx = self.expr()
                self.expect("]")
                e = Index(e, idx, line=e.line)
            elif self.accept("."):
                e = Member(e, self.ident(), line=e.line)
            else:
                return e


def parse(src: str, name: str, precision: str, half_math: bool = True) -> Program:
    """Parse a preprocessed template.  ``half_math=False``: the storage-only half variant (buffers
    keep the precision's storage types, everything else is ``f32``; see :func:`precision_types`)."""
    aliases = precision_types(precision, half_math)
    return Parser(tokenize(src, name), name, aliases, precision_types(precision)).program()


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
        return KernelTemplateError(f"{_loc(self.name, getattr(node, 'line', 0))}: {msg}")

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
        """``e`` with every read of a retyped buffer wrapped in a constructor of its declared type."""
        if isinstance(e, Index) and isinstance(e.base, Name) and e.base.id in logical:
            e.idx = read(e.idx)
            return Call(str(logical[e.base.id]), [e], line=e.line)
        if isinstance(e, (Expr, Stmt)):
            for key, v in vars(e).items():
                if isinstance(v, (Expr, Stmt)):
                    setattr(e, key, read(v))
                elif isinstance(v, list):
                    setattr(e, key, [read(x) if isinstance(x, (Expr, Stmt)) else x for x in v])
            if isinstance(e, Assign) and isinstance(e.target, Call) and e.target.args:
                e.target = e.target.args[0]  # a write stays a store into the buffer itself
        return e

    read(k.body)


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
    todo = [k.body]
    while todo:
        node = todo.pop()
        for c in _walk(node):
            if isinstance(c, Call) and c.kind == "user" and c.fn not in reached:
                reached.add(c.fn)
                f = prog.funcs[c.fn]
                ch.check_func(f)
                todo.append(f.body)
    order = list(prog.funcs)
    funcs = [prog.funcs[n] for n in order if n in reached]
    # helpers must be defined before use in C-like dialects
    pos = {f.name: i for i, f in enumerate(funcs)}
    for f in funcs:
        for c in _walk(f.body):
            if isinstance(c, Call) and c.kind == "user" and pos[c.fn] >= pos[f.name]:
                raise KernelTemplateError(f"{_loc(name, f.line)}: {f.name} calls {c.fn}, defined later (or recursively)")
    return k, funcs


def _walk(node: Any) -> Iterable[Any]:
    """Every AST node under ``node`` (pre-order)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, (Expr, Stmt)):
            for v in vars(n).values():
                if isinstance(v, (Expr, Stmt)):
                    stack.append(v)
                elif isinstance(v, list):
                    stack.extend(x for x in v if isinstance(x, (Expr, Stmt)))


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


# ----------------------------------------------------------------------------------------------
# Shared emitter
# ----------------------------------------------------------------------------------------------


class Emitter:
    """Renders a checked kernel. Dialects override the ``ty``/``call``/``conv``/... hooks."""

    dialect = ""
    indent_unit = "    "
    #: whether the dialect can render the storage-only half variant (``half_math=False``)
    storage_only_half = False

    def __init__(self, kernel: Kernel, funcs: list[Func], workgroup: tuple[int, int, int], *,
                 half_math: bool = True):
        self.k, self.funcs, self.wg = kernel, funcs, workgroup
        self.half_math = half_math
        #: f16 values in arithmetic (locals, expressions, shared memory, helper signatures)
        self.f16_math = self._f16_math()
        #: f16 buffer elements
        self.f16_storage = any(b.elem.kind == "f16" for b in self.k.buffers)
        self.uses_f16 = self.f16_math or self.f16_storage
        if not half_math:
            if not self.storage_only_half:
                raise KernelTemplateError(f"the {self.dialect} dialect has no storage-only half variant")
            if self.f16_math:  # parse/check with half_math=False make every value f32
                raise KernelTemplateError(f"kernel {kernel.name}: f16 arithmetic in a storage-only half variant")

    def _f16_math(self) -> bool:
        for node in [self.k.body, *(f.body for f in self.funcs)]:
            for n in _walk(node):
                if isinstance(n, Expr) and n.ty.kind == "f16":
                    return True
                if isinstance(n, Decl) and n.ty is not None and n.ty.kind == "f16":
                    return True
        if any(s.ty.kind == "f16" for s in self.k.shared):
            return True
        return any(t.kind == "f16" for f in self.funcs for _, t in f.params) or any(
            f.ret.kind == "f16" for f in self.funcs)

    def storage_only(self, e: Expr) -> Buffer | None:
        """The buffer that the ``buffer[i]`` expression ``e`` indexes when it holds halves read and
        written as f32 (the storage-only half variant); None otherwise."""
        if not (isinstance(e, Index) and e.kind == "buffer" and isinstance(e.base, Name)):
            return None
        b = next((b for b in self.k.buffers if b.name == e.base.id), None)
        if b is None or b.elem.kind != "f16" or e.ty.kind != "f32":
            return None
        return b

    # -- hooks
    def ty(self, t: Ty) -> str:
        raise NotImplementedError

    def render(self) -> str:
        raise NotImplementedError

    # -- literals
    def num(self, e: Num) -> str:
        t = e.ty
        if t.kind in ("i32", "absi"):
            return str(int(e.value))
        if t.kind == "u32":
            return f"{int(e.value)}u"
        return self.float_lit(float(e.value), t.kind)

    def float_lit(self, v: float, kind: str) -> str:
        raise NotImplementedError

    @staticmethod
    def fmt_float(v: float) -> str:
        s = repr(float(v))
        if "e" not in s and "." not in s:
            s += ".0"
        if "e" in s and "." not in s.split("e")[0]:
            m, x = s.split("e")
            s = f"{m}.0e{x}"
        return s

    # -- statements
    def block(self, b: Block, depth: int) -> list[str]:
        out: list[str] = []
        for s in b.stmts:
            out.extend(self.stmt(s, depth))
        return out

    def pad(self, depth: int) -> str:
        return self.indent_unit * depth

    def stmt(self, s: Stmt, depth: int) -> list[str]:
        p = self.pad(depth)
        if isinstance(s, (Decl, Assign, ExprStmt)):
            return [p + self.simple(s) + ";"]
        if isinstance(s, If):
            out = [f"{p}if ({self.expr(s.cond)}) {{", *self.block(s.then, depth + 1)]
            while s.other is not None:
                if len(s.other.stmts) == 1 and isinstance(s.other.stmts[0], If):
                    s2 = s.other.stmts[0]
                    out += [f"{p}}} else if ({self.expr(s2.cond)}) {{", *self.block(s2.then, depth + 1)]
                    s = s2
                else:
                    out += [f"{p}}} else {{", *self.block(s.other, depth + 1)]
                    break
            return out + [p + "}"]
        if isinstance(s, For):
            init = self.simple(s.init) if s.init is not None else ""
            cond = self.expr(s.cond) if s.cond is not None else ""
            step = self.simple(s.step) if s.step is not None else ""
            return [f"{p}for ({init}; {cond}; {step}) {{", *self.block(s.body, depth + 1), p + "}"]
        if isinstance(s, Return):
            return [p + ("return;" if s.value is None else f"return {self.expr(s.value)};")]
        if isinstance(s, Jump):
            return [p + s.word + ";"]
        if isinstance(s, Block):
            return [p + "{", *self.block(s, depth + 1), p + "}"]
        raise KernelTemplateError(f"cannot emit {type(s).__name__}")

    def simple(self, s: Stmt) -> str:
        if isinstance(s, Decl):
            return self.decl(s)
        if isinstance(s, Assign):
            return f"{self.expr(s.target)} {s.op} {self.expr(s.value)}"
        if isinstance(s, ExprStmt):
            return self.expr(s.e)
        raise KernelTemplateError(f"cannot emit {type(s).__name__} here")

    def decl(self, s: Decl) -> str:
        assert s.ty is not None
        init = f" = {self.expr(s.init)}" if s.init is not None else ""
        return f"{self.ty(s.ty)} {s.name}{init}"

    # -- expressions
    def sub(self, e: Expr) -> str:
        """An operand of an operator: parenthesized unless atomic."""
        s = self.expr(e)
        if isinstance(e, (Binary, Ternary, Unary)) or (isinstance(e, Num) and s.startswith("-")):
            return f"({s})"
        return s

    def expr(self, e: Expr) -> str:
        if isinstance(e, Num):
            return self.num(e)
        if isinstance(e, Name):
            return self.name(e)
        if isinstance(e, Unary):
            return f"{e.op}{self.sub(e.e)}"
        if isinstance(e, Binary):
            return self.binary(e)
        if isinstance(e, Ternary):
            return self.ternary(e)
        if isinstance(e, Index):
            return self.index(e)
        if isinstance(e, Member):
            return f"{self.sub(e.base)}.{e.name}"
        if isinstance(e, Conv):
            return self.conv(e)
        if isinstance(e, Call):
            if e.kind == "user":
                return f"{e.fn}({', '.join(self.expr(a) for a in e.args)})"
            if e.kind == "ctor":
                return self.ctor(e)
            return self.builtin(e)
        raise KernelTemplateError(f"cannot emit {type(e).__name__}")

    def name(self, e: Name) -> str:
        return e.id

    def binary(self, e: Binary) -> str:
        return f"{self.sub(e.l)} {e.op} {self.sub(e.r)}"

    def ternary(self, e: Ternary) -> str:
        return f"{self.sub(e.c)} ? {self.sub(e.t)} : {self.sub(e.f)}"

    def index(self, e: Index) -> str:
        return f"{self.sub(e.base)}[{self.expr(e.idx)}]"

    def conv(self, e: Conv) -> str:
        raise NotImplementedError

    def ctor(self, e: Call) -> str:
        raise NotImplementedError

    def builtin(self, e: Call) -> str:
        raise NotImplementedError

    def args(self, e: Call) -> str:
        return ", ".join(self.expr(a) for a in e.args)

    def func(self, f: Func, header: str) -> list[str]:
        return [header + " {", *self.block(f.body, 1), "}", ""]
