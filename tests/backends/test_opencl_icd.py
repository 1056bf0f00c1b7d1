"""The default OpenCL start opens the recorded ICD driver alone (``litegpu_opencl._icd``, issue 13).

* A first default start lists every driver through the loader and records, in the cache, which ICD
  file served its device; the next one opens that driver alone and gets the same platform and device,
  a context that runs kernels, and a model's answers equal to the full listing's (checked against
  LiteRT).
* The record is keyed by the installed ICD files: other files (another vendors directory here) have
  no record, and their first start lists every driver and records them.
* A record whose driver does not open, caching off, ``DIRECT_ICD`` off, or one of the loaders'
  environment variables set: the full listing, with the reason at DEBUG where there is one.
"""

from __future__ import annotations

import json
import logging
import shutil

import litegpu
import numpy as np
import pytest
from _litegpu_backends import load_backend_delegate, several_programs_model
from litegpu.testing import assert_allclose_rel, run_litert


@pytest.fixture(scope="module")
def icd():
    """``litegpu_opencl._icd``, or skip where OpenCL or an ICD file is missing."""
    load_backend_delegate("opencl", {"cache": {"enabled": False}}).close()  # skips if unavailable
    from litegpu_opencl import _icd

    if _icd._installed() is None:
        pytest.skip("no ICD files in /etc/OpenCL/vendors (or a loader variable set)")
    return _icd


def _start(cache_dir):
    from litegpu_opencl._platforms import DefaultStart

    s = DefaultStart({"enabled": True, "dir": str(cache_dir)})
    s.thread.join(30)
    assert s.error is None, s.error
    return s


def _names(pair) -> tuple[str, str]:
    return pair[0].name.strip(), pair[1].name.strip()


def _doubled_plus_one(start) -> np.ndarray:
    from litegpu_opencl import _cl

    ctx, queue = start.opened
    dev = start.pair[1]
    prog = _cl.Program.from_source(ctx, dev, "__kernel void k(__global float* x) {"
                                             " int i = get_global_id(0); x[i] = x[i] * 2.0f + 1.0f; }")
    k = prog.kernel("k")
    x = np.arange(32, dtype=np.float32)
    buf = _cl.Buffer.create(ctx, x.nbytes)
    queue.write(buf, 0, x, True)
    k.set_args([buf])
    queue.launch(k, (32,), (32,))
    y = np.empty_like(x)
    queue.read(buf, 0, y, True)
    return y


def test_the_second_start_opens_the_recorded_driver_alone_and_gets_the_same_device(icd, tmp_path):
    from litegpu_opencl._platforms import default_device

    first = _start(tmp_path)
    assert not first.direct and first.recorded is not None and first.recorded.record is None
    second = _start(tmp_path)
    assert second.direct
    assert second.recorded.record["icd"].endswith(".icd")  # the ICD file's path, in the loader's directory
    assert _names(second.pair) == _names(first.pair) == _names(default_device())
    assert second.pair[0].calls is not None  # the platform's calls come from its driver's table
    np.testing.assert_array_equal(_doubled_plus_one(second), np.arange(32, dtype=np.float32) * 2 + 1)
    # the loader's full listing afterwards (backends(), autoselect) holds the same platform and device
    from litegpu_opencl._platforms import list_devices

    assert (second.pair[0].int_ptr, second.pair[1].int_ptr) in [(p.int_ptr, d.int_ptr) for p, d in list_devices()]


def test_a_model_answers_the_same_through_the_recorded_driver(icd, tmp_path, monkeypatch):
    model = several_programs_model()
    x = np.random.default_rng(0).standard_normal((1, 8, 8, 3)).astype(np.float32)
    opened = []
    real = icd.open_direct

    def watched(record):
        opened.append(record)
        return real(record)

    monkeypatch.setattr(icd, "open_direct", watched)
    outs = []
    for _ in range(2):
        d = load_backend_delegate("opencl", {"cache": {"dir": str(tmp_path), "enabled": True}})
        it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        outs.append(it.get_tensor(it.get_output_details()[0]["index"]).copy())
    assert len(opened) == 1  # the second delegate's start
    (ref,) = run_litert(model, [x])
    assert_allclose_rel(outs[0], ref, 1e-4)
    np.testing.assert_array_equal(outs[1], outs[0])


def test_other_icd_files_have_no_record_and_get_their_own(icd, tmp_path, monkeypatch):
    _start(tmp_path)
    assert _start(tmp_path).direct
    vendors = tmp_path / "vendors"
    shutil.copytree(icd.VENDORS_DIR, vendors)
    (vendors / "zz-other.icd").write_text("libnot-an-opencl-driver.so\n")  # another installed ICD file
    monkeypatch.setattr(icd, "VENDORS_DIR", str(vendors))
    first = _start(tmp_path)
    assert not first.direct and first.recorded.record is None
    # a GPU's driver is recorded; a CPU default beside another installed driver is not (that driver may show
    # its GPU next time: a failing or not yet mounted device)
    assert _start(tmp_path).direct == bool(first.pair[1].type & 4)  # CL_DEVICE_TYPE_GPU


def test_a_driver_that_does_not_open_gives_the_full_listing_with_the_reason(icd, tmp_path, monkeypatch, caplog):
    from litegpu_opencl._platforms import default_device

    vendors = tmp_path / "vendors"
    shutil.copytree(icd.VENDORS_DIR, vendors)
    (vendors / "broken.icd").write_text("libnot-an-opencl-driver.so\n")
    monkeypatch.setattr(icd, "VENDORS_DIR", str(vendors))
    good = _start(tmp_path).recorded
    gpu = bool(_start(tmp_path).pair[1].type & 4)  # CL_DEVICE_TYPE_GPU
    good.cache.store(good.key, {"icd": json.dumps({"icd": str(vendors / "broken.icd"), "platform": 0,
                                                   "gpu": gpu}).encode()})
    with caplog.at_level(logging.DEBUG, logger="litegpu.opencl"):
        s = _start(tmp_path)
    assert not s.direct and _names(s.pair) == _names(default_device())
    assert "libnot-an-opencl-driver.so does not open" in caplog.text
    got = good.cache.load(good.key)  # the bad record is gone: recorded again for a GPU, else none
    assert (json.loads(bytes(got["icd"]))["icd"] != str(vendors / "broken.icd")) if gpu else got is None


def test_a_start_that_fails_past_the_recorded_drivers_opening_removes_the_record(icd, tmp_path, monkeypatch):
    """A context the recorded driver alone does not make: that start fails (typed, at the device's first use,
    as any start's failure), and the record is removed, so the next start lists every driver and works."""
    from litegpu_opencl import _cl

    _start(tmp_path)
    real = _cl.create_context

    def refuse(dev):
        raise _cl.CLError("clCreateContext (test)", -6)

    monkeypatch.setattr(_cl, "create_context", refuse)
    from litegpu_opencl._platforms import DefaultStart

    failed = DefaultStart({"enabled": True, "dir": str(tmp_path)})
    failed.thread.join(30)
    assert failed.direct and isinstance(failed.error, _cl.CLError)
    monkeypatch.setattr(_cl, "create_context", real)
    again = _start(tmp_path)
    assert not again.direct and again.error is None
    assert _start(tmp_path).direct  # recorded again by the listing


def test_a_record_outside_the_loaders_icd_files_is_not_opened(icd, tmp_path, caplog):
    good = _start(tmp_path).recorded
    record = json.loads(bytes(good.cache.load(good.key)["icd"]))
    (tmp_path / "elsewhere.icd").write_text(icd._sources([icd.VENDORS_DIR])[record["icd"]] + "\n")
    good.cache.store(good.key, {"icd": json.dumps({**record, "icd": str(tmp_path / "elsewhere.icd")}).encode()})
    with caplog.at_level(logging.DEBUG, logger="litegpu.opencl"):
        assert not _start(tmp_path).direct
    assert "is not an installed ICD file" in caplog.text


@pytest.mark.parametrize("how", ["caching off", "switch off", "layers", "ICD file named"])
def test_no_record_where_the_cache_the_switch_or_the_loaders_environment_says_so(icd, tmp_path, monkeypatch, how):
    """(The variables are read by ``_icd`` only here: the loader started before.)"""
    _start(tmp_path)
    cache = {"enabled": how != "caching off", "dir": str(tmp_path)}
    if how == "switch off":
        monkeypatch.setattr(icd, "DIRECT_ICD", False)
    if how == "layers":
        monkeypatch.setenv("OPENCL_LAYERS", "libsome-layer.so")
    if how == "ICD file named":
        monkeypatch.setenv("OCL_ICD_VENDORS", str(next(iter(icd._icd_files([icd.VENDORS_DIR])))))
    assert icd.recorded(cache) is None
    assert icd.recorded(None) is None


def test_no_cache_options_is_the_default_cache(icd, tmp_path, monkeypatch):
    """``litegpu.load(path)`` passes no ``cache`` options, and ``create_delegate`` then starts with empty
    ones: the record lives in the default cache, as the delegate's own entries do, so a user's second
    start opens the recorded driver alone too."""
    from litegpu_opencl._platforms import DefaultStart

    monkeypatch.setenv("LITEGPU_CACHE_DIR", str(tmp_path))  # the default cache's directory, empty
    starts = []
    for _ in range(2):
        s = DefaultStart({})
        s.thread.join(30)
        assert s.error is None, s.error
        starts.append(s)
    assert starts[0].recorded is not None and starts[0].recorded.record is None and not starts[0].direct
    assert starts[1].direct and starts[1].recorded.record is not None
    assert str(starts[1].recorded.cache.dir).startswith(str(tmp_path))
    assert _names(starts[1].pair) == _names(starts[0].pair)


@pytest.mark.parametrize("variable", ["OCL_ICD_VENDORS", "OCL_ICD_FILENAMES"])
def test_the_loaders_variables_key_the_record(icd, tmp_path, monkeypatch, variable):
    """``OCL_ICD_VENDORS`` naming a directory: its ICD files are the installed ones (ocl-icd's rule);
    ``OCL_ICD_FILENAMES`` (the H100 machines' environment sets it): its libraries may be recorded too.
    Either variable's value is part of the key, and a start under it records and then opens the driver (a GPU;
    a CPU default where it is the only driver)."""
    _start(tmp_path)
    first = _start(tmp_path)  # opened alone: its record is read
    served = icd._sources([icd.VENDORS_DIR])[first.recorded.record["icd"]]
    monkeypatch.setenv(variable, icd.VENDORS_DIR if variable == "OCL_ICD_VENDORS"
                       else f"libnot-an-opencl-driver.so:{served}")
    keyed = icd.recorded({"enabled": True, "dir": str(tmp_path)})
    assert keyed is not None and keyed.key != first.recorded.key and keyed.record is None
    assert not _start(tmp_path).direct
    # (OCL_ICD_FILENAMES names a second library here: a CPU default beside it is not recorded)
    gpu = bool(first.pair[1].type & 4)  # CL_DEVICE_TYPE_GPU
    assert _start(tmp_path).direct == (variable == "OCL_ICD_VENDORS" or gpu)
