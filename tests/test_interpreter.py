"""litegpu.Interpreter against LiteRT's Python Interpreter: same API, same answers, same errors.

Models are written with ModelBuilder and run in both.  Where no real CPU kernel
is registered yet for ADD/MUL/SUB (float32), a tiny stand-in is registered for
the duration of each test only (the registry is restored afterwards), so these
tests exercise the interpreter, not the kernels.
"""

from __future__ import annotations

import dataclasses

import litegpu
import numpy as np
import pytest
from litegpu import Delegate, DelegateKernel, InterpreterError, ModelError, Support, UnsupportedOpError
from litegpu._ir import Model, Operator, Subgraph, Tensor
from litegpu.cpu._registry import CPU_KERNELS, Prepared, register_kernel
from litegpu.testing import ModelBuilder

litert = pytest.importorskip("ai_edge_litert.interpreter")
REF = litert.OpResolverType.BUILTIN_REF


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(autouse=True)
def tiny_kernels():
    """Stand-in float32 ADD/MUL/SUB (no fused activation) where no real kernel exists yet."""
    def binary(fn):
        def prepare(ctx):
            if ctx.options.get("fused_activation_function", 0):
                raise ctx.fail("stand-in kernel has no fused activation")
            shape = np.broadcast_shapes(ctx.inputs[0].shape, ctx.inputs[1].shape)
            return Prepared([shape], lambda x: [fn(x[0], x[1])])
        return prepare

    with CPU_KERNELS.restored():
        for op, fn in (("ADD", np.add), ("MUL", np.multiply), ("SUB", np.subtract)):
            if CPU_KERNELS.lookup(op, "float32", 1) is None:
                CPU_KERNELS.register(op, binary(fn), dtypes=("float32",), versions=range(1, 6))
        yield


def _add_mul_model(dynamic: bool = True) -> bytes:
    """out = (x + c) * y, with a signature; batch dimension unknown when ``dynamic``."""
    sig = (-1, 4, 3) if dynamic else None
    b = ModelBuilder()
    x = b.input("x", (1, 4, 3), shape_signature=sig)
    y = b.input("y", (1, 4, 3), shape_signature=sig)
    c = b.const("c", np.arange(12, dtype=np.float32).reshape(1, 4, 3))
    t = b.tensor("t", (1, 4, 3), shape_signature=sig)
    out = b.tensor("out", (1, 4, 3), shape_signature=sig)
    b.op("ADD", [x, c], [t])
    b.op("MUL", [t, y], [out])
    b.output(out)
    b.signature("serving_default", {"x": x, "y": y}, {"out": out})
    return b.build()


def _pair(data: bytes, **kw):
    return litegpu.Interpreter(model_content=data, **kw), litert.Interpreter(
        model_content=data, experimental_op_resolver_type=REF, **kw)


def _error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - we compare whatever was raised
        return e
    return None


def assert_same_error(ours, ref, *, exact: bool = True):
    """Both raise; ours is catchable as LiteRT's builtin type; same message (LiteRT's may carry
    leftovers of earlier errors, so ours must be contained in it)."""
    e_ref, e_ours = _error(ref), _error(ours)
    assert e_ref is not None, "LiteRT did not raise"
    assert e_ours is not None, f"litegpu did not raise (LiteRT: {e_ref!r})"
    assert isinstance(e_ours, litegpu.LiteGPUError) or type(e_ours) in (ValueError, RuntimeError), repr(e_ours)
    for base in (ValueError, RuntimeError):
        if isinstance(e_ref, base):
            assert isinstance(e_ours, base), f"{e_ours!r} is not a {base.__name__} like {e_ref!r}"
    if exact:
        assert str(e_ours).strip() in str(e_ref), f"{str(e_ours)!r} vs LiteRT {str(e_ref)!r}"
    return e_ours


def assert_same_details(ours: dict, ref: dict):
    assert list(ours) == list(ref), (list(ours), list(ref))
    for k, rv in ref.items():
        ov = ours[k]
        if isinstance(rv, np.ndarray):
            assert isinstance(ov, np.ndarray) and ov.dtype == rv.dtype, (k, ov, rv)
            np.testing.assert_array_equal(ov, rv, err_msg=k)
        elif isinstance(rv, dict):
            assert isinstance(ov, dict), k
            assert_same_details(ov, rv)
        elif isinstance(rv, list):
            assert isinstance(ov, list) and len(ov) == len(rv), k
            for a, r in zip(ov, rv, strict=True):
                if isinstance(r, dict):
                    assert_same_details(a, r)
                else:
                    assert type(a) is type(r) and a == r, (k, ov, rv)
        elif isinstance(rv, tuple):
            assert isinstance(ov, tuple) and len(ov) == len(rv), k
            for a, r in zip(ov, rv, strict=True):
                assert type(a) is type(r) and a == pytest.approx(r), (k, ov, rv)
        else:
            assert type(ov) is type(rv) and ov == rv, (k, ov, rv)


# --------------------------------------------------------------------------- construction


def test_constructor_arguments_like_litert():
    data = _add_mul_model()
    assert_same_error(lambda: litegpu.Interpreter(), lambda: litert.Interpreter())
    assert_same_error(lambda: litegpu.Interpreter(model_path="m.tflite", model_content=data),
                      lambda: litert.Interpreter(model_path="m.tflite", model_content=data))
    assert_same_error(lambda: litegpu.Interpreter(model_content=b""), lambda: litert.Interpreter(model_content=b""))
    for n in (0, -1):
        assert_same_error(lambda n=n: litegpu.Interpreter(model_content=data, num_threads=n),
                          lambda n=n: litert.Interpreter(model_content=data, num_threads=n))
    assert_same_error(lambda: litegpu.Interpreter(model_content=data, num_threads=1.5),
                      lambda: litert.Interpreter(model_content=data, num_threads=1.5))
    assert_same_error(lambda: litegpu.Interpreter(model_content=data, experimental_op_resolver_type="x"),
                      lambda: litert.Interpreter(model_content=data, experimental_op_resolver_type="x"))
    # LiteRT's resolver enum and tuning switches are accepted (one set of CPU kernels here)
    for r in litert.OpResolverType:
        litegpu.Interpreter(model_content=data, experimental_op_resolver_type=r, num_threads=2)
    switches = dict(experimental_disable_delegate_clustering=True, experimental_default_delegate_latest_features=True,
                    experimental_compress_quantization_zero_points=True, experimental_disable_delegate_node_fusion=True,
                    experimental_force_delegate_node_profiling=True)
    assert litegpu.Interpreter(model_content=data, **switches).experimental_compress_quantization_zero_points
    import inspect
    ours_params = list(inspect.signature(litegpu.Interpreter).parameters)
    assert ours_params == list(inspect.signature(litert.Interpreter).parameters)
    with pytest.raises(ModelError):
        litegpu.Interpreter(model_content=b"definitely not a flatbuffer")
    with pytest.raises(ValueError, match="not a litegpu.Delegate"):
        litegpu.Interpreter(model_content=data, experimental_delegates=[object()])


def test_model_path_and_content_agree(tmp_path):
    data = _add_mul_model()
    p = tmp_path / "m.tflite"
    p.write_bytes(data)
    a, b = litegpu.Interpreter(model_path=str(p)), litegpu.Interpreter(model_path=p)
    c = litegpu.Interpreter(model_content=bytearray(data))
    assert a.get_input_details()[0]["name"] == b.get_input_details()[0]["name"] == \
        c.get_input_details()[0]["name"] == "x"


# --------------------------------------------------------------------------- details


def test_details_match_litert_before_and_after_allocate():
    ours, ref = _pair(_add_mul_model())
    for stage in ("before", "after"):
        for a, r in zip(ours.get_input_details(), ref.get_input_details(), strict=True):
            assert_same_details(a, r)
        for a, r in zip(ours.get_output_details(), ref.get_output_details(), strict=True):
            assert_same_details(a, r)
        for a, r in zip(ours.get_tensor_details(), ref.get_tensor_details(), strict=True):
            assert_same_details(a, r)
        if stage == "before":
            ours.allocate_tensors()
            ref.allocate_tensors()


def test_quantized_details_match_litert():
    b = ModelBuilder()
    x = b.input("x", (1, 4), "int8", quant=(0.5, -3))
    w = b.const("w", np.array([[1, 2, 3, 4], [5, 6, 7, 8]], np.int8),
                quant=(np.array([0.1, 0.2]), np.array([0, 0]), 0))
    bias = b.const("bias", np.array([1, 2], np.int32), quant=(np.array([0.05, 0.1]), np.array([0, 0]), 0))
    y = b.tensor("y", (1, 2), "int8", quant=(1.0, 7))
    u = b.input("u", (2, 3), "uint8", quant=(0.25, 128))
    b16 = b.input("h", (3,), "int16", quant=(0.001, 0))
    flag = b.input("flag", (2,), "bool")
    b.op("FULLY_CONNECTED", [x, w, bias], [y])
    b.output(y)
    ours, ref = _pair(b.build())
    for a, r in zip(ours.get_tensor_details(), ref.get_tensor_details(), strict=True):
        assert_same_details(a, r)
    for a, r in zip(ours.get_input_details(), ref.get_input_details(), strict=True):
        assert_same_details(a, r)
    assert [d["index"] for d in ours.get_input_details()] == [x, u, b16, flag]


def test_ops_details_and_num_subgraphs():
    ours, ref = _pair(_add_mul_model())
    assert ours.num_subgraphs() == ref.num_subgraphs()
    for a, r in zip(ours._get_ops_details(), ref._get_ops_details(), strict=True):
        assert_same_details(a, r)
    assert_same_error(lambda: ours.get_tensor_details(5), lambda: ref.get_tensor_details(5))


# --------------------------------------------------------------------------- set / get / invoke


def test_set_get_invoke_match_litert():
    ours, ref = _pair(_add_mul_model(dynamic=False))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 4, 3)).astype(np.float32)
    y = rng.standard_normal((1, 4, 3)).astype(np.float32)
    for it in (ours, ref):
        it.allocate_tensors()
        it.set_tensor(0, x)
        it.set_tensor(1, y)
        it.invoke()
    out = ours.get_output_details()[0]["index"]
    np.testing.assert_array_equal(ours.get_tensor(out), ref.get_tensor(out))
    np.testing.assert_array_equal(ours.get_tensor(2), ref.get_tensor(2))  # constant
    # get_tensor returns a copy
    got = ours.get_tensor(out)
    got[...] = 0
    assert not np.array_equal(ours.get_tensor(out), got)


def test_set_tensor_errors_match_litert():
    ours, ref = _pair(_add_mul_model(dynamic=False))
    x = np.zeros((1, 4, 3), np.float32)
    # before allocate_tensors
    assert_same_error(lambda: ours.set_tensor(0, x), lambda: ref.set_tensor(0, x))
    assert_same_error(lambda: ours.get_tensor(0), lambda: ref.get_tensor(0))
    assert_same_error(lambda: ours.tensor(0)(), lambda: ref.tensor(0)())
    assert_same_error(lambda: ours.invoke(), lambda: ref.invoke())
    ours.allocate_tensors()
    ref.allocate_tensors()
    cases = [
        (0, x.astype(np.float64)),            # dtype
        (0, x.astype(np.int32)),
        (1, [[1.0]]),                         # python list -> float64
        (0, np.zeros((1, 4), np.float32)),    # rank
        (0, np.float32(1.0)),                 # scalar
        (0, np.zeros((2, 4, 3), np.float32)),  # dimension 0
        (0, np.zeros((1, 4, 5), np.float32)),  # dimension 2
        (99, x),                              # index
        (-1, x),
    ]
    for index, value in cases:
        assert_same_error(lambda i=index, v=value: ours.set_tensor(i, v),
                          lambda i=index, v=value: ref.set_tensor(i, v))
    assert_same_error(lambda: ours.get_tensor(99), lambda: ref.get_tensor(99))
    assert_same_error(lambda: ours.get_tensor(-1), lambda: ref.get_tensor(-1))


def test_tensor_view_writes_through():
    ours, ref = _pair(_add_mul_model(dynamic=False))
    for it in (ours, ref):
        it.allocate_tensors()
        it.tensor(0)().fill(2.0)
        it.tensor(1)()[...] = 3.0
        it.invoke()
    out = ours.get_output_details()[0]["index"]
    np.testing.assert_array_equal(ours.tensor(out)(), ref.get_tensor(out))
    np.testing.assert_array_equal(ours.tensor(0)(), np.full((1, 4, 3), 2.0, np.float32))


def test_intermediates_freed_unless_preserved():
    data = _add_mul_model(dynamic=False)
    x = np.ones((1, 4, 3), np.float32)
    ours = litegpu.Interpreter(model_content=data)
    ours.allocate_tensors()
    ours.set_tensor(0, x)
    ours.set_tensor(1, x)
    ours.invoke()
    t = next(d["index"] for d in ours.get_tensor_details() if d["name"] == "t")
    with pytest.raises(ValueError, match="experimental_preserve_all_tensors"):
        ours.get_tensor(t)
    ours, ref = _pair(data, experimental_preserve_all_tensors=True)
    for it in (ours, ref):
        it.allocate_tensors()
        it.set_tensor(0, x)
        it.set_tensor(1, x)
        it.invoke()
    np.testing.assert_array_equal(ours.get_tensor(t), ref.get_tensor(t))


def test_invoke_repeatedly_with_new_inputs():
    ours, ref = _pair(_add_mul_model(dynamic=False))
    rng = np.random.default_rng(3)
    ours.allocate_tensors()
    ref.allocate_tensors()
    for _ in range(3):
        x = rng.standard_normal((1, 4, 3)).astype(np.float32)
        y = rng.standard_normal((1, 4, 3)).astype(np.float32)
        for it in (ours, ref):
            it.set_tensor(0, x)
            it.set_tensor(1, y)
            it.invoke()
        np.testing.assert_array_equal(ours.get_tensor(4), ref.get_tensor(4))


# --------------------------------------------------------------------------- resize


def test_resize_then_allocate_matches_litert():
    ours, ref = _pair(_add_mul_model())
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4, 3)).astype(np.float32)
    y = rng.standard_normal((3, 4, 3)).astype(np.float32)
    for it in (ours, ref):
        it.allocate_tensors()
        it.resize_tensor_input(0, [3, 4, 3], strict=True)
        it.resize_tensor_input(1, np.array([3, 4, 3]))
    # between resize and allocate: input shape changed, output not yet; invoke refused
    for a, r in zip(ours.get_tensor_details(), ref.get_tensor_details(), strict=True):
        assert_same_details(a, r)
    assert_same_error(lambda: ours.invoke(), lambda: ref.invoke())
    assert_same_error(lambda: ours.set_tensor(0, x), lambda: ref.set_tensor(0, x))
    for it in (ours, ref):
        it.allocate_tensors()
        it.set_tensor(0, x)
        it.set_tensor(1, y)
        it.invoke()
    for a, r in zip(ours.get_output_details(), ref.get_output_details(), strict=True):
        assert_same_details(a, r)
    np.testing.assert_array_equal(ours.get_tensor(4), ref.get_tensor(4))


def test_resize_errors_match_litert():
    ours, ref = _pair(_add_mul_model())
    static_ours, static_ref = _pair(_add_mul_model(dynamic=False))
    # strict: only -1 dimensions may change
    assert_same_error(lambda: ours.resize_tensor_input(0, [1, 5, 3], strict=True),
                      lambda: ref.resize_tensor_input(0, [1, 5, 3], strict=True))
    assert_same_error(lambda: static_ours.resize_tensor_input(0, [2, 4, 3], strict=True),
                      lambda: static_ref.resize_tensor_input(0, [2, 4, 3], strict=True))
    assert_same_error(lambda: ours.resize_tensor_input(0, [[1, 2]]), lambda: ref.resize_tensor_input(0, [[1, 2]]))
    assert_same_error(lambda: ours.resize_tensor_input(99, [1]), lambda: ref.resize_tensor_input(99, [1]),
                      exact=False)
    assert_same_error(lambda: ours.resize_tensor_input(0, [-2, 4, 3]), lambda: ref.resize_tensor_input(0, [-2, 4, 3]),
                      exact=False)


def test_resize_to_same_shape_keeps_allocation():
    ours = litegpu.Interpreter(model_content=_add_mul_model())
    ours.allocate_tensors()
    ours.resize_tensor_input(0, [1, 4, 3])
    ours.set_tensor(0, np.ones((1, 4, 3), np.float32))  # still allocated
    ours.invoke()


# --------------------------------------------------------------------------- signatures


def _two_signature_model() -> bytes:
    b = ModelBuilder()
    x = b.input("add_x", (2,), shape_signature=(-1,))
    one = b.const("one", np.array([1.0], np.float32))
    y = b.tensor("add_y", (2,), shape_signature=(-1,))
    b.op("ADD", [x, one], [y])
    b.output(y)
    b.signature("add", {"x": x}, {"output_0": y})
    sg = b.add_subgraph("sub")
    sx = sg.input("sub_x", (2,), shape_signature=(-1,))
    sy = sg.input("sub_b", (2,), shape_signature=(-1,))
    so = sg.tensor("sub_out", (2,), shape_signature=(-1,))
    sg.op("SUB", [sx, sy], [so])
    sg.output(so)
    b.signature("sub", {"x": sx, "b": sy}, {"output_0": so}, subgraph=1)
    return b.build()


def test_signature_list_and_runners_match_litert():
    data = _two_signature_model()
    ours, ref = _pair(data)
    assert ours.get_signature_list() == ref.get_signature_list()
    assert ours._get_full_signature_list() == ref._get_full_signature_list()
    assert_same_error(lambda: ours.get_signature_runner(), lambda: ref.get_signature_runner())
    assert_same_error(lambda: ours.get_signature_runner("nope"), lambda: ref.get_signature_runner("nope"))
    for key in ("add", "sub"):
        r_ours, r_ref = ours.get_signature_runner(key), ref.get_signature_runner(key)
        for (ka, a), (kr, r) in zip(r_ours.get_input_details().items(), r_ref.get_input_details().items(),
                                    strict=True):
            assert ka == kr
            assert_same_details(a, r)
        for (ka, a), (kr, r) in zip(r_ours.get_output_details().items(), r_ref.get_output_details().items(),
                                    strict=True):
            assert ka == kr
            assert_same_details(a, r)
    rng = np.random.default_rng(2)
    for n in (3, 5, 3):
        x = rng.standard_normal(n).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float32)
        for key, kw in (("add", {"x": x}), ("sub", {"x": x, "b": b})):
            got = ours.get_signature_runner(key)(**kw)
            want = ref.get_signature_runner(key)(**kw)
            assert list(got) == list(want)
            for k in want:
                np.testing.assert_array_equal(got[k], want[k])
    # details of the runner's subgraph follow the last call's shapes
    assert_same_details(ours.get_signature_runner("sub").get_output_details()["output_0"],
                        ref.get_signature_runner("sub").get_output_details()["output_0"])
    r_ours, r_ref = ours.get_signature_runner("sub"), ref.get_signature_runner("sub")
    x = np.ones(2, np.float32)
    assert_same_error(lambda: r_ours(x=x), lambda: r_ref(x=x))
    assert_same_error(lambda: r_ours(x=x, c=x), lambda: r_ref(x=x, c=x))
    assert_same_error(lambda: r_ours(x=x, b=x.astype(np.float64)), lambda: r_ref(x=x, b=x.astype(np.float64)))


def test_single_signature_runner_on_main_subgraph_shares_state():
    ours, ref = _pair(_add_mul_model())
    x = np.ones((2, 4, 3), np.float32)
    y = np.full((2, 4, 3), 2.0, np.float32)
    got = ours.get_signature_runner()(x=x, y=y)
    want = ref.get_signature_runner()(x=x, y=y)
    np.testing.assert_array_equal(got["out"], want["out"])
    # the runner resized the main subgraph, as in LiteRT
    np.testing.assert_array_equal(ours.get_input_details()[0]["shape"], ref.get_input_details()[0]["shape"])
    np.testing.assert_array_equal(ours.get_tensor(4), ref.get_tensor(4))


# --------------------------------------------------------------------------- variables


def _variable_model() -> bytes:
    b = ModelBuilder()
    x = b.input("x", (1, 4))
    v = b.tensor("v", (1, 4), is_variable=True)
    o = b.tensor("o", (1, 4))
    b.op("ADD", [x, v], [o])
    b.output(o)
    return b.build()


def test_variables_set_reset_and_reallocate_like_litert():
    ours, ref = _pair(_variable_model())
    x = np.ones((1, 4), np.float32)
    five = np.full((1, 4), 5.0, np.float32)
    results = {id(ours): [], id(ref): []}
    for it in (ours, ref):
        it.allocate_tensors()
        results[id(it)].append(it.get_tensor(1))        # variables start at zero
        it.set_tensor(0, x)
        it.set_tensor(1, five)
        it.invoke()
        results[id(it)].append(it.get_tensor(2))
        it.reset_all_variables()
        it.invoke()
        results[id(it)].append(it.get_tensor(2))
        it.set_tensor(1, five)
        it.allocate_tensors()                             # nothing changed: state kept
        it.invoke()
        results[id(it)].append(it.get_tensor(2))
        it.resize_tensor_input(0, [2, 4])
        it.allocate_tensors()                             # real re-allocation resets variables
        results[id(it)].append(it.get_tensor(1))
    for a, r in zip(results[id(ours)], results[id(ref)], strict=True):
        np.testing.assert_array_equal(a, r)


def test_int8_variable_resets_to_zero_point():
    b = ModelBuilder()
    x = b.input("x", (1, 4), "int8", quant=(0.5, 3))
    v = b.tensor("v", (1, 4), "int8", quant=(0.5, 3), is_variable=True)
    o = b.tensor("o", (1, 4), "int8", quant=(0.5, 3))
    b.custom_op("LGTestPassFirst", [x, v], [o])
    b.output(o)

    @register_kernel("LGTestPassFirst")
    def _first(ctx):
        return Prepared([ctx.inputs[0].shape], lambda a: [a[0].copy()])

    it = litegpu.Interpreter(model_content=b.build())
    it.allocate_tensors()
    np.testing.assert_array_equal(it.get_tensor(v), np.full((1, 4), 3, np.int8))
    it.set_tensor(v, np.zeros((1, 4), np.int8))
    it.reset_all_variables()
    np.testing.assert_array_equal(it.get_tensor(v), np.full((1, 4), 3, np.int8))


# --------------------------------------------------------------------------- model errors


def test_missing_kernel_names_node_op_version_and_dtype():
    b = ModelBuilder()
    x = b.input("x", (4,))
    y = b.tensor("y", (4,))
    z = b.tensor("z", (4,))
    b.op("ADD", [x, x], [y])
    b.custom_op("NoSuchOp", [y], [z], version=2)
    b.output(z)
    it = litegpu.Interpreter(model_content=b.build())
    with pytest.raises(UnsupportedOpError, match=r"node #1 NoSuchOp v2: no CPU kernel for op NoSuchOp") as ei:
        it.allocate_tensors()
    assert "float32" in str(ei.value) and isinstance(ei.value, RuntimeError)


def test_missing_version_and_dtype_explained():
    b = ModelBuilder()
    x = b.input("x", (4,), "int16")
    y = b.tensor("y", (4,), "int16")
    b.op("ADD", [x, x], [y], version=1)
    b.output(y)
    with pytest.raises(UnsupportedOpError, match=r"node #0 ADD v1: .*dtype int16"):
        litegpu.Interpreter(model_content=b.build()).allocate_tensors()
    b = ModelBuilder()
    x = b.input("x", (4,))
    y = b.tensor("y", (4,))
    b.op("ADD", [x, x], [y], version=99)
    b.output(y)
    with pytest.raises(UnsupportedOpError, match=r"node #0 ADD v99: op ADD version 99 is newer"):
        litegpu.Interpreter(model_content=b.build()).allocate_tensors()


def test_string_input_is_refused_clearly():
    b = ModelBuilder()
    x = b.input("s", (2,), "string")
    y = b.tensor("y", (2,), "string")
    b.custom_op("LGTestId", [x], [y])
    b.output(y)
    it = litegpu.Interpreter(model_content=b.build())
    assert it.get_input_details()[0]["dtype"] is np.bytes_
    with pytest.raises(ModelError, match="string tensors are not supported"):
        it.allocate_tensors()
    with pytest.raises(ValueError, match="string tensors are not supported"):
        it.set_tensor(x, np.array([b"a", b"b"]))


def _ir_model(ops, tensors, inputs, outputs) -> Model:
    return Model(3, "", (Subgraph(0, "main", tuple(tensors), tuple(ops), tuple(inputs), tuple(outputs)),))


def test_tensor_both_input_and_output_of_a_builtin_node():
    # The reader may refuse this already; the plan checks it too, in LiteRT's words.
    ts = [Tensor(0, "a", "float32", (4,)), Tensor(1, "b", "float32", (4,)), Tensor(2, "c", "float32", (4,))]
    ops = [Operator(0, "ADD", 1, (1, 1), (1,)), Operator(1, "ADD", 1, (0, 1), (2,))]
    it = litegpu.Interpreter(model_content=_ir_model(ops, ts, [1], [2]))
    with pytest.raises(ModelError, match="Tensor 1 is both input 0 and output 0"):
        it.allocate_tensors()


def test_prepare_failure_is_a_model_error_naming_the_node():
    @register_kernel("LGTestBroken")
    def _broken(ctx):
        return {}["missing option"]

    b = ModelBuilder()
    x = b.input("x", (4,))
    y = b.tensor("y", (4,))
    b.custom_op("LGTestBroken", [x], [y])
    b.output(y)
    with pytest.raises(ModelError, match=r"node #0 LGTestBroken v1: failed to prepare: a required option or field "
                                         r"\('missing option'\) is missing"):
        litegpu.Interpreter(model_content=b.build()).allocate_tensors()


def test_runtime_failure_and_bad_kernel_output_name_the_node():
    calls = {"n": 0}

    @register_kernel("LGTestFlaky")
    def _flaky(ctx):
        def run(a):
            calls["n"] += 1
            if calls["n"] == 3:
                raise IndexError("index 7 is out of bounds")
            return [a[0] * 2]
        return Prepared([ctx.inputs[0].shape], run)

    @register_kernel("LGTestWrongDtype")
    def _wrong(ctx):
        return Prepared([ctx.inputs[0].shape], lambda a: [a[0].astype(np.float64)])

    def model(code):
        b = ModelBuilder()
        x = b.input("x", (4,))
        y = b.tensor("y", (4,))
        z = b.tensor("z", (4,))
        b.op("ADD", [x, x], [y])
        b.custom_op(code, [y], [z])
        b.output(z)
        return b.build()

    it = litegpu.Interpreter(model_content=model("LGTestFlaky"))
    it.allocate_tensors()
    it.invoke()  # checked first run
    it.invoke()  # fast path
    with pytest.raises(InterpreterError, match=r"node #1 LGTestFlaky v1 failed to invoke: a tensor, option or dimension "
                                               r"index is out of range"):
        it.invoke()
    @register_kernel("LGTestRefuses")
    def _refuses(ctx):
        def run(a):
            raise ModelError("index 9 out of range for axis of size 4")
        return Prepared([ctx.inputs[0].shape], run)

    it = litegpu.Interpreter(model_content=model("LGTestRefuses"))
    it.allocate_tensors()
    with pytest.raises(ModelError, match=r"^node #1 LGTestRefuses v1: index 9 out of range"):
        it.invoke()
    it = litegpu.Interpreter(model_content=model("LGTestWrongDtype"))
    it.allocate_tensors()
    with pytest.raises(InterpreterError, match=r"node #1 LGTestWrongDtype v1: kernel returned dtype float64"):
        it.invoke()


# --------------------------------------------------------------------------- plan


def _chain_model(ops: list[str]) -> bytes:
    b = ModelBuilder()
    x = b.input("x", (2, 3))
    c = b.const("c", np.full((2, 3), 2.0, np.float32))
    cur = x
    for k, op in enumerate(ops):
        t = b.tensor(f"t{k}", (2, 3))
        b.op(op, [cur, c], [t])
        cur = t
    b.output(cur)
    return b.build()


def test_cpu_execution_plan_is_one_segment():
    it = litegpu.Interpreter(model_content=_chain_model(["ADD", "MUL", "SUB"]))
    assert it.get_execution_plan() == [
        {"backend": "cpu", "node_indices": [0, 1, 2], "op_names": ["ADD", "MUL", "SUB"]}]


def test_empty_model_runs():
    b = ModelBuilder()
    it = litegpu.Interpreter(model_content=b.build())
    it.allocate_tensors()
    it.invoke()
    assert it.get_input_details() == [] and it.get_execution_plan() == []


class _Handle:
    """A fake device buffer."""

    def __init__(self, array):
        self.array = array


class _FakeKernel(DelegateKernel):
    def __init__(self, spec, log):
        self.spec = spec
        self.log = log

    def invoke(self, inputs):
        self.log.append(("invoke", self.spec.node_indices, {k: type(v).__name__ for k, v in inputs.items()}))
        vals = {k: (v.array if isinstance(v, _Handle) else v) for k, v in inputs.items()}
        for n in self.spec.node_indices:
            op = self.spec.subgraph.operators[n]
            a, b = (vals[i] if i in vals else self.spec.tensors[i].data for i in op.inputs)
            vals[op.outputs[0]] = {"MUL": np.multiply, "ADD": np.add, "SUB": np.subtract}[op.name](a, b)
        return {o: vals[o] if o in self.spec.host_outputs else _Handle(vals[o]) for o in self.spec.outputs}

    def to_host(self, value):
        return value.array


class _FakeDelegate(Delegate):
    name = "fake"

    def __init__(self, ops=("MUL",)):
        super().__init__()
        self.ops = ops
        self.log = []

    def supports(self, node):
        return Support.yes() if node.op.name in self.ops else Support.no(f"{node.op.name} is not {self.ops}")

    def prepare(self, partition):
        self.log.append(("prepare", partition.node_indices, partition.inputs, partition.outputs,
                         sorted(partition.host_outputs)))
        return _FakeKernel(partition, self.log)


def test_delegate_segments_partition_io_and_device_passthrough():
    ops = ["MUL", "MUL", "ADD", "MUL", "SUB", "MUL"]
    data = _chain_model(ops)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    cpu = litegpu.Interpreter(model_content=data)
    cpu.allocate_tensors()
    cpu.set_tensor(0, x)
    cpu.invoke()
    want = cpu.get_tensor(cpu.get_output_details()[0]["index"])

    d = _FakeDelegate()
    it = litegpu.Interpreter(model_content=data, experimental_delegates=[d], experimental_preserve_all_tensors=True)
    it.allocate_tensors()
    assert it.get_execution_plan() == [
        {"backend": "fake", "node_indices": [0, 1], "op_names": ["MUL", "MUL"]},
        {"backend": "cpu", "node_indices": [2], "op_names": ["ADD"]},
        {"backend": "fake", "node_indices": [3], "op_names": ["MUL"]},
        {"backend": "cpu", "node_indices": [4], "op_names": ["SUB"]},
        {"backend": "fake", "node_indices": [5], "op_names": ["MUL"]},
    ]
    # tensors: x=0, c=1, t0..t5 = 2..7; CPU nodes read t1 (=3) and t3 (=5): host outputs
    prepares = [e for e in d.log if e[0] == "prepare"]
    assert prepares[0][1:] == ((0, 1), (0,), (3,), [3])
    assert prepares[2][1:] == ((5,), (6,), (7,), [7])
    it.set_tensor(0, x)
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(7), want)
    # an intermediate inside a partition never leaves it; t1 came back as a numpy array
    np.testing.assert_array_equal(it.get_tensor(3), x * 4)


def test_device_values_pass_between_partitions_of_one_delegate():
    # Partition 1 = {MUL t0, MUL s} (fake); ADD (cpu) needs t0 on the host; partition 2 = MUL (fake)
    # reads s, which only the delegate's own later partition reads, so s stays a device handle.
    b = ModelBuilder()
    x = b.input("x", (3,))
    c = b.const("c", np.full((3,), 3.0, np.float32))
    t0, s, t1, t2 = (b.tensor(name, (3,)) for name in ("t0", "s", "t1", "t2"))
    b.op("MUL", [x, c], [t0])   # fake
    b.op("MUL", [x, x], [s])    # fake
    b.op("ADD", [t0, c], [t1])  # cpu
    b.op("MUL", [s, t1], [t2])  # fake: reads s from the first partition
    b.output(t2)
    d = _FakeDelegate()
    it = litegpu.Interpreter(model_content=b.build(), experimental_delegates=[d],
                             experimental_preserve_all_tensors=True)
    it.allocate_tensors()
    prepares = [e for e in d.log if e[0] == "prepare"]
    assert prepares[0][1:] == ((0, 1), (x,), (t0, s), [t0])
    xv = np.array([1, 2, 3], np.float32)
    it.set_tensor(x, xv)
    it.invoke()
    invokes = [e for e in d.log if e[0] == "invoke"]
    assert invokes[-1][2] == {s: "_Handle", t1: "ndarray"}
    np.testing.assert_array_equal(it.get_tensor(t2), (xv * xv) * (xv * 3 + 3))
    np.testing.assert_array_equal(it.get_tensor(s), xv * xv)  # via DelegateKernel.to_host


def test_delegate_names_must_be_unique_and_not_cpu():
    data = _chain_model(["MUL"])

    class Cpu(_FakeDelegate):
        name = "cpu"

    class Passthrough(Cpu):
        passthrough = True

    with pytest.raises(ValueError, match="already taken"):
        litegpu.Interpreter(model_content=data, experimental_delegates=[_FakeDelegate(), _FakeDelegate()])
    with pytest.raises(ValueError, match="reserved"):
        litegpu.Interpreter(model_content=data, experimental_delegates=[Cpu()])
    it = litegpu.Interpreter(model_content=data, experimental_delegates=[Passthrough(), _FakeDelegate()])
    assert [s["backend"] for s in it.get_execution_plan()] == ["fake"]


def test_delegate_can_run_op_without_cpu_kernel():
    b = ModelBuilder()
    x = b.input("x", (3,))
    y = b.tensor("y", (3,))
    b.custom_op("GPUOnlyOp", [x], [y])
    b.output(y)
    data = b.build()
    with pytest.raises(UnsupportedOpError):
        litegpu.Interpreter(model_content=data).allocate_tensors()

    class K(DelegateKernel):
        def invoke(self, inputs):
            return {y: inputs[x] + 1}

    class D(Delegate):
        name = "gpuonly"

        def supports(self, node):
            return Support(node.op.name == "GPUOnlyOp")

        def prepare(self, partition):
            return K()

    it = litegpu.Interpreter(model_content=data, experimental_delegates=[D()])
    it.allocate_tensors()
    it.set_tensor(x, np.zeros(3, np.float32))
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(y), np.ones(3, np.float32))


# --------------------------------------------------------------------------- control flow


def test_call_subgraph_prepares_lazily_and_again_on_new_shapes():
    prepared_shapes = []

    @register_kernel("LGTestCall")
    def _call(ctx):
        ins, outs = ctx.subgraph_io(1)
        assert [s.dtype for s in outs] == ["float32"]

        def run(a):
            return ctx.call_subgraph(1, [a[0]])
        return Prepared([None], run)

    real_add = CPU_KERNELS.lookup("ADD", "float32", 1)

    def add_logging(ctx):
        prepared_shapes.append(ctx.inputs[0].shape)
        return real_add(ctx)

    CPU_KERNELS.register("ADD", add_logging, dtypes=("float32",), versions=range(1, 6))

    b = ModelBuilder()
    x = b.input("x", (2,), shape_signature=(-1,))
    y = b.tensor("y", (2,), shape_signature=(-1,))
    b.custom_op("LGTestCall", [x], [y])
    b.output(y)
    sg = b.add_subgraph("body")
    sx = sg.input("sx", (2,), shape_signature=(-1,))
    one = sg.const("one", np.array([1.0], np.float32))
    so = sg.tensor("so", (2,), shape_signature=(-1,))
    sg.op("ADD", [sx, one], [so])
    sg.output(so)
    it = litegpu.Interpreter(model_content=b.build())
    assert prepared_shapes == []
    for n in (2, 2, 5, 2):
        it.resize_tensor_input(x, [n])
        it.allocate_tensors()
        it.set_tensor(x, np.arange(n, dtype=np.float32))
        it.invoke()
        np.testing.assert_array_equal(it.get_tensor(y), np.arange(n, dtype=np.float32) + 1)
        # dynamic output shape is reported after invoke
        assert list(it.get_output_details()[0]["shape"]) == [n]
    # prepared once per distinct shape (the cache keeps both)
    assert prepared_shapes == [(2,), (5,)]


def test_resources_are_shared_and_survive_reset():
    @register_kernel("LGTestCounter")
    def _counter(ctx):
        res = ctx.resources

        def run(a):
            res["count"] = res.get("count", 0) + 1
            return [np.full(ctx.outputs[0].shape, res["count"], np.int32)]
        return Prepared([ctx.outputs[0].shape], run)

    b = ModelBuilder()
    x = b.input("x", (1,), "int32")
    y = b.tensor("y", (1,), "int32")
    z = b.tensor("z", (1,), "int32")
    b.custom_op("LGTestCounter", [x], [y])
    b.custom_op("LGTestCounter", [y], [z])
    b.output(z)
    it = litegpu.Interpreter(model_content=b.build())
    it.allocate_tensors()
    it.invoke()
    assert it.get_tensor(z)[0] == 2
    it.reset_all_variables()
    it.invoke()
    assert it.get_tensor(z)[0] == 4


def test_plan_never_replans_per_invoke():
    it = litegpu.Interpreter(model_content=_chain_model(["ADD"] * 5))
    it.allocate_tensors()
    plan = it._main.plan
    for _ in range(3):
        it.invoke()
    assert it._main.plan is plan
    assert dataclasses.is_dataclass(plan)


def test_constant_only_nodes_fold_once_at_allocate():
    runs = []
    real_mul = CPU_KERNELS.lookup("MUL", "float32", 1)

    def counting_mul(ctx):
        p = real_mul(ctx)
        consts = [s is not None and s.data is not None for s in ctx.inputs]

        def run(a):
            runs.append(tuple(consts))
            return p.run(a)
        return Prepared(p.output_shapes, run)

    CPU_KERNELS.register("MUL", counting_mul, dtypes=("float32",), versions=range(1, 6))
    b = ModelBuilder()
    x = b.input("x", (2, 3))
    c1 = b.const("c1", np.full((2, 3), 2.0, np.float32))
    c2 = b.const("c2", np.full((1, 3), 3.0, np.float32))
    w = b.tensor("w", (2, 3))
    w2 = b.tensor("w2", (2, 3))
    y = b.tensor("y", (2, 3))
    b.op("ADD", [x, c1], [y])     # not constant
    b.op("MUL", [c1, c2], [w])    # constant: folded
    b.op("MUL", [w, w], [w2])     # constant after folding: folded
    out = b.tensor("out", (2, 3))
    b.op("MUL", [y, w2], [out])
    b.output(out)
    data = b.build()
    ours, ref = _pair(data)
    assert ours.get_execution_plan() == [
        {"backend": "folded", "node_indices": [1, 2], "op_names": ["MUL", "MUL"]},
        {"backend": "cpu", "node_indices": [0, 3], "op_names": ["ADD", "MUL"]}]
    assert runs == [(True, True), (True, True)]  # both folded nodes ran once, at allocate
    xv = np.arange(6, dtype=np.float32).reshape(2, 3)
    for it in (ours, ref):
        it.allocate_tensors()
        it.set_tensor(x, xv)
        it.invoke()
        it.invoke()
    assert runs[2:] == [(False, True)] * 2  # only the last MUL runs per invoke, and it sees w2 as a constant
    np.testing.assert_array_equal(ours.get_tensor(out), ref.get_tensor(out))
    np.testing.assert_array_equal(ours.get_tensor(w2), np.full((2, 3), 36.0, np.float32))
    # a delegate never sees folded nodes; their outputs reach it as constant data
    d = _FakeDelegate(ops=("MUL",))
    it = litegpu.Interpreter(model_content=data, experimental_delegates=[d])
    assert it.get_execution_plan() == [
        {"backend": "folded", "node_indices": [1, 2], "op_names": ["MUL", "MUL"]},
        {"backend": "cpu", "node_indices": [0], "op_names": ["ADD"]},
        {"backend": "fake", "node_indices": [3], "op_names": ["MUL"]}]
    it.set_tensor(x, xv)
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(out), ref.get_tensor(out))


def test_public_methods_cover_litert():
    want = {n for n in dir(litert.Interpreter) if not n.startswith("_")}
    have = {n for n in dir(litegpu.Interpreter) if not n.startswith("_")}
    assert want <= have, want - have
    assert {n for n in dir(litert.SignatureRunner) if not n.startswith("_")} <= set(dir(litegpu.SignatureRunner))
