"""Tiny .tflite writer for scratch benchmarks (before litegpu.testing.ModelBuilder existed)."""
import numpy as np
from ai_edge_litert import schema_py_generated as S
import flatbuffers

_T = {"float32": S.TensorType.FLOAT32, "int32": S.TensorType.INT32}


def single_op_model(op_code, opts_type, opts, inputs, out_shape):
    """inputs: list of (shape, const ndarray or None). One float32 output."""
    m = S.ModelT(); m.version = 3
    oc = S.OperatorCodeT(); oc.builtinCode = op_code; oc.deprecatedBuiltinCode = min(op_code, 127); oc.version = 1
    m.operatorCodes = [oc]
    m.buffers = [S.BufferT()]
    sg = S.SubGraphT(); sg.tensors = []; sg.inputs = []; sg.outputs = []
    for i, (shape, data) in enumerate(inputs):
        t = S.TensorT(); t.shape = list(shape); t.name = f"t{i}".encode()
        t.type = _T[str(data.dtype)] if data is not None else S.TensorType.FLOAT32
        if data is not None:
            b = S.BufferT(); b.data = np.frombuffer(np.ascontiguousarray(data).tobytes(), np.uint8); m.buffers.append(b)
            t.buffer = len(m.buffers) - 1
        else:
            t.buffer = 0; sg.inputs.append(i)
        sg.tensors.append(t)
    t = S.TensorT(); t.shape = list(out_shape); t.name = b"out"; t.type = S.TensorType.FLOAT32; t.buffer = 0
    sg.tensors.append(t); sg.outputs = [len(sg.tensors) - 1]
    op = S.OperatorT(); op.opcodeIndex = 0; op.inputs = list(range(len(inputs))); op.outputs = sg.outputs
    op.builtinOptionsType = opts_type; op.builtinOptions = opts
    sg.operators = [op]; m.subgraphs = [sg]
    b = flatbuffers.Builder(1024); b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())
