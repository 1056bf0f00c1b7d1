"""The mutable GPU graph the compiler passes rewrite, and the compiled plan format.

Two stages live here:

* :class:`GpuGraph` -- built from a delegate partition (:meth:`GpuGraph.from_partition`)
  or straight from an IR subgraph (:meth:`GpuGraph.from_subgraph`).  It holds
  :class:`GpuTensor` s (shapes normalised to 4-D BHWC) and :class:`GpuNode` s in
  execution order.  Passes (``_passes``) rewrite it in place.
* :class:`GpuPlan` -- what :func:`litegpu.gpu._runtime.compile_partition` produces
  for a runtime: one :class:`GpuOp` per kernel launch (template kernel name,
  parameters, re-laid-out constants), one :class:`PlanTensor` per device
  buffer (shape, storage type, layout, arena offset), and the report of every
  pass.  ``docs/gpu-compiler.md`` documents the format field by field.

Shapes.  Every tensor gets a 4-D ``shape`` in BHWC order, made from its IR
shape by inserting unit dimensions (TFLite GPU does the same): rank 0 ->
``(1, 1, 1, 1)``, ``[C]`` -> ``(1, 1, 1, C)``, ``[B, C]`` -> ``(B, 1, 1, C)``,
``[B, W, C]`` -> ``(B, 1, W, C)``, ``[B, H, W, C]`` unchanged.  Inserting unit
dimensions keeps the row-major element order, so the host converts between
the IR shape and the 4-D shape with a plain reshape.  Rank > 4 is refused.

Node attributes.  ``GpuNode.attrs`` starts as a copy of the IR operator's
options (snake_case keys).  While ``GpuNode.bhwc`` is False the axis-valued
attributes (``axis``, reduction axes, permutations, slice begins...) are in
the IR rank's terms; the ``normalise_bhwc`` pass rewrites them into 4-D BHWC
terms (see that pass for the keys it writes) and sets ``bhwc``.  Lowering
requires ``bhwc``.  The IR's ``fused_activation_function`` is moved into the
node's :attr:`GpuNode.epilogue` at build time, so there is one representation
of "what happens to the result before it is stored".
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field, replace
from typing import Any

import numpy as np

from .._delegate import PartitionSpec
from .._errors import DelegateError
from .._ir import Operator, Quantization, Sparsity, Subgraph, Tensor
from .._records import dataclass  # no compiled methods: a warm start imports this module

__all__ = [
    "QDQ_OP",
    "DW_PW_OP",
    "PW_DW_OP",
    "SE_GATE_OP",
    "HEADS_OP",
    "ACTIVATION_NAMES",
    "Epilogue",
    "residual_index",
    "QuantView",
    "GpuTensor",
    "GpuNode",
    "GpuGraph",
    "PlanTensor",
    "GpuOp",
    "GpuPlan",
    "bhwc_shape",
    "bhwc_axes",
    "Report",
]

#: Ops the passes create (not TFLite builtins): a copy that snaps to a quantized grid (``float_view``)
#: a depthwise conv fused into the 1x1 conv reading it (``fuse_dw_pw``), and a squeeze-and-excitation gate
#: (global average, one or two 1x1 layers with their activations: ``fuse_squeeze_excite``).
QDQ_OP = "QUANTIZE_AND_DEQUANTIZE"
DW_PW_OP = "DW_PW_CONV_2D"
#: a 1x1 conv fused into the depthwise conv it feeds, with or without the 1x1 conv after it (``fuse_pw_dw``)
PW_DW_OP = "PW_DW_CONV_2D"
SE_GATE_OP = "SQUEEZE_EXCITE_GATE"
#: fully connected / 1x1 / full-window convolutions reading one input, one launch (``fuse_sibling_heads``)
HEADS_OP = "SIBLING_HEADS"

#: TFLite ActivationFunctionType codes -> the epilogue op that implements them.
ACTIVATION_NAMES = {1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6", 4: "TANH", 5: "SIGN_BIT"}

#: fused activation codes LiteRT's range-based float kernels ignore (TANH, SIGN_BIT)
_RANGE_FREE_ACTS = frozenset({4, 5})

#: ops whose ``fused_activation_function`` is internal to the op (kept in attrs)
_CELL_OPS = frozenset({"LSTM", "UNIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_LSTM", "RNN",
                       "UNIDIRECTIONAL_SEQUENCE_RNN", "BIDIRECTIONAL_SEQUENCE_RNN", "SVDF"})

#: A pass returns a list of human-readable lines for ``litegpu inspect``.
Report = list[str]


def bhwc_shape(shape: Sequence[int]) -> tuple[int, int, int, int]:
    """The 4-D BHWC shape of an IR shape of rank <= 4 (unit dimensions inserted, order kept)."""
    s = tuple(int(d) for d in shape)
    r = len(s)
    if r == 0:
        return (1, 1, 1, 1)
    if r == 1:
        return (1, 1, 1, s[0])
    if r == 2:
        return (s[0], 1, 1, s[1])
    if r == 3:
        return (s[0], 1, s[1], s[2])
    if r == 4:
        return s  # type: ignore[return-value]
    raise DelegateError(f"rank {r} tensors are not supported on the GPU path (shape {s})")


_AXIS_MAP = {0: (), 1: (3,), 2: (0, 3), 3: (0, 2, 3), 4: (0, 1, 2, 3)}


def bhwc_axes(rank: int) -> tuple[int, ...]:
    """``bhwc_axes(r)[a]`` is the BHWC axis that IR axis ``a`` of a rank-``r`` tensor becomes."""
    if rank not in _AXIS_MAP:
        raise DelegateError(f"rank {rank} tensors are not supported on the GPU path")
    return _AXIS_MAP[rank]


@dataclass(frozen=True)
class Epilogue:
    """One step applied, in order, to a node's result before it is stored.

    ``op`` is one of the unary activations (``RELU``, ``RELU6``,
    ``RELU_N1_TO_1``, ``TANH``, ``LOGISTIC``, ``SIGN_BIT``, ``HARD_SWISH``,
    ``LEAKY_RELU`` with ``alpha``, ``ELU``), ``PRELU`` (``operand`` = the
    constant alpha tensor, broadcast BHWC-wise), or a binary ``ADD``/``SUB``/
    ``MUL``/``DIV``/``MAXIMUM``/``MINIMUM`` with ``operand`` = a constant or a
    tensor computed elsewhere in the graph (a residual), broadcast BHWC-wise.
    ``reverse`` (binary only) means ``operand op value`` instead of
    ``value op operand``; it only matters for SUB and DIV.  ``QDQ`` snaps the
    value to the grid of a quantized tensor: ``q`` = (scale, zero point, qmin,
    qmax), see :class:`QuantView`.  ``zero_extend`` (binary only): the operand has the
    result's B/H/W but fewer channels and reads as zero past them (a zero channel ``PAD``
    merged into the read, ``_passes/channel_pad``); otherwise it is broadcast.  ``pool`` = k > 1
    (binary only): the operand is the ``k x k``, stride ``k`` max pool (every window in bounds) of the
    tensor named, a MAX_POOL_2D merged into the read (``_passes/pool_residual``); ``zero_extend`` then
    applies to the pooled value.  ``resize`` = (align_corners, half_pixel_centers) (conv residuals only): the
    operand is the RESIZE_BILINEAR of the tensor named to the result's H x W, with TFLite's coordinate rules, a
    resize merged into the read (``_passes/resize_read``).
    """

    op: str
    operand: int | None = None
    reverse: bool = False
    alpha: float | None = None
    q: tuple[float, int, int, int] | None = None
    zero_extend: bool = False
    pool: int = 0
    resize: tuple[bool, bool] | None = None

    def describe(self) -> str:
        if self.q is not None:
            return f"qdq({self.q[0]:g},{self.q[1]})"
        if self.operand is None:
            return self.op.lower() + (f"({self.alpha:g})" if self.alpha is not None else "")
        t = f"maxpool{self.pool}(t{self.operand})" if self.pool else f"t{self.operand}"
        t = f"bilinear({t})" if self.resize is not None else t
        t = f"zext({t})" if self.zero_extend else t
        a, b = (t, "x") if self.reverse else ("x", t)
        return f"{self.op.lower()}({a},{b})"


def residual_index(steps: Sequence[Epilogue]) -> int:
    """Index of the residual step of a conv-like node's epilogue (the first ADD/MUL with an operand), else -1:
    with ``attrs["store_pre"]`` the node's ``outputs[1]`` holds its value just before that step
    (``_passes/fuse.fuse_shared_residual``)."""
    return next((i for i, e in enumerate(steps) if e.op in ("ADD", "MUL") and e.operand is not None), -1)


@dataclass(frozen=True)
class QuantView:
    """The quantization of a tensor the GPU holds as floats (the *float view*, ``_passes/float_view``).

    ``dtype`` is the host's integer type (``int8``/``uint8``/``int16``); the
    device holds ``scale * (q - zero_point)``.
    """

    dtype: str
    scale: float
    zero_point: int

    @property
    def qrange(self) -> tuple[int, int]:
        info = np.iinfo(self.dtype)
        return int(info.min), int(info.max)

    @property
    def qdq(self) -> tuple[float, int, int, int]:
        """The :class:`Epilogue` ``q`` tuple snapping a value to this tensor's grid."""
        return (self.scale, self.zero_point, *self.qrange)


@dataclass
class GpuTensor:
    """A tensor of the GPU graph.

    ``shape`` is the 4-D BHWC shape; ``ir_shape`` the IR shape (rank <= 4) the
    host sees.  ``data`` is the constant value shaped like ``ir_shape`` (after
    the constant-folding pass, always dense float32/float16 or integer data;
    before it, possibly a quantized or sparse buffer as stored in the model).
    ``is_input``/``is_output`` mark the partition boundary; ``host_output``
    tells an output that must come back to the host as numpy.  ``qview`` is
    set on a quantized tensor turned into a float tensor (its ``dtype`` is
    then ``float32``; the host side keeps ``qview.dtype``).  ``fp32`` keeps a
    float tensor in float32 storage in the fp16 precision modes (set by the
    ``mixed_precision`` pass, ``_precision``).
    """

    id: int
    name: str
    shape: tuple[int, int, int, int]
    dtype: str
    ir_shape: tuple[int, ...]
    data: np.ndarray | None = None
    quantization: Quantization | None = None
    sparsity: Sparsity | None = None
    is_input: bool = False
    is_output: bool = False
    host_output: bool = True
    qview: QuantView | None = None
    fp32: bool = False

    @property
    def is_constant(self) -> bool:
        return self.data is not None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    def data4(self) -> np.ndarray:
        """The constant value reshaped to the 4-D shape (for broadcasting operands)."""
        if self.data is None:
            raise DelegateError(f"tensor {self.name!r} is not a constant")
        return np.asarray(self.data).reshape(self.shape)


@dataclass
class GpuNode:
    """One operation of the GPU graph.

    ``op`` is the TFLite builtin name or custom code.  ``inputs`` keeps the IR
    operator's input order (``-1`` for omitted optional inputs); ``attrs`` its
    options plus whatever passes add (explicit padding, BHWC axes...).
    ``epilogue`` is applied to the result in order (fused activations and
    elementwise chains).  ``origin`` lists the IR operator indices this node
    stands for (several after fusion), for reports and debugging.  ``fp32``
    makes its kernel compute (accumulate and apply the epilogue) in float32
    in the fp16 precision modes, with its constants stored in float32 (the
    ``mixed_precision`` pass sets it).
    """

    id: int
    op: str
    inputs: list[int]
    outputs: list[int]
    attrs: dict[str, Any] = field(default_factory=dict)
    version: int = 1
    epilogue: list[Epilogue] = field(default_factory=list)
    origin: tuple[int, ...] = ()
    bhwc: bool = False
    fp32: bool = False

    def reads(self) -> list[int]:
        """Every tensor this node reads: its inputs and its epilogue operands."""
        ids = [i for i in self.inputs if i >= 0]
        ids += [e.operand for e in self.epilogue if e.operand is not None]
        return ids

    def describe(self) -> str:
        s = f"{self.op}#{self.id}"
        if self.epilogue:
            s += "+" + "+".join(e.describe() for e in self.epilogue)
        return s


class GpuGraph:
    """A mutable graph of :class:`GpuNode` s over :class:`GpuTensor` s, in execution order."""

    def __init__(self, tensors: Mapping[int, GpuTensor], nodes: Sequence[GpuNode], inputs: Sequence[int],
                 outputs: Sequence[int]):
        self.tensors: dict[int, GpuTensor] = dict(tensors)
        self.nodes: list[GpuNode] = list(nodes)
        self.inputs: list[int] = list(inputs)
        self.outputs: list[int] = list(outputs)
        self._next_tensor = max(self.tensors, default=-1) + 1
        self._next_node = max((n.id for n in self.nodes), default=-1) + 1
        #: compile options the passes read (``quantization_simulation``)
        self.options: dict[str, Any] = {}
        #: outputs that carry a variable tensor's new value: written tensor id -> the variable's id (a
        #: partition input too, which no node may write); the runtime returns them under the variable's id
        self.state_outputs: dict[int, int] = {}

    # -- construction ---------------------------------------------------------------------------------
    @classmethod
    def from_partition(cls, spec: PartitionSpec) -> GpuGraph:
        """Build from a delegate partition (resolved tensor shapes come from ``spec.tensors``)."""
        return cls.from_subgraph(spec.subgraph, spec.node_indices, inputs=spec.inputs, outputs=spec.outputs,
                                 tensors=spec.tensors, host_outputs=spec.host_outputs)

    @classmethod
    def from_subgraph(cls, subgraph: Subgraph, node_indices: Iterable[int] | None = None, *,
                      inputs: Sequence[int] | None = None, outputs: Sequence[int] | None = None,
                      tensors: Mapping[int, Tensor] | None = None,
                      host_outputs: Iterable[int] | None = None) -> GpuGraph:
        """Build from an IR subgraph and the indices of the operators to include (all by default).

        Without explicit ``inputs``/``outputs`` they are derived: inputs are the
        non-constant tensors read but not produced by the nodes, outputs the
        produced tensors read by other operators or listed as subgraph outputs.
        """
        if node_indices is None:
            idx = list(range(len(subgraph.operators)))
            inputs = subgraph.inputs if inputs is None else inputs
            outputs = subgraph.outputs if outputs is None else outputs
        else:
            idx = list(node_indices)
        resolved = dict(tensors or {})

        def ir(t: int) -> Tensor:
            return resolved.get(t) or subgraph.tensors[t]

        # weights that reach the partition through a DEQUANTIZE/DENSIFY placed in another partition are
        # constants all the same: pull those producers in (they fold away) instead of uploading them
        pulled = _constant_producers(subgraph, idx, ir)
        if pulled:
            idx = sorted(set(idx) | pulled)
            if inputs is not None:
                made = {t for j in pulled for t in subgraph.operators[j].outputs}
                inputs = [t for t in inputs if t not in made]
        ops: list[Operator] = [subgraph.operators[i] for i in idx]

        produced = {o for op in ops for o in op.outputs}
        if inputs is None:
            seen: list[int] = []
            for op in ops:
                for t in op.inputs:
                    if t >= 0 and t not in produced and not ir(t).is_constant and t not in seen:
                        seen.append(t)
            inputs = seen
        if outputs is None:
            inside = set(idx)
            read_outside = {t for j, op in enumerate(subgraph.operators) if j not in inside for t in op.inputs}
            outputs = [t for op in ops for t in op.outputs
                       if t in read_outside or t in subgraph.outputs]
        host = set(outputs if host_outputs is None else host_outputs)
        # a partition input the interpreter already folded into a constant is a constant here
        inputs = [t for t in inputs if not ir(t).is_constant]

        gt: dict[int, GpuTensor] = {}

        def add(t: int) -> None:
            if t < 0 or t in gt:
                return
            x = ir(t)
            if x.is_dynamic:
                raise DelegateError(f"tensor {x.name!r} has a dynamic shape {x.shape_signature}")
            gt[t] = GpuTensor(id=t, name=x.name, shape=bhwc_shape(x.shape), dtype=x.dtype,
                              ir_shape=tuple(x.shape), data=x.data, quantization=x.quantization,
                              sparsity=x.sparsity, is_input=t in inputs, is_output=t in outputs,
                              host_output=t in host)

        nodes = []
        for i, op in zip(idx, ops, strict=False):
            for t in (*op.inputs, *op.outputs):
                add(t)
            attrs = dict(op.options)
            epi = []
            # in recurrent cells the option is the cell's internal activation, not one on the output
            act = 0 if op.name in _CELL_OPS else attrs.pop("fused_activation_function", 0)
            if act:
                if act not in ACTIVATION_NAMES:
                    raise DelegateError(f"{op.name}: unknown fused activation function {act}")
                # LiteRT's float kernels turn the fused activation into a clamp range; TANH and SIGN_BIT
                # give the full range, i.e. they are not applied (the CPU kernels do the same)
                if act not in _RANGE_FREE_ACTS:
                    epi.append(Epilogue(ACTIVATION_NAMES[act]))
            if op.is_custom and op.custom_options is not None:
                attrs["custom_options"] = op.custom_options
            if op.intermediates:  # their quantization fixes an integer LSTM's internal scales
                attrs["intermediates"] = tuple(ir(t) for t in op.intermediates if t >= 0)
            nodes.append(GpuNode(id=i, op=op.name, inputs=list(op.inputs), outputs=list(op.outputs),
                                 attrs=attrs, version=op.version, epilogue=epi, origin=(i,)))
        for t in (*inputs, *outputs):
            add(t)
        return cls(gt, nodes, inputs, outputs)

    def copy(self) -> GpuGraph:
        """A deep copy (constant arrays shared: passes never write into them)."""
        tensors = {k: copy.copy(v) for k, v in self.tensors.items()}
        nodes = [copy.copy(n) for n in self.nodes]
        for n in nodes:
            n.inputs, n.outputs = list(n.inputs), list(n.outputs)
            n.attrs, n.epilogue = copy.deepcopy(n.attrs), list(n.epilogue)
        g = GpuGraph(tensors, nodes, self.inputs, self.outputs)
        g.state_outputs = dict(self.state_outputs)
        g.options = dict(self.options)
        return g

    # -- queries -----------------------------------------------------------------------------------------
    def producers(self) -> dict[int, GpuNode]:
        return {t: n for n in self.nodes for t in n.outputs}

    def consumers(self) -> dict[int, list[GpuNode]]:
        out: dict[int, list[GpuNode]] = {}
        for n in self.nodes:
            for t in dict.fromkeys(n.reads()):
                out.setdefault(t, []).append(n)
        return out

    def is_constant(self, t: int) -> bool:
        return t >= 0 and self.tensors[t].is_constant

    def is_boundary(self, t: int) -> bool:
        x = self.tensors[t]
        return x.is_input or x.is_output

    def node_index(self, node: GpuNode) -> int:
        for i, n in enumerate(self.nodes):
            if n is node:
                return i
        raise KeyError(node.id)

    # -- mutation ------------------------------------------------------------------------------------------
    def add_tensor(self, name: str, shape: Sequence[int], dtype: str = "float32", *,
                   data: np.ndarray | None = None, ir_shape: Sequence[int] | None = None) -> int:
        """A new tensor; ``shape`` is the 4-D shape unless ``ir_shape`` is given."""
        tid = self._next_tensor
        self._next_tensor += 1
        irs = tuple(ir_shape) if ir_shape is not None else tuple(shape)
        if data is not None:
            data = np.asarray(data).reshape(irs)
        self.tensors[tid] = GpuTensor(id=tid, name=name, shape=bhwc_shape(irs), dtype=dtype, ir_shape=irs,
                                      data=data)
        return tid

    def add_constant(self, name: str, data: np.ndarray) -> int:
        data = np.ascontiguousarray(data)
        data.flags.writeable = False
        return self.add_tensor(name, data.shape, data.dtype.name, data=data, ir_shape=data.shape)

    def new_node(self, op: str, inputs: Sequence[int], outputs: Sequence[int], attrs: Mapping[str, Any] | None = None,
                 *, origin: tuple[int, ...] = (), bhwc: bool = True, version: int = 1) -> GpuNode:
        """A node not yet in :attr:`nodes` (insert it where it belongs)."""
        nid = self._next_node
        self._next_node += 1
        return GpuNode(id=nid, op=op, inputs=list(inputs), outputs=list(outputs), attrs=dict(attrs or {}),
                       version=version, origin=origin, bhwc=bhwc)

    def replace_uses(self, old: int, new: int) -> None:
        """Every read of tensor ``old`` (inputs, epilogue operands) now reads ``new``."""
        for n in self.nodes:
            n.inputs = [new if t == old else t for t in n.inputs]
            if any(e.operand == old for e in n.epilogue):
                n.epilogue = [replace(e, operand=new) if e.operand == old else e for e in n.epilogue]

    def remove_node(self, node: GpuNode) -> None:
        self.nodes.pop(self.node_index(node))

    def bypass(self, node: GpuNode, src: int, dst: int) -> bool:
        """Remove ``node`` that copies tensor ``src`` into ``dst`` unchanged.

        Readers of ``dst`` read ``src`` instead; when ``dst`` is a partition
        output (whose identity must survive), ``src``'s producer writes ``dst``
        directly instead.  Returns False (and changes nothing) when neither is
        possible, e.g. an output that is a plain copy of a partition input.
        """
        t_src, t_dst = self.tensors[src], self.tensors[dst]
        if t_src.shape != t_dst.shape or t_src.dtype != t_dst.dtype:
            return False
        if not t_dst.is_output:
            self.remove_node(node)
            self.replace_uses(dst, src)
            return True
        prod = self.producers().get(src)
        if prod is None or t_src.is_output or t_src.is_input:
            return False
        self.remove_node(node)
        prod.outputs = [dst if t == src else t for t in prod.outputs]
        # every reader of src comes after its producer, which now writes dst
        self.replace_uses(src, dst)
        return True

    def prune(self) -> int:
        """Drop nodes whose results nobody reads, then tensors nobody references; returns nodes removed."""
        removed = 0
        while True:
            used = {t for n in self.nodes for t in n.reads()} | set(self.outputs)
            dead = [n for n in self.nodes if not any(t in used for t in n.outputs)]
            if not dead:
                break
            for n in dead:
                self.remove_node(n)
            removed += len(dead)
        referenced = {t for n in self.nodes for t in (*n.reads(), *n.outputs)} | set(self.inputs) | set(self.outputs)
        for t in [t for t in self.tensors if t not in referenced]:
            del self.tensors[t]
        return removed

    def validate(self) -> None:
        """Check the invariants passes must keep; raises :class:`DelegateError` naming the first breach."""
        ready = {t for t, x in self.tensors.items() if x.is_constant} | set(self.inputs)
        written: set[int] = set()
        for n in self.nodes:
            for t in n.reads():
                if t not in self.tensors:
                    raise DelegateError(f"{n.describe()} reads unknown tensor {t}")
                if t not in ready:
                    raise DelegateError(f"{n.describe()} reads tensor {t} ({self.tensors[t].name!r}) "
                                        "before it is written")
            for t in n.outputs:
                if t in written or t in self.inputs or self.is_constant(t):
                    raise DelegateError(f"{n.describe()} writes tensor {t} that is already defined")
                written.add(t)
                ready.add(t)
        for t in self.outputs:
            if t not in ready:
                raise DelegateError(f"partition output {t} is never written")

    def op_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for n in self.nodes:
            out[n.op] = out.get(n.op, 0) + 1
        return dict(sorted(out.items()))

    def __repr__(self) -> str:
        return f"GpuGraph({len(self.nodes)} nodes, {len(self.tensors)} tensors, inputs={self.inputs}, outputs={self.outputs})"


def _constant_producers(subgraph: Subgraph, idx: Sequence[int], ir) -> set[int]:
    """Indices of DEQUANTIZE/DENSIFY operators outside ``idx`` that make (chains of) constants read by
    the operators in ``idx``."""
    producer = {t: j for j, op in enumerate(subgraph.operators) for t in op.outputs}
    inside = set(idx)
    found: set[int] = set()

    def const_chain(t: int, depth: int = 0) -> list[int] | None:
        if t < 0 or ir(t).is_constant:
            return []
        j = producer.get(t)
        if j is None or depth > 4 or subgraph.operators[j].name not in ("DEQUANTIZE", "DENSIFY"):
            return None
        rest = const_chain(subgraph.operators[j].inputs[0], depth + 1)
        return None if rest is None else [j, *rest]

    for i in idx:
        for t in subgraph.operators[i].inputs:
            j = producer.get(t)
            if t >= 0 and j is not None and j not in inside:
                chain = const_chain(t)
                if chain:
                    found.update(chain)
    return found


# ---------------------------------------------------------------------------------------------------------
# The compiled plan
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanTensor:
    """A device buffer of the plan.

    ``kind``: ``"input"``/``"output"`` (partition boundary, own buffers; a
    tensor that is both is listed as ``"input"`` and passed through) or
    ``"intermediate"`` (lives in the arena at ``offset``).  Constants are not
    plan tensors: they sit, re-laid out, in the ``constants`` of the
    :class:`GpuOp` that reads them.  ``shape`` is BHWC;
    ``layout`` is ``"PHWC4"`` for activations (see ``_layout``).  ``storage``
    is the element type on the device (``"float32"``/``"float16"``); ``nbytes``
    the buffer size in that layout (before alignment).  ``quant`` = (scale, zero point) of a
    quantized boundary tensor held as floats: the host array has ``dtype`` (``int8``...), the
    device ``scale * (q - zero_point)``; runtimes convert with ``_layout.to_device/from_device``.
    """

    id: int
    name: str
    kind: str
    shape: tuple[int, int, int, int]
    ir_shape: tuple[int, ...]
    dtype: str
    storage: str
    layout: str
    nbytes: int
    offset: int | None = None
    host_output: bool = False
    quant: tuple[float, int] | None = None


@dataclass
class GpuOp:
    """One kernel launch: the template kernel ``kernel`` with ``params``.

    ``kernel`` names a template of ``shaders/`` (``litegpu.gpu.kernels``);
    ``options`` are its template (compile-time) options (``act``,
    ``residual``, ``op``...), ``params`` its runtime parameters by the names
    the template declares (``B``, ``SRC_H``, ``PAD_T``...).  ``bindings`` lists
    the kernel's buffer arguments in declaration order as ``(name, source)``:
    an ``int`` source is a plan tensor id, a ``str`` source a key of
    ``constants`` (re-laid-out arrays already in the storage type).
    ``inputs``/``outputs`` are the tensor ids read/written (for lifetimes).
    ``node``/``origin`` name the GPU node and the IR operators it comes from;
    ``accumulator`` is the type the kernel accumulates in (``acc`` type).
    ``precision`` is the precision the kernel is rendered with (``None``: the
    plan's); ``buffer_storage`` names the buffers stored in another element
    type than that precision's (``{"src": "float32"}``): pass both to
    ``kernels.render`` (mixed precision, ``docs/gpu-compiler.md`` §6).
    """

    kernel: str
    params: dict[str, Any]
    inputs: list[int]
    outputs: list[int]
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    node: int = -1
    origin: tuple[int, ...] = ()
    accumulator: str = "float32"
    options: dict[str, Any] = field(default_factory=dict)
    bindings: list[tuple[str, int | str]] = field(default_factory=list)
    precision: str | None = None
    buffer_storage: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        opts = ",".join(f"{k}={v}" for k, v in sorted(self.options.items()))
        return f"{self.kernel}[{opts}]" if opts else self.kernel

    def describe_precision(self) -> str:
        """How this launch departs from the plan's precision ("" when it does not)."""
        parts = [f"computes in {self.precision}"] if self.precision is not None else []
        parts += [f"{k} stored {v}" for k, v in sorted(self.buffer_storage.items())]
        return ", ".join(parts)


@dataclass
class GpuPlan:
    """A compiled partition, ready for a runtime to allocate and launch."""

    ops: list[GpuOp]
    tensors: dict[int, PlanTensor]
    inputs: list[int]
    outputs: list[int]
    precision: str
    arena_bytes: int
    alignment: int
    memory: dict[str, Any] = field(default_factory=dict)
    report: dict[str, Report] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    #: outputs returned under another id: plan tensor id -> the variable tensor id it updates
    #: (:attr:`GpuGraph.state_outputs`)
    aliases: dict[int, int] = field(default_factory=dict)
    #: tensors stored back to back, each ``stride`` bytes after the previous one (its size rounded up to
    #: ``alignment``), so that one binding of a branched launch covers them all (``_passes/twins``): arena
    #: offsets already say so for intermediates; the runtime gives a group of inputs/outputs one buffer
    groups: list[tuple[int, ...]] = field(default_factory=list)

    def describe(self) -> dict[str, Any]:
        """Facts for ``inspect`` (what :meth:`DelegateKernel.describe` can return)."""
        return {
            "precision": self.precision,
            "kernels": [op.describe() for op in self.ops],
            "mixed_precision": [f"{i}: {op.describe()}: {op.describe_precision()}" for i, op in enumerate(self.ops)
                                if op.describe_precision()],
            "arena_bytes": self.arena_bytes,
            "memory": dict(self.memory),
            "passes": {k: list(v) for k, v in self.report.items()},
            "warnings": list(self.warnings),
        }
