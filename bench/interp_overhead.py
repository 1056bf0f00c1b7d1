"""Per-invoke overhead of litegpu's CPU interpreter: a chain of N trivial nodes.

Usage: ``python bench/interp_overhead.py [--nodes 200] [--runs 2000]``

Three numbers per run, each the median over ``--repeats`` batches of ``--runs`` invokes:

* ``noop``: a custom op whose run returns its input list unchanged, i.e. the
  interpreter's own cost per node (building the argument list, calling, storing);
* ``add``: the same chain with ADD (1x4 float32 + constant), litegpu's kernel;
* ``litert``: the ADD chain in LiteRT (reference kernels), for scale.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def _chain(n: int, op: str) -> bytes:
    from litegpu.testing import ModelBuilder

    b = ModelBuilder()
    x = b.input("x", (1, 4))
    c = b.const("c", np.ones((1, 4), np.float32))
    cur = x
    for k in range(n):
        t = b.tensor(f"t{k}", (1, 4))
        if op == "ADD":
            b.op("ADD", [cur, c], [t])
        else:
            b.custom_op(op, [cur, c], [t])
        cur = t
    b.output(cur)
    return b.build()


def _time(it, runs: int, repeats: int) -> float:
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], np.zeros((1, 4), np.float32))
    it.invoke()
    it.invoke()
    batches = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(runs):
            it.invoke()
        batches.append((time.perf_counter() - t0) / runs)
    return statistics.median(batches)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    import litegpu
    from litegpu.cpu._registry import CPU_KERNELS, Prepared, register_kernel

    @register_kernel("LGBenchNoop")
    def _noop(ctx):
        def run(inputs):
            return inputs[:1]
        return Prepared([ctx.inputs[0].shape], run)

    n = args.nodes
    rows = [("noop", litegpu.Interpreter(model_content=_chain(n, "LGBenchNoop")))]
    if CPU_KERNELS.lookup("ADD", "float32", 1) is not None:
        rows.append(("add", litegpu.Interpreter(model_content=_chain(n, "ADD"))))
    try:
        from ai_edge_litert import interpreter as litert

        rows.append(("litert", litert.Interpreter(
            model_content=_chain(n, "ADD"), experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)))
    except ImportError:
        pass
    print(f"{n}-node chain, median of {args.repeats} x {args.runs} invokes")
    for name, it in rows:
        dt = _time(it, args.runs, args.repeats)
        print(f"{name:<8} {dt * 1e6:9.1f} us/invoke  {dt * 1e6 / n:7.3f} us/node")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
