"""Reliability (issue 19): shared interpreters, device faults, API confusion.

Each test here failed before the change that made it pass (the commit names it).
"""

from __future__ import annotations

import logging
import os
import threading

import litegpu
import numpy as np
import pytest
from _litegpu_backends import load_backend_delegate
from litegpu.testing import ModelBuilder

GPU_BACKENDS = ("opencl", "vulkan", "webgpu")


def _chain_model(shape=(1, 32, 32, 8), depth: int = 12) -> bytes:
    """out = (((x + 1) * x + 1) * x ...): many steps, so two threads interleave inside one invoke."""
    b = ModelBuilder()
    x = b.input("x", shape)
    one = b.const("one", np.ones(shape, np.float32))
    cur = x
    for k in range(depth):
        t = b.tensor(f"a{k}", shape)
        b.op("ADD", [cur, one], [t])
        u = b.tensor(f"m{k}", shape)
        b.op("MUL", [t, x], [u])
        cur = u
    b.output(cur)
    b.signature("serving_default", {"x": x}, {"out": cur})
    return b.build()


def _chain_ref(x: np.ndarray, depth: int = 12) -> np.ndarray:
    cur = x
    for _ in range(depth):
        cur = (cur + np.float32(1)) * x
    return cur


def _hammer(it: litegpu.Interpreter, n_threads: int, runs: int, *, locked: bool) -> tuple[int, int, list]:
    """Threads each set their own input, invoke, read; counts outputs that match their own input,
    that match another thread's input (a legal interleaving without the lock), and neither (corrupt)."""
    inp = it.get_input_details()[0]["index"]
    out = it.get_output_details()[0]["index"]
    shape = tuple(it.get_input_details()[0]["shape"])
    xs = [np.full(shape, 0.5 + 0.05 * k, np.float32) for k in range(n_threads)]
    refs = [_chain_ref(x) for x in xs]
    own = other = 0
    corrupt: list = []
    errors: list = []
    lock = threading.Lock()
    start = threading.Barrier(n_threads)

    def work(k: int) -> None:
        nonlocal own, other
        start.wait()
        for _ in range(runs):
            try:
                if locked:
                    with it.lock:
                        it.set_tensor(inp, xs[k])
                        it.invoke()
                        y = it.get_tensor(out)
                else:
                    it.set_tensor(inp, xs[k])
                    it.invoke()
                    y = it.get_tensor(out)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))
                return
            hit = [j for j, r in enumerate(refs) if np.allclose(y, r, rtol=1e-3, atol=1e-3)]
            with lock:
                if k in hit:
                    own += 1
                elif hit:
                    other += 1
                else:
                    corrupt.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    return own, other, corrupt


@pytest.mark.parametrize("backend", ["cpu", *GPU_BACKENDS])
def test_one_interpreter_many_threads_never_corrupt(backend):
    """Issue 19 item 1: one Interpreter shared by threads.  Every call is serialised, so each output
    is the answer for one thread's input (never a mix); holding ``it.lock`` around set/invoke/get
    makes the whole sequence atomic, so each thread reads its own answer."""
    delegates = [] if backend == "cpu" else [load_backend_delegate(backend)]
    it = litegpu.Interpreter(model_content=_chain_model(), experimental_delegates=delegates)
    it.allocate_tensors()
    if delegates:
        assert any(s["backend"] == backend for s in it.get_execution_plan())
    runs = 40 if backend == "cpu" else 15
    own, other, corrupt = _hammer(it, 4, runs, locked=False)
    assert not corrupt, f"{len(corrupt)} of {4 * runs} outputs matched no thread's input"
    own, other, corrupt = _hammer(it, 4, runs, locked=True)
    assert (own, other, corrupt) == (4 * runs, 0, [])


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_one_delegate_shared_by_interpreters_in_threads(backend):
    """A delegate object shared by several interpreters, each used by its own thread."""
    d = load_backend_delegate(backend)
    data = _chain_model()
    its = [litegpu.Interpreter(model_content=data, experimental_delegates=[d]) for _ in range(3)]
    results: dict[int, list[bool]] = {}
    errors: list[str] = []

    def work(k: int) -> None:
        it = its[k]
        it.allocate_tensors()
        x = np.full((1, 32, 32, 8), 0.3 + 0.1 * k, np.float32)
        ok = []
        for _ in range(10):
            try:
                it.set_tensor(it.get_input_details()[0]["index"], x)
                it.invoke()
                y = it.get_tensor(it.get_output_details()[0]["index"])
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))
                return
            ok.append(bool(np.allclose(y, _chain_ref(x), rtol=1e-3, atol=1e-3)))
        results[k] = ok

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert all(all(v) for v in results.values()) and len(results) == 3, results


def test_signature_runner_call_is_atomic_across_threads():
    it = litegpu.Interpreter(model_content=_chain_model())
    run = it.get_signature_runner()
    bad: list[int] = []

    def work(k: int) -> None:
        x = np.full((1, 32, 32, 8), 0.5 + 0.05 * k, np.float32)
        for _ in range(20):
            y = run(x=x)["out"]
            if not np.allclose(y, _chain_ref(x), rtol=1e-3, atol=1e-3):
                bad.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


# --------------------------------------------------------------------------- API confusion (item 6/7)

litert = pytest.importorskip("ai_edge_litert.interpreter")


def _outcome(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - compared below
        return e
    return None


def _small(tmp_path):
    data = _chain_model(shape=(1, 2), depth=1)
    path = tmp_path / "m.tflite"
    path.write_bytes(data)
    return data, path


def test_model_arguments_typed_like_litert(tmp_path):
    data, path = _small(tmp_path)
    for kw in ({"model_content": str(path)}, {"model_content": 12}):
        ref, ours = _outcome(lambda kw=kw: litert.Interpreter(**kw)), _outcome(lambda kw=kw: litegpu.Interpreter(**kw))
        assert isinstance(ref, TypeError) and isinstance(ours, TypeError), (kw, ref, ours)
    assert "model_path" in str(_outcome(lambda: litegpu.Interpreter(model_content=str(path))))
    # a bytes path loads in both
    assert _outcome(lambda: litert.Interpreter(model_path=str(path).encode())) is None
    it = litegpu.Interpreter(model_path=str(path).encode())
    it.allocate_tensors()


def test_device_file_is_not_called_empty():
    e = _outcome(lambda: litegpu.Interpreter(model_path="/dev/urandom"))
    assert isinstance(e, ValueError) and isinstance(_outcome(lambda: litert.Interpreter(model_path="/dev/urandom")),
                                                    ValueError)
    assert "not a regular file" in str(e) and "empty" not in str(e)


@pytest.mark.parametrize("index", [0.5, 0.0, "0", None, 1j])
def test_tensor_index_types_checked_like_litert(tmp_path, index):
    data, _ = _small(tmp_path)
    x = np.ones((1, 2), np.float32)
    ours, ref = litegpu.Interpreter(model_content=data), litert.Interpreter(model_content=data)
    for it in (ours, ref):
        it.allocate_tensors()
    for call in (lambda it: it.set_tensor(index, x), lambda it: it.get_tensor(index),
                 lambda it: it.resize_tensor_input(index, [1, 2])):
        e_ref, e_ours = _outcome(lambda c=call: c(ref)), _outcome(lambda c=call: c(ours))
        assert isinstance(e_ref, TypeError), e_ref
        assert isinstance(e_ours, TypeError), e_ours
    for ok in (True, np.int64(0), 0):  # what LiteRT's binding accepts
        assert _outcome(lambda ok=ok: ours.set_tensor(ok, x)) is None
        assert _outcome(lambda ok=ok: ref.set_tensor(ok, x)) is None


def test_resize_errors_are_runtime_errors_like_litert(tmp_path):
    data, _ = _small(tmp_path)
    ours, ref = litegpu.Interpreter(model_content=data), litert.Interpreter(model_content=data)
    for args in ((0, [1, -2]), (99, [1, 2]), (0, [3, 2], True)):
        e_ref, e_ours = _outcome(lambda a=args: ref.resize_tensor_input(*a)), _outcome(
            lambda a=args: ours.resize_tensor_input(*a))
        assert isinstance(e_ref, RuntimeError) and isinstance(e_ours, RuntimeError), (args, e_ref, e_ours)
    e_ref, e_ours = (_outcome(lambda it=it: it.resize_tensor_input(0, [[1, 2]])) for it in (ref, ours))
    assert isinstance(e_ref, ValueError) and isinstance(e_ours, ValueError)


@pytest.fixture
def failing_kernel():
    """A CPU kernel ``TestFailIfNegative`` (copies its input; raises at invoke on a negative value)."""
    from litegpu.cpu._registry import CPU_KERNELS, Prepared

    def prepare(ctx):
        def run(ins):
            if (ins[0] < 0).any():
                raise RuntimeError("negative input")
            return [ins[0] * 2]
        return Prepared([ctx.inputs[0].shape], run)

    with CPU_KERNELS.restored():
        CPU_KERNELS.register("TestFailIfNegative", prepare, dtypes=["float32"])
        yield


def test_failed_invoke_invalidates_outputs(failing_kernel):
    b = ModelBuilder()
    x = b.input("x", (1, 3))
    y = b.tensor("y", (1, 3))
    b.custom_op("TestFailIfNegative", [x], [y])
    b.output(y)
    it = litegpu.Interpreter(model_content=b.build())
    it.allocate_tensors()
    out = it.get_output_details()[0]["index"]
    it.set_tensor(0, np.ones((1, 3), np.float32))
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(out), np.full((1, 3), 2, np.float32))
    it.set_tensor(0, -np.ones((1, 3), np.float32))
    with pytest.raises(litegpu.InterpreterError):
        it.invoke()
    with pytest.raises(litegpu.InterpreterError, match="last invoke failed"):
        it.get_tensor(out)  # used to return the previous run's [2, 2, 2]
    np.testing.assert_array_equal(it.get_tensor(0), -np.ones((1, 3), np.float32))  # inputs stay readable
    it.set_tensor(0, np.full((1, 3), 3, np.float32))
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(out), np.full((1, 3), 6, np.float32))


# --------------------------------------------------------------------------- device faults (item 5)


class _FaultyKernel(litegpu.DelegateKernel):
    """A real backend kernel whose invoke raises from call ``fail_at`` on (a device lost mid-run)."""

    def __init__(self, inner, fail_at: int, calls: list):
        self.inner, self.fail_at, self.calls = inner, fail_at, calls

    def invoke(self, inputs):
        self.calls.append(1)
        if len(self.calls) >= self.fail_at:
            raise RuntimeError("injected device fault: clEnqueueNDRangeKernel returned CL_OUT_OF_RESOURCES")
        return self.inner.invoke(inputs)

    def to_host(self, value):
        return self.inner.to_host(value)

    def close(self):
        self.inner.close()


def _inject(delegate, *, at_prepare: bool = False, fail_at: int = 10**9) -> list:
    """Patch one delegate object: prepare raises, or its kernels' invokes fail from call ``fail_at``."""
    calls: list = []
    real = delegate.prepare

    def prepare(spec):
        if at_prepare:
            raise litegpu.DelegateError("injected device fault: out of device memory while building kernels")
        return _FaultyKernel(real(spec), fail_at, calls)

    delegate.prepare = prepare
    return calls


def _split_case():
    from _litegpu_backends import cpu_split_model

    data = cpu_split_model((1, 4, 4, 3))
    x = np.linspace(-2, 2, 48, dtype=np.float32).reshape(1, 4, 4, 3)
    t = x * x
    return data, x, np.floor(t) - (t + t)


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_device_fault_at_invoke_falls_back_to_cpu(backend, caplog):
    data, x, want = _split_case()
    d = load_backend_delegate(backend)
    calls = _inject(d, fail_at=4)  # two partitions: the 2nd invoke's second partition fails
    it = litegpu.Interpreter(model_content=data, experimental_delegates=[d])
    it.set_partition_options({"on_device_error": "fallback"})  # the library default; tests set raise
    it.allocate_tensors()
    assert [s["backend"] for s in it.get_execution_plan()] == [backend, "cpu", backend]
    out = it.get_output_details()[0]["index"]
    with caplog.at_level(logging.WARNING, logger="litegpu"):
        for _ in range(4):
            it.set_tensor(0, x)
            it.invoke()
            np.testing.assert_allclose(it.get_tensor(out), want, rtol=1e-5, atol=1e-5)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "CL_OUT_OF_RESOURCES" in r.message]
    assert len(warnings) == 1 and "on the CPU" in warnings[0].message
    assert len(calls) == 4  # nothing sent to the failed device after the fault


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_device_fault_at_prepare_falls_back_to_cpu(backend, caplog):
    data, x, want = _split_case()
    d = load_backend_delegate(backend)
    _inject(d, at_prepare=True)
    it = litegpu.Interpreter(model_content=data, experimental_delegates=[d])
    it.set_partition_options({"on_device_error": "fallback"})
    with caplog.at_level(logging.WARNING, logger="litegpu"):
        it.allocate_tensors()
    assert "out of device memory" in caplog.text and "on the CPU" in caplog.text
    assert [s["backend"] for s in it.get_execution_plan()] == ["cpu"]
    it.set_tensor(0, x)
    it.invoke()
    np.testing.assert_allclose(it.get_tensor(it.get_output_details()[0]["index"]), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_on_device_error_raise(backend, tmp_path):
    data, x, _ = _split_case()
    d = load_backend_delegate(backend)
    _inject(d, fail_at=1)
    it = litegpu.Interpreter(model_content=data, experimental_delegates=[d])
    it.set_partition_options({"on_device_error": "raise"})
    it.allocate_tensors()
    it.set_tensor(0, x)
    with pytest.raises(litegpu.DelegateError, match="CL_OUT_OF_RESOURCES"):
        it.invoke()
    d2 = load_backend_delegate(backend)
    _inject(d2, at_prepare=True)
    it = litegpu.Interpreter(model_content=data, experimental_delegates=[d2])
    it.set_partition_options({"on_device_error": "raise"})
    with pytest.raises(litegpu.DelegateError, match="out of device memory"):
        it.allocate_tensors()


def test_on_device_error_is_a_config_key(monkeypatch):
    from litegpu._config import load_config
    from litegpu._partition import PartitionOptions

    monkeypatch.delenv("LITEGPU_ON_DEVICE_ERROR", raising=False)
    assert load_config().partition_options().on_device_error == "fallback"
    assert PartitionOptions().on_device_error == "fallback"
    monkeypatch.setenv("LITEGPU_ON_DEVICE_ERROR", "raise")
    assert load_config().partition_options().on_device_error == "raise"
    assert load_config({"partition": {"on_device_error": "raise"}}).partition_options().on_device_error == "raise"
    with pytest.raises(litegpu.ConfigError) as e:
        load_config({"partition": {"on_device_error": "ignore"}})
    assert e.value.path == "partition.on_device_error"


# --------------------------------------------------------------------------- memory (item 7)

_RSS_SCRIPT = r"""
import gc, os, sys, numpy as np
sys.path.insert(0, {tests!r})
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
import litegpu
from test_reliability import _chain_model
data = _chain_model(shape=(1, 256, 256, 48), depth=3)  # 12 MiB intermediates: kept in the heap
x = np.ones((1, 256, 256, 48), np.float32)
gc.collect()
start = rss()
peak = 0
for _ in range(10):
    it = litegpu.Interpreter(model_content=data)
    it.allocate_tensors()
    it.set_tensor(0, x)
    it.invoke()
    peak = max(peak, rss())
    del it
    gc.collect()
print(start, rss(), peak)
"""


def test_creating_and_dropping_interpreters_returns_rss():
    """The CPU heap tuning keeps freed memory while interpreters live; once the last one is dropped
    the heap is trimmed, so RSS returns to within 10% of where the loop started."""
    import subprocess
    import sys
    from pathlib import Path

    tests = str(Path(__file__).resolve().parent)
    env = dict(os.environ)
    env.pop("LITEGPU_HEAP_TUNING", None)
    p = subprocess.run([sys.executable, "-c", _RSS_SCRIPT.format(tests=tests)], capture_output=True, text=True,
                       timeout=600, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    start, end, peak = (int(v) for v in p.stdout.split()[-3:])
    print(f"\nRSS start {start / 2**20:.0f} MiB, peak {peak / 2**20:.0f} MiB, end {end / 2**20:.0f} MiB")
    assert end <= start * 1.10, (start, end, peak)


# webgpu has no program binaries (nothing was rebuilt there): it runs in the slow set only
@pytest.mark.parametrize("backend", ["opencl", "vulkan", pytest.param("webgpu", marks=pytest.mark.slow)])
def test_gpu_interpreter_lifetimes_keep_no_objects(backend, tmp_path):
    """Creating and dropping GPU interpreters of one model (one delegate, the compiled-delegate cache
    on, as a service runs) leaves none of our objects behind: the device keeps the very programs the
    first interpreter built (a warm prepare used to rebuild each from its cached binary: a new
    driver program or pipeline per interpreter, the memory PoCL and lavapipe kept), no partition
    kernel stays alive, the delegate keeps no entry per dropped model, and (vulkan) no memory block
    stays bound to a dropped interpreter's buffers.  Object counts, not RSS:
    the RSS figures are measured by bench/soak.py (docs/reliability.md)."""
    import gc

    from litegpu.gpu._runtime import GpuPartitionKernel
    from litegpu.testing import small_image_classifier

    data = small_image_classifier(hw=8)
    d = load_backend_delegate(backend, {"cache": {"dir": str(tmp_path / "cache")}})
    x = np.linspace(-1, 1, 8 * 8 * 3, dtype=np.float32).reshape(1, 8, 8, 3)

    def lifetime() -> np.ndarray:
        it = litegpu.Interpreter(model_content=data, experimental_delegates=[d])
        it.allocate_tensors()
        assert {s["backend"] for s in it.get_execution_plan()} == {backend}
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        return it.get_tensor(it.get_output_details()[0]["index"])

    first = lifetime()
    gc.collect()
    programs = dict(d.device._programs)
    for _ in range(2):
        np.testing.assert_array_equal(lifetime(), first)
        gc.collect()
        assert {k: id(v) for k, v in d.device._programs.items()} == {k: id(v) for k, v in programs.items()}
    assert not [o for o in gc.get_objects() if isinstance(o, GpuPartitionKernel)]
    assert len(d._tokens) <= 1
    if backend == "vulkan":  # the device held its last submission, and with it that interpreter's buffers
        assert not [blk for blocks in d.device._blocks.values() for blk in blocks]
