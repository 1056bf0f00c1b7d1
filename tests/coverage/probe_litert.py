"""Probe what LiteRT's CPU build registers: ``python tests/coverage/probe_litert.py`` rewrites
``tests/coverage/litert_cpu_ops.json`` (run it after upgrading ai-edge-litert).

For every BuiltinOperator of the schema:

* **versions**: a one-op model of each version 1..20 is loaded by LiteRT's interpreter with its
  default builtin op resolver (no delegates); the resolver refuses unregistered (op, version)
  pairs by name at load time, whatever the node's tensors, so this list is exact;
* **dtypes**: single-op models built from a few generic signatures (unary, binary, comparison,
  reduction, convolution, ...) are run end to end for each dtype; a dtype is recorded when one
  signature prepares and invokes.  The dtype is the one litegpu's CPU registry keys kernels by
  (the node's first input).  Ops whose inputs fit none of the signatures have no dtypes; the
  list is therefore a lower bound of what LiteRT runs, never more.

Each op is probed in a forked child, so an op that crashes LiteRT on odd inputs only loses its
own dtypes.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

OUT = Path(__file__).with_name("litert_cpu_ops.json")
MAX_VERSION = 20
DTYPES = ["float32", "float16", "int8", "uint8", "int16", "int32", "int64", "bool"]
QUANT = {"int8": (0.05, 3), "uint8": (0.05, 128), "int16": (0.002, 0)}


def _q(dtype):
    return QUANT.get(dtype)


def _wq(dtype):
    """Weights: int8 symmetric (zero point 0), as LiteRT requires."""
    return (0.05, 0) if dtype == "int8" else QUANT.get(dtype)


#: fixed output grids of LOGISTIC/SOFTMAX (probabilities) and TANH
PROB_Q = {"int8": (1 / 256, -128), "uint8": (1 / 256, 0), "int16": (1 / 32768, 0)}
TANH_Q = {"int8": (1 / 128, 0), "uint8": (1 / 128, 128), "int16": (1 / 32768, 0)}


def _vals(dtype, shape, rng):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("float"):
        return rng.uniform(0.5, 2.0, shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -20) if dtype != "uint8" else 100, min(info.max, 20) + (0 if dtype != "uint8" else 140),
                        shape).astype(dtype)


# Each signature: (name, build(b, dtype, rng) -> (outputs built); feeds list)
def _sig_unary(b, d, r, op, opts):
    x = b.input("x", (2, 3, 4), d, quant=_q(d))
    y = b.tensor("y", (2, 3, 4), d, quant=_q(d))
    return [x], [y], [_vals(d, (2, 3, 4), r)]


def _sig_unary_prob(b, d, r, op, opts):
    x = b.input("x", (2, 3, 4), d, quant=_q(d))
    y = b.tensor("y", (2, 3, 4), d, quant=PROB_Q.get(d))
    return [x], [y], [_vals(d, (2, 3, 4), r)]


def _sig_unary_tanh(b, d, r, op, opts):
    x = b.input("x", (2, 3, 4), d, quant=_q(d))
    y = b.tensor("y", (2, 3, 4), d, quant=TANH_Q.get(d))
    return [x], [y], [_vals(d, (2, 3, 4), r)]


def _sig_tconv(b, d, r, op, opts):
    wd = {"int16": "int8"}.get(d, d)
    s = b.const("oshape", np.array([1, 6, 6, 2], np.int32))
    w = b.const("w", _vals(wd, (2, 3, 3, 3), r), quant=_wq(wd))
    x = b.input("x", (1, 3, 3, 3), d, quant=_q(d))
    y = b.tensor("y", (1, 6, 6, 2), d, quant=_q(d))
    opts.update(padding=0, stride_h=2, stride_w=2)
    return [s, w, x], [y], [_vals(d, (1, 3, 3, 3), r)]


def _sig_binary(b, d, r, op, opts):
    x = b.input("x", (2, 3, 4), d, quant=_q(d))
    z = b.input("z", (2, 3, 4), d, quant=_q(d))
    y = b.tensor("y", (2, 3, 4), d, quant=_q(d))
    return [x, z], [y], [_vals(d, (2, 3, 4), r), _vals(d, (2, 3, 4), r)]


def _sig_compare(b, d, r, op, opts):
    x = b.input("x", (2, 3, 4), d, quant=_q(d))
    z = b.input("z", (2, 3, 4), d, quant=_q(d))
    y = b.tensor("y", (2, 3, 4), "bool")
    return [x, z], [y], [_vals(d, (2, 3, 4), r), _vals(d, (2, 3, 4), r)]


def _sig_to_float(b, d, r, op, opts):
    x = b.input("x", (2, 3, 4), d, quant=_q(d))
    y = b.tensor("y", (2, 3, 4), "float32")
    return [x], [y], [_vals(d, (2, 3, 4), r)]


def _sig_from_float(b, d, r, op, opts):
    x = b.input("x", (2, 3, 4), "float32")
    y = b.tensor("y", (2, 3, 4), d, quant=_q(d))
    return [x], [y], [_vals("float32", (2, 3, 4), r)]


def _sig_reduce(b, d, r, op, opts):
    x = b.input("x", (2, 3, 4), d, quant=_q(d))
    ax = b.const("axes", np.array([1], np.int32))
    y = b.tensor("y", (2, 4), d, quant=_q(d))
    return [x, ax], [y], [_vals(d, (2, 3, 4), r)]


def _sig_arg(b, d, r, op, opts):
    x = b.input("x", (2, 3, 4), d, quant=_q(d))
    ax = b.const("axes", np.array([1], np.int32))
    y = b.tensor("y", (2, 4), "int64")
    opts["output_type"] = 4  # INT64
    return [x, ax], [y], [_vals(d, (2, 3, 4), r)]


def _sig_shape_arg(b, d, r, op, opts):
    # ops whose first input is a shape/int tensor: (int32 shape, x)
    x = b.input("x", (2, 3, 4), d, quant=_q(d))
    s = b.const("shape", np.array([4, 6], np.int32))
    y = b.tensor("y", (4, 6), d, quant=_q(d))
    return [x, s], [y], [_vals(d, (2, 3, 4), r)]


def _sig_gather(b, d, r, op, opts):
    x = b.input("x", (3, 4), d, quant=_q(d))
    i = b.const("idx", np.array([2, 0], np.int32))
    y = b.tensor("y", (2, 4), d, quant=_q(d))
    return [x, i], [y], [_vals(d, (3, 4), r)]


def _sig_conv(b, d, r, op, opts):
    wd = {"int16": "int8"}.get(d, d)
    bd = {"int8": "int32", "uint8": "int32", "int16": "int64"}.get(d, d)
    x = b.input("x", (1, 5, 5, 3), d, quant=_q(d))
    if op == "DEPTHWISE_CONV_2D":
        w = b.const("w", _vals(wd, (1, 3, 3, 3), r), quant=_wq(wd))
        bias = b.const("b", _vals(bd, (3,), r), quant=(0.05 * 0.05, 0) if bd.startswith("int") else None)
        y = b.tensor("y", (1, 5, 5, 3), d, quant=_q(d))
        opts.update(padding=0, stride_h=1, stride_w=1, depth_multiplier=1)
    else:
        w = b.const("w", _vals(wd, (2, 3, 3, 3), r), quant=_wq(wd))
        bias = b.const("b", _vals(bd, (2,), r), quant=(0.05 * 0.05, 0) if bd.startswith("int") else None)
        y = b.tensor("y", (1, 5, 5, 2), d, quant=_q(d))
        opts.update(padding=0, stride_h=1, stride_w=1)
    return [x, w, bias], [y], [_vals(d, (1, 5, 5, 3), r)]


def _sig_fc(b, d, r, op, opts):
    wd = {"int16": "int8"}.get(d, d)
    x = b.input("x", (2, 6), d, quant=_q(d))
    w = b.const("w", _vals(wd, (3, 6), r), quant=_wq(wd))
    y = b.tensor("y", (2, 3), d, quant=_q(d))
    return [x, w, -1], [y], [_vals(d, (2, 6), r)]


def _sig_pool(b, d, r, op, opts):
    x = b.input("x", (1, 4, 4, 3), d, quant=_q(d))
    y = b.tensor("y", (1, 2, 2, 3), d, quant=_q(d))
    opts.update(padding=1, stride_h=2, stride_w=2, filter_height=2, filter_width=2)
    return [x], [y], [_vals(d, (1, 4, 4, 3), r)]


def _sig_resize(b, d, r, op, opts):
    x = b.input("x", (1, 2, 2, 3), d, quant=_q(d))
    s = b.const("size", np.array([4, 4], np.int32))
    y = b.tensor("y", (1, 4, 4, 3), d, quant=_q(d))
    return [x, s], [y], [_vals(d, (1, 2, 2, 3), r)]


def _sig_concat(b, d, r, op, opts):
    x = b.input("x", (2, 3), d, quant=_q(d))
    z = b.input("z", (2, 3), d, quant=_q(d))
    y = b.tensor("y", (4, 3), d, quant=_q(d))
    opts.update(axis=0, values_count=2)
    return [x, z], [y], [_vals(d, (2, 3), r), _vals(d, (2, 3), r)]


def _sig_bmm(b, d, r, op, opts):
    x = b.input("x", (2, 3, 4), d, quant=_q(d))
    z = b.input("z", (2, 4, 5), d, quant=_q(d))
    y = b.tensor("y", (2, 3, 5), d, quant=_q(d))
    return [x, z], [y], [_vals(d, (2, 3, 4), r), _vals(d, (2, 4, 5), r)]


SIGNATURES = [_sig_unary, _sig_unary_prob, _sig_unary_tanh, _sig_tconv, _sig_binary, _sig_compare, _sig_to_float, _sig_from_float, _sig_reduce, _sig_arg,
              _sig_shape_arg, _sig_gather, _sig_conv, _sig_fc, _sig_pool, _sig_resize, _sig_concat, _sig_bmm]


def _interp(model: bytes):
    from ai_edge_litert import interpreter as litert

    return litert.Interpreter(model_content=model, num_threads=1,
                              experimental_op_resolver_type=litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)


def _versions(op: str) -> list[int]:
    from litegpu.testing import ModelBuilder

    found = []
    for v in range(1, MAX_VERSION + 1):
        b = ModelBuilder()
        x = b.input("x", (2,), "float32")
        y = b.tensor("y", (2,), "float32")
        b.op(op, [x], [y], version=v)
        b.output(y)
        try:
            _interp(b.build())
        except ValueError as e:
            if "Didn't find op for builtin opcode" in str(e):
                continue
        except Exception:
            pass
        found.append(v)  # loaded, or failed for a reason other than a missing registration
    return found


def _runs(op: str, sig, dtype: str, version: int) -> str | None:
    """The node's lookup dtype (its first input's) when this signature runs, else None."""
    from litegpu.testing import ModelBuilder

    b = ModelBuilder()
    r = np.random.default_rng(0)
    opts: dict = {}
    ins, outs, feeds = sig(b, dtype, r, op, opts)
    try:
        b.op(op, ins, outs, version=version, **opts)
    except Exception:
        return None
    b.output(*outs)
    key = b.tensors[next(i for i in ins if i >= 0)].dtype
    try:
        it = _interp(b.build())
        it.allocate_tensors()
        for det, f in zip(it.get_input_details(), feeds, strict=True):
            it.set_tensor(det["index"], f)
        it.invoke()
    except Exception:
        return None
    return key


def _dtypes(op: str, version: int, emit) -> None:
    seen = set()
    for dtype in DTYPES:
        for sig in SIGNATURES:
            key = _runs(op, sig, dtype, version)
            if key is not None:
                if key not in seen:
                    seen.add(key)
                    emit(key)
                break


def probe_op(op: str) -> dict:
    try:
        versions = _versions(op)
    except ValueError:  # an op the model builder does not know (newer than its schema)
        return {"versions": [], "dtypes": [], "not_probed": "unknown to the model builder"}
    if not versions:
        return {"versions": [], "dtypes": []}
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: stream each dtype found, so a crash keeps what came before
        os.close(rfd)
        with os.fdopen(wfd, "w") as w:
            _dtypes(op, max(versions), lambda d: (w.write(d + "\n"), w.flush()))
        os._exit(0)
    os.close(wfd)
    with os.fdopen(rfd) as rd:
        dtypes = [line.strip() for line in rd if line.strip()]
    _, status = os.waitpid(pid, 0)
    entry = {"versions": versions, "dtypes": dtypes}
    if status != 0:
        entry["probe_crashed"] = True
    return entry


def main() -> int:
    import ai_edge_litert
    from litegpu._schema import builtin_op_names

    ops = sorted(n for n in set(builtin_op_names().values()) if n not in ("CUSTOM", "DELEGATE", "PLACEHOLDER_FOR_GREATER_OP_CODES"))
    result = {}
    for op in ops:
        result[op] = probe_op(op)
        print(op, result[op], file=sys.stderr)
    data = {"litert_version": getattr(ai_edge_litert, "__version__", "?"),
            "resolver": "BUILTIN_WITHOUT_DEFAULT_DELEGATES", "ops": result}
    OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
