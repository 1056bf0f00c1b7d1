"""Execution plans: a subgraph prepared once for one set of input shapes.

``allocate_tensors`` turns a subgraph into a :class:`SubgraphPlan`:

1. *Resolve shapes*: every node's CPU kernel is looked up and prepared in
   file order; its ``output_shapes`` become the shapes its consumers see
   (``None`` marks a shape known only at run time).  A stateless builtin node
   whose inputs are all constants is *folded*: run once, right there, its
   outputs becoming constants, so later kernels see constant weights at
   prepare (DEQUANTIZE of float16 weights feeding a CONV_2D is the common
   case: 3-5x faster MediaPipe invokes) and ``invoke`` never runs it.
2. *Delegate*: each delegate is asked, node by node, whether it runs the
   node (:func:`plan_subgraph`, which shows each node to the delegates as a
   :class:`NodeView` with resolved shapes); the partitioner
   (:func:`litegpu._partition.partition`) groups the claimed node indices
   into segments, and each delegate segment is compiled with
   :meth:`Delegate.prepare`.
3. *Fusion*: two CPU nodes where a producer's only output feeds one consumer
   alone may run as one step when a fusion is registered for the pair (see
   :mod:`litegpu.cpu._fusion`; a zero PAD before a convolution is absorbed into
   the convolution's own padded buffer).  Skipped when all tensors are preserved.
4. *Lifetimes*: every intermediate tensor is dropped right after its last
   reader, so numpy can reuse its memory (unless all tensors are preserved).
   A CPU node whose kernel offers an in-place variant (``Prepared.inplace``)
   writes into an input that dies at that node, when a CPU kernel made that
   input as a fresh array (``Prepared.fresh``) and only CPU steps read it.
5. *Code generation*: the steps become one generated Python function
   (``v[7], = r3([v[5], v[6]])`` per node), so ``invoke`` runs straight-line
   code with no per-node dispatch, list walking or re-planning.

Values live in a flat list ``v`` indexed by tensor index, with one extra
slot at the end that always holds ``None``: an omitted optional input
(index ``-1``) reads that slot without any special case.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import numpy as np

from ._delegate import Delegate, DelegateKernel, NodeView, PartitionSpec, Support
from ._errors import (
    DelegateError,
    InterpreterError,
    LiteGPUError,
    ModelError,
    UnsupportedOpError,
    describe_failure,
)
from ._ir import Model, Operator, Subgraph, Tensor
from ._partition import NEVER_FOLD, PartitionOptions, PartitionPlan, partition
from ._validate import check_node
from .cpu._fusion import FusionNode, find_fusion
from .cpu._heap import release_heap, tune_heap
from .cpu._registry import (
    CPU_KERNELS,
    KernelRegistry,
    NodeContext,
    Prepared,
    PrepareFn,
    TensorSpec,
    kernel_dtype,
)

__all__ = [
    "Segment",
    "Step",
    "SubgraphPlan",
    "Runtime",
    "build_plan",
    "plan_subgraph",
    "partition_io",
    "numpy_dtype",
    "CPU_BACKEND",
]

logger = logging.getLogger("litegpu")

CPU_BACKEND = "cpu"
FOLDED_BACKEND = "folded"  # constant-only nodes evaluated once at allocate_tensors

# IR dtype names that have no numpy array representation we can allocate.
_NON_NUMERIC = frozenset({"string", "resource", "variant", "int4", "bfloat16"})


def numpy_dtype(name: str) -> np.dtype | None:
    """The numpy dtype for an IR dtype name, or None for string/resource/variant/..."""
    if name in _NON_NUMERIC:
        return None
    try:
        return np.dtype(name)
    except TypeError:
        return None


# --------------------------------------------------------------------------- structures


@dataclass(frozen=True)
class Segment:
    """A run of consecutive nodes executed by one backend (``"cpu"`` or a delegate name)."""

    backend: str
    node_indices: tuple[int, ...]
    op_names: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "node_indices": list(self.node_indices), "op_names": list(self.op_names)}


@dataclass
class Step:
    """One unit of the invoke loop: a prepared CPU node or a prepared delegate partition.

    ``run`` is the kernel's run function (CPU) or the :class:`DelegateKernel`'s
    ``invoke`` (delegate).  ``frees`` are the tensors dropped after this step.
    """

    kind: str  # "cpu" or "delegate"
    run: Callable[..., Any]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    node_indices: tuple[int, ...]
    label: str  # "node #3 ADD v1" or "opencl partition of nodes 3-9"
    frees: tuple[int, ...] = ()
    kernel: DelegateKernel | None = None
    host_outputs: frozenset[int] = frozenset()
    prepared: Prepared | None = None  # CPU steps: what the kernel's prepare returned


@dataclass
class SubgraphPlan:
    """A subgraph prepared for one set of input shapes (see the module docstring)."""

    model: Model
    subgraph: Subgraph
    specs: list[TensorSpec]  # per tensor index, shapes resolved
    steps: list[Step]
    segments: list[Segment]
    template: list[Any]  # initial value list: constants, variables, zero-filled unwritten tensors
    persistent: frozenset[int]  # tensors never freed
    variables: tuple[int, ...]
    reset_hooks: list[Callable[[], None]] = field(default_factory=list)
    device_owner: dict[int, DelegateKernel] = field(default_factory=dict)
    _fn: Callable[[list[Any]], None] | None = None
    _line_steps: list[int] = field(default_factory=list)
    _code_name: str = ""
    checked: bool = False
    # Per-step profiling (``Interpreter._profile``): a second generated function that also
    # times each step, built on first use so the plain invoke path stays untouched.
    profile_times: list[float] = field(default_factory=list)
    profile_runs: int = 0
    _fn_prof: Callable[..., None] | None = None
    _prof_line_steps: list[int] = field(default_factory=list)
    _prof_code_name: str = ""
    #: outputs of folded nodes a warm start's record left unfolded (``litegpu._plan_record``: only
    #: delegates read them); :meth:`deferred_value` folds them on first read
    deferred: frozenset[int] = frozenset()
    fold_deferred: Callable[[], None] | None = None

    def deferred_value(self, index: int) -> np.ndarray | None:
        """The value of folded tensor ``index`` whose fold a warm start left out (folded now, with
        every other such fold, once), or None for any other tensor."""
        if index not in self.deferred or self.fold_deferred is None:
            return None
        if self.specs[index].data is None:
            self.fold_deferred()
        return self.specs[index].data

    # ---- running

    def run(self, v: list[Any]) -> None:
        """Run every step on the value list ``v`` (inputs already stored in it)."""
        if not self.checked:
            self._run_checked(v)
            self.checked = True
            return
        try:
            self._fn(v)
        except LiteGPUError as e:  # a kernel refused its runtime values: make sure the node is named
            step = self._failed_step(e)
            if step is None:
                raise
            raise _renamed(e, step.label) from e
        except Exception as e:  # a kernel failed on runtime values: name the node
            raise self._wrap_run_error(e, self._failed_step(e)) from e

    def run_profiled(self, v: list[Any]) -> None:
        """:meth:`run`, adding each step's wall time to :attr:`profile_times`.

        The first run after planning takes the checked path and is not timed per step
        (it is the "first inference", measured as a whole by callers).
        """
        if not self.checked:
            self.run(v)
            return
        if self._fn_prof is None:
            _codegen(self, profiled=True)
        try:
            self._fn_prof(v, self.profile_times, perf_counter)
        except LiteGPUError as e:
            step = self._failed_step(e)
            if step is None:
                raise
            raise _renamed(e, step.label) from e
        except Exception as e:
            raise self._wrap_run_error(e, self._failed_step(e)) from e
        self.profile_runs += 1

    def profile_reset(self) -> None:
        self.profile_times = [0.0] * len(self.steps)
        self.profile_runs = 0

    def call(self, arrays: Sequence[Any]) -> list[Any]:
        """Run the subgraph on fresh state (control flow): inputs in, outputs out."""
        v = self.template.copy()
        for i, a in zip(self.subgraph.inputs, arrays, strict=True):
            v[i] = a
        self.run(v)
        return [v[o] for o in self.subgraph.outputs]

    def _failed_step(self, e: BaseException) -> Step | None:
        tb = e.__traceback__
        step_index = None
        while tb is not None:
            name = tb.tb_frame.f_code.co_filename
            if name in (self._code_name, self._prof_code_name):
                line_steps = self._line_steps if name == self._code_name else self._prof_line_steps
                line = tb.tb_lineno
                if 0 <= line - 1 < len(line_steps):
                    step_index = line_steps[line - 1]
            tb = tb.tb_next
        return None if step_index is None or step_index < 0 else self.steps[step_index]

    def _wrap_run_error(self, e: Exception, step: Step | None) -> LiteGPUError:
        where = step.label if step is not None else f"subgraph {self.subgraph.index}"
        if step is not None and step.kind == "delegate":
            return DelegateError(f"{where} failed to invoke: {type(e).__name__}: {e}")
        return InterpreterError(f"{where} failed to invoke: {describe_failure(e)}")

    def _run_checked(self, v: list[Any]) -> None:
        """The first run after planning: the same steps, with every output checked
        against the planned dtype and shape, so a kernel bug surfaces as a clear
        error naming the node instead of a wrong answer further down."""
        specs = self.specs
        for step in self.steps:
            try:
                if step.kind == "cpu":
                    res = step.run([v[i] for i in step.inputs])
                    if res is None:
                        res = ()
                    if len(res) != len(step.outputs):
                        raise InterpreterError(
                            f"{step.label}: CPU kernel returned {len(res)} outputs, expected {len(step.outputs)}")
                    for o, r in zip(step.outputs, res, strict=True):
                        _check_value(step, specs[o], r)
                        v[o] = r
                else:
                    res = step.run({i: v[i] for i in step.inputs})
                    for o in step.outputs:
                        if o not in res:
                            raise DelegateError(f"{step.label}: delegate kernel did not return tensor {o}")
                        if o in step.host_outputs:
                            _check_value(step, specs[o], res[o])
                        v[o] = res[o]
            except LiteGPUError as e:
                raise _renamed(e, step.label) from e
            except Exception as e:
                raise self._wrap_run_error(e, step) from e
            for f in step.frees:
                v[f] = None

    # ---- helpers

    def input_buffer(self, index: int) -> np.ndarray | None:
        """Host memory the first delegate step reading model input ``index`` offers to hold its value
        (:meth:`DelegateKernel.input_buffer`), or None."""
        for step in self.steps:
            if step.kernel is not None and index in step.inputs:
                return step.kernel.input_buffer(index)
        return None

    def to_host(self, index: int, value: Any) -> Any:
        """A host (numpy) view of a tensor value that may be a delegate's device object."""
        owner = self.device_owner.get(index)
        if owner is not None and not isinstance(value, np.ndarray | np.generic):
            return owner.to_host(value)
        return value

    def close(self) -> None:
        for step in self.steps:
            if step.kernel is not None:
                try:
                    step.kernel.close()
                except Exception:  # closing must never raise from __del__ paths
                    pass


def _check_value(step: Step, spec: TensorSpec, value: Any) -> None:
    want = numpy_dtype(spec.dtype)
    if want is None:  # resource handles, strings...: opaque to the checker
        return
    if not isinstance(value, np.ndarray | np.generic):
        raise InterpreterError(
            f"{step.label}: kernel returned {type(value).__name__} for tensor {spec.index} "
            f"'{spec.name}', expected a numpy array of {spec.dtype}")
    if value.dtype != want:
        raise InterpreterError(
            f"{step.label}: kernel returned dtype {value.dtype} for tensor {spec.index} "
            f"'{spec.name}', expected {spec.dtype}")
    if spec.shape is not None and tuple(value.shape) != tuple(spec.shape):
        raise InterpreterError(
            f"{step.label}: kernel returned shape {tuple(value.shape)} for tensor {spec.index} "
            f"'{spec.name}', expected {tuple(spec.shape)}")


# --------------------------------------------------------------------------- runtime (shared state)


class Runtime:
    """What all plans of one interpreter share: the model, resource variables,
    CALL_ONCE state, and the lazily prepared plans of called subgraphs."""

    # How many input-shape variants of one called subgraph to keep prepared.
    CALLEE_CACHE = 8

    def __init__(self, model: Model, *, num_threads: int = 1, preserve_all_tensors: bool = False,
                 registry: KernelRegistry = CPU_KERNELS):
        self.model = model
        self.num_threads = num_threads
        self.preserve_all_tensors = preserve_all_tensors
        self.registry = registry
        # Evaluate constant-only nodes once at prepare (exact: the same kernels run).
        self.fold_constants = True
        # Fuse registered producer/consumer node pairs and run nodes in place in dead
        # inputs (exact: the fused kernels compute the same values).
        self.fuse_kernels = True
        # Keep freed intermediates in the process heap between invokes (see cpu/_heap.py);
        # released (and the heap trimmed once no interpreter is left) by close().
        tune_heap()
        self._heap_held = True
        # Limits and logging of the partitioner (litegpu.load passes the config's partition section).
        self.partition_options = PartitionOptions()
        self.resources: dict[Any, Any] = {}
        self._callees: dict[int, OrderedDict[tuple, SubgraphPlan]] = {}
        self._io_cache: dict[int, tuple[list[TensorSpec], list[TensorSpec]]] = {}

    def _subgraph(self, index: int) -> Subgraph:
        n = len(self.model.subgraphs)
        if not isinstance(index, int | np.integer) or not 0 <= index < n:
            raise ModelError(f"subgraph index {index} out of range: the model has {n} subgraphs")
        return self.model.subgraphs[int(index)]

    def call_subgraph(self, index: int, arrays: Sequence[Any]) -> list[Any]:
        """Run subgraph ``index`` on ``arrays`` (prepared once per distinct input shapes)."""
        sg = self._subgraph(index)
        if len(arrays) != len(sg.inputs):
            raise ModelError(
                f"subgraph {index} ('{sg.name}') takes {len(sg.inputs)} inputs, got {len(arrays)}")
        key = tuple(getattr(a, "shape", None) for a in arrays)
        cache = self._callees.setdefault(index, OrderedDict())
        plan = cache.get(key)
        if plan is None:
            shapes = [None if s is None else tuple(s) for s in key]
            plan = build_plan(self, sg.index, shapes)
            cache[key] = plan
            if len(cache) > self.CALLEE_CACHE:
                cache.popitem(last=False)[1].close()
        else:
            cache.move_to_end(key)
        return plan.call(arrays)

    def subgraph_ops(self, index: int) -> tuple[str, ...]:
        """The op names of subgraph ``index`` in file order (kernels that, like LiteRT's, read a
        body subgraph's single op instead of running it: STABLEHLO_REDUCE_WINDOW, STABLEHLO_SCATTER)."""
        return tuple(op.name for op in self._subgraph(index).operators)

    def subgraph_io(self, index: int) -> tuple[list[TensorSpec], list[TensorSpec]]:
        """Input and output specs of subgraph ``index`` as the file declares them
        (``shape`` is None where the signature has unknown dimensions)."""
        hit = self._io_cache.get(index)
        if hit is None:
            sg = self._subgraph(index)

            def spec(t: Tensor) -> TensorSpec:
                s = _spec(t)
                if t.is_dynamic or not t.has_rank:
                    s.shape = None
                return s

            hit = ([spec(sg.tensors[i]) for i in sg.inputs], [spec(sg.tensors[i]) for i in sg.outputs])
            self._io_cache[index] = hit
        return hit

    def callee_plans(self) -> list[SubgraphPlan]:
        return [p for c in self._callees.values() for p in c.values()]

    def close(self) -> None:
        for p in self.callee_plans():
            p.close()
        self._callees.clear()
        if self._heap_held:
            self._heap_held = False
            release_heap()


# --------------------------------------------------------------------------- planning


# TensorSpec fields beyond the basic ones (``sparsity`` for sparse constants) are filled
# from the IR tensor when the registry's TensorSpec has them.
_EXTRA_SPEC_FIELDS = tuple(f for f in ("sparsity",) if f in TensorSpec.__dataclass_fields__)


def _spec(t: Tensor) -> TensorSpec:
    spec = TensorSpec(
        index=t.index,
        name=t.name,
        dtype=t.dtype,
        shape=tuple(int(d) for d in t.shape),
        quantization=t.quantization,
        data=None if t.is_variable else t.data,
        is_variable=t.is_variable,
    )
    for f in _EXTRA_SPEC_FIELDS:
        setattr(spec, f, getattr(t, f))
    return spec


def variable_initial(spec: TensorSpec) -> np.ndarray | None:
    """A variable tensor's value after allocation/reset: zeros, or the zero point for int8
    (what LiteRT's reset does)."""
    dt = numpy_dtype(spec.dtype)
    if dt is None or spec.shape is None:
        return None
    fill = 0
    q = spec.quantization
    if spec.dtype == "int8" and q is not None and q.zero_point.size:
        fill = int(q.zero_point.flat[0])
    return np.full(spec.shape, fill, dtype=dt)


def _where(sg_index: int, op: Operator) -> str:
    prefix = f"subgraph {sg_index} " if sg_index else ""
    return f"{prefix}{op.label}"


def _missing_message(registry: KernelRegistry, op: Operator, dtype: str) -> str:
    msg = registry.explain_missing(op.name, dtype, op.version)
    if op.is_custom and op.name.startswith("Flex"):
        msg += " (TensorFlow Flex ops are not supported)"
    elif op.is_custom and "dtype" not in msg:
        msg += f" (custom op; register one with @litegpu.register_kernel({op.name!r}))"
    if dtype not in msg:
        msg += f" (dtype {dtype})"
    return msg


def _renamed(e: LiteGPUError, where: str) -> LiteGPUError:
    """``e`` with the node named in its message, when the kernel did not name it; where the kernel named its
    node itself (``NodeContext.fail`` / ``invalid``: the message starts with ``Operator.label``) and the node is
    in another subgraph than the main one, with the subgraph put in front, as ``where`` has it (a fused step's
    ``where`` names several nodes of one subgraph)."""
    text = str(e)
    if "partition of nodes" in text:
        return e
    if text.startswith("node #"):  # the kernel's own words
        at = where.find("node #")
        if at <= 0:  # the main subgraph's node: nothing to add
            return e
        named = where[:at] + text
    elif "node #" in text:
        return e
    else:
        named = f"{where}: {text}"
    try:
        return type(e)(named)
    except Exception:
        return e


def _validate_indices(sg: Subgraph) -> None:
    n = len(sg.tensors)

    def check(label: str, idx: Sequence[int], optional: bool) -> None:
        for i in idx:
            if optional and i == -1:
                continue
            if not 0 <= i < n:
                raise ModelError(
                    f"subgraph {sg.index}: invalid tensor index {i} in {label}. The subgraph has {n} tensors")

    check("subgraph inputs", sg.inputs, False)
    check("subgraph outputs", sg.outputs, False)
    for op in sg.operators:
        check(f"{op.label} inputs", op.inputs, True)
        check(f"{op.label} outputs", op.outputs, False)
        if not op.is_custom:
            # LiteRT refuses this for builtin ops (custom ops may forward a tensor).
            for ii, a in enumerate(op.inputs):
                for oi, b in enumerate(op.outputs):
                    if a == b and a >= 0:
                        raise ModelError(
                            f"{_where(sg.index, op)}: Tensor {a} is both input {ii} and output {oi}")


def build_plan(
    runtime: Runtime,
    subgraph_index: int,
    input_shapes: Sequence[tuple[int, ...] | None] | None = None,
    *,
    delegates: Sequence[Delegate] = (),
) -> SubgraphPlan:
    """Prepare subgraph ``subgraph_index`` for ``input_shapes`` (default: the file's shapes).

    With delegates that keep a serialization cache, a warm start follows the plan record an earlier
    start left there (``litegpu._plan_record``): no CPU prepare of the delegated nodes, no ``supports()``,
    no partitioner."""
    slot = None
    if delegates:
        from . import _plan_record

        slot = _plan_record.slot_for(runtime, subgraph_index, input_shapes, delegates)
        record = slot.load() if slot is not None else None
        if record is not None:
            try:
                return _build_plan(runtime, subgraph_index, input_shapes, delegates, record)[0]
            except _plan_record.StaleRecord as e:
                logger.log(logging.WARNING if e.warn else logging.DEBUG,
                           "the cached plan record of %s no longer fits (%s); planning it in full and "
                           "recording it again", _plan_record._model_name(runtime.model), e.why)
    plan, record = _build_plan(runtime, subgraph_index, input_shapes, delegates, None)
    if slot is not None and record is not None:
        slot.store(record)
    return plan


def _build_plan(
    runtime: Runtime,
    subgraph_index: int,
    input_shapes: Sequence[tuple[int, ...] | None] | None,
    delegates: Sequence[Delegate],
    record: Any,
) -> tuple[SubgraphPlan, Any]:
    """:func:`build_plan`'s work: in full (``record`` None; returns the record of what it decided, or
    None where the plan cannot have one), or following ``record`` (a
    :class:`~litegpu._plan_record.PlanRecord`; raises :class:`~litegpu._plan_record.StaleRecord` where
    it does not fit)."""
    from ._plan_record import StaleRecord

    model = runtime.model
    sg = model.subgraphs[subgraph_index]
    registry = runtime.registry
    _validate_indices(sg)

    specs = [_spec(t) for t in sg.tensors]
    if input_shapes is not None:
        for i, s in zip(sg.inputs, input_shapes, strict=True):
            specs[i].shape = None if s is None else tuple(int(d) for d in s)

    reset_hooks: list[Callable[[], None]] = []
    # ---- 1. prepare every node with a CPU kernel (this resolves shapes); following a record, only the
    # nodes the CPU runs and the folds they read (the others' outputs take the record's shapes)
    prepared: list[Prepared | None] = []
    contexts: dict[int, tuple[NodeContext, PrepareFn]] = {}
    missing: dict[int, str] = {}
    folded: list[int] = []  # nodes evaluated here, once; their outputs become constants
    seeded: dict[int, np.ndarray] = {}  # variable tensors whose first value a once-run node gave
    produced = {o for op in sg.operators for o in op.outputs}
    skip: frozenset[int] = frozenset()
    if record is not None:
        if len(record.shapes) != len(specs) or any(n >= len(sg.operators) for n in record.skip):
            raise StaleRecord("it describes another subgraph")
        skip = record.skip
        folded = list(record.folded)
        rec_folded = set(record.folded)
    for op in sg.operators:
        check_node(op, [sg.tensors[i] if i >= 0 else None for i in op.inputs], sg, produced,
                   _where(subgraph_index, op))
        if op.index in skip:
            for o in op.outputs:
                specs[o].shape = record.shapes[o]
            prepared.append(None)
            continue
        ins = [specs[i] if i >= 0 else None for i in op.inputs]
        outs = [specs[o] for o in op.outputs]
        dtype = kernel_dtype(op, ins, outs)
        prep = registry.lookup(op.name, dtype, op.version)
        where = _where(subgraph_index, op)
        if prep is None:
            missing[op.index] = f"{where}: {_missing_message(registry, op, dtype)}"
            prepared.append(None)
            continue
        ctx = NodeContext(
            op=op,
            inputs=ins,
            outputs=outs,
            num_threads=runtime.num_threads,
            call_subgraph=runtime.call_subgraph,
            subgraph_io=runtime.subgraph_io,
            subgraph_ops=runtime.subgraph_ops,
            resources=runtime.resources,
            reset_hooks=reset_hooks,
            intermediates=[_spec(sg.tensors[i]) for i in op.intermediates if i >= 0],
        )
        try:
            p = prep(ctx)
        except LiteGPUError as e:
            raise _renamed(e, where) from e
        except Exception as e:  # a kernel tripping over a malformed node
            raise ModelError(f"{where}: failed to prepare: {describe_failure(e)} (a malformed model, or a "
                             "use of this op litegpu does not support)") from e
        if not isinstance(p, Prepared) or len(p.output_shapes) != len(op.outputs):
            raise InterpreterError(
                f"{where}: kernel prepare must return Prepared with {len(op.outputs)} output shapes")
        for o, shape in zip(op.outputs, p.output_shapes, strict=True):
            specs[o].shape = None if shape is None else tuple(int(d) for d in shape)
        prepared.append(p)
        contexts[op.index] = (ctx, prep)
        if record is not None:
            if any(specs[o].shape != record.shapes[o] for o in op.outputs):
                raise StaleRecord(f"{where}: its output shapes differ")
            if (runtime.fold_constants and _foldable(op, ins, outs)) != (op.index in rec_folded) \
                    or _seeds_variables(op, ins, outs):
                raise StaleRecord(f"{where}: folded differently")
            if op.index in rec_folded:
                _fold(op, p, ins, outs, where)
            continue
        if runtime.fold_constants and _foldable(op, ins, outs):
            _fold(op, p, ins, outs, where)
            folded.append(op.index)
        elif _seeds_variables(op, ins, outs):
            seeded.update(_seed(op, p, ins, outs, where))
            folded.append(op.index)

    def prepare_skipped(folds_only: bool = False) -> None:
        """The CPU prepare (and folding) a record left out, in file order: for the CPU fallback of a
        delegated group after a device fault; ``folds_only``: only the folded nodes' (a read of a
        folded constant that only a delegate reads, :attr:`SubgraphPlan.deferred`)."""
        for n in sorted(skip):
            if prepared[n] is not None or (folds_only and n not in rec_folded):
                continue
            op = sg.operators[n]
            ins = [specs[i] if i >= 0 else None for i in op.inputs]
            outs = [specs[o] for o in op.outputs]
            where = _where(subgraph_index, op)
            prep = registry.lookup(op.name, kernel_dtype(op, ins, outs), op.version)
            if prep is None:
                continue
            ctx = NodeContext(op=op, inputs=ins, outputs=outs, num_threads=runtime.num_threads,
                              call_subgraph=runtime.call_subgraph, subgraph_io=runtime.subgraph_io,
                              subgraph_ops=runtime.subgraph_ops, resources=runtime.resources,
                              reset_hooks=reset_hooks,
                              intermediates=[_spec(sg.tensors[i]) for i in op.intermediates if i >= 0])
            p = prep(ctx)
            prepared[n] = p
            if n in rec_folded:
                _fold(op, p, ins, outs, where)

    # ---- 2. delegates claim nodes (in order, LiteRT-style) and the partitioner groups them
    claimed: dict[int, str] = {}
    by_name: dict[str, Delegate] = {d.name: d for d in delegates}
    folded_set = set(folded)
    pplan: PartitionPlan | None = None
    if record is not None:
        groups = [(b, list(ns)) for b, ns in record.groups]
        claimed = {n: b for b, ns in groups if b != CPU_BACKEND for n in ns}
        if any(b != CPU_BACKEND and b not in by_name for b, _ in groups):
            raise StaleRecord("it names another delegate")
        if record.warning:  # the partitioner's WARNING, said again: a CPU fallback is never silent
            logger.warning("%s", record.warning)
        elif record.summary:
            logger.info("%s", record.summary)
    elif delegates and sg.operators:
        view = _node_views(sg, model, _resolved_tensors(sg, specs))
        pplan = plan_subgraph(sg, delegates, model=model, options=runtime.partition_options,
                              node_view=view, folded=folded)
        claimed = dict(pplan.claimed)
        groups = _without([(b, list(ns)) for b, ns in pplan.pairs(include_folded=False)], folded_set)
    else:
        # no delegate: every node not folded runs on the CPU, in file order, as one group
        groups = _without([(CPU_BACKEND, [op.index for op in sg.operators])], folded_set)
    for n, msg in missing.items():
        if n not in claimed:  # unsupported by every delegate, or left to the CPU by the partition limits
            raise UnsupportedOpError(msg)


    # ---- 3. steps
    graph_outputs = set(sg.outputs)
    consumers = _consumers(sg)
    backend_of = {n: b for b, ns in groups for n in ns}
    steps: list[Step] = []
    device_owner: dict[int, DelegateKernel] = {}
    on_error = runtime.partition_options.on_device_error
    faults: dict[str, _DeviceFault] = {}
    cpu_backends: set[int] = set()  # delegated nodes moved to the CPU because their delegate failed
    resolved_cache: list[Tensor] | None = None
    made: list[tuple[list[int], list[int], frozenset[int], bool]] = []  # delegated groups, for the record
    kernels: list[DelegateKernel] = []  # following a record: closed again if it turns out stale

    def stale(why: str, warn: bool = True) -> StaleRecord:
        for k in kernels:
            k.close()
        return StaleRecord(why, warn)

    for backend, ns in groups:
        if backend == CPU_BACKEND:
            for n in ns:  # folded nodes were removed from the groups above
                op = sg.operators[n]
                p = prepared[n]
                assert p is not None
                steps.append(Step("cpu", p.run, tuple(op.inputs), tuple(op.outputs), (n,),
                                  _where(subgraph_index, op), prepared=p))
            continue
        if resolved_cache is None:
            resolved_cache = _resolved_tensors(sg, specs)
        if record is not None:
            if len(made) >= len(record.partitions):
                raise stale("it has fewer delegated groups")
            part = record.partitions[len(made)]
            inputs, outputs, host, runnable = list(part.inputs), list(part.outputs), part.host, part.runnable
        else:
            inputs, outputs = partition_io(sg, ns, specs, consumers, graph_outputs)
            host = frozenset(
                o for o in outputs
                if o in graph_outputs or specs[o].is_variable
                or any(backend_of.get(c) != backend for c in consumers.get(o, ()) if c not in ns)
            )
            runnable = all(prepared[n] is not None for n in ns)  # every node has a CPU kernel to fall back to
        made.append((inputs, outputs, host, runnable))
        touched = {i for n in ns for i in (*sg.operators[n].inputs, *sg.operators[n].outputs) if i >= 0}
        spec = PartitionSpec(
            subgraph=sg,
            model=model,
            node_indices=tuple(ns),
            inputs=tuple(inputs),
            outputs=tuple(outputs),
            host_outputs=host,
            tensors={i: resolved_cache[i] for i in sorted(touched)},
        )
        d = by_name[backend]
        label = f"{backend} partition of nodes {_ranges(ns)}"
        fault = faults.setdefault(backend, _DeviceFault(backend, on_error))
        cpu_nodes: Any = [(prepared[n], tuple(sg.operators[n].inputs), tuple(sg.operators[n].outputs))
                          for n in ns]
        kernel = None
        if record is not None:
            # from the delegate's cache only: the folds feeding this group left its constants without data
            try:
                with d.cached_only():  # type: ignore[attr-defined]
                    kernel = d.prepare(spec)
            except StaleRecord as e:
                raise stale(f"{label}: {e}") from e
            except Exception as e:  # noqa: BLE001 - a failing device: planned in full, which reports it
                raise stale(f"{label}: {type(e).__name__}: {e}", warn=False) from e
            kernels.append(kernel)

            def cpu_nodes(ns: list[int] = ns) -> list[tuple[Prepared | None, tuple[int, ...], tuple[int, ...]]]:
                prepare_skipped()
                return [(prepared[n], tuple(sg.operators[n].inputs), tuple(sg.operators[n].outputs)) for n in ns]
        elif not fault.failed:
            try:
                kernel = d.prepare(spec)
            except Exception as e:
                err = e if isinstance(e, LiteGPUError) else DelegateError(
                    f"{label}: prepare failed: {type(e).__name__}: {e}")
                if on_error == "raise" or not runnable:
                    raise err from e
                fault.fail(f"{label}: prepare failed: {type(e).__name__}: {e}")
        if kernel is None:  # this delegate failed at prepare: its partitions run on the CPU
            cpu_backends.update(ns)
            for n in ns:
                op = sg.operators[n]
                steps.append(Step("cpu", prepared[n].run, tuple(op.inputs), tuple(op.outputs), (n,),
                                  _where(subgraph_index, op), prepared=prepared[n]))
            continue
        for o in outputs:
            if o not in host:
                device_owner[o] = kernel
        run = kernel.invoke
        if on_error == "fallback" and runnable:
            run = _DelegateRunner(kernel, label, fault, cpu_nodes, tuple(outputs), specs, device_owner)
        steps.append(Step("delegate", run, tuple(inputs), tuple(outputs), tuple(ns), label,
                          kernel=kernel, host_outputs=host))
    if record is not None and len(made) != len(record.partitions):
        raise stale("it has more delegated groups")

    # Folded nodes ran once, here; no backend runs them per invoke.  They get their own segment so a
    # plan shows honestly that nothing of them is left on the CPU (LiteRT's GPU delegate would claim
    # such DEQUANTIZE nodes and fold them the same way).
    shown = ([(FOLDED_BACKEND, list(folded))] if folded else []) + [
        (CPU_BACKEND if ns and ns[0] in cpu_backends else b, ns) for b, ns in groups]
    merged: list[tuple[str, list[int]]] = []
    for b, ns in shown:
        if merged and merged[-1][0] == b == CPU_BACKEND:
            merged[-1] = (b, merged[-1][1] + list(ns))
        else:
            merged.append((b, list(ns)))
    segments = [Segment(b, tuple(ns), tuple(sg.operators[n].name for n in ns)) for b, ns in merged]

    fuse = runtime.fuse_kernels and not runtime.preserve_all_tensors
    if fuse:
        steps = _fuse_steps(sg, steps, contexts, graph_outputs)

    # ---- 4. initial values and lifetimes
    n = len(sg.tensors)
    template: list[Any] = [None] * (n + 1)  # last slot: the None read for omitted inputs
    variables = tuple(t.index for t in sg.tensors if t.is_variable)
    written = set(sg.inputs)
    for op in sg.operators:
        written.update(op.outputs)
    persistent = set(sg.inputs) | graph_outputs | set(variables)
    for t in sg.tensors:
        if t.is_variable:
            template[t.index] = seeded[t.index] if t.index in seeded else variable_initial(specs[t.index])
        elif specs[t.index].data is not None:  # file constants and folded node outputs
            template[t.index] = specs[t.index].data
            persistent.add(t.index)
    read = {i for op in sg.operators for i in op.inputs if i >= 0}
    for i in sorted(read - written - persistent):
        # Read but never written and without data: LiteRT never allocates such a tensor and
        # fails the reading node ("Input tensor N lacks data"); refuse it before invoke.
        dt = numpy_dtype(specs[i].dtype)
        if dt is not None and specs[i].shape is not None and int(np.prod(specs[i].shape)) > 0:
            reader = next(op for op in sg.operators if i in op.inputs)
            raise ModelError(f"{_where(subgraph_index, reader)}: input tensor {i} ({sg.tensors[i].name!r}) has no data "
                             "and no node writes it (a malformed model; LiteRT fails it as 'lacks data')")
        if dt is not None and specs[i].shape is not None:
            template[i] = np.zeros(specs[i].shape, dt)
        persistent.add(i)
    if not runtime.preserve_all_tensors:
        last: dict[int, int] = {}
        for k, st in enumerate(steps):
            for i in st.inputs:
                if i >= 0:
                    last[i] = k
            for o in st.outputs:
                last.setdefault(o, k)  # never read: drop right after it is made
                if last[o] < k:
                    last[o] = k
        frees: dict[int, list[int]] = {}
        for t, k in last.items():
            if t not in persistent:
                frees.setdefault(k, []).append(t)
        for k, st in enumerate(steps):
            st.frees = tuple(sorted(frees.get(k, ())))
        if fuse:
            _use_inplace(steps, persistent)

    plan = SubgraphPlan(
        model=model,
        subgraph=sg,
        specs=specs,
        steps=steps,
        segments=segments,
        template=template,
        persistent=frozenset(persistent),
        variables=variables,
        reset_hooks=reset_hooks,
        device_owner=device_owner,
    )
    if record is not None:
        # the folds a record left out (only delegates read their outputs) run when such an output is
        # read, so that a warm start answers get_tensor() as the cold start that folded them did
        plan.deferred = frozenset(o for n in skip if n in rec_folded for o in sg.operators[n].outputs)
        plan.fold_deferred = lambda: prepare_skipped(folds_only=True)
    _codegen(plan)
    if record is not None or not made:
        return plan, None
    # what a warm start may follow (litegpu._plan_record): a plan without state, every delegated group
    # prepared by its delegate
    if seeded or reset_hooks or variables or cpu_backends or any(f.failed for f in faults.values()):
        return plan, None
    return plan, _record_of(sg, specs, folded, groups, made, graph_outputs, consumers,
                            pplan.summary if pplan else "", pplan.warning if pplan else "")


def _record_of(sg: Subgraph, specs: list[TensorSpec], folded: list[int], groups: list[tuple[str, list[int]]],
               made: list[tuple[list[int], list[int], frozenset[int], bool]], graph_outputs: set[int],
               consumers: Mapping[int, Sequence[int]], summary: str, warning: str) -> Any:
    """The :class:`~litegpu._plan_record.PlanRecord` of a plan built in full.  Its ``skip`` set: every
    delegated node, and every folded node whose outputs only skipped nodes read (in reverse order, so a
    fold feeding a skipped fold is skipped too)."""
    from ._plan_record import PartitionRecord, PlanRecord

    skip = {n for b, ns in groups if b != CPU_BACKEND for n in ns}
    for n in reversed(folded):
        outs = [o for o in sg.operators[n].outputs if o >= 0]
        if all(o not in graph_outputs and all(c in skip for c in consumers.get(o, ())) for o in outs):
            skip.add(n)
    return PlanRecord(
        shapes=tuple(None if s.shape is None else tuple(int(d) for d in s.shape) for s in specs),
        folded=tuple(folded), skip=frozenset(skip),
        groups=tuple((b, tuple(ns)) for b, ns in groups),
        partitions=tuple(PartitionRecord(tuple(i), tuple(o), frozenset(h), bool(r)) for i, o, h, r in made),
        summary=summary, warning=warning)


def _node_views(subgraph: Subgraph, model: Model | None,
                tensors: Sequence[Tensor] | None = None) -> Callable[[int], NodeView]:
    """``node index -> NodeView`` over ``tensors`` (default: the subgraph's own, as in the file)."""
    t = subgraph.tensors if tensors is None else tensors

    def view(i: int) -> NodeView:
        op = subgraph.operators[i]
        return NodeView(
            op=op,
            inputs=tuple(None if k < 0 else t[k] for k in op.inputs),
            outputs=tuple(t[k] for k in op.outputs if k >= 0),
            subgraph=subgraph,
            model=model,  # type: ignore[arg-type]
        )

    return view


def plan_subgraph(
    subgraph: Subgraph,
    delegates: Sequence[Any],
    *,
    model: Model | None = None,
    options: PartitionOptions | Mapping[str, Any] | None = None,
    node_view: Callable[[int], NodeView] | None = None,
    folded: Iterable[int] | None = None,
) -> PartitionPlan:
    """Ask each delegate ``supports()`` (only for nodes still unclaimed) and partition.

    ``delegates`` are :class:`litegpu.Delegate` objects in preference order;
    those with a true ``passthrough`` attribute (the ``cpu`` pseudo-backend)
    are skipped.  ``node_view(i)`` builds the :class:`NodeView` shown to the
    delegates (default: the subgraph's tensors as they are; the interpreter
    passes views with resolved shapes and folded constants).  ``folded``: nodes
    the caller already folded (see :func:`litegpu._partition.partition`).  Segment ``delegate``
    fields index into ``delegates``.
    """
    view = node_view or _node_views(subgraph, model)
    real = [(k, d) for k, d in enumerate(delegates) if not getattr(d, "passthrough", False)]

    def asker(delegate: Any) -> Callable[[int], Support]:
        return lambda i: delegate.supports(view(i))

    pairs = [(getattr(d, "name", f"delegate{k}"), asker(d)) for k, d in real]
    plan = partition(subgraph, pairs, options, folded=folded)
    remap = [k for k, _ in real]
    segs = tuple(s if s.delegate is None else s._replace(delegate=remap[s.delegate]) for s in plan.segments)
    return dataclasses.replace(plan, segments=segs)


class _DeviceFault:
    """Whether one delegate of a plan has failed (``partition.on_device_error: fallback``): once it
    has, all its partitions run on the CPU, at this invoke and after (its later partitions may take
    device objects its earlier ones would have made, so they fall back together)."""

    def __init__(self, backend: str, policy: str):
        self.backend = backend
        self.policy = policy
        self.failed: str | None = None

    def fail(self, why: str) -> None:
        if self.failed is None:
            self.failed = why
            logger.warning("%s; running the %s partitions on the CPU from now on "
                           "(partition.on_device_error: fallback; set it to raise to get the error)",
                           why, self.backend)


class _DelegateRunner:
    """A delegate partition's invoke with the CPU as the fallback: a device fault (any exception from
    the kernel) is logged once at WARNING and the partition's nodes run on their CPU kernels."""

    __slots__ = ("kernel", "label", "fault", "cpu_nodes", "outputs", "specs", "owners")

    def __init__(self, kernel: DelegateKernel, label: str, fault: _DeviceFault,
                 cpu_nodes: list[tuple[Prepared, tuple[int, ...], tuple[int, ...]]] | Callable[[], list[Any]],
                 outputs: tuple[int, ...],
                 specs: list[TensorSpec], owners: dict[int, DelegateKernel]):
        self.kernel, self.label, self.fault, self.cpu_nodes = kernel, label, fault, cpu_nodes
        self.outputs, self.specs, self.owners = outputs, specs, owners

    def __call__(self, inputs: Mapping[int, Any]) -> dict[int, Any]:
        if self.fault.failed is None:
            try:
                return self.kernel.invoke(inputs)
            except Exception as e:  # noqa: BLE001 - any failure of the device is a device fault here
                self.fault.fail(f"{self.label} failed to invoke: {type(e).__name__}: {e}")
        return self._on_cpu(inputs)

    def _on_cpu(self, inputs: Mapping[int, Any]) -> dict[int, Any]:
        vals: dict[int, Any] = {}
        for i, v in inputs.items():
            owner = self.owners.get(i)
            if owner is not None and not isinstance(v, np.ndarray | np.generic):
                v = owner.to_host(v)  # made on the device by a partition that ran before the fault
            vals[i] = v
        specs = self.specs
        if callable(self.cpu_nodes):  # prepared on first need (a plan that followed a plan record)
            self.cpu_nodes = self.cpu_nodes()
        for p, ins, outs in self.cpu_nodes:
            res = p.run([(vals[i] if i in vals else specs[i].data) if i >= 0 else None for i in ins])
            for o, r in zip(outs, res or (), strict=False):
                vals[o] = r
        return {o: vals[o] for o in self.outputs}


def _fuse_steps(sg: Subgraph, steps: list[Step], contexts: Mapping[int, tuple[NodeContext, PrepareFn]],
                graph_outputs: set[int]) -> list[Step]:
    """Replace each fusable (producer, consumer) pair of CPU steps by one fused step.

    The producer must have a single output, read once, by the consumer only, and be no graph
    output; it then runs at the consumer's place (its inputs are still alive there: their last
    reader moves with it).  Producers reading variable tensors are left alone (a node in
    between could update the variable in place).  A producer may itself be a fused step
    (PAD + DEPTHWISE_CONV_2D, then + CONV_2D): the fusion sees its last node, with the
    earlier ones in ``FusionNode.chain``.
    """
    reads: dict[int, int] = {}
    for st in steps:
        for i in st.inputs:
            reads[i] = reads.get(i, 0) + 1
    made_by: dict[int, Step] = {}
    members: dict[int, tuple[FusionNode, ...]] = {}  # id(step) -> its nodes, for fused steps
    out: list[Step] = []

    def node_of(st: Step) -> FusionNode:
        done = members.get(id(st))
        if done is not None:
            return dataclasses.replace(done[-1], chain=done[:-1])
        ctx, prep = contexts[st.node_indices[0]]
        return FusionNode(ctx, st.prepared, prep)

    for st in steps:
        fused = None
        if st.kind == "cpu" and len(st.node_indices) == 1 and st.prepared is not None:
            for slot, t in enumerate(st.inputs):
                prod = made_by.get(t) if t >= 0 else None
                if (prod is None or reads.get(t) != 1 or t in graph_outputs or len(prod.outputs) != 1
                        or prod.prepared is None
                        or any(i >= 0 and sg.tensors[i].is_variable for i in prod.inputs)):
                    continue
                pn, cn = node_of(prod), node_of(st)
                fn = find_fusion(pn, cn)
                if fn is None:
                    continue
                try:
                    p = fn(pn, cn, slot)
                except LiteGPUError:
                    p = None  # a fusion that cannot handle the pair declines; the nodes run apart
                if p is None:
                    continue
                ins = st.inputs[:slot] + (-1,) + st.inputs[slot + 1:]
                fused = Step("cpu", p.run, prod.inputs + ins, st.outputs, prod.node_indices + st.node_indices,
                             f"{prod.label} + {st.label}", prepared=p)
                chain = members.get(id(prod), (pn,))
                members[id(fused)] = chain + (cn,)
                out.remove(prod)
                break
        st = fused or st
        out.append(st)
        for o in st.outputs:
            made_by[o] = st
    return out


def _use_inplace(steps: list[Step], persistent: set[int]) -> None:
    """Switch CPU steps to their in-place variant where an input dies at the step, a CPU
    kernel made it fresh, and only CPU steps read it (a delegate may keep a reference)."""
    fresh: dict[int, bool] = {}
    cpu_only: dict[int, bool] = {}
    for st in steps:
        for i in st.inputs:
            cpu_only[i] = cpu_only.get(i, True) and st.kind == "cpu"
    for st in steps:
        p = st.prepared
        if st.kind == "cpu" and p is not None and p.inplace:
            for pos, fn in p.inplace.items():
                t = st.inputs[pos] if 0 <= pos < len(st.inputs) else -1
                if (t >= 0 and t not in persistent and t in st.frees and st.inputs.count(t) == 1
                        and fresh.get(t, False) and cpu_only.get(t, False)):
                    st.run = fn
                    break
        for o in st.outputs:
            fresh[o] = st.kind == "cpu" and p is not None and p.fresh


def _foldable(op: Operator, ins: list[TensorSpec | None], outs: list[TensorSpec]) -> bool:
    """A builtin, stateless node whose inputs are all constants: its outputs are constants too."""
    present = [s for s in ins if s is not None]
    return (
        not op.is_custom
        and op.name not in NEVER_FOLD
        and bool(present) and bool(outs)
        and all(s.data is not None for s in present)
        and all(numpy_dtype(s.dtype) is not None and not s.is_variable for s in (*present, *outs))
    )


def _seeds_variables(op: Operator, ins: list[TensorSpec | None], outs: list[TensorSpec]) -> bool:
    """A DEQUANTIZE of constants writing variable tensors (the converter's float16 initial LSTM
    states): LiteRT runs a DEQUANTIZE of a constant once, at the first invoke, so the variable
    starts from that value and the recurrent op then updates it in place across invokes."""
    present = [s for s in ins if s is not None]
    return (op.name == "DEQUANTIZE" and bool(present) and all(s.data is not None for s in present)
            and bool(outs) and all(s.is_variable for s in outs))


def _seed(op: Operator, p: Prepared, ins: list[TensorSpec | None], outs: list[TensorSpec],
          where: str) -> dict[int, np.ndarray]:
    """Run a ``_seeds_variables`` node once: the variables' first values (writable copies: the
    recurrent ops update them in place).  ``reset_all_variables`` sets them to zero, as LiteRT's
    reset does (the DEQUANTIZE does not run again there either)."""
    return {spec.index: np.array(value, copy=True) for spec, value in _run_once(op, p, ins, outs, where)}


def _run_once(op: Operator, p: Prepared, ins: list[TensorSpec | None], outs: list[TensorSpec],
              where: str) -> list[tuple[TensorSpec, np.ndarray]]:
    """Run a node on its constant inputs now: (output spec, checked value) pairs."""
    try:
        res = p.run([None if s is None else s.data for s in ins])
    except LiteGPUError as e:
        raise _renamed(e, where) from e
    except Exception as e:
        raise InterpreterError(f"{where} failed on its constant inputs: {describe_failure(e)}") from e
    res = () if res is None else res
    if len(res) != len(outs):
        raise InterpreterError(f"{where}: CPU kernel returned {len(res)} outputs, expected {len(outs)}")
    probe = Step("cpu", p.run, (), (), (op.index,), where)
    for spec, value in zip(outs, res, strict=True):
        _check_value(probe, spec, value)
    return [(spec, np.asarray(value)) for spec, value in zip(outs, res, strict=True)]


def _fold(op: Operator, p: Prepared, ins: list[TensorSpec | None], outs: list[TensorSpec], where: str) -> None:
    """Run a foldable node now and store its outputs as constant data in the specs, so later
    kernels see constants at prepare (a CONV_2D after DEQUANTIZE of fp16 weights can
    pre-arrange its weights) and ``invoke`` never runs the node."""
    for spec, arr in _run_once(op, p, ins, outs, where):
        arr.flags.writeable = False  # shared by every invoke: nobody may write into it
        spec.data = arr
        spec.shape = tuple(arr.shape)


def _without(groups: list[tuple[str, list[int]]], drop: set[int]) -> list[tuple[str, list[int]]]:
    """``groups`` minus the ``drop`` nodes, empty groups removed and neighbours of one backend merged."""
    out: list[tuple[str, list[int]]] = []
    for b, ns in groups:
        keep = [n for n in ns if n not in drop]
        if not keep:
            continue
        if out and out[-1][0] == b:
            out[-1][1].extend(keep)
        else:
            out.append((b, keep))
    return out


def _ranges(ns: Sequence[int]) -> str:
    return f"{ns[0]}-{ns[-1]}" if len(ns) > 1 else str(ns[0])


def _resolved_tensors(sg: Subgraph, specs: list[TensorSpec]) -> list[Tensor]:
    """IR tensors with the planned shapes (what delegates see).  A shape known only at
    run time keeps the file's shape and gets -1 signature entries."""
    out = []
    for t, s in zip(sg.tensors, specs, strict=True):
        if s.data is not None and t.data is None and not t.is_variable:  # folded at prepare
            out.append(dataclasses.replace(t, shape=tuple(s.data.shape), data=s.data, shape_signature=None))
        elif s.shape is None:
            sig = t.shape_signature if t.is_dynamic else tuple(-1 for _ in t.shape)
            out.append(dataclasses.replace(t, shape_signature=sig))
        elif tuple(s.shape) != tuple(t.shape):
            sig = t.shape_signature
            if sig is not None and len(sig) != len(s.shape):
                sig = None
            out.append(dataclasses.replace(t, shape=tuple(s.shape), shape_signature=sig, has_rank=True))
        elif not t.has_rank:  # a scalar the file did not flag: planning knows its rank (0)
            out.append(dataclasses.replace(t, has_rank=True))
        else:
            out.append(t)
    return out


def _consumers(sg: Subgraph) -> dict[int, list[int]]:
    cons: dict[int, list[int]] = {}
    for op in sg.operators:
        for i in op.inputs:
            if i >= 0:
                cons.setdefault(i, []).append(op.index)
    return cons


def partition_io(
    sg: Subgraph,
    node_indices: Sequence[int],
    specs: Sequence[TensorSpec],
    consumers: Mapping[int, Sequence[int]],
    graph_outputs: set[int],
) -> tuple[list[int], list[int]]:
    """(inputs, outputs) of a group of nodes: non-constant tensors read from outside,
    and tensors made inside that are read outside or are subgraph outputs."""
    inside = set(node_indices)
    produced: list[int] = []
    made: set[int] = set()
    inputs: list[int] = []
    seen: set[int] = set()
    for n in node_indices:
        op = sg.operators[n]
        for i in op.inputs:
            if i < 0 or i in made or i in seen or specs[i].data is not None:
                continue
            seen.add(i)
            inputs.append(i)
        for o in op.outputs:
            if o not in made:
                made.add(o)
                produced.append(o)
    outputs = [o for o in produced
               if o in graph_outputs or any(c not in inside for c in consumers.get(o, ()))]
    # A variable tensor read inside (a recurrent op's state) may be written back by the node that
    # reads it: the partition returns its value after the run under the variable's id (unchanged
    # where no node writes it), so the state carries over to the next invoke.
    outputs += [i for i in inputs if specs[i].is_variable and i not in outputs]
    return inputs, outputs


# --------------------------------------------------------------------------- code generation


_plan_counter = 0


def _codegen(plan: SubgraphPlan, profiled: bool = False) -> None:
    """Compile the steps into one straight-line function ``_run(v)``.

    Each line is mapped back to its step so a failure can name the node.
    ``profiled=True`` builds the timing variant ``_run(v, T, now)`` instead, which
    adds each step's duration to ``T[step]`` (stored apart from the plain one).
    """
    global _plan_counter
    _plan_counter += 1
    kind = "profiled plan" if profiled else "plan"
    name = f"<litegpu {kind} {_plan_counter}: subgraph {plan.subgraph.index}>"
    lines = ["def _run(v, T, now):", "    t = now()"] if profiled else ["def _run(v):"]
    line_steps = [-1, -1] if profiled else [-1]
    env: dict[str, Any] = {}
    for k, st in enumerate(plan.steps):
        fn = f"r{k}"
        env[fn] = st.run
        if st.kind == "cpu":
            args = ", ".join(f"v[{i}]" for i in st.inputs)
            if st.outputs:
                outs = ", ".join(f"v[{o}]" for o in st.outputs)
                lines.append(f"    {outs}, = {fn}([{args}])")
            else:
                lines.append(f"    {fn}([{args}])")
            line_steps.append(k)
        else:
            args = ", ".join(f"{i}: v[{i}]" for i in st.inputs)
            lines.append(f"    o = {fn}({{{args}}})")
            line_steps.append(k)
            if st.outputs:
                lines.append("    " + "; ".join(f"v[{o}] = o[{o}]" for o in st.outputs))
                line_steps.append(k)
        if st.frees:
            lines.append("    " + " = ".join(f"v[{f}]" for f in st.frees) + " = None")
            line_steps.append(k)
        if profiled:
            lines.append(f"    u = now(); T[{k}] += u - t; t = u")
            line_steps.append(k)
    if not plan.steps:
        lines.append("    return None")
        line_steps.append(-1)
    src = "\n".join(lines) + "\n"
    exec(compile(src, name, "exec"), env)  # noqa: S102 - source is generated from ints only
    if profiled:
        plan._fn_prof = env["_run"]
        plan._prof_line_steps = line_steps
        plan._prof_code_name = name
        if len(plan.profile_times) != len(plan.steps):
            plan.profile_reset()
        return
    plan._fn = env["_run"]
    plan._line_steps = line_steps
    plan._code_name = name
