"""GPU kernels: backend-neutral templates rendered to OpenCL C, GLSL (Vulkan) and WGSL (WebGPU).

The templates live in the ``litegpu.shaders`` package (``core/litegpu/shaders/``); each is written once
in the neutral kernel language of :mod:`litegpu.gpu.lgk`.  ``render`` turns one into
source for a dialect and precision, and describes how to bind and launch it.  docs/gpu-kernels.md
is the contract (tensor layout, bindings, params, weight layouts) between these kernels and the GPU
compiler core / runtimes.

Typical use by a runtime::

    rk = render("conv2d", "opencl", "fp16", act="RELU", block_w=2)
    gsize = rk.global_size(params)               # params: dict name -> int/float
    rk = render("conv2d", "opencl", "fp16", act="RELU", block_w=2,
                workgroup=default_workgroup("conv2d", gsize, device_info))
    # OpenCL: kernel(queue, rk.launch_size(params), rk.workgroup, *buffers, *rk.cl_args(params))
    # Vulkan/WebGPU: bind buffers at rk.bindings, params as a uniform buffer rk.pack_params(params),
    #                dispatch rk.num_workgroups(params)
"""

from __future__ import annotations

import functools
import math
import re
import struct
from collections.abc import Iterator, Mapping
from dataclasses import field, replace
from typing import TYPE_CHECKING, Any

from .._backend_options import PRECISIONS
from .._records import dataclass  # no compiled methods: a warm start imports this module

if TYPE_CHECKING:
    from ._kernel_specs import ACTIVATIONS, FUSED_ACTIVATIONS, KernelSpec, template_text  # noqa: F401 - re-exported
    from .lgk import KernelTemplateError  # noqa: F401 - re-exported (both: _LAZY, below)
    from .lgk.nodes import Expr

# A warm start imports this module for RenderedKernel and its records, and renders nothing: the kernel
# specs (``_kernel_specs``, which reads common.lgk) and the kernel language (``lgk``: its ``Ty`` is a
# stdlib dataclass) load on first use, as ``_lazy`` below and the functions' own imports do (1.3 ms of
# the caller's CPU in a warm vulkan start on the 2-core CI machine, docs/performance.md, eleventh session).

# The kernel language (parser, checker) and the dialect emitters are imported by the first rendering
# (``_render``, ``_emitters``): a warm start, whose kernels come from the serialization cache, renders
# nothing and does not import them.
DIALECTS = ("opencl", "glsl", "wgsl")


def _emitters() -> dict[str, Any]:
    from ._dialects import EMITTERS

    return EMITTERS


def _specs() -> Mapping[str, KernelSpec]:
    """The kernel specs (``gpu/ops``' ``SPECS``), imported with the op table on first use: a warm start
    binds its kernels from their cached records and needs neither."""
    from .ops import SPECS

    return SPECS


def _template_error(message: str) -> Exception:
    """A KernelTemplateError (``lgk``'s, imported with it on first use)."""
    from .lgk import KernelTemplateError

    return KernelTemplateError(message)


#: names this module re-exports from ``_kernel_specs`` and ``lgk``, imported on first use (above)
_LAZY = {"ACTIVATIONS": "_kernel_specs", "FUSED_ACTIVATIONS": "_kernel_specs", "KernelSpec": "_kernel_specs",
         "template_text": "_kernel_specs", "UNARY_OPS": "_kernel_specs", "BINARY_OPS": "_kernel_specs",
         "KernelTemplateError": "lgk"}


def __getattr__(name: str) -> Any:  # ``kernels.SPECS``, the op table's, loaded on first use (_specs)
    if name == "SPECS":
        return _specs()
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __package__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "DIALECTS",
    "PRECISIONS",
    "Binding",
    "ParamSlot",
    "RenderedKernel",
    "KernelTemplateError",
    "render",
    "list_kernels",
    "kernel_spec",
    "variants",
    "iter_variants",
    "default_workgroup",
    "template_text",
    "ACTIVATIONS",
    "FUSED_ACTIVATIONS",
]

_COMMON = "common.lgk"

#: kernels that sum many elements: always fp32 accumulators (see ``render``)
SUM_KERNELS = frozenset({"pool2d", "reduce", "softmax"})


# ----------------------------------------------------------------------------------------------
# Template loading (the litegpu.shaders package)
# ----------------------------------------------------------------------------------------------


# ``template_text`` (re-exported here) lives in ``_kernel_specs``, which reads common.lgk at import.


# ----------------------------------------------------------------------------------------------
# Rendered kernels
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Binding:
    """One buffer binding: OpenCL argument index / GLSL+WGSL ``binding`` (set/group 0).

    ``elem`` is the element type (``f32``, ``f16x4``, ``i32``...), ``elem_bytes`` its size in a
    storage buffer; ``kind`` is ``storage`` for tensors and ``uniform`` for the params block.
    """

    index: int
    name: str
    kind: str
    access: str
    elem: str
    elem_bytes: int


@dataclass(frozen=True)
class ParamSlot:
    """One runtime param: a 4-byte ``i32``/``f32`` scalar at byte ``offset`` of the params block."""

    name: str
    dtype: str
    offset: int


@dataclass(frozen=True)
class RenderedKernel:
    name: str
    dialect: str
    precision: str
    options: tuple[tuple[str, Any], ...]
    source: str
    entry_point: str
    bindings: tuple[Binding, ...]
    param_layout: tuple[ParamSlot, ...]
    workgroup: tuple[int, int, int]
    features: tuple[str, ...]
    shared_bytes: int
    _grid: tuple[Expr, Expr, Expr] = field(repr=False, compare=False)

    # -- launch geometry
    def global_size(self, params: Mapping[str, Any]) -> tuple[int, int, int]:
        """Work items needed (before rounding up to the work-group size)."""
        from .lgk.check import eval_int_expr

        g = tuple(max(1, eval_int_expr(e, params)) for e in self._grid)
        return g  # type: ignore[return-value]

    def num_workgroups(self, params: Mapping[str, Any]) -> tuple[int, int, int]:
        """Work groups to dispatch (Vulkan ``vkCmdDispatch`` / WebGPU ``dispatchWorkgroups``)."""
        g = self.global_size(params)
        return tuple(-(-g[i] // self.workgroup[i]) for i in range(3))  # type: ignore[return-value]

    def launch_size(self, params: Mapping[str, Any]) -> tuple[int, int, int]:
        """OpenCL global size: ``global_size`` rounded up to a multiple of ``workgroup``."""
        n = self.num_workgroups(params)
        return tuple(n[i] * self.workgroup[i] for i in range(3))  # type: ignore[return-value]

    # -- params
    def _values(self, params: Mapping[str, Any]) -> list[tuple[str, Any]]:
        missing = [p.name for p in self.param_layout if p.name not in params]
        if missing:
            raise _template_error(f"kernel {self.name}: missing params {', '.join(missing)}")
        return [(p.dtype, params[p.name]) for p in self.param_layout]

    def pack_params(self, params: Mapping[str, Any]) -> bytes:
        """The params as a little-endian uniform block, padded to 16 bytes (GLSL std140 / WGSL)."""
        vals = self._values(params)
        data = b"".join(struct.pack("<i" if t == "i32" else "<f", int(v) if t == "i32" else float(v))
                        for t, v in vals)
        return data + b"\0" * (-len(data) % 16)

    def cl_args(self, params: Mapping[str, Any]) -> list[Any]:
        """The params as numpy scalars, in OpenCL argument order (after the buffers)."""
        import numpy as np

        return [np.int32(v) if t == "i32" else np.float32(v) for t, v in self._values(params)]

    @property
    def buffer_bindings(self) -> tuple[Binding, ...]:
        return tuple(b for b in self.bindings if b.kind == "storage")


# ----------------------------------------------------------------------------------------------
# Registry
# ----------------------------------------------------------------------------------------------


def list_kernels() -> list[str]:
    """Names of every kernel template."""
    return sorted(_specs())


def kernel_spec(name: str) -> KernelSpec:
    specs = _specs()
    if name not in specs:
        raise _template_error(f"unknown kernel {name!r} (known: {', '.join(sorted(specs))})")
    return specs[name]


def variants(name: str) -> list[dict[str, Any]]:
    """Representative option sets of a kernel: together they cover every option value."""
    return [dict(v) for v in kernel_spec(name).variants]


def iter_variants() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(kernel, precision, options) for every kernel, precision and representative option set."""
    for name in list_kernels():
        for prec in PRECISIONS:
            for opts in variants(name):
                yield name, prec, opts


def _freeze(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    return v


_ELEM_BYTES = {"f32": 4, "f16": 2, "i32": 4, "u32": 4}


def render(kernel_name: str, dialect: str, precision: str = "fp32", *,
           workgroup: tuple[int, int, int] | None = None, half_math: bool = True,
           buffer_storage: Mapping[str, str] | None = None, base_pointer: str = "",
           **options: Any) -> RenderedKernel:
    """Render one kernel for ``dialect`` (opencl/glsl/wgsl) and ``precision`` (fp32/fp16/fp16_fp32acc).

    ``options`` are the template options of the kernel (see ``kernel_spec(name).options``);
    omitted ones take their defaults; every kernel also takes ``branches`` and ``branched`` (one launch serving
    several branches, ``gpu/lgk/branches``).  ``buffer_storage`` maps buffer names to the element type
    they are stored in (``"float32"``/``"float16"``) where it differs from the precision's: the
    kernel computes as ``precision`` says and converts on every load and store (mixed precision,
    ``docs/gpu-compiler.md`` §6).  ``workgroup`` bakes the local size into GLSL/WGSL (and
    OpenCL when the kernel uses shared memory); by default the kernel's own default is used.  Kernels
    whose shared memory is sized by their group (``split > 1``) keep their fixed group whatever
    ``workgroup`` says: launch with ``rk.workgroup``.

    ``half_math=False`` renders the storage-only half variant of the fp16 precisions (OpenCL and GLSL,
    for devices without ``cl_khr_fp16`` or ``shaderFloat16``): the buffers hold halves exactly as in fp16 (same bindings,
    same host data), but every value the kernel computes with is f32; loads and stores convert
    (``vload_half``/``vstore_half_rte``).  Its ``features`` say ``f16_storage``, not ``f16``.  For
    fp32 the flag changes nothing.

    ``base_pointer`` (OpenCL only): ``"args"`` takes the buffers as one allocation and a byte offset each,
    ``"buffer"`` reads the offsets and params from an argument buffer (``litegpu.gpu._dialects.opencl``); every
    buffer of a launch must then lie in one allocation.  The bindings and params are the same; the backend
    binds by the source's first line (``OPENCL_BASE_POINTER``, ``OPENCL_ARGUMENT_BUFFER``).

    Every kernel also takes ``tail`` (``_kernel_specs.TAIL_OPTIONS``; dialects whose emitter has ``tail_group``): the
    launch then runs a one-group kernel in its last group to finish (``_passes/tail_group``); its bindings and params
    follow the kernel's, prefixed ``tail_``, then the ticket counter's binding.
    """
    if dialect not in DIALECTS:
        raise _template_error(f"unknown dialect {dialect!r} (one of {', '.join(DIALECTS)})")
    if precision not in PRECISIONS:
        raise _template_error(f"unknown precision {precision!r} (one of {', '.join(PRECISIONS)})")
    half_math = bool(half_math) or precision == "fp32"
    if base_pointer not in ("", "args", "buffer"):
        raise _template_error(f"base_pointer {base_pointer!r} is not one of '', 'args', 'buffer'")
    if base_pointer and dialect != "opencl":
        raise _template_error(f"base_pointer={base_pointer!r} is an OpenCL rendering, not one of {dialect}")
    if not half_math and not _emitters()[dialect].storage_only_half:
        raise _template_error(f"half_math=False (storage-only half) is not available for {dialect}")
    spec = kernel_spec(kernel_name)
    if precision == "fp16" and kernel_name in SUM_KERNELS:
        # Sums over many elements overflow fp16 (65504) long before their mean does: a 64x64 average
        # pool of values near 20 is inf in fp16, and inf turns into NaN downstream.  Even in "fp16"
        # (half math) these kernels accumulate in fp32; storage stays fp16, so nothing else changes.
        precision = "fp16_fp32acc"
    opts = spec.resolve(options)
    # a kernel that sizes shared memory by its group (split > 1) keeps its own: rk.workgroup says which
    wg = spec.fixed_workgroup(opts) or workgroup or spec.default_wg
    wg = tuple(int(x) for x in wg)
    if len(wg) != 3 or min(wg) < 1:
        raise _template_error(f"bad work group {wg}")
    kinds = {}
    for b, st in (buffer_storage or {}).items():
        if st not in _STORAGE_KINDS:
            raise _template_error(f"buffer {b!r}: storage {st!r} is not one of {', '.join(_STORAGE_KINDS)}")
        kinds[b] = _STORAGE_KINDS[st]
    from .lgk import emit

    return _render(kernel_name, dialect, precision, _freeze(sorted(opts.items())), wg, half_math,
                   tuple(sorted(kinds.items())), emit.MULTIPLY_ADD, base_pointer)


_STORAGE_KINDS = {"float32": "f32", "float16": "f16"}


@functools.lru_cache(maxsize=1024)
def _render(kernel_name: str, dialect: str, precision: str, frozen: tuple, wg: tuple[int, int, int],
            half_math: bool = True, storage: tuple[tuple[str, str], ...] = (),
            multiply_add: str | None = None, base_pointer: str = "") -> RenderedKernel:
    opts = {k: v for k, v in frozen}
    tail = opts.pop("tail", None)
    k, funcs = _checked(kernel_name, precision, opts, wg, half_math, storage)
    emitter = _emitters()[dialect]
    em = emitter(k, funcs, wg, half_math=half_math, multiply_add=multiply_add,
                 **({"base_pointer": base_pointer} if base_pointer else {}))
    buffers = [(b.name, b.access, b.elem) for b in k.buffers]
    params = list(k.params)
    if tail:  # a tail group (_passes/tail_group): the one-group kernel the launch's last group runs
        from ._kernel_specs import TAIL_PREFIX, TAIL_TICKET
        from .lgk.types import I32

        if not emitter.tail_group:
            raise _template_error(f"kernel {kernel_name}: the {dialect} dialect renders no tail group")
        t = dict(tail)
        tspec = _specs()[t["kernel"]]
        topts = tspec.resolve(dict(t["options"]))
        twg = tspec.fixed_workgroup(topts)
        if twg != (math.prod(wg), 1, 1):
            raise _template_error(f"kernel {kernel_name}: tail {t['kernel']}'s group {twg} is not one of "
                                      f"{math.prod(wg)} threads (the group size of {wg})")
        tk, tfuncs = _checked(t["kernel"], precision, topts, twg, half_math, ())
        em.add_tail(emitter(tk, tfuncs, twg, half_math=half_math, multiply_add=multiply_add,
                            **({"base_pointer": base_pointer} if base_pointer else {})), tuple(t["fresh"]))
        buffers += [(TAIL_PREFIX + b.name, b.access, b.elem) for b in tk.buffers]
        buffers.append((TAIL_TICKET, "read_write", I32))
        params += [replace(p, name=TAIL_PREFIX + p.name) for p in tk.params]
        k = _with_shared(k, tk)
    source = em.render()
    bindings = [Binding(i, name, "storage", access, str(elem), _ELEM_BYTES[elem.kind] * elem.n)
                for i, (name, access, elem) in enumerate(buffers)]
    if params:
        bindings.append(Binding(len(buffers), "params", "uniform", "read", "params", 4 * len(params)))
    layout = tuple(ParamSlot(p.name, p.ty.kind, 4 * i) for i, p in enumerate(params))
    shared = sum(s.size * _ELEM_BYTES[s.ty.kind] * s.ty.n for s in k.shared)
    return RenderedKernel(
        name=kernel_name, dialect=dialect, precision=precision, options=frozen, source=source,
        entry_point="main" if dialect == "glsl" else k.name, bindings=tuple(bindings),
        param_layout=layout, workgroup=wg, features=_features(em),
        shared_bytes=shared, _grid=tuple(k.grid),  # type: ignore[arg-type]
    )


def _with_shared(k: Any, tail: Any) -> Any:
    """``k`` with the shared memory of its tail group added (what the launch's groups hold: both kernels' arrays)."""
    import copy

    out = copy.copy(k)
    out.shared = [*k.shared, *tail.shared]
    return out


def _checked(kernel_name: str, precision: str, opts: Mapping[str, Any], wg: tuple[int, int, int],
             half_math: bool, storage: tuple[tuple[str, str], ...]) -> tuple[Any, list[Any]]:
    """The checked kernel and its functions of template ``kernel_name`` with ``opts`` (resolved) for group ``wg``."""
    from .lgk.check import check, retype_buffers
    from .lgk.parse import parse
    from .lgk.preprocess import preprocess

    spec = _specs()[kernel_name]
    env = dict(opts)
    env.update(_precision_env(precision, half_math))
    env["WG"] = wg
    from ._kernel_specs import template_text

    common = template_text(_COMMON)
    text = common + "\n" + _section(template_text(spec.file), spec.entry, spec.file)
    n_common = common.count("\n") + 1

    def where(line: int) -> str:
        return f"{_COMMON}:{line}" if line <= n_common else f"{spec.file}:{line - n_common}"

    src = preprocess(text, env, name=where)
    prog = parse(src, where, precision, half_math)  # type: ignore[arg-type]
    retype_buffers(prog, spec.entry, dict(storage))
    if opts.get("branches", 1) > 1:  # one launch serving several branches (gpu/lgk/branches)
        from .lgk.branches import branch_kernel

        branch_kernel(prog, spec.entry, opts["branches"], opts["branched"], wg)
    return check(prog, spec.entry, where, precision, half_math)  # type: ignore[arg-type]


def _features(em: Any) -> tuple[str, ...]:
    """``f16``: half arithmetic (and storage); ``f16_storage``: half buffers only, f32 arithmetic."""
    if em.half_math:
        return ("f16",) if em.uses_f16 else ()
    return ("f16_storage",) if em.f16_storage else ()


def _section(text: str, entry: str, filename: str) -> str:
    """The shared head of a template file plus the ``#kernel <entry>`` section (others blanked).

    Each kernel's section is preprocessed only with that kernel's options; blank lines keep the
    line numbers of error messages equal to the file's.
    """
    out, keep, found = [], True, False
    for line in text.split("\n"):
        m = _KERNEL_MARK.match(line)
        if m:
            keep = m.group(1) == entry
            found = found or keep
            out.append("")
        else:
            out.append(line if keep else "")
    if not found:
        raise _template_error(f"{filename}: no '#kernel {entry}' section")
    return "\n".join(out)


_KERNEL_MARK = re.compile(r"^\s*#kernel\s+(\w+)\s*$")


def _precision_env(precision: str, half_math: bool = True) -> dict[str, Any]:
    """Template variables that depend on the precision (ranges of ``real``, clamps).

    ``HALF`` and ``REAL_MAX`` follow the storage (a stored value must fit a half); ``ACC_F32`` and
    ``TANH_CLAMP`` the arithmetic, which the storage-only half variant does in f32.
    """
    half = precision != "fp32"
    return {
        "precision": precision,
        "HALF": half,
        "ACC_F32": precision != "fp16" or not half_math,
        "REAL_MAX": 65504.0 if half else 3.4028234663852886e38,
        "TANH_CLAMP": 5.0 if half and half_math else 9.0,
    }


# ----------------------------------------------------------------------------------------------
# Work-group heuristic
# ----------------------------------------------------------------------------------------------


def default_workgroup(kernel: str, global_size: tuple[int, ...],
                      device_info: Mapping[str, Any] | None = None, **options: Any) -> tuple[int, int, int]:
    """A work-group size for ``kernel`` launched over ``global_size`` work items.

    ``device_info`` (a mapping or an object with these attributes, e.g. ``DeviceInfo``; the
    ``workgroup`` spelling is accepted too) may give ``max_work_group_size`` (default 256), ``max_work_group_dims``
    (per-axis limits, default (256, 256, 64)) and ``preferred_work_group_size`` (the thread count
    to aim for: default 64, a good value for NVIDIA warps x 2 and most mobile GPUs).  Kernels with
    shared memory return their fixed size.  Threads go to the axes with the most remaining work, x
    first, so a group never grows far past the grid.
    """
    spec = kernel_spec(kernel)
    fixed = spec.fixed_workgroup(spec.resolve(options))
    if fixed:
        return fixed
    max_total = int(_info(device_info, ("max_work_group_size", "max_workgroup_size"), 256))
    dims = tuple(_info(device_info, ("max_work_group_dims", "max_workgroup_dims"), (256, 256, 64)))
    target = min(int(_info(device_info, ("preferred_work_group_size", "preferred_workgroup_size"), 64)), max_total)
    g = [max(1, int(x)) for x in (*global_size, 1, 1)][:3]
    wg = [1, 1, 1]
    while math.prod(wg) * 2 <= target:
        best, best_ratio = -1, 1.0
        for d in range(3):
            if wg[d] * 2 > dims[d]:
                continue
            ratio = g[d] / wg[d]
            if ratio > best_ratio + 1e-9:
                best, best_ratio = d, ratio
        if best < 0:
            break
        wg[best] *= 2
    return (wg[0], wg[1], wg[2])


def _info(device_info: Any, names: tuple[str, ...], default: Any) -> Any:
    """A device property from a mapping or an attribute object, under any of ``names``."""
    if device_info is None:
        return default
    for n in names:
        if isinstance(device_info, Mapping):
            if device_info.get(n) is not None:
                return device_info[n]
        elif getattr(device_info, n, None) is not None:
            return getattr(device_info, n)
    return default
