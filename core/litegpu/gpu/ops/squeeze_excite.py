"""Squeeze-and-excitation gates: the ``SQUEEZE_EXCITE_GATE`` node ``_passes/squeeze_excite`` makes of a global
average (MEAN over H, W or a whole-map AVERAGE_POOL_2D) and the one or two 1x1 layers (CONV_2D or
FULLY_CONNECTED) with their activations that compute a channel gate from it; kernel ``se_gate`` in
``shaders/squeeze_excite.lgk``.

The gate's MUL with the feature map is not here: it becomes an input scale of the 1x1 conv reading it
(conv2d's ``in_scale`` option, ``ops/conv.py``) or stays a ``binary`` launch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import _layout as L
from .. import _reference_ops as rf
from .._cost import choose_se_gate, se_gate_fits, se_gate_segment
from .._graph import SE_GATE_OP, GpuOp
from .._kernel_specs import ACTIVATIONS, KernelSpec, Opt, spec
from ._entry import GpuOpEntry, Lowerer

__all__ = ["OPS", "KERNELS", "SE_GATE_CAPS", "SE_GATE_ACTIVATIONS", "SE_ONE_ROUND", "se_gate_params"]

#: the shared-memory capacities (vec4 slices of the pooled and the hidden vector) se_gate renders with;
#: the pass leaves a block with more channels than the largest (1024) unfused
SE_GATE_CAPS = (8, 32, 128, 256)

#: the activations a gate layer may end with (the kernel's act slots; PRELU, which needs its alpha, aside)
SE_GATE_ACTIVATIONS = frozenset(ACTIVATIONS)

_THREADS = (64, 128, 256, 512, 1024)
#: the group sizes the kernel renders with: the chooser's, and 32, a tail group's (``_passes/tail_group``) where the
#: launch before it has groups of 32 (conv2d's split 16 x pack 2, split 4 x pack 8)
_GROUPS = (32, *_THREADS)

#: loads of a thread in flight in the pooling stage (option ``loads``)
SE_GATE_LOADS = (8, 16)

#: the largest segment whose partials its leader sums alone, in one round (option ``one_round``): one barrier
#: a pass fewer than the two rounds. A/B switch (``--set litegpu.gpu.ops.squeeze_excite.SE_ONE_ROUND=0``: always
#: two rounds, as before)
SE_ONE_ROUND = 8


def lower_se_gate(lw: Lowerer) -> list[GpuOp]:
    """One ``se_gate`` launch, one work group per batch item, its group size from the cost model."""
    n = lw.n
    x, y = n.inputs[0], n.outputs[0]
    b, h, wd, c = lw.shape(x)
    _, _, _, o = lw.shape(y)
    two = len(n.inputs) > 3 and n.inputs[3] >= 0

    def layer(wi: int) -> tuple[np.ndarray, np.ndarray]:
        w = lw.data(n.inputs[wi])
        w = w.reshape(w.shape[0], 1, 1, -1)
        bias = n.inputs[wi + 1] if len(n.inputs) > wi + 1 else -1
        return L.conv_weights(w), L.channel_vector(lw.data(bias).reshape(-1) if bias >= 0 else None, w.shape[0])

    w1, b1 = layer(1)
    hid = lw.data(n.inputs[1]).shape[0] if two else 0
    lw.bind("src", x)
    lw.const("w1", w1)
    lw.const("b1", b1)
    if two:
        w2, b2 = layer(3)
        lw.const("w2", w2)
        lw.const("b2", b2)
    lw.bind("dst", y)
    src_s, hid_s, s = L.slices(c), L.slices(hid) if two else 0, L.slices(o)
    cap = next(k for k in SE_GATE_CAPS if k >= max(src_s, hid_s))
    choice, _ = choose_se_gate(b, src_s, h * wd, hid_s, s, lw.cost, cap, SE_ONE_ROUND)
    params = se_gate_params(b, (h, wd), src_s, hid_s, o, choice["threads"])
    return [lw.op("se_gate", {"layers": 2 if two else 1, "act1": n.attrs.get("act1") or "NONE",
                              "act2": (n.attrs.get("act2") or "NONE") if two else None, "cap": cap,
                              "one_round": SE_ONE_ROUND, **choice},
                  params)]


def se_gate_params(batch: int, hw: tuple[int, int], src_slices: int, hidden_slices: int, channels: int,
                   threads: int) -> dict[str, int]:
    """The se_gate kernel's params: the shapes (``hidden_slices`` 0: one layer) and each stage's segment
    size for a group of ``threads``."""
    s = L.slices(channels)
    stages = [(src_slices, hw[0] * hw[1])] + (
        [(hidden_slices, src_slices), (s, hidden_slices)] if hidden_slices else [(s, src_slices)])
    groups = [se_gate_segment(sums, length, threads) for sums, length in stages] + [1]
    return {"B": batch, "SRC_H": hw[0], "SRC_W": hw[1], "SRC_S": src_slices, "HID_S": hidden_slices,
            "C": channels, "S": s, "G0": groups[0], "G1": groups[1], "G2": groups[2]}


def _group(opts: dict) -> tuple[int, int, int]:
    return (opts["threads"], 1, 1)


def _regroup(opts: Mapping[str, Any], params: Mapping[str, Any], threads: int
             ) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """se_gate for a group of ``threads`` (a tail group, ``_passes/tail_group``): the segment sizes of each stage
    follow the group size (:func:`se_gate_params`); None for a size the kernel does not take or whose shared
    memory (one vec4 a thread and the two vectors) exceeds what every device gives a group."""
    if threads not in _GROUPS or not se_gate_fits(threads, int(opts["cap"])):
        return None
    p = se_gate_params(int(params["B"]), (int(params["SRC_H"]), int(params["SRC_W"])), int(params["SRC_S"]),
                       int(params["HID_S"]), int(params["C"]), threads)  # (HID_S 0: one layer, as lowered)
    return {**opts, "threads": threads}, {**params, **p}


_ACT = Opt("NONE", ACTIVATIONS)

KERNELS: tuple[KernelSpec, ...] = (
    spec("se_gate", "squeeze_excite.lgk",
         "squeeze-and-excitation gate: global average, then one or two 1x1 layers with activations, one launch",
         {"layers": Opt(2, (1, 2)), "act1": _ACT, "act2": _ACT, "threads": Opt(128, _GROUPS),
          "cap": Opt(32, SE_GATE_CAPS), "loads": Opt(8, SE_GATE_LOADS), "one_round": Opt(0, (0, 4, 8, 16))},
         # every activation in each slot, every group size and capacity, one and two layers
         [{"act1": a, "act2": ACTIVATIONS[(i + 3) % len(ACTIVATIONS)], "threads": _THREADS[i % len(_THREADS)],
           "cap": SE_GATE_CAPS[i % len(SE_GATE_CAPS)], "layers": 1 if i in (2, 5) else 2,
           "loads": SE_GATE_LOADS[i % len(SE_GATE_LOADS)], "one_round": (0, 4, 8, 16)[i % 4]}
          for i, a in enumerate(ACTIVATIONS)]
         + [{"act1": "RELU", "act2": "LOGISTIC", "threads": 32, "cap": 8, "layers": 2, "loads": 16, "one_round": 8}],
         shared_wg=_group, regroup=_regroup),
)

OPS: dict[str, GpuOpEntry] = {
    SE_GATE_OP: GpuOpEntry("se_gate", lower_se_gate, claimed=False, ref=rf.se_gate),
}
