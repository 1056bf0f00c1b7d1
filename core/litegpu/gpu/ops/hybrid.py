"""Dynamic-range ("hybrid") input quantization, simulated on the GPU: a hybrid CONV_2D,
DEPTHWISE_CONV_2D, TRANSPOSE_CONV or FULLY_CONNECTED reads its float input snapped onto LiteRT's
per-row int8 grid and computes on those integers (docs/gpu-compiler.md §11).  The ``float_view`` pass
makes these nodes; their lowerings are here, the mechanism (grids, the pass's helpers, numpy meanings) in
``gpu/_quant.py``, the kernels in ``shaders/quant.lgk``.
"""

from __future__ import annotations

from .. import _quant as qt
from .._graph import GpuOp
from .._kernel_specs import KernelSpec, Opt, spec, split_wg
from .._layout import channel_vector, slices
from ._entry import GpuOpEntry, Lowerer

__all__ = ["OPS", "KERNELS"]

#: input_range's group sizes (what :func:`split_for` picks)
INPUT_RANGE_SPLITS = (4, 8, 16, 32, 64, 128, 256)

def split_for(chunk: int) -> int:
    """Threads of an ``input_range`` group: about 4 vec4s a thread for small chunks, 256 at most."""
    return next((n for n in INPUT_RANGE_SPLITS if n * 4 >= chunk), INPUT_RANGE_SPLITS[-1])


def lower_input_range(lw: Lowerer) -> list[GpuOp]:
    n = lw.n
    x, r = n.inputs[0], n.outputs[0]
    b, h, w, c = lw.shape(x)
    n4 = h * w * slices(c)
    groups = lw.shape(r)[2]
    chunk = -(-n4 // groups)
    lw.bind("src", x)
    lw.bind("dst", r)
    return [lw.op("input_range", {"split": split_for(chunk)}, {"B": b, "N4": n4, "G": groups, "CHUNK": chunk})]


def lower_dynamic_qdq(lw: Lowerer) -> list[GpuOp]:
    n = lw.n
    per = n.attrs["per"]
    lw.bind("src", n.inputs[0])
    groups = 1
    if per == "batch":
        lw.bind("range", n.inputs[1])
        groups = lw.shape(n.inputs[1])[2]
    lw.bind("dst", n.outputs[0])
    lw.bind("scale", n.outputs[1])
    return [lw.op("dynamic_qdq", {"per": per, "mode": n.attrs["mode"]}, {**lw.dims(n.outputs[0]), "G": groups})]


def lower_hybrid_rescale(lw: Lowerer) -> list[GpuOp]:
    n = lw.n
    y = n.outputs[0]
    lw.bind("sums", n.inputs[0])
    lw.bind("scale", n.inputs[1])
    lw.const("wscale", channel_vector(lw.data(n.inputs[2]).reshape(-1), lw.shape(y)[3]))
    lw.bind("dst", y)
    return [lw.op("hybrid_rescale", {"per": n.attrs["per"], "order": n.attrs["order"]}, lw.dims(y))]


KERNELS: tuple[KernelSpec, ...] = (
    spec("input_range", "quant.lgk", "partial (min, max) of each batch, G groups of split threads a batch",
         {"split": Opt(256, INPUT_RANGE_SPLITS)}, [{"split": n} for n in INPUT_RANGE_SPLITS], shared_wg=split_wg),
    spec("dynamic_qdq", "quant.lgk", "a hybrid op's input as LiteRT's per-row int8 integers, and the row scales",
         {"per": Opt("batch", ("batch", "pixel")), "mode": Opt("asymmetric", ("asymmetric", "symmetric"))},
         [{"per": p, "mode": m} for p in ("batch", "pixel") for m in ("asymmetric", "symmetric")]),
    spec("hybrid_rescale", "quant.lgk", "a hybrid op's integer sums times weight and row scales, LiteRT's order",
         {"per": Opt("batch", ("batch", "pixel")), "order": Opt("joint", ("joint", "split"))},
         [{"per": p, "order": o} for p in ("batch", "pixel") for o in ("joint", "split")]),
)

OPS: dict[str, GpuOpEntry] = {
    qt.INPUT_RANGE_OP: GpuOpEntry("input_range", lower_input_range, claimed=False, ref=qt.input_range_ref),
    qt.DYNAMIC_QDQ_OP: GpuOpEntry("dynamic_qdq", lower_dynamic_qdq, claimed=False, ref=qt.dynamic_qdq_ref),
    qt.HYBRID_RESCALE_OP: GpuOpEntry("hybrid_rescale", lower_hybrid_rescale, claimed=False,
                                     ref=qt.hybrid_rescale_ref),
}
