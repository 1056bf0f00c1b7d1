"""The OpenCL delegate stores compiled partitions in the cache and loads them back."""

from __future__ import annotations

import logging

import litegpu
import numpy as np
import pytest
from _litegpu_backends import load_backend_delegate
from litegpu.testing import ModelBuilder, assert_allclose_rel, run_litert


def _model(channels: int = 6) -> bytes:
    rng = np.random.default_rng(3)
    b = ModelBuilder()
    x = b.input("x", (1, 9, 9, 5))
    w = b.const("w", rng.standard_normal((channels, 3, 3, 5)).astype(np.float32))
    bias = b.const("b", rng.standard_normal(channels).astype(np.float32))
    y = b.tensor("y", (1, 5, 5, channels))
    b.op("CONV_2D", [x, w, bias], [y], padding=0, stride_w=2, stride_h=2, fused_activation_function=1)
    z = b.tensor("z", (1, 5, 5, channels))
    b.op("LOGISTIC", [y], [z])
    b.output(z)
    return b.build()


def _run(model: bytes, cache_dir, **opts):
    d = load_backend_delegate("opencl", {"cache": {"dir": str(cache_dir), "enabled": True}, **opts})
    it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
    it.allocate_tensors()
    kernels = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
    x = np.random.default_rng(0).standard_normal((1, 9, 9, 5)).astype(np.float32)
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"]), kernels, x


def test_second_prepare_loads_the_entry_and_answers_the_same(tmp_path):
    model = _model()
    cold, (k1,), x = _run(model, tmp_path / "c")
    warm, (k2,), _ = _run(model, tmp_path / "c")
    assert not k1.cache_hit and k2.cache_hit
    assert k2.programs_from_cache == len(k2.binaries) > 0
    (ref,) = run_litert(model, [x])
    assert_allclose_rel(cold, ref, 1e-4)
    np.testing.assert_array_equal(warm, cold)


@pytest.mark.parametrize("as_read", [True, False])
def test_a_warm_start_keeps_the_binaries_it_read_and_stores_nothing(tmp_path, monkeypatch, as_read):
    """``BINARIES_AS_READ``: the programs built from the entry's binaries keep those (no read-back from the
    driver); either way a warm start leaves its entry as it was."""
    from litegpu.gpu import _runtime
    from litegpu_opencl._device import CLDevice

    monkeypatch.setattr(_runtime, "BINARIES_AS_READ", as_read)
    model = _model()
    _run(model, tmp_path / "c")
    entries = {p: p.read_bytes() for p in (tmp_path / "c").glob("*.lgc")}
    asked = []
    real = CLDevice.program_binary
    monkeypatch.setattr(CLDevice, "program_binary", lambda self, prog: asked.append(prog) or real(self, prog))
    _, (k,), _ = _run(model, tmp_path / "c")
    assert k.cache_hit and k.programs_from_cache == len(k.binaries) > 0
    assert (asked == []) == as_read
    assert {p: p.read_bytes() for p in (tmp_path / "c").glob("*.lgc")} == entries


def test_a_changed_option_or_shape_makes_a_new_entry(tmp_path):
    model = _model()
    _run(model, tmp_path / "c")
    _, (k,), _ = _run(model, tmp_path / "c", tuning="fast")  # the default is none
    assert not k.cache_hit
    _, (k,), _ = _run(_model(channels=7), tmp_path / "c")
    assert not k.cache_hit
    assert len(list((tmp_path / "c").glob("opencl-*.lgc"))) == 3


def test_a_corrupt_entry_is_ignored_with_a_warning_and_rewritten(tmp_path, caplog):
    model = _model()
    ref, _, _ = _run(model, tmp_path / "c")
    (entry,) = (tmp_path / "c").glob("opencl-*.lgc")
    raw = bytearray(entry.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    entry.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING):
        out, (k,), _ = _run(model, tmp_path / "c")
    assert not k.cache_hit
    assert any("checksum" in r.getMessage() or "corrupt" in r.getMessage() for r in caplog.records)
    np.testing.assert_array_equal(out, ref)
    _, (k,), _ = _run(model, tmp_path / "c")
    assert k.cache_hit


def test_cache_off_stores_nothing(tmp_path):
    d = load_backend_delegate("opencl", {"cache": {"dir": str(tmp_path / "c"), "enabled": False}})
    it = litegpu.Interpreter(model_content=_model(), experimental_delegates=[d])
    it.allocate_tensors()
    assert not (tmp_path / "c").exists() or not list((tmp_path / "c").iterdir())


@pytest.mark.parametrize("bad", [{"dir": 5}, {"colour": "red"}])
def test_bad_cache_options_are_config_errors(tmp_path, bad):
    with pytest.raises((litegpu.ConfigError, TypeError)):
        d = load_backend_delegate("opencl", {"cache": bad})
        litegpu.Interpreter(model_content=_model(), experimental_delegates=[d]).allocate_tensors()


def _one_program_module():
    pytest.importorskip("pyopencl")
    try:
        from litegpu_opencl import _device
    except ImportError as e:  # pragma: no cover - the backend package is not on the path
        pytest.skip(f"litegpu_opencl cannot be imported: {e}")
    return _device


def test_one_program_keeps_clashing_names_of_its_kernels_apart():
    """Issue 13: a partition's kernels go into one OpenCL program.  Two variants of one template
    (another fused activation) define the same kernel and helper names; a float and a storage-only half kernel define
    helpers of the same name with other types.  Each source's names get its own suffix."""
    _device = _one_program_module()
    from litegpu.gpu.kernels import render

    a = render("conv2d", "opencl", "fp32")
    b = render("conv2d", "opencl", "fp32", act="RELU")
    h = render("conv2d", "opencl", "fp16", half_math=False)
    # a kernel with shared memory declares its work group: __kernel __attribute__((...)) void name(
    w = render("dw_pw_conv2d", "opencl", "fp32", workgroup=(16, 1, 1), split=4)
    assert a.source != b.source and "reqd_work_group_size" in w.source
    source, entries = _device.one_program([a, b, h, w])
    assert entries == ["conv2d_k0", "conv2d_k1", "conv2d_k2", "dw_pw_conv2d_k3"]
    assert "void dw_pw_conv2d_k3(" in source
    for i in range(3):
        assert f"__kernel void conv2d_k{i}(" in source and f"mask_lanes_k{i}(" in source
    assert "mask_lanes(" not in source and "conv2d(" not in source
    assert source.count("#pragma") == len({ln for k in (a, b, h, w) for ln in k.source.splitlines()
                                            if ln.startswith("#pragma")})


def test_one_program_builds_and_runs_each_kernel_as_its_own_build_does():
    """The combined program gives the same numbers as each kernel built alone (PoCL here)."""
    _one_program_module()
    d = load_backend_delegate("opencl", {"cache": {"enabled": False}})
    dev = d.device
    from litegpu.gpu.kernels import render

    kernels = [render("unary", "opencl", "fp32", op="LOGISTIC"), render("unary", "opencl", "fp32", op="TANH")]
    members = dev.compile_group(kernels)
    assert members is not None and len({id(m.program) for m in members}) == 1
    _same_as_alone(dev, kernels, members)


def _same_as_alone(dev, kernels, members) -> None:
    """Each unary kernel run from its group member gives the numbers of the kernel built alone."""
    from litegpu.gpu._device import BufferRef

    x = np.linspace(-3, 3, 64, dtype=np.float32)  # 16 pixels of 4 channels
    params = {"B": 1, "H": 4, "W": 4, "C": 4, "S": 1, "alpha": 0.0}
    for rk, member in zip(kernels, members, strict=True):
        outs = []
        for program in (member, dev.compile(rk)):
            src, dst = BufferRef(dev.alloc(x.nbytes), 0, x.nbytes), BufferRef(dev.alloc(x.nbytes), 0, x.nbytes)
            dev.upload(src, x)
            dev.launch(dev.bind(program, rk, [src, dst], params), rk, rk.global_size(params))
            out = np.empty_like(x)
            dev.download(dst, out)
            outs.append(out)
        np.testing.assert_array_equal(outs[0], outs[1])
        assert not np.array_equal(outs[0], x)  # the kernel ran


@pytest.mark.parametrize("balanced, on_context", [(False, True), (True, True), (False, False)])
def test_a_group_built_as_several_programs_round_trips_through_one_binary(balanced, on_context, monkeypatch):
    """A partition's kernels build as a few programs side by side (one per compile thread), split by
    kernel counts or (``BALANCED_SPLIT``) by source length, which puts kernels of one program out of
    their group order; the group's cached binary holds them all with each program's kernels, and a
    fresh device rebuilds the same kernels from it (same numbers as each kernel built alone).  A
    damaged blob is refused (None: the runtime compiles from source).  The build threads take the
    context from the start's thread (``BUILDS_ON_CONTEXT``) or from the device once it has adopted it."""
    _device = _one_program_module()
    from litegpu.gpu.kernels import render
    from litegpu_opencl import _platforms

    monkeypatch.setattr(_device, "BALANCED_SPLIT", balanced)
    monkeypatch.setattr(_platforms, "BUILDS_ON_CONTEXT", on_context)
    ops = ["LOGISTIC", "TANH", "RELU", "ABS", "NEG", "EXP"]
    kernels = [render("unary", "opencl", "fp32", op=op) for op in ops]
    split = _device._split(kernels, 2)
    assert sorted(i for p in split for i in p) == list(range(6)) and len(split) == 2
    if not balanced:
        assert split == [[0, 1, 2], [3, 4, 5]]
    devs = []
    for _ in range(2):
        d = load_backend_delegate("opencl", {"cache": {"enabled": False}})
        d.device.group_threads = 2  # two programs of three kernels, whatever this device and machine
        assert d.device._start is not None  # the default device: started on a thread (DefaultStart)
        devs.append(d.device)
    members = devs[0].compile_group(kernels)
    assert members is not None and len({id(m.program) for m in members}) == 2
    blob = devs[0].program_binary(members[0])
    assert blob is not None and blob.startswith(_device._MULTI)
    assert devs[1].group_from_binary(kernels, blob[:-1]) is None  # cut short
    assert devs[1].group_from_binary(kernels[:5], blob) is None  # another group's
    again = devs[1].group_from_binary(kernels, blob)
    assert again is not None and len({id(m.program) for m in again}) == 2
    _same_as_alone(devs[1], kernels, again)


@pytest.mark.slow
def test_one_program_understands_every_rendering():
    """one_program renames what a source defines at top level; that relies on every top-level line of
    the OpenCL renderings being a #pragma, a definition (helper or kernel) or a closing brace."""
    _device = _one_program_module()
    from litegpu.gpu import kernels as K

    odd: set[str] = set()
    for name, prec, opts in K.iter_variants():
        for half_math in (True, False):
            for wg in (None, (16, 1, 1)):
                try:
                    rk = K.render(name, "opencl", prec, half_math=half_math, **({"workgroup": wg} if wg else {}),
                                  **opts)
                except Exception:  # noqa: BLE001 - a combination the template does not have
                    continue
                assert rk.entry_point in _device._TOP_DEF.findall(rk.source), (name, opts)
                odd |= {ln for ln in rk.source.splitlines() if ln and not ln[0].isspace() and ln != "}"
                        and not ln.startswith("#pragma") and not _device._TOP_DEF.match(ln)}
    assert not odd
