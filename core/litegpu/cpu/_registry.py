"""The CPU kernel contract and registry.

A CPU kernel is registered for an op name (builtin name such as ``"CONV_2D"``
or a custom code such as ``"Convolution2DTransposeBias"``), a set of dtypes
(the dtype of the node's *first* input, or of its first output when it has no
inputs) and a range of op versions.  Registration is a decorator on a
*prepare* function::

    @register_kernel("ADD", dtypes=FLOAT, versions=range(1, 6))
    def add(ctx: NodeContext) -> Prepared:
        ...validate, precompute...
        def run(inputs): return [a + b]
        return Prepared(output_shapes=[shape], run=run)

``prepare`` runs once, at ``allocate_tensors``: it validates the node (raise
:class:`litegpu.ModelError` with a clear message), precomputes whatever does
not depend on runtime values (transposed weights, index arrays, fixed-point
multipliers) and returns a :class:`Prepared`.  ``run`` is the per-invoke hot
path: it receives numpy arrays (``None`` for omitted optional inputs) and
returns one array per output, of the node's output dtype.  Constant inputs are
available both in ``ctx.inputs[i].data`` (at prepare) and in ``run``'s inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._errors import UnsupportedOpError
from .._ir import Operator, Quantization, Sparsity

__all__ = [
    "TensorSpec",
    "NodeContext",
    "Prepared",
    "KernelRegistry",
    "CPU_KERNELS",
    "register_kernel",
    "FLOAT",
    "INTEGER",
    "QUANTIZED",
    "ALL_NUMERIC",
]

FLOAT = ("float32",)
QUANTIZED = ("int8", "uint8", "int16")
INTEGER = ("int32", "int64", "int16", "int8", "uint8")
ALL_NUMERIC = ("float32", "float16", "float64", "int8", "uint8", "int16", "int32", "int64", "uint32", "uint16", "uint64", "bool")


@dataclass
class TensorSpec:
    """What prepare knows about a tensor: its static description.

    ``shape`` is the current (possibly resized) shape; entries are concrete at
    prepare time except for tensors whose shape is only known at run time,
    which have ``shape=None``.  ``data`` is the constant value, or None.
    """

    index: int
    name: str
    dtype: str
    shape: tuple[int, ...] | None
    quantization: Quantization | None = None
    data: np.ndarray | None = None
    is_variable: bool = False
    sparsity: Sparsity | None = None  # for sparse constants: ``data`` holds the stored values only

    @property
    def is_constant(self) -> bool:
        return self.data is not None


@dataclass
class NodeContext:
    """Everything a kernel's prepare step may look at.

    ``inputs`` has ``None`` for omitted optional inputs (index -1).
    ``call_subgraph(index, arrays)`` runs another subgraph of the model with the
    given input arrays and returns its output arrays (control flow ops).
    ``subgraph_ops(index)`` names the ops of another subgraph (for bodies read, not run).
    ``resources`` is the interpreter's per-instance dict for resource variables
    and CALL_ONCE state; ``reset_hooks`` collects callables that
    ``reset_all_variables`` runs.
    """

    op: Operator
    inputs: list[TensorSpec | None]
    outputs: list[TensorSpec]
    num_threads: int = 1
    call_subgraph: Callable[[int, Sequence[np.ndarray]], list[np.ndarray]] | None = None
    subgraph_io: Callable[[int], tuple[list[TensorSpec], list[TensorSpec]]] | None = None
    subgraph_ops: Callable[[int], tuple[str, ...]] | None = None
    resources: dict[Any, Any] = field(default_factory=dict)
    reset_hooks: list[Callable[[], None]] = field(default_factory=list)
    #: the node's intermediate tensors (the quantization of an integer LSTM's gate outputs)
    intermediates: list[TensorSpec] = field(default_factory=list)

    @property
    def options(self) -> Mapping[str, Any]:
        return self.op.options

    def fail(self, message: str) -> UnsupportedOpError:
        """An error naming this node: ``raise ctx.fail("...")``."""
        return UnsupportedOpError(
            f"node #{self.op.index} {self.op.name} v{self.op.version}: {message}"
        )


@dataclass
class Prepared:
    """A prepared node.

    ``output_shapes[i]`` is the shape of output i when it is known at prepare
    time, or None when it depends on runtime values (dynamic).  ``run`` maps
    the input arrays to the output arrays.  ``fresh`` and ``inplace`` let the
    interpreter run a node in the buffer of a dead input (see the fields).
    """

    output_shapes: list[tuple[int, ...] | None]
    run: Callable[[list[np.ndarray | None]], list[np.ndarray]]
    # Optional speed hooks (the interpreter works without them):
    # ``fresh``: every output ``run`` returns is a new array that nothing else references
    # (no view of an input, no cached or constant array), so a consumer may overwrite it.
    fresh: bool = False
    # ``inplace[i]``: a variant of ``run`` that may write its output into input ``i`` (same
    # shape and dtype as the output).  The interpreter uses it only when that input is a
    # fresh array read by no later step.
    inplace: Mapping[int, Callable[[list[np.ndarray | None]], list[np.ndarray]]] | None = None


PrepareFn = Callable[[NodeContext], Prepared]


@dataclass(frozen=True)
class _Entry:
    op: str
    dtypes: frozenset[str]
    versions: range
    prepare: PrepareFn


class KernelRegistry:
    """Kernels keyed by (op name, dtype, version).

    Later registrations win over earlier ones for the same key, so a plugin or
    an application can replace a built-in kernel.
    """

    def __init__(self) -> None:
        self._entries: dict[str, list[_Entry]] = {}

    def register(
        self,
        op: str,
        prepare: PrepareFn,
        *,
        dtypes: Iterable[str] | None = None,
        versions: Iterable[int] | range | None = None,
    ) -> None:
        rng = versions if isinstance(versions, range) else (
            range(1, 1000) if versions is None else range(min(versions), max(versions) + 1)
        )
        ds = frozenset(dtypes) if dtypes is not None else frozenset({"*"})
        self._entries.setdefault(op, []).append(_Entry(op, ds, rng, prepare))

    def lookup(self, op: str, dtype: str, version: int) -> PrepareFn | None:
        for e in reversed(self._entries.get(op, ())):
            if (dtype in e.dtypes or "*" in e.dtypes) and version in e.versions:
                return e.prepare
        return None

    def lookup_next(self, op: str, dtype: str, version: int, after: PrepareFn) -> PrepareFn | None:
        """The kernel ``lookup`` would return if ``after`` (and everything registered later) were absent.

        Lets a kernel that claims a key shared with another kernel hand the nodes it does not
        handle to the one registered before it (e.g. a hybrid int8-weight kernel chaining to the
        float kernel of the same op and dtype).
        """
        entries = self._entries.get(op, ())
        idx = next((i for i in range(len(entries) - 1, -1, -1) if entries[i].prepare is after), None)
        if idx is None:
            return None
        for e in reversed(entries[:idx]):
            if (dtype in e.dtypes or "*" in e.dtypes) and version in e.versions:
                return e.prepare
        return None

    def explain_missing(self, op: str, dtype: str, version: int) -> str:
        """Why lookup failed, in words: unknown op, version or dtype."""
        entries = self._entries.get(op)
        if not entries:
            return f"no CPU kernel for op {op}"
        vers = [e for e in entries if version in e.versions]
        if not vers:
            hi = max(e.versions.stop - 1 for e in entries)
            return f"op {op} version {version} is newer than supported (max {hi})"
        known = sorted({d for e in vers for d in e.dtypes})
        return f"op {op} v{version} has no CPU kernel for dtype {dtype} (supported: {', '.join(known)})"

    def ops(self) -> list[str]:
        return sorted(self._entries)

    def entries(self) -> list[tuple[str, tuple[str, ...], range]]:
        """(op, dtypes, versions) for every registration, for support matrices."""
        out = []
        for op in sorted(self._entries):
            for e in self._entries[op]:
                out.append((op, tuple(sorted(e.dtypes)), e.versions))
        return out

    def decorator(
        self, op: str, *, dtypes: Iterable[str] | None = None, versions: Iterable[int] | range | None = None
    ) -> Callable[[PrepareFn], PrepareFn]:
        def deco(fn: PrepareFn) -> PrepareFn:
            self.register(op, fn, dtypes=dtypes, versions=versions)
            return fn

        return deco


CPU_KERNELS = KernelRegistry()


def register_kernel(
    op: str, *, dtypes: Iterable[str] | None = None, versions: Iterable[int] | range | None = None
) -> Callable[[PrepareFn], PrepareFn]:
    """Register a CPU kernel prepare function for ``op`` (public API for custom ops)."""
    return CPU_KERNELS.decorator(op, dtypes=dtypes, versions=versions)


def kernel_dtype(op: Operator, inputs: list[TensorSpec | None], outputs: list[TensorSpec]) -> str:
    """The dtype a node's kernel is looked up by: first present input, else first output."""
    for t in inputs:
        if t is not None:
            return t.dtype
    return outputs[0].dtype if outputs else "float32"
