"""The OpenCL rendering and transfer switches of issue 12 change no number.

* ``litegpu.gpu._dialects.opencl``: ``OFFSET_ARGS`` (a buffer is its allocation plus an element-offset
  argument, not a sub-buffer), ``GROUP_INDEX`` (``gid`` from the group id and a literal group size, with
  ``reqd_work_group_size``), ``REQD_WORK_GROUP_SIZE = "always"``;
* ``litegpu_opencl._device.POLL_WAIT``: an invoke polls its last read's status instead of waiting on it;
* ``litegpu_opencl._device.PINNED_TRANSFERS``: inputs and outputs moved a second time go through pinned
  staging (a mapped ``CL_MEM_ALLOC_HOST_PTR`` buffer), also on the asynchronous path and past the
  staging's size limit (least recently used let go).

Each runs a model with 1-D, 2-D and 3-D grids (conv, depthwise, resize, softmax, mean, fully connected)
over several inputs: outputs bit for bit those of the defaults, and LiteRT's within fp32 tolerance.
"""

from __future__ import annotations

import litegpu
import numpy as np
import pytest
from _gpu_cases import oracle, rnd
from _litegpu_backends import load_backend_delegate
from litegpu.testing import ModelBuilder

BACKEND = "opencl"
CONF = {"precision": "fp32", "tuning": "none", "cache": {"enabled": False}}
O = "litegpu.gpu._dialects.opencl"


@pytest.fixture(scope="module")
def model() -> bytes:
    load_backend_delegate(BACKEND, CONF).close()  # skips with the reason where OpenCL is missing
    b = ModelBuilder()
    x = b.input("x", (1, 13, 11, 6))
    c = b.tensor("c", (1, 13, 11, 9))
    b.op("CONV_2D", [x, b.const("w", rnd(9, 3, 3, 6)), b.const("b", rnd(9))], [c], padding=0, stride_h=1,
         stride_w=1, fused_activation_function=1)
    d = b.tensor("d", (1, 7, 6, 9))
    b.op("DEPTHWISE_CONV_2D", [c, b.const("wd", rnd(1, 3, 3, 9)), b.const("bd", rnd(9))], [d], padding=0,
         stride_h=2, stride_w=2, depth_multiplier=1)
    r = b.tensor("r", (1, 14, 12, 9))
    b.op("RESIZE_BILINEAR", [d, b.const("sz", np.array([14, 12], np.int32))], [r], half_pixel_centers=True,
         version=3)
    s = b.tensor("s", (1, 14, 12, 9))
    b.op("SOFTMAX", [r], [s], beta=1.0)
    m = b.tensor("m", (1, 9))
    b.op("MEAN", [s, b.const("ax", np.array([1, 2], np.int32))], [m], keep_dims=False)
    f = b.tensor("f", (1, 5))
    b.op("FULLY_CONNECTED", [m, b.const("fw", rnd(5, 9)), b.const("fb", rnd(5))], [f])
    b.output(s, f)
    return b.build()


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
def defaults(model) -> list[list[np.ndarray]]:
    return _runs(model)[0]


@pytest.mark.parametrize("switch", [f"{O}.OFFSET_ARGS", f"{O}.GROUP_INDEX", f"{O}.REQD_WORK_GROUP_SIZE",
                                    "litegpu_opencl._device.PINNED_TRANSFERS",
                                    "litegpu_opencl._device.POLL_WAIT"])
def test_switch_changes_no_number(switch, model, defaults, monkeypatch):
    import importlib

    module, name = switch.rsplit(".", 1)
    mod = importlib.import_module(module)
    value = "always" if name == "REQD_WORK_GROUP_SIZE" else not getattr(mod, name)
    monkeypatch.setattr(mod, name, value)
    got, (k,) = _runs(model)
    for g_run, w_run, x in zip(got, defaults, FEEDS, strict=True):
        for g, w in zip(g_run, w_run, strict=True):
            np.testing.assert_array_equal(g, w)
        for g, want in zip(g_run, oracle(model, [x]), strict=True):
            np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5)
    sources = [ln.kernel.source for ln in k._launches]
    if name == "OFFSET_ARGS":
        assert all(("buffer_offsets" in ln.kernel.features) == value for ln in k._launches)
        assert all(("_off_" in s) == value for s in sources)
    if name in ("GROUP_INDEX", "REQD_WORK_GROUP_SIZE") and value:
        assert all("reqd_work_group_size" in s for s in sources)
    if name == "GROUP_INDEX":
        assert all(("get_global_id" in s) != value for s in sources if "get_global_id" in s or "get_group_id" in s)
    if name == "PINNED_TRANSFERS":  # the input and both outputs moved through pinned staging
        assert sum(st is not None for st in k.device._stagings.values()) == 3 if value else not k.device._stagings


def test_pinned_staging_async_runs_and_size_limit(model, defaults, monkeypatch):
    """Pinned staging on the asynchronous path (submit, complete), under a limit too small for all three:
    the least recently used ones are let go (after their transfers) and made again, answers unchanged."""
    import litegpu_opencl._device as dev_mod

    monkeypatch.setattr(dev_mod, "PINNED_TRANSFERS", True)
    monkeypatch.setattr(dev_mod, "_STAGING_BYTES", 14 * 12 * 9 * 4)  # the larger output only
    d = load_backend_delegate(BACKEND, CONF)
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
    it.allocate_tensors()
    (k,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
    (inp,) = k.plan.inputs
    for _ in range(2):
        for x, want in zip(FEEDS, defaults, strict=True):
            pending = k.submit({inp: x})
            out = k.complete(pending)
            got = [out[t] for t in k.plan.outputs]
            for g, w in zip(got, want, strict=True):
                np.testing.assert_array_equal(np.asarray(g).reshape(w.shape), w)
    held = [st for st in k.device._stagings.values() if st is not None]
    # all three (input 3432 bytes, outputs 6048 and 20) never fit together: some were let go
    assert len(held) < 3 and k.device._staging_bytes == sum(st.view.nbytes for st in held) <= dev_mod._STAGING_BYTES
