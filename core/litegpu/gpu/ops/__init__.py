"""The GPU op table: one entry per op the GPU path knows, assembled from the op family modules.

Each family module (``conv``, ``matmul``, ``reduce``, ``elementwise``, ``movement``, ``resize``,
``lstm``, ``hybrid``, ``squeeze_excite``, ``folded``; modelled on TFLite GPU's one file per op family under
``delegates/gpu/common/tasks/``) holds, for its ops, everything the GPU path knows about them:

* ``OPS``: one :class:`~._entry.GpuOpEntry` per op: the kernel it renders, its lowering and support
  check (functions of the same module), its constant parameter inputs, the options it cannot do
  without, how it fuses (``fuses="activation"``: an activation the fusion pass folds into its
  producer's epilogue; ``fuses="elementwise"``: a binary op a convolution-like producer may take as a
  residual; ``act``: a kernel's ``act`` slot computes it; ``chain``: a ``binary`` kernel's unary
  ``chain`` computes it) and ``ref``, its numpy meaning on the GPU graph (``gpu/_reference_ops.py``; the
  evaluator ``_reference.evaluate`` that the compiler tests compare with LiteRT calls it);
* ``KERNELS``: the :class:`~.._kernel_specs.KernelSpec` of each kernel its lowerings render: the
  ``#kernel`` section of a template in ``core/litegpu/shaders/``, its options and variants.

Derived here, and nowhere else: :data:`OPS`, :data:`SPECS` (what ``kernels.render`` renders, with the
boundary layout kernels), :data:`SUPPORTED_OPS` (what ``supports`` in ``gpu/_runtime.py`` may accept,
and the GPU columns of docs/support-matrix.md), :data:`PARAM_INPUTS`, the fusion sets the passes read
(:data:`ACTIVATIONS_FUSABLE`, :data:`ELEMENTWISE_FUSABLE`) and the epilogue slots' domains in
``_capabilities`` (:data:`ACT_OPS`, :data:`CHAIN_OPS`, :func:`kernel_of`).

Adding a GPU op: one entry in its family module (reusing a check, lowering and ``ref`` or adding them
there) and, if no template computes it yet, the template section and its spec in ``KERNELS``
(docs/gpu-compiler.md shows one worked example).  A new family is one more module listed in
``_FAMILIES``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from .._cost import use_specs
from .._kernel_specs import LAYOUT_KERNELS, KernelSpec
from . import conv, elementwise, folded, hybrid, lstm, matmul, movement, reduce, resize, squeeze_excite
from ._entry import GpuOpEntry, Lowerer

__all__ = ["GpuOpEntry", "Lowerer", "OPS", "SPECS", "SUPPORTED_OPS", "PARAM_INPUTS", "ACTIVATIONS_FUSABLE",
           "ELEMENTWISE_FUSABLE", "ACT_OPS", "CHAIN_OPS", "kernel_of"]

_FAMILIES = (conv, matmul, reduce, elementwise, movement, resize, lstm, hybrid, squeeze_excite, folded)


def _assemble() -> tuple[dict[str, GpuOpEntry], dict[str, KernelSpec]]:
    ops: dict[str, GpuOpEntry] = {}
    specs: dict[str, KernelSpec] = {s.name: s for s in LAYOUT_KERNELS}
    for family in _FAMILIES:
        for op, entry in family.OPS.items():
            if op in ops:  # two families claiming one op: a programming error, caught at import
                raise RuntimeError(f"GPU op {op} has entries in two op families ({family.__name__})")
            ops[op] = entry
        for s in family.KERNELS:
            if s.name in specs:
                raise RuntimeError(f"kernel {s.name} is declared twice ({family.__name__})")
            specs[s.name] = s
    return ops, specs


_OPS, _SPECS = _assemble()

#: op name (builtin or custom code) -> its entry
OPS: Mapping[str, GpuOpEntry] = MappingProxyType(_OPS)
#: kernel name -> its spec (every template section ``kernels.render`` may render)
SPECS: Mapping[str, KernelSpec] = MappingProxyType(_SPECS)
use_specs(SPECS)  # the cost model prices a launch's left-out options at these defaults (_cost.launch_options)

#: every op name (builtin or custom code) ``supports`` may accept
SUPPORTED_OPS = frozenset(op for op, e in OPS.items() if e.claimed)
#: ops whose listed inputs are parameters that must be constant: op -> {input index: what it is}
PARAM_INPUTS: Mapping[str, Mapping[int, str]] = MappingProxyType({op: e.params for op, e in OPS.items() if e.params})
#: unary activations the fusion pass folds into their producer's epilogue
ACTIVATIONS_FUSABLE = frozenset(op for op, e in OPS.items() if e.fuses == "activation")
#: binary ops that can become an epilogue step of a convolution-like node
ELEMENTWISE_FUSABLE = frozenset(op for op, e in OPS.items() if e.fuses == "elementwise")
#: activations a kernel's ``act`` slot takes (PRELU, which needs its alpha, aside)
ACT_OPS = frozenset(op for op, e in OPS.items() if e.act)
#: unary ops a ``binary`` kernel's ``chain`` takes
CHAIN_OPS = frozenset(op for op, e in OPS.items() if e.chain)


def kernel_of(op: str) -> str | None:
    """The template kernel computing ``op``, or None."""
    e = OPS.get(op)
    return e.kernel if e is not None else None
