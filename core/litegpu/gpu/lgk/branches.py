"""``branch_kernel``: one launch of a kernel serving several *branches* (option ``branches``).

Several launches of one kernel with the same options and params, each on its own tensors and weights
(``_passes/twins``: iris_landmark's two output branches), become one launch whose grid is the kernel's
grid repeated ``branches`` times along z.  The kernel body is not edited: this transform rewrites the
parsed program, before :func:`~litegpu.gpu.lgk.check.check`, so that

* the launch's z size is ``GZP * branches``, with ``GZP`` the kernel's own z size rounded up to whole work
  groups (so that no work group straddles two branches: the kernels' shared memory and barriers stay
  within one branch), and ``lgk_branch = gid(2) / GZP`` is the branch a work item serves;
* ``gid(2)`` and ``wgid(2)`` read as the kernel sees them in a launch of its own (``gid(2) - lgk_branch *
  GZP``): every index the body computes, its bounds checks and its early returns are the unbranched ones;
* every access ``buf[i]`` of a buffer named in ``branched`` reads ``buf[i + lgk_branch * BR_buf / E]``:
  param ``BR_buf`` is the byte distance between two branches' data in the bound range (0 never occurs:
  buffers the branches share are simply not named), ``E`` the buffer's element size.  The runtime binds
  such a buffer over all the branches' data (``_runtime``: the plan's tensor groups, stacked constants).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from .._kernel_specs import stride_param
from .nodes import Binary, Call, Decl, Expr, Index, Name, Num, Param, Program, transform
from .types import I32, KernelTemplateError

__all__ = ["branch_kernel", "BRANCH_VAR"]

#: the kernel-local names the transform declares (no template uses the ``lgk_`` prefix)
BRANCH_VAR = "lgk_branch"
_GZP = "lgk_gzp"

_ELEM_BYTES = {"f32": 4, "f16": 2, "i32": 4, "u32": 4}


def branch_kernel(prog: Program, kernel: str, branches: int, buffers: Sequence[str],
                  workgroup: tuple[int, int, int]) -> None:
    """Rewrite ``kernel`` of ``prog`` in place to serve ``branches`` branches (see the module doc); ``buffers``
    are the buffers whose data differs per branch, ``workgroup`` the group size the kernel is rendered with."""
    if branches <= 1:
        return
    k = prog.kernels[kernel]
    elem = {b.name: b.elem for b in k.buffers}
    unknown = sorted(set(buffers) - set(elem))
    if unknown:
        raise KernelTemplateError(f"kernel {kernel}: branched buffer(s) {', '.join(unknown)} not among its "
                                  f"bindings ({', '.join(elem)})")
    if not buffers:
        raise KernelTemplateError(f"kernel {kernel}: branches={branches} with no branched buffer")
    wz = int(workgroup[2])
    line = k.line

    def num(v: int) -> Num:
        return Num(v, False, line=line)

    def gzp_expr() -> Expr:
        return Binary("*", Binary("/", Binary("+", copy.deepcopy(k.grid[2]), num(wz - 1), line=line), num(wz),
                                  line=line), num(wz), line=line)

    branched = set(buffers)

    def rewrite(e):
        """The branch's view of gid(2) / wgid(2) and its offset into every branched buffer."""
        if isinstance(e, Call) and e.fn in ("gid", "wgid") and len(e.args) == 1 and isinstance(e.args[0], Num) \
                and int(e.args[0].value) == 2:
            per = Name(_GZP, line=e.line) if e.fn == "gid" else Binary("/", Name(_GZP, line=e.line), num(wz))
            return Binary("-", e, Binary("*", Name(BRANCH_VAR, line=e.line), per, line=e.line), line=e.line)
        if isinstance(e, Index) and isinstance(e.base, Name) and e.base.id in branched:
            ty = elem[e.base.id]
            off = Binary("*", Name(BRANCH_VAR, line=e.line),
                         Binary("/", Name(stride_param(e.base.id), line=e.line), num(_ELEM_BYTES[ty.kind] * ty.n)),
                         line=e.line)
            e.idx = Binary("+", e.idx, off, line=e.line)
        return e

    transform(k.body, rewrite)
    k.body.stmts[:0] = [
        Decl(_GZP, I32, gzp_expr(), False, line=line),
        Decl(BRANCH_VAR, I32, Binary("/", Call("gid", [num(2)], line=line), Name(_GZP, line=line), line=line), False,
             line=line),
    ]
    k.grid[2] = Binary("*", gzp_expr(), num(branches), line=line)
    k.params = [*k.params, *(Param(stride_param(b.name), I32) for b in k.buffers if b.name in branched)]
