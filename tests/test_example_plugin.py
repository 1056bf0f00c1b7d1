"""The example backend distribution (plugins/example): protocol, device residency, pip install/uninstall."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import litegpu
import numpy as np
import pytest
from _graphs import GraphBuilder
from litegpu import PartitionSpec
from litegpu._partition import check_plan
from litegpu._plan import plan_subgraph
from litegpu._plugins import register_plugin, unregister_plugin

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "plugins" / "example"


@pytest.fixture
def example(monkeypatch):
    """The example backend registered from the source tree (as its entry point would)."""
    from litegpu._plugins import reset_plugins

    # the source tree's copy only, even where `make install` installed the distribution too
    monkeypatch.setenv("LITEGPU_DISABLE_PLUGIN_AUTOLOAD", "1")
    reset_plugins()
    monkeypatch.syspath_prepend(str(EXAMPLE / "src"))
    import litegpu_example_numpy.plugin as plugin

    name = register_plugin(plugin, "litegpu-example-numpy-src")
    yield sys.modules["litegpu_example_numpy"]
    unregister_plugin(name)
    monkeypatch.delenv("LITEGPU_DISABLE_PLUGIN_AUTOLOAD")
    reset_plugins()


def view(sg, i):
    return plan_subgraph.__globals__["_node_views"](sg, None)(i)


def test_listed_and_loadable(example):
    info = {b.name: b for b in litegpu.available_backends()}["example"]
    assert info.available and info.plugin == "litegpu-example-numpy-src" and info.devices
    d = litegpu.load_delegate("example", {"precision": "fp16", "copy_on_transfer": False})
    assert isinstance(d, example.ExampleDelegate) and d.storage_dtype == np.float16
    with pytest.raises(litegpu.ConfigError, match=r"backends\.example\.copy_on_transfr: unknown option.*did you mean"):
        litegpu.load_delegate("example", {"copy_on_transfr": True})


def test_supports_answers_with_reasons(example):
    g = GraphBuilder()
    x = g.input()
    a = g.op("ADD", [x, x], fused_activation_function=3)
    b = g.op("ADD", [a, a], fused_activation_function=4)
    c = g.op("CONV_2D", [b, b])
    i8 = g._tensor("q", (1, 4), "int8")
    g.ops.append(litegpu._ir.Operator(3, "RELU", 1, (i8,), (g._tensor("r", (1, 4), "int8"),)))
    wide = g.op("MUL", [c, g.input("w", shape=(1, 3))], shape=(1, 4))
    sg = g.build([wide])
    d = litegpu.load_delegate("example")
    answers = [d.supports(view(sg, i)) for i in range(len(sg.operators))]
    assert [bool(s) for s in answers] == [True, False, False, False, False]
    assert answers[1].reason == "fused activation TANH is not supported"
    assert answers[2].reason == "not an elementwise op this backend implements"
    assert answers[3].reason == "int8 tensor 'q': only float32 is supported"
    assert answers[4].reason == "shapes (1, 4) and (1, 3) do not broadcast"


# -- a miniature executor, enough to drive the delegate protocol end to end ---------------------------

CPU_OPS = {"FLOOR": np.floor, "CEIL": np.ceil}


def spec_for(sg, nodes, plan, backend):
    """The PartitionSpec the interpreter builds for one delegated segment."""
    members = set(nodes)
    produced = {t for n in nodes for t in sg.operators[n].outputs}
    read_inside = {t for n in nodes for t in sg.operators[n].inputs if t >= 0}
    inputs = tuple(sorted(t for t in read_inside - produced if sg.tensors[t].data is None))
    readers = {}
    for n, op in enumerate(sg.operators):
        for t in op.inputs:
            readers.setdefault(t, set()).add(n)
    outputs = tuple(sorted(t for t in produced if (readers.get(t, set()) - members) or t in sg.outputs))
    host = frozenset(
        t for t in outputs
        if t in sg.outputs or any(plan.claimed.get(r) != backend for r in readers.get(t, set()) - members)
    )
    return PartitionSpec(sg, None, tuple(nodes), inputs, outputs, host, {i: t for i, t in enumerate(sg.tensors)})


def run(sg, plan, delegates, feeds):
    env = {t.index: t.data for t in sg.tensors if t.data is not None}
    env.update(feeds)
    for seg in plan.segments:
        if seg.backend == "cpu":
            for n in seg.node_indices:
                op = sg.operators[n]
                env[op.outputs[0]] = CPU_OPS[op.opcode](np.asarray(env[op.inputs[0]]))
            continue
        spec = spec_for(sg, seg.node_indices, plan, seg.backend)
        kernel = delegates[seg.delegate].prepare(spec)
        env.update(kernel.invoke({t: env[t] for t in spec.inputs}))
    return [env[t] for t in sg.outputs], env


def test_device_residency_across_a_cpu_op(example):
    # x -> ADD -> t1 -> FLOOR (CPU) -> t2 ;  t1 -> MUL -> t3 ;  ADD(t2, t3) -> out
    g = GraphBuilder()
    x = g.input()
    t1 = g.op("ADD", [x, x])
    t2 = g.op("FLOOR", [t1])
    t3 = g.op("MUL", [t1, t1])
    out = g.op("ADD", [t2, t3])
    sg = g.build([out])
    d = litegpu.load_delegate("example")
    plan = plan_subgraph(sg, [d])
    check_plan(sg, plan)
    assert [(s.backend, s.node_indices) for s in plan.segments] == [("example", (0, 2)), ("cpu", (1,)), ("example", (3,))]
    xv = np.array([[0.3, -1.7, 2.5, 4.0]], np.float32)
    (result,), env = run(sg, plan, [d], {x: xv})
    assert isinstance(env[t3], example.DeviceArray)  # stayed on the device between the two partitions
    assert isinstance(env[t1], np.ndarray)  # the CPU op needed it on the host
    np.testing.assert_array_equal(result, np.floor(xv + xv) + (xv + xv) * (xv + xv))
    assert d.stats == {"uploads": 2, "downloads": 2, "partitions": 2}  # x and t2 up; t1 and out down


def test_precision_fp16_rounds_results(example):
    g = GraphBuilder()
    x = g.input()
    y = g.op("MUL", [x, x])
    sg = g.build([y])
    d = litegpu.load_delegate("example", {"precision": "fp16_fp32acc"})
    plan = plan_subgraph(sg, [d])
    xv = np.array([[1.001, 3.3, -2.2, 7.77]], np.float32)
    (result,), _ = run(sg, plan, [d], {x: xv})
    assert result.dtype == np.float32
    np.testing.assert_array_equal(result, (xv * xv).astype(np.float16).astype(np.float32))


def test_builder_model_read_partitioned_and_run_matches_litert(example):
    """ModelBuilder -> read_model -> partition -> example kernels (CPU for FLOOR), against LiteRT's reference."""
    from litegpu.testing import ModelBuilder, run_litert

    b = ModelBuilder()
    x = b.input("x", (1, 4, 4, 3), "float32")
    y = b.input("y", (1, 1, 1, 3), "float32")
    w = b.const("w", np.array([0.5, -2.0, 3.0], np.float32))
    names = ["s", "r", "f", "g", "h", "out"]
    s, r, f, g, h, out = (b.tensor(n, (1, 4, 4, 3), "float32") for n in names)
    b.op("ADD", [x, y], [s], fused_activation_function=3)       # broadcast + RELU6
    b.op("LOGISTIC", [s], [r])
    b.op("FLOOR", [x], [f])                                     # declined: runs on the CPU
    b.op("SQUARED_DIFFERENCE", [r, f], [g])
    b.op("MUL", [g, w], [h], fused_activation_function=2)      # RELU_N1_TO_1
    b.op("TANH", [h], [out])
    b.output(out)
    model_bytes = b.build()
    sg = litegpu.read_model(model_bytes).main
    d = litegpu.load_delegate("example")
    plan = plan_subgraph(sg, [d])
    check_plan(sg, plan)
    assert [seg.backend for seg in plan.segments] == ["cpu", "example"]  # FLOOR only needs x: run it first
    rng = np.random.default_rng(1)
    xv = (rng.standard_normal((1, 4, 4, 3)) * 4).astype(np.float32)
    yv = rng.standard_normal((1, 1, 1, 3)).astype(np.float32)
    (got,), _ = run(sg, plan, [d], {sg.inputs[0]: xv, sg.inputs[1]: yv})
    (want,) = run_litert(model_bytes, [xv, yv])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


class _FloorPlugin:
    """Adds a CPU kernel for the custom op TestFloor (a CPU-only op to split the example's partitions)."""

    @litegpu.hookimpl
    def register_cpu_kernels(self, register):
        from litegpu.cpu._registry import Prepared

        register("TestFloor", lambda ctx: Prepared([ctx.inputs[0].shape], lambda ins: [np.floor(ins[0])]),
                 dtypes=["float32"])


def test_through_interpreter_with_a_cpu_op_in_the_middle(example):
    if not hasattr(litegpu, "Interpreter"):
        pytest.skip("litegpu.Interpreter is not in this build yet")
    from litegpu.cpu._registry import CPU_KERNELS
    from litegpu.testing import ModelBuilder

    if CPU_KERNELS.lookup("TestFloor", "float32", 1) is None:
        register_plugin(_FloorPlugin(), "test-floor-kernel")  # kept: CPU kernels stay registered anyway
    b = ModelBuilder()
    x = b.input("x", (1, 8), "float32")
    t, u, v = (b.tensor(n, (1, 8), "float32") for n in "tuv")
    b.op("MUL", [x, x], [t], fused_activation_function=0)
    b.custom_op("TestFloor", [t], [u])
    b.op("SUB", [u, t], [v], fused_activation_function=1)
    b.output(v)
    delegate = litegpu.load_delegate("example")
    interp = litegpu.Interpreter(model_content=b.build(), experimental_delegates=[delegate])
    interp.allocate_tensors()
    xv = np.linspace(-3, 3, 8, dtype=np.float32).reshape(1, 8)
    interp.set_tensor(interp.get_input_details()[0]["index"], xv)
    interp.invoke()
    got = interp.get_tensor(interp.get_output_details()[0]["index"])
    np.testing.assert_array_equal(got, np.maximum(np.floor(xv * xv) - xv * xv, 0))
    assert delegate.stats["partitions"] == 2  # MUL | TestFloor on the CPU | SUB


# -- the real thing: pip install into a venv, use, uninstall ---------------------------------------------

CHECK = textwrap.dedent(
    """
    import sys, numpy as np, litegpu
    rows = {b.name: b for b in litegpu.available_backends()}
    want = sys.argv[1] == "present"
    if not want:
        assert "example" not in rows, rows
        print("GONE", sorted(rows)); raise SystemExit(0)
    info = rows["example"]
    assert info.available and info.plugin == "litegpu-example-numpy" and info.version == "0.1.0", info
    assert [p for p in litegpu.get_plugins() if p["name"] == "example"][0]["status"] == "ok"
    d = litegpu.load_delegate("example")
    print("DELEGATE", type(d).__module__, type(d).__name__)
    if hasattr(litegpu, "Interpreter"):
        from litegpu.testing import ModelBuilder
        b = ModelBuilder(); x = b.input("x", (1, 4), "float32"); y = b.tensor("y", (1, 4), "float32")
        b.op("TANH", [x], [y]); b.output(y)
        it = litegpu.Interpreter(model_content=b.build(), experimental_delegates=[d])
        it.allocate_tensors(); xv = np.linspace(-2, 2, 4, dtype=np.float32).reshape(1, 4)
        it.set_tensor(it.get_input_details()[0]["index"], xv); it.invoke()
        np.testing.assert_allclose(it.get_tensor(it.get_output_details()[0]["index"]), np.tanh(xv), rtol=1e-6)
        print("INTERPRETER OK")
    else:
        print("INTERPRETER MISSING")
    """
)


def test_pip_install_use_uninstall(tmp_path):
    from _pip_venv import FreshVenv

    v = FreshVenv(tmp_path)
    v.install("core", "plugins/example")

    def check(state):
        r = v.run(CHECK, state)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    out = check("present")
    assert "DELEGATE litegpu_example_numpy.backend ExampleDelegate" in out
    assert ("INTERPRETER OK" in out) or ("INTERPRETER MISSING" in out and not hasattr(litegpu, "Interpreter"))
    # The packaged YAML presets came along with the installed core.
    r = v.run("import litegpu; print(litegpu.load_config('low-latency').sources)")
    assert r.returncode == 0 and "packaged low-latency.yaml" in r.stdout, r.stderr
    v.uninstall("litegpu-example-numpy")
    assert "GONE" in check("absent")
