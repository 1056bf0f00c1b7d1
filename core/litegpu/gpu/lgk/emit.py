"""The emitter every dialect subclasses: walks a checked program and prints it; a dialect overrides the
spellings its target insists on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from .check import walk_nodes
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
    Return,
    Stmt,
    Ternary,
    Unary,
)
from .types import FLOAT_KINDS, KernelTemplateError, Ty

#: How a template's float ``a * b + c`` is computed (``+``/``-`` with a product operand, ``x += a * b``):
#:
#: - ``"fma"``: one fused multiply-add, an explicit ``fma`` call (the right product when both operands
#:   are products, so ``w0 * x + w1 * y + ...`` is a chain of fmas).  Every GPU has a fused
#:   multiply-add and its compilers give ``fma`` to it, so the APIs fuse the same operations.  CPU
#:   drivers differ: PoCL fuses, lavapipe (llvmpipe lowers NIR ffma) computes ``a * b`` then ``+ c``.
#: - ``"separate"``: a multiply, then an add, each rounded (every driver does this the same way).
#: - ``"compiler"``: as each compiler likes (OpenCL contracts within an expression, Mesa and NVIDIA's
#:   GLSL compilers across statements): the three APIs may fuse different operations.
#:
#: ``fma`` and ``separate`` forbid the compiler any other contraction (OpenCL ``FP_CONTRACT OFF``
#: without ``-cl-mad-enable``, SPIR-V ``NoContraction`` on the GLSL path; WGSL has no such control):
#: with the template's sum order, that makes one plan do the same float arithmetic on every API.
MULTIPLY_ADD = "fma"
MULTIPLY_ADD_MODES = ("fma", "separate", "compiler")

# ----------------------------------------------------------------------------------------------
# Shared emitter
# ----------------------------------------------------------------------------------------------


class Emitter:
    """Renders a checked kernel. Dialects override the ``ty``/``call``/``conv``/... hooks."""

    dialect = ""
    indent_unit = "    "
    #: whether the dialect can render the storage-only half variant (``half_math=False``)
    storage_only_half = False
    #: whether the dialect renders a tail group (kernel option ``tail``, ``_passes/tail_group``): a one-group kernel
    #: run by the last work group of the launch before it, which needs device-scope fences and an atomic ticket
    #: (GLSL and WGSL could, with their memory barriers and atomics: not written yet, so their plans keep the launch)
    tail_group = False
    # -- the dialect's spellings, as data (tinygrad's CStyleLanguage attributes) ------------------
    #: ``gid(i)`` / ``lid(i)`` / ``wgid(i)`` as an int expression: a format of ``{axis}`` (0, 1, 2)
    #: and ``{xyz}`` (``x``, ``y``, ``z``)
    index_builtins: ClassVar[Mapping[str, str]] = {}
    #: the work-group barrier statement (``barrier()`` in a template)
    barrier: ClassVar[str] = ""
    #: ``bool_true()`` / ``bool_false()``
    bool_literals: ClassVar[Mapping[str, str]] = {"bool_true": "true", "bool_false": "false"}
    #: built-in functions the dialect spells differently (``rsqrt`` -> ``inverseSqrt``...)
    function_names: ClassVar[Mapping[str, str]] = {}

    def __init__(self, kernel: Kernel, funcs: list[Func], workgroup: tuple[int, int, int], *,
                 half_math: bool = True, multiply_add: str | None = None):
        self.k, self.funcs, self.wg = kernel, funcs, workgroup
        self.multiply_add = MULTIPLY_ADD if multiply_add is None else multiply_add
        if self.multiply_add not in MULTIPLY_ADD_MODES:
            raise KernelTemplateError(f"multiply_add {self.multiply_add!r} is not one of {', '.join(MULTIPLY_ADD_MODES)}")
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
            for n in walk_nodes(node):
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

    @property
    def explicit_fma(self) -> bool:
        return self.multiply_add == "fma"

    @property
    def no_contraction(self) -> bool:
        """Whether the compiler must not fuse on its own (the source says so in the dialect's words)."""
        return self.multiply_add != "compiler"

    @staticmethod
    def _fmul(e: Expr) -> bool:
        return isinstance(e, Binary) and e.op == "*" and e.ty.kind in FLOAT_KINDS

    def fused_assign(self, s: Stmt) -> Stmt:
        """``x += a * b`` -> ``x = x + a * b``, which :meth:`binary` renders as ``fma(a, b, x)``."""
        if (self.explicit_fma and isinstance(s, Assign) and s.op in ("+=", "-=") and self._fmul(s.value)
                and s.target.ty.kind in FLOAT_KINDS):
            return Assign(s.target, "=", Binary(s.op[0], s.target, s.value, ty=s.target.ty, line=s.line),
                          line=s.line)
        return s

    def typed(self, e: Expr, ty: Ty) -> str:
        """``e`` converted (splat, or a literal made concrete) to ``ty``: fma wants one type."""
        if e.ty == ty:
            return self.expr(e)
        if isinstance(e, Num):
            e = Num(e.value, True, ty=ty.scalar, line=e.line)
            if ty.n == 1:
                return self.expr(e)
        return self.expr(Conv(e, ty=ty, line=e.line))

    def fma(self, a: Expr, b: Expr, c: Expr, ty: Ty) -> str:
        return f"{self.function_names.get('fma', 'fma')}({self.typed(a, ty)}, {self.typed(b, ty)}, {self.typed(c, ty)})"

    def fused(self, e: Binary) -> str | None:
        """``a * b + c``, ``c + a * b``, ``a * b - c``, ``c - a * b`` as one fma (the right product when
        both operands are products: ``w0 * x + w1 * y + ...`` becomes a chain of fmas); None otherwise."""
        if not (self.explicit_fma and e.op in ("+", "-") and e.ty.kind in FLOAT_KINDS):
            return None
        l, r = e.l, e.r
        if self._fmul(r):
            assert isinstance(r, Binary)
            a = r.l if e.op == "+" else Unary("-", r.l, ty=r.l.ty, line=r.line)
            return self.fma(a, r.r, l, e.ty)
        if self._fmul(l):
            assert isinstance(l, Binary)
            c = r if e.op == "+" else Unary("-", r, ty=r.ty, line=r.line)
            return self.fma(l.l, l.r, c, e.ty)
        return None

    def stmt(self, s: Stmt, depth: int) -> list[str]:
        p = self.pad(depth)
        if isinstance(s, (Decl, Assign, ExprStmt)):
            return [p + self.simple(self.fused_assign(s)) + ";"]
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
        f = self.fused(e)
        if f is not None:
            return f
        return f"{self.sub(e.l)} {e.op} {self.sub(e.r)}"

    def ternary(self, e: Ternary) -> str:
        return self.choose(e.c, e.t, e.f)

    def choose(self, c: Expr, t: Expr, f: Expr) -> str:
        """``c ? t : f`` on a scalar condition: the template's ``?:`` and ``select`` with a scalar condition alike
        (C's operator in OpenCL C and GLSL; WGSL, which has none, overrides)."""
        return f"({self.sub(c)} ? {self.sub(t)} : {self.sub(f)})"

    def index(self, e: Index) -> str:
        return f"{self.sub(e.base)}[{self.expr(e.idx)}]"

    def conv(self, e: Conv) -> str:
        raise NotImplementedError

    def ctor(self, e: Call) -> str:
        raise NotImplementedError

    def builtin(self, e: Call) -> str:
        """A built-in call, spelled from the dialect's data (``select`` on a scalar condition: :meth:`choose`);
        dialects override what needs code (a vector ``select`` and friends) and hand the rest here."""
        f, a = e.fn, e.args
        if f == "select" and a[2].ty.n == 1:
            return self.choose(a[2], a[1], a[0])
        if f in self.index_builtins:
            axis = int(a[0].value)
            return self.index_builtins[f].format(axis=axis, xyz="xyz"[axis])
        if f == "barrier":
            return self.barrier
        if f in self.bool_literals:
            return self.bool_literals[f]
        if f == "dot" and self.no_contraction and e.ty.kind in FLOAT_KINDS:
            return self.expr(self.dot_terms(e))
        return f"{self.function_names.get(f, f)}({self.args(e)})"

    @staticmethod
    def dot_terms(e: Call) -> Expr:
        """``dot(a, b)`` spelled out, ``a.x * b.x + a.y * b.y + ...`` left to right: the built-in's order
        of sums and its contractions are each compiler's own (OpenCL and GLSL differ)."""
        a, b = e.args
        t = e.ty.scalar
        lanes = [Binary("*", Member(a, c, ty=t, line=e.line), Member(b, c, ty=t, line=e.line), ty=t, line=e.line)
                 for c in "xyzw"[:a.ty.n]]
        out: Expr = lanes[0]
        for p in lanes[1:]:
            out = Binary("+", out, p, ty=t, line=e.line)
        return out

    def args(self, e: Call) -> str:
        return ", ".join(self.expr(a) for a in e.args)

    def func(self, f: Func, header: str) -> list[str]:
        return [header + " {", *self.block(f.body, 1), "}", ""]
