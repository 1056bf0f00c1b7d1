"""A delegate declines what it cannot prepare (issue 19 item 4): every backend's ``supports`` and
``prepare`` (opencl, vulkan, webgpu and the example plugin) over seeded mutations of real models.

For each mutated model the interpreter plans with one delegate and ``on_device_error: raise``;
the delegate's ``prepare`` is wrapped so that a failure is seen at the hook itself (by default a
prepare failure would fall back to the CPU with a WARNING and hide the disagreement).  Every node
must be declined by ``supports`` or belong to a partition that ``prepare`` compiles; a mutated
model the core refuses before any delegate sees it (a ``ModelError`` naming the problem) is fine.

Mutations are made on the model's IR, only ones a ``.tflite`` file can express: the options
table left out or of another op's type, an option value changed, a runtime tensor's dtype or shape
changed, an op version changed, an optional input dropped; every third model is planned with
``fold_constants: false``.  Base models: the LiteRT test models
with ops the GPU path claims, ModelBuilder models (``random_graph`` chains, the small classifier,
fp16 and int8 weights behind DEQUANTIZE).

Default run: ``N_DEFAULT`` mutations per backend (seeded; a GPU one costs driver compiles).  The longer
run (docs/reliability.md): ``LITEGPU_DELEGATE_FUZZ_N=400 pytest -m slow tests/test_delegate_fuzz.py``.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import sys
from pathlib import Path

import litegpu
import numpy as np
import pytest
from _litegpu_backends import load_backend_delegate
from litegpu import read_model
from litegpu._ir import Model
from litegpu.testing import ModelBuilder, small_image_classifier

sys.path.insert(0, str(Path(__file__).resolve().parent / "backends"))
from _gpu_fuzz import random_graph  # noqa: E402 - tests/backends holds the GPU graph generator

TESTDATA = Path("/work/shared/models/litert-testdata")
# LiteRT test models with nodes the GPU path or the example backend claims (the others are all
# strings, control flow or int ops: every mutation would be declined, which tests nothing).
_TESTDATA_MODELS = ["python__pc_conv", "converter__add", "core__add", "core__multi_add", "core__test_model",
                    "core__add_shared_tensors", "java__float32", "core__conv_huge_im2col"]
BACKENDS = ("opencl", "vulkan", "webgpu", "example")
# Default run: a few mutations on each GPU backend (each costs driver compiles; the three share
# ``supports`` and the lowering, where the disagreements found so far were), many on the example.
N_DEFAULT = {"opencl": 3, "vulkan": 2, "webgpu": 2, "example": 300}
N_SLOW = int(os.environ.get("LITEGPU_DELEGATE_FUZZ_N", "400"))

_DTYPES = ("float16", "int8", "uint8", "int16", "int32", "int64", "bool")
_VALUES = (0, -1, 1, 2, 3, 5, 7, 100, 2**31 - 1, -(2**31))


def _fp16_weights_model() -> bytes:
    """FULLY_CONNECTED on float16 weights behind DEQUANTIZE (the converter's fp16 models), and a
    second DEQUANTIZE read only by an op the CPU runs (SIGN is not on the GPU list): with constant
    folding off the GPU path claimed it and had no kernel for it."""
    rng = np.random.default_rng(5)
    b = ModelBuilder()
    x = b.input("x", (1, 8))
    w16 = b.const("w16", rng.normal(0, 1, (4, 8)).astype(np.float16))
    w = b.tensor("w", (4, 8))
    b.op("DEQUANTIZE", [w16], [w])
    y = b.tensor("y", (1, 4))
    b.op("FULLY_CONNECTED", [x, w, -1], [y])
    c16 = b.const("c16", rng.normal(0, 1, (1, 4)).astype(np.float16))
    c = b.tensor("c", (1, 4))
    b.op("DEQUANTIZE", [c16], [c])
    s = b.tensor("s", (1, 4))
    b.op("SIGN", [c], [s])
    z = b.tensor("z", (1, 4))
    b.op("ADD", [y, s], [z])
    b.output(z)
    return b.build()


def _int8_weights_model() -> bytes:
    """CONV_2D on per-channel int8 weights dequantized in the graph, then depthwise and pools."""
    rng = np.random.default_rng(6)
    b = ModelBuilder()
    x = b.input("x", (1, 6, 6, 3))
    wq = b.const("wq", rng.integers(-100, 100, (4, 3, 3, 3)).astype(np.int8),
                 quant=(np.full(4, 0.01, np.float32), np.zeros(4, np.int64), 0))
    w = b.tensor("w", (4, 3, 3, 3))
    b.op("DEQUANTIZE", [wq], [w])
    y = b.tensor("y", (1, 6, 6, 4))
    b.op("CONV_2D", [x, w, b.const("bias", np.zeros(4, np.float32))], [y], padding=0, stride_w=1, stride_h=1)
    d = b.tensor("d", (1, 6, 6, 4))
    b.op("DEPTHWISE_CONV_2D", [y, b.const("dw", rng.normal(0, 1, (1, 3, 3, 4)).astype(np.float32)),
                               b.const("db", np.zeros(4, np.float32))], [d], padding=0, stride_w=1, stride_h=1,
         depth_multiplier=1)
    p = b.tensor("p", (1, 3, 3, 4))
    b.op("MAX_POOL_2D", [d], [p], padding=1, stride_w=2, stride_h=2, filter_width=2, filter_height=2)
    q = b.tensor("q", (1, 3, 3, 4))
    b.op("AVERAGE_POOL_2D", [p], [q], padding=0, stride_w=1, stride_h=1, filter_width=3, filter_height=3)
    r = b.tensor("r", (1, 3, 3, 4))
    b.op("RESIZE_BILINEAR", [q, b.const("size", np.array([3, 3], np.int32))], [r])
    b.output(r)
    return b.build()


def base_models() -> list[Model]:
    out = [read_model(small_image_classifier(hw=6)), read_model(_fp16_weights_model()),
           read_model(_int8_weights_model())]
    out += [read_model(random_graph(seed, n_ops=5)[0]) for seed in range(6)]
    if TESTDATA.is_dir():
        for name in _TESTDATA_MODELS:
            p = TESTDATA / f"{name}.bin"
            if p.exists():
                try:
                    out.append(read_model(p.read_bytes()))
                except litegpu.ModelError:
                    continue
    return out


def _option_pool(models: list[Model]) -> list[dict]:
    """Options tables of every op in the bases: what a wrong ``builtin_options_type`` reads as."""
    seen: dict[str, dict] = {}
    for m in models:
        for sg in m.subgraphs:
            for op in sg.operators:
                if op.options:
                    seen.setdefault(op.opcode, dict(op.options))
    return list(seen.values())


def _mutate_value(v, rng: np.random.Generator):
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return int(rng.choice(_VALUES))
    if isinstance(v, float):
        return float(rng.choice([0.0, -1.0, 1e30, float("nan"), 2.5]))
    if isinstance(v, (list, tuple, np.ndarray)):
        n = int(rng.integers(0, 5))
        return [int(rng.choice(_VALUES)) for _ in range(n)]
    return v


def mutate(model: Model, rng: np.random.Generator, pool: list[dict]) -> tuple[Model, str]:
    """One file-expressible mutation of one node or tensor of the main subgraph."""
    sg = model.main
    ops = list(sg.operators)
    tensors = list(sg.tensors)
    k = int(rng.integers(len(ops)))
    op = ops[k]
    kind = str(rng.choice(["no options", "foreign options", "option value", "option value", "dtype", "shape",
                           "shape", "version", "drop input"]))
    if kind == "no options":
        ops[k] = dataclasses.replace(op, options={})
    elif kind == "foreign options" and pool:
        ops[k] = dataclasses.replace(op, options=dict(pool[int(rng.integers(len(pool)))]))
    elif kind == "option value" and op.options:
        key = sorted(op.options)[int(rng.integers(len(op.options)))]
        opts = dict(op.options)
        opts[key] = _mutate_value(opts[key], rng)
        kind = f"option {key}={opts[key]!r}"
        ops[k] = dataclasses.replace(op, options=opts)
    elif kind in ("dtype", "shape"):
        runtime = [t for t in (*op.inputs, *op.outputs) if t >= 0 and tensors[t].data is None]
        if not runtime:
            return model, "nothing to mutate"
        t = tensors[runtime[int(rng.integers(len(runtime)))]]
        if kind == "dtype":
            new = dataclasses.replace(t, dtype=str(rng.choice(_DTYPES)))
        else:
            shape = list(t.shape)
            choice = int(rng.integers(4))
            if choice == 0 and shape:
                shape.pop(int(rng.integers(len(shape))))
            elif choice == 1:
                shape.insert(int(rng.integers(len(shape) + 1)), int(rng.choice([1, 2, 3])))
            elif shape:
                shape[int(rng.integers(len(shape)))] = int(rng.choice([0, 1, 2, 3, 5, 9]))
            new = dataclasses.replace(t, shape=tuple(shape), shape_signature=None)
        kind = f"{kind} of {t.name!r}: {t.dtype}{list(t.shape)} -> {new.dtype}{list(new.shape)}"
        tensors[t.index] = new
    elif kind == "version":
        ops[k] = dataclasses.replace(op, version=int(rng.integers(1, 12)))
    elif kind == "drop input" and len(op.inputs) > 1:
        i = int(rng.integers(1, len(op.inputs)))
        ops[k] = dataclasses.replace(op, inputs=tuple(-1 if j == i else t for j, t in enumerate(op.inputs)))
        kind = f"input {i} dropped"
    else:
        return model, "nothing to mutate"
    main = dataclasses.replace(sg, operators=tuple(ops), tensors=tuple(tensors))
    return dataclasses.replace(model, subgraphs=(main, *model.subgraphs[1:]), raw=None,
                               source=None), f"{op.opcode} #{k}: {kind}"


class _Watch:
    """Wraps a delegate's ``prepare`` to record the failures at the hook."""

    def __init__(self, delegate):
        self.real = delegate.prepare
        self.failures: list[str] = []
        self.prepared = 0
        delegate.prepare = self

    def __call__(self, spec):
        try:
            kernel = self.real(spec)
        except Exception as e:
            ops = ", ".join(f"{spec.subgraph.operators[n].opcode} #{n}" for n in spec.node_indices)
            self.failures.append(f"prepare of [{ops}] failed: {type(e).__name__}: {str(e)[:300]}")
            raise
        self.prepared += 1
        return kernel


def fuzz(backend: str, n: int, seed: int) -> tuple[collections.Counter, list[str]]:
    delegate = load_backend_delegate(backend)
    watch = _Watch(delegate)
    bases = base_models()
    pool = _option_pool(bases)
    rng = np.random.default_rng(seed)
    outcomes: collections.Counter[str] = collections.Counter()
    bad: list[str] = []
    for k in range(n):
        base = bases[k % len(bases)]
        model, what = mutate(base, rng, pool)
        before_fail, before_ok = len(watch.failures), watch.prepared
        try:
            it = litegpu.Interpreter(model_content=model, experimental_delegates=[delegate])
            # every third model with constant folding off (a user option): DEQUANTIZE of weights then
            # reaches the delegates instead of being evaluated by the core first
            it.set_partition_options({"on_device_error": "raise", "fold_constants": k % 3 != 2})
            it.allocate_tensors()
        except Exception as e:  # noqa: BLE001 - classified below
            if len(watch.failures) > before_fail:
                outcomes["prepare failed"] += 1
                bad.append(f"{what}: {watch.failures[-1]}")
            elif isinstance(e, litegpu.LiteGPUError):
                outcomes["refused before the delegate"] += 1
            else:
                outcomes[f"crash ({type(e).__name__})"] += 1
                bad.append(f"{what}: {type(e).__name__}: {str(e)[:300]}")
            continue
        finally:
            it = None
        outcomes["prepared" if watch.prepared > before_ok else "all declined"] += 1
    return outcomes, bad


def _check(backend: str, n: int, seed: int) -> None:
    outcomes, bad = fuzz(backend, n, seed)
    print(f"\n{backend}: {n} mutations (seed {seed}): {dict(outcomes)}")
    assert sum(outcomes.values()) == n
    assert not bad, f"{len(bad)} of {n}:\n" + "\n".join(bad[:20])


# webgpu's sample is in the slow set: its device start-up alone is most of the default run's share
@pytest.mark.parametrize("backend", [pytest.param(b, marks=pytest.mark.slow) if b == "webgpu" else b
                                     for b in BACKENDS])
def test_supports_covers_prepare_sampled(backend):
    _check(backend, N_DEFAULT[backend], seed=19)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_supports_covers_prepare(backend):
    _check(backend, N_SLOW, seed=1919)
