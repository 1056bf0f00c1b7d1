"""float16 activations: LiteRT 2.3's CPU runs these element-wise ops and activations on float16
tensors; litegpu runs the float32 kernel of the same op on the values widened to float32 and
rounds each float16 output once.

For the element-wise ops listed here that is what LiteRT computes too (each element is
widened, computed in float and narrowed), so results agree to float16 rounding.  The float32
kernel is looked up when the node is prepared, so a replaced float32 kernel is used here too.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ._registry import CPU_KERNELS, NodeContext, Prepared, TensorSpec, register_kernel

__all__ = ["FLOAT16_OPS"]

#: op -> versions (as LiteRT registers them for float16 input)
FLOAT16_OPS: dict[str, range] = {
    "ADD": range(1, 7), "MUL": range(1, 9), "MAXIMUM": range(1, 5), "MINIMUM": range(1, 5),
    "EQUAL": range(1, 6), "NOT_EQUAL": range(1, 5), "LESS": range(1, 4), "LESS_EQUAL": range(1, 3),
    "GREATER": range(1, 3), "GREATER_EQUAL": range(1, 4),
    "LOGISTIC": range(1, 4), "TANH": range(1, 4), "SOFTMAX": range(1, 5),
    "SIN": range(1, 3), "COS": range(1, 3), "FLOOR": range(1, 2), "ROUND": range(1, 2), "NEG": range(1, 2),
    "ATAN2": range(1, 2), "GELU": range(1, 4),
    "STABLEHLO_ADD": range(1, 2), "STABLEHLO_MULTIPLY": range(1, 2), "STABLEHLO_MAXIMUM": range(1, 2),
    "STABLEHLO_MINIMUM": range(1, 2),
}


def _widen(spec: TensorSpec | None) -> TensorSpec | None:
    if spec is None or spec.dtype != "float16":
        return spec
    data = None if spec.data is None else np.asarray(spec.data).astype(np.float32)
    return replace(spec, dtype="float32", data=data)


def _float16_node(ctx: NodeContext) -> Prepared:
    inner = CPU_KERNELS.lookup(ctx.op.name, "float32", ctx.op.version)
    if inner is None:
        raise ctx.fail("no float32 kernel to run the float16 node with")
    wide = replace(ctx, inputs=[_widen(t) for t in ctx.inputs], outputs=[_widen(t) for t in ctx.outputs])
    prepared = inner(wide)
    narrow = [o.dtype == "float16" for o in ctx.outputs]
    run32 = prepared.run

    def run(inputs):
        xs = [x.astype(np.float32) if x is not None and x.dtype == np.float16 else x for x in inputs]
        outs = run32(xs)
        return [np.asarray(o).astype(np.float16) if n else o for o, n in zip(outs, narrow, strict=True)]

    return Prepared(list(prepared.output_shapes), run)


for _op, _versions in FLOAT16_OPS.items():
    register_kernel(_op, dtypes=("float16",), versions=_versions)(_float16_node)
