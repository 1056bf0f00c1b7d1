"""WGSL emitter (WebGPU) for the neutral kernel language.

Buffers are ``var<storage>`` at ``@group(0) @binding(i)`` in binding order (write-only buffers are
``read_write``: WGSL has no write-only storage); the params are one ``var<uniform> params: Params``
at the next binding.  WGSL wants every conversion spelled out and has no ``?:`` (``select``
evaluates both arms: templates keep ternary arms pure and in bounds).
"""

from __future__ import annotations

from ..lgk.emit import Emitter
from ..lgk.nodes import Binary, Call, Conv, Expr, Name
from ..lgk.types import Ty

__all__ = ["WGSLEmitter"]



class WGSLEmitter(Emitter):
    dialect = "wgsl"
    index_builtins = {"gid": "i32(gid_.{xyz})", "lid": "i32(lid_.{xyz})", "wgid": "i32(wid_.{xyz})"}
    barrier = "workgroupBarrier()"
    function_names = {"rsqrt": "inverseSqrt"}

    def ty(self, t: Ty) -> str:
        return t.kind if t.n == 1 else f"vec{t.n}<{t.kind}>"

    def float_lit(self, v: float, kind: str) -> str:
        return self.fmt_float(v) + ("h" if kind == "f16" else "f")

    def num(self, e) -> str:
        if e.ty.kind in ("i32", "absi"):
            v = int(e.value)
            return f"{v}i"
        return super().num(e)

    def cast(self, s: str, src: Ty, dst: Ty) -> str:
        if src == dst:
            return s
        if src.n == dst.n:
            return f"{self.ty(dst)}({s})"
        inner = self.cast(s, src, dst.scalar)
        return f"{self.ty(dst)}({inner})"

    def conv(self, e: Conv) -> str:
        return self.cast(self.expr(e.e), e.e.ty, e.ty)

    def ctor(self, e: Call) -> str:
        t = e.ty
        if len(e.args) == 1:
            return self.cast(self.expr(e.args[0]), e.args[0].ty, t)
        return f"{self.ty(t)}({self.args(e)})"

    def name(self, e: Name) -> str:
        return f"params.{e.id}" if e.sym == "param" else e.id

    def binary(self, e: Binary) -> str:
        if e.op in ("<<", ">>"):
            r = e.r.ty
            rs = self.expr(e.r) if r.kind == "u32" else f"{self.ty(Ty('u32', r.n))}({self.expr(e.r)})"
            return f"{self.sub(e.l)} {e.op} ({rs})"
        return super().binary(e)

    def choose(self, c: Expr, t: Expr, f: Expr) -> str:
        return f"select({self.expr(f)}, {self.expr(t)}, {self.expr(c)})"

    def decl(self, s) -> str:
        kw = "var" if s.mutable else "let"
        init = f" = {self.expr(s.init)}" if s.init is not None else ""
        return f"{kw} {s.name}: {self.ty(s.ty)}{init}"

    def render(self) -> str:
        k = self.k
        out: list[str] = []
        if self.uses_f16:
            out += ["enable f16;", ""]
        if k.params:
            out.append("struct Params {")
            out += [f"    {p.name}: {self.ty(p.ty)}," for p in k.params]
            out += ["}", ""]
        for i, b in enumerate(k.buffers):
            acc = "read" if b.access == "read" else "read_write"
            out.append(f"@group(0) @binding({i}) var<storage, {acc}> {b.name}: array<{self.ty(b.elem)}>;")
        if k.params:
            out.append(f"@group(0) @binding({len(k.buffers)}) var<uniform> params: Params;")
        for s in k.shared:
            out.append(f"var<workgroup> {s.name}: array<{self.ty(s.ty)}, {s.size}>;")
        out.append("")
        for f in self.funcs:
            ps = ", ".join(f"{n}: {self.ty(t)}" for n, t in f.params)
            ret = f" -> {self.ty(f.ret)}" if f.ret.kind != "void" else ""
            out += self.func(f, f"fn {f.name}({ps}){ret}")
        out.append("@compute @workgroup_size({}, {}, {})".format(*self.wg))
        out.append(f"fn {k.name}(@builtin(global_invocation_id) gid_: vec3<u32>, "
                   "@builtin(local_invocation_id) lid_: vec3<u32>, @builtin(workgroup_id) wid_: vec3<u32>) {")
        out += self.block(k.body, 1)
        out.append("}")
        return "\n".join(out) + "\n"
