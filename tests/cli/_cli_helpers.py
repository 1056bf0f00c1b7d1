"""Helpers for the CLI tests: small builder models, a CLI runner, fake backends, stand-in CPU kernels.

The CLI tests need a handful of float32 ops (FULLY_CONNECTED, RESHAPE, SOFTMAX, ADD,
MUL, LOGISTIC).  Where the real CPU kernels are not registered yet, minimal stand-ins
are registered for the session and removed afterwards; once the kernel branches are
merged the real kernels are found and the stand-ins are never used.  Every value the
tests check is compared with LiteRT or computed by hand, so a stand-in cannot make a
test pass wrongly.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path

import litegpu  # registers the CPU kernels that exist
import numpy as np
import pytest
from litegpu.cpu._registry import CPU_KERNELS, NodeContext, Prepared
from litegpu.testing import ModelBuilder

_ACT = {0: lambda x: x, 1: lambda x: np.maximum(x, 0), 3: lambda x: np.clip(x, 0, 6)}


def _fc(ctx: NodeContext) -> Prepared:
    w = ctx.inputs[1].data
    b = ctx.inputs[2].data if len(ctx.inputs) > 2 and ctx.inputs[2] is not None else None
    act = _ACT[ctx.options.get("fused_activation_function", 0)]
    n_in = w.shape[1]
    batch = int(np.prod(ctx.inputs[0].shape)) // n_in
    wt = np.ascontiguousarray(w.T)

    def run(ins):
        y = ins[0].reshape(batch, n_in) @ wt
        if b is not None:
            y = y + b
        return [act(y).astype(np.float32)]

    return Prepared([(batch, w.shape[0])], run)


def _reshape(ctx: NodeContext) -> Prepared:
    shape = tuple(ctx.outputs[0].shape)

    def run(ins):
        return [ins[0].reshape(shape)]

    return Prepared([shape], run)


def _softmax(ctx: NodeContext) -> Prepared:
    beta = float(ctx.options.get("beta", 1.0))

    def run(ins):
        x = ins[0] * beta
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return [(e / e.sum(axis=-1, keepdims=True)).astype(np.float32)]

    return Prepared([tuple(ctx.inputs[0].shape)], run)


def _binary(fn):
    def prep(ctx: NodeContext) -> Prepared:
        act = _ACT[ctx.options.get("fused_activation_function", 0)]
        shape = tuple(np.broadcast_shapes(tuple(ctx.inputs[0].shape), tuple(ctx.inputs[1].shape)))

        def run(ins):
            return [act(fn(ins[0], ins[1])).astype(np.float32)]

        return Prepared([shape], run)

    return prep


def _logistic(ctx: NodeContext) -> Prepared:
    def run(ins):
        return [(1.0 / (1.0 + np.exp(-ins[0]))).astype(np.float32)]

    return Prepared([tuple(ctx.inputs[0].shape)], run)


_STANDINS = {
    "FULLY_CONNECTED": _fc,
    "RESHAPE": _reshape,
    "SOFTMAX": _softmax,
    "ADD": _binary(np.add),
    "MUL": _binary(np.multiply),
    "LOGISTIC": _logistic,
}


@pytest.fixture(scope="session", autouse=True)
def standin_kernels() -> Iterator[list[str]]:
    added = []
    for op, prep in _STANDINS.items():
        if CPU_KERNELS.lookup(op, "float32", 1) is None:
            CPU_KERNELS.register(op, prep, dtypes=("float32",), versions=range(1, 20))
            added.append(op)
    yield added
    for op in added:  # leave the registry as we found it
        entries = CPU_KERNELS._entries.get(op, [])
        entries[:] = [e for e in entries if e.prepare is not _STANDINS[op]]
        if not entries:
            CPU_KERNELS._entries.pop(op, None)


# --------------------------------------------------------------------------- models


def mlp_model() -> bytes:
    """x (1,4) -> FC(8, relu) -> FC(3) -> ADD(x2-proj) -> LOGISTIC; two inputs, two outputs."""
    rng = np.random.default_rng(1)
    b = ModelBuilder()
    x = b.input("x", (1, 4), "float32")
    z = b.input("z", (1, 3), "float32")
    w1 = b.const("w1", rng.standard_normal((8, 4)).astype(np.float32))
    b1 = b.const("b1", rng.standard_normal(8).astype(np.float32))
    w2 = b.const("w2", rng.standard_normal((3, 8)).astype(np.float32))
    b2 = b.const("b2", rng.standard_normal(3).astype(np.float32))
    h = b.tensor("h", (1, 8), "float32")
    y = b.tensor("y", (1, 3), "float32")
    s = b.tensor("sum:0", (1, 3), "float32")
    p = b.tensor("prob", (1, 3), "float32")
    b.op("FULLY_CONNECTED", [x, w1, b1], [h], fused_activation_function=1)
    b.op("FULLY_CONNECTED", [h, w2, b2], [y])
    b.op("ADD", [y, z], [s])
    b.op("LOGISTIC", [s], [p])
    b.output(s)
    b.output(p)
    return b.build()


def add_model() -> bytes:
    """out = (a + b) * c: two ADD-free MULs would do, but ADD is what the wrong backend breaks."""
    b = ModelBuilder()
    a = b.input("a", (1, 8), "float32")
    bb = b.input("b", (1, 8), "float32")
    c = b.const("c", np.full((1, 8), 2.0, np.float32))
    s = b.tensor("s", (1, 8), "float32")
    o = b.tensor("out", (1, 8), "float32")
    b.op("ADD", [a, bb], [s])
    b.op("MUL", [s, c], [o])
    b.output(o)
    return b.build()


@pytest.fixture
def mlp_path(tmp_path: Path) -> Path:
    p = tmp_path / "mlp.tflite"
    p.write_bytes(mlp_model())
    return p


@pytest.fixture
def add_path(tmp_path: Path) -> Path:
    p = tmp_path / "add.tflite"
    p.write_bytes(add_model())
    return p


# --------------------------------------------------------------------------- running the CLI


class Result:
    def __init__(self, status: int, stdout: str, stderr: str):
        self.status, self.stdout, self.stderr = status, stdout, stderr

    def json(self):
        return json.loads(self.stdout)

    def __repr__(self) -> str:
        return f"<exit {self.status}\nstdout: {self.stdout}\nstderr: {self.stderr}>"


def cli(*argv: str) -> Result:
    from litegpu.cli import main

    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        status = main([str(a) for a in argv])
    return Result(status, o.getvalue(), e.getvalue())


@pytest.fixture
def run_cli():
    return cli


# --------------------------------------------------------------------------- fake backends


class _WrongAddKernel(litegpu.DelegateKernel):
    """Computes ADD as ``fn(a, b)`` (a - b by default: wrong answers on purpose)."""

    def __init__(self, partition, fn=np.subtract, precision=None):
        self.partition = partition
        self.fn = fn
        self.precision = precision
        self.ops = [(op.inputs, op.outputs[0]) for op in partition.operators]
        self.consts = {t.index: t.data for t in partition.tensors.values() if t.data is not None}

    def invoke(self, inputs):
        env = {**self.consts, **inputs}
        for (a, b), o in self.ops:
            env[o] = self.fn(env[a], env[b]).astype(np.float32)
        return {o: env[o] for o in self.partition.outputs}

    def describe(self):
        d = {"transformations": ["add-to-sub (deliberately wrong)"], "device_memory_bytes": 4096}
        if self.precision:
            d["precision"] = self.precision
        return d


def _wrong_backend_plugin(name: str, available: bool = True, reason: str = "", fn=np.subtract,
                          precision: str | None = None, prepare_gate=None, probes: list | None = None):
    """A plugin object registering backend ``name``: claims every float32 ADD and computes ``fn(a, b)``
    (a - b unless told otherwise); its partitions report ``precision`` when given.  ``prepare_gate``
    (a ``threading.Event``): prepare blocks until it is set (a backend as slow as the test wants);
    ``probes``: a list its availability check appends the backend's name to."""
    class WrongDelegate(litegpu.Delegate):
        def supports(self, node):
            if node.op.name == "ADD" and all(t is not None and t.dtype == "float32" for t in node.inputs):
                return litegpu.Support.yes()
            return litegpu.Support.no(f"{node.op.name} is not ADD")

        def prepare(self, partition):
            if prepare_gate is not None:
                prepare_gate.wait(120)
            return _WrongAddKernel(partition, fn, precision)

    WrongDelegate.name = name

    class WrongBackend(litegpu.BackendSpec):
        version = "9.9"
        description = "returns a - b for ADD (test backend)"

        def availability(self):
            if probes is not None:
                probes.append(name)
            return (available, reason)

        def devices(self):
            return ["fake device 0"]

        def create_delegate(self, options):
            return WrongDelegate(options)

    WrongBackend.name = name

    class Plugin:
        @litegpu.hookimpl
        def register_backends(self, register):
            register(WrongBackend)

    return Plugin()


@pytest.fixture
def register_backend():
    """``register_backend(name, plugin=None, available=True, reason="")``: register a backend for
    the test (the wrong-ADD one by default), unregistered afterwards."""
    from litegpu._plugins import register_plugin, unregister_plugin

    names = []

    def reg(name: str, plugin=None, available: bool = True, reason: str = "", **kw) -> str:
        obj = plugin if plugin is not None else _wrong_backend_plugin(name, available, reason, **kw)
        names.append(register_plugin(obj, f"test-{name}"))
        return name

    yield reg
    for n in names:
        unregister_plugin(n)


EXAMPLE_SRC = Path(__file__).resolve().parents[2] / "plugins" / "example" / "src"


@pytest.fixture
def example_backend(register_backend):
    """The example numpy backend plugin (plugins/example), registered in-process."""
    import sys

    if str(EXAMPLE_SRC) not in sys.path:
        sys.path.insert(0, str(EXAMPLE_SRC))
    try:
        import litegpu_example_numpy.plugin as plugin
    except ImportError as e:
        pytest.skip(f"example backend plugin not importable: {e}")
    return register_backend("example", plugin)


@pytest.fixture(autouse=True)
def isolated_plugins(monkeypatch):
    """Only core's own plugins and what a test registers: the backends installed on this machine
    (`make install` installs all of ours) must not change which candidates the CLI sees."""
    from litegpu._plugins import reset_plugins

    monkeypatch.setenv("LITEGPU_DISABLE_PLUGIN_AUTOLOAD", "1")
    reset_plugins()
    yield
    monkeypatch.delenv("LITEGPU_DISABLE_PLUGIN_AUTOLOAD")
    reset_plugins()
