"""No silent fallback: a requested backend that cannot run is a WARNING naming the reason and what ran
instead (or an error with ``strict``); the partition summary is a WARNING when ops fall back to the CPU;
``logging.level`` in a configuration shows messages even when the application configured no logging."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import litegpu
import numpy as np
import pytest
from litegpu import BackendSpec, Delegate, Support
from litegpu._plugins import register_plugin, unregister_plugin
from litegpu.testing import ModelBuilder


def _add_mul_model() -> bytes:
    b = ModelBuilder()
    x = b.input("x", (1, 4))
    y = b.tensor("y", (1, 4))
    z = b.tensor("z", (1, 4))
    b.op("ADD", [x, x], [y], fused_activation_function=0)
    b.op("MUL", [y, y], [z], fused_activation_function=0)
    b.output(z)
    return b.build()


class _AddOnly(Delegate):
    """Claims ADD only, so MUL falls back to the CPU."""

    name = "addonly"

    def supports(self, node):
        if node.op.name == "ADD":
            return Support.yes()
        return Support.no("this test backend runs ADD only")

    def prepare(self, spec):  # the CPU kernels still run the claimed node through the fallback path
        raise NotImplementedError


class _Gone(BackendSpec):
    name = "gone"

    def availability(self):
        return False, "libgone.so not found (install the gone driver)"

    def create_delegate(self, options):  # pragma: no cover - never called: unavailable
        raise AssertionError


class _Plugin:
    @litegpu.hookimpl
    def register_backends(self, register):
        register(_Gone)


@pytest.fixture
def gone_backend():
    name = register_plugin(_Plugin(), "test-gone-backend")
    yield
    unregister_plugin(name)


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "litegpu" and r.levelno == logging.WARNING]


def test_unavailable_backend_warns_with_reason_and_what_ran(gone_backend, caplog):
    with caplog.at_level(logging.WARNING, logger="litegpu"):
        it = litegpu.load(_add_mul_model(), backend="gone")
    assert it.litegpu_backend == "cpu"
    assert _warnings(caplog) == [
        "backend 'gone' is not available here: libgone.so not found (install the gone driver); "
        "running on the CPU reference interpreter instead"]
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), (2 * x) ** 2)


def test_list_fallback_names_the_backend_that_ran(gone_backend, caplog):
    with caplog.at_level(logging.WARNING, logger="litegpu"):
        it = litegpu.load(_add_mul_model(), backend=["gone", "cpu"])
    assert it.litegpu_backend == "cpu"
    assert _warnings(caplog)[0].startswith("backend 'gone' is not available here: libgone.so")


def test_not_installed_backend_names_the_extra(caplog, monkeypatch):
    from litegpu import _load

    def unknown(name, options=None):
        raise litegpu.UnknownBackendError(f"no backend named {name!r}")

    monkeypatch.setattr(_load, "load_delegate", unknown)
    with caplog.at_level(logging.WARNING, logger="litegpu"):
        litegpu.load(_add_mul_model(), backend="opencl")
    assert _warnings(caplog) == [
        "backend 'opencl' is not installed (pip install 'litegpu[opencl]'); "
        "running on the CPU reference interpreter instead"]


@pytest.mark.parametrize("how", ["keyword", "config"])
def test_strict_makes_fallback_an_error(gone_backend, how):
    kwargs = {"strict": True} if how == "keyword" else {"config": {"strict": True}}
    with pytest.raises(litegpu.BackendUnavailableError,
                       match=r"backend 'gone' is not available here: libgone.so not found .*strict: true forbids falling back"):
        litegpu.load(_add_mul_model(), backend="gone", **kwargs)


def test_strict_must_be_a_bool():
    with pytest.raises(litegpu.ConfigError, match=r"strict: expected true or false, got string 'yes'"):
        litegpu.load_config({"strict": "yes"})


def test_partition_summary_warns_when_ops_fall_back_to_cpu(caplog):
    from litegpu._partition import partition
    from litegpu._reader import read_model

    sg = read_model(_add_mul_model()).subgraphs[0]
    with caplog.at_level(logging.WARNING, logger="litegpu"):
        partition(sg, [("addonly", lambda n: _AddOnly().supports(type("V", (), {"op": sg.operators[n]})()))])
    assert _warnings(caplog) == [
        "1 of 2 ops on addonly in 1 partition; the rest on CPU; declined: MUL (addonly: this test backend runs "
        "ADD only)"]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="litegpu"):
        partition(sg, [("all", lambda n: Support.yes())])
    assert _warnings(caplog) == []
    assert [r.getMessage() for r in caplog.records] == ["2 of 2 ops on all in 1 partition"]


def test_logging_level_in_config_attaches_a_handler_when_the_app_has_none(tmp_path):
    model = tmp_path / "m.tflite"
    model.write_bytes(_add_mul_model())
    script = textwrap.dedent(f"""
        import litegpu
        litegpu.load({str(model)!r}, backend="cpu", config={{"logging": {{"level": "DEBUG"}}}})
        litegpu.load({str(model)!r}, backend="cpu", config={{"logging": {{"level": "DEBUG"}}}})
        import logging
        print(len(logging.getLogger("litegpu").handlers))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "1"  # attached once, not once per load
    assert "litegpu: DEBUG: " in proc.stderr or "litegpu: INFO: " in proc.stderr, proc.stderr
    # without the key, nothing below WARNING reaches stderr
    quiet = subprocess.run([sys.executable, "-c", f"import litegpu; litegpu.load({str(model)!r}, backend='cpu')"],
                           capture_output=True, text=True, timeout=120)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
