"""Shared test helper: a backend's delegate, or a skip naming why it cannot run here.

A plain module (not conftest.py): several conftest.py files exist under tests/, and ``from conftest
import ...`` would pick whichever pytest imported last.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def load_backend_delegate(name: str, options: dict | None = None):
    """A delegate of backend ``name`` or ``pytest.skip`` with the reason it cannot run here.

    Installed backends are found through their entry points (the way users get them); in a source
    checkout without ``make install`` the backend's package folder (``backends/NAME``) is tried next.
    """
    import importlib
    import sys

    import litegpu
    from litegpu import BackendUnavailableError, UnknownBackendError

    try:
        delegate = litegpu.load_delegate(name, options)
        # a driver started in the background (vulkan's default device: BackendSpec.quick_availability)
        # reports a failed start at first use: ask now, so that a machine without one skips
        getattr(delegate, "devices", lambda: ())()
        return delegate
    except UnknownBackendError:
        pass
    except BackendUnavailableError as e:
        pytest.skip(f"backend {name} unavailable: {e}")
    folder = Path(__file__).resolve().parents[1] / "backends" / name
    if not folder.is_dir():
        pytest.skip(f"backend {name} is not installed")
    sys.path.insert(0, str(folder))
    try:
        mod = importlib.import_module(f"litegpu_{name}")
    except ImportError as e:
        pytest.skip(f"backend {name} cannot be imported: {e}")
    spec = next(v for k, v in vars(mod).items() if k.endswith("Backend") and isinstance(v, type))()
    ok, why = spec.availability()
    if not ok:
        pytest.skip(f"backend {name} unavailable: {why}")
    return spec.create_delegate(dict(options or {}))


def missing_kernels(model_path: str | Path, *, include_custom: bool = True) -> list[str]:
    """Ops of the model (all subgraphs) with no CPU kernel registered for their dtype and version."""
    import litegpu  # noqa: F401 - registers the CPU kernels
    from litegpu._reader import read_model
    from litegpu.cpu._registry import CPU_KERNELS

    try:
        model = read_model(str(model_path))
    except Exception:  # noqa: BLE001 - a model the reader refuses needs no kernels
        return []
    missing: list[str] = []
    for sg in model.subgraphs:
        for op in sg.operators:
            if op.is_custom and not include_custom:
                continue
            ins = [sg.tensors[i] for i in op.inputs if i >= 0]
            dtype = ins[0].dtype if ins else (sg.tensors[op.outputs[0]].dtype if op.outputs else "float32")
            if CPU_KERNELS.lookup(op.name, dtype, op.version) is None and op.name not in missing:
                missing.append(op.name)
    return missing


def cpu_split_model(shape: tuple[int, ...]) -> bytes:
    """``v = floor(x*x) - 2*(x*x)`` with the FLOOR as a CPU-only custom op (``TestCpuFloor``): a GPU
    delegate gets two partitions, and ``w = 2*(x*x)`` is read only by the second one (it can stay on
    the device between them).  The kernel is registered once per process through a plugin."""
    import litegpu
    import numpy as np
    from litegpu._plugins import register_plugin
    from litegpu.cpu._registry import CPU_KERNELS, Prepared
    from litegpu.testing import ModelBuilder

    class _FloorPlugin:
        @litegpu.hookimpl
        def register_cpu_kernels(self, register):
            register("TestCpuFloor", lambda ctx: Prepared([ctx.inputs[0].shape], lambda ins: [np.floor(ins[0])]),
                     dtypes=["float32"])

    if CPU_KERNELS.lookup("TestCpuFloor", "float32", 1) is None:
        register_plugin(_FloorPlugin(), "test-cpu-floor-kernel")
    b = ModelBuilder()
    x = b.input("x", shape, "float32")
    t, w, u, v = (b.tensor(n, shape, "float32") for n in "twuv")
    b.op("MUL", [x, x], [t], fused_activation_function=0)
    b.op("ADD", [t, t], [w], fused_activation_function=0)  # read only by the second GPU partition
    b.custom_op("TestCpuFloor", [t], [u])  # CPU
    b.op("SUB", [u, w], [v], fused_activation_function=0)
    b.output(v)
    return b.build()


def several_programs_model() -> bytes:
    """Two convolutions (4 weight/bias constants) and two other kernels: several programs."""
    import numpy as np
    from litegpu.testing import ModelBuilder

    rng = np.random.default_rng(5)
    b = ModelBuilder()

    def conv(name: str, src, k: int, cin: int, cout: int, padding: int, act: int):  # stride 1, SAME or VALID
        w = b.const(f"w{name}", rng.standard_normal((cout, k, k, cin)).astype(np.float32))
        bias = b.const(f"b{name}", rng.standard_normal(cout).astype(np.float32))
        out = b.tensor(name, (1, 8, 8, cout))
        b.op("CONV_2D", [src, w, bias], [out], padding=padding, stride_w=1, stride_h=1, fused_activation_function=act)
        return out

    x = b.input("x", (1, 8, 8, 3))
    y = conv("y", x, 3, 3, 6, padding=0, act=1)
    z = b.tensor("z", (1, 8, 8, 6))
    b.op("LOGISTIC", [y], [z])
    o = conv("o", z, 1, 6, 4, padding=1, act=0)
    t = b.tensor("t", (1, 8, 8, 4))
    b.op("TANH", [o], [t])
    b.output(t)
    return b.build()


def invoke_all(it, xs):
    """Set every input of interpreter ``it`` in order, invoke, and return copies of every output."""
    for det, x in zip(it.get_input_details(), xs, strict=True):
        it.set_tensor(det["index"], x)
    it.invoke()
    return [it.get_tensor(o["index"]).copy() for o in it.get_output_details()]
