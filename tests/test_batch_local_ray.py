"""``litegpu batch`` starting its own local Ray instance, as the command does without ``--address``:
the one-off prepare runs in the driver while Ray starts (``DRIVER_PREPARE``), the actors get its cache
entries with their spec (every actor a warm start), their worker processes inherit the GPU settings
(``SHARED_WORKERS``: no runtime environment of their own), and the call's start-up timeline is in
order.  One Ray start (the tests in test_batch.py share one instance instead); needs Ray not running
in this process, which holds when this module runs on its own or after test_batch.py's instance is
shut down."""

from __future__ import annotations

import os

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="litegpu batch needs the litegpu[ray] extra (pip install 'litegpu[ray]')")
pytest.importorskip("ray.data", reason="litegpu batch needs Ray Data (pip install 'litegpu[ray]')")

from litegpu.batch import read_outputs, run_batch  # noqa: E402
from litegpu.batch._stages import NOSET_CUDA  # noqa: E402
from test_batch import HW, _check_identical, _unavailable, single_process, tiny_cnn  # noqa: E402


def _in_order(tl: dict[str, float], keys: list[str]) -> None:
    got = [tl[k] for k in keys]
    assert got == sorted(got), list(zip(keys, got, strict=True))


def test_own_local_ray_prepares_in_the_driver_and_actors_start_warm(tmp_path):
    backend = next((b for b in ("vulkan", "opencl") if not _unavailable(b)), None)
    if backend is None:
        pytest.skip(f"no GPU backend here (vulkan: {_unavailable('vulkan')}; opencl: {_unavailable('opencl')})")
    if ray.is_initialized():
        pytest.skip("Ray already runs in this process: run_batch would use it, not start its own")
    model = tmp_path / "cnn.tflite"
    model.write_bytes(tiny_cnn())
    inputs = tmp_path / "in"
    inputs.mkdir()
    rng = np.random.default_rng(1)
    for i in range(16):
        np.save(inputs / f"t{i:02d}.npy", rng.normal(size=(1, HW, HW, 3)).astype(np.float32))
    files = sorted(inputs.iterdir())
    expected = single_process(model, files, backend)
    cfg = tmp_path / "app.yaml"  # a private serialization cache: the driver's prepare starts cold
    cfg.write_text(f"cache:\n  dir: {tmp_path / 'cache'}\n")
    out = tmp_path / "out"
    r = run_batch(model, inputs, out, backend=backend, config=str(cfg), actors=2, batch_size=2, progress=False,
                  num_cpus=2, num_gpus=1)
    assert not ray.is_initialized()  # the instance it started is shut down
    assert all(k not in os.environ for k in NOSET_CUDA)  # set only while Ray started, for its processes
    assert (r.items, r.failures) == (len(files), 0)
    _check_identical(read_outputs(out), expected)
    # prepared once, in this process, while Ray started; every actor's prepare a cache hit
    assert r.prepare is not None and r.prepare["where"].startswith("driver") and r.prepare["cache_entries"] >= 1
    # (every actor that ran rows: with so few rows the first actor ready may take them all)
    assert r.actors and all(a["warm"] == "True" for a in r.actors), r.actors
    assert 0.49 <= r.ray["actor_gpus"] < 0.5
    tl = r.timeline
    _in_order(tl, ["model_loaded", "inputs_listed", "ray_started", "prepare_received", "pipeline_started",
                   "first_row", "last_row", "done", "ray_stopped"])
    _in_order(tl, ["inputs_listed", "prepare_started", "prepare_done", "prepare_received"])
    _in_order(tl, ["pipeline_started", "preprocess_started", "preprocess_done", "first_row"])
    for i in range(len(r.actors)):
        _in_order(tl, [f"actor{i}.{k}" for k in ("process", "entered", "spec", "cache", "built", "warm", "ready",
                                                  "first_batch")])
        assert tl[f"actor{i}.first_batch"] <= tl["last_row"]
