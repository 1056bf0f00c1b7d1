"""The host side of an OpenCL invoke: transfers through pinned staging and launches through ctypes.

``litegpu_opencl._device.PINNED_TRANSFERS`` (on by default):
Inputs and outputs moved a second time go through a mapped ``CL_MEM_ALLOC_HOST_PTR`` buffer (reads up to
``PINNED_READ_MAX`` bytes, writes up to ``PINNED_WRITE_MAX``); a range moved once (the weights) and
larger ranges take the plain path.  A model with 1-D, 2-D and 3-D grids (conv, depthwise, resize,
softmax, mean, fully connected) run over several inputs gives, bit for bit, the answers of the plain path
and LiteRT's within fp32 tolerance: through ``invoke``, through the asynchronous ``submit`` /
``complete``, past the staging's size limit (least recently used let go, never one a queued read still has
to be copied out of), and with the size limits at 0.

``litegpu_opencl._device.MERGE_READS`` (on by default): a partition's host outputs are ranges of one buffer,
read from the second invoke on as one read of their span into one pinned staging: the same answers, bit for
bit, with one read command.

``litegpu_opencl._device.CTYPES_LAUNCHES`` (on by default): a replay without a command buffer enqueues
each launch through ctypes (sizes made once, no event): the same answers, bit for bit, as pyopencl's
``enqueue_nd_range_kernel``.
"""

from __future__ import annotations

import types

import litegpu
import numpy as np
import pytest
from _gpu_cases import grid_model, oracle
from _litegpu_backends import load_backend_delegate

BACKEND = "opencl"
CONF = {"precision": "fp32", "tuning": "none", "cache": {"enabled": False}}


@pytest.fixture(scope="module")
def model() -> bytes:
    load_backend_delegate(BACKEND, CONF).close()  # skips with the reason where OpenCL is missing
    return grid_model(13, 11)[0]


FEEDS = [np.random.default_rng(i).uniform(-1, 1, (1, 13, 11, 6)).astype(np.float32) for i in range(3)]


def _runs(model: bytes) -> tuple[list[list[np.ndarray]], list]:
    d = load_backend_delegate(BACKEND, CONF)
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
    it.allocate_tensors()
    out = []
    for x in FEEDS:
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        out.append([it.get_tensor(o["index"]).copy() for o in it.get_output_details()])
    kernels = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
    return out, kernels


@pytest.fixture(scope="module")
def plain(model) -> list[list[np.ndarray]]:
    """The answers through the plain path (every transfer from / into pageable numpy memory)."""
    import litegpu_opencl._device as dev_mod

    old, dev_mod.PINNED_TRANSFERS = dev_mod.PINNED_TRANSFERS, False
    old_home, dev_mod.HOST_INPUTS = dev_mod.HOST_INPUTS, False
    try:
        out, (k,) = _runs(model)
    finally:
        dev_mod.PINNED_TRANSFERS, dev_mod.HOST_INPUTS = old, old_home
    assert not k.device._stagings
    return out


@pytest.mark.parametrize("merge", [True, False], ids=["merged-reads", "a-read-each"])
@pytest.mark.parametrize("limits", ["default", "none"])
def test_pinned_transfers_change_no_number(limits, merge, model, plain, monkeypatch):
    import litegpu_opencl._device as dev_mod

    monkeypatch.setattr(dev_mod, "PINNED_TRANSFERS", True)
    monkeypatch.setattr(dev_mod, "HOST_INPUTS", False)  # the input through a staging copy (its own test below)
    monkeypatch.setattr(dev_mod, "MERGE_READS", merge)
    if limits == "none":  # every range over the limits: the plain path
        monkeypatch.setattr(dev_mod, "PINNED_READ_MAX", 0)
        monkeypatch.setattr(dev_mod, "PINNED_WRITE_MAX", 0)
    got, (k,) = _runs(model)
    for g_run, w_run, x in zip(got, plain, FEEDS, strict=True):
        for g, w in zip(g_run, w_run, strict=True):
            np.testing.assert_array_equal(g, w)
        for g, want in zip(g_run, oracle(model, [x]), strict=True):
            np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5)
    held = [st for st in k.device._stagings.values() if st is not None]
    # the input and both outputs (one staging for both where their reads merge: they are ranges of one
    # buffer), moved three times each; the weights (moved once) never
    assert len(held) == ((2 if merge else 3) if limits == "default" else 0)


def test_input_kept_in_pinned_memory_uploads_without_a_copy(model, plain, monkeypatch):
    """HOST_INPUTS: the interpreter keeps the input's value in the device's pinned memory for it
    (``DelegateKernel.input_buffer``), set_tensor writes there, and each invoke's upload is a DMA from it
    (no staging for the input); the answers are the plain path's, bit for bit, and LiteRT's."""
    import litegpu_opencl._device as dev_mod

    monkeypatch.setattr(dev_mod, "HOST_INPUTS", True)
    monkeypatch.setattr(dev_mod, "PINNED_TRANSFERS", True)
    monkeypatch.setattr(dev_mod, "MERGE_READS", True)
    d = load_backend_delegate(BACKEND, CONF)
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
    it.allocate_tensors()
    index = it.get_input_details()[0]["index"]
    (k,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
    home = it.tensor(index)()
    assert isinstance(home.base.base, dev_mod._HostInput)  # float32 view of the pinned bytes
    assert not home.any()  # an input not set yet reads as zeros, as before
    writes = []
    queue_type = type(k.device.queue)
    real_write = queue_type.write
    monkeypatch.setattr(queue_type, "write", lambda self, buf, off, host, blocking: (
        writes.append(host.ctypes.data), real_write(self, buf, off, host, blocking))[1])
    for x, want_run in zip(FEEDS, plain, strict=True):
        it.set_tensor(index, x)
        it.invoke()
        for o, w in zip(it.get_output_details(), want_run, strict=True):
            np.testing.assert_array_equal(it.get_tensor(o["index"]), w)
        for g, want in zip([it.get_tensor(o["index"]) for o in it.get_output_details()], oracle(model, [x]),
                           strict=True):
            np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5)
    assert writes == [home.ctypes.data] * len(FEEDS)  # every upload straight from the pinned home
    assert not [st for key, st in k.device._stagings.items() if key[3] and st is not None]  # no write staging
    it.allocate_tensors()  # nothing changed: the same home, its value kept
    assert it.tensor(index)().ctypes.data == home.ctypes.data
    np.testing.assert_array_equal(it.get_tensor(index), FEEDS[-1])


def test_pinned_staging_async_runs_and_size_limit(model, plain, monkeypatch):
    """Pinned staging on the asynchronous path (submit, complete), under a limit too small for all three:
    the least recently used ones are let go (after their transfers) and made again, answers unchanged."""
    import litegpu_opencl._device as dev_mod

    monkeypatch.setattr(dev_mod, "PINNED_TRANSFERS", True)
    monkeypatch.setattr(dev_mod, "MERGE_READS", False)  # (merged: test_merged_reads_one_read_per_invoke)
    monkeypatch.setattr(dev_mod, "_STAGING_BYTES", 14 * 12 * 9 * 4)  # the larger output only
    d = load_backend_delegate(BACKEND, CONF)
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
    it.allocate_tensors()
    (k,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
    (inp,) = k.plan.inputs
    for _ in range(2):
        for x, want in zip(FEEDS, plain, strict=True):
            pending = k.submit({inp: x})
            out = k.complete(pending)
            got = [out[t] for t in k.plan.outputs]
            for g, w in zip(got, want, strict=True):
                np.testing.assert_array_equal(np.asarray(g).reshape(w.shape), w)
    held = [st for st in k.device._stagings.values() if st is not None]
    # all three (input 3432 bytes, outputs 6048 and 20) never fit together: some were let go
    assert len(held) < 3 and k.device._staging_bytes == sum(st.view.nbytes for st in held) <= dev_mod._STAGING_BYTES


def test_ctypes_launches_change_no_number(model, monkeypatch):
    import litegpu_opencl._device as dev_mod
    from litegpu_opencl import _cl, _command_buffer

    monkeypatch.setenv(_command_buffer.ENV_OFF, "0")  # launch by launch (PoCL records command buffers)
    monkeypatch.setattr(dev_mod, "PINNED_TRANSFERS", False)
    monkeypatch.setattr(dev_mod, "CTYPES_LAUNCHES", False)
    calls = []
    real = _cl.Queue.launch
    monkeypatch.setattr(_cl.Queue, "launch", lambda *a, **k: calls.append(1) or real(*a, **k))
    want, (k,) = _runs(model)  # one Queue.launch per launch
    assert k._recording.command_buffer is None and len(calls) >= len(FEEDS) * len(k._launches)
    monkeypatch.setattr(dev_mod, "CTYPES_LAUNCHES", True)
    calls.clear()
    got, (k,) = _runs(model)
    assert k._recording.command_buffer is None and not calls  # the sizes made once, one raw call each
    for g_run, w_run in zip(got, want, strict=True):
        for g, w in zip(g_run, w_run, strict=True):
            np.testing.assert_array_equal(g, w)


def test_the_ctypes_layer_computes_what_pyopencl_computes(model, monkeypatch):
    """The backend's OpenCL layer (``litegpu_opencl._cl``) against pyopencl on the same driver: every
    program of a partition built again by pyopencl from its source with the same options, its kernels'
    arguments set by pyopencl, the partition's launches enqueued by pyopencl and every buffer read back
    by pyopencl hold, bit for bit, what the backend's own build, launches and reads left there."""
    cl = pytest.importorskip("pyopencl")
    import litegpu_opencl._device as dev_mod
    from litegpu.gpu._dialects._markers import OPENCL_ARGUMENT_BUFFER, OPENCL_BASE_POINTER

    binds, allocs = [], []
    real_bind, real_alloc = dev_mod.CLDevice.bind, dev_mod.CLDevice.alloc

    def bind(self, program, kernel, buffers, params):
        bound = real_bind(self, program, kernel, buffers, params)
        binds.append((program, kernel, list(buffers), dict(params), bound))
        return bound

    def alloc(self, nbytes):
        buf = real_alloc(self, nbytes)
        allocs.append(buf)
        return buf

    monkeypatch.setattr(dev_mod.CLDevice, "bind", bind)
    monkeypatch.setattr(dev_mod.CLDevice, "alloc", alloc)
    d = load_backend_delegate(BACKEND, CONF)
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
    it.allocate_tensors()
    (k,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
    dev = k.device
    ctx = cl.Context.from_int_ptr(dev.ctx.int_ptr)
    queue = cl.CommandQueue.from_int_ptr(dev.queue.int_ptr)

    def snapshot() -> list[np.ndarray]:
        dev.finish()
        out = []
        for b in allocs:
            host = np.empty(b.size, np.uint8)
            cl.enqueue_copy(queue, host, cl.Buffer.from_int_ptr(b.int_ptr))
            out.append(host)
        queue.finish()
        return out

    inp = it.get_input_details()[0]["index"]
    it.set_tensor(inp, FEEDS[0])
    it.invoke()
    want = snapshot()  # the backend's build, launches and transfers
    it.set_tensor(inp, FEEDS[1])
    it.invoke()  # every buffer now holds another input's values

    programs: dict[str, object] = {}
    by_handle = {}
    for program, kernel, buffers, params, bound in binds:
        prog, entry = (program.program, program.entry) if isinstance(program, dev_mod._Member) else (
            program, kernel.entry_point)
        src = cl.Program.from_int_ptr(prog.int_ptr).get_info(cl.program_info.SOURCE)
        if src not in programs:
            programs[src] = cl.Program(ctx, src).build(options=dev_mod._build_options(src))
        pk = cl.Kernel(programs[src], entry)
        scalars = kernel.cl_args(params)
        if kernel.source.startswith(OPENCL_ARGUMENT_BUFFER):  # the allocation twice, the launch's argument buffer
            base, held = (cl.Buffer.from_int_ptr(m.int_ptr) for m in bound[1])  # (the backend's argument buffer)
            args, scalars = [base, base, held], []
        elif kernel.source.startswith(OPENCL_BASE_POINTER):  # the allocation twice, then each buffer's byte offset
            args = [cl.Buffer.from_int_ptr(buffers[0].buffer.int_ptr)] * 2 + [np.uint64(r.offset) for r in buffers]
        else:
            args = [cl.Buffer.from_int_ptr(r.buffer.int_ptr) if r.offset == 0 else
                    cl.Buffer.from_int_ptr(r.buffer.int_ptr).get_sub_region(r.offset, r.nbytes) for r in buffers]
        for i, arg in enumerate([*args, *scalars]):
            pk.set_arg(i, arg)
        by_handle[bound[0].int_ptr] = (pk, args)
    k.send({k.plan.inputs[0]: FEEDS[0]})  # the first input's bytes, then pyopencl's launches only
    dev.finish()
    assert k._launches
    for ln in k._launches:
        pk, _args = by_handle[ln.bound[0].int_ptr]
        cl.enqueue_nd_range_kernel(queue, pk, dev_mod._global_size(ln.grid, ln.kernel.workgroup), ln.kernel.workgroup)
    got = snapshot()
    assert len(got) == len(want) and sum(w.nbytes for w in want) > 0
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    d.close()


def test_an_upload_past_the_limit_keeps_a_queued_reads_staging(model, monkeypatch):
    """An upload that takes the pinned staging past its limit while a queued read still has to be copied
    out of its own staging (between the read's submit and its wait, as a run in flight has it): the
    read's staging is not let go, its bytes arrive intact, the upload lands, and once the read is waited
    for the limit holds again."""
    import litegpu_opencl._device as dev_mod
    from litegpu.gpu._device import BufferRef

    monkeypatch.setattr(dev_mod, "PINNED_TRANSFERS", True)
    d = load_backend_delegate(BACKEND, CONF)
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
    it.allocate_tensors()
    (k,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
    dev = k.device
    n = 4096
    monkeypatch.setattr(dev_mod, "_STAGING_BYTES", n)  # room for one staging of n bytes
    a, b = BufferRef(dev.alloc(n), 0, n), BufferRef(dev.alloc(n), 0, n)
    rng = np.random.default_rng(7)
    data_a, data_b1, data_b2 = (rng.integers(0, 256, n, dtype=np.uint8) for _ in range(3))
    dev.upload(a, data_a)
    first = np.empty(n, np.uint8)
    dev.download_many([(a, first)])  # a range's first read takes the plain path
    np.testing.assert_array_equal(first, data_a)

    out = np.zeros(n, np.uint8)
    token = dev.read_async([(a, out)])  # the second: into a staging, queued, not waited for
    (read_st,) = [st for st in dev._stagings.values() if st is not None]
    assert read_st.pending is not None
    dev.upload(b, data_b1)
    dev.upload(b, data_b2)  # the second upload of b makes a write staging: 2n bytes held, limit n
    assert any(st is read_st for st in dev._stagings.values()), "a queued read's staging was let go"
    assert dev._staging_bytes == 2 * n

    dev.wait_reads(token)
    np.testing.assert_array_equal(out, data_a)
    assert dev._staging_bytes <= n  # the read's staging could go once copied out of
    got_b = np.empty(n, np.uint8)
    dev.download_many([(b, got_b)])
    np.testing.assert_array_equal(got_b, data_b2)


def _read_calls(monkeypatch) -> list:
    from litegpu_opencl import _cl

    calls = []
    real = _cl.Queue.read
    monkeypatch.setattr(_cl.Queue, "read", lambda *a, **kw: calls.append(a[3].nbytes) or real(*a, **kw))
    return calls


@pytest.mark.parametrize("path", ["invoke", "submit"])
def test_merged_reads_one_read_per_invoke(path, model, plain, monkeypatch):
    """``MERGE_READS``: the partition's two host outputs (one crossing as it is, one through its layout
    launch's dense staging) are ranges of one buffer, read from the second invoke on with one read of their
    span into one pinned staging and copied out of it: bit for bit the plain path's answers."""
    import litegpu_opencl._device as dev_mod

    monkeypatch.setattr(dev_mod, "PINNED_TRANSFERS", True)
    monkeypatch.setattr(dev_mod, "MERGE_READS", True)
    d = load_backend_delegate(BACKEND, CONF)
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
    it.allocate_tensors()
    (k,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
    refs = [b.ref for b in k._outputs if b is not None]
    assert len(refs) == 2 and refs[0].buffer is refs[1].buffer
    calls = _read_calls(monkeypatch)
    (inp,) = k.plan.inputs
    for i, (x, want) in enumerate(zip(FEEDS * 2, plain * 2, strict=True)):
        calls.clear()
        out = k.invoke({inp: x}) if path == "invoke" else k.complete(k.submit({inp: x}))
        for t, w in zip(k.plan.outputs, want, strict=True):
            np.testing.assert_array_equal(np.asarray(out[t]).reshape(w.shape), w)
        assert len(calls) == (2 if i == 0 else 1), calls  # the first: a plain read each (seen once)


def test_merge_groups_only_close_ranges_of_one_buffer(monkeypatch):
    """The reads that merge: C-contiguous arrays from ranges of one buffer at most ``_MERGE_GAP`` bytes
    apart, in offset order; another buffer, a far range or a strided array stays a read of its own."""
    import litegpu_opencl._device as dev_mod
    from litegpu.gpu._device import BufferRef

    a, b = object(), object()
    arr = [np.empty(n, np.uint8) for n in (100, 28, 50, 64)]
    strided = np.empty((8, 2), np.uint8)[:, 0]
    items = [(BufferRef(a, 128, 28), arr[1]), (BufferRef(a, 0, 100), arr[0]), (BufferRef(b, 0, 50), arr[2]),
             (BufferRef(a, 256 + dev_mod._MERGE_GAP, 64), arr[3]), (BufferRef(a, 512, 8), strided)]
    dev = types.SimpleNamespace(_read_plans={})  # the grouping needs only the device's plan memo
    for again in (False, True):  # worked out, then (the same ranges, new host arrays) looked up
        if again:
            arr = [np.empty(n, np.uint8) for n in (100, 28, 50, 64)]
            strided = np.empty((8, 2), np.uint8)[:, 0]
            items = [(r, new) for (r, _old), new in zip(items, [arr[1], arr[0], arr[2], arr[3], strided], strict=True)]
        groups = dev_mod.CLDevice._read_groups(dev, items)
        as_ids = sorted([[id(out) for _r, out in g] for g in groups])
        assert as_ids == sorted([[id(arr[0]), id(arr[1])], [id(arr[2])], [id(arr[3])], [id(strided)]])
        assert len(dev._read_plans) == 1
    monkeypatch.setattr(dev_mod, "MERGE_READS", False)
    assert len(dev_mod.CLDevice._read_groups(dev, items)) == len(items)


def test_no_pinned_memory_for_an_input_warns_and_keeps_the_plain_path(model, plain, monkeypatch, caplog):
    """Pinned memory the driver refuses for an input's home (``host_input_array``): a WARNING that says so, the
    interpreter keeps the input in its own array, and the answers are the plain path's."""
    import litegpu_opencl._cl as cl_mod
    import litegpu_opencl._device as dev_mod

    monkeypatch.setattr(dev_mod, "HOST_INPUTS", True)
    real_create = cl_mod.Buffer.create.__func__

    def create(cls, ctx, nbytes, host_pinned=False):
        if host_pinned:
            raise cl_mod.CLError("clCreateBuffer", -4)
        return real_create(cls, ctx, nbytes, host_pinned)

    monkeypatch.setattr(cl_mod.Buffer, "create", classmethod(create))
    d = load_backend_delegate(BACKEND, CONF)
    with caplog.at_level("WARNING", logger="litegpu.opencl"):
        it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
        it.allocate_tensors()
    assert any("no pinned memory" in r.getMessage() for r in caplog.records)
    index = it.get_input_details()[0]["index"]
    assert not isinstance(getattr(it.tensor(index)().base, "base", None), dev_mod._HostInput)
    for x, want_run in zip(FEEDS, plain, strict=True):
        it.set_tensor(index, x)
        it.invoke()
        for o, w in zip(it.get_output_details(), want_run, strict=True):
            np.testing.assert_array_equal(it.get_tensor(o["index"]), w)


def test_pinned_memory_serves_only_the_buffer_it_was_made_for(monkeypatch):
    """A device buffer freed and another made with the same handle (drivers reuse them) must not find the first
    one's pinned memory: two inputs, or a stale view and a live input, would share it."""
    import ctypes

    import litegpu_opencl._device as dev_mod
    from litegpu.gpu._device import BufferRef
    from litegpu_opencl import _cl

    monkeypatch.setattr(dev_mod, "HOST_INPUTS", True)
    d = load_backend_delegate(BACKEND, CONF)
    try:
        dev = d.device
        first = dev.alloc(64)
        ref = BufferRef(first, 0, 64)
        a = dev.host_input_array(ref)
        assert a is not None and dev.host_input_array(ref).ctypes.data == a.ctypes.data  # the same home
        _cl._opencl_loader().clRetainMemObject(ctypes.c_void_p(first.int_ptr))  # the twin releases its own count
        twin = type(first)(first.int_ptr, first.size)  # another buffer object on the same handle
        b = dev.host_input_array(BufferRef(twin, 0, 64))
        assert b is not None and b.ctypes.data != a.ctypes.data
    finally:
        d.close()


def test_an_unchanged_input_keeps_its_pinned_upload_after_another_input_re_plans(monkeypatch):
    """Two inputs in pinned homes; input B resized (a re-plan: new device buffers).  Input A keeps its array (a
    view taken before still feeds the model) and its upload stays a DMA from that pinned memory, no staging
    copy; B gets a home of its own.  The answers are LiteRT's on the resized model."""
    import litegpu_opencl._device as dev_mod
    from _gpu_cases import one_op, rnd
    from ai_edge_litert import interpreter as lrt

    monkeypatch.setattr(dev_mod, "HOST_INPUTS", True)
    monkeypatch.setattr(dev_mod, "PINNED_TRANSFERS", True)
    model, _ = one_op("CONCATENATION", [rnd(1, 4, 5, 6), rnd(1, 2, 5, 6)], axis=1)
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[load_backend_delegate(BACKEND, CONF)])
    it.allocate_tensors()
    a, b = (x["index"] for x in it.get_input_details())
    home_a = it.tensor(a)()
    assert isinstance(home_a.base.base, dev_mod._HostInput)
    it.set_tensor(a, rnd(1, 4, 5, 6))
    it.invoke()  # a run under the first plan (its device buffers are let go at the re-plan)
    it.resize_tensor_input(b, [1, 3, 5, 6])
    it.allocate_tensors()
    assert it.tensor(a)().ctypes.data == home_a.ctypes.data  # A's array kept, its value with it
    home_b = it.tensor(b)()
    assert isinstance(home_b.base.base, dev_mod._HostInput)
    (k,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
    writes: list[int] = []
    queue_type = type(k.device.queue)
    real_write = queue_type.write
    monkeypatch.setattr(queue_type, "write", lambda self, buf, off, host, blocking: (
        writes.append(host.ctypes.data), real_write(self, buf, off, host, blocking))[1])
    ref = lrt.Interpreter(model_content=model, experimental_op_resolver_type=lrt.OpResolverType.BUILTIN_REF)
    ref.resize_tensor_input(b, [1, 3, 5, 6])
    ref.allocate_tensors()
    for run in range(3):  # from the second on, a range moved before would take a staging copy
        xa, xb = rnd(1, 4, 5, 6), rnd(1, 3, 5, 6)
        home_a[...] = xa  # through the view taken before the re-plan
        it.set_tensor(b, xb)
        it.invoke()
        ref.set_tensor(a, xa)
        ref.set_tensor(b, xb)
        ref.invoke()
        (out,) = (o["index"] for o in it.get_output_details())
        np.testing.assert_array_equal(it.get_tensor(out), ref.get_tensor(out))  # a copy: exact
        assert sorted(writes) == sorted([home_a.ctypes.data, home_b.ctypes.data]), run  # both from their homes
        writes.clear()
    assert not [st for key, st in k.device._stagings.items() if key[3] and st is not None]  # no write staging
