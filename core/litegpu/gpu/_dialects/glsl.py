"""GLSL 4.50 compute emitter (Vulkan flavour, compiled to SPIR-V) for the neutral kernel language.

Buffers are std430 storage blocks at ``set = 0, binding = i`` in binding order; the params are one
std140 uniform block at the next binding, every member a 4-byte scalar at offset 4*i.  fp16 uses
GL_EXT_shader_explicit_arithmetic_types_float16 and GL_EXT_shader_16bit_storage.  The storage-only
half variant (``render(..., half_math=False)``) declares the f16 buffers as ``float16_t``/``f16vecN``
but computes in ``float``: a load is a ``vecN(buf[i])`` conversion, a store ``buf[i] = f16vecN(v)``
(round to nearest even on the drivers we know; SPIR-V leaves the mode to the implementation).  It
needs only GL_EXT_shader_16bit_storage (SPIR-V StorageBuffer16BitAccess), not shaderFloat16.
Compiling the result to SPIR-V: ``litegpu.gpu.spirv``.
"""

from __future__ import annotations

from ..lgk.emit import Emitter
from ..lgk.nodes import Assign, Binary, Call, Conv, Index, Stmt
from ..lgk.types import Ty
from ._markers import GLSL_NO_CONTRACTION

__all__ = ["NO_CONTRACTION", "GLSLEmitter"]

#: the comment of a source whose multiply-adds are as written (``fma`` or not; ``_markers``)
NO_CONTRACTION = GLSL_NO_CONTRACTION

_SCALAR = {"f32": "float", "f16": "float16_t", "i32": "int", "u32": "uint", "bool": "bool"}
_VEC_PREFIX = {"f32": "vec", "f16": "f16vec", "i32": "ivec", "u32": "uvec", "bool": "bvec"}
_CMP = {"<": "lessThan", "<=": "lessThanEqual", ">": "greaterThan", ">=": "greaterThanEqual",
        "==": "equal", "!=": "notEqual"}


class GLSLEmitter(Emitter):
    dialect = "glsl"
    storage_only_half = True
    index_builtins = {"gid": "int(gl_GlobalInvocationID.{xyz})", "lid": "int(gl_LocalInvocationID.{xyz})",
                      "wgid": "int(gl_WorkGroupID.{xyz})"}
    barrier = "memoryBarrierShared(); barrier()"
    function_names = {"rsqrt": "inversesqrt", "atan2": "atan"}

    def ty(self, t: Ty) -> str:
        if t.kind == "void":
            return "void"
        return _SCALAR[t.kind] if t.n == 1 else f"{_VEC_PREFIX[t.kind]}{t.n}"

    def float_lit(self, v: float, kind: str) -> str:
        s = self.fmt_float(v)
        return f"float16_t({s})" if kind == "f16" else s

    def cast(self, s: str, src: Ty, dst: Ty) -> str:
        if src == dst:
            return s
        return f"{self.ty(dst)}({s})"

    def conv(self, e: Conv) -> str:
        return self.cast(self.expr(e.e), e.e.ty, e.ty)

    def ctor(self, e: Call) -> str:
        return f"{self.ty(e.ty)}({self.args(e)})"

    def index(self, e: Index) -> str:
        b = self.storage_only(e)
        if b is not None:  # a half in memory, a float in the kernel
            return f"{self.ty(Ty('f32', b.elem.n))}({super().index(e)})"
        return super().index(e)

    def simple(self, s: Stmt) -> str:
        if isinstance(s, Assign):
            b = self.storage_only(s.target)
            if b is not None:
                assert isinstance(s.target, Index)
                target = Emitter.index(self, s.target)
                value = self.expr(s.value)
                if s.op != "=":  # read, compute in f32, write back
                    value = f"{self.index(s.target)} {s.op[0]} ({value})"
                return f"{target} = {self.ty(b.elem)}({value})"
        return super().simple(s)

    def binary(self, e: Binary) -> str:
        if e.op in _CMP and e.ty.n > 1:
            return f"{_CMP[e.op]}({self.expr(e.l)}, {self.expr(e.r)})"
        return super().binary(e)

    def builtin(self, e: Call) -> str:
        f, a = e.fn, e.args
        if f == "select" and a[2].ty.n > 1:
            fv, tv, c = a
            return f"mix({self.expr(fv)}, {self.expr(tv)}, {self.expr(c)})"
        return super().builtin(e)

    def render(self) -> str:
        k = self.k
        out = ["#version 450"] + ([NO_CONTRACTION] if self.no_contraction else [])
        if self.uses_f16 and self.half_math:
            out += ["#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require",
                    "#extension GL_EXT_shader_16bit_storage : require"]
        elif self.f16_storage:  # storage-only half: 16-bit buffers, no 16-bit arithmetic
            out.append("#extension GL_EXT_shader_16bit_storage : require")
        out.append("layout(local_size_x = {}, local_size_y = {}, local_size_z = {}) in;".format(*self.wg))
        for i, b in enumerate(k.buffers):
            q = {"read": "readonly ", "write": "writeonly ", "read_write": ""}[b.access]
            out.append(f"layout(std430, set = 0, binding = {i}) restrict {q}buffer Buf{i} "
                       f"{{ {self.ty(b.elem)} {b.name}[]; }};")
        if k.params:
            members = " ".join(f"{self.ty(p.ty)} {p.name};" for p in k.params)
            out.append(f"layout(std140, set = 0, binding = {len(k.buffers)}) uniform Params {{ {members} }};")
        for s in k.shared:
            out.append(f"shared {self.ty(s.ty)} {s.name}[{s.size}];")
        out.append("")
        for f in self.funcs:
            ps = ", ".join(f"{self.ty(t)} {n}" for n, t in f.params)
            out += self.func(f, f"{self.ty(f.ret)} {f.name}({ps})")
        out.append("void main() {")
        out += self.block(k.body, 1)
        out.append("}")
        return "\n".join(out) + "\n"
