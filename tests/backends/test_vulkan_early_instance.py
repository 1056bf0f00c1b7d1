"""The Vulkan driver's start before the binding's import (litegpu_vulkan._early, issue 11): a start makes
the process's one VkInstance through ctypes on a thread, the binding takes it (it creates none itself), and
the device built on it runs a model as LiteRT does; when that early start fails, or is switched off, the
binding creates the instance as before.  Each case runs in a fresh process (the instance is per process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("vulkan")

_CHILD = r"""
import json, sys
import numpy as np
import litegpu
from litegpu_vulkan import _early
mode = sys.argv[1]
if mode == "off":
    _early.ENABLED = False
elif mode == "broken":
    _early._LIBRARY = "libvulkan-not-there.so.1"
import vulkan as vk
calls = []
orig = vk.vkCreateInstance
vk.vkCreateInstance = lambda *a, **k: calls.append(1) or orig(*a, **k)
try:
    d = litegpu.load_delegate("vulkan")
    d.devices()
except litegpu.BackendUnavailableError as e:
    print(json.dumps({"skip": str(e)}))
    raise SystemExit(0)
from litegpu.testing import ModelBuilder, run_litert
b = ModelBuilder()
x = b.input("x", (1, 4, 4, 4))
y = b.tensor("y", (1, 4, 4, 4))
b.op("TANH", [x], [y])
b.output(y)
model = b.build()
it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
it.allocate_tensors()
xv = np.random.default_rng(0).standard_normal((1, 4, 4, 4)).astype(np.float32)
it.set_tensor(it.get_input_details()[0]["index"], xv)
it.invoke()
got = it.get_tensor(it.get_output_details()[0]["index"])
(want,) = run_litert(model, [xv])
delegated = [s.kind for s in it._main.plan.steps] == ["delegate"]
print(json.dumps({"binding_calls": len(calls), "early_thread": _early._thread is not None,
                  "err": float(np.max(np.abs(got - want))), "delegated": delegated}))
"""


def _run(mode: str) -> dict:
    r = subprocess.run([sys.executable, "-c", _CHILD, mode], capture_output=True, text=True, env=dict(os.environ),
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout.strip().splitlines()[-1])
    if "skip" in d:
        pytest.skip(f"backend vulkan unavailable: {d['skip']}")
    return d


def test_the_instance_is_made_before_the_binding_and_the_device_on_it_runs_a_model():
    d = _run("on")
    assert d["early_thread"] and d["delegated"]
    assert d["binding_calls"] == 0, "the binding created a second instance"
    assert d["err"] < 1e-5


@pytest.mark.parametrize("mode", ["off", "broken"])
def test_switched_off_or_failing_the_binding_creates_the_instance(mode):
    d = _run(mode)
    assert d["binding_calls"] == 1 and d["delegated"] and d["err"] < 1e-5
    assert d["early_thread"] == (mode == "broken")
