"""What an op family module writes against: :class:`GpuOpEntry`, the :class:`Lowerer` its lowerings get,
and the small helpers every family shares (``opt``, ``check_4d``, ``WEIGHTS_BIAS``).

The families (``conv``, ``matmul``, ``reduce``, ``elementwise``, ``movement``, ``resize``, ``lstm``,
``folded``) each hold their ops' entries, checks, lowerings and kernel specs; ``ops/__init__.py``
assembles them into the one table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..._delegate import NodeView
from ..._errors import DelegateError
from .. import _layout as L
from .._cost import DeviceCost, profile_for
from .._graph import Epilogue, GpuGraph, GpuNode, GpuOp
from .._precision import PrecisionPolicy

__all__ = ["GpuOpEntry", "Lowerer", "WEIGHTS_BIAS", "opt", "check_4d"]

#: the constant inputs of a convolution-like op: input index -> what it is (for the decline reason)
WEIGHTS_BIAS: Mapping[int, str] = {1: "weights", 2: "bias"}


@dataclass(frozen=True)
class GpuOpEntry:
    """What the GPU path knows about one op (the table's fields: ``gpu/ops/__init__.py``)."""

    #: kernel template rendering it (``None``: no launch of its own, e.g. folded at prepare)
    kernel: str | None
    #: node -> list of kernel launches; ``None`` when a pass rewrites the op first
    lower: Callable[[Lowerer], list[GpuOp]] | None
    #: node -> "" or the reason it cannot run on the GPU (beyond the generic checks of ``supports``)
    check: Callable[[NodeView], str] | None = None
    #: inputs that must be constant: input index -> what it is (for the decline reason)
    params: Mapping[int, str] = field(default_factory=dict)
    #: "activation" or "elementwise": the fusion pass may fold it into its producer's epilogue
    fuses: str | None = None
    #: a kernel's ``act`` slot computes it (no operand)
    act: bool = False
    #: a ``binary`` kernel's ``chain`` computes it
    chain: bool = False
    #: ``supports`` may accept it; False for ops only the passes create (QDQ, DW_PW_CONV_2D, LSTM_CELL...)
    claimed: bool = True
    #: its numpy meaning (``gpu/_reference_ops.py``): ``f(x, attrs)`` for the ``unary`` kernel, ``f(a, b)`` for
    #: ``binary``, else ``f(ctx) -> outputs``; ``None``: the reference evaluator cannot run it (QUANTIZE)
    ref: Callable[..., Any] | None = None
    #: options the lowering reads with no default: a node without them (its options table left out, or
    #: one of another op's type) is declined instead of failing at prepare
    options: tuple[str, ...] = ()


def opt(node: NodeView, key: str, default: Any = 0) -> Any:
    """The node's option ``key`` (``default`` when its options table lacks it)."""
    return node.op.options.get(key, default)


def check_4d(node: NodeView) -> str:
    """The check of the ops whose kernels take a 4-D (BHWC) input only."""
    if len(node.inputs[0].shape) != 4:
        return f"{node.op.name} needs a 4-D input"
    return ""


class Lowerer:
    """Lowers one node; collects constants (re-laid out, storage type) and bindings."""

    def __init__(self, g: GpuGraph, node: GpuNode, policy: PrecisionPolicy,
                 epilogue: tuple[dict[str, Any], list[Epilogue]] | None):
        self.g, self.n, self.p = g, node, policy
        self._epilogue = epilogue  # the node's epilogue matched onto its kernel's slots (_capabilities)
        self.constants: dict[str, np.ndarray] = {}
        self.bindings: list[tuple[str, int | str]] = []

    @property
    def cost(self) -> DeviceCost:
        """The device calibration variant choices are priced on (``compile_graph(device=...)``)."""
        return self.g.options.get("cost") or profile_for(None)

    # -- helpers
    def shape(self, t: int) -> tuple[int, int, int, int]:
        return self.g.tensors[t].shape

    def data(self, t: int) -> np.ndarray:
        x = self.g.tensors[t]
        if x.data is None:
            raise DelegateError(f"{self.n.describe()}: input {x.name!r} must be constant on the GPU path")
        if x.quantization is not None and x.dtype in ("int8", "uint8", "int16", "int32"):
            raise DelegateError(f"{self.n.describe()}: quantized constant {x.name!r} was not dequantized "
                                "(run the float_view pass)")
        return np.asarray(x.data, np.float32).reshape(x.ir_shape)

    def dims(self, t: int, prefix: str = "") -> dict[str, int]:
        b, h, w, c = self.shape(t)
        return {f"{prefix}B": b, f"{prefix}H": h, f"{prefix}W": w, f"{prefix}C": c, f"{prefix}S": L.slices(c)}

    def const(self, key: str, arr: np.ndarray) -> str:
        self.constants[key] = self.p.constant(arr, self.n)
        self.bindings.append((key, key))
        return key

    def tensor_or_const(self, binding: str, t: int) -> None:
        """Bind a runtime tensor, or a constant laid out as PHWC4 of its own 4-D shape."""
        if self.g.is_constant(t):
            x = self.g.tensors[t]
            self.constants[binding] = self.p.constant(L.constant_phwc4(np.asarray(x.data), x.shape), self.n)
            self.bindings.append((binding, binding))
        else:
            self.bindings.append((binding, t))

    def bind(self, name: str, t: int) -> None:
        self.bindings.append((name, t))

    def epilogue(self) -> tuple[dict[str, Any], list[Epilogue]]:
        m = self._epilogue
        if m is None:  # legalise_epilogues guarantees a match; a hand-built graph may not
            raise DelegateError(f"{self.n.describe()}: epilogue does not fit the kernel (run legalise_epilogues)")
        return m

    def bind_epilogue_operands(self, operands: list[Epilogue], channels: int) -> None:
        after_residual = False
        for e in operands:
            if e.op == "PRELU":  # a PRELU after the residual step has its own alpha (res_alpha)
                self.const("res_alpha" if after_residual else "alpha",
                           L.channel_vector(self.data(e.operand).reshape(-1), channels))
            else:
                self.tensor_or_const("res", e.operand)
                after_residual = True

    def bind_weighted(self, weights: np.ndarray, channels: int, operands: list[Epilogue], in_scale: int = -1,
                      in_add: int = -1) -> None:
        """The bindings every weighted kernel (conv2d, depthwise_conv2d, fully_connected) takes, in its
        order: ``src`` (input 0), the packed ``weights``, ``bias`` (input 2, zeros when absent) as a
        vector of ``channels``, conv2d's ``in_scale`` and ``in_add`` tensors when given, the epilogue's
        operands, ``dst`` (output 0)."""
        n = self.n
        self.bind("src", n.inputs[0])
        self.const("weights", weights)
        bias = self.data(n.inputs[2]).reshape(-1) if len(n.inputs) > 2 and n.inputs[2] >= 0 else None
        self.const("bias", L.channel_vector(bias, channels))
        if in_scale >= 0:
            self.bind("in_scale", in_scale)
        if in_add >= 0:
            self.bind("in_add", in_add)
        self.bind_epilogue_operands(operands, channels)
        self.bind("dst", n.outputs[0])

    def op(self, kernel: str, options: dict[str, Any], params: dict[str, Any],
           outputs: Sequence[int] | None = None) -> GpuOp:
        outs = list(self.n.outputs if outputs is None else outputs)
        if options.get("qdq"):
            # the QDQ epilogue step's grid, as the template's Q_* params (f32)
            scale, zp, qmin, qmax = self.n.epilogue[-1].q
            params = {**params, "Q_SCALE": float(scale), "Q_ZP": float(zp), "Q_MIN": float(qmin),
                      "Q_MAX": float(qmax)}
        reads = [t for _, t in self.bindings if isinstance(t, int)]
        ins = [t for t in reads if t not in outs]
        precision = self.p.node_precision(self.n)
        return GpuOp(kernel=kernel, params=params, inputs=ins, outputs=outs, constants=dict(self.constants),
                     node=self.n.id, origin=self.n.origin, accumulator=self.p.accumulator(self.n),
                     options={k: v for k, v in options.items() if v is not None},
                     bindings=list(self.bindings), precision=None if precision == self.p.mode else precision,
                     buffer_storage=self.buffer_storage(precision))

    def buffer_storage(self, precision: str) -> dict[str, str]:
        """Bindings whose element type differs from the one ``precision`` stores floats in."""
        real = "float32" if precision == "fp32" else "float16"
        out = {}
        for name, src in self.bindings:
            if isinstance(src, str):
                st = self.constants[src].dtype.name
            else:
                st = self.p.storage(self.g.tensors[src])
            if st in ("float32", "float16") and st != real:
                out[name] = st
        return out
