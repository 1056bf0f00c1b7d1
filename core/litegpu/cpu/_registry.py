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
``ctx.invalid("...")``, a :class:`litegpu.ModelError` naming the node, for a malformed
model, or ``ctx.fail("...")``, a :class:`litegpu.UnsupportedOpError`, for what the kernel
does not do), precomputes whatever does not depend on runtime values (transposed
weights, index arrays, fixed-point multipliers) and returns a :class:`Prepared`.
``run`` is the per-invoke hot path: it receives numpy arrays (``None`` for omitted
optional inputs) and returns one array per output, of the node's output dtype.
Constant inputs are available both in ``ctx.inputs[i].data`` (at prepare) and in
``run``'s inputs.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from .._errors import ModelError, UnsupportedOpError
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


_E = TypeVar("_E", bound=ModelError)


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
        """An error naming this node, for what the kernel does not do: ``raise ctx.fail("...")``."""
        return self._named(UnsupportedOpError, message)

    def invalid(self, message: str) -> ModelError:
        """An error naming this node, for a malformed model (a missing operand, a bad option or
        shape, a runtime value out of range): ``raise ctx.invalid("...")``."""
        return self._named(ModelError, message)

    def _named(self, error: type[_E], message: str) -> _E:
        # One form for every kernel error that names its node: the interpreter recognises
        # "node #i NAME vN" at the start of a message to put the node's subgraph in front of it.
        return error(f"{self.op.label}: {message}")


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
    #: the built-in kernel module (``litegpu.cpu.<name>``) whose code registered it; None for a
    #: kernel registered by anyone else (an application, a plugin, a test)
    module: str | None = None


#: ``module`` -> precedence among built-in kernels of one key (see :class:`BuiltinKernels`)
_USER_RANK = 1 << 30


class BuiltinKernels:
    """Where the built-in kernels live, imported on first use.

    ``modules`` lists the kernel modules (full dotted names) in order of precedence;
    ``index`` maps an op to ``(module, dtypes)`` pairs: the modules that register a kernel for
    that op and the dtypes they register it for (``"*"``: any).  Importing a module registers
    its kernels, so :meth:`KernelRegistry.lookup` imports the modules of an (op, dtype) before
    looking it up.  ``index`` is generated (``cpu/_kernel_index.py``) and checked by the tests
    against what the modules really register.
    """

    def __init__(self, modules: Sequence[str],
                 index: Mapping[str, Sequence[tuple[str, Sequence[str]]]]) -> None:
        self.modules = tuple(modules)
        self.rank = {m: i for i, m in enumerate(self.modules)}
        self.index = {op: tuple((m, frozenset(d)) for m, d in pairs) for op, pairs in index.items()}

    def modules_for(self, op: str, dtype: str) -> list[str]:
        return [m for m, ds in self.index.get(op, ()) if dtype in ds or "*" in ds]

    def registering_module(self) -> str | None:
        """The built-in kernel module whose code is registering a kernel now, if any.

        Found on the call stack rather than from the prepare function, so that a helper that
        registers on a module's behalf still counts for that module, and a kernel an
        application registers (even one wrapping a built-in function) counts as the
        application's.
        """
        f = sys._getframe(2)
        while f is not None:
            name = f.f_globals.get("__name__")
            if name in self.rank:
                return name
            f = f.f_back
        return None


class KernelRegistry:
    """Kernels keyed by (op name, dtype, version).

    Later registrations win over earlier ones for the same key, so a plugin or
    an application can replace a built-in kernel.  Built-in kernels (``builtins``) are
    imported on first lookup of their op and dtype; among themselves they keep the order
    of ``builtins.modules`` and they always come before (lose to) every other
    registration, whenever they are imported.
    """

    def __init__(self, builtins: BuiltinKernels | None = None) -> None:
        self._entries: dict[str, list[_Entry]] = {}
        self._builtins = builtins
        # (op, dtype) keys whose built-in modules are imported.  No lock around the imports:
        # Python's import lock makes a thread that imports a module another thread is
        # importing wait until it is complete, with every kernel registered.
        self._loaded: set[tuple[str, str]] = set()
        self._all_loaded = builtins is None
        # registrations replace an op's list rather than change it, so that a lookup in
        # another thread reads a whole list (lazily imported modules register from any thread)
        self._lock = threading.Lock()

    def _rank(self, e: _Entry) -> int:
        return _USER_RANK if e.module is None or self._builtins is None else self._builtins.rank[e.module]

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
        module = self._builtins.registering_module() if self._builtins is not None else None
        entry = _Entry(op, ds, rng, prepare, module)
        rank = self._rank(entry)
        with self._lock:
            lst = self._entries.get(op, [])
            # after every entry of the same or a lower rank: a later registration of one module
            # (or of the application) wins, and a built-in module imported late still loses to
            # the modules after it and to the application's kernels
            pos = len(lst)
            while pos > 0 and self._rank(lst[pos - 1]) > rank:
                pos -= 1
            self._entries[op] = [*lst[:pos], entry, *lst[pos:]]

    def _load(self, op: str, dtype: str) -> None:
        if self._all_loaded or (op, dtype) in self._loaded:
            return
        assert self._builtins is not None
        for module in self._builtins.modules_for(op, dtype):
            importlib.import_module(module)
        self._loaded.add((op, dtype))

    def load_all(self) -> None:
        """Import every built-in kernel module (support matrices, tests that list the kernels)."""
        if self._all_loaded:
            return
        assert self._builtins is not None
        for module in self._builtins.modules:
            importlib.import_module(module)
        self._all_loaded = True

    def lookup(self, op: str, dtype: str, version: int) -> PrepareFn | None:
        self._load(op, dtype)
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
        self._load(op, dtype)
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
        self.load_all()
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
        self.load_all()
        return sorted(self._entries)

    def entries(self) -> list[tuple[str, tuple[str, ...], range]]:
        """(op, dtypes, versions) for every registration, for support matrices."""
        self.load_all()
        out = []
        for op in sorted(self._entries):
            for e in self._entries[op]:
                out.append((op, tuple(sorted(e.dtypes)), e.versions))
        return out

    def builtin_entries(self) -> dict[str, list[tuple[str, frozenset[str], range]]]:
        """op -> (module, dtypes, versions) of every built-in registration, all modules imported."""
        self.load_all()
        out: dict[str, list[tuple[str, frozenset[str], range]]] = {}
        for op in sorted(self._entries):
            for e in self._entries[op]:
                if e.module is not None:
                    out.setdefault(op, []).append((e.module, e.dtypes, e.versions))
        return out

    @contextmanager
    def restored(self) -> Iterator[KernelRegistry]:
        """Undo, at the end of the block, every registration made inside it (tests that install
        stand-in kernels).  Every built-in module is imported first, so that none is imported
        inside the block and then forgotten."""
        self.load_all()
        saved = {k: list(v) for k, v in self._entries.items()}
        try:
            yield self
        finally:
            self._entries.clear()
            self._entries.update(saved)

    def decorator(
        self, op: str, *, dtypes: Iterable[str] | None = None, versions: Iterable[int] | range | None = None
    ) -> Callable[[PrepareFn], PrepareFn]:
        def deco(fn: PrepareFn) -> PrepareFn:
            self.register(op, fn, dtypes=dtypes, versions=versions)
            return fn

        return deco


def _builtin_kernels() -> BuiltinKernels:
    from . import KERNEL_MODULES
    from ._kernel_index import KERNEL_INDEX

    package = __name__.rpartition(".")[0]
    return BuiltinKernels([f"{package}.{m}" for m in KERNEL_MODULES],
                          {op: [(f"{package}.{m}", ds) for m, ds in pairs] for op, pairs in KERNEL_INDEX.items()})


CPU_KERNELS = KernelRegistry(_builtin_kernels())


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
