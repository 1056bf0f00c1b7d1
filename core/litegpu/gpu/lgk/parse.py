"""LGK lexer and parser: template text (preprocessed) -> :class:`~.nodes.Program`."""

from __future__ import annotations

import pickle
import re
from collections.abc import Iterator, Mapping
from typing import NamedTuple

from .check import BUILTINS
from .nodes import (
    Assign,
    Binary,
    Block,
    Buffer,
    Call,
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
    Param,
    Program,
    Return,
    SharedDecl,
    Stmt,
    Ternary,
    Unary,
)
from .preprocess import source_location
from .types import VOID, KernelTemplateError, Ty, parse_type_name, precision_types

# ----------------------------------------------------------------------------------------------
# Lexer
# ----------------------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"(?P<ws>\s+|//[^\n]*|/\*.*?\*/)"
    r"|(?P<num>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?u?)"
    r"|(?P<id>[A-Za-z_]\w*)"
    r"|(?P<op>->|\+=|-=|\*=|/=|%=|==|!=|<=|>=|&&|\|\||<<|>>|[-+*/%<>=!&|^~?:;,.()\[\]{}])"
    r"|(?P<bad>.)",
    re.S,
)


class Tok(NamedTuple):
    """A token (a named tuple: a model's kernels make hundreds of thousands of them)."""

    kind: str  # num / id / op / eof
    text: str
    line: int


def tokenize(src: str, name: str, first_line: int = 1) -> list[Tok]:
    toks: list[Tok] = []
    line = first_line
    for m in _TOKEN.finditer(src):
        kind, text = m.lastgroup, m.group(0)
        if kind == "bad":
            raise KernelTemplateError(f"{source_location(name, line)}: unexpected character {text!r}")
        if kind != "ws":
            toks.append(Tok(kind or "", text, line))
        if "\n" in text:
            line += text.count("\n")
    toks.append(Tok("eof", "", line))
    return toks



# ----------------------------------------------------------------------------------------------
# Parser
# ----------------------------------------------------------------------------------------------

_BINARY_PREC = [
    ("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="), ("<", "<=", ">", ">="),
    ("<<", ">>"), ("+", "-"), ("*", "/", "%"),
]
_BINARY_LEVEL = {op: level for level, ops in enumerate(_BINARY_PREC) for op in ops}
# Identifiers that some dialect reserves or that the emitters use themselves.
RESERVED = frozenset("""
    active asm attribute auto bitcast buffer case cast centroid char coherent common const constant continue
    default discard do double enable enum extern external filter fixed flat float fn for global goto half highp
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
        try:
            return self.toks[self.i + k]
        except IndexError:  # past the end: the eof token
            return self.toks[-1]

    def err(self, msg: str, tok: Tok | None = None) -> KernelTemplateError:
        t = tok or self.peek()
        return KernelTemplateError(f"{source_location(self.name, t.line)}: {msg} (at {t.text or 'end of input'!r})")

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
        """Operators of ``level`` (an index of ``_BINARY_PREC``) and tighter, left-associative: by
        precedence climbing, one call per operand rather than one per level."""
        e = self.unary()
        while True:
            t = self.peek()
            prec = _BINARY_LEVEL.get(t.text) if t.kind == "op" else None
            if prec is None or prec < level:
                return e
            self.i += 1
            e = Binary(t.text, e, self.binary(prec + 1), line=e.line)

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
    keep the precision's storage types, everything else is ``f32``; see :func:`precision_types`).

    Each top-level definition is parsed once per process (see :func:`_parse_definitions`): every
    kernel of a template file shares the helpers of ``common.lgk`` and of the file's head, and a
    model renders tens of kernels and variants."""
    aliases = precision_types(precision, half_math)
    storage = precision_types(precision)
    defs = _parse_definitions(src, name, aliases, storage)
    if defs is not None:
        funcs: dict[str, bytes] = {}
        kernels: dict[str, Kernel] = {}
        for kind, dname, blob in defs:
            if kind == "kernel":
                kernels[dname] = pickle.loads(blob)
            elif dname not in funcs:
                funcs[dname] = blob
            else:  # "defined twice": the whole-text parse below reports it
                break
        else:
            return Program(_Definitions(funcs), kernels)
    return Parser(tokenize(src, name), name, aliases, storage).program()


class _Definitions(Mapping[str, Func]):
    """A program's functions, each unpickled from the parse cache when first asked for: a kernel
    calls a few of the many helpers of ``common.lgk`` and its file's head."""

    def __init__(self, blobs: dict[str, bytes]) -> None:
        self._blobs = blobs
        self._funcs: dict[str, Func] = {}

    def __getitem__(self, key: str) -> Func:
        f = self._funcs.get(key)
        if f is None:
            f = self._funcs[key] = pickle.loads(self._blobs[key])
        return f

    def __iter__(self) -> Iterator[str]:
        return iter(self._blobs)

    def __len__(self) -> int:
        return len(self._blobs)

    def __contains__(self, key: object) -> bool:
        return key in self._blobs

    def __repr__(self) -> str:
        return repr(dict(self.items()))


#: (definition text, its first line, aliases, storage aliases) -> its pickled syntax tree.  Pickled,
#: because ``check`` and ``retype_buffers`` annotate and rewrite the tree they are given: each parse
#: gets a fresh copy, and unpickling is many times cheaper than tokenizing and parsing again.
_DEFINITIONS: dict[tuple[str, int, tuple, tuple], tuple[str, str, bytes]] = {}
_MAX_DEFINITIONS = 4096
# where a top-level definition can end: braces outside comments (the preprocessor drops ``//``
# comments; text with a comment left in is parsed whole)
_BRACE = re.compile(r"[{}]")


def _parse_definitions(src: str, name: str, aliases: Mapping[str, str],
                       storage: Mapping[str, str]) -> list[tuple[str, str, bytes]] | None:
    """The top-level definitions of ``src`` as ("fn" or "kernel", name, pickled tree), each parsed
    once per process, or None where the text is not a plain sequence of definitions (the caller
    then parses it whole, which reports any error exactly as before)."""
    if "//" in src or "/*" in src:
        return None
    akey, skey = tuple(sorted(aliases.items())), tuple(sorted(storage.items()))
    out: list[tuple[str, str, bytes]] = []
    depth, start = 0, 0
    line, counted = 1, 0  # the line number at offset ``counted`` (counted on, not from 0 each time)
    for m in _BRACE.finditer(src):
        if m.group(0) == "{":
            depth += 1
            continue
        depth -= 1
        if depth < 0:
            return None
        if depth:
            continue
        end = m.end()
        text = src[start:end]
        body = text.lstrip()
        at = start + len(text) - len(body)
        line += src.count("\n", counted, at)
        first_line, counted = line, at
        start = end
        key = (body, first_line, akey, skey)
        entry = _DEFINITIONS.get(key)
        if entry is None:
            try:
                prog = Parser(tokenize(body, name, first_line), name, aliases, storage).program()
            except KernelTemplateError:
                return None
            defs = [*prog.funcs.values(), *prog.kernels.values()]
            if len(defs) != 1:
                return None
            d = defs[0]
            entry = ("kernel" if isinstance(d, Kernel) else "fn", d.name,
                     pickle.dumps(d, protocol=pickle.HIGHEST_PROTOCOL))
            if len(_DEFINITIONS) >= _MAX_DEFINITIONS:
                _DEFINITIONS.clear()
            _DEFINITIONS[key] = entry
        out.append(entry)
    if depth or src[start:].strip():
        return None
    return out
