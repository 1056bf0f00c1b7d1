"""The ``example`` backend: float32 elementwise ops on a pretend numpy "device".

Three pieces, as every litegpu backend has:

* :class:`ExampleBackend` (a :class:`litegpu.BackendSpec`): name, version,
  availability, devices, option schema, and the delegate factory;
* :class:`ExampleDelegate` (a :class:`litegpu.Delegate`): answers
  ``supports(node)`` for one node at a time and ``prepare(partition)`` once per
  partition the core's partitioner formed from the nodes it accepted;
* :class:`ExampleKernel` (a :class:`litegpu.DelegateKernel`): ``invoke``
  runs a prepared partition; it does all validation and planning at prepare
  so that invoke is a straight run through a list of numpy calls.

Device residency: a tensor produced by one partition of this delegate and
read only by a later partition of the same delegate is returned as a
:class:`DeviceArray` (not in ``PartitionSpec.host_outputs``) and comes back
unchanged as that later partition's input; only ``host_outputs`` are
"downloaded" to numpy.  ``ExampleDelegate.stats`` counts uploads and
downloads so tests can check that no needless transfer happens.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import litegpu
import numpy as np
from litegpu import Delegate, DelegateError, DelegateKernel, NodeView, Option, PartitionSpec, Support

__all__ = ["DeviceArray", "ExampleBackend", "ExampleDelegate", "ExampleKernel", "UNARY", "BINARY"]


def _logistic(x: np.ndarray) -> np.ndarray:
    # exp(-x) overflows to inf for very negative x; 1 / (1 + inf) = 0 is the right limit.
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


#: Unary ops: name -> numpy function.
UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "RELU": lambda x: np.maximum(x, 0),
    "RELU6": lambda x: np.clip(x, 0, 6),
    "RELU_N1_TO_1": lambda x: np.clip(x, -1, 1),
    "LOGISTIC": _logistic,
    "TANH": np.tanh,
    "ABS": np.abs,
    "NEG": np.negative,
    "EXP": np.exp,
    "SQUARE": np.square,
    "SQRT": np.sqrt,
    "RSQRT": lambda x: 1.0 / np.sqrt(x),
}

#: Binary ops (numpy broadcasting = TFLite's for these ops): name -> numpy function.
BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "ADD": np.add,
    "SUB": np.subtract,
    "MUL": np.multiply,
    "DIV": np.divide,
    "MAXIMUM": np.maximum,
    "MINIMUM": np.minimum,
    "SQUARED_DIFFERENCE": lambda a, b: np.square(a - b),
}

#: Ops with a ``fused_activation_function`` option.
_FUSED = frozenset({"ADD", "SUB", "MUL", "DIV"})
# TFLite ActivationFunctionType values this backend applies after the op.
_ACTIVATIONS: dict[int, Callable[[np.ndarray], np.ndarray] | None] = {
    0: None,
    1: UNARY["RELU"],
    2: UNARY["RELU_N1_TO_1"],
    3: UNARY["RELU6"],
}
_ACT_NAMES = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6", 4: "TANH", 5: "SIGN_BIT"}
_MAX_RANK = 6


class DeviceArray:
    """A tensor living on the example "device" (really host memory, kept apart from the caller's arrays)."""

    __slots__ = ("data", "owner")

    def __init__(self, data: np.ndarray, owner: int):
        self.data = data
        self.owner = owner  # id() of the delegate whose "memory" holds it

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.data.shape}, dtype={self.data.dtype})"


class _Step(NamedTuple):
    """One numpy call of a prepared partition.  (A NamedTuple, not a frozen dataclass: litegpu imports
    this module whenever it loads plugins, and a dataclass compiles its methods at import.)"""

    fn: Callable[..., np.ndarray]
    inputs: tuple[int, ...]
    output: int
    activation: Callable[[np.ndarray], np.ndarray] | None


def _check_node(node: NodeView) -> str:
    """Why this backend cannot run ``node`` ("" when it can).  Shared by supports() and prepare()."""
    op = node.op
    if op.is_custom:
        return f"custom op {op.name} is not implemented"
    if op.name not in UNARY and op.name not in BINARY:
        return "not an elementwise op this backend implements"
    arity = 1 if op.name in UNARY else 2
    present = [t for t in node.inputs if t is not None]
    if len(node.inputs) != arity or len(present) != arity or len(node.outputs) != 1:
        return f"expected {arity} input(s) and 1 output, got {len(present)} and {len(node.outputs)}"
    for t in (*present, *node.outputs):
        if t.dtype != "float32":
            return f"{t.dtype} tensor {t.name!r}: only float32 is supported"
        if any(d < 0 for d in t.shape):
            return f"tensor {t.name!r} has an unresolved dynamic shape {t.shape}"
        if len(t.shape) > _MAX_RANK:
            return f"rank {len(t.shape)} exceeds {_MAX_RANK}"
    if arity == 2:
        try:
            out_shape = np.broadcast_shapes(present[0].shape, present[1].shape)
        except ValueError:
            return f"shapes {present[0].shape} and {present[1].shape} do not broadcast"
        if tuple(out_shape) != tuple(node.outputs[0].shape):
            return f"output shape {node.outputs[0].shape} is not the broadcast shape {tuple(out_shape)}"
    act = int(op.options.get("fused_activation_function", 0)) if op.name in _FUSED else 0
    if act not in _ACTIVATIONS:
        return f"fused activation {_ACT_NAMES.get(act, act)} is not supported"
    return ""


class ExampleKernel(DelegateKernel):
    """One prepared partition: a list of numpy steps over a tensor-index environment."""

    def __init__(self, delegate: ExampleDelegate, partition: PartitionSpec, steps: list[_Step],
                 constants: dict[int, np.ndarray]):
        self._delegate = delegate
        self._steps = steps
        self._constants = constants  # "uploaded" once at prepare
        self._inputs = partition.inputs
        self._host = partition.host_outputs
        self._outputs = partition.outputs
        self._shapes = {t: tuple(partition.tensors[t].shape) for t in partition.outputs if t in partition.tensors}
        self._ops = [op.name for op in partition.operators]

    def invoke(self, inputs: Mapping[int, Any]) -> dict[int, Any]:
        d = self._delegate
        env = dict(self._constants)
        for t in self._inputs:
            value = inputs[t]
            if isinstance(value, DeviceArray):
                if value.owner != id(d):
                    raise DelegateError("a DeviceArray of another example delegate was passed in")
                env[t] = value.data  # already on the device: no transfer
            else:
                env[t] = d.upload(np.asarray(value))
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            for step in self._steps:
                out = step.fn(*(env[i] for i in step.inputs))
                if step.activation is not None:
                    out = step.activation(out)
                env[step.output] = out.astype(d.storage_dtype, copy=False)
        result: dict[int, Any] = {}
        for t in self._outputs:
            if t in self._host:
                result[t] = d.download(env[t]).reshape(self._shapes.get(t, env[t].shape))
            else:
                result[t] = DeviceArray(env[t], id(d))
        return result

    def to_host(self, value: Any) -> np.ndarray:
        return self._delegate.download(value.data if isinstance(value, DeviceArray) else value)

    def describe(self) -> dict[str, Any]:
        return {"ops": list(self._ops), "precision": self._delegate.options.get("precision", "fp32")}


class ExampleDelegate(Delegate):
    """Claims float32 elementwise nodes; prepares each partition into an :class:`ExampleKernel`."""

    name = "example"

    def __init__(self, options: Mapping[str, Any] | None = None):
        super().__init__(options)
        precision = self.options.get("precision", "fp32")
        # fp16 and fp16_fp32acc both store in half precision; fp16 also computes in it.
        self.storage_dtype = np.float32 if precision == "fp32" else np.float16
        self.compute_dtype = np.float16 if precision == "fp16" else np.float32
        self.copy_on_transfer = bool(self.options.get("copy_on_transfer", True))
        self.stats = {"uploads": 0, "downloads": 0, "partitions": 0}

    # -- transfers ---------------------------------------------------------
    def upload(self, array: np.ndarray) -> np.ndarray:
        self.stats["uploads"] += 1
        return np.array(array, dtype=self.compute_dtype, copy=self.copy_on_transfer)

    def download(self, array: np.ndarray) -> np.ndarray:
        self.stats["downloads"] += 1
        return np.array(array, dtype=np.float32, copy=True)

    # -- the delegate protocol ---------------------------------------------
    def supports(self, node: NodeView) -> Support:
        reason = _check_node(node)
        return Support.no(reason) if reason else Support.yes()

    def prepare(self, partition: PartitionSpec) -> DelegateKernel:
        tensors = partition.tensors or {i: t for i, t in enumerate(partition.subgraph.tensors)}
        steps: list[_Step] = []
        constants: dict[int, np.ndarray] = {}
        for op in partition.operators:
            view = NodeView(
                op=op,
                inputs=tuple(None if i < 0 else tensors.get(i, partition.subgraph.tensors[i]) for i in op.inputs),
                outputs=tuple(tensors.get(i, partition.subgraph.tensors[i]) for i in op.outputs),
                subgraph=partition.subgraph,
                model=partition.model,
            )
            reason = _check_node(view)
            if reason:  # the partitioner only hands over accepted nodes; guard anyway
                raise DelegateError(f"example backend cannot prepare op #{op.index} {op.name}: {reason}")
            for t in view.inputs:
                if t is not None and t.data is not None and t.index not in constants:
                    constants[t.index] = self.upload(t.data)
            fn = UNARY.get(op.name) or BINARY[op.name]
            act = int(op.options.get("fused_activation_function", 0)) if op.name in _FUSED else 0
            steps.append(_Step(fn, tuple(op.inputs), op.outputs[0], _ACTIVATIONS[act]))
        self.stats["partitions"] += 1
        return ExampleKernel(self, partition, steps, constants)

    def devices(self) -> list[str]:
        return ExampleBackend().devices()


class ExampleBackend(litegpu.BackendSpec):
    """The spec litegpu registers: ``litegpu.load_delegate("example", {...})``."""

    name = "example"
    version = "0.1.0"
    description = "numpy elementwise ops on a pretend device (litegpu example backend)"
    # Host memory underneath: backend "auto" (first available GPU backend) must not pick it.
    is_gpu = False
    option_schema = {
        "copy_on_transfer": Option.bool(
            True, doc="copy arrays when they enter or leave the device, as real device memory would"),
    }

    def availability(self) -> tuple[bool, str]:
        # A real backend would look for its driver here (cheaply, without raising).
        return True, ""

    def devices(self) -> list[str]:
        return [f"numpy {np.__version__} on the host (pretend device)"]

    def create_delegate(self, options: Mapping[str, Any]) -> Delegate:
        return ExampleDelegate(options)
