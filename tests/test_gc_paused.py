"""litegpu._gc: the cyclic garbage collector is off while a model is read, planned and a delegate
loaded (a warm start's CPU time), and always back on after, as the application had it."""

from __future__ import annotations

import gc

import litegpu
import numpy as np
import pytest
from litegpu._gc import gc_paused
from litegpu.testing import ModelBuilder


@pytest.fixture(autouse=True)
def _gc_on():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def _model() -> bytes:
    b = ModelBuilder()
    x = b.input("x", (1, 4))
    out = b.tensor("out", (1, 4))
    b.op("ADD", [x, b.const("c", np.arange(4, dtype=np.float32).reshape(1, 4))], [out])
    b.output(out)
    return b.build()


def test_paused_nested_and_restored_after_an_error():
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer block still runs
    assert gc.isenabled()
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_an_application_that_turned_it_off_keeps_it_off():
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()


def test_read_and_plan_run_without_the_collector(monkeypatch):
    import litegpu._interpreter as interp

    seen: dict[str, bool] = {}
    real_plan = interp.build_plan

    def plan(*a, **k):
        seen["plan"] = gc.isenabled()
        return real_plan(*a, **k)

    monkeypatch.setattr(interp, "build_plan", plan)
    it = litegpu.Interpreter(model_content=_model())
    assert gc.isenabled()
    it.allocate_tensors()
    assert seen == {"plan": False} and gc.isenabled()
    it.set_tensor(it.get_input_details()[0]["index"], np.ones((1, 4), np.float32))
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), [[1, 2, 3, 4]])


def test_a_failing_load_delegate_turns_it_back_on():
    with pytest.raises(litegpu.UnknownBackendError):
        litegpu.load_delegate("no-such-backend")
    assert gc.isenabled()
