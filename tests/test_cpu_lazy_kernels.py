"""The CPU kernel modules are imported on first use: ``import litegpu`` imports none of them (nor the
``tflite`` package), the generated index names every module that registers a kernel for an (op, dtype),
and a lazily loaded registry answers every lookup as one with every module imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "core"), env.get("PYTHONPATH", "")) if p)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


_ANSWERS = r"""
from litegpu.cpu._kernel_index import KERNEL_INDEX
from litegpu.cpu._registry import CPU_KERNELS

keys = sorted({(op, d) for op, pairs in KERNEL_INDEX.items() for _, ds in pairs
               for d in (("float32", "int8", "int32", "bool") if ds == ("*",) else ds)})
def answers():
    return {f"{op}/{d}/{v}": getattr(CPU_KERNELS.lookup(op, d, v), "__qualname__", None)
            for op, d in keys for v in range(1, 20)}
"""


def test_lazy_kernel_loading():
    """``import litegpu`` imports no kernel module and not the ``tflite`` package, the GPU core not the
    kernel language (its types included), the kernel specs, the renderer nor the compiler's passes (a warm
    start renders and compiles nothing); then every (op,
    dtype) of the index, looked up with only the modules the index names imported (in whatever order
    the lookups import them), finds the kernel that a registry with every module imported first, in
    their order, finds, for every version; an application's kernel registered before the built-in
    module of its op is imported still wins; and no index entry names a module that registers nothing
    for its op."""
    lazy = _run(r"""
import json, sys
import litegpu
from litegpu.cpu import KERNEL_MODULES
def kernel_modules():
    return sorted(m for m in sys.modules if m.removeprefix("litegpu.cpu.") in KERNEL_MODULES)
loaded = sorted(m for m in sys.modules if m == "tflite" or m.startswith("tflite.")) + kernel_modules()
# what a warm start imports of the GPU core: not the kernel language (types, parser, checker, emitters) nor the specs
import litegpu.gpu._runtime
renderer = sorted(m for m in sys.modules if m.startswith(("litegpu.gpu._dialects", "litegpu.gpu.lgk", "litegpu.gpu._passes",
                                                          "litegpu.gpu._kernel_specs")))
"""
 + _ANSWERS + r"""
def mine(ctx): raise AssertionError
litegpu.register_kernel("ADD", dtypes=("float32",), versions=range(1, 10))(mine)
first = CPU_KERNELS.lookup("ADD", "float32", 1)
behind = CPU_KERNELS.lookup_next("ADD", "float32", 1, mine)
after_add = kernel_modules()
print(json.dumps({"loaded": loaded, "renderer": renderer, "first_is_mine": first is mine, "after_add": after_add,
                  "behind": getattr(behind, "__module__", None), "answers": answers()}))
""")
    eager = _run(_ANSWERS + r"""
import json
CPU_KERNELS.load_all()
registered = {f"{op}/{m.removeprefix('litegpu.cpu.')}": sorted(ds)
              for op, regs in CPU_KERNELS.builtin_entries().items() for m, ds, _ in regs}
print(json.dumps({"answers": answers(), "registered": registered}))
""")
    assert lazy["loaded"] == [], f"import litegpu imported {lazy['loaded']}"
    assert lazy["renderer"] == [], f"the GPU core imported the renderer or the passes: {lazy['renderer']}"
    assert lazy["first_is_mine"]
    assert lazy["behind"] == "litegpu.cpu.elementwise"
    # the float ADD lives in elementwise; float16 and the integer modules hold its other dtypes
    assert lazy["after_add"] == ["litegpu.cpu.elementwise"]

    want = eager["answers"]
    differ = {k: (v, want[k]) for k, v in lazy["answers"].items()
              if v != want[k] and not k.startswith("ADD/float32/")}
    assert not differ, f"lazy lookups differ from eager ones: {dict(list(differ.items())[:10])}"
    assert sum(v is not None for v in want.values()) > 300

    from litegpu.cpu._kernel_index import KERNEL_INDEX

    for op, pairs in KERNEL_INDEX.items():
        for module, _dtypes in pairs:
            assert f"{op}/{module}" in eager["registered"], f"index: {module} holds no kernel for {op}"


def test_kernel_index_is_up_to_date():
    from litegpu.tools.kernel_index import INDEX_PATH, render_kernel_index

    assert INDEX_PATH.read_text() == render_kernel_index(), (
        "litegpu/cpu/_kernel_index.py does not list what the kernel modules register: "
        "run python -m litegpu.tools.kernel_index --write")
