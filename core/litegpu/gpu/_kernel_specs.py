"""What a kernel spec is: :class:`KernelSpec` (which template file holds a kernel, its options and
representative variants), the option domains the op families share, and the boundary layout kernels.

Each op family (``gpu/ops/<family>.py``) declares the specs of its own kernels next to its lowerings;
``gpu/ops/__init__.py`` assembles them with :data:`LAYOUT_KERNELS` into ``SPECS``, which ``kernels.py``
renders from.  Only names and option domains live in specs; every op's arithmetic is in the templates
(``shaders/``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import field
from typing import Any

from .._records import dataclass  # no compiled methods: a warm start imports this module
from .lgk import KernelTemplateError

__all__ = ["Opt", "KernelSpec", "LAYOUT_KERNELS", "TAIL_OPTIONS", "TAIL_PREFIX", "TAIL_TICKET", "ACTIVATIONS", "FUSED_ACTIVATIONS",
           "ACT", "ACT_NO_PRELU", "QDQ", "CHANNELS", "SPLITS", "SPLIT", "PACK", "UNROLL", "boolean", "spec", "split_wg", "template_text"]


@functools.cache
def template_text(filename: str) -> str:
    """The text of a template file of the ``litegpu.shaders`` package."""
    # pkgutil (the package's loader), not importlib.resources: that import (tempfile, zipfile...)
    # cost every process's start about 10 ms
    import pkgutil

    try:
        data = pkgutil.get_data("litegpu.shaders", filename)
    except FileNotFoundError:
        data = None
    if data is None:
        raise KernelTemplateError(f"kernel template {filename!r} not found in litegpu.shaders")
    return data.decode("utf-8")


def _common_functions(prefix: str) -> tuple[str, ...]:
    """The ``<NAME>`` of every ``fn <prefix><NAME>(`` in ``common.lgk``, in file order: the template
    defines which elementwise ops the ``unary``/``binary`` kernels take, so adding one is one
    function there (and an op table entry), not a list here too."""
    text = template_text("common.lgk")
    return tuple(re.findall(rf"^fn {prefix}(\w+)\(", text, re.M))


# UNARY_OPS: the unary elementwise ops (op_<NAME> in shaders/common.lgk; NONE is a copy).  BINARY_OPS: the
# binary ones (bin_<NAME>).  Read from the template on first use (module __getattr__): the op table
# asks, a warm start (kernels from the serialization cache) does not.
_FROM_COMMON = {"UNARY_OPS": "op_", "BINARY_OPS": "bin_"}


def __getattr__(name: str) -> Any:
    if name in _FROM_COMMON:
        value = globals()[name] = _common_functions(_FROM_COMMON[name])
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# Activations a kernel can fuse without extra inputs.
ACTIVATIONS = ("NONE", "RELU", "RELU6", "RELU_N1_TO_1", "TANH", "LOGISTIC", "HARD_SWISH", "SIGN_BIT")
# ... plus PRELU, which binds a per-channel alpha buffer.
FUSED_ACTIVATIONS = ACTIVATIONS + ("PRELU",)


@dataclass(frozen=True)
class Opt:
    """A template option: its default and allowed values (``many``: a tuple of such values)."""

    default: Any
    choices: tuple[Any, ...] | None = None
    many: bool = False
    check: Callable[[Any], bool] | None = None

    def validate(self, kernel: str, name: str, value: Any) -> Any:
        if self.many:
            if isinstance(value, str) or not hasattr(value, "__iter__"):
                raise KernelTemplateError(f"{kernel}: option {name} takes a sequence")
            value = tuple(value)
            items = value
        else:
            items = (value,)
        for v in items:
            if self.choices is not None and v not in self.choices:
                raise KernelTemplateError(
                    f"{kernel}: option {name}={v!r} not one of {', '.join(map(repr, self.choices))}")
            if self.check is not None and not self.check(v):
                raise KernelTemplateError(f"{kernel}: option {name}={v!r} is out of range")
        return value


@dataclass(frozen=True)
class KernelSpec:
    name: str
    file: str
    entry: str
    doc: str
    options: Mapping[str, Opt] = field(default_factory=dict)
    variants: tuple[Mapping[str, Any], ...] = ({},)
    default_wg: tuple[int, int, int] = (8, 8, 1)
    shared_wg: Callable[[Mapping[str, Any]], tuple[int, int, int] | None] | None = None
    #: a kernel of one work group that can run with another group size: ``regroup(options, params, threads)`` is
    #: its options and params for a group of ``threads`` (the same results), or None where it cannot (a tail
    #: group, :data:`TAIL_OPTIONS`: run by the last group of the launch before it, whose group size it takes)
    regroup: Callable[[Mapping[str, Any], Mapping[str, Any], int],
                      tuple[dict[str, Any], dict[str, Any]] | None] | None = None

    def resolve(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """The kernel's options with defaults filled in; the options every kernel takes (:data:`BRANCH_OPTIONS`)
        are kept only when they ask for more than one branch."""
        unknown = sorted(set(given) - set(self.options) - set(BRANCH_OPTIONS) - set(TAIL_OPTIONS))
        if unknown:
            raise KernelTemplateError(
                f"{self.name}: unknown option(s) {', '.join(unknown)} (has {', '.join(self.options) or 'none'})")
        out = {}
        for k, o in self.options.items():
            out[k] = o.validate(self.name, k, given[k]) if k in given else o.default
        if int(given.get("branches", 1)) > 1:
            for k, o in BRANCH_OPTIONS.items():
                out[k] = o.validate(self.name, k, given.get(k, o.default))
        if given.get("tail"):
            out["tail"] = TAIL_OPTIONS["tail"].validate(self.name, "tail", given["tail"])
        return out

    def fixed_workgroup(self, opts: Mapping[str, Any]) -> tuple[int, int, int] | None:
        """The work-group size baked into the kernel (it uses shared memory, or runs a tail group: the group the
        plan chose for it, :data:`TAIL_OPTIONS`), or None."""
        wg = self.shared_wg(opts) if self.shared_wg else None
        tail = opts.get("tail")
        if wg is None and tail:
            # a kernel whose shared memory is optional (conv2d unsplit: no shared group) still runs its tail in
            # the group the plan chose, which tuning must not change
            wg = tuple(dict(tail)["group"])
        return wg  # type: ignore[return-value]


#: Options of every kernel (``gpu/lgk/branches``): ``branches`` > 1 makes one launch serve that many branches, each
#: with its own data in the buffers named by ``branched`` (``_passes/twins`` merges such launches)
BRANCH_OPTIONS: Mapping[str, Opt] = {
    "branches": Opt(1, check=lambda v: isinstance(v, int) and 1 <= v <= 64),
    "branched": Opt((), many=True, check=lambda v: isinstance(v, str)),
}


#: Option of every kernel (``_passes/tail_group``): ``tail`` = ``{"kernel", "options", "fresh", "group"}`` renders one
#: launch that runs this kernel with work groups of ``group``, then, in the last of its groups to finish, ``kernel``
#: (a one-group kernel, rendered with ``options`` for that group size).  The tail's buffers and params follow this kernel's, named
#: :data:`TAIL_PREFIX` + its own names, then the launch's ticket counter (:data:`TAIL_TICKET`); ``fresh`` names the
#: tail's buffers this kernel writes in the same launch (read through coherent, volatile loads).
TAIL_OPTIONS: Mapping[str, Opt] = {
    "tail": Opt(None, check=lambda v: isinstance(v, (dict, tuple, list)) and bool(v)),
}
TAIL_PREFIX = "tail_"
#: the binding (and the op's constant: one zeroed int32) of a tail launch's ticket counter
TAIL_TICKET = "lgk_ticket"


def stride_param(buffer: str) -> str:
    """The param of a branched launch holding a branched buffer's byte stride between branches."""
    return f"BR_{buffer}"


def boolean() -> Opt:
    """A boolean option, off by default."""
    return Opt(False, (False, True))


def spec(name: str, file: str, doc: str, options: Mapping[str, Opt] | None = None,
         variants: list[Mapping[str, Any]] | None = None, entry: str | None = None, **kw: Any) -> KernelSpec:
    """A :class:`KernelSpec`; ``entry`` (the ``#kernel`` section) defaults to ``name``."""
    return KernelSpec(name, file, entry or name, doc, dict(options or {}), tuple(variants or ({},)), **kw)


# split > 1: a work group of `split` threads cooperates on one output (shared-memory tree reduction)
SPLITS = (1, 4, 8, 16, 32, 64, 128)
SPLIT = Opt(1, SPLITS)


#: pack > 1 (with split > 1): a work group holds ``pack`` outputs' ``split`` threads (along the group's z axis),
#: so that groups of 4-16 threads do not each hold a whole warp (docs/gpu-compiler.md, "Cost model")
PACK = Opt(1, (1, 2, 4, 8, 16))
#: unroll: reduction steps of one loop iteration whose loads are all issued before the first multiply-add
UNROLL = Opt(1, (1, 2, 4, 8))


def split_wg(opts: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """The fixed group of a kernel with the ``split`` option: ``split`` threads share one output (``pack``
    outputs a group, along z, where the kernel has that option)."""
    return (opts["split"], 1, opts.get("pack", 1)) if opts.get("split", 1) > 1 else None


ACT = Opt("NONE", FUSED_ACTIVATIONS)
# qdq: snap the result to a quantized tensor's grid before storing (params Q_SCALE, Q_ZP, Q_MIN, Q_MAX;
# the float view of quantized models, docs/gpu-compiler.md)
QDQ = Opt(False, (False, True))
ACT_NO_PRELU = Opt("NONE", ACTIVATIONS)
# residual_channels (conv2d) / rhs_channels (binary): "fewer" = that operand has fewer channels than the
# output and reads as zero past them (a zero channel PAD merged into the read, _passes/channel_pad.py)
CHANNELS = Opt("same", ("same", "fewer"))

#: the boundary layout kernels the executor adds around a partition (``_runtime``); they compute no op
LAYOUT_KERNELS: tuple[KernelSpec, ...] = (
    spec("bhwc_to_phwc4", "layout.lgk", "BHWC (dense, host order) -> PHWC4",
         {"host": Opt("f32", ("f32", "real"))}, [{"host": "f32"}, {"host": "real"}]),
    spec("phwc4_to_bhwc", "layout.lgk", "PHWC4 -> BHWC (dense, host order)",
         {"host": Opt("f32", ("f32", "real"))}, [{"host": "f32"}, {"host": "real"}]),
)
