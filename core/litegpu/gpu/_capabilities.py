"""What the kernel templates can fuse: the one place the passes and the lowering agree on it.

The kernel templates (``shaders/``, contract in ``docs/gpu-kernels.md``) take
a fixed set of *epilogue slots* per kernel, rendered as template options:

* ``conv2d``: ``act`` (an activation, or PRELU with a per-channel alpha),
  then ``residual`` (ADD or MUL with a tensor of the output's shape, or with
  fewer channels read as zero past them: a ``zero_extend`` step, option
  ``residual_channels="fewer"``; or a k x k / stride k max pool of a larger tensor: a ``pool`` step,
  option ``residual_pool``; or a RESIZE_BILINEAR of a smaller tensor to the output's H x W: a ``resize``
  step, option ``residual_resize``), then ``residual_act`` (an activation or PRELU); with
  ``attrs["store_pre"]`` (option ``store_pre``) the value before the residual is stored too, in ``outputs[1]``;
* ``dw_pw_conv2d`` (a depthwise conv fused into the 1x1 conv reading it,
  ``_passes/fuse_dw_pw``): conv2d's slots (:data:`DW_PW_SLOTS`); the
  depthwise's own activation is an attribute of the node, not an epilogue step;
* ``pw_dw_conv2d`` (a 1x1 conv fused into the depthwise conv it feeds, ``_passes/fuse_pw_dw``): with the 1x1
  projection after the depthwise (``project``), ``act``, ``residual`` (the output's shape,
  ``residual_channels="fewer"`` or ``residual_pool``) and ``residual_act`` (:data:`PW_DW_SLOTS`); without it the
  depthwise's activation only; the expansion's and the depthwise's activations are attributes of the node;
* ``depthwise_conv2d``: conv2d's slots (``act``, ``residual`` with ``residual_channels`` /
  ``residual_pool``, ``residual_act``), no ``residual_resize``;
* ``transpose_conv2d``, ``heads`` (a FULLY_CONNECTED, the kernel's one-head case): ``act`` (PRELU included);
* ``binary``: ``act`` (no PRELU), then a ``residual``: a second elementwise op
  (:data:`BINARY_RESIDUAL_OPS`) with a runtime tensor of the output's shape, then a ``chain`` of
  unary ops;
* ``pool2d``: ``act`` (no PRELU);
* ``unary``, ``softmax``, ``reduce``, ``resize``: nothing but ``qdq``;
* ``se_gate`` (a squeeze-and-excitation gate, ``_passes/squeeze_excite``): nothing, not even ``qdq``
  (its layers' activations are attributes of the node; quantized blocks stay unfused).

Every one of these ends with ``qdq``: a final ``QDQ`` step (snap to a
quantized tensor's grid, the float view of quantized models).

:func:`match_epilogue` maps a node's :class:`Epilogue` chain onto those
slots; the fusion passes only fuse what matches, so every epilogue the
lowering meets fits its kernel.  Which op renders which kernel, and which ops
an ``act`` slot or a ``chain`` computes, come from the op table
(``gpu/ops/``); the slots of each kernel are described here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._graph import Epilogue, GpuGraph, GpuNode
from .ops import ACT_OPS, CHAIN_OPS, kernel_of

__all__ = ["BINARY_RESIDUAL_OPS", "DW_PW_SLOTS", "DW_PW_SMALL_SLOTS", "PW_DW_SLOTS", "POOL_TAKES_PAD_VALUE", "QDQ_KERNELS", "ACTIVATIONS", "CHAIN_OPS", "kernel_family",
           "match_epilogue", "epilogue_fits"]

#: Does ``pool2d`` read explicit padding cells as ``PAD_VALUE`` (params EX_T/EX_B/EX_L/EX_R, option
#: ``explicit_pad``)?  The template skips out-of-bounds taps only (TFLite's pool semantics), so a PAD
#: is not merged into a pool until it does.
POOL_TAKES_PAD_VALUE = False

#: the second elementwise op a ``binary`` kernel takes after its own (option ``residual``)
BINARY_RESIDUAL_OPS = frozenset({"ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM"})

#: the conv2d epilogue slots the fused depthwise -> 1x1 kernel (``dw_pw_conv2d``) implements
DW_PW_SLOTS = frozenset({"act", "residual", "residual_act", "residual_channels", "residual_pool", "residual_resize",
                         "qdq"})
#: the slots of dw_pw_small (a DW_PW_CONV_2D with attr ``small``, _passes/fuse_dw_pw): an activation and a
#: residual (of the output's shape, with fewer channels or a max pool read through its windows) with its activation
DW_PW_SMALL_SLOTS = frozenset({"act", "residual", "residual_act", "residual_channels", "residual_pool"})

#: the slots of pw_dw_conv2d (a 1x1 conv fused into the depthwise it feeds, _passes/fuse_pw_dw): with the 1x1
#: projection, an activation and a residual of the output's shape, fewer channels or a max pool, with its
#: activation; without it the depthwise's activation only (the pass checks that)
PW_DW_SLOTS = frozenset({"act", "residual", "residual_act", "residual_channels", "residual_pool"})
#: activations a kernel's ``act`` slot takes (plus PRELU where noted), and the unary ops a ``binary``
#: kernel's ``chain`` takes: both from the op table
ACTIVATIONS = ACT_OPS

#: kernels whose template takes the ``qdq`` option (a final QDQ epilogue step)
QDQ_KERNELS = frozenset({"conv2d", "dw_pw_conv2d", "depthwise_conv2d", "transpose_conv2d", "heads", "binary", "pool2d",
                         "unary", "softmax", "reduce", "resize"})


def kernel_family(op: str) -> str | None:
    """The template kernel computing ``op`` (the op table's ``kernel``), else None."""
    return kernel_of(op)


def _per_channel(g: GpuGraph, t: int | None, channels: int) -> bool:
    if t is None or not g.is_constant(t):
        return False
    s = g.tensors[t].shape
    return s[:3] == (1, 1, 1) and s[3] in (1, channels)


def _residual_fits(g: GpuGraph, step: Epilogue, out: tuple[int, ...]) -> bool:
    """The conv2d residual slot reads a tensor of the output's shape, or (``zero_extend``, template
    option ``residual_channels="fewer"``) of its B/H/W with fewer channels, zero past them."""
    if step.operand is None:
        return False
    s = g.tensors[step.operand].shape
    if step.resize is not None:  # option residual_resize: bilinear to the output's H x W, nothing else merged
        return not (step.pool or step.zero_extend) and s[0] == out[0] and s[3] == out[3]
    if step.pool:  # option residual_pool: a k x k / stride k max pool of the operand, windows in bounds
        k = step.pool
        s = (s[0], (s[1] - k) // k + 1, (s[2] - k) // k + 1, s[3])
    if step.zero_extend:
        return s[:3] == out[:3] and s[3] < out[3]
    return s == out


def match_epilogue(g: GpuGraph, node: GpuNode, steps: Sequence[Epilogue] | None = None
                   ) -> tuple[dict[str, Any], list[Epilogue]] | None:
    """Template options realising ``steps`` (default: the node's epilogue) on the node's kernel, and the
    epilogue operands in binding order (PRELU alpha, residual); None when they do not fit."""
    steps = list(node.epilogue if steps is None else steps)
    fam = kernel_family(node.op)
    out = g.tensors[node.outputs[0]].shape
    opts: dict[str, Any] = {}
    operands: list[Epilogue] = []
    i = 0

    def take_act(prelu: bool) -> bool:
        nonlocal i
        if i < len(steps) and steps[i].operand is None and steps[i].op in ACTIVATIONS:
            opts["act"] = steps[i].op
            i += 1
            return True
        if prelu and i < len(steps) and steps[i].op == "PRELU" and _per_channel(g, steps[i].operand, out[3]):
            opts["act"] = "PRELU"
            operands.append(steps[i])
            i += 1
            return True
        return False

    if fam in ("conv2d", "dw_pw_conv2d", "depthwise_conv2d", "pw_dw_conv2d"):
        take_act(True)
        if i < len(steps) and steps[i].op in ("ADD", "MUL") and _residual_fits(g, steps[i], out):
            opts["residual"] = steps[i].op
            if steps[i].zero_extend:
                opts["residual_channels"] = "fewer"
            if steps[i].pool:
                opts["residual_pool"] = True
            if steps[i].resize is not None:
                if fam in ("depthwise_conv2d", "pw_dw_conv2d"):
                    return None  # their templates have no resized residual read
                opts["residual_resize"] = True
            operands.append(steps[i])
            i += 1
            if i < len(steps) and steps[i].operand is None and steps[i].op in ACTIVATIONS:
                opts["residual_act"] = steps[i].op
                i += 1
            elif i < len(steps) and steps[i].op == "PRELU" and _per_channel(g, steps[i].operand, out[3]):
                # BlazeFace-style blocks: conv -> ADD(skip) -> PRELU, one launch instead of two
                opts["residual_act"] = "PRELU"
                operands.append(steps[i])
                i += 1
    elif fam == "transpose_conv2d" or (fam == "heads" and node.op == "FULLY_CONNECTED"):
        take_act(True)  # (the SIBLING_HEADS node's heads keep their activations in its attrs)
    elif fam == "pool2d":
        take_act(False)
    elif fam == "binary":
        take_act(False)
        # a second elementwise op with a tensor of the output's shape (option residual; no broadcast)
        if (i < len(steps) and steps[i].op in BINARY_RESIDUAL_OPS and steps[i].operand is not None
                and not (steps[i].zero_extend or steps[i].pool or steps[i].resize is not None)
                and g.tensors[steps[i].operand].shape == out and not g.is_constant(steps[i].operand)):
            opts["residual"] = steps[i].op
            if steps[i].reverse:
                opts["residual_reverse"] = True
            operands.append(steps[i])
            i += 1
        chain = []
        while i < len(steps) and steps[i].operand is None and steps[i].op in CHAIN_OPS:
            chain.append(steps[i].op)
            i += 1
        if chain:
            opts["chain"] = tuple(chain)
    if fam in QDQ_KERNELS and i == len(steps) - 1 and steps[i].op == "QDQ":
        opts["qdq"] = True
        i += 1
    if i != len(steps):
        return None
    if node.attrs.get("store_pre"):  # outputs[1] takes the value before the residual slot: conv2d only
        if fam != "conv2d" or "residual" not in opts or len(node.outputs) != 2:
            return None
        opts["store_pre"] = True
    if fam == "dw_pw_conv2d" and not set(opts) <= (DW_PW_SMALL_SLOTS if node.attrs.get("small") else DW_PW_SLOTS):
        return None  # a conv2d slot the fused kernel (dw_pw_conv2d, or dw_pw_small for attr small) lacks
    return opts, operands


def epilogue_fits(g: GpuGraph, node: GpuNode, steps: Sequence[Epilogue]) -> bool:
    """Can ``node``'s kernel apply ``steps`` as its epilogue?"""
    return match_epilogue(g, node, steps) is not None
