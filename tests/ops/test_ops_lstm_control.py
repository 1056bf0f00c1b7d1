"""LSTM (full and basic kernels), UNIDIRECTIONAL_SEQUENCE_LSTM, WHILE, IF, CALL_ONCE and resource
variables against LiteRT.

Control-flow models whose subgraphs use ops of other kernel groups (ADD, LESS...) skip with a
reason while those kernels are not in the registry.
"""

from __future__ import annotations

import numpy as np
import pytest
from kb_harness import WORST, MiniRunner, compare, interpreter_available, rng
from litegpu.testing import ModelBuilder, assert_allclose_rel

TANH, RELU, RELU6, SIGMOID = 4, 1, 3, 6


def _lstm_model(op, *, n_batch, n_input, n_cell, n_output, cifg=False, peephole=False, projection=False,
                proj_bias=False, layer_norm=False, cell_clip=0.0, proj_clip=0.0, act=TANH, seq=None,
                time_major=True, diagonal=False, seed=0, version=None):
    r = rng(seed)

    def w(*shape, scale=0.4):
        return (r.standard_normal(shape) * scale).astype(np.float32)

    b = ModelBuilder()
    if seq is None:
        x = b.input("x", (n_batch, n_input))
    else:
        x = b.input("x", (seq, n_batch, n_input) if time_major else (n_batch, seq, n_input))
    rec_out = n_output
    ins = [x]
    for g in "ifco":  # input_to_{i,f,c,o}
        ins.append(-1 if cifg and g == "i" else b.const(f"x2{g}", w(n_cell, n_input)))
    for g in "ifco":  # recurrent_to_{i,f,c,o}
        if cifg and g == "i":
            ins.append(-1)
        else:
            ins.append(b.const(f"h2{g}", w(n_cell) if diagonal else w(n_cell, rec_out)))
    for g in "ifo":  # cell_to_{i,f,o}
        ins.append(b.const(f"c2{g}", w(n_cell)) if peephole and not (cifg and g == "i") else -1)
    for g in "ifco":  # gate biases
        ins.append(-1 if cifg and g == "i" else b.const(f"b{g}", w(n_cell, scale=0.2)))
    ins.append(b.const("proj", w(n_output, n_cell)) if projection else -1)
    ins.append(b.const("proj_b", w(n_output, scale=0.1)) if projection and proj_bias else -1)
    ins.append(b.tensor("h_state", (n_batch, n_output), is_variable=True))
    ins.append(b.tensor("c_state", (n_batch, n_cell), is_variable=True))
    for g in "ifco":  # layer norm coefficients
        ins.append(b.const(f"ln{g}", 1 + w(n_cell, scale=0.1)) if layer_norm and not (cifg and g == "i") else -1)
    if seq is None:
        y = b.tensor("y", (n_batch, n_output))
        b.op("LSTM", ins, [y], fused_activation_function=act, cell_clip=cell_clip, proj_clip=proj_clip,
             kernel_type=0)
    else:
        y = b.tensor("y", (seq, n_batch, n_output) if time_major else (n_batch, seq, n_output))
        b.op("UNIDIRECTIONAL_SEQUENCE_LSTM", ins, [y], version=version or (4 if diagonal else 1), fused_activation_function=act,
             cell_clip=cell_clip, proj_clip=proj_clip, time_major=time_major, diagonal_recurrent_tensors=diagonal)
    b.output(y)
    x_val = r.standard_normal(tuple(b.tensors[x].shape)).astype(np.float32)
    return b.build(), x_val


LSTM_CASES = [
    dict(),
    dict(peephole=True),
    dict(cifg=True),
    dict(cifg=True, peephole=True),
    dict(projection=True),
    dict(projection=True, proj_bias=True, proj_clip=0.3),
    dict(layer_norm=True),
    dict(layer_norm=True, cifg=True, peephole=True, projection=True),
    dict(cell_clip=0.5),
    dict(act=RELU6),
]


def _ids(c):
    return "-".join(f"{k}={v}" for k, v in c.items()) or "plain"


@pytest.mark.parametrize("cfg", LSTM_CASES, ids=_ids)
def test_lstm_full(cfg):
    n_out = 3 if cfg.get("projection") else 5
    model, x = _lstm_model("LSTM", n_batch=2, n_input=4, n_cell=5, n_output=n_out, seed=len(_ids(cfg)), **cfg)
    # Three invokes: the state variables must carry over.
    compare(model, [x], "LSTM", invokes=3)


@pytest.mark.parametrize("time_major", [True, False], ids=["time_major", "batch_major"])
@pytest.mark.parametrize("cfg", LSTM_CASES[:8], ids=_ids)
def test_unidirectional_sequence_lstm(cfg, time_major):
    n_out = 4 if cfg.get("projection") else 6
    model, x = _lstm_model("UNIDIRECTIONAL_SEQUENCE_LSTM", n_batch=3, n_input=5, n_cell=6, n_output=n_out, seq=4,
                           time_major=time_major, seed=len(_ids(cfg)), **cfg)
    compare(model, [x], "UNIDIRECTIONAL_SEQUENCE_LSTM", invokes=2)


def test_lstm_state_reset():
    """invoke, invoke, reset_all_variables, invoke: the state variables restart from zero."""
    from ai_edge_litert import interpreter as litert

    model, x = _lstm_model("UNIDIRECTIONAL_SEQUENCE_LSTM", n_batch=2, n_input=3, n_cell=4, n_output=4, seq=3,
                           peephole=True, seed=8)

    def sequence(it):
        it.allocate_tensors()
        outs = []
        for step in range(3):
            if step == 2:
                it.reset_all_variables()
            it.set_tensor(it.get_input_details()[0]["index"], x)
            it.invoke()
            outs.append(it.get_tensor(it.get_output_details()[0]["index"]))
        return outs

    ref = sequence(litert.Interpreter(model_content=model,
                                      experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF))
    if not interpreter_available():
        pytest.skip("needs litegpu.Interpreter")
    import litegpu

    ours = sequence(litegpu.Interpreter(model_content=model))
    np.testing.assert_allclose(ref[2], ref[0], rtol=0, atol=0)  # the oracle restarts from zero state
    for a, e in zip(ours, ref, strict=True):
        WORST["LSTM reset"] = max(WORST.get("LSTM reset", 0.0), assert_allclose_rel(a, e, 1e-5))


def test_unidirectional_sequence_lstm_diagonal():
    # LiteRT 2.3 has no version-4 kernel but honours the option at version 1.
    model, x = _lstm_model("UNIDIRECTIONAL_SEQUENCE_LSTM", n_batch=2, n_input=3, n_cell=4, n_output=4, seq=5,
                           diagonal=True, seed=3, version=1)
    compare(model, [x], "UNIDIRECTIONAL_SEQUENCE_LSTM", invokes=2)


def _basic_lstm_model(r, n_batch: int, n_in: int, units: int, variable_state: bool) -> bytes:
    """LiteRT's basic LSTM kernel; previous activation and state as graph inputs or variables."""
    b = ModelBuilder()
    x = b.input("x", (n_batch, n_in))
    if variable_state:
        h, c = b.tensor("h", (n_batch, units), is_variable=True), b.tensor("c", (n_batch, units), is_variable=True)
    else:
        h, c = b.input("h", (n_batch, units)), b.input("c", (n_batch, units))
    wt = b.const("w", (r.standard_normal((4 * units, n_in + units)) * 0.5).astype(np.float32))
    bias = b.const("b", (r.standard_normal(4 * units) * 0.2).astype(np.float32))
    outs = [b.tensor("activ", (n_batch, units)), b.tensor("state", (n_batch, units)),
            b.tensor("concat", (n_batch, n_in + units)), b.tensor("activ_temp", (n_batch, 4 * units))]
    b.op("LSTM", [x, h, wt, bias, c], outs, version=2, kernel_type=1, fused_activation_function=TANH)
    b.output(*outs)
    return b.build()


def test_lstm_basic_kernel():
    r = rng(4)
    n_batch, n_in, units = 2, 3, 4
    model = _basic_lstm_model(r, n_batch, n_in, units, variable_state=False)
    feeds = [r.standard_normal((n_batch, n_in)).astype(np.float32),
             r.standard_normal((n_batch, units)).astype(np.float32),
             r.standard_normal((n_batch, units)).astype(np.float32)]
    compare(model, feeds, "LSTM(basic)")


def test_lstm_basic_kernel_with_variable_state():
    """LiteRT copies the new activation and state into the previous-activation/-state inputs, so
    with variable tensors there the state carries over between invokes."""
    from litegpu.testing import run_invokes

    r = rng(5)
    model = _basic_lstm_model(r, 2, 3, 4, variable_state=True)
    feeds = [[r.standard_normal((2, 3)).astype(np.float32)]] * 3
    ref, ours = (run_invokes(model, feeds, litegpu=lg) for lg in (False, True))
    for a_outs, e_outs in zip(ours, ref, strict=True):
        for a, e in zip(a_outs, e_outs, strict=True):
            assert_allclose_rel(a, e, 1e-5)
    assert not np.allclose(ref[0][0], ref[1][0])  # the state carried over


# ---------------------------------------------------------------- control flow


def _need(*ops):
    from litegpu.cpu._registry import CPU_KERNELS

    missing = [o for o in ops if o not in CPU_KERNELS.ops()]
    if missing:
        pytest.skip(f"kernels for {', '.join(missing)} not merged yet (other kernel group)")


def _fc_branch(b, name, x, w_val):
    """A subgraph computing FC(x, w) (ops of this group only)."""
    sg = b.add_subgraph(name)
    xi = sg.input("x", (2, 3))
    y = sg.tensor("y", (2, 4))
    sg.op("FULLY_CONNECTED", [xi, sg.const("w", w_val), -1], [y])
    sg.output(y)
    return b.subgraph_index(sg)


@pytest.mark.parametrize("cond", [True, False])
def test_if(cond):
    r = rng(1)
    b = ModelBuilder()
    c = b.input("cond", (), "bool")
    x = b.input("x", (2, 3))
    y = b.tensor("y", (2, 4))
    then_i = _fc_branch(b, "then", x, r.standard_normal((4, 3)).astype(np.float32))
    else_i = _fc_branch(b, "else", x, r.standard_normal((4, 3)).astype(np.float32))
    b.op("IF", [c, x], [y], then_subgraph_index=then_i, else_subgraph_index=else_i)
    b.output(y)
    compare(b.build(), [np.array(cond), r.standard_normal((2, 3)).astype(np.float32)], "IF")


def _bad_else_branch_model(case: str) -> tuple[bytes, list[np.ndarray]]:
    """IF(cond, x) whose branches hold the same op, well-formed in the then branch (subgraph 1) and malformed
    in the else branch (subgraph 2), with the feeds that take the else branch."""
    b = ModelBuilder()
    c = b.input("cond", (), "bool")
    branches = []
    if case == "prepare":  # RESIZE_BILINEAR with both align_corners and half_pixel_centers: refused at prepare
        x, y = b.input("x", (1, 2, 2, 1)), b.tensor("y", (1, 4, 4, 1))
        for name, half in (("then", False), ("else", True)):
            sg = b.add_subgraph(name)
            xi, yi = sg.input("x", (1, 2, 2, 1)), sg.tensor("y", (1, 4, 4, 1))
            sg.op("RESIZE_BILINEAR", [xi, sg.const("size", np.array([4, 4], np.int32))], [yi], align_corners=True,
                  half_pixel_centers=half)
            sg.output(yi)
            branches.append(b.subgraph_index(sg))
        feeds = [np.ones((1, 2, 2, 1), np.float32)]
    else:  # EMBEDDING_LOOKUP of an id past the table's rows: refused at run time
        x, y = b.input("ids", (2,), "int32"), b.tensor("y", (2, 4))
        for name, rows in (("then", 8), ("else", 3)):
            sg = b.add_subgraph(name)
            xi, yi = sg.input("ids", (2,), "int32"), sg.tensor("y", (2, 4))
            sg.op("EMBEDDING_LOOKUP", [xi, sg.const("table", np.ones((rows, 4), np.float32))], [yi])
            sg.output(yi)
            branches.append(b.subgraph_index(sg))
        feeds = [np.array([0, 5], np.int32)]
    b.op("IF", [c, x], [y], then_subgraph_index=branches[0], else_subgraph_index=branches[1])
    b.output(y)
    return b.build(), [np.array(False), *feeds]


@pytest.mark.parametrize("case,words", [
    ("prepare", r"node #0 RESIZE_BILINEAR v1: half_pixel_centers and align_corners cannot both be true"),
    ("run", r"node #0 EMBEDDING_LOOKUP v1: an id is outside the table's 3 rows"),
])
def test_a_malformed_node_in_an_if_branch_is_named_with_its_subgraph_and_version(case, words):
    """A kernel's malformed-model error (``NodeContext.invalid``) names its node as ``NodeContext.fail`` does,
    version included, so the interpreter puts "subgraph N" in front where the node is not in the main subgraph;
    at prepare and at run time.  LiteRT refuses both nodes too."""
    from litegpu import ModelError
    from litegpu.testing import run_litegpu, run_litert

    model, feeds = _bad_else_branch_model(case)
    with pytest.raises(RuntimeError):
        run_litert(model, feeds)
    with pytest.raises(ModelError, match=rf"^subgraph 2 {words}$"):
        run_litegpu(model, feeds)


def _while_model():
    """Loop (i, x): while i < n: i += 1; x = x * 1.5 + i (i and n int32)."""
    b = ModelBuilder()
    i0 = b.input("i", (), "int32")
    x0 = b.input("x", (2, 3))
    cond = b.add_subgraph("cond")
    ci = cond.input("i", (), "int32")
    cond.input("x", (2, 3))
    cn = cond.const("n", np.array(5, np.int32))
    cb = cond.tensor("lt", (), "bool")
    cond.op("LESS", [ci, cn], [cb])
    cond.output(cb)
    body = b.add_subgraph("body")
    bi, bx = body.input("i", (), "int32"), body.input("x", (2, 3))
    one = body.const("one", np.array(1, np.int32))
    bi2 = body.tensor("i2", (), "int32")
    body.op("ADD", [bi, one], [bi2])
    bxs = body.tensor("xs", (2, 3))
    body.op("MUL", [bx, body.const("k", np.array(1.5, np.float32))], [bxs])
    bif = body.tensor("if", (), "float32")
    body.op("CAST", [bi2], [bif])
    bx2 = body.tensor("x2", (2, 3))
    body.op("ADD", [bxs, bif], [bx2])
    body.output(bi2, bx2)
    yi, yx = b.tensor("yi", (), "int32"), b.tensor("yx", (2, 3))
    b.op("WHILE", [i0, x0], [yi, yx], cond_subgraph_index=b.subgraph_index(cond),
         body_subgraph_index=b.subgraph_index(body))
    b.output(yi, yx)
    return b.build()


@pytest.mark.parametrize("start", [0, 3, 7])
def test_while(start):
    _need("LESS", "ADD", "MUL", "CAST")
    x = rng(2).standard_normal((2, 3)).astype(np.float32)
    compare(_while_model(), [np.array(start, np.int32), x], "WHILE")


def _with_var_names(model: bytes, names: dict[int, tuple[str, str]]) -> bytes:
    """Set (container, shared_name) of the VAR_HANDLE ops, keyed by subgraph index (one per subgraph)."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as S

    m = S.ModelT.InitFromPackedBuf(model, 0)
    for si, sg in enumerate(m.subgraphs):
        for op in sg.operators:
            code = m.operatorCodes[op.opcodeIndex]
            if max(code.builtinCode, code.deprecatedBuiltinCode) == S.BuiltinOperator.VAR_HANDLE:
                o = S.VarHandleOptionsT()
                o.container, o.sharedName = (n.encode() for n in names[si])
                op.builtinOptionsType, op.builtinOptions = S.BuiltinOptions.VarHandleOptions, o
    fb = flatbuffers.Builder(1024)
    fb.Finish(m.Pack(fb), file_identifier=b"TFL3")
    return bytes(fb.Output())


def _accumulator_model(init_value: np.ndarray) -> bytes:
    """CALL_ONCE(init: var = init_value); each invoke: var = x @ I + var; output var.

    ``x @ I + var`` is a FULLY_CONNECTED whose bias is the variable read (ops of this group only).
    """
    b = ModelBuilder()
    x = b.input("x", (1, 4))
    init = b.add_subgraph("init")
    h0 = init.tensor("h", (), "resource")
    init.op("VAR_HANDLE", [], [h0])
    init.op("ASSIGN_VARIABLE", [h0, init.const("v0", init_value)], [])
    b.op("CALL_ONCE", [], [], init_subgraph_index=b.subgraph_index(init))
    h = b.tensor("h", (), "resource")
    b.op("VAR_HANDLE", [], [h])
    cur = b.tensor("cur", (1, 4))
    b.op("READ_VARIABLE", [h], [cur])
    y = b.tensor("y", (1, 4))
    b.op("FULLY_CONNECTED", [x, b.const("eye", np.eye(4, dtype=np.float32)), cur], [y])
    b.op("ASSIGN_VARIABLE", [h, y], [])
    b.output(y)
    return _with_var_names(b.build(), {0: ("", "acc"), 1: ("", "acc")})


def _run_sequence(run_invoke, reset):
    """Outputs of invoke, invoke, reset_all_variables, invoke."""
    outs = [run_invoke(), run_invoke()]
    reset()
    outs.append(run_invoke())
    return outs


def test_call_once_and_resource_variables():
    from ai_edge_litert import interpreter as litert

    init = np.array([[10, 20, 30, 40]], np.float32)
    model = _accumulator_model(init)
    x = np.array([[1, 2, 3, 4]], np.float32)

    it = litert.Interpreter(model_content=model, num_threads=1,
                            experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
    it.allocate_tensors()

    def lrt_invoke():
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        return it.get_tensor(it.get_output_details()[0]["index"])

    ref = _run_sequence(lrt_invoke, it.reset_all_variables)
    # Sanity of the oracle: the variable keeps accumulating across reset_all_variables.
    np.testing.assert_array_equal(ref[0], init + x)
    np.testing.assert_array_equal(ref[2], init + 3 * x)
    if interpreter_available():
        import litegpu

        ours_it = litegpu.Interpreter(model_content=model)
        ours_it.allocate_tensors()

        def our_invoke():
            ours_it.set_tensor(ours_it.get_input_details()[0]["index"], x)
            ours_it.invoke()
            return ours_it.get_tensor(ours_it.get_output_details()[0]["index"])

        ours = _run_sequence(our_invoke, ours_it.reset_all_variables)
    else:
        runner = MiniRunner(model)
        ours = _run_sequence(lambda: np.array(runner.call_subgraph(0, [x])[0]), runner.reset_all_variables)
    for a, e in zip(ours, ref, strict=True):
        WORST["CALL_ONCE/VARIABLES"] = max(WORST.get("CALL_ONCE/VARIABLES", 0.0), assert_allclose_rel(a, e, 0.0))


def test_read_unassigned_variable_fails():
    """READ_VARIABLE of a variable never assigned: LiteRT fails the invoke; so do we."""
    from litegpu import LiteGPUError

    b = ModelBuilder()
    x = b.input("x", (1, 4))
    h = b.tensor("h", (), "resource")
    b.op("VAR_HANDLE", [], [h])
    cur = b.tensor("cur", (4,))
    b.op("READ_VARIABLE", [h], [cur])
    y = b.tensor("y", (1, 4))
    b.op("FULLY_CONNECTED", [x, b.const("eye", np.eye(4, dtype=np.float32)), cur], [y])
    b.output(y)
    model = _with_var_names(b.build(), {0: ("c", "nothing")})
    from ai_edge_litert import interpreter as litert

    it = litert.Interpreter(model_content=model, experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
    with pytest.raises((RuntimeError, ValueError)):
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], np.ones((1, 4), np.float32))
        it.invoke()
    with pytest.raises(LiteGPUError):
        runner = MiniRunner(model)
        runner.call_subgraph(0, [np.ones((1, 4), np.float32)])


def test_zz_report_worst():
    for k, v in sorted(WORST.items()):
        print(f"worst rel err {k}: {v:.3e}")


def test_fully_connected_weights_from_a_resource_variable():
    """FULLY_CONNECTED whose weights are read from a resource variable (their shape is known only
    at run time): it plans from the weights it gets, and the result follows the variable."""
    from ai_edge_litert import interpreter as litert

    w0 = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
    b = ModelBuilder()
    x = b.input("x", (2, 4))
    init = b.add_subgraph("init")
    h0 = init.tensor("h", (), "resource")
    init.op("VAR_HANDLE", [], [h0])
    init.op("ASSIGN_VARIABLE", [h0, init.const("w0", w0)], [])
    b.op("CALL_ONCE", [], [], init_subgraph_index=b.subgraph_index(init))
    h = b.tensor("h", (), "resource")
    b.op("VAR_HANDLE", [], [h])
    w = b.tensor("w", (3, 4), shape_signature=(-1, -1))
    b.op("READ_VARIABLE", [h], [w])
    y = b.tensor("y", (2, 3))
    b.op("FULLY_CONNECTED", [x, w, -1], [y])
    w2 = b.tensor("w2", (3, 4))
    b.op("MUL", [w, b.const("two", np.array([1.5], np.float32))], [w2])
    b.op("ASSIGN_VARIABLE", [h, w2], [])
    b.output(y)
    model = _with_var_names(b.build(), {0: ("", "w"), 1: ("", "w")})
    xv = np.array([[1, 2, 3, 4], [0.5, -1, 2, 0]], np.float32)
    import litegpu

    runs = []
    for it in (litert.Interpreter(model_content=model, experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF),
               litegpu.Interpreter(model_content=model)):
        it.allocate_tensors()
        seq = []
        for _ in range(3):
            it.set_tensor(it.get_input_details()[0]["index"], xv)
            it.invoke()
            seq.append(it.get_tensor(it.get_output_details()[0]["index"]))
        runs.append(seq)
    for ours, ref in zip(runs[1], runs[0], strict=True):
        assert_allclose_rel(ours, ref, 1e-6)
    assert not np.allclose(runs[0][0], runs[0][2])  # the variable changed the weights


def _rnn_model(op: str, batch: int, steps: int, n_in: int, units: int, act: int, time_major: bool) -> tuple:
    r = np.random.default_rng(units + steps)
    b = ModelBuilder()
    xs = (batch, n_in) if op == "RNN" else ((steps, batch, n_in) if time_major else (batch, steps, n_in))
    x = b.input("x", xs)
    w = b.const("w", (r.standard_normal((units, n_in)) * 0.4).astype(np.float32))
    rw = b.const("r", (r.standard_normal((units, units)) * 0.3).astype(np.float32))
    bias = b.const("b", (r.standard_normal(units) * 0.1).astype(np.float32))
    h = b.tensor("h", (batch, units), is_variable=True)
    ys = xs[:-1] + (units,)
    y = b.tensor("y", ys)
    opts = {"fused_activation_function": act}
    if op != "RNN":
        opts["time_major"] = time_major
    b.op(op, [x, w, rw, bias, h], [y], **opts)
    b.output(y)
    return b.build(), [r.standard_normal(xs).astype(np.float32) for _ in range(3)]


@pytest.mark.parametrize("op", ["RNN", "UNIDIRECTIONAL_SEQUENCE_RNN"])
@pytest.mark.parametrize("act,time_major", [(4, False), (1, True), (0, False), (3, True)])
def test_rnn_against_litert_over_invokes(op, act, time_major):
    """Three invokes (the hidden state carries over), then reset_all_variables and one more."""
    import litegpu
    from ai_edge_litert import interpreter as litert

    model, feeds = _rnn_model(op, 2, 4, 3, 5, act, time_major)
    runs = []
    for it in (litert.Interpreter(model_content=model, experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF),
               litegpu.Interpreter(model_content=model)):
        it.allocate_tensors()
        seq = []
        for k in range(4):
            if k == 3:
                it.reset_all_variables()
            it.set_tensor(it.get_input_details()[0]["index"], feeds[k % 3])
            it.invoke()
            seq.append(it.get_tensor(it.get_output_details()[0]["index"]))
        runs.append(seq)
    for ours, ref in zip(runs[1], runs[0], strict=True):
        assert_allclose_rel(ours, ref, 1e-5)
