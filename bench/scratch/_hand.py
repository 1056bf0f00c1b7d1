"""Hand-built NodeContext helpers (before the Interpreter exists)."""
import numpy as np
from litegpu._ir import Operator
from litegpu.cpu._registry import CPU_KERNELS, NodeContext, TensorSpec, kernel_dtype
import litegpu.cpu.conv  # noqa

def prep(op, opts, ins, out_dtype="float32", version=1, shapes_known=True):
    specs = []
    for i, (arr, const) in enumerate(ins):
        if arr is None:
            specs.append(None); continue
        specs.append(TensorSpec(i, f"t{i}", str(arr.dtype), arr.shape if shapes_known else None, data=arr if const else None))
    outs = [TensorSpec(len(ins), "out", out_dtype, None)]
    o = Operator(0, op, version, tuple(range(len(ins))), (len(ins),), options=opts)
    ctx = NodeContext(o, specs, outs)
    fn = CPU_KERNELS.lookup(op, kernel_dtype(o, specs, outs), version)
    p = fn(ctx)
    return p, [a for a, _ in ins]
