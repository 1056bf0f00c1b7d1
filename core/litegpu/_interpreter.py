"""``litegpu.Interpreter``: a drop-in for ``ai_edge_litert.interpreter.Interpreter``.

The public methods keep LiteRT's names, arguments, return types and error
types/messages, so code written for LiteRT runs unchanged; delegates are
litegpu :class:`~litegpu.Delegate` objects.  The work happens in
:mod:`litegpu._plan`: ``allocate_tensors`` builds a plan once and ``invoke``
runs it.

Each *entry* subgraph (the main subgraph 0, and any other subgraph a signature
runner targets) has its own state: current input shapes, plan, value list and
persistent input buffers.  Subgraphs called by control-flow ops are planned
lazily by :class:`~litegpu._plan.Runtime`.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from ._delegate import Delegate
from ._errors import ConfigError, InterpreterError, ModelError
from ._gc import without_gc
from ._ir import Model, SignatureDef, Subgraph, Tensor
from ._plan import Runtime, SubgraphPlan, build_plan, numpy_dtype, variable_initial

__all__ = ["Interpreter", "SignatureRunner"]

_RESOLVER_NAMES = frozenset({"AUTO", "BUILTIN", "BUILTIN_REF", "BUILTIN_WITHOUT_DEFAULT_DELEGATES"})

# numpy type reported in details for IR dtypes numpy has no type for (LiteRT's choices).
_DETAIL_TYPES: dict[str, type] = {
    "string": np.bytes_,
    "resource": np.object_,
    "variant": np.object_,
    "int4": np.int8,
    "bfloat16": np.uint16,
}


_F = TypeVar("_F", bound=Callable[..., Any])


def _locked(method: _F) -> _F:
    """Run ``method`` holding the interpreter's lock: one call at a time per interpreter, so
    threads sharing it never see a half-written value list (they used to get outputs that
    matched no thread's input)."""

    @functools.wraps(method)
    def wrapper(self: Interpreter, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _detail_type(dtype: str) -> type:
    t = _DETAIL_TYPES.get(dtype)
    if t is not None:
        return t
    try:
        return np.dtype(dtype).type
    except TypeError:
        return np.object_


def _tflite_type_name(dtype: Any) -> str:
    """LiteRT's name for a type in error messages (``FLOAT32``, ``STRING``...)."""
    if isinstance(dtype, str):
        return dtype.upper()
    dt = np.dtype(dtype)
    if dt.kind in "OSU":
        return "STRING"
    return dt.name.upper()


class _Entry:
    """The state of one entry subgraph: shapes asked for, plan, values."""

    def __init__(self, subgraph: Subgraph):
        self.subgraph = subgraph
        self.input_shapes: dict[int, tuple[int, ...]] = {
            i: tuple(int(d) for d in subgraph.tensors[i].shape) for i in subgraph.inputs
        }
        self.plan: SubgraphPlan | None = None
        self.vals: list[Any] | None = None
        self.ready = False
        self.invoked = False
        self.failed: str | None = None  # why the last invoke failed; outputs are invalid until a success

    def close(self) -> None:
        if self.plan is not None:
            self.plan.close()
        self.plan = self.vals = None
        self.ready = False


class Interpreter:
    """Runs a .tflite model: LiteRT's Python ``Interpreter`` API on litegpu.

    ``model_content`` may also be a :class:`litegpu._ir.Model` that was already read.
    ``experimental_delegates`` is a list of :class:`litegpu.Delegate`; nodes no
    delegate claims run on the CPU reference kernels.

    Threads: every method holds :attr:`lock` (a re-entrant lock) while it runs, so
    concurrent calls are serialised and never corrupt each other.  A sequence of
    calls (``set_tensor``, ``invoke``, ``get_tensor``) is not atomic by itself:
    hold ``with interpreter.lock:`` around it, use a :class:`SignatureRunner` call
    (one atomic call), or give each thread its own Interpreter.  One delegate
    object may be shared by interpreters used from different threads.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        model_content: bytes | bytearray | memoryview | Model | None = None,
        experimental_delegates: Sequence[Delegate] | None = None,
        num_threads: int | None = None,
        experimental_op_resolver_type: Any = None,
        experimental_preserve_all_tensors: bool = False,
        experimental_disable_delegate_clustering: bool = False,
        experimental_default_delegate_latest_features: bool = False,
        experimental_compress_quantization_zero_points: bool = False,
        experimental_disable_delegate_node_fusion: bool = False,
        experimental_force_delegate_node_profiling: bool = False,
    ):
        # The last five are LiteRT tuning switches for its own delegates; they are accepted
        # (so LiteRT code runs unchanged) and have no effect here.
        if experimental_op_resolver_type is not None:
            name = getattr(experimental_op_resolver_type, "name", experimental_op_resolver_type)
            if name not in _RESOLVER_NAMES:
                raise ValueError(f"Unrecognized passed in op resolver type: {experimental_op_resolver_type}")
        if num_threads is not None:
            if not isinstance(num_threads, int) or isinstance(num_threads, bool):
                raise ValueError("type of num_threads should be int")
            if num_threads < 1:
                raise ValueError("num_threads should >= 1")
        if model_content is not None and not isinstance(model_content, (bytes, bytearray, memoryview, Model)):
            # LiteRT raises TypeError here; loading a str as a path would hide the mix-up.
            hint = " (a path goes in model_path)" if isinstance(model_content, (str, os.PathLike)) else ""
            raise TypeError(f"model_content must be the model's bytes, got {type(model_content).__name__}{hint}")
        if isinstance(model_path, (bytes, bytearray)):
            model_path = os.fsdecode(bytes(model_path))  # LiteRT accepts a bytes path
        if model_path is not None and not isinstance(model_path, (str, os.PathLike)):
            raise TypeError(f"model_path must be a str, bytes or os.PathLike path, got {type(model_path).__name__}")
        if model_path and not model_content:
            model = _read(os.fspath(model_path))
        elif model_content and not model_path:
            model = model_content if isinstance(model_content, Model) else _read(model_content)
        elif not model_content and not model_path:
            raise ValueError("`model_path` or `model_content` must be specified.")
        else:
            raise ValueError("Can't both provide `model_path` and `model_content`")
        if not model.subgraphs:
            raise ModelError("No subgraph in the model.")

        delegates = list(experimental_delegates or ())
        names: set[str] = set()
        for k, d in enumerate(delegates):
            if not isinstance(d, Delegate):
                raise ConfigError(
                    f"experimental_delegates[{k}] is a {type(d).__module__}.{type(d).__name__}, not a "
                    "litegpu.Delegate (create one with litegpu.load_delegate)")
            if getattr(d, "passthrough", False):
                continue  # the "cpu" pseudo-backend: claims nothing
            if d.name == "cpu" or d.name in names:
                raise ConfigError(
                    f"experimental_delegates[{k}] is named {d.name!r}, which is "
                    + ("reserved for the CPU interpreter" if d.name == "cpu" else "already taken by another delegate"))
            names.add(d.name)
        delegates = [d for d in delegates if not getattr(d, "passthrough", False)]
        self._model = model
        self._delegates = delegates
        self._experimental_compress_quantization_zero_points = experimental_compress_quantization_zero_points
        self._preserve = bool(experimental_preserve_all_tensors)
        self._runtime = Runtime(model, num_threads=num_threads or 1,
                                preserve_all_tensors=self._preserve)
        self.lock = threading.RLock()
        self._main = _Entry(model.subgraphs[0])
        self._entries: dict[int, _Entry] = {0: self._main}

    @property
    def experimental_compress_quantization_zero_points(self) -> bool:
        return self._experimental_compress_quantization_zero_points

    # ------------------------------------------------------------------ lifecycle

    def __del__(self) -> None:
        for e in getattr(self, "_entries", {}).values():
            e.close()
        rt = getattr(self, "_runtime", None)
        if rt is not None:
            rt.close()

    @_locked
    def set_partition_options(self, options: Any) -> None:
        """litegpu extension: partition limits (``PartitionOptions`` or a mapping with
        ``max_delegated_partitions``, ``min_nodes_per_partition``, ``fold_constants``,
        ``log_unsupported_ops``).  Takes effect at the next ``allocate_tensors``."""
        from ._partition import PartitionOptions

        self._runtime.partition_options = PartitionOptions.from_mapping(options)
        self._runtime.fold_constants = self._runtime.partition_options.fold_constants
        for entry in self._entries.values():
            entry.ready = False

    @_locked
    def allocate_tensors(self) -> None:
        """Plan the model for the current input shapes (no-op when nothing changed)."""
        self._allocate(self._main)

    @_locked
    def invoke(self) -> None:
        """Run the model on the values set with ``set_tensor``."""
        self._invoke(self._main)

    @without_gc  # a plan is thousands of objects made in one go (litegpu._gc)
    def _allocate(self, entry: _Entry) -> None:
        if entry.ready:
            return
        sg = entry.subgraph
        for k, i in enumerate(sg.inputs):
            t = sg.tensors[i]
            if t.dtype == "string":
                raise ModelError(
                    f"Tensor {i} ('{t.name}', input {k}) has type STRING: string tensors are not "
                    "supported by litegpu")
        plan = build_plan(self._runtime, sg.index, [entry.input_shapes[i] for i in sg.inputs],
                          delegates=self._delegates)
        vals = plan.template.copy()
        old = entry.vals
        for i in sg.inputs:
            dt = numpy_dtype(sg.tensors[i].dtype)
            shape = entry.input_shapes[i]
            if dt is None:
                continue
            prev = old[i] if old is not None else None
            # Keep an input buffer whose shape did not change: values set before
            # re-allocation survive, and views from tensor() stay valid.
            if isinstance(prev, np.ndarray) and prev.shape == shape and prev.dtype == dt:
                vals[i] = prev
            else:
                vals[i] = self._input_array(plan, i, shape, dt)
        if entry.plan is not None:
            entry.plan.close()
        entry.plan, entry.vals = plan, vals
        entry.ready, entry.invoked = True, False

    @staticmethod
    def _input_array(plan: Any, i: int, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
        """Zeros for input ``i``: in the host memory the delegate reading it offers where it offers
        some (``DelegateKernel.input_buffer``: its invoke then sends the value without a host copy),
        else a new array."""
        buf = plan.input_buffer(i)
        size = int(np.prod(shape, dtype=np.int64))
        if isinstance(buf, np.ndarray) and buf.dtype == dt and buf.size == size and buf.flags.c_contiguous:
            a = buf.reshape(shape)
            a[...] = 0
            return a
        return np.zeros(shape, dt)

    def _invoke(self, entry: _Entry) -> None:
        if not entry.ready:
            raise InterpreterError("Invoke called on model that is not ready.")
        entry.failed = None
        try:
            if self._profile:
                entry.plan.run_profiled(entry.vals)
            else:
                entry.plan.run(entry.vals)
        except BaseException as e:
            # The value list is half written: reading it would return a mix of this run and the
            # previous one (get_tensor used to hand back the previous outputs silently).
            entry.failed = f"{type(e).__name__}: {e}"
            raise
        entry.invoked = True

    # ------------------------------------------------------------------ profiling

    #: Set to True (on an instance) to time every step of the main subgraph's invoke:
    #: each CPU node, and each delegate partition as a whole.  Off, invoke runs the
    #: plain generated function (one attribute test per invoke, nothing per node).
    _profile: bool = False

    @_locked
    def _profile_records(self) -> list[dict[str, Any]]:
        """Per-step timings gathered while ``_profile`` was on, in run order.

        Each record: ``step``, ``kind`` (``cpu``/``delegate``), ``backend``, ``label``,
        ``node_indices``, ``op_names``, ``runs`` (profiled invokes) and ``total_s``.
        """
        plan = self._main.plan
        if plan is None:
            return []
        seg_of = {n: seg.backend for seg in plan.segments for n in seg.node_indices}
        ops = plan.subgraph.operators
        times = plan.profile_times or [0.0] * len(plan.steps)
        out = []
        for k, st in enumerate(plan.steps):
            out.append({
                "step": k,
                "kind": st.kind,
                "backend": seg_of.get(st.node_indices[0], "cpu") if st.node_indices else "cpu",
                "label": st.label,
                "node_indices": list(st.node_indices),
                "op_names": [ops[n].name for n in st.node_indices],
                "runs": plan.profile_runs,
                "total_s": float(times[k]),
            })
        return out

    @_locked
    def _profile_reset(self) -> None:
        """Zero the per-step timings (of the current plan)."""
        if self._main.plan is not None:
            self._main.plan.profile_reset()

    # ------------------------------------------------------------------ tensors

    def _tensor(self, entry: _Entry, index: Any) -> Tensor:
        sg = entry.subgraph
        i = _index(index, "tensor_index")
        if not 0 <= i < len(sg.tensors):
            raise ValueError(f"Invalid tensor index {index} exceeds max tensor index {len(sg.tensors)}")
        return sg.tensors[i]

    def _shape(self, entry: _Entry, i: int) -> tuple[int, ...]:
        """The current shape of tensor ``i``, as LiteRT's details report it."""
        if i in entry.input_shapes:
            return entry.input_shapes[i]
        plan = entry.plan
        if plan is not None:
            s = plan.specs[i].shape
            if s is not None:
                return s
            v = entry.vals[i] if entry.vals is not None else None
            if v is not None and hasattr(v, "shape"):
                return tuple(v.shape)
        return tuple(entry.subgraph.tensors[i].shape)

    @_locked
    def set_tensor(self, tensor_index: int, value: Any) -> None:
        """Copy ``value`` into tensor ``tensor_index`` (an input, usually)."""
        self._set(self._main, tensor_index, value)

    def _set(self, entry: _Entry, tensor_index: Any, value: Any) -> None:
        t = self._tensor(entry, tensor_index)
        i = t.index
        if t.dtype == "string":
            raise ModelError(
                f"Cannot set tensor: tensor {i} ('{t.name}') has type STRING: string tensors are not "
                "supported by litegpu")
        value = np.asarray(value)
        want = numpy_dtype(t.dtype)
        if want is None or value.dtype != want:
            raise ValueError(
                f"Cannot set tensor: Got value of type {_tflite_type_name(value.dtype)} but expected type "
                f"{_tflite_type_name(t.dtype)} for input {i}, name: {t.name} ")
        shape = self._shape(entry, i)
        if value.ndim != len(shape):
            raise ValueError(
                f"Cannot set tensor: Dimension mismatch. Got {value.ndim} but expected {len(shape)} "
                f"for input {i}.")
        for d, (got, exp) in enumerate(zip(value.shape, shape, strict=True)):
            if got != exp:
                raise ValueError(
                    f"Cannot set tensor: Dimension mismatch. Got {got} but expected {exp} for dimension "
                    f"{d} of input {i}.")
        vals = entry.vals
        cur = vals[i] if vals is not None else None
        if vals is None or (i in entry.input_shapes and not (
                isinstance(cur, np.ndarray) and cur.shape == shape)):
            raise ValueError("Cannot set tensor: Tensor is unallocated. Try calling allocate_tensors() first")
        if i in entry.input_shapes or (t.is_variable and isinstance(cur, np.ndarray)):
            np.copyto(cur, value)  # in place: tensor() views and kernels see the new value
        else:
            vals[i] = value.copy()

    @_locked
    def get_tensor(self, tensor_index: int, subgraph_index: int = 0) -> np.ndarray:
        """A copy of the value of tensor ``tensor_index``."""
        return np.array(self._value(self._entry_for(subgraph_index), tensor_index), copy=True)

    def tensor(self, tensor_index: int):
        """A function returning a numpy view of the tensor's current buffer (LiteRT's tensor())."""
        return lambda: self._value(self._main, tensor_index)

    def _entry_for(self, subgraph_index: int) -> _Entry:
        e = self._entries.get(int(subgraph_index))
        if e is None:
            n = len(self._model.subgraphs)
            if not 0 <= int(subgraph_index) < n:
                raise ValueError(f"subgraph_index is out of range: {subgraph_index} for the model, "
                                 f"which has {n} subgraphs.")
            e = self._entries[int(subgraph_index)] = _Entry(self._model.subgraphs[int(subgraph_index)])
        return e

    @_locked
    def _value(self, entry: _Entry, tensor_index: Any) -> Any:
        t = self._tensor(entry, tensor_index)
        i = t.index
        if entry.vals is None:
            raise ValueError("Tensor data is null. Run allocate_tensors() first")
        if entry.failed is not None and i not in entry.input_shapes and t.data is None:
            raise InterpreterError(
                f"Tensor {i} ('{t.name}') has no valid value: the last invoke failed ({entry.failed[:300]}); "
                "invoke again successfully before reading results")
        v = entry.vals[i]
        if v is not None:
            v = entry.plan.to_host(i, v)
            return v if isinstance(v, np.ndarray) else np.asarray(v)
        if t.data is not None:
            return t.data
        plan = entry.plan
        folded = plan.deferred_value(i) if plan is not None else None
        if folded is not None:  # a fold a warm start left out: folded now, as the cold start did at prepare
            return folded
        if entry.invoked and plan is not None and i not in plan.persistent:
            if self._preserve:  # every CPU-computed tensor is kept: this one never left a delegate
                raise ValueError(
                    f"Tensor {i} ('{t.name}') is internal to a delegated partition: delegates keep their "
                    "intermediates on the device (as in LiteRT); run without the delegate to read it")
            raise ValueError(
                f"Tensor {i} ('{t.name}') is an intermediate tensor whose memory was reused after its "
                "last use; create the Interpreter with experimental_preserve_all_tensors=True to read it")
        dt = numpy_dtype(t.dtype)
        if dt is None:
            raise ValueError(f"Tensor {i} ('{t.name}') of type {t.dtype} has no value")
        # Not computed yet (before the first invoke): LiteRT returns uninitialized memory.
        return np.zeros(self._shape(entry, i), dt)

    @_locked
    def resize_tensor_input(self, input_index: int, tensor_size: Any, strict: bool = False) -> None:
        """Change the shape of an input; call ``allocate_tensors`` afterwards."""
        self._resize(self._main, input_index, tensor_size, strict)

    def _resize(self, entry: _Entry, input_index: Any, tensor_size: Any, strict: bool) -> None:
        sg = entry.subgraph
        i = _index(input_index, "input_index")
        if not 0 <= i < len(sg.tensors):
            raise InterpreterError(f"Invalid tensor index {i}: the subgraph has {len(sg.tensors)} tensors")
        if i not in entry.input_shapes:
            raise InterpreterError(
                f"Tensor {i} ('{sg.tensors[i].name}') is not an input of the model; only inputs can be resized")
        shape = np.array(tensor_size, dtype=np.int32)
        if shape.ndim != 1:
            raise ValueError(f"Shape should be 1D instead of {shape.ndim}.")
        new = tuple(int(d) for d in shape)
        if any(d < 0 for d in new):
            raise InterpreterError(f"Cannot resize tensor {i} to {list(new)}: dimensions must be >= 0")
        cur = entry.input_shapes[i]
        if strict:
            t = sg.tensors[i]
            sig = t.shape_signature if t.shape_signature is not None else t.shape
            if len(sig) != len(new):
                raise InterpreterError(
                    f"Cannot resize tensor {i} from rank {len(sig)} to rank {len(new)}: "
                    "ResizeInputTensorStrict only allows mutating unknown dimensions identified by -1.")
            for d, (s, c, n) in enumerate(zip(sig, cur, new, strict=True)):
                if s != -1 and c != n:
                    raise InterpreterError(
                        f"Attempting to resize dimension {d} of tensor {i} with value {c} to {n}. "
                        "ResizeInputTensorStrict only allows mutating unknown dimensions identified by -1.")
        if new == cur:
            return
        entry.input_shapes[i] = new
        entry.ready = False

    @_locked
    def reset_all_variables(self) -> None:
        """Reset every variable tensor to zero (int8: its zero point), like LiteRT.

        Resource variables (VAR_HANDLE) and CALL_ONCE state are kept, as LiteRT does.
        """
        plans = [e.plan for e in self._entries.values() if e.plan is not None]
        for e in self._entries.values():
            if e.plan is None or e.vals is None:
                continue
            for v in e.plan.variables:
                self._reset_variable(e.plan, e.vals, v)
        for p in self._runtime.callee_plans():
            plans.append(p)
            for v in p.variables:
                self._reset_variable(p, p.template, v)
        for p in plans:
            for hook in p.reset_hooks:
                hook()

    @staticmethod
    def _reset_variable(plan: SubgraphPlan, vals: list[Any], i: int) -> None:
        init = variable_initial(plan.specs[i])
        cur = vals[i]
        if init is None:
            return
        if isinstance(cur, np.ndarray) and cur.shape == init.shape and cur.flags.writeable:
            np.copyto(cur, init)
        else:
            vals[i] = init

    # ------------------------------------------------------------------ details

    @_locked
    def _tensor_details(self, tensor_index: int, subgraph_index: int) -> dict[str, Any]:
        entry = self._entry_for(subgraph_index)
        t = self._tensor(entry, tensor_index)
        shape = self._shape(entry, t.index)
        sig = t.shape_signature if t.shape_signature is not None else shape
        q = t.quantization
        if q is not None:
            scales = np.asarray(q.scale, dtype=np.float32).reshape(-1)
            zps = np.asarray(q.zero_point).astype(np.int32).reshape(-1)
            qdim = int(q.quantized_dimension)
        else:
            scales, zps, qdim = np.zeros(0, np.float32), np.zeros(0, np.int32), 0
        quant = (float(scales[0]), int(zps[0])) if scales.size == 1 and zps.size >= 1 else (0.0, 0)
        return {
            "name": t.name,
            "index": t.index,
            "shape": np.array(shape, dtype=np.int32),
            "shape_signature": np.array(sig, dtype=np.int32),
            "dtype": _detail_type(t.dtype),
            "quantization": quant,
            "quantization_parameters": {
                "scales": scales,
                "zero_points": zps,
                "quantized_dimension": qdim,
                "block_size": 0,
            },
            "sparsity_parameters": _sparsity_details(t),
        }

    def get_input_details(self) -> list[dict[str, Any]]:
        return [self._tensor_details(i, 0) for i in self._main.subgraph.inputs]

    def get_output_details(self) -> list[dict[str, Any]]:
        return [self._tensor_details(i, 0) for i in self._main.subgraph.outputs]

    def get_tensor_details(self, subgraph_index: int = 0) -> list[dict[str, Any]]:
        n = len(self._model.subgraphs)
        if not 0 <= subgraph_index < n:
            raise ValueError(f"subgraph_index is out of range: {subgraph_index} for the model, "
                             f"which has {n} subgraphs.")
        sg = self._model.subgraphs[subgraph_index]
        return [self._tensor_details(t.index, subgraph_index) for t in sg.tensors]

    def num_subgraphs(self) -> int:
        return len(self._model.subgraphs)

    def _get_ops_details(self) -> list[dict[str, Any]]:
        sg = self._main.subgraph
        out = []
        for op in sg.operators:
            out.append({
                "index": op.index,
                "op_name": op.name,
                "inputs": np.array(op.inputs, dtype=np.int32),
                "outputs": np.array(op.outputs, dtype=np.int32),
                "operand_types": [_detail_type(sg.tensors[i].dtype) for i in op.inputs if i >= 0],
                "result_types": [_detail_type(sg.tensors[i].dtype) for i in op.outputs if i >= 0],
            })
        return out

    @_locked
    def get_execution_plan(self) -> list[dict[str, Any]]:
        """Which backend runs which nodes of the main subgraph (plans the model if needed)."""
        self.allocate_tensors()
        return [s.as_dict() for s in self._main.plan.segments]

    # ------------------------------------------------------------------ signatures

    def _signature(self, key: str) -> SignatureDef | None:
        for s in self._model.signatures:
            if s.key == key:
                return s
        return None

    def _get_full_signature_list(self) -> dict[str, dict[str, dict[str, int]]]:
        # LiteRT keeps signature inputs/outputs in a name-ordered map.
        return {
            s.key: {
                "inputs": {k: int(s.inputs[k]) for k in sorted(s.inputs)},
                "outputs": {k: int(s.outputs[k]) for k in sorted(s.outputs)},
            }
            for s in self._model.signatures
        }

    def get_signature_list(self) -> dict[str, dict[str, list[str]]]:
        return {k: {"inputs": list(v["inputs"]), "outputs": list(v["outputs"])}
                for k, v in self._get_full_signature_list().items()}

    def get_signature_runner(self, signature_key: str | None = None) -> SignatureRunner:
        if signature_key is None:
            sigs = self._model.signatures
            if len(sigs) != 1:
                raise ValueError(
                    f"SignatureDef signature_key is None and model has {len(sigs)} Signatures. "
                    "None is only allowed when the model has 1 SignatureDef")
            signature_key = sigs[0].key
        return SignatureRunner(interpreter=self, signature_key=signature_key)

    @_locked
    def _run_signature(self, sig: SignatureDef, kwargs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        if not 0 <= sig.subgraph_index < len(self._model.subgraphs):
            raise ModelError(f"signature {sig.key!r} refers to missing subgraph {sig.subgraph_index}")
        entry = self._entry_for(sig.subgraph_index)
        values = {name: np.asarray(v) for name, v in kwargs.items()}
        for name, v in values.items():
            self._resize(entry, sig.inputs[name], v.shape, False)
        self._allocate(entry)
        for name, v in values.items():
            self._set(entry, sig.inputs[name], v)
        self._invoke(entry)
        return {name: np.array(self._value(entry, sig.outputs[name]), copy=True)
                for name in sorted(sig.outputs)}


class SignatureRunner:
    """Runs one SignatureDef by its input/output names (``interpreter.get_signature_runner(key)``)."""

    def __init__(self, interpreter: Interpreter | None = None, signature_key: str | None = None):
        if not interpreter:
            raise ValueError("None interpreter provided.")
        if not signature_key:
            raise ValueError("None signature_key provided.")
        sig = interpreter._signature(signature_key)
        if sig is None:
            raise ValueError(f'Invalid signature_key provided: "{signature_key}".')
        self._interpreter = interpreter
        self._signature_key = signature_key
        self._sig = sig
        self._subgraph_index = sig.subgraph_index
        self._inputs = {k: int(sig.inputs[k]) for k in sorted(sig.inputs)}
        self._outputs = {k: int(sig.outputs[k]) for k in sorted(sig.outputs)}

    def __call__(self, **kwargs: Any) -> dict[str, np.ndarray]:
        if len(kwargs) != len(self._inputs):
            raise ValueError(
                "Invalid number of inputs provided for running a SignatureDef, "
                f"expected {len(self._inputs)} vs provided {len(kwargs)}")
        for name in kwargs:
            if name not in self._inputs:
                raise ValueError(f"Invalid Input name ({name}) for SignatureDef")
        return self._interpreter._run_signature(self._sig, kwargs)

    def get_input_details(self) -> dict[str, dict[str, Any]]:
        it = self._interpreter
        return {k: it._tensor_details(i, self._subgraph_index) for k, i in self._inputs.items()}

    def get_output_details(self) -> dict[str, dict[str, Any]]:
        it = self._interpreter
        return {k: it._tensor_details(i, self._subgraph_index) for k, i in self._outputs.items()}


def _index(value: Any, name: str) -> int:
    """A tensor index as LiteRT's binding takes it: an int (numpy integers and bools included);
    anything else is a TypeError (``set_tensor(0.5, x)`` used to write tensor 0)."""
    if isinstance(value, (int, np.integer)):
        return int(value)
    raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r:.40}")


@without_gc  # the reader makes thousands of small objects (litegpu._gc)
def _read(source: Any) -> Model:
    from ._reader import read_model  # the reader lives in its own module

    return read_model(source)


def _sparsity_details(t: Tensor) -> dict[str, Any]:
    sp = t.sparsity
    if sp is None:
        return {}
    dims = []
    for dm in sp.dim_metadata:
        if dm.format == 0:
            dims.append({"format": 0, "dense_size": int(dm.dense_size)})
        else:
            dims.append({
                "format": int(dm.format),
                "array_segments": np.asarray(dm.array_segments, dtype=np.int32),
                "array_indices": np.asarray(dm.array_indices, dtype=np.int32),
            })
    return {
        "traversal_order": np.array(sp.traversal_order, dtype=np.int32),
        "block_map": np.array(sp.block_map, dtype=np.int32),
        "dim_metadata": dims,
    }
