"""OpenCL C 1.2 emitter for the neutral kernel language.

Buffers are ``__global`` pointer arguments in binding order, followed by the params as scalar
arguments (``int``/``float``) in declaration order.  Vector booleans are ``intN`` (-1 = true),
the convention of OpenCL's vector comparisons.

fp16 variants normally compute in ``half`` and need ``cl_khr_fp16``.  The storage-only half variant
(``render(..., half_math=False)``, for devices without the extension: NVIDIA's driver, PoCL) keeps
the 16-bit buffers but computes in ``float``: f16 buffers are ``__global half*`` (declaring a half
pointer needs no extension, dereferencing one does), read with ``vload_half``/``vload_halfN`` and
written with ``vstore_half_rte``/``vstore_halfN_rte`` (core OpenCL 1.0 built-ins; round to nearest
even, as a real half store does).

``render(..., base_pointer="args")`` renders the buffers as one allocation and a ``ulong`` byte offset per buffer
(in binding order, before the params); ``base_pointer="buffer"`` reads the offsets (``uint``) and the params (in
binding and declaration order, a float as its bits) from a ``__global const int*`` argument buffer instead, so a
launch names three memory objects and no scalar (about 0.04 us of NVIDIA's host time each, bench/cl_launch.py).  The allocation comes twice: ``__global uchar* restrict`` for the buffers
the kernel writes, ``__global const uchar* restrict`` for those it only reads (a launch never writes the bytes it
reads, so the two views of one allocation never touch the same bytes, the promise ``restrict`` makes): NVIDIA's
compiler turns loads into read-only cached ones (``ld.global.nc``) only from a const restrict *kernel* argument;
derived from one writable base, every load was a plain ``ld.global`` (PTX of the 7 models, s13-onebuf-1).  A thin
``__kernel`` derives each buffer's typed pointer and calls the body, a function taking exactly the arguments
the plain kernel takes, with the ``__local`` arrays (which must be declared at kernel scope) passed down.
NVIDIA's driver spends host time on every memory argument a launch names, about 0.4 us each
(bench/cl_launch.py): two instead of one per buffer.  The source's first line says so (``OPENCL_BASE_POINTER``),
for the backend's binding.
"""

from __future__ import annotations

from typing import Any

from .._kernel_specs import TAIL_PREFIX, TAIL_TICKET
from ..lgk.emit import Emitter
from ..lgk.nodes import Assign, Binary, Call, Conv, Index, Num, Stmt
from ..lgk.types import KernelTemplateError, Ty
from ._markers import OPENCL_ARGUMENT_BUFFER, OPENCL_BASE_POINTER, OPENCL_NO_CONTRACTION

__all__ = ["NO_CONTRACTION", "OpenCLEmitter"]

#: the pragma of a source whose multiply-adds are as written, ``fma`` or not (the backend then builds
#: it without ``-cl-mad-enable``): ``litegpu.gpu.lgk.emit.MULTIPLY_ADD``
NO_CONTRACTION = OPENCL_NO_CONTRACTION
_SCALAR = {"f32": "float", "f16": "half", "i32": "int", "u32": "uint", "bool": "bool"}


class OpenCLEmitter(Emitter):
    dialect = "opencl"
    index_builtins = {"gid": "((int)get_global_id({axis}))", "lid": "((int)get_local_id({axis}))",
                      "wgid": "((int)get_group_id({axis}))"}
    barrier = "barrier(CLK_LOCAL_MEM_FENCE)"
    storage_only_half = True
    tail_group = True

    def __init__(self, *args: Any, base_pointer: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: the buffers as one base pointer and byte offsets (the module's docstring)
        self.base_pointer = base_pointer
        #: the tail group's emitter and the tail's buffers this kernel writes (:meth:`add_tail`)
        self.tail: OpenCLEmitter | None = None
        self.fresh: tuple[str, ...] = ()

    def add_tail(self, tail: OpenCLEmitter, fresh: tuple[str, ...]) -> None:
        """Render a tail group after this kernel (``_passes/tail_group``): ``tail`` (an emitter of the one-group
        kernel, rendered for this kernel's group size) runs in the launch's last group to finish; ``fresh`` are
        its buffers this kernel writes.  The tail sees the group as its one group: ``lid(0)`` and ``gid(0)`` are
        the flat local id, every other index 0."""
        tail.index_builtins = {"gid": "lgk_tail_{xyz}", "lid": "lgk_tail_{xyz}", "wgid": "0"}
        self.tail, self.fresh = tail, fresh

    def ty(self, t: Ty) -> str:
        if t.n == 1:
            return _SCALAR[t.kind]
        if t.kind == "bool":
            return f"int{t.n}"
        return f"{_SCALAR[t.kind]}{t.n}"

    def float_lit(self, v: float, kind: str) -> str:
        s = self.fmt_float(v) + "f"
        return f"((half){s})" if kind == "f16" else s

    def cast(self, s: str, src: Ty, dst: Ty) -> str:
        """Convert expression text ``s`` from ``src`` to ``dst`` (same width, or splat from scalar)."""
        if src.n == dst.n:
            if src.kind == dst.kind:
                return s
            if dst.n == 1:
                return f"(({self.ty(dst)})({s}))"
            if src.kind == "bool":  # intN of -1/0
                one, zero = (f"({self.ty(dst)})({self.one(dst.kind)})", f"({self.ty(dst)})({self.zero(dst.kind)})")
                return f"select({zero}, {one}, {self._mask(s, dst)})"
            return f"convert_{self.ty(dst)}({s})"
        # splat
        inner = self.cast(s, src, dst.scalar)
        return f"(({self.ty(dst)})({inner}))"

    def one(self, kind: str) -> str:
        return "1.0f" if kind in ("f32", "f16") else "1"

    def zero(self, kind: str) -> str:
        return "0.0f" if kind in ("f32", "f16") else "0"

    def _mask(self, s: str, elem: Ty) -> str:
        """A bool vector (intN) as the select mask OpenCL needs for ``elem`` vectors."""
        if elem.kind == "f16":
            return f"convert_short{elem.n}({s})"
        return s

    def conv(self, e: Conv) -> str:
        return self.cast(self.expr(e.e), e.e.ty, e.ty)

    def ctor(self, e: Call) -> str:
        t = e.ty
        if len(e.args) == 1:
            a = e.args[0]
            if t.kind == "bool":
                if a.ty.n != 1:
                    raise NotImplementedError("bool vector constructor from a vector")
                return f"(({self.expr(a)}) != 0)" if t.n == 1 else f"(({self.ty(t)})(-(int)(({self.expr(a)}) != 0)))"
            return self.cast(self.expr(a), a.ty, t)
        parts = [self.cast(self.expr(a), a.ty, Ty(t.kind, a.ty.n)) for a in e.args]
        return f"(({self.ty(t)})({', '.join(parts)}))"

    def binary(self, e: Binary) -> str:
        s = super().binary(e)
        if e.ty.kind == "bool" and e.ty.n > 1 and e.l.ty.kind == "f16":
            return f"convert_int{e.ty.n}({s})"
        return s

    @staticmethod
    def _width(t: Ty) -> str:
        return "" if t.n == 1 else str(t.n)

    def simple(self, s: Stmt) -> str:
        if isinstance(s, Assign):
            b = self.storage_only(s.target)
            if b is not None:
                if s.op != "=":
                    raise KernelTemplateError(f"line {s.line}: '{s.op}' on the half buffer {b.name!r} "
                                              "(storage-only half variant): write '='")
                assert isinstance(s.target, Index)
                return (f"vstore_half{self._width(b.elem)}_rte({self.expr(s.value)}, "
                        f"{self.expr(s.target.idx)}, {b.name})")
        return super().simple(s)

    def index(self, e: Index) -> str:
        b = self.storage_only(e)
        if b is not None:  # a half in memory, a float in the kernel
            return f"vload_half{self._width(b.elem)}({self.expr(e.idx)}, {b.name})"
        if e.kind != "lane":
            return super().index(e)
        if isinstance(e.idx, Num):
            return f"{self.sub(e.base)}.s{int(e.idx.value)}"
        v, i = self.sub(e.base), self.sub(e.idx)
        n = e.base.ty.n
        chain = f"{v}.s{n - 1}"
        for k in range(n - 2, -1, -1):
            chain = f"({i} == {k} ? {v}.s{k} : {chain})"
        return chain

    def builtin(self, e: Call) -> str:
        f, a = e.fn, e.args
        if f == "abs":
            if a[0].ty.is_float:
                return f"fabs({self.expr(a[0])})"
            return self.cast(f"abs({self.expr(a[0])})", Ty("u32", a[0].ty.n), a[0].ty)
        if f == "select" and a[2].ty.n > 1:
            fv, tv, c = a
            return f"select({self.expr(fv)}, {self.expr(tv)}, {self._mask(self.expr(c), e.ty)})"
        return super().builtin(e)

    def _pointers(self) -> list[str]:
        """Each buffer's pointer type, in binding order."""
        pointers = []
        for b in self.k.buffers:
            const = "const " if b.access == "read" else ""
            # storage-only half: vload_halfN/vstore_halfN take a scalar half pointer
            elem = b.elem.scalar if b.elem.kind == "f16" and not self.half_math else b.elem
            pointers.append(f"__global {const}{self.ty(elem)}*")
        return pointers

    @staticmethod
    def _signature(head: str, args: list[str]) -> list[str]:
        """A function's first lines: ``head(``, its arguments one a line, the opening brace."""
        return [f"{head}(", ",\n".join("    " + a for a in args) + ") {"]

    def _body(self, name: str, buffers: list[str], prologue: tuple[str, ...] | list[str] = ()) -> list[str]:
        """``void name(...)``: the kernel's body as a function of its buffers (``buffers``: typed and named), its
        params and its ``__local`` arrays (declared by the ``__kernel`` that calls it), ``prologue`` first."""
        k = self.k
        args = [*buffers, *(f"const {self.ty(p.ty)} {p.name}" for p in k.params),
                *(f"__local {self.ty(s.ty)}* {s.name}" for s in k.shared)]
        return [*self._signature(f"void {name}", args), *prologue, *self.block(k.body, 1), "}", ""]

    def _wrapper(self, pointers: list[str], names: list[str], from_read: list[bool],
                 params: list[tuple[str, Ty]]) -> tuple[list[str], list[str], list[str]]:
        """The ``__kernel``'s arguments for the buffers ``names`` (of types ``pointers``) and the ``params`` (name,
        type), with each buffer's pointer and each param's value as the ``__kernel`` passes them to a body.  With a
        base pointer (the module's docstring) a buffer is an offset into the allocation's read-only view where
        ``from_read`` says so, into its writable view otherwise; without one, the arguments are passed as they come."""
        typed = [f"const {self.ty(ty)} {n}" for n, ty in params]
        if not self.base_pointer:
            return [*(f"{p} {n}" for p, n in zip(pointers, names, strict=True)), *typed], list(names), \
                [n for n, _ in params]
        # the allocation twice: the buffers the kernel only reads come from a ``const restrict`` kernel argument,
        # the one fact NVIDIA's compiler reads its read-only cached loads (``ld.global.nc``) from (a pointer
        # derived from a written argument, restrict parameters of the inlined body or not, gets plain loads)
        views = ["__global uchar* restrict lgk_base", "__global const uchar* restrict lgk_read"]
        if self.base_pointer == "buffer":  # the offsets, then the params, from the argument buffer
            wrapper = [*views, "__global const int* restrict lgk_args"]
            at = [f"(uint)lgk_args[{i}]" for i in range(len(names))]
            values = []
            for i, (n, ty) in enumerate(params, start=len(names)):
                if ty.kind not in ("i32", "f32") or ty.n != 1:
                    raise KernelTemplateError(f"param {n}: an argument buffer holds i32 and f32 params only")
                values.append(f"lgk_args[{i}]" if ty.kind == "i32" else f"as_float(lgk_args[{i}])")
        else:
            wrapper = [*views, *(f"const ulong lgk_at_{n}" for n in names), *typed]
            at = [f"lgk_at_{n}" for n in names]
            values = [n for n, _ in params]
        passed = [f"({p})(lgk_{'read' if r else 'base'} + {a})"
                  for p, r, a in zip(pointers, from_read, at, strict=True)]
        return wrapper, passed, values

    def render(self) -> str:
        k = self.k
        out: list[str] = {"": [], "args": [OPENCL_BASE_POINTER], "buffer": [OPENCL_ARGUMENT_BUFFER]}[self.base_pointer]
        if self.no_contraction:
            out.append(NO_CONTRACTION)
        if self.uses_f16 and self.half_math:
            out += ["#pragma OPENCL EXTENSION cl_khr_fp16 : enable", ""]
        for f in self.funcs:
            ps = ", ".join(f"{self.ty(t)} {n}" for n, t in f.params)
            out += self.func(f, f"{self.ty(f.ret)} {f.name}({ps})")
        if self.tail is not None:
            return self._render_tail(out)
        pointers = self._pointers()
        attr = ""
        if k.shared:
            attr = " __attribute__((reqd_work_group_size({}, {}, {})))".format(*self.wg)
        shared = [f"__local {self.ty(s.ty)} {s.name}[{s.size}];" for s in k.shared]
        typed = [f"{t} restrict {b.name}" for t, b in zip(pointers, k.buffers, strict=True)]
        if not self.base_pointer:
            out += self._signature(f"__kernel{attr} void {k.name}",
                                   [*typed, *(f"const {self.ty(p.ty)} {p.name}" for p in k.params)])
            out += ["    " + s for s in shared]
            out += self.block(k.body, 1)
            out.append("}")
            return "\n".join(out) + "\n"
        # the body first (C declares a function before its call), then the kernel that derives its pointers
        body = f"{k.name}_body"
        out += self._body(body, typed)
        wrapper, passed, values = self._wrapper(pointers, [b.name for b in k.buffers],
                                                [b.access == "read" for b in k.buffers],
                                                [(p.name, p.ty) for p in k.params])
        out += self._signature(f"__kernel{attr} void {k.name}", wrapper)
        out += ["    " + s for s in shared]
        out.append(f"    {body}({', '.join([*passed, *values, *(s.name for s in k.shared)])});")
        out.append("}")
        return "\n".join(out) + "\n"

    def _render_tail(self, out: list[str]) -> str:
        """The kernel, then its tail group (:meth:`add_tail`), as one ``__kernel``: each body a function of its own
        (an early ``return`` of the first leaves its function, not the launch), then the ticket.  Every work item
        fences its global writes (``LGK_DEVICE_FENCE``: PTX ``membar.gl`` on NVIDIA, ``mem_fence`` elsewhere), the
        group meets at a barrier, and one item takes a ticket from the counter; the group that takes the last one (the number
        of groups - 1) knows every other group's writes are done and visible, runs the tail and sets the counter
        back to 0 for the next launch.  The tail reads what this launch wrote through ``volatile`` pointers
        derived from the writable view: a ``const restrict`` view may become non-coherent cached loads
        (``ld.global.nc`` on NVIDIA), which need not see another group's writes of the same launch."""
        k, t = self.k, self.tail
        assert t is not None
        if t.uses_f16 and self.half_math != t.half_math:
            raise KernelTemplateError(f"kernel {k.name}: its tail {t.k.name} renders in another half mode")
        def text(em: OpenCLEmitter, f: Any) -> list[str]:
            return em.func(f, f"{em.ty(f.ret)} {f.name}({', '.join(f'{em.ty(ty)} {n}' for n, ty in f.params)})")

        have = {f.name: text(self, f) for f in self.funcs}
        for f in t.funcs:  # both templates include common.lgk: its functions once
            mine = text(t, f)
            if f.name not in have:
                out += mine
            elif have[f.name] != mine:
                raise KernelTemplateError(f"kernel {k.name}: its tail {t.k.name} has another function {f.name}")
        bad = sorted(set(self.fresh) - {b.name for b in t.k.buffers if b.access == "read"})
        if bad:
            raise KernelTemplateError(f"kernel {k.name}: fresh tail buffer(s) {', '.join(bad)} are not buffers its "
                                      f"tail {t.k.name} reads")
        mine_p = self._pointers()
        tail_p = [f"volatile {p}" if b.name in self.fresh else p for p, b in zip(t._pointers(), t.k.buffers,
                                                                                  strict=True)]
        # plain arguments (no base pointer): the tail's fresh buffer is another argument for the same bytes as this
        # kernel's output, so no argument may promise ``restrict``
        restrict = " restrict" if self.base_pointer else ""
        typed = [f"{p}{restrict} {b.name}" for p, b in zip(mine_p, k.buffers, strict=True)]
        typed_t = [f"{p}{'' if b.name in self.fresh else ' restrict'} {b.name}"
                   for p, b in zip(tail_p, t.k.buffers, strict=True)]
        out += self._body(f"{k.name}_body", typed)
        out += t._body("lgk_tail_body", typed_t, [
            "    const int lgk_tail_x = (int)(get_local_id(0) + get_local_size(0) * (get_local_id(1) "
            "+ get_local_size(1) * get_local_id(2)));",
            "    const int lgk_tail_y = 0;", "    const int lgk_tail_z = 0;"])
        pre = TAIL_PREFIX
        names = [b.name for b in k.buffers] + [pre + b.name for b in t.k.buffers] + [TAIL_TICKET]
        # what the launch writes (and the tail's fresh reads of it) from the writable view, the rest from the read-only one
        from_read = ([b.access == "read" for b in k.buffers]
                     + [b.access == "read" and b.name not in self.fresh for b in t.k.buffers] + [False])
        params = [(p.name, p.ty) for p in k.params] + [(pre + p.name, p.ty) for p in t.k.params]
        wrapper, passed, values = self._wrapper([*mine_p, *tail_p, "volatile __global int*"], names, from_read, params)
        nk, nt = len(k.buffers), len(t.k.buffers)
        pk, ticket = len(k.params), passed[-1]
        shared = [f"__local {self.ty(s.ty)} {s.name}[{s.size}];" for s in k.shared]
        shared += [f"__local {t.ty(s.ty)} {pre}{s.name}[{s.size}];" for s in t.k.shared]
        attr = " __attribute__((reqd_work_group_size({}, {}, {})))".format(*self.wg)
        call_k = ", ".join([*passed[:nk], *values[:pk], *(s.name for s in k.shared)])
        call_t = ", ".join([*passed[nk:nk + nt], *values[pk:], *(pre + s.name for s in t.k.shared)])
        # a device-scope fence: OpenCL C 1.2 has none (its mem_fence orders one work item's accesses; NVIDIA's driver
        # 580 compiles it, and a barrier's global fence, to PTX membar.cta, s14-tail-2), so on NVIDIA the PTX
        # instruction itself (every extension the compiler has defines its macro: cl_nv_pragma_unroll is NVIDIA's)
        out += ["#ifdef cl_nv_pragma_unroll", '#define LGK_DEVICE_FENCE() asm("membar.gl;")', "#else",
                "#define LGK_DEVICE_FENCE() mem_fence(CLK_GLOBAL_MEM_FENCE)", "#endif", ""]
        out += self._signature(f"__kernel{attr} void {k.name}", wrapper)
        out += ["    " + s for s in shared]
        out += [
            "    __local int lgk_last;",
            f"    {k.name}_body({call_k});",
            "    // this item's global writes visible device-wide (release) before its group takes a ticket",
            "    LGK_DEVICE_FENCE();",
            "    barrier(CLK_LOCAL_MEM_FENCE);",
            "    if (get_local_id(0) == 0 && get_local_id(1) == 0 && get_local_id(2) == 0) {",
            f"        volatile __global int* lgk_ticket_at = {ticket};",
            "        lgk_last = atomic_inc(lgk_ticket_at) == (int)(get_num_groups(0) * get_num_groups(1) "
            "* get_num_groups(2)) - 1;",
            "    }",
            "    barrier(CLK_LOCAL_MEM_FENCE);",
            "    if (lgk_last) {  // the same in every item of the group: the tail's barriers are uniform",
            "        LGK_DEVICE_FENCE();  // (acquire) the other groups' writes before the tail's reads",
            f"        lgk_tail_body({call_t});",
            "        if (get_local_id(0) == 0 && get_local_id(1) == 0 && get_local_id(2) == 0) {",
            "            // every group has taken its ticket: set the counter back for the next launch",
            f"            atomic_xchg({ticket}, 0);",
            "        }",
            "    }",
            "}",
        ]
        return "\n".join(out) + "\n"
