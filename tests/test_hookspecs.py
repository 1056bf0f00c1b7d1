"""Meta-tests of the hook specifications, one exercise per hook, and the pytest plugin's fixture."""

from __future__ import annotations

import argparse
import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import litegpu
import numpy as np
import pytest
from _fake_dists import GOOD_PLUGIN, make_dist
from litegpu import hookspecs
from litegpu._ir import Operator
from litegpu._plugins import call_register_commands, register_plugin, reset_plugins, unregister_plugin
from litegpu.cpu._registry import CPU_KERNELS, NodeContext, Prepared, TensorSpec

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def hook_specs():
    return {
        name: fn for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
        if hasattr(fn, f"{hookspecs.PROJECT_NAME}_spec")
    }


def test_the_expected_hooks_exist():
    assert sorted(hook_specs()) == ["register_backends", "register_commands", "register_cpu_kernels"]
    assert litegpu.hookimpl is hookspecs.hookimpl and hookspecs.PROJECT_NAME == "litegpu"


@pytest.mark.parametrize("name", sorted(hook_specs()))
def test_every_hook_has_a_full_docstring(name):
    doc = inspect.getdoc(hook_specs()[name]) or ""
    for section in ("Arguments:", "Returns:", "When called:", "Example::"):
        assert section in doc, f"{name}: docstring lacks {section!r}"
    params = list(inspect.signature(hook_specs()[name]).parameters)
    for p in params:
        assert f"{p}:" in doc, f"{name}: argument {p!r} is not documented"
    assert "@litegpu.hookimpl" in doc and f"def {name}(" in doc, f"{name}: the example should implement the hook"


@pytest.mark.parametrize("name", sorted(hook_specs()))
def test_every_hook_is_exercised_by_a_test(name):
    sources = [p.read_text() for p in TESTS.glob("test_*.py")] + [p.read_text() for p in TESTS.glob("_*.py")]
    assert any(f"def {name}(" in s and "hookimpl" in s for s in sources), f"no test implements hook {name}"


def test_register_backends_hook():
    class P:
        @litegpu.hookimpl
        def register_backends(self, register):
            class Tiny(litegpu.BackendSpec):
                name = "tiny"

                def create_delegate(self, options):
                    return litegpu.load_delegate("cpu")

            register(Tiny)

    name = register_plugin(P(), "tiny-plugin")
    try:
        assert [b.plugin for b in litegpu.available_backends() if b.name == "tiny"] == ["tiny-plugin"]
    finally:
        unregister_plugin(name)
    assert "tiny" not in [b.name for b in litegpu.available_backends()]


def test_register_cpu_kernels_hook_adds_a_custom_op_kernel():
    def prepare(ctx: NodeContext) -> Prepared:
        shape = ctx.inputs[0].shape
        return Prepared([shape], lambda ins: [np.sqrt(np.abs(ins[0]))])

    class P:
        @litegpu.hookimpl
        def register_cpu_kernels(self, register):
            register("TestSqrtAbs", prepare, dtypes=["float32"], versions=range(1, 3))

    assert CPU_KERNELS.lookup("TestSqrtAbs", "float32", 1) is None
    name = register_plugin(P(), "sqrtabs-plugin")
    try:
        fn = CPU_KERNELS.lookup("TestSqrtAbs", "float32", 1)
        assert fn is prepare
        assert CPU_KERNELS.lookup("TestSqrtAbs", "float32", 3) is None
        op = Operator(0, "CUSTOM", 1, (0,), (1,), custom_code="TestSqrtAbs")
        ctx = NodeContext(op, [TensorSpec(0, "x", "float32", (3,))], [TensorSpec(1, "y", "float32", (3,))])
        prepared = fn(ctx)
        np.testing.assert_array_equal(prepared.run([np.array([-4.0, 9.0, 0.0], np.float32)])[0], [2.0, 3.0, 0.0])
    finally:
        unregister_plugin(name)


def test_register_commands_hook_adds_a_subcommand():
    class P:
        @litegpu.hookimpl
        def register_commands(self, cli):
            p = cli.add_parser("foo-info", help="show Foo driver details")
            p.add_argument("--verbose", action="store_true")
            p.set_defaults(func=lambda args: 7 if args.verbose else 0)

    parser = argparse.ArgumentParser(prog="litegpu")
    sub = parser.add_subparsers(dest="command")
    name = register_plugin(P(), "cmd-plugin")
    try:
        assert call_register_commands(sub) == []
        args = parser.parse_args(["foo-info", "--verbose"])
        assert args.func(args) == 7
    finally:
        unregister_plugin(name)


def test_register_commands_clash_reported_not_raised():
    class P:
        @litegpu.hookimpl
        def register_commands(self, cli):
            cli.add_parser("run")

    parser = argparse.ArgumentParser(prog="litegpu")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("run")
    name = register_plugin(P(), "clash-plugin")
    try:
        if sys.version_info >= (3, 11):
            with pytest.warns(litegpu._plugins.LiteGPUPluginWarning, match="register_commands"):
                assert call_register_commands(sub) == ["clash-plugin"]
    finally:
        unregister_plugin(name)


# -- the pytest plugin --------------------------------------------------------------------------------

INNER_TEST = """
    import litegpu

    def test_backend(litegpu_backend):
        assert litegpu_backend.name in ("cpu", "good")
        d = litegpu_backend.delegates()
        assert (d == []) if litegpu_backend.name == "cpu" else (d[0].name == "good")
"""


def run_inner(tmp_path, *extra):
    site = tmp_path / "site"
    make_dist(site, "litegpu-good", {"good": "fake_litegpu_good"}, {"fake_litegpu_good": GOOD_PLUGIN})
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(INNER_TEST))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "core"), str(site)]))
    env["LITEGPU_PLUGINS"] = "good"  # only the fake distribution, whatever else is installed here
    env.pop("LITEGPU_DISABLE_PLUGIN_AUTOLOAD", None)
    r = subprocess.run(
        # `-p no:litegpu` first: an install from before the plugin became opt-in registers it through a
        # pytest11 entry point, which would load the module a second time under another name
        [sys.executable, "-m", "pytest", "-p", "no:litegpu", "-p", "litegpu.testing.pytest_plugin", "-rs", "-v", "-p", "no:cacheprovider",
         str(tmp_path / "test_inner.py"), *extra],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    return r.returncode, r.stdout + r.stderr


def test_fixture_parametrizes_every_backend_and_skips_unavailable_with_reason(tmp_path):
    rc, out = run_inner(tmp_path)
    assert rc == 0, out
    assert "test_backend[backend=cpu] PASSED" in out
    assert "test_backend[backend=good] PASSED" in out
    assert "backend 'sleepy' is not available here: the sleepy driver is not loaded" in out
    assert "2 passed, 1 skipped" in out


def test_fixture_option_restricts_and_names_missing_backends(tmp_path):
    rc, out = run_inner(tmp_path, "--litegpu-backend=good,opencl")
    assert rc == 0, out
    assert "backend 'opencl' is not installed (installed: cpu, good, sleepy)" in out
    assert "1 passed, 1 skipped" in out


def teardown_module():
    reset_plugins()
